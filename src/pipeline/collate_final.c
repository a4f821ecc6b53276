/*
 * collate_final.c — the collation of one thread: the final stage copies
 * each sample that passes its sequential ops into the batch being filled
 * (collate.c's sl_collator) and passes the batch on when it is full. Picked
 * by the layout for batches over SL_FUSE_MAX_BATCH samples, a plan without
 * `batch` (each sample a batch of its own), or "parallel_collate": false.
 */
#include "pipeline/stage.h"

static int final_add(sl_final *f, sl_sample *s, uint64_t pos, uint64_t key) {
    (void)key;
    int rc = sl_collate__add(f->st->env, &f->col, s, pos, f->epoch);
    sl_pipeline__sample_release(s);
    return rc > 0 ? sl_final__batch(f, sl_collate__take(&f->col)) : rc;
}

/* The epoch's last, partial batch: dropped (drop_remainder) or passed on. */
static int final_flush(sl_final *f) {
    if (f->st->env->plan->drop_remainder)
        sl_collate__clear(&f->col);
    return sl_final__batch(f, sl_collate__take(&f->col));
}

static void final_clear(sl_final *f) { sl_collate__clear(&f->col); }

const sl_collation sl_collate_final = {
    .key = "final", .words = "one thread copies each sample into its batch",
    .final_words = "sequential, collates batches", .add = final_add, .flush = final_flush,
    .marker = sl_final__marker_batch, .clear = final_clear, .take = sl_collate__pass_batch,
    .drop = sl_collate__drop_batch,
};
