/*
 * Tests of src/source/source_index.c: the sidecar index (DATA.slidx) round
 * trip, and the ways a load refuses one: missing (SL_END), damaged or
 * truncated (SL_ECORRUPT), newer (SL_EUNSUPPORTED), stale or made for another
 * kind (SL_EINVAL, naming both files and the command that rebuilds it).
 */
#include "test.h"
#include "core/core.h"
#include "source/source_index.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>



/* A 1000-byte data file and an index of 3 records with two columns and two
 * scalar columns, written beside it. */
static void make_indexed(char *data, size_t cap) {
    sl_test_path(data, cap, "a.bin");
    uint8_t bytes[1000];
    for (int i = 0; i < 1000; i++)
        bytes[i] = (uint8_t)i;
    sl_test_write_file(data, bytes, sizeof bytes);
    sl_sidx *ix = NULL;
    ASSERT_OK(sl_sidx__create(&ix, "tfrecord"));
    ASSERT_OK(sl_sidx__stat(data, &ix->data_size, &ix->data_mtime_ns));
    ASSERT_OK(sl_sidx__add_record(ix, 0, 100));
    ASSERT_OK(sl_sidx__add_record(ix, 100, 400));
    ASSERT_OK(sl_sidx__add_record(ix, 600, 400));
    int64_t shape[2] = {-1, 3};
    ASSERT_OK(sl_sidx__add_col(ix, "image/encoded", SL_COL_BYTES, SL_U8, 1, NULL,
                               SL_SIDX_COL_ENCODED));
    ASSERT_OK(sl_sidx__add_col(ix, "boxes", SL_COL_ARRAY, SL_F32, 2, shape, 0));
    ASSERT_RC(sl_sidx__add_col(ix, "boxes", SL_COL_ARRAY, SL_F32, 2, shape, 0), SL_EINVAL);
    int64_t labels[3] = {7, -1, INT64_MAX};
    double scores[3] = {0.5, -2.25, 1e300};
    ASSERT_OK(sl_sidx__add_scalar(ix, "label", SL_COL_INT64, labels));
    ASSERT_OK(sl_sidx__add_scalar(ix, "score", SL_COL_FLOAT64, scores));
    ASSERT_OK(sl_sidx__write(data, ix));
    sl_sidx__free(ix);
}

SL_TEST(source_index__round_trip) {
    char data[4096], ipath[4200];
    make_indexed(data, sizeof data);
    ASSERT_OK(sl_sidx__path(data, ipath, sizeof ipath));
    size_t n;
    uint8_t *b = sl_test_read_file(ipath, &n);
    /* 64 header + 3 entries + 2 columns + 2 scalar descriptors + values + 16 footer */
    ASSERT_EQ(n, 64 + 3 * 24 + 2 * 136 + 2 * 72 + 2 * 3 * 8 + 16);
    ASSERT_EQ(sl__ld32(b + 8), 2);
    /* version 2: the data's XXH3-64 where version 1 had its mtime, and each
     * entry's XXH3-64 after its offset and length */
    uint8_t bytes[1000];
    for (int i = 0; i < 1000; i++)
        bytes[i] = (uint8_t)i;
    ASSERT_U64_EQ(sl__ld64(b + 24), XXH3_64bits(bytes, 1000));
    ASSERT_U64_EQ(sl__ld64(b + 64 + 24 + 8), 400);
    ASSERT_U64_EQ(sl__ld64(b + 64 + 24 + 16), XXH3_64bits(bytes + 100, 400));
    ASSERT_U64_EQ(sl__ld64(b + 64 + 48 + 16), XXH3_64bits(bytes + 600, 400));
    ASSERT(memcmp(b, "\x89SLIDX\r\n", 8) == 0);
    ASSERT(memcmp(b + n - 8, "SLIDXEND", 8) == 0);
    ASSERT_U64_EQ(sl__ld64(b + n - 16), XXH3_64bits(b, n - 16));
    ASSERT_EQ(sl__ld64(b + 32), 3);
    ASSERT_STR_EQ((const char *)b + 48, "tfrecord");
    free(b);

    sl_sidx *ix = NULL;
    ASSERT_OK(sl_sidx__load(data, "tfrecord", &ix));
    ASSERT_EQ(ix->count, 3);
    ASSERT_EQ(ix->offset[1], 100);
    ASSERT_EQ(ix->length[1], 400);
    ASSERT_EQ(ix->offset[2], 600);
    ASSERT_EQ(ix->data_size, 1000);
    ASSERT_EQ(ix->version, 2);
    ASSERT_U64_EQ(ix->data_sum, XXH3_64bits(bytes, 1000));
    ASSERT_OK(sl_sidx__check_data(ix, bytes, 1000, data));
    ASSERT_OK(sl_sidx__check_entry(ix, 1, bytes + 100, "a.bin: record 1", data));
    bytes[350] ^= 1;
    ASSERT_RC(sl_sidx__check_entry(ix, 1, bytes + 100, "a.bin: record 1", data), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "a.bin: record 1: checksum mismatch against a.bin.slidx");
    ASSERT_RC(sl_sidx__check_data(ix, bytes, 1000, data), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "checksum mismatch against its index");
    ASSERT_RC(sl_sidx__check_data(ix, bytes, 999, data), SL_ECORRUPT);
    ASSERT_EQ(ix->ncols, 2);
    ASSERT_STR_EQ(ix->col[0].name, "image/encoded");
    ASSERT_EQ(ix->col[0].type, SL_COL_BYTES);
    ASSERT_EQ(ix->col[0].flags, SL_SIDX_COL_ENCODED);
    ASSERT_EQ(ix->col[1].dtype, SL_F32);
    ASSERT_EQ(ix->col[1].ndim, 2);
    ASSERT_EQ(ix->col[1].shape[0], -1);
    ASSERT_EQ(ix->col[1].shape[1], 3);
    int k = sl_sidx__find_scalar(ix, "label");
    ASSERT_EQ(k, 0);
    const int64_t *l = ix->scalar[k].vals;
    ASSERT_EQ(l[0], 7);
    ASSERT_EQ(l[1], -1);
    ASSERT(l[2] == INT64_MAX);
    k = sl_sidx__find_scalar(ix, "score");
    ASSERT_EQ(ix->scalar[k].type, SL_COL_FLOAT64);
    const double *s = ix->scalar[k].vals;
    ASSERT(s[0] == 0.5 && s[1] == -2.25 && s[2] == 1e300);
    ASSERT_EQ(sl_sidx__find_col(ix, "nope"), -1);
    sl_sidx__free(ix);
}

