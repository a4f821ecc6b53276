/* delayproxy: a TCP proxy on 127.0.0.1 that holds the bytes a client sends for
 * D milliseconds before passing them on to an upstream 127.0.0.1:PORT, and
 * passes the upstream's bytes back at once. In front of an HTTP server, every
 * request on a kept-alive connection (HTTP/1.1 clients do not pipeline) then
 * waits D ms: a stand-in for network latency.
 *
 * Why it exists: bench/remote_bench.sh measures whether read-ahead hides 20 ms
 * per request. Linux netem is not available in the containers it runs in, and
 * tests/remote/httpfix.py's Python proxy (a thread per connection, every body
 * read whole and written again) costs so much CPU on a 2-core machine that the
 * proxy alone, adding nothing, halved the rate. This one is one thread, epoll,
 * nonblocking sockets and libc only: its CPU cost is a copy of each byte.
 *
 *     delayproxy [-d MS] [-s] UPSTREAM_PORT
 *
 * Prints its port (one line) on stdout, then runs until SIGTERM/SIGINT or until
 * stdin reaches end of file (so a parent's pipe ends it); at exit, a line of
 * counts on stderr. -s: a line of counts on stderr every second as well.
 * A delay is at least MS and under MS + 1 (the timer's grain is 1 ms).
 *
 * Each accepted connection gets its own upstream connection. Client bytes are
 * queued with the time they came (a segment per read); a queue over QUEUE_MAX
 * stops reading the client until it drains, and a full return buffer stops
 * reading the upstream: backpressure, not unbounded memory. An end of file
 * (half-close) is passed on in order after the data before it; an error on
 * either side closes both.
 *
 * Built by bench/remote_bench.sh:  cc -O2 -Wall -Wextra -Werror -o delayproxy delayproxy.c */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_MAX (1u << 20) /* client bytes held per connection before reading stops */
#define DOWN_CAP (256u << 10) /* upstream bytes buffered per connection */
#define READ_MAX (64u << 10)

typedef struct seg {
    struct seg *next;
    int64_t due; /* when it may go (monotonic ns) */
    size_t len, off;
    char data[];
} seg;

struct pair;
typedef struct side {
    struct pair *p;
    int fd;
    uint32_t mask; /* events asked of epoll; 0 = not registered */
} side;

typedef struct pair {
    side c, u;           /* client, upstream */
    int connecting;      /* upstream connect() under way */
    int dead;
    seg *qh, *qt;        /* client -> upstream, delayed */
    size_t qbytes;
    int nq;              /* segments queued */
    int c_eof, u_shut;   /* client sent FIN; FIN passed to upstream */
    int u_wblock;        /* a write upstream would block */
    char *down;          /* upstream -> client */
    size_t doff, dlen;
    int u_eof, c_shut;
    struct pair *prev, *next;   /* all pairs */
    struct pair *tprev, *tnext; /* pairs with queued segments */
    int timed;
} pair;

static int ep;
static int64_t delay_ns;
static pair *pairs, *timed, *grave;
static char rbuf[READ_MAX];
static struct sockaddr_in upstream;
static int lfd, listening;
static struct {
    unsigned long long accepted, reqs, up_bytes, down_bytes, errors;
    int open, max_open, pending, max_pending; /* pending: segments in the delay */
    unsigned long long i_reqs; /* this interval */
    int i_max_pending, i_max_open;
} st;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void set_mask(side *s, uint32_t want) {
    if (s->fd < 0 || s->mask == want)
        return;
    struct epoll_event ev = {.events = want, .data.ptr = s};
    /* no interest: out of epoll, so a hang-up it always reports cannot spin */
    int op = !want ? EPOLL_CTL_DEL : s->mask ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(ep, op, s->fd, &ev) == 0)
        s->mask = want;
}

static void timed_del(pair *p) {
    if (!p->timed)
        return;
    if (p->tprev)
        p->tprev->tnext = p->tnext;
    else
        timed = p->tnext;
    if (p->tnext)
        p->tnext->tprev = p->tprev;
    p->timed = 0;
}

