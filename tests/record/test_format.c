/*
 * test_format.c — docs/FORMAT.md's tables, checked. These tests build .slr
 * files byte by byte from the tables alone (no writer code), read them with
 * the reader, and check that the writer produces exactly the same bytes. The
 * example in FORMAT.md ("Worked example") is the file built here.
 */
#include "slr_testutil.h"

#include <xxhash.h>
#include <zstd.h>

/* A growable little-endian byte builder. */
typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_need(bb *b, size_t k) {
    if (b->n + k > b->cap) {
        b->cap = (b->n + k) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        ASSERT(b->p != NULL);
    }
}
static void put(bb *b, const void *src, size_t k) {
    bb_need(b, k);
    memcpy(b->p + b->n, src, k);
    b->n += k;
}
static void u8(bb *b, unsigned v) {
    uint8_t x = (uint8_t)v;
    put(b, &x, 1);
}
static void u32(bb *b, uint32_t v) {
    for (int i = 0; i < 4; i++)
        u8(b, (v >> (8 * i)) & 0xff);
}
static void u64(bb *b, uint64_t v) {
    for (int i = 0; i < 8; i++)
        u8(b, (unsigned)((v >> (8 * i)) & 0xff));
}
static void zeros(bb *b, size_t k) {
    for (size_t i = 0; i < k; i++)
        u8(b, 0);
}
static void pad8(bb *b) {
    while (b->n % 8)
        u8(b, 0);
}
static void set64(bb *b, size_t at, uint64_t v) {
    for (int i = 0; i < 8; i++)
        b->p[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

static const uint8_t MAGIC[8] = {0x89, 'S', 'L', 'R', '\r', '\n', 0x1a, '\n'};

/* Column descriptor (FORMAT.md table "Column descriptor", 136 bytes). */
static void coldesc(bb *b, unsigned type, unsigned dtype, unsigned ndim, const int64_t *shape,
                    uint32_t flags, const char *name) {
    u8(b, type);
    u8(b, dtype);
    u8(b, ndim);
    u8(b, (unsigned)strlen(name));
    u32(b, flags);
    for (unsigned d = 0; d < 8; d++)
        u64(b, d < ndim ? (uint64_t)shape[d] : 0);
    put(b, name, strlen(name));
    zeros(b, 64 - strlen(name));
}

/* Metadata block (table "Metadata block"): one entry. */
static void metablock(bb *b, const char *k, const char *v) {
    size_t start = b->n;
    u32(b, 1);
    u32(b, 0);
    u32(b, (uint32_t)strlen(k));
    u32(b, (uint32_t)strlen(v));
    put(b, k, strlen(k));
    put(b, v, strlen(v));
    pad8(b);
    ASSERT((b->n - start) % 8 == 0);
}

typedef struct ex_rec {
    int64_t label;
    const char *name;
    int64_t npts;
    const int16_t *pts;
} ex_rec;

/* The worked example: columns label INT64, name STRING, pts ARRAY int16
 * [-1, 2]; metadata classes = ["cat","dog"]; two records. */
static const int16_t PTS0[2] = {1, 2};
static const ex_rec EX[2] = {{1, "cat", 1, PTS0}, {0, "", 0, NULL}};
#define EX_META_KEY "classes"
#define EX_META_VAL "[\"cat\",\"dog\"]"

/* sum_xor: the record checksum of required feature bit 1 (what writers
 * write); 0: version 1's seeded checksum, which readers still verify. */
static uint64_t example_sum(const bb *pl, uint64_t r, int sum_xor) {
    if (!sum_xor)
        return XXH3_64bits_withSeed(pl->p, pl->n, r);   /* seed = record number */
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(r >> (8 * i));
    return XXH3_64bits(pl->p, pl->n) ^ XXH3_64bits(le, 8);
}

static void build_example(bb *f, int sum_xor) {
    int64_t pts_shape[2] = {-1, 2};
    /* Header (table "Header"). */
    put(f, MAGIC, 8);
    u32(f, 1);                     /* version */
    size_t hb_at = f->n;
    u32(f, 0);                     /* header_bytes, patched below */
    u64(f, sum_xor ? 2 : 0);       /* required features */
    u64(f, 0);                     /* optional features */
    u32(f, 3);                     /* ncols */
    u32(f, 0);                     /* shard_index */
    u64(f, 0);                     /* first_record */
    u64(f, (uint64_t)4 << 30);     /* shard_bytes */
    size_t mb_at = f->n;
    u32(f, 0);                     /* meta_bytes, patched */
    u32(f, 0);                     /* reserved */
    ASSERT_EQ(f->n, 64);
    coldesc(f, 1, 0, 0, NULL, 0, "label");
    coldesc(f, 3, 0, 0, NULL, 0, "name");
    coldesc(f, 5, 4 /* SL_I16 */, 2, pts_shape, 0, "pts");
    size_t m0 = f->n;
    metablock(f, EX_META_KEY, EX_META_VAL);
    uint32_t meta_bytes = (uint32_t)(f->n - m0);
    uint32_t hb = (uint32_t)(f->n + 8);
    for (int i = 0; i < 4; i++) {
        f->p[hb_at + (size_t)i] = (uint8_t)(hb >> (8 * i));
        f->p[mb_at + (size_t)i] = (uint8_t)(meta_bytes >> (8 * i));
    }
    u64(f, XXH3_64bits_withSeed(f->p, f->n, 0));
    ASSERT_EQ(f->n, hb);

    /* Records (tables "Record frame" and "Record payload"). */
    uint64_t off[2], len[2], sum[2];
    for (int r = 0; r < 2; r++) {
        bb pl = {0};
        zeros(&pl, 3 * 16);        /* column directory, patched */
        uint64_t start[3], size[3];
        start[0] = pl.n;
        u64(&pl, (uint64_t)EX[r].label);
        size[0] = pl.n - start[0];
        pad8(&pl);
        start[1] = pl.n;
        put(&pl, EX[r].name, strlen(EX[r].name));
        size[1] = pl.n - start[1];
        pad8(&pl);
        start[2] = pl.n;
        u64(&pl, (uint64_t)EX[r].npts);   /* stored shape: every dim */
        u64(&pl, 2);
        for (int64_t k = 0; k < EX[r].npts * 2; k++) {
            u8(&pl, (unsigned)EX[r].pts[k] & 0xff);
            u8(&pl, ((unsigned)EX[r].pts[k] >> 8) & 0xff);
        }
        size[2] = pl.n - start[2];
        pad8(&pl);
        for (int c = 0; c < 3; c++) {
            set64(&pl, (size_t)c * 16, start[c]);
            set64(&pl, (size_t)c * 16 + 8, size[c]);
        }
        off[r] = f->n;
        len[r] = pl.n;
        sum[r] = example_sum(&pl, (uint64_t)r, sum_xor);
        u64(f, len[r]);
        u64(f, sum[r]);
        put(f, pl.p, pl.n);
        free(pl.p);
    }

    /* Index (table "Index"), then the footer (table "Footer"). */
    uint64_t io = f->n;
    for (int r = 0; r < 2; r++) {
        u64(f, off[r]);
        u64(f, len[r]);
        u64(f, sum[r]);
    }
    for (int r = 0; r < 2; r++)   /* scalar column "label", one value per record */
        u64(f, (uint64_t)EX[r].label);
    metablock(f, EX_META_KEY, EX_META_VAL);
    uint64_t ib = f->n - io;
    uint64_t isum = XXH3_64bits_withSeed(f->p + io, ib, 0);
    size_t foot = f->n;
    u64(f, io);
    u64(f, ib);
    u64(f, 2);                     /* record_count */
    u64(f, 0);                     /* first_record */
    u64(f, foot + 64);             /* file_size */
    u64(f, isum);
    u64(f, XXH3_64bits_withSeed(f->p + foot, 48, 0));
    put(f, MAGIC, 8);
}

static void check_example_reads(const char *path, unsigned flags) {
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, flags));
    ASSERT_EQ(sl_reader_count(r), 2);
    const sl_schema *s = sl_reader_schema(r);
    ASSERT_EQ(sl_schema_ncols(s), 3);
    ASSERT_STR_EQ(sl_schema_name(s, 2), "pts");
    ASSERT_EQ(sl_schema_dtype(s, 2), SL_I16);
    ASSERT_STR_EQ(sl_reader_meta(r, EX_META_KEY), EX_META_VAL);
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(sl_reader_read(r, (uint64_t)i, rec));
        ASSERT_EQ(*(const int64_t *)sl_record_column(rec, 0)->data, EX[i].label);
        const sl_tensor *t = sl_record_column(rec, 1);
        ASSERT_EQ(t->shape[0], (int64_t)strlen(EX[i].name));
        ASSERT(memcmp(t->data, EX[i].name, strlen(EX[i].name)) == 0);
        t = sl_record_column(rec, 2);
        ASSERT_EQ(t->ndim, 2);
        ASSERT_EQ(t->shape[0], EX[i].npts);
        ASSERT_EQ(t->shape[1], 2);
        ASSERT(EX[i].npts == 0 || memcmp(t->data, EX[i].pts, (size_t)EX[i].npts * 4) == 0);
    }
    const void *labels;
    ASSERT_OK(sl_reader_index_column(r, 0, &labels));
    ASSERT_EQ(((const int64_t *)labels)[0], 1);
    ASSERT_OK(sl_reader_verify(r, 0, NULL, NULL, NULL));
    sl_record_free(rec);
    sl_reader_free(r);
}

