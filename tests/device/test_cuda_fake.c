/*
 * test_cuda_fake.c — the CUDA backend (device_cuda.c), the ring and the
 * upload path over a stand-in CUDA runtime (tests/device/fake/fake_cudart.c,
 * loaded through SLUICE_CUDART): batches reach "device" memory with the
 * CPU pipeline's values, nothing leaks, and every failing entry point (at
 * open, at the first batch, mid-epoch) ends the pipeline with an error that
 * names the call, promptly and without leaking pinned or device memory,
 * streams or events. The stand-in runs the work at once on the host: none
 * of this says anything about a GPU.
 */
#include "test.h"
#include "device_util.h"
#include "device/device.h"
#include "ops/ops.h"
#include "ops/op.h"
#include "device/fake/fake_cudart.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

static struct {
    void *lib;
    fake_cuda_live_fn live;
    fake_cuda_calls_fn calls;
    fake_cuda_fail_fn fail;
    fake_cuda_failed_fn failed;
    fake_cuda_not_ready_fn not_ready;
    fake_cuda_misuse_fn misuse;
    fake_cuda_h2d_bytes_fn h2d_bytes;
} fk;

/* Point the CUDA backend at the stand-in (each case runs in its own
 * process, before the backend's first load) and bind its controls. */
static void use_fake(void) {
    ASSERT_EQ(setenv("SLUICE_CUDART", SLUICE_FAKE_CUDART, 1), 0);
    /* no kernels: normalize_on_device is refused (checked below) */
    char nok[600];
    sl_test_path(nok, sizeof nok, "no-kernels.so");
    ASSERT_EQ(setenv("SLUICE_CUDA_KERNELS", nok, 1), 0);
    fk.lib = dlopen(SLUICE_FAKE_CUDART, RTLD_NOW | RTLD_LOCAL);
    if (!fk.lib)
        sl_test_fail(__FILE__, __LINE__, "%s: %s", SLUICE_FAKE_CUDART, dlerror());
    *(void **)&fk.live = dlsym(fk.lib, "fake_cuda_live");
    *(void **)&fk.calls = dlsym(fk.lib, "fake_cuda_calls");
    *(void **)&fk.fail = dlsym(fk.lib, "fake_cuda_fail");
    *(void **)&fk.failed = dlsym(fk.lib, "fake_cuda_failed");
    *(void **)&fk.not_ready = dlsym(fk.lib, "fake_cuda_not_ready");
    *(void **)&fk.misuse = dlsym(fk.lib, "fake_cuda_misuse");
    *(void **)&fk.h2d_bytes = dlsym(fk.lib, "fake_cuda_h2d_bytes");
    ASSERT(fk.live && fk.calls && fk.fail && fk.failed && fk.not_ready && fk.misuse &&
           fk.h2d_bytes);
}

/* Nothing the runtime handed out is still alive, and nothing was misused. */
static void nothing_left(void) {
    const char *last = NULL;
    long bad = fk.misuse(&last);
    if (bad)
        sl_test_fail(__FILE__, __LINE__, "%ld misuses of the runtime, last: %s", bad, last);
    ASSERT_EQ(fk.live("host"), 0);
    ASSERT_EQ(fk.live("device"), 0);
    ASSERT_EQ(fk.live("stream"), 0);
    ASSERT_EQ(fk.live("event"), 0);
}

enum { N = 40, H = 6, W = 5, C = 3, BATCH = 4, NBATCH = N / BATCH };

/* N RGB images H x W from the index and a label, in batches of 4. */
static sl_spec *spec_with(const char *device) {
    char json[512];
    snprintf(json, sizeof json,
             "{\"source\": {\"path\": \"unused\"}, \"ops\": [{\"op\": \"batch\", \"size\": %d}]%s}",
             BATCH, device);
    return du_image_spec(json, N, H, W, C, 7, 1000);
}

static sl_pipeline *open_pipeline(const char *device) {
    sl_spec *spec = spec_with(device);
    sl_pipeline *p;
    if (sl_pipeline_create(&p, spec) != SL_OK)
        sl_test_fail(__FILE__, __LINE__, "create: %s", sl_errmsg());
    sl_spec_free(spec);
    return p;
}

/* The bytes of every column of every batch, concatenated. */
static size_t drain(sl_pipeline *p, uint8_t *out, size_t cap, int want) {
    size_t n = 0;
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        for (int c = 0; c < sl_batch_ncols(b); c++) {
            const sl_tensor *t = sl_batch_column(b, c);
            ASSERT_EQ(t->device, want);
            ASSERT(n + t->nbytes <= cap);
            /* the stand-in's device memory is host memory */
            memcpy(out + n, t->data, t->nbytes);
            n += t->nbytes;
        }
        sl_batch_release(b);
    }
    if (rc != SL_END)
        sl_test_fail(__FILE__, __LINE__, "next: %s", sl_errmsg());
    return n;
}

static void cuda_equals_cpu(int not_ready) {
    static uint8_t a[1 << 16], b[1 << 16];
    use_fake();
    fk.not_ready(not_ready);
    ASSERT_OK(sl_device_available(SL_DEVICE_CUDA, 0));
    sl_pipeline *p = open_pipeline("");
    size_t na = drain(p, a, sizeof a, SL_DEVICE_CPU);
    sl_pipeline_free(p);
    p = open_pipeline(", \"device\": {\"kind\": \"cuda\", \"id\": 0}");
    size_t nb = drain(p, b, sizeof b, SL_DEVICE_CUDA);
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    /* written in cudaHostAlloc'ed batch buffers, copied from there */
    ASSERT(fk.calls("cudaHostAlloc") > 0);
    ASSERT_U64_EQ(st.h2d_staged_bytes, 0);
    ASSERT(st.h2d_bytes >= na);
    ASSERT(fk.calls("cudaMemcpyAsync") >= 2 * NBATCH);
    if (not_ready)
        ASSERT(fk.calls("cudaEventQuery") > 0);
    sl_pipeline_free(p);
    ASSERT_EQ(na, nb);
    ASSERT(na == (size_t)N * (H * W * C + 8));
    ASSERT_EQ(memcmp(a, b, na), 0);
    nothing_left();
}

SL_TEST(cuda_fake__batches_equal_cpu_nothing_leaks) { cuda_equals_cpu(0); }

/* Events answer "not ready" to their first queries: the ring's waits run. */
SL_TEST(cuda_fake__slow_events_same_batches) { cuda_equals_cpu(3); }

/* The hand-off's H2D path, by the stand-in's counts: each batch crosses as
 * one cudaMemcpyAsync per column straight from the pinned batch buffers the
 * stages wrote (nothing staged on the consumer thread, no host memcpy), with
 * no synchronisation per batch, and neither pinned nor device memory is
 * allocated per batch once the first epoch made the pool and the ring. */
SL_TEST(cuda_fake__h2d_one_copy_per_column_straight_from_pinned) {
    use_fake();
    sl_spec *spec = du_image_spec("{\"source\": {\"path\": \"unused\"}, \"ops\": [{\"op\": "
                                  "\"batch\", \"size\": 4}], \"device\": \"cuda\"}",
                                  N, H, W, C, 7, 1000);
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    long host_allocs = 0, dev_allocs = 0;
    for (int epoch = 0; epoch < 3; epoch++) {
        ASSERT_OK(sl_pipeline_set_epoch(p, (uint64_t)epoch));
        long copies0 = fk.calls("cudaMemcpyAsync");
        unsigned long long bytes0 = fk.h2d_bytes();
        long syncs0 = fk.calls("cudaEventSynchronize") + fk.calls("cudaStreamSynchronize");
        int nb = 0;
        sl_batch *b;
        int rc;
        while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
            ASSERT_EQ(sl_batch_column(b, 0)->device, SL_DEVICE_CUDA);
            sl_batch_release(b);
            nb++;
        }
        ASSERT_EQ(rc, SL_END);
        ASSERT_EQ(nb, NBATCH);
        /* two columns (image, label): two copies a batch, of their bytes */
        ASSERT_EQ(fk.calls("cudaMemcpyAsync") - copies0, 2L * NBATCH);
        ASSERT(fk.h2d_bytes() - bytes0 == (unsigned long long)N * (H * W * C + 8));
        ASSERT_EQ(fk.calls("cudaEventSynchronize") + fk.calls("cudaStreamSynchronize") - syncs0,
                  0L);
        if (epoch == 0) {
            host_allocs = fk.calls("cudaHostAlloc");
            dev_allocs = fk.calls("cudaMalloc");
            ASSERT(host_allocs > 0 && dev_allocs > 0);
        } else {
            ASSERT_EQ(fk.calls("cudaHostAlloc"), host_allocs);
            ASSERT_EQ(fk.calls("cudaMalloc"), dev_allocs);
        }
    }
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    ASSERT_U64_EQ(st.h2d_staged_bytes, 0);
    /* what sluice holds, by its own count: the stand-in's live blocks */
    int64_t dev = -1, pinned = -1;
    ASSERT_OK(sl_device_held(SL_DEVICE_CUDA, &dev, &pinned));
    ASSERT(dev > 0 && pinned > 0);
    ASSERT_EQ(dev, fk.live("device"));
    ASSERT_EQ(pinned, fk.live("host"));
    sl_pipeline_free(p);
    ASSERT_OK(sl_device_held(SL_DEVICE_CUDA, &dev, &pinned));
    ASSERT_EQ(dev, 0);
    ASSERT_EQ(pinned, 0);
    nothing_left();
}

/* A consumer holding batches past the pipeline's end: the ring lives until
 * the last is released (invariant 4), then frees everything. */
SL_TEST(cuda_fake__batches_outlive_the_pipeline) {
    use_fake();
    sl_pipeline *p = open_pipeline(", \"device\": \"cuda\"");
    sl_batch *held[3];
    for (int i = 0; i < 3; i++)
        ASSERT_OK(sl_pipeline_next(p, &held[i]));
    sl_pipeline_free(p);
    ASSERT(fk.live("device") > 0);
    for (int i = 0; i < 3; i++) {
        const sl_tensor *t = sl_batch_column(held[i], sl_batch_find(held[i], "label"));
        ASSERT_EQ(((const int64_t *)t->data)[0], 1000 + i * BATCH);
        sl_batch_release(held[i]);
    }
    nothing_left();
}

SL_TEST(cuda_fake__open_errors_name_the_cause) {
    char missing[600];
    sl_test_path(missing, sizeof missing, "libcudart-none.so");
    ASSERT_EQ(setenv("SLUICE_CUDART", missing, 1), 0);
    ASSERT_EQ(sl_device_available(SL_DEVICE_CUDA, 0), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "SLUICE_CUDART=");
    ASSERT_CONTAINS(sl_errmsg(), "libcudart-none.so could not be loaded");
}

SL_TEST(cuda_fake__no_device_and_bad_id) {
    ASSERT_EQ(setenv("SLUICE_FAKE_CUDA_DEVICES", "0", 1), 0);
    use_fake();
    ASSERT_EQ(sl_device_available(SL_DEVICE_CUDA, 0), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "no CUDA device (cudaGetDeviceCount: no CUDA-capable device");
    ASSERT_EQ(setenv("SLUICE_FAKE_CUDA_DEVICES", "2", 1), 0);
}

SL_TEST(cuda_fake__device_id_out_of_range) {
    ASSERT_EQ(setenv("SLUICE_FAKE_CUDA_DEVICES", "2", 1), 0);
    use_fake();
    ASSERT_OK(sl_device_available(SL_DEVICE_CUDA, 1));
    ASSERT_EQ(sl_device_available(SL_DEVICE_CUDA, 2), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "device.id: 2, but this machine has 2 CUDA devices");
    nothing_left();
}

SL_TEST(cuda_fake__normalize_on_device_without_kernels) {
    use_fake();
    sl_spec *spec;
    ASSERT_OK(sl_spec_from_json(&spec, "{\"source\": {\"path\": \"x\"}, \"ops\": [{\"op\": "
                                       "\"normalize\"}], \"device\": {\"kind\": \"cuda\", "
                                       "\"normalize_on_device\": true}}"));
    sl_pipeline *p = NULL;
    ASSERT_EQ(sl_pipeline_create(&p, spec), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "device.normalize_on_device: SLUICE_CUDA_KERNELS=");
    sl_spec_free(spec);
    nothing_left();
}

