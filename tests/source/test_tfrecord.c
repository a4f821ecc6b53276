/*
 * Tests of src/source/source_tfrecord.c. The files come from
 * tests/source/make_tfrecords.py, which writes them with Google's protobuf
 * runtime and the crc32c module (not with sluice) and states the values every
 * record holds; each test compares every column of every record with them.
 * Damaged files are made here by byte surgery on those, and records of the
 * wrong type by a few lines of protobuf encoding.
 */
#include "test.h"
#include "core/core.h"
#include "source/source.h"
#include "source/source_index.h"
#include "source/source_tfrecord.h"
#include "io/io.h"
#include "ivals_check.h"

#include <pthread.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* ---- helpers ------------------------------------------------------------------ */



static char g_dir[2048];

/* Run the generator into the case's tmpdir; the case is skipped (not
 * passed) when its tools are missing. Returns 1. */
static int make_files(void) {
    snprintf(g_dir, sizeof g_dir, "%.2000s", sl_test_tmpdir());
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/source/make_tfrecords.py %s",
             SLUICE_SOURCE_DIR, g_dir);
    int st = system(cmd);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 3)
        sl_test_skip("the TFRecord generator's tools are missing (see above; scripts/deps.sh "
                     "installs them)");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        sl_test_fail(__FILE__, __LINE__, "%s failed (status %d)", cmd, st);
    return 1;
}

static void dpath(char *out, const char *name) { snprintf(out, 4200, "%s/%s", g_dir, name); }

static cJSON *expected(void) {
    char p[4200];
    dpath(p, "expected.json");
    size_t n;
    uint8_t *b = sl_test_read_file(p, &n);
    b[n] = 0;
    cJSON *j = cJSON_Parse((const char *)b);
    free(b);
    ASSERT(j);
    return j;
}

/* Open a source from a JSON text. */
static int open_src(sl_source **out, const char *json) {
    cJSON *o = cJSON_Parse(json);
    if (!o)
        sl_test_fail(__FILE__, __LINE__, "bad test JSON: %s", json);
    int rc = sl_source__open_json(out, o, "source");
    cJSON_Delete(o);
    return rc;
}

static int open_file(sl_source **out, const char *file) {
    char j[12000];
    snprintf(j, sizeof j, "{\"tfrecord\": \"%s/%s\"}", g_dir, file);
    return open_src(out, j);
}

static int col_of(const sl_source *s, const char *name) {
    for (int k = 0; k < s->ncols; k++)
        if (!strcmp(s->col[k].name, name))
            return k;
    sl_test_fail(__FILE__, __LINE__, "no column '%s'", name);
}

static void check_hex(const sl_tensor *t, const char *hex, const char *what, uint64_t i) {
    size_t n = strlen(hex) / 2;
    if (t->dtype != SL_U8 || t->ndim != 1 || (size_t)t->shape[0] != n)
        sl_test_fail(__FILE__, __LINE__, "record %" PRIu64 " %s: %lld bytes, want %zu", i, what,
                     (long long)t->shape[0], n);
    const uint8_t *d = t->data;
    for (size_t k = 0; k < n; k++) {
        unsigned v;
        sscanf(hex + 2 * k, "%2x", &v);
        if (d[k] != v)
            sl_test_fail(__FILE__, __LINE__, "record %" PRIu64 " %s: byte %zu differs", i, what, k);
    }
}

/* A numeric tensor against a JSON number, list, or list of lists. */
static void check_nums(const sl_tensor *t, const cJSON *want, const char *what, uint64_t i) {
    int64_t n = 1;
    const cJSON *flat[4096];
    int nf = 0;
    if (cJSON_IsNumber(want)) {
        ASSERT_EQ(t->ndim, 0);
        flat[nf++] = want;
    } else {
        int rows = cJSON_GetArraySize(want);
        const cJSON *first = cJSON_GetArrayItem(want, 0);
        if (t->ndim == 2) {
            ASSERT_EQ(t->shape[0], rows);
            ASSERT_EQ(t->shape[1], first ? cJSON_GetArraySize(first) : 0);
            for (const cJSON *r = want->child; r; r = r->next)
                for (const cJSON *v = r->child; v; v = v->next)
                    flat[nf++] = v;
        } else {
            ASSERT_EQ(t->ndim, 1);
            ASSERT_EQ(t->shape[0], rows);
            for (const cJSON *v = want->child; v; v = v->next)
                flat[nf++] = v;
        }
    }
    n = sl_tensor_numel(t);
    ASSERT_EQ(n, nf);
    for (int k = 0; k < nf; k++) {
        double got = t->dtype == SL_I64 ? (double)((const int64_t *)t->data)[k]
                                        : (double)((const float *)t->data)[k];
        if (t->dtype == SL_I64) {
            /* (the generator's int64 values are within 2^53: exact as doubles) */
            long long w = (long long)flat[k]->valuedouble;
            if (((const int64_t *)t->data)[k] != w)
                sl_test_fail(__FILE__, __LINE__, "record %" PRIu64 " %s[%d]: %lld != %lld", i,
                             what, k, (long long)((const int64_t *)t->data)[k], w);
        } else if (got != flat[k]->valuedouble) {
            sl_test_fail(__FILE__, __LINE__, "record %" PRIu64 " %s[%d]: %.9g != %.9g", i, what,
                         k, got, flat[k]->valuedouble);
        }
    }
}

