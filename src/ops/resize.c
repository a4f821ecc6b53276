/*
 * resize.c — PIL-exact resampling (Image.resize with BILINEAR, BOX, NEAREST,
 * BICUBIC, LANCZOS, HAMMING).
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
 * pass, for 1 to 4 channels, an SSE4.1 one too, all three running one
 * precomputed plan of shuffle-and-multiply steps), chosen at run time by
 * sl_ops__simd(); they compute the scalar code's integers exactly. The scalar vertical pass runs
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

/* PIL's other filters, from their definitions: Keys' cubic with a = -0.5
 * (support 2), Lanczos with 3 lobes (support 3), Hamming-windowed sinc
 * (support 1). */
static double filter_bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0)
        x = -x;
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0)
        return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

static double sinc(double x) {
    if (x == 0.0)
        return 1.0;
    x *= M_PI;
    return sin(x) / x;
}

static double filter_lanczos(double x) {
    return (x >= -3.0 && x < 3.0) ? sinc(x) * sinc(x / 3.0) : 0.0;
}

static double filter_hamming(double x) {
    if (x < 0.0)
        x = -x;
    if (x == 0.0)
        return 1.0;
    if (x >= 1.0)
        return 0.0;
    x *= M_PI;
    return sin(x) / x * (0.54 + 0.46 * cos(x));
}

/* The filter of `interp` and its support (PIL's filter table). */
static double (*filter_of(sl_interp interp, double *support))(double) {
    switch (interp) {
    case SL_INTERP_AREA: *support = 0.5; return filter_box;
    case SL_INTERP_BICUBIC: *support = 2.0; return filter_bicubic;
    case SL_INTERP_LANCZOS: *support = 3.0; return filter_lanczos;
    case SL_INTERP_HAMMING: *support = 1.0; return filter_hamming;
    default: *support = 1.0; return filter_triangle;
    }
}

int sl_ops__interp_pil(sl_interp interp) {
    return interp == SL_INTERP_BILINEAR || interp == SL_INTERP_AREA ||
           interp == SL_INTERP_NEAREST || interp == SL_INTERP_BICUBIC ||
           interp == SL_INTERP_LANCZOS || interp == SL_INTERP_HAMMING;
}

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
    double support;
    double (*filter)(double) = filter_of(interp, &support);
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
#define HAVE_AVX2_PATH 1

/* Horizontal pass with SSE4.1 / AVX2 / AVX-512, any C of 1..4. Hand-written
 * because this pass is the largest cost after libjpeg in the training
 * chain. A row's output bytes are taken in blocks of HB = 4 (one 128-bit
 * lane of int32 sums, so no lane is wasted on RGB's 3 bytes per pixel).
 * For each block a precomputed list of steps ("plan"): one 16-byte load at
 * `base` in the source row, a byte shuffle that places, for each of the 4
 * outputs, the pixels of two of its taps as zero-extended 16-bit words, and
 * two pmaddwd with those taps' weights. PIL's weights have 22 fractional
 * bits, more than a 16-bit multiplier takes, so each weight k is split as
 * k = hi * 2048 + lo (both fit 16 bits) and the sum is rebuilt as
 * (sum p*hi) * 2048 + sum p*lo: the scalar sum's integer exactly, so the
 * pixels are identical. A block usually takes one step per tap pair; one
 * more where its outputs' windows lie too far apart for one 16-byte load
 * (strong shrinks). Loads never pass the row's end: a step near it loads
 * the row's last 16 bytes and its shuffle indices shift to match, so there
 * is no scalar tail. The plan is built once per resample, shared by all
 * rows; each level runs the same steps on 1, 2 or 4 rows per register. */
#define HB 4  /* output bytes per block */
#define HW 16 /* bytes one step loads */

typedef struct {
    int8_t shuf[16]; /* per output: tap a at word 2j, tap b at word 2j+1 */
    int16_t wh[8];   /* weights' hi halves in the same word order */
    int16_t wl[8];   /* lo halves */
    int32_t base;    /* byte offset of the load in the source row */
    int32_t pad[3];
} hstep;

/* Most steps a block can take (the plan is built at this stride, then
 * packed): a step covers an output and the rest of its
 * pixel's channels, so at most one step per pixel the block touches, for
 * each tap pair. */
