/* Pipelines over .slr files: reading, filters pushed into the index, damaged
 * records under both error policies. */
#include "pipe_util.h"

#include <stdio.h>

/* Change one byte inside record i's payload. */
static void corrupt_record(const char *path, int i) {
    char needle[32];
    snprintf(needle, sizeof needle, "payload-%05d-00100", i);
    ASSERT(pu_patch_after(path, needle, 3, 'X' ^ needle[3]));
}

SL_TEST(pipeline_slr__reads_in_order) {
    char path[512];
    sl_test_path(path, sizeof path, "d.slr");
    make_slr(path, 100);
    sl_pipeline *p = pu_json_pipeline(
        "{\"source\": {\"path\": \"%s\"}, \"ops\": [{\"op\": \"batch\", \"size\": 8}]}", path);
    int64_t next = 0;
    sl_batch *b;
    while (sl_pipeline_next(p, &b) == SL_OK) {
        int ci = sl_batch_find(b, "image"), cl = sl_batch_find(b, "label");
        const sl_tensor *img = sl_batch_column(b, ci);
        const sl_tensor *lab = sl_batch_column(b, cl);
        ASSERT(img && lab);
        ASSERT_EQ(img->shape[1], 200);
        for (int64_t i = 0; i < sl_batch_size(b); i++, next++) {
            char want[32];
            snprintf(want, sizeof want, "payload-%05d", (int)next);
            ASSERT(!memcmp((const char *)img->data + i * 200, want, strlen(want)));
            ASSERT_EQ(((const int64_t *)lab->data)[i], next % 10);
        }
        sl_batch_release(b);
    }
    ASSERT_EQ(next, 100);
    sl_pipeline_free(p);
}

SL_TEST(pipeline_slr__filter_pushdown_skips_damaged_pages) {
    char path[512];
    sl_test_path(path, sizeof path, "d.slr");
    make_slr(path, 200);
    corrupt_record(path, 13); /* label 3: filtered out below */
    sl_pipeline *p = pu_json_pipeline(
        "{\"source\": {\"path\": \"%s\", \"shuffle\": true}, \"ops\": [{\"op\": \"filter\", "
        "\"column\": \"label\", \"in\": [1, 2]}, {\"op\": \"batch\", \"size\": 7}]}",
        path);
    char text[4096];
    size_t len;
    ASSERT_OK(sl_pipeline_explain(p, text, sizeof text, &len));
    ASSERT_CONTAINS(text, "filter pushed into the source index");
    ASSERT_CONTAINS(text, "40 of 200 records kept");
    int64_t total = 0;
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        const sl_tensor *lab = sl_batch_column(b, sl_batch_find(b, "label"));
        for (int64_t i = 0; i < sl_batch_size(b); i++) {
            int64_t l = ((const int64_t *)lab->data)[i];
            ASSERT(l == 1 || l == 2);
        }
        total += sl_batch_size(b);
        sl_batch_release(b);
    }
    ASSERT_RC(rc, SL_END);
    ASSERT_EQ(total, 40);
    sl_pipeline_free(p);

    /* without the filter the damaged record is read and fails, naming it */
    p = pu_json_pipeline("{\"source\": {\"path\": \"%s\"}, \"ops\": [{\"op\": \"batch\", \"size\": 7}]}",
                     path);
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK)
        sl_batch_release(b);
    ASSERT_RC(rc, SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "record 13");
    ASSERT_CONTAINS(sl_errmsg(), "d.slr");
    ASSERT_CONTAINS(sl_pipeline_error(p), "record 13");
    /* the failure sticks */
    ASSERT_RC(sl_pipeline_next(p, &b), SL_ECORRUPT);
    sl_pipeline_free(p);

    /* policy skip: the record is dropped, counted and reported */
    p = pu_json_pipeline("{\"source\": {\"path\": \"%s\"}, \"on_error\": \"skip\", "
                     "\"ops\": [{\"op\": \"batch\", \"size\": 7}]}",
                     path);
    total = 0;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        total += sl_batch_size(b);
        sl_batch_release(b);
    }
    ASSERT_RC(rc, SL_END);
    ASSERT_EQ(total, 199);
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    ASSERT_EQ(st.skipped, 1);
    ASSERT_EQ(st.nerrors, 1);
    ASSERT_CONTAINS(st.errors[0], "record 13");
    sl_pipeline_free(p);
}

SL_TEST(pipeline_slr__not_an_slr_file) {
    char path[512];
    sl_test_path(path, sizeof path, "junk.slr");
    FILE *f = fopen(path, "wb");
    fputs("this is not a record file, just text long enough to have a tail....\n", f);
    fclose(f);
    sl_spec *spec;
    ASSERT_OK(sl_spec_create(&spec));
    ASSERT_OK(sl_spec_set_source_path(spec, path));
    sl_pipeline *p;
    int rc = sl_pipeline_create(&p, spec);
    ASSERT(rc < 0);
    ASSERT(p == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "source.path: ");
    ASSERT_CONTAINS(sl_errmsg(), "junk.slr");
    sl_spec_set_source_path(spec, "/nonexistent/x.slr");
    ASSERT(sl_pipeline_create(&p, spec) < 0);
    ASSERT_CONTAINS(sl_errmsg(), "source.path: ");
    sl_spec_free(spec);
}

/* Reading threads borrow views of the file mapping (no reference count per
 * column); whatever reaches the consumer must still own its bytes: a sample
 * without batch, and a batch, both read after the pipeline (and with it the
 * reader and its mapping) is gone. */
SL_TEST(pipeline_slr__batches_outlive_pipeline) {
    char path[512];
    sl_test_path(path, sizeof path, "d.slr");
    make_slr(path, 40);
    const char *fmts[2] = {"{\"source\": {\"path\": \"%s\", \"shuffle\": true}}",
                           "{\"source\": {\"path\": \"%s\"}, \"ops\": [{\"op\": \"batch\", "
                           "\"size\": 8}]}"};
    for (int f = 0; f < 2; f++) {
        sl_pipeline *p = pu_json_pipeline(fmts[f], path);
        sl_batch *b;
        ASSERT_OK(sl_pipeline_next(p, &b));
        const sl_tensor *img = sl_batch_column(b, sl_batch_find(b, "image"));
        const sl_tensor *lab = sl_batch_column(b, sl_batch_find(b, "label"));
        ASSERT(img && lab && img->buf && lab->buf);
        int64_t first = f == 0 ? ((const int64_t *)lab->data)[0] : 0;
        sl_pipeline_free(p);
        /* reading freed memory crashes (unmapped) or fails under ASan */
        ASSERT(!memcmp(img->data, "payload-000", 11));
        ASSERT(first >= 0 && first < 10);
        ASSERT_EQ(((const int64_t *)lab->data)[0], first);
        sl_batch_release(b);
    }
}
