/* test_decode_neighbour.c — a decoder that has just failed (or passed a
 * warning, or read tables a later file omits) decodes the next file exactly
 * as a fresh decoder does: plain and fused, for every kind of bad file made
 * here, under each warnings mode and with EXIF orientation; the same inside
 * a pipeline that skips bad samples on 1 and 2 threads; warnings sorted by
 * mode; EXIF orientation parsing of hostile APP1 segments; OOM on the new
 * paths. */
#include "core/core.h"
#include "ops_testdata.h"

typedef struct {
    uint8_t *b;
    size_t n;
    const char *name;
    int must_fail; /* a plain decode fails in every mode */
} blob;

#define MAXB 96

typedef struct {
    blob bad[MAXB], good[16];
    int nbad, ngood;
} corpus;

static void add_bad(corpus *c, uint8_t *b, size_t n, const char *name, int must_fail) {
    ASSERT(c->nbad < MAXB);
    c->bad[c->nbad++] = (blob){b, n, name, must_fail};
}

static uint8_t *dup_bytes(const uint8_t *b, size_t n) {
    uint8_t *p = malloc(n ? n : 1);
    memcpy(p, b, n);
    return p;
}

static unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

/* Offset of the first entropy-coded byte after the first SOS. */
static size_t scan_start(const uint8_t *j, size_t n) {
    long sos = td_find_marker(j, n, 0xda);
    ASSERT(sos > 0);
    return (size_t)sos + 2 + be16(j + sos + 2);
}

/* The JPEG without its header segments of marker `m` (before the first SOS). */
static uint8_t *strip_segments(const uint8_t *j, size_t n, uint8_t m, size_t *out_n) {
    uint8_t *o = malloc(n);
    size_t p = 2, q = 2;
    memcpy(o, j, 2);
    while (p + 4 <= n && j[p] == 0xff && j[p + 1] != 0xda) {
        size_t len = 2 + be16(j + p + 2);
        if (j[p + 1] != m) {
            memcpy(o + q, j + p, len);
            q += len;
        }
        p += len;
    }
    memcpy(o + q, j + p, n - p);
    *out_n = q + n - p;
    return o;
}

/* The JPEG with `seg` (a whole marker segment) inserted after SOI. */
static uint8_t *insert_after_soi(const uint8_t *j, size_t n, const uint8_t *seg, size_t sn,
                                 size_t *out_n) {
    uint8_t *o = malloc(n + sn);
    memcpy(o, j, 2);
    memcpy(o + 2, seg, sn);
    memcpy(o + 2 + sn, j + 2, n - 2);
    *out_n = n + sn;
    return o;
}

/* An APP1 Exif segment with IFD0 holding the orientation tag (type SHORT). */
static size_t exif_segment(uint8_t *s, int orientation, int big_endian) {
    static const uint8_t le[] = {0xff, 0xe1, 0, 34, 'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0,
                                 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                                 0, 0, 0, 0};
    static const uint8_t be[] = {0xff, 0xe1, 0, 34, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42,
                                 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0,
                                 0, 0, 0, 0};
    memcpy(s, big_endian ? be : le, sizeof le);
    if (big_endian)
        s[29] = (uint8_t)orientation; /* the value: first 2 bytes of the field, BE */
    else
        s[28] = (uint8_t)orientation;
    return sizeof le;
}

