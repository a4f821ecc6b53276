/*
 * sluice.h — the public API of sluice, a data-loading engine for deep-learning
 * training.
 *
 * How to read this file
 * ---------------------
 * Sections go from simple to advanced: version, status codes and errors,
 * memory (buffers, pools, tensors, samples), randomness, logging, the record
 * format (schema, writer, reader), packing datasets, image ops, the pipeline,
 * stats and the device. Every function says who owns what it returns and
 * whether it may be called from several threads at once.
 *
 * Conventions
 *  - Fallible functions return an sl_status: SL_OK (0) on success, a negative
 *    code on error, SL_END (> 0) at the end of data. `rc < 0` is the error test.
 *  - After an error, sl_errmsg() returns a one-line message for this thread
 *    naming the file, record, op and cause.
 *  - Constructors take `sl_x **out` first and the caller frees with sl_x_free(),
 *    which accepts NULL. `_release` drops a reference to a pooled object.
 *  - Unless a function says otherwise, a handle is used by one thread at a time.
 *
 * Caveats
 *  - Do not fork() a process while a pipeline's threads run; create pipelines
 *    after forking.
 *  - Destroying a pipeline mid-epoch is allowed and returns promptly; batches
 *    already handed out stay valid until released.
 *  - Readers verify checksums and bound every size read from a file, but a
 *    decoder of untrusted images should also keep its pixel limit
 *    (SL_DECODE_MAX_PIXELS) at a value the machine can afford.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SLUICE_BUILDING) && defined(__GNUC__)
#define SL_API __attribute__((visibility("default")))
#else
#define SL_API
#endif

#if defined(__GNUC__)
#define SL_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define SL_DEPRECATED(msg)
#endif

/* ==========================================================================
 * Version
 * ========================================================================== */

#define SL_VERSION_MAJOR 0
#define SL_VERSION_MINOR 1
#define SL_VERSION_PATCH 0
#define SL_VERSION_NUMBER \
    (SL_VERSION_MAJOR * 10000 + SL_VERSION_MINOR * 100 + SL_VERSION_PATCH)
#define SL_VERSION_STRING "0.1.0"

/** The version number of the library linked at run time (SL_VERSION_NUMBER
 *  of the build). Thread safety: any thread. Since 0.1 */
SL_API unsigned sl_version_number(void);
/** The version as a static string, e.g. "0.1.0". Since 0.1 */
SL_API const char *sl_version_string(void);

/* ==========================================================================
 * Status codes and errors
 * ========================================================================== */

/** Status codes. Negative values are errors, chosen by what a caller does
 *  about them; SL_END is a normal end of data. */
typedef enum sl_status {
    SL_OK = 0,              /**< success */
    SL_END = 1,             /**< no more data (end of epoch, end of records) */
    SL_ENOMEM = -1,         /**< an allocation failed */
    SL_EINVAL = -2,         /**< a bad argument, spec field or user value */
    SL_EIO = -3,            /**< the operating system failed a read or write */
    SL_ECORRUPT = -4,       /**< the data is damaged (checksum, truncation, bad structure) */
    SL_EUNSUPPORTED = -5,   /**< a newer format version or a feature this build lacks */
    SL_EDECODE = -6,        /**< an image or payload could not be decoded */
    SL_ELIMIT = -7,         /**< a size limit was hit (pixel cap, record size) */
    SL_ECANCELED = -8       /**< the operation was cancelled (shutdown, interrupt) */
} sl_status;

/** This thread's last error message: one line, never NULL ("" if none).
 *  Valid until the next failing sluice call on this thread. Since 0.1 */
SL_API const char *sl_errmsg(void);
/** Forget this thread's last error message. Since 0.1 */
SL_API void sl_errclear(void);
/** A static name for a status code ("SL_ECORRUPT"). Since 0.1 */
SL_API const char *sl_status_str(int status);

/* ==========================================================================
 * Memory: buffers, pools, tensors, samples
 * ========================================================================== */

/** Element types. Values are pinned (stored in files). */
typedef enum sl_dtype {
    SL_DTYPE_INVALID = 0,
    SL_U8 = 1, SL_I8 = 2, SL_U16 = 3, SL_I16 = 4, SL_U32 = 5, SL_I32 = 6,
    SL_U64 = 7, SL_I64 = 8, SL_F16 = 9, SL_F32 = 10, SL_F64 = 11, SL_BOOL = 12
} sl_dtype;

