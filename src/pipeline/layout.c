/*
 * layout.c — the optimised plan cut into stages: which kind each stage is
 * (a row of stage.h's table), which nodes each pool of threads runs, how
 * many workers and what queue depth each gets, and the map + batch
 * decisions (which collation runs and which stage collates, whether the
 * consumer takes batches straight from it). Runs once, when the pipeline is
 * created; exec.c then starts the threads this describes.
 */
#include "pipeline/exec.h"

#include <stdio.h>
#include <string.h>

/* Map + batch fusion applies when every chunk can be exactly one batch: no
 * sample is ever dropped before the batch (no filters left in the stages, no
 * skip policy, no take/skip/shuffle_buffer before batch) and the stage before
 * the final one is parallel (source or map). */
static int plan_can_fuse(const sl_exec *x) {
    const sl_plan *pl = x->env.plan;
    if (!pl->has_batch || pl->batch_size > SL_FUSE_MAX_BATCH || x->spec->on_error != SL_ON_ERROR_FAIL)
        return 0;
    for (int i = 0; i < pl->nopt; i++) {
        const sl_pnode *nd = &pl->opt[i];
        if (nd->kind == SL_PN_BATCH)
            break;
        if (nd->kind == SL_PN_FILTER || sl_plan__is_seq(nd) ||
            (nd->kind == SL_PN_OP && (nd->def->flags & SL_OPF_FILTER)))
            return 0;
    }
    return 1;
}

static int can_fuse_batch(const sl_exec *x) {
    if (x->nstages < 2 || !plan_can_fuse(x))
        return 0;
    const sl_stage_kind *kind = x->stage[x->nstages - 2].kind;
    return kind == &sl_stage_source || kind == &sl_stage_map;
}

/* The output column whose samples the last op writes straight into their
 * batch slots (map + batch fusion): the largest column with a dtype and shape
 * known at plan time. Below 4 KB per sample the copy costs next to nothing,
 * so no slot is offered. -1: none. */
static int pick_slot_col(const sl_colset *oc) {
    int best = -1;
    size_t best_bytes = 4095;
    for (int c = 0; c < oc->ncols; c++) {
        const sl_colinfo *ci = &oc->col[c];
        size_t n = ci->ndim < SL_MAX_DIMS ? sl_pipeline__col_bytes(ci, 1) : 0;
        if (n > best_bytes) {
            best = c;
            best_bytes = n;
        }
    }
    return best;
}

/* Every column has a dtype and shape known at plan time. */
static int cols_fixed(const sl_colset *cs) {
    for (int c = 0; c < cs->ncols; c++) {
        const sl_colinfo *ci = &cs->col[c];
        if (ci->encoded || ci->dtype == SL_DTYPE_INVALID || ci->ndim < 0 ||
            ci->ndim >= SL_MAX_DIMS)
            return 0;
        for (int d = 0; d < ci->ndim; d++)
            if (ci->shape[d] < 0)
                return 0;
    }
    return 1;
}

/* The columns node k of the optimised plan receives. */
static const sl_colset *node_input(const sl_plan *pl, int k) {
    return k > 0 ? &pl->opt[k - 1].cols : &pl->src_cols;
}

static int node_batches(const sl_plan *pl, int k) {
    const sl_pnode *nd = &pl->opt[k];
    if (nd->kind == SL_PN_OP)
        return sl_op_can_batch(nd->def, nd->params, node_input(pl, k));
    if (nd->kind == SL_PN_MAP)
        return nd->batch_map && cols_fixed(node_input(pl, k));
    return 0;
}

