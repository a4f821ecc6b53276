/*
 * source_concat.c — several opened sources as one: record i of the
 * concatenation is record i - offset[k] of input k (torch's ConcatDataset,
 * in C). The pipeline's mixture (docs/PIPELINE.md, "Mixtures") reads its
 * inputs through it, so every path that reads, locates, prefetches or
 * reads into batch rows works on a mix unchanged, and a message names the
 * input's own file and record.
 *
 * Inputs must agree on their columns (names, types, dtypes, fixed shapes):
 * checked at open, a mismatch names both inputs and the column. A column
 * may come in another order in another input (a tar's members, a TFRecord's
 * features): each input's columns are mapped onto the first input's order.
 * An optional extra int64 column (`source_col`) holds the input's index;
 * its values are borrowed views of a table the source owns.
 *
 * A mix whose inputs have ops of their own opens the raw form
 * (sl_source__concat_raw): each input's samples come as that input reads
 * them, and the columns are made to agree after the ops
 * (src/pipeline/mix_ops.c), where the check and the source column are.
 */
#include "source/source.h"

#include <stdio.h>
#include <string.h>

typedef struct concat {
    sl_source base;
    int n;
    bool raw;                     /* each input's samples as it reads them
                                     (sl_source__concat_raw) */
    int src_col;                  /* the source-index column, -1: none */
    sl_source **in;
    uint64_t *off;                /* n + 1 offsets: input k is [off[k], off[k+1]) */
    int (*map)[SL_MAX_COLUMNS];   /* map[k][c]: input k's column of output column c */
    int64_t *ids;                 /* 0 .. n-1: the source column's values */
    bool *same;                   /* same[k]: input k's columns are the output's, in order */
} concat;

typedef struct concat_cursor {
    sl_source_cursor base;
    sl_source_cursor **in;        /* opened on an input's first read */
} concat_cursor;

/* The input holding record i: the number of inputs' starts at or below it
 * after the first (empty inputs counted past). K is small: every start is
 * compared, without an early exit, so that the loop's branches are the
 * same for every record — a mix's records come from its inputs in a random
 * order, and a walk that stops at the input mispredicted about once a
 * record, three times (two prefetches and the read). */
static int input_of(const concat *m, uint64_t i) {
    int k = 0;
    for (int j = 1; j < m->n; j++)
        k += i >= m->off[j];
    return k;
}

static int concat_cursor_open(sl_source *s, sl_source_cursor **out) {
    concat *m = (concat *)s;
    concat_cursor *c = sl__calloc(1, sizeof *c);
    if (!c || !(c->in = sl__calloc((size_t)m->n, sizeof *c->in))) {
        sl__free(c);
        return sl__oom("opening a mix cursor");
    }
    *out = &c->base;
    return SL_OK;
}

static void concat_cursor_free(sl_source *s, sl_source_cursor *cur) {
    concat *m = (concat *)s;
    concat_cursor *c = (concat_cursor *)cur;
    for (int k = 0; k < m->n; k++)
        if (c->in[k])
            sl_source__cursor_free(m->in[k], c->in[k]);
    sl__free(c->in);
    sl__free(c);
}

/* Input k's cursor, opened with the mix cursor's allocator on first use. */
static int sub_cursor(concat *m, concat_cursor *c, int k, sl_source_cursor **out) {
    if (!c->in[k]) {
        SL_TRY(sl_source__cursor_open(m->in[k], c->base.alloc, c->base.alloc_ctx, &c->in[k]));
        c->in[k]->borrow = c->base.borrow;
    }
    *out = c->in[k];
    return SL_OK;
}

static int concat_read(sl_source *s, sl_source_cursor *cur, uint64_t i, sl_sample *out) {
    concat *m = (concat *)s;
    int k = input_of(m, i);
    sl_source_cursor *sc;
    SL_TRY(sub_cursor(m, (concat_cursor *)cur, k, &sc));
    if (m->raw) {
        SL_TRY(sl_source__read(m->in[k], sc, i - m->off[k], out));
        out->index = i;
        return SL_OK;
    }
    sl_sample tmp;
    tmp.ncols = 0;
    SL_TRY(sl_source__read(m->in[k], sc, i - m->off[k], &tmp));
    for (int c = 0; c < s->ncols; c++) {
        if (c == m->src_col)
            sl_tensor_view(&out->col[c], &m->ids[k], SL_I64, 0, NULL);
        else
            out->col[c] = tmp.col[m->map[k][c]];
    }
    out->ncols = (uint32_t)s->ncols;
    out->index = i;
    return SL_OK;
}

