/*
 * memory.c — the pipeline's memory limit: what one batch takes, how many
 * batches may be in flight, and the queue depths and worker counts cut down
 * so that those batches fit under the limit (once, at create, after
 * layout.c and before the batch pools are reserved).
 *
 * The limit is the spec's memory_limit, or a quarter of the memory this
 * process may use (sl__mem_total: the smaller of physical memory and the
 * cgroup limit). It bounds both sides of the collating stage:
 *  - batches: batch buffers are in flight from the stage that collates them
 *    on (one per worker plus a full output queue per stage) and with the
 *    consumer (two: the one it uses and the one being handed over); the
 *    batch pool caches at most that many (pools.c);
 *  - sample chunks before it: each stage before the collating one holds at
 *    most one chunk per worker plus a full output queue, a chunk being up to
 *    chunk_cap samples (exactly one batch with map + batch fusion), a sample
 *    its fixed-shape columns at their pool class plus, while it still has
 *    encoded columns, the mean stored record (the source's record_bytes:
 *    encoded JPEGs read by copy, records decompressed into buffers).
 * When the two do not fit, the deepest chunk queue is made one shorter
 * (down to one), then the deepest batch queue, then the batch stage with the
 * most workers loses one, until they fit; a limit below the smallest such
 * pipeline (one worker, one queued batch, the consumer's two, and one chunk
 * per worker and queue slot before) fails here with the sizes in the
 * message. What the source holds for its reads (held_bytes: a Parquet
 * source's cache of decoded row groups) is counted on top. Columns whose
 * shape is unknown at plan time and that are not
 * encoded bytes (a decoded image before its crop) are not counted.
 */
#include "pipeline/exec.h"

#include <stdio.h>
#include <string.h>

size_t sl_pipeline__col_bytes(const sl_colinfo *ci, size_t lead) {
    if (ci->encoded || ci->dtype == SL_DTYPE_INVALID || ci->ndim < 0)
        return 0;
    size_t n = sl_dtype_size(ci->dtype);
    if (n == 0 || !sl__mul_ok(n, lead, &n))
        return 0;
    for (int d = 0; d < ci->ndim; d++)
        if (ci->shape[d] < 0 || !sl__mul_ok(n, (size_t)ci->shape[d], &n))
            return 0;
    return n;
}

