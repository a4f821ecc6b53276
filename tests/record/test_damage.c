/*
 * test_damage.c — damaged, truncated, empty and hostile .slr files: every
 * failure must give the right status and a message naming the file (and the
 * record, where there is one); never a crash or wrong data.
 */
#include "slr_testutil.h"

#include <xxhash.h>

static uint64_t ld64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static uint32_t ld32(const uint8_t *p) { return (uint32_t)ld64(p) & 0xffffffffu; }
static void st64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Re-seal the header checksum after an edit (FORMAT.md: XXH3-64, seed 0, over
 * bytes [0, header_bytes - 8)). */
static void reseal_header(uint8_t *b) {
    uint32_t hb = ld32(b + 12);
    st64(b + hb - 8, XXH3_64bits_withSeed(b, hb - 8, 0));
}

static void small_file(char *path, size_t cap, uint64_t n) {
    sl_test_path(path, cap, "small.slr");
    slr_write_simple(path, n, 1, 0);
}

SL_TEST(record_damage__empty_file) {
    char path[512];
    sl_test_path(path, sizeof path, "empty.slr");
    slr_write_file(path, "", 0);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "empty file");
    slr_expect_open_fail(path, SL_READ_NO_MMAP, SL_ECORRUPT, "empty file");
}

SL_TEST(record_damage__missing_file) {
    char path[512];
    sl_test_path(path, sizeof path, "nope.slr");
    slr_expect_open_fail(path, 0, SL_EIO, "cannot open");
}

SL_TEST(record_damage__bad_magic) {
    char path[512];
    small_file(path, sizeof path, 3);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    b[1] ^= 0x20;
    slr_write_file(path, b, len);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "not a sluice record file (bad magic)");
    /* Not a record file at all. */
    slr_write_file(path, "hello, world\n", 13);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "bad magic");
    slr_write_file(path, "\x89SL", 3);
    slr_expect_open_fail(path, SL_READ_NO_MMAP, SL_ECORRUPT, "bad magic");
    free(b);
}

/* Every proper prefix of a valid file is rejected at open, in both modes. */
SL_TEST(record_damage__truncated_every_byte) {
    char path[512], cut[512];
    small_file(path, sizeof path, 4);
    sl_test_path(cut, sizeof cut, "cut.slr");
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    for (size_t n = 0; n < len; n++) {
        slr_write_file(cut, b, n);
        for (int mode = 0; mode < 2; mode++) {
            unsigned flags = mode ? SL_READ_NO_MMAP : 0;
            const char *what = n == 0 ? "empty file" : n < 8 ? "bad magic" : "truncated";
            slr_expect_open_fail(cut, flags, SL_ECORRUPT, what);
        }
    }
    free(b);
}

/* Flip each byte of a small file in turn. Every byte of a .slr file is covered
 * by a check: the header, each record (payload and padding), the index and the
 * footer each have a checksum, the frame headers must equal their index
 * entries, and the magic is compared. So no byte is harmless, and each flip
 * must be reported at open, at read, or by verify. */
SL_TEST(record_damage__flip_every_byte) {
    char path[512], bad[512];
    small_file(path, sizeof path, 4);
    sl_test_path(bad, sizeof bad, "flipped.slr");
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    ASSERT_OK(slr_open_read_verify(path, 0));
    for (size_t i = 0; i < len; i++) {
        for (int mode = 0; mode < 2; mode++) {
            b[i] ^= mode ? 0x80 : 0x01;
            slr_write_file(bad, b, len);
            b[i] ^= mode ? 0x80 : 0x01;
            unsigned flags = mode ? SL_READ_NO_MMAP : 0;
            int rc = slr_open_read_verify(bad, flags);
            if (rc >= 0)
                sl_test_fail(__FILE__, __LINE__, "flip of byte %zu (mask %s) was not detected", i,
                             mode ? "0x80" : "0x01");
            ASSERT(rc == SL_ECORRUPT || rc == SL_EUNSUPPORTED);
            ASSERT_CONTAINS(sl_errmsg(), bad);
        }
    }
    free(b);
}

