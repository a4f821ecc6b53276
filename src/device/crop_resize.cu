/*
 * crop_resize.cu — GPU decode's crop + resize + flip + normalize: one RGB
 * image (nvJPEG's interleaved output, rows `pitch` bytes apart) to a float32
 * (3, oh, ow) image in device memory. The arithmetic is crop_resize_math.h,
 * shared with the CPU reference (device_crop_resize.c) that the tests check
 * against the CPU path's PIL-exact resample; that header states how the two
 * differ and by how much at most. Built with --fmad=false (CMakeLists.txt)
 * so the kernel rounds each step as the CPU reference does.
 *
 * One thread per output pixel (3 channels: the weights are shared). Built
 * by nvcc into libsluice_cuda_kernels.so beside normalize.cu. Compiled
 * here, never run on a GPU yet.
 */
#include <cuda_runtime.h>

#include "crop_resize_math.h"

struct cr_args {
    sl_cr_place place;
    float mean[3], std[3];
};

__global__ void crop_resize_kernel(void *dst, const unsigned char *src, size_t pitch, int oh,
                                   int ow, cr_args a, int hwc, int u8) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long plane = (long long)oh * ow;
    if (i >= plane)
        return;
    int oy = (int)(i / ow), ox = (int)(i % ow);
    float v[3];
    sl_cr_pixel(src, pitch, &a.place, oh, ow, oy, ox, v);
    for (int c = 0; c < 3; c++) {
        long long at = hwc ? i * 3 + c : c * plane + i;
        if (u8)
            ((unsigned char *)dst)[at] = (unsigned char)v[c];
        else
            ((float *)dst)[at] = sl_cr_normalize(v[c], a.mean[c], a.std[c]);
    }
}

/* hwc: (oh, ow, 3) instead of (3, oh, ow); u8: the uint8 values, not
 * normalized (device.h, sl_dev_crop). */
extern "C" __attribute__((visibility("default"))) int
sl_cuda_crop_resize_v2(void *dst, const void *src, size_t pitch, const float *box,
                       const int *lim, int flip, int oh, int ow, const float *mean,
                       const float *std, int hwc, int u8, void *stream) {
    cr_args a;
    for (int k = 0; k < 4; k++) {
        a.place.box[k] = box[k];
        a.place.lim[k] = lim[k];
    }
    a.place.flip = flip;
    for (int c = 0; c < 3; c++) {
        a.mean[c] = mean[c];
        a.std[c] = std[c];
    }
    long long total = (long long)oh * ow;
    if (total <= 0)
        return 0;
    unsigned threads = 256;
    unsigned blocks = (unsigned)((total + threads - 1) / threads);
    crop_resize_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(
        dst, (const unsigned char *)src, pitch, oh, ow, a, hwc, u8);
    return (int)cudaGetLastError();
}
