/*
 * device_ring.c — staging slots between host batches and device memory,
 * the same for every backend.
 *
 * A slot is one batch in flight: pinned host memory the batch is staged in
 * (none when the batch was written in pinned memory: the slot then holds
 * references on those buffers), device memory it is copied to, a copy event
 * (recorded on the ring's copy stream after the copy and any normalize) and
 * a release event (recorded on the consumer's stream when the batch is
 * released).
 *
 * Slot states (transitions named by function):
 *
 *   FREE --acquire--> FILLING --handout--> OUT --last buffer ref--> RELEASED
 *   RELEASED --acquire, once both events passed--> FILLING
 *   FILLING --abandon--> FREE
 *
 * Invariants:
 *  1. A slot's memory is written (staging memcpy, copy, normalize) only in
 *     FILLING, and a slot enters FILLING from RELEASED only after its release
 *     event has passed: the consumer's stream is done with the device memory
 *     (the pin_memory race: reusing a buffer the GPU still reads). The copy
 *     event must have passed too, so the pinned memory is no longer read.
 *  1b. Pinned buffers a slot copies from (sl_dev__slot_submit_from) are held
 *     until its copy event has passed, then released (at the next acquire,
 *     or when the slot is freed): their pool reuses them only after the
 *     copy engine is done reading.
 *  2. The release event is recorded on the stream the consumer last declared
 *     for the slot (sl_dev__slot_wait; the ring's consumer stream by
 *     default), after every use the consumer queued there.
 *  3. At most `depth` slots exist, unless every slot is OUT: a consumer that
 *     holds more batches than the depth gets more slots (up to
 *     SL_DEV_MAX_SLOTS), instead of a deadlock.
 *  4. The ring lives while its creator holds it or any slot is OUT; the last
 *     of these frees it, after waiting for every event.
 *
 * `mu` guards every slot's state and the ring's counters; backend calls are
 * thread-safe and made with or without it (never while waiting: waits on an
 * event happen with `mu` released). Only the consumer thread acquires, so a
 * RELEASED slot's events cannot be re-recorded while it waits on them.
 */
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define SL_DEV_MAX_SLOTS 64

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_OUT, SLOT_RELEASED };

struct sl_dev_slot {
    sl_dev_ring *ring;
    int state;
    void *host, *dev;
    size_t host_cap, dev_cap;
    void *copy_ev, *rel_ev;
    void *use_stream;             /* where the release event is recorded */
    uint64_t rel_order;           /* when it was released (oldest first) */
    sl_buffer *hold[SL_DEV_MAX_HOLD]; /* read by the copy in flight (1b) */
    int nhold;
};

struct sl_dev_ring {
    pthread_mutex_t mu;
    sl_dev_backend *be;
    void *copy_stream;
    void *cons_stream;            /* NULL: the backend's default stream */
    sl_dev_slot *slot[SL_DEV_MAX_SLOTS];
    int nslots, depth;
    int nout;                     /* slots OUT */
    int closed;                   /* the creator let go */
    uint64_t rel_counter;
};

/* [0]: CUDA, [1]: the host backend; per kind, device then pinned blocks */
static _Atomic int64_t held_blocks[2][2];

void sl_dev__held(int device, int pinned, int delta) {
    atomic_fetch_add(&held_blocks[device == SL_DEVICE_CUDA ? 0 : 1][pinned ? 1 : 0], delta);
}

int sl_device_held(sl_device device, int64_t *device_blocks, int64_t *pinned_blocks) {
    if (device != SL_DEVICE_CUDA && device != SL_DEVICE_CPU)
        return sl__error(SL_EINVAL, "device: %d is not SL_DEVICE_CUDA or SL_DEVICE_CPU",
                         (int)device);
    int k = device == SL_DEVICE_CUDA ? 0 : 1;
    if (device_blocks)
        *device_blocks = atomic_load(&held_blocks[k][0]);
    if (pinned_blocks)
        *pinned_blocks = atomic_load(&held_blocks[k][1]);
    return SL_OK;
}