SL_TEST(record_damage__flipped_record) {
    char path[512];
    small_file(path, sizeof path, 4);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    uint32_t hb = ld32(b + 12);
    uint64_t len0 = ld64(b + hb);
    uint64_t rec1 = hb + 16 + len0;
    b[rec1 + 16 + 3] ^= 0x40;   /* inside record 1's payload */
    slr_write_file(path, b, len);
    free(b);

    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));   /* open reads no data pages */
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    ASSERT_OK(sl_reader_read(r, 0, rec));
    ASSERT_RC(sl_reader_read(r, 1, rec), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), path);
    ASSERT_CONTAINS(sl_errmsg(), ": record 1: checksum mismatch");
    ASSERT_OK(sl_reader_read(r, 2, rec));
    uint64_t bad = 99;
    ASSERT_RC(sl_reader_verify(r, 0, &bad, NULL, NULL), SL_ECORRUPT);
    ASSERT_EQ(bad, 1);
    ASSERT_CONTAINS(sl_errmsg(), "record 1: checksum mismatch");
    sl_record_free(rec);
    sl_reader_free(r);

    /* With SL_READ_NO_VERIFY the record is not checked. */
    ASSERT_OK(sl_reader_open(&r, path, SL_READ_NO_VERIFY | SL_READ_NO_MMAP));
    ASSERT_OK(sl_record_create(&rec));
    int rc = sl_reader_read(r, 1, rec);
    ASSERT(rc == SL_OK || rc == SL_ECORRUPT);
    sl_record_free(rec);
    sl_reader_free(r);
}

SL_TEST(record_damage__flipped_frame_header) {
    char path[512];
    small_file(path, sizeof path, 4);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    uint32_t hb = ld32(b + 12);
    b[hb + 9] ^= 1;   /* record 0's frame checksum field */
    slr_write_file(path, b, len);
    free(b);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, SL_READ_NO_MMAP));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    ASSERT_RC(sl_reader_read(r, 0, rec), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), path);
    ASSERT_CONTAINS(sl_errmsg(), "record 0: frame header does not match the index");
    sl_record_free(rec);
    sl_reader_free(r);
}

SL_TEST(record_damage__flipped_index) {
    char path[512];
    small_file(path, sizeof path, 4);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    uint64_t io = ld64(b + len - 64);
    b[io + 8] ^= 0x10;
    slr_write_file(path, b, len);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "index checksum mismatch");
    free(b);
}

SL_TEST(record_damage__flipped_footer) {
    char path[512];
    small_file(path, sizeof path, 4);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    b[len - 64 + 16] ^= 0x01;   /* record count */
    slr_write_file(path, b, len);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "footer checksum mismatch");
    b[len - 64 + 16] ^= 0x01;
    b[len - 1] ^= 0x01;         /* trailing magic */
    slr_write_file(path, b, len);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "no footer");
    free(b);
}

SL_TEST(record_damage__flipped_header) {
    char path[512];
    small_file(path, sizeof path, 4);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    b[72 + 72] ^= 0x01;   /* first column's name */
    slr_write_file(path, b, len);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "header checksum mismatch");
    free(b);
}

SL_TEST(record_damage__footer_size_disagrees) {
    char path[512];
    small_file(path, sizeof path, 2);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    uint8_t *c = malloc(len + 64);
    memcpy(c, b, len);
    memcpy(c + len, b + len - 64, 64);   /* a second copy of the footer at the end */
    slr_write_file(path, c, len + 64);
    char want[128];
    snprintf(want, sizeof want, "truncated (file is %zu bytes, footer says %zu)", len + 64, len);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, want);
    free(b);
    free(c);
}

