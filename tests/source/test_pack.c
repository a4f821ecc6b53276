/*
 * Tests of src/source: packing IDX files and ImageFolders into .slr, read
 * back with the record reader and compared field by field with the inputs.
 * All data is made here: IDX files (plain and gzip) from counters, JPEGs
 * encoded with TurboJPEG from synthetic pixels, PNGs written with zlib.
 */
#include "test.h"
#include "core/core.h"
#include "core/worker.h"
#include "source/source.h"
#include "../record/slr_testutil.h"
#include "tar_build.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stddef.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <webp/encode.h>
#include <zlib.h>

/* ---- helpers ------------------------------------------------------------------ */



static void write_gz(const char *path, const void *data, size_t n) {
    gzFile g = gzopen(path, "wb");
    ASSERT(g);
    if (n)
        ASSERT_EQ(gzwrite(g, data, (unsigned)n), (int)n);
    ASSERT_EQ(gzclose(g), Z_OK);
}

static int exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static void tpath(char *out, const char *name) { sl_test_path(out, 4096, name); }

/* An IDX buffer: magic (0,0,dtype,ndim), big-endian dims, then `body`. */
static uint8_t *idx_bytes(uint8_t dtype, int ndim, const uint32_t *dims, const uint8_t *body,
                          size_t body_n, size_t *n_out) {
    size_t n = 4 + 4 * (size_t)ndim + body_n;
    uint8_t *b = malloc(n);
    ASSERT(b);
    b[0] = 0;
    b[1] = 0;
    b[2] = dtype;
    b[3] = (uint8_t)ndim;
    for (int d = 0; d < ndim; d++) {
        b[4 + 4 * d] = (uint8_t)(dims[d] >> 24);
        b[5 + 4 * d] = (uint8_t)(dims[d] >> 16);
        b[6 + 4 * d] = (uint8_t)(dims[d] >> 8);
        b[7 + 4 * d] = (uint8_t)dims[d];
    }
    if (body_n)
        memcpy(b + 4 + 4 * ndim, body, body_n);
    *n_out = n;
    return b;
}

/* A small MNIST-like pair: n images of rows x cols, pixel = (i*7 + k) & 255,
 * label = (i*3) % 10. `gz` writes them gzip-compressed. */
static void make_idx_pair(const char *img_path, const char *lab_path, uint32_t n, uint32_t rows,
                          uint32_t cols, int gz) {
    size_t items = (size_t)n * rows * cols;
    uint8_t *px = malloc(items + 1), *lb = malloc(n + 1);
    for (size_t k = 0; k < items; k++)
        px[k] = (uint8_t)((k / (rows * cols)) * 7 + k % (rows * cols));
    for (uint32_t i = 0; i < n; i++)
        lb[i] = (uint8_t)((i * 3) % 10);
    uint32_t idims[3] = {n, rows, cols}, ldims[1] = {n};
    size_t in, ln;
    uint8_t *ib = idx_bytes(0x08, 3, idims, px, items, &in);
    uint8_t *lbb = idx_bytes(0x08, 1, ldims, lb, n, &ln);
    if (gz) {
        write_gz(img_path, ib, in);
        write_gz(lab_path, lbb, ln);
    } else {
        sl_test_write_file(img_path, ib, in);
        sl_test_write_file(lab_path, lbb, ln);
    }
    free(px);
    free(lb);
    free(ib);
    free(lbb);
}

static void check_idx_dataset(const char *dst, uint32_t n, uint32_t rows, uint32_t cols) {
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, dst, 0));
    ASSERT_U64_EQ(sl_reader_count(r), n);
    const sl_schema *s = sl_reader_schema(r);
    ASSERT_EQ(sl_schema_ncols(s), 2);
    ASSERT_STR_EQ(sl_schema_name(s, 0), "image");
    ASSERT_EQ(sl_schema_type(s, 0), SL_COL_ARRAY);
    ASSERT_EQ(sl_schema_dtype(s, 0), SL_U8);
    int64_t shape[SL_MAX_DIMS];
    ASSERT_EQ(sl_schema_shape(s, 0, shape), 2);
    ASSERT_EQ(shape[0], rows);
    ASSERT_EQ(shape[1], cols);
    ASSERT_STR_EQ(sl_schema_name(s, 1), "label");
    ASSERT_EQ(sl_schema_type(s, 1), SL_COL_INT64);
    ASSERT(sl_reader_meta(r, "source"));
    ASSERT_STR_EQ(sl_reader_meta(r, "source"), "idx");
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    for (uint32_t i = 0; i < n; i++) {
        ASSERT_OK(sl_reader_read(r, i, rec));
        const sl_tensor *img = sl_record_column(rec, 0), *lab = sl_record_column(rec, 1);
        ASSERT_EQ(img->nbytes, rows * cols);
        ASSERT_EQ(img->ndim, 2);
        const uint8_t *p = img->data;
        for (size_t k = 0; k < (size_t)rows * cols; k++)
            if (p[k] != (uint8_t)(i * 7 + k))
                sl_test_fail(__FILE__, __LINE__, "record %u pixel %zu: %u", i, k, p[k]);
        ASSERT_EQ(*(const int64_t *)lab->data, (i * 3) % 10);
    }
    sl_record_free(rec);
    sl_reader_free(r);
}

static int pack2(const char *a, const char *b, const char *dst, sl_pack_report *rep) {
    const char *srcs[2] = {a, b};
    return sl_pack(srcs, 2, dst, NULL, rep);
}

/* ---- IDX ---------------------------------------------------------------------- */

SL_TEST(source_idx__plain_roundtrip) {
    char img[4096], lab[4096], dst[4096];
    tpath(img, "img-idx3-ubyte");
    tpath(lab, "lab-idx1-ubyte");
    tpath(dst, "out.slr");
    make_idx_pair(img, lab, 37, 5, 4, 0);
    sl_pack_report rep;
    ASSERT_OK(pack2(img, lab, dst, &rep));
    ASSERT_EQ(rep.kind, SL_PACK_IDX);
    ASSERT_U64_EQ(rep.records, 37);
    ASSERT_U64_EQ(rep.bytes, 37 * 20);
    ASSERT_U64_EQ(rep.skipped, 0);
    check_idx_dataset(dst, 37, 5, 4);
}

SL_TEST(source_idx__gzip_either_order) {
    char img[4096], lab[4096], dst[4096];
    tpath(img, "img.gz");
    tpath(lab, "lab.gz");
    tpath(dst, "out.slr");
    /* more than one 64 KiB inflate buffer, labels given first */
    make_idx_pair(img, lab, 300, 16, 16, 1);
    sl_pack_kind kind;
    const char *srcs[2] = {lab, img};
    ASSERT_OK(sl_pack_detect(srcs, 2, &kind));
    ASSERT_EQ(kind, SL_PACK_IDX);
    ASSERT_OK(pack2(lab, img, dst, NULL));
    check_idx_dataset(dst, 300, 16, 16);
}

SL_TEST(source_idx__fashion_mnist) {
    const char *img = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
    const char *lab = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
    if (access(img, R_OK) != 0 || access(lab, R_OK) != 0) {
        printf("    (skipped: Fashion-MNIST not installed)\n");
        return;
    }
    char dst[4096];
    tpath(dst, "fmnist.slr");
    sl_pack_report rep;
    ASSERT_OK(pack2(img, lab, dst, &rep));
    ASSERT_U64_EQ(rep.records, 10000);
    /* Compare every image and label with zlib's own reading of the files. */
    gzFile gi = gzopen(img, "rb"), gl = gzopen(lab, "rb");
    ASSERT(gi && gl);
    uint8_t hi[16], hl[8], px[784], lb;
    ASSERT_EQ(gzread(gi, hi, 16), 16);
    ASSERT_EQ(gzread(gl, hl, 8), 8);
    sl_reader *r;
    sl_record *rec;
    ASSERT_OK(sl_reader_open(&r, dst, 0));
    ASSERT_OK(sl_record_create(&rec));
    int64_t shape[SL_MAX_DIMS];
    ASSERT_EQ(sl_schema_shape(sl_reader_schema(r), 0, shape), 2);
    ASSERT_EQ(shape[0], 28);
    ASSERT_EQ(shape[1], 28);
    int64_t counts[10] = {0};
    for (uint64_t i = 0; i < 10000; i++) {
        ASSERT_EQ(gzread(gi, px, 784), 784);
        ASSERT_EQ(gzread(gl, &lb, 1), 1);
        ASSERT_OK(sl_reader_read(r, i, rec));
        ASSERT_EQ(memcmp(sl_record_column(rec, 0)->data, px, 784), 0);
        int64_t v = *(const int64_t *)sl_record_column(rec, 1)->data;
        ASSERT_EQ(v, lb);
        ASSERT(v >= 0 && v < 10);
        counts[v]++;
    }
    for (int c = 0; c < 10; c++)
        ASSERT_EQ(counts[c], 1000); /* the test set is balanced */
    gzclose(gi);
    gzclose(gl);
    sl_record_free(rec);
    sl_reader_free(r);
}

/* Pack (img, lab) and expect `code` with a message containing `a` and `b`,
 * and nothing at dst. */
static void expect_pack_fail(const char *img, const char *lab, int code, const char *a,
                             const char *b) {
    char dst[4096];
    tpath(dst, "bad.slr");
    sl_pack_report rep;
    ASSERT_RC(pack2(img, lab, dst, &rep), code);
    ASSERT_U64_EQ(rep.records, 0);
    if (a)
        ASSERT_CONTAINS(sl_errmsg(), a);
    if (b)
        ASSERT_CONTAINS(sl_errmsg(), b);
    ASSERT(!exists(dst));
    char partial[4200];
    snprintf(partial, sizeof partial, "%s.partial", dst);
    ASSERT(!exists(partial));
}

SL_TEST(source_idx__plain_truncated_and_extra) {
    char img[4096], lab[4096];
    tpath(img, "img");
    tpath(lab, "lab");
    make_idx_pair(img, lab, 10, 4, 4, 0);
    size_t n;
    uint8_t *d = sl_test_read_file(img, &n);
    sl_test_write_file(img, d, n - 5); /* header says 10 items; the file is 5 bytes short */
    expect_pack_fail(img, lab, SL_ECORRUPT, img, "truncated");
    uint8_t *more = malloc(n + 3);
    memcpy(more, d, n);
    memset(more + n, 0xAB, 3);
    sl_test_write_file(img, more, n + 3);
    expect_pack_fail(img, lab, SL_ECORRUPT, img, "3 extra bytes");
    free(d);
    free(more);
}

SL_TEST(source_idx__gzip_header_disagrees) {
    char img[4096], lab[4096];
    tpath(img, "img.gz");
    tpath(lab, "lab.gz");
    make_idx_pair(img, lab, 10, 4, 4, 0); /* plain first, then rewrite as gz */
    size_t n, ln;
    uint8_t *d = sl_test_read_file(img, &n), *l = sl_test_read_file(lab, &ln);
    write_gz(lab, l, ln);
    /* data for 8 items only: fails at record 8 */
    write_gz(img, d, n - 2 * 16);
    expect_pack_fail(img, lab, SL_ECORRUPT, img, "record 8");
    /* extra bytes after the 10 items */
    uint8_t *more = malloc(n + 16);
    memcpy(more, d, n);
    memset(more + n, 1, 16);
    write_gz(img, more, n + 16);
    expect_pack_fail(img, lab, SL_ECORRUPT, img, "extra bytes");
    free(d);
    free(l);
    free(more);
}

