/* test_stage.c — the stage interface (src/pipeline/stage.h): every kind is a
 * row of the table with a name and the hooks its place needs; every stage of
 * every layout (the three collations, direct hand-off, the merged reader)
 * is one of those rows, and explain names each by its row (the key in
 * --json, the kind's words in the text); the hand-off's words appear only
 * with a device; the saved position is the stages' parts. */
#include "pipe_util.h"
#include "pipeline/exec.h"

#include <string.h>

SL_TEST(pipeline_stage__every_kind_fills_its_row) {
    int n = 0, workers = 0;
    for (const sl_stage_kind *const *k = sl_stage__kinds; *k; k++, n++) {
        ASSERT((*k)->key && (*k)->key[0]);
        for (const sl_stage_kind *const *j = sl_stage__kinds; j != k; j++)
            ASSERT(strcmp((*j)->key, (*k)->key) != 0);
        ASSERT((*k)->explain != NULL);
        if ((*k)->chunk)
            workers++; /* a kind with threads handles chunks */
        else
            ASSERT(*k == &sl_stage_handoff); /* the one run on the consumer's thread */
        /* what autotune may change is its worker count, and only where
         * there are several workers */
        if ((*k)->tunes & SL_TUNES_WORKERS)
            ASSERT(*k != &sl_stage_seq && *k != &sl_stage_final);
    }
    ASSERT_EQ(n, 6);
    ASSERT_EQ(workers, 5);
    ASSERT(sl_stage_source.produce != NULL && sl_stage_map.produce == NULL);
    ASSERT(sl_stage_source.save != NULL && sl_stage_final.save != NULL);
    ASSERT(sl_stage_seq.memory != NULL);
}

static int in_table(const sl_stage_kind *kind) {
    for (const sl_stage_kind *const *k = sl_stage__kinds; *k; k++)
        if (*k == kind)
            return 1;
    return 0;
}

/* Build the pipeline of `ops` (';'-separated JSON ops) over a memory
 * source, check its stages against the table and explain, return it. */
static sl_pipeline *check_stages(const char *ops, const char *want_collation) {
    sl_spec *spec = pu_memory_spec(300);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", ops);
    for (char *op = strtok(buf, ";"); op; op = strtok(NULL, ";"))
        ASSERT_OK(sl_spec_add_op_json(spec, op));
    ASSERT_OK(sl_spec_set_threads(spec, 2));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    const sl_exec *x = sl_pipeline__exec(p);
    ASSERT_CONTAINS(x->layout.collation->key, want_collation);
    char text[8192], json[8192];
    ASSERT_OK(sl_pipeline_explain(p, text, sizeof text, NULL));
    ASSERT_OK(sl_pipeline_explain_json(p, json, sizeof json, NULL));
    for (int s = 0; s < x->nstages; s++) {
        const sl_stage *st = &x->stage[s];
        ASSERT(in_table(st->kind));
        ASSERT_EQ(st->index, s);
        ASSERT(st->env == &x->env);
        ASSERT(s == 0 ? st->in == NULL : st->in == &x->stage[s - 1].out);
        char want[256];
        snprintf(want, sizeof want, "  %d. %s (%s): ", s + 1, st->name, st->kind->explain(st));
        ASSERT_CONTAINS(text, want);
        snprintf(want, sizeof want, "\"name\":\"%s\",\"kind\":\"%s\"", st->name, st->kind->key);
        ASSERT_CONTAINS(json, want);
    }
    ASSERT(x->handoff.kind == &sl_stage_handoff && x->handoff.in == &x->stage[x->nstages - 1].out);
    ASSERT(strstr(text, "then the consumer's thread") == NULL); /* no device */
    return p;
}

