/*
 * record_format.h — byte layout of the .slr record format and the internals
 * shared by the writer, reader, verifier and recovery. docs/FORMAT.md is the
 * specification; every constant here is named there. Never installed.
 */
#ifndef SL_RECORD_FORMAT_H
#define SL_RECORD_FORMAT_H

#include "core/core.h"
#include "io/io.h"
#include "record/shard_set.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Column views of scalars and arrays point straight into the little-endian
 * file bytes, so a big-endian host would need a byte-swapping path. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .slr reader's zero-copy views assume a little-endian host"
#endif

/* ---- constants pinned by the format ------------------------------------------ */

/* Magic at offset 0 and as the last 8 bytes. The high first byte and the
 * CR LF / ^Z / LF sequence make text-mode or 7-bit transfers visible (as in PNG). */
#define SLR_MAGIC "\x89SLR\r\n\x1a\n"
#define SLR_MAGIC_LEN 8

#define SLR_VERSION 1u              /* highest version this code reads and writes */

#define SLR_HEADER_FIXED 64u        /* fixed part of the header */
#define SLR_COLDESC_SIZE 136u       /* one column descriptor */
#define SLR_COLNAME_MAX (SL_COLNAME_MAX - 1u) /* name bytes, without the NUL padding */
_Static_assert(SL_COLNAME_MAX == 64, "a column descriptor holds a 64-byte name field");
#define SLR_FOOTER_SIZE 64u
#define SLR_FRAME_HEADER 16u        /* u64 payload length + u64 checksum */
#define SLR_INDEX_ENTRY 24u         /* u64 offset, u64 length, u64 checksum */
#define SLR_COLDIR_ENTRY 16u        /* u64 offset, u64 size, per column, in a payload */

/* Required ("must understand") feature bits, header offset 16. */
#define SLR_FEAT_ZSTD 0x1ull        /* some column has SL_COLF_ZSTD */
#define SLR_FEAT_SUM_XOR 0x2ull     /* record checksum = XXH3(payload) ^ XXH3(record number);
                                       without it: XXH3 seeded with the number */
#define SLR_FEAT_SCALAR_ARRAY 0x4ull /* some ARRAY column has ndim 0 (a scalar of its dtype) */
#define SLR_FEAT_REQUIRED_KNOWN (SLR_FEAT_ZSTD | SLR_FEAT_SUM_XOR | SLR_FEAT_SCALAR_ARRAY)
/* Optional feature bits (offset 24): none defined in version 1; readers ignore them. */

#define SLR_COLF_KNOWN (SL_COLF_ZSTD)

/* Limits a reader applies before trusting a size from a file. */
#define SLR_META_KEY_MAX 255u
#define SLR_META_VALUE_MAX (16u << 20)
#define SLR_META_BLOCK_MAX (64u << 20)
#define SLR_HEADER_MAX (SLR_HEADER_FIXED + SL_MAX_COLUMNS * SLR_COLDESC_SIZE + SLR_META_BLOCK_MAX + 8u)
#define SLR_DECOMPRESSED_MAX ((uint64_t)1 << 31)   /* one column value after zstd */
#define SLR_MANIFEST_MAX (64u << 20)

#define SLR_DEFAULT_SHARD_BYTES ((uint64_t)4 << 30)
#define SLR_DEFAULT_ZSTD_LEVEL 3

/* The fewest bytes a shard can have: a header with one column and an empty
 * metadata block (64 + 136 + 8 + 8), an index metadata block (8) and the
 * footer (64); and the fewest each record adds: its frame header (16), a
 * payload of at least one column directory entry (16) and its index entry
 * (24). A manifest whose shard holds more records than its bytes allow is
 * refused (docs/FORMAT.md, section 9). */
