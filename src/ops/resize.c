/*
 * resize.c — PIL-exact resampling (Image.resize with BILINEAR, BOX, NEAREST).
 *
 * Hand-written rather than calling a library because the result must equal
 * PIL's pixel for pixel and it must write into caller memory with no
 * per-call allocation. The algorithm is PIL's (support-scaled filter when
 * shrinking, so shrinking is antialiased):
 *   1. per output column (and row) a window [xmin, xmin+n) of source pixels
 *      and normalised weights, turned into 22-bit fixed point;
 *   2. a horizontal pass over only the source rows the vertical pass needs,
 *      rounding to 8 bits, then a vertical pass;
 *   3. a pass is skipped when it would be the identity, as PIL does.
 * Both passes have hand-written AVX2 and AVX-512 versions (the horizontal
 * RGB pass an SSE4.1 one too), chosen at run time by sl_ops__simd(); they
 * compute the scalar code's integers exactly. The scalar vertical pass runs
 * row-at-a-time over whole rows so that its inner loop vectorises.
 */
/* The inner loops are written for the vectoriser; make sure it runs (the
 * library is built at -O2 by default, where GCC 12 vectorises little). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "ops/ops.h"

#include <math.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

static double filter_triangle(double x) {
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static double filter_box(double x) { return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0; }

static inline uint8_t clip8(int32_t v) {
    if (v >= (1 << PRECISION_BITS << 8))
        return 255;
    if (v <= 0)
        return 0;
    return (uint8_t)(v >> PRECISION_BITS);
}

/* The window size for one axis (PIL's ksize). */
static int axis_ksize(float in0, float in1, int out_size, double support) {
    double scale = (double)(in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    return (int)ceil(support * filterscale) * 2 + 1;
}

/* PIL's precompute_coeffs + normalize_coeffs_8bpc, with the source clamp
 * range [lo, hi) in place of [0, size). `tmpd` holds ksize doubles. */
static void axis_coeffs(float in0, float in1, int lo, int hi, int out_size, int ksize,
                        sl_interp interp, int32_t *bounds, int32_t *kk, double *tmpd) {
    double support = interp == SL_INTERP_AREA ? 0.5 : 1.0;
    double (*filter)(double) = interp == SL_INTERP_AREA ? filter_box : filter_triangle;
    double scale = (double)(in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    support *= filterscale;
    double ss = 1.0 / filterscale;
    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0;
        int xmin = (int)(center - support + 0.5);
        if (xmin < lo)
            xmin = lo;
        int xmax = (int)(center + support + 0.5);
        if (xmax > hi)
            xmax = hi;
        xmax -= xmin;
        if (xmax < 0)
            xmax = 0;
        if (xmax > ksize)
            xmax = ksize;
        for (int x = 0; x < xmax; x++) {
            double w = filter((x + xmin - center + 0.5) * ss);
            tmpd[x] = w;
            ww += w;
        }
        int32_t *k = kk + (size_t)xx * ksize;
        for (int x = 0; x < xmax; x++) {
            double w = ww != 0.0 ? tmpd[x] / ww : tmpd[x];
            k[x] = w < 0 ? (int32_t)(-0.5 + w * (1 << PRECISION_BITS))
                         : (int32_t)(0.5 + w * (1 << PRECISION_BITS));
        }
        for (int x = xmax; x < ksize; x++)
            k[x] = 0;
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_SSE41_PATH 1

/* RGB horizontal pass with SSE4.1: one pixel's three channels (plus one
 * byte of the next pixel, ignored) per 4-lane multiply-add. The integer
 * arithmetic is the scalar path's, so results are identical. A pixel's
 * 4-byte load may not pass the row's end: the last source pixel of a row is
 * added by the scalar tail. */
/* 3 bytes of one RGB pixel as the low bytes of a word; 4-byte load when a
 * fourth byte is known to exist. */
static inline uint32_t load_rgb(const uint8_t *p, int can_overread) {
    uint32_t v;
    if (can_overread) {
        memcpy(&v, p, 4);
        return v;
    }
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
}

/* v >> 22 clamped to 0..255 for four lanes (PIL's clip8), as bytes. */
__attribute__((target("sse4.1"))) static inline __m128i clip8x4x4(__m128i a, __m128i b,
                                                                 __m128i c, __m128i d) {
    a = _mm_srai_epi32(a, PRECISION_BITS);
    b = _mm_srai_epi32(b, PRECISION_BITS);
    c = _mm_srai_epi32(c, PRECISION_BITS);
    d = _mm_srai_epi32(d, PRECISION_BITS);
    return _mm_packus_epi16(_mm_packus_epi32(a, b), _mm_packus_epi32(c, d));
}

__attribute__((target("sse4.1"))) static void
pass_horizontal_rgb_sse41(const uint8_t *src, size_t sstride, int rows, int sw, int ow,
                          int ksize, const int32_t *bounds, const int32_t *kk, uint8_t *dst,
                          size_t dstride) {
    const int32_t half = 1 << (PRECISION_BITS - 1);
    int y = 0;
    /* Four rows at a time share each output column's window and weights. */
    for (; y < rows; y += 4) {
        int nr = rows - y < 4 ? rows - y : 4;
        const uint8_t *in[4];
        for (int r = 0; r < 4; r++)
            in[r] = src + (size_t)(y + (r < nr ? r : 0)) * sstride;
        for (int xx = 0; xx < ow; xx++) {
            const int32_t *k = kk + (size_t)xx * ksize;
            int xmin = bounds[2 * xx], n = bounds[2 * xx + 1];
            /* the row's last pixel has no fourth byte to over-read */
            int nv = xmin + n >= sw ? n - 1 : n;
            size_t off = (size_t)xmin * 3;
            __m128i a0 = _mm_set1_epi32(half), a1 = a0, a2 = a0, a3 = a0;
            for (int x = 0; x < n; x++, off += 3) {
                int safe = x < nv;
                __m128i kv = _mm_set1_epi32(k[x]);
                __m128i p0 = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)load_rgb(in[0] + off, safe)));
                __m128i p1 = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)load_rgb(in[1] + off, safe)));
                __m128i p2 = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)load_rgb(in[2] + off, safe)));
                __m128i p3 = _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)load_rgb(in[3] + off, safe)));
                a0 = _mm_add_epi32(a0, _mm_mullo_epi32(p0, kv));
                a1 = _mm_add_epi32(a1, _mm_mullo_epi32(p1, kv));
                a2 = _mm_add_epi32(a2, _mm_mullo_epi32(p2, kv));
                a3 = _mm_add_epi32(a3, _mm_mullo_epi32(p3, kv));
            }
            __m128i px = clip8x4x4(a0, a1, a2, a3);
            uint32_t w[4];
            _mm_storeu_si128((__m128i *)w, px);
            for (int r = 0; r < nr; r++) {
                uint8_t *o = dst + (size_t)(y + r) * dstride + 3 * (size_t)xx;
                if (xx + 1 < ow) {
                    memcpy(o, &w[r], 4); /* the 4th byte is rewritten by the next pixel */
                } else {
                    o[0] = (uint8_t)w[r];
                    o[1] = (uint8_t)(w[r] >> 8);
                    o[2] = (uint8_t)(w[r] >> 16);
                }
            }
        }
    }
}