SL_TEST(source_idx__gzip_truncated_and_damaged) {
    char img[4096], lab[4096];
    tpath(img, "img.gz");
    tpath(lab, "lab.gz");
    make_idx_pair(img, lab, 200, 16, 16, 1);
    size_t n;
    uint8_t *d = sl_test_read_file(img, &n);
    sl_test_write_file(img, d, n / 2);
    expect_pack_fail(img, lab, SL_ECORRUPT, img, "truncated");
    /* the gzip trailer's CRC no longer matches */
    uint8_t *bad = malloc(n);
    memcpy(bad, d, n);
    bad[n - 6] ^= 0xFF;
    sl_test_write_file(img, bad, n);
    expect_pack_fail(img, lab, SL_ECORRUPT, img, "damaged gzip");
    /* a byte flipped in the deflate stream */
    memcpy(bad, d, n);
    bad[n / 2] ^= 0x55;
    sl_test_write_file(img, bad, n);
    char dst[4096];
    tpath(dst, "x.slr");
    int rc = pack2(img, lab, dst, NULL);
    ASSERT(rc == SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), img);
    ASSERT(!exists(dst));
    free(d);
    free(bad);
}

SL_TEST(source_idx__count_mismatch) {
    char img[4096], lab[4096], lab2[4096], img2[4096];
    tpath(img, "img");
    tpath(lab, "lab");
    tpath(img2, "img2");
    tpath(lab2, "lab2");
    make_idx_pair(img, lab, 10, 3, 3, 0);
    make_idx_pair(img2, lab2, 11, 3, 3, 0);
    expect_pack_fail(img, lab2, SL_EINVAL, "10 images", "11 labels");
}

SL_TEST(source_idx__bad_magic_dtype_empty) {
    char img[4096], lab[4096], bad[4096];
    tpath(img, "img");
    tpath(lab, "lab");
    tpath(bad, "bad");
    make_idx_pair(img, lab, 4, 2, 2, 0);
    /* float32 IDX images: recognised as IDX, dtype refused by name */
    uint32_t dims[3] = {4, 2, 2};
    uint8_t body[64] = {0};
    size_t n;
    uint8_t *b = idx_bytes(0x0D, 3, dims, body, sizeof body, &n);
    sl_test_write_file(bad, b, n);
    expect_pack_fail(bad, lab, SL_EUNSUPPORTED, bad, "float32");
    free(b);
    /* a wrong magic: not an input kind at all */
    sl_test_write_file(bad, "\x01\x02\x08\x03garbagegarbage", 18);
    expect_pack_fail(img, bad, SL_EUNSUPPORTED, bad, "ImageFolder");
    /* unknown dtype code */
    sl_test_write_file(bad, "\x00\x00\x42\x03\x00\x00\x00\x01", 8);
    expect_pack_fail(img, bad, SL_EUNSUPPORTED, bad, NULL);
    /* empty file */
    sl_test_write_file(bad, "", 0);
    expect_pack_fail(bad, lab, SL_EUNSUPPORTED, bad, "empty");
    /* header cut inside the dims */
    sl_test_write_file(bad, "\x00\x00\x08\x03\x00\x00", 6);
    expect_pack_fail(bad, lab, SL_ECORRUPT, bad, "truncated");
    /* two labels files, or one file alone */
    expect_pack_fail(lab, lab, SL_EINVAL, "one images file", NULL);
    const char *one[1] = {img};
    ASSERT_RC(sl_pack(one, 1, "/nonexistent/x.slr", NULL, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "labels");
}

SL_TEST(source_idx__hostile_headers) {
    char img[4096], lab[4096];
    tpath(img, "img.gz");
    tpath(lab, "lab.gz");
    /* gzip headers claiming 4 billion items over two items of data: fails
     * where the data ends, without allocating for the claimed count */
    uint32_t idims[3] = {0xFFFFFFFFu, 28, 28}, ldims[1] = {0xFFFFFFFFu};
    uint8_t px[2 * 784], lb[2] = {1, 2};
    memset(px, 9, sizeof px);
    size_t n;
    uint8_t *b = idx_bytes(0x08, 3, idims, px, sizeof px, &n);
    write_gz(img, b, n);
    free(b);
    b = idx_bytes(0x08, 1, ldims, lb, 2, &n);
    write_gz(lab, b, n);
    free(b);
    expect_pack_fail(img, lab, SL_ECORRUPT, "record 2", "ends early");
    /* one item of 4 GiB */
    uint32_t big[3] = {1, 65535, 65535};
    b = idx_bytes(0x08, 3, big, NULL, 0, &n);
    write_gz(img, b, n);
    free(b);
    expect_pack_fail(img, lab, SL_ELIMIT, img, "bytes");
    /* a zero dim, too many dims */
    uint32_t zero[3] = {1, 0, 5};
    b = idx_bytes(0x08, 3, zero, NULL, 0, &n);
    write_gz(img, b, n);
    free(b);
    expect_pack_fail(img, lab, SL_ECORRUPT, img, "dim 1 is 0");
    uint32_t many[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    b = idx_bytes(0x08, 12, many, NULL, 0, &n);
    write_gz(img, b, n);
    free(b);
    expect_pack_fail(img, lab, SL_ECORRUPT, img, "12 dims");
}

SL_TEST(source_idx__zero_items) {
    char img[4096], lab[4096], dst[4096];
    tpath(img, "img");
    tpath(lab, "lab");
    tpath(dst, "out.slr");
    make_idx_pair(img, lab, 0, 28, 28, 0);
    sl_pack_report rep;
    ASSERT_OK(pack2(img, lab, dst, &rep));
    ASSERT_U64_EQ(rep.records, 0);
    check_idx_dataset(dst, 0, 28, 28);
}

/* The pair read directly ({"idx": ...}): a memory source over the two files'
 * arrays, kind "idx", named by the images file; reads, reads into rows and
 * the label column's values all give the file's bytes. */
static sl_source *open_idx_direct(const char *img, const char *lab) {
    char json[9000];
    snprintf(json, sizeof json, "{\"idx\": {\"images\": \"%s\", \"labels\": \"%s\"}}", img, lab);
    sl_source *src = NULL;
    int rc = sl_source_open(&src, json);
    return rc == SL_OK ? src : NULL;
}

SL_TEST(source_idx__direct_is_a_memory_source) {
    char img[4096], lab[4096];
    tpath(img, "img-idx3-ubyte.gz");
    tpath(lab, "lab-idx1-ubyte.gz");
    make_idx_pair(img, lab, 41, 3, 5, 1);
    sl_source *src = open_idx_direct(lab, img); /* either order */
    ASSERT(src);
    ASSERT_STR_EQ(sl_source_kind(src), "idx");
    ASSERT_STR_EQ(sl_source_name(src), "img-idx3-ubyte.gz");
    ASSERT_U64_EQ(sl_source_count(src), 41);
    ASSERT(sl_source__reads_memory(src));
    ASSERT(sl_source__has_read_cols(src));
    ASSERT_EQ(src->ncols, 2);
    ASSERT_STR_EQ(src->col[0].name, "image");
    ASSERT_EQ(src->col[0].type, SL_COL_ARRAY);
    ASSERT_EQ(src->col[0].dtype, SL_U8);
    ASSERT_EQ(src->col[0].ndim, 2);
    ASSERT_EQ(src->col[0].shape[0], 3);
    ASSERT_EQ(src->col[0].shape[1], 5);
    ASSERT_EQ(src->col[0].indexed, 0);
    ASSERT_STR_EQ(src->col[1].name, "label");
    ASSERT_EQ(src->col[1].type, SL_COL_INT64);
    ASSERT_EQ(src->col[1].dtype, SL_I64);
    ASSERT_EQ(src->col[1].ndim, 0);
    ASSERT_EQ(src->col[1].indexed, 1);
    const int64_t *vals = NULL;
    ASSERT_OK(sl_source_index_column(src, 1, (const void **)&vals));
    const void *none = NULL;
    ASSERT_RC(sl_source_index_column(src, 0, &none), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "img-idx3-ubyte.gz: column 'image' is not indexed");
    ASSERT_RC(src->vt->index_column(src, 0, &none), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "img-idx3-ubyte.gz: column 0 is not indexed");
    ASSERT(none == NULL);
    sl_source_cursor *cur;
    ASSERT_OK(sl_source__cursor_open(src, NULL, NULL, &cur));
    uint8_t row[15];
    int64_t label;
    void *dst[2] = {row, &label};
    const size_t bytes[2] = {sizeof row, sizeof label};
    for (uint64_t i = 0; i < 41; i++) {
        ASSERT_EQ(vals[i], (int64_t)((i * 3) % 10));
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        ASSERT_OK(sl_source__read(src, cur, i, &smp));
        ASSERT_EQ(smp.ncols, 2);
        ASSERT_EQ(smp.col[0].dtype, SL_U8);
        ASSERT_EQ(smp.col[0].ndim, 2);
        ASSERT_U64_EQ(smp.col[0].nbytes, 15);
        ASSERT_EQ(smp.col[1].dtype, SL_I64);
        ASSERT_EQ(smp.col[1].ndim, 0);
        ASSERT_EQ(*(const int64_t *)smp.col[1].data, vals[i]);
        ASSERT_OK(sl_source__read_cols(src, cur, i, dst, bytes));
        ASSERT_EQ(label, vals[i]);
        for (int k = 0; k < 15; k++) {
            ASSERT_EQ(((const uint8_t *)smp.col[0].data)[k], (uint8_t)(i * 7 + (uint64_t)k));
            ASSERT_EQ(row[k], (uint8_t)(i * 7 + (uint64_t)k));
        }
        sl_sample_clear(&smp);
    }
    sl_source__cursor_free(src, cur);
    /* packed through the source interface, the kind is the pack's "source" */
    char slr[4096];
    tpath(slr, "direct.slr");
    ASSERT_OK(sl_pack_source(src, slr, NULL, NULL));
    sl_source_free(src);
    check_idx_dataset(slr, 41, 3, 5);
}

SL_TEST(source_idx__oom) {
    char img[4096], lab[4096], dst[4096];
    tpath(img, "img.gz");
    tpath(lab, "lab.gz");
    tpath(dst, "out.slr");
    make_idx_pair(img, lab, 20, 4, 4, 1);
    int ok = 0;
    uint64_t n = 1;
    for (; n < 5000 && !ok; n++) {
        sl__alloc_fail_at(n);
        int rc = pack2(img, lab, dst, NULL);
        sl__alloc_fail_at(0);
        if (rc == SL_OK) {
            ok = 1;
            break;
        }
        if (rc != SL_ENOMEM)
            sl_test_fail(__FILE__, __LINE__, "failing allocation %llu: %s (%s)",
                         (unsigned long long)n, sl_status_str(rc), sl_errmsg());
        ASSERT(sl_errmsg()[0] != 0);
        ASSERT(!exists(dst));
    }
    ASSERT(ok);
    ASSERT(n > 10); /* the loop did fail the packer's allocations */
    check_idx_dataset(dst, 20, 4, 4);
    /* The direct open ({"idx": ...}) the same way: out of memory, said, with
     * nothing held (the arrays handed to the memory source included: the
     * sanitizer build checks), until it opens. */
    sl_source *src = NULL;
    for (n = 1; n < 5000 && !src; n++) {
        sl__alloc_fail_at(n);
        src = open_idx_direct(img, lab);
        sl__alloc_fail_at(0);
        if (!src && !strstr(sl_errmsg(), "memory"))
            sl_test_fail(__FILE__, __LINE__, "failing allocation %llu of the open: %s",
                         (unsigned long long)n, sl_errmsg());
    }
    ASSERT(src);
    ASSERT(n > 5);
    const int64_t *vals = NULL;
    ASSERT_OK(sl_source_index_column(src, 1, (const void **)&vals));
    ASSERT_EQ(vals[19], (19 * 3) % 10);
    sl_source_free(src);
}

/* ---- ImageFolder ---------------------------------------------------------------- */

/* A w x h RGB JPEG whose pixels depend on `seed`; caller frees with tjFree. */
static uint8_t *make_jpeg(int w, int h, int seed, unsigned long *size) {
    uint8_t *px = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(x * 4 + seed * 13);
            p[1] = (uint8_t)(y * 4 + seed * 29);
            p[2] = (uint8_t)((x ^ y) + seed);
        }
    tjhandle tj = tjInitCompress();
    ASSERT(tj);
    unsigned char *jpg = NULL;
    *size = 0;
    ASSERT_EQ(tjCompress2(tj, px, w, 0, h, TJPF_RGB, &jpg, size, TJSAMP_420, 85, 0), 0);
    tjDestroy(tj);
    free(px);
    return jpg;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A valid w x h grayscale PNG (signature, IHDR, one IDAT, IEND). */
static uint8_t *make_png(int w, int h, size_t *size) {
    size_t raw_n = (size_t)(w + 1) * h;
    uint8_t *raw = calloc(raw_n, 1);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            raw[(size_t)y * (w + 1) + 1 + x] = (uint8_t)(x * y);
    uLongf zn = compressBound(raw_n);
    uint8_t *z = malloc(zn);
    ASSERT_EQ(compress(z, &zn, raw, raw_n), Z_OK);
    size_t n = 8 + 25 + 12 + zn + 12;
    uint8_t *p = malloc(n), *q = p;
    memcpy(q, "\x89PNG\r\n\x1a\n", 8);
    q += 8;
    uint8_t ihdr[13];
    put_be32(ihdr, (uint32_t)w);
    put_be32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 0;  /* grayscale */
    ihdr[10] = ihdr[11] = ihdr[12] = 0;
    struct { const char *type; const uint8_t *data; size_t n; } chunks[3] = {
        {"IHDR", ihdr, 13}, {"IDAT", z, zn}, {"IEND", NULL, 0}};
    for (int c = 0; c < 3; c++) {
        put_be32(q, (uint32_t)chunks[c].n);
        memcpy(q + 4, chunks[c].type, 4);
        if (chunks[c].n)
            memcpy(q + 8, chunks[c].data, chunks[c].n);
        put_be32(q + 8 + chunks[c].n, (uint32_t)crc32(0, q + 4, (uInt)(4 + chunks[c].n)));
        q += 12 + chunks[c].n;
    }
    *size = (size_t)(q - p);
    free(raw);
    free(z);
    return p;
}

static void mkdirs(const char *rel) {
    char p[4096], tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", rel);
    for (char *s = tmp; *s; s++) {
        if (*s == '/') {
            *s = 0;
            tpath(p, tmp);
            mkdir(p, 0755);
            *s = '/';
        }
    }
    tpath(p, tmp);
    mkdir(p, 0755);
}

/* Write a JPEG at tmpdir/rel (directories made as needed). */
static void put_jpeg(const char *rel, int seed) {
    char dir[4096], p[4096];
    snprintf(dir, sizeof dir, "%s", rel);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        mkdirs(dir);
    }
    unsigned long n;
    uint8_t *j = make_jpeg(24 + seed % 5, 16 + seed % 3, seed, &n);
    tpath(p, rel);
    sl_test_write_file(p, j, n);
    tjFree(j);
}

static void put_text(const char *rel, const char *text) {
    char p[4096];
    tpath(p, rel);
    sl_test_write_file(p, text, strlen(text));
}

typedef struct {
    const char *rel;   /* relative to root */
    int label;
} expect_rec;

/* Read dst back and compare every record with the files under root. */
static void check_folder(const char *root, const char *dst, const expect_rec *want, size_t n,
                         const char *classes_json) {
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, dst, 0));
    ASSERT_U64_EQ(sl_reader_count(r), n);
    const sl_schema *s = sl_reader_schema(r);
    ASSERT_EQ(sl_schema_ncols(s), 3);
    ASSERT_STR_EQ(sl_schema_name(s, 0), "image");
    ASSERT_EQ(sl_schema_type(s, 0), SL_COL_BYTES);
    ASSERT_STR_EQ(sl_schema_name(s, 1), "label");
    ASSERT_EQ(sl_schema_type(s, 1), SL_COL_INT64);
    ASSERT_STR_EQ(sl_schema_name(s, 2), "path");
    ASSERT_EQ(sl_schema_type(s, 2), SL_COL_STRING);
    ASSERT(sl_reader_meta(r, "classes"));
    ASSERT_STR_EQ(sl_reader_meta(r, "classes"), classes_json);
    ASSERT_STR_EQ(sl_reader_meta(r, "source"), "imagefolder");
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    for (size_t i = 0; i < n; i++) {
        ASSERT_OK(sl_reader_read(r, i, rec));
        const sl_tensor *img = sl_record_column(rec, 0), *lab = sl_record_column(rec, 1),
                        *path = sl_record_column(rec, 2);
        if (path->nbytes != strlen(want[i].rel) || memcmp(path->data, want[i].rel, path->nbytes))
            sl_test_fail(__FILE__, __LINE__, "record %zu: path '%.*s', want '%s'", i,
                         (int)path->nbytes, (const char *)path->data, want[i].rel);
        ASSERT_EQ(*(const int64_t *)lab->data, want[i].label);
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", root, want[i].rel);
        size_t fn;
        uint8_t *fd = sl_test_read_file(full, &fn);
        ASSERT_EQ(img->nbytes, fn);
        ASSERT_EQ(memcmp(img->data, fd, fn), 0);
        free(fd);
    }
    sl_record_free(rec);
    sl_reader_free(r);
}

