/*
 * test_decode_webp.c — WebP decoding (lossless exact, lossy close, alpha
 * dropped, gray, fused crop+resize, damage, pixel cap, OOM), and that one
 * decoder keeps decoding good images after any bad one (JPEG, PNG, WebP):
 * sl_pack checks every file of a folder on one decoder per thread.
 * WebP files are made here with libwebp's encoder.
 */
#include "core/core.h"
#include "ops/ops.h"
#include "ops_testdata.h"

#include <webp/encode.h>

static sl_decoder *new_decoder(void) {
    sl_decoder *d = NULL;
    ASSERT_OK(sl_decoder_create(&d));
    return d;
}

/* Encode RGB (alpha == NULL) or RGBA pixels as WebP; quality < 0 means
 * lossless. Caller frees with free(). */
static uint8_t *td_webp(const uint8_t *rgb, const uint8_t *alpha, int w, int h, float quality,
                        size_t *size) {
    uint8_t *enc = NULL;
    size_t n;
    if (alpha) {
        uint8_t *rgba = malloc((size_t)w * h * 4);
        for (size_t i = 0; i < (size_t)w * h; i++) {
            memcpy(rgba + 4 * i, rgb + 3 * i, 3);
            rgba[4 * i + 3] = alpha[i];
        }
        n = quality < 0 ? WebPEncodeLosslessRGBA(rgba, w, h, w * 4, &enc)
                        : WebPEncodeRGBA(rgba, w, h, w * 4, quality, &enc);
        free(rgba);
    } else {
        n = quality < 0 ? WebPEncodeLosslessRGB(rgb, w, h, w * 3, &enc)
                        : WebPEncodeRGB(rgb, w, h, w * 3, quality, &enc);
    }
    ASSERT(n > 0 && enc);
    uint8_t *out = malloc(n);
    memcpy(out, enc, n);
    WebPFree(enc);
    *size = n;
    return out;
}

SL_TEST(ops_decode__webp_lossless_exact_rgb_gray) {
    int w = 37, h = 23;
    uint8_t *pix = td_picture(w, h, 3);
    size_t n;
    uint8_t *webp = td_webp(pix, NULL, w, h, -1, &n);
    ASSERT_EQ(sl_image_sniff(webp, n), SL_FORMAT_WEBP);
    sl_decoder *d = new_decoder();
    sl_image_info info;
    ASSERT_OK(sl_decode_info(d, webp, n, &info));
    ASSERT_EQ(info.format, SL_FORMAT_WEBP);
    ASSERT_EQ(info.width, w);
    ASSERT_EQ(info.height, h);
    ASSERT_EQ(info.channels, 3);
    sl_tensor t = {0};
    ASSERT_OK(sl_decode(d, webp, n, SL_COLOR_RGB, &t));
    ASSERT_EQ(t.ndim, 3);
    ASSERT_EQ(t.shape[0], h);
    ASSERT_EQ(t.shape[1], w);
    ASSERT_EQ(t.shape[2], 3);
    ASSERT_EQ(memcmp(t.data, pix, (size_t)w * h * 3), 0);
    sl_tensor_release(&t);
    /* gray: PIL's "L" of the RGB pixels */
    uint8_t *gray = malloc((size_t)w * h);
    sl_ops__rgb_to_gray(pix, gray, (size_t)w * h);
    ASSERT_OK(sl_decode(d, webp, n, SL_COLOR_GRAY, &t));
    ASSERT_EQ(t.shape[2], 1);
    ASSERT_EQ(memcmp(t.data, gray, (size_t)w * h), 0);
    sl_tensor_release(&t);
    /* into a caller's buffer, and too small a one */
    uint8_t dst[37 * 23 * 3];
    int64_t cap = sizeof dst;
    sl_tensor_view(&t, dst, SL_U8, 1, &cap);
    ASSERT_OK(sl_decode(d, webp, n, SL_COLOR_RGB, &t));
    ASSERT_EQ(memcmp(dst, pix, sizeof dst), 0);
    cap = 100;
    sl_tensor_view(&t, dst, SL_U8, 1, &cap);
    ASSERT_RC(sl_decode(d, webp, n, SL_COLOR_RGB, &t), SL_EINVAL);
    free(gray);
    free(webp);
    free(pix);
    sl_decoder_free(d);
}

