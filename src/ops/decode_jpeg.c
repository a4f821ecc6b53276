/*
 * decode_jpeg.c — JPEG decoding through libjpeg-turbo's libjpeg API.
 *
 * The libjpeg API (not TurboJPEG) is used because it gives what TurboJPEG
 * 2.1 does not: CMYK output (converted to RGB as PIL does), partial decoding
 * (jpeg_crop_scanline, jpeg_skip_scanlines) for the fused crop, a progress
 * hook to cap the number of progressive scans, and a message hook that turns
 * every warning into an error. Settings equal PIL's: ISLOW DCT and fancy
 * upsampling (libjpeg's defaults), so decoded pixels equal PIL's.
 *
 * Invariant: every path through a decode either finishes or aborts the
 * decompressor, so the reused cinfo is always idle between calls.
 */
#include "ops/decode.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

enum { JERR_KIND_DECODE = 0, JERR_KIND_LIMIT = 1 };

static void on_error_exit(j_common_ptr c) {
    sl_jpeg_err *e = (sl_jpeg_err *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, JERR_KIND_DECODE + 1);
}

/* Warnings (level -1) mean corrupt or truncated data that libjpeg would
 * paper over with grey or repeated pixels: make them errors. */
static void on_emit_message(j_common_ptr c, int level) {
    if (level < 0)
        on_error_exit(c);
}

static void on_output_message(j_common_ptr c) { (void)c; }

static void on_progress(j_common_ptr c) {
    sl_jpeg_err *e = (sl_jpeg_err *)c->err;
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (c->is_decompressor && d->input_scan_number > e->max_scans) {
        snprintf(e->msg, sizeof e->msg, "progressive JPEG has more than %lld scans",
                 (long long)e->max_scans);
        longjmp(e->jb, JERR_KIND_LIMIT + 1);
    }
}

/* libjpeg keeps the quantisation and Huffman tables an image defined for
 * the next one (abbreviated streams). A file must not borrow an earlier
 * file's tables, so a decompressor that holds any is made afresh. */
static int holds_tables(const struct jpeg_decompress_struct *ci) {
    for (int i = 0; i < NUM_QUANT_TBLS; i++)
        if (ci->quant_tbl_ptrs[i])
            return 1;
    for (int i = 0; i < NUM_HUFF_TBLS; i++)
        if (ci->dc_huff_tbl_ptrs[i] || ci->ac_huff_tbl_ptrs[i])
            return 1;
    return 0;
}

static int jpeg_setup(sl_decoder *d) {
    if (d->jpeg_ready && !holds_tables(&d->cinfo))
        return SL_OK;
    if (d->jpeg_ready) {
        jpeg_destroy_decompress(&d->cinfo);
        d->jpeg_ready = 0;
    }
    d->cinfo.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = on_error_exit;
    d->jerr.pub.emit_message = on_emit_message;
    d->jerr.pub.output_message = on_output_message;
    if (setjmp(d->jerr.jb))
        return sl__oom("decode: libjpeg");
    jpeg_create_decompress(&d->cinfo);
    d->progress.progress_monitor = on_progress;
    d->cinfo.progress = &d->progress;
    d->jpeg_ready = 1;
    return SL_OK;
}

/* The status for a longjmp `kind`, with libjpeg's message ("Corrupt JPEG
 * data: ..." becomes "decode: corrupt JPEG data: ..."). */
static int jpeg_failure(sl_decoder *d, int kind) {
    char *m = d->jerr.msg;
    jpeg_abort_decompress(&d->cinfo);
    if (m[0])
        m[0] = (char)tolower((unsigned char)m[0]);
    if (strstr(m, "nsufficient memory"))
        return sl__error(SL_ENOMEM, "decode: %s", m);
    return sl__error(kind == JERR_KIND_LIMIT + 1 ? SL_ELIMIT : SL_EDECODE, "decode: %s", m);
}

static void start(sl_decoder *d, const uint8_t *data, size_t size) {
    d->jerr.msg[0] = '\0';
    d->jerr.max_scans = d->max_scans;
    jpeg_mem_src(&d->cinfo, data, (unsigned long)size);
    (void)jpeg_read_header(&d->cinfo, TRUE);
}

int sl_ops__jpeg_info(sl_decoder *d, const uint8_t *data, size_t size, sl_image_info *info) {
    SL_TRY(jpeg_setup(d));
    int kind = setjmp(d->jerr.jb);
    if (kind)
        return jpeg_failure(d, kind);
    start(d, data, size);
    info->format = SL_FORMAT_JPEG;
    info->width = (int32_t)d->cinfo.image_width;
    info->height = (int32_t)d->cinfo.image_height;
    info->channels = d->cinfo.num_components;
    jpeg_abort_decompress(&d->cinfo);
    return sl_ops__check_dims(d, (uint64_t)info->width, (uint64_t)info->height);
}

