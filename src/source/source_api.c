/*
 * source_api.c — the public face of sources (sluice.h, "Sources"): open by
 * object or by paths (the format found from content), describe, read, pack,
 * build an index. Everything here goes through the source interface.
 */
#include "source/source.h"
#include "source/source_index.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int sl_source_open(sl_source **out, const char *json) {
    if (!out)
        return sl__error(SL_EINVAL, "sl_source_open: out is NULL");
    *out = NULL;
    SL_TRY(sl_settings_check());
    sl__json_init(); /* an allocation that fails is out of memory, not bad JSON */
    cJSON *doc = json ? cJSON_ParseWithOpts(json, NULL, 1) : NULL;
    if (!doc)
        return json && sl__json_failed() ? sl__oom("reading the source's JSON")
                                         : sl__error(SL_EINVAL, "source: not valid JSON");
    int rc = sl_source__open_json(out, doc, "source");
    cJSON_Delete(doc);
    return rc;
}

/* The first bytes of a file: enough for every sniffer (a tar header is 512). */
static int read_head(const char *path, uint8_t *head, size_t cap, size_t *n_out) {
    *n_out = 0;
    sl_io *io;
    SL_TRY(sl_io__open(&io, path, 0));
    int rc = sl_io__read_some(io, head, cap, 0, n_out);
    sl_io__close(io);
    return rc;
}

static int detect_one(const char *path, const sl_source_format **kind_out);

/* What a kind of input is, in words for messages (the registry's noun). */
static const char *kind_noun(const sl_source_format *k) { return k->noun ? k->noun : k->key; }

/* A sidecar index ("DATA.slidx", written by `sluice index`) given beside its
 * data file, as a shell glob ('train-*') gives them: not an input of its own.
 * The data file reads it by itself, so the list leaves it out. */
static int sidecar_of_listed(const char *const *paths, int n, int i) {
    static const char sfx[] = ".slidx";
    size_t len = strlen(paths[i]), sl = sizeof sfx - 1;
    if (len <= sl || strcmp(paths[i] + len - sl, sfx) != 0)
        return 0;
    for (int j = 0; j < n; j++)
        if (j != i && strlen(paths[j]) == len - sl && !strncmp(paths[j], paths[i], len - sl))
            return 1;
    return 0;
}

/* A path that names no file but is a brace pattern or an @list: the kind of
 * the files it expands to (all of one kind, and one that takes a list). */
static int detect_pattern(const char *path, const sl_source_format **kind_out) {
    cJSON *v = cJSON_CreateString(path);
    if (!v)
        return sl__oom("expanding a path pattern");
    char **paths;
    int n;
    int rc = sl_source__expand_paths(v, path, &paths, &n);
    cJSON_Delete(v);
    SL_TRY(rc);
    const sl_source_format *first = NULL;
    for (int i = 0; rc == SL_OK && i < n; i++) {
        const sl_source_format *k;
        rc = detect_one(paths[i], &k);
        if (rc == SL_OK && first && k != first)
            rc = sl__error(SL_EINVAL, "%s: %s is %s but %s is %s; give inputs of one kind", path,
                           paths[0], kind_noun(first), paths[i], kind_noun(k));
        first = k;
    }
    if (rc == SL_OK && !first->multi)
        rc = sl__error(SL_EINVAL, "%s: patterns and @lists name TFRecord files or tar shards, "
                       "not %s inputs", path, first->key);
    sl_source__free_paths(paths);
    if (rc == SL_OK)
        *kind_out = first;
    return rc;
}

/* The kind of file a folder's name suggests for a call: "*.tar". */
static void ext_pattern(const char *file, char *buf, size_t cap) {
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    const char *dot = strrchr(base, '.');
    snprintf(buf, cap, "*%s", dot && dot != base ? dot : "");
}

/* A local folder without a manifest: when it holds no folders but files,
 * and every file is a TFRecord file (or every one a tar shard), it is that
 * kind's dataset (1, *kind_out set); a folder with class folders is left
 * to the ImageFolder sniffer (0); files of several kinds, or one that is
 * none, are an error naming the call that reads each kind. */
