/*
 * exec_source.c — the source stage: N reading threads take ranges of stream
 * positions under cur.mu, map each to a record (shard, pad wrap, the epoch's
 * permutation, pushed filters) and read it through the source interface,
 * into a sample or straight into its batch row (read_rows). See exec.c's
 * DESIGN note for the stages around it.
 */
#include "pipeline/exec.h"

#include <stdio.h>
#include <string.h>

/* Prefetch distances of the reading loop, in records (source.h, prefetch). */
#define PREFETCH_FAR 16
#define PREFETCH_NEAR 4
#define READ_AHEAD 256 /* records hinted past the chunk for remote range reads */

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
static sl_chunk *cut_range(sl_pipeline *p, uint64_t *n_out) {
    *n_out = 0;
    pthread_mutex_lock(&p->cur.mu);
    while (p->cur.parked && !atomic_load(&p->cancel))
        pthread_cond_wait(&p->cur.cv, &p->cur.mu);
    if (atomic_load(&p->cancel)) {
        pthread_mutex_unlock(&p->cur.mu);
        return NULL;
    }
    sl_chunk *c = sl_exec__chunk_get(p);
    if (!c) {
        pthread_mutex_unlock(&p->cur.mu);
        sl_exec__worker_fail(p, SL_ENOMEM, "source: out of memory while reading");
        return NULL;
    }
    c->seq = p->cur.seq++;
    c->epoch = p->cur.epoch;
    if (p->cur.pos >= p->per_epoch) {
        c->kind = SL_CHUNK_END;
        p->cur.epoch++;
        p->cur.pos = 0;
        if (p->cur.epoch >= sl_pipeline__src_limit(&p->cur))
            p->cur.parked = 1;
        pthread_mutex_unlock(&p->cur.mu);
        return c;
    }
    uint64_t n = (uint64_t)p->chunk_size;
    if (p->layout.collate == SL_COLLATE_FUSED) /* one chunk = one batch: cut at its boundaries */
        n = (uint64_t)p->plan.batch_size - p->cur.pos % (uint64_t)p->plan.batch_size;
    if (n > p->per_epoch - p->cur.pos)
        n = p->per_epoch - p->cur.pos;
    if (n > c->cap)
        n = c->cap;
    sl_pipeline__order_chunk(p, c, p->cur.pos, n);
    /* Remote reads by ranges: hint this chunk and READ_AHEAD records past
     * it, in the order they will be read (the permutation is known), so
     * that their requests are in flight before a thread asks. Only within
     * this pass of the epoch (the order of another pass rebuilds the
     * permutation). */
    uint64_t ahead[READ_AHEAD];
    uint32_t nahead = 0;
    if (sl_source__reads_ahead(p->src)) {
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
            ahead[nahead++] = sl_pipeline__record_at(p, c->epoch, p->cur.ra_pos, &key);
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
static int read_records(sl_pipeline *p, reader *rd, sl_chunk *c, uint64_t *n) {
    uint32_t kept = 0;
    char *rows[SL_MAX_COLUMNS];
    int into_rows = p->layout.read_rows && rd->cur && *n > 0, rows_rc;
    if (into_rows && (rows_rc = sl_collate__rows(p, c, (uint32_t)*n, rows)) < 0) {
        char msg[SL__ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s: collating a batch: %s", p->src_name, sl_errmsg());
        sl_exec__chunk_fail(p, c, rows_rc, msg);
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
     * kept once for the whole range (sl_exec__note_skip_range). */
    const int skip = p->spec->on_error == SL_ON_ERROR_SKIP;
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
                dst[k] = rows[k] + (size_t)i * p->layout.row_bytes[k];
            rc = sl_source__read_cols(p->src, rd->cur, idx, dst, p->layout.row_bytes);
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
            sl_exec__add_skip_hint(p, msg, sizeof msg);
        if (skip && rc != SL_ENOMEM) {
            uint64_t f, fn;
            if (sl_source__failed_range(p->src, idx, &f, &fn)) {
                if (dead_n)
                    sl_exec__note_skip_range(&p->err, dead_first, dead_count, dead_n, NULL);
                dead_first = f;
                dead_count = fn;
                dead_n = 0;
                sl_exec__note_skip_range(&p->err, f, fn, 1, msg);
            } else {
                sl_exec__note_skip(p, msg);
            }
            continue;
        }
        c->n = kept;
        sl_pipeline__batch_free(c->batch); /* read_rows: its half-read batch */
        c->batch = NULL;
        sl_exec__chunk_fail(p, c, rc, msg);
        return into_rows;
    }
    if (dead_n)
        sl_exec__note_skip_range(&p->err, dead_first, dead_count, dead_n, NULL);
    if (c->kind == SL_CHUNK_DATA)
        c->n = kept;
    return into_rows;
}

void *sl_exec__source_main(void *arg) {
    sl_worker *w = arg;
    sl_pipeline *p = w->p;
    sl_stage *st = w->st;
    reader rd = {NULL, SL_OK, ""};
    rd.rc = sl_source__cursor_open(p->src, pool_alloc, p->pools, &rd.cur);
    if (rd.rc < 0)
        snprintf(rd.msg, sizeof rd.msg, "%s", sl_errmsg());
    else
        rd.cur->borrow = 1; /* every column is consumed or copied before the
                               pipeline releases the source */
    for (;;) {
        sl_exec__worker_gate(p, w);
        uint64_t n;
        sl_chunk *c = cut_range(p, &n);
        if (!c)
            break;
        if (c->kind == SL_CHUNK_DATA) {
            sl_exec_span t0 = sl_exec__span_begin();
            int into_rows = read_records(p, &rd, c, &n);
            /* a memory source runs its ops in the reading workers (with
             * read_rows they are all vectorized: the collation runs them) */
            if (c->kind == SL_CHUNK_DATA && st->last > st->first && !into_rows &&
                sl_exec__process_chunk(p, w, c) < 0)
                break;
            sl_exec__chunk_done(p, w, c, t0, (uint32_t)n);
        }
        if (sl_exec__push_chunk(p, st, c) < 0)
            break;
    }
    sl_source__cursor_free(p->src, rd.cur);
    return NULL;
}
