/* decode.c — the decoder object, format sniffing and dispatch. */
#include "ops/decode.h"

#include <string.h>

#define DEFAULT_MAX_PIXELS (64ll * 1024 * 1024)
#define DEFAULT_MAX_SCANS 1000

int sl_decoder_create(sl_decoder **out) {
    *out = NULL;
    sl_decoder *d = sl__calloc(1, sizeof *d);
    if (!d)
        return sl__oom("decoder");
    d->max_pixels = DEFAULT_MAX_PIXELS;
    d->max_scans = DEFAULT_MAX_SCANS;
    *out = d;
    return SL_OK;
}

void sl_decoder_free(sl_decoder *dec) {
    if (!dec)
        return;
    if (dec->jpeg_ready)
        jpeg_destroy_decompress(&dec->cinfo);
    sl__free(dec->scratch);
    sl__free(dec->synth);
    sl__free(dec);
}

/* A 0/1 decoder option. */
static int set_flag(int *flag, const char *name, int64_t value) {
    if (value != 0 && value != 1)
        return sl__error(SL_EINVAL, "decoder: %s %lld is not 0 or 1", name, (long long)value);
    *flag = (int)value;
    return SL_OK;
}

int sl_decoder_set(sl_decoder *dec, int param, int64_t value) {
    switch (param) {
    case SL_DECODE_MAX_PIXELS:
        if (value < 1 || value > (1ll << 40))
            return sl__error(SL_EINVAL, "decoder: max_pixels %lld out of range 1..2^40",
                             (long long)value);
        dec->max_pixels = value;
        return SL_OK;
    case SL_DECODE_MAX_SCANS:
        if (value < 1 || value > 1000000)
            return sl__error(SL_EINVAL, "decoder: max_scans %lld out of range 1..1000000",
                             (long long)value);
        dec->max_scans = value;
        return SL_OK;
    case SL_DECODE_WARNINGS:
        if (value != SL_WARNINGS_DEFAULT && value != SL_WARNINGS_STRICT &&
            value != SL_WARNINGS_LENIENT)
            return sl__error(SL_EINVAL, "decoder: warnings %lld is not an sl_warnings value",
                             (long long)value);
        dec->warnings = (int)value;
        return SL_OK;
    case SL_DECODE_EXIF_ORIENTATION:
        return set_flag(&dec->exif_orientation, "exif_orientation", value);
    case SL_DECODE_CHECK_ENTROPY:
        return set_flag(&dec->check_entropy, "check_entropy", value);
    default:
        return sl__error(SL_EINVAL, "decoder: unknown parameter %d", param);
    }
}

int64_t sl_decoder_get(const sl_decoder *dec, int param) {
    switch (param) {
    case SL_DECODE_MAX_PIXELS: return dec->max_pixels;
    case SL_DECODE_MAX_SCANS: return dec->max_scans;
    case SL_DECODE_WARNINGS: return dec->warnings;
    case SL_DECODE_EXIF_ORIENTATION: return dec->exif_orientation;
    case SL_DECODE_CHECK_ENTROPY: return dec->check_entropy;
    default: return -1;
    }
}

int sl_ops__dec_scratch(sl_decoder *dec, size_t n) {
    if (n <= dec->scratch_cap)
        return SL_OK;
    uint8_t *p = sl__aligned_alloc(64, n);
    if (!p)
        return sl__oom("decode: scratch");
    sl__free(dec->scratch);
    dec->scratch = p;
    dec->scratch_cap = n;
    return SL_OK;
}

int sl_ops__rgb_target(sl_decoder *d, sl_color color, int h, int w, sl_tensor *out,
                       int *allocated, uint8_t **rgb_out) {
    if (out && color == SL_COLOR_RGB) {
        int64_t shape[3] = {h, w, 3};
        SL_TRY(sl_ops__out_prepare(out, SL_U8, 3, shape, "decode", allocated));
        *rgb_out = out->data;
        return SL_OK;
    }
    SL_TRY(sl_ops__dec_scratch(d, (size_t)h * (size_t)w * 3));
    *rgb_out = d->scratch;
    return SL_OK;
}

int sl_ops__rgb_finish(sl_decoder *d, uint8_t *rgb, int h, int w, sl_color color,
                       sl_tensor *out, int *allocated, const uint8_t **pix_out, int *h_out,
                       int *w_out) {
    if (color == SL_COLOR_GRAY) {
        uint8_t *gray = rgb; /* in place: the gray byte is written behind the read */
        if (out) {
            int64_t shape[3] = {h, w, 1};
            SL_TRY(sl_ops__out_prepare(out, SL_U8, 3, shape, "decode", allocated));
            gray = out->data;
        }
        sl_ops__rgb_to_gray(rgb, gray, (size_t)h * (size_t)w);
    }
    if (pix_out) {
        *pix_out = d->scratch;
        *h_out = h;
        *w_out = w;
    }
    return SL_OK;
}

int sl_ops__check_dims(const sl_decoder *dec, uint64_t w, uint64_t h) {
    if (w == 0 || h == 0)
        return sl__error(SL_EDECODE, "decode: image has zero size (%llux%llu)",
                         (unsigned long long)w, (unsigned long long)h);
    if (w > (uint64_t)INT32_MAX || h > (uint64_t)INT32_MAX ||
        w * h > (uint64_t)dec->max_pixels)
        return sl__error(SL_ELIMIT, "decode: %llux%llu image exceeds the pixel limit (%lld)",
                         (unsigned long long)w, (unsigned long long)h,
                         (long long)dec->max_pixels);
    return SL_OK;
}

