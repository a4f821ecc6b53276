/* test_autotune.c — the autotune rule with chosen per-sample costs: the
 * costliest auto stage gets every core the other stages do not fully need,
 * other auto stages their rounded share, each at least one worker and at most
 * its threads, fixed stages untouched; and a running pipeline whose map
 * chunks outlast the tuning tick keeps its workers. */
#include "pipe_util.h"
#include "core/core.h"
#include "pipeline/exec.h"

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

/* ---- the check after a move ---------------------------------------------------------- */

static const int maxw2[2] = {3, 3}, maxw3[3] = {3, 3, 3};

SL_TEST(pipeline_autotune__a_move_that_slows_is_undone) {
    sl_tune t;
    memset(&t, 0, sizeof t);
    int cur[2] = {1, 1}, want[2] = {2, 1}, next[2];
    uint64_t now = 1000000000ull;
    /* the rule asks for a move: made, measured against 100 samples/s */
    ASSERT_EQ(sl_pipeline__tune_step(&t, 2, cur, want, maxw2, -1, 100, now, next), 1);
    ASSERT_EQ(next[0], 2);
    ASSERT_EQ(next[1], 1);
    /* the interval after it is 20% slower: undone */
    int moved[2] = {2, 1};
    ASSERT_EQ(sl_pipeline__tune_step(&t, 2, moved, want, maxw2, -1, 80, now + 200000000ull, next), 1);
    ASSERT_EQ(next[0], 1);
    ASSERT_EQ(next[1], 1);
    ASSERT_EQ(t.undone, 1);
    /* the rule asks again: refused while the ban lasts */
    ASSERT_EQ(sl_pipeline__tune_step(&t, 2, cur, want, maxw2, -1, 100, now + 400000000ull, next), 0);
    ASSERT_EQ(next[0], 2); /* next[] holds what the rule asked; nothing applied */
    ASSERT_EQ(sl_pipeline__tune_step(&t, 2, cur, want, maxw2, -1, 100, now + SL_TUNE_BAN_NS, next), 0);
    /* another move is not banned */
    int other[2] = {1, 2};
    ASSERT_EQ(sl_pipeline__tune_step(&t, 2, cur, other, maxw2, -1, 100, now + 600000000ull, next), 1);
    ASSERT_EQ(next[1], 2);
    ASSERT_EQ(sl_pipeline__tune_step(&t, 2, other, other, maxw2, -1, 100, now + 800000000ull, next), 0);
    /* after the ban the first move may be tried again */
    ASSERT_EQ(sl_pipeline__tune_step(&t, 2, other, want, maxw2, -1, 100,
                                     now + 200000000ull + SL_TUNE_BAN_NS + 1, next), 1);
    ASSERT_EQ(next[0], 2);
    ASSERT_EQ(next[1], 1);
}

SL_TEST(pipeline_autotune__a_move_that_helps_or_holds_is_kept) {
    sl_tune t;
    memset(&t, 0, sizeof t);
    int cur[3] = {1, 1, 1}, want[3] = {0, 2, 1}, next[3];
    ASSERT_EQ(sl_pipeline__tune_step(&t, 3, cur, want, maxw3, -1, 100, 1, next), 1);
    ASSERT_EQ(next[0], 1); /* 0: not an auto stage, kept */
    ASSERT_EQ(next[1], 2);
    int moved[3] = {1, 2, 1};
    /* within the noise margin (-9%): kept */
    ASSERT_EQ(sl_pipeline__tune_step(&t, 3, moved, want, maxw3, -1, 91, 2, next), 0);
    ASSERT_EQ(t.undone, 0);
    /* steady: nothing to do, and no check pending */
    ASSERT_EQ(sl_pipeline__tune_step(&t, 3, moved, want, maxw3, -1, 50, 3, next), 0);
    ASSERT_EQ(t.trial, 0);
    /* a move from a start with nothing measured (rate 0) is never undone */
    memset(&t, 0, sizeof t);
    ASSERT_EQ(sl_pipeline__tune_step(&t, 3, cur, want, maxw3, -1, 0, 1, next), 1);
    ASSERT_EQ(sl_pipeline__tune_step(&t, 3, moved, want, maxw3, -1, 0, 2, next), 0);
}

/* Past the rule: after a few steady ticks one worker more on the costliest
 * stage, measured over two intervals against the steady ticks before it and
 * kept only when faster by the gain; later one fewer again, kept unless it
 * costs; a try not kept waits longer each time. */
static int steps(sl_tune *t, int k, const int *cur, const int *want, double rate, uint64_t *now,
                 int *next) {
    int moved = 0;
    for (int i = 0; i < k; i++)
        moved += sl_pipeline__tune_step(t, 2, cur, want, maxw2, 1, rate, *now += 200000000ull,
                                        next);
    return moved;
}

