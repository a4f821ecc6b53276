/* test_slot.c — map + batch fusion writing the last op's output straight into
 * its batch slot: the batches equal the copy path byte for byte (policy skip,
 * which collates in the final stage; a user map last, which gets no slot),
 * a partial last batch and drop_remainder, 1 vs 3 threads, a damaged image
 * failing a batch whose slot was already taken, and batches that outlive the
 * pipeline. */
#include "core/core.h"
#include "ops/ops_testdata.h"
#include "pipeline/exec.h"
#include "pipe_util.h"

#include <xxhash.h>

#define NIMG 20 /* batches of 8: 8, 8, 4 */

typedef struct {
    uint8_t *jpeg[NIMG];
    size_t size[NIMG];
} slot_images;

static void make(slot_images *s) {
    for (int i = 0; i < NIMG; i++)
        s->jpeg[i] = td_picture_jpeg(48 + (i * 29) % 70, 40 + (i * 41) % 60, i + 3,
                                     i % 4 == 0 ? TJFLAG_PROGRESSIVE : 0, &s->size[i]);
}

static void unmake(slot_images *s) {
    for (int i = 0; i < NIMG; i++)
        free(s->jpeg[i]);
}

static int identity_map(sl_sample *s, sl_rng *rng, void *user) {
    (void)s;
    (void)rng;
    (void)user;
    return 0;
}

/* The training chain over the images: decode -> random_resized_crop 24 ->
 * flip -> normalize float32 CHW (3x24x24x4 = 6912 bytes a sample, above the
 * slot threshold) [-> identity map] -> batch 8. */
static sl_spec *chain(const slot_images *s, int skip_policy, int map_last, int drop_rem) {
    int64_t labels[NIMG];
    for (int i = 0; i < NIMG; i++)
        labels[i] = i;
    sl_spec *spec = pu_images_spec(s->jpeg, s->size, labels, NIMG);
    ASSERT_OK(sl_spec_set_seed(spec, 11));
    ASSERT_OK(sl_spec_set_shuffle(spec, 1));
    if (skip_policy)
        ASSERT_OK(sl_spec_set_on_error(spec, SL_ON_ERROR_SKIP));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"decode\", \"column\": \"image\"}"));
    ASSERT_OK(sl_spec_add_op_json(
        spec, "{\"op\": \"random_resized_crop\", \"column\": \"image\", \"size\": 24}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"flip\", \"column\": \"image\"}"));
    ASSERT_OK(sl_spec_add_op_json(
        spec, "{\"op\": \"normalize\", \"column\": \"image\", \"mean\": [0.485, 0.456, 0.406], "
              "\"std\": [0.229, 0.224, 0.225], \"layout\": \"chw\", \"dtype\": \"float32\"}"));
    if (map_last)
        ASSERT_OK(sl_spec_add_map(spec, "identity", identity_map, NULL));
    char batch[96];
    snprintf(batch, sizeof batch, "{\"op\": \"batch\", \"size\": 8, \"drop_remainder\": %s}",
             drop_rem ? "true" : "false");
    ASSERT_OK(sl_spec_add_op_json(spec, batch));
    return spec;
}

typedef struct {
    int nbatches;
    int64_t sizes[4];
    uint64_t digest[4]; /* of each batch's image then label bytes */
    uint64_t slot_writes;
} run_result;

static run_result run(sl_spec *spec, int threads, uint64_t epoch) {
    run_result r;
    memset(&r, 0, sizeof r);
    ASSERT_OK(sl_spec_set_threads(spec, threads));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    ASSERT_OK(sl_pipeline_set_epoch(p, epoch));
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        ASSERT(r.nbatches < 4);
        const sl_tensor *img = sl_batch_column(b, sl_batch_find(b, "image"));
        const sl_tensor *lab = sl_batch_column(b, sl_batch_find(b, "label"));
        ASSERT_EQ(sl_batch_is_ragged(b, sl_batch_find(b, "image")), 0);
        ASSERT_EQ(img->dtype, SL_F32);
        ASSERT_EQ(img->ndim, 4);
        ASSERT_EQ(img->shape[0], sl_batch_size(b));
        ASSERT_EQ(img->nbytes, (size_t)sl_batch_size(b) * 3 * 24 * 24 * 4);
        uint64_t h = XXH3_64bits(img->data, img->nbytes);
        r.digest[r.nbatches] = XXH3_64bits_withSeed(lab->data, lab->nbytes, h);
        r.sizes[r.nbatches++] = sl_batch_size(b);
        sl_batch_release(b);
    }
    ASSERT_EQ(rc, SL_END);
    r.slot_writes = atomic_load(&sl_pipeline__exec(p)->scount.slot_writes);
    sl_pipeline_free(p);
    return r;
}

