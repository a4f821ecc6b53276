/*
 * slr_testutil.h — small helpers shared by the record tests: a simple
 * two/three-column dataset, file byte helpers and error expectations.
 */
#ifndef SLR_TESTUTIL_H
#define SLR_TESTUTIL_H

#include "test.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLR_UNUSED __attribute__((unused))

/* Simple dataset: "label" INT64 = i % 10, "data" BYTES of length i % 17 with
 * bytes (i * 7 + k), and, with `with_array`, "vec" ARRAY float32 [-1] zstd of
 * length i % 5 holding i + k. */
static SLR_UNUSED sl_schema *slr_simple_schema(int with_array) {
    sl_schema *s;
    ASSERT_OK(sl_schema_create(&s));
    ASSERT_OK(sl_schema_add(s, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(s, "data", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0));
    if (with_array) {
        int64_t shape[1] = {-1};
        ASSERT_OK(sl_schema_add(s, "vec", SL_COL_ARRAY, SL_F32, 1, shape, SL_COLF_ZSTD));
    }
    return s;
}

/* Append record i of the simple dataset; returns the writer's status. */
static SLR_UNUSED int slr_simple_append(sl_writer *w, uint64_t i, int with_array) {
    int64_t label = (int64_t)(i % 10);
    uint8_t data[17];
    float vec[5];
    int64_t dlen = (int64_t)(i % 17), vlen = (int64_t)(i % 5);
    for (int64_t k = 0; k < dlen; k++)
        data[k] = (uint8_t)(i * 7 + (uint64_t)k);
    for (int64_t k = 0; k < vlen; k++)
        vec[k] = (float)i + (float)k;
    sl_tensor t[3];
    sl_tensor_view(&t[0], &label, SL_I64, 0, NULL);
    sl_tensor_view(&t[1], data, SL_U8, 1, &dlen);
    sl_tensor_view(&t[2], vec, SL_F32, 1, &vlen);
    return sl_writer_append(w, t, with_array ? 3 : 2);
}

static SLR_UNUSED void slr_simple_check(const sl_record *rec, uint64_t i, int with_array) {
    const sl_tensor *t = sl_record_column(rec, 0);
    ASSERT_EQ(*(const int64_t *)t->data, (int64_t)(i % 10));
    t = sl_record_column(rec, 1);
    ASSERT_EQ(t->shape[0], (int64_t)(i % 17));
    for (uint64_t k = 0; k < i % 17; k++)
        ASSERT_EQ(((const uint8_t *)t->data)[k], (uint8_t)(i * 7 + k));
    if (with_array) {
        t = sl_record_column(rec, 2);
        ASSERT_EQ(t->shape[0], (int64_t)(i % 5));
        for (uint64_t k = 0; k < i % 5; k++)
            ASSERT(((const float *)t->data)[k] == (float)i + (float)k);
    }
}

/* Write n records of the simple dataset at path. */
static SLR_UNUSED void slr_write_simple(const char *path, uint64_t n, int with_array,
                                        uint64_t shard_bytes) {
    sl_schema *s = slr_simple_schema(with_array);
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.shard_bytes = shard_bytes;
    o.fsync = 0;
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, &o));
    for (uint64_t i = 0; i < n; i++)
        ASSERT_OK(slr_simple_append(w, i, with_array));
    ASSERT_OK(sl_writer_set_meta(w, "classes", "[\"a\",\"b\"]"));
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(s);
}

/* Open and read every record, checking values. */
static SLR_UNUSED void slr_check_simple(const char *path, uint64_t n, int with_array,
                                        unsigned flags) {
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, flags));
    ASSERT_EQ(sl_reader_count(r), n);
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    for (uint64_t i = 0; i < n; i++) {
        ASSERT_OK(sl_reader_read(r, i, rec));
        slr_simple_check(rec, i, with_array);
    }
    sl_record_free(rec);
    sl_reader_free(r);
}

/* Whole-file helpers (the runner's). */
#define slr_read_file sl_test_read_file
#define slr_write_file sl_test_write_file

