/*
 * tone.c — the tone operations that torchvision v2's AutoAugment,
 * RandAugment and TrivialAugmentWide draw from, for sl_image_view images
 * (uint8 or float32): adjust_sharpness, posterize, solarize, invert,
 * autocontrast and equalize (sl_view_adjust's SL_ADJUST_SHARPNESS and
 * after; the other colour operations are color.c's).
 *
 * Each follows v2's tensor kernel step by step:
 *  - uint8 posterize, solarize, invert, autocontrast and equalize are a
 *    look-up table per channel, filled with v2's own arithmetic for each of
 *    the 256 values (its float32 steps, in its order), then applied in one
 *    pass: the bytes are v2's.
 *  - float32 posterize, solarize, invert and autocontrast are v2's float32
 *    steps per element; equalize converts to uint8 as v2's to_dtype(scale=
 *    True) does, equalizes, and scales back.
 *  - sharpness smooths with v2's 3x3 kernel (1/13 around, 5/13 in the
 *    middle), then blends each interior pixel with it as v2's
 *    `view.add_(blurred - view, alpha=1 - f)` (one fused multiply-add, as
 *    torch's vectorized add does); the border rows and columns are kept;
 *    everything is clamped to [0, 1] or [0, 255] as v2 clamps its output.
 *    On uint8 the smoothed value is an integer over 13 rounded, never a tie,
 *    so it is computed exactly in integers whatever order torch's
 *    convolution sums in; on float32 the sum's order may move the last bit.
 * In place (dst == src) works for every operation: the statistics are
 * taken before anything is written, and sharpness keeps the three source
 * rows it reads in a per-thread ring (sl_ops__scratch).
 */
#include "ops/view.h"

#include <math.h>
#include <string.h>

static const char *tone_name(sl_adjust op) {
    switch (op) {
    case SL_ADJUST_SHARPNESS: return "sharpness";
    case SL_ADJUST_POSTERIZE: return "posterize";
    case SL_ADJUST_SOLARIZE: return "solarize";
    case SL_ADJUST_INVERT: return "invert";
    case SL_ADJUST_AUTOCONTRAST: return "autocontrast";
    default: return "equalize";
    }
}

static inline float clamp01(float v, float hi) {
    return v < 0.0f ? 0.0f : v > hi ? hi : v;
}

/* dst[y, x, k] = lut[k][src[y, x, k]] (uint8 to uint8). */
static void apply_lut(const sl_image_view *src, const sl_image_view *dst,
                      const uint8_t (*lut)[256]) {
    sl_image_view s = *src;
    const sl_image_view *d = dst;
    SL_VIEW_LOOP(uint8_t, uint8_t, lut[k][v]);
}

/* ---- point operations ----------------------------------------------------- */

/* posterize, solarize, invert: the same table for every channel. */
static void point_lut(sl_adjust op, float factor, uint8_t lut[256]) {
    int bits = (int)factor;
    uint8_t mask = (uint8_t)(bits >= 8 ? 0xff : ((1 << bits) - 1) << (8 - bits));
    for (int i = 0; i < 256; i++) {
        switch (op) {
        case SL_ADJUST_POSTERIZE: lut[i] = (uint8_t)(i & mask); break;
        /* v2: torch.where(image >= threshold, ...): uint8 against a Python
         * float compares in float32 */
        case SL_ADJUST_SOLARIZE:
            lut[i] = (float)i >= factor ? (uint8_t)(255 - i) : (uint8_t)i;
            break;
        default: lut[i] = (uint8_t)(255 - i); break;
        }
    }
}