/* Output colour space for libjpeg: gray files stay gray, CMYK/YCCK come out
 * as CMYK (converted below), everything else as RGB. Returns channels. */
static int set_out_space(j_decompress_ptr ci) {
    ci->dct_method = JDCT_ISLOW;
    ci->do_fancy_upsampling = TRUE;
    switch (ci->jpeg_color_space) {
    case JCS_GRAYSCALE:
        ci->out_color_space = JCS_GRAYSCALE;
        return 1;
    case JCS_CMYK:
    case JCS_YCCK:
        ci->out_color_space = JCS_CMYK;
        return 4;
    default:
        ci->out_color_space = JCS_RGB;
        return 3;
    }
}

/* PIL reads CMYK JPEGs inverted (Adobe convention, rawmode "CMYK;I") and
 * converts to RGB as out = (255-k) - (c*(255-k))/255 with its rounding. */
static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, size_t npix) {
    for (size_t i = 0; i < npix; i++) {
        unsigned nk = in[4 * i + 3];
        for (int c = 0; c < 3; c++) {
            unsigned v = 255u - in[4 * i + c];
            unsigned t = v * nk + 128u;
            out[3 * i + c] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
        }
    }
}

static void gray_to_rgb(const uint8_t *in, uint8_t *out, size_t npix) {
    for (size_t i = 0; i < npix; i++)
        out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = in[i];
}

/* Convert one decoded row of `jc` channels into `color` channels. */
static void convert_row(const uint8_t *in, int jc, uint8_t *out, sl_color color, size_t w,
                        uint8_t *tmp) {
    if (jc == (int)color) {
        if (in != out)
            memcpy(out, in, w * jc);
    } else if (jc == 1) {
        gray_to_rgb(in, out, w);
    } else if (jc == 3) {
        sl_ops__rgb_to_gray(in, out, w);
    } else if (color == SL_COLOR_RGB) {
        cmyk_to_rgb(in, out, w);
    } else {
        cmyk_to_rgb(in, tmp, w);
        sl_ops__rgb_to_gray(tmp, out, w);
    }
}

int sl_ops__jpeg_decode(sl_decoder *d, const uint8_t *data, size_t size, sl_color color,
                        sl_tensor *out) {
    SL_TRY(jpeg_setup(d));
    j_decompress_ptr ci = &d->cinfo;
    volatile int allocated = 0;
    int kind = setjmp(d->jerr.jb);
    if (kind) {
        int rc = jpeg_failure(d, kind);
        if (allocated)
            sl_tensor_release(out);
        return rc;
    }
    start(d, data, size);
    int rc = sl_ops__check_dims(d, ci->image_width, ci->image_height);
    int jc = set_out_space(ci);
    size_t w = ci->image_width;
    /* row conversion buffer: a jc-channel row plus an RGB row for CMYK->gray */
    if (rc == SL_OK && jc != (int)color)
        rc = sl_ops__dec_scratch(d, w * 4 + w * 3);
    if (rc == SL_OK) {
        int64_t shape[3] = {ci->image_height, ci->image_width, (int64_t)color};
        int a = 0;
        rc = sl_ops__out_prepare(out, SL_U8, 3, shape, "decode", &a);
        allocated = a;
    }
    if (rc < 0) {
        jpeg_abort_decompress(ci);
        return rc;
    }
    (void)jpeg_start_decompress(ci);
    uint8_t *dst = out->data;
    size_t stride = w * (size_t)color;
    if (jc == (int)color) {
        while (ci->output_scanline < ci->output_height) {
            JSAMPROW rows[16];
            int n = 0;
            for (; n < 16 && ci->output_scanline + n < ci->output_height; n++)
                rows[n] = dst + (size_t)(ci->output_scanline + n) * stride;
            (void)jpeg_read_scanlines(ci, rows, (JDIMENSION)n);
        }
    } else {
        uint8_t *row = d->scratch, *tmp = d->scratch + w * 4;
        while (ci->output_scanline < ci->output_height) {
            uint8_t *o = dst + (size_t)ci->output_scanline * stride;
            JSAMPROW r = row;
            (void)jpeg_read_scanlines(ci, &r, 1);
            convert_row(row, jc, o, color, w, tmp);
        }
    }
    (void)jpeg_finish_decompress(ci);
    return SL_OK;
}

