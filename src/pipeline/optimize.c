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
 *  4. Consecutive per-sample ops share one stage (one pass over a sample on
 *     one thread, no queue between them); that grouping is done by exec.c.
 */
#include "pipeline/pipeline.h"

#include <stdio.h>
#include <string.h>

int sl_plan__optimize(sl_plan *plan, int index_filters_ok) {
    plan->opt = sl__calloc((size_t)plan->nnodes + 1, sizeof *plan->opt);
    if (!plan->opt)
        return sl__oom("optimising a plan");
    int leading = 1;
    for (int i = 0; i < plan->nnodes; i++) {
        sl_pnode nd = plan->nodes[i];
        if (nd.kind == SL_PN_REPEAT)
            continue; /* the source makes the passes */
        if (leading && nd.kind == SL_PN_OP && nd.def == &sl_op_filter && index_filters_ok &&
            plan->npushed < (int)(sizeof plan->pushed / sizeof plan->pushed[0])) {
            sl_filter_params *f = nd.params;
            if (plan->src_cols.col[f->col].index_column) {
                plan->pushed[plan->npushed++] = f;
                plan->nodes[i].pushed = 1;
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