/* Every record of `s` (records [first, first + n) of the file's list) against
 * the expected rows; `rename` maps column names back to feature keys. */
static void check_rows(sl_source *s, const cJSON *rows, uint64_t first, const char *const *keys,
                       const char *const *names, int nnames) {
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    int nrows = cJSON_GetArraySize(rows);
    for (int r = 0; r < nrows; r++) {
        uint64_t i = first + (uint64_t)r;
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        ASSERT_OK(sl_source__read(s, cur, i, &smp));
        ASSERT_EQ(smp.index, i);
        const cJSON *row = cJSON_GetArrayItem(rows, r);
        int checked = 0;
        for (const cJSON *v = row->child; v; v = v->next) {
            const char *name = v->string;
            if (nnames) {
                name = NULL;
                for (int k = 0; k < nnames; k++)
                    if (!strcmp(keys[k], v->string))
                        name = names[k];
                if (!name)
                    continue;
            }
            const sl_tensor *t = &smp.col[col_of(s, name)];
            if (cJSON_IsString(v))
                check_hex(t, v->valuestring, name, i);
            else
                check_nums(t, v, name, i);
            checked++;
        }
        ASSERT_EQ(checked, nnames ? nnames : s->ncols);
        sl_sample_clear(&smp);
    }
    sl_source__cursor_free(s, cur);
}

/* ---- checksums ------------------------------------------------------------------ */

SL_TEST(source_tfrecord__crc32c_known_values) {
    ASSERT_U64_EQ(sl__crc32c(0, "123456789", 9), 0xe3069283u);
    uint8_t z[32] = {0}, ff[32];
    memset(ff, 0xff, sizeof ff);
    ASSERT_U64_EQ(sl__crc32c(0, z, 32), 0x8a9136aau);   /* RFC 3720 B.4 */
    ASSERT_U64_EQ(sl__crc32c(0, ff, 32), 0x62a8ab43u);
    /* Streaming: any split gives the same value, for every tail length. */
    uint8_t buf[100];
    for (int k = 0; k < 100; k++)
        buf[k] = (uint8_t)(k * 7 + 3);
    uint32_t whole = sl__crc32c(0, buf, 100);
    for (size_t cut = 0; cut <= 100; cut++)
        ASSERT_U64_EQ(sl__crc32c(sl__crc32c(0, buf, cut), buf + cut, 100 - cut),
                      whole);
    ASSERT_U64_EQ(sl_source__tf_mask(0), 0xa282ead8u);
}

/* ---- files written by Google's runtime ------------------------------------------- */

SL_TEST(source_tfrecord__reads_python_examples) {
    if (!make_files())
        return;
    cJSON *exp = expected();
    const char *files[2] = {"plain.tfrecord", "plain.tfrecord.gz"};
    for (int f = 0; f < 2; f++) {
        sl_source *s = NULL;
        ASSERT_OK(open_file(&s, files[f]));
        ASSERT_EQ(s->count, 12);
        ASSERT_EQ(s->ncols, 6);
        /* Sorted by key; types from the first records. */
        ASSERT_STR_EQ(s->col[0].name, "ids");
        ASSERT_EQ(s->col[0].type, SL_COL_ARRAY);
        ASSERT_EQ(s->col[0].dtype, SL_I64);
        ASSERT_EQ(s->col[0].ndim, 1);
        ASSERT_EQ(s->col[0].shape[0], -1);
        int lab = col_of(s, "image/class/label");
        ASSERT_EQ(s->col[lab].type, SL_COL_INT64);
        ASSERT_EQ(s->col[lab].indexed, 0);
        int enc = col_of(s, "image/encoded"), fn = col_of(s, "image/filename");
        ASSERT_EQ(s->col[enc].type, SL_COL_BYTES);
        ASSERT_EQ(s->col[enc].encoded, 1);
        ASSERT_EQ(s->col[fn].type, SL_COL_BYTES);
        ASSERT_EQ(s->col[fn].encoded, 0);
        int sc = col_of(s, "scores"), w = col_of(s, "weight");
        ASSERT_EQ(s->col[sc].dtype, SL_F32);
        ASSERT_EQ(s->col[sc].ndim, 1);
        ASSERT_EQ(s->col[w].type, SL_COL_ARRAY);
        ASSERT_EQ(s->col[w].dtype, SL_F32);
        ASSERT_EQ(s->col[w].ndim, 0);
        check_rows(s, cJSON_GetObjectItem(exp, files[f]), 0, NULL, NULL, 0);
        /* Offsets in messages are where each frame starts (in the inflated
         * bytes for gzip). */
        const cJSON *offs = cJSON_GetObjectItem(exp, "plain_offsets");
        char where[300], want[300];
        sl_source__locate(s, 7, where, sizeof where);
        snprintf(want, sizeof want, "%s: record 7 (offset %d)", files[f],
                 cJSON_GetArrayItem(offs, 7)->valueint);
        ASSERT_STR_EQ(where, want);
        cJSON *d = cJSON_CreateObject();
        ASSERT_OK(s->vt->describe(s, d));
        ASSERT_EQ(cJSON_GetObjectItem(d, "gzip_files")->valueint, f);
        cJSON_Delete(d);
        sl_source__release(s);
    }
    cJSON_Delete(exp);
}

/* A feature's {"name", "list"} object is checked like every other key: a
 * misspelt key is an error naming it (not ignored, which would quietly give
 * a scalar column where a list was asked for), a wrong value names its type. */
