/*
 * exec.c — running stages.
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
 * Collation happens in one of three places. With map + batch fusion the
 * last parallel stage collates whole-batch chunks (maybe_collate) and the
 * final stage only passes batches on (or is left out: direct mode). Without
 * fusion (samples can be dropped before batch), the final stage assigns
 * samples to batches: it applies drops, take/skip and shuffle buffers in
 * stream order, numbers each batch, counts take/skip after batch and copies
 * the counters into the chunk (assign_batch), then passes the chunk of one
 * batch's samples on, by reference. The SL_ST_STACK stage's workers
 * (stack_main) copy those samples into the batch buffers in parallel and
 * push the batch at the chunk's seq, so the consumer gets the final stage's
 * order and the same bytes, index and resume state as when the final stage
 * collated them itself (sl_collate__add: the path for batches over
 * SL_FUSE_MAX_BATCH, no batch op, or SLUICE_PARALLEL_COLLATE=0). A batch
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
 * barrier) and, if the next epoch is below src_end_epoch, goes straight on
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
 * Lock order: never hold two of {src_mu, a queue's mu, chunk_mu, err_mu,
 * tune_mu} at once, except src_mu -> chunk_mu (taking a chunk while cutting
 * a range). Pools lock internally.
 */
#include "pipeline/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Prefetch distances of the reading loop, in records (source.h, prefetch). */
#define PREFETCH_FAR 16
#define PREFETCH_NEAR 4
#define READ_AHEAD 256 /* records hinted past the chunk for remote range reads */
#define PERM_OP 0xfffffffffffffff1ull

/* ---- chunks ------------------------------------------------------------------------ */

