/*
 * device_deliver.c — the device's side of a pipeline: the spec's "device"
 * JSON, the normalize op run on the device, the upload that turns a host
 * batch's columns into device columns, GPU decode's batches (JPEG rows of
 * host batches decoded into ring slots), and the public sl_device_available
 * and sl_tensor_stream_wait. The pipeline reaches it only through its
 * hand-off stage (src/pipeline/stage_handoff.c), which passes finished host
 * batches across as column views (sl_dev_cols) and takes device batches
 * back; nothing here knows a pipeline, a spec or a plan.
 *
 * The pipeline's batch buffers are the backend's pinned memory
 * (sl_dev__out_batch_mem, pools.c): the stages write each batch where the
 * copy engine reads it.
 *
 * Upload, per batch (on the consumer thread):
 *   1. acquire a ring slot big enough (blocks only when every slot is in use
 *      and the oldest released one's release event has not passed);
 *   2. every column in pinned memory (the usual case): one asynchronous copy
 *      per column from where the stages wrote it, on the copy stream; the
 *      slot holds the host buffers until the copy event passes, so their
 *      pool does not hand them out while the copy engine reads them.
 *      Otherwise (a column the stages did not make in a batch buffer, e.g.
 *      one passed through from the source) the columns are first copied
 *      into the slot's own pinned staging memory (a host memcpy, counted in
 *      h2d_staged_bytes) and copied from there in one piece;
 *   3. then the normalize (uint8 HWC in, float CHW/HWC out) when asked, the
 *      copy event, and a wait for it on the consumer stream;
 *   4. the batch's columns now point into device memory, each holding a
 *      reference on the slot's buffer; the batch's own references on the
 *      host buffers are released.
 * The call returns without waiting for the copy: the consumer's stream
 * waits on the GPU, so the copy of batch k+1 runs while step k computes.
 */
#include "device/device.h"
#include "core/params.h"
#include "ops/ops.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define ALIGN_DEV 256u

struct sl_dev_out {
    sl_device_spec spec;
    sl_dev_backend *be;           /* until the ring takes it */
    sl_dev_ring *ring;            /* made at the first upload */
    int has_norm;
    char norm_col[SL_COLNAME_MAX];
    int nmean, nstd;
    float mean[4], std[4];
    int chw;
    sl_dtype dtype;
    void *stream;                 /* consumer stream (NULL: default) */
    _Atomic uint64_t h2d_bytes, staged_bytes, wait_ns;
    /* decode on the GPU (sl_dev__gpu_begin; used on the consumer thread) */
    int gpu;                      /* 1: gd is set */
    sl_dev_gpu_spec gd;
    sl_dev_jpeg *jpeg;            /* made at the first fill, on the ring's backend */
    sl_decoder *dec;              /* the CPU fallback's decoder */
    float lut[3][256];            /* the CPU fallback's normalize */
    void *fb_host;                /* pinned: fallback images before their copy */
    size_t fb_cap;                /* images fb_host holds */
    _Atomic uint64_t gpu_images, cpu_images;
    /* the output being filled (sl_dev__gpu_fill_*) */
    sl_dev_slot *slot;            /* NULL: none */
    int64_t filled, target;
    int single, ic, pc;           /* host batches: no batch dim; image and placement columns */
    size_t off[SL_MAX_COLUMNS], rowb[SL_MAX_COLUMNS], host_total, img_off;
    int ncols;                    /* the output's columns */
    char names[SL_MAX_COLUMNS][SL_COLNAME_MAX];
    sl_tensor meta[SL_MAX_COLUMNS];
    int src_col[SL_MAX_COLUMNS];  /* the host column of each (-1: the images) */
    uint32_t text;                /* bit c: host column c is text (handed out from host memory) */
};

/* ---- spec ---------------------------------------------------------------------------- */

/* The spec's "device" (docs/DEVICE.md), read through a parameter table
 * (core/params.h) as every key of a spec is. */
static const char *const kind_names[] = {"cuda", "host", "none", NULL};
static const int kind_values[] = {SL_DEV_CUDA, SL_DEV_HOST, SL_DEV_NONE};

typedef struct {
    int kind; /* index in kind_names */
    int id;
    int normalize;
} device_opts;

static const sl_param device_params[] = {
    {.key = "kind", .type = SL_PARAM_ENUM, .flags = SL_PARAM_REQUIRED, .names = kind_names,
     .offset = offsetof(device_opts, kind), .doc = "where batches are delivered"},
    {.key = "id", .type = SL_PARAM_INT, .min = 0, .max = 1024, .offset = offsetof(device_opts, id),
     .doc = "the CUDA device"},
    {.key = "normalize_on_device", .type = SL_PARAM_BOOL,
     .offset = offsetof(device_opts, normalize),
     .doc = "run the spec's last normalize op on the device"},
    {0}};
