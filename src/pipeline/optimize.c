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
 *  6. Decode on the GPU: a decode op with "device": "gpu" and the ops the
 *     GPU kernel does after it become one op, decode(gpu) (gpu_decode,
 *     below); anything else after it is refused.
 */
#include "pipeline/pipeline.h"

#include <stdio.h>
#include <string.h>

static int fuse_nodes(sl_plan *plan, const sl_pnode *work, int index_filters_ok);
static int gpu_decode(sl_plan *plan);
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
    plan->opt = sl__calloc((size_t)plan->nnodes + 1, sizeof *plan->opt);
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
        rc = gpu_decode(plan);
    sl__free(work);
    if (rc < 0)
        return rc;
    return finish_plan(plan);
}

/* Filter push-down, repeat into the source and fusion over `work` (the
 * logical nodes after push_down_projections), into plan->opt. */
static int fuse_nodes(sl_plan *plan, const sl_pnode *work, int index_filters_ok) {
    int leading = 1;
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

/* 6. Decode on the GPU: a decode op with "device": "gpu", as fused above,
 * and the flip / normalize nodes after it become one gpu_decode_place node
 * (image_ops.c): the CPU reads headers and draws placements, the device
 * hand-off decodes (device_handoff.c). Only the ops the GPU kernel does may
 * follow it per sample; the sequential ops (batch, prefetch, take, skip)
 * may follow. The image column leaves the chain as encoded bytes, plus a
 * column of placements, `<image>.gpu_place`, which the hand-off consumes. */
static int gpu_decode(sl_plan *plan) {
    int at = -1;
    for (int i = 0; i < plan->nopt && at < 0; i++)
        if (plan->opt[i].kind == SL_PN_OP &&
            sl_op__decode_on_gpu(plan->opt[i].def, plan->opt[i].params))
            at = i;
    if (at < 0)
        return SL_OK;
    sl_gpu_decode g;
    int end = at;
    for (; end < plan->nopt; end++) {
        sl_pnode *nd = &plan->opt[end];
        char field[32];
        snprintf(field, sizeof field, "ops[%d]", nd->pos);
        if (nd->kind != SL_PN_OP && nd->kind != SL_PN_MAP && nd->kind != SL_PN_FILTER)
            break; /* batch, prefetch, take, skip, shuffle_buffer */
        if (nd->kind != SL_PN_OP)
            return sl__error(SL_EINVAL, "%s (%s): not supported after decode on the GPU (only "
                             "flip and normalize on the image, then batch, prefetch, take and "
                             "skip, may follow it)", field, nd->label);
        SL_TRY(sl_op__gpu_chain_add(&g, nd->def, nd->params, nd->parts, (int)nd->nparts, field));
    }
    for (int i = end; i < plan->nopt; i++) {
        const sl_pnode *nd = &plan->opt[i];
        if (nd->kind == SL_PN_OP || nd->kind == SL_PN_MAP || nd->kind == SL_PN_FILTER)
            return sl__error(SL_EINVAL, "ops[%d] (%s): not supported after decode on the GPU "
                             "(only flip and normalize on the image, then batch, prefetch, "
                             "take and skip, may follow it)", nd->pos, nd->label);
    }
    char field[32];
    snprintf(field, sizeof field, "ops[%d]", plan->opt[at].pos);
    /* the columns out of the new node: the image stays encoded bytes, the
     * placements are added (the op layer knows how) */
    sl_colset cols = plan->opt[end - 1].cols;
    SL_TRY(sl_op__gpu_chain_check(&g, &cols, field));
    /* the remainder is dropped after the hand-off refilled the batches past
     * skipped samples, as the CPU path drops it after its own skips */
    g.drop_remainder = plan->drop_remainder;
    plan->drop_remainder = 0;
    sl_gpu_decode *params = sl__calloc(1, sizeof *params);
    if (!params)
        return sl__oom("planning decode on the GPU");
    *params = g;
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
    nd.def = &sl_op_gpu_decode_place;
    nd.params = params;
    snprintf(nd.label, sizeof nd.label, "decode(gpu)");
    sl_op_gpu_decode_place.describe(params, nd.desc, sizeof nd.desc);
    nd.cols = cols;
    plan->opt[at] = nd;
    memmove(&plan->opt[at + 1], &plan->opt[end], (size_t)(plan->nopt - end) * sizeof *plan->opt);
    plan->nopt -= end - at - 1;
    for (int i = at + 1; i < plan->nopt; i++)
        plan->opt[i].cols = cols;
    plan->out_cols = cols;
    plan->gpu_decode = params;
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