/* Map vectorization: map(f).batch(b) runs as batch(b).map(batched f). The
 * ops at the end of the collating stage that have a batched kernel (cast,
 * normalize, one_hot, flip of fixed-shape tensors, batched user maps) run
 * once per batch on the stacked columns, after the worker collated the chunk.
 *
 * When it is chosen: map + batch fuse (the batch is built on the map workers,
 * so the batched kernels still run in parallel, one batch per worker) and no
 * column is written into its batch slot, which means every fixed-shape output
 * column is under 4 KB a sample (pick_slot_col). That is the small-sample
 * case (Fashion-MNIST's 28x28 `cast`, a label's `one_hot`), where per-sample
 * op dispatch, allocation and the copy into the batch cost more than the
 * arithmetic.
 *
 * When it is not: without fusion the batch is made by the single final
 * thread, and batched kernels there would move parallel work onto one
 * thread; and when a slot column exists (the image path, decode + crop +
 * normalize, 602 KB a sample) the last op already writes each sample into
 * the batch, so there is no copy or allocation to save. */
static void choose_vectorized(sl_exec *x, sl_exec_layout *L) {
    L->vec_first = -1;
    L->vec_note[0] = '\0';
    if (L->collation != &sl_collate_fused)
        return;
    const sl_stage *st = &x->stage[L->collate_stage];
    int k = st->last;
    while (k > st->first && node_batches(x->env.plan, k - 1))
        k--;
    if (k == st->last)
        return;
    const char *off = !x->spec->vectorize ? "turned off in the spec"
                      : L->slot_col >= 0  ? "the last op writes into the batch slot"
                                          : NULL;
    if (off) {
        snprintf(L->vec_note, sizeof L->vec_note, "not vectorized (%s)", off);
        return;
    }
    L->vec_first = k;
    for (int j = k; j < st->last; j++)
        x->env.plan->opt[j].vectorized = 1;
    snprintf(L->vec_note, sizeof L->vec_note,
             "batch(%lld), then the last %d op(s) once per batch (samples are small and "
             "fixed-shape: per-sample dispatch and copies would dominate)",
             (long long)x->env.plan->batch_size, st->last - k);
}

/* Cut the optimised plan into stages (before the map + batch decisions). */
/* Stage 1 (a map stage) becomes part of stage 0 (the source's): its ops run
 * in the reading workers, with its workers and depth; with `readers_set`,
 * a reader count the spec set (source.parallel) stands when the map's is
 * left to autotune. */
static void merge_into_source(sl_exec *x, int *ns, int readers_set) {
    sl_stage *src = &x->stage[0], *m = &x->stage[1];
    src->first = m->first;
    src->last = m->last;
    if (readers_set && x->spec->source_parallel > 0 && m->autotune) {
        src->workers = (int)x->spec->source_parallel;
        src->autotune = 0;
    } else {
        src->workers = m->workers;
        src->autotune = m->autotune;
    }
    if (m->qcap > src->qcap)
        src->qcap = m->qcap;
    /* "source+" then as much of the map stage's name as fits */
    size_t room = sizeof src->name - 8, len = strlen(m->name);
    if (len > room)
        len = room;
    memcpy(src->name, "source+", 7);
    memcpy(src->name + 7, m->name, len);
    src->name[7 + len] = '\0';
    memmove(&x->stage[1], &x->stage[2], (size_t)(*ns - 2) * sizeof x->stage[0]);
    (*ns)--;
    memset(&x->stage[*ns], 0, sizeof x->stage[0]);
}

static int pick_slot_col(const sl_colset *oc);

/* Whether the readers should take map stage m (source, m, batch): when
 * they can read records into batch rows (choose_read_rows: read_cols,
 * fixed-shape columns) and every op of m will run vectorized on the batch
 * (choose_vectorized: it has a batched kernel, map + batch fuse, no slot
 * column). Then nothing of m runs per sample, and the batch is made where
 * the records are read: Fashion-MNIST's cast to float32 from .slr no longer
 * passes 256 samples between threads per batch. */
static int rows_take_map(const sl_exec *x, const sl_stage *m) {
    const sl_plan *pl = x->env.plan;
    if (!sl_source__has_read_cols(x->in->src) || !x->spec->read_rows || !x->spec->vectorize ||
        !plan_can_fuse(x) || !cols_fixed(&pl->src_cols) ||
        pick_slot_col(&pl->out_cols) >= 0 || m->last <= m->first)
        return 0;
    for (int k = m->first; k < m->last; k++)
        if (!node_batches(pl, k))
            return 0;
    return 1;
}

