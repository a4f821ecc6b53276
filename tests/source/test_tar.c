/*
 * Tests of src/source/source_tar.c: WebDataset tar shards.
 *
 * The shards are made at test time by GNU tar (tests/source/make_tar_shards.py:
 * gnu, posix and ustar formats, names over 100 bytes, nested directories,
 * --sort=name) from files the script writes (real JPEGs from PIL, labels as
 * text). The script also writes what each shard must hold; every sample's
 * columns are compared with the files themselves. Damaged copies are made
 * here by byte surgery; a few headers tar does not write for small files
 * (base-256 sizes, signed checksums, pax size and global headers) are built
 * by hand.
 */
#include "test.h"
#include "core/core.h"
#include "source/source.h"
#include "tar_build.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------ */

static char g_dir[1024];



static const char *in_dir(const char *name) {
    static char buf[4][1300];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%.1000s/%.200s", g_dir, name);
    return buf[k];
}

/* Run the script into this case's directory; returns expected.json parsed. */
static cJSON *make_shards(void) {
    snprintf(g_dir, sizeof g_dir, "%.1000s", sl_test_tmpdir());
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/source/make_tar_shards.py '%s'",
             SLUICE_SOURCE_DIR, g_dir);
    ASSERT_EQ(system(cmd), 0);
    size_t n;
    char *text = (char *)sl_test_read_file(in_dir("expected.json"), &n);
    cJSON *exp = cJSON_Parse(text);
    free(text);
    ASSERT(exp);
    return exp;
}

/* Open {"webdataset": <paths JSON>, ...extra}; returns the status. */
static int open_wds(sl_source **out, const char *paths_json, const char *extra) {
    char spec[16384];
    snprintf(spec, sizeof spec, "{\"webdataset\": %s%s%s}", paths_json, extra ? ", " : "",
             extra ? extra : "");
    return tar_build_open_spec(out, spec);
}

static int open_one(sl_source **out, const char *name) {
    char q[4200];
    snprintf(q, sizeof q, "\"%s\"", in_dir(name));
    return open_wds(out, q, NULL);
}

static int col_of(const sl_source *s, const char *name) {
    for (int c = 0; c < s->ncols; c++)
        if (!strcmp(s->col[c].name, name))
            return c;
    sl_test_fail(__FILE__, __LINE__, "no column '%s'", name);
}

/* The source's record i must equal the expected sample `e`: key, every
 * member's bytes (or the label for cls), and nothing else. */
static void check_sample(sl_source *s, sl_source_cursor *cur, uint64_t i, const cJSON *e) {
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    ASSERT_OK(sl_source__read(s, cur, i, &smp));
    ASSERT_U64_EQ(smp.index, i);
    const char *key = cJSON_GetObjectItem(e, "key")->valuestring;
    const sl_tensor *k = &smp.col[col_of(s, "__key__")];
    ASSERT_EQ(k->nbytes, strlen(key));
    if (memcmp(k->data, key, k->nbytes) != 0)
        sl_test_fail(__FILE__, __LINE__, "record %" PRIu64 ": key '%.*s', want '%s'", i,
                     (int)k->nbytes, (const char *)k->data, key);
    const cJSON *members = cJSON_GetObjectItem(e, "members");
    ASSERT_EQ(cJSON_GetArraySize(members) + 1, s->ncols);
    for (const cJSON *m = members->child; m; m = m->next) {
        const sl_tensor *t = &smp.col[col_of(s, m->string)];
        if (!strcmp(m->string, "cls")) {
            ASSERT_EQ(t->dtype, SL_I64);
            ASSERT_EQ(t->ndim, 0);
            ASSERT_EQ(*(const int64_t *)t->data,
                      (int64_t)cJSON_GetObjectItem(e, "cls")->valuedouble);
            continue;
        }
        size_t n;
        uint8_t *want = sl_test_read_file(m->valuestring, &n);
        ASSERT_EQ(t->dtype, SL_U8);
        ASSERT_EQ(t->ndim, 1);
        ASSERT_EQ(t->shape[0], (int64_t)n);
        ASSERT_EQ(t->nbytes, n);
        /* A view of the mapping (not a copy) that holds a reference to it:
         * the shard may be closed while the view lives. */
        ASSERT(t->buf != NULL);
        const uint8_t *mb = sl_buffer_data(t->buf);
        ASSERT((const uint8_t *)t->data >= mb &&
               (const uint8_t *)t->data + n <= mb + sl_buffer_size(t->buf));
        ASSERT(sl_buffer_size(t->buf) > n);
        if (memcmp(t->data, want, n) != 0)
            sl_test_fail(__FILE__, __LINE__, "record %" PRIu64 " (%s): column '%s' differs "
                         "from %s", i, key, m->string, m->valuestring);
        free(want);
    }
    sl_sample_clear(&smp);
}

