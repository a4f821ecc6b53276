/*
 * source_parquet.c — Apache Parquet files (pyarrow's, Hugging Face
 * `datasets`' shards) behind the source interface. docs/SOURCES.md,
 * "Parquet", is the user's page.
 *
 * A file is "PAR1", column chunks grouped in row groups, the footer
 * (FileMetaData, Thrift compact: parquet_thrift.c), a 4-byte footer length
 * and "PAR1". A record is a row; the records of all files are numbered in
 * the order given, file after file, row group after row group.
 *
 * Opening reads each file's footer only: a local file is mapped, a remote
 * one (http(s)://, s3://) opened with SL_IO_EDGES, so its last 256 KiB (the
 * footer, for any file written with ordinary row groups) come with the open
 * in one request. The schema becomes the columns (leaves flattened with
 * dots; a list of numbers one column; a Hugging Face Image struct's bytes
 * one column named after the struct), and the key "huggingface" of the file
 * metadata gives ClassLabel names (meta "classes").
 *
 * Reading: a row group is the unit of I/O and decoding. The first read of a
 * row in row group k reads the selected columns' chunks (a slice of the
 * mapping, or one range request each), checks their pages, decompresses
 * and decodes them (parquet_column.c) into one block, and keeps that block
 * in a bounded cache of decoded row groups (src/record/shard_set.c: opened
 * once however many threads ask, least recently used dropped first, a
 * failure remembered, an allocation failure not). A read then hands out
 * views into the block, each holding a reference to it, so a column is never
 * copied and a block dropped from the cache lives while a batch uses it.
 *
 * Invariants:
 *  1. After open, everything here but the cache is read-only: reads run on
 *     many threads, each through its own cursor (the plain one).
 *  2. Every chunk's byte range lies inside its file (checked against the
 *     file's size before it is read), and every column of every file has the
 *     physical type and nesting of the first file's column of that name.
 *  3. A value that cannot be given faithfully (an integer null, a list with
 *     a null element, an unsupported encoding met in a page) fails the read
 *     of that row with a message naming the file, the row, the column and
 *     the cause; never a made-up value.
 *  4. The cache holds at most cache_rgs decoded row groups (more only while
 *     that many are being read at once), cache_rgs * the largest row group's
 *     decoded estimate <= cache_bytes when cache_bytes allows two; the source
 *     reports cache_bytes as memory it holds (held_bytes).
 */
#include "record/shard_set.h"
#include "source/parquet_format.h"
#include "source/source.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PQ_MAGIC "PAR1"
#define PQ_DEFAULT_CACHE ((uint64_t)512 << 20)
#define PQ_MAX_LEAVES 4096

/* A leaf of a file's schema, as a column would read it. */
typedef struct pq_lf {
    char name[SL_COLNAME_MAX];   /* the column's default name */
    char path[256];              /* every schema name on the way, dotted ("image.bytes",
                                    "tokens.list.element") */
    char alias[SL_COLNAME_MAX];  /* another name it answers to ("image.bytes" for a
                                    Hugging Face Image's bytes named "image"), or "" */
    pq_leaf dec;
    int chunk;                   /* its column chunk's position in a row group */
    int list;                    /* a list column (max_rep 1) */
    int string;                  /* BYTE_ARRAY annotated as text */
    int image;                   /* the bytes of a Hugging Face Image */
    int fp16;                    /* FIXED_LEN_BYTE_ARRAY(2) FLOAT16 */
    char why[160];               /* not "": why it is not a column (unsupported) */
} pq_lf;

typedef struct pq_file {
    char *path;
    const char *name;            /* for messages: a base name, or the URL */
    sl_io *io;
    const uint8_t *map;          /* local: the mapping; remote: NULL (ranges) */
    sl_buffer *mapbuf;           /* local: the mapping as a buffer that byte-array
                                    views reference (its last release closes io) */
    uint64_t size;
    uint8_t *footer;             /* the footer's bytes (meta points into them) */
    pq_meta meta;
    pq_lf *lf;
    int nlf;
    int chunk[SL_MAX_COLUMNS];   /* per source column: its chunk in a row group */
    uint64_t first;              /* first record */
} pq_file;

typedef struct pq_rgref {
    uint64_t first;              /* first record */
    int file, rg;
    int64_t nrows;
} pq_rgref;

/* A decoded row group: what the cache holds and views reference. */
typedef struct pq_block {
    sl_buffer *buf;              /* wraps this block; its last release frees it */
    sl_buffer *map;              /* a local file's mapping, which byte arrays of
                                    uncompressed pages point into (a reference) */
    int ncols;
    pq_dcol col[SL_MAX_COLUMNS];
} pq_block;

typedef struct pq_source {
    sl_source base;
    int nfiles;
    pq_file *files;
    int nrg;
    pq_rgref *rgs;
    int leaf[SL_MAX_COLUMNS];    /* source column -> leaf of files[0] */
    int verify;
    uint64_t cache_bytes;
    int cache_rgs;
    uint64_t est_max_rg;         /* the largest row group's decoded estimate */
    sl_shard_set *cache;
    sl_source_ivals ivals;
    uint32_t codecs;             /* bit c: codec c is used by a selected chunk */
    int hf;                      /* a file has Hugging Face metadata */
} pq_source;

/* ---- options ---------------------------------------------------------------------- */

typedef struct {
    int verify;
    uint64_t cache_bytes;
} pq_opts;

static const sl_param pq_params[] = {
    {.key = "parquet", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE,
     .doc = "the files: a path, a folder, a pattern, @LIST, a URL or a list"},
    {.key = "columns", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE,
     .doc = "the columns to read: a list of names, or {\"name\": \"new name\"} (default: all)"},
    {.key = "features", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE,
     .flags = SL_PARAM_HIDDEN, .doc = "the same as columns (the command's --features)"},
    {.key = "verify", .type = SL_PARAM_BOOL, .def = 1, .offset = offsetof(pq_opts, verify),
     .doc = "check the CRC of every page that has one"},
    {.key = "cache_bytes", .type = SL_PARAM_BYTES, .min = 0, .max = -1,
     .def = (double)PQ_DEFAULT_CACHE, .offset = offsetof(pq_opts, cache_bytes),
     .doc = "memory for decoded row groups kept for later reads (default 512M)"},
    {0}};