/** Size in bytes of one element of `dtype`; 0 for an invalid dtype. Since 0.1 */
SL_API size_t sl_dtype_size(sl_dtype dtype);
/** A static lower-case name ("uint8", "float32"); "invalid" if unknown. Since 0.1 */
SL_API const char *sl_dtype_name(sl_dtype dtype);
/** Parse a dtype name as printed by sl_dtype_name(); SL_DTYPE_INVALID if unknown. */
SL_API sl_dtype sl_dtype_parse(const char *name);

/** Where a tensor's bytes live. Values match DLPack's DLDeviceType. */
typedef enum sl_device {
    SL_DEVICE_CPU = 1,
    SL_DEVICE_CUDA = 2,
    SL_DEVICE_CUDA_HOST = 3   /**< pinned host memory */
} sl_device;

/** A reference-counted block of bytes. Opaque. Buffers come from the heap,
 *  from a pool (returned to it on the last release), or wrap foreign memory
 *  (a file mapping) with a release callback.
 *  Thread safety: retain/release from any thread; the bytes are not locked. */
typedef struct sl_buffer sl_buffer;

/** Allocate a heap buffer of `size` bytes (64-byte aligned), refcount 1.
 *  @return SL_OK, SL_ENOMEM. Since 0.1 */
SL_API int sl_buffer_alloc(sl_buffer **out, size_t size);
/** Wrap foreign memory. `release(user)` is called once when the last reference
 *  is dropped (may be NULL). The memory must stay valid until then. Since 0.1 */
SL_API int sl_buffer_wrap(sl_buffer **out, void *data, size_t size,
                          void (*release)(void *user), void *user);
/** Add a reference. Returns `buf`. Accepts NULL. Since 0.1 */
SL_API sl_buffer *sl_buffer_retain(sl_buffer *buf);
/** Drop a reference; the last one frees the buffer or returns it to its pool.
 *  Accepts NULL. Since 0.1 */
SL_API void sl_buffer_release(sl_buffer *buf);
/** The buffer's bytes (borrowed, valid while a reference is held). */
SL_API void *sl_buffer_data(const sl_buffer *buf);
/** The buffer's size in bytes. */
SL_API size_t sl_buffer_size(const sl_buffer *buf);
/** The current reference count (for tests and debugging). */
SL_API unsigned sl_buffer_refcount(const sl_buffer *buf);

/** A pool of equal-sized buffers, recycled when released, so that steady
 *  state does no malloc. Thread safety: sl_pool_get from any thread. A pool
 *  lives until sl_pool_free and until every buffer taken from it is released,
 *  whichever is later. */
typedef struct sl_pool sl_pool;

/** Create a pool of buffers of `buf_size` bytes, keeping at most `max_cached`
 *  free buffers for reuse (0: unbounded). Since 0.1 */
SL_API int sl_pool_create(sl_pool **out, size_t buf_size, size_t max_cached);
/** Take a buffer (refcount 1) from the pool, allocating if none is free.
 *  @return SL_OK, SL_ENOMEM. Since 0.1 */
SL_API int sl_pool_get(sl_pool *pool, sl_buffer **out);
/** Number of buffers allocated by the pool over its life (for tests). */
SL_API size_t sl_pool_allocated(const sl_pool *pool);
/** Drop the creator's reference; the pool is destroyed once its last
 *  outstanding buffer comes back. Accepts NULL. Since 0.1 */
SL_API void sl_pool_free(sl_pool *pool);

#define SL_MAX_DIMS 8

/** An n-dimensional, C-contiguous array. A plain struct the caller may place
 *  anywhere; `buf` (if not NULL) is a reference that keeps `data` alive.
 *  Raw bytes (an encoded JPEG, a string) are a 1-D SL_U8 tensor. A scalar has
 *  ndim 0 and one element. */
typedef struct sl_tensor {
    void *data;                  /**< first element */
    size_t nbytes;               /**< product(shape) * sl_dtype_size(dtype) */
    sl_buffer *buf;              /**< owning reference, or NULL for a borrowed view */
    sl_dtype dtype;
    int32_t ndim;                /**< 0 .. SL_MAX_DIMS */
    int64_t shape[SL_MAX_DIMS];
    int32_t device;              /**< sl_device */
    int32_t device_id;
} sl_tensor;

/** Number of elements (1 for a scalar). */
SL_API int64_t sl_tensor_numel(const sl_tensor *t);
/** Fill `t` with a new heap buffer for the given dtype and shape.
 *  @return SL_OK, SL_EINVAL (ndim or dtype), SL_ENOMEM. Since 0.1 */
