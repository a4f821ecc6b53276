/*
 * autotune.c — worker counts for stages marked "parallel": "auto" (readers,
 * per-sample stages and the parallel collating stage), and the chunk size.
 *
 * Rule: at each tick (every ~200 ms, once at least MIN_BATCHES batches went
 * out or a second passed; checked from sl_pipeline_next), measure each
 * parallel stage's cost per sample over the last interval (busy time /
 * samples). A steady pipeline needs cores in proportion to cost: stage s
 * needs need_s = cores * cost_s / (sum of all stages' costs). Workers are
 * whole threads, so rounding every share loses cores: with a reader needing
 * 0.6 of a core and a decode stage 1.4 on 2 cores, plain rounding gives the
 * decode stage 1 worker and leaves most of a core idle. So the costliest auto
 * stage gets every core the others do not fully need
 * (cores - floor(sum of the other stages' needs)), other auto stages get
 * their rounded share; each gets at least one worker and at most its
 * threads; stages with a fixed count keep it. A light stage's worker then
 * sleeps part of the time on a core the heavy stage shares. Sequential
 * stages keep their one thread and are left out of the shares. A stage that
 * finished no chunk during a tick
 * keeps its last cost (a chunk of slow samples can outlast the tick: reading
 * it as free would park the workers of the very stage that needs them); with
 * no cost measured yet, nothing changes.
 *
 * Check after a move (sl_pipeline__tune_step): the rule is a model, and a
 * model can be wrong (a stage whose cost grows with its worker count, cores
 * taken by other processes). The samples/s of the interval before a move is
 * kept; when the interval after it is more than SL_TUNE_UNDO_DROP slower, the
 * move is undone and not tried again for SL_TUNE_BAN_NS (then the rule may
 * ask for it again: costs change between epochs). Only moves are checked, so
 * a steady pipeline is never disturbed by noise.
 *
 * Exploration past the rule: the rule never gives more workers than cores,
 * but a third thread on two cores can pay (workers that wait on storage or
 * locks; other processes on the machine taking a share of the cores). After
 * SL_TUNE_STEADY ticks without a move, the costliest auto stage gets one
 * worker more (a spare past the budget, started with the others and
 * parked: sl_exec__tune_spare; a thread started late would change the
 * thread count and the pools' high-water mark mid-run), for
 * SL_TUNE_TRIAL_TICKS intervals; it stays only when their mean is
 * SL_TUNE_EXPLORE_GAIN above the mean of the steady ticks before it (a tick
 * of a shared machine moves by 10-15%: one interval, or a small gain,
 * decides nothing). Once kept, one fewer is tried the same way and kept
 * unless SL_TUNE_SHED_LOSS slower. A try not kept waits 2, 4, 8, then 16 s
 * before the next, so a steady pipeline pays for exploring a few percent of
 * its time at most. Oversubscription is thus a measured decision. No
 * exploration while the consumer bounds the run (it waited under 10% of
 * the interval): more workers cannot help there.
 *
 * Auto stages start all their threads once (up to the core count) and park
 * the ones above the current share, so a change costs a condition-variable
 * broadcast, not a thread start.
 *
 * The chunk size (samples per queue element) is set so that a chunk carries
 * about 200 us of per-sample work: large chunks for cheap samples (queue
 * cost amortised), small ones for expensive samples (work spreads across
 * workers and the first batch comes early). Chunking never changes results.
 */
#include "pipeline/exec.h"

#include <string.h>

#define TICK_NS 200000000ull
/* A tick waits for this many batches (so the rate of a pipeline of large
 * batches is not a count of one or two), or for MAX_TICK_NS. */
#define MIN_BATCHES 4
#define MAX_TICK_NS 1000000000ull
#define CHUNK_WORK_NS 200000.0

void sl_pipeline__tune_shares(int ncpus, int n, const double *cost, const int *is_auto,
                              const int *max_workers, int *want) {
    double total = 0;
    int dom = -1;
    for (int s = 0; s < n; s++) {
        want[s] = 0;
        if (cost[s] > 0)
            total += cost[s];
        if (is_auto[s] && (dom < 0 || cost[s] > cost[dom]))
            dom = s;
    }
    if (total <= 0 || dom < 0)
        return;
    double others = 0;
    for (int s = 0; s < n; s++)
        if (s != dom && cost[s] > 0)
            others += ncpus * cost[s] / total;
    for (int s = 0; s < n; s++) {
        if (!is_auto[s])
            continue;
        int w = s == dom ? ncpus - (int)others
                         : (int)(ncpus * (cost[s] > 0 ? cost[s] : 0) / total + 0.5);
        if (w < 1)
            w = 1;
        if (w > max_workers[s])
            w = max_workers[s];
        want[s] = w;
    }
}

