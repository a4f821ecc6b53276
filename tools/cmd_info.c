/* cmd_info.c — `sluice info DATASET [--json]`: schema, size, metadata, labels;
 * `sluice info SPEC.json`: a spec's columns and, for a mixture, each input's share. */
#include "pipe_common.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: sluice info DATASET... [--json] [--features SPEC]\n"
               "       sluice info SPEC.json [--json]\n"
               "\n"
               "Describe a sluice dataset: record count, columns, shards, bytes, metadata\n"
               "(class names) and, for an int64 column named 'label', the count of each\n"
               "label, read from the index alone (no data pages are touched).\n"
               "Other inputs are described as a pipeline would read them: an ImageFolder\n"
               "directory, IDX files, TFRecord files, tar shards (format from content).\n"
               "Several .slr datasets are described one after the other; TFRecord\n"
               "files, tar shards or an IDX pair are described as the one source they form.\n"
               "A pipeline spec (a .json file) is described as the pipeline reads it: its\n"
               "columns, batches per epoch and, for a mixture, each input with its share\n"
               "(weights normalised) and its samples per epoch on this rank where the\n"
               "schedule fixes them (counts, or all_exhausted), else the expected number.\n"
               "The sources are opened; no record is read.\n"
               "\n"
               "options:\n"
               "  --json           print one JSON object on stdout (one line per .slr dataset)\n"
               "  --features SPEC  TFRecord features (Parquet columns) to keep, renamed, as\n"
               "                   image/encoded=image,image/class/label=label\n"
               "  -h, --help       show this help\n"
               "\n"
               "exit status: 0 ok, 1 the dataset cannot be opened, 2 usage error\n"
               "\n"
               "examples:\n"
               "  sluice info /data/train.slr --json\n"
               "  sluice info train-00000-of-01024.tfrecord\n"
               "  sluice info blend.json --json\n");
}

typedef struct {
    int64_t value;
    uint64_t count;
} label_count;

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Distinct values of the 'label' index column with their counts (sorted by
 * value). Returns the number of distinct values, or -1 (no such column or
 * out of memory), LABELS_REMOTE (a remote dataset directory: counting would
 * fetch every shard, where the rest of info reads only the manifest and the
 * first shard's header) or LABELS_FAILED (a shard's index does not read:
 * sl_errmsg says why). */
#define LABELS_REMOTE (-2)
#define LABELS_FAILED (-3)
static long label_counts(const sl_reader *r, label_count **out) {
    *out = NULL;
    const sl_schema *s = sl_reader_schema(r);
    int col = sl_schema_find(s, "label");
    uint64_t n = sl_reader_count(r);
    if (col < 0 || sl_schema_type(s, col) != SL_COL_INT64)
        return -1;
    if (sl_reader_shard_count(r) > 1 && strstr(sl_reader_shard_path(r, 0), "://"))
        return LABELS_REMOTE;
    const void *vals;
    int rc = sl_reader_index_column(r, col, &vals);
    if (rc != SL_OK)
        return rc == SL_ENOMEM ? -1 : LABELS_FAILED;
    if (n == 0)
        return 0;
    int64_t *v = malloc(n * sizeof *v);
    label_count *lc = malloc(n * sizeof *lc);
    if (!v || !lc) {
        free(v);
        free(lc);
        return -1;
    }
    memcpy(v, vals, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_i64);
    long k = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (k && lc[k - 1].value == v[i])
            lc[k - 1].count++;
        else
            lc[k++] = (label_count){v[i], 1};
    }
    free(v);
    *out = lc;
    return k;
}

static uint64_t file_bytes(const sl_reader *r) {
    uint64_t total = 0;
    for (int i = 0; i < sl_reader_shard_count(r); i++)
        total += sl_reader_shard_bytes(r, i); /* a URL's too */
    return total;
}

