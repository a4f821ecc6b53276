/* test_tone.c — the tone operations of sl_view_adjust (tone.c: sharpness,
 * posterize, solarize, invert, autocontrast, equalize): known values worked
 * out by hand from v2's formulas, in place against a copy, strided layouts
 * and errors. Their agreement with torchvision v2 on real photos is checked
 * in tests/python/test_transforms_tv2.py. */
#include "core/core.h"
#include "ops/ops.h"
#include "ops_testdata.h"

#include <stdlib.h>
#include <string.h>


SL_TEST(ops_tone__point_operations_known_values) {
    uint8_t src[256], out[256];
    for (int i = 0; i < 256; i++)
        src[i] = (uint8_t)i;
    sl_image_view s = td_hwc(src, SL_U8, 16, 16, 1), d = td_hwc(out, SL_U8, 16, 16, 1);
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_POSTERIZE, 3));
    for (int i = 0; i < 256; i++)
        ASSERT_EQ(out[i], i & 0xe0);
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_POSTERIZE, 8));
    ASSERT_EQ(memcmp(out, src, 256), 0);
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_POSTERIZE, 0));
    for (int i = 0; i < 256; i++)
        ASSERT_EQ(out[i], 0);
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_INVERT, 0));
    for (int i = 0; i < 256; i++)
        ASSERT_EQ(out[i], 255 - i);
    /* solarize inverts from the threshold up; 127.5 splits between 127 and 128 */
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_SOLARIZE, 127.5));
    for (int i = 0; i < 256; i++)
        ASSERT_EQ(out[i], i >= 128 ? 255 - i : i);
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_SOLARIZE, 0));
    for (int i = 0; i < 256; i++)
        ASSERT_EQ(out[i], 255 - i);
    /* float32: posterize keeps floor(v * 2^bits) / 2^bits, at most 1 - 2^-bits */
    float f[4] = {0.0f, 0.3f, 0.74f, 1.0f}, g[4];
    sl_image_view fs = td_hwc(f, SL_F32, 1, 4, 1), fd = td_hwc(g, SL_F32, 1, 4, 1);
    ASSERT_OK(sl_view_adjust(&fs, &fd, SL_ADJUST_POSTERIZE, 2));
    ASSERT(g[0] == 0.0f && g[1] == 0.25f && g[2] == 0.5f && g[3] == 0.75f);
    ASSERT_OK(sl_view_adjust(&fs, &fd, SL_ADJUST_INVERT, 0));
    ASSERT(g[0] == 1.0f && g[1] == 1.0f - 0.3f && g[3] == 0.0f);
    ASSERT_OK(sl_view_adjust(&fs, &fd, SL_ADJUST_SOLARIZE, 0.5));
    ASSERT(g[0] == 0.0f && g[1] == 0.3f && g[2] == 1.0f - 0.74f && g[3] == 0.0f);
}

