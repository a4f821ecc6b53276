/*
 * jpeg_restart.c — JPEG storage that decodes only the crop.
 *
 * A baseline JPEG with a restart marker every k MCUs is a chain of intervals
 * that decode independently: each starts byte-aligned, with the DC
 * predictors at 0. Two halves live here:
 *
 *  - sl_jpeg_add_restarts (pack time): a lossless re-encode through libjpeg's
 *    coefficient API (jpeg_read_coefficients -> jpeg_write_coefficients: the
 *    DCT coefficients and quantisation tables are copied, so every pixel is
 *    the same), baseline, optimised Huffman tables, a restart interval, and
 *    an APP15 "SLRST" segment with the byte offset of each MCU row's first
 *    interval (docs/FORMAT.md, "JPEG interval table").
 *  - sl_ops__jpeg_layout + sl_ops__jpeg_synth (decode time): find that table
 *    and write a small JPEG made of only the intervals that cover a region,
 *    which libjpeg then decodes like any other file.
 *
 * Invariants of the synthetic stream (each one, broken, gave wrong pixels
 * with at most a libjpeg warning):
 *  1. Its intervals keep the source's restart interval k, so each one's first
 *     DC is still coded against 0; k divides the MCUs per row, so a row of
 *     the synthetic image is a whole number of intervals.
 *  2. Its restart markers are renumbered RST0..RST7 in order.
 *  3. With chroma subsampling, one MCU of context is kept on each side of the
 *     region (clipped to the image), so fancy upsampling sees the same
 *     neighbours as in the whole image.
 *  4. Its SOF carries the true remaining width/height at the right and
 *     bottom edges, not a whole number of MCUs.
 * The table holds one offset per MCU row, not per interval: per interval it
 * cost 4 bytes each, up to 10 % of a small photo. Inside a row the intervals
 * are found by looking for their markers (memchr for 0xFF: in entropy-coded
 * data a 0xFF is followed by a stuffed 0x00 or is a marker), over the bytes
 * of the crop's rows only, a fraction of a microsecond.
 * The table is read as hostile bytes: every offset is bounds-checked, and
 * each interval used must start and end at the restart markers its number
 * predicts.
 */
#include "ops/decode.h"

#include <jerror.h>

#include <stdlib.h>
#include <string.h>

#define SLRST_SIG "SLRST\0"
#define SLRST_SIG_LEN 6
#define SLRST_HEAD 22 /* signature, version, flags, k, grid, scan length, row count */
#define SLRST_VERSION 1
/* An APPn segment holds at most 65533 payload bytes. */
#define SLRST_MAX_ROWS ((65533 - SLRST_HEAD) / 4)

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t be32(const uint8_t *p) { return be16(p) << 16 | be16(p + 2); }
static void put16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}
static void put32(uint8_t *p, uint32_t v) {
    put16(p, v >> 16);
    put16(p + 2, v);
}

/* ---- the layout of a JPEG, read without libjpeg ----------------------------- */