const sl_param_table sl_dev__params = {device_params, NULL, NULL, 0, 0};

int sl_dev__parse_json(const cJSON *v, sl_device_spec *out) {
    memset(out, 0, sizeof *out);
    device_opts o = {0};
    if (cJSON_IsString(v)) {
        SL_TRY(sl_param_value(&sl_dev__params, &device_params[0], v, "device", &o.kind));
    } else if (cJSON_IsObject(v)) {
        SL_TRY(sl_params_read(&sl_dev__params, v, "device", &o));
    } else {
        return sl__error(SL_EINVAL, "device: must be \"cuda\", \"host\" or an object "
                                    "{\"kind\", \"id\", \"normalize_on_device\"}");
    }
    out->kind = kind_values[o.kind];
    out->id = o.id;
    out->normalize = o.normalize;
    return SL_OK;
}

cJSON *sl_dev__to_json(const sl_device_spec *d) {
    if (d->kind == SL_DEV_NONE)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "kind", d->kind == SL_DEV_CUDA ? "cuda" : "host");
    cJSON_AddNumberToObject(o, "id", d->id);
    cJSON_AddBoolToObject(o, "normalize_on_device", d->normalize);
    return o;
}

int sl_dev__spec_from(int device, int id, int normalize_on_device, sl_device_spec *out) {
    sl_device_spec d = {SL_DEV_NONE, id, normalize_on_device != 0};
    if (device == 0)
        d.kind = SL_DEV_NONE;
    else if (device == SL_DEVICE_CUDA)
        d.kind = SL_DEV_CUDA;
    else if (device == SL_DEVICE_CPU)
        d.kind = SL_DEV_HOST;
    else
        return sl__error(SL_EINVAL, "device: %d is not SL_DEVICE_CUDA, SL_DEVICE_CPU or 0",
                         device);
    if (id < 0)
        return sl__error(SL_EINVAL, "device.id: must be an integer from 0");
    *out = d;
    return SL_OK;
}

int sl_dev__decode_placement(const cJSON *op, int index, int *gpu) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(op, "op");
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(op, "device");
    *gpu = 0;
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "decode") != 0 || !dev)
        return SL_OK;
    static const char *const places[] = {"cpu", "gpu", NULL};
    static const sl_param place = {.key = "device", .type = SL_PARAM_ENUM, .names = places,
                                   .doc = "where decode runs"};
    static const sl_param_table t = {&place, NULL, "parameter", 0, 0};
    char field[32];
    snprintf(field, sizeof field, "ops[%d]", index);
    return sl_param_value(&t, &place, dev, field, gpu); /* 1: "gpu" */
}

static int is_seq_op(const char *name) {
    static const char *const ok[] = {"batch", "prefetch", "take", "skip", "repeat", NULL};
    for (int i = 0; ok[i]; i++)
        if (!strcmp(name, ok[i]))
            return 1;
    return 0;
}

static int read_floats(const cJSON *op, const char *key, float *out, int *n, float dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(op, key);
    *n = 1;
    out[0] = dflt;
    if (!v)
        return SL_OK;
    if (cJSON_IsNumber(v)) {
        out[0] = (float)v->valuedouble;
        return SL_OK;
    }
    int k = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (k < 1 || k > 4)
        return sl__error(SL_EINVAL, "device.normalize_on_device: normalize.%s: 1 to 4 numbers",
                         key);
    *n = 0;
    for (const cJSON *it = v->child; it; it = it->next) {
        if (!cJSON_IsNumber(it))
            return sl__error(SL_EINVAL, "device.normalize_on_device: normalize.%s: not a "
                                        "number", key);
        out[(*n)++] = (float)it->valuedouble;
    }
    return SL_OK;
}

