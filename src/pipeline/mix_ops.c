/*
 * mix_ops.c — a mixture's per-input ops (docs/PIPELINE.md, "Mixtures"):
 * {"kind": "mix", "inputs": [{"path": ..., "ops": [...]}, ...]}.
 *
 * Each input's ops are planned as a pipeline of their own would plan them
 * (sl_plan__build and sl_plan__optimize on that input's own columns: the
 * same binding, fusion and messages), and the inputs' chains become one
 * per-sample op, the first of the blend's chain: for each sample it finds
 * the input the sample came from (its record number in the concatenated
 * source, sl_source__concat_raw) and runs that input's chain, then puts the
 * columns in the blend's order (the mix's "columns", else the first input's
 * after its ops) and adds the source column. The executor runs it as any
 * op, on any stage and thread, so nothing else knows of per-input ops.
 *
 * The columns are checked after the ops: every input must have each of the
 * blend's columns with the same dtype, dimensions and fixed sizes, where the
 * plan knows them; a mismatch names both inputs and the column.
 *
 * Random ops: an input's op j draws from the generator keyed by (seed,
 * epoch, the sample's key, position 2^30 + 2^16 k + j): the sample's
 * key is the mix's (the input's own record key times the inputs' count plus
 * k), and the position is one no op of the blend's chain has, so an input's
 * draws and the blend's are independent.
 */
#include "pipeline/stage.h"

#include <stdio.h>
#include <string.h>

#define MIX_OPS_POS 0x40000000u

typedef struct mix_in {
    sl_plan plan;                 /* the input's ops, planned on its own columns */
    int map[SL_MAX_COLUMNS];      /* output column c: the input's column after its ops */
    int same;                     /* its columns after its ops are the output's, in order */
    int first;                    /* its first op's worker state (all inputs' in one array) */
} mix_in;

typedef struct mix_ops_params {
    sl_op_def def;                /* the op's table, its flags from the inputs' ops */
    int n;
    sl_source *src;               /* the inputs' concatenation (a reference): which
                                     input a record is of */
    int nstates;
    int ncols;                    /* the blend's columns */
    int src_col;                  /* the source column, -1: none */
    int64_t ids[SL_MIX_MAX];      /* 0 .. n-1: the source column's values */
    mix_in *in;                   /* n */
} mix_ops_params;

static int mix_ops_bind(void *params, sl_colset *cols, const char *field) {
    (void)params;
    (void)cols;
    /* bound when it was made (sl_mix__ops_node); asked again only by an
     * optimiser trial, which this refuses */
    return sl__error(SL_EINVAL, "%s: the inputs' ops are bound once", field);
}

static void mix_ops_free(void *params) {
    mix_ops_params *P = params;
    for (int k = 0; P->in && k < P->n; k++)
        sl_plan__free(&P->in[k].plan);
    sl__free(P->in);
    sl_source__release(P->src);
}

static void mix_ops_worker_free(void *state) {
    /* the params are not at hand here: the state array ends with them */
    void **st = state;
    if (!st)
        return;
    const mix_ops_params *P = st[0];
    for (int k = 0; k < P->n; k++) {
        const sl_plan *pl = &P->in[k].plan;
        for (int j = 0; j < pl->nopt; j++) {
            const sl_pnode *nd = &pl->opt[j];
            void *s = st[1 + P->in[k].first + j];
            if (s && nd->kind == SL_PN_OP && nd->def->worker_free)
                nd->def->worker_free(s);
        }
    }
    sl__free(st);
}

static int mix_ops_worker_init(const void *params, void **state_out) {
    const mix_ops_params *P = params;
    void **st = sl__calloc((size_t)P->nstates + 1, sizeof *st);
    *state_out = NULL;
    if (!st)
        return sl__oom("starting a mix's input ops");
    st[0] = (void *)P;
    for (int k = 0; k < P->n; k++) {
        const sl_plan *pl = &P->in[k].plan;
        for (int j = 0; j < pl->nopt; j++) {
            const sl_pnode *nd = &pl->opt[j];
            if (nd->kind != SL_PN_OP || !nd->def->worker_init)
                continue;
            int rc = nd->def->worker_init(nd->params, &st[1 + P->in[k].first + j]);
            if (rc < 0) {
                mix_ops_worker_free(st);
                return sl__error_prefix(rc, "source.inputs[%d].ops[%d] (%s)", k, nd->pos,
                                        nd->label);
            }
        }
    }
    *state_out = st;
    return SL_OK;
}

