/*
 * decode_png.c — PNG decoding through libspng.
 *
 * Every colour type and bit depth becomes RGB8 the way PIL's convert("RGB")
 * does it: palettes expanded, gray replicated, alpha (and tRNS) dropped
 * without compositing, 16-bit samples reduced to their high byte. Gray output
 * is PIL's "L" conversion of that RGB (exact for gray sources). libspng's
 * allocations go through the sluice allocation seam.
 */
#include "ops/decode.h"

#include <string.h>

#ifdef SLUICE_HAVE_SPNG
#include <spng.h>

/* libspng reports an allocation failure inside zlib as a stream error; the
 * allocator wrappers remember a failure so that it is reported as SL_ENOMEM,
 * never as damaged data. */
static _Thread_local int png_alloc_failed;

static void *png_note(void *p) {
    if (!p)
        png_alloc_failed = 1;
    return p;
}
static void *png_malloc(size_t n) { return png_note(sl__malloc(n)); }
static void *png_realloc(void *p, size_t n) { return png_note(sl__realloc(p, n)); }
static void *png_calloc(size_t n, size_t m) { return png_note(sl__calloc(n, m)); }
static void png_free(void *p) { sl__free(p); }

static int png_fail(int ret) {
    if (ret == SPNG_EMEM || png_alloc_failed)
        return sl__oom("decode: png");
    return sl__error(SL_EDECODE, "decode: png: %s", spng_strerror(ret));
}

/* Open a context on the bytes and read the header; checks the pixel cap. */
static int png_open(sl_decoder *d, const uint8_t *data, size_t size, spng_ctx **ctx_out,
                    struct spng_ihdr *ihdr) {
    struct spng_alloc a = {png_malloc, png_realloc, png_calloc, png_free};
    *ctx_out = NULL;
    png_alloc_failed = 0;
    spng_ctx *ctx = spng_ctx_new2(&a, 0);
    if (!ctx)
        return sl__oom("decode: png context");
    /* Bound what ancillary chunks may make libspng allocate. */
    int ret = spng_set_chunk_limits(ctx, 1u << 24, 1u << 26);
    if (!ret)
        ret = spng_set_png_buffer(ctx, data, size);
    if (!ret)
        ret = spng_get_ihdr(ctx, ihdr);
    if (ret) {
        spng_ctx_free(ctx);
        return png_fail(ret);
    }
    int rc = sl_ops__check_dims(d, ihdr->width, ihdr->height);
    if (rc < 0) {
        spng_ctx_free(ctx);
        return rc;
    }
    *ctx_out = ctx;
    return SL_OK;
}

static int png_channels(const struct spng_ihdr *h) {
    switch (h->color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE: return 1;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA: return 2;
    case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA: return 4;
    default: return 3;
    }
}

int sl_ops__png_info(sl_decoder *d, const uint8_t *data, size_t size, sl_image_info *info) {
    spng_ctx *ctx;
    struct spng_ihdr h;
    SL_TRY(png_open(d, data, size, &ctx, &h));
    info->format = SL_FORMAT_PNG;
    info->width = (int32_t)h.width;
    info->height = (int32_t)h.height;
    info->channels = png_channels(&h);
    spng_ctx_free(ctx);
    return SL_OK;
}

int sl_ops__png_decode(sl_decoder *d, const uint8_t *data, size_t size, sl_color color,
                       sl_tensor *out, const uint8_t **pix_out, int *h_out, int *w_out) {
    spng_ctx *ctx;
    struct spng_ihdr h;
    int rc, allocated = 0;
    SL_TRY(png_open(d, data, size, &ctx, &h));
    size_t rgb_bytes = (size_t)h.width * h.height * 3;
    uint8_t *rgb;
    SL_CHECK(sl_ops__rgb_target(d, color, (int)h.height, (int)h.width, out, &allocated, &rgb));
    int ret = spng_decode_image(ctx, rgb, rgb_bytes, SPNG_FMT_RGB8, 0);
    /* Read on to IEND: a file cut short after its image data is damaged too. */
    if (!ret)
        ret = spng_decode_chunks(ctx);
    if (ret)
        SL_CHECK(png_fail(ret));
    SL_CHECK(sl_ops__rgb_finish(d, rgb, (int)h.height, (int)h.width, color, out, &allocated,
                                pix_out, h_out, w_out));
    rc = SL_OK;
cleanup:
    if (rc < 0 && allocated)
        sl_tensor_release(out);
    spng_ctx_free(ctx);
    return rc;
}

#else /* !SLUICE_HAVE_SPNG */

int sl_ops__png_info(sl_decoder *d, const uint8_t *data, size_t size, sl_image_info *info) {
    (void)d; (void)data; (void)size; (void)info;
    return sl__error(SL_EUNSUPPORTED, "decode: PNG support not built (libspng missing)");
}

int sl_ops__png_decode(sl_decoder *d, const uint8_t *data, size_t size, sl_color color,
                       sl_tensor *out, const uint8_t **pix_out, int *h_out, int *w_out) {
    (void)d; (void)data; (void)size; (void)color; (void)out; (void)pix_out; (void)h_out;
    (void)w_out;
    return sl__error(SL_EUNSUPPORTED, "decode: PNG support not built (libspng missing)");
}

#endif
