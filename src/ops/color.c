/*
 * color.c — the colour operations of torchvision.transforms.v2 on tensors
 * (adjust_brightness, _contrast, _saturation, _hue, rgb_to_grayscale) for
 * sl_image_view images, uint8 or float32; sl_view_adjust hands the tone
 * operations of the auto-augment policies (sharpness, posterize, solarize,
 * invert, autocontrast, equalize) to tone.c.
 *
 * Written to reproduce v2's tensor arithmetic step by step: every torch
 * operation is one float32 rounding here in the same order. torch's
 * vectorized `a.add_(b, alpha=r)` is one fused multiply-add (a + r * b
 * rounded once), so those steps use fmaf(); a uint8 result is the float
 * value truncated (v2's final .to(uint8)). What cannot be bit-identical: the
 * contrast mean (torch sums in a cascade of float32 partial sums; here one
 * double sum, rounded to float32 at the end) and the last few elements of a
 * row that torch's scalar tail computes without the fused multiply-add; both
 * move a result by one level only where a value sits within a rounding of an
 * integer (docs/OPS.md, "Transforms", gives the measured agreement).
 */
#include "ops/view.h"

#include <math.h>

/* v2's grey level: r * 0.2989, + g * 0.587, + b * 0.114 (each add fused). */
static inline float gray_of(float r, float g, float b) {
    float l = r * 0.2989f;
    l = fmaf(g, 0.587f, l);
    return fmaf(b, 0.114f, l);
}

static inline float clampf(float v, float hi) {
    return v < 0.0f ? 0.0f : v > hi ? hi : v;
}

/* Store v (already in range for floats) into element o of `d`. */
static inline void put(const sl_image_view *d, int64_t o, float v) {
    if (d->dtype == SL_U8)
        ((uint8_t *)d->data)[o] = (uint8_t)v; /* v in [0, 255]: truncation, as .to(uint8) */
    else
        ((float *)d->data)[o] = v;
}

/* v2's _blend: x * ratio, then + other * (1 - ratio) fused, clamped. */
static inline float blend(float x, float other, float ratio, float one_minus, float bound) {
    return clampf(fmaf(other, one_minus, x * ratio), bound);
}

/* torch's rgb -> hsv -> shifted hue -> rgb of v2's adjust_hue, in float32
 * on values in [0, 1]. */
static void hue_shift(float r, float g, float b, float shift, float out[3]) {
    float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
    int eqc = maxc == minc;
    float range = maxc - minc;
    float s = range / (eqc ? 1.0f : maxc);
    float div = eqc ? 1.0f : range;
    float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    float hr = maxc == r ? bc - gc : 0.0f;
    float hg = (maxc == g && maxc != r) ? (rc + 2.0f) - bc : 0.0f;
    float hb = (maxc != r && maxc != g) ? (gc + 4.0f) - rc : 0.0f;
    float h = (hr + hg) + hb;
    h = fmodf(h * (float)(1.0 / 6.0) + 1.0f, 1.0f);
    /* remainder(h + shift, 1): the sign of the divisor */
    h = h + shift;
    float m = fmodf(h, 1.0f);
    if (m != 0.0f && m < 0.0f)
        m += 1.0f;
    h = m;
    float v = maxc;
    float h6 = h * 6.0f;
    float fi = floorf(h6);
    float f = h6 - fi;
    int i = (int)fi % 6;
    if (i < 0)
        i += 6;
    float sxf = s * f, oms = 1.0f - s;
    float q = clampf((1.0f - sxf) * v, 1.0f);
    float t = clampf((sxf + oms) * v, 1.0f);
    float p = clampf(oms * v, 1.0f);
    switch (i) {
    case 0: out[0] = v, out[1] = t, out[2] = p; break;
    case 1: out[0] = q, out[1] = v, out[2] = p; break;
    case 2: out[0] = p, out[1] = v, out[2] = t; break;
    case 3: out[0] = p, out[1] = q, out[2] = v; break;
    case 4: out[0] = t, out[1] = p, out[2] = v; break;
    default: out[0] = v, out[1] = p, out[2] = q; break;
    }
}

