/*
 * schema.c — the column schema of a .slr dataset, and its on-disk descriptors
 * (FORMAT.md, "Column descriptor").
 */
#include "record/record_format.h"

#include <stdio.h>
#include <string.h>

int sl_schema_create(sl_schema **out) {
    *out = NULL;
    sl_schema *s = sl__calloc(1, sizeof *s);
    if (!s)
        return sl__oom("creating a schema");
    *out = s;
    return SL_OK;
}

void sl_schema_free(sl_schema *s) { sl__free(s); }

bool sl_record__col_varshape(const slr_column *c) {
    if (c->type != SL_COL_ARRAY)
        return false;
    for (int d = 0; d < c->ndim; d++)
        if (c->shape[d] == -1)
            return true;
    return false;
}

int sl_schema_add(sl_schema *s, const char *name, sl_coltype type, sl_dtype dtype, int ndim,
                  const int64_t *shape, unsigned flags) {
    if (!s || !name)
        return sl__error(SL_EINVAL, "schema: NULL argument");
    size_t len = strlen(name);
    if (len == 0 || len > SLR_COLNAME_MAX)
        return sl__error(SL_EINVAL, "schema: column name \"%.80s\" must be 1-%u bytes", name,
                         SLR_COLNAME_MAX);
    if (s->ncols >= SL_MAX_COLUMNS)
        return sl__error(SL_EINVAL, "schema: column \"%s\": too many columns (max %d)", name,
                         SL_MAX_COLUMNS);
    if (sl_schema_find(s, name) >= 0)
        return sl__error(SL_EINVAL, "schema: duplicate column name \"%s\"", name);
    if (flags & ~SLR_COLF_KNOWN)
        return sl__error(SL_EINVAL, "schema: column \"%s\": unknown flags 0x%x", name, flags);
    slr_column c;
    memset(&c, 0, sizeof c);
    memcpy(c.name, name, len);
    c.type = type;
    c.flags = flags;
    switch (type) {
    case SL_COL_INT64:
    case SL_COL_FLOAT64:
        if (flags & SL_COLF_ZSTD)
            return sl__error(SL_EINVAL, "schema: column \"%s\": zstd is not allowed on a %s column",
                             name, sl_coltype_name(type));
        /* fall through */
    case SL_COL_STRING:
    case SL_COL_BYTES:
        if (ndim != 0 || (dtype != SL_DTYPE_INVALID))
            return sl__error(SL_EINVAL,
                             "schema: column \"%s\": a %s column takes no dtype or shape", name,
                             sl_coltype_name(type));
        break;
    case SL_COL_ARRAY:
        if (sl_dtype_size(dtype) == 0)
            return sl__error(SL_EINVAL, "schema: column \"%s\": invalid dtype %d", name, (int)dtype);
        if (dtype == SL_BF16)
            return sl__error(SL_EINVAL,
                             "schema: column \"%s\": bfloat16 is a pipeline output type, not a "
                             ".slr column type (store float32 or float16 and cast in the pipeline)",
                             name);
        if (ndim < 0 || ndim > SL_MAX_DIMS || (ndim > 0 && !shape))
            return sl__error(SL_EINVAL, "schema: column \"%s\": ndim must be 0..%d with a shape",
                             name, SL_MAX_DIMS);
        for (int d = 0; d < ndim; d++) {
            if (shape[d] < -1)
                return sl__error(SL_EINVAL, "schema: column \"%s\": dim %d is %lld (want >= 0 or -1)",
                                 name, d, (long long)shape[d]);
            c.shape[d] = shape[d];
        }
        c.dtype = dtype;
        c.ndim = ndim;
        break;
    default:
        return sl__error(SL_EINVAL, "schema: column \"%s\": unknown column type %d", name, (int)type);
    }
    s->col[s->ncols++] = c;
    return SL_OK;
}

int sl_schema_ncols(const sl_schema *s) { return s ? s->ncols : 0; }

int sl_schema_find(const sl_schema *s, const char *name) {
    if (!s || !name)
        return -1;
    for (int i = 0; i < s->ncols; i++)
        if (strcmp(s->col[i].name, name) == 0)
            return i;
    return -1;
}

static const slr_column *col_at(const sl_schema *s, int col) {
    if (!s || col < 0 || col >= s->ncols)
        return NULL;
    return &s->col[col];
}

const char *sl_schema_name(const sl_schema *s, int col) {
    const slr_column *c = col_at(s, col);
    return c ? c->name : NULL;
}

sl_coltype sl_schema_type(const sl_schema *s, int col) {
    const slr_column *c = col_at(s, col);
    return c ? c->type : (sl_coltype)0;
}

sl_dtype sl_schema_dtype(const sl_schema *s, int col) {
    const slr_column *c = col_at(s, col);
    return c ? c->dtype : SL_DTYPE_INVALID;
}

int sl_schema_shape(const sl_schema *s, int col, int64_t *shape_out) {
    const slr_column *c = col_at(s, col);
    if (!c)
        return 0;
    if (shape_out)
        for (int d = 0; d < c->ndim; d++)
            shape_out[d] = c->shape[d];
    return c->ndim;
}

unsigned sl_schema_flags(const sl_schema *s, int col) {
    const slr_column *c = col_at(s, col);
    return c ? c->flags : 0;
}

