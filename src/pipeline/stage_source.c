/*
 * stage_source.c — the source stage: N reading threads take ranges of stream
 * positions under cur.mu, map each to a record (shard, pad wrap, the epoch's
 * permutation, pushed filters) and read it through the source interface,
 * into a sample or straight into its batch row (read_rows). Its state
 * (sl_stage_src, the stage's `self`: which records, in what order, for this
 * rank) is opened here when the pipeline is made, and the consumer moves its
 * cursor through the functions at the end. See exec.h's DESIGN note for the
 * stages around it.
 */
#include "pipeline/stage.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prefetch distances of the reading loop, in records (source.h, prefetch). */
#define PREFETCH_FAR 16
#define PREFETCH_NEAR 4
#define PERM_OP 0xfffffffffffffff1ull
#define GLOBAL_ROUNDS 8 /* shuffle_window.h: 8 rounds for a uniform order */
#define READ_AHEAD 256 /* records hinted past the chunk for remote range reads */

/* ---- the order of records ------------------------------------------------------------------- */

/* The first epoch the source may not read yet (the cursor's mu held). */
static uint64_t src_limit(const sl_src_cursor *c) {
    return c->ahead_epoch > c->end_epoch ? c->ahead_epoch : c->end_epoch;
}

/* The global order of pass (epoch, rep) (cur.mu held): a keyed bijection of
 * [0, nbase) (shuffle_window.h), so position -> record costs O(1) with no
 * table, any position of any epoch is computed directly (exact resume), and
 * a rank's memory does not grow with the record count. Only the pass's key
 * is cached. */
static const sl_feistel *global_order(sl_stage_src *p, uint64_t epoch, uint64_t rep) {
    sl_src_shuffle *sh = &p->shuf;
    if (!sh->gperm_valid || sh->gperm_epoch != epoch || sh->gperm_rep != rep) {
        sl_feistel_init_rounds(&sh->gperm, p->nbase, GLOBAL_ROUNDS, p->seed, epoch, rep,
                               PERM_OP);
        sh->gperm_epoch = epoch;
        sh->gperm_rep = rep;
        sh->gperm_valid = 1;
    }
    return &sh->gperm;
}

/* Window mode's order: the base index (< nbase) at position j of this
 * rank's pass `rep` of `epoch` (cur.mu held; caches the pass's block order). */
static uint64_t window_at(sl_stage_src *p, uint64_t epoch, uint64_t rep, uint64_t j) {
    uint64_t m = p->nbase;
    if (!p->shuf.wsh_valid || p->shuf.wsh.epoch != epoch || p->shuf.wsh.rep != rep) {
        sl_wshuf_init(&p->shuf.wsh, m, p->shuf.window, p->shuf.block, p->seed, epoch, rep);
        p->shuf.wsh_valid = 1;
    }
    uint64_t q = sl_wshuf_rank_start(m, (uint64_t)p->shard_count, (uint64_t)p->shard_index,
                                     p->shard_equal) + j;
    return sl_wshuf_at(&p->shuf.wsh, q % m); /* pad wraps around to the start */
}

/* Record index at stream position `pos` of `epoch` for this rank (cur.mu held). */
static uint64_t record_at(sl_stage_src *p, uint64_t epoch, uint64_t pos, uint64_t *key) {
    uint64_t rep = pos / p->per_pass, j = pos % p->per_pass;
    uint64_t g = j * (uint64_t)p->shard_count + (uint64_t)p->shard_index;
    uint64_t m = p->nbase;
    g %= m; /* pad wraps around to the start */
    if (p->shuf.window_mode) {
        g = window_at(p, epoch, rep, j);
    } else if (p->shuf.on) {
        g = sl_feistel_fwd(global_order(p, epoch, rep), g);
    }
    uint64_t idx = p->base ? p->base[g] : g;
    *key = idx + rep * p->nrecords;
    return idx;
}

/* The records and keys at this rank's stream positions [pos, pos + n) of
 * `epoch` (cur.mu held) into rec[] and key[]: in order or global, each
 * pass's span at once, the bijection computed n at a time
 * (sl_feistel_fwd_n); window mode one position at a time (record_at). */
static void order_range(sl_stage_src *p, uint64_t epoch, uint64_t pos, uint64_t n,
                        uint64_t *rec, uint64_t *key) {
    if (p->shuf.window_mode) {
        for (uint64_t i = 0; i < n; i++)
            rec[i] = record_at(p, epoch, pos + i, &key[i]);
        return;
    }
    const uint64_t m = p->nbase, stride = (uint64_t)p->shard_count;
    uint64_t i = 0;
    while (i < n) {
        uint64_t rep = (pos + i) / p->per_pass, j = (pos + i) % p->per_pass;
        uint64_t span = p->per_pass - j < n - i ? p->per_pass - j : n - i;
        uint64_t g = (j * stride + (uint64_t)p->shard_index) % m;
        for (uint64_t k = 0; k < span; k++) {
            rec[i + k] = g;
            g += stride;
            if (g >= m)
                g %= m; /* pad wraps around to the start */
        }
        if (p->shuf.on)
            sl_feistel_fwd_n(global_order(p, epoch, rep), rec + i, span);
        for (uint64_t k = i; k < i + span; k++) {
            if (p->base)
                rec[k] = p->base[rec[k]];
            key[k] = rec[k] + rep * p->nrecords;
        }
        i += span;
    }
}

