/*
 * normalize.c — normalize + layout + cast in one pass, tensor casts, one-hot.
 *
 * Normalization goes through a 256-entry table per channel: the table holds
 * exactly the float32 value torchvision computes for each byte
 * ((x / 255 - mean) / std), so results are bit-identical to ToTensor +
 * Normalize, and the per-pixel work is one load, one table read, one store
 * (no arithmetic, no function call), whatever the output dtype.
 */
/* The inner loops are written for the vectoriser; make sure it runs (the
 * library is built at -O2 by default, where GCC 12 vectorises little). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "ops/ops.h"

#include <math.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>

/* Outputs at least this large are written with streaming stores. */
#define NORM_STREAM_BYTES (128 * 1024)

/* One float32 CHW output row of one channel: `r` points at the channel's
 * first byte in the HWC input row (pixels `cc` bytes apart), `t` is the
 * channel's table. Hand-written because the compiler emits one 4-byte store
 * per element, and those stores bound the op: a 3x224x224 float32 image is
 * 600 KB written once (straight into its batch slot) and not read again on
 * this thread, so 16-byte streaming stores skip each line's read for
 * ownership and keep the decoder's working set in cache. Values come from
 * the same table, so results are unchanged. */
static void norm_row_f32_stream(const float *t, const uint8_t *r, size_t cc, size_t W,
                                int mirror, float *o) {
    size_t x = 0;
#define NSRC(i) t[r[(mirror ? W - 1 - (i) : (i)) * cc]]
    for (; x < W && ((uintptr_t)(o + x) & 15u); x++)
        o[x] = NSRC(x);
    for (; x + 4 <= W; x += 4)
        _mm_stream_ps(o + x, _mm_setr_ps(NSRC(x), NSRC(x + 1), NSRC(x + 2), NSRC(x + 3)));
    for (; x < W; x++)
        o[x] = NSRC(x);
#undef NSRC
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_GATHER_PATH 1

/* One RGB row into its three float32 CHW rows with AVX2 / AVX-512 gathers
 * from the channels' tables: the same table values as the scalar code, so
 * the results are identical. Hand-written because the compiler reads the
 * table one value at a time (a byte load, a float load and an insert per
 * value, about 1 cycle per value at best). Here a byte shuffle
 * deinterleaves 8 (16) pixels into each channel's zero-extended indices,
 * mirrored or not, and one gather fetches 8 (16) table values. `stream`:
 * streaming stores when the three rows are equally aligned. */
static inline void norm_px3(const float (*lut)[256], const uint8_t *row, size_t W, int mirror,
                            size_t x, float *o0, float *o1, float *o2) {
    const uint8_t *p = row + 3 * (mirror ? W - 1 - x : x);
    o0[x] = lut[0][p[0]];
    o1[x] = lut[1][p[1]];
    o2[x] = lut[2][p[2]];
}

/* pshufb mask for channel c of 8 pixels loaded as lane 0 = bytes 0..15 and
 * lane 1 = bytes 8..23 (mirrored: lane 0 = bytes 8..23, lane 1 = 0..15):
 * each dword gets one pixel's byte, in output order. */
__attribute__((target("avx2"))) static inline __m256i shuf3(int c, int mirror) {
    if (mirror)
        return _mm256_setr_epi8((char)(13 + c), -1, -1, -1, (char)(10 + c), -1, -1, -1,
                                (char)(7 + c), -1, -1, -1, (char)(4 + c), -1, -1, -1,
                                (char)(9 + c), -1, -1, -1, (char)(6 + c), -1, -1, -1,
                                (char)(3 + c), -1, -1, -1, (char)c, -1, -1, -1);
    return _mm256_setr_epi8((char)c, -1, -1, -1, (char)(3 + c), -1, -1, -1, (char)(6 + c), -1,
                            -1, -1, (char)(9 + c), -1, -1, -1, (char)(4 + c), -1, -1, -1,
                            (char)(7 + c), -1, -1, -1, (char)(10 + c), -1, -1, -1,
                            (char)(13 + c), -1, -1, -1);
}

__attribute__((target("avx2"))) static inline void
norm8_avx2(const float (*lut)[256], const uint8_t *row, size_t W, int mirror, size_t x,
           __m256i m0, __m256i m1, __m256i m2, __m256 *f0, __m256 *f1, __m256 *f2) {
    const uint8_t *p = row + 3 * (mirror ? W - 8 - x : x);
    __m128i lo = _mm_loadu_si128((const __m128i *)p);
    __m128i hi = _mm_loadu_si128((const __m128i *)(p + 8));
    __m256i v = mirror ? _mm256_set_m128i(lo, hi) : _mm256_set_m128i(hi, lo);
    *f0 = _mm256_i32gather_ps(lut[0], _mm256_shuffle_epi8(v, m0), 4);
    *f1 = _mm256_i32gather_ps(lut[1], _mm256_shuffle_epi8(v, m1), 4);
    *f2 = _mm256_i32gather_ps(lut[2], _mm256_shuffle_epi8(v, m2), 4);
}

/* Store the three channel vectors f0..f2 at x of rows o0..o2 with `st`. */
#define STORE3(st, x)        \
    do {                     \
        st(o0 + (x), f0);    \
        st(o1 + (x), f1);    \
        st(o2 + (x), f2);    \
    } while (0)

/* Rows of at least 8 pixels. With `stream`, the pixels before the first
 * cache line boundary and after the last full vector are stored one by one:
 * a line must take either plain or streaming stores, never both (a plain
 * store pulls the line into cache, and streaming into a cached line costs
 * several times more than either). */
__attribute__((target("avx2"))) static void
norm_row3_avx2(const float (*lut)[256], const uint8_t *row, size_t W, int mirror, int stream,
               float *o0, float *o1, float *o2) {
    const __m256i m0 = shuf3(0, mirror), m1 = shuf3(1, mirror), m2 = shuf3(2, mirror);
    __m256 f0, f1, f2;
    size_t x = 0;
    if (stream)
        for (; x < W && ((uintptr_t)(o0 + x) & 63u); x++)
            norm_px3(lut, row, W, mirror, x, o0, o1, o2);
    for (; x + 8 <= W; x += 8) {
        norm8_avx2(lut, row, W, mirror, x, m0, m1, m2, &f0, &f1, &f2);
        if (stream)
            STORE3(_mm256_stream_ps, x);
        else
            STORE3(_mm256_storeu_ps, x);
    }
    for (; x < W; x++)
        norm_px3(lut, row, W, mirror, x, o0, o1, o2);
}

/* 16 pixels (48 bytes, a masked load that cannot fault past them) per
 * step; a byte permute puts each output pixel's channel byte into a dword.
 * Rows of at least 16 pixels; head and tail as in the AVX2 version. */
#define NORM16(x)                                                                            \
    do {                                                                                     \
        __m512i v = _mm512_maskz_loadu_epi8(load48, row + 3 * (mirror ? W - 16 - (x) : (x))); \
        f0 = _mm512_i32gather_ps(_mm512_maskz_permutexvar_epi8(low, m0, v), lut[0], 4);      \
        f1 = _mm512_i32gather_ps(_mm512_maskz_permutexvar_epi8(low, m1, v), lut[1], 4);      \
        f2 = _mm512_i32gather_ps(_mm512_maskz_permutexvar_epi8(low, m2, v), lut[2], 4);      \
    } while (0)

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void
norm_row3_avx512(const float (*lut)[256], const uint8_t *row, size_t W, int mirror, int stream,
                 float *o0, float *o1, float *o2) {
    const __m512i three = _mm512_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39,
                                            42, 45);
    const __m512i base = mirror ? _mm512_sub_epi32(_mm512_set1_epi32(45), three) : three;
    const __m512i m0 = base, m1 = _mm512_add_epi32(base, _mm512_set1_epi32(1)),
                  m2 = _mm512_add_epi32(base, _mm512_set1_epi32(2));
    const __mmask64 load48 = 0xffffffffffffull, low = 0x1111111111111111ull;
    __m512 f0, f1, f2;
    size_t x = 0;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* Head and tail: masked stores within one cache line (a store that
     * spans two lines takes both, even where masked off), the lanes moved
     * into place by a permute. */
    if (stream && ((uintptr_t)o0 & 63u)) {
        unsigned a = (unsigned)((uintptr_t)o0 & 63u) / 4; /* floats before o0 in its line */
        x = 16 - a;
        __mmask16 k = (__mmask16)(0xffffu << a);
        __m512i mv = _mm512_sub_epi32(lane, _mm512_set1_epi32((int)a));
        NORM16(0);
        _mm512_mask_storeu_ps(o0 - a, k, _mm512_permutexvar_ps(mv, f0));
        _mm512_mask_storeu_ps(o1 - a, k, _mm512_permutexvar_ps(mv, f1));
        _mm512_mask_storeu_ps(o2 - a, k, _mm512_permutexvar_ps(mv, f2));
    }
    for (; x + 16 <= W; x += 16) {
        NORM16(x);
        if (stream)
            STORE3(_mm512_stream_ps, x);
        else
            STORE3(_mm512_storeu_ps, x);
    }
    if (x < W) {
        /* pixels x..W-1 (under 16) from the vector at W - 16 */
        size_t t = W - 16;
        __mmask16 k = (__mmask16)((1u << (W - x)) - 1);
        __m512i mv = _mm512_add_epi32(lane, _mm512_set1_epi32((int)(x - t)));
        NORM16(t);
        _mm512_mask_storeu_ps(o0 + x, k, _mm512_permutexvar_ps(mv, f0));
        _mm512_mask_storeu_ps(o1 + x, k, _mm512_permutexvar_ps(mv, f1));
        _mm512_mask_storeu_ps(o2 + x, k, _mm512_permutexvar_ps(mv, f2));
    }
}
#undef NORM16

