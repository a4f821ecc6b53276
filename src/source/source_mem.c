/*
 * source_mem.c — a source over samples held in memory (tests, users who
 * already hold their data in RAM, and the IDX source, which reads its two
 * files into arrays at open: source_idx.c).
 *
 * The caller's bytes are copied once into one buffer, or, for arrays the
 * caller allocated for the source (sl_source__mem_adopt), taken as they are;
 * samples are then borrowed views into them (no per-sample allocation or
 * reference count), valid while the source lives — the spec and every
 * pipeline made from it hold a reference. Column-wise data keeps one template
 * tensor per column and a stride; sample-wise (possibly ragged) data keeps a
 * tensor per sample and column.
 */
#include "source/source.h"

#include <stdio.h>
#include <string.h>

typedef struct sl_memsrc {
    sl_source base;
    int ncols;
    uint64_t count;
    char names[SL_MAX_COLUMNS][SL_COLNAME_MAX];
    sl_buffer *data;
    void *adopted[SL_MAX_COLUMNS]; /* sl_source__mem_adopt's arrays (sl__free) */
    uint32_t int_cols;             /* bit c: column c is SL_COL_INT64, indexed */
    /* column-wise: template tensor (data = column base) and bytes per sample */
    sl_tensor tmpl[SL_MAX_COLUMNS];
    size_t stride[SL_MAX_COLUMNS];
    /* sample-wise: count * ncols views; NULL for column-wise */
    sl_tensor *items;
} sl_memsrc;

static int check_names(int ncols, const char *const *names) {
    if (ncols < 1 || ncols > SL_MAX_COLUMNS)
        return sl__error(SL_EINVAL, "source: need 1 to %d columns, got %d", SL_MAX_COLUMNS, ncols);
    for (int i = 0; i < ncols; i++) {
        if (!names || !names[i] || !names[i][0] || strlen(names[i]) >= SL_COLNAME_MAX)
            return sl__error(SL_EINVAL, "source: column %d: name must be 1-%d bytes", i,
                             SL_COLNAME_MAX - 1);
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return sl__error(SL_EINVAL, "source: column name '%s' given twice", names[i]);
    }
    return SL_OK;
}

static const sl_source_vtbl mem_vtbl;

static sl_memsrc *memsrc_new(int ncols, const char *const *names) {
    sl_memsrc *m = sl_source__new(sizeof *m, &mem_vtbl, "memory");
    if (!m)
        return NULL;
    m->ncols = ncols;
    for (int i = 0; i < ncols; i++)
        snprintf(m->names[i], SL_COLNAME_MAX, "%s", names[i]);
    return m;
}

static int mem_finish(sl_memsrc *m, sl_source **out);

int sl_source__mem_columns(sl_source **out, int ncols, const char *const *names,
                                const sl_tensor *cols) {
    SL_TRY(check_names(ncols, names));
    size_t total = 0;
    int64_t count = -1;
    for (int i = 0; i < ncols; i++) {
        const sl_tensor *t = &cols[i];
        if (t->ndim < 1 || sl_dtype_size(t->dtype) == 0 || (!t->data && t->nbytes))
            return sl__error(SL_EINVAL, "source: column '%s': need a tensor of >= 1 dims", names[i]);
        if (count >= 0 && t->shape[0] != count)
            return sl__error(SL_EINVAL,
                             "source: column '%s' has %lld samples, column '%s' has %lld",
                             names[i], (long long)t->shape[0], names[0], (long long)count);
        count = t->shape[0];
        if (!sl__add_ok(total, t->nbytes, &total))
            return sl__error(SL_EINVAL, "source: columns too large");
        total = (total + 63) & ~(size_t)63;
    }
    sl_memsrc *m = memsrc_new(ncols, names);
    if (!m)
        return sl__oom("copying source columns");
    int rc = sl_buffer_alloc(&m->data, total ? total : 1);
    if (rc < 0) {
        sl__free(m);
        return rc;
    }
    m->count = (uint64_t)count;
    char *base = sl_buffer_data(m->data);
    size_t off = 0;
    for (int i = 0; i < ncols; i++) {
        const sl_tensor *t = &cols[i];
        if (t->nbytes)
            memcpy(base + off, t->data, t->nbytes);
        sl_tensor_view(&m->tmpl[i], base + off, t->dtype, t->ndim - 1, t->shape + 1);
        m->stride[i] = m->tmpl[i].nbytes;
        off = (off + t->nbytes + 63) & ~(size_t)63;
    }
    return mem_finish(m, out);
}

