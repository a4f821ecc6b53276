/* test_chain_rewrite.c — the optimiser's chain rewrites (optimize.c step 6,
 * op.h "Chain rewrites") for any op with a chain hook: the nodes the hook
 * takes become the one node it returns, the sequential nodes after it carry
 * its columns, a hand-off node is noted with the columns the consumer gets,
 * and a hook's refusal is the plan's error. The ops here are the test's
 * own, so nothing in the optimiser may know them by name. */
#include "core/core.h"
#include "pipeline/plan.h"
#include "test.h"

#include <string.h>

typedef struct head_params {
    int mode; /* 0: no rewrite, 1: rewrite, 2: hand-off rewrite, 3: refuse */
} head_params;
typedef struct merged_params {
    int taken;
    int first_pos;
} merged_params;

static int t_parse(void *params, const cJSON *json, const char *field) {
    (void)params;
    (void)json;
    (void)field;
    return SL_OK;
}
static int t_bind(void *params, sl_colset *cols, const char *field) {
    (void)params;
    (void)cols;
    (void)field;
    return SL_OK;
}
static int t_apply(const void *params, void *state, sl_op_ctx *ctx, sl_sample *s) {
    (void)params;
    (void)state;
    (void)ctx;
    (void)s;
    return SL_OK;
}
static void merged_describe(const void *params, char *buf, size_t cap) {
    snprintf(buf, cap, "took %d", ((const merged_params *)params)->taken);
}

static const sl_op_def part_def = {.name = "t_part", .params_size = sizeof(int),
                                   .parse = t_parse, .bind = t_bind, .apply = t_apply};
static const sl_op_def merged_def = {.name = "t_merged", .params_size = sizeof(merged_params),
                                     .parse = t_parse, .bind = t_bind, .apply = t_apply,
                                     .describe = merged_describe};

/* Takes itself and the t_part nodes right after it; its output adds a
 * column "extra"; a hand-off also drops it again for the consumer. */
static int head_chain(const void *params, const sl_op_chain *in, sl_op_chain_out *out) {
    const head_params *h = params;
    if (h->mode == 0)
        return 0;
    int n = 1;
    while (n < in->n && in->node[n].def == &part_def)
        n++;
    if (h->mode == 3)
        return sl__error(SL_EINVAL, "ops[%d] (%s): refused by the head", in->node[n].pos,
                         in->node[n].label);
    merged_params *m = sl__calloc(1, sizeof *m);
    if (!m)
        return sl__oom("test");
    m->taken = n;
    m->first_pos = in->node[0].pos;
    out->taken = n;
    out->def = &merged_def;
    out->params = m;
    snprintf(out->label, sizeof out->label, "merged");
    out->cols = *in->node[n - 1].cols;
    snprintf(out->cols.col[out->cols.ncols].name, SL_COLNAME_MAX, "extra");
    out->cols.col[out->cols.ncols].dtype = SL_F64;
    out->cols.ncols++;
    if (h->mode == 2) {
        out->handoff = 1;
        out->takes_drop_remainder = in->drop_remainder;
        out->consumer_cols = *in->node[n - 1].cols;
        out->consumer_note = " (finished at the hand-off)";
    }
    return 1;
}

static const sl_op_def head_def = {.name = "t_head", .params_size = sizeof(head_params),
                                   .parse = t_parse, .bind = t_bind, .apply = t_apply,
                                   .chain = head_chain};

