/*
 * record_reader.c — opens a .slr file or a sharded dataset directory and reads
 * records from it.
 *
 * Trust model: every size and offset read from a file is checked before use.
 * Opening validates header, footer and index (each under its own checksum),
 * and checks every index entry lies inside the data region, so reading record
 * i afterwards never leaves the file; the payload's own structure is checked
 * per read, after its checksum.
 *
 * A dataset directory is planned from its manifest alone (record counts,
 * shard sizes and footer checksums) and the first shard's header (the
 * schema); each shard is opened and validated, against the manifest too, on
 * the first read, prefetch or scan that needs it, and closed again when
 * the reader keeps too many open ("Open shards" below). A single file is
 * opened whole at open, as before.
 *
 * Thread safety: after open, a reader's plan is only read. sl_reader_read
 * uses the caller's sl_record for all mutable state (pread buffer,
 * decompression scratch, zstd context, the pinned shard), so many threads
 * may read at once; the table of open shards has its own locks.
 */
#include "record/record_format.h"
#include "core/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>
#include <zstd_errors.h>

/* ---- header ------------------------------------------------------------------------ */

int sl_record__read_header(sl_io *io, slr_header *hdr, sl_schema *schema, slr_meta *meta_out) {
    const uint8_t *map = sl_io__map(io);
    const uint64_t size = sl_io__size(io);
    const char *path = sl_io__name(io);
    int rc = SL_OK;
    uint8_t fixed[SLR_HEADER_FIXED];
    uint8_t *heap = NULL;
    const uint8_t *h;
    if (size == 0)
        return sl__error(SL_ECORRUPT, "%s: empty file", path);
    size_t head = size < SLR_HEADER_FIXED ? (size_t)size : SLR_HEADER_FIXED;
    if (map)
        memcpy(fixed, map, head);
    else
        SL_TRY(sl_io__read(io, fixed, head, 0));
    if (size < SLR_MAGIC_LEN || memcmp(fixed, SLR_MAGIC, SLR_MAGIC_LEN) != 0)
        return sl__error(SL_ECORRUPT, "%s: not a sluice record file (bad magic)", path);
    if (size < SLR_HEADER_FIXED)
        return sl__error(SL_ECORRUPT, "%s: truncated (file is %llu bytes, shorter than a header)",
                         path, (unsigned long long)size);
    memset(hdr, 0, sizeof *hdr);
    hdr->version = sl__ld32(fixed + 8);
    /* The version is checked before anything else: a newer version may lay out
     * everything after these 12 bytes differently. */
    if (hdr->version > SLR_VERSION)
        return sl__error(SL_EUNSUPPORTED, "%s: format version %u is newer than this reader (max %u)",
                         path, hdr->version, SLR_VERSION);
    if (hdr->version == 0)
        return sl__error(SL_ECORRUPT, "%s: format version 0 is invalid", path);
    hdr->header_bytes = sl__ld32(fixed + 12);
    hdr->required_features = sl__ld64(fixed + 16);
    hdr->optional_features = sl__ld64(fixed + 24);
    hdr->ncols = sl__ld32(fixed + 32);
    hdr->shard_index = sl__ld32(fixed + 36);
    hdr->first_record = sl__ld64(fixed + 40);
    hdr->shard_bytes = sl__ld64(fixed + 48);
    hdr->meta_bytes = sl__ld32(fixed + 56);
    uint32_t hb = hdr->header_bytes;
    if (hb < SLR_HEADER_FIXED + SLR_COLDESC_SIZE + 16 || hb % 8 || hb > SLR_HEADER_MAX)
        return sl__error(SL_ECORRUPT, "%s: header size %u is invalid", path, hb);
    if (hb > size)
        return sl__error(SL_ECORRUPT, "%s: truncated (file is %llu bytes, header says %u)", path,
                         (unsigned long long)size, hb);
    if (map) {
        h = map;
    } else {
        heap = sl__malloc(hb);
        if (!heap)
            return sl__oom("reading a header");
        SL_CHECK(sl_io__read(io, heap, hb, 0));
        h = heap;
    }
    if (sl_record__hash(h, hb - 8, 0) != sl__ld64(h + hb - 8))
        SL_FAIL(SL_ECORRUPT, "%s: header checksum mismatch", path);
    if (hdr->required_features & ~SLR_FEAT_REQUIRED_KNOWN)
        SL_FAIL(SL_EUNSUPPORTED,
                "%s: uses required feature bits 0x%llx that this reader does not know (known 0x%llx)",
                path, (unsigned long long)(hdr->required_features & ~SLR_FEAT_REQUIRED_KNOWN),
                (unsigned long long)SLR_FEAT_REQUIRED_KNOWN);
    if (sl__ld32(h + 60) != 0)
        SL_FAIL(SL_ECORRUPT, "%s: header reserved field is not zero", path);
    if (hdr->ncols < 1 || hdr->ncols > SL_MAX_COLUMNS ||
        (uint64_t)SLR_HEADER_FIXED + (uint64_t)hdr->ncols * SLR_COLDESC_SIZE + hdr->meta_bytes + 8 != hb)
        SL_FAIL(SL_ECORRUPT, "%s: header sizes disagree (%u columns, %u metadata bytes, %u in all)",
                path, hdr->ncols, hdr->meta_bytes, hb);
    SL_CHECK(sl_record__schema_decode(h + SLR_HEADER_FIXED, hdr->ncols, schema, path));
    bool zstd = false;
    for (int c = 0; c < schema->ncols; c++)
        zstd |= (schema->col[c].flags & SL_COLF_ZSTD) != 0;
    if (zstd != ((hdr->required_features & SLR_FEAT_ZSTD) != 0))
        SL_FAIL(SL_ECORRUPT, "%s: zstd feature bit disagrees with the column flags", path);
    int scalar = 0;
    for (int c = 0; c < schema->ncols; c++)
        scalar |= schema->col[c].type == SL_COL_ARRAY && schema->col[c].ndim == 0;
    if (scalar && !(hdr->required_features & SLR_FEAT_SCALAR_ARRAY))
        SL_FAIL(SL_ECORRUPT, "%s: a 0-d array column without the SCALAR_ARRAY feature bit", path);
    if (meta_out)
        SL_CHECK(sl_record__meta_decode(h + SLR_HEADER_FIXED + (size_t)hdr->ncols * SLR_COLDESC_SIZE,
                                        hdr->meta_bytes, meta_out, path, "header"));
cleanup:
    sl__free(heap);
    return rc;
}

/* ---- one shard ------------------------------------------------------------------------ */

/* Shards whose records average at least COPY_MIN_RECORD bytes are read by
 * copy (sl_record__read_into: one pread per record into the caller's
 * buffer), not as views of the mapping. Pages of a mapping that a read
 * touches stay in the process's resident set (RSS counts mapped page-cache
 * pages, and a fault maps a whole folio or fault-around block, not just the
 * record's pages) until unmapped: a shuffled pass over a 143 MB shard of
 * JPEGs left all 143 MB of it resident, more than every batch buffer of the
 * pipeline together; dropping the pages every megabyte read still left
 * 80 MB, mapped again by the decoders reading records queued far behind the
 * reader. A copy makes a record's memory exactly its bytes, for as long as
 * the sample holds them, at a cost (a 36 KB copy, ~5 us) far below decoding
 * it; small records (28x28 images, ~0.8 KB) stay zero-copy views, many to a
 * page. */
#define COPY_MIN_RECORD (4u << 10)

static void shard_close(slr_shard *sh) {
    if (sh->hotbuf)
        sl_buffer_release(sh->hotbuf);   /* unmapped once retained views are gone */
    sl_io__map_close(sh->io, sh->mapbuf); /* closes once retained views are gone */
    if (!sh->entries_mapped)
        sl__free(sh->index);
    sl__free(sh->path);
    sl__free(sh);
}

void sl_record__shard_put(slr_shard *sh) {
    if (sh && atomic_fetch_sub_explicit(&sh->refs, 1, memory_order_acq_rel) == 1)
        shard_close(sh);
}

/* With the reader's flags to shard_open: a shard that does not exist is
 * SL_END with no message (the caller names it), not an error of its own. */
#define SLR_OPEN_MISSING_OK 0x80000000u

/* Open and validate one shard file into `sh` (zeroed; shard_close frees
 * whatever it holds on failure). `meta` (may be NULL) receives the index's
 * metadata. */
