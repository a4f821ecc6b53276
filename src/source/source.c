/*
 * source.c — the source interface's shared half: the registry of formats,
 * opening from a spec's source object, references, cursors, and the helpers
 * every implementation uses (columns, path lists). See source.h.
 */
#include "source/source.h"
#include "record/shard_set.h"

#include <assert.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* One line per format. The key is the source object's member that names the
 * format's input ({"tfrecord": [...]}); "path" is sluice's own .slr. */
const sl_source_format sl_source__kinds[] = {
    {"path", sl_source__open_slr, ".slr dataset (a directory with a manifest, or one .slr file)",
     "a .slr dataset", sl_source__sniff_slr, 0, NULL, &sl_source__slr_table},
    {"image_folder", sl_source__open_imagefolder,
     "a torchvision ImageFolder: ROOT/CLASS/IMAGE, read in place", "an ImageFolder",
     sl_source__sniff_imagefolder, 0, NULL, &sl_source__folder_table},
    {"idx", sl_source__open_idx, "IDX (MNIST-style) images and labels, plain or gzip",
     "an IDX file", sl_source__sniff_idx, 0, NULL, &sl_source__idx_table},
    {"webdataset", sl_source__open_webdataset,
     "WebDataset tar shards (a path, a brace pattern, a list or @listfile)", "a tar shard",
     sl_source__sniff_tar, 1, sl_source__index_tar, &sl_source__tar_table},
    {"tfrecord", sl_source__open_tfrecord, "TFRecord files of tf.train.Example / SequenceExample",
     "a TFRecord file", sl_source__sniff_tfrecord, 1, sl_source__index_tfrecord,
     &sl_source__tf_table},
    {"parquet", sl_source__open_parquet,
     "Apache Parquet files (pyarrow, Hugging Face datasets): one record a row", "a Parquet file",
     sl_source__sniff_parquet, 1, sl_source__index_parquet, &sl_source__pq_table},
    {"synthetic", sl_source__open_synthetic,
     "records computed from their index, nothing stored (simulation, tests)", NULL, NULL, 0, NULL,
     &sl_source__syn_table},
    {NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL},
};

/* Keys a source object may carry besides the kind key and the kind's own
 * options: these belong to the pipeline, not the source. */
static int pipeline_key(const char *k) {
    return !strcmp(k, "shuffle") || !strcmp(k, "shard") || !strcmp(k, "parallel") ||
           !strcmp(k, "chunk");
}

const sl_param sl_source__max_open_params[] = {
    {.key = "max_open_shards", .type = SL_PARAM_INT, .min = 1, .max = 1000000,
     .offset = offsetof(sl_source_shard_opts, max_open_shards),
     .doc = "shards held open at once (default: the source's own bound)"},
    {0}};

const sl_param sl_source__shard_params[] = {
    {.key = "index", .type = SL_PARAM_BOOL, .flags = SL_PARAM_OR_AUTO, .def = -1,
     .offset = offsetof(sl_source_shard_opts, index),
     .doc = "read each file's sidecar index: \"auto\" where there is one, true: it must be "
            "there, false: scan"},
    {.key = "", .type = SL_PARAM_INCLUDE, .fragment = sl_source__max_open_params},
    {0}};

int sl_source__read_options(const sl_param_table *t, const cJSON *obj, const char *field,
                            void *out) {
    static const char *const pipeline_keys[] = {"shuffle", "shard", "parallel", "chunk", NULL};
    if (cJSON_IsObject(obj))
        for (const cJSON *it = obj->child; it; it = it->next)
            if (!sl_params_find(t, it->string))
                return sl_params_unknown(t, field, it->string, pipeline_keys);
    return sl_params_read(t, obj, field, out);
}

/* Does a source's input value (a name, a pattern, a list of them) name a URL?
 * A path list file (@FILE) is not opened here: its names count as local. */
static int names_url(const cJSON *v) {
    if (cJSON_IsString(v))
        return sl_io__is_url(v->valuestring);
    if (cJSON_IsArray(v))
        for (const cJSON *it = v->child; it; it = it->next)
            if (names_url(it))
                return 1;
    return 0;
}

