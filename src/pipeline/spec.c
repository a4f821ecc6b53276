/*
 * spec.c — what the user asked for: a source, an ordered list of ops and a
 * few options, built by C calls or read from JSON into the same structure.
 * Top-level and source fields are checked here; op parameters are checked by
 * the plan (plan.c), which knows the columns.
 */
#include "pipeline/plan.h"
#include "core/params.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int sl_spec_create(sl_spec **out) {
    sl_spec *s = sl__calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return sl__oom("creating a spec");
    s->epochs = 1;
    s->deterministic = 1;
    s->vectorize = 1;
    s->read_rows = 1;
    s->parallel_collate = 1;
    s->shard_count = 1;
    *out = s;
    return SL_OK;
}

static void mix_free(sl_spec_mix *m) {
    if (!m)
        return;
    for (int k = 0; k < m->n; k++)
        sl_spec_free(m->in[k]);
    sl__free(m);
}

void sl_spec_free(sl_spec *s) {
    if (!s)
        return;
    mix_free(s->mix);
    for (int i = 0; i < s->nops; i++)
        cJSON_Delete(s->ops[i].json);
    sl__free(s->ops);
    cJSON_Delete(s->input);
    sl_source__release(s->mem);
    sl__free(s);
}

static int push_op(sl_spec *s, sl_spec_op *op) {
    size_t cap = (size_t)s->cap;
    SL_TRY(sl__grow((void **)&s->ops, &cap, (size_t)s->nops + 1, sizeof *s->ops, 8,
                    "adding an op to a spec"));
    s->cap = (int)cap;
    s->ops[s->nops++] = *op;
    return SL_OK;
}

/* Make `input` (owned) the spec's source: a file source's object. */
static void set_input(sl_spec *s, cJSON *input) {
    cJSON_Delete(s->input);
    s->input = input;
    mix_free(s->mix);
    s->mix = NULL;
    sl_source__release(s->mem);
    s->mem = NULL;
}

int sl_spec_set_source_path(sl_spec *s, const char *path) {
    if (!path || !path[0])
        return sl__error(SL_EINVAL, "source.path: must be a non-empty string");
    cJSON *in = cJSON_CreateObject();
    if (!in || !cJSON_AddStringToObject(in, "path", path)) {
        cJSON_Delete(in);
        return sl__oom("setting the source path");
    }
    set_input(s, in);
    return SL_OK;
}

static void set_mem(sl_spec *s, sl_source *m) {
    set_input(s, NULL);
    s->mem = m;
}

int sl_spec_set_source_columns(sl_spec *s, int ncols, const char *const *names,
                               const sl_tensor *cols) {
    sl_source *m;
    SL_TRY(sl_source__mem_columns(&m, ncols, names, cols));
    set_mem(s, m);
    return SL_OK;
}

int sl_spec_set_source_samples(sl_spec *s, int ncols, const char *const *names,
                               const sl_sample *samples, uint64_t count) {
    sl_source *m;
    SL_TRY(sl_source__mem_samples(&m, ncols, names, samples, count));
    set_mem(s, m);
    return SL_OK;
}

int sl_spec_set_shuffle(sl_spec *s, int shuffle) {
    s->shuffle = shuffle != 0;
    return SL_OK;
}

int sl_spec_set_shuffle_mode(sl_spec *s, sl_shuffle_mode mode, uint64_t window,
                             uint64_t block) {
    if (mode != SL_SHUFFLE_AUTO && mode != SL_SHUFFLE_GLOBAL && mode != SL_SHUFFLE_WINDOW)
        return sl__error(SL_EINVAL, "source.shuffle.mode: must be SL_SHUFFLE_AUTO, "
                                    "SL_SHUFFLE_GLOBAL or SL_SHUFFLE_WINDOW, got %d", (int)mode);
    if (window && block > window)
        return sl__error(SL_EINVAL, "source.shuffle.block: must be at most window (%llu), got "
                                    "%llu", (unsigned long long)window, (unsigned long long)block);
    s->shuffle = 1;
    s->shuffle_mode = (int)mode;
    s->shuffle_window = window;
    s->shuffle_block = block;
    return SL_OK;
}

int sl_spec_set_shard(sl_spec *s, int64_t index, int64_t count, sl_shard_equal equal) {
    if (count < 1)
        return sl__error(SL_EINVAL, "source.shard.count: must be a positive integer");
    if (index < 0 || index >= count)
        return sl__error(SL_EINVAL, "source.shard.index: must be in [0, %lld) (got %lld)",
                         (long long)count, (long long)index);
    if ((int)equal < SL_SHARD_PAD || (int)equal > SL_SHARD_NONE)
        return sl__error(SL_EINVAL, "source.shard.equal: must be pad, drop or none");
    s->shard_mode = SL_SHARD_SET;
    s->shard_index = index;
    s->shard_count = count;
    s->shard_equal = (int)equal;
    return SL_OK;
}

int sl_spec_set_seed(sl_spec *s, uint64_t seed) {
    s->seed = seed;
    return SL_OK;
}

int sl_spec_set_epochs(sl_spec *s, int64_t epochs) {
    if (epochs < 1)
        return sl__error(SL_EINVAL, "epochs: must be a positive integer");
    s->epochs = epochs;
    return SL_OK;
}

int sl_spec_set_on_error(sl_spec *s, sl_on_error policy) {
    if (policy != SL_ON_ERROR_FAIL && policy != SL_ON_ERROR_SKIP)
        return sl__error(SL_EINVAL, "on_error: must be \"fail\" or \"skip\"");
    s->on_error = (int)policy;
    return SL_OK;
}

int sl_spec_set_deterministic(sl_spec *s, int deterministic) {
    s->deterministic = deterministic != 0;
    return SL_OK;
}

int sl_spec_set_threads(sl_spec *s, int threads) {
    if (threads < 0 || threads > 1024)
        return sl__error(SL_EINVAL, "threads: must be between 0 and 1024");
    s->threads = threads;
    return SL_OK;
}

