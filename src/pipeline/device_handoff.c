/*
 * device_handoff.c — the pipeline's hand-off to the device layer. What runs
 * on the device side (the "device" JSON, the upload, the ring, GPU decode's
 * batches and their CPU fallback) is src/device/'s (device_deliver.c); this
 * file passes finished batches across as column views (sl_dev_cols) and
 * keeps what belongs to the pipeline: taking the normalize op out of the
 * spec's ops, the decode op's place in the plan, the host batches popped
 * for GPU decode (the rows still to use, the epoch's markers, the output's
 * index and resume point), the on_error policy and the messages that name a
 * failed image's record.
 */
#include "pipeline/pipeline.h"
#include "pipeline/exec.h"

#include <stdio.h>
#include <string.h>

struct sl_pipeline__dev {
    sl_dev_out *out;              /* the device's side */
    /* decode on the GPU (sl_pipeline__dev_gpu_setup; used on the consumer thread) */
    const sl_gpu_decode *gd;      /* the plan's gpu_decode_place params, or NULL */
    int gd_pos;                   /* the decode op's spec position (messages) */
    char gd_label[96];
    sl_batch *carry;              /* host batch whose rows [carry_at, size) come next */
    int64_t carry_at;
    sl_batch *marker;             /* END/ERROR met while filling: after the short batch */
    int ic, pc;                   /* the output's host columns: images, placements */
    /* the output's text columns, by name: they stay on the host */
    char text[SL_MAX_COLUMNS][SL_COLNAME_MAX];
    int ntext;
    uint64_t epoch, out_index, next_pos;
    int64_t counters[SL_MAX_COUNTERS];
};

/* The batch's columns as the device layer takes them. */
static sl_dev_cols cols_of(const sl_pipeline__dev *d, sl_batch *b) {
    sl_dev_cols c = {.ncols = b->ncols, .single = b->single, .size = b->size,
                     .names = b->names, .col = b->col, .ragged = b->ragged};
    for (int k = 0; k < b->ncols && k < 32; k++)
        for (int t = 0; t < d->ntext; t++)
            if (!strcmp(b->names[k], d->text[t]))
                c.text |= 1u << k;
    return c;
}

int sl_pipeline__dev_open(sl_pipeline__dev **out, sl_spec *spec) {
    *out = NULL;
    for (int i = 0; i < spec->nops; i++) {
        int gpu = 0;
        if (spec->ops[i].kind == SL_SPEC_OP_JSON)
            SL_TRY(sl_dev__decode_placement(spec->ops[i].json, i, &gpu));
        /* before the source is opened: say at once what the machine lacks */
        if (gpu && sl_dev__nvjpeg_probe() < 0)
            return sl__error_prefix(SL_EUNSUPPORTED, "ops[%d].device \"gpu\": decoding on "
                                                     "the GPU needs nvJPEG", i);
    }
    if (spec->device.kind == SL_DEV_NONE)
        return SL_OK;
    sl_pipeline__dev *d = sl__calloc(1, sizeof *d);
    if (!d)
        return sl__oom("opening the device");
    int rc;
    SL_CHECK(sl_dev__out_open(&d->out, &spec->device));
    if (spec->device.normalize) {
        size_t n = spec->nops > 0 ? (size_t)spec->nops : 1;
        const cJSON **ops = sl__calloc(n, sizeof *ops);
        const char **names = sl__calloc(n, sizeof *names);
        int at = -1;
        rc = ops && names ? SL_OK : sl__oom("opening the device");
        for (int i = 0; rc >= 0 && i < spec->nops; i++) {
            ops[i] = spec->ops[i].kind == SL_SPEC_OP_JSON ? spec->ops[i].json : NULL;
            names[i] = spec->ops[i].name;
        }
        if (rc >= 0)
            rc = sl_dev__out_take_norm(d->out, ops, names, spec->nops, &at);
        sl__free(ops);
        sl__free(names);
        if (rc < 0)
            goto cleanup;
        /* the device runs it: out of the pipeline's own copy of the spec */
        cJSON_Delete(spec->ops[at].json);
        memmove(&spec->ops[at], &spec->ops[at + 1],
                (size_t)(spec->nops - at - 1) * sizeof *spec->ops);
        spec->nops--;
    }
    *out = d;
    return SL_OK;
cleanup:
    sl_pipeline__dev_close(d);
    return rc;
}

