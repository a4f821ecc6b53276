/* test_resample_paths.c — the resampler's hand-written paths against its
 * scalar code, on the same machine: at every SIMD level the CPU has
 * (sl_ops__simd_max: AVX-512, AVX2 and SSE4.1 horizontal and vertical
 * passes) the pixels equal the scalar ones exactly, RGB and gray, over
 * shrinks and enlargements, odd widths and boxes that end at the row's last
 * pixel (the SIMD passes' bounds handling); and resampling straight into a
 * normalized float32 image (sl_ops__norm, mirrored or not, CHW or HWC, every
 * pass combination, every level) equals resample -> flip -> normalize bit
 * for bit. */
#include "core/core.h"
#include "ops/ops.h"
#include "test.h"

#include <string.h>

static uint8_t *noise(int h, int w, int c, uint64_t seed) {
    size_t n = (size_t)h * (size_t)w * (size_t)c;
    uint8_t *p = malloc(n);
    /* smooth gradients plus noise, so that rounding ties are common */
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(((i / (size_t)c) % (size_t)w) * 3 + (sl_mix64(i + seed) & 0x3f));
    return p;
}

/* One resample at every SIMD level the CPU has, against the scalar one. */
static void check_levels(const uint8_t *src, int sh, int sw, int C, const double box[4],
                         const int lim[4], int oh, int ow, sl_interp interp, const char *what) {
    size_t n = (size_t)oh * (size_t)ow * (size_t)C;
    uint8_t *ref = malloc(n), *got = malloc(n);
    const int saved = sl_ops__simd_max;
    sl_ops__simd_max = SL_OPS_SCALAR;
    ASSERT_OK(sl_ops__resample(src, sh, sw, (size_t)sw * C, C, box, lim, oh, ow, interp, ref,
                               (size_t)ow * C, NULL));
    for (int level = SL_OPS_SSE41; level <= SL_OPS_AVX512; level++) {
        sl_ops__simd_max = level;
        memset(got, 0xa5, n);
        ASSERT_OK(sl_ops__resample(src, sh, sw, (size_t)sw * C, C, box, lim, oh, ow, interp,
                                   got, (size_t)ow * C, NULL));
        for (size_t j = 0; j < n; j++)
            if (got[j] != ref[j]) {
                sl_ops__simd_max = saved;
                sl_test_fail(__FILE__, __LINE__,
                             "%s: %dx%dx%d -> %dx%d interp %d level %d byte %zu: %d != %d", what,
                             sw, sh, C, ow, oh, interp, level, j, got[j], ref[j]);
            }
    }
    sl_ops__simd_max = saved;
    free(ref);
    free(got);
}

/* Each (h, w) -> (oh, ow) with a box inside the source; the scalar result is
 * the reference for the SIMD ones (AVX-512, AVX2, SSE4.1 where the CPU has
 * them), RGB and gray, with the box's edges as the read limit and with the
 * whole image. */
SL_TEST(ops_resample__simd_passes_equal_scalar) {
    static const int cases[][8] = {
        /* sh, sw, oh, ow, box x0, y0, x1, y1 (0 = whole image) */
        {300, 400, 224, 224, 0, 0, 0, 0},     {500, 375, 224, 224, 10, 20, 370, 480},
        {90, 120, 224, 224, 3, 1, 117, 88},   {37, 41, 5, 7, 0, 0, 0, 0},
        {224, 901, 224, 224, 450, 0, 901, 224}, {64, 1200, 16, 100, 0, 0, 0, 0},
        {5, 6, 3, 1, 0, 0, 0, 0},             {1, 500, 1, 224, 0, 0, 0, 0},
        {333, 17, 224, 224, 0, 0, 17, 333},   {250, 250, 224, 224, 249, 0, 250, 250},
        {448, 448, 224, 224, 0, 0, 0, 0},     {449, 451, 223, 225, 1, 2, 451, 449},
        {100, 100, 299, 301, 0, 0, 0, 0},     {7, 1000, 3, 21, 0, 0, 0, 0},
        {1000, 7, 21, 3, 0, 0, 0, 0},         {3000, 40, 11, 40, 0, 0, 0, 0},
        {40, 3000, 40, 11, 0, 0, 0, 0},       {120, 130, 120, 61, 0, 0, 0, 0},
        {120, 130, 59, 130, 0, 0, 0, 0},      {320, 240, 224, 224, 0, 100, 240, 320},
        {320, 240, 224, 224, 200, 0, 240, 320}, {31, 33, 224, 224, 0, 0, 33, 31},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *k = cases[i];
        int sh = k[0], sw = k[1], oh = k[2], ow = k[3];
        double box[4] = {k[4], k[5], k[6] ? k[6] : sw, k[7] ? k[7] : sh};
        int edges[4] = {(int)box[0], (int)box[1], (int)box[2], (int)box[3]};
        int whole[4] = {0, 0, sw, sh};
        for (int C = 1; C <= 3; C += 2) {
            uint8_t *src = noise(sh, sw, C, i);
            for (int interp = SL_INTERP_BILINEAR; interp <= SL_INTERP_AREA; interp++) {
                check_levels(src, sh, sw, C, box, edges, oh, ow, interp, "box edges");
                check_levels(src, sh, sw, C, box, whole, oh, ow, interp, "whole image");
            }
            free(src);
        }
    }
}