/* RGB horizontal pass with AVX2, 2 rows per 256-bit register (one per
 * 128-bit lane). Hand-written because this pass is the largest cost after
 * libjpeg in the training chain, and the SSE4.1 pass above spends a load,
 * a widening and a 32-bit multiply (two uops) per pixel and tap, on 3 of 4
 * lanes. Here one 16-byte load covers 4 taps (12 bytes) of a row; a byte
 * shuffle widens the pixels to 16 bits in tap pairs, and pmaddwd multiplies
 * and sums two taps per 32-bit lane. PIL's weights have 22 fractional bits,
 * more than a 16-bit multiplier takes, so each weight k is split as
 * k = hi * 2048 + lo (both fit 16 bits) and the sum is rebuilt as
 * (sum p*hi) * 2048 + sum p*lo: the same integer as the scalar sum, so the
 * pixels are identical (no precision is given up). */
#define HAVE_AVX2_PATH 1
#define HQ_GROUP 32 /* int16 per group of 4 taps: A hi, A lo, B hi, B lo (8 each) */

static size_t hq_bytes(int C, int ow, int ksize) {
    return C == 3 ? (size_t)ow * (size_t)((ksize + 3) / 4) * HQ_GROUP * sizeof(int16_t) : 0;
}

/* The weights in the layout the AVX2 pass multiplies by: for each output
 * column and group of 4 taps, tap pairs (0,1) "A" and (2,3) "B" repeated for
 * R, G, B, then a zero pair; weights of taps past the column's window are 0,
 * so the bytes loaded there count for nothing. */
static void hq_prepare(int ow, int ksize, const int32_t *bounds, const int32_t *kk, int16_t *hq) {
    const int G = (ksize + 3) / 4;
    for (int xx = 0; xx < ow; xx++) {
        const int32_t *k = kk + (size_t)xx * ksize;
        int n = bounds[2 * xx + 1];
        for (int g = 0; g < G; g++) {
            int16_t *q = hq + ((size_t)xx * G + g) * HQ_GROUP;
            for (int pair = 0; pair < 2; pair++) {
                int16_t *qh = q + pair * 16, *ql = qh + 8;
                for (int j = 0; j < 8; j++) {
                    int t = 4 * g + 2 * pair + (j & 1);
                    int32_t v = j < 6 && t < n ? k[t] : 0;
                    int32_t lo = v & 2047;
                    qh[j] = (int16_t)((v - lo) / 2048);
                    ql[j] = (int16_t)lo;
                }
            }
        }
    }
}

/* Two rows (one per 128-bit lane) of one output column: the weighted sums
 * over groups of 4 taps, split into the hi and lo halves of the weights. */
#define HQ_LOAD2(ra, rb, off)                                                                \
    _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)((ra) + (off)))), \
                            _mm_loadu_si128((const __m128i *)((rb) + (off))), 1)

__attribute__((target("avx2"))) static inline void
hq_madd(__m256i v, const int16_t *q, __m256i shuf_a, __m256i shuf_b, __m256i *h, __m256i *l) {
    __m256i pa = _mm256_shuffle_epi8(v, shuf_a), pb = _mm256_shuffle_epi8(v, shuf_b);
    __m256i kah = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)q));
    __m256i kal = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(q + 8)));
    __m256i kbh = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(q + 16)));
    __m256i kbl = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(q + 24)));
    *h = _mm256_add_epi32(*h, _mm256_add_epi32(_mm256_madd_epi16(pa, kah), _mm256_madd_epi16(pb, kbh)));
    *l = _mm256_add_epi32(*l, _mm256_add_epi32(_mm256_madd_epi16(pa, kal), _mm256_madd_epi16(pb, kbl)));
}

/* (sum hi) * 2048 + sum lo + half, >> 22: PIL's rounding, before clip8. */
__attribute__((target("avx2"))) static inline __m256i hq_finish(__m256i h, __m256i l) {
    const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    return _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, 11), l), half),
                             PRECISION_BITS);
}

/* Four rows per step share each column's weights. Columns whose 16-byte
 * loads would pass the row's end (the last one or two) go to the scalar
 * code, so the loop has no bounds test. */
