/* test_view.c — the sl_view_* kernels (sluice.transforms): known values,
 * layouts and strides, in-place use, errors and allocation failures. Their
 * agreement with torchvision v2 and PIL is checked in
 * tests/python/test_transforms*.py; these cases need no reference. */
#include "core/core.h"
#include "ops/ops.h"
#include "ops_testdata.h"


SL_TEST(ops_view__convert_flips_layouts_and_scales) {
    enum { H = 5, W = 7, C = 3 };
    uint8_t src[H * W * C], out[H * W * C];
    for (int i = 0; i < H * W * C; i++)
        src[i] = (uint8_t)(i * 37 + 11);
    sl_image_view s = td_hwc(src, SL_U8, H, W, C), d = td_chw(out, SL_U8, H, W, C);
    ASSERT_OK(sl_view_convert(&s, &d, SL_VIEW_FLIP_H | SL_VIEW_FLIP_V));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int k = 0; k < C; k++)
                ASSERT_EQ(out[k * H * W + y * W + x],
                          src[((H - 1 - y) * W + (W - 1 - x)) * C + k]);
    float f[H * W * C];
    sl_image_view fv = td_chw(f, SL_F32, H, W, C);
    ASSERT_OK(sl_view_convert(&s, &fv, SL_VIEW_SCALE));
    const float up = (float)(1.0 / 255.0);
    for (int i = 0; i < H * W; i++)
        ASSERT(f[i] == (float)src[i * C] * up);
    /* back to uint8 with v2's 255.999 factor: the same bytes */
    uint8_t back[H * W * C];
    sl_image_view bv = td_hwc(back, SL_U8, H, W, C);
    ASSERT_OK(sl_view_convert(&fv, &bv, SL_VIEW_SCALE));
    ASSERT_EQ(memcmp(back, src, sizeof src), 0);
    /* saturating plain cast */
    float odd[4] = {-3.0f, 300.0f, 12.9f, NAN};
    uint8_t ob[4];
    sl_image_view ov = td_hwc(odd, SL_F32, 1, 4, 1), obv = td_hwc(ob, SL_U8, 1, 4, 1);
    ASSERT_OK(sl_view_convert(&ov, &obv, 0));
    ASSERT_EQ(ob[0], 0);
    ASSERT_EQ(ob[1], 255);
    ASSERT_EQ(ob[2], 12);
    ASSERT_EQ(ob[3], 0);
    /* errors name what is wrong */
    sl_image_view bad = d;
    bad.w = W + 1;
    ASSERT_RC(sl_view_convert(&s, &bad, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "convert");
    bad = d;
    bad.dtype = SL_F64;
    ASSERT_RC(sl_view_convert(&s, &bad, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "float64");
    bad = d;
    bad.c = 5;
    ASSERT_RC(sl_view_convert(&s, &bad, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "channels");
}

SL_TEST(ops_view__normalize_in_place_and_from_uint8) {
    enum { N = 256 };
    uint8_t px[N];
    for (int i = 0; i < N; i++)
        px[i] = (uint8_t)i;
    float mean[1] = {0.485f}, std[1] = {0.229f};
    float a[N], b[N];
    sl_image_view s = td_hwc(px, SL_U8, 16, 16, 1), av = td_hwc(a, SL_F32, 16, 16, 1),
                  bv = td_hwc(b, SL_F32, 16, 16, 1);
    ASSERT_OK(sl_view_normalize(&s, &av, mean, std, SL_VIEW_SCALE));
    ASSERT_OK(sl_view_convert(&s, &bv, SL_VIEW_SCALE));
    ASSERT_OK(sl_view_normalize(&bv, &bv, mean, std, 0)); /* in place */
    const float up = (float)(1.0 / 255.0);
    for (int i = 0; i < N; i++) {
        float t = (float)i * up - mean[0];
        ASSERT(a[i] == t / std[0]);
        ASSERT(b[i] == a[i]);
    }
    float zero[1] = {0.0f};
    ASSERT_RC(sl_view_normalize(&bv, &bv, mean, zero, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "std[0] is 0");
    ASSERT_RC(sl_view_normalize(&bv, &s, mean, std, 0), SL_EINVAL);
}

SL_TEST(ops_view__pad_modes) {
    /* one row 1 2 3 padded by 2 left, 2 right: numpy's modes */
    uint8_t row[3] = {1, 2, 3}, out[7];
    sl_image_view s = td_hwc(row, SL_U8, 1, 3, 1), d = td_hwc(out, SL_U8, 1, 7, 1);
    static const uint8_t want[4][7] = {{9, 9, 1, 2, 3, 9, 9},
                                       {1, 1, 1, 2, 3, 3, 3},
                                       {3, 2, 1, 2, 3, 2, 1},
                                       {2, 1, 1, 2, 3, 3, 2}};
    float fill[1] = {9.0f};
    for (int m = SL_PAD_CONSTANT; m <= SL_PAD_SYMMETRIC; m++) {
        ASSERT_OK(sl_view_pad(&s, &d, 0, 2, (sl_pad_mode)m, fill));
        ASSERT_EQ(memcmp(out, want[m], 7), 0);
    }
    /* reflect needs pad < size, symmetric pad <= size */
    uint8_t wide[9];
    sl_image_view d9 = td_hwc(wide, SL_U8, 1, 9, 1);
    ASSERT_RC(sl_view_pad(&s, &d9, 0, 3, SL_PAD_REFLECT, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "reflect");
    ASSERT_OK(sl_view_pad(&s, &d9, 0, 3, SL_PAD_SYMMETRIC, NULL));
    ASSERT_RC(sl_view_pad(&s, &d9, 0, 7, SL_PAD_CONSTANT, NULL), SL_EINVAL);
}

SL_TEST(ops_view__fill_a_region) {
    float img[4 * 5 * 2] = {0};
    sl_image_view v = td_hwc(img, SL_F32, 4, 5, 2);
    sl_image_view r = v;
    r.data = img + (1 * 5 + 2) * 2; /* rows 1-2, columns 2-3 */
    r.h = 2, r.w = 2;
    float val[2] = {0.25f, -1.0f};
    ASSERT_OK(sl_view_fill(&r, val));
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 5; x++) {
            int in = y >= 1 && y <= 2 && x >= 2 && x <= 3;
            ASSERT(img[(y * 5 + x) * 2] == (in ? 0.25f : 0.0f));
            ASSERT(img[(y * 5 + x) * 2 + 1] == (in ? -1.0f : 0.0f));
        }
}

SL_TEST(ops_view__adjust_known_values) {
    /* one pixel: brightness truncates, grey is v2's weights */
    uint8_t px[3] = {200, 100, 50}, out[3], g[1];
    sl_image_view s = td_hwc(px, SL_U8, 1, 1, 3), d = td_hwc(out, SL_U8, 1, 1, 3);
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_BRIGHTNESS, 1.5f));
    ASSERT_EQ(out[0], 255);
    ASSERT_EQ(out[1], 150);
    ASSERT_EQ(out[2], 75);
    sl_image_view gv = td_hwc(g, SL_U8, 1, 1, 1);
    ASSERT_OK(sl_view_adjust(&s, &gv, SL_ADJUST_GRAY, 0.0f));
    ASSERT_EQ(g[0], (int)(200 * 0.2989f + 100 * 0.587f + 50 * 0.114f));
    /* saturation 0 and contrast 0: every channel the grey level */
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_SATURATION, 0.0f));
    ASSERT_EQ(out[0], g[0]);
    ASSERT_EQ(out[1], g[0]);
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_CONTRAST, 0.0f));
    ASSERT_EQ(out[2], g[0]);
    /* hue by 0 and by a full turn's half twice: the pixel back (in place) */
    memcpy(out, px, 3);
    ASSERT_OK(sl_view_adjust(&d, &d, SL_ADJUST_HUE, 0.0f));
    for (int k = 0; k < 3; k++)
        ASSERT(abs(out[k] - px[k]) <= 1);
    ASSERT_OK(sl_view_adjust(&d, &d, SL_ADJUST_HUE, 0.5f));
    ASSERT(out[0] < out[2]); /* orange became blue */
    ASSERT_RC(sl_view_adjust(&s, &d, SL_ADJUST_HUE, 0.6f), SL_EINVAL);
    ASSERT_RC(sl_view_adjust(&s, &d, SL_ADJUST_BRIGHTNESS, -1.0f), SL_EINVAL);
    uint8_t two[2];
    sl_image_view tv = td_hwc(two, SL_U8, 1, 1, 2);
    ASSERT_RC(sl_view_adjust(&tv, &tv, SL_ADJUST_CONTRAST, 1.0f), SL_EINVAL);
}

