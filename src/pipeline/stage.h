/*
 * stage.h — the stage interface: what a running stage is, what it sees, and
 * the table of functions every kind of stage fills. Never installed.
 *
 * A pipeline runs as a row of stages (exec.h, "DESIGN"), each a set of
 * worker threads with a bounded output queue. Every kind of stage is one
 * file that fills one sl_stage_kind (below) and has one row in
 * sl_stage__kinds[] (stage.c):
 *
 *   stage_source.c   source   readers: stream positions -> records -> chunks
 *   stage_map.c      map      per-sample ops, parallel
 *   stage_seq.c      seq      sequential ops in stream order (take, skip,
 *                    final    shuffle buffers); the final one hands samples
 *                             to the collation and numbers the batches
 *   stage_collate.c  stack    parallel collation: copies the samples the
 *                             final stage assigned into their batch
 *   stage_handoff.c  handoff  the consumer's end: batches out of the last
 *                             queue, to the device when there is one
 *
 * Where batches are made is the collation (sl_collation, below): one of
 * three implementations, picked once by the layout (layout.c) and called
 * through its table from the stages that need it:
 *
 *   collate_final.c     the final stage's one thread copies each sample in
 *   collate_fused.c     map + batch fusion: the last parallel stage collates
 *                       whole-batch chunks (and reads records into rows)
 *   collate_parallel.c  the final stage assigns samples to batches and the
 *                       collate stage's workers copy them
 *
 * A stage sees its sl_stage (its nodes, its input and output queue, its
 * counters, its kind's own state) and its environment, sl_stage_env: the
 * plan, the layout, the seed and error policy, the pools, the chunk list,
 * the error record, the cancel flag. Never the whole pipeline: stage files
 * include this header and not pipeline.h or exec.h (scripts/check_layers.sh
 * refuses it; docs/ARCHITECTURE.md, rule R11).
 */
#ifndef SL_STAGE_H
#define SL_STAGE_H

#include "core/worker.h"
#include "ops/op.h"
#include "pipeline/plan.h"
#include "pipeline/pools.h"
#include "pipeline/queue.h"
#include "pipeline/shuffle_window.h"
#include "source/source.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- elements moving between stages ---------------------------------------------- */

enum { SL_CHUNK_DATA = 0, SL_CHUNK_END = 1, SL_CHUNK_ERROR = 2 };

#define SL_MAX_COUNTERS 8

/* A run of consecutive samples moving between stages. */
typedef struct sl_chunk {
    struct sl_chunk *next_free;
    uint64_t seq;
    int kind;
    uint64_t epoch;
    uint32_t n, cap;
    uint64_t *pos;                /* stream position of each sample */
    uint64_t *key;                /* RNG index of each sample */
    sl_sample *s;
    struct sl_batch *batch;       /* map+batch fusion: the chunk collated */
    sl_tensor slot;               /* map+batch fusion: the batch buffer of column
                                     slot_col, taken before the ops run so the
                                     last op writes into it (buf NULL: none) */
    uint64_t bindex;              /* parallel collation: the batch's index in its
                                     epoch (the final stage numbers batches) */
    int64_t counters[SL_MAX_COUNTERS]; /* parallel collation: the final stage's
                                     take/skip counters after this batch */
    int tail_ran;                 /* map vectorization: the batched tail ran per
                                     sample (its samples did not fit the plan) */
    int err_rc;
    char errmsg[SL__ERRMSG_MAX];
} sl_chunk;

struct sl_batch {
    int kind;                     /* SL_CHUNK_DATA / END / ERROR */
    uint64_t index, epoch;
    int64_t size;
    int ncols;
    int single;                   /* no batch op: one sample, no leading dim */
    char names[SL_MAX_COLUMNS][SL_COLNAME_MAX];
    sl_tensor col[SL_MAX_COLUMNS];
    int ragged[SL_MAX_COLUMNS];
    sl_tensor *items[SL_MAX_COLUMNS];
    /* resume: where the stream continues after this batch */
    uint64_t next_pos;
    int64_t counters[SL_MAX_COUNTERS];
    int err_rc;
    char errmsg[SL__ERRMSG_MAX];
};

/* Release a sample's column references and empty it (cheaper than
 * sl_sample_clear: the columns are not zeroed). */