static void point_f32(const sl_image_view *src, const sl_image_view *dst, sl_adjust op,
                      float factor) {
    sl_image_view s = *src;
    const sl_image_view *d = dst;
    if (op == SL_ADJUST_POSTERIZE) {
        /* image.mul(levels).floor_().clamp_(0, levels - 1).mul_(1.0 / levels):
         * every step exact (powers of two) but the floor */
        const float levels = (float)(1 << (int)factor), top = levels - 1.0f,
                    inv = (float)(1.0 / (double)levels);
        SL_VIEW_LOOP(float, float, fminf(fmaxf(floorf(v * levels), 0.0f), top) * inv);
    } else if (op == SL_ADJUST_SOLARIZE) {
        SL_VIEW_LOOP(float, float, v >= factor ? 1.0f - v : v);
    } else {
        SL_VIEW_LOOP(float, float, 1.0f - v);
    }
}

/* ---- per-channel statistics ----------------------------------------------- */

/* Per channel minimum and maximum (as float: v2 takes amin/amax of the
 * float32 image). */
static void min_max(const sl_image_view *v, float lo[4], float hi[4]) {
    for (int k = 0; k < v->c; k++)
        lo[k] = INFINITY, hi[k] = -INFINITY;
    for (int y = 0; y < v->h; y++)
        for (int x = 0; x < v->w; x++)
            for (int k = 0; k < v->c; k++) {
                float e = sl_ops__view_get(v, y, x, k);
                /* NaN propagates as in torch's amin/amax */
                if (e < lo[k] || e != e)
                    lo[k] = e;
                if (e > hi[k] || e != e)
                    hi[k] = e;
            }
}

/* v2's autocontrast: (x - min) / ((max - min) * (1 / bound)), clamped, a
 * channel with max == min taken as min 0 and scale 1. */
static void autocontrast(const sl_image_view *src, const sl_image_view *dst) {
    float lo[4], hi[4], inv[4];
    min_max(src, lo, hi);
    const int u8 = src->dtype == SL_U8;
    const float bound = u8 ? 255.0f : 1.0f, rb = u8 ? (float)(1.0 / 255.0) : 1.0f;
    for (int k = 0; k < src->c; k++) {
        if (hi[k] == lo[k])
            lo[k] = 0.0f, inv[k] = 1.0f;
        else
            inv[k] = (hi[k] - lo[k]) * rb;
    }
    if (u8) {
        uint8_t lut[4][256];
        for (int k = 0; k < src->c; k++)
            for (int i = 0; i < 256; i++)
                lut[k][i] = (uint8_t)clamp01(((float)i - lo[k]) / inv[k], bound);
        apply_lut(src, dst, (const uint8_t(*)[256])lut);
        return;
    }
    sl_image_view s = *src;
    const sl_image_view *d = dst;
    SL_VIEW_LOOP(float, float, clamp01((v - lo[k]) / inv[k], 1.0f));
}

/* The uint8 value v2's equalize works on: the element itself, or a float32
 * one converted by to_dtype(uint8, scale=True). */
static inline uint8_t eq_value(const sl_image_view *v, int64_t o) {
    if (v->dtype == SL_U8)
        return ((const uint8_t *)v->data)[o];
    return sl_ops__f2u8(((const float *)v->data)[o] * SL_VIEW_DOWN);
}

/* v2's (and PIL's) equalize table for one channel's histogram of n values:
 * step = (n - count of the highest value present) // 255; none when step
 * is 0 (the channel kept); lut[0] = 0, lut[i] = (cum[i - 1] + step // 2) //
 * step, at most 255. Returns 0 when there is no table. */
static int equalize_lut(const uint32_t hist[256], int64_t n, uint8_t lut[256]) {
    int last = 255;
    while (last > 0 && hist[last] == 0)
        last--;
    int64_t step = (n - (int64_t)hist[last]) / 255;
    if (step == 0)
        return 0;
    int64_t cum = 0;
    lut[0] = 0;
    for (int i = 1; i < 256; i++) {
        cum += hist[i - 1];
        int64_t v = (cum + step / 2) / step;
        lut[i] = (uint8_t)(v > 255 ? 255 : v);
    }
    return 1;
}