static void assert_same_batches(const run_result *a, const run_result *b) {
    ASSERT_EQ(a->nbatches, b->nbatches);
    for (int i = 0; i < a->nbatches; i++) {
        ASSERT_EQ(a->sizes[i], b->sizes[i]);
        ASSERT_U64_EQ(a->digest[i], b->digest[i]);
    }
}

SL_TEST(pipeline_slot__direct_write_equals_copy_paths) {
    slot_images set;
    make(&set);
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        sl_spec *direct = chain(&set, 0, 0, 0), *skip = chain(&set, 1, 0, 0),
                *mapped = chain(&set, 0, 1, 0);
        run_result d1 = run(direct, 1, epoch), d3 = run(direct, 3, epoch);
        run_result s2 = run(skip, 2, epoch), m2 = run(mapped, 2, epoch);
        /* every sample of every batch (8, 8 and the partial 4) went in place */
        ASSERT_EQ(d1.nbatches, 3);
        ASSERT_EQ(d1.sizes[2], 4);
        ASSERT_U64_EQ(d1.slot_writes, NIMG);
        ASSERT_U64_EQ(d3.slot_writes, NIMG);
        /* policy skip collates in the final stage; a user map last gets no
         * slot: both copy, and agree byte for byte */
        ASSERT_U64_EQ(s2.slot_writes, 0);
        ASSERT_U64_EQ(m2.slot_writes, 0);
        assert_same_batches(&d1, &d3);
        assert_same_batches(&d1, &s2);
        assert_same_batches(&d1, &m2);
        sl_spec_free(direct);
        sl_spec_free(skip);
        sl_spec_free(mapped);
    }
    /* drop_remainder: the partial batch, written in place too, is dropped */
    sl_spec *spec = chain(&set, 0, 0, 1);
    run_result r = run(spec, 2, 0);
    ASSERT_EQ(r.nbatches, 2);
    ASSERT_U64_EQ(r.slot_writes, NIMG);
    sl_spec_free(spec);
    unmake(&set);
}

SL_TEST(pipeline_slot__damaged_image_fails_its_batch) {
    slot_images set;
    make(&set);
    /* sample 13 (in the second batch without shuffle) is cut short: the
     * error names the record, the batch whose slot was taken is released */
    set.size[13] = set.size[13] / 3;
    sl_spec *spec = chain(&set, 0, 0, 0);
    ASSERT_OK(sl_spec_set_shuffle(spec, 0));
    ASSERT_OK(sl_spec_set_threads(spec, 2));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    int rc, good = pu_good_batches(p, &rc);
    ASSERT(rc < 0);
    ASSERT_EQ(good, 1);
    ASSERT_CONTAINS(sl_errmsg(), "record 13");
    sl_pipeline_free(p);
    sl_spec_free(spec);
    unmake(&set);
}

SL_TEST(pipeline_slot__batches_outlive_the_pipeline) {
    slot_images set;
    make(&set);
    sl_spec *spec = chain(&set, 0, 0, 0);
    run_result ref = run(spec, 2, 0);
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_batch *kept[4] = {0};
    int n = 0;
    while (n < 4 && sl_pipeline_next(p, &kept[n]) == SL_OK)
        n++;
    ASSERT_EQ(n, 3);
    ASSERT(atomic_load(&sl_pipeline__exec(p)->scount.slot_writes) > 0);
    sl_pipeline_free(p);
    for (int i = 0; i < n; i++) {
        const sl_tensor *img = sl_batch_column(kept[i], sl_batch_find(kept[i], "image"));
        const sl_tensor *lab = sl_batch_column(kept[i], sl_batch_find(kept[i], "label"));
        uint64_t h = XXH3_64bits(img->data, img->nbytes);
        ASSERT_U64_EQ(XXH3_64bits_withSeed(lab->data, lab->nbytes, h), ref.digest[i]);
        sl_batch_release(kept[i]);
    }
    sl_spec_free(spec);
    unmake(&set);
}