static sl_chunk *chunk_get(sl_pipeline *p) {
    pthread_mutex_lock(&p->chunk_mu);
    sl_chunk *c = p->free_chunks;
    if (c)
        p->free_chunks = c->next_free;
    pthread_mutex_unlock(&p->chunk_mu);
    if (!c) {
        c = sl__calloc(1, sizeof *c);
        if (!c)
            return NULL;
        c->cap = (uint32_t)p->chunk_cap;
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


static int process_chunk(struct sl_pipeline *p, sl_worker *w, sl_chunk *c);

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

/* Turn `c` into an error chunk (policy fail): its samples are released. */
static void chunk_fail(sl_pipeline *p, sl_chunk *c, int rc, const char *msg) {
    for (uint32_t i = 0; i < c->n; i++)
        sl_pipeline__sample_release(&c->s[i]);
    c->n = 0;
    c->kind = SL_CHUNK_ERROR;
    c->err_rc = rc;
    snprintf(c->errmsg, sizeof c->errmsg, "%s", msg);
}

/* Copy with truncation (messages may be longer than a stats slot). */
static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Policy skip: count the sample and keep the first few messages. */
static void note_skip(sl_pipeline *p, const char *msg) {
    pthread_mutex_lock(&p->err_mu);
    p->skipped++;
    if (p->nerrors < SL_STATS_MAX_ERRORS)
        copy_str(p->errors[p->nerrors++], sizeof p->errors[0], msg);
    pthread_mutex_unlock(&p->err_mu);
}

/* A worker cannot go on (out of memory outside any sample): store the error
 * and close the consumer's queue, so that a blocked sl_pipeline_next wakes
 * up and returns it. */
static void worker_fail(sl_pipeline *p, int rc, const char *msg) {
    pthread_mutex_lock(&p->err_mu);
    if (!p->failed) {
        p->failed = 1;
        p->fail_rc = rc;
        copy_str(p->fail_msg, sizeof p->fail_msg, msg);
    }
    pthread_mutex_unlock(&p->err_mu);
    sl_queue__close(&p->stage[p->nstages - 1].out);
}

/* ---- the source ------------------------------------------------------------------- */

/* Build the permutation of pass (epoch, rep) into p->perm (src_mu held). */
static void fill_perm(const sl_pipeline *p, uint64_t *perm, uint64_t epoch, uint64_t rep) {
    uint64_t m = p->nbase;
    for (uint64_t i = 0; i < m; i++)
        perm[i] = i;
    sl_rng rng;
    sl_rng_init(&rng, p->spec->seed, epoch, rep, PERM_OP);
    for (uint64_t i = m; i > 1; i--) {
        uint64_t j = sl_rng_below(&rng, i);
        uint64_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

/* Make p->perm the order of pass (epoch, rep) (src_mu held): the one built
 * ahead (see prepare_next_perm) when it matches, else built here. */
static void build_perm(sl_pipeline *p, uint64_t epoch, uint64_t rep) {
    if (p->perm_valid && p->perm_epoch == epoch && p->perm_rep == rep)
        return;
    if (p->next_ready && p->next_epoch == epoch && p->next_rep == rep) {
        uint64_t *t = p->perm;
        p->perm = p->perm_next;
        p->perm_next = t;
        p->next_ready = 0;
    } else {
        fill_perm(p, p->perm, epoch, rep);
    }
    p->perm_epoch = epoch;
    p->perm_rep = rep;
    p->perm_valid = 1;
}

/* Halfway through a pass, one source worker builds the next pass's order
 * outside the lock, so that the epoch boundary costs a pointer swap instead
 * of an O(n) shuffle on the critical path. Called with src_mu held; may drop
 * and retake it. */
static void prepare_next_perm(sl_pipeline *p) {
    if (!p->perm || p->next_ready || p->next_building || p->per_pass == 0)
        return;
    uint64_t rep = p->src_pos / p->per_pass, j = p->src_pos % p->per_pass;
    if (j < p->per_pass / 2)
        return;
    uint64_t ne = p->src_epoch, nr = rep + 1;
    if (nr >= (uint64_t)p->plan.repeat) {
        ne++;
        nr = 0;
    }
    /* Also for the epoch right after the one the source will park at:
     * built here, off the source lock, it is ready if the source goes on
     * there; built there, the first batch of that epoch waits for it under
     * the lock (0.3 ms for Fashion-MNIST's 60,000 records, 4% of its 8 ms
     * epoch). At most one order is built in vain, at the end of a run. */
    if (ne > sl_pipeline__src_limit(p))
        return;
    p->next_building = 1;
    pthread_mutex_unlock(&p->src_mu);
    fill_perm(p, p->perm_next, ne, nr); /* perm_next is ours while building */
    pthread_mutex_lock(&p->src_mu);
    p->next_building = 0;
    p->next_epoch = ne;
    p->next_rep = nr;
    p->next_ready = 1;
}

/* Record index at stream position `pos` of `epoch` for this rank (src_mu held). */
static uint64_t record_at(sl_pipeline *p, uint64_t epoch, uint64_t pos, uint64_t *key) {
    uint64_t rep = pos / p->per_pass, j = pos % p->per_pass;
    uint64_t g = j * (uint64_t)p->shard_count + (uint64_t)p->shard_index;
    uint64_t m = p->nbase;
    g %= m; /* pad wraps around to the start */
    if (p->window_mode) {
        g = sl_pipeline__window_at(p, epoch, rep, j);
    } else if (p->spec->shuffle) {
        build_perm(p, epoch, rep);
        g = p->perm[g];
    }
    uint64_t idx = p->base ? p->base[g] : g;
    *key = idx + rep * p->nrecords;
    return idx;
}

/* Reading threads take their output tensors from the pipeline's pools. */
static int pool_alloc(void *ctx, sl_tensor *t, sl_dtype dtype, int ndim, const int64_t *shape) {
    return sl_pipeline__pools_tensor(ctx, t, dtype, ndim, shape);
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
typedef struct span {
    uint64_t t0, c0;
} span;

static span span_begin(void) {
    span s = {sl__now_ns(), thread_cpu_ns()};
    return s;
}

static void span_end(sl_pipeline *p, sl_stage *st, int worker, span sp, uint32_t n) {
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
    for (int k = p->vec_first; k < st->last; k++) {
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
            ctx.pools = p->pools;
            ctx.rows = p->plan.batch_size;
            rc = nd->def->apply_batch(nd->params, w->state[k - st->first], &ctx, b->col);
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
            return rc;
        }
    }
    atomic_fetch_add_explicit(&p->vec_batches, 1, memory_order_relaxed);
    return SL_OK;
}

/* Map + batch fusion: the last parallel stage collates its chunk (and, with
 * map vectorization, runs the batched tail of its ops on the batch; when some
 * sample does not have the shapes the plan promised, that tail runs per
 * sample instead, with the same result). */
static void maybe_collate(sl_pipeline *p, sl_worker *w, sl_chunk *c) {
    const sl_stage *st = w->st;
    if (!p->fuse_batch || c->kind != SL_CHUNK_DATA || st != &p->stage[p->collate_stage])
        return;
    char msg[SL__ERRMSG_MAX];
    if (c->batch) { /* read_rows: the records were read into it */
        int rc = p->vec_first >= 0 ? vectorize_batch(p, w, c, msg, sizeof msg) : SL_OK;
        c->n = 0;
        if (rc < 0) {
            sl_pipeline__batch_free(c->batch);
            c->batch = NULL;
            chunk_fail(p, c, rc, msg);
        }
        return;
    }
    int batched = p->vec_first >= 0 && c->n > 0 && c->n <= SL_FUSE_MAX_BATCH;
    if (p->vec_first >= 0 && !(batched && samples_fit(p, c, p->vec_first))) {
        batched = 0;
        for (uint32_t i = 0; i < c->n; i++) {
            int r = apply_nodes(p, w, c, i, p->vec_first, st->last, NULL, msg, sizeof msg);
            if (r < 0) { /* fusion implies policy fail: the chunk fails */
                chunk_fail(p, c, r, msg);
                return;
            }
        }
    }
    int rc = sl_collate__chunk(p, c);
    if (rc < 0) {
        snprintf(msg, sizeof msg, "%s: collating a batch: %s", p->src_name, sl_errmsg());
        chunk_fail(p, c, rc, msg);
        return;
    }
    if (batched && (rc = vectorize_batch(p, w, c, msg, sizeof msg)) < 0) {
        sl_pipeline__batch_free(c->batch);
        c->batch = NULL;
        chunk_fail(p, c, rc, msg);
    }
}

static void worker_gate(sl_pipeline *p, sl_worker *w) {
    if (w->id < atomic_load_explicit(&w->st->active, memory_order_relaxed))
        return;
    pthread_mutex_lock(&p->tune_mu);
    while (w->id >= atomic_load(&w->st->active) && !atomic_load(&p->cancel))
        pthread_cond_wait(&p->tune_cv, &p->tune_mu);
    pthread_mutex_unlock(&p->tune_mu);
}

/* The next chunk from the stage before `st`, blocking; the wait counts as
 * the stage's time waiting for input. NULL when the queue closed. */
static sl_chunk *stage_input(sl_pipeline *p, sl_stage *st) {
    void *item;
    uint64_t wait_in = 0;
    int rc = sl_queue__pop(&p->stage[st - p->stage - 1].out, &item, &wait_in, -1);
    atomic_fetch_add_explicit(&st->wait_in_ns, wait_in, memory_order_relaxed);
    return rc == SL_OK ? item : NULL;
}

static void *source_main(void *arg) {
    sl_worker *w = arg;
    sl_pipeline *p = w->p;
    sl_stage *st = w->st;
    sl_source_cursor *cur = NULL;
    int cur_rc = sl_source__cursor_open(p->src, pool_alloc, p->pools, &cur);
    char cur_msg[SL__ERRMSG_MAX] = "";
    if (cur_rc < 0)
        snprintf(cur_msg, sizeof cur_msg, "%s", sl_errmsg());
    else
        cur->borrow = 1; /* every column is consumed or copied before the
                            pipeline releases the source */
    for (;;) {
        worker_gate(p, w);
        pthread_mutex_lock(&p->src_mu);
        while (p->src_parked && !atomic_load(&p->cancel))
            pthread_cond_wait(&p->src_cv, &p->src_mu);
        if (atomic_load(&p->cancel)) {
            pthread_mutex_unlock(&p->src_mu);
            break;
        }
        sl_chunk *c = chunk_get(p);
        if (!c) {
            pthread_mutex_unlock(&p->src_mu);
            worker_fail(p, SL_ENOMEM, "source: out of memory while reading");
            break;
        }
        c->seq = p->src_seq++;
        c->epoch = p->src_epoch;
        if (p->src_pos >= p->per_epoch) {
            c->kind = SL_CHUNK_END;
            p->src_epoch++;
            p->src_pos = 0;
            if (p->src_epoch >= sl_pipeline__src_limit(p))
                p->src_parked = 1;
            pthread_mutex_unlock(&p->src_mu);
            if (sl_queue__push(&st->out, c->seq, c, 1, c->epoch, NULL) < 0) {
                sl_pipeline__chunk_put(p, c);
                break;
            }
            continue;
        }
        uint64_t n = (uint64_t)p->chunk_size;
        if (p->fuse_batch) /* one chunk = one batch: cut at batch boundaries */
            n = (uint64_t)p->plan.batch_size - p->src_pos % (uint64_t)p->plan.batch_size;
        if (n > p->per_epoch - p->src_pos)
            n = p->per_epoch - p->src_pos;
        if (n > c->cap)
            n = c->cap;
        for (uint64_t i = 0; i < n; i++) {
            c->pos[i] = p->src_pos + i;
            c->s[i].index = record_at(p, c->epoch, p->src_pos + i, &c->key[i]);
        }
        /* Remote reads by ranges: hint this chunk and READ_AHEAD records past
         * it, in the order they will be read (the permutation is known), so
         * that their requests are in flight before a thread asks. Only within
         * this pass of the epoch (record_at of another pass rebuilds the
         * permutation). */
        uint64_t ahead[READ_AHEAD];
        uint32_t nahead = 0;
        if (p->src->reads_ahead) {
            if (p->ra_epoch != c->epoch || p->ra_pos < p->src_pos) {
                p->ra_epoch = c->epoch;
                p->ra_pos = p->src_pos;
            }
            uint64_t end = p->src_pos + n + READ_AHEAD, pass_end =
                (p->src_pos / p->per_pass + 1) * p->per_pass;
            if (end > pass_end)
                end = pass_end;
            if (end > p->per_epoch)
                end = p->per_epoch;
            uint64_t key;
            for (; p->ra_pos < end && nahead < READ_AHEAD; p->ra_pos++)
                ahead[nahead++] = record_at(p, c->epoch, p->ra_pos, &key);
        }
        p->src_pos += n;
        if (p->spec->shuffle)
            prepare_next_perm(p);
        pthread_mutex_unlock(&p->src_mu);
        for (uint32_t k = 0; k < nahead; k++)
            sl_source__prefetch(p->src, ahead[k], SL_PREFETCH_REMOTE);

        span t0 = span_begin();
        uint32_t kept = 0;
        /* read_rows (layout.c): the batch first, then each record into its row */
        char *rows[SL_MAX_COLUMNS];
        int into_rows = p->read_rows && cur && n > 0, rows_rc;
        if (into_rows && (rows_rc = sl_collate__rows(p, c, (uint32_t)n, rows)) < 0) {
            char msg[SL__ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s: collating a batch: %s", p->src_name, sl_errmsg());
            chunk_fail(p, c, rows_rc, msg);
            n = 0; /* nothing read: the chunk carries the error */
        }
        for (uint32_t i = 0; i < (uint32_t)n && i < PREFETCH_NEAR; i++) {
            sl_source__prefetch(p->src, c->s[i].index, 1);
            sl_source__prefetch(p->src, c->s[i].index, 0);
        }
        for (uint32_t i = PREFETCH_NEAR; i < (uint32_t)n && i < PREFETCH_FAR; i++)
            sl_source__prefetch(p->src, c->s[i].index, 1);
        for (uint32_t i = 0; i < (uint32_t)n; i++) {
            uint64_t idx = c->s[i].index;
            /* index entries PREFETCH_FAR records ahead, record bytes
             * PREFETCH_NEAR ahead (shuffled reads are cache misses) */
            if (i + PREFETCH_FAR < n)
                sl_source__prefetch(p->src, c->s[i + PREFETCH_FAR].index, 1);
            if (i + PREFETCH_NEAR < n)
                sl_source__prefetch(p->src, c->s[i + PREFETCH_NEAR].index, 0);
            c->pos[kept] = c->pos[i];
            c->key[kept] = c->key[i];
            sl_sample *s = &c->s[kept];
            int rc;
            if (into_rows) {
                void *dst[SL_MAX_COLUMNS];
                for (int k = 0; k < p->src->ncols; k++)
                    dst[k] = rows[k] + (size_t)i * p->row_bytes[k];
                rc = sl_source__read_cols(p->src, cur, idx, dst, p->row_bytes);
            } else {
                rc = cur ? sl_source__read(p->src, cur, idx, s) : sl__error(cur_rc, "%s", cur_msg);
            }
            if (rc >= 0) {
                kept++;
                continue;
            }
            s->ncols = 0;
            char msg[SL__ERRMSG_MAX];
            snprintf(msg, sizeof msg, "read: %s", sl_errmsg());
            if (p->spec->on_error == SL_ON_ERROR_SKIP && rc != SL_ENOMEM) {
                note_skip(p, msg);
                continue;
            }
            c->n = kept;
            sl_pipeline__batch_free(c->batch); /* read_rows: its half-read batch */
            c->batch = NULL;
            chunk_fail(p, c, rc, msg);
            kept = 0;
            break;
        }
        if (c->kind == SL_CHUNK_DATA) {
            c->n = kept;
            /* a memory source runs its ops in the reading workers (with
             * read_rows they are all vectorized: maybe_collate runs them) */
            if (st->last > st->first && !into_rows && process_chunk(p, w, c) < 0)
                break;
        }
        maybe_collate(p, w, c);
        span_end(p, st, w->id, t0, (uint32_t)n);
        atomic_fetch_add_explicit(&st->elements, n, memory_order_relaxed);
        uint64_t wait = 0;
        int rc = sl_queue__push(&st->out, c->seq, c, c->kind != SL_CHUNK_DATA, c->epoch, &wait);
        atomic_fetch_add_explicit(&st->wait_out_ns, wait, memory_order_relaxed);
        if (rc < 0) {
            sl_pipeline__chunk_put(p, c);
            break;
        }
    }
    sl_source__cursor_free(p->src, cur);
    return NULL;
}

/* ---- map stages ----------------------------------------------------------------------- */

/* Apply the stage's nodes to sample i of c. SL_OK keep, SL_OP_DROP drop,
 * negative: error with the full message in `msg`. */
static int apply_nodes(sl_pipeline *p, sl_worker *w, sl_chunk *c, uint32_t i, int k0, int k1,
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
            ctx.nparts = nd->nparts;
            for (uint32_t q = 0; q < nd->nparts; q++)
                ctx.pos[q] = nd->parts[q];
            ctx.rng_ready = 0;
            ctx.pools = p->pools;
            ctx.slot = NULL;
            if (slot && k == st->last - 1) {
                const sl_colinfo *ci = &p->plan.out_cols.col[p->slot_col];
                ctx.slot = slot;
                ctx.slot_buf = c->slot.buf;
                ctx.slot_dtype = ci->dtype;
                ctx.slot_ndim = ci->ndim;
                ctx.slot_shape = ci->shape;
            }
            rc = nd->def->apply(nd->params, w->state[k - st->first], &ctx, s);
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
            char where[300];
            if (s->index < p->src->count)
                sl_source__locate(p->src, s->index, where, sizeof where);
            else
                snprintf(where, sizeof where, "%.200s: record %llu", p->src_name,
                         (unsigned long long)s->index);
            const char *cause = sl_errmsg();
            snprintf(msg, cap, "%s: ops[%d] (%s): %s", where, nd->pos, nd->label,
                     cause[0] ? cause : sl_status_str(rc));
            return rc;
        }
    }
    return SL_OK;
}

/* The end of the nodes a stage runs per sample: with map vectorization the
 * collating stage's tail runs per batch (vectorize_chunk). */
static int per_sample_end(const sl_pipeline *p, const sl_stage *st) {
    if (p->vec_first >= 0 && st == &p->stage[p->collate_stage])
        return p->vec_first;
    return st->last;
}

/* Map + batch fusion: before the collating stage runs its ops over a chunk
 * (one batch), take the batch buffer of column slot_col so that the stage's
 * last op can write each sample straight into its slot (sl_op_alloc). Returns
 * the buffer's bytes, or NULL when there is no slot to offer: then collation
 * copies as usual. Failing to get the buffer is not an error here; the copy
 * path meets the same shortage and reports it. */
static char *take_slot(sl_pipeline *p, const sl_stage *st, sl_chunk *c) {
    if (!p->fuse_batch || p->slot_col < 0 || c->n == 0 || st != &p->stage[p->collate_stage] ||
        st->last <= st->first || p->plan.opt[st->last - 1].kind != SL_PN_OP)
        return NULL;
    const sl_colinfo *ci = &p->plan.out_cols.col[p->slot_col];
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
static int process_chunk(sl_pipeline *p, sl_worker *w, sl_chunk *c) {
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
            chunk_fail(p, c, w->init_rc, w->init_msg);
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
            note_skip(p, msg);
            continue;
        }
        /* release the untouched rest, then fail the chunk */
        for (uint32_t j = i + 1; j < n; j++)
            sl_pipeline__sample_release(&c->s[j]);
        c->n = kept;
        chunk_fail(p, c, r, msg);
        return 0;
    }
    c->n = kept;
    return 0;
}

static void *map_main(void *arg) {
    sl_worker *w = arg;
    sl_pipeline *p = w->p;
    sl_stage *st = w->st;
    for (;;) {
        worker_gate(p, w);
        sl_chunk *c = stage_input(p, st);
        if (!c)
            break;
        int rc;
        if (c->kind == SL_CHUNK_DATA) {
            span t0 = span_begin();
            uint32_t n = c->n;
            if (process_chunk(p, w, c) < 0)
                return NULL;
            maybe_collate(p, w, c);
            span_end(p, st, w->id, t0, n);
            atomic_fetch_add_explicit(&st->elements, n, memory_order_relaxed);
        }
        uint64_t wait = 0;
        rc = sl_queue__push(&st->out, c->seq, c, c->kind != SL_CHUNK_DATA, c->epoch, &wait);
        atomic_fetch_add_explicit(&st->wait_out_ns, wait, memory_order_relaxed);
        if (rc < 0) {
            sl_pipeline__chunk_put(p, c);
            break;
        }
    }
    return NULL;
}

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
        x->out = chunk_get(x->p);
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
                out.index = e->index;
                out.ncols = e->ncols;
                memcpy(out.col, e->col, e->ncols * sizeof(sl_tensor));
                uint64_t opos = e->pos, okey = e->key;
                in = e;
                in->index = s->index;
                in->ncols = s->ncols;
                memcpy(in->col, s->col, s->ncols * sizeof(sl_tensor));
                in->pos = pos;
                in->key = key;
                s->ncols = 0;
                return seq_feed(x, k + 1, &out, opos, okey);
            }
            in->index = s->index;
            in->ncols = s->ncols;
            memcpy(in->col, s->col, s->ncols * sizeof(sl_tensor));
            in->pos = pos;
            in->key = key;
            s->ncols = 0;
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
                out.index = e->index;
                out.ncols = e->ncols;
                memcpy(out.col, e->col, e->ncols * sizeof(sl_tensor));
                uint64_t opos = e->pos, okey = e->key;
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
    sl_chunk *c = chunk_get(x->p);
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

static void *seq_main(void *arg) {
    sl_worker *w = arg;
    sl_pipeline *p = w->p;
    sl_stage *st = w->st;
    seq_ctx *x = sl__calloc(1, sizeof *x);
    if (!x)
        return NULL; /* the consumer then waits; free still works */
    x->p = p;
    x->st = st;
    x->final = st->kind == SL_ST_COLLATE;
    x->assign = x->final && p->par_collate;
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
        sl_chunk *c = stage_input(p, st);
        if (!c)
            break;
        int rc;
        span t0 = span_begin();
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
                copy_str(msg, sizeof msg, sl_errmsg());
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
        span_end(p, st, 0, t0, c->n);
        sl_pipeline__chunk_put(p, c);
        if (rc == SL_ECANCELED)
            break;
        if (rc < 0) { /* could not even pass the error on */
            char msg[SL__ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s: %s", st->name, sl_errmsg());
            worker_fail(p, rc, msg);
            break;
        }
    }
    seq_ctx_clear(x);
    sl__free(x);
    return NULL;
}

/* ---- parallel collation ------------------------------------------------------------ */

/* Workers of the SL_ST_STACK stage: each takes a chunk holding one batch's
 * samples (numbered by the final stage) and copies them into the batch
 * buffers; markers become marker batches. Output goes out at the chunk's
 * seq, so the consumer sees the final stage's order. */
static void *stack_main(void *arg) {
    sl_worker *w = arg;
    sl_pipeline *p = w->p;
    sl_stage *st = w->st;
    for (;;) {
        worker_gate(p, w);
        sl_chunk *c = stage_input(p, st);
        if (!c)
            break;
        int rc;
        span t0 = span_begin();
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
            copy_str(msg, sizeof msg, sl_errmsg());
            b = sl_collate__marker(p, SL_CHUNK_ERROR, c->epoch, rc, msg);
        } else {
            b = sl_collate__marker(p, c->kind, c->epoch, c->err_rc, c->errmsg);
        }
        span_end(p, st, w->id, t0, n);
        atomic_fetch_add_explicit(&st->elements, n, memory_order_relaxed);
        uint64_t seq = c->seq;
        sl_pipeline__chunk_put(p, c);
        if (!b) {
            worker_fail(p, SL_ENOMEM, "collate: out of memory");
            break;
        }
        uint64_t wait = 0;
        rc = sl_queue__push(&st->out, seq, b, b->kind != SL_CHUNK_DATA, b->epoch, &wait);
        atomic_fetch_add_explicit(&st->wait_out_ns, wait, memory_order_relaxed);
        if (rc < 0) {
            sl_pipeline__batch_free(b);
            break;
        }
    }
    return NULL;
}

