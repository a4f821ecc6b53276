/*
 * op_table.c — the registry of per-sample ops, by JSON name, and the one
 * way the engine runs them: sl_op_apply per sample, sl_op_apply_batch per
 * batch (a kernel op's loop over a batch's samples is written here once).
 *
 * To register an op defined elsewhere as `const sl_op_def sl_op_NAME`, add one
 * line `X(sl_op_NAME)` to SL_OP_TABLE below; the macro declares it and lists
 * it. Structural ops (batch, prefetch, shuffle_buffer, take, skip, repeat,
 * map with a C function) are part of the engine, not entries here.
 */
#include "ops/op.h"
#include "ops/ops.h"

#include <string.h>

#define SL_OP_TABLE(X)         \
    X(sl_op_filter)            \
    X(sl_op_select)            \
    /* image ops (image_ops.c) follow */ \
    X(sl_op_decode)            \
    X(sl_op_random_resized_crop) \
    X(sl_op_flip)              \
    X(sl_op_normalize)         \
    X(sl_op_resize)            \
    X(sl_op_center_crop)       \
    X(sl_op_rotate)            \
    X(sl_op_cast)              \
    X(sl_op_one_hot)

#define SL_OP_DECLARE(def) extern const sl_op_def def;
SL_OP_TABLE(SL_OP_DECLARE)
#undef SL_OP_DECLARE

#define SL_OP_REF(def) &def,
static const sl_op_def *const table[] = {SL_OP_TABLE(SL_OP_REF) NULL};
#undef SL_OP_REF

const sl_op_def *sl_op_lookup(const char *name) {
    for (int i = 0; table[i]; i++)
        if (strcmp(table[i]->name, name) == 0)
            return table[i];
    return NULL;
}

const sl_op_def *sl_op_at(int i) {
    if (i < 0 || i >= (int)(sizeof table / sizeof table[0]) - 1)
        return NULL;
    return table[i];
}

/* ---- the drivers ------------------------------------------------------------------ */

static int kernel_col(const sl_op_kernel *k, const void *params) {
    return *(const int *)((const char *)params + k->col_offset);
}

/* One sample through a kernel: the output from sl_op_alloc (the batch slot
 * when offered), or the column kept. */
static int kernel_apply(const sl_op_def *def, const void *params, sl_op_ctx *ctx,
                        sl_sample *s) {
    const sl_op_kernel *k = def->kernel;
    int col = kernel_col(k, params);
    const sl_tensor *in = &s->col[col];
    double scratch[SL_OP_KERNEL_SCRATCH / sizeof(double)];
    sl_tensor want, t;
    int rc = k->prepare(params, def->flags & SL_OPF_RANDOM ? sl_op_rng(ctx) : NULL, in, &want,
                        scratch);
    if (rc != SL_OK)
        return rc == SL_OP_KEEP ? SL_OK : rc;
    SL_TRY(sl_op_alloc(ctx, &t, want.dtype, want.ndim, want.shape));
    rc = k->run(params, scratch, in, &t);
    if (rc < 0) {
        sl_tensor_release(&t);
        return sl_op_cause_only(rc);
    }
    sl_op_set_column(s, col, &t);
    return SL_OK;
}

int sl_op_apply(const sl_op_def *def, const void *params, void *state, sl_op_ctx *ctx,
                sl_sample *s) {
    if (!def->kernel)
        return def->apply(params, state, ctx, s);
    if (!def->kernel->timed)
        return kernel_apply(def, params, ctx, s);
    /* timed as one phase of the op split (docs/OPS.md "Speed"), as the
     * image ops' own apply functions are */
    sl_ops__phase_sample(ctx->epoch, ctx->key);
    sl_ops__span sp;
    sl_ops__phase_open(&sp);
    int rc = kernel_apply(def, params, ctx, s);
    sl_ops__phase_close(&sp, def->kernel->phase);
    return rc;
}

int sl_op_can_batch(const sl_op_def *def, const void *params, const sl_colset *in) {
    if (!def->kernel || !def->kernel->batches)
        return 0;
    const sl_colinfo *ci = &in->col[kernel_col(def->kernel, params)];
    if (ci->encoded || ci->dtype == SL_DTYPE_INVALID || ci->ndim < 0 || ci->ndim >= SL_MAX_DIMS)
        return 0;
    for (int d = 0; d < ci->ndim; d++)
        if (ci->shape[d] < 0)
            return 0;
    return !def->kernel->image || (ci->dtype == SL_U8 && ci->ndim == 3);
}

/* A view of sample i of the stacked batch column `b` (leading dim n). */
static void batch_row(const sl_tensor *b, uint32_t i, sl_tensor *out) {
    size_t sz = b->shape[0] ? b->nbytes / (size_t)b->shape[0] : 0;
    sl_tensor_view(out, (char *)b->data + (size_t)i * sz, b->dtype, b->ndim - 1, b->shape + 1);
}