SL_TEST(ops_tone__autocontrast_and_equalize_known_values) {
    /* 2 channels of 510 pixels (CHW): channel 0 half 10s, half 20s; channel
     * 1 all 77 (a constant channel) */
    enum { H = 17, W = 30 };
    uint8_t src[3 * H * W], out[3 * H * W];
    for (int i = 0; i < H * W; i++) {
        src[i] = i < H * W / 2 ? 10 : 20;
        src[H * W + i] = 77;
        src[2 * H * W + i] = (uint8_t)(50 + i % 101); /* 50..150 */
    }
    sl_image_view s = td_chw(src, SL_U8, H, W, 3), d = td_chw(out, SL_U8, H, W, 3);
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_AUTOCONTRAST, 0));
    /* 10 / (10 * float32(1/255)) is 254.99998 in float32: v2 gives 254 too */
    const float s0 = 10.0f * (float)(1.0 / 255.0);
    for (int i = 0; i < H * W; i++) {
        ASSERT_EQ(out[i], src[i] == 10 ? 0 : (uint8_t)(10.0f / s0));
        ASSERT_EQ(out[H * W + i], 77); /* max == min: kept (min 0, scale 1) */
        /* (x - 50) / (100 * float(1/255)), truncated */
        float e = (float)(src[2 * H * W + i] - 50) / (100.0f * (float)(1.0 / 255.0));
        ASSERT_EQ(out[2 * H * W + i], (uint8_t)(e > 255.0f ? 255.0f : e));
    }
    /* equalize: step = (510 - 255) // 255 = 1, lut[i] = cum[i - 1]: 10 -> 0,
     * 20 -> 255; the constant channel has step 0 and is kept */
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_EQUALIZE, 0));
    for (int i = 0; i < H * W; i++) {
        ASSERT_EQ(out[i], src[i] == 10 ? 0 : 255);
        ASSERT_EQ(out[H * W + i], 77);
    }
    /* float32 equalize works on the uint8 image and scales back */
    float *fs = malloc(sizeof(float) * 3 * H * W), *fd = malloc(sizeof(float) * 3 * H * W);
    for (int i = 0; i < 3 * H * W; i++)
        fs[i] = (float)src[i] * (float)(1.0 / 255.0);
    sl_image_view fsv = td_chw(fs, SL_F32, H, W, 3), fdv = td_chw(fd, SL_F32, H, W, 3);
    ASSERT_OK(sl_view_adjust(&fsv, &fdv, SL_ADJUST_EQUALIZE, 0));
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_EQUALIZE, 0));
    for (int i = 0; i < 3 * H * W; i++)
        ASSERT(fd[i] == (float)out[i] * (float)(1.0 / 255.0));
    free(fs), free(fd);
}

SL_TEST(ops_tone__sharpness_known_values) {
    /* 3x3, one bright centre: the smoothed centre is round(130 * 5 / 13) = 50 */
    uint8_t src[9] = {0, 0, 0, 0, 130, 0, 0, 0, 0}, out[9];
    sl_image_view s = td_hwc(src, SL_U8, 3, 3, 1), d = td_hwc(out, SL_U8, 3, 3, 1);
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_SHARPNESS, 0));
    ASSERT_EQ(out[4], 50);
    for (int i = 0; i < 9; i++)
        if (i != 4)
            ASSERT_EQ(out[i], 0); /* the border is kept */
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_SHARPNESS, 2)); /* 130 + (130 - 50) */
    ASSERT_EQ(out[4], 210);
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_SHARPNESS, 5)); /* 130 + 4 * 80: clamped */
    ASSERT_EQ(out[4], 255);
    ASSERT_OK(sl_view_adjust(&s, &d, SL_ADJUST_SHARPNESS, 1));
    ASSERT_EQ(memcmp(out, src, 9), 0);
    /* float32 out of [0, 1] (an affine fill): v2 clamps the border too */
    float fl[9] = {2.0f, -1.0f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, fo[9];
    sl_image_view fs = td_hwc(fl, SL_F32, 3, 3, 1), fd = td_hwc(fo, SL_F32, 3, 3, 1);
    ASSERT_OK(sl_view_adjust(&fs, &fd, SL_ADJUST_SHARPNESS, 1));
    ASSERT(fo[0] == 1.0f && fo[1] == 0.0f && fo[4] == 0.5f);
    /* 2 rows: v2 returns the image as it is */
    uint8_t thin[6] = {1, 2, 3, 4, 5, 6}, tout[6];
    sl_image_view ts = td_hwc(thin, SL_U8, 2, 3, 1), td = td_hwc(tout, SL_U8, 2, 3, 1);
    ASSERT_OK(sl_view_adjust(&ts, &td, SL_ADJUST_SHARPNESS, 0));
    ASSERT_EQ(memcmp(thin, tout, 6), 0);
}

