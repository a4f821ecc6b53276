/*
 * source_synthetic.c — records computed from their index, nothing stored:
 * {"synthetic": {"records": N, "shards": S, "bytes": B}}. For simulating
 * planning and sharding at any scale (10 billion records cost nothing) and
 * for tests that need to know what record i holds.
 *
 * Columns (all fixed-shape, so batches are read whole through read_cols):
 *  - "index"   int64: i;
 *  - "shard"   int64: the shard i falls in when N records are split into S
 *              shards of as equal sizes as possible (floor(i * S / N));
 *  - "payload" uint8[B] (B >= 8; default 8): i as 8 little-endian bytes,
 *              then sl_mix64 of (i, word) for the rest.
 */
#include "source/source.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct syn_source {
    sl_source base;
    uint64_t shards;
    int64_t bytes;
} syn_source;

static uint64_t shard_of(const syn_source *s, uint64_t i) {
    return (uint64_t)(((unsigned __int128)i * s->shards) / s->base.count);
}

static void fill_payload(uint64_t i, uint8_t *p, size_t n) {
    for (size_t k = 0; k < n; k += 8) {
        uint64_t v = k == 0 ? i : sl_mix64(i * 0x9e3779b97f4a7c15ull + k);
        uint8_t w[8];
        for (int b = 0; b < 8; b++)
            w[b] = (uint8_t)(v >> (8 * b));
        memcpy(p + k, w, n - k < 8 ? n - k : 8);
    }
}

static int syn_read_cols(sl_source *src, sl_source_cursor *cur, uint64_t i, void *const *dst,
                         const size_t *bytes) {
    (void)cur;
    syn_source *s = (syn_source *)src;
    int64_t v[2] = {(int64_t)i, (int64_t)shard_of(s, i)};
    memcpy(dst[0], &v[0], sizeof v[0]);
    memcpy(dst[1], &v[1], sizeof v[1]);
    fill_payload(i, dst[2], bytes[2]);
    return SL_OK;
}

static int syn_read(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *out) {
    syn_source *s = (syn_source *)src;
    int64_t shape[1] = {s->bytes};
    out->ncols = 0;
    out->index = i;
    int rc = cur->alloc(cur->alloc_ctx, &out->col[0], SL_I64, 0, NULL);
    if (rc == SL_OK)
        rc = cur->alloc(cur->alloc_ctx, &out->col[1], SL_I64, 0, NULL);
    if (rc == SL_OK)
        rc = cur->alloc(cur->alloc_ctx, &out->col[2], SL_U8, 1, shape);
    if (rc != SL_OK) {
        sl_sample_clear(out);
        return sl__oom("reading a synthetic record");
    }
    void *dst[3] = {out->col[0].data, out->col[1].data, out->col[2].data};
    size_t nb[3] = {8, 8, (size_t)s->bytes};
    out->ncols = 3;
    return syn_read_cols(src, cur, i, dst, nb);
}

static int syn_describe(sl_source *src, cJSON *obj) {
    syn_source *s = (syn_source *)src;
    cJSON_AddNumberToObject(obj, "shards", (double)s->shards);
    cJSON_AddNumberToObject(obj, "payload_bytes", (double)s->bytes);
    return SL_OK;
}

static void syn_locate(sl_source *src, uint64_t i, char *buf, size_t cap) {
    snprintf(buf, cap, "%s: record %llu (shard %llu)", src->name, (unsigned long long)i,
             (unsigned long long)shard_of((syn_source *)src, i));
}

static void syn_free(sl_source *src) { sl__free(src); }

static const sl_source_vtbl syn_vtbl = {
    .flags = SL_SOURCE_F_MEMORY,
    .read = syn_read,
    .read_cols = syn_read_cols,
    .describe = syn_describe,
    .locate = syn_locate,
    .free = syn_free,
};

/* {"synthetic": {"records": N, "shards": S, "bytes": B}} (docs/SOURCES.md). */
typedef struct {
    uint64_t records, shards, bytes;
} syn_opts;

static const sl_param syn_params[] = {
    /* 2^53: exact in JSON's doubles */
    {.key = "records", .type = SL_PARAM_UINT64, .flags = SL_PARAM_REQUIRED, .min = 1,
     .max = 9007199254740992.0, .offset = offsetof(syn_opts, records), .doc = "how many records"},
    {.key = "shards", .type = SL_PARAM_UINT64, .min = 1, .max = 9007199254740992.0, .def = 1,
     .offset = offsetof(syn_opts, shards), .doc = "shards they are split into (at most records)"},
    {.key = "bytes", .type = SL_PARAM_UINT64, .min = 8, .max = 1 << 24, .def = 8,
     .offset = offsetof(syn_opts, bytes), .doc = "payload bytes per record"},
    {0}};

static const sl_param_table syn_table = {syn_params, NULL, NULL, 0, 0};

static const sl_param syn_outer[] = {
    {.key = "synthetic", .type = SL_PARAM_OBJECT, .flags = SL_PARAM_REQUIRED, .offset = 0,
     .expect = "{\"records\": N, \"shards\": S, \"bytes\": B}",
     .doc = "records (required, up to 2^53), shards (default 1), bytes of payload (8 to 2^24, "
            "default 8)"},
    {0}};
const sl_param_table sl_source__syn_table = {syn_outer, "a synthetic source", NULL, 0, 0};

int sl_source__open_synthetic(sl_source **out, const cJSON *obj, const char *field) {
    *out = NULL;
    const cJSON *v = NULL;
    SL_TRY(sl_source__read_options(&sl_source__syn_table, obj, field, &v));
    char sub[160];
    snprintf(sub, sizeof sub, "%s.synthetic", field);
    syn_opts o;
    SL_TRY(sl_params_read(&syn_table, v, sub, &o));
    if (o.shards > o.records)
        return sl__error(SL_EINVAL, "%s.shards: must be at most records (%llu), got %llu", sub,
                         (unsigned long long)o.records, (unsigned long long)o.shards);
    uint64_t n = o.records, shards = o.shards, bytes = o.bytes;
    syn_source *s = sl_source__new(sizeof *s, &syn_vtbl, "synthetic");
    if (!s)
        return sl__oom("opening a synthetic source");
    s->base.count = n;
    s->base.record_bytes = 16 + bytes;
    s->shards = shards;
    s->bytes = (int64_t)bytes;
    snprintf(s->base.name, sizeof s->base.name, "synthetic(%llu records, %llu shards)",
             (unsigned long long)n, (unsigned long long)shards);
    int64_t shape[1] = {(int64_t)bytes};
    int rc = sl_source__add_col(&s->base, "index", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL);
    if (rc == SL_OK)
        rc = sl_source__add_col(&s->base, "shard", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL);
    if (rc == SL_OK)
        rc = sl_source__add_col(&s->base, "payload", SL_COL_ARRAY, SL_U8, 1, shape);
    if (rc != SL_OK) {
        sl__free(s);
        return rc;
    }
    *out = &s->base;
    return SL_OK;
}