void sl_pipeline__dev_close(sl_pipeline__dev *d) {
    if (!d)
        return;
    sl_pipeline__dev_gpu_reset(d, 0);
    sl_dev__out_close(d->out);
    sl__free(d);
}

int sl_pipeline__dev_slots(const sl_pipeline__dev *d, int depth) {
    return d ? sl_dev__out_slots(d->out, depth) : 0;
}

int sl_pipeline__dev_batch_mem(sl_pipeline__dev *d, sl_pool_mem *out) {
    return d ? sl_dev__out_batch_mem(d->out, out) : 0;
}

void sl_pipeline__dev_counters(const sl_pipeline__dev *d, sl_dev_counters *out) {
    sl_dev__out_counters(d ? d->out : NULL, out);
}

int sl_pipeline__dev_upload(sl_pipeline__dev *d, sl_batch *b, int depth) {
    sl_dev_cols c = cols_of(d, b);
    return sl_dev__out_upload(d->out, &c, depth);
}

int sl_pipeline_set_stream(sl_pipeline *p, void *stream) {
    if (!p->dev)
        return sl__error(SL_EINVAL, "stream: the pipeline has no device (spec key \"device\")");
    sl_dev__out_set_stream(p->dev->out, stream);
    return SL_OK;
}

int sl_spec_set_device(sl_spec *spec, sl_device device, int id, int normalize_on_device) {
    return sl_dev__spec_from((int)device, id, normalize_on_device, &spec->device);
}

/* ---- decode on the GPU ------------------------------------------------------------------
 * Host batches arrive with the image column still encoded and the
 * placements column the CPU workers drew (gpu_decode_place). The rows are
 * taken in order (the host batch being used is the carry) and handed to the
 * device's fill (sl_dev__gpu_fill_*), which decodes them into the output
 * batch; a sample the CPU path fails on too is this side's to judge:
 * on_error "fail" fails the call naming its record, "skip" counts it and
 * the output is refilled from the next rows, so the batches hold the same
 * samples as the CPU path's (an epoch's end hands out the last, short one,
 * unless drop_remainder). */

int sl_pipeline__dev_gpu(const sl_pipeline__dev *d) { return d && d->gd; }

int sl_pipeline__dev_gpu_setup(sl_pipeline *p) {
    const sl_plan *pl = &p->plan;
    sl_pipeline__dev *d = p->dev;
    if (d) { /* the plan is made: which output columns are text */
        d->ntext = 0;
        for (int c = 0; c < pl->out_cols.ncols; c++)
            if (pl->out_cols.col[c].text)
                memcpy(d->text[d->ntext++], pl->out_cols.col[c].name, SL_COLNAME_MAX);
    }
    if (!pl->handoff)
        return SL_OK;
    const sl_gpu_decode *g = pl->handoff; /* the only hand-off rewrite: decode on the GPU */
    sl_dev_gpu_spec s = {.pos = 0, .warnings = g->warnings, .oh = g->oh, .ow = g->ow,
                         .hwc = g->hwc, .u8 = g->u8,
                         .batch = pl->has_batch ? pl->batch_size : 0};
    const char *label = "decode";
    for (int i = 0; i < pl->nopt; i++)
        if (pl->opt[i].params == pl->handoff) {
            s.pos = pl->opt[i].pos;
            label = pl->opt[i].label;
        }
    memcpy(s.mean, g->mean, sizeof s.mean);
    memcpy(s.std, g->std, sizeof s.std);
    SL_TRY(sl_dev__gpu_begin(d ? d->out : NULL, &s));
    d->gd = g;
    d->gd_pos = s.pos;
    snprintf(d->gd_label, sizeof d->gd_label, "%s", label);
    return SL_OK;
}

