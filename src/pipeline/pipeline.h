/*
 * pipeline.h — internals shared by the pipeline layer's files (spec, plan,
 * optimiser, executor, queues, sources, stats). Never installed.
 */
#ifndef SL_PIPELINE_H
#define SL_PIPELINE_H

#include "ops/op.h"
#include "source/source.h"
#include "device/device.h"
#include "pipeline/shuffle_window.h"
#include "core/worker.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- pools.c ------------------------------------------------------------------ */
typedef struct sl_pipeline__pools sl_pipeline__pools;
int sl_pipeline__pools_create(sl_pipeline__pools **out);
/* Batch tensors (sl_pipeline__pools_batch_tensor) from now on take their
 * bytes from `mem` (a device's pinned memory), in classes of their own. Call
 * before any buffer is taken. */
void sl_pipeline__pools_set_batch_mem(sl_pipeline__pools *ps, const sl_pool_mem *mem);
/* Up to `count` buffers of `size` bytes may be out at once: the class is
 * filled to `count` on first use and caches no more (pools.c). Call before
 * the workers start. */
int sl_pipeline__pools_reserve(sl_pipeline__pools *ps, size_t size, size_t count);
/* A pooled tensor of the given dtype and shape. */
int sl_pipeline__pools_tensor(sl_pipeline__pools *ps, sl_tensor *t, sl_dtype dtype, int ndim,
                              const int64_t *shape);
/* As sl_pipeline__pools_tensor, for a batch of shape[0] rows taken from the
 * buffer class of `rows` rows (rows >= shape[0]): an epoch's last, partial
 * batch then reuses a full batch's buffer instead of growing a pool of its
 * own size. */
int sl_pipeline__pools_batch_tensor(sl_pipeline__pools *ps, sl_tensor *t, sl_dtype dtype,
                                    int ndim, const int64_t *shape, int64_t rows);
/* The two above as the ops' allocators (sl_op_alloc_fn, sl_op_batch_alloc_fn;
 * alloc_ctx: the sl_pipeline__pools), for sl_op_ctx and sl_op_bctx. */
int sl_pipeline__pools_op_alloc(void *ps, sl_tensor *t, sl_dtype dtype, int ndim,
                                const int64_t *shape);
int sl_pipeline__pools_op_batch_alloc(void *ps, sl_tensor *t, sl_dtype dtype, int ndim,
                                      const int64_t *shape, int64_t rows);
void sl_pipeline__pools_free(sl_pipeline__pools *ps);
/* The bytes a buffer of `size` bytes really takes (its class size). */
size_t sl_pipeline__pools_class_size(size_t size);
typedef struct sl_pipeline__pool_bytes {
    size_t buf_size;              /* the class's buffer size */
    size_t held;                  /* bytes of its buffers that exist */
    size_t cached;                /* of those, bytes on its free list */
} sl_pipeline__pool_bytes;
/* Totals over every class's pool, and the first `cap` pools in out[]; returns
 * how many pools exist. Any thread, lock-free (see sl_pool__bytes). */
int sl_pipeline__pools_bytes(const sl_pipeline__pools *ps, sl_pipeline__pool_bytes *out, int cap,
                             size_t *held_out, size_t *cached_out);

/* ---- device_handoff.c: the pipeline's hand-off to the device layer ------------------
 * The device's side (src/device/device.h: the "device" JSON, the upload,
 * GPU decode's batches) is called from here alone (and from spec.c for the
 * JSON); this side passes finished batches across and keeps what is the
 * pipeline's: the spec's ops, the plan, popping host batches, on_error and
 * the messages naming records. The state is sl_pipeline__dev (opaque;
 * p->dev, NULL when the spec has no device and no decode on the GPU). */
typedef struct sl_pipeline__dev sl_pipeline__dev;
struct sl_batch;
struct sl_spec;
struct sl_pipeline;
/* Check decode ops' "device" key ("cpu" | "gpu"; "gpu" without a loadable
 * nvJPEG is SL_EUNSUPPORTED, saying so) and open the device of
 * spec->device (*out NULL when none). With normalize_on_device the spec's
 * normalize op is taken out of its ops (the pipeline's own copy) and run on
 * the device instead. */
