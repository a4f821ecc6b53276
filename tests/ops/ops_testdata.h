/*
 * ops_testdata.h — test images made by the tests themselves: smooth,
 * textured synthetic pictures encoded with libjpeg-turbo (TurboJPEG) and
 * libspng. No binary files are kept in the repository.
 */
#ifndef SL_OPS_TESTDATA_H
#define SL_OPS_TESTDATA_H

#include "test.h"

#include <math.h>
#include <spng.h>
#include <turbojpeg.h>
#include <zlib.h>

/* A picture-like RGB image: gradients, a disc and some fine texture, so that
 * resampling and DCT scaling have edges and detail to get wrong. */
static inline uint8_t *td_picture(int w, int h, int seed) {
    uint8_t *p = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            double fx = (double)x / w, fy = (double)y / h;
            double dx = fx - 0.5, dy = fy - 0.45;
            int disc = dx * dx + dy * dy < 0.06;
            double tex = 20 * sin(x * 0.9 + seed) * cos(y * 0.7);
            double r = 60 + 150 * fx + (disc ? 40 : 0) + tex;
            double g = 40 + 170 * fy - (disc ? 30 : 0) + 0.5 * tex;
            double b = 120 + 80 * sin(6.0 * fx + 3.0 * fy + seed) - tex;
            uint8_t *q = p + ((size_t)y * w + x) * 3;
            q[0] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
            q[1] = (uint8_t)(g < 0 ? 0 : g > 255 ? 255 : g);
            q[2] = (uint8_t)(b < 0 ? 0 : b > 255 ? 255 : b);
        }
    }
    return p;
}

/* Encode `pix` (pf: TJPF_RGB, TJPF_GRAY or TJPF_CMYK) as JPEG. Caller frees
 * with free(). */
static inline uint8_t *td_jpeg(const uint8_t *pix, int w, int h, int pf, int subsamp,
                               int quality, int flags, size_t *size) {
    tjhandle t = tjInitCompress();
    unsigned char *buf = NULL;
    unsigned long n = 0;
    if (tjCompress2(t, pix, w, 0, h, pf, &buf, &n, subsamp, quality, flags) != 0) {
        fprintf(stderr, "tjCompress2: %s\n", tjGetErrorStr2(t));
        abort();
    }
    tjDestroy(t);
    uint8_t *out = malloc(n);
    memcpy(out, buf, n);
    tjFree(buf);
    *size = n;
    return out;
}

/* A picture encoded as a 4:2:0 RGB JPEG of quality 90. */
static inline uint8_t *td_picture_jpeg(int w, int h, int seed, int flags, size_t *size) {
    uint8_t *pix = td_picture(w, h, seed);
    uint8_t *j = td_jpeg(pix, w, h, TJPF_RGB, TJSAMP_420, 90, flags, size);
    free(pix);
    return j;
}

/* Encode raw PNG samples (in the PNG's own layout, 16-bit samples in host
 * byte order) with libspng. `plte` has nplte RGB entries. */
static inline uint8_t *td_png_ex(const uint8_t *raw, int w, int h, int color_type, int depth,
                                 const uint8_t *plte, int nplte, int interlace, size_t *size) {
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    struct spng_ihdr ih = {(uint32_t)w, (uint32_t)h, (uint8_t)depth, (uint8_t)color_type, 0, 0,
                           (uint8_t)interlace};
    spng_set_ihdr(ctx, &ih);
    if (plte) {
        struct spng_plte p;
        memset(&p, 0, sizeof p);
        p.n_entries = (uint32_t)nplte;
        for (int i = 0; i < nplte; i++) {
            p.entries[i].red = plte[3 * i];
            p.entries[i].green = plte[3 * i + 1];
            p.entries[i].blue = plte[3 * i + 2];
        }
        spng_set_plte(ctx, &p);
    }
    int ch = color_type == 0 ? 1 : color_type == 2 ? 3 : color_type == 3 ? 1
             : color_type == 4 ? 2 : 4;
    size_t len = ((size_t)w * ch * depth + 7) / 8 * h;
    int rc = spng_encode_image(ctx, raw, len, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    if (rc) {
        fprintf(stderr, "spng_encode_image: %s\n", spng_strerror(rc));
        abort();
    }
    int err = 0;
    void *buf = spng_get_png_buffer(ctx, size, &err);
    spng_ctx_free(ctx);
    return buf; /* allocated with malloc by libspng */
}

static inline uint8_t *td_png(const uint8_t *raw, int w, int h, int color_type, int depth,
                              const uint8_t *plte, int nplte, size_t *size) {
    return td_png_ex(raw, w, h, color_type, depth, plte, nplte, 0, size);
}

/* Mean absolute difference of two equal-sized byte arrays. */
static inline double td_mad(const uint8_t *a, const uint8_t *b, size_t n, int *maxd) {
    double s = 0;
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        s += d;
        if (d > m)
            m = d;
    }
    if (maxd)
        *maxd = m;
    return n ? s / (double)n : 0;
}