static void kill_pair(pair *p) {
    if (p->dead)
        return;
    p->dead = 1;
    close(p->c.fd); /* closing takes it out of epoll */
    close(p->u.fd);
    p->c.fd = p->u.fd = -1;
    timed_del(p);
    if (p->prev)
        p->prev->next = p->next;
    else
        pairs = p->next;
    if (p->next)
        p->next->prev = p->prev;
    for (seg *s = p->qh, *n; s; s = n) {
        n = s->next;
        free(s);
    }
    st.pending -= p->nq;
    p->qh = p->qt = NULL;
    free(p->down);
    p->down = NULL;
    st.open--;
    p->next = grave; /* freed after this batch of events (which may name it) */
    grave = p;
    if (!listening) { /* a descriptor is free again */
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) == 0)
            listening = 1;
    }
}

static int would_block(void) { return errno == EAGAIN || errno == EWOULDBLOCK; }

/* Send the segments that are due; pass on the client's FIN after them. */
static void flush_up(pair *p, int64_t now) {
    if (p->connecting)
        return;
    while (p->qh && p->qh->due <= now) {
        seg *s = p->qh;
        ssize_t w = send(p->u.fd, s->data + s->off, s->len - s->off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (would_block()) {
                p->u_wblock = 1;
                return;
            }
            st.errors++;
            kill_pair(p);
            return;
        }
        p->u_wblock = 0;
        st.up_bytes += (size_t)w;
        s->off += (size_t)w;
        if (s->off < s->len)
            continue;
        p->qh = s->next;
        if (!p->qh)
            p->qt = NULL;
        p->qbytes -= s->len;
        p->nq--;
        st.pending--;
        free(s);
    }
    p->u_wblock = 0;
    if (!p->qh) {
        timed_del(p);
        if (p->c_eof && !p->u_shut) {
            shutdown(p->u.fd, SHUT_WR);
            p->u_shut = 1;
        }
    }
}

static void flush_down(pair *p) {
    while (p->dlen) {
        ssize_t w = send(p->c.fd, p->down + p->doff, p->dlen, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (would_block())
                return;
            st.errors++;
            kill_pair(p);
            return;
        }
        st.down_bytes += (size_t)w;
        p->doff += (size_t)w;
        p->dlen -= (size_t)w;
    }
    p->doff = 0;
    if (p->u_eof && !p->c_shut) {
        shutdown(p->c.fd, SHUT_WR);
        p->c_shut = 1;
    }
}

static void read_client(pair *p, int64_t now) {
    while (!p->c_eof && p->qbytes < QUEUE_MAX) {
        ssize_t r = read(p->c.fd, rbuf, sizeof rbuf);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (!would_block()) {
                st.errors++;
                kill_pair(p);
            }
            return;
        }
        if (r == 0) {
            p->c_eof = 1;
            if (!p->qh)
                flush_up(p, now); /* nothing before the FIN: pass it on */
            return;
        }
        seg *s = malloc(sizeof *s + (size_t)r);
        if (!s) {
            st.errors++;
            kill_pair(p);
            return;
        }
        memcpy(s->data, rbuf, (size_t)r);
        s->len = (size_t)r;
        s->off = 0;
        s->due = now + delay_ns;
        s->next = NULL;
        if (p->qt)
            p->qt->next = s;
        else
            p->qh = s;
        p->qt = s;
        p->qbytes += (size_t)r;
        p->nq++;
        st.reqs++;
        st.i_reqs++;
        if (++st.pending > st.max_pending)
            st.max_pending = st.pending;
        if (st.pending > st.i_max_pending)
            st.i_max_pending = st.pending;
        if (!p->timed) {
            p->tprev = NULL;
            p->tnext = timed;
            if (timed)
                timed->tprev = p;
            timed = p;
            p->timed = 1;
        }
    }
}

static void read_upstream(pair *p) {
    if (p->doff && p->doff + p->dlen == DOWN_CAP) {
        memmove(p->down, p->down + p->doff, p->dlen);
        p->doff = 0;
    }
    while (!p->u_eof && p->doff + p->dlen < DOWN_CAP) {
        ssize_t r = read(p->u.fd, p->down + p->doff + p->dlen, DOWN_CAP - p->doff - p->dlen);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (!would_block()) {
                st.errors++;
                kill_pair(p);
            }
            return;
        }
        if (r == 0) {
            p->u_eof = 1;
            break;
        }
        p->dlen += (size_t)r;
        flush_down(p); /* at once: the return path has no delay */
        if (p->dead)
            return;
    }
    flush_down(p);
}