/* A sequential or final stage's name: its ops and their counts. */
static void name_seq_stage(const sl_plan *pl, sl_stage *st) {
    size_t n = 0;
    for (int k = st->first; k < st->last && n < sizeof st->name; k++) {
        const sl_pnode *m = &pl->opt[k];
        if (m->kind == SL_PN_BATCH)
            n += (size_t)snprintf(st->name + n, sizeof st->name - n, "%sbatch(%lld)",
                                  n ? "," : "", (long long)m->n);
        else if (m->kind != SL_PN_PREFETCH)
            n += (size_t)snprintf(st->name + n, sizeof st->name - n, "%s%s(%lld)",
                                  n ? "," : "", m->label, (long long)m->n);
    }
    if (n == 0)
        snprintf(st->name, sizeof st->name, st->kind == &sl_stage_final ? "collate" : "seq");
}

/* A map stage of the map-like ops from node i on (at most SL_STAGE_MAX_OPS),
 * named after them, with the largest "parallel" they ask for. Returns the
 * node after them. */
static int take_map_ops(sl_exec *x, sl_stage *st, int i) {
    const sl_plan *pl = x->env.plan;
    st->kind = &sl_stage_map;
    int par = 0;
    size_t n = 0;
    n += (size_t)snprintf(st->name + n, sizeof st->name - n, "map[");
    while (i < pl->nopt && sl_plan__is_map_like(&pl->opt[i]) && i - st->first < SL_STAGE_MAX_OPS) {
        const sl_pnode *m = &pl->opt[i];
        if (m->parallel < 0 || par < 0)
            par = -1;
        else if (m->parallel > par)
            par = m->parallel;
        if (n < sizeof st->name)
            n += (size_t)snprintf(st->name + n, sizeof st->name - n, "%s%s",
                                  i > st->first ? "," : "", m->label);
        i++;
    }
    if (n < sizeof st->name)
        snprintf(st->name + n, sizeof st->name - n, "]");
    st->autotune = x->spec->threads == 0 && par <= 0;
    st->workers = par > 0 ? par : 0;
    return i;
}

/* The stages the plan's nodes fall into, up to the final (collating) one;
 * prefetch nodes set the depth of the queue before them. */
static int group_stages(sl_exec *x, int *ns_out) {
    const sl_plan *pl = x->env.plan;
    int ns = 0;
    sl_stage *st = &x->stage[ns++];
    st->kind = &sl_stage_source;
    snprintf(st->name, sizeof st->name, "source");
    st->autotune = x->spec->threads == 0 && x->spec->source_parallel <= 0;
    int i = 0;
    while (i < pl->nopt) {
        if (ns >= SL_STATS_MAX_STAGES - 1)
            return sl__error(SL_EINVAL, "ops: too many stages (at most %d)", SL_STATS_MAX_STAGES);
        const sl_pnode *nd = &pl->opt[i];
        if (nd->kind == SL_PN_PREFETCH) {
            if (!nd->after_batch && !(i > 0 && (pl->opt[i - 1].kind == SL_PN_BATCH)))
                x->stage[ns - 1].qcap = (int)nd->n;
            i++;
            continue;
        }
        st = &x->stage[ns];
        st->first = i;
        if (sl_plan__is_map_like(nd)) {
            i = take_map_ops(x, st, i);
        } else {
            /* sequential ops up to the next map (or to the end) */
            int rest_has_map = 0;
            for (int j = i; j < pl->nopt; j++)
                if (sl_plan__is_map_like(&pl->opt[j]))
                    rest_has_map = 1;
            st->kind = rest_has_map ? &sl_stage_seq : &sl_stage_final;
            while (i < pl->nopt && !sl_plan__is_map_like(&pl->opt[i]) && i - st->first < SL_STAGE_MAX_OPS)
                i++;
            if (!rest_has_map)
                i = pl->nopt;
        }
        st->last = i;
        if (st->kind != &sl_stage_map)
            name_seq_stage(pl, st);
        ns++;
    }
    if (x->stage[ns - 1].kind != &sl_stage_final) {
        st = &x->stage[ns++];
        st->kind = &sl_stage_final;
        st->first = st->last = pl->nopt;
        snprintf(st->name, sizeof st->name, pl->has_batch ? "batch" : "collate");
    }
    *ns_out = ns;
    return SL_OK;
}

