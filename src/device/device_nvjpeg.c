/*
 * device_nvjpeg.c — batched JPEG decode on the GPU with nvJPEG, loaded at
 * run time like the CUDA runtime (device_cuda.c): libsluice has no
 * link-time dependency on libnvjpeg. The code compiles against nvjpeg.h
 * (NVIDIA's nvidia-nvjpeg wheel, scripts/nvjpeg_fetch.sh, or NVJPEG_ROOT;
 * SLUICE_HAVE_NVJPEG_H) so every resolved function has the header's type;
 * without the header only the probe remains, saying what is missing.
 *
 * Decoding a batch (sl_dev__jpeg_decode):
 *   1. each image's header is read (nvjpegGetImageInfo); what nvJPEG does
 *      not decode (not 1 or 3 components — CMYK, YCCK —, a subsampling the
 *      backend lacks, an unreadable header) is marked FALLBACK at once:
 *      the caller decodes it on the CPU, where a corrupt file gets the CPU
 *      path's own error and skip policy;
 *   2. the rest are decoded in one nvjpegDecodeBatched call to interleaved
 *      RGB in device memory (one buffer per batch position, grown and
 *      reused; the backend's dev_alloc, so the stand-in runtime works too);
 *   3. when that call fails, the batch is decoded image by image
 *      (nvjpegDecode): an image that fails is marked FALLBACK, its
 *      neighbours are kept — a bad JPEG costs only itself. A failure that
 *      is not about an image (execution, allocation, internal) is an error
 *      for the whole call.
 * Backend: hardware (the A100/H100 JPEG engines) when the handle opens with
 * it, else GPU-assisted Huffman (GPU_HYBRID), else the default.
 *
 * Not wired into the pipeline yet, and not run on a GPU: the tests drive it
 * over stand-ins (tests/device/fake/), which check the plumbing only.
 */
#include "device/device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SLUICE_HAVE_NVJPEG_H
#include <nvjpeg.h>

#define NVJ_FNS(X)                                                                          \
    X(nvjpegCreateEx) X(nvjpegDestroy) X(nvjpegJpegStateCreate) X(nvjpegJpegStateDestroy)    \
    X(nvjpegGetImageInfo) X(nvjpegDecode) X(nvjpegDecodeBatchedInitialize)                  \
    X(nvjpegDecodeBatched)

static struct {
    void *lib;
    char name[160];
    char missing[384];
#define X(f) __typeof__(f) *f;
    NVJ_FNS(X)
#undef X
} nj;

static pthread_once_t nj_once = PTHREAD_ONCE_INIT;

static void load_nvjpeg(void) {
    /* SLUICE_NVJPEG names the library to load instead (a path): the tests
     * load a stand-in with it. */
    static const char *const names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"};
    nj.lib = sl__dlopen_first("SLUICE_NVJPEG", names, 3, "libnvjpeg",
                              "install NVIDIA's nvidia-nvjpeg wheel or the CUDA toolkit's "
                              "nvJPEG, and add the folder of libnvjpeg.so.13 to "
                              "LD_LIBRARY_PATH, or set SLUICE_NVJPEG to its path",
                              nj.name, sizeof nj.name, nj.missing, sizeof nj.missing);
    if (!nj.lib)
        return;
    static const sl_dlsym fns[] = {
#define X(f) {#f, offsetof(__typeof__(nj), f)},
        NVJ_FNS(X)
#undef X
    };
    sl__dlsym_all(&nj.lib, fns, sizeof fns / sizeof fns[0], &nj, nj.name, "a different version",
                  nj.missing, sizeof nj.missing);
}

int sl_dev__nvjpeg_probe(void) {
    pthread_once(&nj_once, load_nvjpeg);
    if (!nj.lib)
        return sl__error(SL_EUNSUPPORTED, "%s", nj.missing);
    return SL_OK;
}

struct sl_dev_jpeg {
    sl_dev_backend *be;             /* a reference: device memory comes from it */
    nvjpegHandle_t h;
    nvjpegJpegState_t st;
    const char *backend;
    int batch_init;                 /* the size nvjpegDecodeBatchedInitialize last had */
    void *out[SL_DEV_JPEG_MAX];     /* device RGB per batch position */
    size_t cap[SL_DEV_JPEG_MAX];
    uint64_t gpu_images, fallbacks;
};

static const char *status_name(nvjpegStatus_t s) {
    switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "incomplete bitstream";
    default: return "unknown status";
    }
}

/* A status about the image (decode it on the CPU) rather than the device. */
static int image_status(nvjpegStatus_t s) {
    return s == NVJPEG_STATUS_BAD_JPEG || s == NVJPEG_STATUS_JPEG_NOT_SUPPORTED ||
           s == NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED ||
           s == NVJPEG_STATUS_INCOMPLETE_BITSTREAM || s == NVJPEG_STATUS_INVALID_PARAMETER;
}