static int shard_validate(slr_shard *sh, const char *path, unsigned flags, const char *want,
                          sl_schema *schema, slr_meta *meta) {
    int rc = SL_OK;
    uint8_t *idx = NULL;
    sh->path = sl__strdup(path);
    if (!sh->path)
        return sl__oom("opening a shard");
    /* remote and read by ranges: header, footer and index come with the
     * open, in one round trip (io.h, SL_IO_EDGES) */
    unsigned ioflags = flags & SL_READ_NO_MMAP ? 0 : SL_IO_MAP | SL_IO_MAP_OR_RANGES;
    if (flags & SLR_OPEN_MISSING_OK)
        ioflags |= SL_IO_MISSING_OK;
    int orc = sl_io__open_version(&sh->io, path, ioflags | SL_IO_EDGES, want);
    if (orc != SL_OK)
        return orc; /* an error, or SL_END: missing (SLR_OPEN_MISSING_OK) */
    sh->size = sl_io__size(sh->io);
    sh->map = sl_io__map(sh->io);
    /* The file is owned by a buffer so a caller can keep a zero-copy view
     * alive past the reader (sl_buffer_retain on the view's buf). */
    if (sl_io__map_buffer(sh->io, &sh->mapbuf) != SL_OK)
        return sl__oom("opening a shard");
    /* The header's metadata is superseded by the index's, but it is
     * validated all the same: recovery relies on it. */
    slr_meta hmeta = {0};
    int hrc = sl_record__read_header(sh->io, &sh->hdr, schema, &hmeta);
    sl_record__meta_clear(&hmeta);
    SL_TRY(hrc);
    uint64_t hb = sh->hdr.header_bytes;
    if (sh->size < hb + SLR_FOOTER_SIZE)
        return sl__error(SL_ECORRUPT,
                         "%s: truncated or unfinished (file is %llu bytes, no footer at its end)",
                         path, (unsigned long long)sh->size);
    uint8_t foot[SLR_FOOTER_SIZE];
    if (sh->map)
        memcpy(foot, sh->map + sh->size - SLR_FOOTER_SIZE, SLR_FOOTER_SIZE);
    else
        SL_TRY(sl_io__read(sh->io, foot, SLR_FOOTER_SIZE, sh->size - SLR_FOOTER_SIZE));
    if (memcmp(foot + 56, SLR_MAGIC, SLR_MAGIC_LEN) != 0)
        return sl__error(SL_ECORRUPT,
                         "%s: truncated or unfinished (file is %llu bytes, no footer at its end)",
                         path, (unsigned long long)sh->size);
    sh->footer_checksum = sl__ld64(foot + 48);
    if (sl_record__hash(foot, 48, 0) != sh->footer_checksum)
        return sl__error(SL_ECORRUPT, "%s: footer checksum mismatch", path);
    sh->index_offset = sl__ld64(foot);
    sh->index_bytes = sl__ld64(foot + 8);
    sh->count = sl__ld64(foot + 16);
    sh->first = sl__ld64(foot + 24);
    uint64_t fsize = sl__ld64(foot + 32);
    uint64_t isum = sl__ld64(foot + 40);
    if (fsize != sh->size)
        return sl__error(SL_ECORRUPT, "%s: truncated (file is %llu bytes, footer says %llu)", path,
                         (unsigned long long)sh->size, (unsigned long long)fsize);
    if (sh->first != sh->hdr.first_record)
        return sl__error(SL_ECORRUPT, "%s: footer says the first record is %llu, header says %llu",
                         path, (unsigned long long)sh->first,
                         (unsigned long long)sh->hdr.first_record);
    if (sh->index_offset < hb || sh->index_offset % 8 ||
        sh->index_offset > sh->size - SLR_FOOTER_SIZE ||
        sh->index_bytes != sh->size - SLR_FOOTER_SIZE - sh->index_offset)
        return sl__error(SL_ECORRUPT, "%s: footer places the index at %llu (+%llu bytes), outside "
                         "the file", path, (unsigned long long)sh->index_offset,
                         (unsigned long long)sh->index_bytes);
    int nscalar = 0;
    for (int c = 0; c < schema->ncols; c++)
        nscalar += slr_is_scalar(schema->col[c].type);
    uint64_t per = SLR_INDEX_ENTRY + 8u * (uint64_t)nscalar;
    /* Each record costs at least a frame header in the data region too. */
    if (sh->count > sh->index_bytes / per ||
        sh->count > (sh->index_offset - hb) / SLR_FRAME_HEADER)
        return sl__error(SL_ECORRUPT, "%s: footer claims %llu records, more than the file can hold",
                         path, (unsigned long long)sh->count);
    if (UINT64_MAX - sh->first < sh->count)
        return sl__error(SL_ECORRUPT, "%s: record numbers overflow", path);
    /* A mapped file's index is used where it lies: its pages are page cache,
     * shared by every rank reading the file on a machine and given back
     * under pressure, where a heap copy cost each rank 24 bytes a record
     * (and 8 per scalar column) of anonymous memory. locate() bounds every
     * entry again when it is used, as the file could change after this
     * check. */
    if (sh->map) {
        idx = (uint8_t *)(uintptr_t)(sh->map + sh->index_offset);
        sh->entries_mapped = true;
    } else {
        idx = sl__malloc(sh->index_bytes ? (size_t)sh->index_bytes : 1);
        if (!idx)
            return sl__oom("reading an index");
        sh->index = idx; /* shard_close frees it */
        SL_CHECK(sl_io__read(sh->io, idx, (size_t)sh->index_bytes, sh->index_offset));
    }
    if (sl_record__hash(idx, (size_t)sh->index_bytes, 0) != isum)
        SL_FAIL(SL_ECORRUPT, "%s: index checksum mismatch", path);
    uint64_t prev_end = hb;
    for (uint64_t k = 0; k < sh->count; k++) {
        const uint8_t *e = idx + k * SLR_INDEX_ENTRY;
        uint64_t off = sl__ld64(e), len = sl__ld64(e + 8);
        if (off != prev_end || len % 8 || len > sh->index_offset - off - SLR_FRAME_HEADER ||
            off > sh->index_offset - SLR_FRAME_HEADER)
            SL_FAIL(SL_ECORRUPT, "%s: record %llu: index entry (offset %llu, length %llu) is out of "
                    "place", path, (unsigned long long)(sh->first + k), (unsigned long long)off,
                    (unsigned long long)len);
        prev_end = off + SLR_FRAME_HEADER + len;
    }
    if (prev_end != sh->index_offset)
        SL_FAIL(SL_ECORRUPT, "%s: records end at %llu but the index starts at %llu", path,
                (unsigned long long)prev_end, (unsigned long long)sh->index_offset);
    uint64_t meta_off = sh->count * per;
    if (meta) {
        SL_CHECK(sl_record__meta_decode(idx + meta_off, sh->index_bytes - meta_off, meta, path,
                                        "index"));
    } else {
        slr_meta tmp = {0};
        rc = sl_record__meta_decode(idx + meta_off, sh->index_bytes - meta_off, &tmp, path, "index");
        sl_record__meta_clear(&tmp);
        SL_CHECK(rc);
    }
    sh->index = idx;
    sh->entries = idx;
cleanup:
    return rc;
}

static int locate(const slr_shard *sh, uint64_t i, uint64_t *off, uint64_t *len, uint64_t *sum);
static int frame_check(const slr_shard *sh, uint64_t i, const uint8_t *f, uint64_t len,
                       uint64_t sum, bool verify);

/* Every record of a shard fetched whole from elsewhere against its checksum,
 * once at open: damage in transit is found before a record is read, while
 * the copy can still be fetched again (shard_open). */
static int shard_check_records(const slr_shard *sh) {
    for (uint64_t i = sh->first; i < sh->first + sh->count; i++) {
        uint64_t off, len, sum;
        SL_TRY(locate(sh, i, &off, &len, &sum));
        SL_TRY(frame_check(sh, i, sh->map + off, len, sum, true));
    }
    return SL_OK;
}

/* A new shard: `path` opened and validated, one reference. A remote shard
 * fetched whole (or found in the shard cache) whose bytes fail a check is
 * dropped from the cache and fetched again once (as sl_io__open_checked
 * does); a second failure names both attempts. `want`: the version an
 * earlier open read (NULL: the first open), see sl_io__open_version. */
static int shard_open(slr_shard **out, const char *path, unsigned flags, const char *want,
                      sl_schema *schema, slr_meta *meta) {
    *out = NULL;
    slr_shard *sh = NULL;
    char first[SL__ERRMSG_MAX] = "";
    int rc = SL_OK;
    for (int attempt = 0;; attempt++) {
        sh = sl__calloc(1, sizeof *sh);
        if (!sh)
            return sl__oom("opening a shard");
        atomic_init(&sh->refs, 1);
        rc = shard_validate(sh, path, flags, want, schema, meta);
        if (rc == SL_OK && sh->map && sl_io__is_url(path))
            rc = shard_check_records(sh);
        if (rc >= 0 || rc != SL_ECORRUPT || !sh->io || !sl_io__is_url(path))
            break;
        sl_io__forget(sh->io);
        shard_close(sh);
        sh = NULL;
        if (meta)
            sl_record__meta_clear(meta);
        if (attempt)
            return sl_io__twice_damaged(path, first);
        snprintf(first, sizeof first, "%s", sl_errmsg());
    }
    if (rc != SL_OK) { /* an error, or SL_END: missing (SLR_OPEN_MISSING_OK) */
        shard_close(sh);
        return rc;
    }
    if (first[0] && sh)
        SL_LOG_WARN("%s; fetched again, the new copy is sound", first);
    sh->copy_reads = sh->count > 0 && sh->size / sh->count >= COPY_MIN_RECORD;
    *out = sh;
    return SL_OK;
}

