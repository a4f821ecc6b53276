/* Specs: JSON and C calls give the same pipeline; bad specs give one-line
 * errors naming the field. */
#include "core/core.h"
#include "pipe_util.h"
#include "pipeline/exec.h"

static void expect_bad(const char *json, const char *want) {
    sl_spec *spec = NULL;
    int rc = sl_spec_from_json(&spec, json);
    if (rc == SL_OK) {
        sl_spec *mem = pu_memory_spec(10);
        /* op errors show at creation: move the ops onto a memory source */
        sl_pipeline *p = NULL;
        rc = sl_pipeline_create(&p, spec);
        if (rc == SL_OK)
            sl_test_fail(__FILE__, __LINE__, "accepted: %s", json);
        sl_spec_free(mem);
        ASSERT(p == NULL);
    }
    ASSERT_RC(rc, SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT(strchr(sl_errmsg(), '\n') == NULL);
    sl_spec_free(spec);
}

SL_TEST(pipeline_spec__bad_specs_name_the_field) {
    expect_bad("{\"ops\": []}", "source: missing");
    expect_bad("not json", "spec: not valid JSON");
    expect_bad("{\"source\": {\"path\": 5}}", "source.path: must be a non-empty string");
    expect_bad("{\"source\": {\"path\": \"a.slr\", \"shuffle\": 1}}", "source.shuffle");
    expect_bad("{\"source\": {\"path\": \"a.slr\", \"shard\": {\"index\": 4, \"count\": 4}}}",
               "source.shard.index: must be below shard.count");
    expect_bad("{\"source\": {\"path\": \"a.slr\", \"shard\": {\"index\": 0}}}",
               "source.shard.count: missing");
    expect_bad("{\"source\": {\"path\": \"a.slr\", \"shard\": {\"index\": 0, \"count\": 2, "
               "\"equal\": \"most\"}}}",
               "source.shard.equal");
    expect_bad("{\"source\": {\"path\": \"a.slr\"}, \"epochs\": 0}", "epochs: must be");
    expect_bad("{\"source\": {\"path\": \"a.slr\"}, \"on_error\": \"ignore\"}", "on_error");
    expect_bad("{\"source\": {\"path\": \"a.slr\"}, \"colour\": 1}", "colour: unknown key");
    expect_bad("{\"source\": {\"path\": \"a.slr\"}, \"epoch\": 1}",
               "epoch: unknown key (keys: epochs, ");
    expect_bad("{\"source\": {\"path\": \"a.slr\", \"shufle\": true}}",
               "source.shufle: unknown key for a .slr source (keys: shuffle, ");
    expect_bad("{\"source\": {\"path\": \"a.slr\"}, \"ops\": [{\"size\": 3}]}", "ops[0].op: missing");
    expect_bad("{\"source\": {\"path\": \"a.slr\"}, \"ops\": {}}", "ops: must be an array");
}

/* Spec keys are read through parameter tables: a wrong value names the
 * allowed range and what was given; an unknown key lists the valid ones,
 * closest first, at every level. */
SL_TEST(pipeline_spec__tables_name_the_range) {
    expect_bad("{\"source\": {\"path\": \"a.slr\"}, \"seed\": -1}",
               "seed: must be a whole number >= 0 (got -1)");
    expect_bad("{\"source\": {\"path\": \"a.slr\"}, \"epochs\": 1.5}",
               "epochs: must be a whole number >= 1 (got 1.5)");
    expect_bad("{\"source\": {\"path\": \"a.slr\", \"chunk\": 300}}",
               "source.chunk: must be a whole number from 1 to 256 (got 300)");
    expect_bad("{\"source\": {\"path\": \"a.slr\", \"parallel\": 0}}",
               "source.parallel: must be a number of threads (1-1024) or \"auto\" (got 0)");
    expect_bad("{\"source\": {\"path\": \"a.slr\", \"shuffle\": {\"windw\": 8}}}",
               "source.shuffle.windw: unknown key (keys: window, mode, block)");
    expect_bad("{\"source\": {\"path\": \"a.slr\", \"shuffle\": {\"mode\": \"local\"}}}",
               "source.shuffle.mode: must be \"auto\", \"global\" or \"window\"");
    expect_bad("{\"source\": {\"path\": \"a.slr\", \"shard\": {\"count\": 0, "
               "\"index\": 0}}}",
               "source.shard.count: must be a whole number >= 1 (got 0)");
    expect_bad("{\"source\": {\"path\": \"a.slr\"}, \"cache_bytes\": \"lots\"}",
               "cache_bytes: must be a whole number of bytes >= 0 or a string such as \"512M\" "
               "(K, M, G, T)");
    expect_bad("{\"source\": {\"path\": \"a.slr\"}, \"memory_limit\": 0}",
               "memory_limit: must be a whole number of bytes >= 1 or a string such as \"512M\" "
               "(K, M, G, T)");
    /* good values right after: read into the spec */
    sl_spec *spec = NULL;
    ASSERT_OK(sl_spec_from_json(&spec,
                                "{\"source\": {\"path\": \"a.slr\", \"chunk\": 256, "
                                "\"parallel\": \"auto\", \"shuffle\": {\"mode\": \"window\", "
                                "\"window\": 64, \"block\": 4}, \"shard\": {\"index\": 1, "
                                "\"count\": 3, \"equal\": \"drop\"}}, \"seed\": 9, "
                                "\"epochs\": 2, \"on_error\": \"skip\", \"deterministic\": false, "
                                "\"vectorize\": false, \"memory_limit\": \"1G\", "
                                "\"cache_bytes\": 0}"));
    ASSERT_EQ(spec->chunk, 256);
    ASSERT_EQ(spec->source_parallel, -1);
    ASSERT(spec->shuffle == 1 && spec->shuffle_mode == SL_SHUFFLE_WINDOW);
    ASSERT_U64_EQ(spec->shuffle_window, 64);
    ASSERT_U64_EQ(spec->shuffle_block, 4);
    ASSERT(spec->shard_index == 1 && spec->shard_count == 3 && spec->shard_equal == SL_SHARD_DROP);
    ASSERT_U64_EQ(spec->seed, 9);
    ASSERT_EQ(spec->epochs, 2);
    ASSERT_EQ(spec->on_error, SL_ON_ERROR_SKIP);
    ASSERT(spec->deterministic == 0 && spec->vectorize == 0);
    ASSERT_U64_EQ(spec->memory_limit, 1u << 30);
    ASSERT(spec->has_cache_bytes == 1 && spec->cache_bytes == 0);
    sl_spec_free(spec);
    /* and the defaults where keys are absent */
    ASSERT_OK(sl_spec_from_json(&spec, "{\"source\": {\"path\": \"a.slr\"}}"));
    ASSERT(spec->chunk == 0 && spec->source_parallel == 0 && spec->shuffle == 0);
    ASSERT(spec->epochs == 1 && spec->deterministic == 1 && spec->vectorize == 1);
    ASSERT(spec->has_cache_bytes == 0 && spec->memory_limit == 0 && spec->seed == 0);
    ASSERT_EQ(spec->on_error, SL_ON_ERROR_FAIL);
    sl_spec_free(spec);
}

static void expect_bad_ops(const char *op1, const char *op2, const char *want) {
    sl_spec *spec = pu_memory_spec(10);
    ASSERT_OK(sl_spec_add_op_json(spec, op1));
    if (op2)
        ASSERT_OK(sl_spec_add_op_json(spec, op2));
    sl_pipeline *p = NULL;
    ASSERT_RC(sl_pipeline_create(&p, spec), SL_EINVAL);
    ASSERT(p == NULL);
    ASSERT_CONTAINS(sl_errmsg(), want);
    sl_spec_free(spec);
}

/* Op parameters are read as entries of a parameter table, like every other
 * key: the message names the allowed range and the value given. */
SL_TEST(pipeline_spec__op_parameters_name_the_range) {
    expect_bad_ops("{\"op\": \"rotate\", \"degrees\": 10, \"fill\": 300}", NULL,
                   "ops[0].fill: must be a whole number from 0 to 255 (got 300)");
    expect_bad_ops("{\"op\": \"shuffle_buffer\", \"size\": 0}", NULL,
                   "ops[0].size: must be a whole number from 1 to 16777216 (got 0)");
    expect_bad_ops("{\"op\": \"batch\", \"size\": 8, \"drop_remainder\": 1}", NULL,
                   "ops[0].drop_remainder: must be true or false");
    expect_bad_ops("{\"op\": \"batch\", \"size\": 8, \"parallel\": 0}", NULL,
                   "ops[0].parallel: must be a number of threads (1-1024) or \"auto\" (got 0)");
    expect_bad_ops("{\"op\": \"resize\", \"size\": [1, 2, 3]}", NULL,
                   "ops[0].size: must be an array of 1 to 2 numbers");
    expect_bad_ops("{\"op\": \"resize\", \"size\": [8, \"a\"]}", NULL,
                   "ops[0].size[1]: must be a number");
    expect_bad_ops("{\"op\": \"resize\"}", NULL, "ops[0].size: missing");
    expect_bad_ops("{\"op\": \"resize\", \"size\": 8, \"interpolation\": \"cubic\"}", NULL,
                   "ops[0].interpolation: must be \"bilinear\", \"area\" or \"nearest\"");
    expect_bad_ops("{\"op\": \"batch\", \"size\": 8, \"sise\": 1}", NULL,
                   "ops[0].sise: unknown parameter (parameters: size, ");
}

/* A misspelt op name fails where it is added (sl_spec_add_op_json, a spec
 * read from JSON), with the closest known names, not when the pipeline is
 * built; so does the builder's check of one op (sl_spec_check_op_json). */
SL_TEST(pipeline_spec__unknown_op_fails_where_it_is_named) {
    sl_spec *spec = pu_memory_spec(10);
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 8}"));
    ASSERT_RC(sl_spec_add_op_json(spec, "{\"op\": \"frobnicate\"}"), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "ops[1].op: unknown op 'frobnicate'");
    ASSERT_RC(sl_spec_add_op_json(spec, "{\"op\": \"resise\", \"size\": 3}"), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "ops[1].op: unknown op 'resise' (known: resize, ");
    sl_spec_free(spec);
    sl_spec *s2 = NULL;
    ASSERT_RC(sl_spec_from_json(&s2, "{\"source\": {\"path\": \"a.slr\"}, \"ops\": [{\"op\": "
                                     "\"flip\"}, {\"op\": \"color_jitter\"}]}"),
              SL_EINVAL);
    ASSERT(s2 == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "ops[1].op: unknown op 'color_jitter' (known: ");
    ASSERT_RC(sl_spec_check_op_json("{\"op\": \"resise\"}", 4), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "ops[4].op: unknown op 'resise' (known: resize, ");
    ASSERT_OK(sl_spec_check_op_json("{\"op\": \"flip\", \"column\": \"image\"}", 0));
}

