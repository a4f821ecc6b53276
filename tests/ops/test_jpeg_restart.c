/*
 * test_jpeg_restart.c — restart-interval storage (sl_jpeg_add_restarts) and
 * the region decode from a synthetic JPEG: same pixels as the source, and
 * the fused path, with and without an interval table, equal to a whole
 * decode followed by crop (and resize), at every DCT scale.
 */
#include "ops/decode.h"
#include "ops_testdata.h"

#include <dirent.h>

/* Pixels of a real photo when the machine has one (Debian's MATE
 * wallpapers), else the synthetic picture: `w` x `h` RGB cut from its
 * middle. Real content matters: Huffman code lengths, interval sizes and
 * chroma detail all differ from synthetic gradients. */
static uint8_t *photo_pixels(int w, int h, int seed, int *real) {
    static const char *const photos[] = {"/usr/share/backgrounds/mate/nature/FreshFlower.jpg",
                                         "/usr/share/backgrounds/mate/nature/GreenMeadow.jpg",
                                         "/usr/share/backgrounds/mate/nature/Aqua.jpg"};
    const char *path = photos[seed % 3];
    FILE *f = fopen(path, "rb");
    *real = 0;
    if (!f)
        return td_picture(w, h, seed);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *j = malloc((size_t)n);
    size_t got = fread(j, 1, (size_t)n, f);
    fclose(f);
    tjhandle t = tjInitDecompress();
    int pw, ph, sub, cs;
    uint8_t *pix = NULL;
    if (got == (size_t)n && tjDecompressHeader3(t, j, (unsigned long)n, &pw, &ph, &sub, &cs) == 0 &&
        pw >= w && ph >= h) {
        uint8_t *all = malloc((size_t)pw * ph * 3);
        if (tjDecompress2(t, j, (unsigned long)n, all, pw, 0, ph, TJPF_RGB, 0) == 0) {
            pix = malloc((size_t)w * h * 3);
            int x0 = (pw - w) / 2 + seed * 7, y0 = (ph - h) / 2;
            if (x0 + w > pw)
                x0 = pw - w;
            for (int y = 0; y < h; y++)
                memcpy(pix + (size_t)y * w * 3, all + ((size_t)(y0 + y) * pw + x0) * 3,
                       (size_t)w * 3);
            *real = 1;
        }
        free(all);
    }
    tjDestroy(t);
    free(j);
    return pix ? pix : td_picture(w, h, seed);
}

typedef struct {
    const char *name;
    int w, h, pf, sub, flags;
} variant;

static const variant variants[] = {
    {"420", 333, 251, TJPF_RGB, TJSAMP_420, 0},
    {"422", 301, 199, TJPF_RGB, TJSAMP_422, 0},
    {"444", 257, 163, TJPF_RGB, TJSAMP_444, 0},
    {"440", 210, 187, TJPF_RGB, TJSAMP_440, 0},
    {"gray", 229, 141, TJPF_GRAY, TJSAMP_GRAY, 0},
    {"cmyk", 150, 97, TJPF_CMYK, TJSAMP_444, 0},
    {"420 progressive", 345, 259, TJPF_RGB, TJSAMP_420, TJFLAG_PROGRESSIVE},
    {"gray progressive", 171, 133, TJPF_GRAY, TJSAMP_GRAY, TJFLAG_PROGRESSIVE},
    {"420 tall thin", 40, 517, TJPF_RGB, TJSAMP_420, 0},
};

static uint8_t *variant_jpeg(const variant *v, int seed, size_t *n) {
    int real;
    uint8_t *rgb = photo_pixels(v->w, v->h, seed, &real);
    size_t np = (size_t)v->w * v->h;
    uint8_t *pix = rgb;
    if (v->pf == TJPF_GRAY || v->pf == TJPF_CMYK) {
        pix = malloc(np * 4);
        for (size_t i = 0; i < np; i++) {
            if (v->pf == TJPF_GRAY) {
                pix[i] = rgb[3 * i + 1];
            } else {
                memcpy(pix + 4 * i, rgb + 3 * i, 3);
                pix[4 * i + 3] = (uint8_t)(180 + (i % 50));
            }
        }
    }
    uint8_t *j = td_jpeg(pix, v->w, v->h, v->pf, v->sub, 88, v->flags, n);
    if (pix != rgb)
        free(pix);
    free(rgb);
    return j;
}

