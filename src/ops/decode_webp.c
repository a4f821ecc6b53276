/*
 * decode_webp.c — WebP decoding through libwebp.
 *
 * Output matches PIL's Image.open(f).convert("RGB") (and "L" for gray): the
 * alpha channel is dropped without compositing, as PIL drops it; gray is the
 * PIL "L" conversion of the RGB pixels, as for PNG. Lossy files are
 * upsampled with libwebp's default ("fancy") chroma upsampling, which is
 * what PIL's WebP plugin gets from the same library.
 *
 * Animated WebP is refused with SL_EUNSUPPORTED: libwebp's still-image API
 * cannot decode it, and training on a first frame nobody chose is a silent
 * surprise; convert such files to stills.
 *
 * Memory: the header is read with WebPGetFeatures and the pixel cap checked
 * before any pixel memory exists. Pixels are decoded into memory sluice
 * allocates (the output tensor or the decoder scratch; external-memory mode),
 * so no libwebp-owned buffer outlives the call. libwebp's own working memory
 * is allocated and freed inside WebPDecode and cannot be routed through the
 * sl__malloc seam (the library has no allocator hook).
 */
#include "ops/decode.h"

#include <string.h>
#include <webp/decode.h>

/* libwebp's status codes as causes a user can act on. */
static const char *webp_cause(VP8StatusCode st) {
    switch (st) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "corrupt WebP data (bitstream error)";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported WebP feature";
    case VP8_STATUS_SUSPENDED: return "WebP decoding suspended";
    case VP8_STATUS_USER_ABORT: return "WebP decoding aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated WebP data (file cut short)";
    default: return "unknown WebP error";
    }
}

static int webp_fail(VP8StatusCode st) {
    if (st == VP8_STATUS_OUT_OF_MEMORY)
        return sl__oom("decode: webp");
    return sl__error(SL_EDECODE, "decode: webp: %s", webp_cause(st));
}

/* Read the header, refuse animations, check the pixel cap. */
static int webp_header(sl_decoder *d, const uint8_t *data, size_t size,
                       WebPBitstreamFeatures *f) {
    VP8StatusCode st = WebPGetFeatures(data, size, f);
    if (st != VP8_STATUS_OK)
        return webp_fail(st);
    if (f->has_animation)
        return sl__error(SL_EUNSUPPORTED,
                         "decode: animated WebP is not supported (only still images); "
                         "convert it to a still image");
    return sl_ops__check_dims(d, f->width > 0 ? (uint64_t)f->width : 0,
                              f->height > 0 ? (uint64_t)f->height : 0);
}

int sl_ops__webp_info(sl_decoder *d, const uint8_t *data, size_t size, sl_image_info *info) {
    WebPBitstreamFeatures f;
    SL_TRY(webp_header(d, data, size, &f));
    info->format = SL_FORMAT_WEBP;
    info->width = f.width;
    info->height = f.height;
    info->channels = f.has_alpha ? 4 : 3;
    return SL_OK;
}

/* Decode as RGB into `rgb` (h rows of w*3 bytes). */
static int webp_into(const uint8_t *data, size_t size, uint8_t *rgb, int w, int h) {
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg))
        return sl__error(SL_EDECODE, "decode: webp: library version mismatch");
    cfg.output.colorspace = MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = rgb;
    cfg.output.u.RGBA.stride = w * 3;
    cfg.output.u.RGBA.size = (size_t)w * 3 * (size_t)h;
    VP8StatusCode st = WebPDecode(data, size, &cfg);
    /* External memory: this frees nothing of ours, only what libwebp may
     * still hold for the output (nothing, in external mode). */
    WebPFreeDecBuffer(&cfg.output);
    if (st != VP8_STATUS_OK)
        return webp_fail(st);
    /* A size that changed between header and bitstream is damage. */
    if (cfg.output.width != w || cfg.output.height != h)
        return sl__error(SL_EDECODE, "decode: webp: frame is %dx%d but the header says %dx%d",
                         cfg.output.width, cfg.output.height, w, h);
    return SL_OK;
}

int sl_ops__webp_decode(sl_decoder *d, const uint8_t *data, size_t size, sl_color color,
                        sl_tensor *out, const uint8_t **pix_out, int *h_out, int *w_out) {
    WebPBitstreamFeatures f;
    int rc, allocated = 0;
    SL_TRY(webp_header(d, data, size, &f));
    int w = f.width, h = f.height;
    uint8_t *rgb;
    SL_CHECK(sl_ops__rgb_target(d, color, h, w, out, &allocated, &rgb));
    SL_CHECK(webp_into(data, size, rgb, w, h));
    SL_CHECK(sl_ops__rgb_finish(d, rgb, h, w, color, out, &allocated, pix_out, h_out, w_out));
    rc = SL_OK;
cleanup:
    if (rc < 0 && allocated)
        sl_tensor_release(out);
    return rc;
}
