/* test_crop_resize.c — GPU decode's crop + resize + flip + normalize
 * (crop_resize.cu), whose arithmetic is crop_resize_math.h:
 *  - its CPU reference (sl_dev__crop_resize_host, the same inline functions
 *    the kernel evaluates) against the CPU path's PIL-exact resample +
 *    normalize (sl_ops__resample straight into float32, mirrored or not) on
 *    the placements the CPU ops use: random_resized_crop boxes (integer box,
 *    reads bounded by the box) shrinking and enlarging, resize + center_crop
 *    (fractional box, reads bounded by the image). Stated tolerance: no
 *    value off by more than one uint8 step (1 / (255 * std) after
 *    normalize), and at most 2% of the values off at all (the figure is
 *    printed);
 *  - the host backend runs it on a stream in order;
 *  - on a GPU only: the kernel against the reference (expected equal: the
 *    kernel is built without fused multiply-add). */
#include "core/core.h"
#include "device/device.h"
#include "ops/ops.h"
#include "test.h"
#include "device_util.h"

#include <dlfcn.h>
#include <math.h>
#include <string.h>

static uint8_t *photoish(int h, int w, uint64_t seed) {
    size_t n = (size_t)h * (size_t)w * 3;
    uint8_t *p = malloc(n);
    /* gradients, an edge and noise: ties and sharp steps both occur */
    for (size_t i = 0; i < n; i++) {
        size_t px = i / 3, x = px % (size_t)w, y = px / (size_t)w;
        int v = (int)((x * 5 + y * 3 + (i % 3) * 40) % 200) + (int)(sl_mix64(i + seed) & 0x1f);
        if (x * 3 > (size_t)w * 2)
            v = 255 - v;
        p[i] = (uint8_t)(v > 255 ? 255 : v);
    }
    return p;
}

typedef struct placement {
    const char *what;
    int sh, sw;
    double box[4];
    int lim[4];
    int oh, ow;
} placement;

static const float MEAN[3] = {0.485f, 0.456f, 0.406f}, STD[3] = {0.229f, 0.224f, 0.225f};

/* random_resized_crop: the box the CPU op draws (sl_rrc_box), read only
 * inside itself. */
static placement rrc(const char *what, int sh, int sw, uint64_t seed, int oh, int ow) {
    const double scale[2] = {0.08, 1.0}, ratio[2] = {3.0 / 4, 4.0 / 3};
    sl_rng rng;
    sl_rng_init(&rng, seed, 0, 0, 0);
    sl_box b;
    if (sl_rrc_box(sh, sw, scale, ratio, &rng, &b) != SL_OK)
        sl_test_fail(__FILE__, __LINE__, "sl_rrc_box: %s", sl_errmsg());
    placement p = {what, sh, sw, {b.x, b.y, (double)b.x + b.w, (double)b.y + b.h},
                   {b.x, b.y, b.x + b.w, b.y + b.h}, oh, ow};
    return p;
}

/* resize (shorter side) + center_crop: the crop as a box of the original,
 * reads anywhere in the image (decode_resize_apply's fused placement). */
static placement resize_crop(const char *what, int sh, int sw, int size, int crop) {
    int rh, rw;
    sl_resize_shorter_shape(sh, sw, size, &rh, &rw);
    sl_box c;
    sl_center_crop_box(rh, rw, crop, crop, &c);
    double fx = (double)sw / rw, fy = (double)sh / rh;
    placement p = {what, sh, sw, {c.x * fx, c.y * fy, (c.x + c.w) * fx, (c.y + c.h) * fy},
                   {0, 0, sw, sh}, crop, crop};
    return p;
}

/* The crop of placement p from src (H x W x 3, packed rows) into dst. */
static sl_dev_crop crop_args(float *dst, const void *src, const placement *p, int flip) {
    sl_dev_crop a = {.dst = dst, .src = src, .pitch = (size_t)p->sw * 3, .flip = flip,
                     .oh = p->oh, .ow = p->ow};
    for (int k = 0; k < 4; k++) {
        a.box[k] = (float)p->box[k];
        a.lim[k] = p->lim[k];
    }
    memcpy(a.mean, MEAN, sizeof MEAN);
    memcpy(a.std, STD, sizeof STD);
    return a;
}

static float *reference(const uint8_t *src, const placement *p, int flip) {
    size_t n = (size_t)3 * p->oh * p->ow;
    float *out = malloc(n * sizeof *out);
    sl_dev_crop a = crop_args(out, src, p, flip);
    sl_dev__crop_resize_host(&a);
    return out;
}

/* Compare two CHW float32 images: the worst difference in uint8 steps and
 * the count of values that differ at all. */