/* Random sizes and fractional boxes (a crop, its size and the output size
 * drawn from a fixed seed): the SIMD levels equal the scalar code. */
SL_TEST(ops_resample__simd_random_sizes) {
    sl_rng rng;
    sl_rng_init(&rng, 7, 0, 0, 0);
    for (int t = 0; t < 120; t++) {
        int sh = 1 + (int)(sl_rng_next(&rng) % 700), sw = 1 + (int)(sl_rng_next(&rng) % 700);
        int oh = 1 + (int)(sl_rng_next(&rng) % 300), ow = 1 + (int)(sl_rng_next(&rng) % 300);
        double x0 = sl_rng_uniform(&rng) * sw * 0.5, y0 = sl_rng_uniform(&rng) * sh * 0.5;
        double x1 = x0 + (sw - x0) * (0.05 + 0.95 * sl_rng_uniform(&rng));
        double y1 = y0 + (sh - y0) * (0.05 + 0.95 * sl_rng_uniform(&rng));
        double box[4] = {x0, y0, x1, y1};
        int lim[4] = {0, 0, sw, sh};
        int C = (t & 3) ? 3 : 1;
        uint8_t *src = noise(sh, sw, C, (uint64_t)t + 100);
        check_levels(src, sh, sw, C, box, lim, oh, ow,
                     (t & 4) ? SL_INTERP_AREA : SL_INTERP_BILINEAR, "random");
        free(src);
    }
}

/* Horizontal windows of 3 to 9 taps (scales 0.6 to 3.9 onto 224 columns),
 * with crop boxes flush with the image's left and right edges and inside
 * it, read limits at the box or at the image: the SIMD horizontal passes'
 * steps (loads moved back from the row's end, one load shared by two
 * pixels' windows, more than one load per tap pair) equal the scalar code. */
SL_TEST(ops_resample__simd_window_sizes_at_edges) {
    static const double scales[] = {0.6, 1.0, 1.4, 1.9, 2.6, 3.1, 3.9};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        const int bw = (int)(224 * scales[i]), sh = 40, sw = bw + 37;
        const double x0s[3] = {0, 37, 15.5};
        for (int C = 1; C <= 3; C += 2) {
            uint8_t *src = noise(sh, sw, C, 1000 + i);
            for (int e = 0; e < 3; e++) {
                double box[4] = {x0s[e], 3, x0s[e] + bw, 35};
                int edges[4] = {(int)box[0], 3, (int)box[2] + (e == 2), 35};
                int whole[4] = {0, 0, sw, sh};
                for (int interp = SL_INTERP_BILINEAR; interp <= SL_INTERP_AREA; interp++) {
                    check_levels(src, sh, sw, C, box, edges, 17, 224, interp, "edges");
                    check_levels(src, sh, sw, C, box, whole, 17, 224, interp, "whole");
                }
            }
            free(src);
        }
    }
}

static void check_norm(int sh, int sw, int C, int oh, int ow, const double box[4], sl_interp interp,
                       sl_layout layout, int mirror) {
    uint8_t *src = noise(sh, sw, C, (uint64_t)(sh * 31 + sw));
    int lim[4] = {0, 0, sw, sh};
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    /* the unfused chain: resample, flip, normalize */
    int64_t shape[3] = {oh, ow, C};
    sl_tensor u8, want = {0};
    ASSERT_OK(sl_tensor_alloc(&u8, SL_U8, 3, shape));
    ASSERT_OK(sl_ops__resample(src, sh, sw, (size_t)sw * C, C, box, lim, oh, ow, interp, u8.data,
                               (size_t)ow * C, NULL));
    ASSERT_OK(sl_ops__normalize(&u8, mean, sd, layout, SL_F32, mirror, &want));
    /* straight into float32 */
    float lut[3][256];
    sl_ops__norm_lut(lut, C, mean, sd);
    sl_ops__norm nm = {(const float(*)[256])lut, layout, mirror};
    size_t n = (size_t)oh * (size_t)ow * (size_t)C;
    float *got = malloc(n * sizeof *got);
    const int saved = sl_ops__simd_max;
    for (int level = SL_OPS_SCALAR; level <= SL_OPS_AVX512; level++) {
        sl_ops__simd_max = level;
        memset(got, 0xff, n * sizeof *got);
        ASSERT_OK(sl_ops__resample(src, sh, sw, (size_t)sw * C, C, box, lim, oh, ow, interp, got,
                                   0, &nm));
        int same = memcmp(got, want.data, n * sizeof *got) == 0;
        sl_ops__simd_max = saved;
        if (!same)
            sl_test_fail(__FILE__, __LINE__, "%dx%dx%d -> %dx%d interp %d layout %d mirror %d "
                         "level %d differs from the chain", sw, sh, C, ow, oh, interp,
                         (int)layout, mirror, level);
    }
    free(got);
    sl_tensor_release(&want);
    sl_tensor_release(&u8);
    free(src);
}

