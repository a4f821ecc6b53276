/* test_memory.c — the memory limit: the bytes the stats report held by the
 * pools and queues stay under it during a run, the sample chunks queued
 * before the collating stage count against it, batches are the same as
 * without it, and a limit below one batch fails at create naming the need. */
#include "pipe_util.h"
#include "pipeline/exec.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

#define NSAMPLES 640
#define BATCH 64
#define NBATCH (NSAMPLES / BATCH)

/* Batches of 64 (x: uint8[28,28], label: int64), a deep prefetch, 4 workers;
 * `after` adds an op after batch (a take that keeps every batch), which
 * gives the final stage a thread of its own. */
static sl_spec *mem_spec(uint64_t limit, int after) {
    sl_spec *spec = pu_memory_spec(NSAMPLES);
    ASSERT_OK(sl_spec_set_threads(spec, 4));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 64}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"prefetch\", \"depth\": 8}"));
    if (after)
        ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"take\", \"count\": 1000}"));
    ASSERT_OK(sl_spec_set_epochs(spec, 3));
    ASSERT_OK(sl_spec_set_memory_limit(spec, limit));
    return spec;
}

/* Run every epoch, sampling the stats before each next(); digests of all
 * batches go to dig, the most bytes seen to *pool_max and *queue_max. */
static int run_sampled(sl_pipeline *p, uint64_t *dig, int cap, uint64_t *pool_max,
                       uint64_t *queue_max) {
    int n = 0;
    *pool_max = *queue_max = 0;
    for (int e = 0; e < 3; e++) {
        for (;;) {
            sl_pipeline_stats st;
            ASSERT_OK(sl_pipeline_stats_get(p, &st));
            uint64_t q = 0;
            for (int s = 0; s < st.nstages; s++)
                q += st.queue_bytes[s];
            if (st.pool_bytes > *pool_max)
                *pool_max = st.pool_bytes;
            if (q > *queue_max)
                *queue_max = q;
            ASSERT(st.pool_free_bytes <= st.pool_bytes);
            sl_batch *b;
            int rc = sl_pipeline_next(p, &b);
            if (rc == SL_END)
                break;
            ASSERT_OK(rc);
            if (n < cap)
                dig[n] = pu_digest(b);
            n++;
            usleep(2000); /* a slow consumer: the queues fill up */
            sl_batch_release(b);
        }
    }
    return n;
}

static void check_bounded(int after) {
    uint64_t want[3 * NBATCH], got[3 * NBATCH], pool_max, queue_max;
    sl_spec *spec = mem_spec(1ull << 40, after); /* far above what it needs */
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    ASSERT_EQ(run_sampled(p, want, 3 * NBATCH, &pool_max, &queue_max), 3 * NBATCH);
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    uint64_t one = st.batch_bytes, unlimited = st.batches_in_flight;
    ASSERT(one >= (uint64_t)BATCH * (784 + 8));
    uint64_t unlimited_pool = pool_max; /* the reserve: every batch in flight */
    sl_pipeline_free(p);
    sl_spec_free(spec);

    /* room for 5 batches (7 with a final stage, whose fewest is 6): fewer
     * than the 2 + 4 workers + prefetch 8 above */
    uint64_t room = after ? 7 : 5, limit = room * one + one / 2;
    ASSERT(unlimited > room);
    ASSERT(unlimited_pool > limit);
    spec = mem_spec(limit, after);
    ASSERT_OK(sl_pipeline_create(&p, spec));
    ASSERT_EQ(run_sampled(p, got, 3 * NBATCH, &pool_max, &queue_max), 3 * NBATCH);
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    ASSERT_U64_EQ(st.memory_limit, limit);
    ASSERT(st.batches_in_flight * st.batch_bytes <= limit);
    if (pool_max > limit || queue_max > limit)
        sl_test_fail(__FILE__, __LINE__, "limit %llu: pools held %llu, queues %llu",
                     (unsigned long long)limit, (unsigned long long)pool_max,
                     (unsigned long long)queue_max);
    ASSERT(pool_max >= one);
    for (int i = 0; i < 3 * NBATCH; i++)
        if (got[i] != want[i])
            sl_test_fail(__FILE__, __LINE__, "batch %d differs under the limit", i);
    sl_pipeline_free(p);
    sl_spec_free(spec);
}

