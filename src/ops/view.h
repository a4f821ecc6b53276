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

/* float32 -> uint8 as a saturating cast toward zero (NaN -> 0). torch's own
 * .to(uint8) of values outside 0..255 is undefined in C++ and wraps on
 * x86; within range the two agree. */
static inline uint8_t sl_ops__f2u8(float v) {
    if (!(v > 0.0f))
        return 0;
    if (v >= 255.0f)
        return 255;
    return (uint8_t)v;
}

/* torch's uint8 <-> float32 scale factors of v2's to_dtype(scale=True):
 * x * float32(1/255) up, trunc(x * float32(255.999)) down. */
#define SL_VIEW_UP ((float)(1.0 / 255.0))
#define SL_VIEW_DOWN ((float)(255.0 + 1.0 - 1e-3))

/* For each element of the local view `s` (an sl_image_view) and the same
 * element of `*d`: v = the source element (type ST), the destination
 * element (type DT) = EXPR, in which `k` is the channel. One loop body per
 * dtype pair: the compiler keeps each inner loop free of dtype branches. */
#define SL_VIEW_LOOP(ST, DT, EXPR)                                                            \
    do {                                                                                      \
        for (int y = 0; y < s.h; y++) {                                                       \
            const ST *srow = (const ST *)s.data + (int64_t)y * s.sh;                          \
            DT *drow = (DT *)d->data + (int64_t)y * d->sh;                                    \
            for (int x = 0; x < s.w; x++) {                                                   \
                const ST *sp = srow + (int64_t)x * s.sw;                                      \
                DT *dp = drow + (int64_t)x * d->sw;                                           \
                for (int k = 0; k < s.c; k++) {                                               \
                    ST v = sp[(int64_t)k * s.sc];                                             \
                    dp[(int64_t)k * d->sc] = EXPR;                                            \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    } while (0)

/* The tone operations of sl_view_adjust (SL_ADJUST_SHARPNESS and after:
 * tone.c); the arguments already checked as views. */
int sl_ops__view_tone(const sl_image_view *src, const sl_image_view *dst, sl_adjust op,
                      double factor);

#endif
