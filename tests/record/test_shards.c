/*
 * test_shards.c — datasets larger than one file: rollover at shard_bytes, the
 * manifest, global record numbering, and damaged manifests.
 */
#include "slr_testutil.h"
#include "record/record_format.h"

#include <cjson/cJSON.h>
#include <dirent.h>

static int count_shard_files(const char *dir) {
    DIR *d = opendir(dir);
    ASSERT(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "shard-", 6) == 0)
            n++;
    closedir(d);
    return n;
}

SL_TEST(record_shards__rollover_and_numbering) {
    char path[512];
    sl_test_path(path, sizeof path, "ds.slr");
    slr_write_simple(path, 500, 1, 4096);
    struct stat st;
    ASSERT_EQ(stat(path, &st), 0);
    ASSERT(S_ISDIR(st.st_mode));
    char man[600];
    snprintf(man, sizeof man, "%s/manifest.json", path);
    ASSERT(slr_exists(man));
    int nfiles = count_shard_files(path);
    ASSERT(nfiles > 3);

    for (int mode = 0; mode < 2; mode++) {
        unsigned flags = mode ? SL_READ_NO_MMAP : 0;
        slr_check_simple(path, 500, 1, flags);
        sl_reader *r;
        ASSERT_OK(sl_reader_open(&r, path, flags));
        ASSERT_EQ(sl_reader_shard_count(r), nfiles);
        uint64_t bytes = 0;
        for (int i = 0; i < sl_reader_shard_count(r); i++) {
            ASSERT_EQ(stat(sl_reader_shard_path(r, i), &st), 0);
            ASSERT(st.st_size <= 4096);   /* rolled over before shard_bytes */
            if (i + 1 < sl_reader_shard_count(r))
                ASSERT(st.st_size > 2048);
            bytes += (uint64_t)st.st_size;
        }
        ASSERT_EQ(sl_reader_data_bytes(r), bytes);
        ASSERT_STR_EQ(sl_reader_meta(r, "classes"), "[\"a\",\"b\"]");
        const void *vals;
        ASSERT_OK(sl_reader_index_column(r, 0, &vals));
        for (uint64_t i = 0; i < 500; i++)
            ASSERT_EQ(((const int64_t *)vals)[i], (int64_t)(i % 10));
        ASSERT_OK(sl_reader_verify(r, 0, NULL, NULL, NULL));
        /* Random access across shard boundaries. */
        sl_record *rec;
        ASSERT_OK(sl_record_create(&rec));
        for (uint64_t k = 0; k < 500; k++) {
            uint64_t i = (k * 211) % 500;
            ASSERT_OK(sl_reader_read(r, i, rec));
            ASSERT_EQ(sl_record_index(rec), i);
            slr_simple_check(rec, i, 1);
        }
        sl_record_free(rec);
        sl_reader_free(r);
    }
}

SL_TEST(record_shards__one_shard_is_a_file) {
    char path[512];
    sl_test_path(path, sizeof path, "one.slr");
    slr_write_simple(path, 50, 0, 1 << 20);
    struct stat st;
    ASSERT_EQ(stat(path, &st), 0);
    ASSERT(S_ISREG(st.st_mode));
    char partial[600];
    snprintf(partial, sizeof partial, "%s.partial", path);
    ASSERT(!slr_exists(partial));
    slr_check_simple(path, 50, 0, 0);
}

SL_TEST(record_shards__tiny_shard_bytes_one_record_each) {
    char path[512];
    sl_test_path(path, sizeof path, "tiny");
    slr_write_simple(path, 7, 0, 1);   /* every record rolls over: one per shard */
    ASSERT_EQ(count_shard_files(path), 7);
    slr_check_simple(path, 7, 0, 0);
}