/* An RGB row into three CHW rows by the best path; 0 when there is none
 * (the caller's scalar code runs). */
static int norm_row3(const float (*lut)[256], const uint8_t *row, size_t W, int mirror,
                     int stream, float *o0, float *o1, float *o2) {
    int level = sl_ops__simd();
    if (level < SL_OPS_AVX2)
        return 0;
    /* streaming needs the three rows equally aligned (so one head loop
     * aligns them all) on a float boundary */
    uintptr_t a0 = (uintptr_t)o0 & 63u;
    if (stream && (a0 != ((uintptr_t)o1 & 63u) || a0 != ((uintptr_t)o2 & 63u) || (a0 & 3u)))
        stream = 0;
    if (level >= SL_OPS_AVX512 && W >= 16 && sl_ops__cpu_vbmi()) {
        norm_row3_avx512(lut, row, W, mirror, stream, o0, o1, o2);
        SL_OPS__COUNT(SL_OPS_K_NORM, SL_OPS_AVX512);
    } else if (W >= 8) {
        norm_row3_avx2(lut, row, W, mirror, stream, o0, o1, o2);
        SL_OPS__COUNT(SL_OPS_K_NORM, SL_OPS_AVX2);
    } else {
        for (size_t x = 0; x < W; x++)
            norm_px3(lut, row, W, mirror, x, o0, o1, o2);
    }
    return 1;
}
#endif