sl_image_format sl_image_sniff(const void *data, size_t size) {
    static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const uint8_t *b = data;
    if (size >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
        return SL_FORMAT_JPEG;
    if (size >= 8 && memcmp(b, png_magic, 8) == 0)
        return SL_FORMAT_PNG;
    /* RIFF container: "RIFF", 4-byte size, "WEBP" */
    if (size >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0)
        return SL_FORMAT_WEBP;
    return SL_FORMAT_UNKNOWN;
}

static int unknown_format(const uint8_t *b, size_t size) {
    if (size == 0)
        return sl__error(SL_EDECODE, "decode: empty input");
    char hex[3 * 4 + 1] = "";
    size_t n = size < 4 ? size : 4;
    for (size_t i = 0; i < n; i++)
        snprintf(hex + 3 * i, 4, "%02x ", b[i]);
    hex[3 * n - 1] = '\0';
    return sl__error(SL_EDECODE, "decode: not a JPEG, PNG or WebP image (starts with %s)", hex);
}

int sl_decode_info(sl_decoder *dec, const void *data, size_t size, sl_image_info *info) {
    memset(info, 0, sizeof *info);
    if (!dec || (!data && size))
        return sl__error(SL_EINVAL, "decode: NULL argument");
    switch (sl_image_sniff(data, size)) {
    case SL_FORMAT_JPEG: return sl_ops__jpeg_info(dec, data, size, info);
    case SL_FORMAT_PNG: return sl_ops__png_info(dec, data, size, info);
    case SL_FORMAT_WEBP: return sl_ops__webp_info(dec, data, size, info);
    default: return unknown_format(data, size);
    }
}

static int check_color(sl_color color) {
    if (color != SL_COLOR_RGB && color != SL_COLOR_GRAY)
        return sl__error(SL_EINVAL, "decode: unknown colour mode %d", (int)color);
    return SL_OK;
}

int sl_decode(sl_decoder *dec, const void *data, size_t size, sl_color color, sl_tensor *out) {
    if (!dec || !out || (!data && size))
        return sl__error(SL_EINVAL, "decode: NULL argument");
    SL_TRY(check_color(color));
    switch (sl_image_sniff(data, size)) {
    case SL_FORMAT_JPEG: return sl_ops__jpeg_decode(dec, data, size, color, out);
    case SL_FORMAT_PNG: return sl_ops__png_decode(dec, data, size, color, out, NULL, NULL, NULL);
    case SL_FORMAT_WEBP:
        return sl_ops__webp_decode(dec, data, size, color, out, NULL, NULL, NULL);
    default: return unknown_format(data, size);
    }
}

int sl_ops__decode_box(sl_decoder *dec, const void *data, size_t size, sl_color color,
                       const double box[4], const int lim[4], int out_h, int out_w,
                       sl_interp interp, void *out, const sl_ops__norm *norm) {
    switch (sl_image_sniff(data, size)) {
    case SL_FORMAT_JPEG:
        return sl_ops__jpeg_decode_box(dec, data, size, color, box, lim, out_h, out_w, interp,
                                       out, norm);
    case SL_FORMAT_PNG:
    case SL_FORMAT_WEBP: {
        /* no partial decoding in these codecs: decode whole, resample the box */
        const uint8_t *pix;
        int h, w;
        if (sl_image_sniff(data, size) == SL_FORMAT_PNG)
            SL_TRY(sl_ops__png_decode(dec, data, size, color, NULL, &pix, &h, &w));
        else
            SL_TRY(sl_ops__webp_decode(dec, data, size, color, NULL, &pix, &h, &w));
        return sl_ops__resample(pix, h, w, (size_t)w * color, (int)color, box, lim, out_h, out_w,
                                interp, out, (size_t)out_w * color, norm);
    }
    default:
        return unknown_format(data, size);
    }
}

int sl_decode_crop_resize(sl_decoder *dec, const void *data, size_t size, sl_color color,
                          const sl_box *crop, int out_h, int out_w, sl_interp interp,
                          sl_tensor *out) {
    if (!dec || !out || (!data && size))
        return sl__error(SL_EINVAL, "decode: NULL argument");
    SL_TRY(check_color(color));
    if (out_h <= 0 || out_w <= 0 || out_h > (1 << 16) || out_w > (1 << 16))
        return sl__error(SL_EINVAL, "decode: bad output size %dx%d", out_w, out_h);
    if (!sl_ops__interp_pil(interp))
        return sl__error(SL_EINVAL, "decode: unknown interpolation %d", (int)interp);
    sl_image_info info;
    SL_TRY(sl_decode_info(dec, data, size, &info));
    sl_box full = {0, 0, info.height, info.width};
    if (!crop)
        crop = &full;
    if (crop->h <= 0 || crop->w <= 0 || crop->y < 0 || crop->x < 0 ||
        (int64_t)crop->y + crop->h > info.height || (int64_t)crop->x + crop->w > info.width)
        return sl__error(SL_EINVAL, "decode: crop (y %d, x %d, h %d, w %d) outside the %dx%d image",
                         crop->y, crop->x, crop->h, crop->w, info.width, info.height);
    int64_t shape[3] = {out_h, out_w, (int64_t)color};
    int allocated;
    SL_TRY(sl_ops__out_prepare(out, SL_U8, 3, shape, "decode", &allocated));
    double box[4] = {crop->x, crop->y, (double)crop->x + crop->w, (double)crop->y + crop->h};
    int lim[4] = {crop->x, crop->y, crop->x + crop->w, crop->y + crop->h};
    int rc = sl_ops__decode_box(dec, data, size, color, box, lim, out_h, out_w, interp, out->data,
                                NULL);
    if (rc < 0 && allocated)
        sl_tensor_release(out);
    return rc;
}
