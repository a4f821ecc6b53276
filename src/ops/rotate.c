/*
 * rotate.c — rotation about the centre, matching PIL's
 * Image.rotate(angle, BILINEAR, expand=False, fillcolor=fill): the same
 * affine matrix (coefficients rounded to 15 decimals as PIL does), sampled
 * at output pixel centres, bilinear with edge clamping, truncated to 8 bits;
 * a sample whose centre maps outside the source gets `fill`.
 */
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Python's round(x, 15): correctly rounded through decimal text. */
static double round15(double x) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.15f", x);
    return strtod(buf, NULL);
}

int sl_image_rotate(const sl_tensor *src, double degrees, uint8_t fill, sl_tensor *out) {
    SL_TRY(sl_ops__check_image(src, "rotate"));
    if (!isfinite(degrees))
        return sl__error(SL_EINVAL, "rotate: angle is not finite");
    if (out == src || (out->data && out->data == src->data))
        return sl__error(SL_EINVAL, "rotate: output overlaps input");
    int64_t H = src->shape[0], W = src->shape[1], C = src->shape[2];
    int64_t shape[3] = {H, W, C};
    int allocated;
    SL_TRY(sl_ops__out_prepare(out, SL_U8, 3, shape, "rotate", &allocated));
    double ang = fmod(degrees, 360.0);
    if (ang < 0)
        ang += 360.0;
    ang = -ang * (M_PI / 180.0);
    double a0 = round15(cos(ang)), a1 = round15(sin(ang));
    double a3 = round15(-sin(ang)), a4 = round15(cos(ang));
    double cx = W / 2.0, cy = H / 2.0;
    double a2 = a0 * -cx + a1 * -cy + 0.0;
    double a5 = a3 * -cx + a4 * -cy + 0.0;
    a2 += cx;
    a5 += cy;
    const uint8_t *s = src->data;
    uint8_t *d = out->data;
    size_t stride = (size_t)W * C;
    for (int64_t y = 0; y < H; y++) {
        uint8_t *o = d + (size_t)y * stride;
        double yc = y + 0.5;
        for (int64_t x = 0; x < W; x++, o += C) {
            double xc = x + 0.5;
            double xin = a0 * xc + a1 * yc + a2;
            double yin = a3 * xc + a4 * yc + a5;
            if (xin < 0.0 || xin >= W || yin < 0.0 || yin >= H) {
                memset(o, fill, C);
                continue;
            }
            xin -= 0.5;
            yin -= 0.5;
            int64_t ix = (int64_t)floor(xin), iy = (int64_t)floor(yin);
            double dx = xin - ix, dy = yin - iy;
            int64_t x0 = ix < 0 ? 0 : (ix < W ? ix : W - 1);
            int64_t x1 = ix + 1 < 0 ? 0 : (ix + 1 < W ? ix + 1 : W - 1);
            int64_t y0 = iy < 0 ? 0 : (iy < H ? iy : H - 1);
            const uint8_t *r0 = s + (size_t)y0 * stride;
            const uint8_t *r1 = iy + 1 >= 0 && iy + 1 < H ? s + (size_t)(iy + 1) * stride : NULL;
            for (int64_t c = 0; c < C; c++) {
                double p0 = r0[x0 * C + c], p1 = r0[x1 * C + c];
                double v1 = p0 + (p1 - p0) * dx, v2 = v1;
                if (r1) {
                    double q0 = r1[x0 * C + c], q1 = r1[x1 * C + c];
                    v2 = q0 + (q1 - q0) * dx;
                }
                v1 = v1 + (v2 - v1) * dy;
                o[c] = (uint8_t)v1;
            }
        }
    }
    return SL_OK;
}
