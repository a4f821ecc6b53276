/*
 * source_index.h — the sidecar index of a foreign data file (`DATA.slidx`,
 * beside `DATA`): where each record lies, the values of scalar columns (for
 * pushed-down filters) and the typed columns the data holds, so that a source
 * opened with an index needs no scan. Formats that have no index of their own
 * (TFRecord, WebDataset tar) build one with a full scan (`sluice index`).
 * The bytes are specified in docs/FORMAT.md, "Sidecar index (.slidx)".
 *
 * An index (version 2) is tied to its data file's bytes, not to the file's
 * name or times: it records the data's size and XXH3-64 and each record's
 * XXH3-64. A load refuses an index whose size differs from the data's
 * (SL_EINVAL, a message naming both files and the command that rebuilds
 * it); every read checks the record it reads against its checksum
 * (sl_sidx__check_entry), and a remote shard fetched whole is checked against
 * the data checksum before it is used (sl_sidx__check_data), so an index stays
 * valid exactly as long as the bytes are the same: `cp -r`, rsync without
 * times, and an upload to S3 or a web server keep it. A version 1 index
 * (no checksums) is still read, tied by size and modification time as it
 * always was.
 *
 * Not thread-safe while being built; a loaded index is read-only and may be
 * shared by threads.
 */
#ifndef SL_SOURCE_INDEX_H
#define SL_SOURCE_INDEX_H

#include "source/source.h"

#include <stdint.h>

#define SL_SIDX_SUFFIX ".slidx"
#define SL_SIDX_VERSION 2
#define SL_SIDX_KIND_MAX 16
/* Bounds a loader enforces before allocating (hostile files). */
#define SL_SIDX_MAX_COLS 1024
#define SL_SIDX_MAX_SCALARS 1024

/* flags: offsets count bytes of the decompressed stream (a gzip TFRecord),
 * not of the file on disk. */
#define SL_SIDX_DECOMPRESSED 0x1u
#define SL_SIDX_KNOWN_FLAGS SL_SIDX_DECOMPRESSED

/* sl_sidx_col.flags */
#define SL_SIDX_COL_ENCODED 0x1u   /* bytes of an encoded image */
#define SL_SIDX_COL_LIST 0x2u      /* a per-step list (TFRecord SequenceExample
                                      feature_lists), not a context feature */
#define SL_SIDX_COL_KNOWN_FLAGS (SL_SIDX_COL_ENCODED | SL_SIDX_COL_LIST)

/* A typed column the data holds, as the format's own scan names it (for a
 * TFRecord, the feature key; a source renames on top). */
typedef struct sl_sidx_col {
    char name[SL_COLNAME_MAX];
    sl_coltype type;
    sl_dtype dtype;         /* SL_COL_ARRAY: element type; else as sl_source__add_col */
    int ndim;
    int64_t shape[SL_MAX_DIMS]; /* -1 for a dim that varies per record */
    uint32_t flags;         /* SL_SIDX_COL_* */
} sl_sidx_col;

/* The values of one scalar column, one per record. */
typedef struct sl_sidx_scalar {
    char name[SL_COLNAME_MAX];
    sl_coltype type;        /* SL_COL_INT64 (int64_t values) or SL_COL_FLOAT64 (double) */
    void *vals;             /* `count` values (owned) */
} sl_sidx_scalar;