static inline void sl_pipeline__sample_release(sl_sample *s) {
    for (uint32_t i = 0; i < s->ncols; i++)
        sl_buffer_release(s->col[i].buf);
    s->ncols = 0;
}

/* Most plan nodes one stage runs (per-worker op state and per-node
 * sequential state are arrays of this size); a longer run of ops is cut
 * into several stages. */
#define SL_STAGE_MAX_OPS 64
/* phases of the op split: SL_NPHASES of src/ops/ops.h */
#define SL_STAGE_NPHASES 3

/* Largest batch that map + batch fusion (one chunk = one batch) handles. */
#define SL_FUSE_MAX_BATCH 1024

/* A position in the stream, what a saved state restores: the epoch, the
 * source's stream position, the index of the next batch in the epoch and
 * the final stage's take/skip counters. Each stage takes its part when it
 * starts (sl_stage_kind.start) and gives it for a batch handed out
 * (sl_stage_kind.save). */
typedef struct sl_resume {
    uint64_t epoch;
    uint64_t pos;                 /* source stream position to start from */
    uint64_t batch;               /* index of the next batch in the epoch */
    int64_t counters[SL_MAX_COUNTERS];
} sl_resume;

/* ---- what a stage sees ---------------------------------------------------------- */

/* Errors: the workers record them (stage.c), the consumer fails the
 * iterator with them (pipeline.c), stats report them. Guarded by mu. */
typedef struct sl_errors {
    pthread_mutex_t mu;
    uint64_t skipped;
    int n;
    char msg[SL_STATS_MAX_ERRORS][256];
    uint64_t dead_first[SL_STATS_MAX_ERRORS]; /* first records of the failed
                                   files already in msg[] (skip policy) */
    int ndead;
    int failed;
    int fail_rc;
    char fail_msg[SL__ERRMSG_MAX];
} sl_errors;

/* Recycled chunks (stage.c): guarded by mu. */
typedef struct sl_chunks {
    pthread_mutex_t mu;
    sl_chunk *free;
} sl_chunks;

/* Where parked workers wait: autotune changes a stage's `active` and
 * broadcasts cv; stop broadcasts it too. */
typedef struct sl_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
} sl_gate;

/* Counters the stages add to; read by tests. */
typedef struct sl_stage_counters {
    _Atomic uint64_t slot_writes; /* samples that landed in their batch slot (no copy) */
    _Atomic uint64_t vec_batches; /* batches that ran the batched kernels */
} sl_stage_counters;

typedef struct sl_collation sl_collation;

/* How the stages run a plan: decided once by layout.c when the pipeline is
 * created, printed by explain, never changed after (exec.h's member is
 * const: only layout.c's one copy writes it). */
typedef struct sl_exec_layout {
    const sl_collation *collation; /* which of the three collations runs */
    int collate_stage;            /* the stage that collates: the last parallel
                                     one (fused), the collate one (parallel)
                                     or the final one (final) */
    int direct;                   /* fused: the consumer takes batches straight
                                     from the collating stage (no final stage
                                     thread) */
    int slot_col;                 /* fused: the output column the last op may
                                     write into its batch slot, -1: none */
    int vec_first;                /* map vectorization: opt nodes [vec_first, last
                                     of the collating stage) run once per batch
                                     on the stacked columns; -1: none */
    char vec_note[192];           /* why (or why not), for explain */
    int read_rows;                /* the readers read each record straight into
                                     its batch row (choose_read_rows) */
    size_t row_bytes[SL_MAX_COLUMNS]; /* with read_rows: bytes of a row, per column */
    int chunk_cap;                /* samples a chunk can hold */
} sl_exec_layout;

struct sl_pipeline__trace;

/* The environment every stage of a pipeline shares (exec.c fills it once;
 * the pointers are the executor's). Stages read the first block and use
 * the second through stage.c's helpers. */
