/*
 * Tests of lazily opened WebDataset shards (src/source/source_tar.c over
 * src/record/shard_set.c): opening many indexed shards reads only their
 * index headers; a shard's bytes and index are opened when its first record
 * is read; a damaged shard costs only its records; at most
 * "max_open_shards" are open; many threads read across shards at once.
 *
 * What was opened is counted by the io layer (sl_io__counters): every open,
 * every whole-object mapping, the objects open now and the bytes read.
 * Shards are built here, header by header (tar_build.h).
 */
#include "test.h"
#include "core/core.h"
#include "io/io.h"
#include "source/source.h"
#include "ivals_check.h"
#include "tar_build.h"

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#define PER_SHARD 4

static char g_dir[1024];

static const char *shard_path(int k) {
    static char buf[4][1200];
    static int n;
    n = (n + 1) % 4;
    snprintf(buf[n], sizeof buf[n], "%.1000s/shard-%04d.tar", g_dir, k);
    return buf[n];
}

/* The text of sample j of shard k (a .txt member); its label is k*100+j. */
static void sample_text(int k, int j, char *buf, size_t cap) {
    snprintf(buf, cap, "shard %d sample %d %.*s", k, j, (k * 7 + j * 13) % 50 + 1,
             "..................................................");
}

/* Shards 0..n-1, each with PER_SHARD samples (txt + cls); with `index`,
 * each gets its sidecar index. */
static void make_shards(int n, int index) {
    snprintf(g_dir, sizeof g_dir, "%.1000s", sl_test_tmpdir());
    for (int k = 0; k < n; k++) {
        tar_build b;
        tar_build_init(&b);
        for (int j = 0; j < PER_SHARD; j++) {
            char name[64], text[128], cls[32];
            sample_text(k, j, text, sizeof text);
            snprintf(name, sizeof name, "s%04d_%d.txt", k, j);
            tar_build_member(&b, name, text, strlen(text));
            snprintf(name, sizeof name, "s%04d_%d.cls", k, j);
            snprintf(cls, sizeof cls, "%d\n", k * 100 + j);
            tar_build_member(&b, name, cls, strlen(cls));
        }
        tar_build_write(&b, shard_path(k));
        if (index)
            ASSERT_OK(sl_source__index_tar(shard_path(k), NULL));
    }
}

static int open_shards(sl_source **out, int n, const char *extra) {
    char spec[2048];
    snprintf(spec, sizeof spec, "{\"webdataset\": \"%.1000s/shard-{0000..%04d}.tar\"%s%s}",
             g_dir, n - 1, extra ? ", " : "", extra ? extra : "");
    return tar_build_open_spec(out, spec);
}

/* Record i (shard i / PER_SHARD) must hold its own text and label. */
static void check_record(sl_source *s, sl_source_cursor *cur, uint64_t i) {
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    ASSERT_OK(sl_source__read(s, cur, i, &smp));
    int k = (int)(i / PER_SHARD), j = (int)(i % PER_SHARD);
    char text[128];
    sample_text(k, j, text, sizeof text);
    ASSERT_STR_EQ(s->col[2].name, "txt");
    ASSERT_EQ(smp.col[2].nbytes, strlen(text));
    ASSERT(!memcmp(smp.col[2].data, text, strlen(text)));
    ASSERT_EQ(*(const int64_t *)smp.col[1].data, k * 100 + j);
    sl_sample_clear(&smp);
}

SL_TEST(source_tar__lazy_open_reads_only_index_headers) {
    enum { N = 500 };
    make_shards(N, 1);
    sl_io_counters a, b, c;
    sl_io__counters(&a);
    sl_source *s = NULL;
    ASSERT_OK(open_shards(&s, N, "\"index\": true"));
    sl_io__counters(&b);
    ASSERT_U64_EQ(s->count, (uint64_t)N * PER_SHARD);
    ASSERT_EQ(s->ncols, 3);
    ASSERT_EQ(s->col[1].indexed, 1);
    /* one open per index file, nothing mapped, nothing left open, and of
     * each index its 64-byte header and descriptors only (2 columns + 1
     * scalar: 2 x 136 + 72 bytes), not its entries or values */
    ASSERT_U64_EQ(b.opens - a.opens, N);
    ASSERT_U64_EQ(b.maps - a.maps, 0);
    ASSERT_U64_EQ(b.open_now, a.open_now);
    ASSERT_U64_EQ(b.read_bytes - a.read_bytes, (uint64_t)N * (64 + 2 * 136 + 72));

    /* records of shards 3 and 7: those two are mapped, and their indexes
     * read whole (one open each), nothing else */
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    for (int j = 0; j < PER_SHARD; j++) {
        check_record(s, cur, 3 * PER_SHARD + (uint64_t)j);
        check_record(s, cur, 7 * PER_SHARD + (uint64_t)(PER_SHARD - 1 - j));
    }
    sl_io__counters(&c);
    ASSERT_U64_EQ(c.maps - b.maps, 4);     /* two files and their whole indexes */
    ASSERT_U64_EQ(c.opens - b.opens, 4);
    ASSERT_U64_EQ(c.open_now - b.open_now, 2);
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
    sl_io__counters(&c);
    ASSERT_U64_EQ(c.open_now, a.open_now);
}