static size_t hplan_cap(int C, int ow, int ksize) {
    size_t nb = ((size_t)ow * C + 4 * HB - 1) / (4 * HB) * 4;
    int cols = (HB - 1) / C + 2;
    return nb * (size_t)(cols < HB ? cols : HB) * (size_t)((ksize + 1) / 2);
}

static size_t hplan_bytes(int C, int ow, int ksize) {
    if (C < 1 || C > 4)
        return 0;
    size_t nb = ((size_t)ow * C + 4 * HB - 1) / (4 * HB) * 4;
    return hplan_cap(C, ow, ksize) * sizeof(hstep) + nb * sizeof(int32_t);
}

/* The plan for rows of sw pixels of C channels into `mem` (64-byte aligned,
 * hplan_bytes()): every block takes the same number of steps (*nsteps; the
 * blocks with fewer are padded with steps of zero weights), so that the
 * passes' loops over steps have one trip count and their branches are
 * predicted: a trip count varying from block to block cost more in
 * mispredictions than the padding does. Block q's steps are
 * st[q * nsteps ...]. 0 where the SIMD passes do not apply (C > 4, rows
 * under 16 bytes). */
static int hplan_build(int C, int sw, int ow, int ksize, const int32_t *bounds,
                       const int32_t *kk, void *mem, int *nsteps) {
    const int nout = ow * C, nb = (nout + 4 * HB - 1) / (4 * HB) * 4, rowbytes = sw * C;
    if (C < 1 || C > 4 || rowbytes < HW)
        return 0;
    const int cols = (HB - 1) / C + 2;
    const size_t bcap = (size_t)(cols < HB ? cols : HB) * (size_t)((ksize + 1) / 2);
    hstep *st = mem;
    int32_t *cnt = (int32_t *)(st + hplan_cap(C, ow, ksize));
    int smax = 0;
    int x0 = 0, c0 = 0; /* pixel and channel of the block's first output */
    for (int q = 0; q < nb; q++) {
        int nq = nout - q * HB < HB ? nout - q * HB : HB;
        nq = nq < 0 ? 0 : nq; /* blocks past the row's end pad to a group of 4 */
        hstep *bst = st + (size_t)q * bcap;
        size_t ns = 0;
        /* the block's outputs: pixel, position of tap 0, taps, weights */
        int on[HB], opos[HB], pmax = 0;
        const int32_t *ok[HB];
        for (int j = 0, x = x0, c = c0; j < nq; j++) {
            on[j] = bounds[2 * x + 1];
            opos[j] = C * bounds[2 * x] + c;
            ok[j] = kk + (size_t)x * ksize;
            pmax = (on[j] + 1) / 2 > pmax ? (on[j] + 1) / 2 : pmax;
            if (++c == C)
                c = 0, x++;
        }
        for (int k = 0; k < HB; k++)
            if (++c0 == C)
                c0 = 0, x0++;
        for (int t = 0; t < pmax; t++) {
            int j = 0;
            while (j < nq) {
                if (2 * t >= on[j]) {
                    j++;
                    continue;
                }
                if (ns == bcap)
                    return 0;
                /* the outputs from j on whose pixels one load covers (a
                 * pixel's channels lie before those of the pixel to its
                 * left when the two windows start together) */
                int mn = opos[j] + 2 * t * C, mx = mn, end = j;
                for (int e = j; e < nq; e++) {
                    if (2 * t >= on[e])
                        continue;
                    int pa = opos[e] + 2 * t * C, pb = 2 * t + 1 < on[e] ? pa + C : pa;
                    int lo = pa < mn ? pa : mn, hi = pb > mx ? pb : mx;
                    if (hi - (lo < rowbytes - HW ? lo : rowbytes - HW) >= HW)
                        break; /* the next step takes it */
                    mn = lo, mx = hi, end = e + 1;
                }
                hstep *p = bst + ns++;
                memset(p, 0, sizeof *p);
                memset(p->shuf, 0x80, sizeof p->shuf);
                p->base = mn < rowbytes - HW ? mn : rowbytes - HW;
                const int first = j;
                for (; j < end; j++) {
                    const int n = on[j];
                    if (2 * t >= n)
                        continue;
                    const int pa = opos[j] + 2 * t * C;
                    const int pb = 2 * t + 1 < n ? pa + C : pa;
                    p->shuf[4 * j] = (int8_t)(pa - p->base);
                    p->shuf[4 * j + 2] = (int8_t)(pb - p->base);
                    for (int h = 0; h < 2; h++) {
                        int32_t v = 2 * t + h < n ? ok[j][2 * t + h] : 0;
                        int32_t l = v & 2047;
                        p->wh[2 * j + h] = (int16_t)((v - l) / 2048);
                        p->wl[2 * j + h] = (int16_t)l;
                    }
                }
                if (j == first)
                    return 0; /* one output always fits: cannot happen */
            }
        }
        cnt[q] = (int32_t)ns;
        smax = (int)ns > smax ? (int)ns : smax;
    }
    /* to a stride of smax steps per block, padded (moving down only) */
    for (int q = 0; q < nb; q++) {
        hstep *to = st + (size_t)q * smax;
        memmove(to, st + (size_t)q * bcap, (size_t)cnt[q] * sizeof(hstep));
        for (int k = cnt[q]; k < smax; k++) {
            memset(to + k, 0, sizeof(hstep));
            memset(to[k].shuf, 0x80, sizeof to[k].shuf);
        }
    }
    *nsteps = smax;
    return 1;
}