int sl_source__open_json(sl_source **out, const cJSON *obj, const char *field) {
    *out = NULL;
    if (!cJSON_IsObject(obj))
        return sl__error(SL_EINVAL, "%s: must be an object", field);
    const sl_source_format *found = NULL;
    for (const cJSON *it = obj->child; it; it = it->next) {
        for (const sl_source_format *k = sl_source__kinds; k->key; k++) {
            if (strcmp(it->string, k->key) != 0)
                continue;
            if (found)
                return sl__error(SL_EINVAL, "%s: names two inputs (\"%s\" and \"%s\"); give one",
                                 field, found->key, k->key);
            found = k;
        }
    }
    if (!found) {
        char keys[256] = "";
        size_t len = 0;
        for (const sl_source_format *k = sl_source__kinds; k->key; k++)
            len += (size_t)snprintf(keys + len, len < sizeof keys ? sizeof keys - len : 0,
                                    "%s\"%s\"", k == sl_source__kinds ? "" : ", ", k->key);
        return sl__error(SL_EINVAL, "%s: no input given (expected one of %s)", field, keys);
    }
    /* Hand the implementation its own keys only. */
    cJSON *own = cJSON_CreateObject();
    if (!own)
        return sl__oom("opening a source");
    for (const cJSON *it = obj->child; it; it = it->next) {
        if (pipeline_key(it->string))
            continue;
        int rc = sl__json_add(own, it->string, cJSON_Duplicate(it, 1));
        if (rc < 0) {
            cJSON_Delete(own);
            return rc;
        }
    }
    int rc = found->open(out, own, field);
    cJSON_Delete(own);
    if (rc == SL_OK && *out)
        (*out)->remote = names_url(cJSON_GetObjectItemCaseSensitive(obj, found->key));
    return rc;
}

void *sl_source__new(size_t size, const sl_source_vtbl *vt, const char *kind) {
    sl_source *s = sl__calloc(1, size);
    if (!s)
        return NULL;
    s->vt = vt;
    s->kind = kind;
    atomic_init(&s->refs, 1);
    return s;
}

sl_source *sl_source__retain(sl_source *s) {
    if (s)
        atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    return s;
}

void sl_source__release(sl_source *s) {
    if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    cJSON_Delete(s->meta);
    s->meta = NULL;
    sl_source__cursor_free(s, s->api_cursor);
    s->api_cursor = NULL;
    if (s->api_check) {
        sl_source__checker_dispose(s->api_check);
        sl__free(s->api_check);
        s->api_check = NULL;
    }
    s->vt->free(s);
}

int sl_source__heap_alloc(void *ctx, sl_tensor *t, sl_dtype dtype, int ndim,
                          const int64_t *shape) {
    (void)ctx;
    return sl_tensor_alloc(t, dtype, ndim, shape);
}

int sl_source__cursor_new(size_t size, const char *what, sl_source_cursor **out) {
    *out = sl__calloc(1, size);
    return *out ? SL_OK : sl__oom(what);
}

int sl_source__cursor_open(sl_source *s, sl_source_alloc_fn alloc, void *ctx,
                           sl_source_cursor **out) {
    *out = NULL;
    sl_source_cursor *c = NULL;
    if (s->vt->cursor_open)
        SL_TRY(s->vt->cursor_open(s, &c));
    else
        SL_TRY(sl_source__cursor_new(sizeof *c, "opening a source cursor", &c));
    c->alloc = alloc ? alloc : sl_source__heap_alloc;
    c->alloc_ctx = alloc ? ctx : NULL;
    *out = c;
    return SL_OK;
}

void sl_source__cursor_free(sl_source *s, sl_source_cursor *cur) {
    if (!cur)
        return;
    if (s->vt->cursor_free)
        s->vt->cursor_free(s, cur);
    else
        sl__free(cur);
}

int sl_source__read(sl_source *s, sl_source_cursor *cur, uint64_t i, sl_sample *out) {
    assert(i < s->count);
    out->ncols = 0;
    int rc = s->vt->read(s, cur, i, out);
    assert(rc < 0 ? out->ncols == 0 : out->ncols == (uint32_t)s->ncols);
    return rc;
}