int sl_source__mem_adopt(sl_source **out, int ncols, const char *const *names,
                         const sl_tensor *rows, uint64_t count, uint32_t int_cols) {
    sl_memsrc *m = NULL;
    int rc = check_names(ncols, names);
    for (int i = 0; rc == SL_OK && i < ncols; i++) {
        const sl_tensor *t = &rows[i];
        size_t all;
        if (!t->data || t->ndim < 0 || t->ndim > SL_MAX_DIMS || sl_dtype_size(t->dtype) == 0 ||
            !sl__mul_ok(t->nbytes, (size_t)count, &all))
            rc = sl__error(SL_EINVAL, "source: column '%s': bad tensor", names[i]);
        else if ((int_cols >> i & 1) && (t->dtype != SL_I64 || t->ndim != 0))
            rc = sl__error(SL_EINVAL, "source: column '%s': an int64 column holds one int64 "
                           "per record", names[i]);
    }
    if (rc == SL_OK && !(m = memsrc_new(ncols, names)))
        rc = sl__oom("holding source columns");
    if (rc < 0) {
        for (int i = 0; i < ncols; i++)
            sl__free(rows[i].data);
        return rc;
    }
    m->count = count;
    m->int_cols = int_cols;
    for (int i = 0; i < ncols; i++) {
        const sl_tensor *t = &rows[i];
        m->adopted[i] = t->data;
        sl_tensor_view(&m->tmpl[i], t->data, t->dtype, t->ndim, t->shape);
        m->stride[i] = m->tmpl[i].nbytes;
    }
    return mem_finish(m, out);
}

int sl_source__mem_samples(sl_source **out, int ncols, const char *const *names,
                                const sl_sample *samples, uint64_t count) {
    SL_TRY(check_names(ncols, names));
    size_t total = 0, nitems;
    if (!sl__mul_ok((size_t)count, (size_t)ncols, &nitems))
        return sl__error(SL_EINVAL, "source: too many samples");
    for (uint64_t j = 0; j < count; j++) {
        if (samples[j].ncols != (uint32_t)ncols)
            return sl__error(SL_EINVAL, "source: sample %llu has %u columns, expected %d",
                             (unsigned long long)j, samples[j].ncols, ncols);
        for (int i = 0; i < ncols; i++) {
            const sl_tensor *t = &samples[j].col[i];
            if (sl_dtype_size(t->dtype) == 0 || t->ndim < 0 || t->ndim > SL_MAX_DIMS ||
                (!t->data && t->nbytes))
                return sl__error(SL_EINVAL, "source: sample %llu column '%s': bad tensor",
                                 (unsigned long long)j, names[i]);
            if (!sl__add_ok(total, (t->nbytes + 63) & ~(size_t)63, &total))
                return sl__error(SL_EINVAL, "source: samples too large");
        }
    }
    sl_memsrc *m = memsrc_new(ncols, names);
    if (!m)
        return sl__oom("copying source samples");
    m->items = sl__calloc(nitems ? nitems : 1, sizeof *m->items);
    if (!m->items || sl_buffer_alloc(&m->data, total ? total : 1) < 0) {
        sl__free(m->items);
        sl__free(m);
        return sl__oom("copying source samples");
    }
    m->count = count;
    char *base = sl_buffer_data(m->data);
    size_t off = 0;
    for (uint64_t j = 0; j < count; j++) {
        for (int i = 0; i < ncols; i++) {
            const sl_tensor *t = &samples[j].col[i];
            if (t->nbytes)
                memcpy(base + off, t->data, t->nbytes);
            sl_tensor_view(&m->items[j * (size_t)ncols + (size_t)i], base + off, t->dtype,
                           t->ndim, t->shape);
            off += (t->nbytes + 63) & ~(size_t)63;
        }
    }
    /* Column metadata for the plan: the first sample's, with dims that vary
     * between samples marked -1. */
    for (int i = 0; i < ncols && count; i++)
        m->tmpl[i] = m->items[i];
    return mem_finish(m, out);
}

static void mem_free(sl_source *src) {
    sl_memsrc *m = (sl_memsrc *)src;
    sl_buffer_release(m->data);
    for (int i = 0; i < m->ncols; i++)
        sl__free(m->adopted[i]);
    sl__free(m->items);
    sl__free(m);
}

