/* log.c — leveled logging to stderr or a user callback; time. */
#include "core/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_level = -1;  /* -1: not yet read from SLUICE_LOG */
static pthread_mutex_t cb_mu = PTHREAD_MUTEX_INITIALIZER;
static void (*log_cb)(sl_log_level, const char *, void *);
static void *log_user;

/* SLUICE_LOG's values are the levels in order: error, warn, info, debug. */
static int level_from_env(void) { return sl__setting_choice("SLUICE_LOG"); }

void sl_log_set_level(sl_log_level level) { atomic_store(&log_level, (int)level); }

sl_log_level sl_log_get_level(void) {
    int l = atomic_load_explicit(&log_level, memory_order_relaxed);
    if (l < 0) {
        l = level_from_env();
        atomic_store(&log_level, l);
    }
    return (sl_log_level)l;
}

void sl_log_set_callback(void (*fn)(sl_log_level, const char *, void *), void *user) {
    pthread_mutex_lock(&cb_mu);
    log_cb = fn;
    log_user = user;
    pthread_mutex_unlock(&cb_mu);
}

void sl__log(sl_log_level level, const char *fmt, ...) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    if ((int)level > (int)sl_log_get_level())
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&cb_mu);
    void (*cb)(sl_log_level, const char *, void *) = log_cb;
    void *user = log_user;
    pthread_mutex_unlock(&cb_mu);
    if (cb)
        cb(level, line, user);
    else
        fprintf(stderr, "sluice %s: %s\n", names[level & 3], line);
}

uint64_t sl__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
