/*
 * stats.c — per-stage counters, the F/P/G verdict, the stats JSON and the
 * plan explanation.
 *
 * Verdict. A stage's utilisation is busy / (wall * active workers). The
 * consumer (G) bounds the run when batches were waiting for it: it spent
 * under 10% of the time blocked in next() and the output queue was more than
 * half full on average; sluice is then fast enough. Otherwise, when the
 * process used nearly all the CPU of its budget (SL_VERDICT_CPU_FULL), the
 * machine is the limit and the stage with the most CPU per sample is named
 * (more workers cannot help). Otherwise the producing stage with the highest
 * utilisation is the limit: a reader means reading (F; its busy time without
 * CPU time is waiting for storage, so more reads in flight or readahead
 * help), any other stage processing (P, named). Each line says what would
 * help and shows the numbers behind the choice.
 */
#include "pipeline/exec.h"
#include "ops/ops.h"

#include <stdio.h>
#include <string.h>

/* Process CPU time over wall * budget at or above which the machine is the
 * limit (the rest goes to the kernel, the consumer and other processes). */
#define SL_VERDICT_CPU_FULL 0.85

/* Is stage s a reader with no per-sample ops of its own? */
static int reader_only(const sl_exec *x, int s) {
    return x->stage[s].kind == &sl_stage_source && x->stage[s].last == x->stage[s].first;
}

/* The stage's op split, microseconds per sample by phase (JSON "op_split"),
 * or NULL when no sample was timed. */
static cJSON *op_split_json(const sl_stage *st) {
    uint64_t n = atomic_load_explicit(&st->phase_samples, memory_order_relaxed);
    if (!n)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    uint64_t phases = 0;
    for (int k = 0; k < SL_NPHASES; k++) {
        uint64_t ns = atomic_load_explicit(&st->phase_ns[k], memory_order_relaxed);
        phases += ns;
        cJSON_AddNumberToObject(o, sl_ops__phase_key[k], (double)ns / 1e3 / (double)n);
    }
    /* The rest of the same timed samples' per-sample ops: the phases are
     * nested inside the chain's time, so this cannot go below zero (the
     * stage's cost_us is an average over every sample, reading and
     * collation included: the timed eighth minus that average is noise). */
    uint64_t all = atomic_load_explicit(&st->phase_all_ns, memory_order_relaxed);
    cJSON_AddNumberToObject(o, "rest_us", all > phases ? (double)(all - phases) / 1e3 / (double)n
                                                       : 0.0);
    cJSON_AddNumberToObject(o, "timed_samples", (double)n);
    return o;
}

/* The stats are read from a pipeline the caller holds const; its locks (the
 * error list's, the queues') are not part of what it says, so they are taken
 * through this one cast. */
static sl_exec *lockable(const sl_exec *x) { return (sl_exec *)(uintptr_t)x; }