SL_TEST(record_shards__missing_shard) {
    char path[512], shard[600], man[600];
    sl_test_path(path, sizeof path, "ds");
    slr_write_simple(path, 200, 0, 2048);
    snprintf(shard, sizeof shard, "%s/shard-00001.slr", path);
    snprintf(man, sizeof man, "%s/manifest.json", path);
    ASSERT_EQ(unlink(shard), 0);
    /* Reported when a read needs the shard (open reads the manifest and
     * shard 0's header only); the other shards read on. */
    sl_reader *r = NULL;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    uint64_t first1 = 0;
    while (sl_reader_read(r, first1, rec) == SL_OK)
        first1++;
    ASSERT(first1 > 0);
    ASSERT_CONTAINS(sl_errmsg(), man);
    ASSERT_CONTAINS(sl_errmsg(), "shard-00001.slr is missing");
    uint64_t next = first1;
    while (sl_reader_read(r, next, rec) < 0)
        next++;
    slr_simple_check(rec, next, 0);
    sl_record_free(rec);
    sl_reader_free(r);
    slr_expect_read_fail(path, first1, SL_ECORRUPT, "shard-00001.slr is missing");
    /* Without shard 0 there is no schema: open fails. */
    snprintf(shard, sizeof shard, "%s/shard-00000.slr", path);
    ASSERT_EQ(unlink(shard), 0);
    ASSERT_RC(sl_reader_open(&r, path, 0), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), man);
    ASSERT_CONTAINS(sl_errmsg(), "shard-00000.slr is missing");
}

SL_TEST(record_shards__manifest_not_json) {
    char path[512], man[600];
    sl_test_path(path, sizeof path, "ds");
    slr_write_simple(path, 100, 0, 1024);
    snprintf(man, sizeof man, "%s/manifest.json", path);
    size_t len;
    uint8_t *b = slr_read_file(man, &len);
    slr_write_file(man, b, len / 2);   /* cut mid-document */
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "not valid JSON");
    ASSERT_CONTAINS(sl_errmsg(), "manifest.json");
    slr_write_file(man, "[1,2,3]", 7);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "not a JSON object");
    slr_write_file(man, "", 0);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "manifest.json: empty file");
    ASSERT_EQ(unlink(man), 0);
    slr_expect_open_fail(path, 0, SL_ECORRUPT, "manifest.json: cannot open");
    free(b);
}

/* Replace the first occurrence of `from` in the manifest by `to`. */
static void edit_manifest(const char *man, const char *from, const char *to) {
    size_t len;
    uint8_t *b = slr_read_file(man, &len);
    b[len] = 0;
    char *at = strstr((char *)b, from);
    ASSERT(at != NULL);
    size_t pre = (size_t)(at - (char *)b), fl = strlen(from), tl = strlen(to);
    char *o = malloc(len - fl + tl + 1);
    memcpy(o, b, pre);
    memcpy(o + pre, to, tl);
    memcpy(o + pre + tl, at + fl, len - pre - fl);
    slr_write_file(man, o, len - fl + tl);
    free(o);
    free(b);
}

