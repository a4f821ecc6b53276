/* test_image_chains.c — the image ops run as pipeline ops: the training and
 * evaluation chains, fusion (decode + random_resized_crop, decode + resize +
 * center_crop) against the unfused library calls, determinism across thread
 * counts, error policy on a damaged image, and parameter errors. */
#include "core/core.h"
#include "ops/ops_testdata.h"
#include "pipe_util.h"

#include <xxhash.h>

#define NIMG 24

typedef struct {
    uint8_t *jpeg[NIMG];
    size_t size[NIMG];
    int w[NIMG], h[NIMG];
} imageset;

static void make_images(imageset *s) {
    for (int i = 0; i < NIMG; i++) {
        s->w[i] = 40 + (i * 37) % 90;
        s->h[i] = 36 + (i * 53) % 80;
        s->jpeg[i] = td_picture_jpeg(s->w[i], s->h[i], i, (i % 5 == 0) ? TJFLAG_PROGRESSIVE : 0,
                                     &s->size[i]);
    }
}

static void free_images(imageset *s) {
    for (int i = 0; i < NIMG; i++)
        free(s->jpeg[i]);
}

/* A spec over the images: columns "image" (bytes) and "label" (int64 i % 3). */
static sl_spec *image_spec(const imageset *s, uint64_t seed) {
    int64_t labels[NIMG];
    for (int i = 0; i < NIMG; i++)
        labels[i] = i % 3;
    sl_spec *spec = pu_images_spec(s->jpeg, s->size, labels, NIMG);
    ASSERT_OK(sl_spec_set_seed(spec, seed));
    return spec;
}

static void add(sl_spec *spec, const char *json) { ASSERT_OK(sl_spec_add_op_json(spec, json)); }

/* image_spec with the ops ops[0], ops[1], ... (a NULL ends them). */
static sl_spec *chain_spec(const imageset *s, uint64_t seed, const char *const ops[]) {
    sl_spec *spec = image_spec(s, seed);
    for (int k = 0; ops[k]; k++)
        add(spec, ops[k]);
    return spec;
}

/* The pipeline of `spec`, its explain text in buf. */
static sl_pipeline *create_explained(sl_spec *spec, char *buf, size_t cap) {
    sl_pipeline *p;
    size_t len;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    ASSERT_OK(sl_pipeline_explain(p, buf, cap, &len));
    return p;
}

/* Run one epoch and return a digest of every batch's bytes. */
static uint64_t run_digest(sl_spec *spec, int threads, int *nbatches) {
    ASSERT_OK(sl_spec_set_threads(spec, threads));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    uint64_t h = 0;
    *nbatches = 0;
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        for (int c = 0; c < sl_batch_ncols(b); c++) {
            const sl_tensor *t = sl_batch_column(b, c);
            h = XXH3_64bits_withSeed(t->data, t->nbytes, h);
        }
        (*nbatches)++;
        sl_batch_release(b);
    }
    ASSERT_EQ(rc, SL_END);
    sl_pipeline_free(p);
    return h;
}

