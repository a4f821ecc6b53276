/* crop.c — crop (with zero padding outside the image) and horizontal flip. */
#include "ops/ops.h"

#include <string.h>

int sl_image_crop(const sl_tensor *src, const sl_box *box, sl_tensor *out) {
    SL_TRY(sl_ops__check_image(src, "crop"));
    if (!box || box->h <= 0 || box->w <= 0)
        return sl__error(SL_EINVAL, "crop: empty box");
    if (out == src || (out->data && out->data == src->data))
        return sl__error(SL_EINVAL, "crop: output overlaps input");
    int64_t H = src->shape[0], W = src->shape[1], C = src->shape[2];
    int64_t shape[3] = {box->h, box->w, C};
    int allocated;
    SL_TRY(sl_ops__out_prepare(out, SL_U8, 3, shape, "crop", &allocated));
    const uint8_t *s = src->data;
    uint8_t *d = out->data;
    /* The part of the box inside the image; the rest is padding. */
    int64_t x0 = box->x < 0 ? 0 : box->x, x1 = (int64_t)box->x + box->w;
    int64_t y0 = box->y < 0 ? 0 : box->y, y1 = (int64_t)box->y + box->h;
    if (x1 > W)
        x1 = W;
    if (y1 > H)
        y1 = H;
    size_t orow = (size_t)box->w * C;
    for (int64_t y = 0; y < box->h; y++) {
        uint8_t *o = d + (size_t)y * orow;
        int64_t sy = box->y + y;
        if (sy < y0 || sy >= y1 || x0 >= x1) {
            memset(o, 0, orow);
            continue;
        }
        size_t left = (size_t)(x0 - box->x) * C, mid = (size_t)(x1 - x0) * C;
        memset(o, 0, left);
        memcpy(o + left, s + ((size_t)sy * W + x0) * C, mid);
        memset(o + left + mid, 0, orow - left - mid);
    }
    return SL_OK;
}

int sl_image_flip(const sl_tensor *src, sl_tensor *out) {
    SL_TRY(sl_ops__check_image(src, "flip"));
    int64_t H = src->shape[0], W = src->shape[1], C = src->shape[2];
    int in_place = out == src || out->data == src->data;
    if (!in_place) {
        int allocated;
        int64_t shape[3] = {H, W, C};
        SL_TRY(sl_ops__out_prepare(out, SL_U8, 3, shape, "flip", &allocated));
    }
    const uint8_t *s = src->data;
    uint8_t *d = out->data;
    for (int64_t y = 0; y < H; y++) {
        const uint8_t *r = s + (size_t)y * W * C;
        uint8_t *o = d + (size_t)y * W * C;
        if (C == 3) {
            for (int64_t a = 0, b = W - 1; a <= b; a++, b--) {
                uint8_t t0 = r[3 * a], t1 = r[3 * a + 1], t2 = r[3 * a + 2];
                uint8_t u0 = r[3 * b], u1 = r[3 * b + 1], u2 = r[3 * b + 2];
                o[3 * a] = u0; o[3 * a + 1] = u1; o[3 * a + 2] = u2;
                o[3 * b] = t0; o[3 * b + 1] = t1; o[3 * b + 2] = t2;
            }
        } else {
            for (int64_t a = 0, b = W - 1; a <= b; a++, b--) {
                for (int64_t c = 0; c < C; c++) {
                    uint8_t t = r[a * C + c], u = r[b * C + c];
                    o[a * C + c] = u;
                    o[b * C + c] = t;
                }
            }
        }
    }
    return SL_OK;
}