int sl_source__read_cols(sl_source *s, sl_source_cursor *cur, uint64_t i, void *const *dst,
                         const size_t *bytes) {
    assert(i < s->count && s->vt->read_cols);
    return s->vt->read_cols(s, cur, i, dst, bytes);
}

void sl_source__locate(sl_source *s, uint64_t i, char *buf, size_t cap) {
    if (s->vt->locate)
        s->vt->locate(s, i, buf, cap);
    else
        snprintf(buf, cap, "%s: record %" PRIu64, s->name, i);
}

/* The text column that names a record, if the source has one: `path` (an
 * ImageFolder's, kept by pack) or `__key__` (a WebDataset sample's). */
static int name_column(const sl_source *s, const char **label) {
    static const char *const names[] = {"path", "__key__"};
    static const char *const labels[] = {"path", "key"};
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < s->ncols; c++)
            if (s->col[c].type == SL_COL_STRING && !strcmp(s->col[c].name, names[k])) {
                *label = labels[k];
                return c;
            }
    return -1;
}

void sl_source__where(sl_source *s, uint64_t i, const sl_sample *smp, char *buf, size_t cap) {
    sl_source__locate(s, i, buf, cap);
    const char *label = NULL;
    int c = name_column(s, &label);
    if (c < 0 || i >= s->count)
        return;
    /* The caller's message (the cause) is this thread's; a read here must
     * not replace it. */
    char saved[SL__ERRMSG_MAX];
    snprintf(saved, sizeof saved, "%s", sl_errmsg());
    sl_source_cursor *cur = NULL;
    sl_sample own;
    memset(&own, 0, sizeof own);
    const sl_tensor *t = NULL;
    if (smp && (int)smp->ncols == s->ncols && smp->index == i) {
        t = &smp->col[c];
    } else if (sl_source__cursor_open(s, sl_source__heap_alloc, NULL, &cur) == SL_OK &&
               sl_source__read(s, cur, i, &own) == SL_OK) {
        t = &own.col[c];
    }
    if (t && t->data && t->ndim == 1 && t->shape[0] > 0) {
        /* one line, printable: control bytes become '?' */
        char name[201];
        size_t n = (size_t)t->shape[0] < sizeof name - 1 ? (size_t)t->shape[0] : sizeof name - 1;
        for (size_t k = 0; k < n; k++) {
            unsigned char ch = ((const unsigned char *)t->data)[k];
            name[k] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
        }
        name[n] = '\0';
        size_t len = strlen(buf);
        if (!strstr(buf, name) && len + 1 < cap) /* an ImageFolder's location has it */
            snprintf(buf + len, cap - len, " (%s %s)", label, name);
    }
    sl_sample_clear(&own);
    if (cur)
        sl_source__cursor_free(s, cur);
    sl__seterrmsg(saved);
}

int sl_source__add_col(sl_source *s, const char *name, sl_coltype type, sl_dtype dtype,
                       int ndim, const int64_t *shape) {
    if (!name || !name[0] || strlen(name) >= SL_COLNAME_MAX)
        return sl__error(SL_EINVAL, "column name '%s' must be 1-%d bytes", name ? name : "",
                         SL_COLNAME_MAX - 1);
    if (s->ncols >= SL_MAX_COLUMNS)
        return sl__error(SL_EINVAL, "too many columns (at most %d); select fewer", SL_MAX_COLUMNS);
    for (int c = 0; c < s->ncols; c++)
        if (!strcmp(s->col[c].name, name))
            return sl__error(SL_EINVAL, "column '%s' appears twice", name);
    if (type == SL_COL_ARRAY && (ndim < 0 || ndim > SL_MAX_DIMS))
        return sl__error(SL_EINVAL, "column '%s': %d dims (at most %d)", name, ndim, SL_MAX_DIMS);
    sl_source_col *c = &s->col[s->ncols];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->type = type;
    switch (type) {
    case SL_COL_INT64:
        c->dtype = SL_I64;
        break;
    case SL_COL_FLOAT64:
        c->dtype = SL_F64;
        break;
    case SL_COL_STRING:
    case SL_COL_BYTES:
        c->dtype = SL_U8;
        c->ndim = 1;
        c->shape[0] = -1;
        break;
    default:
        c->dtype = dtype;
        c->ndim = ndim;
        for (int d = 0; d < ndim; d++)
            c->shape[d] = shape ? shape[d] : -1;
        break;
    }
    s->ncols++;
    return SL_OK;
}

