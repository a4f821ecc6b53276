/*
 * exec.c — running stages: chunks, the map stages, start and stop. The
 * source stage is in exec_source.c, the sequential and final stages in
 * exec_seq.c (what they share: exec.h).
 *
 * DESIGN
 * ------
 * The optimised plan is cut into stages, each a pool of threads with a
 * bounded output queue (queue.c):
 *
 *   source (N readers) -> map stage (N workers) [-> seq stage -> map ...]
 *                      -> final stage (1 thread: take/skip/shuffle_buffer,
 *                         batch collation)
 *                      [-> collate stage (N workers)] -> consumer
 *
 * Collation happens in one of three places, and the layout says which
 * (sl_exec_layout.collate, written once by layout.c). With map + batch
 * fusion (SL_COLLATE_FUSED) the last parallel stage collates whole-batch
 * chunks (maybe_collate) and the final stage only passes batches on (or is
 * left out: direct mode). Without
 * fusion (samples can be dropped before batch), the final stage assigns
 * samples to batches: it applies drops, take/skip and shuffle buffers in
 * stream order, numbers each batch, counts take/skip after batch and copies
 * the counters into the chunk (assign_batch), then passes the chunk of one
 * batch's samples on, by reference. The SL_ST_STACK stage's workers
 * (sl_exec__stack_chunk) copy those samples into the batch buffers in parallel and
 * push the batch at the chunk's seq, so the consumer gets the final stage's
 * order and the same bytes, index and resume state as when the final stage
 * collated them itself (sl_collate__add: the path for batches over
 * SL_FUSE_MAX_BATCH, no batch op, or "parallel_collate": false:
 * SL_COLLATE_FINAL; otherwise SL_COLLATE_PARALLEL). A batch
 * being assigned stays in the final stage across an ERROR marker, as the
 * sequential collator's partial batch does.
 *
 * Elements moving between stages are chunks: runs of up to chunk_size
 * consecutive samples, so that a queue operation is paid once per chunk, not
 * per sample. The source numbers chunks (seq) in stream order; parallel
 * stages keep the number, and their consumers reorder by it, so the final
 * stage sees samples in exactly the stream order whatever the timing
 * (deterministic mode). Sequential stages renumber their output.
 *
 * Every random draw is keyed by (seed, epoch, sample key, op position), so a
 * sample's result does not depend on the thread that made it.
 *
 * Epochs: when the source finishes an epoch it sends an END chunk (a
 * barrier) and, if the next epoch is below cur.end_epoch, goes straight on
 * with it: the pipeline fills with epoch e+1 while the consumer finishes e.
 * Otherwise the source parks until set_epoch() moves the end. Threads are
 * started once (first sl_pipeline_next) and live across epochs; only a jump
 * to another position (set_epoch mid-epoch, restore_state) stops and
 * restarts them.
 *
 * Errors: a failing read or op under policy fail turns its chunk into an
 * ERROR chunk (a barrier) carrying the message; it reaches the consumer in
 * stream order, so the error comes at the same batch on every run. Under
 * policy skip the sample is dropped and counted.
 *
 * Cancel: sl_pipeline_free sets `cancel`, closes every queue (waking
 * blocked pushes and pops) and broadcasts the park and autotune condition
 * variables; workers check `cancel` between samples, so a slow op delays
 * shutdown by at most one sample. Then all threads are joined.
 *
 * Lock order: never hold two of {cur.mu, a queue's mu, chunk_mu, err.mu,
 * tune.mu} at once, except cur.mu -> chunk_mu (taking a chunk while cutting
 * a range). Pools lock internally.
 */
#include "pipeline/exec.h"
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- chunks ------------------------------------------------------------------------ */

sl_chunk *sl_exec__chunk_get(sl_pipeline *p) {
    pthread_mutex_lock(&p->chunk_mu);
    sl_chunk *c = p->free_chunks;
    if (c)
        p->free_chunks = c->next_free;
    pthread_mutex_unlock(&p->chunk_mu);
    if (!c) {
        c = sl__calloc(1, sizeof *c);
        if (!c)
            return NULL;
        c->cap = (uint32_t)p->layout.chunk_cap;
        c->pos = sl__calloc(c->cap, sizeof *c->pos);
        c->key = sl__calloc(c->cap, sizeof *c->key);
        c->s = sl__calloc(c->cap, sizeof *c->s);
        if (!c->pos || !c->key || !c->s) {
            sl__free(c->pos);
            sl__free(c->key);
            sl__free(c->s);
            sl__free(c);
            return NULL;
        }
    }
    c->n = 0;
    c->kind = SL_CHUNK_DATA;
    c->err_rc = 0;
    c->errmsg[0] = '\0';
    c->batch = NULL;
    memset(&c->slot, 0, sizeof c->slot);
    return c;
}