/* The sample's columns in the blend's order: input k's column map[c] as
 * column c, the source column, the others released. */
static void to_blend_columns(const mix_ops_params *P, const mix_in *in, int k, sl_sample *s) {
    sl_tensor cols[SL_MAX_COLUMNS];
    int used[SL_MAX_COLUMNS] = {0};
    for (int c = 0; c < P->ncols; c++) {
        if (c == P->src_col) {
            sl_tensor_view(&cols[c], (void *)&P->ids[k], SL_I64, 0, NULL);
            continue;
        }
        cols[c] = s->col[in->map[c]];
        used[in->map[c]] = 1;
    }
    for (uint32_t j = 0; j < s->ncols; j++)
        if (!used[j])
            sl_tensor_release(&s->col[j]);
    memcpy(s->col, cols, (size_t)P->ncols * sizeof cols[0]);
    s->ncols = (uint32_t)P->ncols;
}

static int mix_ops_apply(const void *params, void *state, sl_op_ctx *ctx, sl_sample *s) {
    const mix_ops_params *P = params;
    void **st = state;
    int k = sl_source__concat_input(P->src, ctx->index, NULL);
    const mix_in *in = &P->in[k];
    const sl_plan *pl = &in->plan;
    for (int j = 0; j < pl->nopt; j++) {
        const sl_pnode *nd = &pl->opt[j];
        sl_op_ctx c = *ctx;
        c.nparts = nd->nparts;
        for (uint32_t q = 0; q < nd->nparts; q++)
            c.pos[q] = MIX_OPS_POS + ((uint32_t)k << 16) + nd->parts[q];
        c.rng_ready = 0;
        /* the batch slot (op.h, "Map + batch") only where the input's last
         * op makes the blend's columns in place */
        c.slot = j == pl->nopt - 1 && in->same ? ctx->slot : NULL;
        int rc = sl_op_apply(nd->def, nd->params, st[1 + in->first + j], &c, s);
        if (rc == SL_OP_DROP)
            return SL_OP_DROP;
        if (rc < 0) {
            const char *cause = sl_errmsg();
            return sl__error(rc, "source.inputs[%d].ops[%d] (%s): %s", k, nd->pos, nd->label,
                             cause[0] ? cause : sl_status_str(rc));
        }
    }
    if (!in->same)
        to_blend_columns(P, in, k, s);
    return SL_OK;
}

static void mix_ops_describe(const void *params, char *buf, size_t cap) {
    const mix_ops_params *P = params;
    size_t n = 0;
    buf[0] = '\0';
    for (int k = 0; k < P->n && n < cap; k++) {
        const sl_plan *pl = &P->in[k].plan;
        n += (size_t)snprintf(buf + n, cap - n, "%sinput %d:", k ? "; " : "", k);
        for (int j = 0; j < pl->nnodes && n < cap; j++)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", j ? ", " : " ", pl->nodes[j].label);
        if (!pl->nnodes && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, " as read");
        if (pl->nopt != pl->nnodes && n < cap) { /* fused: as it runs */
            n += (size_t)snprintf(buf + n, cap - n, " (running as");
            for (int j = 0; j < pl->nopt && n < cap; j++)
                n += (size_t)snprintf(buf + n, cap - n, " %s", pl->opt[j].label);
            if (n < cap)
                n += (size_t)snprintf(buf + n, cap - n, ")");
        }
    }
}

static const sl_op_def mix_ops_def = {
    .name = "mix inputs' ops",
    .summary = "each sample through its input's own ops, then in the blend's columns",
    .params_size = sizeof(mix_ops_params),
    .bind = mix_ops_bind,
    .params_free = mix_ops_free,
    .worker_init = mix_ops_worker_init,
    .worker_free = mix_ops_worker_free,
    .apply = mix_ops_apply,
    .describe = mix_ops_describe,
};