/* Totals over the run: rates, device copies, CPU, memory, pools, queues. */
static void stats_totals(const sl_exec *x, sl_pipeline_stats *out, uint64_t t_start,
                         double wall) {
    out->wall_s = wall;
    out->batches = atomic_load(&x->stats.batches_out);
    out->samples = atomic_load(&x->stats.samples_out);
    out->samples_per_s = wall > 0 ? (double)out->samples / wall : 0.0;
    out->consumer_wait_s = (double)atomic_load(&x->handoff.wait_in_ns) / 1e9;
    sl_dev_counters dc;
    sl_stage_handoff__counters(&x->handoff, &dc);
    out->h2d_bytes = dc.h2d_bytes;
    out->h2d_staged_bytes = dc.staged_bytes;
    out->h2d_bytes_per_s = wall > 0 ? (double)dc.h2d_bytes / wall : 0.0;
    out->device_wait_s = (double)dc.wait_ns / 1e9;
    out->gpu_decoded = dc.gpu_decoded;
    out->gpu_fallbacks = dc.gpu_fallbacks;
    out->threads_started = atomic_load(&x->stats.threads_started);
    out->cpu_budget = x->ncpus;
    if (t_start && wall > 0)
        out->cpu_busy =
            (double)(sl__process_cpu_ns() - x->stats.cpu_t0_ns) / 1e9 / (wall * x->ncpus);
    out->nstages = x->nstages;
    out->memory_limit = x->mem.limit;
    out->batch_bytes = x->mem.batch_bytes;
    out->batches_in_flight = x->mem.batches_held;
    sl_pipeline__pool_bytes pb[SL_STATS_MAX_POOLS];
    size_t held, cached;
    int np = sl_pipeline__pools_bytes(x->env.pools, pb, SL_STATS_MAX_POOLS, &held, &cached);
    out->pool_bytes = held;
    out->pool_free_bytes = cached;
    out->npools = np;
    for (int i = 0; i < np && i < SL_STATS_MAX_POOLS; i++) {
        out->pool[i].buf_size = pb[i].buf_size;
        out->pool[i].bytes = pb[i].held;
        out->pool[i].free_bytes = pb[i].cached;
    }
    for (int s = 0; s < x->nstages; s++) {
        size_t n = sl_queue__count(&lockable(x)->stage[s].out);
        out->queue_length[s] = (int32_t)n;
        out->queue_bytes[s] = (uint64_t)n * sl_exec__elem_bytes(x, s);
    }
}

/* Per stage; *worst_out = the stage busiest per worker, *costliest_out =
 * the one costing most CPU per sample, *given_out = workers in all. */
static void stats_stages(const sl_exec *x, sl_pipeline_stats *out, double wall,
                         int *worst_out, int *costliest_out, int *given_out) {
    int worst = -1, costliest = -1, given = 0;
    double worst_util = -1, most_cpu = -1;
    for (int s = 0; s < x->nstages; s++) {
        sl_stage *st = &lockable(x)->stage[s];
        sl_stage_stats *o = &out->stage[s];
        snprintf(o->name, sizeof o->name, "%s", st->name);
        o->workers = atomic_load(&st->active);
        given += o->workers;
        o->queue_capacity = (int32_t)sl_queue__limit(&st->out); /* autotune may deepen it */
        o->elements = atomic_load(&st->elements);
        o->busy_s = (double)atomic_load(&st->busy_ns) / 1e9;
        o->wait_in_s = (double)atomic_load(&st->wait_in_ns) / 1e9;
        o->wait_out_s = (double)atomic_load(&st->wait_out_ns) / 1e9;
        o->elements_per_s = wall > 0 ? (double)o->elements / wall : 0.0;
        o->cost_us = o->elements ? o->busy_s * 1e6 / (double)o->elements : 0.0;
        o->cpu_us = o->elements ? (double)atomic_load(&st->cpu_ns) / 1e3 / (double)o->elements
                                : 0.0;
        o->queue_fill = sl_queue__mean_fill(&st->out);
        double util = wall > 0 && o->workers > 0 ? o->busy_s / (wall * o->workers) : 0.0;
        if (util > worst_util) {
            worst_util = util;
            worst = s;
        }
        if (o->cpu_us > most_cpu) {
            most_cpu = o->cpu_us;
            costliest = s;
        }
    }
    *worst_out = worst;
    *costliest_out = costliest;
    *given_out = given;
}

static void stats_errors(sl_errors *e, sl_pipeline_stats *out) {
    pthread_mutex_lock(&e->mu);
    out->skipped = e->skipped;
    out->nerrors = e->n;
    for (int i = 0; i < e->n; i++)
        memcpy(out->errors[i], e->msg[i], sizeof out->errors[i]);
    pthread_mutex_unlock(&e->mu);
}