/* Compare records [first, first+n) of s with expected[ename][0..n). */
static void check_range(sl_source *s, uint64_t first, const cJSON *exp, const char *ename) {
    const cJSON *list = cJSON_GetObjectItem(exp, ename);
    ASSERT(list);
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    uint64_t i = first;
    for (const cJSON *e = list->child; e; e = e->next)
        check_sample(s, cur, i++, e);
    sl_source__cursor_free(s, cur);
}

/* Record i must fail with SL_ECORRUPT and a message containing each of
 * the given strings; then the out sample is empty. */
static void expect_bad(sl_source *s, uint64_t i, const char *a, const char *b) {
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    ASSERT_RC(sl_source__read(s, cur, i, &smp), SL_ECORRUPT);
    ASSERT_EQ(smp.ncols, 0);
    ASSERT_CONTAINS(sl_errmsg(), a);
    ASSERT_CONTAINS(sl_errmsg(), b);
    ASSERT_CONTAINS(sl_errmsg(), "offset");
    sl_source__cursor_free(s, cur);
}

/* A good record of the "good" list: key "bad/img2NN", expected index j. */
static void expect_good(sl_source *s, uint64_t i, const cJSON *exp, int j) {
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    check_sample(s, cur, i, cJSON_GetArrayItem(cJSON_GetObjectItem(exp, "good"), j));
    sl_source__cursor_free(s, cur);
}

/* Offset of the header whose name field starts with `name` (at a 512-byte
 * boundary). */
static size_t header_of(const uint8_t *d, size_t n, const char *name) {
    size_t len = strlen(name);
    for (size_t off = 0; off + 512 <= n; off += 512)
        if (!memcmp(d + off, name, len) && d[off + len] == '\0')
            return off;
    sl_test_fail(__FILE__, __LINE__, "no header named %s", name);
}

/* ---- well-formed shards ------------------------------------------------------------- */

SL_TEST(source_tar__each_format_matches_the_files) {
    cJSON *exp = make_shards();
    const char *names[] = {"shard-000.tar", "shard-001.tar", "shard-002.tar", "sorted.tar"};
    for (int k = 0; k < 4; k++) {
        sl_source *s = NULL;
        ASSERT_OK(open_one(&s, names[k]));
        ASSERT_STR_EQ(s->kind, "webdataset");
        ASSERT_U64_EQ(s->count, (uint64_t)cJSON_GetArraySize(cJSON_GetObjectItem(exp, names[k])));
        ASSERT_EQ(s->ncols, 6);
        /* __key__ first, then the extensions sorted */
        const char *cols[] = {"__key__", "cls", "jpg", "json", "seg.png", "txt"};
        const sl_coltype types[] = {SL_COL_STRING, SL_COL_INT64, SL_COL_BYTES,
                                    SL_COL_STRING, SL_COL_BYTES, SL_COL_STRING};
        for (int c = 0; c < 6; c++) {
            ASSERT_STR_EQ(s->col[c].name, cols[c]);
            ASSERT_EQ(s->col[c].type, types[c]);
            ASSERT_EQ(s->col[c].encoded, c == 2);
            ASSERT_EQ(s->col[c].indexed, c == 1);
        }
        check_range(s, 0, exp, names[k]);
        sl_source__release(s);
    }
    cJSON_Delete(exp);
}

