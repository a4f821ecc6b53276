/*
 * device_handoff.c — the pipeline's hand-off to a device (the copying itself
 * is src/device/'s: backends and the ring): the spec's "device" key, taking the normalize op out of the pipeline when it runs on the
 * device, the decode placement check, the upload that turns a host batch
 * into a device batch at the end of sl_pipeline_next, and, for decode on the
 * GPU, the device batches made from host batches of JPEG bytes
 * (sl_device__gpu_next, "decode on the GPU" below).
 *
 * The pipeline's batch buffers are the backend's pinned memory
 * (sl_device__batch_mem, pools.c): the stages write each batch where the copy
 * engine reads it.
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
#include "pipeline/pipeline.h"
#include "ops/ops.h"
#include "pipeline/exec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ALIGN_DEV 256u

struct sl_device_state {
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
    /* decode on the GPU (sl_device__gpu_setup; used on the consumer thread) */
    const sl_gpu_decode *gd;      /* the plan's gpu_decode_place params, or NULL */
    sl_pipeline *p;
    int gd_pos;                   /* the decode op's spec position (messages) */
    char gd_label[96];
    sl_dev_jpeg *jpeg;            /* made at the first upload, on the ring's backend */
    sl_decoder *dec;              /* the CPU fallback's decoder */
    float lut[3][256];            /* the CPU fallback's normalize */
    float *fb_host;               /* pinned: fallback images before their copy */
    size_t fb_cap;                /* images fb_host holds */
    _Atomic uint64_t gpu_images, cpu_images;
    /* the rows still to use, and the output being filled (sl_device__gpu_next) */
    sl_batch *carry;              /* host batch whose rows [carry_at, size) come next */
    int64_t carry_at;
    sl_batch *marker;             /* END/ERROR met while filling: after the short batch */
    sl_dev_slot *slot;            /* the output being filled, or NULL */
    int64_t filled, target;
    int single, ic, pc;           /* host batches: no batch dim; image and placement columns */
    size_t off[SL_MAX_COLUMNS], rowb[SL_MAX_COLUMNS], host_total, img_off;
    int ncols;                    /* the output's columns */
    char names[SL_MAX_COLUMNS][SL_COLNAME_MAX];
    sl_tensor meta[SL_MAX_COLUMNS];
    int src_col[SL_MAX_COLUMNS];  /* the host column of each (-1: the images) */
    uint64_t epoch, out_index, next_pos;
    int64_t counters[SL_MAX_COUNTERS];
};

/* ---- spec ---------------------------------------------------------------------------- */

static int parse_kind(const cJSON *v, int *out) {
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "cuda"))
        *out = SL_DEV_CUDA;
    else if (cJSON_IsString(v) && !strcmp(v->valuestring, "host"))
        *out = SL_DEV_HOST;
    else if (cJSON_IsString(v) && !strcmp(v->valuestring, "none"))
        *out = SL_DEV_NONE;
    else
        return sl__error(SL_EINVAL, "device.kind: must be \"cuda\", \"host\" or \"none\"");
    return SL_OK;
}

int sl_device__parse_json(const cJSON *v, sl_device_spec *out) {
    memset(out, 0, sizeof *out);
    if (cJSON_IsString(v))
        return parse_kind(v, &out->kind);
    if (!cJSON_IsObject(v))
        return sl__error(SL_EINVAL, "device: must be \"cuda\", \"host\" or an object "
                                    "{\"kind\", \"id\", \"normalize_on_device\"}");
    int have_kind = 0;
    for (const cJSON *it = v->child; it; it = it->next) {
        const char *k = it->string;
        if (!strcmp(k, "kind")) {
            SL_TRY(parse_kind(it, &out->kind));
            have_kind = 1;
        } else if (!strcmp(k, "id")) {
            if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 1024 ||
                it->valuedouble != floor(it->valuedouble))
                return sl__error(SL_EINVAL, "device.id: must be an integer from 0");
            out->id = (int)it->valuedouble;
        } else if (!strcmp(k, "normalize_on_device")) {
            if (!cJSON_IsBool(it))
                return sl__error(SL_EINVAL, "device.normalize_on_device: must be true or false");
            out->normalize = cJSON_IsTrue(it);
        } else {
            char list[64];
            sl__names_closest(k, (const char *const[]){"kind", "id", "normalize_on_device"}, 3,
                              list, sizeof list);
            return sl__error(SL_EINVAL, "device.%s: unknown key (keys: %s)", k, list);
        }
    }
    if (!have_kind)
        return sl__error(SL_EINVAL, "device.kind: missing");
    return SL_OK;
}

