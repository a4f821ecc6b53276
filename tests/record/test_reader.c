/*
 * test_reader.c — reader behaviour: metadata, index columns, mmap and pread
 * agreement, concurrent reads, zero-copy views, and allocation failures.
 */
#include "slr_testutil.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

SL_TEST(record_reader__metadata) {
    char path[512];
    sl_test_path(path, sizeof path, "m.slr");
    sl_schema *s = slr_simple_schema(0);
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, NULL));
    ASSERT_OK(sl_writer_set_meta(w, "classes", "[\"cat\",\"dog\"]"));
    ASSERT_OK(sl_writer_set_meta(w, "source", "unit test"));
    ASSERT_OK(slr_simple_append(w, 0, 0));
    ASSERT_OK(sl_writer_set_meta(w, "source", "replaced after the first record"));
    ASSERT_OK(sl_writer_set_meta(w, "empty", ""));
    ASSERT_RC(sl_writer_set_meta(w, "", "x"), SL_EINVAL);
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(s);

    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    ASSERT_EQ(sl_reader_meta_count(r), 3);
    ASSERT_STR_EQ(sl_reader_meta(r, "classes"), "[\"cat\",\"dog\"]");
    ASSERT_STR_EQ(sl_reader_meta(r, "source"), "replaced after the first record");
    ASSERT_STR_EQ(sl_reader_meta(r, "empty"), "");
    ASSERT(sl_reader_meta(r, "missing") == NULL);
    ASSERT_STR_EQ(sl_reader_meta_key(r, 0), "classes");
    ASSERT(sl_reader_meta_key(r, 3) == NULL);
    sl_reader_free(r);
}

SL_TEST(record_reader__index_columns) {
    char path[512];
    sl_test_path(path, sizeof path, "i.slr");
    sl_schema *s;
    ASSERT_OK(sl_schema_create(&s));
    ASSERT_OK(sl_schema_add(s, "img", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(s, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(s, "score", SL_COL_FLOAT64, SL_DTYPE_INVALID, 0, NULL, 0));
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, NULL));
    for (int64_t i = 0; i < 300; i++) {
        int64_t label = i * i - 1000;
        double score = 1.0 / (double)(i + 1);
        uint8_t img[4] = {1, 2, 3, (uint8_t)i};
        int64_t n = 4;
        sl_tensor t[3];
        sl_tensor_view(&t[0], img, SL_U8, 1, &n);
        sl_tensor_view(&t[1], &label, SL_I64, 0, NULL);
        sl_tensor_view(&t[2], &score, SL_F64, 0, NULL);
        ASSERT_OK(sl_writer_append(w, t, 3));
    }
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(s);

    /* pread: the index copied to the heap; mapped: used in the mapping */
    const unsigned flags[2] = {SL_READ_NO_MMAP, 0};
    for (int f = 0; f < 2; f++) {
        sl_reader *r;
        ASSERT_OK(sl_reader_open(&r, path, flags[f]));
        const void *lv, *sv;
        ASSERT_OK(sl_reader_index_column(r, 1, &lv));
        ASSERT_OK(sl_reader_index_column(r, 2, &sv));
        ASSERT_RC(sl_reader_index_column(r, 0, &lv), SL_EINVAL);
        ASSERT_OK(sl_reader_index_column(r, 1, &lv));
        for (int64_t i = 0; i < 300; i++) {
            ASSERT_EQ(((const int64_t *)lv)[i], i * i - 1000);
            ASSERT(((const double *)sv)[i] == 1.0 / (double)(i + 1));
        }
        sl_reader_free(r);
    }
}

/* The mapped index is used in place: an entry rewritten after open (another
 * process changing the file) is caught when used, not followed out of the
 * file. */
SL_TEST(record_reader__index_changed_after_open) {
    char path[512];
    sl_test_path(path, sizeof path, "changed.slr");
    slr_write_simple(path, 50, 0, 0);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    int fd = open(path, O_RDWR);
    ASSERT(fd >= 0);
    struct stat st;
    ASSERT(fstat(fd, &st) == 0);
    uint8_t foot[64];
    ASSERT(pread(fd, foot, 64, st.st_size - 64) == 64);
    uint64_t index_offset;
    memcpy(&index_offset, foot, 8); /* little-endian, as the format */
    uint64_t huge = (uint64_t)1 << 60;
    ASSERT(pwrite(fd, &huge, 8, (off_t)(index_offset + 7 * 24)) == 8);
    close(fd);
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    ASSERT_OK(sl_reader_read(r, 6, rec));
    ASSERT_RC(sl_reader_read(r, 7, rec), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "record 7");
    ASSERT_CONTAINS(sl_errmsg(), "outside the data region");
    ASSERT_OK(sl_reader_read(r, 8, rec));
    sl_record_free(rec);
    sl_reader_free(r);
}