SL_TEST(pipeline_spec__bad_ops_name_the_field) {
    expect_bad_ops("{\"op\": \"take\", \"count\": 3}", "{\"op\": \"batch\", \"size\": 0}",
                   "ops[1].size: must be a positive integer");
    expect_bad_ops("{\"op\": \"batch\", \"size\": \"big\"}", NULL,
                   "ops[0].size: must be a positive integer");
    expect_bad_ops("{\"op\": \"batch\"}", NULL, "ops[0].size: missing");
    expect_bad_ops("{\"op\": \"batch\", \"size\": 2, \"sise\": 3}", NULL,
                   "ops[0].sise: unknown parameter");
    /* valid names listed closest to the wrong one first */
    expect_bad_ops("{\"op\": \"filter\", \"column\": \"labels\", \"in\": [1]}", NULL,
                   "ops[0].column: no column 'labels' (columns: label, x)");
    expect_bad_ops("{\"op\": \"resize\", \"sise\": 3}", NULL,
                   "ops[0].sise: unknown parameter (parameters: size, ");
    expect_bad_ops("{\"op\": \"filter\", \"column\": \"label\", \"in\": 1}", NULL, "ops[0].in");
    expect_bad_ops("{\"op\": \"batch\", \"size\": 2}", "{\"op\": \"select\", \"columns\": [\"x\"]}",
                   "ops[1]: 'select' after batch is not supported");
    expect_bad_ops("{\"op\": \"take\", \"count\": 2}", "{\"op\": \"repeat\", \"count\": 2}",
                   "ops[1]: repeat must come before");
    expect_bad_ops("{\"op\": \"map\"}", NULL, "ops[0].op: \"map\" runs a C function");
    expect_bad_ops("{\"op\": \"batch\", \"size\": 2, \"parallel\": 0}", NULL, "ops[0].parallel");
    sl_spec *spec;
    ASSERT_OK(sl_spec_create(&spec));
    ASSERT_RC(sl_spec_add_op_json(spec, "{oops"), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "ops[0]: not valid JSON");
    ASSERT_RC(sl_spec_set_shard(spec, 3, 3, SL_SHARD_PAD), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "source.shard.index");
    sl_pipeline *p;
    ASSERT_RC(sl_pipeline_create(&p, spec), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "source.path: missing");
    sl_spec_free(spec);
}