static int detect_folder(const char *dir, const sl_source_format **kind_out) {
    char **files;
    int n, subdirs;
    SL_TRY(sl_source__list_folder(dir, &files, &n, &subdirs));
    int rc = 0;
    if (subdirs || n == 0) {
        sl_source__free_paths(files);
        return 0;
    }
    const sl_source_format *kinds[8] = {0};
    int first_of[8] = {0}, nk = 0, other = -1;
    for (int i = 0; i < n && rc == 0; i++) {
        const sl_source_format *k = NULL;
        int r = detect_one(files[i], &k);
        if (r == SL_ENOMEM) {
            rc = r;
            break;
        }
        if (r < 0 || !k->multi) {
            sl_errclear();
            if (other < 0)
                other = i;
            continue;
        }
        int j = 0;
        while (j < nk && kinds[j] != k)
            j++;
        if (j == nk && nk < 8) {
            kinds[nk] = k;
            first_of[nk++] = i;
        }
    }
    if (rc == 0 && nk == 1 && other < 0) {
        *kind_out = kinds[0];
        rc = 1;
    } else if (rc == 0 && nk >= 1) {
        char pat[2][64], calls[512];
        size_t len = 0;
        calls[0] = '\0';
        for (int j = 0; j < nk && j < 2; j++) {
            ext_pattern(files[first_of[j]], pat[j], sizeof pat[j]);
            len += (size_t)snprintf(calls + len, len < sizeof calls ? sizeof calls - len : 0,
                                    "%ssluice.%s('%s/%s')", j ? " or " : "", kinds[j]->key, dir,
                                    pat[j]);
        }
        if (nk > 1)
            rc = sl__error(SL_EINVAL, "%s: a folder of %ss (%s) and %ss (%s); name the files of "
                           "one kind: %s (a quoted '%s/%s' for the sluice command)",
                           dir, kind_noun(kinds[0]) + 2, files[first_of[0]],
                           kind_noun(kinds[1]) + 2, files[first_of[1]], calls, dir, pat[0]);
        else
            rc = sl__error(SL_EINVAL, "%s: a folder of %ss (%s), but %s is not one; name the "
                           "files: %s (a quoted '%s/%s' for the sluice command), or move the "
                           "others out", dir, kind_noun(kinds[0]) + 2, files[first_of[0]],
                           files[other], calls, dir, pat[0]);
    }
    sl_source__free_paths(files);
    return rc;
}

static int detect_one(const char *path, const sl_source_format **kind_out) {
    sl_io_info st;
    int src = sl_io__stat(path, &st);
    if (src == SL_END) {
        if (sl_source__is_pattern(path))
            return detect_pattern(path, kind_out);
        return sl__error(SL_EIO, "%s: %s", path, sl_io__missing(path));
    }
    SL_TRY(src);
    if (st.is_dir && sl_io__is_url(path)) {
        /* a remote "directory": a .slr dataset, or an s3:// prefix whose
         * objects are the inputs; never an ImageFolder (no listing) */
        int yes = sl_source__sniff_slr(path, 1, NULL, 0);
        if (yes < 0)
            return yes;
        if (yes) {
            for (const sl_source_format *k = sl_source__kinds; k->key; k++)
                if (k->sniff == sl_source__sniff_slr) {
                    *kind_out = k;
                    return SL_OK;
                }
        }
        if (!strncmp(path, "s3://", 5))
            return detect_pattern(path, kind_out);
        return sl__error(SL_EUNSUPPORTED, "%s: a directory URL without a manifest.json (not a .slr "
                         "dataset); name its files, or list them in an @file", path);
    }
    int is_dir = st.is_dir;
    if (is_dir && !sl_source__sniff_slr(path, 1, NULL, 0)) {
        int rc = detect_folder(path, kind_out);
        if (rc != 0)
            return rc < 0 ? rc : SL_OK;
    }
    /* A file with a sidecar index is of the kind the index names: its
     * header says so without a page of the data read (source_index.h),
     * as the source itself opens it. */
    sl_sidx *ix = NULL;
    *kind_out = NULL;
    if (!is_dir && sl_sidx__load_head(path, NULL, &ix) == SL_OK) {
        for (const sl_source_format *k = sl_source__kinds; k->key; k++)
            if (k->build_index && !strcmp(k->key, ix->kind))
                *kind_out = k;
        sl_sidx__free(ix);
        if (*kind_out)
            return SL_OK;
    }
    uint8_t head[1024];
    size_t n = 0;
    if (!is_dir)
        SL_TRY(read_head(path, head, sizeof head, &n));
    for (const sl_source_format *k = sl_source__kinds; k->key; k++) {
        int yes = k->sniff ? k->sniff(path, is_dir, head, n) : 0;
        if (yes < 0)
            return yes;
        if (yes) {
            *kind_out = k;
            return SL_OK;
        }
    }
    if (!is_dir && n == 0)
        return sl__error(SL_EUNSUPPORTED, "%s: empty file", path);
    static const uint8_t sidx_magic[8] = {0x89, 'S', 'L', 'I', 'D', 'X', '\r', '\n'};
    if (!is_dir && n >= 8 && !memcmp(head, sidx_magic, 8)) {
        size_t len = strlen(path);
        return sl__error(SL_EUNSUPPORTED,
                         "%s: a sidecar index (written by 'sluice index'), not data: give the "
                         "file it indexes%s%.*s%s, which reads it by itself",
                         path, len > 6 ? " (" : "", len > 6 ? (int)(len - 6) : 0, path,
                         len > 6 ? ")" : "");
    }
    return sl__error(SL_EUNSUPPORTED,
                     "%s: not a format sluice reads (a .slr dataset, an ImageFolder directory, "
                     "IDX, TFRecord, tar or Parquet files)", path);
}

