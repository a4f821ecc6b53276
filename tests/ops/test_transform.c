/* test_transform.c — resize, crop, flip, rotate, normalize, cast, one-hot,
 * crop boxes and the fused decode+crop+resize. Exact agreement with PIL and
 * torchvision is checked in tests/python/test_ops_reference.py; these cases
 * check properties that need no reference. */
#include "core/core.h"
#include "ops_testdata.h"

static sl_tensor image_of(uint8_t *pix, int h, int w, int c) {
    sl_tensor t;
    int64_t shape[3] = {h, w, c};
    sl_tensor_view(&t, pix, SL_U8, 3, shape);
    return t;
}

SL_TEST(ops_resize__constant_stays_constant) {
    static const int sizes[][2] = {{1, 1}, {7, 3}, {224, 224}, {1, 500}, {500, 1}, {33, 65}};
    uint8_t *pix = malloc(120 * 90 * 3);
    memset(pix, 173, 120 * 90 * 3);
    sl_tensor src = image_of(pix, 90, 120, 3);
    for (int interp = SL_INTERP_BILINEAR; interp <= SL_INTERP_NEAREST; interp++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            sl_tensor out = {0};
            ASSERT_OK(sl_image_resize(&src, sizes[i][0], sizes[i][1], interp, &out));
            ASSERT_EQ(out.shape[0], sizes[i][0]);
            ASSERT_EQ(out.shape[1], sizes[i][1]);
            for (size_t k = 0; k < out.nbytes; k++)
                ASSERT_EQ(((uint8_t *)out.data)[k], 173);
            sl_tensor_release(&out);
        }
    }
    free(pix);
}

SL_TEST(ops_resize__known_values) {
    /* 1x4 gray row [0, 100, 200, 255] halved with BILINEAR: each output
     * pixel's triangle filter (support 2) covers the whole row with weights
     * 1/8, 3/8, 3/8, 1/8 around centres 1 and 3 -> PIL gives 75 and 186. */
    uint8_t row[4] = {0, 100, 200, 255};
    sl_tensor src = image_of(row, 1, 4, 1);
    sl_tensor out = {0};
    ASSERT_OK(sl_image_resize(&src, 1, 2, SL_INTERP_BILINEAR, &out));
    /* weights for centre 1.0, support 2, window [0,4): 1-|x+0.5-1|/2 */
    double w0[4] = {0.75, 0.75, 0.25, 0}, w1[4] = {0, 0.25, 0.75, 0.75};
    double a = 0, b = 0, sa = 0, sb = 0;
    for (int i = 0; i < 4; i++) {
        a += w0[i] * row[i]; sa += w0[i];
        b += w1[i] * row[i]; sb += w1[i];
    }
    ASSERT_EQ(((uint8_t *)out.data)[0], (int)(a / sa + 0.5));
    ASSERT_EQ(((uint8_t *)out.data)[1], (int)(b / sb + 0.5));
    sl_tensor_release(&out);
    /* BOX halving averages pairs */
    ASSERT_OK(sl_image_resize(&src, 1, 2, SL_INTERP_AREA, &out));
    ASSERT_EQ(((uint8_t *)out.data)[0], 50);
    ASSERT_EQ(((uint8_t *)out.data)[1], 228); /* 227.5 rounds up */
    sl_tensor_release(&out);
    /* same size: a copy */
    ASSERT_OK(sl_image_resize(&src, 1, 4, SL_INTERP_BILINEAR, &out));
    ASSERT_EQ(memcmp(out.data, row, 4), 0);
    sl_tensor_release(&out);
}