void sl_pipeline__dev_gpu_reset(sl_pipeline__dev *d, uint64_t batch) {
    if (!d || !d->gd)
        return;
    sl_dev__gpu_fill_reset(d->out);
    sl_pipeline__batch_free(d->carry);
    sl_pipeline__batch_free(d->marker);
    d->carry = d->marker = NULL;
    d->carry_at = 0;
    d->out_index = batch;
}

static int col_index(const sl_batch *b, const char *name) {
    for (int c = 0; c < b->ncols; c++)
        if (!strcmp(b->names[c], name))
            return c;
    return -1;
}

/* The placements row of a host row. */
static const double *place_of(const sl_pipeline__dev *d, const sl_batch *b, int64_t row) {
    return (const double *)b->col[d->pc].data + (size_t)row * SL_GPU_PLACE_N;
}

typedef struct failed_ctx {
    sl_pipeline *p;
    const sl_batch *b;
} failed_ctx;

/* A sample the GPU and the CPU path both failed on: "<where>: ops[i]
 * (decode(gpu)): <why>"; the call fails (on_error "fail", or out of memory)
 * or the sample is counted as skipped and dropped. */
static int gpu_failed(void *ctx, const sl_dev_gpu_item *it) {
    failed_ctx *f = ctx;
    sl_pipeline *p = f->p;
    sl_pipeline__dev *d = p->dev;
    char where[400], msg[SL__ERRMSG_MAX];
    uint64_t rec = (uint64_t)place_of(d, f->b, it->row)[SL_GPU_PLACE_RECORD];
    if (rec < p->src->count)
        sl_source__where(p->src, rec, NULL, where, sizeof where);
    else
        snprintf(where, sizeof where, "%.200s: record %llu", p->src_name,
                 (unsigned long long)rec);
    sl_exec__op_error(p, msg, sizeof msg, where, d->gd_pos, d->gd_label, it->why);
    if (p->spec->on_error != SL_ON_ERROR_SKIP || it->rc == SL_ENOMEM)
        return sl__error(it->rc, "%s", msg);
    sl_exec__note_skip(p, msg);
    return SL_OK;
}

/* The carry's next k rows into the output. */
static int fill_take(sl_pipeline *p, int64_t k) {
    sl_pipeline__dev *d = p->dev;
    sl_batch *b = d->carry;
    if (col_index(b, d->gd->column) != d->ic || b->ncols <= d->pc)
        return sl__error(SL_EINVAL, "decode on the GPU: host batches of different columns");
    sl_dev_gpu_item it[SL_DEV_JPEG_MAX];
    int m = 0;
    for (int64_t i = d->carry_at; i < d->carry_at + k; i++, m++) {
        memset(&it[m], 0, sizeof it[m]);
        sl_dev_gpu_item *t = &it[m];
        if (b->ragged[d->ic]) {
            t->data = b->items[d->ic][i].data;
            t->len = b->items[d->ic][i].nbytes;
        } else if (b->single || b->size <= 0) {
            t->data = b->col[d->ic].data;
            t->len = b->col[d->ic].nbytes;
        } else {
            t->len = b->col[d->ic].nbytes / (size_t)b->size;
            t->data = (const uint8_t *)b->col[d->ic].data + (size_t)i * t->len;
        }
        const double *v = place_of(d, b, i);
        t->row = i;
        t->width = (int)v[SL_GPU_PLACE_W];
        t->height = (int)v[SL_GPU_PLACE_H];
        for (int q = 0; q < 4; q++) {
            t->box[q] = (float)v[SL_GPU_PLACE_BOX + q];
            t->box_drawn[q] = v[SL_GPU_PLACE_BOX + q];
            t->lim[q] = (int)v[SL_GPU_PLACE_LIM + q];
        }
        t->flip = v[SL_GPU_PLACE_FLIP] != 0;
    }
    uint64_t next_pos = (uint64_t)place_of(d, b, d->carry_at + k - 1)[SL_GPU_PLACE_POS] + 1;
    d->carry_at += k;
    sl_dev_cols c = cols_of(d, b);
    failed_ctx f = {p, b};
    SL_TRY(sl_dev__gpu_fill_take(d->out, &c, it, m, gpu_failed, &f));
    d->next_pos = next_pos;
    memcpy(d->counters, b->counters, sizeof d->counters);
    return SL_OK;
}