SL_TEST(record_format__hand_built_file_reads) {
    char path[512];
    sl_test_path(path, sizeof path, "hand.slr");
    for (int sum_xor = 0; sum_xor < 2; sum_xor++) {
        bb f = {0};
        build_example(&f, sum_xor);
        ASSERT_EQ(f.n, 880);   /* the size FORMAT.md's worked example states */
        slr_write_file(path, f.p, f.n);
        check_example_reads(path, 0);
        check_example_reads(path, SL_READ_NO_MMAP);
        free(f.p);
    }
}

/* A record checksum under the other definition than the header's bit says
 * is a mismatch: the bit decides, and a reader never tries both. */
SL_TEST(record_format__checksum_follows_feature_bit) {
    char path[512];
    sl_test_path(path, sizeof path, "mixed.slr");
    for (int sum_xor = 0; sum_xor < 2; sum_xor++) {
        bb f = {0};
        build_example(&f, sum_xor);
        /* flip the bit and re-seal the header (its checksum at 0x200) */
        f.p[16] ^= 0x02;
        set64(&f, 0x200, XXH3_64bits_withSeed(f.p, 0x200, 0));
        slr_write_file(path, f.p, f.n);
        sl_reader *r;
        ASSERT_OK(sl_reader_open(&r, path, 0));
        sl_record *rec;
        ASSERT_OK(sl_record_create(&rec));
        ASSERT_EQ(sl_reader_read(r, 1, rec), SL_ECORRUPT);
        ASSERT_CONTAINS(sl_errmsg(), "record 1: checksum mismatch");
        sl_record_free(rec);
        sl_reader_free(r);
        free(f.p);
    }
}