void sl_dev__jpeg_close(sl_dev_jpeg *j) {
    if (!j)
        return;
    for (int i = 0; i < SL_DEV_JPEG_MAX; i++)
        if (j->out[i])
            j->be->ops->dev_free(j->be, j->out[i]);
    if (j->st)
        (void)nj.nvjpegJpegStateDestroy(j->st);
    if (j->h)
        (void)nj.nvjpegDestroy(j->h);
    sl_dev__backend_release(j->be);
    sl__free(j);
}

int sl_dev__jpeg_open(sl_dev_jpeg **out, sl_dev_backend *be) {
    *out = NULL;
    SL_TRY(sl_dev__nvjpeg_probe());
    if (be->ops->device != SL_DEVICE_CUDA)
        return sl__error(SL_EINVAL, "nvJPEG decodes on a CUDA device, not on \"%s\"", be->ops->name);
    sl_dev_jpeg *j = sl__calloc(1, sizeof *j);
    if (!j)
        return sl__oom("opening nvJPEG");
    sl_dev__backend_retain(be);
    j->be = be;
    static const struct {
        nvjpegBackend_t b;
        const char *name;
    } order[] = {{NVJPEG_BACKEND_HARDWARE, "hardware"},
                 {NVJPEG_BACKEND_GPU_HYBRID, "gpu_hybrid"},
                 {NVJPEG_BACKEND_DEFAULT, "default"}};
    nvjpegStatus_t s = NVJPEG_STATUS_NOT_INITIALIZED;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        s = nj.nvjpegCreateEx(order[i].b, NULL, NULL, 0, &j->h);
        if (s == NVJPEG_STATUS_SUCCESS) {
            j->backend = order[i].name;
            break;
        }
        j->h = NULL;
    }
    if (s != NVJPEG_STATUS_SUCCESS) {
        sl_dev__jpeg_close(j);
        return sl__error(SL_EUNSUPPORTED, "nvJPEG: nvjpegCreateEx: %s (status %d) with every "
                                          "backend", status_name(s), (int)s);
    }
    s = nj.nvjpegJpegStateCreate(j->h, &j->st);
    if (s != NVJPEG_STATUS_SUCCESS) {
        j->st = NULL;
        sl_dev__jpeg_close(j);
        return sl__error(SL_EIO, "nvJPEG: nvjpegJpegStateCreate: %s (status %d)", status_name(s),
                         (int)s);
    }
    *out = j;
    return SL_OK;
}

const char *sl_dev__jpeg_backend(const sl_dev_jpeg *j) { return j->backend; }

void sl_dev__jpeg_counts(const sl_dev_jpeg *j, uint64_t *gpu_images, uint64_t *fallbacks) {
    *gpu_images = j->gpu_images;
    *fallbacks = j->fallbacks;
}

static void fall_back(sl_dev_jpeg *j, sl_dev_jpeg_item *it, const char *fmt, const char *a,
                      int b) {
    it->status = SL_DEV_JPEG_FALLBACK;
    snprintf(it->why, sizeof it->why, fmt, a, b);
    j->fallbacks++;
}

/* Step 1 for one image: can nvJPEG take it, and room for its pixels. */
static int screen(sl_dev_jpeg *j, int i, sl_dev_jpeg_item *it) {
    int nc = 0, w[NVJPEG_MAX_COMPONENT] = {0}, h[NVJPEG_MAX_COMPONENT] = {0};
    nvjpegChromaSubsampling_t css = NVJPEG_CSS_UNKNOWN;
    nvjpegStatus_t s = nj.nvjpegGetImageInfo(j->h, it->data, it->len, &nc, &css, w, h);
    it->width = w[0];
    it->height = h[0];
    if (s != NVJPEG_STATUS_SUCCESS) {
        fall_back(j, it, "nvjpegGetImageInfo: %s (status %d)", status_name(s), (int)s);
        return SL_OK;
    }
    if (nc != 1 && nc != 3) {
        fall_back(j, it, "%s components (CMYK or YCCK): %d", "not 1 or 3", nc);
        return SL_OK;
    }
    if (css == NVJPEG_CSS_UNKNOWN || (!strcmp(j->backend, "hardware") &&
                                      (css == NVJPEG_CSS_410 || css == NVJPEG_CSS_411 ||
                                       css == NVJPEG_CSS_410V))) {
        fall_back(j, it, "chroma subsampling %s%d not decoded by this backend", "#", (int)css);
        return SL_OK;
    }
    if (w[0] <= 0 || h[0] <= 0) {
        fall_back(j, it, "%s %d", "empty image, width", w[0]);
        return SL_OK;
    }
    size_t need = (size_t)w[0] * (size_t)h[0] * 3;
    if (j->cap[i] < need) {
        if (j->out[i])
            j->be->ops->dev_free(j->be, j->out[i]);
        j->out[i] = NULL;
        j->cap[i] = 0;
        SL_TRY(j->be->ops->dev_alloc(j->be, need, &j->out[i]));
        j->cap[i] = need;
    }
    it->dev = j->out[i];
    it->pitch = (size_t)w[0] * 3;
    it->status = SL_DEV_JPEG_OK;
    return SL_OK;
}

