/*
 * pools.h — the pipeline's size-classed buffer pools (pools.c): sample and
 * batch tensors taken from free lists instead of malloc.
 * Never installed.
 */
#ifndef SL_POOLS_H
#define SL_POOLS_H

#include "core/core.h"

#include <stddef.h>

typedef struct sl_pipeline__pools sl_pipeline__pools;
int sl_pipeline__pools_create(sl_pipeline__pools **out);
/* Batch tensors (sl_pipeline__pools_batch_tensor) from now on take their
 * bytes from `mem` (a device's pinned memory), in classes of their own. Call
 * before any buffer is taken. */
void sl_pipeline__pools_set_batch_mem(sl_pipeline__pools *ps, const sl_pool_mem *mem);
/* Up to `count` buffers of `size` bytes may be out at once: the class is
 * filled to `count` on first use and caches no more (pools.c). Call before
 * the workers start. */
int sl_pipeline__pools_reserve(sl_pipeline__pools *ps, size_t size, size_t count);
/* A pooled tensor of the given dtype and shape. */
int sl_pipeline__pools_tensor(sl_pipeline__pools *ps, sl_tensor *t, sl_dtype dtype, int ndim,
                              const int64_t *shape);
/* As sl_pipeline__pools_tensor, for a batch of shape[0] rows taken from the
 * buffer class of `rows` rows (rows >= shape[0]): an epoch's last, partial
 * batch then reuses a full batch's buffer instead of growing a pool of its
 * own size. */
int sl_pipeline__pools_batch_tensor(sl_pipeline__pools *ps, sl_tensor *t, sl_dtype dtype,
                                    int ndim, const int64_t *shape, int64_t rows);
/* The two above as the ops' allocators (sl_op_alloc_fn, sl_op_batch_alloc_fn;
 * alloc_ctx: the sl_pipeline__pools), for sl_op_ctx and sl_op_bctx. */
int sl_pipeline__pools_op_alloc(void *ps, sl_tensor *t, sl_dtype dtype, int ndim,
                                const int64_t *shape);
int sl_pipeline__pools_op_batch_alloc(void *ps, sl_tensor *t, sl_dtype dtype, int ndim,
                                      const int64_t *shape, int64_t rows);
void sl_pipeline__pools_free(sl_pipeline__pools *ps);
/* The bytes a buffer of `size` bytes really takes (its class size). */
size_t sl_pipeline__pools_class_size(size_t size);
typedef struct sl_pipeline__pool_bytes {
    size_t buf_size;              /* the class's buffer size */
    size_t held;                  /* bytes of its buffers that exist */
    size_t cached;                /* of those, bytes on its free list */
} sl_pipeline__pool_bytes;
/* Totals over every class's pool, and the first `cap` pools in out[]; returns
 * how many pools exist. Any thread, lock-free (see sl_pool__bytes). */
int sl_pipeline__pools_bytes(const sl_pipeline__pools *ps, sl_pipeline__pool_bytes *out, int cap,
                             size_t *held_out, size_t *cached_out);

#endif /* SL_POOLS_H */