void sl_ops__norm_lut(float lut[][256], int C, const float *mean, const float *std) {
    for (int c = 0; c < C; c++) {
        float m = mean ? mean[c] : 0.0f, sd = std ? std[c] : 1.0f;
        for (int i = 0; i < 256; i++)
            lut[c][i] = ((float)i / 255.0f - m) / sd;
    }
}

void sl_ops__norm_row(const sl_ops__norm *nm, const uint8_t *row, int C, int W, int H, int y,
                      float *out) {
    size_t cc = (size_t)C, w = (size_t)W;
    if (nm->layout == SL_LAYOUT_CHW) {
#ifdef HAVE_GATHER_PATH
        if (cc == 3) {
            float *o0 = out + (size_t)y * w, *o1 = o0 + (size_t)H * w, *o2 = o1 + (size_t)H * w;
            if (norm_row3(nm->lut, row, w, nm->mirror, 1, o0, o1, o2))
                return;
        }
#endif
        for (size_t c = 0; c < cc; c++) {
            float *o = out + c * (size_t)H * w + (size_t)y * w;
#if defined(__SSE2__)
            norm_row_f32_stream(nm->lut[c], row + c, cc, w, nm->mirror, o);
#else
            for (size_t x = 0; x < w; x++)
                o[x] = nm->lut[c][row[(nm->mirror ? w - 1 - x : x) * cc + c]];
#endif
        }
    } else {
        float *o = out + (size_t)y * w * cc;
        for (size_t x = 0; x < w; x++) {
            size_t sx = nm->mirror ? w - 1 - x : x;
            for (size_t c = 0; c < cc; c++)
                o[x * cc + c] = nm->lut[c][row[sx * cc + c]];
        }
    }
}

