/*
 * collate_parallel.c — parallel collation. When map + batch cannot fuse
 * (policy skip, filters left in the stages, take/skip/shuffle_buffer before
 * batch), the single final thread would copy every sample into its batch.
 * Instead it only assigns samples to batches: it stays the one place that
 * sees drops and take/skip in stream order, numbers each batch and records
 * the counters after it, but moves the samples' references into a chunk
 * (one batch-to-be) instead of copying their bytes. The collate stage after
 * it (stage_collate.c) copies them into the batch buffers on its workers,
 * and its output queue keeps the final stage's order, so batches, their
 * indices and saved states are the same bytes as when one thread collates.
 */
#include "pipeline/stage.h"

/* The batch being assigned is complete, or the epoch ends: number it and
 * pass its samples on. */
static int assign(sl_final *f) {
    sl_chunk *c = f->out;
    f->out = NULL;
    return sl_final__assigned(f, c);
}

static int parallel_add(sl_final *f, sl_sample *s, uint64_t pos, uint64_t key) {
    const sl_stage_env *e = f->st->env;
    SL_TRY(sl_stage__chunk_add(e, &f->out, f->epoch, s, pos, key));
    sl_chunk *c = f->out;
    return c->n == (uint32_t)e->plan->batch_size ? assign(f) : SL_OK;
}

/* The epoch's last, partial batch: dropped (drop_remainder) or passed on. */
static int parallel_flush(sl_final *f) {
    if (f->st->env->plan->drop_remainder && f->out) {
        sl_stage__chunk_put(f->st->env, f->out);
        f->out = NULL;
    }
    return assign(f);
}

/* A marker goes on as a chunk; the batch being assigned stays (an ERROR
 * leaves it filling, as the one-thread collator's partial batch). */
static int parallel_marker(sl_final *f, int kind, uint64_t epoch, int err_rc, const char *msg) {
    return sl_stage__emit_marker(f->st, kind, epoch, err_rc, msg);
}

static void parallel_clear(sl_final *f) {
    if (f->out)
        sl_stage__chunk_put(f->st->env, f->out);
    f->out = NULL;
}

const sl_collation sl_collate_parallel = {
    .key = "parallel", .words = "the final stage assigns samples to batches, its workers copy them",
    .final_words = "sequential, assigns samples to batches", .add = parallel_add,
    .flush = parallel_flush, .marker = parallel_marker, .clear = parallel_clear,
    .take = sl_collate__pass_batch, .drop = sl_collate__drop_batch,
};