/* Workers per stage: one for the sequential ones, the spec's count, or all
 * cores for an autotuned stage. Returns how many autotuned stages share the
 * cores. */
static int set_workers(sl_exec *x) {
    const int ns = x->nstages;
    int n_auto = 0;
    for (int s = 0; s < ns; s++) {
        sl_stage *st = &x->stage[s];
        if (!(st->kind->tunes & SL_TUNES_WORKERS)) { /* one thread: sequential */
            st->workers = 1;
            st->autotune = 0;
        } else if (x->spec->threads > 0) {
            st->workers = x->spec->threads;
            st->autotune = 0;
        } else if (st->kind == &sl_stage_source && st->last == st->first) {
            /* readers are tuned unless set: reading from page cache (checksum,
             * decode of the frame, collation when map + batch fuse) is CPU
             * work that can be the whole pipeline */
            st->autotune = x->spec->source_parallel <= 0;
            st->workers = x->spec->source_parallel > 0 ? x->spec->source_parallel : 1;
        }
        if (st->autotune) {
            st->workers = x->ncpus; /* + a spare: sl_exec__tune_spare */
            /* a reader-only source starts on one worker (below), so it does
             * not take a share of the cores from the map stages */
            if (!(st->kind == &sl_stage_source && st->last == st->first))
                n_auto++;
        }
        atomic_init(&st->active, st->workers);
    }
    return n_auto;
}

/* The cores autotuned stages start with, before costs are measured. */
static void split_cores(sl_exec *x, int n_auto) {
    const int ns = x->nstages;
    /* until costs are measured, auto stages split the cores evenly (a
     * reader with a fixed count is usually light, so it is not subtracted;
     * an auto reader starts on one worker unless it is the only parallel
     * stage); autotune.c then moves cores to where the time goes */
    int budget = x->ncpus;
    for (int s = 0; s < ns; s++) {
        sl_stage *st = &x->stage[s];
        if (st->autotune) {
            int share = st->kind == &sl_stage_source && st->last == st->first
                            ? (n_auto == 0 ? budget : 1)
                            : budget / (n_auto ? n_auto : 1);
            atomic_store(&st->active, share < 1 ? 1 : share > st->workers ? st->workers : share);
        }
    }
}

/* Every stage's output queue. */
static int init_queues(sl_exec *x) {
    const sl_plan *pl = x->env.plan;
    const int ns = x->nstages;
    /* queue capacities: enough in flight to keep the next stage's workers busy */
    for (int s = 0; s < ns; s++) {
        sl_stage *st = &x->stage[s];
        int want;
        if (st->kind == &sl_stage_final)
            want = pl->out_depth;
        else
            want = 2 * (s + 1 < ns ? x->stage[s + 1].workers : 1) + 2;
        if (want < 4 && st->kind != &sl_stage_final)
            want = 4;
        if (st->qcap < want)
            st->qcap = want;
        SL_TRY(sl_queue__init(&st->out, (size_t)st->qcap, !x->spec->deterministic));
    }
    return SL_OK;
}


static int cut_stages(sl_exec *x) {
    int ns = 0;
    SL_TRY(group_stages(x, &ns));
    /* A memory source has no reading to overlap with: its first per-sample
     * ops run in the reading workers (one hand-off fewer per chunk). Readers
     * that read records into batch rows take a map stage whose every op will
     * run on the batch (rows_take_map). */
    if (ns >= 2 && x->stage[1].kind == &sl_stage_map && sl_source__reads_memory(x->in->src))
        merge_into_source(x, &ns, 0);
    else if (ns == 3 && x->stage[1].kind == &sl_stage_map && rows_take_map(x, &x->stage[1]))
        merge_into_source(x, &ns, 1);
    x->nstages = ns;
    split_cores(x, set_workers(x));
    return init_queues(x);
}

