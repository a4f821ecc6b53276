/* test_read_rows.c — readers that read each record straight into its batch
 * row (layout.c, choose_read_rows) give the batches of the per-sample path:
 * every column type a fixed-shape .slr can hold (uint8 and float32 arrays, a
 * zstd column, int64 and float64 scalars), several shards, shuffled, a partial
 * last batch and drop_remainder, 1 to 3 threads.
 * A damaged record fails its batch with an error naming the file and the
 * record, after every batch before it was delivered intact. */
#include "pipe_util.h"
#include "core/core.h"
#include "pipeline/exec.h"
#include "record/record_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 300
#define MAXB 64

/* n records: x uint8[28,28], y float32[3] (zstd), label int64, w float64,
 * in shards of about 40 KB. Record i's x starts with "rec-%05d". */
static void make_fixed_slr(const char *path, int n) {
    sl_schema *sc;
    ASSERT_OK(sl_schema_create(&sc));
    int64_t xs[2] = {28, 28}, ys[1] = {3};
    ASSERT_OK(sl_schema_add(sc, "x", SL_COL_ARRAY, SL_U8, 2, xs, 0));
    ASSERT_OK(sl_schema_add(sc, "y", SL_COL_ARRAY, SL_F32, 1, ys, SL_COLF_ZSTD));
    ASSERT_OK(sl_schema_add(sc, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(sc, "w", SL_COL_FLOAT64, SL_DTYPE_INVALID, 0, NULL, 0));
    sl_writer *w;
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.fsync = 0;
    o.shard_bytes = 40 << 10;
    ASSERT_OK(sl_writer_open(&w, path, sc, &o));
    for (int i = 0; i < n; i++) {
        uint8_t x[784];
        for (int k = 0; k < 784; k++)
            x[k] = (uint8_t)(sl_mix64((uint64_t)i * 784 + (uint64_t)k) & 0xff);
        snprintf((char *)x, 16, "rec-%05d", i);
        float y[3] = {(float)i, (float)i * 0.5f, -(float)i};
        int64_t label = i % 10;
        double wt = 1.0 / (i + 1);
        sl_tensor cols[4];
        sl_tensor_view(&cols[0], x, SL_U8, 2, xs);
        sl_tensor_view(&cols[1], y, SL_F32, 1, ys);
        sl_tensor_view(&cols[2], &label, SL_I64, 0, NULL);
        sl_tensor_view(&cols[3], &wt, SL_F64, 0, NULL);
        ASSERT_OK(sl_writer_append(w, cols, 4));
    }
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(sc);
}

typedef struct result {
    uint64_t dig[2][MAXB];
    int nb[2];
    int read_rows;
    char explain[8192];
} result;

static void run(const char *path, const char *ops_json, int threads, int rows, result *r) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"source\": {\"path\": \"%s\", \"shuffle\": true, \"parallel\": %d}, \"seed\": 5, "
             "\"epochs\": 2, \"ops\": [%s]%s}",
             path, threads, ops_json, rows ? "" : ", \"read_rows\": false");
    sl_spec *spec;
    ASSERT_OK(sl_spec_from_json(&spec, json));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    r->read_rows = sl_pipeline__exec(p)->layout.read_rows;
    ASSERT_OK(sl_pipeline_explain(p, r->explain, sizeof r->explain, NULL));
    for (int e = 0; e < 2; e++)
        r->nb[e] = pu_run_epoch(p, r->dig[e], MAXB);
    sl_pipeline_free(p);
}

static void check_same(const char *path, const char *ops_json, int want_batches) {
    result off, on;
    run(path, ops_json, 1, 0, &off);
    ASSERT_EQ(off.read_rows, 0);
    ASSERT(!strstr(off.explain, "straight into its batch row"));
    ASSERT_EQ(off.nb[0], want_batches);
    for (int threads = 1; threads <= 3; threads++) {
        run(path, ops_json, threads, 1, &on);
        ASSERT_EQ(on.read_rows, 1);
        ASSERT_CONTAINS(on.explain, "reading: each record straight into its batch row");
        for (int e = 0; e < 2; e++) {
            ASSERT_EQ(on.nb[e], off.nb[e]);
            for (int i = 0; i < on.nb[e] && i < MAXB; i++)
                ASSERT_U64_EQ(on.dig[e][i], off.dig[e][i]);
        }
    }
    ASSERT(off.dig[0][0] != off.dig[1][0]); /* reshuffled: the digests can differ */
}