typedef struct sl_sidx {
    char kind[SL_SIDX_KIND_MAX]; /* the format, "tfrecord" / "webdataset" */
    uint32_t flags;              /* SL_SIDX_* */
    uint32_t version;            /* as loaded (1 or 2); SL_SIDX_VERSION when built */
    uint64_t data_size;          /* the data file's size when indexed */
    int64_t data_mtime_ns;       /* version 1: its mtime; when built: the mtime
                                    seen before the scan (sl_sidx__write's check) */
    uint64_t data_sum;           /* version 2: XXH3-64 of the whole data file */
    uint64_t count;              /* records */
    uint64_t *offset;            /* count: first byte of the whole framed record */
    uint64_t *length;            /* count: bytes of the whole framed record */
    uint64_t *sum;               /* count: XXH3-64 of each record's bytes (version 2;
                                    NULL for version 1 and a partial load) */
    int summed;                  /* builder: sum[] filled by sl_sidx__sum_entries */
    int ncols;
    sl_sidx_col *col;
    int nscalar;
    sl_sidx_scalar *scalar;
    uint64_t cap;                /* builder: room in offset/length */
    int partial;                 /* sl_sidx__load_head: header and descriptors only;
                                    offset, length and scalar values are NULL */
    char *self_version;          /* loaded from a URL: the version of the index
                                    object read (io.h), which sl_sidx__load_again
                                    asks for; else NULL */
    char *data_version;          /* the data file's version when the index was
                                    checked against it (sl_sidx__load, _head), or
                                    NULL: what a source reads the data at */
} sl_sidx;

/* "DATA.slidx" into buf; SL_EINVAL when it does not fit. */
int sl_sidx__path(const char *data_path, char *buf, size_t cap);
/* Size and mtime (ns) of a file; SL_EIO naming it. */
int sl_sidx__stat(const char *path, uint64_t *size_out, int64_t *mtime_ns_out);

/* ---- what a source does with them --------------------------------------------- */
/* A source's "index" option: "auto" (the default: use DATA.slidx where there
 * is one), true (it must be there) or false (scan, ignore any index). */
typedef enum sl_sidx_use { SL_SIDX_USE_NO = 0, SL_SIDX_USE_YES = 1, SL_SIDX_USE_AUTO = 2 } sl_sidx_use;
/* The option as sl_source__shard_params reads it (-1 "auto", 1, 0). */
sl_sidx_use sl_sidx__use(int index);
/* Load DATA.slidx as `use` says: NO loads nothing; AUTO loads it where it
 * is (SL_OK and *out NULL where not); YES fails where it is not (SL_EINVAL
 * naming the command that builds it). Errors as sl_sidx__load. */
int sl_sidx__load_for(const char *data_path, const char *kind, sl_sidx_use use, sl_sidx **out);
/* The same, through sl_sidx__load_head: what a source opening shards lazily
 * reads at open. */
int sl_sidx__load_head_for(const char *data_path, const char *kind, sl_sidx_use use,
                           sl_sidx **out);

/* ---- building ---------------------------------------------------------------- */
/* The start of every index builder: an empty index for a `kind` file, tied to
 * the data file's size and mtime as they are now (before the scan, so that a
 * change during it makes sl_sidx__write refuse). */
int sl_sidx__begin(sl_sidx **out, const char *kind, const char *data_path);
/* An empty index for a `kind` file (free with sl_sidx__free). The caller
 * sets data_size/data_mtime_ns (sl_sidx__stat before its scan) and flags. */
int sl_sidx__create(sl_sidx **out, const char *kind);
int sl_sidx__add_record(sl_sidx *ix, uint64_t offset, uint64_t length);
/* A typed column; SL_EINVAL when the name is empty, too long or taken. */
int sl_sidx__add_col(sl_sidx *ix, const char *name, sl_coltype type, sl_dtype dtype,
                     int ndim, const int64_t *shape, uint32_t flags);
/* A scalar column with `count` values copied from `vals` (int64_t for
 * SL_COL_INT64, double for SL_COL_FLOAT64): add it after the last record. */
int sl_sidx__add_scalar(sl_sidx *ix, const char *name, sl_coltype type, const void *vals);

/* Fill each entry's checksum from `stream` (n bytes: what the offsets count,
 * i.e. the decompressed stream of a DECOMPRESSED index). sl_sidx__write
 * does this itself from the file for a plain index; a DECOMPRESSED one must
 * call it first. SL_EINVAL when an entry lies outside the stream. */
int sl_sidx__sum_entries(sl_sidx *ix, const uint8_t *stream, size_t n);

/* Write `ix` as DATA.slidx (version 2, with the data's checksum and each
 * entry's, read from the file here): temporary name, fsync, rename, fsync of the
 * directory. Refuses (SL_EINVAL) when the data file no longer has the size
 * and mtime in `ix` (it changed while being indexed). */