static void make_corpus(corpus *c) {
    memset(c, 0, sizeof *c);
    size_t n;
    int w = 48, h = 40;
    uint8_t *pix = td_picture(w, h, 11);
    uint8_t *base = td_jpeg(pix, w, h, TJPF_RGB, TJSAMP_420, 90, 0, &n);
    size_t nbase = n;
    uint8_t *prog = td_jpeg(pix, w, h, TJPF_RGB, TJSAMP_444, 85, TJFLAG_PROGRESSIVE, &n);
    size_t nprog = n;
    uint8_t *gray = malloc((size_t)w * h), *cmyk = malloc((size_t)w * h * 4);
    for (int i = 0; i < w * h; i++) {
        gray[i] = pix[3 * i + 1];
        for (int k = 0; k < 3; k++)
            cmyk[4 * i + k] = pix[3 * i + k];
        cmyk[4 * i + 3] = (uint8_t)(100 + i % 100);
    }
    /* good files */
    c->good[c->ngood++] = (blob){base, nbase, "baseline 4:2:0", 0};
    c->good[c->ngood++] = (blob){prog, nprog, "progressive 4:4:4", 0};
    c->good[c->ngood].b = td_jpeg(gray, w, h, TJPF_GRAY, TJSAMP_GRAY, 90, 0, &c->good[c->ngood].n);
    c->good[c->ngood++].name = "gray";
    c->good[c->ngood].b = td_jpeg(cmyk, w, h, TJPF_CMYK, TJSAMP_444, 90, 0, &c->good[c->ngood].n);
    c->good[c->ngood++].name = "CMYK";
    /* Motion-JPEG style: no DHT, so libjpeg's standard tables apply; TurboJPEG
     * wrote those same tables, so the file is complete. */
    c->good[c->ngood].b = strip_segments(base, nbase, 0xc4, &c->good[c->ngood].n);
    c->good[c->ngood++].name = "no DHT (standard tables)";
    uint8_t seg[64];
    size_t sn = exif_segment(seg, 6, 0);
    c->good[c->ngood].b = insert_after_soi(base, nbase, seg, sn, &c->good[c->ngood].n);
    c->good[c->ngood++].name = "EXIF orientation 6";
    c->good[c->ngood].b = td_png(pix, w, h, 2, 8, NULL, 0, &c->good[c->ngood].n);
    c->good[c->ngood++].name = "PNG RGB";
    uint8_t *png = c->good[c->ngood - 1].b;
    size_t npng = c->good[c->ngood - 1].n;

    /* bad files */
    add_bad(c, dup_bytes((const uint8_t *)"", 0), 0, "empty", 1);
    add_bad(c, dup_bytes((const uint8_t *)"GIF89a not an image", 19), 19, "garbage", 1);
    add_bad(c, dup_bytes(base, 3), 3, "SOI only", 1);
    for (int k = 1; k < 12; k++) {
        size_t cut = nbase * (size_t)k / 12;
        add_bad(c, dup_bytes(base, cut), cut, "baseline truncated", 1);
        cut = nprog * (size_t)k / 12;
        add_bad(c, dup_bytes(prog, cut), cut, "progressive truncated", 1);
    }
    long sof = td_find_marker(base, nbase, 0xc0);
    ASSERT(sof > 0);
    uint8_t *b = dup_bytes(base, nbase);
    b[sof + 5] = b[sof + 6] = 0; /* "Empty JPEG image (DNL not supported)" */
    add_bad(c, b, nbase, "SOF height 0", 1);
    b = dup_bytes(base, nbase);
    b[sof + 7] = b[sof + 8] = 0;
    add_bad(c, b, nbase, "SOF width 0", 1);
    {
        /* height 0 in SOF and the real height in a DNL segment after the scan */
        uint8_t *d = malloc(nbase + 6);
        memcpy(d, base, nbase - 2);
        d[sof + 5] = d[sof + 6] = 0;
        const uint8_t dnl[6] = {0xff, 0xdc, 0, 4, 0, (uint8_t)h};
        memcpy(d + nbase - 2, dnl, 6);
        d[nbase + 4] = 0xff;
        d[nbase + 5] = 0xd9;
        add_bad(c, d, nbase + 6, "DNL", 1);
    }
    b = dup_bytes(base, nbase);
    b[sof + 5] = 0xea; /* 60000 x 60000: over the default pixel cap */
    b[sof + 6] = 0x60;
    b[sof + 7] = 0xea;
    b[sof + 8] = 0x60;
    add_bad(c, b, nbase, "over the pixel cap", 1);
    long dqt = td_find_marker(base, nbase, 0xdb);
    ASSERT(dqt > 0);
    b = dup_bytes(base, nbase);
    b[dqt + 2] = 0;
    b[dqt + 3] = 1; /* a length shorter than its own field */
    add_bad(c, b, nbase, "DQT length 1", 1);
    b = dup_bytes(base, nbase);
    b[dqt + 2] = b[dqt + 3] = 0xff; /* a length running past the end */
    add_bad(c, b, nbase, "DQT length 65535", 1);
    long dht = td_find_marker(base, nbase, 0xc4);
    ASSERT(dht > 0);
    b = dup_bytes(base, nbase);
    memset(b + dht + 5, 0xff, 16); /* code counts summing past 256 */
    add_bad(c, b, nbase, "bad Huffman table", 1);
    b = dup_bytes(base, nbase);
    b[dht + 5] = 2; /* three 1-bit codes cannot exist */
    add_bad(c, b, nbase, "overfull Huffman table", 0);
    b = strip_segments(base, nbase, 0xdb, &n);
    add_bad(c, b, n, "no DQT", 1);
    size_t s0 = scan_start(base, nbase);
    b = dup_bytes(base, nbase);
    for (size_t i = s0; i + 2 < nbase; i++)
        b[i] = 0xfe;
    add_bad(c, b, nbase, "scan all 0xfe", 0);
    b = dup_bytes(base, nbase);
    b[s0 + (nbase - s0) / 2] = 0xff;
    b[s0 + (nbase - s0) / 2 + 1] = 0xd3;
    add_bad(c, b, nbase, "stray RST mid-scan", 0);
    b = dup_bytes(base, nbase);
    b[s0 + 5] ^= 0x5a;
    add_bad(c, b, nbase, "flipped entropy byte", 0);
    size_t sp = scan_start(prog, nprog);
    b = dup_bytes(prog, nprog);
    b[sp + 3] ^= 0x77;
    add_bad(c, b, nprog, "progressive flipped byte", 0);
    {
        /* a second SOS header for a sequential file: odd scan parameters */
        b = dup_bytes(prog, nprog);
        long psos = td_find_marker(b, nprog, 0xda);
        b[psos + 4 + 1 + 2 * b[psos + 4]] = 70; /* Ss past 63 */
        add_bad(c, b, nprog, "progressive bad Ss", 1);
    }
    b = malloc(nbase + 8);
    memcpy(b, base, nbase);
    memcpy(b + nbase, "\x00\x01\x02\x03\x04\x05\x06\x07", 8); /* data after EOI */
    add_bad(c, b, nbase + 8, "junk after EOI", 0);
    b = dup_bytes(png, npng);
    add_bad(c, b, npng / 2, "PNG truncated", 1);
    b = dup_bytes(png, npng);
    b[npng / 2] ^= 0x40;
    add_bad(c, b, npng, "PNG flipped IDAT byte", 1);
    b = dup_bytes(png, npng);
    td_png_set_size(b, 70000, 70000);
    add_bad(c, b, npng, "PNG over the pixel cap", 1);
    b = dup_bytes(png, npng);
    td_png_set_size(b, 0, h);
    add_bad(c, b, npng, "PNG width 0", 1);
    b = dup_bytes(png, 33);
    add_bad(c, b, 33, "PNG IHDR only", 1);
    /* the good files are neighbours too: their tables must not carry over */
    for (int i = 0; i < c->ngood; i++)
        add_bad(c, dup_bytes(c->good[i].b, c->good[i].n), c->good[i].n, c->good[i].name, 0);
    free(pix);
    free(gray);
    free(cmyk);
}