/* Parallel collation: when map + batch do not fuse (policy skip, filters
 * left in the stages, take/skip/shuffle_buffer before batch), the single
 * final thread would copy every sample into its batch. Instead it only
 * assigns samples to batches (it stays the one place that sees drops and
 * take/skip in stream order) and passes each batch-to-be on as a chunk; a
 * parallel stage after it does the copying, its output queue keeping the
 * final stage's order. Both of its queues keep order even in
 * non-deterministic mode: the final stage numbers the batches, and the
 * consumer's resume state (batch index) must not go backwards; the samples
 * have already been reordered upstream, so order costs little here. Not for
 * batches larger than a chunk can hold, and the spec's "parallel_collate":
 * false turns it off (tests compare both paths). */
static int add_stack_stage(sl_exec *x, sl_exec_layout *L) {
    const sl_plan *pl = x->env.plan;
    if (L->collation == &sl_collate_fused || !pl->has_batch || pl->batch_size > SL_FUSE_MAX_BATCH ||
        x->nstages >= SL_STATS_MAX_STAGES || x->stage[x->nstages - 1].kind != &sl_stage_final ||
        !x->spec->parallel_collate)
        return SL_OK;
    sl_stage *fin = &x->stage[x->nstages - 1];
    sl_stage *st = &x->stage[x->nstages];
    memset(st, 0, sizeof *st);
    st->kind = &sl_stage_collate;
    st->first = st->last = pl->nopt;
    snprintf(st->name, sizeof st->name, "collate(batch %lld)", (long long)pl->batch_size);
    st->workers = x->spec->threads > 0 ? x->spec->threads : x->ncpus;
    if (st->workers < 1)
        st->workers = 1;
    /* tuned like the map stages (autotune.c): it starts on an even share of
     * the cores with the other auto stages and gets more where its copying
     * costs most */
    st->autotune = x->spec->threads == 0;
    int share = st->workers;
    if (st->autotune) {
        int n_auto = 1;
        for (int s = 0; s < x->nstages; s++)
            if (x->stage[s].autotune && !(x->stage[s].kind == &sl_stage_source &&
                                          x->stage[s].last == x->stage[s].first))
                n_auto++;
        share = x->ncpus / n_auto;
        if (share < 1)
            share = 1;
        if (share > x->ncpus)
            share = x->ncpus;
    }
    atomic_init(&st->active, share);
    /* the batch queue moves to the new last stage; the final stage's output
     * becomes a chunk queue sized for the collating workers */
    st->qcap = fin->qcap;
    SL_TRY(sl_queue__init(&st->out, (size_t)st->qcap, 0));
    sl_queue__destroy(&fin->out);
    fin->qcap = 2 * st->workers + 2;
    int rc = sl_queue__init(&fin->out, (size_t)fin->qcap, 0);
    if (rc < 0) {
        sl_queue__destroy(&st->out);
        return rc;
    }
    x->nstages++;
    L->collation = &sl_collate_parallel;
    L->collate_stage = x->nstages - 1;
    if (pl->batch_size > L->chunk_cap)
        L->chunk_cap = (int)pl->batch_size;
    return SL_OK;
}

/* Reading straight into the batch. When the readers collate (map + batch
 * fusion, the source stage collating) and run nothing per sample (no ops, or
 * only vectorized ones, which run on the batch), and the source can write a
 * record's columns into caller memory (read_cols) and every column has a
 * fixed dtype and shape, a reader takes the batch's buffers first and reads
 * each record into its row. No per-sample tensors are made and no second
 * pass stacks them; the copy runs while the record is in cache. That per-
 * sample bookkeeping was a fifth of a reader's time on Fashion-MNIST
 * (784-byte records). The spec's "read_rows": false turns it off (tests
 * compare). */
