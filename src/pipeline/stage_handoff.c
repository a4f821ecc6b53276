/*
 * stage_handoff.c — the hand-off stage: the consumer's end of the pipeline.
 * It runs no thread of its own: on the consumer's thread it takes the next
 * element of the last stage's queue as a batch (the collation's take) and,
 * when the pipeline has a device, hands the batch to the device layer. What
 * runs on the device side (the "device" JSON, the upload, the ring, GPU
 * decode's batches and their CPU fallback) is src/device/'s
 * (device_deliver.c); this file passes finished batches across as column
 * views (sl_dev_cols) and keeps what belongs to the pipeline: taking the
 * normalize op out of the spec's ops, the decode op's place in the plan,
 * the host batches popped for GPU decode (the rows still to use, the
 * epoch's markers, the output's index and resume point), the on_error
 * policy and the messages that name a failed image's record.
 */
#include "pipeline/stage.h"

#include <stdio.h>
#include <string.h>

/* The stage's `self`. */
typedef struct handoff {
    uint64_t next_index;          /* batches the consumer numbers (direct): the
                                     next one's index in the epoch */
    sl_dev_out *out;              /* the device's side; NULL: no device */
    /* decode on the GPU (sl_stage_handoff__plan; used on the consumer thread) */
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
} handoff;

/* The batch's columns as the device layer takes them. */
static sl_dev_cols cols_of(const handoff *d, sl_batch *b) {
    sl_dev_cols c = {.ncols = b->ncols, .single = b->single, .size = b->size,
                     .names = b->names, .col = b->col, .ragged = b->ragged};
    for (int k = 0; k < b->ncols && k < 32; k++)
        for (int t = 0; t < d->ntext; t++)
            if (!strcmp(b->names[k], d->text[t]))
                c.text |= 1u << k;
    return c;
}

int sl_stage_handoff__open(sl_stage *st, sl_spec *spec) {
    for (int i = 0; i < spec->nops; i++) {
        int gpu = 0;
        if (spec->ops[i].kind == SL_SPEC_OP_JSON)
            SL_TRY(sl_dev__decode_placement(spec->ops[i].json, i, &gpu));
        /* before the source is opened: say at once what the machine lacks */
        if (gpu && sl_dev__nvjpeg_probe() < 0)
            return sl__error_prefix(SL_EUNSUPPORTED, "ops[%d].device \"gpu\": decoding on "
                                                     "the GPU needs nvJPEG", i);
    }
    handoff *d = sl__calloc(1, sizeof *d);
    if (!d)
        return sl__oom("opening the device");
    st->kind = &sl_stage_handoff;
    st->self = d;
    snprintf(st->name, sizeof st->name, "handoff");
    if (spec->device.kind == SL_DEV_NONE)
        return SL_OK;
    SL_TRY(sl_dev__out_open(&d->out, &spec->device));
    if (spec->device.normalize) {
        size_t n = spec->nops > 0 ? (size_t)spec->nops : 1;
        const cJSON **ops = sl__calloc(n, sizeof *ops);
        const char **names = sl__calloc(n, sizeof *names);
        int at = -1;
        int rc = ops && names ? SL_OK : sl__oom("opening the device");
        for (int i = 0; rc >= 0 && i < spec->nops; i++) {
            ops[i] = spec->ops[i].kind == SL_SPEC_OP_JSON ? spec->ops[i].json : NULL;
            names[i] = spec->ops[i].name;
        }
        if (rc >= 0)
            rc = sl_dev__out_take_norm(d->out, ops, names, spec->nops, &at);
        sl__free(ops);
        sl__free(names);
        if (rc < 0)
            return rc;
        /* the device runs it: out of the pipeline's own copy of the spec */
        cJSON_Delete(spec->ops[at].json);
        memmove(&spec->ops[at], &spec->ops[at + 1],
                (size_t)(spec->nops - at - 1) * sizeof *spec->ops);
        spec->nops--;
    }
    return SL_OK;
}

static void gpu_reset(handoff *d, uint64_t batch);

void sl_stage_handoff__close(sl_stage *st) {
    handoff *d = st->self;
    if (!d)
        return;
    gpu_reset(d, 0);
    sl_dev__out_close(d->out);
    sl__free(d);
    st->self = NULL;
}

int sl_stage_handoff__slots(const sl_stage *st, int depth) {
    const handoff *d = st->self;
    return d && d->out ? sl_dev__out_slots(d->out, depth) : 0;
}

int sl_stage_handoff__batch_mem(const sl_stage *st, sl_pool_mem *out) {
    const handoff *d = st->self;
    return d && d->out ? sl_dev__out_batch_mem(d->out, out) : 0;
}

void sl_stage_handoff__counters(const sl_stage *st, sl_dev_counters *out) {
    const handoff *d = st->self;
    sl_dev__out_counters(d ? d->out : NULL, out);
}

int sl_spec_set_device(sl_spec *spec, sl_device device, int id, int normalize_on_device) {
    return sl_dev__spec_from((int)device, id, normalize_on_device, &spec->device);
}

int sl_stage_handoff__set_stream(sl_stage *st, void *stream) {
    handoff *d = st->self;
    if (!d || !d->out)
        return sl__error(SL_EINVAL, "stream: the pipeline has no device (spec key \"device\")");
    sl_dev__out_set_stream(d->out, stream);
    return SL_OK;
}

/* ---- batches out of the last queue ---------------------------------------------------- */

/* The next element of the last stage's queue as a batch, data or a marker:
 * SL_OK with *out, or with *out NULL on timeout; < 0 when the pipeline
 * failed or stopped (message set). The wait is the consumer's. */