SL_TEST(ops_resize__box_and_bad_args) {
    uint8_t *pix = td_picture(64, 48, 1);
    sl_tensor src = image_of(pix, 48, 64, 3);
    /* resize_box over an integer box equals crop-then-resize far from the box
     * edges (PIL reads outside the box there; crop does not) */
    sl_tensor a = {0}, c = {0}, b = {0};
    double box[4] = {8, 4, 56, 44};
    ASSERT_OK(sl_image_resize_box(&src, box, 40, 48, SL_INTERP_BILINEAR, &a));
    sl_box cb = {4, 8, 40, 48};
    ASSERT_OK(sl_image_crop(&src, &cb, &c));
    ASSERT_OK(sl_image_resize(&c, 40, 48, SL_INTERP_BILINEAR, &b));
    ASSERT_EQ(a.nbytes, b.nbytes);
    for (int y = 2; y < 38; y++)
        ASSERT_EQ(memcmp((uint8_t *)a.data + (y * 48 + 2) * 3, (uint8_t *)b.data + (y * 48 + 2) * 3,
                         44 * 3), 0);
    sl_tensor_release(&a);
    sl_tensor_release(&b);
    sl_tensor_release(&c);
    double bad[4] = {-1, 0, 10, 10};
    ASSERT_RC(sl_image_resize_box(&src, bad, 4, 4, SL_INTERP_BILINEAR, &a), SL_EINVAL);
    ASSERT_RC(sl_image_resize(&src, 0, 4, SL_INTERP_BILINEAR, &a), SL_EINVAL);
    ASSERT_RC(sl_image_resize(&src, 4, 4, 42, &a), SL_EINVAL);
    sl_tensor notimg = {0};
    ASSERT_RC(sl_image_resize(&notimg, 4, 4, SL_INTERP_BILINEAR, &a), SL_EINVAL);
    /* preallocated destination: no allocation once the scratch is warm */
    uint8_t *dst = malloc(20 * 30 * 3);
    int64_t shape[1] = {20 * 30 * 3};
    sl_tensor d;
    sl_tensor_view(&d, dst, SL_U8, 1, shape);
    ASSERT_OK(sl_image_resize(&src, 20, 30, SL_INTERP_BILINEAR, &d));
    sl_tensor_view(&d, dst, SL_U8, 1, shape);
    sl__alloc_fail_at(0);
    ASSERT_OK(sl_image_resize(&src, 20, 30, SL_INTERP_BILINEAR, &d));
    ASSERT_EQ(sl__alloc_count(), 0);
    ASSERT_EQ(d.shape[0], 20);
    ASSERT_EQ(d.shape[1], 30);
    d.nbytes = 10;
    ASSERT_RC(sl_image_resize(&src, 20, 30, SL_INTERP_BILINEAR, &d), SL_EINVAL);
    free(dst);
    free(pix);
}

SL_TEST(ops_crop__values_and_padding) {
    uint8_t pix[4 * 5];
    for (int i = 0; i < 20; i++)
        pix[i] = (uint8_t)(i + 1);
    sl_tensor src = image_of(pix, 4, 5, 1);
    sl_tensor out = {0};
    sl_box b = {1, 2, 2, 3};
    ASSERT_OK(sl_image_crop(&src, &b, &out));
    uint8_t want[6] = {8, 9, 10, 13, 14, 15};
    ASSERT_EQ(memcmp(out.data, want, 6), 0);
    sl_tensor_release(&out);
    /* a box larger than the image: zero padding around it */
    sl_box big = {-1, -1, 6, 7};
    ASSERT_OK(sl_image_crop(&src, &big, &out));
    const uint8_t *o = out.data;
    ASSERT_EQ(o[0], 0);
    ASSERT_EQ(o[1 * 7 + 1], 1);
    ASSERT_EQ(o[4 * 7 + 5], 20);
    ASSERT_EQ(o[5 * 7 + 6], 0);
    sl_tensor_release(&out);
    sl_box empty = {0, 0, 0, 3};
    ASSERT_RC(sl_image_crop(&src, &empty, &out), SL_EINVAL);
    sl_box outside = {10, 10, 2, 2};
    ASSERT_OK(sl_image_crop(&src, &outside, &out));
    ASSERT_EQ(((uint8_t *)out.data)[3], 0);
    sl_tensor_release(&out);
}

SL_TEST(ops_flip__mirror_twice_is_identity) {
    uint8_t *pix = td_picture(13, 7, 2);
    uint8_t *copy = malloc(13 * 7 * 3);
    memcpy(copy, pix, 13 * 7 * 3);
    sl_tensor src = image_of(pix, 7, 13, 3);
    sl_tensor out = {0};
    ASSERT_OK(sl_image_flip(&src, &out));
    for (int y = 0; y < 7; y++)
        for (int x = 0; x < 13; x++)
            ASSERT_EQ(memcmp((uint8_t *)out.data + (y * 13 + x) * 3, pix + (y * 13 + 12 - x) * 3, 3), 0);
    ASSERT_OK(sl_image_flip(&src, &src)); /* in place */
    ASSERT_EQ(memcmp(src.data, out.data, out.nbytes), 0);
    ASSERT_OK(sl_image_flip(&src, &src));
    ASSERT_EQ(memcmp(src.data, copy, out.nbytes), 0);
    sl_tensor_release(&out);
    uint8_t one = 9;
    sl_tensor s1 = image_of(&one, 1, 1, 1);
    ASSERT_OK(sl_image_flip(&s1, &s1));
    ASSERT_EQ(one, 9);
    free(copy);
    free(pix);
}