/* ---- open shards -------------------------------------------------------------------------
 *
 * A directory's shards are opened when first needed and closed again, so that
 * a rank's memory follows the shards it is reading, not the dataset
 * (issue 25: a rank that reads 25 of 200 shards maps and touches 25).
 *
 * The table is the shard set (record/shard_set.h), which the tar and
 * TFRecord sources read through too:
 * 1. A shard is opened once however many threads want it (a remote shard is
 *    fetched once), and a failure is remembered: every later use of the
 *    shard reports the same error, and the other shards read on (the skip
 *    policy loses only that shard's records).
 * 2. An open shard is an slr_shard with a reference count: the set holds
 *    one, every user (a reading record's pin, a scan) its own, taken while
 *    the set pins the shard (sl_record__shard_get). Closing drops the set's
 *    reference; the file is closed by the last user, and a mapping by the
 *    last view retained on its buffer (mapbuf), so a read racing a close
 *    finishes on what it holds. The set closes a shard that a record holds
 *    (set_held) only when every open shard is held.
 * 3. At most `max_open` shards are open: opening one more closes the least
 *    recently used. The bound starts at SLR_OPEN_SHARDS_MIN (or the shard
 *    count) and grows by a quarter (up to growth_cap) when a shard closed
 *    within the last `max_open` closes is wanted again: the reads cycle
 *    through more shards than are kept (a global shuffle reads every shard
 *    all the time and ends with all of them open; a window shuffle needs
 *    about its window's blocks' shards; reading in order needs one or two).
 *    "max_open_shards" (sl_record__set_open_limit) fixes it instead.
 *    Reopening validates the shard again.
 * 4. Cost per read. A record keeps its last shard pinned, so reading on in
 *    the same shard takes no lock. Once no shard will be closed again (the
 *    set keeps all: the bound covers every shard and no close is under
 *    way), a read of another shard takes none either: open shards live as
 *    long as the reader, so a pin needs no reference (pin_ref false),
 *    prefetch peeks at the set without its lock, and source_slr.c borrows
 *    views again. */

#define SLR_OPEN_SHARDS_MIN 16
/* The limit grows no further than half the process's file descriptors (an
 * open shard holds one, and its mapping) nor this many mappings (Linux
 * allows 65,530 per process by default): beyond that a global shuffle
 * reopens shards instead of failing to open them. */
#define SLR_OPEN_SHARDS_MAX 30000

static int growth_cap(int nshards) {
    int cap = SLR_OPEN_SHARDS_MAX;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur / 2 < (rlim_t)cap)
        cap = (int)(rl.rlim_cur / 2);
    if (cap < SLR_OPEN_SHARDS_MIN)
        cap = SLR_OPEN_SHARDS_MIN;
    return nshards < cap ? nshards : cap;
}

static _Atomic uint64_t reader_ids;

int sl_record__shard_of(const sl_reader *r, uint64_t i) {
    return sl__last_at_most(r->shards, r->nshards, sizeof *r->shards,
                            offsetof(slr_slot, first), i);
}

/* What differs between shard k as opened and the manifest's line for it,
 * each field that differs in words ("" when none does). */
static void manifest_diff(const slr_shard *sh, const slr_slot *sl, int k, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
#define DIFF(...)                                                                      \
    do {                                                                               \
        if (n < cap)                                                                   \
            n += (size_t)snprintf(buf + n, cap - n, "%s", n ? "; " : "");              \
        if (n < cap)                                                                   \
            n += (size_t)snprintf(buf + n, cap - n, __VA_ARGS__);                      \
    } while (0)
    if (sh->first != sl->first)
        DIFF("its first record is %llu, the manifest's %llu", (unsigned long long)sh->first,
             (unsigned long long)sl->first);
    if (sh->count != sl->count)
        DIFF("it holds %llu records, the manifest %llu", (unsigned long long)sh->count,
             (unsigned long long)sl->count);
    if (sh->size != sl->bytes)
        DIFF("it is %llu bytes, the manifest says %llu", (unsigned long long)sh->size,
             (unsigned long long)sl->bytes);
    if (sh->footer_checksum != sl->footer_checksum)
        DIFF("its footer checksum is %016llx, the manifest's %016llx",
             (unsigned long long)sh->footer_checksum, (unsigned long long)sl->footer_checksum);
    if (sh->hdr.shard_index != (uint32_t)k)
        DIFF("its header says shard %u, the manifest lists it as shard %d",
             sh->hdr.shard_index, k);
#undef DIFF
}

/* Open shard k of a directory and check it against the manifest. Its first
 * open records the version it read; every reopen asks for that version
 * (io.h, sl_io__open_version), so that a run never reads a shard replaced
 * under it. */
static int slot_open(const sl_reader *r, int k, slr_shard **out) {
    /* the shard set runs one open of shard k at a time: the only writer */
    slr_slot *sl = (slr_slot *)&r->shards[k];
    /* a shard that is not there is said so; a URL is not asked first (a
     * HEAD is a round trip): its open says so */
    int src = SL_OK;
    if (!sl_io__is_url(sl->path)) {
        sl_io_info sst;
        src = sl_io__stat(sl->path, &sst);
    }
    sl_schema sch;
    slr_shard *sh = NULL;
    if (src == SL_OK)
        src = shard_open(&sh, sl->path, r->flags | SLR_OPEN_MISSING_OK, sl->version, &sch, NULL);
    if (src == SL_END)
        return sl__error(SL_ECORRUPT, "%s: shard %s is missing (%s)", r->mpath, sl->file,
                         sl_io__is_url(sl->path) ? "HTTP 404" : strerror(ENOENT));
    SL_TRY(src);
    int rc = SL_OK;
    char diff[320];
    manifest_diff(sh, sl, k, diff, sizeof diff);
    if (!sl_record__schema_equal(&r->schema, &sch))
        rc = sl__error(SL_ECORRUPT, "%s: schema differs from the first shard's", sl->path);
    else if (diff[0])
        rc = sl__error(SL_ECORRUPT, "%s: shard %s does not match the manifest: %s (one of them "
                       "was replaced or damaged; write the dataset again, or copy it whole)",
                       r->mpath, sl->file, diff);
    else if (!sl->version && !(sl->version = sl__strdup(sl_io__version(sh->io))))
        rc = sl__oom("opening a shard");
    if (rc < 0) {
        sl_record__shard_put(sh);
        return rc;
    }
    *out = sh;
    return SL_OK;
}

/* The set's callbacks: `user` is the reader. A single file's shard was
 * opened by open_file and is handed over by the first open. */
static int set_open(void *user, int k, void **state_out) {
    sl_reader *r = user;
    if (r->single) {
        *state_out = r->single;
        r->single = NULL;
        return SL_OK;
    }
    slr_shard *sh;
    SL_TRY(slot_open(r, k, &sh));
    *state_out = sh;
    return SL_OK;
}

static void set_close(void *user, int k, void *state) {
    (void)user, (void)k;
    sl_record__shard_put(state);
}

static bool set_held(void *user, int k, void *state) {
    (void)user, (void)k;
    const slr_shard *sh = state;
    return atomic_load_explicit(&sh->refs, memory_order_relaxed) > 1;
}

int sl_record__shard_get(const sl_reader *r, int k, slr_shard **out) {
    *out = NULL;
    void *state;
    SL_TRY(sl_shard_set__get(r->set, k, &state));
    slr_shard *sh = state;
    atomic_fetch_add_explicit(&sh->refs, 1, memory_order_relaxed); /* ours, past the pin */
    sl_shard_set__put(r->set, k);
    *out = sh;
    return SL_OK;
}

int sl_record__open_shards(const sl_reader *r) {
    sl_shard_set_stats st;
    sl_shard_set__stats(r->set, &st);
    return st.open_now;
}

uint64_t sl_record__opens(const sl_reader *r) {
    sl_shard_set_stats st;
    sl_shard_set__stats(r->set, &st);
    return st.opens;
}

void sl_record__set_open_limit(sl_reader *r, int limit) { sl_shard_set__set_max_open(r->set, limit); }

bool sl_record__keeps_shards(const sl_reader *r) { return sl_shard_set__keeps_all(r->set); }

bool sl_record__views_last(const sl_record *rec) { return rec->pin && !rec->pin_ref; }

