/*
 * io_remote.c — the remote provider of the byte-access layer (io.h): objects
 * behind a URL, for every scheme whose row in io.c's table names it
 * (http://, https://, s3://), read over HTTP.
 *
 * It is built of parts, each behind its own header: the transport (http.h:
 * curl handles, the one retry loop, the one event-loop driver, the checks of
 * a whole answer), the scheme's dialect (sl_io_dialect: the URL a name is
 * fetched from, the signature of a request, listing; io_s3.c for s3://,
 * none for http(s)://), the shard cache (cache.h) and read-ahead
 * (readahead.h). A scheme added to io.c's table with a dialect gets all of
 * them: this file never asks which scheme a name has.
 *
 * DESIGN
 * - open: a HEAD request gives the size (and ETag/Last-Modified, which name the
 *   object's version in the cache). Without SL_IO_MAP each read is one range
 *   GET (or a copy from read-ahead). With SL_IO_MAP the object is fetched
 *   whole into the shard cache (a file on local disk) and mapped, so the
 *   zero-copy formats (.slr, tar, TFRecord) read it unchanged; with no room
 *   in the cache (SLUICE_CACHE_BYTES 0) it is held in memory instead.
 * - Versions: the version an object was opened at is held for every later
 *   request of it (x->want_*); a reopen at a version the server no longer
 *   has reads on the shard cache's copy of it, else fails naming both.
 * - Integrity: an object fetched whole is asked for without a Range, and the
 *   checksums its answer gives are checked (sl_http__sums_check) before it
 *   enters the cache or memory; a mismatch is fetched again once. A caller
 *   whose own check fails (a .slr record, an index's checksum) has the entry
 *   dropped (sl_io__forget) and opens again (sl_io__open_checked).
 * - Revalidation: a HEAD's answer is kept in the cache's memo for
 *   SLUICE_CACHE_TTL seconds (default 300), so a warm run asks nothing; HEADs
 *   of one URL in flight at once in a process are asked once.
 * - A server that ignores Range: after its first whole answer to a range
 *   request, an object read by ranges is fetched whole once (become_whole).
 *
 * All mutable state of the file is one struct, `remote` (the parts' init,
 * HEADs in flight, what was said once); each part installs its own
 * pthread_atfork handlers when it starts (this file's, for the HEADs in
 * flight, last).
 *
 * Thread safety: every function may run on many threads at once.
 */
#include "io/io.h"
#include "io/cache.h"
#include "io/http.h"
#include "io/readahead.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* HEADs in flight tracked at once; objects whose replacement was said. */
#define HEAD_FLIGHTS 64
#define KEPT_SAID_MAX 256

static struct {
    pthread_once_t once;
    int init_rc;
    pthread_mutex_t head_mu;
    pthread_cond_t head_cv;
    uint64_t head_flight[HEAD_FLIGHTS];
    int nhead_flight;
    pthread_mutex_t kept_mu;
    uint64_t kept_said[KEPT_SAID_MAX];
    int nkept_said;
    atomic_int said_range_ignored;
    uint64_t open_bytes; /* SLUICE_HTTP_OPEN_BYTES: an SL_IO_EDGES open's suffix (its
                            prefix: this, at most SL_IO_EDGE_HEAD) */
} remote = {.once = PTHREAD_ONCE_INIT,
            .head_mu = PTHREAD_MUTEX_INITIALIZER,
            .head_cv = PTHREAD_COND_INITIALIZER,
            .kept_mu = PTHREAD_MUTEX_INITIALIZER};

/* fork(): the HEADs in flight's lock is held across it (installed after the
 * transport's and read-ahead's, so it is taken first: in the order the
 * locks were taken before the parts); the child forgets the parent's HEADs. */
static void fork_prepare(void) { pthread_mutex_lock(&remote.head_mu); }

static void fork_parent(void) { pthread_mutex_unlock(&remote.head_mu); }

static void fork_child(void) {
    remote.head_cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    remote.nhead_flight = 0; /* the parent's HEADs in flight never land here */
    pthread_mutex_unlock(&remote.head_mu);
}