static cJSON *column_json(const sl_schema *s, int c) {
    cJSON *o = cJSON_CreateObject();
    sl_coltype t = sl_schema_type(s, c);
    cJSON_AddStringToObject(o, "name", sl_schema_name(s, c));
    cJSON_AddStringToObject(o, "type", sl_coltype_name(t));
    if (t == SL_COL_ARRAY) {
        int64_t shape[SL_MAX_DIMS];
        int nd = sl_schema_shape(s, c, shape);
        cJSON_AddStringToObject(o, "dtype", sl_dtype_name(sl_schema_dtype(s, c)));
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < nd && d < SL_MAX_DIMS; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[d]));
    }
    if (sl_schema_flags(s, c) & SL_COLF_ZSTD)
        cJSON_AddBoolToObject(o, "zstd", 1);
    return o;
}

static void print_json(const char *path, const sl_reader *r) {
    const sl_schema *s = sl_reader_schema(r);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddNumberToObject(o, "records", (double)sl_reader_count(r));
    cJSON_AddNumberToObject(o, "bytes", (double)sl_reader_data_bytes(r));
    cJSON_AddNumberToObject(o, "file_bytes", (double)file_bytes(r));
    cJSON *cols = cJSON_AddArrayToObject(o, "columns");
    for (int c = 0; c < sl_schema_ncols(s); c++)
        cJSON_AddItemToArray(cols, column_json(s, c));
    cJSON *sh = cJSON_AddArrayToObject(o, "shards");
    for (int i = 0; i < sl_reader_shard_count(r); i++)
        cJSON_AddItemToArray(sh, cJSON_CreateString(sl_reader_shard_path(r, i)));
    cJSON *meta = cJSON_AddObjectToObject(o, "metadata");
    for (int i = 0; i < sl_reader_meta_count(r); i++) {
        const char *k = sl_reader_meta_key(r, i), *v = sl_reader_meta(r, k);
        cJSON *parsed = v ? cJSON_Parse(v) : NULL;
        /* Values that are JSON (the class list) are embedded as JSON. */
        cJSON_AddItemToObject(meta, k, parsed ? parsed : cJSON_CreateString(v ? v : ""));
    }
    const char *salvaged = sl_reader_meta(r, "salvaged");
    cJSON *sv = salvaged ? cJSON_Parse(salvaged) : NULL;
    if (sv)
        cJSON_AddItemToObject(o, "salvaged", sv);
    const char *classes = sl_reader_meta(r, "classes");
    cJSON *cl = classes ? cJSON_Parse(classes) : NULL;
    if (cl)
        cJSON_AddItemToObject(o, "classes", cl);
    label_count *lc;
    long k = label_counts(r, &lc);
    if (k >= 0) {
        cJSON *lo = cJSON_AddObjectToObject(o, "label_counts");
        for (long i = 0; i < k; i++) {
            char key[32];
            snprintf(key, sizeof key, "%lld", (long long)lc[i].value);
            cJSON_AddNumberToObject(lo, key, (double)lc[i].count);
        }
        free(lc);
    }
    cli_json_out(o);
}