int sl_pipeline__dev_open(sl_pipeline__dev **out, struct sl_spec *spec);
/* Decode on the GPU, after the plan is optimised (plan.handoff): checks
 * the device (cuda), nvJPEG and the kernel; sl_pipeline__dev_gpu is then 1
 * and the consumer takes batches from sl_pipeline__dev_gpu_next. Also notes
 * which output columns are text, which stay on the host (any device). */
int sl_pipeline__dev_gpu_setup(struct sl_pipeline *p);
int sl_pipeline__dev_gpu(const sl_pipeline__dev *d);
/* The next batch for the consumer when decoding on the GPU: the host
 * batches' rows (sl_pipeline__pop_batch) decoded into device batches of the
 * batch size, refilled past skipped samples as the CPU path's are; markers
 * (epoch end, error) as they come. SL_OK with *out NULL: timed out. */
int sl_pipeline__dev_gpu_next(struct sl_pipeline *p, struct sl_batch **out, int timeout_ms);
/* Forget rows and the output in progress (the stream restarts; `batch`:
 * the index of the next output batch in its epoch). Accepts NULL. */
void sl_pipeline__dev_gpu_reset(sl_pipeline__dev *d, uint64_t batch);
/* Move a host batch's columns to the device (in place); the ring is made on
 * the first call, with `depth` + 1 slots. */
int sl_pipeline__dev_upload(sl_pipeline__dev *d, struct sl_batch *b, int depth);
void sl_pipeline__dev_close(sl_pipeline__dev *d);      /* accepts NULL */
/* The device's counters (zeros without a device). */
void sl_pipeline__dev_counters(const sl_pipeline__dev *d, sl_dev_counters *out);
/* Pool memory for the pipeline's batches: the device backend's pinned
 * memory (so the stages write batches where the copy engine reads them).
 * 0: no device, nothing to set. */
int sl_pipeline__dev_batch_mem(sl_pipeline__dev *d, sl_pool_mem *out);
/* The ring slots the upload makes for a pipeline of output depth `depth`
 * (0 without a device): each may hold a batch whose copy is in flight. */
int sl_pipeline__dev_slots(const sl_pipeline__dev *d, int depth);

/* ---- spec.c ---------------------------------------------------------------------- */
enum { SL_SPEC_OP_JSON = 0, SL_SPEC_OP_MAP = 1, SL_SPEC_OP_FILTER = 2 };
typedef struct sl_spec_op {
    int kind;
    cJSON *json;                 /* SL_SPEC_OP_JSON: the op object (owned) */
    char name[SL_COLNAME_MAX];   /* user fn label */
    sl_map_fn map;
    sl_filter_fn filter;
    sl_batch_map_fn batch_map;   /* SL_SPEC_OP_MAP: the batched form, or NULL */
    void *user;
} sl_spec_op;

enum { SL_SHARD_AUTO = 0, SL_SHARD_SET = 1, SL_SHARD_ENV = 2 };

struct sl_spec {
    cJSON *input;                /* the source object's input: the kind key and
                                    its options ({"path": ...}); NULL for memory */
    sl_source *mem;              /* a memory source (a reference) */
    int shuffle;
    int shuffle_mode;            /* SL_SHUFFLE_AUTO / GLOBAL / WINDOW */
    uint64_t shuffle_window;     /* window mode: positions per window (0: default) */
    uint64_t shuffle_block;      /* window mode: records per block (0: window / 64) */
    int shard_mode;              /* SL_SHARD_AUTO / SET / ENV */
    int64_t shard_index, shard_count;
    int shard_equal;             /* sl_shard_equal */
    uint64_t seed;
    int64_t epochs;
    int on_error;
    int deterministic;
    int threads;                 /* 0: per-op "parallel" values */
    int source_parallel;         /* 0 default (1), -1 auto, > 0 */
    int chunk;                   /* samples per chunk; 0: adaptive */
    int vectorize;               /* 1 (default): map vectorization allowed */
    int read_rows;               /* 1 (default): readers may read records
                                    straight into batch rows (layout.c) */
    int parallel_collate;        /* 1 (default): a parallel stage may copy
                                    samples into batches (layout.c) */
    sl_device_spec device;       /* "device": where batches are delivered */
    uint64_t memory_limit;       /* bytes the pipeline may hold; 0: the default
                                    (memory.c) */
    int has_cache_bytes;         /* "cache_bytes" given */
    uint64_t cache_bytes;        /* the node's shard cache budget (remote inputs,
                                    io_http.c); 0 keeps no cache on disk */
    sl_spec_op *ops;
    int nops, cap;
};
int sl_spec__copy(sl_spec **out, const sl_spec *src);
/* The spec as a cJSON document (for to_json and state hashing). */
cJSON *sl_spec__to_cjson(const sl_spec *s);
/* Parse a "parallel" value: number >= 1 or "auto" (-1); 0 when absent. */
int sl_spec__parse_parallel(const cJSON *v, const char *field, int *out);