/* Find a JPEG marker (0xFF, m) and return its offset, or -1. */
static inline long td_find_marker(const uint8_t *j, size_t n, uint8_t m) {
    for (size_t i = 2; i + 1 < n; i++)
        if (j[i] == 0xff && j[i + 1] == m)
            return (long)i;
    return -1;
}

/* Rewrite a PNG's IHDR size and fix its CRC. */
static inline void td_png_set_size(uint8_t *png, uint32_t w, uint32_t h) {
    uint8_t *d = png + 16; /* 8 magic + 4 len + 4 "IHDR" */
    d[0] = (uint8_t)(w >> 24); d[1] = (uint8_t)(w >> 16); d[2] = (uint8_t)(w >> 8); d[3] = (uint8_t)w;
    d[4] = (uint8_t)(h >> 24); d[5] = (uint8_t)(h >> 16); d[6] = (uint8_t)(h >> 8); d[7] = (uint8_t)h;
    uint32_t crc = (uint32_t)crc32(0, png + 12, 17);
    uint8_t *c = png + 29;
    c[0] = (uint8_t)(crc >> 24); c[1] = (uint8_t)(crc >> 16); c[2] = (uint8_t)(crc >> 8); c[3] = (uint8_t)crc;
}

/* Decode with allocation k failing, k = 1, 2, ... until the decode succeeds
 * (at most 200): every failure must be SL_ENOMEM with a message, and nothing
 * may leak (ASan checks). Each attempt uses a fresh decoder with `params`
 * ({param, value} pairs, `nparams` of them) set. `box` NULL: sl_decode into
 * `color`; else sl_decode_crop_resize of `box` to oh x ow. Returns the
 * number of attempts that failed (> 0 when the decode allocates at all). */
static inline int td_decode_oom(const uint8_t *data, size_t n, const int64_t (*params)[2],
                                int nparams, sl_color color, const sl_box *box, int oh, int ow) {
    for (uint64_t k = 1; k < 200; k++) {
        sl__alloc_fail_at(k);
        sl_decoder *d = NULL;
        sl_tensor t = {0};
        int rc = sl_decoder_create(&d);
        for (int i = 0; rc == SL_OK && i < nparams; i++)
            rc = sl_decoder_set(d, (int)params[i][0], params[i][1]);
        if (rc == SL_OK)
            rc = box ? sl_decode_crop_resize(d, data, n, color, box, oh, ow, SL_INTERP_BILINEAR, &t)
                     : sl_decode(d, data, n, color, &t);
        sl__alloc_fail_at(0);
        sl_tensor_release(&t);
        sl_decoder_free(d);
        if (rc == SL_OK)
            return (int)k - 1;
        if (rc != SL_ENOMEM)
            sl_test_fail(__FILE__, __LINE__, "failing allocation %d: %s (%s)", (int)k,
                         sl_status_str(rc), sl_errmsg());
        ASSERT(sl_errmsg()[0] != '\0');
    }
    sl_test_fail(__FILE__, __LINE__, "the decode still failed after 200 allocations");
}

/* An sl_image_view over p: interleaved HWC, or planar CHW (the sl_view_*
 * tests: test_view.c, test_tone.c). */
static inline sl_image_view td_hwc(void *p, int dtype, int h, int w, int c) {
    sl_image_view v = {p, dtype, h, w, c, (int64_t)w * c, c, 1};
    return v;
}
static inline sl_image_view td_chw(void *p, int dtype, int h, int w, int c) {
    sl_image_view v = {p, dtype, h, w, c, w, 1, (int64_t)h * w};
    return v;
}

#endif