/* A mixture's positions [pos, pos + n) into chunk `c` (cur.mu held): the
 * schedule names each position's input k, whose own next position maps
 * through its own order (its shard, its shuffle, a new pass when it wraps)
 * to one of its records, numbered in the concatenated source. A block of
 * MIX_BLOCK positions at a time: the schedule for the block
 * (sl_mix__next_n), then, since input k's positions in the block are
 * consecutive in its own stream, each input's run ordered at once
 * (order_range), then dealt back to the block's positions. The key that
 * random ops draw with is the input's own (record and pass) times the
 * number of inputs, plus k. Returns the positions made: fewer than n when
 * the stop rule ends the epoch. */
static uint64_t order_mix(sl_stage_src *p, sl_chunk *c, uint64_t pos, uint64_t n) {
    enum { MIX_BLOCK = 512 };
    sl_src_mix *m = p->mix;
    sl_mix__seek(&m->sched, &m->at, c->epoch, pos);
    uint8_t ks[MIX_BLOCK];
    uint64_t rec[MIX_BLOCK], key[MIX_BLOCK];
    uint64_t made = 0;
    while (made < n) {
        uint64_t from[SL_MIX_MAX], at[SL_MIX_MAX];
        memcpy(from, m->at.count, (size_t)m->n * sizeof from[0]);
        size_t want = n - made < MIX_BLOCK ? (size_t)(n - made) : MIX_BLOCK;
        size_t got = sl_mix__next_n(&m->sched, &m->at, ks, want);
        uint64_t first = 0;
        for (int k = 0; k < m->n; k++) { /* input k's run: its positions [from, count) */
            uint64_t nk = m->at.count[k] - from[k];
            order_range(&m->in[k], c->epoch, from[k], nk, rec + first, key + first);
            m->drawn[k] += nk;
            at[k] = first;
            first += nk;
        }
        for (size_t i = 0; i < got; i++) {
            int k = ks[i];
            uint64_t j = at[k]++;
            c->s[made + i].index = m->off[k] + rec[j];
            c->key[made + i] = key[j] * (uint64_t)m->n + (uint64_t)k;
            c->pos[made + i] = pos + made + i;
        }
        made += got;
        if (got < want)
            break;
    }
    return made;
}

/* The same for one source (cur.mu held): c->pos holds the records until
 * they move into the samples' index. */
static void order_chunk(sl_stage_src *p, sl_chunk *c, uint64_t pos, uint64_t n) {
    order_range(p, c->epoch, pos, n, c->pos, c->key);
    for (uint64_t i = 0; i < n; i++) {
        c->s[i].index = c->pos[i];
        c->pos[i] = pos + i;
    }
}

/* Reading threads take their output tensors from the pipeline's pools. */
static int pool_alloc(void *ctx, sl_tensor *t, sl_dtype dtype, int ndim, const int64_t *shape) {
    return sl_pipeline__pools_tensor(ctx, t, dtype, ndim, shape);
}

/* ---- reading ---------------------------------------------------------------------- */

/* A reading thread's cursor, or why it could not be opened: every record
 * the thread is asked for then fails with that. */
typedef struct reader {
    sl_source_cursor *cur;
    int rc;
    char msg[SL__ERRMSG_MAX];
} reader;

/* The next chunk, cut under cur.mu: stream positions [cur.pos, cur.pos + n)
 * mapped to records (*n_out = n), or an END chunk when the epoch is done
 * (*n_out = 0; the source parks there unless the next epoch is wanted).
 * NULL: stop (cancel, or out of memory, which is reported). */
static sl_chunk *cut_range(sl_stage *st, uint64_t *n_out) {
    sl_stage_src *p = st->self;
    const sl_stage_env *e = st->env;
    *n_out = 0;
    pthread_mutex_lock(&p->cur.mu);
    while (p->cur.parked && !atomic_load(e->cancel))
        pthread_cond_wait(&p->cur.cv, &p->cur.mu);
    if (atomic_load(e->cancel)) {
        pthread_mutex_unlock(&p->cur.mu);
        return NULL;
    }
    sl_chunk *c = sl_stage__chunk_get(e);
    if (!c) {
        pthread_mutex_unlock(&p->cur.mu);
        sl_stage__worker_fail(e, SL_ENOMEM, "source: out of memory while reading");
        return NULL;
    }
    c->seq = p->cur.seq++;
    c->epoch = p->cur.epoch;
    uint64_t n = 0;
    if (p->cur.pos < p->per_epoch) {
        n = (uint64_t)atomic_load_explicit(e->chunk_size, memory_order_relaxed);
        if (e->layout->collation->whole_batches) /* one chunk = one batch: cut at its boundaries */
            n = (uint64_t)e->plan->batch_size - p->cur.pos % (uint64_t)e->plan->batch_size;
        if (n > p->per_epoch - p->cur.pos)
            n = p->per_epoch - p->cur.pos;
        if (n > c->cap)
            n = c->cap;
        if (p->mix) /* the stop rule may end the epoch before per_epoch */
            n = order_mix(p, c, p->cur.pos, n);
        else
            order_chunk(p, c, p->cur.pos, n);
    }
    if (n == 0) {
        c->kind = SL_CHUNK_END;
        p->cur.epoch++;
        p->cur.pos = 0;
        if (p->cur.epoch >= src_limit(&p->cur))
            p->cur.parked = 1;
        pthread_mutex_unlock(&p->cur.mu);
        return c;
    }
    /* Remote reads by ranges: hint this chunk and READ_AHEAD records past
     * it, in the order they will be read (the permutation is known), so
     * that their requests are in flight before a thread asks. Only within
     * this pass of the epoch (the order of another pass rebuilds the
     * permutation). */
    uint64_t ahead[READ_AHEAD];
    uint32_t nahead = 0;
    if (sl_source__reads_ahead(p->src) && !p->mix) {
        if (p->cur.ra_epoch != c->epoch || p->cur.ra_pos < p->cur.pos) {
            p->cur.ra_epoch = c->epoch;
            p->cur.ra_pos = p->cur.pos;
        }
        uint64_t end = p->cur.pos + n + READ_AHEAD, pass_end =
            (p->cur.pos / p->per_pass + 1) * p->per_pass;
        if (end > pass_end)
            end = pass_end;
        if (end > p->per_epoch)
            end = p->per_epoch;
        uint64_t key;
        for (; p->cur.ra_pos < end && nahead < READ_AHEAD; p->cur.ra_pos++)
            ahead[nahead++] = record_at(p, c->epoch, p->cur.ra_pos, &key);
    }
    p->cur.pos += n;
    pthread_mutex_unlock(&p->cur.mu);
    for (uint32_t k = 0; k < nahead; k++)
        sl_source__prefetch(p->src, ahead[k], SL_PREFETCH_REMOTE);
    *n_out = n;
    return c;
}