static int pack_dir(const char *root, const char *dst, const sl_pack_options *o,
                    sl_pack_report *rep) {
    const char *srcs[1] = {root};
    return sl_pack(srcs, 1, dst, o, rep);
}

SL_TEST(source_imagefolder__roundtrip_and_order) {
    char root[4096], dst[4096];
    tpath(root, "root");
    tpath(dst, "out.slr");
    /* classes sorted by name: "a_cat" (0), "b dog" (1), "c\"q" (2) */
    put_jpeg("root/b dog/2.jpg", 1);
    put_jpeg("root/b dog/10.JPG", 2);
    put_jpeg("root/a_cat/z.jpeg", 3);
    put_jpeg("root/a_cat/sub/x.jpg", 4); /* os.walk: "a_cat" before "a_cat/sub" */
    put_jpeg("root/a_cat/sub-b/y.jpg", 5); /* "a_cat/sub" is a prefix: before "a_cat/sub-b" */
    put_jpeg("root/a_cat/sub/deep/w.jpg", 7); /* '-' < '/': "a_cat/sub-b" first */
    put_jpeg("root/c\"q/only.webp.jpg", 6);
    put_text("root/a_cat/notes.txt", "not an image, ignored by name");
    put_text("root/README", "top-level files are not classes");
    size_t pn;
    uint8_t *png = make_png(9, 7, &pn);
    char p[4096];
    tpath(p, "root/b dog/png-named.jpg"); /* a PNG named .jpg: accepted by content */
    sl_test_write_file(p, png, pn);
    free(png);

    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.jobs = 1;
    sl_pack_report rep;
    ASSERT_OK(pack_dir(root, dst, &o, &rep));
    ASSERT_EQ(rep.kind, SL_PACK_IMAGEFOLDER);
    ASSERT_U64_EQ(rep.records, 8);
    ASSERT_EQ(rep.nclasses, 3);
    ASSERT_U64_EQ(rep.skipped, 0);
    expect_rec want[] = {
        {"a_cat/z.jpeg", 0},      {"a_cat/sub/x.jpg", 0}, {"a_cat/sub-b/y.jpg", 0},
        {"a_cat/sub/deep/w.jpg", 0},
        {"b dog/10.JPG", 1},      {"b dog/2.jpg", 1},     {"b dog/png-named.jpg", 1},
        {"c\"q/only.webp.jpg", 2},
    };
    check_folder(root, dst, want, 8, "[\"a_cat\",\"b dog\",\"c\\\"q\"]");

    /* a trailing slash on the root changes nothing */
    char root2[4200], dst2[4096];
    snprintf(root2, sizeof root2, "%s/", root);
    tpath(dst2, "out2.slr");
    ASSERT_OK(pack_dir(root2, dst2, NULL, NULL));
    check_folder(root, dst2, want, 8, "[\"a_cat\",\"b dog\",\"c\\\"q\"]");
}

SL_TEST(source_imagefolder__non_image_stops_or_skips) {
    char root[4096], dst[4096], bad[4096];
    tpath(root, "root");
    tpath(dst, "out.slr");
    put_jpeg("root/a/1.jpg", 1);
    put_jpeg("root/a/3.jpg", 3);
    put_text("root/a/2.jpg", "this is text, not a JPEG");
    put_jpeg("root/b/1.png", 4); /* a JPEG named .png: fine */
    put_text("root/b/empty.png", "");
    tpath(bad, "root/a/2.jpg");
    for (int jobs = 1; jobs <= 3; jobs += 2) {
        sl_pack_options o = SL_PACK_OPTIONS_INIT;
        o.jobs = jobs;
        sl_pack_report rep;
        ASSERT_RC(pack_dir(root, dst, &o, &rep), SL_EDECODE);
        /* the first bad file in record order, whatever the thread count */
        ASSERT_CONTAINS(sl_errmsg(), bad);
        ASSERT_CONTAINS(sl_errmsg(), "not an image");
        ASSERT(!exists(dst));
        o.skip_bad = 1;
        ASSERT_OK(pack_dir(root, dst, &o, &rep));
        ASSERT_U64_EQ(rep.records, 3);
        ASSERT_U64_EQ(rep.skipped, 2);
        ASSERT_EQ(rep.nbad, 2);
        ASSERT_CONTAINS(rep.bad[0], "a/2.jpg");
        ASSERT_CONTAINS(rep.bad[1], "b/empty.png");
        ASSERT_CONTAINS(rep.bad[1], "empty");
        expect_rec want[] = {{"a/1.jpg", 0}, {"a/3.jpg", 0}, {"b/1.png", 1}};
        check_folder(root, dst, want, 3, "[\"a\",\"b\"]");
        ASSERT_EQ(unlink(dst), 0);
    }
}

