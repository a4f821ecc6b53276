/* Pipelines over .slr files: reading, filters pushed into the index, damaged
 * records under both error policies. */
#include "pipe_util.h"
#include "record/record_format.h"
#include "../ops/ops_testdata.h"

#include <cjson/cJSON.h>

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

/* The record numbers a pipeline yields, in order (from the payload text);
 * *skipped_out gets the records it skipped. */
static int64_t *pipeline_records(const char *json, const char *path, int64_t *n_out,
                                 uint64_t *skipped_out) {
    sl_pipeline *p = pu_json_pipeline(json, path);
    int64_t cap = 4096, n = 0;
    int64_t *ids = malloc((size_t)cap * sizeof *ids);
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        const sl_tensor *img = sl_batch_column(b, sl_batch_find(b, "image"));
        for (int64_t i = 0; i < sl_batch_size(b); i++) {
            ASSERT(n < cap);
            ids[n++] = atoll((const char *)img->data + i * 200 + 8);
        }
        sl_batch_release(b);
    }
    ASSERT_RC(rc, SL_END);
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    *skipped_out = st.skipped;
    sl_pipeline_free(p);
    *n_out = n;
    return ids;
}

/* A directory of 60-odd shards (more than the reader keeps open at first)
 * read by a shuffled pipeline gives exactly the batches of the same records
 * in one file: shards opened, closed and opened again as the reading
 * threads need them (under TSan: reads racing closes), global and window
 * orders, samples outliving the pipeline. */
SL_TEST(pipeline_slr__sharded_directory_equals_file) {
    char dir[512], file[512];
    sl_test_path(dir, sizeof dir, "dir.slr");
    sl_test_path(file, sizeof file, "one.slr");
    make_slr_shards(dir, 2000, 8192);
    make_slr_shards(file, 2000, 0);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, dir, 0));
    ASSERT(sl_reader_shard_count(r) > 40);
    sl_reader_free(r);
    const char *specs[3] = {
        "{\"source\": {\"path\": \"%s\", \"shuffle\": {\"mode\": \"global\"}, \"parallel\": 2}, \"seed\": 5, "
        "\"epochs\": 2, \"ops\": [{\"op\": \"batch\", \"size\": 32}]}",
        "{\"source\": {\"path\": \"%s\", \"shuffle\": {\"mode\": \"window\", \"window\": 256, "
        "\"block\": 8}, \"parallel\": 2}, \"seed\": 5, \"ops\": [{\"op\": \"batch\", \"size\": 32}]}",
        "{\"source\": {\"path\": \"%s\", \"shuffle\": {\"mode\": \"window\", \"window\": 64, "
        "\"block\": 32}, \"shard\": {\"index\": 1, \"count\": 3}, \"parallel\": 2}, \"seed\": 9, "
        "\"ops\": [{\"op\": \"batch\", \"size\": 16}]}"};
    for (int k = 0; k < 3; k++) {
        int64_t na, nb;
        uint64_t sa, sb;
        int64_t *a = pipeline_records(specs[k], dir, &na, &sa);
        int64_t *b = pipeline_records(specs[k], file, &nb, &sb);
        ASSERT_EQ(na, nb);
        ASSERT(na > 0);
        ASSERT_EQ(sa + sb, 0);
        for (int64_t i = 0; i < na; i++)
            ASSERT_EQ(a[i], b[i]);
        free(a);
        free(b);
    }
    /* samples (no batch) keep their bytes after the pipeline is gone */
    sl_pipeline *p = pu_json_pipeline("{\"source\": {\"path\": \"%s\", \"shuffle\": true, \"parallel\": 2}}", dir);
    sl_batch *keep[64];
    for (int i = 0; i < 64; i++)
        ASSERT_OK(sl_pipeline_next(p, &keep[i]));
    sl_pipeline_free(p);
    for (int i = 0; i < 64; i++) {
        const sl_tensor *img = sl_batch_column(keep[i], sl_batch_find(keep[i], "image"));
        const sl_tensor *lab = sl_batch_column(keep[i], sl_batch_find(keep[i], "label"));
        int64_t id = atoll((const char *)img->data + 8);
        ASSERT(!memcmp(img->data, "payload-", 8));
        ASSERT_EQ(((const int64_t *)lab->data)[0], id % 10);
        sl_batch_release(keep[i]);
    }
}

/* A damaged shard costs only its own records under on_error skip; a rank
 * whose records lie in other shards reads all of its records. */