/* ---- path lists ----------------------------------------------------------------- */

typedef struct pathlist {
    char **v;
    int n;
    size_t cap;
} pathlist;

#define SL_SOURCE_MAX_PATHS (1 << 20)

static int pl_add(pathlist *pl, const char *p, size_t len, const char *field) {
    if (pl->n + 1 >= SL_SOURCE_MAX_PATHS)
        return sl__error(SL_ELIMIT, "%s: more than %d paths", field, SL_SOURCE_MAX_PATHS);
    SL_TRY(sl__grow((void **)&pl->v, &pl->cap, (size_t)pl->n + 2, sizeof *pl->v, 16,
                    "listing source paths"));
    pl->v[pl->n] = NULL; /* still a list sl_source__free_paths can walk */
    char *s = sl__malloc(len + 1);
    if (!s)
        return sl__oom("listing source paths");
    memcpy(s, p, len);
    s[len] = '\0';
    pl->v[pl->n++] = s;
    pl->v[pl->n] = NULL;
    return SL_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Is v[i] "X.slidx" with X also among v[0..n) (sorted)? A sidecar index
 * beside its data file is read by that file, not an input of its own. */
static int listed_sidecar(char *const *v, int n, int i) {
    static const char sfx[] = ".slidx";
    size_t len = strlen(v[i]), sl = sizeof sfx - 1;
    if (len <= sl || strcmp(v[i] + len - sl, sfx) != 0)
        return 0;
    char key[4096];
    if (len - sl >= sizeof key)
        return 0;
    memcpy(key, v[i], len - sl);
    key[len - sl] = '\0';
    const char *k = key;
    return bsearch(&k, v, (size_t)n, sizeof *v, cmp_str) != NULL;
}

/* Add the sorted names v[0..n) but the sidecar indexes among them. */
static int add_sorted_files(pathlist *pl, char *const *v, int n, const char *field) {
    for (int i = 0; i < n; i++)
        if (!listed_sidecar(v, n, i))
            SL_TRY(pl_add(pl, v[i], strlen(v[i]), field));
    return SL_OK;
}

int sl_source__list_folder(const char *dir, char ***files_out, int *n_out, int *subdirs_out) {
    *files_out = NULL;
    *n_out = 0;
    *subdirs_out = 0;
    DIR *d = opendir(dir);
    if (!d)
        return sl__error(SL_EIO, "%s: cannot list the folder: %s", dir, strerror(errno));
    pathlist all = {0};
    size_t dl = strlen(dir);
    int sep = dl && dir[dl - 1] != '/';
    int rc = SL_OK;
    struct dirent *e;
    char full[4096];
    while (rc == SL_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') /* ".", "..", hidden files (".complete") */
            continue;
        int n = snprintf(full, sizeof full, "%s%s%s", dir, sep ? "/" : "", e->d_name);
        if (n < 0 || (size_t)n >= sizeof full) {
            rc = sl__error(SL_EINVAL, "%s: path too long in the folder", dir);
            break;
        }
        struct stat st;
        if (stat(full, &st) != 0)
            continue; /* a dangling link: not an input */
        if (S_ISDIR(st.st_mode))
            (*subdirs_out)++;
        else if (S_ISREG(st.st_mode))
            rc = pl_add(&all, full, (size_t)n, dir);
    }
    closedir(d);
    if (rc < 0) {
        sl_source__free_paths(all.v);
        return rc;
    }
    if (all.n)
        qsort(all.v, (size_t)all.n, sizeof *all.v, cmp_str);
    pathlist pl = {0};
    rc = add_sorted_files(&pl, all.v, all.n, dir);
    sl_source__free_paths(all.v);
    if (rc < 0) {
        sl_source__free_paths(pl.v);
        return rc;
    }
    *files_out = pl.v;
    *n_out = pl.n;
    return SL_OK;
}

/* A folder given as an input list: its files, sorted by name (the
 * sidecar indexes beside them and hidden files left out). */
static int expand_folder(pathlist *pl, const char *dir, const char *field) {
    char **v;
    int n, subdirs;
    SL_TRY(sl_source__list_folder(dir, &v, &n, &subdirs));
    int rc = SL_OK;
    if (n == 0)
        rc = sl__error(SL_EINVAL, "%s: the folder %s holds no files%s", field, dir,
                       subdirs ? " (only folders: an ImageFolder is read with the "
                                 "\"image_folder\" source, sluice.image_folder() in Python)"
                               : "");
    for (int i = 0; rc == SL_OK && i < n; i++)
        rc = pl_add(pl, v[i], strlen(v[i]), field);
    sl_source__free_paths(v);
    return rc;
}

/* A shell pattern ('shard-*.tar'): the files it matches, sorted, through
 * the C library's glob(3). */
static int expand_glob(pathlist *pl, const char *pat, const char *field) {
    glob_t g;
    memset(&g, 0, sizeof g);
    int grc = glob(pat, GLOB_MARK, NULL, &g);
    int rc = SL_OK;
    if (grc == GLOB_NOMATCH)
        rc = sl__error(SL_EIO, "%s: no file matches '%s'", field, pat);
    else if (grc == GLOB_NOSPACE)
        rc = sl__oom("expanding a path pattern");
    else if (grc != 0)
        rc = sl__error(SL_EIO, "%s: cannot read a folder of '%s'", field, pat);
    if (rc == SL_OK) {
        /* GLOB_MARK ends folders with '/': the pattern names files */
        char **files = sl__calloc(g.gl_pathc + 1, sizeof *files);
        int n = 0;
        if (!files)
            rc = sl__oom("expanding a path pattern");
        for (size_t i = 0; rc == SL_OK && i < g.gl_pathc; i++) {
            size_t len = strlen(g.gl_pathv[i]);
            if (len && g.gl_pathv[i][len - 1] != '/')
                files[n++] = g.gl_pathv[i];
        }
        if (rc == SL_OK && n == 0)
            rc = sl__error(SL_EIO, "%s: '%s' matches only folders, no file", field, pat);
        if (rc == SL_OK)
            rc = add_sorted_files(pl, files, n, field);
        sl__free(files);
    }
    globfree(&g);
    return rc;
}

int sl_source__is_pattern(const char *p) {
    return p[0] == '@' || strchr(p, '{') || strpbrk(p, "*?[");
}

/* One name after brace expansion: a local shell pattern stands for the
 * files it matches (a file that exists under the very name, '*' and all, is
 * that file), and a name given as it is (`lone`: not made by a brace range,
 * so a range of 100,000 shards costs no stat per name) that is a local
 * folder, for its files. */
static int add_leaf(pathlist *pl, const char *p, const char *field, int lone) {
    if (sl_io__is_url(p))
        return pl_add(pl, p, strlen(p), field);
    struct stat st;
    if (strpbrk(p, "*?["))
        return stat(p, &st) == 0 && !S_ISDIR(st.st_mode) ? pl_add(pl, p, strlen(p), field)
                                                         : expand_glob(pl, p, field);
    if (lone && stat(p, &st) == 0 && S_ISDIR(st.st_mode))
        return expand_folder(pl, p, field);
    return pl_add(pl, p, strlen(p), field);
}

/* Expand the first brace group of `pat` (recursively the rest): "{a,b}" lists,
 * "{000..127}" zero-padded numeric ranges (padding from the first bound). */
static int expand_braces(pathlist *pl, const char *pat, const char *field, int depth, int lone) {
    const char *open = strchr(pat, '{');
    if (!open)
        return add_leaf(pl, pat, field, lone && depth == 0);
    if (depth > 8)
        return sl__error(SL_EINVAL, "%s: too many brace groups in '%s'", field, pat);
    const char *close = strchr(open, '}');
    if (!close)
        return sl__error(SL_EINVAL, "%s: '{' without '}' in '%s'", field, pat);
    size_t pre = (size_t)(open - pat);
    const char *body = open + 1;
    size_t blen = (size_t)(close - body);
    const char *rest = close + 1;
    size_t restlen = strlen(rest);
    const char *dots = NULL;
    for (size_t i = 0; i + 1 < blen; i++)
        if (body[i] == '.' && body[i + 1] == '.') {
            dots = body + i;
            break;
        }
    char buf[4096];
    if (dots) {
        const char *a = body, *b = dots + 2;
        size_t alen = (size_t)(dots - body), bl = (size_t)(close - b);
        int ok = alen > 0 && bl > 0 && alen < 20 && bl < 20;
        for (size_t i = 0; ok && i < alen; i++)
            ok = isdigit((unsigned char)a[i]);
        for (size_t i = 0; ok && i < bl; i++)
            ok = isdigit((unsigned char)b[i]);
        if (!ok)
            return sl__error(SL_EINVAL, "%s: '{%.*s}' in '%s' is not a range of numbers like "
                             "{000..127}", field, (int)blen, body, pat);
        unsigned long long lo = strtoull(a, NULL, 10), hi = strtoull(b, NULL, 10);
        if (lo > hi)
            return sl__error(SL_EINVAL, "%s: range {%.*s} in '%s' runs backwards", field,
                             (int)blen, body, pat);
        if (hi - lo >= SL_SOURCE_MAX_PATHS)
            return sl__error(SL_ELIMIT, "%s: range {%.*s} is too long", field, (int)blen, body);
        int width = alen > 1 && a[0] == '0' ? (int)alen : 1;
        for (unsigned long long v = lo; v <= hi; v++) {
            int n = snprintf(buf, sizeof buf, "%.*s%0*llu%s", (int)pre, pat, width, v, rest);
            if (n < 0 || (size_t)n >= sizeof buf)
                return sl__error(SL_EINVAL, "%s: path too long in '%s'", field, pat);
            SL_TRY(expand_braces(pl, buf, field, depth + 1, 0));
        }
        return SL_OK;
    }
    const char *item = body;
    for (;;) {
        const char *comma = memchr(item, ',', (size_t)(close - item));
        const char *end = comma ? comma : close;
        int n = snprintf(buf, sizeof buf, "%.*s%.*s%.*s", (int)pre, pat, (int)(end - item), item,
                         (int)restlen, rest);
        if (n < 0 || (size_t)n >= sizeof buf)
            return sl__error(SL_EINVAL, "%s: path too long in '%s'", field, pat);
        SL_TRY(expand_braces(pl, buf, field, depth + 1, 0));
        if (!comma)
            break;
        item = comma + 1;
    }
    return SL_OK;
}

/* "@list.txt": one path a line; blank lines and '#' comments skipped;
 * relative paths are taken relative to the list file's directory. */
static int read_list_file(pathlist *pl, const char *path, const char *field) {
    FILE *f = fopen(path, "r");
    if (!f)
        return sl__error(SL_EIO, "%s: cannot open the path list %s: %s", field, path,
                         strerror(errno));
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    char line[4096], full[8192];
    int rc = SL_OK;
    while (rc == SL_OK && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
            line[--n] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '#')
            continue;
        if (*p != '/' && dirlen && !sl_io__is_url(p)) {
            snprintf(full, sizeof full, "%.*s%s", (int)dirlen, path, p);
            rc = pl_add(pl, full, strlen(full), field);
        } else {
            rc = pl_add(pl, p, strlen(p), field);
        }
    }
    if (rc == SL_OK && ferror(f))
        rc = sl__error(SL_EIO, "%s: reading the path list %s failed", field, path);
    fclose(f);
    return rc;
}