/* Read the *n records of `c` into its samples or, with read_rows (layout.c),
 * into the rows of its batch (made here first). A failed read is skipped and
 * counted (policy skip) or turns the chunk into an error chunk. Returns
 * whether the records went into batch rows; *n becomes 0 when the batch
 * could not be made. */
static int read_records(sl_stage *st, reader *rd, sl_chunk *c, uint64_t *n) {
    sl_stage_src *p = st->self;
    const sl_stage_env *e = st->env;
    const sl_exec_layout *L = e->layout;
    uint32_t kept = 0;
    char *rows[SL_MAX_COLUMNS];
    int into_rows = L->read_rows && rd->cur && *n > 0, rows_rc;
    if (into_rows && (rows_rc = sl_collate__rows(e, c, (uint32_t)*n, rows)) < 0) {
        char msg[SL__ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s: collating a batch: %s", p->name, sl_errmsg());
        sl_stage__chunk_fail(c, rows_rc, msg);
        *n = 0; /* nothing read: the chunk carries the error */
    }
    const uint32_t m = (uint32_t)*n;
    for (uint32_t i = 0; i < m && i < PREFETCH_NEAR; i++) {
        sl_source__prefetch(p->src, c->s[i].index, 1);
        sl_source__prefetch(p->src, c->s[i].index, 0);
    }
    for (uint32_t i = PREFETCH_NEAR; i < m && i < PREFETCH_FAR; i++)
        sl_source__prefetch(p->src, c->s[i].index, 1);
    /* Policy skip: the records of a file that failed to open (a shard whose
     * every read fails alike) are dropped without a read each, its message
     * kept once for the whole range (sl_stage__note_skip_range). */
    const int skip = e->on_error == SL_ON_ERROR_SKIP;
    uint64_t dead_first = 0, dead_count = 0, dead_n = 0;
    for (uint32_t i = 0; i < m; i++) {
        uint64_t idx = c->s[i].index;
        /* index entries PREFETCH_FAR records ahead, record bytes
         * PREFETCH_NEAR ahead (shuffled reads are cache misses) */
        if (i + PREFETCH_FAR < m)
            sl_source__prefetch(p->src, c->s[i + PREFETCH_FAR].index, 1);
        if (i + PREFETCH_NEAR < m)
            sl_source__prefetch(p->src, c->s[i + PREFETCH_NEAR].index, 0);
        c->pos[kept] = c->pos[i];
        c->key[kept] = c->key[i];
        sl_sample *s = &c->s[kept];
        if (skip && idx - dead_first < dead_count) {
            dead_n++;
            s->ncols = 0;
            continue;
        }
        int rc;
        if (into_rows) {
            void *dst[SL_MAX_COLUMNS];
            for (int k = 0; k < p->src->ncols; k++)
                dst[k] = rows[k] + (size_t)i * L->row_bytes[k];
            rc = sl_source__read_cols(p->src, rd->cur, idx, dst, L->row_bytes);
        } else {
            rc = rd->cur ? sl_source__read(p->src, rd->cur, idx, s)
                         : sl__error(rd->rc, "%s", rd->msg);
        }
        if (rc >= 0) {
            kept++;
            continue;
        }
        s->ncols = 0;
        char msg[SL__ERRMSG_MAX];
        snprintf(msg, sizeof msg, "read: %s", sl_errmsg());
        if (rc == SL_ECORRUPT || rc == SL_EDECODE) /* damaged data: skipping goes on */
            sl_stage__add_skip_hint(e, msg, sizeof msg);
        if (skip && rc != SL_ENOMEM) {
            uint64_t f, fn;
            if (sl_source__failed_range(p->src, idx, &f, &fn)) {
                if (dead_n)
                    sl_stage__note_skip_range(e->err, dead_first, dead_count, dead_n, NULL);
                dead_first = f;
                dead_count = fn;
                dead_n = 0;
                sl_stage__note_skip_range(e->err, f, fn, 1, msg);
            } else {
                sl_stage__note_skip(e->err, msg);
            }
            continue;
        }
        c->n = kept;
        sl_stage__chunk_fail(c, rc, msg); /* read_rows: its half-read batch too */
        return into_rows;
    }
    if (dead_n)
        sl_stage__note_skip_range(e->err, dead_first, dead_count, dead_n, NULL);
    if (c->kind == SL_CHUNK_DATA)
        c->n = kept;
    return into_rows;
}

/* ---- the stage's table -------------------------------------------------------------- */

static int source_worker_init(sl_worker *w) {
    sl_stage_src *s = w->st->self;
    reader *rd = sl__calloc(1, sizeof *rd);
    if (!rd)
        return sl__oom("starting a reader");
    rd->rc = sl_source__cursor_open(s->src, pool_alloc, w->env->pools, &rd->cur);
    if (rd->rc < 0)
        snprintf(rd->msg, sizeof rd->msg, "%s", sl_errmsg());
    else
        rd->cur->borrow = 1; /* every column is consumed or copied before the
                                pipeline releases the source */
    w->self = rd;
    return sl_stage__ops_init(w); /* the ops merged into the readers, if any */
}

static void source_worker_free(sl_worker *w) {
    sl_stage_src *s = w->st->self;
    reader *rd = w->self;
    sl_stage__ops_free(w);
    if (rd)
        sl_source__cursor_free(s->src, rd->cur);
    sl__free(rd);
    w->self = NULL;
}

/* The next chunk to read (c->n: its records), an END chunk, or NULL. */
static sl_chunk *source_produce(sl_worker *w) {
    uint64_t n;
    sl_chunk *c = cut_range(w->st, &n);
    if (c)
        c->n = (uint32_t)n;
    return c;
}

/* Read a chunk cut by cut_range, run the ops merged into the readers, pass
 * it on. */
static int source_chunk(sl_worker *w, sl_chunk *c) {
    sl_stage *st = w->st;
    if (c->kind == SL_CHUNK_DATA) {
        sl_stage_span t0 = sl_stage__span_begin();
        uint64_t n = c->n;
        c->n = 0; /* read_records makes the samples */
        int into_rows = read_records(st, w->self, c, &n);
        /* a memory source runs its ops in the reading workers (with
         * read_rows they are all vectorized: the collation runs them) */
        if (c->kind == SL_CHUNK_DATA && st->last > st->first && !into_rows &&
            sl_stage__run_ops(w, c) < 0)
            return -1;
        sl_stage__chunk_done(w, c, t0, (uint32_t)n);
    }
    return sl_stage__push_chunk(st, c);
}

/* Restore: the readers start at (at->epoch, at->pos). */
static int source_start(sl_stage *st, const sl_resume *at) {
    sl_stage_src *s = st->self;
    pthread_mutex_lock(&s->cur.mu);
    s->cur.epoch = at->epoch;
    s->cur.pos = at->pos;
    s->cur.seq = 0;
    if (s->cur.end_epoch < at->epoch + 1)
        s->cur.end_epoch = at->epoch + 1;
    s->cur.parked = 0;
    pthread_mutex_unlock(&s->cur.mu);
    return SL_OK;
}

/* Stop: parked readers wake (and see cancel). */
static void source_wake(sl_stage *st) {
    sl_stage_src *s = st->self;
    pthread_mutex_lock(&s->cur.mu);
    pthread_cond_broadcast(&s->cur.cv);
    pthread_mutex_unlock(&s->cur.mu);
}

static const char *source_explain(const sl_stage *st) {
    return st->last > st->first ? "read + per-sample ops, parallel" : "read";
}

static void source_save(const sl_stage *st, const sl_batch *b, sl_resume *at) {
    (void)st;
    at->pos = b->next_pos;
}

/* What the source holds for its reads (held_bytes: a Parquet source's row
 * group cache, a .slr's shards on huge pages). */
static uint64_t source_memory(const sl_stage *st) {
    const sl_stage_src *s = st->self;
    return s->src->held_bytes;
}

const sl_stage_kind sl_stage_source = {
    .key = "source", .tunes = SL_TUNES_WORKERS, .start = source_start,
    .wake = source_wake, .worker_init = source_worker_init, .produce = source_produce,
    .chunk = source_chunk, .worker_free = source_worker_free, .explain = source_explain,
    .save = source_save, .memory = source_memory,
};

/* ---- opening: which records, for this rank ---------------------------------------------- */

/* What the plan knows of the source's columns: every source fills dtype,
 * ndim and shape for each column type (sl_source__add_col). */
void sl_stage_src__colset(const sl_source *src, sl_colset *out) {
    memset(out, 0, sizeof *out);
    out->ncols = src->ncols;
    for (int i = 0; i < src->ncols; i++) {
        const sl_source_col *sc = &src->col[i];
        sl_colinfo *c = &out->col[i];
        snprintf(c->name, sizeof c->name, "%s", sc->name);
        c->dtype = sc->dtype;
        c->ndim = sc->ndim;
        for (int d = 0; d < sc->ndim; d++)
            c->shape[d] = sc->shape[d];
        c->index_column = sc->indexed && (sc->type == SL_COL_INT64 || sc->type == SL_COL_FLOAT64);
        c->encoded = sc->encoded && (sc->type == SL_COL_BYTES || sc->type == SL_COL_STRING);
        c->text = sc->type == SL_COL_STRING && !c->encoded;
    }
}

/* A mixture's inputs, opened at once: each thread (and the caller) takes
 * the next input not yet taken, so that what the opens wait on (a remote
 * input's first requests, an index read from disk) overlaps. */
typedef struct mix_opens {
    const sl_spec_mix *ms;
    sl_src_mix *m;
    _Atomic int next;
    int rc[SL_MIX_MAX];
    char msg[SL_MIX_MAX][SL__ERRMSG_MAX]; /* a failure's message, from its thread */
} mix_opens;

static void *mix_open_main(void *arg) {
    mix_opens *o = arg;
    for (int k; (k = atomic_fetch_add(&o->next, 1)) < o->ms->n;) {
        char field[48];
        snprintf(field, sizeof field, "source.inputs[%d]", k);
        o->rc[k] = sl_source__open_json(&o->m->in[k].src, o->ms->in[k]->input, field);
        if (o->rc[k] < 0)
            snprintf(o->msg[k], sizeof o->msg[k], "%s", sl_errmsg());
    }
    return NULL;
}

static int open_inputs(const sl_spec_mix *ms, sl_src_mix *m) {
    mix_opens *o = sl__calloc(1, sizeof *o);
    if (!o)
        return sl__oom("opening a mix");
    o->ms = ms;
    o->m = m;
    m->n = ms->n; /* those not opened stay NULL */
    sl_workers ws;
    int threads = ms->n - 1 < 7 ? ms->n - 1 : 7;
    if (threads > 0 && sl__workers_init(&ws, "mix open", threads, NULL, NULL) == SL_OK) {
        for (int t = 0; t < threads && sl__workers_start(&ws, mix_open_main, o) == SL_OK; t++)
            ;
        sl_errclear(); /* a thread refused: the others and this one open the rest */
        mix_open_main(o);
        sl__workers_dispose(&ws);
    } else {
        mix_open_main(o);
    }
    int rc = SL_OK;
    for (int k = 0; k < ms->n && rc == SL_OK; k++)
        if ((rc = o->rc[k]) < 0)
            sl__seterrmsg(o->msg[k]);
    sl__free(o);
    return rc;
}

/* A mixture: each input's own source, and the concatenation of them the
 * readers read (sl_source__concat: one record numbering, the schema check,
 * the source column). */
static int open_mix(sl_stage_src *s, const sl_spec *spec) {
    const sl_spec_mix *ms = spec->mix;
    sl_src_mix *m = sl__calloc(1, sizeof *m);
    if (!m)
        return sl__oom("opening a mix");
    s->mix = m;
    if (!(m->in = sl__calloc((size_t)ms->n, sizeof *m->in)))
        return sl__oom("opening a mix");
    SL_TRY(open_inputs(ms, m));
    sl_source *srcs[SL_MIX_MAX];
    char labels[SL_MIX_MAX][160];
    const char *lp[SL_MIX_MAX];
    for (int k = 0; k < ms->n; k++) {
        srcs[k] = m->in[k].src;
        m->in[k].nrecords = srcs[k]->count;
        m->share[k] = ms->weight[k];
        snprintf(labels[k], sizeof labels[k], "%.150s", sl_source_name(srcs[k]));
        lp[k] = labels[k];
    }
    if (ms->by_samples) { /* the shares the quotas make */
        double total = 0;
        for (int k = 0; k < ms->n; k++)
            total += ms->weight[k];
        for (int k = 0; k < ms->n; k++)
            m->share[k] = ms->weight[k] / total;
    }
    if (ms->has_ops) /* the columns agree after the ops: mix_ops.c */
        return sl_source__concat_raw(&s->src, srcs, ms->n);
    const char *keep[SL_MAX_COLUMNS];
    for (int c = 0; c < ms->ncols; c++)
        keep[c] = ms->cols[c];
    return sl_source__concat(&s->src, srcs, lp, ms->n, ms->ncols ? keep : NULL, ms->ncols,
                             ms->column);
}

int sl_stage_src__open(sl_stage_src *s, const sl_spec *spec, sl_colset *cols) {
    pthread_mutex_init(&s->cur.mu, NULL);
    pthread_cond_init(&s->cur.cv, NULL);
    s->opened = 1;
    s->seed = spec->seed;
    s->shuf.on = spec->shuffle;
    if (spec->mix) {
        SL_TRY(open_mix(s, spec));
    } else if (spec->mem) {
        s->src = sl_source__retain(spec->mem);
    } else {
        if (!spec->input)
            return sl__error(SL_EINVAL, "source.path: missing (no source set)");
        if (spec->has_cache_bytes)
            sl_io__cache_set_bytes(spec->cache_bytes);
        SL_TRY(sl_source__open_json(&s->src, spec->input, "source"));
    }
    s->nrecords = s->src->count;
    sl_stage_src__colset(s->src, cols);
    snprintf(s->name, sizeof s->name, "%s", s->src->name);
    return SL_OK;
}

/* Evaluate pushed-down filters on the index: the records an epoch visits. */
static int apply_pushed(sl_stage_src *s, const sl_plan *plan) {
    if (plan->npushed == 0) {
        s->nbase = s->nrecords;
        return SL_OK;
    }
    const void *vals[8];
    for (int f = 0; f < plan->npushed; f++)
        SL_TRY(sl_source_index_column(s->src, plan->pushed[f]->col, &vals[f]));
    s->base = sl__malloc((size_t)(s->nrecords ? s->nrecords : 1) * sizeof *s->base);
    if (!s->base)
        return sl__oom("applying a filter to the index");
    uint64_t n = 0;
    for (uint64_t i = 0; i < s->nrecords; i++) {
        int keep = 1;
        for (int f = 0; f < plan->npushed && keep; f++) {
            const sl_filter_params *fp = plan->pushed[f];
            double v = plan->src_cols.col[fp->col].dtype == SL_I64
                           ? (double)((const int64_t *)vals[f])[i]
                           : ((const double *)vals[f])[i];
            keep = sl_op__filter_match(fp, v);
        }
        if (keep)
            s->base[n++] = i;
    }
    s->nbase = n;
    return SL_OK;
}

static int env_int(const char *name, int64_t *out) {
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (*end || x < 0)
        return -1;
    *out = x;
    return 1;
}

/* Without a shard key every rank reads every record: a pipeline splits its
 * data only when asked to (docs/PIPELINE.md, "Sharding rule"). When a
 * launcher's RANK/WORLD_SIZE say several ranks run, say once per process
 * that this one reads everything and how to split, so a training run that
 * forgot to shard is not silent about it. */
static void note_unsharded(int64_t rank, int64_t world) {
    static atomic_int said;
    if (world < 2 || atomic_exchange(&said, 1))
        return;
    SL_LOG_WARN("RANK=%lld WORLD_SIZE=%lld are set but the pipeline has no shard, so this rank "
                "reads every record; to give each rank its slice use .shard() in Python or "
                "\"shard\": \"env\" in the spec's source (\"shard\": \"none\", or "
                ".shard(0, 1), reads everything without this note)",
                (long long)rank, (long long)world);
}

static int setup_shard(sl_stage_src *s, const sl_spec *spec) {
    s->shard_index = 0;
    s->shard_count = 1;
    s->shard_equal = spec->shard_equal;
    if (spec->shard_mode == SL_SHARD_SET) {
        s->shard_index = spec->shard_index;
        s->shard_count = spec->shard_count;
        return SL_OK;
    }
    int64_t rank = 0, world = 0;
    int a = env_int("RANK", &rank), b = env_int("WORLD_SIZE", &world);
    if (spec->shard_mode != SL_SHARD_ENV) {
        if (a > 0 && b > 0)
            note_unsharded(rank, world);
        return SL_OK;
    }
    if (a < 0 || b < 0)
        return sl__error(SL_EINVAL, "source.shard: RANK and WORLD_SIZE must be non-negative integers");
    if (a == 0 || b == 0)
        return sl__error(SL_EINVAL, "source.shard: \"env\" needs RANK and WORLD_SIZE set");
    if (world < 1 || rank >= world)
        return sl__error(SL_EINVAL, "source.shard: RANK=%lld must be below WORLD_SIZE=%lld",
                         (long long)rank, (long long)world);
    s->shard_index = rank;
    s->shard_count = world;
    return SL_OK;
}

/* Samples per pass of this rank's slice of m records (its shard). */
static uint64_t rank_pass(const sl_stage_src *s, uint64_t m) {
    uint64_t w = (uint64_t)s->shard_count, k = (uint64_t)s->shard_index;
    if (m == 0)
        return 0;
    if (s->shard_equal == SL_SHARD_PAD)
        return (m + w - 1) / w;
    if (s->shard_equal == SL_SHARD_DROP)
        return m / w;
    return k < m ? (m - k + w - 1) / w : 0;
}

/* The shuffle order's mode for s, the shuffle of `sh` (the spec's, or a mix
 * input's). Mode "auto": the global order (a keyed bijection: O(1) memory at
 * any size) unless the source is remote and large, where a rank reading its
 * own blocks (window) fetches far fewer shards than one scattered over all
 * of them (docs/PIPELINE.md, "Shuffle"). */
static void order_mode(sl_stage_src *s, const sl_spec *sh) {
    uint64_t m = s->nbase;
    s->shuf.on = sh->shuffle;
    s->shuf.window_mode = sh->shuffle &&
                          (sh->shuffle_mode == SL_SHUFFLE_WINDOW ||
                           (sh->shuffle_mode == SL_SHUFFLE_AUTO &&
                            ((m > SL_SHUFFLE_GLOBAL_MAX && sl_source__remote(s->src)) ||
                             s->src->locality)));
    if (s->shuf.window_mode) /* a source's locality (Parquet row groups): the defaults */
        sl_pipeline__window_sizes(sh->shuffle_window ? sh->shuffle_window
                                                     : s->src->locality_window,
                                  sh->shuffle_block ? sh->shuffle_block : s->src->locality,
                                  &s->shuf.window, &s->shuf.block);
}

/* A mixture's plan: every input sharded the mix's way (shard, then blend:
 * each rank reads only its slice of each input and blends them with the
 * schedule every rank shares), its own order keyed by a seed of its own,
 * how far it goes before it runs out; the schedule; the epoch's length. */
static int plan_mix(sl_stage_src *s, const sl_spec *spec, const sl_plan *plan, uint64_t needed) {
    const sl_spec_mix *ms = spec->mix;
    sl_src_mix *m = s->mix;
    uint64_t seed = ms->has_seed ? ms->seed : spec->seed;
    sl_mix_schedule *sc = &m->sched;
    sc->n = m->n;
    sc->exact = ms->schedule == SL_MIX_EXACT;
    sc->stop = ms->stop;
    sc->by_samples = ms->by_samples;
    sc->seed = sl_mix64(seed ^ 0x6d69785f73636864ull); /* "mix_schd" */
    uint64_t quota[SL_MIX_MAX];
    for (int k = 0; k < m->n; k++) {
        sl_stage_src *in = &m->in[k];
        m->off[k + 1] = m->off[k] + in->nrecords;
        in->shard_index = s->shard_index;
        in->shard_count = s->shard_count;
        in->shard_equal = s->shard_equal;
        in->nbase = in->nrecords;
        in->per_pass = rank_pass(in, in->nrecords);
        if (in->per_pass == 0)
            return sl__error(SL_EINVAL, "source.inputs[%d] (%s): no records for rank %lld of "
                             "%lld; give every input at least as many records as ranks",
                             k, in->src->name, (long long)s->shard_index,
                             (long long)s->shard_count);
        in->per_epoch = in->per_pass * (uint64_t)plan->repeat;
        in->seed = sl_mix64(seed + 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1));
        order_mode(in, ms->in[k]);
        sc->limit[k] = in->per_epoch;
        quota[k] = rank_pass(s, ms->samples[k]) * (uint64_t)plan->repeat;
    }
    sl_mix__init(sc, m->share, quota);
    s->nbase = s->nrecords;
    s->per_epoch = sl_mix__epoch_len(sc);
    if (s->per_epoch > needed)
        s->per_epoch = needed;
    s->per_pass = s->per_epoch ? s->per_epoch : 1;
    sl_mix__start(sc, &m->at, 0);
    s->cur.end_epoch = (uint64_t)spec->epochs;
    return SL_OK;
}