SL_TEST(pipeline_image_chains__train_chain_fused_and_deterministic) {
    imageset set;
    make_images(&set);
    sl_spec *spec = chain_spec(&set, 7, (const char *const[]){
        "{\"op\": \"decode\", \"column\": \"image\", \"mode\": \"rgb\"}",
        "{\"op\": \"random_resized_crop\", \"column\": \"image\", \"size\": 32, "
        "\"scale\": [0.08, 1.0], \"ratio\": [0.75, 1.3333]}",
        "{\"op\": \"flip\", \"column\": \"image\", \"p\": 0.5}",
        "{\"op\": \"normalize\", \"column\": \"image\", \"mean\": [0.485, 0.456, 0.406], "
        "\"std\": [0.229, 0.224, 0.225], \"layout\": \"chw\", \"dtype\": \"float32\"}",
        "{\"op\": \"one_hot\", \"column\": \"label\", \"classes\": 3}",
        "{\"op\": \"batch\", \"size\": 8}", NULL});
    char explain[8192];
    sl_pipeline *p = create_explained(spec, explain, sizeof explain);
    ASSERT_CONTAINS(explain, "decode_random_resized_crop");
    ASSERT_CONTAINS(explain, "flip_normalize");
    /* every sample equals the unfused library calls with the same draws:
     * box from (seed, epoch 0, sample, op 1), flip from op 2 */
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    const double scale[2] = {0.08, 1.0}, ratio[2] = {0.75, 1.3333};
    sl_decoder *dec;
    ASSERT_OK(sl_decoder_create(&dec));
    int seen = 0;
    sl_batch *b;
    while (sl_pipeline_next(p, &b) == SL_OK) {
        const sl_tensor *img = sl_batch_column(b, sl_batch_find(b, "image"));
        const sl_tensor *lab = sl_batch_column(b, sl_batch_find(b, "label"));
        ASSERT_EQ(img->ndim, 4);
        ASSERT_EQ(img->dtype, SL_F32);
        ASSERT_EQ(img->shape[1], 3);
        ASSERT_EQ(img->shape[2], 32);
        ASSERT_EQ(img->shape[3], 32);
        ASSERT_EQ(lab->dtype, SL_F32);
        ASSERT_EQ(lab->shape[1], 3);
        for (int64_t k = 0; k < sl_batch_size(b); k++, seen++) {
            int i = seen;
            ASSERT(((const float *)lab->data)[k * 3 + i % 3] == 1.0f);
            sl_tensor full = {0}, crop = {0}, rs = {0}, nz = {0};
            ASSERT_OK(sl_decode(dec, set.jpeg[i], set.size[i], SL_COLOR_RGB, &full));
            sl_rng r;
            sl_rng_init(&r, 7, 0, (uint64_t)i, 1);
            sl_box box;
            ASSERT_OK(sl_rrc_box(set.h[i], set.w[i], scale, ratio, &r, &box));
            ASSERT_OK(sl_image_crop(&full, &box, &crop));
            ASSERT_OK(sl_image_resize(&crop, 32, 32, SL_INTERP_BILINEAR, &rs));
            sl_rng_init(&r, 7, 0, (uint64_t)i, 2);
            if (sl_rng_uniform(&r) < 0.5)
                ASSERT_OK(sl_image_flip(&rs, &rs));
            ASSERT_OK(sl_image_normalize(&rs, mean, sd, SL_LAYOUT_CHW, SL_F32, &nz));
            const float *got = (const float *)img->data + k * 3 * 32 * 32;
            double mad = 0;
            for (int e = 0; e < 3 * 32 * 32; e++)
                mad += fabs(got[e] - ((const float *)nz.data)[e]) * 255.0 * 0.226;
            mad /= 3 * 32 * 32;
            /* fused (DCT-scaled region decode) vs unfused: <= 2 levels mean */
            if (!(mad <= 2.0))
                sl_test_fail(__FILE__, __LINE__, "sample %d: mean diff %.3f levels", i, mad);
            sl_tensor_release(&full);
            sl_tensor_release(&crop);
            sl_tensor_release(&rs);
            sl_tensor_release(&nz);
        }
        sl_batch_release(b);
    }
    ASSERT_EQ(seen, NIMG);
    sl_pipeline_free(p);
    sl_decoder_free(dec);
    /* the same batches on 1 and 3 threads */
    int n1, n3;
    uint64_t d1 = run_digest(spec, 1, &n1), d3 = run_digest(spec, 3, &n3);
    ASSERT_EQ(n1, 3);
    ASSERT_U64_EQ(d1, d3);
    sl_spec_free(spec);
    free_images(&set);
}

static int identity_map(sl_sample *s, sl_rng *rng, void *user) {
    (void)s;
    (void)rng;
    (void)user;
    return SL_OK;
}

/* The training chain ending in select [label, image]; `map_at`: where an
 * identity C map goes (0 none, 1 before the select, which keeps the select
 * in place, 2 after it). The random ops keep positions 1 and 2 throughout,
 * so every variant draws the same boxes and flips. */
static sl_spec *select_spec(const imageset *set, int map_at, int one_hot) {
    sl_spec *spec = image_spec(set, 5);
    add(spec, "{\"op\": \"decode\"}");
    add(spec, "{\"op\": \"random_resized_crop\", \"size\": 24}");
    add(spec, "{\"op\": \"flip\"}");
    add(spec, "{\"op\": \"normalize\", \"mean\": [0.485, 0.456, 0.406], "
              "\"std\": [0.229, 0.224, 0.225]}");
    if (one_hot)
        add(spec, "{\"op\": \"one_hot\", \"column\": \"label\", \"classes\": 3}");
    if (map_at == 1)
        ASSERT_OK(sl_spec_add_map(spec, "identity", identity_map, NULL));
    add(spec, one_hot ? "{\"op\": \"select\", \"columns\": [\"image\"]}"
                      : "{\"op\": \"select\", \"columns\": [\"label\", \"image\"]}");
    if (map_at == 2)
        ASSERT_OK(sl_spec_add_map(spec, "identity", identity_map, NULL));
    add(spec, "{\"op\": \"batch\", \"size\": 5}");
    return spec;
}

static void select_explain(sl_spec *spec, char *buf, size_t cap) {
    sl_pipeline_free(create_explained(spec, buf, cap));
}

