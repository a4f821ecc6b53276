/*
 * device_host.c — the host backend: the device interface done with threads
 * and ordinary memory, so that the ring, its events and its reuse rule run
 * (and are tested, under TSan) on a machine without a GPU.
 *
 *  - pinned and device memory are 64-byte aligned heap blocks;
 *  - a stream is a thread running its queue of work in submission order;
 *    `submitted` counts work queued, `done` work finished (both guarded by
 *    the stream's mutex, `cv` broadcast on every change);
 *  - an event is (stream, seq): recorded, it holds the stream's `submitted`
 *    at that moment; it has passed when the stream's `done` reaches seq;
 *  - stream_wait queues a work item that blocks the stream's thread until
 *    the event has passed, as cudaStreamWaitEvent blocks the GPU stream;
 *  - the NULL (default) stream is the calling thread: work on it runs at
 *    once, waiting on an event blocks the caller, and an event recorded on
 *    it has passed. A CPU consumer reads a batch as soon as next() returns,
 *    so its "stream" is itself; tests make real consumer streams with
 *    stream_create.
 *
 * Invariant: a stream's thread never holds its own mutex while running work,
 * and waits on another stream only through that stream's mutex and cv, so
 * streams waiting on each other cannot deadlock unless the work itself is
 * circular (as on a GPU). Lock order: a stream's mutex, then (in a wait
 * item) the other stream's, never both at once.
 */
#include "device/device.h"
#include "core/worker.h"

#include <pthread.h>
#include <string.h>

enum { W_COPY = 1, W_NORM, W_CROP, W_WAIT, W_CALL };

typedef struct host_stream host_stream;

typedef struct work {
    int kind;
    void *dst;
    const void *src;
    size_t n;
    sl_dev_norm norm;
    sl_dev_crop crop;
    host_stream *wait_stream;
    uint64_t wait_seq;
    void (*fn)(void *);
    void *arg;
} work;

struct host_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* work queued, work done, stop */
    work *q;                      /* ring of qcap items: [qhead, qhead + qlen) */
    size_t qcap, qhead, qlen;
    uint64_t submitted, done;
    sl_workers thread;            /* the one thread; its stop flag read under mu */
};

typedef struct host_event {
    pthread_mutex_t mu;           /* guards s and seq (recorded from any thread) */
    host_stream *s;               /* NULL: never recorded */
    uint64_t seq;
} host_event;


/* The work queued on s so far: what an event recorded now waits for. */
static uint64_t stream_submitted(host_stream *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t seq = s->submitted;
    pthread_mutex_unlock(&s->mu);
    return seq;
}

static void stream_wait_seq(host_stream *s, uint64_t seq) {
    pthread_mutex_lock(&s->mu);
    while (s->done < seq)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void run(const work *w) {
    switch (w->kind) {
    case W_COPY: memcpy(w->dst, w->src, w->n); break;
    case W_NORM: sl_dev__normalize_host(&w->norm); break;
    case W_CROP: sl_dev__crop_resize_host(&w->crop); break;
    case W_WAIT: stream_wait_seq(w->wait_stream, w->wait_seq); break;
    case W_CALL: w->fn(w->arg); break;
    default: break;
    }
}

static void *stream_main(void *arg) {
    host_stream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->qlen == 0 && !sl__workers_stopping(&s->thread))
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->qlen == 0)
            break; /* stopped and drained */
        work w = s->q[s->qhead];
        pthread_mutex_unlock(&s->mu);
        run(&w);
        pthread_mutex_lock(&s->mu);
        s->qhead = (s->qhead + 1) % s->qcap;
        s->qlen--;
        s->done++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int push(host_stream *s, const work *w) {
    pthread_mutex_lock(&s->mu);
    if (s->qlen == s->qcap) {
        size_t cap = s->qcap ? s->qcap * 2 : 16;
        work *q = sl__malloc(cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&s->mu);
            return sl__oom("queueing work on a host stream");
        }
        for (size_t i = 0; i < s->qlen; i++)
            q[i] = s->q[(s->qhead + i) % s->qcap];
        sl__free(s->q);
        s->q = q;
        s->qcap = cap;
        s->qhead = 0;
    }
    s->q[(s->qhead + s->qlen) % s->qcap] = *w;
    s->qlen++;
    s->submitted++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return SL_OK;
}


static int h_stream_create(sl_dev_backend *b, void **out) {
    (void)b;
    host_stream *s = sl__calloc(1, sizeof *s);
    if (!s)
        return sl__oom("creating a host stream");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    sl__workers_init_cv(&s->thread, "hoststream", 1, &s->mu, &s->cv); /* 1 fits inline */
    int rc = sl__workers_start(&s->thread, stream_main, s);
    if (rc < 0) {
        sl__workers_dispose(&s->thread);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        sl__free(s);
        return sl__error_prefix(rc, "host device");
    }
    *out = s;
    return SL_OK;
}

/* Finishes the work already queued, then stops the thread. */
static void h_stream_destroy(sl_dev_backend *b, void *stream) {
    (void)b;
    host_stream *s = stream;
    if (!s)
        return;
    sl__workers_dispose(&s->thread); /* stop (wakes cv), join */
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    sl__free(s->q);
    sl__free(s);
}

static int h_stream_sync(sl_dev_backend *b, void *stream) {
    (void)b;
    host_stream *s = stream;
    if (s)
        stream_wait_seq(s, stream_submitted(s));
    return SL_OK;
}

