/*
 * Tests of the Parquet source's own parts (src/source/parquet_*.c,
 * source_parquet.c) on bytes made here: a small Parquet file written by hand
 * (Thrift compact encoded below, from the format's parquet.thrift field
 * numbers), the RLE / bit-packed hybrid and DELTA_BINARY_PACKED on the
 * format specification's own examples, hostile footers, every truncation,
 * and every allocation failure. Files from the reference writers (pyarrow,
 * datasets) are tested in tests/python/test_parquet.py.
 */
#include "test.h"
#include "core/core.h"
#include "source/parquet_format.h"
#include "source/source.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- a Thrift compact writer, just enough for a file ---------------------------- */

typedef struct {
    uint8_t b[4096];
    size_t n;
} wbuf;

static void put(wbuf *w, uint8_t v) {
    ASSERT(w->n < sizeof w->b);
    w->b[w->n++] = v;
}
static void uvar(wbuf *w, uint64_t v) {
    while (v >= 0x80) {
        put(w, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    put(w, (uint8_t)v);
}
static void zz(wbuf *w, int64_t v) { uvar(w, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)); }
/* field header: id delta (1..15) and type */
static void fld(wbuf *w, int delta, int type) { put(w, (uint8_t)(delta << 4 | type)); }
static void bin(wbuf *w, const char *s) {
    uvar(w, strlen(s));
    for (const char *p = s; *p; p++)
        put(w, (uint8_t)*p);
}
static void cat(wbuf *w, const wbuf *x) {
    for (size_t i = 0; i < x->n; i++)
        put(w, x->b[i]);
}

enum { I32 = 5, I64 = 6, BIN = 8, LIST = 9, STRUCT = 12 };

/* One required INT64 column "x" of `n` values, one PLAIN data page v1,
 * uncompressed, in one row group: the smallest complete file. */
static size_t tiny_file(uint8_t *out, const int64_t *vals, int n) {
    wbuf page = {.n = 0}, hdr = {.n = 0}, foot = {.n = 0}, file = {.n = 0};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 8; k++)
            put(&page, (uint8_t)((uint64_t)vals[i] >> (8 * k)));
    fld(&hdr, 1, I32), zz(&hdr, 0);                 /* type DATA_PAGE */
    fld(&hdr, 1, I32), zz(&hdr, (int64_t)page.n);   /* uncompressed_page_size */
    fld(&hdr, 1, I32), zz(&hdr, (int64_t)page.n);   /* compressed_page_size */
    fld(&hdr, 2, STRUCT);                           /* 5: data_page_header */
    fld(&hdr, 1, I32), zz(&hdr, n);                 /*   num_values */
    fld(&hdr, 1, I32), zz(&hdr, 0);                 /*   encoding PLAIN */
    fld(&hdr, 1, I32), zz(&hdr, 3);                 /*   definition_level_encoding RLE */
    fld(&hdr, 1, I32), zz(&hdr, 3);                 /*   repetition_level_encoding RLE */
    put(&hdr, 0);
    put(&hdr, 0);
    int64_t chunk = (int64_t)(hdr.n + page.n);
    put(&file, 'P'), put(&file, 'A'), put(&file, 'R'), put(&file, '1');
    cat(&file, &hdr);
    cat(&file, &page);
    fld(&foot, 1, I32), zz(&foot, 1);               /* 1: version */
    fld(&foot, 1, LIST), put(&foot, 2 << 4 | STRUCT); /* 2: schema, 2 elements */
    fld(&foot, 4, BIN), bin(&foot, "schema");        /*   root: 4 name */
    fld(&foot, 1, I32), zz(&foot, 1), put(&foot, 0); /*   5 num_children */
    fld(&foot, 1, I32), zz(&foot, 2);                /*   leaf: 1 type INT64 */
    fld(&foot, 2, I32), zz(&foot, 0);                /*   3 repetition REQUIRED */
    fld(&foot, 1, BIN), bin(&foot, "x"), put(&foot, 0); /* 4 name */
    fld(&foot, 1, I64), zz(&foot, n);                /* 3: num_rows */
    fld(&foot, 1, LIST), put(&foot, 1 << 4 | STRUCT); /* 4: row_groups */
    fld(&foot, 1, LIST), put(&foot, 1 << 4 | STRUCT); /*   1: columns */
    fld(&foot, 2, I64), zz(&foot, 4);                /*     2: file_offset */
    fld(&foot, 1, STRUCT);                           /*     3: meta_data */
    fld(&foot, 1, I32), zz(&foot, 2);                /*       1 type INT64 */
    fld(&foot, 1, LIST), put(&foot, 1 << 4 | I32), zz(&foot, 0); /* 2 encodings */
    fld(&foot, 1, LIST), put(&foot, 1 << 4 | BIN), bin(&foot, "x"); /* 3 path */
    fld(&foot, 1, I32), zz(&foot, 0);                /*       4 codec */
    fld(&foot, 1, I64), zz(&foot, n);                /*       5 num_values */
    fld(&foot, 1, I64), zz(&foot, chunk);            /*       6 total_uncompressed_size */
    fld(&foot, 1, I64), zz(&foot, chunk);            /*       7 total_compressed_size */
    fld(&foot, 2, I64), zz(&foot, 4);                /*       9 data_page_offset */
    put(&foot, 0);                                   /*     end meta_data */
    put(&foot, 0);                                   /*   end column chunk */
    fld(&foot, 1, I64), zz(&foot, chunk);            /*   2: total_byte_size */
    fld(&foot, 1, I64), zz(&foot, n);                /*   3: num_rows */
    put(&foot, 0);                                   /* end row group */
    put(&foot, 0);                                   /* end FileMetaData */
    cat(&file, &foot);
    for (int k = 0; k < 4; k++)
        put(&file, (uint8_t)(foot.n >> (8 * k)));
    put(&file, 'P'), put(&file, 'A'), put(&file, 'R'), put(&file, '1');
    memcpy(out, file.b, file.n);
    return file.n;
}