SL_TEST(pipeline_memory__small_limit_bounds_pools_and_queues) { check_bounded(0); }

SL_TEST(pipeline_memory__small_limit_with_final_stage) { check_bounded(1); }

SL_TEST(pipeline_memory__below_one_batch_fails_at_create) {
    sl_spec *spec = mem_spec(10000, 0);
    sl_pipeline *p;
    ASSERT_RC(sl_pipeline_create(&p, spec), SL_ELIMIT);
    ASSERT(p == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "memory_limit 10 KB is below one batch of x+label (");
    ASSERT_CONTAINS(sl_errmsg(), "raise it or shrink the batch");
    sl_spec_free(spec);
}

SL_TEST(pipeline_memory__below_fewest_batches_fails_at_create) {
    sl_spec *spec = mem_spec(1ull << 40, 0);
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    uint64_t one = st.batch_bytes;
    sl_pipeline_free(p);
    sl_spec_free(spec);
    spec = mem_spec(2 * one, 0); /* one worker + one queued + the consumer's two: 4 */
    ASSERT_RC(sl_pipeline_create(&p, spec), SL_ELIMIT);
    ASSERT_CONTAINS(sl_errmsg(), "needs at least 4 in flight");
    sl_spec_free(spec);
}

SL_TEST(pipeline_memory__limit_in_spec_json) {
    sl_spec *spec;
    ASSERT_OK(sl_spec_from_json(&spec, "{\"source\": {\"path\": \"x.slr\"}, \"memory_limit\": "
                                       "\"512M\"}"));
    char buf[512];
    size_t len;
    ASSERT_OK(sl_spec_to_json(spec, buf, sizeof buf, &len));
    ASSERT_CONTAINS(buf, "\"memory_limit\":536870912");
    sl_spec_free(spec);
    ASSERT_OK(sl_spec_from_json(&spec, "{\"source\": {\"path\": \"x.slr\"}, \"memory_limit\": "
                                       "1048576}"));
    ASSERT_OK(sl_spec_to_json(spec, buf, sizeof buf, &len));
    ASSERT_CONTAINS(buf, "\"memory_limit\":1048576");
    sl_spec_free(spec);
    static const char *const bad[] = {"\"12Q\"", "\"\"", "0", "-5", "1.5", "true", "\"1.5\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[128];
        snprintf(json, sizeof json, "{\"source\": {\"path\": \"x.slr\"}, \"memory_limit\": %s}",
                 bad[i]);
        ASSERT_RC(sl_spec_from_json(&spec, json), SL_EINVAL);
        ASSERT_CONTAINS(sl_errmsg(), "memory_limit");
    }
}

/* A chunk stage before the collating one: a cast (x to float32, whose
 * size the plan knows) runs in the readers, a prefetch cuts the plan, a
 * cast to float64 + batch collate. 2 workers each. */
static sl_pipeline *chunk_pipeline(uint64_t limit) {
    sl_spec *spec = pu_memory_spec(NSAMPLES);
    ASSERT_OK(sl_spec_set_threads(spec, 2));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"cast\", \"column\": \"x\", "
                                        "\"dtype\": \"float32\"}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"prefetch\", \"depth\": 4}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"cast\", \"column\": \"x\", "
                                        "\"dtype\": \"float64\"}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 64}"));
    ASSERT_OK(sl_spec_set_epochs(spec, 2));
    if (limit)
        ASSERT_OK(sl_spec_set_memory_limit(spec, limit));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    return p;
}