typedef struct sl_stage_env {
    const sl_plan *plan;          /* the optimised plan: nodes, columns, batch */
    const sl_exec_layout *layout;
    uint64_t seed;                /* every draw: (seed, epoch, key, op position) */
    int on_error;                 /* SL_ON_ERROR_FAIL / SKIP */
    sl_source *src;               /* where records come from (messages name them) */
    const char *src_name;
    sl_pipeline__pools *pools;    /* every tensor and batch buffer */
    sl_chunks *chunks;
    sl_errors *err;
    _Atomic int *cancel;          /* set by stop: workers end at the next sample */
    _Atomic int *chunk_size;      /* samples per chunk (autotune sets it) */
    sl_gate *gate;
    sl_queue *last;               /* the consumer's queue: a worker that cannot go
                                     on closes it (sl_stage__worker_fail) */
    sl_stage_counters *counters;
    struct sl_pipeline__trace *trace; /* NULL unless sl_pipeline_trace_enable */
} sl_stage_env;

/* trace.c: record one span of a worker (any thread, no lock). */
void sl_pipeline__trace_add(struct sl_pipeline__trace *t, int stage, int worker, uint64_t t0,
                            uint64_t dur, uint32_t n);

/* ---- a stage and its workers ----------------------------------------------------- */

typedef struct sl_stage sl_stage;
typedef struct sl_stage_kind sl_stage_kind;

typedef struct sl_worker {
    sl_stage *st;
    const sl_stage_env *env;
    int id;
    void *state[SL_STAGE_MAX_OPS]; /* per-op worker state, by node offset in stage */
    int init_rc;                  /* a worker_init failed: fail every chunk */
    char init_msg[SL__ERRMSG_MAX];
    void *self;                   /* the kind's per-thread state (a reader's
                                     cursor, the sequential stage's context) */
} sl_worker;

struct sl_stage {
    const sl_stage_kind *kind;
    const sl_stage_env *env;
    int index;                    /* its place in the pipeline (stats, trace) */
    char name[96];
    int first, last;              /* opt nodes [first, last) */
    int collates;                 /* map + batch fusion's collating stage: the
                                     collation's slot and done run around its
                                     per-sample ops */
    int workers;                  /* threads started */
    int autotune;
    _Atomic int active;           /* workers allowed to work (autotune) */
    sl_queue *in;                 /* the stage before's output (NULL: none) */
    sl_queue out;
    int qcap;
    sl_worker *w;
    sl_workers threads;           /* the stage's threads, running w[i] */
    sl_resume at;                 /* where it starts (exec.c sets it, then the
                                     kind's start takes its part) */
    void *self;                   /* the kind's own state (the source's sl_stage_src,
                                     the hand-off's device state) */
    _Atomic uint64_t elements, busy_ns, wait_in_ns, wait_out_ns;
    _Atomic uint64_t cpu_ns;      /* thread CPU time inside busy_ns */
    /* the op split: image-op phases (decode, resample, normalize) of the
     * timed samples, and how many were timed (src/ops/ops.h) */
    _Atomic uint64_t phase_ns[SL_STAGE_NPHASES], phase_samples;
    _Atomic uint64_t phase_all_ns; /* the same samples' whole per-sample op chain */
    _Atomic uint64_t held;        /* samples kept between elements (shuffle buffers) */
    uint64_t sample_bytes;        /* memory.c: a sample leaving it, fixed-shape
                                     columns only */
    uint64_t seq_out;             /* sequential stages: next output seq */
    uint64_t tune_busy, tune_elements; /* autotune: totals at the last tick */
    uint64_t tune_wait_out;       /* autotune: wait_out_ns at the last tick */
    double tune_cost;             /* autotune: last measured ns per sample (0: none) */
    int spare;                    /* the last worker is autotune's spare (parked
                                     until exploration wakes it) */
};

/* ---- the stage table -------------------------------------------------------------- */

/* What autotune may change on a stage (sl_stage_kind.tunes); the chunk
 * size, which it also sets, is the environment's (sl_stage_env.chunk_size). */
enum {
    SL_TUNES_WORKERS = 1          /* how many of its workers work */
};

/* One kind of stage. A hook a kind has no use for is NULL. The executor
 * (exec.c) starts `workers` threads for a stage, each running
 *     worker_init; then until stop: wait while parked (autotune), take a
 *     chunk (produce, or the input queue) and handle it (chunk);
 *     worker_free
 * and stops them by setting cancel, closing every queue and calling wake. */