/* The spec's last normalize op, which the device runs: its parameters. */
int sl_dev__out_take_norm(sl_dev_out *o, const cJSON *const *ops, const char *const *names,
                          int n, int *at_out) {
    int at = -1;
    *at_out = -1;
    for (int i = 0; i < n; i++) {
        const cJSON *name = ops[i] ? cJSON_GetObjectItemCaseSensitive(ops[i], "op") : NULL;
        if (cJSON_IsString(name) && !strcmp(name->valuestring, "normalize"))
            at = i;
    }
    if (at < 0)
        return sl__error(SL_EINVAL, "device.normalize_on_device: the spec has no normalize op");
    for (int i = at + 1; i < n; i++) {
        const cJSON *name = ops[i] ? cJSON_GetObjectItemCaseSensitive(ops[i], "op") : NULL;
        if (!cJSON_IsString(name) || !is_seq_op(name->valuestring))
            return sl__error(SL_EINVAL, "device.normalize_on_device: ops[%d] (%s) comes after "
                                        "normalize; only batch, prefetch, take, skip and repeat "
                                        "may", i,
                             cJSON_IsString(name) ? name->valuestring : names[i]);
    }
    const cJSON *op = ops[at];
    for (const cJSON *it = op->child; it; it = it->next)
        if (strcmp(it->string, "op") && strcmp(it->string, "column") &&
            strcmp(it->string, "mean") && strcmp(it->string, "std") &&
            strcmp(it->string, "layout") && strcmp(it->string, "dtype"))
            return sl__error(SL_EINVAL, "ops[%d].%s: unknown key (keys: %s)", at, it->string,
                             sl__names_closest(it->string,
                                               (const char *const[]){"column", "mean", "std",
                                                                     "layout", "dtype"},
                                               5, (char[64]){0}, 64));
    const cJSON *col = cJSON_GetObjectItemCaseSensitive(op, "column");
    if (col && !cJSON_IsString(col))
        return sl__error(SL_EINVAL, "ops[%d].column: must be a string", at);
    snprintf(o->norm_col, sizeof o->norm_col, "%s", col ? col->valuestring : "image");
    SL_TRY(read_floats(op, "mean", o->mean, &o->nmean, 0.0f));
    SL_TRY(read_floats(op, "std", o->std, &o->nstd, 1.0f));
    for (int i = 0; i < o->nstd; i++)
        if (!(o->std[i] != 0.0f && isfinite(o->std[i])))
            return sl__error(SL_EINVAL, "ops[%d].std[%d]: must be non-zero", at, i);
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(op, "layout");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(op, "dtype");
    o->chw = 1;
    if (lay && !(cJSON_IsString(lay) && (!strcmp(lay->valuestring, "chw") ||
                                         !strcmp(lay->valuestring, "hwc"))))
        return sl__error(SL_EINVAL, "ops[%d].layout: must be \"hwc\" or \"chw\"", at);
    if (lay)
        o->chw = !strcmp(lay->valuestring, "chw");
    o->dtype = SL_F32;
    if (dt && cJSON_IsString(dt) && !strcmp(dt->valuestring, "float16"))
        o->dtype = SL_F16;
    else if (dt && cJSON_IsString(dt) && !strcmp(dt->valuestring, "bfloat16"))
        o->dtype = SL_BF16;
    else if (dt && !(cJSON_IsString(dt) && !strcmp(dt->valuestring, "float32")))
        return sl__error(SL_EINVAL,
                         "ops[%d].dtype: on the device, \"float32\", \"float16\" or \"bfloat16\"",
                         at);
    o->has_norm = 1;
    *at_out = at;
    return SL_OK;
}

int sl_dev__out_open(sl_dev_out **out, const sl_device_spec *d) {
    *out = NULL;
    if (d->kind == SL_DEV_NONE)
        return SL_OK;
    sl_dev_out *o = sl__calloc(1, sizeof *o);
    if (!o)
        return sl__oom("opening the device");
    o->spec = *d;
    int rc;
    if (d->kind == SL_DEV_CUDA)
        SL_CHECK(sl_dev__cuda_open(&o->be, d->id));
    else
        SL_CHECK(sl_dev__host_open(&o->be));
    if (d->normalize)
        SL_CHECK(sl_dev__normalize_check(o->be, "device.normalize_on_device"));
    *out = o;
    return SL_OK;
cleanup:
    sl_dev__out_close(o);
    return rc;
}

void sl_dev__out_close(sl_dev_out *o) {
    if (!o)
        return;
    sl_dev__gpu_fill_reset(o);
    sl_dev__jpeg_close(o->jpeg);
    sl_decoder_free(o->dec);
    if (o->fb_host) {
        sl_dev_backend *be = o->ring ? sl_dev__ring_backend(o->ring) : o->be;
        if (o->ring) /* no fallback copy may still read it */
            be->ops->stream_sync(be, sl_dev__ring_copy_stream(o->ring));
        be->ops->host_free(be, o->fb_host);
    }
    if (o->ring)
        sl_dev__ring_close(o->ring);
    else if (o->be)
        sl_dev__backend_release(o->be);
    sl__free(o);
}

int sl_dev__out_slots(const sl_dev_out *o, int depth) {
    return o ? sl_dev__ring_depth(depth + 1) : 0;
}

int sl_dev__out_batch_mem(sl_dev_out *o, sl_pool_mem *out) {
    sl_dev_backend *be = o ? (o->ring ? sl_dev__ring_backend(o->ring) : o->be) : NULL;
    if (!be)
        return 0;
    sl_dev__pinned_mem(be, out);
    return 1;
}

void sl_dev__out_counters(const sl_dev_out *o, sl_dev_counters *out) {
    memset(out, 0, sizeof *out);
    if (!o)
        return;
    sl_dev_out *m = (sl_dev_out *)o;
    out->h2d_bytes = atomic_load(&m->h2d_bytes);
    out->staged_bytes = atomic_load(&m->staged_bytes);
    out->wait_ns = atomic_load(&m->wait_ns);
    out->gpu_decoded = atomic_load(&m->gpu_images);
    out->gpu_fallbacks = atomic_load(&m->cpu_images);
}

