/*
 * resample_view.c — resizing and affine warps of sl_image_view images
 * (sluice.transforms' Resize, RandomResizedCrop on tensors and arrays,
 * RandomRotation).
 *
 * uint8 with PIL's filters goes to the PIL-exact resampler of resize.c
 * (sl_ops__resample) whenever the rows are interleaved pixels with a
 * positive stride, one plane at a time when the image is planar (CHW),
 * and through a staging copy otherwise. float32 (and uint8 without
 * antialiasing) runs the separable filter of torch's interpolate here:
 * written rather than called because the engine cannot call torch, and
 * because the windows and weights must be torch's (align_corners=False,
 * antialias's widened filter with a = -0.5 bicubic, or the plain 2- and
 * 4-tap kernels with a = -0.75 and clamped borders).
 */
#include "ops/view.h"

#include <math.h>
#include <string.h>

/* ---- torch's nearest rules ---------------------------------------------- */

static int64_t nearest_src(int64_t i, int64_t in, int64_t out, sl_interp interp) {
    float scale = (float)in / (float)out;
    int64_t j;
    if (interp == SL_INTERP_NEAREST_TORCH) {
        if (out == in)
            return i;
        if (out == 2 * in)
            return i >> 1;
        j = (int64_t)floorf((float)i * scale);
    } else {
        j = (int64_t)floorf((float)((double)i + 0.5) * scale);
    }
    return j < in - 1 ? j : in - 1;
}

static int resize_nearest(const sl_image_view *s, const sl_image_view *d, sl_interp interp) {
    int32_t *xs = sl_ops__scratch((size_t)d->w * sizeof(int32_t));
    if (!xs)
        return sl__oom("resize: scratch");
    for (int x = 0; x < d->w; x++)
        xs[x] = (int32_t)nearest_src(x, s->w, d->w, interp);
    for (int y = 0; y < d->h; y++) {
        int64_t sy = nearest_src(y, s->h, d->h, interp);
        for (int x = 0; x < d->w; x++)
            for (int k = 0; k < s->c; k++) {
                int64_t so = sy * s->sh + (int64_t)xs[x] * s->sw + (int64_t)k * s->sc;
                int64_t dof = (int64_t)y * d->sh + (int64_t)x * d->sw + (int64_t)k * d->sc;
                if (s->dtype == SL_U8)
                    ((uint8_t *)d->data)[dof] = ((const uint8_t *)s->data)[so];
                else
                    ((float *)d->data)[dof] = ((const float *)s->data)[so];
            }
    }
    return SL_OK;
}

/* ---- torch's separable filter (float arithmetic) ------------------------ */

/* torch's filters, in float as torch computes its weights for float
 * images (resize.c's are PIL's, in double). */
static float cubic(float x, float a) {
    x = fabsf(x);
    if (x < 1.0f)
        return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
    if (x < 2.0f)
        return (((x - 5.0f) * x + 8.0f) * x - 4.0f) * a;
    return 0.0f;
}

static float triangle(float x) {
    x = fabsf(x);
    return x < 1.0f ? 1.0f - x : 0.0f;
}

/* One axis: for each output i, taps idx[i*K + j] with weights w[i*K + j]
 * (K taps each; unused taps have weight 0 and index 0). */