int sl_view_adjust(const sl_image_view *src, const sl_image_view *dst, sl_adjust op,
                   double factor_d) {
    SL_TRY(sl_ops__view_check(src, "adjust", "source"));
    SL_TRY(sl_ops__view_check(dst, "adjust", "destination"));
    if (op >= SL_ADJUST_SHARPNESS)
        return sl_ops__view_tone(src, dst, op, factor_d);
    if (src->h != dst->h || src->w != dst->w || src->dtype != dst->dtype)
        return sl__error(SL_EINVAL, "adjust: source and destination differ in size or dtype");
    if (src->c != 1 && src->c != 3)
        return sl__error(SL_EINVAL, "adjust: expected 1 or 3 channels, got %d", src->c);
    if (op == SL_ADJUST_GRAY) {
        if (dst->c != 1 && dst->c != 3)
            return sl__error(SL_EINVAL, "adjust: grayscale output has 1 or 3 channels, not %d",
                             dst->c);
    } else if (dst->c != src->c) {
        return sl__error(SL_EINVAL, "adjust: source has %d channels, destination %d", src->c,
                         dst->c);
    }
    /* torch takes the factor as a float32 scalar where it multiplies, and
     * 1 - factor (a Python double) as the float32 alpha of add_ */
    const float factor = (float)factor_d;
    if (op == SL_ADJUST_HUE ? !(factor_d >= -0.5 && factor_d <= 0.5) : !(factor_d >= 0.0))
        return sl__error(SL_EINVAL, "adjust: factor %g out of range (%s)", factor_d,
                         op == SL_ADJUST_HUE ? "-0.5 .. 0.5" : ">= 0");
    const int u8 = src->dtype == SL_U8;
    const float bound = u8 ? 255.0f : 1.0f;
    const float one_minus = (float)(1.0 - factor_d);
    const int C = src->c;
    float mean = 0.0f;
    if (op == SL_ADJUST_CONTRAST) {
        double sum = 0.0;
        for (int y = 0; y < src->h; y++)
            for (int x = 0; x < src->w; x++) {
                float g = C == 3 ? gray_of(sl_ops__view_get(src, y, x, 0),
                                           sl_ops__view_get(src, y, x, 1),
                                           sl_ops__view_get(src, y, x, 2))
                                 : sl_ops__view_get(src, y, x, 0);
                sum += u8 && C == 3 ? floorf(g) : g;
            }
        mean = (float)(sum / ((double)src->h * src->w));
    }
    const float up = SL_VIEW_UP, down = SL_VIEW_DOWN;
    for (int y = 0; y < src->h; y++)
        for (int x = 0; x < src->w; x++) {
            float px[3] = {0, 0, 0};
            for (int k = 0; k < C; k++)
                px[k] = sl_ops__view_get(src, y, x, k);
            float out[3] = {px[0], px[1], px[2]};
            int oc = C;
            switch (op) {
            case SL_ADJUST_BRIGHTNESS:
                for (int k = 0; k < C; k++)
                    out[k] = clampf(px[k] * factor, bound);
                break;
            case SL_ADJUST_CONTRAST:
                for (int k = 0; k < C; k++)
                    out[k] = blend(px[k], mean, factor, one_minus, bound);
                break;
            case SL_ADJUST_SATURATION:
                if (C == 3) {
                    float g = gray_of(px[0], px[1], px[2]);
                    if (u8)
                        g = floorf(g);
                    for (int k = 0; k < 3; k++)
                        out[k] = blend(px[k], g, factor, one_minus, bound);
                }
                break;
            case SL_ADJUST_HUE:
                if (C == 3) {
                    float in[3];
                    for (int k = 0; k < 3; k++)
                        in[k] = u8 ? px[k] * up : px[k];
                    hue_shift(in[0], in[1], in[2], factor, out);
                    if (u8)
                        for (int k = 0; k < 3; k++)
                            out[k] = clampf(out[k] * down, 255.0f);
                }
                break;
            case SL_ADJUST_GRAY: {
                float g = C == 3 ? gray_of(px[0], px[1], px[2]) : px[0];
                if (u8)
                    g = clampf(g, 255.0f);
                out[0] = out[1] = out[2] = g;
                oc = dst->c;
                break;
            }
            default:
                return sl__error(SL_EINVAL, "adjust: unknown operation %d", (int)op);
            }
            int64_t o = (int64_t)y * dst->sh + (int64_t)x * dst->sw;
            for (int k = 0; k < oc; k++)
                put(dst, o + (int64_t)k * dst->sc, out[k]);
        }
    return SL_OK;
}
