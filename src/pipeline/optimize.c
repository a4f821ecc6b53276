/*
 * optimize.c — rewrites of the logical plan that keep its result:
 *
 *  1. Filter push-down: a `filter` on a scalar .slr column that comes before
 *     any op that could change that column is answered from the file's index
 *     (sl_reader_index_column) when the epoch order is built, so the records
 *     it drops are never read (their data pages are never touched).
 *  2. `repeat` moves into the source (the source makes `count` passes).
 *  3. Op fusion: each op is asked (sl_op_def.fuse) whether it merges with the
 *     op after it — e.g. decode + random_resized_crop into one op that decodes
 *     only the crop region at a reduced DCT scale. Repeated until no pair
 *     fuses.
 *  4. Projection push-down: a `select` moves before the per-sample ops that
 *     neither read nor write the columns it drops (push_down_projections),
 *     so those columns are released at once and the op that makes the
 *     batched image is the stage's last op, writing straight into its batch
 *     slot (op.h, "Map + batch") instead of being copied there at collation.
 *     It runs before fusion, on a copy of the logical plan, so that the moved
 *     ops still fuse (decode + random_resized_crop + flip + normalize).
 *  5. Consecutive per-sample ops share one stage (one pass over a sample on
 *     one thread, no queue between them); that grouping is done by exec.c.
 *  6. Chain rewrites: an op with a chain hook (sl_op_def.chain) may take
 *     the nodes after it into one op it returns (rewrite_chain, below) —
 *     e.g. a decode on the GPU and the flip and normalize after it become
 *     decode(gpu), whose output the device hand-off finishes.
 */
#include "pipeline/plan.h"

#include <stdio.h>
#include <string.h>

static int fuse_nodes(sl_plan *plan, const sl_pnode *work, int index_filters_ok);
static int rewrite_chains(sl_plan *plan);
static int finish_plan(sl_plan *plan);

static int colinfo_equal(const sl_colinfo *a, const sl_colinfo *b) {
    if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->ndim != b->ndim ||
        a->encoded != b->encoded || a->index_column != b->index_column)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

static int colset_equal(const sl_colset *a, const sl_colset *b) {
    if (a->ncols != b->ncols)
        return 0;
    for (int i = 0; i < a->ncols; i++)
        if (!colinfo_equal(&a->col[i], &b->col[i]))
            return 0;
    return 1;
}

/* Can `sel` (a select) run before `op` (the op right before it), given the
 * columns before `op` (`in`) and after `sel` (`out`)? Yes when, bound after
 * the select, `op` still finds its columns and the columns come out exactly
 * as before: then `op` neither reads nor writes a dropped column (binding
 * would fail) and adds none (the count would differ), and since ops reach
 * columns only through their bound names, what they compute is unchanged.
 * Binding is tried on copies of the params (bind only sets indices and
 * never allocates); on success the bound copies go back into the params and
 * *mid gets the columns between the two. */
static int try_swap(sl_pnode *op, sl_pnode *sel, const sl_colset *in, const sl_colset *out,
                    sl_colset *mid) {
    size_t ns = sel->def->params_size, no = op->def->params_size;
    void *sp = sl__malloc(ns ? ns : 1), *opp = sl__malloc(no ? no : 1);
    int ok = 0;
    if (!sp || !opp) {
        sl__free(sp);
        sl__free(opp);
        return sl__oom("optimising a plan");
    }
    memcpy(sp, sel->params, ns);
    memcpy(opp, op->params, no);
    sl_colset a = *in;
    char field[32];
    snprintf(field, sizeof field, "ops[%d]", sel->pos);
    if (sel->def->bind(sp, &a, field) == SL_OK) {
        sl_colset b = a;
        snprintf(field, sizeof field, "ops[%d]", op->pos);
        if (op->def->bind(opp, &b, field) == SL_OK && colset_equal(&b, out)) {
            memcpy(sel->params, sp, ns);
            memcpy(op->params, opp, no);
            *mid = a;
            ok = 1;
        }
    }
    sl_errclear(); /* a refused trial is not an error */
    sl__free(sp);
    sl__free(opp);
    return ok;
}

/* Move each `select` as early as try_swap allows, across spec ops only: not
 * across a filter (which may be answered from the source index while it
 * leads, and drops samples before anything is computed), a C map or filter
 * function (they see the whole sample), another select or a structural op.
 * `work` is a copy of the logical plan's nodes; the moves are recorded in
 * plan->moved for explain. */
