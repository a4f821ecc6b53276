/* Tests of src/core/worker.c: start, stop, join, start failures, fork. */
#include "test.h"
#include "core/core.h"
#include "core/worker.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

/* A caller's queue: threads sleep on cv until work comes or the set stops. */
typedef struct {
    sl_workers ws;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int work;           /* items queued */
    _Atomic int done;   /* items finished */
    _Atomic int running;
    _Atomic int exited;
    _Atomic int wakes;
    pid_t wake_pid;     /* the process that last called wake */
} pool;

static void pool_wake(void *user) {
    pool *p = user;
    atomic_fetch_add(&p->wakes, 1);
    pthread_mutex_lock(&p->mu);
    p->wake_pid = getpid();
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void *pool_main(void *arg) {
    pool *p = arg;
    atomic_fetch_add(&p->running, 1);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!sl__workers_stopping(&p->ws) && !p->work)
            pthread_cond_wait(&p->cv, &p->mu);
        if (sl__workers_stopping(&p->ws))
            break;
        p->work--;
        pthread_mutex_unlock(&p->mu);
        struct timespec ts = {0, 200 * 1000}; /* 0.2 ms of "work" */
        nanosleep(&ts, NULL);
        atomic_fetch_add(&p->done, 1);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    atomic_fetch_add(&p->exited, 1);
    return NULL;
}

static void pool_init(pool *p, int cap) {
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    ASSERT_EQ(sl__workers_init(&p->ws, "test", cap, pool_wake, p), SL_OK);
}

static void pool_destroy(pool *p) {
    sl__workers_dispose(&p->ws);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}

static void wait_for(_Atomic int *v, int want) {
    for (int i = 0; i < 20000 && atomic_load(v) < want; i++) {
        struct timespec ts = {0, 500 * 1000};
        nanosleep(&ts, NULL);
    }
    ASSERT_EQ(atomic_load(v), want);
}

SL_TEST(core_worker__start_stop_join) {
    pool p;
    pool_init(&p, 3);
    ASSERT(sl__workers_owned(&p.ws));
    ASSERT_EQ(sl__workers_count(&p.ws), 0);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_OK);
    ASSERT_EQ(sl__workers_count(&p.ws), 3);
    wait_for(&p.running, 3);
    pthread_mutex_lock(&p.mu);
    p.work = 50;
    pthread_cond_broadcast(&p.cv);
    pthread_mutex_unlock(&p.mu);
    wait_for(&p.done, 50);
    ASSERT(!sl__workers_stopping(&p.ws));
    sl__workers_stop(&p.ws);
    ASSERT(sl__workers_stopping(&p.ws));
    ASSERT_EQ(atomic_load(&p.wakes), 1);
    ASSERT_EQ(sl__workers_join(&p.ws), 3);
    ASSERT_EQ(atomic_load(&p.exited), 3);
    ASSERT_EQ(sl__workers_count(&p.ws), 0);
    /* joined: the set starts again, the stop flag cleared */
    ASSERT(!sl__workers_stopping(&p.ws));
    ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_OK);
    wait_for(&p.running, 4);
    pool_destroy(&p);
    ASSERT_EQ(atomic_load(&p.exited), 4);
    /* a set with no threads: stop calls no wake, join joins none */
    pool q;
    pool_init(&q, 2);
    sl__workers_stop(&q.ws);
    ASSERT_EQ(atomic_load(&q.wakes), 0);
    ASSERT_EQ(sl__workers_join(&q.ws), 0);
    pool_destroy(&q);
    /* a zeroed set disposes */
    sl_workers z;
    memset(&z, 0, sizeof z);
    sl__workers_dispose(&z);
}

/* sl__workers_init_cv: the set's own wake broadcasts the caller's cv under
 * its mu, so threads asleep on it see the stop; inline and heap sets. */
SL_TEST(core_worker__init_cv_wakes_the_sleepers) {
    const int caps[] = {2, SL_WORKERS_INLINE + 2};
    for (int k = 0; k < 2; k++) {
        for (int round = 0; round < 20; round++) {
            pool p;
            memset(&p, 0, sizeof p);
            pthread_mutex_init(&p.mu, NULL);
            pthread_cond_init(&p.cv, NULL);
            ASSERT_EQ(sl__workers_init_cv(&p.ws, "cv", caps[k], &p.mu, &p.cv), SL_OK);
            for (int i = 0; i < caps[k]; i++)
                ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_OK);
            wait_for(&p.running, caps[k]);
            pthread_mutex_lock(&p.mu);
            p.work = 5;
            pthread_cond_broadcast(&p.cv);
            pthread_mutex_unlock(&p.mu);
            wait_for(&p.done, 5);
            /* all asleep on cv again (or about to be): only the stop's wake ends them */
            sl__workers_stop(&p.ws);
            ASSERT_EQ(sl__workers_join(&p.ws), caps[k]);
            ASSERT_EQ(atomic_load(&p.exited), caps[k]);
            pool_destroy(&p);
        }
    }
}

