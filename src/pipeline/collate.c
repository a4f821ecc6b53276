/*
 * collate.c — samples into batches: the one place that stacks columns and
 * makes ragged ones, for the three collations (stage.h: collate_final.c,
 * collate_fused.c, collate_parallel.c).
 *
 * Two ways in, one set of rules:
 *  - a whole chunk at once (sl_collate__chunk): the fused collation's worker
 *    that finished a chunk of exactly one batch, or a worker of the collate
 *    stage with the samples the final stage assigned to a batch; when
 *    nothing runs per sample, a reader takes the batch first and reads every
 *    record into its row instead (sl_collate__rows);
 *  - one sample at a time (sl_collator): the final stage's, in stream order,
 *    after sequential ops that may drop some.
 *
 * A column is stacked (leading batch dim) when every sample agrees in dtype
 * and shape, else ragged (a list of per-sample tensors). Both paths give the
 * same batch for the same samples; tests compare them.
 *
 * Ownership: a batch owns every byte it points at. A sample column that holds
 * a reference (buf set) may be moved into a ragged list; a borrowed view (buf
 * NULL: memory sources, .slr mappings read by the executor) is always copied,
 * since its memory lives only as long as the source, and a batch may outlive
 * the pipeline.
 */
#include "pipeline/stage.h"

#include <stdio.h>
#include <string.h>

void sl_pipeline__batch_free(sl_batch *b) {
    if (!b)
        return;
    for (int c = 0; c < b->ncols; c++) {
        if (b->ragged[c] && b->items[c]) {
            for (int64_t i = 0; i < b->size; i++)
                sl_buffer_release(b->items[c][i].buf);
            sl__free(b->items[c]);
        }
        sl_buffer_release(b->col[c].buf);
    }
    sl__free(b);
}

static sl_batch *batch_new(const sl_stage_env *e, int kind, uint64_t epoch) {
    sl_batch *b = sl__calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->kind = kind;
    b->epoch = epoch;
    const sl_colset *oc = &e->plan->out_cols;
    b->ncols = oc->ncols;
    for (int c = 0; c < oc->ncols; c++)
        memcpy(b->names[c], oc->col[c].name, SL_COLNAME_MAX);
    return b;
}

sl_batch *sl_collate__marker(const sl_stage_env *e, int kind, uint64_t epoch, int err_rc,
                             const char *msg) {
    sl_batch *b = batch_new(e, kind, epoch);
    if (!b)
        return NULL;
    b->err_rc = err_rc;
    if (msg)
        snprintf(b->errmsg, sizeof b->errmsg, "%s", msg);
    return b;
}

/* A tensor that owns its bytes (for a batch): moved if it has a buffer,
 * else copied into a pooled buffer. */
static int own_tensor(const sl_stage_env *e, sl_tensor *dst, sl_tensor *src) {
    if (src->buf) {
        *dst = *src;
        memset(src, 0, sizeof *src);
        return SL_OK;
    }
    SL_TRY(sl_pipeline__pools_batch_tensor(e->pools, dst, src->dtype, src->ndim, src->shape,
                                           src->ndim > 0 ? src->shape[0] : 1));
    if (src->nbytes)
        memcpy(dst->data, src->data, src->nbytes);
    return SL_OK;
}

/* ---- a whole chunk at once ---------------------------------------------------------- */

