/*
 * test_lazy.c — a dataset directory opens its shards when a read needs them
 * and closes them again (record_reader.c, "Open shards"): open touches only
 * the manifest and the first shard's header; a damaged shard costs only its
 * own records; the open-shard limit holds; a closed and reopened shard reads
 * the same bytes; reads racing closes are safe (this file runs under TSan).
 *
 * Which shards are mapped is read from /proc/self/maps, so the first case
 * tests the behaviour through the public API alone.
 */
#include "slr_testutil.h"

#include "record/record_format.h"

#include <pthread.h>

/* How many distinct files named "<dir>/shard-..." this process maps now;
 * `mapped` (may be NULL) gets a flag per shard number (< cap). */
static int mapped_shards(const char *dir, char *mapped, int cap) {
    FILE *f = fopen("/proc/self/maps", "r");
    ASSERT(f != NULL);
    char line[4096], prefix[600];
    snprintf(prefix, sizeof prefix, "%s/shard-", dir);
    char *seen = calloc((size_t)cap, 1);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        char *at = strstr(line, prefix);
        if (!at)
            continue;
        int k = atoi(at + strlen(prefix));
        ASSERT(k >= 0 && k < cap);
        if (!seen[k]) {
            seen[k] = 1;
            n++;
        }
    }
    fclose(f);
    if (mapped)
        memcpy(mapped, seen, (size_t)cap);
    free(seen);
    return n;
}

/* A directory of `n` records in about `nshards` shards (the simple dataset). */
static void write_sharded(const char *path, uint64_t n, int with_array, uint64_t shard_bytes) {
    slr_write_simple(path, n, with_array, shard_bytes);
}

SL_TEST(record_lazy__opens_only_shards_read) {
    char path[512];
    sl_test_path(path, sizeof path, "ds");
    write_sharded(path, 1000, 0, 1); /* one record per shard: 1000 shards */
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    ASSERT_EQ(sl_reader_shard_count(r), 1000);
    ASSERT_EQ(sl_reader_count(r), 1000);
    /* the plan comes from the manifest: nothing is mapped */
    uint64_t bytes = 0;
    for (int k = 0; k < 1000; k++)
        bytes += sl_reader_shard_bytes(r, k);
    ASSERT_EQ(sl_reader_data_bytes(r), bytes);
    ASSERT_EQ(mapped_shards(path, NULL, 1000), 0);
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    const uint64_t want[3] = {10, 500, 999};
    for (int j = 0; j < 3; j++) {
        ASSERT_OK(sl_reader_read(r, want[j], rec));
        slr_simple_check(rec, want[j], 0);
    }
    char mapped[1000];
    ASSERT_EQ(mapped_shards(path, mapped, 1000), 3);
    ASSERT(mapped[10] && mapped[500] && mapped[999]);
    ASSERT_EQ(sl_record__opens(r), 3);
    ASSERT_EQ(sl_record__open_shards(r), 3);
    sl_record_free(rec);
    sl_reader_free(r);
    ASSERT_EQ(mapped_shards(path, NULL, 1000), 0);
}

/* Reading every shard in turn keeps at most the limit open (one more while
 * a record still holds a closed one), in order and shuffled. */
SL_TEST(record_lazy__open_limit_respected) {
    char path[512];
    sl_test_path(path, sizeof path, "ds");
    write_sharded(path, 400, 0, 512);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    int nsh = sl_reader_shard_count(r);
    ASSERT(nsh > 20);
    sl_record__set_open_limit(r, 3);
    ASSERT(!sl_record__keeps_shards(r));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    char *mapped = calloc((size_t)nsh, 1);
    uint64_t n = sl_reader_count(r);
    for (int pass = 0; pass < 2; pass++) {
        for (uint64_t k = 0; k < n; k++) {
            uint64_t i = pass ? (k * 7919 + 17) % n : k; /* 7919 is prime to 400 */
            ASSERT_OK(sl_reader_read(r, i, rec));
            slr_simple_check(rec, i, 0);
            ASSERT(sl_record__open_shards(r) <= 3);
            ASSERT(mapped_shards(path, mapped, nsh) <= 4);
        }
    }
    ASSERT(sl_record__opens(r) > (uint64_t)nsh); /* shards were closed and opened again */
    sl_record_free(rec);
    free(mapped);
    sl_reader_free(r);
}

/* With the limit left to grow, reads that cycle through more shards than
 * it holds raise it (a global shuffle ends with every shard open, as
 * before); reading in order keeps it at its start. */
