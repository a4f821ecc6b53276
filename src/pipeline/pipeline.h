/*
 * pipeline.h — struct sl_pipeline: what the public pipeline calls
 * (pipeline.c) hold. Private: pipeline.c includes it (exec.c may); every
 * other file gets the part it works on — stage files their stage and its
 * environment (stage.h), the executor's files the running stages (exec.h,
 * through sl_pipeline__exec) — and scripts/check_layers.sh refuses it
 * elsewhere (docs/ARCHITECTURE.md, rule R11). Never installed.
 */
#ifndef SL_PIPELINE_H
#define SL_PIPELINE_H

#include "pipeline/exec.h"

/* The consumer's side (pipeline.c; one thread). */
typedef struct sl_consumer {
    uint64_t epoch;               /* epoch of the next batch */
    int at_end;                   /* the last call returned SL_END */
    sl_resume last;               /* state after the last batch handed out */
    uint64_t replay_skip;         /* batches to drop after a replaying restore */
    uint64_t set_epochs;          /* set_epoch calls so far */
    uint64_t last_set_epoch;      /* the epoch the last one asked for */
} sl_consumer;

struct sl_pipeline {
    sl_spec *spec;                /* the pipeline's own copy */
    sl_plan plan;
    uint64_t spec_hash;           /* what a saved state must match */
    sl_stage_src in;              /* the source stage's records, order, cursor */
    sl_exec x;                    /* the running stages */
    sl_resume start;              /* where the stages start next */
    sl_consumer cons;
};

#endif /* SL_PIPELINE_H */
