/* test_decode_entropy.c — corrupt entropy-coded data (a run of scan bytes
 * overwritten by stuffed 0xFF 0x00 pairs, jpeg_damage.h) in every warnings
 * mode, on the plain decode and the fused crop decode, in baseline,
 * progressive and restart-marked JPEGs (with and without an interval
 * table), several run lengths and positions; a good file decoded right
 * after on the same decoder; clean files never decoded twice; the restart
 * re-encode refusing such files. docs/OPS.md, "Corrupt entropy data", is
 * the table checked here.
 *
 * What default mode decides on libjpeg-turbo's fast Huffman path depends on
 * where the decoder, out of step after the corrupt code, ends the scan; the
 * expectation comes from libjpeg itself: the same bytes through
 * jpeg_mem_src and a plain decompressor, its warnings recorded (trace()). */
#include "ops/decode.h"
#include "ops_testdata.h"
#include "jpeg_damage.h"

#include <jerror.h>


/* ---- libjpeg's own account of a file ---------------------------------------- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int past_header;
    int fails;      /* a warning default mode fails on, or an error */
    int extraneous; /* bytes skipped after the header */
} trace_err;

static void trace_exit(j_common_ptr c) { longjmp(((trace_err *)c->err)->jb, 1); }

static void trace_emit(j_common_ptr c, int level) {
    trace_err *e = (trace_err *)c->err;
    if (level >= 0)
        return;
    switch (c->err->msg_code) {
    case JWRN_EXTRANEOUS_DATA:
        e->extraneous |= e->past_header;
        break;
    case JWRN_JFIF_MAJOR:
    case JWRN_ADOBE_XFORM:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_ICC:
        break;
    default:
        e->fails = 1;
    }
}

static void trace_output(j_common_ptr c) { (void)c; }

/* A whole decode from memory (the fast Huffman path wherever libjpeg-turbo
 * takes it), warnings recorded. `e` is the caller's, so nothing the longjmp
 * returns to is a modified local. */
static void trace(const uint8_t *j, size_t n, trace_err *e) {
    struct jpeg_decompress_struct *ci = calloc(1, sizeof *ci);
    memset(e, 0, sizeof *e);
    ci->err = jpeg_std_error(&e->pub);
    e->pub.error_exit = trace_exit;
    e->pub.emit_message = trace_emit;
    e->pub.output_message = trace_output;
    jpeg_create_decompress(ci);
    if (setjmp(e->jb)) {
        e->fails = 1;
    } else {
        jpeg_mem_src(ci, j, (unsigned long)n);
        (void)jpeg_read_header(ci, TRUE);
        e->past_header = 1;
        (void)jpeg_start_decompress(ci);
        JSAMPLE *row = malloc((size_t)ci->output_width * (size_t)ci->output_components);
        while (ci->output_scanline < ci->output_height)
            (void)jpeg_read_scanlines(ci, &row, 1);
        free(row);
        (void)jpeg_finish_decompress(ci);
    }
    jpeg_destroy_decompress(ci);
    free(ci);
}

/* ---- the files -------------------------------------------------------------- */

enum { BASELINE, BASELINE_444, PROGRESSIVE, RESTART_TABLE, RESTART_BARE, NKINDS };
static const char *const kind_name[NKINDS] = {"baseline 4:2:0", "baseline 4:4:4", "progressive",
                                              "restart + interval table",
                                              "restart, no table"};

static uint8_t *restarted(const uint8_t *j, size_t n, size_t *rn) {
    sl_tensor t = {0};
    int changed = -1;
    ASSERT_OK(sl_jpeg_add_restarts(j, n, SL_JPEG_RESTART_AUTO, &t, &changed));
    ASSERT_EQ(changed, 1);
    uint8_t *out = malloc(t.nbytes);
    memcpy(out, t.data, t.nbytes);
    *rn = t.nbytes;
    sl_tensor_release(&t);
    return out;
}

/* The JPEG without its APP15 segments (the interval table): restart
 * markers that the fused path cannot use, so it takes the ordinary path. */
