/* cli_source.c — opening any source from command-line paths, shared by
 * pack, info, verify and index; JSON output for --json. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* "--features a=b,c=d" (keep a as b, c as d) or "a,c" (keep, same names)
 * as the source option {"features": {"a": "b", "c": "d"}}. */
static int features_json(const char *spec, cJSON *opts) {
    cJSON *f = cJSON_AddObjectToObject(opts, "features");
    char *copy = strdup(spec);
    if (!f || !copy) {
        free(copy);
        return -1;
    }
    int rc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (eq)
            *eq = '\0';
        const char *to = eq ? eq + 1 : tok;
        if (!*tok || !*to) {
            rc = -1;
            break;
        }
        cJSON_AddStringToObject(f, tok, to);
    }
    free(copy);
    if (rc == 0 && !f->child)
        rc = -1;
    return rc;
}

int cli_source_open(const char *cmd, const char *const *paths, int n, const char *features,
                    sl_source **out) {
    char *opts = NULL;
    if (features) {
        cJSON *o = cJSON_CreateObject();
        if (!o || features_json(features, o) < 0) {
            cJSON_Delete(o);
            return cli_usage(cmd, "--features wants KEY=COLUMN,... or KEY,..., not '%s'",
                             features);
        }
        opts = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
    }
    int rc = sl_source_open_paths(out, paths, n, opts);
    free(opts);
    if (rc != SL_OK)
        return cli_fail(cmd);
    return 0;
}

/* "X.slidx" right after X: the sidecar index a glob ('train-*') lists beside
 * its data file. It travels with X (the source leaves it out, X reads it). */
static int sidecar_after(const char *const *paths, int n, int i) {
    if (i + 1 >= n)
        return 0;
    size_t a = strlen(paths[i]);
    return strlen(paths[i + 1]) == a + 6 && !strncmp(paths[i + 1], paths[i], a) &&
           !strcmp(paths[i + 1] + a, ".slidx");
}

int cli_datasets(const char *const *paths, int n, int *start, int *len) {
    int k = 0;
    for (int i = 0; i < n; k++) {
        sl_pack_kind kind;
        start[k] = i;
        len[k] = 1;
        if (sidecar_after(paths, n, i))
            len[k] = 2;
        else if (i + 1 < n && sl_pack_detect(paths + i, 2, &kind) == SL_OK && kind == SL_PACK_IDX)
            len[k] = 2;
        i += len[k];
    }
    return k;
}

int cli_salvaged_words(const char *meta, char *buf, size_t cap) {
    cJSON *o = meta ? cJSON_Parse(meta) : NULL;
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(o, "records");
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(o, "planned");
    const cJSON *from = cJSON_GetObjectItemCaseSensitive(o, "from");
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(o, "classes_planned");
    if (!cJSON_IsNumber(rec)) {
        cJSON_Delete(o);
        return -1;
    }
    int k = snprintf(buf, cap, "salvaged from an interrupted pack (%s): %.0f ",
                     cJSON_IsString(from) ? from->valuestring : "a partial write", rec->valuedouble);
    if (k >= 0 && (size_t)k < cap)
        k += cJSON_IsNumber(pl) ? snprintf(buf + k, cap - (size_t)k, "of %.0f planned records",
                                           pl->valuedouble)
                                : snprintf(buf + k, cap - (size_t)k, "records (how many were "
                                                                     "planned is not known)");
    if (k >= 0 && (size_t)k < cap && cJSON_IsNumber(cls))
        snprintf(buf + k, cap - (size_t)k, ", its class list cut to those the records reach (of "
                 "%.0f)", cls->valuedouble);
    cJSON_Delete(o);
    return 0;
}

int cli_is_slr(const char *path) {
    sl_reader *r;
    if (sl_reader_open(&r, path, SL_READ_NO_VERIFY) != SL_OK)
        return 0;
    sl_reader_free(r);
    return 1;
}

int cli_looks_slr(const char *path) {
    if (cli_is_slr(path))
        return 1;
    struct stat st;
    if (stat(path, &st) != 0)
        return 0;
    char buf[4200];
    if (S_ISDIR(st.st_mode)) {
        snprintf(buf, sizeof buf, "%s/manifest.json", path);
        return stat(buf, &st) == 0;
    }
    /* The magic of docs/FORMAT.md, section "Header". */
    static const char magic[8] = "\x89SLR\r\n\x1a\n";
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof magic, f);
    fclose(f);
    return n == sizeof magic && memcmp(buf, magic, sizeof magic) == 0;
}

void cli_json_out(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    if (s)
        printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
}