SL_TEST(pipeline_autotune__exploration_keeps_only_what_helps) {
    sl_tune t;
    memset(&t, 0, sizeof t);
    int cur[2] = {1, 2}, want[2] = {1, 2}, up[2] = {1, 3}, next[2];
    uint64_t now = 1;
    ASSERT_EQ(steps(&t, SL_TUNE_STEADY - 1, cur, want, 100, &now, next), 0);
    ASSERT_EQ(steps(&t, 1, cur, want, 100, &now, next), 1);
    ASSERT_EQ(next[0], 1);
    ASSERT_EQ(next[1], 3); /* over the budget of 2: a trial */
    /* 20% faster for one interval, then 4% slower: a mean of +8%, under the
     * gain: not worth a thread over the budget */
    ASSERT_EQ(steps(&t, 1, up, want, 120, &now, next), 0);
    ASSERT_EQ(steps(&t, 1, up, want, 96, &now, next), 1);
    ASSERT_EQ(next[1], 2);
    ASSERT_EQ(t.extra[1], 0);
    ASSERT_EQ(t.kept, 0);
    /* no new try before the wait is over */
    ASSERT_EQ(steps(&t, (int)(SL_TUNE_EXPLORE_WAIT_NS / 200000000ull) - 1, cur, want, 100, &now,
                    next), 0);
    ASSERT_EQ(steps(&t, 1, cur, want, 100, &now, next), 1);
    ASSERT_EQ(next[1], 3);
    /* 20% faster over both intervals: kept, and the rule's answer now
     * carries the extra worker */
    ASSERT_EQ(steps(&t, 2, up, want, 120, &now, next), 0);
    ASSERT_EQ(t.extra[1], 1);
    ASSERT_EQ(t.kept, 1);
    ASSERT_EQ(steps(&t, 1, up, want, 120, &now, next), 0);
    ASSERT_EQ(next[1], 3);
    /* steady again: one fewer is tried; 5% slower, so the extra stays */
    ASSERT_EQ(steps(&t, SL_TUNE_STEADY - 1, up, want, 120, &now, next), 1);
    ASSERT_EQ(next[1], 2);
    ASSERT_EQ(steps(&t, 2, cur, want, 114, &now, next), 1);
    ASSERT_EQ(next[1], 3);
    ASSERT_EQ(t.extra[1], 1);
    /* a failure after a kept try waits 2 s; a second in a row 4 s */
    int wait_ticks = (int)(SL_TUNE_EXPLORE_WAIT_NS / 200000000ull);
    ASSERT_EQ(steps(&t, wait_ticks - 1, up, want, 120, &now, next), 0);
    ASSERT_EQ(steps(&t, 1, up, want, 120, &now, next), 1);
    ASSERT_EQ(next[1], 2);
    ASSERT_EQ(steps(&t, 2, cur, want, 100, &now, next), 1); /* 17% slower: back to 3 */
    ASSERT_EQ(steps(&t, 2 * wait_ticks - 1, up, want, 120, &now, next), 0);
    ASSERT_EQ(steps(&t, 1, up, want, 120, &now, next), 1);
    /* shedding that costs nothing is kept: back to the rule's count */
    ASSERT_EQ(steps(&t, 2, cur, want, 119, &now, next), 0);
    ASSERT_EQ(t.extra[1], 0);
    /* never past the threads started */
    memset(&t, 0, sizeof t);
    int full[2] = {1, 3};
    ASSERT_EQ(steps(&t, 5 * SL_TUNE_STEADY, full, full, 100, &now, next), 0);
}

/* ---- end to end: the workers go to the expensive stage --------------------------------- */

/* Take batches for `secs` seconds (epochs repeat); most[i] is the most
 * workers stage stages[i] had at any batch after the first `after` seconds. */
static void drive_tracking(sl_pipeline *p, double secs, double after, const int *stages,
                           int *most, int k) {
    for (int i = 0; i < k; i++)
        most[i] = 0;
    double t0 = pu_now();
    sl_batch *b;
    sl_pipeline_stats st;
    while (pu_now() - t0 < secs) {
        int rc = sl_pipeline_next(p, &b);
        if (rc == SL_END)
            continue; /* the next epoch */
        ASSERT_OK(rc);
        sl_batch_release(b);
        ASSERT_OK(sl_pipeline_stats_get(p, &st));
        if (pu_now() - t0 <= after)
            continue;
        for (int i = 0; i < k; i++)
            if (st.stage[stages[i]].workers > most[i])
                most[i] = st.stage[stages[i]].workers;
    }
}

static int stage_of(const sl_pipeline_stats *st, const char *name) {
    for (int i = 0; i < st->nstages; i++)
        if (strstr(st->stage[i].name, name))
            return i;
    return -1;
}

/* Two map stages (a prefetch op cuts them) costing 10:1 per sample: the
 * expensive one, which starts on an even share of the cores, ends up with
 * all of them and the cheap one with one worker. */