const sl_param_table sl_source__pq_table = {pq_params, "a parquet source", NULL, 0, 0};

/* ---- the schema ------------------------------------------------------------------- */

/* Hugging Face `datasets` writes its features as JSON under the file
 * metadata key "huggingface": {"info": {"features": {NAME: {"_type":
 * "Image"} | {"_type": "ClassLabel", "names": [...]}, ...}}}. */
static const cJSON *hf_features(const cJSON *hf) {
    const cJSON *info = cJSON_GetObjectItemCaseSensitive(hf, "info");
    return cJSON_GetObjectItemCaseSensitive(info, "features");
}

static const char *hf_type(const cJSON *feats, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(feats, name);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "_type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

typedef struct walk {
    const pq_meta *m;
    pq_lf *lf;
    int nlf, cap;
    int pos;
    const cJSON *hf_feats;
    const char *file;
} walk;

static int is_list_node(const pq_schema_el *e) {
    return e->converted == PQ_CT_LIST || e->logical == PQ_LT_LIST;
}
static int is_map_node(const pq_schema_el *e) {
    return e->converted == PQ_CT_MAP || e->converted == PQ_CT_MAP_KEY_VALUE ||
           e->logical == PQ_LT_MAP;
}

static void lf_unsupported(pq_lf *l, const char *fmt, ...) SL_PRINTF(2, 3);
static void lf_unsupported(pq_lf *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->why, sizeof l->why, fmt, ap);
    va_end(ap);
}

