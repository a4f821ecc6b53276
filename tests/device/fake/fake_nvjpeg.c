/*
 * fake_nvjpeg.c — an nvJPEG stand-in for tests without a GPU, built as
 * libsluice_fake_nvjpeg.so when nvjpeg.h is found (never installed);
 * device_nvjpeg.c loads it through SLUICE_NVJPEG. It has the header's
 * signatures for the 8 functions sluice resolves and decodes with
 * libjpeg-turbo into the "device" memory of the stand-in CUDA runtime
 * (host memory), modelling what the decoder must cope with:
 *   - nvjpegGetImageInfo reports 4 components for CMYK/YCCK files and
 *     NVJPEG_STATUS_BAD_JPEG for an unreadable header;
 *   - one image that fails to decode fails the whole nvjpegDecodeBatched
 *     call (the reason sluice retries image by image);
 *   - the hardware backend can be refused (a GPU without JPEG engines):
 *     SLUICE_FAKE_NVJPEG_NO_HARDWARE=1.
 * Its pixels are libjpeg-turbo's: it checks plumbing, never a GPU's decode.
 * fake_nvjpeg_live() returns the handles and states still open.
 */
#include <nvjpeg.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long live, batched_calls, single_calls;

struct nvjpegHandle {
    int backend;
};
struct nvjpegJpegState {
    int batch;
};

EXPORT long fake_nvjpeg_live(void) {
    pthread_mutex_lock(&mu);
    long n = live;
    pthread_mutex_unlock(&mu);
    return n;
}

/* Calls of nvjpegDecodeBatched and nvjpegDecode so far. */
EXPORT long fake_nvjpeg_calls(int batched) {
    pthread_mutex_lock(&mu);
    long n = batched ? batched_calls : single_calls;
    pthread_mutex_unlock(&mu);
    return n;
}

static void count(long d) {
    pthread_mutex_lock(&mu);
    live += d;
    pthread_mutex_unlock(&mu);
}