int sl_stage_src__plan(sl_stage_src *s, const sl_spec *spec, const sl_plan *plan,
                       uint64_t needed) {
    SL_TRY(setup_shard(s, spec));
    if (s->mix)
        return plan_mix(s, spec, plan, needed);
    SL_TRY(apply_pushed(s, plan));
    s->per_pass = rank_pass(s, s->nbase);
    s->per_epoch = s->per_pass * (uint64_t)plan->repeat;
    if (s->per_epoch > needed)
        s->per_epoch = needed;
    order_mode(s, spec);
    /* a global shuffle reads all over the source: it may keep its records
     * where scattered reads are cheaper (.slr: on huge pages), within a
     * quarter of the memory limit; not for a take shorter than a pass (a
     * mixture's inputs read from where they are: docs/PIPELINE.md,
     * "Memory") */
    if (spec->shuffle && !s->shuf.window_mode && needed >= s->nbase)
        sl_source__hold_for_random(s->src, sl_spec__memory_limit(spec) / 4);
    s->cur.end_epoch = (uint64_t)spec->epochs;
    return SL_OK;
}

void sl_stage_src__close(sl_stage_src *s) {
    if (!s->opened)
        return;
    if (s->mix) {
        for (int k = 0; k < s->mix->n; k++)
            sl_source__release(s->mix->in[k].src);
        sl__free(s->mix->in);
        sl__free(s->mix);
    }
    sl_source__release(s->src);
    sl__free(s->base);
    pthread_mutex_destroy(&s->cur.mu);
    pthread_cond_destroy(&s->cur.cv);
}