SL_TEST(source_index__missing_is_end) {
    char data[4096];
    sl_test_path(data, sizeof data, "none.bin");
    sl_test_write_file(data, "x", 1);
    sl_sidx *ix = (sl_sidx *)1;
    ASSERT_EQ(sl_sidx__load(data, "tfrecord", &ix), SL_END);
    ASSERT(ix == NULL);
}

/* Every single flipped byte and every truncation is refused as SL_ECORRUPT
 * (or SL_EUNSUPPORTED where the flip lands on the version). */
SL_TEST(source_index__damaged_and_truncated) {
    char data[4096], ipath[4200];
    make_indexed(data, sizeof data);
    ASSERT_OK(sl_sidx__path(data, ipath, sizeof ipath));
    size_t n;
    uint8_t *good = sl_test_read_file(ipath, &n);
    for (size_t i = 0; i < n; i++) {
        good[i] ^= 0x20;
        sl_test_write_file(ipath, good, n);
        good[i] ^= 0x20;
        sl_sidx *ix = NULL;
        int rc = sl_sidx__load(data, "tfrecord", &ix);
        if (rc != SL_ECORRUPT)
            sl_test_fail(__FILE__, __LINE__, "flip at %zu: %s (%s)", i, sl_status_str(rc),
                         sl_errmsg());
        ASSERT(ix == NULL);
        ASSERT_CONTAINS(sl_errmsg(), "a.bin.slidx");
    }
    for (size_t len = 0; len < n; len += (len < 80 ? 1 : 37)) {
        sl_test_write_file(ipath, good, len);
        sl_sidx *ix = NULL;
        ASSERT_RC(sl_sidx__load(data, "tfrecord", &ix), SL_ECORRUPT);
    }
    /* A newer version with a valid checksum: unsupported, not damaged. */
    sl__st32(good + 8, 3);
    sl__st64(good + n - 16, XXH3_64bits(good, n - 16));
    sl_test_write_file(ipath, good, n);
    sl_sidx *ix = NULL;
    ASSERT_RC(sl_sidx__load(data, "tfrecord", &ix), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "version 3");
    /* Overlapping entries with a valid checksum: damaged. */
    sl__st32(good + 8, 2);
    sl__st64(good + 64 + 24, 50);
    sl__st64(good + n - 16, XXH3_64bits(good, n - 16));
    sl_test_write_file(ipath, good, n);
    ASSERT_RC(sl_sidx__load(data, "tfrecord", &ix), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "entry 1");
    free(good);
}