static void free_corpus(corpus *c) {
    for (int i = 0; i < c->nbad; i++)
        free(c->bad[i].b);
    for (int i = 0; i < c->ngood; i++)
        free(c->good[i].b);
}

typedef struct {
    int warnings, exif, max_scans;
} config;

static sl_decoder *make_decoder(const config *cf) {
    sl_decoder *d = NULL;
    ASSERT_OK(sl_decoder_create(&d));
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_WARNINGS, cf->warnings));
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_EXIF_ORIENTATION, cf->exif));
    if (cf->max_scans)
        ASSERT_OK(sl_decoder_set(d, SL_DECODE_MAX_SCANS, cf->max_scans));
    return d;
}

/* Decode `g` plainly (fused = 0) or through the fused box path (a crop of
 * the middle, shrunk so that DCT scaling applies). */
static int decode_one(sl_decoder *d, const blob *g, int fused, sl_tensor *out) {
    if (!fused)
        return sl_decode(d, g->b, g->n, SL_COLOR_RGB, out);
    sl_image_info info;
    int rc = sl_decode_info(d, g->b, g->n, &info);
    if (rc < 0)
        return rc;
    sl_box box = {info.height / 8, info.width / 6, info.height / 2 + 1, info.width / 2 + 1};
    return sl_decode_crop_resize(d, g->b, g->n, SL_COLOR_RGB, &box, 5, 7, SL_INTERP_BILINEAR,
                                 out);
}

/* For each bad file, each good file, plain and fused: bad then good on one
 * decoder gives the bytes a fresh decoder gives the good file. */