SL_TEST(pipeline_spec__json_and_c_agree) {
    /* the same pipeline from a JSON document and from C calls gives the same
     * batches, and sl_spec_to_json round-trips */
    char path[512];
    sl_test_path(path, sizeof path, "d.slr");
    make_slr(path, 300);
    char json[2048];
    snprintf(json, sizeof json,
             "{\"source\": {\"path\": \"%s\", \"shuffle\": true, \"shard\": {\"index\": 1, "
             "\"count\": 2, \"equal\": \"drop\"}}, \"seed\": 5, \"epochs\": 2, \"ops\": ["
             "{\"op\": \"filter\", \"column\": \"label\", \"not_in\": [3]},"
             "{\"op\": \"select\", \"columns\": [\"label\", \"image\"]},"
             "{\"op\": \"batch\", \"size\": 10, \"drop_remainder\": true}]}",
             path);
    sl_spec *a, *b, *c;
    ASSERT_OK(sl_spec_from_json(&a, json));
    ASSERT_OK(sl_spec_create(&b));
    ASSERT_OK(sl_spec_set_source_path(b, path));
    ASSERT_OK(sl_spec_set_shuffle(b, 1));
    ASSERT_OK(sl_spec_set_shard(b, 1, 2, SL_SHARD_DROP));
    ASSERT_OK(sl_spec_set_seed(b, 5));
    ASSERT_OK(sl_spec_set_epochs(b, 2));
    ASSERT_OK(sl_spec_add_op_json(b, "{\"op\": \"filter\", \"column\": \"label\", \"not_in\": [3]}"));
    ASSERT_OK(sl_spec_add_op_json(b, "{\"op\": \"select\", \"columns\": [\"label\", \"image\"]}"));
    ASSERT_OK(sl_spec_add_op_json(b, "{\"op\": \"batch\", \"size\": 10, \"drop_remainder\": true}"));
    char back[4096];
    size_t len;
    ASSERT_OK(sl_spec_to_json(b, back, sizeof back, &len));
    ASSERT(len < sizeof back);
    ASSERT_CONTAINS(back, "\"not_in\":[3]");
    ASSERT_OK(sl_spec_from_json(&c, back));
    sl_spec *all[3] = {a, b, c};
    uint64_t d[3][64];
    int n[3];
    for (int k = 0; k < 3; k++) {
        sl_pipeline *p;
        ASSERT_OK(sl_pipeline_create(&p, all[k]));
        ASSERT_STR_EQ(sl_pipeline_column_name(p, 0), "label");
        ASSERT_EQ(sl_pipeline_epochs(p), 2);
        n[k] = pu_run_epoch(p, d[k], 32);
        n[k] += pu_run_epoch(p, d[k] + n[k], 32);
        sl_pipeline_free(p);
        sl_spec_free(all[k]);
    }
    ASSERT_EQ(n[0], 2 * 13); /* 270 kept, 135 per rank, 13 full batches */
    for (int k = 1; k < 3; k++) {
        ASSERT_EQ(n[k], n[0]);
        for (int i = 0; i < n[0]; i++)
            ASSERT_U64_EQ(d[k][i], d[0][i]);
    }
}