SL_TEST(source_index__stale_and_other_kind) {
    char data[4096];
    make_indexed(data, sizeof data);
    sl_sidx *ix = NULL;
    ASSERT_RC(sl_sidx__load(data, "webdataset", &ix), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "a tfrecord file, not webdataset");
    /* Same bytes, new mtime (a copy without -p, an upload): still valid, in
     * full and by its head, since the index is tied to the bytes. */
    struct timespec ts[2] = {{0, UTIME_OMIT}, {12345, 678}};
    ASSERT_EQ(utimensat(AT_FDCWD, data, ts, 0), 0);
    ASSERT_OK(sl_sidx__load(data, "tfrecord", &ix));
    sl_sidx__free(ix);
    ASSERT_OK(sl_sidx__load_head(data, "tfrecord", &ix));
    ASSERT_EQ(ix->count, 3);
    sl_sidx__free(ix);
    ix = NULL;
    /* Grown. */
    FILE *f = fopen(data, "ab");
    ASSERT(f);
    fputc('x', f);
    fclose(f);
    ASSERT_RC(sl_sidx__load(data, "tfrecord", &ix), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "a.bin.slidx is stale (a.bin changed: size 1000 != 1001); "
                                 "rebuild it with `sluice index ");
    ASSERT(ix == NULL);
}

SL_TEST(source_index__write_refuses_changed_data) {
    char data[4096], ipath[4200];
    sl_test_path(data, sizeof data, "b.bin");
    sl_test_write_file(data, "abc", 3);
    sl_sidx *ix = NULL;
    ASSERT_OK(sl_sidx__create(&ix, "webdataset"));
    ASSERT_OK(sl_sidx__stat(data, &ix->data_size, &ix->data_mtime_ns));
    ASSERT_OK(sl_sidx__add_record(ix, 0, 3));
    sl_test_write_file(data, "abcd", 4);
    ASSERT_RC(sl_sidx__write(data, ix), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "changed while it was being indexed");
    ASSERT_OK(sl_sidx__path(data, ipath, sizeof ipath));
    ASSERT(access(ipath, F_OK) != 0);
    sl_sidx__free(ix);
}

/* Every allocation failure while loading gives SL_ENOMEM and no leak. */
SL_TEST(source_index__load_oom) {
    char data[4096];
    make_indexed(data, sizeof data);
    for (uint64_t k = 1;; k++) {
        sl_sidx *ix = NULL;
        sl__alloc_fail_at(k);
        int rc = sl_sidx__load(data, "tfrecord", &ix);
        sl__alloc_fail_at(0);
        if (rc == SL_OK) {
            ASSERT_EQ(ix->count, 3);
            sl_sidx__free(ix);
            break;
        }
        ASSERT_RC(rc, SL_ENOMEM);
        ASSERT(k < 100);
    }
}

/* A version 1 index (no checksums, tied to the data's size and mtime), as
 * earlier builds wrote it, built here byte by byte: still read, and still
 * stale when the mtime changes. */
SL_TEST(source_index__version1_still_read) {
    char data[4096], ipath[4200];
    sl_test_path(data, sizeof data, "v1.bin");
    sl_test_write_file(data, "0123456789", 10);
    uint64_t size;
    int64_t mtime;
    ASSERT_OK(sl_sidx__stat(data, &size, &mtime));
    uint8_t b[64 + 2 * 16 + 16] = {0};
    memcpy(b, "\x89SLIDX\r\n", 8);
    sl__st32(b + 8, 1);
    sl__st64(b + 16, size);
    sl__st64(b + 24, (uint64_t)mtime);
    sl__st64(b + 32, 2);
    memcpy(b + 48, "webdataset", 10);
    sl__st64(b + 64, 0);
    sl__st64(b + 72, 4);
    sl__st64(b + 80, 4);
    sl__st64(b + 88, 6);
    sl__st64(b + 96, XXH3_64bits(b, 96));
    memcpy(b + 104, "SLIDXEND", 8);
    ASSERT_OK(sl_sidx__path(data, ipath, sizeof ipath));
    sl_test_write_file(ipath, b, sizeof b);
    sl_sidx *ix = NULL;
    ASSERT_OK(sl_sidx__load(data, "webdataset", &ix));
    ASSERT_EQ(ix->version, 1);
    ASSERT_EQ(ix->count, 2);
    ASSERT_EQ(ix->offset[1], 4);
    ASSERT(ix->sum == NULL);
    ASSERT_OK(sl_sidx__check_entry(ix, 1, (const uint8_t *)"xxxxxx", "v1.bin: record 1", data));
    sl_sidx__free(ix);
    ASSERT_OK(sl_sidx__load_head(data, "webdataset", &ix));
    ASSERT_EQ(ix->count, 2);
    sl_sidx__free(ix);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {12345, 678}};
    ASSERT_EQ(utimensat(AT_FDCWD, data, ts, 0), 0);
    ix = NULL;
    ASSERT_RC(sl_sidx__load(data, "webdataset", &ix), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "v1.bin.slidx is stale (v1.bin changed: mtime");
    ASSERT_CONTAINS(sl_errmsg(), "12345000000678");
    ASSERT(ix == NULL);
}