static void neighbour_sweep(const corpus *c, const config *cf) {
    for (int fused = 0; fused < 2; fused++) {
        for (int gi = 0; gi < c->ngood; gi++) {
            const blob *g = &c->good[gi];
            sl_decoder *fresh = make_decoder(cf);
            sl_tensor ref = {0};
            int ref_rc = decode_one(fresh, g, fused, &ref);
            sl_decoder_free(fresh);
            if (cf->max_scans && ref_rc == SL_ELIMIT)
                continue; /* the progressive file itself is over this limit */
            if (ref_rc != SL_OK)
                sl_test_fail(__FILE__, __LINE__, "%s (fused %d): %s", g->name, fused, sl_errmsg());
            for (int bi = 0; bi < c->nbad; bi++) {
                const blob *bad = &c->bad[bi];
                sl_decoder *d = make_decoder(cf);
                sl_tensor t = {0};
                sl_image_info info;
                (void)sl_decode_info(d, bad->b, bad->n, &info);
                int rc = sl_decode(d, bad->b, bad->n, SL_COLOR_RGB, &t);
                if (bad->must_fail && rc == SL_OK)
                    sl_test_fail(__FILE__, __LINE__, "bad file '%s' decoded", bad->name);
                sl_tensor_release(&t);
                if (fused) /* and the fused path's own failure points */
                    (void)decode_one(d, bad, 1, &t);
                sl_tensor_release(&t);
                rc = decode_one(d, g, fused, &t);
                if (rc != SL_OK)
                    sl_test_fail(__FILE__, __LINE__, "'%s' after '%s' (fused %d, warnings %d): %s",
                                 g->name, bad->name, fused, cf->warnings, sl_errmsg());
                if (t.nbytes != ref.nbytes || memcmp(t.data, ref.data, ref.nbytes) != 0)
                    sl_test_fail(__FILE__, __LINE__,
                                 "'%s' after '%s' (fused %d, warnings %d) differs from a fresh "
                                 "decoder's", g->name, bad->name, fused, cf->warnings);
                sl_tensor_release(&t);
                sl_decoder_free(d);
            }
            sl_tensor_release(&ref);
        }
    }
}

SL_TEST(ops_decode__neighbour_after_bad_default) {
    corpus c;
    make_corpus(&c);
    config cf = {SL_WARNINGS_DEFAULT, 0, 0};
    neighbour_sweep(&c, &cf);
    free_corpus(&c);
}

SL_TEST(ops_decode__neighbour_after_bad_strict_and_lenient) {
    corpus c;
    make_corpus(&c);
    config s = {SL_WARNINGS_STRICT, 0, 0}, l = {SL_WARNINGS_LENIENT, 1, 0};
    neighbour_sweep(&c, &s);
    neighbour_sweep(&c, &l);
    free_corpus(&c);
}

SL_TEST(ops_decode__neighbour_after_scan_limit) {
    corpus c;
    make_corpus(&c);
    /* the progressive files go over 3 scans mid-decode (a longjmp from the
     * progress hook); the others decode */
    config cf = {SL_WARNINGS_DEFAULT, 1, 3};
    sl_decoder *d = make_decoder(&cf);
    sl_tensor t = {0};
    ASSERT_RC(sl_decode(d, c.good[1].b, c.good[1].n, SL_COLOR_RGB, &t), SL_ELIMIT);
    ASSERT_CONTAINS(sl_errmsg(), "scans");
    sl_decoder_free(d);
    neighbour_sweep(&c, &cf);
    free_corpus(&c);
}

/* A file that omits its tables must not borrow the previous file's: without
 * DQT it fails as on a fresh decoder; without DHT it uses the standard
 * tables, not the progressive file's optimised ones. */
SL_TEST(ops_decode__tables_do_not_carry_over) {
    corpus c;
    make_corpus(&c);
    const blob *prog = &c.good[1], *nodht = &c.good[4];
    size_t n;
    uint8_t *nodqt = strip_segments(c.good[0].b, c.good[0].n, 0xdb, &n);
    config cf = {0, 0, 0};
    sl_decoder *d = make_decoder(&cf);
    sl_tensor a = {0}, b = {0}, t = {0};
    ASSERT_OK(sl_decode(d, nodht->b, nodht->n, SL_COLOR_RGB, &a));
    ASSERT_OK(sl_decode(d, prog->b, prog->n, SL_COLOR_RGB, &t));
    ASSERT_OK(sl_decode(d, nodht->b, nodht->n, SL_COLOR_RGB, &b));
    ASSERT(memcmp(a.data, b.data, a.nbytes) == 0);
    sl_tensor_release(&t);
    ASSERT_OK(sl_decode(d, c.good[0].b, c.good[0].n, SL_COLOR_RGB, &t));
    sl_tensor_release(&t);
    ASSERT_RC(sl_decode(d, nodqt, n, SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), "not defined");
    sl_tensor_release(&a);
    sl_tensor_release(&b);
    sl_decoder_free(d);
    free(nodqt);
    free_corpus(&c);
}

