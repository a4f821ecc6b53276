/* test_decode.c — JPEG/PNG decoding: formats, colour modes, damage, limits, OOM. */
#include "core/core.h"
#include "ops_testdata.h"

static sl_decoder *new_decoder(void) {
    sl_decoder *d = NULL;
    ASSERT_OK(sl_decoder_create(&d));
    return d;
}

SL_TEST(ops_decode__jpeg_rgb_close_to_source) {
    int w = 97, h = 61; /* odd sizes: partial MCUs */
    uint8_t *pix = td_picture(w, h, 1);
    size_t n;
    uint8_t *j = td_jpeg(pix, w, h, TJPF_RGB, TJSAMP_444, 98, 0, &n);
    sl_decoder *d = new_decoder();
    sl_tensor t = {0};
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_RGB, &t));
    ASSERT_EQ(t.ndim, 3);
    ASSERT_EQ(t.shape[0], h);
    ASSERT_EQ(t.shape[1], w);
    ASSERT_EQ(t.shape[2], 3);
    ASSERT_EQ(t.dtype, SL_U8);
    int maxd;
    double mad = td_mad(t.data, pix, (size_t)w * h * 3, &maxd);
    ASSERT(mad < 2.0); /* quality 98, 4:4:4: the codec's own error only */
    sl_image_info info;
    ASSERT_OK(sl_decode_info(d, j, n, &info));
    ASSERT_EQ(info.format, SL_FORMAT_JPEG);
    ASSERT_EQ(info.width, w);
    ASSERT_EQ(info.height, h);
    ASSERT_EQ(info.channels, 3);
    sl_tensor_release(&t);
    sl_decoder_free(d);
    free(j);
    free(pix);
}

SL_TEST(ops_decode__jpeg_gray_cmyk_progressive) {
    int w = 40, h = 33;
    uint8_t *pix = td_picture(w, h, 2);
    uint8_t *gray = malloc((size_t)w * h), *cmyk = malloc((size_t)w * h * 4);
    for (int i = 0; i < w * h; i++) {
        gray[i] = pix[3 * i + 1];
        /* CMYK as TurboJPEG takes it: values straight into the file */
        cmyk[4 * i] = pix[3 * i];
        cmyk[4 * i + 1] = pix[3 * i + 1];
        cmyk[4 * i + 2] = pix[3 * i + 2];
        cmyk[4 * i + 3] = 200;
    }
    sl_decoder *d = new_decoder();
    size_t n;
    /* gray file: RGB output replicates, gray output is the plane */
    uint8_t *j = td_jpeg(gray, w, h, TJPF_GRAY, TJSAMP_GRAY, 100, 0, &n);
    sl_tensor t = {0}, g = {0};
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_RGB, &t));
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_GRAY, &g));
    ASSERT_EQ(g.shape[2], 1);
    for (int i = 0; i < w * h; i++) {
        uint8_t *p = (uint8_t *)t.data + 3 * i;
        ASSERT_EQ(p[0], ((uint8_t *)g.data)[i]);
        ASSERT_EQ(p[1], p[0]);
        ASSERT_EQ(p[2], p[0]);
    }
    ASSERT(td_mad(g.data, gray, (size_t)w * h, NULL) < 1.5);
    sl_tensor_release(&t);
    sl_tensor_release(&g);
    free(j);
    /* CMYK file: RGB = (255-k') - c'(255-k')/255 with PIL's inverted reading,
     * i.e. about c * k / 255 for the stored values c, k */
    j = td_jpeg(cmyk, w, h, TJPF_CMYK, TJSAMP_444, 100, 0, &n);
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_RGB, &t));
    double err = 0;
    for (int i = 0; i < w * h; i++)
        for (int c = 0; c < 3; c++)
            err += fabs(((uint8_t *)t.data)[3 * i + c] - cmyk[4 * i + c] * 200.0 / 255.0);
    ASSERT(err / (w * h * 3) < 2.0);
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_GRAY, &g));
    ASSERT_EQ(g.shape[2], 1);
    sl_tensor_release(&t);
    sl_tensor_release(&g);
    free(j);
    /* progressive: identical pixels to the baseline file of the same data */
    size_t nb;
    uint8_t *jb = td_jpeg(pix, w, h, TJPF_RGB, TJSAMP_420, 85, 0, &nb);
    j = td_jpeg(pix, w, h, TJPF_RGB, TJSAMP_420, 85, TJFLAG_PROGRESSIVE, &n);
    ASSERT(n != nb);
    sl_tensor tb = {0};
    ASSERT_OK(sl_decode(d, jb, nb, SL_COLOR_RGB, &tb));
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_RGB, &t));
    ASSERT_EQ(memcmp(t.data, tb.data, t.nbytes), 0);
    /* the scan cap turns a many-scan file into SL_ELIMIT */
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_MAX_SCANS, 2));
    ASSERT_EQ(sl_decoder_get(d, SL_DECODE_MAX_SCANS), 2);
    sl_tensor t2 = {0};
    ASSERT_RC(sl_decode(d, j, n, SL_COLOR_RGB, &t2), SL_ELIMIT);
    ASSERT_CONTAINS(sl_errmsg(), "scans");
    ASSERT(t2.data == NULL);
    sl_tensor_release(&t);
    sl_tensor_release(&tb);
    free(j);
    free(jb);
    free(gray);
    free(cmyk);
    free(pix);
    sl_decoder_free(d);
}