/* ---- the consumer's side ---------------------------------------------------------------- */

uint64_t sl_stage_src__end_epoch(sl_stage_src *s) {
    pthread_mutex_lock(&s->cur.mu);
    uint64_t end = s->cur.end_epoch;
    pthread_mutex_unlock(&s->cur.mu);
    return end;
}

void sl_stage_src__want(sl_stage_src *s, uint64_t end, uint64_t ahead) {
    pthread_mutex_lock(&s->cur.mu);
    if (s->cur.end_epoch < end)
        s->cur.end_epoch = end;
    if (s->cur.ahead_epoch < ahead)
        s->cur.ahead_epoch = ahead;
    if (s->cur.parked && s->cur.epoch < src_limit(&s->cur)) {
        s->cur.parked = 0;
        pthread_cond_broadcast(&s->cur.cv);
    }
    pthread_mutex_unlock(&s->cur.mu);
}

void sl_stage_src__rewind(sl_stage_src *s, uint64_t epoch, uint64_t ahead) {
    pthread_mutex_lock(&s->cur.mu);
    if (s->cur.end_epoch < epoch + 1)
        s->cur.end_epoch = epoch + 1;
    s->cur.ahead_epoch = ahead;
    s->shuf.gperm_valid = 0;
    s->shuf.wsh_valid = 0;
    pthread_mutex_unlock(&s->cur.mu);
}