/* ---- dataset ----------------------------------------------------------------------------- */

static int opener_make(sl_reader *r);
static void opener_free(sl_reader *r);

void sl_reader_free(sl_reader *r) {
    if (!r)
        return;
    opener_free(r); /* its threads use the set */
    sl_shard_set__free(r->set); /* closes the open shards */
    sl_record__shard_put(r->single); /* a single file whose set was not made */
    for (int i = 0; i < r->nshards; i++) {
        sl__free(r->shards[i].path);
        sl__free(r->shards[i].version);
    }
    sl__free(r->shards);
    for (int c = 0; c < SL_MAX_COLUMNS && !r->scalars_mapped; c++)
        sl__free(r->scalars[c]);
    pthread_mutex_destroy(&r->scalars_mu);
    sl_record__meta_clear(&r->meta);
    sl__free(r->mpath);
    sl__free(r->path);
    sl__free(r);
}

/* The reader's `n` shards, none open. */
static int make_slots(sl_reader *r, int n) {
    r->shards = sl__calloc((size_t)n, sizeof *r->shards);
    if (!r->shards)
        return sl__oom("opening a reader");
    r->nshards = n;
    return SL_OK;
}

/* The table of open shards (see "Open shards"). */
static int make_set(sl_reader *r, int max_open) {
    return sl_shard_set__create(&r->set, r->nshards, max_open,
                                &(sl_shard_set_ops){.open = set_open, .close = set_close,
                                                    .held = set_held},
                                r);
}

static void scalar_slots(sl_reader *r) {
    int nscalar = 0;
    for (int c = 0; c < r->schema.ncols; c++)
        r->scalar_slot[c] = slr_is_scalar(r->schema.col[c].type) ? nscalar++ : -1;
    r->nscalar = nscalar;
}

/* A single file: opened whole now and kept for the reader's life. */
static int open_file(sl_reader *r, const char *path) {
    SL_TRY(make_slots(r, 1));
    slr_slot *sl = &r->shards[0];
    if (!(sl->path = sl__strdup(path)))
        return sl__oom("opening a reader");
    sl->file = sl->path;
    slr_shard *sh;
    SL_TRY(shard_open(&sh, path, r->flags, NULL, &r->schema, &r->meta));
    if (sh->first != 0) {
        unsigned long long first = (unsigned long long)sh->first;
        sl_record__shard_put(sh);
        return sl__error(SL_ECORRUPT, "%s: a single-file dataset must start at record 0 (starts at "
                         "%llu; is it a shard of a directory?)", path, first);
    }
    sl->count = sh->count;
    sl->bytes = sh->size;
    sl->footer_checksum = sh->footer_checksum;
    sl->copy_reads = sh->copy_reads;
    r->single = sh; /* the set's first open takes it: open for the reader's life */
    SL_TRY(make_set(r, 1));
    void *state;
    SL_TRY(sl_shard_set__get(r->set, 0, &state));
    sl_shard_set__put(r->set, 0);
    r->count = sh->count;
    r->data_bytes = sh->size;
    r->remote = !sh->map && sh->size && sl_io__is_url(path);
    scalar_slots(r);
    /* the scalar columns are used where they lie in the index, which lives
     * as long as the reader (mapped, or its heap copy) */
    for (int c = 0; c < r->schema.ncols; c++)
        if (r->scalar_slot[c] >= 0)
            r->scalars[c] = sh->index + sh->count * SLR_INDEX_ENTRY +
                            (uint64_t)r->scalar_slot[c] * sh->count * 8;
    r->scalars_mapped = true;
    atomic_store(&r->scalars_ready, true);
    return SL_OK;
}

/* A directory: the plan from the manifest, the schema from the first shard's
 * header; no shard is opened (see "Open shards"). */
static int open_dir(sl_reader *r, const char *path) {
    int rc = SL_OK;
    slr_manifest man;
    memset(&man, 0, sizeof man);
    if (!(r->mpath = sl_record__join(path, SLR_MANIFEST_NAME)))
        return sl__oom("opening a dataset");
    SL_TRY(sl_record__manifest_load(r->mpath, &man));
    SL_CHECK(make_slots(r, man.nshards));
    for (int i = 0; i < man.nshards; i++) {
        const slr_manifest_shard *ms = &man.shards[i];
        slr_slot *sl = &r->shards[i];
        if (!(sl->path = sl_record__join(path, ms->file))) {
            rc = sl__oom("opening a dataset");
            goto cleanup;
        }
        sl->file = sl->path + strlen(sl->path) - strlen(ms->file);
        sl->first = ms->first;
        sl->count = ms->records;
        sl->bytes = ms->bytes;
        sl->footer_checksum = ms->footer_checksum;
        sl->copy_reads = ms->records > 0 && ms->bytes / ms->records >= COPY_MIN_RECORD;
        r->data_bytes += ms->bytes;
        /* A local shard's size costs a stat: a record count it cannot hold
         * is refused now, before anything is planned over phantom records
         * (a missing or otherwise damaged shard still costs only its own
         * records, when a read first opens it). */
        sl_io_info fst;
        if (!sl_io__is_url(sl->path) && sl_io__stat(sl->path, &fst) == SL_OK && !fst.is_dir &&
            ms->records > sl_record__max_records(fst.size))
            SL_FAIL(SL_ECORRUPT, "%s: shard %s: the manifest says %llu records, but the file's "
                    "%llu bytes hold at most %llu: the shard is cut short or the manifest is "
                    "damaged; restore the shard or write the dataset again", r->mpath, ms->file, (unsigned long long)ms->records,
                    (unsigned long long)fst.size,
                    (unsigned long long)sl_record__max_records(fst.size));
    }
    r->count = man.records;
    /* The schema: shard 0's header, read by itself (no mapping, no index). */
    const slr_slot *s0 = &r->shards[0];
    sl_io *io = NULL;
    int src = sl_io__open(&io, s0->path, SL_IO_EDGES | SL_IO_MISSING_OK);
    if (src == SL_END)
        SL_FAIL(SL_ECORRUPT, "%s: shard %s is missing (%s)", r->mpath, s0->file,
                sl_io__is_url(s0->path) ? "HTTP 404" : strerror(ENOENT));
    SL_CHECK(src);
    slr_header hdr;
    rc = sl_record__read_header(io, &hdr, &r->schema, NULL);
    sl_io__close(io);
    SL_CHECK(rc);
    scalar_slots(r);
    SL_CHECK(make_set(r, r->nshards < SLR_OPEN_SHARDS_MIN ? r->nshards : SLR_OPEN_SHARDS_MIN));
    sl_shard_set__grow_to(r->set, growth_cap(r->nshards));
    r->remote = sl_io__is_url(path);
    if (r->remote)
        SL_TRY(opener_make(r));
    r->meta = man.meta;
    memset(&man.meta, 0, sizeof man.meta);
cleanup:
    sl_record__manifest_clear(&man);
    return rc;
}

int sl_reader_open(sl_reader **out, const char *path, unsigned flags) {
    *out = NULL;
    if (!path || !*path)
        return sl__error(SL_EINVAL, "sl_reader_open: empty path");
    if (flags & ~(SL_READ_NO_VERIFY | SL_READ_NO_MMAP))
        return sl__error(SL_EINVAL, "%s: unknown reader flags 0x%x", path, flags);
    SL_TRY(sl_settings_check());
    sl_io_info st;
    int src = sl_io__stat(path, &st);
    if (src == SL_END)
        return sl__error(SL_EIO, "%s: cannot open: %s", path, sl_io__missing(path));
    SL_TRY(src);
    sl_reader *r = sl__calloc(1, sizeof *r);
    if (!r)
        return sl__oom("opening a reader");
    r->flags = flags;
    r->id = atomic_fetch_add(&reader_ids, 1) + 1;
    pthread_mutex_init(&r->scalars_mu, NULL);
    r->path = sl__strdup(path);
    int rc;
    if (!r->path)
        rc = sl__oom("opening a reader");
    else
        rc = st.is_dir ? open_dir(r, path) : open_file(r, path);
    if (rc < 0) {
        sl_reader_free(r);
        return rc;
    }
    *out = r;
    return SL_OK;
}

uint64_t sl_reader_count(const sl_reader *r) { return r ? r->count : 0; }
const sl_schema *sl_reader_schema(const sl_reader *r) { return r ? &r->schema : NULL; }
const char *sl_reader_meta(const sl_reader *r, const char *key) {
    return r && key ? sl_record__meta_get(&r->meta, key) : NULL;
}
int sl_reader_meta_count(const sl_reader *r) { return r ? r->meta.n : 0; }
const char *sl_reader_meta_key(const sl_reader *r, int i) {
    return r && i >= 0 && i < r->meta.n ? r->meta.keys[i] : NULL;
}
int sl_reader_shard_count(const sl_reader *r) { return r ? r->nshards : 0; }
const char *sl_reader_shard_path(const sl_reader *r, int i) {
    return r && i >= 0 && i < r->nshards ? r->shards[i].path : NULL;
}
uint64_t sl_reader_shard_bytes(const sl_reader *r, int i) {
    return r && i >= 0 && i < r->nshards ? r->shards[i].bytes : 0;
}
uint64_t sl_reader_data_bytes(const sl_reader *r) { return r ? r->data_bytes : 0; }