static int same(int n, const int *a, const int *b) {
    for (int s = 0; s < n; s++)
        if (a[s] != b[s])
            return 0;
    return 1;
}

int sl_pipeline__tune_step(sl_tune *t, int n, const int *cur, const int *want,
                           const int *max_workers, int top, double rate, uint64_t now_ns,
                           int *next) {
    for (int s = 0; s < n; s++) {
        next[s] = want[s] > 0 ? want[s] + t->extra[s] : cur[s];
        if (next[s] > max_workers[s])
            next[s] = max_workers[s];
        if (next[s] < 1)
            next[s] = 1;
    }
    if (t->exploring) {
        /* an exploration is measured over SL_TUNE_TRIAL_TICKS intervals:
         * one interval of a noisy machine decides nothing */
        t->trial_sum += rate;
        if (--t->exploring > 0)
            return 0;
        t->trial = 0;
        t->steady = 0;
        double mean = t->trial_sum / SL_TUNE_TRIAL_TICKS;
        int up = cur[top] > t->prev[top];
        int keep = up ? mean >= (1.0 + SL_TUNE_EXPLORE_GAIN) * t->base_rate
                      : mean >= (1.0 - SL_TUNE_SHED_LOSS) * t->base_rate;
        if (keep) {
            t->kept++;
            t->failed = 0;
            return 0;
        }
        t->extra[top] += up ? -1 : 1;
        memcpy(next, t->prev, (size_t)n * sizeof *next);
        t->explore_after =
            now_ns + (SL_TUNE_EXPLORE_WAIT_NS << (t->failed < 3 ? t->failed : 3));
        t->failed++;
        return 1;
    }
    if (t->trial) {
        t->trial = 0;
        t->steady = 0;
        if (rate < (1.0 - SL_TUNE_UNDO_DROP) * t->base_rate) {
            /* the move made things slower: back, and not again for a while */
            memcpy(t->banned, cur, (size_t)n * sizeof *cur);
            memcpy(next, t->prev, (size_t)n * sizeof *next);
            t->ban_until = now_ns + SL_TUNE_BAN_NS;
            t->undone++;
            return 1;
        }
        /* kept; a further move waits for the next interval, measured with
         * these workers */
        return 0;
    }
    if (!same(n, next, cur)) {
        if (now_ns < t->ban_until && same(n, next, t->banned))
            return 0;
        memcpy(t->prev, cur, (size_t)n * sizeof *cur);
        t->base_rate = rate;
        t->trial = 1;
        t->moves++;
        t->steady = 0;
        return 1;
    }
    t->recent[t->steady++ % SL_TUNE_STEADY] = rate;
    if (t->steady < SL_TUNE_STEADY || now_ns < t->explore_after || top < 0 || top >= n ||
        want[top] <= 0 || rate <= 0)
        return 0;
    /* steady: try one worker fewer where an exploration left one more, else
     * one more (over the core budget: only kept when measured to help) */
    int d = t->extra[top] > 0 ? -1 : 1;
    if (cur[top] + d < 1 || cur[top] + d > max_workers[top]) {
        t->explore_after = now_ns + SL_TUNE_EXPLORE_WAIT_NS;
        return 0;
    }
    memcpy(t->prev, cur, (size_t)n * sizeof *cur);
    t->extra[top] += d;
    next[top] = cur[top] + d;
    /* against the mean of the last SL_TUNE_STEADY steady ticks */
    t->base_rate = 0;
    for (int i = 0; i < SL_TUNE_STEADY; i++)
        t->base_rate += t->recent[i] / SL_TUNE_STEADY;
    t->steady = 0;
    t->trial = 1;
    t->exploring = SL_TUNE_TRIAL_TICKS;
    t->trial_sum = 0;
    t->explored++;
    return 1;
}