int sl_source__wrong_kind(const char *path, int rc) {
    char keep[SL__ERRMSG_MAX];
    snprintf(keep, sizeof keep, "%s", sl_errmsg());
    const sl_source_format *k = NULL;
    sl_source *src = NULL;
    /* Only when the input reads as that other kind: a directory that is no
     * ImageFolder either keeps the message it had. */
    if (sl_source__detect(&path, 1, &k) == SL_OK && k->open == sl_source__open_idx)
        return sl__error(SL_EINVAL,
                         "%s is an IDX file, not a .slr dataset: read it with the \"idx\" source "
                         "and its pair of images and labels files (sluice.idx() in Python), or "
                         "convert both with `sluice pack IMAGES LABELS OUT.slr`",
                         path);
    if (!k || k->open == sl_source__open_slr || sl_source_open_paths(&src, &path, 1, NULL) != SL_OK) {
        sl__seterrmsg(keep);
        return rc;
    }
    sl_source_free(src);
    return sl__error(SL_EINVAL,
                     "%s is %s, not a .slr dataset: read it with the \"%s\" source "
                     "(sluice.%s() in Python), or convert it with `sluice pack %s OUT.slr`",
                     path, kind_noun(k), k->key, k->key, path);
}

int sl_source__detect(const char *const *paths, int n, const sl_source_format **kind_out) {
    *kind_out = NULL;
    if (!paths || n <= 0)
        return sl__error(SL_EINVAL, "no input given");
    const sl_source_format *first = NULL;
    int firsti = 0, given = 0;
    for (int i = 0; i < n; i++)
        if (!paths[i])
            return sl__error(SL_EINVAL, "input %d is NULL", i);
    for (int i = 0; i < n; i++) {
        const sl_source_format *k;
        if (sidecar_of_listed(paths, n, i))
            continue;
        given++;
        SL_TRY(detect_one(paths[i], &k));
        if (first && k != first)
            return sl__error(SL_EINVAL, "%s is %s but %s is %s; give inputs of one kind",
                             paths[firsti], kind_noun(first), paths[i], kind_noun(k));
        if (!first)
            firsti = i;
        first = k;
    }
    if (!first->multi && given > (first->open == sl_source__open_idx ? 2 : 1))
        return sl__error(SL_EINVAL, "%d inputs, each %s: a source reads one (open one source "
                         "per dataset)", given, kind_noun(first));
    *kind_out = first;
    return SL_OK;
}

int sl_source_detect(const char *const *paths, int n, const char **key_out) {
    if (!key_out)
        return sl__error(SL_EINVAL, "sl_source_detect: key_out is NULL");
    *key_out = NULL;
    const sl_source_format *k;
    SL_TRY(sl_source__detect(paths, n, &k));
    *key_out = k->key;
    return SL_OK;
}