/* More threads than fit inline: the ids live on the heap. */
SL_TEST(core_worker__many_threads) {
    pool p;
    pool_init(&p, SL_WORKERS_INLINE * 3);
    for (int i = 0; i < SL_WORKERS_INLINE * 3; i++)
        ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_OK);
    wait_for(&p.running, SL_WORKERS_INLINE * 3);
    pool_destroy(&p);
    ASSERT_EQ(atomic_load(&p.exited), SL_WORKERS_INLINE * 3);
}

/* Stop while every thread is busy and work is still queued: the threads end
 * after their current item, the rest of the queue is left, nothing hangs. */
SL_TEST(core_worker__stop_mid_work) {
    for (int round = 0; round < 200; round++) {
        pool p;
        pool_init(&p, 4);
        pthread_mutex_lock(&p.mu);
        p.work = 1000000;
        pthread_mutex_unlock(&p.mu);
        for (int i = 0; i < 4; i++)
            ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_OK);
        if (round % 2)
            wait_for(&p.running, 4); /* odd rounds: stop once all run */
        sl__workers_stop(&p.ws);
        ASSERT_EQ(sl__workers_join(&p.ws), 4);
        ASSERT_EQ(atomic_load(&p.exited), 4);
        ASSERT(atomic_load(&p.done) < 1000000);
        pool_destroy(&p);
    }
}

SL_TEST(core_worker__start_failure_injected) {
    pool p;
    pool_init(&p, 4);
    sl__workers_fail_at(3);
    ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_OK);
    ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_OK);
    ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_ENOMEM);
    ASSERT(strstr(sl_errmsg(), "cannot start a test thread (2 running)"));
    ASSERT(strstr(sl_errmsg(), "ulimit -u"));
    ASSERT_EQ(sl__workers_count(&p.ws), 2); /* the running ones untouched */
    sl__workers_fail_at(0);
    ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_OK);
    ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_OK);
    /* full */
    ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_ENOMEM);
    ASSERT(strstr(sl_errmsg(), "all 4 already run"));
    wait_for(&p.running, 4);
    pool_destroy(&p);
    ASSERT_EQ(atomic_load(&p.exited), 4);
    /* the ids of a big set cannot be allocated */
    sl_workers big;
    sl__alloc_fail_at(1);
    ASSERT_EQ(sl__workers_init(&big, "big", SL_WORKERS_INLINE + 1, NULL, NULL), SL_ENOMEM);
    sl__alloc_fail_at(0);
    ASSERT(strstr(sl_errmsg(), "big threads"));
    sl__workers_dispose(&big);
}

/* A forked child holds none of the parent's threads: it neither joins nor
 * signals them (here a parent thread holds the caller's mutex across the
 * fork, so a wake in the child would hang on it), and a thread it starts is
 * its own. The parent's set is unaffected. */
SL_TEST(core_worker__forked_child) {
    for (int round = 0; round < 20; round++) {
        pool p;
        pool_init(&p, 4);
        for (int i = 0; i < 3; i++)
            ASSERT_EQ(sl__workers_start(&p.ws, pool_main, &p), SL_OK);
        wait_for(&p.running, 3);
        pthread_mutex_lock(&p.mu); /* held at the fork, as a worker might */
        pid_t pid = fork();
        ASSERT(pid >= 0);
        if (pid == 0) {
            alarm(20);
            int bad = 0;
            if (sl__workers_owned(&p.ws) || sl__workers_count(&p.ws) != 0)
                bad |= 1;
            /* wake would lock p.mu, held by the parent's thread: it must not
             * be called (the wakes counter stays as it was) */
            int wakes = atomic_load(&p.wakes);
            sl__workers_stop(&p.ws);
            if (atomic_load(&p.wakes) != wakes)
                bad |= 2;
            if (sl__workers_join(&p.ws) != 0)
                bad |= 4;
#ifndef UNDER_TSAN /* TSan ends a child that starts threads after a fork */
            /* a fresh mutex: the parent's copy is locked forever here */
            pthread_mutex_init(&p.mu, NULL);
            if (sl__workers_start(&p.ws, pool_main, &p) != SL_OK)
                bad |= 8;
            if (!sl__workers_owned(&p.ws) || sl__workers_count(&p.ws) != 1)
                bad |= 16;
            sl__workers_stop(&p.ws);
            if (atomic_load(&p.wakes) != wakes + 1 || p.wake_pid != getpid())
                bad |= 32;
            if (sl__workers_join(&p.ws) != 1)
                bad |= 64;
#endif
            _exit(bad);
        }
        pthread_mutex_unlock(&p.mu);
        int st = 0;
        ASSERT_EQ(waitpid(pid, &st, 0), pid);
        ASSERT(WIFEXITED(st));
        ASSERT_EQ(WEXITSTATUS(st), 0);
        /* the parent's threads still serve and stop as before */
        ASSERT(sl__workers_owned(&p.ws));
        ASSERT_EQ(sl__workers_count(&p.ws), 3);
        pthread_mutex_lock(&p.mu);
        p.work = 10;
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
        wait_for(&p.done, 10);
        sl__workers_stop(&p.ws);
        ASSERT_EQ(sl__workers_join(&p.ws), 3);
        ASSERT_EQ(atomic_load(&p.exited), 3);
        pool_destroy(&p);
    }
}