static const int64_t k_vals[3] = {10, -20, (int64_t)1 << 40};

static int open_path(sl_source **out, const char *path) {
    cJSON *o = cJSON_CreateObject();
    ASSERT(o);
    cJSON_AddStringToObject(o, "parquet", path);
    int rc = sl_source__open_json(out, o, "source");
    cJSON_Delete(o);
    return rc;
}

/* Row i's first column, an int64, through `cur`. */
static int read_i64(sl_source *s, sl_source_cursor *cur, uint64_t i, int64_t *v) {
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    int rc = sl_source__read(s, cur, i, &smp);
    if (rc == SL_OK)
        memcpy(v, smp.col[0].data, 8);
    sl_sample_clear(&smp);
    return rc;
}

/* Open and read every row; the first failure's status. */
static int read_all(const char *path, int64_t *got, uint64_t *count) {
    sl_source *s = NULL;
    sl_source_cursor *cur = NULL;
    int rc = open_path(&s, path);
    if (rc == SL_OK)
        rc = sl_source__cursor_open(s, NULL, NULL, &cur);
    for (uint64_t i = 0; rc == SL_OK && i < s->count; i++) {
        int64_t v = 0;
        rc = read_i64(s, cur, i, &v);
        if (rc == SL_OK && got)
            got[i] = v;
    }
    if (count)
        *count = s ? s->count : 0;
    if (cur)
        sl_source__cursor_free(s, cur);
    sl_source__release(s);
    return rc;
}

SL_TEST(source_parquet__hand_written_file_reads) {
    uint8_t f[4096];
    size_t n = tiny_file(f, k_vals, 3);
    char path[4096];
    sl_test_path(path, sizeof path, "tiny.parquet");
    sl_test_write_file(path, f, n);
    int64_t got[3] = {0};
    uint64_t count = 0;
    ASSERT_OK(read_all(path, got, &count));
    ASSERT_U64_EQ(count, 3);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(got[i], k_vals[i]);
    const char *key = NULL;
    const char *p = path;
    ASSERT_OK(sl_source_detect(&p, 1, &key));
    ASSERT_STR_EQ(key, "parquet");
    /* its one INT64 column is indexed: values without reading rows */
    sl_source *s = NULL;
    ASSERT_OK(open_path(&s, path));
    ASSERT(s->col[0].indexed);
    const void *vals = NULL;
    ASSERT_OK(s->vt->index_column(s, 0, &vals));
    ASSERT_EQ(((const int64_t *)vals)[2], k_vals[2]);
    sl_source__release(s);
}

