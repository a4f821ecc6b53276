/*
 * source_slr.c — sluice's own format behind the source interface: a thin
 * layer over sl_reader (src/record/), which does the work.
 *
 * Views of mapped, uncompressed columns are passed on by reference (the
 * mapping's buffer is retained); for a borrowing cursor (the executor) they
 * are plain views, with no reference count touched, where the reader keeps
 * the record's shard open for its life (a single file, a directory of at
 * most SLR_OPEN_SHARDS_MIN shards, or one read all over, as a global shuffle
 * does, whose open-shard limit has grown to every shard). Otherwise the
 * reader closes shards it has not used for a while (record_reader.c, "Open
 * shards"), so the views hold a reference on the mapping's buffer, which
 * keeps the mapping alive until the sample lets go. Shards of large records
 * (encoded images) are read by copy instead when the cursor has an
 * allocator: a view would keep the mapping's pages resident
 * (record_reader.c, COPY_MIN_RECORD). Views into a record's scratch
 * (decompressed columns) die with the next read on that record, so they are
 * copied into a tensor from the cursor's allocator (the executor's pools).
 */
#include "source/source.h"
#include "record/record_format.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct slr_source {
    sl_source base;
    sl_reader *reader;
    bool verify;            /* check each record's checksum (as opened) */
} slr_source;

typedef struct slr_cursor {
    sl_source_cursor base;
    sl_record *rec;
} slr_cursor;

static int slr_cursor_open(sl_source *src, sl_source_cursor **out) {
    (void)src;
    SL_TRY(sl_source__cursor_new(sizeof(slr_cursor), "opening a .slr cursor", out));
    slr_cursor *c = (slr_cursor *)*out;
    int rc = sl_record_create(&c->rec);
    if (rc < 0) {
        sl__free(c);
        *out = NULL;
        return rc;
    }
    return SL_OK;
}

static void slr_cursor_free(sl_source *src, sl_source_cursor *cur) {
    (void)src;
    slr_cursor *c = (slr_cursor *)cur;
    sl_record_free(c->rec);
    sl__free(c);
}

/* A record of a shard of large records (record_reader.c, copy_reads): its
 * frame is read into a buffer from the cursor's allocator, and the sample's
 * columns are views of it, each holding a reference: the sample owns exactly
 * its record's bytes, for as long as it needs them. */
static int slr_read_copy(slr_source *s, slr_cursor *c, uint64_t i, size_t size, sl_sample *out) {
    sl_tensor frame;
    int64_t n = (int64_t)size;
    SL_TRY(c->base.alloc(c->base.alloc_ctx, &frame, SL_U8, 1, &n));
    int rc = sl_record__read_into(s->reader, i, c->rec, s->verify, frame.data, frame.nbytes,
                                  frame.buf);
    if (rc < 0) {
        sl_tensor_release(&frame);
        return rc;
    }
    out->index = i;
    out->ncols = 0;
    for (int k = 0; k < s->base.ncols; k++) {
        const sl_tensor *t = sl_record_column(c->rec, k);
        if (t->buf == frame.buf) {
            out->col[k] = *t;
            sl_buffer_retain(frame.buf);
        } else { /* decompressed into the record's scratch */
            rc = c->base.alloc(c->base.alloc_ctx, &out->col[k], t->dtype, t->ndim, t->shape);
            if (rc < 0)
                break;
            if (t->nbytes)
                memcpy(out->col[k].data, t->data, t->nbytes);
        }
        out->ncols = (uint32_t)k + 1;
    }
    sl_tensor_release(&frame);
    if (rc < 0)
        sl_sample_clear(out);
    return rc;
}

