/* tensor.c — dtypes, tensors and samples. */
#include "core/core.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [SL_DTYPE_INVALID] = {"invalid", 0}, [SL_U8] = {"uint8", 1},   [SL_I8] = {"int8", 1},
    [SL_U16] = {"uint16", 2},            [SL_I16] = {"int16", 2},  [SL_U32] = {"uint32", 4},
    [SL_I32] = {"int32", 4},             [SL_U64] = {"uint64", 8}, [SL_I64] = {"int64", 8},
    [SL_F16] = {"float16", 2},           [SL_F32] = {"float32", 4}, [SL_F64] = {"float64", 8},
    [SL_BOOL] = {"bool", 1},           [SL_BF16] = {"bfloat16", 2},
};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

size_t sl_dtype_size(sl_dtype dtype) {
    return (unsigned)dtype < NDTYPES ? dtypes[dtype].size : 0;
}

const char *sl_dtype_name(sl_dtype dtype) {
    return (unsigned)dtype < NDTYPES ? dtypes[dtype].name : "invalid";
}

sl_dtype sl_dtype_parse(const char *name) {
    for (unsigned i = 1; i < NDTYPES; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return (sl_dtype)i;
    return SL_DTYPE_INVALID;
}

int64_t sl_tensor_numel(const sl_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* Byte size of a dtype+shape, or false on a bad shape or overflow. */
static bool shape_bytes(sl_dtype dtype, int ndim, const int64_t *shape, size_t *out) {
    size_t n = sl_dtype_size(dtype);
    if (n == 0 || ndim < 0 || ndim > SL_MAX_DIMS)
        return false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || !sl__mul_ok(n, (size_t)shape[i], &n))
            return false;
    }
    *out = n;
    return true;
}

static void set_shape(sl_tensor *t, sl_dtype dtype, int ndim, const int64_t *shape) {
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < SL_MAX_DIMS; i++)
        t->shape[i] = i < ndim ? shape[i] : 0;
    t->device = SL_DEVICE_CPU;
    t->device_id = 0;
}

int sl_tensor_alloc(sl_tensor *t, sl_dtype dtype, int ndim, const int64_t *shape) {
    size_t nbytes;
    memset(t, 0, sizeof *t);
    if (!shape_bytes(dtype, ndim, shape, &nbytes))
        return sl__error(SL_EINVAL, "tensor: bad dtype %d or shape (ndim %d)", (int)dtype, ndim);
    SL_TRY(sl_buffer_alloc(&t->buf, nbytes));
    t->data = sl_buffer_data(t->buf);
    t->nbytes = nbytes;
    set_shape(t, dtype, ndim, shape);
    return SL_OK;
}

void sl_tensor_view(sl_tensor *t, void *data, sl_dtype dtype, int ndim, const int64_t *shape) {
    size_t nbytes = 0;
    memset(t, 0, sizeof *t);
    if (ndim < 0)
        ndim = 0;
    if (ndim > SL_MAX_DIMS)
        ndim = SL_MAX_DIMS;
    (void)shape_bytes(dtype, ndim, shape, &nbytes);
    t->data = data;
    t->nbytes = nbytes;
    set_shape(t, dtype, ndim, shape);
}

void sl_tensor_release(sl_tensor *t) {
    sl_buffer_release(t->buf);
    memset(t, 0, sizeof *t);
}

int sl_tensor_copy(sl_tensor *dst, const sl_tensor *src) {
    sl_tensor tmp;
    SL_TRY(sl_tensor_alloc(&tmp, src->dtype, src->ndim, src->shape));
    if (src->nbytes)
        memcpy(tmp.data, src->data, src->nbytes);
    *dst = tmp;
    return SL_OK;
}

void sl_sample_clear(sl_sample *s) {
    for (uint32_t i = 0; i < s->ncols && i < SL_MAX_COLUMNS; i++)
        sl_buffer_release(s->col[i].buf);
    memset(s, 0, sizeof *s);
}