SL_TEST(ops_tone__in_place_equals_a_copy_in_every_layout) {
    enum { H = 9, W = 11, C = 3, N = H * W * C };
    static const sl_adjust ops[] = {SL_ADJUST_SHARPNESS, SL_ADJUST_POSTERIZE,
                                    SL_ADJUST_SOLARIZE, SL_ADJUST_INVERT,
                                    SL_ADJUST_AUTOCONTRAST, SL_ADJUST_EQUALIZE};
    uint8_t src[N], a[N], b[N];
    float fsrc[N], fa[N], fb[N];
    uint32_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 1103515245u + 12345u;
        src[i] = (uint8_t)(40 + (r >> 16) % 150);
        fsrc[i] = (float)src[i] / 255.0f;
    }
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        double f = ops[o] == SL_ADJUST_SHARPNESS ? 1.7 : ops[o] == SL_ADJUST_POSTERIZE ? 5 : 0;
        double ff = ops[o] == SL_ADJUST_SOLARIZE ? 0.5 : f;
        if (ops[o] == SL_ADJUST_SOLARIZE)
            f = 128;
        /* HWC source into a CHW copy, and the same in place in HWC */
        sl_image_view s = td_hwc(src, SL_U8, H, W, C), d = td_chw(a, SL_U8, H, W, C);
        ASSERT_OK(sl_view_adjust(&s, &d, ops[o], f));
        memcpy(b, src, N);
        sl_image_view ip = td_hwc(b, SL_U8, H, W, C);
        ASSERT_OK(sl_view_adjust(&ip, &ip, ops[o], f));
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int k = 0; k < C; k++)
                    ASSERT_EQ(a[k * H * W + y * W + x], b[(y * W + x) * C + k]);
        sl_image_view fs = td_hwc(fsrc, SL_F32, H, W, C), fd = td_chw(fa, SL_F32, H, W, C);
        ASSERT_OK(sl_view_adjust(&fs, &fd, ops[o], ff));
        memcpy(fb, fsrc, sizeof fb);
        sl_image_view fip = td_hwc(fb, SL_F32, H, W, C);
        ASSERT_OK(sl_view_adjust(&fip, &fip, ops[o], ff));
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int k = 0; k < C; k++)
                    ASSERT(fa[k * H * W + y * W + x] == fb[(y * W + x) * C + k]);
    }
}

SL_TEST(ops_tone__errors_name_the_operation) {
    uint8_t px[4 * 4 * 2] = {0};
    float fx[4 * 4] = {0};
    sl_image_view s = td_hwc(px, SL_U8, 4, 4, 1), f = td_hwc(fx, SL_F32, 4, 4, 1);
    ASSERT_RC(sl_view_adjust(&s, &s, SL_ADJUST_POSTERIZE, 9), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "posterize");
    ASSERT_RC(sl_view_adjust(&s, &s, SL_ADJUST_POSTERIZE, 2.5), SL_EINVAL);
    ASSERT_RC(sl_view_adjust(&s, &s, SL_ADJUST_SOLARIZE, 255.5), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "solarize");
    ASSERT_RC(sl_view_adjust(&f, &f, SL_ADJUST_SOLARIZE, 1.5), SL_EINVAL);
    ASSERT_RC(sl_view_adjust(&s, &s, SL_ADJUST_SHARPNESS, -0.5), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "sharpness");
    sl_image_view two = td_hwc(px, SL_U8, 4, 4, 2);
    ASSERT_RC(sl_view_adjust(&two, &two, SL_ADJUST_AUTOCONTRAST, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "autocontrast");
    ASSERT_OK(sl_view_adjust(&two, &two, SL_ADJUST_EQUALIZE, 0)); /* any channel count */
    ASSERT_RC(sl_view_adjust(&s, &f, SL_ADJUST_INVERT, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "invert");
    ASSERT_RC(sl_view_adjust(&s, &s, (sl_adjust)99, 0), SL_EINVAL);
}