/* 16 output bytes (four blocks' packed sums) into a row: a plain store, or
 * the bytes before the row's end. */
__attribute__((target("sse4.1"))) static inline void hstore(uint8_t *o, int at, int nout,
                                                             __m128i v) {
    if (at + 16 <= nout) {
        _mm_storeu_si128((__m128i *)(o + at), v);
    } else {
        uint8_t b[16];
        _mm_storeu_si128((__m128i *)b, v);
        memcpy(o + at, b, (size_t)(nout - at));
    }
}

/* The passes below are written once per register width as "row runners":
 * for a group of rows (one per 128-bit lane, two registers), every group of
 * four blocks: each block's steps (ns of them, a constant where the
 * dispatch below can make it one, so the step loop unrolls), the sums
 * finished as (sum hi) * 2048 + sum lo + half, >> 22 (PIL's rounding), the
 * four blocks packed with unsigned saturation (clip8) into 16 bytes per
 * row. Two registers share each step's shuffle and weight loads. */
#define HRUN(NAME, TGT, V, P, BC128, LOADR, STORE_ROWS, LANES)                                \
    __attribute__((target(TGT), always_inline)) static inline void NAME(                     \
        const uint8_t *const *r, int nr, const hstep *st, const int ns, int nb, int nout,    \
        uint8_t *dst, size_t dstride) {                                                      \
        const V half = P##_set1_epi32(1 << (PRECISION_BITS - 1));                            \
        for (int q0 = 0; q0 < nb; q0 += 4) {                                                 \
            V res0[4], res1[4];                                                              \
            for (int j = 0; j < 4; j++) {                                                    \
                const hstep *p = st + (size_t)(q0 + j) * ns;                                 \
                V h0 = P##_setzero_si##BC128(), l0 = half, h1 = h0, l1 = half;               \
                for (int s = 0; s < ns; s++, p++) {                                          \
                    const V m = HBCAST(p->shuf), wh = HBCAST(p->wh), wl = HBCAST(p->wl);     \
                    const size_t b = (size_t)p->base;                                        \
                    const V v0 = P##_shuffle_epi8(LOADR(0, b), m);                           \
                    const V v1 = P##_shuffle_epi8(LOADR(LANES, b), m);                       \
                    h0 = P##_add_epi32(h0, P##_madd_epi16(v0, wh));                          \
                    l0 = P##_add_epi32(l0, P##_madd_epi16(v0, wl));                          \
                    h1 = P##_add_epi32(h1, P##_madd_epi16(v1, wh));                          \
                    l1 = P##_add_epi32(l1, P##_madd_epi16(v1, wl));                          \
                }                                                                            \
                res0[j] = P##_srai_epi32(P##_add_epi32(P##_slli_epi32(h0, 11), l0),          \
                                         PRECISION_BITS);                                    \
                res1[j] = P##_srai_epi32(P##_add_epi32(P##_slli_epi32(h1, 11), l1),          \
                                         PRECISION_BITS);                                    \
            }                                                                                \
            const V p0 = P##_packus_epi16(P##_packus_epi32(res0[0], res0[1]),                \
                                          P##_packus_epi32(res0[2], res0[3]));               \
            const V p1 = P##_packus_epi16(P##_packus_epi32(res1[0], res1[1]),                \
                                          P##_packus_epi32(res1[2], res1[3]));               \
            STORE_ROWS(p0, 0);                                                               \
            STORE_ROWS(p1, LANES);                                                           \
        }                                                                                    \
    }

