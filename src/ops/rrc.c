/*
 * rrc.c — crop boxes: torchvision's RandomResizedCrop.get_params, Resize(int)
 * output shape and CenterCrop offsets, with its rounding rules (Python's
 * round() is half-to-even: rint() in the default rounding mode).
 */
#include "ops/ops.h"

#include <math.h>

#define RRC_TRIES 10

static int check_args(int height, int width, const double scale[2], const double ratio[2]) {
    if (height <= 0 || width <= 0)
        return sl__error(SL_EINVAL, "random_resized_crop: empty %dx%d image", width, height);
    if (!(scale[0] > 0 && scale[0] <= scale[1]) || !(ratio[0] > 0 && ratio[0] <= ratio[1]))
        return sl__error(SL_EINVAL,
                         "random_resized_crop: scale [%g, %g] and ratio [%g, %g] must be "
                         "positive and ordered", scale[0], scale[1], ratio[0], ratio[1]);
    return SL_OK;
}

int sl_rrc_box_draws(int height, int width, const double scale[2], const double ratio[2],
                     const double draws[40], sl_box *out) {
    SL_TRY(check_args(height, width, scale, ratio));
    double area = (double)height * width;
    /* torch: log of a float32 tensor, uniform_ in float32, exp in float32 */
    float lr0 = logf((float)ratio[0]), lr1 = logf((float)ratio[1]);
    float s0 = (float)scale[0], s1 = (float)scale[1];
    for (int k = 0; k < RRC_TRIES; k++) {
        const double *u = draws + 4 * k;
        float us = (float)u[0] * (s1 - s0) + s0;
        float ur = (float)u[1] * (lr1 - lr0) + lr0;
        double target_area = area * (double)us;
        double aspect = (double)expf(ur);
        double w = rint(sqrt(target_area * aspect));
        double h = rint(sqrt(target_area / aspect));
        if (w > 0 && w <= width && h > 0 && h <= height) {
            int iw = (int)w, ih = (int)h;
            out->h = ih;
            out->w = iw;
            out->y = (int)floor(u[2] * (height - ih + 1));
            out->x = (int)floor(u[3] * (width - iw + 1));
            if (out->y > height - ih)
                out->y = height - ih;
            if (out->x > width - iw)
                out->x = width - iw;
            return SL_OK;
        }
    }
    double in_ratio = (double)width / (double)height;
    int w, h;
    if (in_ratio < ratio[0]) {
        w = width;
        h = (int)rint(w / ratio[0]);
    } else if (in_ratio > ratio[1]) {
        h = height;
        w = (int)rint(h * ratio[1]);
    } else {
        w = width;
        h = height;
    }
    out->h = h;
    out->w = w;
    out->y = (height - h) / 2;
    out->x = (width - w) / 2;
    return SL_OK;
}

int sl_rrc_box(int height, int width, const double scale[2], const double ratio[2],
               sl_rng *rng, sl_box *out) {
    double draws[4 * RRC_TRIES];
    for (int i = 0; i < 4 * RRC_TRIES; i++)
        draws[i] = sl_rng_uniform(rng);
    return sl_rrc_box_draws(height, width, scale, ratio, draws, out);
}

void sl_resize_shorter_shape(int height, int width, int size, int *out_h, int *out_w) {
    if (width <= height) {
        *out_w = size;
        *out_h = (int)((double)size * height / width);
    } else {
        *out_h = size;
        *out_w = (int)((double)size * width / height);
    }
}

void sl_center_crop_box(int height, int width, int crop_h, int crop_w, sl_box *out) {
    out->h = crop_h;
    out->w = crop_w;
    /* torchvision pads a too-small image by (crop - size) // 2 on the top/left */
    out->y = crop_h > height ? -((crop_h - height) / 2) : (int)rint((height - crop_h) / 2.0);
    out->x = crop_w > width ? -((crop_w - width) / 2) : (int)rint((width - crop_w) / 2.0);
}