int sl_source_open_paths(sl_source **out, const char *const *paths, int n,
                         const char *options_json) {
    if (!out)
        return sl__error(SL_EINVAL, "sl_source_open_paths: out is NULL");
    *out = NULL;
    SL_TRY(sl_settings_check());
    const sl_source_format *k;
    SL_TRY(sl_source__detect(paths, n, &k));
    sl__json_init();
    cJSON *obj = options_json ? cJSON_ParseWithOpts(options_json, NULL, 1) : cJSON_CreateObject();
    if (!obj)
        return options_json && !sl__json_failed() ? sl__error(SL_EINVAL, "source options: not valid JSON")
                            : sl__oom("opening a source");
    if (!cJSON_IsObject(obj)) {
        cJSON_Delete(obj);
        return sl__error(SL_EINVAL, "source options: must be a JSON object");
    }
    cJSON *in;
    int first = 0;
    while (sidecar_of_listed(paths, n, first))
        first++;
    if (k->multi || n > 1) {
        in = cJSON_CreateArray();
        for (int i = 0; in && i < n; i++) {
            if (sidecar_of_listed(paths, n, i))
                continue;
            cJSON *p = cJSON_CreateString(paths[i]);
            if (!p) {
                cJSON_Delete(in);
                in = NULL;
                break;
            }
            cJSON_AddItemToArray(in, p);
        }
    } else {
        in = cJSON_CreateString(paths[first]);
    }
    if (!in) {
        cJSON_Delete(obj);
        return sl__oom("opening a source");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(obj, k->key);
    int rc = sl__json_add(obj, k->key, in);
    if (rc == SL_OK)
        rc = sl_source__open_json(out, obj, "source");
    cJSON_Delete(obj);
    return rc;
}

void sl_source_free(sl_source *src) { sl_source__release(src); }

const char *sl_source_kind(const sl_source *src) { return src->kind; }
const char *sl_source_name(const sl_source *src) { return src->name; }
uint64_t sl_source_count(const sl_source *src) { return src->count; }
int sl_source_ncols(const sl_source *src) { return src->ncols; }

const char *sl_source_colname(const sl_source *src, int col) {
    return col >= 0 && col < src->ncols ? src->col[col].name : NULL;
}

sl_coltype sl_source_coltype(const sl_source *src, int col) {
    return col >= 0 && col < src->ncols ? src->col[col].type : (sl_coltype)0;
}

static const char *coltype_name(sl_coltype t) {
    switch (t) {
    case SL_COL_INT64: return "int64";
    case SL_COL_FLOAT64: return "float64";
    case SL_COL_STRING: return "string";
    case SL_COL_BYTES: return "bytes";
    case SL_COL_ARRAY: return "array";
    default: return "unknown";
    }
}

int sl_source_describe(const sl_source *src, char *buf, size_t cap, size_t *len_out) {
    if (!src)
        return sl__error(SL_EINVAL, "sl_source_describe: source is NULL");
    int rc = SL_OK;
    sl__json_init(); /* the adds below are checked once, at the end */
    cJSON *doc = cJSON_CreateObject(), *cols = NULL;
    if (!doc || !cJSON_AddStringToObject(doc, "kind", src->kind) ||
        !cJSON_AddStringToObject(doc, "name", src->name) ||
        !cJSON_AddNumberToObject(doc, "records", (double)src->count) ||
        !(cols = cJSON_AddArrayToObject(doc, "columns")))
        SL_FAIL(SL_ENOMEM, "describing a source");
    for (int c = 0; c < src->ncols; c++) {
        const sl_source_col *sc = &src->col[c];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            SL_FAIL(SL_ENOMEM, "describing a source");
        cJSON_AddItemToArray(cols, o);
        cJSON_AddStringToObject(o, "name", sc->name);
        cJSON_AddStringToObject(o, "type", coltype_name(sc->type));
        if (sc->type == SL_COL_ARRAY) {
            cJSON_AddStringToObject(o, "dtype", sl_dtype_name(sc->dtype));
            cJSON *sh = cJSON_AddArrayToObject(o, "shape");
            for (int d = 0; sh && d < sc->ndim; d++)
                cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)sc->shape[d]));
        }
        if (sc->encoded)
            cJSON_AddBoolToObject(o, "encoded", 1);
        if (sc->indexed)
            cJSON_AddBoolToObject(o, "indexed", 1);
    }
    if (src->meta) {
        SL_CHECK(sl__json_add(doc, "metadata", cJSON_Duplicate(src->meta, 1)));
    }
    if (src->vt->describe)
        SL_CHECK(src->vt->describe((sl_source *)src, doc));
    return sl__json_copy_out(doc, buf, cap, len_out, "describing a source");