SL_API int sl_tensor_alloc(sl_tensor *t, sl_dtype dtype, int ndim, const int64_t *shape);
/** Make `t` a borrowed view of `data` (no reference taken). */
SL_API void sl_tensor_view(sl_tensor *t, void *data, sl_dtype dtype, int ndim,
                           const int64_t *shape);
/** Drop the tensor's buffer reference and zero it. Accepts a zeroed tensor. */
SL_API void sl_tensor_release(sl_tensor *t);
/** Copy `src` into a new heap buffer owned by `dst`. Since 0.1 */
SL_API int sl_tensor_copy(sl_tensor *dst, const sl_tensor *src);

#define SL_MAX_COLUMNS 16

/** A sample: a fixed set of columns, each a tensor. Columns are addressed by
 *  index; names live in the schema and are resolved once, when a plan is
 *  built. `index` is the record index the sample came from (or its position
 *  in the source). */
typedef struct sl_sample {
    uint64_t index;
    uint32_t ncols;
    sl_tensor col[SL_MAX_COLUMNS];
} sl_sample;

/** Release every column's buffer and zero the sample. */
SL_API void sl_sample_clear(sl_sample *s);

/* ==========================================================================
 * Randomness
 * ========================================================================== */

/** A counter-based random generator: a key derived from (seed, epoch, sample
 *  index, op) and a counter. The same key always gives the same stream, on
 *  any thread, in any order — the basis of sluice's determinism. A plain
 *  struct: copy it, put it on the stack. */
typedef struct sl_rng {
    uint64_t key;
    uint64_t counter;
} sl_rng;

/** Key a generator by (seed, epoch, sample index, op id). Since 0.1 */
SL_API void sl_rng_init(sl_rng *rng, uint64_t seed, uint64_t epoch, uint64_t index,
                        uint64_t op);
/** Next 64 random bits. */
SL_API uint64_t sl_rng_next(sl_rng *rng);
/** Uniform double in [0, 1) with 53 random bits. */
SL_API double sl_rng_uniform(sl_rng *rng);
/** Uniform integer in [0, n); 0 when n == 0. Unbiased. */
SL_API uint64_t sl_rng_below(sl_rng *rng, uint64_t n);
/** A stateless mix of one 64-bit word (a bijection), for hashing keys. */
SL_API uint64_t sl_mix64(uint64_t x);

/* ==========================================================================
 * Logging
 * ========================================================================== */

typedef enum sl_log_level {
    SL_LOG_ERROR = 0, SL_LOG_WARN = 1, SL_LOG_INFO = 2, SL_LOG_DEBUG = 3
} sl_log_level;

/** Messages at or below `level` are emitted (default SL_LOG_WARN, or the
 *  value of the environment variable SLUICE_LOG: error|warn|info|debug). */
SL_API void sl_log_set_level(sl_log_level level);
SL_API sl_log_level sl_log_get_level(void);
/** Route log lines to `fn` instead of stderr (NULL restores stderr). `fn` may
 *  be called from any thread, concurrently. */
SL_API void sl_log_set_callback(void (*fn)(sl_log_level level, const char *line,
                                           void *user), void *user);

/* ==========================================================================
 * The record format: schema
 * ========================================================================== */

/** Column types of a .slr file. Values are pinned (stored in files). */
typedef enum sl_coltype {
    SL_COL_INT64 = 1,    /**< one int64 per record; stored in the index */
    SL_COL_FLOAT64 = 2,  /**< one float64 per record; stored in the index */
    SL_COL_STRING = 3,   /**< UTF-8 text, variable length */
    SL_COL_BYTES = 4,    /**< opaque bytes, variable length (encoded images) */
    SL_COL_ARRAY = 5     /**< n-d array of a dtype; shape fixed in the schema,
                              or per record where a schema dim is -1 */
} sl_coltype;

/** Column flags. */
#define SL_COLF_ZSTD 0x1u   /**< compress this column's payload with zstd */

/** A schema: an ordered list of named, typed columns. */
typedef struct sl_schema sl_schema;

/** Create an empty schema. Since 0.1 */
SL_API int sl_schema_create(sl_schema **out);
/** Append a column. `name`: 1–63 bytes, unique. For SL_COL_ARRAY give `dtype`,
 *  `ndim` (1..SL_MAX_DIMS) and `shape` (-1 for a dim that varies per record);
 *  otherwise pass SL_DTYPE_INVALID, 0, NULL. `flags`: SL_COLF_*.
 *  @return SL_OK, SL_EINVAL (bad name, duplicate, too many columns), SL_ENOMEM */
