/*
 * test_ring.c — the device ring, its events and its reuse rule, on the host
 * backend (streams are threads). Each threaded case is ordered by gates (a
 * work item that blocks a stream until the test opens it), not by sleeps:
 * the assertions hold whatever the timing; the sleeps only give a wrong
 * implementation the chance to run ahead.
 */
#include "test.h"
#include "device/device.h"
#include "core/worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
    _Atomic int opened;           /* set just before opening: read by checks */
} gate;

static void gate_init(gate *g) {
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->open = 0;
    atomic_store(&g->opened, 0);
}
static void gate_open(gate *g) {
    atomic_store(&g->opened, 1);
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
/* Runs on a stream: blocks it until the gate opens. */
static void gate_pass(void *arg) {
    gate *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}
static void gate_destroy(gate *g) {
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}

static void *open_later(void *arg) {
    usleep(100 * 1000);
    gate_open(arg);
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A ring on the host backend with a consumer stream of its own (the NULL
 * stream of the host backend is the calling thread). */
static void *cons;
static void (*cons_destroy)(sl_dev_backend *, void *);

static sl_dev_ring *host_ring(int depth) {
    sl_dev_backend *be;
    ASSERT_OK(sl_dev__host_open(&be));
    ASSERT_OK(be->ops->stream_create(be, &cons));
    cons_destroy = be->ops->stream_destroy;
    sl_dev_ring *r;
    ASSERT_OK(sl_dev__ring_create(&r, be, depth));
    sl_dev__ring_set_stream(r, cons);
    return r;
}

/* After the ring is gone: release events were recorded on the stream. */
static void cons_free(void) {
    cons_destroy(NULL, cons);
    cons = NULL;
}

static void ring_done(sl_dev_ring *r) {
    sl_dev__ring_close(r);
    cons_free();
}

/* A pool of `size`-byte buffers in the backend's pinned memory. */
static sl_pool *pinned_pool(sl_dev_backend *be, size_t size, size_t max_cached) {
    sl_pool_mem mem;
    sl_dev__pinned_mem(be, &mem);
    sl_pool *pool;
    ASSERT_OK(sl_pool__create_mem(&pool, size, max_cached, &mem));
    return pool;
}

/* Stage `n` bytes of `pattern` in a new slot, copy it, hand it out. */
static sl_dev_slot *fill(sl_dev_ring *r, size_t n, uint8_t pattern, sl_buffer **buf) {
    sl_dev_slot *s;
    uint64_t waited = 0;
    ASSERT_OK(sl_dev__ring_acquire(r, n, n, &s, &waited));
    memset(sl_dev__slot_host(s), pattern, n);
    ASSERT_OK(sl_dev__slot_submit(s, n, NULL));
    ASSERT_OK(sl_dev__slot_handout(s, buf));
    return s;
}

static int all_equal(const uint8_t *p, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

SL_TEST(device_ring__copy_reaches_device_memory) {
    sl_dev_ring *r = host_ring(2);
    sl_dev_backend *be = sl_dev__ring_backend(r);
    sl_buffer *buf;
    sl_dev_slot *s = fill(r, 4096, 0x5a, &buf);
    ASSERT(sl_dev__slot_of(buf) == s);
    ASSERT_OK(be->ops->stream_sync(be, cons)); /* the consumer stream waited on the copy */
    ASSERT(all_equal(sl_buffer_data(buf), 4096, 0x5a));
    sl_buffer_release(buf);
    ring_done(r);
}

/* Checks run on the consumer stream after the copy was queued behind a gate
 * on the copy stream: the consumer must see the data, i.e. it waited. */
typedef struct {
    gate *g;
    const uint8_t *data;
    size_t n;
    int gate_was_open, data_ok;
} check_ctx;

static void check_on_consumer(void *arg) {
    check_ctx *c = arg;
    c->gate_was_open = atomic_load(&c->g->opened);
    c->data_ok = all_equal(c->data, c->n, 0x77);
}

SL_TEST(device_ring__consumer_stream_waits_for_the_copy) {
    sl_dev_ring *r = host_ring(2);
    sl_dev_backend *be = sl_dev__ring_backend(r);
    gate g;
    gate_init(&g);
    ASSERT_OK(sl_dev__host_stream_call(be, sl_dev__ring_copy_stream(r), gate_pass, &g));
    sl_buffer *buf;
    fill(r, 1 << 16, 0x77, &buf);
    check_ctx c = {&g, sl_buffer_data(buf), 1 << 16, 0, 0};
    ASSERT_OK(sl_dev__host_stream_call(be, cons, check_on_consumer, &c));
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, open_later, &g), 0);
    ASSERT_OK(be->ops->stream_sync(be, cons));
    pthread_join(t, NULL);
    ASSERT_EQ(c.gate_was_open, 1);
    ASSERT_EQ(c.data_ok, 1);
    sl_buffer_release(buf);
    ring_done(r);
    gate_destroy(&g);
}

/* The pin_memory race: a released batch whose consumer stream has not yet
 * passed the release point must not be overwritten. */
SL_TEST(device_ring__reuse_waits_for_the_consumer_stream) {
    sl_dev_ring *r = host_ring(2);
    sl_dev_backend *be = sl_dev__ring_backend(r);
    gate g;
    gate_init(&g);
    sl_buffer *a, *b;
    sl_dev_slot *sa = fill(r, 1024, 1, &a);
    /* A slow step on the consumer stream still reads batch a... */
    ASSERT_OK(sl_dev__host_stream_call(be, cons, gate_pass, &g));
    sl_buffer_release(a); /* ...when the consumer releases it */
    sl_dev_slot *sb = fill(r, 1024, 2, &b);
    ASSERT(sb != sa);
    sl_buffer_release(b);
    ASSERT_EQ(sl_dev__ring_slots(r), 2);
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, open_later, &g), 0);
    sl_dev_slot *s3;
    uint64_t waited = 0;
    double t0 = now_s();
    ASSERT_OK(sl_dev__ring_acquire(r, 1024, 1024, &s3, &waited));
    double dt = now_s() - t0;
    /* Both slots are released behind the gate: the acquire had to wait for
     * the consumer stream, and made no third slot. */
    ASSERT_EQ(atomic_load(&g.opened), 1);
    ASSERT(s3 == sa || s3 == sb);
    ASSERT_EQ(sl_dev__ring_slots(r), 2);
    ASSERT(waited > 0);
    ASSERT(dt < 5.0);
    pthread_join(t, NULL);
    sl_dev__slot_abandon(s3);
    ring_done(r);
    gate_destroy(&g);
}