static const char *type_name(int t) {
    static const char *const n[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE",
                                    "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
    return t >= 0 && t < 8 ? n[t] : "an unknown type";
}

/* How a leaf's values become a column's (its out kind), or why they cannot. */
static void leaf_kind(pq_lf *l, const pq_schema_el *e) {
    pq_leaf *d = &l->dec;
    d->type = e->type;
    d->type_length = e->type_length;
    int lt = e->logical, ct = e->converted;
    if (lt == PQ_LT_DECIMAL || ct == PQ_CT_DECIMAL)
        return lf_unsupported(l, "DECIMAL values are not supported");
    if (ct == PQ_CT_INTERVAL)
        return lf_unsupported(l, "INTERVAL values are not supported");
    switch (e->type) {
    case PQ_BOOLEAN:
        d->out = PQ_OUT_BOOL;
        break;
    case PQ_INT32:
        d->out = PQ_OUT_I64;
        d->is_unsigned = ct == PQ_CT_UINT_8 || ct == PQ_CT_UINT_16 || ct == PQ_CT_UINT_32 ||
                         (lt == PQ_LT_INTEGER && !e->int_signed);
        break;
    case PQ_INT64:
        d->out = ct == PQ_CT_UINT_64 || (lt == PQ_LT_INTEGER && !e->int_signed) ? PQ_OUT_U64
                                                                               : PQ_OUT_I64;
        break;
    case PQ_FLOAT:
        d->out = PQ_OUT_F32;
        break;
    case PQ_DOUBLE:
        d->out = PQ_OUT_F64;
        break;
    case PQ_BYTE_ARRAY:
        d->out = PQ_OUT_BIN;
        l->string = ct == PQ_CT_UTF8 || ct == PQ_CT_JSON || ct == PQ_CT_ENUM ||
                    lt == PQ_LT_STRING || lt == PQ_LT_JSON || lt == PQ_LT_ENUM;
        break;
    case PQ_FIXED_LEN_BYTE_ARRAY:
        if (e->type_length <= 0 || e->type_length > (1 << 20))
            return lf_unsupported(l, "FIXED_LEN_BYTE_ARRAY of %d bytes", e->type_length);
        d->out = PQ_OUT_FIXED;
        l->fp16 = lt == PQ_LT_FLOAT16 && e->type_length == 2;
        break;
    case PQ_INT96:
        return lf_unsupported(l, "INT96 (legacy timestamps) is not supported; write timestamps "
                                 "as INT64 (pyarrow: use_deprecated_int96_timestamps=False)");
    default:
        return lf_unsupported(l, "physical type %d is not supported", e->type);
    }
    if (l->list && d->out != PQ_OUT_I64 && d->out != PQ_OUT_U64 && d->out != PQ_OUT_F64 &&
        d->out != PQ_OUT_F32 && d->out != PQ_OUT_BOOL && !l->fp16)
        lf_unsupported(l, "a list of %s%s is not supported (lists of numbers are)",
                       type_name(e->type), l->string ? " (strings)" : "");
}

/* Walk the subtree at w->pos (depth-first, as the schema list is laid out). */
static int walk_node(walk *w, int depth, int def, int rep, int list_def, const char *name,
                     const char *path, int parent_list, int parent_rep_wrap, int in_map,
                     int top) {
    if (w->pos >= w->m->nschema)
        return sl__error(SL_ECORRUPT, "%s: footer: schema: num_children runs past the last "
                         "element", w->file);
    if (depth > PQ_MAX_DEPTH)
        return sl__error(SL_ECORRUPT, "%s: footer: schema nested deeper than %d", w->file,
                         PQ_MAX_DEPTH);
    const pq_schema_el *e = &w->m->schema[w->pos++];
    int d2 = def + (e->repetition != PQ_REQUIRED);
    int r2 = rep + (e->repetition == PQ_REPEATED);
    int ld = e->repetition == PQ_REPEATED ? d2 : list_def;
    char nm[SL_COLNAME_MAX * 2], pt[256];
    /* the wrapper groups of a list (LIST -> repeated "list" -> "element") add
     * nothing to the column's name */
    int hide = (parent_list && e->repetition == PQ_REPEATED) || parent_rep_wrap;
    if (hide)
        snprintf(nm, sizeof nm, "%s", name);
    else
        snprintf(nm, sizeof nm, "%s%s%.*s", name, name[0] ? "." : "", (int)e->name.n,
                 (const char *)e->name.p);
    snprintf(pt, sizeof pt, "%s%s%.*s", path, path[0] ? "." : "", (int)e->name.n,
             (const char *)e->name.p);
    if (e->num_children > 0) {
        int n = e->num_children;
        int rep_wrap = parent_list && e->repetition == PQ_REPEATED && n == 1;
        int map = in_map || is_map_node(e);
        /* a Hugging Face Image (struct<bytes: binary, path: string>) */
        const char *hft = top && w->hf_feats ? hf_type(w->hf_feats, nm) : NULL;
        int first = w->nlf;
        for (int k = 0; k < n; k++)
            SL_TRY(walk_node(w, depth + 1, d2, r2, ld, nm, pt, is_list_node(e), rep_wrap, map, 0));
        if (top && w->nlf - first == 2) {
            pq_lf *a = &w->lf[first], *b = &w->lf[first + 1];
            int is_img = (hft && !strcmp(hft, "Image")) ||
                         (!hft && a->dec.type == PQ_BYTE_ARRAY && !a->string &&
                          b->dec.type == PQ_BYTE_ARRAY && !strcmp(a->name + strlen(nm), ".bytes") &&
                          !strcmp(b->name + strlen(nm), ".path"));
            if (is_img && !strcmp(a->name + strlen(nm), ".bytes") && !a->why[0]) {
                snprintf(a->alias, sizeof a->alias, "%s", a->name);
                snprintf(a->name, sizeof a->name, "%s", nm);
                a->image = 1;
            }
        }
        return SL_OK;
    }
    if (w->nlf >= PQ_MAX_LEAVES)
        return sl__error(SL_ELIMIT, "%s: more than %d leaf columns", w->file, PQ_MAX_LEAVES);
    pq_lf *l = sl__append_zeroed((void **)&w->lf, (size_t)w->nlf, sizeof *l,
                                 "reading a Parquet schema");
    if (!l)
        return SL_ENOMEM;
    l->chunk = w->nlf++;
    if (strlen(nm) >= SL_COLNAME_MAX)
        lf_unsupported(l, "the name is longer than %d bytes", SL_COLNAME_MAX - 1);
    snprintf(l->name, sizeof l->name, "%.*s", SL_COLNAME_MAX - 1, nm);
    snprintf(l->path, sizeof l->path, "%s", pt);
    l->dec.max_def = d2;
    l->dec.max_rep = r2;
    l->dec.list_def = ld;
    l->list = r2 == 1;
    if (!e->has_type)
        return sl__error(SL_ECORRUPT, "%s: footer: schema: leaf '%s' has no type", w->file, pt);
    if (!l->why[0]) {
        if (in_map)
            lf_unsupported(l, "maps are not supported");
        else if (r2 > 1)
            lf_unsupported(l, "nested lists are not supported (a list of numbers is)");
        else if (r2 == 1 && !(e->repetition == PQ_REPEATED || parent_rep_wrap))
            lf_unsupported(l, "a list of structs is not supported (a list of numbers is)");
        else
            leaf_kind(l, e);
    }
    return SL_OK;
}

/* The leaves of file f's schema. */
static int read_schema(pq_file *f, const cJSON *hf_feats) {
    const pq_meta *m = &f->meta;
    walk w = {.m = m, .hf_feats = hf_feats, .file = f->name};
    const pq_schema_el *root = &m->schema[0];
    if (root->num_children <= 0)
        return sl__error(SL_ECORRUPT, "%s: footer: the schema has no columns", f->name);
    w.pos = 1;
    int rc = SL_OK;
    for (int k = 0; k < root->num_children && rc == SL_OK; k++)
        rc = walk_node(&w, 1, 0, 0, 0, "", "", 0, 0, 0, 1);
    if (rc == SL_OK && w.pos != m->nschema)
        rc = sl__error(SL_ECORRUPT, "%s: footer: schema: %d elements, %d used by the tree",
                       f->name, m->nschema, w.pos);
    for (int g = 0; rc == SL_OK && g < m->nrg; g++)
        if (m->rg[g].ncols != w.nlf)
            rc = sl__error(SL_ECORRUPT, "%s: footer: row group %d has %d column chunks for %d "
                           "leaf columns", f->name, g, m->rg[g].ncols, w.nlf);
    if (rc < 0) {
        sl__free(w.lf);
        return rc;
    }
    f->lf = w.lf;
    f->nlf = w.nlf;
    return SL_OK;
}

/* ---- opening a file: its footer ---------------------------------------------------- */

static int read_bytes(pq_file *f, uint64_t off, size_t n, uint8_t *dst) {
    if (f->map) {
        memcpy(dst, f->map + off, n);
        return SL_OK;
    }
    return sl_io__read(f->io, dst, n, off);
}

static void close_io(void *io) { sl_io__close(io); }

static int open_footer(pq_file *f) {
    int remote = sl_io__is_url(f->path);
    SL_TRY(sl_io__open(&f->io, f->path, remote ? SL_IO_EDGES : SL_IO_MAP));
    f->size = sl_io__size(f->io);
    f->map = sl_io__map(f->io);
    if (f->map)
        SL_TRY(sl_buffer_wrap(&f->mapbuf, (void *)(uintptr_t)f->map, (size_t)f->size,
                              close_io, f->io));
    if (f->size < 12)
        return sl__error(SL_ECORRUPT, "%s: %" PRIu64 " bytes: too short for a Parquet file (12 "
                         "bytes of magic and footer length at least)", f->name, f->size);
    uint8_t head[4], tail[8];
    SL_TRY(read_bytes(f, 0, 4, head));
    SL_TRY(read_bytes(f, f->size - 8, 8, tail));
    if (memcmp(head, PQ_MAGIC, 4))
        return sl__error(SL_ECORRUPT, "%s: does not start with PAR1: not a Parquet file", f->name);
    if (!memcmp(tail + 4, "PARE", 4))
        return sl__error(SL_EUNSUPPORTED, "%s: an encrypted Parquet file (footer in PARE mode); "
                         "encryption is not supported", f->name);
    if (memcmp(tail + 4, PQ_MAGIC, 4))
        return sl__error(SL_ECORRUPT, "%s: does not end with PAR1: truncated, or still being "
                         "written", f->name);
    uint32_t flen = sl__ld32(tail);
    if (flen == 0 || (uint64_t)flen > f->size - 12 || flen > PQ_MAX_FOOTER)
        return sl__error(SL_ECORRUPT, "%s: footer length %u does not fit the file's %" PRIu64
                         " bytes", f->name, flen, f->size);
    f->footer = sl__malloc(flen);
    if (!f->footer)
        return sl__oom("reading a Parquet footer");
    SL_TRY(read_bytes(f, f->size - 8 - flen, flen, f->footer));
    SL_TRY(pq_meta_parse(f->footer, flen, f->name, &f->meta));
    if (f->meta.encrypted)
        return sl__error(SL_EUNSUPPORTED, "%s: encrypted columns are not supported", f->name);
    int64_t rows = 0;
    for (int g = 0; g < f->meta.nrg; g++)
        rows += f->meta.rg[g].num_rows;
    if (rows != f->meta.num_rows)
        return sl__error(SL_ECORRUPT, "%s: footer: num_rows %" PRId64 " but its row groups hold "
                         "%" PRId64, f->name, f->meta.num_rows, rows);
    return SL_OK;
}

/* sl_shard_set__each at open: file k's footer and schema. */
static int open_file(void *user, int k) {
    pq_source *s = user;
    pq_file *f = &s->files[k];
    SL_TRY(open_footer(f));
    cJSON *hf = NULL;
    if (f->meta.hf.n) {
        hf = cJSON_ParseWithLength((const char *)f->meta.hf.p, f->meta.hf.n);
        if (!hf && sl__json_failed())
            return sl__oom("reading Hugging Face metadata");
        /* metadata that does not parse is only metadata: the data reads */
    }
    int rc = read_schema(f, hf_features(hf));
    cJSON_Delete(hf);
    return rc;
}

static void file_dispose(pq_file *f) {
    if (f->mapbuf)
        sl_buffer_release(f->mapbuf); /* the io closes with the last view */
    else
        sl_io__close(f->io);
    pq_meta_dispose(&f->meta);
    sl__free(f->footer);
    sl__free(f->lf);
    sl__free(f->path);
}

/* ---- columns ---------------------------------------------------------------------- */

static int find_leaf(const pq_file *f, const char *name) {
    for (int k = 0; k < f->nlf; k++)
        if (!strcmp(f->lf[k].name, name))
            return k;
    for (int k = 0; k < f->nlf; k++)
        if (!strcmp(f->lf[k].alias, name) || !strcmp(f->lf[k].path, name))
            return k;
    return -1;
}

static int add_column(pq_source *s, int leaf, const char *as, const char *field) {
    const pq_lf *l = &s->files[0].lf[leaf];
    if (l->why[0])
        return sl__error(SL_EUNSUPPORTED, "%s: column '%s' of %s: %s", field, l->name,
                         s->files[0].name, l->why);
    int c = s->base.ncols;
    const char *name = as ? as : l->name;
    int rc;
    int64_t shape1 = l->dec.type_length;
    int64_t var = -1;
    switch (l->dec.out) {
    case PQ_OUT_BIN:
        rc = sl_source__add_col(&s->base, name, l->string ? SL_COL_STRING : SL_COL_BYTES, SL_U8, 1,
                                NULL);
        break;
    case PQ_OUT_I64:
        rc = l->list ? sl_source__add_col(&s->base, name, SL_COL_ARRAY, SL_I64, 1, &var)
                     : sl_source__add_col(&s->base, name, SL_COL_INT64, SL_I64, 0, NULL);
        break;
    case PQ_OUT_F64:
        rc = l->list ? sl_source__add_col(&s->base, name, SL_COL_ARRAY, SL_F64, 1, &var)
                     : sl_source__add_col(&s->base, name, SL_COL_FLOAT64, SL_F64, 0, NULL);
        break;
    case PQ_OUT_FIXED:
        rc = l->fp16 ? sl_source__add_col(&s->base, name, SL_COL_ARRAY, SL_F16, l->list, &var)
                     : sl_source__add_col(&s->base, name, SL_COL_ARRAY, SL_U8, 1, &shape1);
        break;
    default: {
        sl_dtype dt = l->dec.out == PQ_OUT_U64 ? SL_U64 : l->dec.out == PQ_OUT_F32 ? SL_F32
                                                                                  : SL_BOOL;
        rc = sl_source__add_col(&s->base, name, SL_COL_ARRAY, dt, l->list, &var);
    }
    }
    if (rc < 0)
        return sl__error_prefix(rc, "%s", field);
    sl_source_col *col = &s->base.col[c];
    col->image = l->image;
    col->encoded = l->image;
    col->indexed = col->type == SL_COL_INT64;
    s->leaf[c] = leaf;
    return SL_OK;
}

/* The columns a spec asks for ("columns": ["a", "b"] or {"a": "x"}), or every
 * supported one, with a warning for each left out. */
static int choose_columns(pq_source *s, const cJSON *sel, const char *field) {
    const pq_file *f = &s->files[0];
    char sub[SL__ERRMSG_MAX];
    if (!sel) {
        for (int k = 0; k < f->nlf; k++) {
            if (f->lf[k].why[0]) {
                SL_LOG_WARN("%s: column '%s' left out: %s", f->name, f->lf[k].name, f->lf[k].why);
                continue;
            }
            if (s->base.ncols == SL_MAX_COLUMNS)
                return sl__error(SL_EINVAL, "%s: more than %d columns; choose some with "
                                 "\"columns\"", f->name, SL_MAX_COLUMNS);
            SL_TRY(add_column(s, k, NULL, field));
        }
        if (s->base.ncols == 0)
            return sl__error(SL_EUNSUPPORTED, "%s: no column sluice reads (%s)", f->name,
                             f->nlf ? f->lf[0].why : "none");
        return SL_OK;
    }
    if (!cJSON_IsArray(sel) && !cJSON_IsObject(sel))
        return sl__error(SL_EINVAL, "%s.columns: must be a list of column names or an object "
                         "{\"column\": \"new name\"}", field);
    for (const cJSON *it = sel->child; it; it = it->next) {
        const char *key = cJSON_IsArray(sel) ? (cJSON_IsString(it) ? it->valuestring : NULL)
                                             : it->string;
        const char *as = NULL;
        if (!key)
            return sl__error(SL_EINVAL, "%s.columns: every name must be a string", field);
        if (cJSON_IsObject(sel)) {
            if (!cJSON_IsString(it))
                return sl__error(SL_EINVAL, "%s.columns.%s: must be the column's new name",
                                 field, key);
            as = it->valuestring;
        }
        int k = find_leaf(f, key);
        if (k < 0) {
            const char **names = sl__malloc((size_t)(f->nlf ? f->nlf : 1) * sizeof *names);
            char list[384] = "none";
            if (!names)
                return sl__oom("opening a Parquet source");
            for (int j = 0; j < f->nlf; j++)
                names[j] = f->lf[j].name;
            sl__names_closest(key, names, f->nlf, list, sizeof list);
            sl__free(names);
            return sl__error(SL_EINVAL, "%s.columns: no column '%s' in %s (columns: %s)", field,
                             key, f->name, list);
        }
        snprintf(sub, sizeof sub, "%s.columns", field);
        SL_TRY(add_column(s, k, as, sub));
    }
    if (s->base.ncols == 0)
        return sl__error(SL_EINVAL, "%s.columns: empty", field);
    return SL_OK;
}

/* Every file's chunks for the chosen columns, checked against the first's
 * (invariant 2). */
static int match_files(pq_source *s) {
    const pq_file *f0 = &s->files[0];
    for (int i = 0; i < s->nfiles; i++) {
        pq_file *f = &s->files[i];
        for (int c = 0; c < s->base.ncols; c++) {
            const pq_lf *want = &f0->lf[s->leaf[c]];
            int k = i == 0 ? s->leaf[c] : -1;
            for (int j = 0; k < 0 && j < f->nlf; j++)
                if (!strcmp(f->lf[j].path, want->path))
                    k = j;
            if (k < 0)
                return sl__error(SL_EINVAL, "%s has no column '%s' (%s has it): give files of "
                                 "one schema", f->name, want->path, f0->name);
            const pq_lf *got = &f->lf[k];
            if (got->dec.type != want->dec.type || got->dec.max_rep != want->dec.max_rep ||
                got->dec.type_length != want->dec.type_length || got->dec.out != want->dec.out)
                return sl__error(SL_EINVAL, "%s: column '%s' is %s%s, but %s in %s: give files "
                                 "of one schema", f->name, want->path, type_name(got->dec.type),
                                 got->list ? " (a list)" : "", type_name(want->dec.type),
                                 f0->name);
            f->chunk[c] = got->chunk;
        }
    }
    return SL_OK;
}

/* ---- row groups: decoding and the cache --------------------------------------------- */

static void block_free(void *user) {
    pq_block *b = user;
    for (int c = 0; c < b->ncols; c++)
        pq_dcol_dispose(&b->col[c]);
    sl_buffer_release(b->map);
    sl__free(b);
}

/* The stored bytes of column c's chunk in row group g of file f: [*start,
 * *start + *len), checked against the file (invariant 2). */
static int chunk_range(const pq_source *s, const pq_file *f, int g, int c, uint64_t *start,
                       size_t *len) {
    const pq_chunk *ch = &f->meta.rg[g].cols[f->chunk[c]];
    const char *col = s->base.col[c].name;
    if (!ch->has_meta)
        return sl__error(SL_ECORRUPT, "%s: row group %d, column '%s': the footer has no "
                         "meta_data for its chunk", f->name, g, col);
    if (ch->external)
        return sl__error(SL_EUNSUPPORTED, "%s: row group %d, column '%s': the chunk lives in "
                         "another file (file_path): not supported", f->name, g, col);
    if (ch->type != f->lf[f->chunk[c]].dec.type)
        return sl__error(SL_ECORRUPT, "%s: row group %d, column '%s': the chunk is %s, the "
                         "schema says %s", f->name, g, col, type_name(ch->type),
                         type_name(f->lf[f->chunk[c]].dec.type));
    int64_t at = ch->data_page_offset;
    if (ch->dict_page_offset > 0 && ch->dict_page_offset < at)
        at = ch->dict_page_offset;
    if (at < 4 || (uint64_t)at > f->size || (uint64_t)ch->total_compressed > f->size - (uint64_t)at ||
        (uint64_t)ch->total_compressed > PQ_MAX_PAGE * 4)
        return sl__error(SL_ECORRUPT, "%s: row group %d, column '%s': chunk of %" PRId64
                         " bytes at offset %" PRId64 " lies outside the file's %" PRIu64 " bytes",
                         f->name, g, col, ch->total_compressed, at, f->size);
    *start = (uint64_t)at;
    *len = (size_t)ch->total_compressed;
    return SL_OK;
}

/* Decode column c of row group g of file f into `out`. A remote chunk that
 * fails its checks is read once more (a transfer's damage heals). */
static int decode_column(const pq_source *s, const pq_file *f, int g, int c, pq_dcol *out) {
    uint64_t start = 0;
    size_t len = 0;
    SL_TRY(chunk_range(s, f, g, c, &start, &len));
    const pq_chunk *ch = &f->meta.rg[g].cols[f->chunk[c]];
    const pq_leaf *lf = &f->lf[f->chunk[c]].dec;
    int64_t nrows = f->meta.rg[g].num_rows;
    int rc;
    if (f->map) {
        rc = pq_decode_chunk(lf, ch, f->map + start, len, nrows, s->verify, out);
    } else {
        uint8_t *buf = sl__malloc(len ? len : 1);
        if (!buf)
            return sl__oom("reading a Parquet column chunk");
        char first[SL__ERRMSG_MAX] = "";
        for (int attempt = 0; attempt < 2; attempt++) {
            rc = sl_io__read(f->io, buf, len, start);
            if (rc == SL_OK)
                rc = pq_decode_chunk(lf, ch, buf, len, nrows, s->verify, out);
            if (rc == SL_OK) { /* byte arrays may point into it */
                rc = pq_dcol_keep(out, buf, len);
                buf = NULL;
                break;
            }
            if (rc != SL_ECORRUPT)
                break;
            if (attempt == 0) {
                snprintf(first, sizeof first, "%s", sl_errmsg());
                pq_dcol_dispose(out);
                SL_LOG_WARN("%s: row group %d, column '%s': %s; reading the chunk again",
                            f->name, g, s->base.col[c].name, first);
            } else {
                rc = sl__error_prefix(rc, "damaged twice (the first read: %s); the second read",
                                      first);
            }
        }
        sl__free(buf);
    }
    if (rc < 0)
        return sl__error_prefix(rc, "row group %d, column '%s'", g, s->base.col[c].name);
    return SL_OK;
}

/* The shard set's open: decode every chosen column of source row group k. */
static int block_open(void *user, int k, void **state_out) {
    pq_source *s = user;
    const pq_rgref *r = &s->rgs[k];
    const pq_file *f = &s->files[r->file];
    pq_block *b = sl__calloc(1, sizeof *b);
    if (!b)
        return sl__oom("decoding a Parquet row group");
    int rc = SL_OK;
    b->map = sl_buffer_retain(f->mapbuf);
    for (int c = 0; c < s->base.ncols; c++) {
        b->ncols = c + 1;
        SL_CHECK(decode_column(s, f, r->rg, c, &b->col[c]));
    }
    SL_CHECK(sl_buffer_wrap(&b->buf, b, sizeof *b, block_free, b));
    *state_out = b;
    return SL_OK;
cleanup:
    block_free(b);
    return rc;
}

static void block_close(void *user, int k, void *state) {
    (void)user;
    (void)k;
    pq_block *b = state;
    sl_buffer_release(b->buf);
}

/* A block some batch still holds a view of is dropped last. */
static bool block_held(void *user, int k, void *state) {
    (void)user;
    (void)k;
    const pq_block *b = state;
    return sl_buffer_refcount(b->buf) > 1;
}

/* ---- reading -------------------------------------------------------------------------- */

static int rg_of(const pq_source *s, uint64_t i) {
    return sl__last_at_most(s->rgs, s->nrg, sizeof *s->rgs, offsetof(pq_rgref, first), i);
}

static void pq_locate(sl_source *src, uint64_t i, char *buf, size_t cap) {
    const pq_source *s = (const pq_source *)src;
    if (i >= src->count || !s->nrg) {
        snprintf(buf, cap, "%s: record %" PRIu64, src->name, i);
        return;
    }
    const pq_rgref *r = &s->rgs[rg_of(s, i)];
    const pq_file *f = &s->files[r->file];
    snprintf(buf, cap, "%s: record %" PRIu64 " (row group %d, row %" PRIu64 ")", f->name,
             i - f->first, r->rg, i - r->first);
}

static int null_error(sl_source *src, uint64_t i, int c, const char *what) {
    char where[400];
    pq_locate(src, i, where, sizeof where);
    return sl__error(SL_EDECODE, "%s: column '%s' %s", where, src->col[c].name, what);
}

static int pq_read(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *out) {
    (void)cur;
    pq_source *s = (pq_source *)src;
    int k = rg_of(s, i);
    void *st;
    SL_TRY(sl_source__shard_get(s->cache, k, s->files[s->rgs[k].file].name,
                                i - s->files[s->rgs[k].file].first, &st));
    const pq_block *b = st;
    int64_t r = (int64_t)(i - s->rgs[k].first);
    int rc = SL_OK;
    for (int c = 0; c < src->ncols; c++) {
        const pq_dcol *d = &b->col[c];
        const sl_source_col *col = &src->col[c];
        sl_tensor *t = &out->col[c];
        memset(t, 0, sizeof *t);
        uint8_t null = d->nulls ? d->nulls[r] : 0;
        if (d->row_off) { /* a list */
            if (null == 2)
            {
                rc = null_error(src, i, c, "is a list holding a null element (lists of numbers "
                                           "without nulls are read)");
                goto cleanup;
            }
            int64_t a = d->row_off[r], e = d->row_off[r + 1];
            int64_t shape = e - a;
            t->data = d->vals ? d->vals + (size_t)a * (size_t)d->w : NULL;
            t->nbytes = (size_t)shape * (size_t)d->w;
            t->dtype = col->dtype;
            t->ndim = 1;
            t->shape[0] = shape;
        } else if (!d->w) { /* bytes, text: where they were decoded (no copy) */
            t->data = (void *)(uintptr_t)d->vp[r];
            t->nbytes = d->vl[r];
            t->dtype = SL_U8;
            t->ndim = 1;
            t->shape[0] = (int64_t)d->vl[r];
        } else {
            if (null && col->dtype != SL_F32 && col->dtype != SL_F64)
            {
                rc = null_error(src, i, c, "is null (an integer, boolean or fixed-size column has "
                                           "no null value; choose other columns, or fill the "
                                           "nulls when writing)");
                goto cleanup;
            }
            t->data = d->vals + (size_t)r * (size_t)d->w;
            t->nbytes = (size_t)d->w;
            t->dtype = col->dtype;
            t->ndim = col->ndim;
            t->shape[0] = col->ndim ? col->shape[0] : 0;
        }
        t->device = SL_DEVICE_CPU;
        t->buf = sl_buffer_retain(b->buf);
        out->ncols = (uint32_t)c + 1;
    }
    out->index = i;
    sl_shard_set__put(s->cache, k);
    return SL_OK;
cleanup:
    sl_shard_set__put(s->cache, k);
    sl_sample_clear(out);
    out->ncols = 0;
    return rc;
}

/* A failed block open fails every row of that row group alike. */
static int pq_failed_range(sl_source *src, uint64_t i, uint64_t *first, uint64_t *count) {
    pq_source *s = (pq_source *)src;
    int k = rg_of(s, i);
    if (sl_shard_set__failed(s->cache, k) >= 0)
        return 0;
    *first = s->rgs[k].first;
    *count = (uint64_t)s->rgs[k].nrows;
    return 1;
}

/* ---- indexed columns: row-group statistics, else the column alone -------------------- */

static int stats_constant(const pq_chunk *ch, const pq_leaf *lf, int64_t *v) {
    const pq_stats *st = &ch->stats;
    if (!st->has_min || !st->has_max || (lf->max_def > 0 && !(st->has_nulls && st->null_count == 0)))
        return 0;
    int w = lf->type == PQ_INT32 ? 4 : lf->type == PQ_INT64 ? 8 : 0;
    if (!w || st->min.n != (uint32_t)w || st->max.n != (uint32_t)w || memcmp(st->min.p, st->max.p, (size_t)w))
        return 0;
    *v = w == 4 ? (lf->is_unsigned ? (int64_t)sl__ld32(st->min.p) : (int64_t)(int32_t)sl__ld32(st->min.p))
                : (int64_t)sl__ld64(st->min.p);
    return 1;
}

static int fill_index_values(sl_source *src, int64_t *const *vals) {
    pq_source *s = (pq_source *)src;
    for (int k = 0; k < s->nrg; k++) {
        const pq_rgref *r = &s->rgs[k];
        const pq_file *f = &s->files[r->file];
        for (int c = 0; c < src->ncols; c++) {
            if (!vals[c])
                continue;
            const pq_chunk *ch = &f->meta.rg[r->rg].cols[f->chunk[c]];
            const pq_leaf *lf = &f->lf[f->chunk[c]].dec;
            int64_t v;
            if (ch->has_meta && stats_constant(ch, lf, &v)) { /* no page read */
                for (int64_t j = 0; j < r->nrows; j++)
                    vals[c][r->first + (uint64_t)j] = v;
                continue;
            }
            pq_dcol d;
            int rc = decode_column(s, f, r->rg, c, &d);
            if (rc < 0)
                rc = sl__error_prefix(rc, "%s", f->name);
            if (rc == SL_OK && d.nulls)
                rc = sl__error(SL_EDECODE, "%s: row group %d, column '%s' holds nulls: a filter "
                               "on it cannot be answered", f->name, r->rg, src->col[c].name);
            if (rc == SL_OK)
                memcpy(&vals[c][r->first], d.vals, (size_t)r->nrows * sizeof(int64_t));
            pq_dcol_dispose(&d);
            SL_TRY(rc);
        }
    }
    return SL_OK;
}

static int pq_index_column(sl_source *src, int col, const void **vals_out) {
    pq_source *s = (pq_source *)src;
    return sl_source__ivals_get(&s->ivals, src, fill_index_values, col, vals_out);
}

/* ---- describe, free --------------------------------------------------------------------- */

static const char *file_path(const void *ctx, int k) { return ((const pq_source *)ctx)->files[k].path; }

static int pq_describe(sl_source *src, cJSON *obj) {
    pq_source *s = (pq_source *)src;
    SL_TRY(sl_source__describe_paths(obj, "files", s->nfiles, file_path, s));
    cJSON *codecs = cJSON_AddArrayToObject(obj, "compression");
    if (!codecs || !cJSON_AddNumberToObject(obj, "row_groups", s->nrg) ||
        !cJSON_AddNumberToObject(obj, "cache_bytes", (double)s->cache_bytes) ||
        !cJSON_AddNumberToObject(obj, "cache_row_groups", s->cache_rgs) ||
        !cJSON_AddBoolToObject(obj, "verify", s->verify) ||
        !cJSON_AddBoolToObject(obj, "huggingface", s->hf))
        return sl__oom("describing a Parquet source");
    for (int c = 0; c < 8; c++) {
        if (!(s->codecs & (1u << c)))
            continue;
        cJSON *n = cJSON_CreateString(pq_codec_name(c));
        if (!n)
            return sl__oom("describing a Parquet source");
        cJSON_AddItemToArray(codecs, n);
    }
    const pq_meta *m = &s->files[0].meta;
    if (m->created_by.n) {
        char by[200];
        snprintf(by, sizeof by, "%.*s", (int)(m->created_by.n < 199 ? m->created_by.n : 199),
                 (const char *)m->created_by.p);
        if (!cJSON_AddStringToObject(obj, "created_by", by))
            return sl__oom("describing a Parquet source");
    }
    return SL_OK;
}

static void pq_free(sl_source *src) {
    pq_source *s = (pq_source *)src;
    sl_shard_set__free(s->cache);
    for (int i = 0; s->files && i < s->nfiles; i++)
        file_dispose(&s->files[i]);
    sl__free(s->files);
    sl__free(s->rgs);
    sl_source__ivals_dispose(&s->ivals);
    sl__free(s);
}

static const sl_source_vtbl pq_vtbl = {
    .repair = "a Parquet file is rewritten by the tool that wrote it (pyarrow, datasets); the "
              "other row groups read on",
    .read = pq_read,
    .failed_range = pq_failed_range,
    .index_column = pq_index_column,
    .describe = pq_describe,
    .locate = pq_locate,
    .free = pq_free,
};

/* ---- open ------------------------------------------------------------------------------- */

/* ClassLabel names from the first file's Hugging Face features: the column
 * named "label", else the first ClassLabel, as meta {"classes": [...]}. */
static int class_names(pq_source *s) {
    const pq_meta *m = &s->files[0].meta;
    if (!m->hf.n)
        return SL_OK;
    s->hf = 1;
    cJSON *hf = cJSON_ParseWithLength((const char *)m->hf.p, m->hf.n);
    if (!hf)
        return sl__json_failed() ? sl__oom("reading Hugging Face metadata") : SL_OK;
    const cJSON *feats = hf_features(hf), *names = NULL;
    for (int pass = 0; pass < 2 && !names; pass++)
        for (const cJSON *it = feats ? feats->child : NULL; it && !names; it = it->next) {
            const char *t = hf_type(feats, it->string);
            if (t && !strcmp(t, "ClassLabel") && (pass == 1 || !strcmp(it->string, "label")))
                names = cJSON_GetObjectItemCaseSensitive(it, "names");
        }
    int rc = SL_OK;
    if (cJSON_IsArray(names)) {
        s->base.meta = cJSON_CreateObject();
        cJSON *dup = cJSON_Duplicate(names, 1);
        if (!s->base.meta || !dup) {
            cJSON_Delete(dup);
            rc = sl__oom("reading Hugging Face metadata");
        } else {
            cJSON_AddItemToObject(s->base.meta, "classes", dup);
        }
    }
    cJSON_Delete(hf);
    return rc;
}

/* The cache's bound in row groups (invariant 4), from each row group's
 * decoded estimate: the chosen columns' uncompressed chunk sizes. */
static void size_cache(pq_source *s) {
    uint64_t max = 1, total = 0;
    for (int k = 0; k < s->nrg; k++) {
        const pq_file *f = &s->files[s->rgs[k].file];
        uint64_t est = 0;
        for (int c = 0; c < s->base.ncols; c++) {
            const pq_chunk *ch = &f->meta.rg[s->rgs[k].rg].cols[f->chunk[c]];
            est += ch->total_uncompressed > 0 ? (uint64_t)ch->total_uncompressed : 0;
            s->codecs |= ch->codec >= 0 && ch->codec < 8 ? 1u << ch->codec : 0;
            total += ch->total_compressed > 0 ? (uint64_t)ch->total_compressed : 0;
        }
        est += (uint64_t)s->rgs[k].nrows * 8u * (uint64_t)s->base.ncols; /* offsets */
        if (est > max)
            max = est;
    }
    s->est_max_rg = max;
    uint64_t n = s->cache_bytes / max;
    if (n < 1)
        n = 1;
    if (n > (uint64_t)s->nrg)
        n = (uint64_t)s->nrg;
    s->cache_rgs = (int)n;
    s->base.record_bytes = s->base.count ? total / s->base.count : 0;
}

int sl_source__open_parquet(sl_source **out, const cJSON *obj, const char *field) {
    *out = NULL;
    pq_opts o;
    SL_TRY(sl_source__read_options(&sl_source__pq_table, obj, field, &o));
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(obj, "parquet");
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(obj, "columns");
    const cJSON *feat = cJSON_GetObjectItemCaseSensitive(obj, "features");
    if (sel && feat)
        return sl__error(SL_EINVAL, "%s: \"columns\" and \"features\" name the same thing; give "
                         "one", field);
    if (!sel)
        sel = feat;
    char pfield[300];
    snprintf(pfield, sizeof pfield, "%s.parquet", field);
    char **pv = NULL;
    int n = 0;
    SL_TRY(sl_source__expand_paths(paths, pfield, &pv, &n));
    pq_source *s = sl_source__new(sizeof *s, &pq_vtbl, "parquet");
    int rc = SL_OK;
    if (!s) {
        sl_source__free_paths(pv);
        return sl__oom("opening a Parquet source");
    }
    sl_source__ivals_init(&s->ivals);
    s->verify = o.verify;
    s->cache_bytes = o.cache_bytes;
    s->files = sl__calloc((size_t)n, sizeof *s->files);
    if (!s->files)
        SL_FAIL(SL_ENOMEM, "out of memory opening %d Parquet files", n);
    for (int k = 0; k < n; k++) {
        s->files[k].path = pv[k];
        pv[k] = NULL;
        s->files[k].name = sl_io__short_name(s->files[k].path);
        s->nfiles = k + 1;
    }
    snprintf(s->base.name, sizeof s->base.name, "%s%s", s->files[0].name,
             n > 1 ? " (and more)" : "");
    SL_CHECK(sl_shard_set__each(n, open_file, s));
    SL_CHECK(choose_columns(s, sel, field));
    SL_CHECK(match_files(s));
    SL_CHECK(class_names(s));
    /* the row groups of all files, in order */
    int nrg = 0;
    for (int k = 0; k < n; k++) {
        if (s->files[k].meta.nrg > INT32_MAX / 2 - nrg)
            SL_FAIL(SL_ELIMIT, "%s: too many row groups", pfield);
        nrg += s->files[k].meta.nrg;
    }
    s->rgs = sl__calloc((size_t)(nrg ? nrg : 1), sizeof *s->rgs);
    if (!s->rgs)
        SL_FAIL(SL_ENOMEM, "out of memory opening %d Parquet row groups", nrg);
    for (int k = 0; k < n; k++) {
        pq_file *f = &s->files[k];
        f->first = s->base.count;
        for (int g = 0; g < f->meta.nrg; g++) {
            if (f->meta.rg[g].num_rows == 0)
                continue; /* an empty row group holds no record */
            pq_rgref *r = &s->rgs[s->nrg++];
            r->first = s->base.count;
            r->file = k;
            r->rg = g;
            r->nrows = f->meta.rg[g].num_rows;
            s->base.count += (uint64_t)r->nrows;
        }
    }
    if (s->base.count == 0)
        SL_FAIL(SL_EINVAL, "%s: no rows in %s%s", pfield, s->files[0].path,
                n > 1 ? " or the files after it" : "");
    size_cache(s);
    s->base.held_bytes = (uint64_t)s->cache_rgs * s->est_max_rg;
    /* Rows not all kept decoded: a global shuffle would decode a row group
     * per row read; the window order reads blocks of a row group's rows,
     * half the cache's row groups interleaved at a time */
    if (s->cache_rgs < s->nrg) {
        s->base.locality = s->base.count / (uint64_t)s->nrg;
        if (!s->base.locality)
            s->base.locality = 1;
        s->base.locality_window =
            s->base.locality * (uint64_t)(s->cache_rgs / 2 > 1 ? s->cache_rgs / 2 : 1);
    }
    SL_CHECK(sl_shard_set__create(&s->cache, s->nrg, s->cache_rgs,
                                  &(sl_shard_set_ops){.open = block_open, .close = block_close,
                                                      .held = block_held},
                                  s));
    sl_shard_set__set_max_open(s->cache, s->cache_rgs);
    sl_source__free_paths(pv);
    *out = &s->base;
    return SL_OK;
cleanup:
    sl_source__free_paths(pv);
    pq_free(&s->base);
    return rc;
}

/* A Parquet file starts with "PAR1" (and ends with it: checked at open). */
int sl_source__sniff_parquet(const char *path, int is_dir, const uint8_t *head, size_t n) {
    (void)path;
    return !is_dir && n >= 8 && !memcmp(head, PQ_MAGIC, 4);
}

/* `sluice index` of a Parquet file: its footer is its index (row groups,
 * their offsets and statistics), so nothing is written; the file is checked
 * to open and its footer to parse. */
int sl_source__index_parquet(const char *path, const cJSON *opts) {
    (void)opts;
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "parquet", path)) {
        cJSON_Delete(o);
        return sl__oom("indexing a Parquet file");
    }
    sl_source *s = NULL;
    int rc = sl_source__open_json(&s, o, "index");
    cJSON_Delete(o);
    SL_TRY(rc);
    SL_LOG_INFO("%s: a Parquet file carries its own index (its footer: %" PRIu64 " rows in %d "
                "row groups); nothing written", path, s->count, ((pq_source *)s)->nrg);
    sl_source__release(s);
    return SL_OK;
}
