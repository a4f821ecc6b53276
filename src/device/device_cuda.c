/*
 * device_cuda.c — the CUDA backend, with the CUDA runtime loaded at run time.
 *
 * libsluice has no link-time CUDA dependency (a test reads its DT_NEEDED):
 * libcudart is dlopen'ed on first use and the few functions used are
 * resolved into a table. The types are declared here (a stream and an event
 * are opaque pointers, an error an int), so the build needs no CUDA headers.
 * The normalize kernel lives in libsluice_cuda_kernels.so (normalize.cu,
 * built by nvcc when the toolkit is present at build time), also dlopen'ed:
 * without it the backend still copies, and normalize_on_device reports why
 * it is unavailable.
 *
 * Every call sets the backend's device on the calling thread first: the
 * runtime's current device is per thread, and batches are released (and
 * their events recorded) on whatever thread drops the last reference.
 *
 * Not run on a GPU yet. Without one, the tests run this file over a
 * stand-in runtime (host memory, injected failures; SLUICE_CUDART and
 * tests/device/fake/fake_cudart.c): that covers its calls and error paths,
 * not a GPU's behaviour.
 */
#include "device/device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cuda_err;                      /* cudaError_t; 0 is cudaSuccess */
#define CUDA_ERR_NOT_READY 600             /* cudaErrorNotReady */
#define CUDA_STREAM_NON_BLOCKING 0x01u     /* cudaStreamNonBlocking */
#define CUDA_EVENT_DISABLE_TIMING 0x02u    /* cudaEventDisableTiming */
#define CUDA_HOST_ALLOC_DEFAULT 0x00u      /* cudaHostAllocDefault */
#define CUDA_MEMCPY_H2D 1                  /* cudaMemcpyHostToDevice */