int sl_collate__chunk(const sl_stage_env *e, sl_chunk *c) {
    sl_batch *b = sl__calloc(1, sizeof *b);
    if (!b)
        return sl__oom("collating a batch");
    const sl_colset *oc = &e->plan->out_cols;
    uint32_t n = c->n;
    b->kind = SL_CHUNK_DATA;
    b->ncols = oc->ncols;
    b->size = n;
    b->epoch = c->epoch;
    b->next_pos = n ? c->pos[n - 1] + 1 : 0;
    int rc = SL_OK;
    /* The slot column goes last: a sample's other column could (in theory)
     * be a view of the slot bytes, and must be copied out before the slot is
     * filled. */
    int slot_col = c->slot.buf ? e->layout->slot_col : -1;
    for (int k = 0; k < oc->ncols; k++) {
        int col = slot_col < 0 ? k : k < slot_col ? k : k + 1 < oc->ncols ? k + 1 : slot_col;
        memcpy(b->names[col], oc->col[col].name, SL_COLNAME_MAX);
        const sl_tensor *t0 = &c->s[0].col[col];
        int stack = n > 0 && t0->ndim < SL_MAX_DIMS;
        for (uint32_t i = 1; stack && i < n; i++) {
            const sl_tensor *t = &c->s[i].col[col];
            stack = t->dtype == t0->dtype && t->ndim == t0->ndim && t->nbytes == t0->nbytes &&
                    !memcmp(t->shape, t0->shape, sizeof(int64_t) * (size_t)t0->ndim);
        }
        if (stack) {
            int64_t shape[SL_MAX_DIMS];
            shape[0] = n;
            for (int d = 0; d < t0->ndim; d++)
                shape[d + 1] = t0->shape[d];
            size_t sz = t0->nbytes;
            if (col == slot_col && c->slot.dtype == t0->dtype && c->slot.ndim == t0->ndim + 1 &&
                !memcmp(c->slot.shape, shape, sizeof(int64_t) * (size_t)c->slot.ndim)) {
                b->col[col] = c->slot; /* the samples were written into it */
                memset(&c->slot, 0, sizeof c->slot);
            } else {
                rc = sl_pipeline__pools_batch_tensor(e->pools, &b->col[col], t0->dtype,
                                                     t0->ndim + 1, shape, e->plan->batch_size);
                if (rc < 0)
                    break;
            }
            char *dst = b->col[col].data;
            uint64_t in_place = 0;
            for (uint32_t i = 0; i < n; i++) {
                const void *src = c->s[i].col[col].data;
                if (sz && src != dst + (size_t)i * sz)
                    memcpy(dst + (size_t)i * sz, src, sz);
                else
                    in_place++;
            }
            if (col == slot_col)
                atomic_fetch_add_explicit(&e->counters->slot_writes, in_place,
                                          memory_order_relaxed);
        } else {
            b->ragged[col] = 1;
            b->items[col] = sl__calloc(n ? n : 1, sizeof(sl_tensor));
            if (!b->items[col]) {
                rc = sl__oom("collating a ragged column");
                break;
            }
            for (uint32_t i = 0; i < n && rc >= 0; i++)
                rc = own_tensor(e, &b->items[col][i], &c->s[i].col[col]);
            if (rc < 0)
                break;
        }
    }
    if (rc < 0) {
        sl_pipeline__batch_free(b);
        return rc;
    }
    for (uint32_t i = 0; i < n; i++)
        sl_pipeline__sample_release(&c->s[i]);
    sl_tensor_release(&c->slot);
    c->n = 0;
    c->batch = b;
    return SL_OK;
}

int sl_collate__rows(const sl_stage_env *e, sl_chunk *c, uint32_t n, char **rows) {
    sl_batch *b = batch_new(e, SL_CHUNK_DATA, c->epoch);
    if (!b)
        return sl__oom("collating a batch");
    b->size = n;
    b->next_pos = n ? c->pos[n - 1] + 1 : 0;
    const sl_colset *in = &e->plan->src_cols;
    for (int k = 0; k < b->ncols; k++) {
        const sl_colinfo *ci = &in->col[k];
        int64_t shape[SL_MAX_DIMS];
        shape[0] = n;
        for (int d = 0; d < ci->ndim; d++)
            shape[d + 1] = ci->shape[d];
        int rc = sl_pipeline__pools_batch_tensor(e->pools, &b->col[k], ci->dtype, ci->ndim + 1,
                                                 shape, e->plan->batch_size);
        if (rc < 0) {
            sl_pipeline__batch_free(b);
            return rc;
        }
        rows[k] = b->col[k].data;
    }
    c->batch = b;
    return SL_OK;
}

/* ---- one sample at a time (the final stage) ---------------------------------------- */

/* Make column c of the batch ragged: items so far become views of the
 * stacked buffer (each holding a reference). */