/* mmap and pread give identical bytes; mmap views point into the mapping. */
SL_TEST(record_reader__mmap_and_pread_agree) {
    char path[512];
    sl_test_path(path, sizeof path, "a.slr");
    slr_write_simple(path, 200, 1, 0);
    sl_reader *rm, *rp;
    ASSERT_OK(sl_reader_open(&rm, path, 0));
    ASSERT_OK(sl_reader_open(&rp, path, SL_READ_NO_MMAP));
    sl_record *a, *b;
    ASSERT_OK(sl_record_create(&a));
    ASSERT_OK(sl_record_create(&b));
    for (uint64_t i = 0; i < 200; i++) {
        ASSERT_OK(sl_reader_read(rm, i, a));
        ASSERT_OK(sl_reader_read(rp, i, b));
        for (int c = 0; c < 3; c++) {
            const sl_tensor *x = sl_record_column(a, c), *y = sl_record_column(b, c);
            ASSERT_EQ(x->dtype, y->dtype);
            ASSERT_EQ(x->ndim, y->ndim);
            ASSERT_EQ(x->nbytes, y->nbytes);
            for (int d = 0; d < x->ndim; d++)
                ASSERT_EQ(x->shape[d], y->shape[d]);
            ASSERT(x->nbytes == 0 || memcmp(x->data, y->data, x->nbytes) == 0);
            ASSERT(((uintptr_t)x->data % 8) == 0 || x->nbytes == 0);
        }
    }
    /* Zero copy: the two reads of one record in mmap mode see the same address. */
    ASSERT_OK(sl_reader_read(rm, 7, a));
    const void *p1 = sl_record_column(a, 1)->data;
    ASSERT_OK(sl_reader_read(rm, 8, a));
    ASSERT_OK(sl_reader_read(rm, 7, b));
    ASSERT(sl_record_column(b, 1)->data == p1);
    sl_record_free(a);
    sl_record_free(b);
    sl_reader_free(rm);
    sl_reader_free(rp);
}

typedef struct thr_arg {
    const sl_reader *r;
    int seed;
    int failures;
} thr_arg;

static void *reader_thread(void *p) {
    thr_arg *a = p;
    sl_record *rec;
    if (sl_record_create(&rec) != SL_OK) {
        a->failures++;
        return NULL;
    }
    uint64_t n = sl_reader_count(a->r);
    /* a directory's index columns are joined on first use: by one thread,
     * while the others wait or read */
    const void *labels = NULL;
    if (sl_reader_index_column(a->r, 0, &labels) != SL_OK)
        a->failures++;
    for (uint64_t k = 0; labels && k < n; k++)
        if (((const int64_t *)labels)[k] != (int64_t)(k % 10))
            a->failures++;
    for (uint64_t k = 0; k < 3 * n; k++) {
        uint64_t i = (k * 7919 + (uint64_t)a->seed * 131) % n;
        if (sl_reader_read(a->r, i, rec) != SL_OK) {
            a->failures++;
            continue;
        }
        const sl_tensor *t = sl_record_column(rec, 0);
        if (*(const int64_t *)t->data != (int64_t)(i % 10))
            a->failures++;
        t = sl_record_column(rec, 2);
        if (t->shape[0] != (int64_t)(i % 5))
            a->failures++;
        for (uint64_t j = 0; j < i % 5; j++)
            if (((const float *)t->data)[j] != (float)i + (float)j)
                a->failures++;
    }
    sl_record_free(rec);
    return NULL;
}

static void threads_case(unsigned flags, uint64_t shard_bytes) {
    char path[512];
    sl_test_path(path, sizeof path, "t.slr");
    slr_write_simple(path, 400, 1, shard_bytes);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, flags));
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){r, i, 0};
        ASSERT_EQ(pthread_create(&th[i], NULL, reader_thread, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        ASSERT_EQ(pthread_join(th[i], NULL), 0);
        ASSERT_EQ(args[i].failures, 0);
    }
    sl_reader_free(r);
}

SL_TEST(record_reader__threads) {
    threads_case(0, 0);
    threads_case(SL_READ_NO_MMAP, 0);
}

SL_TEST(record_reader__threads_sharded) {
    threads_case(0, 2048);
}

/* A copy outlives the record and the reader. */
SL_TEST(record_reader__copy_outlives_reader) {
    char path[512];
    sl_test_path(path, sizeof path, "c.slr");
    slr_write_simple(path, 20, 1, 0);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    ASSERT_OK(sl_reader_read(r, 16, rec));
    sl_tensor copy;
    ASSERT_OK(sl_tensor_copy(&copy, sl_record_column(rec, 1)));
    sl_record_free(rec);
    sl_reader_free(r);
    ASSERT_EQ(copy.shape[0], 16);
    for (int k = 0; k < 16; k++)
        ASSERT_EQ(((uint8_t *)copy.data)[k], (uint8_t)(16 * 7 + k));
    sl_tensor_release(&copy);
}

/* Fail allocation 1, 2, ... during open + read-all + verify until the whole
 * sequence succeeds; each failure must be SL_ENOMEM with a message (never
 * "corrupt": those inside zstd and, for a sharded dataset, inside cJSON
 * reading the manifest included). ASan reports any leak. */
