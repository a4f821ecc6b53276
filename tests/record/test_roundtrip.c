/*
 * test_roundtrip.c — write -> read round trips of every column type.
 */
#include "test.h"

#include <unistd.h>

static sl_schema *make_schema(unsigned array_flags) {
    sl_schema *s;
    ASSERT_OK(sl_schema_create(&s));
    ASSERT_OK(sl_schema_add(s, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(s, "weight", SL_COL_FLOAT64, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(s, "name", SL_COL_STRING, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(s, "blob", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0));
    int64_t fixed[2] = {3, 4};
    ASSERT_OK(sl_schema_add(s, "grid", SL_COL_ARRAY, SL_F32, 2, fixed, array_flags));
    int64_t var[2] = {-1, 2};
    ASSERT_OK(sl_schema_add(s, "pts", SL_COL_ARRAY, SL_I16, 2, var, array_flags));
    return s;
}

/* Record i's values, deterministic. */
typedef struct rec_vals {
    int64_t label;
    double weight;
    char name[32];
    uint8_t blob[64];
    size_t blob_len;
    float grid[12];
    int16_t pts[40];
    int64_t npts;
} rec_vals;

static void make_vals(uint64_t i, rec_vals *v) {
    memset(v, 0, sizeof *v);
    v->label = (int64_t)(i % 7) - 3;
    v->weight = 0.5 * (double)i;
    if (i % 5 != 0)
        snprintf(v->name, sizeof v->name, "rec-%llu", (unsigned long long)i);
    v->blob_len = (i * 13) % 64;
    for (size_t k = 0; k < v->blob_len; k++)
        v->blob[k] = (uint8_t)(i * 31 + k);
    for (int k = 0; k < 12; k++)
        v->grid[k] = (float)i + (float)k / 8.0f;
    v->npts = (int64_t)(i % 20);
    for (int k = 0; k < v->npts * 2; k++)
        v->pts[k] = (int16_t)(k - (int)i);
}

static void append_vals(sl_writer *w, const rec_vals *v) {
    sl_tensor t[6];
    sl_tensor_view(&t[0], (void *)&v->label, SL_I64, 0, NULL);
    sl_tensor_view(&t[1], (void *)&v->weight, SL_F64, 0, NULL);
    int64_t nlen = (int64_t)strlen(v->name);
    sl_tensor_view(&t[2], (void *)v->name, SL_U8, 1, &nlen);
    int64_t blen = (int64_t)v->blob_len;
    sl_tensor_view(&t[3], (void *)v->blob, SL_U8, 1, &blen);
    int64_t gshape[2] = {3, 4};
    sl_tensor_view(&t[4], (void *)v->grid, SL_F32, 2, gshape);
    int64_t pshape[2] = {v->npts, 2};
    sl_tensor_view(&t[5], (void *)v->pts, SL_I16, 2, pshape);
    ASSERT_OK(sl_writer_append(w, t, 6));
}

static void check_vals(const sl_record *rec, const rec_vals *v) {
    const sl_tensor *t = sl_record_column(rec, 0);
    ASSERT_EQ(t->dtype, SL_I64);
    ASSERT_EQ(t->ndim, 0);
    ASSERT_EQ(*(const int64_t *)t->data, v->label);
    t = sl_record_column(rec, 1);
    ASSERT_EQ(t->dtype, SL_F64);
    ASSERT(*(const double *)t->data == v->weight);
    t = sl_record_column(rec, 2);
    ASSERT_EQ(t->dtype, SL_U8);
    ASSERT_EQ(t->ndim, 1);
    ASSERT_EQ(t->shape[0], (int64_t)strlen(v->name));
    ASSERT(memcmp(t->data, v->name, strlen(v->name)) == 0);
    t = sl_record_column(rec, 3);
    ASSERT_EQ(t->shape[0], (int64_t)v->blob_len);
    ASSERT_EQ(t->nbytes, v->blob_len);
    ASSERT(v->blob_len == 0 || memcmp(t->data, v->blob, v->blob_len) == 0);
    t = sl_record_column(rec, 4);
    ASSERT_EQ(t->dtype, SL_F32);
    ASSERT_EQ(t->ndim, 2);
    ASSERT_EQ(t->shape[0], 3);
    ASSERT_EQ(t->shape[1], 4);
    ASSERT(memcmp(t->data, v->grid, sizeof v->grid) == 0);
    t = sl_record_column(rec, 5);
    ASSERT_EQ(t->dtype, SL_I16);
    ASSERT_EQ(t->shape[0], v->npts);
    ASSERT_EQ(t->shape[1], 2);
    ASSERT_EQ(t->nbytes, (size_t)v->npts * 4);
    ASSERT(v->npts == 0 || memcmp(t->data, v->pts, (size_t)v->npts * 4) == 0);
}

static void roundtrip(unsigned array_flags, unsigned read_flags, uint64_t n) {
    char path[512];
    sl_test_path(path, sizeof path, "data.slr");
    sl_schema *s = make_schema(array_flags);
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, NULL));
    rec_vals v;
    for (uint64_t i = 0; i < n; i++) {
        make_vals(i, &v);
        append_vals(w, &v);
    }
    ASSERT_EQ(sl_writer_count(w), n);
    ASSERT(access(path, F_OK) != 0);
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(s);
    ASSERT(access(path, F_OK) == 0);

    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, read_flags));
    ASSERT_EQ(sl_reader_count(r), n);
    ASSERT_EQ(sl_schema_ncols(sl_reader_schema(r)), 6);
    ASSERT_EQ(sl_reader_shard_count(r), 1);
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    for (uint64_t i = 0; i < n; i++) {
        ASSERT_OK(sl_reader_read(r, i, rec));
        ASSERT_EQ(sl_record_index(rec), i);
        make_vals(i, &v);
        check_vals(rec, &v);
    }
    ASSERT_RC(sl_reader_read(r, n, rec), SL_EINVAL);
    ASSERT_OK(sl_reader_verify(r, 0, NULL, NULL, NULL));
    sl_record_free(rec);
    sl_reader_free(r);
}

SL_TEST(record_roundtrip__all_types) { roundtrip(0, 0, 100); }
SL_TEST(record_roundtrip__all_types_pread) { roundtrip(0, SL_READ_NO_MMAP, 100); }
SL_TEST(record_roundtrip__zstd) { roundtrip(SL_COLF_ZSTD, 0, 100); }
SL_TEST(record_roundtrip__zstd_pread) { roundtrip(SL_COLF_ZSTD, SL_READ_NO_MMAP, 50); }
SL_TEST(record_roundtrip__zero_records) { roundtrip(0, 0, 0); }
