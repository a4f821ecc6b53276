/* test_verdict.c — constructed pipelines, each bound by one thing, must get
 * that verdict (F reading, P processing, G consumer) with a hint that fits;
 * and autotune must move workers toward the stage that bounds the run.
 *
 * The slow reader: a memory source whose read sleeps, with the memory flag
 * cleared so the executor treats it as storage (a reader-only stage, its
 * ops in a stage of their own). Sleeping makes it deterministic: its busy
 * time is waiting, not CPU, whatever else runs on the machine. */
#include "pipe_util.h"
#include "core/core.h"
#include "pipeline/exec.h"

#include <string.h>

static sl_source_vtbl slow_vt;
static int (*plain_read)(sl_source *, sl_source_cursor *, uint64_t, sl_sample *);
static _Atomic unsigned read_sleep_us;

static int slow_read(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *out) {
    unsigned us = atomic_load(&read_sleep_us);
    if (us)
        usleep(us);
    return plain_read(src, cur, i, out);
}

/* A memory spec of n samples read like storage, `us` microseconds a read. */
static sl_spec *storage_spec(uint64_t n, unsigned us) {
    sl_spec *spec = pu_memory_spec(n);
    slow_vt = *spec->mem->vt;
    plain_read = slow_vt.read;
    slow_vt.read = slow_read;
    slow_vt.flags &= ~SL_SOURCE_F_MEMORY;
    spec->mem->vt = &slow_vt;
    atomic_store(&read_sleep_us, us);
    return spec;
}

static int touch_map(sl_sample *s, sl_rng *rng, void *user) {
    (void)rng;
    (void)user;
    return s->ncols == 2 ? SL_OK : SL_EINVAL;
}

static void run_batches(sl_pipeline *p, int n, unsigned consumer_sleep_us) {
    sl_batch *b;
    for (int i = 0; i < n; i++) {
        ASSERT_OK(sl_pipeline_next(p, &b));
        sl_batch_release(b);
        if (consumer_sleep_us)
            usleep(consumer_sleep_us);
    }
}

static int stage_workers(const sl_pipeline_stats *st, const char *part) {
    for (int i = 0; i < st->nstages; i++)
        if (strstr(st->stage[i].name, part))
            return st->stage[i].workers;
    sl_test_fail(__FILE__, __LINE__, "no stage named like '%s'", part);
}

SL_TEST(pipeline_verdict__reading_bound_is_F) {
    /* reads of 500 us against a trivial map: the reader bounds the run and,
     * since its busy time is sleeping, the hint is about reads in flight */
    sl_spec *spec = storage_spec(4000, 500);
    ASSERT_OK(sl_spec_add_map(spec, "touch", touch_map, NULL));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 16}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    run_batches(p, 40, 0);
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    ASSERT_EQ(st.bound, 'F');
    ASSERT_STR_EQ(st.bound_stage, "source");
    ASSERT_CONTAINS(st.verdict, "F: bound by reading");
    ASSERT_CONTAINS(st.verdict, "waiting for storage");
    ASSERT_CONTAINS(st.verdict, "readahead");
    ASSERT(st.cpu_budget >= 1);
    sl_pipeline_free(p);
    sl_spec_free(spec);
}

SL_TEST(pipeline_verdict__processing_bound_is_P) {
    /* a map computing 200 us a sample behind a free reader */
    sl_spec *spec = storage_spec(4000, 0);
    ASSERT_OK(sl_spec_add_map(spec, "spin", pu_spin_map, (void *)(uintptr_t)200));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 16}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    run_batches(p, 30, 0);
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    ASSERT_EQ(st.bound, 'P');
    ASSERT_CONTAINS(st.bound_stage, "map 'spin'");
    /* either every core is busy (the machine) or the stage is (more workers
     * or cheaper ops); never a reading hint */
    ASSERT(strstr(st.verdict, "the machine is the limit") ||
           strstr(st.verdict, "P: bound by processing in stage"));
    ASSERT(strstr(st.verdict, "source.parallel") == NULL);
    for (int i = 0; i < st.nstages; i++)
        if (strstr(st.stage[i].name, "spin"))
            ASSERT(st.stage[i].cpu_us > 100); /* CPU, not waiting */
    sl_pipeline_free(p);
    sl_spec_free(spec);
}

SL_TEST(pipeline_verdict__consumer_bound_is_G) {
    sl_spec *spec = storage_spec(4000, 0);
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 16}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    run_batches(p, 25, 20000);
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    ASSERT_EQ(st.bound, 'G');
    ASSERT_STR_EQ(st.bound_stage, "consumer");
    ASSERT_CONTAINS(st.verdict, "already fast enough");
    sl_pipeline_free(p);
    sl_spec_free(spec);
}

/* Autotune gives the bounding stage every core the other does not need:
 * with sleeping reads the reader gets them, with a computing map the map. */
SL_TEST(pipeline_verdict__autotune_moves_workers_to_the_bound) {
    int ncpus = sl__ncpus();
    for (int heavy_map = 0; heavy_map < 2; heavy_map++) {
        sl_spec *spec = storage_spec(100000, heavy_map ? 0 : 400);
        if (heavy_map)
            ASSERT_OK(sl_spec_add_map(spec, "spin", pu_spin_map, (void *)(uintptr_t)400));
        else
            ASSERT_OK(sl_spec_add_map(spec, "touch", touch_map, NULL));
        ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 8}"));
        sl_pipeline *p;
        ASSERT_OK(sl_pipeline_create(&p, spec));
        /* at least a few tuning ticks (200 ms) */
        double t0 = pu_now();
        while (pu_now() - t0 < 1.0)
            run_batches(p, 1, 0);
        sl_pipeline_stats st;
        ASSERT_OK(sl_pipeline_stats_get(p, &st));
        int src = stage_workers(&st, "source"), map = stage_workers(&st, "map[");
        /* every core; one worker more when exploration measured that it
         * helps (other processes on the machine) or is trying it now */
        if (heavy_map) {
            ASSERT(map >= ncpus && map <= ncpus + 1);
            ASSERT_EQ(src, 1);
        } else {
            ASSERT(src >= ncpus && src <= ncpus + 1);
            ASSERT_EQ(map, 1);
        }
        sl_pipeline_free(p);
        sl_spec_free(spec);
    }
}

/* User names reach the trace (thread names carry stage names): quotes,
 * backslashes and control characters are escaped, so the trace parses. */
SL_TEST(pipeline_verdict__trace_escapes_user_names) {
    sl_spec *spec = pu_memory_spec(64);
    ASSERT_OK(sl_spec_add_map(spec, "say \"hi\"\\\n", touch_map, NULL));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 8}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    ASSERT_OK(sl_pipeline_trace_enable(p, 1000));
    run_batches(p, 8, 0);
    size_t len;
    ASSERT_OK(sl_pipeline_trace_json(p, NULL, 0, &len));
    char *text = malloc(len + 1);
    ASSERT_OK(sl_pipeline_trace_json(p, text, len + 1, &len));
    cJSON *doc = cJSON_Parse(text);
    ASSERT(doc != NULL);
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
    int named = 0;
    for (const cJSON *e = ev ? ev->child : NULL; e; e = e->next) {
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        const cJSON *nm = args ? cJSON_GetObjectItemCaseSensitive(args, "name") : NULL;
        if (cJSON_IsString(nm) && strstr(nm->valuestring, "say \"hi\"\\\n"))
            named++;
    }
    ASSERT(named >= 1);
    cJSON_Delete(doc);
    free(text);
    sl_pipeline_free(p);
    sl_spec_free(spec);
}