/* ---- making it -------------------------------------------------------------------------- */

static int find(const sl_colset *cols, const char *name) {
    for (int c = 0; c < cols->ncols; c++)
        if (!strcmp(cols->col[c].name, name))
            return c;
    return -1;
}

/* Do input k's column `b` and the blend's `a` agree where both are known?
 * If not, say how into why. a: merged into (dims that vary, unknowns). */
static int agree(sl_colinfo *a, const sl_colinfo *b, char *why, size_t cap) {
    if (a->dtype != SL_DTYPE_INVALID && b->dtype != SL_DTYPE_INVALID && a->dtype != b->dtype) {
        snprintf(why, cap, "dtype %s vs %s", sl_dtype_name(a->dtype), sl_dtype_name(b->dtype));
        return 0;
    }
    if (a->encoded != b->encoded) {
        snprintf(why, cap, "%s vs %s", a->encoded ? "encoded" : "decoded",
                 b->encoded ? "encoded" : "decoded");
        return 0;
    }
    if (a->ndim >= 0 && b->ndim >= 0) {
        int ok = a->ndim == b->ndim;
        for (int d = 0; ok && d < a->ndim; d++)
            ok = a->shape[d] < 0 || b->shape[d] < 0 || a->shape[d] == b->shape[d];
        if (!ok) {
            char sa[96], sb[96];
            size_t na = 0, nb = 0;
            sa[0] = sb[0] = '\0';
            for (int d = 0; d < a->ndim && na < sizeof sa; d++)
                na += (size_t)snprintf(sa + na, sizeof sa - na, "%s%lld", d ? "x" : "",
                                       (long long)a->shape[d]);
            for (int d = 0; d < b->ndim && nb < sizeof sb; d++)
                nb += (size_t)snprintf(sb + nb, sizeof sb - nb, "%s%lld", d ? "x" : "",
                                       (long long)b->shape[d]);
            snprintf(why, cap, "shapes differ ([%s] vs [%s])", sa, sb);
            return 0;
        }
        for (int d = 0; d < a->ndim; d++)
            if (b->shape[d] < 0)
                a->shape[d] = -1;
    }
    if (b->dtype == SL_DTYPE_INVALID)
        a->dtype = SL_DTYPE_INVALID;
    if (b->ndim < 0)
        a->ndim = -1;
    a->text = a->text && b->text;
    a->index_column = 0;
    return 1;
}

static int plan_input(mix_in *in, const sl_spec *spec, const sl_colset *cols, int k,
                      const char *label) {
    int rc = sl_plan__build(&in->plan, spec, cols, NULL);
    if (rc == SL_OK)
        rc = sl_plan__optimize(&in->plan, 0);
    if (rc < 0)
        return sl__error_prefix(rc, "source.inputs[%d] (%s)", k, label);
    for (int j = 0; j < in->plan.nopt; j++)
        if (in->plan.opt[j].kind != SL_PN_OP) /* the spec takes JSON ops only */
            return sl__error(SL_EINVAL, "source.inputs[%d].ops[%d] (%s): not a per-sample op",
                             k, in->plan.opt[j].pos, in->plan.opt[j].label);
    if (in->plan.handoff)
        return sl__error(SL_EINVAL, "source.inputs[%d]: its ops end on the device: put them "
                                    "on the mix", k);
    return SL_OK;
}