#define SLR_MIN_SHARD_BYTES (SLR_HEADER_FIXED + SLR_COLDESC_SIZE + 8u + 8u + 8u + SLR_FOOTER_SIZE)
#define SLR_MIN_RECORD_BYTES (SLR_FRAME_HEADER + SLR_COLDIR_ENTRY + SLR_INDEX_ENTRY)
/* The most records `bytes` bytes of shard can hold (0 below the smallest shard). */
static inline uint64_t sl_record__max_records(uint64_t bytes) {
    return bytes < SLR_MIN_SHARD_BYTES ? 0 : (bytes - SLR_MIN_SHARD_BYTES) / SLR_MIN_RECORD_BYTES;
}

#define SLR_MANIFEST_NAME "manifest.json"
#define SLR_MANIFEST_FORMAT "sluice-dataset"
#define SLR_MANIFEST_VERSION 1

static inline uint64_t slr_align8(uint64_t x) { return (x + 7u) & ~(uint64_t)7u; }

/* The most a zstd frame of `z` bytes can decompress to. RFC 8878 caps a
 * block's output at 128 KiB and every block costs at least 4 bytes (3-byte
 * header + 1 RLE byte), so a frame expands at most 32768-fold (+ one block).
 * Checking a stored raw_size against this before allocating keeps a small
 * hostile file from requesting gigabytes. */
static inline uint64_t slr_zstd_max_expansion(uint64_t z) { return (z / 4 + 1) * 131072u; }

/* ---- schema (schema.c) -------------------------------------------------------- */

typedef struct slr_column {
    char name[SLR_COLNAME_MAX + 1];
    sl_coltype type;
    sl_dtype dtype;
    int ndim;
    int64_t shape[SL_MAX_DIMS];
    unsigned flags;
} slr_column;

struct sl_schema {
    int ncols;
    slr_column col[SL_MAX_COLUMNS];
};

/* True if column c of s is INT64 or FLOAT64 (its values live in the index). */
static inline bool slr_is_scalar(sl_coltype t) { return t == SL_COL_INT64 || t == SL_COL_FLOAT64; }
/* True if an ARRAY column has a -1 dim (the record then stores the shape). */
bool sl_record__col_varshape(const slr_column *c);
/* Write ncols descriptors (ncols * SLR_COLDESC_SIZE bytes). */
void sl_record__schema_encode(const sl_schema *s, uint8_t *out);
/* Parse and validate descriptors; errors are "path: column i: cause". */
int sl_record__schema_decode(const uint8_t *p, uint32_t ncols, sl_schema *out, const char *path);
bool sl_record__schema_equal(const sl_schema *a, const sl_schema *b);

/* ---- metadata (record_common.c) --------------------------------------------------- */

typedef struct slr_meta {
    int n;
    size_t cap[2]; /* keys', vals' */
    char **keys;
    char **vals;
} slr_meta;

void sl_record__meta_clear(slr_meta *m);
/* Insert or replace (copies both strings). */
int sl_record__meta_set(slr_meta *m, const char *key, const char *value);
const char *sl_record__meta_get(const slr_meta *m, const char *key);
/* Encoded size (a multiple of 8) and encoding of a metadata block. */
uint64_t sl_record__meta_size(const slr_meta *m);
void sl_record__meta_encode(const slr_meta *m, uint8_t *out);
/* Parse a block of exactly `len` bytes into an empty `m`. */
int sl_record__meta_decode(const uint8_t *p, uint64_t len, slr_meta *m, const char *path,
                           const char *where);

/* ---- checksums ------------------------------------------------------------------ */

/* XXH3-64 with a seed (FORMAT.md, "Checksums"). */
uint64_t sl_record__hash(const void *p, size_t len, uint64_t seed);
/* The same function for large inputs, using the CPU's widest vectors. */
uint64_t sl_record__hash_large(const void *p, size_t len, uint64_t seed);
/* The checksum of record `record`'s payload under a file's definition
 * (FORMAT.md 8): with SLR_FEAT_SUM_XOR in `required_features`,
 * XXH3-64(payload) ^ XXH3-64(u64le(record)), else XXH3-64 seeded with the
 * record number (version 1 files without the bit). */