/* head, part, part, batch(8, drop_remainder), take(3) */
static void make_plan(sl_plan *plan, int mode) {
    memset(plan, 0, sizeof *plan);
    plan->nodes = sl__calloc(5, sizeof *plan->nodes);
    ASSERT(plan->nodes);
    plan->nnodes = 5;
    sl_colset cols = {0};
    snprintf(cols.col[0].name, SL_COLNAME_MAX, "v");
    cols.col[0].dtype = SL_I64;
    cols.ncols = 1;
    for (int i = 0; i < 5; i++) {
        sl_pnode *nd = &plan->nodes[i];
        nd->pos = i;
        nd->nparts = 1;
        nd->parts[0] = (uint32_t)i;
        nd->cols = cols;
        if (i < 3) {
            nd->kind = SL_PN_OP;
            nd->def = i == 0 ? &head_def : &part_def;
            nd->params = sl__calloc(1, nd->def->params_size);
            ASSERT(nd->params);
            if (i == 0)
                ((head_params *)nd->params)->mode = mode;
            snprintf(nd->label, sizeof nd->label, "%s", nd->def->name);
        } else if (i == 3) {
            nd->kind = SL_PN_BATCH;
            nd->n = 8;
            nd->flag = 1;
            snprintf(nd->label, sizeof nd->label, "batch");
        } else {
            nd->kind = SL_PN_TAKE;
            nd->n = 3;
            nd->after_batch = 1;
            snprintf(nd->label, sizeof nd->label, "take");
        }
    }
    plan->out_cols = cols;
    plan->has_batch = 1;
    plan->batch_size = 8;
    plan->drop_remainder = 1;
}

SL_TEST(pipeline_chain_rewrite__rewrites_any_op_with_a_hook) {
    sl_plan plan;
    make_plan(&plan, 1);
    ASSERT_OK(sl_plan__optimize(&plan, 0));
    ASSERT_EQ(plan.nopt, 3);
    const sl_pnode *m = &plan.opt[0];
    ASSERT(m->def == &merged_def);
    ASSERT_STR_EQ(m->label, "merged");
    ASSERT_STR_EQ(m->desc, "took 3");
    ASSERT_EQ(m->nparts, 3);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(m->parts[i], (uint32_t)i);
    ASSERT_EQ(((const merged_params *)m->params)->taken, 3);
    ASSERT_EQ(((const merged_params *)m->params)->first_pos, 0);
    ASSERT_EQ(m->cols.ncols, 2);
    /* the batch and the take after it carry the new columns, and so does the plan */
    ASSERT_EQ(plan.opt[1].kind, SL_PN_BATCH);
    ASSERT_EQ(plan.opt[2].kind, SL_PN_TAKE);
    ASSERT_EQ(plan.opt[1].cols.ncols, 2);
    ASSERT_EQ(plan.opt[2].cols.ncols, 2);
    ASSERT_EQ(plan.out_cols.ncols, 2);
    ASSERT_STR_EQ(plan.out_cols.col[1].name, "extra");
    ASSERT(plan.handoff == NULL);
    ASSERT_EQ(plan.drop_remainder, 1);
    sl_plan__free(&plan); /* ASan: the merged params are freed once, the parts' too */
}

SL_TEST(pipeline_chain_rewrite__handoff_takes_the_remainder) {
    sl_plan plan;
    make_plan(&plan, 2);
    ASSERT_OK(sl_plan__optimize(&plan, 0));
    ASSERT_EQ(plan.nopt, 3);
    ASSERT(plan.handoff == plan.opt[0].params);
    ASSERT_EQ(plan.drop_remainder, 0);
    ASSERT_EQ(plan.handoff_drop_remainder, 1);
    ASSERT_EQ(plan.consumer_cols.ncols, 1);
    ASSERT_STR_EQ(plan.consumer_note, " (finished at the hand-off)");
    ASSERT_EQ(plan.out_cols.ncols, 2);
    sl_plan__free(&plan);
}

SL_TEST(pipeline_chain_rewrite__no_rewrite_and_refusal) {
    sl_plan plan;
    make_plan(&plan, 0); /* the hook says no: the plan is as fusion left it */
    ASSERT_OK(sl_plan__optimize(&plan, 0));
    ASSERT_EQ(plan.nopt, 5);
    ASSERT(plan.opt[0].def == &head_def);
    ASSERT(plan.handoff == NULL);
    ASSERT_EQ(plan.drop_remainder, 1);
    sl_plan__free(&plan);
    make_plan(&plan, 3); /* the hook refuses the batch after the parts */
    ASSERT_RC(sl_plan__optimize(&plan, 0), SL_EINVAL);
    ASSERT_STR_EQ(sl_errmsg(), "ops[3] (batch): refused by the head");
    sl_plan__free(&plan);
}