/* Join the shards' scalar columns, opening each shard in turn (its index was
 * checked against its checksum when it opened). */
static int join_scalars(sl_reader *r) {
    size_t bytes;
    if (!sl__mul_ok((size_t)(r->count ? r->count : 1), 8, &bytes))
        return sl__error(SL_ELIMIT, "%s: too many records", r->path);
    for (int c = 0; c < r->schema.ncols; c++) {
        sl__free(r->scalars[c]); /* a failed earlier try's */
        r->scalars[c] = NULL;
    }
    for (int c = 0; c < r->schema.ncols; c++)
        if (r->scalar_slot[c] >= 0 && !(r->scalars[c] = sl__malloc(bytes)))
            return sl__oom("reading index columns");
    for (int k = 0; k < r->nshards; k++) {
        slr_shard *sh;
        SL_TRY(sl_record__shard_get(r, k, &sh));
        for (int c = 0; c < r->schema.ncols; c++) {
            int slot = r->scalar_slot[c];
            if (slot < 0)
                continue;
            uint64_t n = sh->count;
            memcpy((uint8_t *)r->scalars[c] + sh->first * 8,
                   sh->index + n * SLR_INDEX_ENTRY + (uint64_t)slot * n * 8, (size_t)n * 8);
        }
        sl_record__shard_put(sh);
    }
    return SL_OK;
}

int sl_record__scalars(const sl_reader *r) {
    if (atomic_load_explicit(&r->scalars_ready, memory_order_acquire))
        return SL_OK;
    sl_reader *w = (sl_reader *)(uintptr_t)r; /* a cache built once, under its lock */
    pthread_mutex_lock(&w->scalars_mu);
    int rc = SL_OK;
    if (!atomic_load_explicit(&w->scalars_ready, memory_order_relaxed)) {
        rc = join_scalars(w);
        if (rc == SL_OK)
            atomic_store_explicit(&w->scalars_ready, true, memory_order_release);
    }
    pthread_mutex_unlock(&w->scalars_mu);
    return rc;
}

int sl_reader_index_column(const sl_reader *r, int col, const void **out) {
    *out = NULL;
    if (!r || col < 0 || col >= r->schema.ncols)
        return sl__error(SL_EINVAL, "%s: no column %d", r ? r->path : "reader", col);
    if (r->scalar_slot[col] < 0)
        return sl__error(SL_EINVAL, "%s: column \"%s\" is %s, not int64 or float64", r->path,
                         r->schema.col[col].name, sl_coltype_name(r->schema.col[col].type));
    SL_TRY(sl_record__scalars(r));
    static const uint64_t empty = 0;
    *out = r->scalars[col] ? r->scalars[col] : (const void *)&empty;
    return SL_OK;
}

/* ---- records ----------------------------------------------------------------------------- */

int sl_record_create(sl_record **out) {
    *out = sl__calloc(1, sizeof **out);
    if (!*out)
        return sl__oom("creating a record");
    return SL_OK;
}

void sl_record_free(sl_record *rec) {
    if (!rec)
        return;
    if (rec->pin_ref)
        sl_record__shard_put(rec->pin);
    sl__free(rec->frame);
    sl__free(rec->scratch);
    ZSTD_freeDCtx(rec->dctx);
    sl__free(rec);
}

const sl_tensor *sl_record_column(const sl_record *rec, int col) {
    if (!rec || col < 0 || col >= rec->ncols)
        return NULL;
    return &rec->col[col];
}

uint64_t sl_record_index(const sl_record *rec) { return rec ? rec->index : 0; }

#define BAD(...) return sl__error(SL_ECORRUPT, __VA_ARGS__)

/* One column of a payload, checked against the schema (parse_payload). */
typedef struct colv {
    const uint8_t *data;     /* raw bytes, or the zstd frame */
    uint64_t size;           /* stored size of data */
    uint64_t raw;            /* bytes after decompression */
    uint64_t scratch_off;    /* where it decompresses in the record's scratch;
                                UINT64_MAX: stored raw */
    int64_t shape[SL_MAX_DIMS];
    int ndim;
} colv;

/* Find and check every column of record `index`'s payload: its place, its
 * shape against the schema, its sizes (stored and decompressed). Nothing is
 * decompressed or copied; *scratch_out gets the scratch bytes the compressed
 * columns need. The one place that decides whether a payload is well-formed:
 * sl_record__decode_payload and sl_record__read_cols both start here. */
static int parse_payload(const sl_schema *s, const uint8_t *pl, uint64_t len, uint64_t index,
                         const char *path, colv *v, uint64_t *scratch_out) {
    unsigned long long ri = (unsigned long long)index;
    uint64_t dir = (uint64_t)s->ncols * SLR_COLDIR_ENTRY;
    uint64_t scratch = 0;
    if (len < dir)
        BAD("%s: record %llu: payload of %llu bytes is shorter than its column directory", path, ri,
            (unsigned long long)len);
    uint64_t prev_end = dir;
    for (int c = 0; c < s->ncols; c++) {
        const slr_column *col = &s->col[c];
        uint64_t off = sl__ld64(pl + (size_t)c * SLR_COLDIR_ENTRY);
        uint64_t size = sl__ld64(pl + (size_t)c * SLR_COLDIR_ENTRY + 8);
        if (off % 8 || off < prev_end || off > len || size > len - off)
            BAD("%s: record %llu: column \"%s\": bad place in the payload (offset %llu, size %llu, "
                "payload %llu)", path, ri, col->name, (unsigned long long)off,
                (unsigned long long)size, (unsigned long long)len);
        prev_end = off + size;
        const uint8_t *p = pl + off;
        v[c].ndim = col->ndim;
        v[c].scratch_off = UINT64_MAX;
        switch (col->type) {
        case SL_COL_INT64:
        case SL_COL_FLOAT64:
            if (size != 8)
                BAD("%s: record %llu: column \"%s\": scalar of %llu bytes", path, ri, col->name,
                    (unsigned long long)size);
            v[c].ndim = 0;
            v[c].raw = 8;
            break;
        case SL_COL_STRING:
        case SL_COL_BYTES:
        case SL_COL_ARRAY: {
            uint64_t elem = 1;
            if (col->type == SL_COL_ARRAY) {
                bool var = sl_record__col_varshape(col);
                elem = sl_dtype_size(col->dtype);
                for (int d = 0; d < col->ndim; d++) {
                    int64_t dim = col->shape[d];
                    if (var) {
                        if (size < 8) {
                            BAD("%s: record %llu: column \"%s\": shape runs past the column", path,
                                ri, col->name);
                        }
                        int64_t got = (int64_t)sl__ld64(p);
                        p += 8;
                        size -= 8;
                        if (got < 0 || (dim != -1 && got != dim))
                            BAD("%s: record %llu: column \"%s\": dim %d is %lld (schema %lld)", path,
                                ri, col->name, d, (long long)got, (long long)dim);
                        dim = got;
                    }
                    v[c].shape[d] = dim;
                    if (__builtin_mul_overflow(elem, (uint64_t)dim, &elem))
                        BAD("%s: record %llu: column \"%s\": shape overflows", path, ri, col->name);
                }
            }
            if (col->flags & SL_COLF_ZSTD) {
                if (size < 8)
                    BAD("%s: record %llu: column \"%s\": compressed value without its size", path,
                        ri, col->name);
                uint64_t raw = sl__ld64(p);
                p += 8;
                size -= 8;
                if (col->type == SL_COL_ARRAY && raw != elem)
                    BAD("%s: record %llu: column \"%s\": shape needs %llu bytes, stored size says "
                        "%llu", path, ri, col->name, (unsigned long long)elem,
                        (unsigned long long)raw);
                /* Bound the allocation by what the stored bytes can expand to
                 * (see slr_zstd_max_expansion) before trusting raw_size. */
                if (raw > slr_zstd_max_expansion(size))
                    BAD("%s: record %llu: column \"%s\": %llu compressed bytes cannot hold the "
                        "%llu bytes the value claims", path, ri, col->name,
                        (unsigned long long)size, (unsigned long long)raw);
                if (raw > SLR_DECOMPRESSED_MAX || scratch + raw > SLR_DECOMPRESSED_MAX)
                    return sl__error(SL_ELIMIT, "%s: record %llu: column \"%s\": %llu bytes "
                                     "decompressed exceeds the limit (%llu)", path, ri, col->name,
                                     (unsigned long long)raw,
                                     (unsigned long long)SLR_DECOMPRESSED_MAX);
                v[c].raw = raw;
                v[c].scratch_off = scratch;
                scratch += slr_align8(raw);
            } else {
                if (col->type == SL_COL_ARRAY && size != elem)
                    BAD("%s: record %llu: column \"%s\": shape needs %llu bytes, column holds %llu",
                        path, ri, col->name, (unsigned long long)elem, (unsigned long long)size);
                v[c].raw = size;
            }
            if (col->type != SL_COL_ARRAY) {
                v[c].ndim = 1;
                v[c].shape[0] = (int64_t)v[c].raw;
            }
            break;
        }
        }
        v[c].data = p;
        v[c].size = size;
    }
    *scratch_out = scratch;
    return SL_OK;
}

