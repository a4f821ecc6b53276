/*
 * source_shard.h — one shard file of a source that opens its shards lazily
 * through a shard set (record/shard_set.h): the tar and TFRecord sources.
 * What both do with a shard, in one place:
 *
 *  - at open, its sidecar index's header (or none) is read for every shard
 *    at once (sl_shard_file__load_head, from sl_shard_set__each); a shard
 *    without one is scanned, and its count, size and version set by the scan;
 *  - when a read first needs it, the shard set's open reloads the whole
 *    index and opens the bytes (sl_shard_file__open): a remote shard with an
 *    index is checked whole against it (fetched again once when it differs);
 *  - one version per run: the version the first open read (or the one the
 *    index was checked against) is asked for by every reopen, so that a shard
 *    replaced since is read on from the shard cache's copy of that version,
 *    or fails naming it (io.h, sl_io__open_version), never read at offsets
 *    found in another version's bytes. A local file that changed size fails
 *    with sl_shard_file__changed.
 */
#ifndef SL_SOURCE_SHARD_H
#define SL_SOURCE_SHARD_H

#include "io/io.h"
#include "source/source_index.h"

#include <stdint.h>

typedef struct sl_shard_file {
    char *path;
    uint64_t size;          /* bytes: as scanned (decompressed for a gzip TFRecord),
                               or as its index says */
    uint64_t first;         /* number of its first record in the source */
    uint64_t count;         /* its records */
    uint64_t tab_first;     /* scanned: its first entry in the source's tables */
    sl_sidx *head;          /* its sidecar index's header and descriptors
                               (sl_sidx__load_head_for), or NULL: scanned */
    char *version;          /* the version of its bytes this source reads (io.h):
                               as its index was checked, else set by the scan
                               or the first open; every open asks for it
                               (after the source's open, written and read by
                               the shard set's open only, which runs for one
                               shard at a time) */
} sl_shard_file;

/* At open: f's index header as `use` says (sl_sidx__load_head_for with
 * `kind`: "webdataset", "tfrecord"), and the version it was checked at. */
int sl_shard_file__load_head(sl_shard_file *f, const char *kind, sl_sidx_use use);

/* Open f's bytes with `flags` at its version (any version until one is
 * known; the version opened is kept). An indexed shard's whole index is
 * loaded again into *ix (else NULL) and a remote one checked against it;
 * an unindexed remote shard is checked with `check` when given
 * (sl_io__open_checked). On failure nothing is left open and *ix is NULL. */
int sl_shard_file__open(sl_shard_file *f, const char *kind, unsigned flags,
                        sl_io_check_fn check, void *check_user, sl_sidx **ix, sl_io **io);

/* SL_EIO: f holds `now` bytes, not the size the source opened with. */
int sl_shard_file__changed(const sl_shard_file *f, uint64_t now);

/* Free what f holds (its path, index header and version). */
void sl_shard_file__dispose(sl_shard_file *f);

/* A shard's bytes, the state the shard set keeps for an open shard (the tar
 * and TFRecord sources' shards, Parquet files fetched whole): whole in
 * memory at `data`, or not at all (a Parquet file read by ranges). */
typedef struct sl_shard_bytes {
    const uint8_t *data;    /* the mapping, or `heap`; NULL: empty, or not held */
    uint64_t size;
    sl_io *io;              /* the file (owned by buf when there is one) */
    sl_buffer *buf;         /* the mapping as a buffer (sl_io__map_buffer): views
                               retain it, so it outlives the shard's closing */
    uint8_t *heap;          /* bytes of the source's making (a gzip TFRecord
                               inflated), else NULL */
    sl_sidx *ix;            /* an indexed shard's whole index, else NULL */
} sl_shard_bytes;

/* Free what b holds and zero it. */
void sl_shard_bytes__dispose(sl_shard_bytes *b);
/* b, filled on the stack by a shard set's open, moved into the state it
 * hands the shard set (*state_out; sl_shard_bytes__close frees it). SL_OK,
 * or SL_ENOMEM "out of memory <what>" with b disposed. */
int sl_shard_bytes__keep(sl_shard_bytes *b, const char *what, void **state_out);
/* The shard set's close (record/shard_set.h) of a state made by
 * sl_shard_bytes__keep. */
void sl_shard_bytes__close(void *user, int k, void *state);

#endif /* SL_SOURCE_SHARD_H */
