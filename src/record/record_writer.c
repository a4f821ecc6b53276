/*
 * record_writer.c — writes a .slr dataset (one file, or shards + manifest).
 *
 * Crash-safety invariants (FORMAT.md, "Crash safety"):
 *  1. Nothing appears at `path` before sl_writer_close() has written, synced
 *     and renamed every shard; a file whose footer validates is complete.
 *  2. While writing, everything lives in the directory "<path>.partial/": the
 *     shard being written is "shard-NNNNN.slr.partial" (header + framed
 *     records, no index yet), earlier shards are finished "shard-NNNNN.slr".
 *  3. The header is written before the first record, so a .partial shard is
 *     self-describing and sl_recover() can rebuild its complete records.
 *  4. Write order per shard: records -> fsync -> index + footer -> fsync ->
 *     rename .partial -> .slr. Then, on close: one shard is renamed to `path`,
 *     several get a manifest and the directory is renamed to `path`; the parent
 *     directory is synced last.
 *  5. Resuming (sl_writer__resume) rebuilds, from "<path>.partial/" alone, the
 *     state an uninterrupted writer had after its last complete record: the
 *     sealed shards before the last one are taken as they are (their footers
 *     and indexes checked), the last shard is made the one being written again
 *     (a .partial cut after its last whole, checksum-valid record; a sealed one
 *     unsealed: its index and footer cut off), so that appending the records
 *     that follow writes byte for byte what the uninterrupted writer would
 *     have: a record that did not fit rolled the shard over, and rolls it over
 *     again. A writer's caller keeps notes there too (SLR_PLAN_NAME,
 *     SLR_SKIPS_NAME): removed before the dataset is published.
 */
#include "record/record_format.h"
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zstd.h>

#define OBUF_SIZE ((size_t)1 << 20)

typedef struct done_shard {
    uint64_t first, count, bytes, footer_checksum;
} done_shard;

struct sl_writer {
    char *path;
    char *tmpdir;               /* "<path>.partial" */
    char *shard_tmp;            /* current shard's temporary file path */
    sl_schema schema;
    sl_writer_options opts;
    slr_meta meta;
    int nscalar;
    int scalar_cols[SL_MAX_COLUMNS];

    /* current shard */
    int fd;
    uint32_t shard_no;
    uint64_t shard_first;
    uint64_t shard_count;
    uint64_t shard_size;        /* bytes written or buffered so far */
    bool header_written;
    uint64_t *ent;              /* 3 per record: offset, length, checksum */
    uint64_t *scal[SL_MAX_COLUMNS]; /* per scalar slot: values (bit patterns) */
    uint64_t ent_cap;

    uint8_t *obuf;
    size_t olen;
    uint8_t *scratch;
    size_t scratch_cap;
    ZSTD_CCtx *cctx;

    uint64_t count;
    done_shard *done;
    uint32_t ndone;
    size_t done_cap;
    bool closed;                /* published successfully */
    bool failed;                /* an I/O error left the current shard unusable */
    bool kept;                  /* sl_writer__suspend: free leaves the temporaries */
};

static int shard_name(char *buf, size_t cap, uint32_t no, bool partial) {
    return snprintf(buf, cap, "shard-%05u.slr%s", no, partial ? ".partial" : "");
}

const char *sl_writer__partial_path(const sl_writer *w) { return w->tmpdir; }

static void notes_remove(const sl_writer *w);

static int open_shard(sl_writer *w) {
    char name[64];
    shard_name(name, sizeof name, w->shard_no, true);
    sl__free(w->shard_tmp);
    w->shard_tmp = sl_record__join(w->tmpdir, name);
    if (!w->shard_tmp)
        return sl__oom("naming a shard");
    w->fd = open(w->shard_tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0)
        return sl__error(SL_EIO, "%s: cannot create: %s", w->shard_tmp, strerror(errno));
    w->shard_first = w->count;
    w->shard_count = 0;
    w->shard_size = 0;
    w->header_written = false;
    return SL_OK;
}

int sl_writer_open(sl_writer **out, const char *path, const sl_schema *schema,
                   const sl_writer_options *opts) {
    return sl_writer__open_ex(out, path, schema, opts, ".partial");
}

/* A writer for `path` with nothing on disk yet: options checked and
 * defaulted, buffers made, tmpdir named "<path>" + tmp_suffix. */
static int writer_new(sl_writer **out, const char *path, const sl_schema *schema,
                      const sl_writer_options *opts, const char *tmp_suffix) {
    *out = NULL;
    if (!path || !*path || !schema)
        return sl__error(SL_EINVAL, "sl_writer_open: NULL path or schema");
    if (schema->ncols < 1)
        return sl__error(SL_EINVAL, "%s: the schema has no columns", path);
    if (opts && opts->version != SL_WRITER_OPTIONS_VERSION)
        return sl__error(SL_EINVAL, "%s: writer options version %u (this library knows %u)", path,
                         opts->version, SL_WRITER_OPTIONS_VERSION);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return sl__error(SL_EINVAL, "%s: is a directory (remove it or choose another path)", path);

    sl_writer *w = sl__calloc(1, sizeof *w);
    if (!w)
        return sl__oom("creating a writer");
    w->fd = -1;
    w->schema = *schema;
    sl_writer_options def = SL_WRITER_OPTIONS_INIT;
    w->opts = opts ? *opts : def;
    if (w->opts.shard_bytes == 0)
        w->opts.shard_bytes = SLR_DEFAULT_SHARD_BYTES;
    if (w->opts.zstd_level == 0)
        w->opts.zstd_level = SLR_DEFAULT_ZSTD_LEVEL;
    for (int c = 0; c < schema->ncols; c++)
        if (slr_is_scalar(schema->col[c].type))
            w->scalar_cols[w->nscalar++] = c;
    w->path = sl__strdup(path);
    size_t n = strlen(path), sl = strlen(tmp_suffix);
    w->tmpdir = sl__malloc(n + sl + 1);
    w->obuf = sl__malloc(OBUF_SIZE);
    if (!w->path || !w->tmpdir || !w->obuf) {
        sl__free(w->path);
        sl__free(w->tmpdir);
        sl__free(w->obuf);
        sl__free(w);
        return sl__oom("creating a writer");
    }
    memcpy(w->tmpdir, path, n);
    memcpy(w->tmpdir + n, tmp_suffix, sl + 1);
    *out = w;
    return SL_OK;
}