/* Warnings by mode: extraneous bytes pass by default, corrupt data fails by
 * default and passes leniently, a truncated file fails in every mode. */
SL_TEST(ops_decode__warnings_by_mode) {
    size_t n;
    uint8_t *j = td_picture_jpeg(48, 40, 12, 0, &n);
    long dqt = td_find_marker(j, n, 0xdb);
    ASSERT(dqt > 0);
    /* three junk bytes before DQT: JWRN_EXTRANEOUS_DATA */
    uint8_t *x = malloc(n + 3);
    memcpy(x, j, (size_t)dqt);
    memcpy(x + dqt, "\x01\x02\x03", 3);
    memcpy(x + dqt + 3, j + dqt, n - (size_t)dqt);
    size_t s0 = scan_start(j, n);
    uint8_t *bad = dup_bytes(j, n);
    bad[s0 + (n - s0) / 2] = 0xff; /* a marker inside the scan: JWRN_HIT_MARKER */
    bad[s0 + (n - s0) / 2 + 1] = 0xd5;
    sl_tensor ref = {0}, t = {0};
    config cf = {SL_WARNINGS_DEFAULT, 0, 0};
    sl_decoder *d = make_decoder(&cf);
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_RGB, &ref));
    ASSERT_OK(sl_decode(d, x, n + 3, SL_COLOR_RGB, &t));
    ASSERT(memcmp(t.data, ref.data, ref.nbytes) == 0); /* the skipped bytes change nothing */
    sl_tensor_release(&t);
    ASSERT_RC(sl_decode(d, bad, n, SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), "corrupt JPEG data");
    ASSERT_RC(sl_decode(d, j, n / 2, SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_WARNINGS, SL_WARNINGS_STRICT));
    ASSERT_EQ(sl_decoder_get(d, SL_DECODE_WARNINGS), SL_WARNINGS_STRICT);
    ASSERT_RC(sl_decode(d, x, n + 3, SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), "extraneous bytes");
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_WARNINGS, SL_WARNINGS_LENIENT));
    ASSERT_OK(sl_decode(d, bad, n, SL_COLOR_RGB, &t));
    sl_tensor_release(&t);
    ASSERT_RC(sl_decode(d, j, n / 2, SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), "premature end of JPEG file");
    ASSERT_RC(sl_decoder_set(d, SL_DECODE_WARNINGS, 3), SL_EINVAL);
    ASSERT_RC(sl_decoder_set(d, SL_DECODE_EXIF_ORIENTATION, 2), SL_EINVAL);
    sl_tensor_release(&ref);
    sl_decoder_free(d);
    free(x);
    free(bad);
    free(j);
}

/* Stored pixel (y, x) of a h x w image for upright pixel (uy, ux). */
static void stored_of(int o, int h, int w, int uy, int ux, int *y, int *x) {
    switch (o) {
    case 2: *y = uy, *x = w - 1 - ux; break;
    case 3: *y = h - 1 - uy, *x = w - 1 - ux; break;
    case 4: *y = h - 1 - uy, *x = ux; break;
    case 5: *y = ux, *x = uy; break;
    case 6: *y = h - 1 - ux, *x = uy; break;
    case 7: *y = h - 1 - ux, *x = w - 1 - uy; break;
    case 8: *y = ux, *x = w - 1 - uy; break;
    default: *y = uy, *x = ux; break;
    }
}

