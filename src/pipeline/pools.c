/*
 * pools.c — size-classed buffer pools for a pipeline's sample and batch
 * tensors, so that steady-state iteration takes buffers from free lists
 * instead of malloc.
 *
 * Sizes are rounded up to one of four classes per power of two (2^e * 5/4,
 * 6/4, 7/4, 8/4), which wastes at most 25% of a buffer while letting samples
 * of slightly different sizes (decoded images) share a pool. Each class is an
 * sl_pool, created on first use; a pool outlives this set until its last
 * buffer is released (a batch kept by the consumer after the pipeline is
 * freed stays valid).
 *
 * Reserved classes (sl_pipeline__pools_reserve): a pool caches every buffer
 * it ever made, so its size is the most buffers that were ever out at once.
 * For batch buffers that high-water mark is reached late and at random: the
 * queues bound how many batches are in flight (workers + queue depths + what
 * the consumer holds), but the bound is only met when the consumer stalls
 * while every worker finishes a batch. Measured with bench/soak.py (900
 * photos, batch 64 of 3x224x224 float32, 2 workers, `sluice run`): the batch
 * pool held 5 buffers after epoch 3 and 6 after epoch 12, and RSS rose
 * 38.5 MB (one batch) at epoch 7 and again by epoch 20, +29% from epoch 5.
 * glibc's arenas are not the cause: buffers this large (past its 32 MiB
 * mmap threshold ceiling) are mmap'd and unmapped one by one. So a
 * reserved class is filled to the bound on its first use, each buffer
 * written once so that its pages are resident: the memory the pipeline will
 * need at its worst is taken in the first batch, and a job that cannot afford
 * it fails then, not at epoch 50. (Making them on demand instead holds three
 * such batches, not eight, while the consumer keeps up, but RSS then grows
 * at the first long stall: bench/soak.py fails, +17% after epoch 3.) An
 * epoch's last, partial batch takes a full batch's buffer
 * (sl_pipeline__pools_batch_tensor), not a pool of its own size. The class
 * caches at most that many; a consumer holding more batches than the bound gets extra buffers that are
 * freed (unmapped) on release rather than kept.
 *
 * Batch memory (sl_pipeline__pools_set_batch_mem): with a device, batch
 * tensors come from classes of their own whose bytes are the device
 * backend's pinned memory, so the stages write batches straight into memory
 * the copy engine reads (no staging copy at the hand-off); samples stay on
 * the heap. Without one, batches and samples share the classes.
 */
#include "pipeline/pools.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define MIN_SHIFT 8                /* smallest class: 256 bytes */
#define NCLASSES (4 * 56)

struct sl_pipeline__pools {
    pthread_mutex_t mu;            /* serialises creation of a class's pool */
    _Atomic(sl_pool *) pool[NCLASSES];
    _Atomic(sl_pool *) bpool[NCLASSES]; /* batch classes, with `mem` only */
    sl_pool_mem mem;               /* mem.alloc NULL: batches use pool[] */
    size_t reserve[NCLASSES];      /* buffers to make on first use (0: none), in
                                      the classes batches use; set before any
                                      worker starts */
    size_t touch[NCLASSES];        /* bytes of each reserved buffer in use */
};

static int size_class(size_t size, size_t *class_size) {
    if (size <= ((size_t)1 << MIN_SHIFT)) {
        *class_size = (size_t)1 << MIN_SHIFT;
        return 0;
    }
    int e = 63 - __builtin_clzll((unsigned long long)(size - 1)); /* 2^e < size <= 2^(e+1) */
    size_t base = (size_t)1 << e, quarter = base >> 2;
    size_t j = (size - base + quarter - 1) / quarter;              /* 1..4 */
    *class_size = base + j * quarter;
    int c = (e - MIN_SHIFT) * 4 + (int)j;
    return c < NCLASSES ? c : -1;
}

int sl_pipeline__pools_create(sl_pipeline__pools **out) {
    sl_pipeline__pools *ps = sl__calloc(1, sizeof *ps);
    if (!ps)
        return sl__oom("creating buffer pools");
    pthread_mutex_init(&ps->mu, NULL);
    for (int i = 0; i < NCLASSES; i++) {
        atomic_init(&ps->pool[i], NULL);
        atomic_init(&ps->bpool[i], NULL);
    }
    *out = ps;
    return SL_OK;
}

void sl_pipeline__pools_set_batch_mem(sl_pipeline__pools *ps, const sl_pool_mem *mem) {
    ps->mem = *mem;
    if (mem->retain)
        mem->retain(mem->ctx); /* the set's own, until sl_pipeline__pools_free */
}

/* A buffer of `size` bytes; `batch`: for a batch tensor (from bpool[], in
 * pinned memory, when batch memory is set; the reserved counts apply to the
 * classes batches use). */