static int add_json_op(sl_spec *s, cJSON *obj, int index) {
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(obj, "op");
    if (!cJSON_IsObject(obj)) {
        cJSON_Delete(obj);
        return sl__error(SL_EINVAL, "ops[%d]: must be an object", index);
    }
    if (!cJSON_IsString(op) || !op->valuestring[0]) {
        cJSON_Delete(obj);
        return sl__error(SL_EINVAL, "ops[%d].op: missing (must name the op, e.g. \"batch\")",
                         index);
    }
    /* A misspelt op name fails here, where the spec names it, not when the
     * pipeline is built from it. */
    char field[32];
    snprintf(field, sizeof field, "ops[%d]", index);
    int rc = sl_plan__check_op_name(op->valuestring, field);
    if (rc < 0) {
        cJSON_Delete(obj);
        return rc;
    }
    sl_spec_op o;
    memset(&o, 0, sizeof o);
    o.kind = SL_SPEC_OP_JSON;
    o.json = obj;
    rc = push_op(s, &o);
    if (rc < 0)
        cJSON_Delete(obj);
    return rc;
}

int sl_spec_add_op_json(sl_spec *s, const char *json) {
    sl__json_init();
    cJSON *obj = json ? cJSON_ParseWithOpts(json, NULL, 1) : NULL; /* 1: no trailing text */
    if (!obj && sl__json_failed())
        return sl__oom("reading an op as JSON");
    if (!obj)
        return sl__error(SL_EINVAL, "ops[%d]: not valid JSON", s->nops);
    return add_json_op(s, obj, s->nops);
}

int sl_spec_check_op_json(const char *json, int index) {
    sl__json_init();
    cJSON *obj = json ? cJSON_ParseWithOpts(json, NULL, 1) : NULL;
    if (!obj && sl__json_failed())
        return sl__oom("reading an op as JSON");
    if (!obj)
        return sl__error(SL_EINVAL, "ops[%d]: not valid JSON", index);
    char field[32];
    snprintf(field, sizeof field, "ops[%d]", index);
    /* decode's placement is the device layer's key: checked there, and
     * "gpu" refused when the pipeline is created */
    int gpu;
    int rc = sl_dev__decode_placement(obj, index, &gpu);
    if (rc >= 0)
        rc = sl_plan__check_op(obj, field);
    cJSON_Delete(obj);
    return rc;
}

static int add_user(sl_spec *s, int kind, const char *name, sl_map_fn map, sl_filter_fn filter,
                    void *user) {
    if ((kind == SL_SPEC_OP_MAP && !map) || (kind == SL_SPEC_OP_FILTER && !filter))
        return sl__error(SL_EINVAL, "ops[%d]: function is NULL", s->nops);
    sl_spec_op o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    snprintf(o.name, sizeof o.name, "%s", name && name[0] ? name : "fn");
    o.map = map;
    o.filter = filter;
    o.user = user;
    return push_op(s, &o);
}

int sl_spec_add_map(sl_spec *s, const char *name, sl_map_fn fn, void *user) {
    return add_user(s, SL_SPEC_OP_MAP, name, fn, NULL, user);
}

int sl_spec_add_batch_map(sl_spec *s, const char *name, sl_map_fn fn, sl_batch_map_fn batch_fn,
                          void *user) {
    if (!batch_fn)
        return sl__error(SL_EINVAL, "ops[%d]: batched function is NULL", s->nops);
    SL_TRY(add_user(s, SL_SPEC_OP_MAP, name, fn, NULL, user));
    s->ops[s->nops - 1].batch_map = batch_fn;
    return SL_OK;
}

int sl_spec_set_vectorize(sl_spec *s, int vectorize) {
    s->vectorize = vectorize != 0;
    return SL_OK;
}

int sl_spec_set_memory_limit(sl_spec *s, uint64_t bytes) {
    s->memory_limit = bytes;
    return SL_OK;
}

int sl_spec_add_filter(sl_spec *s, const char *name, sl_filter_fn fn, void *user) {
    return add_user(s, SL_SPEC_OP_FILTER, name, NULL, fn, user);
}

/* ---- reading a spec: the parameter tables (core/params.h) ------------------------ */

/* "parallel" of the source and of each op: threads, or "auto" (-1); 0 absent. */
static const sl_param parallel_params[] = {
    {.key = "parallel", .type = SL_PARAM_INT, .flags = SL_PARAM_OR_AUTO, .min = 1, .max = 1024,
     .offset = 0, .expect = "a number of threads (1-1024) or \"auto\"",
     .doc = "threads for this stage, or \"auto\": the autotuner's choice (docs/PIPELINE.md, "
            "\"Autotune\", says which stages default to it)"},
    {0}};
static const sl_param_table parallel_table = {parallel_params, NULL, NULL, 0, 0};

int sl_spec__parse_parallel(const cJSON *v, const char *field, int *out) {
    return sl_param_value(&parallel_table, &parallel_params[0], v, field, out);
}

static const char *const shuffle_modes[] = {"auto", "global", "window", NULL}; /* SL_SHUFFLE_* */

static const sl_param shuffle_params[] = {
    {.key = "mode", .type = SL_PARAM_ENUM, .names = shuffle_modes, .def = SL_SHUFFLE_AUTO,
     .offset = offsetof(sl_spec, shuffle_mode),
     .doc = "global: one permutation of all records; window: blocks, then positions in a "
            "window; auto: global up to 16,777,216 records"},
    {.key = "window", .type = SL_PARAM_UINT64, .min = 1, .max = -1,
     .offset = offsetof(sl_spec, shuffle_window), .doc = "window mode: positions per window"},
    {.key = "block", .type = SL_PARAM_UINT64, .min = 1, .max = -1,
     .offset = offsetof(sl_spec, shuffle_block),
     .doc = "window mode: records per block (default window / 64)"},
    {0}};
static const sl_param_table shuffle_table = {shuffle_params, NULL, NULL, 0, 0};

/* "shard": {"index", "count", "equal"} */
typedef struct {
    int64_t index, count;
    int equal;
} shard_opts;

static const char *const shard_equal[] = {"pad", "drop", "none", NULL}; /* sl_shard_equal */

static const sl_param shard_params[] = {
    {.key = "index", .type = SL_PARAM_INT64, .flags = SL_PARAM_REQUIRED, .min = 0, .max = -1,
     .offset = offsetof(shard_opts, index), .doc = "this rank"},
    {.key = "count", .type = SL_PARAM_INT64, .flags = SL_PARAM_REQUIRED, .min = 1, .max = -1,
     .offset = offsetof(shard_opts, count), .doc = "ranks in all"},
    {.key = "equal", .type = SL_PARAM_ENUM, .names = shard_equal, .def = SL_SHARD_PAD,
     .offset = offsetof(shard_opts, equal),
     .doc = "pad: repeat samples so ranks get as many; drop: drop the tail; none: differ by one"},
    {0}};
static const sl_param_table shard_table = {shard_params, NULL, NULL, 0, 0};