static int concat_read_cols(sl_source *s, sl_source_cursor *cur, uint64_t i, void *const *dst,
                            const size_t *bytes) {
    concat *m = (concat *)s;
    int k = input_of(m, i);
    sl_source_cursor *sc;
    SL_TRY(sub_cursor(m, (concat_cursor *)cur, k, &sc));
    if (m->same[k]) /* the rows as they are: no column to move (tiny records feel it) */
        return sl_source__read_cols(m->in[k], sc, i - m->off[k], dst, bytes);
    void *d[SL_MAX_COLUMNS];
    size_t b[SL_MAX_COLUMNS];
    for (int c = 0; c < s->ncols; c++) {
        if (c == m->src_col) {
            memcpy(dst[c], &m->ids[k], sizeof m->ids[k]);
            continue;
        }
        d[m->map[k][c]] = dst[c];
        b[m->map[k][c]] = bytes[c];
    }
    return sl_source__read_cols(m->in[k], sc, i - m->off[k], d, b);
}

static void concat_prefetch(sl_source *s, uint64_t i, int far) {
    concat *m = (concat *)s;
    int k = input_of(m, i);
    sl_source__prefetch(m->in[k], i - m->off[k], far);
}

static int concat_failed_range(sl_source *s, uint64_t i, uint64_t *first, uint64_t *count) {
    concat *m = (concat *)s;
    int k = input_of(m, i);
    if (!sl_source__failed_range(m->in[k], i - m->off[k], first, count))
        return 0;
    *first += m->off[k];
    return 1;
}

static void concat_locate(sl_source *s, uint64_t i, char *buf, size_t cap) {
    concat *m = (concat *)s;
    int k = input_of(m, i);
    char where[512];
    sl_source__locate(m->in[k], i - m->off[k], where, sizeof where);
    snprintf(buf, cap, "mix input %d: %s", k, where);
}

static int concat_describe(sl_source *s, cJSON *obj) {
    concat *m = (concat *)s;
    cJSON *arr = cJSON_AddArrayToObject(obj, "inputs");
    if (!arr)
        return sl__oom("describing a mix");
    for (int k = 0; k < m->n; k++) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            return sl__oom("describing a mix");
        }
        if (!cJSON_AddStringToObject(o, "kind", sl_source_kind(m->in[k])) ||
            !cJSON_AddStringToObject(o, "name", sl_source_name(m->in[k])) ||
            !cJSON_AddNumberToObject(o, "records", (double)m->in[k]->count))
            return sl__oom("describing a mix");
        if (m->in[k]->vt->describe)
            SL_TRY(m->in[k]->vt->describe(m->in[k], o));
    }
    return SL_OK;
}

static void concat_free(sl_source *s) {
    concat *m = (concat *)s;
    for (int k = 0; k < m->n; k++)
        sl_source__release(m->in[k]);
    sl__free(m->in);
    sl__free(m->off);
    sl__free(m->map);
    sl__free(m->ids);
    sl__free(m->same);
    sl__free(m);
}

static const sl_source_vtbl concat_vt = {
    .cursor_open = concat_cursor_open, .cursor_free = concat_cursor_free, .read = concat_read,
    .read_cols = concat_read_cols, .prefetch = concat_prefetch,
    .failed_range = concat_failed_range, .describe = concat_describe, .locate = concat_locate,
    .free = concat_free,
};
/* the same without read_cols, for inputs of which one cannot read into rows */
static const sl_source_vtbl concat_vt_rows_off = {
    .cursor_open = concat_cursor_open, .cursor_free = concat_cursor_free, .read = concat_read,
    .prefetch = concat_prefetch, .failed_range = concat_failed_range,
    .describe = concat_describe, .locate = concat_locate, .free = concat_free,
};