cJSON *sl_device__to_json(const sl_device_spec *d) {
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

int sl_spec_set_device(sl_spec *spec, sl_device device, int id, int normalize_on_device) {
    sl_device_spec d = {SL_DEV_NONE, id, normalize_on_device != 0};
    if ((int)device == 0)
        d.kind = SL_DEV_NONE;
    else if (device == SL_DEVICE_CUDA)
        d.kind = SL_DEV_CUDA;
    else if (device == SL_DEVICE_CPU)
        d.kind = SL_DEV_HOST;
    else
        return sl__error(SL_EINVAL, "device: %d is not SL_DEVICE_CUDA, SL_DEVICE_CPU or 0",
                         (int)device);
    if (id < 0)
        return sl__error(SL_EINVAL, "device.id: must be an integer from 0");
    spec->device = d;
    return SL_OK;
}

int sl_device__decode_placement(struct cJSON *op, int index, int *gpu) {
    cJSON *name = cJSON_GetObjectItemCaseSensitive(op, "op");
    cJSON *dev = cJSON_GetObjectItemCaseSensitive(op, "device");
    *gpu = 0;
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "decode") != 0 || !dev)
        return SL_OK;
    if (!cJSON_IsString(dev) || (strcmp(dev->valuestring, "cpu") && strcmp(dev->valuestring, "gpu")))
        return sl__error(SL_EINVAL, "ops[%d].device: must be \"cpu\" or \"gpu\"", index);
    *gpu = !strcmp(dev->valuestring, "gpu");
    return SL_OK;
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

/* Take the last normalize op out of the spec: the device runs it. */
static int take_normalize(sl_device_state *ds, sl_spec *spec) {
    int at = -1;
    for (int i = 0; i < spec->nops; i++) {
        const sl_spec_op *o = &spec->ops[i];
        const cJSON *name = o->json ? cJSON_GetObjectItemCaseSensitive(o->json, "op") : NULL;
        if (o->kind == SL_SPEC_OP_JSON && cJSON_IsString(name) &&
            !strcmp(name->valuestring, "normalize"))
            at = i;
    }
    if (at < 0)
        return sl__error(SL_EINVAL, "device.normalize_on_device: the spec has no normalize op");
    for (int i = at + 1; i < spec->nops; i++) {
        const sl_spec_op *o = &spec->ops[i];
        const cJSON *name = o->json ? cJSON_GetObjectItemCaseSensitive(o->json, "op") : NULL;
        if (o->kind != SL_SPEC_OP_JSON || !cJSON_IsString(name) || !is_seq_op(name->valuestring))
            return sl__error(SL_EINVAL, "device.normalize_on_device: ops[%d] (%s) comes after "
                                        "normalize; only batch, prefetch, take, skip and repeat "
                                        "may", i,
                             cJSON_IsString(name) ? name->valuestring : o->name);
    }
    const cJSON *op = spec->ops[at].json;
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
    snprintf(ds->norm_col, sizeof ds->norm_col, "%s", col ? col->valuestring : "image");
    SL_TRY(read_floats(op, "mean", ds->mean, &ds->nmean, 0.0f));
    SL_TRY(read_floats(op, "std", ds->std, &ds->nstd, 1.0f));
    for (int i = 0; i < ds->nstd; i++)
        if (!(ds->std[i] != 0.0f && isfinite(ds->std[i])))
            return sl__error(SL_EINVAL, "ops[%d].std[%d]: must be non-zero", at, i);
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(op, "layout");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(op, "dtype");
    ds->chw = 1;
    if (lay && !(cJSON_IsString(lay) && (!strcmp(lay->valuestring, "chw") ||
                                         !strcmp(lay->valuestring, "hwc"))))
        return sl__error(SL_EINVAL, "ops[%d].layout: must be \"hwc\" or \"chw\"", at);
    if (lay)
        ds->chw = !strcmp(lay->valuestring, "chw");
    ds->dtype = SL_F32;
    if (dt && cJSON_IsString(dt) && !strcmp(dt->valuestring, "float16"))
        ds->dtype = SL_F16;
    else if (dt && cJSON_IsString(dt) && !strcmp(dt->valuestring, "bfloat16"))
        ds->dtype = SL_BF16;
    else if (dt && !(cJSON_IsString(dt) && !strcmp(dt->valuestring, "float32")))
        return sl__error(SL_EINVAL,
                         "ops[%d].dtype: on the device, \"float32\", \"float16\" or \"bfloat16\"",
                         at);
    cJSON_Delete(spec->ops[at].json);
    memmove(&spec->ops[at], &spec->ops[at + 1], (size_t)(spec->nops - at - 1) * sizeof *spec->ops);
    spec->nops--;
    ds->has_norm = 1;
    return SL_OK;
}

int sl_device__open(sl_device_state **out, sl_spec *spec) {
    *out = NULL;
    for (int i = 0; i < spec->nops; i++) {
        int gpu = 0;
        if (spec->ops[i].kind == SL_SPEC_OP_JSON)
            SL_TRY(sl_device__decode_placement(spec->ops[i].json, i, &gpu));
        /* before the source is opened: say at once what the machine lacks */
        if (gpu && sl_dev__nvjpeg_probe() < 0)
            return sl__error_prefix(SL_EUNSUPPORTED, "ops[%d].device \"gpu\": decoding on "
                                                     "the GPU needs nvJPEG", i);
    }
    const sl_device_spec *d = &spec->device;
    if (d->kind == SL_DEV_NONE)
        return SL_OK;
    sl_device_state *ds = sl__calloc(1, sizeof *ds);
    if (!ds)
        return sl__oom("opening the device");
    ds->spec = *d;
    int rc;
    if (d->kind == SL_DEV_CUDA)
        SL_CHECK(sl_dev__cuda_open(&ds->be, d->id));
    else
        SL_CHECK(sl_dev__host_open(&ds->be));
    if (d->normalize) {
        SL_CHECK(sl_dev__normalize_check(ds->be, "device.normalize_on_device"));
        SL_CHECK(take_normalize(ds, spec));
    }
    *out = ds;
    return SL_OK;
cleanup:
    sl_device__close(ds);
    return rc;
}

