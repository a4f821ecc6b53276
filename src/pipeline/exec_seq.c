/*
 * exec_seq.c — the stages that see the stream in order: sequential stages
 * (take, skip, shuffle buffers, repeat barriers) and the final stage, which
 * collates samples into batches or, with parallel collation, only assigns
 * them to batches for the SL_ST_STACK workers (also here). See exec.c's
 * DESIGN note.
 */
#include "pipeline/exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sequential stages and the final (collating) stage --------------------------------- */

typedef struct seq_buf { /* a shuffle buffer */
    size_t cap, n, esz;
    uint8_t *mem;          /* n entries of esz bytes: header + ncols tensors */
    sl_rng rng;
    uint64_t epoch;
    int rng_ready;
} seq_buf;

typedef struct seq_entry {
    uint64_t index, pos, key;
    uint32_t ncols;
    sl_tensor col[];
} seq_entry;

typedef struct seq_ctx {
    sl_pipeline *p;
    sl_stage *st;
    int final;                     /* collate into batches */
    int assign;                    /* final, parallel collation: only assign
                                      samples to batches (x->out is the batch) */
    int ncounters;
    int64_t counter[SL_MAX_COUNTERS];
    int counter_of[SL_STAGE_MAX_OPS]; /* node offset -> counter slot */
    seq_buf buf[SL_STAGE_MAX_OPS];    /* by node offset */
    uint64_t epoch;
    int failed;                    /* an error passed: drop the rest */
    /* non-final: the chunk being filled */
    sl_chunk *out;
    /* final: the batch being filled */
    sl_collator col;
    uint64_t batch_index;
    int64_t post_counter[SL_MAX_COUNTERS];
} seq_ctx;

static int emit_item(seq_ctx *x, void *item, int barrier, uint64_t epoch) {
    uint64_t wait = 0;
    int rc = sl_queue__push(&x->st->out, x->st->seq_out++, item, barrier, epoch, &wait);
    atomic_fetch_add_explicit(&x->st->wait_out_ns, wait, memory_order_relaxed);
    return rc;
}

/* A batch is complete: count it for the take/skip after batch; 0 when one
 * of them drops it. x->counter is then the state after this batch. */
static int batch_kept(seq_ctx *x) {
    sl_pipeline *p = x->p;
    int keep = 1;
    for (int k = x->st->first; k < x->st->last; k++) {
        const sl_pnode *nd = &p->plan.opt[k];
        if (!nd->after_batch || !keep)
            continue;
        int64_t *cnt = &x->counter[x->counter_of[k - x->st->first]];
        if (nd->kind == SL_PN_SKIP) {
            if (*cnt < nd->n) {
                (*cnt)++;
                keep = 0;
            }
        } else if (nd->kind == SL_PN_TAKE) {
            if (*cnt < nd->n)
                (*cnt)++;
            else
                keep = 0;
        }
    }
    return keep;
}

/* Pass a complete batch on, unless a take/skip after batch drops it. */
static int emit_batch(seq_ctx *x, sl_batch *b) {
    if (!b)
        return SL_OK;
    atomic_fetch_add_explicit(&x->st->elements, (uint64_t)b->size, memory_order_relaxed);
    int keep = batch_kept(x);
    memcpy(b->counters, x->counter, sizeof b->counters);
    if (!keep) {
        sl_pipeline__batch_free(b);
        return SL_OK;
    }
    b->index = x->batch_index++;
    b->epoch = x->epoch;
    if (emit_item(x, b, 0, b->epoch) < 0) {
        sl_pipeline__batch_free(b);
        return SL_ECANCELED;
    }
    return SL_OK;
}

/* Parallel collation: the batch being assigned (x->out) is complete, or the
 * epoch ends: number it as emit_batch numbers a batch and pass its samples
 * on to the collating stage. */
static int assign_batch(seq_ctx *x) {
    sl_chunk *c = x->out;
    x->out = NULL;
    if (!c)
        return SL_OK;
    if (c->n == 0) {
        sl_pipeline__chunk_put(x->p, c);
        return SL_OK;
    }
    atomic_fetch_add_explicit(&x->st->elements, c->n, memory_order_relaxed);
    if (!batch_kept(x)) {
        sl_pipeline__chunk_put(x->p, c);
        return SL_OK;
    }
    memcpy(c->counters, x->counter, sizeof c->counters);
    c->bindex = x->batch_index++;
    c->epoch = x->epoch;
    c->seq = x->st->seq_out;
    if (emit_item(x, c, 0, c->epoch) < 0) {
        sl_pipeline__chunk_put(x->p, c);
        return SL_ECANCELED;
    }
    return SL_OK;
}

