/*
 * exec.c — the executor: the stages' shared environment, starting and
 * stopping their threads through the stage table (stage.h), and a stage
 * worker's loop. exec.h's DESIGN note describes the whole; each kind of
 * stage is its own file.
 */
#include "pipeline/exec.h"

#include <stdio.h>
#include <string.h>

int sl_exec__init(sl_exec *x, sl_spec *spec) {
    x->spec = spec;
    pthread_mutex_init(&x->chunks.mu, NULL);
    pthread_mutex_init(&x->err.mu, NULL);
    pthread_mutex_init(&x->gate.mu, NULL);
    pthread_cond_init(&x->gate.cv, NULL);
    atomic_init(&x->cancel, 0);
    atomic_init(&x->chunk_size, spec->chunk > 0 ? spec->chunk : 64);
    atomic_init(&x->stats.threads_started, 0);
    atomic_init(&x->scount.slot_writes, 0);
    atomic_init(&x->scount.vec_batches, 0);
    x->ncpus = sl__ncpus();
    x->handoff.env = &x->env;
    return sl_stage_handoff__open(&x->handoff, spec);
}

int sl_exec__setup(sl_exec *x, const sl_plan *plan, sl_stage_src *in) {
    sl_stage_env *e = &x->env;
    x->in = in;
    e->plan = plan;
    e->layout = &x->layout;
    e->seed = x->spec->seed;
    e->on_error = x->spec->on_error;
    e->src = in->src;
    e->src_name = in->name;
    e->chunks = &x->chunks;
    e->err = &x->err;
    e->cancel = &x->cancel;
    e->chunk_size = &x->chunk_size;
    e->gate = &x->gate;
    e->counters = &x->scount;
    SL_TRY(sl_pipeline__pools_create(&e->pools));
    sl_pool_mem pinned;
    if (sl_stage_handoff__batch_mem(&x->handoff, &pinned))
        sl_pipeline__pools_set_batch_mem(e->pools, &pinned);
    return SL_OK;
}

void sl_exec__free(sl_exec *x) {
    if (!x->spec)
        return; /* never initialised */
    sl_exec__stop(x);
    for (int s = 0; s < x->nstages; s++)
        sl_queue__destroy(&x->stage[s].out);
    sl_stage__chunks_free(&x->chunks);
    sl_exec__trace_free(x);
    sl_stage_handoff__close(&x->handoff);
    sl_pipeline__pools_free(x->env.pools);
    pthread_mutex_destroy(&x->chunks.mu);
    pthread_mutex_destroy(&x->err.mu);
    pthread_mutex_destroy(&x->gate.mu);
    pthread_cond_destroy(&x->gate.cv);
}

/* ---- a worker ------------------------------------------------------------------------- */

/* A stage's worker (stage.h, sl_stage_kind): its state, then chunks until
 * the stage stops. A worker that cannot even start fails the pipeline, so
 * the consumer is not left waiting for it. */
static void *worker_main(void *arg) {
    sl_worker *w = arg;
    sl_stage *st = w->st;
    const sl_stage_kind *k = st->kind;
    int rc = k->worker_init ? k->worker_init(w) : SL_OK;
    if (rc < 0) {
        char msg[SL__ERRMSG_MAX];
        snprintf(msg, sizeof msg, "stage %s: %s", st->name, sl_errmsg());
        sl_stage__worker_fail(w->env, rc, msg);
    }
    for (;;) {
        if (rc < 0)
            break;
        sl_stage__worker_gate(w);
        sl_chunk *c = k->produce ? k->produce(w) : sl_stage__input(st);
        if (!c || k->chunk(w, c) < 0)
            break;
    }
    if (k->worker_free)
        k->worker_free(w);
    return NULL;
}

/* ---- start and stop ---------------------------------------------------------------- */

void sl_exec__stop(sl_exec *x) {
    if (!x->running)
        return;
    atomic_store(&x->cancel, 1);
    for (int s = 0; s < x->nstages; s++)
        if (x->stage[s].kind->wake)
            x->stage[s].kind->wake(&x->stage[s]);
    pthread_mutex_lock(&x->gate.mu);
    pthread_cond_broadcast(&x->gate.cv);
    pthread_mutex_unlock(&x->gate.mu);
    for (int s = 0; s < x->nstages; s++)
        sl_queue__close(&x->stage[s].out);
    for (int s = 0; s < x->nstages; s++) {
        sl_stage *st = &x->stage[s];
        sl__workers_dispose(&st->threads); /* they end on cancel and the closed queues */
        sl__free(st->w);
        st->w = NULL;
    }
    const sl_collation *C = x->layout.collation;
    for (int s = 0; s < x->nstages; s++)
        sl_queue__reset(&x->stage[s].out,
                        s == x->nstages - 1 ? C->drop : sl_stage__chunk_put_item, &x->env);
    x->running = 0;
    atomic_store(&x->cancel, 0);
}

/* Every stage takes its part of `at`, then their threads start. */
int sl_exec__start(sl_exec *x, const sl_resume *at) {
    for (int s = 0; s < x->nstages; s++) {
        sl_stage *st = &x->stage[s];
        st->at = *at;
        st->seq_out = 0;
        sl_queue__start(&st->out, at->epoch);
        if (st->kind->start)
            SL_TRY(st->kind->start(st, at));
    }
    x->handoff.at = *at;
    SL_TRY(x->handoff.kind->start(&x->handoff, at));
    if (!atomic_load(&x->stats.t_start)) {
        x->stats.cpu_t0_ns = sl__process_cpu_ns();
        atomic_store(&x->stats.t_start, sl__now_ns());
    }
    x->running = 1;
    for (int s = 0; s < x->nstages; s++) {
        sl_stage *st = &x->stage[s];
        st->w = sl__calloc((size_t)st->workers, sizeof *st->w);
        if (!st->w || sl__workers_init(&st->threads, "stage", st->workers, NULL, NULL) < 0) {
            sl_exec__stop(x);
            return sl__oom("starting pipeline threads");
        }
        for (int i = 0; i < st->workers; i++) {
            sl_worker *w = &st->w[i];
            w->st = st;
            w->env = st->env;
            w->id = i;
            int rc = sl__workers_start(&st->threads, worker_main, w);
            if (rc < 0) {
                sl__error_prefix(rc, "stage %s", st->name);
                sl_exec__stop(x);
                return rc;
            }
            /* counted by the starter, not the thread, so that a reading
             * taken right after the start sees every thread of it */
            atomic_fetch_add(&x->stats.threads_started, 1);
        }
    }
    return SL_OK;
}

void sl_exec__save(const sl_exec *x, const sl_batch *b, sl_resume *at) {
    at->epoch = b->epoch;
    at->batch = b->index + 1;
    memset(at->counters, 0, sizeof at->counters);
    for (int s = 0; s < x->nstages; s++)
        if (x->stage[s].kind->save)
            x->stage[s].kind->save(&x->stage[s], b, at);
}