int sl_mix__ops_node(sl_pnode *out, const sl_spec *spec, const sl_stage_src *src) {
    const sl_spec_mix *ms = spec->mix;
    char labels[SL_MIX_MAX][160];
    for (int k = 0; k < ms->n; k++)
        snprintf(labels[k], sizeof labels[k], "%.150s", sl_source_name(src->mix->in[k].src));
    memset(out, 0, sizeof *out);
    mix_ops_params *P = sl__calloc(1, sizeof *P);
    if (!P)
        return sl__oom("planning a mix's input ops");
    int rc = SL_OK;
    P->def = mix_ops_def;
    P->src = sl_source__retain(src->src);
    P->n = ms->n;
    P->src_col = -1;
    if (!(P->in = sl__calloc((size_t)ms->n, sizeof *P->in)))
        SL_FAIL(SL_ENOMEM, "out of memory while planning a mix's input ops");
    for (int k = 0; k < ms->n; k++) {
        mix_in *in = &P->in[k];
        sl_colset in_cols;
        sl_stage_src__colset(src->mix->in[k].src, &in_cols);
        P->ids[k] = k;
        SL_CHECK(plan_input(in, ms->in[k], &in_cols, k, labels[k]));
        in->first = P->nstates;
        P->nstates += in->plan.nopt;
        for (int j = 0; j < in->plan.nopt; j++) {
            const sl_op_def *d = in->plan.opt[j].def;
            P->def.flags |= d->flags & (SL_OPF_RANDOM | SL_OPF_FILTER);
        }
    }
    /* the blend's columns: those kept, else the first input's after its
     * ops; each found in every input and agreeing */
    sl_colset cols;
    memset(&cols, 0, sizeof cols);
    const sl_colset *a = &P->in[0].plan.out_cols;
    int ncols = ms->ncols ? ms->ncols : a->ncols;
    for (int c = 0; c < ncols; c++) {
        const char *name = ms->ncols ? ms->cols[c] : a->col[c].name;
        int ac = find(a, name);
        if (ac < 0)
            SL_FAIL(SL_EINVAL, "mix: columns: inputs[0] (%s) has no column '%s' after its ops",
                    labels[0], name);
        cols.col[c] = a->col[ac];
        cols.ncols = c + 1;
        for (int k = 0; k < ms->n; k++) {
            const sl_colset *b = &P->in[k].plan.out_cols;
            int j = find(b, name);
            char why[256];
            if (j < 0)
                SL_FAIL(SL_EINVAL, "mix: inputs[%d] (%s) has no column '%s' after its ops that "
                                   "inputs[0] (%s) has (its columns must be the same: keep the "
                                   "common ones with the mix's \"columns\")",
                        k, labels[k], name, labels[0]);
            if (!agree(&cols.col[c], &b->col[j], why, sizeof why))
                SL_FAIL(SL_EINVAL, "mix: inputs[0] (%s) and inputs[%d] (%s) differ in column "
                                   "'%s' after their ops: %s (make them agree with the inputs' "
                                   "ops: decode, resize, cast)",
                        labels[0], k, labels[k], name, why);
            P->in[k].map[c] = j;
        }
    }
    for (int k = 1; k < ms->n && !ms->ncols; k++) {
        const sl_colset *b = &P->in[k].plan.out_cols;
        for (int j = 0; j < b->ncols; j++)
            if (find(a, b->col[j].name) < 0)
                SL_FAIL(SL_EINVAL, "mix: inputs[%d] (%s) has a column '%s' after its ops that "
                                   "inputs[0] (%s) has not (its columns must be the same: keep "
                                   "the common ones with the mix's \"columns\")",
                        k, labels[k], b->col[j].name, labels[0]);
    }
    if (ms->column[0]) {
        if (find(&cols, ms->column) >= 0)
            SL_FAIL(SL_EINVAL, "mix: source_column '%s' is a column of the inputs already; "
                               "name it otherwise", ms->column);
        rc = sl_op_add_column(&cols, ms->column, "source.source_column");
        if (rc < 0)
            goto cleanup;
        P->src_col = rc;
        rc = SL_OK;
        cols.col[P->src_col].dtype = SL_I64;
        cols.col[P->src_col].ndim = 0;
    }
    P->ncols = cols.ncols;
    for (int k = 0; k < ms->n; k++) {
        mix_in *in = &P->in[k];
        in->same = P->src_col < 0 && in->plan.out_cols.ncols == P->ncols;
        for (int c = 0; c < P->ncols && in->same; c++)
            in->same = in->map[c] == c;
    }
    out->kind = SL_PN_OP;
    out->pos = -1;
    out->def = &P->def;
    out->params = P;
    out->nparts = 1;
    snprintf(out->label, sizeof out->label, "%s", mix_ops_def.name);
    mix_ops_describe(P, out->desc, sizeof out->desc);
    out->cols = cols;
    return SL_OK;
cleanup:
    mix_ops_free(P);
    sl__free(P);
    return rc;
}