struct sl_stage_kind {
    const char *key;              /* its name (explain --json "kind") */
    unsigned tunes;               /* SL_TUNES_*: what autotune may change */
    /* start: take its part of the position `at` before its workers start
     * (restore); wake: at stop, wake its workers wherever they wait besides
     * the queues */
    int (*start)(sl_stage *st, const sl_resume *at);
    void (*wake)(sl_stage *st);
    /* a worker: its own state, the chunks it makes (a source: NULL when it
     * stops) and how it handles one (< 0: stop) */
    int (*worker_init)(sl_worker *w);
    sl_chunk *(*produce)(sl_worker *w);
    int (*chunk)(sl_worker *w, sl_chunk *c);
    void (*worker_free)(sl_worker *w);
    /* explain: what it does, in a few words */
    const char *(*explain)(const sl_stage *st);
    /* memory in use besides its output queue (which the memory plan sizes):
     * bytes it keeps between elements */
    uint64_t (*memory)(const sl_stage *st);
    /* save: its part of the position after batch b, the last one handed out */
    void (*save)(const sl_stage *st, const struct sl_batch *b, sl_resume *at);
};

extern const sl_stage_kind sl_stage_source, sl_stage_map, sl_stage_seq, sl_stage_final,
    sl_stage_collate, sl_stage_handoff;
/* Every kind, one row each (stage.c); NULL-terminated. */
extern const sl_stage_kind *const sl_stage__kinds[];

/* ---- the collation: where samples become batches --------------------------------- */

/* The final stage's part that its collation works on (stage_seq.c). */
typedef struct sl_collator {
    struct sl_batch *b;           /* NULL: none started */
    int64_t filled;
    size_t itemsize[SL_MAX_COLUMNS]; /* bytes per sample of each stacked column */
} sl_collator;

typedef struct sl_final {
    sl_stage *st;                 /* the final stage: its queue, its nodes */
    uint64_t epoch;               /* of the samples coming in */
    uint64_t batch_index;         /* index of the next batch in the epoch */
    int64_t counter[SL_MAX_COUNTERS]; /* take/skip counters: the state after
                                     the last batch passed on */
    const int *counter_of;        /* node offset -> counter slot */
    sl_collator col;              /* final: the batch being filled */
    sl_chunk *out;                /* parallel: the batch being assigned */
} sl_final;

/* One collation. The hooks each run where the comment says; the final
 * stage's (add, flush, marker, clear) see the samples in stream order. */
struct sl_collation {
    const char *key;              /* "final", "fused", "parallel" (explain) */
    const char *words;            /* explain: how it works */
    const char *final_words;      /* explain: what the final stage does */
    int whole_batches;            /* the source cuts chunks at batch boundaries,
                                     one chunk = one batch */
    /* the collating parallel stage (sl_stage.collates): the batch buffer the
     * stage's last op may write into, taken before its ops run (NULL: none);
     * and the chunk, its ops done */
    char *(*slot)(sl_worker *w, sl_chunk *c);
    void (*done)(sl_worker *w, sl_chunk *c);
    /* the final stage: a sample that passed the sequential ops (taken); a
     * chunk collated upstream; the epoch's end; a marker; drop what it holds
     * (flush and clear: NULL when it holds nothing between chunks) */
    int (*add)(sl_final *f, sl_sample *s, uint64_t pos, uint64_t key);
    int (*batch_in)(sl_final *f, sl_chunk *c);
    int (*flush)(sl_final *f);
    int (*marker)(sl_final *f, int kind, uint64_t epoch, int err_rc, const char *msg);
    void (*clear)(sl_final *f);
    /* the consumer: an element of the last stage's queue as a batch (NULL:
     * nothing to hand out; *next_index numbers batches where no final stage
     * does); and one left in it at stop */
    int (*take)(const sl_stage_env *e, void *item, uint64_t *next_index, struct sl_batch **out);
    void (*drop)(void *item, void *env);
};

extern const sl_collation sl_collate_final, sl_collate_fused, sl_collate_parallel;

/* The final stage, for its collation (stage_seq.c): pass a complete batch on
 * unless a take/skip after batch drops it (numbered, with the counters
 * after it); pass an assigned batch-to-be (a chunk) on the same way; pass a
 * marker batch on. < 0: cancelled or out of memory. */
int sl_final__batch(sl_final *f, struct sl_batch *b);
int sl_final__assigned(sl_final *f, sl_chunk *c);
int sl_final__marker_batch(sl_final *f, int kind, uint64_t epoch, int err_rc, const char *msg);