static void compare(const float *got, const float *want, int oh, int ow, double *worst_steps,
                    size_t *ndiff) {
    size_t plane = (size_t)oh * (size_t)ow;
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < plane; i++) {
            double d = fabs((double)got[c * plane + i] - (double)want[c * plane + i]);
            double steps = d * 255.0 * STD[c];
            if (steps > *worst_steps)
                *worst_steps = steps;
            *ndiff += d != 0.0;
        }
}

#define NPLACE 7
static void placements(placement out[NPLACE]) {
    out[0] = rrc("rrc 400x300 -> 64x64", 300, 400, 1, 64, 64);
    out[1] = rrc("rrc 640x480 -> 224x224", 480, 640, 7, 224, 224);
    out[2] = rrc("rrc 80x60 -> 97x71 (enlarge)", 60, 80, 3, 97, 71);
    out[3] = resize_crop("resize 64 + center_crop 56 of 500x333", 333, 500, 64, 56);
    out[4] = resize_crop("resize 256 + center_crop 224 of 375x500", 500, 375, 256, 224);
    out[5] = resize_crop("resize 40 + center_crop 32 of 17x29 (enlarge)", 29, 17, 40, 32);
    placement same = {"no resize 33x21", 21, 33, {0, 0, 33, 21}, {0, 0, 33, 21}, 21, 33};
    out[6] = same;
}

SL_TEST(crop_resize__reference_within_one_step_of_cpu_resample) {
    placement ps[NPLACE];
    placements(ps);
    float lut[3][256];
    sl_ops__norm_lut(lut, 3, MEAN, STD);
    size_t total = 0, ndiff = 0;
    double worst = 0;
    for (int i = 0; i < NPLACE; i++) {
        const placement *p = &ps[i];
        uint8_t *src = photoish(p->sh, p->sw, (uint64_t)i);
        for (int flip = 0; flip < 2; flip++) {
            size_t n = (size_t)3 * p->oh * p->ow;
            float *want = malloc(n * sizeof *want);
            sl_ops__norm nm = {(const float(*)[256])lut, SL_LAYOUT_CHW, flip};
            ASSERT_OK(sl_ops__resample(src, p->sh, p->sw, (size_t)p->sw * 3, 3, p->box, p->lim,
                                       p->oh, p->ow, SL_INTERP_BILINEAR, want, 0, &nm));
            float *got = reference(src, p, flip);
            double w = 0;
            size_t nd = 0;
            compare(got, want, p->oh, p->ow, &w, &nd);
            printf("  %s flip %d: %zu of %zu values differ, worst %.3f uint8 steps\n", p->what,
                   flip, nd, n, w);
            fflush(stdout);
            if (w > 1.001)
                sl_test_fail(__FILE__, __LINE__, "%s flip %d: a value %.3f uint8 steps off the "
                             "CPU resample (tolerance 1)", p->what, flip, w);
            worst = w > worst ? w : worst;
            total += n;
            ndiff += nd;
            free(got);
            free(want);
        }
        free(src);
    }
    printf("  all: %zu of %zu values differ (%.3f%%), worst %.3f steps\n", ndiff, total,
           100.0 * (double)ndiff / (double)total, worst);
    if ((double)ndiff > 0.02 * (double)total)
        sl_test_fail(__FILE__, __LINE__, "%zu of %zu values differ from the CPU resample "
                     "(tolerance 2%%)", ndiff, total);
}

/* The flip is a mirror of the unflipped output, exactly. */
SL_TEST(crop_resize__flip_mirrors_exactly) {
    placement ps[NPLACE];
    placements(ps);
    for (int i = 0; i < NPLACE; i++) {
        const placement *p = &ps[i];
        uint8_t *src = photoish(p->sh, p->sw, 100 + (uint64_t)i);
        float *a = reference(src, p, 0), *b = reference(src, p, 1);
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < p->oh; y++)
                for (int x = 0; x < p->ow; x++) {
                    size_t row = ((size_t)c * p->oh + y) * p->ow;
                    if (a[row + x] != b[row + p->ow - 1 - x])
                        sl_test_fail(__FILE__, __LINE__, "%s: (%d, %d, %d) is not mirrored",
                                     p->what, c, y, x);
                }
        free(a);
        free(b);
        free(src);
    }
}