cleanup:
    cJSON_Delete(doc);
    return rc;
}

int sl_source_read(sl_source *src, uint64_t i, sl_sample *out) {
    if (!src || !out)
        return sl__error(SL_EINVAL, "sl_source_read: NULL argument");
    memset(out, 0, sizeof *out);
    if (i >= src->count)
        return sl__error(SL_EINVAL, "%s: record %llu is out of range (%llu records)", src->name,
                         (unsigned long long)i, (unsigned long long)src->count);
    if (!src->api_cursor)
        SL_TRY(sl_source__cursor_open(src, NULL, NULL, &src->api_cursor));
    return sl_source__read(src, src->api_cursor, i, out);
}

int sl_source_find_column(const sl_source *src, const char *name) {
    if (!src || !name)
        return sl__error(SL_EINVAL, "sl_source_find_column: NULL argument");
    const char *names[SL_MAX_COLUMNS];
    for (int c = 0; c < src->ncols; c++) {
        if (!strcmp(src->col[c].name, name))
            return c;
        names[c] = src->col[c].name;
    }
    char list[384];
    sl__names_closest(name, names, src->ncols, list, sizeof list);
    return sl__error(SL_EINVAL, "%s has no column '%s'; its columns are: %s", src->name, name,
                     src->ncols ? list : "none");
}

/* How many records find_image_cols looks at. */
#define IMAGE_SNIFF_RECORDS 16

/* The columns sl_source_check checks: those the source marks as images; for
 * a source whose columns carry no such mark (.slr, SL_SOURCE_F_IMAGES_BY_CONTENT),
 * each bytes column that holds an image, by content, in one of the first
 * records that read. Every value of such a column is then checked. */
static int find_image_cols(sl_source *src) {
    uint32_t cols = 0, bytes_cols = 0;
    for (int c = 0; c < src->ncols; c++) {
        if (src->col[c].image)
            cols |= 1u << c;
        else if (src->col[c].type == SL_COL_BYTES)
            bytes_cols |= 1u << c;
    }
    const int marked = cols != 0 || !(src->vt->flags & SL_SOURCE_F_IMAGES_BY_CONTENT);
    for (uint64_t i = 0; !marked && bytes_cols && i < src->count && i < IMAGE_SNIFF_RECORDS; i++) {
        sl_sample smp;
        int rc = sl_source_read(src, i, &smp);
        if (rc == SL_ENOMEM)
            return rc;
        if (rc < 0)
            continue; /* damaged: the check of record i reports it */
        for (int c = 0; c < src->ncols && c < (int)smp.ncols; c++)
            if ((bytes_cols >> c & 1u) &&
                sl_source__looks_like_image(smp.col[c].data, smp.col[c].nbytes))
                cols |= 1u << c;
        sl_sample_clear(&smp);
    }
    sl_errclear();
    src->api_images = cols;
    src->api_images_known = 1;
    return SL_OK;
}

int sl_source_check(sl_source *src, uint64_t i, int check, int *images_out) {
    if (images_out)
        *images_out = 0;
    if (!src)
        return sl__error(SL_EINVAL, "sl_source_check: source is NULL");
    if (check != SL_PACK_CHECK_HEADER && check != SL_PACK_CHECK_DECODE)
        return sl__error(SL_EINVAL, "sl_source_check: check must be SL_PACK_CHECK_HEADER or "
                         "SL_PACK_CHECK_DECODE, not %d", check);
    if (src->api_check && src->api_check->mode != check) {
        sl_source__checker_dispose(src->api_check);
        sl__free(src->api_check);
        src->api_check = NULL;
    }
    if (!src->api_check) {
        sl_source__checker *c = sl__calloc(1, sizeof *c);
        if (!c)
            return sl__oom("checking images");
        int rc = sl_source__checker_init(c, check);
        if (rc < 0) {
            sl_source__checker_dispose(c);
            sl__free(c);
            return rc;
        }
        src->api_check = c;
    }
    if (!src->api_images_known)
        SL_TRY(find_image_cols(src));
    sl_sample smp;
    SL_TRY(sl_source_read(src, i, &smp));
    int rc = sl_source__check_cols(src, src->api_check, i, &smp, src->api_images, images_out);
    sl_sample_clear(&smp);
    return rc;
}

