/*
 * view.c — strided image views (sl_image_view) and the element-wise
 * kernels of sluice.transforms: copy with flips and dtype change
 * (crop, flip, HWC <-> CHW, ToDtype), Normalize, Pad and fill (erasing).
 *
 * The arithmetic is torchvision.transforms.v2's on tensors, in float32 as
 * torch computes it (one rounding per torch operation), so the results are
 * bit-identical to it (tests/python/test_transforms_tv2.py). Flips are not
 * loops of their own: a mirrored axis is the same copy read from the other
 * end with the stride negated.
 */
#include "ops/view.h"

#include <math.h>
#include <string.h>

int sl_ops__view_check(const sl_image_view *v, const char *op, const char *which) {
    if (!v || !v->data)
        return sl__error(SL_EINVAL, "%s: %s image has no data", op, which);
    if (v->dtype != SL_U8 && v->dtype != SL_F32)
        return sl__error(SL_EINVAL, "%s: %s image is %s; expected uint8 or float32", op, which,
                         sl_dtype_name((sl_dtype)v->dtype));
    if (v->h < 1 || v->w < 1 || v->h > (1 << 24) || v->w > (1 << 24))
        return sl__error(SL_EINVAL, "%s: %s image is %dx%d; expected 1..16777216 per side", op,
                         which, v->w, v->h);
    if (v->c < 1 || v->c > 4)
        return sl__error(SL_EINVAL, "%s: %s image has %d channels; expected 1 to 4", op, which,
                         v->c);
    return SL_OK;
}

int sl_ops__view_same_shape(const sl_image_view *a, const sl_image_view *b, const char *op) {
    if (a->h != b->h || a->w != b->w || a->c != b->c)
        return sl__error(SL_EINVAL, "%s: source is %dx%dx%d, destination %dx%dx%d", op, a->h,
                         a->w, a->c, b->h, b->w, b->c);
    return SL_OK;
}

sl_image_view sl_ops__view_flipped(const sl_image_view *v, int flags) {
    sl_image_view r = *v;
    size_t es = v->dtype == SL_F32 ? 4 : 1;
    char *p = v->data;
    if (flags & SL_VIEW_FLIP_H) {
        p += (ptrdiff_t)((int64_t)(v->w - 1) * v->sw) * (ptrdiff_t)es;
        r.sw = -v->sw;
    }
    if (flags & SL_VIEW_FLIP_V) {
        p += (ptrdiff_t)((int64_t)(v->h - 1) * v->sh) * (ptrdiff_t)es;
        r.sh = -v->sh;
    }
    r.data = p;
    return r;
}

int sl_view_convert(const sl_image_view *src, const sl_image_view *dst, int flags) {
    SL_TRY(sl_ops__view_check(src, "convert", "source"));
    SL_TRY(sl_ops__view_check(dst, "convert", "destination"));
    SL_TRY(sl_ops__view_same_shape(src, dst, "convert"));
    sl_image_view s = sl_ops__view_flipped(src, flags);
    const sl_image_view *d = dst;
    int scale = (flags & SL_VIEW_SCALE) != 0;
    /* torch: image.to(float32).mul_(1.0 / 255): the double 1/255 becomes a
     * float32 scalar; image.mul(255 + 1.0 - 1e-3).to(uint8) the other way. */
    const float up = SL_VIEW_UP, down = SL_VIEW_DOWN;
    if (s.dtype == SL_U8 && d->dtype == SL_U8)
        SL_VIEW_LOOP(uint8_t, uint8_t, v);
    else if (s.dtype == SL_F32 && d->dtype == SL_F32)
        SL_VIEW_LOOP(float, float, v);
    else if (s.dtype == SL_U8 && scale)
        SL_VIEW_LOOP(uint8_t, float, (float)v * up);
    else if (s.dtype == SL_U8)
        SL_VIEW_LOOP(uint8_t, float, (float)v);
    else if (scale)
        SL_VIEW_LOOP(float, uint8_t, sl_ops__f2u8(v * down));
    else
        SL_VIEW_LOOP(float, uint8_t, sl_ops__f2u8(v));
    return SL_OK;
}

int sl_view_normalize(const sl_image_view *src, const sl_image_view *dst, const float *mean,
                      const float *std, int flags) {
    SL_TRY(sl_ops__view_check(src, "normalize", "source"));
    SL_TRY(sl_ops__view_check(dst, "normalize", "destination"));
    SL_TRY(sl_ops__view_same_shape(src, dst, "normalize"));
    if (dst->dtype != SL_F32)
        return sl__error(SL_EINVAL, "normalize: the destination must be float32");
    if (!mean || !std)
        return sl__error(SL_EINVAL, "normalize: mean and std are required");
    for (int k = 0; k < src->c; k++)
        if (std[k] == 0.0f)
            return sl__error(SL_EINVAL, "normalize: std[%d] is 0 (division by zero)", k);
    sl_image_view s = sl_ops__view_flipped(src, flags);
    const sl_image_view *d = dst;
    if (s.dtype == SL_F32) {
        /* (x - mean) / std: torch's sub then div, each rounded to float32.
         * In place is safe: each element is read before it is written. */
        for (int y = 0; y < s.h; y++)
            for (int x = 0; x < s.w; x++)
                for (int k = 0; k < s.c; k++) {
                    float v = ((const float *)s.data)[(int64_t)y * s.sh + (int64_t)x * s.sw +
                                                      (int64_t)k * s.sc];
                    float t = v - mean[k];
                    ((float *)d->data)[(int64_t)y * d->sh + (int64_t)x * d->sw +
                                       (int64_t)k * d->sc] = t / std[k];
                }
        return SL_OK;
    }
    /* uint8: a table per channel of the 256 results, each computed as the
     * float chain above (after x * float32(1/255) with SL_VIEW_SCALE), so
     * the values are the same bits as the per-element computation. */
    float lut[4][256];
    const float up = (flags & SL_VIEW_SCALE) ? SL_VIEW_UP : 1.0f;
    for (int k = 0; k < s.c; k++)
        for (int i = 0; i < 256; i++) {
            float v = (float)i * up;
            float t = v - mean[k];
            lut[k][i] = t / std[k];
        }
    SL_VIEW_LOOP(uint8_t, float, lut[k][v]);
    return SL_OK;
}

