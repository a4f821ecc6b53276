/* test_relaxed.c — non-deterministic mode ("deterministic": false) must not
 * hang when one chunk is late: a reader stalls on one record while the other
 * readers and the map workers run ahead. */
#include "pipe_util.h"
#include "core/core.h"
#include "pipeline/exec.h"
#include "source/source.h"

#include <string.h>

#define SLOW_RECORD 3
#define NRECORDS 64

/* A source of NRECORDS int64 scalars (value = record number) whose read of
 * SLOW_RECORD takes 0.3 s the first time: its chunk reaches the queue long
 * after the chunks behind it. */
typedef struct slow_source {
    sl_source base;
    _Atomic int slowed;
} slow_source;

static int slow_read(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *out) {
    slow_source *s = (slow_source *)src;
    if (i == SLOW_RECORD && !atomic_exchange(&s->slowed, 1))
        usleep(300000);
    SL_TRY(cur->alloc(cur->alloc_ctx, &out->col[0], SL_I64, 0, NULL));
    *(int64_t *)out->col[0].data = (int64_t)i;
    out->ncols = 1;
    out->index = i;
    return SL_OK;
}

static void slow_free(sl_source *src) { sl__free(src); }

static const sl_source_vtbl slow_vtbl = {.read = slow_read, .free = slow_free};

static int identity(sl_sample *s, sl_rng *rng, void *user) {
    (void)s, (void)rng, (void)user;
    return SL_OK;
}

SL_TEST(pipeline_relaxed__late_head_chunk_does_not_hang) {
    slow_source *src = sl_source__new(sizeof *src, &slow_vtbl, "test-slow");
    ASSERT(src);
    atomic_init(&src->slowed, 0);
    snprintf(src->base.name, sizeof src->base.name, "slow");
    src->base.count = NRECORDS;
    ASSERT_OK(sl_source__add_col(&src->base, "v", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL));
    sl_spec *spec;
    ASSERT_OK(sl_spec_create(&spec));
    spec->mem = &src->base; /* the spec takes the reference */
    ASSERT_OK(sl_spec_add_map(spec, "identity", identity, NULL));
    ASSERT_OK(sl_spec_set_deterministic(spec, 0));
    ASSERT_OK(sl_spec_set_threads(spec, 2)); /* 2 readers, 2 map workers */
    spec->chunk = 1;                          /* one sample per chunk: many chunks */
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    ASSERT_EQ(sl_pipeline__exec(p)->nstages, 3); /* source, map, collate: the map runs in its own stage */
    int seen[NRECORDS] = {0};
    int n = 0;
    double t0 = pu_now();
    for (;;) {
        sl_batch *b;
        int rc = sl_pipeline_next_timeout(p, &b, 100);
        if (rc == SL_END)
            break;
        ASSERT_OK(rc);
        if (b) {
            int64_t v = *(const int64_t *)sl_batch_column(b, 0)->data;
            ASSERT(v >= 0 && v < NRECORDS);
            seen[v]++;
            n++;
            sl_batch_release(b);
        }
        if (pu_now() - t0 > 10) {
            sl_pipeline_free(p); /* cancels the stuck workers */
            sl_test_fail(__FILE__, __LINE__, "hung: %d of %d samples after 10 s", n, NRECORDS);
        }
    }
    ASSERT_EQ(n, NRECORDS);
    for (int i = 0; i < NRECORDS; i++)
        ASSERT_EQ(seen[i], 1);
    sl_pipeline_free(p);
}

/* The queue alone: a relaxed consumer takes elements away from head, but
 * never one of the next epoch before the END marker that precedes it, even
 * while that marker has not arrived (a worker still holds it). */
SL_TEST(pipeline_relaxed__next_epoch_waits_for_its_end_marker) {
    sl_queue q;
    ASSERT_OK(sl_queue__init(&q, 8, 1));
    sl_queue__start(&q, 0);
    int item[5];
    void *got;
    /* epoch 0: seqs 0, 1; its END marker: seq 2; epoch 1: seqs 3, 4 */
    ASSERT_OK(sl_queue__push(&q, 1, &item[1], 0, 0, NULL));
    ASSERT_OK(sl_queue__pop(&q, &got, NULL, 0));
    ASSERT(got == &item[1]); /* away from head, same epoch */
    ASSERT_OK(sl_queue__push(&q, 3, &item[3], 0, 1, NULL));
    ASSERT_RC(sl_queue__pop(&q, &got, NULL, 0), SL_END); /* 0 and the marker are missing */
    ASSERT_OK(sl_queue__push(&q, 0, &item[0], 0, 0, NULL));
    ASSERT_OK(sl_queue__pop(&q, &got, NULL, 0));
    ASSERT(got == &item[0]);
    ASSERT_RC(sl_queue__pop(&q, &got, NULL, 0), SL_END); /* the marker is still missing */
    ASSERT_OK(sl_queue__push(&q, 2, &item[2], 1, 0, NULL));
    ASSERT_OK(sl_queue__push(&q, 4, &item[4], 0, 1, NULL));
    ASSERT_OK(sl_queue__pop(&q, &got, NULL, 0));
    ASSERT(got == &item[2]);
    /* after the marker the head comes first; then epoch 1 is known */
    ASSERT_OK(sl_queue__pop(&q, &got, NULL, 0));
    ASSERT(got == &item[3]);
    ASSERT_OK(sl_queue__pop(&q, &got, NULL, 0));
    ASSERT(got == &item[4]);
    sl_queue__destroy(&q);
}

/* After a barrier the consumer takes the head before anything behind it:
 * until then it cannot know which epoch the elements behind belong to. */
SL_TEST(pipeline_relaxed__after_a_barrier_head_comes_first) {
    sl_queue q;
    ASSERT_OK(sl_queue__init(&q, 8, 1));
    sl_queue__start(&q, 4);
    int item[3];
    void *got;
    ASSERT_OK(sl_queue__push(&q, 0, &item[0], 1, 4, NULL)); /* an ERROR marker */
    ASSERT_OK(sl_queue__pop(&q, &got, NULL, 0));
    ASSERT(got == &item[0]);
    ASSERT_OK(sl_queue__push(&q, 2, &item[2], 0, 4, NULL));
    ASSERT_RC(sl_queue__pop(&q, &got, NULL, 0), SL_END);
    ASSERT_OK(sl_queue__push(&q, 1, &item[1], 0, 4, NULL));
    ASSERT_OK(sl_queue__pop(&q, &got, NULL, 0));
    ASSERT(got == &item[1]);
    ASSERT_OK(sl_queue__pop(&q, &got, NULL, 0));
    ASSERT(got == &item[2]);
    sl_queue__destroy(&q);
}
