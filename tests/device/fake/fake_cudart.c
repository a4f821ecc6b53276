/*
 * fake_cudart.c — a CUDA runtime stand-in for tests without a GPU, built as
 * libsluice_fake_cudart.so in the test build (never installed). device_cuda.c
 * loads it instead of libcudart when SLUICE_CUDART names it, so the CUDA
 * backend, the ring and the upload path run in the test command.
 *
 * What it models: pinned and device memory are heap blocks, registered so
 * that every later use is checked (a copy must land inside a live device
 * block; a destroyed stream or event used again, or a block freed twice, is
 * counted as misuse and answered with cudaErrorInvalidValue). Work on a
 * stream runs at once, in the caller (a legal schedule of CUDA's stream
 * semantics); an event can be told to answer "not ready" to its first
 * queries so the callers' waiting paths run. Failures are injected per entry
 * point (fake_cudart.h). It says nothing about a real GPU.
 */
#include "fake_cudart.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int cuda_err;

enum { K_HOST, K_DEV, K_STREAM, K_EVENT, NKIND };
static const char *const kind_names[NKIND] = {"host", "device", "stream", "event"};

/* The entry points, in device_cuda.c's order. */
enum {
    F_HostAlloc, F_FreeHost, F_Malloc, F_Free, F_MemcpyAsync, F_StreamCreateWithFlags,
    F_StreamDestroy, F_StreamSynchronize, F_StreamWaitEvent, F_EventCreateWithFlags,
    F_EventRecord, F_EventSynchronize, F_EventQuery, F_EventDestroy, F_GetDeviceCount,
    F_SetDevice, F_GetErrorString, NFN
};
static const char *const fn_names[NFN] = {
    "cudaHostAlloc", "cudaFreeHost", "cudaMalloc", "cudaFree", "cudaMemcpyAsync",
    "cudaStreamCreateWithFlags", "cudaStreamDestroy", "cudaStreamSynchronize",
    "cudaStreamWaitEvent", "cudaEventCreateWithFlags", "cudaEventRecord",
    "cudaEventSynchronize", "cudaEventQuery", "cudaEventDestroy", "cudaGetDeviceCount",
    "cudaSetDevice", "cudaGetErrorString"};

typedef struct {
    void *p;
    size_t size;
    int kind;
    int pending;            /* events: "not ready" answers left */
} object;

static struct {
    pthread_mutex_t mu;
    int inited;
    object *obj;
    size_t nobj, cap;
    long live[NKIND];
    long calls[NFN];
    long fail_at[NFN];      /* fail when calls reaches this (0: never) */
    int fail_err[NFN], fail_sticky[NFN];
    long failed;
    int devices;
    int not_ready;
    long misuse;
    char last_misuse[256];
    unsigned long long h2d_bytes;  /* copied by cudaMemcpyAsync */
    int unloaded;                  /* SLUICE_FAKE_CUDA_UNLOAD_AT_EXIT: the runtime went away */
    long late;                     /* calls after that */
} F = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* SLUICE_FAKE_CUDA_UNLOAD_AT_EXIT=1: the runtime tears itself down in an
 * atexit handler, as libcudart does. Every call after it fails with
 * cudaErrorCudartUnloading, frees nothing (the process is ending) and is
 * reported on stderr ("fake cudart: cudaFree after the runtime unloaded"),
 * so a test sees whether its program still calls into CUDA at exit. */
static void unload_at_exit(void) {
    pthread_mutex_lock(&F.mu);
    F.unloaded = 1;
    pthread_mutex_unlock(&F.mu);
}

static int fn_index(const char *name) {
    for (int i = 0; i < NFN; i++)
        if (name && !strcmp(name, fn_names[i]))
            return i;
    return -1;
}

static void set_fail(int f, long nth, int err, int sticky) {
    F.fail_at[f] = nth > 0 ? F.calls[f] + nth : 0;
    F.fail_err[f] = err;
    F.fail_sticky[f] = sticky;
}