/* Every prefix of the file: an error naming the file, never a crash or
 * wrong values. */
SL_TEST(source_parquet__every_truncation_is_an_error) {
    uint8_t f[4096];
    size_t n = tiny_file(f, k_vals, 3);
    char path[4096];
    sl_test_path(path, sizeof path, "cut.parquet");
    for (size_t cut = 0; cut < n; cut++) {
        sl_test_write_file(path, f, cut);
        int rc = read_all(path, NULL, NULL);
        ASSERT(rc < 0);
        ASSERT_CONTAINS(sl_errmsg(), "cut.parquet");
    }
}

/* Every byte of the footer and page header flipped: an error with a
 * message, or the right values where the damage leaves them readable. */
SL_TEST(source_parquet__every_flipped_byte_errs_or_reads_right) {
    uint8_t f[4096];
    size_t n = tiny_file(f, k_vals, 3);
    char path[4096];
    sl_test_path(path, sizeof path, "flip.parquet");
    int errors = 0;
    for (size_t pos = 0; pos < n; pos++) {
        for (int bit = 0; bit < 8; bit += 3) {
            uint8_t g[4096];
            memcpy(g, f, n);
            g[pos] ^= (uint8_t)(1u << bit);
            sl_test_write_file(path, g, n);
            int64_t got[8] = {0};
            uint64_t count = 0;
            int rc = read_all(path, got, &count);
            if (rc < 0) {
                ASSERT(sl_errmsg()[0]);
                ASSERT(rc != SL_ENOMEM);
                errors++;
            }
        }
    }
    ASSERT(errors > 0);
}

SL_TEST(source_parquet__oom) {
    uint8_t f[4096];
    size_t n = tiny_file(f, k_vals, 3);
    char path[4096];
    sl_test_path(path, sizeof path, "oom.parquet");
    sl_test_write_file(path, f, n);
    for (uint64_t k = 1;; k++) {
        sl__alloc_fail_at(k);
        int rc = read_all(path, NULL, NULL);
        uint64_t made = sl__alloc_count();
        sl__alloc_fail_at(0);
        if (rc == SL_OK && made < k)
            break;
        if (rc != SL_OK) {
            ASSERT_RC(rc, SL_ENOMEM);
            ASSERT(sl_errmsg()[0]);
        }
        ASSERT(k < 10000);
    }
}

/* Footers no writer makes: bounded, a message each. */
SL_TEST(source_parquet__hostile_footers) {
    pq_meta m;
    /* schema: a list claiming 2^32 structs in 6 bytes */
    static const uint8_t huge[] = {0x29, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x0f};
    memset(&m, 0, sizeof m);
    ASSERT_RC(pq_meta_parse(huge, sizeof huge, "h.parquet", &m), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "h.parquet: footer: schema");
    pq_meta_dispose(&m);
    /* structs nested 100 deep inside an unknown field */
    uint8_t deep[300];
    size_t n = 0;
    deep[n++] = 0x0c; /* field 20 (an id no reader knows), struct */
    deep[n++] = 0x28;
    for (int i = 0; i < 99; i++)
        deep[n++] = 0x1c; /* field +1, struct */
    memset(deep + n, 0, 100);
    n += 100;
    memset(&m, 0, sizeof m);
    ASSERT_RC(pq_meta_parse(deep, n, "d.parquet", &m), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "nested deeper than 32");
    pq_meta_dispose(&m);
    /* a binary longer than the bytes left; a field of unknown type 13 */
    static const uint8_t longbin[] = {0x68, 0xff, 0x01, 'a'};
    static const uint8_t badtype[] = {0x1d, 0x00};
    memset(&m, 0, sizeof m);
    ASSERT_RC(pq_meta_parse(longbin, sizeof longbin, "b.parquet", &m), SL_ECORRUPT);
    pq_meta_dispose(&m);
    memset(&m, 0, sizeof m);
    ASSERT_RC(pq_meta_parse(badtype, sizeof badtype, "t.parquet", &m), SL_ECORRUPT);
    pq_meta_dispose(&m);
    /* nothing at all */
    memset(&m, 0, sizeof m);
    ASSERT_RC(pq_meta_parse(badtype, 0, "e.parquet", &m), SL_ECORRUPT);
    pq_meta_dispose(&m);
}

