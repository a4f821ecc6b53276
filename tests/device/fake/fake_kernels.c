/*
 * fake_kernels.c — a stand-in for libsluice_cuda_kernels.so over the
 * stand-in CUDA runtime (fake_cudart.c), whose "device" memory is host
 * memory; never installed. device_cuda.c loads it through
 * SLUICE_CUDA_KERNELS, so a whole pipeline with decode on the GPU runs in
 * the tests (tests/device/test_cuda_fake.c, gpu_pipe_fake__*).
 *
 * sl_cuda_crop_resize_v2 evaluates crop_resize_math.h — the expressions the
 * CUDA kernel (src/device/crop_resize.cu) compiles — on the calling
 * thread, which is a legal schedule for the stand-in's streams (they run
 * their work at once). sl_cuda_normalize is not provided (it answers
 * "not supported"): these tests do not normalize on the device.
 * What this checks is the plumbing around the kernel, never a GPU.
 */
#include "device/crop_resize_math.h"

#include <pthread.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* Every crop_resize call's placement, in call order (the tests compare them
 * with the CPU ops' placements). */
#define LOG_MAX 4096
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long ncalls;
static sl_cr_place log_[LOG_MAX];

EXPORT long fake_kernels_calls(void) {
    pthread_mutex_lock(&mu);
    long n = ncalls;
    pthread_mutex_unlock(&mu);
    return n;
}

/* Call i's placement (0 <= i < min(calls, 4096)): 0, or -1 past the log. */
EXPORT int fake_kernels_call(long i, float box[4], int lim[4], int *flip) {
    pthread_mutex_lock(&mu);
    int ok = i >= 0 && i < ncalls && i < LOG_MAX;
    if (ok) {
        memcpy(box, log_[i].box, sizeof log_[i].box);
        memcpy(lim, log_[i].lim, sizeof log_[i].lim);
        *flip = log_[i].flip;
    }
    pthread_mutex_unlock(&mu);
    return ok ? 0 : -1;
}

EXPORT int sl_cuda_normalize(void *dst, const void *src, long long n, long long h, long long w,
                             int c, const float *mean, const float *std, int chw, int kind,
                             void *stream) {
    (void)dst, (void)src, (void)n, (void)h, (void)w, (void)c, (void)mean, (void)std, (void)chw,
        (void)kind, (void)stream;
    return 801; /* cudaErrorNotSupported */
}

EXPORT int sl_cuda_crop_resize_v2(void *dst, const void *src, size_t pitch, const float *box,
                                  const int *lim, int flip, int oh, int ow, const float *mean,
                                  const float *std, int hwc, int u8, void *stream) {
    (void)stream;
    sl_cr_place p;
    for (int k = 0; k < 4; k++) {
        p.box[k] = box[k];
        p.lim[k] = lim[k];
    }
    p.flip = flip;
    pthread_mutex_lock(&mu);
    if (ncalls < LOG_MAX)
        log_[ncalls] = p;
    ncalls++;
    pthread_mutex_unlock(&mu);
    size_t plane = (size_t)oh * (size_t)ow;
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            float v[3];
            sl_cr_pixel(src, pitch, &p, oh, ow, y, x, v);
            size_t i = (size_t)y * (size_t)ow + (size_t)x;
            for (int c = 0; c < 3; c++) {
                size_t at = hwc ? i * 3 + (size_t)c : (size_t)c * plane + i;
                if (u8)
                    ((unsigned char *)dst)[at] = (unsigned char)v[c];
                else
                    ((float *)dst)[at] = sl_cr_normalize(v[c], mean[c], std[c]);
            }
        }
    return 0;
}