SL_TEST(source_tar__pattern_list_and_listfile_span_shards) {
    cJSON *exp = make_shards();
    char q[3][8192];
    snprintf(q[0], sizeof q[0], "\"%s/shard-{000..002}.tar\"", g_dir);
    snprintf(q[1], sizeof q[1], "[\"%s/shard-000.tar\", \"%s/shard-{001,002}.tar\"]", g_dir, g_dir);
    char list[8192];
    snprintf(list, sizeof list, "# shards\nshard-000.tar\n\n%s/shard-001.tar\nshard-002.tar\n",
             g_dir);
    sl_test_write_file(in_dir("list.txt"), list, strlen(list));
    snprintf(q[2], sizeof q[2], "\"@%s/list.txt\"", g_dir);
    for (int v = 0; v < 3; v++) {
        sl_source *s = NULL;
        ASSERT_OK(open_wds(&s, q[v], "\"index\": \"auto\""));
        ASSERT_U64_EQ(s->count, 18);
        check_range(s, 0, exp, "shard-000.tar");
        check_range(s, 6, exp, "shard-001.tar");
        check_range(s, 12, exp, "shard-002.tar");
        ASSERT_CONTAINS(s->name, "shard-000.tar");
        /* record numbers and offsets in messages are per shard */
        char where[256];
        sl_source__locate(s, 13, where, sizeof where);
        ASSERT_CONTAINS(where, "shard-002.tar: record 1 (offset ");
        /* labels without reading: the values the files hold */
        const void *vals = NULL;
        ASSERT_OK(s->vt->index_column(s, col_of(s, "cls"), &vals));
        ASSERT(vals);
        const char *names[] = {"shard-000.tar", "shard-001.tar", "shard-002.tar"};
        uint64_t i = 0;
        for (int k = 0; k < 3; k++)
            for (const cJSON *e = cJSON_GetObjectItem(exp, names[k])->child; e; e = e->next)
                ASSERT_EQ(((const int64_t *)vals)[i++],
                          (int64_t)cJSON_GetObjectItem(e, "cls")->valuedouble);
        ASSERT_OK(s->vt->index_column(s, col_of(s, "jpg"), &vals));
        ASSERT(vals == NULL);
        cJSON *d = cJSON_CreateObject();
        ASSERT_OK(s->vt->describe(s, d));
        ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(d, "shards")), 3);
        ASSERT_EQ(cJSON_GetObjectItem(d, "damaged_records")->valuedouble, 0);
        cJSON_Delete(d);
        sl_source__release(s);
    }
    cJSON_Delete(exp);
}

SL_TEST(source_tar__columns_option_keeps_only_those) {
    cJSON *exp = make_shards();
    sl_source *s = NULL;
    char q[4200];
    snprintf(q, sizeof q, "\"%s\"", in_dir("shard-001.tar"));
    ASSERT_OK(open_wds(&s, q, "\"columns\": [\"jpg\", \"cls\"], \"index\": false"));
    ASSERT_EQ(s->ncols, 3);
    ASSERT_STR_EQ(s->col[1].name, "cls");
    ASSERT_STR_EQ(s->col[2].name, "jpg");
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    int j = 0;
    for (const cJSON *e = cJSON_GetObjectItem(exp, "shard-001.tar")->child; e; e = e->next, j++) {
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        ASSERT_OK(sl_source__read(s, cur, (uint64_t)j, &smp));
        ASSERT_EQ(*(const int64_t *)smp.col[1].data,
                  (int64_t)cJSON_GetObjectItem(e, "cls")->valuedouble);
        size_t n;
        uint8_t *want = sl_test_read_file(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "members"), "jpg")
                                     ->valuestring, &n);
        ASSERT_EQ(smp.col[2].nbytes, n);
        ASSERT(!memcmp(smp.col[2].data, want, n));
        free(want);
        sl_sample_clear(&smp);
    }
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
    cJSON_Delete(exp);
}

SL_TEST(source_tar__bad_options_and_paths) {
    sl_source *s = NULL;
    snprintf(g_dir, sizeof g_dir, "%.1000s", sl_test_tmpdir());
    ASSERT_RC(open_wds(&s, "\"x.tar\"", "\"frobnicate\": 1"), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "source.frobnicate");
    ASSERT_RC(open_wds(&s, "\"x.tar\"", "\"index\": \"sometimes\""), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "source.index");
    ASSERT_RC(open_wds(&s, "\"x.tar\"", "\"columns\": [3]"), SL_EINVAL);
    ASSERT_RC(open_wds(&s, "42", NULL), SL_EINVAL);
    ASSERT_RC(open_wds(&s, "\"/nonexistent/shard-{0..3}.tar\"", NULL), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "/nonexistent/shard-0.tar");
    ASSERT(s == NULL);
}