SL_TEST(pipeline_read_rows__same_batches_as_per_sample) {
    char path[512];
    sl_test_path(path, sizeof path, "fixed");
    make_fixed_slr(path, N);
    check_same(path, "{\"op\": \"batch\", \"size\": 64}", 5); /* 4 x 64 + 44 */
    check_same(path, "{\"op\": \"batch\", \"size\": 64, \"drop_remainder\": true}", 4);
    check_same(path, "{\"op\": \"batch\", \"size\": 50}, {\"op\": \"prefetch\", \"depth\": 3}",
               6);
    /* ops that all run on the batch join the readers' stage (layout.c,
     * rows_take_map); without read_rows they keep a stage of their own */
    static const char cast_ops[] =
        "{\"op\": \"cast\", \"column\": \"x\", \"dtype\": \"float32\"}, "
        "{\"op\": \"one_hot\", \"column\": \"label\", \"classes\": 10}, "
        "{\"op\": \"batch\", \"size\": 50}";
    check_same(path, cast_ops, 6);
    result r;
    run(path, cast_ops, 2, 1, &r);
    /* the readers keep the count the spec gave them (source.parallel) */
    ASSERT_CONTAINS(r.explain, "source+map[cast,one_hot]+batch(50) (read + per-sample ops, "
                               "parallel): workers=2,");
    run(path, cast_ops, 2, 0, &r);
    ASSERT(!strstr(r.explain, "source+map"));
}

/* The N-record file, then a pipeline over it from a spec with one %s. */
static sl_pipeline *fixed_pipeline(const char *json_fmt) {
    char path[512];
    sl_test_path(path, sizeof path, "fixed");
    make_fixed_slr(path, N);
    return pu_json_pipeline(json_fmt, path);
}

/* An op that runs per sample keeps the samples: no rows read. */
SL_TEST(pipeline_read_rows__per_sample_ops_read_samples) {
    sl_pipeline *p = fixed_pipeline(
        "{\"source\": {\"path\": \"%s\"}, \"vectorize\": false, \"ops\": [{\"op\": "
        "\"cast\", \"column\": \"x\", \"dtype\": \"float32\"}, {\"op\": \"batch\", \"size\": 50}]}");
    ASSERT_EQ(sl_pipeline__exec(p)->layout.read_rows, 0);
    ASSERT_EQ(sl_pipeline__exec(p)->nstages, 2); /* the reader, and map[cast]+batch(50) */
    uint64_t d[8];
    ASSERT_EQ(pu_run_epoch(p, d, 8), 6);
    sl_pipeline_free(p);
}

/* The values themselves, not only their agreement with the other path. */
SL_TEST(pipeline_read_rows__rows_hold_their_records) {
    sl_pipeline *p = fixed_pipeline(
        "{\"source\": {\"path\": \"%s\", \"shuffle\": true, \"parallel\": 2}, "
        "\"ops\": [{\"op\": \"batch\", \"size\": 32}]}");
    ASSERT_EQ(sl_pipeline__exec(p)->layout.read_rows, 1);
    int seen[N] = {0};
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        const sl_tensor *x = sl_batch_column(b, sl_batch_find(b, "x"));
        const sl_tensor *y = sl_batch_column(b, sl_batch_find(b, "y"));
        const sl_tensor *l = sl_batch_column(b, sl_batch_find(b, "label"));
        const sl_tensor *w = sl_batch_column(b, sl_batch_find(b, "w"));
        ASSERT(x && y && l && w);
        ASSERT_EQ(x->ndim, 3);
        ASSERT_EQ(x->shape[0], sl_batch_size(b));
        ASSERT_EQ(x->shape[1], 28);
        ASSERT_EQ(y->dtype, SL_F32);
        ASSERT_EQ(l->dtype, SL_I64);
        ASSERT_EQ(l->ndim, 1);
        ASSERT_EQ(w->dtype, SL_F64);
        for (int64_t r = 0; r < sl_batch_size(b); r++) {
            const uint8_t *xr = (const uint8_t *)x->data + r * 784;
            int i = atoi((const char *)xr + 4);
            ASSERT(i >= 0 && i < N);
            seen[i]++;
            ASSERT_EQ(xr[783], (uint8_t)(sl_mix64((uint64_t)i * 784 + 783) & 0xff));
            const float *yr = (const float *)y->data + r * 3;
            ASSERT(yr[0] == (float)i && yr[1] == (float)i * 0.5f && yr[2] == -(float)i);
            ASSERT_EQ(((const int64_t *)l->data)[r], i % 10);
            ASSERT(((const double *)w->data)[r] == 1.0 / (i + 1));
        }
        sl_batch_release(b);
    }
    ASSERT_RC(rc, SL_END);
    for (int i = 0; i < N; i++)
        ASSERT_EQ(seen[i], 1);
    sl_pipeline_free(p);
}