SL_TEST(ops_resample__into_normalized_equals_chain) {
    for (int layout = 0; layout < 2; layout++) {
        sl_layout lay = layout ? SL_LAYOUT_HWC : SL_LAYOUT_CHW;
        for (int mirror = 0; mirror <= 1; mirror++) {
            for (int C = 1; C <= 3; C += 2) {
                double whole[4] = {0, 0, 120, 90}, part[4] = {7.5, 3.25, 101, 77};
                double rows[4] = {0, 0, 120, 90}; /* same width: vertical pass only */
                double cols[4] = {0, 0, 120, 90}; /* same height: horizontal only */
                check_norm(90, 120, C, 224, 224, whole, SL_INTERP_BILINEAR, lay, mirror);
                check_norm(90, 120, C, 33, 47, part, SL_INTERP_BILINEAR, lay, mirror);
                check_norm(90, 120, C, 60, 120, rows, SL_INTERP_BILINEAR, lay, mirror);
                check_norm(90, 120, C, 90, 61, cols, SL_INTERP_AREA, lay, mirror);
                check_norm(90, 120, C, 90, 120, whole, SL_INTERP_BILINEAR, lay, mirror);
                check_norm(90, 120, C, 50, 70, part, SL_INTERP_NEAREST, lay, mirror);
                /* large enough for streaming stores, odd width */
                double big[4] = {0, 0, 120, 90};
                check_norm(90, 120, C, 225, 223, big, SL_INTERP_BILINEAR, lay, mirror);
            }
        }
    }
}

/* The hand-written kernels actually run: at every SIMD level the CPU has, a
 * typical training-crop resample into a normalized float32 CHW image goes
 * through that level's passes (the counters of sl_ops__simd_calls), not
 * through a silent fall back to the scalar code, whose pixels would pass
 * every equality test above. */
SL_TEST(ops_resample__simd_kernels_are_taken) {
    const int sh = 375, sw = 500, C = 3, oh = 224, ow = 224;
    uint8_t *src = noise(sh, sw, C, 5);
    const double box[4] = {40.5, 30.25, 360.0, 290.75};
    const int lim[4] = {0, 0, sw, sh};
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    float lut[3][256];
    sl_ops__norm_lut(lut, C, mean, sd);
    sl_ops__norm nm = {(const float(*)[256])lut, SL_LAYOUT_CHW, 0};
    float *out = malloc((size_t)oh * ow * C * sizeof *out);
    const int saved = sl_ops__simd_max, have = sl_ops__simd();
    int checked = 0;
    for (int level = SL_OPS_SSE41; level <= have; level++) {
        sl_ops__simd_max = level;
        memset(sl_ops__simd_calls, 0, sizeof sl_ops__simd_calls);
        ASSERT_OK(sl_ops__resample(src, sh, sw, (size_t)sw * C, C, box, lim, oh, ow,
                                   SL_INTERP_BILINEAR, out, 0, &nm));
        sl_ops__simd_max = saved;
        ASSERT(sl_ops__simd_calls[SL_OPS_K_HPASS][level] == 1);
        if (level >= SL_OPS_AVX2) {
            ASSERT(sl_ops__simd_calls[SL_OPS_K_VPASS][level] > 0);
            int nl = level >= SL_OPS_AVX512 && !sl_ops__cpu_vbmi() ? SL_OPS_AVX2 : level;
            ASSERT(sl_ops__simd_calls[SL_OPS_K_NORM][nl] == (unsigned long)oh);
        }
        for (int k = 0; k < SL_OPS_NKERNELS; k++)
            for (int l = 0; l < 4; l++)
                if (l > level)
                    ASSERT(sl_ops__simd_calls[k][l] == 0);
        checked++;
    }
    free(out);
    free(src);
    if (!checked)
        sl_test_skip("no SIMD level (SSE4.1 or better) on this CPU: nothing to check");
}
