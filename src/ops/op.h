/*
 * op.h — the interface between the pipeline engine and the per-sample ops it
 * runs (decode, crops, normalize, filters, ...). Never installed.
 *
 * An op is described by one constant `sl_op_def` (a table of function
 * pointers) and registered by one line in op_table.c. The engine drives each
 * op through four phases:
 *
 *   1. parse   (plan time, once)      JSON params -> the op's params struct.
 *   2. bind    (plan time, once)      column names -> indices; the op updates
 *                                     the column set it receives to describe
 *                                     its output (dtype/shape when known).
 *   3. fuse    (optimiser, optional)  the op is asked whether it can merge
 *                                     with the op right after it.
 *   4. apply   (run time, per sample, on worker threads, concurrently)
 *                                     transform one sample in place, using
 *                                     per-worker state and the sample's RNG
 *                                     (an op's apply, or its kernel run by
 *                                     the op table: "One kernel per op").
 *
 * Rules an op must follow (the engine relies on them):
 *  - `params` are read-only after bind/fuse: apply() runs on many threads at
 *    once with the same params. Mutable per-thread things (a TurboJPEG handle,
 *    scratch rows) go in the per-worker state made by worker_init().
 *  - Every random choice is drawn from sl_op_rng(ctx) (or sl_op_rng_part for a
 *    fused op), never from rand()/time: the engine keys it by (seed, epoch,
 *    sample, op position), which makes batches identical on 1 or 32 threads.
 *  - Output tensors are taken with sl_op_alloc() (from the allocator the
 *    engine puts in the context, its pools: no malloc in steady state; an
 *    op never calls the engine) and installed with sl_op_set_column(),
 *    which releases the old one.
 *    An input tensor may be a borrowed view (buf == NULL) of record bytes that
 *    stay valid for the whole apply call; never keep a pointer to it after.
 *  - On failure apply() returns a negative status with a message giving the
 *    cause only ("corrupt JPEG data: premature end of data segment"); the
 *    engine prefixes file, record and op ("a.slr: record 17: ops[1] (decode):
 *    ...") and applies the pipeline's error policy. The sample is released by
 *    the engine either way.
 *  - apply() returning SL_OP_DROP (> 0) drops the sample silently (filters).
 *
 * Parameter errors name the spec field: the engine passes `field` = "ops[2]"
 * and helpers below produce "ops[2].size: must be a positive integer".
 *
 * Map + batch: when no sample can be dropped before `batch` (no filters
 * left, policy fail), each chunk of work is exactly one batch, collated by
 * the worker that ran the last map. That worker takes the batch buffer of the
 * largest fixed-shape column before running the ops, and the stage's last op
 * gets the sample's slot in it through sl_op_alloc: an op that allocates its
 * output with sl_op_alloc writes into the batch with no further copy (for a
 * 3x224x224 float32 image that saves a 602 KB memcpy per sample and keeps a
 * whole batch of per-sample outputs from being live at once). A sample whose
 * column did not land in its slot (another op last, a different shape) is
 * copied in as before; ragged columns are per-sample lists. Ops need not know
 * any of this. See docs/PIPELINE.md.
 */
#ifndef SL_OPS_OP_H
#define SL_OPS_OP_H

#include "core/core.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <string.h>

/* apply() return value: drop this sample (not an error). */
#define SL_OP_DROP 2

/* What the plan knows about one column at some point of the chain. */
typedef struct sl_colinfo {
    char name[SL_COLNAME_MAX];
    sl_dtype dtype;             /* SL_DTYPE_INVALID when not known until run time */
    int ndim;                   /* -1 when not known */
    int64_t shape[SL_MAX_DIMS]; /* -1 for a dim that varies per sample */
    int encoded;                /* 1: 1-D SL_U8 bytes holding an encoded payload
                                   (JPEG/PNG...), to be decoded */
    int index_column;           /* 1: an INT64/FLOAT64 column of an .slr index
                                   (filters on it are pushed into the source) */
    int text;                   /* 1: UTF-8 text (a source string column) that no op
                                   has rewritten; consumers may show it as a string.
                                   The plan clears it for any column whose dtype,
                                   shape or encoding an op's bind changes */
} sl_colinfo;

