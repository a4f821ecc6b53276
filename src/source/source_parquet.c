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
 * dots; a list or a list of lists of numbers one column; a list of strings
 * two, the bytes and their lengths; a Hugging Face Image struct's bytes one
 * column named after the struct), and the key "huggingface" of the file
 * metadata gives ClassLabel names (meta "classes").
 *
 * Reading: a row group is the unit of I/O and decoding. The first read of a
 * row in row group k reads the selected columns' chunks (a slice of the
 * mapping; remote, a slice of the file fetched whole into the shard cache,
 * or one range request each when the cache is off or the file does not fit
 * it), checks their pages, decompresses them into one buffer (the block's
 * arena, faulted in by huge pages, reused from dropped blocks) and decodes
 * them (parquet_column.c) into one block, and keeps that block in a bounded
 * cache of decoded row groups (src/record/shard_set.c: opened once however
 * many threads ask, least recently used dropped first, a failure
 * remembered, an allocation failure not). A read then hands out views into
 * the block, each holding a reference to it, so a column is never copied
 * and a block dropped from the cache lives while a batch uses it.
 *
 * Threads: a reader whose row group another thread is decoding decodes the
 * next one it will want meanwhile (the executor's prefetch hints, else the
 * following row group) instead of waiting; each cursor holds a reference to
 * the block it last read, so rows of the same row group are read without
 * the cache's lock, and a cache that keeps every row group is read without
 * it too (sl_shard_set__peek).
 *
 * Random access without the whole row group: when the cache cannot keep
 * every row group and a file has the page index (OffsetIndex), a row whose
 * row group is not cached decodes only the pages that hold it (one per
 * column, and the column's dictionary page) into a page block its cursor
 * keeps for the next rows; a row group whose pages are asked for as many
 * times as it has pages is then decoded whole and cached (what reading it
 * page by page would cost by then).
 *
 * Invariants:
 *  1. After open, everything here but the caches, the hints and the
 *     counters is read-only: reads run on many threads, each through its
 *     own cursor.
 *  2. Every chunk's byte range lies inside its file (checked against the
 *     file's size before it is read), every page an offset index names lies
 *     inside its chunk, and every column of every file has the physical type
 *     and nesting of the first file's column of that name.
 *  3. A value that cannot be given faithfully (an integer null, a list with
 *     a null element, a ragged list of lists, an unsupported encoding met in
 *     a page) fails the read of that row with a message naming the file, the
 *     row, the column and the cause; never a made-up value.
 *  4. The cache holds at most cache_rgs decoded row groups (more only while
 *     that many are being read at once), and the spare arenas at most
 *     PQ_SPARES; (cache_rgs + spares) * the largest row group's decoded
 *     estimate <= cache_bytes when cache_bytes allows it; the source reports
 *     that as memory it holds (held_bytes).
 *  5. A remote file's bytes are used once checked: fetched whole, its
 *     footer must be the one opened and its pages' CRCs (where written)
 *     must hold, else it is fetched again once (sl_io__open_checked); a
 *     chunk that fails to decode from it is dropped from the shard cache
 *     (sl_io__forget) and read once more by a range request.
 */
#include "record/shard_set.h"
#include "source/parquet_format.h"
#include "source/source.h"
#include "source/source_shard.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PQ_MAGIC "PAR1"
#define PQ_DEFAULT_CACHE ((uint64_t)512 << 20)
#define PQ_MAX_LEAVES 4096
#define PQ_SPARES 2         /* arenas of dropped blocks kept for the next decodes */
#define PQ_AHEAD 4          /* row groups past the wanted one a waiting reader may decode */
#define PQ_HINTS 16         /* row groups remembered from prefetch hints */
#define PQ_MAX_ARENA ((uint64_t)1 << 30) /* a row group's arena at most (footer sizes
                                            beyond it fall back to a buffer a page) */
#define PQ_OI_SPAN ((uint64_t)16 << 20)  /* a file's offset indexes read in one range
                                            when they lie within this */

/* A leaf of a file's schema, as a column would read it. */
typedef struct pq_lf {
    char name[SL_COLNAME_MAX];   /* the column's default name */
    char path[256];              /* every schema name on the way, dotted ("image.bytes",
                                    "tokens.list.element") */
    char alias[SL_COLNAME_MAX];  /* another name it answers to ("image.bytes" for a
                                    Hugging Face Image's bytes named "image"), or "" */
    pq_leaf dec;
    int chunk;                   /* its column chunk's position in a row group */
    int list;                    /* a list column (max_rep 1 or 2) */
    int string;                  /* BYTE_ARRAY annotated as text */
    int image;                   /* the bytes of a Hugging Face Image */
    int fp16;                    /* FIXED_LEN_BYTE_ARRAY(2) FLOAT16 */
    char why[160];               /* not "": why it is not a column (unsupported) */
} pq_lf;

typedef struct pq_file {
    char *path;
    const char *name;            /* for messages: a base name, or the URL */
    sl_io *io;                   /* the footer's open: local, mapped; remote, by ranges */
    const uint8_t *map;          /* local: the mapping; remote: NULL */
    sl_buffer *mapbuf;           /* local: the mapping as a buffer that byte-array
                                    views reference (its last release closes io) */
    uint64_t size;
    uint8_t *footer;             /* the footer's bytes (meta points into them) */
    uint32_t footer_len;
    pq_meta meta;
    pq_lf *lf;
    int nlf;
    int chunk[SL_MAX_COLUMNS];   /* per slot: its chunk in a row group */
    uint64_t first;              /* first record */
    _Atomic int no_page_index;   /* its offset index failed once: row groups whole */
} pq_file;

/* A row group's chunks as their offset indexes locate their pages. */
typedef struct pq_pidx {
    pq_pageloc *locs[SL_MAX_COLUMNS]; /* per slot */
    int n[SL_MAX_COLUMNS];
    int pages;                   /* the most pages of a slot: the rent-or-buy count */
} pq_pidx;

typedef struct pq_rgref {
    uint64_t first;              /* first record */
    int file, rg;
    int64_t nrows;
} pq_rgref;

/* Arenas of dropped blocks, for the next decodes (reused memory is already
 * faulted in). Shared by the source and its blocks, which may outlive it
 * (a batch's views): reference counted. */
typedef struct pq_spares {
    _Atomic int refs;
    pthread_mutex_t mu;
    int max;                     /* arenas kept; 0 once the source is gone */
    int n;
    pq_arena a[PQ_SPARES];
} pq_spares;

/* Decoded rows: a row group's (the cache's blocks: rows [0, nrows)) or a
 * page block's (rows [lo, hi) of it, the pages that hold them, one per
 * slot). Views reference `buf`. */
typedef struct pq_block {
    sl_buffer *buf;              /* wraps this block; its last release frees it */
    sl_buffer *map;              /* the mapping (or shard cache copy) byte arrays of
                                    uncompressed pages point into (a reference) */
    pq_spares *spares;           /* where its arena goes back (a reference) */
    pq_arena arena;
    int k;                       /* the source row group */
    int64_t lo, hi;              /* rows of the row group it holds */
    int nslots;
    int64_t base[SL_MAX_COLUMNS]; /* slot j's first row (of the row group) */
    pq_dcol col[SL_MAX_COLUMNS]; /* per slot */
} pq_block;

enum { PQ_ROLE_VALUES = 0, PQ_ROLE_LENGTHS = 1 };

typedef struct pq_source {
    sl_source base;
    int nfiles;
    pq_file *files;
    int nrg;
    pq_rgref *rgs;
    /* columns: source column c reads slot slot[c] (a decoded leaf of the
     * schema) as its values or, for a list of strings, their lengths */
    int slot[SL_MAX_COLUMNS];
    int role[SL_MAX_COLUMNS];
    int nslots;
    int slot_leaf[SL_MAX_COLUMNS]; /* slot -> leaf of files[0] */
    int verify;
    uint64_t cache_bytes;
    int cache_rgs;
    uint64_t est_max_rg;         /* the largest row group's decoded estimate */
    sl_shard_set *cache;         /* decoded row groups */
    pq_spares *spares;
    sl_shard_set *wholes;        /* remote files fetched whole; NULL when all are local */
    pq_pidx *pidx;               /* per row group, when the page path may be taken; else NULL */
    _Atomic int *page_reads;     /* per row group: pages decoded since it was cached */
    _Atomic unsigned char *busy; /* per row group: being decoded (a hint) */
    _Atomic int decoding;        /* row groups being decoded now */
    _Atomic int hint[PQ_HINTS];  /* row groups the executor said it will read */
    _Atomic unsigned nhint;
    _Atomic uint64_t rg_decodes, page_decodes; /* for tests and `describe` */
    sl_source_ivals ivals;
    uint32_t codecs;             /* bit c: codec c is used by a selected chunk */
    int hf;                      /* a file has Hugging Face metadata */
    int has_page_index;          /* every chosen chunk has an offset index */
} pq_source;

