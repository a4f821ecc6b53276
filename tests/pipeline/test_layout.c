/* test_layout.c — the layout (layout.c): exactly one of the three
 * collations runs, the stage it names is the one that collates, the spec's
 * layout keys choose the path, and explain / explain JSON say the same. */
#include "pipe_util.h"
#include "pipeline/exec.h"

#include <stdlib.h>
#include <string.h>

/* 600 memory samples, then the ops `ops` (a JSON array's items) and the
 * top-level keys `extra`. */
static sl_pipeline *layout_pipeline(const char *ops, const char *extra, int threads) {
    sl_spec *spec = pu_memory_spec(600);
    ASSERT_OK(sl_spec_set_threads(spec, threads));
    char json[512];
    const char *at = ops;
    while (*at) { /* one op at a time: items are separated by ";" */
        const char *end = strchr(at, ';');
        size_t n = end ? (size_t)(end - at) : strlen(at);
        ASSERT(n < sizeof json);
        memcpy(json, at, n);
        json[n] = '\0';
        ASSERT_OK(sl_spec_add_op_json(spec, json));
        at += n + (end ? 1 : 0);
    }
    if (extra[0]) { /* the keys go through the JSON parser (a memory source is
                       not JSON: they are taken from a spec that names a file) */
        char text[256];
        snprintf(text, sizeof text, "{\"source\": {\"path\": \"x.slr\"}, %s}", extra);
        sl_spec *parsed;
        ASSERT_OK(sl_spec_from_json(&parsed, text));
        spec->vectorize = parsed->vectorize;
        spec->read_rows = parsed->read_rows;
        spec->parallel_collate = parsed->parallel_collate;
        sl_spec_free(parsed);
    }
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    return p;
}

/* The layout's invariants, and what explain prints of it. */
static void check_layout(const sl_pipeline *p, const sl_collation *want) {
    const sl_exec *x = sl_pipeline__exec(p);
    const sl_exec_layout *L = &x->layout;
    ASSERT(L->collation == want);
    ASSERT(L->collate_stage >= 0 && L->collate_stage < x->nstages);
    const sl_stage_kind *kind = x->stage[L->collate_stage].kind;
    for (int s = 0; s < x->nstages; s++) /* only the fused one collates chunks it worked on */
        ASSERT_EQ(x->stage[s].collates, want == &sl_collate_fused && s == L->collate_stage);
    if (want == &sl_collate_fused) {
        ASSERT(kind == &sl_stage_source || kind == &sl_stage_map);
        ASSERT_EQ(L->chunk_cap >= x->env.plan->batch_size, 1);
    } else {
        ASSERT(kind == (want == &sl_collate_parallel ? &sl_stage_collate : &sl_stage_final));
        ASSERT_EQ(L->direct, 0);
        ASSERT_EQ(L->vec_first, -1);
        ASSERT_EQ(L->read_rows, 0);
        ASSERT_EQ(L->slot_col, -1);
    }
    int stacks = 0;
    for (int s = 0; s < x->nstages; s++)
        stacks += x->stage[s].kind == &sl_stage_collate;
    ASSERT_EQ(stacks, want == &sl_collate_parallel);
    char text[8192], json[4096], want_text[64], want_json[64];
    ASSERT_OK(sl_pipeline_explain(p, text, sizeof text, NULL));
    ASSERT_OK(sl_pipeline_explain_json(p, json, sizeof json, NULL));
    snprintf(want_text, sizeof want_text, "collation: %s, by stage %d (", want->key,
             L->collate_stage + 1);
    ASSERT_CONTAINS(text, want_text);
    snprintf(want_json, sizeof want_json, "\"collation\":\"%s\",\"collate_stage\":%d", want->key,
             L->collate_stage);
    ASSERT_CONTAINS(json, want_json);
}

#define CAST "{\"op\": \"cast\", \"column\": \"x\", \"dtype\": \"float32\"}"

SL_TEST(pipeline_layout__one_collation_each) {
    for (int threads = 1; threads <= 3; threads += 2) {
        /* map + batch fuse; the consumer takes batches from the map stage */
        sl_pipeline *p = layout_pipeline(CAST ";"
                                         "{\"op\": \"batch\", \"size\": 16}",
                                         "", threads);
        check_layout(p, &sl_collate_fused);
        ASSERT_EQ(sl_pipeline__exec(p)->layout.direct, 1);
        ASSERT(sl_pipeline__exec(p)->layout.vec_first >= 0); /* the cast runs once per batch */
        sl_pipeline_free(p);
        /* a take after batch keeps the final stage */
        p = layout_pipeline(CAST ";"
                            "{\"op\": \"batch\", \"size\": 16};{\"op\": \"take\", \"count\": 9}",
                            "", threads);
        check_layout(p, &sl_collate_fused);
        ASSERT_EQ(sl_pipeline__exec(p)->layout.direct, 0);
        sl_pipeline_free(p);
        /* a skip before batch: the final stage assigns, a stage copies */
        p = layout_pipeline("{\"op\": \"skip\", \"count\": 3};{\"op\": \"batch\", \"size\": 16}",
                            "", threads);
        check_layout(p, &sl_collate_parallel);
        sl_pipeline_free(p);
        /* ... unless the spec says "parallel_collate": false */
        p = layout_pipeline("{\"op\": \"skip\", \"count\": 3};{\"op\": \"batch\", \"size\": 16}",
                            "\"parallel_collate\": false", threads);
        check_layout(p, &sl_collate_final);
        sl_pipeline_free(p);
        /* batches over a chunk's most: one thread */
        p = layout_pipeline("{\"op\": \"skip\", \"count\": 3};{\"op\": \"batch\", \"size\": 2000}",
                            "", threads);
        check_layout(p, &sl_collate_final);
        sl_pipeline_free(p);
        /* no batch at all */
        p = layout_pipeline(CAST, "", threads);
        check_layout(p, &sl_collate_final);
        sl_pipeline_free(p);
    }
}

/* The layout keys are read from JSON, written back only when off, and a
 * value that is not a boolean names the key. */
SL_TEST(pipeline_layout__spec_keys) {
    static const char *const keys[] = {"vectorize", "read_rows", "parallel_collate"};
    for (int k = 0; k < 3; k++) {
        char json[256], out[1024], bad[64];
        snprintf(json, sizeof json, "{\"source\": {\"path\": \"x.slr\"}, \"%s\": false}", keys[k]);
        sl_spec *s;
        ASSERT_OK(sl_spec_from_json(&s, json));
        ASSERT_EQ(s->vectorize, k != 0);
        ASSERT_EQ(s->read_rows, k != 1);
        ASSERT_EQ(s->parallel_collate, k != 2);
        ASSERT_OK(sl_spec_to_json(s, out, sizeof out, NULL));
        snprintf(bad, sizeof bad, "\"%s\":false", keys[k]);
        ASSERT_CONTAINS(out, bad);
        for (int j = 0; j < 3; j++)
            if (j != k)
                ASSERT(!strstr(out, keys[j]));
        sl_spec_free(s);
        snprintf(json, sizeof json, "{\"source\": {\"path\": \"x.slr\"}, \"%s\": 0}", keys[k]);
        ASSERT_EQ(sl_spec_from_json(&s, json), SL_EINVAL);
        snprintf(bad, sizeof bad, "%s: must be true or false", keys[k]);
        ASSERT_CONTAINS(sl_errmsg(), bad);
    }
}