SL_TEST(record_shards__manifest_validation) {
    char path[512], man[600], keep[600];
    sl_test_path(path, sizeof path, "ds");
    slr_write_simple(path, 100, 0, 1024);
    snprintf(man, sizeof man, "%s/manifest.json", path);
    sl_test_path(keep, sizeof keep, "manifest.orig");
    size_t len;
    uint8_t *orig = slr_read_file(man, &len);
    slr_write_file(keep, orig, len);

    struct { const char *from, *to; int code; const char *what; } cases[] = {
        {"\"version\":\t1", "\"version\":\t2", SL_EUNSUPPORTED, "format version 2 is newer"},
        {"\"sluice-dataset\"", "\"other\"", SL_ECORRUPT, "\"format\""},
        {"\"records\":\t100", "\"records\":\t101", SL_ECORRUPT, "records"},
        {"\"records\":\t100", "\"records\":\t-1", SL_ECORRUPT, "records"},
        {"\"records\":\t100", "\"records\":\t1.5", SL_ECORRUPT, "records"},
        {"shard-00000.slr", "../x.slr", SL_ECORRUPT, "plain file name"},
        {"shard-00001.slr", "shard-00000.slr", SL_ECORRUPT, "listed twice"},
        {"\"footer_checksum\":\t\"", "\"footer_checksum\":\t\"0", SL_ECORRUPT, "16 hex digits"},
        {"\"first\":\t0", "\"first\":\t1", SL_ECORRUPT, "starts at record 1"},
        {"\"meta\":\t{", "\"meta\":\t{\"n\": 5, ", SL_ECORRUPT, "\"meta\" entries"},
        /* read through parameter tables: the key, the allowed range, what was there */
        {"\"records\":\t100", "\"records\":\t\"100\"", SL_ECORRUPT,
         "\"records\" must be a whole number >= 0"},
        {"\"version\":\t1", "\"versio\":\t1", SL_ECORRUPT, "\"version\" is missing"},
        {"\"version\":\t1", "\"version\":\t0", SL_ECORRUPT,
         "\"version\" must be a whole number >= 1 (got 0)"},
        {"\"first\":\t0", "\"first\":\t-1", SL_ECORRUPT,
         "shard 0 (shard-00000.slr): \"first\" must be a whole number >= 0 (got -1)"},
        {"\"bytes\":\t", "\"byte\":\t", SL_ECORRUPT,
         "shard 0 (shard-00000.slr): \"bytes\" is missing"},
        {"\"meta\":\t{", "\"meta\":\t\"x\", \"meta2\":\t{", SL_ECORRUPT,
         "\"meta\" must be an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        slr_write_file(man, orig, len);
        edit_manifest(man, cases[i].from, cases[i].to);
        sl_reader *r = NULL;
        int rc = sl_reader_open(&r, path, 0);
        if (rc != cases[i].code)
            sl_test_fail(__FILE__, __LINE__, "case %zu: got %s (%s)", i, sl_status_str(rc),
                         sl_errmsg());
        ASSERT_CONTAINS(sl_errmsg(), man);
        ASSERT_CONTAINS(sl_errmsg(), cases[i].what);
    }
    /* The manifest's shard sizes must match the files. */
    slr_write_file(man, orig, len);
    char shard[600];
    snprintf(shard, sizeof shard, "%s/shard-00002.slr", path);
    size_t sl;
    uint8_t *sb = slr_read_file(shard, &sl);
    uint8_t *bigger = calloc(1, sl + 64);
    memcpy(bigger, sb, sl);
    memcpy(bigger + sl, sb + sl - 64, 64);
    slr_write_file(shard, bigger, sl + 64);
    sl_reader *r = NULL;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    ASSERT(sl_reader_shard_count(r) > 2);
    uint64_t first2 = r->shards[2].first;
    sl_reader_free(r);
    slr_expect_read_fail(path, first2, SL_ECORRUPT, "footer says");
    free(bigger);
    free(sb);
    free(orig);
}

SL_TEST(record_shards__swapped_shards_detected) {
    char path[512], a[600], b[600], t[600];
    sl_test_path(path, sizeof path, "ds");
    slr_write_simple(path, 120, 0, 1024);
    snprintf(a, sizeof a, "%s/shard-00000.slr", path);
    snprintf(b, sizeof b, "%s/shard-00001.slr", path);
    snprintf(t, sizeof t, "%s/tmp", path);
    ASSERT_EQ(rename(a, t), 0);
    ASSERT_EQ(rename(b, a), 0);
    ASSERT_EQ(rename(t, b), 0);
    slr_expect_read_fail(path, 0, SL_ECORRUPT, "does not match the manifest");
}

SL_TEST(record_shards__shard_alone_is_not_a_dataset) {
    char path[512], s1[600];
    sl_test_path(path, sizeof path, "ds");
    slr_write_simple(path, 120, 0, 1024);
    snprintf(s1, sizeof s1, "%s/shard-00001.slr", path);
    slr_expect_open_fail(s1, 0, SL_ECORRUPT, "must start at record 0");
}

/* Damage in a later shard: the message names that shard's file and the
 * record's global number. */
SL_TEST(record_shards__damage_names_shard_and_global_record) {
    char path[512], shard[600];
    sl_test_path(path, sizeof path, "ds");
    slr_write_simple(path, 200, 0, 2048);
    snprintf(shard, sizeof shard, "%s/shard-00002.slr", path);
    size_t len;
    uint8_t *b = slr_read_file(shard, &len);
    uint64_t hb = 0, first = 0;
    for (int i = 3; i >= 0; i--)
        hb = (hb << 8) | b[12 + i];
    for (int i = 7; i >= 0; i--)
        first = (first << 8) | b[40 + i];
    ASSERT(first > 0);
    b[hb + 16 + 2] ^= 0x04;   /* the shard's first record's payload */
    slr_write_file(shard, b, len);
    free(b);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_record *rec;
    ASSERT_OK(sl_record_create(&rec));
    ASSERT_OK(sl_reader_read(r, first - 1, rec));
    ASSERT_RC(sl_reader_read(r, first, rec), SL_ECORRUPT);
    char want[700];
    snprintf(want, sizeof want, "%s: record %llu: checksum mismatch", shard,
             (unsigned long long)first);
    ASSERT_CONTAINS(sl_errmsg(), want);
    uint64_t bad = 0;
    ASSERT_RC(sl_reader_verify(r, 1, &bad, NULL, NULL), SL_ECORRUPT);
    ASSERT_EQ(bad, 1);
    ASSERT_CONTAINS(sl_errmsg(), want);
    sl_record_free(rec);
    sl_reader_free(r);
}

/* The smallest shard and the smallest record are what the manifest check
 * assumes (record_format.h, SLR_MIN_SHARD_BYTES and SLR_MIN_RECORD_BYTES):
 * one empty bytes column, no metadata, 0 and then 3 empty records. */
SL_TEST(record_shards__smallest_shard_and_record_bounds) {
    for (int n = 0; n <= 3; n += 3) {
        char path[512];
        sl_test_path(path, sizeof path, n ? "three.slr" : "none.slr");
        sl_schema *s;
        ASSERT_OK(sl_schema_create(&s));
        ASSERT_OK(sl_schema_add(s, "b", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0));
        sl_writer *w;
        ASSERT_OK(sl_writer_open(&w, path, s, NULL));
        for (int i = 0; i < n; i++) {
            sl_tensor t;
            int64_t zero = 0;
            uint8_t dummy = 0;
            memset(&t, 0, sizeof t);
            sl_tensor_view(&t, &dummy, SL_U8, 1, &zero);
            ASSERT_OK(sl_writer_append(w, &t, 1));
        }
        ASSERT_OK(sl_writer_close(w));
        sl_writer_free(w);
        sl_schema_free(s);
        size_t len;
        free(slr_read_file(path, &len));
        ASSERT_U64_EQ(len, SLR_MIN_SHARD_BYTES + (uint64_t)n * SLR_MIN_RECORD_BYTES);
        ASSERT_U64_EQ(sl_record__max_records(len), (uint64_t)n);
    }
    ASSERT_U64_EQ(sl_record__max_records(SLR_MIN_SHARD_BYTES - 1), 0);
}

/* A manifest that says a shard holds more records than its bytes allow is
 * refused at open, naming the shard, at once: 50,000,001 records in a shard
 * of a few KB. When the manifest's byte count is raised to match, the
 * file's own size (a stat at open, for a local directory) refuses it. */
SL_TEST(record_shards__manifest_records_beyond_bytes) {
    char path[512], man[600];
    sl_test_path(path, sizeof path, "ds");
    slr_write_simple(path, 100, 0, 1024);
    snprintf(man, sizeof man, "%s/manifest.json", path);
    size_t len;
    uint8_t *orig = slr_read_file(man, &len);
    for (int variant = 0; variant < 2; variant++) {
        cJSON *doc = cJSON_ParseWithLength((const char *)orig, len);
        ASSERT(doc != NULL);
        cJSON *shards = cJSON_GetObjectItem(doc, "shards");
        int ns = cJSON_GetArraySize(shards);
        ASSERT(ns > 2);
        cJSON *last = cJSON_GetArrayItem(shards, ns - 1);
        char file[64];
        snprintf(file, sizeof file, "%s", cJSON_GetObjectItem(last, "file")->valuestring);
        double recs = cJSON_GetObjectItem(last, "records")->valuedouble;
        cJSON_SetNumberValue(cJSON_GetObjectItem(last, "records"), recs + 50000000);
        cJSON_SetNumberValue(cJSON_GetObjectItem(doc, "records"), 100 + 50000000);
        if (variant == 1) /* bytes enough for them, as far as the manifest says */
            cJSON_SetNumberValue(cJSON_GetObjectItem(last, "bytes"), 3e9);
        char *text = cJSON_Print(doc);
        slr_write_file(man, text, strlen(text));
        free(text);
        cJSON_Delete(doc);
        sl_reader *r = NULL;
        uint64_t t0 = sl__now_ns();
        ASSERT_RC(sl_reader_open(&r, path, 0), SL_ECORRUPT);
        ASSERT(sl__now_ns() - t0 < 500000000u);
        ASSERT_CONTAINS(sl_errmsg(), man);
        ASSERT_CONTAINS(sl_errmsg(), file);
        ASSERT_CONTAINS(sl_errmsg(), variant ? "hold at most" : "cannot fit in");
        char want[64];
        snprintf(want, sizeof want, "%.0f records", recs + 50000000);
        ASSERT_CONTAINS(sl_errmsg(), want);
        ASSERT(r == NULL);
    }
    slr_write_file(man, orig, len);
    sl_reader *r = NULL;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    sl_reader_free(r);
    free(orig);
}