void sl_dev__out_set_stream(sl_dev_out *o, void *stream) {
    o->stream = stream;
    if (o->ring)
        sl_dev__ring_set_stream(o->ring, stream);
}

/* ---- upload --------------------------------------------------------------------------- */

static size_t align_up(size_t n) { return (n + ALIGN_DEV - 1) & ~(size_t)(ALIGN_DEV - 1); }

static int ensure_ring(sl_dev_out *o, int depth) {
    if (o->ring)
        return SL_OK;
    sl_dev_backend *owned = o->be;
    o->be = NULL; /* the ring owns it now, also when creating it fails */
    /* depth + 1 slots, as sl_dev__out_slots counts them */
    SL_TRY(sl_dev__ring_create(&o->ring, owned, depth + 1));
    sl_dev__ring_set_stream(o->ring, o->stream);
    return SL_OK;
}

int sl_dev__out_ring(sl_dev_out *o, int depth) { return ensure_ring(o, depth); }

static int is_text(const sl_dev_cols *b, int c) { return c < 32 && (b->text >> c & 1u); }

int sl_dev__out_upload(sl_dev_out *o, sl_dev_cols *b, int depth) {
    SL_TRY(ensure_ring(o, depth));
    if (o->gpu) /* the GPU decode fill makes those batches */
        return sl__error(SL_EINVAL, "device: a host batch handed to the upload while decoding "
                         "on the GPU");
    sl_dev_backend *be = sl_dev__ring_backend(o->ring);
    size_t off[SL_MAX_COLUMNS], total = 0;
    int ncol = -1;
    for (int c = 0; c < b->ncols; c++) {
        off[c] = 0;
        if (is_text(b, c)) /* stays on the host, as it is (also ragged) */
            continue;
        if (b->ragged[c])
            return sl__error(SL_EUNSUPPORTED, "device: column '%s' is ragged (samples of "
                                              "different shapes); device batches need stacked "
                                              "columns (crop or resize to one size first)",
                             b->names[c]);
        off[c] = total;
        total += align_up(b->col[c].nbytes);
        if (o->has_norm && !strcmp(b->names[c], o->norm_col))
            ncol = c;
    }
    sl_dev_norm norm;
    size_t norm_off = total, dev_total = total;
    int64_t oshape[4];
    if (o->has_norm) {
        if (ncol < 0)
            return sl__error(SL_EINVAL, "device.normalize_on_device: the batch has no column "
                                        "'%s'", o->norm_col);
        const sl_tensor *t = &b->col[ncol];
        int lead = b->single ? 0 : 1;
        if (t->dtype != SL_U8 || t->ndim != 3 + lead || t->shape[2 + lead] < 1 ||
            t->shape[2 + lead] > 4)
            return sl__error(SL_EINVAL, "device.normalize_on_device: column '%s' must be uint8 "
                                        "images (H, W, C) with 1-4 channels, got %s with %d "
                                        "dims", o->norm_col, sl_dtype_name(t->dtype),
                             (int)t->ndim - lead);
        memset(&norm, 0, sizeof norm);
        norm.n = lead ? t->shape[0] : 1;
        norm.h = t->shape[lead];
        norm.w = t->shape[lead + 1];
        norm.c = t->shape[lead + 2];
        for (int k = 0; k < 2; k++) {
            int n = k ? o->nstd : o->nmean;
            if (n != 1 && n != norm.c)
                return sl__error(SL_EINVAL, "device.normalize_on_device: %s has %d values for "
                                            "%lld channels", k ? "std" : "mean", n,
                                 (long long)norm.c);
        }
        for (int c = 0; c < norm.c; c++) {
            norm.mean[c] = o->mean[o->nmean == 1 ? 0 : c];
            norm.std[c] = o->std[o->nstd == 1 ? 0 : c];
        }
        norm.chw = o->chw;
        norm.dtype = o->dtype;
        int k = 0;
        if (lead)
            oshape[k++] = norm.n;
        if (o->chw) {
            oshape[k++] = norm.c; oshape[k++] = norm.h; oshape[k++] = norm.w;
        } else {
            oshape[k++] = norm.h; oshape[k++] = norm.w; oshape[k++] = norm.c;
        }
        dev_total += align_up((size_t)(norm.n * norm.h * norm.w * norm.c) * sl_dtype_size(o->dtype));
    }
    /* straight from the batch's own buffers when they are all pinned */
    int direct = b->ncols <= SL_DEV_MAX_HOLD;
    for (int c = 0; c < b->ncols && direct; c++)
        if (!is_text(b, c) && b->col[c].nbytes && sl_buffer__mem_ctx(b->col[c].buf) != (void *)be)
            direct = 0;
    sl_dev_slot *slot;
    uint64_t waited = 0;
    int rc = sl_dev__ring_acquire(o->ring, direct ? 0 : total, dev_total, &slot, &waited);
    atomic_fetch_add(&o->wait_ns, waited);
    if (rc < 0)
        return rc;
    uint8_t *dev = sl_dev__slot_dev(slot);
    if (o->has_norm) {
        norm.src = dev + off[ncol];
        norm.dst = dev + norm_off;
    }
    const sl_dev_norm *np = o->has_norm ? &norm : NULL;
    if (direct) {
        sl_dev_copy cp[SL_MAX_COLUMNS];
        sl_buffer *hold[SL_MAX_COLUMNS];
        int nhold = 0;
        int ncp = 0;
        for (int c = 0; c < b->ncols; c++) {
            if (is_text(b, c) || !b->col[c].nbytes)
                continue;
            cp[ncp].dst_off = off[c];
            cp[ncp].src = b->col[c].data;
            cp[ncp++].n = b->col[c].nbytes;
            hold[nhold++] = b->col[c].buf;
        }
        rc = sl_dev__slot_submit_from(slot, cp, ncp, hold, nhold, np);
    } else {
        uint8_t *host = sl_dev__slot_host(slot);
        for (int c = 0; c < b->ncols; c++)
            if (!is_text(b, c) && b->col[c].nbytes)
                memcpy(host + off[c], b->col[c].data, b->col[c].nbytes);
        atomic_fetch_add(&o->staged_bytes, total);
        rc = sl_dev__slot_submit(slot, total, np);
    }
    sl_buffer *buf = NULL;
    if (rc >= 0)
        rc = sl_dev__slot_handout(slot, &buf);
    if (rc < 0) {
        sl_dev__slot_abandon(slot);
        return rc;
    }
    for (int c = 0; c < b->ncols; c++) {
        if (is_text(b, c))
            continue;
        sl_tensor *t = &b->col[c];
        sl_buffer_release(t->buf);
        t->buf = sl_buffer_retain(buf);
        sl_dev__backend_place(be, &t->device, &t->device_id);
        if (c == ncol) {
            t->data = dev + norm_off;
            t->dtype = o->dtype;
            for (int d = 0; d < t->ndim; d++)
                t->shape[d] = oshape[d];
            t->nbytes = (size_t)sl_tensor_numel(t) * sl_dtype_size(t->dtype);
        } else {
            t->data = dev + off[c];
        }
    }
    sl_buffer_release(buf);
    atomic_fetch_add(&o->h2d_bytes, total);
    return SL_OK;
}