static void init(void) {
    remote.init_rc = sl_http__init();
    if (remote.init_rc < 0)
        return;
    remote.open_bytes = (uint64_t)sl__setting_int("SLUICE_HTTP_OPEN_BYTES");
    sl_cache__init();
    sl_ra__init();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static int ensure_init(void) {
    SL_TRY(sl_settings_check()); /* before init reads them */
    pthread_once(&remote.once, init);
    if (remote.init_rc)
        return sl_http__init(); /* its error again: what is missing or failed */
    return SL_OK;
}

void sl_io__cache_set_bytes(uint64_t bytes) {
    if (ensure_init() != SL_OK)
        return;
    sl_cache__set_bytes(bytes);
}

/* The URL a name is fetched from: itself, or the dialect's. */
static int resolve(const sl_io_dialect *d, const char *name, char *url, size_t cap) {
    if (d && d->resolve)
        return d->resolve(name, url, cap);
    int n = snprintf(url, cap, "%s", name);
    if (n < 0 || (size_t)n >= cap)
        return sl__error(SL_EINVAL, "%.200s...: URL too long", name);
    return SL_OK;
}

/* HEADs in flight in this process, by URL hash (under remote.head_mu): a thread
 * that finds its URL here waits for that answer (remembered in the cache's memo)
 * instead of asking the same question at the same time, as when a shard's
 * schema open and its opener thread's open meet after the TTL ran out. At
 * most HEAD_FLIGHTS at once are tracked; past that a HEAD goes alone. */

/* 1 if this thread now owns the HEAD of `key` (remove it with head_land),
 * 0 if another thread's HEAD of it ended meanwhile (ask the memo again),
 * -1 if the table is full (ask without owning). */
static int head_take_off(uint64_t key) {
    pthread_mutex_lock(&remote.head_mu);
    int waited = 0;
    for (;;) {
        int i = 0;
        while (i < remote.nhead_flight && remote.head_flight[i] != key)
            i++;
        if (i == remote.nhead_flight)
            break;
        waited = 1;
        pthread_cond_wait(&remote.head_cv, &remote.head_mu);
    }
    int r = waited ? 0 : remote.nhead_flight < HEAD_FLIGHTS ? 1 : -1;
    if (r == 1)
        remote.head_flight[remote.nhead_flight++] = key;
    pthread_mutex_unlock(&remote.head_mu);
    return r;
}

static void head_land(uint64_t key) {
    pthread_mutex_lock(&remote.head_mu);
    for (int i = 0; i < remote.nhead_flight; i++)
        if (remote.head_flight[i] == key) {
            remote.head_flight[i] = remote.head_flight[--remote.nhead_flight];
            break;
        }
    pthread_cond_broadcast(&remote.head_cv);
    pthread_mutex_unlock(&remote.head_mu);
}

/* HEAD `name`: size and validator (or what was said within the TTL). SL_END
 * (quiet) on 404 when quiet_404. */
static int head(const sl_io_dialect *d, const char *name, const char *url, int quiet_404,
                sl_xfer *x, int *is_dir) {
    memset(x, 0, sizeof *x);
    x->name = name;
    x->dialect = d;
    x->head = 1;
    x->fd = -1;
    long st;
    *is_dir = 0;
    int memo = sl_cache__memo_on();
    const uint64_t key = XXH3_64bits(url, strlen(url));
    int owner = 0;
    for (;;) {
        sl_cache_memo m;
        if (memo && sl_cache__memo_get(url, &m)) {
            x->from_memo = 1;
            x->total = m.total;
            x->eff_dir = m.is_dir;
            memcpy(x->etag, m.etag, sizeof x->etag);
            memcpy(x->last_mod, m.last_mod, sizeof x->last_mod);
            *is_dir = x->eff_dir;
            return SL_OK;
        }
        if (!memo || (owner = head_take_off(key)) != 0)
            break;
        /* another thread's HEAD of it ended: its answer is in the memo (or,
         * for a 404 or an error, not: then ask, owning the question) */
    }
    int rc = sl_http__perform(x, url, quiet_404, &st);
    if (rc == SL_OK && (x->eff_dir || x->total >= 0) && memo) {
        sl_cache_memo m = {.total = x->total, .is_dir = x->eff_dir};
        memcpy(m.etag, x->etag, sizeof m.etag);
        memcpy(m.last_mod, x->last_mod, sizeof m.last_mod);
        sl_cache__memo_put(url, &m);
    }
    if (owner == 1)
        head_land(key);
    if (rc != SL_OK)
        return rc; /* an error, or SL_END for a quiet 404 */
    *is_dir = x->eff_dir;
    return SL_OK;
}

/* ---- the provider --------------------------------------------------------------- */

typedef struct http_io {
    sl_io base;
    const sl_io_dialect *dialect; /* the scheme's (io.c's table), or NULL */
    char url[SL_URL_MAX];
    uint8_t *heap;      /* the object in memory (no disk cache), or NULL */
    sl_cache_entry entry; /* its shard cache entry, mapped, or none */
    const uint8_t *cached; /* opened for ranges, but whole in the cache: that
                              entry's bytes, reads copy from them */
    sl_ra_obj ra;       /* read by ranges, ahead (readahead.h) */
    /* A server that ignores Range answers every range request with the whole
     * object: after the first such answer the object is fetched whole, once,
     * into `whole` (stored with release, read with an acquire load), and
     * reads copy from it, instead of one whole-object transfer per read.
     * whole_state: 0 not asked, 1 being fetched (by the thread that set it;
     * others read on by ranges meanwhile: no lock, so a fork cannot leave
     * one held), 2 done or given up. */
    atomic_int whole_state;
    uint8_t *whole;
    int size_changed;   /* a whole fetch found another size or version than the
                           HEAD's (or the memo's): asked about again */
    char etag[128];     /* the version opened (its answers must be of it) */
    char last_mod[64];
    int unconfirmed;    /* that version came from the memo (trusted within the TTL,
                           not asked) and no reader asked for it: range answers
                           are not held to it (a whole fetch of another version
                           still asks again, once) */
    /* SL_IO_EDGES: the object's first and last bytes, fetched with the open
     * (reads inside them are copies), or NULL */
    uint8_t *edge_head, *edge_tail;
    uint64_t edge_head_len, edge_tail_off, edge_tail_len;
} http_io;

/* A request of h's bytes: named for messages, in h's dialect, reading the
 * version h was opened at; its sink is the caller's (fd -1: none yet). */
static void xfer_for(sl_xfer *x, const http_io *h) {
    memset(x, 0, sizeof *x);
    x->name = h->base.name;
    x->dialect = h->dialect;
    x->fd = -1;
    if (h->unconfirmed)
        return;
    memcpy(x->want_etag, h->etag, sizeof x->want_etag);
    memcpy(x->want_lm, h->last_mod, sizeof x->want_lm);
}

/* read-ahead's hooks (readahead.h) */
static void ra_prepare(const sl_ra_obj *o, sl_xfer *x) {
    xfer_for(x, (const http_io *)((const char *)o - offsetof(http_io, ra)));
}

/* h's version string (io.h: "SIZE\nETAG\nLAST-MODIFIED") from what opened it. */
static void set_version(http_io *h, const char *etag, const char *last_mod) {
    snprintf(h->etag, sizeof h->etag, "%s", etag);
    snprintf(h->last_mod, sizeof h->last_mod, "%s", last_mod);
    snprintf(h->base.version, sizeof h->base.version, "%llu\n%s\n%s",
             (unsigned long long)h->base.size, h->etag, h->last_mod);
}

/* Bytes [off, off + n) from the edges fetched at open: 1 when copied. */
static int edges_read(const http_io *h, void *dst, size_t n, uint64_t off) {
    if (h->edge_head && off + n <= h->edge_head_len) {
        memcpy(dst, h->edge_head + off, n);
        return 1;
    }
    if (h->edge_tail && off >= h->edge_tail_off &&
        off + n <= h->edge_tail_off + h->edge_tail_len) {
        memcpy(dst, h->edge_tail + (off - h->edge_tail_off), n);
        return 1;
    }
    return 0;
}


/* GET bytes [off, off + n) of the object into dst; *got: how many came. */
static void become_whole(http_io *h);

static int get_range(http_io *h, uint8_t *dst, uint64_t off, uint64_t n, uint64_t *got) {
    sl_xfer x;
    xfer_for(&x, h);
    x.off = off;
    x.len = n;
    x.dst = dst;
    long st;
    int rc = sl_http__perform(&x, h->url, 0, &st);
    *got = x.got;
    if (rc == SL_OK && x.range_ignored)
        become_whole(h);
    return rc;
}

static void ra_range_ignored(sl_ra_obj *o) {
    become_whole((http_io *)((char *)o - offsetof(http_io, ra)));
}

/* Objects this large stay read by ranges even from a server that ignores
 * them (held whole, they could exhaust memory): slow, and said so. */
#define WHOLE_MAX ((uint64_t)4 << 30)

/* Said once per process. */
static void say_range_ignored(const char *name, int big) {
    if (!atomic_exchange(&remote.said_range_ignored, 1))
        SL_LOG_WARN("%s: the server ignores Range requests (it answers each with the whole "
                    "object): %s; a server that honours Range, or a shard cache with room "
                    "for the shards (cache_bytes), avoids this", name,
                    big ? "each read transfers the whole object, very slowly"
                        : "fetching each object whole once instead of once per read");
}

/* The server answered a range request with the whole object: fetch it whole
 * once (the bytes checked against any checksum the answer gives) and serve
 * every later read from memory. Said once per process, with what to do. A
 * failure leaves the object read by ranges (each read then fails or
 * succeeds on its own). */
static void become_whole(http_io *h) {
    int expect = 0;
    if (!atomic_compare_exchange_strong(&h->whole_state, &expect, 1))
        return;
    int big = h->base.size > WHOLE_MAX || h->base.size > SIZE_MAX / 2;
    say_range_ignored(h->base.name, big);
    uint8_t *b = big ? NULL : sl__malloc((size_t)h->base.size ? (size_t)h->base.size : 1);
    if (b) {
        sl_xfer x;
        xfer_for(&x, h);
        x.len = h->base.size;
        x.dst = b;
        x.whole = 1;
        sl_sums ss;
        memset(&ss, 0, sizeof ss);
        ss.etag_md5 = h->dialect && h->dialect->etag_md5;
        x.sums = &ss;
        long st;
        if (sl_http__perform(&x, h->url, 0, &st) == SL_OK &&
            sl_http__sums_check(&ss, b, (size_t)h->base.size, h->base.name) == SL_OK)
            __atomic_store_n(&h->whole, b, __ATOMIC_RELEASE);
        else
            sl__free(b);
    }
    atomic_store(&h->whole_state, 2);
}


static void http_will_need(sl_io *io, uint64_t off, size_t n) {
    http_io *h = (http_io *)io;
    if (__atomic_load_n(&h->whole, __ATOMIC_ACQUIRE))
        return; /* in memory already */
    if (off + n > io->size)
        n = (size_t)(io->size - off);
    if ((h->edge_head && off + n <= h->edge_head_len) ||
        (h->edge_tail && off >= h->edge_tail_off))
        return; /* in memory since the open */
    sl_ra__hint(&h->ra, off, n);
}

static int http_read(sl_io *io, void *dst, size_t n, uint64_t off, size_t *got) {
    http_io *h = (http_io *)io;
    if (off + n > io->size)
        n = (size_t)(io->size - off);
    const uint8_t *mem = io->map ? io->map : h->cached;
    if (!mem)
        mem = __atomic_load_n(&h->whole, __ATOMIC_ACQUIRE);
    if (mem) {
        memcpy(dst, mem + off, n);
        *got = n;
        return SL_OK;
    }
    if (edges_read(h, dst, n, off) || sl_ra__read(&h->ra, dst, n, off)) {
        *got = n;
        return SL_OK;
    }
    uint64_t g;
    int rc = get_range(h, dst, off, n, &g);
    *got = (size_t)g;
    return rc;
}

static void http_close(sl_io *io) {
    http_io *h = (http_io *)io;
    sl_ra__drop(&h->ra);
    sl_cache__close(&h->entry);
    sl__free(h->heap);
    sl__free(h->whole);
    sl__free(h->edge_head);
    sl__free(h->edge_tail);
    sl__free(io->name);
    sl__free(h);
}

/* The bytes failed a caller's check: delete the cache entry, so that the
 * next open fetches the object again (this mapping stays valid). */
static void http_forget(sl_io *io) {
    http_io *h = (http_io *)io;
    sl_cache__forget(&h->entry, io->name);
}

static const sl_io_vtbl http_vtbl = {.scheme = "http", .read = http_read, .close = http_close,
                                     .will_need = http_will_need, .forget = http_forget};

/* One GET of the whole object into dst (memory) or fd (hashed into hs when
 * not NULL); *ss receives the checksums the server keeps for it. */
static int get_whole(http_io *h, uint8_t *dst, int fd, XXH3_state_t *hs, sl_sums *ss) {
    sl_xfer x;
    xfer_for(&x, h);
    x.len = h->base.size;
    x.dst = dst;
    x.fd = fd;
    x.hash = hs;
    memset(ss, 0, sizeof *ss);
    ss->etag_md5 = h->dialect && h->dialect->etag_md5;
    x.sums = ss;
    x.whole = 1;
    /* held to the version asked about, even one the memo gave: another is
     * asked about again, once (sl_io__remote_open) */
    memcpy(x.want_etag, h->etag, sizeof x.want_etag);
    memcpy(x.want_lm, h->last_mod, sizeof x.want_lm);
    long st;
    int rc = sl_http__perform(&x, h->url, 0, &st);
    h->size_changed = x.size_changed || x.version_changed;
    return rc;
}

/* Fetch the whole object into memory. */
static int fetch_heap(http_io *h) {
    if (h->base.size > SIZE_MAX / 2)
        return sl__error(SL_ELIMIT, "%s: %llu bytes cannot be held in memory here",
                         h->base.name, (unsigned long long)h->base.size);
    h->heap = sl__malloc((size_t)h->base.size);
    if (!h->heap)
        return sl__error(SL_ENOMEM, "%s: out of memory fetching %llu bytes", h->base.name,
                         (unsigned long long)h->base.size);
    sl_sums ss;
    int rc = get_whole(h, h->heap, -1, NULL, &ss);
    if (rc == SL_OK)
        rc = sl_http__sums_check(&ss, h->heap, (size_t)h->base.size, h->base.name);
    if (rc < 0) {
        sl__free(h->heap);
        h->heap = NULL;
        return rc;
    }
    h->base.map = h->heap;
    return SL_OK;
}

/* The shard cache's callbacks of a whole fetch (cache.h): the bytes into the
 * entry's file, then checked against what the server gave for them. */
typedef struct fill_ctx {
    http_io *h;
    sl_sums ss;
} fill_ctx;

static int fill_fetch(void *user, int fd, XXH3_state_t *hs) {
    fill_ctx *c = user;
    return get_whole(c->h, NULL, fd, hs, &c->ss);
}

static int fill_check(void *user, const uint8_t *p, size_t n) {
    fill_ctx *c = user;
    return sl_http__sums_check(&c->ss, p, n, c->h->base.name);
}

/* Fetch the object into the cache (or find it there) and map it; with no
 * room there, held in memory (or, `or_ranges`, read by ranges). */
static int fetch_cached(http_io *h, const char *validator, int or_ranges) {
    fill_ctx c = {.h = h};
    int rc = sl_cache__fetch(&h->entry, h->base.name, h->url, h->base.size, validator, fill_fetch,
                             fill_check, &c);
    if (rc == SL_CACHE_NO_ROOM)
        return or_ranges ? SL_OK : fetch_heap(h); /* read by ranges, ahead */
    if (rc == SL_CACHE_UNUSABLE)
        return fetch_heap(h);
    if (rc == SL_OK)
        h->base.map = h->entry.map;
    return rc;
}

/* An object opened for ranges whose whole copy is in the cache already is
 * read from that copy (mapped) instead: no request. Quietly nothing when
 * there is none (or it does not check out: a range read then asks). */
static void cache_lookup(http_io *h, const char *validator) {
    if (sl_cache__open(&h->entry, h->base.name, h->url, h->base.size, validator, 0) == SL_OK)
        h->cached = h->entry.map; /* read through http_read only: the caller asked for ranges */
}


/* ---- opening with the edges (SL_IO_EDGES) -----------------------------------------
 *
 * A format whose header is at the start of an object and whose footer and
 * index are at its end (.slr) reads both right after opening it: with a
 * HEAD first that was four or five requests in a row per shard (HEAD,
 * header, header rest, footer, index), each a round trip. Instead, the open
 * asks for the last SL_IO_EDGE_TAIL bytes (a suffix range, bytes=-N: its
 * answer says the object's size too, so no HEAD) and, at the same time on a
 * second connection of one event loop (sl_http__perform_many), for the
 * first SL_IO_EDGE_HEAD bytes (a range that may run past a small object's
 * end): one round trip. An object no longer than
 * the tail is whole after it. Both answers must describe the same object
 * (size, ETag, Last-Modified); one that changed between them is asked again
 * once. */


static int open_edges(http_io *h, unsigned flags) {
    const char *name = h->base.name;
    for (int attempt = 0;; attempt++) {
        sl_xfer hx, tx;
        memset(&hx, 0, sizeof hx);
        memset(&tx, 0, sizeof tx);
        uint64_t head_n = remote.open_bytes < SL_IO_EDGE_HEAD ? remote.open_bytes : SL_IO_EDGE_HEAD;
        uint8_t *head_b = sl__malloc((size_t)head_n);
        uint8_t *tail_b = sl__malloc((size_t)remote.open_bytes);
        if (!head_b || !tail_b) {
            sl__free(head_b);
            sl__free(tail_b);
            return sl__error(SL_ENOMEM, "%s: out of memory opening it", name);
        }
        hx.name = tx.name = name;
        hx.dialect = tx.dialect = h->dialect;
        hx.fd = tx.fd = -1;
        hx.len = head_n;
        hx.dst = head_b;
        hx.clip = 1;
        tx.suffix = tx.len = remote.open_bytes;
        tx.dst = tail_b;
        int quiet = (flags & SL_IO_MISSING_OK) != 0;
        sl_mreq rq[2];
        long st[2];
        char msg[2][SL__ERRMSG_MAX];
        sl_http__req_init(&rq[0].r, &tx, h->url, quiet, &st[0]);
        sl_http__req_init(&rq[1].r, &hx, h->url, quiet, &st[1]);
        sl_http__perform_many(rq, 2, msg);
        if (rq[0].r.rc != SL_OK || rq[1].r.rc != SL_OK) {
            sl__free(head_b);
            sl__free(tail_b);
            if (rq[0].r.rc < 0 || rq[1].r.rc < 0)
                return rq[0].r.rc < 0 ? sl__error(rq[0].r.rc, "%s", msg[0])
                                    : sl__error(rq[1].r.rc, "%s", msg[1]);
            return SL_END; /* missing (a quiet 404), SL_IO_MISSING_OK */
        }
        uint64_t total = tx.off + tx.len;
        int same = (hx.len < head_n ? hx.len == total : total >= head_n) &&
                   !strcmp(hx.etag, tx.etag) && !strcmp(hx.last_mod, tx.last_mod);
        if (!same) {
            sl__free(head_b);
            sl__free(tail_b);
            if (attempt)
                return sl__error(SL_EIO, "%s: changed on the server while it was opened (its "
                                 "first and last bytes came from different versions, twice)",
                                 name);
            SL_LOG_DEBUG("%s: changed on the server while it was opened; asking again", name);
            continue;
        }
        h->base.size = total;
        set_version(h, tx.etag, tx.last_mod);
        if (!total) {
            sl__free(head_b);
            sl__free(tail_b);
        } else if (tx.off == 0 || hx.len == total) { /* the whole object came */
            if (tx.off) { /* in the first bytes (a tail smaller than the head) */
                uint8_t *sw = head_b;
                head_b = tail_b;
                tail_b = sw;
            }
            sl__free(head_b);
            uint8_t *w = sl__realloc(tail_b, (size_t)total);
            if (w)
                tail_b = w;
            if (flags & SL_IO_MAP) {
                h->heap = tail_b;
                h->base.map = tail_b;
            } else {
                h->whole = tail_b;
                atomic_store(&h->whole_state, 2);
            }
        } else {
            h->edge_head = head_b;
            h->edge_head_len = hx.len;
            h->edge_tail = tail_b;
            h->edge_tail_off = tx.off;
            h->edge_tail_len = tx.len;
        }
        if (h->edge_tail && (flags & SL_IO_MAP) && !(flags & SL_IO_MAP_OR_RANGES)) {
            /* wanted whole, and bigger than both ends: the whole of it */
            sl__free(h->edge_head);
            sl__free(h->edge_tail);
            h->edge_head = h->edge_tail = NULL;
            return fetch_heap(h);
        }
        if (tx.range_ignored || hx.range_ignored) {
            if (h->edge_tail)
                become_whole(h); /* says so, and fetches it whole once */
            else
                say_range_ignored(h->base.name, 0);
        }
        return SL_OK;
    }
}

/* Objects whose replacement this process has warned about (by URL hash):
 * a shard reopened many times in a run is said once. */

static int kept_first_time(const char *url) {
    uint64_t key = XXH3_64bits(url, strlen(url));
    pthread_mutex_lock(&remote.kept_mu);
    int i = 0;
    while (i < remote.nkept_said && remote.kept_said[i] != key)
        i++;
    int first = i == remote.nkept_said && remote.nkept_said < KEPT_SAID_MAX;
    if (first)
        remote.kept_said[remote.nkept_said++] = key;
    pthread_mutex_unlock(&remote.kept_mu);
    return first;
}

/* The object is no longer the version `want` a reader opened it at (`now` is
 * the server's): read on from the shard cache's copy of `want` when it is
 * still there and sound (SL_OK, h opened at `want`), else SL_EIO naming the
 * URL, both versions and the way on. (Opened for ranges, the copy is read
 * as cache_lookup's is.) */
static int open_kept(http_io *h, unsigned flags, const char *want, const char *now) {
    const char *name = h->base.name;
    char then_w[200], now_w[200];
    sl_io__version_words(name, want, then_w, sizeof then_w);
    sl_io__version_words(name, now, now_w, sizeof now_w);
    const char *nl = strchr(want, '\n'), *nl2 = nl ? strchr(nl + 1, '\n') : NULL;
    if (nl2 && sl_cache__on()) {
        char validator[200];
        snprintf(validator, sizeof validator, "%.*s|%s", (int)(nl2 - nl - 1), nl + 1, nl2 + 1);
        h->base.size = strtoull(want, NULL, 10);
        int rc = sl_cache__open(&h->entry, name, h->url, h->base.size, validator, 1);
        if (rc == SL_OK) {
            if (flags & SL_IO_MAP)
                h->base.map = h->entry.map;
            else
                h->cached = h->entry.map; /* read by ranges: copies from it */
            snprintf(h->base.version, sizeof h->base.version, "%s", want);
            if (kept_first_time(h->url))
                SL_LOG_WARN("%s: replaced on the server since this run first read it (%s "
                            "then, %s now); the run reads on the version it started with, "
                            "kept in the shard cache; the next run reads the new one",
                            name, then_w, now_w);
            return SL_OK;
        }
        if (rc != SL_ECORRUPT)
            return rc;
    }
    return sl__error(SL_EIO, "%s: replaced on the server since this run first read it (%s "
                     "then, %s now), and %s; open the source again (a new run) to read the new "
                     "version", name, then_w, now_w,
                     sl_cache__on()
                         ? "the version read then is not in the shard cache to read on"
                         : "with no shard cache (cache_bytes 0) no copy of the version read "
                           "then is kept to read on");
}

int sl_io__remote_open(sl_io **out, const char *name, unsigned flags, const char *want,
                       const sl_io_dialect *d) {
    /* An object whose size changed since it was asked (within the TTL) is
     * asked again and opened anew, once. */
    static _Thread_local int reopening;
    *out = NULL;
    SL_TRY(ensure_init());
    http_io *h = sl__calloc(1, sizeof *h);
    if (!h)
        return sl__oom("opening a URL");
    h->base.vt = &http_vtbl;
    h->dialect = d;
    h->ra.prepare = ra_prepare;
    h->ra.range_ignored = ra_range_ignored;
    int rc = SL_OK;
    h->base.name = sl__strdup(name);
    if (!h->base.name)
        SL_FAIL(SL_ENOMEM, "%s: out of memory opening it", name);
    if (name[strlen(name) - 1] == '/')
        SL_FAIL(SL_EINVAL, "%s: is a directory", name);
    h->ra.name = h->base.name;
    h->ra.url = h->url;
    SL_CHECK(resolve(d, name, h->url, sizeof h->url));
    if ((flags & SL_IO_EDGES) && !sl_cache__on()) {
        /* no shard cache to look in first */
        rc = open_edges(h, flags);
        if (rc != SL_OK)
            goto cleanup;
        if (want && !sl_io__same_version(want, h->base.version)) {
            char now[SL_IO_VERSION_MAX];
            memcpy(now, h->base.version, sizeof now);
            rc = open_kept(h, flags, want, now); /* no cache here: says why not */
            if (rc != SL_OK)
                goto cleanup;
        }
        *out = &h->base;
        return SL_OK;
    }
    sl_xfer x;
    int is_dir;
    rc = head(d, name, h->url, (flags & SL_IO_MISSING_OK) != 0, &x, &is_dir);
    if (rc != SL_OK)
        goto cleanup; /* an error, or SL_END: missing, SL_IO_MISSING_OK */
    if (is_dir)
        SL_FAIL(SL_EINVAL, "%s: is a directory", name);
    if (x.total < 0)
        SL_FAIL(SL_EIO, "%s: the server gives no size (Content-Length) for it", name);
    h->base.size = (uint64_t)x.total;
    set_version(h, x.etag, x.last_mod);
    h->unconfirmed = x.from_memo && !want;
    if (want && !sl_io__same_version(want, h->base.version)) {
        char now[SL_IO_VERSION_MAX];
        memcpy(now, h->base.version, sizeof now);
        rc = open_kept(h, flags, want, now);
        if (rc != SL_OK)
            goto cleanup;
        *out = &h->base;
        return SL_OK;
    }
    if (h->base.size) {
        char validator[200];
        snprintf(validator, sizeof validator, "%s|%s", x.etag, x.last_mod);
        if (flags & SL_IO_MAP) {
            /* SL_ECORRUPT: the bytes fetched are not what the server says
             * (nothing was cached): fetched again, once */
            rc = fetch_cached(h, validator, (flags & SL_IO_MAP_OR_RANGES) != 0);
            if (rc == SL_ECORRUPT) {
                char first[SL__ERRMSG_MAX];
                snprintf(first, sizeof first, "%s", sl_errmsg());
                rc = fetch_cached(h, validator, (flags & SL_IO_MAP_OR_RANGES) != 0);
                if (rc == SL_ECORRUPT)
                    rc = sl_io__twice_damaged(name, first);
                else if (rc == SL_OK)
                    SL_LOG_WARN("%s; fetched again, the new copy is sound", first);
            }
            SL_CHECK(rc);
        } else
            cache_lookup(h, validator);
    }
    *out = &h->base;
    return SL_OK;
cleanup:
    if (h->size_changed && !reopening) {
        sl_cache__memo_drop(h->url);
        http_close(&h->base);
        SL_LOG_DEBUG("%s: changed on the server; asking again", name);
        reopening = 1;
        rc = sl_io__remote_open(out, name, flags, want, d);
        reopening = 0;
        return rc;
    }
    http_close(&h->base);
    return rc;
}

int sl_io__remote_stat(const char *name, sl_io_info *out, const sl_io_dialect *d) {
    memset(out, 0, sizeof *out);
    SL_TRY(ensure_init());
    size_t nl = strlen(name);
    if (nl && name[nl - 1] == '/') {
        out->is_dir = 1;
        return SL_OK;
    }
    char url[SL_URL_MAX];
    SL_TRY(resolve(d, name, url, sizeof url));
    sl_xfer x;
    int is_dir;
    int rc = head(d, name, url, 1, &x, &is_dir);
    if (rc == SL_OK && is_dir) {
        out->is_dir = 1;
        return SL_OK;
    }
    if (rc == SL_END) {
        /* "http://host/ds" for the dataset directory "http://host/ds/" */
        char m[SL_URL_MAX];
        int k = snprintf(m, sizeof m, "%s/manifest.json", url);
        if (k < 0 || (size_t)k >= sizeof m)
            return SL_END;
        rc = head(d, name, m, 1, &x, &is_dir);
        if (rc == SL_OK)
            out->is_dir = 1;
        return rc;
    }
    SL_TRY(rc);
    out->size = x.total > 0 ? (uint64_t)x.total : 0;
    snprintf(out->version, sizeof out->version, "%llu\n%s\n%s", (unsigned long long)out->size,
             x.etag, x.last_mod);
    if (x.last_mod[0]) {
        time_t t = curl_getdate(x.last_mod, NULL);
        if (t > 0)
            out->mtime_ns = (int64_t)t * 1000000000;
    }
    return SL_OK;
}