int sl_writer__open_ex(sl_writer **out, const char *path, const sl_schema *schema,
                       const sl_writer_options *opts, const char *tmp_suffix) {
    int rc = SL_OK;
    *out = NULL;
    sl_writer *w;
    SL_TRY(writer_new(&w, path, schema, opts, tmp_suffix));
    /* An empty leftover (a crash after the final rename, before its rmdir)
     * holds nothing to salvage: rmdir succeeds only then. */
    if (mkdir(w->tmpdir, 0755) != 0 && !(errno == EEXIST && rmdir(w->tmpdir) == 0 &&
                                         mkdir(w->tmpdir, 0755) == 0)) {
        if (errno == EEXIST || errno == ENOTEMPTY)
            SL_FAIL(SL_EIO, "%s: already exists (an interrupted write? salvage it with sl_recover "
                    "or remove it)", w->tmpdir);
        SL_FAIL(SL_EIO, "%s: cannot create: %s", w->tmpdir, strerror(errno));
    }
    rc = open_shard(w);
    if (rc < 0) {
        rmdir(w->tmpdir);
        goto cleanup;
    }
    *out = w;
    return SL_OK;
cleanup:
    sl__free(w->path);
    sl__free(w->tmpdir);
    sl__free(w->shard_tmp);
    sl__free(w->obuf);
    sl__free(w);
    return rc;
}

int sl_writer_set_meta(sl_writer *w, const char *key, const char *value) {
    if (!w || !key || !value)
        return sl__error(SL_EINVAL, "sl_writer_set_meta: NULL argument");
    size_t kl = strlen(key), vl = strlen(value);
    if (kl < 1 || kl > SLR_META_KEY_MAX)
        return sl__error(SL_EINVAL, "%s: metadata key must be 1-%u bytes", w->path, SLR_META_KEY_MAX);
    if (vl > SLR_META_VALUE_MAX)
        return sl__error(SL_EINVAL, "%s: metadata \"%s\": value is %zu bytes (max %u)", w->path,
                         key, vl, SLR_META_VALUE_MAX);
    if (w->closed)
        return sl__error(SL_EINVAL, "%s: writer is closed", w->path);
    int rc = sl_record__meta_set(&w->meta, key, value);
    if (rc == SL_OK && sl_record__meta_size(&w->meta) > SLR_META_BLOCK_MAX)
        return sl__error(SL_ELIMIT, "%s: metadata exceeds %u bytes in all", w->path,
                         SLR_META_BLOCK_MAX);
    return rc;
}

uint64_t sl_writer_count(const sl_writer *w) { return w ? w->count : 0; }

int sl_writer__flush(sl_writer *w) {
    if (w->olen) {
        SL_TRY(sl_record__write_all(w->fd, w->obuf, w->olen, w->shard_tmp));
        w->olen = 0;
    }
    return SL_OK;
}

static int emit(sl_writer *w, const void *p, size_t len) {
    if (len > OBUF_SIZE - w->olen) {
        SL_TRY(sl_writer__flush(w));
        if (len >= OBUF_SIZE / 2)
            return sl_record__write_all(w->fd, p, len, w->shard_tmp);
    }
    memcpy(w->obuf + w->olen, p, len);
    w->olen += len;
    return SL_OK;
}

static int write_header(sl_writer *w) {
    uint64_t meta_bytes = sl_record__meta_size(&w->meta);
    uint64_t size = SLR_HEADER_FIXED + (uint64_t)w->schema.ncols * SLR_COLDESC_SIZE + meta_bytes + 8;
    /* Its own buffer: the scratch may hold the frame about to follow. */
    uint8_t *h = sl__malloc((size_t)size);
    if (!h)
        return sl__oom("building a header");
    memset(h, 0, SLR_HEADER_FIXED);
    memcpy(h, SLR_MAGIC, SLR_MAGIC_LEN);
    sl__st32(h + 8, SLR_VERSION);
    sl__st32(h + 12, (uint32_t)size);
    uint64_t req = SLR_FEAT_SUM_XOR;
    for (int c = 0; c < w->schema.ncols; c++) {
        if (w->schema.col[c].flags & SL_COLF_ZSTD)
            req |= SLR_FEAT_ZSTD;
        if (w->schema.col[c].type == SL_COL_ARRAY && w->schema.col[c].ndim == 0)
            req |= SLR_FEAT_SCALAR_ARRAY;
    }
    sl__st64(h + 16, req);
    sl__st64(h + 24, 0);
    sl__st32(h + 32, (uint32_t)w->schema.ncols);
    sl__st32(h + 36, w->shard_no);
    sl__st64(h + 40, w->shard_first);
    sl__st64(h + 48, w->opts.shard_bytes);
    sl__st32(h + 56, (uint32_t)meta_bytes);
    sl__st32(h + 60, 0);
    sl_record__schema_encode(&w->schema, h + SLR_HEADER_FIXED);
    sl_record__meta_encode(&w->meta, h + SLR_HEADER_FIXED + (size_t)w->schema.ncols * SLR_COLDESC_SIZE);
    sl__st64(h + size - 8, sl_record__hash(h, size - 8, 0));
    int rc = emit(w, h, size);
    sl__free(h);
    SL_TRY(rc);
    w->shard_size = size;
    w->header_written = true;
    return SL_OK;
}