/* With F.mu held. */
static void init_locked(void) {
    if (F.inited)
        return;
    F.inited = 1;
    F.devices = 1;
    const char *d = getenv("SLUICE_FAKE_CUDA_DEVICES");
    if (d && *d)
        F.devices = atoi(d);
    const char *ua = getenv("SLUICE_FAKE_CUDA_UNLOAD_AT_EXIT");
    if (ua && *ua == '1')
        atexit(unload_at_exit);
    const char *nr = getenv("SLUICE_FAKE_CUDA_NOT_READY");
    if (nr && *nr)
        F.not_ready = atoi(nr);
    const char *spec = getenv("SLUICE_FAKE_CUDA_FAIL");
    if (spec && *spec) {
        char name[64] = "";
        long nth = 0;
        int err = 0;
        char sticky[16] = "";
        if (sscanf(spec, "%63[^:]:%ld:%d:%15s", name, &nth, &err, sticky) >= 3 &&
            fn_index(name) >= 0)
            set_fail(fn_index(name), nth, err, !strcmp(sticky, "sticky"));
        else
            fprintf(stderr, "fake cudart: SLUICE_FAKE_CUDA_FAIL=%s: expected "
                            "cudaName:N:error[:sticky]\n", spec);
    }
}

/* Count a call of f; the injected error if this call is to fail, else 0. */
static cuda_err enter(int f) {
    pthread_mutex_lock(&F.mu);
    init_locked();
    long n = ++F.calls[f];
    cuda_err e = 0;
    if (F.unloaded) {
        if (F.late++ < 8)
            fprintf(stderr, "fake cudart: %s after the runtime unloaded\n", fn_names[f]);
        pthread_mutex_unlock(&F.mu);
        return FAKE_CUDA_ERR_UNLOADING;
    }
    if (F.fail_at[f] && (n == F.fail_at[f] || (F.fail_sticky[f] && n > F.fail_at[f]))) {
        e = F.fail_err[f];
        F.failed++;
    }
    pthread_mutex_unlock(&F.mu);
    return e;
}

static void misuse(const char *fmt, const char *what, const void *p) {
    F.misuse++;
    snprintf(F.last_misuse, sizeof F.last_misuse, fmt, what, p);
}

/* With F.mu held: the index of the object at p of kind k, or -1. */
static long find(const void *p, int k) {
    for (size_t i = 0; i < F.nobj; i++)
        if (F.obj[i].p == p && F.obj[i].kind == k)
            return (long)i;
    return -1;
}

/* With F.mu held: the device block that holds [p, p+n), or -1. */
static long find_range(const void *p, size_t n, int k) {
    uintptr_t a = (uintptr_t)p;
    for (size_t i = 0; i < F.nobj; i++) {
        uintptr_t b = (uintptr_t)F.obj[i].p;
        if (F.obj[i].kind == k && a >= b && a - b <= F.obj[i].size && n <= F.obj[i].size - (a - b))
            return (long)i;
    }
    return -1;
}

static cuda_err add(void *p, size_t size, int k) {
    pthread_mutex_lock(&F.mu);
    if (F.nobj == F.cap) {
        size_t cap = F.cap ? F.cap * 2 : 64;
        object *o = realloc(F.obj, cap * sizeof *o);
        if (!o) {
            pthread_mutex_unlock(&F.mu);
            return FAKE_CUDA_ERR_MEMORY_ALLOCATION;
        }
        F.obj = o;
        F.cap = cap;
    }
    F.obj[F.nobj++] = (object){p, size, k, 0};
    F.live[k]++;
    pthread_mutex_unlock(&F.mu);
    return 0;
}

/* Unregister p (kind k); 0, or cudaErrorInvalidValue when it is not live. */
static cuda_err drop(void *p, int k, const char *fn) {
    pthread_mutex_lock(&F.mu);
    long i = find(p, k);
    if (i < 0) {
        misuse("%s(%p): not a live object", fn, p);
        pthread_mutex_unlock(&F.mu);
        return FAKE_CUDA_ERR_INVALID_VALUE;
    }
    F.obj[i] = F.obj[--F.nobj];
    F.live[k]--;
    pthread_mutex_unlock(&F.mu);
    return 0;
}

