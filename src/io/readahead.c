/*
 * readahead.c — read-ahead for remote objects read by ranges (readahead.h).
 *
 * DESIGN
 * sl_io__will_need(off, n) queues the range as an extent; a hint that starts
 * within RA_GAP bytes of a queued extent's end joins it (one request for
 * neighbours, up to RA_EXTENT_MAX). One process-wide event loop (ra_loop,
 * started on first use) takes extents in hint order and fetches each with one
 * range request, up to SLUICE_HTTP_READAHEAD (default 64) at once (the
 * transport's retries). A read inside an extent waits for it and copies from it; an
 * extent is freed once the bytes hinted into it have been read, and hints
 * are dropped while RA_BYTES_MAX bytes are held. A read nobody hinted, or
 * whose extent failed, is a plain range request (whose error is the one
 * reported). One mutex (ra.mu) guards every extent, queue and count. After
 * fork() the child has no loop: it marks extents being fetched failed and
 * starts its own loop on its first hint.
 *
 * All mutable state of the file is one struct, `ra`, under ra.mu.
 */
#include "io/readahead.h"
#include "core/worker.h"

#include <pthread.h>
#include <string.h>

#define RA_GAP ((uint64_t)64 << 10)
#define RA_EXTENT_MAX SL_RA_EXTENT_MAX
#define RA_BYTES_MAX ((uint64_t)256 << 20)

enum { EXT_QUEUED, EXT_FETCHING, EXT_READY, EXT_FAILED };

typedef struct sl_ra_extent extent;
struct sl_ra_extent {
    extent *next;  /* in its object's list */
    extent *qnext; /* in the queue (EXT_QUEUED) */
    sl_ra_obj *io;
    uint64_t off, len;
    uint8_t *data;
    int state;
    int64_t need;         /* hinted bytes not read yet */
};

/* The read-ahead's process-wide state. The loop's thread (ra_loop, below):
 * started under ra.mu by the first hint, and never stopped (it lives as long
 * as the process). A forked child has none (core/worker.h): its first hint
 * starts its own. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    extent *head, *tail; /* the queue */
    sl_ra_obj *objs;     /* objects with extents (for fork) */
    uint64_t bytes;      /* held in extents */
    int places;          /* SLUICE_HTTP_READAHEAD */
    sl_workers ws;       /* the loop's thread */
    CURLM *multi;        /* the loop's */
    int polling;         /* the loop is polling, not woken yet */
} ra = {.mu = PTHREAD_MUTEX_INITIALIZER,
        .work = PTHREAD_COND_INITIALIZER,
        .done = PTHREAD_COND_INITIALIZER};

static void fork_prepare(void) { pthread_mutex_lock(&ra.mu); }

static void fork_parent(void) { pthread_mutex_unlock(&ra.mu); }

/* The child has none of the parent's threads: extents being fetched fail
 * (their readers fetch for themselves), and the loop starts again when
 * needed (ra.ws: core/worker.h's fork policy; the lock is this handler's
 * business). */
static void fork_child(void) {
    /* The parent's threads may have been waiting on these: a condition
     * variable copied with waiters that do not exist here blocks the child's
     * first signal for good (glibc waits for them to leave). No thread of the
     * child waits yet: fresh ones. */
    ra.work = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    ra.done = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    ra.multi = NULL; /* the parent's loop, with its connections: dropped */
    ra.polling = 0;
    for (sl_ra_obj *h = ra.objs; h; h = h->next) {
        for (extent *e = h->ext; e; e = e->next)
            if (e->state == EXT_FETCHING)
                e->state = EXT_FAILED;
        h->inflight = 0;
    }
    pthread_mutex_unlock(&ra.mu);
}

