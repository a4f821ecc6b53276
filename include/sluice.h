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
 * Conventions (numbered with the other rules in docs/ARCHITECTURE.md, "Rules")
 *  - Fallible functions return an sl_status: SL_OK (0) on success, a negative
 *    code on error, SL_END (> 0) at the end of data. `rc < 0` is the error test.
 *  - After an error, sl_errmsg() returns a one-line message for this thread
 *    naming the file, record, op and cause (rule R2).
 *  - Constructors take `sl_x **out` first and the caller frees with sl_x_free(),
 *    which accepts NULL. `_release` drops a reference to a pooled object.
 *  - Unless a function says otherwise, a handle is used by one thread at a time
 *    (rule R9).
 *
 * Caveats
 *  - Do not fork() a process while a pipeline's threads run; create pipelines
 *    after forking (rule R6).
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
/** Set this thread's error message (printf-style) and return `code`, for
 *  user callbacks (map and filter functions) that fail: the pipeline puts
 *  the message after the file, record and op it names.
 *  `return sl_error_set(SL_EINVAL, "label %d out of range", v);` Since 0.1 */
SL_API int sl_error_set(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/** A static name for a status code ("SL_ECORRUPT"). Since 0.1 */
SL_API const char *sl_status_str(int status);

/* ==========================================================================
 * Memory: buffers, pools, tensors, samples
 * ========================================================================== */

/** Element types. Values are pinned (stored in files). */
typedef enum sl_dtype {
    SL_DTYPE_INVALID = 0,
    SL_U8 = 1, SL_I8 = 2, SL_U16 = 3, SL_I16 = 4, SL_U32 = 5, SL_I32 = 6,
    SL_U64 = 7, SL_I64 = 8, SL_F16 = 9, SL_F32 = 10, SL_F64 = 11, SL_BOOL = 12,
    /** bfloat16 (the top half of a float32), a tensor type of pipeline
     *  outputs (normalize, cast): not a column type of .slr files. Since 0.1 */
    SL_BF16 = 13
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
/** Room for a column name and its terminating zero: names are 1-63 bytes,
 *  in schemas, sources, ops and the .slr format alike. Since 0.1 */
#define SL_COLNAME_MAX 64

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

/** Create an empty schema. The caller frees it with sl_schema_free().
 *  A schema is a plain value: after building it, it may be read from any
 *  thread. @return SL_OK, SL_ENOMEM. Since 0.1 */
SL_API int sl_schema_create(sl_schema **out);
/** Append a column. `name`: 1–63 bytes, unique. For SL_COL_ARRAY give `dtype`,
 *  `ndim` (0..SL_MAX_DIMS; 0: one element per record) and `shape` (-1 for a dim
 *  that varies per record; may be NULL when ndim is 0);
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
/** For SL_COL_ARRAY: dtype, ndim (0..SL_MAX_DIMS; 0 is one element of the dtype) and
 *  shape (-1 for variable dims). */
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
                                  0 = default (4 GiB). A shard file (index and footer
                                  included) stays within it unless one record alone is
                                  larger (metadata set after the last record may also
                                  push the last shard over). With one shard the output
                                  is a single file;
                                  with more, a directory (see docs/FORMAT.md) */
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
 *  Creates the directory "<path>.partial/" for the data in flight; refuses to
 *  start (SL_EIO) while a non-empty one exists: it may hold an interrupted write to
 *  salvage with sl_recover(). An existing file at `path` is replaced on close.
 *  @return SL_OK, SL_EINVAL (no columns, options version, `path` is a
 *  directory), SL_EIO (names the path), SL_ENOMEM. Since 0.1 */
SL_API int sl_writer_open(sl_writer **out, const char *path, const sl_schema *schema,
                          const sl_writer_options *opts);
/** Set a metadata entry (UTF-8 key and value, copied), stored with the dataset.
 *  The value is often JSON (e.g. "classes" → ["cat","dog"]). Setting a key
 *  again replaces its value. Entries set before the first append are also
 *  stored in each shard's header, so sl_recover() keeps them.
 *  Keys 1-255 bytes, values up to 16 MiB.
 *  @return SL_OK, SL_EINVAL, SL_ELIMIT (over 64 MiB in all), SL_ENOMEM. Since 0.1 */
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
 *  directory. After an error the dataset is not published. Calling it again
 *  after success does nothing. @return SL_OK, SL_EIO, SL_ENOMEM. Since 0.1 */
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
 *  Use sl_tensor_copy (or sl_buffer_retain on col->buf, when set) to keep one.
 *  In mmap mode, views of uncompressed columns carry `buf`: the buffer that
 *  owns the file mapping, borrowed (the record holds no reference of its
 *  own). Retaining it keeps the view valid after the reader is freed; release
 *  only references you retained. Views into scratch memory have `buf` NULL. */
typedef struct sl_record sl_record;

/** Open a dataset. A single file: its header, footer and index are read and
 *  checked now. A directory: only its manifest and the first shard's header
 *  (the schema) are read; the record count, shard list and sizes come from
 *  the manifest. Each shard is opened and checked (header, footer, index,
 *  agreement with the manifest) when a read, prefetch or scan first needs
 *  it, and closed again when the reader has not used it for a while (at
 *  most a few shards stay open; docs/FORMAT.md, section 9), so damage in a
 *  shard is reported by every read of its records, with the same message
 *  (file, record, cause), and by sl_reader_verify, not by open.
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
/** Size in bytes of shard i's file (a local file or a remote object: the path
 *  may be a URL), 0 when i is out of range. Since 0.1 */
SL_API uint64_t sl_reader_shard_bytes(const sl_reader *r, int i);
/** Total bytes of data in all shards. */
SL_API uint64_t sl_reader_data_bytes(const sl_reader *r);
/** The records of shard i: `*first` (the global number of its first record)
 *  and `*count`, as the manifest plans them (a single file: 0 and all).
 *  @return SL_OK; SL_EINVAL (i out of range). Thread safety: any thread.
 *  Since 0.1 */
SL_API int sl_reader_shard_range(const sl_reader *r, int i, uint64_t *first, uint64_t *count);
/** Open shard i, if it is not open, and check it as the first read of one of
 *  its records would: header, footer and index checksums, index placement
 *  and, in a directory, agreement with the manifest. A shard that fails
 *  fails every read of its records alike (it is not opened again), so a
 *  caller can treat its whole range at once.
 *  @return SL_OK; SL_ECORRUPT, SL_EIO, SL_EUNSUPPORTED, SL_ENOMEM, with a
 *  message naming the shard and the cause. Thread safety: any thread.
 *  Since 0.1 */
SL_API int sl_reader_shard_check(const sl_reader *r, int i);

/** Values of a scalar (INT64 or FLOAT64) column for every record, straight
 *  from the index, without touching data pages (a directory opens each shard
 *  in turn to join them, once; a shard that does not open fails the call). `*out` points at count()
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

/** Check every record's checksum, the index and footers of every shard (a
 *  shard that does not open counts all of its records as damaged).
 *  `progress(done, total, user)` is called now and then (may be NULL).
 *  Stops at the first damage unless `keep_going`; `bad_out` (may be NULL)
 *  receives the number of damaged records.
 *  @return SL_OK, SL_ECORRUPT (message names file and first bad record). */
SL_API int sl_reader_verify(const sl_reader *r, int keep_going, uint64_t *bad_out,
                            void (*progress)(uint64_t done, uint64_t total, void *user),
                            void *user);
SL_API void sl_reader_free(sl_reader *r);

/** Salvage an interrupted write: read the complete, checksum-valid records of
 *  `partial` (the "<path>.partial" directory left by a writer that did not
 *  close, or a single shard file) and write them as a valid dataset at `out`.
 *  `out` NULL means `partial` without its ".partial" suffix. Records are taken
 *  in order and the walk stops at the first torn or damaged record, so the
 *  output holds exactly the records before it, with the same numbers.
 *  `partial` is not modified. `kept_out`/`dropped_out` (may be NULL) receive
 *  the records kept and those known lost (the torn one; in a finished shard,
 *  every record after the damage).
 *  @return SL_OK, SL_EINVAL (no `out` and no ".partial" suffix),
 *  SL_ECORRUPT (nothing salvageable: no readable header), SL_EIO, SL_ENOMEM.
 *  Since 0.1 */
SL_API int sl_recover(const char *partial, const char *out, uint64_t *kept_out,
                      uint64_t *dropped_out);
/** What sl_recover would keep of `partial`, without writing anything:
 *  `*complete_out` the records it would salvage; `*planned_out` the records
 *  the interrupted pack planned to write (from the plan sl_pack keeps in
 *  "<dst>.partial/"), or UINT64_MAX when that is not known (a writer's
 *  partial write of its own, a single shard file). Either may be NULL.
 *  The output sl_recover writes carries metadata "salvaged" (a JSON object:
 *  "records" kept, "planned" (null when not known), "from", and
 *  "classes_planned" when a class list was cut to the labels kept), which
 *  `sluice info` and `sluice verify` report.
 *  @return SL_OK (`*complete_out` 0 when nothing is complete, not even a
 *  shard's header); SL_EIO (cannot read `partial`), SL_ENOMEM.
 *  Thread safety: any thread. Since 0.1 */
SL_API int sl_recover_info(const char *partial, uint64_t *complete_out, uint64_t *planned_out);

/* ==========================================================================
 * Packing datasets (ImageFolder, IDX) into .slr
 * ========================================================================== */

/** What sl_pack found at its inputs. Values are stable. */
typedef enum sl_pack_kind {
    SL_PACK_UNKNOWN = 0,
    SL_PACK_IMAGEFOLDER = 1, /**< one directory: ROOT/CLASS/.../IMAGE, torchvision's layout */
    SL_PACK_IDX = 2,         /**< an IDX images file and an IDX labels file (MNIST style),
                                  plain or gzip-compressed, in either order */
    SL_PACK_SOURCE = 3       /**< any other source (TFRecord files, tar shards, a .slr
                                  dataset): packed through sl_pack_source. Since 0.1 */
} sl_pack_kind;

/** How sl_pack checks each ImageFolder file. Values are stable. */
typedef enum sl_pack_check {
    /** Read the header with the decoder the decode op uses (sl_decode_info):
     *  cheap, runs at disk speed; damage in the pixel data is found later,
     *  by the decode op, with the record named. No pixel cap applies. */
    SL_PACK_CHECK_HEADER = 0,
    /** Decode every image fully (sl_decode, default decoder limits), on all
     *  pack threads: a dataset that packs is one whose images all decode. */
    SL_PACK_CHECK_DECODE = 1
} sl_pack_check;

/** Whether pack (and sl_jpeg_add_restarts) re-encodes JPEGs with restart
 *  intervals so that the fused decode ops decode only the intervals a crop
 *  covers (docs/FORMAT.md, "JPEG interval table"). Values are stable. */
typedef enum sl_jpeg_restart {
    /** Store every file byte for byte as it was (the default). */
    SL_JPEG_RESTART_OFF = 0,
    /** An interval every k MCUs, k the largest divisor of the MCUs per row
     *  up to 4: decode cost follows the crop's rows and columns; storage
     *  about +0.5 % (optimised Huffman tables pay for the markers). */
    SL_JPEG_RESTART_AUTO = 1,
    /** An interval per MCU row: decode cost follows the crop's rows only;
     *  storage about -2.6 %. */
    SL_JPEG_RESTART_ROWS = 2
} sl_jpeg_restart;

/** Options for sl_pack. Initialise with SL_PACK_OPTIONS_INIT.
 *  ABI: `version` says which fields the caller's struct has. sl_pack accepts
 *  version 1 (the fields up to `user`; `check` is then SL_PACK_CHECK_HEADER),
 *  version 2 (up to `check`; `jpeg_restart` is then SL_JPEG_RESTART_OFF),
 *  version 3 (up to `jpeg_restart`; no resume, no stop) and version 4, so
 *  callers built against an older header keep working. */
typedef struct sl_pack_options {
    unsigned version;      /**< SL_PACK_OPTIONS_VERSION */
    int jobs;              /**< threads that read and check input files; 0 (default) =
                                one per online CPU. The output is byte-identical for
                                every value. */
    int skip_bad;          /**< 0 (default): an unreadable or non-image file stops the
                                pack with an error and no output. 1: skip it, count it
                                in sl_pack_report.skipped and go on. Never skips damage
                                inside IDX files (their records have no boundaries). */
    uint64_t shard_bytes;  /**< passed to the writer (sl_writer_options.shard_bytes);
                                0 = the writer's default */
    /** Called on the calling thread after each input record is handled (written
     *  or skipped; may be NULL): `done` of `total` so far, `bytes` of input
     *  payload written. Keep it cheap: it runs once per record. */
    void (*progress)(uint64_t done, uint64_t total, uint64_t bytes, void *user);
    void *user;            /**< passed to `progress` */
    /* ---- version 2 ---- */
    int check;             /**< sl_pack_check: SL_PACK_CHECK_HEADER (default) or
                                SL_PACK_CHECK_DECODE. Formats the decode op cannot
                                read (BMP, PPM/PGM/PBM, TIFF, GIF) fail either way. */
    /* ---- version 3 ---- */
    int jpeg_restart;      /**< sl_jpeg_restart: SL_JPEG_RESTART_OFF (default) keeps
                                every file's bytes; AUTO or ROWS re-encodes each JPEG
                                of an encoded column with sl_jpeg_add_restarts: other
                                bytes than the source file, the same pixels. Since 0.1 */
    /* ---- version 4 ---- */
    int resume;            /**< 0 (default): a "<dst>.partial" left by an interrupted
                                pack is an error (SL_EIO naming it and the ways on).
                                1: continue it, with the same inputs in the same order
                                and the same options (checked against the plan the
                                interrupted pack keeps there; SL_EINVAL says what
                                differs): its complete records are kept and the pack
                                goes on after them, ending byte for byte as an
                                uninterrupted pack would. With no "<dst>.partial", a
                                pack from the start. Since 0.1 */
    /** Polled on the calling thread between records (may be NULL), with `user`:
     *  nonzero stops the pack with SL_ECANCELED. What is written stays in
     *  "<dst>.partial" (report->records complete records) for `resume` or
     *  sl_recover; the message says how many of how many planned, and both
     *  ways on. Keep it cheap: it may answer from a look taken a moment ago,
     *  except when `fresh` is 1: the pack is about to give up on an input
     *  whose read failed (a signal that asks to stop breaks reads off), and
     *  a stop asked for now makes that failure the stop. Since 0.1 */
    int (*stop)(void *user, int fresh);
} sl_pack_options;
#define SL_PACK_OPTIONS_VERSION 4
#define SL_PACK_OPTIONS_INIT \
    {SL_PACK_OPTIONS_VERSION, 0, 0, 0, NULL, NULL, SL_PACK_CHECK_HEADER, SL_JPEG_RESTART_OFF, \
     0, NULL}

/** How many skipped inputs sl_pack_report names. */
#define SL_PACK_REPORT_BAD 4
/** Room for one "path: cause" line in sl_pack_report.bad. */
#define SL_PACK_REPORT_LINE 512

/** What sl_pack did. A plain struct the caller owns (no pointers inside). */
typedef struct sl_pack_report {
    sl_pack_kind kind;     /**< the input kind that was packed */
    uint64_t records;      /**< records written (with `resume`, those kept from the
                                interrupted pack too; stopped by `stop`, those safe in
                                "<dst>.partial") */
    uint64_t bytes;        /**< input payload bytes written (encoded images, pixels) by
                                this call */
    uint64_t skipped;      /**< inputs skipped under skip_bad (with `resume`, the
                                interrupted pack's too) */
    int nclasses;          /**< ImageFolder: number of classes; IDX: 0 */
    int nbad;              /**< lines filled in `bad` (<= SL_PACK_REPORT_BAD) */
    char bad[SL_PACK_REPORT_BAD][SL_PACK_REPORT_LINE]; /**< the first skipped
                                inputs, in record order, each "path: cause" */
} sl_pack_report;

/** Pack a dataset into a .slr dataset at `dst`.
 *
 *  The kind is found from the inputs: one directory is an ImageFolder; files
 *  are sniffed by content (IDX magic 0x00000803 images / 0x00000801 labels,
 *  plain or gzip). Anything else is SL_EUNSUPPORTED, naming the kinds known.
 *
 *  ImageFolder: classes are the sorted names of ROOT's subdirectories, label =
 *  a class's position in that order; each class directory is walked
 *  recursively (following symlinks, ordered as torchvision's ImageFolder
 *  orders it), taking files whose name ends in .jpg .jpeg .png .ppm .bmp .pgm
 *  .tif .tiff .webp (any case). Every file is checked by its content with
 *  the decoder the decode op uses (a PNG named .jpg is accepted): it must be
 *  a JPEG, PNG or still WebP whose header (opts->check = header) or whole
 *  image (decode) decodes; BMP, PPM/PGM, TIFF are refused with the file
 *  named (convert them, or skip them with skip_bad). Columns: `image` (bytes: the file
 *  unchanged), `label` (int64), `path` (string, relative to ROOT). Metadata:
 *  "classes" (a JSON list of names), "source" ("imagefolder").
 *
 *  IDX: columns `image` (uint8 array with the IDX dims after the first, e.g.
 *  28x28) and `label` (int64). The two files must agree on the count and
 *  every header must match its file's length. Metadata "source" ("idx").
 *
 *  Records are written in a deterministic order whatever `opts->jobs` is.
 *  On failure nothing appears at `dst` (the writer's temporary files are
 *  removed, unless `opts->resume` continued an interrupted pack: what it
 *  kept, and what this call added, stays in "<dst>.partial" to go on from);
 *  stopped by `opts->stop`, the complete records stay in "<dst>.partial"
 *  (SL_ECANCELED); on success a file at `dst` is replaced (a directory at
 *  `dst` is an error: the writer never replaces one).
 *
 *  @param[in]  srcs    `nsrc` input paths (a directory, or IDX files)
 *  @param[in]  dst     output path (a file, or a directory of shards if it
 *                      grows past opts->shard_bytes)
 *  @param[in]  opts    options, or NULL for SL_PACK_OPTIONS_INIT
 *  @param[out] report  filled in (on failure: records 0, skipped and bad as far
 *                      as the pack got); may be NULL
 *  @return SL_OK; SL_EINVAL (bad arguments, empty folder, empty class, counts
 *          that disagree); SL_EIO (a file cannot be read or written);
 *          SL_EDECODE (a file is not an image the decode op can read);
 *          SL_EUNSUPPORTED (animated WebP, an unknown options version);
 *          SL_ECORRUPT (a damaged IDX or
 *          gzip file); SL_EUNSUPPORTED (an unknown input kind or IDX dtype);
 *          SL_ELIMIT (an image file over 1 GiB, an IDX item over 256 MiB, a
 *          path over 4 KiB); SL_ENOMEM. The message names the path, the record where there is
 *          one, and the cause.
 *  Thread safety: any thread; calls on different `dst` may run at once.
 *  Since 0.1 */
SL_API int sl_pack(const char *const *srcs, int nsrc, const char *dst,
                   const sl_pack_options *opts, sl_pack_report *report);

/** Find what kind of input sl_pack would see at `srcs`, without packing.
 *  @return SL_OK with *kind_out set; SL_EUNSUPPORTED, SL_EIO, SL_EINVAL with a
 *  message saying why. Thread safety: any thread. Since 0.1 */
SL_API int sl_pack_detect(const char *const *srcs, int nsrc, sl_pack_kind *kind_out);

/** A static name for a pack kind ("imagefolder", "idx", "source", "unknown"). Since 0.1 */
SL_API const char *sl_pack_kind_name(sl_pack_kind kind);

/* ==========================================================================
 * Sources: the data users already have
 *
 * A source yields records as samples of named, typed columns. Formats:
 * sluice's .slr, a torchvision ImageFolder, IDX files, TFRecord files and
 * WebDataset tar shards (docs/SOURCES.md says how each maps to columns). A
 * pipeline names its source in the spec's "source" object; these calls open
 * one directly, to inspect it (`sluice info`), read records, or pack it.
 * ========================================================================== */

/** An open source. Opaque. One thread at a time per handle. */
typedef struct sl_source sl_source;

/** Open the source a spec's source object describes, e.g.
 *  `{"tfrecord": ["a.tfrecord"], "features": {"image/encoded": "image"}}`,
 *  `{"webdataset": "shard-{000..009}.tar"}`, `{"image_folder": "/data/train"}`,
 *  `{"idx": {"images": I, "labels": L}}` or `{"path": "train.slr"}`.
 *  Pipeline keys (shuffle, shard, parallel, chunk) are ignored.
 *  @return SL_OK; SL_EINVAL (bad object, naming the field), SL_EIO,
 *  SL_ECORRUPT, SL_EUNSUPPORTED, SL_ENOMEM, with a message naming the file.
 *  The caller frees `*out` with sl_source_free(). Since 0.1 */
SL_API int sl_source_open(sl_source **out, const char *json);

/** Open `n` paths, finding the format from their content: a .slr file or
 *  dataset directory, an ImageFolder directory, an IDX images + labels
 *  pair, TFRecord files, tar shards. `options_json` (may be NULL) adds that
 *  format's options (e.g. `{"features": {...}}`). Since 0.1 */
SL_API int sl_source_open_paths(sl_source **out, const char *const *paths, int n,
                                const char *options_json);

/** The format of `n` paths, found from their content as sl_source_open_paths
 *  finds it, without opening the source (a stat and the first bytes of each
 *  file): `*key_out` is the spec's source key for it, static: "path" (a .slr
 *  file or dataset directory), "image_folder", "idx", "tfrecord" or
 *  "webdataset". Use it to tell a user which reader fits an input.
 *  @return SL_OK; SL_EUNSUPPORTED (no format fits, naming the path); SL_EIO
 *  (a path cannot be read); SL_EINVAL (inputs of different kinds, too many
 *  inputs for the kind). Thread safety: any thread. Since 0.1 */
SL_API int sl_source_detect(const char *const *paths, int n, const char **key_out);

/** Release a source. Accepts NULL. Since 0.1 */
SL_API void sl_source_free(sl_source *src);

/** The format's name ("slr", "image_folder", "idx", "tfrecord", "webdataset",
 *  "memory"); static. Since 0.1 */
SL_API const char *sl_source_kind(const sl_source *src);
/** What a user does about a damaged record of this source, in a sentence
 *  for messages (`sluice verify` prints it after the damage); static. */
SL_API const char *sl_source_repair_hint(const sl_source *src);
/** The repair hint of a .slr dataset (also for one read through sl_reader). */
#define SL_SLR_REPAIR_HINT                                                                \
    "damaged records cannot be read; re-pack from the source, or use 'sluice cat' to read " \
    "the records that are intact"
/** A short name for messages (a file or directory name); borrowed. */
SL_API const char *sl_source_name(const sl_source *src);
/** Number of records. */
SL_API uint64_t sl_source_count(const sl_source *src);
/** Number of columns, and column `col`'s name (borrowed) and type. */
SL_API int sl_source_ncols(const sl_source *src);
SL_API const char *sl_source_colname(const sl_source *src, int col);
SL_API sl_coltype sl_source_coltype(const sl_source *src, int col);

/** The index of the column named `name`. @return the index (>= 0), or
 *  SL_EINVAL with a message naming the source and listing its columns,
 *  the closest to `name` first. Since 0.1 */
SL_API int sl_source_find_column(const sl_source *src, const char *name);

/** Describe the source as one JSON object: kind, name, records, columns
 *  (name, type, dtype, shape, encoded, indexed) and the format's own facts
 *  (files, index, compression). snprintf-style: writes at most `cap` bytes
 *  with a terminating zero into `buf` (may be NULL with cap 0) and sets
 *  `*len_out` (may be NULL) to the full length. Since 0.1 */
SL_API int sl_source_describe(const sl_source *src, char *buf, size_t cap, size_t *len_out);

/** Read record `i` into `out` (cleared first). Columns are owning references
 *  or views valid until sl_source_free(src); release them with
 *  sl_sample_clear(). Checksums are verified where the format has them.
 *  @return SL_OK; SL_EINVAL (i out of range); SL_ECORRUPT, SL_EIO,
 *  SL_EDECODE with a message naming file, record and cause; SL_ENOMEM.
 *  The source stays usable after a failed read. Since 0.1 */
SL_API int sl_source_read(sl_source *src, uint64_t i, sl_sample *out);

/** Read record `i` and check it as sl_pack_source() does: every column
 *  meant to hold image files (an ImageFolder's `image`, a tar shard's
 *  `.jpg`/`.png`/`.webp` members, a TFRecord's encoded images) must be an
 *  image the decode op reads, by content: its header with
 *  SL_PACK_CHECK_HEADER, every pixel with SL_PACK_CHECK_DECODE. A .slr
 *  dataset's columns carry no image mark: its bytes columns that hold an
 *  image, by content, in one of the first 16 records that read (found on the
 *  first call) are checked (a dataset packed with SL_PACK_CHECK_HEADER may
 *  hold an image damaged past its header). The message names the record's
 *  `path` (or `__key__`) column when the source has one.
 *  `*images_out` (may be NULL) is set to the number of image values checked.
 *  @return SL_OK; the errors of sl_source_read(); SL_EDECODE, SL_ELIMIT or
 *  SL_EUNSUPPORTED for an image that does not decode, with a message naming
 *  the file (and record, member or offset where the format has them), the
 *  column and the cause; SL_EINVAL (bad `check`). Thread safety: as
 *  sl_source_read. Since 0.1 */
SL_API int sl_source_check(sl_source *src, uint64_t i, int check, int *images_out);

/** A reading handle on a source, for one thread: several threads read one
 *  source at once, each through its own reader (sl_source_read is the same
 *  with a reader the source keeps for one thread). Output and errors as
 *  sl_source_read. The source must outlive its readers. Since 0.1 */
typedef struct sl_source_reader sl_source_reader;
SL_API int sl_source_reader_create(sl_source *src, sl_source_reader **out);
SL_API int sl_source_reader_read(sl_source_reader *rd, uint64_t i, sl_sample *out);
SL_API void sl_source_reader_free(sl_source_reader *rd);

/** Values of column `col` for every record when the source can give them
 *  without reading records (an index): `*out` points at sl_source_count()
 *  int64_t (SL_COL_INT64) or double (SL_COL_FLOAT64) values, borrowed for
 *  the source's life. @return SL_OK, SL_EINVAL (column not indexed). */
SL_API int sl_source_index_column(const sl_source *src, int col, const void **out);
/** 1 when every read checks a checksum the format stores per record (.slr;
 *  TFRecord unless opened with "verify": false), so a scan of every record
 *  verifies the data; 0 when the format has none (tar, ImageFolder, IDX,
 *  memory) or `src` is NULL. Fixed when the source is opened.
 *  Thread safety: any thread. Since 0.1 */
SL_API int sl_source_checksummed(const sl_source *src);

/** Pack a source into a .slr dataset at `dst`: one column per source column
 *  (scalar int64 and float columns go to the index, so filters on them run
 *  on the index), records in source order, metadata "source" = the kind.
 *  `opts->jobs` and `opts->check` apply as in sl_pack; `opts->skip_bad`
 *  skips records that fail to read. Same crash safety as sl_pack.
 *  Thread safety: any thread, one call per source at a time. Since 0.1 */
SL_API int sl_pack_source(sl_source *src, const char *dst, const sl_pack_options *opts,
                          sl_pack_report *report);

/** Expand one input argument as every source expands it: a brace pattern
 *  (`train-{00000..00127}.tfrecord`, `{a,b}`) into its paths, `@list.txt`
 *  into the paths listed there (one a line, relative to the list's folder),
 *  anything else into itself. `*paths_out` is a NULL-terminated array of
 *  `*n_out` paths, freed with sl_paths_free(). @return SL_OK; SL_EINVAL (a
 *  malformed pattern), SL_EIO (an unreadable list), SL_ELIMIT, SL_ENOMEM.
 *  Thread safety: any thread. Since 0.1 */
SL_API int sl_paths_expand(const char *pattern, char ***paths_out, int *n_out);
/** Free what sl_paths_expand() returned. Accepts NULL. Since 0.1 */
SL_API void sl_paths_free(char **paths);

/** Build the sidecar index of one TFRecord file or tar shard (`PATH.slidx`:
 *  record offsets, column types and scalar columns), so that opening it
 *  needs no scan and its scalar columns filter without reading records.
 *  `options_json` (may be NULL): the source options used to read it.
 *  @return SL_OK, SL_EUNSUPPORTED (a format without sidecar indexes), and
 *  the errors of reading it. Since 0.1 */
SL_API int sl_source_index_build(const char *path, const char *options_json);

/* ==========================================================================
 * Image ops
 * ========================================================================== */

/*
 * Per-sample image transforms, usable alone from C or as pipeline ops.
 * Images are HWC SL_U8 tensors (H, W, C) with C = 3 (RGB) or 1 (gray);
 * encoded images are 1-D SL_U8 tensors or plain (pointer, size) pairs.
 *
 * Output tensors, for every function below that fills an `out` tensor:
 *  - if `out->data` is NULL the function allocates a new heap buffer and
 *    `out` owns one reference to it (release with sl_tensor_release);
 *  - otherwise `out->data` is a caller-owned destination of `out->nbytes`
 *    bytes (its capacity); the function writes there without allocating, and
 *    on success sets dtype, ndim, shape and nbytes (out->buf is left as is).
 *    Too small a destination gives SL_EINVAL. This is how a pipeline writes
 *    into a reused scratch buffer or straight into a batch slot.
 * Source and destination must not overlap unless a function says so.
 * Thread safety: the functions are reentrant; an sl_decoder is used by one
 * thread at a time (keep one per thread).
 */

/** Colour of a decoded image. */
typedef enum sl_color {
    SL_COLOR_GRAY = 1,   /**< one channel, PIL "L" (ITU-R 601-2 luma of RGB) */
    SL_COLOR_RGB = 3     /**< three channels, PIL "RGB" (alpha dropped, not composited) */
} sl_color;

/** Encoded image formats, found from the bytes (magic), never the file name. */
typedef enum sl_image_format {
    SL_FORMAT_UNKNOWN = 0,
    SL_FORMAT_JPEG = 1,
    SL_FORMAT_PNG = 2,
    SL_FORMAT_WEBP = 3   /**< RIFF container with the "WEBP" form type */
} sl_image_format;

/** What an image header says, read without decoding pixels. */
typedef struct sl_image_info {
    int32_t format;      /**< sl_image_format */
    int32_t width;       /**< pixels */
    int32_t height;      /**< pixels */
    int32_t channels;    /**< channels as stored (1 gray, 2 gray+alpha, 3, 4) */
} sl_image_info;

/** Decoder tunables for sl_decoder_set / sl_decoder_get. Values are pinned. */
typedef enum sl_decoder_param {
    /** Largest width*height accepted; a larger header gives SL_ELIMIT before
     *  any pixel memory is allocated. Range 1 .. 2^40, default 64 Mpx
     *  (64*1024*1024). */
    SL_DECODE_MAX_PIXELS = 1,
    /** Largest number of progressive JPEG scans accepted (a hostile file can
     *  make decoding slow with thousands of scans). Range 1 .. 1000000,
     *  default 1000. */
    SL_DECODE_MAX_SCANS = 2,
    /** What a libjpeg warning (data libjpeg can read past) does: an
     *  sl_warnings value. Default SL_WARNINGS_DEFAULT. docs/OPS.md has the
     *  table of warnings and their outcome per value. Since 0.1 */
    SL_DECODE_WARNINGS = 3,
    /** 1: apply the JPEG's EXIF orientation (APP1 tag 0x0112), so the image
     *  comes out upright and sl_decode_info reports the upright size (width
     *  and height swap for orientations 5..8); crops given to
     *  sl_decode_crop_resize are in upright coordinates. 0 (default): pixels
     *  as stored, as PIL's Image.open and torchvision's ImageFolder give
     *  them. PNG eXIf chunks are ignored. Range 0..1. Since 0.1 */
    SL_DECODE_EXIF_ORIENTATION = 4,
    /** 1: feed every JPEG to libjpeg-turbo's checking Huffman decoder, so
     *  corrupt entropy-coded data is found wherever it is decoded. 0
     *  (default): baseline files without restart markers go through its
     *  fast decoder, which reads a corrupt code as zero without a warning;
     *  in SL_WARNINGS_DEFAULT a whole decode then finds such damage by the
     *  bytes it leaves unused (docs/OPS.md, "Corrupt entropy data", says
     *  what each mode catches and what it costs). SL_WARNINGS_STRICT always
     *  checks; `sluice pack --check decode` sets it. Range 0..1. Since 0.1 */
    SL_DECODE_CHECK_ENTROPY = 5
} sl_decoder_param;

/** Values of SL_DECODE_WARNINGS. Values are pinned. */
typedef enum sl_warnings {
    /** Fail on warnings that mean damaged pixels (premature end of data,
     *  corrupt entropy data, bad progression); pass those that leave the
     *  pixels as the encoder wrote them (extraneous bytes between segments,
     *  unknown JFIF version, unknown Adobe transform, odd SOS parameters in
     *  a sequential file, bad ICC marker). */
    SL_WARNINGS_DEFAULT = 0,
    /** Fail on any warning (the behaviour of earlier 0.1 builds), and decode JPEG
     *  entropy-coded data on libjpeg-turbo's checking Huffman path (as
     *  SL_DECODE_CHECK_ENTROPY), so every corrupt code that is decoded fails. */
    SL_WARNINGS_STRICT = 1,
    /** Pass every warning except a file that ends early: accept what PIL's
     *  Image.open(f).convert("RGB") accepts, with the same pixels. */
    SL_WARNINGS_LENIENT = 2
} sl_warnings;

/** Reusable decoding state (a libjpeg decompressor, a PNG context, scratch
 *  rows), kept per thread so that steady-state decoding does no allocation
 *  beyond growing its scratch to the largest image seen. Opaque. */
typedef struct sl_decoder sl_decoder;

/** Create a decoder with default limits.
 *  @param[out] out the new decoder; free with sl_decoder_free().
 *  @return SL_OK, SL_ENOMEM. Thread safety: any thread. Since 0.1 */
SL_API int sl_decoder_create(sl_decoder **out);
/** Free a decoder and its scratch memory. Accepts NULL. Since 0.1 */
SL_API void sl_decoder_free(sl_decoder *dec);
/** Set a tunable (sl_decoder_param).
 *  @return SL_OK, SL_EINVAL (unknown param or value out of range). Since 0.1 */
SL_API int sl_decoder_set(sl_decoder *dec, int param, int64_t value);
/** Current value of a tunable, or -1 for an unknown param. Since 0.1 */
SL_API int64_t sl_decoder_get(const sl_decoder *dec, int param);

/** Which format the bytes are, by their magic number. Since 0.1 */
SL_API sl_image_format sl_image_sniff(const void *data, size_t size);

/** Read an image's header (no pixels).
 *  @return SL_OK, SL_EDECODE ("decode: cause"; unknown format, damaged
 *  header), SL_ELIMIT (more pixels than SL_DECODE_MAX_PIXELS).
 *  Thread safety: one thread per decoder. Since 0.1 */
SL_API int sl_decode_info(sl_decoder *dec, const void *data, size_t size,
                          sl_image_info *info_out);

/** Decode a JPEG, PNG or WebP (chosen by content) into an HWC SL_U8 image.
 *  JPEG: libjpeg-turbo with the settings PIL uses (ISLOW DCT, fancy
 *  upsampling), so pixels equal PIL's; gray, YCbCr, CMYK/YCCK (converted to
 *  RGB as PIL's convert("RGB") does) and progressive files. PNG: every colour
 *  type and bit depth; 16-bit samples keep their high byte, alpha is dropped,
 *  palettes expanded. WebP (lossy and lossless, via libwebp): alpha dropped
 *  as for PNG; animated WebP is SL_EUNSUPPORTED (refused, not cut to its
 *  first frame). A libjpeg warning that means damaged pixels (truncated
 *  or corrupt data) is an error, so damaged data never yields silently wrong
 *  pixels; SL_DECODE_WARNINGS changes which warnings fail. EXIF orientation
 *  is applied only with SL_DECODE_EXIF_ORIENTATION (PIL's Image.open does
 *  not apply it).
 *  @param[in] dec   decoder (per thread)
 *  @param[in] data  encoded bytes, `size` of them (borrowed for the call)
 *  @param[in] color SL_COLOR_RGB or SL_COLOR_GRAY
 *  @param[out] out  see "Output tensors" above; shape (H, W, color)
 *  @return SL_OK, SL_EINVAL, SL_EDECODE ("decode: corrupt JPEG data: premature
 *  end of data segment"; callers prefix file/record/op), SL_ELIMIT, SL_ENOMEM,
 *  SL_EUNSUPPORTED (animated WebP). Since 0.1 */
SL_API int sl_decode(sl_decoder *dec, const void *data, size_t size, sl_color color,
                     sl_tensor *out);

/** A rectangle in pixel coordinates: top row `y`, left column `x`. */
typedef struct sl_box {
    int32_t y, x, h, w;
} sl_box;

/** Resampling filters. */
typedef enum sl_interp {
    SL_INTERP_BILINEAR = 1, /**< PIL BILINEAR: triangle filter, widened when
                                 shrinking (antialiased) */
    SL_INTERP_AREA = 2,     /**< PIL BOX: area average */
    SL_INTERP_NEAREST = 3,  /**< PIL NEAREST (the pixel under each output pixel's
                                 centre; torch's "nearest-exact" up to float rounding) */
    SL_INTERP_BICUBIC = 4,  /**< PIL BICUBIC (cubic a = -0.5, widened when shrinking).
                                 Since 0.1 */
    SL_INTERP_LANCZOS = 5,  /**< PIL LANCZOS (3 lobes). Since 0.1 */
    SL_INTERP_HAMMING = 6,  /**< PIL HAMMING. Since 0.1 */
    SL_INTERP_NEAREST_TORCH = 7, /**< torch's "nearest": source index
                                 floor(i * in / out) in float32 (sl_view_resize
                                 only). Since 0.1 */
    SL_INTERP_NEAREST_EXACT = 8  /**< torch's "nearest-exact": floor((i + 0.5) *
                                 in / out) in float32 (sl_view_resize only).
                                 Since 0.1 */
} sl_interp;

/** Fused decode + crop + resize: decode only the part of the image that
 *  `crop` needs, at the smallest JPEG DCT scale (1/8, 1/4, 1/2 or 1: those
 *  libjpeg-turbo runs with SIMD) that still has at least out_h x out_w pixels
 *  in the crop, then resize straight into `out`. The rows below the crop are
 *  never decoded, so damage there goes unnoticed (the output is still right).
 *  A JPEG carrying an interval table (sl_jpeg_add_restarts, pack
 *  --jpeg-restart) decodes only the restart intervals the crop covers.
 *  At scale 8/8 equal to sl_decode + sl_image_crop + sl_image_resize pixel
 *  for pixel; with DCT scaling equal to the scaled whole decode, cropped and
 *  resized (within a mean absolute difference of 2 levels of the full-scale
 *  result). PNG and WebP input is decoded whole, then resized from the box.
 *  @param[in] crop  box in original-image coordinates (upright ones with
 *                   SL_DECODE_EXIF_ORIENTATION; NULL: whole image); must lie
 *                   inside the image
 *  @param[out] out  (out_h, out_w, color) SL_U8; see "Output tensors"
 *  @return as sl_decode, plus SL_EINVAL for a box outside the image.
 *  Since 0.1 */
SL_API int sl_decode_crop_resize(sl_decoder *dec, const void *data, size_t size,
                                 sl_color color, const sl_box *crop, int out_h, int out_w,
                                 sl_interp interp, sl_tensor *out);

/** Re-encode a JPEG losslessly for region decoding: the same DCT
 *  coefficients and quantisation tables (so the same pixels, in every
 *  decoder), baseline (a progressive file is converted), optimised Huffman
 *  tables, a restart marker every k MCUs (`mode`), and an APP15 "SLRST"
 *  segment before the frame header listing where each interval starts
 *  (docs/FORMAT.md, "JPEG interval table"). The result is a valid JPEG any
 *  reader decodes; sl_decode_crop_resize and the fused pipeline ops then
 *  decode only the intervals that cover the crop. APPn (EXIF, ICC) and COM
 *  segments are kept.
 *  Input that is not a JPEG, that libjpeg cannot transcode (12-bit,
 *  damaged: any libjpeg warning), that is too small to gain (fewer than two
 *  intervals) or whose table would not fit one segment is left alone:
 *  *changed_out = 0 and `out` is untouched.
 *  @param[in]  mode         SL_JPEG_RESTART_AUTO or _ROWS (_OFF: no change)
 *  @param[out] out          the new file, 1-D SL_U8; see "Output tensors"
 *  @param[out] changed_out  1 when `out` was written
 *  @return SL_OK (changed or not), SL_EINVAL, SL_ENOMEM.
 *  Thread safety: any thread. Since 0.1 */
SL_API int sl_jpeg_add_restarts(const void *data, size_t size, sl_jpeg_restart mode,
                                sl_tensor *out, int *changed_out);

/** Resize an HWC SL_U8 image to out_h x out_w, matching PIL's
 *  Image.resize(size, filter) pixel for pixel (fixed-point, horizontal pass
 *  then vertical). @return SL_OK, SL_EINVAL, SL_ENOMEM. Since 0.1 */
SL_API int sl_image_resize(const sl_tensor *src, int out_h, int out_w, sl_interp interp,
                           sl_tensor *out);
/** Resize the region `box` of `src` (PIL's resize(size, filter, box=...)):
 *  crop + resize in one pass, reading pixels outside the box as the filter
 *  needs, as PIL does. `box` is (x0, y0, x1, y1) in source pixels, may be
 *  fractional, must lie inside the image. Since 0.1 */
SL_API int sl_image_resize_box(const sl_tensor *src, const double box[4], int out_h,
                               int out_w, sl_interp interp, sl_tensor *out);
/** Copy the region `box` of `src` into `out`. Parts of the box outside the
 *  image are filled with 0 (torchvision's CenterCrop padding).
 *  @return SL_OK, SL_EINVAL (empty box), SL_ENOMEM. Since 0.1 */
SL_API int sl_image_crop(const sl_tensor *src, const sl_box *box, sl_tensor *out);
/** Mirror left-right. `out` may be `src` itself (in place). Since 0.1 */
SL_API int sl_image_flip(const sl_tensor *src, sl_tensor *out);
/** Rotate counter-clockwise by `degrees` about the centre, keeping the size,
 *  bilinear, uncovered pixels set to `fill` (PIL's rotate(angle, BILINEAR,
 *  fillcolor=(fill,)*C)). Since 0.1 */
SL_API int sl_image_rotate(const sl_tensor *src, double degrees, uint8_t fill,
                           sl_tensor *out);

/** Layouts for sl_image_normalize. */
typedef enum sl_layout {
    SL_LAYOUT_HWC = 0,
    SL_LAYOUT_CHW = 1
} sl_layout;

/** Normalize, change layout and cast in one pass:
 *  y = (x / 255 - mean[c]) / std[c] computed in float32 exactly as
 *  torchvision's ToTensor + Normalize, stored as SL_F32, SL_F16 or SL_BF16 (round to
 *  nearest even) or SL_U8 (round(255 * y), saturated; mean 0, std 1 gives the
 *  pixels unchanged).
 *  @param[in] mean,std per channel (C values each; NULL: 0 and 1)
 *  @param[out] out shape (C, H, W) or (H, W, C); see "Output tensors" — pass a
 *  view of a batch slot to write straight into a batch.
 *  @return SL_OK, SL_EINVAL (dtype, std == 0), SL_ENOMEM. Since 0.1 */
SL_API int sl_image_normalize(const sl_tensor *src, const float *mean, const float *std,
                              sl_layout layout, sl_dtype dtype, sl_tensor *out);

/** Convert a tensor's elements to `dtype` (saturating and rounding to nearest
 *  for integer targets; float16 round to nearest even).
 *  @return SL_OK, SL_EINVAL (unsupported dtype: bool), SL_ENOMEM. Since 0.1 */
SL_API int sl_tensor_cast(const sl_tensor *src, sl_dtype dtype, sl_tensor *out);
/** One-hot vector of length `classes` with 1 at `label`, as `dtype`.
 *  @return SL_OK, SL_EINVAL (label out of range; names it). Since 0.1 */
SL_API int sl_one_hot(int64_t label, int classes, sl_dtype dtype, sl_tensor *out);

/** torchvision RandomResizedCrop.get_params, exactly, drawing from `rng`:
 *  up to 10 tries of area fraction in `scale` and log-uniform aspect ratio in
 *  `ratio`, else a centre crop with the ratio clamped.
 *  @return SL_OK, SL_EINVAL (empty image, bad ranges). Since 0.1 */
SL_API int sl_rrc_box(int height, int width, const double scale[2], const double ratio[2],
                      sl_rng *rng, sl_box *out);
/** The same with the uniform [0,1) draws given: try k (0..9) uses draws[4k]
 *  (area), draws[4k+1] (log ratio), draws[4k+2] (top: floor(u * (H-h+1))),
 *  draws[4k+3] (left). Area and ratio follow torch's float32 arithmetic
 *  (lo + u * (hi - lo)). For tests that feed torchvision the same draws.
 *  Since 0.1 */
SL_API int sl_rrc_box_draws(int height, int width, const double scale[2],
                            const double ratio[2], const double draws[40], sl_box *out);
/** torchvision Resize(size) output shape for an int size: the shorter side
 *  becomes `size`, the longer int(size * long / short). Since 0.1 */
SL_API void sl_resize_shorter_shape(int height, int width, int size, int *out_h, int *out_w);
/** torchvision CenterCrop box (round-half-even offsets; a crop larger than
 *  the image gets negative offsets, i.e. zero padding in sl_image_crop).
 *  Since 0.1 */
SL_API void sl_center_crop_box(int height, int width, int crop_h, int crop_w, sl_box *out);


/* ==========================================================================
 * Image views: the arithmetic of torchvision.transforms.v2
 * ========================================================================== */

/*
 * The kernels behind the Python module sluice.transforms (docs/OPS.md,
 * "Transforms"). Each reads a source view and writes a destination view the
 * caller allocated, so an image may lie in memory any way: an HWC numpy
 * array, a CHW torch tensor, a crop, flip or permutation of either (strides
 * of any sign). Elements are SL_U8 or SL_F32; 1 to 4 channels. The values
 * follow torchvision.transforms.v2 on tensors, operation for operation in
 * float32 where it computes in float32 (docs/OPS.md lists each function's
 * reference and tolerance). Source and destination must not overlap unless
 * a function says so. Nothing allocates but the resampler's per-thread
 * scratch (SL_ENOMEM when that fails). Thread safety: reentrant.
 */

/** An image laid out by strides: element (y, x, k) is at
 *  data + (y * sh + x * sw + k * sc) elements. */
typedef struct sl_image_view {
    void *data;          /**< element (0, 0, 0) */
    int32_t dtype;       /**< SL_U8 or SL_F32 */
    int32_t h, w, c;     /**< rows, columns (1 .. 2^24 each), channels (1..4) */
    int64_t sh, sw, sc;  /**< strides in elements, any sign */
} sl_image_view;

/** Flags of sl_view_convert and sl_view_normalize. */
enum {
    SL_VIEW_FLIP_H = 1,  /**< mirror left-right while copying */
    SL_VIEW_FLIP_V = 2,  /**< mirror top-bottom while copying */
    SL_VIEW_SCALE = 4    /**< dtype change with value scaling, as v2's
                              ToDtype(scale=True): uint8 -> float32 is
                              x * float32(1/255); float32 -> uint8 is
                              trunc(x * 255.999), saturated */
};

/** Copy `src` into `dst` (same h, w, c), mirrored per SL_VIEW_FLIP_H/_V and
 *  converted to dst's dtype: with SL_VIEW_SCALE as ToDtype(scale=True),
 *  without it a plain cast (float -> uint8 truncates toward zero and
 *  saturates). Crop, flip, HWC <-> CHW and ToDtype are all this call.
 *  @return SL_OK, SL_EINVAL (shapes or dtypes). Since 0.1 */
SL_API int sl_view_convert(const sl_image_view *src, const sl_image_view *dst, int flags);

/** v2's Normalize: dst = (x - mean[k]) / std[k] in float32 (as torch's
 *  sub_ then div_), dst SL_F32. A uint8 source with SL_VIEW_SCALE is first
 *  x * float32(1/255) (ToDtype(float32, scale=True) then Normalize, bit for
 *  bit); flips as sl_view_convert. dst may equal src (same data and
 *  strides: in place). @return SL_OK, SL_EINVAL (std 0, dtypes). Since 0.1 */
SL_API int sl_view_normalize(const sl_image_view *src, const sl_image_view *dst,
                             const float *mean, const float *std, int flags);

/** Resize `src` to dst's h x w. SL_U8 with SL_INTERP_BILINEAR, _AREA,
 *  _BICUBIC, _LANCZOS, _HAMMING, _NEAREST: PIL's Image.resize pixel for
 *  pixel (what v2's Resize gives a PIL image; its uint8 tensor path rounds
 *  within 1 level of it). SL_F32: the antialiased separable filter of
 *  torch's interpolate(antialias=True) (bilinear, bicubic with a = -0.5)
 *  in float; `antialias` 0 gives torch's plain bilinear / bicubic
 *  (a = -0.75, clamped borders). _NEAREST_TORCH and _NEAREST_EXACT: torch's
 *  index rules, any dtype. Source and destination channel strides may
 *  differ (planar or interleaved). @return SL_OK, SL_EINVAL, SL_ENOMEM.
 *  Since 0.1 */
SL_API int sl_view_resize(const sl_image_view *src, const sl_image_view *dst, sl_interp interp,
                          int antialias);

/** Colour operations of sl_view_adjust (v2's functional names). */
typedef enum sl_adjust {
    SL_ADJUST_BRIGHTNESS = 1, /**< adjust_brightness: x * f, clamped */
    SL_ADJUST_CONTRAST = 2,   /**< adjust_contrast: blend with the mean grey level */
    SL_ADJUST_SATURATION = 3, /**< adjust_saturation: blend with the grey image */
    SL_ADJUST_HUE = 4,        /**< adjust_hue: hue shifted by f in [-0.5, 0.5] (HSV) */
    SL_ADJUST_GRAY = 5,       /**< rgb_to_grayscale: dst has 1 or 3 equal channels */
    SL_ADJUST_SHARPNESS = 6,  /**< adjust_sharpness: blend with the 3x3 smoothed image
                                   (the border rows and columns kept; all clamped),
                                   f >= 0 */
    SL_ADJUST_POSTERIZE = 7,  /**< posterize: keep the top f bits (f an integer 0..8) */
    SL_ADJUST_SOLARIZE = 8,   /**< solarize: invert values >= f (f <= 255 for uint8,
                                   <= 1 for float32) */
    SL_ADJUST_INVERT = 9,     /**< invert: 255 - x, 1 - x (f unused) */
    SL_ADJUST_AUTOCONTRAST = 10, /**< autocontrast: each channel stretched from its
                                      minimum..maximum to the full range (f unused) */
    SL_ADJUST_EQUALIZE = 11   /**< equalize: each channel's histogram equalized with
                                   PIL's look-up table (f unused) */
} sl_adjust;

/** One colour operation of torchvision v2 (uint8: its float32 arithmetic,
 *  truncated to uint8 as its .to(uint8) does; float32: clamped to [0, 1]).
 *  Brightness, contrast, saturation, sharpness take factor >= 0; hue
 *  -0.5..0.5. A 1-channel image: contrast and brightness apply, saturation
 *  and hue copy. Posterize, solarize, invert and equalize take 1 to 4
 *  channels, the others 1 or 3. Equalize on float32 works on the image
 *  converted to uint8 (v2's to_dtype(scale=True)) and gives it back scaled.
 *  dst may equal src (in place). @return SL_OK, SL_EINVAL. Since 0.1 */
SL_API int sl_view_adjust(const sl_image_view *src, const sl_image_view *dst, sl_adjust op,
                          double factor);

/** Border modes of sl_view_pad (torchvision's padding_mode). */
typedef enum sl_pad_mode {
    SL_PAD_CONSTANT = 0, /**< the fill value */
    SL_PAD_EDGE = 1,     /**< the edge pixel repeated */
    SL_PAD_REFLECT = 2,  /**< mirrored without the edge pixel (needs pad < size) */
    SL_PAD_SYMMETRIC = 3 /**< mirrored with the edge pixel (needs pad <= size) */
} sl_pad_mode;

/** Pad: dst (same dtype and c) holds src at row `top`, column `left`, the
 *  border around it per `mode`; `fill` (c values, NULL: 0) for
 *  SL_PAD_CONSTANT, cast to dst's dtype. @return SL_OK, SL_EINVAL. Since 0.1 */
SL_API int sl_view_pad(const sl_image_view *src, const sl_image_view *dst, int top, int left,
                       sl_pad_mode mode, const float *fill);

/** Set every pixel of `dst` (a view: pass a sub-rectangle to erase it) to
 *  `value` (c values, cast to dst's dtype). @return SL_OK, SL_EINVAL. Since 0.1 */
SL_API int sl_view_fill(const sl_image_view *dst, const float *value);

/** An affine warp as v2's rotate/affine on tensors: output pixel (x, y)
 *  samples the source at m applied to its centre in torchvision's
 *  centred coordinates (m: the inverse matrix [a, b, c, d, e, f] of
 *  torchvision's _get_inverse_affine_matrix), then grid_sample's mapping
 *  (align_corners=False) in float32; SL_INTERP_NEAREST (round half to
 *  even) or SL_INTERP_BILINEAR; outside the source the `fill` value (c
 *  values; NULL: 0), blended at the borders as torchvision does. uint8
 *  results are rounded. @return SL_OK, SL_EINVAL. Since 0.1 */
SL_API int sl_view_affine(const sl_image_view *src, const sl_image_view *dst, const float m[6],
                          sl_interp interp, const float *fill);

/** Fused decode + resample into a view: decode only the part of the image
 *  the region needs, at the smallest sufficient JPEG DCT scale (as
 *  sl_decode_crop_resize), resample the region `box` onto dst's h x w with
 *  `interp` (one of PIL's filters), mirror with SL_VIEW_FLIP_H, and store
 *  as dst's dtype: uint8 pixels, or float32 values (x * float32(1/255) with
 *  SL_VIEW_SCALE, then (v - mean[k]) / std[k] when mean and std are given)
 *  — v2's ToDtype(scale=True) and Normalize bit for bit, without an
 *  intermediate image. dst->c 3 decodes RGB, 1 gray (PIL "L").
 *  @param[in] box (x0, y0, x1, y1) source region in image pixels,
 *             fractional allowed
 *  @param[in] lim (x0, y0, x1, y1) source pixels the filter may read: the
 *             box's own edges give crop-then-resize (RandomResizedCrop), the
 *             whole image gives resize-then-crop (Resize + CenterCrop)
 *  @return as sl_decode, plus SL_EINVAL (a box or limit outside the image).
 *  Thread safety: one thread per decoder. Since 0.1 */
SL_API int sl_view_decode(sl_decoder *dec, const void *data, size_t size, const double box[4],
                          const int lim[4], sl_interp interp, const float *mean,
                          const float *std, int flags, const sl_image_view *dst);

/* ==========================================================================
 * Pipeline
 * ========================================================================== */

/*
 * A pipeline turns a source (an .slr dataset, or samples held in memory)
 * into a stream of batches, running its ops on worker threads. It is built in
 * two steps: a *spec* says what is wanted (source, ops, seed, epochs, error
 * policy) — from C calls or from JSON, one shape for both (docs/PIPELINE.md);
 * sl_pipeline_create() plans, optimises and starts it.
 *
 * Guarantees:
 *  - Deterministic: the same spec and seed give byte-identical batches
 *    whatever the thread counts and timing (unless "deterministic": false).
 *    Every random draw comes from sl_rng_init(seed, epoch, sample, op).
 *  - Resumable: sl_pipeline_save_state() after any batch gives a small JSON
 *    string; a new pipeline built from the same spec and given that state
 *    yields exactly the batches that would have followed.
 *  - Bounded memory: each stage has a bounded output queue; batch and sample
 *    buffers come from pools.
 *
 * Thread safety: a pipeline is used by one consumer thread at a time, except
 * sl_pipeline_stats*(), which may be called from any thread. Batches may be
 * released from any thread, also after the pipeline is freed.
 */

/** A pipeline description (source, ops, options). Not thread-safe. */
typedef struct sl_spec sl_spec;
/** A running pipeline. */
typedef struct sl_pipeline sl_pipeline;
/** One batch handed to the consumer; borrowed until sl_batch_release(). */
typedef struct sl_batch sl_batch;

/** What to do with a sample whose read or op fails. */
typedef enum sl_on_error {
    SL_ON_ERROR_FAIL = 0,  /**< stop: sl_pipeline_next returns the error (default) */
    SL_ON_ERROR_SKIP = 1   /**< drop the sample, count it, keep going */
} sl_on_error;

/** How sharding evens out ranks when the dataset does not divide. */
typedef enum sl_shard_equal {
    SL_SHARD_PAD = 0,   /**< repeat samples from the start so every rank has
                             ceil(n/count) (default; as torch DistributedSampler) */
    SL_SHARD_DROP = 1,  /**< drop the tail so every rank has floor(n/count) */
    SL_SHARD_NONE = 2   /**< ranks differ by at most one sample */
} sl_shard_equal;

/** A user map: transform one sample in place. `s->col[i]` are the columns in
 *  the order the pipeline has at this point (names: see docs/PIPELINE.md).
 *  May replace a column (release the old tensor; put a new one with its own
 *  buffer, e.g. from sl_tensor_alloc) but must NOT write into a column whose
 *  `buf` is NULL (a borrowed view of source memory). Must keep ncols. Draw
 *  randomness only from `rng` (keyed by seed, epoch, sample, op). Runs on
 *  worker threads, concurrently with itself: `user` must be safe to share.
 *  Must not call back into the pipeline. Return SL_OK, or a negative
 *  sl_status (the thread's sl_errmsg(), if set by a sluice call, becomes the
 *  cause in the pipeline's error message). */
typedef int (*sl_map_fn)(sl_sample *s, sl_rng *rng, void *user);
/** A user filter: return 1 to keep the sample, 0 to drop it, or a negative
 *  sl_status on error. Same rules as sl_map_fn; must not modify `s`. */
typedef int (*sl_filter_fn)(const sl_sample *s, void *user);
/** The batched form of a user map (sl_spec_add_batch_map): `cols[0..ncols)`
 *  are the batch's columns, each stacked with a leading dimension of `n`;
 *  `rng[i]` is sample i's generator, keyed exactly as the per-sample map's
 *  `rng` for that sample. Change the values in place; dtypes and shapes must
 *  stay. The result must equal running the per-sample map on each sample and
 *  stacking. Same threading and return rules as sl_map_fn. */
typedef int (*sl_batch_map_fn)(sl_tensor *cols, int ncols, int64_t n, sl_rng *rng, void *user);

/** Create an empty spec: no source, no ops, seed 0, 1 epoch, no shuffle,
 *  policy fail, deterministic. @return SL_OK, SL_ENOMEM. Since 0.1 */
SL_API int sl_spec_create(sl_spec **out);
/** Create a spec from a JSON document (format in docs/PIPELINE.md):
 *  `{"source": {"path": ..., "shuffle": bool, "shard": {...}|"env"},
 *    "ops": [{"op": ..., ...}, ...], "seed": n, "epochs": n,
 *    "on_error": "fail"|"skip", "deterministic": bool}`.
 *  Op names are checked here (an unknown one: SL_EINVAL naming the closest
 *  known ones); op parameters when the pipeline is created.
 *  @return SL_OK, SL_EINVAL (message names the field: "source.shard.index:
 *  must be below shard.count"), SL_ENOMEM. Since 0.1 */
SL_API int sl_spec_from_json(sl_spec **out, const char *json);
/** A spec read from the file `spec_path`, with the relative input paths of
 *  its source (path, image_folder, idx, tfrecord, webdataset; "@list" files
 *  too) made relative to the file's folder, as config files resolve: what
 *  `sluice run` and Python's from_spec(path) do before sl_spec_from_json. A
 *  relative path that names nothing there but names something from the
 *  working directory (the rule of earlier 0.1 builds) is kept, with a warning saying
 *  what to write. Absolute paths and URLs are kept; text that is not JSON
 *  comes back as it was. Written snprintf-style into buf[cap] (see
 *  sl_spec_to_json). @return SL_OK, SL_EINVAL, SL_ENOMEM. Since 0.1 */
SL_API int sl_spec_resolve_paths(const char *json, const char *spec_path, char *buf, size_t cap,
                                 size_t *len_out);
/** Free a spec. Accepts NULL. A pipeline made from it does not need it. Since 0.1 */
SL_API void sl_spec_free(sl_spec *spec);

/** Read from a .slr file or dataset directory (opened at pipeline creation).
 *  The path is copied. Since 0.1 */
SL_API int sl_spec_set_source_path(sl_spec *spec, const char *path);
/** Read from memory, column-wise: column i is `cols[i]`, whose leading
 *  dimension is the sample count (equal for all columns); sample j's value is
 *  the slice cols[i][j] (a scalar for a 1-D column). `names` gives each
 *  column's name. The bytes are copied. @return SL_OK, SL_EINVAL (counts
 *  differ, bad name), SL_ENOMEM. Since 0.1 */
SL_API int sl_spec_set_source_columns(sl_spec *spec, int ncols, const char *const *names,
                                      const sl_tensor *cols);
/** Read from memory, sample-wise: `samples[j].col[i]` is column i of sample j
 *  (shapes may differ between samples: ragged). The bytes are copied.
 *  @return SL_OK, SL_EINVAL, SL_ENOMEM. Since 0.1 */
SL_API int sl_spec_set_source_samples(sl_spec *spec, int ncols, const char *const *names,
                                      const sl_sample *samples, uint64_t count);
/** Shuffle: a fresh order of the whole source every epoch, drawn from
 *  (seed, epoch), in mode SL_SHUFFLE_AUTO (a uniform permutation up to
 *  16,777,216 records, the window order above; sl_spec_set_shuffle_mode).
 *  Default off. Since 0.1 */
SL_API int sl_spec_set_shuffle(sl_spec *spec, int shuffle);
/** How the shuffle orders an epoch (docs/PIPELINE.md, "Shuffle"). */
typedef enum sl_shuffle_mode {
    SL_SHUFFLE_AUTO = 0,   /**< global up to 16,777,216 records, window above */
    SL_SHUFFLE_GLOBAL = 1, /**< a uniform permutation of all records (a table
                                of 16 bytes per record) */
    SL_SHUFFLE_WINDOW = 2  /**< blocks of records permuted, then positions
                                permuted within windows: O(1) memory, any
                                position computed directly */
} sl_shuffle_mode;
/** Turn the shuffle on with a mode; `window` (positions per window) and
 *  `block` (consecutive records per block, <= window) apply to window mode,
 *  0 for their defaults (65,536 and window / 64). @return SL_OK, SL_EINVAL.
 *  Since 0.1 */
SL_API int sl_spec_set_shuffle_mode(sl_spec *spec, sl_shuffle_mode mode, uint64_t window,
                                    uint64_t block);
/** Read only shard `index` of `count` (0 <= index < count): a disjoint slice
 *  of the epoch's (shuffled) order; the union over ranks is the whole source.
 *  Without this call every record is read (a JSON spec's "shard": "env" takes
 *  the shard from the environment variables RANK and WORLD_SIZE; see
 *  docs/PIPELINE.md, "Sharding rule"). @return SL_OK,
 *  SL_EINVAL. Since 0.1 */
SL_API int sl_spec_set_shard(sl_spec *spec, int64_t index, int64_t count, sl_shard_equal equal);
/** Seed of every random draw (shuffle, augmentation). Default 0. Since 0.1 */
SL_API int sl_spec_set_seed(sl_spec *spec, uint64_t seed);
/** Number of epochs a plain iteration runs (>= 1, default 1); the pipeline
 *  prepares epoch e+1 while the consumer finishes e when e+1 < epochs. Since 0.1 */
SL_API int sl_spec_set_epochs(sl_spec *spec, int64_t epochs);
/** Error policy (default SL_ON_ERROR_FAIL). Since 0.1 */
SL_API int sl_spec_set_on_error(sl_spec *spec, sl_on_error policy);
/** 1 (default): batches identical whatever the timing; 0: parallel stages
 *  hand on samples as they finish (faster with uneven per-sample cost; order
 *  and batch membership then vary between runs). Since 0.1 */
SL_API int sl_spec_set_deterministic(sl_spec *spec, int deterministic);
/** Force every stage's worker count to `threads` (>= 1), overriding the
 *  ops' "parallel" values; 0 restores them. Since 0.1 */
SL_API int sl_spec_set_threads(sl_spec *spec, int threads);
/** Append a built-in op given as a JSON object, e.g.
 *  `{"op": "batch", "size": 256}` or `{"op": "decode", "column": "image"}`.
 *  The text is copied. @return SL_OK, SL_EINVAL (not a JSON object, no
 *  "op"), SL_ENOMEM; parameters are checked at pipeline creation. Since 0.1 */
SL_API int sl_spec_add_op_json(sl_spec *spec, const char *json);
/** Check a built-in op given as JSON now, as pipeline creation will: its
 *  parameters (names, types, ranges, option values), not the columns it
 *  names; messages call it `ops[index]`. An op name the engine does not know
 *  passes (it may be a user op; pipeline creation reports it). The Python
 *  builder checks each op this way, so that its errors are the engine's.
 *  @return SL_OK, SL_EINVAL with a message, SL_ENOMEM. Thread safety: any
 *  thread. Since 0.1 */
SL_API int sl_spec_check_op_json(const char *json, int index);
/** Append a user map (see sl_map_fn); `name` labels it in explain, stats and
 *  errors. `fn` and `user` must stay valid while any pipeline built from this
 *  spec lives. Since 0.1 */
SL_API int sl_spec_add_map(sl_spec *spec, const char *name, sl_map_fn fn, void *user);
/** Append a user map with a batched form: `fn` runs per sample, or, when
 *  the pipeline vectorizes the map (map(f).batch(b) -> batch(b).map(batch_fn):
 *  the map comes last before `batch`, every column it receives has a fixed
 *  dtype and shape, and map + batch fuse; see docs/PIPELINE.md), `batch_fn`
 *  runs once per batch. The two must give the same result. Same lifetime rule
 *  as sl_spec_add_map. @return SL_OK, SL_EINVAL (a NULL function), SL_ENOMEM.
 *  Since 0.1 */
SL_API int sl_spec_add_batch_map(sl_spec *spec, const char *name, sl_map_fn fn,
                                 sl_batch_map_fn batch_fn, void *user);
/** 1 (default): ops with a batched kernel (normalize, cast, one_hot, flip,
 *  batched user maps) at the end of the per-sample chain may run once per
 *  batch; 0: always per sample (same output; for tests and comparisons). JSON
 *  key "vectorize" (the other layout paths: JSON keys "read_rows" and
 *  "parallel_collate", docs/PIPELINE.md). Since 0.1 */
SL_API int sl_spec_set_vectorize(sl_spec *spec, int vectorize);
/** Bound the memory the pipeline holds to `bytes` (JSON key "memory_limit":
 *  a number of bytes or a string such as "512M"; K, M, G, T are powers of
 *  1024). 0 (default): a quarter of the memory this process may use (the
 *  smaller of physical memory and the cgroup memory limit). The limit covers
 *  the batch buffers: the batch pool's reserve, the batches queued
 *  (prefetch) and those being made; queue depths and the batching stage's
 *  workers are cut at create until they fit. sl_pipeline_create fails with
 *  SL_ELIMIT when one batch (or the fewest batches the pipeline can run
 *  with) is over the limit. Since 0.1 */
SL_API int sl_spec_set_memory_limit(sl_spec *spec, uint64_t bytes);
/** Append a user filter (see sl_filter_fn). Same lifetime rule. Since 0.1 */
SL_API int sl_spec_add_filter(sl_spec *spec, const char *name, sl_filter_fn fn, void *user);
/** The spec as JSON (user maps/filters appear as {"op": "map", "name": ...}
 *  and cannot be read back), written snprintf-style into buf[cap];
 *  `*len_out` gets the full length (without the zero), so a caller can retry
 *  with a larger buffer. `buf` may be NULL when cap is 0. Since 0.1 */
SL_API int sl_spec_to_json(const sl_spec *spec, char *buf, size_t cap, size_t *len_out);

/** Plan, optimise and prepare a pipeline (worker threads start at the first
 *  sl_pipeline_next). The spec is copied; user functions are referenced.
 *  @return SL_OK, SL_EINVAL (bad spec; the message names the field, e.g.
 *  "ops[1].size: must be a positive integer"), SL_EIO / SL_ECORRUPT (source
 *  cannot be opened: "source.path: x.slr: ..."), SL_ENOMEM. Since 0.1 */
SL_API int sl_pipeline_create(sl_pipeline **out, const sl_spec *spec);
/** The next batch. @return SL_OK with *out set (release it with
 *  sl_batch_release); SL_END at the end of each epoch (the call after it
 *  starts the next epoch, if `epochs` allows, else returns SL_END again);
 *  a negative status when a sample failed under policy fail (every later call
 *  returns it too, until sl_pipeline_set_epoch or sl_pipeline_restore_state
 *  starts the pipeline clean at that position; the message names file,
 *  record, op and cause), or
 *  SL_ENOMEM. Blocks until a batch is ready. Since 0.1 */
SL_API int sl_pipeline_next(sl_pipeline *p, sl_batch **out);
/** As sl_pipeline_next, but waits at most `timeout_ms` milliseconds; on
 *  timeout returns SL_OK with *out = NULL (so a binding can check for
 *  signals and call again). Since 0.1 */
SL_API int sl_pipeline_next_timeout(sl_pipeline *p, sl_batch **out, int timeout_ms);
/** Go to the start of epoch `epoch`. Free when the pipeline is already there
 *  (nothing of that epoch consumed yet); otherwise the queued work is dropped
 *  and the stages restart at the new position. In a loop (the previous call
 *  asked for epoch-1) the source then reads on into epoch+1 while `epoch` is
 *  consumed, so that set_epoch(epoch+1) at its end finds batches ready;
 *  sl_pipeline_next still returns SL_END at the end of `epoch` until then.
 *  Since 0.1 */
SL_API int sl_pipeline_set_epoch(sl_pipeline *p, uint64_t epoch);
/** The epoch of the next batch sl_pipeline_next will return. Since 0.1 */
SL_API uint64_t sl_pipeline_epoch(const sl_pipeline *p);
/** The spec's epoch count. Since 0.1 */
SL_API int64_t sl_pipeline_epochs(const sl_pipeline *p);
/** Batches per epoch when known before running: -1 when a filter that could
 *  not be pushed into the source index, a user filter, or policy skip may drop
 *  samples; take, skip, repeat, sharding and pushed-down filters are counted.
 *  Since 0.1 */
SL_API int64_t sl_pipeline_len(const sl_pipeline *p);
/** Number of output columns and their names (borrowed for the pipeline's
 *  life), in batch column order. Since 0.1 */
SL_API int sl_pipeline_ncols(const sl_pipeline *p);
SL_API const char *sl_pipeline_column_name(const sl_pipeline *p, int col);
/** 1 when output column `col` holds UTF-8 text: a string column of the source
 *  (an ImageFolder's `path`, a WebDataset's `__key__`, `.txt` and `.json` members, a
 *  .slr string column) that no op rewrote. Its batch tensors are the bytes
 *  (1-D uint8 per sample; stacked only when every sample has the same
 *  length), without a terminating zero; a binding shows them as strings.
 *  0 otherwise and for a bad index. Since 0.1 */
SL_API int sl_pipeline_column_text(const sl_pipeline *p, int col);
/** The iterator state after the last batch handed out (prefetched batches do
 *  not count), as a small JSON object ({"epoch", "batch", "pos", "seed", ...}),
 *  written snprintf-style (see sl_spec_to_json). Since 0.1 */
SL_API int sl_pipeline_save_state(const sl_pipeline *p, char *buf, size_t cap, size_t *len_out);
/** Continue from a saved state: the next batch is the one that followed it.
 *  Call on a pipeline built from the same spec.
 *  @return SL_OK, SL_EINVAL (malformed, or saved by a different spec). Since 0.1 */
SL_API int sl_pipeline_restore_state(sl_pipeline *p, const char *state_json);
/** The keys a JSON spec takes, one line each: name, type, default, the
 *  allowed values and what it does; for the spec, the source (its pipeline
 *  keys and each input kind's own), shuffle, shard, device and the ops'
 *  common "parallel" (`sluice explain --params`). Written snprintf-style:
 *  `*len_out` (may be NULL) gets the full length; `buf` may be NULL when
 *  `cap` is 0. Thread safety: any thread.
 *  @return SL_OK, SL_ENOMEM. Since 0.1 */
SL_API int sl_spec_params_doc(char *buf, size_t cap, size_t *len_out);
/** The pipeline's explanation: the plan before and after optimisation, one
 *  line per operator (fusions, pushed-down filters, stages, workers,
 *  queues), written snprintf-style. Since 0.1 */
SL_API int sl_pipeline_explain(const sl_pipeline *p, char *buf, size_t cap, size_t *len_out);
/** The layout explain shows, as a JSON object: "layout" (where batches are
 *  collated: "collation" "final", "fused" or "parallel", "collate_stage",
 *  "direct", "slot_column", "vectorized_ops", "vectorization", "read_rows",
 *  "chunk_capacity"), "stages" (name, kind, workers, autotune,
 *  queue_capacity) and "batches_per_epoch" (-1: unknown), written
 *  snprintf-style. Since 0.1 */
SL_API int sl_pipeline_explain_json(const sl_pipeline *p, char *buf, size_t cap,
                                    size_t *len_out);
/** The stored error of a failed pipeline ("" if none); borrowed until the
 *  pipeline is freed. Since 0.1 */
SL_API const char *sl_pipeline_error(const sl_pipeline *p);
/** Stop the workers and free the pipeline, promptly (well under a second)
 *  even mid-epoch with workers blocked or busy. Batches not yet released stay
 *  valid. Accepts NULL. Since 0.1 */
SL_API void sl_pipeline_free(sl_pipeline *p);

/** Number of samples in the batch. */
SL_API int64_t sl_batch_size(const sl_batch *b);
/** Number of columns, and the name of column `col` (borrowed, batch life). */
SL_API int sl_batch_ncols(const sl_batch *b);
SL_API const char *sl_batch_name(const sl_batch *b, int col);
/** Index of the column called `name`, or -1. */
SL_API int sl_batch_find(const sl_batch *b, const char *name);
/** 1 if the samples' shapes or dtypes differed in column `col`: use
 *  sl_batch_item() for each sample; 0 if they were stacked. */
SL_API int sl_batch_is_ragged(const sl_batch *b, int col);
/** The stacked column: a tensor with a leading batch dimension (or, in a
 *  pipeline without a batch op, the single sample's tensor). `buf` is set:
 *  sl_buffer_retain(t->buf) keeps the bytes alive after sl_batch_release
 *  (zero-copy handover). NULL for a ragged column or a bad index. Borrowed
 *  until sl_batch_release. Since 0.1 */
SL_API const sl_tensor *sl_batch_column(const sl_batch *b, int col);
/** Sample `i` of a ragged column (with `buf` set), or NULL. Since 0.1 */
SL_API const sl_tensor *sl_batch_item(const sl_batch *b, int col, int64_t i);
/** The batch's index within its epoch, and its epoch. */
SL_API uint64_t sl_batch_index(const sl_batch *b);
SL_API uint64_t sl_batch_epoch(const sl_batch *b);
/** Give the batch back (its buffers return to their pools once no other
 *  reference holds them). Any thread; accepts NULL. Since 0.1 */
SL_API void sl_batch_release(sl_batch *b);

/* ==========================================================================
 * Stats
 * ========================================================================== */

#define SL_STATS_MAX_STAGES 16
#define SL_STATS_MAX_ERRORS 4
#define SL_STATS_MAX_POOLS 16

/** One buffer pool (a size class of sample and batch tensors). Since 0.1 */
typedef struct sl_pool_stats {
    uint64_t buf_size;         /**< bytes of each buffer in the pool */
    uint64_t bytes;            /**< bytes of the pool's buffers that exist: in use or cached */
    uint64_t free_bytes;       /**< of those, bytes cached on its free list */
} sl_pool_stats;

/** Counters of one running stage. Times are summed over the stage's workers. */
typedef struct sl_stage_stats {
    char name[96];             /**< "source", "map[decode+random_resized_crop]", "batch" */
    int32_t workers;           /**< worker threads now active */
    int32_t queue_capacity;    /**< output queue capacity, in elements */
    uint64_t elements;         /**< samples this stage has handled */
    double elements_per_s;     /**< elements / wall time since start */
    double busy_s;             /**< time spent working */
    double wait_in_s;          /**< time blocked waiting for input */
    double wait_out_s;         /**< time blocked waiting for output space */
    double queue_fill;         /**< mean fill of the output queue, 0..1 */
    double cost_us;            /**< busy microseconds per element */
    double cpu_us;             /**< CPU microseconds per element (busy time less waits
                                    for I/O or sleeps inside the work). Since 0.1 */
} sl_stage_stats;

/** A pipeline's counters and verdict. */
typedef struct sl_pipeline_stats {
    double wall_s;             /**< since the first sl_pipeline_next */
    uint64_t batches;          /**< batches handed to the consumer */
    uint64_t samples;          /**< samples in those batches */
    double samples_per_s;
    double consumer_wait_s;    /**< time the consumer spent blocked in next */
    uint64_t skipped;          /**< samples dropped by policy skip */
    int32_t nstages;
    sl_stage_stats stage[SL_STATS_MAX_STAGES];
    char bound;                /**< 'F' reading, 'P' processing, 'G' consumer, '?' too early */
    char bound_stage[96];      /**< the limiting stage's name */
    char verdict[256];         /**< one line: the verdict and the numbers behind it */
    int32_t nerrors;           /**< messages kept (first few skipped samples) */
    char errors[SL_STATS_MAX_ERRORS][256];
    uint64_t threads_started;  /**< worker threads started over the pipeline's life */
    int32_t cpu_budget;        /**< cores the pipeline may use: affinity, cgroup quota or
                                    SLUICE_CPUS (see "Autotune" in docs/PIPELINE.md). Since 0.1 */
    double cpu_busy;           /**< process CPU time / (wall * cpu_budget), 0..1. Since 0.1 */
    uint64_t h2d_bytes;        /**< bytes copied host to device (0 without a device). Since 0.1 */
    double h2d_bytes_per_s;    /**< h2d_bytes / wall_s. Since 0.1 */
    double device_wait_s;      /**< time the consumer was blocked in next() until a device
                                    slot's release and copy events passed (the ring was
                                    full). Since 0.1 */
    uint64_t memory_limit;     /**< bytes the pipeline may hold: the spec's memory_limit or
                                    the default (see sl_spec_set_memory_limit). Since 0.1 */
    uint64_t batch_bytes;      /**< bytes one batch takes (its fixed-shape columns, as
                                    pooled); 0 without a batch or when no shape is known
                                    at plan time. Since 0.1 */
    uint64_t batches_in_flight; /**< most batch buffers the layout lets exist at once
                                    (workers + queue depths from the batching stage on,
                                    plus two with the consumer); 0: not bounded. Since 0.1 */
    uint64_t pool_bytes;       /**< bytes of all buffer pools' buffers (in use or cached).
                                    Since 0.1 */
    uint64_t pool_free_bytes;  /**< of pool_bytes, bytes cached on free lists. Since 0.1 */
    int32_t npools;            /**< pools that exist (pool[] holds the first
                                    SL_STATS_MAX_POOLS). Since 0.1 */
    sl_pool_stats pool[SL_STATS_MAX_POOLS]; /**< by buffer size. Since 0.1 */
    uint64_t queue_bytes[SL_STATS_MAX_STAGES]; /**< per stage (as stage[]): elements in its
                                    output queue times an estimate of one element (a batch:
                                    batch_bytes; a chunk: samples per chunk times the
                                    fixed-shape columns' bytes). Since 0.1 */
    int32_t queue_length[SL_STATS_MAX_STAGES]; /**< per stage: elements in its output queue
                                    now. Since 0.1 */
    uint64_t h2d_staged_bytes; /**< of h2d_bytes, bytes first copied into the device ring's
                                    staging memory on the consumer thread (columns not
                                    written in pinned memory by the stages); 0 when every
                                    batch was copied straight from where it was made.
                                    Since 0.1 */
    uint64_t gpu_decoded;      /**< decode on the GPU ("device": "gpu" on decode): images
                                    nvJPEG decoded (0 otherwise). Since 0.1 */
    uint64_t gpu_fallbacks;    /**< decode on the GPU: images nvJPEG refused or failed on,
                                    decoded by the CPU path instead (e.g. CMYK); a file
                                    the CPU fails on too is skipped or fails the run as
                                    on_error says. Since 0.1 */
} sl_pipeline_stats;

/** Fill `out` with the current counters. Any thread. Since 0.1 */
SL_API int sl_pipeline_stats_get(const sl_pipeline *p, sl_pipeline_stats *out);
/** The same as a JSON object ({"samples_per_s", "bound", "stages": [...],
 *  ...}), snprintf-style. Any thread. Since 0.1 */
SL_API int sl_pipeline_stats_json(const sl_pipeline *p, char *buf, size_t cap, size_t *len_out);
/** Record a trace of the workers' activity (one span per chunk of work per
 *  worker), keeping at most `max_events` spans (0: 1M); later ones are
 *  dropped and counted. Call before the first sl_pipeline_next.
 *  @return SL_OK, SL_EINVAL (already running), SL_ENOMEM. Since 0.1 */
SL_API int sl_pipeline_trace_enable(sl_pipeline *p, size_t max_events);
/** The trace as Chrome / Perfetto trace-event JSON (one row per worker;
 *  open in ui.perfetto.dev), snprintf-style. Consumer thread.
 *  @return SL_OK, SL_EINVAL (not enabled), SL_ENOMEM. Since 0.1 */
SL_API int sl_pipeline_trace_json(const sl_pipeline *p, char *buf, size_t cap, size_t *len_out);

/* ==========================================================================
 * Settings from the environment
 * ========================================================================== */

/** One SLUICE_* environment variable sluice reads (`sluice env`), from the
 *  library's one table of them. Strings are static, but `range`, valid in
 *  this thread until the next sl_setting_get of the same setting, and
 *  `value`, which points into the environment: valid until it is changed. */
typedef struct sl_setting_info {
    const char *name;          /**< "SLUICE_HTTP_TRIES" */
    const char *type;          /**< int, bytes, mode, choice, path or flag */
    const char *range;         /**< the values it takes, in words ("1 to 100") */
    const char *default_value; /**< its value when unset, in words */
    const char *layer;         /**< the part of sluice that reads it: core, io, ops, device, tools */
    const char *doc;           /**< one line */
    const char *value;         /**< the environment's value now, NULL when unset or empty */
} sl_setting_info;

/** How many settings the table has. Any thread. Since 0.1 */
SL_API int sl_setting_count(void);
/** Setting `i` (0 to sl_setting_count() - 1) into `out`, in the table's
 *  order (by name). @return SL_OK, SL_EINVAL (i out of range). Any thread.
 *  Since 0.1 */
SL_API int sl_setting_get(int i, sl_setting_info *out);
/** Check every SLUICE_* variable that is set against its row of the table.
 *  A bad value fails with the message a bad spec parameter gets:
 *  `SLUICE_HTTP_TRIES: must be a whole number from 1 to 100 (got "abc")`.
 *  Building a pipeline, a source or a reader, and opening a remote object,
 *  check first. @return SL_OK, SL_EINVAL. Any thread. Since 0.1 */
SL_API int sl_settings_check(void);
/** The environment's value of the setting `name` ("SLUICE_LOG"), read
 *  through the table: NULL when it is unset or empty, or not a setting of
 *  the table. Any thread. Since 0.1 */
SL_API const char *sl_setting_value(const char *name);
/** How many parameters a pipeline spec has in sl_spec_param_get's list.
 *  Any thread. Since 0.1 */
SL_API int sl_spec_param_count(void);
/** Parameter `i` of a pipeline spec (`sluice env`, docs/CLI.md's "Spec
 *  parameters"), from the tables that check a spec (its top level, the
 *  source's pipeline keys, source.shuffle, source.shard, device, and what
 *  every op takes): `name` is the key's path ("epochs",
 *  "source.shuffle.window", "ops[].parallel"), `type`, `range` and
 *  `default_value` as a bad value's message and the spec write them
 *  ("required", or "unset" where the doc says what then), `value` NULL.
 *  `name`, `range` and `default_value` are valid in this thread until its
 *  next call; the others are static.
 *  @return SL_OK, SL_EINVAL (i out of range). Any thread. Since 0.1 */
SL_API int sl_spec_param_get(int i, sl_setting_info *out);

/* ==========================================================================
 * Device
 * ========================================================================== */

/*
 * With a device set on the spec (sl_spec_set_device, or the spec key
 * "device"), sl_pipeline_next returns batches whose stacked columns live in
 * device memory: each batch is staged in pinned host memory and copied
 * asynchronously on a copy stream; the consumer's stream is made to wait for
 * the copy (so next() does not block on it), and a batch's device memory is
 * reused only after the consumer's stream has passed the point where the
 * batch was released. CUDA is loaded at run time (libcudart, and
 * libsluice_cuda_kernels.so for normalize_on_device): a build without the
 * CUDA toolkit serves machines with GPUs as long as the runtime is
 * installed there, and asking for a device that is absent fails with
 * SL_EUNSUPPORTED naming what is missing. See docs/DEVICE.md.
 *
 * Streams are passed as `void *`: a cudaStream_t for CUDA (NULL: the legacy
 * default stream).
 */

/** Deliver batches on a device: SL_DEVICE_CUDA (device `id`), SL_DEVICE_CPU
 *  (the host backend: the same ring and events run by threads, tensors in
 *  CPU memory; for testing without a GPU), or 0 (none, the default). With
 *  `normalize_on_device`, the spec's last normalize op (which only batch,
 *  prefetch, take, skip and repeat may follow) runs on the device: uint8 HWC
 *  crops cross to the device and become float32/float16 there. Checked when
 *  the pipeline is created (SL_EUNSUPPORTED when the device, its runtime or
 *  the kernels are missing). @return SL_OK, SL_EINVAL. Since 0.1 */
SL_API int sl_spec_set_device(sl_spec *spec, sl_device device, int id, int normalize_on_device);
/** Whether `device` (SL_DEVICE_CUDA or SL_DEVICE_CPU) number `id` can be
 *  used here. @return SL_OK, SL_EUNSUPPORTED (the message says what is
 *  missing: "device \"cuda\": libcudart.so.13 not found ..."), SL_EINVAL.
 *  Thread safety: any thread. Since 0.1 */
SL_API int sl_device_available(sl_device device, int id);
/** Blocks of memory sluice's device backends hold now, in the whole
 *  process (every pipeline, stager and GPU decoder): `*device_blocks` of
 *  device memory, `*pinned_blocks` of pinned host memory (for
 *  SL_DEVICE_CPU, the host backend's stand-ins for both). Both are 0 once
 *  everything that used the device is freed: a leak check that does not
 *  read the GPU's free memory, which other users of the device (and
 *  compute-sanitizer's own allocations) move. Either pointer may be NULL.
 *  @return SL_OK, SL_EINVAL (not SL_DEVICE_CUDA or SL_DEVICE_CPU). Any
 *  thread. Since 0.1 */
SL_API int sl_device_held(sl_device device, int64_t *device_blocks, int64_t *pinned_blocks);
/** The consumer stream of a device pipeline (NULL: the default stream):
 *  each batch's copy is waited for on it, and release points are recorded
 *  on it. The stream must outlive the batches. @return SL_OK, SL_EINVAL (no
 *  device). Consumer thread. Since 0.1 */
SL_API int sl_pipeline_set_stream(sl_pipeline *p, void *stream);
/** Make `stream` wait until the copy that filled `t` (a column of a device
 *  batch) is done, and record the batch's release point on `stream` from
 *  now on (DLPack's __dlpack__(stream=...)). @return SL_OK, SL_EINVAL (not a
 *  device tensor), SL_EIO (the runtime failed). Any thread. Since 0.1 */
SL_API int sl_tensor_stream_wait(const sl_tensor *t, void *stream);

/*
 * Staging tensors made elsewhere (a Python collate function, the caller's
 * own code) through the same device layer: each call copies a group of host
 * tensors (one batch) into one slot of a ring of pinned host memory, and
 * with `to_device` on to device memory on the ring's copy stream. The
 * tensors it returns share the slot and hold references on it; the slot is
 * reused only after the last of them is released AND the consumer stream
 * has passed the point where that happened (the release event) AND the copy
 * out of it has finished (the copy event): the ring's rules above.
 */
typedef struct sl_stager sl_stager;
/** Figures of a stager (sl_stager_stats). */
typedef struct sl_stager_stats {
    uint64_t batches;          /**< successful sl_stager_stage calls */
    uint64_t staged_bytes;     /**< bytes copied into pinned slots */
    uint64_t h2d_bytes;        /**< bytes copied from the slots to the device (to_device) */
    double wait_s;             /**< time stage() waited for a slot's events */
    int32_t slots;             /**< slots the ring has made */
} sl_stager_stats;
/** Open a stager on SL_DEVICE_CUDA device `id` (pinned memory from
 *  cudaHostAlloc, copies with cudaMemcpyAsync on a non-blocking stream) or
 *  SL_DEVICE_CPU (the host backend: the same slots and events run by
 *  threads; for tests). `to_device` 0: tensors come back in the pinned slot
 *  (device SL_DEVICE_CUDA_HOST on CUDA, SL_DEVICE_CPU on the host backend);
 *  1: in device memory (SL_DEVICE_CUDA, or SL_DEVICE_CPU on the host
 *  backend). `depth`: slots kept while the consumer holds fewer batches
 *  (2..64; more are made, up to 64, when the consumer holds them all).
 *  @return SL_OK, SL_EINVAL, SL_EUNSUPPORTED (CUDA runtime or device
 *  missing: the message says which), SL_EIO, SL_ENOMEM. Free with
 *  sl_stager_free. Since 0.1 */
SL_API int sl_stager_open(sl_stager **out, sl_device device, int id, int to_device, int depth);
/** Drop the stager: copies in flight are waited for; slots whose tensors are
 *  still held are freed when the last is released. Accepts NULL. */
SL_API void sl_stager_free(sl_stager *s);
/** The consumer stream (NULL: the default stream): copies are waited for
 *  on it and release points recorded on it. @return SL_OK. Since 0.1 */
SL_API int sl_stager_set_stream(sl_stager *s, void *stream);
/** Copy the `n` host tensors `in` (C-contiguous, in CPU or pinned memory;
 *  only read, during the call) into one slot: out[i] gets in[i]'s dtype
 *  and shape, its bytes in the slot (each tensor 256-byte aligned), and
 *  one reference on the slot; release each with sl_tensor_release. The
 *  call may block while every slot is held and the oldest released one has
 *  not passed its events. With `to_device` it returns once the copy is
 *  queued: the consumer stream waits for it (sl_tensor_stream_wait moves
 *  that to another stream). On failure nothing is written to `out`.
 *  @return SL_OK, SL_EINVAL (a tensor not in host memory, n < 0),
 *  SL_ELIMIT (64 slots held), SL_EIO (the runtime failed: message names the
 *  call), SL_ENOMEM. Thread safety: any thread; the slot acquisitions are
 *  serialised, the copies of concurrent calls run in parallel.
 *  Since 0.1 */
SL_API int sl_stager_stage(sl_stager *s, const sl_tensor *in, int n, sl_tensor *out);
/** The stager's figures so far. Any thread. Since 0.1 */
SL_API void sl_stager_stats_get(sl_stager *s, sl_stager_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_H */
