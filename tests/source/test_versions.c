/*
 * One object, one version for as long as a source reads it (io.h,
 * "versions"; docs/SOURCES.md, "One version per run"): a shard closed
 * under max_open_shards and opened again must be the bytes its first open
 * read, or the read fails naming it, never a record cut from another
 * version at the offsets found in the first. Local files here (the remote
 * half, where a copy of the old version may be read on from the shard
 * cache, is tests/python/test_versions.py against nginx).
 */
#include "test.h"
#include "core/core.h"
#include "io/io.h"
#include "source/source.h"
#include "record/record_format.h"
#include "tar_build.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARDS 4
#define PER 3

static char g_dir[1024];

static const char *tpath(int k) {
    static char buf[4][1200];
    static int n;
    n = (n + 1) % 4;
    snprintf(buf[n], sizeof buf[n], "%.1000s/v-%02d.tar", g_dir, k);
    return buf[n];
}

/* Sample j of shard k, version v: the same length in every version. */
static void text_of(int k, int j, int v, char *buf, size_t cap) {
    snprintf(buf, cap, "shard %d sample %d version %d %.*s", k, j, v, 10 + (k * 5 + j * 3) % 20,
             "<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<");
}

static void write_shard(const char *path, int k, int v) {
    tar_build b;
    tar_build_init(&b);
    for (int j = 0; j < PER; j++) {
        char name[64], text[128], cls[32];
        text_of(k, j, v, text, sizeof text);
        snprintf(name, sizeof name, "s%02d_%d.txt", k, j);
        tar_build_member(&b, name, text, strlen(text));
        snprintf(name, sizeof name, "s%02d_%d.cls", k, j);
        snprintf(cls, sizeof cls, "%d\n", k * 10 + j + v); /* a label of each version */
        tar_build_member(&b, name, cls, strlen(cls));
    }
    tar_build_write(&b, path);
}

/* Shard k replaced by its version v, the same size: by a rename over it (a
 * new file) or rewritten in place (the same inode, a later mtime). */
static void replace_shard(int k, int v, int in_place) {
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.new", tpath(k));
    write_shard(tmp, k, v);
    struct stat before, after;
    ASSERT_EQ(stat(tpath(k), &before), 0);
    if (in_place) {
        size_t n;
        unsigned char *d = sl_test_read_file(tmp, &n);
        ASSERT_EQ((long long)n, (long long)before.st_size);
        int fd = open(tpath(k), O_WRONLY);
        ASSERT(fd >= 0);
        ASSERT_EQ(pwrite(fd, d, n, 0), (ssize_t)n);
        close(fd);
        free(d);
        unlink(tmp);
        struct timespec ts[2] = {before.st_atim, before.st_mtim};
        ts[1].tv_sec += 5; /* filesystems with coarse clocks: a later mtime for sure */
        ASSERT_EQ(utimensat(AT_FDCWD, tpath(k), ts, 0), 0);
    } else {
        ASSERT_EQ(rename(tmp, tpath(k)), 0);
    }
    ASSERT_EQ(stat(tpath(k), &after), 0);
    ASSERT_EQ((long long)after.st_size, (long long)before.st_size);
}

static int open_tar(sl_source **out, const char *extra) {
    char spec[2048];
    snprintf(spec, sizeof spec, "{\"webdataset\": \"%.1000s/v-{00..%02d}.tar\", "
             "\"max_open_shards\": 1%s%s}", g_dir, SHARDS - 1, extra ? ", " : "",
             extra ? extra : "");
    return tar_build_open_spec(out, spec);
}

/* Record i must be version 0 of itself. */
static void expect_v0(sl_source *s, sl_source_cursor *cur, uint64_t i) {
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    ASSERT_OK(sl_source__read(s, cur, i, &smp));
    int k = (int)(i / PER), j = (int)(i % PER);
    char text[128];
    text_of(k, j, 0, text, sizeof text);
    ASSERT_STR_EQ(s->col[2].name, "txt");
    ASSERT_EQ(smp.col[2].nbytes, strlen(text));
    ASSERT(!memcmp(smp.col[2].data, text, strlen(text)));
    ASSERT_EQ(*(const int64_t *)smp.col[1].data, k * 10 + j);
    sl_sample_clear(&smp);
}

