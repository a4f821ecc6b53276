/*
 * source.h — internals of the source layer shared by its files: input kind
 * sniffing, image content checks, the two packers. Never installed.
 */
#ifndef SL_SOURCE_H
#define SL_SOURCE_H

#include "core/core.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* What the first bytes of a file say it is. */
typedef enum {
    SL_SNIFF_OTHER = 0,
    SL_SNIFF_IDX_IMAGES,   /* IDX with 2+ dims */
    SL_SNIFF_IDX_LABELS,   /* IDX with 1 dim */
    SL_SNIFF_GZIP          /* gzip: look inside with sl_source__sniff_path */
} sl_source__sniff_kind;

/* Classify a file by content (gzip is opened and its first bytes read).
 * `*kind_out` is SL_SNIFF_OTHER for anything that is neither IDX kind.
 * Returns SL_OK, or SL_EIO / SL_ENOMEM with a message naming `path`. */
int sl_source__sniff_path(const char *path, sl_source__sniff_kind *kind_out);

/* Check that `data` holds an image by its content (JPEG header via
 * TurboJPEG, PNG signature + IHDR, BMP/PPM/PGM/TIFF/WebP by magic).
 * `tj` is a TurboJPEG decompressor owned by the calling thread (NULL makes
 * one for this call). Returns SL_OK, or SL_EDECODE with a message giving the
 * cause (not the path: the caller prefixes it). */
int sl_source__check_image(void *tj, const uint8_t *data, size_t n);

/* Record what a skipped input was in the report (first few only). */
void sl_source__report_bad(sl_pack_report *rep, const char *line);

/* The packers; `opts` is never NULL here and `rep` is zeroed by the caller. */
int sl_source__pack_imagefolder(const char *root, const char *dst,
                                const sl_pack_options *opts, sl_pack_report *rep);
int sl_source__pack_idx(const char *a, const char *b, const char *dst,
                        const sl_pack_options *opts, sl_pack_report *rep);


/* ==========================================================================
 * The source interface
 *
 * A source yields records as samples: a fixed list of named, typed columns.
 * Every format (.slr, memory, TFRecord, WebDataset tar, ImageFolder, IDX) is
 * one implementation of `sl_source__vtbl` in its own file of this folder, and
 * one line in the registry (source.c). The executor, `info`, `verify`,
 * `pack` and the Python module use only this interface: a new format needs
 * no change anywhere else.
 *
 * Contract of an implementation:
 *  1. open() fills `ncols`, `col[]`, `count` and `name`. Every source here is
 *     indexed: it can read record i for any i < count. (A format without an
 *     index file builds its offsets when it is opened, by a header scan.)
 *  2. read() may run on several threads at once, each with its own cursor
 *     (cursor_open); everything else in the source is read-only after open.
 *  3. read() fills out->col[0..ncols) and out->ncols, out->index = i. A column
 *     either holds its own reference (buf != NULL; from cur->alloc, or a
 *     retained buffer such as a file mapping) or is a borrowed view (buf NULL)
 *     that stays valid as long as the source lives. Nothing may point into a
 *     cursor's scratch after read() returns.
 *  4. A failed read() returns a negative status with a one-line message that
 *     names the file, the record (number and byte offset where known) and the
 *     cause: "train-00003.tfrecord: record 17 (offset 88412): data checksum
 *     mismatch". It leaves `out` empty (ncols 0) and the cursor usable, so the
 *     next record can be read (skip policy).
 *  5. SL_ENOMEM is only ever an allocation failure, never damaged data.
 * ========================================================================== */

#define SL_SOURCE_COLNAME_MAX 64

/* One column as a source yields it. */
typedef struct sl_source_col {
    char name[SL_SOURCE_COLNAME_MAX];
    sl_coltype type;        /* SL_COL_INT64 / SL_COL_FLOAT64: a scalar per record
                               (int64 / float64 tensor, ndim 0);
                               SL_COL_STRING / SL_COL_BYTES: 1-D uint8;
                               SL_COL_ARRAY: `dtype` with `ndim` dims */
    sl_dtype dtype;         /* SL_COL_ARRAY: element type */
    int ndim;               /* SL_COL_ARRAY: 0 (a scalar of `dtype`) .. SL_MAX_DIMS */
    int64_t shape[SL_MAX_DIMS]; /* SL_COL_ARRAY: -1 for a dim that varies per record */
    int encoded;            /* SL_COL_BYTES holding an encoded image (jpg/png/webp) */
    int indexed;            /* SL_COL_INT64/FLOAT64 whose values index_column()
                               gives without reading records (filters push down) */
} sl_source_col;

typedef struct sl_source sl_source;

/* Where a reading thread's output tensors come from: the executor passes
 * its buffer pools (no malloc per sample in steady state); elsewhere
 * sl_source__heap_alloc. Same contract as sl_tensor_alloc. */
typedef int (*sl_source_alloc_fn)(void *ctx, sl_tensor *t, sl_dtype dtype, int ndim,
                                  const int64_t *shape);
