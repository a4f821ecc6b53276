/* test_op_kernel.c — ops run through the op table alone (no pipeline): the
 * context's allocator is the only place their outputs come from (and its
 * failure is theirs), and an op's one kernel gives the same bytes per
 * sample (sl_op_apply) and over a stacked batch (sl_op_apply_batch), kept
 * samples included. */
#include "core/core.h"
#include "ops/op.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS 9 /* samples */
#define H 5
#define W 6
#define C 3

/* The test's allocator: the heap, counted, failing when told. */
typedef struct {
    int calls;
    int fail;
} heap;

static int heap_alloc(void *ctx, sl_tensor *t, sl_dtype dtype, int ndim, const int64_t *shape) {
    heap *h = ctx;
    h->calls++;
    if (h->fail)
        return sl__error(SL_ENOMEM, "test allocator: out of memory");
    return sl_tensor_alloc(t, dtype, ndim, shape);
}

static int heap_batch_alloc(void *ctx, sl_tensor *t, sl_dtype dtype, int ndim,
                            const int64_t *shape, int64_t rows) {
    (void)rows;
    return heap_alloc(ctx, t, dtype, ndim, shape);
}

/* An op parsed from `json` and bound to columns image (uint8 HWC, fixed
 * shape) and label (int64 scalar). */
typedef struct {
    const sl_op_def *def;
    void *params;
    sl_colset cols;
} bound_op;

static void bind(bound_op *b, const char *json) {
    cJSON *j = cJSON_Parse(json);
    ASSERT(j != NULL);
    b->def = sl_op_lookup(cJSON_GetObjectItemCaseSensitive(j, "op")->valuestring);
    ASSERT(b->def != NULL);
    b->params = calloc(1, b->def->params_size);
    memset(&b->cols, 0, sizeof b->cols);
    b->cols.ncols = 2;
    snprintf(b->cols.col[0].name, SL_COLNAME_MAX, "image");
    b->cols.col[0].dtype = SL_U8;
    b->cols.col[0].ndim = 3;
    b->cols.col[0].shape[0] = H;
    b->cols.col[0].shape[1] = W;
    b->cols.col[0].shape[2] = C;
    snprintf(b->cols.col[1].name, SL_COLNAME_MAX, "label");
    b->cols.col[1].dtype = SL_I64;
    b->cols.col[1].ndim = 0;
    ASSERT_OK(b->def->parse(b->params, j, "ops[1]"));
    sl_colset in = b->cols;
    ASSERT_OK(b->def->bind(b->params, &b->cols, "ops[1]"));
    ASSERT(sl_op_can_batch(b->def, b->params, &in));
    cJSON_Delete(j);
}

static void unbind(bound_op *b) {
    if (b->def->params_free)
        b->def->params_free(b->params);
    free(b->params);
}

static uint8_t pixels[NS][H * W * C];
static int64_t labels[NS];

/* Sample i: its own image and label, as borrowed views. */
static void sample_of(int i, sl_sample *s) {
    memset(s, 0, sizeof *s);
    for (int k = 0; k < H * W * C; k++)
        pixels[i][k] = (uint8_t)(k * 7 + i * 31);
    labels[i] = i % 4;
    int64_t shape[3] = {H, W, C};
    sl_tensor_view(&s->col[0], pixels[i], SL_U8, 3, shape);
    sl_tensor_view(&s->col[1], &labels[i], SL_I64, 0, NULL);
    s->ncols = 2;
    s->index = (uint64_t)i;
}

static void ctx_of(sl_op_ctx *ctx, heap *h, uint64_t key) {
    memset(ctx, 0, sizeof *ctx);
    ctx->seed = 77;
    ctx->epoch = 2;
    ctx->key = key;
    ctx->nparts = 1;
    ctx->pos[0] = 1;
    ctx->alloc = heap_alloc;
    ctx->alloc_ctx = h;
}

/* The batch of all NS samples' columns, stacked. */
static void stack(sl_tensor col[2]) {
    int64_t is[4] = {NS, H, W, C}, ls[1] = {NS};
    ASSERT_OK(sl_tensor_alloc(&col[0], SL_U8, 4, is));
    ASSERT_OK(sl_tensor_alloc(&col[1], SL_I64, 1, ls));
    for (int i = 0; i < NS; i++) {
        sl_sample s;
        sample_of(i, &s);
        memcpy((uint8_t *)col[0].data + (size_t)i * H * W * C, pixels[i], H * W * C);
        ((int64_t *)col[1].data)[i] = labels[i];
    }
}

/* Per sample then per batch: byte-identical; returns how many samples the
 * per-sample run left unchanged (the same tensor data). */
static int check_batch_equals_samples(const char *json, int col) {
    bound_op b;
    bind(&b, json);
    heap h = {0};
    uint64_t keys[NS];
    for (int i = 0; i < NS; i++)
        keys[i] = (uint64_t)i * 13 + 5;
    sl_tensor col_b[2];
    stack(col_b);
    const void *before = col_b[col].data;
    sl_op_bctx bctx;
    memset(&bctx, 0, sizeof bctx);
    bctx.seed = 77;
    bctx.epoch = 2;
    bctx.n = NS;
    bctx.key = keys;
    bctx.nparts = 1;
    bctx.pos[0] = 1;
    bctx.alloc = heap_batch_alloc;
    bctx.alloc_ctx = &h;
    bctx.rows = NS;
    ASSERT_OK(sl_op_apply_batch(b.def, b.params, NULL, &bctx, col_b));
    int kept = 0;
    size_t row = col_b[col].nbytes / NS;
    for (int i = 0; i < NS; i++) {
        sl_sample s;
        sl_op_ctx ctx;
        sample_of(i, &s);
        const void *in = s.col[col].data;
        ctx_of(&ctx, &h, keys[i]);
        ASSERT_OK(sl_op_apply(b.def, b.params, NULL, &ctx, &s));
        kept += s.col[col].data == in;
        ASSERT_EQ(s.col[col].nbytes, row);
        ASSERT_EQ(s.col[col].dtype, col_b[col].dtype);
        ASSERT(memcmp(s.col[col].data, (const uint8_t *)col_b[col].data + (size_t)i * row,
                      row) == 0);
        sl_sample_clear(&s);
    }
    if (kept == NS) /* every sample kept: the batch column is kept too */
        ASSERT(col_b[col].data == before);
    sl_tensor_release(&col_b[0]);
    sl_tensor_release(&col_b[1]);
    unbind(&b);
    return kept;
}