/* The writer's bytes equal the hand-built bytes: the tables describe the writer. */
SL_TEST(record_format__writer_matches_tables) {
    char path[512];
    sl_test_path(path, sizeof path, "written.slr");
    sl_schema *s;
    ASSERT_OK(sl_schema_create(&s));
    int64_t pts_shape[2] = {-1, 2};
    ASSERT_OK(sl_schema_add(s, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(s, "name", SL_COL_STRING, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(s, "pts", SL_COL_ARRAY, SL_I16, 2, pts_shape, 0));
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, NULL));
    ASSERT_OK(sl_writer_set_meta(w, EX_META_KEY, EX_META_VAL));
    for (int i = 0; i < 2; i++) {
        sl_tensor t[3];
        int64_t nl = (int64_t)strlen(EX[i].name), sh[2] = {EX[i].npts, 2};
        sl_tensor_view(&t[0], (void *)&EX[i].label, SL_I64, 0, NULL);
        sl_tensor_view(&t[1], (void *)EX[i].name, SL_U8, 1, &nl);
        sl_tensor_view(&t[2], (void *)(EX[i].pts ? EX[i].pts : PTS0), SL_I16, 2, sh);
        ASSERT_OK(sl_writer_append(w, t, 3));
    }
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(s);
    size_t len;
    uint8_t *got = slr_read_file(path, &len);
    bb f = {0};
    build_example(&f, 1);
    ASSERT_EQ(len, f.n);
    for (size_t i = 0; i < len; i++)
        if (got[i] != f.p[i])
            sl_test_fail(__FILE__, __LINE__, "byte %zu: writer 0x%02x, tables 0x%02x", i, got[i],
                         f.p[i]);
    free(got);
    free(f.p);
}

/* A zstd column built by hand: u64 raw size, then one zstd frame; the header's
 * required feature bit 0 is set. */
static const char ZTEXT[] = "zstd zstd zstd zstd zstd zstd zstd zstd zstd zstd";

/* One BYTES column with the ZSTD flag, one record holding ZTEXT; the stored
 * raw_size is `claim` (the true size when 0). */
