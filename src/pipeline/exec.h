/*
 * exec.h — the executor: a pipeline's running stages as a whole (sl_exec),
 * for the files that lay them out, size, tune, start, stop and report them
 * (layout.c, memory.c, autotune.c, exec.c, stats.c, trace.c, pipeline.c).
 * Never installed. Stage files see one stage and its environment (stage.h),
 * never this.
 *
 * DESIGN
 * ------
 * The optimised plan is cut into stages (layout.c), each a pool of threads
 * with a bounded output queue (queue.c), each an implementation of the stage
 * interface (stage.h):
 *
 *   source (N readers) -> map stage (N workers) [-> seq stage -> map ...]
 *                      -> final stage (1 thread: take/skip/shuffle_buffer,
 *                         batch)
 *                      [-> collate stage (N workers)] -> hand-off -> consumer
 *
 * Collation happens in one of three places; the layout picks its
 * implementation once (sl_exec_layout.collation). With map + batch fusion
 * (collate_fused.c) the last parallel stage collates whole-batch chunks and
 * the final stage only passes batches on (or is left out: direct mode, the
 * hand-off takes batches from the collating stage). Without fusion (samples
 * can be dropped before batch), the final stage applies drops, take/skip
 * and shuffle buffers in stream order and either copies each sample into
 * its batch itself (collate_final.c: batches over SL_FUSE_MAX_BATCH, no
 * batch op, or "parallel_collate": false) or only assigns samples to
 * batches, numbering each and recording the counters after it, and passes
 * each batch's samples on by reference to the collate stage, whose workers
 * copy them (collate_parallel.c, stage_collate.c) and push each batch at
 * the chunk's seq, so the consumer gets the final stage's order and the
 * same bytes, index and resume state as with one thread. A batch being
 * assigned stays in the final stage across an ERROR marker, as the
 * one-thread collator's partial batch does.
 *
 * Elements moving between stages are chunks: runs of up to chunk_size
 * consecutive samples, so that a queue operation is paid once per chunk, not
 * per sample. The source numbers chunks (seq) in stream order; parallel
 * stages keep the number, and their consumers reorder by it, so the final
 * stage sees samples in exactly the stream order whatever the timing
 * (deterministic mode). Sequential stages renumber their output.
 *
 * Every random draw is keyed by (seed, epoch, sample key, op position), so a
 * sample's result does not depend on the thread that made it.
 *
 * Epochs: when the source finishes an epoch it sends an END chunk (a
 * barrier) and, if the next epoch is below cur.end_epoch, goes straight on
 * with it: the pipeline fills with epoch e+1 while the consumer finishes e.
 * Otherwise the source parks until set_epoch() moves the end. Threads are
 * started once (first sl_pipeline_next) and live across epochs; only a jump
 * to another position (set_epoch mid-epoch, restore_state) stops and
 * restarts them, each stage taking its part of the position (the kind's
 * start).
 *
 * Errors: a failing read or op under policy fail turns its chunk into an
 * ERROR chunk (a barrier) carrying the message; it reaches the consumer in
 * stream order, so the error comes at the same batch on every run. Under
 * policy skip the sample is dropped and counted.
 *
 * Cancel: sl_exec__stop sets `cancel`, closes every queue (waking blocked
 * pushes and pops), broadcasts the gate and calls each kind's wake (the
 * source's parked readers); workers check `cancel` between samples, so a
 * slow op delays shutdown by at most one sample. Then all threads are
 * joined.
 *
 * Lock order: never hold two of {cur.mu, a queue's mu, chunks.mu, err.mu,
 * gate.mu} at once, except cur.mu -> chunks.mu (taking a chunk while
 * cutting a range). Pools lock internally.
 */
#ifndef SL_EXEC_H
#define SL_EXEC_H

#include "pipeline/stage.h"

/* Steady ticks (no move) before autotune explores past its rule (autotune.c). */
#define SL_TUNE_STEADY 3