SL_API int sl_schema_add(sl_schema *s, const char *name, sl_coltype type, sl_dtype dtype,
                         int ndim, const int64_t *shape, unsigned flags);
SL_API int sl_schema_ncols(const sl_schema *s);
/** Index of the column called `name`, or -1. */
SL_API int sl_schema_find(const sl_schema *s, const char *name);
/** Column name (borrowed, lives as long as the schema). */
SL_API const char *sl_schema_name(const sl_schema *s, int col);
SL_API sl_coltype sl_schema_type(const sl_schema *s, int col);
/** For SL_COL_ARRAY: dtype, ndim and shape (-1 for variable dims). */
SL_API sl_dtype sl_schema_dtype(const sl_schema *s, int col);
SL_API int sl_schema_shape(const sl_schema *s, int col, int64_t *shape_out);
SL_API unsigned sl_schema_flags(const sl_schema *s, int col);
/** A static name for a column type ("int64", "bytes", …). */
SL_API const char *sl_coltype_name(sl_coltype type);
SL_API void sl_schema_free(sl_schema *s);

/* ==========================================================================
 * The record format: writer
 * ========================================================================== */

/** Options for sl_writer_open. Initialise with SL_WRITER_OPTIONS_INIT. */
typedef struct sl_writer_options {
    unsigned version;        /**< SL_WRITER_OPTIONS_VERSION */
    uint64_t shard_bytes;    /**< roll over to a new shard past this many bytes;
                                  0 = default (4 GiB). With one shard the output is a
                                  single file; with more, a directory (see FORMAT.md) */
    int zstd_level;          /**< level for SL_COLF_ZSTD columns; 0 = default (3) */
    int fsync;               /**< 1 (default): fsync files and directory on close */
} sl_writer_options;
#define SL_WRITER_OPTIONS_VERSION 1
#define SL_WRITER_OPTIONS_INIT {SL_WRITER_OPTIONS_VERSION, 0, 0, 1}

/** Writes a dataset: one .slr file, or a directory of shards plus a manifest
 *  when it grows past options.shard_bytes. Data goes to temporary names and
 *  becomes visible at `path` only on a successful sl_writer_close().
 *  Thread safety: one thread at a time. */
typedef struct sl_writer sl_writer;

/** Start writing a dataset at `path`. The schema is copied. `opts` may be NULL.
 *  @return SL_OK, SL_EINVAL, SL_EIO (names the path). Since 0.1 */
SL_API int sl_writer_open(sl_writer **out, const char *path, const sl_schema *schema,
                          const sl_writer_options *opts);
/** Set a metadata entry (UTF-8 key and value, copied), stored with the dataset.
 *  The value is often JSON (e.g. "classes" → ["cat","dog"]). */
SL_API int sl_writer_set_meta(sl_writer *w, const char *key, const char *value);
/** Append one record: `cols[i]` holds column i's value — an SL_I64 or SL_F64
 *  scalar for INT64/FLOAT64 columns, a 1-D SL_U8 tensor for STRING/BYTES, an
 *  array of the schema's dtype and a matching shape for ARRAY. Bytes are copied.
 *  @return SL_OK, SL_EINVAL (type or shape mismatch, names column and record),
 *  SL_EIO, SL_ENOMEM. */
SL_API int sl_writer_append(sl_writer *w, const sl_tensor *cols, int ncols);
/** Records appended so far. */
SL_API uint64_t sl_writer_count(const sl_writer *w);
/** Finish: write index and footer, fsync, rename into place, fsync the
 *  directory. After an error the dataset is not published. */
SL_API int sl_writer_close(sl_writer *w);
/** Free the writer. If it was not closed successfully, the temporary files
 *  are removed and nothing appears at `path`. Accepts NULL. */
SL_API void sl_writer_free(sl_writer *w);

/* ==========================================================================
 * The record format: reader
 * ========================================================================== */

/** sl_reader_open flags. */
#define SL_READ_NO_VERIFY 0x1u  /**< skip per-record checksums (index and footer
                                     are always verified) */
#define SL_READ_NO_MMAP   0x2u  /**< use pread instead of a memory mapping */

/** Reads a dataset: a single .slr file or a directory with a manifest.
 *  Thread safety: every function that takes a const reader may be called
 *  from many threads at once (each with its own sl_record). */
