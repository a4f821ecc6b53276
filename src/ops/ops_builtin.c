/*
 * ops_builtin.c — the per-sample ops that belong to the engine itself:
 * `filter` (keep samples whose scalar column is in / not in a set; pushed into
 * an .slr source's index by the optimiser when it can be) and `select` (keep
 * and reorder columns).
 */
#include "ops/op.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- filter ------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef sl_filter_params filter_params;

static int filter_parse(void *params, const cJSON *json, const char *field) {
    sl_filter_params *f = params;
    static const char *const keys[] = {"column", "in", "not_in", NULL};
    SL_TRY(sl_op_param_check_keys(json, field, keys));
    SL_TRY(sl_op_param_string(json, "column", field, 1, NULL, f->column, sizeof f->column));
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(json, "in");
    const cJSON *not_in = cJSON_GetObjectItemCaseSensitive(json, "not_in");
    if ((in != NULL) == (not_in != NULL))
        return sl__error(SL_EINVAL, "%s: give exactly one of \"in\" and \"not_in\"", field);
    const char *key = in ? "in" : "not_in";
    const cJSON *arr = in ? in : not_in;
    f->negate = not_in != NULL;
    int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : -1;
    if (n < 0 || n > SL_FILTER_MAX_VALUES)
        return sl__error(SL_EINVAL, "%s.%s: must be an array of at most %d numbers", field, key,
                         SL_FILTER_MAX_VALUES);
    f->values = sl__calloc((size_t)n + 1, sizeof *f->values);
    if (!f->values)
        return sl__oom("parsing a filter");
    int i = 0;
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return sl__error(SL_EINVAL, "%s.%s[%d]: must be a number", field, key, i);
        f->values[i] = it->valuedouble;
    }
    f->n = n;
    qsort(f->values, (size_t)n, sizeof *f->values, cmp_double);
    return SL_OK;
}

static int filter_bind(void *params, sl_colset *cols, const char *field) {
    sl_filter_params *f = params;
    char where[96];
    snprintf(where, sizeof where, "%s.column", field);
    int c = sl_op_find_column(cols, f->column, where);
    if (c < 0)
        return c;
    const sl_colinfo *ci = &cols->col[c];
    if (ci->encoded || (ci->ndim > 0 && !ci->index_column))
        return sl__error(SL_EINVAL, "%s: column '%s' is not a scalar", where, f->column);
    f->col = c;
    return SL_OK;
}

static void filter_free(void *params) {
    sl_filter_params *f = params;
    sl__free(f->values);
    f->values = NULL;
}