static int expand_one(pathlist *pl, const char *s, const char *field, int lone) {
    if (!s[0])
        return sl__error(SL_EINVAL, "%s: empty path", field);
    if (s[0] == '@')
        return read_list_file(pl, s + 1, field);
    size_t n = strlen(s);
    if (!strncmp(s, "s3://", 5) && s[n - 1] == '/') { /* a prefix: its objects */
        char **v;
        int k;
        SL_TRY(sl_io__list(s, &v, &k));
        int rc = SL_OK;
        for (int i = 0; rc == SL_OK && i < k; i++)
            rc = pl_add(pl, v[i], strlen(v[i]), field);
        sl_source__free_paths(v);
        return rc;
    }
    return expand_braces(pl, s, field, 0, lone);
}

int sl_source__string_list(const cJSON *v, const char *field, char ***out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    pathlist pl = {0};
    int rc = SL_OK;
    for (const cJSON *it = v ? v->child : NULL; it && rc == SL_OK; it = it->next)
        rc = cJSON_IsString(it) ? pl_add(&pl, it->valuestring, strlen(it->valuestring), field)
                                : sl__error(SL_EINVAL, "%s: every item must be a string", field);
    if (rc < 0) {
        sl_source__free_paths(pl.v);
        return rc;
    }
    *out = pl.v;
    *n_out = pl.n;
    return SL_OK;
}