uint64_t sl_record__payload_sum(const void *p, size_t len, uint64_t record,
                                uint64_t required_features);

/* ---- file helpers (record_common.c) ------------------------------------------------ */

int sl_record__write_all(int fd, const void *p, size_t len, const char *path);
/* Read exactly len bytes at off; a short read is SL_ECORRUPT "path: truncated ...". */
int sl_record__fsync_dir(const char *dir_path);
/* The directory part of path ("." if none), into a new string. */
char *sl_record__dirname(const char *path);
/* Join dir + "/" + name into a new string. */
char *sl_record__join(const char *dir, const char *name);

/* ---- one shard file, parsed (record_reader.c) ----------------------------------- */

typedef struct slr_header {
    uint32_t version;
    uint32_t header_bytes;
    uint64_t required_features;
    uint64_t optional_features;
    uint32_t ncols;
    uint32_t shard_index;
    uint64_t first_record;
    uint64_t shard_bytes;
    uint32_t meta_bytes;
} slr_header;

/* One shard file opened and validated (record_reader.c, shard_open): what a
 * read of its records needs. Reference counted: the reader's table of open
 * shards holds one reference while the shard is open, and every reading
 * record (its pin, sl_record) holds one while it reads or its views point
 * in, unless the reader will close no shard again (keeps_all); the last
 * release closes the file (sl_record__shard_put). So a shard the reader
 * closes stays whole for whoever still uses it, and nothing in it changes
 * after open. */
typedef struct slr_shard {
    _Atomic int refs;
    char *path;
    sl_io *io;              /* the file (io.h); owned by `mapbuf` when mapped */
    const uint8_t *map;     /* whole file, or NULL in pread mode */
    sl_buffer *mapbuf;      /* reference-counted owner of `io` and so of `map`;
                               closed when the shard and every retained view
                               let go */
    uint64_t size;
    slr_header hdr;
    uint64_t first;         /* global number of the first record */
    uint64_t count;
    uint64_t index_offset;
    uint64_t index_bytes;
    uint64_t footer_checksum;
    uint8_t *index;         /* the whole index block (entries, scalar columns,
                               metadata): in the mapping (entries_mapped), else
                               a heap copy */
    uint8_t *entries;       /* count * SLR_INDEX_ENTRY bytes at `index` */
    bool entries_mapped;    /* the index is the mapping's pages: page cache,
                               shared by every process reading the file, not
                               this process's heap */
    bool copy_reads;        /* large records: read by copy where the caller
                               can own one (sl_record__read_into) */
    const uint8_t *hot;     /* the file again, copied onto transparent huge
                               pages for scattered reads (sl_record__hold_hot),
                               or NULL: records are read from here when set */
    sl_buffer *hotbuf;      /* reference-counted owner of `hot` */
} slr_shard;

/* A dataset's shard as the manifest describes it, and its open state. A
 * directory is planned from these alone; a shard is opened on the first
 * read, prefetch or scan that needs it, and closed again when the reader
 * keeps more shards open than its limit (record_reader.c, "Open shards"). */
typedef struct slr_slot {
    char *path;             /* directory + manifest file name (or the file) */
    const char *file;       /* the manifest's name for it (in `path`) */
    uint64_t first, count, bytes, footer_checksum;   /* the manifest's */
    bool copy_reads;        /* records average >= COPY_MIN_RECORD bytes */
    char *version;          /* the version of the file its first open read (io.h),
                               asked for by every reopen; written and read by
                               that shard's open only (one at a time) */
} slr_slot;