static int slr_read(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *out) {
    slr_source *s = (slr_source *)src;
    slr_cursor *c = (slr_cursor *)cur;
    size_t size;
    if (cur->alloc && sl_record__copy_size(s->reader, i, c->rec, &size))
        return slr_read_copy(s, c, i, size, out);
    SL_TRY(sl_reader_read(s->reader, i, c->rec));
    out->index = i;
    const bool borrow = cur->borrow && sl_record__views_last(c->rec);
    for (int k = 0; k < src->ncols; k++) {
        const sl_tensor *t = sl_record_column(c->rec, k);
        if (t->buf) {
            out->col[k] = *t;
            if (borrow)
                out->col[k].buf = NULL;
            else
                sl_buffer_retain(t->buf);
        } else {
            int rc = cur->alloc(cur->alloc_ctx, &out->col[k], t->dtype, t->ndim, t->shape);
            if (rc < 0) {
                out->ncols = (uint32_t)k;
                sl_sample_clear(out);
                return rc;
            }
            if (t->nbytes)
                memcpy(out->col[k].data, t->data, t->nbytes);
        }
        out->ncols = (uint32_t)k + 1;
    }
    return SL_OK;
}

static int slr_read_cols(sl_source *src, sl_source_cursor *cur, uint64_t i, void *const *dst,
                         const size_t *bytes) {
    slr_source *s = (slr_source *)src;
    return sl_record__read_cols(s->reader, i, ((slr_cursor *)cur)->rec, s->verify, dst, bytes);
}

static void slr_prefetch(sl_source *src, uint64_t i, int far) {
    sl_record__prefetch(((slr_source *)src)->reader, i, far);
}

static uint64_t slr_hold_for_random(sl_source *src, uint64_t budget) {
    return sl_record__hold_hot(((slr_source *)src)->reader, budget);
}

static int slr_index_column(sl_source *src, int col, const void **vals_out) {
    return sl_reader_index_column(((slr_source *)src)->reader, col, vals_out);
}

static const char *shard_path(const void *r, int k) { return sl_reader_shard_path(r, k); }

static int slr_describe(sl_source *src, cJSON *obj) {
    const sl_reader *r = ((slr_source *)src)->reader;
    SL_TRY(sl_source__describe_paths(obj, "shards", sl_reader_shard_count(r), shard_path, r));
    if (!cJSON_AddNumberToObject(obj, "data_bytes", (double)sl_reader_data_bytes(r)))
        return sl__oom("describing a source");
    return SL_OK;
}

/* A directory's record by its shard file (the name its read errors use) and
 * global number; a single file by its name. */
static void slr_locate(sl_source *src, uint64_t i, char *buf, size_t cap) {
    const sl_reader *r = ((slr_source *)src)->reader;
    if (sl_reader_shard_count(r) > 1)
        snprintf(buf, cap, "%s: record %llu", sl_reader_shard_path(r, sl_record__shard_of(r, i)),
                 (unsigned long long)i);
    else
        snprintf(buf, cap, "%s: record %llu", src->name, (unsigned long long)i);
}

static int slr_failed_range(sl_source *src, uint64_t i, uint64_t *first, uint64_t *count) {
    return sl_record__failed_range(((slr_source *)src)->reader, i, first, count);
}

static void slr_free(sl_source *src) {
    slr_source *s = (slr_source *)src;
    sl_reader_free(s->reader);
    sl__free(s);
}

static const sl_source_vtbl slr_vtbl = {
    .flags = SL_SOURCE_F_IMAGES_BY_CONTENT,
    .repair = SL_SLR_REPAIR_HINT,
    .cursor_open = slr_cursor_open,
    .cursor_free = slr_cursor_free,
    .read = slr_read,
    .read_cols = slr_read_cols,
    .prefetch = slr_prefetch,
    .hold_for_random = slr_hold_for_random,
    .index_column = slr_index_column,
    .describe = slr_describe,
    .locate = slr_locate,
    .failed_range = slr_failed_range,
    .free = slr_free,
};

/* A .slr source's options (docs/SOURCES.md). */
typedef struct {
    const char *path;
    sl_source_shard_opts shard;
} slr_opts;