static uint8_t *without_table(const uint8_t *j, size_t n, size_t *on) {
    uint8_t *o = malloc(n);
    size_t p = 2, q = 2;
    memcpy(o, j, 2);
    while (p + 4 <= n && j[p] == 0xff && j[p + 1] != 0xda) {
        size_t len = 2 + ((size_t)j[p + 2] << 8 | j[p + 3]);
        if (j[p + 1] != 0xef) {
            memcpy(o + q, j + p, len);
            q += len;
        }
        p += len;
    }
    memcpy(o + q, j + p, n - p);
    *on = q + n - p;
    return o;
}

/* A clean JPEG of `kind` from a 320x240 picture: large enough that most of
 * its scan is read on the fast Huffman path (it needs 512 bytes per block
 * of an MCU still buffered). */
static uint8_t *clean_file(int kind, int seed, size_t *n) {
    const int w = 320, h = 240;
    uint8_t *pix = td_picture(w, h, seed);
    int sub = kind == BASELINE_444 ? TJSAMP_444 : TJSAMP_420;
    uint8_t *j = td_jpeg(pix, w, h, TJPF_RGB, sub, 90, kind == PROGRESSIVE ? TJFLAG_PROGRESSIVE : 0,
                         n);
    free(pix);
    if (kind == RESTART_TABLE || kind == RESTART_BARE) {
        size_t rn;
        uint8_t *r = restarted(j, *n, &rn);
        free(j);
        j = r;
        *n = rn;
        if (kind == RESTART_BARE) {
            r = without_table(j, rn, n);
            free(j);
            j = r;
        }
    }
    return j;
}

/* ---- decoding --------------------------------------------------------------- */

enum { M_DEFAULT, M_STRICT, M_LENIENT, M_CHECKED, NMODES };
static const char *const mode_name[NMODES] = {"default", "strict", "lenient",
                                              "default + check_entropy"};

static sl_decoder *decoder(int mode) {
    sl_decoder *d;
    ASSERT_OK(sl_decoder_create(&d));
    static const int warn[NMODES] = {SL_WARNINGS_DEFAULT, SL_WARNINGS_STRICT, SL_WARNINGS_LENIENT,
                                     SL_WARNINGS_DEFAULT};
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_WARNINGS, warn[mode]));
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_CHECK_ENTROPY, mode == M_CHECKED));
    return d;
}

/* sl_decode into a fresh tensor; returns the status, *t holds the pixels. */
static int plain(sl_decoder *d, const uint8_t *j, size_t n, sl_tensor *t) {
    memset(t, 0, sizeof *t);
    return sl_decode(d, j, n, SL_COLOR_RGB, t);
}

/* The fused decode of the whole image (every row is decoded) into 56x56. */
static int fused(sl_decoder *d, const uint8_t *j, size_t n, uint8_t out[56 * 56 * 3]) {
    sl_image_info info;
    int rc = sl_decode_info(d, j, n, &info);
    if (rc != SL_OK)
        return rc;
    sl_box box = {0, 0, info.height, info.width};
    sl_tensor t;
    int64_t cap = 56 * 56 * 3;
    memset(&t, 0, sizeof t);
    sl_tensor_view(&t, out, SL_U8, 1, &cap);
    return sl_decode_crop_resize(d, j, n, SL_COLOR_RGB, &box, 56, 56, SL_INTERP_BILINEAR, &t);
}

/* The good file on decoder `d` (which has just decoded something else)
 * gives the fresh decoder's pixels, plain and fused. */
static void assert_good_after(sl_decoder *d, const uint8_t *good, size_t gn, const sl_tensor *ref,
                              const uint8_t *fref, const char *what) {
    sl_tensor t;
    uint8_t f[56 * 56 * 3];
    int rc = plain(d, good, gn, &t);
    if (rc != SL_OK || t.nbytes != ref->nbytes || memcmp(t.data, ref->data, t.nbytes) != 0)
        sl_test_fail(__FILE__, __LINE__, "good file after %s: plain decode differs (%s)", what,
                     rc ? sl_errmsg() : "pixels");
    sl_tensor_release(&t);
    rc = fused(d, good, gn, f);
    if (rc != SL_OK || memcmp(f, fref, sizeof f) != 0)
        sl_test_fail(__FILE__, __LINE__, "good file after %s: fused decode differs (%s)", what,
                     rc ? sl_errmsg() : "pixels");
}

