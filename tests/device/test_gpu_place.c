/* test_gpu_place.c — GPU decode's CPU half, end to end against the CPU
 * pipeline, without a GPU: placements drawn from the image headers with the
 * fused CPU ops' own functions (sl_place_rrc, sl_place_resize_crop) and the
 * pipeline's generator keying (seed, epoch, the record's key, the original
 * op's position), fed to the crop/resize kernel's CPU reference
 * (sl_dev__crop_resize_host) over the fully decoded image, give the CPU
 * pipeline's output within the kernel's stated tolerance (no value more
 * than one uint8 step off, at most 2% of values different). A wrong box or
 * mirror would be tens of steps off. PNG images, so that the decode is the
 * same on both sides (a JPEG adds the IDCT and the CPU path's DCT scaling,
 * which only a device measures). */
#include "core/core.h"
#include "device/device.h"
#include "ops/op.h"
#include "../ops/ops_testdata.h"

#include <math.h>

#define NIMG 16
static const float MEAN[3] = {0.485f, 0.456f, 0.406f}, STD[3] = {0.229f, 0.224f, 0.225f};

typedef struct {
    uint8_t *png[NIMG];
    size_t size[NIMG];
    uint8_t *rgb[NIMG];
    int w[NIMG], h[NIMG];
} pngset;

static void make_pngs(pngset *s) {
    for (int i = 0; i < NIMG; i++) {
        s->w[i] = 50 + (i * 37) % 150;
        s->h[i] = 45 + (i * 53) % 120;
        s->rgb[i] = td_picture(s->w[i], s->h[i], i);
        s->png[i] = td_png(s->rgb[i], s->w[i], s->h[i], SPNG_COLOR_TYPE_TRUECOLOR, 8, NULL, 0,
                           &s->size[i]);
        ASSERT(s->png[i] != NULL);
    }
}

static void free_pngs(pngset *s) {
    for (int i = 0; i < NIMG; i++) {
        free(s->png[i]);
        free(s->rgb[i]);
    }
}

static sl_spec *png_spec(const pngset *s, uint64_t seed) {
    sl_sample samples[NIMG];
    memset(samples, 0, sizeof samples);
    for (int i = 0; i < NIMG; i++) {
        int64_t n = (int64_t)s->size[i];
        sl_tensor_view(&samples[i].col[0], s->png[i], SL_U8, 1, &n);
        samples[i].ncols = 1;
        samples[i].index = (uint64_t)i;
    }
    sl_spec *spec;
    ASSERT_OK(sl_spec_create(&spec));
    const char *names[1] = {"image"};
    ASSERT_OK(sl_spec_set_source_samples(spec, 1, names, samples, NIMG));
    ASSERT_OK(sl_spec_set_seed(spec, seed));
    ASSERT_OK(sl_spec_set_threads(spec, 2));
    return spec;
}

/* The reference of one image at `pl`, compared with the pipeline's CHW
 * float32 output `got`: adds to the worst difference (uint8 steps) and the
 * count of values that differ. */
static void check_one(const uint8_t *rgb, int w, const sl_place *pl, const float *got,
                      double *worst, size_t *ndiff) {
    size_t n = (size_t)3 * pl->oh * pl->ow, plane = n / 3;
    float *want = malloc(n * sizeof *want);
    sl_dev_crop a = {.dst = want, .src = rgb, .pitch = (size_t)w * 3, .flip = pl->mirror,
                     .oh = pl->oh, .ow = pl->ow};
    for (int k = 0; k < 4; k++) {
        a.box[k] = (float)pl->box[k];
        a.lim[k] = pl->lim[k];
    }
    memcpy(a.mean, MEAN, sizeof MEAN);
    memcpy(a.std, STD, sizeof STD);
    sl_dev__crop_resize_host(&a);
    for (size_t k = 0; k < n; k++) {
        double d = fabs((double)got[k] - (double)want[k]) * 255.0 * STD[k / plane];
        *worst = d > *worst ? d : *worst;
        *ndiff += d != 0.0;
    }
    free(want);
}

static void verdict(const char *what, double worst, size_t ndiff, size_t total) {
    printf("  %s: %zu of %zu values differ, worst %.3f uint8 steps\n", what, ndiff, total, worst);
    fflush(stdout);
    if (worst > 1.001)
        sl_test_fail(__FILE__, __LINE__, "%s: a value %.3f uint8 steps off the CPU pipeline "
                     "(tolerance 1)", what, worst);
    if ((double)ndiff > 0.02 * (double)total)
        sl_test_fail(__FILE__, __LINE__, "%s: %zu of %zu values differ (tolerance 2%%)", what,
                     ndiff, total);
}