/* The F/P/G verdict from the figures stats_totals and stats_stages wrote. */
static void stats_verdict(const sl_exec *x, sl_pipeline_stats *out, double wall, int worst,
                          int costliest, int given) {
    out->bound = '?';
    if (out->batches < 2 || wall <= 0 || worst < 0) {
        snprintf(out->verdict, sizeof out->verdict, "?: too early to tell (%llu batches)",
                 (unsigned long long)out->batches);
        return;
    }
    double cwait = out->consumer_wait_s / wall;
    const sl_stage_stats *last = &out->stage[x->nstages - 1];
    const sl_stage_stats *w = &out->stage[worst];
    if (cwait < 0.10 && last->queue_fill > 0.5) {
        out->bound = 'G';
        snprintf(out->bound_stage, sizeof out->bound_stage, "consumer");
        snprintf(out->verdict, sizeof out->verdict,
                 "G: bound by the consumer: batches waited for it (output queue %.0f%% full, "
                 "consumer blocked %.0f%% of the time); sluice is already fast enough here",
                 100 * last->queue_fill, 100 * cwait);
        return;
    }
    double util = w->busy_s / (wall * (w->workers ? w->workers : 1));
    /* Every core of the budget busy: more workers cannot help; the stage
     * costing most CPU per sample is where to save. */
    if (out->cpu_busy >= SL_VERDICT_CPU_FULL) {
        const sl_stage_stats *c = &out->stage[costliest];
        out->bound = 'P';
        snprintf(out->bound_stage, sizeof out->bound_stage, "%s", c->name);
        snprintf(out->verdict, sizeof out->verdict,
                 "P: the machine is the limit: the %d core(s) of the budget are %.0f%% busy; "
                 "stage '%s' costs most (%.2f us of CPU per sample): cheaper or fused ops, or "
                 "more cores",
                 out->cpu_budget, 100 * out->cpu_busy, c->name, c->cpu_us);
        return;
    }
    snprintf(out->bound_stage, sizeof out->bound_stage, "%s", w->name);
    int room = given < out->cpu_budget; /* cores not yet given to a worker */
    if (reader_only(x, worst)) {
        /* reading: busy time without CPU time is time waiting for storage */
        double waiting = w->cost_us > 0 ? 1.0 - w->cpu_us / w->cost_us : 0.0;
        out->bound = 'F';
        snprintf(out->verdict, sizeof out->verdict,
                 "F: bound by reading: source %.0f%% busy on %d worker(s), %.1f us/sample "
                 "(%.0f%% of it waiting for storage); consumer blocked %.0f%% of the time (%s)",
                 100 * util, w->workers, w->cost_us, 100 * (waiting < 0 ? 0 : waiting),
                 100 * cwait,
                 waiting > 0.5 ? "more source workers (source.parallel) to keep more reads in "
                                 "flight, readahead, or faster storage"
                 : room ? "more source workers (source.parallel)"
                        : "cheaper reads: a packed .slr, no compression, or more cores");
    } else {
        out->bound = 'P';
        snprintf(out->verdict, sizeof out->verdict,
                 "P: bound by processing in stage '%s': %.0f%% busy on %d worker(s), "
                 "%.1f us/sample; consumer blocked %.0f%% of the time (%s)",
                 w->name, 100 * util, w->workers, w->cost_us, 100 * cwait,
                 room ? "more workers for this stage" : "cheaper or fused ops; every core of "
                                                        "the budget has a worker");
    }
}

int sl_pipeline_stats_get(const sl_pipeline *p, sl_pipeline_stats *out) {
    const sl_exec *x = sl_pipeline__exec(p);
    memset(out, 0, sizeof *out);
    uint64_t now = sl__now_ns();
    uint64_t t_start = atomic_load(&x->stats.t_start);
    double wall = t_start ? (double)(now - t_start) / 1e9 : 0.0;
    int worst, costliest, given;
    stats_totals(x, out, t_start, wall);
    stats_stages(x, out, wall, &worst, &costliest, &given);
    stats_errors(&lockable(x)->err, out);
    stats_verdict(x, out, wall, worst, costliest, given);
    return SL_OK;
}