int sl_exec__process_chunk(struct sl_pipeline *p, sl_worker *w, sl_chunk *c);

void sl_pipeline__chunk_put(sl_pipeline *p, sl_chunk *c) {
    for (uint32_t i = 0; i < c->n; i++)
        sl_pipeline__sample_release(&c->s[i]);
    c->n = 0;
    sl_pipeline__batch_free(c->batch);
    c->batch = NULL;
    sl_tensor_release(&c->slot);
    pthread_mutex_lock(&p->chunk_mu);
    c->next_free = p->free_chunks;
    p->free_chunks = c;
    pthread_mutex_unlock(&p->chunk_mu);
}

static void chunk_destroy(sl_chunk *c) {
    sl__free(c->pos);
    sl__free(c->key);
    sl__free(c->s);
    sl__free(c);
}

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

void sl_exec__chunk_fail(sl_pipeline *p, sl_chunk *c, int rc, const char *msg) {
    for (uint32_t i = 0; i < c->n; i++)
        sl_pipeline__sample_release(&c->s[i]);
    c->n = 0;
    c->kind = SL_CHUNK_ERROR;
    c->err_rc = rc;
    snprintf(c->errmsg, sizeof c->errmsg, "%s", msg);
}

void sl_exec__add_skip_hint(const sl_pipeline *p, char *msg, size_t cap) {
    if (p->spec->on_error != SL_ON_ERROR_FAIL)
        return;
    size_t hl = sizeof SL_EXEC_SKIP_HINT - 1, n = strlen(msg);
    if (hl + 4 >= cap)
        return;
    if (n + hl >= cap) { /* cut the cause short, say so, keep the hint */
        n = cap - hl - 4;
        memcpy(msg + n, "...", 3);
        n += 3;
    }
    memcpy(msg + n, SL_EXEC_SKIP_HINT, hl + 1);
}

void sl_exec__op_error(const sl_pipeline *p, char *msg, size_t cap, const char *where, int pos,
                       const char *label, const char *cause) {
    snprintf(msg, cap, "%s: ops[%d] (%s): %s", where, pos, label, cause);
    sl_exec__add_skip_hint(p, msg, cap);
}

void sl_exec__copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void sl_exec__note_skip(sl_pipeline *p, const char *msg) {
    pthread_mutex_lock(&p->err.mu);
    p->err.skipped++;
    if (p->err.n < SL_STATS_MAX_ERRORS)
        sl_exec__copy_str(p->err.msg[p->err.n++], sizeof p->err.msg[0], msg);
    pthread_mutex_unlock(&p->err.mu);
}

void sl_exec__note_skip_range(sl_pipeline_errors *e, uint64_t first, uint64_t count, uint64_t n,
                              const char *msg) {
    pthread_mutex_lock(&e->mu);
    e->skipped += n;
    int seen = 0;
    for (int k = 0; k < e->ndead && !seen; k++)
        seen = e->dead_first[k] == first;
    if (!seen && msg && e->n < SL_STATS_MAX_ERRORS) {
        /* "...: record N: cause" becomes "...: records A..B: cause" */
        const char *at = strstr(msg, ": record ");
        char *end = NULL;
        if (at)
            strtoull(at + 9, &end, 10);
        if (at && end && end != at + 9 && count > 1)
            snprintf(e->msg[e->n], sizeof e->msg[0], "%.*s: records %llu..%llu%s",
                     (int)(at - msg), msg, (unsigned long long)first,
                     (unsigned long long)(first + count - 1), end);
        else
            sl_exec__copy_str(e->msg[e->n], sizeof e->msg[0], msg);
        e->n++;
        e->dead_first[e->ndead++] = first;
    }
    pthread_mutex_unlock(&e->mu);
}

/* A worker cannot go on (out of memory outside any sample): store the error
 * and close the consumer's queue, so that a blocked sl_pipeline_next wakes
 * up and returns it. */