/* Finish the current shard: index + footer, syncs, rename to shard-NNNNN.slr. */
static int finish_shard(sl_writer *w) {
    int rc = SL_OK;
    uint8_t *idx = NULL;
    if (!w->header_written)
        SL_CHECK(write_header(w));
    SL_CHECK(sl_writer__flush(w));
    if (w->opts.fsync && fsync(w->fd) != 0)
        SL_FAIL(SL_EIO, "%s: fsync failed: %s", w->shard_tmp, strerror(errno));

    uint64_t n = w->shard_count;
    uint64_t meta_bytes = sl_record__meta_size(&w->meta);
    uint64_t idx_bytes = n * SLR_INDEX_ENTRY + n * 8 * (uint64_t)w->nscalar + meta_bytes;
    uint64_t index_offset = w->shard_size;
    idx = sl__malloc((size_t)idx_bytes + SLR_FOOTER_SIZE);
    if (!idx) {
        rc = sl__oom("building a shard index");
        goto cleanup;
    }
    uint8_t *p = idx;
    for (uint64_t i = 0; i < n; i++, p += SLR_INDEX_ENTRY) {
        sl__st64(p, w->ent[3 * i]);
        sl__st64(p + 8, w->ent[3 * i + 1]);
        sl__st64(p + 16, w->ent[3 * i + 2]);
    }
    for (int s = 0; s < w->nscalar; s++)
        for (uint64_t i = 0; i < n; i++, p += 8)
            sl__st64(p, w->scal[s][i]);
    sl_record__meta_encode(&w->meta, p);
    p += meta_bytes;
    uint64_t file_size = index_offset + idx_bytes + SLR_FOOTER_SIZE;
    sl__st64(p, index_offset);
    sl__st64(p + 8, idx_bytes);
    sl__st64(p + 16, n);
    sl__st64(p + 24, w->shard_first);
    sl__st64(p + 32, file_size);
    sl__st64(p + 40, sl_record__hash(idx, (size_t)idx_bytes, 0));
    uint64_t fsum = sl_record__hash(p, 48, 0);
    sl__st64(p + 48, fsum);
    memcpy(p + 56, SLR_MAGIC, SLR_MAGIC_LEN);
    SL_CHECK(sl_record__write_all(w->fd, idx, (size_t)(idx_bytes + SLR_FOOTER_SIZE), w->shard_tmp));
    if (w->opts.fsync && fsync(w->fd) != 0)
        SL_FAIL(SL_EIO, "%s: fsync failed: %s", w->shard_tmp, strerror(errno));
    if (close(w->fd) != 0) {
        w->fd = -1;
        SL_FAIL(SL_EIO, "%s: close failed: %s", w->shard_tmp, strerror(errno));
    }
    w->fd = -1;

    SL_CHECK(sl__grow((void **)&w->done, &w->done_cap, w->ndone + 1, sizeof *w->done, 8,
                      "recording a finished shard"));
    char name[64];
    shard_name(name, sizeof name, w->shard_no, false);
    char *final = sl_record__join(w->tmpdir, name);
    if (!final) {
        rc = sl__oom("naming a shard");
        goto cleanup;
    }
    if (rename(w->shard_tmp, final) != 0) {
        rc = sl__error(SL_EIO, "%s: rename to %s failed: %s", w->shard_tmp, final, strerror(errno));
        sl__free(final);
        goto cleanup;
    }
    sl__free(final);
    w->done[w->ndone++] = (done_shard){w->shard_first, n, file_size, fsum};
cleanup:
    sl__free(idx);
    if (rc < 0)
        w->failed = true;
    return rc;
}

static int grow_index(sl_writer *w) {
    if (w->shard_count < w->ent_cap)
        return SL_OK;
    uint64_t cap = w->ent_cap ? w->ent_cap * 2 : 1024;
    uint64_t *e = sl__realloc(w->ent, (size_t)cap * 3 * sizeof *e);
    if (!e)
        return sl__oom("growing the index");
    w->ent = e;
    for (int s = 0; s < w->nscalar; s++) {
        uint64_t *v = sl__realloc(w->scal[s], (size_t)cap * sizeof *v);
        if (!v)
            return sl__oom("growing the index");
        w->scal[s] = v;
    }
    w->ent_cap = cap;
    return SL_OK;
}

static int check_value(const sl_writer *w, const slr_column *c, const sl_tensor *t, uint64_t rec,
                       int col, size_t *raw_len) {
    const char *why = NULL;
    char buf[96];
    switch (c->type) {
    case SL_COL_INT64:
    case SL_COL_FLOAT64: {
        sl_dtype want = c->type == SL_COL_INT64 ? SL_I64 : SL_F64;
        if (t->dtype != want || sl_tensor_numel(t) != 1) {
            snprintf(buf, sizeof buf, "want a %s scalar, got %s with %lld elements",
                     sl_dtype_name(want), sl_dtype_name(t->dtype), (long long)sl_tensor_numel(t));
            why = buf;
        }
        *raw_len = 8;
        break;
    }
    case SL_COL_STRING:
    case SL_COL_BYTES:
        if ((t->dtype != SL_U8 && t->dtype != SL_I8) || t->ndim != 1 || t->shape[0] < 0)
            why = "want a 1-D uint8 tensor";
        *raw_len = t->ndim == 1 && t->shape[0] > 0 ? (size_t)t->shape[0] : 0;
        break;
    case SL_COL_ARRAY:
        if (t->dtype != c->dtype || t->ndim != c->ndim) {
            snprintf(buf, sizeof buf, "want %s with %d dims, got %s with %d", sl_dtype_name(c->dtype),
                     c->ndim, sl_dtype_name(t->dtype), (int)t->ndim);
            why = buf;
            break;
        }
        size_t bytes = sl_dtype_size(c->dtype);
        for (int d = 0; d < c->ndim && !why; d++) {
            if (t->shape[d] < 0 || (c->shape[d] != -1 && t->shape[d] != c->shape[d])) {
                snprintf(buf, sizeof buf, "dim %d is %lld, schema says %lld", d,
                         (long long)t->shape[d], (long long)c->shape[d]);
                why = buf;
            } else if (!sl__mul_ok(bytes, (size_t)t->shape[d], &bytes)) {
                why = "array too large";
            }
        }
        *raw_len = bytes;
        break;
    }
    if (!why && *raw_len && !t->data)
        why = "data is NULL";
    if (!why && c->type != SL_COL_INT64 && c->type != SL_COL_FLOAT64 && t->nbytes < *raw_len)
        why = "tensor nbytes is smaller than its shape";
    if (why)
        return sl__error(SL_EINVAL, "%s: record %llu: column \"%s\" (%d): %s", w->path,
                         (unsigned long long)rec, c->name, col, why);
    return SL_OK;
}