__attribute__((target("avx2"))) static void
pass_horizontal_rgb_avx2(const uint8_t *src, size_t sstride, int rows, int sw, int ow, int ksize,
                         const int32_t *bounds, const int32_t *kk, const int16_t *hq,
                         uint8_t *dst, size_t dstride) {
    const int G = (ksize + 3) / 4;
    const size_t rowbytes = (size_t)sw * 3;
    const int32_t rhalf = 1 << (PRECISION_BITS - 1);
    /* pixels p0..p3 of a group: A = words (p0 p1) per channel, B = (p2 p3) */
    const __m256i shuf_a = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,
                                            0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m256i shuf_b = _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1,
                                            -1, 6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1,
                                            -1, -1);
    int xsafe = 0; /* columns [0, xsafe) take the vector loop */
    while (xsafe < ow - 1) {
        int ng = (bounds[2 * xsafe + 1] + 3) >> 2;
        size_t last = (size_t)(bounds[2 * xsafe] + 4 * (ng > 0 ? ng - 1 : 0)) * 3;
        if (last + 16 > rowbytes)
            break;
        xsafe++;
    }
    for (int y = 0; y < rows; y += 4) {
        const int nr = rows - y < 4 ? rows - y : 4;
        const uint8_t *r[4];
        uint8_t *o[4];
        for (int k = 0; k < 4; k++) {
            r[k] = src + (size_t)(y + (k < nr ? k : 0)) * sstride;
            o[k] = dst + (size_t)(y + k) * dstride;
        }
        for (int xx = 0; xx < xsafe; xx++) {
            const size_t off = (size_t)bounds[2 * xx] * 3;
            const int ng = (bounds[2 * xx + 1] + 3) >> 2;
            const int16_t *q = hq + (size_t)xx * G * HQ_GROUP;
            __m256i h01 = _mm256_setzero_si256(), l01 = h01, h23 = h01, l23 = h01;
            for (int g = 0; g < ng; g++, q += HQ_GROUP) {
                size_t go = off + 12 * (size_t)g;
                hq_madd(HQ_LOAD2(r[0], r[1], go), q, shuf_a, shuf_b, &h01, &l01);
                hq_madd(HQ_LOAD2(r[2], r[3], go), q, shuf_a, shuf_b, &h23, &l23);
            }
            /* lanes: [row0 RGBx, row2 RGBx | row1 RGBx, row3 RGBx] after the
             * packs, which saturate to 0..255 (clip8) */
            __m256i p16 = _mm256_packus_epi32(hq_finish(h01, l01), hq_finish(h23, l23));
            __m256i p8 = _mm256_packus_epi16(p16, p16);
            __m128i lo = _mm256_castsi256_si128(p8), hi = _mm256_extracti128_si256(p8, 1);
            uint32_t w[4] = {(uint32_t)_mm_cvtsi128_si32(lo), (uint32_t)_mm_cvtsi128_si32(hi),
                             (uint32_t)_mm_extract_epi32(lo, 1), (uint32_t)_mm_extract_epi32(hi, 1)};
            /* 4-byte stores: the 4th byte is rewritten by the next pixel
             * (xsafe < ow, so a next pixel exists) */
            for (int k = 0; k < nr; k++)
                memcpy(o[k] + 3 * (size_t)xx, &w[k], 4);
        }
        for (int k = 0; k < nr; k++) {
            for (int xx = xsafe; xx < ow; xx++) {
                const int32_t *kw = kk + (size_t)xx * ksize;
                const uint8_t *p = r[k] + (size_t)bounds[2 * xx] * 3;
                int n = bounds[2 * xx + 1];
                int32_t s0 = rhalf, s1 = rhalf, s2 = rhalf;
                for (int x = 0; x < n; x++) {
                    s0 += p[3 * x] * kw[x];
                    s1 += p[3 * x + 1] * kw[x];
                    s2 += p[3 * x + 2] * kw[x];
                }
                o[k][3 * xx] = clip8(s0);
                o[k][3 * xx + 1] = clip8(s1);
                o[k][3 * xx + 2] = clip8(s2);
            }
        }
    }
}

/* Output column xx of four rows (one per 128-bit lane) as [R G B 0] int32
 * per lane, rounded and shifted, before clip8. */
__attribute__((target("avx512f,avx512bw"))) static inline __m512i
hcol512(const uint8_t *const r[4], int xx, const int32_t *bounds, const int16_t *hq, int G,
        __m512i shuf_a, __m512i shuf_b) {
    const size_t off = (size_t)bounds[2 * xx] * 3;
    const int ng = (bounds[2 * xx + 1] + 3) >> 2;
    const int16_t *q = hq + (size_t)xx * G * HQ_GROUP;
    __m512i h = _mm512_setzero_si512(), l = h;
    for (int g = 0; g < ng; g++, q += HQ_GROUP) {
        size_t go = off + 12 * (size_t)g;
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r[0] + go)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r[1] + go)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r[2] + go)), 2);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r[3] + go)), 3);
        __m512i pa = _mm512_shuffle_epi8(v, shuf_a), pb = _mm512_shuffle_epi8(v, shuf_b);
        __m512i kah = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)q));
        __m512i kal = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(q + 8)));
        __m512i kbh = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(q + 16)));
        __m512i kbl = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(q + 24)));
        h = _mm512_add_epi32(h, _mm512_add_epi32(_mm512_madd_epi16(pa, kah),
                                                 _mm512_madd_epi16(pb, kbh)));
        l = _mm512_add_epi32(l, _mm512_add_epi32(_mm512_madd_epi16(pa, kal),
                                                 _mm512_madd_epi16(pb, kbl)));
    }
    const __m512i half = _mm512_set1_epi32(1 << (PRECISION_BITS - 1));
    return _mm512_srai_epi32(_mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(h, 11), l), half),
                             PRECISION_BITS);
}