SL_TEST(pipeline_autotune__expensive_stage_gets_the_workers) {
    int ncpus = sl__ncpus();
    sl_spec *spec = pu_memory_spec(100000);
    ASSERT_OK(sl_spec_set_epochs(spec, 100));
    ASSERT_OK(sl_spec_add_map(spec, "heavy", pu_spin_map, (void *)(uintptr_t)200));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"prefetch\", \"depth\": 4}"));
    ASSERT_OK(sl_spec_add_map(spec, "light", pu_spin_map, (void *)(uintptr_t)20));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 8}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    int heavy = stage_of(&st, "heavy"), light = stage_of(&st, "light");
    ASSERT(heavy >= 0 && light >= 0 && heavy != light);
    if (ncpus >= 2)
        ASSERT(st.stage[heavy].workers < ncpus); /* an even share to start */
    const int tracked[2] = {heavy, light};
    int most[2];
    drive_tracking(p, 1.5, 0.5, tracked, most, 2);
    int most_heavy = most[0], most_light = most[1];
    /* every core (and maybe one worker more, while exploration tries it) */
    ASSERT(most_heavy >= ncpus && most_heavy <= ncpus + 1);
    ASSERT_EQ(most_light, 1);
    ASSERT(sl_pipeline__exec(p)->tune.moves >= (ncpus >= 2 ? 1 : 0));
    sl_pipeline_free(p);
    sl_spec_free(spec);
}

static int keep_all(const sl_sample *s, void *user) {
    (void)s;
    (void)user;
    return 1;
}

/* Parallel collation is tuned too: with a filter left (no map + batch
 * fusion) and large samples, copying into the batch is the costly stage and
 * is given the cores (from an even share at the start). */
SL_TEST(pipeline_autotune__collate_stage_gets_the_workers) {
    int ncpus = sl__ncpus();
    const int64_t n = 512, row = 64 * 1024;
    sl_tensor col;
    int64_t shape[2] = {n, row};
    ASSERT_OK(sl_tensor_alloc(&col, SL_U8, 2, shape));
    for (int64_t i = 0; i < n * row; i += 4096)
        ((uint8_t *)col.data)[i] = (uint8_t)(i / 4096);
    const char *names[1] = {"x"};
    sl_spec *spec;
    ASSERT_OK(sl_spec_create(&spec));
    ASSERT_OK(sl_spec_set_source_columns(spec, 1, names, &col));
    sl_tensor_release(&col);
    ASSERT_OK(sl_spec_set_epochs(spec, 1000));
    ASSERT_OK(sl_spec_add_filter(spec, "keep", keep_all, NULL));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 16}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    int coll = stage_of(&st, "collate(batch 16)"), src = stage_of(&st, "source");
    ASSERT(coll >= 0 && src >= 0);
    ASSERT(sl_pipeline__exec(p)->stage[coll].autotune);
    if (ncpus >= 2)
        ASSERT(st.stage[coll].workers < ncpus); /* an even share to start */
    int most;
    drive_tracking(p, 1.5, 0.0, &coll, &most, 1);
    /* the move is made; whether it stays is the measured check's call
     * (copying 64 KB samples may be bound by memory bandwidth, not cores) */
    ASSERT(most >= ncpus);
    sl_pipeline_free(p);
    sl_spec_free(spec);
}

/* Every 8th batch of 8 is slow (its first sample sleeps 4 ms): the worker
 * making it holds the queue's head while the others fill the slots after it
 * and wait, and the consumer waits for the head. */
static int slow_every_8th_batch(sl_sample *s, sl_rng *rng, void *user) {
    (void)rng;
    (void)user;
    if (s->index % 64 == 0)
        usleep(4000);
    return SL_OK;
}

static sl_pipeline *order_stall_pipeline(void) {
    sl_spec *spec = pu_memory_spec(6400);
    ASSERT_OK(sl_spec_set_epochs(spec, 1000));
    ASSERT_OK(sl_spec_add_map(spec, "slow8", slow_every_8th_batch, NULL));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 8}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    return p;
}

/* Workers that wait on order while the consumer waits for data get the
 * consumer's queue's spare slots (small batches: they were made and
 * reserved at create); a consumer that is the bottleneck does not cause it,
 * though its workers wait for room all the time. */
SL_TEST(pipeline_autotune__order_stalls_deepen_the_queue) {
    for (int slow_consumer = 0; slow_consumer < 2; slow_consumer++) {
        sl_pipeline *p = order_stall_pipeline();
        sl_exec *x = sl_pipeline__exec(p);
        sl_stage *last = &x->stage[x->nstages - 1];
        ASSERT(last->autotune);
        ASSERT(last->out.cap > (size_t)last->qcap); /* the spare's slots exist */
        ASSERT_EQ(sl_queue__limit(&last->out), (size_t)last->qcap);
        double t0 = pu_now();
        sl_batch *b;
        while (pu_now() - t0 < 1.5) {
            int rc = sl_pipeline_next(p, &b);
            if (rc == SL_END)
                continue;
            ASSERT_OK(rc);
            sl_batch_release(b);
            if (slow_consumer)
                usleep(6000); /* longer than the slow batch: it never waits */
        }
        if (slow_consumer) {
            ASSERT_EQ(x->tune.deep, 0);
        } else {
            ASSERT_EQ(x->tune.deep, 1);
            ASSERT_EQ(sl_queue__limit(&last->out), last->out.cap);
        }
        sl_pipeline_free(p);
    }
}