static void print_text(const char *path, const sl_reader *r) {
    const sl_schema *s = sl_reader_schema(r);
    char b1[32], b2[32];
    printf("dataset   %s\n", path);
    printf("records   %llu\n", (unsigned long long)sl_reader_count(r));
    char sv[512];
    if (cli_salvaged_words(sl_reader_meta(r, "salvaged"), sv, sizeof sv) == 0)
        printf("salvaged  %s: not the whole dataset\n", sv + strlen("salvaged "));
    int nsh = sl_reader_shard_count(r);
    printf("shards    %d (%s of data, %s on disk)\n", nsh,
           cli_bytes(b1, sizeof b1, sl_reader_data_bytes(r)),
           cli_bytes(b2, sizeof b2, file_bytes(r)));
    for (int c = 0; c < sl_schema_ncols(s); c++) {
        sl_coltype t = sl_schema_type(s, c);
        printf("%-9s %-12s %s", c ? "" : "columns", sl_schema_name(s, c), sl_coltype_name(t));
        if (t == SL_COL_ARRAY) {
            int64_t shape[SL_MAX_DIMS];
            int nd = sl_schema_shape(s, c, shape);
            printf(" %s [", sl_dtype_name(sl_schema_dtype(s, c)));
            for (int d = 0; d < nd && d < SL_MAX_DIMS; d++)
                printf(d ? ", %lld" : "%lld", (long long)shape[d]);
            printf("]");
        }
        if (sl_schema_flags(s, c) & SL_COLF_ZSTD)
            printf(" (zstd)");
        printf("\n");
    }
    for (int i = 0; i < sl_reader_meta_count(r); i++) {
        const char *k = sl_reader_meta_key(r, i), *v = sl_reader_meta(r, k);
        int len = v ? (int)strlen(v) : 0;
        printf("%-9s %s = %.*s%s\n", i ? "" : "metadata", k, len > 200 ? 200 : len,
               v ? v : "", len > 200 ? "..." : "");
    }
    label_count *lc;
    long k = label_counts(r, &lc);
    if (k > 0) {
        printf("labels    %ld distinct:", k);
        long show = k > 20 ? 20 : k;
        for (long i = 0; i < show; i++)
            printf(" %lld:%llu", (long long)lc[i].value, (unsigned long long)lc[i].count);
        printf("%s\n", k > show ? " ..." : "");
        free(lc);
    } else if (k == LABELS_REMOTE) {
        printf("labels    not counted (a remote dataset directory: every shard would be "
               "fetched)\n");
    } else if (k == LABELS_FAILED) {
        printf("labels    not counted: %s\n", sl_errmsg());
    }
}

/* Any other source: what sl_source_describe says, and label counts when the
 * source has an indexed int64 'label' column. */
static int info_slr(const char *path, int json);

static int info_source(const char *const *paths, int n, const char *features, int json) {
    sl_source *src;
    int rc = cli_source_open("info", paths, n, features, &src);
    if (rc)
        return rc;
    size_t len = 0;
    sl_source_describe(src, NULL, 0, &len);
    char *text = malloc(len + 1);
    if (!text || sl_source_describe(src, text, len + 1, NULL) != SL_OK) {
        free(text);
        sl_source_free(src);
        return cli_fail("info");
    }
    cJSON *o = cJSON_Parse(text);
    free(text);
    int col = -1;
    for (int c = 0; c < sl_source_ncols(src); c++)
        if (!strcmp(sl_source_colname(src, c), "label") &&
            sl_source_coltype(src, c) == SL_COL_INT64)
            col = c;
    const void *vals;
    if (o && col >= 0 && sl_source_index_column(src, col, &vals) == SL_OK) {
        uint64_t cnt = sl_source_count(src);
        int64_t *v = malloc((cnt ? cnt : 1) * sizeof *v);
        if (v) {
            memcpy(v, vals, cnt * sizeof *v);
            qsort(v, cnt, sizeof *v, cmp_i64);
            cJSON *lo = cJSON_AddObjectToObject(o, "label_counts");
            for (uint64_t i = 0; i < cnt;) {
                uint64_t j = i;
                while (j < cnt && v[j] == v[i])
                    j++;
                char key[32];
                snprintf(key, sizeof key, "%lld", (long long)v[i]);
                cJSON_AddNumberToObject(lo, key, (double)(j - i));
                i = j;
            }
            free(v);
        }
    }
    if (o && json) {
        char *t = cJSON_PrintUnformatted(o);
        if (t)
            printf("%s\n", t);
        free(t);
    } else if (o) {
        printf("source    %s (%s)\n", cJSON_GetObjectItem(o, "name")->valuestring,
               sl_source_kind(src));
        printf("records   %llu\n", (unsigned long long)sl_source_count(src));
        int c = 0;
        cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "columns")) {
            cJSON *t = cJSON_GetObjectItem(it, "type"), *dt = cJSON_GetObjectItem(it, "dtype");
            printf("%-9s %-16s %s%s%s%s%s\n", c++ ? "" : "columns",
                   cJSON_GetObjectItem(it, "name")->valuestring, t->valuestring,
                   dt ? " " : "", dt ? dt->valuestring : "",
                   cJSON_GetObjectItem(it, "encoded") ? " (encoded image)" : "",
                   cJSON_GetObjectItem(it, "indexed") ? " (indexed)" : "");
        }
        /* metadata as the .slr text shows it: the class names of an
         * ImageFolder, as --json has them */
        int m = 0;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(o, "metadata")) {
            char *v = cJSON_IsString(it) ? NULL : cJSON_PrintUnformatted(it);
            const char *txt = cJSON_IsString(it) ? it->valuestring : v ? v : "";
            int tl = (int)strlen(txt);
            printf("%-9s %s = %.*s%s\n", m++ ? "" : "metadata", it->string, tl > 200 ? 200 : tl,
                   txt, tl > 200 ? "..." : "");
            free(v);
        }
        cJSON *lc = cJSON_GetObjectItem(o, "label_counts");
        if (lc && lc->child) {
            int k = cJSON_GetArraySize(lc), shown = 0;
            printf("labels    %d distinct:", k);
            cJSON_ArrayForEach(it, lc) {
                if (shown++ == 20)
                    break;
                printf(" %s:%.0f", it->string, it->valuedouble);
            }
            printf("%s\n", k > 20 ? " ..." : "");
        }
        printf("next: 'sluice pack %s%s DST' converts it to .slr\n", paths[0],
               n > 1 ? " ..." : "");
    }
    cJSON_Delete(o);
    sl_source_free(src);
    return o ? 0 : cli_fail("info");
}