/* The AVX2 pass above with AVX-512: four rows per register (one per
 * 128-bit lane), so each group of 4 taps of 4 rows is one load and three
 * inserts, two shuffles and four pmaddwd, with the weights broadcast to all
 * lanes; four output columns are packed together and stored as 12 bytes
 * per row. Same integers as the scalar code. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
pass_horizontal_rgb_avx512(const uint8_t *src, size_t sstride, int rows, int sw, int ow,
                           int ksize, const int32_t *bounds, const int32_t *kk, const int16_t *hq,
                           uint8_t *dst, size_t dstride) {
    const int G = (ksize + 3) / 4;
    const size_t rowbytes = (size_t)sw * 3;
    const int32_t rhalf = 1 << (PRECISION_BITS - 1);
    const __m512i shuf_a = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1));
    const __m512i shuf_b = _mm512_broadcast_i32x4(
        _mm_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1));
    /* RGB0 x 4 -> RGB x 4 in each lane */
    const __m512i rgb12 = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
    /* dword 0 of each lane (one row's RGB after the packs) to dwords 0..3 */
    const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    int xsafe = 0; /* columns [0, xsafe) take the vector loop */
    while (xsafe < ow - 1) {
        int ng = (bounds[2 * xsafe + 1] + 3) >> 2;
        size_t last = (size_t)(bounds[2 * xsafe] + 4 * (ng > 0 ? ng - 1 : 0)) * 3;
        if (last + 16 > rowbytes)
            break;
        xsafe++;
    }
    for (int y = 0; y < rows; y += 4) {
        const int nr = rows - y < 4 ? rows - y : 4;
        const uint8_t *r[4];
        uint8_t *o[4];
        for (int k = 0; k < 4; k++) {
            r[k] = src + (size_t)(y + (k < nr ? k : 0)) * sstride;
            o[k] = dst + (size_t)(y + k) * dstride;
        }
        int xx = 0;
        /* four columns at a time: 4 rows x 4 pixels packed into one
         * register, 12 bytes per row stored with a byte mask */
        for (; xx + 4 <= xsafe; xx += 4) {
            __m512i v0 = hcol512(r, xx, bounds, hq, G, shuf_a, shuf_b);
            __m512i v1 = hcol512(r, xx + 1, bounds, hq, G, shuf_a, shuf_b);
            __m512i v2 = hcol512(r, xx + 2, bounds, hq, G, shuf_a, shuf_b);
            __m512i v3 = hcol512(r, xx + 3, bounds, hq, G, shuf_a, shuf_b);
            /* per lane (row): bytes RGB0 of columns xx..xx+3, then RGB x4 */
            __m512i p8 = _mm512_packus_epi16(_mm512_packus_epi32(v0, v1),
                                             _mm512_packus_epi32(v2, v3));
            p8 = _mm512_shuffle_epi8(p8, rgb12);
            _mm_mask_storeu_epi8(o[0] + 3 * (size_t)xx, 0x0fff, _mm512_castsi512_si128(p8));
            if (nr > 1)
                _mm_mask_storeu_epi8(o[1] + 3 * (size_t)xx, 0x0fff,
                                     _mm512_extracti32x4_epi32(p8, 1));
            if (nr > 2)
                _mm_mask_storeu_epi8(o[2] + 3 * (size_t)xx, 0x0fff,
                                     _mm512_extracti32x4_epi32(p8, 2));
            if (nr > 3)
                _mm_mask_storeu_epi8(o[3] + 3 * (size_t)xx, 0x0fff,
                                     _mm512_extracti32x4_epi32(p8, 3));
        }
        for (; xx < xsafe; xx++) {
            __m512i v = hcol512(r, xx, bounds, hq, G, shuf_a, shuf_b);
            /* per lane [R G B 0] -> bytes RGB0 (saturating: clip8) */
            __m512i p8 = _mm512_packus_epi16(_mm512_packus_epi32(v, v), _mm512_setzero_si512());
            __m128i w4 = _mm512_castsi512_si128(_mm512_permutexvar_epi32(first, p8));
            uint32_t w[4];
            _mm_storeu_si128((__m128i *)w, w4);
            /* 4-byte stores: the 4th byte is rewritten by the next pixel */
            for (int k = 0; k < nr; k++)
                memcpy(o[k] + 3 * (size_t)xx, &w[k], 4);
        }
        for (int k = 0; k < nr; k++) {
            for (int x1 = xsafe; x1 < ow; x1++) {
                const int32_t *kw = kk + (size_t)x1 * ksize;
                const uint8_t *p = r[k] + (size_t)bounds[2 * x1] * 3;
                int n = bounds[2 * x1 + 1];
                int32_t s0 = rhalf, s1 = rhalf, s2 = rhalf;
                for (int x = 0; x < n; x++) {
                    s0 += p[3 * x] * kw[x];
                    s1 += p[3 * x + 1] * kw[x];
                    s2 += p[3 * x + 2] * kw[x];
                }
                o[k][3 * x1] = clip8(s0);
                o[k][3 * x1 + 1] = clip8(s1);
                o[k][3 * x1 + 2] = clip8(s2);
            }
        }
    }
}
#else
static size_t hq_bytes(int C, int ow, int ksize) {
    (void)C, (void)ow, (void)ksize;
    return 0;
}
#endif