static void tar_case(int indexed, int in_place) {
    snprintf(g_dir, sizeof g_dir, "%.1000s", sl_test_tmpdir());
    for (int k = 0; k < SHARDS; k++) {
        write_shard(tpath(k), k, 0);
        if (indexed)
            ASSERT_OK(sl_source__index_tar(tpath(k), NULL));
    }
    sl_source *s = NULL;
    ASSERT_OK(open_tar(&s, indexed ? "\"index\": true" : "\"index\": false"));
    ASSERT_U64_EQ(s->count, SHARDS * PER);
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    expect_v0(s, cur, 0);           /* shard 0 opened: its version noted */
    expect_v0(s, cur, PER + 1);     /* shard 1: shard 0 closed (the bound is 1) */
    replace_shard(0, 1, in_place);
    if (indexed) /* the index said where the data was: rebuilt for the new one */
        ASSERT_OK(sl_source__index_tar(tpath(0), NULL));
    for (int j = 0; j < PER; j++) {
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        int rc = sl_source__read(s, cur, (uint64_t)j, &smp);
        ASSERT(rc < 0);
        ASSERT_EQ(smp.ncols, 0);
        ASSERT_CONTAINS(sl_errmsg(), "v-00.tar");
        ASSERT_CONTAINS(sl_errmsg(), indexed ? "changed after the source opened"
                                             : "changed since it was first read");
        /* the field that differs, not two equal counts ("25 records, now 25") */
        if (indexed) {
            ASSERT_CONTAINS(sl_errmsg(), "(its checksum of the data was ");
            ASSERT(!strstr(sl_errmsg(), "records then"));
        }
        ASSERT_CONTAINS(sl_errmsg(), "open the source again");
    }
    /* the other shards read on, version 0 */
    for (uint64_t i = PER; i < s->count; i++)
        expect_v0(s, cur, i);
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
    /* a new source reads the new version whole */
    ASSERT_OK(open_tar(&s, indexed ? "\"index\": true" : "\"index\": false"));
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    ASSERT_OK(sl_source__read(s, cur, 1, &smp));
    char text[128];
    text_of(0, 1, 1, text, sizeof text);
    ASSERT(!memcmp(smp.col[2].data, text, strlen(text)));
    ASSERT_EQ(*(const int64_t *)smp.col[1].data, 2);
    sl_sample_clear(&smp);
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
}

SL_TEST(source_versions__tar_scanned_shard_replaced_by_a_rename) { tar_case(0, 0); }
SL_TEST(source_versions__tar_scanned_shard_rewritten_in_place) { tar_case(0, 1); }
SL_TEST(source_versions__tar_indexed_shard_replaced_and_reindexed) { tar_case(1, 0); }

/* The index left as it was and the data replaced (the same size): the
 * first open after it (the index checks the bytes) and every reopen fail
 * naming the shard; no record of the new bytes is read. */
SL_TEST(source_versions__tar_indexed_shard_replaced_index_left) {
    snprintf(g_dir, sizeof g_dir, "%.1000s", sl_test_tmpdir());
    for (int k = 0; k < SHARDS; k++) {
        write_shard(tpath(k), k, 0);
        ASSERT_OK(sl_source__index_tar(tpath(k), NULL));
    }
    sl_source *s = NULL;
    ASSERT_OK(open_tar(&s, "\"index\": true"));
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    expect_v0(s, cur, 2);
    expect_v0(s, cur, PER);
    replace_shard(0, 1, 0);
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    ASSERT(sl_source__read(s, cur, 0, &smp) < 0);
    ASSERT_CONTAINS(sl_errmsg(), "v-00.tar");
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
}

/* ---- .slr: a dataset directory's shard replaced by another's ------------------ */

static void write_dataset(const char *dir, int v) {
    sl_schema *sch;
    ASSERT_OK(sl_schema_create(&sch));
    ASSERT_OK(sl_schema_add(sch, "idx", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(sch, "blob", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0));
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.shard_bytes = 4096;
    o.fsync = 0;
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, dir, sch, &o));
    for (int64_t i = 0; i < 40; i++) {
        uint8_t blob[300];
        for (int b = 0; b < 300; b++)
            blob[b] = (uint8_t)(i * 3 + b + v * 101);
        int64_t n = 300;
        sl_tensor t[2];
        sl_tensor_view(&t[0], &i, SL_I64, 0, NULL);
        sl_tensor_view(&t[1], blob, SL_U8, 1, &n);
        ASSERT_OK(sl_writer_append(w, t, 2));
    }
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(sch);
}

SL_TEST(source_versions__slr_shard_replaced_during_a_run) {
    char a[1200], b[1200], sa[1300], sb[1300];
    snprintf(a, sizeof a, "%.1000s/a.slr", sl_test_tmpdir());
    snprintf(b, sizeof b, "%.1000s/b.slr", sl_test_tmpdir());
    write_dataset(a, 0);
    write_dataset(b, 1);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, a, 0));
    ASSERT(sl_reader_shard_count(r) >= 3);
    sl_record__set_open_limit(r, 1);
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    uint64_t first1, n1;
    ASSERT_OK(sl_reader_shard_range(r, 1, &first1, &n1));
    ASSERT_OK(sl_reader_read(r, 0, rec));
    ASSERT_OK(sl_reader_read(r, first1, rec)); /* shard 0 closed */
    snprintf(sa, sizeof sa, "%s/shard-00000.slr", a);
    snprintf(sb, sizeof sb, "%s/shard-00000.slr", b);
    struct stat x, y;
    ASSERT_EQ(stat(sa, &x), 0);
    ASSERT_EQ(stat(sb, &y), 0);
    ASSERT_EQ((long long)x.st_size, (long long)y.st_size);
    ASSERT_EQ(rename(sb, sa), 0);
    ASSERT_RC(sl_reader_read(r, 1, rec), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "shard-00000.slr: record 1: changed since it was first read");
    ASSERT_OK(sl_reader_read(r, first1 + 1, rec));
    sl_record_free(rec);
    sl_reader_free(r);
    /* a reader opened now: the shard does not match the manifest, and the
     * message says which fields differ, not two equal lists */
    ASSERT_OK(sl_reader_open(&r, a, 0));
    ASSERT_OK(sl_record_create(&rec));
    ASSERT_RC(sl_reader_read(r, 1, rec), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "does not match the manifest: its footer checksum is ");
    const char *m = sl_errmsg();
    ASSERT(strstr(m, "records") == NULL); /* the counts agree: not said */
    ASSERT(strstr(m, "bytes") == NULL);
    sl_record_free(rec);
    sl_reader_free(r);
}