int sl_ops__jpeg_layout(const uint8_t *b, size_t n, sl_jpeg_layout *L) {
    memset(L, 0, sizeof *L);
    if (n < 4 || b[0] != 0xff || b[1] != 0xd8)
        return 0;
    size_t pos = 2;
    int have_sof = 0, baseline = 0;
    for (;;) {
        if (pos + 4 > n || b[pos] != 0xff)
            return 0;
        while (pos + 4 <= n && b[pos + 1] == 0xff) /* fill bytes */
            pos++;
        if (pos + 4 > n)
            return 0;
        uint8_t m = b[pos + 1];
        size_t len = be16(b + pos + 2);
        if (len < 2 || pos + 2 + len > n)
            return 0;
        const uint8_t *seg = b + pos + 4;
        size_t sl = len - 2;
        if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
            if (have_sof)
                return 0;
            have_sof = 1;
            baseline = (m == 0xc0 || m == 0xc1);
            if (sl < 6)
                return 0;
            L->sof = pos;
            L->precision = seg[0];
            L->height = (int)be16(seg + 1);
            L->width = (int)be16(seg + 3);
            L->ncomp = seg[5];
            if (L->ncomp < 1 || L->ncomp > 4 || sl < 6 + 3 * (size_t)L->ncomp)
                return 0;
            L->hmax = L->vmax = 1;
            L->hmin = 4;
            for (int c = 0; c < L->ncomp; c++) {
                int h = seg[7 + 3 * c] >> 4, v = seg[7 + 3 * c] & 15;
                if (h < 1 || h > 4 || v < 1 || v > 4)
                    return 0;
                L->hmax = h > L->hmax ? h : L->hmax;
                L->hmin = h < L->hmin ? h : L->hmin;
                L->vmax = v > L->vmax ? v : L->vmax;
            }
        } else if (m == 0xdd) {
            if (sl < 2)
                return 0;
            L->restart = (int)be16(seg);
        } else if (m == 0xef && sl >= SLRST_HEAD && !memcmp(seg, SLRST_SIG, SLRST_SIG_LEN)) {
            L->table = seg;
            L->table_len = sl;
        } else if (m == 0xe1 && sl >= 6 && !memcmp(seg, "Exif\0\0", 6) && !L->exif) {
            L->exif = seg;
            L->exif_len = sl;
        } else if (m == 0xda) {
            if (!have_sof || sl < 1)
                return 0;
            L->sos = pos;
            L->scan = pos + 2 + len;
            L->scan_ncomp = seg[0];
            break;
        } else if ((m >= 0xd0 && m <= 0xd9) || m == 0x01) {
            return 0; /* no standalone marker belongs before the scan */
        }
        pos += 2 + len;
    }
    L->data = b;
    L->size = n;
    if (L->ncomp == 1) {
        /* a single-component scan is not interleaved: its MCU is one block */
        L->mcu_w = L->mcu_h = 8;
    } else {
        L->mcu_w = 8 * L->hmax;
        L->mcu_h = 8 * L->vmax;
    }
    if (L->width < 1 || L->height < 1)
        return 0;
    L->mpr = (L->width + L->mcu_w - 1) / L->mcu_w;
    L->mrows = (L->height + L->mcu_h - 1) / L->mcu_h;
    if (!baseline || L->precision != 8 || L->scan_ncomp != L->ncomp || L->restart < 1 ||
        !L->table)
        return 1;
    /* the table must describe this file's grid and scan */
    const uint8_t *t = L->table;
    int k = (int)be16(t + 8), mpr = (int)be16(t + 10), mrows = (int)be16(t + 12);
    uint32_t scan_len = be32(t + 14), count = be32(t + 18);
    if (t[6] != SLRST_VERSION || k != L->restart || mpr != L->mpr || mrows != L->mrows ||
        L->mpr % k != 0 || count != (uint32_t)L->mrows ||
        (uint64_t)L->table_len < SLRST_HEAD + 4ull * count || count < 1 ||
        (uint64_t)L->scan + scan_len + 2 > n || b[L->scan + scan_len] != 0xff ||
        b[L->scan + scan_len + 1] != 0xd9)
        return 1;
    const uint8_t *off = t + SLRST_HEAD;
    if (be32(off) != 0)
        return 1;
    uint32_t prev = 0;
    for (uint32_t i = 1; i < count; i++) {
        uint32_t o = be32(off + 4 * (size_t)i);
        if (o < prev + 4 || o > scan_len)
            return 1;
        prev = o;
    }
    L->scan_len = scan_len;
    L->count = (int)count;
    L->k = k;
    L->usable = 1;
    return 1;
}

/* ---- the synthetic JPEG ------------------------------------------------------- */

/* Where MCU row r's intervals start, and where its last one ends (its
 * restart marker, or the EOI), relative to the scan start. */
static uint32_t row_start(const sl_jpeg_layout *L, int r) {
    return be32(L->table + SLRST_HEAD + 4 * (size_t)r);
}

static uint32_t row_end(const sl_jpeg_layout *L, int r) {
    return r + 1 < L->count ? row_start(L, r + 1) - 2 : L->scan_len;
}

/* The end of the interval starting at `p` (before `end`): the next restart
 * marker, or `end`. Skips stuffed 0xFF00 pairs. */