/* The host backend runs it on a stream, after the work before it. */
SL_TEST(crop_resize__host_backend_on_a_stream) {
    sl_dev_backend *be;
    ASSERT_OK(sl_dev__host_open(&be));
    ASSERT(be->kernels);
    void *stream;
    ASSERT_OK(be->ops->stream_create(be, &stream));
    placement ps[NPLACE];
    placements(ps);
    const placement *p = &ps[0];
    uint8_t *src = photoish(p->sh, p->sw, 5);
    size_t sbytes = (size_t)p->sh * p->sw * 3, n = (size_t)3 * p->oh * p->ow;
    void *dsrc, *ddst;
    ASSERT_OK(be->ops->dev_alloc(be, sbytes, &dsrc));
    ASSERT_OK(be->ops->dev_alloc(be, n * sizeof(float), &ddst));
    ASSERT_OK(be->ops->copy(be, dsrc, src, sbytes, stream));
    sl_dev_crop a = {.dst = ddst, .src = dsrc, .pitch = (size_t)p->sw * 3, .flip = 1,
                     .oh = p->oh, .ow = p->ow};
    for (int k = 0; k < 4; k++) {
        a.box[k] = (float)p->box[k];
        a.lim[k] = p->lim[k];
    }
    memcpy(a.mean, MEAN, sizeof MEAN);
    memcpy(a.std, STD, sizeof STD);
    ASSERT_OK(be->ops->crop_resize(be, &a, stream));
    ASSERT_OK(be->ops->stream_sync(be, stream));
    float *want = reference(src, p, 1);
    ASSERT_EQ(memcmp(ddst, want, n * sizeof(float)), 0);
    free(want);
    free(src);
    be->ops->dev_free(be, dsrc);
    be->ops->dev_free(be, ddst);
    be->ops->stream_destroy(be, stream);
    sl_dev__backend_release(be);
}

/* ---- on a GPU: the kernel against its reference ------------------------------------
 * Runs where a CUDA device and libsluice_cuda_kernels.so are present
 * (scripts/gpu_check.sh on a device machine); elsewhere a GPU skip saying
 * why. Expected equal (no fused multiply-add in the kernel build); the
 * tolerance asserted is the reference's own bound against the CPU path, one
 * uint8 step, and the count of values that differ is printed. */
SL_TEST(crop_resize_gpu__kernel_equals_reference) {
    sl_dev_backend *be = NULL;
    if (sl_dev__cuda_open(&be, 0) != SL_OK)
        sl_test_skip_gpu("no CUDA device: %s", sl_errmsg());
    if (!be->kernels) {
        char why[400];
        snprintf(why, sizeof why, "%s", be->norm_missing);
        sl_dev__backend_release(be);
        sl_test_fail(__FILE__, __LINE__, "a CUDA device, but no crop_resize kernel: %s", why);
    }
    du_memcpy_fn memcpy_d2h = du_cuda_memcpy();
    ASSERT(memcpy_d2h != NULL);
    placement ps[NPLACE];
    placements(ps);
    size_t total = 0, ndiff = 0;
    double worst = 0;
    for (int i = 0; i < NPLACE; i++) {
        const placement *p = &ps[i];
        uint8_t *src = photoish(p->sh, p->sw, 200 + (uint64_t)i);
        size_t sbytes = (size_t)p->sh * p->sw * 3, n = (size_t)3 * p->oh * p->ow;
        void *dsrc, *ddst;
        ASSERT_OK(be->ops->dev_alloc(be, sbytes, &dsrc));
        ASSERT_OK(be->ops->dev_alloc(be, n * sizeof(float), &ddst));
        ASSERT_OK(be->ops->copy(be, dsrc, src, sbytes, NULL));
        for (int flip = 0; flip < 2; flip++) {
            sl_dev_crop a = crop_args(ddst, dsrc, p, flip);
            ASSERT_OK(be->ops->crop_resize(be, &a, NULL));
            float *got = malloc(n * sizeof *got), *want = reference(src, p, flip);
            ASSERT_EQ(memcpy_d2h(got, ddst, n * sizeof(float), 2 /* DeviceToHost */), 0);
            compare(got, want, p->oh, p->ow, &worst, &ndiff);
            total += n;
            free(got);
            free(want);
        }
        be->ops->dev_free(be, dsrc);
        be->ops->dev_free(be, ddst);
        free(src);
    }
    printf("  crop_resize kernel vs CPU reference: %zu of %zu values differ, worst %.3f uint8 "
           "steps\n", ndiff, total, worst);
    if (worst > 1.001)
        sl_test_fail(__FILE__, __LINE__, "the kernel is %.3f uint8 steps off its reference",
                     worst);
    sl_dev__backend_release(be);
}

/* A window whose readable pixels all have weight 0 gives 0 before the
 * normalize, as PIL's zero-sum weights do, never NaN: output column 0 of
 * the box x 1..2 centres the filter at 1.5 (window [1, 3), pixel 2 at
 * weight 0), and lim starts at 2. */
SL_TEST(crop_resize__zero_weight_window_is_zero_not_nan) {
    uint8_t *src = photoish(8, 8, 9);
    float out[3];
    sl_dev_crop a = {.dst = out, .src = src, .pitch = 8 * 3, .box = {1, 0, 2, 1},
                     .lim = {2, 0, 8, 8}, .oh = 1, .ow = 1};
    memcpy(a.mean, MEAN, sizeof MEAN);
    memcpy(a.std, STD, sizeof STD);
    sl_dev__crop_resize_host(&a);
    for (int c = 0; c < 3; c++)
        if (!(out[c] == (0.0f / 255.0f - MEAN[c]) / STD[c]))
            sl_test_fail(__FILE__, __LINE__, "channel %d: %g, want normalize(0)", c, out[c]);
    free(src);
}