int sl_source__heap_alloc(void *ctx, sl_tensor *t, sl_dtype dtype, int ndim,
                          const int64_t *shape);

/* Per-thread reading state. Implementations that need more (a record
 * buffer, an inflater, a protobuf scratch arena) embed this as their first
 * member and allocate it in cursor_open. */
typedef struct sl_source_cursor {
    sl_source_alloc_fn alloc;
    void *alloc_ctx;
} sl_source_cursor;

typedef struct sl_source_vtbl {
    const char *kind;       /* "slr", "memory", "tfrecord", "webdataset",
                               "image_folder", "idx" */
    /* A cursor for one reading thread; NULL: the plain sl_source_cursor is
     * enough. The interface fills alloc/alloc_ctx after this returns. */
    int (*cursor_open)(sl_source *src, sl_source_cursor **out);
    void (*cursor_free)(sl_source *src, sl_source_cursor *cur);
    /* Read record i (< count) into `out`; see the contract above. */
    int (*read)(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *out);
    /* Values of an `indexed` column: `count` int64_t (SL_COL_INT64) or double
     * (SL_COL_FLOAT64), borrowed for the source's life. NULL: none indexed. */
    int (*index_column)(sl_source *src, int col, const void **vals_out);
    /* Optional: add kind-specific facts for `info --json` to `obj` (files,
     * index used, compression). */
    int (*describe)(sl_source *src, cJSON *obj);
    /* Optional: where record i lives, for messages ("a.tar: record 5 (offset
     * 10240)"); NULL: "<name>: record <i>". */
    void (*locate)(sl_source *src, uint64_t i, char *buf, size_t cap);
    void (*free)(sl_source *src);
} sl_source_vtbl;

struct sl_source {
    const sl_source_vtbl *vt;
    _Atomic int refs;       /* sl_source__retain / sl_source__release */
    char name[256];         /* for messages: a file name, "memory", a root dir */
    uint64_t count;         /* records */
    int ncols;
    sl_source_col col[SL_MAX_COLUMNS];
    cJSON *meta;            /* optional metadata to carry into a pack (owned;
                               e.g. {"classes": [...], "source": "image_folder"}) */
};

/* An implementation's open: `obj` is the spec's source object (the kind key
 * and that kind's options; the pipeline-level keys shuffle, shard, parallel
 * and chunk are never passed), `field` the spec path for messages
 * ("source"). Implementations allocate their own struct with sl_source as its
 * first member, fill vt/name/count/ncols/col, and set refs to 1. */
typedef int (*sl_source_open_fn)(sl_source **out, const cJSON *obj, const char *field);

/* The registry: which key of a source object opens which format. */
typedef struct sl_source_kind {
    const char *key;        /* "path", "tfrecord", "webdataset", "image_folder", "idx" */
    sl_source_open_fn open;
    const char *summary;
} sl_source_kind;
extern const sl_source_kind sl_source__kinds[];

/* Open the source a spec's source object describes (exactly one kind key). */
int sl_source__open_json(sl_source **out, const cJSON *obj, const char *field);
sl_source *sl_source__retain(sl_source *s);
void sl_source__release(sl_source *s);
int sl_source__cursor_open(sl_source *s, sl_source_alloc_fn alloc, void *ctx,
                           sl_source_cursor **out);
void sl_source__cursor_free(sl_source *s, sl_source_cursor *cur);
/* read() plus the contract checks debug builds make. */
int sl_source__read(sl_source *s, sl_source_cursor *cur, uint64_t i, sl_sample *out);
/* "<name>: record <i>" or the implementation's locate(). */
void sl_source__locate(sl_source *s, uint64_t i, char *buf, size_t cap);

/* The formats, one file each (the registry in source.c names them). */
int sl_source__open_slr(sl_source **out, const cJSON *obj, const char *field);
int sl_source__open_tfrecord(sl_source **out, const cJSON *obj, const char *field);
/* Scan one TFRecord file fully and write its index, FILE.slidx (`opts`: the
 * source object's compression key, or NULL). */
int sl_source__index_tfrecord(const char *path, const cJSON *opts);

/* Helpers for implementations. */
/* Add a column; SL_EINVAL when the name is empty, too long or taken, or
 * there are already SL_MAX_COLUMNS. */
int sl_source__add_col(sl_source *s, const char *name, sl_coltype type, sl_dtype dtype,
                       int ndim, const int64_t *shape);
/* Expand a path list: a JSON string or array of strings; each string may be
 * a brace pattern ("shard-{000000..000127}.tar", "{a,b}.tfrecord") or, with
 * a leading '@', a text file of paths (one a line, '#' comments). Returns a
 * NULL-terminated array of paths (free with sl_source__free_paths). */
int sl_source__expand_paths(const cJSON *v, const char *field, char ***paths_out,
                            int *n_out);
void sl_source__free_paths(char **paths);

#endif /* SL_SOURCE_H */