SL_TEST(source_imagefolder__unreadable_files) {
    char root[4096], dst[4096], link[4096];
    tpath(root, "root");
    tpath(dst, "out.slr");
    put_jpeg("root/a/1.jpg", 1);
    put_jpeg("root/a/2.jpg", 2);
    tpath(link, "root/a/0-dangling.jpg");
    ASSERT_EQ(symlink("/nonexistent/sluice/file.jpg", link), 0);
    ASSERT_RC(pack_dir(root, dst, NULL, NULL), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), link);
    ASSERT(!exists(dst));
    if (geteuid() != 0) {
        /* permissions only block reads for a non-root user */
        ASSERT_EQ(unlink(link), 0);
        char p[4096];
        tpath(p, "root/a/2.jpg");
        ASSERT_EQ(chmod(p, 0), 0);
        ASSERT_RC(pack_dir(root, dst, NULL, NULL), SL_EIO);
        ASSERT_CONTAINS(sl_errmsg(), p);
        ASSERT_CONTAINS(sl_errmsg(), "ermission");
        ASSERT_EQ(chmod(p, 0644), 0);
        ASSERT_EQ(symlink("/nonexistent/sluice/file.jpg", link), 0);
    }
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.skip_bad = 1;
    sl_pack_report rep;
    ASSERT_OK(pack_dir(root, dst, &o, &rep));
    ASSERT_U64_EQ(rep.records, 2);
    ASSERT_U64_EQ(rep.skipped, 1);
    ASSERT_CONTAINS(rep.bad[0], "0-dangling.jpg");
}

SL_TEST(source_imagefolder__empty_class_no_classes) {
    char root[4096], dst[4096];
    tpath(root, "root");
    tpath(dst, "out.slr");
    mkdirs("root");
    ASSERT_RC(pack_dir(root, dst, NULL, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "no class directories");
    put_text("root/loose.jpg", "files at the top are not classes");
    ASSERT_RC(pack_dir(root, dst, NULL, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "no class directories");
    put_jpeg("root/a/1.jpg", 1);
    mkdirs("root/b/deeper");
    put_text("root/b/deeper/readme.txt", "no images here");
    ASSERT_RC(pack_dir(root, dst, NULL, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "class 'b' has no image files");
    ASSERT(!exists(dst));
    /* every file skipped: an error, not an empty dataset */
    char p[4096];
    tpath(p, "root/b");
    put_text("root/b/x.jpg", "bad");
    put_text("root/a/1.jpg", "bad too");
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.skip_bad = 1;
    ASSERT_RC(pack_dir(root, dst, &o, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "skipped");
    ASSERT(!exists(dst));
}

SL_TEST(source_imagefolder__symlink_loop) {
    char root[4096], dst[4096], link[4096];
    tpath(root, "root");
    tpath(dst, "out.slr");
    put_jpeg("root/a/1.jpg", 1);
    put_jpeg("root/a/in/2.jpg", 2);
    tpath(link, "root/a/in/loop");
    ASSERT_EQ(symlink("..", link), 0); /* root/a/in/loop -> root/a */
    sl_pack_report rep;
    ASSERT_OK(pack_dir(root, dst, NULL, &rep));
    /* the loop is not followed back into its ancestor */
    ASSERT_U64_EQ(rep.records, 2);
}

SL_TEST(source_imagefolder__oom) {
    char root[4096], dst[4096];
    tpath(root, "root");
    tpath(dst, "out.slr");
    put_jpeg("root/a/1.jpg", 1);
    put_jpeg("root/a/sub/2.jpg", 2);
    put_jpeg("root/b/3.jpg", 3);
    /* one reader: the allocation seam counts process-wide, so the N-th
     * allocation must be the same one on every run */
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.jobs = 1;
    int ok = 0;
    uint64_t n = 1;
    for (; n < 5000 && !ok; n++) {
        sl__alloc_fail_at(n);
        int rc = pack_dir(root, dst, &o, NULL);
        sl__alloc_fail_at(0);
        if (rc == SL_OK) {
            ok = 1;
            break;
        }
        if (rc != SL_ENOMEM)
            sl_test_fail(__FILE__, __LINE__, "failing allocation %llu: %s (%s)",
                         (unsigned long long)n, sl_status_str(rc), sl_errmsg());
        ASSERT(sl_errmsg()[0] != 0);
        ASSERT(!exists(dst));
    }
    ASSERT(ok);
    ASSERT(n > 10);
    expect_rec want[] = {{"a/1.jpg", 0}, {"a/sub/2.jpg", 0}, {"b/3.jpg", 1}};
    check_folder(root, dst, want, 3, "[\"a\",\"b\"]");
}

/* ---- sl_pack as a whole ----------------------------------------------------------- */

static void make_folder(int classes, int per_class) {
    for (int c = 0; c < classes; c++)
        for (int i = 0; i < per_class; i++) {
            char rel[256];
            snprintf(rel, sizeof rel, "root/class%02d/%s/img%03d.jpg", c, i % 3 ? "x" : "y", i);
            put_jpeg(rel, c * 100 + i);
        }
}

SL_TEST(source_pack__deterministic_across_jobs) {
    char root[4096], d1[4096], d4[4096];
    tpath(root, "root");
    tpath(d1, "j1.slr");
    tpath(d4, "j4.slr");
    make_folder(4, 25);
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.jobs = 1;
    sl_pack_report r1, r4;
    ASSERT_OK(pack_dir(root, d1, &o, &r1));
    o.jobs = 4;
    ASSERT_OK(pack_dir(root, d4, &o, &r4));
    ASSERT_U64_EQ(r1.records, 100);
    ASSERT_U64_EQ(r4.records, 100);
    ASSERT_U64_EQ(r1.bytes, r4.bytes);
    size_t n1, n4;
    uint8_t *b1 = sl_test_read_file(d1, &n1), *b4 = sl_test_read_file(d4, &n4);
    ASSERT_EQ(n1, n4);
    ASSERT_EQ(memcmp(b1, b4, n1), 0);
    free(b1);
    free(b4);
}

typedef struct {
    uint64_t calls, last_done, last_total, last_bytes;
    int monotonic;
} progress_log;

static void log_progress(uint64_t done, uint64_t total, uint64_t bytes, void *user) {
    progress_log *l = user;
    if (done < l->last_done || bytes < l->last_bytes)
        l->monotonic = 0;
    l->calls++;
    l->last_done = done;
    l->last_total = total;
    l->last_bytes = bytes;
}

SL_TEST(source_pack__progress_and_shards) {
    char root[4096], dst[4096];
    tpath(root, "root");
    tpath(dst, "out.slr");
    make_folder(2, 10);
    progress_log log = {0, 0, 0, 0, 1};
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.jobs = 2;
    o.progress = log_progress;
    o.user = &log;
    o.shard_bytes = 4096; /* several shards for 20 small JPEGs */
    sl_pack_report rep;
    ASSERT_OK(pack_dir(root, dst, &o, &rep));
    ASSERT_U64_EQ(log.calls, 20);
    ASSERT_U64_EQ(log.last_done, 20);
    ASSERT_U64_EQ(log.last_total, 20);
    ASSERT_U64_EQ(log.last_bytes, rep.bytes);
    ASSERT(log.monotonic);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, dst, 0));
    ASSERT_U64_EQ(sl_reader_count(r), 20);
    ASSERT(sl_reader_shard_count(r) > 1);
    ASSERT_OK(sl_reader_verify(r, 0, NULL, NULL, NULL));
    sl_reader_free(r);
}

SL_TEST(source_pack__bad_arguments_and_kinds) {
    char txt[4096], dst[4096], d1[4096], d2[4096];
    tpath(txt, "notes.txt");
    tpath(dst, "out.slr");
    tpath(d1, "d1");
    tpath(d2, "d2");
    put_text("notes.txt", "hello");
    const char *one[1] = {txt};
    ASSERT_RC(sl_pack(one, 1, dst, NULL, NULL), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), txt);
    ASSERT_CONTAINS(sl_errmsg(), "ImageFolder");
    const char *missing[1] = {"/nonexistent/sluice-input"};
    ASSERT_RC(sl_pack(missing, 1, dst, NULL, NULL), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "/nonexistent/sluice-input");
    mkdirs("d1");
    mkdirs("d2");
    const char *two[2] = {d1, d2};
    ASSERT_RC(sl_pack(two, 2, dst, NULL, NULL), SL_EUNSUPPORTED);
    ASSERT_RC(sl_pack(NULL, 0, dst, NULL, NULL), SL_EINVAL);
    ASSERT_RC(sl_pack(one, 1, NULL, NULL, NULL), SL_EINVAL);
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.version = 99;
    ASSERT_RC(sl_pack(one, 1, dst, &o, NULL), SL_EUNSUPPORTED);
    o.version = SL_PACK_OPTIONS_VERSION;
    o.jobs = -1;
    ASSERT_RC(sl_pack(one, 1, dst, &o, NULL), SL_EINVAL);
    ASSERT_STR_EQ(sl_pack_kind_name(SL_PACK_IDX), "idx");
    ASSERT_STR_EQ(sl_pack_kind_name(SL_PACK_IMAGEFOLDER), "imagefolder");
    ASSERT_STR_EQ(sl_pack_kind_name((sl_pack_kind)42), "unknown");
    ASSERT(!exists(dst));
}

/* Damage in a second gzip member: the message counts the bytes of every
 * member before it, not only of the member being inflated. */
SL_TEST(source_idx__gzip_members_damage_offset) {
    enum { N = 400, R = 8, C = 8 };
    uint8_t *px = malloc(N * R * C);
    for (size_t k = 0; k < N * R * C; k++)
        px[k] = (uint8_t)(sl_mix64(k) & 0xff); /* incompressible: damage lands in data */
    uint32_t dims[3] = {N, R, C};
    size_t n;
    uint8_t *raw = idx_bytes(0x08, 3, dims, px, N * R * C, &n);
    char a[4096], b[4096], img[4096], lab[4096], dummy[4096];
    tpath(a, "a.gz");
    tpath(b, "b.gz");
    tpath(img, "img.gz");
    tpath(lab, "lab");
    tpath(dummy, "dummy");
    size_t first = 20000; /* the second member is the smaller: its own count stays below this */
    write_gz(a, raw, first);
    write_gz(b, raw + first, n - first);
    size_t na, nb;
    uint8_t *ga = sl_test_read_file(a, &na), *gb = sl_test_read_file(b, &nb);
    uint8_t *cat = malloc(na + nb);
    memcpy(cat, ga, na);
    memcpy(cat + na, gb, nb);
    cat[na + nb / 2] ^= 0x55; /* inside the second member's deflate data */
    sl_test_write_file(img, cat, na + nb);
    make_idx_pair(dummy, lab, N, R, C, 0);
    char dst[4096];
    tpath(dst, "x.slr");
    ASSERT_RC(pack2(img, lab, dst, NULL), SL_ECORRUPT);
    const char *msg = sl_errmsg(), *after = strstr(msg, "after ");
    ASSERT(after != NULL);
    unsigned long long off = strtoull(after + 6, NULL, 10);
    if (off < first)
        sl_test_fail(__FILE__, __LINE__, "offset %llu counts only the second member (%s)", off, msg);
    ASSERT(!exists(dst));
    free(px);
    free(raw);
    free(ga);
    free(gb);
    free(cat);
}

/* Class names are stored as JSON metadata: UTF-8 names round-trip, other
 * byte strings are refused with a message saying what to do. */
SL_TEST(source_imagefolder__class_names_utf8) {
    char root[4096], dst[4096];
    tpath(root, "root");
    tpath(dst, "ok.slr");
    put_jpeg("root/caf\xc3\xa9/1.jpg", 1);
    put_jpeg("root/\xe7\x8c\xab/1.jpg", 2);
    ASSERT_OK(pack_dir(root, dst, NULL, NULL));
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, dst, 0));
    ASSERT_STR_EQ(sl_reader_meta(r, "classes"), "[\"caf\xc3\xa9\",\"\xe7\x8c\xab\"]");
    sl_reader_free(r);
    put_jpeg("root/bad\xff/1.jpg", 3);
    tpath(dst, "bad.slr");
    ASSERT_RC(pack_dir(root, dst, NULL, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "not valid UTF-8");
    ASSERT(!exists(dst));

}