/* A reading thread's cursor: the blocks it read last, held (a reference). */
typedef struct pq_cursor {
    sl_source_cursor base;
    pq_block *blk;               /* a row group block */
    pq_block *pg;                /* a page block */
} pq_cursor;

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

/* A DECIMAL: scale 0 and at most 18 digits read as int64, any other as
 * float64 (unscaled * 10^-scale). */
static void decimal_kind(pq_lf *l, const pq_schema_el *e) {
    pq_leaf *d = &l->dec;
    if (e->precision < 1 || e->precision > 38 || e->scale > e->precision)
        return lf_unsupported(l, "DECIMAL(%d, %d) is not supported (precision 1 to 38, scale at "
                              "most the precision)", e->precision, e->scale);
    if (e->type != PQ_INT32 && e->type != PQ_INT64 && e->type != PQ_BYTE_ARRAY &&
        e->type != PQ_FIXED_LEN_BYTE_ARRAY)
        return lf_unsupported(l, "DECIMAL stored as %s is not supported", type_name(e->type));
    if (e->type == PQ_FIXED_LEN_BYTE_ARRAY && (e->type_length <= 0 || e->type_length > 32))
        return lf_unsupported(l, "DECIMAL in FIXED_LEN_BYTE_ARRAY(%d) is not supported",
                              e->type_length);
    d->scale = e->scale;
    if (e->scale == 0 && e->precision <= 18) {
        d->out = PQ_OUT_I64;
        d->conv = PQ_CONV_DEC_I64;
    } else {
        d->out = PQ_OUT_F64;
        d->conv = PQ_CONV_DEC_F64;
    }
}

/* How a leaf's values become a column's (its out kind), or why they cannot. */
static void leaf_kind(pq_lf *l, const pq_schema_el *e) {
    pq_leaf *d = &l->dec;
    d->type = e->type;
    d->type_length = e->type_length;
    int lt = e->logical, ct = e->converted;
    if (ct == PQ_CT_INTERVAL)
        return lf_unsupported(l, "INTERVAL values are not supported");
    if (lt == PQ_LT_DECIMAL || ct == PQ_CT_DECIMAL) {
        decimal_kind(l, e);
    } else {
        switch (e->type) {
        case PQ_BOOLEAN:
            d->out = PQ_OUT_BOOL;
            break;
        case PQ_INT32:
            d->out = PQ_OUT_I64;
            d->conv = ct == PQ_CT_UINT_8 || ct == PQ_CT_UINT_16 || ct == PQ_CT_UINT_32 ||
                              (lt == PQ_LT_INTEGER && !e->int_signed)
                          ? PQ_CONV_U32
                          : PQ_CONV_I32;
            break;
        case PQ_INT64:
            d->out = ct == PQ_CT_UINT_64 || (lt == PQ_LT_INTEGER && !e->int_signed) ? PQ_OUT_U64
                                                                                   : PQ_OUT_I64;
            break;
        case PQ_INT96: /* legacy timestamps: nanoseconds, as pyarrow reads them */
            d->out = PQ_OUT_I64;
            d->conv = PQ_CONV_INT96;
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
        default:
            return lf_unsupported(l, "physical type %d is not supported", e->type);
        }
    }
    if (l->why[0] || !l->list)
        return;
    if (d->out == PQ_OUT_BIN && d->max_rep == 2)
        lf_unsupported(l, "a list of lists of %s is not supported (lists of them are, and lists "
                       "of lists of numbers)", l->string ? "strings" : "byte arrays");
    else if (d->out == PQ_OUT_FIXED && !l->fp16)
        lf_unsupported(l, "a list of FIXED_LEN_BYTE_ARRAY(%d) values is not supported (lists "
                       "of numbers, strings and bytes are)", e->type_length);
}

/* Walk the subtree at w->pos (depth-first, as the schema list is laid out).
 * ldef: the definition levels at which the lists above hold an element;
 * `wrap`: the parent is a LIST or MAP, whose repeated child adds nothing to
 * the names; `rep_wrap`: the parent is such a repeated group with one
 * child (LIST -> repeated "list" -> "element"), which adds nothing either. */