/* The spare is not in the memory plan: while parked it holds nothing, and a
 * stage making large batches (the image pipeline's 38.5 MB) gets none (see
 * below). Where it makes small batches, its batch and its slots are in the
 * batch pool's reserve (reserve_batch_buffers runs after this), so that they
 * are cached, not made and unmapped per batch. No spare where the memory
 * limit already cut the stage, or where one more batch would not fit under
 * it.
 *
 * Queue depth goes with it. The last stage's output queue (the batches
 * ready for the consumer) holds `qcap` batches; its workers push in order,
 * so with more workers than slots the one holding batch head + qcap waits
 * for the consumer instead of working: 3 readers of Fashion-MNIST (batch
 * 256) behind 2 slots ran 11-20% slower than 2 readers, behind 4 no faster,
 * behind 8 8-9% faster (2 cores at load ~2); 2 readers gain nothing
 * from 8 slots. So that queue gets SPARE_SLOTS more slots than its depth,
 * unused (its limit, sl_queue__set_limit) until the spare works: the depth is
 * then raised by SPARE_SLOTS, within the memory limit (checked here: the
 * spare's batch and the slots must fit under it). A stage making batches
 * gets a spare only when its batch and the slots take under 1/64 of the
 * limit (Fashion-MNIST's 200 KB batches, not the image pipeline's 38.5 MB
 * ones).
 *
 * The same slots also serve the budget's own workers when they stall on
 * order (deep_for_order): a worker that finished batch head + qcap waits for
 * the one making head (descheduled, on a machine whose cores are all given
 * out) while the consumer waits for data. Fashion-MNIST, 2 readers, batch
 * 256, 33,000 batches/s: 13% of the readers' time so behind the default 2
 * slots; 5% more samples/s behind 8. */
#define SPARE_SLOTS 6

int sl_exec__tune_spare(sl_exec *x) {
    int first_batch = x->layout.collate_stage;
    for (int s = 0; s < x->nstages; s++) {
        sl_stage *st = &x->stage[s];
        if (!st->autotune || st->workers < x->ncpus)
            continue;
        uint64_t more = s == x->nstages - 1 ? 1 + SPARE_SLOTS : 1;
        if (s >= first_batch && x->mem.batch_bytes > 0 &&
            x->mem.limit / x->mem.batch_bytes < x->mem.batches_held + more)
            continue;
        /* a stage making large batches gets no spare: the pools keep the
         * most buffers ever out, so a spare woken mid-run would raise
         * resident memory for the rest of it (RSS must stay flat across
         * epochs: bench/soak.py, +2% on the image pipeline) */
        if (s >= first_batch && more * x->mem.batch_bytes > x->mem.limit / 64)
            continue;
        st->workers++;
        st->spare = 1;
        if (s == x->nstages - 1) {
            int relaxed = st->out.relaxed;
            sl_queue__destroy(&st->out);
            SL_TRY(sl_queue__init(&st->out, (size_t)st->qcap + SPARE_SLOTS, relaxed));
            sl_queue__set_limit(&st->out, (size_t)st->qcap);
        }
    }
    return SL_OK;
}

/* Whether the consumer's queue should use its spare slots for the budget's
 * workers: the consumer waited for data (not consumer_bound) while those
 * workers waited for room in the queue for over 5% of their time in the
 * interval of `dt` ns. Once true it stays: the slots were checked against
 * the memory limit and reserved when they were made, and a consumer that
 * later slows down loses nothing to them. */
static int deep_for_order(sl_exec *x, int consumer_bound, uint64_t dt) {
    sl_stage *last = &x->stage[x->nstages - 1];
    uint64_t wo = atomic_load(&last->wait_out_ns);
    uint64_t d = wo - last->tune_wait_out;
    last->tune_wait_out = wo;
    int active = atomic_load(&last->active);
    if (!x->tune.deep && !consumer_bound && dt > 0 && active > 0 &&
        (double)d > 0.05 * (double)dt * (double)active)
        x->tune.deep = 1;
    return x->tune.deep;
}