int sl_pipeline_stats_json(const sl_pipeline *p, char *buf, size_t cap, size_t *len_out) {
    const sl_exec *x = sl_pipeline__exec(p);
    sl_pipeline_stats st;
    SL_TRY(sl_pipeline_stats_get(p, &st));
    sl__json_init(); /* the adds below are checked once, at the end */
    cJSON *doc = cJSON_CreateObject();
    if (!doc)
        return sl__oom("writing stats");
    char b[2] = {st.bound, 0};
    cJSON_AddNumberToObject(doc, "samples_per_s", st.samples_per_s);
    cJSON_AddNumberToObject(doc, "batches_per_s", st.wall_s > 0 ? st.batches / st.wall_s : 0);
    cJSON_AddNumberToObject(doc, "samples", (double)st.samples);
    cJSON_AddNumberToObject(doc, "batches", (double)st.batches);
    cJSON_AddNumberToObject(doc, "wall_s", st.wall_s);
    cJSON_AddNumberToObject(doc, "consumer_wait_s", st.consumer_wait_s);
    cJSON_AddStringToObject(doc, "bound", b);
    cJSON_AddStringToObject(doc, "bound_stage", st.bound_stage);
    cJSON_AddStringToObject(doc, "verdict", st.verdict);
    cJSON_AddNumberToObject(doc, "skipped", (double)st.skipped);
    cJSON_AddNumberToObject(doc, "threads_started", (double)st.threads_started);
    cJSON_AddNumberToObject(doc, "cpu_budget", st.cpu_budget);
    cJSON_AddNumberToObject(doc, "cpu_busy", st.cpu_busy);
    cJSON_AddNumberToObject(doc, "h2d_bytes", (double)st.h2d_bytes);
    cJSON_AddNumberToObject(doc, "h2d_bytes_per_s", st.h2d_bytes_per_s);
    cJSON_AddNumberToObject(doc, "h2d_staged_bytes", (double)st.h2d_staged_bytes);
    cJSON_AddNumberToObject(doc, "device_wait_s", st.device_wait_s);
    cJSON_AddNumberToObject(doc, "gpu_decoded", (double)st.gpu_decoded);
    cJSON_AddNumberToObject(doc, "gpu_fallbacks", (double)st.gpu_fallbacks);
    cJSON_AddNumberToObject(doc, "memory_limit", (double)st.memory_limit);
    cJSON_AddNumberToObject(doc, "batch_bytes", (double)st.batch_bytes);
    cJSON_AddNumberToObject(doc, "batches_in_flight", (double)st.batches_in_flight);
    cJSON_AddNumberToObject(doc, "pool_bytes", (double)st.pool_bytes);
    cJSON_AddNumberToObject(doc, "pool_free_bytes", (double)st.pool_free_bytes);
    if (sl_stage_src__mix_json(x->in, doc) < 0) { /* a mixture: each input's share */
        cJSON_Delete(doc);
        return SL_ENOMEM;
    }
    uint64_t qtotal = 0;
    for (int i = 0; i < st.nstages; i++)
        qtotal += st.queue_bytes[i];
    cJSON_AddNumberToObject(doc, "queue_bytes", (double)qtotal);
    cJSON *pools = cJSON_AddArrayToObject(doc, "pools");
    for (int i = 0; i < st.npools && i < SL_STATS_MAX_POOLS; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "buf_size", (double)st.pool[i].buf_size);
        cJSON_AddNumberToObject(o, "bytes", (double)st.pool[i].bytes);
        cJSON_AddNumberToObject(o, "free_bytes", (double)st.pool[i].free_bytes);
        if (!cJSON_AddItemToArray(pools, o)) /* pools missing: out of memory */
            cJSON_Delete(o);
    }
    cJSON *errs = cJSON_AddArrayToObject(doc, "errors");
    for (int i = 0; i < st.nerrors; i++) {
        cJSON *e = cJSON_CreateString(st.errors[i]);
        if (!cJSON_AddItemToArray(errs, e)) /* errs missing: out of memory */
            cJSON_Delete(e);
    }
    cJSON *stages = cJSON_AddArrayToObject(doc, "stages");
    for (int i = 0; i < st.nstages; i++) {
        const sl_stage_stats *s = &st.stage[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddNumberToObject(o, "workers", s->workers);
        cJSON_AddNumberToObject(o, "elements", (double)s->elements);
        cJSON_AddNumberToObject(o, "elements_per_s", s->elements_per_s);
        cJSON_AddNumberToObject(o, "busy_s", s->busy_s);
        cJSON_AddNumberToObject(o, "wait_in_s", s->wait_in_s);
        cJSON_AddNumberToObject(o, "wait_out_s", s->wait_out_s);
        cJSON_AddNumberToObject(o, "cost_us", s->cost_us);
        cJSON_AddNumberToObject(o, "cpu_us", s->cpu_us);
        cJSON_AddNumberToObject(o, "queue_fill", s->queue_fill);
        cJSON_AddNumberToObject(o, "queue_capacity", s->queue_capacity);
        cJSON_AddNumberToObject(o, "queue_length", st.queue_length[i]);
        cJSON_AddNumberToObject(o, "queue_bytes", (double)st.queue_bytes[i]);
        /* what it keeps besides its queue (its kind's memory: shuffle buffers) */
        const sl_stage *sti = &x->stage[i];
        cJSON_AddNumberToObject(o, "held_bytes",
                                sti->kind->memory ? (double)sti->kind->memory(sti) : 0.0);
        cJSON *split = op_split_json(sti);
        if (split && !cJSON_AddItemToObject(o, "op_split", split))
            cJSON_Delete(split);
        if (!cJSON_AddItemToArray(stages, o)) /* stages missing: out of memory */
            cJSON_Delete(o);
    }
    return sl__json_copy_out(doc, buf, cap, len_out, "writing stats");
}