/* The RLE / bit-packed hybrid, on the format specification's examples. */
SL_TEST(source_parquet__rle_hybrid) {
    /* bit-packed, width 3: 0..7 in one group of 8 (the spec's example) */
    static const uint8_t packed[] = {0x03, 0x88, 0xc6, 0xfa};
    uint32_t out[16];
    size_t used = 0;
    ASSERT_OK(pq_rle_decode(packed, sizeof packed, 3, out, 8, &used));
    for (uint32_t i = 0; i < 8; i++)
        ASSERT_EQ(out[i], i);
    ASSERT_EQ(used, 4);
    /* an RLE run: 5 times the value 2 (width 2), then 3 bit-packed ones */
    static const uint8_t mixed[] = {0x0a, 0x02, 0x03, 0x39, 0x00};
    ASSERT_OK(pq_rle_decode(mixed, sizeof mixed, 2, out, 8, NULL));
    static const uint32_t want[8] = {2, 2, 2, 2, 2, 1, 2, 3};
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(out[i], want[i]);
    /* cut short, a value wider than the width, a zero-length run */
    ASSERT_RC(pq_rle_decode(packed, 3, 3, out, 8, NULL), SL_ECORRUPT);
    static const uint8_t wide[] = {0x02, 0x07};
    ASSERT_RC(pq_rle_decode(wide, sizeof wide, 2, out, 1, NULL), SL_ECORRUPT);
    static const uint8_t zero[] = {0x00, 0x01};
    ASSERT_RC(pq_rle_decode(zero, sizeof zero, 1, out, 1, NULL), SL_ECORRUPT);
    ASSERT_RC(pq_rle_decode(packed, sizeof packed, 33, out, 1, NULL), SL_ECORRUPT);
}

/* DELTA_BINARY_PACKED on the specification's example 7, 5, 3, 1, 2, 3, 4, 5. */
SL_TEST(source_parquet__delta_binary_packed) {
    /* header: block 128, 4 miniblocks, 8 values, first 7; block: min delta
     * -2, widths 2 0 0 0, one miniblock of 32 2-bit deltas 0 0 0 3 3 3 3 */
    uint8_t enc[64] = {0x80, 0x01, 0x04, 0x08, 0x0e, 0x03, 0x02, 0x00, 0x00, 0x00, 0xc0, 0x3f};
    size_t n = 10 + 8; /* the miniblock: 32 * 2 bits */
    int64_t out[8];
    size_t used = 0;
    ASSERT_OK(pq_delta_decode(enc, n, 8, out, 8, &used));
    static const int64_t want[8] = {7, 5, 3, 1, 2, 3, 4, 5};
    for (int i = 0; i < 8; i++)
        ASSERT_EQ(out[i], want[i]);
    ASSERT_EQ(used, n);
    int32_t o32[8];
    ASSERT_OK(pq_delta_decode(enc, n, 4, o32, 8, NULL));
    ASSERT_EQ(o32[7], 5);
    /* the header's count must be the page's; cut short; a bad block size */
    ASSERT_RC(pq_delta_decode(enc, n, 8, out, 7, NULL), SL_ECORRUPT);
    ASSERT_RC(pq_delta_decode(enc, 12, 8, out, 8, NULL), SL_ECORRUPT);
    enc[0] = 0x7f;
    enc[1] = 0x00;
    ASSERT_RC(pq_delta_decode(enc, n, 8, out, 8, NULL), SL_ECORRUPT);
}