/* ---- collate.c: samples into batches ------------------------------------------------ */

/* Add sample s of `epoch` at stream position pos: stacked columns are copied,
 * ragged ones moved (views copied); the caller still releases s. 1: the batch
 * is complete (sl_collate__take it), 0: not yet, negative: an error. */
int sl_collate__add(const sl_stage_env *e, sl_collator *k, sl_sample *s, uint64_t pos,
                    uint64_t epoch);
/* The batch filled so far, stacked columns cut to its length; NULL if none. */
struct sl_batch *sl_collate__take(sl_collator *k);
/* Drop a partial batch. */
void sl_collate__clear(sl_collator *k);
/* Collate chunk c (exactly one batch) into c->batch; the chunk's samples are
 * released. With c->slot the samples of column slot_col may already be in
 * place (map + batch fusion). */
int sl_collate__chunk(const sl_stage_env *e, sl_chunk *c);
/* Reading straight into the batch (read_rows): c->batch gets the buffers of a
 * batch of n records, and rows[k] the first row of column k; the reader then
 * writes record i's column k at rows[k] + i * layout->row_bytes[k]. */
int sl_collate__rows(const sl_stage_env *e, sl_chunk *c, uint32_t n, char **rows);
/* A batch marking an epoch's END or an ERROR; NULL when out of memory. */
struct sl_batch *sl_collate__marker(const sl_stage_env *e, int kind, uint64_t epoch, int err_rc,
                                    const char *msg);
void sl_pipeline__batch_free(struct sl_batch *b);
/* The consumer's end where the last queue holds batches (sl_collation's
 * take and drop): the batch as it is; its release. */
int sl_collate__pass_batch(const sl_stage_env *e, void *item, uint64_t *next_index,
                           struct sl_batch **out);
void sl_collate__drop_batch(void *item, void *env);

/* ---- stage.c: what every stage's workers use -------------------------------------- */

/* A chunk from the free list (or new), empty and of kind DATA; NULL when out
 * of memory. */
sl_chunk *sl_stage__chunk_get(const sl_stage_env *e);
/* Release its samples and batch, and put it back on the free list. */
void sl_stage__chunk_put(const sl_stage_env *e, sl_chunk *c);
void sl_stage__chunks_free(sl_chunks *cs);
/* sl_stage__chunk_put as a queue's drop (sl_queue__reset; env: the stage env). */
void sl_stage__chunk_put_item(void *item, void *env);
/* Move sample s (its column references) to the end of *cp, a chunk of
 * `epoch` taken from the free list first when *cp is NULL. SL_OK, or
 * SL_ENOMEM with s released. */
int sl_stage__chunk_add(const sl_stage_env *e, sl_chunk **cp, uint64_t epoch, sl_sample *s,
                        uint64_t pos, uint64_t key);
/* Turn `c` into an error chunk (policy fail): its samples and batch are
 * released. */
void sl_stage__chunk_fail(sl_chunk *c, int rc, const char *msg);
/* What ends a failed sample's message under policy fail: how to go on. */
#define SL_STAGE_SKIP_HINT \
    "; to drop bad samples and go on: \"on_error\": \"skip\" in the spec, .on_error(\"skip\") in Python"
/* "<where>: ops[<pos>] (<label>): <cause>" into msg, `where` naming the
 * record (sl_source__where: file, record, its path or key), ending with
 * SL_STAGE_SKIP_HINT under policy fail (the cause is cut short to keep it). */
void sl_stage__op_error(const sl_stage_env *e, char *msg, size_t cap, const char *where, int pos,
                        const char *label, const char *cause);
/* SL_STAGE_SKIP_HINT at the end of msg (policy fail), cutting what is before
 * it short when it does not fit. */
void sl_stage__add_skip_hint(const sl_stage_env *e, char *msg, size_t cap);
/* Copy with truncation (messages may be longer than a stats slot). */
void sl_stage__copy_str(char *dst, size_t cap, const char *src);
/* Policy skip: count the sample and keep the first few messages. */
void sl_stage__note_skip(sl_errors *e, const char *msg);
/* Policy skip: count `n` samples of the failed file whose records are
 * [first, first + count) (source failed_range); its message, `msg` about one
 * of them ("...: record N: cause"), is kept once, for the whole range. */