/* ---- damage ------------------------------------------------------------------------------- */

SL_TEST(source_tar__bad_checksum_resyncs_at_the_next_header) {
    cJSON *exp = make_shards();
    size_t n;
    uint8_t *d = sl_test_read_file(in_dir("good-gnu.tar"), &n);
    size_t h = header_of(d, n, "bad/img201.cls");
    d[h + 5] ^= 0x20; /* a name byte: the checksum no longer matches */
    sl_test_write_file(in_dir("cut.tar"), d, n);
    sl_source *s = NULL;
    ASSERT_OK(open_one(&s, "cut.tar"));
    /* img200 | img201 (jpg only) | the damage | img201 again (the rest) | img202 | img203 */
    ASSERT_U64_EQ(s->count, 6);
    expect_good(s, 0, exp, 0);
    expect_bad(s, 1, "cut.tar: record 1", "no member 'bad/img201.cls'");
    char want[128];
    snprintf(want, sizeof want, "bad header checksum at offset %zu", h);
    expect_bad(s, 2, "cut.tar: record 2", want);
    expect_bad(s, 3, "key 'bad/img201' already names record 1", "cut.tar");
    expect_good(s, 4, exp, 2);
    expect_good(s, 5, exp, 3);
    /* the cursor-less order does not matter: read the good one again */
    expect_good(s, 0, exp, 0);
    sl_source__release(s);

    /* damage in the last header: nothing after it, everything before reads */
    free(d);
    d = sl_test_read_file(in_dir("good-gnu.tar"), &n);
    h = header_of(d, n, "bad/img203.seg.png");
    d[h + 150] ^= 0x01; /* a checksum digit */
    sl_test_write_file(in_dir("last.tar"), d, n);
    ASSERT_OK(open_one(&s, "last.tar"));
    ASSERT_U64_EQ(s->count, 5);
    for (int j = 0; j < 3; j++)
        expect_good(s, (uint64_t)j, exp, j);
    expect_bad(s, 3, "no member 'bad/img203.seg.png'", "record 3");
    expect_bad(s, 4, "bad header checksum", "no header after it");
    sl_source__release(s);
    free(d);
    cJSON_Delete(exp);
}

SL_TEST(source_tar__truncated_archive_keeps_complete_samples) {
    cJSON *exp = make_shards();
    size_t n;
    uint8_t *d = sl_test_read_file(in_dir("good-gnu.tar"), &n);
    size_t h = header_of(d, n, "bad/img203.jpg");
    sl_source *s = NULL;
    /* inside img203.jpg's data */
    sl_test_write_file(in_dir("t1.tar"), d, h + 512 + 100);
    ASSERT_OK(open_one(&s, "t1.tar"));
    ASSERT_U64_EQ(s->count, 4);
    for (int j = 0; j < 3; j++)
        expect_good(s, (uint64_t)j, exp, j);
    expect_bad(s, 3, "t1.tar: record 3", "truncated archive: member 'bad/img203.jpg'");
    sl_source__release(s);
    /* inside img203.jpg's header */
    sl_test_write_file(in_dir("t2.tar"), d, h + 100);
    ASSERT_OK(open_one(&s, "t2.tar"));
    ASSERT_U64_EQ(s->count, 4);
    for (int j = 0; j < 3; j++)
        expect_good(s, (uint64_t)j, exp, j);
    expect_bad(s, 3, "truncated archive: 100 bytes of a header", "t2.tar");
    sl_source__release(s);
    /* inside img203.cls's data: the sample it belongs to fails */
    size_t c = header_of(d, n, "bad/img203.cls");
    sl_test_write_file(in_dir("t3.tar"), d, c + 512 + 2);
    ASSERT_OK(open_one(&s, "t3.tar"));
    ASSERT_U64_EQ(s->count, 4);
    expect_good(s, 2, exp, 2);
    expect_bad(s, 3, "key 'bad/img203'", "member 'bad/img203.cls'");
    sl_source__release(s);
    /* inside the padding after the last member: complete, also through an index */
    size_t last = header_of(d, n, "bad/img203.seg.png");
    sl_test_write_file(in_dir("t5.tar"), d, last + 512 + 40);
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            ASSERT_OK(sl_source__index_tar(in_dir("t5.tar"), NULL));
        ASSERT_OK(open_one(&s, "t5.tar"));
        ASSERT_U64_EQ(s->count, 4);
        for (int j = 0; j < 4; j++)
            expect_good(s, (uint64_t)j, exp, j);
        sl_source__release(s);
    }
    /* at a member boundary with no end-of-archive blocks: indistinguishable
     * from a complete archive, so every sample reads */
    sl_test_write_file(in_dir("t4.tar"), d, h);
    ASSERT_OK(open_one(&s, "t4.tar"));
    ASSERT_U64_EQ(s->count, 3);
    for (int j = 0; j < 3; j++)
        expect_good(s, (uint64_t)j, exp, j);
    sl_source__release(s);
    free(d);
    cJSON_Delete(exp);
}