/* The source object's pipeline keys; the others are the input's, checked by
 * its source when it is opened (so a new format needs no change here). */
static const sl_param source_params[] = {
    {.key = "shuffle", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE,
     .doc = "true, false or {\"mode\", \"window\", \"block\"}"},
    {.key = "shard", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE,
     .doc = "{\"index\", \"count\", \"equal\"}, \"env\" (RANK, WORLD_SIZE) or \"none\""},
    {.key = "", .type = SL_PARAM_INCLUDE, .fragment = parallel_params,
     .offset = offsetof(sl_spec, source_parallel)},
    {.key = "chunk", .type = SL_PARAM_INT, .min = 1, .max = 256,
     .offset = offsetof(sl_spec, chunk), .doc = "samples per chunk (default: adaptive)"},
    {0}};
static const sl_param_table source_table = {source_params, NULL, NULL, 0, SL_PARAMS_OPEN};

static const char *const on_error_names[] = {"fail", "skip", NULL}; /* SL_ON_ERROR_* */

static const sl_param spec_params[] = {
    {.key = "source", .type = SL_PARAM_ANY, .flags = SL_PARAM_REQUIRED,
     .offset = SL_PARAM_NOWHERE, .doc = "the input and how it is read"},
    {.key = "ops", .type = SL_PARAM_ARRAY, .offset = SL_PARAM_NOWHERE,
     .expect = "an array of op objects", .doc = "the ops, in order"},
    {.key = "seed", .type = SL_PARAM_UINT64, .min = 0, .max = -1,
     .offset = offsetof(sl_spec, seed), .doc = "keys shuffling and random ops"},
    {.key = "epochs", .type = SL_PARAM_INT64, .min = 1, .max = -1, .def = 1,
     .offset = offsetof(sl_spec, epochs), .doc = "passes over the data"},
    {.key = "on_error", .type = SL_PARAM_ENUM, .names = on_error_names,
     .def = SL_ON_ERROR_FAIL, .offset = offsetof(sl_spec, on_error),
     .doc = "a sample that fails: stop, or skip it and count it"},
    {.key = "deterministic", .type = SL_PARAM_BOOL, .def = 1,
     .offset = offsetof(sl_spec, deterministic), .doc = "batches in the same order on every run"},
    {.key = "vectorize", .type = SL_PARAM_BOOL, .def = 1, .offset = offsetof(sl_spec, vectorize),
     .doc = "maps may run over a whole batch"},
    /* layout paths (layout.c): same batches either way */
    {.key = "read_rows", .type = SL_PARAM_BOOL, .def = 1, .offset = offsetof(sl_spec, read_rows),
     .doc = "readers may read records straight into their batch rows"},
    {.key = "parallel_collate", .type = SL_PARAM_BOOL, .def = 1,
     .offset = offsetof(sl_spec, parallel_collate),
     .doc = "a parallel stage may copy samples into batches"},
    {.key = "device", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE,
     .doc = "where batches are delivered (docs/DEVICE.md)"},
    {.key = "memory_limit", .type = SL_PARAM_BYTES, .min = 1, .max = -1,
     .offset = offsetof(sl_spec, memory_limit),
     .doc = "bytes the pipeline may hold (default: a quarter of the process's memory)"},
    {.key = "cache_bytes", .type = SL_PARAM_BYTES, .flags = SL_PARAM_UNSET, .min = 0, .max = -1,
     .offset = offsetof(sl_spec, cache_bytes),
     .doc = "the node's shard cache for remote inputs; 0: none on disk (unset: "
            "SLUICE_CACHE_BYTES)"},
    {0}};
static const sl_param_table spec_table = {spec_params, NULL, NULL, 0, 0};

/* "shuffle": true | false | {"mode": "auto"|"global"|"window", "window": N,
 * "block": N} (docs/PIPELINE.md, "Shuffle"). */
static int parse_shuffle(sl_spec *s, const cJSON *v) {
    s->shuffle_mode = SL_SHUFFLE_AUTO;
    s->shuffle_window = s->shuffle_block = 0;
    if (cJSON_IsBool(v)) {
        s->shuffle = cJSON_IsTrue(v);
        return SL_OK;
    }
    if (!cJSON_IsObject(v))
        return sl__error(SL_EINVAL, "source.shuffle: must be true, false or an object "
                                    "{\"mode\": \"global\"|\"window\"|\"auto\", \"window\": N, "
                                    "\"block\": N}");
    SL_TRY(sl_params_read(&shuffle_table, v, "source.shuffle", s));
    if (s->shuffle_block && s->shuffle_window && s->shuffle_block > s->shuffle_window)
        return sl__error(SL_EINVAL, "source.shuffle.block: must be at most window (%llu), got "
                                    "%llu", (unsigned long long)s->shuffle_window,
                         (unsigned long long)s->shuffle_block);
    s->shuffle = 1;
    return SL_OK;
}

static int parse_shard(sl_spec *s, const cJSON *v) {
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "env")) {
        s->shard_mode = SL_SHARD_ENV;
        return SL_OK;
    }
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "none")) {
        s->shard_mode = SL_SHARD_SET;
        s->shard_index = 0;
        s->shard_count = 1;
        return SL_OK;
    }
    if (!cJSON_IsObject(v))
        return sl__error(SL_EINVAL, "source.shard: must be an object {\"index\", \"count\", "
                                    "\"equal\"}, \"env\" or \"none\"");
    shard_opts o;
    SL_TRY(sl_params_read(&shard_table, v, "source.shard", &o));
    if (o.index >= o.count)
        return sl__error(SL_EINVAL, "source.shard.index: must be below shard.count (%lld), got %lld",
                         (long long)o.count, (long long)o.index);
    return sl_spec_set_shard(s, o.index, o.count, (sl_shard_equal)o.equal);
}

/* Is `k` a key that names a source's input ({"tfrecord": ...})? */
static int kind_key(const char *k) {
    for (const sl_source_format *kd = sl_source__kinds; kd->key; kd++)
        if (!strcmp(k, kd->key))
            return 1;
    return 0;
}

/* The pipeline's own keys are read here; everything else (the input's kind
 * key and that kind's options) is kept for the source to check when it is
 * opened, so that a new format needs no change in the spec. */
static int parse_mix(sl_spec *s, const cJSON *src);