static int pop_batch(sl_stage *st, sl_batch **out, int timeout_ms) {
    handoff *d = st->self;
    const sl_collation *C = st->env->layout->collation;
    *out = NULL;
    for (;;) {
        void *item;
        uint64_t wait = 0;
        int rc = sl_queue__pop(st->in, &item, &wait, timeout_ms);
        atomic_fetch_add(&st->wait_in_ns, wait);
        if (rc == SL_END)
            return SL_OK; /* timed out */
        if (rc < 0)
            return sl__error(SL_ECANCELED, "pipeline: stopped");
        SL_TRY(C->take(st->env, item, &d->next_index, out));
        if (*out)
            return SL_OK;
        /* drop_remainder: nothing to hand out */
    }
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

int sl_stage_handoff__plan(sl_stage *st, const sl_plan *pl) {
    handoff *d = st->self;
    if (d->out) { /* the plan is made: which output columns are text */
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
    SL_TRY(sl_dev__gpu_begin(d->out, &s));
    d->gd = g;
    d->gd_pos = s.pos;
    snprintf(d->gd_label, sizeof d->gd_label, "%s", label);
    return SL_OK;
}

/* Forget rows and the output in progress (the stream restarts; `batch`:
 * the index of the next output batch in its epoch). */
static void gpu_reset(handoff *d, uint64_t batch) {
    if (!d->gd)
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
static const double *place_of(const handoff *d, const sl_batch *b, int64_t row) {
    return (const double *)b->col[d->pc].data + (size_t)row * SL_GPU_PLACE_N;
}

typedef struct failed_ctx {
    const sl_stage *st;
    const sl_batch *b;
} failed_ctx;

/* A sample the GPU and the CPU path both failed on: "<where>: ops[i]
 * (decode(gpu)): <why>"; the call fails (on_error "fail", or out of memory)
 * or the sample is counted as skipped and dropped. */
static int gpu_failed(void *ctx, const sl_dev_gpu_item *it) {
    failed_ctx *f = ctx;
    const sl_stage_env *e = f->st->env;
    const handoff *d = f->st->self;
    char where[400], msg[SL__ERRMSG_MAX];
    uint64_t rec = (uint64_t)place_of(d, f->b, it->row)[SL_GPU_PLACE_RECORD];
    if (rec < e->src->count)
        sl_source__where(e->src, rec, NULL, where, sizeof where);
    else
        snprintf(where, sizeof where, "%.200s: record %llu", e->src_name,
                 (unsigned long long)rec);
    sl_stage__op_error(e, msg, sizeof msg, where, d->gd_pos, d->gd_label, it->why);
    if (e->on_error != SL_ON_ERROR_SKIP || it->rc == SL_ENOMEM)
        return sl__error(it->rc, "%s", msg);
    sl_stage__note_skip(e->err, msg);
    return SL_OK;
}

/* The carry's next k rows into the output. */
static int fill_take(sl_stage *st, int64_t k) {
    handoff *d = st->self;
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
    failed_ctx f = {st, b};
    SL_TRY(sl_dev__gpu_fill_take(d->out, &c, it, m, gpu_failed, &f));
    d->next_pos = next_pos;
    memcpy(d->counters, b->counters, sizeof d->counters);
    return SL_OK;
}

/* Hand the filled output out as a batch. */
static int fill_finish(handoff *d, sl_batch **out) {
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
static int fill_start(handoff *d, const sl_batch *b) {
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

/* The next batch when decoding on the GPU: the host batches' rows decoded
 * into device batches of the batch size, refilled past skipped samples as
 * the CPU path's are; markers (epoch end, error) as they come. */
static int gpu_next(sl_stage *st, sl_batch **out, int timeout_ms) {
    handoff *d = st->self;
    *out = NULL;
    SL_TRY(sl_dev__out_ring(d->out, st->env->plan->out_depth));
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
            SL_TRY(pop_batch(st, &hb, timeout_ms));
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
            SL_TRY(fill_start(d, d->carry));
        int64_t rows = d->carry->single ? 1 : d->carry->size;
        int64_t k = sl_dev__gpu_target(d->out) - sl_dev__gpu_filled(d->out);
        if (k > rows - d->carry_at)
            k = rows - d->carry_at;
        SL_TRY(fill_take(st, k));
        if (d->carry_at >= rows) {
            sl_pipeline__batch_free(d->carry);
            d->carry = NULL;
        }
        if (sl_dev__gpu_filled(d->out) == sl_dev__gpu_target(d->out))
            return fill_finish(d, out);
    }
}

/* ---- the consumer's calls, and the stage's table ---------------------------------------- */

int sl_stage_handoff__next(sl_stage *st, sl_batch **out, int timeout_ms) {
    const handoff *d = st->self;
    return d->gd ? gpu_next(st, out, timeout_ms) : pop_batch(st, out, timeout_ms);
}

int sl_stage_handoff__deliver(sl_stage *st, sl_batch *b) {
    handoff *d = st->self;
    if (!d->out || d->gd)
        return SL_OK; /* no device, or the batch is on it already */
    sl_dev_cols c = cols_of(d, b);
    return sl_dev__out_upload(d->out, &c, st->env->plan->out_depth);
}

/* Restore: number the batches from the position's. */
static int handoff_start(sl_stage *st, const sl_resume *at) {
    handoff *d = st->self;
    d->next_index = at->batch;
    gpu_reset(d, at->batch); /* decode on the GPU: rows of the old stream */
    return SL_OK;
}

static const char *handoff_explain(const sl_stage *st) {
    const handoff *d = st->self;
    if (d->gd)
        return "decodes the images of host batches on the GPU, into device batches";
    return d->out ? "copies each batch to the device" : NULL;
}

const sl_stage_kind sl_stage_handoff = {
    .key = "handoff", .start = handoff_start, .explain = handoff_explain,
};