static int axis_taps(int in, int out, sl_interp interp, int antialias, int K, int32_t *idx,
                     float *w) {
    float scale = (float)in / (float)out;
    int cubic_f = interp == SL_INTERP_BICUBIC;
    for (int i = 0; i < out; i++) {
        int32_t *ii = idx + (size_t)i * K;
        float *ww = w + (size_t)i * K;
        for (int j = 0; j < K; j++)
            ii[j] = 0, ww[j] = 0.0f;
        if (!antialias && cubic_f) {
            /* upsample_bicubic2d: 4 taps around floor(src), borders clamped */
            float src = scale * ((float)i + 0.5f) - 0.5f;
            float f = floorf(src);
            float t = src - f;
            int64_t i0 = (int64_t)f;
            for (int j = 0; j < 4; j++) {
                int64_t p = i0 - 1 + j;
                ii[j] = (int32_t)(p < 0 ? 0 : p > in - 1 ? in - 1 : p);
                ww[j] = cubic(t + 1.0f - (float)j, -0.75f);
            }
            continue;
        }
        /* antialias (and plain bilinear, which is the same window unwidened):
         * centre, support, clipped window, normalized weights */
        float support = (cubic_f ? 2.0f : 1.0f) * (antialias && scale >= 1.0f ? scale : 1.0f);
        float invscale = antialias && scale >= 1.0f ? 1.0f / scale : 1.0f;
        float center = scale * ((float)i + 0.5f);
        int64_t xmin = (int64_t)(center - support + 0.5f);
        if (xmin < 0)
            xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5f);
        if (xmax > in)
            xmax = in;
        int n = (int)(xmax - xmin);
        if (n > K)
            n = K;
        float total = 0.0f;
        for (int j = 0; j < n; j++) {
            float x = ((float)(j + xmin) - center + 0.5f) * invscale;
            float v = cubic_f ? cubic(x, -0.5f) : triangle(x);
            ww[j] = v;
            total += v;
        }
        for (int j = 0; j < n; j++) {
            ii[j] = (int32_t)(xmin + j);
            if (total != 0.0f)
                ww[j] /= total;
        }
    }
    return SL_OK;
}

static int axis_ntaps(int in, int out, sl_interp interp, int antialias) {
    float scale = (float)in / (float)out;
    int base = interp == SL_INTERP_BICUBIC ? 2 : 1;
    if (!antialias || scale < 1.0f)
        return base * 2 + 2;
    return (int)ceilf(base * scale) * 2 + 2;
}

static inline void store(const sl_image_view *d, int64_t o, float v) {
    if (d->dtype == SL_F32) {
        ((float *)d->data)[o] = v;
        return;
    }
    /* uint8 from float: round half to even, saturated (v2's round_().to) */
    float r = nearbyintf(v);
    ((uint8_t *)d->data)[o] = r <= 0.0f ? 0 : r >= 255.0f ? 255 : (uint8_t)r;
}

/* A uint8 result between the passes, as torch's uint8 kernel keeps it
 * (and PIL): rounded and clamped, so a cubic's overshoot is cut at the first
 * pass, not only at the end. */
static inline float u8_round(float v) {
    float r = nearbyintf(v);
    return r < 0.0f ? 0.0f : r > 255.0f ? 255.0f : r;
}

static int resize_float(const sl_image_view *s, const sl_image_view *d, sl_interp interp,
                        int antialias) {
    const int C = s->c, need_h = s->w != d->w, need_v = s->h != d->h;
    int kx = axis_ntaps(s->w, d->w, interp, antialias);
    int ky = axis_ntaps(s->h, d->h, interp, antialias);
    size_t nx = (size_t)d->w * kx, ny = (size_t)d->h * ky;
    size_t tmp_n = need_h && need_v ? (size_t)s->h * d->w * C : 0;
    size_t bytes = (nx + ny) * 8 + tmp_n * 4;
    uint8_t *mem = sl_ops__scratch(bytes);
    if (!mem)
        return sl__oom("resize: scratch");
    int32_t *ix = (int32_t *)mem, *iy = ix + nx;
    float *wx = (float *)(iy + ny), *wy = wx + nx, *tmp = wy + ny;
    axis_taps(s->w, d->w, interp, antialias, kx, ix, wx);
    axis_taps(s->h, d->h, interp, antialias, ky, iy, wy);
    /* the horizontal pass writes a planar (h, w', c) float image: tmp when a
     * vertical pass follows, else straight into d */
    sl_image_view t = {tmp, SL_F32, s->h, d->w, C, (int64_t)d->w * C, C, 1};
    const sl_image_view *h_out = need_v ? &t : d;
    const sl_image_view *v_in = need_h ? &t : s;
    if (need_h) {
        for (int y = 0; y < s->h; y++)
            for (int x = 0; x < d->w; x++)
                for (int k = 0; k < C; k++) {
                    const int32_t *ii = ix + (size_t)x * kx;
                    const float *ww = wx + (size_t)x * kx;
                    float acc = 0.0f;
                    for (int j = 0; j < kx; j++)
                        acc += sl_ops__view_get(s, y, ii[j], k) * ww[j];
                    int64_t o = (int64_t)y * h_out->sh + (int64_t)x * h_out->sw +
                                (int64_t)k * h_out->sc;
                    if (h_out == &t)
                        tmp[o] = d->dtype == SL_U8 ? u8_round(acc) : acc;
                    else
                        store(d, o, acc);
                }
    }
    if (need_v) {
        for (int y = 0; y < d->h; y++) {
            const int32_t *ii = iy + (size_t)y * ky;
            const float *ww = wy + (size_t)y * ky;
            for (int x = 0; x < d->w; x++)
                for (int k = 0; k < C; k++) {
                    float acc = 0.0f;
                    for (int j = 0; j < ky; j++)
                        acc += sl_ops__view_get(v_in, ii[j], x, k) * ww[j];
                    store(d, (int64_t)y * d->sh + (int64_t)x * d->sw + (int64_t)k * d->sc, acc);
                }
        }
    }
    if (!need_h && !need_v)
        return sl_view_convert(s, d, 0);
    return SL_OK;
}

