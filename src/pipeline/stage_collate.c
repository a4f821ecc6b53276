/*
 * stage_collate.c — the collate stage of parallel collation
 * (collate_parallel.c): its workers take the chunks the final stage filled
 * with one batch's samples (numbered, with the counters after the batch)
 * and copy them into the batch buffers; markers become marker batches.
 * Output goes out at the chunk's seq, so the consumer sees the final
 * stage's order. (`explain --json` calls the kind "stack".)
 */
#include "pipeline/stage.h"

#include <string.h>

static int collate_chunk(sl_worker *w, sl_chunk *c) {
    sl_stage *st = w->st;
    const sl_stage_env *e = w->env;
    int rc;
    sl_stage_span t0 = sl_stage__span_begin();
    uint32_t n = c->n;
    sl_batch *b;
    if (c->kind == SL_CHUNK_DATA && (rc = sl_collate__chunk(e, c)) >= 0) {
        b = c->batch;
        c->batch = NULL;
        b->index = c->bindex;
        b->epoch = c->epoch;
        memcpy(b->counters, c->counters, sizeof b->counters);
    } else if (c->kind == SL_CHUNK_DATA) { /* as the sequential path reports it */
        char msg[SL__ERRMSG_MAX];
        sl_stage__copy_str(msg, sizeof msg, sl_errmsg());
        b = sl_collate__marker(e, SL_CHUNK_ERROR, c->epoch, rc, msg);
    } else {
        b = sl_collate__marker(e, c->kind, c->epoch, c->err_rc, c->errmsg);
    }
    sl_stage__span_end(st, w->id, t0, n);
    atomic_fetch_add_explicit(&st->elements, n, memory_order_relaxed);
    uint64_t seq = c->seq;
    sl_stage__chunk_put(e, c);
    if (!b) {
        sl_stage__worker_fail(e, SL_ENOMEM, "collate: out of memory");
        return -1;
    }
    if (sl_stage__push(st, seq, b, b->kind != SL_CHUNK_DATA, b->epoch) < 0) {
        sl_pipeline__batch_free(b);
        return -1;
    }
    return 0;
}

static const char *collate_explain(const sl_stage *st) {
    (void)st;
    return "collates batches, parallel";
}

const sl_stage_kind sl_stage_collate = {
    .key = "stack", .tunes = SL_TUNES_WORKERS, .chunk = collate_chunk,
    .explain = collate_explain,
};