static struct {
    void *lib;
    char lib_name[160];
    char missing[384];                    /* why loading failed ("" when it did not) */
    cuda_err (*HostAlloc)(void **, size_t, unsigned);
    cuda_err (*FreeHost)(void *);
    cuda_err (*Malloc)(void **, size_t);
    cuda_err (*Free)(void *);
    cuda_err (*MemcpyAsync)(void *, const void *, size_t, int, void *);
    cuda_err (*StreamCreateWithFlags)(void **, unsigned);
    cuda_err (*StreamDestroy)(void *);
    cuda_err (*StreamSynchronize)(void *);
    cuda_err (*StreamWaitEvent)(void *, void *, unsigned);
    cuda_err (*EventCreateWithFlags)(void **, unsigned);
    cuda_err (*EventRecord)(void *, void *);
    cuda_err (*EventSynchronize)(void *);
    cuda_err (*EventQuery)(void *);
    cuda_err (*EventDestroy)(void *);
    cuda_err (*GetDeviceCount)(int *);
    cuda_err (*SetDevice)(int);
    const char *(*GetErrorString)(cuda_err);
    /* libsluice_cuda_kernels.so */
    void *klib;
    char kmissing[384];
    int (*normalize)(void *dst, const void *src, long long n, long long h, long long w, int c,
                     const float *mean, const float *std, int chw, int kind, void *stream);
    int (*crop_resize)(void *dst, const void *src, size_t pitch, const float *box,
                       const int *lim, int flip, int oh, int ow, const float *mean,
                       const float *std, int hwc, int u8, void *stream);
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

#ifndef SLUICE_CUDA_BUILD_MAJOR
#define SLUICE_CUDA_BUILD_MAJOR 0
#endif

/* Where this library (or the program it is linked into) lives, for finding
 * libsluice_cuda_kernels.so beside it. */
static void own_dir(char *out, size_t cap) {
    Dl_info info;
    out[0] = '\0';
    if (dladdr((void *)own_dir, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash && (size_t)(slash - info.dli_fname) < cap)
            snprintf(out, cap, "%.*s", (int)(slash - info.dli_fname), info.dli_fname);
    }
}

static void load_kernels(void) {
    char path[1024], dir[900];
    const char *env = sl__setting_str("SLUICE_CUDA_KERNELS");
    if (env) {
        cu.klib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!cu.klib) {
            snprintf(cu.kmissing, sizeof cu.kmissing, "SLUICE_CUDA_KERNELS=%s: %s", env,
                     dlerror());
            return;
        }
    } else {
        own_dir(dir, sizeof dir);
        if (dir[0]) {
            snprintf(path, sizeof path, "%s/libsluice_cuda_kernels.so", dir);
            cu.klib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
        if (!cu.klib)
            cu.klib = dlopen("libsluice_cuda_kernels.so", RTLD_NOW | RTLD_LOCAL);
        if (!cu.klib) {
            snprintf(cu.kmissing, sizeof cu.kmissing,
                     "libsluice_cuda_kernels.so not found (%s; build sluice with nvcc present, "
                     "or set SLUICE_CUDA_KERNELS to its path)",
                     SLUICE_CUDA_BUILD_MAJOR ? "not beside libsluice" : "this build has no nvcc");
            return;
        }
    }
    *(void **)&cu.normalize = dlsym(cu.klib, "sl_cuda_normalize");
    *(void **)&cu.crop_resize = dlsym(cu.klib, "sl_cuda_crop_resize_v2");
    if (!cu.normalize || !cu.crop_resize) {
        snprintf(cu.kmissing, sizeof cu.kmissing,
                 "libsluice_cuda_kernels.so lacks %s (a different version)",
                 !cu.normalize ? "sl_cuda_normalize" : "sl_cuda_crop_resize_v2");
        cu.normalize = NULL;
        cu.crop_resize = NULL;
    }
}

static void load_cuda(void) {
    /* SLUICE_CUDART names the runtime library to load instead (a path, or a
     * name for the loader's search): the tests load a stand-in with it
     * (tests/device/fake/fake_cudart.c). Otherwise the runtime the kernels
     * were built against first, so both share it. */
    char names[6][32];
    const char *list[6];
    int n = 0;
    if (SLUICE_CUDA_BUILD_MAJOR)
        snprintf(names[n++], sizeof names[0], "libcudart.so.%d", SLUICE_CUDA_BUILD_MAJOR);
    snprintf(names[n++], sizeof names[0], "libcudart.so.13");
    snprintf(names[n++], sizeof names[0], "libcudart.so.12");
    snprintf(names[n++], sizeof names[0], "libcudart.so.11.0");
    snprintf(names[n++], sizeof names[0], "libcudart.so");
    for (int i = 0; i < n; i++)
        list[i] = names[i];
    cu.lib = sl__dlopen_first("SLUICE_CUDART", list, n, "CUDA runtime",
                              "install the CUDA runtime, or add its directory to "
                              "LD_LIBRARY_PATH", cu.lib_name, sizeof cu.lib_name, cu.missing,
                              sizeof cu.missing);
    if (!cu.lib)
        return;
    static const sl_dlsym fns[] = {
#define FN(x) {"cuda" #x, offsetof(__typeof__(cu), x)}
        FN(HostAlloc), FN(FreeHost), FN(Malloc), FN(Free), FN(MemcpyAsync),
        FN(StreamCreateWithFlags), FN(StreamDestroy), FN(StreamSynchronize),
        FN(StreamWaitEvent), FN(EventCreateWithFlags), FN(EventRecord),
        FN(EventSynchronize), FN(EventQuery), FN(EventDestroy), FN(GetDeviceCount),
        FN(SetDevice), FN(GetErrorString),
#undef FN
    };
    if (sl__dlsym_all(&cu.lib, fns, sizeof fns / sizeof fns[0], &cu, cu.lib_name, NULL,
                      cu.missing, sizeof cu.missing))
        return;
    load_kernels();
}

static int cuda_fail(const char *what, cuda_err e) {
    return sl__error(SL_EIO, "device \"cuda\": %s: %s (cuda error %d)", what,
                     cu.GetErrorString ? cu.GetErrorString(e) : "?", e);
}

typedef struct cuda_backend {
    sl_dev_backend b;
} cuda_backend;

#define ON(b) (void)cu.SetDevice((b)->id)
#define CU_TRY(what, call)                     \
    do {                                       \
        cuda_err e_ = (call);                  \
        if (e_ != 0)                           \
            return cuda_fail((what), e_);      \
    } while (0)

/* Pinned host memory (host) or device memory, counted in sl_dev__held. */
static int c_alloc(sl_dev_backend *b, int host, size_t size, void **out) {
    ON(b);
    if (host)
        CU_TRY("cudaHostAlloc", cu.HostAlloc(out, size ? size : 64, CUDA_HOST_ALLOC_DEFAULT));
    else
        CU_TRY("cudaMalloc", cu.Malloc(out, size ? size : 64));
    sl_dev__held(SL_DEVICE_CUDA, host, 1);
    return SL_OK;
}
static void c_free(sl_dev_backend *b, int host, void *p) {
    if (!p)
        return;
    ON(b);
    (void)(host ? cu.FreeHost(p) : cu.Free(p));
    sl_dev__held(SL_DEVICE_CUDA, host, -1);
}
static int c_host_alloc(sl_dev_backend *b, size_t size, void **out) {
    return c_alloc(b, 1, size, out);
}
static void c_host_free(sl_dev_backend *b, void *p) { c_free(b, 1, p); }
static int c_dev_alloc(sl_dev_backend *b, size_t size, void **out) {
    return c_alloc(b, 0, size, out);
}
static void c_dev_free(sl_dev_backend *b, void *p) { c_free(b, 0, p); }
static int c_stream_create(sl_dev_backend *b, void **out) {
    ON(b);
    /* Non-blocking: the copy stream must not serialise with the legacy
     * default stream the training step may run on. */
    CU_TRY("cudaStreamCreateWithFlags", cu.StreamCreateWithFlags(out, CUDA_STREAM_NON_BLOCKING));
    return SL_OK;
}
static void c_stream_destroy(sl_dev_backend *b, void *s) {
    ON(b);
    (void)cu.StreamDestroy(s);
}
static int c_stream_sync(sl_dev_backend *b, void *s) {
    ON(b);
    CU_TRY("cudaStreamSynchronize", cu.StreamSynchronize(s));
    return SL_OK;
}
static int c_stream_wait(sl_dev_backend *b, void *s, void *ev) {
    ON(b);
    CU_TRY("cudaStreamWaitEvent", cu.StreamWaitEvent(s, ev, 0));
    return SL_OK;
}
static int c_copy(sl_dev_backend *b, void *dst, const void *src, size_t n, void *s) {
    ON(b);
    CU_TRY("cudaMemcpyAsync", cu.MemcpyAsync(dst, src, n, CUDA_MEMCPY_H2D, s));
    return SL_OK;
}
/* The kernels: callers ask the backend's `kernels` first; without the
 * kernel library each call refuses, saying why (norm_missing). */
static int no_kernels(const sl_dev_backend *b) {
    return sl__error(SL_EUNSUPPORTED, "device \"cuda\": %s", b->norm_missing);
}
static int c_normalize(sl_dev_backend *b, const sl_dev_norm *a, void *s) {
    if (!cu.normalize)
        return no_kernels(b);
    ON(b);
    CU_TRY("normalize kernel", cu.normalize(a->dst, a->src, a->n, a->h, a->w, (int)a->c, a->mean,
                                            a->std, a->chw,
                                            a->dtype == SL_F16 ? 1 : a->dtype == SL_BF16 ? 2 : 0, s));
    return SL_OK;
}
static int c_crop_resize(sl_dev_backend *b, const sl_dev_crop *a, void *s) {
    if (!cu.crop_resize)
        return no_kernels(b);
    ON(b);
    CU_TRY("crop_resize kernel", cu.crop_resize(a->dst, a->src, a->pitch, a->box, a->lim, a->flip,
                                                a->oh, a->ow, a->mean, a->std, a->hwc, a->u8,
                                                s));
    return SL_OK;
}
static int c_event_create(sl_dev_backend *b, void **out) {
    ON(b);
    CU_TRY("cudaEventCreateWithFlags",
           cu.EventCreateWithFlags(out, CUDA_EVENT_DISABLE_TIMING));
    return SL_OK;
}
static void c_event_destroy(sl_dev_backend *b, void *ev) {
    ON(b);
    (void)cu.EventDestroy(ev);
}
static int c_event_record(sl_dev_backend *b, void *ev, void *s) {
    ON(b);
    CU_TRY("cudaEventRecord", cu.EventRecord(ev, s));
    return SL_OK;
}
static int c_event_query(sl_dev_backend *b, void *ev) {
    ON(b);
    cuda_err e = cu.EventQuery(ev);
    if (e == 0)
        return 1;
    if (e == CUDA_ERR_NOT_READY)
        return 0;
    return cuda_fail("cudaEventQuery", e);
}
static int c_event_sync(sl_dev_backend *b, void *ev) {
    ON(b);
    CU_TRY("cudaEventSynchronize", cu.EventSynchronize(ev));
    return SL_OK;
}
static void c_destroy(sl_dev_backend *b) { sl__free(b); }

static const sl_dev_ops cuda_ops = {
    .name = "cuda",
    .device = SL_DEVICE_CUDA,
    .host_alloc = c_host_alloc,
    .host_free = c_host_free,
    .dev_alloc = c_dev_alloc,
    .dev_free = c_dev_free,
    .stream_create = c_stream_create,
    .stream_destroy = c_stream_destroy,
    .stream_sync = c_stream_sync,
    .stream_wait = c_stream_wait,
    .copy = c_copy,
    .normalize = c_normalize,
    .crop_resize = c_crop_resize,
    .event_create = c_event_create,
    .event_destroy = c_event_destroy,
    .event_record = c_event_record,
    .event_query = c_event_query,
    .event_sync = c_event_sync,
    .destroy = c_destroy,
};

int sl_dev__cuda_open(sl_dev_backend **out, int id) {
    *out = NULL;
    pthread_once(&cu_once, load_cuda);
    if (!cu.lib)
        return sl__error(SL_EUNSUPPORTED, "device \"cuda\": %s", cu.missing);
    int count = 0;
    cuda_err e = cu.GetDeviceCount(&count);
    if (e != 0)
        return sl__error(SL_EUNSUPPORTED, "device \"cuda\": no CUDA device (cudaGetDeviceCount: %s)",
                         cu.GetErrorString(e));
    if (count == 0)
        return sl__error(SL_EUNSUPPORTED, "device \"cuda\": no CUDA device (cudaGetDeviceCount: 0)");
    if (id < 0 || id >= count)
        return sl__error(SL_EINVAL, "device.id: %d, but this machine has %d CUDA device%s", id,
                         count, count == 1 ? "" : "s");
    e = cu.SetDevice(id);
    if (e != 0)
        return sl__error(SL_EUNSUPPORTED, "device \"cuda\": cudaSetDevice(%d): %s", id,
                         cu.GetErrorString(e));
    cuda_backend *c = sl__calloc(1, sizeof *c);
    if (!c)
        return sl__oom("opening the CUDA device");
    sl_dev_backend *b = &c->b;
    sl_dev__backend_init(b, &cuda_ops, id);
    b->kernels = cu.normalize && cu.crop_resize;
    snprintf(b->norm_missing, sizeof b->norm_missing, "%s", cu.kmissing);
    *out = b;
    return SL_OK;
}