/* Without the kernel library, the backend has neither kernel, and says why;
 * a call of either refuses with that reason. */
SL_TEST(cuda_fake__no_kernels_no_crop_resize) {
    use_fake();
    sl_dev_backend *be;
    ASSERT_OK(sl_dev__cuda_open(&be, 0));
    ASSERT_EQ(be->kernels, 0);
    ASSERT_CONTAINS(be->norm_missing, "SLUICE_CUDA_KERNELS=");
    sl_dev_norm na = {0};
    ASSERT_EQ(be->ops->normalize(be, &na, NULL), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "SLUICE_CUDA_KERNELS=");
    sl_dev_crop ca = {0};
    ASSERT_EQ(be->ops->crop_resize(be, &ca, NULL), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "SLUICE_CUDA_KERNELS=");
    sl_dev__backend_release(be);
    nothing_left();
}

/* Run the pipeline on the stand-in with `fn` failing: its `nth` call from
 * the point after `after` batches were taken (sticky: and every later
 * one). The epoch must end with an error naming `needle`, the batches
 * taken before stay readable, and nothing is left once all is freed. */
static void fails_cleanly(const char *fn, int after, long nth, int err, int sticky,
                          int keep, const char *needle) {
    use_fake();
    sl_pipeline *p = open_pipeline(", \"device\": \"cuda\"");
    sl_batch *held[NBATCH];
    int nheld = 0, taken = 0, rc = SL_OK;
    if (after == 0)
        ASSERT_OK(fk.fail(fn, nth, err, sticky));
    for (int i = 0; i < NBATCH + 1; i++) {
        sl_batch *b;
        rc = sl_pipeline_next(p, &b);
        if (rc != SL_OK)
            break;
        if (keep)
            held[nheld++] = b;
        else
            sl_batch_release(b);
        if (++taken == after)
            ASSERT_OK(fk.fail(fn, nth, err, sticky));
    }
    if (rc >= 0)
        sl_test_fail(__FILE__, __LINE__, "%s failing: the epoch ended with %d after %d batches",
                     fn, rc, taken);
    ASSERT(fk.failed() > 0);
    ASSERT_CONTAINS(sl_errmsg(), needle);
    ASSERT(taken >= after && taken < NBATCH);
    /* the error stays: the pipeline does not go on as if nothing happened */
    sl_batch *again = NULL;
    int rc2 = sl_pipeline_next(p, &again);
    ASSERT(rc2 < 0 || rc2 == SL_END);
    ASSERT(again == NULL);
    ASSERT(fk.fail(fn, 0, 0, 0) == 0); /* teardown may call it again: let it */
    sl_pipeline_free(p);
    for (int i = 0; i < nheld; i++) {
        const sl_tensor *t = sl_batch_column(held[i], sl_batch_find(held[i], "label"));
        ASSERT_EQ(t->device, SL_DEVICE_CUDA);
        ASSERT_EQ(((const int64_t *)t->data)[BATCH - 1], 1000 + i * BATCH + BATCH - 1);
        sl_batch_release(held[i]);
    }
    nothing_left();
}

SL_TEST(cuda_fake__device_alloc_fails_first_batch) {
    fails_cleanly("cudaMalloc", 0, 1, FAKE_CUDA_ERR_MEMORY_ALLOCATION, 0, 1,
                  "device \"cuda\": cudaMalloc: out of memory (cuda error 2)");
}

SL_TEST(cuda_fake__device_alloc_fails_mid_epoch) {
    /* 3 batches held: the ring must grow, and its next slot cannot */
    fails_cleanly("cudaMalloc", 3, 1, FAKE_CUDA_ERR_MEMORY_ALLOCATION, 1, 1, "cudaMalloc: out of memory");
}

SL_TEST(cuda_fake__pinned_alloc_fails) {
    fails_cleanly("cudaHostAlloc", 0, 1, FAKE_CUDA_ERR_MEMORY_ALLOCATION, 1, 1,
                  "filling a buffer pool: device \"cuda\": cudaHostAlloc: out of memory");
}

SL_TEST(cuda_fake__copy_fails_mid_epoch) {
    fails_cleanly("cudaMemcpyAsync", 2, 1, FAKE_CUDA_ERR_LAUNCH_FAILURE, 0, 1,
                  "device \"cuda\": cudaMemcpyAsync: unspecified launch failure (cuda error 719)");
}

SL_TEST(cuda_fake__copy_stream_create_fails) {
    fails_cleanly("cudaStreamCreateWithFlags", 0, 1, FAKE_CUDA_ERR_MEMORY_ALLOCATION, 0, 1,
                  "cudaStreamCreateWithFlags: out of memory");
}

SL_TEST(cuda_fake__event_create_fails) {
    /* the second event of the first slot */
    fails_cleanly("cudaEventCreateWithFlags", 0, 2, FAKE_CUDA_ERR_MEMORY_ALLOCATION, 0, 1,
                  "cudaEventCreateWithFlags: out of memory");
}

SL_TEST(cuda_fake__event_record_fails_mid_epoch) {
    fails_cleanly("cudaEventRecord", 2, 1, FAKE_CUDA_ERR_LAUNCH_FAILURE, 0, 1,
                  "cudaEventRecord: unspecified launch failure");
}

SL_TEST(cuda_fake__stream_wait_fails_mid_epoch) {
    fails_cleanly("cudaStreamWaitEvent", 2, 1, FAKE_CUDA_ERR_LAUNCH_FAILURE, 0, 1,
                  "cudaStreamWaitEvent: unspecified launch failure");
}

/* A query that keeps failing (a broken context) must end the epoch, not
 * spin: the ring's slots then never pass. */
SL_TEST(cuda_fake__event_query_fails_mid_epoch) {
    fails_cleanly("cudaEventQuery", 2, 1, FAKE_CUDA_ERR_LAUNCH_FAILURE, 1, 0,
                  "cudaEventQuery: unspecified launch failure");
}

/* ---- sl_stager (device_stager.c) over the stand-in ---------------------------------- */

static void stage_two(sl_stager *st, const float *a, const int64_t *b, sl_tensor out[2]) {
    sl_tensor in[2];
    int64_t sa = 10, sb = 3;
    sl_tensor_view(&in[0], (void *)a, SL_F32, 1, &sa);
    sl_tensor_view(&in[1], (void *)b, SL_I64, 1, &sb);
    if (sl_stager_stage(st, in, 2, out) != SL_OK)
        sl_test_fail(__FILE__, __LINE__, "stage: %s", sl_errmsg());
}

/* Pinned and to-device staging: the bytes land, the tensors report where
 * they are, a held batch keeps its slot past sl_stager_free while the idle
 * slots go at once, and nothing is left once the last tensor is released. */
SL_TEST(cuda_fake__stager_pinned_and_device_nothing_leaks) {
    use_fake();
    fk.not_ready(2);
    float a[10];
    int64_t b[3] = {7, -8, 9};
    for (int i = 0; i < 10; i++)
        a[i] = (float)i * 0.25f;
    for (int to_device = 0; to_device <= 1; to_device++) {
        sl_stager *st = NULL;
        ASSERT_OK(sl_stager_open(&st, SL_DEVICE_CUDA, 0, to_device, 2));
        sl_tensor keep[2], tmp[2];
        stage_two(st, a, b, keep);
        ASSERT_EQ(keep[0].device, to_device ? SL_DEVICE_CUDA : SL_DEVICE_CUDA_HOST);
        ASSERT_EQ(keep[1].dtype, SL_I64);
        ASSERT_EQ((int)keep[1].shape[0], 3);
        ASSERT_EQ(((char *)keep[1].data - (char *)keep[0].data) % 256, 0);
        for (int k = 0; k < 5; k++) { /* released at once: reused, the ring stays small */
            stage_two(st, a, b, tmp);
            sl_tensor_release(&tmp[0]);
            sl_tensor_release(&tmp[1]);
        }
        sl_stager_stats ss;
        sl_stager_stats_get(st, &ss);
        ASSERT_U64_EQ(ss.batches, 6);
        ASSERT_U64_EQ(ss.staged_bytes, 6 * (40 + 24));
        ASSERT_U64_EQ(ss.h2d_bytes, to_device ? 6 * (40 + 24) : 0);
        ASSERT(ss.slots <= 2);
        sl_stager_free(st);
        /* the stand-in's "device" memory is host memory: read it back */
        ASSERT_EQ(memcmp(keep[0].data, a, sizeof a), 0);
        ASSERT_EQ(memcmp(keep[1].data, b, sizeof b), 0);
        ASSERT_EQ(fk.live("host"), 1);
        ASSERT_EQ(fk.live("device"), to_device ? 1 : 0);
        sl_tensor_release(&keep[1]);
        ASSERT_EQ(fk.live("host"), 1);
        sl_tensor_release(&keep[0]);
        nothing_left();
    }
}

/* A failing copy or pinned allocation is a clean error naming the call; the
 * stager goes on with the next batch. */
SL_TEST(cuda_fake__stager_errors_name_the_call) {
    use_fake();
    float a[10] = {0};
    int64_t b[3] = {1, 2, 3};
    sl_tensor out[2];
    sl_stager *st = NULL;
    ASSERT_OK(sl_stager_open(&st, SL_DEVICE_CUDA, 0, 1, 2));
    ASSERT(fk.fail("cudaMemcpyAsync", 1, FAKE_CUDA_ERR_LAUNCH_FAILURE, 0) == 0);
    sl_tensor in[1];
    int64_t n = 10;
    sl_tensor_view(&in[0], a, SL_F32, 1, &n);
    ASSERT_EQ(sl_stager_stage(st, in, 1, out), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "device \"cuda\": cudaMemcpyAsync: unspecified launch failure");
    /* the failed batch's slot is reused; held, the next stage needs a new one */
    stage_two(st, a, b, out);
    ASSERT(fk.fail("cudaHostAlloc", 1, FAKE_CUDA_ERR_MEMORY_ALLOCATION, 0) == 0);
    sl_tensor more[2];
    ASSERT_EQ(sl_stager_stage(st, in, 1, more), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "cudaHostAlloc: out of memory");
    stage_two(st, a, b, more);
    ASSERT_EQ(memcmp(more[1].data, b, sizeof b), 0);
    sl_tensor bad = in[0];
    bad.device = SL_DEVICE_CUDA;
    ASSERT_EQ(sl_stager_stage(st, &bad, 1, more), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "not in host memory");
    for (int i = 0; i < 2; i++) {
        sl_tensor_release(&out[i]);
        sl_tensor_release(&more[i]);
    }
    sl_stager_free(st);
    nothing_left();
}

SL_TEST(cuda_fake__stager_without_runtime_says_why) {
    char missing[600];
    sl_test_path(missing, sizeof missing, "libcudart-none.so");
    ASSERT_EQ(setenv("SLUICE_CUDART", missing, 1), 0);
    sl_stager *st = NULL;
    ASSERT_EQ(sl_stager_open(&st, SL_DEVICE_CUDA, 0, 0, 4), SL_EUNSUPPORTED);
    ASSERT(st == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "libcudart-none.so could not be loaded");
}

/* ---- the nvJPEG batch decoder (device_nvjpeg.c) over the stand-ins ------------------ */
#ifdef SLUICE_FAKE_NVJPEG
#include <turbojpeg.h>

typedef struct {
    unsigned char *buf;
    unsigned long len;
} jpeg_file;

/* A w x h JPEG; CMYK when cmyk. Without `photo`, ramps that wrap from 255
 * to 0 every 51 pixels or so: hard edges in every channel, where decoders
 * that upsample chroma differently part by up to ~90 (the stand-in decodes
 * with libjpeg-turbo itself, so its tests compare exactly). With `photo`,
 * what photographs hold: gradients with a fine texture, no wrap. */