static void choose_read_rows(sl_exec *x, sl_exec_layout *L) {
    L->read_rows = 0;
    const sl_stage *st = &x->stage[0];
    const sl_colset *in = &x->env.plan->src_cols;
    if (L->collation != &sl_collate_fused || L->collate_stage != 0 ||
        !sl_source__has_read_cols(x->in->src) || !x->spec->read_rows ||
        (st->last > st->first && L->vec_first != st->first) ||
        in->ncols != x->env.plan->out_cols.ncols || in->ncols != x->in->src->ncols)
        return;
    for (int c = 0; c < in->ncols; c++) {
        const sl_colinfo *ci = &in->col[c];
        size_t n = ci->ndim < SL_MAX_DIMS ? sl_pipeline__col_bytes(ci, 1) : 0;
        if (n == 0)
            return; /* unknown, encoded, or empty: the per-sample path */
        L->row_bytes[c] = n;
    }
    L->read_rows = 1;
}

/* Map + batch fusion: the chunks are whole batches, collated by the stage
 * before the final one; when the final stage would only pass batches on
 * (no take/skip after batch), the consumer takes them from the collating
 * stage itself: one thread and one hand-off fewer per batch. */
static int fuse(sl_exec *x, sl_exec_layout *L) {
    L->collation = &sl_collate_fused;
    L->collate_stage = x->nstages - 2;
    L->slot_col = pick_slot_col(&x->env.plan->out_cols);
    if (x->env.plan->batch_size > L->chunk_cap)
        L->chunk_cap = (int)x->env.plan->batch_size;
    for (int i = 0; i < x->env.plan->nopt; i++)
        if (x->env.plan->opt[i].after_batch)
            return SL_OK;
    sl_stage *fin = &x->stage[x->nstages - 1];
    sl_queue__destroy(&fin->out);
    memset(fin, 0, sizeof *fin);
    x->nstages--;
    L->direct = 1;
    sl_stage *last = &x->stage[x->nstages - 1];
    sl_queue__destroy(&last->out);
    last->qcap = x->env.plan->out_depth > 2 ? x->env.plan->out_depth : 2;
    snprintf(last->name + strlen(last->name), sizeof last->name - strlen(last->name),
             "+batch(%lld)", (long long)x->env.plan->batch_size);
    return sl_queue__init(&last->out, (size_t)last->qcap, !x->spec->deterministic);
}

/* Cut the optimised plan into stages, then decide map + batch fusion; the
 * decisions are written once, into x->layout. */
int sl_exec__layout(sl_exec *x) {
    SL_TRY(cut_stages(x));
    sl_exec_layout L;
    memset(&L, 0, sizeof L);
    L.collation = &sl_collate_final;
    L.collate_stage = x->nstages - 1;
    L.slot_col = -1;
    L.vec_first = -1;
    L.chunk_cap = 128;
    if (can_fuse_batch(x))
        SL_TRY(fuse(x, &L));
    choose_vectorized(x, &L);
    choose_read_rows(x, &L);
    SL_TRY(add_stack_stage(x, &L));
    /* the one write: the member is const for every other file (the
     * pipeline was allocated zeroed, and nothing has read the layout yet) */
    memcpy((void *)&x->layout, &L, sizeof L);
    /* relaxed mode: a map stage's workers take from their input only what
     * their output can admit (queue.c, "No deadlock") */
    for (int s = 1; s < x->nstages; s++)
        if (x->stage[s].kind == &sl_stage_map)
            sl_queue__set_reach(&x->stage[s - 1].out, x->stage[s].out.cap);
    /* each stage's environment, input and place; the hand-off takes from
     * the last */
    for (int s = 0; s < x->nstages; s++) {
        sl_stage *st = &x->stage[s];
        st->env = &x->env;
        st->index = s;
        st->in = s > 0 ? &x->stage[s - 1].out : NULL;
        st->collates = s == L.collate_stage && L.collation == &sl_collate_fused;
        if (st->kind == &sl_stage_source)
            st->self = x->in;
    }
    x->handoff.in = &x->stage[x->nstages - 1].out;
    x->env.last = x->handoff.in;
    return SL_OK;
}