static int parse_source(sl_spec *s, const cJSON *src) {
    if (cJSON_IsString(src))
        return sl_spec_set_source_path(s, src->valuestring);
    if (!cJSON_IsObject(src))
        return sl__error(SL_EINVAL, "source: must be an object naming an input (\"path\", "
                                    "\"tfrecord\", ...)");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(src, "kind");
    if (kind) {
        if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "mix"))
            return parse_mix(s, src);
        return sl__error(SL_EINVAL, "source.kind: must be \"mix\" (a blend of inputs); name "
                                    "any other input by its key (\"path\", \"tfrecord\", ...)");
    }
    cJSON *input = cJSON_CreateObject();
    if (!input)
        return sl__oom("reading the source");
    int nkinds = 0;
    int rc = sl_params_read(&source_table, src, "source", s);
    const cJSON *shuffle = cJSON_GetObjectItemCaseSensitive(src, "shuffle");
    const cJSON *shard = cJSON_GetObjectItemCaseSensitive(src, "shard");
    if (rc == SL_OK && shuffle)
        rc = parse_shuffle(s, shuffle);
    if (rc == SL_OK && shard)
        rc = parse_shard(s, shard);
    /* the input's keys: checked by its source when it is opened */
    for (const cJSON *it = src->child; it && rc == SL_OK; it = it->next) {
        const char *k = it->string;
        if (sl_params_find(&source_table, k))
            continue;
        if (kind_key(k))
            nkinds++;
        if (!strcmp(k, "path") && (!cJSON_IsString(it) || !it->valuestring[0]))
            rc = sl__error(SL_EINVAL, "source.path: must be a non-empty string");
        if (rc == SL_OK)
            rc = sl__json_add(input, k, cJSON_Duplicate(it, 1));
    }
    if (rc < 0) {
        cJSON_Delete(input);
        return rc;
    }
    if (nkinds != 1) {
        cJSON_Delete(input);
        if (nkinds == 0)
            return sl__error(SL_EINVAL, "source.path: missing (give \"path\" for .slr, or another "
                                        "input such as \"tfrecord\", \"webdataset\", "
                                        "\"image_folder\", \"idx\")");
        return sl__error(SL_EINVAL, "source: names more than one input; give one");
    }
    set_input(s, input);
    return SL_OK;
}


/* ---- a mixture: {"kind": "mix", "inputs": [...], "weights": [...], ...} ---------------- */

typedef struct {
    int stop, schedule;
    const char *column;
} mix_opts;

static const char *const mix_stops[] = {"never", "first_exhausted", "all_exhausted", NULL};
static const char *const mix_schedules[] = {"random", "exact", NULL};

static const sl_param mix_params[] = {
    {.key = "kind", .type = SL_PARAM_STRING, .flags = SL_PARAM_REQUIRED,
     .offset = SL_PARAM_NOWHERE, .doc = "\"mix\": a blend of inputs (docs/PIPELINE.md, \"Mixtures\")"},
    {.key = "inputs", .type = SL_PARAM_ARRAY, .flags = SL_PARAM_REQUIRED, .min = 1,
     .max = SL_MIX_MAX, .offset = SL_PARAM_NOWHERE,
     .doc = "the inputs: each a source object with its own shuffle"},
    {.key = "weights", .type = SL_PARAM_ARRAY, .offset = SL_PARAM_NOWHERE,
     .doc = "one per input: a share (> 0, normalised) or {\"samples\": N} per epoch "
            "(default: equal shares)"},
    {.key = "stop", .type = SL_PARAM_ENUM, .names = mix_stops, .def = SL_MIX_STOP_NEVER,
     .offset = offsetof(mix_opts, stop),
     .doc = "never: an input that runs out starts a new pass; first_exhausted: the epoch "
            "ends when one runs out; all_exhausted: when all have, re-weighting over those left"},
    {.key = "schedule", .type = SL_PARAM_ENUM, .names = mix_schedules, .def = SL_MIX_RANDOM,
     .offset = offsetof(mix_opts, schedule),
     .doc = "random: each position's input drawn with the weights; exact: every window of N "
            "positions holds each input's share within one"},
    {.key = "seed", .type = SL_PARAM_UINT64, .min = 0, .max = -1, .offset = SL_PARAM_NOWHERE,
     .doc = "keys the schedule and the inputs' shuffles (default: the spec's seed)"},
    {.key = "source_column", .type = SL_PARAM_STRING, .min = 1, .max = SL_COLNAME_MAX - 1,
     .offset = offsetof(mix_opts, column), .doc = "a column holding each sample's input index"},
    {.key = "columns", .type = SL_PARAM_ARRAY, .min = 1, .max = SL_MAX_COLUMNS,
     .offset = SL_PARAM_NOWHERE,
     .doc = "the columns kept of every input (default: all, which must then be the same)"},
    {.key = "shard", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE,
     .doc = "as a source's: every input is sharded, then blended on each rank"},
    {.key = "", .type = SL_PARAM_INCLUDE, .fragment = parallel_params, .offset = SL_PARAM_NOWHERE},
    {.key = "chunk", .type = SL_PARAM_INT, .min = 1, .max = 256, .offset = SL_PARAM_NOWHERE,
     .doc = "samples per chunk (default: adaptive)"},
    {0}};
static const sl_param_table mix_table = {mix_params, "a mix", NULL, 0, 0};

static int parse_mix_weights(sl_spec_mix *m, const cJSON *w) {
    if (!w) {
        for (int k = 0; k < m->n; k++)
            m->weight[k] = 1.0;
        return SL_OK;
    }
    if (cJSON_GetArraySize(w) != m->n)
        return sl__error(SL_EINVAL, "source.weights: %d given for %d inputs (one per input)",
                         cJSON_GetArraySize(w), m->n);
    int k = 0, counts = 0;
    double sum = 0;
    for (const cJSON *it = w->child; it; it = it->next, k++) {
        if (cJSON_IsObject(it)) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "samples");
            if (!cJSON_IsNumber(n) || n->valuedouble < 1 || n->valuedouble > 9007199254740992.0 ||
                n->valuedouble != floor(n->valuedouble) || cJSON_GetArraySize(it) != 1)
                return sl__error(SL_EINVAL, "source.weights[%d]: must be {\"samples\": N} with "
                                            "N a whole number >= 1", k);
            m->samples[k] = (uint64_t)n->valuedouble;
            m->weight[k] = n->valuedouble;
            counts++;
        } else if (cJSON_IsNumber(it) && isfinite(it->valuedouble) && it->valuedouble > 0) {
            m->weight[k] = it->valuedouble;
        } else {
            return sl__error(SL_EINVAL, "source.weights[%d]: must be a number > 0 or "
                                        "{\"samples\": N}", k);
        }
        sum += m->weight[k];
    }
    if (counts && counts != m->n)
        return sl__error(SL_EINVAL, "source.weights: give every input a share or every input "
                                    "{\"samples\": N}, not both");
    m->by_samples = counts > 0;
    if (!m->by_samples)
        for (k = 0; k < m->n; k++)
            m->weight[k] /= sum;
    return SL_OK;
}

