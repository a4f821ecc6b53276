/*
 * test_writer.c — writer lifecycle and argument checking: nothing appears at
 * the path before close, free without close leaves nothing, and bad values
 * are refused with a message naming the column and the record.
 */
#include "slr_testutil.h"

#include "record/record_format.h"

SL_TEST(record_writer__visible_only_after_close) {
    char path[512], partial[600];
    sl_test_path(path, sizeof path, "v.slr");
    snprintf(partial, sizeof partial, "%s.partial", path);
    sl_schema *s = slr_simple_schema(0);
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, NULL));
    ASSERT_STR_EQ(sl_writer__partial_path(w), partial);
    for (uint64_t i = 0; i < 50; i++) {
        ASSERT_OK(slr_simple_append(w, i, 0));
        if (i % 10 == 0)
            ASSERT_OK(sl_writer__flush(w));
        ASSERT(!slr_exists(path));
        ASSERT(slr_exists(partial));
    }
    ASSERT_OK(sl_writer_close(w));
    ASSERT(slr_exists(path));
    ASSERT(!slr_exists(partial));
    ASSERT_OK(sl_writer_close(w));   /* a second close is a no-op */
    ASSERT_RC(slr_simple_append(w, 50, 0), SL_EINVAL);
    sl_writer_free(w);
    sl_schema_free(s);
    slr_check_simple(path, 50, 0, 0);
}

SL_TEST(record_writer__free_without_close_removes_temporaries) {
    char path[512], partial[600];
    sl_test_path(path, sizeof path, "f");
    snprintf(partial, sizeof partial, "%s.partial", path);
    sl_schema *s = slr_simple_schema(1);
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.shard_bytes = 1024;   /* several finished shards plus a partial one */
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, &o));
    for (uint64_t i = 0; i < 100; i++)
        ASSERT_OK(slr_simple_append(w, i, 1));
    ASSERT_OK(sl_writer__flush(w));
    ASSERT(slr_exists(partial));
    sl_writer_free(w);
    ASSERT(!slr_exists(path));
    ASSERT(!slr_exists(partial));
    sl_schema_free(s);
    sl_writer_free(NULL);
}

SL_TEST(record_writer__replaces_existing_file) {
    char path[512];
    sl_test_path(path, sizeof path, "r.slr");
    slr_write_simple(path, 10, 0, 0);
    slr_write_simple(path, 20, 0, 0);
    slr_check_simple(path, 20, 0, 0);
    /* A sharded dataset can replace a single file. */
    slr_write_simple(path, 200, 0, 1024);
    slr_check_simple(path, 200, 0, 0);
}

SL_TEST(record_writer__refuses_existing_partial_and_directory) {
    char path[512], partial[600];
    sl_test_path(path, sizeof path, "p.slr");
    snprintf(partial, sizeof partial, "%s.partial", path);
    char inside[700];
    snprintf(inside, sizeof inside, "%s/shard-00000.slr.partial", partial);
    ASSERT_EQ(mkdir(partial, 0755), 0);
    slr_write_file(inside, "x", 1);
    sl_schema *s = slr_simple_schema(0);
    sl_writer *w = NULL;
    ASSERT_RC(sl_writer_open(&w, path, s, NULL), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), partial);
    ASSERT_CONTAINS(sl_errmsg(), "already exists");
    ASSERT(w == NULL);
    ASSERT(slr_exists(inside));   /* never touched */
    /* An empty leftover directory holds nothing and is reused. */
    ASSERT_EQ(unlink(inside), 0);
    ASSERT_OK(sl_writer_open(&w, path, s, NULL));
    sl_writer_free(w);
    ASSERT(!slr_exists(partial));
    ASSERT_EQ(mkdir(path, 0755), 0);
    ASSERT_RC(sl_writer_open(&w, path, s, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "is a directory");
    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.slr", sl_test_tmpdir());
    ASSERT_RC(sl_writer_open(&w, nodir, s, NULL), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "no/such/dir/x.slr.partial");
    sl_writer_options bad = SL_WRITER_OPTIONS_INIT;
    bad.version = 99;
    ASSERT_RC(sl_writer_open(&w, "x.slr", s, &bad), SL_EINVAL);
    sl_schema *empty;
    ASSERT_OK(sl_schema_create(&empty));
    ASSERT_RC(sl_writer_open(&w, "x.slr", empty, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "no columns");
    sl_schema_free(empty);
    sl_schema_free(s);
}

SL_TEST(record_writer__bad_values) {
    char path[512];
    sl_test_path(path, sizeof path, "b.slr");
    sl_schema *s = slr_simple_schema(0);
    int64_t fixed[2] = {2, 3};
    ASSERT_OK(sl_schema_add(s, "m", SL_COL_ARRAY, SL_U16, 2, fixed, 0));
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, NULL));
    int64_t label = 1;
    uint8_t bytes[4] = {0};
    uint16_t m[6] = {0};
    int64_t four = 4, sh[2] = {2, 3}, bad_sh[2] = {3, 2};
    sl_tensor t[3];
    sl_tensor_view(&t[0], &label, SL_I64, 0, NULL);
    sl_tensor_view(&t[1], bytes, SL_U8, 1, &four);
    sl_tensor_view(&t[2], m, SL_U16, 2, sh);
    ASSERT_OK(sl_writer_append(w, t, 3));

    ASSERT_RC(sl_writer_append(w, t, 2), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "record 1: 2 columns given, schema has 3");
    sl_tensor_view(&t[2], m, SL_U16, 2, bad_sh);
    ASSERT_RC(sl_writer_append(w, t, 3), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), path);
    ASSERT_CONTAINS(sl_errmsg(), "record 1: column \"m\"");
    ASSERT_CONTAINS(sl_errmsg(), "dim 0 is 3, schema says 2");
    sl_tensor_view(&t[2], m, SL_I16, 2, sh);
    ASSERT_RC(sl_writer_append(w, t, 3), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "want uint16");
    sl_tensor_view(&t[2], m, SL_U16, 2, sh);
    double d = 1.0;
    sl_tensor_view(&t[0], &d, SL_F64, 0, NULL);
    ASSERT_RC(sl_writer_append(w, t, 3), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "column \"label\" (0): want a int64 scalar");
    sl_tensor_view(&t[0], &label, SL_I64, 0, NULL);
    sl_tensor_view(&t[1], bytes, SL_U8, 2, sh);
    ASSERT_RC(sl_writer_append(w, t, 3), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "column \"data\" (1): want a 1-D uint8 tensor");
    sl_tensor_view(&t[1], NULL, SL_U8, 1, &four);
    ASSERT_RC(sl_writer_append(w, t, 3), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "data is NULL");
    /* Failed appends leave the writer usable. */
    sl_tensor_view(&t[1], bytes, SL_U8, 1, &four);
    ASSERT_OK(sl_writer_append(w, t, 3));
    ASSERT_EQ(sl_writer_count(w), 2);
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(s);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    ASSERT_EQ(sl_reader_count(r), 2);
    sl_reader_free(r);
}