/* What each side waits for now; a pair done both ways is closed. */
static void update(pair *p) {
    if (p->dead)
        return;
    if (p->u_shut && p->c_shut && !p->dlen) {
        kill_pair(p);
        return;
    }
    set_mask(&p->c, (!p->c_eof && p->qbytes < QUEUE_MAX ? EPOLLIN : 0) | (p->dlen ? EPOLLOUT : 0));
    set_mask(&p->u, p->connecting ? EPOLLOUT
                                  : (!p->u_eof && p->doff + p->dlen < DOWN_CAP ? EPOLLIN : 0) |
                                        (p->u_wblock ? EPOLLOUT : 0));
}

static void tune(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void accept_all(void) {
    for (;;) {
        int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* out of descriptors: stop accepting until a pair closes */
                if (epoll_ctl(ep, EPOLL_CTL_DEL, lfd, NULL) == 0)
                    listening = 0;
                fprintf(stderr, "delayproxy: accept: %s (waiting for a connection to close)\n",
                        strerror(errno));
            }
            return;
        }
        int u = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        pair *p = u >= 0 ? calloc(1, sizeof *p) : NULL;
        char *down = p ? malloc(DOWN_CAP) : NULL;
        if (!down) {
            fprintf(stderr, "delayproxy: no socket or memory for a connection: %s\n", strerror(errno));
            st.errors++;
            free(p);
            if (u >= 0)
                close(u);
            close(c);
            continue;
        }
        tune(c);
        tune(u);
        p->c = (side){p, c, 0};
        p->u = (side){p, u, 0};
        p->down = down;
        p->connecting = 1;
        if (connect(u, (struct sockaddr *)&upstream, sizeof upstream) == 0)
            p->connecting = 0;
        else if (errno != EINPROGRESS) {
            fprintf(stderr, "delayproxy: connect to upstream port %d: %s\n", ntohs(upstream.sin_port),
                    strerror(errno));
            st.errors++;
            close(u);
            close(c);
            free(down);
            free(p);
            continue;
        }
        p->next = pairs;
        if (pairs)
            pairs->prev = p;
        pairs = p;
        st.accepted++;
        if (++st.open > st.max_open)
            st.max_open = st.open;
        if (st.open > st.i_max_open)
            st.i_max_open = st.open;
        update(p);
    }
}

