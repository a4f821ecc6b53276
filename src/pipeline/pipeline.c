/*
 * pipeline.c — the public pipeline API: create (open the source, plan,
 * optimise, lay out stages), iterate, epochs, save/restore, batch access,
 * free. The threads themselves live in exec.c.
 *
 * Consumer state machine (one consumer thread):
 *
 *   CREATED --next()--> RUNNING (sl_pipeline__start)
 *   RUNNING --next() gets END--> AT_END(epoch e done)
 *   AT_END --next(), e+1 < cur.end_epoch--> RUNNING (batches of e+1 were
 *            already being prepared: no restart)
 *   AT_END --next(), no more epochs--> AT_END (SL_END again)
 *   any --set_epoch(e) at the start of e--> same state, cur.end_epoch >= e+1;
 *            after set_epoch(e-1) (a loop over epochs) the source reads
 *            e+1 ahead (cur.ahead_epoch), which the consumer gets only
 *            after set_epoch(e+1)
 *   any --set_epoch elsewhere / restore_state--> stop + restart at the
 *            position (sl_pipeline__stop, then start on the next call)
 *   RUNNING --next() gets ERROR--> FAILED (every next() returns the error)
 *   FAILED --set_epoch(e) / restore_state--> stop, clear the failure,
 *            restart at the position (restart_at; a record that failed
 *            fails again when it is reached again)
 */
#include "pipeline/pipeline.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- creation --------------------------------------------------------------------- */

/* What the plan knows of the source's columns: every source fills dtype,
 * ndim and shape for each column type (sl_source__add_col). */
static void source_colset(const sl_source *src, sl_colset *out) {
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

static int setup_shard(sl_pipeline *p) {
    const sl_spec *s = p->spec;
    p->shard_index = 0;
    p->shard_count = 1;
    p->shard_equal = s->shard_equal;
    if (s->shard_mode == SL_SHARD_SET) {
        p->shard_index = s->shard_index;
        p->shard_count = s->shard_count;
        return SL_OK;
    }
    int64_t rank = 0, world = 0;
    int a = env_int("RANK", &rank), b = env_int("WORLD_SIZE", &world);
    if (s->shard_mode != SL_SHARD_ENV) {
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
    p->shard_index = rank;
    p->shard_count = world;
    return SL_OK;
}

static int open_source(sl_pipeline *p, sl_colset *cols) {
    const sl_spec *s = p->spec;
    if (s->mem) {
        p->src = sl_source__retain(s->mem);
    } else {
        if (!s->input)
            return sl__error(SL_EINVAL, "source.path: missing (no source set)");
        if (s->has_cache_bytes)
            sl_io__cache_set_bytes(s->cache_bytes);
        SL_TRY(sl_source__open_json(&p->src, s->input, "source"));
    }
    p->nrecords = p->src->count;
    source_colset(p->src, cols);
    snprintf(p->src_name, sizeof p->src_name, "%s", p->src->name);
    return SL_OK;
}

static int any_indexed(const sl_source *src) {
    for (int c = 0; c < src->ncols; c++)
        if (src->col[c].indexed)
            return 1;
    return 0;
}

/* Evaluate pushed-down filters on the index: the records an epoch visits. */
static int apply_pushed(sl_pipeline *p) {
    if (p->plan.npushed == 0) {
        p->nbase = p->nrecords;
        return SL_OK;
    }
    const void *vals[8];
    for (int f = 0; f < p->plan.npushed; f++)
        SL_TRY(sl_source_index_column(p->src, p->plan.pushed[f]->col, &vals[f]));
    p->base = sl__malloc((size_t)(p->nrecords ? p->nrecords : 1) * sizeof *p->base);
    if (!p->base)
        return sl__oom("applying a filter to the index");
    uint64_t n = 0;
    for (uint64_t i = 0; i < p->nrecords; i++) {
        int keep = 1;
        for (int f = 0; f < p->plan.npushed && keep; f++) {
            const sl_filter_params *fp = p->plan.pushed[f];
            double v = p->plan.src_cols.col[fp->col].dtype == SL_I64
                           ? (double)((const int64_t *)vals[f])[i]
                           : ((const double *)vals[f])[i];
            keep = sl_op__filter_match(fp, v);
        }
        if (keep)
            p->base[n++] = i;
    }
    p->nbase = n;
    return SL_OK;
}

static int hash_spec(const sl_spec *s, uint64_t *out) {
    cJSON *doc = sl_spec__to_cjson(s);
    if (!doc)
        return sl__oom("hashing the spec");
    /* Leave out what may differ between a run and its resumption without
     * changing a batch: the epoch count, the memory and cache limits and the parallelism
     * knobs (output is the same for any thread count, queue depth or chunk
     * size), and the layout paths that give the same batches either way
     * (read_rows, parallel_collate: layout.c). */
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "epochs");
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "read_rows");
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "parallel_collate");
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "memory_limit");
    cJSON_DeleteItemFromObjectCaseSensitive(doc, "cache_bytes");
    cJSON *src = cJSON_GetObjectItemCaseSensitive(doc, "source");
    if (cJSON_IsObject(src)) {
        cJSON_DeleteItemFromObjectCaseSensitive(src, "parallel");
        cJSON_DeleteItemFromObjectCaseSensitive(src, "chunk");
    }
    cJSON *ops = cJSON_GetObjectItemCaseSensitive(doc, "ops");
    for (cJSON *op = cJSON_IsArray(ops) ? ops->child : NULL; op; op = op->next)
        if (cJSON_IsObject(op))
            cJSON_DeleteItemFromObjectCaseSensitive(op, "parallel");
    char *text = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    if (!text)
        return sl__oom("hashing the spec");
    *out = XXH3_64bits(text, strlen(text));
    cJSON_free(text);
    return SL_OK;
}