/* `hq` is scratch of hq_bytes() for the AVX2 pass's weights. */
static void pass_horizontal(const uint8_t *src, size_t sstride, int rows, int sw, int C, int ow,
                            int ksize, const int32_t *bounds, const int32_t *kk, void *hq,
                            uint8_t *dst, size_t dstride) {
    const int32_t half = 1 << (PRECISION_BITS - 1);
#ifdef HAVE_AVX2_PATH
    if (C == 3 && sl_ops__simd() >= SL_OPS_AVX512) {
        hq_prepare(ow, ksize, bounds, kk, hq);
        pass_horizontal_rgb_avx512(src, sstride, rows, sw, ow, ksize, bounds, kk, hq, dst,
                                   dstride);
        return;
    }
    if (C == 3 && sl_ops__simd() >= SL_OPS_AVX2) {
        hq_prepare(ow, ksize, bounds, kk, hq);
        pass_horizontal_rgb_avx2(src, sstride, rows, sw, ow, ksize, bounds, kk, hq, dst, dstride);
        return;
    }
#endif
#ifdef HAVE_SSE41_PATH
    if (C == 3 && sl_ops__simd() >= SL_OPS_SSE41) {
        pass_horizontal_rgb_sse41(src, sstride, rows, sw, ow, ksize, bounds, kk, dst, dstride);
        return;
    }
#endif
    for (int y = 0; y < rows; y++) {
        const uint8_t *in = src + (size_t)y * sstride;
        uint8_t *o = dst + (size_t)y * dstride;
        if (C == 3) {
            for (int xx = 0; xx < ow; xx++) {
                const int32_t *k = kk + (size_t)xx * ksize;
                const uint8_t *p = in + (size_t)bounds[2 * xx] * 3;
                int n = bounds[2 * xx + 1];
                int32_t s0 = half, s1 = half, s2 = half;
                for (int x = 0; x < n; x++) {
                    s0 += p[3 * x] * k[x];
                    s1 += p[3 * x + 1] * k[x];
                    s2 += p[3 * x + 2] * k[x];
                }
                o[3 * xx] = clip8(s0);
                o[3 * xx + 1] = clip8(s1);
                o[3 * xx + 2] = clip8(s2);
            }
        } else if (C == 1) {
            for (int xx = 0; xx < ow; xx++) {
                const int32_t *k = kk + (size_t)xx * ksize;
                const uint8_t *p = in + bounds[2 * xx];
                int n = bounds[2 * xx + 1];
                int32_t s0 = half;
                for (int x = 0; x < n; x++)
                    s0 += p[x] * k[x];
                o[xx] = clip8(s0);
            }
        } else {
            for (int xx = 0; xx < ow; xx++) {
                const int32_t *k = kk + (size_t)xx * ksize;
                const uint8_t *p = in + (size_t)bounds[2 * xx] * C;
                int n = bounds[2 * xx + 1];
                for (int c = 0; c < C; c++) {
                    int32_t s = half;
                    for (int x = 0; x < n; x++)
                        s += p[x * C + c] * k[x];
                    o[xx * C + c] = clip8(s);
                }
            }
        }
    }
}

#ifdef HAVE_AVX2_PATH
/* Vertical pass with AVX2 / AVX-512. Hand-written because the compiler's
 * version of pass_vertical (below) widens each byte to 32 bits and spends a
 * two-uop vpmulld per byte and tap, with the accumulator row in memory. Here
 * two source rows are interleaved into (row a, row b) 16-bit pairs and one
 * pmaddwd multiplies and sums two taps per 32-bit lane; the accumulators of
 * a 32- (64-) byte column strip stay in registers over all of an output
 * row's taps. The 22-bit weights are split into hi * 2048 + lo as in the
 * horizontal pass, so the sum is the scalar code's integer exactly. */

/* Most taps per output row the SIMD vertical passes take (a shrink of more
 * than 64x on that axis goes to the scalar pass). */
#define VMAX_TAPS 128

/* An output row's weights as (hi, lo) dword pairs for taps (0, 1), (2, 3),
 * ...: hi pair, lo pair, hi pair, ...; an odd last tap is paired with 0. */
static void vpairs(const int32_t *k, int n, uint32_t *wp) {
    for (int j = 0; j < n; j += 2) {
        int32_t a = k[j], b = j + 1 < n ? k[j + 1] : 0;
        int32_t al = a & 2047, bl = b & 2047;
        int32_t ah = (a - al) / 2048, bh = (b - bl) / 2048;
        wp[j] = (uint32_t)(uint16_t)ah | (uint32_t)(uint16_t)bh << 16;
        wp[j + 1] = (uint32_t)(uint16_t)al | (uint32_t)(uint16_t)bl << 16;
    }
}

/* (sum hi) * 2048 + sum lo + half, >> 22, for the four 32-bit vectors of a
 * strip, packed with unsigned saturation (clip8) back into strip order:
 * the in-lane unpacks and the in-lane packs undo each other. */
#define VFINISH(W, h, l)                                                                     \
    W##_srai_epi32(W##_add_epi32(W##_add_epi32(W##_slli_epi32(h, 11), l), half), PRECISION_BITS)

__attribute__((target("avx2"))) static void
pass_vertical_avx2(const uint8_t *src, size_t sstride, int rowlen, int oh, int ksize,
                   const int32_t *bounds, const int32_t *kk, uint8_t *dst, size_t dstride) {
    const __m256i z = _mm256_setzero_si256();
    const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    uint32_t wp[VMAX_TAPS + 1];
    for (int yy = 0; yy < oh; yy++) {
        const int32_t *k = kk + (size_t)yy * ksize;
        const int n = bounds[2 * yy + 1];
        const uint8_t *r0 = src + (size_t)bounds[2 * yy] * sstride;
        uint8_t *o = dst + (size_t)yy * dstride;
        vpairs(k, n, wp);
        for (int x0 = 0; x0 < rowlen; x0 += 32) {
            /* the last strip ends at the row's end, overlapping the one
             * before: its bytes are computed twice, identically */
            const size_t x = (size_t)(x0 + 32 <= rowlen ? x0 : rowlen - 32);
            __m256i h0 = z, h1 = z, h2 = z, h3 = z, l0 = z, l1 = z, l2 = z, l3 = z;
            for (int j = 0; j < n; j += 2) {
                const uint8_t *ra = r0 + (size_t)j * sstride + x;
                __m256i a = _mm256_loadu_si256((const __m256i *)ra);
                __m256i b = j + 1 < n ? _mm256_loadu_si256((const __m256i *)(ra + sstride)) : z;
                __m256i u0 = _mm256_unpacklo_epi8(a, b), u1 = _mm256_unpackhi_epi8(a, b);
                __m256i w0 = _mm256_unpacklo_epi8(u0, z), w1 = _mm256_unpackhi_epi8(u0, z);
                __m256i w2 = _mm256_unpacklo_epi8(u1, z), w3 = _mm256_unpackhi_epi8(u1, z);
                __m256i kh = _mm256_set1_epi32((int)wp[j]), kl = _mm256_set1_epi32((int)wp[j + 1]);
                h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(w0, kh));
                l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(w0, kl));
                h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(w1, kh));
                l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(w1, kl));
                h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(w2, kh));
                l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(w2, kl));
                h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(w3, kh));
                l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(w3, kl));
            }
            __m256i p01 = _mm256_packus_epi32(VFINISH(_mm256, h0, l0), VFINISH(_mm256, h1, l1));
            __m256i p23 = _mm256_packus_epi32(VFINISH(_mm256, h2, l2), VFINISH(_mm256, h3, l3));
            _mm256_storeu_si256((__m256i *)(o + x), _mm256_packus_epi16(p01, p23));
        }
    }
}