void sl_dev__backend_init(sl_dev_backend *b, const sl_dev_ops *ops, int id) {
    b->ops = ops;
    atomic_init(&b->refs, 1);
    b->id = id;
}

void sl_dev__backend_retain(sl_dev_backend *b) { atomic_fetch_add(&b->refs, 1); }

void sl_dev__backend_release(sl_dev_backend *b) {
    if (b && atomic_fetch_sub(&b->refs, 1) == 1)
        b->ops->destroy(b);
}

static void *pinned_alloc(void *ctx, size_t size) {
    sl_dev_backend *b = ctx;
    void *p = NULL;
    return b->ops->host_alloc(b, size, &p) < 0 ? NULL : p;
}

static void pinned_free(void *ctx, void *ptr) {
    sl_dev_backend *b = ctx;
    b->ops->host_free(b, ptr);
}

static void backend_retain(void *ctx) { sl_dev__backend_retain(ctx); }
int sl_dev__normalize_check(const sl_dev_backend *b, const char *what) {
    if (b->kernels)
        return SL_OK;
    return sl__error(SL_EUNSUPPORTED, "%s: %s", what, b->norm_missing);
}

static void backend_release(void *ctx) { sl_dev__backend_release(ctx); }

void sl_dev__pinned_mem(sl_dev_backend *b, sl_pool_mem *out) {
    out->alloc = pinned_alloc;
    out->free = pinned_free;
    out->retain = backend_retain;
    out->done = backend_release;
    out->ctx = b;
}

/* Once the slot's copy event has passed, move its held buffers (1b) to
 * `out` (room for SL_DEV_MAX_HOLD) and return how many: the caller releases
 * them without the ring's lock, as the last release may free a pool. */
static int take_holds(sl_dev_ring *r, sl_dev_slot *s, sl_buffer **out) {
    int n = s->nhold;
    if (n == 0 || r->be->ops->event_query(r->be, s->copy_ev) != 1)
        return 0;
    memcpy(out, s->hold, (size_t)n * sizeof *out);
    s->nhold = 0;
    return n;
}

static void slot_free(sl_dev_ring *r, sl_dev_slot *s) {
    sl_dev_backend *be = r->be;
    if (s->copy_ev) {
        be->ops->event_sync(be, s->copy_ev);
        be->ops->event_destroy(be, s->copy_ev);
    }
    for (int i = 0; i < s->nhold; i++) /* the copy has passed: synced above */
        sl_buffer_release(s->hold[i]);
    s->nhold = 0;
    if (s->rel_ev) {
        be->ops->event_sync(be, s->rel_ev);
        be->ops->event_destroy(be, s->rel_ev);
    }
    if (s->host)
        be->ops->host_free(be, s->host);
    if (s->dev)
        be->ops->dev_free(be, s->dev);
    sl__free(s);
}

static void ring_destroy(sl_dev_ring *r) {
    sl_dev_backend *be = r->be;
    if (r->copy_stream)
        be->ops->stream_sync(be, r->copy_stream);
    for (int i = 0; i < r->nslots; i++)
        if (r->slot[i])
            slot_free(r, r->slot[i]);
    if (r->copy_stream)
        be->ops->stream_destroy(be, r->copy_stream);
    pthread_mutex_destroy(&r->mu);
    sl__free(r);
    sl_dev__backend_release(be);
}

int sl_dev__ring_depth(int depth) {
    return depth < 2 ? 2 : depth > SL_DEV_MAX_SLOTS ? SL_DEV_MAX_SLOTS : depth;
}