SL_TEST(record_lazy__limit_grows_for_random_reads) {
    char path[512];
    sl_test_path(path, sizeof path, "ds");
    write_sharded(path, 640, 0, 256); /* one record per shard */
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    int nsh = sl_reader_shard_count(r);
    ASSERT(nsh > 40);
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    uint64_t n = sl_reader_count(r);
    for (uint64_t i = 0; i < n; i++)
        ASSERT_OK(sl_reader_read(r, i, rec));
    ASSERT_EQ(sl_record__opens(r), nsh);
    ASSERT(sl_record__open_shards(r) <= 16);
    uint64_t x = 12345;
    for (int k = 0; k < 20000; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t i = (x >> 33) % n;
        ASSERT_OK(sl_reader_read(r, i, rec));
        slr_simple_check(rec, i, 0);
    }
    /* without growing, nearly every read would open a shard (about 19,500
     * opens); growing, the limit reaches every shard after a few passes */
    ASSERT(sl_record__opens(r) < 3 * (uint64_t)nsh);
    sl_shard_set_stats st;
    sl_shard_set__stats(r->set, &st);
    ASSERT_EQ(st.max_open, nsh);
    ASSERT(sl_record__keeps_shards(r));
    sl_record_free(rec);
    sl_reader_free(r);
}

/* A shard closed and opened again reads the same bytes, mapped or not; a
 * record's views stay valid while other records' reads close its shard,
 * and a retained view outlives the reader. */
SL_TEST(record_lazy__reopen_reads_same_bytes) {
    char path[512];
    sl_test_path(path, sizeof path, "ds");
    write_sharded(path, 200, 1, 1024);
    const unsigned flags[2] = {0, SL_READ_NO_MMAP};
    for (int f = 0; f < 2; f++) {
        sl_reader *r;
        ASSERT_OK(sl_reader_open(&r, path, flags[f]));
        sl_record__set_open_limit(r, 1);
        sl_record *a, *b;
        ASSERT_OK(sl_record_create(&a));
        ASSERT_OK(sl_record_create(&b));
        const uint64_t i = 3, j = 199;
        ASSERT(sl_record__shard_of(r, i) != sl_record__shard_of(r, j));
        ASSERT_OK(sl_reader_read(r, i, a));
        const sl_tensor *t = sl_record_column(a, 1);
        uint8_t before[17];
        memcpy(before, t->data, (size_t)t->nbytes);
        sl_tensor keep = *t;
        if (keep.buf)
            sl_buffer_retain(keep.buf);
        uint64_t opens = sl_record__opens(r);
        ASSERT_OK(sl_reader_read(r, j, b)); /* closes i's shard in the table */
        ASSERT_EQ(sl_record__open_shards(r), 1);
        ASSERT_EQ(sl_record__opens(r), opens + 1);
        /* a's views still point at its (closed) shard's bytes */
        slr_simple_check(a, i, 1);
        ASSERT_OK(sl_reader_read(r, i, b)); /* opens it again */
        ASSERT_EQ(sl_record__opens(r), opens + 2);
        ASSERT_EQ(sl_record_column(b, 1)->nbytes, 3);
        ASSERT(memcmp(sl_record_column(b, 1)->data, before, 3) == 0);
        slr_simple_check(b, i, 1);
        sl_record_free(a);
        sl_record_free(b);
        sl_reader_free(r);
        if (keep.buf) {
            ASSERT_EQ(sl_buffer_refcount(keep.buf), 1);
            ASSERT(memcmp(keep.data, before, 3) == 0);
            sl_tensor_release(&keep);
        }
    }
}

/* A damaged shard is reported by the reads that need it, each time with the
 * same message naming the shard file, the record and the cause; a rank
 * that does not read it never sees it; verify finds every damaged shard. */