SL_TEST(pipeline_slr__damaged_shard_costs_its_records) {
    char dir[512];
    sl_test_path(dir, sizeof dir, "dir.slr");
    make_slr_shards(dir, 600, 8192);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, dir, 0));
    ASSERT(sl_reader_shard_count(r) > 8);
    const uint64_t per = r->shards[0].count;
    const uint64_t f3 = per * 3, n3 = r->shards[3].count;
    char s3[600];
    snprintf(s3, sizeof s3, "%s", sl_reader_shard_path(r, 3));
    sl_reader_free(r);
    size_t len;
    uint8_t *bytes = sl_test_read_file(s3, &len);
    bytes[len - 20] ^= 0x40; /* the footer */
    sl_test_write_file(s3, bytes, len);
    free(bytes);

    int64_t n;
    uint64_t skipped;
    int64_t *ids = pipeline_records("{\"source\": {\"path\": \"%s\", \"shuffle\": true, \"parallel\": 2}, "
                                    "\"on_error\": \"skip\", "
                                    "\"ops\": [{\"op\": \"batch\", \"size\": 16}]}",
                                    dir, &n, &skipped);
    ASSERT_EQ(n, 600 - (int64_t)n3);
    ASSERT_EQ(skipped, n3);
    for (int64_t i = 0; i < n; i++)
        ASSERT((uint64_t)ids[i] < f3 || (uint64_t)ids[i] >= f3 + n3);
    free(ids);

    /* stop: the error names the shard file, a record of it and the cause */
    sl_pipeline *p = pu_json_pipeline("{\"source\": {\"path\": \"%s\"}, \"ops\": [{\"op\": "
                                      "\"batch\", \"size\": 16}]}", dir);
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK)
        sl_batch_release(b);
    ASSERT_RC(rc, SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), s3);
    ASSERT_CONTAINS(sl_errmsg(), "footer checksum mismatch");
    char rtext[64];
    snprintf(rtext, sizeof rtext, "record %llu: ", (unsigned long long)f3);
    ASSERT_CONTAINS(sl_errmsg(), rtext);
    sl_pipeline_free(p);

    /* window order with blocks of one shard, 4 ranks: the ranks that do not
     * read shard 3 see no error; together they lose exactly its records */
    uint64_t lost = 0;
    int clean = 0;
    for (int rank = 0; rank < 4; rank++) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "{\"source\": {\"path\": \"%%s\", \"shuffle\": {\"mode\": \"window\", "
                 "\"window\": %llu, \"block\": %llu}, \"shard\": {\"index\": %d, \"count\": 4, "
                 "\"equal\": \"none\"}}, \"on_error\": \"skip\", \"ops\": [{\"op\": \"batch\", "
                 "\"size\": 16}]}",
                 (unsigned long long)per, (unsigned long long)per, rank);
        ids = pipeline_records(spec, dir, &n, &skipped);
        lost += skipped;
        clean += skipped == 0;
        free(ids);
    }
    ASSERT_EQ(lost, n3);
    ASSERT(clean >= 2);
}

/* A .slr of `n` JPEGs with a `path` column; record `bad` holds the first half
 * of its JPEG only (a file cut short, as a header-only check packs it). */
