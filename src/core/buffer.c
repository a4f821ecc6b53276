/*
 * buffer.c — reference-counted buffers and the pools that recycle them, so a
 * running pipeline does no malloc per sample (rule R4).
 *
 * A heap or pool buffer is one allocation: the sl_buffer header followed, at a
 * 64-byte boundary, by the data. A wrapped buffer points at foreign memory and
 * calls its release callback at the end. A pool made with an sl_pool_mem
 * (pinned memory) takes each buffer's bytes from it and its header from the
 * heap.
 *
 * Pool invariants:
 *  1. pool->refs counts the creator's reference (until sl_pool_free) plus one
 *     per buffer currently handed out; the pool is destroyed when it hits 0.
 *  2. Buffers on the free list have refcount 0 and belong to the pool.
 *  3. pool->mu protects free_list and nfree only.
 *  4. live counts the pool's buffers that exist (handed out or cached) and
 *     cached mirrors nfree; both are atomics so that stats read them from any
 *     thread without taking mu (they may lag each other by one buffer).
 */
#include "core/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define SL_BUF_ALIGN 64

struct sl_buffer {
    _Atomic unsigned refs;
    void *data;
    size_t size;
    sl_pool *pool;                 /* non-NULL: return to this pool */
    void (*release)(void *user);   /* wrapped buffers */
    void *user;
    struct sl_buffer *next_free;   /* pool free list link */
};

struct sl_pool {
    pthread_mutex_t mu;
    _Atomic size_t refs;
    size_t buf_size;
    size_t max_cached;
    sl_buffer *free_list;          /* guarded by mu */
    size_t nfree;                  /* guarded by mu */
    _Atomic size_t allocated;
    _Atomic size_t live;
    _Atomic size_t cached;
    sl_pool_mem mem;               /* mem.alloc NULL: the heap */
};

static size_t header_size(void) {
    return (sizeof(sl_buffer) + SL_BUF_ALIGN - 1) & ~(size_t)(SL_BUF_ALIGN - 1);
}

/* A fresh header: refcount 1, no pool, no release callback. */
static sl_buffer *buffer_init(sl_buffer *b, void *data, size_t size) {
    atomic_init(&b->refs, 1);
    b->data = data;
    b->size = size;
    b->pool = NULL;
    b->release = NULL;
    b->user = NULL;
    b->next_free = NULL;
    return b;
}

static sl_buffer *heap_buffer_new(size_t size) {
    size_t total;
    if (!sl__add_ok(header_size(), size, &total))
        return NULL;
    sl_buffer *b = sl__aligned_alloc(SL_BUF_ALIGN, total);
    return b ? buffer_init(b, (char *)b + header_size(), size) : NULL;
}

static sl_buffer *pool_buffer_new(sl_pool *pool) {
    if (!pool->mem.alloc)
        return heap_buffer_new(pool->buf_size);
    sl_buffer *b = sl__malloc(sizeof *b);
    if (!b) {
        sl__oom("a buffer header");
        return NULL;
    }
    void *data = pool->mem.alloc(pool->mem.ctx, pool->buf_size);
    if (!data) {
        sl__free(b);
        return NULL;
    }
    return buffer_init(b, data, pool->buf_size);
}

/* pool_buffer_new failed: a pool with its own allocator keeps that
 * allocator's message (which call failed, e.g. cudaHostAlloc), after `what`. */
static int pool_oom(const sl_pool *pool, const char *what) {
    return pool->mem.alloc ? sl__error_prefix(SL_ENOMEM, "%s", what) : sl__oom(what);
}

static void pool_buffer_free(sl_pool *pool, sl_buffer *b) {
    if (pool->mem.alloc)
        pool->mem.free(pool->mem.ctx, b->data);
    sl__free(b);
}

void *sl_buffer__mem_ctx(const sl_buffer *buf) {
    return buf && buf->pool && buf->pool->mem.alloc ? buf->pool->mem.ctx : NULL;
}

int sl_buffer_alloc(sl_buffer **out, size_t size) {
    *out = heap_buffer_new(size);
    if (!*out)
        return sl__oom("allocating a buffer");
    return SL_OK;
}

int sl_buffer_wrap(sl_buffer **out, void *data, size_t size, void (*release)(void *user),
                   void *user) {
    sl_buffer *b = sl__malloc(sizeof *b);
    if (!b) {
        *out = NULL;
        return sl__oom("wrapping a buffer");
    }
    buffer_init(b, data, size);
    b->release = release;
    b->user = user;
    *out = b;
    return SL_OK;
}

void *sl_buffer__wrap_user(const sl_buffer *buf, void (*release)(void *user)) {
    return buf->release == release ? buf->user : NULL;
}

sl_buffer *sl_buffer_retain(sl_buffer *buf) {
    if (buf)
        atomic_fetch_add_explicit(&buf->refs, 1, memory_order_relaxed);
    return buf;
}

static void pool_unref(sl_pool *pool);

