/*
 * worker.h — the one way the library runs threads: a named set of worker
 * threads, each running fn(arg), started one at a time, asked to stop, and
 * joined. Every thread site of the library uses it (pipeline stage workers,
 * the HTTP read-ahead loop, the remote reader's shard openers, the
 * ImageFolder pack readers, sl_shard_set__each, the host device's stream
 * thread). Never installed.
 *
 *   sl_workers ws;
 *   SL_TRY(sl__workers_init(&ws, "reader", 4, wake, ctx));
 *   for (...) SL_TRY(sl__workers_start(&ws, fn, arg));  // (clean up on failure)
 *   ...
 *   sl__workers_dispose(&ws);  // stop (wake(ctx) once), join, free
 *
 * Stopping: sl__workers_stop() sets a flag that fn reads with
 * sl__workers_stopping(), then calls the set's `wake(user)`, so that threads
 * asleep on the caller's condition variable see it: a thread that checks
 * the flag under the caller's mutex before each wait, with `wake` taking
 * that mutex to broadcast, never misses a stop. Sets whose threads end on
 * a signal of their own (a closed queue, a cancel flag) pass no `wake` and
 * only join.
 *
 * Fork policy (one for the whole library; rule R6): the threads of a set belong to
 * the process that started them, recorded as its pid. After fork() the
 * child has none of them: in the child, sl__workers_owned() is false,
 * sl__workers_count() is 0, and sl__workers_stop/join/dispose neither
 * signal nor join the parent's threads (their ids mean nothing there, and
 * `wake` would lock a mutex that one of them may have held at the fork);
 * they only forget them. A child that starts a thread in such a set begins
 * a set of its own (owned by the child). A caller whose queue or lock the
 * parent's threads shared asks sl__workers_owned() first and works in
 * place in a child (the remote reader's openers do); a process-wide set
 * (the read-ahead loop) simply starts afresh in the child.
 *
 * Thread safety: a set is started, stopped and joined by one thread at a
 * time (the caller serialises, usually under its own mutex);
 * sl__workers_stopping() may be called from any thread.
 */
#ifndef SL_CORE_WORKER_H
#define SL_CORE_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SL_WORKERS_INLINE 8 /* sets up to this size allocate nothing */

typedef struct sl_workers {
    char name[12];        /* threads are named "sl-<name><i>" (ps, gdb, perf) */
    int cap;              /* most threads the set holds */
    int n;                /* threads started and not joined, in process `pid` */
    pid_t pid;            /* the process that owns the threads */
    _Atomic int stop;     /* sl__workers_stop was called */
    void (*wake)(void *user); /* called by sl__workers_stop; may be NULL */
    void *user;
    pthread_mutex_t *wake_mu; /* sl__workers_init_cv: the pair its wake signals */
    pthread_cond_t *wake_cv;
    pthread_t *heap;      /* the ids when cap > SL_WORKERS_INLINE, else NULL */
    pthread_t inline_tid[SL_WORKERS_INLINE];
} sl_workers;

/* An empty set of at most `cap` (>= 1) threads named after `name`, owned by
 * the calling process. `wake(user)` (may be NULL) is called by
 * sl__workers_stop. Returns SL_OK, or SL_ENOMEM (cap > SL_WORKERS_INLINE
 * allocates) with a message. */
int sl__workers_init(sl_workers *ws, const char *name, int cap, void (*wake)(void *user),
                     void *user);
/* sl__workers_init for the usual threads, which sleep on `cv` under `mu`:
 * the set's wake locks mu and broadcasts cv. mu and cv outlive the set. */
int sl__workers_init_cv(sl_workers *ws, const char *name, int cap, pthread_mutex_t *mu,
                        pthread_cond_t *cv);
/* Start one more thread running fn(arg). Returns SL_OK; SL_ENOMEM when the
 * system refuses a thread (the message names the set, how many run, the
 * cause and what to do) or when the set is full (cap threads). Nothing is
 * started on failure; the threads already running are untouched. In a
 * forked child, first forgets the parent's threads (see the fork policy). */
int sl__workers_start(sl_workers *ws, void *(*fn)(void *arg), void *arg);
/* Threads of this set running in the calling process (0 in a forked child
 * that started none). */
int sl__workers_count(const sl_workers *ws);
/* Whether the set's threads belong to the calling process (false in a
 * forked child until it starts one of its own). */
bool sl__workers_owned(const sl_workers *ws);
/* Whether sl__workers_stop was called: fn's loop condition. */
bool sl__workers_stopping(const sl_workers *ws);
/* Ask the threads to stop: sets the flag, then calls wake(user) when the
 * set has threads in this process. Does not wait. */
void sl__workers_stop(sl_workers *ws);
/* Wait for every thread of this process to return and clear the stop flag,
 * so that the set may start again. Returns how many were joined. In a
 * forked child, forgets the parent's threads without touching them. Does
 * not stop them: call sl__workers_stop first unless they end by themselves. */
int sl__workers_join(sl_workers *ws);
/* Stop, join and release the set (a zeroed set is fine; so is one whose
 * init failed). */
void sl__workers_dispose(sl_workers *ws);
/* Tests: make the n-th sl__workers_start from now fail as if the system had
 * refused the thread (1 = the next one); 0 disables. Process-wide. */
void sl__workers_fail_at(uint64_t n);

#endif