/* A pipeline spec: its columns, batches per epoch and a mixture's inputs
 * with their shares (the explain JSON's "mix", stage_source.c). */
static int info_spec(const char *path, int json) {
    sl_pipeline *p;
    int ec = cli_build_pipeline("info", path, -1, -1, &p);
    if (ec)
        return ec;
    size_t len = 0;
    sl_pipeline_explain_json(p, NULL, 0, &len);
    char *text = malloc(len + 1);
    cJSON *ex = text && sl_pipeline_explain_json(p, text, len + 1, &len) == SL_OK
                    ? cJSON_Parse(text) : NULL;
    free(text);
    cJSON *o = cJSON_CreateObject();
    cJSON *cols = o && cJSON_AddStringToObject(o, "spec", path)
                      ? cJSON_AddArrayToObject(o, "columns") : NULL;
    if (!ex || !cols) {
        cJSON_Delete(ex);
        cJSON_Delete(o);
        sl_pipeline_free(p);
        return cli_fail("info");
    }
    for (int c = 0; c < sl_pipeline_ncols(p); c++)
        cJSON_AddItemToArray(cols, cJSON_CreateString(sl_pipeline_column_name(p, c)));
    cJSON_AddNumberToObject(o, "batches_per_epoch", (double)sl_pipeline_len(p));
    cJSON *mix = cJSON_DetachItemFromObject(ex, "mix");
    if (mix) { /* what the readers drew so far: nothing yet (that is bench's) */
        cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(mix, "inputs")) {
            cJSON_DeleteItemFromObject(it, "samples");
            cJSON_DeleteItemFromObject(it, "share");
        }
        cJSON_AddItemToObject(o, "mix", mix);
    }
    cJSON_Delete(ex);
    sl_pipeline_free(p);
    if (json) {
        char *t = cJSON_PrintUnformatted(o);
        if (t)
            printf("%s\n", t);
        free(t);
        cJSON_Delete(o);
        return t ? 0 : cli_fail("info");
    }
    printf("spec      %s\n", path);
    cJSON *it;
    printf("columns  ");
    cJSON_ArrayForEach(it, cols)
        printf(" %s", it->valuestring);
    printf("\nbatches   %.0f per epoch\n",
           cJSON_GetObjectItem(o, "batches_per_epoch")->valuedouble);
    if (mix) {
        cJSON *ins = cJSON_GetObjectItem(mix, "inputs");
        printf("mix       %d inputs, schedule %s, stop %s, %.0f positions per epoch%s\n",
               cJSON_GetArraySize(ins), cJSON_GetObjectItem(mix, "schedule")->valuestring,
               cJSON_GetObjectItem(mix, "stop")->valuestring,
               cJSON_GetObjectItem(mix, "positions_per_epoch")->valuedouble,
               cJSON_IsTrue(cJSON_GetObjectItem(mix, "epoch_length_known"))
                   ? "" : " at most (it ends when an input runs out)");
        int k = 0;
        cJSON_ArrayForEach(it, ins) {
            cJSON *per = cJSON_GetObjectItem(it, "samples_per_epoch");
            cJSON *exp = cJSON_GetObjectItem(it, "expected_samples");
            printf("  input %d  %s (%s, %.0f records): share %.4f, ", k++,
                   cJSON_GetObjectItem(it, "name")->valuestring,
                   cJSON_GetObjectItem(it, "kind")->valuestring,
                   cJSON_GetObjectItem(it, "records")->valuedouble,
                   cJSON_GetObjectItem(it, "weight")->valuedouble);
            if (cJSON_IsNumber(per))
                printf("%.0f samples per epoch\n", per->valuedouble);
            else if (cJSON_IsNumber(exp))
                printf("~%.0f samples per epoch\n", exp->valuedouble);
            else
                printf("samples per epoch unknown until an input runs out\n");
        }
    }
    printf("next: 'sluice explain %s' shows the plan%s%s%s\n", path,
           mix ? "; 'sluice bench " : "", mix ? path : "", mix ? "' the share each input got" : "");
    cJSON_Delete(o);
    return 0;
}