int sl_sidx__write(const char *data_path, const sl_sidx *ix);

/* ---- loading ----------------------------------------------------------------- */
/* Load DATA.slidx for a `kind` file. Returns SL_OK; SL_END (not an error)
 * when there is no index file; SL_ECORRUPT for a damaged one (bad magic,
 * checksum, truncated, inconsistent); SL_EUNSUPPORTED for a newer version or
 * unknown flags; SL_EINVAL for a stale one (the data file's size or mtime
 * changed) or one made for another kind; SL_EIO, SL_ENOMEM. */
int sl_sidx__load(const char *data_path, const char *kind, sl_sidx **out);
/* The header and descriptors of DATA.slidx alone (two small reads, none of
 * the per-record entries or values): record count, flags, columns, scalar
 * names and types, with the same checks of sizes, kind and freshness as
 * sl_sidx__load (the checksum covers the whole file, so it is checked when
 * the whole index is loaded). `partial` is set. Returns as sl_sidx__load.
 * `kind` NULL: any kind, and no freshness check (what the format sniffer
 * asks: which kind of file does this index describe). */
int sl_sidx__load_head(const char *data_path, const char *kind, sl_sidx **out);
/* SL_OK when `full` (sl_sidx__load) says what `head` (sl_sidx__load_head of
 * the same file, earlier) said; else SL_EINVAL: the index was replaced. */
int sl_sidx__same_head(const sl_sidx *head, const sl_sidx *full, const char *data_path);
/* The whole DATA.slidx of a file whose header (`head`, sl_sidx__load_head)
 * a source read at open: SL_EIO when it is gone since, SL_EINVAL when it was
 * replaced (sl_sidx__same_head); else as sl_sidx__load. A remote index is
 * asked for at the version `head` was read from (io.h): one replaced since
 * is read on from the shard cache's copy, or fails naming it. */
int sl_sidx__load_again(const char *data_path, const char *kind, const sl_sidx *head,
                        sl_sidx **out);
/* A source's indexed integer values (sl_source_ivals) of one such file, its
 * records numbered from `first` in the source: the whole index is loaded
 * (sl_sidx__load_again) and freed; each column c < ncols with vals[c] takes
 * the values of the index's integer scalar named keys[c], if it has one. */
int sl_sidx__copy_int_values(const char *data_path, const char *kind, const sl_sidx *head,
                             uint64_t first, int ncols, const char *const *keys,
                             int64_t *const *vals);
/* Parse index bytes held in memory (what load does after reading the file);
 * `name` is used in messages. Stale checks are load's. */
int sl_sidx__parse(const uint8_t *p, size_t n, const char *name, sl_sidx **out);

/* Record r's bytes `p` (ix->length[r] of them, as read from the data)
 * against the index: SL_OK, or SL_ECORRUPT with a message that starts with
 * `where` (the record, as the source names it) and says that the data
 * changed or was damaged since it was indexed. SL_OK for a version 1 index. */
int sl_sidx__check_entry(const sl_sidx *ix, uint64_t r, const uint8_t *p, const char *where,
                         const char *data_path);
/* The whole data file's bytes against the index's data checksum (version 2;
 * SL_OK for version 1): SL_ECORRUPT naming `data_path` otherwise. What a
 * source asks of a remote shard fetched whole, so that a damaged copy is
 * fetched again (sl_io__open_checked). */
int sl_sidx__check_data(const sl_sidx *ix, const uint8_t *p, uint64_t n, const char *data_path);
/* sl_io__open_checked's check (`user` the index) of a remote file fetched
 * whole: the bytes fetched, or found in the cache, are the bytes indexed. */
int sl_sidx__io_check(sl_io *io, void *user);

int sl_sidx__find_col(const sl_sidx *ix, const char *name);
int sl_sidx__find_scalar(const sl_sidx *ix, const char *name);
void sl_sidx__free(sl_sidx *ix);

#endif /* SL_SOURCE_INDEX_H */