SL_TEST(device_ring__held_batches_released_out_of_order) {
    sl_dev_ring *r = host_ring(2);
    sl_dev_backend *be = sl_dev__ring_backend(r);
    enum { N = 5 };
    sl_buffer *buf[N];
    sl_dev_slot *slot[N];
    for (int i = 0; i < N; i++)
        slot[i] = fill(r, 8192, (uint8_t)(10 + i), &buf[i]);
    /* Every slot is held: the ring grew past its depth instead of blocking. */
    ASSERT_EQ(sl_dev__ring_slots(r), N);
    ASSERT_OK(be->ops->stream_sync(be, cons));
    for (int i = 0; i < N; i++)
        ASSERT(all_equal(sl_buffer_data(buf[i]), 8192, (uint8_t)(10 + i)));
    static const int order[N] = {3, 0, 4, 2, 1};
    for (int k = 0; k < N; k++) {
        sl_buffer_release(buf[order[k]]);
        /* the held ones are untouched by the reuse of the released ones */
        sl_buffer *nb;
        sl_dev_slot *ns = fill(r, 8192, 0xee, &nb);
        for (int j = k + 1; j < N; j++)
            ASSERT(ns != slot[order[j]]);
        ASSERT_OK(be->ops->stream_sync(be, cons));
        for (int j = k + 1; j < N; j++)
            ASSERT(all_equal(sl_buffer_data(buf[order[j]]), 8192, (uint8_t)(10 + order[j])));
        sl_buffer_release(nb);
    }
    ASSERT_EQ(sl_dev__ring_slots(r), N);
    ring_done(r);
}