static void equalize(const sl_image_view *src, const sl_image_view *dst) {
    uint32_t hist[4][256];
    memset(hist, 0, sizeof hist);
    for (int y = 0; y < src->h; y++)
        for (int x = 0; x < src->w; x++) {
            int64_t o = (int64_t)y * src->sh + (int64_t)x * src->sw;
            for (int k = 0; k < src->c; k++)
                hist[k][eq_value(src, o + (int64_t)k * src->sc)]++;
        }
    uint8_t lut[4][256];
    for (int k = 0; k < src->c; k++)
        if (!equalize_lut(hist[k], (int64_t)src->h * src->w, lut[k]))
            for (int i = 0; i < 256; i++)
                lut[k][i] = (uint8_t)i;
    if (src->dtype == SL_U8) {
        apply_lut(src, dst, (const uint8_t(*)[256])lut);
        return;
    }
    float flut[4][256];
    for (int k = 0; k < src->c; k++)
        for (int i = 0; i < 256; i++)
            flut[k][i] = (float)lut[k][i] * SL_VIEW_UP;
    sl_image_view s = *src;
    const sl_image_view *d = dst;
    SL_VIEW_LOOP(float, float, flut[k][sl_ops__f2u8(v * SL_VIEW_DOWN)]);
}

/* ---- sharpness ------------------------------------------------------------ */

/* Row y of the source (as floats, c interleaved) into `row`. */
static void load_row(const sl_image_view *v, int y, float *row) {
    for (int x = 0; x < v->w; x++)
        for (int k = 0; k < v->c; k++)
            row[(size_t)x * v->c + k] = sl_ops__view_get(v, y, x, k);
}

static int sharpness(const sl_image_view *src, const sl_image_view *dst, double factor) {
    const int H = src->h, W = src->w, C = src->c, u8 = src->dtype == SL_U8;
    const float bound = u8 ? 255.0f : 1.0f;
    /* v2's alpha: the double 1 - f, a float32 scalar to torch's add_ */
    const float alpha = (float)(1.0 - factor);
    const float a = (float)(1.0 / 13.0), b = (float)(5.0 / 13.0);
    size_t rowlen = (size_t)W * C;
    float *ring = sl_ops__scratch(3 * rowlen * sizeof(float));
    if (!ring)
        return sl__oom("adjust: sharpness rows");
    float *rows[3] = {ring, ring + rowlen, ring + 2 * rowlen};
    if (H <= 2 || W <= 2) { /* v2 returns the image as it is */
        sl_image_view s = *src;
        const sl_image_view *d = dst;
        if (u8)
            SL_VIEW_LOOP(uint8_t, uint8_t, v);
        else
            SL_VIEW_LOOP(float, float, v);
        return SL_OK;
    }
    load_row(src, 0, rows[0]);
    load_row(src, 1, rows[1]);
    for (int y = 0; y < H; y++) {
        /* rows[0..2] hold source rows y-1, y, y+1 read before row y is written */
        const float *up = rows[0], *mid = rows[1], *down = rows[2];
        if (y == 0) {
            mid = rows[0];
        } else if (y + 1 < H) {
            load_row(src, y + 1, rows[2]);
        }
        int64_t drow = (int64_t)y * dst->sh;
        for (int x = 0; x < W; x++)
            for (int k = 0; k < C; k++) {
                size_t i = (size_t)x * C + k;
                float v = mid[i];
                if (y > 0 && y < H - 1 && x > 0 && x < W - 1) {
                    float blur;
                    if (u8) {
                        /* (8 neighbours + 5 * centre) / 13, rounded: no ties */
                        int m = 0;
                        for (int dx = -1; dx <= 1; dx++)
                            m += (int)up[i + dx * C] + (int)down[i + dx * C] +
                                 (dx ? (int)mid[i + dx * C] : 0);
                        m += 5 * (int)v;
                        blur = (float)((2 * m + 13) / 26);
                    } else {
                        blur = a * up[i - C];
                        blur = fmaf(a, up[i], blur);
                        blur = fmaf(a, up[i + C], blur);
                        blur = fmaf(a, mid[i - C], blur);
                        blur = fmaf(b, v, blur);
                        blur = fmaf(a, mid[i + C], blur);
                        blur = fmaf(a, down[i - C], blur);
                        blur = fmaf(a, down[i], blur);
                        blur = fmaf(a, down[i + C], blur);
                    }
                    v = fmaf(blur - v, alpha, v);
                }
                /* v2 clamps the whole output, the kept border too (a float
                 * image may hold values outside [0, 1], e.g. an affine fill) */
                v = clamp01(v, bound);
                int64_t o = drow + (int64_t)x * dst->sw + (int64_t)k * dst->sc;
                if (u8)
                    ((uint8_t *)dst->data)[o] = (uint8_t)v;
                else
                    ((float *)dst->data)[o] = v;
            }
        if (y > 0) { /* rotate: y becomes y-1, y+1 becomes y */
            float *t = rows[0];
            rows[0] = rows[1], rows[1] = rows[2], rows[2] = t;
        }
    }
    return SL_OK;
}