SL_TEST(record_writer__schema_rules) {
    sl_schema *s;
    ASSERT_OK(sl_schema_create(&s));
    int64_t sh[1] = {4};
    ASSERT_RC(sl_schema_add(s, "", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0), SL_EINVAL);
    char longname[80];
    memset(longname, 'x', 64);
    longname[64] = 0;
    ASSERT_RC(sl_schema_add(s, longname, SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0), SL_EINVAL);
    longname[63] = 0;
    ASSERT_OK(sl_schema_add(s, longname, SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_RC(sl_schema_add(s, longname, SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "duplicate");
    ASSERT_RC(sl_schema_add(s, "z", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, SL_COLF_ZSTD),
              SL_EINVAL);
    ASSERT_RC(sl_schema_add(s, "a", SL_COL_ARRAY, SL_DTYPE_INVALID, 1, sh, 0), SL_EINVAL);
    ASSERT_RC(sl_schema_add(s, "a", SL_COL_ARRAY, SL_U8, -1, sh, 0), SL_EINVAL);
    ASSERT_RC(sl_schema_add(s, "a", SL_COL_ARRAY, SL_U8, 9, sh, 0), SL_EINVAL);
    int64_t neg[1] = {-2};
    ASSERT_RC(sl_schema_add(s, "a", SL_COL_ARRAY, SL_U8, 1, neg, 0), SL_EINVAL);
    ASSERT_RC(sl_schema_add(s, "a", (sl_coltype)9, SL_DTYPE_INVALID, 0, NULL, 0), SL_EINVAL);
    ASSERT_RC(sl_schema_add(s, "a", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0x80), SL_EINVAL);
    /* bfloat16 is a tensor type of pipeline outputs, not a .slr column type */
    ASSERT_EQ(sl_dtype_size(SL_BF16), 2);
    ASSERT_EQ(sl_dtype_parse("bfloat16"), SL_BF16);
    ASSERT_RC(sl_schema_add(s, "a", SL_COL_ARRAY, SL_BF16, 1, sh, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "bfloat16");
    ASSERT_OK(sl_schema_add(s, "a", SL_COL_ARRAY, SL_U8, 1, sh, SL_COLF_ZSTD));
    ASSERT_EQ(sl_schema_ncols(s), 2);
    ASSERT_EQ(sl_schema_find(s, "a"), 1);
    ASSERT_EQ(sl_schema_find(s, "b"), -1);
    ASSERT_EQ(sl_schema_type(s, 1), SL_COL_ARRAY);
    ASSERT_EQ(sl_schema_dtype(s, 1), SL_U8);
    ASSERT_EQ(sl_schema_flags(s, 1), SL_COLF_ZSTD);
    int64_t got[SL_MAX_DIMS];
    ASSERT_EQ(sl_schema_shape(s, 1, got), 1);
    ASSERT_EQ(got[0], 4);
    ASSERT(sl_schema_name(s, 5) == NULL);
    ASSERT_STR_EQ(sl_coltype_name(SL_COL_FLOAT64), "float64");
    for (int i = 2; i < SL_MAX_COLUMNS; i++) {
        char n[16];
        snprintf(n, sizeof n, "c%d", i);
        ASSERT_OK(sl_schema_add(s, n, SL_COL_STRING, SL_DTYPE_INVALID, 0, NULL, 0));
    }
    ASSERT_RC(sl_schema_add(s, "one-too-many", SL_COL_STRING, SL_DTYPE_INVALID, 0, NULL, 0),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "too many columns");
    sl_schema_free(s);
}

/* zstd on a large compressible array really shrinks the file. */
SL_TEST(record_writer__zstd_compresses) {
    char a[512], b[512];
    sl_test_path(a, sizeof a, "raw.slr");
    sl_test_path(b, sizeof b, "z.slr");
    for (int z = 0; z < 2; z++) {
        sl_schema *s;
        ASSERT_OK(sl_schema_create(&s));
        int64_t sh[2] = {64, 64};
        ASSERT_OK(sl_schema_add(s, "x", SL_COL_ARRAY, SL_F32, 2, sh, z ? SL_COLF_ZSTD : 0));
        sl_writer *w;
        ASSERT_OK(sl_writer_open(&w, z ? b : a, s, NULL));
        static float img[64 * 64];
        for (int i = 0; i < 20; i++) {
            for (int k = 0; k < 64 * 64; k++)
                img[k] = (float)((k / 64 + i) % 8);
            sl_tensor t;
            sl_tensor_view(&t, img, SL_F32, 2, sh);
            ASSERT_OK(sl_writer_append(w, &t, 1));
        }
        ASSERT_OK(sl_writer_close(w));
        sl_writer_free(w);
        sl_schema_free(s);
    }
    struct stat sa, sb;
    ASSERT_EQ(stat(a, &sa), 0);
    ASSERT_EQ(stat(b, &sb), 0);
    ASSERT(sb.st_size * 10 < sa.st_size);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, b, 0));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    ASSERT_OK(sl_reader_read(r, 19, rec));
    const sl_tensor *t = sl_record_column(rec, 0);
    ASSERT_EQ(t->nbytes, 64 * 64 * 4);
    ASSERT(((const float *)t->data)[64 * 5] == (float)((5 + 19) % 8));
    sl_record_free(rec);
    sl_reader_free(r);
}

/* The writer is deterministic: the same records give the same bytes, so a
 * dataset can be rebuilt and compared, or cached by content. */
SL_TEST(record_writer__deterministic_bytes) {
    char a[512], b[512];
    sl_test_path(a, sizeof a, "a.slr");
    sl_test_path(b, sizeof b, "b.slr");
    slr_write_simple(a, 64, 1, 0);
    slr_write_simple(b, 64, 1, 0);
    size_t la, lb;
    uint8_t *x = slr_read_file(a, &la), *y = slr_read_file(b, &lb);
    ASSERT_EQ(la, lb);
    ASSERT(memcmp(x, y, la) == 0);
    free(x);
    free(y);
}

/* A 0-d ARRAY column (one element of its dtype per record) round-trips, and
 * its file carries required feature bit 2 (FORMAT.md 4.4): a reader that
 * does not know the bit refuses the file instead of misreading it. */
SL_TEST(record_writer__scalar_array_column) {
    char path[4096];
    sl_test_path(path, sizeof path, "s.slr");
    sl_schema *s;
    ASSERT_OK(sl_schema_create(&s));
    ASSERT_OK(sl_schema_add(s, "w", SL_COL_ARRAY, SL_F32, 0, NULL, 0));
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, NULL));
    for (int i = 0; i < 5; i++) {
        float v = 0.25f * (float)i - 1.0f;
        sl_tensor t;
        sl_tensor_view(&t, &v, SL_F32, 0, NULL);
        ASSERT_OK(sl_writer_append(w, &t, 1));
    }
    float bad[2] = {1, 2};
    int64_t two = 2;
    sl_tensor t2;
    sl_tensor_view(&t2, bad, SL_F32, 1, &two);
    ASSERT_RC(sl_writer_append(w, &t2, 1), SL_EINVAL);
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(s);

    FILE *f = fopen(path, "rb");
    ASSERT(f != NULL);
    uint8_t h[24];
    ASSERT_EQ(fread(h, 1, sizeof h, f), sizeof h);
    fclose(f);
    uint64_t req = 0;
    for (int k = 7; k >= 0; k--)
        req = req << 8 | h[16 + k];
    ASSERT(req & 0x4);

    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    ASSERT_EQ(sl_schema_type(sl_reader_schema(r), 0), SL_COL_ARRAY);
    ASSERT_EQ(sl_schema_shape(sl_reader_schema(r), 0, NULL), 0);
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    for (uint64_t i = 0; i < 5; i++) {
        ASSERT_OK(sl_reader_read(r, i, rec));
        const sl_tensor *t = sl_record_column(rec, 0);
        ASSERT_EQ(t->dtype, SL_F32);
        ASSERT_EQ(t->ndim, 0);
        ASSERT_EQ(t->nbytes, 4);
        ASSERT(*(const float *)t->data == 0.25f * (float)i - 1.0f);
    }
    sl_record_free(rec);
    sl_reader_free(r);
}