/* ---- bad neighbours: one bad file must never cost a good one -------------------- */

/* A lossless WebP of a pattern, made with libwebp (caller frees). */
static uint8_t *make_webp(int w, int h, int seed, size_t *size) {
    uint8_t *px = malloc((size_t)w * h * 3), *enc = NULL;
    for (int i = 0; i < w * h; i++) {
        px[3 * i] = (uint8_t)(i * 3 + seed);
        px[3 * i + 1] = (uint8_t)(i / w * 5);
        px[3 * i + 2] = (uint8_t)(seed * 11);
    }
    size_t n = WebPEncodeLosslessRGB(px, w, h, w * 3, &enc);
    ASSERT(n > 0);
    uint8_t *out = malloc(n);
    memcpy(out, enc, n);
    WebPFree(enc);
    free(px);
    *size = n;
    return out;
}

/* A lossy WebP (its body can be cut with the header intact). */
static uint8_t *make_lossy_webp(int w, int h, size_t *size) {
    uint8_t *px = malloc((size_t)w * h * 3), *enc = NULL;
    for (int i = 0; i < w * h * 3; i++)
        px[i] = (uint8_t)(i * 7 ^ i >> 5);
    size_t n = WebPEncodeRGB(px, w, h, w * 3, 80, &enc);
    ASSERT(n > 0);
    uint8_t *out = malloc(n);
    memcpy(out, enc, n);
    WebPFree(enc);
    free(px);
    *size = n;
    return out;
}

static long find_marker(const uint8_t *j, size_t n, uint8_t m) {
    for (size_t i = 2; i + 1 < n; i++)
        if (j[i] == 0xff && j[i + 1] == m)
            return (long)i;
    return -1;
}

/* Every kind of bad file a real folder has been seen to hold. The first
 * group fails the header check; the second has a good header and damaged
 * pixel data, so only SL_PACK_CHECK_DECODE catches it. */
typedef struct {
    const char *name;   /* file name suffix */
    const char *cause;  /* expected in the message */
    int body_only;      /* header fine, pixels damaged */
} bad_kind;

static const bad_kind bad_kinds[] = {
    {"zero-height.jpg", "empty JPEG image", 0},
    {"zero-width.jpg", "empty JPEG image", 0},
    {"dnl.jpg", "DNL not supported", 0},
    {"cut-header.jpg", "decode: ", 0},
    {"bogus-length.jpg", "ogus marker length", 0},
    {"garbage.jpg", "not an image", 0},
    {"empty.jpg", "empty file", 0},
    {"text.png", "not an image", 0},
    {"photo.bmp", "BMP images are not supported by decode", 0},
    {"damaged.png", "png", 0},
    {"damaged.webp", "webp", 0},
    {"bad-crc.png", "decode: png: ", 0},
    {"cut-body.jpg", "JPEG", 1},
    {"cut-body.png", "png", 1},
    {"cut-body.webp", "webp", 1},
};
#define NBAD_KINDS (sizeof bad_kinds / sizeof bad_kinds[0])

/* The bytes of bad kind k. */
static uint8_t *make_bad(size_t k, size_t *size) {
    unsigned long jn;
    uint8_t *j = make_jpeg(40, 30, (int)k, &jn);
    size_t n = jn;
    uint8_t *b = malloc(jn + 64);
    memcpy(b, j, jn);
    tjFree(j);
    long sof = find_marker(b, n, 0xc0), dqt = find_marker(b, n, 0xdb);
    ASSERT(sof > 0 && dqt > 0);
    const char *name = bad_kinds[k].name;
    if (!strcmp(name, "zero-height.jpg")) {
        b[sof + 5] = b[sof + 6] = 0;
    } else if (!strcmp(name, "zero-width.jpg")) {
        b[sof + 7] = b[sof + 8] = 0;
    } else if (!strcmp(name, "dnl.jpg")) {
        /* height 0 in the frame header, the real height in a DNL segment
         * after the scan (legal JPEG; libjpeg does not support it) */
        b[sof + 5] = b[sof + 6] = 0;
        memmove(b + n - 2 + 6, b + n - 2, 2);
        const uint8_t dnl[6] = {0xff, 0xdc, 0, 4, 0, 30};
        memcpy(b + n - 2, dnl, 6);
        n += 6;
    } else if (!strcmp(name, "cut-header.jpg")) {
        n = (size_t)sof + 6;
    } else if (!strcmp(name, "bogus-length.jpg")) {
        b[dqt + 2] = 0;
        b[dqt + 3] = 1;
    } else if (!strcmp(name, "garbage.jpg")) {
        for (size_t i = 0; i < n; i++)
            b[i] = (uint8_t)(i * 131 + 17);
    } else if (!strcmp(name, "empty.jpg")) {
        n = 0;
    } else if (!strcmp(name, "text.png")) {
        n = (size_t)sprintf((char *)b, "just some notes, not a picture\n");
    } else if (!strcmp(name, "photo.bmp")) {
        /* a valid 2x2 24-bit BMP: PIL opens it, the decode op does not */
        static const uint8_t bmp[70] = {
            'B', 'M', 70, 0, 0, 0, 0, 0, 0, 0, 54, 0, 0, 0, 40, 0, 0, 0, 2, 0, 0, 0, 2, 0,
            0, 0, 1, 0, 24, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0x13, 0x0b, 0, 0, 0x13, 0x0b, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 0, 0, 255, 255, 255, 255, 0, 0};
        memcpy(b, bmp, sizeof bmp);
        n = sizeof bmp;
    } else if (!strcmp(name, "damaged.png") || !strcmp(name, "cut-body.png")) {
        size_t pn;
        uint8_t *png = make_png(33, 21, &pn);
        free(b);
        b = png;
        if (name[0] == 'd')
            put_be32(b + 16, 0); /* width 0 ... */
        if (name[0] == 'd')
            put_be32(b + 29, (uint32_t)crc32(0, b + 12, 17)); /* ... with a valid CRC */
        n = name[0] == 'd' ? pn : pn - 20; /* cut inside the image data */
    } else if (!strcmp(name, "bad-crc.png")) {
        size_t pn;
        uint8_t *png = make_png(33, 21, &pn);
        free(b);
        b = png;
        n = pn;
        b[23] ^= 0x01; /* the height, the CRC left as it was */
    } else if (!strcmp(name, "damaged.webp") || !strcmp(name, "cut-body.webp")) {
        size_t wn;
        uint8_t *w = make_lossy_webp(48, 40, &wn);
        free(b);
        b = w;
        n = name[0] == 'd' ? 24 : wn - wn / 3;
    } else if (!strcmp(name, "cut-body.jpg")) {
        long sos = find_marker(b, n, 0xda);
        ASSERT(sos > 0);
        n = (size_t)sos + (n - (size_t)sos) / 2; /* inside the entropy-coded data */
    }
    *size = n;
    return b;
}

/* ROOT/a/ and ROOT/b/: ngood good images (JPEG, with a PNG and a WebP among
 * them, and real photos when the machine has some), each followed in name
 * order by a bad file of the next kind. Fills good[] (relative paths, in
 * record order) with the good files and the body-only bad ones separately. */
static void make_bad_neighbour_folder(int ngood, char (*good)[64], int *ngood_out,
                                      char (*body_bad)[64], int *nbody_out) {
    int g = 0, nb = 0;
    static const char *photos[] = {"/usr/share/backgrounds/mate/nature/FreshFlower.jpg",
                                   "/usr/share/backgrounds/mate/nature/GreenMeadow.jpg"};
    mkdirs("root/a");
    mkdirs("root/b");
    for (int i = 0; i < ngood; i++) {
        char rel[64], p[4096];
        const char *cls = i < ngood / 2 ? "a" : "b";
        int photo = i == 3 || i == ngood - 2;
        const char *ext = i % 10 == 4 ? "png" : i % 10 == 7 ? "webp" : "jpg";
        snprintf(rel, sizeof rel, "%s/%03d-good.%s", cls, i, ext);
        tpath(p, "root");
        strcat(p, "/");
        strcat(p, rel);
        if (photo && access(photos[i == 3 ? 0 : 1], R_OK) == 0) {
            size_t n;
            uint8_t *d = sl_test_read_file(photos[i == 3 ? 0 : 1], &n);
            sl_test_write_file(p, d, n);
            free(d);
        } else if (!strcmp(ext, "png")) {
            size_t n;
            uint8_t *d = make_png(20 + i, 10 + i % 7, &n);
            sl_test_write_file(p, d, n);
            free(d);
        } else if (!strcmp(ext, "webp")) {
            size_t n;
            uint8_t *d = make_webp(17 + i, 9 + i % 5, i, &n);
            sl_test_write_file(p, d, n);
            free(d);
        } else {
            unsigned long n;
            uint8_t *d = make_jpeg(64 + i % 9, 48 + i % 5, i, &n);
            sl_test_write_file(p, d, n);
            tjFree(d);
        }
        snprintf(good[g++], 64, "%s", rel);
        /* the bad neighbour, right after it in record order */
        size_t k = (size_t)i % NBAD_KINDS, n;
        snprintf(rel, sizeof rel, "%s/%03d-x-%s", cls, i, bad_kinds[k].name);
        tpath(p, "root");
        strcat(p, "/");
        strcat(p, rel);
        uint8_t *d = make_bad(k, &n);
        sl_test_write_file(p, d, n);
        free(d);
        if (bad_kinds[k].body_only)
            snprintf(body_bad[nb++], 64, "%s", rel);
    }
    *ngood_out = g;
    *nbody_out = nb;
}