static void on_event(side *s, uint32_t ev, int64_t now) {
    pair *p = s->p;
    if (p->dead)
        return;
    if (s == &p->u && p->connecting) {
        int err = 0;
        socklen_t l = sizeof err;
        if (getsockopt(p->u.fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
            err = errno;
        if (err) {
            fprintf(stderr, "delayproxy: connect to upstream port %d: %s\n", ntohs(upstream.sin_port),
                    strerror(err));
            st.errors++;
            kill_pair(p);
            return;
        }
        p->connecting = 0;
        flush_up(p, now);
        update(p);
        return;
    }
    int in = ev & (EPOLLIN | EPOLLHUP | EPOLLERR), out = ev & (EPOLLOUT | EPOLLHUP | EPOLLERR);
    if (s == &p->c) {
        if (in && (s->mask & EPOLLIN))
            read_client(p, now);
        if (!p->dead && out && (s->mask & EPOLLOUT))
            flush_down(p);
    } else {
        if (out && (s->mask & EPOLLOUT))
            flush_up(p, now);
        if (!p->dead && in && (s->mask & EPOLLIN))
            read_upstream(p);
    }
    update(p);
}

static void report(const char *what, double t) {
    fprintf(stderr,
            "delayproxy: %s t=%.1fs accepted %llu, open %d (max %d, this interval %d), requests "
            "%llu (this interval %llu), in the delay at once max %d (this interval %d), up %llu B, "
            "down %llu B, errors %llu\n",
            what, t, st.accepted, st.open, st.max_open, st.i_max_open, st.reqs, st.i_reqs,
            st.max_pending, st.i_max_pending, st.up_bytes, st.down_bytes, st.errors);
}

int main(int argc, char **argv) {
    long ms = 20;
    int every = 0, opt;
    while ((opt = getopt(argc, argv, "d:s")) != -1) {
        if (opt == 'd')
            ms = strtol(optarg, NULL, 10);
        else if (opt == 's')
            every = 1;
        else
            goto usage;
    }
    long port = optind + 1 == argc ? strtol(argv[optind], NULL, 10) : 0;
    if (port <= 0 || port > 65535 || ms < 0 || ms > 600000) {
    usage:
        fprintf(stderr, "usage: delayproxy [-d MS] [-s] UPSTREAM_PORT\n"
                        "  forwards 127.0.0.1:(printed port) to 127.0.0.1:UPSTREAM_PORT, holding "
                        "client bytes MS ms (default 20)\n");
        return 2;
    }
    delay_ns = ms * 1000000;
    upstream.sin_family = AF_INET;
    upstream.sin_port = htons((uint16_t)port);
    upstream.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    struct rlimit rl; /* two descriptors a connection: as many as allowed */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN); /* a reader gone is an error from send/write, not a death */
    int sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);

    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (sfd < 0 || lfd < 0 || ep < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(lfd, 1024) < 0 || getsockname(lfd, (struct sockaddr *)&a, &al) < 0) {
        fprintf(stderr, "delayproxy: cannot listen on 127.0.0.1: %s\n", strerror(errno));
        return 1;
    }
    /* data.ptr NULL: the listener; &sfd: a signal; &ep: stdin */
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    listening = 1;
    ev.data.ptr = &sfd;
    epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
    ev.data.ptr = &ep;
    epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev); /* fails for a regular file or /dev/null: then only a signal ends it */
    printf("%d\n", ntohs(a.sin_port));
    fflush(stdout);

    const int64_t t0 = now_ns();
    int64_t next_report = t0 + 1000000000;
    struct epoll_event evs[256];
    for (int stop = 0; !stop;) {
        int64_t now = now_ns(), wake = every ? next_report : INT64_MAX;
        for (pair *p = timed; p; p = p->tnext)
            if (p->qh && !p->connecting && !p->u_wblock && p->qh->due < wake)
                wake = p->qh->due;
        int timeout = wake == INT64_MAX ? -1
                      : wake <= now     ? 0
                                        : (int)((wake - now + 999999) / 1000000);
        int n = epoll_wait(ep, evs, 256, timeout);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "delayproxy: epoll_wait: %s\n", strerror(errno));
            break;
        }
        now = now_ns();
        for (int i = 0; i < n; i++) {
            void *d = evs[i].data.ptr;
            if (!d) {
                accept_all();
            } else if (d == &sfd) {
                stop = 1;
            } else if (d == &ep) {
                ssize_t r = read(0, rbuf, sizeof rbuf);
                if (r == 0 || (r < 0 && errno != EINTR && !would_block()))
                    stop = 1; /* end of file (or an unreadable stdin): the parent is gone */
            } else {
                on_event(d, evs[i].events, now);
            }
        }
        for (pair *p = timed, *nx; p; p = nx) { /* what the delay lets go now */
            nx = p->tnext;
            if (!p->u_wblock) {
                flush_up(p, now);
                update(p);
            }
        }
        while (grave) {
            pair *p = grave;
            grave = p->next;
            free(p);
        }
        if (every && now >= next_report) {
            report("every second:", (double)(now - t0) / 1e9);
            st.i_reqs = 0;
            st.i_max_pending = st.pending;
            st.i_max_open = st.open;
            next_report += 1000000000;
            if (next_report <= now)
                next_report = now + 1000000000;
        }
    }
    st.i_reqs = 0;
    report("exit:", (double)(now_ns() - t0) / 1e9);
    while (pairs)
        kill_pair(pairs);
    while (grave) {
        pair *p = grave;
        grave = p->next;
        free(p);
    }
    close(lfd);
    close(sfd);
    close(ep);
    return 0;
}