void sl_ra__init(void) {
    ra.places = (int)sl__setting_int("SLUICE_HTTP_READAHEAD");
    if (sl__workers_init(&ra.ws, "readahead", 1, NULL, NULL) < 0)
        SL_LOG_WARN("%s; reading without read-ahead", sl_errmsg());
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void ra_unlink(sl_ra_obj *h, extent *e) { /* under ra.mu; e not queued */
    for (extent **pp = &h->ext; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    ra.bytes -= e->len;
    sl__free(e->data);
    sl__free(e);
    if (!h->ext && h->prev) {
        *h->prev = h->next;
        if (h->next)
            h->next->prev = h->prev;
        h->prev = NULL;
        h->next = NULL;
    }
}

/* The read-ahead loop: one thread drives up to ra.places range requests
 * at once from one event loop (a curl multi handle), each with sl_http__perform's
 * retries (req_start/req_end; a request waiting out its backoff leaves the
 * others running). One thread, not a thread per request in flight: on 2
 * cores the 64 fetch threads, each woken for its own request, cost more CPU
 * than the loop (bench/README.md, "Read-ahead from one event loop").
 * A hint wakes it by ra_work when it sleeps with nothing to do, and by
 * curl_multi_wakeup while it polls (ra.polling). It lives as long as the
 * process; a forked child starts its own on its first hint (core/worker.h),
 * with a multi handle of its own (the parent's is dropped: its sockets are
 * the parent's). */

/* The loop's places: q[i] a request (SL_MREQ_OVER when the place is free) and
 * pl[i] what it fetches. Places do not move: curl holds pointers into x and
 * q[i].r while a transfer runs. */
typedef struct ra_place {
    extent *e;     /* NULL: free */
    CURL *h;       /* the place's own handle, kept from one transfer to the next */
    uint8_t *d;
    sl_xfer x;
    long st;
} ra_place;

typedef struct ra_loop_ctx {
    sl_mreq *q;
    ra_place *pl;
} ra_loop_ctx;

/* The transfer of place i is over with rc: its extent gets the bytes, or
 * fails (its reader then asks for itself, and that request says why). */
static void ra_finish(ra_place *t, int rc) {
    extent *e = t->e;
    if (rc == SL_OK && t->x.range_ignored)
        e->io->range_ignored(e->io);
    if (rc == SL_OK && t->x.got != e->len)
        rc = sl__error(SL_ECORRUPT, "%s: truncated (read past the end at offset %llu)",
                       e->io->name, (unsigned long long)(e->off + t->x.got));
    if (rc != SL_OK)
        SL_LOG_DEBUG("read-ahead: %s", sl_errmsg());
    pthread_mutex_lock(&ra.mu);
    if (e->state == EXT_FETCHING) { /* not failed by a fork meanwhile */
        e->data = rc == SL_OK ? t->d : NULL;
        e->state = rc == SL_OK ? EXT_READY : EXT_FAILED;
        if (rc != SL_OK)
            sl__free(t->d);
        e->io->inflight--;
    } else {
        sl__free(t->d);
    }
    pthread_cond_broadcast(&ra.done);
    pthread_mutex_unlock(&ra.mu);
    t->e = NULL;
    t->d = NULL;
}

static void ra_over(int i, void *user) {
    ra_loop_ctx *c = user;
    ra_finish(&c->pl[i], c->q[i].r.rc);
}

/* Queued extents into free places; under ra.mu. Returns how many were taken. */
static int ra_take(ra_place *pl, int cap) {
    int took = 0;
    for (int i = 0; i < cap && ra.head; i++) {
        if (pl[i].e)
            continue;
        extent *e = ra.head;
        ra.head = e->qnext;
        e->state = EXT_FETCHING;
        e->io->inflight++;
        pl[i].e = e;
        pl[i].d = NULL;
        took++;
    }
    if (!ra.head)
        ra.tail = NULL;
    return took;
}

/* A taken extent's request, to start on the next turn (or over at once,
 * when out of memory). */
static void ra_prepare(sl_mreq *q, ra_place *t) {
    extent *e = t->e;
    e->io->prepare(e->io, &t->x); /* name, dialect, version */
    t->x.off = e->off;
    t->x.len = e->len;
    t->x.fd = -1;
    sl_http__req_init(&q->r, &t->x, e->io->url, 0, &t->st);
    q->state = SL_MREQ_WAITING;
    q->wake = 0;
    if (!t->h)
        t->h = curl_easy_init();
    t->d = sl__malloc(e->len ? (size_t)e->len : 1);
    t->x.dst = t->d;
    t->x.h = t->h;
    if (!t->h || !t->d) {
        q->state = SL_MREQ_OVER;
        ra_finish(t, sl__oom("reading ahead"));
    }
}

static void *ra_loop(void *arg) {
    (void)arg;
    int cap = ra.places;
    ra_loop_ctx c = {sl__calloc((size_t)cap, sizeof *c.q), sl__calloc((size_t)cap, sizeof *c.pl)};
    CURLM *m = curl_multi_init();
    pthread_mutex_lock(&ra.mu);
    if (!c.q || !c.pl || !m) {
        /* no loop: what is queued fails as it comes (readers fetch for themselves) */
        SL_LOG_WARN("read-ahead: cannot start its event loop (out of memory); reading "
                    "without read-ahead");
        for (;;) {
            while (!ra.head)
                pthread_cond_wait(&ra.work, &ra.mu);
            for (; ra.head; ra.head = ra.head->qnext)
                ra.head->state = EXT_FAILED;
            ra.tail = NULL;
            pthread_cond_broadcast(&ra.done);
        }
    }
    /* room to keep a connection alive for every place: with curl's default
     * size, connections were closed between bursts and opened again (through
     * a proxy, 435 connections an epoch where the fetch threads made 81) */
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)cap);
    ra.multi = m;
    int busy = 0; /* places in use */
    for (;;) {
        while (!ra.head && !busy)
            pthread_cond_wait(&ra.work, &ra.mu);
        int took = ra_take(c.pl, cap);
        ra.polling = 1;
        pthread_mutex_unlock(&ra.mu);
        for (int i = 0; took && i < cap; i++)
            if (c.pl[i].e && !c.pl[i].d)
                ra_prepare(&c.q[i], &c.pl[i]);
        long ms = sl_http__mreq_turn(m, c.q, cap, ra_over, &c);
        busy = 0;
        for (int i = 0; i < cap; i++)
            busy += c.pl[i].e != NULL;
        if (ms && busy)
            curl_multi_poll(m, NULL, 0, (int)ms, NULL);
        pthread_mutex_lock(&ra.mu);
        ra.polling = 0;
    }
    return NULL;
}