static jpeg_file make_jpeg_px(int w, int h, int samp, int cmyk, int seed, int photo) {
    int ch = cmyk ? 4 : 3;
    uint8_t *px = malloc((size_t)w * h * ch);
    ASSERT(px != NULL);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < ch; c++) {
                int v = x * 5 + y * 3 + c * 40 + seed * 17;
                if (photo) {
                    v = 128 + 100 * x / w - 50 + 60 * y / h - 30 + (c - 1) * 20 +
                        (x * 7 + y * 13 + seed) % 9 - 4;
                    v = v < 0 ? 0 : v > 255 ? 255 : v;
                }
                px[((size_t)y * w + x) * ch + c] = (uint8_t)v;
            }
    tjhandle tj = tjInitCompress();
    jpeg_file f = {NULL, 0};
    ASSERT(tj != NULL);
    ASSERT_EQ(tjCompress2(tj, px, w, 0, h, cmyk ? TJPF_CMYK : TJPF_RGB, &f.buf, &f.len, samp, 90,
                          0), 0);
    tjDestroy(tj);
    free(px);
    return f;
}

static jpeg_file make_jpeg(int w, int h, int samp, int cmyk, int seed) {
    return make_jpeg_px(w, h, samp, cmyk, seed, 0);
}

/* libjpeg-turbo's RGB of f (what the stand-in writes) */
static uint8_t *turbo_rgb(const jpeg_file *f, int w, int h) {
    uint8_t *px = malloc((size_t)w * h * 3);
    tjhandle tj = tjInitDecompress();
    ASSERT(px && tj);
    ASSERT_EQ(tjDecompress2(tj, f->buf, f->len, px, w, 0, h, TJPF_RGB, TJFLAG_ACCURATEDCT), 0);
    tjDestroy(tj);
    return px;
}

static struct {
    long (*live)(void);
    long (*calls)(int batched);
} fn;

static sl_dev_backend *use_fakes(void) {
    use_fake();
    ASSERT_EQ(setenv("SLUICE_NVJPEG", SLUICE_FAKE_NVJPEG, 1), 0);
    void *lib = dlopen(SLUICE_FAKE_NVJPEG, RTLD_NOW | RTLD_LOCAL);
    ASSERT(lib != NULL);
    *(void **)&fn.live = dlsym(lib, "fake_nvjpeg_live");
    *(void **)&fn.calls = dlsym(lib, "fake_nvjpeg_calls");
    ASSERT(fn.live && fn.calls);
    sl_dev_backend *be = NULL;
    ASSERT_OK(sl_dev__cuda_open(&be, 0));
    return be;
}

/* Good images decode in one batched call; a CMYK file is refused at the
 * header and a truncated one fails the batch: both go back to the CPU, and
 * the three good neighbours still come out, each in its own buffer, with
 * its own pitch. */