EXPORT nvjpegStatus_t nvjpegCreateEx(nvjpegBackend_t backend, nvjpegDevAllocator_t *dev_allocator,
                                     nvjpegPinnedAllocator_t *pinned_allocator, unsigned int flags,
                                     nvjpegHandle_t *handle) {
    const char *nohw = getenv("SLUICE_FAKE_NVJPEG_NO_HARDWARE");
    if (!handle || flags)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    if (backend == NVJPEG_BACKEND_HARDWARE && nohw && *nohw == '1')
        return NVJPEG_STATUS_ARCH_MISMATCH;
    struct nvjpegHandle *h = calloc(1, sizeof *h);
    if (!h)
        return NVJPEG_STATUS_ALLOCATOR_FAILURE;
    h->backend = (int)backend;
    count(1);
    *handle = h;
    return NVJPEG_STATUS_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegDestroy(nvjpegHandle_t handle) {
    if (!handle)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    free(handle);
    count(-1);
    return NVJPEG_STATUS_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegJpegStateCreate(nvjpegHandle_t handle, nvjpegJpegState_t *state) {
    if (!handle || !state)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    *state = calloc(1, sizeof **state);
    if (!*state)
        return NVJPEG_STATUS_ALLOCATOR_FAILURE;
    count(1);
    return NVJPEG_STATUS_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegJpegStateDestroy(nvjpegJpegState_t state) {
    if (!state)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    free(state);
    count(-1);
    return NVJPEG_STATUS_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegGetImageInfo(nvjpegHandle_t handle, const unsigned char *data,
                                         size_t length, int *ncomp,
                                         nvjpegChromaSubsampling_t *css, int *widths,
                                         int *heights) {
    if (!handle || !data)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    tjhandle tj = tjInitDecompress();
    int w = 0, h = 0, sub = 0, cs = 0;
    int rc = tj ? tjDecompressHeader3(tj, data, (unsigned long)length, &w, &h, &sub, &cs) : -1;
    if (tj)
        tjDestroy(tj);
    if (rc != 0)
        return NVJPEG_STATUS_BAD_JPEG;
    static const nvjpegChromaSubsampling_t map[] = {
        [TJSAMP_444] = NVJPEG_CSS_444, [TJSAMP_422] = NVJPEG_CSS_422,
        [TJSAMP_420] = NVJPEG_CSS_420, [TJSAMP_GRAY] = NVJPEG_CSS_GRAY,
        [TJSAMP_440] = NVJPEG_CSS_440, [TJSAMP_411] = NVJPEG_CSS_411};
    *ncomp = cs == TJCS_GRAY ? 1 : (cs == TJCS_CMYK || cs == TJCS_YCCK) ? 4 : 3;
    *css = sub >= 0 && sub < (int)(sizeof map / sizeof map[0]) ? map[sub] : NVJPEG_CSS_UNKNOWN;
    for (int i = 0; i < NVJPEG_MAX_COMPONENT; i++)
        widths[i] = heights[i] = 0;
    widths[0] = w;
    heights[0] = h;
    return NVJPEG_STATUS_SUCCESS;
}

static nvjpegStatus_t decode_one(const unsigned char *data, size_t length, nvjpegImage_t *dst) {
    tjhandle tj = tjInitDecompress();
    int w = 0, h = 0, sub = 0, cs = 0;
    if (!tj)
        return NVJPEG_STATUS_ALLOCATOR_FAILURE;
    nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
    if (tjDecompressHeader3(tj, data, (unsigned long)length, &w, &h, &sub, &cs) != 0)
        s = NVJPEG_STATUS_BAD_JPEG;
    else if (cs == TJCS_CMYK || cs == TJCS_YCCK)
        s = NVJPEG_STATUS_JPEG_NOT_SUPPORTED;
    else if (tjDecompress2(tj, data, (unsigned long)length, dst->channel[0], w,
                           (int)dst->pitch[0], h, TJPF_RGB, TJFLAG_ACCURATEDCT) != 0)
        s = NVJPEG_STATUS_BAD_JPEG; /* a truncated file too (a warning for libjpeg) */
    tjDestroy(tj);
    return s;
}

EXPORT nvjpegStatus_t nvjpegDecode(nvjpegHandle_t handle, nvjpegJpegState_t state,
                                   const unsigned char *data, size_t length,
                                   nvjpegOutputFormat_t fmt, nvjpegImage_t *dst,
                                   cudaStream_t stream) {
    if (!handle || !state || fmt != NVJPEG_OUTPUT_RGBI || !dst || !dst->channel[0])
        return NVJPEG_STATUS_INVALID_PARAMETER;
    pthread_mutex_lock(&mu);
    single_calls++;
    pthread_mutex_unlock(&mu);
    return decode_one(data, length, dst);
}

EXPORT nvjpegStatus_t nvjpegDecodeBatchedInitialize(nvjpegHandle_t handle,
                                                    nvjpegJpegState_t state, int batch_size,
                                                    int max_cpu_threads,
                                                    nvjpegOutputFormat_t fmt) {
    if (!handle || !state || batch_size < 1 || max_cpu_threads < 1 || fmt != NVJPEG_OUTPUT_RGBI)
        return NVJPEG_STATUS_INVALID_PARAMETER;
    state->batch = batch_size;
    return NVJPEG_STATUS_SUCCESS;
}

EXPORT nvjpegStatus_t nvjpegDecodeBatched(nvjpegHandle_t handle, nvjpegJpegState_t state,
                                          const unsigned char *const *data,
                                          const size_t *lengths, nvjpegImage_t *dsts,
                                          cudaStream_t stream) {
    if (!handle || !state || state->batch < 1)
        return NVJPEG_STATUS_NOT_INITIALIZED;
    pthread_mutex_lock(&mu);
    batched_calls++;
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < state->batch; i++) {
        nvjpegStatus_t s = decode_one(data[i], lengths[i], &dsts[i]);
        if (s != NVJPEG_STATUS_SUCCESS) {
            state->batch = 0; /* a failed batch must be initialised again */
            return s;
        }
    }
    return NVJPEG_STATUS_SUCCESS;
}
