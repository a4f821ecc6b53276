/*
 * device_crop_resize.c — GPU decode's crop + resize + flip + normalize done
 * on the host: the host backend's implementation and the CPU reference of
 * the CUDA kernel (crop_resize.cu). Both evaluate crop_resize_math.h, so
 * what the tests check here is the kernel's arithmetic.
 */
#include "device/crop_resize_math.h"
#include "device/device.h"

void sl_dev__crop_resize_host(const sl_dev_crop *a) {
    sl_cr_place p;
    for (int k = 0; k < 4; k++) {
        p.box[k] = a->box[k];
        p.lim[k] = a->lim[k];
    }
    p.flip = a->flip;
    size_t plane = (size_t)a->oh * (size_t)a->ow;
    unsigned char *d8 = (unsigned char *)a->dst;
    for (int y = 0; y < a->oh; y++)
        for (int x = 0; x < a->ow; x++) {
            float v[3];
            sl_cr_pixel(a->src, a->pitch, &p, a->oh, a->ow, y, x, v);
            size_t i = (size_t)y * (size_t)a->ow + (size_t)x;
            for (int c = 0; c < 3; c++) {
                size_t at = a->hwc ? i * 3 + (size_t)c : (size_t)c * plane + i;
                if (a->u8)
                    d8[at] = (unsigned char)v[c];
                else
                    a->dst[at] = sl_cr_normalize(v[c], a->mean[c], a->std[c]);
            }
        }
}