/* Decompress column `c` (v: parse_payload's) into dst, which holds v->raw bytes. */
static int inflate_col(sl_record *rec, const slr_column *col, const colv *v, void *dst,
                       uint64_t index, const char *path) {
    if (!rec->dctx && !(rec->dctx = sl_record__zstd_dctx()))
        return sl__oom("creating a zstd context");
    unsigned long long ri = (unsigned long long)index;
    size_t got = ZSTD_decompressDCtx(rec->dctx, dst, (size_t)v->raw, v->data, (size_t)v->size);
    if (ZSTD_isError(got) && ZSTD_getErrorCode(got) == ZSTD_error_memory_allocation)
        return sl__oom("decompressing a record");
    if (ZSTD_isError(got))
        BAD("%s: record %llu: column \"%s\": zstd: %s", path, ri, col->name,
            ZSTD_getErrorName(got));
    if (got != v->raw)
        BAD("%s: record %llu: column \"%s\": decompressed to %zu bytes, expected %llu", path, ri,
            col->name, got, (unsigned long long)v->raw);
    return SL_OK;
}

int sl_record__decode_payload(const sl_schema *s, const uint8_t *pl, uint64_t len, uint64_t index,
                              const char *path, sl_record *rec, sl_buffer *owner) {
    colv v[SL_MAX_COLUMNS];
    uint64_t scratch = 0;
    rec->ncols = 0;
    SL_TRY(parse_payload(s, pl, len, index, path, v, &scratch));
    bool any_zstd = false;
    for (int c = 0; c < s->ncols; c++)
        any_zstd |= v[c].scratch_off != UINT64_MAX;
    if (any_zstd) /* at least 8 bytes, so that an empty value still has somewhere to go */
        SL_TRY(sl__grow((void **)&rec->scratch, &rec->scratch_cap,
                        scratch ? (size_t)scratch : 8, 1, 4096, "decompressing a record"));
    for (int c = 0; c < s->ncols; c++) {
        const slr_column *col = &s->col[c];
        void *data = (void *)v[c].data;
        if (v[c].scratch_off != UINT64_MAX) {
            data = rec->scratch + v[c].scratch_off;
            SL_TRY(inflate_col(rec, col, &v[c], data, index, path));
        }
        sl_dtype dt = col->type == SL_COL_INT64 ? SL_I64
                      : col->type == SL_COL_FLOAT64 ? SL_F64
                      : col->type == SL_COL_ARRAY ? col->dtype : SL_U8;
        sl_tensor_view(&rec->col[c], data, dt, v[c].ndim, v[c].shape);
        if (v[c].scratch_off == UINT64_MAX)
            rec->col[c].buf = owner;   /* borrowed: the record holds no reference */
    }
    rec->ncols = s->ncols;
    rec->index = index;
    return SL_OK;
}

/* A record's frame `f` (as read or mapped) checked against its index entry
 * (length, checksum when `verify`), then its payload decoded into `rec`. */
static int frame_check(const slr_shard *sh, uint64_t i, const uint8_t *f, uint64_t len,
                       uint64_t sum, bool verify) {
    if (sl__ld64(f) != len || sl__ld64(f + 8) != sum)
        return sl__error(SL_ECORRUPT, "%s: record %llu: frame header does not match the index",
                         sh->path, (unsigned long long)i);
    if (verify && sl_record__payload_sum(f + SLR_FRAME_HEADER, (size_t)len, i,
                                         sh->hdr.required_features) != sum)
        return sl__error(SL_ECORRUPT, "%s: record %llu: checksum mismatch", sh->path,
                         (unsigned long long)i);
    return SL_OK;
}

static int frame_decode(const sl_reader *r, const slr_shard *sh, uint64_t i, const uint8_t *f,
                        uint64_t len, uint64_t sum, bool verify, sl_record *rec,
                        sl_buffer *owner) {
    SL_TRY(frame_check(sh, i, f, len, sum, verify));
    return sl_record__decode_payload(&r->schema, f + SLR_FRAME_HEADER, len, i, sh->path, rec,
                                     owner);
}

/* "PATH: record N: CAUSE" from the message of a failure `rc` about shard
 * file `path` (named once). */
static int record_error(int rc, const char *path, uint64_t i) {
    if (rc == SL_ENOMEM)
        return rc;
    char cause[SL__ERRMSG_MAX];
    const char *m = sl_errmsg();
    size_t pl = strlen(path);
    if (!strncmp(m, path, pl) && m[pl] == ':' && m[pl + 1] == ' ')
        m += pl + 2; /* the shard is named once */
    snprintf(cause, sizeof cause, "%s", m);
    return sl__error(rc, "%s: record %llu: %s", path, (unsigned long long)i, cause);
}

/* The open shard holding record i, pinned in `rec` (opened first if need be;
 * the record's previous shard is let go). A shard that cannot be opened is
 * an error naming it, the record and the cause. */
static int pin_shard(const sl_reader *r, uint64_t i, sl_record *rec, slr_shard **out) {
    if (i >= r->count)
        return sl__error(SL_EINVAL, "%s: record %llu is out of range (the dataset has %llu)",
                         r->path, (unsigned long long)i, (unsigned long long)r->count);
    int k = sl_record__shard_of(r, i);
    slr_shard *p = rec->pin;
    if (p && rec->pin_reader == r->id && rec->pin_k == k) {
        *out = p;
        return SL_OK;
    }
    slr_shard *sh = NULL;
    bool ref = false;
    if (sl_record__keeps_shards(r)) /* open shards stay: no reference needed */
        sh = sl_shard_set__peek(r->set, k);
    if (!sh) {
        int rc = sl_record__shard_get(r, k, &sh);
        if (rc < 0)
            return record_error(rc, r->shards[k].path, i);
        ref = true;
    }
    if (rec->pin_ref)
        sl_record__shard_put(p);
    rec->pin = sh;
    rec->pin_ref = ref;
    rec->pin_reader = r->id;
    rec->pin_k = k;
    *out = sh;
    return SL_OK;
}

/* Record i's index entry (offset, length, checksum) in its open shard. */
static int locate(const slr_shard *sh, uint64_t i, uint64_t *off, uint64_t *len, uint64_t *sum) {
    const uint8_t *e = sh->entries + (i - sh->first) * SLR_INDEX_ENTRY;
    *off = sl__ld64(e);
    *len = sl__ld64(e + 8);
    *sum = sl__ld64(e + 16);
    /* checked at open; again here, as a mapped index could have changed */
    uint64_t io = sh->index_offset;
    if (*off < sh->hdr.header_bytes || *off > io - SLR_FRAME_HEADER ||
        *len > io - *off - SLR_FRAME_HEADER)
        return sl__error(SL_ECORRUPT, "%s: record %llu: index entry (offset %llu, length %llu) "
                         "lies outside the data region (the file changed after it was opened?)",
                         sh->path, (unsigned long long)i, (unsigned long long)*off,
                         (unsigned long long)*len);
    return SL_OK;
}

/* Read record i's frame from its shard (not mapped): a failure (a remote
 * shard's request that failed after its retries) names the record too. */
static int read_frame(const slr_shard *sh, uint64_t i, uint8_t *dst, uint64_t len, uint64_t off) {
    int rc = sl_io__read(sh->io, dst, (size_t)(SLR_FRAME_HEADER + len), off);
    return rc < 0 ? record_error(rc, sh->path, i) : SL_OK;
}

/* Record i's frame: in the mapping, or read into rec->frame (pread mode, or
 * `copy` and a shard of large records: COPY_MIN_RECORD). */