/* Calls RUN with the step count as a constant for the usual counts. */
#define HDISPATCH(RUN, ...)                                                                  \
    switch (ns) {                                                                            \
    case 1: RUN(__VA_ARGS__, 1, nb, nout, o, dstride); break;                                \
    case 2: RUN(__VA_ARGS__, 2, nb, nout, o, dstride); break;                                \
    case 3: RUN(__VA_ARGS__, 3, nb, nout, o, dstride); break;                                \
    case 4: RUN(__VA_ARGS__, 4, nb, nout, o, dstride); break;                                \
    default: RUN(__VA_ARGS__, ns, nb, nout, o, dstride); break;                              \
    }

/* SSE4.1: one row per register, two rows per run. */
#define HBCAST(a) _mm_load_si128((const __m128i *)(a))
#define LOADR(k, b) _mm_loadu_si128((const __m128i *)(r[k] + (b)))
#define STORE_ROWS(v, k)                                                                     \
    if ((k) < nr)                                                                            \
        hstore(dst + (size_t)(k) * dstride, HB * q0, nout, v);
HRUN(hrun_sse41, "sse4.1", __m128i, _mm, 128, LOADR, STORE_ROWS, 1)
#undef STORE_ROWS
#undef LOADR
#undef HBCAST

/* AVX2: two rows per register (one per 128-bit lane), four per run. */
#define HBCAST(a) _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(a)))
#define LOADR(k, b)                                                                          \
    _mm256_inserti128_si256(                                                                 \
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(r[k] + (b)))),              \
        _mm_loadu_si128((const __m128i *)(r[(k) + 1] + (b))), 1)
#define STORE_ROWS(v, k)                                                                     \
    do {                                                                                     \
        if ((k) < nr)                                                                        \
            hstore(dst + (size_t)(k) * dstride, HB * q0, nout, _mm256_castsi256_si128(v));  \
        if ((k) + 1 < nr)                                                                    \
            hstore(dst + (size_t)((k) + 1) * dstride, HB * q0, nout,                         \
                   _mm256_extracti128_si256(v, 1));                                          \
    } while (0)
HRUN(hrun_avx2, "avx2", __m256i, _mm256, 256, LOADR, STORE_ROWS, 2)
#undef STORE_ROWS
#undef LOADR
#undef HBCAST

/* AVX-512: four rows per register (one per 128-bit lane), eight per run. */
#define HBCAST(a) _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(a)))
#define LOADR(k, b)                                                                          \
    _mm512_inserti32x4(                                                                      \
        _mm512_inserti32x4(                                                                  \
            _mm512_inserti32x4(                                                              \
                _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r[k] + (b)))),      \
                _mm_loadu_si128((const __m128i *)(r[(k) + 1] + (b))), 1),                    \
            _mm_loadu_si128((const __m128i *)(r[(k) + 2] + (b))), 2),                        \
        _mm_loadu_si128((const __m128i *)(r[(k) + 3] + (b))), 3)
#define STORE_ROWS(v, k)                                                                     \
    do {                                                                                     \
        uint8_t *o_ = dst + (size_t)(k) * dstride;                                           \
        if ((k) < nr)                                                                        \
            hstore(o_, HB * q0, nout, _mm512_castsi512_si128(v));                            \
        if ((k) + 1 < nr)                                                                    \
            hstore(o_ + dstride, HB * q0, nout, _mm512_extracti32x4_epi32(v, 1));            \
        if ((k) + 2 < nr)                                                                    \
            hstore(o_ + 2 * dstride, HB * q0, nout, _mm512_extracti32x4_epi32(v, 2));        \
        if ((k) + 3 < nr)                                                                    \
            hstore(o_ + 3 * dstride, HB * q0, nout, _mm512_extracti32x4_epi32(v, 3));        \
    } while (0)