/* With F.mu held: a stream argument is NULL (the default stream) or live. */
static int stream_ok(void *s, const char *fn) {
    if (s == NULL || find(s, K_STREAM) >= 0)
        return 1;
    misuse("%s: stream %p is not live", fn, s);
    return 0;
}

static cuda_err new_object(void **out, size_t size, int k, int zero) {
    void *p = zero ? calloc(1, size) : malloc(size);
    if (!p)
        return FAKE_CUDA_ERR_MEMORY_ALLOCATION;
    cuda_err e = add(p, size, k);
    if (e) {
        free(p);
        return e;
    }
    *out = p;
    return 0;
}

/* ---- the entry points ------------------------------------------------------------- */

EXPORT cuda_err cudaHostAlloc(void **out, size_t size, unsigned flags) {
    cuda_err e = enter(F_HostAlloc);
    if (e)
        return e;
    if (!out || flags > 0x0f)
        return FAKE_CUDA_ERR_INVALID_VALUE;
    return new_object(out, size ? size : 1, K_HOST, 0);
}

EXPORT cuda_err cudaFreeHost(void *p) {
    cuda_err e = enter(F_FreeHost);
    if (e)
        return e;
    if (!p)
        return 0;
    e = drop(p, K_HOST, "cudaFreeHost");
    if (!e)
        free(p);
    return e;
}

EXPORT cuda_err cudaMalloc(void **out, size_t size) {
    cuda_err e = enter(F_Malloc);
    if (e)
        return e;
    if (!out)
        return FAKE_CUDA_ERR_INVALID_VALUE;
    return new_object(out, size ? size : 1, K_DEV, 0);
}

EXPORT cuda_err cudaFree(void *p) {
    cuda_err e = enter(F_Free);
    if (e)
        return e;
    if (!p)
        return 0;
    e = drop(p, K_DEV, "cudaFree");
    if (!e)
        free(p);
    return e;
}

EXPORT cuda_err cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) {
    cuda_err e = enter(F_MemcpyAsync);
    if (e)
        return e;
    if (kind != 1) /* cudaMemcpyHostToDevice: the only kind sluice uses */
        return FAKE_CUDA_ERR_INVALID_VALUE;
    pthread_mutex_lock(&F.mu);
    int ok = stream_ok(stream, "cudaMemcpyAsync");
    if (ok && find_range(dst, n, K_DEV) < 0) {
        misuse("%s: destination %p is not inside a live device block", "cudaMemcpyAsync", dst);
        ok = 0;
    }
    if (ok)
        F.h2d_bytes += n;
    pthread_mutex_unlock(&F.mu);
    if (!ok)
        return FAKE_CUDA_ERR_INVALID_VALUE;
    memcpy(dst, src, n);
    return 0;
}

/* Not one of the entry points sluice resolves: the tests' own read-back
 * (tests/device/device_util.h, du_cuda_memcpy), device to host only, which
 * waits for every stream as the real one does for the legacy default
 * stream (the stand-in's streams have no work pending). */
EXPORT cuda_err cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    if (kind != 2) /* cudaMemcpyDeviceToHost */
        return FAKE_CUDA_ERR_INVALID_VALUE;
    pthread_mutex_lock(&F.mu);
    int ok = find_range(src, n, K_DEV) >= 0;
    if (!ok)
        misuse("%s: source %p is not inside a live device block", "cudaMemcpy", src);
    pthread_mutex_unlock(&F.mu);
    if (!ok)
        return FAKE_CUDA_ERR_INVALID_VALUE;
    memcpy(dst, src, n);
    return 0;
}

EXPORT cuda_err cudaStreamCreateWithFlags(void **out, unsigned flags) {
    cuda_err e = enter(F_StreamCreateWithFlags);
    if (e)
        return e;
    if (!out || flags > 1)
        return FAKE_CUDA_ERR_INVALID_VALUE;
    return new_object(out, 1, K_STREAM, 1);
}