static const uint8_t *next_marker(const uint8_t *p, const uint8_t *end) {
    for (;;) {
        const uint8_t *q = memchr(p, 0xff, (size_t)(end - p));
        if (!q || q + 1 >= end)
            return end;
        if (q[1] >= 0xd0 && q[1] <= 0xd7)
            return q;
        p = q + 2;
    }
}

int sl_ops__jpeg_synth(sl_decoder *d, const sl_jpeg_layout *L, int s, const int reg[4],
                       sl_jpeg_synth *out) {
    /* region in scaled pixels -> MCU columns and rows (inclusive) */
    int mws = L->mcu_w * s / 8, mhs = L->mcu_h * s / 8;
    int sub = L->hmax > 1 || L->vmax > 1;
    int mx0, mx1, my0, my1;
    if (sub) {
        mx0 = reg[0] > 0 ? (reg[0] - 1) / mws : 0;
        my0 = reg[1] > 0 ? (reg[1] - 1) / mhs : 0;
        mx1 = reg[2] / mws;
        my1 = reg[3] / mhs;
    } else {
        mx0 = reg[0] / mws;
        my0 = reg[1] / mhs;
        mx1 = (reg[2] - 1) / mws;
        my1 = (reg[3] - 1) / mhs;
    }
    if (mx1 >= L->mpr)
        mx1 = L->mpr - 1;
    if (my1 >= L->mrows)
        my1 = L->mrows - 1;
    int k = L->k, per_row = L->mpr / k;
    int ix0 = mx0 / k, ix1 = mx1 / k, x0, sw;
    for (;;) {
        x0 = ix0 * k * L->mcu_w;
        sw = (ix1 - ix0 + 1) * k * L->mcu_w;
        if (sw > L->width - x0)
            sw = L->width - x0;
        /* libjpeg upsamples a component with fancy (interpolating)
         * upsampling only when it is more than 2 samples wide, and
         * replicates otherwise: a narrow synthetic image must be widened
         * until it takes the same branch as the whole image. Counted at
         * scale s, the least a component can be decoded at. */
        int nar = L->hmin * s, den = L->hmax * 8;
        if (L->hmin == L->hmax || ((int64_t)sw * nar + den - 1) / den > 2 ||
            ix1 - ix0 + 1 == per_row)
            break;
        if (ix1 + 1 < per_row)
            ix1++;
        else
            ix0--;
    }
    int y0 = my0 * L->mcu_h, sh = (my1 - my0 + 1) * L->mcu_h;
    if (sh > L->height - y0)
        sh = L->height - y0;

    /* size: the header segments, the rows' bytes (a bound for the
     * intervals taken from them) and a marker after each interval */
    size_t need = L->scan + 2;
    for (int r = my0; r <= my1; r++)
        need += row_end(L, r) - row_start(L, r) + 2 * (size_t)(ix1 - ix0 + 1);
    if (need > d->synth_cap) {
        uint8_t *p = sl__malloc(need + need / 4);
        if (!p)
            return sl__oom("decode: synthetic JPEG");
        sl__free(d->synth);
        d->synth = p;
        d->synth_cap = need + need / 4;
    }
    uint8_t *o = d->synth;
    const uint8_t *b = L->data;
    /* SOI, then every segment up to SOS but the APPn/COM ones libjpeg does
     * not need for the pixels (APP0 JFIF and APP14 Adobe say what the
     * colour space is; EXIF, ICC and the interval table do not). */
    *o++ = 0xff;
    *o++ = 0xd8;
    size_t pos = 2;
    while (pos < L->sos) {
        while (b[pos + 1] == 0xff)
            pos++;
        uint8_t m = b[pos + 1];
        size_t len = be16(b + pos + 2);
        int keep = !((m >= 0xe1 && m <= 0xed) || m == 0xef || m == 0xfe);
        if (keep) {
            memcpy(o, b + pos, 2 + len);
            if (pos == L->sof) {
                put16(o + 5, (uint32_t)sh);
                put16(o + 7, (uint32_t)sw);
            }
            o += 2 + len;
        }
        pos += 2 + len;
    }
    memcpy(o, b + L->sos, L->scan - L->sos);
    o += L->scan - L->sos;
    const uint8_t *scan = b + L->scan;
    int rst = 0, first = 1;
    for (int r = my0; r <= my1; r++) {
        uint32_t rs = row_start(L, r);
        /* the row must start after the marker of the interval before it */
        if (r > 0 && (scan[rs - 2] != 0xff || scan[rs - 1] != (0xd0 | ((r * per_row - 1) & 7))))
            return 1;
        const uint8_t *p = scan + rs, *end = scan + row_end(L, r);
        for (int j = 0; j <= ix1; j++) {
            int i = r * per_row + j; /* the interval's number in the scan */
            const uint8_t *e = j + 1 < per_row ? next_marker(p, end) : end;
            /* the interval must end at the marker its number predicts */
            if (j + 1 < per_row && (e == end || e[1] != (0xd0 | (i & 7))))
                return 1;
            if (j >= ix0) {
                if (!first) {
                    *o++ = 0xff;
                    *o++ = (uint8_t)(0xd0 | rst);
                    rst = (rst + 1) & 7;
                }
                first = 0;
                memcpy(o, p, (size_t)(e - p));
                o += e - p;
            }
            p = e + 2;
        }
    }
    *o++ = 0xff;
    *o++ = 0xd9;
    out->data = d->synth;
    out->size = (size_t)(o - d->synth);
    out->ox = x0 * s / 8;
    out->oy = y0 * s / 8;
    out->w = sw;
    out->h = sh;
    return SL_OK;
}