/* Stream positions an epoch needs: a `take` ends the epoch after its count,
 * and when nothing before it can drop a sample (no filter left, policy
 * fail, no shuffle_buffer, whose draws depend on what follows) that is a
 * known number of positions: the skips before it plus its count, in samples
 * (batches after `batch`). The source then stops there instead of reading
 * the rest of the epoch for nothing. UINT64_MAX: all. */
static uint64_t needed_positions(const sl_pipeline *p) {
    const sl_plan *pl = &p->plan;
    if (p->spec->on_error != SL_ON_ERROR_FAIL)
        return UINT64_MAX;
    uint64_t unit = 1, skipped = 0, n;
    for (int i = 0; i < pl->nopt; i++) {
        const sl_pnode *nd = &pl->opt[i];
        if (nd->kind == SL_PN_FILTER || nd->kind == SL_PN_SHUFFLE_BUFFER ||
            (nd->kind == SL_PN_OP && (nd->def->flags & SL_OPF_FILTER)))
            return UINT64_MAX;
        if (nd->kind == SL_PN_BATCH)
            unit = (uint64_t)nd->n;
        if ((nd->kind == SL_PN_SKIP || nd->kind == SL_PN_TAKE) &&
            (__builtin_mul_overflow((uint64_t)nd->n, unit, &n) ||
             __builtin_add_overflow(skipped, n, &skipped)))
            return UINT64_MAX;
        if (nd->kind == SL_PN_TAKE)
            return skipped;
    }
    return UINT64_MAX;
}

/* Batch buffers in flight are bounded: from the stage that collates batches
 * on, each stage holds at most one per worker plus a full output queue, and
 * the consumer holds the batch it is using and the one being handed to it
 * (Python's `for b in ds` keeps the previous batch alive during next()).
 * Reserving that many full-size buffers per fixed-shape output column makes
 * the pools reach their final size in the first batch (pools.c says why);
 * sl_pipeline__memory_plan has already cut the depths so that they fit
 * under the memory limit. */