/* ---- the io layer's words ----------------------------------------------------- */

SL_TEST(source_versions__io_versions_compare_and_read) {
    char p[1200];
    snprintf(p, sizeof p, "%.1000s/f.bin", sl_test_tmpdir());
    sl_test_write_file(p, "0123456789", 10);
    sl_io *io;
    ASSERT_OK(sl_io__open(&io, p, 0));
    char v0[SL_IO_VERSION_MAX];
    snprintf(v0, sizeof v0, "%s", sl_io__version(io));
    sl_io__close(io);
    ASSERT_OK(sl_io__open_version(&io, p, SL_IO_MAP, v0)); /* the same file */
    sl_io__close(io);
    char words[200];
    sl_io__version_words(p, v0, words, sizeof words);
    ASSERT_CONTAINS(words, "10 bytes, modified ");
    /* an ETag decides when both have one (W/ aside); else Last-Modified */
    ASSERT(sl_io__same_version("5\n\"a\"\nMon", "5\nW/\"a\"\nTue"));
    ASSERT(!sl_io__same_version("5\n\"a\"\nMon", "5\n\"b\"\nMon"));
    ASSERT(!sl_io__same_version("5\n\"a\"\nMon", "6\n\"a\"\nMon"));
    ASSERT(sl_io__same_version("5\n\nMon", "5\n\"b\"\nMon"));
    ASSERT(!sl_io__same_version("5\n\nMon", "5\n\nTue"));
    sl_io__version_words("http://h/x", "5\n\"a\"\nMon", words, sizeof words);
    ASSERT_STR_EQ(words, "ETag \"a\"");
    sl_io__version_words("http://h/x", "5\n\nMon, 01 Jan", words, sizeof words);
    ASSERT_STR_EQ(words, "Last-Modified Mon, 01 Jan, 5 bytes");
    /* rewritten, the same size: another version */
    struct stat st;
    ASSERT_EQ(stat(p, &st), 0);
    sl_test_write_file(p, "9876543210", 10);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    ts[1].tv_sec += 3;
    ASSERT_EQ(utimensat(AT_FDCWD, p, ts, 0), 0);
    ASSERT_RC(sl_io__open_version(&io, p, SL_IO_MAP, v0), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "f.bin: changed since it was first read (10 bytes, modified ");
    ASSERT(io == NULL);
}

/* "damaged twice" always ends with what to suspect, however long the URL
 * and the two causes are (it was cut at "the object itself ...;"). */
SL_TEST(source_versions__damaged_twice_is_never_cut) {
    char url[300], cause[200];
    snprintf(url, sizeof url, "http://127.0.0.1:8080/%0200d/shard-00003.tar", 0);
    memset(cause, 'x', sizeof cause - 1);
    cause[sizeof cause - 1] = 0;
    char first[SL__ERRMSG_MAX + 512];
    snprintf(first, sizeof first, "%s: data checksum mismatch %s", url, cause);
    sl__error(SL_ECORRUPT, "%s: record 7 checksum mismatch %s", url, cause);
    ASSERT_RC(sl_io__twice_damaged(url, first), SL_ECORRUPT);
    const char *m = sl_errmsg();
    ASSERT_CONTAINS(m, url);
    ASSERT_CONTAINS(m, ": damaged twice: the first copy (data checksum mismatch xx");
    ASSERT_CONTAINS(m, "...) and the copy fetched again (record 7 checksum mismatch xx");
    size_t n = strlen(m);
    static const char tail[] = "or every fetch is damaged (a proxy?)";
    if (!(n >= sizeof tail - 1 && !strcmp(m + n - (sizeof tail - 1), tail)))
        sl_test_fail(__FILE__, __LINE__, "cut: %s (%zu bytes)", m, n);
    /* short causes are kept whole */
    sl__error(SL_ECORRUPT, "%s: second cause", url);
    snprintf(first, sizeof first, "%s: first cause", url);
    sl_io__twice_damaged(url, first);
    ASSERT_CONTAINS(sl_errmsg(), "the first copy (first cause) and the copy fetched again (second "
                                 "cause); ");
}