SL_TEST(source_tar__pax_header_with_a_bad_length) {
    cJSON *exp = make_shards();
    size_t n;
    uint8_t *d = sl_test_read_file(in_dir("good-posix.tar"), &n);
    size_t h = header_of(d, n, "bad/PaxHeaders/img201.cls");
    ASSERT(d[h + 512] >= '1' && d[h + 512] <= '9' && d[h + 514] == ' ');
    ASSERT(strtol((const char *)d + h + 124, NULL, 8) < 99);
    d[h + 512] = d[h + 513] = '9'; /* "30 mtime=..." → "99 mtime=...": past the data */
    sl_test_write_file(in_dir("pax.tar"), d, n);
    sl_source *s = NULL;
    ASSERT_OK(open_one(&s, "pax.tar"));
    ASSERT_U64_EQ(s->count, 4);
    expect_good(s, 0, exp, 0);
    char want[128];
    snprintf(want, sizeof want, "pax header at offset %zu", h);
    expect_bad(s, 1, want, "bad length");
    expect_good(s, 2, exp, 2);
    expect_good(s, 3, exp, 3);
    sl_source__release(s);
    free(d);
    cJSON_Delete(exp);
}

SL_TEST(source_tar__member_without_a_key) {
    cJSON *exp = make_shards();
    sl_source *s = NULL;
    ASSERT_OK(open_one(&s, "nokey.tar"));
    ASSERT_U64_EQ(s->count, 5);
    expect_good(s, 0, exp, 0);
    expect_good(s, 1, exp, 1);
    expect_bad(s, 2, "nokey.tar: record 2", "member 'bad/.hidden' has no key");
    expect_good(s, 3, exp, 2);
    expect_good(s, 4, exp, 3);
    sl_source__release(s);
    cJSON_Delete(exp);
}

SL_TEST(source_tar__label_that_is_not_a_number) {
    cJSON *exp = make_shards();
    sl_source *s = NULL;
    ASSERT_OK(open_one(&s, "notnum.tar"));
    ASSERT_U64_EQ(s->count, 5);
    expect_good(s, 1, exp, 1);
    /* record 2 has jpg and cls only: the cls is checked before a missing column */
    expect_bad(s, 2, "member 'bad/notnum.cls' is not a decimal integer", "('seven?')");
    expect_good(s, 3, exp, 2);
    sl_source__release(s);
    cJSON_Delete(exp);
}

SL_TEST(source_tar__duplicate_keys) {
    cJSON *exp = make_shards();
    sl_source *s = NULL;
    /* a key coming back after another sample */
    ASSERT_OK(open_one(&s, "dupkey.tar"));
    ASSERT_U64_EQ(s->count, 5);
    expect_good(s, 0, exp, 0);
    expect_good(s, 1, exp, 1);
    expect_bad(s, 2, "dupkey.tar: record 2", "key 'bad/img200' already names record 0");
    expect_good(s, 3, exp, 2);
    expect_good(s, 4, exp, 3);
    sl_source__release(s);
    /* two members with one extension in a sample */
    ASSERT_OK(open_one(&s, "twice.tar"));
    ASSERT_U64_EQ(s->count, 4);
    expect_good(s, 0, exp, 0);
    expect_bad(s, 1, "twice.tar: record 1", "two members with extension 'jpg'");
    expect_good(s, 2, exp, 2);
    sl_source__release(s);
    /* the same key in two shards */
    char q[8300];
    snprintf(q, sizeof q, "[\"%s\", \"%s\"]", in_dir("good-gnu.tar"), in_dir("good-posix.tar"));
    ASSERT_OK(open_wds(&s, q, NULL));
    ASSERT_U64_EQ(s->count, 8);
    expect_good(s, 3, exp, 3);
    expect_bad(s, 4, "good-posix.tar: record 0", "already names record 0 (offset 0) of good-gnu.tar");
    sl_source__release(s);
    cJSON_Delete(exp);
}