SL_TEST(source_tfrecord__feature_object_keys_checked) {
    if (!make_files())
        return;
    char j[12000];
    sl_source *s = NULL;
    snprintf(j, sizeof j, "{\"tfrecord\": \"%s/plain.tfrecord\", \"features\": "
             "{\"weight\": {\"name\": \"w\", \"lsit\": true}}}", g_dir);
    ASSERT_RC(open_src(&s, j), SL_EINVAL);
    ASSERT_STR_EQ(sl_errmsg(), "source.features.weight.lsit: unknown key (keys: list, name)");
    snprintf(j, sizeof j, "{\"tfrecord\": \"%s/plain.tfrecord\", \"features\": "
             "{\"weight\": {\"name\": \"w\", \"list\": 1}}}", g_dir);
    ASSERT_RC(open_src(&s, j), SL_EINVAL);
    ASSERT_STR_EQ(sl_errmsg(), "source.features.weight.list: must be true or false");
    snprintf(j, sizeof j, "{\"tfrecord\": \"%s/plain.tfrecord\", \"features\": "
             "{\"weight\": {\"name\": \"\"}}}", g_dir);
    ASSERT_RC(open_src(&s, j), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "source.features.weight.name: must be a string of 1 to ");
    /* good input right after bad */
    snprintf(j, sizeof j, "{\"tfrecord\": \"%s/plain.tfrecord\", \"features\": "
             "{\"weight\": {\"list\": true}}}", g_dir);
    ASSERT_OK(open_src(&s, j));
    ASSERT_EQ(s->ncols, 1);
    ASSERT_STR_EQ(s->col[0].name, "weight");
    ASSERT_EQ(s->col[0].ndim, 1);
    sl_source__release(s);
}

SL_TEST(source_tfrecord__features_select_and_rename) {
    if (!make_files())
        return;
    cJSON *exp = expected();
    char j[12000];
    snprintf(j, sizeof j, "{\"tfrecord\": \"%s/plain.tfrecord\", \"features\": "
             "{\"image/encoded\": \"image\", \"image/class/label\": \"label\", \"weight\": "
             "{\"name\": \"w\", \"list\": true}}, \"verify\": false}", g_dir);
    sl_source *s = NULL;
    ASSERT_OK(open_src(&s, j));
    ASSERT_EQ(s->ncols, 3);
    ASSERT_STR_EQ(s->col[0].name, "image");
    ASSERT_STR_EQ(s->col[1].name, "label");
    ASSERT_STR_EQ(s->col[2].name, "w");
    ASSERT_EQ(s->col[2].ndim, 1); /* declared a list */
    const char *keys[3] = {"image/encoded", "image/class/label", "weight"};
    const char *names[3] = {"image", "label", "w"};
    /* check_nums wants a list for a 1-D column: compare weight by hand. */
    check_rows(s, cJSON_GetObjectItem(exp, "plain.tfrecord"), 0, keys, names, 2);
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    ASSERT_OK(sl_source__read(s, cur, 4, &smp));
    ASSERT_EQ(smp.col[2].shape[0], 1);
    double want = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(exp,
                                      "plain.tfrecord"), 4), "weight")->valuedouble;
    ASSERT(*(const float *)smp.col[2].data == (float)want);
    sl_sample_clear(&smp);
    sl_source__cursor_free(s, cur);
    sl_source__release(s);

    snprintf(j, sizeof j, "{\"tfrecord\": \"%s/plain.tfrecord\", \"features\": {\"nope\": "
             "\"x\"}}", g_dir);
    ASSERT_RC(open_src(&s, j), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "no feature 'nope'");
    snprintf(j, sizeof j, "{\"tfrecord\": \"%s/plain.tfrecord\", \"compression\": \"zstd\"}",
             g_dir);
    ASSERT_RC(open_src(&s, j), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "compression");
    cJSON_Delete(exp);
}

SL_TEST(source_tfrecord__sequence_examples) {
    if (!make_files())
        return;
    cJSON *exp = expected();
    sl_source *s = NULL;
    ASSERT_OK(open_file(&s, "seq.tfrecord"));
    ASSERT_EQ(s->count, 5);
    ASSERT_EQ(s->ncols, 3);
    ASSERT_STR_EQ(s->col[0].name, "label");
    ASSERT_EQ(s->col[0].type, SL_COL_INT64);
    int fr = col_of(s, "frames");
    ASSERT_EQ(s->col[fr].ndim, 2);
    ASSERT_EQ(s->col[fr].dtype, SL_I64);
    ASSERT_EQ(s->col[col_of(s, "vec")].dtype, SL_F32);
    check_rows(s, cJSON_GetObjectItem(exp, "seq.tfrecord"), 0, NULL, NULL, 0);
    sl_source__release(s);
    cJSON_Delete(exp);
}

SL_TEST(source_tfrecord__files_concatenate) {
    if (!make_files())
        return;
    cJSON *exp = expected();
    char j[12000];
    snprintf(j, sizeof j, "{\"tfrecord\": [\"%s/plain.tfrecord\", \"%s/plain.tfrecord{.gz,}\"]}",
             g_dir, g_dir);
    sl_source *s = NULL;
    ASSERT_OK(open_src(&s, j));
    ASSERT_EQ(s->count, 36);
    const cJSON *rows = cJSON_GetObjectItem(exp, "plain.tfrecord");
    check_rows(s, rows, 0, NULL, NULL, 0);
    check_rows(s, rows, 12, NULL, NULL, 0);
    check_rows(s, rows, 24, NULL, NULL, 0);
    char where[300];
    sl_source__locate(s, 13, where, sizeof where);
    ASSERT_CONTAINS(where, "plain.tfrecord.gz: record 1 (offset ");
    sl_source__release(s);
    cJSON_Delete(exp);
}