/* ---- explain ------------------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...) SL_PRINTF(2, 3);
static void sb_printf(strbuf *b, const char *fmt, ...) {
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0)
            return;
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)k;
        char *s = sl__realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static void col_text(strbuf *b, const sl_colinfo *c) {
    sb_printf(b, "%s:", c->name);
    if (c->encoded) {
        sb_printf(b, "encoded");
        return;
    }
    sb_printf(b, "%s", c->dtype == SL_DTYPE_INVALID ? "?" : sl_dtype_name(c->dtype));
    if (c->ndim < 0) {
        sb_printf(b, "[?]");
        return;
    }
    sb_printf(b, "[");
    for (int d = 0; d < c->ndim; d++) {
        if (c->shape[d] < 0)
            sb_printf(b, "%s*", d ? "," : "");
        else
            sb_printf(b, "%s%lld", d ? "," : "", (long long)c->shape[d]);
    }
    sb_printf(b, "]");
}

static void cols_text(strbuf *b, const sl_colset *cs) {
    for (int i = 0; i < cs->ncols; i++) {
        sb_printf(b, "%s", i ? ", " : "");
        col_text(b, &cs->col[i]);
    }
}

static void node_text(strbuf *b, const sl_pnode *nd) {
    sb_printf(b, "%s", nd->label);
    if (nd->desc[0])
        sb_printf(b, " %s", nd->desc);
    if (nd->def && (nd->def->flags & SL_OPF_RANDOM))
        sb_printf(b, " (random)");
    if (nd->parallel > 0)
        sb_printf(b, " parallel=%d", nd->parallel);
    else if (nd->parallel < 0)
        sb_printf(b, " parallel=auto");
}

static void source_text(strbuf *b, const sl_exec *x) {
    char line[8192]; /* a mixture: a line per input */
    sl_stage_src__describe(x->in, line, sizeof line);
    sb_printf(b, "%s", line);
}