/* Closing with copies queued (behind a gate) and a batch still held:
 * close returns at once when the gate opens; the held batch stays valid and
 * its release frees the rest (ASan checks that nothing leaks). */
SL_TEST(device_ring__close_mid_copy) {
    sl_dev_ring *r = host_ring(3);
    sl_dev_backend *be = sl_dev__ring_backend(r);
    gate g;
    gate_init(&g);
    ASSERT_OK(sl_dev__host_stream_call(be, sl_dev__ring_copy_stream(r), gate_pass, &g));
    sl_buffer *held, *b2, *b3;
    fill(r, 1 << 20, 0x42, &held);
    fill(r, 1 << 20, 0x43, &b2);
    fill(r, 1 << 20, 0x44, &b3);
    sl_buffer_release(b2);
    sl_buffer_release(b3);
    gate_open(&g);
    double t0 = now_s();
    sl_dev__ring_close(r);
    ASSERT(now_s() - t0 < 2.0);
    ASSERT_OK(be->ops->stream_sync(be, cons)); /* the backend lives while a batch is held */
    ASSERT(all_equal(sl_buffer_data(held), 1 << 20, 0x42));
    sl_buffer_release(held); /* the last reference frees the ring */
    cons_free();
    gate_destroy(&g);
}

SL_TEST(device_ring__abandoned_slot_is_reused) {
    sl_dev_ring *r = host_ring(2);
    sl_dev_slot *s, *t;
    uint64_t waited = 0;
    ASSERT_OK(sl_dev__ring_acquire(r, 100, 100, &s, &waited));
    sl_dev__slot_abandon(s);
    ASSERT_OK(sl_dev__ring_acquire(r, 200, 300, &t, &waited));
    ASSERT(t == s); /* grown in place */
    ASSERT_EQ(sl_dev__ring_slots(r), 1);
    sl_dev__slot_abandon(t);
    ring_done(r);
}

SL_TEST(device_ring__normalize_matches_cpu_op) {
    sl_dev_ring *r = host_ring(2);
    sl_dev_backend *be = sl_dev__ring_backend(r);
    enum { H = 5, W = 7, C = 3 };
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    for (int dt = 0; dt < 3; dt++) { /* float32, float16, bfloat16 */
        for (int chw = 0; chw < 2; chw++) {
            sl_dev_slot *s;
            uint64_t waited = 0;
            size_t in = H * W * C, outb = in * (dt ? 2 : 4);
            ASSERT_OK(sl_dev__ring_acquire(r, in, in + 256 + outb, &s, &waited));
            uint8_t *h = sl_dev__slot_host(s);
            for (size_t i = 0; i < in; i++)
                h[i] = (uint8_t)sl_mix64(i * 7 + 3);
            sl_dev_norm n = {0};
            n.src = sl_dev__slot_dev(s);
            n.dst = (uint8_t *)sl_dev__slot_dev(s) + 256 * ((in + 255) / 256);
            n.n = 1; n.h = H; n.w = W; n.c = C;
            memcpy(n.mean, mean, sizeof mean);
            memcpy(n.std, sd, sizeof sd);
            n.chw = chw;
            n.dtype = dt == 2 ? SL_BF16 : dt ? SL_F16 : SL_F32;
            ASSERT_OK(sl_dev__slot_submit(s, in, &n));
            sl_buffer *buf;
            ASSERT_OK(sl_dev__slot_handout(s, &buf));
            ASSERT_OK(be->ops->stream_sync(be, cons));
            sl_tensor src, ref;
            int64_t shp[3] = {H, W, C};
            sl_tensor_view(&src, h, SL_U8, 3, shp);
            memset(&ref, 0, sizeof ref);
            ASSERT_OK(sl_image_normalize(&src, mean, sd, chw ? SL_LAYOUT_CHW : SL_LAYOUT_HWC,
                                         n.dtype, &ref));
            /* tolerance: none; the same float32 expression */
            ASSERT_EQ(memcmp(ref.data, n.dst, ref.nbytes), 0);
            sl_tensor_release(&ref);
            sl_buffer_release(buf);
        }
    }
    ring_done(r);
}

