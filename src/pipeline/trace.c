/*
 * trace.c — an optional record of what each worker did when, written as
 * Chrome / Perfetto trace-event JSON (open it in ui.perfetto.dev or
 * chrome://tracing): one row per worker thread, one span per chunk of work.
 *
 * Events go into a fixed array claimed with an atomic counter (no lock on
 * the workers' path); when it is full, later events are dropped and
 * counted. Each slot has a ready flag so the writer of the JSON, which may
 * run while workers still add events, reads only complete ones.
 */
#include "pipeline/exec.h"

#include <stdio.h>
#include <string.h>

typedef struct trace_event {
    _Atomic int ready;
    uint16_t stage, worker;
    uint32_t n;
    uint64_t ts, dur;
} trace_event;

struct sl_pipeline__trace {
    size_t cap;
    uint64_t t0;
    _Atomic size_t next;
    trace_event ev[];
};

int sl_pipeline_trace_enable(sl_pipeline *p, size_t max_events) {
    sl_exec *x = sl_pipeline__exec(p);
    if (x->running || atomic_load(&x->stats.t_start))
        return sl__error(SL_EINVAL, "trace: enable it before the first sl_pipeline_next");
    if (max_events == 0)
        max_events = 1u << 20;
    if (max_events > (1u << 26))
        return sl__error(SL_EINVAL, "trace: at most %u events", 1u << 26);
    struct sl_pipeline__trace *t =
        sl__calloc(1, sizeof *t + max_events * sizeof(trace_event));
    if (!t)
        return sl__oom("allocating the trace");
    t->cap = max_events;
    t->t0 = sl__now_ns();
    atomic_init(&t->next, 0);
    sl__free(x->env.trace);
    x->env.trace = t; /* before any worker starts: they read it unlocked */
    return SL_OK;
}

void sl_pipeline__trace_add(struct sl_pipeline__trace *t, int stage, int worker, uint64_t t0,
                            uint64_t dur, uint32_t n) {
    size_t i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
    if (i >= t->cap)
        return;
    trace_event *e = &t->ev[i];
    e->stage = (uint16_t)stage;
    e->worker = (uint16_t)worker;
    e->n = n;
    e->ts = t0 > t->t0 ? t0 - t->t0 : 0;
    e->dur = dur;
    atomic_store_explicit(&e->ready, 1, memory_order_release);
}

void sl_exec__trace_free(sl_exec *x) {
    sl__free(x->env.trace);
    x->env.trace = NULL;
}

int sl_pipeline_trace_json(const sl_pipeline *p, char *buf, size_t cap, size_t *len_out) {
    const sl_exec *x = sl_pipeline__exec(p);
    struct sl_pipeline__trace *t = x->env.trace;
    if (!t)
        return sl__error(SL_EINVAL, "trace: not enabled (sl_pipeline_trace_enable)");
    size_t n = atomic_load(&t->next);
    size_t dropped = n > t->cap ? n - t->cap : 0;
    if (n > t->cap)
        n = t->cap;
    /* Thread names carry stage names, which carry user map names: cJSON
     * writes (and escapes) them. Span events are numbers only, printed
     * directly (~140 bytes each; a cJSON tree per span would cost far more). */
    cJSON *names = cJSON_CreateArray();
    if (!names)
        return sl__oom("writing the trace");
    for (int st = 0; st < x->nstages; st++) {
        int workers = x->stage[st].workers > 64 ? 64 : x->stage[st].workers;
        for (int w = 0; w < workers; w++) {
            char label[160];
            snprintf(label, sizeof label, "%d. %.100s #%d", st + 1, x->stage[st].name, w);
            cJSON *ev = cJSON_CreateObject(), *args = cJSON_CreateObject();
            if (!ev || !args || !cJSON_AddStringToObject(ev, "ph", "M") ||
                !cJSON_AddNumberToObject(ev, "pid", 1) ||
                !cJSON_AddNumberToObject(ev, "tid", st * 1000 + w) ||
                !cJSON_AddStringToObject(ev, "name", "thread_name") ||
                !cJSON_AddStringToObject(args, "name", label)) {
                cJSON_Delete(ev);
                cJSON_Delete(args);
                cJSON_Delete(names);
                return sl__oom("writing the trace");
            }
            cJSON_AddItemToObject(ev, "args", args);
            cJSON_AddItemToArray(names, ev);
        }
    }
    char *ntext = cJSON_PrintUnformatted(names);
    cJSON_Delete(names);
    if (!ntext)
        return sl__oom("writing the trace");
    size_t nlen = strlen(ntext); /* "[...]": its inside goes into traceEvents */
    size_t need = 256 + n * 160 + nlen;
    char *s = sl__malloc(need);
    if (!s) {
        cJSON_free(ntext);
        return sl__oom("writing the trace");
    }
    size_t k = 0;
    k += (size_t)snprintf(s + k, need - k, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped\":%zu},"
                                           "\"traceEvents\":[%.*s", dropped, (int)(nlen - 2),
                          ntext + 1);
    int first = nlen <= 2;
    cJSON_free(ntext);
    for (size_t i = 0; i < n && k < need; i++) {
        const trace_event *e = &t->ev[i];
        if (!atomic_load_explicit(&((trace_event *)e)->ready, memory_order_acquire))
            continue;
        k += (size_t)snprintf(s + k, need - k,
                              "%s{\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"name\":\"%u samples\","
                              "\"ts\":%.3f,\"dur\":%.3f}",
                              first ? "" : ",", e->stage * 1000 + e->worker, e->n,
                              (double)e->ts / 1e3, (double)e->dur / 1e3);
        first = 0;
    }
    if (k < need)
        k += (size_t)snprintf(s + k, need - k, "]}\n");
    if (k >= need) {
        sl__free(s);
        return sl__error(SL_ELIMIT, "trace: output larger than expected");
    }
    sl__copy_out(s, buf, cap, len_out);
    sl__free(s);
    return SL_OK;
}