SL_TEST(ops_rotate__angles_and_fill) {
    uint8_t *pix = td_picture(21, 21, 3);
    sl_tensor src = image_of(pix, 21, 21, 3);
    sl_tensor out = {0};
    ASSERT_OK(sl_image_rotate(&src, 0.0, 0, &out));
    ASSERT_EQ(memcmp(out.data, pix, out.nbytes), 0);
    sl_tensor_release(&out);
    ASSERT_OK(sl_image_rotate(&src, 360.0, 0, &out));
    ASSERT_EQ(memcmp(out.data, pix, out.nbytes), 0);
    sl_tensor_release(&out);
    /* 180 degrees maps pixel centres onto pixel centres: an exact reversal */
    ASSERT_OK(sl_image_rotate(&src, 180.0, 0, &out));
    for (int i = 0; i < 21 * 21; i++)
        ASSERT_EQ(memcmp((uint8_t *)out.data + 3 * i, pix + 3 * (21 * 21 - 1 - i), 3), 0);
    sl_tensor_release(&out);
    /* 90 degrees counter-clockwise on a square: top row becomes left column */
    ASSERT_OK(sl_image_rotate(&src, 90.0, 0, &out));
    for (int x = 0; x < 21; x++)
        ASSERT_EQ(memcmp((uint8_t *)out.data + ((20 - x) * 21) * 3, pix + x * 3, 3), 0);
    sl_tensor_release(&out);
    /* 45 degrees: corners are uncovered and get the fill value */
    ASSERT_OK(sl_image_rotate(&src, 45.0, 77, &out));
    ASSERT_EQ(((uint8_t *)out.data)[0], 77);
    ASSERT_EQ(((uint8_t *)out.data)[out.nbytes - 1], 77);
    sl_tensor_release(&out);
    ASSERT_RC(sl_image_rotate(&src, NAN, 0, &out), SL_EINVAL);
    free(pix);
}

SL_TEST(ops_normalize__values_layouts_dtypes) {
    uint8_t pix[2 * 3 * 3];
    for (int i = 0; i < 18; i++)
        pix[i] = (uint8_t)(i * 14);
    sl_tensor src = image_of(pix, 2, 3, 3);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    sl_tensor out = {0};
    ASSERT_OK(sl_image_normalize(&src, mean, sd, SL_LAYOUT_CHW, SL_F32, &out));
    ASSERT_EQ(out.shape[0], 3);
    ASSERT_EQ(out.shape[1], 2);
    ASSERT_EQ(out.shape[2], 3);
    const float *f = out.data;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 6; i++) {
            float want = ((float)pix[i * 3 + c] / 255.0f - mean[c]) / sd[c];
            ASSERT(f[c * 6 + i] == want);
        }
    sl_tensor_release(&out);
    ASSERT_OK(sl_image_normalize(&src, mean, sd, SL_LAYOUT_HWC, SL_F32, &out));
    f = out.data;
    ASSERT(f[4] == ((float)pix[4] / 255.0f - mean[1]) / sd[1]);
    sl_tensor_release(&out);
    /* float16: 0 -> 0x0000, 255 with mean 0 std 1 -> 1.0 = 0x3c00 */
    uint8_t two[2] = {0, 255};
    sl_tensor s2 = image_of(two, 1, 2, 1);
    ASSERT_OK(sl_image_normalize(&s2, NULL, NULL, SL_LAYOUT_CHW, SL_F16, &out));
    ASSERT_EQ(((uint16_t *)out.data)[0], 0x0000);
    ASSERT_EQ(((uint16_t *)out.data)[1], 0x3c00);
    sl_tensor_release(&out);
    /* uint8 with mean 0, std 1: a pure layout change */
    ASSERT_OK(sl_image_normalize(&src, NULL, NULL, SL_LAYOUT_CHW, SL_U8, &out));
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 6; i++)
            ASSERT_EQ(((uint8_t *)out.data)[c * 6 + i], pix[i * 3 + c]);
    sl_tensor_release(&out);
    /* write straight into slot 1 of a batch of 2 */
    float *batch = calloc(2 * 3 * 2 * 3, sizeof(float));
    sl_tensor slot;
    int64_t n = 3 * 2 * 3 * 4;
    sl_tensor_view(&slot, batch + 18, SL_U8, 1, &n);
    sl__alloc_fail_at(0);
    ASSERT_OK(sl_image_normalize(&src, mean, sd, SL_LAYOUT_CHW, SL_F32, &slot));
    ASSERT_EQ(sl__alloc_count(), 0);
    ASSERT(batch[17] == 0.0f);
    ASSERT(batch[18] == ((float)pix[0] / 255.0f - mean[0]) / sd[0]);
    free(batch);
    const float zero[3] = {1, 0, 1};
    ASSERT_RC(sl_image_normalize(&src, mean, zero, SL_LAYOUT_CHW, SL_F32, &out), SL_EINVAL);
    ASSERT_RC(sl_image_normalize(&src, mean, sd, SL_LAYOUT_CHW, SL_I32, &out), SL_EINVAL);
}