/* End of epoch in the final stage: the partial batch is dropped
 * (drop_remainder) or passed on. */
static int final_flush(seq_ctx *x) {
    if (x->assign) {
        if (x->p->plan.drop_remainder && x->out) {
            sl_pipeline__chunk_put(x->p, x->out);
            x->out = NULL;
        }
        return assign_batch(x);
    }
    if (x->p->plan.drop_remainder)
        sl_collate__clear(&x->col);
    return emit_batch(x, sl_collate__take(&x->col));
}

/* Final or intermediate output of a sample that passed every sequential op. */
static int seq_out(seq_ctx *x, sl_sample *s, uint64_t pos, uint64_t key) {
    if (x->final && !x->assign) {
        int rc = sl_collate__add(x->p, &x->col, s, pos, x->epoch);
        sl_pipeline__sample_release(s);
        return rc > 0 ? emit_batch(x, sl_collate__take(&x->col)) : rc;
    }
    if (!x->out) {
        x->out = sl_exec__chunk_get(x->p);
        if (!x->out) {
            sl_pipeline__sample_release(s);
            return sl__oom("passing samples on");
        }
        x->out->epoch = x->epoch;
    }
    sl_chunk *c = x->out;
    uint32_t i = c->n++;
    c->s[i].index = s->index;
    c->s[i].ncols = s->ncols;
    memcpy(c->s[i].col, s->col, s->ncols * sizeof(sl_tensor));
    s->ncols = 0;
    c->pos[i] = pos;
    c->key[i] = key;
    if (x->assign)
        return c->n == (uint32_t)x->p->plan.batch_size ? assign_batch(x) : SL_OK;
    if (c->n == c->cap || c->n >= (uint32_t)x->p->chunk_size) {
        x->out = NULL;
        c->seq = x->st->seq_out;
        atomic_fetch_add_explicit(&x->st->elements, c->n, memory_order_relaxed);
        if (emit_item(x, c, 0, c->epoch) < 0) {
            sl_pipeline__chunk_put(x->p, c);
            return SL_ECANCELED;
        }
    }
    return SL_OK;
}

/* Feed a sample to node k of the stage (and on). Takes ownership of s. */
/* A shuffle buffer's entry as a sample (the entry's tensors move out). */
static void entry_take(const seq_entry *e, sl_sample *out, uint64_t *pos, uint64_t *key) {
    out->index = e->index;
    out->ncols = e->ncols;
    memcpy(out->col, e->col, e->ncols * sizeof(sl_tensor));
    *pos = e->pos;
    *key = e->key;
}

/* Move sample `s` into a shuffle buffer's entry. */
static void entry_put(seq_entry *e, sl_sample *s, uint64_t pos, uint64_t key) {
    e->index = s->index;
    e->ncols = s->ncols;
    memcpy(e->col, s->col, s->ncols * sizeof(sl_tensor));
    e->pos = pos;
    e->key = key;
    s->ncols = 0;
}

static int seq_feed(seq_ctx *x, int k, sl_sample *s, uint64_t pos, uint64_t key) {
    sl_pipeline *p = x->p;
    for (; k < x->st->last; k++) {
        const sl_pnode *nd = &p->plan.opt[k];
        int off = k - x->st->first;
        if (nd->after_batch || nd->kind == SL_PN_BATCH || nd->kind == SL_PN_PREFETCH)
            continue;
        int64_t *cnt = &x->counter[x->counter_of[off]];
        if (nd->kind == SL_PN_TAKE) {
            if (*cnt >= nd->n) {
                sl_pipeline__sample_release(s);
                return SL_OK;
            }
            (*cnt)++;
        } else if (nd->kind == SL_PN_SKIP) {
            if (*cnt < nd->n) {
                (*cnt)++;
                sl_pipeline__sample_release(s);
                return SL_OK;
            }
        } else if (nd->kind == SL_PN_SHUFFLE_BUFFER) {
            seq_buf *sb = &x->buf[off];
            if (!sb->mem) {
                sb->cap = (size_t)nd->n;
                sb->esz = sizeof(seq_entry) + (size_t)SL_MAX_COLUMNS * sizeof(sl_tensor);
                sb->mem = sl__calloc(sb->cap, sb->esz);
                if (!sb->mem) {
                    sl_pipeline__sample_release(s);
                    return sl__oom("allocating a shuffle buffer");
                }
            }
            if (!sb->rng_ready || sb->epoch != x->epoch) {
                sl_rng_init(&sb->rng, p->spec->seed, x->epoch, 0, (uint64_t)nd->pos);
                sb->epoch = x->epoch;
                sb->rng_ready = 1;
            }
            seq_entry *in = NULL;
            if (sb->n < sb->cap) {
                in = (seq_entry *)(sb->mem + sb->n++ * sb->esz);
            } else {
                size_t j = (size_t)sl_rng_below(&sb->rng, sb->cap);
                seq_entry *e = (seq_entry *)(sb->mem + j * sb->esz);
                sl_sample out;
                uint64_t opos, okey;
                entry_take(e, &out, &opos, &okey);
                entry_put(e, s, pos, key);
                return seq_feed(x, k + 1, &out, opos, okey);
            }
            entry_put(in, s, pos, key);
            return SL_OK;
        }
    }
    return seq_out(x, s, pos, key);
}