void sl_buffer_release(sl_buffer *buf) {
    if (!buf)
        return;
    if (atomic_fetch_sub_explicit(&buf->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (buf->pool) {
        sl_pool *pool = buf->pool;
        bool cached = false;
        pthread_mutex_lock(&pool->mu);
        if (pool->max_cached == 0 || pool->nfree < pool->max_cached) {
            buf->next_free = pool->free_list;
            pool->free_list = buf;
            pool->nfree++;
            cached = true;
            atomic_fetch_add_explicit(&pool->cached, 1, memory_order_relaxed);
        }
        pthread_mutex_unlock(&pool->mu);
        if (!cached) {
            atomic_fetch_sub_explicit(&pool->live, 1, memory_order_relaxed);
            pool_buffer_free(pool, buf);
        }
        pool_unref(pool);
        return;
    }
    if (buf->release)
        buf->release(buf->user);
    sl__free(buf);
}

void *sl_buffer_data(const sl_buffer *buf) { return buf->data; }
size_t sl_buffer_size(const sl_buffer *buf) { return buf->size; }
unsigned sl_buffer_refcount(const sl_buffer *buf) {
    return atomic_load_explicit(&((sl_buffer *)buf)->refs, memory_order_relaxed);
}

int sl_pool_create(sl_pool **out, size_t buf_size, size_t max_cached) {
    sl_pool *p = sl__calloc(1, sizeof *p);
    if (!p) {
        *out = NULL;
        return sl__oom("creating a buffer pool");
    }
    pthread_mutex_init(&p->mu, NULL);
    atomic_init(&p->refs, 1);
    atomic_init(&p->allocated, 0);
    atomic_init(&p->live, 0);
    atomic_init(&p->cached, 0);
    p->buf_size = buf_size;
    p->max_cached = max_cached;
    *out = p;
    return SL_OK;
}

int sl_pool__create_mem(sl_pool **out, size_t buf_size, size_t max_cached,
                        const sl_pool_mem *mem) {
    SL_TRY(sl_pool_create(out, buf_size, max_cached));
    if (mem && mem->alloc) {
        (*out)->mem = *mem;
        if (mem->retain)
            mem->retain(mem->ctx);
    }
    return SL_OK;
}

int sl_pool_get(sl_pool *pool, sl_buffer **out) {
    sl_buffer *b = NULL;
    pthread_mutex_lock(&pool->mu);
    if (pool->free_list) {
        b = pool->free_list;
        pool->free_list = b->next_free;
        pool->nfree--;
        atomic_fetch_sub_explicit(&pool->cached, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&pool->mu);
    if (!b) {
        b = pool_buffer_new(pool);
        if (!b) {
            *out = NULL;
            return pool_oom(pool, "taking a buffer from a pool");
        }
        atomic_fetch_add(&pool->allocated, 1);
        atomic_fetch_add_explicit(&pool->live, 1, memory_order_relaxed);
        b->pool = pool;
    }
    b->next_free = NULL;
    atomic_store_explicit(&b->refs, 1, memory_order_relaxed);
    atomic_fetch_add(&pool->refs, 1);
    *out = b;
    return SL_OK;
}

int sl_pool__prefill(sl_pool *pool, size_t n, size_t touch) {
    if (touch > pool->buf_size)
        touch = pool->buf_size;
    for (size_t i = 0; i < n; i++) {
        sl_buffer *b = pool_buffer_new(pool);
        if (!b)
            return pool_oom(pool, "filling a buffer pool");
        memset(b->data, 0, touch);
        atomic_init(&b->refs, 0);
        b->pool = pool;
        atomic_fetch_add(&pool->allocated, 1);
        pthread_mutex_lock(&pool->mu);
        bool cached = pool->max_cached == 0 || pool->nfree < pool->max_cached;
        if (cached) {
            b->next_free = pool->free_list;
            pool->free_list = b;
            pool->nfree++;
            atomic_fetch_add_explicit(&pool->live, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&pool->cached, 1, memory_order_relaxed);
        }
        pthread_mutex_unlock(&pool->mu);
        if (!cached) {
            pool_buffer_free(pool, b);
            break;
        }
    }
    return SL_OK;
}

size_t sl_pool_allocated(const sl_pool *pool) {
    return atomic_load(&((sl_pool *)pool)->allocated);
}

void sl_pool__bytes(const sl_pool *pool, size_t *held_out, size_t *cached_out) {
    sl_pool *p = (sl_pool *)pool;
    *held_out = atomic_load_explicit(&p->live, memory_order_relaxed) * p->buf_size;
    *cached_out = atomic_load_explicit(&p->cached, memory_order_relaxed) * p->buf_size;
}

static void pool_unref(sl_pool *pool) {
    if (atomic_fetch_sub(&pool->refs, 1) != 1)
        return;
    sl_buffer *b = pool->free_list;
    while (b) {
        sl_buffer *next = b->next_free;
        pool_buffer_free(pool, b);
        b = next;
    }
    sl_pool_mem mem = pool->mem;
    pthread_mutex_destroy(&pool->mu);
    sl__free(pool);
    if (mem.alloc && mem.done)
        mem.done(mem.ctx);
}

void sl_pool_free(sl_pool *pool) {
    if (pool)
        pool_unref(pool);
}