SL_TEST(ops_normalize__cast_and_one_hot) {
    float vals[5] = {-3.6f, 0.4f, 1.5f, 254.6f, 1000.0f};
    int64_t n = 5;
    sl_tensor src, out = {0};
    sl_tensor_view(&src, vals, SL_F32, 1, &n);
    ASSERT_OK(sl_tensor_cast(&src, SL_U8, &out));
    const uint8_t want[5] = {0, 0, 2, 255, 255};
    ASSERT_EQ(memcmp(out.data, want, 5), 0);
    sl_tensor back = {0};
    ASSERT_OK(sl_tensor_cast(&out, SL_F32, &back));
    ASSERT(((float *)back.data)[3] == 255.0f);
    sl_tensor_release(&back);
    ASSERT_OK(sl_tensor_cast(&src, SL_F16, &back));
    ASSERT_EQ(((uint16_t *)back.data)[2], 0x3e00); /* 1.5 */
    sl_tensor h = back;
    sl_tensor d = {0};
    ASSERT_OK(sl_tensor_cast(&h, SL_F64, &d));
    ASSERT(((double *)d.data)[2] == 1.5);
    sl_tensor_release(&d);
    sl_tensor_release(&back);
    sl_tensor_release(&out);
    ASSERT_RC(sl_tensor_cast(&src, SL_BOOL, &out), SL_EINVAL);
    ASSERT_OK(sl_one_hot(3, 5, SL_F32, &out));
    const float *f = out.data;
    ASSERT(f[0] == 0 && f[3] == 1 && f[4] == 0);
    ASSERT_EQ(out.shape[0], 5);
    sl_tensor_release(&out);
    ASSERT_RC(sl_one_hot(5, 5, SL_F32, &out), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "label 5");
    ASSERT_RC(sl_one_hot(-1, 5, SL_I64, &out), SL_EINVAL);
}

SL_TEST(ops_rrc__boxes) {
    const double scale[2] = {0.08, 1.0}, ratio[2] = {3.0 / 4, 4.0 / 3};
    for (uint64_t i = 0; i < 500; i++) {
        sl_rng r1, r2;
        sl_rng_init(&r1, 7, 0, i, 1);
        r2 = r1;
        sl_box a, b;
        int H = 100 + (int)(i % 300), W = 50 + (int)(i * 7 % 500);
        ASSERT_OK(sl_rrc_box(H, W, scale, ratio, &r1, &a));
        ASSERT_OK(sl_rrc_box(H, W, scale, ratio, &r2, &b));
        ASSERT_EQ(memcmp(&a, &b, sizeof a), 0); /* same key, same box */
        ASSERT(a.h > 0 && a.w > 0 && a.y >= 0 && a.x >= 0);
        ASSERT(a.y + a.h <= H && a.x + a.w <= W);
    }
    /* a 1x500 strip never fits the ratio: centre-crop fallback, ratio clamped */
    sl_rng r;
    sl_rng_init(&r, 1, 0, 0, 0);
    sl_box b;
    ASSERT_OK(sl_rrc_box(1, 500, scale, ratio, &r, &b));
    ASSERT_EQ(b.h, 1);
    ASSERT_EQ(b.w, 1); /* round(1 * 4/3) */
    ASSERT_EQ(b.y, 0);
    ASSERT_EQ(b.x, 249);
    /* explicit draws: u = 0.5 for area and ratio on a 100x100 image:
     * area fraction 0.54, ratio exp(0) = 1 -> w = h = round(sqrt(5400)) = 73 */
    double draws[40];
    for (int i = 0; i < 40; i++)
        draws[i] = 0.5;
    ASSERT_OK(sl_rrc_box_draws(100, 100, scale, ratio, draws, &b));
    ASSERT_EQ(b.w, 73);
    ASSERT_EQ(b.h, 73);
    ASSERT_EQ(b.y, 14); /* floor(0.5 * 28) */
    const double bad[2] = {0.5, 0.1};
    ASSERT_RC(sl_rrc_box(10, 10, bad, ratio, &r, &b), SL_EINVAL);
    ASSERT_RC(sl_rrc_box(0, 10, scale, ratio, &r, &b), SL_EINVAL);
    /* torchvision Resize(256) and CenterCrop(224) rules */
    int oh, ow;
    sl_resize_shorter_shape(375, 500, 256, &oh, &ow);
    ASSERT_EQ(oh, 256);
    ASSERT_EQ(ow, 341); /* int(256 * 500 / 375) = int(341.33) */
    sl_resize_shorter_shape(500, 333, 256, &oh, &ow);
    ASSERT_EQ(ow, 256);
    ASSERT_EQ(oh, 384); /* int(384.38) */
    sl_center_crop_box(256, 341, 224, 224, &b);
    ASSERT_EQ(b.y, 16);
    ASSERT_EQ(b.x, 58); /* round(58.5) = 58, half to even */
    sl_center_crop_box(100, 100, 224, 224, &b);
    ASSERT_EQ(b.y, -62);
}

