/*
 * source.h — internals of the source layer shared by its files: input kind
 * sniffing, image content checks (through the ops decoder), the two packers. Never installed.
 */
#ifndef SL_SOURCE_H
#define SL_SOURCE_H

#include "core/core.h"
#include "core/params.h"
#include "io/io.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* What the first bytes of a file say it is. */
typedef enum {
    SL_SNIFF_OTHER = 0,
    SL_SNIFF_IDX_IMAGES,   /* IDX with 2+ dims */
    SL_SNIFF_IDX_LABELS    /* IDX with 1 dim (gzip is looked into) */
} sl_source__sniff_kind;

/* Classify a file by content (gzip is opened and its first bytes read).
 * `*kind_out` is SL_SNIFF_OTHER for anything that is neither IDX kind.
 * Returns SL_OK, or SL_EIO / SL_ENOMEM with a message naming `path`. */
int sl_source__sniff_path(const char *path, sl_source__sniff_kind *kind_out);

/* Per-thread state for checking images: the decode op's own decoder (the
 * ops layer, through sluice.h; see docs/ARCHITECTURE.md for why source may
 * call ops) and, for a full decode, a pixel buffer reused across files. */
typedef struct {
    int mode;          /* sl_pack_check */
    int restart;       /* sl_jpeg_restart: re-encode JPEGs (sl_source__reencode) */
    sl_decoder *dec;
    uint8_t *pix;
    size_t cap;
} sl_source__checker;

/* Make a checker for `mode` (SL_PACK_CHECK_HEADER or _DECODE). On failure
 * the caller still calls sl_source__checker_dispose. */
int sl_source__checker_init(sl_source__checker *c, int mode);
void sl_source__checker_dispose(sl_source__checker *c);

/* Check that `data` is an image the decode op can read, by its content:
 * JPEG, PNG or still WebP whose header (or, in decode mode, every pixel)
 * decodes. BMP, PPM/PGM, TIFF, GIF are named and refused. Returns SL_OK, or
 * SL_EDECODE / SL_ELIMIT / SL_EUNSUPPORTED / SL_ENOMEM with a message giving
 * the cause (not the path: the caller prefixes it). */
int sl_source__check_image(sl_source__checker *c, const uint8_t *data, size_t n);
/* Do these bytes start like an image file (one decode reads, or one it names
 * as unsupported: BMP, PPM, TIFF, GIF)? By content alone, no decoding. */
int sl_source__looks_like_image(const uint8_t *data, size_t n);

/* The bytes to store for a checked image under c->restart: a JPEG
 * re-encoded with an interval table (sl_jpeg_add_restarts) goes into `out`
 * (a new tensor the caller releases) and *changed_out is 1; anything else
 * is stored as it was (*changed_out 0, `out` untouched). */
int sl_source__reencode(sl_source__checker *c, const uint8_t *data, size_t n, sl_tensor *out,
                        int *changed_out);

/* Record what a skipped input was in the report (first few only). */
void sl_source__report_bad(sl_pack_report *rep, const char *line);

/* One pack's run (pack.c), shared by the packers: the writer, opened anew or
 * resumed from "<dst>.partial" (checked against the plan kept there), the
 * inputs left out (noted, so that a resume knows where it stood), the stop
 * poll, and how the run ends (published, kept for a resume, or removed). A
 * packer's inputs are numbered from 0 in the order it handles them; record
 * r is the r-th input not left out. */
typedef struct sl_pack_run {
    sl_writer *w;
    const sl_pack_options *opts;
    sl_pack_report *rep;
    const char *dst;
    uint64_t planned;   /* inputs the pack handles (records at most) */
    uint64_t start;     /* the first input this run handles (0, or after a resume) */
    int resumed;        /* continued an interrupted pack */
    int stopped;        /* opts->stop said so */
} sl_pack_run;

/* What the plan of a pack says of its inputs and options: the packer's
 * kind ("imagefolder", "idx", a source's kind) and a hash of what it will
 * read (names, labels, counts): a resume with other inputs is refused. */