/* The columns of a sample at some point of the chain, in sample order. */
typedef struct sl_colset {
    int ncols;
    sl_colinfo col[SL_MAX_COLUMNS];
} sl_colset;

/* Index of column `name` in `cols`; on failure returns SL_EINVAL with
 * "<field>: no column 'x' (columns: image, label)", closest first. `field` is the spec field
 * that named it, e.g. "ops[2].column". */
int sl_op_find_column(const sl_colset *cols, const char *name, const char *field);

/* Append a column (for ops that add one); SL_EINVAL if the name exists or
 * there are SL_MAX_COLUMNS already. Returns the new index (>= 0) or an error. */
int sl_op_add_column(sl_colset *cols, const char *name, const char *field);

/* ---- parameter helpers -------------------------------------------------------
 * Each reads obj[key] as one entry of a parameter table (core/params.h), so
 * op parameters are checked and reported as every key of a spec is. `field`
 * is the op's spec path ("ops[2]"); messages read "<field>.<key>: <problem>",
 * a wrong value naming the allowed range and the value given. `required`: a
 * missing key is an error; else the default is stored. All return SL_OK or
 * SL_EINVAL. */

/* Reject keys not in `allowed` (a NULL-terminated list; "op" and "parallel"
 * are always allowed): "<field>.sizee: unknown parameter (parameters: size, ...)",
 * the valid ones closest first. */
int sl_op_param_check_keys(const cJSON *obj, const char *field, const char *const *allowed);
/* An integer in [min, max]. */
int sl_op_param_int(const cJSON *obj, const char *key, const char *field, int required,
                    int64_t def, int64_t min, int64_t max, int64_t *out);
/* A number in [min, max]. */
int sl_op_param_double(const cJSON *obj, const char *key, const char *field, int required,
                       double def, double min, double max, double *out);
/* true/false. */
int sl_op_param_bool(const cJSON *obj, const char *key, const char *field, int required,
                     int def, int *out);
/* A string copied into out[cap] (cap includes the zero); `def` may be NULL
 * only when required. */
int sl_op_param_string(const cJSON *obj, const char *key, const char *field, int required,
                       const char *def, char *out, size_t cap);
/* One of `choices` (NULL-terminated); *out is the index of the match. */
int sl_op_param_enum(const cJSON *obj, const char *key, const char *field, int required,
                     int def, const char *const *choices, int *out);
/* A number or an array of numbers, between min_n and max_n of them
 * (a bare number counts as an array of one). *n_out gets the count. */
int sl_op_param_doubles(const cJSON *obj, const char *key, const char *field, int required,
                        int min_n, int max_n, double *out, int *n_out);

/* ---- run-time context ----------------------------------------------------------
 * Filled by the engine for each (sample, op). Ops read it through the
 * functions below; the fields are visible only so those can be inline. */
#define SL_OP_MAX_PARTS 4

/* Where an op's output tensors come from, set by the engine (its buffer
 * pools: no malloc in steady state; a test may give sl_tensor_alloc's heap).
 * Same contract as sl_tensor_alloc: C-contiguous, contents uninitialised,
 * SL_OK, SL_EINVAL (bad shape) or SL_ENOMEM. The batch form takes a tensor
 * of shape[0] rows from the buffers of `rows` rows (rows >= shape[0]), so a
 * short last batch reuses a full batch's buffer. */
typedef int (*sl_op_alloc_fn)(void *alloc_ctx, sl_tensor *t, sl_dtype dtype, int ndim,
                              const int64_t *shape);
typedef int (*sl_op_batch_alloc_fn)(void *alloc_ctx, sl_tensor *t, sl_dtype dtype, int ndim,
                                    const int64_t *shape, int64_t rows);

