/*
 * exec.h — what the files that run stages share (never installed):
 *   exec.c         chunks, error and skip accounting, spans, the map stages
 *                  (and the per-sample ops every parallel stage runs),
 *                  collation in the last parallel stage, start and stop
 *   exec_source.c  the source stage: permutations, cutting stream ranges,
 *                  reading records (into samples or batch rows)
 *   exec_seq.c     sequential stages, the final (collating) stage and the
 *                  parallel collation workers
 * exec.c's DESIGN note describes the whole.
 */
#ifndef SL_EXEC_H
#define SL_EXEC_H

#include "pipeline/pipeline.h"

/* ---- chunks and errors (exec.c) ------------------------------------------ */
/* A chunk from the free list (or new), empty and of kind DATA; NULL when out
 * of memory. */
sl_chunk *sl_exec__chunk_get(sl_pipeline *p);
/* Turn `c` into an error chunk (policy fail): its samples are released. */
void sl_exec__chunk_fail(sl_pipeline *p, sl_chunk *c, int rc, const char *msg);
/* What ends a failed sample's message under policy fail: how to go on. */
#define SL_EXEC_SKIP_HINT \
    "; to drop bad samples and go on: \"on_error\": \"skip\" in the spec, .on_error(\"skip\") in Python"
/* "<where>: ops[<pos>] (<label>): <cause>" into msg, `where` naming the
 * record (sl_source__where: file, record, its path or key), ending with
 * SL_EXEC_SKIP_HINT under policy fail (the cause is cut short to keep it). */
void sl_exec__op_error(const sl_pipeline *p, char *msg, size_t cap, const char *where, int pos,
                       const char *label, const char *cause);
/* SL_EXEC_SKIP_HINT at the end of msg (policy fail), cutting what is before
 * it short when it does not fit. */
void sl_exec__add_skip_hint(const sl_pipeline *p, char *msg, size_t cap);
/* Copy with truncation (messages may be longer than a stats slot). */
void sl_exec__copy_str(char *dst, size_t cap, const char *src);
/* Policy skip: count the sample and keep the first few messages. */
void sl_exec__note_skip(sl_pipeline *p, const char *msg);
/* Policy skip: count `n` samples of the failed file whose records are
 * [first, first + count) (source failed_range); its message, `msg` about one
 * of them ("...: record N: cause"), is kept once, for the whole range. */
void sl_exec__note_skip_range(sl_pipeline_errors *e, uint64_t first, uint64_t count, uint64_t n,
                              const char *msg);
/* A worker cannot go on: store the error, wake the consumer. */
void sl_exec__worker_fail(sl_pipeline *p, int rc, const char *msg);

/* ---- a worker's unit of work (exec.c) ------------------------------------- */
/* Wall clock and this thread's CPU clock at the start of a unit of work. */
typedef struct sl_exec_span {
    uint64_t t0, c0;
} sl_exec_span;
sl_exec_span sl_exec__span_begin(void);
/* Count the busy and CPU time since `sp` for the stage; trace the span. */
void sl_exec__span_end(sl_pipeline *p, sl_stage *st, int worker, sl_exec_span sp, uint32_t n);
/* Park a worker autotune has made inactive. */
void sl_exec__worker_gate(sl_pipeline *p, sl_worker *w);
/* The next chunk from the stage before `st` (NULL: the queue closed). */
sl_chunk *sl_exec__stage_input(sl_pipeline *p, sl_stage *st);
/* A parallel stage's worker loop: wait while parked (worker_gate), take the
 * next chunk (stage_input), hand it to `handle`; until the input ends or
 * `handle` returns < 0 (cancelled, or the stage's queue closed). */
void sl_exec__each_input(sl_worker *w, int (*handle)(sl_worker *w, sl_chunk *c));
/* Run the stage's per-sample ops over a data chunk; -1 on cancel (the chunk
 * has been recycled). */
int sl_exec__process_chunk(sl_pipeline *p, sl_worker *w, sl_chunk *c);
/* The tail every parallel stage runs on a chunk it worked on (t0 .. now, n
 * elements): collate it when the stage is the collating one, count the span
 * and the elements. */
void sl_exec__chunk_done(sl_pipeline *p, sl_worker *w, sl_chunk *c, sl_exec_span t0, uint32_t n);
/* Push `item` (a chunk or a batch) at `seq` to the stage's queue, counting
 * the wait; what sl_queue__push returns. */
int sl_exec__push(sl_stage *st, uint64_t seq, void *item, int barrier, uint64_t epoch);
/* Push `c` at its seq to the stage's queue (a barrier unless DATA),
 * counting the wait; on a closed queue the chunk is recycled and -1
 * returned. */
int sl_exec__push_chunk(sl_pipeline *p, sl_stage *st, sl_chunk *c);

/* ---- thread bodies --------------------------------------------------------- */
void *sl_exec__source_main(void *arg);  /* exec_source.c */
void *sl_exec__seq_main(void *arg);     /* exec_seq.c */
/* One chunk of the SL_ST_STACK stage (sl_exec__each_input's handle). */
int sl_exec__stack_chunk(sl_worker *w, sl_chunk *c); /* exec_seq.c */

#endif /* SL_EXEC_H */