SL_TEST(ops_decode__png_color_types) {
    sl_decoder *d = new_decoder();
    int w = 5, h = 3;
    uint8_t raw[5 * 3 * 8], plte[4 * 3] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30};
    size_t n;
    sl_tensor t = {0};
    /* palette, 8-bit indices */
    for (int i = 0; i < w * h; i++)
        raw[i] = (uint8_t)(i % 4);
    uint8_t *png = td_png(raw, w, h, 3, 8, plte, 4, &n);
    ASSERT_OK(sl_decode(d, png, n, SL_COLOR_RGB, &t));
    for (int i = 0; i < w * h; i++)
        ASSERT_EQ(memcmp((uint8_t *)t.data + 3 * i, plte + 3 * (i % 4), 3), 0);
    sl_tensor_release(&t);
    free(png);
    /* gray 8-bit: RGB replicates, gray output is exact */
    for (int i = 0; i < w * h; i++)
        raw[i] = (uint8_t)(i * 17);
    png = td_png(raw, w, h, 0, 8, NULL, 0, &n);
    ASSERT_OK(sl_decode(d, png, n, SL_COLOR_GRAY, &t));
    ASSERT_EQ(memcmp(t.data, raw, (size_t)w * h), 0);
    sl_tensor_release(&t);
    ASSERT_OK(sl_decode(d, png, n, SL_COLOR_RGB, &t));
    for (int i = 0; i < w * h; i++)
        ASSERT_EQ(((uint8_t *)t.data)[3 * i + 2], raw[i]);
    sl_tensor_release(&t);
    free(png);
    /* gray + alpha: alpha dropped, not composited */
    for (int i = 0; i < w * h; i++) {
        raw[2 * i] = (uint8_t)(i * 13);
        raw[2 * i + 1] = (uint8_t)(i * 7);
    }
    png = td_png(raw, w, h, 4, 8, NULL, 0, &n);
    ASSERT_OK(sl_decode(d, png, n, SL_COLOR_RGB, &t));
    for (int i = 0; i < w * h; i++)
        ASSERT_EQ(((uint8_t *)t.data)[3 * i], raw[2 * i]);
    sl_tensor_release(&t);
    free(png);
    /* RGBA: alpha dropped */
    for (int i = 0; i < w * h * 4; i++)
        raw[i] = (uint8_t)(i * 11);
    png = td_png(raw, w, h, 6, 8, NULL, 0, &n);
    ASSERT_OK(sl_decode(d, png, n, SL_COLOR_RGB, &t));
    for (int i = 0; i < w * h; i++)
        ASSERT_EQ(memcmp((uint8_t *)t.data + 3 * i, raw + 4 * i, 3), 0);
    sl_tensor_release(&t);
    /* gray output of RGB: PIL's L = (19595 R + 38470 G + 7471 B + 32768) >> 16 */
    ASSERT_OK(sl_decode(d, png, n, SL_COLOR_GRAY, &t));
    for (int i = 0; i < w * h; i++) {
        const uint8_t *p = raw + 4 * i;
        ASSERT_EQ(((uint8_t *)t.data)[i], (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 32768) >> 16);
    }
    sl_tensor_release(&t);
    free(png);
    /* RGB 16-bit: the high byte is kept (PIL's "RGB;16B" reading) */
    uint16_t s16[5 * 3 * 3];
    for (int i = 0; i < w * h * 3; i++)
        s16[i] = (uint16_t)((i * 9) << 8 | 0xff);
    png = td_png((const uint8_t *)s16, w, h, 2, 16, NULL, 0, &n);
    ASSERT_OK(sl_decode(d, png, n, SL_COLOR_RGB, &t));
    for (int i = 0; i < w * h * 3; i++)
        ASSERT_EQ(((uint8_t *)t.data)[i], (i * 9) & 0xff);
    sl_image_info info;
    ASSERT_OK(sl_decode_info(d, png, n, &info));
    ASSERT_EQ(info.format, SL_FORMAT_PNG);
    sl_tensor_release(&t);
    free(png);
    /* Adam7 interlaced RGB */
    for (int i = 0; i < w * h * 3; i++)
        raw[i] = (uint8_t)(i * 7 + 3);
    png = td_png_ex(raw, w, h, 2, 8, NULL, 0, 1, &n);
    ASSERT_EQ(png[28], 1); /* IHDR interlace method: Adam7 */
    ASSERT_OK(sl_decode(d, png, n, SL_COLOR_RGB, &t));
    ASSERT_EQ(memcmp(t.data, raw, (size_t)w * h * 3), 0);
    ASSERT_OK(sl_decode_info(d, png, n, &info));
    ASSERT_EQ(info.width, w);
    ASSERT_EQ(info.height, h);
    sl_tensor_release(&t);
    free(png);
    sl_decoder_free(d);
}

