/*
 * autotune.c — worker counts for stages marked "parallel": "auto", and the
 * chunk size.
 *
 * Rule: every ~200 ms (checked from sl_pipeline_next), measure each parallel
 * stage's cost per sample over the last interval (busy time / samples). A
 * steady pipeline needs cores in proportion to cost: stage s needs
 * need_s = cores * cost_s / (sum of all parallel stages' costs). Workers are
 * whole threads, so rounding every share loses cores: with a reader needing
 * 0.6 of a core and a decode stage 1.4 on 2 cores, plain rounding gives the
 * decode stage 1 worker and leaves most of a core idle. So the costliest auto
 * stage gets every core the others do not fully need
 * (cores - floor(sum of the other stages' needs)), other auto stages get
 * their rounded share; each gets at least one worker and at most its
 * threads; stages with a fixed count keep it. A light stage's worker then
 * sleeps part of the time on a core the heavy stage shares. A stage that
 * finished no chunk during a tick keeps its last cost (a chunk of slow
 * samples can outlast the tick: reading it as free would park the workers of
 * the very stage that needs them); with no cost measured yet, nothing
 * changes. Auto
 * stages start all their threads once (up to the core count) and park the
 * ones above the current share, so a change costs a condition-variable
 * broadcast, not a thread start.
 *
 * The chunk size (samples per queue element) is set so that a chunk carries
 * about 200 us of per-sample work: large chunks for cheap samples (queue
 * cost amortised), small ones for expensive samples (work spreads across
 * workers and the first batch comes early). Chunking never changes results.
 */
#include "pipeline/pipeline.h"

#define TICK_NS 200000000ull
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

void sl_pipeline__autotune(sl_pipeline *p) {
    uint64_t now = sl__now_ns();
    if (now - p->last_tune_ns < TICK_NS)
        return;
    p->last_tune_ns = now;
    double cost[SL_STATS_MAX_STAGES] = {0}, total = 0, per_sample = 0;
    int n_auto = 0, unmeasured = 0;
    for (int s = 0; s < p->nstages; s++) {
        sl_stage *st = &p->stage[s];
        uint64_t busy = atomic_load(&st->busy_ns), el = atomic_load(&st->elements);
        uint64_t db = busy - st->tune_busy, de = el - st->tune_elements;
        int parallel = st->kind == SL_ST_SOURCE || st->kind == SL_ST_MAP;
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
    if (p->spec->chunk == 0 && per_sample > 0) {
        double k = CHUNK_WORK_NS / per_sample;
        int c = k < 1 ? 1 : k > 128 ? 128 : (int)k;
        pthread_mutex_lock(&p->src_mu);
        p->chunk_size = c;
        pthread_mutex_unlock(&p->src_mu);
    }
    if (n_auto == 0 || total <= 0 || unmeasured)
        return;
    int is_auto[SL_STATS_MAX_STAGES] = {0}, maxw[SL_STATS_MAX_STAGES] = {0};
    int want[SL_STATS_MAX_STAGES] = {0};
    for (int s = 0; s < p->nstages; s++) {
        is_auto[s] = p->stage[s].autotune;
        maxw[s] = p->stage[s].workers;
    }
    sl_pipeline__tune_shares(p->ncpus, p->nstages, cost, is_auto, maxw, want);
    int changed = 0;
    for (int s = 0; s < p->nstages; s++) {
        sl_stage *st = &p->stage[s];
        if (st->autotune && want[s] > 0 && want[s] != atomic_load(&st->active)) {
            atomic_store(&st->active, want[s]);
            changed = 1;
        }
    }
    if (changed) {
        pthread_mutex_lock(&p->tune_mu);
        pthread_cond_broadcast(&p->tune_cv);
        pthread_mutex_unlock(&p->tune_mu);
    }
}