SL_TEST(record_damage__newer_version) {
    char path[512];
    small_file(path, sizeof path, 2);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    b[8] = 2;
    slr_write_file(path, b, len);
    slr_expect_open_fail(path, 0, SL_EUNSUPPORTED,
                         "format version 2 is newer than this reader (max 1)");
    /* Also with a valid checksum: the version alone decides. */
    reseal_header(b);
    slr_write_file(path, b, len);
    slr_expect_open_fail(path, SL_READ_NO_MMAP, SL_EUNSUPPORTED, "format version 2 is newer");
    b[8] = 0;
    reseal_header(b);
    slr_write_file(path, b, len);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "format version 0");
    free(b);
}

SL_TEST(record_damage__unknown_required_feature) {
    char path[512];
    small_file(path, sizeof path, 2);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    b[16 + 1] |= 0x01;   /* required feature bit 8 */
    reseal_header(b);
    slr_write_file(path, b, len);
    slr_expect_open_fail(path, 0, SL_EUNSUPPORTED, "required feature bits 0x100");
    free(b);
}

SL_TEST(record_damage__optional_feature_ignored) {
    char path[512];
    small_file(path, sizeof path, 3);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    b[24 + 5] |= 0x20;   /* an optional feature bit a reader may ignore */
    reseal_header(b);
    slr_write_file(path, b, len);
    slr_check_simple(path, 3, 1, 0);
    ASSERT_OK(slr_open_read_verify(path, SL_READ_NO_MMAP));
    free(b);
}

SL_TEST(record_damage__reserved_nonzero) {
    char path[512];
    small_file(path, sizeof path, 2);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    b[61] = 1;   /* header reserved u32 */
    reseal_header(b);
    slr_write_file(path, b, len);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "reserved");
    free(b);
}

SL_TEST(record_damage__out_of_range) {
    char path[512];
    small_file(path, sizeof path, 3);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    ASSERT_RC(sl_reader_read(r, 3, rec), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), path);
    ASSERT_CONTAINS(sl_errmsg(), "record 3 is out of range");
    ASSERT_RC(sl_reader_read(r, UINT64_MAX, rec), SL_EINVAL);
    const void *vals;
    ASSERT_RC(sl_reader_index_column(r, 1, &vals), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "not int64 or float64");
    ASSERT_RC(sl_reader_index_column(r, 7, &vals), SL_EINVAL);
    sl_record_free(rec);
    sl_reader_free(r);
}

static void count_progress(uint64_t done, uint64_t total, void *user) {
    uint64_t *p = user;
    ASSERT(done <= total);
    p[0]++;
    p[1] = done;
}

SL_TEST(record_damage__verify_keep_going) {
    char path[512];
    small_file(path, sizeof path, 6);
    size_t len;
    uint8_t *b = slr_read_file(path, &len);
    uint32_t hb = ld32(b + 12);
    uint64_t off = hb;
    for (int i = 0; i < 6; i++) {
        uint64_t l = ld64(b + off);
        if (i == 2 || i == 4)
            b[off + 16 + l - 1] ^= 0xff;   /* last byte of the payload (padding or data) */
        off += 16 + l;
    }
    slr_write_file(path, b, len);
    free(b);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    uint64_t bad = 0, prog[2] = {0, 0};
    ASSERT_RC(sl_reader_verify(r, 1, &bad, count_progress, prog), SL_ECORRUPT);
    ASSERT_EQ(bad, 2);
    ASSERT_CONTAINS(sl_errmsg(), "record 2: checksum mismatch");
    ASSERT(prog[0] >= 1);
    ASSERT_RC(sl_reader_verify(r, 0, &bad, NULL, NULL), SL_ECORRUPT);
    ASSERT_EQ(bad, 1);
    sl_reader_free(r);
}

SL_TEST(record_damage__verify_progress_reaches_total) {
    char path[512];
    small_file(path, sizeof path, 5000);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    uint64_t bad = 7, prog[2] = {0, 0};
    ASSERT_OK(sl_reader_verify(r, 0, &bad, count_progress, prog));
    ASSERT_EQ(bad, 0);
    ASSERT(prog[0] >= 2);
    ASSERT_EQ(prog[1], 5000);
    sl_reader_free(r);
}