void sl_ra__hint(sl_ra_obj *h, uint64_t off, size_t n) {
    if (!n || n > RA_EXTENT_MAX)
        return;
    pthread_mutex_lock(&ra.mu);
    for (extent *e = h->ext; e; e = e->next) {
        if (off >= e->off && off + n <= e->off + e->len) { /* inside: a gap joined */
            e->need += (int64_t)n;
            goto out;
        }
        if (e->state != EXT_QUEUED || off > e->off + e->len + RA_GAP ||
            off + n + RA_GAP < e->off)
            continue;
        /* a neighbour (on either side) of a range not yet asked for: one
         * request for both */
        uint64_t lo = off < e->off ? off : e->off;
        uint64_t hi = off + n > e->off + e->len ? off + n : e->off + e->len;
        if (hi - lo > RA_EXTENT_MAX || ra.bytes + (hi - lo - e->len) > RA_BYTES_MAX)
            continue;
        ra.bytes += hi - lo - e->len;
        e->off = lo;
        e->len = hi - lo;
        e->need += (int64_t)n;
        goto out;
    }
    if (ra.bytes + n > RA_BYTES_MAX)
        goto out; /* enough in flight: the read will fetch it */
    if (!sl__workers_count(&ra.ws) && sl__workers_start(&ra.ws, ra_loop, NULL) < 0)
        SL_LOG_DEBUG("read-ahead: %s", sl_errmsg());
    if (!sl__workers_count(&ra.ws))
        goto out; /* no loop to fetch it: the read will */
    extent *e = sl__calloc(1, sizeof *e);
    if (!e)
        goto out;
    e->io = h;
    e->off = off;
    e->len = n;
    e->need = (int64_t)n;
    e->state = EXT_QUEUED;
    if (!h->ext) {
        h->next = ra.objs;
        if (ra.objs)
            ra.objs->prev = &h->next;
        h->prev = &ra.objs;
        ra.objs = h;
    }
    e->next = h->ext;
    h->ext = e;
    ra.bytes += n;
    if (ra.tail)
        ra.tail->qnext = e;
    else
        ra.head = e;
    ra.tail = e;
    pthread_cond_signal(&ra.work);
    if (ra.polling && ra.multi) {
        ra.polling = 0; /* one wakeup a poll */
        curl_multi_wakeup(ra.multi);
    }
out:
    pthread_mutex_unlock(&ra.mu);
}

/* A read served from read-ahead: 1 when done (copied), 0 when not there. */
int sl_ra__read(sl_ra_obj *h, void *dst, size_t n, uint64_t off) {
    int done = 0;
    pthread_mutex_lock(&ra.mu);
again:
    for (extent *e = h->ext; e; e = e->next) {
        if (off < e->off || off + n > e->off + e->len)
            continue;
        if (e->state == EXT_QUEUED || e->state == EXT_FETCHING) {
            /* another reader may free e meanwhile: look again after */
            pthread_cond_wait(&ra.done, &ra.mu);
            goto again;
        }
        if (e->state == EXT_READY) {
            memcpy(dst, e->data + (off - e->off), n);
            done = 1;
            e->need -= (int64_t)n;
            if (e->need <= 0)
                ra_unlink(h, e);
        } else {
            ra_unlink(h, e); /* failed: the caller's own request reports why */
        }
        break;
    }
    pthread_mutex_unlock(&ra.mu);
    return done;
}

/* Forget this object's extents: dequeue, wait for those being fetched. */
void sl_ra__drop(sl_ra_obj *h) {
    pthread_mutex_lock(&ra.mu);
    extent **pp = &ra.head, *last = NULL;
    while (*pp) {
        if ((*pp)->io == h) {
            *pp = (*pp)->qnext;
        } else {
            last = *pp;
            pp = &(*pp)->qnext;
        }
    }
    ra.tail = last;
    while (h->inflight > 0)
        pthread_cond_wait(&ra.done, &ra.mu);
    while (h->ext)
        ra_unlink(h, h->ext);
    pthread_mutex_unlock(&ra.mu);
}