static void make_jpeg_slr(const char *path, int n, int bad) {
    sl_schema *sc;
    ASSERT_OK(sl_schema_create(&sc));
    ASSERT_OK(sl_schema_add(sc, "image", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(sc, "path", SL_COL_STRING, SL_DTYPE_INVALID, 0, NULL, 0));
    sl_writer *w;
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.fsync = 0;
    ASSERT_OK(sl_writer_open(&w, path, sc, &o));
    for (int i = 0; i < n; i++) {
        size_t size;
        uint8_t *j = td_picture_jpeg(48, 32, i, 0, &size);
        char name[64];
        snprintf(name, sizeof name, "class_%d/img %03d.jpg", i % 3, i);
        sl_tensor cols[2];
        int64_t js = (int64_t)(i == bad ? size / 2 : size), ns = (int64_t)strlen(name);
        sl_tensor_view(&cols[0], j, SL_U8, 1, &js);
        sl_tensor_view(&cols[1], name, SL_U8, 1, &ns);
        ASSERT_OK(sl_writer_append(w, cols, 2));
        free(j);
    }
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(sc);
}

static const char *const op_specs[] = {
    /* a plain decode, and decode fused with resize */
    "{\"source\": {\"path\": \"%s\"}, \"ops\": [{\"op\": \"decode\", \"column\": \"image\"}, "
    "{\"op\": \"select\", \"columns\": [\"image\"]}, {\"op\": \"batch\", \"size\": 4}]%s}",
    "{\"source\": {\"path\": \"%s\"}, \"ops\": [{\"op\": \"decode\", \"column\": \"image\"}, "
    "{\"op\": \"resize\", \"column\": \"image\", \"size\": [16, 16]}, "
    "{\"op\": \"batch\", \"size\": 4}]%s}",
};

/* An op's failure names the file, the record and its `path` (read again
 * when the ops no longer carry that column), and ends with how to skip it;
 * under on_error skip the kept message has no such hint. A source without
 * a name column keeps the plain location. */
SL_TEST(pipeline_slr__op_error_names_path_and_hint) {
    char path[512];
    sl_test_path(path, sizeof path, "imgs.slr");
    make_jpeg_slr(path, 12, 6);
    for (size_t k = 0; k < sizeof op_specs / sizeof op_specs[0]; k++) {
        char json[2048];
        snprintf(json, sizeof json, op_specs[k], path, "");
        sl_spec *spec;
        ASSERT_OK(sl_spec_from_json(&spec, json));
        sl_pipeline *p;
        ASSERT_OK(sl_pipeline_create(&p, spec));
        int rc, good = pu_good_batches(p, &rc);
        ASSERT(rc < 0);
        ASSERT_EQ(good, 1);
        const char *m = sl_errmsg();
        ASSERT_CONTAINS(m, "imgs.slr: record 6 (path class_0/img 006.jpg): ops[0] (");
        const char *hint = "; to drop bad samples and go on: \"on_error\": \"skip\" in the spec, "
                           ".on_error(\"skip\") in Python";
        ASSERT(strlen(m) > strlen(hint));
        ASSERT_STR_EQ(m + strlen(m) - strlen(hint), hint);
        sl_pipeline_free(p);
        sl_spec_free(spec);

        snprintf(json, sizeof json, op_specs[k], path, ", \"on_error\": \"skip\"");
        ASSERT_OK(sl_spec_from_json(&spec, json));
        ASSERT_OK(sl_pipeline_create(&p, spec));
        uint64_t d[8];
        ASSERT_EQ(pu_run_epoch(p, d, 8), 3);
        sl_pipeline_stats st;
        ASSERT_OK(sl_pipeline_stats_get(p, &st));
        ASSERT_EQ(st.skipped, 1);
        ASSERT_CONTAINS(st.errors[0], "record 6 (path class_0/img 006.jpg)");
        ASSERT(strstr(st.errors[0], "on_error") == NULL);
        sl_pipeline_free(p);
        sl_spec_free(spec);
    }
    /* no name column: the location alone, and still the hint */
    char plain[512];
    sl_test_path(plain, sizeof plain, "plain.slr");
    make_slr(plain, 20);
    sl_pipeline *p = pu_json_pipeline(
        "{\"source\": {\"path\": \"%s\"}, \"ops\": [{\"op\": \"decode\", \"column\": \"image\"}, "
        "{\"op\": \"batch\", \"size\": 4}]}", plain);
    sl_batch *b;
    ASSERT(sl_pipeline_next(p, &b) < 0);
    ASSERT_CONTAINS(sl_errmsg(), "plain.slr: record 0: ops[0] (decode): ");
    ASSERT_CONTAINS(sl_errmsg(), "\"on_error\": \"skip\"");
    sl_pipeline_free(p);
}

/* A damaged record's read error ends with the same hint. */
SL_TEST(pipeline_slr__damaged_record_error_ends_with_hint) {
    char path[512];
    sl_test_path(path, sizeof path, "d.slr");
    make_slr(path, 50);
    corrupt_record(path, 13);
    sl_pipeline *p = pu_json_pipeline(
        "{\"source\": {\"path\": \"%s\"}, \"ops\": [{\"op\": \"batch\", \"size\": 5}]}", path);
    sl_batch *b;
    int rc;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK)
        sl_batch_release(b);
    ASSERT_RC(rc, SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "d.slr: record 13: ");
    ASSERT_CONTAINS(sl_errmsg(), "checksum mismatch; to drop bad samples and go on: ");
    sl_pipeline_free(p);
}

