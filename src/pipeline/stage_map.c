/*
 * stage_map.c — the map stage: per-sample ops, on as many workers as the
 * stage has (stage.h). The source stage runs the same ops when the layout
 * merges the first map stage into it (a memory source; readers that read
 * records into batch rows), through sl_stage__run_ops.
 *
 * A worker takes a chunk, runs the stage's nodes over each sample (ops from
 * the op table, user maps and filters), drops what a filter drops or, under
 * on_error "skip", what failed, and passes the chunk on at its seq. When the
 * stage is the one that collates (map + batch fusion), the collation's slot
 * gives the last op each sample's place in the batch before the ops run,
 * and its `done` makes the batch after (sl_stage__chunk_done).
 */
#include "pipeline/stage.h"
#include "ops/ops.h"

#include <stdio.h>
#include <string.h>

/* ---- op worker state -------------------------------------------------------------------- */

int sl_stage__ops_init(sl_worker *w) {
    const sl_stage *st = w->st;
    for (int k = st->first; k < st->last; k++) {
        const sl_pnode *nd = &w->env->plan->opt[k];
        w->state[k - st->first] = NULL;
        if (w->init_rc == 0 && nd->kind == SL_PN_OP && nd->def->worker_init) {
            int rc = nd->def->worker_init(nd->params, &w->state[k - st->first]);
            if (rc < 0) {
                /* every chunk this worker takes then fails with this */
                w->init_rc = rc;
                snprintf(w->init_msg, sizeof w->init_msg, "ops[%d] (%s): %s", nd->pos,
                         nd->label, sl_errmsg());
            }
        }
    }
    return SL_OK;
}

void sl_stage__ops_free(sl_worker *w) {
    const sl_stage *st = w->st;
    for (int k = st->first; k < st->last; k++) {
        const sl_pnode *nd = &w->env->plan->opt[k];
        if (nd->kind == SL_PN_OP && nd->def->worker_free && w->state[k - st->first])
            nd->def->worker_free(w->state[k - st->first]);
    }
}

/* ---- one sample through the nodes ---------------------------------------------------------- */

static int apply_chain(sl_worker *w, sl_chunk *c, uint32_t i, int k0, int k1, void *slot,
                       char *msg, size_t cap) {
    const sl_stage_env *e = w->env;
    const sl_stage *st = w->st;
    sl_sample *s = &c->s[i];
    for (int k = k0; k < k1; k++) {
        const sl_pnode *nd = &e->plan->opt[k];
        int rc;
        if (nd->kind == SL_PN_OP) {
            sl_op_ctx ctx;
            ctx.seed = e->seed;
            ctx.epoch = c->epoch;
            ctx.key = c->key[i];
            ctx.index = s->index;
            ctx.stream_pos = c->pos[i];
            ctx.nparts = nd->nparts;
            for (uint32_t q = 0; q < nd->nparts; q++)
                ctx.pos[q] = nd->parts[q];
            ctx.rng_ready = 0;
            ctx.alloc = sl_pipeline__pools_op_alloc;
            ctx.alloc_ctx = e->pools;
            ctx.slot = NULL;
            if (slot && k == st->last - 1) {
                const sl_colinfo *ci = &e->plan->out_cols.col[e->layout->slot_col];
                ctx.slot = slot;
                ctx.slot_buf = c->slot.buf;
                ctx.slot_dtype = ci->dtype;
                ctx.slot_ndim = ci->ndim;
                ctx.slot_shape = ci->shape;
            }
            rc = sl_op_apply(nd->def, nd->params, w->state[k - st->first], &ctx, s);
        } else if (nd->kind == SL_PN_MAP) {
            sl_rng rng;
            sl_rng_init(&rng, e->seed, c->epoch, c->key[i], (uint64_t)nd->pos);
            sl_errclear();
            rc = nd->map(s, &rng, nd->user);
            if (rc > 0)
                rc = SL_OK;
        } else { /* SL_PN_FILTER */
            sl_errclear();
            rc = nd->filter(s, nd->user);
            rc = rc < 0 ? rc : rc > 0 ? SL_OK : SL_OP_DROP;
        }
        if (rc == SL_OP_DROP)
            return SL_OP_DROP;
        if (rc < 0) {
            /* Where the record lives, as its source says (an ImageFolder's
             * file, a tar member, a TFRecord file and offset), so that the
             * user can find the bad sample, not only its number. */
            char where[400];
            if (s->index < e->src->count)
                sl_source__where(e->src, s->index, NULL, where, sizeof where);
            else
                snprintf(where, sizeof where, "%.200s: record %llu", e->src_name,
                         (unsigned long long)s->index);
            const char *cause = sl_errmsg();
            if (rc == SL_ENOMEM)
                snprintf(msg, cap, "%s: ops[%d] (%s): %s", where, nd->pos, nd->label,
                         cause[0] ? cause : sl_status_str(rc));
            else
                sl_stage__op_error(e, msg, cap, where, nd->pos, nd->label,
                                   cause[0] ? cause : sl_status_str(rc));
            return rc;
        }
    }
    return SL_OK;
}