int sl_source__expand_paths(const cJSON *v, const char *field, char ***paths_out, int *n_out) {
    *paths_out = NULL;
    *n_out = 0;
    pathlist pl = {0};
    int rc = SL_OK;
    if (cJSON_IsString(v)) {
        rc = expand_one(&pl, v->valuestring, field, 1);
    } else if (cJSON_IsArray(v)) {
        for (const cJSON *it = v->child; it && rc == SL_OK; it = it->next) {
            if (!cJSON_IsString(it))
                rc = sl__error(SL_EINVAL, "%s: every path must be a string", field);
            else
                rc = expand_one(&pl, it->valuestring, field, 1);
        }
    } else {
        rc = sl__error(SL_EINVAL, "%s: must be a path, a pattern or a list of paths", field);
    }
    if (rc == SL_OK && pl.n == 0)
        rc = sl__error(SL_EINVAL, "%s: no paths given", field);
    if (rc < 0) {
        sl_source__free_paths(pl.v);
        return rc;
    }
    *paths_out = pl.v;
    *n_out = pl.n;
    return SL_OK;
}

void sl_source__free_paths(char **paths) {
    if (!paths)
        return;
    for (char **p = paths; *p; p++)
        sl__free(*p);
    sl__free(paths);
}

int sl_source__describe_paths(cJSON *obj, const char *key, int n,
                              const char *(*path)(const void *ctx, int k), const void *ctx) {
    cJSON *arr = cJSON_AddArrayToObject(obj, key);
    if (!arr)
        return sl__oom("describing a source");
    for (int k = 0; k < n; k++) {
        cJSON *p = cJSON_CreateString(path(ctx, k));
        if (!p)
            return sl__oom("describing a source");
        cJSON_AddItemToArray(arr, p);
    }
    return SL_OK;
}