/* The other outputs (hwc, u8: the CPU chain's HWC normalize, and its uint8
 * image when there is no normalize) hold the same values as the CHW float32
 * one: HWC is its transpose exactly, and normalizing the uint8 values gives
 * it exactly. */
static void *reference_as(const uint8_t *src, const placement *p, int flip, int hwc, int u8) {
    size_t n = (size_t)3 * p->oh * p->ow;
    void *out = malloc(n * (u8 ? 1 : sizeof(float)));
    sl_dev_crop a = crop_args(out, src, p, flip);
    a.hwc = hwc;
    a.u8 = u8;
    sl_dev__crop_resize_host(&a);
    return out;
}

SL_TEST(crop_resize__hwc_and_uint8_hold_the_same_values) {
    placement ps[NPLACE];
    placements(ps);
    for (int i = 0; i < NPLACE; i++) {
        const placement *p = &ps[i];
        uint8_t *src = photoish(p->sh, p->sw, 300 + (uint64_t)i);
        float *chw = reference(src, p, i & 1);
        float *hwc = reference_as(src, p, i & 1, 1, 0);
        uint8_t *u8 = reference_as(src, p, i & 1, 1, 1);
        size_t plane = (size_t)p->oh * p->ow;
        for (size_t k = 0; k < plane; k++)
            for (int c = 0; c < 3; c++) {
                float want = chw[(size_t)c * plane + k];
                if (hwc[k * 3 + (size_t)c] != want ||
                    (u8[k * 3 + (size_t)c] / 255.0f - MEAN[c]) / STD[c] != want)
                    sl_test_fail(__FILE__, __LINE__, "%s: pixel %zu channel %d differs",
                                 p->what, k, c);
            }
        free(chw);
        free(hwc);
        free(u8);
        free(src);
    }
}

/* On a device: the kernel's HWC float32 and uint8 outputs against the
 * reference's, within the CHW case's tolerance (one uint8 step). */
SL_TEST(crop_resize_gpu__hwc_and_uint8_equal_reference) {
    sl_dev_backend *be = NULL;
    if (sl_dev__cuda_open(&be, 0) != SL_OK)
        sl_test_skip_gpu("no CUDA device: %s", sl_errmsg());
    ASSERT(be->kernels);
    du_memcpy_fn memcpy_d2h = du_cuda_memcpy();
    ASSERT(memcpy_d2h != NULL);
    placement ps[NPLACE];
    placements(ps);
    double worst = 0;
    for (int i = 0; i < NPLACE; i++) {
        const placement *p = &ps[i];
        uint8_t *src = photoish(p->sh, p->sw, 400 + (uint64_t)i);
        size_t sbytes = (size_t)p->sh * p->sw * 3, n = (size_t)3 * p->oh * p->ow;
        void *dsrc, *ddst;
        ASSERT_OK(be->ops->dev_alloc(be, sbytes, &dsrc));
        ASSERT_OK(be->ops->dev_alloc(be, n * sizeof(float), &ddst));
        ASSERT_OK(be->ops->copy(be, dsrc, src, sbytes, NULL));
        for (int u8 = 0; u8 < 2; u8++) {
            sl_dev_crop a = crop_args(ddst, dsrc, p, i & 1);
            a.hwc = 1;
            a.u8 = u8;
            ASSERT_OK(be->ops->crop_resize(be, &a, NULL));
            size_t bytes = n * (u8 ? 1 : sizeof(float));
            void *got = malloc(bytes), *want = reference_as(src, p, i & 1, 1, u8);
            ASSERT_EQ(memcpy_d2h(got, ddst, bytes, 2 /* DeviceToHost */), 0);
            for (size_t k = 0; k < n; k++) {
                double d = u8 ? fabs((double)((uint8_t *)got)[k] - ((uint8_t *)want)[k])
                              : fabs((double)((float *)got)[k] - ((float *)want)[k]) * 255.0 *
                                    STD[k % 3];
                worst = d > worst ? d : worst;
            }
            free(got);
            free(want);
        }
        be->ops->dev_free(be, dsrc);
        be->ops->dev_free(be, ddst);
        free(src);
    }
    printf("  crop_resize kernel hwc/uint8 vs CPU reference: worst %.3f uint8 steps\n", worst);
    if (worst > 1.001)
        sl_test_fail(__FILE__, __LINE__, "the kernel is %.3f uint8 steps off its reference",
                     worst);
    sl_dev__backend_release(be);
}