/* ---- plan.c / optimize.c --------------------------------------------------------------- */
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

/* A physical stage: a run of nodes executed by one pool of threads. */
enum {
    SL_ST_SOURCE = 1,
    SL_ST_MAP,
    SL_ST_SEQ,
    SL_ST_COLLATE, /* the last sequential stage: ops up to batch, then batches */
    SL_ST_STACK    /* parallel collation: copies the samples the final stage
                      assigned to a batch into the batch buffers (exec_seq.c) */
};

typedef struct sl_plan {
    sl_pnode *nodes;              /* logical plan, spec order */
    int nnodes;
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

/* Build the logical plan from a spec, given the source's columns. */
int sl_plan__build(sl_plan *plan, const sl_spec *spec, const sl_colset *src_cols);
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

/* ---- queue.c ------------------------------------------------------------------------ */
/* A bounded queue of elements with sequence numbers. Producers push element
 * `seq` into the window [head, head + cap); consumers pop in seq order
 * (ordered) or any finished element before the next barrier (relaxed). */
typedef struct sl_queue {
    pthread_mutex_t mu;           /* guards every field below */
    pthread_cond_t not_empty;     /* an element arrived / closed */
    pthread_cond_t not_full;      /* the window moved / closed */
    void **slot;                  /* cap entries: NULL empty, TAKEN, or an element */
    uint8_t *barrier;             /* slot holds a barrier (epoch end, error) */
    uint64_t *epoch;              /* the epoch of the element in the slot */
    uint64_t cur_epoch;           /* relaxed: the epoch of the last element taken
                                     at head ... */
    int epoch_known;              /* ... and 0 after a barrier: take head next */
    size_t cap;                   /* slots allocated */
    size_t limit;                 /* depth in use (<= cap): pushes wait for
                                     seq < head + limit (sl_queue__set_limit) */
    uint64_t head;                /* lowest seq not yet popped */
    int relaxed;
    size_t reach;                 /* relaxed: consumers take only seq < head + reach
                                     (<= cap; see queue.c, "No deadlock") */
    int closed;
    size_t count;                 /* elements present */
    unsigned wait_empty;          /* consumers waiting on not_empty */
    unsigned wait_full;           /* producers waiting on not_full */
    double fill_area;             /* sum of count / limit * ns, for the mean fill */
    uint64_t last_ns;
    uint64_t t0_ns;
} sl_queue;
int sl_queue__init(sl_queue *q, size_t cap, int relaxed);
void sl_queue__destroy(sl_queue *q);
/* SL_OK, or SL_ECANCELED when closed (the caller still owns item). */
int sl_queue__push(sl_queue *q, uint64_t seq, void *item, int barrier, uint64_t epoch,
                   uint64_t *wait_ns);
/* SL_OK with *item, SL_ECANCELED when closed, SL_END on timeout (timeout_ms >= 0). */
int sl_queue__pop(sl_queue *q, void **item, uint64_t *wait_ns, int timeout_ms);
void sl_queue__close(sl_queue *q);
/* Relaxed mode: let consumers take only elements within `reach` of the head
 * (set before use). For the input of a parallel stage, the capacity of that
 * stage's output queue. */
void sl_queue__set_reach(sl_queue *q, size_t reach);
/* The depth in use, within the slots allocated (1 .. cap); a deeper one
 * wakes waiting producers. Only on a queue no map stage reads (the reach
 * rule above is set from capacities). Any thread. */
void sl_queue__set_limit(sl_queue *q, size_t limit);
size_t sl_queue__limit(sl_queue *q);
/* Reset to empty and open; `drop` is called on every element left. */
/* The stream starts at `epoch` (relaxed consumers may take its elements
 * away from head at once). */
void sl_queue__start(sl_queue *q, uint64_t epoch);
void sl_queue__reset(sl_queue *q, void (*drop)(void *item, void *ctx), void *ctx);
double sl_queue__mean_fill(sl_queue *q);
/* Elements in the queue now. */
size_t sl_queue__count(sl_queue *q);

/* ---- exec.c ------------------------------------------------------------------------ */
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

/* The next batch of the last stage, data or a marker (pipeline.c): SL_OK
 * with *out, or with *out NULL on timeout; < 0 when the pipeline failed or
 * stopped (message set). */
int sl_pipeline__pop_batch(struct sl_pipeline *p, sl_batch **out, int timeout_ms);

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

typedef struct sl_stage sl_stage;
typedef struct sl_worker {
    struct sl_pipeline *p;
    sl_stage *st;
    int id;
    void *state[SL_STAGE_MAX_OPS]; /* per-op worker state, by node offset in stage */
    int init_rc;                  /* a worker_init failed: fail every chunk */
    char init_msg[SL__ERRMSG_MAX];
} sl_worker;

struct sl_stage {
    int kind;
    char name[96];
    int first, last;              /* opt nodes [first, last) */
    int workers;                  /* threads started */
    int autotune;
    _Atomic int active;           /* workers allowed to work (autotune) */
    sl_queue out;
    int qcap;
    sl_worker *w;
    sl_workers threads;           /* the stage's threads, running w[i] */
    _Atomic uint64_t elements, busy_ns, wait_in_ns, wait_out_ns;
    _Atomic uint64_t cpu_ns;      /* thread CPU time inside busy_ns */
    /* the op split: image-op phases (decode, resample, normalize) of the
     * timed samples, and how many were timed (src/ops/ops.h) */
    _Atomic uint64_t phase_ns[SL_STAGE_NPHASES], phase_samples;
    _Atomic uint64_t phase_all_ns; /* the same samples' whole per-sample op chain */
    uint64_t seq_out;             /* sequential stages: next output seq */
    uint64_t tune_busy, tune_elements; /* autotune: totals at the last tick */
    uint64_t tune_wait_out;       /* autotune: wait_out_ns at the last tick */
    double tune_cost;             /* autotune: last measured ns per sample (0: none) */
    int spare;                    /* the last worker is autotune's spare (parked
                                     until exploration wakes it) */
};

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
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* autotune changed `active` / cancel */
    uint64_t last_ns;             /* the last tick */
} sl_tune;