static uint8_t *restart_of(const uint8_t *j, size_t n, sl_jpeg_restart mode, size_t *rn) {
    sl_tensor t = {0};
    int changed = -1;
    ASSERT_OK(sl_jpeg_add_restarts(j, n, mode, &t, &changed));
    ASSERT_EQ(changed, 1);
    uint8_t *out = malloc(t.nbytes);
    memcpy(out, t.data, t.nbytes);
    *rn = t.nbytes;
    sl_tensor_release(&t);
    return out;
}

static void assert_same_decode(sl_decoder *d, const uint8_t *a, size_t an, const uint8_t *b,
                               size_t bn, sl_color color, const char *what) {
    sl_tensor x = {0}, y = {0};
    ASSERT_OK(sl_decode(d, a, an, color, &x));
    ASSERT_OK(sl_decode(d, b, bn, color, &y));
    ASSERT_EQ(x.nbytes, y.nbytes);
    if (memcmp(x.data, y.data, x.nbytes) != 0)
        sl_test_fail(__FILE__, __LINE__, "%s: colour %d: pixels differ", what, (int)color);
    sl_tensor_release(&x);
    sl_tensor_release(&y);
}

SL_TEST(ops_jpeg_restart__same_pixels_as_source) {
    sl_decoder *d = NULL;
    ASSERT_OK(sl_decoder_create(&d));
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        size_t n, rn;
        uint8_t *j = variant_jpeg(&variants[v], (int)v, &n);
        for (int mode = SL_JPEG_RESTART_AUTO; mode <= SL_JPEG_RESTART_ROWS; mode++) {
            uint8_t *r = restart_of(j, n, (sl_jpeg_restart)mode, &rn);
            sl_jpeg_layout L;
            ASSERT_EQ(sl_ops__jpeg_layout(r, rn, &L), 1);
            ASSERT_EQ(L.usable, 1);
            ASSERT_EQ(L.mpr % L.k, 0);
            if (mode == SL_JPEG_RESTART_ROWS)
                ASSERT_EQ(L.k, L.mpr);
            else
                ASSERT(L.k <= 4 || L.mpr % 2 == 1);
            assert_same_decode(d, j, n, r, rn, SL_COLOR_RGB, variants[v].name);
            assert_same_decode(d, j, n, r, rn, SL_COLOR_GRAY, variants[v].name);
            /* packing twice gives the same bytes */
            size_t rn2;
            uint8_t *r2 = restart_of(r, rn, (sl_jpeg_restart)mode, &rn2);
            ASSERT_EQ(rn2, rn);
            ASSERT_EQ(memcmp(r, r2, rn), 0);
            free(r2);
            free(r);
        }
        free(j);
    }
    sl_decoder_free(d);
}

SL_TEST(ops_jpeg_restart__left_alone) {
    sl_tensor t = {0};
    int changed = -1;
    size_t n;
    uint8_t *j = td_picture_jpeg(64, 48, 1, 0, &n);
    ASSERT_OK(sl_jpeg_add_restarts(j, n, SL_JPEG_RESTART_OFF, &t, &changed));
    ASSERT_EQ(changed, 0);
    /* a single MCU: nothing to gain */
    uint8_t *tiny = td_picture_jpeg(16, 16, 1, 0, &n);
    ASSERT_OK(sl_jpeg_add_restarts(tiny, n, SL_JPEG_RESTART_AUTO, &t, &changed));
    ASSERT_EQ(changed, 0);
    ASSERT(t.data == NULL);
    /* not a JPEG; a truncated JPEG (a libjpeg warning) */
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    ASSERT_OK(sl_jpeg_add_restarts(png, sizeof png, SL_JPEG_RESTART_AUTO, &t, &changed));
    ASSERT_EQ(changed, 0);
    free(j);
    j = td_picture_jpeg(200, 150, 1, 0, &n);
    ASSERT_OK(sl_jpeg_add_restarts(j, n * 2 / 3, SL_JPEG_RESTART_AUTO, &t, &changed));
    ASSERT_EQ(changed, 0);
    ASSERT_RC(sl_jpeg_add_restarts(j, n, (sl_jpeg_restart)9, &t, &changed), SL_EINVAL);
    free(j);
    free(tiny);
}