/* A view outlives its shard's closing: the mapping goes with the last view. */
SL_TEST(source_tar__views_outlive_a_closed_shard) {
    make_shards(6, 1);
    sl_source *s = NULL;
    ASSERT_OK(open_shards(&s, 6, "\"max_open_shards\": 1"));
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    cur->borrow = 1; /* as the executor sets it: views still hold a reference */
    sl_sample keep[6];
    memset(keep, 0, sizeof keep);
    sl_io_counters a;
    sl_io__counters(&a);
    for (int k = 0; k < 6; k++)
        ASSERT_OK(sl_source__read(s, cur, (uint64_t)k * PER_SHARD + 1, &keep[k]));
    for (int k = 0; k < 6; k++) {
        char text[128];
        sample_text(k, 1, text, sizeof text);
        ASSERT(keep[k].col[2].buf != NULL);
        ASSERT_EQ(keep[k].col[2].nbytes, strlen(text));
        ASSERT(!memcmp(keep[k].col[2].data, text, strlen(text)));
    }
    for (int k = 0; k < 6; k++)
        sl_sample_clear(&keep[k]);
    sl_io_counters b;
    sl_io__counters(&b);
    ASSERT_U64_EQ(b.open_now - a.open_now, 1); /* the bound, once the views are gone */
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
}

SL_TEST(source_tar__damaged_shard_costs_only_its_records) {
    enum { N = 10 };
    make_shards(N, 1);
    /* shard 4's index: a byte of its entries flipped (its header is fine, so
     * the source opens; the whole index fails its checksum when loaded) */
    char ix[1300];
    snprintf(ix, sizeof ix, "%s.slidx", shard_path(4));
    size_t n;
    uint8_t *bytes = sl_test_read_file(ix, &n);
    bytes[64 + 3] ^= 0x40;
    sl_test_write_file(ix, bytes, n);
    free(bytes);
    sl_source *s = NULL;
    ASSERT_OK(open_shards(&s, N, NULL));
    ASSERT_U64_EQ(s->count, (uint64_t)N * PER_SHARD);
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    for (uint64_t i = 0; i < s->count; i++) {
        if (i / PER_SHARD != 4) {
            check_record(s, cur, i);
            continue;
        }
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        ASSERT_RC(sl_source__read(s, cur, i, &smp), SL_ECORRUPT);
        ASSERT_EQ(smp.ncols, 0);
        char want[64];
        snprintf(want, sizeof want, "shard-0004.tar: record %d", (int)(i % PER_SHARD));
        ASSERT_CONTAINS(sl_errmsg(), want);
        ASSERT_CONTAINS(sl_errmsg(), "shard-0004.tar.slidx: checksum mismatch");
    }
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
}

/* A shuffled pass over every record with at most 3 shards open: never more
 * open than that (each sample released before the next read), every record
 * right, shards reopened as the order comes back to them. */