SL_TEST(source_tfrecord__index_exact_and_pushed_down) {
    if (!make_files())
        return;
    cJSON *exp = expected();
    const char *files[2] = {"plain.tfrecord", "plain.tfrecord.gz"};
    for (int f = 0; f < 2; f++) {
        char p[4200];
        dpath(p, files[f]);
        ASSERT_OK(sl_source__index_tfrecord(p, NULL));
        sl_sidx *ix = NULL;
        ASSERT_OK(sl_sidx__load(p, "tfrecord", &ix));
        ASSERT_EQ(ix->count, 12);
        ASSERT_EQ(ix->flags, f ? SL_SIDX_DECOMPRESSED : 0);
        ASSERT_EQ(ix->ncols, 6);
        ASSERT(sl_sidx__find_scalar(ix, "image/class/label") >= 0);
        int w = sl_sidx__find_scalar(ix, "weight");
        ASSERT(w >= 0);
        ASSERT_EQ(ix->scalar[w].type, SL_COL_FLOAT64);
        ASSERT_EQ(sl_sidx__find_scalar(ix, "scores"), -1);
        const cJSON *rows = cJSON_GetObjectItem(exp, files[f]);
        for (int i = 0; i < 12; i++) {
            const cJSON *row = cJSON_GetArrayItem(rows, i);
            ASSERT(((const double *)ix->scalar[w].vals)[i] ==
                   cJSON_GetObjectItem(row, "weight")->valuedouble);
            ASSERT_EQ(ix->offset[i], cJSON_GetArrayItem(cJSON_GetObjectItem(exp,
                                     "plain_offsets"), i)->valueint);
        }
        sl_sidx__free(ix);

        sl_source *s = NULL;
        ASSERT_OK(open_file(&s, files[f]));
        ASSERT_EQ(s->count, 12);
        int lab = col_of(s, "image/class/label");
        ASSERT_EQ(s->col[lab].indexed, 1);
        const int64_t *vals = NULL;
        ASSERT_OK(s->vt->index_column(s, lab, (const void **)&vals));
        for (int i = 0; i < 12; i++)
            ASSERT_EQ(vals[i], i * 37 - 100);
        ASSERT_EQ(s->col[col_of(s, "image/encoded")].encoded, 1);
        check_rows(s, rows, 0, NULL, NULL, 0);
        sl_source__release(s);

        /* The data's mtime moves on, its bytes stay (a copy without -p):
         * the index still holds. */
        struct timespec ts[2] = {{0, UTIME_OMIT}, {1000, 5}};
        ASSERT_EQ(utimensat(AT_FDCWD, p, ts, 0), 0);
        ASSERT_OK(open_file(&s, files[f]));
        check_rows(s, rows, 0, NULL, NULL, 0);
        sl_source__release(s);
        /* Stale: the data grew. */
        FILE *fp = fopen(p, "ab");
        ASSERT(fp);
        fputc(0, fp);
        fclose(fp);
        ASSERT_RC(open_file(&s, files[f]), SL_EINVAL);
        char want[300];
        snprintf(want, sizeof want, "%s.slidx is stale (%s changed: size", files[f], files[f]);
        ASSERT_CONTAINS(sl_errmsg(), want);
        ASSERT_CONTAINS(sl_errmsg(), "rebuild it with `sluice index ");
    }
    cJSON_Delete(exp);
}

/* ---- damage ------------------------------------------------------------------------ */

/* Read every record; record `bad` (and any listed in `also_bad`) must fail
 * with `code` and a message holding `want`; all others must read. */
static void expect_only_bad(sl_source *s, uint64_t bad, int code, const char *want) {
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    for (uint64_t i = 0; i < s->count; i++) {
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        int rc = sl_source__read(s, cur, i, &smp);
        if (i == bad) {
            if (rc != code)
                sl_test_fail(__FILE__, __LINE__, "record %" PRIu64 ": got %s, want %s (%s)", i,
                             sl_status_str(rc), sl_status_str(code), sl_errmsg());
            ASSERT_EQ(smp.ncols, 0);
            ASSERT_CONTAINS(sl_errmsg(), want);
        } else if (rc != SL_OK) {
            sl_test_fail(__FILE__, __LINE__, "record %" PRIu64 ": %s", i, sl_errmsg());
        }
        sl_sample_clear(&smp);
    }
    sl_source__cursor_free(s, cur);
}

