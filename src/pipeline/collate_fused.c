/*
 * collate_fused.c — map + batch fusion: when no sample can be dropped
 * before `batch` (no filters left in the stages, no take/skip/shuffle_buffer
 * before it, policy fail) the source cuts its work into chunks of exactly
 * one batch (whole_batches), and the worker of the last parallel stage that
 * finished a chunk's per-sample ops collates it (done), in parallel with
 * the other workers. Before the ops run, it takes the batch buffer of the
 * slot column, so that the stage's last op writes each sample straight into
 * its row (slot). With map vectorization the stage's batched tail then runs
 * once on the batch (the map stage runs it per sample instead for a chunk
 * whose samples do not fit the plan: stage_map.c); with read_rows the
 * readers read every record into its row and nothing runs per sample. The
 * final stage only passes the batches on (batch_in) or, with no take/skip
 * after batch, is left out: the consumer takes them from the collating
 * stage itself (direct; take).
 */
#include "pipeline/stage.h"

#include <stdio.h>
#include <string.h>

/* Before the collating stage runs its ops over a chunk (one batch), take
 * the batch buffer of column slot_col so that the stage's last op can write
 * each sample straight into its slot (sl_op_alloc). Returns the buffer's
 * bytes, or NULL when there is no slot to offer: then collation copies as
 * usual. Failing to get the buffer is not an error here; the copy path
 * meets the same shortage and reports it. */
static char *fused_slot(sl_worker *w, sl_chunk *c) {
    const sl_stage_env *e = w->env;
    const sl_stage *st = w->st;
    const sl_exec_layout *L = e->layout;
    if (L->slot_col < 0 || c->n == 0 || st->last <= st->first ||
        e->plan->opt[st->last - 1].kind != SL_PN_OP)
        return NULL;
    const sl_colinfo *ci = &e->plan->out_cols.col[L->slot_col];
    int64_t shape[SL_MAX_DIMS];
    shape[0] = c->n;
    for (int d = 0; d < ci->ndim; d++)
        shape[d + 1] = ci->shape[d];
    sl_tensor_release(&c->slot);
    if (sl_pipeline__pools_batch_tensor(e->pools, &c->slot, ci->dtype, ci->ndim + 1, shape,
                                        e->plan->batch_size) < 0) {
        sl_errclear();
        memset(&c->slot, 0, sizeof c->slot);
        return NULL;
    }
    return c->slot.data;
}

/* Map vectorization: run opt nodes [vec_first, last) of the collating stage
 * once on the collated batch b. Per-sample draws are keyed by the chunk's
 * keys, as the per-sample ops key them. */
static int vectorize(sl_worker *w, const sl_chunk *c, sl_batch *b, char *msg, size_t cap) {
    const sl_stage_env *e = w->env;
    const sl_stage *st = w->st;
    uint32_t n = (uint32_t)b->size;
    for (int k = e->layout->vec_first; k < st->last; k++) {
        const sl_pnode *nd = &e->plan->opt[k];
        int rc;
        sl_errclear();
        if (nd->kind == SL_PN_OP) {
            sl_op_bctx ctx;
            ctx.seed = e->seed;
            ctx.epoch = c->epoch;
            ctx.n = n;
            ctx.key = c->key;
            ctx.nparts = nd->nparts;
            for (uint32_t q = 0; q < nd->nparts; q++)
                ctx.pos[q] = nd->parts[q];
            ctx.alloc = sl_pipeline__pools_op_batch_alloc;
            ctx.alloc_ctx = e->pools;
            ctx.rows = e->plan->batch_size;
            rc = sl_op_apply_batch(nd->def, nd->params, w->state[k - st->first], &ctx, b->col);
        } else { /* a user map's batched form */
            sl_rng rng[SL_FUSE_MAX_BATCH];
            for (uint32_t i = 0; i < n; i++)
                sl_rng_init(&rng[i], e->seed, c->epoch, c->key[i], (uint64_t)nd->pos);
            rc = nd->batch_map(b->col, b->ncols, (int64_t)n, rng, nd->user);
            if (rc > 0)
                rc = SL_OK;
        }
        if (rc < 0) {
            const char *cause = sl_errmsg();
            snprintf(msg, cap, "%s: batch of records %llu...: ops[%d] (%s, batched): %s",
                     e->src_name, (unsigned long long)c->s[0].index, nd->pos, nd->label,
                     cause[0] ? cause : sl_status_str(rc));
            if (rc != SL_ENOMEM)
                sl_stage__add_skip_hint(e, msg, cap);
            return rc;
        }
    }
    atomic_fetch_add_explicit(&e->counters->vec_batches, 1, memory_order_relaxed);
    return SL_OK;
}