typedef struct sl_op_ctx {
    uint64_t seed;                    /* pipeline seed */
    uint64_t epoch;                   /* current epoch */
    uint64_t key;                     /* the sample's RNG index: record index +
                                         repetition * dataset size */
    uint64_t index;                   /* record index the sample came from */
    uint64_t stream_pos;              /* its position in the epoch's stream (resume) */
    uint32_t nparts;                  /* 1, or the number of ops fused into this one */
    uint32_t pos[SL_OP_MAX_PARTS];    /* op positions in the spec ("ops[pos]") */
    unsigned rng_ready;               /* bit i: rng[i] is keyed */
    sl_rng rng[SL_OP_MAX_PARTS];
    sl_op_alloc_fn alloc;             /* where sl_op_alloc takes buffers */
    void *alloc_ctx;
    /* Map + batch: this sample's slot in the batch being filled, offered to
     * the last op of the collating stage only (else NULL). sl_op_alloc hands
     * it out once, for a request of exactly slot_dtype/slot_ndim/slot_shape. */
    void *slot;
    sl_buffer *slot_buf;              /* the batch buffer holding the slot */
    sl_dtype slot_dtype;
    int slot_ndim;
    const int64_t *slot_shape;
} sl_op_ctx;

/* This sample's generator for this op, keyed by (seed, epoch, sample key,
 * op position) on first use. For a fused op, the generator of its first part. */
sl_rng *sl_op_rng(sl_op_ctx *ctx);
/* The generator of part `part` (0-based) of a fused op: a fused
 * decode+random_resized_crop draws its box from part 1, so that the box equals
 * the one the unfused random_resized_crop (at that position) would draw. */
sl_rng *sl_op_rng_part(sl_op_ctx *ctx, unsigned part);

/* A tensor with a pooled buffer (no malloc in steady state): C-contiguous,
 * dtype/shape as given, contents uninitialised. When the engine offers this
 * sample's batch slot (ctx->slot) and dtype/shape are exactly the slot's, the
 * tensor is that slot (a view holding a reference to the batch buffer), so
 * the op writes straight into the batch and collation skips the copy; such a
 * tensor is aligned to the sample size within the batch rather than to 64.
 * @return SL_OK, SL_EINVAL (bad shape), SL_ENOMEM. */
int sl_op_alloc(sl_op_ctx *ctx, sl_tensor *out, sl_dtype dtype, int ndim, const int64_t *shape);

/* Replace column `col` of `s` with `t` (ownership of t's reference moves into
 * the sample; the old column's reference is dropped). */
static inline void sl_op_set_column(sl_sample *s, int col, sl_tensor *t) {
    sl_tensor_release(&s->col[col]);
    s->col[col] = *t;
    if ((uint32_t)col >= s->ncols)
        s->ncols = (uint32_t)col + 1;
    memset(t, 0, sizeof *t);
}

/* ---- batched runs (map vectorization) -----------------------------------------------
 * map(f).batch(b) runs as batch(b).map(batched f) when every op at the tail of
 * the collating stage has a kernel (sl_op_can_batch; layout.c,
 * choose_vectorized): the op table's driver then runs it once per batch on
 * the stacked batch columns (sl_op_apply_batch). The result is
 * byte-identical to running it on each sample and stacking: per-sample
 * draws come from sl_op_batch_rng, keyed exactly as sl_op_rng_part keys them
 * for that sample. */
typedef struct sl_op_bctx {
    uint64_t seed, epoch;
    uint32_t n;                       /* samples in the batch */
    const uint64_t *key;              /* n sample RNG keys (sl_op_ctx.key) */
    uint32_t nparts;
    uint32_t pos[SL_OP_MAX_PARTS];
    sl_op_batch_alloc_fn alloc;       /* where sl_op_batch_alloc takes buffers */
    void *alloc_ctx;
    int64_t rows;                     /* batch size (>= n): a short last batch takes a
                                         full batch's buffer */
} sl_op_bctx;