/* OOM loop over reading a spec from JSON, copying it into a pipeline (the
 * spec hash, through cJSON) and writing it back: fail allocation 1, 2, …
 * (those inside cJSON included) until all succeed; each failure is SL_ENOMEM
 * with a message, never "not valid JSON", and nothing leaks (ASan). */
SL_TEST(pipeline_spec__oom_json) {
    static const char json[] =
        "{\"source\": {\"path\": \"mem\", \"shuffle\": true, \"shard\": {\"index\": 0, "
        "\"count\": 2, \"equal\": \"pad\"}}, \"seed\": 5, \"epochs\": 2, \"on_error\": \"skip\", "
        "\"ops\": [{\"op\": \"filter\", \"column\": \"label\", \"not_in\": [3, 4]},"
        "{\"op\": \"shuffle_buffer\", \"size\": 8}, {\"op\": \"batch\", \"size\": 4}]}";
    static const char op[] = "{\"op\": \"take\", \"count\": 20}";
    static const char *const names[] = {"label"};
    int64_t labels[40], shape[1] = {40};
    for (int i = 0; i < 40; i++)
        labels[i] = i % 7;
    sl_tensor col;
    sl_tensor_view(&col, labels, SL_I64, 1, shape);
    uint64_t n;
    for (n = 1; n < 100000; n++) {
        sl_errclear();
        sl__alloc_fail_at(n);
        sl_spec *s = NULL;
        sl_pipeline *p = NULL;
        char out[2048];
        size_t len = 0;
        int rc = sl_spec_from_json(&s, json);
        if (rc == SL_OK)
            rc = sl_spec_add_op_json(s, op);
        if (rc == SL_OK)
            rc = sl_spec_set_source_columns(s, 1, names, &col);
        if (rc == SL_OK)
            rc = sl_spec_to_json(s, out, sizeof out, &len);
        if (rc == SL_OK)
            rc = sl_pipeline_create(&p, s);
        sl__alloc_fail_at(0);
        sl_pipeline_free(p);
        sl_spec_free(s);
        if (rc == SL_OK) {
            ASSERT_CONTAINS(out, "\"take\"");
            break;
        }
        if (rc != SL_ENOMEM)
            sl_test_fail(__FILE__, __LINE__, "fail_at %llu: got %s (%s)", (unsigned long long)n,
                         sl_status_str(rc), sl_errmsg());
        ASSERT(sl_errmsg()[0] != 0);
    }
    ASSERT(n > 20); /* cJSON's allocations were among those failed */
}