static int frame_of(const sl_reader *r, uint64_t i, sl_record *rec, bool copy,
                    const slr_shard **shp, const uint8_t **f, uint64_t *len, uint64_t *sum) {
    uint64_t off = 0;
    slr_shard *sh;
    SL_TRY(pin_shard(r, i, rec, &sh));
    *shp = sh;
    SL_TRY(locate(sh, i, &off, len, sum));
    if (sh->map && !(copy && sh->copy_reads)) {
        *f = (sh->hot ? sh->hot : sh->map) + off;
        return SL_OK;
    }
    SL_TRY(sl__grow((void **)&rec->frame, &rec->frame_cap, (size_t)(SLR_FRAME_HEADER + *len), 1,
                    4096, "reading a record"));
    SL_TRY(read_frame(sh, i, rec->frame, *len, off));
    *f = rec->frame;
    return SL_OK;
}

int sl_record__read(const sl_reader *r, uint64_t i, sl_record *rec, bool verify) {
    if (!r || !rec)
        return sl__error(SL_EINVAL, "sl_reader_read: NULL argument");
    const slr_shard *sh = NULL;
    const uint8_t *f = NULL;
    uint64_t len = 0, sum = 0;
    SL_TRY(frame_of(r, i, rec, false, &sh, &f, &len, &sum));
    return frame_decode(r, sh, i, f, len, sum, verify, rec, sh->hot ? sh->hotbuf : sh->mapbuf);
}

int sl_record__read_cols(const sl_reader *r, uint64_t i, sl_record *rec, bool verify,
                         void *const *dst, const size_t *bytes) {
    if (!r || !rec || !dst || !bytes)
        return sl__error(SL_EINVAL, "sl_record__read_cols: NULL argument");
    const slr_shard *sh = NULL;
    const uint8_t *f = NULL;
    uint64_t len = 0, sum = 0, scratch = 0;
    SL_TRY(frame_of(r, i, rec, true, &sh, &f, &len, &sum));
    SL_TRY(frame_check(sh, i, f, len, sum, verify));
    colv v[SL_MAX_COLUMNS];
    SL_TRY(parse_payload(&r->schema, f + SLR_FRAME_HEADER, len, i, sh->path, v, &scratch));
    for (int c = 0; c < r->schema.ncols; c++) {
        const slr_column *col = &r->schema.col[c];
        if (v[c].raw != bytes[c])
            BAD("%s: record %llu: column \"%s\" holds %llu bytes where its batch row holds %zu",
                sh->path, (unsigned long long)i, col->name, (unsigned long long)v[c].raw,
                bytes[c]);
        if (v[c].scratch_off != UINT64_MAX)
            SL_TRY(inflate_col(rec, col, &v[c], dst[c], i, sh->path));
        else if (v[c].raw)
            memcpy(dst[c], v[c].data, (size_t)v[c].raw);
    }
    return SL_OK;
}

int sl_record__copy_size(const sl_reader *r, uint64_t i, sl_record *rec, size_t *size) {
    *size = 0;
    if (!r || i >= r->count || !r->shards[sl_record__shard_of(r, i)].copy_reads)
        return 0;
    slr_shard *sh;
    if (pin_shard(r, i, rec, &sh) < 0 || !sh->copy_reads || !sh->map)
        return 0; /* a shard that does not open: the read reports it */
    uint64_t len = sl__ld64(sh->entries + (i - sh->first) * SLR_INDEX_ENTRY + 8);
    if (len > SIZE_MAX - SLR_FRAME_HEADER)
        return 0; /* the read reports the damage */
    *size = (size_t)(SLR_FRAME_HEADER + len);
    return 1;
}

int sl_record__read_into(const sl_reader *r, uint64_t i, sl_record *rec, bool verify,
                         uint8_t *dst, size_t cap, sl_buffer *owner) {
    if (!r || !rec || !dst)
        return sl__error(SL_EINVAL, "sl_record__read_into: NULL argument");
    slr_shard *sh = NULL;
    uint64_t off = 0, len = 0, sum = 0;
    SL_TRY(pin_shard(r, i, rec, &sh));
    SL_TRY(locate(sh, i, &off, &len, &sum));
    if (len > cap || cap - len < SLR_FRAME_HEADER)
        return sl__error(SL_EINVAL, "%s: record %llu: %llu bytes do not fit a buffer of %zu",
                         sh->path, (unsigned long long)i, (unsigned long long)len, cap);
    SL_TRY(read_frame(sh, i, dst, len, off));
    return frame_decode(r, sh, i, dst, len, sum, verify, rec, owner);
}

/* ---- opening remote shards ahead -----------------------------------------------------
 *
 * The remote hint (sl_record__prefetch, far 2) needs the record's shard open
 * to know where the record lies. Opening a remote shard costs a round trip
 * (its edges, SL_IO_EDGES; before that, HEAD, header, footer and index, one
 * after another); made by the hinting thread, the first hints of a shuffled epoch, which reach every
 * shard, opened the shards one at a time while the decoders waited: with
 * 20 ms a request, 1-1.4 s of a 4 s run over 9 shards (bench/README.md,
 * remote inputs). So a hint whose shard is not open is queued for a few
 * opener threads, which open it (the slot's lock makes that one open
 * however many ask) and then pass the hint on; different shards open at the
 * same time, and the hinting thread goes on. The queue is bounded: a hint
 * that finds it full is dropped (a hint never fails; the read fetches what
 * was not fetched ahead). Threads start on first use. A child process after
 * fork() has none of them (core/worker.h's fork policy): it opens in the
 * hinting thread, as before, and leaves the parent's opener alone. */

#define SLR_OPENERS 8
#define SLR_OPENER_QUEUE 1024

typedef struct slr_opener {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t q[SLR_OPENER_QUEUE]; /* hinted records, oldest at head */
    int head, n;
    /* The first hint of each shard not open is an open, queued apart and
     * taken first: every thread opens a different shard (with one queue,
     * threads that took hints of one shard waited for one open while other
     * shards waited their turn: 12 shards opened in 3 round trips with 8
     * threads, now 2). opening[k]: shard k's open is queued or running. */
    uint64_t oq[SLR_OPENER_QUEUE];
    int ohead, on;
    uint8_t *opening;
    sl_workers ws; /* the threads (started and stopped under mu) */
} slr_opener;

/* The remote hint itself: the record's shard open, its bytes asked for. */
static void hint_remote(const sl_reader *r, uint64_t i, int k) {
    slr_shard *sh;
    if (sl_record__shard_get(r, k, &sh) < 0)
        return; /* the read reports it */
    const uint8_t *e = sh->entries + (i - sh->first) * SLR_INDEX_ENTRY;
    if (!sh->map) { /* read by ranges (a remote shard): fetch it ahead */
        uint64_t off = sl__ld64(e), len = sl__ld64(e + 8);
        if (off <= sh->size - SLR_FRAME_HEADER && len <= sh->size - SLR_FRAME_HEADER - off)
            sl_io__will_need(sh->io, off, (size_t)(SLR_FRAME_HEADER + len));
    }
    sl_record__shard_put(sh);
}

/* The oldest plain hint whose shard is not being opened, taken out of the
 * queue (the head takes its place); false when every queued hint waits on
 * an open. A thread that took a hint of a shard being opened waited for that
 * open while a shard nobody had asked for yet waited for a thread: a round
 * trip late, in one epoch start in a few. Under o->mu. */
static bool take_ready_hint(const sl_reader *r, slr_opener *o, uint64_t *out) {
    for (int j = 0; j < o->n; j++) {
        int at = (o->head + j) % SLR_OPENER_QUEUE;
        uint64_t i = o->q[at];
        if (o->opening[sl_record__shard_of(r, i)])
            continue;
        o->q[at] = o->q[o->head];
        o->head = (o->head + 1) % SLR_OPENER_QUEUE;
        o->n--;
        *out = i;
        return true;
    }
    return false;
}

static void *opener_main(void *arg) {
    const sl_reader *r = arg;
    slr_opener *o = r->opener;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        uint64_t i = 0;
        int opens = 0;
        while (!sl__workers_stopping(&o->ws)) {
            if (o->on) { /* opens first */
                i = o->oq[o->ohead];
                o->ohead = (o->ohead + 1) % SLR_OPENER_QUEUE;
                o->on--;
                opens = 1;
                break;
            }
            if (take_ready_hint(r, o, &i))
                break;
            pthread_cond_wait(&o->cv, &o->mu);
        }
        if (sl__workers_stopping(&o->ws))
            break;
        pthread_mutex_unlock(&o->mu);
        int k = sl_record__shard_of(r, i);
        hint_remote(r, i, k);
        pthread_mutex_lock(&o->mu);
        if (opens) {
            o->opening[k] = 0;
            if (o->n) /* hints of this shard may wait for it */
                pthread_cond_broadcast(&o->cv);
        }
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}


static int opener_make(sl_reader *r) {
    slr_opener *o = sl__calloc(1, sizeof *o);
    if (o && !(o->opening = sl__calloc((size_t)r->nshards, 1))) {
        sl__free(o);
        o = NULL;
    }
    if (!o)
        return sl__oom("opening a dataset");
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    sl__workers_init_cv(&o->ws, "opener", SLR_OPENERS, &o->mu, &o->cv); /* inline: cannot fail */
    r->opener = o;
    return SL_OK;
}