SL_TEST(source_tfrecord__damaged_frames) {
    if (!make_files())
        return;
    cJSON *exp = expected();
    const cJSON *offs = cJSON_GetObjectItem(exp, "plain_offsets");
    char p[4200], d[4200], want[300];
    dpath(p, "plain.tfrecord");
    dpath(d, "bad.tfrecord");
    size_t n;
    uint8_t *good = sl_test_read_file(p, &n);
    uint8_t *b = malloc(n);
    ASSERT(b);
    size_t o3 = (size_t)cJSON_GetArrayItem(offs, 3)->valueint;
    size_t o5 = (size_t)cJSON_GetArrayItem(offs, 5)->valueint;
    size_t o11 = (size_t)cJSON_GetArrayItem(offs, 11)->valueint;
    sl_source *s = NULL;

    /* Data checksum: a byte inside record 3's payload. */
    memcpy(b, good, n);
    b[o3 + 30] ^= 1;
    sl_test_write_file(d, b, n);
    ASSERT_OK(open_file(&s, "bad.tfrecord"));
    ASSERT_EQ(s->count, 12);
    snprintf(want, sizeof want, "bad.tfrecord: record 3 (offset %zu): data checksum mismatch", o3);
    expect_only_bad(s, 3, SL_ECORRUPT, want);
    sl_source__release(s);

    /* Length checksum of record 5: the scan resynchronises on record 6. */
    memcpy(b, good, n);
    b[o5 + 9] ^= 0x40;
    sl_test_write_file(d, b, n);
    ASSERT_OK(open_file(&s, "bad.tfrecord"));
    ASSERT_EQ(s->count, 12);
    snprintf(want, sizeof want, "record 5 (offset %zu): length checksum mismatch", o5);
    expect_only_bad(s, 5, SL_ECORRUPT, want);
    sl_source__release(s);

    /* The last record cut short: 11 complete ones, the tail an error. */
    for (size_t cut = o11 + 1; cut < n; cut += (n - o11) / 5) {
        sl_test_write_file(d, good, cut);
        ASSERT_OK(open_file(&s, "bad.tfrecord"));
        ASSERT_EQ(s->count, 12);
        snprintf(want, sizeof want, "record 11 (offset %zu): truncated record", o11);
        expect_only_bad(s, 11, SL_ECORRUPT, want);
        sl_source__release(s);
    }

    /* A length (with a valid checksum) that runs past the end of the file. */
    memcpy(b, good, n);
    sl__st64(b + o11, (uint64_t)1 << 40);
    sl__st32(b + o11 + 8, sl_source__tf_mask(sl__crc32c(0, b + o11, 8)));
    sl_test_write_file(d, b, n);
    ASSERT_OK(open_file(&s, "bad.tfrecord"));
    ASSERT_EQ(s->count, 12);
    expect_only_bad(s, 11, SL_ECORRUPT, "runs past the end of the file");
    sl_source__release(s);

    /* A payload that is not a protobuf (checksums made valid). */
    memcpy(b, good, n);
    uint64_t len3 = sl__ld64(b + o3);
    memset(b + o3 + 12, 0xff, (size_t)len3);
    sl__st32(b + o3 + 12 + len3, sl_source__tf_mask(sl__crc32c(0, b + o3 + 12, len3)));
    sl_test_write_file(d, b, n);
    ASSERT_OK(open_file(&s, "bad.tfrecord"));
    expect_only_bad(s, 3, SL_ECORRUPT, "the protobuf does not parse");
    sl_source__release(s);
    /* The same with checks off: still found, by the parser. */
    char j[12000];
    snprintf(j, sizeof j, "{\"tfrecord\": \"%s\", \"verify\": false}", d);
    ASSERT_OK(open_src(&s, j));
    expect_only_bad(s, 3, SL_ECORRUPT, "does not parse");
    sl_source__release(s);

    /* An index refuses to vouch for a damaged file, and leaves none behind. */
    ASSERT_RC(sl_source__index_tfrecord(d, NULL), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "cannot index a damaged file");
    char ip[4300];
    snprintf(ip, sizeof ip, "%s.slidx", d);
    ASSERT(access(ip, F_OK) != 0);
    free(b);
    free(good);
    cJSON_Delete(exp);
}

/* ---- hand-made Examples: wrong types ---------------------------------------------- */