/* Source index of padded index i (0 <= i < n + pads) for an axis of n
 * source elements starting at `lo` in the output; -1: outside (constant). */
static inline int64_t pad_index(int64_t i, int64_t lo, int64_t n, sl_pad_mode mode) {
    int64_t j = i - lo;
    if (j >= 0 && j < n)
        return j;
    switch (mode) {
    case SL_PAD_EDGE:
        return j < 0 ? 0 : n - 1;
    case SL_PAD_REFLECT:
        return j < 0 ? -j : 2 * (n - 1) - j;
    case SL_PAD_SYMMETRIC:
        return j < 0 ? -j - 1 : 2 * n - 1 - j;
    default:
        return -1;
    }
}

int sl_view_pad(const sl_image_view *src, const sl_image_view *dst, int top, int left,
                sl_pad_mode mode, const float *fill) {
    SL_TRY(sl_ops__view_check(src, "pad", "source"));
    SL_TRY(sl_ops__view_check(dst, "pad", "destination"));
    if (src->dtype != dst->dtype || src->c != dst->c)
        return sl__error(SL_EINVAL, "pad: source and destination differ in dtype or channels");
    int bottom = dst->h - src->h - top, right = dst->w - src->w - left;
    if (top < 0 || left < 0 || bottom < 0 || right < 0)
        return sl__error(SL_EINVAL,
                         "pad: a %dx%d destination cannot hold the %dx%d source at (%d, %d)",
                         dst->w, dst->h, src->w, src->h, left, top);
    if (mode < SL_PAD_CONSTANT || mode > SL_PAD_SYMMETRIC)
        return sl__error(SL_EINVAL, "pad: unknown mode %d", (int)mode);
    int most_h = top > bottom ? top : bottom, most_w = left > right ? left : right;
    if (mode == SL_PAD_REFLECT && (most_h >= src->h || most_w >= src->w))
        return sl__error(SL_EINVAL,
                         "pad: reflect padding (%d, %d) must be smaller than the image (%dx%d)",
                         most_w, most_h, src->w, src->h);
    if (mode == SL_PAD_SYMMETRIC && (most_h > src->h || most_w > src->w))
        return sl__error(SL_EINVAL,
                         "pad: symmetric padding (%d, %d) must not exceed the image (%dx%d)",
                         most_w, most_h, src->w, src->h);
    float fv[4] = {0, 0, 0, 0};
    uint8_t fb[4] = {0, 0, 0, 0};
    for (int k = 0; k < src->c; k++) {
        fv[k] = fill ? fill[k] : 0.0f;
        fb[k] = sl_ops__f2u8(fv[k]);
    }
    const int u8 = src->dtype == SL_U8;
    for (int y = 0; y < dst->h; y++) {
        int64_t sy = pad_index(y, top, src->h, mode);
        for (int x = 0; x < dst->w; x++) {
            int64_t sx = sy < 0 ? -1 : pad_index(x, left, src->w, mode);
            int64_t doff = (int64_t)y * dst->sh + (int64_t)x * dst->sw;
            int64_t soff = sy * src->sh + sx * src->sw;
            for (int k = 0; k < src->c; k++) {
                int64_t dk = doff + (int64_t)k * dst->sc, sk = soff + (int64_t)k * src->sc;
                if (u8)
                    ((uint8_t *)dst->data)[dk] = sx < 0 ? fb[k] : ((const uint8_t *)src->data)[sk];
                else
                    ((float *)dst->data)[dk] = sx < 0 ? fv[k] : ((const float *)src->data)[sk];
            }
        }
    }
    return SL_OK;
}

int sl_view_fill(const sl_image_view *dst, const float *value) {
    SL_TRY(sl_ops__view_check(dst, "fill", "destination"));
    float fv[4] = {0, 0, 0, 0};
    uint8_t fb[4] = {0, 0, 0, 0};
    for (int k = 0; k < dst->c; k++) {
        fv[k] = value ? value[k] : 0.0f;
        fb[k] = sl_ops__f2u8(fv[k]);
    }
    for (int y = 0; y < dst->h; y++)
        for (int x = 0; x < dst->w; x++)
            for (int k = 0; k < dst->c; k++) {
                int64_t o = (int64_t)y * dst->sh + (int64_t)x * dst->sw + (int64_t)k * dst->sc;
                if (dst->dtype == SL_U8)
                    ((uint8_t *)dst->data)[o] = fb[k];
                else
                    ((float *)dst->data)[o] = fv[k];
            }
    return SL_OK;
}