SL_TEST(ops_view__resize_every_path_keeps_a_constant) {
    enum { H = 40, W = 60, C = 3 };
    uint8_t *px = malloc(H * W * C);
    float *pf = malloc(H * W * C * sizeof(float));
    memset(px, 173, H * W * C);
    for (int i = 0; i < H * W * C; i++)
        pf[i] = 0.625f;
    static const int sizes[][2] = {{1, 1}, {17, 9}, {40, 60}, {97, 130}};
    uint8_t *ob = malloc(97 * 130 * C);
    float *of = malloc(97 * 130 * C * sizeof(float));
    for (int interp = SL_INTERP_BILINEAR; interp <= SL_INTERP_NEAREST_EXACT; interp++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (int aa = 0; aa <= 1; aa++)
                for (int layout = 0; layout < 2; layout++) {
                    int oh = sizes[i][0], ow = sizes[i][1];
                    sl_image_view s =
                        layout ? td_chw(px, SL_U8, H, W, C) : td_hwc(px, SL_U8, H, W, C);
                    sl_image_view d =
                        layout ? td_hwc(ob, SL_U8, oh, ow, C) : td_chw(ob, SL_U8, oh, ow, C);
                    int rc = sl_view_resize(&s, &d, (sl_interp)interp, aa);
                    int u8_ok = aa || interp == SL_INTERP_BILINEAR || interp == SL_INTERP_BICUBIC ||
                                interp >= SL_INTERP_NEAREST_TORCH || interp == SL_INTERP_NEAREST;
                    ASSERT_EQ(rc, u8_ok ? SL_OK : SL_EINVAL);
                    for (int k = 0; rc == SL_OK && k < oh * ow * C; k++)
                        ASSERT_EQ(ob[k], 173);
                    sl_image_view sf =
                        layout ? td_chw(pf, SL_F32, H, W, C) : td_hwc(pf, SL_F32, H, W, C);
                    sl_image_view df =
                        layout ? td_hwc(of, SL_F32, oh, ow, C) : td_chw(of, SL_F32, oh, ow, C);
                    rc = sl_view_resize(&sf, &df, (sl_interp)interp, aa);
                    int f_ok = interp == SL_INTERP_BILINEAR || interp == SL_INTERP_BICUBIC ||
                               interp >= SL_INTERP_NEAREST_TORCH;
                    ASSERT_EQ(rc, f_ok ? SL_OK : SL_EINVAL);
                    for (int k = 0; rc == SL_OK && k < oh * ow * C; k++)
                        ASSERT(fabsf(of[k] - 0.625f) < 1e-6f);
                }
    free(px), free(pf), free(ob), free(of);
}

SL_TEST(ops_view__nearest_follows_torchs_index_rules) {
    /* 5 -> 3: torch "nearest" takes floor(i * 5/3) = 0, 1, 3; "nearest-exact"
     * floor((i + 0.5) * 5/3) = 0, 2, 4; 3 -> 6 doubles with i >> 1 */
    uint8_t row[5] = {10, 11, 12, 13, 14}, out[6];
    sl_image_view s = td_hwc(row, SL_U8, 1, 5, 1), d = td_hwc(out, SL_U8, 1, 3, 1);
    ASSERT_OK(sl_view_resize(&s, &d, SL_INTERP_NEAREST_TORCH, 1));
    ASSERT(out[0] == 10 && out[1] == 11 && out[2] == 13);
    ASSERT_OK(sl_view_resize(&s, &d, SL_INTERP_NEAREST_EXACT, 1));
    ASSERT(out[0] == 10 && out[1] == 12 && out[2] == 14);
    sl_image_view s3 = td_hwc(row, SL_U8, 1, 3, 1), d6 = td_hwc(out, SL_U8, 1, 6, 1);
    ASSERT_OK(sl_view_resize(&s3, &d6, SL_INTERP_NEAREST_TORCH, 1));
    static const uint8_t want[6] = {10, 10, 11, 11, 12, 12};
    ASSERT_EQ(memcmp(out, want, 6), 0);
}

SL_TEST(ops_view__resize_staging_fails_cleanly_without_memory) {
    /* a CHW view of HWC memory into a CHW image: the staging path */
    enum { H = 30, W = 40, C = 3 };
    uint8_t *px = malloc(H * W * C), *ob = malloc(20 * 25 * C);
    memset(px, 9, H * W * C);
    sl_image_view s = {px, SL_U8, H, W, C, (int64_t)W * C, C, 1};
    s.sc = 1, s.sw = C; /* interleaved pixels ... */
    s.sh = -(int64_t)W * C; /* ... rows read bottom up: not the direct path */
    s.data = px + (size_t)(H - 1) * W * C;
    sl_image_view d = td_chw(ob, SL_U8, 20, 25, C);
    ASSERT_OK(sl_view_resize(&s, &d, SL_INTERP_BILINEAR, 1)); /* warms the scratch */
    sl__alloc_fail_at(1);
    ASSERT_RC(sl_view_resize(&s, &d, SL_INTERP_BILINEAR, 1), SL_ENOMEM);
    ASSERT_CONTAINS(sl_errmsg(), "resize");
    sl__alloc_fail_at(0);
    ASSERT_OK(sl_view_resize(&s, &d, SL_INTERP_BILINEAR, 1));
    for (int k = 0; k < 20 * 25 * C; k++)
        ASSERT_EQ(ob[k], 9);
    free(px), free(ob);
}

SL_TEST(ops_view__affine_identity_and_quarter_turn) {
    enum { N = 6 };
    uint8_t px[N * N], out[N * N];
    for (int i = 0; i < N * N; i++)
        px[i] = (uint8_t)(i + 1);
    sl_image_view s = td_hwc(px, SL_U8, N, N, 1), d = td_hwc(out, SL_U8, N, N, 1);
    const float id[6] = {1, 0, 0, 0, 1, 0};
    for (int interp = SL_INTERP_BILINEAR; interp <= SL_INTERP_NEAREST; interp += 2) {
        ASSERT_OK(sl_view_affine(&s, &d, id, (sl_interp)interp, NULL));
        ASSERT_EQ(memcmp(out, px, sizeof px), 0);
    }
    /* 90 degrees counter-clockwise: output (x, y) reads source (N-1-y, x) */
    const float q[6] = {0, -1, 0, 1, 0, 0};
    ASSERT_OK(sl_view_affine(&s, &d, q, SL_INTERP_NEAREST, NULL));
    for (int y = 0; y < N; y++)
        for (int x = 0; x < N; x++)
            ASSERT_EQ(out[y * N + x], px[x * N + (N - 1 - y)]);
    /* shifted right by 2: the uncovered columns take the fill */
    const float shift[6] = {1, 0, -2, 0, 1, 0};
    float fill[1] = {99.0f};
    ASSERT_OK(sl_view_affine(&s, &d, shift, SL_INTERP_NEAREST, fill));
    ASSERT_EQ(out[0], 99);
    ASSERT_EQ(out[1], 99);
    ASSERT_EQ(out[2], px[0]);
    ASSERT_RC(sl_view_affine(&s, &d, id, SL_INTERP_AREA, NULL), SL_EINVAL);
}

SL_TEST(ops_view__decode_into_views_equals_decode_then_convert) {
    size_t n;
    uint8_t *j = td_picture_jpeg(120, 90, 3, 0, &n);
    sl_decoder *dec;
    ASSERT_OK(sl_decoder_create(&dec));
    sl_tensor full = {0};
    ASSERT_OK(sl_decode(dec, j, n, SL_COLOR_RGB, &full));
    double box[4] = {0, 0, 120, 90};
    int lim[4] = {0, 0, 120, 90};
    uint8_t *hw = malloc(120 * 90 * 3), *pl = malloc(120 * 90 * 3);
    float *f = malloc(120 * 90 * 3 * sizeof(float)), *g = malloc(120 * 90 * 3 * sizeof(float));
    sl_image_view h = td_hwc(hw, SL_U8, 90, 120, 3), p = td_chw(pl, SL_U8, 90, 120, 3);
    sl_image_view fv = td_chw(f, SL_F32, 90, 120, 3), gv = td_chw(g, SL_F32, 90, 120, 3);
    ASSERT_OK(sl_view_decode(dec, j, n, box, lim, SL_INTERP_BILINEAR, NULL, NULL, 0, &h));
    ASSERT_EQ(memcmp(hw, full.data, full.nbytes), 0);
    /* planar uint8 (the staging path), mirrored */
    ASSERT_OK(sl_view_decode(dec, j, n, box, lim, SL_INTERP_BILINEAR, NULL, NULL, SL_VIEW_FLIP_H,
                             &p));
    sl_image_view fullv = td_hwc(full.data, SL_U8, 90, 120, 3);
    ASSERT_OK(sl_view_convert(&fullv, &h, SL_VIEW_FLIP_H));
    sl_image_view back = td_chw(pl, SL_U8, 90, 120, 3);
    ASSERT_OK(sl_view_convert(&back, &fullv, 0)); /* planar -> the tensor's memory */
    ASSERT_EQ(memcmp(full.data, hw, full.nbytes), 0);
    /* float32 with normalize: the table path equals normalize of the pixels */
    float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    ASSERT_OK(sl_view_decode(dec, j, n, box, lim, SL_INTERP_BILINEAR, mean, std,
                             SL_VIEW_SCALE | SL_VIEW_FLIP_H, &fv));
    sl_image_view hv = td_hwc(hw, SL_U8, 90, 120, 3);
    ASSERT_OK(sl_view_normalize(&hv, &gv, mean, std, SL_VIEW_SCALE));
    ASSERT_EQ(memcmp(f, g, 120 * 90 * 3 * sizeof(float)), 0);
    /* boxes outside the image and damaged bytes */
    double out_box[4] = {0, 0, 121, 90};
    int out_lim[4] = {0, 0, 121, 90};
    ASSERT_RC(sl_view_decode(dec, j, n, out_box, out_lim, SL_INTERP_BILINEAR, NULL, NULL, 0, &h),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "outside");
    ASSERT_RC(sl_view_decode(dec, j, n / 2, box, lim, SL_INTERP_BILINEAR, NULL, NULL, 0, &h),
              SL_EDECODE);
    ASSERT_RC(sl_view_decode(dec, j, 0, box, lim, SL_INTERP_BILINEAR, NULL, NULL, 0, &h),
              SL_EDECODE);
    /* staging without memory */
    sl__alloc_fail_at(1);
    int rc = sl_view_decode(dec, j, n, box, lim, SL_INTERP_BILINEAR, NULL, NULL, 0, &p);
    sl__alloc_fail_at(0);
    ASSERT_RC(rc, SL_ENOMEM);
    /* and a good decode right after */
    ASSERT_OK(sl_view_decode(dec, j, n, box, lim, SL_INTERP_BILINEAR, NULL, NULL, 0, &h));
    sl_tensor_release(&full);
    sl_decoder_free(dec);
    free(j), free(hw), free(pl), free(f), free(g);
}

SL_TEST(ops_view__new_filters_same_bytes_at_every_simd_level) {
    /* BICUBIC and LANCZOS have negative weights: every SIMD pass must give
     * the scalar pass's bytes (which equal PIL's: test_transforms.py) */
    enum { H = 61, W = 83 };
    uint8_t *px = td_picture(W, H, 4);
    static const int sizes[][2] = {{20, 30}, {61, 40}, {150, 83}, {97, 211}};
    for (int interp = SL_INTERP_BICUBIC; interp <= SL_INTERP_HAMMING; interp++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (int c = 1; c <= 3; c += 2) {
                int oh = sizes[i][0], ow = sizes[i][1];
                uint8_t *src = malloc((size_t)H * W * c), *ref = malloc((size_t)oh * ow * c),
                        *got = malloc((size_t)oh * ow * c);
                for (int p = 0; p < H * W; p++)
                    for (int k = 0; k < c; k++)
                        src[p * c + k] = px[p * 3 + k];
                sl_image_view s = td_hwc(src, SL_U8, H, W, c);
                sl_image_view r = td_hwc(ref, SL_U8, oh, ow, c), g = td_hwc(got, SL_U8, oh, ow, c);
                sl_ops__simd_max = SL_OPS_SCALAR;
                ASSERT_OK(sl_view_resize(&s, &r, (sl_interp)interp, 1));
                for (int lvl = SL_OPS_SSE41; lvl <= SL_OPS_AVX512; lvl++) {
                    sl_ops__simd_max = lvl;
                    ASSERT_OK(sl_view_resize(&s, &g, (sl_interp)interp, 1));
                    ASSERT_EQ(memcmp(ref, got, (size_t)oh * ow * c), 0);
                }
                sl_ops__simd_max = SL_OPS_AVX512;
                free(src), free(ref), free(got);
            }
    free(px);
}