SL_TEST(gpu_place__rrc_flip_normalize_as_cpu_pipeline) {
    pngset set;
    make_pngs(&set);
    const uint64_t seed = 11;
    sl_spec *spec = png_spec(&set, seed);
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"decode\", \"column\": \"image\", "
                                        "\"mode\": \"rgb\"}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"random_resized_crop\", \"size\": [24, 32], "
                                        "\"scale\": [0.08, 1.0], \"ratio\": [0.75, 1.3333]}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"flip\", \"p\": 0.5}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"normalize\", \"mean\": [0.485, 0.456, "
                                        "0.406], \"std\": [0.229, 0.224, 0.225], "
                                        "\"layout\": \"chw\", \"dtype\": \"float32\"}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 4}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    char ex[8192];
    size_t len;
    ASSERT_OK(sl_pipeline_explain(p, ex, sizeof ex, &len));
    ASSERT_CONTAINS(ex, "decode_random_resized_crop_flip_normalize");
    const double scale[2] = {0.08, 1.0}, ratio[2] = {0.75, 1.3333};
    int i = 0, mirrored = 0;
    double worst = 0;
    size_t ndiff = 0, total = 0;
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        const sl_tensor *t = sl_batch_column(b, 0);
        ASSERT_EQ(t->dtype, SL_F32);
        for (int64_t k = 0; k < t->shape[0]; k++, i++) {
            /* the fused op's parts: random_resized_crop is ops[1], flip ops[2];
             * no shuffle, first epoch: the key is the record's index */
            sl_rng box_rng, flip_rng;
            sl_rng_init(&box_rng, seed, 0, (uint64_t)i, 1);
            sl_rng_init(&flip_rng, seed, 0, (uint64_t)i, 2);
            sl_place pl;
            ASSERT_OK(sl_place_rrc(set.h[i], set.w[i], scale, ratio, 24, 32, &box_rng, 0.5,
                                   &flip_rng, &pl));
            mirrored += pl.mirror;
            ASSERT_EQ(t->shape[2], pl.oh);
            ASSERT_EQ(t->shape[3], pl.ow);
            check_one(set.rgb[i], set.w[i], &pl,
                      (const float *)t->data + (size_t)k * 3 * pl.oh * pl.ow, &worst, &ndiff);
            total += (size_t)3 * pl.oh * pl.ow;
        }
        sl_batch_release(b);
    }
    ASSERT_EQ(rc, SL_END);
    ASSERT_EQ(i, NIMG);
    /* both sides of the flip were exercised */
    ASSERT(mirrored > 0 && mirrored < NIMG);
    verdict("decode + random_resized_crop + flip + normalize", worst, ndiff, total);
    sl_pipeline_free(p);
    sl_spec_free(spec);
    free_pngs(&set);
}

SL_TEST(gpu_place__resize_center_crop_as_cpu_pipeline) {
    pngset set;
    make_pngs(&set);
    sl_spec *spec = png_spec(&set, 3);
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"decode\", \"column\": \"image\", "
                                        "\"mode\": \"rgb\"}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"resize\", \"size\": 40}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"center_crop\", \"size\": 36}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"normalize\", \"mean\": [0.485, 0.456, "
                                        "0.406], \"std\": [0.229, 0.224, 0.225], "
                                        "\"layout\": \"chw\", \"dtype\": \"float32\"}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 4}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    int i = 0;
    double worst = 0;
    size_t ndiff = 0, total = 0;
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        const sl_tensor *t = sl_batch_column(b, 0);
        ASSERT_EQ(t->dtype, SL_F32);
        for (int64_t k = 0; k < t->shape[0]; k++, i++) {
            sl_place pl;
            sl_place_resize_crop(set.h[i], set.w[i], 1, 40, 40, 36, 36, &pl);
            ASSERT_EQ(pl.pads, 0);
            ASSERT_EQ(t->shape[2], 36);
            ASSERT_EQ(t->shape[3], 36);
            check_one(set.rgb[i], set.w[i], &pl, (const float *)t->data + (size_t)k * 3 * 36 * 36,
                      &worst, &ndiff);
            total += (size_t)3 * 36 * 36;
        }
        sl_batch_release(b);
    }
    ASSERT_EQ(rc, SL_END);
    ASSERT_EQ(i, NIMG);
    verdict("decode + resize + center_crop + normalize", worst, ndiff, total);
    sl_pipeline_free(p);
    sl_spec_free(spec);
    free_pngs(&set);
}

/* A center_crop larger than the resized image pads: no box (the CPU op runs
 * resize then a padding crop; GPU decode is to send such an image to the
 * CPU). */
SL_TEST(gpu_place__padding_crop_has_no_box) {
    sl_place pl;
    sl_place_resize_crop(30, 50, 1, 20, 20, 24, 24, &pl);
    ASSERT_EQ(pl.rh, 20);
    ASSERT_EQ(pl.rw, 33);
    ASSERT_EQ(pl.pads, 1);
    sl_place_resize_crop(30, 50, 1, 20, 20, 16, 16, &pl);
    ASSERT_EQ(pl.pads, 0);
    ASSERT_EQ(pl.oh, 16);
    ASSERT_EQ(pl.ow, 16);
    ASSERT_EQ(pl.lim[2], 50);
    ASSERT_EQ(pl.lim[3], 30);
}
