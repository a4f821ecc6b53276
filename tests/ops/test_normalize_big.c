/* test_normalize_big.c — normalize on outputs large enough for the streaming
 * store path (>= 128 KB float32 CHW), with odd widths (unaligned row starts
 * and tails) and the folded mirror: every value equals torchvision's
 * ((x / 255 - mean) / std) in float32, bit for bit. */
#include "core/core.h"
#include "ops/ops.h"
#include "test.h"

static void check_big(int H, int W, int mirror) {
    int64_t shape[3] = {H, W, 3};
    sl_tensor img, out = {0};
    ASSERT_OK(sl_tensor_alloc(&img, SL_U8, 3, shape));
    uint8_t *px = img.data;
    for (size_t i = 0; i < (size_t)H * (size_t)W * 3; i++)
        px[i] = (uint8_t)(sl_mix64(i * 7 + (uint64_t)W) & 0xff);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    ASSERT_OK(sl_ops__normalize(&img, mean, sd, SL_LAYOUT_CHW, SL_F32, mirror, &out));
    ASSERT_EQ(out.ndim, 3);
    ASSERT_EQ(out.shape[0], 3);
    ASSERT_EQ(out.shape[1], H);
    ASSERT_EQ(out.shape[2], W);
    ASSERT(out.nbytes >= 128 * 1024);
    const float *o = out.data;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int sx = mirror ? W - 1 - x : x;
                uint8_t v = px[((size_t)y * (size_t)W + (size_t)sx) * 3 + (size_t)c];
                float want = ((float)v / 255.0f - mean[c]) / sd[c];
                float got = o[((size_t)c * (size_t)H + (size_t)y) * (size_t)W + (size_t)x];
                if (memcmp(&got, &want, sizeof got) != 0)
                    sl_test_fail(__FILE__, __LINE__, "c%d y%d x%d: %.9g != %.9g", c, y, x,
                                 (double)got, (double)want);
            }
    sl_tensor_release(&out);
    sl_tensor_release(&img);
}

SL_TEST(ops_normalize_big__streaming_rows_exact) {
    check_big(224, 224, 0);
    check_big(224, 224, 1);
    check_big(131, 227, 0); /* odd width: rows start unaligned, tails of 1..3 */
    check_big(131, 227, 1);
    check_big(97, 341, 1);
}

SL_TEST(ops_normalize_big__into_unaligned_destination) {
    /* a caller-provided output at an address that is 4 but not 16 aligned */
    int64_t shape[3] = {120, 150, 3};
    sl_tensor img, ref = {0};
    ASSERT_OK(sl_tensor_alloc(&img, SL_U8, 3, shape));
    uint8_t *px = img.data;
    for (size_t i = 0; i < 120 * 150 * 3; i++)
        px[i] = (uint8_t)(i * 31 + 5);
    const float mean[3] = {0.5f, 0.25f, 0.125f}, sd[3] = {0.5f, 0.3f, 0.2f};
    ASSERT_OK(sl_ops__normalize(&img, mean, sd, SL_LAYOUT_CHW, SL_F32, 1, &ref));
    size_t nb = ref.nbytes;
    uint8_t *raw = sl__malloc(nb + 64);
    ASSERT(raw != NULL);
    float *dst = (float *)(void *)(raw + 4 + (16 - ((uintptr_t)raw & 15u)) % 16);
    sl_tensor out = {0};
    int64_t oshape[3] = {3, 120, 150};
    sl_tensor_view(&out, dst, SL_F32, 3, oshape);
    ASSERT_OK(sl_ops__normalize(&img, mean, sd, SL_LAYOUT_CHW, SL_F32, 1, &out));
    ASSERT(out.data == dst);
    ASSERT(memcmp(dst, ref.data, nb) == 0);
    sl__free(raw);
    sl_tensor_release(&ref);
    sl_tensor_release(&img);
}

/* Every SIMD level (AVX-512 gathers, AVX2 gathers, scalar) of normalize to
 * float32 CHW, on widths around the vector steps (8, 16), mirrored or not,
 * small (plain stores) and large (streaming), into an aligned and an
 * unaligned destination: each value is torchvision's, bit for bit. */
static void check_levels(int H, int W, int C, int mirror, int misalign) {
    int64_t shape[3] = {H, W, C};
    sl_tensor img;
    ASSERT_OK(sl_tensor_alloc(&img, SL_U8, 3, shape));
    uint8_t *px = img.data;
    for (size_t i = 0; i < (size_t)H * (size_t)W * (size_t)C; i++)
        px[i] = (uint8_t)(sl_mix64(i * 13 + (uint64_t)(W * 7 + H)) & 0xff);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    size_t n = (size_t)H * (size_t)W * (size_t)C;
    uint8_t *raw = sl__aligned_alloc(64, n * 4 + 64);
    ASSERT(raw != NULL);
    float *dst = (float *)(void *)(raw + (misalign ? 4 : 0));
    const int saved = sl_ops__simd_max;
    for (int level = SL_OPS_SCALAR; level <= SL_OPS_AVX512; level++) {
        sl_ops__simd_max = level;
        memset(raw, 0xff, n * 4 + 64);
        sl_tensor out = {0};
        int64_t oshape[3] = {C, H, W};
        sl_tensor_view(&out, dst, SL_F32, 3, oshape);
        ASSERT_OK(sl_ops__normalize(&img, mean, sd, SL_LAYOUT_CHW, SL_F32, mirror, &out));
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    int sx = mirror ? W - 1 - x : x;
                    uint8_t v = px[((size_t)y * (size_t)W + (size_t)sx) * (size_t)C + (size_t)c];
                    float want = ((float)v / 255.0f - mean[c]) / sd[c];
                    float got = dst[((size_t)c * (size_t)H + (size_t)y) * (size_t)W + (size_t)x];
                    if (memcmp(&got, &want, sizeof got) != 0) {
                        sl_ops__simd_max = saved;
                        sl_test_fail(__FILE__, __LINE__,
                                     "%dx%dx%d mirror %d level %d c%d y%d x%d: %.9g != %.9g", W,
                                     H, C, mirror, level, c, y, x, (double)got, (double)want);
                    }
                }
        /* nothing written past the end */
        for (size_t i = n * 4 + (misalign ? 4 : 0); i < n * 4 + 64; i++)
            ASSERT_EQ(raw[i], 0xff);
    }
    sl_ops__simd_max = saved;
    sl__free(raw);
    sl_tensor_release(&img);
}

SL_TEST(ops_normalize__simd_levels_exact) {
    static const int widths[] = {1, 2, 7, 8, 9, 15, 16, 17, 23, 24, 31, 33, 47, 224, 227};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        for (int mirror = 0; mirror <= 1; mirror++)
            for (int misalign = 0; misalign <= 1; misalign++) {
                check_levels(5, widths[i], 3, mirror, misalign);
                check_levels(3, widths[i], 1, mirror, misalign);
            }
    for (int mirror = 0; mirror <= 1; mirror++) {
        check_levels(224, 224, 3, mirror, 0); /* streaming stores */
        check_levels(224, 224, 3, mirror, 1);
        check_levels(151, 227, 3, mirror, 0);
    }
}