static const char *type_name(sl_coltype t) {
    static const char *const names[] = {"?", "int64", "float64", "string", "bytes", "array"};
    return (int)t >= 1 && (int)t <= 5 ? names[t] : "?";
}

/* Does input k's column `b` agree with the output column `a`? If not, say
 * how into why. Dims of -1 (varying) agree with any size. */
static int same_col(const sl_source_col *a, const sl_source_col *b, char *why, size_t cap) {
    if (a->type != b->type) {
        snprintf(why, cap, "%s vs %s", type_name(a->type), type_name(b->type));
        return 0;
    }
    if (a->type != SL_COL_ARRAY)
        return 1;
    if (a->dtype != b->dtype) {
        snprintf(why, cap, "dtype %s vs %s", sl_dtype_name(a->dtype), sl_dtype_name(b->dtype));
        return 0;
    }
    int shape_ok = a->ndim == b->ndim;
    for (int d = 0; shape_ok && d < a->ndim; d++)
        shape_ok = a->shape[d] < 0 || b->shape[d] < 0 || a->shape[d] == b->shape[d];
    if (!shape_ok) {
        snprintf(why, cap, "shapes differ (%d dims vs %d dims, or a fixed size)", a->ndim,
                 b->ndim);
        return 0;
    }
    return 1;
}

static int find_col(const sl_source *s, const char *name) {
    for (int c = 0; c < s->ncols; c++)
        if (!strcmp(s->col[c].name, name))
            return c;
    return -1;
}

/* The concatenation's record numbering and inputs, before its columns. */
static int concat_new(concat **out, sl_source *const *in, int n, const sl_source_vtbl *vt) {
    *out = NULL;
    if (n < 1)
        return sl__error(SL_EINVAL, "mix: needs at least one input");
    concat *m = sl_source__new(sizeof *m, vt, "mix");
    if (!m)
        return sl__oom("opening a mix");
    m->src_col = -1;
    m->in = sl__calloc((size_t)n, sizeof *m->in);
    m->off = sl__calloc((size_t)n + 1, sizeof *m->off);
    m->map = sl__calloc((size_t)n, sizeof *m->map);
    m->ids = sl__calloc((size_t)n, sizeof *m->ids);
    m->same = sl__calloc((size_t)n, sizeof *m->same);
    if (!m->in || !m->off || !m->map || !m->ids || !m->same) {
        sl_source__release(&m->base);
        return sl__oom("opening a mix");
    }
    for (int k = 0; k < n; k++) {
        m->in[k] = sl_source__retain(in[k]);
        m->n = k + 1;
        m->ids[k] = k;
        m->off[k + 1] = m->off[k] + in[k]->count;
    }
    *out = m;
    return SL_OK;
}

/* What the concatenation holds, counts and is called, from its inputs. */
static void concat_finish(concat *m) {
    sl_source *s = &m->base;
    uint64_t bytes = 0;
    s->checksummed = 1;
    for (int k = 0; k < m->n; k++) {
        sl_source *in = m->in[k];
        bytes += in->record_bytes * in->count;
        s->held_bytes += in->held_bytes;
        s->remote = s->remote || sl_source__remote(in);
        s->checksummed = s->checksummed && in->checksummed;
    }
    s->count = m->off[m->n];
    s->record_bytes = s->count ? bytes / s->count : 0;
    size_t len = (size_t)snprintf(s->name, sizeof s->name, "mix(");
    for (int k = 0; k < m->n && len < sizeof s->name; k++)
        len += (size_t)snprintf(s->name + len, sizeof s->name - len, "%s%s", k ? ", " : "",
                                sl_source_name(m->in[k]));
    if (len < sizeof s->name)
        snprintf(s->name + len, sizeof s->name - len, ")");
}

int sl_source__concat_raw(sl_source **out, sl_source *const *in, int n) {
    concat *m;
    SL_TRY(concat_new(&m, in, n, &concat_vt_rows_off));
    sl_source *s = &m->base;
    m->raw = true;
    int rc = SL_OK;
    for (int c = 0; c < in[0]->ncols; c++) {
        const sl_source_col *a = &in[0]->col[c];
        SL_CHECK(sl_source__add_col(s, a->name, a->type, a->dtype, a->ndim, a->shape));
        s->col[c] = *a;
        s->col[c].indexed = 0; /* filters on a mix run per sample */
    }
    concat_finish(m);
    *out = s;
    return SL_OK;
cleanup:
    sl_source__release(s);
    return rc;
}

