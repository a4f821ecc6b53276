/*
 * ops.h — internals shared by the image ops (src/ops/). Never installed.
 */
#ifndef SL_OPS_H
#define SL_OPS_H

#include "core/core.h"

/* Fill `out` for a result of the given dtype and shape, following the
 * "Output tensors" rule of sluice.h: allocate when out->data is NULL, else
 * check the caller's capacity (out->nbytes). On success *allocated tells
 * whether the caller must release `out` if a later step fails. */
int sl_ops__out_prepare(sl_tensor *out, sl_dtype dtype, int ndim, const int64_t *shape,
                        const char *op, int *allocated);

/* A per-thread scratch block of at least `n` bytes (64-byte aligned), reused
 * across calls and freed when the thread exits; NULL on OOM. Callers must not
 * nest uses: the block is the same for every caller on a thread. */
void *sl_ops__scratch(size_t n);

/* Check that `t` is an HWC SL_U8 image with 1..4 channels on the CPU. */
int sl_ops__check_image(const sl_tensor *t, const char *op);

/* float32 -> IEEE half, round to nearest even. */
uint16_t sl_ops__f32_to_f16(float f);

/* The resampling kernel behind sl_image_resize*.
 * `src` has sh rows of sw pixels with C channels, row stride `sstride` bytes.
 * `box` (x0, y0, x1, y1) is the source region mapped onto the output (PIL's
 * box, in float32 like PIL); `lim` (x0, y0, x1, y1) bounds the source pixels
 * the filter may read: (0, 0, sw, sh) reads around the box as PIL does,
 * the box's own (integer) edges reproduce crop-then-resize. */
int sl_ops__resample(const uint8_t *src, int sh, int sw, size_t sstride, int C,
                     const double box[4], const int lim[4], int oh, int ow, sl_interp interp,
                     uint8_t *dst, size_t dstride);

/* Fused decode + resample of the region `box` (x0, y0, x1, y1 in original
 * pixels, fractional allowed) into `out` (out_h x out_w x color bytes),
 * reading no source pixel outside `lim` (x0, y0, x1, y1): lim = the box's
 * own edges reproduces crop-then-resize; lim = the whole image reproduces
 * resize-then-crop. JPEG: DCT-scaled, region-of-interest decode. */
int sl_ops__decode_box(sl_decoder *dec, const void *data, size_t size, sl_color color,
                       const double box[4], const int lim[4], int out_h, int out_w,
                       sl_interp interp, uint8_t *out);

/* sl_image_normalize with an optional horizontal mirror folded in. */
int sl_ops__normalize(const sl_tensor *src, const float *mean, const float *std,
                      sl_layout layout, sl_dtype dtype, int mirror, sl_tensor *out);

/* RGB row -> PIL "L" (ITU-R 601-2, PIL's fixed-point rounding). `dst` may
 * alias `src` (it is written behind the read position). */
void sl_ops__rgb_to_gray(const uint8_t *src, uint8_t *dst, size_t npix);

#endif /* SL_OPS_H */