/* Rule 1b: a batch the stages wrote in pinned memory is copied from where it
 * lies (the slot has no staging memory), and its buffer goes back to its
 * pool only after the copy has passed: handing it out earlier would let a
 * worker overwrite bytes the copy engine is still reading. */
SL_TEST(device_ring__pinned_source_held_until_copied) {
    sl_dev_ring *r = host_ring(2);
    sl_dev_backend *be = sl_dev__ring_backend(r);
    sl_pool *pool = pinned_pool(be, 4096, 4);
    sl_buffer *src;
    ASSERT_OK(sl_pool_get(pool, &src));
    ASSERT(sl_buffer__mem_ctx(src) == (void *)be);
    memset(sl_buffer_data(src), 0x3c, 4096);
    gate g;
    gate_init(&g);
    ASSERT_OK(sl_dev__host_stream_call(be, sl_dev__ring_copy_stream(r), gate_pass, &g));
    sl_dev_slot *s;
    uint64_t waited = 0;
    ASSERT_OK(sl_dev__ring_acquire(r, 0, 4096, &s, &waited));
    ASSERT(sl_dev__slot_host(s) == NULL); /* no staging memory */
    sl_dev_copy cp = {0, sl_buffer_data(src), 4096};
    ASSERT_OK(sl_dev__slot_submit_from(s, &cp, 1, &src, 1, NULL));
    sl_buffer *out;
    ASSERT_OK(sl_dev__slot_handout(s, &out));
    sl_buffer_release(src); /* the batch lets go; the slot still holds it */
    ASSERT_EQ(sl_buffer_refcount(src), 1u);
    sl_buffer *other;
    ASSERT_OK(sl_pool_get(pool, &other));
    ASSERT(other != src);
    /* an acquire while the copy is behind the gate keeps holding it */
    sl_dev_slot *s2;
    ASSERT_OK(sl_dev__ring_acquire(r, 0, 4096, &s2, &waited));
    sl_dev__slot_abandon(s2);
    ASSERT_EQ(sl_buffer_refcount(src), 1u);
    sl_buffer_release(other);
    gate_open(&g);
    ASSERT_OK(be->ops->stream_sync(be, cons));
    ASSERT(all_equal(sl_buffer_data(out), 4096, 0x3c));
    sl_buffer_release(out);
    /* the copy has passed: the next acquire lets the buffer go to its pool,
     * whose free list hands out the last one returned first */
    ASSERT_OK(sl_dev__ring_acquire(r, 0, 4096, &s2, &waited));
    sl_dev__slot_abandon(s2);
    sl_buffer *again;
    ASSERT_OK(sl_pool_get(pool, &again));
    ASSERT(again == src);
    ASSERT_EQ(sl_pool_allocated(pool), 2u);
    sl_buffer_release(again);
    sl_pool_free(pool);
    ring_done(r);
    gate_destroy(&g);
}

/* A pool of pinned memory keeps its backend: a buffer released after the
 * ring and the pool are gone is still freed by the backend that made it
 * (ASan: no leak, no use after free). */
SL_TEST(device_ring__pinned_pool_outlives_ring) {
    sl_dev_ring *r = host_ring(2);
    sl_dev_backend *be = sl_dev__ring_backend(r);
    sl_pool *pool = pinned_pool(be, 1 << 12, 2);
    sl_buffer *b;
    ASSERT_OK(sl_pool_get(pool, &b));
    sl_pool_free(pool);
    ring_done(r);
    memset(sl_buffer_data(b), 1, 1 << 12);
    sl_buffer_release(b); /* the last reference: pool, then backend */
}

/* ---- sl_stager on the host backend (device_stager.c) --------------------------------- */

typedef struct {
    sl_stager *st;
    int seed;
    int bad;
} stage_job;

/* Stage 40 batches of two tensors each, keep the previous batch while the
 * next is staged (so slots are held across calls), check every value. */