int sl_dev__ring_create(sl_dev_ring **out, sl_dev_backend *be, int depth) {
    *out = NULL;
    sl_dev_ring *r = sl__calloc(1, sizeof *r);
    if (!r) {
        sl_dev__backend_release(be);
        return sl__oom("creating the device ring");
    }
    pthread_mutex_init(&r->mu, NULL);
    r->be = be;
    r->depth = sl_dev__ring_depth(depth);
    int rc = be->ops->stream_create(be, &r->copy_stream);
    if (rc < 0) {
        ring_destroy(r);
        return rc;
    }
    *out = r;
    return SL_OK;
}

void sl_dev__ring_close(sl_dev_ring *r) {
    if (!r)
        return;
    /* Idle slots (FREE, RELEASED) go now, not with the last held one: a
     * consumer keeping one batch past the ring's end keeps one slot. They
     * are taken out first and freed (slot_free waits for their events)
     * while `closed` is still 0, so a concurrent last release cannot
     * destroy the ring under us. Only the creator acquires, so none is
     * FILLING here. */
    sl_dev_slot *idle[SL_DEV_MAX_SLOTS];
    int nidle = 0, kept = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->nslots; i++) {
        sl_dev_slot *s = r->slot[i];
        if (r->nout > 0 && (s->state == SLOT_FREE || s->state == SLOT_RELEASED))
            idle[nidle++] = s;
        else
            r->slot[kept++] = s;
    }
    r->nslots = kept;
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < nidle; i++)
        slot_free(r, idle[i]);
    pthread_mutex_lock(&r->mu);
    r->closed = 1;
    int last = r->nout == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        ring_destroy(r);
}

sl_dev_backend *sl_dev__ring_backend(sl_dev_ring *r) { return r->be; }
void *sl_dev__ring_copy_stream(sl_dev_ring *r) { return r->copy_stream; }

void sl_dev__ring_set_stream(sl_dev_ring *r, void *stream) {
    pthread_mutex_lock(&r->mu);
    r->cons_stream = stream;
    pthread_mutex_unlock(&r->mu);
}