SL_TEST(source_tar__empty_file_and_not_a_tar) {
    cJSON *exp = make_shards();
    sl_source *s = NULL;
    sl_test_write_file(in_dir("empty.tar"), "", 0);
    ASSERT_RC(open_one(&s, "empty.tar"), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "empty.tar: record 0 (offset 0): empty file");
    ASSERT(s == NULL);
    /* a JPEG is not a tar */
    const char *jpg = cJSON_GetObjectItem(cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(exp, "good"), 0), "members"), "jpg")->valuestring;
    size_t n;
    uint8_t *d = sl_test_read_file(jpg, &n);
    sl_test_write_file(in_dir("img.tar"), d, n);
    free(d);
    ASSERT_RC(open_one(&s, "img.tar"), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "img.tar: record 0 (offset 0): not a tar archive");
    /* among good shards, each is one failing record and the rest read */
    char q[13000];
    snprintf(q, sizeof q, "[\"%s\", \"%s\", \"%s\", \"%s\"]", in_dir("shard-000.tar"),
             in_dir("empty.tar"), in_dir("img.tar"), in_dir("shard-001.tar"));
    ASSERT_OK(open_wds(&s, q, NULL));
    ASSERT_U64_EQ(s->count, 14);
    check_range(s, 0, exp, "shard-000.tar");
    expect_bad(s, 6, "empty.tar: record 0 (offset 0)", "empty file");
    expect_bad(s, 7, "img.tar: record 0 (offset 0)", "not a tar archive");
    check_range(s, 8, exp, "shard-001.tar");
    cJSON *dj = cJSON_CreateObject();
    ASSERT_OK(s->vt->describe(s, dj));
    ASSERT_EQ(cJSON_GetObjectItem(dj, "damaged_records")->valuedouble, 2);
    cJSON_Delete(dj);
    sl_source__release(s);
    /* a valid archive with no members: no records, no error */
    uint8_t zeros[10240] = {0};
    sl_test_write_file(in_dir("zero.tar"), zeros, sizeof zeros);
    ASSERT_OK(open_one(&s, "zero.tar"));
    ASSERT_U64_EQ(s->count, 0);
    sl_source__release(s);
    cJSON_Delete(exp);
}

/* ---- hand-built headers: what GNU tar writes only for huge files ----------------- */