SL_TEST(pipeline_image_chains__select_pushed_down_same_batches) {
    imageset set;
    make_images(&set);
    char ex[8192];
    /* kept in place by the map: the reference */
    sl_spec *ref = select_spec(&set, 1, 0);
    select_explain(ref, ex, sizeof ex);
    ASSERT(strstr(ex, "moved before") == NULL);
    /* moved before decode: the fused image op is then the stage's last op
     * and writes into the batch slot (map_at 0), or is not (map_at 2) */
    sl_spec *moved = select_spec(&set, 0, 0), *moved_map = select_spec(&set, 2, 0);
    select_explain(moved, ex, sizeof ex);
    ASSERT_CONTAINS(ex, "select ops[4] (label,image) moved before ops[0] decode, across 4 ops");
    ASSERT_CONTAINS(ex, "decode_random_resized_crop_flip_normalize");
    ASSERT_CONTAINS(ex, "output: label:int64[], image:float32[3,24,24]");
    select_explain(moved_map, ex, sizeof ex);
    ASSERT_CONTAINS(ex, "moved before ops[0] decode");
    int n0, n1, n2, n3;
    uint64_t d0 = run_digest(ref, 2, &n0), d1 = run_digest(moved, 2, &n1),
             d2 = run_digest(moved_map, 2, &n2), d3 = run_digest(moved, 1, &n3);
    ASSERT_EQ(n0, 5);
    ASSERT_EQ(n1, 5);
    ASSERT_EQ(n2, 5);
    ASSERT_U64_EQ(d0, d1);
    ASSERT_U64_EQ(d0, d2);
    ASSERT_U64_EQ(d0, d3);
    /* an op that writes a dropped column keeps the select after it */
    sl_spec *blocked = select_spec(&set, 0, 1);
    select_explain(blocked, ex, sizeof ex);
    ASSERT(strstr(ex, "moved before") == NULL);
    ASSERT_CONTAINS(ex, "output: image:float32[3,24,24] with");
    sl_spec_free(ref);
    sl_spec_free(moved);
    sl_spec_free(moved_map);
    sl_spec_free(blocked);
    free_images(&set);
}

SL_TEST(pipeline_image_chains__eval_chain_resize_center_crop) {
    imageset set;
    make_images(&set);
    sl_spec *spec = chain_spec(&set, 1, (const char *const[]){
        "{\"op\": \"decode\", \"column\": \"image\"}",
        "{\"op\": \"resize\", \"column\": \"image\", \"size\": 40}",
        "{\"op\": \"center_crop\", \"column\": \"image\", \"size\": 36}",
        "{\"op\": \"normalize\", \"column\": \"image\", \"layout\": \"hwc\", \"dtype\": \"uint8\"}",
        "{\"op\": \"batch\", \"size\": 4}", NULL});
    char explain[8192];
    sl_pipeline *p = create_explained(spec, explain, sizeof explain);
    ASSERT_CONTAINS(explain, "decode_resize");
    ASSERT_CONTAINS(explain, "center_crop 36x36");
    sl_decoder *dec;
    ASSERT_OK(sl_decoder_create(&dec));
    int seen = 0;
    sl_batch *b;
    while (sl_pipeline_next(p, &b) == SL_OK) {
        const sl_tensor *img = sl_batch_column(b, 0);
        ASSERT_EQ(img->dtype, SL_U8);
        ASSERT_EQ(img->shape[1], 36);
        ASSERT_EQ(img->shape[3], 3);
        for (int64_t k = 0; k < sl_batch_size(b); k++, seen++) {
            int i = seen, rh, rw;
            sl_tensor full = {0}, rs = {0}, cc = {0};
            ASSERT_OK(sl_decode(dec, set.jpeg[i], set.size[i], SL_COLOR_RGB, &full));
            sl_resize_shorter_shape(set.h[i], set.w[i], 40, &rh, &rw);
            ASSERT_OK(sl_image_resize(&full, rh, rw, SL_INTERP_BILINEAR, &rs));
            sl_box box;
            sl_center_crop_box(rh, rw, 36, 36, &box);
            ASSERT_OK(sl_image_crop(&rs, &box, &cc));
            int maxd;
            double mad = td_mad((const uint8_t *)img->data + k * 36 * 36 * 3, cc.data, cc.nbytes, &maxd);
            /* fused, DCT-scaled where the crop allows: <= 2 levels mean */
            if (!(mad <= 2.0))
                sl_test_fail(__FILE__, __LINE__, "sample %d: mean diff %.3f max %d", i, mad, maxd);
            sl_tensor_release(&full);
            sl_tensor_release(&rs);
            sl_tensor_release(&cc);
        }
        sl_batch_release(b);
    }
    ASSERT_EQ(seen, NIMG);
    sl_pipeline_free(p);
    sl_decoder_free(dec);
    sl_spec_free(spec);
    free_images(&set);
}

