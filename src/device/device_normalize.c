/*
 * device_normalize.c — the normalize of "normalize_on_device" done on the
 * host, for the host backend: the same float32 expression as normalize.c
 * ((x / 255 - mean) / std, each step rounded as float32, no fused
 * multiply-add) so that results equal the CPU op's bit for bit. The CUDA
 * kernel (normalize.cu) evaluates the same expression with the same
 * rounding (__fdiv_rn, __fsub_rn, __float2half_rn, __float2bfloat16_rn).
 */
#include "device/device.h"
#include "ops/ops.h"

void sl_dev__normalize_host(const sl_dev_norm *a) {
    size_t H = (size_t)a->h, W = (size_t)a->w, C = (size_t)a->c, plane = H * W;
    float lut[4][256];
    for (size_t c = 0; c < C; c++)
        for (int i = 0; i < 256; i++)
            lut[c][i] = ((float)i / 255.0f - a->mean[c]) / a->std[c];
    size_t per = plane * C;
    for (int64_t k = 0; k < a->n; k++) {
        const uint8_t *s = (const uint8_t *)a->src + (size_t)k * per;
        for (size_t p = 0; p < plane; p++) {
            for (size_t c = 0; c < C; c++) {
                float v = lut[c][s[p * C + c]];
                size_t o = (size_t)k * per + (a->chw ? c * plane + p : p * C + c);
                if (a->dtype == SL_F32)
                    ((float *)a->dst)[o] = v;
                else if (a->dtype == SL_BF16)
                    ((uint16_t *)a->dst)[o] = sl_ops__f32_to_bf16(v);
                else
                    ((uint16_t *)a->dst)[o] = sl_ops__f32_to_f16(v);
            }
        }
    }
}
