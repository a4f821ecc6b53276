/*
 * decode_jpeg.c — JPEG decoding through libjpeg-turbo's libjpeg API.
 *
 * The libjpeg API (not TurboJPEG) is used because it gives what TurboJPEG
 * 2.1 does not: CMYK output (converted to RGB as PIL does), partial decoding
 * (jpeg_crop_scanline, jpeg_skip_scanlines) for the fused crop, a progress
 * hook to cap the number of progressive scans, a message hook that sorts
 * warnings by what they mean for the pixels, and the saved APP1 marker for
 * the EXIF orientation. Settings equal PIL's: ISLOW DCT and fancy upsampling
 * (libjpeg's defaults), so decoded pixels equal PIL's.
 *
 * Invariants:
 *  1. Every path through a decode, the error longjmps included, either
 *     finishes or aborts the decompressor before returning, so no image
 *     memory is held and nothing points at the caller's bytes afterwards.
 *  2. Every call starts on a decompressor that has read no file before
 *     (jpeg_begin), so no file can change how a later one decodes.
 */
#include "ops/decode.h"

#include <jerror.h>

#include <ctype.h>
#include <math.h>
#include <string.h>

enum { JERR_KIND_DECODE = 0, JERR_KIND_LIMIT = 1 };

static void on_error_exit(j_common_ptr c) {
    sl_jpeg_err *e = (sl_jpeg_err *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, JERR_KIND_DECODE + 1);
}

/* Whether warning `code` fails the decode under `mode` (sl_warnings); the
 * table in docs/OPS.md gives each decision with its reason. */
static int warning_fails(int code, int mode) {
    if (mode == SL_WARNINGS_STRICT)
        return 1;
    switch (code) {
    case JWRN_JPEG_EOF:
        /* The file ends early and libjpeg fills the rest with grey; PIL
         * refuses such a file too ("image file is truncated"). */
        return 1;
    case JWRN_EXTRANEOUS_DATA:  /* bytes between segments are skipped */
    case JWRN_JFIF_MAJOR:       /* only the version number is unknown */
    case JWRN_ADOBE_XFORM:      /* YCbCr is assumed, as every other reader does */
    case JWRN_NOT_SEQUENTIAL:   /* the scan is read as the baseline scan it is */
    case JWRN_BOGUS_ICC:        /* the ICC profile is not used */
        return 0;
    default:
        /* HIT_MARKER, HUFF_BAD_CODE, ARITH_BAD_CODE, MUST_RESYNC,
         * BOGUS_PROGRESSION, TOO_MUCH_DATA: coefficients were lost or
         * guessed; PIL decodes through them silently. */
        return mode != SL_WARNINGS_LENIENT;
    }
}