/* ---- start and stop ---------------------------------------------------- */

static void *worker_main(void *arg) {
    sl_worker *w = arg;
    sl_pipeline *p = w->p;
    sl_stage *st = w->st;
    atomic_fetch_add(&p->threads_started, 1);
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
            source_main(arg);
        else
            map_main(arg);
        for (int k = st->first; k < st->last; k++) {
            const sl_pnode *nd = &p->plan.opt[k];
            if (nd->kind == SL_PN_OP && nd->def->worker_free && w->state[k - st->first])
                nd->def->worker_free(w->state[k - st->first]);
        }
        return NULL;
    }
    if (st->kind == SL_ST_STACK)
        return stack_main(arg);
    return seq_main(arg);
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
    pthread_mutex_lock(&p->src_mu);
    pthread_cond_broadcast(&p->src_cv);
    pthread_mutex_unlock(&p->src_mu);
    pthread_mutex_lock(&p->tune_mu);
    pthread_cond_broadcast(&p->tune_cv);
    pthread_mutex_unlock(&p->tune_mu);
    for (int s = 0; s < p->nstages; s++)
        sl_queue__close(&p->stage[s].out);
    for (int s = 0; s < p->nstages; s++) {
        sl_stage *st = &p->stage[s];
        for (int i = 0; i < st->workers; i++)
            if (st->w && st->w[i].started)
                pthread_join(st->w[i].thread, NULL);
        sl__free(st->w);
        st->w = NULL;
    }
    for (int s = 0; s < p->nstages; s++)
        sl_queue__reset(&p->stage[s].out,
                        s == p->nstages - 1 && !p->direct ? drop_batch : drop_chunk, p);
    p->running = 0;
    atomic_store(&p->cancel, 0);
}