EXPORT cuda_err cudaStreamDestroy(void *s) {
    cuda_err e = enter(F_StreamDestroy);
    if (e)
        return e;
    e = drop(s, K_STREAM, "cudaStreamDestroy");
    if (!e)
        free(s);
    return e;
}

/* Work ran at once, so a stream is always done; its events become ready. */
EXPORT cuda_err cudaStreamSynchronize(void *s) {
    cuda_err e = enter(F_StreamSynchronize);
    if (e)
        return e;
    pthread_mutex_lock(&F.mu);
    int ok = stream_ok(s, "cudaStreamSynchronize");
    if (ok)
        for (size_t i = 0; i < F.nobj; i++)
            if (F.obj[i].kind == K_EVENT)
                F.obj[i].pending = 0;
    pthread_mutex_unlock(&F.mu);
    return ok ? 0 : FAKE_CUDA_ERR_INVALID_VALUE;
}

EXPORT cuda_err cudaStreamWaitEvent(void *s, void *ev, unsigned flags) {
    cuda_err e = enter(F_StreamWaitEvent);
    if (e)
        return e;
    pthread_mutex_lock(&F.mu);
    int ok = flags == 0 && stream_ok(s, "cudaStreamWaitEvent");
    if (ok && find(ev, K_EVENT) < 0) {
        misuse("%s: event %p is not live", "cudaStreamWaitEvent", ev);
        ok = 0;
    }
    pthread_mutex_unlock(&F.mu);
    return ok ? 0 : FAKE_CUDA_ERR_INVALID_VALUE;
}

EXPORT cuda_err cudaEventCreateWithFlags(void **out, unsigned flags) {
    cuda_err e = enter(F_EventCreateWithFlags);
    if (e)
        return e;
    if (!out || flags > 0x0f)
        return FAKE_CUDA_ERR_INVALID_VALUE;
    return new_object(out, 1, K_EVENT, 1);
}

EXPORT cuda_err cudaEventRecord(void *ev, void *s) {
    cuda_err e = enter(F_EventRecord);
    if (e)
        return e;
    pthread_mutex_lock(&F.mu);
    long i = stream_ok(s, "cudaEventRecord") ? find(ev, K_EVENT) : -2;
    if (i == -1)
        misuse("%s: event %p is not live", "cudaEventRecord", ev);
    else if (i >= 0)
        F.obj[i].pending = F.not_ready;
    pthread_mutex_unlock(&F.mu);
    return i >= 0 ? 0 : FAKE_CUDA_ERR_INVALID_VALUE;
}

EXPORT cuda_err cudaEventSynchronize(void *ev) {
    cuda_err e = enter(F_EventSynchronize);
    if (e)
        return e;
    pthread_mutex_lock(&F.mu);
    long i = find(ev, K_EVENT);
    if (i < 0)
        misuse("%s: event %p is not live", "cudaEventSynchronize", ev);
    else
        F.obj[i].pending = 0;
    pthread_mutex_unlock(&F.mu);
    return i >= 0 ? 0 : FAKE_CUDA_ERR_INVALID_VALUE;
}

EXPORT cuda_err cudaEventQuery(void *ev) {
    cuda_err e = enter(F_EventQuery);
    if (e)
        return e;
    pthread_mutex_lock(&F.mu);
    long i = find(ev, K_EVENT);
    if (i < 0)
        misuse("%s: event %p is not live", "cudaEventQuery", ev);
    else if (F.obj[i].pending > 0) {
        F.obj[i].pending--;
        e = FAKE_CUDA_ERR_NOT_READY;
    }
    pthread_mutex_unlock(&F.mu);
    return i < 0 ? FAKE_CUDA_ERR_INVALID_VALUE : e;
}

EXPORT cuda_err cudaEventDestroy(void *ev) {
    cuda_err e = enter(F_EventDestroy);
    if (e)
        return e;
    e = drop(ev, K_EVENT, "cudaEventDestroy");
    if (!e)
        free(ev);
    return e;
}