void sl_stage__note_skip_range(sl_errors *e, uint64_t first, uint64_t count, uint64_t n,
                               const char *msg);
/* A worker cannot go on: store the error, wake the consumer. */
void sl_stage__worker_fail(const sl_stage_env *e, int rc, const char *msg);

/* Wall clock and this thread's CPU clock at the start of a unit of work. */
typedef struct sl_stage_span {
    uint64_t t0, c0;
} sl_stage_span;
sl_stage_span sl_stage__span_begin(void);
/* Count the busy and CPU time since `sp` for the stage; trace the span. */
void sl_stage__span_end(sl_stage *st, int worker, sl_stage_span sp, uint32_t n);
/* Move this thread's image-op phase counters into stage `st`; called by a
 * worker after each unit of work. */
void sl_stage__phases_take(sl_stage *st);
/* Park a worker autotune has made inactive. */
void sl_stage__worker_gate(sl_worker *w);
/* The next chunk of the stage's input, blocking; NULL: the queue closed. */
sl_chunk *sl_stage__input(sl_stage *st);
/* The tail of every parallel stage's work on a chunk (t0 .. now, n
 * elements): the collation's `done` when the stage collates, the span, the
 * count. */
void sl_stage__chunk_done(sl_worker *w, sl_chunk *c, sl_stage_span t0, uint32_t n);
/* Push `item` (a chunk or a batch) at `seq` to the stage's queue, counting
 * the wait; what sl_queue__push returns. */
int sl_stage__push(sl_stage *st, uint64_t seq, void *item, int barrier, uint64_t epoch);
/* Push `c` at its seq to the stage's queue (a barrier unless DATA); on a
 * closed queue the chunk is recycled and -1 returned. */
int sl_stage__push_chunk(sl_stage *st, sl_chunk *c);
/* Sequential stages: push `item` at the stage's next output seq. */
int sl_stage__emit(sl_stage *st, void *item, int barrier, uint64_t epoch);
/* Sequential stages: an END or ERROR chunk at the next output seq. */
int sl_stage__emit_marker(sl_stage *st, int kind, uint64_t epoch, int err_rc, const char *msg);

/* ---- stage_map.c: per-sample ops, which the source stage runs too ---------------- */

/* The per-op worker state of the stage's nodes (op worker_init); a failure
 * is kept in w->init_rc and fails every chunk the worker takes. */
int sl_stage__ops_init(sl_worker *w);
void sl_stage__ops_free(sl_worker *w);
/* Run the stage's per-sample ops over a data chunk, dropping filtered and
 * (policy skip) failed samples. 0, or -1 on cancel (the chunk has been
 * recycled). */
int sl_stage__run_ops(sl_worker *w, sl_chunk *c);
/* Apply opt nodes [k0, k1) to sample i of c (slot: where the last op of the
 * stage may write, or NULL). SL_OK keep, SL_OP_DROP drop, negative: error
 * with the whole message in `msg`. */
int sl_stage__apply(sl_worker *w, sl_chunk *c, uint32_t i, int k0, int k1, void *slot,
                    char *msg, size_t cap);

/* ---- stage_handoff.c: the consumer's end ---------------------------------------------- */

/* Make the hand-off stage `st` (its kind and state): check decode ops'
 * "device" key ("cpu" | "gpu"; "gpu" without a loadable nvJPEG is
 * SL_EUNSUPPORTED, saying so) and open the device of spec->device, if any.
 * With normalize_on_device the spec's normalize op is taken out of its ops
 * (the pipeline's own copy) and run on the device instead. */
int sl_stage_handoff__open(sl_stage *st, sl_spec *spec);
/* Once the plan is optimised: which output columns are text (they stay on
 * the host), and decode on the GPU when the plan hands its decode over
 * (plan.handoff: checks the device, nvJPEG and the kernel). */
int sl_stage_handoff__plan(sl_stage *st, const sl_plan *plan);
void sl_stage_handoff__close(sl_stage *st);              /* accepts one never opened */
/* The next batch for the consumer, data or a marker: SL_OK with *out, or
 * with *out NULL on timeout; < 0 when the pipeline failed or stopped. */