struct sl_reader {
    char *path;
    char *mpath;            /* a directory's manifest, for messages */
    uint64_t id;            /* unique per reader of the process (record pins) */
    unsigned flags;
    sl_schema schema;
    slr_meta meta;
    int nshards;
    slr_slot *shards;
    uint64_t count;
    uint64_t data_bytes;
    bool remote;            /* a directory of URLs: reads may go by ranges */
    int nscalar;
    int scalar_slot[SL_MAX_COLUMNS];  /* column -> index into scalars, or -1 */
    void *scalars[SL_MAX_COLUMNS];    /* per scalar column: count values */
    bool scalars_mapped;              /* scalars point into a single file's
                                         index (mapped, or its heap copy),
                                         which lives as long as the reader:
                                         not separately allocated */
    /* A dataset directory joins its shards' scalar columns into `scalars`
     * only when first asked (sl_record__scalars): filters need them, plain
     * reading does not (8 bytes a record per column). */
    pthread_mutex_t scalars_mu;
    atomic_bool scalars_ready;
    /* Open shards (record_reader.c, "Open shards"): the set holds one
     * reference to each open slr_shard. Once it keeps all (a single file,
     * nshards <= its bound, or the bound grown to nshards with no close
     * pending), open shards may be used without a reference, and views
     * borrowed. */
    sl_shard_set *set;
    slr_shard *single;      /* a single file's shard until the set takes it */
    struct slr_opener *opener; /* a directory of URLs: the threads that open
                               shards for read-ahead hints (record_reader.c,
                               "Opening remote shards ahead"); NULL otherwise */
};

/* Reads of `r` will land all over its records (a global shuffle): where it
 * keeps every shard open (sl_record__keeps_shards) and they are local mapped
 * files of small records (not copy_reads) of at most `budget` bytes in all
 * (and SLR_HOT_MAX), copy each onto anonymous memory advised for transparent
 * huge pages, which reads then use (record_reader.c, "Small shards on huge
 * pages"). Call before reading threads start. Returns the bytes now held
 * (0: nothing copied: a remote or pread reader, too large, large records,
 * shards closed as they go, or huge pages off in the kernel). */
uint64_t sl_record__hold_hot(sl_reader *r, uint64_t budget);
/* The most bytes sl_record__hold_hot copies for one reader. */
#define SLR_HOT_MAX (256ull << 20)

/* Open shards: how many now, and how many opens so far (tests). */
int sl_record__open_shards(const sl_reader *r);
uint64_t sl_record__opens(const sl_reader *r);
/* Fix the most shards `r` keeps open (>= 1; tests and benchmarks; no
 * growing after). Call before any read. */
void sl_record__set_open_limit(sl_reader *r, int limit);
/* Whether `r` will close no shard from now on (a single file, no more
 * shards than its limit, or a limit grown to every shard). */
bool sl_record__keeps_shards(const sl_reader *r);
/* Whether the zero-copy views of rec's last read may be borrowed for the
 * reader's life instead of each holding a reference on the mapping's buffer
 * (source_slr.c): its shard stays open as long as the reader. */
bool sl_record__views_last(const sl_record *rec);
/* Shard k opened (or failed) as a read would open it, with a reference the
 * caller drops with sl_record__shard_put. */
int sl_record__shard_get(const sl_reader *r, int k, slr_shard **out);
void sl_record__shard_put(slr_shard *sh);

/* Make r->scalars hold every scalar column (a directory's are joined on
 * first use, opening every shard; thread-safe). SL_OK, SL_ENOMEM, SL_EIO,
 * or a shard's damage. */
int sl_record__scalars(const sl_reader *r);

/* Read and validate a header (magic, version, features, checksum, schema).
 * meta_out (may be NULL) receives the header's metadata block. */
int sl_record__read_header(sl_io *io, slr_header *hdr, sl_schema *schema, slr_meta *meta_out);

/* ---- zstd through the allocation seam (record_common.c) -------------------------- */

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;
/* Contexts whose every allocation goes through sl__malloc (so that the OOM
 * tests reach inside zstd); free with ZSTD_freeCCtx / ZSTD_freeDCtx. NULL
 * when out of memory. */