void sl_exec__worker_fail(sl_pipeline *p, int rc, const char *msg) {
    pthread_mutex_lock(&p->err.mu);
    if (!p->err.failed) {
        p->err.failed = 1;
        p->err.fail_rc = rc;
        sl_exec__copy_str(p->err.fail_msg, sizeof p->err.fail_msg, msg);
    }
    pthread_mutex_unlock(&p->err.mu);
    sl_queue__close(&p->stage[p->nstages - 1].out);
}

/* A worker finished a unit of work that began at t0: count the busy time
 * and, when tracing, record the span. */
static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A unit of work starts: wall clock and this thread's CPU clock (the two
 * apart tell computing from waiting on reads or sleeps, for the verdict). */
sl_exec_span sl_exec__span_begin(void) {
    sl_exec_span s = {sl__now_ns(), thread_cpu_ns()};
    return s;
}

void sl_exec__span_end(sl_pipeline *p, sl_stage *st, int worker, sl_exec_span sp, uint32_t n) {
    uint64_t t1 = sl__now_ns(), t0 = sp.t0;
    atomic_fetch_add_explicit(&st->busy_ns, t1 - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->cpu_ns, thread_cpu_ns() - sp.c0, memory_order_relaxed);
    sl_pipeline__phases_take(st);
    if (p->trace)
        sl_pipeline__trace_add(p, (int)(st - p->stage), worker, t0, t1 - t0, n);
}

static int apply_nodes(sl_pipeline *p, sl_worker *w, sl_chunk *c, uint32_t i, int k0, int k1,
                       void *slot, char *msg, size_t cap);

/* Every sample's columns are as the plan describes the input of node k
 * (where the plan knows dtype and shape): the batched kernels may then run on
 * the stacked batch. */