/* A .json file: a pipeline spec, not a dataset. */
static int is_spec(const char *path) {
    size_t n = strlen(path);
    return n > 5 && !strcmp(path + n - 5, ".json");
}

int cmd_info(int argc, char **argv) {
    const char *paths[256];
    const char *features = NULL;
    int n = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            help(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if ((m = cli_opt("info", argc, argv, &i, "--features", NULL, &v)) != 0) {
            if (m < 0)
                return 2;
            features = v;
        } else if (cli_input("info", argv[i], paths, &n, (int)(sizeof paths / sizeof paths[0]))) {
            return 2;
        }
    }
    if (n == 0)
        return cli_usage("info", "missing the DATASET to describe");
    if (n == 1 && is_spec(paths[0])) {
        if (features)
            return cli_usage("info", "--features is for data files; a spec names its own");
        return info_spec(paths[0], json);
    }
    /* Several .slr datasets: one block (or JSON line) each, since a source
     * is one dataset. Files of another kind (TFRecord files, tar shards, an
     * IDX pair) are described together, as the one source they form. */
    int all_slr = n > 1 && !features;
    for (int i = 0; i < n && all_slr; i++)
        all_slr = cli_looks_slr(paths[i]);
    if (!all_slr)
        return n > 1 || features || !cli_is_slr(paths[0]) ? info_source(paths, n, features, json)
                                                          : info_slr(paths[0], json);
    int code = 0;
    for (int i = 0; i < n; i++) {
        if (i && !json)
            printf("\n");
        int rc = cli_is_slr(paths[i]) ? info_slr(paths[i], json)
                                      : info_source(paths + i, 1, NULL, json);
        if (rc)
            code = 1;
    }
    return code;
}

static int info_slr(const char *path, int json) {
    sl_reader *r;
    if (sl_reader_open(&r, path, 0) != SL_OK) {
        cli_fail("info");
        fprintf(stderr, "(is it a sluice dataset? 'sluice recover' salvages an interrupted pack)\n");
        return 1;
    }
    if (json)
        print_json(path, r);
    else
        print_text(path, r);
    sl_reader_free(r);
    return 0;
}