/* Input k's share of the weights, as a fraction (equal weights left as
 * given, 1 each, are 1/n: the schedule's arithmetic keeps them as given). */
static double share_of(const sl_src_mix *m, int k) {
    double sum = 0;
    for (int j = 0; j < m->n; j++)
        sum += m->share[j];
    return sum > 0 ? m->share[k] / sum : 0;
}

static void describe_mix(const sl_stage_src *s, char *buf, size_t cap) {
    static const char *const stops[] = {"never", "first_exhausted", "all_exhausted"};
    const sl_src_mix *m = s->mix;
    size_t n = (size_t)snprintf(buf, cap, "source mix of %d inputs (schedule %s, stop %s, %llu "
                                "positions per epoch on this rank)\n", m->n,
                                m->sched.exact ? "exact" : "random", stops[m->sched.stop],
                                (unsigned long long)s->per_epoch);
    for (int k = 0; k < m->n && n < cap; k++) {
        n += (size_t)snprintf(buf + n, cap - n, "  input %d, share %.4f", k, share_of(m, k));
        if (n < cap && m->sched.by_samples)
            n += (size_t)snprintf(buf + n, cap - n, " (%llu samples per epoch)",
                                  (unsigned long long)m->sched.quota[k]);
        if (n < cap)
            n += (size_t)snprintf(buf + n, cap - n, ": ");
        if (n < cap) {
            sl_stage_src__describe(&m->in[k], buf + n, cap - n);
            n += strlen(buf + n);
        }
    }
}