SL_TEST(ops_decode__png_named_jpg_decodes_by_content) {
    uint8_t raw[4 * 4 * 3];
    for (int i = 0; i < 48; i++)
        raw[i] = (uint8_t)(i * 5);
    size_t n;
    uint8_t *png = td_png(raw, 4, 4, 2, 8, NULL, 0, &n);
    char path[512];
    sl_test_path(path, sizeof path, "photo.jpg");
    FILE *f = fopen(path, "wb");
    ASSERT(f && fwrite(png, 1, n, f) == n);
    fclose(f);
    free(png);
    f = fopen(path, "rb");
    uint8_t buf[4096];
    size_t got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ASSERT_EQ(sl_image_sniff(buf, got), SL_FORMAT_PNG);
    sl_decoder *d = new_decoder();
    sl_tensor t = {0};
    ASSERT_OK(sl_decode(d, buf, got, SL_COLOR_RGB, &t));
    ASSERT_EQ(memcmp(t.data, raw, 48), 0);
    sl_tensor_release(&t);
    sl_decoder_free(d);
}

SL_TEST(ops_decode__empty_and_not_an_image) {
    sl_decoder *d = new_decoder();
    sl_tensor t = {0};
    ASSERT_RC(sl_decode(d, "", 0, SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), "empty");
    const char *text = "hello, this is not an image";
    ASSERT_RC(sl_decode(d, text, strlen(text), SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), "not a JPEG, PNG or WebP");
    ASSERT_CONTAINS(sl_errmsg(), "68 65 6c 6c");
    /* JPEG magic and nothing else */
    const uint8_t soi[3] = {0xff, 0xd8, 0xff};
    ASSERT_RC(sl_decode(d, soi, 3, SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT(t.data == NULL);
    ASSERT_RC(sl_decode(d, text, 4, 7, &t), SL_EINVAL);
    sl_decoder_free(d);
}

/* Every truncation of a valid file fails cleanly (an error, never a crash or
 * silently grey pixels), and the decoder still works afterwards. */
static void truncation_sweep(const uint8_t *data, size_t n, int step, size_t harmless_tail) {
    sl_decoder *d = new_decoder();
    for (size_t cut = 0; cut < n - harmless_tail; cut += (size_t)step) {
        sl_tensor t = {0};
        int rc = sl_decode(d, data, cut, SL_COLOR_RGB, &t);
        if (rc != SL_EDECODE)
            sl_test_fail(__FILE__, __LINE__, "cut at %zu of %zu: got %s (%s)", cut, n,
                         sl_status_str(rc), sl_errmsg());
        ASSERT(strncmp(sl_errmsg(), "decode: ", 8) == 0);
        ASSERT(t.data == NULL);
    }
    sl_tensor t = {0};
    ASSERT_OK(sl_decode(d, data, n, SL_COLOR_RGB, &t));
    sl_tensor_release(&t);
    sl_decoder_free(d);
}

SL_TEST(ops_decode__truncated_every_few_bytes) {
    size_t n;
    uint8_t *j = td_picture_jpeg(48, 40, 3, 0, &n);
    truncation_sweep(j, n, 7, 0);
    free(j);
    j = td_picture_jpeg(48, 40, 3, TJFLAG_PROGRESSIVE, &n);
    truncation_sweep(j, n, 11, 0);
    free(j);
    uint8_t *pix = td_picture(20, 12, 4);
    uint8_t *png = td_png(pix, 20, 12, 2, 8, NULL, 0, &n);
    /* libspng does not read IEND's CRC (4 bytes that cover no data) */
    truncation_sweep(png, n, 3, 4);
    free(png);
    free(pix);
}

SL_TEST(ops_decode__corrupt_huffman_data) {
    size_t n;
    uint8_t *j = td_picture_jpeg(64, 64, 5, 0, &n);
    long sos = td_find_marker(j, n, 0xda);
    ASSERT(sos > 0);
    size_t scan = (size_t)sos + 2 + (size_t)((j[sos + 2] << 8) | j[sos + 3]);
    /* a stray marker in the middle of the entropy-coded data */
    size_t mid = scan + (n - scan) / 2;
    j[mid] = 0xff;
    j[mid + 1] = 0xd1;
    sl_decoder *d = new_decoder();
    sl_tensor t = {0};
    ASSERT_RC(sl_decode(d, j, n, SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), "decode: corrupt JPEG data");
    /* garbage Huffman codes: every byte of the scan set to 0xfe */
    free(j);
    j = td_picture_jpeg(64, 64, 5, 0, &n);
    for (size_t i = scan; i + 2 < n; i++)
        j[i] = 0xfe;
    ASSERT_RC(sl_decode(d, j, n, SL_COLOR_RGB, &t), SL_EDECODE);
    ASSERT(t.data == NULL);
    free(j);
    sl_decoder_free(d);
}

SL_TEST(ops_decode__zero_and_oversized_headers) {
    size_t n;
    uint8_t *j = td_picture_jpeg(16, 16, 6, 0, &n);
    long sof = td_find_marker(j, n, 0xc0);
    ASSERT(sof > 0);
    uint8_t *dims = j + sof + 5; /* height(2) width(2), big-endian */
    sl_decoder *d = new_decoder();
    sl_tensor t = {0};
    /* 30000 x 30000 = 900 Mpx > the default 64 Mpx cap */
    dims[0] = 30000 >> 8; dims[1] = 30000 & 0xff; dims[2] = 30000 >> 8; dims[3] = 30000 & 0xff;
    sl__alloc_fail_at(0);
    ASSERT_RC(sl_decode(d, j, n, SL_COLOR_RGB, &t), SL_ELIMIT);
    ASSERT_EQ(sl__alloc_count(), 0); /* refused before any allocation of ours */
    ASSERT_CONTAINS(sl_errmsg(), "30000x30000");
    ASSERT(t.data == NULL);
    sl_box box = {0, 0, 10, 10};
    ASSERT_RC(sl_decode_crop_resize(d, j, n, SL_COLOR_RGB, &box, 8, 8, SL_INTERP_BILINEAR, &t),
              SL_ELIMIT);
    sl_image_info info;
    ASSERT_RC(sl_decode_info(d, j, n, &info), SL_ELIMIT);
    /* zero height */
    dims[0] = 0; dims[1] = 0; dims[2] = 0; dims[3] = 16;
    ASSERT_RC(sl_decode(d, j, n, SL_COLOR_RGB, &t), SL_EDECODE);
    free(j);
    /* a lower cap set by the caller */
    j = td_picture_jpeg(40, 30, 6, 0, &n);
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_MAX_PIXELS, 40 * 30 - 1));
    ASSERT_RC(sl_decode(d, j, n, SL_COLOR_RGB, &t), SL_ELIMIT);
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_MAX_PIXELS, 40 * 30));
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_RGB, &t));
    sl_tensor_release(&t);
    ASSERT_RC(sl_decoder_set(d, SL_DECODE_MAX_PIXELS, 0), SL_EINVAL);
    ASSERT_RC(sl_decoder_set(d, 99, 1), SL_EINVAL);
    ASSERT_OK(sl_decoder_set(d, SL_DECODE_MAX_PIXELS, 64ll << 20));
    free(j);
    /* PNG: 30000 x 30000 and 0 x 4 */
    uint8_t raw[4 * 4 * 3] = {0};
    uint8_t *png = td_png(raw, 4, 4, 2, 8, NULL, 0, &n);
    td_png_set_size(png, 30000, 30000);
    sl__alloc_fail_at(0);
    ASSERT_RC(sl_decode(d, png, n, SL_COLOR_RGB, &t), SL_ELIMIT);
    /* only libspng's small context and chunk buffers, no pixel memory */
    ASSERT(sl__alloc_count() < 16);
    td_png_set_size(png, 0, 4);
    ASSERT_RC(sl_decode(d, png, n, SL_COLOR_RGB, &t), SL_EDECODE);
    free(png);
    sl_decoder_free(d);
}

