/* worker.c — named sets of worker threads with one fork policy (worker.h). */
#include "core/worker.h"

#include "core/core.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* fail_at == 0: injection off; otherwise the start whose ordinal (counted
 * from the last sl__workers_fail_at call) equals fail_at is refused. */
static _Atomic uint64_t fail_at;
static _Atomic uint64_t count;

void sl__workers_fail_at(uint64_t n) {
    atomic_store(&count, 0);
    atomic_store(&fail_at, n);
}

static bool inject_failure(void) {
    uint64_t f = atomic_load_explicit(&fail_at, memory_order_relaxed);
    if (!f)
        return false;
    return atomic_fetch_add(&count, 1) + 1 == f;
}

static void wake_cv(void *user) {
    sl_workers *ws = user;
    pthread_mutex_lock(ws->wake_mu);
    pthread_cond_broadcast(ws->wake_cv);
    pthread_mutex_unlock(ws->wake_mu);
}

int sl__workers_init_cv(sl_workers *ws, const char *name, int cap, pthread_mutex_t *mu,
                        pthread_cond_t *cv) {
    int rc = sl__workers_init(ws, name, cap, wake_cv, ws);
    ws->wake_mu = mu;
    ws->wake_cv = cv;
    return rc;
}

int sl__workers_init(sl_workers *ws, const char *name, int cap, void (*wake)(void *user),
                     void *user) {
    memset(ws, 0, sizeof *ws);
    snprintf(ws->name, sizeof ws->name, "%s", name);
    ws->cap = cap > 0 ? cap : 1;
    ws->pid = getpid();
    ws->wake = wake;
    ws->user = user;
    atomic_init(&ws->stop, 0);
    if (ws->cap <= SL_WORKERS_INLINE)
        return SL_OK;
    ws->heap = sl__calloc((size_t)ws->cap, sizeof *ws->heap);
    if (!ws->heap) {
        ws->cap = 0;
        return sl__error(SL_ENOMEM, "out of memory making room for %d %s threads", cap, name);
    }
    return SL_OK;
}

static pthread_t *tids(sl_workers *ws) { return ws->heap ? ws->heap : ws->inline_tid; }

bool sl__workers_owned(const sl_workers *ws) { return ws->pid == getpid(); }

/* In a forked child: the parent's threads do not exist here; forget them. */
static void adopt(sl_workers *ws) {
    if (ws->pid == getpid())
        return;
    ws->n = 0;
    ws->pid = getpid();
    atomic_store(&ws->stop, 0);
}

int sl__workers_start(sl_workers *ws, void *(*fn)(void *arg), void *arg) {
    adopt(ws);
    if (ws->n >= ws->cap)
        return sl__error(SL_ENOMEM, "cannot start a %s thread: all %d already run", ws->name,
                         ws->cap);
    int err = inject_failure() ? EAGAIN : pthread_create(&tids(ws)[ws->n], NULL, fn, arg);
    if (err)
        return sl__error(SL_ENOMEM,
                         "cannot start a %s thread (%d running): %s; lower the thread count "
                         "(jobs, workers) or raise the process's thread limit (ulimit -u)",
                         ws->name, ws->n, strerror(err));
    /* "sl-" + name + index, cut to the 15 characters Linux keeps */
    char tname[16];
    snprintf(tname, sizeof tname, "sl-%s%d", ws->name, ws->n);
    pthread_setname_np(tids(ws)[ws->n], tname);
    ws->n++;
    return SL_OK;
}

int sl__workers_count(const sl_workers *ws) { return ws->pid == getpid() ? ws->n : 0; }

bool sl__workers_stopping(const sl_workers *ws) { return atomic_load(&ws->stop) != 0; }

void sl__workers_stop(sl_workers *ws) {
    atomic_store(&ws->stop, 1);
    if (ws->wake && sl__workers_count(ws) > 0)
        ws->wake(ws->user);
}

int sl__workers_join(sl_workers *ws) {
    int joined = 0;
    if (ws->pid == getpid())
        for (; joined < ws->n; joined++)
            pthread_join(tids(ws)[joined], NULL);
    ws->n = 0;
    if (ws->pid != getpid())
        ws->pid = getpid();
    atomic_store(&ws->stop, 0);
    return joined;
}

void sl__workers_dispose(sl_workers *ws) {
    if (!ws->cap)
        return; /* zeroed, or init failed */
    sl__workers_stop(ws);
    sl__workers_join(ws);
    sl__free(ws->heap);
    ws->heap = NULL;
    ws->cap = 0;
}