int sl_stage_handoff__next(sl_stage *st, struct sl_batch **out, int timeout_ms);
/* A batch the consumer takes: its columns to the device (in place) when
 * there is one and it is not there already. */
int sl_stage_handoff__deliver(sl_stage *st, struct sl_batch *b);
/* The ring slots the device makes for a pipeline of output depth `depth` (0
 * without a device): each may hold a batch whose copy is in flight. */
int sl_stage_handoff__slots(const sl_stage *st, int depth);
/* Pool memory for the batches: the device backend's pinned memory, so the
 * stages write batches where the copy engine reads them. 0: none. */
int sl_stage_handoff__batch_mem(const sl_stage *st, sl_pool_mem *out);
void sl_stage_handoff__counters(const sl_stage *st, sl_dev_counters *out);
int sl_stage_handoff__set_stream(sl_stage *st, void *stream);

/* ---- stage_source.c: the source's order and cursor -------------------------------- */

/* Where the readers are in the stream (set_epoch and restore move it).
 * Guarded by mu. */
typedef struct sl_src_cursor {
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* unpark */
    uint64_t epoch, pos, end_epoch, seq;
    uint64_t ra_epoch, ra_pos;    /* sl_source__reads_ahead: records hinted up to
                                     ra_pos of epoch ra_epoch */
    uint64_t ahead_epoch;         /* the source reads epochs below the larger of
                                     this and end_epoch; the consumer gets only
                                     those below end_epoch (sl_pipeline_set_epoch
                                     reads one ahead) */
    uint64_t set_epochs;          /* set_epoch calls so far */
    uint64_t last_set_epoch;      /* the epoch the last one asked for */
    int parked;
} sl_src_cursor;

/* The shuffle order of the current pass (shuffle_window.c; the mode and
 * sizes are set at open). Used under the cursor's mu. */
typedef struct sl_src_shuffle {
    int on;                       /* the spec's shuffle */
    int window_mode;              /* window mode (else global) */
    uint64_t window, block;       /* window mode: its sizes (defaults applied) */
    sl_wshuf wsh;                 /* window mode: the current pass's order */
    int wsh_valid;
    sl_feistel gperm;             /* global mode: the current pass's bijection */
    uint64_t gperm_epoch, gperm_rep;
    int gperm_valid;
} sl_src_shuffle;

/* ---- mix_schedule.c: which input each position of a mixture takes ---------------- */

/* A mixture's schedule (docs/PIPELINE.md, "Mixtures"): for each stream
 * position of an epoch on this rank, the input it takes, from the weights,
 * the stop rule and the seed alone. The same on every rank (ranks blend
 * their own slices of each input), any thread count, any timing. */
typedef struct sl_mix_schedule {
    int n;
    int exact;                    /* SL_MIX_EXACT: credits; else random draws */
    int stop;                     /* SL_MIX_STOP_* */
    int by_samples;               /* quota[k] draws of input k per epoch */
    uint64_t seed;
    uint64_t w[SL_MIX_MAX];       /* integer weights (the shares scaled, or the quotas) */
    uint64_t quota[SL_MIX_MAX];   /* by_samples: draws of input k per epoch */
    uint64_t limit[SL_MIX_MAX];   /* positions of input k before it runs out */
} sl_mix_schedule;

/* Where a schedule is: position `pos` of `epoch`, each input's draws so far
 * (its own position), which inputs are left. O(n). */
typedef struct sl_mix_state {
    uint64_t epoch, pos;
    uint64_t count[SL_MIX_MAX];
    __int128 credit[SL_MIX_MAX];  /* exact: weight earned minus draws taken */
    uint64_t live;                /* bit k: input k may still be drawn */
    int done;                     /* the epoch has ended (stop rule) */
} sl_mix_state;

/* Fill the integer weights from shares (sum 1) or quotas. */
void sl_mix__init(sl_mix_schedule *m, const double *shares, const uint64_t *quotas);
/* Positions of an epoch at most (per_epoch): every input's quota, or the
 * limits' sum. */
uint64_t sl_mix__epoch_len(const sl_mix_schedule *m);
/* The state at the start of `epoch`. */
void sl_mix__start(const sl_mix_schedule *m, sl_mix_state *st, uint64_t epoch);
/* The input that position st->pos takes (then st->pos, its count advance),
 * or -1 when the epoch has ended there (the stop rule). */