HRUN(hrun_avx512, "avx512f,avx512bw", __m512i, _mm512, 512, LOADR, STORE_ROWS, 4)
#undef STORE_ROWS
#undef LOADR
#undef HBCAST

/* A pass at one level: rows in runs of R (missing rows of the last run
 * read the run's first row and are not stored). */
#define HPASS(NAME, TGT, RUN, R)                                                             \
    __attribute__((target(TGT))) static void NAME(const uint8_t *src, size_t sstride,        \
                                                  int rows, int nout, const hstep *st,       \
                                                  int ns, uint8_t *dst, size_t dstride) {    \
        const int nb = (nout + 4 * HB - 1) / (4 * HB) * 4;                                   \
        for (int y = 0; y < rows; y += R) {                                                  \
            const int nr = rows - y < R ? rows - y : R;                                      \
            const uint8_t *r[R];                                                             \
            for (int k = 0; k < R; k++)                                                      \
                r[k] = src + (size_t)(y + (k < nr ? k : 0)) * sstride;                       \
            uint8_t *o = dst + (size_t)y * dstride;                                          \
            HDISPATCH(RUN, r, nr, st)                                                        \
        }                                                                                    \
    }
HPASS(hpass_sse41, "sse4.1", hrun_sse41, 2)
HPASS(hpass_avx2, "avx2", hrun_avx2, 4)
HPASS(hpass_avx512, "avx512f,avx512bw", hrun_avx512, 8)
#else
static size_t hplan_bytes(int C, int ow, int ksize) {
    (void)C, (void)ow, (void)ksize;
    return 0;
}
#endif

