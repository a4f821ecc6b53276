/*
 * The memory source over arrays it takes from the caller
 * (sl_source__mem_adopt, source_mem.c): no copy, the arrays freed with the
 * source or on a refused call, int64 columns indexed; and the copying
 * constructors keep no column indexed.
 */
#include "test.h"
#include "core/core.h"
#include "source/source.h"

#include <string.h>

static void *filled(size_t n, int seed) {
    uint8_t *p = sl__malloc(n);
    ASSERT(p);
    for (size_t k = 0; k < n; k++)
        p[k] = (uint8_t)(seed + k * 5);
    return p;
}

SL_TEST(source_mem__adopt_takes_the_arrays) {
    enum { N = 9 };
    uint8_t *img = filled(N * 6, 3);
    int64_t *lab = sl__malloc(N * sizeof *lab);
    ASSERT(lab);
    for (int i = 0; i < N; i++)
        lab[i] = 100 - i;
    const int64_t shape[2] = {2, 3};
    sl_tensor rows[2];
    sl_tensor_view(&rows[0], img, SL_U8, 2, shape);
    sl_tensor_view(&rows[1], lab, SL_I64, 0, NULL);
    const char *names[2] = {"x", "y"};
    sl_source *src;
    ASSERT_OK(sl_source__mem_adopt(&src, 2, names, rows, N, 1u << 1));
    ASSERT_STR_EQ(sl_source_kind(src), "memory");
    ASSERT_STR_EQ(sl_source_name(src), "memory");
    ASSERT_U64_EQ(sl_source_count(src), N);
    ASSERT(sl_source__reads_memory(src));
    ASSERT_EQ(src->col[0].type, SL_COL_ARRAY);
    ASSERT_EQ(src->col[0].indexed, 0);
    ASSERT_EQ(src->col[1].type, SL_COL_INT64);
    ASSERT_EQ(src->col[1].indexed, 1);
    const void *vals = NULL;
    ASSERT_OK(sl_source_index_column(src, 1, &vals));
    ASSERT(vals == lab); /* the caller's array, not a copy */
    ASSERT_RC(sl_source_index_column(src, 0, &vals), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "memory: column 'x' is not indexed");
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    ASSERT_OK(sl_source_read(src, 4, &smp));
    ASSERT(smp.col[0].data == img + 4 * 6); /* a view */
    ASSERT_EQ(*(const int64_t *)smp.col[1].data, 96);
    sl_sample_clear(&smp);
    sl_source_free(src); /* frees img and lab (the sanitizer build checks) */
}

SL_TEST(source_mem__adopt_refused_frees_the_arrays) {
    const char *names[2] = {"x", "y"};
    const char *twice[2] = {"x", "x"};
    sl_tensor rows[2];
    sl_source *src = NULL;
    /* a label column that is not one int64 per record */
    sl_tensor_view(&rows[0], filled(8, 1), SL_U8, 0, NULL);
    sl_tensor_view(&rows[1], filled(8 * 4, 2), SL_I32, 0, NULL);
    ASSERT_RC(sl_source__mem_adopt(&src, 2, names, rows, 8, 1u << 1), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "column 'y': an int64 column holds one int64 per record");
    /* a name given twice */
    sl_tensor_view(&rows[0], filled(8, 1), SL_U8, 0, NULL);
    sl_tensor_view(&rows[1], filled(8, 2), SL_U8, 0, NULL);
    ASSERT_RC(sl_source__mem_adopt(&src, 2, twice, rows, 8, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "column name 'x' given twice");
    /* out of memory for the source itself */
    sl_tensor_view(&rows[0], filled(8, 1), SL_U8, 0, NULL);
    sl_tensor_view(&rows[1], filled(8, 2), SL_U8, 0, NULL);
    sl__alloc_fail_at(1);
    int rc = sl_source__mem_adopt(&src, 2, names, rows, 8, 0);
    sl__alloc_fail_at(0);
    ASSERT_RC(rc, SL_ENOMEM);
    ASSERT(src == NULL);
}

SL_TEST(source_mem__copied_columns_are_not_indexed) {
    int64_t v[4] = {1, 2, 3, 4};
    const int64_t shape[1] = {4};
    sl_tensor col;
    sl_tensor_view(&col, v, SL_I64, 1, shape);
    const char *names[1] = {"v"};
    sl_source *src;
    ASSERT_OK(sl_source__mem_columns(&src, 1, names, &col));
    ASSERT_STR_EQ(sl_source_kind(src), "memory");
    ASSERT_EQ(src->col[0].type, SL_COL_ARRAY);
    ASSERT_EQ(src->col[0].indexed, 0);
    const void *vals = NULL;
    ASSERT_RC(sl_source_index_column(src, 0, &vals), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "memory: column 'v' is not indexed");
    ASSERT_RC(src->vt->index_column(src, 0, &vals), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "memory: column 0 is not indexed");
    sl_source_free(src);
}