static int reserve_batch_buffers(sl_pipeline *p) {
    if (p->plan.batch_size <= 0)
        return SL_OK;
    size_t count = 2; /* workers (a spare of small batches too) and queue slots */
    for (int s = p->layout.collate_stage; s < p->nstages; s++)
        count += (size_t)p->stage[s].workers + p->stage[s].out.cap;
    /* with a device, the ring's slots hold the batches whose copies are in
     * flight (device_ring.c, rule 1b) */
    count += (size_t)sl_pipeline__dev_slots(p->dev, p->plan.out_depth);
    const sl_colset *cols = &p->plan.out_cols;
    for (int c = 0; c < cols->ncols; c++) {
        const sl_colinfo *ci = &cols->col[c];
        size_t n = ci->dtype == SL_DTYPE_INVALID ? 0 : sl_dtype_size(ci->dtype);
        if (n == 0 || ci->ndim < 0 || !sl__mul_ok(n, (size_t)p->plan.batch_size, &n))
            continue;
        for (int d = 0; d < ci->ndim && n > 0; d++)
            if (ci->shape[d] < 0 || !sl__mul_ok(n, (size_t)ci->shape[d], &n))
                n = 0;
        if (n > 0)
            SL_TRY(sl_pipeline__pools_reserve(p->pools, n, count));
    }
    return SL_OK;
}

int sl_pipeline_create(sl_pipeline **out, const sl_spec *spec) {
    int rc;
    *out = NULL;
    if (!spec)
        return sl__error(SL_EINVAL, "spec is NULL");
    sl_pipeline *p = sl__calloc(1, sizeof *p);
    if (!p)
        return sl__oom("creating a pipeline");
    pthread_mutex_init(&p->cur.mu, NULL);
    pthread_cond_init(&p->cur.cv, NULL);
    pthread_mutex_init(&p->tune.mu, NULL);
    pthread_cond_init(&p->tune.cv, NULL);
    pthread_mutex_init(&p->chunk_mu, NULL);
    pthread_mutex_init(&p->err.mu, NULL);
    atomic_init(&p->cancel, 0);
    atomic_init(&p->stats.threads_started, 0);
    atomic_init(&p->stats.slot_writes, 0);
    atomic_init(&p->stats.vec_batches, 0);
    p->ncpus = sl__ncpus();
    SL_CHECK(sl_spec__copy(&p->spec, spec));
    sl_colset cols;
    SL_CHECK(sl_pipeline__dev_open(&p->dev, p->spec)); /* may take the normalize op out */
    SL_CHECK(open_source(p, &cols));
    SL_CHECK(sl_plan__build(&p->plan, p->spec, &cols));
    SL_CHECK(sl_plan__optimize(&p->plan, any_indexed(p->src)));
    SL_CHECK(sl_pipeline__dev_gpu_setup(p));
    SL_CHECK(apply_pushed(p));
    SL_CHECK(setup_shard(p));
    uint64_t m = p->nbase, w = (uint64_t)p->shard_count, k = (uint64_t)p->shard_index;
    if (m == 0)
        p->per_pass = 0;
    else if (p->shard_equal == SL_SHARD_PAD)
        p->per_pass = (m + w - 1) / w;
    else if (p->shard_equal == SL_SHARD_DROP)
        p->per_pass = m / w;
    else
        p->per_pass = k < m ? (m - k + w - 1) / w : 0;
    p->per_epoch = p->per_pass * (uint64_t)p->plan.repeat;
    if (p->per_epoch > needed_positions(p))
        p->per_epoch = needed_positions(p);
    /* mode "auto": the global order (a keyed bijection: O(1) memory at any
     * size) unless the source is remote and large, where a rank reading its
     * own blocks (window) fetches far fewer shards than one scattered over
     * all of them (docs/PIPELINE.md, "Shuffle") */
    p->shuf.window_mode = p->spec->shuffle &&
                     (p->spec->shuffle_mode == SL_SHUFFLE_WINDOW ||
                      (p->spec->shuffle_mode == SL_SHUFFLE_AUTO &&
                       ((m > SL_SHUFFLE_GLOBAL_MAX && sl_source__remote(p->src)) ||
                        p->src->locality)));
    if (p->shuf.window_mode) /* a source's locality (Parquet row groups): the defaults */
        sl_pipeline__window_sizes(p->spec->shuffle_window ? p->spec->shuffle_window
                                                          : p->src->locality_window,
                                  p->spec->shuffle_block ? p->spec->shuffle_block
                                                         : p->src->locality,
                                  &p->shuf.window, &p->shuf.block);
    SL_CHECK(sl_pipeline__pools_create(&p->pools));
    sl_pool_mem pinned;
    if (sl_pipeline__dev_batch_mem(p->dev, &pinned))
        sl_pipeline__pools_set_batch_mem(p->pools, &pinned);
    p->chunk_size = p->spec->chunk > 0 ? p->spec->chunk : 64;
    SL_CHECK(sl_pipeline__layout(p));
    SL_CHECK(sl_pipeline__memory_plan(p));
    SL_CHECK(sl_pipeline__tune_spare(p));
    SL_CHECK(reserve_batch_buffers(p));
    SL_CHECK(hash_spec(p->spec, &p->spec_hash));
    p->cur.end_epoch = (uint64_t)p->spec->epochs;
    *out = p;
    return SL_OK;
cleanup:
    sl_pipeline_free(p);
    return rc;
}