/* ---- decode on the GPU ------------------------------------------------------------------
 * Host batches arrive with the image column still encoded (ragged bytes, or
 * stacked when every file has the same length) beside the placements the
 * CPU workers drew; the hand-off reads the placements into items and feeds
 * their rows here, in order, until an output batch is full:
 *   1. a ring slot for the output: the other columns (staged, copied as one
 *      piece) and the batch's images after them (sl_dev__gpu_fill_start);
 *   2. rows decoded by sl_dev__gpu_decode_batch on the ring's copy stream
 *      straight to their rows: nvJPEG, the kernel at each placement, the
 *      CPU path (sl_ops__decode_box into the normalized output, the CPU
 *      op's own kernel) for what nvJPEG leaves (sl_dev__gpu_fill_take);
 *   3. a sample the CPU fails on too goes to the caller's `failed`, which
 *      fails the call or drops it; the rest of its rows are then decoded
 *      again contiguous, so the caller can refill the output from the next
 *      rows and the batches hold the same samples as the CPU path's;
 *   4. the copy event and the consumer stream's wait, as for any batch; the
 *      placements column is not in the batch handed out
 *      (sl_dev__gpu_fill_finish). */

int sl_dev__gpu_begin(sl_dev_out *o, const sl_dev_gpu_spec *g) {
    int pos = g->pos;
    if (!o || o->spec.kind != SL_DEV_CUDA)
        return sl__error(SL_EINVAL, "ops[%d].device \"gpu\": decoding on the GPU needs the "
                         "pipeline's \"device\": \"cuda\" (Python: .device(\"cuda\")); the "
                         "batch is written in the GPU's memory", pos);
    if (sl_dev__nvjpeg_probe() < 0)
        return sl__error_prefix(SL_EUNSUPPORTED, "ops[%d].device \"gpu\": decoding on the GPU "
                                                 "needs nvJPEG", pos);
    if (!o->be->kernels)
        return sl__error(SL_EUNSUPPORTED, "ops[%d].device \"gpu\": decoding on the GPU needs "
                         "the crop/resize kernel: %s", pos, o->be->norm_missing);
    if (o->has_norm)
        return sl__error(SL_EINVAL, "device.normalize_on_device: decode on the GPU (ops[%d]) "
                         "normalizes on the device already; leave normalize_on_device out",
                         pos);
    if (g->batch > SL_DEV_JPEG_MAX)
        return sl__error(SL_EINVAL, "ops[%d].device \"gpu\": batches of at most %d images "
                         "decode on the GPU (the batch is %lld)", pos, SL_DEV_JPEG_MAX,
                         (long long)g->batch);
    o->gd = *g;
    o->gpu = 1;
    sl_ops__norm_lut(o->lut, 3, o->gd.mean, o->gd.std);
    return SL_OK;
}