SL_TEST(nvjpeg_fake__bad_neighbours_cost_only_themselves) {
    sl_dev_backend *be = use_fakes();
    sl_dev_jpeg *j;
    ASSERT_OK(sl_dev__jpeg_open(&j, be));
    ASSERT_STR_EQ(sl_dev__jpeg_backend(j), "hardware");
    enum { NI = 5 };
    int ws[NI] = {40, 33, 24, 31, 17}, hs[NI] = {30, 17, 24, 45, 9};
    jpeg_file f[NI] = {make_jpeg(40, 30, TJSAMP_444, 0, 1), make_jpeg(33, 17, TJSAMP_420, 0, 2),
                       make_jpeg(24, 24, TJSAMP_444, 1, 3), make_jpeg(31, 45, TJSAMP_422, 0, 4),
                       make_jpeg(17, 9, TJSAMP_GRAY, 0, 5)};
    jpeg_file whole3 = f[3];
    sl_dev_jpeg_item it[NI];
    memset(it, 0, sizeof it);
    for (int i = 0; i < NI; i++) {
        it[i].data = f[i].buf;
        it[i].len = f[i].len;
    }
    it[3].len = f[3].len * 6 / 10; /* truncated: its header is intact */
    ASSERT_OK(sl_dev__jpeg_decode(j, it, NI, NULL));
    ASSERT_EQ(it[2].status, SL_DEV_JPEG_FALLBACK);
    ASSERT_CONTAINS(it[2].why, "CMYK");
    ASSERT_EQ(it[3].status, SL_DEV_JPEG_FALLBACK);
    ASSERT_CONTAINS(it[3].why, "nvjpegDecode: bad JPEG");
    ASSERT(it[2].dev == NULL && it[3].dev == NULL);
    for (int i = 0; i < NI; i++) {
        if (i == 2 || i == 3)
            continue;
        ASSERT_EQ(it[i].status, SL_DEV_JPEG_OK);
        ASSERT_EQ(it[i].width, ws[i]);
        ASSERT_EQ(it[i].height, hs[i]);
        ASSERT_EQ(it[i].pitch, (size_t)ws[i] * 3);
        uint8_t *want = turbo_rgb(&f[i], ws[i], hs[i]);
        ASSERT_EQ(memcmp(it[i].dev, want, (size_t)ws[i] * hs[i] * 3), 0);
        free(want);
    }
    uint64_t gpu, fb;
    sl_dev__jpeg_counts(j, &gpu, &fb);
    ASSERT_U64_EQ(gpu, 3);
    ASSERT_U64_EQ(fb, 2);
    /* one batched call failed on the truncated file; then one by one */
    ASSERT_EQ(fn.calls(1), 1);
    ASSERT_EQ(fn.calls(0), 4);
    /* the next batch, all good, goes through one batched call again */
    it[3].len = whole3.len;
    sl_dev_jpeg_item two[2] = {it[0], it[3]};
    ASSERT_OK(sl_dev__jpeg_decode(j, two, 2, NULL));
    ASSERT(two[0].status == SL_DEV_JPEG_OK && two[1].status == SL_DEV_JPEG_OK);
    ASSERT_EQ(fn.calls(1), 2);
    sl_dev__jpeg_close(j);
    sl_dev__backend_release(be);
    for (int i = 0; i < NI; i++)
        tjFree(f[i].buf);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

SL_TEST(nvjpeg_fake__no_hardware_engine_uses_gpu_hybrid) {
    ASSERT_EQ(setenv("SLUICE_FAKE_NVJPEG_NO_HARDWARE", "1", 1), 0);
    sl_dev_backend *be = use_fakes();
    sl_dev_jpeg *j;
    ASSERT_OK(sl_dev__jpeg_open(&j, be));
    ASSERT_STR_EQ(sl_dev__jpeg_backend(j), "gpu_hybrid");
    sl_dev__jpeg_close(j);
    sl_dev__backend_release(be);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

/* Device memory for the pixels cannot be had: an error for the call (not a
 * fallback), and closing frees what was made. */
SL_TEST(nvjpeg_fake__device_alloc_failure_is_an_error) {
    sl_dev_backend *be = use_fakes();
    sl_dev_jpeg *j;
    ASSERT_OK(sl_dev__jpeg_open(&j, be));
    jpeg_file f[2] = {make_jpeg(20, 20, TJSAMP_444, 0, 1), make_jpeg(20, 20, TJSAMP_444, 0, 2)};
    sl_dev_jpeg_item it[2] = {{.data = f[0].buf, .len = f[0].len},
                              {.data = f[1].buf, .len = f[1].len}};
    ASSERT_OK(fk.fail("cudaMalloc", 2, FAKE_CUDA_ERR_MEMORY_ALLOCATION, 0));
    ASSERT_EQ(sl_dev__jpeg_decode(j, it, 2, NULL), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "cudaMalloc: out of memory");
    sl_dev__jpeg_close(j);
    sl_dev__backend_release(be);
    tjFree(f[0].buf);
    tjFree(f[1].buf);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

SL_TEST(nvjpeg_fake__missing_library_is_explained) {
    char missing[600];
    sl_test_path(missing, sizeof missing, "libnvjpeg-none.so");
    ASSERT_EQ(setenv("SLUICE_NVJPEG", missing, 1), 0);
    ASSERT_EQ(sl_dev__nvjpeg_probe(), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "libnvjpeg-none.so could not be loaded");
    sl_spec *spec;
    ASSERT_OK(sl_spec_from_json(&spec, "{\"source\": {\"path\": \"x\"}, \"ops\": [{\"op\": "
                                       "\"decode\", \"device\": \"gpu\"}]}"));
    sl_pipeline *p = NULL;
    ASSERT_EQ(sl_pipeline_create(&p, spec), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "ops[0].device \"gpu\": decoding on the GPU needs nvJPEG: "
                                 "SLUICE_NVJPEG=");
    sl_spec_free(spec);
}

/* ---- GPU decode of a batch (device_gpu_decode.c) over the stand-ins -----------------
 * The stand-in runtime cannot launch kernels; its device memory is host
 * memory, so the kernel's CPU reference (the same arithmetic,
 * crop_resize_math.h) stands in for the launch. What is checked is the
 * plumbing: which image goes where, the fallbacks, a bad image among good
 * ones, the counts. */
static int ref_crop_resize(sl_dev_backend *b, const sl_dev_crop *a, void *stream) {
    (void)b;
    (void)stream; /* the stand-in runs a stream's work at once, in the caller */
    sl_dev__crop_resize_host(a);
    return SL_OK;
}

/* Gives the stand-in backend `kernel` as its crop_resize, on a copy of its
 * table (each case runs in its own process: one copy serves). */
static sl_dev_ops kernel_ops;
static void give_kernel(sl_dev_backend *be,
                        int (*kernel)(sl_dev_backend *, const sl_dev_crop *, void *)) {
    kernel_ops = *be->ops;
    kernel_ops.crop_resize = kernel;
    be->ops = &kernel_ops;
    be->kernels = 1;
}

/* the output size (each case runs in its own process) */
static int GD_OH = 12, GD_OW = 16;
static const float GD_MEAN[3] = {0.485f, 0.456f, 0.406f}, GD_STD[3] = {0.229f, 0.224f, 0.225f};

typedef struct {
    sl_dev_gpu_item *items;
    int calls;
} gd_cpu;

/* The CPU path for a fallback: sl_decode, then the PIL-exact resample
 * straight into the normalized image (the CPU ops' kernels). */
static int gd_cpu_decode(void *ctx, int i, float *out) {
    gd_cpu *c = ctx;
    const sl_dev_gpu_item *it = &c->items[i];
    c->calls++;
    sl_decoder *dec;
    SL_TRY(sl_decoder_create(&dec));
    int64_t shape[3] = {it->height, it->width, 3};
    sl_tensor t;
    int rc = sl_tensor_alloc(&t, SL_U8, 3, shape);
    if (rc == SL_OK) {
        rc = sl_decode(dec, it->data, it->len, SL_COLOR_RGB, &t);
        if (rc == SL_OK) {
            float lut[3][256];
            sl_ops__norm_lut(lut, 3, GD_MEAN, GD_STD);
            sl_ops__norm nm = {(const float(*)[256])lut, SL_LAYOUT_CHW, it->flip};
            double box[4] = {it->box[0], it->box[1], it->box[2], it->box[3]};
            rc = sl_ops__resample(t.data, it->height, it->width, (size_t)it->width * 3, 3, box,
                                  it->lim, GD_OH, GD_OW, SL_INTERP_BILINEAR, out, 0, &nm);
        }
        sl_tensor_release(&t);
    }
    sl_decoder_free(dec);
    return rc;
}

static void gd_place(sl_dev_gpu_item *it, int w, int h, uint64_t seed) {
    const double scale[2] = {0.08, 1.0}, ratio[2] = {0.75, 4.0 / 3};
    sl_rng r1, r2;
    sl_rng_init(&r1, seed, 0, 0, 1);
    sl_rng_init(&r2, seed, 0, 0, 2);
    sl_place pl;
    ASSERT_OK(sl_place_rrc(h, w, scale, ratio, GD_OH, GD_OW, &r1, 0.5, &r2, &pl));
    it->width = w;
    it->height = h;
    for (int k = 0; k < 4; k++) {
        it->box[k] = (float)pl.box[k];
        it->lim[k] = pl.lim[k];
    }
    it->flip = pl.mirror;
}

/* Five images, one CMYK (refused by nvJPEG: the CPU decodes it) and one
 * truncated (nvJPEG fails on it, and so does the CPU: FAILED, with the CPU
 * path's error); the three good neighbours are decoded and placed on the
 * "GPU", each at its own place in the batch. */
SL_TEST(gpu_decode_fake__bad_neighbour_costs_only_itself) {
    sl_dev_backend *be = use_fakes();
    give_kernel(be, ref_crop_resize);
    sl_dev_jpeg *j;
    ASSERT_OK(sl_dev__jpeg_open(&j, be));
    enum { NI = 5 };
    int ws[NI] = {40, 33, 24, 31, 17}, hs[NI] = {30, 17, 24, 45, 9};
    jpeg_file f[NI] = {make_jpeg(40, 30, TJSAMP_444, 0, 1), make_jpeg(33, 17, TJSAMP_420, 0, 2),
                       make_jpeg(24, 24, TJSAMP_444, 1, 3), make_jpeg(31, 45, TJSAMP_422, 0, 4),
                       make_jpeg(17, 9, TJSAMP_GRAY, 0, 5)};
    sl_dev_gpu_item it[NI];
    memset(it, 0, sizeof it);
    int flips = 0;
    for (int i = 0; i < NI; i++) {
        it[i].data = f[i].buf;
        it[i].len = f[i].len;
        gd_place(&it[i], ws[i], hs[i], 40 + (uint64_t)i);
        flips += it[i].flip;
    }
    it[3].len = f[3].len * 6 / 10; /* truncated: its header is intact */
    size_t per = (size_t)3 * GD_OH * GD_OW;
    float *dst, *host;
    ASSERT_OK(be->ops->dev_alloc(be, NI * per * sizeof(float), (void **)&dst));
    ASSERT_OK(be->ops->host_alloc(be, NI * per * sizeof(float), (void **)&host));
    memset(dst, 0, NI * per * sizeof(float));
    gd_cpu cpu = {it, 0};
    sl_dev_gpu_batch b = {.jpeg = j, .oh = GD_OH, .ow = GD_OW, .dst = dst, .host = host,
                          .cpu = gd_cpu_decode, .cpu_ctx = &cpu};
    memcpy(b.mean, GD_MEAN, sizeof GD_MEAN);
    memcpy(b.std, GD_STD, sizeof GD_STD);
    int on_gpu, on_cpu, failed;
    ASSERT_OK(sl_dev__gpu_decode_batch(&b, it, NI, &on_gpu, &on_cpu, &failed));
    ASSERT_EQ(on_gpu, 3);
    ASSERT_EQ(on_cpu, 1);
    ASSERT_EQ(failed, 1);
    ASSERT_EQ(cpu.calls, 2);
    ASSERT_EQ(it[2].status, SL_DEV_JPEG_FALLBACK);
    ASSERT_CONTAINS(it[2].why, "CMYK");
    ASSERT_EQ(it[3].status, SL_DEV_GPU_FAILED);
    ASSERT(it[3].rc < 0);
    float *want = malloc(per * sizeof *want);
    for (int i = 0; i < NI; i++) {
        if (i == 3)
            continue;
        if (i == 2) {
            /* the CPU path's own image, copied to its place */
            ASSERT_OK(gd_cpu_decode(&cpu, 2, want));
        } else {
            ASSERT_EQ(it[i].status, SL_DEV_JPEG_OK);
            /* the kernel's arithmetic over the stand-in's decode */
            uint8_t *rgb = turbo_rgb(&f[i], ws[i], hs[i]);
            sl_dev_crop a = {.dst = want, .src = rgb, .pitch = (size_t)ws[i] * 3,
                             .flip = it[i].flip, .oh = GD_OH, .ow = GD_OW};
            memcpy(a.box, it[i].box, sizeof a.box);
            memcpy(a.lim, it[i].lim, sizeof a.lim);
            memcpy(a.mean, GD_MEAN, sizeof GD_MEAN);
            memcpy(a.std, GD_STD, sizeof GD_STD);
            sl_dev__crop_resize_host(&a);
            free(rgb);
        }
        if (memcmp(dst + (size_t)i * per, want, per * sizeof(float)) != 0)
            sl_test_fail(__FILE__, __LINE__, "image %d is not at its place in the batch", i);
    }
    free(want);
    uint64_t gpu, fb;
    sl_dev__jpeg_counts(j, &gpu, &fb);
    ASSERT_U64_EQ(gpu, 3);
    ASSERT_U64_EQ(fb, 2);
    printf("  flips among the 5 placements: %d\n", flips);
    be->ops->dev_free(be, dst);
    be->ops->host_free(be, host);
    sl_dev__jpeg_close(j);
    sl_dev__backend_release(be);
    for (int i = 0; i < NI; i++)
        tjFree(f[i].buf);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

/* ---- GPU decode against the CPU path, image by image ---------------------------------
 * The same placements through sl_dev__gpu_decode_batch and through the CPU
 * op's own fused call (sl_ops__decode_box straight into the normalized
 * image, also the batch's fallback). Images: the JPEGs of the folder
 * SLUICE_GPU_PHOTOS names (the first 64 *.jpg; scripts/gpu_check.sh passes
 * its photo set), else 24 generated ones of 64x48 to 1024x768 (shrinks past
 * 2x make the CPU path decode DCT-scaled), to 224 x 224. Figures in uint8
 * steps (normalized difference x 255 x std). */
typedef struct {
    double mean_steps, max_steps;
    int n, on_gpu, on_cpu, failed;
} gd_agree;

typedef struct {
    sl_dev_gpu_item *items;
    sl_decoder *dec;
} gd_path;

static int gd_cpu_path(void *ctx, int i, float *out) {
    gd_path *c = ctx;
    const sl_dev_gpu_item *it = &c->items[i];
    float lut[3][256];
    sl_ops__norm_lut(lut, 3, GD_MEAN, GD_STD);
    sl_ops__norm nm = {(const float(*)[256])lut, SL_LAYOUT_CHW, it->flip};
    double box[4] = {it->box[0], it->box[1], it->box[2], it->box[3]};
    return sl_ops__decode_box(c->dec, it->data, it->len, SL_COLOR_RGB, box, it->lim, GD_OH,
                              GD_OW, SL_INTERP_BILINEAR, out, &nm);
}

static int gd_load_photos(uint8_t **buf, size_t *len, int cap) {
    const char *dir = getenv("SLUICE_GPU_PHOTOS");
    int n = 0;
    if (dir && *dir) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "find '%s' -name '*.jpg' | sort | head -%d", dir, cap);
        FILE *ls = popen(cmd, "r");
        char path[600];
        while (ls && n < cap && fgets(path, sizeof path, ls)) {
            path[strcspn(path, "\n")] = '\0';
            FILE *f = fopen(path, "rb");
            if (!f)
                continue;
            fseek(f, 0, SEEK_END);
            long sz = ftell(f);
            fseek(f, 0, SEEK_SET);
            buf[n] = malloc((size_t)sz);
            len[n] = fread(buf[n], 1, (size_t)sz, f);
            fclose(f);
            n++;
        }
        if (ls)
            pclose(ls);
        if (n > 0)
            return n;
    }
    for (; n < 24 && n < cap; n++) {
        int w = 64 + (n * 197) % 961, h = 48 + (n * 131) % 721;
        jpeg_file f = make_jpeg(w, h, n % 3 == 0 ? TJSAMP_444 : TJSAMP_420, 0, n);
        buf[n] = malloc(f.len);
        memcpy(buf[n], f.buf, f.len);
        len[n] = f.len;
        tjFree(f.buf);
    }
    return n;
}

static void gd_agreement(sl_dev_backend *be, int (*d2h)(void *, const void *, size_t, int),
                         gd_agree *out) {
    enum { CAP = 64 };
    uint8_t *buf[CAP];
    size_t len[CAP];
    int n = gd_load_photos(buf, len, CAP);
    sl_dev_jpeg *j;
    ASSERT_OK(sl_dev__jpeg_open(&j, be));
    sl_dev_gpu_item it[CAP];
    memset(it, 0, sizeof it);
    sl_decoder *dec;
    ASSERT_OK(sl_decoder_create(&dec));
    for (int i = 0; i < n; i++) {
        sl_image_info info;
        ASSERT_OK(sl_decode_info(dec, buf[i], len[i], &info));
        it[i].data = buf[i];
        it[i].len = len[i];
        gd_place(&it[i], info.width, info.height, 1000 + (uint64_t)i);
    }
    size_t per = (size_t)3 * GD_OH * GD_OW;
    float *dst, *host, *got = malloc(per * sizeof *got), *want = malloc(per * sizeof *want);
    ASSERT_OK(be->ops->dev_alloc(be, (size_t)n * per * sizeof(float), (void **)&dst));
    ASSERT_OK(be->ops->host_alloc(be, (size_t)n * per * sizeof(float), (void **)&host));
    gd_path cpu = {it, dec};
    sl_dev_gpu_batch b = {.jpeg = j, .oh = GD_OH, .ow = GD_OW, .dst = dst, .host = host,
                          .cpu = gd_cpu_path, .cpu_ctx = &cpu};
    memcpy(b.mean, GD_MEAN, sizeof GD_MEAN);
    memcpy(b.std, GD_STD, sizeof GD_STD);
    ASSERT_OK(sl_dev__gpu_decode_batch(&b, it, n, &out->on_gpu, &out->on_cpu, &out->failed));
    double sum = 0, worst = 0;
    size_t count = 0;
    for (int i = 0; i < n; i++) {
        if (it[i].status != SL_DEV_JPEG_OK)
            continue;
        ASSERT_EQ(d2h(got, dst + (size_t)i * per, per * sizeof(float), 2), 0);
        ASSERT_OK(gd_cpu_path(&cpu, i, want));
        for (size_t k = 0; k < per; k++) {
            double d = fabs((double)got[k] - (double)want[k]) * 255.0 * GD_STD[k / (per / 3)];
            sum += d;
            worst = d > worst ? d : worst;
        }
        count += per;
    }
    out->n = n;
    out->mean_steps = count ? sum / (double)count : 0;
    out->max_steps = worst;
    be->ops->dev_free(be, dst);
    be->ops->host_free(be, host);
    free(got);
    free(want);
    sl_decoder_free(dec);
    sl_dev__jpeg_close(j);
    for (int i = 0; i < n; i++)
        free(buf[i]);
}

static int host_d2h(void *dst, const void *src, size_t n, int kind) {
    (void)kind; /* the stand-in's device memory is host memory */
    memcpy(dst, src, n);
    return 0;
}

/* Over the stand-ins (libjpeg-turbo's decode, the kernel's CPU reference):
 * the comparison runs here; its figure is the resample's and the CPU path's
 * DCT-scaled decode's difference, not nvJPEG's (measured: mean 0.069 steps,
 * max 42, nearly all of it on the one image the CPU path decodes at half
 * scale). Tolerance: mean <= 1 step, max <= 48 steps. */
SL_TEST(gpu_decode_fake__agrees_with_cpu_path) {
    ASSERT_EQ(unsetenv("SLUICE_GPU_PHOTOS"), 0);
    GD_OH = GD_OW = 224;
    sl_dev_backend *be = use_fakes();
    give_kernel(be, ref_crop_resize);
    gd_agree a;
    gd_agreement(be, host_d2h, &a);
    printf("  stand-in decode + reference vs CPU path over %d images (%d GPU, %d CPU, %d "
           "failed): mean |diff| %.3f uint8 steps, max %.1f\n", a.n, a.on_gpu, a.on_cpu,
           a.failed, a.mean_steps, a.max_steps);
    fflush(stdout);
    ASSERT_EQ(a.on_gpu, a.n);
    ASSERT(a.mean_steps <= 1.0);
    ASSERT(a.max_steps <= 48.0);
    sl_dev__backend_release(be);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

/* Without the kernel library the batch is refused, saying what is missing;
 * a failing kernel launch is an error for the call, not an image's. */
static int failing_crop_resize(sl_dev_backend *b, const sl_dev_crop *a, void *stream) {
    (void)b;
    (void)a;
    (void)stream;
    return sl__error(SL_EIO, "device \"cuda\": crop_resize kernel: unspecified launch failure");
}

SL_TEST(gpu_decode_fake__no_kernels_or_failing_kernel_is_an_error) {
    sl_dev_backend *be = use_fakes();
    sl_dev_jpeg *j;
    ASSERT_OK(sl_dev__jpeg_open(&j, be));
    jpeg_file f = make_jpeg(20, 20, TJSAMP_444, 0, 1);
    sl_dev_gpu_item it = {.data = f.buf, .len = f.len};
    gd_place(&it, 20, 20, 1);
    float *dst, *host;
    size_t per = (size_t)3 * GD_OH * GD_OW;
    ASSERT_OK(be->ops->dev_alloc(be, per * sizeof(float), (void **)&dst));
    ASSERT_OK(be->ops->host_alloc(be, per * sizeof(float), (void **)&host));
    gd_cpu cpu = {&it, 0};
    sl_dev_gpu_batch b = {.jpeg = j, .oh = GD_OH, .ow = GD_OW, .dst = dst, .host = host,
                          .cpu = gd_cpu_decode, .cpu_ctx = &cpu};
    memcpy(b.std, GD_STD, sizeof GD_STD);
    int g, c, x;
    ASSERT_EQ(sl_dev__gpu_decode_batch(&b, &it, 1, &g, &c, &x), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "GPU decode: SLUICE_CUDA_KERNELS=");
    give_kernel(be, failing_crop_resize);
    ASSERT_EQ(sl_dev__gpu_decode_batch(&b, &it, 1, &g, &c, &x), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "crop_resize kernel");
    ASSERT_EQ(cpu.calls, 0);
    be->ops->dev_free(be, dst);
    be->ops->host_free(be, host);
    sl_dev__jpeg_close(j);
    sl_dev__backend_release(be);
    tjFree(f.buf);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

/* ---- decode on the GPU in the pipeline, over the stand-ins ---------------------------
 * A whole pipeline with {"op": "decode", "device": "gpu"} (+ random_resized_crop
 * + flip + normalize + batch) on the CUDA backend over the stand-in runtime,
 * nvJPEG (libjpeg-turbo) and kernels (crop_resize_math.h on the host,
 * tests/device/fake/fake_kernels.c), against the CPU pipeline with the same
 * seed: every placement the kernel got equals the CPU ops' placement for
 * that record (sl_place_rrc keyed as the pipeline keys the CPU ops),
 * exactly; the pixels agree within gpu_decode_fake__agrees_with_cpu_path's
 * tolerance (mean <= 1, max <= 48 uint8 steps); a CMYK file goes to the CPU
 * path (counted, bit for bit the CPU pipeline's); a truncated file fails
 * the run naming its record, or is skipped; nothing leaks. */
enum { GP_N = 14, GP_BATCH = 4, GP_OH = 96, GP_OW = 112 };
static const double GP_SCALE[2] = {0.08, 1.0}, GP_RATIO[2] = {0.75, 4.0 / 3};
static const uint64_t GP_SEED = 5;

typedef struct {
    jpeg_file f[GP_N];
    int64_t label[GP_N];
    int w[GP_N], h[GP_N];
} gp_set;

static struct {
    long (*calls)(void);
    int (*call)(long i, float box[4], int lim[4], int *flip);
} gk;

static void gp_use(void) {
    use_fake();
    ASSERT_EQ(setenv("SLUICE_CUDA_KERNELS", SLUICE_FAKE_KERNELS, 1), 0);
    ASSERT_EQ(setenv("SLUICE_NVJPEG", SLUICE_FAKE_NVJPEG, 1), 0);
    void *lib = dlopen(SLUICE_FAKE_NVJPEG, RTLD_NOW | RTLD_LOCAL);
    void *kl = dlopen(SLUICE_FAKE_KERNELS, RTLD_NOW | RTLD_LOCAL);
    ASSERT(lib != NULL && kl != NULL);
    *(void **)&fn.live = dlsym(lib, "fake_nvjpeg_live");
    *(void **)&fn.calls = dlsym(lib, "fake_nvjpeg_calls");
    *(void **)&gk.calls = dlsym(kl, "fake_kernels_calls");
    *(void **)&gk.call = dlsym(kl, "fake_kernels_call");
    ASSERT(fn.live && fn.calls && gk.calls && gk.call);
}

/* GP_N JPEGs of different sizes and subsamplings; CMYK at cmyk_at, cut in
 * half at bad_at (-1: none). */
static unsigned gp_cmyk_mask; /* more CMYK files (bit i: file i) */
static int gp_batch = 4;
static int gp_drop; /* batch's drop_remainder */
enum { GP_CHW = 0, GP_HWC = 1, GP_U8 = 2 };
static int gp_out = GP_CHW; /* normalize to float32 CHW or HWC, or none (uint8 HWC) */

static void gp_make(gp_set *s, int cmyk_at, int bad_at) {
    for (int i = 0; i < GP_N; i++) {
        if (gp_cmyk_mask & (1u << i))
            cmyk_at = i;
        s->w[i] = 40 + (i * 53) % 200;
        s->h[i] = 30 + (i * 37) % 150;
        s->f[i] = make_jpeg(s->w[i], s->h[i], i % 3 == 0 ? TJSAMP_444 : TJSAMP_420,
                            i == cmyk_at || (gp_cmyk_mask & (1u << i)), i);
        if (i == bad_at)
            s->f[i].len /= 2;
        s->label[i] = 100 + i;
    }
}

static void gp_free(gp_set *s) {
    for (int i = 0; i < GP_N; i++)
        tjFree(s->f[i].buf);
}

/* A spec whose source is the set's JPEGs and labels (records 0..GP_N-1). */
static sl_spec *gp_spec(gp_set *s) {
    sl_sample samples[GP_N];
    memset(samples, 0, sizeof samples);
    for (int i = 0; i < GP_N; i++) {
        int64_t n = (int64_t)s->f[i].len;
        sl_tensor_view(&samples[i].col[0], s->f[i].buf, SL_U8, 1, &n);
        sl_tensor_view(&samples[i].col[1], &s->label[i], SL_I64, 0, NULL);
        samples[i].ncols = 2;
        samples[i].index = (uint64_t)i;
    }
    sl_spec *spec;
    ASSERT_OK(sl_spec_create(&spec));
    const char *names[2] = {"image", "label"};
    ASSERT_OK(sl_spec_set_source_samples(spec, 2, names, samples, GP_N));
    return spec;
}

static sl_pipeline *gp_pipeline(gp_set *s, int gpu, int skip) {
    sl_spec *spec = gp_spec(s);
    ASSERT_OK(sl_spec_set_seed(spec, GP_SEED));
    ASSERT_OK(sl_spec_set_threads(spec, 2));
    if (skip)
        ASSERT_OK(sl_spec_set_on_error(spec, SL_ON_ERROR_SKIP));
    ASSERT_OK(sl_spec_add_op_json(spec, gpu ? "{\"op\": \"decode\", \"device\": \"gpu\"}"
                                            : "{\"op\": \"decode\"}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"random_resized_crop\", \"size\": [96, 112]}"));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"flip\", \"p\": 0.5}"));
    if (gp_out != GP_U8) {
        char nj[200];
        snprintf(nj, sizeof nj, "{\"op\": \"normalize\", \"mean\": [0.485, 0.456, 0.406], "
                 "\"std\": [0.229, 0.224, 0.225], \"layout\": \"%s\"}",
                 gp_out == GP_HWC ? "hwc" : "chw");
        ASSERT_OK(sl_spec_add_op_json(spec, nj));
    }
    char bj[64];
    snprintf(bj, sizeof bj, "{\"op\": \"batch\", \"size\": %d, \"drop_remainder\": %s}",
             gp_batch, gp_drop ? "true" : "false");
    ASSERT_OK(sl_spec_add_op_json(spec, bj));
    if (gpu)
        ASSERT_OK(sl_spec_set_device(spec, SL_DEVICE_CUDA, 0, 0));
    sl_pipeline *p;
    if (sl_pipeline_create(&p, spec) != SL_OK)
        sl_test_fail(__FILE__, __LINE__, "create: %s", sl_errmsg());
    sl_spec_free(spec);
    return p;
}

/* One epoch: each sample's image (3 x GP_OH x GP_OW) and label, in order;
 * the batch sizes in sizes[]. Returns the samples, or -1 with the error in
 * err (the run failed). */
static int gp_drain(sl_pipeline *p, float *img, int64_t *label, int *sizes, int want_dev,
                    char *err, size_t cap) {
    size_t per = (size_t)3 * GP_OH * GP_OW; /* values of one image */
    int n = 0, nb = 0;
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        ASSERT_EQ(sl_batch_ncols(b), 2);
        const sl_tensor *x = sl_batch_column(b, 0), *y = sl_batch_column(b, 1);
        ASSERT_EQ(x->device, want_dev);
        ASSERT_EQ(y->device, want_dev);
        ASSERT_EQ(x->dtype, gp_out == GP_U8 ? SL_U8 : SL_F32);
        ASSERT_EQ(x->ndim, 4);
        int64_t want[3] = {3, GP_OH, GP_OW};
        if (gp_out != GP_CHW)
            want[0] = GP_OH, want[1] = GP_OW, want[2] = 3;
        for (int d = 0; d < 3; d++)
            ASSERT_EQ(x->shape[d + 1], want[d]);
        ASSERT_EQ(y->shape[0], x->shape[0]);
        ASSERT(n + x->shape[0] <= GP_N);
        /* the stand-in's device memory is host memory; uint8 images are
         * widened to float to be compared alike */
        if (gp_out == GP_U8)
            for (size_t k = 0; k < (size_t)x->shape[0] * per; k++)
                img[(size_t)n * per + k] = ((const uint8_t *)x->data)[k];
        else
            memcpy(img + (size_t)n * per, x->data, (size_t)x->shape[0] * per * sizeof(float));
        memcpy(label + n, y->data, (size_t)y->shape[0] * sizeof(int64_t));
        n += (int)x->shape[0];
        sizes[nb++] = (int)x->shape[0];
        sl_batch_release(b);
    }
    sizes[nb] = 0;
    if (rc == SL_END)
        return n;
    snprintf(err, cap, "%s", sl_errmsg());
    return -1;
}

/* uint8 steps between two normalized images */
static void gp_diff(const float *a, const float *b, double *mean, double *max) {
    size_t per = (size_t)3 * GP_OH * GP_OW;
    const float sd[3] = {0.229f, 0.224f, 0.225f};
    double sum = 0, worst = 0;
    for (size_t k = 0; k < per; k++) {
        double scale = gp_out == GP_U8 ? 1.0
                       : 255.0 * sd[gp_out == GP_HWC ? k % 3 : k / (per / 3)];
        double d = fabs((double)a[k] - (double)b[k]) * scale;
        sum += d;
        worst = d > worst ? d : worst;
    }
    *mean = sum / (double)per;
    *max = worst;
}

/* The same set through the CPU pipeline and the GPU one, drained: equal
 * labels and batch sizes checked; pixels left to the caller. */
typedef struct gp_pair {
    gp_set s;
    size_t per;          /* values of one image */
    float *cpu, *gpu;    /* GP_N images each */
    sl_pipeline *pc, *pg;
    int zg[GP_N + 1];    /* the GPU pipeline's batch sizes, 0-terminated */
} gp_pair;

static void gp_pair_run(gp_pair *g, int cmyk, int explain_out) {
    gp_make(&g->s, cmyk, -1);
    g->per = (size_t)3 * GP_OH * GP_OW;
    g->cpu = calloc(GP_N * g->per, sizeof(float));
    g->gpu = calloc(GP_N * g->per, sizeof(float));
    int64_t lc[GP_N], lg[GP_N];
    int zc[GP_N + 1];
    char err[512] = "";
    g->pc = gp_pipeline(&g->s, 0, 0);
    g->pg = gp_pipeline(&g->s, 1, 0);
    if (explain_out) {
        char ex[8192];
        size_t len;
        ASSERT_OK(sl_pipeline_explain(g->pg, ex, sizeof ex, &len));
        ASSERT_CONTAINS(ex, "decode(gpu)");
        ASSERT_CONTAINS(ex, gp_out == GP_U8    ? "output: image:uint8[96,112,3]"
                            : gp_out == GP_HWC ? "output: image:float32[96,112,3]"
                                               : "output: image:float32[3,96,112], label:int64[]");
    }
    ASSERT_EQ(gp_drain(g->pc, g->cpu, lc, zc, SL_DEVICE_CPU, err, sizeof err), GP_N);
    ASSERT_EQ(gp_drain(g->pg, g->gpu, lg, g->zg, SL_DEVICE_CUDA, err, sizeof err), GP_N);
    for (int i = 0; i < GP_N; i++)
        ASSERT_EQ(lc[i], lg[i]);
    for (int k = 0; zc[k] || g->zg[k]; k++)
        ASSERT_EQ(zc[k], g->zg[k]);
}

/* Whether image i is the same in both, bit for bit (a CPU fallback is). */
static int gp_pair_same(const gp_pair *g, int i) {
    return memcmp(g->cpu + (size_t)i * g->per, g->gpu + (size_t)i * g->per,
                  g->per * sizeof(float)) == 0;
}

/* The pixels within gpu_decode_fake__agrees_with_cpu_path's tolerance over
 * all values; image `fallback` (-1: none) bit for bit. */
static void gp_pair_pixels(const gp_pair *g, int fallback, const char *what) {
    double sum = 0, worst = 0, worst_img = 0;
    for (int i = 0; i < GP_N; i++) {
        double m, x;
        gp_diff(g->cpu + (size_t)i * g->per, g->gpu + (size_t)i * g->per, &m, &x);
        if (i == fallback)
            ASSERT(gp_pair_same(g, i));
        sum += m;
        worst_img = m > worst_img ? m : worst_img;
        worst = x > worst ? x : worst;
    }
    printf("  %s: GPU pipeline (stand-ins) vs CPU pipeline over %d images: mean |diff| %.3f "
           "uint8 steps (worst image %.3f), max %.1f\n", what, GP_N, sum / GP_N, worst_img, worst);
    fflush(stdout);
    ASSERT(sum / GP_N <= 1.0);
    ASSERT(worst <= 48.0);
}

static void gp_pair_free(gp_pair *g) {
    sl_pipeline_free(g->pc);
    sl_pipeline_free(g->pg);
    gp_free(&g->s);
    free(g->cpu);
    free(g->gpu);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

SL_TEST(gpu_pipe_fake__same_boxes_and_pixels_as_cpu_pipeline) {
    gp_use();
    gp_pair g;
    gp_pair_run(&g, 6, 1);
    gp_set *sp = &g.s;
    ASSERT_EQ(sl_pipeline_ncols(g.pg), 2); /* the placements are not handed out */
    ASSERT_STR_EQ(sl_pipeline_column_name(g.pg, 1), "label");
    ASSERT(sl_pipeline_column_name(g.pg, 2) == NULL);
    /* the placements: every kernel call, in order, is the CPU ops' placement
     * of its record (epoch 0, key = record, ops[1] the crop, ops[2] the flip) */
    long call = 0;
    for (int i = 0; i < GP_N; i++) {
        if (i == 6)
            continue; /* CMYK: decoded by the CPU path, no kernel call */
        sl_rng r1, r2;
        sl_rng_init(&r1, GP_SEED, 0, (uint64_t)i, 1);
        sl_rng_init(&r2, GP_SEED, 0, (uint64_t)i, 2);
        sl_place pl;
        ASSERT_OK(sl_place_rrc(sp->h[i], sp->w[i], GP_SCALE, GP_RATIO, GP_OH, GP_OW, &r1, 0.5,
                               &r2, &pl));
        float box[4];
        int lim[4], flip;
        ASSERT_EQ(gk.call(call++, box, lim, &flip), 0);
        for (int k = 0; k < 4; k++) {
            ASSERT(box[k] == (float)pl.box[k]);
            ASSERT_EQ(lim[k], pl.lim[k]);
        }
        ASSERT_EQ(flip, pl.mirror);
    }
    ASSERT_EQ(gk.calls(), call);
    gp_pair_pixels(&g, 6, "float32 chw");
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(g.pg, &st));
    ASSERT_U64_EQ(st.gpu_decoded, GP_N - 1);
    ASSERT_U64_EQ(st.gpu_fallbacks, 1);
    /* across to the device: the JPEGs nvJPEG took, the fallback's floats, the labels */
    uint64_t want = (uint64_t)g.per * sizeof(float) + GP_N * sizeof(int64_t);
    for (int i = 0; i < GP_N; i++)
        want += i == 6 ? 0 : sp->f[i].len;
    ASSERT(st.h2d_bytes >= want);
    ASSERT(st.h2d_bytes < want + 4 * 256); /* + the labels' alignment per batch */
    char js[16384];
    size_t len;
    ASSERT_OK(sl_pipeline_stats_json(g.pg, js, sizeof js, &len));
    ASSERT_CONTAINS(js, "\"gpu_decoded\":13");
    ASSERT_CONTAINS(js, "\"gpu_fallbacks\":1");
    gp_pair_free(&g);
}

/* More CMYK files in a batch than the hand-off's pinned fallback places:
 * the places are reused once their copies ran, and every fallback lands at
 * its own row, equal to the CPU pipeline's. */
SL_TEST(gpu_pipe_fake__many_fallbacks_in_one_batch) {
    gp_use();
    gp_cmyk_mask = 0x7fu | (1u << 9); /* files 0-6 and 9 */
    gp_batch = 8;
    gp_pair g;
    gp_pair_run(&g, -1, 0);
    ASSERT_EQ(g.zg[0], 8);
    for (int i = 0; i < GP_N; i++)
        if (gp_cmyk_mask & (1u << i))
            ASSERT(gp_pair_same(&g, i));
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(g.pg, &st));
    ASSERT_U64_EQ(st.gpu_fallbacks, 8);
    ASSERT_U64_EQ(st.gpu_decoded, GP_N - 8);
    gp_pair_free(&g);
}

