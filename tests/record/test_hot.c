/*
 * test_hot.c — small local shards copied onto transparent huge pages for a
 * global shuffle's scattered reads (record_reader.c, "Small shards on huge
 * pages"): the reads give the same bytes from the copy as from the file;
 * views read before the copy stay valid; the copy is advised MADV_HUGEPAGE
 * (its smaps VmFlags hold "hg"), read-only, and unmapped with the reader;
 * nothing is copied over the
 * budget, for pread readers, shards of large records, or a directory whose
 * shards are closed as they go.
 */
#include "slr_testutil.h"

#include "record/record_format.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define REC 784

static void rec_bytes(uint64_t i, uint8_t *out, size_t n) {
    for (size_t k = 0; k < n; k++)
        out[k] = (uint8_t)(sl_mix64(i * 4096 + k) >> 17);
}

/* n records of one "x" BYTES column of `size` bytes each (shards of about
 * shard_bytes; 0: one file). */
static void write_bytes_ds(const char *path, uint64_t n, size_t size, uint64_t shard_bytes) {
    sl_schema *s;
    ASSERT_OK(sl_schema_create(&s));
    ASSERT_OK(sl_schema_add(s, "x", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0));
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.shard_bytes = shard_bytes;
    o.fsync = 0;
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, &o));
    uint8_t *buf = malloc(size);
    ASSERT(buf != NULL);
    for (uint64_t i = 0; i < n; i++) {
        rec_bytes(i, buf, size);
        int64_t len = (int64_t)size;
        sl_tensor t;
        sl_tensor_view(&t, buf, SL_U8, 1, &len);
        ASSERT_OK(sl_writer_append(w, &t, 1));
    }
    free(buf);
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(s);
}

static void check_rec(const sl_record *rec, uint64_t i, size_t size) {
    const sl_tensor *t = sl_record_column(rec, 0);
    ASSERT_EQ(t->shape[0], (int64_t)size);
    uint8_t want[8192];
    ASSERT(size <= sizeof want);
    rec_bytes(i, want, size);
    ASSERT(!memcmp(t->data, want, size));
}

/* The smaps entry of the mapping holding address `p`: whether it is a file
 * (a path after the inode), and its VmFlags line. */
static void mapping_of(const void *p, int *file, char *flags, size_t cap) {
    FILE *f = fopen("/proc/self/smaps", "r");
    ASSERT(f != NULL);
    char line[4096];
    int in = 0;
    *file = -1;
    flags[0] = 0;
    uintptr_t a = (uintptr_t)p;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char path[4096] = "";
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %4095s", &lo, &hi, path) >= 2 &&
            strchr(line, '-') == line + strspn(line, "0123456789abcdef")) {
            in = a >= lo && a < hi;
            if (in)
                *file = path[0] == '/';
            continue;
        }
        if (in && !strncmp(line, "VmFlags:", 8)) {
            size_t m = strlen(line + 8);
            m = m < cap - 1 ? m : cap - 1;
            memcpy(flags, line + 8, m);
            flags[m] = 0;
            break;
        }
    }
    fclose(f);
}

static int thp_never(void) {
    char buf[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f)
        return 1;
    int never = !fgets(buf, sizeof buf, f) || strstr(buf, "[never]") != NULL;
    fclose(f);
    return never;
}

SL_TEST(record_hot__same_bytes_from_huge_pages) {
    if (thp_never())
        sl_test_skip("transparent huge pages are off in this kernel");
    char path[512];
    sl_test_path(path, sizeof path, "hot.slr");
    const uint64_t n = 4000; /* 3.1 MB: two huge pages and a part */
    write_bytes_ds(path, n, REC, 0);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_record *before, *after;
    ASSERT_OK(sl_record_create(&before));
    ASSERT_OK(sl_record_create(&after));
    ASSERT_OK(sl_reader_read(r, 1234, before)); /* a view of the file mapping */
    int file;
    char flags[512];
    mapping_of(sl_record_column(before, 0)->data, &file, flags, sizeof flags);
    ASSERT_EQ(file, 1);

    uint64_t size = sl_reader_shard_bytes(r, 0);
    ASSERT_EQ(sl_record__hold_hot(r, size - 1), 0); /* over the budget: nothing */
    ASSERT_EQ(sl_record__hold_hot(r, size), size);
    ASSERT_EQ(sl_record__hold_hot(r, size), 0); /* once */

    /* every record the same from the copy, which is anonymous, advised for
     * huge pages and read-only */
    for (uint64_t i = 0; i < n; i++) {
        uint64_t j = (i * 2654435761u) % n;
        ASSERT_OK(sl_reader_read(r, j, after));
        check_rec(after, j, REC);
    }
    const void *d = sl_record_column(after, 0)->data;
    mapping_of(d, &file, flags, sizeof flags);
    ASSERT_EQ(file, 0);
    ASSERT(strstr(flags, " hg") != NULL);
    ASSERT(strstr(flags, " rd") != NULL && strstr(flags, " wr") == NULL);
    /* the view read before the copy still reads the file */
    check_rec(before, 1234, REC);
    sl_record_free(after);
    sl_reader_free(r);
    mapping_of(d, &file, flags, sizeof flags); /* unmapped with the reader */
    ASSERT_EQ(file, -1);
    sl_record_free(before);
}

SL_TEST(record_hot__only_small_local_mapped_kept_shards) {
    if (thp_never())
        sl_test_skip("transparent huge pages are off in this kernel");
    char path[512];
    sl_reader *r;
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    /* pread mode: no mapping to copy */
    sl_test_path(path, sizeof path, "small.slr");
    write_bytes_ds(path, 500, REC, 0);
    ASSERT_OK(sl_reader_open(&r, path, SL_READ_NO_MMAP));
    ASSERT_EQ(sl_record__hold_hot(r, 1u << 30), 0);
    sl_reader_free(r);
    /* large records (read by copy, COPY_MIN_RECORD): not copied */
    sl_test_path(path, sizeof path, "large.slr");
    write_bytes_ds(path, 100, 6000, 0);
    ASSERT_OK(sl_reader_open(&r, path, 0));
    ASSERT_EQ(sl_record__hold_hot(r, 1u << 30), 0);
    sl_reader_free(r);
    /* a directory of a few shards, every one kept open: all copied */
    sl_test_path(path, sizeof path, "dir");
    write_bytes_ds(path, 2000, REC, 400000);
    ASSERT_OK(sl_reader_open(&r, path, 0));
    int ns = sl_reader_shard_count(r);
    ASSERT(ns >= 3);
    ASSERT(sl_record__keeps_shards(r));
    uint64_t all = 0;
    for (int k = 0; k < ns; k++)
        all += sl_reader_shard_bytes(r, k);
    ASSERT_EQ(sl_record__hold_hot(r, all), all);
    for (uint64_t i = 0; i < 2000; i += 7) {
        ASSERT_OK(sl_reader_read(r, i, rec));
        check_rec(rec, i, REC);
    }
    sl_reader_free(r);
    /* the same directory with shards closed as they go: not copied */
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_record__set_open_limit(r, 1);
    ASSERT(!sl_record__keeps_shards(r));
    ASSERT_EQ(sl_record__hold_hot(r, all), 0);
    ASSERT_OK(sl_reader_read(r, 1999, rec));
    check_rec(rec, 1999, REC);
    sl_reader_free(r);
    sl_record_free(rec);
}