static int make_ragged(sl_collator *k, int64_t cap, int c) {
    sl_batch *b = k->b;
    sl_tensor *items = sl__calloc((size_t)cap, sizeof *items);
    if (!items)
        return sl__oom("collating a ragged column");
    sl_tensor *st = &b->col[c];
    for (int64_t i = 0; i < k->filled; i++) {
        sl_tensor *t = &items[i];
        sl_tensor_view(t, (char *)st->data + (size_t)i * k->itemsize[c], st->dtype, st->ndim - 1,
                       st->shape + 1);
        t->buf = sl_buffer_retain(st->buf);
    }
    sl_tensor_release(st);
    b->items[c] = items;
    b->ragged[c] = 1;
    return SL_OK;
}

int sl_collate__add(const sl_stage_env *e, sl_collator *k, sl_sample *s, uint64_t pos,
                    uint64_t epoch) {
    if (!e->plan->has_batch) {
        k->b = batch_new(e, SL_CHUNK_DATA, epoch);
        if (!k->b)
            return sl__oom("collating a sample");
        k->b->single = 1;
        k->b->size = 1;
        for (uint32_t c = 0; c < s->ncols && (int)c < k->b->ncols; c++)
            SL_TRY(own_tensor(e, &k->b->col[c], &s->col[c]));
        k->b->next_pos = pos + 1;
        k->filled = 1;
        return 1;
    }
    int64_t cap = e->plan->batch_size;
    if (!k->b) {
        k->b = batch_new(e, SL_CHUNK_DATA, epoch);
        if (!k->b)
            return sl__oom("collating a batch");
        k->filled = 0;
        for (int c = 0; c < k->b->ncols && c < (int)s->ncols; c++) {
            const sl_tensor *t = &s->col[c];
            int64_t shape[SL_MAX_DIMS];
            if (t->ndim >= SL_MAX_DIMS) { /* no room for the batch dim: ragged */
                k->b->ragged[c] = 1;
                k->b->items[c] = sl__calloc((size_t)cap, sizeof(sl_tensor));
                if (!k->b->items[c])
                    return sl__oom("collating a batch");
                continue;
            }
            shape[0] = cap;
            for (int d = 0; d < t->ndim; d++)
                shape[d + 1] = t->shape[d];
            SL_TRY(sl_pipeline__pools_batch_tensor(e->pools, &k->b->col[c], t->dtype,
                                                   t->ndim + 1, shape, cap));
            k->itemsize[c] = t->nbytes;
        }
    }
    sl_batch *b = k->b;
    for (int c = 0; c < b->ncols && c < (int)s->ncols; c++) {
        sl_tensor *t = &s->col[c];
        if (!b->ragged[c]) {
            sl_tensor *st = &b->col[c];
            int ok = t->dtype == st->dtype && t->ndim == st->ndim - 1 && t->nbytes == k->itemsize[c];
            for (int d = 0; ok && d < t->ndim; d++)
                ok = t->shape[d] == st->shape[d + 1];
            if (ok) {
                if (t->nbytes)
                    memcpy((char *)st->data + (size_t)k->filled * k->itemsize[c], t->data,
                           t->nbytes);
                continue;
            }
            SL_TRY(make_ragged(k, cap, c));
        }
        SL_TRY(own_tensor(e, &b->items[c][k->filled], t));
    }
    k->filled++;
    b->size = k->filled; /* batch_free releases items[0..size): a partial batch too */
    b->next_pos = pos + 1;
    return k->filled == cap;
}

sl_batch *sl_collate__take(sl_collator *k) {
    sl_batch *b = k->b;
    k->b = NULL;
    if (!b)
        return NULL;
    b->size = k->filled;
    if (!b->single) /* stacked columns get the real length */
        for (int c = 0; c < b->ncols; c++) {
            if (b->ragged[c])
                continue;
            b->col[c].shape[0] = k->filled;
            b->col[c].nbytes = (size_t)k->filled * k->itemsize[c];
        }
    k->filled = 0;
    return b;
}

void sl_collate__clear(sl_collator *k) {
    sl_pipeline__batch_free(k->b);
    k->b = NULL;
    k->filled = 0;
}

/* ---- the consumer's end -------------------------------------------------------------- */

int sl_collate__pass_batch(const sl_stage_env *e, void *item, uint64_t *next_index,
                           sl_batch **out) {
    (void)e;
    (void)next_index;
    *out = item;
    return SL_OK;
}

void sl_collate__drop_batch(void *item, void *env) {
    (void)env;
    sl_pipeline__batch_free(item);
}