int sl_ops__jpeg_decode_box(sl_decoder *d, const uint8_t *data, size_t size, sl_color color,
                            const double box[4], const int lim[4], int out_h, int out_w,
                            sl_interp interp, uint8_t *out) {
    SL_TRY(jpeg_setup(d));
    j_decompress_ptr ci = &d->cinfo;
    int kind = setjmp(d->jerr.jb);
    if (kind)
        return jpeg_failure(d, kind);
    start(d, data, size);
    int rc = sl_ops__check_dims(d, ci->image_width, ci->image_height);
    if (rc < 0) {
        jpeg_abort_decompress(ci);
        return rc;
    }
    int jc = set_out_space(ci);
    double bw = box[2] - box[0], bh = box[3] - box[1];
    /* The smallest scale s/8 at which the box still has at least the output's
     * pixels in each direction: each 8x8 DCT block is decoded straight to
     * s x s, so the work shrinks with s^2 and the result is pre-filtered.
     * Only 1/8, 2/8, 4/8 and 8/8 are used: libjpeg-turbo has SIMD inverse
     * DCTs for those, while 3/8, 5/8, 6/8 and 7/8 run scalar 3x3..14x14
     * transforms (chroma at twice the size) that cost more than they save. */
    int s = 8;
    for (int t = 1; t <= 8; t *= 2) {
        if (bw * t >= (double)out_w * 8 && bh * t >= (double)out_h * 8) {
            s = t;
            break;
        }
    }
    ci->scale_num = (unsigned)s;
    ci->scale_denom = 8;
    (void)jpeg_start_decompress(ci);
    const double f = s / 8.0;
    int full_w = (int)ci->output_width, full_h = (int)ci->output_height;
    /* Decode the box plus the filter's reach around it, within `lim`. */
    double fsx = bw * f / out_w, fsy = bh * f / out_h;
    int mx = (int)ceil(fsx < 1 ? 1 : fsx) + 1, my = (int)ceil(fsy < 1 ? 1 : fsy) + 1;
    int lx0 = (int)floor(lim[0] * f), ly0 = (int)floor(lim[1] * f);
    int lx1 = (int)ceil(lim[2] * f), ly1 = (int)ceil(lim[3] * f);
    if (lx1 > full_w)
        lx1 = full_w;
    if (ly1 > full_h)
        ly1 = full_h;
    int rx0 = (int)floor(box[0] * f) - mx, rx1 = (int)ceil(box[2] * f) + mx;
    int ry0 = (int)floor(box[1] * f) - my, ry1 = (int)ceil(box[3] * f) + my;
    rx0 = rx0 < lx0 ? lx0 : rx0;
    ry0 = ry0 < ly0 ? ly0 : ry0;
    rx1 = rx1 > lx1 ? lx1 : rx1;
    ry1 = ry1 > ly1 ? ly1 : ry1;
    if (rx1 <= rx0)
        rx1 = rx0 + 1;
    if (ry1 <= ry0)
        ry1 = ry0 + 1;
    JDIMENSION xoff = (JDIMENSION)rx0, cw = (JDIMENSION)(rx1 - rx0);
    if (cw < ci->output_width)
        jpeg_crop_scanline(ci, &xoff, &cw);
    int rows = ry1 - ry0;
    size_t w = cw;
    size_t region = w * (size_t)rows * (size_t)color;
    rc = sl_ops__dec_scratch(d, region + w * 4 + w * 3 + 64);
    if (rc < 0) {
        jpeg_abort_decompress(ci);
        return rc;
    }
    uint8_t *reg = d->scratch, *row = d->scratch + region, *tmp = row + w * 4;
    if (ry0 > 0)
        (void)jpeg_skip_scanlines(ci, (JDIMENSION)ry0);
    if (jc == (int)color) {
        /* several rows per call: fewer trips through libjpeg's controllers */
        for (int y = 0; y < rows;) {
            JSAMPROW r[8];
            int k = rows - y < 8 ? rows - y : 8;
            for (int i = 0; i < k; i++)
                r[i] = reg + (size_t)(y + i) * w * color;
            JDIMENSION got = jpeg_read_scanlines(ci, r, (JDIMENSION)k);
            if (got == 0) {
                jpeg_abort_decompress(ci);
                return sl__error(SL_EDECODE, "decode: JPEG ended before row %d", ry0 + y);
            }
            y += (int)got;
        }
    } else {
        for (int y = 0; y < rows; y++) {
            uint8_t *o = reg + (size_t)y * w * color;
            JSAMPROW r = row;
            if (jpeg_read_scanlines(ci, &r, 1) != 1) {
                jpeg_abort_decompress(ci);
                return sl__error(SL_EDECODE, "decode: JPEG ended before row %d", ry0 + y);
            }
            convert_row(r, jc, o, color, w, tmp);
        }
    }
    /* The rows below the region are never decoded. */
    jpeg_abort_decompress(ci);
    double rbox[4] = {box[0] * f - xoff, box[1] * f - ry0, box[2] * f - xoff, box[3] * f - ry0};
    int rlim[4] = {rx0 - (int)xoff, 0, rx1 - (int)xoff, rows};
    if (rbox[0] < rlim[0])
        rbox[0] = rlim[0];
    if (rbox[1] < 0)
        rbox[1] = 0;
    if (rbox[2] > rlim[2])
        rbox[2] = rlim[2];
    if (rbox[3] > rlim[3])
        rbox[3] = rlim[3];
    return sl_ops__resample(reg, rows, (int)w, w * color, (int)color, rbox, rlim, out_h, out_w,
                            interp, out, (size_t)out_w * color);
}