void sl_pipeline_free(sl_pipeline *p) {
    if (!p)
        return;
    sl_pipeline__stop(p);
    for (int s = 0; s < p->nstages; s++)
        sl_queue__destroy(&p->stage[s].out);
    sl_pipeline__free_chunks(p);
    sl_pipeline__trace_free(p);
    sl_pipeline__dev_close(p->dev);
    sl_plan__free(&p->plan);
    sl_pipeline__pools_free(p->pools);
    sl_source__release(p->src);
    sl__free(p->base);
    sl_spec_free(p->spec);
    pthread_mutex_destroy(&p->cur.mu);
    pthread_cond_destroy(&p->cur.cv);
    pthread_mutex_destroy(&p->tune.mu);
    pthread_cond_destroy(&p->tune.cv);
    pthread_mutex_destroy(&p->chunk_mu);
    pthread_mutex_destroy(&p->err.mu);
    sl__free(p);
}

/* ---- iteration ----------------------------------------------------------------------- */

/* Store the pipeline's failure (the first one stays) and return it, its
 * message as this thread's error message. */
static int fail(sl_pipeline_errors *e, int rc, const char *msg) {
    pthread_mutex_lock(&e->mu);
    if (!e->failed) {
        e->failed = 1;
        e->fail_rc = rc;
        snprintf(e->fail_msg, sizeof e->fail_msg, "%s", msg);
    }
    rc = e->fail_rc;
    sl__seterrmsg(e->fail_msg);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

static int has_failed(sl_pipeline_errors *e) {
    pthread_mutex_lock(&e->mu);
    int failed = e->failed;
    pthread_mutex_unlock(&e->mu);
    return failed;
}

int sl_pipeline__pop_batch(sl_pipeline *p, sl_batch **out, int timeout_ms) {
    *out = NULL;
    sl_queue *q = &p->stage[p->nstages - 1].out;
    for (;;) {
        void *item;
        uint64_t wait = 0;
        int rc = sl_queue__pop(q, &item, &wait, timeout_ms);
        atomic_fetch_add(&p->stats.consumer_wait_ns, wait);
        if (rc == SL_END)
            return SL_OK; /* timed out */
        if (rc < 0)
            return sl__error(SL_ECANCELED, "pipeline: stopped");
        if (!p->layout.direct) {
            *out = item;
            return SL_OK;
        }
        sl_chunk *c = item;
        rc = sl_collate__from_chunk(p, c, &p->cons.direct_index, out);
        sl_pipeline__chunk_put(p, c);
        if (rc < 0)
            return rc;
        if (*out)
            return SL_OK;
        /* drop_remainder: nothing to hand out */
    }
}

int sl_pipeline_next_timeout(sl_pipeline *p, sl_batch **out, int timeout_ms) {
    *out = NULL;
    if (has_failed(&p->err))
        return fail(&p->err, 0, "");
    if (p->cons.at_end) {
        pthread_mutex_lock(&p->cur.mu);
        uint64_t end = p->cur.end_epoch;
        pthread_mutex_unlock(&p->cur.mu);
        if (p->cons.epoch >= end)
            return SL_END;
        p->cons.at_end = 0;
    }
    if (!p->running)
        SL_TRY(sl_pipeline__start(p, &p->start));
    sl_pipeline__autotune(p);
    int gpu = sl_pipeline__dev_gpu(p->dev);
    for (;;) {
        sl_batch *b;
        int rc = gpu ? sl_pipeline__dev_gpu_next(p, &b, timeout_ms)
                     : sl_pipeline__pop_batch(p, &b, timeout_ms);
        if (rc < 0) {
            if (has_failed(&p->err))
                return fail(&p->err, 0, "");
            char msg[SL__ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s", sl_errmsg());
            return rc == SL_ECANCELED ? rc : fail(&p->err, rc, msg);
        }
        if (!b)
            return SL_OK; /* timed out */
        if (b->kind == SL_CHUNK_END) {
            p->cons.epoch = b->epoch + 1;
            p->cons.at_end = 1;
            memset(&p->cons.last, 0, sizeof p->cons.last);
            p->cons.last.epoch = p->cons.epoch;
            p->cons.replay_skip = 0;
            sl_pipeline__batch_free(b);
            return SL_END;
        }
        if (b->kind == SL_CHUNK_ERROR) {
            rc = fail(&p->err, b->err_rc, b->errmsg);
            sl_pipeline__batch_free(b);
            return rc;
        }
        if (p->cons.replay_skip > 0) {
            p->cons.replay_skip--;
            sl_pipeline__batch_free(b);
            continue;
        }
        rc = p->dev && !gpu ? sl_pipeline__dev_upload(p->dev, b, p->plan.out_depth) : SL_OK;
        if (rc < 0) {
            char msg[SL__ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s", sl_errmsg());
            sl_pipeline__batch_free(b);
            return fail(&p->err, rc, msg);
        }
        p->cons.epoch = b->epoch;
        p->cons.last.epoch = b->epoch;
        p->cons.last.pos = b->next_pos;
        p->cons.last.batch = b->index + 1;
        memcpy(p->cons.last.counters, b->counters, sizeof p->cons.last.counters);
        atomic_fetch_add(&p->stats.batches_out, 1);
        atomic_fetch_add(&p->stats.samples_out, (uint64_t)b->size);
        *out = b;
        return SL_OK;
    }
}

int sl_pipeline_next(sl_pipeline *p, sl_batch **out) {
    for (;;) {
        int rc = sl_pipeline_next_timeout(p, out, -1);
        if (rc != SL_OK || *out)
            return rc;
    }
}

/* The threads are stopped (sl_pipeline__stop joined them): nothing can set
 * `failed` again until the next start, so a failed pipeline can start clean.
 * A record that failed fails again when it is reached again. */
static void clear_failure(sl_pipeline_errors *e) {
    pthread_mutex_lock(&e->mu);
    e->failed = 0;
    e->fail_rc = SL_OK;
    e->fail_msg[0] = '\0';
    pthread_mutex_unlock(&e->mu);
}

static void restart_at(sl_pipeline *p, uint64_t epoch, const sl_resume *r, uint64_t skip) {
    sl_pipeline__stop(p);
    clear_failure(&p->err);
    p->start = *r;
    p->cons.epoch = epoch;
    p->cons.at_end = 0;
    p->cons.replay_skip = skip;
    pthread_mutex_lock(&p->cur.mu);
    if (p->cur.end_epoch < epoch + 1)
        p->cur.end_epoch = epoch + 1;
    p->cur.ahead_epoch = 0;
    p->shuf.gperm_valid = 0;
    p->shuf.wsh_valid = 0;
    pthread_mutex_unlock(&p->cur.mu);
}

int sl_pipeline_set_epoch(sl_pipeline *p, uint64_t epoch) {
    /* Read ahead only in a loop over epochs (this call asks for the epoch
     * after the last call's): a single jump reads no epoch it was not asked
     * for, and user maps see no call for it. */
    int loop = p->cur.set_epochs > 0 && epoch == p->cur.last_set_epoch + 1;
    p->cur.set_epochs++;
    p->cur.last_set_epoch = epoch;
    uint64_t ahead = loop ? epoch + 2 : 0;
    int failed = has_failed(&p->err);
    const sl_pipeline_consumer *cons = &p->cons;
    int fresh = !failed && cons->epoch == epoch && cons->last.batch == 0 && cons->last.pos == 0 &&
                cons->replay_skip == 0 &&
                (p->running || (p->start.epoch == epoch && p->start.pos == 0));
    if (fresh) {
        pthread_mutex_lock(&p->cur.mu);
        if (p->cur.end_epoch < epoch + 1)
            p->cur.end_epoch = epoch + 1;
        /* Read one epoch ahead: a loop calling set_epoch(e + 1) after epoch
         * e finds its first batches ready instead of waiting for the source
         * to start again (the consumer still gets SL_END at e's end until
         * it asks for e + 1; any other call restarts and drops them). */
        if (p->cur.ahead_epoch < ahead)
            p->cur.ahead_epoch = ahead;
        if (p->cur.parked && p->cur.epoch < sl_pipeline__src_limit(&p->cur)) {
            p->cur.parked = 0;
            pthread_cond_broadcast(&p->cur.cv);
        }
        pthread_mutex_unlock(&p->cur.mu);
        p->cons.last.epoch = epoch;
        return SL_OK;
    }
    sl_resume r;
    memset(&r, 0, sizeof r);
    r.epoch = epoch;
    restart_at(p, epoch, &r, 0);
    p->cur.ahead_epoch = ahead; /* as above (the threads are stopped) */
    p->cons.last = r;
    return SL_OK;
}

uint64_t sl_pipeline_epoch(const sl_pipeline *p) { return p->cons.epoch; }
int64_t sl_pipeline_epochs(const sl_pipeline *p) { return p->spec->epochs; }

int64_t sl_pipeline_len(const sl_pipeline *p) {
    if (p->spec->on_error == SL_ON_ERROR_SKIP)
        return -1;
    int64_t n = (int64_t)p->per_epoch;
    const sl_plan *pl = &p->plan;
    int batched = 0;
    for (int i = 0; i < pl->nopt; i++) {
        const sl_pnode *nd = &pl->opt[i];
        if (nd->kind == SL_PN_FILTER || (nd->kind == SL_PN_OP && (nd->def->flags & SL_OPF_FILTER)))
            return -1;
        if (nd->kind == SL_PN_BATCH) {
            n = nd->flag ? n / nd->n : (n + nd->n - 1) / nd->n;
            batched = 1;
        } else if (nd->kind == SL_PN_SKIP) {
            n = n > nd->n ? n - nd->n : 0;
        } else if (nd->kind == SL_PN_TAKE) {
            n = n < nd->n ? n : nd->n;
        }
    }
    (void)batched;
    return n;
}

/* The columns the consumer gets: decode on the GPU takes out the last one,
 * the placements (optimize.c, device_handoff.c). */
int sl_pipeline_ncols(const sl_pipeline *p) {
    return p->plan.handoff ? p->plan.consumer_cols.ncols : p->plan.out_cols.ncols;
}

const char *sl_pipeline_column_name(const sl_pipeline *p, int col) {
    if (col < 0 || col >= sl_pipeline_ncols(p))
        return NULL;
    return p->plan.out_cols.col[col].name;
}

int sl_pipeline_column_text(const sl_pipeline *p, int col) {
    if (col < 0 || col >= sl_pipeline_ncols(p))
        return 0;
    return p->plan.out_cols.col[col].text;
}

const char *sl_pipeline_error(const sl_pipeline *p) {
    return p->err.failed ? p->err.fail_msg : "";
}

/* ---- state ------------------------------------------------------------------------- */

int sl_pipeline_save_state(const sl_pipeline *p, char *buf, size_t cap, size_t *len_out) {
    char text[1024];
    size_t n = (size_t)snprintf(text, sizeof text,
                                "{\"version\":1,\"epoch\":%llu,\"batch\":%llu,\"pos\":%llu,"
                                "\"seed\":%llu,\"spec\":\"%016llx\",\"counters\":[",
                                (unsigned long long)p->cons.last.epoch,
                                (unsigned long long)p->cons.last.batch,
                                (unsigned long long)p->cons.last.pos,
                                (unsigned long long)p->spec->seed,
                                (unsigned long long)p->spec_hash);
    for (int i = 0; i < SL_MAX_COUNTERS && n < sizeof text; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%s%lld", i ? "," : "",
                              (long long)p->cons.last.counters[i]);
    if (n < sizeof text)
        snprintf(text + n, sizeof text - n, "]}");
    return sl__copy_out(text, buf, cap, len_out);
}

static int state_u64(const cJSON *doc, const char *key, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9.0e15)
        return sl__error(SL_EINVAL, "state.%s: missing or not a non-negative integer", key);
    *out = (uint64_t)v->valuedouble;
    return SL_OK;
}

int sl_pipeline_restore_state(sl_pipeline *p, const char *json) {
    int rc = SL_OK;
    sl__json_init();
    cJSON *doc = json ? cJSON_ParseWithOpts(json, NULL, 1) : NULL; /* 1: no trailing text */
    if (!doc && sl__json_failed())
        return sl__oom("reading a saved state");
    if (!doc || !cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        return sl__error(SL_EINVAL, "state: not a JSON object");
    }
    uint64_t version = 0, epoch = 0, batch = 0, pos = 0, seed = 0;
    SL_CHECK(state_u64(doc, "version", &version));
    if (version != 1)
        SL_FAIL(SL_EUNSUPPORTED, "state.version: %llu is not supported (this build reads 1)",
                (unsigned long long)version);
    SL_CHECK(state_u64(doc, "epoch", &epoch));
    SL_CHECK(state_u64(doc, "batch", &batch));
    SL_CHECK(state_u64(doc, "pos", &pos));
    SL_CHECK(state_u64(doc, "seed", &seed));
    if (seed != p->spec->seed)
        SL_FAIL(SL_EINVAL, "state.seed: saved with seed %llu, this pipeline has %llu",
                (unsigned long long)seed, (unsigned long long)p->spec->seed);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(doc, "spec");
    char want[32];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)p->spec_hash);
    if (!cJSON_IsString(h) || strcmp(h->valuestring, want) != 0)
        SL_FAIL(SL_EINVAL, "state.spec: saved by a different pipeline spec");
    if (pos > p->per_epoch)
        SL_FAIL(SL_EINVAL, "state.pos: %llu is past the end of the epoch (%llu)",
                (unsigned long long)pos, (unsigned long long)p->per_epoch);
    sl_resume r;
    memset(&r, 0, sizeof r);
    r.epoch = epoch;
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(doc, "counters");
    int i = 0;
    for (const cJSON *it = cJSON_IsArray(cn) ? cn->child : NULL; it && i < SL_MAX_COUNTERS;
         it = it->next, i++) {
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0 && it->valuedouble <= 9.0e15))
            SL_FAIL(SL_EINVAL, "state.counters[%d]: not a non-negative integer", i);
        r.counters[i] = (int64_t)it->valuedouble;
    }
    sl_resume last = r;
    last.pos = pos;
    last.batch = batch;
    if (p->plan.exact_resume) {
        restart_at(p, epoch, &last, 0);
    } else {
        /* a shuffle buffer's contents are not part of the state: replay the
         * epoch from its start and drop the batches already handed out; the
         * replay counts take/skip afresh, so it starts from zeroed counters */
        memset(r.counters, 0, sizeof r.counters);
        restart_at(p, epoch, &r, batch);
    }
    p->cons.last = last;