void sl_device__close(sl_device_state *ds) {
    if (!ds)
        return;
    sl_device__gpu_reset(ds, 0);
    sl_dev__jpeg_close(ds->jpeg);
    sl_decoder_free(ds->dec);
    if (ds->fb_host) {
        sl_dev_backend *be = ds->ring ? sl_dev__ring_backend(ds->ring) : ds->be;
        if (ds->ring) /* no fallback copy may still read it */
            be->stream_sync(be, sl_dev__ring_copy_stream(ds->ring));
        be->host_free(be, ds->fb_host);
    }
    if (ds->ring)
        sl_dev__ring_close(ds->ring);
    else if (ds->be)
        sl_dev__backend_release(ds->be);
    sl__free(ds);
}

int sl_device__slots(const sl_device_state *ds, int depth) {
    return ds ? sl_dev__ring_depth(depth + 1) : 0;
}

int sl_device__batch_mem(sl_device_state *ds, sl_pool_mem *out) {
    sl_dev_backend *be = ds ? (ds->ring ? sl_dev__ring_backend(ds->ring) : ds->be) : NULL;
    if (!be)
        return 0;
    sl_dev__pinned_mem(be, out);
    return 1;
}

void sl_device__counters(const sl_device_state *ds, sl_device_counters *out) {
    memset(out, 0, sizeof *out);
    if (!ds)
        return;
    out->h2d_bytes = atomic_load(&((sl_device_state *)ds)->h2d_bytes);
    out->staged_bytes = atomic_load(&((sl_device_state *)ds)->staged_bytes);
    out->wait_ns = atomic_load(&((sl_device_state *)ds)->wait_ns);
    out->gpu_decoded = atomic_load(&((sl_device_state *)ds)->gpu_images);
    out->gpu_fallbacks = atomic_load(&((sl_device_state *)ds)->cpu_images);
}

/* ---- upload --------------------------------------------------------------------------- */

static size_t align_up(size_t n) { return (n + ALIGN_DEV - 1) & ~(size_t)(ALIGN_DEV - 1); }

static int ensure_ring(sl_device_state *ds, int depth) {
    if (ds->ring)
        return SL_OK;
    sl_dev_backend *owned = ds->be;
    ds->be = NULL; /* the ring owns it now, also when creating it fails */
    /* depth + 1 slots, as sl_device__slots counts them */
    SL_TRY(sl_dev__ring_create(&ds->ring, owned, depth + 1));
    sl_dev__ring_set_stream(ds->ring, ds->stream);
    return SL_OK;
}