void sl_stage_src__describe(const sl_stage_src *s, char *buf, size_t cap) {
    static const char *const eq[] = {"pad", "drop", "none"};
    if (s->mix) {
        describe_mix(s, buf, cap);
        return;
    }
    size_t n = (size_t)snprintf(buf, cap, "source %s %s (%llu records", sl_source_kind(s->src),
                                sl_source_name(s->src), (unsigned long long)s->nrecords);
    if (n < cap && s->shuf.window_mode)
        n += (size_t)snprintf(buf + n, cap - n, ", shuffled per epoch (window %llu, block %llu)",
                              (unsigned long long)s->shuf.window,
                              (unsigned long long)s->shuf.block);
    else if (n < cap && s->shuf.on)
        n += (size_t)snprintf(buf + n, cap - n, ", shuffled per epoch (global)");
    if (n < cap && s->shard_count > 1)
        n += (size_t)snprintf(buf + n, cap - n, ", shard %lld/%lld equal=%s",
                              (long long)s->shard_index, (long long)s->shard_count,
                              eq[s->shard_equal]);
    if (n < cap)
        snprintf(buf + n, cap - n, ")\n");
}

int sl_stage_src__mix_json(sl_stage_src *s, cJSON *obj) {
    static const char *const stops[] = {"never", "first_exhausted", "all_exhausted"};
    sl_src_mix *m = s->mix;
    if (!m)
        return SL_OK;
    uint64_t drawn[SL_MIX_MAX], total = 0;
    pthread_mutex_lock(&s->cur.mu);
    for (int k = 0; k < m->n; k++)
        total += drawn[k] = m->drawn[k];
    pthread_mutex_unlock(&s->cur.mu);
    const sl_mix_schedule *sc = &m->sched;
    /* Samples per epoch of each input, where the schedule fixes them: the
     * counts (when no input runs out first), or every record once
     * (all_exhausted). Else (shares under never or first_exhausted, or a
     * take that cuts the epoch) only the expectation is known. */
    int known = s->per_epoch == sl_mix__epoch_len(sc) &&
                (sc->by_samples || sc->stop == SL_MIX_STOP_ALL);
    for (int k = 0; k < m->n && known && sc->stop == SL_MIX_STOP_FIRST; k++)
        known = sc->quota[k] <= sc->limit[k];
    cJSON *o = cJSON_AddObjectToObject(obj, "mix");
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "inputs") : NULL;
    if (!arr || !cJSON_AddStringToObject(o, "schedule", m->sched.exact ? "exact" : "random") ||
        !cJSON_AddStringToObject(o, "stop", stops[m->sched.stop]) ||
        !cJSON_AddNumberToObject(o, "positions_per_epoch", (double)s->per_epoch) ||
        !cJSON_AddBoolToObject(o, "epoch_length_known", sc->stop != SL_MIX_STOP_FIRST || known))
        return sl__oom("writing a mix's stats");
    for (int k = 0; k < m->n; k++) {
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            return sl__oom("writing a mix's stats");
        }
        uint64_t per = !sc->by_samples             ? sc->limit[k]
                       : sc->stop == SL_MIX_STOP_ALL && sc->limit[k] < sc->quota[k] ? sc->limit[k]
                                                                  : sc->quota[k];
        if (!cJSON_AddStringToObject(e, "name", sl_source_name(m->in[k].src)) ||
            !cJSON_AddStringToObject(e, "kind", sl_source_kind(m->in[k].src)) ||
            !cJSON_AddNumberToObject(e, "records", (double)m->in[k].nrecords) ||
            !(known ? cJSON_AddNumberToObject(e, "samples_per_epoch", (double)per)
                    : cJSON_AddNullToObject(e, "samples_per_epoch")) ||
            !(!known && sc->stop == SL_MIX_STOP_FIRST /* the epoch's length is unknown */
                  ? cJSON_AddNullToObject(e, "expected_samples")
                  : cJSON_AddNumberToObject(e, "expected_samples",
                                            known ? (double)per
                                                  : share_of(m, k) * (double)s->per_epoch)) ||
            !cJSON_AddNumberToObject(e, "weight", share_of(m, k)) ||
            !cJSON_AddNumberToObject(e, "samples", (double)drawn[k]) ||
            !cJSON_AddNumberToObject(e, "share", total ? (double)drawn[k] / (double)total : 0))
            return sl__oom("writing a mix's stats");
    }
    return SL_OK;
}