SL_TEST(ops_decode__preallocated_output_no_alloc) {
    size_t n;
    uint8_t *j = td_picture_jpeg(32, 24, 7, 0, &n);
    sl_decoder *d = new_decoder();
    uint8_t *mem = malloc(32 * 24 * 3);
    sl_tensor t;
    int64_t shape[1] = {32 * 24 * 3};
    sl_tensor_view(&t, mem, SL_U8, 1, shape);
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_GRAY, &t)); /* warm the row scratch */
    sl_tensor_view(&t, mem, SL_U8, 1, shape);
    sl__alloc_fail_at(0);
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_RGB, &t));
    ASSERT_OK(sl_decode(d, j, n, SL_COLOR_GRAY, &t));
    ASSERT_EQ(sl__alloc_count(), 0);
    ASSERT_EQ(t.shape[0], 24);
    ASSERT_EQ(t.shape[2], 1);
    ASSERT(t.data == mem);
    /* too small a destination */
    sl_tensor_view(&t, mem, SL_U8, 1, shape);
    t.nbytes = 100;
    ASSERT_RC(sl_decode(d, j, n, SL_COLOR_RGB, &t), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "destination");
    free(mem);
    free(j);
    sl_decoder_free(d);
}

SL_TEST(ops_decode__oom_loop) {
    size_t nj, np;
    uint8_t *j = td_picture_jpeg(24, 20, 8, 0, &nj);
    uint8_t *pix = td_picture(12, 10, 8);
    uint8_t *png = td_png(pix, 12, 10, 2, 8, NULL, 0, &np);
    sl_box b = {2, 3, 15, 18};
    ASSERT(td_decode_oom(j, nj, NULL, 0, SL_COLOR_GRAY, NULL, 0, 0) > 0);
    ASSERT(td_decode_oom(png, np, NULL, 0, SL_COLOR_GRAY, NULL, 0, 0) > 0);
    ASSERT(td_decode_oom(j, nj, NULL, 0, SL_COLOR_RGB, &b, 7, 9) > 0);
    free(png);
    free(pix);
    free(j);
}