/* Queue hint i for the opener threads; false when they cannot take it (a
 * forked child: the caller opens in place). */
static bool opener_push(const sl_reader *r, uint64_t i) {
    slr_opener *o = r->opener;
    if (!sl__workers_owned(&o->ws))
        return false;
    pthread_mutex_lock(&o->mu);
    int k = sl_record__shard_of(r, i);
    int open = !o->opening[k];
    if (!sl__workers_stopping(&o->ws) &&
        (open ? o->on < SLR_OPENER_QUEUE : o->n < SLR_OPENER_QUEUE)) {
        if (open) {
            o->opening[k] = 1;
            o->oq[(o->ohead + o->on) % SLR_OPENER_QUEUE] = i;
            o->on++;
        } else {
            o->q[(o->head + o->n) % SLR_OPENER_QUEUE] = i;
            o->n++;
        }
        if (sl__workers_count(&o->ws) < SLR_OPENERS)
            (void)sl__workers_start(&o->ws, opener_main, (void *)(uintptr_t)r); /* else fewer */
        pthread_cond_signal(&o->cv);
    } /* else: full, the hint is dropped */
    pthread_mutex_unlock(&o->mu);
    return true;
}

static void opener_free(sl_reader *r) {
    slr_opener *o = r->opener;
    if (!o)
        return;
    if (!sl__workers_owned(&o->ws)) { /* a forked child: the threads are the parent's */
        sl__workers_dispose(&o->ws); /* forgets them; neither signals nor joins */
        r->opener = NULL;
        sl__free(o->opening);
        sl__free(o);
        return;
    }
    sl__workers_dispose(&o->ws); /* stop (wakes cv), join */
    /* only now: a thread started just before the stop reads r->opener when
     * it begins (clearing it first crashed such a thread on a NULL lock) */
    r->opener = NULL;
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    sl__free(o->opening);
    sl__free(o);
}

/* The CPU-cache hints of sl_record__prefetch, for an open shard. Inlined:
 * as a function of its own GCC finds it free of side effects (a prefetch
 * changes no memory) and deletes the calls. */
static inline __attribute__((always_inline)) void prefetch_open(const slr_shard *sh, uint64_t i,
                                                                int far) {
    const uint8_t *e = sh->entries + (i - sh->first) * SLR_INDEX_ENTRY;
    if (far) {
        __builtin_prefetch(e);
        return;
    }
    if (!sh->map || sh->copy_reads)
        return;
    uint64_t off = sl__ld64(e), len = sl__ld64(e + 8);
    if (off >= sh->size || len > sh->size - off)
        return; /* a damaged entry: the read reports it */
    /* the frame and up to 1 KB of payload: a small record whole (the
     * checksum reads all of it). Measured on 28x28 records, CPU per sample
     * fell most with the whole record, less with its first 512 bytes, least
     * with the first two lines; a large record's rest is a sequential scan
     * that the hardware prefetcher follows. */
    const uint8_t *at = (sh->hot ? sh->hot : sh->map) + off;
    for (uint64_t b = 0; b < 1024 && b < SLR_FRAME_HEADER + len; b += 64)
        __builtin_prefetch(at + b);
}

/* A shuffled read lands on a cold index entry and a cold frame: two cache
 * misses that were a quarter of the time of a small-record pipeline (28x28
 * images) before the reading threads started asking for both ahead. The
 * cache hints only touch a shard that is open (never opening one, nor
 * waiting for one being opened); the remote hint (far 2) opens the shard,
 * which is the read-ahead of a shard fetched whole into the cache. */
void sl_record__prefetch(const sl_reader *r, uint64_t i, int far) {
    if (i >= r->count)
        return;
    int k = sl_record__shard_of(r, i);
    if (far == 2) {
        /* a shard not open yet is opened by the opener threads ("Opening
         * remote shards ahead"), not here */
        if (r->opener && !sl_shard_set__peek(r->set, k) && opener_push(r, i))
            return;
        hint_remote(r, i, k);
        return;
    }
    if (sl_record__keeps_shards(r)) { /* an open shard stays for the reader's life */
        const slr_shard *sh = sl_shard_set__peek(r->set, k);
        if (sh)
            prefetch_open(sh, i, far);
        return;
    }
    void *state; /* pinned, never waited for, never opened */
    if (sl_shard_set__try_get_if_open(r->set, k, &state) != SL_OK)
        return;
    prefetch_open(state, i, far);
    sl_shard_set__put(r->set, k);
}

/* ---- small shards on huge pages ------------------------------------------------------
 *
 * A global shuffle reads records all over the file: each read lands on a
 * page of its own, and a file mapping is 4 KB page-cache pages. On 28x28
 * records (Fashion-MNIST, batch 256, 2 cores Intel Xeon under KVM) the
 * shuffled pipeline ran at 0.71x the same pipeline in storage order; the
 * same reads from a copy of the file on 2 MB transparent huge pages ran at
 * 0.83x, and from a copy on 4 KB pages no faster than from the mapping: the
 * gain is the pages, not the copy (bench/README.md, "Speed kept"). The
 * page cache cannot give a private mapping huge pages (that needs
 * CONFIG_READ_ONLY_THP_FOR_FS, off in the kernel measured), so
 * the file is copied, once, onto anonymous memory advised MADV_HUGEPAGE
 * (transparent_hugepage "madvise" or "always"; "never" gets no copy). The
 * copy is made read-only and owned by a buffer like the mapping: views that
 * retain it (a source's samples) keep it mapped past the reader, and the
 * last release unmaps it. */

typedef struct hot_map {
    void *base;
    size_t len;
} hot_map;

static void hot_release(void *user) {
    hot_map *h = user;
    munmap(h->base, h->len);
    sl__free(h);
}

/* Whether the kernel gives transparent huge pages to memory advised
 * MADV_HUGEPAGE: its setting is not "[never]" (and exists). */
static bool thp_advisable(void) {
    char buf[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
    if (!f)
        return false;
    bool ok = fgets(buf, sizeof buf, f) && !strstr(buf, "[never]");
    fclose(f);
    return ok;
}

/* Copy shard `sh` onto huge pages (sh->hot); false, and nothing changed,
 * when the memory cannot be had. */
static bool shard_hold(slr_shard *sh) {
    const size_t huge = 2u << 20;
    size_t len = ((size_t)sh->size + huge - 1) / huge * huge;
    uint8_t *m = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return false;
    /* a 2 MB-aligned start, so that every 2 MB of the copy can be one page */
    uint8_t *a = (uint8_t *)(((uintptr_t)m + huge - 1) & ~(uintptr_t)(huge - 1));
    if (a > m)
        munmap(m, (size_t)(a - m));
    munmap(a + len, (size_t)(m + huge - a)); /* the rest past the aligned copy */
    hot_map *h = sl__malloc(sizeof *h);
    if (!h || madvise(a, len, MADV_HUGEPAGE) != 0) {
        sl__free(h);
        munmap(a, len);
        return false;
    }
    h->base = a;
    h->len = len;
    memcpy(a, sh->map, (size_t)sh->size);
    mprotect(a, len, PROT_READ); /* what is read, never written */
    if (sl_buffer_wrap(&sh->hotbuf, a, (size_t)sh->size, hot_release, h) != SL_OK) {
        hot_release(h);
        return false;
    }
    sh->hot = a;
    return true;
}

uint64_t sl_record__hold_hot(sl_reader *r, uint64_t budget) {
    if (!r || r->remote || (r->flags & SL_READ_NO_MMAP) || !sl_record__keeps_shards(r))
        return 0;
    if (budget > SLR_HOT_MAX)
        budget = SLR_HOT_MAX;
    uint64_t total = 0;
    for (int k = 0; k < r->nshards; k++) {
        if (r->shards[k].copy_reads || sl_io__is_url(r->shards[k].path))
            return 0;
        total += r->shards[k].bytes;
    }
    if (total > budget || total == 0 || !thp_advisable())
        return 0;
    uint64_t held = 0;
    for (int k = 0; k < r->nshards; k++) {
        slr_shard *sh;
        if (sl_record__shard_get(r, k, &sh) < 0)
            continue; /* the reads of its records report it */
        if (sh->map && !sh->hot && !sh->copy_reads && held + sh->size <= budget &&
            shard_hold(sh))
            held += sh->size;
        sl_record__shard_put(sh);
    }
    return held;
}

bool sl_record__reads_by_ranges(const sl_reader *r) { return r->remote; }

int sl_reader_read(const sl_reader *r, uint64_t i, sl_record *rec) {
    return sl_record__read(r, i, rec, r ? !(r->flags & SL_READ_NO_VERIFY) : true);
}