/* "38.5 MB" (decimal units, as `ls -h --si` and most dashboards). */
static void fmt_bytes(char *buf, size_t cap, uint64_t n) {
    static const char *const unit[] = {"bytes", "KB", "MB", "GB", "TB"};
    double x = (double)n;
    int u = 0;
    while (x >= 1000 && u < 4) {
        x /= 1000;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu bytes", (unsigned long long)n);
    else if (x == (double)(uint64_t)x)
        snprintf(buf, cap, "%.0f %s", x, unit[u]);
    else
        snprintf(buf, cap, "%.1f %s", x, unit[u]);
}

/* The first stage whose output elements carry batches. */
static int first_batch_stage(const sl_exec *x) {
    return x->layout.collate_stage;
}

/* Samples in one chunk element of a stage before the collating one. */
static uint64_t chunk_samples(const sl_exec *x) {
    if (x->layout.collation->whole_batches && x->env.plan->batch_size > 0)
        return (uint64_t)x->env.plan->batch_size;
    return (uint64_t)x->layout.chunk_cap;
}

/* Bytes the chunk stages (before the first batch stage) may hold. */
static uint64_t chunk_bytes_held(const sl_exec *x) {
    uint64_t n = 0;
    int end = x->env.plan->batch_size > 0 ? first_batch_stage(x) : 0;
    for (int s = 0; s < end; s++)
        n += ((uint64_t)x->stage[s].workers + (uint64_t)x->stage[s].qcap) * chunk_samples(x) *
             x->stage[s].sample_bytes;
    return n;
}

/* One chunk queue slot fewer, where it saves the most; 0 when every chunk
 * queue is down to one. */
static int shrink_chunks(sl_exec *x, int *requeue) {
    int best = -1, end = first_batch_stage(x);
    for (int s = 0; s < end; s++)
        if (x->stage[s].qcap > 1 && x->stage[s].sample_bytes > 0 &&
            (best < 0 || x->stage[s].qcap * x->stage[s].sample_bytes >
                             x->stage[best].qcap * x->stage[best].sample_bytes))
            best = s;
    if (best < 0)
        return 0;
    x->stage[best].qcap--;
    requeue[best] = 1;
    return 1;
}

static uint64_t batches_in_flight(const sl_exec *x) {
    uint64_t n = 2; /* the consumer's */
    for (int s = first_batch_stage(x); s < x->nstages; s++)
        n += (uint64_t)x->stage[s].workers + (uint64_t)x->stage[s].qcap;
    return n;
}

/* One step down towards fewer batches in flight; 0 when at the minimum. */
static int shrink_one(sl_exec *x, int *requeue) {
    int best = -1;
    for (int s = first_batch_stage(x); s < x->nstages; s++)
        if (x->stage[s].qcap > 1 && (best < 0 || x->stage[s].qcap >= x->stage[best].qcap))
            best = s;
    if (best >= 0) {
        x->stage[best].qcap--;
        requeue[best] = 1;
        return 1;
    }
    for (int s = first_batch_stage(x); s < x->nstages; s++)
        if (x->stage[s].workers > 1 && (best < 0 || x->stage[s].workers > x->stage[best].workers))
            best = s;
    if (best < 0)
        return 0;
    sl_stage *st = &x->stage[best];
    st->workers--;
    if (atomic_load(&st->active) > st->workers)
        atomic_store(&st->active, st->workers);
    return 1;
}

int sl_exec__memory_plan(sl_exec *x) {
    const sl_plan *pl = x->env.plan;
    x->mem.limit = x->spec->memory_limit ? x->spec->memory_limit : sl__mem_total() / 4;
    x->mem.batch_bytes = 0;
    /* what a stage's output element takes: a batch, or a chunk of samples */
    for (int s = 0; s < x->nstages; s++) {
        const sl_stage *st = &x->stage[s];
        const sl_colset *cs = st->last > st->first ? &pl->opt[st->last - 1].cols
                              : s == 0             ? &pl->src_cols
                                                   : NULL;
        size_t n = 0;
        int encoded = 0;
        for (int c = 0; cs && c < cs->ncols; c++) {
            n += sl_pipeline__pools_class_size(sl_pipeline__col_bytes(&cs->col[c], 1));
            encoded |= cs->col[c].encoded;
        }
        if (encoded) /* the stored record holds the encoded bytes */
            n += x->in->src->record_bytes;
        x->stage[s].sample_bytes = cs ? n : (s > 0 ? x->stage[s - 1].sample_bytes : 0);
    }
    if (pl->batch_size <= 0)
        return SL_OK;
    char names[128] = "";
    size_t nl = 0;
    for (int c = 0; c < pl->out_cols.ncols; c++) {
        size_t n = sl_pipeline__col_bytes(&pl->out_cols.col[c], (size_t)pl->batch_size);
        if (n == 0)
            continue;
        x->mem.batch_bytes += sl_pipeline__pools_class_size(n);
        if (nl < sizeof names)
            nl += (size_t)snprintf(names + nl, sizeof names - nl, "%s%s", nl ? "+" : "",
                                   pl->out_cols.col[c].name);
    }
    char lim[32], one[32], chunks[32];
    fmt_bytes(lim, sizeof lim, x->mem.limit);
    fmt_bytes(one, sizeof one, x->mem.batch_bytes);
    if (x->mem.batch_bytes > 0 && x->mem.limit < x->mem.batch_bytes)
        return sl__error(SL_ELIMIT, "memory_limit %s is below one batch of %s (%s); raise it or "
                                    "shrink the batch", lim, names, one);
    int requeue[SL_STATS_MAX_STAGES] = {0};
    uint64_t held = batches_in_flight(x);
    for (;;) {
        /* + what the source keeps for its reads (decoded Parquet row groups) */
        uint64_t total = held * x->mem.batch_bytes + chunk_bytes_held(x) + x->in->src->held_bytes;
        if (total <= x->mem.limit)
            break;
        if (shrink_chunks(x, requeue))
            continue;
        if (x->mem.batch_bytes == 0 || !shrink_one(x, requeue))
            break;
        held = batches_in_flight(x);
    }
    uint64_t total = held * x->mem.batch_bytes + chunk_bytes_held(x) + x->in->src->held_bytes;
    if (total > x->mem.limit && x->in->src->held_bytes >= x->mem.limit) {
        fmt_bytes(chunks, sizeof chunks, x->in->src->held_bytes);
        return sl__error(SL_ELIMIT, "memory_limit %s is below the source's cache (%s of decoded "
                                    "row groups); raise it or lower the source's cache_bytes",
                         lim, chunks);
    }
    if (total > x->mem.limit) {
        fmt_bytes(chunks, sizeof chunks, chunk_bytes_held(x));
        return sl__error(SL_ELIMIT, "memory_limit %s holds %llu batch(es) of %s (%s each); "
                                    "the pipeline needs at least %llu in flight (one being made, "
                                    "one queued per stage, two with the consumer) and %s of "
                                    "sample chunks before them (one per worker and one queued "
                                    "per stage); raise it or shrink the batch", lim,
                         (unsigned long long)(x->mem.batch_bytes ? x->mem.limit / x->mem.batch_bytes
                                                             : 0),
                         names[0] ? names : "(no fixed-shape column)", one,
                         (unsigned long long)held, chunks);
    }
    int any = 0;
    for (int s = 0; s < x->nstages; s++) {
        if (!requeue[s])
            continue;
        sl_queue__destroy(&x->stage[s].out);
        SL_TRY(sl_queue__init(&x->stage[s].out, (size_t)x->stage[s].qcap, !x->spec->deterministic));
        any = 1;
    }
    if (any) /* the reach rule of sl_exec__layout, on the new capacities */
        for (int s = 1; s < x->nstages; s++)
            if (x->stage[s].kind == &sl_stage_map)
                sl_queue__set_reach(&x->stage[s - 1].out, x->stage[s].out.cap);
    x->mem.batches_held = held;
    return SL_OK;
}

uint64_t sl_exec__elem_bytes(const sl_exec *x, int s) {
    if (s >= first_batch_stage(x) && x->env.plan->batch_size > 0)
        return x->mem.batch_bytes;
    uint64_t chunk = (uint64_t)atomic_load_explicit(&x->chunk_size, memory_order_relaxed);
    return chunk * x->stage[s].sample_bytes;
}

/* Batch buffers in flight are bounded: from the stage that collates batches
 * on, each stage holds at most one per worker plus a full output queue, and
 * the consumer holds the batch it is using and the one being handed to it
 * (Python's `for b in ds` keeps the previous batch alive during next()).
 * Reserving that many full-size buffers per fixed-shape output column makes
 * the pools reach their final size in the first batch (pools.c says why);
 * sl_exec__memory_plan has already cut the depths so that they fit under the
 * memory limit. */
int sl_exec__reserve_batches(sl_exec *x) {
    const sl_plan *pl = x->env.plan;
    if (pl->batch_size <= 0)
        return SL_OK;
    size_t count = 2; /* workers (a spare of small batches too) and queue slots */
    for (int s = x->layout.collate_stage; s < x->nstages; s++)
        count += (size_t)x->stage[s].workers + x->stage[s].out.cap;
    /* with a device, the ring's slots hold the batches whose copies are in
     * flight (device_ring.c, rule 1b) */
    count += (size_t)sl_stage_handoff__slots(&x->handoff, pl->out_depth);
    const sl_colset *cols = &pl->out_cols;
    for (int c = 0; c < cols->ncols; c++) {
        const sl_colinfo *ci = &cols->col[c];
        size_t n = ci->dtype == SL_DTYPE_INVALID ? 0 : sl_dtype_size(ci->dtype);
        if (n == 0 || ci->ndim < 0 || !sl__mul_ok(n, (size_t)pl->batch_size, &n))
            continue;
        for (int d = 0; d < ci->ndim && n > 0; d++)
            if (ci->shape[d] < 0 || !sl__mul_ok(n, (size_t)ci->shape[d], &n))
                n = 0;
        if (n > 0)
            SL_TRY(sl_pipeline__pools_reserve(x->env.pools, n, count));
    }
    return SL_OK;
}
