/*
 * pipeline.c — the public pipeline API: create (open the source, plan,
 * optimise, lay out stages), iterate, epochs, save/restore, batch access,
 * free. The stages are the executor's (exec.h); each kind is a file of its own.
 *
 * Consumer state machine (one consumer thread):
 *
 *   CREATED --next()--> RUNNING (sl_exec__start)
 *   RUNNING --next() gets END--> AT_END(epoch e done)
 *   AT_END --next(), e+1 < cur.end_epoch--> RUNNING (batches of e+1 were
 *            already being prepared: no restart)
 *   AT_END --next(), no more epochs--> AT_END (SL_END again)
 *   any --set_epoch(e) at the start of e--> same state, cur.end_epoch >= e+1;
 *            after set_epoch(e-1) (a loop over epochs) the source reads
 *            e+1 ahead (cur.ahead_epoch), which the consumer gets only
 *            after set_epoch(e+1)
 *   any --set_epoch elsewhere / restore_state--> stop + restart at the
 *            position (sl_exec__stop, then start on the next call)
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

/* ---- creation --------------------------------------------------------------------- */

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
    return sl__json_hash(doc, "hashing the spec", out);
}

/* Stream positions an epoch needs: a `take` ends the epoch after its count,
 * and when nothing before it can drop a sample (no filter left, policy
 * fail, no shuffle_buffer, whose draws depend on what follows) that is a
 * known number of positions: the skips before it plus its count, in samples
 * (batches after `batch`). The source then stops there instead of reading
 * the rest of the epoch for nothing. UINT64_MAX: all. */
static int any_indexed(const sl_source *src) {
    for (int c = 0; c < src->ncols; c++)
        if (src->col[c].indexed)
            return 1;
    return 0;
}

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

int sl_pipeline_create(sl_pipeline **out, const sl_spec *spec) {
    int rc;
    *out = NULL;
    if (!spec)
        return sl__error(SL_EINVAL, "spec is NULL");
    SL_TRY(sl_settings_check());
    sl_pipeline *p = sl__calloc(1, sizeof *p);
    if (!p)
        return sl__oom("creating a pipeline");
    sl_exec *x = &p->x;
    SL_CHECK(sl_spec__copy(&p->spec, spec));
    SL_CHECK(sl_exec__init(x, p->spec)); /* the device: may take the normalize op */
    sl_colset cols;
    SL_CHECK(sl_stage_src__open(&p->in, p->spec, &cols));
    sl_pnode lead; /* a mixture's per-input ops */
    int has_lead = p->spec->mix && p->spec->mix->has_ops;
    if (has_lead)
        SL_CHECK(sl_mix__ops_node(&lead, p->spec, &p->in));
    SL_CHECK(sl_plan__build(&p->plan, p->spec, &cols, has_lead ? &lead : NULL));
    SL_CHECK(sl_plan__optimize(&p->plan, any_indexed(p->in.src)));
    SL_CHECK(sl_stage_handoff__plan(&x->handoff, &p->plan));
    SL_CHECK(sl_stage_src__plan(&p->in, p->spec, &p->plan, needed_positions(p)));
    SL_CHECK(sl_exec__setup(x, &p->plan, &p->in));
    SL_CHECK(sl_exec__layout(x));
    SL_CHECK(sl_exec__memory_plan(x));
    SL_CHECK(sl_exec__tune_spare(x));
    SL_CHECK(sl_exec__reserve_batches(x));
    SL_CHECK(hash_spec(p->spec, &p->spec_hash));
    *out = p;
    return SL_OK;
cleanup:
    sl_pipeline_free(p);
    return rc;
}

void sl_pipeline_free(sl_pipeline *p) {
    if (!p)
        return;
    sl_exec__free(&p->x);
    sl_plan__free(&p->plan);
    sl_stage_src__close(&p->in);
    sl_spec_free(p->spec);
    sl__free(p);
}

sl_exec *sl_pipeline__exec(const sl_pipeline *p) { return (sl_exec *)(uintptr_t)&p->x; }

int sl_pipeline_set_stream(sl_pipeline *p, void *stream) {
    return sl_stage_handoff__set_stream(&p->x.handoff, stream);
}

/* ---- iteration ----------------------------------------------------------------------- */

/* Store the pipeline's failure (the first one stays) and return it, its
 * message as this thread's error message. */