/* ---- uint8 through the PIL-exact resampler ------------------------------ */

/* Interleaved pixels, channels adjacent, rows forward: one resample call. */
static int interleaved(const sl_image_view *v) {
    return v->sc == 1 && v->sw == v->c && v->sh >= (int64_t)v->w * v->c;
}
/* Planes of contiguous rows: one resample call per channel. */
static int planar(const sl_image_view *v) {
    return v->sw == 1 && v->sh >= v->w && (v->c == 1 || v->sc != 0);
}

static int resize_pil(const sl_image_view *s, const sl_image_view *d, sl_interp interp) {
    double box[4] = {0, 0, s->w, s->h};
    int lim[4] = {0, 0, s->w, s->h};
    if (interleaved(s) && interleaved(d))
        return sl_ops__resample(s->data, s->h, s->w, (size_t)s->sh, s->c, box, lim, d->h, d->w,
                                interp, d->data, (size_t)d->sh, NULL);
    if (planar(s) && planar(d) && s->c > 1) {
        for (int k = 0; k < s->c; k++)
            SL_TRY(sl_ops__resample((const uint8_t *)s->data + (int64_t)k * s->sc, s->h, s->w,
                                    (size_t)s->sh, 1, box, lim, d->h, d->w, interp,
                                    (uint8_t *)d->data + (int64_t)k * d->sc, (size_t)d->sh,
                                    NULL));
        return SL_OK;
    }
    /* Anything else (mixed layouts, negative strides): stage through
     * interleaved copies. Allocates; the transforms' own calls never get
     * here (they keep a layout, and flips are copies of their own). */
    size_t in_n = (size_t)s->h * s->w * s->c, out_n = (size_t)d->h * d->w * d->c;
    uint8_t *buf = sl__malloc(in_n + out_n);
    if (!buf)
        return sl__oom("resize: staging copy");
    sl_image_view a = {buf, SL_U8, s->h, s->w, s->c, (int64_t)s->w * s->c, s->c, 1};
    sl_image_view b = {buf + in_n, SL_U8, d->h, d->w, d->c, (int64_t)d->w * d->c, d->c, 1};
    int rc = sl_view_convert(s, &a, 0);
    if (rc == SL_OK)
        rc = sl_ops__resample(buf, a.h, a.w, (size_t)a.sh, a.c, box, lim, b.h, b.w, interp,
                              b.data, (size_t)b.sh, NULL);
    if (rc == SL_OK)
        rc = sl_view_convert(&b, d, 0);
    sl__free(buf);
    return rc;
}

int sl_view_resize(const sl_image_view *src, const sl_image_view *dst, sl_interp interp,
                   int antialias) {
    SL_TRY(sl_ops__view_check(src, "resize", "source"));
    SL_TRY(sl_ops__view_check(dst, "resize", "destination"));
    if (src->dtype != dst->dtype || src->c != dst->c)
        return sl__error(SL_EINVAL, "resize: source and destination differ in dtype or channels");
    if (dst->h > (1 << 16) || dst->w > (1 << 16))
        return sl__error(SL_EINVAL, "resize: output %dx%d larger than 65536 a side", dst->w,
                         dst->h);
    if (interp == SL_INTERP_NEAREST_TORCH || interp == SL_INTERP_NEAREST_EXACT)
        return resize_nearest(src, dst, interp);
    if (src->dtype == SL_U8 && sl_ops__interp_pil(interp) && (antialias || interp == SL_INTERP_NEAREST))
        return resize_pil(src, dst, interp);
    if (interp != SL_INTERP_BILINEAR && interp != SL_INTERP_BICUBIC)
        return sl__error(SL_EINVAL,
                         "resize: interpolation %d is not available for %s images%s (bilinear, "
                         "bicubic or torch's nearest)",
                         (int)interp, sl_dtype_name((sl_dtype)src->dtype),
                         antialias ? "" : " without antialiasing");
    return resize_float(src, dst, interp, antialias);
}