#define HAVE_AVX512_PATH 1
__attribute__((target("avx512f,avx512bw"))) static void
pass_vertical_avx512(const uint8_t *src, size_t sstride, int rowlen, int oh, int ksize,
                     const int32_t *bounds, const int32_t *kk, uint8_t *dst, size_t dstride) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i half = _mm512_set1_epi32(1 << (PRECISION_BITS - 1));
    uint32_t wp[VMAX_TAPS + 1];
    for (int yy = 0; yy < oh; yy++) {
        const int32_t *k = kk + (size_t)yy * ksize;
        const int n = bounds[2 * yy + 1];
        const uint8_t *r0 = src + (size_t)bounds[2 * yy] * sstride;
        uint8_t *o = dst + (size_t)yy * dstride;
        vpairs(k, n, wp);
        for (int x0 = 0; x0 < rowlen; x0 += 64) {
            const size_t x = (size_t)(x0 + 64 <= rowlen ? x0 : rowlen - 64);
            __m512i h0 = z, h1 = z, h2 = z, h3 = z, l0 = z, l1 = z, l2 = z, l3 = z;
            for (int j = 0; j < n; j += 2) {
                const uint8_t *ra = r0 + (size_t)j * sstride + x;
                __m512i a = _mm512_loadu_si512(ra);
                __m512i b = j + 1 < n ? _mm512_loadu_si512(ra + sstride) : z;
                __m512i u0 = _mm512_unpacklo_epi8(a, b), u1 = _mm512_unpackhi_epi8(a, b);
                __m512i w0 = _mm512_unpacklo_epi8(u0, z), w1 = _mm512_unpackhi_epi8(u0, z);
                __m512i w2 = _mm512_unpacklo_epi8(u1, z), w3 = _mm512_unpackhi_epi8(u1, z);
                __m512i kh = _mm512_set1_epi32((int)wp[j]), kl = _mm512_set1_epi32((int)wp[j + 1]);
                h0 = _mm512_add_epi32(h0, _mm512_madd_epi16(w0, kh));
                l0 = _mm512_add_epi32(l0, _mm512_madd_epi16(w0, kl));
                h1 = _mm512_add_epi32(h1, _mm512_madd_epi16(w1, kh));
                l1 = _mm512_add_epi32(l1, _mm512_madd_epi16(w1, kl));
                h2 = _mm512_add_epi32(h2, _mm512_madd_epi16(w2, kh));
                l2 = _mm512_add_epi32(l2, _mm512_madd_epi16(w2, kl));
                h3 = _mm512_add_epi32(h3, _mm512_madd_epi16(w3, kh));
                l3 = _mm512_add_epi32(l3, _mm512_madd_epi16(w3, kl));
            }
            __m512i p01 = _mm512_packus_epi32(VFINISH(_mm512, h0, l0), VFINISH(_mm512, h1, l1));
            __m512i p23 = _mm512_packus_epi32(VFINISH(_mm512, h2, l2), VFINISH(_mm512, h3, l3));
            _mm512_storeu_si512(o + x, _mm512_packus_epi16(p01, p23));
        }
    }
}
#endif

/* Built twice (AVX2 and baseline) and chosen at load time: the inner loop
 * is a plain multiply-add over bytes that the compiler vectorises. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("avx2", "default")))
#endif
static void pass_vertical_c(const uint8_t *src, size_t sstride, int rowlen, int oh, int ksize,
                            const int32_t *bounds, const int32_t *kk, int32_t *restrict acc,
                            uint8_t *dst, size_t dstride) {
    const int32_t half = 1 << (PRECISION_BITS - 1);
    for (int yy = 0; yy < oh; yy++) {
        const int32_t *k = kk + (size_t)yy * ksize;
        int ymin = bounds[2 * yy], n = bounds[2 * yy + 1];
        for (int i = 0; i < rowlen; i++)
            acc[i] = half;
        for (int y = 0; y < n; y++) {
            const uint8_t *restrict r = src + (size_t)(ymin + y) * sstride;
            const int32_t kv = k[y];
            for (int i = 0; i < rowlen; i++)
                acc[i] += r[i] * kv;
        }
        uint8_t *restrict o = dst + (size_t)yy * dstride;
        for (int i = 0; i < rowlen; i++)
            o[i] = clip8(acc[i]);
    }
}

static void pass_vertical(const uint8_t *src, size_t sstride, int rowlen, int oh, int ksize,
                          const int32_t *bounds, const int32_t *kk, int32_t *acc, uint8_t *dst,
                          size_t dstride) {
#ifdef HAVE_AVX2_PATH
    if (ksize <= VMAX_TAPS) {
        int level = sl_ops__simd();
        if (level >= SL_OPS_AVX512 && rowlen >= 64) {
            pass_vertical_avx512(src, sstride, rowlen, oh, ksize, bounds, kk, dst, dstride);
            return;
        }
        if (level >= SL_OPS_AVX2 && rowlen >= 32) {
            pass_vertical_avx2(src, sstride, rowlen, oh, ksize, bounds, kk, dst, dstride);
            return;
        }
    }
#endif
    pass_vertical_c(src, sstride, rowlen, oh, ksize, bounds, kk, acc, dst, dstride);
}

/* PIL's NEAREST resize: an affine map sampled at pixel centres, with the
 * source coordinate accumulated in double exactly as ImagingScaleAffine does. */
