/*
 * decode_view.c — sl_view_decode: decode + crop + resize (+ mirror +
 * ToDtype + Normalize) into a caller's view, the fused path of
 * sluice.transforms (DecodeJPEG followed by a crop or resize).
 *
 * It is sl_ops__decode_box (the region decode at a reduced DCT scale, with
 * restart intervals when the file has them) writing either uint8 pixels or,
 * through sl_ops__norm, float32 values made by a table of v2's
 * x * float32(1/255), - mean, / std: the same bits as ToDtype(scale=True)
 * then Normalize on the uint8 result, without that result ever existing.
 */
#include "ops/view.h"

#include <string.h>

/* The view is `h` contiguous rows of w * c interleaved bytes. */
static int hwc_dense(const sl_image_view *v) {
    return v->sc == 1 && v->sw == v->c && v->sh == (int64_t)v->w * v->c;
}
static int chw_dense(const sl_image_view *v) {
    return v->sw == 1 && v->sh == v->w && v->sc == (int64_t)v->h * v->w;
}

int sl_view_decode(sl_decoder *dec, const void *data, size_t size, const double box[4],
                   const int lim[4], sl_interp interp, const float *mean, const float *std,
                   int flags, const sl_image_view *dst) {
    if (!dec || !box || !lim || (!data && size))
        return sl__error(SL_EINVAL, "decode: NULL argument");
    SL_TRY(sl_ops__view_check(dst, "decode", "destination"));
    if (dst->c != 1 && dst->c != 3)
        return sl__error(SL_EINVAL, "decode: the destination has %d channels; expected 1 or 3",
                         dst->c);
    if (!sl_ops__interp_pil(interp))
        return sl__error(SL_EINVAL, "decode: unknown interpolation %d", (int)interp);
    if (flags & ~(SL_VIEW_FLIP_H | SL_VIEW_SCALE))
        return sl__error(SL_EINVAL, "decode: flags %#x (only SL_VIEW_FLIP_H, SL_VIEW_SCALE)",
                         (unsigned)flags);
    if (dst->dtype == SL_F32 && std)
        for (int k = 0; k < dst->c; k++)
            if (std[k] == 0.0f)
                return sl__error(SL_EINVAL, "decode: std[%d] is 0 (division by zero)", k);
    sl_image_info info;
    SL_TRY(sl_decode_info(dec, data, size, &info));
    if (!(lim[0] >= 0 && lim[1] >= 0 && lim[2] <= info.width && lim[3] <= info.height &&
          lim[0] < lim[2] && lim[1] < lim[3] && box[0] >= lim[0] && box[1] >= lim[1] &&
          box[2] <= lim[2] && box[3] <= lim[3] && box[0] < box[2] && box[1] < box[3]))
        return sl__error(SL_EINVAL,
                         "decode: box (%g, %g, %g, %g) or limit (%d, %d, %d, %d) outside the "
                         "%dx%d image",
                         box[0], box[1], box[2], box[3], lim[0], lim[1], lim[2], lim[3],
                         info.width, info.height);
    sl_color color = dst->c == 1 ? SL_COLOR_GRAY : SL_COLOR_RGB;
    if (dst->dtype == SL_U8 && hwc_dense(dst)) {
        SL_TRY(sl_ops__decode_box(dec, data, size, color, box, lim, dst->h, dst->w, interp,
                                  dst->data, NULL));
        if (flags & SL_VIEW_FLIP_H) {
            sl_tensor t;
            int64_t shape[3] = {dst->h, dst->w, dst->c};
            sl_tensor_view(&t, dst->data, SL_U8, 3, shape);
            return sl_image_flip(&t, &t);
        }
        return SL_OK;
    }
    if (dst->dtype == SL_F32 && (hwc_dense(dst) || chw_dense(dst))) {
        float lut[3][256];
        const float up = (flags & SL_VIEW_SCALE) ? SL_VIEW_UP : 1.0f;
        for (int k = 0; k < dst->c; k++)
            for (int i = 0; i < 256; i++) {
                float v = (float)i * up;
                if (mean && std) {
                    float t = v - mean[k];
                    v = t / std[k];
                }
                lut[k][i] = v;
            }
        sl_ops__norm nm = {(const float(*)[256])lut,
                           chw_dense(dst) && !(dst->c == 1) ? SL_LAYOUT_CHW : SL_LAYOUT_HWC,
                           (flags & SL_VIEW_FLIP_H) != 0};
        return sl_ops__decode_box(dec, data, size, color, box, lim, dst->h, dst->w, interp,
                                  dst->data, &nm);
    }
    /* Any other layout: decode into a staging image, then copy over. */
    size_t n = (size_t)dst->h * dst->w * dst->c;
    uint8_t *buf = sl__malloc(n);
    if (!buf)
        return sl__oom("decode: staging image");
    int rc = sl_ops__decode_box(dec, data, size, color, box, lim, dst->h, dst->w, interp, buf,
                                NULL);
    if (rc == SL_OK) {
        sl_image_view s = {buf, SL_U8, dst->h, dst->w, dst->c, (int64_t)dst->w * dst->c, dst->c,
                           1};
        if (dst->dtype == SL_F32 && mean && std)
            rc = sl_view_normalize(&s, dst, mean, std, flags);
        else
            rc = sl_view_convert(&s, dst, flags);
    }
    sl__free(buf);
    return rc;
}