SL_TEST(ops_fused__matches_decode_crop_resize) {
    int W = 400, H = 300;
    size_t n;
    uint8_t *j = td_picture_jpeg(W, H, 9, 0, &n);
    sl_decoder *d = NULL;
    ASSERT_OK(sl_decoder_create(&d));
    sl_tensor full = {0};
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_RGB, &full));
    /* whole image at scale 8/8: identical to decode + resize */
    sl_tensor a = {0}, b = {0}, c = {0};
    ASSERT_OK(sl_decode_crop_resize(d, j, n, SL_COLOR_RGB, NULL, 290, 390, SL_INTERP_BILINEAR, &a));
    ASSERT_OK(sl_image_resize(&full, 290, 390, SL_INTERP_BILINEAR, &b));
    ASSERT_EQ(memcmp(a.data, b.data, a.nbytes), 0);
    sl_tensor_release(&a);
    sl_tensor_release(&b);
    /* crops that allow DCT scaling: mean |diff| <= 2 levels (the stated
     * tolerance), max <= 40 (edges of thin texture) */
    const sl_box boxes[] = {{0, 0, 300, 400}, {17, 33, 200, 251}, {100, 200, 150, 199},
                            {5, 3, 60, 60}, {299, 0, 1, 400}};
    const int outs[][2] = {{56, 56}, {64, 80}, {32, 32}, {100, 100}, {1, 50}};
    for (size_t i = 0; i < sizeof boxes / sizeof boxes[0]; i++) {
        for (int color = 1; color <= 3; color += 2) {
            sl_tensor g = {0}, *ref = &full;
            if (color == 1) {
                ASSERT_OK(sl_decode(d, j, n, SL_COLOR_GRAY, &g));
                ref = &g;
            }
            ASSERT_OK(sl_decode_crop_resize(d, j, n, (sl_color)color, &boxes[i], outs[i][0],
                                            outs[i][1], SL_INTERP_BILINEAR, &a));
            ASSERT_OK(sl_image_crop(ref, &boxes[i], &c));
            ASSERT_OK(sl_image_resize(&c, outs[i][0], outs[i][1], SL_INTERP_BILINEAR, &b));
            int maxd;
            double mad = td_mad(a.data, b.data, a.nbytes, &maxd);
            if (!(mad <= 2.0 && maxd <= 40))
                sl_test_fail(__FILE__, __LINE__, "box %zu colour %d: mean %.3f max %d", i,
                             color, mad, maxd);
            sl_tensor_release(&a);
            sl_tensor_release(&b);
            sl_tensor_release(&c);
            sl_tensor_release(&g);
        }
    }
    sl_box outside = {250, 0, 60, 10};
    ASSERT_RC(sl_decode_crop_resize(d, j, n, SL_COLOR_RGB, &outside, 8, 8, SL_INTERP_BILINEAR, &a),
              SL_EINVAL);
    /* PNG goes through the same entry point */
    uint8_t *pix = td_picture(40, 30, 4);
    uint8_t *png = td_png(pix, 40, 30, 2, 8, NULL, 0, &n);
    sl_tensor src = image_of(pix, 30, 40, 3);
    sl_box pb = {3, 5, 20, 30};
    ASSERT_OK(sl_decode_crop_resize(d, png, n, SL_COLOR_RGB, &pb, 10, 15, SL_INTERP_BILINEAR, &a));
    ASSERT_OK(sl_image_crop(&src, &pb, &c));
    ASSERT_OK(sl_image_resize(&c, 10, 15, SL_INTERP_BILINEAR, &b));
    ASSERT_EQ(memcmp(a.data, b.data, a.nbytes), 0);
    sl_tensor_release(&a);
    sl_tensor_release(&b);
    sl_tensor_release(&c);
    free(png);
    free(pix);
    sl_tensor_release(&full);
    sl_decoder_free(d);
    free(j);
}