SL_TEST(ops_kernel__batch_equals_per_sample) {
    /* flip at p 0.5: some samples kept, some mirrored, from the same draws */
    int kept = check_batch_equals_samples("{\"op\": \"flip\", \"p\": 0.5}", 0);
    ASSERT(kept > 0 && kept < NS);
    ASSERT_EQ(check_batch_equals_samples("{\"op\": \"flip\", \"p\": 0}", 0), NS);
    ASSERT_EQ(check_batch_equals_samples("{\"op\": \"flip\", \"p\": 1}", 0), 0);
    ASSERT_EQ(check_batch_equals_samples("{\"op\": \"normalize\", \"mean\": [0.4, 0.5, 0.6], "
                                         "\"std\": [0.2, 0.3, 0.1]}", 0), 0);
    ASSERT_EQ(check_batch_equals_samples("{\"op\": \"normalize\", \"layout\": \"hwc\", "
                                         "\"dtype\": \"bfloat16\"}", 0), 0);
    ASSERT_EQ(check_batch_equals_samples("{\"op\": \"cast\", \"column\": \"image\", "
                                         "\"dtype\": \"float32\"}", 0), 0);
    ASSERT_EQ(check_batch_equals_samples("{\"op\": \"cast\", \"column\": \"label\", "
                                         "\"dtype\": \"int64\"}", 1), NS);
    ASSERT_EQ(check_batch_equals_samples("{\"op\": \"one_hot\", \"classes\": 6, "
                                         "\"dtype\": \"uint8\"}", 1), 0);
}

/* Outputs come from the context's allocator only; its failure is the op's,
 * and leaves the sample (and the batch) as they were. */
SL_TEST(ops_kernel__outputs_come_from_the_context_allocator) {
    static const char *const ops[] = {
        "{\"op\": \"flip\", \"p\": 1}",
        "{\"op\": \"normalize\"}",
        "{\"op\": \"cast\", \"column\": \"image\", \"dtype\": \"int16\"}",
        "{\"op\": \"one_hot\", \"classes\": 4}",
        "{\"op\": \"rotate\", \"degrees\": 30}",
        "{\"op\": \"resize\", \"size\": [3, 4]}",
    };
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        bound_op b;
        cJSON *j = cJSON_Parse(ops[k]);
        b.def = sl_op_lookup(cJSON_GetObjectItemCaseSensitive(j, "op")->valuestring);
        ASSERT(b.def != NULL);
        b.params = calloc(1, b.def->params_size);
        sl_colset cols = {0};
        cols.ncols = 2;
        snprintf(cols.col[0].name, SL_COLNAME_MAX, "image");
        cols.col[0].dtype = SL_U8;
        cols.col[0].ndim = 3;
        cols.col[0].shape[0] = H;
        cols.col[0].shape[1] = W;
        cols.col[0].shape[2] = C;
        snprintf(cols.col[1].name, SL_COLNAME_MAX, "label");
        cols.col[1].dtype = SL_I64;
        ASSERT_OK(b.def->parse(b.params, j, "ops[1]"));
        sl_colset cols_in = cols;
        ASSERT_OK(b.def->bind(b.params, &cols, "ops[1]"));
        cJSON_Delete(j);
        int col = k == 3 ? 1 : 0;
        /* rotate and resize run per sample only, as before they had a kernel */
        ASSERT_EQ(sl_op_can_batch(b.def, b.params, &cols_in), k < 4);
        for (int fail = 0; fail < 2; fail++) {
            heap h = {0, fail};
            sl_sample s;
            sl_op_ctx ctx;
            sample_of(1, &s);
            ctx_of(&ctx, &h, 3);
            const void *in = s.col[col].data;
            int rc = sl_op_apply(b.def, b.params, NULL, &ctx, &s);
            ASSERT_EQ(h.calls, 1);
            if (fail) {
                ASSERT_EQ(rc, SL_ENOMEM);
                ASSERT_CONTAINS(sl_errmsg(), "test allocator");
                ASSERT(s.col[col].data == in);
            } else {
                ASSERT_OK(rc);
                ASSERT(s.col[col].data != in);
            }
            sl_sample_clear(&s);
        }
        if (b.def->kernel && b.def->kernel->batches) {
            heap h = {0, 1};
            uint64_t keys[NS] = {0};
            sl_tensor colb[2];
            stack(colb);
            const void *before = colb[col].data;
            sl_op_bctx bctx = {.seed = 77, .epoch = 2, .n = NS, .key = keys, .nparts = 1,
                               .alloc = heap_batch_alloc, .alloc_ctx = &h, .rows = NS};
            ASSERT_RC(sl_op_apply_batch(b.def, b.params, NULL, &bctx, colb), SL_ENOMEM);
            ASSERT_EQ(h.calls, 1);
            ASSERT(colb[col].data == before);
            sl_tensor_release(&colb[0]);
            sl_tensor_release(&colb[1]);
        }
        if (b.def->params_free)
            b.def->params_free(b.params);
        free(b.params);
    }
}
