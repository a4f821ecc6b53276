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
 * Thread safety: after open, a reader is only read. sl_reader_read uses the
 * caller's sl_record for all mutable state (pread buffer, decompression
 * scratch, zstd context), so many threads may read at once.
 */
#include "record/record_format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
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

static void io_release(void *user) { sl_io__close(user); }

/* Free an index block shard_open returned, unless it is the mapping's. */
static void idx_release(const slr_shard *sh, uint8_t *idx) {
    if (!sh->entries_mapped)
        sl__free(idx);
}

static void shard_close(slr_shard *sh) {
    if (sh->mapbuf)
        sl_buffer_release(sh->mapbuf);   /* closes once retained views are gone */
    else
        sl_io__close(sh->io);
    if (!sh->entries_mapped)
        sl__free(sh->entries);
    sl__free(sh->path);
    memset(sh, 0, sizeof *sh);
}

/* Open and validate one shard file. `meta` (may be NULL) receives the index's
 * metadata; `scal_out` receives pointers to the shard's scalar columns inside
 * a heap block (*idx_out) the caller frees. */
static int shard_open(slr_shard *sh, const char *path, unsigned flags, sl_schema *schema,
                      slr_meta *meta, uint8_t **idx_out) {
    int rc = SL_OK;
    uint8_t *idx = NULL;
    *idx_out = NULL;
    memset(sh, 0, sizeof *sh);
    sh->path = sl__strdup(path);
    if (!sh->path)
        return sl__oom("opening a shard");
    SL_TRY(sl_io__open(&sh->io, path,
                       flags & SL_READ_NO_MMAP ? 0 : SL_IO_MAP | SL_IO_MAP_OR_RANGES));
    sh->size = sl_io__size(sh->io);
    sh->map = sl_io__map(sh->io);
    /* The file is owned by a buffer so a caller can keep a zero-copy view
     * alive past the reader (sl_buffer_retain on the view's buf). */
    if (sh->map && sl_buffer_wrap(&sh->mapbuf, (void *)(uintptr_t)sh->map, (size_t)sh->size,
                                  io_release, sh->io) != SL_OK)
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
    *idx_out = idx;
    return SL_OK;
cleanup:
    idx_release(sh, idx);
    return rc;
}

/* ---- dataset ----------------------------------------------------------------------------- */

void sl_reader_free(sl_reader *r) {
    if (!r)
        return;
    for (int i = 0; i < r->nshards; i++)
        shard_close(&r->shards[i]);
    sl__free(r->shards);
    for (int c = 0; c < SL_MAX_COLUMNS && !r->scalars_mapped; c++)
        sl__free(r->scalars[c]);
    pthread_mutex_destroy(&r->scalars_mu);
    sl_record__meta_clear(&r->meta);
    sl__free(r->path);
    sl__free(r);
}

/* Append shard `sh` (with its index block `idx`) to the reader: keep its entries,
 * append its scalar columns to the global arrays. */
static int adopt_shard(sl_reader *r, slr_shard *sh, uint8_t *idx, bool only) {
    uint64_t n = sh->count;
    uint64_t total = r->count + n;
    size_t bytes;
    if (only && sh->entries_mapped) {
        /* the only shard: its scalar columns are used where they lie */
        for (int c = 0; c < r->schema.ncols; c++)
            if (r->scalar_slot[c] >= 0)
                r->scalars[c] = idx + n * SLR_INDEX_ENTRY + (uint64_t)r->scalar_slot[c] * n * 8;
        r->scalars_mapped = true;
    }
    /* a directory's shards: joined on first use (sl_record__scalars) */
    for (int c = 0; c < r->schema.ncols && only && !r->scalars_mapped; c++) {
        int slot = r->scalar_slot[c];
        if (slot < 0)
            continue;
        if (!sl__mul_ok((size_t)total, 8, &bytes))
            return sl__error(SL_ELIMIT, "%s: too many records", sh->path);
        void *p = sl__realloc(r->scalars[c], bytes ? bytes : 8);
        if (!p)
            return sl__oom("reading index columns");
        r->scalars[c] = p;
        memcpy((uint8_t *)p + r->count * 8, idx + n * SLR_INDEX_ENTRY + (uint64_t)slot * n * 8,
               (size_t)n * 8);
    }
    if (sh->entries_mapped) {
        sh->entries = idx;
    } else {
        /* Keep only the entry table; shrink the block to it. */
        uint8_t *ent = sl__realloc(idx, n ? (size_t)n * SLR_INDEX_ENTRY : 1);
        sh->entries = ent ? ent : idx;
    }
    if (only)
        atomic_store(&r->scalars_ready, true);
    r->count = total;
    r->data_bytes += sh->size;
    sh->copy_reads = n > 0 && sh->size / n >= COPY_MIN_RECORD;
    return SL_OK;
}