int sl_pipeline_explain_json(const sl_pipeline *p, char *buf, size_t cap, size_t *len_out) {
    const sl_exec *x = sl_pipeline__exec(p);
    const sl_exec_layout *L = &x->layout;
    const sl_plan *pl = x->env.plan;
    sl__json_init(); /* the adds below are checked once, at the end */
    cJSON *doc = cJSON_CreateObject();
    if (!doc)
        return sl__oom("explaining a pipeline");
    cJSON *lo = cJSON_AddObjectToObject(doc, "layout");
    if (lo) {
        cJSON_AddStringToObject(lo, "collation", L->collation->key);
        cJSON_AddNumberToObject(lo, "collate_stage", L->collate_stage);
        cJSON_AddBoolToObject(lo, "direct", L->direct);
        if (L->slot_col >= 0)
            cJSON_AddStringToObject(lo, "slot_column", pl->out_cols.col[L->slot_col].name);
        else
            cJSON_AddNullToObject(lo, "slot_column");
        int nvec = 0;
        for (int i = 0; i < pl->nopt; i++)
            nvec += pl->opt[i].vectorized != 0;
        cJSON_AddNumberToObject(lo, "vectorized_ops", nvec);
        cJSON_AddStringToObject(lo, "vectorization", L->vec_note);
        cJSON_AddBoolToObject(lo, "read_rows", L->read_rows);
        cJSON_AddNumberToObject(lo, "chunk_capacity", L->chunk_cap);
    }
    cJSON *stages = cJSON_AddArrayToObject(doc, "stages");
    for (int s = 0; stages && s < x->nstages; s++) {
        const sl_stage *st = &x->stage[s];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", st->name);
        cJSON_AddStringToObject(o, "kind", st->kind->key);
        cJSON_AddNumberToObject(o, "workers", st->workers);
        cJSON_AddBoolToObject(o, "autotune", st->autotune);
        cJSON_AddNumberToObject(o, "queue_capacity", st->qcap);
        if (!cJSON_AddItemToArray(stages, o)) /* stages missing: out of memory */
            cJSON_Delete(o);
    }
    cJSON_AddNumberToObject(doc, "batches_per_epoch", (double)sl_pipeline_len(p));
    if (sl_stage_src__mix_json(x->in, doc) < 0) { /* a mixture: its inputs and shares */
        cJSON_Delete(doc);
        return SL_ENOMEM;
    }
    return sl__json_copy_out(doc, buf, cap, len_out, "explaining a pipeline");
}