int sl_dev__gpu_decoding(const sl_dev_out *o) { return o && o->gpu; }

typedef struct gpu_cpu_ctx {
    sl_dev_out *o;
    const sl_dev_gpu_item *items;
} gpu_cpu_ctx;

/* The CPU path for item i: the fused CPU op's decode + resample straight
 * into the normalized, mirrored output (bit for bit the CPU chain's). */
static int gpu_cpu_fallback(void *ctx, int i, float *out) {
    gpu_cpu_ctx *c = ctx;
    const sl_dev_gpu_spec *g = &c->o->gd;
    const sl_dev_gpu_item *it = &c->items[i];
    sl_ops__norm nm = {(const float(*)[256])c->o->lut, g->hwc ? SL_LAYOUT_HWC : SL_LAYOUT_CHW,
                       it->flip};
    int rc = sl_ops__decode_box(c->o->dec, it->data, it->len, SL_COLOR_RGB, it->box_drawn,
                                it->lim, g->oh, g->ow, SL_INTERP_BILINEAR, out,
                                g->u8 ? NULL : &nm);
    if (g->u8 && rc == SL_OK && it->flip) { /* the CPU chain's flip of the uint8 image */
        sl_tensor t;
        int64_t shape[3] = {g->oh, g->ow, 3};
        sl_tensor_view(&t, out, SL_U8, 3, shape);
        rc = sl_image_flip(&t, &t);
    }
    if (!g->u8)
        sl_ops__norm_done();
    if (rc < 0) { /* the cause alone, as the CPU ops give it ("decode: x" -> "x") */
        char buf[SL__ERRMSG_MAX];
        const char *m = sl_errmsg(), *colon = strstr(m, ": ");
        if (colon && !memchr(m, ' ', (size_t)(colon - m))) {
            snprintf(buf, sizeof buf, "%s", colon + 2);
            sl__error(rc, "%s", buf);
        }
    }
    return rc;
}

/* Bytes of one output image. */
static size_t image_bytes(const sl_dev_gpu_spec *g) {
    return (size_t)3 * (size_t)g->oh * (size_t)g->ow * (g->u8 ? 1 : sizeof(float));
}

/* Fallback images in flight at once (pinned places of one image each; a
 * batch with more fallbacks waits for the first ones' copies). */
#define GPU_FALLBACK_PLACES 4

static int gpu_open_decoder(sl_dev_out *o, sl_dev_backend *be, size_t n) {
    if (!o->jpeg)
        SL_TRY(sl_dev__jpeg_open(&o->jpeg, be));
    if (!o->dec) {
        SL_TRY(sl_decoder_create(&o->dec));
        SL_TRY(sl_decoder_set(o->dec, SL_DECODE_WARNINGS, o->gd.warnings));
    }
    if (n > GPU_FALLBACK_PLACES)
        n = GPU_FALLBACK_PLACES;
    if (o->fb_cap < n) {
        if (o->fb_host)
            be->ops->host_free(be, o->fb_host);
        o->fb_host = NULL;
        o->fb_cap = 0;
        size_t bytes = n * image_bytes(&o->gd);
        SL_TRY(be->ops->host_alloc(be, bytes, &o->fb_host));
        o->fb_cap = n;
    }
    return SL_OK;
}

void sl_dev__gpu_fill_reset(sl_dev_out *o) {
    if (!o)
        return;
    if (o->slot)
        sl_dev__slot_abandon(o->slot);
    o->slot = NULL;
    o->filled = 0;
}

int sl_dev__gpu_filling(const sl_dev_out *o) { return o->slot != NULL; }
int64_t sl_dev__gpu_filled(const sl_dev_out *o) { return o->filled; }
int64_t sl_dev__gpu_target(const sl_dev_out *o) { return o->target; }