SL_TEST(ops_decode__exif_orientation_all_eight) {
    int w = 37, h = 22;
    size_t n;
    uint8_t *j = td_picture_jpeg(w, h, 13, 0, &n);
    config plain = {0, 0, 0}, on = {0, 1, 0};
    sl_decoder *d0 = make_decoder(&plain), *d = make_decoder(&on);
    sl_tensor ref = {0};
    ASSERT_OK(sl_decode(d0, j, n, SL_COLOR_RGB, &ref));
    const uint8_t *rp = ref.data;
    for (int be = 0; be < 2; be++) {
        for (int o = 1; o <= 8; o++) {
            uint8_t seg[64];
            size_t sn = exif_segment(seg, o, be), en;
            uint8_t *e = insert_after_soi(j, n, seg, sn, &en);
            sl_image_info info;
            ASSERT_OK(sl_decode_info(d, e, en, &info));
            int uh = o >= 5 ? w : h, uw = o >= 5 ? h : w;
            ASSERT_EQ(info.height, uh);
            ASSERT_EQ(info.width, uw);
            sl_tensor t = {0};
            ASSERT_OK(sl_decode(d, e, en, SL_COLOR_RGB, &t));
            ASSERT_EQ(t.shape[0], uh);
            ASSERT_EQ(t.shape[1], uw);
            const uint8_t *tp = t.data;
            for (int uy = 0; uy < uh; uy++)
                for (int ux = 0; ux < uw; ux++) {
                    int y, x;
                    stored_of(o, h, w, uy, ux, &y, &x);
                    if (memcmp(tp + ((size_t)uy * uw + ux) * 3, rp + ((size_t)y * w + x) * 3, 3))
                        sl_test_fail(__FILE__, __LINE__, "orientation %d: pixel (%d, %d)", o, uy, ux);
                }
            /* fused: the whole upright image, resized, equals resizing the
             * plain upright decode exactly when turned (that path resamples
             * the same pixels); orientation 1 takes the DCT-scaled path,
             * within the documented 2 levels */
            sl_tensor f = {0}, r = {0};
            ASSERT_OK(sl_decode_crop_resize(d, e, en, SL_COLOR_RGB, NULL, 9, 11,
                                            SL_INTERP_BILINEAR, &f));
            ASSERT_OK(sl_image_resize(&t, 9, 11, SL_INTERP_BILINEAR, &r));
            if (o != 1)
                ASSERT(memcmp(f.data, r.data, r.nbytes) == 0);
            else
                ASSERT(td_mad(f.data, r.data, r.nbytes, NULL) <= 2.0);
            sl_tensor_release(&f);
            sl_tensor_release(&r);
            /* off: stored pixels whatever the tag says */
            ASSERT_OK(sl_decode(d0, e, en, SL_COLOR_RGB, &f));
            ASSERT(memcmp(f.data, ref.data, ref.nbytes) == 0);
            sl_tensor_release(&f);
            sl_tensor_release(&t);
            free(e);
        }
    }
    sl_tensor_release(&ref);
    sl_decoder_free(d0);
    sl_decoder_free(d);
    free(j);
}

/* Hostile Exif segments: every truncation and every byte value at each
 * offset of the IFD never reads outside the segment (ASan) and gives an
 * orientation of 1..8. */
SL_TEST(ops_decode__exif_hostile_segments) {
    size_t n;
    uint8_t *j = td_picture_jpeg(16, 8, 14, 0, &n);
    config on = {0, 1, 0};
    sl_decoder *d = make_decoder(&on);
    uint8_t seg[64];
    size_t sn = exif_segment(seg, 6, 0);
    for (size_t cut = 4; cut <= sn; cut++) {
        uint8_t s2[64];
        memcpy(s2, seg, cut);
        s2[2] = 0;
        s2[3] = (uint8_t)(cut - 2);
        size_t en;
        uint8_t *e = insert_after_soi(j, n, s2, cut, &en);
        sl_image_info info;
        ASSERT_OK(sl_decode_info(d, e, en, &info));
        ASSERT_EQ(info.width, cut >= 32 ? 8 : 16); /* only a whole entry turns it */
        free(e);
    }
    for (size_t pos = 10; pos < sn; pos++) {
        for (int v = 0; v < 256; v += 17) {
            uint8_t s2[64];
            memcpy(s2, seg, sn);
            s2[pos] = (uint8_t)v;
            size_t en;
            uint8_t *e = insert_after_soi(j, n, s2, sn, &en);
            sl_image_info info;
            ASSERT_OK(sl_decode_info(d, e, en, &info));
            ASSERT(info.width == 16 || info.width == 8);
            free(e);
        }
    }
    sl_decoder_free(d);
    free(j);
}