static int open_file(sl_reader *r, const char *path) {
    uint8_t *idx = NULL;
    r->shards = sl__calloc(1, sizeof *r->shards);
    if (!r->shards)
        return sl__oom("opening a reader");
    r->nshards = 1;
    int rc = shard_open(&r->shards[0], path, r->flags, &r->schema, &r->meta, &idx);
    if (rc < 0)
        return rc;
    if (r->shards[0].first != 0) {
        idx_release(&r->shards[0], idx);
        return sl__error(SL_ECORRUPT, "%s: a single-file dataset must start at record 0 (starts at "
                         "%llu; is it a shard of a directory?)", path,
                         (unsigned long long)r->shards[0].first);
    }
    int nscalar = 0;
    for (int c = 0; c < r->schema.ncols; c++)
        r->scalar_slot[c] = slr_is_scalar(r->schema.col[c].type) ? nscalar++ : -1;
    r->nscalar = nscalar;
    rc = adopt_shard(r, &r->shards[0], idx, true);
    if (rc < 0)
        idx_release(&r->shards[0], idx);
    return rc;
}

static int open_dir(sl_reader *r, const char *path) {
    int rc = SL_OK;
    uint8_t *idx = NULL;
    slr_manifest man;
    memset(&man, 0, sizeof man);
    char *mpath = sl_record__join(path, SLR_MANIFEST_NAME), *spath = NULL;
    if (!mpath)
        return sl__oom("opening a dataset");
    SL_CHECK(sl_record__manifest_load(mpath, &man));
    r->shards = sl__calloc((size_t)man.nshards, sizeof *r->shards);
    if (!r->shards) {
        rc = sl__oom("opening a dataset");
        goto cleanup;
    }
    for (int i = 0; i < man.nshards; i++) {
        const slr_manifest_shard *ms = &man.shards[i];
        spath = sl_record__join(path, ms->file);
        if (!spath) {
            rc = sl__oom("opening a dataset");
            goto cleanup;
        }
        sl_io_info sst;
        int src = sl_io__stat(spath, &sst);
        if (src == SL_END)
            SL_FAIL(SL_ECORRUPT, "%s: shard %s is missing (%s)", mpath, ms->file,
                    sl_io__is_url(spath) ? "HTTP 404" : strerror(ENOENT));
        SL_CHECK(src);
        sl_schema sch;
        r->nshards = i + 1;
        SL_CHECK(shard_open(&r->shards[i], spath, r->flags, i == 0 ? &r->schema : &sch, NULL, &idx));
        slr_shard *sh = &r->shards[i];
        if (i == 0) {
            int nscalar = 0;
            for (int c = 0; c < r->schema.ncols; c++)
                r->scalar_slot[c] = slr_is_scalar(r->schema.col[c].type) ? nscalar++ : -1;
            r->nscalar = nscalar;
        } else if (!sl_record__schema_equal(&r->schema, &sch)) {
            SL_FAIL(SL_ECORRUPT, "%s: schema differs from the first shard's", spath);
        }
        if (sh->first != r->count || sh->first != ms->first || sh->count != ms->records ||
            sh->size != ms->bytes || sh->footer_checksum != ms->footer_checksum ||
            sh->hdr.shard_index != (uint32_t)i)
            SL_FAIL(SL_ECORRUPT, "%s: shard %s does not match the manifest (file has records "
                    "%llu..+%llu, %llu bytes; manifest says %llu..+%llu, %llu bytes)", mpath,
                    ms->file, (unsigned long long)sh->first, (unsigned long long)sh->count,
                    (unsigned long long)sh->size, (unsigned long long)ms->first,
                    (unsigned long long)ms->records, (unsigned long long)ms->bytes);
        SL_CHECK(adopt_shard(r, sh, idx, false));
        idx = NULL;
        sl__free(spath);
        spath = NULL;
    }
    if (r->count != man.records)
        SL_FAIL(SL_ECORRUPT, "%s: manifest says %llu records, shards hold %llu", mpath,
                (unsigned long long)man.records, (unsigned long long)r->count);
    r->meta = man.meta;
    memset(&man.meta, 0, sizeof man.meta);
cleanup:
    if (idx)
        idx_release(&r->shards[r->nshards - 1], idx);
    sl__free(spath);
    sl__free(mpath);
    sl_record__manifest_clear(&man);
    return rc;
}