/* The per-sample op chain; for a sample the op split times (one in 8, as
 * sl_ops__phase_sample picks), its whole time as well, so the split's
 * "rest" comes from the same samples as its phases. */
int sl_stage__apply(sl_worker *w, sl_chunk *c, uint32_t i, int k0, int k1, void *slot,
                    char *msg, size_t cap) {
    uint64_t key = c->key[i], epoch = c->epoch;
    if (((key + epoch) & 7) != 0)
        return apply_chain(w, c, i, k0, k1, slot, msg, cap);
    uint64_t before = sl_ops__phase_acc.samples, t0 = sl__now_ns();
    int rc = apply_chain(w, c, i, k0, k1, slot, msg, cap);
    /* only a sample an image op counted (one a filter dropped first is not) */
    const sl_ops__phases *a = &sl_ops__phase_acc;
    if (a->samples != before || (a->last_key == key + 1 && a->last_epoch == epoch + 1))
        sl_ops__phase_acc.all_ns += sl__now_ns() - t0;
    return rc;
}

/* ---- a chunk ---------------------------------------------------------------------------- */

/* Move sample j of a chunk to slot i (i <= j); only live columns are copied. */
static void chunk_move(sl_chunk *c, uint32_t i, uint32_t j) {
    if (i == j)
        return;
    sl_sample *d = &c->s[i], *s = &c->s[j];
    d->index = s->index;
    d->ncols = s->ncols;
    memcpy(d->col, s->col, s->ncols * sizeof(sl_tensor));
    s->ncols = 0;
    c->pos[i] = c->pos[j];
    c->key[i] = c->key[j];
}

/* The end of the nodes a stage runs per sample: with map vectorization the
 * collating stage's tail runs per batch (the fused collation). */
static int per_sample_end(const sl_stage *st) {
    const sl_exec_layout *L = st->env->layout;
    return st->collates && L->vec_first >= 0 ? L->vec_first : st->last;
}

/* Every sample's columns are as the plan describes the input of node k
 * (where the plan knows dtype and shape): the batched kernels may then run on
 * the stacked batch. */
static int samples_fit(const sl_plan *pl, const sl_chunk *c, int k) {
    const sl_colset *in = k > 0 ? &pl->opt[k - 1].cols : &pl->src_cols;
    for (uint32_t i = 0; i < c->n; i++) {
        const sl_sample *s = &c->s[i];
        if ((int)s->ncols < in->ncols)
            return 0;
        for (int col = 0; col < in->ncols; col++) {
            const sl_colinfo *ci = &in->col[col];
            const sl_tensor *t = &s->col[col];
            if (ci->encoded || ci->dtype == SL_DTYPE_INVALID || ci->ndim < 0)
                continue;
            if (t->dtype != ci->dtype || t->ndim != ci->ndim)
                return 0;
            for (int d = 0; d < ci->ndim; d++)
                if (ci->shape[d] >= 0 && t->shape[d] != ci->shape[d])
                    return 0;
        }
    }
    return 1;
}