SL_TEST(ops_decode__webp_alpha_dropped_and_lossy_close) {
    int w = 40, h = 30;
    uint8_t *pix = td_picture(w, h, 5);
    uint8_t *alpha = malloc((size_t)w * h);
    /* no fully transparent pixel: the lossless encoder may rewrite the colour
     * under alpha 0, and this test wants the colour kept */
    for (int i = 0; i < w * h; i++)
        alpha[i] = (uint8_t)(1 + (i * 7) % 255);
    size_t n;
    uint8_t *webp = td_webp(pix, alpha, w, h, -1, &n);
    sl_decoder *d = new_decoder();
    sl_image_info info;
    ASSERT_OK(sl_decode_info(d, webp, n, &info));
    ASSERT_EQ(info.channels, 4);
    sl_tensor t = {0};
    ASSERT_OK(sl_decode(d, webp, n, SL_COLOR_RGB, &t));
    ASSERT_EQ(t.shape[2], 3);
    ASSERT_EQ(memcmp(t.data, pix, (size_t)w * h * 3), 0); /* not composited */
    sl_tensor_release(&t);
    free(webp);
    /* lossy: the codec's own error only */
    webp = td_webp(pix, NULL, w, h, 95, &n);
    ASSERT_OK(sl_decode(d, webp, n, SL_COLOR_RGB, &t));
    int maxd;
    double mad = td_mad(t.data, pix, (size_t)w * h * 3, &maxd);
    if (mad > 6.0)
        sl_test_fail(__FILE__, __LINE__, "lossy WebP q95: mean |diff| %.2f", mad);
    sl_tensor_release(&t);
    free(webp);
    free(alpha);
    free(pix);
    sl_decoder_free(d);
}

/* WebP has no partial decoding: the fused path decodes whole and resamples,
 * exactly as for a PNG of the same pixels. */
SL_TEST(ops_decode__webp_crop_resize_equals_png) {
    int w = 50, h = 34;
    uint8_t *pix = td_picture(w, h, 9);
    size_t nw, np;
    uint8_t *webp = td_webp(pix, NULL, w, h, -1, &nw);
    uint8_t *png = td_png(pix, w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8, NULL, 0, &np);
    sl_decoder *d = new_decoder();
    sl_box b = {3, 5, 25, 40};
    for (int c = 1; c <= 3; c += 2) {
        sl_tensor a = {0}, e = {0};
        ASSERT_OK(sl_decode_crop_resize(d, webp, nw, (sl_color)c, &b, 11, 13,
                                        SL_INTERP_BILINEAR, &a));
        ASSERT_OK(sl_decode_crop_resize(d, png, np, (sl_color)c, &b, 11, 13,
                                        SL_INTERP_BILINEAR, &e));
        ASSERT_EQ(a.nbytes, (size_t)11 * 13 * c);
        ASSERT_EQ(memcmp(a.data, e.data, a.nbytes), 0);
        sl_tensor_release(&a);
        sl_tensor_release(&e);
    }
    free(webp);
    free(png);
    free(pix);
    sl_decoder_free(d);
}

SL_TEST(ops_decode__webp_pixel_cap_before_decoding) {
    int w = 64, h = 64;
    uint8_t *pix = td_picture(w, h, 1);
    size_t n;
    uint8_t *webp = td_webp(pix, NULL, w, h, 80, &n);
    sl_decoder *d = new_decoder();
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_MAX_PIXELS, 64 * 63));
    sl_tensor t = {0};
    uint64_t before = sl__alloc_count();
    ASSERT_RC(sl_decode(d, webp, n, SL_COLOR_RGB, &t), SL_ELIMIT);
    ASSERT_CONTAINS(sl_errmsg(), "pixel limit");
    ASSERT_U64_EQ(sl__alloc_count(), before); /* refused before any pixel memory */
    ASSERT(t.data == NULL);
    sl_image_info info;
    ASSERT_RC(sl_decode_info(d, webp, n, &info), SL_ELIMIT);
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_MAX_PIXELS, 64 * 64));
    ASSERT_OK(sl_decode(d, webp, n, SL_COLOR_RGB, &t));
    sl_tensor_release(&t);
    free(webp);
    free(pix);
    sl_decoder_free(d);
}