/* ---- affine warps (grid_sample, align_corners=False) -------------------- */

int sl_view_affine(const sl_image_view *src, const sl_image_view *dst, const float m[6],
                   sl_interp interp, const float *fill) {
    SL_TRY(sl_ops__view_check(src, "affine", "source"));
    SL_TRY(sl_ops__view_check(dst, "affine", "destination"));
    if (src->dtype != dst->dtype || src->c != dst->c)
        return sl__error(SL_EINVAL, "affine: source and destination differ in dtype or channels");
    if (interp != SL_INTERP_NEAREST && interp != SL_INTERP_BILINEAR)
        return sl__error(SL_EINVAL, "affine: interpolation must be nearest or bilinear");
    const int C = src->c, W = src->w, H = src->h;
    /* torchvision's _affine_grid: theta^T divided by (w/2, h/2), applied to
     * the output pixel centres -ow/2 + 0.5 + x, -oh/2 + 0.5 + y */
    const float hw = 0.5f * (float)W, hh = 0.5f * (float)H;
    const float t0 = m[0] / hw, t1 = m[1] / hw, t2 = m[2] / hw;
    const float t3 = m[3] / hh, t4 = m[4] / hh, t5 = m[5] / hh;
    float fv[4] = {0, 0, 0, 0};
    for (int k = 0; k < C; k++)
        fv[k] = fill ? fill[k] : 0.0f;
    for (int y = 0; y < dst->h; y++) {
        float by = -(float)dst->h * 0.5f + 0.5f + (float)y;
        for (int x = 0; x < dst->w; x++) {
            float bx = -(float)dst->w * 0.5f + 0.5f + (float)x;
            float gx = fmaf(by, t1, bx * t0) + t2;
            float gy = fmaf(by, t4, bx * t3) + t5;
            float fx = ((gx + 1.0f) * (float)W - 1.0f) / 2.0f;
            float fy = ((gy + 1.0f) * (float)H - 1.0f) / 2.0f;
            int64_t o = (int64_t)y * dst->sh + (int64_t)x * dst->sw;
            if (interp == SL_INTERP_NEAREST) {
                int64_t sx = (int64_t)nearbyintf(fx), sy = (int64_t)nearbyintf(fy);
                int in = sx >= 0 && sx < W && sy >= 0 && sy < H;
                for (int k = 0; k < C; k++) {
                    float v = in ? sl_ops__view_get(src, sy, sx, k) : fill ? fv[k] : 0.0f;
                    store(dst, o + (int64_t)k * dst->sc, v);
                }
                continue;
            }
            float x0f = floorf(fx), y0f = floorf(fy);
            int64_t x0 = (int64_t)x0f, y0 = (int64_t)y0f;
            float ax = fx - x0f, ay = fy - y0f;
            float wts[4] = {(1.0f - ax) * (1.0f - ay), ax * (1.0f - ay), (1.0f - ax) * ay, ax * ay};
            int64_t px[4] = {x0, x0 + 1, x0, x0 + 1}, py[4] = {y0, y0, y0 + 1, y0 + 1};
            float mask = 0.0f;
            int ok[4];
            for (int q = 0; q < 4; q++) {
                ok[q] = px[q] >= 0 && px[q] < W && py[q] >= 0 && py[q] < H;
                if (ok[q])
                    mask += wts[q];
            }
            for (int k = 0; k < C; k++) {
                float v = 0.0f;
                for (int q = 0; q < 4; q++)
                    if (ok[q])
                        v += sl_ops__view_get(src, py[q], px[q], k) * wts[q];
                if (fill)
                    v = (v - fv[k]) * mask + fv[k];
                store(dst, o + (int64_t)k * dst->sc, v);
            }
        }
    }
    return SL_OK;
}