SL_TEST(record_lazy__damaged_shard_costs_its_records) {
    char path[512];
    sl_test_path(path, sizeof path, "ds");
    write_sharded(path, 300, 0, 1024);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    int nsh = sl_reader_shard_count(r);
    ASSERT(nsh >= 8);
    uint64_t f5 = r->shards[5].first, n5 = r->shards[5].count;
    uint64_t f7 = r->shards[7].first, n7 = r->shards[7].count;
    char s5[600], s7[600];
    snprintf(s5, sizeof s5, "%s", sl_reader_shard_path(r, 5));
    snprintf(s7, sizeof s7, "%s", sl_reader_shard_path(r, 7));
    sl_reader_free(r);
    /* shard 5: a flipped byte in its footer; shard 7: cut short */
    size_t len;
    uint8_t *b = slr_read_file(s5, &len);
    b[len - 20] ^= 0x40;
    slr_write_file(s5, b, len);
    free(b);
    b = slr_read_file(s7, &len);
    slr_write_file(s7, b, len - 100);
    free(b);

    /* "rank 0" reads shards 0..4 only: no error, shard 5 never opened */
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    for (uint64_t i = 0; i < f5; i++) {
        ASSERT_OK(sl_reader_read(r, i, rec));
        slr_simple_check(rec, i, 0);
    }
    ASSERT_EQ(sl_record__opens(r), 5);
    sl_reader_free(r);

    /* "rank 1" reads everything: shard 5's and 7's records fail, the rest read */
    ASSERT_OK(sl_reader_open(&r, path, 0));
    uint64_t failed = 0;
    char first_msg[512] = "";
    for (uint64_t i = 0; i < sl_reader_count(r); i++) {
        int rc = sl_reader_read(r, i, rec);
        bool in5 = i >= f5 && i < f5 + n5, in7 = i >= f7 && i < f7 + n7;
        if (!in5 && !in7) {
            ASSERT_OK(rc);
            slr_simple_check(rec, i, 0);
            continue;
        }
        ASSERT_RC(rc, SL_ECORRUPT);
        failed++;
        char rtext[64];
        snprintf(rtext, sizeof rtext, ": record %llu: ", (unsigned long long)i);
        ASSERT_CONTAINS(sl_errmsg(), in5 ? s5 : s7);
        ASSERT_CONTAINS(sl_errmsg(), rtext);
        ASSERT_CONTAINS(sl_errmsg(), in5 ? "footer checksum mismatch" : "truncated");
        if (i == f5)
            snprintf(first_msg, sizeof first_msg, "%s", sl_errmsg());
    }
    ASSERT_EQ(failed, n5 + n7);
    /* the failure is remembered: the same message again, without reopening */
    uint64_t opens = sl_record__opens(r);
    ASSERT_RC(sl_reader_read(r, f5, rec), SL_ECORRUPT);
    ASSERT_STR_EQ(sl_errmsg(), first_msg);
    ASSERT_EQ(sl_record__opens(r), opens);
    /* verify: both shards, every one of their records */
    uint64_t bad = 0;
    ASSERT_RC(sl_reader_verify(r, 1, &bad, NULL, NULL), SL_ECORRUPT);
    ASSERT_EQ(bad, n5 + n7);
    ASSERT_CONTAINS(sl_errmsg(), s5);
    ASSERT_CONTAINS(sl_errmsg(), "the whole shard");
    ASSERT_RC(sl_reader_verify(r, 0, &bad, NULL, NULL), SL_ECORRUPT);
    ASSERT_EQ(bad, n5);
    sl_record_free(rec);
    sl_reader_free(r);
}

typedef struct lazy_arg {
    const sl_reader *r;
    int seed;
    int failures;
} lazy_arg;

static void *lazy_thread(void *p) {
    lazy_arg *a = p;
    sl_record *rec, *held;
    if (sl_record_create(&rec) != SL_OK || sl_record_create(&held) != SL_OK) {
        a->failures++;
        return NULL;
    }
    uint64_t n = sl_reader_count(a->r), x = (uint64_t)a->seed * 977 + 1;
    uint64_t hi = UINT64_MAX;
    for (int k = 0; k < 3000; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t i = (x >> 33) % n;
        if (sl_reader_read(a->r, i, rec) != SL_OK) {
            a->failures++;
            continue;
        }
        const sl_tensor *t = sl_record_column(rec, 1);
        if (*(const int64_t *)sl_record_column(rec, 0)->data != (int64_t)(i % 10) ||
            t->shape[0] != (int64_t)(i % 17))
            a->failures++;
        for (uint64_t j = 0; j < i % 17; j++)
            if (((const uint8_t *)t->data)[j] != (uint8_t)(i * 7 + j))
                a->failures++;
        /* a view held across many reads (of this and other threads, which
         * close its shard) stays readable */
        if (k % 100 == 0) {
            hi = i;
            if (sl_reader_read(a->r, hi, held) != SL_OK)
                a->failures++;
        }
        if (hi != UINT64_MAX) {
            const sl_tensor *h = sl_record_column(held, 1);
            for (uint64_t j = 0; j < hi % 17; j++)
                if (((const uint8_t *)h->data)[j] != (uint8_t)(hi * 7 + j))
                    a->failures++;
        }
        if (k % 500 == 0)
            sl_record__prefetch(a->r, (i + 1) % n, 1);
        sl_record__prefetch(a->r, (i + 3) % n, 0);
    }
    sl_record_free(rec);
    sl_record_free(held);
    return NULL;
}

