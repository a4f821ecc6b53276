/*
 * source_image_check.c — is this buffer an image? Decided by content, never
 * by file name, so a PNG saved as .jpg is packed and a text file saved as
 * .jpg is caught at pack time rather than mid-training.
 *
 * The checks are cheap (headers only): packing must run at disk speed. A
 * file whose header is right but whose body is damaged is caught later by
 * the decode op, with the record named.
 */
#include "source/source.h"

#include <string.h>
#include <turbojpeg.h>
#include <zlib.h>

static int check_jpeg(void *tj, const uint8_t *p, size_t n) {
    tjhandle h = tj;
    int own = 0;
    if (!h) {
        h = tjInitDecompress();
        if (!h)
            return sl__error(SL_ENOMEM, "cannot start a JPEG decompressor");
        own = 1;
    }
    int w = 0, hgt = 0, sub = 0, cs = 0;
    /* TurboJPEG takes an unsigned long size; a >4 GiB file is not a photo. */
    int r = n > 0xffffffffu ? -1
                            : tjDecompressHeader3(h, p, (unsigned long)n, &w, &hgt, &sub, &cs);
    int rc = SL_OK;
    if (r != 0)
        rc = sl__error(SL_EDECODE, "not a valid JPEG: %s", tjGetErrorStr2(h));
    else if (w <= 0 || hgt <= 0)
        rc = sl__error(SL_EDECODE, "JPEG with an empty size %dx%d", w, hgt);
    if (own)
        tjDestroy(h);
    return rc;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int check_png(const uint8_t *p, size_t n) {
    /* signature (8) + IHDR: length (4) "IHDR" (4) data (13) crc (4) */
    if (n < 33)
        return sl__error(SL_EDECODE, "PNG cut short (%zu bytes)", n);
    if (be32(p + 8) != 13 || memcmp(p + 12, "IHDR", 4) != 0)
        return sl__error(SL_EDECODE, "PNG without an IHDR chunk first");
    uint32_t crc = (uint32_t)crc32(0L, p + 12, 17);
    if (crc != be32(p + 29))
        return sl__error(SL_EDECODE, "PNG IHDR checksum mismatch");
    uint32_t w = be32(p + 16), h = be32(p + 20);
    if (w == 0 || h == 0 || w > 0x7fffffffu || h > 0x7fffffffu)
        return sl__error(SL_EDECODE, "PNG with an invalid size %ux%u", w, h);
    return SL_OK;
}

static int check_bmp(const uint8_t *p, size_t n) {
    if (n < 26)
        return sl__error(SL_EDECODE, "BMP cut short (%zu bytes)", n);
    uint32_t dib = sl__ld32(p + 14);
    if (dib != 12 && dib != 40 && dib != 52 && dib != 56 && dib != 64 && dib != 108 &&
        dib != 124)
        return sl__error(SL_EDECODE, "BMP with an unknown header size %u", dib);
    if (sl__ld32(p + 10) > n)
        return sl__error(SL_EDECODE, "BMP pixel data offset past the end of the file");
    return SL_OK;
}

static int is_space(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int sl_source__check_image(void *tj, const uint8_t *p, size_t n) {
    if (n == 0)
        return sl__error(SL_EDECODE, "empty file, not an image");
    if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
        return check_jpeg(tj, p, n);
    if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8))
        return check_png(p, n);
    if (n >= 2 && p[0] == 'B' && p[1] == 'M')
        return check_bmp(p, n);
    if (n >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '7' && is_space(p[2]))
        return SL_OK; /* PBM/PGM/PPM/PAM */
    if (n >= 8 && (!memcmp(p, "II*\0", 4) || !memcmp(p, "MM\0*", 4)))
        return SL_OK; /* TIFF */
    if (n >= 16 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4))
        return SL_OK;
    return sl__error(SL_EDECODE,
                     "not an image (content is not JPEG, PNG, BMP, PPM/PGM, TIFF or WebP)");
}