EXPORT cuda_err cudaGetDeviceCount(int *count) {
    cuda_err e = enter(F_GetDeviceCount);
    if (e)
        return e;
    pthread_mutex_lock(&F.mu);
    int n = F.devices;
    pthread_mutex_unlock(&F.mu);
    if (n <= 0)
        return FAKE_CUDA_ERR_NO_DEVICE; /* what the runtime says without a device */
    *count = n;
    return 0;
}

EXPORT cuda_err cudaSetDevice(int id) {
    cuda_err e = enter(F_SetDevice);
    if (e)
        return e;
    pthread_mutex_lock(&F.mu);
    int n = F.devices;
    pthread_mutex_unlock(&F.mu);
    return id >= 0 && id < n ? 0 : 101; /* cudaErrorInvalidDevice */
}

EXPORT const char *cudaGetErrorString(cuda_err e) {
    (void)enter(F_GetErrorString); /* counted; it cannot fail */
    switch (e) {
    case 0: return "no error";
    case FAKE_CUDA_ERR_INVALID_VALUE: return "invalid argument";
    case FAKE_CUDA_ERR_MEMORY_ALLOCATION: return "out of memory";
    case FAKE_CUDA_ERR_NO_DEVICE: return "no CUDA-capable device is detected";
    case 101: return "invalid device ordinal";
    case FAKE_CUDA_ERR_NOT_READY: return "device not ready";
    case FAKE_CUDA_ERR_LAUNCH_FAILURE: return "unspecified launch failure";
    case FAKE_CUDA_ERR_UNLOADING: return "driver shutting down";
    default: return "unknown error";
    }
}

/* ---- control (fake_cudart.h) -------------------------------------------------------- */

EXPORT long fake_cuda_live(const char *kind) {
    for (int k = 0; k < NKIND; k++)
        if (kind && !strcmp(kind, kind_names[k])) {
            pthread_mutex_lock(&F.mu);
            long n = F.live[k];
            pthread_mutex_unlock(&F.mu);
            return n;
        }
    return -1;
}

EXPORT unsigned long long fake_cuda_h2d_bytes(void) {
    pthread_mutex_lock(&F.mu);
    unsigned long long n = F.h2d_bytes;
    pthread_mutex_unlock(&F.mu);
    return n;
}

EXPORT long fake_cuda_calls(const char *fn) {
    int f = fn_index(fn);
    if (f < 0)
        return -1;
    pthread_mutex_lock(&F.mu);
    long n = F.calls[f];
    pthread_mutex_unlock(&F.mu);
    return n;
}

EXPORT int fake_cuda_fail(const char *fn, long nth, int err, int sticky) {
    int f = fn_index(fn);
    if (f < 0)
        return -1;
    pthread_mutex_lock(&F.mu);
    init_locked();
    set_fail(f, nth, err, sticky);
    pthread_mutex_unlock(&F.mu);
    return 0;
}

EXPORT long fake_cuda_failed(void) {
    pthread_mutex_lock(&F.mu);
    long n = F.failed;
    pthread_mutex_unlock(&F.mu);
    return n;
}

EXPORT void fake_cuda_not_ready(int k) {
    pthread_mutex_lock(&F.mu);
    init_locked();
    F.not_ready = k;
    pthread_mutex_unlock(&F.mu);
}

EXPORT long fake_cuda_misuse(const char **last) {
    pthread_mutex_lock(&F.mu);
    long n = F.misuse;
    if (last)
        *last = F.last_misuse;
    pthread_mutex_unlock(&F.mu);
    return n;
}

/* Blocks still registered at unload are leaks of the caller's: freed here so
 * LeakSanitizer reports what matters, after tests read fake_cuda_live. */
__attribute__((destructor)) static void fake_unload(void) {
    for (size_t i = 0; i < F.nobj; i++)
        free(F.obj[i].p);
    free(F.obj);
    F.obj = NULL;
    F.nobj = F.cap = 0;
}