/* Input k's "ops": per-sample ops only, each checked as the spec's own are
 * (its fields named "source.inputs[k].ops[j]"); they run on input k's
 * samples before the blend (mix_ops.c). A stream op (batch, take, ...)
 * would cut the blend's stream, and decode on the GPU runs on batches:
 * both belong on the mix. */
static int parse_mix_input_ops(sl_spec *in, int k, const cJSON *ops) {
    static const char *const whole_stream[] = {"batch", "prefetch", "shuffle_buffer", "take",
                                               "skip",  "repeat",   "map",            NULL};
    if (!cJSON_IsArray(ops))
        return sl__error(SL_EINVAL, "source.inputs[%d].ops: must be an array of op objects", k);
    int j = 0;
    for (const cJSON *it = ops->child; it; it = it->next, j++) {
        char field[64];
        snprintf(field, sizeof field, "source.inputs[%d].ops[%d]", k, j);
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(it, "op");
        if (!cJSON_IsObject(it) || !cJSON_IsString(op) || !op->valuestring[0])
            return sl__error(SL_EINVAL, "%s: must be an op object naming its \"op\"", field);
        for (int w = 0; whole_stream[w]; w++)
            if (!strcmp(op->valuestring, whole_stream[w]))
                return sl__error(SL_EINVAL, "%s: '%s' is not a per-sample op: an input's ops "
                                            "run on each of its samples before the blend; put "
                                            "'%s' in the spec's \"ops\", after the mix",
                                 field, whole_stream[w], whole_stream[w]);
        int gpu;
        int rc = sl_dev__decode_placement(it, j, &gpu);
        if (rc < 0)
            return sl__error_prefix(rc, "source.inputs[%d]", k);
        if (gpu)
            return sl__error(SL_EINVAL, "%s.device: decode on the GPU runs on the blend's "
                                        "batches: decode there (the spec's \"ops\")", field);
        SL_TRY(sl_plan__check_op(it, field));
        cJSON *dup = cJSON_Duplicate(it, 1);
        if (!dup)
            return sl__oom("reading a mix's input ops");
        SL_TRY(add_json_op(in, dup, j));
    }
    return SL_OK;
}

/* Input k: a source object of its own (its shuffle, its per-sample ops;
 * the mix shards them all). */
static int parse_mix_input(sl_spec_mix *m, int k, const cJSON *obj) {
    static const char *const refused[][2] = {
        {"shard", "shard the mix, not its inputs: each input is then sharded the same way"},
        {"kind", "a mix within a mix is not supported: list the inputs in one mix"},
    };
    for (int r = 0; cJSON_IsObject(obj) && r < 2; r++)
        if (cJSON_GetObjectItemCaseSensitive(obj, refused[r][0]))
            return sl__error(SL_EINVAL, "source.inputs[%d].%s: %s", k, refused[r][0],
                             refused[r][1]);
    SL_TRY(sl_spec_create(&m->in[k]));
    m->n = k + 1;
    const cJSON *ops = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, "ops") : NULL;
    cJSON *src = NULL; /* the input without its ops */
    if (ops) {
        if (!(src = cJSON_Duplicate(obj, 1)))
            return sl__oom("reading a mix's inputs");
        cJSON_DeleteItemFromObjectCaseSensitive(src, "ops");
        int rc = parse_mix_input_ops(m->in[k], k, ops);
        if (rc < 0) {
            cJSON_Delete(src);
            return rc;
        }
        m->has_ops = 1;
    }
    int rc = parse_source(m->in[k], src ? src : obj);
    cJSON_Delete(src);
    if (rc < 0) {
        char pre[48];
        snprintf(pre, sizeof pre, "source.inputs[%d]: ", k);
        return sl__error_prefix(rc, "%s", pre);
    }
    return SL_OK;
}

static int parse_mix(sl_spec *s, const cJSON *src) {
    mix_opts o;
    if (cJSON_GetObjectItemCaseSensitive(src, "shuffle"))
        return sl__error(SL_EINVAL, "source.shuffle: a mix's order is its schedule; shuffle each "
                                    "input (source.inputs[k].shuffle) instead");
    SL_TRY(sl_params_read(&mix_table, src, "source", &o));
    SL_TRY(sl_params_read(&source_table, src, "source", s)); /* parallel, chunk */
    const cJSON *shard = cJSON_GetObjectItemCaseSensitive(src, "shard");
    if (shard)
        SL_TRY(parse_shard(s, shard));
    sl_spec_mix *m = sl__calloc(1, sizeof *m);
    if (!m)
        return sl__oom("reading a mix");
    int rc = SL_OK, k = 0;
    m->stop = o.stop;
    m->schedule = o.schedule;
    if (o.column)
        snprintf(m->column, sizeof m->column, "%s", o.column);
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(src, "seed");
    if (seed) {
        m->has_seed = 1;
        m->seed = (uint64_t)seed->valuedouble;
    }
    const cJSON *cols = cJSON_GetObjectItemCaseSensitive(src, "columns");
    for (const cJSON *it = cols ? cols->child : NULL; it; it = it->next) {
        if (!cJSON_IsString(it) || !it->valuestring[0] ||
            strlen(it->valuestring) >= SL_COLNAME_MAX)
            SL_FAIL(SL_EINVAL, "source.columns[%d]: must be a column name", m->ncols);
        snprintf(m->cols[m->ncols++], SL_COLNAME_MAX, "%s", it->valuestring);
    }
    for (const cJSON *it = cJSON_GetObjectItemCaseSensitive(src, "inputs")->child; it;
         it = it->next, k++)
        SL_CHECK(parse_mix_input(m, k, it));
    SL_CHECK(parse_mix_weights(m, cJSON_GetObjectItemCaseSensitive(src, "weights")));
    set_input(s, NULL);
    s->mix = m;
    s->shuffle = 0;
    return SL_OK;
cleanup:
    mix_free(m);
    return rc;
}