int sl_source__concat(sl_source **out, sl_source *const *in, const char *const *labels, int n,
                      const char *const *keep, int nkeep, const char *source_col) {
    *out = NULL;
    int rows = 1;
    for (int k = 0; k < n; k++)
        rows = rows && sl_source__has_read_cols(in[k]);
    concat *m;
    SL_TRY(concat_new(&m, in, n, rows ? &concat_vt : &concat_vt_rows_off));
    sl_source *s = &m->base;
    int rc = SL_OK;
    /* the first input's columns (or those kept), each found in every other
     * input */
    const sl_source *a = in[0];
    int ncols = keep ? nkeep : a->ncols;
    for (int c = 0; c < ncols; c++) {
        int ac = keep ? find_col(a, keep[c]) : c;
        if (ac < 0)
            SL_FAIL(SL_EINVAL, "mix: columns: inputs[0] (%s) has no column '%s'", labels[0],
                    keep[c]);
        SL_CHECK(sl_source__add_col(s, a->col[ac].name, a->col[ac].type, a->col[ac].dtype,
                                    a->col[ac].ndim, a->col[ac].shape));
        s->col[c] = a->col[ac];
        s->col[c].indexed = 0; /* filters on a mix run per sample */
        for (int k = 0; k < n; k++) {
            int j = find_col(in[k], a->col[ac].name);
            char why[160];
            if (j < 0)
                SL_FAIL(SL_EINVAL, "mix: inputs[%d] (%s) has no column '%s' that inputs[0] (%s) "
                                   "has (its columns must be the same: keep the common ones with the mix's \"columns\")",
                        k, labels[k], a->col[ac].name, labels[0]);
            if (!same_col(&a->col[ac], &in[k]->col[j], why, sizeof why))
                SL_FAIL(SL_EINVAL, "mix: inputs[0] (%s) and inputs[%d] (%s) differ in column "
                                   "'%s': %s (cast or decode them to the same type first)",
                        labels[0], k, labels[k], a->col[ac].name, why);
            for (int d = 0; d < a->col[ac].ndim && d < in[k]->col[j].ndim; d++)
                if (in[k]->col[j].shape[d] < 0)
                    s->col[c].shape[d] = -1;
            s->col[c].encoded = s->col[c].encoded || in[k]->col[j].encoded;
            s->col[c].image = s->col[c].image && in[k]->col[j].image;
            m->map[k][c] = j;
        }
    }
    for (int k = 1; k < n && !keep; k++)
        for (int j = 0; j < in[k]->ncols; j++)
            if (find_col(a, in[k]->col[j].name) < 0)
                SL_FAIL(SL_EINVAL, "mix: inputs[%d] (%s) has a column '%s' that inputs[0] (%s) "
                                   "has not (its columns must be the same: keep the common ones with the mix's \"columns\")",
                        k, labels[k], in[k]->col[j].name, labels[0]);
    if (source_col && source_col[0]) {
        if (find_col(s, source_col) >= 0)
            SL_FAIL(SL_EINVAL, "mix: source_column '%s' is a column of the inputs already; "
                               "name it otherwise", source_col);
        SL_CHECK(sl_source__add_col(s, source_col, SL_COL_INT64, SL_I64, 0, NULL));
        m->src_col = s->ncols - 1;
    }
    for (int k = 0; k < n; k++) {
        m->same[k] = m->src_col < 0 && in[k]->ncols == s->ncols;
        for (int c = 0; c < s->ncols && m->same[k]; c++)
            m->same[k] = m->map[k][c] == c;
    }
    concat_finish(m);
    *out = s;
    return SL_OK;
cleanup:
    sl_source__release(s);
    return rc;
}

int sl_source__concat_input(const sl_source *s, uint64_t i, uint64_t *rec) {
    const concat *m = (const concat *)s;
    int k = input_of(m, i);
    if (rec)
        *rec = i - m->off[k];
    return k;
}