typedef struct sl_reader sl_reader;

/** One record read from a reader. Column views point into the file mapping
 *  (zero copy) or into this record's own scratch memory (compressed columns,
 *  pread mode); they stay valid until the next read into this record, or
 *  sl_record_free(), or sl_reader_free(), whichever comes first.
 *  Use sl_tensor_copy (or sl_buffer_retain on col->buf, when set) to keep one. */
typedef struct sl_record sl_record;

/** Open a dataset; reads only footer, index, schema and manifest.
 *  @return SL_OK, SL_EIO, SL_ECORRUPT, SL_EUNSUPPORTED, SL_EINVAL, SL_ENOMEM.
 *  Messages name the file and cause. Since 0.1 */
SL_API int sl_reader_open(sl_reader **out, const char *path, unsigned flags);
SL_API uint64_t sl_reader_count(const sl_reader *r);
/** The dataset's schema (borrowed, lives as long as the reader). */
SL_API const sl_schema *sl_reader_schema(const sl_reader *r);
/** A metadata value (borrowed) or NULL. */
SL_API const char *sl_reader_meta(const sl_reader *r, const char *key);
/** Number of metadata entries, and the key of entry i (borrowed). */
SL_API int sl_reader_meta_count(const sl_reader *r);
SL_API const char *sl_reader_meta_key(const sl_reader *r, int i);
/** Number of shard files, and the path of shard i (borrowed). */
SL_API int sl_reader_shard_count(const sl_reader *r);
SL_API const char *sl_reader_shard_path(const sl_reader *r, int i);
/** Total bytes of data in all shards. */
SL_API uint64_t sl_reader_data_bytes(const sl_reader *r);

/** Values of a scalar (INT64 or FLOAT64) column for every record, straight
 *  from the index, without touching data pages. `*out` points at count()
 *  values (int64_t or double, by column type); borrowed for the reader's life.
 *  @return SL_OK, SL_EINVAL (not a scalar column). */
SL_API int sl_reader_index_column(const sl_reader *r, int col, const void **out);

SL_API int sl_record_create(sl_record **out);
SL_API void sl_record_free(sl_record *rec);
/** Read record `i` into `rec`, verifying its checksum unless the reader was
 *  opened with SL_READ_NO_VERIFY.
 *  @return SL_OK, SL_EINVAL (i out of range), SL_ECORRUPT ("file: record i:
 *  cause"), SL_EIO, SL_ENOMEM. */
SL_API int sl_reader_read(const sl_reader *r, uint64_t i, sl_record *rec);
/** Column `col` of the last record read (borrowed; see sl_record). INT64 and
 *  FLOAT64 columns are 0-d tensors; STRING/BYTES 1-D SL_U8; ARRAY as stored. */
SL_API const sl_tensor *sl_record_column(const sl_record *rec, int col);
/** Index of the last record read. */
SL_API uint64_t sl_record_index(const sl_record *rec);

/** Check every record's checksum, the index and footers of every shard.
 *  `progress(done, total, user)` is called now and then (may be NULL).
 *  Stops at the first damage unless `keep_going`; `bad_out` (may be NULL)
 *  receives the number of damaged records.
 *  @return SL_OK, SL_ECORRUPT (message names file and first bad record). */
SL_API int sl_reader_verify(const sl_reader *r, int keep_going, uint64_t *bad_out,
                            void (*progress)(uint64_t done, uint64_t total, void *user),
                            void *user);
SL_API void sl_reader_free(sl_reader *r);

/** Salvage an interrupted write: read the complete, checksum-valid records of
 *  `partial` (a temporary shard left by a writer that did not close) and write
 *  them as a valid dataset at `out`. `kept_out`/`dropped_out` may be NULL.
 *  @return SL_OK, SL_ECORRUPT (nothing salvageable: no readable header), SL_EIO. */
SL_API int sl_recover(const char *partial, const char *out, uint64_t *kept_out,
                      uint64_t *dropped_out);

/* ==========================================================================
 * Packing datasets (ImageFolder, IDX) into .slr
 * ========================================================================== */

/* (section owned by the source layer; see src/source/) */

/* ==========================================================================
 * Image ops
 * ========================================================================== */

/* (section owned by the ops layer; see src/ops/) */

/* ==========================================================================
 * Pipeline
 * ========================================================================== */

/* (section owned by the pipeline layer; see src/pipeline/) */

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_H */