/* ---- the cases -------------------------------------------------------------- */

static const size_t runs[] = {8, 24, 96};
static const double wheres[] = {0.15, 0.5, 0.85};

SL_TEST(ops_decode_entropy__each_mode_on_damaged_files) {
    sl_decoder *dec[NMODES];
    for (int m = 0; m < NMODES; m++)
        dec[m] = decoder(m);
    size_t gn;
    uint8_t *good = clean_file(BASELINE, 5, &gn);
    sl_tensor gref;
    uint8_t gfref[56 * 56 * 3];
    {
        sl_decoder *fresh = decoder(M_DEFAULT);
        ASSERT_OK(plain(fresh, good, gn, &gref));
        ASSERT_OK(fused(fresh, good, gn, gfref));
        sl_decoder_free(fresh);
    }
    int files = 0, by_recheck = 0, fused_strict_only = 0, hidden = 0;
    for (int kind = 0; kind < NKINDS; kind++) {
        size_t n;
        uint8_t *clean = clean_file(kind, 1 + kind, &n);
        for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
            for (size_t w = 0; w < sizeof wheres / sizeof *wheres; w++) {
                size_t at;
                uint8_t *bad = jd_damage(clean, n, wheres[w], runs[r], &at);
                ASSERT(bad != NULL);
                char what[160];
                snprintf(what, sizeof what, "%s, %zu bytes at %zu of %zu", kind_name[kind],
                         runs[r], at, n);
                trace_err te;
                trace(bad, n, &te);
                int got[NMODES], gotf[NMODES];
                for (int m = 0; m < NMODES; m++) {
                    sl_tensor t;
                    uint8_t f[56 * 56 * 3];
                    got[m] = plain(dec[m], bad, n, &t);
                    if (got[m] == SL_OK)
                        sl_tensor_release(&t);
                    else if (got[m] != SL_EDECODE || !strstr(sl_errmsg(), "decode: "))
                        sl_test_fail(__FILE__, __LINE__, "%s, %s: %s (%s)", what, mode_name[m],
                                     sl_status_str(got[m]), sl_errmsg());
                    gotf[m] = fused(dec[m], bad, n, f);
                    if (gotf[m] != SL_OK && gotf[m] != SL_EDECODE)
                        sl_test_fail(__FILE__, __LINE__, "%s, fused, %s: %s (%s)", what,
                                     mode_name[m], sl_status_str(gotf[m]), sl_errmsg());
                    assert_good_after(dec[m], good, gn, &gref, gfref, what);
                }
                /* the checking decoder reads every code: strict, and
                 * default with check_entropy, fail plain and fused */
                if (got[M_STRICT] == SL_OK || got[M_CHECKED] == SL_OK ||
                    gotf[M_STRICT] == SL_OK || gotf[M_CHECKED] == SL_OK)
                    sl_test_fail(__FILE__, __LINE__,
                                 "%s: passed (plain strict %d, checked %d; fused strict %d, "
                                 "checked %d), documented: error",
                                 what, got[M_STRICT], got[M_CHECKED], gotf[M_STRICT],
                                 gotf[M_CHECKED]);
                /* lenient accepts what PIL accepts: it decodes */
                if (got[M_LENIENT] != SL_OK || gotf[M_LENIENT] != SL_OK)
                    sl_test_fail(__FILE__, __LINE__, "%s: lenient failed (%s)", what,
                                 sl_errmsg());
                /* default: progressive and restart-marked files never take
                 * the fast path, so libjpeg reports the code */
                if (kind >= PROGRESSIVE && !te.fails)
                    sl_test_fail(__FILE__, __LINE__, "%s: libjpeg raised no warning", what);
                /* plain default fails on a warning, or on extraneous bytes
                 * after the header that the checking source confirms */
                int want = te.fails || te.extraneous;
                if ((got[M_DEFAULT] != SL_OK) != want)
                    sl_test_fail(__FILE__, __LINE__,
                                 "%s: plain default %s, want %s (libjpeg: fails %d, "
                                 "extraneous bytes %d)",
                                 what, got[M_DEFAULT] ? "error" : "pixels",
                                 want ? "error" : "pixels", te.fails, te.extraneous);
                /* fused default reads no end of scan: a warning decides */
                if ((gotf[M_DEFAULT] != SL_OK) != te.fails)
                    sl_test_fail(__FILE__, __LINE__, "%s: fused default %s, libjpeg fails %d",
                                 what, gotf[M_DEFAULT] ? "error" : "pixels", te.fails);
                files++;
                by_recheck += !te.fails && te.extraneous;
                fused_strict_only += gotf[M_DEFAULT] == SL_OK;
                hidden += !te.fails && !te.extraneous;
                free(bad);
            }
        }
        free(clean);
    }
    fprintf(stderr,
            "%d damaged files: %d found in default only by the end-of-scan check, %d hidden "
            "from default on the fast path (plain), %d hidden from fused default\n",
            files, by_recheck, hidden, fused_strict_only);
    /* the set exercises both rules: damage found through the unused bytes,
     * and damage the fast path hides from default entirely */
    ASSERT(by_recheck > 0);
    ASSERT(hidden > 0);
    sl_tensor_release(&gref);
    free(good);
    for (int m = 0; m < NMODES; m++)
        sl_decoder_free(dec[m]);
}