static void *stage_many(void *arg) {
    stage_job *j = arg;
    sl_tensor prev[2];
    int have_prev = 0;
    for (int k = 0; k < 40; k++) {
        int32_t a[300];
        uint8_t b[5];
        for (int i = 0; i < 300; i++)
            a[i] = j->seed * 100000 + k * 1000 + i;
        memset(b, (j->seed * 40 + k) & 0xff, sizeof b);
        sl_tensor in[2], out[2];
        int64_t sa = 300, sb = 5;
        sl_tensor_view(&in[0], a, SL_I32, 1, &sa);
        sl_tensor_view(&in[1], b, SL_U8, 1, &sb);
        if (sl_stager_stage(j->st, in, 2, out) != SL_OK) {
            j->bad++;
            continue;
        }
        if (memcmp(out[0].data, a, sizeof a) || memcmp(out[1].data, b, sizeof b))
            j->bad++;
        if (have_prev) {
            /* still intact although later batches were staged meanwhile */
            if (((int32_t *)prev[0].data)[0] != j->seed * 100000 + (k - 1) * 1000)
                j->bad++;
            sl_tensor_release(&prev[0]);
            sl_tensor_release(&prev[1]);
        }
        prev[0] = out[0];
        prev[1] = out[1];
        have_prev = 1;
    }
    if (have_prev) {
        sl_tensor_release(&prev[0]);
        sl_tensor_release(&prev[1]);
    }
    return NULL;
}

/* Two threads staging through one stager (pinned, then to the "device" on
 * the host backend's copy stream): calls are serialised, held batches keep
 * their slots, every value arrives; TSan checks the locking. */
SL_TEST(device_stager__two_threads_host_backend) {
    for (int to_device = 0; to_device <= 1; to_device++) {
        sl_stager *st = NULL;
        ASSERT_OK(sl_stager_open(&st, SL_DEVICE_CPU, 0, to_device, 2));
        stage_job jobs[2] = {{st, 1, 0}, {st, 2, 0}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            ASSERT_EQ(pthread_create(&th[i], NULL, stage_many, &jobs[i]), 0);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        ASSERT_EQ(jobs[0].bad, 0);
        ASSERT_EQ(jobs[1].bad, 0);
        sl_stager_stats ss;
        sl_stager_stats_get(st, &ss);
        ASSERT_U64_EQ(ss.batches, 80);
        ASSERT_U64_EQ(ss.h2d_bytes, to_device ? 80 * (1200 + 5) : 0);
        ASSERT(ss.slots >= 2 && ss.slots <= 4);
        sl_stager_free(st);
    }
}

SL_TEST(device_stager__bad_arguments) {
    sl_stager *st = NULL;
    ASSERT_EQ(sl_stager_open(&st, (sl_device)7, 0, 0, 4), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "not SL_DEVICE_CUDA or SL_DEVICE_CPU");
    ASSERT_EQ(sl_stager_open(&st, SL_DEVICE_CPU, -1, 0, 4), SL_EINVAL);
    ASSERT_OK(sl_stager_open(&st, SL_DEVICE_CPU, 0, 0, 4));
    sl_tensor out[1];
    ASSERT_EQ(sl_stager_stage(st, NULL, 1, out), SL_EINVAL);
    ASSERT_EQ(sl_stager_stage(st, NULL, -1, out), SL_EINVAL);
    ASSERT_OK(sl_stager_stage(st, NULL, 0, NULL)); /* nothing to stage */
    sl_stager_free(st);
    sl_stager_free(NULL);
}

/* The host backend's stream thread refused (injected): stream_create fails
 * naming it, nothing leaks, and the next create works. */
SL_TEST(device_ring__host_stream_thread_refused) {
    sl_dev_backend *be;
    ASSERT_OK(sl_dev__host_open(&be));
    void *s = NULL;
    sl__workers_fail_at(1);
    int rc = be->ops->stream_create(be, &s);
    sl__workers_fail_at(0);
    ASSERT_RC(rc, SL_ENOMEM);
    ASSERT_CONTAINS(sl_errmsg(), "host device: cannot start a hoststream thread");
    ASSERT_OK(be->ops->stream_create(be, &s));
    be->ops->stream_destroy(be, s);
    sl_dev__backend_release(be);
}