SL_TEST(pipeline_stage__every_layout_is_rows_of_the_table) {
    const char *cast = "{\"op\": \"cast\", \"column\": \"x\", \"dtype\": \"float32\"}";
    char ops[512];
    /* fused, direct: the readers take the map (memory source) and collate */
    snprintf(ops, sizeof ops, "%s;{\"op\": \"batch\", \"size\": 16}", cast);
    sl_pipeline *p = check_stages(ops, "fused");
    const sl_exec *x = sl_pipeline__exec(p);
    ASSERT(x->layout.direct && x->nstages == 1 && x->stage[0].kind == &sl_stage_source);
    ASSERT(x->stage[0].collates);
    sl_pipeline_free(p);
    /* fused with a final stage (take after batch) */
    snprintf(ops, sizeof ops, "%s;{\"op\": \"batch\", \"size\": 16};{\"op\": \"take\", \"count\": 5}",
             cast);
    p = check_stages(ops, "fused");
    x = sl_pipeline__exec(p);
    ASSERT(!x->layout.direct && x->stage[x->nstages - 1].kind == &sl_stage_final);
    sl_pipeline_free(p);
    /* parallel: a skip before batch; a sequential stage between two maps */
    snprintf(ops, sizeof ops, "%s;{\"op\": \"skip\", \"count\": 3};%s;{\"op\": \"batch\", \"size\": 16}",
             cast, "{\"op\": \"cast\", \"column\": \"x\", \"dtype\": \"float64\"}");
    p = check_stages(ops, "parallel");
    x = sl_pipeline__exec(p);
    int kinds[6] = {0};
    for (int s = 0; s < x->nstages; s++)
        for (int k = 0; sl_stage__kinds[k]; k++)
            kinds[k] += x->stage[s].kind == sl_stage__kinds[k];
    ASSERT_EQ(kinds[0], 1); /* source */
    ASSERT_EQ(kinds[1], 1); /* map (the first map merged into the readers) */
    ASSERT_EQ(kinds[2], 1); /* seq: the skip */
    ASSERT_EQ(kinds[3], 1); /* final */
    ASSERT_EQ(kinds[4], 1); /* collate */
    sl_pipeline_free(p);
    /* final: no batch */
    p = check_stages(cast, "final");
    sl_pipeline_free(p);
}

/* With a device the hand-off says what it does (the host backend stands in
 * for a GPU: the same upload through the same ring). */
SL_TEST(pipeline_stage__handoff_explains_the_device) {
    sl_spec *spec = pu_memory_spec(64);
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 16}"));
    ASSERT_OK(sl_spec_set_device(spec, SL_DEVICE_CPU, 0, 0));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    char text[8192];
    ASSERT_OK(sl_pipeline_explain(p, text, sizeof text, NULL));
    ASSERT_CONTAINS(text, "then the consumer's thread copies each batch to the device\n");
    sl_pipeline_free(p);
}

/* The position saved after a batch is each stage's part: the source's
 * stream position and the final stage's counters, with the batch's epoch
 * and index; a pipeline restored from it goes on with the same batches. */
SL_TEST(pipeline_stage__saved_position_is_the_stages_parts) {
    sl_spec *spec = pu_memory_spec(300);
    ASSERT_OK(sl_spec_set_shuffle(spec, 1));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"skip\", \"count\": 2}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 16}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"take\", \"count\": 9}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    const sl_exec *x = sl_pipeline__exec(p);
    sl_batch *b;
    for (int i = 0; i < 4; i++) {
        ASSERT_OK(sl_pipeline_next(p, &b));
        sl_resume at;
        memset(&at, 0xff, sizeof at);
        sl_exec__save(x, b, &at);
        ASSERT_U64_EQ(at.epoch, 0);
        ASSERT_U64_EQ(at.batch, (uint64_t)i + 1);
        ASSERT_U64_EQ(at.pos, 2 + 16 * ((uint64_t)i + 1)); /* the skipped two, then batches */
        ASSERT_EQ(at.counters[0], 2);                     /* the skip's */
        ASSERT_EQ(at.counters[1], i + 1);                 /* the take's, after batch */
        sl_batch_release(b);
    }
    char state[512];
    ASSERT_OK(sl_pipeline_save_state(p, state, sizeof state, NULL));
    uint64_t want[5];
    ASSERT_EQ(pu_run_epoch(p, want, 5), 5);
    sl_pipeline_free(p);
    ASSERT_OK(sl_pipeline_create(&p, spec));
    ASSERT_OK(sl_pipeline_restore_state(p, state));
    uint64_t got[5];
    ASSERT_EQ(pu_run_epoch(p, got, 5), 5);
    for (int i = 0; i < 5; i++)
        ASSERT_U64_EQ(got[i], want[i]);
    sl_pipeline_free(p);
    sl_spec_free(spec);
}