static void resample_nearest(const uint8_t *src, int sh, int sw, size_t sstride, int C,
                             const double box[4], int oh, int ow, uint8_t *dst, size_t dstride,
                             int32_t *xin) {
    double a0 = (double)((float)box[2] - (float)box[0]) / ow;
    double a4 = (double)((float)box[3] - (float)box[1]) / oh;
    double xo = (float)box[0] + a0 * 0.5;
    for (int x = 0; x < ow; x++, xo += a0) {
        int v = xo < 0.0 ? -1 : (int)xo;
        xin[x] = v < 0 || v >= sw ? -1 : v;
    }
    double yo = (float)box[1] + a4 * 0.5;
    for (int y = 0; y < oh; y++, yo += a4) {
        int yy = yo < 0.0 ? -1 : (int)yo;
        uint8_t *o = dst + (size_t)y * dstride;
        if (yy < 0 || yy >= sh) {
            memset(o, 0, (size_t)ow * C);
            continue;
        }
        const uint8_t *in = src + (size_t)yy * sstride;
        for (int x = 0; x < ow; x++) {
            if (xin[x] < 0)
                memset(o + (size_t)x * C, 0, C);
            else
                memcpy(o + (size_t)x * C, in + (size_t)xin[x] * C, C);
        }
    }
}

/* Output rows per vertical-pass call when normalizing: a block of uint8
 * rows (8 x 672 bytes at 224 px RGB) stays in L1 until normalize reads it,
 * and the pass runs over whole blocks rather than being called per row. */
#define VBLOCK 8

/* Vertical pass, then the output rows: uint8 rows into `dst`, or with
 * `norm` each block of VBLOCK rows through a small buffer (it stays in L1)
 * into the normalized float32 image, so the uint8 image never exists. */
static void vertical_out(const uint8_t *src, size_t sstride, int rowlen, int oh, int ksize,
                         const int32_t *bounds, const int32_t *kk, int32_t *acc, void *dst,
                         size_t dstride, const sl_ops__norm *norm, int C, int ow,
                         uint8_t *rowbuf) {
    if (!norm) {
        pass_vertical(src, sstride, rowlen, oh, ksize, bounds, kk, acc, dst, dstride);
        return;
    }
    for (int y0 = 0; y0 < oh; y0 += VBLOCK) {
        int n = oh - y0 < VBLOCK ? oh - y0 : VBLOCK;
        pass_vertical(src, sstride, rowlen, n, ksize, bounds + 2 * y0, kk + (size_t)y0 * ksize,
                      acc, rowbuf, (size_t)rowlen);
        sl_ops__span sp;
        sl_ops__phase_open(&sp);
        for (int y = 0; y < n; y++)
            sl_ops__norm_row(norm, rowbuf + (size_t)y * rowlen, C, ow, oh, y0 + y, dst);
        sl_ops__phase_close(&sp, SL_PHASE_NORMALIZE);
    }
    sl_ops__norm_done();
}

/* uint8 rows (`rows`, `stride` bytes apart) into the normalized image. */
static void norm_rows(const sl_ops__norm *norm, const uint8_t *rows, size_t stride, int C,
                      int ow, int oh, void *dst) {
    sl_ops__span sp;
    sl_ops__phase_open(&sp);
    for (int y = 0; y < oh; y++)
        sl_ops__norm_row(norm, rows + (size_t)y * stride, C, ow, oh, y, dst);
    sl_ops__norm_done();
    sl_ops__phase_close(&sp, SL_PHASE_NORMALIZE);
}