SL_TEST(source_parquet__not_parquet_and_unknown_columns) {
    char path[4096];
    sl_test_path(path, sizeof path, "other.parquet");
    sl_test_write_file(path, "PAR1 but not a footer at all PAR2", 33);
    ASSERT_RC(read_all(path, NULL, NULL), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "other.parquet: does not end with PAR1");
    uint8_t f[4096];
    size_t n = tiny_file(f, k_vals, 3);
    sl_test_write_file(path, f, n);
    cJSON *o = cJSON_Parse("{\"columns\": [\"y\"]}");
    cJSON_AddStringToObject(o, "parquet", path);
    sl_source *s = NULL;
    ASSERT_RC(sl_source__open_json(&s, o, "source"), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "no column 'y' in other.parquet (columns: x)");
    cJSON_Delete(o);
    o = cJSON_Parse("{\"colums\": [\"x\"]}");
    cJSON_AddStringToObject(o, "parquet", path);
    ASSERT_RC(sl_source__open_json(&s, o, "source"), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "colums");
    cJSON_Delete(o);
}

/* ---- threads ------------------------------------------------------------------------ */

typedef struct {
    sl_source *s;
    int seed;
    int bad;
} pq_reader_arg;

/* Read every row three times through a cursor of its own: in order from
 * `seed` on (neighbouring rows of the other threads' row groups) and by a
 * stride that jumps row groups; each value checked. */
static void *pq_reader(void *p) {
    pq_reader_arg *a = p;
    sl_source_cursor *cur = NULL;
    if (sl_source__cursor_open(a->s, NULL, NULL, &cur) != SL_OK) {
        a->bad = 1;
        return NULL;
    }
    uint64_t n = a->s->count;
    for (uint64_t q = 0; q < 3 * n && !a->bad; q++) {
        uint64_t i = q < n ? (q + (uint64_t)a->seed * 5) % n : (q * 7 + (uint64_t)a->seed) % n;
        int64_t v = 0;
        if (read_i64(a->s, cur, i, &v) != SL_OK)
            a->bad = 2;
        else if (v != k_vals[i % 3])
            a->bad = 3;
    }
    sl_source__cursor_free(a->s, cur);
    return NULL;
}

/* Four threads read a source of 40 row groups at once, with a cache that
 * keeps every row group (read without its lock) and with one that keeps one
 * (row groups decoded, dropped, their arenas reused, a waiting reader
 * decoding ahead): every value right, every block freed (the sanitizers
 * say). The test command runs it under TSan. */
SL_TEST(source_parquet__threads_read_at_once) {
    uint8_t f[4096];
    size_t n = tiny_file(f, k_vals, 3);
    char path[4096];
    sl_test_path(path, sizeof path, "threads.parquet");
    sl_test_write_file(path, f, n);
    for (int big = 0; big < 2; big++) {
        cJSON *o = cJSON_CreateObject();
        cJSON *list = cJSON_AddArrayToObject(o, "parquet");
        ASSERT(o && list);
        for (int k = 0; k < 40; k++)
            cJSON_AddItemToArray(list, cJSON_CreateString(path));
        cJSON_AddNumberToObject(o, "cache_bytes", big ? 64 << 20 : 1);
        sl_source *s = NULL;
        ASSERT_OK(sl_source__open_json(&s, o, "source"));
        cJSON_Delete(o);
        ASSERT_U64_EQ(s->count, 120);
        pthread_t th[4];
        pq_reader_arg arg[4];
        for (int t = 0; t < 4; t++) {
            arg[t] = (pq_reader_arg){.s = s, .seed = t};
            ASSERT_EQ(pthread_create(&th[t], NULL, pq_reader, &arg[t]), 0);
        }
        for (int t = 0; t < 4; t++)
            ASSERT_EQ(pthread_join(th[t], NULL), 0);
        for (int t = 0; t < 4; t++)
            ASSERT_EQ(arg[t].bad, 0);
        sl_source__release(s);
    }
}
