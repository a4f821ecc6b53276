/* test_vectorize.c — map vectorization (map(f).batch(b) run as
 * batch(b).map(batched f)) gives the batches of the per-sample path: several
 * ops and dtypes, random flips, a batched user map, shuffled, on 1 to 4
 * threads, with the rewrite on and off. With it on, nothing runs per sample
 * and the readers read each record into its batch row (read_rows), so this
 * also checks that path with ops after it. */
#include "pipe_util.h"
#include "core/core.h"
#include "pipeline/exec.h"

#include <stdlib.h>
#include <string.h>

#define NSAMPLES 300
#define MAXB 64

/* n samples: "img" uint8[8,6,3], "x" uint8[28,28], "label" int64 = i % 10. */
static sl_spec *image_spec(uint64_t n) {
    sl_spec *s2;
    ASSERT_OK(sl_spec_create(&s2));
    sl_tensor cols[3];
    int64_t is[4] = {(int64_t)n, 8, 6, 3}, xs[3] = {(int64_t)n, 28, 28}, ls[1] = {(int64_t)n};
    ASSERT_OK(sl_tensor_alloc(&cols[0], SL_U8, 4, is));
    ASSERT_OK(sl_tensor_alloc(&cols[1], SL_U8, 3, xs));
    ASSERT_OK(sl_tensor_alloc(&cols[2], SL_I64, 1, ls));
    uint8_t *img = cols[0].data, *x = cols[1].data;
    for (uint64_t k = 0; k < n * 8 * 6 * 3; k++)
        img[k] = (uint8_t)(sl_mix64(k + 17) & 0xff);
    for (uint64_t k = 0; k < n * 784; k++)
        x[k] = (uint8_t)(sl_mix64(k * 3 + 1) & 0xff);
    for (uint64_t i = 0; i < n; i++)
        ((int64_t *)cols[2].data)[i] = (int64_t)(i % 10);
    const char *names[3] = {"img", "x", "label"};
    ASSERT_OK(sl_spec_set_source_columns(s2, 3, names, cols));
    for (int c = 0; c < 3; c++)
        sl_tensor_release(&cols[c]);
    return s2;
}

/* A user map on column `col`: every byte XOR one random byte per sample.
 * Per sample it makes a new tensor (the input may be a read-only view). */
static int xor_map(sl_sample *s, sl_rng *rng, void *user) {
    int col = *(const int *)user;
    sl_tensor *in = &s->col[col], t;
    SL_TRY(sl_tensor_alloc(&t, in->dtype, in->ndim, in->shape));
    uint8_t v = (uint8_t)(sl_rng_next(rng) & 0xff);
    for (size_t k = 0; k < in->nbytes; k++)
        ((uint8_t *)t.data)[k] = ((const uint8_t *)in->data)[k] ^ v;
    sl_tensor_release(in);
    *in = t;
    return SL_OK;
}

static int xor_batch(sl_tensor *cols, int ncols, int64_t n, sl_rng *rng, void *user) {
    int col = *(const int *)user;
    if (col >= ncols)
        return SL_EINVAL;
    size_t sz = cols[col].nbytes / (size_t)n;
    for (int64_t i = 0; i < n; i++) {
        uint8_t v = (uint8_t)(sl_rng_next(&rng[i]) & 0xff);
        uint8_t *d = (uint8_t *)cols[col].data + (size_t)i * sz;
        for (size_t k = 0; k < sz; k++)
            d[k] ^= v;
    }
    return SL_OK;
}

static const int x_col = 1;

typedef struct result {
    uint64_t dig[2][MAXB];
    int nb[2];
    uint64_t vec_batches;
} result;

/* Two shuffled epochs of `ops` (+ the xor map last when user_map), on
 * `threads` workers, with vectorization on or off. */