static int resample(const uint8_t *src, int sh, int sw, size_t sstride, int C,
                    const double box[4], const int lim[4], int oh, int ow, sl_interp interp,
                    void *dst, size_t dstride, const sl_ops__norm *norm) {
    size_t rowlen = (size_t)ow * C;
    if (interp == SL_INTERP_NEAREST) {
        size_t img = norm ? (size_t)oh * rowlen : 0;
        size_t off = ((size_t)ow * sizeof(int32_t) + 63) & ~(size_t)63;
        uint8_t *sc = sl_ops__scratch(off + img);
        if (!sc)
            return sl__oom("resize: scratch");
        resample_nearest(src, sh, sw, sstride, C, box, oh, ow, norm ? sc + off : dst,
                         norm ? rowlen : dstride, (int32_t *)sc);
        if (norm)
            norm_rows(norm, sc + off, rowlen, C, ow, oh, dst);
        return SL_OK;
    }
    float bx0 = (float)box[0], by0 = (float)box[1], bx1 = (float)box[2], by1 = (float)box[3];
    double support = interp == SL_INTERP_AREA ? 0.5 : 1.0;
    int need_h = ow != sw || bx0 != 0.0f || bx1 != (float)ow;
    int need_v = oh != sh || by0 != 0.0f || by1 != (float)oh;
    if (!need_h && !need_v) {
        if (norm) {
            norm_rows(norm, src, sstride, C, ow, oh, dst);
            return SL_OK;
        }
        for (int y = 0; y < oh; y++)
            memcpy((uint8_t *)dst + (size_t)y * dstride, src + (size_t)y * sstride, rowlen);
        return SL_OK;
    }
    int kh = axis_ksize(bx0, bx1, ow, support);
    int kv = axis_ksize(by0, by1, oh, support);
    int kmax = kh > kv ? kh : kv;
    /* Scratch layout: coefficient tables, bounds, a double row, an int32
     * accumulator row, VBLOCK uint8 output rows (norm), the SIMD horizontal
     * pass's coefficients, then the horizontally resampled rows. */
    size_t n_kk = (size_t)ow * kh + (size_t)oh * kv;
    size_t n_bounds = 2 * ((size_t)ow + oh);
    size_t off_b = n_kk * 4;
    size_t off_d = (off_b + n_bounds * 4 + 7) & ~(size_t)7;
    size_t off_acc = off_d + (size_t)kmax * 8;
    size_t off_row = (off_acc + rowlen * 4 + 63) & ~(size_t)63;
    size_t off_hq = (off_row + rowlen * VBLOCK + 63) & ~(size_t)63;
    size_t off_tmp = (off_hq + hq_bytes(C, ow, kh) + 63) & ~(size_t)63;
    int32_t *kkx, *kky, *bdx, *bdy;
    /* Bounds first, to know how many source rows the horizontal pass needs;
     * with `norm` and no vertical pass its output goes there too. */
    size_t tmp_rows = (size_t)(need_h ? lim[3] - lim[1] : 0);
    if (norm && !need_v && tmp_rows < (size_t)oh)
        tmp_rows = (size_t)oh;
    size_t total = off_tmp + tmp_rows * rowlen;
    uint8_t *s = sl_ops__scratch(total);
    if (!s)
        return sl__oom("resize: scratch");
    kkx = (int32_t *)s;
    kky = kkx + (size_t)ow * kh;
    bdx = (int32_t *)(s + off_b);
    bdy = bdx + 2 * (size_t)ow;
    double *tmpd = (double *)(s + off_d);
    int32_t *acc = (int32_t *)(s + off_acc);
    uint8_t *rowbuf = s + off_row;
    void *hq = s + off_hq;
    uint8_t *tmp = s + off_tmp;
    axis_coeffs(bx0, bx1, lim[0], lim[2], ow, kh, interp, bdx, kkx, tmpd);
    axis_coeffs(by0, by1, lim[1], lim[3], oh, kv, interp, bdy, kky, tmpd);
    if (!need_v) {
        uint8_t *o = norm ? tmp : dst;
        size_t os = norm ? rowlen : dstride;
        pass_horizontal(src, sstride, oh, sw, C, ow, kh, bdx, kkx, hq, o, os);
        if (norm)
            norm_rows(norm, tmp, rowlen, C, ow, oh, dst);
        return SL_OK;
    }
    if (!need_h) {
        vertical_out(src, sstride, (int)rowlen, oh, kv, bdy, kky, acc, dst, dstride, norm, C, ow,
                     rowbuf);
        return SL_OK;
    }
    int yfirst = bdy[0];
    int ylast = bdy[2 * (oh - 1)] + bdy[2 * (oh - 1) + 1];
    for (int y = 0; y < oh; y++)
        bdy[2 * y] -= yfirst;
    pass_horizontal(src + (size_t)yfirst * sstride, sstride, ylast - yfirst, sw, C, ow, kh, bdx, kkx,
                    hq, tmp, rowlen);
    vertical_out(tmp, rowlen, (int)rowlen, oh, kv, bdy, kky, acc, dst, dstride, norm, C, ow,
                 rowbuf);
    return SL_OK;
}

/* Timed as the resample phase, less the normalizing inside. */
int sl_ops__resample(const uint8_t *src, int sh, int sw, size_t sstride, int C,
                     const double box[4], const int lim[4], int oh, int ow, sl_interp interp,
                     void *dst, size_t dstride, const sl_ops__norm *norm) {
    sl_ops__span sp;
    sl_ops__phase_open(&sp);
    int rc = resample(src, sh, sw, sstride, C, box, lim, oh, ow, interp, dst, dstride, norm);
    sl_ops__phase_close(&sp, SL_PHASE_RESAMPLE);
    return rc;
}

static int check_size(int out_h, int out_w, const char *op) {
    if (out_h <= 0 || out_w <= 0 || out_h > (1 << 16) || out_w > (1 << 16))
        return sl__error(SL_EINVAL, "%s: bad output size %dx%d", op, out_w, out_h);
    return SL_OK;
}

int sl_image_resize_box(const sl_tensor *src, const double box[4], int out_h, int out_w,
                        sl_interp interp, sl_tensor *out) {
    SL_TRY(sl_ops__check_image(src, "resize"));
    SL_TRY(check_size(out_h, out_w, "resize"));
    if (interp != SL_INTERP_BILINEAR && interp != SL_INTERP_AREA && interp != SL_INTERP_NEAREST)
        return sl__error(SL_EINVAL, "resize: unknown interpolation %d", (int)interp);
    int sh = (int)src->shape[0], sw = (int)src->shape[1], C = (int)src->shape[2];
    if (!(box[0] >= 0 && box[1] >= 0 && box[2] <= sw && box[3] <= sh && box[0] < box[2] &&
          box[1] < box[3]))
        return sl__error(SL_EINVAL, "resize: box (%g, %g, %g, %g) outside the %dx%d image",
                         box[0], box[1], box[2], box[3], sw, sh);
    if (out == src || out->data == src->data)
        return sl__error(SL_EINVAL, "resize: output overlaps input");
    int64_t shape[3] = {out_h, out_w, C};
    int allocated;
    SL_TRY(sl_ops__out_prepare(out, SL_U8, 3, shape, "resize", &allocated));
    int lim[4] = {0, 0, sw, sh};
    int rc = sl_ops__resample(src->data, sh, sw, (size_t)sw * C, C, box, lim, out_h, out_w,
                              interp, out->data, (size_t)out_w * C, NULL);
    if (rc < 0 && allocated)
        sl_tensor_release(out);
    return rc;
}

int sl_image_resize(const sl_tensor *src, int out_h, int out_w, sl_interp interp,
                    sl_tensor *out) {
    SL_TRY(sl_ops__check_image(src, "resize"));
    double box[4] = {0, 0, (double)src->shape[1], (double)src->shape[0]};
    return sl_image_resize_box(src, box, out_h, out_w, interp, out);
}