static const sl_param slr_params[] = {
    {.key = "path", .type = SL_PARAM_STRING, .flags = SL_PARAM_REQUIRED, .min = 1, .max = -1,
     .offset = offsetof(slr_opts, path), .doc = "the dataset: a directory, a .slr file or a URL"},
    {.key = "", .type = SL_PARAM_INCLUDE, .fragment = sl_source__max_open_params,
     .offset = offsetof(slr_opts, shard)},
    {0}};

const sl_param_table sl_source__slr_table = {slr_params, "a .slr source", NULL, 0, 0};

int sl_source__open_slr(sl_source **out, const cJSON *obj, const char *field) {
    *out = NULL;
    slr_opts o;
    SL_TRY(sl_source__read_options(&sl_source__slr_table, obj, field, &o));
    /* "max_open_shards": a fixed bound (0: the reader's own, which grows) */
    int max_open = o.shard.max_open_shards;
    slr_source *s = sl_source__new(sizeof *s, &slr_vtbl, "slr");
    if (!s)
        return sl__oom("opening a .slr source");
    int rc = sl_reader_open(&s->reader, o.path, 0);
    if (rc < 0) {
        sl__free(s);
        if (rc != SL_ENOMEM)
            rc = sl_source__wrong_kind(o.path, rc);
        return sl__error_prefix(rc, "%s.path", field);
    }
    if (max_open)
        sl_record__set_open_limit(s->reader, max_open);
    s->verify = true; /* opened without SL_READ_NO_VERIFY */
    s->base.checksummed = 1;
    s->base.reads_ahead = sl_record__reads_by_ranges(s->reader);
    snprintf(s->base.name, sizeof s->base.name, "%s", sl__base_name(o.path));
    s->base.count = sl_reader_count(s->reader);
    if (s->base.count)
        s->base.record_bytes = sl_reader_data_bytes(s->reader) / s->base.count;
    const sl_schema *sc = sl_reader_schema(s->reader);
    int n = sl_schema_ncols(sc);
    for (int k = 0; k < n && rc == SL_OK; k++) {
        int64_t shape[SL_MAX_DIMS] = {0};
        sl_coltype t = sl_schema_type(sc, k);
        int nd = t == SL_COL_ARRAY ? sl_schema_shape(sc, k, shape) : 0;
        rc = sl_source__add_col(&s->base, sl_schema_name(sc, k), t, sl_schema_dtype(sc, k), nd,
                                shape);
        sl_source_col *c = &s->base.col[k];
        c->indexed = t == SL_COL_INT64 || t == SL_COL_FLOAT64;
        c->encoded = t == SL_COL_BYTES;
    }
    /* Metadata travels on (a repack keeps the class names). */
    int nm = sl_reader_meta_count(s->reader);
    if (rc == SL_OK && nm > 0 && !(s->base.meta = cJSON_CreateObject()))
        rc = sl__oom("opening a .slr source");
    for (int k = 0; k < nm && rc == SL_OK; k++) {
        const char *key = sl_reader_meta_key(s->reader, k), *v = sl_reader_meta(s->reader, key);
        cJSON *val = v ? cJSON_Parse(v) : NULL;
        if (!val)
            val = cJSON_CreateString(v ? v : "");
        rc = sl__json_add(s->base.meta, key, val);
    }
    if (rc < 0) {
        cJSON_Delete(s->base.meta);
        slr_free(&s->base);
        return sl__error_prefix(rc, "%s.path", field);
    }
    *out = &s->base;
    return SL_OK;
}

int sl_source__sniff_slr(const char *path, int is_dir, const uint8_t *head, size_t n) {
    if (!is_dir)
        return n >= 8 && memcmp(head, "\x89SLR\r\n\x1a\n", 8) == 0;
    char m[4096];
    size_t pl = strlen(path);
    int k = snprintf(m, sizeof m, "%s%s" SLR_MANIFEST_NAME, path,
                     pl && path[pl - 1] == '/' ? "" : "/");
    if (k < 0 || (size_t)k >= sizeof m)
        return 0;
    sl_io_info st;
    int rc = sl_io__stat(m, &st);
    return rc == SL_END ? 0 : rc < 0 ? rc : !st.is_dir;
}