static int samples_fit(const sl_pipeline *p, const sl_chunk *c, int k) {
    const sl_colset *in = k > 0 ? &p->plan.opt[k - 1].cols : &p->plan.src_cols;
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

/* Map vectorization: run opt nodes [vec_first, last) of the collating stage
 * once on the collated batch. Per-sample draws are keyed by c->key, as the
 * per-sample ops key them. */
static int vectorize_batch(sl_pipeline *p, sl_worker *w, sl_chunk *c, char *msg, size_t cap) {
    const sl_stage *st = w->st;
    sl_batch *b = c->batch;
    uint32_t n = (uint32_t)b->size;
    for (int k = p->layout.vec_first; k < st->last; k++) {
        const sl_pnode *nd = &p->plan.opt[k];
        int rc;
        sl_errclear();
        if (nd->kind == SL_PN_OP) {
            sl_op_bctx ctx;
            ctx.seed = p->spec->seed;
            ctx.epoch = c->epoch;
            ctx.n = n;
            ctx.key = c->key;
            ctx.nparts = nd->nparts;
            for (uint32_t q = 0; q < nd->nparts; q++)
                ctx.pos[q] = nd->parts[q];
            ctx.alloc = sl_pipeline__pools_op_batch_alloc;
            ctx.alloc_ctx = p->pools;
            ctx.rows = p->plan.batch_size;
            rc = sl_op_apply_batch(nd->def, nd->params, w->state[k - st->first], &ctx, b->col);
        } else { /* a user map's batched form */
            sl_rng rng[SL_FUSE_MAX_BATCH];
            for (uint32_t i = 0; i < n; i++)
                sl_rng_init(&rng[i], p->spec->seed, c->epoch, c->key[i], (uint64_t)nd->pos);
            rc = nd->batch_map(b->col, b->ncols, (int64_t)n, rng, nd->user);
            if (rc > 0)
                rc = SL_OK;
        }
        if (rc < 0) {
            const char *cause = sl_errmsg();
            snprintf(msg, cap, "%s: batch of records %llu...: ops[%d] (%s, batched): %s",
                     p->src_name, (unsigned long long)c->s[0].index, nd->pos,
                     nd->label, cause[0] ? cause : sl_status_str(rc));
            if (rc != SL_ENOMEM)
                sl_exec__add_skip_hint(p, msg, cap);
            return rc;
        }
    }
    atomic_fetch_add_explicit(&p->stats.vec_batches, 1, memory_order_relaxed);
    return SL_OK;
}

/* Map + batch fusion: the last parallel stage collates its chunk (and, with
 * map vectorization, runs the batched tail of its ops on the batch; when some
 * sample does not have the shapes the plan promised, that tail runs per
 * sample instead, with the same result). */
static void maybe_collate(sl_pipeline *p, sl_worker *w, sl_chunk *c) {
    const sl_stage *st = w->st;
    const sl_exec_layout *L = &p->layout;
    if (L->collate != SL_COLLATE_FUSED || c->kind != SL_CHUNK_DATA ||
        st != &p->stage[L->collate_stage])
        return;
    char msg[SL__ERRMSG_MAX];
    if (c->batch) { /* read_rows: the records were read into it */
        int rc = L->vec_first >= 0 ? vectorize_batch(p, w, c, msg, sizeof msg) : SL_OK;
        c->n = 0;
        if (rc < 0) {
            sl_pipeline__batch_free(c->batch);
            c->batch = NULL;
            sl_exec__chunk_fail(p, c, rc, msg);
        }
        return;
    }
    int batched = L->vec_first >= 0 && c->n > 0 && c->n <= SL_FUSE_MAX_BATCH;
    if (L->vec_first >= 0 && !(batched && samples_fit(p, c, L->vec_first))) {
        batched = 0;
        for (uint32_t i = 0; i < c->n; i++) {
            int r = apply_nodes(p, w, c, i, L->vec_first, st->last, NULL, msg, sizeof msg);
            if (r < 0) { /* fusion implies policy fail: the chunk fails */
                sl_exec__chunk_fail(p, c, r, msg);
                return;
            }
        }
    }
    int rc = sl_collate__chunk(p, c);
    if (rc < 0) {
        snprintf(msg, sizeof msg, "%s: collating a batch: %s", p->src_name, sl_errmsg());
        sl_exec__chunk_fail(p, c, rc, msg);
        return;
    }
    if (batched && (rc = vectorize_batch(p, w, c, msg, sizeof msg)) < 0) {
        sl_pipeline__batch_free(c->batch);
        c->batch = NULL;
        sl_exec__chunk_fail(p, c, rc, msg);
    }
}

void sl_exec__worker_gate(sl_pipeline *p, sl_worker *w) {
    if (w->id < atomic_load_explicit(&w->st->active, memory_order_relaxed))
        return;
    pthread_mutex_lock(&p->tune.mu);
    while (w->id >= atomic_load(&w->st->active) && !atomic_load(&p->cancel))
        pthread_cond_wait(&p->tune.cv, &p->tune.mu);
    pthread_mutex_unlock(&p->tune.mu);
}

/* The next chunk from the stage before `st`, blocking; the wait counts as
 * the stage's time waiting for input. NULL when the queue closed. */
sl_chunk *sl_exec__stage_input(sl_pipeline *p, sl_stage *st) {
    void *item;
    uint64_t wait_in = 0;
    int rc = sl_queue__pop(&p->stage[st - p->stage - 1].out, &item, &wait_in, -1);
    atomic_fetch_add_explicit(&st->wait_in_ns, wait_in, memory_order_relaxed);
    return rc == SL_OK ? item : NULL;
}

void sl_exec__each_input(sl_worker *w, int (*handle)(sl_worker *w, sl_chunk *c)) {
    for (;;) {
        sl_exec__worker_gate(w->p, w);
        sl_chunk *c = sl_exec__stage_input(w->p, w->st);
        if (!c || handle(w, c) < 0)
            return;
    }
}


void sl_exec__chunk_done(sl_pipeline *p, sl_worker *w, sl_chunk *c, sl_exec_span t0, uint32_t n) {
    maybe_collate(p, w, c);
    sl_exec__span_end(p, w->st, w->id, t0, n);
    atomic_fetch_add_explicit(&w->st->elements, n, memory_order_relaxed);
}

int sl_exec__push(sl_stage *st, uint64_t seq, void *item, int barrier, uint64_t epoch) {
    uint64_t wait = 0;
    int rc = sl_queue__push(&st->out, seq, item, barrier, epoch, &wait);
    atomic_fetch_add_explicit(&st->wait_out_ns, wait, memory_order_relaxed);
    return rc;
}

int sl_exec__push_chunk(sl_pipeline *p, sl_stage *st, sl_chunk *c) {
    if (sl_exec__push(st, c->seq, c, c->kind != SL_CHUNK_DATA, c->epoch) < 0) {
        sl_pipeline__chunk_put(p, c);
        return -1;
    }
    return 0;
}

/* ---- map stages ----------------------------------------------------------------------- */

/* Apply the stage's nodes to sample i of c. SL_OK keep, SL_OP_DROP drop,
 * negative: error with the full message in `msg`. */
static int apply_chain(sl_pipeline *p, sl_worker *w, sl_chunk *c, uint32_t i, int k0, int k1,
                       void *slot, char *msg, size_t cap);

/* The per-sample op chain; for a sample the op split times (one in 8, as
 * sl_ops__phase_sample picks), its whole time as well, so the split's
 * "rest" comes from the same samples as its phases. */
static int apply_nodes(sl_pipeline *p, sl_worker *w, sl_chunk *c, uint32_t i, int k0, int k1,
                       void *slot, char *msg, size_t cap) {
    uint64_t key = c->key[i], epoch = c->epoch;
    if (((key + epoch) & 7) != 0)
        return apply_chain(p, w, c, i, k0, k1, slot, msg, cap);
    uint64_t before = sl_ops__phase_acc.samples, t0 = sl__now_ns();
    int rc = apply_chain(p, w, c, i, k0, k1, slot, msg, cap);
    /* only a sample an image op counted (one a filter dropped first is not) */
    const sl_ops__phases *a = &sl_ops__phase_acc;
    if (a->samples != before || (a->last_key == key + 1 && a->last_epoch == epoch + 1))
        sl_ops__phase_acc.all_ns += sl__now_ns() - t0;
    return rc;
}

static int apply_chain(sl_pipeline *p, sl_worker *w, sl_chunk *c, uint32_t i, int k0, int k1,
                       void *slot, char *msg, size_t cap) {
    const sl_stage *st = w->st;
    sl_sample *s = &c->s[i];
    for (int k = k0; k < k1; k++) {
        const sl_pnode *nd = &p->plan.opt[k];
        int rc;
        if (nd->kind == SL_PN_OP) {
            sl_op_ctx ctx;
            ctx.seed = p->spec->seed;
            ctx.epoch = c->epoch;
            ctx.key = c->key[i];
            ctx.index = s->index;
            ctx.stream_pos = c->pos[i];
            ctx.nparts = nd->nparts;
            for (uint32_t q = 0; q < nd->nparts; q++)
                ctx.pos[q] = nd->parts[q];
            ctx.rng_ready = 0;
            ctx.alloc = sl_pipeline__pools_op_alloc;
            ctx.alloc_ctx = p->pools;
            ctx.slot = NULL;
            if (slot && k == st->last - 1) {
                const sl_colinfo *ci = &p->plan.out_cols.col[p->layout.slot_col];
                ctx.slot = slot;
                ctx.slot_buf = c->slot.buf;
                ctx.slot_dtype = ci->dtype;
                ctx.slot_ndim = ci->ndim;
                ctx.slot_shape = ci->shape;
            }
            rc = sl_op_apply(nd->def, nd->params, w->state[k - st->first], &ctx, s);
        } else if (nd->kind == SL_PN_MAP) {
            sl_rng rng;
            sl_rng_init(&rng, p->spec->seed, c->epoch, c->key[i], (uint64_t)nd->pos);
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
            if (s->index < p->src->count)
                sl_source__where(p->src, s->index, NULL, where, sizeof where);
            else
                snprintf(where, sizeof where, "%.200s: record %llu", p->src_name,
                         (unsigned long long)s->index);
            const char *cause = sl_errmsg();
            if (rc == SL_ENOMEM)
                snprintf(msg, cap, "%s: ops[%d] (%s): %s", where, nd->pos, nd->label,
                         cause[0] ? cause : sl_status_str(rc));
            else
                sl_exec__op_error(p, msg, cap, where, nd->pos, nd->label,
                                  cause[0] ? cause : sl_status_str(rc));
            return rc;
        }
    }
    return SL_OK;
}

/* The end of the nodes a stage runs per sample: with map vectorization the
 * collating stage's tail runs per batch (vectorize_chunk). */
static int per_sample_end(const sl_pipeline *p, const sl_stage *st) {
    const sl_exec_layout *L = &p->layout;
    if (L->vec_first >= 0 && st == &p->stage[L->collate_stage])
        return L->vec_first;
    return st->last;
}

/* Map + batch fusion: before the collating stage runs its ops over a chunk
 * (one batch), take the batch buffer of column slot_col so that the stage's
 * last op can write each sample straight into its slot (sl_op_alloc). Returns
 * the buffer's bytes, or NULL when there is no slot to offer: then collation
 * copies as usual. Failing to get the buffer is not an error here; the copy
 * path meets the same shortage and reports it. */
static char *take_slot(sl_pipeline *p, const sl_stage *st, sl_chunk *c) {
    const sl_exec_layout *L = &p->layout;
    if (L->collate != SL_COLLATE_FUSED || L->slot_col < 0 || c->n == 0 ||
        st != &p->stage[L->collate_stage] || st->last <= st->first ||
        p->plan.opt[st->last - 1].kind != SL_PN_OP)
        return NULL;
    const sl_colinfo *ci = &p->plan.out_cols.col[L->slot_col];
    int64_t shape[SL_MAX_DIMS];
    shape[0] = c->n;
    for (int d = 0; d < ci->ndim; d++)
        shape[d + 1] = ci->shape[d];
    sl_tensor_release(&c->slot);
    if (sl_pipeline__pools_batch_tensor(p->pools, &c->slot, ci->dtype, ci->ndim + 1, shape,
                                        p->plan.batch_size) < 0) {
        sl_errclear();
        memset(&c->slot, 0, sizeof c->slot);
        return NULL;
    }
    return c->slot.data;
}

/* Run the stage's per-sample ops over a data chunk, dropping filtered and
 * (policy skip) failed samples. Returns 0, or -1 on cancel (the chunk has
 * been recycled). */
int sl_exec__process_chunk(sl_pipeline *p, sl_worker *w, sl_chunk *c) {
    uint32_t kept = 0, n = c->n;
    char *slot = take_slot(p, w->st, c);
    size_t slot_sz = slot ? c->slot.nbytes / n : 0;
    for (uint32_t i = 0; i < n; i++) {
        if (atomic_load_explicit(&p->cancel, memory_order_relaxed)) {
            /* every slot is either live or has ncols 0 */
            c->n = n;
            sl_pipeline__chunk_put(p, c);
            return -1;
        }
        if (w->init_rc < 0) {
            for (uint32_t j = i; j < n; j++)
                sl_pipeline__sample_release(&c->s[j]);
            c->n = kept;
            sl_exec__chunk_fail(p, c, w->init_rc, w->init_msg);
            return 0;
        }
        char msg[SL__ERRMSG_MAX];
        /* the sample lands at position `kept` of the batch if it survives */
        int r = apply_nodes(p, w, c, i, w->st->first, per_sample_end(p, w->st),
                            slot ? slot + (size_t)kept * slot_sz : NULL, msg, sizeof msg);
        if (r == SL_OK) {
            chunk_move(c, kept, i);
            kept++;
            continue;
        }
        sl_pipeline__sample_release(&c->s[i]);
        if (r == SL_OP_DROP)
            continue;
        if (p->spec->on_error == SL_ON_ERROR_SKIP && r != SL_ENOMEM) {
            sl_exec__note_skip(p, msg);
            continue;
        }
        /* release the untouched rest, then fail the chunk */
        for (uint32_t j = i + 1; j < n; j++)
            sl_pipeline__sample_release(&c->s[j]);
        c->n = kept;
        sl_exec__chunk_fail(p, c, r, msg);
        return 0;
    }
    c->n = kept;
    return 0;
}

/* One chunk of a map stage (sl_exec__each_input's handle): its samples
 * through the stage's ops, then on. */
static int map_chunk(sl_worker *w, sl_chunk *c) {
    if (c->kind == SL_CHUNK_DATA) {
        sl_exec_span t0 = sl_exec__span_begin();
        uint32_t n = c->n;
        if (sl_exec__process_chunk(w->p, w, c) < 0)
            return -1;
        sl_exec__chunk_done(w->p, w, c, t0, n);
    }
    return sl_exec__push_chunk(w->p, w->st, c);
}

/* ---- start and stop ---------------------------------------------------- */

static void *worker_main(void *arg) {
    sl_worker *w = arg;
    sl_pipeline *p = w->p;
    sl_stage *st = w->st;
    if (st->kind == SL_ST_SOURCE || st->kind == SL_ST_MAP) {
        for (int k = st->first; k < st->last; k++) {
            const sl_pnode *nd = &p->plan.opt[k];
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
        if (st->kind == SL_ST_SOURCE)
            sl_exec__source_main(arg);
        else
            sl_exec__each_input(w, map_chunk);
        for (int k = st->first; k < st->last; k++) {
            const sl_pnode *nd = &p->plan.opt[k];
            if (nd->kind == SL_PN_OP && nd->def->worker_free && w->state[k - st->first])
                nd->def->worker_free(w->state[k - st->first]);
        }
        return NULL;
    }
    if (st->kind == SL_ST_STACK) {
        sl_exec__each_input(w, sl_exec__stack_chunk);
        return NULL;
    }
    return sl_exec__seq_main(arg);
}

static void drop_chunk(void *item, void *ctx) { sl_pipeline__chunk_put(ctx, item); }
static void drop_batch(void *item, void *ctx) {
    (void)ctx;
    sl_pipeline__batch_free(item);
}

void sl_pipeline__stop(sl_pipeline *p) {
    if (!p->running)
        return;
    atomic_store(&p->cancel, 1);
    pthread_mutex_lock(&p->cur.mu);
    pthread_cond_broadcast(&p->cur.cv);
    pthread_mutex_unlock(&p->cur.mu);
    pthread_mutex_lock(&p->tune.mu);
    pthread_cond_broadcast(&p->tune.cv);
    pthread_mutex_unlock(&p->tune.mu);
    for (int s = 0; s < p->nstages; s++)
        sl_queue__close(&p->stage[s].out);
    for (int s = 0; s < p->nstages; s++) {
        sl_stage *st = &p->stage[s];
        sl__workers_dispose(&st->threads); /* they end on cancel and the closed queues */
        sl__free(st->w);
        st->w = NULL;
    }
    for (int s = 0; s < p->nstages; s++)
        sl_queue__reset(&p->stage[s].out,
                        s == p->nstages - 1 && !p->layout.direct ? drop_batch : drop_chunk, p);
    p->running = 0;
    atomic_store(&p->cancel, 0);
}

/* Start every stage at `r` (source position and final-stage state). */
int sl_pipeline__start(sl_pipeline *p, const sl_resume *r) {
    p->start = *r;
    pthread_mutex_lock(&p->cur.mu);
    p->cur.epoch = r->epoch;
    p->cur.pos = r->pos;
    p->cur.seq = 0;
    if (p->cur.end_epoch < r->epoch + 1)
        p->cur.end_epoch = r->epoch + 1;
    p->cur.parked = 0;
    pthread_mutex_unlock(&p->cur.mu);
    for (int s = 0; s < p->nstages; s++) {
        p->stage[s].seq_out = 0;
        sl_queue__start(&p->stage[s].out, r->epoch);
    }
    p->cons.direct_index = r->batch;
    sl_pipeline__dev_gpu_reset(p->dev, r->batch); /* decode on the GPU: rows of the old stream */
    if (!atomic_load(&p->stats.t_start)) {
        p->stats.cpu_t0_ns = sl__process_cpu_ns();
        atomic_store(&p->stats.t_start, sl__now_ns());
    }
    p->running = 1;
    for (int s = 0; s < p->nstages; s++) {
        sl_stage *st = &p->stage[s];
        st->w = sl__calloc((size_t)st->workers, sizeof *st->w);
        if (!st->w || sl__workers_init(&st->threads, "stage", st->workers, NULL, NULL) < 0) {
            sl_pipeline__stop(p);
            return sl__oom("starting pipeline threads");
        }
        for (int i = 0; i < st->workers; i++) {
            sl_worker *w = &st->w[i];
            w->p = p;
            w->st = st;
            w->id = i;
            int rc = sl__workers_start(&st->threads, worker_main, w);
            if (rc < 0) {
                sl__error_prefix(rc, "stage %s", st->name);
                sl_pipeline__stop(p);
                return rc;
            }
            /* counted by the starter, not the thread, so that a reading
             * taken right after the start sees every thread of it */
            atomic_fetch_add(&p->stats.threads_started, 1);
        }
    }
    return SL_OK;
}

void sl_pipeline__free_chunks(sl_pipeline *p) {
    sl_chunk *c = p->free_chunks;
    while (c) {
        sl_chunk *n = c->next_free;
        chunk_destroy(c);
        c = n;
    }
    p->free_chunks = NULL;
}