/* libjpeg keeps quantisation and Huffman tables in the decompressor from one
 * image to the next (for abbreviated streams). A decoder reused across
 * untrusted files must not let one file borrow an earlier file's tables: a
 * file without its DQT fails the same on a used decoder as on a fresh one.
 * (Found by fuzz_decode, which checks a shared decoder against a fresh one.) */
SL_TEST(ops_decode__jpeg_tables_do_not_carry_over) {
    size_t n;
    uint8_t *j = td_picture_jpeg(24, 16, 3, 0, &n);
    /* the same file with every DQT segment cut out */
    uint8_t *cut = malloc(n);
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 < n && j[i] == 0xff && j[i + 1] == 0xdb) {
            i += 2 + ((size_t)j[i + 2] << 8 | j[i + 3]);
            continue;
        }
        if (i + 1 < n && j[i] == 0xff && j[i + 1] == 0xda) { /* the scan: copy the rest */
            memcpy(cut + m, j + i, n - i);
            m += n - i;
            break;
        }
        cut[m++] = j[i++];
    }
    ASSERT(m < n);
    ASSERT_EQ(td_find_marker(cut, m, 0xdb), -1);
    sl_decoder *fresh = new_decoder(), *used = new_decoder();
    sl_tensor t = {0};
    int want = sl_decode(fresh, cut, m, SL_COLOR_RGB, &t);
    ASSERT_EQ(want, SL_EDECODE);
    ASSERT_OK(sl_decode(used, j, n, SL_COLOR_RGB, &t));
    sl_tensor_release(&t);
    ASSERT_RC(sl_decode(used, cut, m, SL_COLOR_RGB, &t), want);
    ASSERT_RC(sl_decode_crop_resize(used, cut, m, SL_COLOR_RGB, NULL, 5, 5, SL_INTERP_AREA, &t),
              want);
    sl_image_info info;
    ASSERT_OK(sl_decode_info(used, j, n, &info)); /* the header alone needs no tables */
    ASSERT_OK(sl_decode(used, j, n, SL_COLOR_GRAY, &t));
    sl_tensor_release(&t);
    sl_decoder_free(fresh);
    sl_decoder_free(used);
    free(cut);
    free(j);
}