/* ---- the lossless re-encode --------------------------------------------------- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
} restart_err;

static void restart_error_exit(j_common_ptr c) { longjmp(((restart_err *)c->err)->jb, 1); }

/* A warning means the source has damage the re-encode would bake in (or
 * hide): keep the file as it was, and let the decode op judge it. */
static void restart_emit(j_common_ptr c, int level) {
    if (level < 0)
        restart_error_exit(c);
}

static void restart_output(j_common_ptr c) { (void)c; }

/* The restart interval in MCUs for `mode`: rows = one MCU row; auto = the
 * largest divisor of the MCUs per row up to 4 (an interval must not span two
 * rows, so a crop's columns map to whole intervals). 0: the image is too
 * small to gain, or too tall for its table to fit one APP15 segment.
 * Why 4: on the imagenet-like photos (fused decode + random_resized_crop 224
 * + flip + normalize, 1 thread, 1500 images, 3 interleaved rounds) a largest
 * divisor up to 1, 2, 3, 4 or 8 decoded at the same rate within the noise
 * of that shared machine (medians 1160-1550 img/s, no order between them;
 * ~1230 with no intervals, ~900-1260 with one per row), while the files grew by 4.6, 3.0, 1.9, 1.6 and 0.6 %:
 * smaller intervals gain nothing once a crop's columns are whole intervals
 * and cost a marker and a Huffman reset each; 8 begins to decode columns
 * outside the crop. */
static int choose_interval(int mpr, int mrows, sl_jpeg_restart mode) {
    int k = mpr;
    if (mode == SL_JPEG_RESTART_AUTO) {
        k = 1;
        for (int t = 4; t >= 2; t--)
            if (mpr % t == 0) {
                k = t;
                break;
            }
    }
    if (mrows > SLRST_MAX_ROWS || (int64_t)(mpr / k) * mrows < 2)
        return 0;
    return k;
}

/* Build the output of a re-encode: `enc` (libjpeg's bytes) with the interval
 * table inserted before its SOF. 0: the stream is not the single
 * interleaved scan the table describes, keep the source. */