int sl_writer_append(sl_writer *w, const sl_tensor *cols, int ncols) {
    if (!w || (!cols && ncols))
        return sl__error(SL_EINVAL, "sl_writer_append: NULL argument");
    if (w->closed || w->failed)
        return sl__error(SL_EINVAL, "%s: writer is %s", w->path, w->closed ? "closed" : "failed");
    const sl_schema *s = &w->schema;
    if (ncols != s->ncols)
        return sl__error(SL_EINVAL, "%s: record %llu: %d columns given, schema has %d", w->path,
                         (unsigned long long)w->count, ncols, s->ncols);
    size_t raw[SL_MAX_COLUMNS];
    /* Worst-case payload size: directory + each column's prefix, data or zstd bound. */
    size_t need = SLR_FRAME_HEADER + (size_t)s->ncols * SLR_COLDIR_ENTRY;
    for (int c = 0; c < s->ncols; c++) {
        const slr_column *col = &s->col[c];
        SL_TRY(check_value(w, col, &cols[c], w->count, c, &raw[c]));
        size_t n = (col->flags & SL_COLF_ZSTD) ? 8 + ZSTD_compressBound(raw[c]) : raw[c];
        if (sl_record__col_varshape(col))
            n += 8 * (size_t)col->ndim;
        if (!sl__add_ok(need, n + 8, &need))
            return sl__error(SL_ELIMIT, "%s: record %llu: too large", w->path,
                             (unsigned long long)w->count);
    }
    SL_TRY(sl__grow((void **)&w->scratch, &w->scratch_cap, need + 8, 1, 4096, "building a record"));
    if (!w->cctx) {
        for (int c = 0; c < s->ncols; c++) {
            if ((s->col[c].flags & SL_COLF_ZSTD) && !(w->cctx = sl_record__zstd_cctx()))
                return sl__oom("creating a zstd context");
            if (w->cctx)
                break;
        }
    }

    uint8_t *f = w->scratch, *pl = f + SLR_FRAME_HEADER;
    uint64_t pos = (uint64_t)s->ncols * SLR_COLDIR_ENTRY;
    for (int c = 0; c < s->ncols; c++) {
        const slr_column *col = &s->col[c];
        const sl_tensor *t = &cols[c];
        uint64_t start = pos;
        if (col->type == SL_COL_INT64 || col->type == SL_COL_FLOAT64) {
            uint64_t v;
            memcpy(&v, t->data, 8);
            sl__st64(pl + pos, v);
            pos += 8;
        } else {
            if (sl_record__col_varshape(col))
                for (int d = 0; d < col->ndim; d++, pos += 8)
                    sl__st64(pl + pos, (uint64_t)t->shape[d]);
            if (col->flags & SL_COLF_ZSTD) {
                sl__st64(pl + pos, raw[c]);
                pos += 8;
                size_t z = ZSTD_compressCCtx(w->cctx, pl + pos, ZSTD_compressBound(raw[c]),
                                             t->data, raw[c], w->opts.zstd_level);
                if (ZSTD_isError(z)) {
                    char what[SL__ERRMSG_MAX];
                    snprintf(what, sizeof what, "%s: record %llu: column \"%s\"", w->path,
                             (unsigned long long)w->count, col->name);
                    return sl_record__zstd_error(z, SL_EINVAL, what);
                }
                pos += z;
            } else {
                if (raw[c])
                    memcpy(pl + pos, t->data, raw[c]);
                pos += raw[c];
            }
        }
        sl__st64(pl + (size_t)c * SLR_COLDIR_ENTRY, start);
        sl__st64(pl + (size_t)c * SLR_COLDIR_ENTRY + 8, pos - start);
        uint64_t next = slr_align8(pos);
        memset(pl + pos, 0, (size_t)(next - pos));
        pos = next;
    }
    /* pos is the payload length, already a multiple of 8 (each column is padded). */
    uint64_t len = pos;
    uint64_t sum = sl_record__payload_sum(pl, (size_t)len, w->count, SLR_FEAT_SUM_XOR);
    sl__st64(f, len);
    sl__st64(f + 8, sum);
    uint64_t frame = SLR_FRAME_HEADER + len;

    /* Roll over when this record would push the finished file (data, index,
     * metadata and footer) past shard_bytes; a shard always takes one record. */
    uint64_t projected = w->shard_size + frame +
                         (w->shard_count + 1) * (SLR_INDEX_ENTRY + 8u * (uint64_t)w->nscalar) +
                         sl_record__meta_size(&w->meta) + SLR_FOOTER_SIZE;
    if (w->shard_count > 0 && projected > w->opts.shard_bytes) {
        SL_TRY(finish_shard(w));
        w->shard_no++;
        int rc = open_shard(w);
        if (rc < 0) {
            w->failed = true;
            return rc;
        }
    }
    if (!w->header_written) {
        int rc = write_header(w);
        if (rc < 0) {
            w->failed = true;
            return rc;
        }
    }
    SL_TRY(grow_index(w));
    int rc = emit(w, f, (size_t)frame);
    if (rc < 0) {
        w->failed = true;
        return rc;
    }
    uint64_t i = w->shard_count;
    w->ent[3 * i] = w->shard_size;
    w->ent[3 * i + 1] = len;
    w->ent[3 * i + 2] = sum;
    for (int k = 0; k < w->nscalar; k++)
        w->scal[k][i] = sl__ld64(pl + sl__ld64(pl + (size_t)w->scalar_cols[k] * SLR_COLDIR_ENTRY));
    w->shard_size += frame;
    w->shard_count++;
    w->count++;
    return SL_OK;
}