int sl_dev__ring_slots(sl_dev_ring *r) {
    pthread_mutex_lock(&r->mu);
    int n = r->nslots;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* Grow one of a slot's memories (host memory when host, else device memory)
 * to want bytes; what it held is not kept. */
static int mem_fit(sl_dev_backend *be, int host, void **mem, size_t *cap, size_t want) {
    if (*cap >= want)
        return SL_OK;
    if (*mem && host)
        be->ops->host_free(be, *mem);
    else if (*mem)
        be->ops->dev_free(be, *mem);
    *mem = NULL;
    *cap = 0;
    SL_TRY(host ? be->ops->host_alloc(be, want, mem) : be->ops->dev_alloc(be, want, mem));
    *cap = want;
    return SL_OK;
}

/* Grow a FILLING slot's memory (nothing in flight uses it: invariant 1). */
static int slot_fit(sl_dev_ring *r, sl_dev_slot *s, size_t host_bytes, size_t dev_bytes) {
    SL_TRY(mem_fit(r->be, 1, &s->host, &s->host_cap, host_bytes));
    return mem_fit(r->be, 0, &s->dev, &s->dev_cap, dev_bytes);
}

static int slot_new(sl_dev_ring *r, sl_dev_slot **out) {
    sl_dev_slot *s = sl__calloc(1, sizeof *s);
    if (!s)
        return sl__oom("creating a device slot");
    s->ring = r;
    int rc = r->be->ops->event_create(r->be, &s->copy_ev);
    if (rc >= 0)
        rc = r->be->ops->event_create(r->be, &s->rel_ev);
    if (rc < 0) {
        slot_free(r, s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

int sl_dev__ring_acquire(sl_dev_ring *r, size_t host_bytes, size_t dev_bytes,
                         sl_dev_slot **out, uint64_t *wait_ns) {
    sl_dev_backend *be = r->be;
    *out = NULL;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        sl_dev_slot *pick = NULL, *oldest = NULL;
        for (int i = 0; i < r->nslots && !pick; i++) {
            sl_dev_slot *s = r->slot[i];
            sl_buffer *done[SL_DEV_MAX_HOLD];
            int ndone = take_holds(r, s, done); /* 1b: the copy engine is done */
            if (ndone) {
                pthread_mutex_unlock(&r->mu);
                for (int k = 0; k < ndone; k++)
                    sl_buffer_release(done[k]);
                pthread_mutex_lock(&r->mu);
            }
            if (s->state == SLOT_RELEASED) {
                int q = be->ops->event_query(be, s->rel_ev);
                if (q == 1)
                    q = be->ops->event_query(be, s->copy_ev);
                if (q < 0) { /* a failing query would never pass: say so, not spin */
                    pthread_mutex_unlock(&r->mu);
                    return q;
                }
                if (q == 1)
                    s->state = SLOT_FREE;
            }
            if (s->state == SLOT_FREE)
                pick = s;
            else if (s->state == SLOT_RELEASED && (!oldest || s->rel_order < oldest->rel_order))
                oldest = s;
        }
        if (pick) {
            pick->state = SLOT_FILLING;
            pthread_mutex_unlock(&r->mu);
            int rc = slot_fit(r, pick, host_bytes, dev_bytes);
            if (rc < 0) {
                sl_dev__slot_abandon(pick);
                return rc;
            }
            *out = pick;
            return SL_OK;
        }
        if (r->nslots < r->depth || !oldest) {
            if (r->nslots == SL_DEV_MAX_SLOTS) {
                pthread_mutex_unlock(&r->mu);
                return sl__error(SL_ELIMIT, "device: the consumer holds %d batches; release "
                                            "some before asking for more",
                                 SL_DEV_MAX_SLOTS);
            }
            sl_dev_slot *s = NULL;
            int rc = slot_new(r, &s);
            if (rc < 0) {
                pthread_mutex_unlock(&r->mu);
                return rc;
            }
            s->state = SLOT_FREE;
            r->slot[r->nslots++] = s;
            continue;
        }
        /* Every slot is in use and the oldest released one has not passed
         * its events: wait for it (invariant 1). */
        pthread_mutex_unlock(&r->mu);
        uint64_t t0 = sl__now_ns();
        int rc = be->ops->event_sync(be, oldest->rel_ev);
        if (rc >= 0)
            rc = be->ops->event_sync(be, oldest->copy_ev);
        if (wait_ns)
            *wait_ns += sl__now_ns() - t0;
        if (rc < 0)
            return rc;
        pthread_mutex_lock(&r->mu);
    }
}

void *sl_dev__slot_host(sl_dev_slot *s) { return s->host; }
void *sl_dev__slot_dev(sl_dev_slot *s) { return s->dev; }

void sl_dev__slot_abandon(sl_dev_slot *s) {
    sl_dev_ring *r = s->ring;
    pthread_mutex_lock(&r->mu);
    /* Work may be queued on it already: let its events order the reuse. */
    s->state = SLOT_RELEASED;
    s->rel_order = ++r->rel_counter;
    pthread_mutex_unlock(&r->mu);
}

/* The copies, the normalize, the copy event and the consumer's wait. On a
 * failure after work was queued, the copy stream is drained first, so that
 * nothing queued still reads the sources when the caller frees them. */
static int submit(sl_dev_slot *s, const sl_dev_copy *cp, int ncp, const sl_dev_norm *norm) {
    sl_dev_ring *r = s->ring;
    sl_dev_backend *be = r->be;
    pthread_mutex_lock(&r->mu);
    void *cons = r->cons_stream;
    pthread_mutex_unlock(&r->mu);
    int rc = SL_OK;
    for (int i = 0; i < ncp && rc >= 0; i++)
        if (cp[i].n)
            rc = be->ops->copy(be, (char *)s->dev + cp[i].dst_off, cp[i].src, cp[i].n, r->copy_stream);
    if (rc >= 0 && norm) {
        char what[64];
        snprintf(what, sizeof what, "device \"%s\": normalize_on_device", be->ops->name);
        rc = sl_dev__normalize_check(be, what);
        if (rc >= 0)
            rc = be->ops->normalize(be, norm, r->copy_stream);
    }
    if (rc >= 0)
        rc = be->ops->event_record(be, s->copy_ev, r->copy_stream);
    if (rc >= 0)
        rc = be->ops->stream_wait(be, cons, s->copy_ev);
    if (rc < 0) {
        char msg[SL__ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", sl_errmsg());
        be->ops->stream_sync(be, r->copy_stream);
        return sl__error(rc, "%s", msg);
    }
    s->use_stream = cons;
    return SL_OK;
}

int sl_dev__slot_submit(sl_dev_slot *s, size_t bytes, const sl_dev_norm *norm) {
    sl_dev_copy cp = {0, s->host, bytes};
    return submit(s, &cp, 1, norm);
}

int sl_dev__slot_submit_from(sl_dev_slot *s, const sl_dev_copy *cp, int ncp,
                             sl_buffer *const *hold, int nhold, const sl_dev_norm *norm) {
    if (nhold < 0 || nhold > SL_DEV_MAX_HOLD)
        return sl__error(SL_EINVAL, "device: %d buffers to hold (at most %d)", nhold,
                         SL_DEV_MAX_HOLD);
    SL_TRY(submit(s, cp, ncp, norm));
    /* FILLING: no other thread looks at the holds until handout */
    for (int i = 0; i < nhold; i++)
        s->hold[s->nhold++] = sl_buffer_retain(hold[i]);
    return SL_OK;
}

static void slot_released(void *user) {
    sl_dev_slot *s = user;
    sl_dev_ring *r = s->ring;
    pthread_mutex_lock(&r->mu);
    int rc = r->be->ops->event_record(r->be, s->rel_ev, s->use_stream);
    if (rc < 0) /* cannot tell when the consumer is done: make it wait for all */
        r->be->ops->stream_sync(r->be, s->use_stream);
    s->state = SLOT_RELEASED;
    s->rel_order = ++r->rel_counter;
    r->nout--;
    int last = r->closed && r->nout == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        ring_destroy(r);
}

int sl_dev__slot_handout(sl_dev_slot *s, sl_buffer **out) {
    sl_dev_ring *r = s->ring;
    SL_TRY(sl_buffer_wrap(out, s->dev, s->dev_cap, slot_released, s));
    pthread_mutex_lock(&r->mu);
    s->state = SLOT_OUT;
    r->nout++;
    pthread_mutex_unlock(&r->mu);
    return SL_OK;
}

int sl_dev__slot_handout_host(sl_dev_slot *s, sl_buffer **out) {
    sl_dev_ring *r = s->ring;
    SL_TRY(sl_buffer_wrap(out, s->host, s->host_cap, slot_released, s));
    pthread_mutex_lock(&r->mu);
    /* No copy was queued (submit sets it otherwise): the consumer's own
     * copies out of this memory run on its stream, where the release event
     * goes (invariant 2). */
    s->use_stream = r->cons_stream;
    s->state = SLOT_OUT;
    r->nout++;
    pthread_mutex_unlock(&r->mu);
    return SL_OK;
}

sl_dev_slot *sl_dev__slot_of(const sl_buffer *buf) {
    return buf ? sl_buffer__wrap_user(buf, slot_released) : NULL;
}

int sl_dev__slot_wait(sl_dev_slot *s, void *stream) {
    sl_dev_ring *r = s->ring;
    pthread_mutex_lock(&r->mu);
    int rc = r->be->ops->stream_wait(r->be, stream, s->copy_ev);
    if (rc >= 0)
        s->use_stream = stream;
    pthread_mutex_unlock(&r->mu);
    return rc;
}