void sl_exec__autotune(sl_exec *x) {
    uint64_t now = sl__now_ns();
    if (now - x->tune.last_ns < TICK_NS)
        return;
    uint64_t batches = atomic_load(&x->stats.batches_out);
    uint64_t samples = atomic_load(&x->stats.samples_out);
    if (batches - x->tune.batches < MIN_BATCHES && now - x->tune.last_ns < MAX_TICK_NS &&
        x->tune.last_ns != 0)
        return;
    double rate = x->tune.last_ns ? (double)(samples - x->tune.samples) * 1e9 /
                                        (double)(now - x->tune.last_ns)
                                  : 0.0;
    /* the consumer waited under 10% of the interval: it bounds the run, and
     * no worker past the rule can help (no exploration) */
    uint64_t cwait = atomic_load(&x->handoff.wait_in_ns);
    int consumer_bound = x->tune.last_ns && (double)(cwait - x->tune.consumer_wait) <
                                                0.10 * (double)(now - x->tune.last_ns);
    x->tune.consumer_wait = cwait;
    uint64_t dt = x->tune.last_ns ? now - x->tune.last_ns : 0;
    x->tune.last_ns = now;
    x->tune.batches = batches;
    x->tune.samples = samples;
    double cost[SL_STATS_MAX_STAGES] = {0}, total = 0, per_sample = 0;
    int n_auto = 0, unmeasured = 0;
    for (int s = 0; s < x->nstages; s++) {
        sl_stage *st = &x->stage[s];
        uint64_t busy = atomic_load(&st->busy_ns), el = atomic_load(&st->elements);
        uint64_t db = busy - st->tune_busy, de = el - st->tune_elements;
        int parallel =
            (st->kind->tunes & SL_TUNES_WORKERS) != 0;
        if (de == 0 && parallel) {
            /* No chunk finished in this interval: the stage is either working
             * on a chunk that outlasts a tick (slow samples) or blocked. Not
             * free either way: keep its last cost, and keep measuring from the
             * old baseline; with no cost yet, wait for one. */
            if (st->tune_cost <= 0)
                unmeasured = 1;
            cost[s] = st->tune_cost;
            per_sample += cost[s];
            total += cost[s];
            if (st->autotune)
                n_auto++;
            continue;
        }
        st->tune_busy = busy;
        st->tune_elements = el;
        if (de > 0)
            cost[s] = (double)db / (double)de;
        if (parallel) {
            st->tune_cost = cost[s];
            per_sample += cost[s];
            total += cost[s];
        } else {
            cost[s] = 0; /* sequential stages hold one thread whatever they cost */
        }
        if (st->autotune)
            n_auto++;
    }
    if (x->spec->chunk == 0 && per_sample > 0) {
        double k = CHUNK_WORK_NS / per_sample;
        int c = k < 1 ? 1 : k > 128 ? 128 : (int)k;
        atomic_store_explicit(&x->chunk_size, c, memory_order_relaxed);
    }
    if (n_auto == 0 || total <= 0 || unmeasured)
        return;
    int is_auto[SL_STATS_MAX_STAGES] = {0}, maxw[SL_STATS_MAX_STAGES] = {0};
    int want[SL_STATS_MAX_STAGES] = {0}, cur[SL_STATS_MAX_STAGES], next[SL_STATS_MAX_STAGES];
    for (int s = 0; s < x->nstages; s++) {
        is_auto[s] = x->stage[s].autotune;
        maxw[s] = x->stage[s].workers;
        cur[s] = atomic_load(&x->stage[s].active);
    }
    sl_pipeline__tune_shares(x->ncpus, x->nstages, cost, is_auto, maxw, want);
    int top = -1;
    for (int s = 0; s < x->nstages && !consumer_bound; s++)
        if (is_auto[s] && (top < 0 || cost[s] > cost[top]))
            top = s;
    sl_stage *last = &x->stage[x->nstages - 1];
    int slots = last->autotune && last->out.cap > (size_t)last->qcap;
    int deep = slots && deep_for_order(x, consumer_bound, dt);
    int moved = sl_pipeline__tune_step(&x->tune, x->nstages, cur, want, maxw, top, rate, now, next);
    /* the spare's slots in the consumer's queue (sl_exec__tune_spare): in
     * use while the spare works (set before it is woken), or for order */
    if (slots) {
        int spare_on = (moved ? next[x->nstages - 1] : cur[x->nstages - 1]) > x->ncpus;
        size_t limit = (size_t)last->qcap + (spare_on || deep ? SPARE_SLOTS : 0);
        if (limit != sl_queue__limit(&last->out))
            sl_queue__set_limit(&last->out, limit);
    }
    if (moved) {
        for (int s = 0; s < x->nstages; s++)
            if (x->stage[s].autotune && next[s] > 0)
                atomic_store(&x->stage[s].active, next[s]);
        pthread_mutex_lock(&x->gate.mu);
        pthread_cond_broadcast(&x->gate.cv);
        pthread_mutex_unlock(&x->gate.mu);
    }
}
