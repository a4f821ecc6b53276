/*
 * normalize.cu — the normalize of "normalize_on_device": uint8 (N, H, W, C)
 * in, float32, float16 or bfloat16 (N, C, H, W) or (N, H, W, C) out, with the float32
 * expression of the CPU op ((x / 255 - mean) / std, each step rounded to
 * nearest, no fused multiply-add), so results should equal the CPU op's.
 *
 * Built by nvcc into libsluice_cuda_kernels.so, which libsluice loads with
 * dlopen (device_cuda.c): libsluice itself never links CUDA. One thread per
 * output element. Compiled here, never run on a GPU yet.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

struct norm_params {
    float mean[4], std[4];
};

template <typename T> __device__ T store(float v);
template <> __device__ float store<float>(float v) { return v; }
template <> __device__ __half store<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 store<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__global__ void normalize_kernel(T *dst, const unsigned char *src, long long total, long long h,
                                 long long w, int c, norm_params p, int chw) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    long long plane = h * w, per = plane * c;
    long long k = i / per, r = i % per;
    long long pix, ch;
    if (chw) {
        ch = r / plane;
        pix = r % plane;
    } else {
        pix = r / c;
        ch = r % c;
    }
    float x = (float)src[k * per + pix * c + ch];
    float v = __fdiv_rn(__fsub_rn(__fdiv_rn(x, 255.0f), p.mean[ch]), p.std[ch]);
    dst[i] = store<T>(v);
}

extern "C" __attribute__((visibility("default"))) int
sl_cuda_normalize(void *dst, const void *src, long long n, long long h, long long w, int c,
                  const float *mean, const float *std, int chw, int kind, void *stream) {
    /* kind: 0 float32, 1 float16, 2 bfloat16 */
    norm_params p;
    for (int i = 0; i < 4; i++) {
        p.mean[i] = i < c ? mean[i] : 0.0f;
        p.std[i] = i < c ? std[i] : 1.0f;
    }
    long long total = n * h * w * c;
    if (total <= 0)
        return 0;
    unsigned threads = 256;
    unsigned blocks = (unsigned)((total + threads - 1) / threads);
    cudaStream_t s = (cudaStream_t)stream;
    if (kind == 2)
        normalize_kernel<__nv_bfloat16><<<blocks, threads, 0, s>>>(
            (__nv_bfloat16 *)dst, (const unsigned char *)src, total, h, w, c, p, chw);
    else if (kind == 1)
        normalize_kernel<__half><<<blocks, threads, 0, s>>>(
            (__half *)dst, (const unsigned char *)src, total, h, w, c, p, chw);
    else
        normalize_kernel<float><<<blocks, threads, 0, s>>>(
            (float *)dst, (const unsigned char *)src, total, h, w, c, p, chw);
    return (int)cudaGetLastError();
}