static int push_down_projections(sl_plan *plan, sl_pnode *work, int n) {
    for (int i = 1; i < n; i++) {
        if (!(work[i].kind == SL_PN_OP && work[i].def == &sl_op_select))
            continue;
        int j = i, from = work[i].pos;
        while (j > 0) {
            sl_pnode *op = &work[j - 1];
            if (op->kind != SL_PN_OP || op->def == &sl_op_select || op->def == &sl_op_filter ||
                (op->def->flags & SL_OPF_FILTER))
                break;
            const sl_colset *in = j - 1 > 0 ? &work[j - 2].cols : &plan->src_cols;
            sl_colset mid;
            int rc = try_swap(op, &work[j], in, &work[j].cols, &mid);
            if (rc < 0)
                return rc;
            if (!rc)
                break;
            sl_pnode sel = work[j], moved = *op;
            moved.cols = sel.cols;
            sel.cols = mid;
            work[j - 1] = sel;
            work[j] = moved;
            j--;
        }
        if (j < i && plan->nmoved < (int)(sizeof plan->moved / sizeof plan->moved[0])) {
            plan->moved[plan->nmoved].pos = from;
            plan->moved[plan->nmoved].before = work[j + 1].pos;
            plan->moved[plan->nmoved].skipped = i - j;
            plan->nmoved++;
        }
    }
    return SL_OK;
}

int sl_plan__optimize(sl_plan *plan, int index_filters_ok) {
    plan->opt = sl__calloc((size_t)plan->nnodes + 2, sizeof *plan->opt);
    sl_pnode *work = sl__calloc((size_t)plan->nnodes + 1, sizeof *work);
    if (!plan->opt || !work) {
        sl__free(work);
        return sl__oom("optimising a plan");
    }
    if (plan->nnodes > 0)
        memcpy(work, plan->nodes, (size_t)plan->nnodes * sizeof *work);
    int rc = push_down_projections(plan, work, plan->nnodes);
    if (rc == SL_OK)
        rc = fuse_nodes(plan, work, index_filters_ok);
    if (rc == SL_OK)
        rc = rewrite_chains(plan);
    sl__free(work);
    if (rc < 0)
        return rc;
    return finish_plan(plan);
}

/* Filter push-down, repeat into the source and fusion over `work` (the
 * logical nodes after push_down_projections), into plan->opt. */
static int fuse_nodes(sl_plan *plan, const sl_pnode *work, int index_filters_ok) {
    int leading = 1;
    if (plan->has_lead) { /* it fuses with nothing and nothing is pushed past it */
        plan->opt[plan->nopt++] = plan->lead;
        leading = 0;
    }
    for (int i = 0; i < plan->nnodes; i++) {
        sl_pnode nd = work[i];
        if (nd.kind == SL_PN_REPEAT)
            continue; /* the source makes the passes */
        if (leading && nd.kind == SL_PN_OP && nd.def == &sl_op_filter && index_filters_ok &&
            plan->npushed < (int)(sizeof plan->pushed / sizeof plan->pushed[0])) {
            sl_filter_params *f = nd.params;
            if (plan->src_cols.col[f->col].index_column) {
                plan->pushed[plan->npushed++] = f;
                plan->nodes[nd.pos].pushed = 1;
                continue;
            }
        }
        if (!(nd.kind == SL_PN_OP && nd.def == &sl_op_filter))
            leading = 0;
        /* fusion with the previous optimised node */
        if (plan->nopt > 0 && nd.kind == SL_PN_OP) {
            sl_pnode *prev = &plan->opt[plan->nopt - 1];
            if (prev->kind == SL_PN_OP && prev->def->fuse &&
                prev->nparts + nd.nparts <= SL_OP_MAX_PARTS) {
                const sl_op_def *fdef = NULL;
                void *fparams = NULL;
                int rc = prev->def->fuse(prev->params, nd.def, nd.params, &fdef, &fparams);
                if (rc < 0)
                    return sl__error_prefix(rc, "ops[%d]: fusing %s with %s", prev->pos,
                                            prev->label, nd.label);
                if (rc > 0 && fdef && fparams) {
                    sl_pnode f = *prev;
                    if (prev->nparts > 1 && prev->params) {
                        /* an earlier fusion's params are ours to free */
                        if (prev->def->params_free)
                            prev->def->params_free(prev->params);
                        sl__free(prev->params);
                    }
                    f.def = fdef;
                    f.params = fparams;
                    for (uint32_t k = 0; k < nd.nparts; k++)
                        f.parts[f.nparts++] = nd.parts[k];
                    snprintf(f.label, sizeof f.label, "%s", fdef->name);
                    f.desc[0] = '\0';
                    if (fdef->describe)
                        fdef->describe(fparams, f.desc, sizeof f.desc);
                    f.cols = nd.cols;
                    if (nd.parallel > f.parallel || nd.parallel < 0)
                        f.parallel = nd.parallel;
                    *prev = f;
                    continue;
                }
            }
        }
        plan->opt[plan->nopt++] = nd;
    }
    return SL_OK;
}

/* 6. Chain rewrites: an op with a chain hook (op.h, "Chain rewrites") is
 * offered the nodes from it to the end; when it takes some, they become the
 * one node it returns. When that node's output is finished by the device
 * hand-off, the plan notes its params (plan->handoff) and the columns the
 * consumer gets. */