struct ZSTD_CCtx_s *sl_record__zstd_cctx(void);
struct ZSTD_DCtx_s *sl_record__zstd_dctx(void);
/* The status for a zstd error code: SL_ENOMEM ("<what>: out of memory")
 * when zstd could not allocate, else `status` with "<what>: zstd: <name>". */
int sl_record__zstd_error(size_t code, int status, const char *what);

/* ---- record payloads (record_reader.c) ------------------------------------------- */

struct sl_record {
    uint64_t index;
    int ncols;
    sl_tensor col[SL_MAX_COLUMNS];
    uint8_t *frame;             /* pread mode: the frame */
    size_t frame_cap;
    uint8_t *scratch;           /* decompressed columns */
    size_t scratch_cap;
    struct ZSTD_DCtx_s *dctx;
    slr_shard *pin;             /* the shard of the last read: its views stay
                                   valid, and the next read of the same shard
                                   needs no lookup */
    uint64_t pin_reader;        /* pin's reader (sl_reader.id) and shard: */
    int pin_k;                  /* compared without touching `pin`, whose
                                   reader may be gone */
    bool pin_ref;               /* `pin` holds a reference (else it is an open
                                   shard of a reader that keeps all: the
                                   reader's, for the reader's life) */
};

/* Decode a payload (already checksum-checked or not, as the caller chose) of
 * record `index` into rec's column views. Views into the payload get
 * `owner` (may be NULL) as their borrowed `buf`. */
int sl_record__decode_payload(const sl_schema *s, const uint8_t *payload, uint64_t len,
                              uint64_t index, const char *path, sl_record *rec,
                              sl_buffer *owner);

/* Read record i; `verify` forces (true) or skips (false) the checksum. */
int sl_record__read(const sl_reader *r, uint64_t i, sl_record *rec, bool verify);
/* Read record i's columns straight into caller memory: column c (schema
 * order) is checked as sl_record__read checks it, then copied or
 * decompressed to dst[c], which holds exactly bytes[c] bytes (a column of
 * another size is an error naming the record). `rec` lends its frame buffer
 * and zstd context; its columns are left as they were. */
int sl_record__read_cols(const sl_reader *r, uint64_t i, sl_record *rec, bool verify,
                         void *const *dst, const size_t *bytes);
/* The number of the shard holding global record i (< count). */
int sl_record__shard_of(const sl_reader *r, uint64_t i);
/* 1 when record i's shard failed to open (every read of its records fails
 * alike), with the shard's records [*first, *first + *count); else 0. */
int sl_record__failed_range(const sl_reader *r, uint64_t i, uint64_t *first, uint64_t *count);
/* A hint that record i (< count) will be read soon; changes no result. `far`:
 * bring in its index entry only (call it some records ahead); else bring in
 * the first bytes of its frame, whose offset is read from the entry (call it
 * a few records ahead, after the far hint). In pread mode only the entry is
 * touched. Never fails, blocks or allocates. */
/* Whether record i is better read by copy than as a view of the mapping
 * (its shard's records are large: record_reader.c says why), and the bytes
 * sl_record__read_into then needs. */
int sl_record__copy_size(const sl_reader *r, uint64_t i, sl_record *rec, size_t *size);
/* sl_record__read, but the frame is read (pread) into dst (cap bytes, at
 * least sl_record__copy_size), and the columns not decompressed are views of
 * dst owned by `owner` (the record takes no reference). */
int sl_record__read_into(const sl_reader *r, uint64_t i, sl_record *rec, bool verify,
                         uint8_t *dst, size_t cap, sl_buffer *owner);
/* far: 0 the record's first bytes, 1 its index entry (both only when the
 * shard is open: they never open one), 2 (a remote shard) open the shard
 * (fetching it whole into the cache) and, when it is read by ranges, start
 * fetching the record: sl_io__will_need, once per record. */