/* A deterministic box generator (no dependence on the library's RNG). */
static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* The fused decode at scale 1 with the output the size of the crop is the
 * crop itself: compare with decode -> crop, pixel for pixel, through the
 * table (synthetic JPEG) and through the ordinary path. */
SL_TEST(ops_jpeg_restart__fused_crop_exact) {
    sl_decoder *d = NULL;
    ASSERT_OK(sl_decoder_create(&d));
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const variant *va = &variants[v];
        size_t n, rn;
        uint8_t *j = variant_jpeg(va, (int)v, &n);
        uint8_t *r = restart_of(j, n, SL_JPEG_RESTART_AUTO, &rn);
        for (int color = 1; color <= 3; color += 2) {
            sl_tensor full = {0};
            ASSERT_OK(sl_decode(d, j, n, (sl_color)color, &full));
            uint32_t seed = 77 + (uint32_t)v;
            /* 40 random boxes, then boxes 1-3 pixels wide or tall at the
             * edges and in the middle: the crop libjpeg is asked for must
             * stay wide enough for the chroma upsampler to stay the same */
            for (int i = 0; i < 40 + 15; i++) {
                sl_box b;
                if (i < 40) {
                    b.w = 1 + (int)(lcg(&seed) % (uint32_t)va->w);
                    b.h = 1 + (int)(lcg(&seed) % (uint32_t)va->h);
                    b.x = (int)(lcg(&seed) % (uint32_t)(va->w - b.w + 1));
                    b.y = (int)(lcg(&seed) % (uint32_t)(va->h - b.h + 1));
                } else {
                    int k = i - 40, thin = 1 + k % 3, at = k / 3;
                    if (at < 3) { /* narrow columns: left, right, middle */
                        b.w = thin, b.h = va->h / 2, b.y = va->h / 4;
                        b.x = at == 0 ? 0 : at == 1 ? va->w - thin : va->w / 2 + 1;
                    } else { /* short rows: top, bottom */
                        b.h = thin, b.w = va->w / 2, b.x = va->w / 4;
                        b.y = at == 3 ? 0 : va->h - thin;
                    }
                }
                sl_tensor want = {0}, a = {0}, c = {0};
                ASSERT_OK(sl_image_crop(&full, &b, &want));
                uint64_t used = d->synth_used;
                ASSERT_OK(sl_decode_crop_resize(d, r, rn, (sl_color)color, &b, b.h, b.w,
                                                SL_INTERP_BILINEAR, &a));
                ASSERT_EQ(d->synth_used, used + 1);
                ASSERT_OK(sl_decode_crop_resize(d, j, n, (sl_color)color, &b, b.h, b.w,
                                                SL_INTERP_BILINEAR, &c));
                ASSERT_EQ(d->synth_used, used + 1);
                if (memcmp(a.data, want.data, want.nbytes) != 0 ||
                    memcmp(c.data, want.data, want.nbytes) != 0)
                    sl_test_fail(__FILE__, __LINE__,
                                 "%s colour %d box (x %d y %d w %d h %d): table %s, plain %s",
                                 va->name, color, b.x, b.y, b.w, b.h,
                                 memcmp(a.data, want.data, want.nbytes) ? "differs" : "ok",
                                 memcmp(c.data, want.data, want.nbytes) ? "differs" : "ok");
                sl_tensor_release(&want);
                sl_tensor_release(&a);
                sl_tensor_release(&c);
            }
            sl_tensor_release(&full);
        }
        ASSERT_EQ(d->synth_fallbacks, 0);
        free(r);
        free(j);
    }
    sl_decoder_free(d);
}