/* Sample i's generator for part `part` of the op (as sl_op_rng_part gives it
 * to the per-sample apply of that sample). */
void sl_op_batch_rng(const sl_op_bctx *ctx, uint32_t i, unsigned part, sl_rng *out);
/* A pooled tensor for a batch column (contents uninitialised), from the
 * batch pools (pinned memory when the pipeline has a device). */
int sl_op_batch_alloc(sl_op_bctx *ctx, sl_tensor *out, sl_dtype dtype, int ndim,
                      const int64_t *shape);

/* ---- the op definition ----------------------------------------------------------- */

/* Flags. */
#define SL_OPF_RANDOM 0x1u   /* draws from the RNG (explain marks it) */
#define SL_OPF_FILTER 0x2u   /* may return SL_OP_DROP */

typedef struct sl_op_def sl_op_def;
struct sl_op_chain;
struct sl_op_chain_out;
struct sl_op_def {
    const char *name;      /* the JSON "op" value, e.g. "decode" */
    const char *summary;   /* one line for explain and docs */
    unsigned flags;        /* SL_OPF_* */
    size_t params_size;    /* bytes of the params struct; the engine allocates it
                              zeroed and passes it to parse() */

    /* Read params from `json` (the whole op object). Required. */
    int (*parse)(void *params, const cJSON *json, const char *field);

    /* Resolve column names to indices and describe the output: update `cols`
     * in place (change dtype/shape/encoded of the columns it writes, add
     * columns). `field` is "ops[i]". Required. */
    int (*bind)(void *params, sl_colset *cols, const char *field);

    /* Release anything parse()/bind() allocated inside params (not params
     * itself). Optional. */
    void (*params_free)(void *params);

    /* Per-worker state, made once per worker thread when the stage starts and
     * freed when it stops (threads live across epochs). Optional. */
    int (*worker_init)(const void *params, void **state_out);
    void (*worker_free)(void *state);

    /* Transform one sample in place. Required unless `kernel` is given. See
     * the rules at the top. */
    int (*apply)(const void *params, void *state, sl_op_ctx *ctx, sl_sample *s);

    /* Optional: can this op fuse with `next` (the op right after it, already
     * bound)? Return 0 for no; 1 for yes, with *fused_def set to the fused
     * op's definition and *fused_params to its params (allocated with
     * sl__calloc; the engine frees them with fused_def->params_free then
     * sl__free). The fused params must be ready to apply (bind is not called
     * again) and must not point into this op's or next's params, which the
     * engine frees. Negative: an error. The fused op gets ctx->nparts = 2 with
     * both positions, so it can key its draws like the unfused ops did. */
    int (*fuse)(const void *params, const sl_op_def *next, const void *next_params,
                const sl_op_def **fused_def, void **fused_params);

    /* Optional: chain rewrite (optimiser, after fusion). The op, first of
     * `in`, may take the nodes after it into one new op: return 0 for no; 1
     * for yes, with `out` filled (sl_op_chain_out); negative: an error that
     * names the node it refuses. See "Chain rewrites" below. */
    int (*chain)(const void *params, const struct sl_op_chain *in, struct sl_op_chain_out *out);

    /* Optional: the params in a few words for explain ("size=224x224
     * scale=[0.08,1]"). */
    void (*describe)(const void *params, char *buf, size_t cap);

    /* Optional, instead of apply: the op's per-sample kernel (below), which
     * the op table's drivers run per sample and, vectorized, per batch. */
    const struct sl_op_kernel *kernel;
};

/* ---- Chain rewrites (sl_op_def.chain) ---------------------------------------------
 * After fusion the optimiser offers each op with a `chain` hook the nodes
 * from it to the end of the plan. The hook says how many it takes (the first
 * included) and gives the op they become; it may also refuse a node anywhere
 * after it (an error naming that node). The engine knows nothing of what the
 * op does: it replaces the taken nodes with one node of `out->def`, and when
 * `out->handoff` is set, the pipeline's device hand-off finishes that node's
 * output (src/pipeline/stage_handoff.c) and the consumer gets
 * `out->consumer_cols`. */
