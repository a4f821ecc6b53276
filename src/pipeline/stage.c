/*
 * stage.c — what every stage's workers use (stage.h): chunks and their
 * free list, error and skip accounting, a unit of work's span, parking,
 * taking input and passing output on; and the table of stage kinds.
 */
#include "pipeline/stage.h"
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every kind of stage, one row each (stage.h). */
const sl_stage_kind *const sl_stage__kinds[] = {
    &sl_stage_source, &sl_stage_map, &sl_stage_seq, &sl_stage_final, &sl_stage_collate,
    &sl_stage_handoff, NULL,
};

/* ---- chunks ------------------------------------------------------------------------ */

static void chunk_destroy(sl_chunk *c) {
    sl__free(c->pos);
    sl__free(c->key);
    sl__free(c->s);
    sl__free(c);
}

sl_chunk *sl_stage__chunk_get(const sl_stage_env *e) {
    sl_chunks *cs = e->chunks;
    pthread_mutex_lock(&cs->mu);
    sl_chunk *c = cs->free;
    if (c)
        cs->free = c->next_free;
    pthread_mutex_unlock(&cs->mu);
    if (!c) {
        c = sl__calloc(1, sizeof *c);
        if (!c)
            return NULL;
        c->cap = (uint32_t)e->layout->chunk_cap;
        c->pos = sl__calloc(c->cap, sizeof *c->pos);
        c->key = sl__calloc(c->cap, sizeof *c->key);
        c->s = sl__calloc(c->cap, sizeof *c->s);
        if (!c->pos || !c->key || !c->s) {
            chunk_destroy(c);
            return NULL;
        }
    }
    c->n = 0;
    c->kind = SL_CHUNK_DATA;
    c->tail_ran = 0;
    c->err_rc = 0;
    c->errmsg[0] = '\0';
    c->batch = NULL;
    memset(&c->slot, 0, sizeof c->slot);
    return c;
}

void sl_stage__chunk_put(const sl_stage_env *e, sl_chunk *c) {
    for (uint32_t i = 0; i < c->n; i++)
        sl_pipeline__sample_release(&c->s[i]);
    c->n = 0;
    sl_pipeline__batch_free(c->batch);
    c->batch = NULL;
    sl_tensor_release(&c->slot);
    pthread_mutex_lock(&e->chunks->mu);
    c->next_free = e->chunks->free;
    e->chunks->free = c;
    pthread_mutex_unlock(&e->chunks->mu);
}

void sl_stage__chunk_put_item(void *item, void *env) { sl_stage__chunk_put(env, item); }

void sl_stage__chunks_free(sl_chunks *cs) {
    sl_chunk *c = cs->free;
    while (c) {
        sl_chunk *n = c->next_free;
        chunk_destroy(c);
        c = n;
    }
    cs->free = NULL;
}

int sl_stage__chunk_add(const sl_stage_env *e, sl_chunk **cp, uint64_t epoch, sl_sample *s,
                        uint64_t pos, uint64_t key) {
    if (!*cp) {
        *cp = sl_stage__chunk_get(e);
        if (!*cp) {
            sl_pipeline__sample_release(s);
            return sl__oom("passing samples on");
        }
        (*cp)->epoch = epoch;
    }
    sl_chunk *c = *cp;
    uint32_t i = c->n++;
    c->s[i].index = s->index;
    c->s[i].ncols = s->ncols;
    memcpy(c->s[i].col, s->col, s->ncols * sizeof(sl_tensor));
    s->ncols = 0;
    c->pos[i] = pos;
    c->key[i] = key;
    return SL_OK;
}

void sl_stage__chunk_fail(sl_chunk *c, int rc, const char *msg) {
    for (uint32_t i = 0; i < c->n; i++)
        sl_pipeline__sample_release(&c->s[i]);
    c->n = 0;
    sl_pipeline__batch_free(c->batch);
    c->batch = NULL;
    c->kind = SL_CHUNK_ERROR;
    c->err_rc = rc;
    snprintf(c->errmsg, sizeof c->errmsg, "%s", msg);
}

/* ---- errors ------------------------------------------------------------------------ */

void sl_stage__add_skip_hint(const sl_stage_env *e, char *msg, size_t cap) {
    if (e->on_error != SL_ON_ERROR_FAIL)
        return;
    size_t hl = sizeof SL_STAGE_SKIP_HINT - 1, n = strlen(msg);
    if (hl + 4 >= cap)
        return;
    if (n + hl >= cap) { /* cut the cause short, say so, keep the hint */
        n = cap - hl - 4;
        memcpy(msg + n, "...", 3);
        n += 3;
    }
    memcpy(msg + n, SL_STAGE_SKIP_HINT, hl + 1);
}

void sl_stage__op_error(const sl_stage_env *e, char *msg, size_t cap, const char *where, int pos,
                        const char *label, const char *cause) {
    if (pos < 0) /* not a spec op (a mixture's input ops): the cause names it */
        snprintf(msg, cap, "%s: %s", where, cause);
    else
        snprintf(msg, cap, "%s: ops[%d] (%s): %s", where, pos, label, cause);
    sl_stage__add_skip_hint(e, msg, cap);
}

void sl_stage__copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void sl_stage__note_skip(sl_errors *e, const char *msg) {
    pthread_mutex_lock(&e->mu);
    e->skipped++;
    if (e->n < SL_STATS_MAX_ERRORS)
        sl_stage__copy_str(e->msg[e->n++], sizeof e->msg[0], msg);
    pthread_mutex_unlock(&e->mu);
}