/* The other outputs the CPU chain can give: a float32 HWC normalize, and no
 * normalize (uint8 HWC, the random_resized_crop + flip image): the same
 * placements, dtype and shape as the CPU pipeline, the pixels within the
 * tolerance, the CMYK fallback bit for bit. */
static void gp_output_as_cpu(int out) {
    gp_use();
    gp_out = out;
    gp_pair g;
    gp_pair_run(&g, 6, 1);
    gp_pair_pixels(&g, 6, out == GP_U8 ? "uint8 hwc" : "float32 hwc");
    gp_pair_free(&g);
}

SL_TEST(gpu_pipe_fake__uint8_hwc_without_normalize_as_cpu) { gp_output_as_cpu(GP_U8); }
SL_TEST(gpu_pipe_fake__float32_hwc_normalize_as_cpu) { gp_output_as_cpu(GP_HWC); }

/* on_error "fail": the run stops at the batch of the truncated file, naming
 * its record and the decode op, as the CPU pipeline does. */
SL_TEST(gpu_pipe_fake__bad_jpeg_fails_naming_the_record) {
    gp_use();
    gp_set s;
    gp_make(&s, -1, 5);
    size_t per = (size_t)3 * GP_OH * GP_OW;
    float *img = calloc(GP_N * per, sizeof(float));
    int64_t lab[GP_N];
    int z[GP_N + 1];
    char ec[512] = "", eg[512] = "";
    sl_pipeline *pc = gp_pipeline(&s, 0, 0), *pg = gp_pipeline(&s, 1, 0);
    ASSERT_EQ(gp_drain(pc, img, lab, z, SL_DEVICE_CPU, ec, sizeof ec), -1);
    ASSERT_EQ(z[0], 4); /* the first batch came out, the second failed */
    ASSERT_EQ(z[1], 0);
    ASSERT_EQ(gp_drain(pg, img, lab, z, SL_DEVICE_CUDA, eg, sizeof eg), -1);
    ASSERT_EQ(z[0], 4);
    ASSERT_EQ(z[1], 0);
    printf("  CPU: %s\n  GPU: %s\n", ec, eg);
    fflush(stdout);
    ASSERT_CONTAINS(ec, "record 5: ops[0]");
    ASSERT_CONTAINS(eg, "record 5: ops[0]");
    ASSERT_CONTAINS(eg, "premature end");
    /* and it keeps returning it */
    sl_batch *b;
    ASSERT(sl_pipeline_next(pg, &b) < 0);
    ASSERT_CONTAINS(sl_errmsg(), "record 5");
    sl_pipeline_free(pc);
    sl_pipeline_free(pg);
    gp_free(&s);
    free(img);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

/* on_error "skip": the truncated file costs only itself (counted, its
 * message kept); every other sample comes out, in order, as the CPU
 * pipeline gives it, in the same batches: the hand-off refills the batch
 * from the next samples as the CPU path does. */
SL_TEST(gpu_pipe_fake__bad_jpeg_skipped_costs_only_itself) {
    gp_use();
    gp_set s;
    gp_make(&s, -1, 5);
    size_t per = (size_t)3 * GP_OH * GP_OW;
    float *cpu = calloc(GP_N * per, sizeof(float)), *gpu = calloc(GP_N * per, sizeof(float));
    int64_t lc[GP_N], lg[GP_N];
    int zc[GP_N + 1], zg[GP_N + 1];
    char err[512] = "";
    sl_pipeline *pc = gp_pipeline(&s, 0, 1), *pg = gp_pipeline(&s, 1, 1);
    ASSERT_EQ(gp_drain(pc, cpu, lc, zc, SL_DEVICE_CPU, err, sizeof err), GP_N - 1);
    ASSERT_EQ(gp_drain(pg, gpu, lg, zg, SL_DEVICE_CUDA, err, sizeof err), GP_N - 1);
    ASSERT_EQ(zc[0], 4);
    ASSERT_EQ(zc[1], 4);
    for (int k = 0; zc[k] || zg[k]; k++) /* 4, 4, 4, 1: refilled, as the CPU path */
        ASSERT_EQ(zc[k], zg[k]);
    double sum = 0;
    for (int i = 0; i < GP_N - 1; i++) {
        ASSERT_EQ(lc[i], lg[i]);
        ASSERT(lg[i] != 105);
        double m, x;
        gp_diff(cpu + (size_t)i * per, gpu + (size_t)i * per, &m, &x);
        sum += m;
        ASSERT(x <= 48.0);
    }
    ASSERT(sum / (GP_N - 1) <= 1.0);
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(pg, &st));
    ASSERT_U64_EQ(st.skipped, 1);
    ASSERT_EQ(st.nerrors, 1);
    ASSERT_CONTAINS(st.errors[0], "record 5: ops[0]");
    ASSERT_U64_EQ(st.gpu_decoded, GP_N - 1);
    sl_pipeline_free(pc);
    sl_pipeline_free(pg);
    gp_free(&s);
    free(cpu);
    free(gpu);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

/* drop_remainder with a skipped sample: the remainder is dropped after the
 * refill, so the batches are the CPU pipeline's (13 good samples: three of
 * 4, one dropped), not those of the host batches (14 samples: three of 4,
 * two dropped, then one short of them). */
SL_TEST(gpu_pipe_fake__drop_remainder_after_a_skip_as_cpu) {
    gp_use();
    gp_drop = 1;
    gp_set s;
    gp_make(&s, -1, 5);
    size_t per = (size_t)3 * GP_OH * GP_OW;
    float *cpu = calloc(GP_N * per, sizeof(float)), *gpu = calloc(GP_N * per, sizeof(float));
    int64_t lc[GP_N], lg[GP_N];
    int zc[GP_N + 1], zg[GP_N + 1];
    char err[512] = "";
    sl_pipeline *pc = gp_pipeline(&s, 0, 1), *pg = gp_pipeline(&s, 1, 1);
    /* explain: what the consumer gets after the hand-off (no placements),
     * and the remainder the hand-off drops */
    char ex[8192];
    size_t len;
    ASSERT_OK(sl_pipeline_explain(pg, ex, sizeof ex, &len));
    ASSERT_CONTAINS(ex, "output: image:float32[3,96,112], label:int64[] (the images decoded on "
                        "the GPU at the hand-off) with a leading batch dim of 4 (remainder "
                        "dropped)");
    ASSERT_EQ(gp_drain(pc, cpu, lc, zc, SL_DEVICE_CPU, err, sizeof err), 12);
    ASSERT_EQ(gp_drain(pg, gpu, lg, zg, SL_DEVICE_CUDA, err, sizeof err), 12);
    for (int k = 0; zc[k] || zg[k]; k++)
        ASSERT_EQ(zc[k], zg[k]);
    for (int i = 0; i < 12; i++)
        ASSERT_EQ(lc[i], lg[i]);
    ASSERT_EQ(sl_pipeline_len(pg), sl_pipeline_len(pc));
    sl_pipeline_free(pc);
    sl_pipeline_free(pg);
    gp_free(&s);
    free(cpu);
    free(gpu);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

/* A state saved after a refilled batch (a sample skipped in it) restores
 * exactly: the rest of the epoch, and the next epoch, come out as in the
 * uninterrupted run. */
SL_TEST(gpu_pipe_fake__resume_after_a_skip_is_exact) {
    gp_use();
    gp_set s;
    gp_make(&s, 9, 5);
    size_t per = (size_t)3 * GP_OH * GP_OW;
    enum { CAP = 2 * GP_N };
    float *a = calloc(CAP * per, sizeof(float)), *b = calloc(CAP * per, sizeof(float));
    int64_t la[CAP], lb[CAP];
    int na = 0, nb = 0;
    char state[2048];
    size_t len;
    for (int run = 0; run < 2; run++) {
        sl_pipeline *p = gp_pipeline(&s, 1, 1);
        if (run == 1)
            ASSERT_OK(sl_pipeline_restore_state(p, state));
        float *img = run ? b : a;
        int64_t *lab = run ? lb : la;
        int *n = run ? &nb : &na;
        for (int epoch = 0; epoch < 2; epoch++) {
            ASSERT_OK(sl_pipeline_set_epoch(p, (uint64_t)epoch));
            if (run == 1 && epoch == 0) /* restored mid-epoch 0 */
                ASSERT_OK(sl_pipeline_restore_state(p, state));
            sl_batch *bt;
            int rc, k = 0;
            while ((rc = sl_pipeline_next(p, &bt)) == SL_OK) {
                const sl_tensor *x = sl_batch_column(bt, 0), *y = sl_batch_column(bt, 1);
                if (run == 1 || epoch > 0 || k >= 2) {
                    memcpy(img + (size_t)*n * per, x->data, x->nbytes);
                    memcpy(lab + *n, y->data, y->nbytes);
                    *n += (int)x->shape[0];
                }
                sl_batch_release(bt);
                if (run == 0 && epoch == 0 && ++k == 2) /* after the refilled batch */
                    ASSERT_OK(sl_pipeline_save_state(p, state, sizeof state, &len));
            }
            ASSERT_EQ(rc, SL_END);
        }
        sl_pipeline_free(p);
    }
    ASSERT_CONTAINS(state, "\"batch\":2");
    ASSERT_EQ(na, nb);
    ASSERT_EQ(na, (GP_N - 1) - 8 + (GP_N - 1));
    for (int i = 0; i < na; i++)
        ASSERT_EQ(la[i], lb[i]);
    ASSERT(memcmp(a, b, (size_t)na * per * sizeof(float)) == 0);
    free(a);
    free(b);
    gp_free(&s);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

/* Freed mid-epoch with a batch still held: the batch stays readable, and
 * once it is released nothing of the runtime or nvJPEG is left. */
SL_TEST(gpu_pipe_fake__free_mid_epoch_leaks_nothing) {
    gp_use();
    gp_set s;
    gp_make(&s, 2, -1);
    sl_pipeline *p = gp_pipeline(&s, 1, 0);
    sl_batch *b;
    ASSERT_OK(sl_pipeline_next(p, &b));
    sl_batch *b2;
    ASSERT_OK(sl_pipeline_next(p, &b2));
    sl_batch_release(b2);
    sl_pipeline_free(p);
    const sl_tensor *y = sl_batch_column(b, 1);
    ASSERT_EQ(((const int64_t *)y->data)[3], 103);
    sl_batch_release(b);
    gp_free(&s);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

/* What the GPU kernel does not do is refused when the pipeline is made,
 * naming the op and what decode on the GPU supports. */
static void gp_refused(gp_set *s, const char *const *ops, int device, const char *want) {
    sl_spec *spec = gp_spec(s);
    for (int i = 0; ops[i]; i++)
        ASSERT_OK(sl_spec_add_op_json(spec, ops[i]));
    if (device)
        ASSERT_OK(sl_spec_set_device(spec, SL_DEVICE_CUDA, 0, 0));
    sl_pipeline *p = NULL;
    int rc = sl_pipeline_create(&p, spec);
    if (rc >= 0)
        sl_test_fail(__FILE__, __LINE__, "created, wanted an error with \"%s\"", want);
    ASSERT_CONTAINS(sl_errmsg(), want);
    sl_spec_free(spec);
}

SL_TEST(gpu_pipe_fake__unsupported_chains_are_refused) {
    gp_use();
    gp_set s;
    gp_make(&s, -1, -1);
    const char *dec = "{\"op\": \"decode\", \"device\": \"gpu\"}";
    const char *rrc = "{\"op\": \"random_resized_crop\", \"size\": 16}";
    const char *norm = "{\"op\": \"normalize\", \"mean\": 0.5, \"std\": 0.25}";
    const char *bat = "{\"op\": \"batch\", \"size\": 4}";
    gp_refused(&s, (const char *[]){dec, rrc, "{\"op\": \"rotate\", \"degrees\": 10}", norm,
                                    bat, NULL},
               1, "ops[2] (rotate): not supported after decode on the GPU");
    gp_refused(&s, (const char *[]){dec, rrc, norm, "{\"op\": \"cast\", \"column\": \"image\", \"dtype\": \"float16\"}",
                                    bat, NULL},
               1, "ops[3] (cast): not supported after decode on the GPU");
    gp_refused(&s, (const char *[]){dec, rrc, "{\"op\": \"normalize\", \"dtype\": "
                                    "\"float16\"}", bat, NULL},
               1, "the GPU decode kernel writes float32; this normalize asks for float16");
    gp_refused(&s, (const char *[]){dec, norm, bat, NULL}, 1,
               "needs random_resized_crop (or resize + center_crop)");
    gp_refused(&s, (const char *[]){"{\"op\": \"decode\", \"device\": \"gpu\", \"mode\": "
                                    "\"gray\"}", rrc, norm, bat, NULL},
               1, "mode \"gray\"");
    gp_refused(&s, (const char *[]){dec, "{\"op\": \"resize\", \"size\": 32}", norm, bat, NULL},
               1, "add a center_crop");
    gp_refused(&s, (const char *[]){dec, "{\"op\": \"resize\", \"size\": 32}",
                                    "{\"op\": \"center_crop\", \"size\": 40}", norm, bat, NULL},
               1, "would pad");
    gp_refused(&s, (const char *[]){dec, rrc, norm, bat, NULL}, 0,
               "needs the pipeline's \"device\": \"cuda\"");
    gp_refused(&s, (const char *[]){dec, rrc, norm, "{\"op\": \"batch\", \"size\": 300}", NULL},
               1, "batches of at most 256");
    gp_free(&s);
}

/* An image folder of 10 JPEGs in a/ and b/, named with `width` characters
 * each ("00.jpg"...), or of several lengths when width is 0: its "path"
 * column is text. */
static void tx_folder(char *dir, size_t cap, int width) {
    char name[32];
    snprintf(name, sizeof name, "folder%d", width);
    sl_test_path(dir, cap, name);
    ASSERT(mkdir(dir, 0755) == 0);
    for (int i = 0; i < 10; i++) {
        char sub[700], file[800];
        snprintf(sub, sizeof sub, "%s/%c", dir, "ab"[i % 2]);
        ASSERT(mkdir(sub, 0755) == 0 || errno == EEXIST);
        if (width)
            snprintf(file, sizeof file, "%s/%0*d.jpg", sub, width, i);
        else
            snprintf(file, sizeof file, "%s/%.*s.jpg", sub, i + 1, "xxxxxxxxxxxx");
        jpeg_file f = make_jpeg(40 + 3 * i, 36 + 2 * i, TJSAMP_420, 0, i);
        FILE *fp = fopen(file, "wb");
        ASSERT(fp != NULL);
        ASSERT_EQ(fwrite(f.buf, 1, f.len, fp), f.len);
        fclose(fp);
        tjFree(f.buf);
    }
}

/* The text column's strings of a batch (stacked or ragged), in host memory:
 * counted, and each checked to name a .jpg under a/ or b/. */
static int tx_check_paths(sl_batch *b) {
    int c = sl_batch_find(b, "path");
    ASSERT(c >= 0);
    const sl_tensor *t = sl_batch_column(b, c);
    int64_t n = sl_batch_size(b);
    for (int64_t i = 0; i < n; i++) {
        const char *s;
        int64_t len;
        if (t) {
            ASSERT_EQ(t->device, SL_DEVICE_CPU);
            ASSERT_EQ(t->ndim, 2);
            len = t->shape[1];
            s = (const char *)t->data + i * len;
        } else {
            const sl_tensor *it = sl_batch_item(b, c, i);
            ASSERT(it != NULL);
            ASSERT_EQ(it->device, SL_DEVICE_CPU);
            len = it->shape[0];
            s = it->data;
        }
        ASSERT(len > 6 && (s[0] == 'a' || s[0] == 'b') && s[1] == '/');
        ASSERT(memcmp(s + len - 4, ".jpg", 4) == 0);
    }
    return (int)n;
}

/* Text columns stay on the host in device batches: the upload leaves them
 * (stacked or ragged) where the pipeline made them; GPU decode hands them
 * out from the slot's pinned staging; there, paths of several lengths are
 * refused naming .select(). The images and labels are CUDA memory. */
SL_TEST(gpu_pipe_fake__text_columns_stay_on_the_host) {
    gp_use();
    for (int width = 2; width >= 0; width -= 2) {
        char dir[600], json[1200];
        tx_folder(dir, sizeof dir, width);
        for (int gpu = 0; gpu < 2; gpu++) {
            snprintf(json, sizeof json,
                     "{\"source\": {\"image_folder\": \"%s\"}, \"ops\": [{\"op\": \"decode\", "
                     "\"device\": \"%s\"}, {\"op\": \"random_resized_crop\", \"size\": 24}, "
                     "{\"op\": \"batch\", \"size\": 4}], \"device\": \"cuda\"}",
                     dir, gpu ? "gpu" : "cpu");
            sl_spec *spec;
            ASSERT_OK(sl_spec_from_json(&spec, json));
            sl_pipeline *p;
            ASSERT_OK(sl_pipeline_create(&p, spec));
            sl_spec_free(spec);
            int n = 0, rc;
            sl_batch *b;
            while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
                ASSERT_EQ(sl_batch_column(b, sl_batch_find(b, "image"))->device, SL_DEVICE_CUDA);
                ASSERT_EQ(sl_batch_column(b, sl_batch_find(b, "label"))->device, SL_DEVICE_CUDA);
                n += tx_check_paths(b);
                sl_batch_release(b);
            }
            if (gpu && !width) {
                ASSERT_EQ(rc, SL_EUNSUPPORTED);
                ASSERT_CONTAINS(sl_errmsg(), "text column 'path'");
                ASSERT_CONTAINS(sl_errmsg(), ".select()");
            } else {
                if (rc != SL_END)
                    sl_test_fail(__FILE__, __LINE__, "width %d gpu %d: %s", width, gpu,
                                 sl_errmsg());
                ASSERT_EQ(n, 10);
            }
            sl_pipeline_free(p);
        }
    }
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}

/* resize + center_crop + flip + normalize: the same placements as the CPU
 * ops (sl_place_resize_crop; the flip from its own position) and pixels. */
SL_TEST(gpu_pipe_fake__resize_center_crop_as_cpu_pipeline) {
    gp_use();
    gp_set s;
    gp_make(&s, -1, -1);
    const char *ops[2][6] = {
        {"{\"op\": \"decode\"}", "{\"op\": \"resize\", \"size\": 120}",
         "{\"op\": \"center_crop\", \"size\": [96, 112]}", "{\"op\": \"flip\"}",
         "{\"op\": \"normalize\", \"mean\": [0.485, 0.456, 0.406], \"std\": [0.229, 0.224, "
         "0.225]}", "{\"op\": \"batch\", \"size\": 4}"},
        {"{\"op\": \"decode\", \"device\": \"gpu\"}", "{\"op\": \"resize\", \"size\": 120}",
         "{\"op\": \"center_crop\", \"size\": [96, 112]}", "{\"op\": \"flip\"}",
         "{\"op\": \"normalize\", \"mean\": [0.485, 0.456, 0.406], \"std\": [0.229, 0.224, "
         "0.225]}", "{\"op\": \"batch\", \"size\": 4}"}};
    size_t per = (size_t)3 * GP_OH * GP_OW;
    float *out[2] = {calloc(GP_N * per, sizeof(float)), calloc(GP_N * per, sizeof(float))};
    int64_t lab[2][GP_N];
    int z[GP_N + 1];
    char err[512];
    for (int g = 0; g < 2; g++) {
        sl_spec *spec = gp_spec(&s);
        ASSERT_OK(sl_spec_set_seed(spec, GP_SEED));
        for (int k = 0; k < 6; k++)
            ASSERT_OK(sl_spec_add_op_json(spec, ops[g][k]));
        if (g)
            ASSERT_OK(sl_spec_set_device(spec, SL_DEVICE_CUDA, 0, 0));
        sl_pipeline *p;
        if (sl_pipeline_create(&p, spec) != SL_OK)
            sl_test_fail(__FILE__, __LINE__, "create: %s", sl_errmsg());
        sl_spec_free(spec);
        ASSERT_EQ(gp_drain(p, out[g], lab[g], z, g ? SL_DEVICE_CUDA : SL_DEVICE_CPU, err,
                           sizeof err), GP_N);
        sl_pipeline_free(p);
    }
    long call = 0;
    double sum = 0, worst = 0;
    for (int i = 0; i < GP_N; i++) {
        ASSERT_EQ(lab[0][i], lab[1][i]);
        sl_place pl;
        sl_place_resize_crop(s.h[i], s.w[i], 1, 120, 120, GP_OH, GP_OW, &pl);
        sl_rng r;
        sl_rng_init(&r, GP_SEED, 0, (uint64_t)i, 3);
        int mirror = sl_rng_uniform(&r) < 0.5;
        float box[4];
        int lim[4], flip;
        ASSERT_EQ(gk.call(call++, box, lim, &flip), 0);
        for (int k = 0; k < 4; k++) {
            ASSERT(box[k] == (float)pl.box[k]);
            ASSERT_EQ(lim[k], pl.lim[k]);
        }
        ASSERT_EQ(flip, mirror);
        double m, x;
        gp_diff(out[0] + (size_t)i * per, out[1] + (size_t)i * per, &m, &x);
        sum += m;
        worst = x > worst ? x : worst;
    }
    printf("  resize + center_crop: GPU pipeline (stand-ins) vs CPU pipeline: mean |diff| %.3f "
           "uint8 steps, max %.1f\n", sum / GP_N, worst);
    fflush(stdout);
    ASSERT(sum / GP_N <= 1.0);
    ASSERT(worst <= 48.0);
    free(out[0]);
    free(out[1]);
    gp_free(&s);
    ASSERT_EQ(fn.live(), 0);
    nothing_left();
}
#endif

/* ---- nvJPEG on a real GPU: agreement with the CPU decode ----------------------------
 * Runs only where a CUDA device and libnvjpeg are present (scripts/gpu_check.sh
 * on a device machine); elsewhere it is a GPU skip, saying why. Tolerance
 * against libjpeg-turbo (the CPU path's decoder; IDCTs and chroma upsampling
 * differ, so not bit-exact): mean |difference| <= 1.5 per channel value and
 * no value off by more than 64; the figures measured are printed. */
#if defined(SLUICE_FAKE_NVJPEG)
SL_TEST(nvjpeg_gpu__agrees_with_cpu_decode) {
    sl_dev_backend *be = NULL;
    if (sl_dev__cuda_open(&be, 0) != SL_OK)
        sl_test_skip_gpu("no CUDA device: %s", sl_errmsg());
    if (sl_dev__nvjpeg_probe() != SL_OK) {
        sl_dev__backend_release(be);
        sl_test_skip_gpu("a CUDA device, but no nvJPEG: %s", sl_errmsg());
    }
    /* a device-to-host copy from the runtime the backend loaded */
    du_memcpy_fn memcpy_d2h = du_cuda_memcpy();
    ASSERT(memcpy_d2h != NULL);
    sl_dev_jpeg *j;
    ASSERT_OK(sl_dev__jpeg_open(&j, be));
    /* every figure is printed (and flushed) before it is judged, so a
     * failing run still says what it measured */
    printf("  nvJPEG backend: %s\n", sl_dev__jpeg_backend(j));
    fflush(stdout);
    enum { NI = 4 };
    int ws[NI] = {640, 333, 500, 97}, hs[NI] = {480, 517, 375, 61};
    int samp[NI] = {TJSAMP_420, TJSAMP_444, TJSAMP_422, TJSAMP_GRAY};
    const char *sname[NI] = {"4:2:0", "4:4:4", "4:2:2", "grey"};
    jpeg_file f[NI];
    sl_dev_jpeg_item it[NI];
    memset(it, 0, sizeof it);
    for (int i = 0; i < NI; i++) {
        f[i] = make_jpeg_px(ws[i], hs[i], samp[i], 0, i, 1);
        it[i].data = f[i].buf;
        it[i].len = f[i].len;
    }
    if (sl_dev__jpeg_decode(j, it, NI, NULL) != SL_OK)
        sl_test_fail(__FILE__, __LINE__, "sl_dev__jpeg_decode: %s", sl_errmsg());
    double sum = 0, count = 0;
    int worst = 0, decoded = 0;
    for (int i = 0; i < NI; i++) {
        if (it[i].status != SL_DEV_JPEG_OK) {
            /* nvJPEG left it to the CPU path: nothing of nvJPEG's to compare */
            printf("  %s %dx%d: left to the CPU (%s)\n", sname[i], ws[i], hs[i], it[i].why);
            fflush(stdout);
            tjFree(f[i].buf);
            continue;
        }
        size_t n = (size_t)ws[i] * hs[i] * 3;
        uint8_t *got = malloc(n), *want = turbo_rgb(&f[i], ws[i], hs[i]);
        ASSERT(got != NULL);
        ASSERT_EQ(it[i].pitch, (size_t)ws[i] * 3);
        ASSERT_EQ(memcpy_d2h(got, it[i].dev, n, 2 /* cudaMemcpyDeviceToHost */), 0);
        double isum = 0;
        int iworst = 0;
        for (size_t k = 0; k < n; k++) {
            int d = abs((int)got[k] - (int)want[k]);
            isum += d;
            iworst = d > iworst ? d : iworst;
        }
        printf("  %s %dx%d: mean |diff| %.3f, max %d\n", sname[i], ws[i], hs[i], isum / (double)n,
               iworst);
        fflush(stdout);
        sum += isum;
        count += (double)n;
        worst = iworst > worst ? iworst : worst;
        decoded++;
        free(got);
        free(want);
        tjFree(f[i].buf);
    }
    printf("  nvJPEG vs libjpeg-turbo over %d of %d images: mean |diff| %.3f, max %d\n", decoded,
           NI, count ? sum / count : 0.0, worst);
    fflush(stdout);
    /* Not judged, printed: the same sizes as ramps wrapping from 255 to 0
     * (hard edges in every channel), the images of the first GPU run, where
     * this case failed */
    for (int i = 0; i < NI; i++) {
        jpeg_file r = make_jpeg_px(ws[i], hs[i], samp[i], 0, i, 0);
        sl_dev_jpeg_item ri = {.data = r.buf, .len = r.len};
        if (sl_dev__jpeg_decode(j, &ri, 1, NULL) != SL_OK || ri.status != SL_DEV_JPEG_OK) {
            printf("  ramps %s (not judged): not decoded by nvJPEG\n", sname[i]);
        } else {
            size_t n = (size_t)ws[i] * hs[i] * 3;
            uint8_t *got = malloc(n), *want = turbo_rgb(&r, ws[i], hs[i]);
            ASSERT(got != NULL);
            ASSERT_EQ(memcpy_d2h(got, ri.dev, n, 2), 0);
            double rs = 0;
            int rw = 0;
            for (size_t k = 0; k < n; k++) {
                int d = abs((int)got[k] - (int)want[k]);
                rs += d;
                rw = d > rw ? d : rw;
            }
            printf("  ramps %s (not judged): mean |diff| %.3f, max %d\n", sname[i], rs / (double)n,
                   rw);
            free(got);
            free(want);
        }
        fflush(stdout);
        tjFree(r.buf);
    }
    /* 4:2:0 is what nearly every photograph is: nvJPEG must take it */
    ASSERT_EQ(it[0].status, SL_DEV_JPEG_OK);
    ASSERT(sum / count <= 1.5);
    ASSERT(worst <= 64);
    sl_dev__jpeg_close(j);
    sl_dev__backend_release(be);
}

/* On a GPU: nvJPEG + the kernel against the CPU path on the photos
 * (SLUICE_GPU_PHOTOS; scripts/gpu_check.sh sets it), 224 x 224. Tolerance
 * mean |difference| <= 1.0 uint8 steps, max <= 48 (the IDCTs differ as in
 * nvjpeg_gpu__agrees_with_cpu_decode, and the CPU path decodes DCT-scaled
 * where it shrinks past 2x), set from the first run on a GPU: 64 photos,
 * mean 0.432, max 31 (H200, nvJPEG 13; bench/README.md, "First GPU run"). */
SL_TEST(gpu_decode_gpu__agrees_with_cpu_path) {
    sl_dev_backend *be = NULL;
    if (sl_dev__cuda_open(&be, 0) != SL_OK)
        sl_test_skip_gpu("no CUDA device: %s", sl_errmsg());
    if (sl_dev__nvjpeg_probe() != SL_OK) {
        sl_dev__backend_release(be);
        sl_test_skip_gpu("a CUDA device, but no nvJPEG: %s", sl_errmsg());
    }
    du_memcpy_fn d2h = du_cuda_memcpy();
    ASSERT(d2h != NULL);
    GD_OH = GD_OW = 224;
    gd_agree a;
    gd_agreement(be, d2h, &a);
    printf("  GPU decode vs CPU path over %d images (%d GPU, %d CPU, %d failed): mean |diff| "
           "%.3f uint8 steps, max %.1f\n", a.n, a.on_gpu, a.on_cpu, a.failed, a.mean_steps,
           a.max_steps);
    fflush(stdout);
    ASSERT(a.on_gpu > 0);
    ASSERT(a.mean_steps <= 1.0);
    ASSERT(a.max_steps <= 48.0);
    sl_dev__backend_release(be);
}
#else
/* This build has no nvjpeg.h: the probe says how to get it. */
SL_TEST(nvjpeg_fake__build_without_header_says_so) {
    ASSERT_EQ(sl_dev__nvjpeg_probe(), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "scripts/nvjpeg_fetch.sh");
}
#endif