/* The collating stage finished a chunk's per-sample ops: its batch (the
 * one the readers read its rows into, or its samples collated now), then
 * the vectorized tail on it, unless the map stage ran that per sample
 * (c->tail_ran); a failure fails the chunk. */
static void fused_done(sl_worker *w, sl_chunk *c) {
    const sl_stage_env *e = w->env;
    char msg[SL__ERRMSG_MAX];
    int rc = SL_OK;
    if (c->batch) /* read_rows */
        c->n = 0;
    else if ((rc = sl_collate__chunk(e, c)) < 0)
        snprintf(msg, sizeof msg, "%s: collating a batch: %s", e->src_name, sl_errmsg());
    if (rc >= 0 && e->layout->vec_first >= 0 && !c->tail_ran)
        rc = vectorize(w, c, c->batch, msg, sizeof msg);
    if (rc < 0)
        sl_stage__chunk_fail(c, rc, msg);
}

/* Take the batch a fused chunk carries; NULL when drop_remainder drops it. */
static sl_batch *chunk_batch(const sl_plan *pl, sl_chunk *c) {
    sl_batch *b = c->batch;
    c->batch = NULL;
    if (b && pl->drop_remainder && b->size < pl->batch_size) {
        sl_pipeline__batch_free(b);
        return NULL;
    }
    return b;
}

/* The final stage (take/skip after batch): pass the batch on. */
static int fused_batch_in(sl_final *f, sl_chunk *c) {
    return sl_final__batch(f, chunk_batch(f->st->env->plan, c));
}

/* The consumer, direct: chunk c of the collating stage is its batch,
 * numbered from *next_index (NULL when dropped), or a marker (END resets
 * *next_index). */
static int fused_take(const sl_stage_env *e, void *item, uint64_t *next_index, sl_batch **out) {
    if (!e->layout->direct)
        return sl_collate__pass_batch(e, item, next_index, out);
    sl_chunk *c = item;
    int rc = SL_OK;
    *out = NULL;
    if (c->kind == SL_CHUNK_DATA) {
        sl_batch *b = chunk_batch(e->plan, c);
        if (b) {
            b->index = (*next_index)++;
            b->epoch = c->epoch;
        }
        *out = b;
    } else {
        *out = sl_collate__marker(e, c->kind, c->epoch, c->err_rc, c->errmsg);
        if (!*out)
            rc = sl__oom("ending an epoch");
        else if (c->kind == SL_CHUNK_END)
            *next_index = 0;
    }
    sl_stage__chunk_put(e, c);
    return rc;
}

static void fused_drop(void *item, void *env) {
    const sl_stage_env *e = env;
    if (e->layout->direct)
        sl_stage__chunk_put(e, item);
    else
        sl_pipeline__batch_free(item);
}

const sl_collation sl_collate_fused = {
    .key = "fused", .words = "each chunk is one batch",
    .final_words = "sequential, collates batches", .whole_batches = 1, .slot = fused_slot,
    .done = fused_done, .batch_in = fused_batch_in, .marker = sl_final__marker_batch,
    .take = fused_take, .drop = fused_drop,
};