static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Damaged WebP: every failure is SL_EDECODE with a cause, and the same
 * decoder decodes a good file right after each. */
SL_TEST(ops_decode__webp_damaged_then_good) {
    int w = 30, h = 20;
    uint8_t *pix = td_picture(w, h, 2);
    size_t nl, ny;
    uint8_t *lossless = td_webp(pix, NULL, w, h, -1, &nl);
    uint8_t *lossy = td_webp(pix, NULL, w, h, 75, &ny);
    sl_decoder *d = new_decoder();
    sl_tensor t = {0};
    uint8_t *ref = NULL;
    ASSERT_OK(sl_decode(d, lossy, ny, SL_COLOR_RGB, &t));
    ref = malloc(t.nbytes);
    memcpy(ref, t.data, t.nbytes);
    size_t ref_n = t.nbytes;
    sl_tensor_release(&t);

    const uint8_t *srcs[2] = {lossless, lossy};
    size_t lens[2] = {nl, ny};
    int failures = 0;
    for (int s = 0; s < 2; s++) {
        /* every cut before the end fails: the RIFF size says how long it is */
        for (size_t cut = 0; cut < lens[s]; cut += cut < 64 ? 1 : 7) {
            int rc = sl_decode(d, srcs[s], cut, SL_COLOR_RGB, &t);
            if (rc != SL_EDECODE)
                sl_test_fail(__FILE__, __LINE__, "webp %d cut at %zu of %zu: %s (%s)", s, cut,
                             lens[s], sl_status_str(rc), sl_errmsg());
            ASSERT(t.data == NULL);
            failures++;
            ASSERT_OK(sl_decode(d, lossy, ny, SL_COLOR_RGB, &t));
            ASSERT_EQ(memcmp(t.data, ref, ref_n), 0);
            sl_tensor_release(&t);
        }
    }
    ASSERT(failures > 100);
    /* the chunk inside claims more bytes than the RIFF holds */
    uint8_t *bad = malloc(nl);
    memcpy(bad, lossless, nl);
    put_le32(bad + 16, 0x7ffffff0u);
    ASSERT_RC(sl_decode(d, bad, nl, SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), "webp");
    /* a RIFF/WEBP header and garbage after it */
    memset(bad + 12, 0x5a, nl - 12);
    sl_image_info info;
    ASSERT_RC(sl_decode_info(d, bad, nl, &info), SL_EDECODE);
    ASSERT_RC(sl_decode(d, bad, nl, SL_COLOR_GRAY, &t), SL_EDECODE);
    /* lossless pixel data scrambled: header fine, decode fails */
    memcpy(bad, lossless, nl);
    for (size_t i = 30; i < nl; i++)
        bad[i] ^= 0xa5;
    ASSERT_OK(sl_decode_info(d, bad, nl, &info));
    ASSERT_RC(sl_decode(d, bad, nl, SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), "decode: webp: ");
    ASSERT_OK(sl_decode(d, lossy, ny, SL_COLOR_RGB, &t));
    ASSERT_EQ(memcmp(t.data, ref, ref_n), 0);
    sl_tensor_release(&t);
    free(bad);
    free(ref);
    free(lossless);
    free(lossy);
    free(pix);
    sl_decoder_free(d);
}

/* sl_decode_info and sl_decode on one decoder: after each malformed JPEG
 * (the kinds a real folder holds), the next good JPEG still decodes. A
 * decoder left mid-header by a failure would fail every later file. */