int sl_source__shard_get(sl_shard_set *set, int k, const char *name, uint64_t r,
                         void **state) {
    int rc = sl_shard_set__get(set, k, state);
    if (rc < 0)
        return sl__error_prefix(rc, "%s: record %" PRIu64, name, r);
    return rc;
}

void sl_source__ivals_init(sl_source_ivals *iv) {
    memset(iv, 0, sizeof *iv);
    pthread_mutex_init(&iv->mu, NULL);
}

static void ivals_free(sl_source_ivals *iv) {
    for (int c = 0; c < SL_MAX_COLUMNS; c++) {
        sl__free(iv->vals[c]);
        iv->vals[c] = NULL;
    }
}

static int ivals_make(sl_source_ivals *iv, sl_source *src, sl_source_ivals_fill fill) {
    for (int c = 0; c < src->ncols; c++) {
        if (!src->col[c].indexed)
            continue;
        iv->vals[c] = sl__calloc((size_t)src->count, sizeof(int64_t)); /* (0 records: 1) */
        if (!iv->vals[c])
            return sl__oom("reading a source's indexed values");
    }
    return fill(src, iv->vals);
}

int sl_source__ivals_get(sl_source_ivals *iv, sl_source *src, sl_source_ivals_fill fill, int col,
                         const void **vals_out) {
    *vals_out = NULL;
    int rc = SL_OK;
    pthread_mutex_lock(&iv->mu);
    if (!iv->done) {
        rc = ivals_make(iv, src, fill);
        if (rc == SL_OK)
            iv->done = 1;
        else
            ivals_free(iv); /* asked again: tried again */
    }
    pthread_mutex_unlock(&iv->mu);
    SL_TRY(rc);
    *vals_out = col >= 0 && col < src->ncols ? iv->vals[col] : NULL;
    return SL_OK;
}

void sl_source__ivals_dispose(sl_source_ivals *iv) {
    pthread_mutex_destroy(&iv->mu);
    ivals_free(iv);
}