static int fail(sl_errors *e, int rc, const char *msg) {
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

static int has_failed(sl_errors *e) {
    pthread_mutex_lock(&e->mu);
    int failed = e->failed;
    pthread_mutex_unlock(&e->mu);
    return failed;
}

int sl_pipeline_next_timeout(sl_pipeline *p, sl_batch **out, int timeout_ms) {
    sl_exec *x = &p->x;
    *out = NULL;
    if (has_failed(&x->err))
        return fail(&x->err, 0, "");
    if (p->cons.at_end) {
        if (p->cons.epoch >= sl_stage_src__end_epoch(&p->in))
            return SL_END;
        p->cons.at_end = 0;
    }
    if (!x->running)
        SL_TRY(sl_exec__start(x, &p->start));
    sl_exec__autotune(x);
    for (;;) {
        sl_batch *b;
        int rc = sl_stage_handoff__next(&x->handoff, &b, timeout_ms);
        if (rc < 0) {
            if (has_failed(&x->err))
                return fail(&x->err, 0, "");
            char msg[SL__ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s", sl_errmsg());
            return rc == SL_ECANCELED ? rc : fail(&x->err, rc, msg);
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
            rc = fail(&x->err, b->err_rc, b->errmsg);
            sl_pipeline__batch_free(b);
            return rc;
        }
        if (p->cons.replay_skip > 0) {
            p->cons.replay_skip--;
            sl_pipeline__batch_free(b);
            continue;
        }
        rc = sl_stage_handoff__deliver(&x->handoff, b);
        if (rc < 0) {
            char msg[SL__ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s", sl_errmsg());
            sl_pipeline__batch_free(b);
            return fail(&x->err, rc, msg);
        }
        p->cons.epoch = b->epoch;
        sl_exec__save(x, b, &p->cons.last);
        atomic_fetch_add(&x->stats.batches_out, 1);
        atomic_fetch_add(&x->stats.samples_out, (uint64_t)b->size);
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

/* The threads are stopped (sl_exec__stop joined them): nothing can set
 * `failed` again until the next start, so a failed pipeline can start clean.
 * A record that failed fails again when it is reached again. */
static void clear_failure(sl_errors *e) {
    pthread_mutex_lock(&e->mu);
    e->failed = 0;
    e->fail_rc = SL_OK;
    e->fail_msg[0] = '\0';
    pthread_mutex_unlock(&e->mu);
}

/* Stop, and start at `r` on the next call; the source reads through `epoch`
 * (and up to `ahead` - 1). */
static void restart_at(sl_pipeline *p, uint64_t epoch, const sl_resume *r, uint64_t skip,
                       uint64_t ahead) {
    sl_exec__stop(&p->x);
    clear_failure(&p->x.err);
    p->start = *r;
    p->cons.epoch = epoch;
    p->cons.at_end = 0;
    p->cons.replay_skip = skip;
    sl_stage_src__rewind(&p->in, epoch, ahead);
}

int sl_pipeline_set_epoch(sl_pipeline *p, uint64_t epoch) {
    /* Read ahead only in a loop over epochs (this call asks for the epoch
     * after the last call's): a single jump reads no epoch it was not asked
     * for, and user maps see no call for it. */
    int loop = p->cons.set_epochs > 0 && epoch == p->cons.last_set_epoch + 1;
    p->cons.set_epochs++;
    p->cons.last_set_epoch = epoch;
    uint64_t ahead = loop ? epoch + 2 : 0;
    int failed = has_failed(&p->x.err);
    const sl_consumer *cons = &p->cons;
    int fresh = !failed && cons->epoch == epoch && cons->last.batch == 0 && cons->last.pos == 0 &&
                cons->replay_skip == 0 &&
                (p->x.running || (p->start.epoch == epoch && p->start.pos == 0));
    if (fresh) {
        /* Read one epoch ahead: a loop calling set_epoch(e + 1) after epoch
         * e finds its first batches ready instead of waiting for the source
         * to start again (the consumer still gets SL_END at e's end until
         * it asks for e + 1; any other call restarts and drops them). */
        sl_stage_src__want(&p->in, epoch + 1, ahead);
        p->cons.last.epoch = epoch;
        return SL_OK;
    }
    sl_resume r;
    memset(&r, 0, sizeof r);
    r.epoch = epoch;
    restart_at(p, epoch, &r, 0, ahead);
    p->cons.last = r;
    return SL_OK;
}

uint64_t sl_pipeline_epoch(const sl_pipeline *p) { return p->cons.epoch; }
int64_t sl_pipeline_epochs(const sl_pipeline *p) { return p->spec->epochs; }

int64_t sl_pipeline_len(const sl_pipeline *p) {
    if (p->spec->on_error == SL_ON_ERROR_SKIP)
        return -1;
    int64_t n = (int64_t)p->in.per_epoch;
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
 * the placements (optimize.c, stage_handoff.c). */
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
    return p->x.err.failed ? p->x.err.fail_msg : "";
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
    if (pos > p->in.per_epoch)
        SL_FAIL(SL_EINVAL, "state.pos: %llu is past the end of the epoch (%llu)",
                (unsigned long long)pos, (unsigned long long)p->in.per_epoch);
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
        restart_at(p, epoch, &last, 0, 0);
    } else {
        /* a shuffle buffer's contents are not part of the state: replay the
         * epoch from its start and drop the batches already handed out; the
         * replay counts take/skip afresh, so it starts from zeroed counters */
        memset(r.counters, 0, sizeof r.counters);
        restart_at(p, epoch, &r, batch, 0);
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