static SLR_UNUSED int slr_exists(const char *path) { return access(path, F_OK) == 0; }

/* Open must fail with `code` and a message containing both `path` and `what`. */
static SLR_UNUSED void slr_expect_open_fail(const char *path, unsigned flags, int code,
                                            const char *what) {
    sl_reader *r = NULL;
    ASSERT_RC(sl_reader_open(&r, path, flags), code);
    ASSERT(r == NULL);
    ASSERT_CONTAINS(sl_errmsg(), path);
    ASSERT_CONTAINS(sl_errmsg(), what);
}

/* A directory whose shard holding record `i` is damaged: open succeeds (it
 * reads only the manifest and the first shard's header), reading record i
 * fails with `code` and a message containing `what` and the record's
 * number, every time, and verify reports the same. */
static SLR_UNUSED void slr_expect_read_fail(const char *path, uint64_t i, int code,
                                            const char *what) {
    sl_reader *r = NULL;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    char rtext[64];
    snprintf(rtext, sizeof rtext, "record %llu: ", (unsigned long long)i);
    for (int k = 0; k < 2; k++) {
        ASSERT_RC(sl_reader_read(r, i, rec), code);
        ASSERT_CONTAINS(sl_errmsg(), what);
        ASSERT_CONTAINS(sl_errmsg(), rtext);
    }
    uint64_t bad = 0;
    ASSERT_RC(sl_reader_verify(r, 1, &bad, NULL, NULL), code);
    ASSERT_CONTAINS(sl_errmsg(), what);
    ASSERT(bad > 0);
    sl_record_free(rec);
    sl_reader_free(r);
}

/* Open, read every record, then verify: the first failure's status (SL_OK if
 * all pass). The message is left in sl_errmsg(). */
static SLR_UNUSED int slr_open_read_verify(const char *path, unsigned flags) {
    sl_reader *r = NULL;
    int rc = sl_reader_open(&r, path, flags);
    if (rc < 0)
        return rc;
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    for (uint64_t i = 0; i < sl_reader_count(r) && rc == SL_OK; i++)
        rc = sl_reader_read(r, i, rec);
    if (rc == SL_OK)
        rc = sl_reader_verify(r, 0, NULL, NULL, NULL);
    sl_record_free(rec);
    sl_reader_free(r);
    return rc;
}


/* `got` (a file, or a directory of files) holds exactly `want`'s bytes: the
 * same names, the same contents (what "byte for byte the same dataset"
 * means in the resume tests). */
static SLR_UNUSED void slr_same_files(const char *want, const char *got) {
    struct stat a, b;
    ASSERT_EQ(stat(want, &a), 0);
    ASSERT_EQ(stat(got, &b), 0);
    ASSERT_EQ(S_ISDIR(a.st_mode), S_ISDIR(b.st_mode));
    if (!S_ISDIR(a.st_mode)) {
        size_t n, m;
        unsigned char *p = sl_test_read_file(want, &n), *q = sl_test_read_file(got, &m);
        ASSERT_EQ((long long)n, (long long)m);
        if (memcmp(p, q, n))
            sl_test_fail(__FILE__, __LINE__, "%s differs from %s", got, want);
        free(p);
        free(q);
        return;
    }
    int nw = 0, ng = 0;
    DIR *d = opendir(want);
    ASSERT(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char x[2400], y[2400];
        snprintf(x, sizeof x, "%.1100s/%.1100s", want, e->d_name);
        snprintf(y, sizeof y, "%.1100s/%.1100s", got, e->d_name);
        slr_same_files(x, y);
        nw++;
    }
    closedir(d);
    d = opendir(got);
    ASSERT(d);
    while ((e = readdir(d)))
        ng += e->d_name[0] != '.';
    closedir(d);
    ASSERT_EQ(nw, ng);
}

/* A file, or a directory of files (a dataset, a .partial), removed. */
static SLR_UNUSED void slr_remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[2400];
        snprintf(p, sizeof p, "%.1100s/%.1100s", path, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(path);
}

#endif /* SLR_TESTUTIL_H */