struct sl_source_reader {
    sl_source *src;
    sl_source_cursor *cur;
};

int sl_source_reader_create(sl_source *src, sl_source_reader **out) {
    if (!src || !out)
        return sl__error(SL_EINVAL, "sl_source_reader_create: NULL argument");
    *out = NULL;
    sl_source_reader *rd = sl__calloc(1, sizeof *rd);
    if (!rd)
        return sl__oom("creating a source reader");
    int rc = sl_source__cursor_open(src, NULL, NULL, &rd->cur);
    if (rc < 0) {
        sl__free(rd);
        return rc;
    }
    rd->src = src;
    *out = rd;
    return SL_OK;
}

int sl_source_reader_read(sl_source_reader *rd, uint64_t i, sl_sample *out) {
    if (!rd || !out)
        return sl__error(SL_EINVAL, "sl_source_reader_read: NULL argument");
    memset(out, 0, sizeof *out);
    if (i >= rd->src->count)
        return sl__error(SL_EINVAL, "%s: record %llu is out of range (%llu records)",
                         rd->src->name, (unsigned long long)i,
                         (unsigned long long)rd->src->count);
    return sl_source__read(rd->src, rd->cur, i, out);
}

void sl_source_reader_free(sl_source_reader *rd) {
    if (!rd)
        return;
    sl_source__cursor_free(rd->src, rd->cur);
    sl__free(rd);
}

int sl_source_index_column(const sl_source *src, int col, const void **out) {
    if (!src || !out || col < 0 || col >= src->ncols)
        return sl__error(SL_EINVAL, "sl_source_index_column: bad argument");
    if (!src->col[col].indexed || !src->vt->index_column)
        return sl__error(SL_EINVAL, "%s: column '%s' is not indexed", src->name,
                         src->col[col].name);
    return src->vt->index_column((sl_source *)src, col, out);
}

int sl_source_checksummed(const sl_source *src) { return src && src->checksummed; }

const char *sl_source_repair_hint(const sl_source *src) {
    if (src && src->vt->repair)
        return src->vt->repair;
    return "damaged records cannot be read; write the file again, pack with --skip-bad to "
           "leave them out, or use 'sluice cat' to read the records that are intact";
}

int sl_paths_expand(const char *pattern, char ***paths_out, int *n_out) {
    if (!pattern || !paths_out || !n_out)
        return sl__error(SL_EINVAL, "sl_paths_expand: NULL argument");
    *paths_out = NULL;
    *n_out = 0;
    cJSON *v = cJSON_CreateString(pattern);
    if (!v)
        return sl__oom("expanding a path pattern");
    int rc = sl_source__expand_paths(v, pattern, paths_out, n_out);
    cJSON_Delete(v);
    return rc;
}

void sl_paths_free(char **paths) { sl_source__free_paths(paths); }

int sl_source_index_build(const char *path, const char *options_json) {
    const sl_source_format *k;
    if (!path)
        return sl__error(SL_EINVAL, "sl_source_index_build: path is NULL");
    SL_TRY(sl_source__detect(&path, 1, &k));
    if (k->open == sl_source__open_slr)
        return sl__error(SL_EUNSUPPORTED, "%s: a .slr dataset carries its own index (every "
                         "reader uses it; nothing to build): sluice index writes sidecar indexes "
                         "for TFRecord files and tar shards", path);
    if (!k->build_index)
        return sl__error(SL_EUNSUPPORTED, "%s: %s has no sidecar index (TFRecord files and tar "
                         "shards do); pack it into a .slr dataset, which carries its own: "
                         "sluice pack %s OUT.slr", path, kind_noun(k), path);
    sl__json_init();
    cJSON *opts = options_json ? cJSON_ParseWithOpts(options_json, NULL, 1) : cJSON_CreateObject();
    if (!opts)
        return options_json && !sl__json_failed() ? sl__error(SL_EINVAL, "index options: not valid JSON")
                            : sl__oom("building an index");
    int rc = k->build_index(path, opts);
    cJSON_Delete(opts);
    return rc;
}