/* Clean files decode once in default mode, with the same pixels on both
 * Huffman paths; extraneous bytes between header segments cost nothing;
 * bytes a writer left after the scan cost a second decode and still pass. */
SL_TEST(ops_decode_entropy__clean_files_decode_once) {
    sl_decoder *dec[NMODES];
    for (int m = 0; m < NMODES; m++)
        dec[m] = decoder(m);
    for (int kind = 0; kind < NKINDS; kind++) {
        size_t n;
        uint8_t *j = clean_file(kind, 20 + kind, &n);
        sl_tensor ref;
        uint8_t fref[56 * 56 * 3];
        ASSERT_OK(plain(dec[M_DEFAULT], j, n, &ref));
        ASSERT_OK(fused(dec[M_DEFAULT], j, n, fref));
        for (int m = 1; m < NMODES; m++) {
            sl_tensor t;
            uint8_t f[56 * 56 * 3];
            ASSERT_OK(plain(dec[m], j, n, &t));
            ASSERT_EQ(t.nbytes, ref.nbytes);
            ASSERT(memcmp(t.data, ref.data, t.nbytes) == 0);
            sl_tensor_release(&t);
            ASSERT_OK(fused(dec[m], j, n, f));
            ASSERT(memcmp(f, fref, sizeof f) == 0);
        }
        sl_tensor_release(&ref);
        free(j);
    }
    ASSERT_U64_EQ(dec[M_DEFAULT]->rechecks, 0);

    size_t n;
    uint8_t *j = clean_file(BASELINE, 30, &n);
    sl_tensor ref;
    ASSERT_OK(plain(dec[M_DEFAULT], j, n, &ref));
    /* three bytes before DQT: skipped while reading the header */
    long q = td_find_marker(j, n, 0xdb);
    ASSERT(q > 0);
    uint8_t *x = malloc(n + 3);
    memcpy(x, j, (size_t)q);
    memcpy(x + q, "\x01\x02\x03", 3);
    memcpy(x + q + 3, j + q, n - (size_t)q);
    sl_tensor t;
    ASSERT_OK(plain(dec[M_DEFAULT], x, n + 3, &t));
    ASSERT(memcmp(t.data, ref.data, t.nbytes) == 0);
    sl_tensor_release(&t);
    ASSERT_U64_EQ(dec[M_DEFAULT]->rechecks, 0);
    ASSERT(plain(dec[M_STRICT], x, n + 3, &t) == SL_EDECODE);
    /* two bytes between the scan and EOI: checked again, and clean */
    memcpy(x, j, n - 2);
    memcpy(x + n - 2, "\x12\x34\xff\xd9", 4);
    trace_err te;
    trace(x, n + 2, &te);
    ASSERT(te.extraneous && !te.fails);
    ASSERT_OK(plain(dec[M_DEFAULT], x, n + 2, &t));
    ASSERT(memcmp(t.data, ref.data, t.nbytes) == 0);
    sl_tensor_release(&t);
    ASSERT_U64_EQ(dec[M_DEFAULT]->rechecks, 1);
    ASSERT(plain(dec[M_STRICT], x, n + 2, &t) == SL_EDECODE);
    /* out of memory in the second decode: SL_ENOMEM, nothing leaks */
    const int64_t params[1][2] = {{SL_DECODE_WARNINGS, SL_WARNINGS_DEFAULT}};
    ASSERT(td_decode_oom(x, n + 2, params, 1, SL_COLOR_RGB, NULL, 0, 0) > 0);
    sl_tensor_release(&ref);
    free(x);
    free(j);
    for (int m = 0; m < NMODES; m++)
        sl_decoder_free(dec[m]);
}

