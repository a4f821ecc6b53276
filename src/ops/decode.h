/*
 * decode.h — the decoder object shared by decode.c, decode_jpeg.c,
 * decode_png.c and decode_webp.c. Never installed.
 */
#ifndef SL_OPS_DECODE_H
#define SL_OPS_DECODE_H

#include "ops/ops.h"

#include <stdio.h> /* jpeglib.h needs FILE */
#include <jpeglib.h>
#include <setjmp.h>

/* libjpeg reports errors through a callback that must not return: it
 * longjmps back to the decode call that armed `jb`. */
typedef struct sl_jpeg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    int64_t max_scans;
    int warnings; /* sl_warnings */
} sl_jpeg_err;

struct sl_decoder {
    struct jpeg_decompress_struct cinfo;
    sl_jpeg_err jerr;
    struct jpeg_progress_mgr progress;
    int jpeg_ready;
    int64_t max_pixels;
    int64_t max_scans;
    int warnings;         /* sl_warnings */
    int exif_orientation; /* 1: apply the EXIF orientation */
    /* scratch for rows that need converting and for fused decodes */
    uint8_t *scratch;
    size_t scratch_cap;
};

/* SL_EDECODE for a zero size, SL_ELIMIT above the decoder's pixel cap. */
int sl_ops__check_dims(const sl_decoder *dec, uint64_t w, uint64_t h);

/* Grow the decoder's scratch to `n` bytes. */
int sl_ops__dec_scratch(sl_decoder *dec, size_t n);

int sl_ops__jpeg_info(sl_decoder *dec, const uint8_t *data, size_t size, sl_image_info *info);
int sl_ops__jpeg_decode(sl_decoder *dec, const uint8_t *data, size_t size, sl_color color,
                        sl_tensor *out);
/* Decode the part of a JPEG that `box` (x0, y0, x1, y1, original pixels)
 * needs at a DCT scale and resample it into `out` (out_h x out_w x color),
 * reading no source pixel outside `lim` (x0, y0, x1, y1). */
int sl_ops__jpeg_decode_box(sl_decoder *dec, const uint8_t *data, size_t size, sl_color color,
                            const double box[4], const int lim[4], int out_h, int out_w,
                            sl_interp interp, uint8_t *out);

int sl_ops__png_info(sl_decoder *dec, const uint8_t *data, size_t size, sl_image_info *info);
/* Decode a PNG. When `out` is NULL the image goes into the decoder scratch
 * and *pix_out points at it. */
int sl_ops__png_decode(sl_decoder *dec, const uint8_t *data, size_t size, sl_color color,
                       sl_tensor *out, const uint8_t **pix_out, int *h_out, int *w_out);

int sl_ops__webp_info(sl_decoder *dec, const uint8_t *data, size_t size, sl_image_info *info);
/* Decode a still WebP; `out` NULL works as for sl_ops__png_decode. */
int sl_ops__webp_decode(sl_decoder *dec, const uint8_t *data, size_t size, sl_color color,
                        sl_tensor *out, const uint8_t **pix_out, int *h_out, int *w_out);

#endif /* SL_OPS_DECODE_H */