typedef struct sl_op_chain_node {
    const sl_op_def *def;        /* the op; NULL for a user map or filter, or a
                                    sequential node */
    const void *params;
    int seq;                     /* 1: a sequential node (batch, prefetch, take, skip,
                                    shuffle_buffer) */
    int pos;                     /* its spec position ("ops[pos]") */
    const char *label;           /* its name in the plan ("decode", "map 'fn'") */
    const uint32_t *parts;       /* the spec positions of the ops fused into it */
    int nparts;
    const sl_colset *cols;       /* the columns after it */
} sl_op_chain_node;

typedef struct sl_op_chain {
    const sl_op_chain_node *node; /* node[0] is the op asked, then every node after it */
    int n;
    int drop_remainder;           /* the plan's batch drops its remainder */
} sl_op_chain;

typedef struct sl_op_chain_out {
    int taken;                    /* nodes taken, node[0] included (1..n) */
    const sl_op_def *def;         /* the op they become */
    void *params;                 /* its params, ready to apply (sl__calloc; the engine
                                     frees them with def->params_free, then sl__free) */
    char label[32];               /* its name in the plan */
    sl_colset cols;               /* the columns after it */
    int handoff;                  /* 1: the device hand-off finishes its output */
    int takes_drop_remainder;     /* 1 (with handoff): the hand-off drops the batch
                                     remainder, the host batches keep theirs */
    sl_colset consumer_cols;      /* with handoff: the columns the consumer gets */
    const char *consumer_note;    /* with handoff: explain's words for them */
} sl_op_chain_out;

/* ---- the engine's own ops (ops_builtin.c) -----------------------------------------
 * `filter` and `select`; the optimiser knows them by address (it pushes a
 * leading filter into an .slr source's index and moves selects forward). */
#define SL_FILTER_MAX_VALUES 65536
typedef struct sl_filter_params {
    char column[SL_COLNAME_MAX];
    int col;          /* bound column index */
    int negate;       /* not_in */
    int n;
    double *values;   /* sorted */
} sl_filter_params;
/* Does value v pass filter f? */
int sl_op__filter_match(const sl_filter_params *f, double v);
extern const sl_op_def sl_op_filter;
extern const sl_op_def sl_op_select;

/* ---- One kernel per op ------------------------------------------------------------
 * An op that replaces one column with a value computed from that column of
 * the same sample alone gives its kernel once, as an sl_op_kernel, and no
 * apply: the op table runs it per sample (sl_op_apply: the output from
 * sl_op_alloc, so straight into the batch slot when offered) and over a
 * stacked batch (sl_op_apply_batch: one batch tensor, the kernel on each
 * sample's row), with the same draws and so the same bytes. */
#define SL_OP_KEEP 3                /* prepare(): the column stays as it is */
#define SL_OP_KERNEL_SCRATCH 64     /* bytes prepare() may hand to run() */
typedef struct sl_op_kernel {
    size_t col_offset;              /* offsetof(params struct, the bound `int` column) */
    int image;                      /* 1: reads an HWC uint8 image (batched only
                                       when the plan says the column is one) */
    int batches;                    /* 1: may run over a stacked batch (map
                                       vectorization; sl_op_can_batch) */
    int elementwise;                /* 1: each output element depends on the input
                                       element alone and nothing is drawn (cast):
                                       a batch runs as one call on the whole
                                       stacked column */
    int timed;                      /* 1: the per-sample run is timed as `phase`
                                       (SL_PHASE_*, ops.h) */
    int phase;
    /* The output for one sample's column `in` (per sample: the column; per
     * batch: a view of the sample's row): set out's dtype, ndim and shape
     * (nothing else); draw from `rng` (the op's generator for the sample;
     * NULL unless the op is SL_OPF_RANDOM); leave for run() what it needs
     * in `scratch`. Returns SL_OK, SL_OP_KEEP (the column stays: run() is
     * not called; the output must then be the input's dtype and shape), or
     * a negative status with the cause only. */
    int (*prepare)(const void *params, sl_rng *rng, const sl_tensor *in, sl_tensor *out,
                   void *scratch);
    /* Write `out` (made as prepare() described it) from `in`. */
    int (*run)(const void *params, const void *scratch, const sl_tensor *in, sl_tensor *out);
} sl_op_kernel;