SL_TEST(ops_decode__good_after_bad) {
    size_t n, np;
    uint8_t *good = td_picture_jpeg(48, 32, 4, 0, &n);
    uint8_t *pix = td_picture(12, 10, 8);
    uint8_t *png = td_png(pix, 12, 10, SPNG_COLOR_TYPE_TRUECOLOR, 8, NULL, 0, &np);
    long sof = td_find_marker(good, n, 0xc0), dqt = td_find_marker(good, n, 0xdb);
    ASSERT(sof > 0 && dqt > 0);
    enum { ZERO_H, ZERO_W, BOGUS_LEN, CUT_HEADER, CUT_BODY, BAD_PNG_CRC, ZERO_PNG, KINDS };
    for (int k = 0; k < KINDS; k++) {
        size_t cap = n > np ? n : np, bn = n;
        uint8_t *b = malloc(cap);
        memcpy(b, good, n);
        const char *want = NULL;
        switch (k) {
        case ZERO_H: b[sof + 5] = b[sof + 6] = 0; want = "empty JPEG image"; break;
        case ZERO_W: b[sof + 7] = b[sof + 8] = 0; want = "empty JPEG image"; break;
        case BOGUS_LEN: b[dqt + 2] = 0; b[dqt + 3] = 1; want = "ogus marker length"; break;
        case CUT_HEADER: bn = (size_t)sof + 4; break;
        case CUT_BODY: bn = n * 2 / 3; break;
        case BAD_PNG_CRC:
            memcpy(b, png, np);
            bn = np;
            b[29] ^= 1; /* IHDR checksum: libspng checks it when decoding */
            want = "png";
            break;
        case ZERO_PNG:
            memcpy(b, png, np);
            bn = np;
            td_png_set_size(b, 0, 10);
            want = "png";
            break;
        }
        /* header reads (where the header is what is damaged), then full decodes */
        for (int call = k == CUT_BODY || k == BAD_PNG_CRC; call < 2; call++) {
            sl_decoder *d = new_decoder();
            for (int rep = 0; rep < 2; rep++) {
                sl_tensor t = {0};
                sl_image_info info;
                int rc = call == 0 ? sl_decode_info(d, b, bn, &info)
                                   : sl_decode(d, b, bn, SL_COLOR_RGB, &t);
                if (rc != SL_EDECODE)
                    sl_test_fail(__FILE__, __LINE__, "kind %d call %d: %s (%s)", k, call,
                                 sl_status_str(rc), sl_errmsg());
                if (want)
                    ASSERT_CONTAINS(sl_errmsg(), want);
                ASSERT(t.data == NULL);
            }
            for (int rep = 0; rep < 3; rep++) {
                sl_tensor t = {0};
                sl_image_info info;
                ASSERT_OK(sl_decode_info(d, good, n, &info));
                ASSERT_EQ(info.height, 32);
                ASSERT_OK(sl_decode(d, good, n, SL_COLOR_RGB, &t));
                sl_tensor_release(&t);
                ASSERT_OK(sl_decode(d, png, np, SL_COLOR_GRAY, &t));
                sl_tensor_release(&t);
            }
            sl_decoder_free(d);
        }
        free(b);
    }
    free(png);
    free(pix);
    free(good);
}

SL_TEST(ops_decode__webp_oom_loop) {
    int w = 20, h = 14;
    uint8_t *pix = td_picture(w, h, 6);
    size_t n;
    uint8_t *webp = td_webp(pix, NULL, w, h, 85, &n);
    sl_box b = {2, 3, 10, 12};
    /* the decoder and the output are both failed once, at least */
    ASSERT(td_decode_oom(webp, n, NULL, 0, SL_COLOR_RGB, NULL, 0, 0) > 1);
    ASSERT(td_decode_oom(webp, n, NULL, 0, SL_COLOR_GRAY, NULL, 0, 0) > 1);
    ASSERT(td_decode_oom(webp, n, NULL, 0, SL_COLOR_RGB, &b, 5, 7) > 1);
    free(webp);
    free(pix);
}
