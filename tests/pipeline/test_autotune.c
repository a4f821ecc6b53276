/* test_autotune.c — the autotune rule with chosen per-sample costs: the
 * costliest auto stage gets every core the other stages do not fully need,
 * other auto stages their rounded share, each at least one worker and at most
 * its threads, fixed stages untouched; and a running pipeline whose map
 * chunks outlast the tuning tick keeps its workers. */
#include "pipe_util.h"
#include "core/core.h"
#include "pipeline/pipeline.h"

#include <string.h>

static void shares(int ncpus, int n, const double *cost, const int *is_auto, const int *maxw,
                   int *want) {
    sl_pipeline__tune_shares(ncpus, n, cost, is_auto, maxw, want);
}

SL_TEST(pipeline_autotune__heavy_map_gets_all_cores) {
    /* 2 cores: a fixed reader needing 0.6 of a core, an auto decode stage
     * 1.4: plain rounding would give decode 1 worker; it gets both */
    double cost[2] = {300, 700};
    int is_auto[2] = {0, 1}, maxw[2] = {1, 2}, want[2];
    shares(2, 2, cost, is_auto, maxw, want);
    ASSERT_EQ(want[0], 0);
    ASSERT_EQ(want[1], 2);
    /* an auto reader too: it keeps one worker, decode still gets 2 */
    is_auto[0] = 1;
    maxw[0] = 2;
    shares(2, 2, cost, is_auto, maxw, want);
    ASSERT_EQ(want[0], 1);
    ASSERT_EQ(want[1], 2);
    /* a near-free reader (4.5 us against 700 us) */
    cost[0] = 4.5;
    shares(2, 2, cost, is_auto, maxw, want);
    ASSERT_EQ(want[0], 1);
    ASSERT_EQ(want[1], 2);
}

SL_TEST(pipeline_autotune__shares_follow_cost) {
    /* 16 cores: reader 1 (fixed), decode 10, resize 5 (auto) */
    double cost[3] = {1, 10, 5};
    int is_auto[3] = {0, 1, 1}, maxw[3] = {1, 16, 16}, want[3];
    shares(16, 3, cost, is_auto, maxw, want);
    ASSERT_EQ(want[1], 10);
    ASSERT_EQ(want[2], 5);
    /* two equal auto stages on 2 cores: one each */
    double eq[2] = {500, 500};
    int a2[2] = {1, 1}, m2[2] = {2, 2}, w2[2];
    shares(2, 2, eq, a2, m2, w2);
    ASSERT_EQ(w2[0], 1);
    ASSERT_EQ(w2[1], 1);
    /* the costliest stage is capped by its threads; a cheap auto stage
     * keeps at least one worker */
    double c3[3] = {1, 900, 0.5};
    int a3[3] = {0, 1, 1}, m3[3] = {1, 4, 8}, w3[3];
    shares(16, 3, c3, a3, m3, w3);
    ASSERT_EQ(w3[1], 4);
    ASSERT_EQ(w3[2], 1);
}

SL_TEST(pipeline_autotune__nothing_measured_changes_nothing) {
    double cost[2] = {0, 0};
    int is_auto[2] = {1, 1}, maxw[2] = {2, 2}, want[2] = {7, 7};
    shares(2, 2, cost, is_auto, maxw, want);
    ASSERT_EQ(want[0], 0);
    ASSERT_EQ(want[1], 0);
}

static int slow_sample(sl_sample *s, sl_rng *rng, void *user) {
    (void)s;
    (void)rng;
    usleep((useconds_t)(uintptr_t)user);
    return SL_OK;
}

SL_TEST(pipeline_autotune__slow_chunks_keep_their_workers) {
    /* A reader that finishes its chunks at once and a map whose chunk (one
     * batch of 64 samples of 4 ms) outlasts the 200 ms tick: a tick that sees
     * no finished map chunk must not read the map as free and park its
     * workers. Needs 2 cores to say anything (with 1 there is one worker). */
    int ncpus = sl__ncpus();
    char path[512];
    sl_test_path(path, sizeof path, "slow.slr");
    make_slr(path, 320);
    sl_spec *spec;
    ASSERT_OK(sl_spec_create(&spec));
    ASSERT_OK(sl_spec_set_source_path(spec, path));
    ASSERT_OK(sl_spec_add_map(spec, "slow", slow_sample, (void *)(uintptr_t)4000));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 64}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    int batches = 0, fewest = 1 << 30, rc;
    sl_batch *b;
    /* polling with a short timeout (as the Python binding does) makes the
     * tuning ticks fall while map chunks are still running */
    while ((rc = sl_pipeline_next_timeout(p, &b, 20)) == SL_OK) {
        if (b) {
            batches++;
            sl_batch_release(b);
        }
        sl_pipeline_stats st;
        ASSERT_OK(sl_pipeline_stats_get(p, &st));
        for (int i = 0; i < st.nstages; i++)
            if (strstr(st.stage[i].name, "map[") && st.stage[i].workers < fewest)
                fewest = st.stage[i].workers;
    }
    ASSERT_EQ(rc, SL_END);
    ASSERT_EQ(batches, 5);
    ASSERT_EQ(fewest, ncpus);
    sl_pipeline_free(p);
    sl_spec_free(spec);
}