int sl_dev__gpu_fill_start(sl_dev_out *o, const sl_dev_cols *b, int ic, int pc) {
    const sl_dev_gpu_spec *g = &o->gd;
    if (!o->ring)
        return sl__error(SL_EINVAL, "decode on the GPU: no ring (sl_dev__out_ring first)");
    o->ic = ic;
    o->pc = pc;
    o->single = b->single;
    o->target = b->single ? 1 : g->batch;
    if (o->target < 1 || o->target > SL_DEV_JPEG_MAX)
        return sl__error(SL_EINVAL, "decode on the GPU: a batch of %lld images (1 to %d)",
                         (long long)o->target, SL_DEV_JPEG_MAX);
    sl_dev_backend *be = sl_dev__ring_backend(o->ring);
    SL_TRY(gpu_open_decoder(o, be, (size_t)o->target));
    o->host_total = 0;
    for (int c = 0; c < b->ncols; c++) {
        o->off[c] = o->host_total;
        o->rowb[c] = 0;
        if (c == ic || c == pc)
            continue;
        if (b->ragged[c] && is_text(b, c))
            return sl__error(SL_EUNSUPPORTED, "decode on the GPU: text column '%s' has samples "
                             "of different lengths, which GPU-decoded batches do not carry; "
                             ".select() the columns the batches need (Python), or a \"select\" op "
                             "in the spec", b->names[c]);
        if (b->ragged[c])
            return sl__error(SL_EUNSUPPORTED, "device: column '%s' is ragged (samples of "
                             "different shapes); device batches need stacked columns",
                             b->names[c]);
        o->rowb[c] = b->single ? b->col[c].nbytes
                               : (b->size ? b->col[c].nbytes / (size_t)b->size : 0);
        o->host_total += align_up(o->rowb[c] * (size_t)o->target);
    }
    size_t per = image_bytes(g);
    o->img_off = o->host_total;
    uint64_t waited = 0;
    int rc = sl_dev__ring_acquire(o->ring, o->host_total,
                                  o->img_off + align_up((size_t)o->target * per), &o->slot,
                                  &waited);
    atomic_fetch_add(&o->wait_ns, waited);
    if (rc < 0) {
        o->slot = NULL;
        return rc;
    }
    o->filled = 0;
    o->text = b->text;
    /* the output's columns: the host batch's, less the placements */
    o->ncols = 0;
    for (int c = 0; c < b->ncols; c++) {
        if (c == pc)
            continue;
        memcpy(o->names[o->ncols], b->names[c], SL_COLNAME_MAX);
        sl_tensor *t = &o->meta[o->ncols];
        memset(t, 0, sizeof *t);
        if (c == ic) {
            int d = 0;
            if (!b->single)
                t->shape[d++] = 0;
            if (!g->hwc)
                t->shape[d++] = 3;
            t->shape[d++] = g->oh;
            t->shape[d++] = g->ow;
            if (g->hwc)
                t->shape[d++] = 3;
            t->ndim = d;
            t->dtype = g->u8 ? SL_U8 : SL_F32;
            o->src_col[o->ncols] = -1;
        } else {
            t->dtype = b->col[c].dtype;
            t->ndim = b->col[c].ndim;
            memcpy(t->shape, b->col[c].shape, sizeof t->shape);
            o->src_col[o->ncols] = c;
        }
        o->ncols++;
    }
    return SL_OK;
}

int sl_dev__gpu_fill_take(sl_dev_out *o, const sl_dev_cols *b, sl_dev_gpu_item *it, int m,
                          sl_dev_gpu_failed_fn failed_fn, void *failed_ctx) {
    const sl_dev_gpu_spec *g = &o->gd;
    sl_dev_backend *be = sl_dev__ring_backend(o->ring);
    if (b->ncols <= o->ic || b->ncols <= o->pc || b->single != o->single)
        return sl__error(SL_EINVAL, "decode on the GPU: host batches of different columns");
    size_t per = image_bytes(g);
    uint8_t *dev = sl_dev__slot_dev(o->slot), *host = sl_dev__slot_host(o->slot);
    gpu_cpu_ctx cctx = {o, it};
    sl_dev_gpu_batch gb = {.jpeg = o->jpeg, .oh = g->oh, .ow = g->ow,
                           .dst = (float *)(void *)(dev + o->img_off + (size_t)o->filled * per),
                           .host = o->fb_host, .cpu = gpu_cpu_fallback, .cpu_ctx = &cctx,
                           .stream = sl_dev__ring_copy_stream(o->ring),
                           .host_cap = (int)o->fb_cap, .hwc = g->hwc, .u8 = g->u8};
    memcpy(gb.mean, g->mean, sizeof gb.mean);
    memcpy(gb.std, g->std, sizeof gb.std);
    int on_gpu = 0, on_cpu = 0, failed = 0;
    int rc = sl_dev__gpu_decode_batch(&gb, it, m, &on_gpu, &on_cpu, &failed);
    while (rc >= 0 && failed > 0) {
        /* each failed one to the caller in order: the first it does not
         * drop fails the call; the rest are decoded again in place,
         * contiguous (only batches with a bad image pay this) */
        int kept = 0;
        for (int j = 0; j < m && rc >= 0; j++) {
            if (it[j].status == SL_DEV_GPU_FAILED) {
                rc = failed_fn(failed_ctx, &it[j]);
                continue;
            }
            it[kept++] = it[j];
        }
        if (rc < 0)
            break;
        m = kept;
        on_gpu = on_cpu = failed = 0;
        if (m == 0)
            break;
        rc = sl_dev__gpu_decode_batch(&gb, it, m, &on_gpu, &on_cpu, &failed);
    }
    if (rc >= 0 && on_cpu > 0) /* fb_host's places are reused by the next decode */
        rc = be->ops->stream_sync(be, gb.stream);
    if (rc < 0)
        return rc;
    for (int c = 0; c < b->ncols; c++) {
        if (c == o->ic || c == o->pc || !o->rowb[c])
            continue;
        size_t rb = o->rowb[c];
        size_t have = b->single ? b->col[c].nbytes
                                : (b->size ? b->col[c].nbytes / (size_t)b->size : 0);
        if (have != rb || b->ragged[c])
            return sl__error(SL_EINVAL, "decode on the GPU: column '%s' changed shape between "
                             "batches", b->names[c]);
        for (int j = 0; j < m; j++)
            memcpy(host + o->off[c] + (size_t)(o->filled + j) * rb,
                   (const uint8_t *)b->col[c].data + (size_t)it[j].row * rb, rb);
    }
    size_t jpeg_bytes = 0; /* what nvJPEG takes across to the device */
    for (int j = 0; j < m; j++)
        if (it[j].status == SL_DEV_JPEG_OK)
            jpeg_bytes += it[j].len;
    o->filled += m;
    atomic_fetch_add(&o->gpu_images, (uint64_t)on_gpu);
    atomic_fetch_add(&o->cpu_images, (uint64_t)on_cpu);
    atomic_fetch_add(&o->h2d_bytes, jpeg_bytes + (size_t)on_cpu * per);
    return SL_OK;
}