static int add_table(const uint8_t *enc, size_t n, int k, sl_tensor *out, int *changed) {
    sl_jpeg_layout L;
    if (!sl_ops__jpeg_layout(enc, n, &L) || L.restart != k || L.scan_ncomp != L.ncomp ||
        L.mpr % k)
        return SL_OK;
    int per_row = L.mpr / k, count = per_row * L.mrows;
    size_t seg = 4 + SLRST_HEAD + 4 * (size_t)L.mrows;
    uint8_t *tab = sl__malloc(seg);
    if (!tab)
        return sl__oom("jpeg_add_restarts: interval table");
    uint8_t *off = tab + 4 + SLRST_HEAD;
    /* Walk the scan: 0xFF00 is a stuffed byte, RSTn ends an interval, EOI
     * ends the scan; any other marker means a stream this table cannot
     * describe. */
    size_t p = L.scan;
    int i = 1, ok = 0;
    put32(off, 0);
    while (p + 1 < n) {
        if (enc[p] != 0xff) {
            p++;
            continue;
        }
        uint8_t m = enc[p + 1];
        if (m == 0x00 || m == 0xff) {
            p += m ? 1 : 2;
        } else if (m >= 0xd0 && m <= 0xd7) {
            if (i >= count || m != (0xd0 | ((i - 1) & 7)))
                break;
            if (i % per_row == 0)
                put32(off + 4 * (size_t)(i / per_row), (uint32_t)(p + 2 - L.scan));
            i++;
            p += 2;
        } else {
            ok = m == 0xd9 && i == count;
            break;
        }
    }
    int rc = SL_OK;
    if (ok) {
        tab[0] = 0xff;
        tab[1] = 0xef;
        put16(tab + 2, (uint32_t)(seg - 2));
        memcpy(tab + 4, SLRST_SIG, SLRST_SIG_LEN);
        tab[10] = SLRST_VERSION;
        tab[11] = 0;
        put16(tab + 12, (uint32_t)k);
        put16(tab + 14, (uint32_t)L.mpr);
        put16(tab + 16, (uint32_t)L.mrows);
        put32(tab + 18, (uint32_t)(p - L.scan));
        put32(tab + 22, (uint32_t)L.mrows);
        int64_t len = (int64_t)(n + seg);
        int allocated;
        rc = sl_ops__out_prepare(out, SL_U8, 1, &len, "jpeg_add_restarts", &allocated);
        if (rc == SL_OK) {
            uint8_t *o = out->data;
            memcpy(o, enc, L.sof);
            memcpy(o + L.sof, tab, seg);
            memcpy(o + L.sof + seg, enc + L.sof, n - L.sof);
            *changed = 1;
        }
    }
    sl__free(tab);
    return rc;
}

/* Whether a saved source marker is copied to the output: not the JFIF and
 * Adobe segments libjpeg writes itself, and not an old interval table. */
static int copy_marker(j_compress_ptr dst, jpeg_saved_marker_ptr m) {
    if (m->marker == JPEG_APP0 && dst->write_JFIF_header && m->data_length >= 5 &&
        !memcmp(m->data, "JFIF\0", 5))
        return 0;
    if (m->marker == JPEG_APP0 + 14 && dst->write_Adobe_marker && m->data_length >= 5 &&
        !memcmp(m->data, "Adobe", 5))
        return 0;
    if (m->marker == JPEG_APP0 + 15 && m->data_length >= SLRST_SIG_LEN &&
        !memcmp(m->data, SLRST_SIG, SLRST_SIG_LEN))
        return 0;
    return 1;
}

