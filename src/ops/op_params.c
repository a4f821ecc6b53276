/*
 * op_params.c — the helpers op.h promises: parameter parsing with messages
 * that name the spec field, column lookup, the per-sample RNG and output
 * tensors from the context's allocator.
 */
#include "ops/op.h"
#include "core/params.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int sl_op_find_column(const sl_colset *cols, const char *name, const char *field) {
    for (int i = 0; i < cols->ncols; i++)
        if (strcmp(cols->col[i].name, name) == 0)
            return i;
    const char *names[SL_MAX_COLUMNS];
    for (int i = 0; i < cols->ncols; i++)
        names[i] = cols->col[i].name;
    char list[256];
    sl__names_closest(name, names, cols->ncols, list, sizeof list);
    return sl__error(SL_EINVAL, "%s: no column '%s' (columns: %s)", field, name,
                     cols->ncols ? list : "none");
}

int sl_op_add_column(sl_colset *cols, const char *name, const char *field) {
    if (strlen(name) == 0 || strlen(name) >= SL_COLNAME_MAX)
        return sl__error(SL_EINVAL, "%s: column name must be 1-%d bytes", field, SL_COLNAME_MAX - 1);
    for (int i = 0; i < cols->ncols; i++)
        if (strcmp(cols->col[i].name, name) == 0)
            return sl__error(SL_EINVAL, "%s: column '%s' exists already", field, name);
    if (cols->ncols >= SL_MAX_COLUMNS)
        return sl__error(SL_EINVAL, "%s: too many columns (at most %d)", field, SL_MAX_COLUMNS);
    sl_colinfo *c = &cols->col[cols->ncols];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->dtype = SL_DTYPE_INVALID;
    c->ndim = -1;
    return cols->ncols++;
}

/* ---- parameters: each helper reads its key as one entry of a parameter
 * table (core/params.h), so op parameters are checked, reported and listed
 * as every other key of a spec is. */

static const sl_param_table op_keys = {NULL, NULL, "parameter", 0, 0};

/* At most this many parameters per op (the list after an unknown one). */
#define OP_KEYS_MAX 62

int sl_op_param_check_keys(const cJSON *obj, const char *field, const char *const *allowed) {
    if (!cJSON_IsObject(obj))
        return sl__error(SL_EINVAL, "%s: must be an object", field);
    sl_param keys[OP_KEYS_MAX + 3];
    int n = 0;
    for (int i = 0; allowed && allowed[i] && n < OP_KEYS_MAX; i++)
        keys[n++] = (sl_param){.key = allowed[i], .type = SL_PARAM_ANY};
    keys[n++] = (sl_param){.key = "parallel", .type = SL_PARAM_ANY};
    keys[n++] = (sl_param){.key = "op", .type = SL_PARAM_ANY, .flags = SL_PARAM_HIDDEN};
    keys[n] = (sl_param){.key = NULL};
    const sl_param_table t = {keys, NULL, "parameter", 0, 0};
    for (const cJSON *it = obj->child; it; it = it->next)
        if (!sl_params_find(&t, it->string))
            return sl_params_unknown(&t, field, it->string ? it->string : "", NULL);
    return SL_OK;
}