int sl_dev__gpu_fill_finish(sl_dev_out *o, sl_dev_cols *out) {
    const sl_dev_gpu_spec *g = &o->gd;
    sl_dev_backend *be = sl_dev__ring_backend(o->ring);
    atomic_fetch_add(&o->staged_bytes, o->host_total);
    atomic_fetch_add(&o->h2d_bytes, o->host_total);
    int rc = sl_dev__slot_submit(o->slot, o->host_total, NULL);
    sl_buffer *buf = NULL;
    if (rc >= 0)
        rc = sl_dev__slot_handout(o->slot, &buf);
    if (rc < 0) {
        sl_dev__gpu_fill_reset(o);
        return rc;
    }
    size_t per = image_bytes(g);
    uint8_t *dev = sl_dev__slot_dev(o->slot), *host = sl_dev__slot_host(o->slot);
    out->size = o->filled;
    out->single = o->single;
    out->ncols = o->ncols;
    for (int k = 0; k < o->ncols; k++) {
        memcpy(out->names[k], o->names[k], SL_COLNAME_MAX);
        sl_tensor *t = &out->col[k];
        *t = o->meta[k];
        int c = o->src_col[k];
        if (!o->single)
            t->shape[0] = o->filled;
        if (c < 0) {
            t->data = dev + o->img_off;
            t->nbytes = (size_t)o->filled * per;
        } else if (c < 32 && (o->text >> c & 1u)) {
            /* text stays on the host: the rows staged in the slot's pinned
             * memory, which the slot keeps until this batch is released */
            t->data = host + o->off[c];
            t->nbytes = o->rowb[c] * (size_t)o->filled;
            t->buf = sl_buffer_retain(buf);
            t->device = SL_DEVICE_CPU;
            t->device_id = 0;
            continue;
        } else {
            t->data = dev + o->off[c];
            t->nbytes = o->rowb[c] * (size_t)o->filled;
        }
        t->buf = sl_buffer_retain(buf);
        sl_dev__backend_place(be, &t->device, &t->device_id);
    }
    sl_buffer_release(buf);
    o->slot = NULL;
    o->filled = 0;
    return SL_OK;
}

/* ---- public -------------------------------------------------------------------------- */

int sl_device_available(sl_device device, int id) {
    sl_dev_backend *be = NULL;
    if (device == SL_DEVICE_CPU)
        return SL_OK;
    if (device != SL_DEVICE_CUDA)
        return sl__error(SL_EINVAL, "device: %d is not SL_DEVICE_CUDA or SL_DEVICE_CPU",
                         (int)device);
    SL_TRY(sl_dev__cuda_open(&be, id));
    sl_dev__backend_release(be);
    return SL_OK;
}

int sl_tensor_stream_wait(const sl_tensor *t, void *stream) {
    sl_dev_slot *s = t ? sl_dev__slot_of(t->buf) : NULL;
    if (!s)
        return sl__error(SL_EINVAL, "stream wait: the tensor is not from a device batch");
    return sl_dev__slot_wait(s, stream);
}