static void on_emit_message(j_common_ptr c, int level) {
    sl_jpeg_err *e = (sl_jpeg_err *)c->err;
    if (level >= 0)
        return;
    /* Past the header, skipped bytes may be entropy-coded data the decoder
     * never used because it lost step with the stream: on the fast Huffman
     * path the one trace corrupt codes may leave. */
    if (c->err->msg_code == JWRN_EXTRANEOUS_DATA && e->past_header)
        e->suspect = 1;
    if (warning_fails(c->err->msg_code, e->warnings))
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

/* A decompressor that has read no file. jpeg_abort_decompress frees the
 * image memory but keeps the quantization and Huffman tables (libjpeg puts
 * them in its permanent pool so that a tables-only stream can precede
 * abbreviated images); a later file that omits DQT/DHT, as Motion-JPEG
 * frames do, would then decode with the previous file's tables, or not fail
 * where a fresh decoder fails. Resetting the pointers would leak pool memory
 * per image, so the decompressor is destroyed and created again instead:
 * a few small allocations against the hundreds a decode makes. */
static int jpeg_begin(sl_decoder *d) {
    if (d->jpeg_ready) {
        jpeg_destroy_decompress(&d->cinfo);
        d->jpeg_ready = 0;
    }
    d->cinfo.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = on_error_exit;
    d->jerr.pub.emit_message = on_emit_message;
    d->jerr.pub.output_message = on_output_message;
    if (setjmp(d->jerr.jb)) {
        jpeg_destroy_decompress(&d->cinfo); /* frees what was made; safe when nothing was */
        return sl__oom("decode: libjpeg");
    }
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

/* The EXIF orientation (1..8) in an APP1 payload; 1 when unreadable. The
 * TIFF walk is done here, with a bounds check on every read of the hostile
 * bytes, because it needs one tag of IFD0: a library for it (libexif) would
 * be a dependency for twenty lines. */
int sl_ops__exif_orientation(const uint8_t *app1, size_t len) {
    if (len < 6 || memcmp(app1, "Exif\0\0", 6) != 0)
        return 1;
    const uint8_t *t = app1 + 6;
    size_t n = len - 6;
    if (n < 8)
        return 1;
    int le;
    if (t[0] == 'I' && t[1] == 'I')
        le = 1;
    else if (t[0] == 'M' && t[1] == 'M')
        le = 0;
    else
        return 1;
#define U16(p) (le ? (uint32_t)(p)[0] | (uint32_t)(p)[1] << 8 : (uint32_t)(p)[0] << 8 | (p)[1])
#define U32(p) (le ? U16(p) | U16((p) + 2) << 16 : U16(p) << 16 | U16((p) + 2))
    if (U16(t + 2) != 42)
        return 1;
    uint32_t ifd = U32(t + 4);
    if (ifd > n || n - ifd < 2)
        return 1;
    uint32_t count = U16(t + ifd);
    if (count > (n - ifd - 2) / 12)
        count = (uint32_t)((n - ifd - 2) / 12);
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *e = t + ifd + 2 + 12 * (size_t)i;
        if (U16(e) != 0x0112)
            continue;
        uint32_t type = U16(e + 2), v;
        if (U32(e + 4) != 1)
            return 1;
        if (type == 3) /* SHORT */
            v = U16(e + 8);
        else if (type == 4) /* LONG */
            v = U32(e + 8);
        else
            return 1;
        return v >= 1 && v <= 8 ? (int)v : 1;
    }
#undef U32
#undef U16
    return 1;
}

/* The orientation from the saved APP1 markers: like PIL, the first Exif
 * APP1 segment counts. */
static int exif_orientation(j_decompress_ptr ci) {
    for (jpeg_saved_marker_ptr m = ci->marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 &&
            memcmp(m->data, "Exif\0\0", 6) == 0)
            return sl_ops__exif_orientation(m->data, m->data_length);
    return 1;
}

/* ---- the checking source (decode.h, sl_jpeg_src) ---------------------------- */

/* Bytes per refill: below 512, what libjpeg-turbo's fast Huffman path needs
 * buffered per block of an MCU (jdhuff.c, decode_mcu: BUFSIZE), for an MCU
 * of one block, so no MCU of any file starts on the fast path. A 36 KB photo
 * takes ~150 refills, each a few stores. */
#define CHECKED_SRC_CHUNK 256

static void checked_init(j_decompress_ptr ci) { (void)ci; }

static boolean checked_fill(j_decompress_ptr ci) {
    static const JOCTET fake_eoi[2] = {0xFF, JPEG_EOI};
    sl_jpeg_src *s = (sl_jpeg_src *)ci->src;
    if (s->pos < s->size) {
        size_t n = s->size - s->pos < CHECKED_SRC_CHUNK ? s->size - s->pos : CHECKED_SRC_CHUNK;
        s->pub.next_input_byte = s->data + s->pos;
        s->pub.bytes_in_buffer = n;
        s->pos += n;
        return TRUE;
    }
    /* past the end: as jpeg_mem_src, a warning and an EOI marker */
    WARNMS(ci, JWRN_JPEG_EOF);
    s->pub.next_input_byte = fake_eoi;
    s->pub.bytes_in_buffer = 2;
    return TRUE;
}

static void checked_skip(j_decompress_ptr ci, long n) {
    sl_jpeg_src *s = (sl_jpeg_src *)ci->src;
    if (n <= 0)
        return;
    if ((size_t)n <= s->pub.bytes_in_buffer) {
        s->pub.next_input_byte += n;
        s->pub.bytes_in_buffer -= (size_t)n;
        return;
    }
    size_t rest = (size_t)n - s->pub.bytes_in_buffer;
    s->pub.bytes_in_buffer = 0; /* the next read refills from pos */
    if (rest <= s->size - s->pos) {
        s->pos += rest;
        return;
    }
    s->pos = s->size;
    (void)checked_fill(ci); /* the skip runs past the end */
}

static void checked_term(j_decompress_ptr ci) { (void)ci; }

void sl_ops__jpeg_checked_src(j_decompress_ptr ci, sl_jpeg_src *s, const uint8_t *data,
                              size_t size) {
    memset(s, 0, sizeof *s);
    s->pub.init_source = checked_init;
    s->pub.fill_input_buffer = checked_fill;
    s->pub.skip_input_data = checked_skip;
    s->pub.resync_to_restart = jpeg_resync_to_restart;
    s->pub.term_source = checked_term;
    s->data = data;
    s->size = size;
    ci->src = &s->pub;
}

/* Whether decodes on `d` go through the checking source: corrupt entropy
 * data must fail in strict mode, and wherever the caller asked for it. */
static int checks_entropy(const sl_decoder *d) {
    return d->check_entropy || d->warnings == SL_WARNINGS_STRICT;
}

/* Read the header of `data` from memory (`checked` 0) or through the
 * checking source; returns the orientation to apply (1: none). */
static int start(sl_decoder *d, const uint8_t *data, size_t size, int checked) {
    d->jerr.msg[0] = '\0';
    d->jerr.max_scans = d->max_scans;
    d->jerr.warnings = d->warnings;
    d->jerr.past_header = 0;
    d->jerr.suspect = 0;
    if (checked)
        sl_ops__jpeg_checked_src(&d->cinfo, &d->src, data, size);
    else
        jpeg_mem_src(&d->cinfo, data, (unsigned long)size);
    if (d->exif_orientation)
        jpeg_save_markers(&d->cinfo, JPEG_APP0 + 1, 0xffff);
    (void)jpeg_read_header(&d->cinfo, TRUE);
    d->jerr.past_header = 1;
    return d->exif_orientation ? exif_orientation(&d->cinfo) : 1;
}

int sl_ops__jpeg_info(sl_decoder *d, const uint8_t *data, size_t size, sl_image_info *info) {
    SL_TRY(jpeg_begin(d));
    int kind = setjmp(d->jerr.jb);
    if (kind)
        return jpeg_failure(d, kind);
    int o = start(d, data, size, 0);
    info->format = SL_FORMAT_JPEG;
    info->width = (int32_t)d->cinfo.image_width;
    info->height = (int32_t)d->cinfo.image_height;
    info->channels = d->cinfo.num_components;
    jpeg_abort_decompress(&d->cinfo);
    if (o >= 5) {
        int32_t t = info->width;
        info->width = info->height;
        info->height = t;
    }
    return sl_ops__check_dims(d, (uint64_t)info->width, (uint64_t)info->height);
}

/* Write the h x w x c image `src`, turned upright by EXIF orientation `o`,
 * into `dst` (w x h for o >= 5). Each case names the stored pixel of upright
 * pixel (0, 0) and the stored step for one upright column and one row, as
 * PIL's ImageOps.exif_transpose turns: 2 mirror, 3 rotate 180, 4 flip,
 * 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate 90
 * anticlockwise. */
static void orient(const uint8_t *src, int h, int w, int c, int o, uint8_t *dst) {
    ptrdiff_t row = (ptrdiff_t)w * c, last_row = (ptrdiff_t)(h - 1) * row,
              last_col = (ptrdiff_t)(w - 1) * c;
    ptrdiff_t base, sx, sy;
    switch (o) {
    case 2: base = last_col, sx = -c, sy = row; break;
    case 3: base = last_row + last_col, sx = -c, sy = -row; break;
    case 4: base = last_row, sx = c, sy = -row; break;
    case 5: base = 0, sx = row, sy = c; break;
    case 6: base = last_row, sx = -row, sy = c; break;
    case 7: base = last_row + last_col, sx = -row, sy = -c; break;
    case 8: base = last_col, sx = row, sy = -c; break;
    default: base = 0, sx = c, sy = row; break;
    }
    int oh = o >= 5 ? w : h, ow = o >= 5 ? h : w;
    for (int y = 0; y < oh; y++) {
        const uint8_t *p = src + base + y * sy;
        for (int x = 0; x < ow; x++, p += sx, dst += c)
            for (int k = 0; k < c; k++)
                dst[k] = p[k];
    }
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

/* Read the whole started image into `dst` (rows `stride` apart) as `color`;
 * `conv` is scratch for w*7 bytes when the file's channels `jc` differ. */
static void read_image(j_decompress_ptr ci, int jc, sl_color color, uint8_t *dst, size_t stride,
                       uint8_t *conv) {
    size_t w = ci->output_width;
    if (jc == (int)color) {
        while (ci->output_scanline < ci->output_height) {
            JSAMPROW rows[16];
            int n = 0;
            for (; n < 16 && ci->output_scanline + n < ci->output_height; n++)
                rows[n] = dst + (size_t)(ci->output_scanline + n) * stride;
            (void)jpeg_read_scanlines(ci, rows, (JDIMENSION)n);
        }
    } else {
        uint8_t *row = conv, *tmp = conv + w * 4;
        while (ci->output_scanline < ci->output_height) {
            uint8_t *o = dst + (size_t)ci->output_scanline * stride;
            JSAMPROW r = row;
            (void)jpeg_read_scanlines(ci, &r, 1);
            convert_row(row, jc, o, color, w, tmp);
        }
    }
}

/* One whole decode, from memory or (`checked`) through the checking source. */
static int jpeg_decode_pass(sl_decoder *d, const uint8_t *data, size_t size, sl_color color,
                            sl_tensor *out, int checked) {
    SL_TRY(jpeg_begin(d));
    j_decompress_ptr ci = &d->cinfo;
    volatile int allocated = 0;
    int kind = setjmp(d->jerr.jb);
    if (kind) {
        int rc = jpeg_failure(d, kind);
        if (allocated)
            sl_tensor_release(out);
        return rc;
    }
    int o = start(d, data, size, checked);
    int rc = sl_ops__check_dims(d, ci->image_width, ci->image_height);
    int jc = set_out_space(ci);
    size_t w = ci->image_width, h = ci->image_height;
    /* A turned image is decoded into the scratch first, then turned into
     * `out`; the row conversion buffer follows it. */
    size_t img = o != 1 ? w * h * (size_t)color : 0, conv = jc != (int)color ? w * 7 : 0;
    if (rc == SL_OK && img + conv)
        rc = sl_ops__dec_scratch(d, img + conv);
    if (rc == SL_OK) {
        int64_t shape[3] = {(int64_t)h, (int64_t)w, (int64_t)color};
        if (o >= 5) {
            shape[0] = (int64_t)w;
            shape[1] = (int64_t)h;
        }
        int a = 0;
        rc = sl_ops__out_prepare(out, SL_U8, 3, shape, "decode", &a);
        allocated = a;
    }
    if (rc < 0) {
        jpeg_abort_decompress(ci);
        return rc;
    }
    (void)jpeg_start_decompress(ci);
    uint8_t *dst = o != 1 ? d->scratch : out->data;
    /* the conversion row exists only when one is needed (scratch may be NULL) */
    read_image(ci, jc, color, dst, w * (size_t)color, conv ? d->scratch + img : NULL);
    (void)jpeg_finish_decompress(ci);
    if (o != 1)
        orient(d->scratch, (int)h, (int)w, (int)color, o, out->data);
    return SL_OK;
}

/* A whole decode. In default mode it runs on the fast path (jpeg_mem_src),
 * which reads a corrupt Huffman code as 0 without a word; the decoder then
 * loses step with the stream and, unless the damage runs it into the next
 * marker (JWRN_HIT_MARKER, which fails) or lies where libjpeg takes its
 * slow path anyway, leaves bytes it never used before the marker that ends
 * the scan: JWRN_EXTRANEOUS_DATA past the header. Such a file (rare: clean
 * files end each scan on their last byte) is decoded again on the checking
 * source, and that decode's warnings decide; the cost falls on those files
 * alone. Bytes skipped between header segments before the first scan say
 * nothing about the entropy data and cause no second decode. */
int sl_ops__jpeg_decode(sl_decoder *d, const uint8_t *data, size_t size, sl_color color,
                        sl_tensor *out) {
    const int checked = checks_entropy(d), was_empty = out->data == NULL;
    int rc = jpeg_decode_pass(d, data, size, color, out, checked);
    if (rc < 0 || checked || !d->jerr.suspect || d->warnings == SL_WARNINGS_LENIENT)
        return rc;
    d->rechecks++;
    rc = jpeg_decode_pass(d, data, size, color, out, 1);
    if (rc < 0 && was_empty)
        sl_tensor_release(out);
    return rc;
}

/* The fused path for a turned image: `box` and `lim` are upright
 * coordinates, so decode whole, turn, and resample from that, as the PNG
 * path does. */
static int decode_box_turned(sl_decoder *d, int jc, int o, sl_color color, const double box[4],
                             const int lim[4], int out_h, int out_w, sl_interp interp,
                             void *out, const sl_ops__norm *norm) {
    j_decompress_ptr ci = &d->cinfo;
    size_t w = ci->image_width, h = ci->image_height, img = w * h * (size_t)color;
    int rc = sl_ops__dec_scratch(d, 2 * img + w * 7);
    if (rc < 0) {
        jpeg_abort_decompress(ci);
        return rc;
    }
    (void)jpeg_start_decompress(ci);
    read_image(ci, jc, color, d->scratch, w * (size_t)color, d->scratch + 2 * img);
    (void)jpeg_finish_decompress(ci);
    uint8_t *up = d->scratch + img;
    orient(d->scratch, (int)h, (int)w, (int)color, o, up);
    int uh = o >= 5 ? (int)w : (int)h, uw = o >= 5 ? (int)h : (int)w;
    return sl_ops__resample(up, uh, uw, (size_t)uw * color, (int)color, box, lim, out_h, out_w,
                            interp, out, (size_t)out_w * color, norm);
}

/* The smallest scale s/8 at which the box still has at least the output's
 * pixels in each direction: each 8x8 DCT block is decoded straight to
 * s x s, so the work shrinks with s^2 and the result is pre-filtered.
 * Only 1/8, 2/8, 4/8 and 8/8 are used: libjpeg-turbo has SIMD inverse
 * DCTs for those, while 3/8, 5/8, 6/8 and 7/8 run scalar 3x3..14x14
 * transforms (chroma at twice the size) that cost more than they save.
 * Not inlined: its loop variable, inlined into a function that calls
 * setjmp, draws a -Wclobbered warning. */
static __attribute__((noinline)) int pick_scale(const double box[4], int out_h, int out_w) {
    double bw = box[2] - box[0], bh = box[3] - box[1];
    for (int t = 1; t <= 8; t *= 2)
        if (bw * t >= (double)out_w * 8 && bh * t >= (double)out_h * 8)
            return t;
    return 8;
}

/* The region to decode, r = (x0, y0, x1, y1) in pixels at scale s/8 of a
 * full_w x full_h scaled image: the box plus the filter's reach around it,
 * within `lim`. */
static void pick_region(const double box[4], const int lim[4], int out_h, int out_w, int s,
                        int full_w, int full_h, int r[4]) {
    const double f = s / 8.0;
    double fsx = (box[2] - box[0]) * f / out_w, fsy = (box[3] - box[1]) * f / out_h;
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
    r[0] = rx0, r[1] = ry0, r[2] = rx1, r[3] = ry1;
}

/* Read the next `rows` rows of the started image into `reg` (w pixels of
 * `color` per row); `row` and `tmp` are scratch for w*4 and w*3 bytes when
 * the file's channels `jc` differ. Returns the rows read. */
static int read_rows(j_decompress_ptr ci, int jc, sl_color color, uint8_t *reg, size_t w,
                     int rows, uint8_t *row, uint8_t *tmp) {
    int y = 0;
    if (jc == (int)color) {
        /* several rows per call: fewer trips through libjpeg's controllers */
        while (y < rows) {
            JSAMPROW r[8];
            int k = rows - y < 8 ? rows - y : 8;
            for (int i = 0; i < k; i++)
                r[i] = reg + (size_t)(y + i) * w * color;
            JDIMENSION got = jpeg_read_scanlines(ci, r, (JDIMENSION)k);
            if (got == 0)
                break;
            y += (int)got;
        }
    } else {
        for (; y < rows; y++) {
            JSAMPROW r = row;
            if (jpeg_read_scanlines(ci, &r, 1) != 1)
                break;
            convert_row(r, jc, reg + (size_t)y * w * color, color, w, tmp);
        }
    }
    return y;
}

/* Resample from a decoded region: `reg` (rows x w) holds the pixels of the
 * scale-s/8 image from (ox, oy); `r` is the region the filter may read.
 * The resampler is handed the region from r's corner whatever the decode
 * path aligned it to, so its (float) box arithmetic, and so its pixels, are
 * the same on every path, and equal crop-then-resize's when r is the box. */
static int resample_region(const uint8_t *reg, int w, int ox, int oy, const int r[4], int s,
                           sl_color color, const double box[4], int out_h, int out_w,
                           sl_interp interp, void *out, const sl_ops__norm *norm) {
    const double f = s / 8.0;
    size_t stride = (size_t)w * color;
    const uint8_t *src = reg + (size_t)(r[1] - oy) * stride + (size_t)(r[0] - ox) * color;
    int rw = r[2] - r[0], rh = r[3] - r[1];
    double rbox[4] = {box[0] * f - r[0], box[1] * f - r[1], box[2] * f - r[0], box[3] * f - r[1]};
    int rlim[4] = {0, 0, rw, rh};
    if (rbox[0] < 0)
        rbox[0] = 0;
    if (rbox[1] < 0)
        rbox[1] = 0;
    if (rbox[2] > rw)
        rbox[2] = rw;
    if (rbox[3] > rh)
        rbox[3] = rh;
    return sl_ops__resample(src, rh, rw, stride, (int)color, rbox, rlim, out_h, out_w, interp,
                            out, (size_t)out_w * color, norm);
}

/* Restrict the started decode to the output columns [x0, x1) and what the
 * upsampler needs around them; *xoff and *cw receive the columns libjpeg
 * will deliver. jpeg_crop_scanline widens the columns to iMCU boundaries,
 * and its upsampler treats the widened edges as image edges: with
 * subsampled chroma, a column at such an edge would be interpolated from
 * one chroma sample instead of two and differ from a whole decode. One more
 * column on each side moves those edges off [x0, x1). And libjpeg switches
 * a component to plain replication when the crop leaves it fewer than two
 * samples wide, so a crop is never narrower than two samples of the most
 * subsampled component plus one (widened right, then left). */
static void crop_columns(j_decompress_ptr ci, int x0, int x1, JDIMENSION *xoff, JDIMENSION *cw) {
    int w = (int)ci->output_width;
    int cx0 = x0 > 0 ? x0 - 1 : 0, cx1 = x1 < w ? x1 + 1 : w;
    int hmin = ci->max_h_samp_factor;
    for (int c = 0; c < ci->num_components; c++)
        hmin = ci->comp_info[c].h_samp_factor < hmin ? ci->comp_info[c].h_samp_factor : hmin;
    /* output pixels per sample of the most subsampled component, rounded up */
    int per = (ci->max_h_samp_factor + hmin - 1) / hmin;
    int least = 2 * per + 1;
    if (cx1 - cx0 < least)
        cx1 = cx0 + least < w ? cx0 + least : w;
    if (cx1 - cx0 < least)
        cx0 = cx1 - least > 0 ? cx1 - least : 0;
    *xoff = (JDIMENSION)cx0;
    *cw = (JDIMENSION)(cx1 - cx0);
    if (*cw < ci->output_width)
        jpeg_crop_scanline(ci, xoff, cw);
    else
        *xoff = 0, *cw = ci->output_width;
}

/* The region through a synthetic JPEG of the intervals that cover it
 * (jpeg_restart.c). Returns SL_OK, an error that the ordinary path would
 * give too (SL_ELIMIT, SL_ENOMEM), or 1: decode the file the ordinary way.
 * Every libjpeg warning on the synthetic stream counts as a failure: the
 * ordinary path then decodes the file under the caller's warnings policy,
 * so damaged data gets the same answer, pixels or error, either way. */
static int decode_box_synth(sl_decoder *d, const sl_jpeg_layout *L, sl_color color,
                            const double box[4], const int lim[4], int out_h, int out_w,
                            sl_interp interp, void *out, const sl_ops__norm *norm) {
    SL_TRY(sl_ops__check_dims(d, (uint64_t)L->width, (uint64_t)L->height));
    int s = pick_scale(box, out_h, out_w);
    int r[4];
    pick_region(box, lim, out_h, out_w, s, (L->width * s + 7) / 8, (L->height * s + 7) / 8, r);
    sl_jpeg_synth sy;
    int rc = sl_ops__jpeg_synth(d, L, s, r, &sy);
    if (rc != SL_OK)
        return rc;
    SL_TRY(jpeg_begin(d));
    j_decompress_ptr ci = &d->cinfo;
    /* The synthetic stream is one baseline scan (a usable layout is), so
     * the scan cap has nothing to count: no progress hook, which libjpeg
     * would call for every row group (jpeg_begin sets it again). */
    ci->progress = NULL;
    if (setjmp(d->jerr.jb)) {
        jpeg_abort_decompress(ci);
        return 1;
    }
    d->jerr.msg[0] = '\0';
    d->jerr.max_scans = d->max_scans;
    d->jerr.warnings = SL_WARNINGS_STRICT;
    jpeg_mem_src(ci, sy.data, (unsigned long)sy.size);
    (void)jpeg_read_header(ci, TRUE);
    int jc = set_out_space(ci);
    ci->scale_num = (unsigned)s;
    ci->scale_denom = 8;
    (void)jpeg_start_decompress(ci);
    int w = (int)ci->output_width, rows = r[3] - sy.oy;
    if (sy.ox > r[0] || sy.oy > r[1] || sy.ox + w < r[2] || (int)ci->output_height < rows) {
        jpeg_abort_decompress(ci);
        return 1;
    }
    /* The intervals are wider than the region (k MCUs each): the columns
     * outside it are entropy-decoded anyway, but their inverse DCT,
     * upsampling and colour conversion are skipped. */
    JDIMENSION xoff, cw;
    crop_columns(ci, r[0] - sy.ox, r[2] - sy.ox, &xoff, &cw);
    w = (int)cw;
    int ox = sy.ox + (int)xoff;
    size_t region = (size_t)w * (size_t)rows * (size_t)color;
    rc = sl_ops__dec_scratch(d, region + (size_t)w * 7 + 64);
    if (rc < 0) {
        jpeg_abort_decompress(ci);
        return rc;
    }
    uint8_t *reg = d->scratch, *row = reg + region, *tmp = row + (size_t)w * 4;
    /* The rows above the region (at most one MCU row and the context row)
     * are read too: skipping them would save little, and reading keeps the
     * upsampler's context the same as in a whole decode. */
    int got = read_rows(ci, jc, color, reg, (size_t)w, rows, row, tmp);
    jpeg_abort_decompress(ci);
    if (got != rows)
        return 1;
    d->synth_used++;
    return resample_region(reg, w, ox, sy.oy, r, s, color, box, out_h, out_w, interp, out, norm);
}

int sl_ops__jpeg_decode_box(sl_decoder *d, const uint8_t *data, size_t size, sl_color color,
                            const double box[4], const int lim[4], int out_h, int out_w,
                            sl_interp interp, void *out, const sl_ops__norm *norm) {
    /* A file with an interval table decodes only the intervals the region
     * needs, unless it is to be turned (that path decodes whole). */
    sl_jpeg_layout L;
    if (sl_ops__jpeg_layout(data, size, &L) && L.usable &&
        (!d->exif_orientation || !L.exif || sl_ops__exif_orientation(L.exif, L.exif_len) == 1)) {
        int rc = decode_box_synth(d, &L, color, box, lim, out_h, out_w, interp, out, norm);
        if (rc <= 0)
            return rc;
        d->synth_fallbacks++;
    }
    const int s = pick_scale(box, out_h, out_w);
    SL_TRY(jpeg_begin(d));
    j_decompress_ptr ci = &d->cinfo;
    int kind = setjmp(d->jerr.jb);
    if (kind)
        return jpeg_failure(d, kind);
    /* Rows are read down to the region's last and the decode is aborted:
     * no end-of-scan trace to go by, so only the checking source finds
     * corrupt codes on the fast path. */
    int turn = start(d, data, size, checks_entropy(d));
    int rc = sl_ops__check_dims(d, ci->image_width, ci->image_height);
    if (rc < 0) {
        jpeg_abort_decompress(ci);
        return rc;
    }
    int jc = set_out_space(ci);
    if (turn != 1)
        return decode_box_turned(d, jc, turn, color, box, lim, out_h, out_w, interp, out, norm);
    ci->scale_num = (unsigned)s;
    ci->scale_denom = 8;
    (void)jpeg_start_decompress(ci);
    int full_w = (int)ci->output_width, full_h = (int)ci->output_height;
    int r[4];
    pick_region(box, lim, out_h, out_w, s, full_w, full_h, r);
    JDIMENSION xoff, cw;
    crop_columns(ci, r[0], r[2], &xoff, &cw);
    int rows = r[3] - r[1];
    size_t w = cw;
    size_t region = w * (size_t)rows * (size_t)color;
    rc = sl_ops__dec_scratch(d, region + w * 4 + w * 3 + 64);
    if (rc < 0) {
        jpeg_abort_decompress(ci);
        return rc;
    }
    uint8_t *reg = d->scratch, *row = d->scratch + region, *tmp = row + w * 4;
    if (r[1] > 0)
        (void)jpeg_skip_scanlines(ci, (JDIMENSION)r[1]);
    int got = read_rows(ci, jc, color, reg, w, rows, row, tmp);
    /* The rows below the region are never decoded. */
    jpeg_abort_decompress(ci);
    if (got != rows)
        return sl__error(SL_EDECODE, "decode: JPEG ended before row %d", r[1] + got);
    return resample_region(reg, (int)w, (int)xoff, r[1], r, s, color, box, out_h, out_w, interp,
                           out, norm);
}