/* The whole image decoded at scale s/8 by libjpeg directly (ISLOW, fancy
 * upsampling, RGB out), the reference for DCT-scaled region decodes. */
static uint8_t *scaled_decode(const uint8_t *j, size_t n, int s, int *w, int *h) {
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr err;
    ci.err = jpeg_std_error(&err);
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, j, (unsigned long)n);
    jpeg_read_header(&ci, TRUE);
    ci.out_color_space = JCS_RGB;
    ci.dct_method = JDCT_ISLOW;
    ci.do_fancy_upsampling = TRUE;
    ci.scale_num = (unsigned)s;
    ci.scale_denom = 8;
    jpeg_start_decompress(&ci);
    *w = (int)ci.output_width;
    *h = (int)ci.output_height;
    uint8_t *p = malloc((size_t)*w * *h * 3);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = p + (size_t)ci.output_scanline * *w * 3;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    return p;
}

/* With DCT scaling: a box whose corners fall on whole pixels at scale s/8,
 * asked for at exactly its scaled size, picks scale s and resamples by the
 * identity, so the result must be the box of the scaled whole decode. */
SL_TEST(ops_jpeg_restart__fused_scaled_exact) {
    sl_decoder *d = NULL;
    ASSERT_OK(sl_decoder_create(&d));
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const variant *va = &variants[v];
        if (va->pf == TJPF_CMYK)
            continue; /* libjpeg does not convert CMYK to RGB */
        size_t n, rn;
        uint8_t *j = variant_jpeg(va, (int)v, &n);
        uint8_t *r = restart_of(j, n, SL_JPEG_RESTART_AUTO, &rn);
        uint32_t seed = 991 + (uint32_t)v;
        for (int s = 1; s <= 4; s *= 2) {
            int sw, sh, q = 8 / s;
            uint8_t *ref = scaled_decode(j, n, s, &sw, &sh);
            for (int i = 0; i < 25; i++) {
                sl_box b;
                int bw = 1 + (int)(lcg(&seed) % (uint32_t)(va->w / q)),
                    bh = 1 + (int)(lcg(&seed) % (uint32_t)(va->h / q));
                int bx = (int)(lcg(&seed) % (uint32_t)(va->w / q - bw + 1)),
                    by = (int)(lcg(&seed) % (uint32_t)(va->h / q - bh + 1));
                b.x = bx * q, b.y = by * q, b.w = bw * q, b.h = bh * q;
                for (int pass = 0; pass < 2; pass++) {
                    sl_tensor a = {0};
                    ASSERT_OK(sl_decode_crop_resize(d, pass ? j : r, pass ? n : rn,
                                                    SL_COLOR_RGB, &b, bh, bw,
                                                    SL_INTERP_BILINEAR, &a));
                    for (int y = 0; y < bh; y++)
                        if (memcmp((uint8_t *)a.data + (size_t)y * bw * 3,
                                   ref + ((size_t)(by + y) * sw + bx) * 3, (size_t)bw * 3)) {
                            sl_test_fail(__FILE__, __LINE__,
                                         "%s scale %d/8 %s box (x %d y %d w %d h %d) row %d",
                                         va->name, s, pass ? "plain" : "table", b.x, b.y, b.w,
                                         b.h, y);
                            break;
                        }
                    sl_tensor_release(&a);
                }
            }
            free(ref);
        }
        ASSERT_EQ(d->synth_fallbacks, 0);
        free(r);
        free(j);
    }
    sl_decoder_free(d);
}

/* Random boxes resized to 32..224: the table path and the ordinary path
 * give the same bytes (same region, same resampler arithmetic), and at
 * scale 8/8 both equal decode -> crop -> resize. */