int sl_ops__view_tone(const sl_image_view *src, const sl_image_view *dst, sl_adjust op,
                      double factor_d) {
    /* a float32 scalar to torch (the threshold, the bits); sharpness's alpha
     * 1 - factor is taken in double first, as v2 does */
    const float factor = (float)factor_d;
    const char *name = tone_name(op);
    if (src->h != dst->h || src->w != dst->w || src->c != dst->c || src->dtype != dst->dtype)
        return sl__error(SL_EINVAL, "adjust: %s: source is %dx%dx%d %s, destination %dx%dx%d %s",
                         name, src->h, src->w, src->c, sl_dtype_name((sl_dtype)src->dtype),
                         dst->h, dst->w, dst->c, sl_dtype_name((sl_dtype)dst->dtype));
    if ((op == SL_ADJUST_SHARPNESS || op == SL_ADJUST_AUTOCONTRAST) && src->c != 1 &&
        src->c != 3)
        return sl__error(SL_EINVAL, "adjust: %s takes 1 or 3 channels, not %d", name, src->c);
    const int u8 = src->dtype == SL_U8;
    switch (op) {
    case SL_ADJUST_SHARPNESS:
        if (!(factor_d >= 0.0))
            return sl__error(SL_EINVAL, "adjust: sharpness factor %g is negative", factor_d);
        return sharpness(src, dst, factor_d);
    case SL_ADJUST_POSTERIZE:
        if (!(factor_d >= 0.0 && factor_d <= 8.0) || factor_d != floor(factor_d))
            return sl__error(SL_EINVAL, "adjust: posterize bits %g: expected an integer 0..8",
                             factor_d);
        break;
    case SL_ADJUST_SOLARIZE:
        if (factor_d != factor_d || factor_d > (u8 ? 255.0 : 1.0))
            return sl__error(SL_EINVAL,
                             "adjust: solarize threshold %g is above the image's maximum (%s)",
                             factor_d, u8 ? "255" : "1");
        break;
    case SL_ADJUST_INVERT:
        break;
    case SL_ADJUST_AUTOCONTRAST:
        autocontrast(src, dst);
        return SL_OK;
    case SL_ADJUST_EQUALIZE:
        equalize(src, dst);
        return SL_OK;
    default:
        return sl__error(SL_EINVAL, "adjust: unknown operation %d", (int)op);
    }
    if (u8) {
        uint8_t lut[4][256];
        point_lut(op, factor, lut[0]);
        for (int k = 1; k < src->c; k++)
            memcpy(lut[k], lut[0], 256);
        apply_lut(src, dst, (const uint8_t(*)[256])lut);
    } else {
        point_f32(src, dst, op, factor);
    }
    return SL_OK;
}