SL_TEST(pipeline_image_chains__gray_rotate_resize_cast) {
    imageset set;
    make_images(&set);
    sl_spec *spec = chain_spec(&set, 3, (const char *const[]){
        "{\"op\": \"decode\", \"mode\": \"gray\"}",
        "{\"op\": \"rotate\", \"degrees\": [-10, 10], \"fill\": 0}",
        "{\"op\": \"resize\", \"size\": [20, 30], \"interpolation\": \"area\"}",
        "{\"op\": \"cast\", \"column\": \"image\", \"dtype\": \"float32\"}",
        "{\"op\": \"cast\", \"column\": \"label\", \"dtype\": \"int32\"}",
        "{\"op\": \"batch\", \"size\": 6}", NULL});
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_batch *b;
    ASSERT_OK(sl_pipeline_next(p, &b));
    const sl_tensor *img = sl_batch_column(b, 0), *lab = sl_batch_column(b, 1);
    ASSERT_EQ(img->dtype, SL_F32);
    ASSERT_EQ(img->shape[0], 6);
    ASSERT_EQ(img->shape[1], 20);
    ASSERT_EQ(img->shape[2], 30);
    ASSERT_EQ(img->shape[3], 1);
    ASSERT_EQ(lab->dtype, SL_I32);
    ASSERT_EQ(((const int32_t *)lab->data)[4], 1);
    sl_batch_release(b);
    sl_pipeline_free(p);
    sl_spec_free(spec);
    free_images(&set);
}

SL_TEST(pipeline_image_chains__damaged_image_policy) {
    imageset set;
    make_images(&set);
    /* sample 5: cut in half */
    set.size[5] /= 2;
    sl_spec *spec = chain_spec(&set, 1, (const char *const[]){
        "{\"op\": \"decode\"}", "{\"op\": \"random_resized_crop\", \"size\": [16, 24]}",
        "{\"op\": \"batch\", \"size\": 4}", NULL});
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK)
        sl_batch_release(b);
    ASSERT_EQ(rc, SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), "record 5");
    ASSERT_CONTAINS(sl_errmsg(), "decode");
    ASSERT_CONTAINS(sl_errmsg(), "JPEG");
    sl_pipeline_free(p);
    ASSERT_OK(sl_spec_set_on_error(spec, SL_ON_ERROR_SKIP));
    ASSERT_OK(sl_pipeline_create(&p, spec));
    int64_t n = 0;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        n += sl_batch_size(b);
        sl_batch_release(b);
    }
    ASSERT_EQ(rc, SL_END);
    ASSERT_EQ(n, NIMG - 1);
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    ASSERT_EQ(st.skipped, 1);
    sl_pipeline_free(p);
    sl_spec_free(spec);
    free_images(&set);
}

SL_TEST(pipeline_image_chains__bad_params_name_the_field) {
    imageset set;
    make_images(&set);
    static const struct {
        const char *op, *want;
    } cases[] = {
        {"{\"op\": \"random_resized_crop\"}", "ops[1].size"},
        {"{\"op\": \"random_resized_crop\", \"size\": 0}", "ops[1].size"},
        {"{\"op\": \"random_resized_crop\", \"size\": 8, \"scale\": [0.5, 0.1]}", "ops[1].scale"},
        {"{\"op\": \"flip\", \"p\": 2}", "ops[1].p"},
        {"{\"op\": \"normalize\", \"dtype\": \"int7\"}", "ops[1].dtype"},
        {"{\"op\": \"normalize\", \"mean\": [1, 2]}", "ops[1].mean"},
        {"{\"op\": \"rotate\"}", "ops[1].degrees"},
        {"{\"op\": \"resize\", \"size\": [1, 2, 3]}", "ops[1].size"},
        {"{\"op\": \"center_crop\", \"size\": 8, \"colour\": 1}", "ops[1].colour"},
        {"{\"op\": \"one_hot\", \"classes\": 0}", "ops[1].classes"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sl_spec *spec =
            chain_spec(&set, 1, (const char *const[]){"{\"op\": \"decode\"}", cases[k].op, NULL});
        sl_pipeline *p = NULL;
        int rc = sl_pipeline_create(&p, spec);
        if (rc != SL_EINVAL || !strstr(sl_errmsg(), cases[k].want))
            sl_test_fail(__FILE__, __LINE__, "%s: %s (%s)", cases[k].op, sl_status_str(rc),
                         sl_errmsg());
        sl_pipeline_free(p);
        sl_spec_free(spec);
    }
    /* an image op on still-encoded bytes */
    sl_spec *spec = image_spec(&set, 1);
    add(spec, "{\"op\": \"flip\"}");
    sl_pipeline *p = NULL;
    ASSERT_RC(sl_pipeline_create(&p, spec), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "decode op first");
    sl_spec_free(spec);
    free_images(&set);
}