int sl_mix__next(const sl_mix_schedule *m, sl_mix_state *st);
/* The inputs of the next n positions into ks[0..) (NULL: only advance),
 * as n calls of sl_mix__next; returns the positions made, fewer than n when
 * the epoch ends. */
size_t sl_mix__next_n(const sl_mix_schedule *m, sl_mix_state *st, uint8_t *ks, size_t n);
/* Move st to position `pos` of `epoch` (forward from where it is, or replayed
 * from the epoch's start: O(pos n) once, at a restore). */
void sl_mix__seek(const sl_mix_schedule *m, sl_mix_state *st, uint64_t epoch, uint64_t pos);

struct sl_stage_src;
/* A source stage's mixture: the schedule, each input's own order over its
 * records (offset in the concatenated source, sl_source__concat), and what
 * each input got. */
typedef struct sl_src_mix {
    sl_mix_schedule sched;
    sl_mix_state at;              /* the readers' position (cur.mu) */
    int n;
    struct sl_stage_src *in;      /* n: input k's order (record_at) */
    uint64_t off[SL_MIX_MAX + 1];
    uint64_t drawn[SL_MIX_MAX];   /* positions each input took so far (cur.mu) */
    double share[SL_MIX_MAX];     /* the weights asked for (normalised) */
} sl_src_mix;

/* A source stage's own state (its `self`): which records, in what order,
 * for this rank. */
typedef struct sl_stage_src {
    int opened;                   /* sl_stage_src__open ran (close undoes it) */
    sl_source *src;
    char name[256];
    uint64_t seed;
    uint64_t nrecords;
    uint64_t *base;               /* records kept by pushed filters; NULL: all */
    uint64_t nbase;
    int64_t shard_index, shard_count;
    int shard_equal;
    uint64_t per_pass;            /* samples per pass for this rank */
    uint64_t per_epoch;           /* per_pass * repeat */
    sl_src_cursor cur;
    sl_src_shuffle shuf;
    sl_src_mix *mix;              /* a mixture's inputs and schedule, or NULL */
} sl_stage_src;

/* Open the spec's source (or take its memory source) into s, zeroed; cols:
 * what the plan knows of its columns. */
int sl_stage_src__open(sl_stage_src *s, const sl_spec *spec, sl_colset *cols);
/* What the plan knows of an opened source's columns. */
void sl_stage_src__colset(const sl_source *src, sl_colset *out);
/* A mixture whose inputs have ops of their own (mix_ops.c): the one
 * per-sample op that runs each sample through its input's ops and makes
 * the blend's columns, checked to agree after the ops; it leads the plan
 * (sl_plan__build's `lead`). s: the opened source stage of `spec`. */
int sl_mix__ops_node(sl_pnode *out, const sl_spec *spec, const sl_stage_src *s);
/* Once the plan is optimised: the filters pushed into the index, this
 * rank's slice, the length of an epoch (at most `needed` positions), the
 * shuffle order's mode; the readers may read up to the spec's epochs. */
int sl_stage_src__plan(sl_stage_src *s, const sl_spec *spec, const sl_plan *plan,
                       uint64_t needed);
void sl_stage_src__close(sl_stage_src *s);      /* accepts one never opened */
/* The consumer's side (pipeline.c). The first epoch the consumer may not
 * get yet; let the readers go on through epoch `end` - 1 (and read up to
 * `ahead` - 1 ahead); after a stop, restart the order at a new place. */
uint64_t sl_stage_src__end_epoch(sl_stage_src *s);
void sl_stage_src__want(sl_stage_src *s, uint64_t end, uint64_t ahead);
void sl_stage_src__rewind(sl_stage_src *s, uint64_t epoch, uint64_t ahead);
/* "source KIND NAME (N records, shuffled ..., shard ...)" for explain; a
 * mixture adds a line per input. */
void sl_stage_src__describe(const sl_stage_src *s, char *buf, size_t cap);
/* A mixture's inputs for stats: {"schedule", "stop", "inputs": [{"name",
 * "weight", "samples", "share"}]} added to obj as "mix"; nothing otherwise. */
int sl_stage_src__mix_json(sl_stage_src *s, cJSON *obj);

#endif /* SL_STAGE_H */
