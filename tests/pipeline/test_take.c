/* test_take.c — `take` stops the source early: records past what the epoch
 * needs are never read, and the batches are those of a full walk. */
#include "pipe_util.h"
#include "core/core.h"
#include "pipeline/exec.h"
#include "source/source.h"

#include <string.h>

#define NRECORDS 1000

/* NRECORDS int64 scalars (value = record number); counts its reads. */
typedef struct counting_source {
    sl_source base;
    _Atomic uint64_t reads;
} counting_source;

static int counting_read(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *out) {
    atomic_fetch_add(&((counting_source *)src)->reads, 1);
    SL_TRY(cur->alloc(cur->alloc_ctx, &out->col[0], SL_I64, 0, NULL));
    *(int64_t *)out->col[0].data = (int64_t)i;
    out->ncols = 1;
    out->index = i;
    return SL_OK;
}

static void counting_free(sl_source *src) { sl__free(src); }

static const sl_source_vtbl counting_vtbl = {.read = counting_read, .free = counting_free};

/* One epoch of source -> ops; returns the reads and fills digests. */
static uint64_t run(const char *const *ops, int nops, uint64_t *dig, int *nbatches) {
    counting_source *src = sl_source__new(sizeof *src, &counting_vtbl, "test-counting");
    ASSERT(src);
    snprintf(src->base.name, sizeof src->base.name, "counting");
    src->base.count = NRECORDS;
    ASSERT_OK(sl_source__add_col(&src->base, "v", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL));
    sl_spec *spec;
    ASSERT_OK(sl_spec_create(&spec));
    spec->mem = sl_source__retain(&src->base);
    ASSERT_OK(sl_spec_set_shuffle(spec, 1));
    for (int i = 0; i < nops; i++)
        ASSERT_OK(sl_spec_add_op_json(spec, ops[i]));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    *nbatches = pu_run_epoch(p, dig, 64);
    sl_pipeline_free(p);
    uint64_t reads = atomic_load(&src->reads);
    sl_source__release(&src->base);
    return reads;
}

SL_TEST(pipeline_take__stops_the_source) {
    uint64_t a[64], b[64];
    int na, nb;
    /* take before batch: skip 7 + take 50 samples */
    const char *early[] = {"{\"op\": \"skip\", \"count\": 7}", "{\"op\": \"take\", \"count\": 50}",
                           "{\"op\": \"batch\", \"size\": 16}"};
    /* the same batches from a full walk: a filter that keeps everything
     * turns the early stop off */
    const char *full[] = {"{\"op\": \"filter\", \"column\": \"v\", \"not_in\": [-1]}",
                          "{\"op\": \"skip\", \"count\": 7}", "{\"op\": \"take\", \"count\": 50}",
                          "{\"op\": \"batch\", \"size\": 16}"};
    uint64_t r_early = run(early, 3, a, &na), r_full = run(full, 4, b, &nb);
    ASSERT_EQ(r_early, 57);
    ASSERT_EQ(r_full, NRECORDS);
    ASSERT_EQ(na, 4);
    ASSERT_EQ(nb, na);
    for (int i = 0; i < na; i++)
        ASSERT_EQ(a[i], b[i]);
    /* take after batch counts batches: 3 batches of 32 */
    const char *batches[] = {"{\"op\": \"batch\", \"size\": 32}", "{\"op\": \"take\", \"count\": 3}"};
    ASSERT_EQ(run(batches, 2, a, &na), 96);
    ASSERT_EQ(na, 3);
}
