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
    /* Set once the header up to the first SOS is read: from then on,
     * extraneous bytes may be entropy-coded data the decoder did not use. */
    int past_header;
    /* Extraneous bytes were skipped past_header (sl_ops__jpeg_decode then
     * checks the file on the checking source, decode_jpeg.c). */
    int suspect;
} sl_jpeg_err;

/* A source manager over bytes in memory that hands them to libjpeg a few
 * hundred at a time. libjpeg-turbo's sequential Huffman decoder has two
 * paths: a fast one, taken while at least 512 bytes per block of the MCU
 * are buffered (always, with jpeg_mem_src, except in a file's last few KB
 * and in files with restart markers), which reads a code longer than 16
 * bits, i.e. corrupt data, as 0 and raises no warning; and a slow one,
 * which raises JWRN_HUFF_BAD_CODE. Fed from this source the decoder always
 * takes the slow path, so every corrupt code it reads is reported.
 * Otherwise it behaves as jpeg_mem_src: the same bytes, and past their end
 * JWRN_JPEG_EOF and a fake EOI marker. */
typedef struct sl_jpeg_src {
    struct jpeg_source_mgr pub;
    const uint8_t *data;
    size_t size, pos; /* pos: bytes handed to libjpeg so far */
} sl_jpeg_src;

/* Point `ci` at `data` through `s` (which must outlive the decode). */
void sl_ops__jpeg_checked_src(j_decompress_ptr ci, sl_jpeg_src *s, const uint8_t *data,
                              size_t size);

struct sl_decoder {
    struct jpeg_decompress_struct cinfo;
    sl_jpeg_err jerr;
    struct jpeg_progress_mgr progress;
    int jpeg_ready;
    int64_t max_pixels;
    int64_t max_scans;
    int warnings;         /* sl_warnings */
    int exif_orientation; /* 1: apply the EXIF orientation */
    int check_entropy;    /* SL_DECODE_CHECK_ENTROPY */
    sl_jpeg_src src;      /* the checking source, when a decode uses it */
    /* scratch for rows that need converting and for fused decodes */
    uint8_t *scratch;
    size_t scratch_cap;
    /* the synthetic JPEG of a region decode (jpeg_restart.c) */
    uint8_t *synth;
    size_t synth_cap;
    /* region decodes served from an interval table, and those that fell
     * back to the whole-scan path after a synthetic stream failed: read by
     * tests, which must know which path gave the pixels */
    uint64_t synth_used, synth_fallbacks;
    /* whole decodes on the fast path that skipped extraneous bytes after
     * the header and were decoded again on the checking source: read by
     * tests (clean files must never be decoded twice) */
    uint64_t rechecks;
};

/* Where things are in a JPEG, found by walking its segments up to the first
 * SOS (jpeg_restart.c). Offsets are from the start of the file. */
typedef struct sl_jpeg_layout {
    const uint8_t *data;
    size_t size;
    size_t sof, sos, scan; /* SOF and SOS markers; first byte of scan data */
    int precision, width, height, ncomp, scan_ncomp, hmax, vmax, hmin;
    int mcu_w, mcu_h, mpr, mrows; /* MCU size in pixels, MCUs per row, MCU rows */
    int restart;                  /* DRI, in MCUs; 0 when absent */
    const uint8_t *exif;          /* first APP1 Exif payload, or NULL */
    size_t exif_len;
    const uint8_t *table;         /* APP15 SLRST payload, or NULL */
    size_t table_len;
    /* set when the table checks against the file: baseline, one interleaved
     * scan, grid and restart interval as the table says, row offsets in
     * order; `count` is the number of rows in the table */
    int usable, k, count;
    uint32_t scan_len;
} sl_jpeg_layout;

/* Fill `L` from the bytes; 0 when the segments before the scan cannot be
 * walked (libjpeg then judges the file), 1 otherwise. L->usable says
 * whether a region can be decoded from the interval table. */
int sl_ops__jpeg_layout(const uint8_t *data, size_t size, sl_jpeg_layout *L);

/* A synthetic JPEG holding the region; pixel (0, 0) of its decode at scale
 * s/8 is pixel (ox, oy) of the whole image's decode at that scale. */
typedef struct sl_jpeg_synth {
    const uint8_t *data; /* in the decoder's synth buffer */
    size_t size;
    int ox, oy;          /* scaled pixels */
    int w, h;            /* its size in original pixels (SOF) */
} sl_jpeg_synth;

/* Write into d->synth the JPEG of the intervals covering `reg` (x0, y0, x1,
 * y1 in pixels at scale s/8, s in {1, 2, 4, 8}) of a usable layout.
 * Returns SL_OK, 1 when the table does not match the scan (decode the file
 * the ordinary way), or SL_ENOMEM. */
int sl_ops__jpeg_synth(sl_decoder *d, const sl_jpeg_layout *L, int s, const int reg[4],
                       sl_jpeg_synth *out);

/* The EXIF orientation (1..8) in an APP1 payload that starts "Exif\0\0";
 * 1 when unreadable. */
int sl_ops__exif_orientation(const uint8_t *app1, size_t n);

/* SL_EDECODE for a zero size, SL_ELIMIT above the decoder's pixel cap. */
int sl_ops__check_dims(const sl_decoder *dec, uint64_t w, uint64_t h);

/* Grow the decoder's scratch to `n` bytes. */
int sl_ops__dec_scratch(sl_decoder *dec, size_t n);

int sl_ops__jpeg_info(sl_decoder *dec, const uint8_t *data, size_t size, sl_image_info *info);
int sl_ops__jpeg_decode(sl_decoder *dec, const uint8_t *data, size_t size, sl_color color,
                        sl_tensor *out);
/* Decode the part of a JPEG that `box` (x0, y0, x1, y1, original pixels)
 * needs at a DCT scale and resample it into `out` (out_h x out_w x color),
 * reading no source pixel outside `lim` (x0, y0, x1, y1); with `norm`, into
 * the normalized float32 image it describes (sl_ops__resample). */
int sl_ops__jpeg_decode_box(sl_decoder *dec, const uint8_t *data, size_t size, sl_color color,
                            const double box[4], const int lim[4], int out_h, int out_w,
                            sl_interp interp, void *out, const sl_ops__norm *norm);

/* For the decoders that produce RGB8 rows (PNG, WebP): where the RGB image
 * goes (straight into `out` when RGB output is wanted, else the decoder's
 * scratch), and afterwards the gray conversion and the `pix_out` hand-off
 * (the image in scratch, for the fused ops). `*allocated` tells the caller's
 * cleanup whether `out` was allocated here. */
int sl_ops__rgb_target(sl_decoder *d, sl_color color, int h, int w, sl_tensor *out,
                       int *allocated, uint8_t **rgb_out);
int sl_ops__rgb_finish(sl_decoder *d, uint8_t *rgb, int h, int w, sl_color color,
                       sl_tensor *out, int *allocated, const uint8_t **pix_out, int *h_out,
                       int *w_out);

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