/* `plan` is scratch of hplan_bytes() for the SIMD passes' steps. */
static void pass_horizontal(const uint8_t *src, size_t sstride, int rows, int sw, int C, int ow,
                            int ksize, const int32_t *bounds, const int32_t *kk, void *plan,
                            uint8_t *dst, size_t dstride) {
    const int32_t half = 1 << (PRECISION_BITS - 1);
#ifdef HAVE_AVX2_PATH
    const int level = sl_ops__simd();
    const hstep *st = plan;
    int ns;
    if (level >= SL_OPS_SSE41 && hplan_build(C, sw, ow, ksize, bounds, kk, plan, &ns)) {
        if (level >= SL_OPS_AVX512)
            hpass_avx512(src, sstride, rows, ow * C, st, ns, dst, dstride);
        else if (level >= SL_OPS_AVX2)
            hpass_avx2(src, sstride, rows, ow * C, st, ns, dst, dstride);
        else
            hpass_sse41(src, sstride, rows, ow * C, st, ns, dst, dstride);
        SL_OPS__COUNT(SL_OPS_K_HPASS, level >= SL_OPS_AVX512 ? SL_OPS_AVX512 : level);
        return;
    }
#else
    (void)plan;
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

/* The pass written once per register width (W: _mm256 or _mm512, VB: its
 * bits): strips of VB/8 bytes of a row, two source rows per step. The last
 * strip ends at the row's end, overlapping the one before: its bytes are
 * computed twice, identically. */
#define VPASS(NAME, TGT, V, W, VB, LOAD, STORE)                                              \
    __attribute__((target(TGT))) static void NAME(                                           \
        const uint8_t *src, size_t sstride, int rowlen, int oh, int ksize,                   \
        const int32_t *bounds, const int32_t *kk, uint8_t *dst, size_t dstride) {            \
        const V z = W##_setzero_si##VB();                                                    \
        const V half = W##_set1_epi32(1 << (PRECISION_BITS - 1));                            \
        const int sw = VB / 8;                                                               \
        uint32_t wp[VMAX_TAPS + 1];                                                          \
        for (int yy = 0; yy < oh; yy++) {                                                    \
            const int32_t *k = kk + (size_t)yy * ksize;                                      \
            const int n = bounds[2 * yy + 1];                                                \
            const uint8_t *r0 = src + (size_t)bounds[2 * yy] * sstride;                      \
            uint8_t *o = dst + (size_t)yy * dstride;                                         \
            vpairs(k, n, wp);                                                                \
            for (int x0 = 0; x0 < rowlen; x0 += sw) {                                        \
                const size_t x = (size_t)(x0 + sw <= rowlen ? x0 : rowlen - sw);             \
                V h0 = z, h1 = z, h2 = z, h3 = z, l0 = z, l1 = z, l2 = z, l3 = z;            \
                for (int j = 0; j < n; j += 2) {                                             \
                    const uint8_t *ra = r0 + (size_t)j * sstride + x;                        \
                    V a = LOAD(ra);                                                          \
                    V b = j + 1 < n ? LOAD(ra + sstride) : z;                                \
                    V u0 = W##_unpacklo_epi8(a, b), u1 = W##_unpackhi_epi8(a, b);            \
                    V w0 = W##_unpacklo_epi8(u0, z), w1 = W##_unpackhi_epi8(u0, z);          \
                    V w2 = W##_unpacklo_epi8(u1, z), w3 = W##_unpackhi_epi8(u1, z);          \
                    V kh = W##_set1_epi32((int)wp[j]), kl = W##_set1_epi32((int)wp[j + 1]);  \
                    h0 = W##_add_epi32(h0, W##_madd_epi16(w0, kh));                          \
                    l0 = W##_add_epi32(l0, W##_madd_epi16(w0, kl));                          \
                    h1 = W##_add_epi32(h1, W##_madd_epi16(w1, kh));                          \
                    l1 = W##_add_epi32(l1, W##_madd_epi16(w1, kl));                          \
                    h2 = W##_add_epi32(h2, W##_madd_epi16(w2, kh));                          \
                    l2 = W##_add_epi32(l2, W##_madd_epi16(w2, kl));                          \
                    h3 = W##_add_epi32(h3, W##_madd_epi16(w3, kh));                          \
                    l3 = W##_add_epi32(l3, W##_madd_epi16(w3, kl));                          \
                }                                                                            \
                V p01 = W##_packus_epi32(VFINISH(W, h0, l0), VFINISH(W, h1, l1));            \
                V p23 = W##_packus_epi32(VFINISH(W, h2, l2), VFINISH(W, h3, l3));            \
                STORE(o + x, W##_packus_epi16(p01, p23));                                    \
            }                                                                                \
        }                                                                                    \
    }

#define LOAD256(p) _mm256_loadu_si256((const __m256i *)(p))
#define STORE256(p, v) _mm256_storeu_si256((__m256i *)(p), v)
VPASS(pass_vertical_avx2, "avx2", __m256i, _mm256, 256, LOAD256, STORE256)
#undef STORE256
#undef LOAD256

#define LOAD512(p) _mm512_loadu_si512(p)
#define STORE512(p, v) _mm512_storeu_si512(p, v)
VPASS(pass_vertical_avx512, "avx512f,avx512bw", __m512i, _mm512, 512, LOAD512, STORE512)
#undef STORE512
#undef LOAD512
#undef VPASS
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
            SL_OPS__COUNT(SL_OPS_K_VPASS, SL_OPS_AVX512);
            return;
        }
        if (level >= SL_OPS_AVX2 && rowlen >= 32) {
            pass_vertical_avx2(src, sstride, rowlen, oh, ksize, bounds, kk, dst, dstride);
            SL_OPS__COUNT(SL_OPS_K_VPASS, SL_OPS_AVX2);
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
    double support;
    (void)filter_of(interp, &support);
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
    size_t off_plan = (off_row + rowlen * VBLOCK + 63) & ~(size_t)63;
    size_t off_tmp = (off_plan + hplan_bytes(C, ow, kh) + 63) & ~(size_t)63;
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
    void *plan = s + off_plan;
    uint8_t *tmp = s + off_tmp;
    axis_coeffs(bx0, bx1, lim[0], lim[2], ow, kh, interp, bdx, kkx, tmpd);
    axis_coeffs(by0, by1, lim[1], lim[3], oh, kv, interp, bdy, kky, tmpd);
    if (!need_v) {
        uint8_t *o = norm ? tmp : dst;
        size_t os = norm ? rowlen : dstride;
        pass_horizontal(src, sstride, oh, sw, C, ow, kh, bdx, kkx, plan, o, os);
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
                    plan, tmp, rowlen);
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
    if (!sl_ops__interp_pil(interp))
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