static int walk_node(walk *w, int depth, int def, int rep, const int *ldef, const char *name,
                     const char *path, int wrap, int rep_wrap, int top) {
    if (w->pos >= w->m->nschema)
        return sl__error(SL_ECORRUPT, "%s: footer: schema: num_children runs past the last "
                         "element", w->file);
    if (depth > PQ_MAX_DEPTH)
        return sl__error(SL_ECORRUPT, "%s: footer: schema nested deeper than %d", w->file,
                         PQ_MAX_DEPTH);
    const pq_schema_el *e = &w->m->schema[w->pos++];
    int d2 = def + (e->repetition != PQ_REQUIRED);
    int r2 = rep + (e->repetition == PQ_REPEATED);
    int ld[2] = {ldef[0], ldef[1]};
    if (e->repetition == PQ_REPEATED && r2 <= 2)
        ld[r2 - 1] = d2;
    char nm[SL_COLNAME_MAX * 2], pt[256];
    int hide = (wrap && e->repetition == PQ_REPEATED) || rep_wrap;
    if (hide)
        snprintf(nm, sizeof nm, "%s", name);
    else
        snprintf(nm, sizeof nm, "%s%s%.*s", name, name[0] ? "." : "", (int)e->name.n,
                 (const char *)e->name.p);
    /* a path longer than pt is cut: it only names the column in messages */
    int en = e->name.n < sizeof pt ? (int)e->name.n : (int)sizeof pt - 1;
    if (snprintf(pt, sizeof pt, "%s%s%.*s", path, path[0] ? "." : "", en,
                 (const char *)e->name.p) >= (int)sizeof pt)
        pt[sizeof pt - 1] = '\0';
    if (e->num_children > 0) {
        int n = e->num_children;
        int child_rep_wrap = wrap && e->repetition == PQ_REPEATED && n == 1;
        int child_wrap = is_list_node(e) || is_map_node(e);
        /* a Hugging Face Image (struct<bytes: binary, path: string>) */
        const char *hft = top && w->hf_feats ? hf_type(w->hf_feats, nm) : NULL;
        int first = w->nlf;
        for (int k = 0; k < n; k++)
            SL_TRY(walk_node(w, depth + 1, d2, r2, ld, nm, pt, child_wrap, child_rep_wrap, 0));
        if (top && w->nlf - first == 2) {
            pq_lf *a = &w->lf[first], *b = &w->lf[first + 1];
            int is_img = (hft && !strcmp(hft, "Image")) ||
                         (!hft && a->dec.type == PQ_BYTE_ARRAY && !a->string && !a->list &&
                          b->dec.type == PQ_BYTE_ARRAY && !strcmp(a->name + strlen(nm), ".bytes") &&
                          !strcmp(b->name + strlen(nm), ".path"));
            if (is_img && !strcmp(a->name + strlen(nm), ".bytes") && !a->why[0] && !a->list) {
                snprintf(a->alias, sizeof a->alias, "%s", a->name);
                /* fits: a->name is nm".bytes" */
                snprintf(a->name, sizeof a->name, "%.*s", SL_COLNAME_MAX - 1, nm);
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
    if (strlen(nm) >= SL_COLNAME_MAX - 8) /* room for ".lengths" */
        lf_unsupported(l, "the name is longer than %d bytes", SL_COLNAME_MAX - 9);
    snprintf(l->name, sizeof l->name, "%.*s", SL_COLNAME_MAX - 1, nm);
    snprintf(l->path, sizeof l->path, "%s", pt);
    l->dec.max_def = d2;
    l->dec.max_rep = r2;
    l->dec.list_def[0] = ld[0];
    l->dec.list_def[1] = ld[1];
    l->list = r2 >= 1;
    if (!e->has_type)
        return sl__error(SL_ECORRUPT, "%s: footer: schema: leaf '%s' has no type", w->file, pt);
    if (!l->why[0]) {
        if (r2 > 2)
            lf_unsupported(l, "lists nested more than two deep are not supported (lists and "
                              "lists of lists are)");
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
    const int none[2] = {0, 0};
    for (int k = 0; k < root->num_children && rc == SL_OK; k++)
        rc = walk_node(&w, 1, 0, 0, none, "", "", 0, 0, 1);
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

static int open_footer(pq_file *f) {
    int remote = sl_io__is_url(f->path);
    SL_TRY(sl_io__open(&f->io, f->path, remote ? SL_IO_EDGES : SL_IO_MAP));
    f->size = sl_io__size(f->io);
    f->map = sl_io__map(f->io);
    SL_TRY(sl_io__map_buffer(f->io, &f->mapbuf));
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
    f->footer_len = flen;
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
    sl_io__map_close(f->io, f->mapbuf);
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

/* The columns leaf `leaf` of files[0] becomes: one, or two for a list of
 * strings or byte arrays (the bytes back to back, and their lengths). */
static int leaf_ncols(const pq_lf *l) { return l->dec.out == PQ_OUT_BIN && l->list ? 2 : 1; }

static int add_column(pq_source *s, int leaf, const char *as, const char *field) {
    const pq_lf *l = &s->files[0].lf[leaf];
    if (l->why[0])
        return sl__error(SL_EUNSUPPORTED, "%s: column '%s' of %s: %s", field, l->name,
                         s->files[0].name, l->why);
    if (s->base.ncols + leaf_ncols(l) > SL_MAX_COLUMNS)
        return sl__error(SL_EINVAL, "%s: more than %d columns; choose fewer with \"columns\"",
                         field, SL_MAX_COLUMNS);
    int slot = -1;
    for (int j = 0; j < s->nslots && slot < 0; j++)
        if (s->slot_leaf[j] == leaf)
            slot = j;
    if (slot < 0) {
        slot = s->nslots++;
        s->slot_leaf[slot] = leaf;
    }
    int c = s->base.ncols;
    const char *name = as ? as : l->name;
    int rc;
    int ndim = l->dec.max_rep; /* a scalar, a list, a list of lists */
    const int64_t var[2] = {-1, -1};
    int64_t shape1 = l->dec.type_length;
    switch (l->dec.out) {
    case PQ_OUT_BIN:
        if (l->list) {
            char lens[SL_COLNAME_MAX + 16];
            snprintf(lens, sizeof lens, "%s.lengths", name);
            rc = sl_source__add_col(&s->base, name, SL_COL_BYTES, SL_U8, 1, NULL);
            if (rc == SL_OK)
                rc = sl_source__add_col(&s->base, lens, SL_COL_ARRAY, SL_I64, 1, var);
        } else {
            rc = sl_source__add_col(&s->base, name, l->string ? SL_COL_STRING : SL_COL_BYTES,
                                    SL_U8, 1, NULL);
        }
        break;
    case PQ_OUT_I64:
        rc = ndim ? sl_source__add_col(&s->base, name, SL_COL_ARRAY, SL_I64, ndim, var)
                  : sl_source__add_col(&s->base, name, SL_COL_INT64, SL_I64, 0, NULL);
        break;
    case PQ_OUT_F64:
        rc = ndim ? sl_source__add_col(&s->base, name, SL_COL_ARRAY, SL_F64, ndim, var)
                  : sl_source__add_col(&s->base, name, SL_COL_FLOAT64, SL_F64, 0, NULL);
        break;
    case PQ_OUT_FIXED:
        rc = l->fp16 ? sl_source__add_col(&s->base, name, SL_COL_ARRAY, SL_F16, ndim, var)
                     : sl_source__add_col(&s->base, name, SL_COL_ARRAY, SL_U8, 1, &shape1);
        break;
    default: {
        sl_dtype dt = l->dec.out == PQ_OUT_U64 ? SL_U64 : l->dec.out == PQ_OUT_F32 ? SL_F32
                                                                                  : SL_BOOL;
        rc = sl_source__add_col(&s->base, name, SL_COL_ARRAY, dt, ndim, var);
    }
    }
    if (rc < 0)
        return sl__error_prefix(rc, "%s", field);
    for (int k = c; k < s->base.ncols; k++) {
        sl_source_col *col = &s->base.col[k];
        s->slot[k] = slot;
        s->role[k] = k == c ? PQ_ROLE_VALUES : PQ_ROLE_LENGTHS;
        col->image = l->image;
        col->encoded = l->image;
        col->indexed = col->type == SL_COL_INT64;
    }
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
            if (s->base.ncols + leaf_ncols(&f->lf[k]) > SL_MAX_COLUMNS)
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

/* Every file's chunks for the chosen slots, checked against the first's
 * (invariant 2). */
static int match_files(pq_source *s) {
    const pq_file *f0 = &s->files[0];
    for (int i = 0; i < s->nfiles; i++) {
        pq_file *f = &s->files[i];
        for (int j = 0; j < s->nslots; j++) {
            const pq_lf *want = &f0->lf[s->slot_leaf[j]];
            int k = i == 0 ? s->slot_leaf[j] : -1;
            for (int q = 0; k < 0 && q < f->nlf; q++)
                if (!strcmp(f->lf[q].path, want->path))
                    k = q;
            if (k < 0)
                return sl__error(SL_EINVAL, "%s has no column '%s' (%s has it): give files of "
                                 "one schema", f->name, want->path, f0->name);
            const pq_lf *got = &f->lf[k];
            if (got->dec.type != want->dec.type || got->dec.max_rep != want->dec.max_rep ||
                got->dec.type_length != want->dec.type_length || got->dec.out != want->dec.out ||
                got->dec.conv != want->dec.conv || got->dec.scale != want->dec.scale)
                return sl__error(SL_EINVAL, "%s: column '%s' is %s%s, but %s in %s: give files "
                                 "of one schema", f->name, want->path, type_name(got->dec.type),
                                 got->list ? " (a list)" : "", type_name(want->dec.type),
                                 f0->name);
            if (got->why[0])
                return sl__error(SL_EUNSUPPORTED, "%s: column '%s': %s", f->name, want->path,
                                 got->why);
            f->chunk[j] = got->chunk;
        }
    }
    return SL_OK;
}

/* ---- arenas ------------------------------------------------------------------------- */

static pq_spares *spares_new(int max) {
    pq_spares *sp = sl__calloc(1, sizeof *sp);
    if (!sp)
        return NULL;
    atomic_init(&sp->refs, 1);
    pthread_mutex_init(&sp->mu, NULL);
    sp->max = max;
    return sp;
}

static void spares_release(pq_spares *sp) {
    if (!sp || atomic_fetch_sub(&sp->refs, 1) != 1)
        return;
    for (int k = 0; k < sp->n; k++)
        sl__free(sp->a[k].p);
    pthread_mutex_destroy(&sp->mu);
    sl__free(sp);
}

/* The source is gone: keep no more arenas. */
static void spares_close(pq_spares *sp) {
    if (!sp)
        return;
    pthread_mutex_lock(&sp->mu);
    sp->max = 0;
    for (int k = 0; k < sp->n; k++)
        sl__free(sp->a[k].p);
    sp->n = 0;
    pthread_mutex_unlock(&sp->mu);
    spares_release(sp);
}

/* An arena of at least n bytes: a spare that is large enough (its pages
 * already faulted in), else a new one (sl__malloc_big). */
static int arena_take(pq_spares *sp, size_t n, pq_arena *out) {
    memset(out, 0, sizeof *out);
    if (n == 0)
        return SL_OK;
    pthread_mutex_lock(&sp->mu);
    for (int k = 0; k < sp->n; k++) {
        if (sp->a[k].cap >= n) {
            *out = sp->a[k];
            sp->a[k] = sp->a[--sp->n];
            break;
        }
    }
    pthread_mutex_unlock(&sp->mu);
    out->used = 0;
    if (out->p)
        return SL_OK;
    out->p = sl__malloc_big(n, &out->cap);
    return out->p ? SL_OK : sl__oom("decoding a Parquet row group");
}

/* A dropped block's arena back for reuse, or freed. */
static void arena_give(pq_spares *sp, pq_arena *a) {
    if (!a->p)
        return;
    pthread_mutex_lock(&sp->mu);
    if (sp->n < sp->max) {
        sp->a[sp->n++] = *a;
        a->p = NULL;
    } else if (sp->n > 0) { /* keep the larger: later row groups fit it more often */
        int small = 0;
        for (int k = 1; k < sp->n; k++)
            if (sp->a[k].cap < sp->a[small].cap)
                small = k;
        if (sp->a[small].cap < a->cap) {
            pq_arena t = sp->a[small];
            sp->a[small] = *a;
            *a = t;
        }
    }
    pthread_mutex_unlock(&sp->mu);
    sl__free(a->p);
    a->p = NULL;
}

/* ---- blocks -------------------------------------------------------------------------- */

static void block_free(void *user) {
    pq_block *b = user;
    for (int j = 0; j < b->nslots; j++)
        pq_dcol_dispose(&b->col[j]);
    sl_buffer_release(b->map);
    if (b->spares) {
        arena_give(b->spares, &b->arena);
        spares_release(b->spares);
    }
    sl__free(b->arena.p);
    sl__free(b);
}

static pq_block *block_new(pq_source *s, int k) {
    pq_block *b = sl__calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->k = k;
    b->spares = s->spares;
    atomic_fetch_add(&s->spares->refs, 1);
    return b;
}

/* The block as a buffer views reference (its last release frees it). */
static int block_wrap(pq_block *b) {
    int rc = sl_buffer_wrap(&b->buf, b, sizeof *b, block_free, b);
    if (rc < 0)
        block_free(b);
    return rc;
}

static void block_release(pq_block *b) {
    if (b)
        sl_buffer_release(b->buf);
}

/* ---- remote files fetched whole -------------------------------------------------------- */

/* sl_io__open_checked's check of a file fetched whole (invariant 5): the
 * footer it ends with is the one the source opened, and every page of the
 * chosen chunks walks, with its CRC where written. */
typedef struct whole_ctx {
    const pq_source *s;
    const pq_file *f;
} whole_ctx;

static int chunk_range(const pq_source *s, const pq_file *f, int g, int j, uint64_t *start,
                       size_t *len);
static const char *slot_name(const pq_source *s, int j);

static int whole_check(sl_io *io, void *user) {
    const whole_ctx *x = user;
    const pq_file *f = x->f;
    const uint8_t *m = sl_io__map(io);
    if (!m)
        return SL_OK; /* not fetched whole: read by ranges, checked per chunk */
    uint64_t n = sl_io__size(io);
    if (n != f->size || memcmp(m + n - 8 - f->footer_len, f->footer, f->footer_len) ||
        memcmp(m + n - 4, PQ_MAGIC, 4))
        return sl__error(SL_ECORRUPT, "%s: the copy fetched whole does not end with the footer "
                         "read when it was opened (changed on the server, or damaged)", f->name);
    if (!x->s->verify)
        return SL_OK;
    for (int g = 0; g < f->meta.nrg; g++) {
        for (int j = 0; j < x->s->nslots; j++) {
            uint64_t start = 0;
            size_t len = 0;
            SL_TRY(chunk_range(x->s, f, g, j, &start, &len));
            int rc = pq_check_chunk(m + start, len, f->meta.rg[g].cols[f->chunk[j]].num_values);
            if (rc < 0)
                return sl__error_prefix(rc, "%s: fetched whole: row group %d, column '%s'",
                                        f->name, g, slot_name(x->s, j));
        }
    }
    return SL_OK;
}

/* The files' shard set's open of a remote file: fetched whole into the
 * shard cache (its bytes held as sl_shard_bytes), or found not to fit it
 * (data NULL: read by ranges). */
static int whole_open(void *user, int k, void **state_out) {
    pq_source *s = user;
    pq_file *f = &s->files[k];
    whole_ctx x = {s, f};
    sl_shard_bytes w = {0};
    /* the version the footer was read from: one version per run */
    int rc = sl_io__open_checked(&w.io, f->path, SL_IO_MAP | SL_IO_MAP_OR_RANGES | SL_IO_RANDOM,
                                 sl_io__version(f->io), whole_check, &x);
    if (rc == SL_OK)
        rc = sl_io__map_buffer(w.io, &w.buf);
    if (rc < 0) {
        sl_shard_bytes__dispose(&w);
        return rc;
    }
    if (w.buf) {
        w.data = sl_io__map(w.io);
        w.size = sl_io__size(w.io);
    } else { /* too big for the cache: ranges */
        sl_io__close(w.io);
        w.io = NULL;
    }
    return sl_shard_bytes__keep(&w, "opening a Parquet file", state_out);
}

/* ---- row groups: decoding ------------------------------------------------------------ */

/* The first column reading slot j (for messages). */
static const char *slot_name(const pq_source *s, int j) {
    for (int c = 0; c < s->base.ncols; c++)
        if (s->slot[c] == j)
            return s->base.col[c].name;
    return "?";
}

/* The stored bytes of slot j's chunk in row group g of file f: [*start,
 * *start + *len), checked against the file (invariant 2). */
static int chunk_range(const pq_source *s, const pq_file *f, int g, int j, uint64_t *start,
                       size_t *len) {
    const pq_chunk *ch = &f->meta.rg[g].cols[f->chunk[j]];
    const char *col = slot_name(s, j);
    if (!ch->has_meta)
        return sl__error(SL_ECORRUPT, "%s: row group %d, column '%s': the footer has no "
                         "meta_data for its chunk", f->name, g, col);
    if (ch->external)
        return sl__error(SL_EUNSUPPORTED, "%s: row group %d, column '%s': the chunk lives in "
                         "another file (file_path): not supported", f->name, g, col);
    if (ch->type != f->lf[f->chunk[j]].dec.type)
        return sl__error(SL_ECORRUPT, "%s: row group %d, column '%s': the chunk is %s, the "
                         "schema says %s", f->name, g, col, type_name(ch->type),
                         type_name(f->lf[f->chunk[j]].dec.type));
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

/* What decoding reads from: the bytes, and the buffer (a mapping) that
 * byte arrays of uncompressed pages may point into, or NULL. */
typedef struct pq_src_bytes {
    const uint8_t *p;
    sl_buffer *owner;
} pq_src_bytes;

/* Read [start, start + len) of a remote file by a range request on `io`
 * into a buffer `out` keeps. `tries` reads when what they bring fails
 * `decode` with SL_ECORRUPT (a transfer's damage heals). */
typedef int (*pq_decode_fn)(void *ctx, const uint8_t *p, pq_dcol *out);

static int decode_ranges(sl_io *io, uint64_t start, size_t len, int tries, pq_decode_fn fn,
                         void *ctx, pq_dcol *out, const char *what, const char *first_in) {
    char first[SL__ERRMSG_MAX];
    snprintf(first, sizeof first, "%s", first_in ? first_in : "");
    int rc = SL_OK;
    for (int attempt = 0; attempt < tries; attempt++) {
        uint8_t *buf = sl__malloc(len ? len : 1);
        if (!buf)
            return sl__oom("reading a Parquet column chunk");
        rc = sl_io__read(io, buf, len, start);
        if (rc == SL_OK)
            rc = fn(ctx, buf, out);
        if (rc == SL_OK) /* byte arrays may point into it */
            return pq_dcol_keep(out, buf, len);
        sl__free(buf);
        if (rc != SL_ECORRUPT)
            return rc;
        pq_dcol_dispose(out);
        if (first[0])
            return sl__error_prefix(rc, "damaged twice (the first read: %s); the second read",
                                    first);
        snprintf(first, sizeof first, "%s", sl_errmsg());
        if (attempt + 1 < tries)
            SL_LOG_WARN("%s: %s; reading it again", what, first);
    }
    return rc;
}

typedef struct chunk_job {
    const pq_source *s;
    const pq_leaf *lf;
    const pq_chunk *ch;
    size_t len;
    int64_t nrows;
    pq_arena *arena;
} chunk_job;

static int decode_chunk_fn(void *ctx, const uint8_t *p, pq_dcol *out) {
    const chunk_job *j = ctx;
    return pq_decode_chunk(j->lf, j->ch, p, j->len, j->nrows, j->s->verify, j->arena, out);
}

/* Decode slot j of row group g of file f into `out`; *map_out gets a
 * reference to the mapping byte arrays may point into (or stays NULL). A
 * remote chunk that fails its checks is read once more (invariant 5). */
static int decode_column(pq_source *s, pq_file *f, int fk, int g, int j, pq_arena *arena,
                         pq_dcol *out, sl_buffer **map_out) {
    uint64_t start = 0;
    size_t len = 0;
    SL_TRY(chunk_range(s, f, g, j, &start, &len));
    chunk_job job = {s, &f->lf[f->chunk[j]].dec, &f->meta.rg[g].cols[f->chunk[j]], len,
                     f->meta.rg[g].num_rows, arena};
    char what[400];
    snprintf(what, sizeof what, "%s: row group %d, column '%s'", f->name, g, slot_name(s, j));
    int rc;
    if (f->map) {
        rc = decode_chunk_fn(&job, f->map + start, out);
        if (rc == SL_OK && !*map_out)
            *map_out = sl_buffer_retain(f->mapbuf);
    } else if (s->wholes) {
        void *st;
        rc = sl_shard_set__get(s->wholes, fk, &st);
        if (rc < 0)
            return rc; /* the message names the file */
        const sl_shard_bytes *w = st;
        if (w->data) {
            rc = decode_chunk_fn(&job, w->data + start, out);
            if (rc == SL_OK && !*map_out)
                *map_out = sl_buffer_retain(w->buf);
            if (rc == SL_ECORRUPT) {
                /* the shard cache's copy is damaged where no CRC looked: drop
                 * it and read this chunk once more by a range request, on an
                 * io of its own (the footer's may read from that copy) */
                char first[SL__ERRMSG_MAX];
                snprintf(first, sizeof first, "%s", sl_errmsg());
                pq_dcol_dispose(out);
                sl_io__forget(w->io);
                SL_LOG_WARN("%s: %s (the shard cache's copy, dropped); reading the chunk again",
                            what, first);
                sl_io *fresh = NULL;
                rc = sl_io__open_version(&fresh, f->path, 0, sl_io__version(f->io));
                if (rc == SL_OK)
                    rc = decode_ranges(fresh, start, len, 1, decode_chunk_fn, &job, out, what,
                                       first);
                sl_io__close(fresh);
            }
        } else {
            rc = decode_ranges(f->io, start, len, 2, decode_chunk_fn, &job, out, what, NULL);
        }
        sl_shard_set__put(s->wholes, fk);
    } else {
        rc = decode_ranges(f->io, start, len, 2, decode_chunk_fn, &job, out, what, NULL);
    }
    if (rc < 0)
        return sl__error_prefix(rc, "row group %d, column '%s'", g, slot_name(s, j));
    return SL_OK;
}

/* The bytes a row group's arena needs: the decompressed pages of the
 * chunks whose values point into them (byte arrays), from the footer. */
static size_t arena_bytes(const pq_source *s, const pq_file *f, int g) {
    uint64_t n = 0;
    for (int j = 0; j < s->nslots; j++) {
        const pq_chunk *ch = &f->meta.rg[g].cols[f->chunk[j]];
        if (f->lf[f->chunk[j]].dec.out == PQ_OUT_BIN && ch->codec != PQ_UNCOMPRESSED &&
            ch->total_uncompressed > 0)
            n += (uint64_t)ch->total_uncompressed;
    }
    return n > PQ_MAX_ARENA ? (size_t)PQ_MAX_ARENA : (size_t)n;
}

/* The shard set's open: decode every chosen slot of source row group k. */
static int block_open(void *user, int k, void **state_out) {
    pq_source *s = user;
    const pq_rgref *r = &s->rgs[k];
    pq_file *f = &s->files[r->file];
    atomic_store(&s->busy[k], 1);
    atomic_fetch_add(&s->decoding, 1);
    pq_block *b = block_new(s, k);
    int rc = SL_OK;
    if (!b)
        SL_FAIL(SL_ENOMEM, "out of memory decoding a Parquet row group");
    b->lo = 0;
    b->hi = r->nrows;
    rc = arena_take(s->spares, arena_bytes(s, f, r->rg), &b->arena);
    for (int j = 0; rc == SL_OK && j < s->nslots; j++) {
        b->nslots = j + 1;
        rc = decode_column(s, f, r->file, r->rg, j, &b->arena, &b->col[j], &b->map);
    }
    if (rc < 0) {
        block_free(b);
        goto cleanup;
    }
    SL_CHECK(block_wrap(b));
    atomic_fetch_add(&s->rg_decodes, 1);
    atomic_store(&s->page_reads[k], 0);
    *state_out = b;
cleanup:
    atomic_fetch_sub(&s->decoding, 1);
    atomic_store(&s->busy[k], 0);
    return rc;
}

static void block_close(void *user, int k, void *state) {
    (void)user;
    (void)k;
    block_release(state);
}

/* A block some batch (or cursor) still holds a view of is dropped last. */
static bool block_held(void *user, int k, void *state) {
    (void)user;
    (void)k;
    const pq_block *b = state;
    return sl_buffer_refcount(b->buf) > 1;
}

/* ---- the page index: a row's pages alone ------------------------------------------------ */

static void pidx_free(pq_source *s) {
    for (int k = 0; s->pidx && k < s->nrg; k++)
        for (int j = 0; j < s->nslots; j++)
            sl__free(s->pidx[k].locs[j]);
    sl__free(s->pidx);
    s->pidx = NULL;
}

/* The offset indexes of file f's chosen chunks, for its row groups in
 * s->rgs from index k0 on: read (in one range when they lie together, as
 * writers put them, before the footer) and parsed. A file whose index is
 * missing for a chunk, or does not parse, or names pages outside the chunk,
 * has its row groups read whole (a warning says why; nothing fails). */
static int load_file_pidx(pq_source *s, int fi, int k0) {
    pq_file *f = &s->files[fi];
    uint64_t lo = UINT64_MAX, hi = 0;
    int have = 1;
    for (int k = k0; k < s->nrg && s->rgs[k].file == fi; k++)
        for (int j = 0; j < s->nslots; j++) {
            const pq_chunk *ch = &f->meta.rg[s->rgs[k].rg].cols[f->chunk[j]];
            if (ch->oi_offset < 4 || ch->oi_length <= 0 ||
                (uint64_t)ch->oi_offset + (uint64_t)ch->oi_length > f->size)
                have = 0;
            else {
                lo = (uint64_t)ch->oi_offset < lo ? (uint64_t)ch->oi_offset : lo;
                hi = (uint64_t)(ch->oi_offset + ch->oi_length) > hi
                         ? (uint64_t)(ch->oi_offset + ch->oi_length)
                         : hi;
            }
        }
    if (!have) {
        atomic_store(&f->no_page_index, 1);
        return SL_OK;
    }
    uint8_t *span = NULL;
    const uint8_t *base = NULL;
    if (f->map) {
        base = f->map + lo;
    } else if (hi - lo <= PQ_OI_SPAN) {
        if (!(span = sl__malloc((size_t)(hi - lo))))
            return sl__oom("reading a Parquet page index");
        int rc = sl_io__read(f->io, span, (size_t)(hi - lo), lo);
        if (rc < 0) {
            sl__free(span);
            return rc;
        }
        base = span;
    }
    int rc = SL_OK;
    for (int k = k0; rc == SL_OK && k < s->nrg && s->rgs[k].file == fi; k++) {
        pq_pidx *px = &s->pidx[k];
        const int g = s->rgs[k].rg;
        for (int j = 0; rc == SL_OK && j < s->nslots; j++) {
            const pq_chunk *ch = &f->meta.rg[g].cols[f->chunk[j]];
            uint8_t *own = NULL;
            const uint8_t *p;
            if (base) {
                p = base + ((uint64_t)ch->oi_offset - lo);
            } else {
                if (!(own = sl__malloc((size_t)ch->oi_length)))
                    rc = sl__oom("reading a Parquet page index");
                else
                    rc = sl_io__read(f->io, own, (size_t)ch->oi_length, (uint64_t)ch->oi_offset);
                p = own;
            }
            if (rc == SL_OK)
                rc = pq_offset_index_parse(p, (size_t)ch->oi_length, &px->locs[j], &px->n[j]);
            sl__free(own);
            uint64_t start;
            size_t len;
            if (rc == SL_OK && (rc = chunk_range(s, f, g, j, &start, &len)) == SL_OK) {
                const pq_pageloc *L = px->locs[j];
                int n = px->n[j];
                if ((uint64_t)L[0].offset < start ||
                    (uint64_t)(L[n - 1].offset + L[n - 1].size) > start + len ||
                    L[n - 1].first_row >= s->rgs[k].nrows)
                    rc = sl__error(SL_ECORRUPT, "offset index: pages outside the chunk or past "
                                   "its rows");
            }
            if (rc == SL_OK && px->n[j] > px->pages)
                px->pages = px->n[j];
            if (rc == SL_ECORRUPT || rc == SL_EUNSUPPORTED) {
                SL_LOG_WARN("%s: row group %d, column '%s': %s; its row groups are read whole",
                            f->name, g, slot_name(s, j), sl_errmsg());
                atomic_store(&f->no_page_index, 1);
                rc = SL_OK;
                k = s->nrg; /* the file's other indexes are not read */
                break;
            }
        }
    }
    sl__free(span);
    return rc;
}

/* At open, when the cache cannot keep every row group: the offset indexes,
 * so that a row whose row group is not cached costs its pages alone. */
static int load_page_index(pq_source *s) {
    s->has_page_index = 1;
    for (int k = 0; k < s->nrg; k++) {
        const pq_file *f = &s->files[s->rgs[k].file];
        for (int j = 0; j < s->nslots; j++)
            if (f->meta.rg[s->rgs[k].rg].cols[f->chunk[j]].oi_offset < 0)
                s->has_page_index = 0;
    }
    if (s->cache_rgs >= s->nrg)
        return SL_OK; /* every row group stays: each is decoded once, whole */
    s->pidx = sl__calloc((size_t)s->nrg, sizeof *s->pidx);
    if (!s->pidx)
        return sl__oom("opening a Parquet source");
    for (int k = 0; k < s->nrg;) {
        int fi = s->rgs[k].file;
        SL_TRY(load_file_pidx(s, fi, k));
        while (k < s->nrg && s->rgs[k].file == fi)
            k++;
    }
    return SL_OK;
}

/* Whether row r of row group k is read by its pages (see the top). */
static int page_path(pq_source *s, int k) {
    if (!s->pidx || atomic_load_explicit(&s->files[s->rgs[k].file].no_page_index,
                                          memory_order_relaxed))
        return 0;
    const pq_pidx *px = &s->pidx[k];
    if (!px->pages)
        return 0;
    /* rent or buy: once as many pages were decoded as the row group has,
     * decoding it whole would have cost no more */
    return atomic_load_explicit(&s->page_reads[k], memory_order_relaxed) < px->pages;
}

/* The page of slot j's chunk holding row r: its index. */
static int page_of(const pq_pidx *px, int j, int64_t r) {
    const pq_pageloc *L = px->locs[j];
    int lo = 0, hi = px->n[j] - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (L[mid].first_row <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

typedef struct page_job {
    const pq_source *s;
    const pq_leaf *lf;
    int codec;
    size_t dict_n, n;
    int64_t nrows;
} page_job;

/* Decode a page range whose bytes are p: the dictionary (dict_n bytes)
 * then the pages (n bytes), back to back. */
static int decode_pages_fn(void *ctx, const uint8_t *p, pq_dcol *out) {
    const page_job *j = ctx;
    return pq_decode_pages(j->lf, j->codec, p, j->dict_n, p + j->dict_n, j->n, j->nrows,
                           j->s->verify, NULL, out);
}

/* A page block for row r of row group k: for each slot, the page that holds
 * r (and its chunk's dictionary page). */
static int page_block(pq_source *s, int k, int64_t r, pq_block **out) {
    const pq_rgref *ref = &s->rgs[k];
    pq_file *f = &s->files[ref->file];
    const pq_pidx *px = &s->pidx[k];
    pq_block *b = block_new(s, k);
    if (!b)
        return sl__oom("decoding a Parquet page");
    int rc = SL_OK;
    b->lo = 0;
    b->hi = ref->nrows;
    for (int j = 0; rc == SL_OK && j < s->nslots; j++) {
        b->nslots = j + 1;
        int p = page_of(px, j, r);
        const pq_pageloc *L = &px->locs[j][p];
        int64_t first = L->first_row;
        int64_t end = p + 1 < px->n[j] ? L[1].first_row : ref->nrows;
        uint64_t start;
        size_t len;
        SL_CHECK(chunk_range(s, f, ref->rg, j, &start, &len));
        const pq_chunk *ch = &f->meta.rg[ref->rg].cols[f->chunk[j]];
        /* what lies before the first data page is the dictionary page */
        size_t dict_n = (size_t)((uint64_t)px->locs[j][0].offset - start);
        page_job job = {s, &f->lf[f->chunk[j]].dec, ch->codec, dict_n, (size_t)L->size,
                        end - first};
        b->base[j] = first;
        b->lo = first > b->lo ? first : b->lo;
        b->hi = end < b->hi ? end : b->hi;
        char what[400];
        snprintf(what, sizeof what, "%s: row group %d, column '%s', page %d", f->name, ref->rg,
                 slot_name(s, j), p);
        if (f->map) {
            /* the dictionary and the page are not back to back: decode in place */
            rc = pq_decode_pages(job.lf, job.codec, f->map + start, dict_n,
                                 f->map + L->offset, job.n, job.nrows, s->verify, NULL,
                                 &b->col[j]);
            if (rc == SL_OK && !b->map)
                b->map = sl_buffer_retain(f->mapbuf);
        } else {
            /* remote: the dictionary and the page, each a range (two reads
             * into one buffer), checked and read again once when damaged */
            rc = SL_OK;
            for (int attempt = 0; attempt < 2; attempt++) {
                uint8_t *buf = sl__malloc(dict_n + job.n ? dict_n + job.n : 1);
                if (!buf)
                    SL_FAIL(SL_ENOMEM, "out of memory reading a Parquet page");
                rc = dict_n ? sl_io__read(f->io, buf, dict_n, start) : SL_OK;
                if (rc == SL_OK)
                    rc = sl_io__read(f->io, buf + dict_n, job.n, (uint64_t)L->offset);
                if (rc == SL_OK)
                    rc = decode_pages_fn(&job, buf, &b->col[j]);
                if (rc == SL_OK) {
                    rc = pq_dcol_keep(&b->col[j], buf, dict_n + job.n);
                    break;
                }
                sl__free(buf);
                if (rc != SL_ECORRUPT || attempt)
                    break;
                pq_dcol_dispose(&b->col[j]);
                SL_LOG_WARN("%s: %s; reading it again", what, sl_errmsg());
            }
        }
        if (rc < 0)
            rc = sl__error_prefix(rc, "%s", what);
    }
    SL_CHECK(rc);
    if (r < b->lo || r >= b->hi)
        SL_FAIL(SL_ECORRUPT, "%s: row group %d: the offset index puts row %" PRId64 " outside "
                "its pages", f->name, ref->rg, r);
    SL_TRY(block_wrap(b)); /* frees b on failure */
    atomic_fetch_add(&s->page_decodes, 1);
    atomic_fetch_add(&s->page_reads[k], 1);
    *out = b;
    return SL_OK;
cleanup:
    block_free(b);
    return rc;
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

static int cursor_open(sl_source *src, sl_source_cursor **out) {
    (void)src;
    return sl_source__cursor_new(sizeof(pq_cursor), "opening a Parquet cursor", out);
}

static void cursor_free(sl_source *src, sl_source_cursor *base) {
    (void)src;
    pq_cursor *c = (pq_cursor *)base;
    block_release(c->blk);
    block_release(c->pg);
    sl__free(c);
}

/* The executor will read record i soon: remember its row group (a hint for
 * a reader that would otherwise wait; no lock, no allocation). */
static void pq_prefetch(sl_source *src, uint64_t i, int far) {
    pq_source *s = (pq_source *)src;
    if (far != 1 || i >= src->count)
        return;
    int k = rg_of(s, i);
    unsigned n = atomic_load_explicit(&s->nhint, memory_order_relaxed);
    if (n && atomic_load_explicit(&s->hint[(n - 1) % PQ_HINTS], memory_order_relaxed) == k)
        return;
    n = atomic_fetch_add_explicit(&s->nhint, 1, memory_order_relaxed);
    atomic_store_explicit(&s->hint[n % PQ_HINTS], k, memory_order_relaxed);
}

/* Row group j may be decoded ahead: not cached, not being decoded, not
 * failed, and the cache has room for it without dropping another. Claims it
 * (busy) when so. */
static int claim_ahead(pq_source *s, int j, int all, const sl_shard_set_stats *st) {
    if (j < 0 || j >= s->nrg || atomic_load(&s->busy[j]) ||
        sl_shard_set__peek(s->cache, j) != NULL)
        return 0;
    if (!all && st->open_now + atomic_load(&s->decoding) >= st->max_open)
        return 0;
    if (sl_shard_set__failed(s->cache, j) < 0)
        return 0;
    unsigned char z = 0;
    return atomic_compare_exchange_strong(&s->busy[j], &z, 1);
}

/* Another thread decodes row group k, which this one wants: rather than
 * wait, decode one it will want next (the executor's hints, newest first,
 * else the following row groups) while there is room. */
static void decode_ahead(pq_source *s, int k) {
    int all = sl_shard_set__keeps_all(s->cache);
    sl_shard_set_stats st;
    memset(&st, 0, sizeof st);
    if (!all)
        sl_shard_set__stats(s->cache, &st);
    int j = -1;
    unsigned n = atomic_load(&s->nhint);
    for (unsigned h = 0; h < PQ_HINTS && h < n && j < 0; h++) {
        int c = atomic_load(&s->hint[(n - 1 - h) % PQ_HINTS]);
        if (c != k && claim_ahead(s, c, all, &st))
            j = c;
    }
    for (int a = 1; a <= PQ_AHEAD && j < 0; a++)
        if (claim_ahead(s, k + a, all, &st))
            j = k + a;
    if (j < 0)
        return;
    void *state;
    /* a failure is the set's to remember and its rows' to report */
    if (sl_shard_set__get(s->cache, j, &state) == SL_OK)
        sl_shard_set__put(s->cache, j);
    atomic_store(&s->busy[j], 0);
}

/* The block that holds row r of row group k for this cursor (its own when
 * it still serves), held by the cursor until it moves on. `*lives` says the
 * block stays as long as the source does (a cache that keeps every row
 * group): views of it need no reference of their own. */
static int find_block(pq_source *s, pq_cursor *cur, int k, int64_t r, uint64_t i,
                      const pq_block **out, int *lives) {
    const int all = sl_shard_set__keeps_all(s->cache);
    *lives = 0;
    pq_block *b = cur->blk;
    if (b && b->k == k && (all || sl_shard_set__peek(s->cache, k) == b)) {
        *out = b;
        *lives = all;
        return SL_OK;
    }
    pq_block *pg = cur->pg;
    if (pg && pg->k == k && r >= pg->lo && r < pg->hi) {
        *out = pg;
        return SL_OK;
    }
    if (b) { /* another row group, or this one dropped from the cache */
        cur->blk = NULL;
        block_release(b);
    }
    if (all && (b = sl_shard_set__peek(s->cache, k)) != NULL) {
        sl_buffer_retain(b->buf);
        cur->blk = b;
        *out = b;
        *lives = 1;
        return SL_OK;
    }
    const pq_rgref *ref = &s->rgs[k];
    const pq_file *f = &s->files[ref->file];
    if (page_path(s, k) && sl_shard_set__peek(s->cache, k) == NULL) {
        pq_block *nb = NULL;
        int rc = page_block(s, k, r, &nb);
        if (rc == SL_OK) {
            block_release(cur->pg);
            cur->pg = nb;
            *out = nb;
            return SL_OK;
        }
        if (rc == SL_ENOMEM)
            return sl__error_prefix(rc, "%s: record %" PRIu64, f->name, i - f->first);
        /* the offset index led astray: the row group whole tells */
        SL_LOG_WARN("%s; reading %s's row groups whole", sl_errmsg(), f->name);
        atomic_store(&s->files[ref->file].no_page_index, 1);
    }
    if (atomic_load_explicit(&s->busy[k], memory_order_relaxed))
        decode_ahead(s, k);
    void *st;
    SL_TRY(sl_source__shard_get(s->cache, k, f->name, i - f->first, &st));
    b = st;
    sl_buffer_retain(b->buf);
    cur->blk = b;
    sl_shard_set__put(s->cache, k);
    *out = b;
    *lives = all;
    return SL_OK;
}

/* Column c of row r of block b as a view (or, for a list of strings, a
 * copy: its values lie apart) into *t. */
static int read_col(pq_source *s, pq_cursor *cur, const pq_block *b, int c, int64_t r,
                    uint64_t i, int lives, sl_tensor *t) {
    sl_source *src = &s->base;
    const int j = s->slot[c];
    const pq_dcol *d = &b->col[j];
    const sl_source_col *col = &src->col[c];
    const int64_t rr = r - b->base[j];
    const uint8_t null = d->nulls ? d->nulls[rr] : 0;
    memset(t, 0, sizeof *t);
    if (null == 2)
        return null_error(src, i, c, d->in_off ? "is a list of lists holding a null (lists "
                                                 "without nulls are read)"
                                               : "is a list holding a null element (lists "
                                                 "without nulls are read)");
    if (d->row_off && !d->w) { /* a list of strings or byte arrays */
        int64_t a = d->row_off[rr], e = d->row_off[rr + 1];
        int64_t n = e - a;
        if (s->role[c] == PQ_ROLE_LENGTHS) {
            SL_TRY(cur->base.alloc(cur->base.alloc_ctx, t, SL_I64, 1, &n));
            for (int64_t q = 0; q < n; q++)
                ((int64_t *)t->data)[q] = d->vl[a + q];
            return SL_OK;
        }
        int64_t total = 0;
        for (int64_t q = a; q < e; q++)
            total += d->vl[q];
        SL_TRY(cur->base.alloc(cur->base.alloc_ctx, t, SL_U8, 1, &total));
        uint8_t *o = t->data;
        for (int64_t q = a; q < e; q++) {
            if (d->vl[q])
                memcpy(o, d->vp[q], d->vl[q]);
            o += d->vl[q];
        }
        return SL_OK;
    }
    if (d->in_off) { /* a list of lists: a 2-D array when its inner lists agree */
        int64_t a = d->row_off[rr], e = d->row_off[rr + 1];
        int64_t inner = e > a ? d->in_off[a + 1] - d->in_off[a] : 0;
        for (int64_t q = a + 1; q < e; q++) {
            int64_t len = d->in_off[q + 1] - d->in_off[q];
            if (len != inner) {
                char why[200];
                snprintf(why, sizeof why, "is a list of lists of different lengths (%" PRId64
                         " and %" PRId64 "): it reads as a 2-D array when they agree", inner, len);
                return null_error(src, i, c, why);
            }
        }
        t->data = d->vals ? d->vals + (size_t)d->in_off[a] * (size_t)d->w : NULL;
        t->ndim = 2;
        t->shape[0] = e - a;
        t->shape[1] = inner;
        t->nbytes = (size_t)((e - a) * inner) * (size_t)d->w;
        t->dtype = col->dtype;
    } else if (d->row_off) { /* a list */
        int64_t a = d->row_off[rr], e = d->row_off[rr + 1];
        t->data = d->vals ? d->vals + (size_t)a * (size_t)d->w : NULL;
        t->nbytes = (size_t)(e - a) * (size_t)d->w;
        t->dtype = col->dtype;
        t->ndim = 1;
        t->shape[0] = e - a;
    } else if (!d->w) { /* bytes, text: where they were decoded (no copy) */
        t->data = (void *)(uintptr_t)d->vp[rr];
        t->nbytes = d->vl[rr];
        t->dtype = SL_U8;
        t->ndim = 1;
        t->shape[0] = (int64_t)d->vl[rr];
    } else {
        if (null && col->dtype != SL_F32 && col->dtype != SL_F64)
            return null_error(src, i, c, "is null (an integer, boolean or fixed-size column has "
                                         "no null value; choose other columns, or fill the "
                                         "nulls when writing)");
        t->data = d->vals + (size_t)rr * (size_t)d->w;
        t->nbytes = (size_t)d->w;
        t->dtype = col->dtype;
        t->ndim = col->ndim;
        t->shape[0] = col->ndim ? col->shape[0] : 0;
    }
    t->device = SL_DEVICE_CPU;
    /* a block that lives as long as the source is borrowed where the
     * caller allows (one atomic less per column and row) */
    t->buf = lives && cur->base.borrow ? NULL : sl_buffer_retain(b->buf);
    return SL_OK;
}

static int pq_read(sl_source *src, sl_source_cursor *cbase, uint64_t i, sl_sample *out) {
    pq_source *s = (pq_source *)src;
    pq_cursor *cur = (pq_cursor *)cbase;
    int k = rg_of(s, i);
    int64_t r = (int64_t)(i - s->rgs[k].first);
    const pq_block *b = NULL;
    int lives;
    SL_TRY(find_block(s, cur, k, r, i, &b, &lives));
    for (int c = 0; c < src->ncols; c++) {
        int rc = read_col(s, cur, b, c, r, i, lives, &out->col[c]);
        if (rc < 0) {
            out->ncols = (uint32_t)c;
            sl_sample_clear(out);
            out->ncols = 0;
            return rc;
        }
        out->ncols = (uint32_t)c + 1;
    }
    out->index = i;
    return SL_OK;
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
    *v = w == 4 ? (lf->conv == PQ_CONV_U32 ? (int64_t)sl__ld32(st->min.p)
                                           : (int64_t)(int32_t)sl__ld32(st->min.p))
                : (int64_t)sl__ld64(st->min.p);
    return 1;
}

static int fill_index_values(sl_source *src, int64_t *const *vals) {
    pq_source *s = (pq_source *)src;
    for (int k = 0; k < s->nrg; k++) {
        const pq_rgref *r = &s->rgs[k];
        pq_file *f = &s->files[r->file];
        for (int c = 0; c < src->ncols; c++) {
            if (!vals[c])
                continue;
            const int j = s->slot[c];
            const pq_chunk *ch = &f->meta.rg[r->rg].cols[f->chunk[j]];
            const pq_leaf *lf = &f->lf[f->chunk[j]].dec;
            int64_t v;
            if (ch->has_meta && stats_constant(ch, lf, &v)) { /* no page read */
                for (int64_t q = 0; q < r->nrows; q++)
                    vals[c][r->first + (uint64_t)q] = v;
                continue;
            }
            pq_dcol d;
            sl_buffer *map = NULL;
            int rc = decode_column(s, f, r->file, r->rg, j, NULL, &d, &map);
            if (rc < 0)
                rc = sl__error_prefix(rc, "%s", f->name);
            if (rc == SL_OK && d.nulls)
                rc = sl__error(SL_EDECODE, "%s: row group %d, column '%s' holds nulls: a filter "
                               "on it cannot be answered", f->name, r->rg, src->col[c].name);
            if (rc == SL_OK)
                memcpy(&vals[c][r->first], d.vals, (size_t)r->nrows * sizeof(int64_t));
            pq_dcol_dispose(&d);
            sl_buffer_release(map);
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
        !cJSON_AddBoolToObject(obj, "huggingface", s->hf) ||
        !cJSON_AddBoolToObject(obj, "page_index", s->has_page_index) ||
        !cJSON_AddStringToObject(obj, "random_access",
                                 s->pidx && s->has_page_index ? "page" : "row_group") ||
        !cJSON_AddNumberToObject(obj, "row_groups_decoded", (double)atomic_load(&s->rg_decodes)) ||
        !cJSON_AddNumberToObject(obj, "pages_decoded", (double)atomic_load(&s->page_decodes)))
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
    sl_shard_set__free(s->wholes);
    spares_close(s->spares);
    pidx_free(s);
    for (int i = 0; s->files && i < s->nfiles; i++)
        file_dispose(&s->files[i]);
    sl__free(s->files);
    sl__free(s->rgs);
    sl__free((void *)s->page_reads);
    sl__free((void *)s->busy);
    sl_source__ivals_dispose(&s->ivals);
    sl__free(s);
}

static const sl_source_vtbl pq_vtbl = {
    .repair = "a Parquet file is rewritten by the tool that wrote it (pyarrow, datasets); the "
              "other row groups read on",
    .cursor_open = cursor_open,
    .cursor_free = cursor_free,
    .read = pq_read,
    .prefetch = pq_prefetch,
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
 * decoded estimate: the chosen columns' uncompressed chunk sizes. When not
 * every row group fits, PQ_SPARES arenas of dropped blocks are kept for the
 * next decodes, counted out of the same bytes. */
static int size_cache(pq_source *s, int *spares_out) {
    uint64_t max = 1, total = 0;
    for (int k = 0; k < s->nrg; k++) {
        const pq_file *f = &s->files[s->rgs[k].file];
        uint64_t est = 0;
        for (int j = 0; j < s->nslots; j++) {
            const pq_chunk *ch = &f->meta.rg[s->rgs[k].rg].cols[f->chunk[j]];
            est += ch->total_uncompressed > 0 ? (uint64_t)ch->total_uncompressed : 0;
            s->codecs |= ch->codec >= 0 && ch->codec < 8 ? 1u << ch->codec : 0;
            total += ch->total_compressed > 0 ? (uint64_t)ch->total_compressed : 0;
        }
        est += (uint64_t)s->rgs[k].nrows * 8u * (uint64_t)s->nslots; /* offsets */
        if (est > max)
            max = est;
    }
    s->est_max_rg = max;
    uint64_t n = s->cache_bytes / max;
    int spares = 0;
    if (n < (uint64_t)s->nrg && n >= 2 + PQ_SPARES) {
        spares = PQ_SPARES;
        n -= PQ_SPARES;
    }
    if (n < 1)
        n = 1;
    if (n > (uint64_t)s->nrg)
        n = (uint64_t)s->nrg;
    s->cache_rgs = (int)n;
    s->base.record_bytes = s->base.count ? total / s->base.count : 0;
    s->base.held_bytes = ((uint64_t)s->cache_rgs + (uint64_t)spares) * s->est_max_rg;
    *spares_out = spares;
    return SL_OK;
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
    for (int h = 0; h < PQ_HINTS; h++)
        atomic_init(&s->hint[h], -1);
    s->verify = o.verify;
    s->cache_bytes = o.cache_bytes;
    s->files = sl__calloc((size_t)n, sizeof *s->files);
    if (!s->files)
        SL_FAIL(SL_ENOMEM, "out of memory opening %d Parquet files", n);
    int remote = 0;
    for (int k = 0; k < n; k++) {
        s->files[k].path = pv[k];
        pv[k] = NULL;
        s->files[k].name = sl_io__short_name(s->files[k].path);
        remote |= sl_io__is_url(s->files[k].path);
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
    s->page_reads = sl__calloc((size_t)(nrg ? nrg : 1), sizeof *s->page_reads);
    s->busy = sl__calloc((size_t)(nrg ? nrg : 1), sizeof *s->busy);
    if (!s->rgs || !s->page_reads || !s->busy)
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
    int spares;
    SL_CHECK(size_cache(s, &spares));
    if (!(s->spares = spares_new(spares)))
        SL_FAIL(SL_ENOMEM, "out of memory opening a Parquet source");
    SL_CHECK(load_page_index(s));
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
    if (remote) /* fetched whole into the shard cache when it is on and they fit */
        SL_CHECK(sl_shard_set__create(&s->wholes, n, SL_SHARD_SET_OPEN_REMOTE,
                                      &(sl_shard_set_ops){.open = whole_open,
                                                          .close = sl_shard_bytes__close},
                                      s));
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