void sl_record__prefetch(const sl_reader *r, uint64_t i, int far);
/* Whether some shard may be read by ranges (not mapped: a remote shard that
 * does not fit the shard cache), whose reads prefetch hints fetch ahead: a
 * directory of URLs (its shards are not opened yet), or a remote file that
 * was not mapped. */
bool sl_record__reads_by_ranges(const sl_reader *r);

/* ---- manifest (manifest.c) ------------------------------------------------------- */

typedef struct slr_manifest_shard {
    char *file;
    uint64_t first, records, bytes, footer_checksum;
} slr_manifest_shard;

typedef struct slr_manifest {
    uint64_t records;
    int nshards;
    slr_manifest_shard *shards;
    slr_meta meta;
} slr_manifest;

/* Parse and strictly validate `mpath` (messages name it). */
int sl_record__manifest_load(const char *mpath, slr_manifest *out);
void sl_record__manifest_clear(slr_manifest *m);

/* sl_recover, with the output's fsyncs optional (the fuzzer turns them off). */
int sl_record__recover(const char *partial, const char *out, uint64_t *kept_out,
                       uint64_t *dropped_out, bool fsync_output);
typedef struct slr_recover_result {
    uint64_t kept, dropped;
    uint64_t planned;   /* records the interrupted pack planned (its plan note),
                           UINT64_MAX when not known */
} slr_recover_result;
int sl_record__recover_ex(const char *partial, const char *out, bool fsync_output,
                          slr_recover_result *res);

/* ---- writer internals (record_writer.c) ------------------------------------------ */

/* sl_writer_open with another temporary name than "<path>.partial" (recovery
 * writes "<out>.recovering" so that it never collides with its input). */
int sl_writer__open_ex(sl_writer **out, const char *path, const sl_schema *schema,
                       const sl_writer_options *opts, const char *tmp_suffix);
/* Push buffered records to the .partial file (no fsync). For tests of torn writes. */
int sl_writer__flush(sl_writer *w);
/* The temporary path the writer writes to ("<path>.partial"). */
const char *sl_writer__partial_path(const sl_writer *w);

/* Notes a writer's caller keeps beside the shards in "<path>.partial/" (a
 * pack's plan and the inputs it left out), so that an interrupted write can
 * be continued, or salvaged knowing what it meant to write; removed, with
 * the temporaries, before the dataset is published or when it is given up. */
#define SLR_PLAN_NAME "pack.json"
#define SLR_SKIPS_NAME "pack-skipped.txt"
/* Write note `name` whole (a temporary name renamed into place, synced
 * with the writer's fsync option). */
int sl_writer__note_set(sl_writer *w, const char *name, const char *text);
/* Append `line` to note `name` (made when missing). */
int sl_writer__note_append(sl_writer *w, const char *name, const char *line);
/* Stop writing for now and keep what is written: buffered records go to the
 * unfinished shard (synced with the fsync option), and sl_writer_free then
 * leaves "<path>.partial/" as it is, for sl_writer__resume or sl_recover. */
int sl_writer__suspend(sl_writer *w);
/* A writer that continues the interrupted write in "<path>.partial/" (FORMAT.md,
 * "Crash safety"; invariant 5 of record_writer.c): sl_writer_count() records
 * are kept (every whole, checksum-valid record, in order) and the next
 * append is the record after them; the header's metadata is restored (set it
 * again as the interrupted writer did: the same values change nothing).
 * SL_END (no message) when there is no "<path>.partial/"; SL_EINVAL when what
 * is there is not this write's (other columns, shard size, numbering);
 * SL_ECORRUPT when a finished shard does not check out; SL_EIO, SL_ENOMEM. On
 * failure nothing there is changed or removed. */
int sl_writer__resume(sl_writer **out, const char *path, const sl_schema *schema,
                      const sl_writer_options *opts);

#endif /* SL_RECORD_FORMAT_H */