/* 8 threads read across 60-odd shards with room for 4 open: every read
 * races opens and closes of other threads. */
SL_TEST(record_lazy__threads_across_shards) {
    char path[512];
    sl_test_path(path, sizeof path, "ds");
    write_sharded(path, 600, 0, 512);
    const unsigned flags[2] = {0, SL_READ_NO_MMAP};
    for (int f = 0; f < 2; f++) {
        sl_reader *r;
        ASSERT_OK(sl_reader_open(&r, path, flags[f]));
        ASSERT(sl_reader_shard_count(r) > 40);
        sl_record__set_open_limit(r, 4);
        pthread_t th[8];
        lazy_arg args[8];
        for (int i = 0; i < 8; i++) {
            args[i] = (lazy_arg){r, i, 0};
            ASSERT_EQ(pthread_create(&th[i], NULL, lazy_thread, &args[i]), 0);
        }
        for (int i = 0; i < 8; i++) {
            ASSERT_EQ(pthread_join(th[i], NULL), 0);
            ASSERT_EQ(args[i].failures, 0);
        }
        ASSERT(sl_record__open_shards(r) <= 4);
        /* the scalar columns, joined from every shard while others read */
        const void *labels;
        ASSERT_OK(sl_reader_index_column(r, 0, &labels));
        for (uint64_t i = 0; i < sl_reader_count(r); i++)
            ASSERT_EQ(((const int64_t *)labels)[i], (int64_t)(i % 10));
        ASSERT_OK(sl_reader_verify(r, 0, NULL, NULL, NULL));
        sl_reader_free(r);
    }
}

/* The same race with the limit left to grow: 8 threads reading at random
 * drive it from its start to every shard, after which open shards are used
 * without a reference; reads racing that switch stay correct. */
SL_TEST(record_lazy__threads_while_limit_grows) {
    char path[512];
    sl_test_path(path, sizeof path, "ds");
    write_sharded(path, 600, 0, 512);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    ASSERT(sl_reader_shard_count(r) > 40);
    ASSERT(!sl_record__keeps_shards(r));
    pthread_t th[8];
    lazy_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (lazy_arg){r, i + 100, 0};
        ASSERT_EQ(pthread_create(&th[i], NULL, lazy_thread, &args[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        ASSERT_EQ(pthread_join(th[i], NULL), 0);
        ASSERT_EQ(args[i].failures, 0);
    }
    ASSERT(sl_record__keeps_shards(r));
    ASSERT_EQ(sl_record__open_shards(r), sl_reader_shard_count(r));
    sl_reader_free(r);
}

/* The .slr source's "max_open_shards" fixes the bound (as for tar and
 * TFRecord): a shuffled pass never has more shard files open than that
 * (plus the one the reading cursor still holds), and reopens shards. */
SL_TEST(record_lazy__source_max_open_shards) {
    char path[512], json[700];
    sl_test_path(path, sizeof path, "ds");
    write_sharded(path, 400, 0, 512);
    snprintf(json, sizeof json, "{\"path\": \"%s\", \"max_open_shards\": 0}", path);
    sl_source *s = NULL;
    ASSERT_RC(sl_source_open(&s, json), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "max_open_shards");
    snprintf(json, sizeof json, "{\"path\": \"%s\", \"max_open_shards\": 3}", path);
    ASSERT_OK(sl_source_open(&s, json));
    uint64_t n = sl_source_count(s);
    ASSERT_EQ(n, 400);
    sl_io_counters a, b;
    sl_io__counters(&a);
    uint64_t peak = 0;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t i = (k * 7919 + 3) % n;
        sl_sample smp;
        ASSERT_OK(sl_source_read(s, i, &smp));
        ASSERT_EQ(*(const int64_t *)smp.col[0].data, (int64_t)(i % 10));
        sl_sample_clear(&smp);
        sl_io__counters(&b);
        if (b.open_now - a.open_now > peak)
            peak = b.open_now - a.open_now;
    }
    ASSERT(peak >= 3 && peak <= 4);
    ASSERT(b.maps - a.maps > 40); /* reopened */
    sl_source_free(s);
}
