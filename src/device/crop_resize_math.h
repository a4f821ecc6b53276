/*
 * crop_resize_math.h — the arithmetic of the GPU crop + resize + flip +
 * normalize kernel (crop_resize.cu), as inline functions that compile both
 * as C (the CPU reference, device_crop_resize.c, and its tests) and as CUDA
 * (__host__ __device__), so the tests here check the very expressions the
 * kernel evaluates. No state, no allocation, no library calls but floorf.
 *
 * The filter is the CPU path's (PIL's BILINEAR: a triangle widened by the
 * downscale factor, so it antialiases; window and weights as PIL's
 * precompute_coeffs, the source reads bounded by `lim` as sl_ops__resample).
 * How it differs from the CPU path's PIL-exact resample:
 *  - weights in float32 computed per output pixel (PIL: double, then 22-bit
 *    fixed point);
 *  - float accumulators in both passes (PIL: 32-bit integer sums).
 * The rounding steps are PIL's: the horizontal pass rounded to uint8 (half
 * up, clamped) per source row, the vertical pass rounded likewise, then the
 * CPU op's float32 normalize ((x / 255 - mean) / std, no fused
 * multiply-add). So a value differs from the CPU path's only where a sum
 * lies within the weights' rounding error of a .5 tie, and then by one
 * uint8 step, 1 / (255 * std) after normalize. tests/device/test_crop_resize.c
 * holds the reference to one step and to 2% of values differing, against
 * sl_ops__resample (0.7% measured over its placements, 1.5% on its
 * 640x480 -> 224x224 crop).
 */
#ifndef SL_CROP_RESIZE_MATH_H
#define SL_CROP_RESIZE_MATH_H

#ifdef __CUDACC__
#define SL_CR_FN __host__ __device__ static inline
#else
#include <math.h>
#include <stddef.h>
#define SL_CR_FN static inline
#endif

/* One image's placement: the source region `box` (x0, y0, x1, y1, float32
 * like PIL's box) mapped onto the output; `lim` (x0, y0, x1, y1) the source
 * pixels the filter may read (the box's own edges: crop-then-resize, as
 * random_resized_crop; the whole image: resize-then-crop, as resize +
 * center_crop); `flip` mirrors the output horizontally. */
typedef struct sl_cr_place {
    float box[4];
    int lim[4];
    int flip;
} sl_cr_place;

/* One output axis position `o` of `out_size`: the filter centre, the
 * reciprocal of the filter scale and the source window [*k0, *k1). */
SL_CR_FN void sl_cr_axis(float in0, float in1, int lo, int hi, int out_size, int o,
                         float *center, float *inv_fs, int *k0, int *k1) {
    float scale = (in1 - in0) / (float)out_size;
    float fs = scale < 1.0f ? 1.0f : scale; /* bilinear support 1, widened */
    float c = in0 + ((float)o + 0.5f) * scale;
    int a = (int)floorf(c - fs + 0.5f);
    int b = (int)floorf(c + fs + 0.5f);
    if (a < lo)
        a = lo;
    if (b > hi)
        b = hi;
    if (b < a)
        b = a;
    *center = c;
    *inv_fs = 1.0f / fs;
    *k0 = a;
    *k1 = b;
}

/* The triangle filter's weight of source pixel k. */
SL_CR_FN float sl_cr_weight(int k, float center, float inv_fs) {
    float x = ((float)k - center + 0.5f) * inv_fs;
    x = x < 0.0f ? -x : x;
    return x < 1.0f ? 1.0f - x : 0.0f;
}

/* round half up and clamp to 0..255 (PIL's clip8 of its fixed-point sum) */
SL_CR_FN float sl_cr_round8(float v) {
    v = floorf(v + 0.5f);
    return v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
}

/* Output pixel (oy, ox) of an oh x ow image: its 3 channels as uint8 values
 * (0..255, as floats). `src` is RGB interleaved, rows `pitch` bytes apart.
 * As PIL, the horizontal pass is rounded to uint8 per source row before
 * the vertical one; here both passes run per output pixel (no intermediate
 * image), each source row of the window filtered horizontally then
 * weighted vertically. */
SL_CR_FN void sl_cr_pixel(const unsigned char *src, size_t pitch, const sl_cr_place *p, int oh,
                          int ow, int oy, int ox, float out[3]) {
    int sx = p->flip ? ow - 1 - ox : ox;
    float cx, fx, cy, fy;
    int x0, x1, y0, y1;
    sl_cr_axis(p->box[0], p->box[2], p->lim[0], p->lim[2], ow, sx, &cx, &fx, &x0, &x1);
    sl_cr_axis(p->box[1], p->box[3], p->lim[1], p->lim[3], oh, oy, &cy, &fy, &y0, &y1);
    float wxs = 0.0f, wys = 0.0f;
    for (int x = x0; x < x1; x++)
        wxs += sl_cr_weight(x, cx, fx);
    for (int y = y0; y < y1; y++)
        wys += sl_cr_weight(y, cy, fy);
    /* as PIL: weights that sum to 0 (a window outside the box) stay 0 */
    if (wxs == 0.0f)
        wxs = 1.0f;
    if (wys == 0.0f)
        wys = 1.0f;
    float acc[3] = {0.0f, 0.0f, 0.0f};
    for (int y = y0; y < y1; y++) {
        float wy = sl_cr_weight(y, cy, fy);
        if (wy == 0.0f)
            continue;
        wy = wy / wys;
        const unsigned char *row = src + (size_t)y * pitch;
        float r[3] = {0.0f, 0.0f, 0.0f};
        for (int x = x0; x < x1; x++) {
            float wx = sl_cr_weight(x, cx, fx) / wxs;
            const unsigned char *px = row + (size_t)x * 3;
            r[0] += wx * (float)px[0];
            r[1] += wx * (float)px[1];
            r[2] += wx * (float)px[2];
        }
        for (int c = 0; c < 3; c++)
            acc[c] += wy * sl_cr_round8(r[c]);
    }
    for (int c = 0; c < 3; c++)
        out[c] = sl_cr_round8(acc[c]);
}

/* The CPU op's normalize of one uint8 value u (as a float): (u / 255 -
 * mean) / std, each step rounded to float32 (sl_ops__norm_lut's values). */
SL_CR_FN float sl_cr_normalize(float u, float mean, float std) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(__fsub_rn(__fdiv_rn(u, 255.0f), mean), std);
#else
    return (u / 255.0f - mean) / std;
#endif
}

#endif /* SL_CROP_RESIZE_MATH_H */