/* Change one byte of record i's x column (found by its "rec-%05d" mark). */
static void damage(const char *dir, int i) {
    char mark[16];
    snprintf(mark, sizeof mark, "rec-%05d", i);
    for (int s = 0; s < 64; s++) {
        char shard[600];
        snprintf(shard, sizeof shard, "%s/shard-%05d.slr", dir, s);
        if (pu_patch_after(shard, mark, 100, 0x5a))
            return;
    }
    ASSERT(!"record mark not found");
}

SL_TEST(pipeline_read_rows__damaged_record_fails_its_batch_only) {
    char path[512];
    sl_test_path(path, sizeof path, "fixed");
    make_fixed_slr(path, N);
    damage(path, 137);
    sl_pipeline *p = pu_json_pipeline(
        "{\"source\": {\"path\": \"%s\", \"parallel\": 2}, "
        "\"ops\": [{\"op\": \"batch\", \"size\": 16}]}", path);
    ASSERT_EQ(sl_pipeline__exec(p)->layout.read_rows, 1);
    int next = 0, rc;
    sl_batch *b;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        const sl_tensor *x = sl_batch_column(b, sl_batch_find(b, "x"));
        for (int64_t r = 0; r < sl_batch_size(b); r++, next++)
            ASSERT_EQ(atoi((const char *)x->data + r * 784 + 4), next);
        sl_batch_release(b);
    }
    /* batches 0..7 (records 0..127) came whole; the one holding 137 failed */
    ASSERT_EQ(next, 128);
    ASSERT_RC(rc, SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "record 137");
    ASSERT_CONTAINS(sl_errmsg(), "checksum mismatch");
    ASSERT_CONTAINS(sl_errmsg(), ".slr");
    sl_pipeline_free(p);
}

/* The reader call itself, on one record buffer: the damaged record fails
 * naming itself, and the record right after it is read whole through the
 * same buffer; a row of the wrong size is refused, naming the column. */
SL_TEST(pipeline_read_rows__good_record_right_after_a_bad_one) {
    char path[512];
    sl_test_path(path, sizeof path, "fixed");
    make_fixed_slr(path, N);
    damage(path, 137);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    uint8_t x[784];
    float y[3];
    int64_t label;
    double w;
    void *dst[4] = {x, y, &label, &w};
    const size_t bytes[4] = {784, 12, 8, 8};
    ASSERT_RC(sl_record__read_cols(r, 137, rec, true, dst, bytes), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "record 137: checksum mismatch");
    ASSERT_OK(sl_record__read_cols(r, 138, rec, true, dst, bytes));
    ASSERT_EQ(atoi((const char *)x + 4), 138);
    ASSERT_EQ(x[783], (uint8_t)(sl_mix64(138ull * 784 + 783) & 0xff));
    ASSERT(y[0] == 138.0f && y[1] == 69.0f && y[2] == -138.0f);
    ASSERT_EQ(label, 8);
    ASSERT(w == 1.0 / 139);
    const size_t wrong[4] = {784, 16, 8, 8};
    ASSERT_RC(sl_record__read_cols(r, 139, rec, true, dst, wrong), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "column \"y\" holds 12 bytes where its batch row holds 16");
    sl_record_free(rec);
    sl_reader_free(r);
}