int sl_reader_open(sl_reader **out, const char *path, unsigned flags) {
    *out = NULL;
    if (!path || !*path)
        return sl__error(SL_EINVAL, "sl_reader_open: empty path");
    if (flags & ~(SL_READ_NO_VERIFY | SL_READ_NO_MMAP))
        return sl__error(SL_EINVAL, "%s: unknown reader flags 0x%x", path, flags);
    sl_io_info st;
    int src = sl_io__stat(path, &st);
    if (src == SL_END)
        return sl__error(SL_EIO, "%s: cannot open: %s", path,
                         sl_io__is_url(path) ? "HTTP 404 (not found)" : strerror(ENOENT));
    SL_TRY(src);
    sl_reader *r = sl__calloc(1, sizeof *r);
    if (!r)
        return sl__oom("opening a reader");
    r->flags = flags;
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
    return r && i >= 0 && i < r->nshards ? r->shards[i].size : 0;
}
uint64_t sl_reader_data_bytes(const sl_reader *r) { return r ? r->data_bytes : 0; }

/* Join the shards' scalar columns: from each shard's mapping, or read from
 * its file (the index was checked against its checksum at open). */
static int join_scalars(sl_reader *r) {
    size_t bytes;
    if (!sl__mul_ok((size_t)(r->count ? r->count : 1), 8, &bytes))
        return sl__error(SL_ELIMIT, "%s: too many records", r->path);
    for (int c = 0; c < r->schema.ncols; c++) {
        int slot = r->scalar_slot[c];
        if (slot < 0)
            continue;
        sl__free(r->scalars[c]); /* a failed earlier try's */
        r->scalars[c] = NULL;
        uint8_t *dst = sl__malloc(bytes);
        if (!dst)
            return sl__oom("reading index columns");
        for (int k = 0; k < r->nshards; k++) {
            const slr_shard *sh = &r->shards[k];
            uint64_t n = sh->count, at = sh->index_offset + n * SLR_INDEX_ENTRY +
                                         (uint64_t)slot * n * 8;
            int rc = SL_OK;
            if (sh->map)
                memcpy(dst + sh->first * 8, sh->map + at, (size_t)n * 8);
            else
                rc = sl_io__read(sh->io, dst + sh->first * 8, (size_t)n * 8, at);
            if (rc < 0) {
                sl__free(dst);
                return rc;
            }
        }
        r->scalars[c] = dst;
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

const slr_shard *sl_record__shard_of(const sl_reader *r, uint64_t i) {
    int lo = 0, hi = r->nshards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (r->shards[mid].first <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &r->shards[lo];
}

static int grow_buf(uint8_t **p, size_t *cap, size_t need, const char *what) {
    if (need <= *cap)
        return SL_OK;
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2;
    uint8_t *q = sl__realloc(*p, n);
    if (!q)
        return sl__oom(what);
    *p = q;
    *cap = n;
    return SL_OK;
}

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
        SL_TRY(grow_buf(&rec->scratch, &rec->scratch_cap, scratch ? (size_t)scratch : 8,
                        "decompressing a record"));
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

/* Record i's shard and index entry (offset, length, checksum). */
static int locate(const sl_reader *r, uint64_t i, const slr_shard **sh, uint64_t *off,
                  uint64_t *len, uint64_t *sum) {
    if (i >= r->count)
        return sl__error(SL_EINVAL, "%s: record %llu is out of range (the dataset has %llu)",
                         r->path, (unsigned long long)i, (unsigned long long)r->count);
    *sh = sl_record__shard_of(r, i);
    const uint8_t *e = (*sh)->entries + (i - (*sh)->first) * SLR_INDEX_ENTRY;
    *off = sl__ld64(e);
    *len = sl__ld64(e + 8);
    *sum = sl__ld64(e + 16);
    /* checked at open; again here, as a mapped index could have changed */
    uint64_t io = (*sh)->index_offset;
    if (*off < (*sh)->hdr.header_bytes || *off > io - SLR_FRAME_HEADER ||
        *len > io - *off - SLR_FRAME_HEADER)
        return sl__error(SL_ECORRUPT, "%s: record %llu: index entry (offset %llu, length %llu) "
                         "lies outside the data region (the file changed after it was opened?)",
                         (*sh)->path, (unsigned long long)i, (unsigned long long)*off,
                         (unsigned long long)*len);
    return SL_OK;
}

/* Read record i's frame from its shard (not mapped): a failure (a remote
 * shard's request that failed after its retries) names the record too. */
static int read_frame(const slr_shard *sh, uint64_t i, uint8_t *dst, uint64_t len, uint64_t off) {
    int rc = sl_io__read(sh->io, dst, (size_t)(SLR_FRAME_HEADER + len), off);
    if (rc < 0) {
        char cause[SL__ERRMSG_MAX];
        const char *m = sl_errmsg();
        size_t pl = strlen(sh->path);
        if (!strncmp(m, sh->path, pl) && m[pl] == ':' && m[pl + 1] == ' ')
            m += pl + 2; /* the shard is named once */
        snprintf(cause, sizeof cause, "%s", m);
        return sl__error(rc, "%s: record %llu: %s", sh->path, (unsigned long long)i, cause);
    }
    return SL_OK;
}

/* Record i's frame: in the mapping, or read into rec->frame (pread mode, or
 * `copy` and a shard of large records: COPY_MIN_RECORD). */
static int frame_of(const sl_reader *r, uint64_t i, sl_record *rec, bool copy,
                    const slr_shard **sh, const uint8_t **f, uint64_t *len, uint64_t *sum) {
    uint64_t off = 0;
    SL_TRY(locate(r, i, sh, &off, len, sum));
    if ((*sh)->map && !(copy && (*sh)->copy_reads)) {
        *f = (*sh)->map + off;
        return SL_OK;
    }
    SL_TRY(grow_buf(&rec->frame, &rec->frame_cap, (size_t)(SLR_FRAME_HEADER + *len),
                    "reading a record"));
    SL_TRY(read_frame(*sh, i, rec->frame, *len, off));
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
    return frame_decode(r, sh, i, f, len, sum, verify, rec, sh->mapbuf);
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

int sl_record__copy_size(const sl_reader *r, uint64_t i, size_t *size) {
    *size = 0;
    if (!r || i >= r->count)
        return 0;
    const slr_shard *sh = sl_record__shard_of(r, i);
    if (!sh->copy_reads || !sh->map)
        return 0;
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
    const slr_shard *sh = NULL;
    uint64_t off = 0, len = 0, sum = 0;
    SL_TRY(locate(r, i, &sh, &off, &len, &sum));
    if (len > cap || cap - len < SLR_FRAME_HEADER)
        return sl__error(SL_EINVAL, "%s: record %llu: %llu bytes do not fit a buffer of %zu",
                         sh->path, (unsigned long long)i, (unsigned long long)len, cap);
    SL_TRY(read_frame(sh, i, dst, len, off));
    return frame_decode(r, sh, i, dst, len, sum, verify, rec, owner);
}

/* A shuffled read lands on a cold index entry and a cold frame: two cache
 * misses that were a quarter of the time of a small-record pipeline (28x28
 * images) before the reading threads started asking for both ahead. */
void sl_record__prefetch(const sl_reader *r, uint64_t i, int far) {
    const slr_shard *sh = sl_record__shard_of(r, i);
    const uint8_t *e = sh->entries + (i - sh->first) * SLR_INDEX_ENTRY;
    if (far == 2) {
        if (!sh->map) { /* read by ranges (a remote shard): fetch it ahead */
            uint64_t off = sl__ld64(e), len = sl__ld64(e + 8);
            if (off <= sh->size - SLR_FRAME_HEADER && len <= sh->size - SLR_FRAME_HEADER - off)
                sl_io__will_need(sh->io, off, (size_t)(SLR_FRAME_HEADER + len));
        }
        return;
    }
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
    for (uint64_t b = 0; b < 1024 && b < SLR_FRAME_HEADER + len; b += 64)
        __builtin_prefetch(sh->map + off + b);
}

bool sl_record__reads_by_ranges(const sl_reader *r) {
    for (int k = 0; k < r->nshards; k++)
        if (!r->shards[k].map && r->shards[k].size && sl_io__is_url(r->shards[k].path))
            return true;
    return false;
}

int sl_reader_read(const sl_reader *r, uint64_t i, sl_record *rec) {
    return sl_record__read(r, i, rec, r ? !(r->flags & SL_READ_NO_VERIFY) : true);
}