/* Column descriptions for the plan. Sample-wise data takes the first
 * sample's dtype and shape, with what varies between samples marked
 * unknown: dtype SL_DTYPE_INVALID, ndim -1, or a dim -1. */
static void mem_columns(sl_memsrc *m) {
    sl_source *s = &m->base;
    s->ncols = m->ncols;
    for (int i = 0; i < m->ncols; i++) {
        sl_source_col *c = &s->col[i];
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", m->names[i]);
        if (m->int_cols >> i & 1) {
            c->type = SL_COL_INT64; /* a scalar per record, as sl_source__add_col has it */
            c->dtype = SL_I64;
            c->indexed = 1;
            continue;
        }
        c->type = SL_COL_ARRAY;
        c->dtype = m->tmpl[i].dtype;
        c->ndim = m->tmpl[i].ndim;
        for (int d = 0; d < c->ndim; d++)
            c->shape[d] = m->tmpl[i].shape[d];
        if (m->items) {
            for (uint64_t j = 1; j < m->count; j++) {
                const sl_tensor *t = &m->items[j * (size_t)m->ncols + (size_t)i];
                if (t->dtype != c->dtype)
                    c->dtype = SL_DTYPE_INVALID;
                if (t->ndim != c->ndim) {
                    c->ndim = -1;
                    break;
                }
                for (int d = 0; d < c->ndim; d++)
                    if (t->shape[d] != c->shape[d])
                        c->shape[d] = -1;
            }
        }
    }
}

/* Borrowed views into the one buffer: valid while the source lives. */
static int mem_read(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *s) {
    (void)cur;
    const sl_memsrc *m = (const sl_memsrc *)src;
    s->index = i;
    s->ncols = (uint32_t)m->ncols;
    if (m->items) {
        memcpy(s->col, &m->items[i * (size_t)m->ncols], (size_t)m->ncols * sizeof(sl_tensor));
        return SL_OK;
    }
    for (int c = 0; c < m->ncols; c++) {
        s->col[c] = m->tmpl[c];
        s->col[c].data = (char *)m->tmpl[c].data + i * m->stride[c];
    }
    return SL_OK;
}

/* Record i's columns copied into the caller's rows (the executor's
 * read_rows). Sample-wise data can differ from the column's fixed shape only
 * where the plan would not ask (mem_columns marks what varies); the size is
 * checked all the same. */
static int mem_read_cols(sl_source *src, sl_source_cursor *cur, uint64_t i, void *const *dst,
                         const size_t *bytes) {
    (void)cur;
    const sl_memsrc *m = (const sl_memsrc *)src;
    for (int c = 0; c < m->ncols; c++) {
        const void *from;
        size_t n;
        if (m->items) {
            const sl_tensor *t = &m->items[i * (size_t)m->ncols + (size_t)c];
            from = t->data;
            n = t->nbytes;
        } else {
            from = (const char *)m->tmpl[c].data + i * m->stride[c];
            n = m->stride[c];
        }
        if (n != bytes[c])
            return sl__error(SL_EINVAL, "memory: record %llu: column '%s' holds %zu bytes where "
                             "its batch row holds %zu", (unsigned long long)i, m->names[c], n,
                             bytes[c]);
        if (n)
            memcpy(dst[c], from, n);
    }
    return SL_OK;
}

/* An int64 column's values (sl_source__mem_adopt's int_cols): its array. */
static int mem_index_column(sl_source *src, int col, const void **vals_out) {
    const sl_memsrc *m = (const sl_memsrc *)src;
    if (col < 0 || col >= m->ncols || !(m->int_cols >> col & 1))
        return sl__error(SL_EINVAL, "%s: column %d is not indexed", src->name, col);
    *vals_out = m->tmpl[col].data;
    return SL_OK;
}

static const sl_source_vtbl mem_vtbl = {
    .flags = SL_SOURCE_F_MEMORY,
    .read = mem_read,
    .read_cols = mem_read_cols,
    .index_column = mem_index_column,
    .free = mem_free,
};

static int mem_finish(sl_memsrc *m, sl_source **out) {
    snprintf(m->base.name, sizeof m->base.name, "memory");
    m->base.count = m->count;
    mem_columns(m);
    *out = &m->base;
    return SL_OK;
}