/* Under on_error skip, a shard that does not open costs its whole range at
 * once: one message naming the shard and its records (not one per record,
 * which filled the kept messages with the same shard), every one of its
 * records counted as skipped, the readable shards read whole. The manifest
 * says shard 2 holds as many records as its bytes could (its footer says
 * about a tenth of that), so the shards after it start at other numbers
 * than their footers say and fail too; read in a shuffled order. */
SL_TEST(pipeline_slr__failed_shard_skips_its_range_at_once) {
    char dir[512], man[600];
    sl_test_path(dir, sizeof dir, "dir.slr");
    make_slr_shards(dir, 400, 8192);
    snprintf(man, sizeof man, "%s/manifest.json", dir);
    size_t len;
    uint8_t *text = sl_test_read_file(man, &len);
    cJSON *doc = cJSON_ParseWithLength((const char *)text, len);
    free(text);
    ASSERT(doc != NULL);
    cJSON *shards = cJSON_GetObjectItem(doc, "shards");
    int ns = cJSON_GetArraySize(shards);
    ASSERT(ns > 6);
    uint64_t next = 0, f2 = 0, n2 = 0, readable = 0;
    uint64_t first[64], count[64];
    ASSERT(ns <= 64);
    for (int k = 0; k < ns; k++) {
        cJSON *s = cJSON_GetArrayItem(shards, k);
        uint64_t recs = (uint64_t)cJSON_GetObjectItem(s, "records")->valuedouble;
        if (k < 2)
            readable += recs;
        if (k == 2) {
            recs = sl_record__max_records((uint64_t)cJSON_GetObjectItem(s, "bytes")->valuedouble);
            cJSON_SetNumberValue(cJSON_GetObjectItem(s, "records"), (double)recs);
            f2 = next;
            n2 = recs;
        }
        cJSON_SetNumberValue(cJSON_GetObjectItem(s, "first"), (double)next);
        first[k] = next;
        count[k] = recs;
        next += recs;
    }
    const uint64_t total = next;
    ASSERT(n2 > 100 && f2 == first[2]);
    cJSON_SetNumberValue(cJSON_GetObjectItem(doc, "records"), (double)total);
    char *out = cJSON_Print(doc);
    sl_test_write_file(man, out, strlen(out));
    free(out);
    cJSON_Delete(doc);
    for (int threads = 1; threads <= 3; threads += 2) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "{\"source\": {\"path\": \"%%s\", \"shuffle\": true, \"parallel\": %d}, "
                 "\"on_error\": \"skip\", \"ops\": [{\"op\": \"batch\", \"size\": 16}]}", threads);
        sl_spec *sp;
        char json[1024];
        snprintf(json, sizeof json, spec, dir);
        ASSERT_OK(sl_spec_from_json(&sp, json));
        sl_pipeline *p;
        ASSERT_OK(sl_pipeline_create(&p, sp));
        uint64_t d[64];
        uint64_t t0 = sl__now_ns();
        pu_run_epoch(p, d, 64);
        double secs = (double)(sl__now_ns() - t0) / 1e9;
        sl_pipeline_stats st;
        ASSERT_OK(sl_pipeline_stats_get(p, &st));
        ASSERT_U64_EQ(st.samples, readable);
        ASSERT_U64_EQ(st.skipped, total - readable);
        /* One message per failed shard, each naming its whole range. Only the
         * first SL_STATS_MAX_ERRORS messages are kept, and which shards fail
         * first depends on the source threads' timing: every kept message is
         * checked against its own shard's range, and all are kept slots used. */
        ASSERT_EQ(st.nerrors, ns - 2 < SL_STATS_MAX_ERRORS ? ns - 2 : SL_STATS_MAX_ERRORS);
        for (int e = 0; e < st.nerrors; e++) {
            const char *a = strstr(st.errors[e], "shard-");
            ASSERT(a != NULL);
            int k = atoi(a + 6);
            ASSERT(k >= 2 && k < ns);
            char want[128];
            snprintf(want, sizeof want, "shard-%05d.slr: records %llu..%llu: ", k,
                     (unsigned long long)first[k], (unsigned long long)(first[k] + count[k] - 1));
            ASSERT_CONTAINS(st.errors[e], want);
            for (int o = 0; o < e; o++) {
                const char *b = strstr(st.errors[o], "shard-");
                ASSERT(b && strncmp(a, b, 16) != 0); /* no shard twice */
            }
        }
        ASSERT(secs < 10.0); /* far above one skip per shard, for loaded machines */
        sl_pipeline_free(p);
        sl_spec_free(sp);
    }
}