/* The sample chunks queued before the collating stage count against the
 * limit: with room for every batch but for only one queued chunk, the
 * chunk queue is cut to one and the batches are left as they were; the
 * batches are the same. */
SL_TEST(pipeline_memory__chunks_before_batch_count) {
    sl_pipeline *p = chunk_pipeline(0);
    const sl_exec *x = sl_pipeline__exec(p);
    ASSERT(x->layout.collation == &sl_collate_fused && x->layout.collate_stage == 1 &&
           x->nstages == 2);
    int q0 = x->stage[0].qcap, w0 = x->stage[0].workers;
    ASSERT(q0 >= 2);
    uint64_t chunk = 64 * x->stage[0].sample_bytes; /* a chunk is one batch of samples */
    ASSERT(chunk >= 64 * (784 * 4 + 8)); /* float32 x and the label, counted */
    uint64_t held = x->mem.batches_held, one = x->mem.batch_bytes;
    uint64_t want[2 * NBATCH];
    ASSERT_EQ(pu_run_epoch(p, want, NBATCH), NBATCH);
    ASSERT_EQ(pu_run_epoch(p, want + NBATCH, NBATCH), NBATCH);
    sl_pipeline_free(p);

    uint64_t limit = held * one + (uint64_t)(w0 + 1) * chunk + chunk / 2;
    p = chunk_pipeline(limit);
    x = sl_pipeline__exec(p);
    ASSERT_EQ(x->stage[0].qcap, 1);
    ASSERT_EQ(x->stage[0].workers, w0);
    ASSERT_U64_EQ(x->mem.batches_held, held);
    uint64_t got[2 * NBATCH];
    ASSERT_EQ(pu_run_epoch(p, got, NBATCH), NBATCH);
    ASSERT_EQ(pu_run_epoch(p, got + NBATCH, NBATCH), NBATCH);
    for (int i = 0; i < 2 * NBATCH; i++)
        ASSERT_U64_EQ(got[i], want[i]);
    sl_pipeline_free(p);
}

/* The stats' held_bytes of a stage (its kind's memory hook), from the JSON. */
static double held_bytes(sl_pipeline *p, int stage) {
    char js[16384];
    size_t len;
    ASSERT_OK(sl_pipeline_stats_json(p, js, sizeof js, &len));
    cJSON *doc = cJSON_Parse(js);
    ASSERT(doc);
    cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "stages"), stage);
    cJSON *h = cJSON_GetObjectItemCaseSensitive(st, "held_bytes");
    ASSERT(cJSON_IsNumber(h));
    double v = h->valuedouble;
    cJSON_Delete(doc);
    return v;
}

/* A shuffle buffer's samples are memory its stage keeps between elements:
 * with the consumer one batch in, the final stage holds a full buffer
 * (the queues bound how far ahead it runs), the reader nothing; at the
 * epoch's end the buffer is drained. */
SL_TEST(pipeline_memory__shuffle_buffer_held) {
    sl_spec *spec = pu_memory_spec(20000);
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"shuffle_buffer\", \"size\": 64}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 8}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    const sl_exec *x = sl_pipeline__exec(p);
    int fin = -1;
    for (int s = 0; s < x->nstages; s++)
        if (x->stage[s].kind == &sl_stage_final)
            fin = s;
    ASSERT(fin > 0);
    uint64_t one = x->stage[fin].sample_bytes;
    ASSERT(one >= 784 + 8);
    ASSERT_EQ(held_bytes(p, fin), 0.0); /* nothing started */
    sl_batch *b;
    ASSERT_OK(sl_pipeline_next(p, &b));
    sl_batch_release(b);
    ASSERT_EQ(held_bytes(p, fin), (double)(64 * one));
    ASSERT_EQ(held_bytes(p, 0), 0.0);
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK)
        sl_batch_release(b);
    ASSERT_RC(rc, SL_END);
    ASSERT_EQ(held_bytes(p, fin), 0.0);
    sl_pipeline_free(p);
}