void sl_ops__norm_done(void) {
#if defined(__SSE2__)
    _mm_sfence(); /* streaming stores are weakly ordered: publish them
                     before the tensor is handed to another thread */
#endif
}

int sl_image_normalize(const sl_tensor *src, const float *mean, const float *std,
                       sl_layout layout, sl_dtype dtype, sl_tensor *out) {
    return sl_ops__normalize(src, mean, std, layout, dtype, 0, out);
}

int sl_ops__normalize(const sl_tensor *src, const float *mean, const float *std,
                      sl_layout layout, sl_dtype dtype, int mirror, sl_tensor *out) {
    SL_TRY(sl_ops__check_image(src, "normalize"));
    if (dtype != SL_F32 && dtype != SL_F16 && dtype != SL_BF16 && dtype != SL_U8)
        return sl__error(SL_EINVAL,
                         "normalize: dtype %s not supported (float32, float16, bfloat16, uint8)",
                         sl_dtype_name(dtype));
    if (layout != SL_LAYOUT_CHW && layout != SL_LAYOUT_HWC)
        return sl__error(SL_EINVAL, "normalize: unknown layout %d", (int)layout);
    int64_t H = src->shape[0], W64 = src->shape[1], C = src->shape[2];
    for (int c = 0; c < C; c++)
        if (std && !(std[c] != 0.0f && isfinite(std[c])))
            return sl__error(SL_EINVAL, "normalize: std[%d] must be finite and non-zero", c);
    if (out == src || (out->data && out->data == src->data))
        return sl__error(SL_EINVAL, "normalize: output overlaps input");
    union {
        float f[4][256];
        uint16_t h[4][256];
        uint8_t b[4][256];
    } lut;
    for (int c = 0; c < C; c++) {
        float m = mean ? mean[c] : 0.0f, sd = std ? std[c] : 1.0f;
        for (int i = 0; i < 256; i++) {
            float v = ((float)i / 255.0f - m) / sd;
            if (dtype == SL_F32) {
                lut.f[c][i] = v; /* the value sl_ops__norm_lut gives */
            } else if (dtype == SL_F16) {
                lut.h[c][i] = sl_ops__f32_to_f16(v);
            } else if (dtype == SL_BF16) {
                lut.h[c][i] = sl_ops__f32_to_bf16(v);
            } else {
                float r = rintf(v * 255.0f);
                lut.b[c][i] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
            }
        }
    }
    int64_t shape[3];
    if (layout == SL_LAYOUT_CHW) {
        shape[0] = C; shape[1] = H; shape[2] = W64;
    } else {
        shape[0] = H; shape[1] = W64; shape[2] = C;
    }
    int allocated;
    SL_TRY(sl_ops__out_prepare(out, dtype, 3, shape, "normalize", &allocated));
    const uint8_t *restrict s = src->data;
    size_t n = (size_t)H * (size_t)W64;
    size_t cc = (size_t)C;
    size_t W = (size_t)W64;
    /* Rows are read left to right, or right to left when mirroring (a
     * horizontal flip folded into this pass). */
#define NORM_LOOP(T, TAB)                                                      \
    do {                                                                       \
        T *restrict d = out->data;                                             \
        for (size_t y = 0; y < (size_t)H; y++) {                               \
            const uint8_t *restrict r = s + y * W * cc;                        \
            if (layout == SL_LAYOUT_CHW) {                                     \
                for (size_t c = 0; c < cc; c++) {                              \
                    const T *restrict t = TAB[c];                              \
                    T *restrict o = d + c * n + y * W;                         \
                    if (mirror)                                                \
                        for (size_t x = 0; x < W; x++)                         \
                            o[x] = t[r[(W - 1 - x) * cc + c]];                 \
                    else                                                       \
                        for (size_t x = 0; x < W; x++)                         \
                            o[x] = t[r[x * cc + c]];                           \
                }                                                              \
            } else {                                                           \
                T *restrict o = d + y * W * cc;                                \
                for (size_t x = 0; x < W; x++) {                               \
                    size_t sx = mirror ? W - 1 - x : x;                        \
                    for (size_t c = 0; c < cc; c++)                            \
                        o[x * cc + c] = TAB[c][r[sx * cc + c]];                \
                }                                                              \
            }                                                                  \
        }                                                                      \
    } while (0)
#if defined(__SSE2__)
    int stream = out->nbytes >= NORM_STREAM_BYTES;
    if (dtype == SL_F32 && layout == SL_LAYOUT_CHW &&
        (stream || (cc == 3 && sl_ops__simd() >= SL_OPS_AVX2))) {
        float *d = out->data;
        for (size_t y = 0; y < (size_t)H; y++) {
#ifdef HAVE_GATHER_PATH
            if (cc == 3 && norm_row3((const float(*)[256])lut.f, s + y * W * cc, W, mirror, stream,
                                     d + y * W, d + n + y * W, d + 2 * n + y * W))
                continue;
#endif
            for (size_t c = 0; c < cc; c++)
                norm_row_f32_stream(lut.f[c], s + y * W * cc + c, cc, W, mirror,
                                    d + c * n + y * W);
        }
        sl_ops__norm_done();
        return SL_OK;
    }
#endif
    if (dtype == SL_F32)
        NORM_LOOP(float, lut.f);
    else if (dtype == SL_F16 || dtype == SL_BF16)
        NORM_LOOP(uint16_t, lut.h);
    else
        NORM_LOOP(uint8_t, lut.b);
#undef NORM_LOOP
    return SL_OK;
}