/* Work for a stream: queued on it, or done now when there is none. */
static int submit(host_stream *s, const work *w) {
    if (!s) {
        run(w);
        return SL_OK;
    }
    return push(s, w);
}

static int h_copy(sl_dev_backend *b, void *dst, const void *src, size_t n, void *stream) {
    (void)b;
    work w = {.kind = W_COPY, .dst = dst, .src = src, .n = n};
    return submit(stream, &w);
}

static int h_normalize(sl_dev_backend *b, const sl_dev_norm *a, void *stream) {
    (void)b;
    work w = {.kind = W_NORM, .norm = *a};
    return submit(stream, &w);
}

static int h_crop_resize(sl_dev_backend *b, const sl_dev_crop *a, void *stream) {
    (void)b;
    work w = {.kind = W_CROP, .crop = *a};
    return submit(stream, &w);
}

static int h_event_create(sl_dev_backend *b, void **out) {
    (void)b;
    host_event *e = sl__calloc(1, sizeof *e);
    if (!e)
        return sl__oom("creating a host event");
    pthread_mutex_init(&e->mu, NULL);
    *out = e;
    return SL_OK;
}

static void h_event_destroy(sl_dev_backend *b, void *event) {
    (void)b;
    host_event *e = event;
    if (!e)
        return;
    pthread_mutex_destroy(&e->mu);
    sl__free(e);
}

static int h_event_record(sl_dev_backend *b, void *event, void *stream) {
    (void)b;
    host_event *e = event;
    host_stream *s = stream;
    uint64_t seq = s ? stream_submitted(s) : 0;
    pthread_mutex_lock(&e->mu);
    e->s = s;
    e->seq = seq;
    pthread_mutex_unlock(&e->mu);
    return SL_OK;
}

static void event_point(host_event *e, host_stream **s, uint64_t *seq) {
    pthread_mutex_lock(&e->mu);
    *s = e->s;
    *seq = e->seq;
    pthread_mutex_unlock(&e->mu);
}

static int h_event_query(sl_dev_backend *b, void *event) {
    (void)b;
    host_stream *s;
    uint64_t seq;
    event_point(event, &s, &seq);
    if (!s)
        return 1;
    pthread_mutex_lock(&s->mu);
    int passed = s->done >= seq;
    pthread_mutex_unlock(&s->mu);
    return passed;
}

static int h_event_sync(sl_dev_backend *b, void *event) {
    (void)b;
    host_stream *s;
    uint64_t seq;
    event_point(event, &s, &seq);
    if (s)
        stream_wait_seq(s, seq);
    return SL_OK;
}

static int h_stream_wait(sl_dev_backend *b, void *stream, void *event) {
    host_stream *s = stream, *es;
    uint64_t seq;
    if (!s)
        return h_event_sync(b, event);
    event_point(event, &es, &seq);
    if (!es || es == s)
        return SL_OK; /* nothing recorded, or already in this stream's order */
    work w = {.kind = W_WAIT, .wait_stream = es, .wait_seq = seq};
    return push(s, &w);
}

static int h_alloc(int pinned, size_t size, void **out) {
    *out = sl__aligned_alloc(64, size ? size : 64);
    if (!*out)
        return sl__oom("allocating a host device buffer");
    sl_dev__held(SL_DEVICE_CPU, pinned, 1);
    return SL_OK;
}

static void h_free(int pinned, void *ptr) {
    if (!ptr)
        return;
    sl__free(ptr);
    sl_dev__held(SL_DEVICE_CPU, pinned, -1);
}

static int h_host_alloc(sl_dev_backend *b, size_t size, void **out) {
    (void)b;
    return h_alloc(1, size, out);
}

static void h_host_free(sl_dev_backend *b, void *ptr) {
    (void)b;
    h_free(1, ptr);
}

static int h_dev_alloc(sl_dev_backend *b, size_t size, void **out) {
    (void)b;
    return h_alloc(0, size, out);
}

static void h_dev_free(sl_dev_backend *b, void *ptr) {
    (void)b;
    h_free(0, ptr);
}

static void h_destroy(sl_dev_backend *b) { sl__free(b); }

int sl_dev__host_stream_call(sl_dev_backend *b, void *stream, void (*fn)(void *), void *arg) {
    (void)b;
    host_stream *s = stream;
    if (!s) {
        fn(arg);
        return SL_OK;
    }
    work w = {.kind = W_CALL, .fn = fn, .arg = arg};
    return push(s, &w);
}

static const sl_dev_ops host_ops = {
    .name = "host",
    .device = SL_DEVICE_CPU,
    .host_alloc = h_host_alloc,
    .host_free = h_host_free,
    .dev_alloc = h_dev_alloc,
    .dev_free = h_dev_free,
    .stream_create = h_stream_create,
    .stream_destroy = h_stream_destroy,
    .stream_sync = h_stream_sync,
    .stream_wait = h_stream_wait,
    .copy = h_copy,
    .normalize = h_normalize,
    .crop_resize = h_crop_resize,
    .event_create = h_event_create,
    .event_destroy = h_event_destroy,
    .event_record = h_event_record,
    .event_query = h_event_query,
    .event_sync = h_event_sync,
    .destroy = h_destroy,
};

int sl_dev__host_open(sl_dev_backend **out) {
    sl_dev_backend *b = sl__calloc(1, sizeof *b);
    if (!b)
        return sl__oom("opening the host device");
    sl_dev__backend_init(b, &host_ops, 0);
    b->kernels = 1;
    *out = b;
    return SL_OK;
}