/* Autotune's memory between ticks (autotune.c). */
typedef struct sl_tune {
    uint64_t samples, batches;    /* samples_out, batches_out at the last tick */
    uint64_t consumer_wait;       /* consumer_wait_ns at the last tick */
    int trial;                    /* a move is being measured */
    double base_rate;             /* samples/s in the interval before it */
    int prev[SL_STATS_MAX_STAGES];   /* workers before it (for the undo) */
    int banned[SL_STATS_MAX_STAGES]; /* the workers of a move undone ... */
    uint64_t ban_until;           /* ... not tried again before this time */
    int moves, undone;            /* counts (tests) */
    /* exploring past the rule (autotune.c): one worker more or fewer on the
     * costliest stage, kept only when measured to help */
    int extra[SL_STATS_MAX_STAGES]; /* workers kept on top of the rule's */
    int exploring;                /* the pending check is of an exploration: its
                                     intervals left to measure */
    double trial_sum;             /* exploration: samples/s summed over its intervals */
    int steady;                   /* ticks without a move */
    double recent[SL_TUNE_STEADY]; /* samples/s of the last of them (a ring) */
    uint64_t explore_after;       /* no exploration before this time */
    int failed;                   /* explorations not kept in a row */
    int explored, kept;           /* counts (tests) */
    int deep;                     /* the consumer's queue uses its spare slots
                                     for ordering stalls (autotune.c) */
    uint64_t last_ns;             /* the last tick */
} sl_tune;

/* The memory plan (memory.c, set at create). */
typedef struct sl_exec_memory {
    uint64_t limit;               /* bytes the pipeline may hold */
    uint64_t batch_bytes;         /* one batch's fixed-shape columns, as pooled
                                     (0: no batch or none known) */
    uint64_t batches_held;        /* batch buffers in flight at most (0: unbounded) */
} sl_exec_memory;

/* Counters read by sl_pipeline_stats_get from any thread (stats.c). */
typedef struct sl_exec_counters {
    _Atomic uint64_t t_start, batches_out, samples_out;
    _Atomic uint64_t threads_started;
    uint64_t cpu_t0_ns;           /* process CPU time at t_start */
} sl_exec_counters;

typedef struct sl_exec {
    const sl_spec *spec;          /* the pipeline's (read-only) */
    sl_stage_src *in;             /* the source stage's state */
    sl_stage stage[SL_STATS_MAX_STAGES]; /* layout.c */
    int nstages;
    sl_stage handoff;             /* the consumer's end (stage_handoff.c) */
    const sl_exec_layout layout;  /* layout.c, written once at create */
    sl_stage_env env;             /* what every stage sees: pointers to the below */
    sl_chunks chunks;
    sl_errors err;
    sl_gate gate;
    _Atomic int cancel;
    _Atomic int chunk_size;       /* samples per chunk (autotune may change it) */
    sl_stage_counters scount;
    sl_exec_counters stats;
    sl_exec_memory mem;           /* memory.c */
    sl_tune tune;                 /* autotune.c */
    int ncpus;                    /* the CPU budget (sl__ncpus) */
    int running;
} sl_exec;

/* ---- exec.c ---------------------------------------------------------------------- */
/* Its locks and counters, and the hand-off stage (opens the device; may
 * take the spec's normalize op: see sl_stage_handoff__open). */
int sl_exec__init(sl_exec *x, sl_spec *spec);
/* Once the plan is optimised and the source planned: the environment, the
 * pools (batches in the device's pinned memory when it has some). */
int sl_exec__setup(sl_exec *x, const sl_plan *plan, sl_stage_src *in);
/* Stops the threads and frees what the executor holds (accepts one only
 * initialised). */
void sl_exec__free(sl_exec *x);
/* Start every stage at `at` (each kind takes its part), then their threads. */
int sl_exec__start(sl_exec *x, const sl_resume *at);
void sl_exec__stop(sl_exec *x);
/* The position after batch b, the last one handed out: each stage's part. */
void sl_exec__save(const sl_exec *x, const struct sl_batch *b, sl_resume *at);