/* Does tensor `t` have the dtype and shape of `want`? */
static int shaped_as(const sl_tensor *t, const sl_tensor *want) {
    if (t->dtype != want->dtype || t->ndim != want->ndim)
        return 0;
    for (int d = 0; d < want->ndim; d++)
        if (t->shape[d] != want->shape[d])
            return 0;
    return 1;
}

/* The kernel on each sample's row: one batch tensor for the output, made at
 * the first sample the kernel changes (rows kept before it are copied in);
 * when it keeps every sample the column stays as it is. */
static int kernel_apply_batch(const sl_op_def *def, const void *params, sl_op_bctx *ctx,
                              sl_tensor *col) {
    const sl_op_kernel *k = def->kernel;
    int c = kernel_col(k, params);
    const sl_tensor *in = &col[c];
    if (in->ndim < 1 || in->ndim >= SL_MAX_DIMS || in->shape[0] != (int64_t)ctx->n)
        return sl__error(SL_EINVAL, "batch column %d is not %u stacked samples", c,
                         (unsigned)ctx->n);
    size_t row = ctx->n ? in->nbytes / ctx->n : 0;
    double scratch[SL_OP_KERNEL_SCRATCH / sizeof(double)];
    sl_tensor t = {0};
    if (k->elementwise) { /* the whole column as one sample: one call */
        sl_tensor want;
        int rc = k->prepare(params, NULL, in, &want, scratch);
        if (rc != SL_OK)
            return rc == SL_OP_KEEP ? SL_OK : rc;
        SL_TRY(sl_op_batch_alloc(ctx, &t, want.dtype, want.ndim, want.shape));
        if ((rc = k->run(params, scratch, in, &t)) < 0) {
            sl_tensor_release(&t);
            return sl_op_cause_only(rc);
        }
        sl_tensor_release(&col[c]);
        col[c] = t;
        return SL_OK;
    }
    /* one view of a row of the input and of the output, moved row by row */
    sl_tensor a, b = {0}, want;
    batch_row(in, 0, &a);
    size_t out_row = 0;
    int made = 0, rc = SL_OK;
    for (uint32_t i = 0; i < ctx->n && rc >= 0; i++) {
        sl_rng rng;
        if (def->flags & SL_OPF_RANDOM)
            sl_op_batch_rng(ctx, i, 0, &rng);
        a.data = (char *)in->data + (size_t)i * row;
        rc = k->prepare(params, def->flags & SL_OPF_RANDOM ? &rng : NULL, &a, &want, scratch);
        if (rc < 0)
            break;
        if (!made) {
            if (rc == SL_OP_KEEP) {
                rc = SL_OK;
                continue;
            }
            int64_t shape[SL_MAX_DIMS];
            shape[0] = ctx->n;
            for (int d = 0; d < want.ndim && d + 1 < SL_MAX_DIMS; d++)
                shape[d + 1] = want.shape[d];
            SL_TRY(sl_op_batch_alloc(ctx, &t, want.dtype, want.ndim + 1, shape));
            made = 1;
            batch_row(&t, 0, &b);
            out_row = b.nbytes;
            if (i > 0 && shaped_as(&t, in)) /* the rows kept so far */
                memcpy(t.data, in->data, (size_t)i * row);
            else if (i > 0)
                rc = sl__error(SL_EINVAL, "kept samples differ in shape from changed ones");
        }
        if (rc == SL_OP_KEEP) {
            if (!shaped_as(&t, in))
                rc = sl__error(SL_EINVAL, "kept samples differ in shape from changed ones");
            else
                memcpy((char *)t.data + (size_t)i * row, a.data, row);
            continue;
        }
        b.data = (char *)t.data + (size_t)i * out_row;
        if (rc >= 0 && !shaped_as(&b, &want))
            rc = sl__error(SL_EINVAL, "sample %u's output differs in shape from the batch's", i);
        if (rc >= 0 && (rc = k->run(params, scratch, &a, &b)) < 0)
            rc = sl_op_cause_only(rc);
    }
    if (rc < 0) {
        sl_tensor_release(&t);
        return rc;
    }
    if (made) {
        sl_tensor_release(&col[c]);
        col[c] = t;
    }
    return SL_OK;
}

int sl_op_apply_batch(const sl_op_def *def, const void *params, void *state, sl_op_bctx *ctx,
                      sl_tensor *col) {
    (void)state;
    if (!def->kernel || !def->kernel->batches)
        return sl__error(SL_EINVAL, "op '%s' does not run on a batch", def->name);
    return kernel_apply_batch(def, params, ctx, col);
}