SL_TEST(source_tar__bounded_open_shards_during_a_shuffled_epoch) {
    enum { N = 40, BOUND = 3 };
    make_shards(N, 1);
    sl_io_counters a, b;
    sl_io__counters(&a);
    sl_source *s = NULL;
    ASSERT_OK(open_shards(&s, N, "\"max_open_shards\": 3"));
    uint64_t order[N * PER_SHARD];
    for (uint64_t i = 0; i < s->count; i++)
        order[i] = i;
    uint64_t x = 12345;
    for (uint64_t i = s->count - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t j = x % (i + 1), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    uint64_t peak = 0;
    for (uint64_t i = 0; i < s->count; i++) {
        check_record(s, cur, order[i]);
        sl_io__counters(&b);
        if (b.open_now - a.open_now > peak)
            peak = b.open_now - a.open_now;
    }
    ASSERT_U64_EQ(peak, BOUND);
    ASSERT(b.maps - a.maps > N); /* reopened */
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
}

/* ---- many threads ------------------------------------------------------------------ */

typedef struct reader_arg {
    sl_source *s;
    int seed;
    int errors;
} reader_arg;

static void *reader(void *p) {
    reader_arg *a = p;
    sl_source_cursor *cur = NULL;
    if (sl_source__cursor_open(a->s, NULL, NULL, &cur) != SL_OK) {
        a->errors++;
        return NULL;
    }
    uint64_t n = a->s->count, x = (uint64_t)a->seed * 2654435761u + 1;
    sl_sample prev;
    memset(&prev, 0, sizeof prev);
    for (uint64_t r = 0; r < 3 * n; r++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t i = x % n;
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        if (sl_source__read(a->s, cur, i, &smp) != SL_OK) {
            a->errors++;
            continue;
        }
        int k = (int)(i / PER_SHARD), j = (int)(i % PER_SHARD);
        char text[128];
        sample_text(k, j, text, sizeof text);
        if (smp.col[2].nbytes != strlen(text) || memcmp(smp.col[2].data, text, strlen(text)) ||
            *(const int64_t *)smp.col[1].data != k * 100 + j)
            a->errors++;
        /* keep each sample past the next read, so views span closings */
        sl_sample_clear(&prev);
        prev = smp;
    }
    sl_sample_clear(&prev);
    sl_source__cursor_free(a->s, cur);
    return NULL;
}

SL_TEST(source_tar__threads_read_across_lazily_opened_shards) {
    enum { N = 24, THREADS = 8 };
    make_shards(N, 1);
    /* half the shards scanned, half through their index */
    for (int k = 0; k < N; k += 2) {
        char ix[1300];
        snprintf(ix, sizeof ix, "%s.slidx", shard_path(k));
        ASSERT_EQ(unlink(ix), 0);
    }
    sl_io_counters a, b;
    sl_io__counters(&a);
    sl_source *s = NULL;
    ASSERT_OK(open_shards(&s, N, "\"max_open_shards\": 4"));
    pthread_t th[THREADS];
    reader_arg args[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (reader_arg){.s = s, .seed = t + 1};
        ASSERT_EQ(pthread_create(&th[t], NULL, reader, &args[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        ASSERT_EQ(pthread_join(th[t], NULL), 0);
        ASSERT_EQ(args[t].errors, 0);
    }
    sl_io__counters(&b);
    ASSERT(b.open_now - a.open_now <= 4);
    sl_source__release(s);
}

/* Without indexes the shards are scanned at open, then closed: none stays
 * open, and reads open them through the same bound. */
SL_TEST(source_tar__scanned_shards_are_closed_after_the_scan) {
    enum { N = 12 };
    make_shards(N, 0);
    sl_io_counters a, b;
    sl_io__counters(&a);
    sl_source *s = NULL;
    ASSERT_OK(open_shards(&s, N, "\"max_open_shards\": 2"));
    sl_io__counters(&b);
    ASSERT_U64_EQ(b.maps - a.maps, N);
    ASSERT_U64_EQ(b.open_now, a.open_now);
    const void *vals = NULL;
    ASSERT_OK(s->vt->index_column(s, 1, &vals));
    for (uint64_t i = 0; i < s->count; i++)
        ASSERT_EQ(((const int64_t *)vals)[i], (int64_t)(i / PER_SHARD * 100 + i % PER_SHARD));
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    for (uint64_t i = s->count; i-- > 0;)
        check_record(s, cur, i);
    sl_io__counters(&b);
    ASSERT(b.open_now - a.open_now <= 2);
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
}

/* A pushed-down filter's values need every shard's whole index: one gone
 * since the source opened fails the call, naming it, and the next call,
 * once it is back, reads them all. */
SL_TEST(source_tar__index_values_are_tried_again_after_a_failure) {
    enum { N = 4 };
    make_shards(N, 1);
    sl_source *s = NULL;
    ASSERT_OK(open_shards(&s, N, NULL));
    const int64_t *label = ivals_after_a_gone_index(s, 1, shard_path(2), "shard-0002.tar");
    for (uint64_t i = 0; i < s->count; i++)
        ASSERT_EQ(label[i], (int64_t)(i / PER_SHARD * 100 + i % PER_SHARD));
    const void *vals = s;
    ASSERT_OK(s->vt->index_column(s, 0, &vals)); /* the key: not an integer column */
    ASSERT(vals == NULL);
    sl_source__release(s);
}
