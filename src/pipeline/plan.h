/*
 * plan.h — the logical and optimised plan (plan.c, optimize.c): the spec's
 * ops as nodes with their columns, and the rewrites explain shows.
 * Never installed.
 */
#ifndef SL_PLAN_H
#define SL_PLAN_H

#include "ops/op.h"
#include "pipeline/spec.h"

enum {
    SL_PN_OP = 1,          /* registry op (incl. filter, select, image ops) */
    SL_PN_MAP,             /* user map */
    SL_PN_FILTER,          /* user filter */
    SL_PN_BATCH,
    SL_PN_PREFETCH,
    SL_PN_SHUFFLE_BUFFER,
    SL_PN_TAKE,
    SL_PN_SKIP,
    SL_PN_REPEAT
};

typedef struct sl_pnode {
    int kind;
    int pos;                      /* index in spec ops */
    char label[96];               /* "decode", "map 'fn'", "decode+random_resized_crop" */
    char desc[192];               /* parameters in a few words */
    const sl_op_def *def;
    void *params;                 /* owned (SL_PN_OP) */
    sl_map_fn map;
    sl_batch_map_fn batch_map;    /* user map: the batched form, or NULL */
    sl_filter_fn filter;
    void *user;
    int vectorized;               /* runs once per batch (layout.c, choose_vectorized) */
    int64_t n;                    /* batch size, depth, count */
    int flag;                     /* batch: drop_remainder */
    int parallel;                 /* 0 default, -1 auto, > 0 */
    uint32_t nparts;
    uint32_t parts[SL_OP_MAX_PARTS];
    int pushed;                   /* filter answered from the source index */
    int after_batch;              /* take/skip counting batches */
    sl_colset cols;               /* columns after this node */
} sl_pnode;

typedef struct sl_plan {
    sl_pnode *nodes;              /* logical plan, spec order */
    int nnodes;
    sl_pnode lead;                /* has_lead: the node before the spec's ops
                                     (sl_plan__build), first in opt */
    int has_lead;
    sl_pnode *opt;                /* optimised plan */
    int nopt;
    sl_colset src_cols;
    sl_colset out_cols;
    int64_t repeat;               /* source passes per epoch (>= 1) */
    int has_batch;
    int64_t batch_size;
    int drop_remainder;
    int out_depth;                /* final queue depth (prefetch) */
    sl_filter_params *pushed[8];  /* filters answered from the index */
    int npushed;
    struct {                      /* selects moved earlier (optimize.c) */
        int pos;                  /* the select's spec position */
        int before;               /* the spec position it now precedes */
        int skipped;              /* how many ops it moved across */
    } moved[4];
    int nmoved;
    int exact_resume;             /* 1: state is (pos, counters); 0: replay */
    /* A chain rewrite whose output the device hand-off finishes (optimize.c,
     * op.h "Chain rewrites"), e.g. decode on the GPU: */
    const void *handoff;          /* the params of its node in opt, or NULL */
    sl_colset consumer_cols;      /* with handoff: the columns the consumer gets */
    const char *consumer_note;    /* with handoff: explain's words for them */
    int handoff_drop_remainder;   /* with handoff: the batch's drop_remainder, which the
                                     hand-off applies (drop_remainder is then 0) */
} sl_plan;

/* Build the logical plan from a spec, given the source's columns. `lead`
 * (or NULL): a node bound already that runs before the spec's ops, on the
 * source's samples (a mixture's per-input ops, mix_ops.c); the plan takes
 * its params, also on failure. It is not a spec op: not in `nodes`, first
 * in `opt`, its pos -1. */
int sl_plan__build(sl_plan *plan, const sl_spec *spec, const sl_colset *src_cols,
                   const sl_pnode *lead);
/* Parse one JSON op's parameters as sl_plan__build does (structural ops and
 * the op table's parse()), then drop them: sl_spec_check_op_json. */
int sl_plan__check_op(const cJSON *j, const char *field);
/* SL_OK when `name` is an op a spec may name (an engine op or a structural
 * one), else SL_EINVAL "<field>.op: unknown op 'x' (known: closest first)". */
int sl_plan__check_op_name(const char *name, const char *field);
/* Optimise: push filters into the source, fuse ops; fills plan->opt. */
int sl_plan__optimize(sl_plan *plan, int index_filters_ok);
void sl_plan__free(sl_plan *plan);
int sl_plan__is_map_like(const sl_pnode *n);
int sl_plan__is_seq(const sl_pnode *n);

#endif /* SL_PLAN_H */