static cJSON *mix_to_cjson(const sl_spec_mix *m) {
    static const char *const stops[] = {"never", "first_exhausted", "all_exhausted"};
    cJSON *o = cJSON_CreateObject();
    cJSON *in = o ? cJSON_AddArrayToObject(o, "inputs") : NULL;
    cJSON *w = o ? cJSON_AddArrayToObject(o, "weights") : NULL;
    int ok = in && w && cJSON_AddStringToObject(o, "kind", "mix");
    for (int k = 0; k < m->n && ok; k++) {
        cJSON *doc = sl_spec__to_cjson(m->in[k]); /* NULL: out of memory */
        cJSON *src = doc ? cJSON_DetachItemFromObjectCaseSensitive(doc, "source") : NULL;
        cJSON *ops = doc && m->in[k]->nops ? cJSON_DetachItemFromObjectCaseSensitive(doc, "ops")
                                           : NULL;
        if (ops && (!src || !cJSON_AddItemToObject(src, "ops", ops))) {
            cJSON_Delete(ops);
            ok = 0;
        }
        cJSON_Delete(doc);
        ok = ok && cJSON_AddItemToArray(in, src);
        cJSON *x;
        if (m->by_samples) {
            x = cJSON_CreateObject();
            ok = ok && x && cJSON_AddNumberToObject(x, "samples", (double)m->samples[k]);
        } else {
            x = cJSON_CreateNumber(m->weight[k]);
        }
        if (!ok || !cJSON_AddItemToArray(w, x)) {
            if (!ok)
                cJSON_Delete(src);
            cJSON_Delete(x);
            ok = 0;
        }
    }
    ok = ok && cJSON_AddStringToObject(o, "stop", stops[m->stop]) &&
         cJSON_AddStringToObject(o, "schedule", m->schedule == SL_MIX_EXACT ? "exact" : "random");
    if (ok && m->has_seed)
        ok = cJSON_AddNumberToObject(o, "seed", (double)m->seed) != NULL;
    if (ok && m->column[0])
        ok = cJSON_AddStringToObject(o, "source_column", m->column) != NULL;
    cJSON *cols = ok && m->ncols ? cJSON_AddArrayToObject(o, "columns") : NULL;
    for (int c = 0; cols && c < m->ncols && ok; c++) {
        cJSON *x = cJSON_CreateString(m->cols[c]);
        ok = cJSON_AddItemToArray(cols, x);
        if (!ok)
            cJSON_Delete(x);
    }
    if (m->ncols && !cols)
        ok = 0;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int mix_copy(sl_spec_mix **out, const sl_spec_mix *src) {
    *out = NULL;
    if (!src)
        return SL_OK;
    sl_spec_mix *m = sl__malloc(sizeof *m);
    if (!m)
        return sl__oom("copying a spec");
    *m = *src;
    for (int k = 0; k < src->n; k++) {
        m->n = k;
        int rc = sl_spec__copy(&m->in[k], src->in[k]);
        if (rc < 0) {
            mix_free(m);
            return rc;
        }
    }
    m->n = src->n;
    *out = m;
    return SL_OK;
}

int sl_spec_from_json(sl_spec **out, const char *json) {
    sl_spec *s = NULL;
    int rc;
    *out = NULL;
    sl__json_init();
    cJSON *doc = json ? cJSON_ParseWithOpts(json, NULL, 1) : NULL; /* 1: no trailing text */
    if (!doc && sl__json_failed())
        return sl__oom("reading a spec");
    if (!doc) {
        const char *at = cJSON_GetErrorPtr();
        long off = (at && json) ? (long)(at - json) : 0;
        return sl__error(SL_EINVAL, "spec: not valid JSON (near byte %ld)", off);
    }
    SL_CHECK(sl_spec_create(&s));
    if (!cJSON_IsObject(doc))
        SL_FAIL(SL_EINVAL, "spec: must be a JSON object");
    SL_CHECK(sl_params_read(&spec_table, doc, "", s));
    s->has_cache_bytes = cJSON_GetObjectItemCaseSensitive(doc, "cache_bytes") != NULL;
    SL_CHECK(parse_source(s, cJSON_GetObjectItemCaseSensitive(doc, "source")));
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(doc, "ops");
    int i = 0;
    for (const cJSON *o = ops ? ops->child : NULL; o; o = o->next, i++) {
        cJSON *dup = cJSON_Duplicate(o, 1);
        if (!dup)
            SL_FAIL(SL_ENOMEM, "out of memory while copying ops[%d]", i);
        SL_CHECK(add_json_op(s, dup, i));
    }
    const cJSON *device = cJSON_GetObjectItemCaseSensitive(doc, "device");
    if (device)
        SL_CHECK(sl_dev__parse_json(device, &s->device));
    cJSON_Delete(doc);
    *out = s;
    return SL_OK;
cleanup:
    cJSON_Delete(doc);
    sl_spec_free(s);
    return rc;
}

uint64_t sl_spec__memory_limit(const sl_spec *s) {
    return s->memory_limit ? s->memory_limit : sl__mem_total() / 4;
}

int sl_spec__copy(sl_spec **out, const sl_spec *src) {
    sl__json_init();
    sl_spec *s;
    SL_TRY(sl_spec_create(&s));
    sl_spec_op *ops = s->ops;
    *s = *src;
    s->ops = ops;
    s->nops = s->cap = 0;
    s->input = NULL;
    s->mix = NULL;
    s->mem = sl_source__retain(src->mem);
    if (src->input && !(s->input = cJSON_Duplicate(src->input, 1))) {
        sl_spec_free(s);
        return sl__oom("copying a spec");
    }
    int mrc = mix_copy(&s->mix, src->mix);
    if (mrc < 0) {
        sl_spec_free(s);
        return mrc;
    }
    for (int i = 0; i < src->nops; i++) {
        sl_spec_op o = src->ops[i];
        if (o.json && !(o.json = cJSON_Duplicate(src->ops[i].json, 1))) {
            sl_spec_free(s);
            return sl__oom("copying a spec");
        }
        int rc = push_op(s, &o);
        if (rc < 0) {
            cJSON_Delete(o.json);
            sl_spec_free(s);
            return rc;
        }
    }
    *out = s;
    return SL_OK;
}

/* ---- the keys, documented (sluice explain --params) ------------------------------ */

static void doc_table(sl_text *d, const sl_param_table *t) {
    d->len += sl_params_doc(t, d->buf + d->len, d->cap - d->len);
}

int sl_spec_params_doc(char *buf, size_t cap, size_t *len_out) {
    enum { DOC_MAX = 1 << 15 };
    sl_text d = {sl__malloc(DOC_MAX), DOC_MAX, 0};
    if (!d.buf)
        return sl__oom("documenting the spec's keys");
    d.buf[0] = '\0';
    sl__text_add(&d, "spec (a JSON object):\n");
    doc_table(&d, &spec_table);
    sl__text_add(&d, "source: a path, or an object with one input key (below), its options and:\n");
    doc_table(&d, &source_table);
    sl__text_add(&d, "source.shuffle (an object):\n");
    doc_table(&d, &shuffle_table);
    sl__text_add(&d, "source.shard (an object):\n");
    doc_table(&d, &shard_table);
    for (const sl_source_format *kd = sl_source__kinds; kd->key; kd++) {
        sl__text_add(&d, "source with \"%s\": %s\n", kd->key, kd->summary);
        if (kd->params)
            doc_table(&d, kd->params);
    }
    sl__text_add(&d, "device: \"cuda\", \"host\" or an object:\n");
    doc_table(&d, &sl_dev__params);
    sl__text_add(&d, "ops: each op's parameters: docs/OPS.md; every op also takes:\n");
    doc_table(&d, &parallel_table);
    if (len_out)
        *len_out = d.len;
    if (buf && cap) {
        size_t n = d.len < cap - 1 ? d.len : cap - 1;
        memcpy(buf, d.buf, n);
        buf[n] = '\0';
    }
    sl__free(d.buf);
    return SL_OK;
}

/* ---- the keys, listed (sluice env, docs/CLI.md's "Spec parameters") ------------- */

static const struct {
    const char *prefix, *layer;
    const sl_param_table *t;
} sections[] = {
    {"", "pipeline", &spec_table},
    {"source.", "pipeline", &source_table},
    {"source.shuffle.", "pipeline", &shuffle_table},
    {"source.shard.", "pipeline", &shard_table},
    {"device.", "device", &sl_dev__params},
    {"ops[].", "pipeline", &parallel_table},
};
enum { NSECTIONS = (int)(sizeof sections / sizeof sections[0]) };

int sl_spec_param_count(void) {
    int n = 0;
    for (int k = 0; k < NSECTIONS; k++)
        n += sl_params_nth(sections[k].t, 0, NULL);
    return n;
}

int sl_spec_param_get(int i, sl_setting_info *out) {
    static _Thread_local char name[96], range[256], def[128];
    int first = i;
    for (int k = 0; i >= 0 && k < NSECTIONS; k++) {
        const sl_param *p;
        int n = sl_params_nth(sections[k].t, i, &p);
        if (i >= n) {
            i -= n;
            continue;
        }
        snprintf(name, sizeof name, "%s%s", sections[k].prefix, p->key);
        out->name = name;
        out->type = sl_param_type_name(p);
        out->range = sl_param_expected(p, range, sizeof range);
        out->default_value = (p->flags & SL_PARAM_REQUIRED) ? "required"
                             : *sl_param_default(p, def, sizeof def) ? def
                                                                      : "unset";
        out->layer = sections[k].layer;
        out->doc = p->doc ? p->doc : "";
        out->value = NULL;
        return SL_OK;
    }
    int n = sl_spec_param_count();
    return sl__error(SL_EINVAL, "spec parameter %d: there are %d (0 to %d)", first, n, n - 1);
}

cJSON *sl_spec__to_cjson(const sl_spec *s) {
    sl__json_init(); /* the adds below are checked once, at the end */
    cJSON *doc = cJSON_CreateObject();
    if (!doc)
        return NULL;
    cJSON *src = s->mix ? mix_to_cjson(s->mix) : cJSON_CreateObject();
    if (!cJSON_AddItemToObject(doc, "source", src)) {
        cJSON_Delete(src);
        cJSON_Delete(doc);
        return NULL;
    }
    for (const cJSON *it = s->input ? s->input->child : NULL; it; it = it->next)
        (void)sl__json_add(src, it->string, cJSON_Duplicate(it, 1)); /* a failure is flagged */
    if (s->mem)
        cJSON_AddStringToObject(src, "memory", "samples held in memory");
    if (s->mix) {
        /* a mix's order is its schedule; its inputs carry their shuffles */
    } else if (s->shuffle && (s->shuffle_mode != SL_SHUFFLE_AUTO || s->shuffle_window ||
                              s->shuffle_block)) {
        static const char *const modes[] = {"auto", "global", "window"};
        cJSON *sh = cJSON_AddObjectToObject(src, "shuffle");
        cJSON_AddStringToObject(sh, "mode", modes[s->shuffle_mode]);
        if (s->shuffle_window)
            cJSON_AddNumberToObject(sh, "window", (double)s->shuffle_window);
        if (s->shuffle_block)
            cJSON_AddNumberToObject(sh, "block", (double)s->shuffle_block);
    } else {
        cJSON_AddBoolToObject(src, "shuffle", s->shuffle);
    }
    if (s->source_parallel == -1)
        cJSON_AddStringToObject(src, "parallel", "auto");
    else if (s->source_parallel > 0)
        cJSON_AddNumberToObject(src, "parallel", s->source_parallel);
    if (s->chunk > 0)
        cJSON_AddNumberToObject(src, "chunk", s->chunk);
    if (s->shard_mode == SL_SHARD_SET) {
        static const char *const eq[] = {"pad", "drop", "none"};
        cJSON *sh = cJSON_AddObjectToObject(src, "shard");
        cJSON_AddNumberToObject(sh, "index", (double)s->shard_index);
        cJSON_AddNumberToObject(sh, "count", (double)s->shard_count);
        cJSON_AddStringToObject(sh, "equal", eq[s->shard_equal]);
    } else if (s->shard_mode == SL_SHARD_ENV) {
        cJSON_AddStringToObject(src, "shard", "env");
    }
    cJSON *ops = cJSON_AddArrayToObject(doc, "ops");
    for (int i = 0; i < s->nops; i++) {
        const sl_spec_op *o = &s->ops[i];
        cJSON *e;
        if (o->kind == SL_SPEC_OP_JSON) {
            e = cJSON_Duplicate(o->json, 1);
        } else {
            e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "op", o->kind == SL_SPEC_OP_MAP ? "map" : "filter_fn");
            cJSON_AddStringToObject(e, "name", o->name);
        }
        if (!cJSON_AddItemToArray(ops, e)) /* ops missing: out of memory */
            cJSON_Delete(e);
    }
    cJSON_AddNumberToObject(doc, "seed", (double)s->seed);
    cJSON_AddNumberToObject(doc, "epochs", (double)s->epochs);
    cJSON_AddStringToObject(doc, "on_error", s->on_error ? "skip" : "fail");
    cJSON_AddBoolToObject(doc, "deterministic", s->deterministic);
    if (!s->vectorize)
        cJSON_AddBoolToObject(doc, "vectorize", 0);
    if (!s->read_rows)
        cJSON_AddBoolToObject(doc, "read_rows", 0);
    if (!s->parallel_collate)
        cJSON_AddBoolToObject(doc, "parallel_collate", 0);
    if (s->memory_limit)
        cJSON_AddNumberToObject(doc, "memory_limit", (double)s->memory_limit);
    if (s->has_cache_bytes)
        cJSON_AddNumberToObject(doc, "cache_bytes", (double)s->cache_bytes);
    if (s->device.kind != SL_DEV_NONE)
        (void)sl__json_add(doc, "device", sl_dev__to_json(&s->device)); /* failure flagged */
    if (sl__json_failed()) {
        cJSON_Delete(doc);
        return NULL;
    }
    return doc;
}