/* A pointer to the kernel of an op whose params type and functions share
 * one prefix (PREFIX_params with the bound column in `col`,
 * PREFIX_prepare, PREFIX_run), for sl_op_def.kernel; the other fields
 * follow as designated initializers. */
#define SL_OP_KERNEL(PREFIX, ...)                                                         \
    (&(const sl_op_kernel){.col_offset = offsetof(PREFIX##_params, col),                 \
                           .prepare = PREFIX##_prepare,                                  \
                           .run = PREFIX##_run,                                          \
                           __VA_ARGS__})

/* For prepare(): the output is `dtype` with `ndim` dims `shape` (only those
 * fields of `out` are set). */
static inline void sl_op_kernel_out(sl_tensor *out, sl_dtype dtype, int ndim,
                                    const int64_t *shape) {
    out->dtype = dtype;
    out->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        out->shape[d] = shape[d];
}

/* ---- the op table (op_table.c): the engine's one way to ops ------------------------- */

/* The definition of an op whose params type and functions share one
 * prefix (PREFIX_params, PREFIX_parse, PREFIX_bind, PREFIX_describe); the
 * other fields follow as designated initializers. */
#define SL_OP_DEF(PREFIX, NAME, SUMMARY, ...)                                                \
    {                                                                                       \
        .name = NAME, .summary = SUMMARY, .params_size = sizeof(PREFIX##_params),           \
        .parse = PREFIX##_parse, .bind = PREFIX##_bind, .describe = PREFIX##_describe,      \
        __VA_ARGS__                                                                         \
    }

/* The registered op called `name`, or NULL. */
const sl_op_def *sl_op_lookup(const char *name);
/* The i-th registered op (for docs and `explain`), NULL past the end. */
const sl_op_def *sl_op_at(int i);
/* Run op `def` on one sample (its apply, or its kernel). */
int sl_op_apply(const sl_op_def *def, const void *params, void *state, sl_op_ctx *ctx,
                sl_sample *s);
/* Map vectorization: can op `def`, given the columns it receives (`in`,
 * plan time), run on a stacked batch instead? 1 when its kernel batches and
 * the column it reads has a known dtype and shape (an HWC uint8 image for
 * an image kernel). */
int sl_op_can_batch(const sl_op_def *def, const void *params, const sl_colset *in);
/* Run op `def` once on a batch's columns (`col[c]` stacked, leading dim
 * ctx->n, each sample's column as `in` described it at plan time; the
 * engine checks this per batch and runs sl_op_apply per sample when it does
 * not hold), replacing the column it writes. The result equals sl_op_apply
 * per sample, stacked. Negative: an error (the cause only). */
int sl_op_apply_batch(const sl_op_def *def, const void *params, void *state, sl_op_bctx *ctx,
                      sl_tensor *col);

/* An error from the image functions (`rc`, message "resize: ..."): the
 * message keeps the cause alone, since the engine names the op already.
 * Returns rc. */
int sl_op_cause_only(int rc);

/* ---- placements (image_ops.c) -----------------------------------------------------
 * Where a fused decode op reads in an H x W image, from the header alone:
 * the source region `box` (x0, y0, x1, y1), the source pixels `lim` the
 * filter may read, the output size and the mirror. The CPU ops
 * (decode + random_resized_crop (+ flip), decode + resize (+ center_crop))
 * draw theirs through these functions; GPU decode (gpu_decode_place, below)
 * draws the same ones on the CPU with the same generators, for its kernel
 * (src/device/crop_resize.cu) to read. */
typedef struct sl_place {
    double box[4];
    int lim[4];
    int oh, ow;
    int mirror;
    /* resize + center_crop only: the resized shape and the crop; pads is 1
     * when the crop is larger than the resized image (no box: the CPU op
     * runs resize then a padding crop) */
    int rh, rw;
    sl_box crop;
    int pads;
} sl_place;
/* random_resized_crop to oh x ow (its box drawn from `box_rng`, as
 * sl_rrc_box), then, when flip_rng is not NULL, a mirror with probability
 * flip_p drawn from `flip_rng`. Reads only inside the box. */
int sl_place_rrc(int H, int W, const double scale[2], const double ratio[2], int oh, int ow,
                 sl_rng *box_rng, double flip_p, sl_rng *flip_rng, sl_place *out);
/* resize to (rh, rw) (the shorter side to `size` when `shorter`, else
 * size_h x size_w), then center_crop ch x cw when ch > 0: the crop as a box
 * of the original, read anywhere in it (resize-then-crop). */
void sl_place_resize_crop(int H, int W, int shorter, int size_h, int size_w, int ch, int cw,
                          sl_place *out);

/* ---- GPU decode's CPU half (image_ops.c) ------------------------------------------
 * `{"op": "decode", "device": "gpu"}` and the ops the GPU kernel fuses after
 * it (random_resized_crop, or resize + center_crop; then flip, and a float32
 * normalize or none) become one op, gpu_decode_place, that reads each JPEG's
 * header and draws its placement with the generators and sl_place_*
 * functions the CPU ops use, keeps the encoded bytes in the image column and
 * adds a column of SL_GPU_PLACE_N float64 values per sample (below); the
 * device hand-off decodes the batch on the GPU (docs/DEVICE.md). */
enum {
    SL_GPU_PLACE_BOX = 0,      /* box x0, y0, x1, y1 (4 values) */
    SL_GPU_PLACE_LIM = 4,      /* lim x0, y0, x1, y1 (4 values) */
    SL_GPU_PLACE_FLIP = 8,     /* 1: mirrored */
    SL_GPU_PLACE_H = 9,        /* the header's height and width */
    SL_GPU_PLACE_W = 10,
    SL_GPU_PLACE_RECORD = 11,  /* the record index (for messages) */
    SL_GPU_PLACE_POS = 12,     /* the stream position (the resume point after it) */
    SL_GPU_PLACE_N = 13
};
typedef struct sl_gpu_decode {
    int col;                   /* the image column */
    int pcol;                  /* the placement column gpu_decode_place adds (the last) */
    char column[SL_COLNAME_MAX];
    int warnings;              /* the decode op's options (the CPU fallback's decoder) */
    int stage;                 /* chain so far: 0 decode, 1 crop placed, 2 normalized */
    int crop;                  /* 1 random_resized_crop, 2 resize (+ center_crop) */
    double scale[2], ratio[2]; /* random_resized_crop */
    uint32_t rrc_pos;          /* its spec position (its generator) */
    int shorter, size_h, size_w, ch, cw; /* resize (+ center_crop when ch > 0) */
    int has_flip;
    double flip_p;
    uint32_t flip_pos;         /* the flip's spec position (its generator) */
    int oh, ow;                /* the output image */
    float mean[3], std[3];
    int hwc, u8;               /* its layout and type: float32 CHW or HWC after a normalize,
                                  uint8 HWC without one (the CPU chain's output) */
    int drop_remainder;        /* the batch op's: applied by the hand-off, which sees the
                                  batches after skipped samples are refilled (the host
                                  batches keep their remainder) */
} sl_gpu_decode;
/* The op the chain becomes (params: an sl_gpu_decode): the decode ops'
 * chain hook (sl_op_def.chain) makes it. */
extern const sl_op_def sl_op_gpu_decode_place;

#endif /* SL_OPS_OP_H */