static void oom_read_loop(const char *path, unsigned flags) {
    for (uint64_t n = 1;; n++) {
        ASSERT(n < 10000);
        sl_errclear();
        sl__alloc_fail_at(n);
        sl_reader *r = NULL;
        sl_record *rec = NULL;
        int rc = sl_reader_open(&r, path, flags);
        if (rc == SL_OK)
            rc = sl_record_create(&rec);
        for (uint64_t i = 0; rc == SL_OK && i < sl_reader_count(r); i++)
            rc = sl_reader_read(r, i, rec);
        if (rc == SL_OK)
            rc = sl_reader_verify(r, 0, NULL, NULL, NULL);
        sl__alloc_fail_at(0);
        sl_record_free(rec);
        sl_reader_free(r);
        if (rc == SL_OK)
            break;
        if (rc != SL_ENOMEM)
            sl_test_fail(__FILE__, __LINE__, "fail_at %llu: got %s (%s)", (unsigned long long)n,
                         sl_status_str(rc), sl_errmsg());
        ASSERT(sl_errmsg()[0] != 0);
    }
}

SL_TEST(record_reader__oom_open_read) {
    char path[512];
    sl_test_path(path, sizeof path, "o.slr");
    slr_write_simple(path, 30, 1, 0);
    oom_read_loop(path, 0);
    oom_read_loop(path, SL_READ_NO_MMAP);
}

SL_TEST(record_reader__oom_open_read_sharded) {
    char path[512];
    sl_test_path(path, sizeof path, "o");
    slr_write_simple(path, 60, 1, 1024);
    oom_read_loop(path, 0);
}

/* Writer OOM: open, append, set_meta, close. Each failure is SL_ENOMEM, and
 * after free nothing is left behind: no dataset, no temporaries. The failed
 * allocations include zstd's (the "vec" column is compressed; its context
 * allocates through the seam) and cJSON's (the manifest of the shards). */
SL_TEST(record_reader__oom_writer) {
    char path[512], partial[600];
    sl_test_path(path, sizeof path, "w");
    snprintf(partial, sizeof partial, "%s.partial", path);
    sl_schema *s = slr_simple_schema(1);
    for (uint64_t n = 1;; n++) {
        ASSERT(n < 10000);
        sl_errclear();
        sl_writer_options o = SL_WRITER_OPTIONS_INIT;
        o.shard_bytes = 1024;
        o.fsync = 0;
        sl__alloc_fail_at(n);
        sl_writer *w = NULL;
        int rc = sl_writer_open(&w, path, s, &o);
        for (uint64_t i = 0; rc == SL_OK && i < 40; i++)
            rc = slr_simple_append(w, i, 1);
        if (rc == SL_OK)
            rc = sl_writer_set_meta(w, "k", "v");
        if (rc == SL_OK)
            rc = sl_writer_close(w);
        sl__alloc_fail_at(0);
        sl_writer_free(w);
        if (rc == SL_OK)
            break;
        if (rc != SL_ENOMEM)
            sl_test_fail(__FILE__, __LINE__, "fail_at %llu: got %s (%s)", (unsigned long long)n,
                         sl_status_str(rc), sl_errmsg());
        ASSERT(sl_errmsg()[0] != 0);
        ASSERT(!slr_exists(path));
        ASSERT(!slr_exists(partial));
    }
    sl_schema_free(s);
    slr_check_simple(path, 40, 1, 0);
}

/* A zero-copy view can outlive the reader: its buf owns the file mapping. In
 * pread mode and for decompressed columns there is no buf; copy instead. */
SL_TEST(record_reader__view_outlives_reader) {
    char path[512];
    sl_test_path(path, sizeof path, "v.slr");
    slr_write_simple(path, 20, 1, 0);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    ASSERT_OK(sl_reader_read(r, 13, rec));
    sl_tensor keep = *sl_record_column(rec, 1);
    ASSERT(keep.buf != NULL);
    ASSERT(sl_record_column(rec, 2)->buf == NULL);   /* zstd: record scratch */
    sl_buffer_retain(keep.buf);
    sl_record_free(rec);
    sl_reader_free(r);
    ASSERT_EQ(sl_buffer_refcount(keep.buf), 1);
    ASSERT_EQ(keep.shape[0], 13);
    for (int k = 0; k < 13; k++)
        ASSERT_EQ(((const uint8_t *)keep.data)[k], (uint8_t)(13 * 7 + k));
    sl_tensor_release(&keep);   /* the last reference: unmaps */

    ASSERT_OK(sl_reader_open(&r, path, SL_READ_NO_MMAP));
    ASSERT_OK(sl_record_create(&rec));
    ASSERT_OK(sl_reader_read(r, 13, rec));
    ASSERT(sl_record_column(rec, 1)->buf == NULL);
    sl_record_free(rec);
    sl_reader_free(r);
}