int sl_device__upload(sl_device_state *ds, sl_batch *b, int depth) {
    SL_TRY(ensure_ring(ds, depth));
    if (ds->gd) /* sl_device__gpu_next makes those batches */
        return sl__error(SL_EINVAL, "device: a host batch handed to the upload while decoding "
                         "on the GPU");
    sl_dev_backend *be = sl_dev__ring_backend(ds->ring);
    size_t off[SL_MAX_COLUMNS], total = 0;
    int ncol = -1;
    for (int c = 0; c < b->ncols; c++) {
        if (b->ragged[c])
            return sl__error(SL_EUNSUPPORTED, "device: column '%s' is ragged (samples of "
                                              "different shapes); device batches need stacked "
                                              "columns (crop or resize to one size first)",
                             b->names[c]);
        off[c] = total;
        total += align_up(b->col[c].nbytes);
        if (ds->has_norm && !strcmp(b->names[c], ds->norm_col))
            ncol = c;
    }
    sl_dev_norm norm;
    size_t norm_off = total, dev_total = total;
    int64_t oshape[4];
    if (ds->has_norm) {
        if (ncol < 0)
            return sl__error(SL_EINVAL, "device.normalize_on_device: the batch has no column "
                                        "'%s'", ds->norm_col);
        const sl_tensor *t = &b->col[ncol];
        int lead = b->single ? 0 : 1;
        if (t->dtype != SL_U8 || t->ndim != 3 + lead || t->shape[2 + lead] < 1 ||
            t->shape[2 + lead] > 4)
            return sl__error(SL_EINVAL, "device.normalize_on_device: column '%s' must be uint8 "
                                        "images (H, W, C) with 1-4 channels, got %s with %d "
                                        "dims", ds->norm_col, sl_dtype_name(t->dtype),
                             (int)t->ndim - lead);
        memset(&norm, 0, sizeof norm);
        norm.n = lead ? t->shape[0] : 1;
        norm.h = t->shape[lead];
        norm.w = t->shape[lead + 1];
        norm.c = t->shape[lead + 2];
        for (int k = 0; k < 2; k++) {
            int n = k ? ds->nstd : ds->nmean;
            if (n != 1 && n != norm.c)
                return sl__error(SL_EINVAL, "device.normalize_on_device: %s has %d values for "
                                            "%lld channels", k ? "std" : "mean", n,
                                 (long long)norm.c);
        }
        for (int c = 0; c < norm.c; c++) {
            norm.mean[c] = ds->mean[ds->nmean == 1 ? 0 : c];
            norm.std[c] = ds->std[ds->nstd == 1 ? 0 : c];
        }
        norm.chw = ds->chw;
        norm.dtype = ds->dtype;
        int k = 0;
        if (lead)
            oshape[k++] = norm.n;
        if (ds->chw) {
            oshape[k++] = norm.c; oshape[k++] = norm.h; oshape[k++] = norm.w;
        } else {
            oshape[k++] = norm.h; oshape[k++] = norm.w; oshape[k++] = norm.c;
        }
        dev_total += align_up((size_t)(norm.n * norm.h * norm.w * norm.c) * sl_dtype_size(ds->dtype));
    }
    /* straight from the batch's own buffers when they are all pinned */
    int direct = b->ncols <= SL_DEV_MAX_HOLD;
    for (int c = 0; c < b->ncols && direct; c++)
        if (b->col[c].nbytes && sl_buffer__mem_ctx(b->col[c].buf) != (void *)be)
            direct = 0;
    sl_dev_slot *slot;
    uint64_t waited = 0;
    int rc = sl_dev__ring_acquire(ds->ring, direct ? 0 : total, dev_total, &slot, &waited);
    atomic_fetch_add(&ds->wait_ns, waited);
    if (rc < 0)
        return rc;
    uint8_t *dev = sl_dev__slot_dev(slot);
    if (ds->has_norm) {
        norm.src = dev + off[ncol];
        norm.dst = dev + norm_off;
    }
    const sl_dev_norm *np = ds->has_norm ? &norm : NULL;
    if (direct) {
        sl_dev_copy cp[SL_MAX_COLUMNS];
        sl_buffer *hold[SL_MAX_COLUMNS];
        int nhold = 0;
        for (int c = 0; c < b->ncols; c++) {
            cp[c].dst_off = off[c];
            cp[c].src = b->col[c].data;
            cp[c].n = b->col[c].nbytes;
            if (b->col[c].nbytes)
                hold[nhold++] = b->col[c].buf;
        }
        rc = sl_dev__slot_submit_from(slot, cp, b->ncols, hold, nhold, np);
    } else {
        uint8_t *host = sl_dev__slot_host(slot);
        for (int c = 0; c < b->ncols; c++)
            if (b->col[c].nbytes)
                memcpy(host + off[c], b->col[c].data, b->col[c].nbytes);
        atomic_fetch_add(&ds->staged_bytes, total);
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
        sl_tensor *t = &b->col[c];
        sl_buffer_release(t->buf);
        t->buf = sl_buffer_retain(buf);
        sl_dev__backend_place(be, &t->device, &t->device_id);
        if (c == ncol) {
            t->data = dev + norm_off;
            t->dtype = ds->dtype;
            for (int d = 0; d < t->ndim; d++)
                t->shape[d] = oshape[d];
            t->nbytes = (size_t)sl_tensor_numel(t) * sl_dtype_size(t->dtype);
        } else {
            t->data = dev + off[c];
        }
    }
    sl_buffer_release(buf);
    atomic_fetch_add(&ds->h2d_bytes, total);
    return SL_OK;
}

/* ---- decode on the GPU ------------------------------------------------------------------
 * Host batches arrive with the image column still encoded (ragged bytes, or
 * stacked when every file has the same length) and the placements column
 * the CPU workers drew (gpu_decode_place, image_ops.c). The consumer thread
 * (sl_device__gpu_next) makes device batches from their rows:
 *   1. a ring slot for the output: the other columns (staged, copied as one
 *      piece) and the batch's float32 (3, oh, ow) images after them;
 *   2. rows taken in order from the host batches (the one being used is the
 *      carry), decoded by sl_dev__gpu_decode_batch on the ring's copy
 *      stream straight to their rows: nvJPEG, the kernel at each placement,
 *      the CPU path (sl_ops__decode_box into the normalized output, the CPU
 *      op's own kernel) for what nvJPEG leaves;
 *   3. a sample the CPU fails on too is the CPU path's error: with on_error
 *      "fail" the call fails naming its record; with "skip" it is counted
 *      and dropped, the rest of its rows decoded again contiguous, and the
 *      output is refilled from the next rows, so the batches hold the same
 *      samples as the CPU path's (an epoch's end hands out the last, short
 *      one, unless drop_remainder);
 *   4. the copy event and the consumer stream's wait, as for any batch; the
 *      placements column is not in the batch handed out. */