/* ---- layout.c: cut the optimised plan into stages, pick the collation and
 * the direct hand-off, size the queues (once, at create) -------------------------- */
int sl_exec__layout(sl_exec *x);

/* ---- memory.c --------------------------------------------------------------------- */
/* Apply the memory limit to the layout (after sl_exec__layout, before the
 * batch pools are reserved); SL_ELIMIT when one batch, or the fewest
 * batches the pipeline can run with, does not fit. */
int sl_exec__memory_plan(sl_exec *x);
/* Reserve the batch buffers that can ever be in flight (after the memory
 * plan and the spare workers). */
int sl_exec__reserve_batches(sl_exec *x);
/* Bytes of one element of column ci (times `lead`): 0 when its dtype or a
 * dim is not known at plan time, or it is encoded bytes. */
size_t sl_pipeline__col_bytes(const sl_colinfo *ci, size_t lead);
/* Estimated bytes of one element of stage s's output queue: a batch, or a
 * chunk of samples (fixed-shape columns only). Any thread. */
uint64_t sl_exec__elem_bytes(const sl_exec *x, int s);

/* ---- autotune.c --------------------------------------------------------------------- */
/* One spare thread, started parked, on each auto stage for exploration past
 * the core budget; after the memory plan and before the batch reserve,
 * which count only the budget's workers (see autotune.c). */
int sl_exec__tune_spare(sl_exec *x);
/* Rebalance workers of "auto" stages and the chunk size. */
void sl_exec__autotune(sl_exec *x);
/* The autotune rule, apart from the measuring (so it can be tested with
 * chosen costs): for n stages with per-sample cost[s] (ns; 0 = not measured
 * or not parallel), is_auto[s] and max_workers[s], set want[s] to the workers
 * of each auto stage (0 for the others). See autotune.c. */
void sl_pipeline__tune_shares(int ncpus, int n, const double *cost, const int *is_auto,
                              const int *max_workers, int *want);
/* The check after a move, apart from the measuring (tested with chosen
 * rates): n stages with `cur` workers now, `want` what the cost rule asks
 * (0: not auto, keep), `rate` the samples/s of the interval just ended. 1
 * when the workers change to next[]: a move the rule asks for, or the undo of
 * the last move when throughput fell by more than SL_TUNE_UNDO_DROP after it
 * (that move is then not tried again for SL_TUNE_BAN_NS); or an exploration
 * (below). See autotune.c. */
#define SL_TUNE_UNDO_DROP 0.10
#define SL_TUNE_BAN_NS 4000000000ull
/* Exploration: after SL_TUNE_STEADY ticks without a move, one worker more
 * on stage `top` (the costliest auto stage), kept when its next
 * SL_TUNE_TRIAL_TICKS intervals are on average SL_TUNE_EXPLORE_GAIN faster
 * than the steady ticks before it; or, when an earlier exploration left one
 * there, one fewer, kept unless SL_TUNE_SHED_LOSS slower. A try not kept
 * waits SL_TUNE_EXPLORE_WAIT_NS, doubled for each one in a row (at most 8x).
 * max_workers caps every stage (threads started). */
#define SL_TUNE_TRIAL_TICKS 2
#define SL_TUNE_EXPLORE_GAIN 0.10
#define SL_TUNE_SHED_LOSS 0.02
#define SL_TUNE_EXPLORE_WAIT_NS 2000000000ull
int sl_pipeline__tune_step(sl_tune *t, int n, const int *cur, const int *want,
                           const int *max_workers, int top, double rate, uint64_t now_ns,
                           int *next);

/* ---- trace.c ---------------------------------------------------------------------- */
void sl_exec__trace_free(sl_exec *x);

/* ---- pipeline.c: the executor of a pipeline (stats, explain, trace, tests) ---------- */
sl_exec *sl_pipeline__exec(const sl_pipeline *p);

#endif /* SL_EXEC_H */