int sl_jpeg_add_restarts(const void *data, size_t size, sl_jpeg_restart mode, sl_tensor *out,
                         int *changed_out) {
    if (!changed_out || !out || (!data && size))
        return sl__error(SL_EINVAL, "jpeg_add_restarts: NULL argument");
    *changed_out = 0;
    if (mode != SL_JPEG_RESTART_OFF && mode != SL_JPEG_RESTART_AUTO &&
        mode != SL_JPEG_RESTART_ROWS)
        return sl__error(SL_EINVAL, "jpeg_add_restarts: mode %d is not an sl_jpeg_restart",
                         (int)mode);
    if (mode == SL_JPEG_RESTART_OFF || sl_image_sniff(data, size) != SL_FORMAT_JPEG)
        return SL_OK;
    /* The libjpeg objects and everything the error path reads live in one
     * heap block, so nothing the longjmp returns to is a modified local. */
    struct {
        struct jpeg_decompress_struct src;
        struct jpeg_compress_struct dst;
        restart_err err;
        sl_jpeg_src in;
        uint8_t *mine;
        unsigned char *buf;
        unsigned long len;
        int made_src, made_dst;
    } *w = sl__calloc(1, sizeof *w);
    if (!w)
        return sl__oom("jpeg_add_restarts");
    /* jpeg_mem_dest writes into this buffer and mallocs a larger one only
     * when it fills; a longjmp after such growth would leave the new buffer
     * out of reach. The same coefficients with optimised tables take about
     * the source's size (a progressive source grows a few percent as
     * baseline), so twice that never fills. */
    size_t cap = 2 * size + 65536;
    w->mine = sl__malloc(cap);
    if (!w->mine) {
        sl__free(w);
        return sl__oom("jpeg_add_restarts: output buffer");
    }
    int rc = SL_OK;
    w->src.err = jpeg_std_error(&w->err.pub);
    w->err.pub.error_exit = restart_error_exit;
    w->err.pub.emit_message = restart_emit;
    w->err.pub.output_message = restart_output;
    w->dst.err = &w->err.pub;
    if (setjmp(w->err.jb))
        goto cleanup; /* a file libjpeg cannot transcode is stored as it was */
    jpeg_create_decompress(&w->src);
    w->made_src = 1;
    /* Through the checking source: on libjpeg-turbo's fast Huffman path a
     * corrupt code reads as 0 without a warning, and the re-encode would
     * store the damage as valid data that no later decode can find. */
    sl_ops__jpeg_checked_src(&w->src, &w->in, data, size);
    jpeg_save_markers(&w->src, JPEG_COM, 0xffff);
    for (int m = 0; m < 16; m++)
        jpeg_save_markers(&w->src, JPEG_APP0 + m, 0xffff);
    (void)jpeg_read_header(&w->src, TRUE);
    if (w->src.data_precision != 8 || w->src.num_components > 4 ||
        (uint64_t)w->src.image_width * w->src.image_height > (1ull << 30))
        goto cleanup;
    jvirt_barray_ptr *coef = jpeg_read_coefficients(&w->src);
    jpeg_create_compress(&w->dst);
    w->made_dst = 1;
    jpeg_copy_critical_parameters(&w->src, &w->dst);
    int hmax = 1, vmax = 1, nc = w->dst.num_components;
    for (int c = 0; c < nc; c++) {
        const jpeg_component_info *ci = &w->dst.comp_info[c];
        hmax = ci->h_samp_factor > hmax ? ci->h_samp_factor : hmax;
        vmax = ci->v_samp_factor > vmax ? ci->v_samp_factor : vmax;
    }
    int mw = nc == 1 ? 8 : 8 * hmax, mh = nc == 1 ? 8 : 8 * vmax;
    int mpr = (int)((w->dst.image_width + (unsigned)mw - 1) / (unsigned)mw);
    int mrows = (int)((w->dst.image_height + (unsigned)mh - 1) / (unsigned)mh);
    int k = choose_interval(mpr, mrows, mode);
    if (k == 0)
        goto cleanup;
    w->dst.restart_interval = (unsigned)k;
    w->dst.optimize_coding = TRUE;
    w->buf = w->mine;
    w->len = (unsigned long)cap;
    jpeg_mem_dest(&w->dst, &w->buf, &w->len);
    jpeg_write_coefficients(&w->dst, coef);
    for (jpeg_saved_marker_ptr m = w->src.marker_list; m; m = m->next)
        if (copy_marker(&w->dst, m))
            jpeg_write_marker(&w->dst, m->marker, m->data, m->data_length);
    jpeg_finish_compress(&w->dst);
    (void)jpeg_finish_decompress(&w->src);
    rc = add_table(w->buf, w->len, k, out, changed_out);
cleanup:
    if (w->made_dst)
        jpeg_destroy_compress(&w->dst);
    if (w->made_src)
        jpeg_destroy_decompress(&w->src);
    if (w->buf && w->buf != w->mine)
        free(w->buf); /* jpeg_mem_dest grew it with malloc */
    sl__free(w->mine);
    sl__free(w);
    return rc;
}