/* End of epoch from node k on: drain buffers, flush, reset counters. */
static int seq_end_epoch(seq_ctx *x, int k) {
    sl_pipeline *p = x->p;
    for (; k < x->st->last; k++) {
        const sl_pnode *nd = &p->plan.opt[k];
        int off = k - x->st->first;
        if (nd->kind == SL_PN_SHUFFLE_BUFFER) {
            seq_buf *sb = &x->buf[off];
            while (sb->n > 0) {
                size_t j = (size_t)sl_rng_below(&sb->rng, sb->n);
                seq_entry *e = (seq_entry *)(sb->mem + j * sb->esz);
                sl_sample out;
                uint64_t opos, okey;
                entry_take(e, &out, &opos, &okey);
                seq_entry *last = (seq_entry *)(sb->mem + (sb->n - 1) * sb->esz);
                if (last != e)
                    memcpy(e, last, sb->esz);
                sb->n--;
                SL_TRY(seq_feed(x, k + 1, &out, opos, okey));
            }
            sb->rng_ready = 0;
        }
    }
    return SL_OK;
}

static void seq_reset_counters(seq_ctx *x) {
    memset(x->counter, 0, sizeof x->counter);
    x->batch_index = 0;
}

static void seq_ctx_clear(seq_ctx *x) {
    for (int k = x->st->first; k < x->st->last; k++) {
        seq_buf *sb = &x->buf[k - x->st->first];
        for (size_t i = 0; sb->mem && i < sb->n; i++) {
            seq_entry *e = (seq_entry *)(sb->mem + i * sb->esz);
            for (uint32_t c = 0; c < e->ncols; c++)
                sl_buffer_release(e->col[c].buf);
        }
        sl__free(sb->mem);
        sb->mem = NULL;
        sb->n = 0;
    }
    if (x->out)
        sl_pipeline__chunk_put(x->p, x->out);
    x->out = NULL;
    sl_collate__clear(&x->col);
}

/* Pass an END or ERROR marker downstream. */
static int seq_marker(seq_ctx *x, int kind, int err_rc, const char *msg, uint64_t epoch) {
    if (x->final && !x->assign) {
        sl_batch *b = sl_collate__marker(x->p, kind, epoch, err_rc, msg);
        if (!b)
            return sl__oom("ending an epoch");
        if (emit_item(x, b, 1, b->epoch) < 0) {
            sl_pipeline__batch_free(b);
            return SL_ECANCELED;
        }
        return SL_OK;
    }
    if (x->out && !x->final) { /* flush the partial chunk first (a batch being
                                  assigned stays: it goes on filling) */
        sl_chunk *c = x->out;
        x->out = NULL;
        c->seq = x->st->seq_out;
        if (emit_item(x, c, 0, c->epoch) < 0) {
            sl_pipeline__chunk_put(x->p, c);
            return SL_ECANCELED;
        }
    }
    sl_chunk *c = sl_exec__chunk_get(x->p);
    if (!c)
        return sl__oom("ending an epoch");
    c->kind = kind;
    c->epoch = epoch;
    c->err_rc = err_rc;
    if (msg)
        snprintf(c->errmsg, sizeof c->errmsg, "%s", msg);
    c->seq = x->st->seq_out;
    if (emit_item(x, c, 1, c->epoch) < 0) {
        sl_pipeline__chunk_put(x->p, c);
        return SL_ECANCELED;
    }
    return SL_OK;
}