SL_TEST(ops_jpeg_restart__fused_resize_same_both_paths) {
    sl_decoder *d = NULL;
    ASSERT_OK(sl_decoder_create(&d));
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const variant *va = &variants[v];
        size_t n, rn;
        uint8_t *j = variant_jpeg(va, (int)v + 3, &n);
        uint8_t *r = restart_of(j, n, SL_JPEG_RESTART_AUTO, &rn);
        sl_tensor full = {0};
        ASSERT_OK(sl_decode(d, j, n, SL_COLOR_RGB, &full));
        uint32_t seed = 5 + (uint32_t)v;
        static const int outs[] = {32, 56, 112, 224};
        for (int i = 0; i < 30; i++) {
            sl_box b;
            b.w = 8 + (int)(lcg(&seed) % (uint32_t)(va->w - 7));
            b.h = 8 + (int)(lcg(&seed) % (uint32_t)(va->h - 7));
            b.x = (int)(lcg(&seed) % (uint32_t)(va->w - b.w + 1));
            b.y = (int)(lcg(&seed) % (uint32_t)(va->h - b.h + 1));
            int o = outs[lcg(&seed) % 4];
            sl_tensor a = {0}, c = {0}, cr = {0}, want = {0};
            ASSERT_OK(sl_decode_crop_resize(d, r, rn, SL_COLOR_RGB, &b, o, o,
                                            SL_INTERP_BILINEAR, &a));
            ASSERT_OK(sl_decode_crop_resize(d, j, n, SL_COLOR_RGB, &b, o, o,
                                            SL_INTERP_BILINEAR, &c));
            if (memcmp(a.data, c.data, a.nbytes) != 0)
                sl_test_fail(__FILE__, __LINE__, "%s box (x %d y %d w %d h %d) -> %d: paths differ",
                             va->name, b.x, b.y, b.w, b.h, o);
            if (b.w < 2 * o || b.h < 2 * o) { /* no DCT scaling */
                ASSERT_OK(sl_image_crop(&full, &b, &cr));
                ASSERT_OK(sl_image_resize(&cr, o, o, SL_INTERP_BILINEAR, &want));
                if (memcmp(a.data, want.data, a.nbytes) != 0)
                    sl_test_fail(__FILE__, __LINE__,
                                 "%s box (x %d y %d w %d h %d) -> %d: not crop + resize",
                                 va->name, b.x, b.y, b.w, b.h, o);
            }
            sl_tensor_release(&a);
            sl_tensor_release(&c);
            sl_tensor_release(&cr);
            sl_tensor_release(&want);
        }
        sl_tensor_release(&full);
        free(r);
        free(j);
    }
    sl_decoder_free(d);
}

/* A table that lies, or damage inside an interval: the synthetic stream is
 * refused and the file decodes the ordinary way, with the same answer
 * (pixels or error) a file without a table gets. */