int sl_spec_to_json(const sl_spec *s, char *buf, size_t cap, size_t *len_out) {
    return sl__json_copy_out(sl_spec__to_cjson(s), buf, cap, len_out, "writing a spec as JSON");
}

/* ---- relative paths of a spec file -------------------------------------------------- */

/* Does `p` (a path, or a pattern: braces, glob characters) name something
 * here? For a pattern, its folder (the part before the first pattern
 * character) stands for it. */
static int spec_path_exists(const char *p) {
    size_t cut = strcspn(p, "{*?[");
    char buf[4096];
    if (p[cut]) {
        size_t slash = cut;
        while (slash > 0 && p[slash - 1] != '/')
            slash--;
        if (slash == 0)
            return 1; /* a pattern in the folder itself */
        snprintf(buf, sizeof buf, "%.*s", (int)slash, p);
        p = buf;
    }
    struct stat st;
    return stat(p, &st) == 0;
}

/* One relative path of the source: rewritten against the spec's folder
 * `dir` (dirlen bytes, ending in '/'), or kept as it was (working-directory
 * relative) when only that names something, with a warning saying what to
 * write instead. */
static int resolve_one(cJSON *parent, cJSON *item, const char *spec_path, const char *field,
                       const char *dir, size_t dirlen) {
    if (!cJSON_IsString(item) || !item->valuestring[0])
        return SL_OK;
    const char *v = item->valuestring;
    int at = v[0] == '@';
    const char *p = v + at;
    if (!p[0] || p[0] == '/' || sl_io__is_url(p) || !strcmp(v, "<memory>"))
        return SL_OK;
    char joined[4096];
    int n = snprintf(joined, sizeof joined, "%s%.*s%s", at ? "@" : "", (int)dirlen, dir, p);
    if (n < 0 || (size_t)n >= sizeof joined)
        return sl__error(SL_EINVAL, "%s: %s: path too long", spec_path, field);
    if (!spec_path_exists(joined + at) && spec_path_exists(p)) {
        static atomic_int said; /* once per process: bench reads its spec twice */
        if (!atomic_exchange(&said, 1))
            SL_LOG_WARN("%s: %s '%s' names a path relative to the working directory; relative "
                        "paths in a spec file are read from the spec's folder (%.*s): write it "
                        "relative to that folder, or absolute (docs/PIPELINE.md, \"Spec "
                        "files\"); read from the working directory for now",
                        spec_path, field, v, (int)dirlen, dir);
        return SL_OK;
    }
    cJSON *s = cJSON_CreateString(joined);
    if (!s)
        return sl__oom("resolving a spec's paths");
    int ok = item->string ? cJSON_ReplaceItemInObjectCaseSensitive(parent, item->string, s)
                          : cJSON_ReplaceItemViaPointer(parent, item, s);
    if (!ok) {
        cJSON_Delete(s);
        return sl__oom("resolving a spec's paths");
    }
    return SL_OK;
}