/* Read dst back: exactly the files named in want (in order), bytes equal. */
static void check_kept(const char *root, const char *dst, char (*want)[64], int n) {
    expect_rec *e = calloc((size_t)n, sizeof *e);
    for (int i = 0; i < n; i++) {
        e[i].rel = want[i];
        e[i].label = want[i][0] == 'a' ? 0 : 1;
    }
    check_folder(root, dst, e, (size_t)n, "[\"a\",\"b\"]");
    free(e);
}

static int cmp_rel(const void *a, const void *b) { return strcmp(a, b); }

SL_TEST(source_pack__bad_neighbours_keep_every_good_file) {
    enum { NGOOD = 60 };
    static char good[NGOOD][64], body_bad[NGOOD][64], kept[2 * NGOOD][64];
    int ngood, nbody;
    char root[4096], dst[4096];
    tpath(root, "root");
    tpath(dst, "out.slr");
    make_bad_neighbour_folder(NGOOD, good, &ngood, body_bad, &nbody);
    ASSERT_EQ(ngood, NGOOD);
    int want_body = 0;
    for (int i = 0; i < NGOOD; i++)
        want_body += bad_kinds[(size_t)i % NBAD_KINDS].body_only;
    ASSERT_EQ(nbody, want_body);
    ASSERT(nbody >= 3);
    /* header check: the body-damaged files have good headers and are kept */
    int nkept = 0;
    for (int i = 0; i < ngood; i++)
        memcpy(kept[nkept++], good[i], sizeof kept[0]);
    for (int i = 0; i < nbody; i++)
        memcpy(kept[nkept++], body_bad[i], sizeof kept[0]);
    qsort(kept, (size_t)nkept, sizeof kept[0], cmp_rel);

    for (int check = SL_PACK_CHECK_HEADER; check <= SL_PACK_CHECK_DECODE; check++) {
        for (int jobs = 1; jobs <= 2; jobs++) {
            sl_pack_options o = SL_PACK_OPTIONS_INIT;
            o.jobs = jobs;
            o.check = check;
            sl_pack_report rep;
            /* without skip_bad: stops at the first bad file in record order */
            ASSERT_RC(pack_dir(root, dst, &o, &rep), SL_EDECODE);
            ASSERT_CONTAINS(sl_errmsg(), "a/000-x-zero-height.jpg");
            ASSERT_CONTAINS(sl_errmsg(), "empty JPEG image");
            ASSERT(!exists(dst));
            o.skip_bad = 1;
            ASSERT_OK(pack_dir(root, dst, &o, &rep));
            int want_kept = check == SL_PACK_CHECK_DECODE ? ngood : nkept;
            ASSERT_U64_EQ(rep.records, (uint64_t)want_kept);
            ASSERT_U64_EQ(rep.skipped, (uint64_t)(2 * NGOOD - want_kept));
            ASSERT_EQ(rep.nbad, SL_PACK_REPORT_BAD);
            for (int i = 0; i < rep.nbad; i++) {
                ASSERT_CONTAINS(rep.bad[i], bad_kinds[i].name);
                ASSERT_CONTAINS(rep.bad[i], bad_kinds[i].cause);
            }
            if (check == SL_PACK_CHECK_DECODE)
                check_kept(root, dst, good, ngood);
            else
                check_kept(root, dst, kept, nkept);
            ASSERT_EQ(unlink(dst), 0);
        }
    }
}

/* The cause of each bad kind, as pack reports it (the report keeps only the
 * first few lines): one folder per kind, next to a good file. */
SL_TEST(source_pack__bad_kinds_named_with_cause) {
    for (size_t k = 0; k < NBAD_KINDS; k++) {
        char rel[128], root[4096], dst[4096], p[4096];
        snprintf(rel, sizeof rel, "k%zu/c", k);
        mkdirs(rel);
        snprintf(rel, sizeof rel, "k%zu/c/1-%s", k, bad_kinds[k].name);
        tpath(p, rel);
        size_t n;
        uint8_t *d = make_bad(k, &n);
        sl_test_write_file(p, d, n);
        free(d);
        snprintf(rel, sizeof rel, "k%zu/c/2-good.jpg", k);
        put_jpeg(rel, (int)k);
        snprintf(rel, sizeof rel, "k%zu", k);
        tpath(root, rel);
        snprintf(rel, sizeof rel, "k%zu.slr", k);
        tpath(dst, rel);
        for (int check = SL_PACK_CHECK_HEADER; check <= SL_PACK_CHECK_DECODE; check++) {
            sl_pack_options o = SL_PACK_OPTIONS_INIT;
            o.check = check;
            o.jobs = 1;
            o.skip_bad = 1;
            sl_pack_report rep;
            ASSERT_OK(pack_dir(root, dst, &o, &rep));
            int caught = !bad_kinds[k].body_only || check == SL_PACK_CHECK_DECODE;
            if (rep.skipped != (uint64_t)caught)
                sl_test_fail(__FILE__, __LINE__, "%s, check %d: skipped %llu",
                             bad_kinds[k].name, check, (unsigned long long)rep.skipped);
            ASSERT_U64_EQ(rep.records, caught ? 1 : 2);
            if (caught) {
                ASSERT_CONTAINS(rep.bad[0], bad_kinds[k].name);
                ASSERT_CONTAINS(rep.bad[0], bad_kinds[k].cause);
            }
            ASSERT_EQ(unlink(dst), 0);
        }
    }
}

/* A caller built against the version-1 options struct (no `check` field)
 * still packs, with the header check. */
