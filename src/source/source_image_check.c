/*
 * source_image_check.c — is this file an image the decode op can read?
 * Decided by content, never by file name, so a PNG saved as .jpg is packed
 * and a text file saved as .jpg is caught at pack time rather than
 * mid-training.
 *
 * The check runs the decoder the decode op runs (sl_decoder, from the ops
 * layer): pack and decode cannot disagree on what an image is. A separate
 * header parser here once did disagree, and worse, kept state across files:
 * one malformed JPEG left it mid-header and every later file checked on
 * that thread was reported bad. An sl_decoder resets itself after every
 * failure (tested in ops_decode__good_after_bad).
 *
 * SL_PACK_CHECK_HEADER reads headers only, so packing runs at disk speed;
 * SL_PACK_CHECK_DECODE decodes every pixel.
 */
#include "source/source.h"

#include <string.h>
#include <zlib.h>

/* Above any real photo, below what makes w*h overflow: the header check
 * leaves the pixel cap to whoever decodes (a pipeline may raise it). */
#define HEADER_CHECK_MAX_PIXELS (1ll << 40)

int sl_source__checker_init(sl_source__checker *c, int mode) {
    memset(c, 0, sizeof *c);
    c->mode = mode;
    SL_TRY(sl_decoder_create(&c->dec));
    if (mode == SL_PACK_CHECK_HEADER)
        SL_TRY(sl_decoder_set(c->dec, SL_DECODE_MAX_PIXELS, HEADER_CHECK_MAX_PIXELS));
    /* A decode check finds corrupt entropy data on every file, where the
     * training decoder's fast path may not (docs/OPS.md). */
    if (mode == SL_PACK_CHECK_DECODE)
        SL_TRY(sl_decoder_set(c->dec, SL_DECODE_CHECK_ENTROPY, 1));
    return SL_OK;
}

void sl_source__checker_dispose(sl_source__checker *c) {
    sl_decoder_free(c->dec);
    sl__free(c->pix);
    memset(c, 0, sizeof *c);
}

static int is_space(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Formats torchvision's ImageFolder lists (and PIL opens) but the decode op
 * does not: name them, so the user learns what to convert. */
static const char *undecodable_format(const uint8_t *p, size_t n) {
    if (n >= 2 && p[0] == 'B' && p[1] == 'M')
        return "BMP";
    if (n >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '7' && is_space(p[2]))
        return "PPM/PGM/PBM";
    if (n >= 4 && (!memcmp(p, "II*\0", 4) || !memcmp(p, "MM\0*", 4)))
        return "TIFF";
    if (n >= 6 && (!memcmp(p, "GIF87a", 6) || !memcmp(p, "GIF89a", 6)))
        return "GIF";
    return NULL;
}

/* Decode the whole image into the checker's buffer, reused across files so
 * that steady state allocates only when a larger image comes along. */
static int decode_all(sl_source__checker *c, const uint8_t *p, size_t n) {
    sl_image_info info;
    SL_TRY(sl_decode_info(c->dec, p, n, &info));
    size_t need = (size_t)info.width * (size_t)info.height * 3;
    if (need > c->cap) {
        uint8_t *b = sl__malloc(need);
        if (!b)
            return sl__error(SL_ENOMEM, "out of memory decoding a %dx%d image", info.width,
                             info.height);
        sl__free(c->pix);
        c->pix = b;
        c->cap = need;
    }
    sl_tensor t;
    int64_t cap = (int64_t)c->cap;
    memset(&t, 0, sizeof t);
    sl_tensor_view(&t, c->pix, SL_U8, 1, &cap);
    return sl_decode(c->dec, p, n, SL_COLOR_RGB, &t);
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* libspng reads the IHDR fields without checking the chunk's CRC (it checks
 * it when decoding), so a PNG cut inside its first chunk, or with a damaged
 * IHDR, would pass a header read and fail in training. Check that the whole
 * IHDR chunk is there and intact: the decoder would refuse it otherwise. */
static int check_png_ihdr(const uint8_t *p, size_t n) {
    if (n < 33) /* signature (8) + length (4) "IHDR" (4) data (13) crc (4) */
        return sl__error(SL_EDECODE, "decode: png: cut short in its header (%zu bytes)", n);
    if ((uint32_t)crc32(0L, p + 12, 17) != be32(p + 29))
        return sl__error(SL_EDECODE, "decode: png: IHDR checksum mismatch");
    return SL_OK;
}

int sl_source__looks_like_image(const uint8_t *p, size_t n) {
    return n > 0 && (sl_image_sniff(p, n) != SL_FORMAT_UNKNOWN || undecodable_format(p, n));
}

int sl_source__check_image(sl_source__checker *c, const uint8_t *p, size_t n) {
    if (n == 0)
        return sl__error(SL_EDECODE, "empty file, not an image");
    if (sl_image_sniff(p, n) == SL_FORMAT_UNKNOWN) {
        const char *fmt = undecodable_format(p, n);
        if (fmt)
            return sl__error(SL_EDECODE,
                             "%s images are not supported by decode (JPEG, PNG, WebP are); "
                             "convert them",
                             fmt);
        return sl__error(SL_EDECODE, "not an image (content is not JPEG, PNG or WebP)");
    }
    if (c->mode == SL_PACK_CHECK_DECODE)
        return decode_all(c, p, n);
    sl_image_info info;
    SL_TRY(sl_decode_info(c->dec, p, n, &info));
    if (info.format == SL_FORMAT_PNG)
        return check_png_ihdr(p, n);
    return SL_OK;
}

int sl_source__reencode(sl_source__checker *c, const uint8_t *p, size_t n, sl_tensor *out,
                        int *changed_out) {
    *changed_out = 0;
    if (c->restart == SL_JPEG_RESTART_OFF)
        return SL_OK;
    memset(out, 0, sizeof *out);
    return sl_jpeg_add_restarts(p, n, (sl_jpeg_restart)c->restart, out, changed_out);
}
