/*
 * view.h — internals shared by the sl_image_view kernels (view.c,
 * color.c, resample_view.c). Never installed.
 */
#ifndef SL_OPS_VIEW_H
#define SL_OPS_VIEW_H

#include "ops/ops.h"

/* `v` is a usable image: data, uint8 or float32, sizes, 1..4 channels;
 * else SL_EINVAL naming `op` and `which` ("source", "destination"). */
int sl_ops__view_check(const sl_image_view *v, const char *op, const char *which);
/* Same h, w and c, else SL_EINVAL naming both shapes. */
int sl_ops__view_same_shape(const sl_image_view *a, const sl_image_view *b, const char *op);
/* The same pixels read mirrored (SL_VIEW_FLIP_H / _V in `flags`): the data
 * pointer moved to the far end and that axis' stride negated. */
sl_image_view sl_ops__view_flipped(const sl_image_view *v, int flags);

/* Element (y, x, k) as float (uint8 widened). */
static inline float sl_ops__view_get(const sl_image_view *v, int64_t y, int64_t x, int64_t k) {
    int64_t o = y * v->sh + x * v->sw + k * v->sc;
    return v->dtype == SL_U8 ? (float)((const uint8_t *)v->data)[o] : ((const float *)v->data)[o];
}

#endif