SL_TEST(source_pack__options_version_1) {
    struct {
        unsigned version;
        int jobs;
        int skip_bad;
        uint64_t shard_bytes;
        void (*progress)(uint64_t, uint64_t, uint64_t, void *);
        void *user;
    } v1 = {1, 1, 1, 0, NULL, NULL};
    ASSERT_EQ(sizeof v1, offsetof(sl_pack_options, check));
    char root[4096], dst[4096];
    tpath(root, "root");
    tpath(dst, "out.slr");
    put_jpeg("root/a/1.jpg", 1);
    put_text("root/a/2.jpg", "text");
    sl_pack_report rep;
    ASSERT_OK(pack_dir(root, dst, (const sl_pack_options *)(const void *)&v1, &rep));
    ASSERT_U64_EQ(rep.records, 1);
    ASSERT_U64_EQ(rep.skipped, 1);
    /* version 2 ends at `check`: jpeg_restart stays off */
    struct {
        unsigned version;
        int jobs;
        int skip_bad;
        uint64_t shard_bytes;
        void (*progress)(uint64_t, uint64_t, uint64_t, void *);
        void *user;
        int check;
    } v2 = {2, 1, 1, 0, NULL, NULL, SL_PACK_CHECK_DECODE};
    ASSERT_EQ((size_t)((char *)&v2.check - (char *)&v2) + sizeof v2.check,
              offsetof(sl_pack_options, jpeg_restart));
    ASSERT_OK(pack_dir(root, dst, (const sl_pack_options *)(const void *)&v2, &rep));
    ASSERT_U64_EQ(rep.records, 1);
    /* version 3 ends at `jpeg_restart`: no resume, no stop */
    struct {
        unsigned version;
        int jobs;
        int skip_bad;
        uint64_t shard_bytes;
        void (*progress)(uint64_t, uint64_t, uint64_t, void *);
        void *user;
        int check;
        int jpeg_restart;
    } v3 = {3, 1, 1, 0, NULL, NULL, SL_PACK_CHECK_HEADER, SL_JPEG_RESTART_OFF};
    ASSERT_EQ((size_t)((char *)&v3.jpeg_restart - (char *)&v3) + sizeof v3.jpeg_restart,
              offsetof(sl_pack_options, resume));
    ASSERT_OK(pack_dir(root, dst, (const sl_pack_options *)(const void *)&v3, &rep));
    ASSERT_U64_EQ(rep.records, 1);
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.version = SL_PACK_OPTIONS_VERSION + 1;
    ASSERT_RC(pack_dir(root, dst, &o, NULL), SL_EUNSUPPORTED);
    o.version = SL_PACK_OPTIONS_VERSION;
    o.check = 7;
    ASSERT_RC(pack_dir(root, dst, &o, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "check");
    o.check = SL_PACK_CHECK_HEADER;
    o.jpeg_restart = 3;
    ASSERT_RC(pack_dir(root, dst, &o, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "jpeg_restart");
}

/* Whether `n` bytes hold an APP15 SLRST interval table. */
static int has_interval_table(const uint8_t *p, size_t n) {
    for (size_t i = 0; i + 10 <= n; i++)
        if (p[i] == 0xff && p[i + 1] == 0xef && !memcmp(p + i + 4, "SLRST", 5))
            return 1;
    return 0;
}

/* Packed with jpeg_restart: every JPEG stored with an interval table, the
 * same pixels as its source file, the same bytes for any number of jobs;
 * repacking the .slr (the any-source packer) keeps pixels and tables. */
SL_TEST(source_pack__jpeg_restart_same_pixels) {
    char root[4096], d1[4096], d2[4096], d3[4096];
    tpath(root, "root");
    tpath(d1, "r1.slr");
    tpath(d2, "r2.slr");
    tpath(d3, "r3.slr");
    make_folder(2, 6);
    for (int i = 0; i < 4; i++) {
        char rel[256], p[4096];
        snprintf(rel, sizeof rel, "root/class01/big%d.jpg", i);
        unsigned long n;
        uint8_t *j = make_jpeg(120 + 37 * i, 90 + 13 * i, i, &n);
        tpath(p, rel);
        sl_test_write_file(p, j, n);
        tjFree(j);
    }
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.jpeg_restart = SL_JPEG_RESTART_AUTO;
    o.jobs = 1;
    sl_pack_report rep;
    ASSERT_OK(pack_dir(root, d1, &o, &rep));
    ASSERT_U64_EQ(rep.records, 16);
    o.jobs = 2;
    ASSERT_OK(pack_dir(root, d2, &o, NULL));
    size_t n1, n2;
    uint8_t *b1 = sl_test_read_file(d1, &n1), *b2 = sl_test_read_file(d2, &n2);
    ASSERT_EQ(n1, n2);
    ASSERT_EQ(memcmp(b1, b2, n1), 0);
    free(b1);
    free(b2);
    const char *srcs[1] = {d1};
    o.jpeg_restart = SL_JPEG_RESTART_ROWS;
    ASSERT_OK(sl_pack(srcs, 1, d3, &o, NULL));
    sl_decoder *dec;
    ASSERT_OK(sl_decoder_create(&dec));
    for (int pass = 0; pass < 2; pass++) {
        sl_reader *r;
        ASSERT_OK(sl_reader_open(&r, pass ? d3 : d1, 0));
        sl_record *rec;
        ASSERT_OK(sl_record_create(&rec));
        int tables = 0;
        for (uint64_t i = 0; i < sl_reader_count(r); i++) {
            ASSERT_OK(sl_reader_read(r, i, rec));
            const sl_tensor *img = sl_record_column(rec, 0), *path = sl_record_column(rec, 2);
            char full[8300], rel[256];
            ASSERT(path->nbytes < sizeof rel);
            memcpy(rel, path->data, path->nbytes);
            rel[path->nbytes] = 0;
            snprintf(full, sizeof full, "%s/%s", root, rel);
            size_t fn;
            uint8_t *fd = sl_test_read_file(full, &fn);
            tables += has_interval_table(img->data, img->nbytes);
            ASSERT(!has_interval_table(fd, fn));
            sl_tensor a = {0}, b = {0};
            ASSERT_OK(sl_decode(dec, img->data, img->nbytes, SL_COLOR_RGB, &a));
            ASSERT_OK(sl_decode(dec, fd, fn, SL_COLOR_RGB, &b));
            ASSERT_EQ(a.nbytes, b.nbytes);
            if (memcmp(a.data, b.data, a.nbytes))
                sl_test_fail(__FILE__, __LINE__, "%s: pixels differ after packing", full);
            sl_tensor_release(&a);
            sl_tensor_release(&b);
            free(fd);
        }
        ASSERT(tables >= 4); /* the big ones at least */
        sl_record_free(rec);
        sl_reader_free(r);
    }
    sl_decoder_free(dec);
}

/* sl_source_detect names the spec key that reads each input; a pipeline marks
 * a source string column as text until an op rewrites it. */
SL_TEST(source_api__detect_and_text_columns) {
    put_jpeg("folder/cat/a.jpg", 1);
    put_jpeg("folder/dog/bb.jpg", 2);
    char root[4096], slr[4096], img[4096], lab[4096], txt[4096];
    tpath(root, "folder");
    tpath(slr, "f.slr");
    tpath(img, "i-idx3-ubyte");
    tpath(lab, "l-idx1-ubyte");
    tpath(txt, "notes.txt");
    make_idx_pair(img, lab, 3, 4, 4, 0);
    put_text("notes.txt", "not a dataset\n");
    ASSERT_OK(pack_dir(root, slr, NULL, NULL));
    const char *key = "x";
    const char *in[] = {root, slr, img, lab};
    ASSERT_OK(sl_source_detect(&in[0], 1, &key));
    ASSERT_STR_EQ(key, "image_folder");
    ASSERT_OK(sl_source_detect(&in[1], 1, &key));
    ASSERT_STR_EQ(key, "path");
    ASSERT_OK(sl_source_detect(&in[2], 2, &key));
    ASSERT_STR_EQ(key, "idx");
    const char *bad[] = {txt};
    ASSERT_RC(sl_source_detect(bad, 1, &key), SL_EUNSUPPORTED);
    ASSERT(key == NULL);
    ASSERT(strstr(sl_errmsg(), "notes.txt") != NULL);
    ASSERT_RC(sl_source_detect(in, 2, &key), SL_EINVAL); /* two kinds */
    ASSERT_RC(sl_source_detect(in, 1, NULL), SL_EINVAL);

    static const struct {
        const char *ops;
        const char *col;
        int text;
    } cases[] = {
        {"[]", "path", 1},
        {"[]", "image", 0},
        {"[]", "label", 0},
        {"[{\"op\": \"batch\", \"size\": 2}]", "path", 1},
        {"[{\"op\": \"select\", \"columns\": [\"path\"]}]", "path", 1},
        {"[{\"op\": \"decode\"}, {\"op\": \"batch\", \"size\": 2}]", "path", 1},
        {"[{\"op\": \"cast\", \"column\": \"path\", \"dtype\": \"float32\"}]", "path", 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        for (int from_slr = 0; from_slr < 2; from_slr++) {
            char json[9000];
            snprintf(json, sizeof json, "{\"source\": {\"%s\": \"%s\"}, \"ops\": %s}",
                     from_slr ? "path" : "image_folder", from_slr ? slr : root, cases[k].ops);
            sl_spec *spec;
            sl_pipeline *p;
            ASSERT_OK(sl_spec_from_json(&spec, json));
            ASSERT_OK(sl_pipeline_create(&p, spec));
            int col = -1;
            for (int c = 0; c < sl_pipeline_ncols(p); c++)
                if (!strcmp(sl_pipeline_column_name(p, c), cases[k].col))
                    col = c;
            ASSERT(col >= 0);
            if (sl_pipeline_column_text(p, col) != cases[k].text)
                sl_test_fail(__FILE__, __LINE__, "%s: %s: text %d, want %d", json, cases[k].col,
                             sl_pipeline_column_text(p, col), cases[k].text);
            ASSERT_EQ(sl_pipeline_column_text(p, -1), 0);
            ASSERT_EQ(sl_pipeline_column_text(p, sl_pipeline_ncols(p)), 0);
            sl_pipeline_free(p);
            sl_spec_free(spec);
        }
    }
}

/* sl_source_check: what pack checks, record by record, through any source;
 * the message names the file, the record and the column. */
SL_TEST(source_check__image_folder_like_pack) {
    char root[4096], bad[4096], cut[4096];
    tpath(root, "chk");
    put_jpeg("chk/a/1.jpg", 1);
    put_text("chk/a/2.jpg", "this is text, not a JPEG");
    put_jpeg("chk/b/1.jpg", 2);
    /* a JPEG cut inside its entropy-coded data: the header reads, the pixels do not */
    unsigned long n;
    uint8_t *j = make_jpeg(64, 48, 5, &n);
    tpath(cut, "chk/b/2.jpg");
    sl_test_write_file(cut, j, n - 40);
    tjFree(j);
    tpath(bad, "chk/a/2.jpg");
    const char *paths[] = {root};
    sl_source *src;
    ASSERT_OK(sl_source_open_paths(&src, paths, 1, NULL));
    ASSERT_U64_EQ(sl_source_count(src), 4);
    int k = -1;
    ASSERT_OK(sl_source_check(src, 0, SL_PACK_CHECK_HEADER, &k));
    ASSERT_EQ(k, 1);
    ASSERT_RC(sl_source_check(src, 1, SL_PACK_CHECK_HEADER, &k), SL_EDECODE);
    ASSERT_EQ(k, 0);
    ASSERT_CONTAINS(sl_errmsg(), bad);
    ASSERT_CONTAINS(sl_errmsg(), ": record 1: column 'image': not an image");
    /* the source still reads after a failed check */
    ASSERT_OK(sl_source_check(src, 2, SL_PACK_CHECK_HEADER, NULL));
    /* the cut JPEG: a full decode finds it; the mode can change between calls */
    ASSERT_RC(sl_source_check(src, 3, SL_PACK_CHECK_DECODE, NULL), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), cut);
    ASSERT_OK(sl_source_check(src, 0, SL_PACK_CHECK_DECODE, NULL));
    ASSERT_RC(sl_source_check(src, 0, 7, NULL), SL_EINVAL);
    ASSERT_RC(sl_source_check(src, 4, SL_PACK_CHECK_HEADER, NULL), SL_EINVAL);
    /* pack agrees on the first bad file */
    char dst[4096];
    tpath(dst, "chk.slr");
    sl_pack_report rep;
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    ASSERT_RC(sl_pack_source(src, dst, &o, &rep), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), bad);
    sl_source_free(src);
}

/* A reader thread the system refuses (injected): the readers that did start
 * share the files, and the pack is the same bytes as with one job; when not
 * even the first starts, the pack fails naming the folder and the cause, and
 * writes nothing. */
SL_TEST(source_pack__reader_thread_refused) {
    char root[4096], d1[4096], dn[4096];
    tpath(root, "root");
    tpath(d1, "j1.slr");
    make_folder(3, 10);
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.jobs = 1;
    sl_pack_report r1, rn;
    ASSERT_OK(pack_dir(root, d1, &o, &r1));
    size_t n1;
    uint8_t *b1 = sl_test_read_file(d1, &n1);
    tpath(dn, "none.slr");
    o.jobs = 3;
    sl__workers_fail_at(1);
    int rc0 = pack_dir(root, dn, &o, &rn);
    sl__workers_fail_at(0);
    ASSERT_RC(rc0, SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "root: reader threads: cannot start a packread thread (0 running)");
    ASSERT(access(dn, F_OK) != 0);
    for (int at = 2; at <= 3; at++) {
        char name[32];
        snprintf(name, sizeof name, "refused%d.slr", at);
        tpath(dn, name);
        o.jobs = 3;
        sl__workers_fail_at((uint64_t)at);
        int rc = pack_dir(root, dn, &o, &rn);
        sl__workers_fail_at(0);
        ASSERT_OK(rc);
        ASSERT_U64_EQ(rn.records, 30);
        size_t nn;
        uint8_t *bn = sl_test_read_file(dn, &nn);
        ASSERT_EQ(nn, n1);
        ASSERT_EQ(memcmp(bn, b1, n1), 0);
        free(bn);
    }
    free(b1);
}

/* ---- interrupted packs that resume (docs/CLI.md, "pack": --resume) ---------------- */

/* A stop poll that says "stop" once `after` records were handled. */
typedef struct {
    uint64_t after, handled;
} stop_at;

static void count_handled(uint64_t done, uint64_t total, uint64_t bytes, void *user) {
    (void)done, (void)total, (void)bytes;
    ((stop_at *)user)->handled++;
}

static int stop_when(void *user, int fresh) {
    (void)fresh;
    stop_at *s = user;
    return s->handled >= s->after;
}

/* Pack `srcs` into dst, stopping after `after` records (UINT64_MAX: never),
 * with `resume`; returns the status. */
static int pack_some(const char *const *srcs, int n, const char *dst, sl_pack_options o,
                     uint64_t after, int resume, sl_pack_report *rep) {
    stop_at st = {after, 0};
    o.progress = count_handled;
    o.user = &st;
    o.stop = after == UINT64_MAX ? NULL : stop_when;
    o.resume = resume;
    return sl_pack(srcs, n, dst, &o, rep);
}

/* Stopped after k1 records, its resume stopped after k2 more, then resumed
 * to the end: the result is `ref`, byte for byte; the reports say what was
 * safe and kept. */
static void interrupted_twice(const char *const *srcs, int n, const char *ref, const char *dst,
                              sl_pack_options o, uint64_t total, uint64_t k1, uint64_t k2) {
    sl_pack_report rep;
    char partial[4200];
    snprintf(partial, sizeof partial, "%s.partial", dst);
    int rc = pack_some(srcs, n, dst, o, k1, 0, &rep);
    if (k1 < total) {
        ASSERT_RC(rc, SL_ECANCELED);
        char want[200];
        snprintf(want, sizeof want, "interrupted: %llu of ", (unsigned long long)rep.records);
        ASSERT_CONTAINS(sl_errmsg(), want);
        ASSERT_CONTAINS(sl_errmsg(), " planned records are safe in ");
        ASSERT(exists(partial));
        ASSERT(!exists(dst));
        uint64_t done = 0, planned = 0;
        ASSERT_OK(sl_recover_info(partial, &done, &planned));
        ASSERT_U64_EQ(done, rep.records);
        ASSERT_U64_EQ(planned, total);
        rc = pack_some(srcs, n, dst, o, k2, 1, &rep);
        if (k1 + k2 < total)
            ASSERT_RC(rc, SL_ECANCELED);
        else
            ASSERT_OK(rc);
        if (rc != SL_OK)
            ASSERT_OK(pack_some(srcs, n, dst, o, UINT64_MAX, 1, &rep));
    } else {
        ASSERT_OK(rc);
    }
    ASSERT(!exists(partial));
    slr_same_files(ref, dst);
    slr_remove_tree(dst);
}

static void folder_of(int n, int bad_at) {
    for (int i = 0; i < n; i++) {
        char rel[200];
        snprintf(rel, sizeof rel, "rs/c%d/%03d.jpg", i % 4, i);
        if (i == bad_at)
            put_text(rel, "not an image");
        else
            put_jpeg(rel, i);
    }
}

SL_TEST(source_pack__interrupted_imagefolder_resumes_to_the_same_bytes) {
    enum { N = 61 };
    char root[4096], ref[4096], dst[4096];
    tpath(root, "rs");
    tpath(ref, "ref.slr");
    tpath(dst, "out.slr");
    folder_of(N, -1);
    const char *srcs[1] = {root};
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.shard_bytes = 16384; /* several shards */
    for (int jobs = 1; jobs <= 3; jobs += 2) {
        o.jobs = jobs;
        sl_pack_report rep;
        ASSERT_OK(pack_some(srcs, 1, ref, o, UINT64_MAX, 0, &rep));
        static const uint64_t at[][2] = {{0, 0}, {1, 5}, {7, 0}, {23, 30}, {60, 1}, {61, 0}};
        for (size_t k = 0; k < sizeof at / sizeof *at; k++)
            interrupted_twice(srcs, 1, ref, dst, o, N, at[k][0], at[k][1]);
        slr_remove_tree(ref);
    }
    /* resume with nothing to resume: from the start */
    sl_pack_report rep;
    ASSERT_OK(pack_some(srcs, 1, ref, o, UINT64_MAX, 0, &rep));
    ASSERT_OK(pack_some(srcs, 1, dst, o, UINT64_MAX, 1, &rep));
    slr_same_files(ref, dst);
    slr_remove_tree(dst);
    slr_remove_tree(ref);
}

/* A kill -9 after the writer began DST.partial and before the pack wrote its
 * plan there leaves no plan and no record: --resume packs from the start
 * (it was refused: "holds no plan"). With a record and no plan, the partial
 * is not a pack's: refused, and left as it was. */
SL_TEST(source_pack__resume_of_a_partial_without_its_plan) {
    enum { N = 12 };
    char root[4096], ref[4096], dst[4096], partial[4200], plan[4300];
    tpath(root, "rs");
    tpath(ref, "ref.slr");
    tpath(dst, "out.slr");
    snprintf(partial, sizeof partial, "%s.partial", dst);
    snprintf(plan, sizeof plan, "%s/pack.json", partial);
    folder_of(N, -1);
    const char *srcs[1] = {root};
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.jobs = 1;
    o.shard_bytes = 8192;
    sl_pack_report rep;
    ASSERT_OK(pack_some(srcs, 1, ref, o, UINT64_MAX, 0, &rep));
    ASSERT_RC(pack_some(srcs, 1, dst, o, 0, 0, &rep), SL_ECANCELED);
    ASSERT_U64_EQ(rep.records, 0);
    ASSERT_EQ(unlink(plan), 0);
    ASSERT_OK(pack_some(srcs, 1, dst, o, UINT64_MAX, 1, &rep));
    ASSERT_U64_EQ(rep.records, N);
    ASSERT(!exists(partial));
    slr_same_files(ref, dst);
    slr_remove_tree(dst);
    /* the partial folder alone, not even a shard begun */
    ASSERT_EQ(mkdir(partial, 0755), 0);
    ASSERT_OK(pack_some(srcs, 1, dst, o, UINT64_MAX, 1, &rep));
    slr_same_files(ref, dst);
    slr_remove_tree(dst);
    /* records, no plan */
    ASSERT_RC(pack_some(srcs, 1, dst, o, 3, 0, &rep), SL_ECANCELED);
    ASSERT_EQ(unlink(plan), 0);
    ASSERT_RC(pack_some(srcs, 1, dst, o, UINT64_MAX, 1, &rep), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "holds no plan (pack.json)");
    uint64_t done = 0, planned = 0;
    ASSERT_OK(sl_recover_info(partial, &done, &planned));
    ASSERT_U64_EQ(done, 3); /* left as it was */
    slr_remove_tree(partial);
    slr_remove_tree(ref);
}

SL_TEST(source_pack__interrupted_with_skips_resumes_and_reports_them) {
    enum { N = 30, BAD = 5 };
    char root[4096], ref[4096], dst[4096];
    tpath(root, "rs");
    tpath(ref, "ref.slr");
    tpath(dst, "out.slr");
    folder_of(N, BAD);
    const char *srcs[1] = {root};
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.shard_bytes = 8192;
    o.skip_bad = 1;
    o.jobs = 2;
    sl_pack_report rep;
    ASSERT_OK(pack_some(srcs, 1, ref, o, UINT64_MAX, 0, &rep));
    ASSERT_U64_EQ(rep.skipped, 1);
    for (uint64_t k = 3; k <= 8; k++) { /* stopped before, at and after the bad file */
        ASSERT_RC(pack_some(srcs, 1, dst, o, k, 0, &rep), SL_ECANCELED);
        ASSERT_OK(pack_some(srcs, 1, dst, o, UINT64_MAX, 1, &rep));
        ASSERT_U64_EQ(rep.records, N - 1);
        ASSERT_U64_EQ(rep.skipped, 1); /* left out once, before or after the stop */
        ASSERT_EQ(rep.nbad, 1);
        ASSERT_CONTAINS(rep.bad[0], "005.jpg");
        slr_same_files(ref, dst);
        slr_remove_tree(dst);
    }
    slr_remove_tree(ref);
}

SL_TEST(source_pack__resume_refuses_other_inputs_or_options) {
    enum { N = 20 };
    char root[4096], dst[4096], partial[4200], extra[4096];
    tpath(root, "rs");
    tpath(dst, "out.slr");
    snprintf(partial, sizeof partial, "%s.partial", dst);
    folder_of(N, -1);
    const char *srcs[1] = {root};
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.shard_bytes = 8192;
    sl_pack_report rep;
    ASSERT_RC(pack_some(srcs, 1, dst, o, 9, 0, &rep), SL_ECANCELED);
    /* without resume: the partial is not touched, and the message says what to do */
    ASSERT_RC(pack_some(srcs, 1, dst, o, UINT64_MAX, 0, &rep), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "exists: an interrupted pack; continue it");
    sl_pack_options x = o;
    x.shard_bytes = 4096;
    ASSERT_RC(pack_some(srcs, 1, dst, x, UINT64_MAX, 1, &rep), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "shards of up to 8192 bytes");
    x = o;
    x.check = SL_PACK_CHECK_DECODE;
    ASSERT_RC(pack_some(srcs, 1, dst, x, UINT64_MAX, 1, &rep), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "another --check (check: \"header\" then, \"decode\" now)");
    x = o;
    x.jpeg_restart = SL_JPEG_RESTART_AUTO;
    ASSERT_RC(pack_some(srcs, 1, dst, x, UINT64_MAX, 1, &rep), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "another --jpeg-restart");
    put_jpeg("rs/c0/zzz.jpg", 99); /* one more file */
    ASSERT_RC(pack_some(srcs, 1, dst, o, UINT64_MAX, 1, &rep), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "another number of inputs");
    tpath(extra, "rs/c0/zzz.jpg");
    char moved[4096];
    tpath(moved, "rs/c1/zzz.jpg"); /* as many files, one in another class */
    ASSERT_EQ(rename(extra, moved), 0);
    char gone[4096];
    tpath(gone, "rs/c1/001.jpg");
    ASSERT_EQ(unlink(gone), 0);
    ASSERT_RC(pack_some(srcs, 1, dst, o, UINT64_MAX, 1, &rep), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "other inputs (their names, order or labels differ)");
    ASSERT(exists(partial)); /* every refusal left it as it was */
    ASSERT_EQ(unlink(moved), 0);
    put_jpeg("rs/c1/001.jpg", 1);
    char ref[4096];
    tpath(ref, "ref.slr");
    ASSERT_OK(pack_some(srcs, 1, ref, o, UINT64_MAX, 0, &rep));
    ASSERT_OK(pack_some(srcs, 1, dst, o, UINT64_MAX, 1, &rep));
    slr_same_files(ref, dst);
}

SL_TEST(source_pack__interrupted_idx_and_tar_resume_to_the_same_bytes) {
    /* IDX: 50 images of 6x5 */
    enum { N = 50 };
    uint8_t body[N * 30], labels[N];
    for (int i = 0; i < N * 30; i++)
        body[i] = (uint8_t)(i * 7);
    for (int i = 0; i < N; i++)
        labels[i] = (uint8_t)(i % 10);
    uint32_t dims[3] = {N, 6, 5}, ldims[1] = {N};
    size_t in, ln;
    uint8_t *ib = idx_bytes(0x08, 3, dims, body, sizeof body, &in);
    uint8_t *lb = idx_bytes(0x08, 1, ldims, labels, sizeof labels, &ln);
    char img[4096], lab[4096], ref[4096], dst[4096];
    tpath(img, "i-idx3-ubyte");
    tpath(lab, "l-idx1-ubyte");
    tpath(ref, "ref.slr");
    tpath(dst, "out.slr");
    sl_test_write_file(img, ib, in);
    sl_test_write_file(lab, lb, ln);
    free(ib);
    free(lb);
    const char *isrcs[2] = {img, lab};
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.shard_bytes = 1024;
    sl_pack_report rep;
    ASSERT_OK(pack_some(isrcs, 2, ref, o, UINT64_MAX, 0, &rep));
    interrupted_twice(isrcs, 2, ref, dst, o, N, 17, 20);
    interrupted_twice(isrcs, 2, ref, dst, o, N, 0, 49);
    slr_remove_tree(ref);
    /* tar shards, packed through the source */
    char t0[4096], t1[4096];
    tpath(t0, "t0.tar");
    tpath(t1, "t1.tar");
    for (int s = 0; s < 2; s++) {
        tar_build b;
        tar_build_init(&b);
        for (int i = 0; i < 12; i++) {
            char name[64], cls[16];
            unsigned long jn;
            uint8_t *j = make_jpeg(20, 16, s * 12 + i, &jn);
            snprintf(name, sizeof name, "s%d_%02d.jpg", s, i);
            tar_build_member(&b, name, j, jn);
            tjFree(j);
            snprintf(name, sizeof name, "s%d_%02d.cls", s, i);
            snprintf(cls, sizeof cls, "%d", i % 3);
            tar_build_member(&b, name, cls, strlen(cls));
        }
        tar_build_write(&b, s ? t1 : t0);
    }
    const char *tsrcs[2] = {t0, t1};
    ASSERT_OK(pack_some(tsrcs, 2, ref, o, UINT64_MAX, 0, &rep));
    interrupted_twice(tsrcs, 2, ref, dst, o, 24, 5, 13);
    interrupted_twice(tsrcs, 2, ref, dst, o, 24, 12, 0);
    slr_remove_tree(ref);
}