/* ---- cast --------------------------------------------------------------- */

static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(m | 0x400, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double load(const void *p, sl_dtype t, size_t i) {
    switch (t) {
    case SL_U8: return ((const uint8_t *)p)[i];
    case SL_I8: return ((const int8_t *)p)[i];
    case SL_U16: return ((const uint16_t *)p)[i];
    case SL_I16: return ((const int16_t *)p)[i];
    case SL_U32: return ((const uint32_t *)p)[i];
    case SL_I32: return ((const int32_t *)p)[i];
    case SL_U64: return (double)((const uint64_t *)p)[i];
    case SL_I64: return (double)((const int64_t *)p)[i];
    case SL_F16: return half_to_double(((const uint16_t *)p)[i]);
    case SL_BF16: return sl_ops__bf16_to_f32(((const uint16_t *)p)[i]);
    case SL_F32: return ((const float *)p)[i];
    case SL_F64: return ((const double *)p)[i];
    case SL_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

static double sat(double v, double lo, double hi) {
    if (isnan(v))
        return 0;
    v = rint(v);
    return v < lo ? lo : v > hi ? hi : v;
}

static void store(void *p, sl_dtype t, size_t i, double v) {
    switch (t) {
    case SL_U8: ((uint8_t *)p)[i] = (uint8_t)sat(v, 0, 255); break;
    case SL_I8: ((int8_t *)p)[i] = (int8_t)sat(v, -128, 127); break;
    case SL_U16: ((uint16_t *)p)[i] = (uint16_t)sat(v, 0, 65535); break;
    case SL_I16: ((int16_t *)p)[i] = (int16_t)sat(v, -32768, 32767); break;
    case SL_U32: ((uint32_t *)p)[i] = (uint32_t)sat(v, 0, 4294967295.0); break;
    case SL_I32: ((int32_t *)p)[i] = (int32_t)sat(v, -2147483648.0, 2147483647.0); break;
    /* 2^64 and 2^63 are not representable targets: stop one step below. */
    case SL_U64: ((uint64_t *)p)[i] = (uint64_t)sat(v, 0, 18446744073709549568.0); break;
    case SL_I64: ((int64_t *)p)[i] = (int64_t)sat(v, -9223372036854775808.0, 9223372036854774784.0); break;
    case SL_F16: ((uint16_t *)p)[i] = sl_ops__f32_to_f16((float)v); break;
    case SL_BF16: ((uint16_t *)p)[i] = sl_ops__f32_to_bf16((float)v); break;
    case SL_F32: ((float *)p)[i] = (float)v; break;
    case SL_F64: ((double *)p)[i] = v; break;
    default: break;
    }
}

int sl_tensor_cast(const sl_tensor *src, sl_dtype dtype, sl_tensor *out) {
    if (!src || (!src->data && src->nbytes))
        return sl__error(SL_EINVAL, "cast: NULL tensor");
    if (sl_dtype_size(src->dtype) == 0 || sl_dtype_size(dtype) == 0 || dtype == SL_BOOL)
        return sl__error(SL_EINVAL, "cast: cannot cast %s to %s", sl_dtype_name(src->dtype),
                         sl_dtype_name(dtype));
    if (out == src || (out->data && out->data == src->data))
        return sl__error(SL_EINVAL, "cast: output overlaps input");
    int allocated;
    int64_t shape[SL_MAX_DIMS];
    int nd = src->ndim;
    memcpy(shape, src->shape, sizeof shape);
    SL_TRY(sl_ops__out_prepare(out, dtype, nd, shape, "cast", &allocated));
    size_t n = (size_t)sl_tensor_numel(src);
    if (src->dtype == SL_U8 && dtype == SL_F32) {
        const uint8_t *restrict s = src->data;
        float *restrict d = out->data;
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
    } else if (src->dtype == dtype) {
        memcpy(out->data, src->data, src->nbytes);
    } else {
        for (size_t i = 0; i < n; i++)
            store(out->data, dtype, i, load(src->data, src->dtype, i));
    }
    return SL_OK;
}

int sl_one_hot(int64_t label, int classes, sl_dtype dtype, sl_tensor *out) {
    if (classes <= 0)
        return sl__error(SL_EINVAL, "one_hot: classes must be positive (got %d)", classes);
    if (label < 0 || label >= classes)
        return sl__error(SL_EINVAL, "one_hot: label %lld outside 0..%d", (long long)label,
                         classes - 1);
    if (sl_dtype_size(dtype) == 0)
        return sl__error(SL_EINVAL, "one_hot: bad dtype");
    int64_t shape[1] = {classes};
    int allocated;
    SL_TRY(sl_ops__out_prepare(out, dtype, 1, shape, "one_hot", &allocated));
    memset(out->data, 0, out->nbytes);
    if (dtype == SL_BOOL)
        ((uint8_t *)out->data)[label] = 1;
    else
        store(out->data, dtype, (size_t)label, 1.0);
    return SL_OK;
}