typedef struct gpu_cpu_ctx {
    sl_device_state *ds;
    const sl_dev_gpu_item *items;
    const double *const *place;   /* per item: its placements row */
} gpu_cpu_ctx;

/* The CPU path for item i: the fused CPU op's decode + resample straight
 * into the normalized, mirrored output (bit for bit the CPU chain's). */
static int gpu_cpu_fallback(void *ctx, int i, float *out) {
    gpu_cpu_ctx *c = ctx;
    const sl_gpu_decode *g = c->ds->gd;
    const double *v = c->place[i];
    const sl_dev_gpu_item *it = &c->items[i];
    sl_ops__norm nm = {(const float(*)[256])c->ds->lut, g->hwc ? SL_LAYOUT_HWC : SL_LAYOUT_CHW,
                       it->flip};
    int rc = sl_ops__decode_box(c->ds->dec, it->data, it->len, SL_COLOR_RGB,
                                v + SL_GPU_PLACE_BOX, it->lim, g->oh, g->ow, SL_INTERP_BILINEAR,
                                out, g->u8 ? NULL : &nm);
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

/* Row i of column c: its bytes. */
static void row_of(const sl_batch *b, int c, int64_t i, const uint8_t **data, size_t *n) {
    if (b->ragged[c]) {
        *data = b->items[c][i].data;
        *n = b->items[c][i].nbytes;
    } else if (b->single || b->size <= 0) {
        *data = b->col[c].data;
        *n = b->col[c].nbytes;
    } else {
        *n = b->col[c].nbytes / (size_t)b->size;
        *data = (const uint8_t *)b->col[c].data + (size_t)i * *n;
    }
}

static int col_index(const sl_batch *b, const char *name) {
    for (int c = 0; c < b->ncols; c++)
        if (!strcmp(b->names[c], name))
            return c;
    return -1;
}

/* Bytes of one output image. */
static size_t image_bytes(const sl_gpu_decode *g) {
    return (size_t)3 * (size_t)g->oh * (size_t)g->ow * (g->u8 ? 1 : sizeof(float));
}

/* Fallback images in flight at once (pinned places of one image each; a
 * batch with more fallbacks waits for the first ones' copies). */
#define GPU_FALLBACK_PLACES 4

static int gpu_open_decoder(sl_device_state *ds, sl_dev_backend *be, size_t n) {
    if (!ds->jpeg)
        SL_TRY(sl_dev__jpeg_open(&ds->jpeg, be));
    if (!ds->dec) {
        SL_TRY(sl_decoder_create(&ds->dec));
        SL_TRY(sl_decoder_set(ds->dec, SL_DECODE_WARNINGS, ds->gd->warnings));
    }
    if (n > GPU_FALLBACK_PLACES)
        n = GPU_FALLBACK_PLACES;
    if (ds->fb_cap < n) {
        if (ds->fb_host)
            be->host_free(be, ds->fb_host);
        ds->fb_host = NULL;
        ds->fb_cap = 0;
        size_t bytes = n * image_bytes(ds->gd);
        SL_TRY(be->host_alloc(be, bytes, (void **)&ds->fb_host));
        ds->fb_cap = n;
    }
    return SL_OK;
}

/* The output batch being filled from the host batches' rows (see "decode
 * on the GPU" above). */
static void fill_reset(sl_device_state *ds) {
    if (ds->slot)
        sl_dev__slot_abandon(ds->slot);
    ds->slot = NULL;
    ds->filled = 0;
}

void sl_device__gpu_reset(sl_device_state *ds, uint64_t batch) {
    if (!ds || !ds->gd)
        return;
    fill_reset(ds);
    sl_pipeline__batch_free(ds->carry);
    sl_pipeline__batch_free(ds->marker);
    ds->carry = ds->marker = NULL;
    ds->carry_at = 0;
    ds->out_index = batch;
}

/* A ring slot for the next output batch, laid out from the host batch
 * `b`: its other columns' rows (staged, then copied as one piece), then
 * the target x (3, oh, ow) float32 images. */
static int fill_start(sl_device_state *ds, const sl_batch *b) {
    const sl_gpu_decode *g = ds->gd;
    char pname[SL_COLNAME_MAX + 16];
    snprintf(pname, sizeof pname, "%s.gpu_place", g->column);
    ds->ic = col_index(b, g->column);
    ds->pc = col_index(b, pname);
    if (ds->ic < 0 || ds->pc < 0 || b->ragged[ds->pc] || b->col[ds->pc].dtype != SL_F64)
        return sl__error(SL_EINVAL, "decode on the GPU: the batch lacks column '%s' or its "
                         "placements", g->column);
    ds->single = b->single;
    ds->target = b->single ? 1 : ds->p->plan.batch_size;
    if (ds->target < 1 || ds->target > SL_DEV_JPEG_MAX)
        return sl__error(SL_EINVAL, "decode on the GPU: a batch of %lld images (1 to %d)",
                         (long long)ds->target, SL_DEV_JPEG_MAX);
    sl_dev_backend *be = sl_dev__ring_backend(ds->ring);
    SL_TRY(gpu_open_decoder(ds, be, (size_t)ds->target));
    ds->host_total = 0;
    for (int c = 0; c < b->ncols; c++) {
        ds->off[c] = ds->host_total;
        ds->rowb[c] = 0;
        if (c == ds->ic || c == ds->pc)
            continue;
        if (b->ragged[c])
            return sl__error(SL_EUNSUPPORTED, "device: column '%s' is ragged (samples of "
                             "different shapes); device batches need stacked columns",
                             b->names[c]);
        ds->rowb[c] = b->single ? b->col[c].nbytes
                                : (b->size ? b->col[c].nbytes / (size_t)b->size : 0);
        ds->host_total += align_up(ds->rowb[c] * (size_t)ds->target);
    }
    size_t per = image_bytes(g);
    ds->img_off = ds->host_total;
    uint64_t waited = 0;
    int rc = sl_dev__ring_acquire(ds->ring, ds->host_total,
                                  ds->img_off + align_up((size_t)ds->target * per), &ds->slot,
                                  &waited);
    atomic_fetch_add(&ds->wait_ns, waited);
    if (rc < 0) {
        ds->slot = NULL;
        return rc;
    }
    ds->filled = 0;
    ds->epoch = b->epoch;
    /* the output's columns: the host batch's, less the placements */
    ds->ncols = 0;
    for (int c = 0; c < b->ncols; c++) {
        if (c == ds->pc)
            continue;
        memcpy(ds->names[ds->ncols], b->names[c], SL_COLNAME_MAX);
        sl_tensor *t = &ds->meta[ds->ncols];
        memset(t, 0, sizeof *t);
        if (c == ds->ic) {
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
            ds->src_col[ds->ncols] = -1;
        } else {
            t->dtype = b->col[c].dtype;
            t->ndim = b->col[c].ndim;
            memcpy(t->shape, b->col[c].shape, sizeof t->shape);
            ds->src_col[ds->ncols] = c;
        }
        ds->ncols++;
    }
    return SL_OK;
}

/* "<where>: ops[i] (decode(gpu)): <why>" for the failed item */
static void gpu_failure(sl_device_state *ds, const double *place, const char *why, char *msg,
                        size_t cap) {
    char where[400];
    uint64_t rec = (uint64_t)place[SL_GPU_PLACE_RECORD];
    if (rec < ds->p->src->count)
        sl_source__where(ds->p->src, rec, NULL, where, sizeof where);
    else
        snprintf(where, sizeof where, "%.200s: record %llu", ds->p->src_name,
                 (unsigned long long)rec);
    sl_exec__op_error(ds->p, msg, cap, where, ds->gd_pos, ds->gd_label, why);
}

/* Decode the carry's next k rows into the output's rows from `filled` on:
 * kept rows are contiguous; a failed one fails the call (on_error "fail",
 * naming its record) or is counted and dropped ("skip"). */
static int fill_take(sl_device_state *ds, int64_t k) {
    const sl_gpu_decode *g = ds->gd;
    sl_batch *b = ds->carry;
    sl_dev_backend *be = sl_dev__ring_backend(ds->ring);
    if (col_index(b, g->column) != ds->ic || b->ncols <= ds->pc || b->single != ds->single)
        return sl__error(SL_EINVAL, "decode on the GPU: host batches of different columns");
    size_t per = image_bytes(g);
    uint8_t *dev = sl_dev__slot_dev(ds->slot), *host = sl_dev__slot_host(ds->slot);
    sl_dev_gpu_item it[SL_DEV_JPEG_MAX];
    const double *place[SL_DEV_JPEG_MAX];
    int64_t row[SL_DEV_JPEG_MAX]; /* the host batch row of item j */
    int m = 0;
    for (int64_t i = ds->carry_at; i < ds->carry_at + k; i++, m++) {
        memset(&it[m], 0, sizeof it[m]);
        row_of(b, ds->ic, i, &it[m].data, &it[m].len);
        const double *v = (const double *)b->col[ds->pc].data + (size_t)i * SL_GPU_PLACE_N;
        place[m] = v;
        row[m] = i;
        it[m].width = (int)v[SL_GPU_PLACE_W];
        it[m].height = (int)v[SL_GPU_PLACE_H];
        for (int q = 0; q < 4; q++) {
            it[m].box[q] = (float)v[SL_GPU_PLACE_BOX + q];
            it[m].lim[q] = (int)v[SL_GPU_PLACE_LIM + q];
        }
        it[m].flip = v[SL_GPU_PLACE_FLIP] != 0;
    }
    uint64_t next_pos = (uint64_t)place[m - 1][SL_GPU_PLACE_POS] + 1;
    ds->carry_at += k;
    gpu_cpu_ctx cctx = {ds, it, place};
    sl_dev_gpu_batch gb = {.jpeg = ds->jpeg, .oh = g->oh, .ow = g->ow,
                           .dst = (float *)(void *)(dev + ds->img_off + (size_t)ds->filled * per),
                           .host = ds->fb_host, .cpu = gpu_cpu_fallback, .cpu_ctx = &cctx,
                           .stream = sl_dev__ring_copy_stream(ds->ring),
                           .host_cap = (int)ds->fb_cap, .hwc = g->hwc, .u8 = g->u8};
    memcpy(gb.mean, g->mean, sizeof gb.mean);
    memcpy(gb.std, g->std, sizeof gb.std);
    int on_gpu = 0, on_cpu = 0, failed = 0;
    int rc = sl_dev__gpu_decode_batch(&gb, it, m, &on_gpu, &on_cpu, &failed);
    while (rc >= 0 && failed > 0) {
        char msg[SL__ERRMSG_MAX];
        int j = 0;
        while (it[j].status != SL_DEV_GPU_FAILED)
            j++;
        if (ds->p->spec->on_error != SL_ON_ERROR_SKIP || it[j].rc == SL_ENOMEM) {
            gpu_failure(ds, place[j], it[j].why, msg, sizeof msg);
            rc = sl__error(it[j].rc, "%s", msg);
            break;
        }
        /* skip: every failed one counted, the rest decoded again in place,
         * contiguous (only batches with a bad image pay this) */
        int kept = 0;
        for (j = 0; j < m; j++) {
            if (it[j].status == SL_DEV_GPU_FAILED) {
                gpu_failure(ds, place[j], it[j].why, msg, sizeof msg);
                sl_exec__note_skip(ds->p, msg);
                continue;
            }
            it[kept] = it[j];
            place[kept] = place[j];
            row[kept] = row[j];
            kept++;
        }
        m = kept;
        on_gpu = on_cpu = failed = 0;
        if (m == 0)
            break;
        rc = sl_dev__gpu_decode_batch(&gb, it, m, &on_gpu, &on_cpu, &failed);
    }
    if (rc >= 0 && on_cpu > 0) /* fb_host's places are reused by the next decode */
        rc = be->stream_sync(be, gb.stream);
    if (rc < 0)
        return rc;
    for (int c = 0; c < b->ncols; c++) {
        if (c == ds->ic || c == ds->pc || !ds->rowb[c])
            continue;
        size_t rb = ds->rowb[c];
        size_t have = b->single ? b->col[c].nbytes
                                : (b->size ? b->col[c].nbytes / (size_t)b->size : 0);
        if (have != rb || b->ragged[c])
            return sl__error(SL_EINVAL, "decode on the GPU: column '%s' changed shape between "
                             "batches", b->names[c]);
        for (int j = 0; j < m; j++)
            memcpy(host + ds->off[c] + (size_t)(ds->filled + j) * rb,
                   (const uint8_t *)b->col[c].data + (size_t)row[j] * rb, rb);
    }
    size_t jpeg_bytes = 0; /* what nvJPEG takes across to the device */
    for (int j = 0; j < m; j++)
        if (it[j].status == SL_DEV_JPEG_OK)
            jpeg_bytes += it[j].len;
    ds->filled += m;
    ds->next_pos = next_pos;
    memcpy(ds->counters, b->counters, sizeof ds->counters);
    atomic_fetch_add(&ds->gpu_images, (uint64_t)on_gpu);
    atomic_fetch_add(&ds->cpu_images, (uint64_t)on_cpu);
    atomic_fetch_add(&ds->h2d_bytes, jpeg_bytes + (size_t)on_cpu * per);
    return SL_OK;
}

/* Hand the filled output out: the staged columns' copy, the copy event and
 * the consumer stream's wait, then a batch over the slot's memory. */
static int fill_finish(sl_device_state *ds, sl_batch **out) {
    const sl_gpu_decode *g = ds->gd;
    sl_batch *b = sl__calloc(1, sizeof *b);
    if (!b)
        return sl__oom("handing out a GPU-decoded batch");
    sl_dev_backend *be = sl_dev__ring_backend(ds->ring);
    atomic_fetch_add(&ds->staged_bytes, ds->host_total);
    atomic_fetch_add(&ds->h2d_bytes, ds->host_total);
    int rc = sl_dev__slot_submit(ds->slot, ds->host_total, NULL);
    sl_buffer *buf = NULL;
    if (rc >= 0)
        rc = sl_dev__slot_handout(ds->slot, &buf);
    if (rc < 0) {
        sl__free(b);
        fill_reset(ds);
        return rc;
    }
    size_t per = image_bytes(g);
    uint8_t *dev = sl_dev__slot_dev(ds->slot);
    b->kind = SL_CHUNK_DATA;
    b->index = ds->out_index++;
    b->epoch = ds->epoch;
    b->size = ds->filled;
    b->single = ds->single;
    b->ncols = ds->ncols;
    b->next_pos = ds->next_pos;
    memcpy(b->counters, ds->counters, sizeof b->counters);
    for (int k = 0; k < ds->ncols; k++) {
        memcpy(b->names[k], ds->names[k], SL_COLNAME_MAX);
        sl_tensor *t = &b->col[k];
        *t = ds->meta[k];
        int c = ds->src_col[k];
        if (!ds->single)
            t->shape[0] = ds->filled;
        if (c < 0) {
            t->data = dev + ds->img_off;
            t->nbytes = (size_t)ds->filled * per;
        } else {
            t->data = dev + ds->off[c];
            t->nbytes = ds->rowb[c] * (size_t)ds->filled;
        }
        t->buf = sl_buffer_retain(buf);
        sl_dev__backend_place(be, &t->device, &t->device_id);
    }
    sl_buffer_release(buf);
    ds->slot = NULL;
    ds->filled = 0;
    *out = b;
    return SL_OK;
}

int sl_device__gpu_next(sl_device_state *ds, sl_batch **out, int timeout_ms) {
    *out = NULL;
    SL_TRY(ensure_ring(ds, ds->p->plan.out_depth));
    for (;;) {
        if (ds->marker && !ds->slot) {
            *out = ds->marker;
            ds->marker = NULL;
            if ((*out)->kind == SL_CHUNK_END)
                ds->out_index = 0;
            return SL_OK;
        }
        if (!ds->carry) {
            sl_batch *hb;
            SL_TRY(sl_pipeline__pop_batch(ds->p, &hb, timeout_ms));
            if (!hb)
                return SL_OK; /* timed out: the fill goes on at the next call */
            if (hb->kind != SL_CHUNK_DATA) {
                /* the epoch's end (or an error) after a partial output: that
                 * is the epoch's last, short batch, as the CPU path's */
                ds->marker = hb;
                if (ds->slot && ds->filled > 0 && !ds->gd->drop_remainder)
                    return fill_finish(ds, out);
                fill_reset(ds);
                continue;
            }
            if (!hb->single && hb->size <= 0) {
                sl_pipeline__batch_free(hb);
                continue;
            }
            ds->carry = hb;
            ds->carry_at = 0;
        }
        if (!ds->slot)
            SL_TRY(fill_start(ds, ds->carry));
        int64_t rows = ds->carry->single ? 1 : ds->carry->size;
        int64_t k = ds->target - ds->filled;
        if (k > rows - ds->carry_at)
            k = rows - ds->carry_at;
        SL_TRY(fill_take(ds, k));
        if (ds->carry_at >= rows) {
            sl_pipeline__batch_free(ds->carry);
            ds->carry = NULL;
        }
        if (ds->filled == ds->target)
            return fill_finish(ds, out);
    }
}

int sl_device__gpu_decoding(const sl_device_state *ds) { return ds && ds->gd; }

int sl_device__gpu_setup(sl_device_state *ds, sl_pipeline *p) {
    const sl_plan *pl = &p->plan;
    if (!pl->gpu_decode)
        return SL_OK;
    int pos = 0;
    const char *label = "decode";
    for (int i = 0; i < pl->nopt; i++)
        if (pl->opt[i].params == pl->gpu_decode) {
            pos = pl->opt[i].pos;
            label = pl->opt[i].label;
        }
    if (!ds || ds->spec.kind != SL_DEV_CUDA)
        return sl__error(SL_EINVAL, "ops[%d].device \"gpu\": decoding on the GPU needs the "
                         "pipeline's \"device\": \"cuda\" (Python: .device(\"cuda\")); the "
                         "batch is written in the GPU's memory", pos);
    if (sl_dev__nvjpeg_probe() < 0)
        return sl__error_prefix(SL_EUNSUPPORTED, "ops[%d].device \"gpu\": decoding on the GPU "
                                                 "needs nvJPEG", pos);
    if (!ds->be->crop_resize)
        return sl__error(SL_EUNSUPPORTED, "ops[%d].device \"gpu\": decoding on the GPU needs "
                         "the crop/resize kernel: %s", pos, ds->be->norm_missing);
    if (ds->has_norm)
        return sl__error(SL_EINVAL, "device.normalize_on_device: decode on the GPU (ops[%d]) "
                         "normalizes on the device already; leave normalize_on_device out",
                         pos);
    if (pl->has_batch && pl->batch_size > SL_DEV_JPEG_MAX)
        return sl__error(SL_EINVAL, "ops[%d].device \"gpu\": batches of at most %d images "
                         "decode on the GPU (the batch is %lld)", pos, SL_DEV_JPEG_MAX,
                         (long long)pl->batch_size);
    ds->gd = pl->gpu_decode;
    ds->p = p;
    ds->gd_pos = pos;
    snprintf(ds->gd_label, sizeof ds->gd_label, "%s", label);
    sl_ops__norm_lut(ds->lut, 3, ds->gd->mean, ds->gd->std);
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

int sl_pipeline_set_stream(sl_pipeline *p, void *stream) {
    if (!p->dev)
        return sl__error(SL_EINVAL, "stream: the pipeline has no device (spec key \"device\")");
    p->dev->stream = stream;
    if (p->dev->ring)
        sl_dev__ring_set_stream(p->dev->ring, stream);
    return SL_OK;
}