static const cJSON *get(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

/* Whole numbers are exact within 2^53: wider bounds are no bound. */
#define WHOLE_MAX 9007199254740992.0

int sl_op_param_int(const cJSON *obj, const char *key, const char *field, int required,
                    int64_t def, int64_t min, int64_t max, int64_t *out) {
    sl_param p = {.key = key, .type = SL_PARAM_INT64, .flags = required ? SL_PARAM_REQUIRED : 0,
                  .min = (double)min, .max = (double)max, .def = (double)def};
    if (p.max >= WHOLE_MAX)
        p.max = p.min - 1; /* no upper bound */
    if (p.min <= -WHOLE_MAX && p.max < p.min)
        p.min = p.max = 0; /* none at all */
    if (min == 1 && max == INT64_MAX)
        p.expect = "a positive integer";
    return sl_param_value(&op_keys, &p, get(obj, key), field, out);
}

int sl_op_param_double(const cJSON *obj, const char *key, const char *field, int required,
                       double def, double min, double max, double *out) {
    sl_param p = {.key = key, .type = SL_PARAM_DOUBLE, .flags = required ? SL_PARAM_REQUIRED : 0,
                  .min = min, .max = max, .def = def};
    if (!isfinite(max))
        p.max = min - 1; /* no upper bound */
    if (!isfinite(min))
        p.min = p.max = 0; /* (only unbounded below with no upper bound is meant) */
    return sl_param_value(&op_keys, &p, get(obj, key), field, out);
}

int sl_op_param_bool(const cJSON *obj, const char *key, const char *field, int required, int def,
                     int *out) {
    sl_param p = {.key = key, .type = SL_PARAM_BOOL, .flags = required ? SL_PARAM_REQUIRED : 0,
                  .def = def};
    return sl_param_value(&op_keys, &p, get(obj, key), field, out);
}

int sl_op_param_string(const cJSON *obj, const char *key, const char *field, int required,
                       const char *def, char *out, size_t cap) {
    sl_param p = {.key = key, .type = SL_PARAM_STRING,
                  .flags = required || !def ? SL_PARAM_REQUIRED : 0, .min = 0,
                  .max = (double)(cap - 1), .def_str = def};
    const char *s = NULL;
    SL_TRY(sl_param_value(&op_keys, &p, get(obj, key), field, &s));
    if (strlen(s) >= cap) /* a default longer than the buffer */
        return sl__error(SL_EINVAL, "%s.%s: too long (at most %zu bytes)", field, key, cap - 1);
    memcpy(out, s, strlen(s) + 1);
    return SL_OK;
}

int sl_op_param_enum(const cJSON *obj, const char *key, const char *field, int required, int def,
                     const char *const *choices, int *out) {
    sl_param p = {.key = key, .type = SL_PARAM_ENUM, .flags = required ? SL_PARAM_REQUIRED : 0,
                  .names = choices, .def = def};
    return sl_param_value(&op_keys, &p, get(obj, key), field, out);
}

int sl_op_param_doubles(const cJSON *obj, const char *key, const char *field, int required,
                        int min_n, int max_n, double *out, int *n_out) {
    const cJSON *v = get(obj, key);
    *n_out = 0;
    if (cJSON_IsNumber(v) && min_n <= 1 && max_n >= 1) { /* a bare number: a list of one */
        out[0] = v->valuedouble;
        *n_out = 1;
        return SL_OK;
    }
    char expect[64];
    snprintf(expect, sizeof expect, "an array of %d to %d numbers", min_n, max_n);
    sl_param p = {.key = key, .type = SL_PARAM_ARRAY, .flags = required ? SL_PARAM_REQUIRED : 0,
                  .min = min_n, .max = max_n, .expect = expect};
    const cJSON *arr = NULL;
    SL_TRY(sl_param_value(&op_keys, &p, v, field, &arr));
    int i = 0;
    for (const cJSON *it = arr ? arr->child : NULL; it; it = it->next, i++) {
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
            return sl__error(SL_EINVAL, "%s.%s[%d]: must be a number", field, key, i);
        out[i] = it->valuedouble;
    }
    *n_out = i;
    return SL_OK;
}

sl_rng *sl_op_rng_part(sl_op_ctx *ctx, unsigned part) {
    if (part >= ctx->nparts)
        part = ctx->nparts ? ctx->nparts - 1 : 0;
    if (!(ctx->rng_ready & (1u << part))) {
        sl_rng_init(&ctx->rng[part], ctx->seed, ctx->epoch, ctx->key, ctx->pos[part]);
        ctx->rng_ready |= 1u << part;
    }
    return &ctx->rng[part];
}

sl_rng *sl_op_rng(sl_op_ctx *ctx) { return sl_op_rng_part(ctx, 0); }

void sl_op_batch_rng(const sl_op_bctx *ctx, uint32_t i, unsigned part, sl_rng *out) {
    if (part >= ctx->nparts)
        part = ctx->nparts ? ctx->nparts - 1 : 0;
    sl_rng_init(out, ctx->seed, ctx->epoch, ctx->key[i], ctx->pos[part]);
}

int sl_op_batch_alloc(sl_op_bctx *ctx, sl_tensor *out, sl_dtype dtype, int ndim,
                      const int64_t *shape) {
    return ctx->alloc(ctx->alloc_ctx, out, dtype, ndim, shape, ctx->rows);
}

/* True when the request is exactly the batch slot's per-sample dtype/shape. */
static int slot_fits(const sl_op_ctx *ctx, sl_dtype dtype, int ndim, const int64_t *shape) {
    if (!ctx->slot || dtype != ctx->slot_dtype || ndim != ctx->slot_ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (shape[i] != ctx->slot_shape[i])
            return 0;
    return 1;
}

int sl_op_alloc(sl_op_ctx *ctx, sl_tensor *out, sl_dtype dtype, int ndim, const int64_t *shape) {
    if (slot_fits(ctx, dtype, ndim, shape)) {
        /* write straight into the batch: the view keeps the batch buffer alive
         * (released with the sample), collation sees the pointer and skips
         * the copy */
        sl_tensor_view(out, ctx->slot, dtype, ndim, shape);
        out->buf = sl_buffer_retain(ctx->slot_buf);
        ctx->slot = NULL; /* handed out once */
        return SL_OK;
    }
    return ctx->alloc(ctx->alloc_ctx, out, dtype, ndim, shape);
}

int sl_op_cause_only(int rc) {
    char buf[SL__ERRMSG_MAX];
    const char *m = sl_errmsg();
    const char *colon = strstr(m, ": ");
    if (colon && !memchr(m, ' ', (size_t)(colon - m))) {
        snprintf(buf, sizeof buf, "%s", colon + 2);
        return sl__error(rc, "%s", buf);
    }
    return rc;
}