static int rewrite_chain(sl_plan *plan, int at) {
    int n = plan->nopt - at;
    sl_op_chain_node *cn = sl__calloc((size_t)n, sizeof *cn);
    if (!cn)
        return sl__oom("optimising a plan");
    for (int i = 0; i < n; i++) {
        const sl_pnode *nd = &plan->opt[at + i];
        int per_sample = sl_plan__is_map_like(nd);
        cn[i] = (sl_op_chain_node){.def = nd->kind == SL_PN_OP ? nd->def : NULL,
                                   .params = nd->kind == SL_PN_OP ? nd->params : NULL,
                                   .seq = !per_sample, .pos = nd->pos, .label = nd->label,
                                   .parts = nd->parts, .nparts = (int)nd->nparts,
                                   .cols = &nd->cols};
    }
    sl_op_chain in = {.node = cn, .n = n, .drop_remainder = plan->drop_remainder};
    sl_op_chain_out *out = sl__calloc(1, sizeof *out);
    if (!out) {
        sl__free(cn);
        return sl__oom("optimising a plan");
    }
    const sl_pnode *first = &plan->opt[at];
    int rc = first->def->chain(first->params, &in, out);
    sl__free(cn);
    if (rc <= 0) {
        sl__free(out);
        return rc;
    }
    int end = at + out->taken;
    if (out->taken < 1 || end > plan->nopt || !out->def || !out->params ||
        (out->handoff && plan->handoff)) {
        if (out->params && out->def && out->def->params_free)
            out->def->params_free(out->params);
        sl__free(out->params);
        sl__free(out);
        return sl__error(SL_EINVAL, "ops[%d] (%s): its chain rewrite gave no usable op",
                         first->pos, first->label);
    }
    sl_pnode nd = plan->opt[at];
    /* the nodes replaced: fused ones own their params (sl_plan__free) */
    nd.nparts = 0;
    for (int i = at; i < end; i++) {
        sl_pnode *o = &plan->opt[i];
        for (uint32_t k = 0; k < o->nparts && nd.nparts < SL_OP_MAX_PARTS; k++)
            nd.parts[nd.nparts++] = o->parts[k];
        if (o->nparts > 1 && o->params) {
            if (o->def->params_free)
                o->def->params_free(o->params);
            sl__free(o->params);
        }
    }
    if (nd.nparts < 2) /* it owns its params: sl_plan__free frees nodes of 2 parts or more */
        nd.parts[nd.nparts++] = nd.parts[0];
    nd.def = out->def;
    nd.params = out->params;
    snprintf(nd.label, sizeof nd.label, "%s", out->label);
    nd.desc[0] = '\0';
    if (out->def->describe)
        out->def->describe(out->params, nd.desc, sizeof nd.desc);
    nd.cols = out->cols;
    plan->opt[at] = nd;
    memmove(&plan->opt[at + 1], &plan->opt[end], (size_t)(plan->nopt - end) * sizeof *plan->opt);
    plan->nopt -= end - at - 1;
    /* the columns it gives carry on through the sequential nodes after it */
    int i = at + 1;
    for (; i < plan->nopt && !sl_plan__is_map_like(&plan->opt[i]); i++)
        plan->opt[i].cols = out->cols;
    if (i == plan->nopt)
        plan->out_cols = out->cols;
    if (out->handoff) {
        plan->handoff = out->params;
        plan->consumer_cols = out->consumer_cols;
        plan->consumer_note = out->consumer_note;
        if (out->takes_drop_remainder) {
            plan->handoff_drop_remainder = plan->drop_remainder;
            plan->drop_remainder = 0;
        }
    }
    sl__free(out);
    return SL_OK;
}

static int rewrite_chains(sl_plan *plan) {
    for (int i = 0; i < plan->nopt; i++)
        if (plan->opt[i].kind == SL_PN_OP && plan->opt[i].def->chain)
            SL_TRY(rewrite_chain(plan, i));
    return SL_OK;
}

static int finish_plan(sl_plan *plan) {
    /* prefetch after batch: depth of the final queue */
    for (int i = 0; i < plan->nopt; i++)
        if (plan->opt[i].kind == SL_PN_PREFETCH && i > 0 &&
            (plan->opt[i - 1].kind == SL_PN_BATCH || plan->opt[i - 1].after_batch))
            plan->out_depth = (int)plan->opt[i].n;
    /* Exact resume from a stream position needs every sequential op to live
     * in the final stage and no shuffle buffer (its contents are not state). */
    plan->exact_resume = 1;
    int last_map = -1;
    for (int i = 0; i < plan->nopt; i++)
        if (sl_plan__is_map_like(&plan->opt[i]))
            last_map = i;
    for (int i = 0; i < plan->nopt; i++) {
        if (plan->opt[i].kind == SL_PN_SHUFFLE_BUFFER)
            plan->exact_resume = 0;
        if (sl_plan__is_seq(&plan->opt[i]) && i < last_map)
            plan->exact_resume = 0;
    }
    return SL_OK;
}
