/*
 * stage_seq.c — the stages that see the stream in order, one thread each:
 * sequential stages (take, skip, shuffle buffers, repeat barriers) and the
 * final stage, which hands every sample that passes its sequential ops to
 * the collation (sl_collation: stage.h), counts the take/skip after batch,
 * and numbers the batches. See exec.h's DESIGN note.
 */
#include "pipeline/stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A sequential stage's thread state (its worker's `self`). */
typedef struct seq_ctx {
    sl_stage *st;
    const sl_stage_env *e;
    const sl_collation *C;         /* the final stage: its collation; else NULL */
    int ncounters;
    int counter_of[SL_STAGE_MAX_OPS]; /* node offset -> counter slot */
    seq_buf buf[SL_STAGE_MAX_OPS];    /* by node offset */
    sl_final f;                    /* the epoch and take/skip counters (every
                                      sequential stage); the final's batches */
    sl_chunk *out;                 /* not final: the chunk being filled */
} seq_ctx;

/* ---- the final stage's batches ------------------------------------------------------ */

/* A batch is complete: count it for the take/skip after batch; 0 when one
 * of them drops it. f->counter is then the state after this batch. */
static int batch_kept(sl_final *f) {
    const sl_stage *st = f->st;
    int keep = 1;
    for (int k = st->first; k < st->last; k++) {
        const sl_pnode *nd = &st->env->plan->opt[k];
        if (!nd->after_batch || !keep)
            continue;
        int64_t *cnt = &f->counter[f->counter_of[k - st->first]];
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

int sl_final__batch(sl_final *f, sl_batch *b) {
    if (!b)
        return SL_OK;
    atomic_fetch_add_explicit(&f->st->elements, (uint64_t)b->size, memory_order_relaxed);
    int keep = batch_kept(f);
    memcpy(b->counters, f->counter, sizeof b->counters);
    if (!keep) {
        sl_pipeline__batch_free(b);
        return SL_OK;
    }
    b->index = f->batch_index++;
    b->epoch = f->epoch;
    if (sl_stage__emit(f->st, b, 0, b->epoch) < 0) {
        sl_pipeline__batch_free(b);
        return SL_ECANCELED;
    }
    return SL_OK;
}

int sl_final__assigned(sl_final *f, sl_chunk *c) {
    const sl_stage_env *e = f->st->env;
    if (!c)
        return SL_OK;
    if (c->n == 0) {
        sl_stage__chunk_put(e, c);
        return SL_OK;
    }
    atomic_fetch_add_explicit(&f->st->elements, c->n, memory_order_relaxed);
    if (!batch_kept(f)) {
        sl_stage__chunk_put(e, c);
        return SL_OK;
    }
    memcpy(c->counters, f->counter, sizeof c->counters);
    c->bindex = f->batch_index++;
    c->epoch = f->epoch;
    c->seq = f->st->seq_out;
    if (sl_stage__emit(f->st, c, 0, c->epoch) < 0) {
        sl_stage__chunk_put(e, c);
        return SL_ECANCELED;
    }
    return SL_OK;
}

int sl_final__marker_batch(sl_final *f, int kind, uint64_t epoch, int err_rc, const char *msg) {
    sl_batch *b = sl_collate__marker(f->st->env, kind, epoch, err_rc, msg);
    if (!b)
        return sl__oom("ending an epoch");
    if (sl_stage__emit(f->st, b, 1, b->epoch) < 0) {
        sl_pipeline__batch_free(b);
        return SL_ECANCELED;
    }
    return SL_OK;
}

/* ---- samples in stream order ----------------------------------------------------------- */

/* The output of a sample that passed every sequential op: the final
 * stage's collation takes it, another stage passes it on in a chunk. */
static int seq_out(seq_ctx *x, sl_sample *s, uint64_t pos, uint64_t key) {
    if (x->C)
        return x->C->add(&x->f, s, pos, key);
    SL_TRY(sl_stage__chunk_add(x->e, &x->out, x->f.epoch, s, pos, key));
    sl_chunk *c = x->out;
    if (c->n == c->cap ||
        c->n >= (uint32_t)atomic_load_explicit(x->e->chunk_size, memory_order_relaxed)) {
        x->out = NULL;
        c->seq = x->st->seq_out;
        atomic_fetch_add_explicit(&x->st->elements, c->n, memory_order_relaxed);
        if (sl_stage__emit(x->st, c, 0, c->epoch) < 0) {
            sl_stage__chunk_put(x->e, c);
            return SL_ECANCELED;
        }
    }
    return SL_OK;
}

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

/* Feed a sample to node k of the stage (and on). Takes ownership of s. */
static int seq_feed(seq_ctx *x, int k, sl_sample *s, uint64_t pos, uint64_t key) {
    const sl_plan *pl = x->e->plan;
    for (; k < x->st->last; k++) {
        const sl_pnode *nd = &pl->opt[k];
        int off = k - x->st->first;
        if (nd->after_batch || nd->kind == SL_PN_BATCH || nd->kind == SL_PN_PREFETCH)
            continue;
        int64_t *cnt = &x->f.counter[x->counter_of[off]];
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
            if (!sb->rng_ready || sb->epoch != x->f.epoch) {
                sl_rng_init(&sb->rng, x->e->seed, x->f.epoch, 0, (uint64_t)nd->pos);
                sb->epoch = x->f.epoch;
                sb->rng_ready = 1;
            }
            seq_entry *in = NULL;
            if (sb->n < sb->cap) {
                in = (seq_entry *)(sb->mem + sb->n++ * sb->esz);
                atomic_fetch_add_explicit(&x->st->held, 1, memory_order_relaxed);
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

/* End of epoch from node k on: drain buffers. */
static int seq_end_epoch(seq_ctx *x, int k) {
    for (; k < x->st->last; k++) {
        const sl_pnode *nd = &x->e->plan->opt[k];
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
                atomic_fetch_sub_explicit(&x->st->held, 1, memory_order_relaxed);
                SL_TRY(seq_feed(x, k + 1, &out, opos, okey));
            }
            sb->rng_ready = 0;
        }
    }
    return SL_OK;
}

/* Pass an END or ERROR marker downstream. */
static int seq_marker(seq_ctx *x, int kind, int err_rc, const char *msg, uint64_t epoch) {
    if (x->C)
        return x->C->marker(&x->f, kind, epoch, err_rc, msg);
    if (x->out) { /* the partial chunk first */
        sl_chunk *c = x->out;
        x->out = NULL;
        c->seq = x->st->seq_out;
        if (sl_stage__emit(x->st, c, 0, c->epoch) < 0) {
            sl_stage__chunk_put(x->e, c);
            return SL_ECANCELED;
        }
    }
    return sl_stage__emit_marker(x->st, kind, epoch, err_rc, msg);
}

/* ---- the stages' table ---------------------------------------------------------------- */

/* The context of the stage's one thread, starting at the stage's position
 * (st->at: the final stage's counters and batch index after a restore). */
static int seq_worker_init(sl_worker *w) {
    sl_stage *st = w->st;
    seq_ctx *x = sl__calloc(1, sizeof *x);
    if (!x)
        return sl__oom("starting a sequential stage");
    x->st = st;
    x->e = w->env;
    if (st->kind == &sl_stage_final)
        x->C = w->env->layout->collation;
    for (int k = st->first; k < st->last && k - st->first < SL_STAGE_MAX_OPS; k++) {
        const sl_pnode *nd = &w->env->plan->opt[k];
        if ((nd->kind == SL_PN_TAKE || nd->kind == SL_PN_SKIP) && x->ncounters < SL_MAX_COUNTERS)
            x->counter_of[k - st->first] = x->ncounters++;
    }
    x->f.st = st;
    x->f.counter_of = x->counter_of;
    x->f.epoch = st->at.epoch;
    if (x->C) {
        memcpy(x->f.counter, st->at.counters, sizeof x->f.counter);
        x->f.batch_index = st->at.batch;
    }
    w->self = x;
    return SL_OK;
}

static void seq_worker_free(sl_worker *w) {
    seq_ctx *x = w->self;
    if (!x)
        return;
    for (int k = x->st->first; k < x->st->last; k++) {
        seq_buf *sb = &x->buf[k - x->st->first];
        for (size_t i = 0; sb->mem && i < sb->n; i++) {
            seq_entry *e = (seq_entry *)(sb->mem + i * sb->esz);
            for (uint32_t c = 0; c < e->ncols; c++)
                sl_buffer_release(e->col[c].buf);
        }
        atomic_fetch_sub_explicit(&x->st->held, sb->n, memory_order_relaxed);
        sl__free(sb->mem);
        sb->mem = NULL;
        sb->n = 0;
    }
    if (x->out)
        sl_stage__chunk_put(x->e, x->out);
    x->out = NULL;
    if (x->C && x->C->clear)
        x->C->clear(&x->f);
    sl__free(x);
    w->self = NULL;
}

static int seq_chunk(sl_worker *w, sl_chunk *c) {
    seq_ctx *x = w->self;
    sl_stage *st = w->st;
    int rc;
    sl_stage_span t0 = sl_stage__span_begin();
    if (c->kind == SL_CHUNK_DATA)
        x->f.epoch = c->epoch;
    if (c->kind == SL_CHUNK_DATA && c->batch) {
        rc = x->C->batch_in(&x->f, c); /* collated upstream (map + batch fusion) */
    } else if (c->kind == SL_CHUNK_DATA) {
        rc = SL_OK;
        for (uint32_t i = 0; i < c->n && rc >= 0; i++) {
            rc = seq_feed(x, st->first, &c->s[i], c->pos[i], c->key[i]);
            c->s[i].ncols = 0;
        }
        if (rc < 0 && rc != SL_ECANCELED) {
            char msg[SL__ERRMSG_MAX];
            sl_stage__copy_str(msg, sizeof msg, sl_errmsg());
            rc = seq_marker(x, SL_CHUNK_ERROR, rc, msg, x->f.epoch);
        }
    } else if (c->kind == SL_CHUNK_END) {
        x->f.epoch = c->epoch;
        rc = seq_end_epoch(x, st->first);
        if (rc >= 0 && x->C && x->C->flush)
            rc = x->C->flush(&x->f);
        if (rc >= 0)
            rc = seq_marker(x, SL_CHUNK_END, 0, NULL, c->epoch);
        memset(x->f.counter, 0, sizeof x->f.counter);
        x->f.batch_index = 0;
        x->f.epoch = c->epoch + 1;
    } else {
        rc = seq_marker(x, SL_CHUNK_ERROR, c->err_rc, c->errmsg, c->epoch);
    }
    sl_stage__span_end(st, 0, t0, c->n);
    sl_stage__chunk_put(x->e, c);
    if (rc == SL_ECANCELED)
        return -1;
    if (rc < 0) { /* could not even pass the error on */
        char msg[SL__ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s: %s", st->name, sl_errmsg());
        sl_stage__worker_fail(x->e, rc, msg);
        return -1;
    }
    return 0;
}

static const char *seq_explain(const sl_stage *st) {
    (void)st;
    return "sequential";
}

static const char *final_explain(const sl_stage *st) {
    return st->env->layout->collation->final_words;
}

/* Samples held in its shuffle buffers. */
static uint64_t seq_memory(const sl_stage *st) {
    return atomic_load_explicit(&((sl_stage *)st)->held, memory_order_relaxed) * st->sample_bytes;
}

/* The take/skip counters after the batch (its index is the batch's own). */
static void final_save(const sl_stage *st, const sl_batch *b, sl_resume *at) {
    (void)st;
    memcpy(at->counters, b->counters, sizeof at->counters);
}

const sl_stage_kind sl_stage_seq = {
    .key = "seq", .worker_init = seq_worker_init, .chunk = seq_chunk,
    .worker_free = seq_worker_free, .explain = seq_explain, .memory = seq_memory,
};

const sl_stage_kind sl_stage_final = {
    .key = "final", .worker_init = seq_worker_init, .chunk = seq_chunk,
    .worker_free = seq_worker_free, .explain = final_explain, .memory = seq_memory,
    .save = final_save,
};