static int get_from(sl_pipeline__pools *ps, size_t size, int batch, sl_buffer **out) {
    size_t csize;
    int c = size_class(size, &csize);
    int pinned = batch && ps->mem.alloc;
    if (c < 0 && !pinned)
        return sl_buffer_alloc(out, size);
    if (c < 0)
        return sl__error(SL_ELIMIT, "a batch of %zu bytes is too large", size);
    _Atomic(sl_pool *) *arr = pinned ? ps->bpool : ps->pool;
    int reserved = pinned || !ps->mem.alloc;
    sl_pool *pool = atomic_load_explicit(&arr[c], memory_order_acquire);
    if (!pool) {
        pthread_mutex_lock(&ps->mu);
        pool = atomic_load_explicit(&arr[c], memory_order_acquire);
        if (!pool) {
            size_t rsv = reserved ? ps->reserve[c] : 0;
            int rc = sl_pool__create_mem(&pool, csize, rsv, pinned ? &ps->mem : NULL);
            if (rc == SL_OK && rsv > 0) {
                rc = sl_pool__prefill(pool, rsv, ps->touch[c]);
                if (rc < 0)
                    sl_pool_free(pool);
            }
            if (rc < 0) {
                pthread_mutex_unlock(&ps->mu);
                return rc;
            }
            atomic_store_explicit(&arr[c], pool, memory_order_release);
        }
        pthread_mutex_unlock(&ps->mu);
    }
    return sl_pool_get(pool, out);
}

int sl_pipeline__pools_reserve(sl_pipeline__pools *ps, size_t size, size_t count) {
    size_t csize;
    int c = size_class(size, &csize);
    if (c < 0 || count == 0)
        return SL_OK;
    ps->reserve[c] += count; /* two columns in one class need both counts */
    if (ps->touch[c] < size)
        ps->touch[c] = size;
    return SL_OK;
}

static int make_tensor(sl_pipeline__pools *ps, sl_tensor *t, sl_dtype dtype, int ndim,
                       const int64_t *shape, int64_t rows, int batch);

int sl_pipeline__pools_tensor(sl_pipeline__pools *ps, sl_tensor *t, sl_dtype dtype, int ndim,
                              const int64_t *shape) {
    return make_tensor(ps, t, dtype, ndim, shape, ndim > 0 ? shape[0] : 1, 0);
}

int sl_pipeline__pools_batch_tensor(sl_pipeline__pools *ps, sl_tensor *t, sl_dtype dtype,
                                    int ndim, const int64_t *shape, int64_t rows) {
    return make_tensor(ps, t, dtype, ndim, shape, rows, 1);
}

int sl_pipeline__pools_op_alloc(void *ps, sl_tensor *t, sl_dtype dtype, int ndim,
                                const int64_t *shape) {
    return sl_pipeline__pools_tensor(ps, t, dtype, ndim, shape);
}

int sl_pipeline__pools_op_batch_alloc(void *ps, sl_tensor *t, sl_dtype dtype, int ndim,
                                      const int64_t *shape, int64_t rows) {
    return sl_pipeline__pools_batch_tensor(ps, t, dtype, ndim, shape, rows);
}

static int make_tensor(sl_pipeline__pools *ps, sl_tensor *t, sl_dtype dtype, int ndim,
                       const int64_t *shape, int64_t rows, int batch) {
    size_t n = sl_dtype_size(dtype);
    memset(t, 0, sizeof *t);
    if (n == 0 || ndim < 0 || ndim > SL_MAX_DIMS)
        return sl__error(SL_EINVAL, "output tensor: bad dtype %d or ndim %d", (int)dtype, ndim);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || !sl__mul_ok(n, (size_t)shape[i], &n))
            return sl__error(SL_EINVAL, "output tensor: bad shape (dim %d = %lld)", i,
                             (long long)shape[i]);
    size_t take = n;
    if (ndim > 0 && shape[0] > 0 && rows > shape[0] &&
        !sl__mul_ok(n / (size_t)shape[0], (size_t)rows, &take))
        take = n;
    sl_buffer *b;
    SL_TRY(get_from(ps, take, batch, &b));
    t->buf = b;
    t->data = sl_buffer_data(b);
    t->nbytes = n;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->device = SL_DEVICE_CPU;
    return SL_OK;
}

size_t sl_pipeline__pools_class_size(size_t size) {
    size_t csize;
    return size_class(size, &csize) < 0 ? size : csize;
}

int sl_pipeline__pools_bytes(const sl_pipeline__pools *ps, sl_pipeline__pool_bytes *out, int cap,
                             size_t *held_out, size_t *cached_out) {
    int n = 0;
    *held_out = *cached_out = 0;
    for (int k = 0; k < 2 * NCLASSES; k++) {
        int i = k % NCLASSES;
        _Atomic(sl_pool *) *arr = k < NCLASSES ? ((sl_pipeline__pools *)ps)->pool
                                              : ((sl_pipeline__pools *)ps)->bpool;
        const sl_pool *pool = atomic_load_explicit(&arr[i], memory_order_acquire);
        if (!pool)
            continue;
        size_t held, cached;
        sl_pool__bytes(pool, &held, &cached);
        *held_out += held;
        *cached_out += cached;
        if (n < cap) {
            int e = MIN_SHIFT + (i - 1) / 4;           /* class i: 2^e + j * 2^e / 4 */
            size_t base = (size_t)1 << e;
            out[n].buf_size = i == 0 ? base : base + (size_t)((i - 1) % 4 + 1) * (base >> 2);
            out[n].held = held;
            out[n].cached = cached;
        }
        n++;
    }
    return n;
}

void sl_pipeline__pools_free(sl_pipeline__pools *ps) {
    if (!ps)
        return;
    for (int i = 0; i < NCLASSES; i++) {
        sl_pool_free(atomic_load(&ps->pool[i]));
        sl_pool_free(atomic_load(&ps->bpool[i]));
    }
    sl_pool_mem mem = ps->mem;
    pthread_mutex_destroy(&ps->mu);
    sl__free(ps);
    if (mem.alloc && mem.done)
        mem.done(mem.ctx);
}