void *sl_exec__seq_main(void *arg) {
    sl_worker *w = arg;
    sl_pipeline *p = w->p;
    sl_stage *st = w->st;
    seq_ctx *x = sl__calloc(1, sizeof *x);
    if (!x)
        return NULL; /* the consumer then waits; free still works */
    x->p = p;
    x->st = st;
    x->final = st->kind == SL_ST_COLLATE;
    x->assign = x->final && p->layout.collate == SL_COLLATE_PARALLEL;
    for (int k = st->first; k < st->last && k - st->first < SL_STAGE_MAX_OPS; k++) {
        const sl_pnode *nd = &p->plan.opt[k];
        if ((nd->kind == SL_PN_TAKE || nd->kind == SL_PN_SKIP) && x->ncounters < SL_MAX_COUNTERS)
            x->counter_of[k - st->first] = x->ncounters++;
    }
    x->epoch = p->start.epoch;
    if (x->final) {
        memcpy(x->counter, p->start.counters, sizeof x->counter);
        x->batch_index = p->start.batch;
    }
    for (;;) {
        sl_chunk *c = sl_exec__stage_input(p, st);
        if (!c)
            break;
        int rc;
        sl_exec_span t0 = sl_exec__span_begin();
        if (c->epoch != x->epoch && c->kind == SL_CHUNK_DATA) {
            x->epoch = c->epoch;
        }
        if (c->kind == SL_CHUNK_DATA && c->batch) {
            /* collated upstream (map + batch fusion) */
            x->epoch = c->epoch;
            rc = emit_batch(x, sl_collate__fused_batch(p, c));
        } else if (c->kind == SL_CHUNK_DATA) {
            rc = SL_OK;
            for (uint32_t i = 0; i < c->n && rc >= 0; i++) {
                rc = seq_feed(x, st->first, &c->s[i], c->pos[i], c->key[i]);
                c->s[i].ncols = 0;
            }
            if (rc < 0 && rc != SL_ECANCELED) {
                char msg[SL__ERRMSG_MAX];
                sl_exec__copy_str(msg, sizeof msg, sl_errmsg());
                rc = seq_marker(x, SL_CHUNK_ERROR, rc, msg, x->epoch);
            }
        } else if (c->kind == SL_CHUNK_END) {
            x->epoch = c->epoch;
            rc = seq_end_epoch(x, st->first);
            if (rc >= 0 && x->final)
                rc = final_flush(x);
            if (rc >= 0)
                rc = seq_marker(x, SL_CHUNK_END, 0, NULL, c->epoch);
            seq_reset_counters(x);
            x->epoch = c->epoch + 1;
        } else {
            rc = seq_marker(x, SL_CHUNK_ERROR, c->err_rc, c->errmsg, c->epoch);
        }
        sl_exec__span_end(p, st, 0, t0, c->n);
        sl_pipeline__chunk_put(p, c);
        if (rc == SL_ECANCELED)
            break;
        if (rc < 0) { /* could not even pass the error on */
            char msg[SL__ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s: %s", st->name, sl_errmsg());
            sl_exec__worker_fail(p, rc, msg);
            break;
        }
    }
    seq_ctx_clear(x);
    sl__free(x);
    return NULL;
}

/* ---- parallel collation ------------------------------------------------------------ */

/* Workers of the SL_ST_STACK stage, one chunk each call: each takes a chunk
 * holding one batch's samples (numbered by the final stage) and copies them
 * into the batch buffers; markers become marker batches. Output goes out at
 * the chunk's seq, so the consumer sees the final stage's order. */
int sl_exec__stack_chunk(sl_worker *w, sl_chunk *c) {
    sl_pipeline *p = w->p;
    sl_stage *st = w->st;
    int rc;
    sl_exec_span t0 = sl_exec__span_begin();
    uint32_t n = c->n;
    sl_batch *b;
    if (c->kind == SL_CHUNK_DATA && (rc = sl_collate__chunk(p, c)) >= 0) {
        b = c->batch;
        c->batch = NULL;
        b->index = c->bindex;
        b->epoch = c->epoch;
        memcpy(b->counters, c->counters, sizeof b->counters);
    } else if (c->kind == SL_CHUNK_DATA) { /* as the sequential path reports it */
        char msg[SL__ERRMSG_MAX];
        sl_exec__copy_str(msg, sizeof msg, sl_errmsg());
        b = sl_collate__marker(p, SL_CHUNK_ERROR, c->epoch, rc, msg);
    } else {
        b = sl_collate__marker(p, c->kind, c->epoch, c->err_rc, c->errmsg);
    }
    sl_exec__span_end(p, st, w->id, t0, n);
    atomic_fetch_add_explicit(&st->elements, n, memory_order_relaxed);
    uint64_t seq = c->seq;
    sl_pipeline__chunk_put(p, c);
    if (!b) {
        sl_exec__worker_fail(p, SL_ENOMEM, "collate: out of memory");
        return -1;
    }
    if (sl_exec__push(st, seq, b, b->kind != SL_CHUNK_DATA, b->epoch) < 0) {
        sl_pipeline__batch_free(b);
        return -1;
    }
    return 0;
}