/* Hand the filled output out as a batch. */
static int fill_finish(sl_pipeline__dev *d, sl_batch **out) {
    sl_batch *b = sl__calloc(1, sizeof *b);
    if (!b)
        return sl__oom("handing out a GPU-decoded batch");
    sl_dev_cols c = cols_of(d, b);
    int rc = sl_dev__gpu_fill_finish(d->out, &c);
    if (rc < 0) {
        sl__free(b);
        return rc;
    }
    b->kind = SL_CHUNK_DATA;
    b->index = d->out_index++;
    b->epoch = d->epoch;
    b->size = c.size;
    b->single = c.single;
    b->ncols = c.ncols;
    b->next_pos = d->next_pos;
    memcpy(b->counters, d->counters, sizeof b->counters);
    *out = b;
    return SL_OK;
}

/* The output's layout from host batch `b`, and a ring slot for it. */
static int fill_start(sl_pipeline *p, const sl_batch *b) {
    sl_pipeline__dev *d = p->dev;
    char pname[SL_COLNAME_MAX + 16];
    snprintf(pname, sizeof pname, "%s.gpu_place", d->gd->column);
    d->ic = col_index(b, d->gd->column);
    d->pc = col_index(b, pname);
    if (d->ic < 0 || d->pc < 0 || b->ragged[d->pc] || b->col[d->pc].dtype != SL_F64)
        return sl__error(SL_EINVAL, "decode on the GPU: the batch lacks column '%s' or its "
                         "placements", d->gd->column);
    sl_dev_cols c = cols_of(d, (sl_batch *)b);
    SL_TRY(sl_dev__gpu_fill_start(d->out, &c, d->ic, d->pc));
    d->epoch = b->epoch;
    return SL_OK;
}

int sl_pipeline__dev_gpu_next(sl_pipeline *p, sl_batch **out, int timeout_ms) {
    sl_pipeline__dev *d = p->dev;
    *out = NULL;
    SL_TRY(sl_dev__out_ring(d->out, p->plan.out_depth));
    for (;;) {
        if (d->marker && !sl_dev__gpu_filling(d->out)) {
            *out = d->marker;
            d->marker = NULL;
            if ((*out)->kind == SL_CHUNK_END)
                d->out_index = 0;
            return SL_OK;
        }
        if (!d->carry) {
            sl_batch *hb;
            SL_TRY(sl_pipeline__pop_batch(p, &hb, timeout_ms));
            if (!hb)
                return SL_OK; /* timed out: the fill goes on at the next call */
            if (hb->kind != SL_CHUNK_DATA) {
                /* the epoch's end (or an error) after a partial output: that
                 * is the epoch's last, short batch, as the CPU path's */
                d->marker = hb;
                if (sl_dev__gpu_filling(d->out) && sl_dev__gpu_filled(d->out) > 0 &&
                    !d->gd->drop_remainder)
                    return fill_finish(d, out);
                sl_dev__gpu_fill_reset(d->out);
                continue;
            }
            if (!hb->single && hb->size <= 0) {
                sl_pipeline__batch_free(hb);
                continue;
            }
            d->carry = hb;
            d->carry_at = 0;
        }
        if (!sl_dev__gpu_filling(d->out))
            SL_TRY(fill_start(p, d->carry));
        int64_t rows = d->carry->single ? 1 : d->carry->size;
        int64_t k = sl_dev__gpu_target(d->out) - sl_dev__gpu_filled(d->out);
        if (k > rows - d->carry_at)
            k = rows - d->carry_at;
        SL_TRY(fill_take(p, k));
        if (d->carry_at >= rows) {
            sl_pipeline__batch_free(d->carry);
            d->carry = NULL;
        }
        if (sl_dev__gpu_filled(d->out) == sl_dev__gpu_target(d->out))
            return fill_finish(d, out);
    }
}