/* Each input path of the source object: "path", "image_folder", the idx
 * pair, and the tfrecord/webdataset path or list. */
static int resolve_source(cJSON *src, const char *spec_path, const char *dir, size_t dirlen) {
    static const char *const keys[] = {"path", "image_folder", "tfrecord", "webdataset", "idx"};
    cJSON *inputs = cJSON_GetObjectItemCaseSensitive(src, "inputs"); /* a mix's */
    for (cJSON *it = cJSON_IsArray(inputs) ? inputs->child : NULL; it; it = it->next)
        if (cJSON_IsObject(it))
            SL_TRY(resolve_source(it, spec_path, dir, dirlen));
    for (int k = 0; k < 5; k++) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(src, keys[k]);
        char field[64];
        if (cJSON_IsString(v)) {
            snprintf(field, sizeof field, "source.%s", keys[k]);
            SL_TRY(resolve_one(src, v, spec_path, field, dir, dirlen));
        } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
            int i = 0;
            for (cJSON *it = v->child, *next; it; it = next, i++) {
                next = it->next;
                if (cJSON_IsArray(v))
                    snprintf(field, sizeof field, "source.%s[%d]", keys[k], i);
                else
                    snprintf(field, sizeof field, "source.%s.%s", keys[k], it->string);
                SL_TRY(resolve_one(v, it, spec_path, field, dir, dirlen));
            }
        }
    }
    return SL_OK;
}

int sl_spec_resolve_paths(const char *json, const char *spec_path, char *buf, size_t cap,
                          size_t *len_out) {
    if (!json || !spec_path)
        return sl__error(SL_EINVAL, "sl_spec_resolve_paths: NULL argument");
    sl__json_init();
    cJSON *doc = cJSON_ParseWithOpts(json, NULL, 1);
    if (!doc && sl__json_failed())
        return sl__oom("reading a spec");
    if (!doc)
        return sl__copy_out(json, buf, cap, len_out); /* sl_spec_from_json says what is wrong */
    int rc = SL_OK;
    const char *slash = strrchr(spec_path, '/');
    cJSON *src = cJSON_GetObjectItemCaseSensitive(doc, "source");
    if (slash && cJSON_IsObject(src) && !sl_io__is_url(spec_path))
        SL_CHECK(resolve_source(src, spec_path, spec_path, (size_t)(slash - spec_path) + 1));
    return sl__json_copy_out(doc, buf, cap, len_out, "resolving a spec's paths");
cleanup:
    cJSON_Delete(doc);
    return rc;
}