/* Sequential-op state of the final stage, also what a saved state restores. */
typedef struct sl_resume {
    uint64_t epoch;
    uint64_t pos;                 /* source stream position to start from */
    uint64_t batch;               /* index of the next batch in the epoch */
    int64_t counters[SL_MAX_COUNTERS];
} sl_resume;

/* Where batches are collated: exactly one of these runs (exec.c, DESIGN). */
typedef enum sl_collate_at {
    SL_COLLATE_FINAL = 0, /* the final stage's one thread copies each sample
                             into its batch (sl_collate__add) */
    SL_COLLATE_FUSED,     /* map + batch fusion: a chunk is a whole batch, and
                             the last parallel stage collates it
                             (sl_collate__chunk, or the readers write rows) */
    SL_COLLATE_PARALLEL   /* the final stage assigns samples to batches and a
                             SL_ST_STACK stage copies them in parallel */
} sl_collate_at;

/* How the stages run a plan: decided once by layout.c (sl_pipeline__layout)
 * when the pipeline is created, printed by explain, never changed after
 * (the pipeline's member is const: only layout.c's one copy writes it). */
typedef struct sl_exec_layout {
    sl_collate_at collate;        /* which of the three collations runs */
    int collate_stage;            /* the stage that collates: the last parallel
                                     one (FUSED), the SL_ST_STACK one
                                     (PARALLEL) or the final one (FINAL) */
    int direct;                   /* FUSED: the consumer takes batches straight
                                     from the collating stage (no final stage
                                     thread) */
    int slot_col;                 /* FUSED: the output column the last op may
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

/* The source cursor (exec_source.c; pipeline.c moves it on set_epoch and
 * restore): where the readers are in the stream. Guarded by mu. */
typedef struct sl_pipeline_cursor {
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
} sl_pipeline_cursor;

/* The shuffle order of the current pass (exec_source.c, shuffle_window.c;
 * the mode and sizes are set at create). Used under the cursor's mu. */
typedef struct sl_pipeline_shuffle {
    int window_mode;              /* window mode (else global) */
    uint64_t window, block;       /* window mode: its sizes (defaults applied) */
    sl_wshuf wsh;                 /* window mode: the current pass's order */
    int wsh_valid;
    sl_feistel gperm;             /* global mode: the current pass's bijection */
    uint64_t gperm_epoch, gperm_rep;
    int gperm_valid;
} sl_pipeline_shuffle;

/* Errors (exec.c records them, pipeline.c fails the iterator, stats.c
 * reports them): guarded by mu. */
typedef struct sl_pipeline_errors {
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
} sl_pipeline_errors;

/* The consumer's side (pipeline.c; one thread). */
typedef struct sl_pipeline_consumer {
    uint64_t epoch;               /* epoch of the next batch */
    int at_end;                   /* the last call returned SL_END */
    sl_resume last;               /* state after the last batch handed out */
    uint64_t replay_skip;         /* batches to drop after a replaying restore */
    uint64_t direct_index;        /* direct: index of the next batch in the epoch */
} sl_pipeline_consumer;

/* Counters read by sl_pipeline_stats_get from any thread (stats.c). */
typedef struct sl_pipeline_counters {
    _Atomic uint64_t t_start, consumer_wait_ns, batches_out, samples_out;
    _Atomic uint64_t threads_started;
    uint64_t cpu_t0_ns;           /* process CPU time at t_start */
    _Atomic uint64_t slot_writes; /* samples that landed in their batch slot
                                     (no copy); read by tests */
    _Atomic uint64_t vec_batches; /* batches that ran the batched kernels; read
                                     by tests */
} sl_pipeline_counters;

/* The memory plan (memory.c, set at create). */
typedef struct sl_pipeline_memory {
    uint64_t limit;               /* bytes the pipeline may hold */
    uint64_t batch_bytes;         /* one batch's fixed-shape columns, as pooled
                                     (0: no batch or none known) */
    uint64_t batches_held;        /* batch buffers in flight at most (0: unbounded) */
    uint64_t sample_bytes[SL_STATS_MAX_STAGES]; /* a sample leaving stage s,
                                     fixed-shape columns only */
} sl_pipeline_memory;

struct sl_pipeline {
    sl_spec *spec;
    sl_plan plan;
    uint64_t spec_hash;

    /* source */
    sl_source *src;
    char src_name[256];
    uint64_t nrecords;
    uint64_t *base;               /* records kept by pushed filters; NULL: all */
    uint64_t nbase;
    int64_t shard_index, shard_count;
    int shard_equal;
    uint64_t per_pass;            /* samples per pass for this rank */
    uint64_t per_epoch;           /* per_pass * repeat */
    sl_pipeline_cursor cur;
    sl_pipeline_shuffle shuf;
    int chunk_size;               /* samples per chunk (autotune may change it) */

    const sl_exec_layout layout;  /* layout.c, written once at create */

    /* stages */
    sl_stage stage[SL_STATS_MAX_STAGES];
    int nstages;
    int running;
    _Atomic int cancel;
    sl_resume start;              /* where the final stage starts */
    int ncpus;                    /* the CPU budget (sl__ncpus) */

    /* recycled chunks: guarded by chunk_mu */
    pthread_mutex_t chunk_mu;
    sl_chunk *free_chunks;
    sl_pipeline__pools *pools;

    sl_pipeline_errors err;
    sl_pipeline_consumer cons;
    sl_tune tune;                 /* autotune.c */
    sl_pipeline_counters stats;
    struct sl_pipeline__trace *trace; /* NULL unless sl_pipeline_trace_enable */
    sl_pipeline_memory mem;
    sl_pipeline__dev *dev;        /* device_handoff.c's; NULL: batches stay in host memory */
};

/* The first epoch the source may not read yet (the cursor's mu held). */
static inline uint64_t sl_pipeline__src_limit(const sl_pipeline_cursor *c) {
    return c->ahead_epoch > c->end_epoch ? c->ahead_epoch : c->end_epoch;
}

/* ---- collate.c: samples into batches ------------------------------------------------ */
/* A batch being filled one sample at a time (the final stage). */
typedef struct sl_collator {
    sl_batch *b;                  /* NULL: none started */
    int64_t filled;
    size_t itemsize[SL_MAX_COLUMNS]; /* bytes per sample of each stacked column */
} sl_collator;
/* Add sample s of `epoch` at stream position pos: stacked columns are copied,
 * ragged ones moved (views copied); the caller still releases s. 1: the batch
 * is complete (sl_collate__take it), 0: not yet, negative: an error. */
int sl_collate__add(struct sl_pipeline *p, sl_collator *k, sl_sample *s, uint64_t pos,
                    uint64_t epoch);
/* The batch filled so far, stacked columns cut to its length; NULL if none. */
sl_batch *sl_collate__take(sl_collator *k);
/* Drop a partial batch. */
void sl_collate__clear(sl_collator *k);
/* Map + batch fusion: collate chunk c (exactly one batch) into c->batch on
 * the worker that finished it; the chunk's samples are released. */
int sl_collate__chunk(struct sl_pipeline *p, sl_chunk *c);
/* Reading straight into the batch (read_rows): c->batch gets the buffers of a
 * batch of the chunk's n records (c->n), and rows[k] the first row of column
 * k; the reader then writes record i's column k at rows[k] + i *
 * p->layout.row_bytes[k]. */
int sl_collate__rows(struct sl_pipeline *p, sl_chunk *c, uint32_t n, char **rows);
/* Take the batch a fused chunk carries; NULL when drop_remainder drops it. */
sl_batch *sl_collate__fused_batch(const struct sl_pipeline *p, sl_chunk *c);
/* A batch marking an epoch's END or an ERROR; NULL when out of memory. */
sl_batch *sl_collate__marker(const struct sl_pipeline *p, int kind, uint64_t epoch, int err_rc,
                             const char *msg);
/* What the consumer gets for chunk c of the collating stage (direct mode):
 * its batch, numbered from *next_index (NULL when dropped), or a marker
 * (END resets *next_index). SL_OK or SL_ENOMEM. */
int sl_collate__from_chunk(const struct sl_pipeline *p, sl_chunk *c, uint64_t *next_index,
                           sl_batch **out);
void sl_pipeline__batch_free(sl_batch *b);

/* Move this thread's image-op phase counters into stage `st` (stats.c);
 * called by a worker after each unit of work. */
void sl_pipeline__phases_take(sl_stage *st);

/* layout.c: cut the optimised plan into stages, decide map + batch fusion
 * and direct hand-off, size the queues (once, at create). */
int sl_pipeline__layout(struct sl_pipeline *p);
/* memory.c: apply the memory limit to the layout (after sl_pipeline__layout,
 * before the batch pools are reserved); SL_ELIMIT when one batch, or the
 * fewest batches the pipeline can run with, does not fit. */
int sl_pipeline__memory_plan(struct sl_pipeline *p);
/* Bytes of one element of column ci (times `lead`): 0 when its dtype or a
 * dim is not known at plan time, or it is encoded bytes (memory.c). */
size_t sl_pipeline__col_bytes(const sl_colinfo *ci, size_t lead);
/* Estimated bytes of one element of stage s's output queue: a batch, or a
 * chunk of samples (fixed-shape columns only). Any thread. */
uint64_t sl_pipeline__elem_bytes(const struct sl_pipeline *p, int s);
/* exec.c */
void sl_pipeline__chunk_put(struct sl_pipeline *p, sl_chunk *c);
int sl_pipeline__start(struct sl_pipeline *p, const sl_resume *r);
void sl_pipeline__stop(struct sl_pipeline *p);
void sl_pipeline__free_chunks(struct sl_pipeline *p);
/* trace.c */
void sl_pipeline__trace_add(struct sl_pipeline *p, int stage, int worker, uint64_t t0,
                            uint64_t dur, uint32_t n);
void sl_pipeline__trace_free(struct sl_pipeline *p);
/* autotune.c: one spare thread, started parked, on each auto stage for
 * exploration past the core budget; after the memory plan and the batch
 * reserve, which count only the budget's workers (see autotune.c). */
int sl_pipeline__tune_spare(struct sl_pipeline *p);
/* autotune.c: rebalance workers of "auto" stages and the chunk size. */
void sl_pipeline__autotune(struct sl_pipeline *p);
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

#endif /* SL_PIPELINE_H */