static int write_manifest(sl_writer *w) {
    int rc = SL_OK;
    char *text = NULL, *mpath = NULL;
    int fd = -1;
    sl__json_init();
    cJSON *root = cJSON_CreateObject();
    if (!root)
        goto oom;
    if (!cJSON_AddStringToObject(root, "format", SLR_MANIFEST_FORMAT) ||
        !cJSON_AddNumberToObject(root, "version", SLR_MANIFEST_VERSION) ||
        !cJSON_AddNumberToObject(root, "records", (double)w->count))
        goto oom;
    cJSON *shards = cJSON_AddArrayToObject(root, "shards");
    if (!shards)
        goto oom;
    for (uint32_t i = 0; i < w->ndone; i++) {
        char name[64], sum[17];
        shard_name(name, sizeof name, i, false);
        snprintf(sum, sizeof sum, "%016llx", (unsigned long long)w->done[i].footer_checksum);
        cJSON *o = cJSON_CreateObject();
        if (!o)
            goto oom;
        cJSON_AddItemToArray(shards, o);
        if (!cJSON_AddStringToObject(o, "file", name) ||
            !cJSON_AddNumberToObject(o, "first", (double)w->done[i].first) ||
            !cJSON_AddNumberToObject(o, "records", (double)w->done[i].count) ||
            !cJSON_AddNumberToObject(o, "bytes", (double)w->done[i].bytes) ||
            !cJSON_AddStringToObject(o, "footer_checksum", sum))
            goto oom;
    }
    cJSON *meta = cJSON_AddObjectToObject(root, "meta");
    if (!meta)
        goto oom;
    for (int i = 0; i < w->meta.n; i++)
        if (!cJSON_AddStringToObject(meta, w->meta.keys[i], w->meta.vals[i]))
            goto oom;
    text = cJSON_Print(root);
    mpath = sl_record__join(w->tmpdir, SLR_MANIFEST_NAME);
    if (!text || !mpath)
        goto oom;
    fd = open(mpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        SL_FAIL(SL_EIO, "%s: cannot create: %s", mpath, strerror(errno));
    SL_CHECK(sl_record__write_all(fd, text, strlen(text), mpath));
    SL_CHECK(sl_record__write_all(fd, "\n", 1, mpath));
    if (w->opts.fsync && fsync(fd) != 0)
        SL_FAIL(SL_EIO, "%s: fsync failed: %s", mpath, strerror(errno));
    goto cleanup;
oom:
    rc = sl__oom("writing the manifest");
cleanup:
    if (fd >= 0)
        close(fd);
    cJSON_Delete(root);
    if (text)
        cJSON_free(text);
    sl__free(mpath);
    return rc;
}

int sl_writer_close(sl_writer *w) {
    int rc = SL_OK;
    char *parent = NULL, *src = NULL;
    if (!w)
        return sl__error(SL_EINVAL, "sl_writer_close: NULL writer");
    if (w->closed)
        return SL_OK;
    if (w->failed)
        return sl__error(SL_EIO, "%s: an earlier write failed; the dataset is not published", w->path);
    SL_CHECK(finish_shard(w));
    parent = sl_record__dirname(w->path);
    if (!parent) {
        rc = sl__oom("closing a writer");
        goto cleanup;
    }
    if (w->ndone == 1) {
        char name[64];
        shard_name(name, sizeof name, 0, false);
        src = sl_record__join(w->tmpdir, name);
        if (!src) {
            rc = sl__oom("closing a writer");
            goto cleanup;
        }
        notes_remove(w); /* the caller's notes are not part of the dataset */
        if (rename(src, w->path) != 0)
            SL_FAIL(SL_EIO, "%s: cannot rename %s into place: %s", w->path, src, strerror(errno));
        if (rmdir(w->tmpdir) != 0)
            SL_LOG_WARN("%s: cannot remove: %s", w->tmpdir, strerror(errno));
    } else {
        SL_CHECK(write_manifest(w));
        if (w->opts.fsync)
            SL_CHECK(sl_record__fsync_dir(w->tmpdir));
        struct stat st;
        /* rename() cannot replace a file with a directory; an old single-file
         * dataset at `path` is removed first (the one non-atomic step). */
        if (stat(w->path, &st) == 0 && !S_ISDIR(st.st_mode) && unlink(w->path) != 0)
            SL_FAIL(SL_EIO, "%s: cannot replace: %s", w->path, strerror(errno));
        notes_remove(w); /* the caller's notes are not part of the dataset */
        if (rename(w->tmpdir, w->path) != 0)
            SL_FAIL(SL_EIO, "%s: cannot rename %s into place: %s", w->path, w->tmpdir,
                    strerror(errno));
    }
    w->closed = true;
    if (w->opts.fsync)
        SL_CHECK(sl_record__fsync_dir(parent));
cleanup:
    if (rc < 0 && !w->closed)
        w->failed = true;
    sl__free(parent);
    sl__free(src);
    return rc;
}

static void remove_temporaries(sl_writer *w) {
    char name[64];
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    for (uint32_t i = 0; i <= w->shard_no; i++) {
        for (int partial = 0; partial < 2; partial++) {
            shard_name(name, sizeof name, i, partial);
            char *p = sl_record__join(w->tmpdir, name);
            if (p)
                unlink(p);
            sl__free(p);
        }
    }
    char *m = sl_record__join(w->tmpdir, SLR_MANIFEST_NAME);
    if (m)
        unlink(m);
    sl__free(m);
    notes_remove(w);
    rmdir(w->tmpdir);
}

void sl_writer_free(sl_writer *w) {
    if (!w)
        return;
    if (!w->closed && !w->kept)
        remove_temporaries(w);
    if (w->fd >= 0)
        close(w->fd);
    sl_record__meta_clear(&w->meta);
    for (int s = 0; s < w->nscalar; s++)
        sl__free(w->scal[s]);
    sl__free(w->ent);
    sl__free(w->done);
    sl__free(w->obuf);
    sl__free(w->scratch);
    ZSTD_freeCCtx(w->cctx);
    sl__free(w->shard_tmp);
    sl__free(w->tmpdir);
    sl__free(w->path);
    sl__free(w);
}

/* ---- notes, suspending and resuming (invariant 5) ---------------------------------- */

static char *note_path(const sl_writer *w, const char *name) {
    return sl_record__join(w->tmpdir, name);
}

int sl_writer__note_set(sl_writer *w, const char *name, const char *text) {
    char *p = note_path(w, name), *tmp = p ? sl__malloc(strlen(p) + 5) : NULL;
    int rc = SL_OK, fd = -1;
    if (!p || !tmp) {
        rc = sl__oom("writing a note");
        goto cleanup;
    }
    memcpy(tmp, p, strlen(p));
    memcpy(tmp + strlen(p), ".new", 5);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        SL_FAIL(SL_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    SL_CHECK(sl_record__write_all(fd, text, strlen(text), tmp));
    if (w->opts.fsync && fsync(fd) != 0)
        SL_FAIL(SL_EIO, "%s: fsync failed: %s", tmp, strerror(errno));
    close(fd);
    fd = -1;
    if (rename(tmp, p) != 0)
        SL_FAIL(SL_EIO, "%s: rename to %s failed: %s", tmp, p, strerror(errno));
cleanup:
    if (fd >= 0)
        close(fd);
    if (rc < 0 && tmp)
        unlink(tmp);
    sl__free(tmp);
    sl__free(p);
    return rc;
}

int sl_writer__note_append(sl_writer *w, const char *name, const char *line) {
    char *p = note_path(w, name);
    if (!p)
        return sl__oom("writing a note");
    int rc = SL_OK;
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        rc = sl__error(SL_EIO, "%s: cannot open: %s", p, strerror(errno));
    else
        rc = sl_record__write_all(fd, line, strlen(line), p);
    if (fd >= 0)
        close(fd);
    sl__free(p);
    return rc;
}

static void notes_remove(const sl_writer *w) {
    static const char *const names[] = {SLR_PLAN_NAME, SLR_SKIPS_NAME};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char *p = note_path(w, names[i]);
        if (p)
            unlink(p);
        sl__free(p);
    }
}

int sl_writer__suspend(sl_writer *w) {
    if (!w)
        return SL_OK;
    w->kept = true;
    if (w->closed || w->failed || w->fd < 0)
        return SL_OK;
    SL_TRY(sl_writer__flush(w));
    if (w->opts.fsync && fsync(w->fd) != 0)
        return sl__error(SL_EIO, "%s: fsync failed: %s", w->shard_tmp, strerror(errno));
    return SL_OK;
}

/* Shard i's name in the temporary directory (new string). */
static char *tmp_shard(const sl_writer *w, uint32_t i, bool partial) {
    char name[64];
    shard_name(name, sizeof name, i, partial);
    return sl_record__join(w->tmpdir, name);
}

static int exists(const sl_writer *w, uint32_t i, bool partial, bool *yes) {
    char *p = tmp_shard(w, i, partial);
    if (!p)
        return sl__oom("resuming a write");
    struct stat st;
    *yes = stat(p, &st) == 0;
    sl__free(p);
    return SL_OK;
}

/* A shard of this write's: the header's schema, number, first record and
 * shard size are the writer's; SL_EINVAL saying which differs. */
static int header_is_ours(const sl_writer *w, const char *path, const slr_header *hdr,
                          const sl_schema *sch, uint32_t i, uint64_t first) {
    if (!sl_record__schema_equal(sch, &w->schema))
        return sl__error(SL_EINVAL, "%s: its columns are not this write's: it holds another "
                         "dataset", path);
    if (hdr->shard_index != i || hdr->first_record != first)
        return sl__error(SL_EINVAL, "%s: says it is shard %u from record %llu, where shard %u "
                         "from record %llu was expected", path, hdr->shard_index,
                         (unsigned long long)hdr->first_record, i, (unsigned long long)first);
    if (hdr->shard_bytes != w->opts.shard_bytes)
        return sl__error(SL_EINVAL, "%s: written with shards of up to %llu bytes, not %llu: "
                         "continue it with the shard size it started with", path,
                         (unsigned long long)hdr->shard_bytes,
                         (unsigned long long)w->opts.shard_bytes);
    return SL_OK;
}

/* Room for record k of the current shard in the index tables. */
static int ent_room(sl_writer *w, uint64_t k) {
    w->shard_count = k;
    return grow_index(w);
}

/* Shard i at `path` mapped, its header read into *hdr and `hmeta`:
 * SL_OK; SL_END (message cleared) when the header is not whole (a shard
 * killed before its header was written); an error when it is whole but not
 * this write's (header_is_ours), or the file cannot be read. */
static int shard_head(sl_writer *w, const char *path, uint32_t i, sl_io **io, slr_header *hdr,
                      slr_meta *hmeta) {
    SL_TRY(sl_io__open(io, path, SL_IO_MAP));
    sl_schema sch;
    if (!sl_io__size(*io) || sl_record__read_header(*io, hdr, &sch, hmeta) != SL_OK) {
        sl_errclear();
        return SL_END;
    }
    return header_is_ours(w, path, hdr, &sch, i, w->count);
}

/* Sealed shard i (`path`): header, footer and index checked as this write's,
 * its place recorded in done[]; with `unseal`, its entries and scalar values
 * go into the writer's tables instead and *data_end is where its index
 * starts. `meta` (may be NULL) receives its header's metadata. */
static int take_sealed(sl_writer *w, const char *path, uint32_t i, bool unseal,
                       uint64_t *data_end, slr_meta *meta) {
    sl_io *io = NULL;
    slr_header hdr;
    slr_meta hmeta = {0};
    int rc = shard_head(w, path, i, &io, &hdr, &hmeta);
    if (rc == SL_END)
        rc = sl__error(SL_ECORRUPT, "%s: a finished shard whose header does not check out",
                       path);
    SL_CHECK(rc);
    const uint8_t *m = sl_io__map(io);
    uint64_t size = sl_io__size(io);
    if (size < hdr.header_bytes + SLR_FOOTER_SIZE)
        SL_FAIL(SL_ECORRUPT, "%s: a finished shard without its footer", path);
    const uint8_t *f = m + size - SLR_FOOTER_SIZE;
    uint64_t io_off = sl__ld64(f), ib = sl__ld64(f + 8), n = sl__ld64(f + 16);
    uint64_t per = SLR_INDEX_ENTRY + 8u * (uint64_t)w->nscalar;
    if (memcmp(f + 56, SLR_MAGIC, SLR_MAGIC_LEN) || sl_record__hash(f, 48, 0) != sl__ld64(f + 48) ||
        sl__ld64(f + 32) != size || sl__ld64(f + 24) != w->count || io_off < hdr.header_bytes ||
        io_off > size - SLR_FOOTER_SIZE || ib != size - SLR_FOOTER_SIZE - io_off ||
        n > ib / per || sl_record__hash(m + io_off, (size_t)ib, 0) != sl__ld64(f + 40))
        SL_FAIL(SL_ECORRUPT, "%s: a finished shard whose footer or index does not check out",
                path);
    if (unseal) {
        const uint8_t *ix = m + io_off;
        uint64_t end = hdr.header_bytes;
        for (uint64_t k = 0; k < n; k++) {
            SL_CHECK(ent_room(w, k));
            uint64_t off = sl__ld64(ix + k * SLR_INDEX_ENTRY), len = sl__ld64(ix + k * SLR_INDEX_ENTRY + 8);
            if (off != end || len > io_off - off || SLR_FRAME_HEADER > io_off - off - len)
                SL_FAIL(SL_ECORRUPT, "%s: record %llu: index entry out of place", path,
                        (unsigned long long)(w->count + k));
            w->ent[3 * k] = off;
            w->ent[3 * k + 1] = len;
            w->ent[3 * k + 2] = sl__ld64(ix + k * SLR_INDEX_ENTRY + 16);
            for (int s = 0; s < w->nscalar; s++)
                w->scal[s][k] = sl__ld64(ix + n * SLR_INDEX_ENTRY + ((uint64_t)s * n + k) * 8);
            end = off + SLR_FRAME_HEADER + len;
        }
        if (end != io_off)
            SL_FAIL(SL_ECORRUPT, "%s: its records end at %llu, its index starts at %llu", path,
                    (unsigned long long)end, (unsigned long long)io_off);
        w->shard_count = n;
        *data_end = io_off;
    } else {
        if (sl__grow((void **)&w->done, &w->done_cap, w->ndone + 1, sizeof *w->done, 8,
                     "resuming") < 0)
            SL_FAIL(SL_ENOMEM, "out of memory resuming %s", w->path);
        w->done[w->ndone++] = (done_shard){w->count, n, size, sl__ld64(f + 48)};
        w->count += n;
    }
    if (meta) {
        *meta = hmeta;
        memset(&hmeta, 0, sizeof hmeta);
    }
cleanup:
    sl_record__meta_clear(&hmeta);
    sl_io__close(io);
    return rc;
}

/* The unfinished shard i (`path`): its records from the header on, each
 * whole and checksum-valid, into the writer's tables, up to the first that
 * is not (torn, or damaged: nothing after it is trusted). *kept and
 * *data_end (where the next record goes) say how far; a shard whose header
 * did not survive keeps 0. `meta` as take_sealed's. */
static int take_partial(sl_writer *w, const char *path, uint32_t i, uint64_t *kept,
                        uint64_t *data_end, slr_meta *meta) {
    *kept = 0;
    sl_io *io = NULL;
    slr_header hdr;
    slr_meta hmeta = {0};
    sl_record *rec = NULL;
    int rc = shard_head(w, path, i, &io, &hdr, &hmeta);
    if (rc == SL_END) { /* killed before its header was whole: nothing in it */
        rc = SL_OK;
        goto cleanup;
    }
    SL_CHECK(rc);
    const uint8_t *m = sl_io__map(io);
    uint64_t size = sl_io__size(io);
    SL_CHECK(sl_record_create(&rec));
    uint64_t off = hdr.header_bytes, k = 0;
    while (size - off >= SLR_FRAME_HEADER) {
        uint64_t len = sl__ld64(m + off), sum = sl__ld64(m + off + 8);
        if (len % 8 || len > size - off - SLR_FRAME_HEADER)
            break;
        const uint8_t *pl = m + off + SLR_FRAME_HEADER;
        if (sl_record__payload_sum(pl, (size_t)len, w->count + k, hdr.required_features) != sum)
            break;
        rc = sl_record__decode_payload(&w->schema, pl, len, w->count + k, path, rec, NULL);
        if (rc == SL_ENOMEM)
            goto cleanup;
        if (rc < 0) {
            rc = SL_OK;
            sl_errclear();
            break;
        }
        SL_CHECK(ent_room(w, k));
        w->ent[3 * k] = off;
        w->ent[3 * k + 1] = len;
        w->ent[3 * k + 2] = sum;
        for (int s = 0; s < w->nscalar; s++) /* decoded above: in bounds */
            w->scal[s][k] = sl__ld64(pl + sl__ld64(pl + (size_t)w->scalar_cols[s] * SLR_COLDIR_ENTRY));
        k++;
        off += SLR_FRAME_HEADER + len;
    }
    *kept = k;
    *data_end = off;
    w->shard_count = k;
    if (meta) {
        *meta = hmeta;
        memset(&hmeta, 0, sizeof hmeta);
    }
cleanup:
    sl_record_free(rec);
    sl_record__meta_clear(&hmeta);
    sl_io__close(io);
    return rc;
}

/* Make shard `i` at `path` (its name while unfinished) the one being
 * written: cut after its last record (at `end`), appended to from there. */
static int reopen_current(sl_writer *w, char *path, uint32_t i, uint64_t first, uint64_t end) {
    sl__free(w->shard_tmp);
    w->shard_tmp = path;
    w->fd = open(path, O_WRONLY | O_CLOEXEC);
    if (w->fd < 0)
        return sl__error(SL_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (ftruncate(w->fd, (off_t)end) != 0 || lseek(w->fd, (off_t)end, SEEK_SET) != (off_t)end)
        return sl__error(SL_EIO, "%s: cannot cut it after its last record: %s", path,
                         strerror(errno));
    w->shard_no = i;
    w->shard_first = first;
    w->shard_size = end;
    w->header_written = true;
    w->count = first + w->shard_count;
    return SL_OK;
}

int sl_writer__resume(sl_writer **out, const char *path, const sl_schema *schema,
                      const sl_writer_options *opts) {
    *out = NULL;
    sl_writer *w;
    SL_TRY(writer_new(&w, path, schema, opts, ".partial"));
    int rc = SL_OK;
    char *p = NULL;
    slr_meta meta0 = {0};
    struct stat st;
    if (stat(w->tmpdir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = SL_END; /* nothing to resume */
        goto cleanup;
    }
    /* a manifest written by a close that did not publish: written again */
    p = sl_record__join(w->tmpdir, SLR_MANIFEST_NAME);
    if (!p)
        SL_FAIL(SL_ENOMEM, "out of memory resuming %s", path);
    unlink(p);
    sl__free(p);
    p = NULL;
    uint32_t nsealed = 0;
    bool yes = true, partial;
    while (yes) {
        SL_CHECK(exists(w, nsealed, false, &yes));
        nsealed += yes;
    }
    SL_CHECK(exists(w, nsealed, true, &partial));
    for (uint32_t i = 0; i < nsealed; i++) {
        SL_CHECK(exists(w, i, true, &yes));
        if (yes)
            SL_FAIL(SL_EINVAL, "%s: shard %u is there both finished and unfinished: not what a "
                    "writer leaves", w->tmpdir, i);
        if (!(p = tmp_shard(w, i, false)))
            SL_FAIL(SL_ENOMEM, "out of memory resuming %s", path);
        SL_CHECK(take_sealed(w, p, i, false, NULL, i == 0 ? &meta0 : NULL));
        sl__free(p);
        p = NULL;
    }
    uint64_t kept = 0, end = 0;
    if (partial) {
        if (!(p = tmp_shard(w, nsealed, true)))
            SL_FAIL(SL_ENOMEM, "out of memory resuming %s", path);
        slr_meta pm = {0};
        SL_CHECK(take_partial(w, p, nsealed, &kept, &end, nsealed == 0 ? &pm : NULL));
        if (nsealed == 0) {
            sl_record__meta_clear(&meta0);
            meta0 = pm;
        }
        if (kept) {
            SL_CHECK(reopen_current(w, p, nsealed, w->count, end));
            p = NULL;
        } else {
            unlink(p); /* no whole record: as if it had not been started */
            sl__free(p);
            p = NULL;
        }
    }
    if (!kept && nsealed) {
        /* the last finished shard is written on: unsealed (index and
         * footer cut off, named unfinished again) */
        uint32_t i = nsealed - 1;
        done_shard last = w->done[--w->ndone];
        w->count = last.first;
        char *sealed = tmp_shard(w, i, false);
        if (!sealed || !(p = tmp_shard(w, i, true))) {
            sl__free(sealed);
            SL_FAIL(SL_ENOMEM, "out of memory resuming %s", path);
        }
        rc = take_sealed(w, sealed, i, true, &end, NULL);
        if (rc == SL_OK && rename(sealed, p) != 0)
            rc = sl__error(SL_EIO, "%s: rename to %s failed: %s", sealed, p, strerror(errno));
        sl__free(sealed);
        SL_CHECK(rc);
        SL_CHECK(reopen_current(w, p, i, last.first, end));
        p = NULL;
    } else if (!kept) {
        SL_CHECK(open_shard(w)); /* nothing written yet: shard 0 from its start */
    }
    sl_record__meta_clear(&w->meta);
    w->meta = meta0;
    memset(&meta0, 0, sizeof meta0);
    *out = w;
    return SL_OK;
cleanup:
    sl__free(p);
    sl_record__meta_clear(&meta0);
    w->kept = true; /* what is there stays: it is not this writer's to delete */
    sl_writer_free(w);
    return rc;
}