static void run(const char *const *ops, int nops, int user_map, int threads, int vectorize,
                result *r, char *explain, size_t cap) {
    sl_spec *spec = image_spec(NSAMPLES);
    ASSERT_OK(sl_spec_set_shuffle(spec, 1));
    ASSERT_OK(sl_spec_set_seed(spec, 7));
    ASSERT_OK(sl_spec_set_epochs(spec, 2));
    ASSERT_OK(sl_spec_set_threads(spec, threads));
    ASSERT_OK(sl_spec_set_vectorize(spec, vectorize));
    for (int i = 0; i < nops - 1; i++)
        ASSERT_OK(sl_spec_add_op_json(spec, ops[i]));
    if (user_map)
        ASSERT_OK(sl_spec_add_batch_map(spec, "xor", xor_map, xor_batch, (void *)&x_col));
    ASSERT_OK(sl_spec_add_op_json(spec, ops[nops - 1])); /* batch */
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    if (explain)
        ASSERT_OK(sl_pipeline_explain(p, explain, cap, NULL));
    for (int e = 0; e < 2; e++)
        r->nb[e] = pu_run_epoch(p, r->dig[e], MAXB);
    r->vec_batches = atomic_load(&sl_pipeline__exec(p)->scount.vec_batches);
    sl_pipeline_free(p);
}

static void check_same(const char *const *ops, int nops, int user_map, int nvec) {
    result off, on;
    char text[8192];
    run(ops, nops, user_map, 1, 0, &off, text, sizeof text);
    ASSERT_U64_EQ(off.vec_batches, 0);
    ASSERT_CONTAINS(text, "not vectorized (turned off in the spec)");
    ASSERT(!strstr(text, "straight into its batch row")); /* per-sample ops: samples */
    for (int threads = 1; threads <= 4; threads *= 2) {
        run(ops, nops, user_map, threads, 1, &on, text, sizeof text);
        ASSERT(on.vec_batches > 0);
        /* every op runs on the batch: the readers read into its rows */
        ASSERT_CONTAINS(text, "reading: each record straight into its batch row");
        /* explain names each op that runs per batch */
        int marked = 0;
        for (const char *q = text; (q = strstr(q, "[vectorized: once per batch")); q++)
            marked++;
        ASSERT_EQ(marked, nvec);
        for (int e = 0; e < 2; e++) {
            ASSERT_EQ(on.nb[e], off.nb[e]);
            for (int i = 0; i < on.nb[e] && i < MAXB; i++)
                ASSERT_U64_EQ(on.dig[e][i], off.dig[e][i]);
        }
    }
    /* epoch 1 differs from epoch 0 (shuffle and flips are drawn anew) */
    ASSERT(off.dig[0][0] != off.dig[1][0]);
}

SL_TEST(pipeline_vectorize__image_ops_same_as_per_sample) {
    /* cast sits between flip and normalize so that they do not fuse into
     * flip_normalize (which has no batched kernel) */
    static const char *const ops[] = {
        "{\"op\": \"flip\", \"column\": \"img\", \"p\": 0.5}",
        "{\"op\": \"cast\", \"column\": \"x\", \"dtype\": \"float32\"}",
        "{\"op\": \"normalize\", \"column\": \"img\", \"mean\": [0.4, 0.5, 0.6], "
        "\"std\": [0.2, 0.25, 0.3], \"layout\": \"chw\", \"dtype\": \"float32\"}",
        "{\"op\": \"one_hot\", \"column\": \"label\", \"classes\": 10}",
        "{\"op\": \"batch\", \"size\": 32}",
    };
    check_same(ops, 5, 0, 4);
}

SL_TEST(pipeline_vectorize__other_dtypes_and_user_map) {
    static const char *const ops[] = {
        "{\"op\": \"flip\", \"column\": \"img\", \"p\": 0.3}",
        "{\"op\": \"cast\", \"column\": \"x\", \"dtype\": \"int16\"}",
        "{\"op\": \"normalize\", \"column\": \"img\", \"layout\": \"hwc\", \"dtype\": \"float16\"}",
        "{\"op\": \"one_hot\", \"column\": \"label\", \"classes\": 12, \"dtype\": \"uint8\"}",
        "{\"op\": \"batch\", \"size\": 48, \"drop_remainder\": true}",
    };
    check_same(ops, 5, 1, 5);
}

SL_TEST(pipeline_vectorize__cast_then_batched_user_map) {
    /* the user map reads the float64 bytes the batched cast wrote */
    static const char *const ops[] = {
        "{\"op\": \"cast\", \"column\": \"x\", \"dtype\": \"float64\"}",
        "{\"op\": \"batch\", \"size\": 25}",
    };
    check_same(ops, 2, 1, 2);
}
