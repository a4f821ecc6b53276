/*
 * autotune.c — worker counts for stages marked "parallel": "auto", and the
 * chunk size.
 *
 * Rule: every ~200 ms (checked from sl_pipeline_next), measure each parallel
 * stage's cost per sample over the last interval (busy time / samples). A
 * steady pipeline needs workers in proportion to cost, so an auto stage gets
 * the share of the CPU budget (the online cores) that its cost is of the
 * summed cost of all parallel stages, at least one worker; stages with a
 * fixed count keep it. Auto
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

void sl_pipeline__autotune(sl_pipeline *p) {
    uint64_t now = sl__now_ns();
    if (now - p->last_tune_ns < TICK_NS)
        return;
    p->last_tune_ns = now;
    double cost[SL_STATS_MAX_STAGES] = {0}, total = 0, per_sample = 0;
    int n_auto = 0;
    for (int s = 0; s < p->nstages; s++) {
        sl_stage *st = &p->stage[s];
        uint64_t busy = atomic_load(&st->busy_ns), el = atomic_load(&st->elements);
        uint64_t db = busy - st->tune_busy, de = el - st->tune_elements;
        st->tune_busy = busy;
        st->tune_elements = el;
        if (de > 0)
            cost[s] = (double)db / (double)de;
        if (st->kind == SL_ST_SOURCE || st->kind == SL_ST_MAP) {
            per_sample += cost[s];
            total += cost[s];
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
    if (n_auto == 0 || total <= 0)
        return;
    /* every parallel stage's share of the cores follows its cost; fixed
     * stages keep their count, auto stages take their share */
    int budget = p->ncpus;
    int changed = 0;
    for (int s = 0; s < p->nstages; s++) {
        sl_stage *st = &p->stage[s];
        if (!st->autotune)
            continue;
        int want = (int)(budget * cost[s] / total + 0.5);
        if (want < 1)
            want = 1;
        if (want > st->workers)
            want = st->workers;
        if (want != atomic_load(&st->active)) {
            atomic_store(&st->active, want);
            changed = 1;
        }
    }
    if (changed) {
        pthread_mutex_lock(&p->tune_mu);
        pthread_cond_broadcast(&p->tune_cv);
        pthread_mutex_unlock(&p->tune_mu);
    }
}