static size_t put_varint(uint8_t *p, uint64_t v) {
    size_t n = 0;
    do {
        p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* Example{features{feature{key: value: Feature{kind(field) list}}}} with
 * one feature; `field` 2 = float_list (values as floats), 3 = int64_list. */
static size_t example1(uint8_t *out, const char *key, int field, const int64_t *v, int nv) {
    uint8_t vals[256], list[300], feat[320], entry[400], feats[420];
    size_t nvals = 0;
    for (int k = 0; k < nv; k++) {
        if (field == 2) {
            float f = (float)v[k];
            memcpy(vals + nvals, &f, 4);
            nvals += 4;
        } else {
            nvals += put_varint(vals + nvals, (uint64_t)v[k]);
        }
    }
    size_t n = 0;  /* List{ packed value = 1 } */
    list[n++] = 0x0a;
    n += put_varint(list + n, nvals);
    memcpy(list + n, vals, nvals);
    n += nvals;
    size_t m = 0;  /* Feature{ list = field } */
    feat[m++] = (uint8_t)(field << 3 | 2);
    m += put_varint(feat + m, n);
    memcpy(feat + m, list, n);
    m += n;
    size_t e = 0, kl = strlen(key);  /* entry{ key = 1, value = 2 } */
    entry[e++] = 0x0a;
    e += put_varint(entry + e, kl);
    memcpy(entry + e, key, kl);
    e += kl;
    entry[e++] = 0x12;
    e += put_varint(entry + e, m);
    memcpy(entry + e, feat, m);
    e += m;
    size_t fs = 0;  /* Features{ feature = 1 } */
    feats[fs++] = 0x0a;
    fs += put_varint(feats + fs, e);
    memcpy(feats + fs, entry, e);
    fs += e;
    size_t x = 0;  /* Example{ features = 1 } */
    out[x++] = 0x0a;
    x += put_varint(out + x, fs);
    memcpy(out + x, feats, fs);
    return x + fs;
}

/* Append one framed record to f. */
static void put_frame(FILE *f, const uint8_t *p, size_t n) {
    uint8_t h[12], t[4];
    sl__st64(h, n);
    sl__st32(h + 8, sl_source__tf_mask(sl__crc32c(0, h, 8)));
    sl__st32(t, sl_source__tf_mask(sl__crc32c(0, p, n)));
    ASSERT_EQ(fwrite(h, 1, 12, f), 12);
    ASSERT_EQ(fwrite(p, 1, n, f), n);
    ASSERT_EQ(fwrite(t, 1, 4, f), 4);
}

SL_TEST(source_tfrecord__wrong_feature_types) {
    snprintf(g_dir, sizeof g_dir, "%.2000s", sl_test_tmpdir());
    char p[4200];
    dpath(p, "typed.tfrecord");
    FILE *f = fopen(p, "wb");
    ASSERT(f);
    uint8_t ex[600];
    int64_t one[2] = {5, 6};
    for (int i = 0; i < 40; i++) {
        size_t n;
        if (i == 34)
            n = example1(ex, "label", 2, one, 1);      /* a float_list */
        else if (i == 36)
            n = example1(ex, "label", 3, one, 2);      /* two values */
        else if (i == 38)
            n = example1(ex, "other", 3, one, 1);      /* label missing */
        else
            n = example1(ex, "label", 3, (int64_t[]){i}, 1);
        put_frame(f, ex, n);
    }
    ASSERT_EQ(fclose(f), 0);
    sl_source *s = NULL;
    ASSERT_OK(open_file(&s, "typed.tfrecord"));
    ASSERT_EQ(s->ncols, 1);
    ASSERT_EQ(s->col[0].type, SL_COL_INT64);
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    for (uint64_t i = 0; i < 40; i++) {
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        int rc = sl_source__read(s, cur, i, &smp);
        if (i == 34) {
            ASSERT_RC(rc, SL_EDECODE);
            ASSERT_CONTAINS(sl_errmsg(), "typed.tfrecord: record 34 (offset ");
            ASSERT_CONTAINS(sl_errmsg(), "feature 'label' is float_list, expected int64_list");
        } else if (i == 36 || i == 38) {
            ASSERT_RC(rc, SL_EDECODE);
            ASSERT_CONTAINS(sl_errmsg(), i == 36 ? "feature 'label' has 2 values, expected 1 "
                                                   "(declare it as a list"
                                                 : "feature 'label' has 0 values");
        } else {
            ASSERT_OK(rc);
            ASSERT_EQ(*(const int64_t *)smp.col[0].data, (int64_t)i);
        }
        sl_sample_clear(&smp);
    }
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
    /* A full scan sees the clash and refuses to index. */
    ASSERT_RC(sl_source__index_tfrecord(p, NULL), SL_EDECODE);
    ASSERT_CONTAINS(sl_errmsg(), "record 34");
}

/* ---- empty files and gzip damage ------------------------------------------------------ */

SL_TEST(source_tfrecord__empty_and_gzip_damage) {
    if (!make_files())
        return;
    char p[4200];
    sl_source *s = NULL;
    dpath(p, "empty.tfrecord");
    sl_test_write_file(p, "", 0);
    ASSERT_RC(open_file(&s, "empty.tfrecord"), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "empty.tfrecord (the file is empty)");
    /* An empty file among others is no error: it holds no records. */
    char j[12000];
    snprintf(j, sizeof j, "{\"tfrecord\": [\"%s/empty.tfrecord\", \"%s/seq.tfrecord\", "
             "\"%s/empty.tfrecord\"]}", g_dir, g_dir, g_dir);
    ASSERT_OK(open_src(&s, j));
    ASSERT_EQ(s->count, 5);
    expect_only_bad(s, UINT64_MAX, SL_OK, "");
    char where[300];
    sl_source__locate(s, 0, where, sizeof where);
    ASSERT_STR_EQ(where, "seq.tfrecord: record 0 (offset 0)");
    sl_source__release(s);

    /* Garbage after a gzip magic: nothing to read. */
    dpath(p, "garbage.tfrecord.gz");
    uint8_t g[200];
    for (int k = 0; k < 200; k++)
        g[k] = (uint8_t)(k * 13 + 5);
    g[0] = 0x1f, g[1] = 0x8b, g[2] = 8, g[3] = 0;
    sl_test_write_file(p, g, sizeof g);
    ASSERT_RC(open_file(&s, "garbage.tfrecord.gz"), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "garbage.tfrecord.gz: not a readable gzip stream");
    /* "compression": "gzip" on a plain file: the same. */
    snprintf(j, sizeof j, "{\"tfrecord\": \"%s/seq.tfrecord\", \"compression\": \"gzip\"}",
             g_dir);
    ASSERT_RC(open_src(&s, j), SL_ECORRUPT);

    /* A gzip file cut in half: what inflates reads, then errors. */
    char gz[4200];
    dpath(gz, "plain.tfrecord.gz");
    size_t n;
    uint8_t *b = sl_test_read_file(gz, &n);
    dpath(p, "cut.tfrecord.gz");
    sl_test_write_file(p, b, n / 2);
    free(b);
    ASSERT_OK(open_file(&s, "cut.tfrecord.gz"));
    ASSERT(s->count >= 2 && s->count < 14);
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    uint64_t ok = 0;
    for (uint64_t i = 0; i < s->count; i++) {
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        int rc = sl_source__read(s, cur, i, &smp);
        if (rc == SL_OK) {
            ASSERT_EQ(ok, i); /* the good ones are a prefix */
            ok++;
        } else {
            ASSERT_RC(rc, SL_ECORRUPT);
            ASSERT_CONTAINS(sl_errmsg(), "cut.tfrecord.gz: record ");
        }
        sl_sample_clear(&smp);
    }
    ASSERT(ok >= 1 && ok < s->count);
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
}

/* Every allocation failure while opening and reading gives SL_ENOMEM, a
 * message, and no leak (ASan). */
SL_TEST(source_tfrecord__oom) {
    if (!make_files())
        return;
    for (uint64_t k = 1;; k++) {
        sl_source *s = NULL;
        sl_source_cursor *cur = NULL;
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        sl__alloc_fail_at(k);
        int rc = open_file(&s, "plain.tfrecord.gz");
        if (rc == SL_OK) {
            rc = sl_source__cursor_open(s, NULL, NULL, &cur);
            for (uint64_t i = 0; rc == SL_OK && i < s->count; i++) {
                rc = sl_source__read(s, cur, i, &smp);
                sl_sample_clear(&smp);
            }
        }
        uint64_t made = sl__alloc_count();
        sl__alloc_fail_at(0);
        if (cur)
            sl_source__cursor_free(s, cur);
        sl_source__release(s);
        /* Done once a run made fewer allocations than the one failed: some
         * failures are absorbed (a protobuf arena that cannot grow keeps its
         * old block), so success alone does not end the loop. */
        if (rc == SL_OK && made < k)
            break;
        if (rc != SL_OK) {
            ASSERT_RC(rc, SL_ENOMEM);
            ASSERT(sl_errmsg()[0]);
        }
        ASSERT(k < 5000);
    }
}

/* ---- files opened lazily (src/record/shard_set.c) -------------------------------------
 * With sidecar indexes, opening reads each index's header alone; a file's
 * bytes and whole index are opened by its first read, at most
 * "max_open_shards" at a time; a damaged file costs only its records. What
 * was opened is counted by the io layer (sl_io__counters). */

#define LZ_PER_FILE 3

static const char *lz_path(int k) {
    static char buf[4][2200];
    static int n;
    n = (n + 1) % 4;
    snprintf(buf[n], sizeof buf[n], "%s/f-%04d.tfrecord", g_dir, k);
    return buf[n];
}

/* Files 0..n-1 of LZ_PER_FILE Examples {label: k * 10 + j}, each indexed. */
static void lz_make(int n) {
    snprintf(g_dir, sizeof g_dir, "%.2000s", sl_test_tmpdir());
    for (int k = 0; k < n; k++) {
        FILE *f = fopen(lz_path(k), "wb");
        ASSERT(f);
        for (int j = 0; j < LZ_PER_FILE; j++) {
            uint8_t ex[128];
            int64_t v = k * 10 + j;
            put_frame(f, ex, example1(ex, "label", 3, &v, 1));
        }
        ASSERT_EQ(fclose(f), 0);
        ASSERT_OK(sl_source__index_tfrecord(lz_path(k), NULL));
    }
}

static int lz_open(sl_source **out, int n, const char *extra) {
    char json[2600];
    snprintf(json, sizeof json, "{\"tfrecord\": \"%s/f-{0000..%04d}.tfrecord\"%s%s}", g_dir,
             n - 1, extra ? ", " : "", extra ? extra : "");
    return open_src(out, json);
}

static void lz_check(sl_source *s, sl_source_cursor *cur, uint64_t i) {
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    ASSERT_OK(sl_source__read(s, cur, i, &smp));
    ASSERT_EQ(*(const int64_t *)smp.col[0].data,
              (int64_t)(i / LZ_PER_FILE * 10 + i % LZ_PER_FILE));
    sl_sample_clear(&smp);
}

SL_TEST(source_tfrecord__lazy_open_reads_only_index_headers) {
    enum { N = 200 };
    lz_make(N);
    sl_io_counters a, b, c;
    sl_io__counters(&a);
    sl_source *s = NULL;
    ASSERT_OK(lz_open(&s, N, "\"index\": true"));
    sl_io__counters(&b);
    ASSERT_U64_EQ(s->count, (uint64_t)N * LZ_PER_FILE);
    ASSERT_EQ(s->ncols, 1);
    ASSERT_EQ(s->col[0].indexed, 1);
    /* one open per index, nothing mapped or left open; of each index its
     * header and descriptors (1 column, 1 scalar) only */
    ASSERT_U64_EQ(b.opens - a.opens, N);
    ASSERT_U64_EQ(b.maps - a.maps, 0);
    ASSERT_U64_EQ(b.open_now, a.open_now);
    ASSERT_U64_EQ(b.read_bytes - a.read_bytes, (uint64_t)N * (64 + 136 + 72));
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    for (int j = 0; j < LZ_PER_FILE; j++) {
        lz_check(s, cur, 7 * LZ_PER_FILE + (uint64_t)j);
        lz_check(s, cur, 3 * LZ_PER_FILE + (uint64_t)j);
    }
    sl_io__counters(&c);
    ASSERT_U64_EQ(c.maps - b.maps, 4);     /* two files and their whole indexes */     /* files 3 and 7 */
    ASSERT_U64_EQ(c.opens - b.opens, 4);   /* and their whole indexes */
    ASSERT_U64_EQ(c.open_now - b.open_now, 2);
    /* a pushed-down filter's values: every index read whole, once */
    const void *vals = NULL;
    ASSERT_OK(s->vt->index_column(s, 0, &vals));
    for (uint64_t i = 0; i < s->count; i++)
        ASSERT_EQ(((const int64_t *)vals)[i], (int64_t)(i / LZ_PER_FILE * 10 + i % LZ_PER_FILE));
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
    sl_io__counters(&c);
    ASSERT_U64_EQ(c.open_now, a.open_now);
}

/* A pushed-down filter's values come from every file's whole index: one
 * gone since the source opened fails the call, naming it (short name, as the
 * index's other messages), and the next call, once it is back, reads them
 * all. A column that is not indexed is refused first. */
SL_TEST(source_tfrecord__index_values_are_tried_again_after_a_failure) {
    enum { N = 4 };
    lz_make(N);
    sl_source *s = NULL;
    ASSERT_OK(lz_open(&s, N, NULL));
    const int64_t *label = ivals_after_a_gone_index(s, 0, lz_path(2), "f-0002.tfrecord");
    for (uint64_t i = 0; i < s->count; i++)
        ASSERT_EQ(label[i], (int64_t)(i / LZ_PER_FILE * 10 + i % LZ_PER_FILE));
    const void *vals = s;
    ASSERT_RC(s->vt->index_column(s, 1, &vals), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "column 1 is not indexed");
    sl_source__release(s);
}

SL_TEST(source_tfrecord__damaged_file_costs_only_its_records) {
    enum { N = 8 };
    lz_make(N);
    char ix[2300];
    snprintf(ix, sizeof ix, "%s.slidx", lz_path(4));
    size_t n;
    uint8_t *bytes = sl_test_read_file(ix, &n);
    bytes[64 + 16 + 2] ^= 0x10;  /* entry 1's offset: the checksum no longer holds */
    sl_test_write_file(ix, bytes, n);
    free(bytes);
    sl_source *s = NULL;
    ASSERT_OK(lz_open(&s, N, NULL));
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    for (uint64_t i = 0; i < s->count; i++) {
        if (i / LZ_PER_FILE != 4) {
            lz_check(s, cur, i);
            continue;
        }
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        ASSERT_RC(sl_source__read(s, cur, i, &smp), SL_ECORRUPT);
        char want[64];
        snprintf(want, sizeof want, "f-0004.tfrecord: record %d: ", (int)(i % LZ_PER_FILE));
        ASSERT_CONTAINS(sl_errmsg(), want);
        ASSERT_CONTAINS(sl_errmsg(), "f-0004.tfrecord.slidx: checksum mismatch");
    }
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
}

typedef struct lz_arg {
    sl_source *s;
    uint64_t seed;
    int errors;
} lz_arg;

static void *lz_reader(void *p) {
    lz_arg *a = p;
    sl_source_cursor *cur = NULL;
    if (sl_source__cursor_open(a->s, NULL, NULL, &cur) != SL_OK) {
        a->errors++;
        return NULL;
    }
    uint64_t x = a->seed * 2654435761u + 1;
    for (uint64_t r = 0; r < 3 * a->s->count; r++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t i = x % a->s->count;
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        if (sl_source__read(a->s, cur, i, &smp) != SL_OK ||
            *(const int64_t *)smp.col[0].data != (int64_t)(i / LZ_PER_FILE * 10 + i % LZ_PER_FILE))
            a->errors++;
        sl_sample_clear(&smp);
    }
    sl_source__cursor_free(a->s, cur);
    return NULL;
}

/* Eight threads over 30 files with at most 3 open: every value right; a
 * single reader's shuffled pass never has more than 3 open. */
SL_TEST(source_tfrecord__threads_and_a_bound_on_open_files) {
    enum { N = 30, THREADS = 8 };
    lz_make(N);
    /* every third file scanned instead */
    for (int k = 0; k < N; k += 3) {
        char ix[2300];
        snprintf(ix, sizeof ix, "%s.slidx", lz_path(k));
        ASSERT_EQ(unlink(ix), 0);
    }
    sl_io_counters a, b;
    sl_io__counters(&a);
    sl_source *s = NULL;
    ASSERT_OK(lz_open(&s, N, "\"max_open_shards\": 3"));
    sl_io__counters(&b);
    /* (the first records, read to type the columns, opened files within the bound) */
    ASSERT(b.open_now - a.open_now <= 3);
    pthread_t th[THREADS];
    lz_arg args[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t] = (lz_arg){.s = s, .seed = (uint64_t)t + 1};
        ASSERT_EQ(pthread_create(&th[t], NULL, lz_reader, &args[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        ASSERT_EQ(pthread_join(th[t], NULL), 0);
        ASSERT_EQ(args[t].errors, 0);
    }
    sl_source_cursor *cur = NULL;
    ASSERT_OK(sl_source__cursor_open(s, NULL, NULL, &cur));
    uint64_t x = 99, peak = 0;
    for (uint64_t r = 0; r < 4 * s->count; r++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        lz_check(s, cur, x % s->count);
        sl_io__counters(&b);
        if (b.open_now - a.open_now > peak)
            peak = b.open_now - a.open_now;
    }
    ASSERT(peak <= 3);
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
}