int sl_pipeline_explain(const sl_pipeline *p, char *buf, size_t cap, size_t *len_out) {
    const sl_exec *x = sl_pipeline__exec(p);
    strbuf b = {0};
    const sl_plan *pl = x->env.plan;
    sb_printf(&b, "logical plan:\n  ");
    source_text(&b, x);
    sb_printf(&b, "    columns: ");
    cols_text(&b, &pl->src_cols);
    sb_printf(&b, "\n");
    if (pl->has_lead) /* a mixture's per-input ops */
        sb_printf(&b, "  %s: %s\n", pl->lead.label, pl->lead.desc);
    for (int i = 0; i < pl->nnodes; i++) {
        sb_printf(&b, "  ops[%d] ", pl->nodes[i].pos);
        node_text(&b, &pl->nodes[i]);
        sb_printf(&b, "\n");
    }
    sb_printf(&b, "optimised plan:\n  ");
    source_text(&b, x);
    for (int i = 0; i < pl->nnodes; i++) {
        const sl_pnode *nd = &pl->nodes[i];
        if (nd->pushed)
            sb_printf(&b, "    + filter pushed into the source index: %s (ops[%d]); %llu of %llu "
                          "records kept, the others are never read\n",
                      nd->desc, nd->pos, (unsigned long long)x->in->nbase,
                      (unsigned long long)x->in->nrecords);
        if (nd->kind == SL_PN_REPEAT)
            sb_printf(&b, "    + repeat x%lld made by the source (ops[%d])\n", (long long)nd->n,
                      nd->pos);
    }
    for (int m = 0; m < pl->nmoved; m++)
        sb_printf(&b, "    + select ops[%d] (%s) moved before ops[%d] %s, across %d op%s that "
                      "do not use the columns it drops\n",
                  pl->moved[m].pos, pl->nodes[pl->moved[m].pos].desc, pl->moved[m].before,
                  pl->nodes[pl->moved[m].before].label, pl->moved[m].skipped,
                  pl->moved[m].skipped == 1 ? "" : "s");
    sb_printf(&b, "    %llu samples per epoch for this rank\n",
              (unsigned long long)x->in->per_epoch);
    for (int i = 0; i < pl->nopt; i++) {
        const sl_pnode *nd = &pl->opt[i];
        sb_printf(&b, "  ");
        node_text(&b, nd);
        if (nd->nparts > 1) {
            sb_printf(&b, "  [fused: ");
            for (uint32_t k = 0; k < nd->nparts; k++)
                sb_printf(&b, "%sops[%u] %s", k ? " + " : "", nd->parts[k],
                          pl->nodes[nd->parts[k]].label);
            sb_printf(&b, "]");
        }
        if (nd->vectorized)
            sb_printf(&b, "  [vectorized: once per batch, after batch(%lld)]",
                      (long long)pl->batch_size);
        sb_printf(&b, "\n");
    }
    const sl_exec_layout *L = &x->layout;
    if (L->vec_note[0])
        sb_printf(&b, "    map vectorization: %s\n", L->vec_note);
    if (L->read_rows)
        sb_printf(&b, "    reading: each record straight into its batch row (fixed-shape "
                      "columns, nothing per sample)\n");
    sb_printf(&b, "    collation: %s, by stage %d (%s): %s%s%s\n", L->collation->key,
              L->collate_stage + 1, x->stage[L->collate_stage].name, L->collation->words,
              L->direct ? ", taken by the consumer" : "",
              L->slot_col >= 0 ? ", the last op writes into its batch slot" : "");
    sb_printf(&b, "stages:\n");
    for (int s = 0; s < x->nstages; s++) {
        const sl_stage *st = &x->stage[s];
        sb_printf(&b, "  %d. %s (%s): ", s + 1, st->name, st->kind->explain(st));
        if (st->autotune)
            sb_printf(&b, "workers=auto (now %d, up to %d)", atomic_load(&st->active),
                      st->workers);
        else
            sb_printf(&b, "workers=%d", st->workers);
        sb_printf(&b, ", output queue %d %s\n", st->qcap,
                  s == x->nstages - 1 ? "batches (prefetch)" : "chunks");
    }
    const char *handoff = x->handoff.kind->explain(&x->handoff);
    if (handoff)
        sb_printf(&b, "  then the consumer's thread %s\n", handoff);
    sb_printf(&b, "output: ");
    if (pl->handoff) {
        /* what the consumer gets after the device hand-off (optimize.c) */
        cols_text(&b, &pl->consumer_cols);
        sb_printf(&b, "%s", pl->consumer_note ? pl->consumer_note : "");
    } else {
        cols_text(&b, &pl->out_cols);
    }
    if (pl->has_batch)
        sb_printf(&b, " with a leading batch dim of %lld%s", (long long)pl->batch_size,
                  pl->drop_remainder || pl->handoff_drop_remainder ? " (remainder dropped)" : "");
    int64_t len = sl_pipeline_len(p);
    if (len >= 0)
        sb_printf(&b, "; %lld batches per epoch", (long long)len);
    sb_printf(&b, "\norder: %s; resume: %s\n",
              x->spec->deterministic ? "deterministic" : "as samples finish (non-deterministic)",
              pl->exact_resume ? "exact from the stream position"
                               : "exact by replaying the epoch up to the saved batch");
    if (b.oom) {
        sl__free(b.s);
        return sl__oom("explaining a pipeline");
    }
    sl__copy_out(b.s ? b.s : "", buf, cap, len_out);
    sl__free(b.s);
    return SL_OK;
}