void sl_stage__note_skip_range(sl_errors *e, uint64_t first, uint64_t count, uint64_t n,
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
            sl_stage__copy_str(e->msg[e->n], sizeof e->msg[0], msg);
        e->n++;
        e->dead_first[e->ndead++] = first;
    }
    pthread_mutex_unlock(&e->mu);
}

/* A worker cannot go on (out of memory outside any sample): store the error
 * and close the consumer's queue, so that a blocked sl_pipeline_next wakes
 * up and returns it. */
void sl_stage__worker_fail(const sl_stage_env *e, int rc, const char *msg) {
    sl_errors *err = e->err;
    pthread_mutex_lock(&err->mu);
    if (!err->failed) {
        err->failed = 1;
        err->fail_rc = rc;
        sl_stage__copy_str(err->fail_msg, sizeof err->fail_msg, msg);
    }
    pthread_mutex_unlock(&err->mu);
    sl_queue__close(e->last);
}

/* ---- a unit of work ------------------------------------------------------------------ */

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A unit of work starts: wall clock and this thread's CPU clock (the two
 * apart tell computing from waiting on reads or sleeps, for the verdict). */
sl_stage_span sl_stage__span_begin(void) {
    sl_stage_span s = {sl__now_ns(), thread_cpu_ns()};
    return s;
}

_Static_assert(SL_STAGE_NPHASES == SL_NPHASES, "the stage keeps every op-split phase");

void sl_stage__phases_take(sl_stage *st) {
    sl_ops__phases *a = &sl_ops__phase_acc;
    if (!a->samples)
        return;
    for (int k = 0; k < SL_NPHASES; k++) {
        atomic_fetch_add_explicit(&st->phase_ns[k], a->ns[k], memory_order_relaxed);
        a->ns[k] = 0;
    }
    atomic_fetch_add_explicit(&st->phase_all_ns, a->all_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->phase_samples, a->samples, memory_order_relaxed);
    a->all_ns = 0;
    a->samples = 0;
}

void sl_stage__span_end(sl_stage *st, int worker, sl_stage_span sp, uint32_t n) {
    uint64_t t1 = sl__now_ns(), t0 = sp.t0;
    atomic_fetch_add_explicit(&st->busy_ns, t1 - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->cpu_ns, thread_cpu_ns() - sp.c0, memory_order_relaxed);
    sl_stage__phases_take(st);
    if (st->env->trace)
        sl_pipeline__trace_add(st->env->trace, st->index, worker, t0, t1 - t0, n);
}

void sl_stage__chunk_done(sl_worker *w, sl_chunk *c, sl_stage_span t0, uint32_t n) {
    if (w->st->collates && c->kind == SL_CHUNK_DATA)
        w->env->layout->collation->done(w, c);
    sl_stage__span_end(w->st, w->id, t0, n);
    atomic_fetch_add_explicit(&w->st->elements, n, memory_order_relaxed);
}

/* ---- moving elements ------------------------------------------------------------------ */

void sl_stage__worker_gate(sl_worker *w) {
    sl_stage *st = w->st;
    if (w->id < atomic_load_explicit(&st->active, memory_order_relaxed))
        return;
    sl_gate *g = w->env->gate;
    pthread_mutex_lock(&g->mu);
    while (w->id >= atomic_load(&st->active) && !atomic_load(w->env->cancel))
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

/* The wait counts as the stage's time waiting for input. */
sl_chunk *sl_stage__input(sl_stage *st) {
    void *item;
    uint64_t wait_in = 0;
    int rc = sl_queue__pop(st->in, &item, &wait_in, -1);
    atomic_fetch_add_explicit(&st->wait_in_ns, wait_in, memory_order_relaxed);
    return rc == SL_OK ? item : NULL;
}

int sl_stage__push(sl_stage *st, uint64_t seq, void *item, int barrier, uint64_t epoch) {
    uint64_t wait = 0;
    int rc = sl_queue__push(&st->out, seq, item, barrier, epoch, &wait);
    atomic_fetch_add_explicit(&st->wait_out_ns, wait, memory_order_relaxed);
    return rc;
}

int sl_stage__push_chunk(sl_stage *st, sl_chunk *c) {
    if (sl_stage__push(st, c->seq, c, c->kind != SL_CHUNK_DATA, c->epoch) < 0) {
        sl_stage__chunk_put(st->env, c);
        return -1;
    }
    return 0;
}

int sl_stage__emit(sl_stage *st, void *item, int barrier, uint64_t epoch) {
    return sl_stage__push(st, st->seq_out++, item, barrier, epoch);
}

int sl_stage__emit_marker(sl_stage *st, int kind, uint64_t epoch, int err_rc, const char *msg) {
    sl_chunk *c = sl_stage__chunk_get(st->env);
    if (!c)
        return sl__oom("ending an epoch");
    c->kind = kind;
    c->epoch = epoch;
    c->err_rc = err_rc;
    if (msg)
        snprintf(c->errmsg, sizeof c->errmsg, "%s", msg);
    c->seq = st->seq_out;
    if (sl_stage__emit(st, c, 1, c->epoch) < 0) {
        sl_stage__chunk_put(st->env, c);
        return SL_ECANCELED;
    }
    return SL_OK;
}