const char *sl_coltype_name(sl_coltype type) {
    switch (type) {
    case SL_COL_INT64: return "int64";
    case SL_COL_FLOAT64: return "float64";
    case SL_COL_STRING: return "string";
    case SL_COL_BYTES: return "bytes";
    case SL_COL_ARRAY: return "array";
    }
    return "invalid";
}

/* Column descriptor, 136 bytes (FORMAT.md):
 *   0 u8 type, 1 u8 dtype, 2 u8 ndim, 3 u8 name_len, 4 u32 flags,
 *   8 i64 shape[8] (unused dims 0), 72 name[64] (NUL padded). */
void sl_record__schema_encode(const sl_schema *s, uint8_t *out) {
    for (int i = 0; i < s->ncols; i++) {
        const slr_column *c = &s->col[i];
        uint8_t *p = out + (size_t)i * SLR_COLDESC_SIZE;
        memset(p, 0, SLR_COLDESC_SIZE);
        p[0] = (uint8_t)c->type;
        p[1] = (uint8_t)c->dtype;
        p[2] = (uint8_t)c->ndim;
        p[3] = (uint8_t)strlen(c->name);
        sl__st32(p + 4, c->flags);
        for (int d = 0; d < c->ndim; d++)
            sl__st64(p + 8 + 8 * d, (uint64_t)c->shape[d]);
        memcpy(p + 72, c->name, strlen(c->name));
    }
}

int sl_record__schema_decode(const uint8_t *p, uint32_t ncols, sl_schema *out, const char *path) {
    memset(out, 0, sizeof *out);
    if (ncols < 1 || ncols > SL_MAX_COLUMNS)
        return sl__error(SL_ECORRUPT, "%s: header: %u columns (allowed 1..%d)", path, ncols,
                         SL_MAX_COLUMNS);
    for (uint32_t i = 0; i < ncols; i++) {
        const uint8_t *d = p + (size_t)i * SLR_COLDESC_SIZE;
        unsigned type = d[0], dtype = d[1], ndim = d[2], nlen = d[3];
        uint32_t flags = sl__ld32(d + 4);
        if (nlen < 1 || nlen > SLR_COLNAME_MAX)
            return sl__error(SL_ECORRUPT, "%s: column %u: name length %u (allowed 1..%u)", path, i,
                             nlen, SLR_COLNAME_MAX);
        char name[SLR_COLNAME_MAX + 1];
        memcpy(name, d + 72, nlen);
        name[nlen] = 0;
        if (memchr(name, 0, nlen))
            return sl__error(SL_ECORRUPT, "%s: column %u: NUL inside the name", path, i);
        for (unsigned k = nlen; k < 64; k++)
            if (d[72 + k])
                return sl__error(SL_ECORRUPT, "%s: column %u: name padding is not zero", path, i);
        if (flags & ~SLR_COLF_KNOWN)
            return sl__error(SL_EUNSUPPORTED, "%s: column \"%s\": unknown column flags 0x%x", path,
                             name, (unsigned)flags);
        if (type < SL_COL_INT64 || type > SL_COL_ARRAY)
            return sl__error(SL_ECORRUPT, "%s: column \"%s\": unknown column type %u", path, name, type);
        int64_t shape[SL_MAX_DIMS] = {0};
        if (type == SL_COL_ARRAY) {
            if (ndim > SL_MAX_DIMS || sl_dtype_size((sl_dtype)dtype) == 0 || dtype == SL_BF16)
                return sl__error(SL_ECORRUPT, "%s: column \"%s\": bad array dtype %u or ndim %u",
                                 path, name, dtype, ndim);
        } else if (dtype != 0 || ndim != 0) {
            return sl__error(SL_ECORRUPT, "%s: column \"%s\": dtype/ndim set on a %s column", path,
                             name, sl_coltype_name((sl_coltype)type));
        }
        for (unsigned k = 0; k < SL_MAX_DIMS; k++) {
            int64_t v = (int64_t)sl__ld64(d + 8 + 8 * k);
            if (k >= ndim ? v != 0 : v < -1)
                return sl__error(SL_ECORRUPT, "%s: column \"%s\": bad shape dim %u (%lld)", path,
                                 name, k, (long long)v);
            shape[k] = v;
        }
        int rc = sl_schema_add(out, name, (sl_coltype)type, (sl_dtype)dtype, (int)ndim,
                               type == SL_COL_ARRAY ? shape : NULL, flags);
        if (rc < 0) {
            /* Duplicate name or a flag a column type forbids: the file is damaged.
             * Copy the message first: sl__error writes the same thread-local slot. */
            char why[SL__ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", sl_errmsg());
            return sl__error(SL_ECORRUPT, "%s: column %u: %s", path, i, why);
        }
    }
    return SL_OK;
}

bool sl_record__schema_equal(const sl_schema *a, const sl_schema *b) {
    if (a->ncols != b->ncols)
        return false;
    for (int i = 0; i < a->ncols; i++) {
        const slr_column *x = &a->col[i], *y = &b->col[i];
        if (strcmp(x->name, y->name) || x->type != y->type || x->dtype != y->dtype ||
            x->ndim != y->ndim || x->flags != y->flags)
            return false;
        for (int d = 0; d < x->ndim; d++)
            if (x->shape[d] != y->shape[d])
                return false;
    }
    return true;
}
