/* The synthetic source: records computed from their index, at any count. */
#include <stdio.h>
#include "test.h"
#include "pipeline/shuffle_window.h"
#include "pipeline/spec.h"

#include <string.h>

static int64_t i64(const sl_tensor *t) { return *(const int64_t *)t->data; }

SL_TEST(source_synthetic__values_from_the_index) {
    sl_source *src;
    ASSERT_OK(sl_source_open(&src, "{\"synthetic\": {\"records\": 10000000000, "
                                   "\"shards\": 100000, \"bytes\": 20}}"));
    ASSERT_STR_EQ(sl_source_kind(src), "synthetic");
    ASSERT_U64_EQ(sl_source_count(src), 10000000000ull);
    ASSERT_EQ(sl_source_ncols(src), 3);
    ASSERT_STR_EQ(sl_source_colname(src, 2), "payload");
    const uint64_t at[] = {0, 99999, 100000, 5000000123ull, 9999999999ull};
    const int64_t shard[] = {0, 0, 1, 50000, 99999};
    for (int k = 0; k < 5; k++) {
        sl_sample s;
        memset(&s, 0, sizeof s);
        ASSERT_OK(sl_source_read(src, at[k], &s));
        ASSERT_EQ(s.ncols, 3);
        ASSERT_EQ(i64(&s.col[0]), (int64_t)at[k]);
        ASSERT_EQ(i64(&s.col[1]), shard[k]);
        ASSERT_EQ(s.col[2].shape[0], 20);
        uint64_t v;
        memcpy(&v, s.col[2].data, 8);
        ASSERT_U64_EQ(v, at[k]);
        sl_sample_clear(&s);
    }
    sl_source_free(src);
}

SL_TEST(source_synthetic__errors_name_the_key) {
    sl_source *src;
    ASSERT_RC(sl_source_open(&src, "{\"synthetic\": {\"shards\": 3}}"), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "synthetic.records: missing");
    ASSERT_RC(sl_source_open(&src, "{\"synthetic\": {\"records\": 10, \"shards\": 11}}"),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "synthetic.shards");
    ASSERT_RC(sl_source_open(&src, "{\"synthetic\": {\"records\": 10, \"bytes\": 7}}"),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "synthetic.bytes");
    ASSERT_RC(sl_source_open(&src, "{\"synthetic\": {\"records\": 10, \"size\": 7}}"),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "synthetic.size: unknown key");
    ASSERT_RC(sl_source_open(&src, "{\"synthetic\": 5}"), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "source.synthetic");
}

/* A 10-billion-record plan: "shuffle": true (auto) takes the window order
 * there, and rank 517 of 1024 starts at once (no table). */
/* First batch of rank 517 of 1,024 over ten billion records with the given
 * shuffle; the explain line it must print. */
static void first_batch_at_ten_billion(const char *shuffle, const char *order_line,
                                       int64_t min_spread) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"source\": {\"synthetic\": {\"records\": 10000000000, \"shards\": 100000},"
             " \"shuffle\": %s, \"shard\": {\"index\": 517, \"count\": 1024}},"
             " \"seed\": 1, \"ops\": [{\"op\": \"batch\", \"size\": 4096}]}",
             shuffle);
    sl_spec *spec;
    ASSERT_OK(sl_spec_from_json(&spec, json));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    ASSERT_EQ(sl_pipeline_len(p), (int64_t)((9765625 + 4095) / 4096));
    static char text[8192];
    size_t tl;
    ASSERT_OK(sl_pipeline_explain(p, text, sizeof text, &tl));
    ASSERT_CONTAINS(text, order_line);
    sl_batch *b;
    ASSERT_OK(sl_pipeline_next(p, &b));
    const int64_t *idx = sl_batch_column(b, 0)->data;
    /* all distinct, inside the dataset, spread over it */
    int64_t lo = INT64_MAX, hi = -1;
    for (int i = 0; i < 4096; i++) {
        lo = idx[i] < lo ? idx[i] : lo;
        hi = idx[i] > hi ? idx[i] : hi;
        for (int j = 0; j < i; j++)
            ASSERT(idx[j] != idx[i]);
    }
    ASSERT(lo >= 0 && hi < 10000000000ll);
    ASSERT(hi - lo > min_spread);
    sl_batch_release(b);
    sl_pipeline_free(p);
    sl_spec_free(spec);
}

SL_TEST(source_synthetic__window_plan_at_ten_billion) {
    first_batch_at_ten_billion("{\"mode\": \"window\"}",
                               "shuffled per epoch (window 65536, block 1024)", 1000000);
}

/* The global order is a keyed bijection, not a table: ten billion records
 * need no memory per record, and "auto" keeps it for a local source at any
 * size (before, the table of 160 GB could not be allocated). */
SL_TEST(source_synthetic__global_order_at_ten_billion) {
    first_batch_at_ten_billion("{\"mode\": \"global\"}", "shuffled per epoch (global)",
                               9000000000ll);
    first_batch_at_ten_billion("true", "shuffled per epoch (global)", 9000000000ll);
}

/* "auto" picks the window order only for a remote source above
 * SL_SHUFFLE_GLOBAL_MAX records (a rank then fetches only its own blocks);
 * a remote source below it, and a local one at any size, get the global
 * order. The synthetic source stands in for a remote one by its flag. */
static void auto_order(uint64_t records, int remote, const char *order_line) {
    char json[160];
    snprintf(json, sizeof json, "{\"synthetic\": {\"records\": %llu}}",
             (unsigned long long)records);
    sl_source *src;
    ASSERT_OK(sl_source_open(&src, json));
    src->remote = remote;
    sl_spec *spec;
    ASSERT_OK(sl_spec_create(&spec));
    spec->mem = src; /* the spec owns the reference */
    ASSERT_OK(sl_spec_set_shuffle(spec, 1));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 64}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    static char text[8192];
    size_t tl;
    ASSERT_OK(sl_pipeline_explain(p, text, sizeof text, &tl));
    ASSERT_CONTAINS(text, order_line);
    sl_pipeline_free(p);
    sl_spec_free(spec);
}

SL_TEST(source_synthetic__auto_order_by_place_and_size) {
    auto_order(SL_SHUFFLE_GLOBAL_MAX + 1, 1, "shuffled per epoch (window 65536, block 1024)");
    auto_order(SL_SHUFFLE_GLOBAL_MAX, 1, "shuffled per epoch (global)");
    auto_order(SL_SHUFFLE_GLOBAL_MAX + 1, 0, "shuffled per epoch (global)");
}