SL_TEST(source_tar__hand_built_headers) {
    snprintf(g_dir, sizeof g_dir, "%.1000s", sl_test_tmpdir());
    uint8_t t[512 * 16];
    memset(t, 0, sizeof t);
    size_t p = 0;
    /* 1: base-256 size */
    put_header(t + p, "one.bin", '0', 5, 1, 0);
    memcpy(t + p + 512, "hello", 5);
    p += 1024;
    /* a global pax header with a keyword this reader ignores */
    const char g[] = "15 comment=abc\n";
    put_header(t + p, "pax_global_header", 'g', sizeof g - 1, 0, 0);
    memcpy(t + p + 512, g, sizeof g - 1);
    p += 1024;
    /* 2: signed checksum (a name byte over 0x7f), label with spaces */
    put_header(t + p, "tw\xc3\xb6.cls", '0', 6, 0, 1);
    memcpy(t + p + 512, "  -42\n", 6);
    p += 1024;
    /* 3: pax path and size override the header (its size field says 0) */
    const char x[] = "25 path=dir/three.bin.gz\n" "11 size=11\n";
    put_header(t + p, "PaxHeaders/x", 'x', sizeof x - 1, 0, 0);
    memcpy(t + p + 512, x, sizeof x - 1);
    p += 1024;
    put_header(t + p, "placeholder", '0', 0, 0, 0);
    memcpy(t + p + 512, "three bytes", 11);
    p += 1024;
    /* a directory and a symlink: skipped */
    put_header(t + p, "dir/", '5', 0, 0, 0);
    p += 512;
    put_header(t + p, "link.bin", '2', 0, 0, 0);
    p += 512;
    sl_test_write_file(in_dir("hand.tar"), t, p + 1024);

    sl_source *s = NULL;
    ASSERT_OK(open_one(&s, "hand.tar"));
    ASSERT_U64_EQ(s->count, 3);
    ASSERT_EQ(s->ncols, 4); /* __key__, bin, bin.gz, cls */
    ASSERT_STR_EQ(s->col[1].name, "bin");
    ASSERT_STR_EQ(s->col[2].name, "bin.gz");
    ASSERT_STR_EQ(s->col[3].name, "cls");
    const void *vals = NULL;
    ASSERT_OK(s->vt->index_column(s, 3, &vals));
    ASSERT_EQ(((const int64_t *)vals)[1], -42);
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    /* every sample lacks two of the three columns: each read names what is missing */
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    ASSERT_RC(sl_source__read(s, cur, 0, &smp), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "hand.tar: record 0 (offset 0, key 'one'): no member 'one.bin.gz'");
    ASSERT_RC(sl_source__read(s, cur, 1, &smp), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "key 'tw\xc3\xb6'");
    ASSERT_RC(sl_source__read(s, cur, 2, &smp), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "record 2 (offset 3072, key 'dir/three')");
    sl_source__cursor_free(s, cur);
    sl_source__release(s);

    /* with the columns chosen per sample, each one reads */
    char q[4200];
    snprintf(q, sizeof q, "\"%s\"", in_dir("hand.tar"));
    const char *pick[] = {"\"columns\": [\"bin\"]", "\"columns\": [\"cls\"]",
                          "\"columns\": [\"bin.gz\"]"};
    const char *want[] = {"hello", NULL, "three bytes"};
    for (int k = 0; k < 3; k++) {
        ASSERT_OK(open_wds(&s, q, pick[k]));
        ASSERT_U64_EQ(s->count, 1);
        ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
        memset(&smp, 0, sizeof smp);
        ASSERT_OK(sl_source__read(s, cur, 0, &smp));
        if (want[k]) {
            ASSERT_EQ(smp.col[1].nbytes, strlen(want[k]));
            ASSERT(!memcmp(smp.col[1].data, want[k], strlen(want[k])));
        } else {
            ASSERT_EQ(*(const int64_t *)smp.col[1].data, -42);
        }
        sl_sample_clear(&smp);
        sl_source__cursor_free(s, cur);
        sl_source__release(s);
    }
}

/* ---- sidecar index ---------------------------------------------------------------- */