/* The checking source is jpeg_mem_src in all but chunk size: truncated
 * files fail the same way, a file cut inside a marker segment too. */
SL_TEST(ops_decode_entropy__checked_source_at_the_end_of_data) {
    sl_decoder *d = decoder(M_CHECKED), *m = decoder(M_DEFAULT);
    size_t n;
    uint8_t *j = clean_file(PROGRESSIVE, 40, &n);
    for (size_t cut = 1; cut < n; cut += cut < 700 ? 37 : 1499) {
        sl_tensor t;
        int a = plain(d, j, cut, &t);
        if (a == SL_OK)
            sl_tensor_release(&t);
        int b = plain(m, j, cut, &t);
        if (b == SL_OK)
            sl_tensor_release(&t);
        ASSERT_EQ(a, b);
        ASSERT(a != SL_OK);
    }
    free(j);
    sl_decoder_free(d);
    sl_decoder_free(m);
}

/* The restart re-encode reads the coefficients through the checking
 * source: damage the fast path would read as zeros is refused (the file is
 * kept as it was, for the decode op to judge), never stored as valid data. */
SL_TEST(ops_decode_entropy__restart_reencode_refuses_damage) {
    int refused = 0;
    for (int kind = BASELINE; kind <= PROGRESSIVE; kind++) {
        size_t n;
        uint8_t *clean = clean_file(kind, 50 + kind, &n);
        for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
            for (size_t w = 0; w < sizeof wheres / sizeof *wheres; w++) {
                uint8_t *bad = jd_damage(clean, n, wheres[w], runs[r], NULL);
                ASSERT(bad != NULL);
                sl_tensor t = {0};
                int changed = -1;
                ASSERT_OK(sl_jpeg_add_restarts(bad, n, SL_JPEG_RESTART_AUTO, &t, &changed));
                if (changed)
                    sl_test_fail(__FILE__, __LINE__,
                                 "%s, %zu bytes at %.2f: re-encoded (the damage would be "
                                 "stored as valid data)",
                                 kind_name[kind], runs[r], wheres[w]);
                refused++;
                free(bad);
            }
        }
        free(clean);
    }
    ASSERT(refused > 0);
}

SL_TEST(ops_decode_entropy__param) {
    sl_decoder *d;
    ASSERT_OK(sl_decoder_create(&d));
    ASSERT_EQ(sl_decoder_get(d, SL_DECODE_CHECK_ENTROPY), 0);
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_CHECK_ENTROPY, 1));
    ASSERT_EQ(sl_decoder_get(d, SL_DECODE_CHECK_ENTROPY), 1);
    ASSERT_EQ(sl_decoder_set(d, SL_DECODE_CHECK_ENTROPY, 2), SL_EINVAL);
    ASSERT(strstr(sl_errmsg(), "check_entropy") != NULL);
    sl_decoder_free(d);
}