typedef struct sl_pack_plan {
    const char *kind;
    uint64_t planned;
    uint64_t fingerprint;
} sl_pack_plan;

/* Open the writer for `dst`, or with opts->resume continue "<dst>.partial"
 * (SL_EINVAL when its plan is not this pack's: other inputs or options);
 * pr->start says where to begin, rep->records and rep->skipped count what
 * was kept. Set the writer's metadata after this, before the first record. */
int sl_source__pack_begin(sl_pack_run *pr, const char *dst, const sl_schema *schema,
                          const sl_pack_plan *plan, const sl_pack_options *opts,
                          sl_pack_report *rep);
/* Input `input` is left out (skip_bad), for `why`: counted, reported, noted. */
int sl_source__pack_skipped(sl_pack_run *pr, uint64_t input, const char *why);
/* Whether opts->stop asks to stop (then SL_ECANCELED ends the run);
 * `fresh` as sl_pack_options.stop's. */
int sl_source__pack_stop(sl_pack_run *pr, int fresh);
/* End the run with the packer's status: SL_OK publishes the dataset;
 * SL_ECANCELED (stopped) and any failure of a resumed pack keep
 * "<dst>.partial" with its complete records (the message says how many and
 * the ways on); any other failure removes it. Returns the final status. */
int sl_source__pack_end(sl_pack_run *pr, int rc);

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
 * one implementation of `sl_source_vtbl` in its own file of this folder, and
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
 *     cursor's scratch after read() returns. When the cursor's `borrow` is
 *     set, a column that would hold a reference to memory living as long as
 *     the source (a file mapping) should be a borrowed view instead: the
 *     caller is done with every column before it releases the source. A
 *     mapping that may be closed before the source is (a lazily opened
 *     shard's, shard_set.h) is referenced whatever `borrow` says.
 *  4. A failed read() returns a negative status with a one-line message that
 *     names the file, the record (number and byte offset where known) and the
 *     cause: "train-00003.tfrecord: record 17 (offset 88412): data checksum
 *     mismatch". It leaves `out` empty (ncols 0) and the cursor usable, so the
 *     next record can be read (skip policy).
 *  5. SL_ENOMEM is only ever an allocation failure, never damaged data.
 *  6. prefetch(), when present, is a hint with no effect on results: it may
 *     run on any reading thread, must not fail, block, allocate or lock.
 * ========================================================================== */

/* One column as a source yields it. */
typedef struct sl_source_col {
    char name[SL_COLNAME_MAX];
    sl_coltype type;        /* SL_COL_INT64 / SL_COL_FLOAT64: a scalar per record
                               (int64 / float64 tensor, ndim 0);
                               SL_COL_STRING / SL_COL_BYTES: 1-D uint8;
                               SL_COL_ARRAY: `dtype` with `ndim` dims */
    sl_dtype dtype;         /* SL_COL_ARRAY: element type (SL_DTYPE_INVALID when
                               it varies: memory samples) */
    int ndim;               /* SL_COL_ARRAY: 0 (a scalar of `dtype`) .. SL_MAX_DIMS,
                               -1 when it varies */
    int64_t shape[SL_MAX_DIMS]; /* SL_COL_ARRAY: -1 for a dim that varies per record */
    int encoded;            /* SL_COL_BYTES that may hold an encoded image: the
                               plan lets decode ops read it */
    int image;              /* every value is meant to be an image file (an
                               ImageFolder's files, a tar's .jpg members):
                               pack checks it. 0 for .slr bytes columns (no
                               such mark is stored): sl_source_check finds
                               those by content (SL_SOURCE_F_IMAGES_BY_CONTENT) */
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
    int borrow;             /* 1: views of source-lifetime memory may be borrowed
                               (buf NULL) rather than referenced; the executor
                               sets it (every column is copied or consumed
                               before the pipeline releases the source), which
                               saves an atomic on a shared counter per column
                               and sample. 0 (default): referenced. */
} sl_source_cursor;

/* A zeroed cursor of `size` bytes (an implementation's struct, its
 * sl_source_cursor first) into *out, for a cursor_open; SL_ENOMEM naming
 * `what` ("opening a tar cursor") when memory runs out. */
int sl_source__cursor_new(size_t size, const char *what, sl_source_cursor **out);

/* Source flags. */
#define SL_SOURCE_F_MEMORY 0x1u /* reads are views of memory: no I/O to overlap,
                                   so the executor runs the first ops in the
                                   reading threads */
#define SL_SOURCE_F_IMAGES_BY_CONTENT 0x2u /* columns carry no image mark (.slr):
                                   sl_source_check finds image columns by
                                   content (source_api.c, find_image_cols) */

typedef struct sl_source_vtbl {
    unsigned flags;         /* SL_SOURCE_F_* */
    /* What to do about a damaged record (sl_source_repair_hint); NULL: the
     * advice for files written by another tool. */
    const char *repair;
    /* A cursor for one reading thread; NULL: the plain sl_source_cursor is
     * enough. The interface fills alloc/alloc_ctx after this returns. */
    int (*cursor_open)(sl_source *src, sl_source_cursor **out);
    void (*cursor_free)(sl_source *src, sl_source_cursor *cur);
    /* Read record i (< count) into `out`; see the contract above. */
    int (*read)(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *out);
    /* Optional: read record i (< count) straight into caller memory: column
     * k's bytes to dst[k], which holds exactly bytes[k] (the dtype and shape
     * col[k] declares, which must then be fixed). The same checks and errors
     * as read() (contract 4); dst may be partly written on error. The
     * executor reads whole batches this way when nothing runs per sample
     * (layout.c, read_rows): no sample, no tensor, no second copy. */
    int (*read_cols)(sl_source *src, sl_source_cursor *cur, uint64_t i, void *const *dst,
                     const size_t *bytes);
    /* Optional: record i (< count) will be read soon (contract 6). The
     * executor calls it with `far` = 1 some records ahead (bring in what
     * locates the record: an index entry), then with `far` = 0 a few records
     * ahead (bring in the record's first bytes); for a source that
     * `reads_ahead`, once per record with `far` = SL_PREFETCH_REMOTE well
     * ahead (start fetching it). */
    void (*prefetch)(sl_source *src, uint64_t i, int far);
    /* Optional: reads will land all over the records (a global shuffle):
     * keep in memory what makes such reads cheaper (.slr: small local shards
     * on huge pages, record_reader.c), within `budget` bytes. Returns the
     * bytes now held (sl_source__hold_for_random adds them to held_bytes).
     * Called once, before reading threads start. */
    uint64_t (*hold_for_random)(sl_source *src, uint64_t budget);
    /* After a failed read of record i: 1 when the failure is its file's
     * (a shard that did not open, and fails every read of its records
     * alike), with that file's records [*first, *first + *count); else 0.
     * NULL: failures are per record. Any thread; on error paths only. */
    int (*failed_range)(sl_source *src, uint64_t i, uint64_t *first, uint64_t *count);
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
    const char *kind;       /* "slr", "memory", "tfrecord", "webdataset",
                               "image_folder", "idx", "synthetic": what the
                               input is, for info, explain and a pack's
                               "source" meta; static text, set with vt at
                               open (sl_source__new) */
    _Atomic int refs;       /* sl_source__retain / sl_source__release */
    char name[256];         /* for messages: a file name, "memory", a root dir */
    uint64_t count;         /* records */
    uint64_t record_bytes;  /* mean bytes of a record as stored, 0 if unknown:
                               what memory.c counts for a sample's encoded
                               columns */
    int ncols;
    sl_source_col col[SL_MAX_COLUMNS];
    cJSON *meta;            /* optional metadata to carry into a pack (owned;
                               e.g. {"classes": [...]}) */
    sl_source_cursor *api_cursor; /* sl_source_read's (public API), made on first use */
    int checksummed;        /* every read checks a per-record checksum (.slr;
                               TFRecord unless "verify": false); set at open,
                               read with sl_source_checksummed */
    sl_source__checker *api_check; /* sl_source_check's, made on first use */
    int api_images_known;   /* api_images is set (sl_source_check, first use) */
    uint32_t api_images;    /* bit c: column c is checked as images by
                               sl_source_check: col[c].image, or, for a source
                               without such marks (.slr), a bytes column whose
                               values are images by content */
#define SL_PREFETCH_REMOTE 2
    int reads_ahead;        /* reads are remote range requests that prefetch
                               hints fetch ahead (a .slr shard read by ranges,
                               io_remote.c): the executor hints records well
                               past the chunk it reads, in the shuffle's order */
    int remote;             /* named by URLs (http(s)://, s3://): set by
                               sl_source__open_json; read with sl_source__remote */
    uint64_t held_bytes;    /* memory the source may hold for reads beyond what it
                               hands out (a Parquet source's cache of decoded row
                               groups, at most; a .slr's shards copied onto huge
                               pages, hold_for_random): the pipeline's memory
                               limit counts it. 0: none */
    uint64_t locality;      /* records that are cheapest read together (the rows
                               of a Parquet row group, when they do not all stay
                               cached): the shuffle "auto" reads such a source
                               in window order, in blocks of this many. 0: none */
    uint64_t locality_window; /* with locality: the window that order's default is
                               (as many blocks as the source keeps at once) */
};

/* Check the image columns (col.image) of record i, read into `smp`, as pack
 * does: each must be an image the decode op reads (chk's mode: header or
 * every pixel). The message names where the record lives (locate), the
 * column and the cause. `*images_out` (may be NULL): values checked. */
int sl_source__check_sample(sl_source *src, sl_source__checker *chk, uint64_t i,
                            const sl_sample *smp, int *images_out);
/* The same for the columns of bit mask `cols` (bit c: column c). */
int sl_source__check_cols(sl_source *src, sl_source__checker *chk, uint64_t i,
                          const sl_sample *smp, uint32_t cols, int *images_out);

/* Pack any source into .slr (sl_pack_source): records in source order. */
int sl_source__pack(sl_source *src, const char *dst, const sl_pack_options *opts,
                    sl_pack_report *rep);

/* An implementation's open: `obj` is the spec's source object (the kind key
 * and that kind's options; the pipeline-level keys shuffle, shard, parallel
 * and chunk are never passed), `field` the spec path for messages
 * ("source"). Implementations allocate their own struct with sl_source as its
 * first member (sl_source__new: vt, kind, one reference) and fill
 * name/count/ncols/col. */
typedef int (*sl_source_open_fn)(sl_source **out, const cJSON *obj, const char *field);

/* Does the file (or directory) at `path` look like this format? `head` holds
 * its first `n` bytes (n may be short; 0 for a directory). 1 yes, 0 no, or
 * a negative status (SL_ENOMEM) that stops the search. */
typedef int (*sl_source_sniff_fn)(const char *path, int is_dir, const uint8_t *head, size_t n);

/* The registry: which key of a source object opens which format. */
typedef struct sl_source_format {
    const char *key;        /* "path", "tfrecord", "webdataset", "image_folder", "idx" */
    sl_source_open_fn open;
    const char *summary;
    const char *noun;       /* the input in words for messages ("a tar shard"); NULL: the key */
    sl_source_sniff_fn sniff; /* may be NULL: never chosen by content */
    int multi;              /* the input is a list of files (1) or one path / a pair */
    /* Build the sidecar index of one file (sl_source_index_build); NULL:
     * the format has none. */
    int (*build_index)(const char *path, const cJSON *opts);
    const sl_param_table *params; /* the kind's own keys (sl_spec_params_doc) */
} sl_source_format;
extern const sl_source_format sl_source__kinds[];

/* The format of `n` paths, by content (each kind's sniff, in registry
 * order; every path must be of the same kind). SL_EUNSUPPORTED when none
 * fits, naming the path. */
int sl_source__detect(const char *const *paths, int n, const sl_source_format **kind_out);

/* `path` did not open as a .slr dataset (status `rc`, message set): when it
 * reads as another kind of input, say so and what reads it (SL_EINVAL);
 * else keep the message and return `rc`. */
int sl_source__wrong_kind(const char *path, int rc);

/* ---- options: each format's parameter table (core/params.h) ---- */
/* The options the sources that open shards lazily share, one table fragment
 * each: "max_open_shards" (.slr, tar, TFRecord) and "index" (tar, TFRecord;
 * see source_index.h). Include them at the offset of an sl_source_shard_opts. */
typedef struct sl_source_shard_opts {
    int index;           /* -1 "auto" (default), 1 true, 0 false: sl_sidx__use() */
    int max_open_shards; /* 1..1,000,000; 0 (default): the source's own bound */
} sl_source_shard_opts;
extern const sl_param sl_source__max_open_params[]; /* max_open_shards */
extern const sl_param sl_source__shard_params[];    /* index, max_open_shards */
/* Each format's table (its own keys), named in the registry. */
extern const sl_param_table sl_source__slr_table, sl_source__folder_table, sl_source__idx_table,
    sl_source__tar_table, sl_source__tf_table, sl_source__syn_table, sl_source__pq_table;
/* Read a source object's options with its format's table `t` (t->what names
 * the format: "a tfrecord source") into `out`. A key that is not the
 * format's is SL_EINVAL "<field>.<key>: unknown key for <what> (keys: ...)",
 * the format's keys and the pipeline's listed closest to `key` first. */
int sl_source__read_options(const sl_param_table *t, const cJSON *obj, const char *field,
                            void *out);

/* The regular files of the local folder `dir`, sorted by name, hidden files
 * and the sidecar indexes beside listed files left out (a NULL-terminated
 * list freed with sl_source__free_paths), and how many folders it holds. */
int sl_source__list_folder(const char *dir, char ***files_out, int *n_out, int *subdirs_out);
/* Does `p` name several inputs: an @list, a brace group or a shell pattern? */
int sl_source__is_pattern(const char *p);

/* Open the source a spec's source object describes (exactly one kind key). */
int sl_source__open_json(sl_source **out, const cJSON *obj, const char *field);
/* An implementation's struct of `size` bytes (sl_source its first member),
 * zeroed, with vt, kind and one reference; NULL when out of memory. */
void *sl_source__new(size_t size, const sl_source_vtbl *vt, const char *kind);
sl_source *sl_source__retain(sl_source *s);
void sl_source__release(sl_source *s);
int sl_source__cursor_open(sl_source *s, sl_source_alloc_fn alloc, void *ctx,
                           sl_source_cursor **out);
void sl_source__cursor_free(sl_source *s, sl_source_cursor *cur);
/* read() plus the contract checks debug builds make. */
int sl_source__read(sl_source *s, sl_source_cursor *cur, uint64_t i, sl_sample *out);
/* read_cols(), which the source must have. */
int sl_source__read_cols(sl_source *s, sl_source_cursor *cur, uint64_t i, void *const *dst,
                         const size_t *bytes);
/* The implementation's prefetch() hint, if it has one. */
static inline void sl_source__prefetch(sl_source *s, uint64_t i, int far) {
    if (s->vt->prefetch)
        s->vt->prefetch(s, i, far);
}
/* The implementation's hold_for_random(), if it has one: what it holds is
 * counted in held_bytes (the pipeline's memory limit). */
static inline void sl_source__hold_for_random(sl_source *s, uint64_t budget) {
    if (s->vt->hold_for_random)
        s->held_bytes += s->vt->hold_for_random(s, budget);
}
/* The implementation's failed_range(), if it has one (else 0). */
static inline int sl_source__failed_range(sl_source *s, uint64_t i, uint64_t *first,
                                          uint64_t *count) {
    return s->vt->failed_range ? s->vt->failed_range(s, i, first, count) : 0;
}
/* Can the source read records straight into caller memory (read_cols)? */
static inline int sl_source__has_read_cols(const sl_source *s) { return s->vt->read_cols != NULL; }
/* Are reads views of memory, with no I/O to overlap (SL_SOURCE_F_MEMORY)? */
static inline int sl_source__reads_memory(const sl_source *s) {
    return (s->vt->flags & SL_SOURCE_F_MEMORY) != 0;
}
/* Are reads remote range requests that prefetch hints fetch ahead
 * (reads_ahead), so the executor hints records well past its chunk? */
static inline int sl_source__reads_ahead(const sl_source *s) { return s->reads_ahead != 0; }
/* Does the source read remote objects (any of its names is a URL, or its
 * reads are remote range requests)? The pipeline's shuffle "auto" asks. */
static inline int sl_source__remote(const sl_source *s) {
    return s->remote != 0 || s->reads_ahead != 0;
}
/* "<name>: record <i>" or the implementation's locate(). */
void sl_source__locate(sl_source *s, uint64_t i, char *buf, size_t cap);
/* locate(), plus the record's own name where the source has a text column
 * `path` or `__key__` and the location does not show it already:
 * "train.slr: record 29 (path dog/7.jpg)", "a.tar: record 3 (offset 2048)
 * (key s0003)". `smp` is record i as the source read it, or NULL: the record
 * is then read again here (on a cursor of its own, heap memory: for error
 * paths only). May run on any thread; keeps this thread's error message. */
void sl_source__where(sl_source *s, uint64_t i, const sl_sample *smp, char *buf, size_t cap);

/* The formats, one file each (the registry in source.c names them). */
int sl_source__open_slr(sl_source **out, const cJSON *obj, const char *field);
int sl_source__open_imagefolder(sl_source **out, const cJSON *obj, const char *field);
int sl_source__open_idx(sl_source **out, const cJSON *obj, const char *field);
/* {"synthetic": {"records": N, "shards": S, "bytes": B}} (source_synthetic.c) */
int sl_source__open_synthetic(sl_source **out, const cJSON *obj, const char *field);
int sl_source__sniff_slr(const char *path, int is_dir, const uint8_t *head, size_t n);
int sl_source__sniff_imagefolder(const char *path, int is_dir, const uint8_t *head, size_t n);
int sl_source__sniff_idx(const char *path, int is_dir, const uint8_t *head, size_t n);
/* Memory: the caller's tensors are copied once; reads are views. Not in the
 * registry: a spec gets one through sl_spec_set_source_columns/_samples. */
int sl_source__mem_columns(sl_source **out, int ncols, const char *const *names,
                           const sl_tensor *cols);
int sl_source__mem_samples(sl_source **out, int ncols, const char *const *names,
                           const sl_sample *samples, uint64_t count);
/* Memory over column-wise arrays the caller allocated with sl__malloc for
 * the source, taken rather than copied (freed with the source, on failure
 * too): rows[k] gives column k's dtype and per-record shape, its data the
 * array of `count` such records back to back. Bit k of `int_cols`: column k
 * holds one int64 per record (rows[k] an SL_I64 scalar) and is an
 * SL_COL_INT64 column marked indexed, whose values index_column gives. Kind
 * and name "memory" until the caller sets its own (source_idx.c). */
int sl_source__mem_adopt(sl_source **out, int ncols, const char *const *names,
                         const sl_tensor *rows, uint64_t count, uint32_t int_cols);
int sl_source__open_webdataset(sl_source **out, const cJSON *obj, const char *field);
/* Scan one tar shard and write its sidecar index (SHARD.slidx); `opts` are
 * the source object's options or NULL. SL_ECORRUPT for a damaged shard. */
int sl_source__index_tar(const char *path, const cJSON *opts);
int sl_source__sniff_tar(const char *path, int is_dir, const uint8_t *head, size_t n);
int sl_source__open_tfrecord(sl_source **out, const cJSON *obj, const char *field);
/* Scan one TFRecord file fully and write its index, FILE.slidx (`opts`: the
 * source object's compression key, or NULL). */
int sl_source__index_tfrecord(const char *path, const cJSON *opts);
int sl_source__sniff_tfrecord(const char *path, int is_dir, const uint8_t *head, size_t n);
/* Apache Parquet files (source_parquet.c; docs/SOURCES.md, "Parquet"). */
int sl_source__open_parquet(sl_source **out, const cJSON *obj, const char *field);
int sl_source__sniff_parquet(const char *path, int is_dir, const uint8_t *head, size_t n);
/* A Parquet file's footer is its index: checked, nothing written. */
int sl_source__index_parquet(const char *path, const cJSON *opts);

/* Several opened sources as one (source_concat.c): record i is record
 * i - offset[k] of input k, in[k]'s columns mapped onto in[0]'s order (or
 * only the `nkeep` columns named in `keep`, in that order; keep NULL: all).
 * The inputs must agree on those columns' names, types, dtypes and fixed
 * shapes: a mismatch is SL_EINVAL naming both inputs (labels[k]: how the
 * caller names input k) and the column. `source_col` (NULL or "": none)
 * adds an int64 column holding the input's index. Takes a reference to
 * each input. */
int sl_source__concat(sl_source **out, sl_source *const *in, const char *const *labels, int n,
                      const char *const *keep, int nkeep, const char *source_col);
/* The same numbering with no column check: a record of input k is read as
 * input k reads it (its own columns, in its order); the source's columns
 * are in[0]'s. For a mix whose inputs have ops of their own, which make
 * the columns agree (src/pipeline/mix_ops.c). */
int sl_source__concat_raw(sl_source **out, sl_source *const *in, int n);
/* Which input of concatenation `s` holds its record i (and, if rec is not
 * NULL, that input's record number). */
int sl_source__concat_input(const sl_source *s, uint64_t i, uint64_t *rec);

/* Helpers for implementations. */
/* Add a column; SL_EINVAL when the name is empty, too long or taken, or
 * there are already SL_MAX_COLUMNS. */
int sl_source__add_col(sl_source *s, const char *name, sl_coltype type, sl_dtype dtype,
                       int ndim, const int64_t *shape);
/* Expand a path list: a JSON string or array of strings; each string may be
 * a brace pattern ("shard-{000000..000127}.tar", "{a,b}.tfrecord"), a shell
 * pattern ("shard-*.tar", through glob(3), sorted), a local folder (its
 * files, sorted), or, with a leading '@', a text file of paths (one a line,
 * '#' comments). Returns a NULL-terminated array of paths (free with
 * sl_source__free_paths). */
int sl_source__expand_paths(const cJSON *v, const char *field, char ***paths_out,
                            int *n_out);
/* The strings of a JSON array as they are (no expansion), in the same
 * NULL-terminated form. */
int sl_source__string_list(const cJSON *v, const char *field, char ***out, int *n_out);
void sl_source__free_paths(char **paths);

/* obj[key]: an array of a source's n shard paths, path(ctx, k) for shard k
 * (what describe() lists). */
int sl_source__describe_paths(cJSON *obj, const char *key, int n,
                              const char *(*path)(const void *ctx, int k), const void *ctx);

/* The shard set's state for shard k (sl_shard_set__get), which record r of
 * shard `name` is about to read: a failure's message (which names the shard
 * and the cause) is prefixed "<name>: record <r>". The caller puts it back. */
struct sl_shard_set;
int sl_source__shard_get(struct sl_shard_set *set, int k, const char *name, uint64_t r,
                         void **state);

/* The per-record values of a source's indexed integer columns, what
 * index_column() returns: made on the first call (a pushed-down filter), so
 * that nothing per record is held until a filter asks. The first call
 * allocates a zeroed array of `count` values for each column marked
 * `indexed`, then `fill` writes them; a failed fill frees them all, and the
 * next call tries again. Calls may come from several threads at once. */
typedef int (*sl_source_ivals_fill)(sl_source *src, int64_t *const *vals);
typedef struct sl_source_ivals {
    pthread_mutex_t mu;         /* guards the first call */
    int done;
    int64_t *vals[SL_MAX_COLUMNS];
} sl_source_ivals;
void sl_source__ivals_init(sl_source_ivals *iv);
/* *vals_out: column col's values (NULL for a column that is not indexed or
 * out of range); errors as `fill`'s, *vals_out NULL. */
int sl_source__ivals_get(sl_source_ivals *iv, sl_source *src, sl_source_ivals_fill fill, int col,
                         const void **vals_out);
void sl_source__ivals_dispose(sl_source_ivals *iv);

#endif /* SL_SOURCE_H */