/* Map vectorization leaves the collating stage's last ops to the batch
 * (collate_fused.c). A chunk whose samples do not have the dtypes and
 * shapes the plan promised (a user map that changed them) runs them here,
 * per sample, with the same result (c->tail_ran). A failure fails the
 * chunk: fusion implies policy fail. */
static void tail_per_sample(sl_worker *w, sl_chunk *c) {
    const sl_stage *st = w->st;
    int k = w->env->layout->vec_first;
    if (!st->collates || k < 0 ||
        (c->n > 0 && c->n <= SL_FUSE_MAX_BATCH && samples_fit(w->env->plan, c, k)))
        return;
    for (uint32_t i = 0; i < c->n; i++) {
        char msg[SL__ERRMSG_MAX];
        int r = sl_stage__apply(w, c, i, k, st->last, NULL, msg, sizeof msg);
        if (r < 0) {
            sl_stage__chunk_fail(c, r, msg);
            return;
        }
    }
    c->tail_ran = 1;
}

int sl_stage__run_ops(sl_worker *w, sl_chunk *c) {
    const sl_stage_env *e = w->env;
    const sl_collation *C = e->layout->collation;
    uint32_t kept = 0, n = c->n;
    char *slot = w->st->collates && C->slot ? C->slot(w, c) : NULL;
    size_t slot_sz = slot ? c->slot.nbytes / n : 0;
    for (uint32_t i = 0; i < n; i++) {
        if (atomic_load_explicit(e->cancel, memory_order_relaxed)) {
            /* every slot is either live or has ncols 0 */
            c->n = n;
            sl_stage__chunk_put(e, c);
            return -1;
        }
        if (w->init_rc < 0) {
            for (uint32_t j = i; j < n; j++)
                sl_pipeline__sample_release(&c->s[j]);
            c->n = kept;
            sl_stage__chunk_fail(c, w->init_rc, w->init_msg);
            return 0;
        }
        char msg[SL__ERRMSG_MAX];
        /* the sample lands at position `kept` of the batch if it survives */
        int r = sl_stage__apply(w, c, i, w->st->first, per_sample_end(w->st),
                                slot ? slot + (size_t)kept * slot_sz : NULL, msg, sizeof msg);
        if (r == SL_OK) {
            chunk_move(c, kept, i);
            kept++;
            continue;
        }
        sl_pipeline__sample_release(&c->s[i]);
        if (r == SL_OP_DROP)
            continue;
        if (e->on_error == SL_ON_ERROR_SKIP && r != SL_ENOMEM) {
            sl_stage__note_skip(e->err, msg);
            continue;
        }
        /* release the untouched rest, then fail the chunk */
        for (uint32_t j = i + 1; j < n; j++)
            sl_pipeline__sample_release(&c->s[j]);
        c->n = kept;
        sl_stage__chunk_fail(c, r, msg);
        return 0;
    }
    c->n = kept;
    tail_per_sample(w, c);
    return 0;
}

/* One chunk: its samples through the stage's ops, then on. */
static int map_chunk(sl_worker *w, sl_chunk *c) {
    if (c->kind == SL_CHUNK_DATA) {
        sl_stage_span t0 = sl_stage__span_begin();
        uint32_t n = c->n;
        if (sl_stage__run_ops(w, c) < 0)
            return -1;
        sl_stage__chunk_done(w, c, t0, n);
    }
    return sl_stage__push_chunk(w->st, c);
}

static const char *map_explain(const sl_stage *st) {
    (void)st;
    return "per-sample ops, parallel";
}

const sl_stage_kind sl_stage_map = {
    .key = "map", .tunes = SL_TUNES_WORKERS, .worker_init = sl_stage__ops_init,
    .chunk = map_chunk, .worker_free = sl_stage__ops_free, .explain = map_explain,
};