SL_TEST(ops_jpeg_restart__damage_falls_back) {
    sl_decoder *d = NULL;
    ASSERT_OK(sl_decoder_create(&d));
    size_t n, rn;
    uint8_t *j = td_picture_jpeg(320, 240, 3, 0, &n);
    uint8_t *r = restart_of(j, n, SL_JPEG_RESTART_AUTO, &rn);
    sl_jpeg_layout L;
    ASSERT_EQ(sl_ops__jpeg_layout(r, rn, &L), 1);
    ASSERT_EQ(L.usable, 1);
    sl_box b = {100, 100, 60, 80};
    sl_tensor want = {0}, got = {0};
    ASSERT_OK(sl_decode_crop_resize(d, r, rn, SL_COLOR_RGB, &b, 60, 80, SL_INTERP_BILINEAR,
                                    &want));
    /* an offset moved by one byte: the interval no longer ends at its marker */
    uint8_t *bad = malloc(rn);
    memcpy(bad, r, rn);
    size_t toff = (size_t)(L.table - r) + 22 + 4 * 7; /* MCU row 7: inside the box */
    bad[toff + 3]++;
    uint64_t fb = d->synth_fallbacks;
    ASSERT_OK(sl_decode_crop_resize(d, bad, rn, SL_COLOR_RGB, &b, 60, 80, SL_INTERP_BILINEAR,
                                    &got));
    ASSERT_EQ(memcmp(got.data, want.data, want.nbytes), 0);
    ASSERT_EQ(d->synth_fallbacks, fb + 1);
    sl_tensor_release(&got);
    /* out-of-order offsets: the table is not used at all */
    memcpy(bad, r, rn);
    bad[toff] = 0xff;
    ASSERT_EQ(sl_ops__jpeg_layout(bad, rn, &L), 1);
    ASSERT_EQ(L.usable, 0);
    ASSERT_OK(sl_decode_crop_resize(d, bad, rn, SL_COLOR_RGB, &b, 60, 80, SL_INTERP_BILINEAR,
                                    &got));
    ASSERT_EQ(memcmp(got.data, want.data, want.nbytes), 0);
    sl_tensor_release(&got);
    /* corrupt entropy data inside the crop's intervals: both paths fail */
    ASSERT_EQ(sl_ops__jpeg_layout(r, rn, &L), 1);
    memcpy(bad, r, rn);
    size_t hit = L.scan + (L.scan_len * 7) / 12;
    for (int i = 0; i < 64; i++)
        if (bad[hit + i] != 0xff && bad[hit + i - 1] != 0xff)
            bad[hit + i] ^= 0x5a;
    sl_tensor plain = {0};
    sl_box wide = {0, 0, 240, 320};
    int rc1 = sl_decode_crop_resize(d, bad, rn, SL_COLOR_RGB, &wide, 24, 32, SL_INTERP_BILINEAR,
                                    &got);
    ASSERT(d->synth_fallbacks > fb);
    /* the same bytes decoded as a file without a table */
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_WARNINGS, SL_WARNINGS_LENIENT));
    int rc2 = sl_decode_crop_resize(d, bad, rn, SL_COLOR_RGB, &wide, 24, 32, SL_INTERP_BILINEAR,
                                    &plain);
    ASSERT_OK(rc2); /* lenient: the ordinary path decodes through it */
    ASSERT_RC(rc1, SL_EDECODE);
    sl_tensor_release(&plain);
    sl_tensor_release(&want);
    free(bad);
    free(r);
    free(j);
    sl_decoder_free(d);
}

/* With EXIF orientation applied, a turned file with a table still takes the
 * whole-image path and equals decode -> crop. */
SL_TEST(ops_jpeg_restart__exif_turned) {
    sl_decoder *d = NULL;
    ASSERT_OK(sl_decoder_create(&d));
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_EXIF_ORIENTATION, 1));
    size_t n, rn;
    uint8_t *j0 = td_picture_jpeg(200, 120, 5, 0, &n);
    /* APP1 Exif, big-endian TIFF, IFD0 with one entry: orientation 6 */
    static const uint8_t app1[] = {0xff, 0xe1, 0x00, 0x22, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0,
                                   42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0,
                                   0, 0, 0, 0, 0};
    uint8_t *j = malloc(n + sizeof app1);
    memcpy(j, j0, 2);
    memcpy(j + 2, app1, sizeof app1);
    memcpy(j + 2 + sizeof app1, j0 + 2, n - 2);
    n += sizeof app1;
    uint8_t *r = restart_of(j, n, SL_JPEG_RESTART_AUTO, &rn);
    sl_tensor full = {0}, a = {0}, want = {0};
    ASSERT_OK(sl_decode(d, r, rn, SL_COLOR_RGB, &full));
    ASSERT_EQ(full.shape[0], 200); /* turned */
    sl_box b = {37, 11, 90, 70};
    uint64_t used = d->synth_used;
    ASSERT_OK(sl_decode_crop_resize(d, r, rn, SL_COLOR_RGB, &b, 90, 70, SL_INTERP_BILINEAR, &a));
    ASSERT_EQ(d->synth_used, used);
    ASSERT_OK(sl_image_crop(&full, &b, &want));
    ASSERT_EQ(memcmp(a.data, want.data, want.nbytes), 0);
    sl_tensor_release(&a);
    sl_tensor_release(&want);
    sl_tensor_release(&full);
    free(r);
    free(j);
    free(j0);
    sl_decoder_free(d);
}