SL_TEST(source_tar__sidecar_index_reads_the_same) {
    cJSON *exp = make_shards();
    char q[1300];
    snprintf(q, sizeof q, "\"%.1000s/shard-{000..002}.tar\"", g_dir);
    /* index one shard: the others are scanned */
    ASSERT_OK(sl_source__index_tar(in_dir("shard-001.tar"), NULL));
    struct stat st;
    ASSERT_EQ(stat(in_dir("shard-001.tar.slidx"), &st), 0);
    const char *modes[] = {"slidx+scan", "slidx"};
    for (int pass = 0; pass < 2; pass++) {
        sl_source *s = NULL;
        ASSERT_OK(open_wds(&s, q, pass ? "\"index\": true" : NULL));
        ASSERT_U64_EQ(s->count, 18);
        ASSERT_EQ(s->ncols, 6);
        ASSERT_EQ(s->col[2].encoded, 1);
        ASSERT_EQ(s->col[1].indexed, 1);
        cJSON *d = cJSON_CreateObject();
        ASSERT_OK(s->vt->describe(s, d));
        ASSERT_STR_EQ(cJSON_GetObjectItem(d, "index")->valuestring, modes[pass]);
        cJSON_Delete(d);
        check_range(s, 0, exp, "shard-000.tar");
        check_range(s, 6, exp, "shard-001.tar");
        check_range(s, 12, exp, "shard-002.tar");
        const void *vals = NULL;
        ASSERT_OK(s->vt->index_column(s, 1, &vals));
        uint64_t i = 6;
        for (const cJSON *e = cJSON_GetObjectItem(exp, "shard-001.tar")->child; e; e = e->next)
            ASSERT_EQ(((const int64_t *)vals)[i++],
                      (int64_t)cJSON_GetObjectItem(e, "cls")->valuedouble);
        sl_source__release(s);
        if (pass == 0) {
            ASSERT_RC(open_wds(&s, q, "\"index\": true"), SL_EINVAL);
            ASSERT_CONTAINS(sl_errmsg(), "shard-000.tar: no index");
            ASSERT_CONTAINS(sl_errmsg(), "sluice index");
            ASSERT_OK(sl_source__index_tar(in_dir("shard-000.tar"), NULL));
            cJSON *o = cJSON_Parse("{\"webdataset\": \"x\", \"index\": \"auto\"}");
            ASSERT_OK(sl_source__index_tar(in_dir("shard-002.tar"), o));
            cJSON_Delete(o);
        }
    }
    /* index: false ignores the index files */
    sl_source *s = NULL;
    ASSERT_OK(open_wds(&s, q, "\"index\": false"));
    cJSON *d = cJSON_CreateObject();
    ASSERT_OK(s->vt->describe(s, d));
    ASSERT_STR_EQ(cJSON_GetObjectItem(d, "index")->valuestring, "scan");
    cJSON_Delete(d);
    sl_source__release(s);

    /* a shard changed after indexing: the index is refused, naming both */
    FILE *f = fopen(in_dir("shard-002.tar"), "ab");
    ASSERT(f);
    fputs("appended", f);
    fclose(f);
    ASSERT_RC(open_wds(&s, q, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "shard-002.tar.slidx is stale (shard-002.tar changed");
    ASSERT_CONTAINS(sl_errmsg(), "sluice index");
    cJSON_Delete(exp);
}

SL_TEST(source_tar__index_refuses_a_damaged_shard) {
    cJSON *exp = make_shards();
    ASSERT_RC(sl_source__index_tar(in_dir("dupkey.tar"), NULL), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "cannot index a damaged file: dupkey.tar: record 2");
    ASSERT_RC(sl_source__index_tar(in_dir("nokey.tar"), NULL), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "has no key");
    struct stat st;
    ASSERT(stat(in_dir("nokey.tar.slidx"), &st) != 0);
    cJSON *o = cJSON_Parse("{\"frobnicate\": 1}");
    ASSERT_RC(sl_source__index_tar(in_dir("good-gnu.tar"), o), SL_EINVAL);
    cJSON_Delete(o);
    /* an index whose records no longer line up with the headers (the shard
     * rewritten in place with the same size and mtime): a clear read error */
    ASSERT_OK(sl_source__index_tar(in_dir("good-gnu.tar"), NULL));
    size_t n;
    uint8_t *d = sl_test_read_file(in_dir("good-gnu.tar"), &n);
    size_t h = header_of(d, n, "bad/img201.cls");
    d[h + 5] ^= 0x20;
    /* and a label's digit changed: "3" reads as "2", a sample silently
     * wrong without the index's checksum of each record */
    size_t h3 = header_of(d, n, "bad/img203.cls");
    ASSERT(d[h3 + 512] >= '0' && d[h3 + 512] <= '9');
    d[h3 + 512] ^= 0x01;
    ASSERT_EQ(stat(in_dir("good-gnu.tar"), &st), 0);
    sl_test_write_file(in_dir("good-gnu.tar"), d, n);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    ASSERT_EQ(utimensat(AT_FDCWD, in_dir("good-gnu.tar"), ts, 0), 0);
    free(d);
    sl_source *s = NULL;
    ASSERT_OK(open_one(&s, "good-gnu.tar"));
    ASSERT_U64_EQ(s->count, 4);
    expect_good(s, 0, exp, 0);
    expect_bad(s, 1, "good-gnu.tar: record 1 (offset", "checksum mismatch against "
               "good-gnu.tar.slidx");
    expect_good(s, 2, exp, 2);
    expect_bad(s, 3, "good-gnu.tar: record 3 (offset", "checksum mismatch against "
               "good-gnu.tar.slidx");
    sl_source__release(s);
    cJSON_Delete(exp);
}