static nvjpegImage_t dest_of(const sl_dev_jpeg_item *it) {
    nvjpegImage_t d;
    memset(&d, 0, sizeof d);
    d.channel[0] = it->dev;
    d.pitch[0] = it->pitch;
    return d;
}

sl_dev_backend *sl_dev__jpeg_backend_of(sl_dev_jpeg *j) { return j->be; }

int sl_dev__jpeg_decode(sl_dev_jpeg *j, sl_dev_jpeg_item *items, int n, void *stream) {
    if (n < 0 || n > SL_DEV_JPEG_MAX)
        return sl__error(SL_EINVAL, "nvJPEG: a batch of %d images (1 to %d)", n, SL_DEV_JPEG_MAX);
    const unsigned char *data[SL_DEV_JPEG_MAX];
    size_t len[SL_DEV_JPEG_MAX];
    nvjpegImage_t dst[SL_DEV_JPEG_MAX];
    int pos[SL_DEV_JPEG_MAX], m = 0;
    cudaStream_t cs = (cudaStream_t)stream;
    for (int i = 0; i < n; i++) {
        sl_dev_jpeg_item *it = &items[i];
        it->status = SL_DEV_JPEG_FALLBACK;
        it->dev = NULL;
        it->pitch = 0;
        it->why[0] = '\0';
        it->width = it->height = 0;
        SL_TRY(screen(j, i, it));
        if (it->status == SL_DEV_JPEG_OK) {
            data[m] = it->data;
            len[m] = it->len;
            dst[m] = dest_of(it);
            pos[m++] = i;
        }
    }
    if (m == 0)
        return SL_OK;
    nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
    if (j->batch_init != m) {
        s = nj.nvjpegDecodeBatchedInitialize(j->h, j->st, m, 1, NVJPEG_OUTPUT_RGBI);
        j->batch_init = s == NVJPEG_STATUS_SUCCESS ? m : 0;
    }
    if (s == NVJPEG_STATUS_SUCCESS)
        s = nj.nvjpegDecodeBatched(j->h, j->st, data, len, dst, cs);
    if (s == NVJPEG_STATUS_SUCCESS) {
        j->gpu_images += (uint64_t)m;
        return SL_OK;
    }
    if (!image_status(s))
        return sl__error(SL_EIO, "nvJPEG: nvjpegDecodeBatched: %s (status %d)", status_name(s),
                         (int)s);
    /* Step 3: one bad image failed the batch; find it, keep the others. */
    j->batch_init = 0; /* the state is reset for the next batch */
    for (int k = 0; k < m; k++) {
        sl_dev_jpeg_item *it = &items[pos[k]];
        s = nj.nvjpegDecode(j->h, j->st, data[k], len[k], NVJPEG_OUTPUT_RGBI, &dst[k], cs);
        if (s == NVJPEG_STATUS_SUCCESS) {
            j->gpu_images++;
        } else if (image_status(s)) {
            it->dev = NULL;
            fall_back(j, it, "nvjpegDecode: %s (status %d)", status_name(s), (int)s);
        } else {
            return sl__error(SL_EIO, "nvJPEG: nvjpegDecode: %s (status %d)", status_name(s),
                             (int)s);
        }
    }
    return SL_OK;
}

#else /* no nvjpeg.h at build time */

int sl_dev__nvjpeg_probe(void) {
    return sl__error(SL_EUNSUPPORTED, "this build has no nvJPEG decoder (nvjpeg.h was not found "
                                      "at build time: run scripts/nvjpeg_fetch.sh or set "
                                      "NVJPEG_ROOT, then configure again)");
}

int sl_dev__jpeg_open(sl_dev_jpeg **out, sl_dev_backend *be) {
    (void)be;
    *out = NULL;
    return sl_dev__nvjpeg_probe();
}

void sl_dev__jpeg_close(sl_dev_jpeg *j) { (void)j; }

const char *sl_dev__jpeg_backend(const sl_dev_jpeg *j) {
    (void)j;
    return "none";
}

void sl_dev__jpeg_counts(const sl_dev_jpeg *j, uint64_t *gpu_images, uint64_t *fallbacks) {
    (void)j;
    *gpu_images = *fallbacks = 0;
}

int sl_dev__jpeg_decode(sl_dev_jpeg *j, sl_dev_jpeg_item *items, int n, void *stream) {
    (void)j; (void)items; (void)n; (void)stream;
    return sl_dev__nvjpeg_probe();
}

sl_dev_backend *sl_dev__jpeg_backend_of(sl_dev_jpeg *j) {
    (void)j;
    return NULL;
}

#endif