/* The spec's parameters listed (sluice env): each row says what the check
 * of a spec says — a bad value's message carries the row's range words. */
SL_TEST(pipeline_spec__parameters_listed_as_checked) {
    int n = sl_spec_param_count();
    ASSERT(n >= 20);
    int seen = 0;
    for (int i = 0; i < n; i++) {
        sl_setting_info s;
        ASSERT_RC(sl_spec_param_get(i, &s), SL_OK);
        ASSERT(*s.name && *s.type && *s.range && *s.default_value && *s.layer && s.value == NULL);
        if (!strcmp(s.name, "epochs")) {
            seen++;
            ASSERT_STR_EQ(s.type, "int");
            ASSERT_STR_EQ(s.default_value, "1");
            sl_spec *spec = NULL;
            ASSERT_RC(sl_spec_from_json(&spec, "{\"source\": {\"synthetic\": {\"records\": 4}}, "
                                               "\"epochs\": 0}"), SL_EINVAL);
            char want[256];
            snprintf(want, sizeof want, "epochs: must be %s (got 0)", s.range);
            ASSERT_STR_EQ(sl_errmsg(), want);
        } else if (!strcmp(s.name, "source.shuffle.mode")) {
            seen++;
            ASSERT_STR_EQ(s.range, "\"auto\", \"global\" or \"window\"");
            ASSERT_STR_EQ(s.default_value, "\"auto\"");
        } else if (!strcmp(s.name, "cache_bytes")) {
            seen++;
            ASSERT_STR_EQ(s.default_value, "unset"); /* SLUICE_CACHE_BYTES decides */
        } else if (!strcmp(s.name, "device.kind")) {
            seen++;
            ASSERT_STR_EQ(s.default_value, "required");
            ASSERT_STR_EQ(s.layer, "device");
        }
    }
    ASSERT(seen == 4);
    sl_setting_info s;
    ASSERT_RC(sl_spec_param_get(n, &s), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "there are");
    ASSERT_RC(sl_spec_param_get(-1, &s), SL_EINVAL);
}