cleanup:
    cJSON_Delete(doc);
    return rc;
}

/* ---- batches ------------------------------------------------------------------------- */

int64_t sl_batch_size(const sl_batch *b) { return b->size; }
int sl_batch_ncols(const sl_batch *b) { return b->ncols; }

const char *sl_batch_name(const sl_batch *b, int col) {
    return col >= 0 && col < b->ncols ? b->names[col] : NULL;
}

int sl_batch_find(const sl_batch *b, const char *name) {
    for (int i = 0; i < b->ncols; i++)
        if (!strcmp(b->names[i], name))
            return i;
    return -1;
}

int sl_batch_is_ragged(const sl_batch *b, int col) {
    return col >= 0 && col < b->ncols && b->ragged[col];
}

const sl_tensor *sl_batch_column(const sl_batch *b, int col) {
    if (col < 0 || col >= b->ncols || b->ragged[col])
        return NULL;
    return &b->col[col];
}

const sl_tensor *sl_batch_item(const sl_batch *b, int col, int64_t i) {
    if (col < 0 || col >= b->ncols || !b->ragged[col] || i < 0 || i >= b->size)
        return NULL;
    return &b->items[col][i];
}

uint64_t sl_batch_index(const sl_batch *b) { return b->index; }
uint64_t sl_batch_epoch(const sl_batch *b) { return b->epoch; }

void sl_batch_release(sl_batch *b) { sl_pipeline__batch_free(b); }