/* Start every stage at `r` (source position and final-stage state). */
int sl_pipeline__start(sl_pipeline *p, const sl_resume *r) {
    p->start = *r;
    pthread_mutex_lock(&p->src_mu);
    p->src_epoch = r->epoch;
    p->src_pos = r->pos;
    p->src_seq = 0;
    if (p->src_end_epoch < r->epoch + 1)
        p->src_end_epoch = r->epoch + 1;
    p->src_parked = 0;
    pthread_mutex_unlock(&p->src_mu);
    for (int s = 0; s < p->nstages; s++) {
        p->stage[s].seq_out = 0;
        sl_queue__start(&p->stage[s].out, r->epoch);
    }
    p->direct_index = r->batch;
    if (!atomic_load(&p->t_start)) {
        p->cpu_t0_ns = sl__process_cpu_ns();
        atomic_store(&p->t_start, sl__now_ns());
    }
    p->running = 1;
    for (int s = 0; s < p->nstages; s++) {
        sl_stage *st = &p->stage[s];
        st->w = sl__calloc((size_t)st->workers, sizeof *st->w);
        if (!st->w) {
            sl_pipeline__stop(p);
            return sl__oom("starting pipeline threads");
        }
        for (int i = 0; i < st->workers; i++) {
            sl_worker *w = &st->w[i];
            w->p = p;
            w->st = st;
            w->id = i;
            if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
                sl_pipeline__stop(p);
                return sl__error(SL_ENOMEM, "cannot start a pipeline thread");
            }
            w->started = 1;
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