SL_TEST(ops_decode__oom_loop_turned_and_lenient) {
    size_t n, en;
    uint8_t *j = td_picture_jpeg(24, 20, 15, 0, &n);
    uint8_t seg[64];
    size_t sn = exif_segment(seg, 7, 1);
    uint8_t *e = insert_after_soi(j, n, seg, sn, &en);
    const int64_t params[2][2] = {{SL_DECODE_EXIF_ORIENTATION, 1},
                                  {SL_DECODE_WARNINGS, SL_WARNINGS_LENIENT}};
    sl_box b = {2, 3, 15, 14};
    ASSERT(td_decode_oom(e, en, params, 2, SL_COLOR_GRAY, NULL, 0, 0) > 0);
    ASSERT(td_decode_oom(e, en, params, 2, SL_COLOR_RGB, &b, 7, 9) > 0);
    free(e);
    free(j);
}

/* Bad samples interleaved with good ones under on_error skip, 1 and 2
 * threads, plain and fused: every good sample arrives, equal to decoding it
 * alone. */
SL_TEST(ops_decode__pipeline_skips_bad_keeps_good) {
    corpus c;
    make_corpus(&c);
    enum { N = 64 };
    const blob *items[N];
    int64_t labels[N];
    sl_sample samples[N];
    memset(samples, 0, sizeof samples);
    int ngood = N / 2;
    for (int i = 0; i < N; i++) {
        /* every other sample is bad; the goods cycle through all kinds */
        items[i] = (i % 2) ? &c.bad[(i * 7) % c.nbad] : &c.good[(i / 2) % c.ngood];
        int64_t n = (int64_t)items[i]->n;
        sl_tensor_view(&samples[i].col[0], items[i]->b, SL_U8, 1, &n);
        labels[i] = i;
        sl_tensor_view(&samples[i].col[1], &labels[i], SL_I64, 0, NULL);
        samples[i].ncols = 2;
        samples[i].index = (uint64_t)i;
    }
    for (int fused = 0; fused < 2; fused++) {
        for (int threads = 1; threads <= 2; threads++) {
            sl_spec *spec;
            ASSERT_OK(sl_spec_create(&spec));
            const char *names[2] = {"image", "label"};
            ASSERT_OK(sl_spec_set_source_samples(spec, 2, names, samples, N));
            ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"decode\"}"));
            if (fused)
                ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"resize\", \"size\": [6, 8]}"));
            ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 1}"));
            ASSERT_OK(sl_spec_set_on_error(spec, SL_ON_ERROR_SKIP));
            ASSERT_OK(sl_spec_set_threads(spec, threads));
            sl_pipeline *p;
            ASSERT_OK(sl_pipeline_create(&p, spec));
            sl_batch *b;
            int rc, seen[N] = {0}, good_seen = 0;
            while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
                int64_t i = *(const int64_t *)sl_batch_column(b, sl_batch_find(b, "label"))->data;
                ASSERT(i >= 0 && i < N && !seen[i]);
                seen[i] = 1;
                good_seen += !(i % 2);
                const sl_tensor *img = sl_batch_column(b, sl_batch_find(b, "image"));
                sl_decoder *d = NULL;
                ASSERT_OK(sl_decoder_create(&d));
                sl_tensor t = {0};
                if (fused)
                    ASSERT_OK(sl_decode_crop_resize(d, items[i]->b, items[i]->n, SL_COLOR_RGB,
                                                    NULL, 6, 8, SL_INTERP_BILINEAR, &t));
                else
                    ASSERT_OK(sl_decode(d, items[i]->b, items[i]->n, SL_COLOR_RGB, &t));
                ASSERT_EQ(img->nbytes, t.nbytes);
                if (memcmp(img->data, t.data, t.nbytes) != 0)
                    sl_test_fail(__FILE__, __LINE__, "sample %d ('%s', fused %d, %d threads) "
                                 "differs from decoding it alone", (int)i, items[i]->name,
                                 fused, threads);
                sl_tensor_release(&t);
                sl_decoder_free(d);
                sl_batch_release(b);
            }
            ASSERT_EQ(rc, SL_END);
            ASSERT_EQ(good_seen, ngood);
            for (int i = 0; i < N; i++)
                if (items[i]->must_fail)
                    ASSERT(!seen[i]);
            sl_pipeline_free(p);
            sl_spec_free(spec);
        }
    }
    free_corpus(&c);
}