int sl_op__filter_match(const sl_filter_params *f, double v) {
    size_t lo = 0, hi = (size_t)f->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (f->values[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    int found = lo < (size_t)f->n && f->values[lo] == v;
    return found != f->negate;
}

static int scalar_value(const sl_tensor *t, double *out) {
    if (sl_tensor_numel(t) != 1 || !t->data)
        return sl__error(SL_EINVAL, "column is not a scalar (%d dims)", (int)t->ndim);
    switch (t->dtype) {
    case SL_U8: *out = *(const uint8_t *)t->data; break;
    case SL_I8: *out = *(const int8_t *)t->data; break;
    case SL_U16: *out = *(const uint16_t *)t->data; break;
    case SL_I16: *out = *(const int16_t *)t->data; break;
    case SL_U32: *out = *(const uint32_t *)t->data; break;
    case SL_I32: *out = *(const int32_t *)t->data; break;
    case SL_U64: *out = (double)*(const uint64_t *)t->data; break;
    case SL_I64: *out = (double)*(const int64_t *)t->data; break;
    case SL_F32: *out = *(const float *)t->data; break;
    case SL_F64: *out = *(const double *)t->data; break;
    case SL_BOOL: *out = *(const uint8_t *)t->data != 0; break;
    default: return sl__error(SL_EINVAL, "column has dtype %s, not a number", sl_dtype_name(t->dtype));
    }
    return SL_OK;
}

static int filter_apply(const void *params, void *state, sl_op_ctx *ctx, sl_sample *s) {
    const sl_filter_params *f = params;
    double v = 0;
    SL_TRY(scalar_value(&s->col[f->col], &v));
    return sl_op__filter_match(f, v) ? SL_OK : SL_OP_DROP;
}

static void filter_describe(const void *params, char *buf, size_t cap) {
    const sl_filter_params *f = params;
    size_t n = (size_t)snprintf(buf, cap, "%s %s {", f->column, f->negate ? "not in" : "in");
    for (int i = 0; i < f->n && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%g", i ? "," : "", f->values[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "}");
}

const sl_op_def sl_op_filter = SL_OP_DEF(
    filter, "filter",
    "keep samples whose scalar column is in (or not in) a set of values",
    .flags = SL_OPF_FILTER, .params_free = filter_free, .apply = filter_apply);

/* ---- select -------------------------------------------------------------------- */

typedef struct {
    int n;
    char names[SL_MAX_COLUMNS][SL_COLNAME_MAX];
    int idx[SL_MAX_COLUMNS];
    int in_ncols;
} select_params;

static int select_parse(void *params, const cJSON *json, const char *field) {
    select_params *p = params;
    static const char *const keys[] = {"columns", NULL};
    SL_TRY(sl_op_param_check_keys(json, field, keys));
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(json, "columns");
    int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : -1;
    if (n < 1 || n > SL_MAX_COLUMNS)
        return sl__error(SL_EINVAL, "%s.columns: must be an array of 1 to %d column names", field,
                         SL_MAX_COLUMNS);
    int i = 0;
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        if (!cJSON_IsString(it) || strlen(it->valuestring) >= SL_COLNAME_MAX)
            return sl__error(SL_EINVAL, "%s.columns[%d]: must be a column name", field, i);
        snprintf(p->names[i], SL_COLNAME_MAX, "%s", it->valuestring);
    }
    p->n = n;
    return SL_OK;
}

static int select_bind(void *params, sl_colset *cols, const char *field) {
    select_params *p = params;
    sl_colset out;
    memset(&out, 0, sizeof out);
    for (int i = 0; i < p->n; i++) {
        char where[96];
        snprintf(where, sizeof where, "%s.columns[%d]", field, i);
        int c = sl_op_find_column(cols, p->names[i], where);
        if (c < 0)
            return c;
        for (int j = 0; j < i; j++)
            if (p->idx[j] == c)
                return sl__error(SL_EINVAL, "%s: column '%s' given twice", where, p->names[i]);
        p->idx[i] = c;
        out.col[i] = cols->col[c];
    }
    p->in_ncols = cols->ncols;
    out.ncols = p->n;
    *cols = out;
    return SL_OK;
}

static int select_apply(const void *params, void *state, sl_op_ctx *ctx, sl_sample *s) {
    const select_params *p = params;
    sl_tensor keep[SL_MAX_COLUMNS];
    int used[SL_MAX_COLUMNS] = {0};
    for (int i = 0; i < p->n; i++) {
        keep[i] = s->col[p->idx[i]];
        used[p->idx[i]] = 1;
    }
    for (uint32_t c = 0; c < s->ncols; c++)
        if (!used[c])
            sl_tensor_release(&s->col[c]);
    for (int i = 0; i < p->n; i++)
        s->col[i] = keep[i];
    for (uint32_t c = (uint32_t)p->n; c < s->ncols; c++)
        memset(&s->col[c], 0, sizeof s->col[c]);
    s->ncols = (uint32_t)p->n;
    return SL_OK;
}

static void select_describe(const void *params, char *buf, size_t cap) {
    const select_params *p = params;
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < p->n && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "," : "", p->names[i]);
}

const sl_op_def sl_op_select = SL_OP_DEF(
    select, "select",
    "keep the named columns, in the given order",
    .apply = select_apply);