static void build_zstd(bb *out, uint64_t claim) {
    size_t tl = strlen(ZTEXT);
    uint8_t z[256];
    size_t zl = ZSTD_compress(z, sizeof z, ZTEXT, tl, 3);
    ASSERT(!ZSTD_isError(zl));

    bb f = {0};
    put(&f, MAGIC, 8);
    u32(&f, 1);
    uint32_t hb = 64 + 136 + 8 + 8;
    u32(&f, hb);
    u64(&f, 1);                    /* required: zstd */
    u64(&f, 0);
    u32(&f, 1);
    u32(&f, 0);
    u64(&f, 0);
    u64(&f, 0);                    /* shard_bytes 0: informative only */
    u32(&f, 8);                    /* empty metadata block */
    u32(&f, 0);
    coldesc(&f, 4, 0, 0, NULL, 1, "blob");
    u32(&f, 0);                    /* metadata: 0 entries */
    u32(&f, 0);
    u64(&f, XXH3_64bits_withSeed(f.p, f.n, 0));
    ASSERT_EQ(f.n, hb);

    bb pl = {0};
    u64(&pl, 16);
    u64(&pl, 8 + zl);
    u64(&pl, claim ? claim : tl);
    put(&pl, z, zl);
    pad8(&pl);
    uint64_t off = f.n, sum = XXH3_64bits_withSeed(pl.p, pl.n, 0);
    u64(&f, pl.n);
    u64(&f, sum);
    put(&f, pl.p, pl.n);
    uint64_t io = f.n;
    u64(&f, off);
    u64(&f, pl.n);
    u64(&f, sum);
    u32(&f, 0);
    u32(&f, 0);
    uint64_t ib = f.n - io;
    uint64_t isum = XXH3_64bits_withSeed(f.p + io, ib, 0);
    size_t foot = f.n;
    u64(&f, io);
    u64(&f, ib);
    u64(&f, 1);
    u64(&f, 0);
    u64(&f, foot + 64);
    u64(&f, isum);
    u64(&f, XXH3_64bits_withSeed(f.p + foot, 48, 0));
    put(&f, MAGIC, 8);
    free(pl.p);
    *out = f;
}

SL_TEST(record_format__hand_built_zstd) {
    char path[512];
    sl_test_path(path, sizeof path, "z.slr");
    size_t tl = strlen(ZTEXT);
    uint32_t hb = 64 + 136 + 8 + 8;
    bb f;
    build_zstd(&f, 0);
    slr_write_file(path, f.p, f.n);

    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    ASSERT_OK(sl_reader_read(r, 0, rec));
    const sl_tensor *t = sl_record_column(rec, 0);
    ASSERT_EQ(t->nbytes, tl);
    ASSERT(memcmp(t->data, ZTEXT, tl) == 0);
    sl_record_free(rec);
    sl_reader_free(r);

    /* Without the feature bit the file is inconsistent and refused. */
    f.p[16] = 0;
    set64(&f, hb - 8, XXH3_64bits_withSeed(f.p, hb - 8, 0));
    slr_write_file(path, f.p, f.n);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "zstd feature bit");
    free(f.p);
}

/* A value claiming far more bytes than its zstd frame can hold is refused
 * before anything is allocated for it; a merely wrong claim fails decoding. */
SL_TEST(record_format__zstd_size_claims) {
    char path[512];
    sl_test_path(path, sizeof path, "claim.slr");
    const uint64_t claims[2] = {(uint64_t)1 << 30, 7};
    const char *whats[2] = {"cannot hold the 1073741824 bytes", "zstd"};
    for (int i = 0; i < 2; i++) {
        bb f;
        build_zstd(&f, claims[i]);
        slr_write_file(path, f.p, f.n);
        free(f.p);
        for (int mode = 0; mode < 2; mode++) {
            sl_reader *r;
            ASSERT_OK(sl_reader_open(&r, path, mode ? SL_READ_NO_MMAP : 0));
            sl_record *rec;
            ASSERT_OK(sl_record_create(&rec));
            ASSERT_RC(sl_reader_read(r, 0, rec), SL_ECORRUPT);
            ASSERT_CONTAINS(sl_errmsg(), path);
            ASSERT_CONTAINS(sl_errmsg(), "record 0: column \"blob\"");
            ASSERT_CONTAINS(sl_errmsg(), whats[i]);
            sl_record_free(rec);
            sl_reader_free(r);
        }
    }
}
