/*
 * spec.h — what the user asked for (spec.c): the source, the ops, the
 * settings; built from C, Python or a JSON file.
 * Never installed.
 */
#ifndef SL_SPEC_H
#define SL_SPEC_H

#include "core/core.h"
#include "device/device.h"
#include "source/source.h"

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

/* A mixture's source ({"kind": "mix", ...}; docs/PIPELINE.md, "Mixtures"):
 * its inputs, each a spec of its own holding its source and shuffle, and
 * how they are blended. */
#define SL_MIX_MAX 64
enum { SL_MIX_STOP_NEVER = 0, SL_MIX_STOP_FIRST = 1, SL_MIX_STOP_ALL = 2 };
enum { SL_MIX_RANDOM = 0, SL_MIX_EXACT = 1 };
typedef struct sl_spec_mix {
    int n;
    struct sl_spec *in[SL_MIX_MAX]; /* input k: its source object, shuffle and
                                       per-sample ops (its own "ops") */
    int has_ops;                  /* 1: some input has ops of its own */
    double weight[SL_MIX_MAX];    /* > 0 in all; with by_samples: samples[k] */
    uint64_t samples[SL_MIX_MAX]; /* by_samples: input k's samples per epoch */
    int by_samples;
    int stop;                     /* SL_MIX_STOP_* */
    int schedule;                 /* SL_MIX_RANDOM / EXACT */
    int has_seed;
    uint64_t seed;                /* the schedule's and the inputs' orders'
                                     (default: the spec's seed) */
    char column[SL_COLNAME_MAX];  /* the source-index column; "" none */
    int ncols;                    /* "columns": keep these of every input (0: all) */
    char cols[SL_MAX_COLUMNS][SL_COLNAME_MAX];
} sl_spec_mix;

struct sl_spec {
    cJSON *input;                /* the source object's input: the kind key and
                                    its options ({"path": ...}); NULL for memory */
    sl_source *mem;              /* a memory source (a reference) */
    sl_spec_mix *mix;            /* a mixture of inputs (owned), or NULL */
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
                                    cache.c); 0 keeps no cache on disk */
    sl_spec_op *ops;
    int nops, cap;
};
int sl_spec__copy(sl_spec **out, const sl_spec *src);
/* The bytes the pipeline may hold: memory_limit, or by default a quarter of
 * the memory this process may use (sl__mem_total; docs/PIPELINE.md, "Memory"). */
uint64_t sl_spec__memory_limit(const sl_spec *s);
/* The spec as a cJSON document (for to_json and state hashing). */
cJSON *sl_spec__to_cjson(const sl_spec *s);
/* Parse a "parallel" value: number >= 1 or "auto" (-1); 0 when absent. */
int sl_spec__parse_parallel(const cJSON *v, const char *field, int *out);

#endif /* SL_SPEC_H */
