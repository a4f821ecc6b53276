/*
 * image_ops.c — the image ops of src/ops/ as pipeline ops, by JSON name:
 *   decode, random_resized_crop, flip, normalize, resize, center_crop,
 *   rotate, cast, one_hot
 * and the fusions the optimiser asks for:
 *   decode + random_resized_crop  -> decode_random_resized_crop: only the
 *       box's region is decoded, at the smallest fast DCT scale, then resized
 *       straight to the output (the box is drawn from the random_resized_crop
 *       position's generator, so it equals the unfused op's box);
 *   decode + resize (+ center_crop) -> decode_resize[_center_crop]: the
 *       centre crop is mapped back to a box in the original image and decoded
 *       and resized in one step (resize-then-crop semantics: the filter reads
 *       around the box, as PIL's resize of the whole image would).
 * Per-worker state is one sl_decoder (libjpeg decompressor + scratch).
 * Messages give the cause only; the engine prefixes file, record and op.
 */
#include "ops/ops.h"
#include "ops/op.h"

/* An op's apply timed as one phase of the op split (docs/OPS.md "Speed";
 * one sample in 8, the phases nested inside subtracted). */
#define PHASED(fn, phase)                                                                     \
    static int fn##_phased(const void *params, void *state, sl_op_ctx *ctx, sl_sample *s) {   \
        sl_ops__phase_sample(ctx->epoch, ctx->key);                                           \
        sl_ops__span sp;                                                                      \
        sl_ops__phase_open(&sp);                                                              \
        int rc = fn(params, state, ctx, s);                                                   \
        sl_ops__phase_close(&sp, phase);                                                      \
        return rc;                                                                            \
    }

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- shared helpers ---------------------------------------------------------- */

/* The ops' messages begin with their own name ("resize: ..."); the engine
 * names the op already, so keep the cause alone. */
#define cause_only sl_op_cause_only

static int bind_column(const char *name, int *col, sl_colset *cols, const char *field) {
    char where[96];
    snprintf(where, sizeof where, "%s.column", field);
    int c = sl_op_find_column(cols, name, where);
    if (c < 0)
        return c;
    *col = c;
    return SL_OK;
}

/* An op that needs a decoded HWC uint8 image in `col`. */
static int bind_image(const char *name, int *col, sl_colset *cols, const char *field) {
    SL_TRY(bind_column(name, col, cols, field));
    const sl_colinfo *ci = &cols->col[*col];
    if (ci->encoded || (ci->dtype == SL_U8 && ci->ndim == 1))
        return sl__error(SL_EINVAL, "%s.column: '%s' holds encoded bytes, not an image; add a "
                         "decode op first", field, name);
    if ((ci->dtype != SL_DTYPE_INVALID && ci->dtype != SL_U8) || (ci->ndim >= 0 && ci->ndim != 3))
        return sl__error(SL_EINVAL, "%s.column: '%s' is not an HWC uint8 image", field, name);
    return SL_OK;
}

static void set_image_info(sl_colinfo *ci, int64_t h, int64_t w, int64_t c) {
    ci->dtype = SL_U8;
    ci->ndim = 3;
    ci->shape[0] = h;
    ci->shape[1] = w;
    ci->shape[2] = c;
    ci->encoded = 0;
    ci->index_column = 0;
}

/* An op that makes an h x w image (-1: varies) of the channels of the
 * image in `col`. */
static int bind_resized(const char *name, int *col, sl_colset *cols, const char *field,
                        int64_t h, int64_t w) {
    SL_TRY(bind_image(name, col, cols, field));
    sl_colinfo *ci = &cols->col[*col];
    set_image_info(ci, h, w, ci->ndim == 3 ? ci->shape[2] : -1);
    return SL_OK;
}

/* "size": an int n (n x n, or the shorter side for resize) or [h, w]. */
static int parse_size(const cJSON *json, const char *field, int *h, int *w, int *pair) {
    double v[2];
    int n;
    SL_TRY(sl_op_param_doubles(json, "size", field, 1, 1, 2, v, &n));
    for (int i = 0; i < n; i++)
        if (!(v[i] >= 1 && v[i] <= 65536 && v[i] == floor(v[i])))
            return sl__error(SL_EINVAL, "%s.size: must be a positive integer or [h, w]", field);
    *h = (int)v[0];
    *w = (int)(n == 2 ? v[1] : v[0]);
    *pair = n == 2;
    return SL_OK;
}

static int parse_range(const cJSON *json, const char *key, const char *field, double def_lo,
                       double def_hi, double lo_min, double out[2]) {
    if (!cJSON_GetObjectItemCaseSensitive(json, key)) {
        out[0] = def_lo;
        out[1] = def_hi;
        return SL_OK;
    }
    int n;
    SL_TRY(sl_op_param_doubles(json, key, field, 1, 2, 2, out, &n));
    if (!(out[0] > lo_min && out[0] <= out[1] && isfinite(out[1])))
        return sl__error(SL_EINVAL, "%s.%s: must be [lo, hi] with %g < lo <= hi", field, key,
                         lo_min);
    return SL_OK;
}

/* "dtype": a dtype name (required when `def` is NULL); bool only when
 * `bool_ok`. */
static int parse_dtype(const cJSON *json, const char *field, const char *def, int bool_ok,
                       sl_dtype *out) {
    char name[32];
    SL_TRY(sl_op_param_string(json, "dtype", field, def == NULL, def, name, sizeof name));
    *out = sl_dtype_parse(name);
    if (*out == SL_DTYPE_INVALID || (*out == SL_BOOL && !bool_ok))
        return sl__error(SL_EINVAL, "%s.dtype: unknown %sdtype '%s'", field,
                         bool_ok ? "" : "or unsupported ", name);
    return SL_OK;
}

static const char *const interp_names[] = {"bilinear", "area", "nearest", NULL};

/* The decode options; the first member of every decode op's params, so
 * that one worker_init serves the plain and the fused ops. */
typedef struct {
    int warnings;         /* sl_warnings */
    int exif_orientation; /* 0/1 */
    int gpu;              /* "device": "gpu": the plan hands the chain to GPU decode
                             (gpu_chain_add); never applied as a CPU op */
} decode_opts;

/* A worker's decoder with these options. */
static int make_decoder(int warnings, int exif_orientation, void **state_out) {
    sl_decoder *dec;
    SL_TRY(sl_decoder_create(&dec));
    int rc = sl_decoder_set(dec, SL_DECODE_WARNINGS, warnings);
    if (rc == SL_OK)
        rc = sl_decoder_set(dec, SL_DECODE_EXIF_ORIENTATION, exif_orientation);
    if (rc < 0) {
        sl_decoder_free(dec);
        return rc;
    }
    *state_out = dec;
    return SL_OK;
}

static int decoder_init(const void *params, void **state_out) {
    const decode_opts *o = params;
    return make_decoder(o->warnings, o->exif_orientation, state_out);
}

static void decoder_free(void *state) { sl_decoder_free(state); }

/* The encoded bytes of column `col`: a 1-D uint8 tensor. */
static int encoded_bytes(const sl_sample *s, int col, const void **data, size_t *size) {
    const sl_tensor *t = &s->col[col];
    if (t->dtype != SL_U8 || t->ndim != 1)
        return sl__error(SL_EINVAL, "column %d is not encoded bytes (dtype %s, %d dims)", col,
                         sl_dtype_name(t->dtype), (int)t->ndim);
    *data = t->data;
    *size = t->nbytes;
    return SL_OK;
}

/* An encoded image: its bytes, its header and the worker's decoder that
 * read it. */
typedef struct {
    sl_decoder *dec;
    const void *data;
    size_t size;
    sl_image_info info;
} encoded;

/* The encoded bytes of column `col` and their image header, read with the
 * decoder `state` (a decode op's per-worker state). */
static int read_header(void *state, const sl_sample *s, int col, encoded *e) {
    e->dec = state;
    SL_TRY(encoded_bytes(s, col, &e->data, &e->size));
    int rc = sl_decode_info(e->dec, e->data, e->size, &e->info);
    return rc < 0 ? cause_only(rc) : SL_OK;
}

/* The tail of an op that wrote a new tensor `t` for column `col` with
 * status `rc`: installed, or released with the error's cause. */
static int set_or_release(sl_sample *s, int col, sl_tensor *t, int rc) {
    if (rc < 0) {
        sl_tensor_release(t);
        return cause_only(rc);
    }
    sl_op_set_column(s, col, t);
    return SL_OK;
}

/* Decode `box` (pixel limits `lim`) of the image, resized to oh x ow, into a
 * new value of column `col` (the fused decode ops' common tail). */
static int decode_box_column(sl_op_ctx *ctx, sl_sample *s, int col, const encoded *e,
                             sl_color color, const double box[4], const int lim[4], int oh,
                             int ow, sl_interp interp) {
    sl_tensor t;
    int64_t shape[3] = {oh, ow, (int64_t)color};
    SL_TRY(sl_op_alloc(ctx, &t, SL_U8, 3, shape));
    int rc = sl_ops__decode_box(e->dec, e->data, e->size, color, box, lim, oh, ow, interp,
                                t.data, NULL);
    return set_or_release(s, col, &t, rc);
}

/* ---- decode ------------------------------------------------------------------ */

typedef struct {
    decode_opts opt; /* first: see decoder_init */
    char column[SL_COLNAME_MAX];
    int col;
    sl_color color;
} decode_params;

typedef struct {
    char column[SL_COLNAME_MAX];
    int col;
    int oh, ow;
    double scale[2], ratio[2];
} rrc_params;

typedef struct {
    char column[SL_COLNAME_MAX];
    int col;
    int shorter; /* 1: size is the shorter side */
    int oh, ow;
    int interp;  /* sl_interp */
} resize_params;

typedef struct {
    char column[SL_COLNAME_MAX];
    int col;
    int ch, cw;
} ccrop_params;

typedef struct {
    char column[SL_COLNAME_MAX];
    int col;
    double p;
} flip_params;

typedef struct {
    char column[SL_COLNAME_MAX];
    int col;
    int nmean, nstd;
    float mean[4], std[4];
    sl_layout layout;
    sl_dtype dtype;
} normalize_params;

typedef struct {
    char column[SL_COLNAME_MAX];
    int col;
    double lo, hi;
    int fill;
} rotate_params;

typedef struct {
    char column[SL_COLNAME_MAX];
    int col;
    sl_dtype dtype;
} cast_params;

typedef struct {
    char column[SL_COLNAME_MAX];
    int col;
    int classes;
    sl_dtype dtype;
} one_hot_params;

/* fused ops */
typedef struct {
    decode_opts opt; /* first: see decoder_init */
    int col;
    sl_color color;
    rrc_params rrc;
    /* a following flip and/or float32 normalize folded in (fuse order:
     * + flip, then + normalize); the flip draws from part 2 */
    int has_flip, has_norm;
    flip_params flip;
    normalize_params norm;
    float lut[4][256]; /* has_norm: sl_ops__norm_lut of the image's channels */
} decode_rrc_params;

typedef struct {
    decode_opts opt; /* first: see decoder_init */
    int col;
    sl_color color;
    resize_params rs;
    int has_crop;
    ccrop_params cc;
} decode_resize_params;

extern const sl_op_def sl_op_decode, sl_op_random_resized_crop, sl_op_resize, sl_op_center_crop,
    sl_op_normalize, sl_op_flip;
static const sl_op_def op_decode_rrc, op_decode_rrc_flip, op_decode_rrc_norm,
    op_decode_rrc_flip_norm, op_decode_resize, op_flip_normalize;
/* decode's chain rewrite: decode on the GPU (below) */
static int gpu_chain(const void *params, const sl_op_chain *in, sl_op_chain_out *out);

static int decode_parse(void *params, const cJSON *json, const char *field) {
    decode_params *p = params;
    static const char *const keys[] = {"column", "mode", "warnings", "exif_orientation",
                                       "device", NULL};
    static const char *const modes[] = {"rgb", "gray", NULL};
    static const char *const devices[] = {"cpu", "gpu", NULL};
    /* in sl_warnings order */
    static const char *const warnings[] = {"default", "strict", "lenient", NULL};
    int mode;
    SL_TRY(sl_op_param_check_keys(json, field, keys));
    SL_TRY(sl_op_param_string(json, "column", field, 0, "image", p->column, sizeof p->column));
    SL_TRY(sl_op_param_enum(json, "mode", field, 0, 0, modes, &mode));
    SL_TRY(sl_op_param_enum(json, "warnings", field, 0, SL_WARNINGS_DEFAULT, warnings,
                            &p->opt.warnings));
    SL_TRY(sl_op_param_bool(json, "exif_orientation", field, 0, 0, &p->opt.exif_orientation));
    SL_TRY(sl_op_param_enum(json, "device", field, 0, 0, devices, &p->opt.gpu));
    p->color = mode == 0 ? SL_COLOR_RGB : SL_COLOR_GRAY;
    return SL_OK;
}

static int decode_bind(void *params, sl_colset *cols, const char *field) {
    decode_params *p = params;
    SL_TRY(bind_column(p->column, &p->col, cols, field));
    sl_colinfo *ci = &cols->col[p->col];
    if (!ci->encoded && ci->dtype != SL_DTYPE_INVALID && !(ci->dtype == SL_U8 && ci->ndim == 1))
        return sl__error(SL_EINVAL, "%s.column: '%s' is not encoded image bytes", field, p->column);
    set_image_info(ci, -1, -1, (int64_t)p->color);
    return SL_OK;
}

static int decode_apply(const void *params, void *state, sl_op_ctx *ctx, sl_sample *s) {
    const decode_params *p = params;
    encoded e;
    SL_TRY(read_header(state, s, p->col, &e));
    sl_tensor t;
    int64_t shape[3] = {e.info.height, e.info.width, (int64_t)p->color};
    SL_TRY(sl_op_alloc(ctx, &t, SL_U8, 3, shape));
    return set_or_release(s, p->col, &t, sl_decode(e.dec, e.data, e.size, p->color, &t));
}
PHASED(decode_apply, SL_PHASE_DECODE)

/* fuse(): hand out the fused op `def` with params `f` (NULL: out of memory,
 * fusing `what`). */
static int fused(const sl_op_def *def, void *f, const char *what, const sl_op_def **fused_def,
                 void **fused_params) {
    if (!f)
        return sl__oom(what);
    *fused_def = def;
    *fused_params = f;
    return 1;
}

static int decode_fuse(const void *params, const sl_op_def *next, const void *next_params,
                       const sl_op_def **fused_def, void **fused_params) {
    const decode_params *p = params;
    /* the fused ops' params begin with decode's options, column and color */
#define DECODE_HEAD(f) ((f)->opt = p->opt, (f)->col = p->col, (f)->color = p->color)
    if (next == &sl_op_random_resized_crop && ((const rrc_params *)next_params)->col == p->col) {
        decode_rrc_params *f = sl__calloc(1, sizeof *f);
        if (f) {
            DECODE_HEAD(f);
            f->rrc = *(const rrc_params *)next_params;
        }
        return fused(&op_decode_rrc, f, "fusing decode + random_resized_crop", fused_def,
                     fused_params);
    }
    if (next == &sl_op_resize && ((const resize_params *)next_params)->col == p->col) {
        decode_resize_params *f = sl__calloc(1, sizeof *f);
        if (f) {
            DECODE_HEAD(f);
            f->rs = *(const resize_params *)next_params;
        }
        return fused(&op_decode_resize, f, "fusing decode + resize", fused_def, fused_params);
    }
#undef DECODE_HEAD
    return 0;
}

/* " warnings=... exif_orientation" for options that differ from the defaults */
static const char *opts_text(const decode_opts *o, char *buf, size_t cap) {
    static const char *const names[] = {"default", "strict", "lenient"};
    snprintf(buf, cap, "%s%s%s%s", o->warnings ? " warnings=" : "",
             o->warnings ? names[o->warnings] : "", o->exif_orientation ? " exif_orientation" : "",
             o->gpu ? " device=gpu" : "");
    return buf;
}

static void decode_describe(const void *params, char *buf, size_t cap) {
    const decode_params *p = params;
    char o[64];
    snprintf(buf, cap, "column=%s mode=%s%s", p->column, p->color == SL_COLOR_RGB ? "rgb" : "gray",
             opts_text(&p->opt, o, sizeof o));
}

const sl_op_def sl_op_decode = SL_OP_DEF(
    decode, "decode",
    "decode JPEG/PNG bytes into an HWC uint8 image (rgb or gray)",
    .worker_init = decoder_init, .worker_free = decoder_free, .apply = decode_apply_phased,
    .fuse = decode_fuse, .chain = gpu_chain);

/* ---- random_resized_crop -------------------------------------------------------- */

static int rrc_parse(void *params, const cJSON *json, const char *field) {
    rrc_params *p = params;
    static const char *const keys[] = {"column", "size", "scale", "ratio", NULL};
    int pair;
    SL_TRY(sl_op_param_check_keys(json, field, keys));
    SL_TRY(sl_op_param_string(json, "column", field, 0, "image", p->column, sizeof p->column));
    SL_TRY(parse_size(json, field, &p->oh, &p->ow, &pair));
    SL_TRY(parse_range(json, "scale", field, 0.08, 1.0, 0.0, p->scale));
    SL_TRY(parse_range(json, "ratio", field, 3.0 / 4.0, 4.0 / 3.0, 0.0, p->ratio));
    return SL_OK;
}

static int rrc_bind(void *params, sl_colset *cols, const char *field) {
    rrc_params *p = params;
    return bind_resized(p->column, &p->col, cols, field, p->oh, p->ow);
}

static void rrc_describe(const void *params, char *buf, size_t cap) {
    const rrc_params *p = params;
    snprintf(buf, cap, "size=%dx%d scale=[%g,%g] ratio=[%g,%g]", p->oh, p->ow, p->scale[0],
             p->scale[1], p->ratio[0], p->ratio[1]);
}

/* The box (in scratch) drawn for this image. */
static int rrc_prepare(const void *params, sl_rng *rng, const sl_tensor *in, sl_tensor *out,
                       void *scratch) {
    const rrc_params *p = params;
    SL_TRY(sl_ops__check_image(in, "random_resized_crop"));
    int rc = sl_rrc_box((int)in->shape[0], (int)in->shape[1], p->scale, p->ratio, rng, scratch);
    if (rc < 0)
        return cause_only(rc);
    int64_t shape[3] = {p->oh, p->ow, in->shape[2]};
    sl_op_kernel_out(out, SL_U8, 3, shape);
    return SL_OK;
}

/* Crop the box of the image and resize it to the output's size
 * (torchvision's resized_crop: crop first, so the filter never reads
 * outside the box). */
static int rrc_run(const void *params, const void *scratch, const sl_tensor *in,
                   sl_tensor *out) {
    const sl_box *box = scratch;
    (void)params;
    int H = (int)in->shape[0], W = (int)in->shape[1], C = (int)in->shape[2];
    int oh = (int)out->shape[0], ow = (int)out->shape[1];
    double b[4] = {box->x, box->y, (double)box->x + box->w, (double)box->y + box->h};
    int lim[4] = {box->x, box->y, box->x + box->w, box->y + box->h};
    return sl_ops__resample(in->data, H, W, (size_t)W * C, C, b, lim, oh, ow,
                            SL_INTERP_BILINEAR, out->data, (size_t)ow * C, NULL);
}

const sl_op_def sl_op_random_resized_crop = SL_OP_DEF(
    rrc, "random_resized_crop",
    "torchvision RandomResizedCrop: random area/aspect box, resized (bilinear)",
    .flags = SL_OPF_RANDOM, .kernel = SL_OP_KERNEL(rrc, .timed = 1, .phase = SL_PHASE_RESAMPLE));

/* ---- placements (op.h): shared by the fused CPU ops and GPU decode ----------------- */

static void resize_shape(const resize_params *p, int H, int W, int *oh, int *ow);

int sl_place_rrc(int H, int W, const double scale[2], const double ratio[2], int oh, int ow,
                 sl_rng *box_rng, double flip_p, sl_rng *flip_rng, sl_place *out) {
    memset(out, 0, sizeof *out);
    sl_box box;
    SL_TRY(sl_rrc_box(H, W, scale, ratio, box_rng, &box));
    out->box[0] = box.x;
    out->box[1] = box.y;
    out->box[2] = (double)box.x + box.w;
    out->box[3] = (double)box.y + box.h;
    out->lim[0] = box.x;
    out->lim[1] = box.y;
    out->lim[2] = box.x + box.w;
    out->lim[3] = box.y + box.h;
    out->oh = oh;
    out->ow = ow;
    out->mirror = flip_rng && sl_rng_uniform(flip_rng) < flip_p;
    return SL_OK;
}

void sl_place_resize_crop(int H, int W, int shorter, int size_h, int size_w, int ch, int cw,
                          sl_place *out) {
    memset(out, 0, sizeof *out);
    resize_params rs = {.shorter = shorter, .oh = size_h, .ow = size_w};
    int rh, rw;
    resize_shape(&rs, H, W, &rh, &rw);
    out->rh = rh;
    out->rw = rw;
    out->box[2] = W;
    out->box[3] = H;
    out->lim[2] = W;
    out->lim[3] = H;
    out->oh = rh;
    out->ow = rw;
    if (ch <= 0)
        return;
    sl_center_crop_box(rh, rw, ch, cw, &out->crop);
    const sl_box *c = &out->crop;
    if (c->y < 0 || c->x < 0) {
        out->pads = 1;
        return;
    }
    /* the crop of the resized image, as a box of the original */
    double fx = (double)W / rw, fy = (double)H / rh;
    out->box[0] = c->x * fx;
    out->box[1] = c->y * fy;
    out->box[2] = (c->x + c->w) * fx;
    out->box[3] = (c->y + c->h) * fy;
    out->oh = c->h;
    out->ow = c->w;
}

/* ---- decode + random_resized_crop (fused) ----------------------------------------- */

static int decode_rrc_apply(const void *params, void *state, sl_op_ctx *ctx, sl_sample *s) {
    const decode_rrc_params *p = params;
    encoded e;
    SL_TRY(read_header(state, s, p->col, &e));
    int rc;
    sl_place pl;
    /* part 1 = the random_resized_crop position: the same box as unfused;
     * part 2 = the flip position: the same draw as the unfused flip */
    rc = sl_place_rrc(e.info.height, e.info.width, p->rrc.scale, p->rrc.ratio, p->rrc.oh,
                      p->rrc.ow, sl_op_rng_part(ctx, 1), p->flip.p,
                      p->has_flip ? sl_op_rng_part(ctx, 2) : NULL, &pl);
    if (rc < 0)
        return cause_only(rc);
    const double *b = pl.box;
    const int *lim = pl.lim;
    if (!p->has_flip && !p->has_norm)
        return decode_box_column(ctx, s, p->col, &e, p->color, b, lim, p->rrc.oh,
                                 p->rrc.ow, SL_INTERP_BILINEAR);
    int mirror = pl.mirror;
    int64_t C = (int64_t)p->color, oh = p->rrc.oh, ow = p->rrc.ow;
    sl_tensor t;
    if (!p->has_norm) {
        int64_t shape[3] = {oh, ow, C};
        SL_TRY(sl_op_alloc(ctx, &t, SL_U8, 3, shape));
        rc = sl_ops__decode_box(e.dec, e.data, e.size, p->color, b, lim, p->rrc.oh, p->rrc.ow,
                                SL_INTERP_BILINEAR, t.data, NULL);
        if (rc == SL_OK && mirror)
            rc = sl_image_flip(&t, &t);
    } else {
        /* resampled straight into the normalized float32 output (in its
         * batch slot when this op is the last), mirrored while written */
        int64_t shape[3] = {C, oh, ow};
        if (p->norm.layout == SL_LAYOUT_HWC)
            shape[0] = oh, shape[1] = ow, shape[2] = C;
        SL_TRY(sl_op_alloc(ctx, &t, SL_F32, 3, shape));
        sl_ops__norm nm = {(const float(*)[256])p->lut, p->norm.layout, mirror};
        rc = sl_ops__decode_box(e.dec, e.data, e.size, p->color, b, lim, p->rrc.oh, p->rrc.ow,
                                SL_INTERP_BILINEAR, t.data, &nm);
    }
    return set_or_release(s, p->col, &t, rc);
}
PHASED(decode_rrc_apply, SL_PHASE_DECODE)

/* decode_random_resized_crop (+ flip) + flip or normalize: one op that
 * resamples the decoded region straight into the flipped, normalized
 * output; the result is the unfused chain's, bit for bit. Only a float32
 * normalize whose mean/std fit the image's channels folds in (others stay
 * a separate op, with its own checks and messages). */
static int decode_rrc_fuse(const void *params, const sl_op_def *next, const void *next_params,
                           const sl_op_def **fused_def, void **fused_params) {
    const decode_rrc_params *p = params;
    int flip = 0;
    if (next == &sl_op_flip && !p->has_flip && !p->has_norm) {
        if (((const flip_params *)next_params)->col != p->col)
            return 0;
        flip = 1;
    } else if (next == &sl_op_normalize && !p->has_norm) {
        const normalize_params *n = next_params;
        int C = (int)p->color;
        if (n->col != p->col || n->dtype != SL_F32 || (n->nmean != 1 && n->nmean != C) ||
            (n->nstd != 1 && n->nstd != C))
            return 0;
    } else {
        return 0;
    }
    decode_rrc_params *f = sl__calloc(1, sizeof *f);
    if (!f)
        return sl__oom("fusing decode_random_resized_crop");
    *f = *p;
    if (flip) {
        f->has_flip = 1;
        f->flip = *(const flip_params *)next_params;
    } else {
        const normalize_params *n = next_params;
        float mean[4], sd[4];
        for (int c = 0; c < (int)p->color; c++) {
            mean[c] = n->mean[n->nmean == 1 ? 0 : c];
            sd[c] = n->std[n->nstd == 1 ? 0 : c];
        }
        f->has_norm = 1;
        f->norm = *n;
        sl_ops__norm_lut(f->lut, (int)p->color, mean, sd);
    }
    *fused_def = f->has_flip && f->has_norm ? &op_decode_rrc_flip_norm
                 : f->has_flip             ? &op_decode_rrc_flip
                                           : &op_decode_rrc_norm;
    *fused_params = f;
    return 1;
}

/* An op made by fusion only: its params come ready from fuse(). */
#define FUSED_OP_DEF(PREFIX, NAME, SUMMARY, ...)                                            \
    {                                                                                      \
        .name = NAME, .summary = SUMMARY, .params_size = sizeof(PREFIX##_params),          \
        .parse = fused_parse, .bind = fused_bind, .describe = PREFIX##_describe,           \
        __VA_ARGS__                                                                        \
    }

static int fused_bind(void *params, sl_colset *cols, const char *field) {
    (void)params;
    (void)cols;
    (void)field;
    return SL_OK; /* fused params come ready from fuse() */
}

static int fused_parse(void *params, const cJSON *json, const char *field) {
    (void)params;
    (void)json;
    return sl__error(SL_EINVAL, "%s: this op is made by fusion only", field);
}

static void normalize_describe(const void *params, char *buf, size_t cap);

static void decode_rrc_describe(const void *params, char *buf, size_t cap) {
    const decode_rrc_params *p = params;
    char o[64], fb[48] = "", nb[200] = "";
    if (p->has_flip)
        snprintf(fb, sizeof fb, " flip p=%g", p->flip.p);
    if (p->has_norm)
        normalize_describe(&p->norm, nb, sizeof nb);
    snprintf(buf, cap,
             "mode=%s%s size=%dx%d scale=[%g,%g] ratio=[%g,%g] (region + DCT-scaled decode)%s%s%s",
             p->color == SL_COLOR_RGB ? "rgb" : "gray", opts_text(&p->opt, o, sizeof o), p->rrc.oh,
             p->rrc.ow, p->rrc.scale[0], p->rrc.scale[1], p->rrc.ratio[0], p->rrc.ratio[1], fb,
             p->has_norm ? " resampled into normalize " : "", nb);
}

#define DECODE_RRC_DEF(NAME, SUMMARY)                                                      \
    FUSED_OP_DEF(decode_rrc, NAME, SUMMARY, .flags = SL_OPF_RANDOM,                        \
                 .worker_init = decoder_init, .worker_free = decoder_free,                 \
                 .apply = decode_rrc_apply_phased, .fuse = decode_rrc_fuse,               \
                 .chain = gpu_chain)

static const sl_op_def op_decode_rrc = DECODE_RRC_DEF(
    "decode_random_resized_crop",
    "fused decode + random_resized_crop: decode only the box, at a reduced DCT scale");
static const sl_op_def op_decode_rrc_flip = DECODE_RRC_DEF(
    "decode_random_resized_crop_flip",
    "fused decode + random_resized_crop + flip: the flip done on the resized output");
static const sl_op_def op_decode_rrc_norm = DECODE_RRC_DEF(
    "decode_random_resized_crop_normalize",
    "fused decode + random_resized_crop + normalize: resampled straight into float32");
static const sl_op_def op_decode_rrc_flip_norm = DECODE_RRC_DEF(
    "decode_random_resized_crop_flip_normalize",
    "fused decode + random_resized_crop + flip + normalize: resampled straight into the "
    "mirrored float32 output");

/* ---- resize ----------------------------------------------------------------------- */

static int resize_parse(void *params, const cJSON *json, const char *field) {
    resize_params *p = params;
    static const char *const keys[] = {"column", "size", "interpolation", NULL};
    int pair, interp;
    SL_TRY(sl_op_param_check_keys(json, field, keys));
    SL_TRY(sl_op_param_string(json, "column", field, 0, "image", p->column, sizeof p->column));
    SL_TRY(parse_size(json, field, &p->oh, &p->ow, &pair));
    SL_TRY(sl_op_param_enum(json, "interpolation", field, 0, 0, interp_names, &interp));
    p->shorter = !pair;
    p->interp = SL_INTERP_BILINEAR + interp;
    return SL_OK;
}

static int resize_bind(void *params, sl_colset *cols, const char *field) {
    resize_params *p = params;
    return bind_resized(p->column, &p->col, cols, field, p->shorter ? -1 : p->oh,
                        p->shorter ? -1 : p->ow);
}

static void resize_shape(const resize_params *p, int H, int W, int *oh, int *ow) {
    if (p->shorter)
        sl_resize_shorter_shape(H, W, p->oh, oh, ow);
    else {
        *oh = p->oh;
        *ow = p->ow;
    }
}

static void resize_describe(const void *params, char *buf, size_t cap) {
    const resize_params *p = params;
    if (p->shorter)
        snprintf(buf, cap, "shorter side=%d %s", p->oh, interp_names[p->interp - 1]);
    else
        snprintf(buf, cap, "size=%dx%d %s", p->oh, p->ow, interp_names[p->interp - 1]);
}

static int resize_prepare(const void *params, sl_rng *rng, const sl_tensor *in,
                          sl_tensor *out, void *scratch) {
    (void)rng;
    (void)scratch;
    SL_TRY(sl_ops__check_image(in, "resize"));
    int oh, ow;
    resize_shape(params, (int)in->shape[0], (int)in->shape[1], &oh, &ow);
    int64_t shape[3] = {oh, ow, in->shape[2]};
    sl_op_kernel_out(out, SL_U8, 3, shape);
    return SL_OK;
}

static int resize_run(const void *params, const void *scratch, const sl_tensor *in,
                      sl_tensor *out) {
    (void)scratch;
    return sl_image_resize(in, (int)out->shape[0], (int)out->shape[1],
                           (sl_interp)((const resize_params *)params)->interp, out);
}

const sl_op_def sl_op_resize = SL_OP_DEF(
    resize, "resize",
    "resize (PIL-exact; int size: the shorter side, as torchvision Resize(int))",
    .kernel = SL_OP_KERNEL(resize, .timed = 1, .phase = SL_PHASE_RESAMPLE));

/* ---- center_crop ------------------------------------------------------------------ */

static int ccrop_parse(void *params, const cJSON *json, const char *field) {
    ccrop_params *p = params;
    static const char *const keys[] = {"column", "size", NULL};
    int pair;
    SL_TRY(sl_op_param_check_keys(json, field, keys));
    SL_TRY(sl_op_param_string(json, "column", field, 0, "image", p->column, sizeof p->column));
    return parse_size(json, field, &p->ch, &p->cw, &pair);
}

static int ccrop_bind(void *params, sl_colset *cols, const char *field) {
    ccrop_params *p = params;
    return bind_resized(p->column, &p->col, cols, field, p->ch, p->cw);
}

static void ccrop_describe(const void *params, char *buf, size_t cap) {
    const ccrop_params *p = params;
    snprintf(buf, cap, "size=%dx%d", p->ch, p->cw);
}

/* The crop box (in scratch), padded with zeros where it leaves the image. */
static int ccrop_prepare(const void *params, sl_rng *rng, const sl_tensor *in, sl_tensor *out,
                         void *scratch) {
    const ccrop_params *p = params;
    (void)rng;
    SL_TRY(sl_ops__check_image(in, "center_crop"));
    sl_center_crop_box((int)in->shape[0], (int)in->shape[1], p->ch, p->cw, scratch);
    int64_t shape[3] = {p->ch, p->cw, in->shape[2]};
    sl_op_kernel_out(out, SL_U8, 3, shape);
    return SL_OK;
}

static int ccrop_run(const void *params, const void *scratch, const sl_tensor *in,
                     sl_tensor *out) {
    (void)params;
    return sl_image_crop(in, scratch, out);
}

const sl_op_def sl_op_center_crop = SL_OP_DEF(
    ccrop, "center_crop",
    "torchvision CenterCrop (zero padding when the image is smaller)",
    .kernel = SL_OP_KERNEL(ccrop, .timed = 1, .phase = SL_PHASE_RESAMPLE));

/* ---- decode + resize (+ center_crop) (fused) --------------------------------------- */

static int decode_resize_apply(const void *params, void *state, sl_op_ctx *ctx, sl_sample *s) {
    const decode_resize_params *p = params;
    encoded e;
    SL_TRY(read_header(state, s, p->col, &e));
    int rc;
    int H = e.info.height, W = e.info.width;
    sl_place pl;
    sl_place_resize_crop(H, W, p->rs.shorter, p->rs.oh, p->rs.ow, p->has_crop ? p->cc.ch : 0,
                         p->cc.cw, &pl);
    if (pl.pads) {
        /* the crop pads: no region to fuse, run the three steps */
        int rh = pl.rh, rw = pl.rw;
        sl_box c = pl.crop;
        sl_tensor full = {0}, r = {0}, t;
        int64_t fs[3] = {H, W, (int64_t)p->color}, rs[3] = {rh, rw, (int64_t)p->color};
        int64_t cs[3] = {p->cc.ch, p->cc.cw, (int64_t)p->color};
        SL_TRY(sl_op_alloc(ctx, &full, SL_U8, 3, fs));
        rc = sl_decode(e.dec, e.data, e.size, p->color, &full);
        if (rc == SL_OK)
            rc = sl_op_alloc(ctx, &r, SL_U8, 3, rs);
        if (rc == SL_OK)
            rc = sl_image_resize(&full, rh, rw, (sl_interp)p->rs.interp, &r);
        sl_tensor_release(&full);
        if (rc == SL_OK)
            rc = sl_op_alloc(ctx, &t, SL_U8, 3, cs);
        if (rc == SL_OK) {
            rc = sl_image_crop(&r, &c, &t);
            if (rc == SL_OK)
                sl_op_set_column(s, p->col, &t);
            else
                sl_tensor_release(&t);
        }
        sl_tensor_release(&r);
        return rc < 0 ? cause_only(rc) : SL_OK;
    }
    const double *box = pl.box;
    const int *lim = pl.lim;
    int oh = pl.oh, ow = pl.ow;
    return decode_box_column(ctx, s, p->col, &e, p->color, box, lim, oh, ow,
                             (sl_interp)p->rs.interp);
}
PHASED(decode_resize_apply, SL_PHASE_DECODE)

static int decode_resize_fuse(const void *params, const sl_op_def *next, const void *next_params,
                              const sl_op_def **fused_def, void **fused_params) {
    const decode_resize_params *p = params;
    if (next != &sl_op_center_crop || p->has_crop)
        return 0;
    const ccrop_params *c = next_params;
    if (c->col != p->col)
        return 0;
    decode_resize_params *f = sl__calloc(1, sizeof *f);
    if (f) {
        *f = *p;
        f->has_crop = 1;
        f->cc = *c;
    }
    return fused(&op_decode_resize, f, "fusing decode + resize + center_crop", fused_def,
                 fused_params);
}

static void decode_resize_describe(const void *params, char *buf, size_t cap) {
    const decode_resize_params *p = params;
    char rs[64], o[64];
    resize_describe(&p->rs, rs, sizeof rs);
    opts_text(&p->opt, o, sizeof o);
    if (p->has_crop)
        snprintf(buf, cap, "mode=%s%s resize %s, center_crop %dx%d (region + DCT-scaled decode)",
                 p->color == SL_COLOR_RGB ? "rgb" : "gray", o, rs, p->cc.ch, p->cc.cw);
    else
        snprintf(buf, cap, "mode=%s%s resize %s (DCT-scaled decode)",
                 p->color == SL_COLOR_RGB ? "rgb" : "gray", o, rs);
}

static const sl_op_def op_decode_resize = FUSED_OP_DEF(
    decode_resize, "decode_resize",
    "fused decode + resize (+ center_crop): DCT-scaled decode of the needed region",
    .worker_init = decoder_init, .worker_free = decoder_free,
    .apply = decode_resize_apply_phased, .fuse = decode_resize_fuse, .chain = gpu_chain);

/* ---- flip ---------------------------------------------------------------------------- */

static int flip_parse(void *params, const cJSON *json, const char *field) {
    flip_params *p = params;
    static const char *const keys[] = {"column", "p", NULL};
    SL_TRY(sl_op_param_check_keys(json, field, keys));
    SL_TRY(sl_op_param_string(json, "column", field, 0, "image", p->column, sizeof p->column));
    return sl_op_param_double(json, "p", field, 0, 0.5, 0.0, 1.0, &p->p);
}

static int flip_bind(void *params, sl_colset *cols, const char *field) {
    flip_params *p = params;
    return bind_image(p->column, &p->col, cols, field);
}

static void flip_describe(const void *params, char *buf, size_t cap) {
    snprintf(buf, cap, "p=%g", ((const flip_params *)params)->p);
}

/* Kept (no draw under p) or mirrored into a new tensor: the input may be a
 * read-only view of the source (a file mapping) or shared with another
 * sample. */
static int flip_prepare(const void *params, sl_rng *rng, const sl_tensor *in, sl_tensor *out,
                        void *scratch) {
    const flip_params *p = params;
    (void)scratch;
    /* torchvision: flip when torch.rand(1) < p */
    if (!(sl_rng_uniform(rng) < p->p))
        return SL_OP_KEEP;
    SL_TRY(sl_ops__check_image(in, "flip"));
    sl_op_kernel_out(out, SL_U8, 3, in->shape);
    return SL_OK;
}

static int flip_run(const void *params, const void *scratch, const sl_tensor *in,
                    sl_tensor *out) {
    (void)params;
    (void)scratch;
    return sl_image_flip(in, out);
}

static int flip_fuse(const void *params, const sl_op_def *next, const void *next_params,
                     const sl_op_def **fused_def, void **fused_params);

const sl_op_def sl_op_flip = SL_OP_DEF(
    flip, "flip",
    "horizontal flip with probability p (torchvision RandomHorizontalFlip)",
    .flags = SL_OPF_RANDOM,
    .kernel = SL_OP_KERNEL(flip, .batches = 1, .image = 1),
    .fuse = flip_fuse);

/* ---- rotate ---------------------------------------------------------------------------- */

static int rotate_parse(void *params, const cJSON *json, const char *field) {
    rotate_params *p = params;
    static const char *const keys[] = {"column", "degrees", "fill", NULL};
    double v[2];
    int n;
    int64_t fill;
    SL_TRY(sl_op_param_check_keys(json, field, keys));
    SL_TRY(sl_op_param_string(json, "column", field, 0, "image", p->column, sizeof p->column));
    SL_TRY(sl_op_param_doubles(json, "degrees", field, 1, 1, 2, v, &n));
    if (n == 1) { /* torchvision: a number d means [-d, d] */
        if (!(v[0] >= 0 && isfinite(v[0])))
            return sl__error(SL_EINVAL, "%s.degrees: a single value must be >= 0", field);
        p->lo = -v[0];
        p->hi = v[0];
    } else {
        if (!(v[0] <= v[1] && isfinite(v[0]) && isfinite(v[1])))
            return sl__error(SL_EINVAL, "%s.degrees: must be [lo, hi] with lo <= hi", field);
        p->lo = v[0];
        p->hi = v[1];
    }
    SL_TRY(sl_op_param_int(json, "fill", field, 0, 0, 0, 255, &fill));
    p->fill = (int)fill;
    return SL_OK;
}

static int rotate_bind(void *params, sl_colset *cols, const char *field) {
    rotate_params *p = params;
    return bind_image(p->column, &p->col, cols, field);
}

static void rotate_describe(const void *params, char *buf, size_t cap) {
    const rotate_params *p = params;
    snprintf(buf, cap, "degrees=[%g,%g] fill=%d", p->lo, p->hi, p->fill);
}

/* The angle (in scratch), drawn after the image is checked. */
static int rotate_prepare(const void *params, sl_rng *rng, const sl_tensor *in,
                          sl_tensor *out, void *scratch) {
    const rotate_params *p = params;
    SL_TRY(sl_ops__check_image(in, "rotate"));
    *(double *)scratch = p->lo + sl_rng_uniform(rng) * (p->hi - p->lo);
    sl_op_kernel_out(out, SL_U8, 3, in->shape);
    return SL_OK;
}

static int rotate_run(const void *params, const void *scratch, const sl_tensor *in,
                      sl_tensor *out) {
    const rotate_params *p = params;
    return sl_image_rotate(in, *(const double *)scratch, (uint8_t)p->fill, out);
}

const sl_op_def sl_op_rotate = SL_OP_DEF(
    rotate, "rotate",
    "rotate by a random angle in degrees (PIL rotate, bilinear, fill)",
    .flags = SL_OPF_RANDOM, .kernel = SL_OP_KERNEL(rotate, .timed = 0));

/* ---- normalize ------------------------------------------------------------------------ */

static int normalize_parse(void *params, const cJSON *json, const char *field) {
    normalize_params *p = params;
    static const char *const keys[] = {"column", "mean", "std", "layout", "dtype", NULL};
    static const char *const layouts[] = {"hwc", "chw", NULL};
    static const char *const dtypes[] = {"float32", "float16", "uint8", "bfloat16", NULL};
    static const sl_dtype dtype_of[] = {SL_F32, SL_F16, SL_U8, SL_BF16};
    double v[4];
    int layout, dt;
    SL_TRY(sl_op_param_check_keys(json, field, keys));
    SL_TRY(sl_op_param_string(json, "column", field, 0, "image", p->column, sizeof p->column));
    p->nmean = p->nstd = 1;
    p->mean[0] = 0.0f;
    p->std[0] = 1.0f;
    if (cJSON_GetObjectItemCaseSensitive(json, "mean")) {
        SL_TRY(sl_op_param_doubles(json, "mean", field, 1, 1, 4, v, &p->nmean));
        for (int i = 0; i < p->nmean; i++)
            p->mean[i] = (float)v[i];
    }
    if (cJSON_GetObjectItemCaseSensitive(json, "std")) {
        SL_TRY(sl_op_param_doubles(json, "std", field, 1, 1, 4, v, &p->nstd));
        for (int i = 0; i < p->nstd; i++) {
            if (!(v[i] != 0 && isfinite(v[i])))
                return sl__error(SL_EINVAL, "%s.std[%d]: must be non-zero", field, i);
            p->std[i] = (float)v[i];
        }
    }
    SL_TRY(sl_op_param_enum(json, "layout", field, 0, 1, layouts, &layout));
    SL_TRY(sl_op_param_enum(json, "dtype", field, 0, 0, dtypes, &dt));
    p->layout = layout == 0 ? SL_LAYOUT_HWC : SL_LAYOUT_CHW;
    p->dtype = dtype_of[dt];
    return SL_OK;
}

static int normalize_bind(void *params, sl_colset *cols, const char *field) {
    normalize_params *p = params;
    SL_TRY(bind_image(p->column, &p->col, cols, field));
    sl_colinfo *ci = &cols->col[p->col];
    int64_t c = ci->ndim == 3 ? ci->shape[2] : -1;
    for (int k = 0; k < 2; k++) {
        int n = k ? p->nstd : p->nmean;
        if (n != 1 && c > 0 && n != c)
            return sl__error(SL_EINVAL, "%s.%s: %d values for %lld channels", field,
                             k ? "std" : "mean", n, (long long)c);
    }
    int64_t h = ci->ndim == 3 ? ci->shape[0] : -1, w = ci->ndim == 3 ? ci->shape[1] : -1;
    ci->dtype = p->dtype;
    ci->ndim = 3;
    if (p->layout == SL_LAYOUT_CHW) {
        ci->shape[0] = c; ci->shape[1] = h; ci->shape[2] = w;
    } else {
        ci->shape[0] = h; ci->shape[1] = w; ci->shape[2] = c;
    }
    return SL_OK;
}

static void normalize_describe(const void *params, char *buf, size_t cap) {
    const normalize_params *p = params;
    snprintf(buf, cap, "mean=[%g,...] std=[%g,...] %s %s", p->mean[0], p->std[0],
             p->layout == SL_LAYOUT_CHW ? "chw" : "hwc", sl_dtype_name(p->dtype));
}

/* mean/std per channel of this image (in scratch), the output laid out as
 * asked. */
static int normalize_prepare(const void *params, sl_rng *rng, const sl_tensor *in,
                             sl_tensor *out, void *scratch) {
    const normalize_params *p = params;
    float *mean = scratch, *sd = mean + 4;
    (void)rng;
    SL_TRY(sl_ops__check_image(in, "normalize"));
    int64_t H = in->shape[0], W = in->shape[1], C = in->shape[2];
    if ((p->nmean != 1 && p->nmean != C) || (p->nstd != 1 && p->nstd != C))
        return sl__error(SL_EINVAL, "mean/std have %d/%d values for a %lld-channel image",
                         p->nmean, p->nstd, (long long)C);
    for (int c = 0; c < C; c++) {
        mean[c] = p->mean[p->nmean == 1 ? 0 : c];
        sd[c] = p->std[p->nstd == 1 ? 0 : c];
    }
    int64_t shape[3] = {H, W, C};
    if (p->layout == SL_LAYOUT_CHW) {
        shape[0] = C; shape[1] = H; shape[2] = W;
    }
    sl_op_kernel_out(out, p->dtype, 3, shape);
    return SL_OK;
}

static int normalize_run(const void *params, const void *scratch, const sl_tensor *in,
                         sl_tensor *out) {
    const normalize_params *p = params;
    const float *mean = scratch, *sd = mean + 4;
    return sl_image_normalize(in, mean, sd, p->layout, p->dtype, out);
}

const sl_op_def sl_op_normalize = SL_OP_DEF(
    normalize, "normalize",
    "(x/255 - mean)/std, HWC->CHW and cast in one pass (ToTensor + Normalize)",
    .kernel = SL_OP_KERNEL(normalize, .batches = 1, .image = 1, .timed = 1,
                           .phase = SL_PHASE_NORMALIZE));

/* ---- cast ------------------------------------------------------------------------------ */

static int cast_parse(void *params, const cJSON *json, const char *field) {
    cast_params *p = params;
    static const char *const keys[] = {"column", "dtype", NULL};
    SL_TRY(sl_op_param_check_keys(json, field, keys));
    SL_TRY(sl_op_param_string(json, "column", field, 1, NULL, p->column, sizeof p->column));
    return parse_dtype(json, field, NULL, 0, &p->dtype);
}

static int cast_bind(void *params, sl_colset *cols, const char *field) {
    cast_params *p = params;
    SL_TRY(bind_column(p->column, &p->col, cols, field));
    sl_colinfo *ci = &cols->col[p->col];
    if (ci->encoded)
        return sl__error(SL_EINVAL, "%s.column: '%s' holds encoded bytes", field, p->column);
    ci->dtype = p->dtype;
    ci->index_column = 0;
    return SL_OK;
}

static void cast_describe(const void *params, char *buf, size_t cap) {
    snprintf(buf, cap, "dtype=%s", sl_dtype_name(((const cast_params *)params)->dtype));
}

/* Element-wise, so a batch converts row by row to the same values. */
static int cast_prepare(const void *params, sl_rng *rng, const sl_tensor *in, sl_tensor *out,
                        void *scratch) {
    const cast_params *p = params;
    (void)rng;
    (void)scratch;
    if (in->dtype == p->dtype)
        return SL_OP_KEEP;
    sl_op_kernel_out(out, p->dtype, in->ndim, in->shape);
    return SL_OK;
}

static int cast_run(const void *params, const void *scratch, const sl_tensor *in,
                    sl_tensor *out) {
    (void)scratch;
    return sl_tensor_cast(in, ((const cast_params *)params)->dtype, out);
}

const sl_op_def sl_op_cast = SL_OP_DEF(
    cast, "cast",
    "convert a column's elements to another dtype (rounding, saturating)",
    .kernel = SL_OP_KERNEL(cast, .batches = 1, .elementwise = 1));

/* ---- one_hot --------------------------------------------------------------------------- */

static int one_hot_parse(void *params, const cJSON *json, const char *field) {
    one_hot_params *p = params;
    static const char *const keys[] = {"column", "classes", "dtype", NULL};
    int64_t classes;
    SL_TRY(sl_op_param_check_keys(json, field, keys));
    SL_TRY(sl_op_param_string(json, "column", field, 0, "label", p->column, sizeof p->column));
    SL_TRY(sl_op_param_int(json, "classes", field, 1, 0, 1, 1 << 24, &classes));
    p->classes = (int)classes;
    return parse_dtype(json, field, "float32", 1, &p->dtype);
}

static int one_hot_bind(void *params, sl_colset *cols, const char *field) {
    one_hot_params *p = params;
    SL_TRY(bind_column(p->column, &p->col, cols, field));
    sl_colinfo *ci = &cols->col[p->col];
    if (ci->encoded || ci->ndim > 1 || (ci->ndim == 1 && ci->shape[0] != 1 && !ci->index_column))
        return sl__error(SL_EINVAL, "%s.column: '%s' is not a scalar label", field, p->column);
    ci->dtype = p->dtype;
    ci->ndim = 1;
    ci->shape[0] = p->classes;
    ci->index_column = 0;
    return SL_OK;
}

static int label_value(const sl_tensor *t, int64_t *out) {
    if (sl_tensor_numel(t) != 1 || !t->data)
        return sl__error(SL_EINVAL, "label is not a scalar");
    double v;
    switch (t->dtype) {
    case SL_I64: *out = *(const int64_t *)t->data; return SL_OK;
    case SL_U64: *out = (int64_t)*(const uint64_t *)t->data; return SL_OK;
    case SL_I32: *out = *(const int32_t *)t->data; return SL_OK;
    case SL_U32: *out = *(const uint32_t *)t->data; return SL_OK;
    case SL_I16: *out = *(const int16_t *)t->data; return SL_OK;
    case SL_U16: *out = *(const uint16_t *)t->data; return SL_OK;
    case SL_I8: *out = *(const int8_t *)t->data; return SL_OK;
    case SL_U8: *out = *(const uint8_t *)t->data; return SL_OK;
    case SL_F32: v = *(const float *)t->data; break;
    case SL_F64: v = *(const double *)t->data; break;
    default: return sl__error(SL_EINVAL, "label has dtype %s", sl_dtype_name(t->dtype));
    }
    if (!(v == floor(v) && fabs(v) < 9e15))
        return sl__error(SL_EINVAL, "label %g is not an integer", v);
    *out = (int64_t)v;
    return SL_OK;
}

static void one_hot_describe(const void *params, char *buf, size_t cap) {
    const one_hot_params *p = params;
    snprintf(buf, cap, "classes=%d dtype=%s", p->classes, sl_dtype_name(p->dtype));
}

/* The label (in scratch), read before the output is taken. */
static int one_hot_prepare(const void *params, sl_rng *rng, const sl_tensor *in,
                           sl_tensor *out, void *scratch) {
    const one_hot_params *p = params;
    (void)rng;
    SL_TRY(label_value(in, scratch));
    int64_t shape[1] = {p->classes};
    sl_op_kernel_out(out, p->dtype, 1, shape);
    return SL_OK;
}

static int one_hot_run(const void *params, const void *scratch, const sl_tensor *in,
                       sl_tensor *out) {
    const one_hot_params *p = params;
    (void)in;
    return sl_one_hot(*(const int64_t *)scratch, p->classes, p->dtype, out);
}

const sl_op_def sl_op_one_hot = SL_OP_DEF(
    one_hot, "one_hot",
    "integer label -> one-hot vector of `classes` values",
    .kernel = SL_OP_KERNEL(one_hot, .batches = 1));

/* ---- flip + normalize (fused) ------------------------------------------------------ */

/* The flip is folded into normalize's pass (it reads each row mirrored):
 * one pass and one buffer fewer per sample. */
typedef struct {
    flip_params flip;
    normalize_params norm;
} flip_normalize_params;

static int flip_fuse(const void *params, const sl_op_def *next, const void *next_params,
                     const sl_op_def **fused_def, void **fused_params) {
    const flip_params *p = params;
    if (next != &sl_op_normalize || ((const normalize_params *)next_params)->col != p->col)
        return 0;
    flip_normalize_params *f = sl__calloc(1, sizeof *f);
    if (!f)
        return sl__oom("fusing flip + normalize");
    f->flip = *p;
    f->norm = *(const normalize_params *)next_params;
    *fused_def = &op_flip_normalize;
    *fused_params = f;
    return 1;
}

static int flip_normalize_apply(const void *params, void *state, sl_op_ctx *ctx, sl_sample *s) {
    const flip_normalize_params *p = params;
    const normalize_params *n = &p->norm;
    (void)state;
    /* part 0 = the flip position: the same draw as the unfused flip */
    int mirror = sl_rng_uniform(sl_op_rng_part(ctx, 0)) < p->flip.p;
    const sl_tensor *in = &s->col[n->col];
    float ms[8]; /* mean and std per channel */
    sl_tensor want, t;
    SL_TRY(normalize_prepare(n, NULL, in, &want, ms));
    SL_TRY(sl_op_alloc(ctx, &t, want.dtype, want.ndim, want.shape));
    return set_or_release(s, n->col, &t,
                          sl_ops__normalize(in, ms, ms + 4, n->layout, n->dtype, mirror, &t));
}
PHASED(flip_normalize_apply, SL_PHASE_NORMALIZE)

static void flip_normalize_describe(const void *params, char *buf, size_t cap) {
    const flip_normalize_params *p = params;
    char nb[200];
    normalize_describe(&p->norm, nb, sizeof nb);
    snprintf(buf, cap, "flip p=%g folded into normalize %s", p->flip.p, nb);
}

static const sl_op_def op_flip_normalize = FUSED_OP_DEF(
    flip_normalize, "flip_normalize",
    "fused flip + normalize: the flip is read mirrored in normalize's pass",
    .flags = SL_OPF_RANDOM, .apply = flip_normalize_apply_phased);

/* ---- GPU decode: the CPU half (op.h, "GPU decode's CPU half") ------------------------ */

static int decode_on_gpu(const sl_op_def *def, const void *params) {
    if (def != &sl_op_decode && def != &op_decode_rrc && def != &op_decode_rrc_flip &&
        def != &op_decode_rrc_norm && def != &op_decode_rrc_flip_norm && def != &op_decode_resize)
        return 0;
    return ((const decode_opts *)params)->gpu; /* the first member of each */
}

static const char gpu_supported[] =
    "decode on the GPU fuses random_resized_crop, or resize + center_crop, then flip, then "
    "normalize (float32, layout chw or hwc) or none (uint8 HWC); other ops on the image must "
    "come before decode or be done by the consumer";

static int gpu_norm(sl_gpu_decode *g, const normalize_params *n, const char *field) {
    if (n->col != g->col)
        return sl__error(SL_EINVAL, "%s (normalize): column '%s' after decode on the GPU; %s",
                         field, n->column, gpu_supported);
    if (n->dtype != SL_F32)
        return sl__error(SL_EINVAL, "%s (normalize): the GPU decode kernel writes float32; "
                         "this normalize asks for %s (cast after it on the GPU, or decode on "
                         "the CPU)", field, sl_dtype_name(n->dtype));
    g->hwc = n->layout == SL_LAYOUT_HWC;
    if ((n->nmean != 1 && n->nmean != 3) || (n->nstd != 1 && n->nstd != 3))
        return sl__error(SL_EINVAL, "%s (normalize): mean/std have %d/%d values for an RGB "
                         "image", field, n->nmean, n->nstd);
    for (int c = 0; c < 3; c++) {
        g->mean[c] = n->mean[n->nmean == 1 ? 0 : c];
        g->std[c] = n->std[n->nstd == 1 ? 0 : c];
    }
    g->stage = 2;
    return SL_OK;
}

static int gpu_flip(sl_gpu_decode *g, const flip_params *f, uint32_t pos, const char *field) {
    if (f->col != g->col)
        return sl__error(SL_EINVAL, "%s (flip): column '%s' after decode on the GPU; %s", field,
                         f->column, gpu_supported);
    if (g->has_flip || g->stage != 1)
        return sl__error(SL_EINVAL, "%s (flip): %s", field, gpu_supported);
    g->has_flip = 1;
    g->flip_p = f->p;
    g->flip_pos = pos;
    return SL_OK;
}

static int gpu_decode_first(sl_gpu_decode *g, const sl_op_def *def, const void *params,
                            const uint32_t *pos, int nparts, const char *field) {
    const decode_opts *o = params;
    const decode_params *d = def == &sl_op_decode ? params : NULL;
    sl_color color = d                         ? d->color
                     : def == &op_decode_resize ? ((const decode_resize_params *)params)->color
                                                : ((const decode_rrc_params *)params)->color;
    if (color != SL_COLOR_RGB)
        return sl__error(SL_EINVAL, "%s (decode): \"device\": \"gpu\" decodes to RGB; mode "
                         "\"gray\" is decoded on the CPU only", field);
    if (o->exif_orientation)
        return sl__error(SL_EINVAL, "%s (decode): \"device\": \"gpu\" does not apply "
                         "exif_orientation (nvJPEG decodes the stored orientation); decode on "
                         "the CPU for it", field);
    g->warnings = o->warnings;
    if (d) {
        g->col = d->col;
        snprintf(g->column, sizeof g->column, "%s", d->column);
        return SL_OK; /* no crop fused: the chain check says what is missing */
    }
    if (def == &op_decode_resize) {
        const decode_resize_params *r = params;
        g->col = r->col;
        snprintf(g->column, sizeof g->column, "%s", r->rs.column);
        if (r->rs.interp != SL_INTERP_BILINEAR)
            return sl__error(SL_EINVAL, "%s (resize): the GPU decode kernel resamples with "
                             "\"bilinear\" only", field);
        if (!r->has_crop && r->rs.shorter)
            return sl__error(SL_EINVAL, "%s (resize): a shorter-side resize gives images of "
                             "different sizes; add a center_crop after it (%s)", field,
                             gpu_supported);
        int ch = r->has_crop ? r->cc.ch : 0, cw = r->has_crop ? r->cc.cw : 0;
        int rh = r->rs.oh, rw = r->rs.ow; /* shorter: both are the size */
        if (r->has_crop && (ch > rh || cw > rw))
            return sl__error(SL_EINVAL, "%s (center_crop): %dx%d is larger than the resized "
                             "image (%dx%d at least), so it would pad; the GPU decode kernel "
                             "does not pad", field, ch, cw, rh, rw);
        g->crop = 2;
        g->shorter = r->rs.shorter;
        g->size_h = r->rs.oh;
        g->size_w = r->rs.ow;
        g->ch = ch;
        g->cw = cw;
        g->oh = r->has_crop ? ch : rh;
        g->ow = r->has_crop ? cw : rw;
        g->stage = 1;
        return SL_OK;
    }
    const decode_rrc_params *r = params;
    g->col = r->col;
    snprintf(g->column, sizeof g->column, "%s", r->rrc.column);
    g->crop = 1;
    memcpy(g->scale, r->rrc.scale, sizeof g->scale);
    memcpy(g->ratio, r->rrc.ratio, sizeof g->ratio);
    g->rrc_pos = pos[1 < nparts ? 1 : 0];
    g->oh = r->rrc.oh;
    g->ow = r->rrc.ow;
    g->stage = 1;
    /* parts: decode, random_resized_crop, then flip and/or normalize */
    if (r->has_flip)
        SL_TRY(gpu_flip(g, &r->flip, pos[2 < nparts ? 2 : nparts - 1], field));
    if (r->has_norm)
        SL_TRY(gpu_norm(g, &r->norm, field));
    return SL_OK;
}

static int gpu_chain_add(sl_gpu_decode *g, const sl_op_def *def, const void *params,
                         const uint32_t *pos, int nparts, const char *field) {
    if (decode_on_gpu(def, params)) {
        memset(g, 0, sizeof *g);
        return gpu_decode_first(g, def, params, pos, nparts, field);
    }
    if (g->stage == 1 && def == &sl_op_flip)
        return gpu_flip(g, params, pos[0], field);
    if (g->stage == 1 && def == &sl_op_normalize)
        return gpu_norm(g, params, field);
    if (g->stage == 1 && def == &op_flip_normalize) {
        const flip_normalize_params *f = params;
        SL_TRY(gpu_flip(g, &f->flip, pos[0], field));
        return gpu_norm(g, &f->norm, field);
    }
    if (g->stage == 0)
        return sl__error(SL_EINVAL, "%s (%s): decode on the GPU needs random_resized_crop (or "
                         "resize + center_crop) right after it: %s", field, def->name,
                         gpu_supported);
    return sl__error(SL_EINVAL, "%s (%s): not supported after decode on the GPU: %s", field,
                     def->name, gpu_supported);
}

static int gpu_chain_check(sl_gpu_decode *g, sl_colset *cols, const char *field) {
    if (g->stage == 1) { /* no normalize: the CPU chain's uint8 HWC image */
        g->u8 = 1;
        g->hwc = 1;
    }
    if (g->stage < 1)
        return sl__error(SL_EINVAL, "%s (decode): \"device\": \"gpu\" needs "
                         "random_resized_crop (or resize + center_crop) after it: %s", field,
                         gpu_supported);
    sl_colinfo *ci = &cols->col[g->col];
    ci->dtype = SL_U8;
    ci->ndim = 1;
    ci->shape[0] = -1;
    ci->encoded = 1;
    ci->text = 0;
    char pname[SL_COLNAME_MAX];
    if (snprintf(pname, sizeof pname, "%s.gpu_place", g->column) >= (int)sizeof pname)
        return sl__error(SL_EINVAL, "%s.column: '%s' is too long a name for decode on the GPU",
                         field, g->column);
    int pc = sl_op_add_column(cols, pname, field);
    if (pc < 0)
        return pc;
    g->pcol = pc;
    sl_colinfo *pi = &cols->col[pc];
    memset(pi, 0, sizeof *pi);
    snprintf(pi->name, sizeof pi->name, "%s", pname);
    pi->dtype = SL_F64;
    pi->ndim = 1;
    pi->shape[0] = SL_GPU_PLACE_N;
    return SL_OK;
}

typedef sl_gpu_decode gpu_place_params;

/* GPU decode's CPU fallback decodes as the CPU op (no exif_orientation:
 * refused with "device": "gpu"). */
static int gpu_place_init(const void *params, void **state_out) {
    return make_decoder(((const sl_gpu_decode *)params)->warnings, 0, state_out);
}

/* The header, then the placement with the CPU ops' own functions and
 * generators (seed, epoch, sample key, the original op's spec position):
 * the same box and mirror as the CPU chain draws for this sample. */
static int gpu_place_apply(const void *params, void *state, sl_op_ctx *ctx, sl_sample *s) {
    const sl_gpu_decode *g = params;
    encoded e;
    SL_TRY(read_header(state, s, g->col, &e));
    sl_rng flip_rng;
    if (g->has_flip)
        sl_rng_init(&flip_rng, ctx->seed, ctx->epoch, ctx->key, g->flip_pos);
    sl_place pl;
    int H = e.info.height, W = e.info.width;
    if (g->crop == 1) {
        sl_rng box_rng;
        sl_rng_init(&box_rng, ctx->seed, ctx->epoch, ctx->key, g->rrc_pos);
        int rc = sl_place_rrc(H, W, g->scale, g->ratio, g->oh, g->ow, &box_rng, g->flip_p,
                              g->has_flip ? &flip_rng : NULL, &pl);
        if (rc < 0)
            return cause_only(rc);
    } else {
        sl_place_resize_crop(H, W, g->shorter, g->size_h, g->size_w, g->ch, g->cw, &pl);
        if (pl.pads) /* refused at plan time (gpu_chain_add) */
            return sl__error(SL_EINVAL, "center_crop pads this %dx%d image", W, H);
        pl.mirror = g->has_flip && sl_rng_uniform(&flip_rng) < g->flip_p;
    }
    sl_tensor t;
    int64_t shape[1] = {SL_GPU_PLACE_N};
    SL_TRY(sl_op_alloc(ctx, &t, SL_F64, 1, shape));
    double *v = t.data;
    for (int k = 0; k < 4; k++) {
        v[SL_GPU_PLACE_BOX + k] = pl.box[k];
        v[SL_GPU_PLACE_LIM + k] = pl.lim[k];
    }
    v[SL_GPU_PLACE_FLIP] = pl.mirror;
    v[SL_GPU_PLACE_H] = H;
    v[SL_GPU_PLACE_W] = W;
    v[SL_GPU_PLACE_RECORD] = (double)ctx->index;
    v[SL_GPU_PLACE_POS] = (double)ctx->stream_pos;
    /* a new column: what lies past ncols is stale (released samples are not
     * zeroed), and sl_op_set_column would release it again */
    for (uint32_t c = s->ncols; c <= (uint32_t)g->pcol; c++)
        memset(&s->col[c], 0, sizeof s->col[c]);
    sl_op_set_column(s, g->pcol, &t);
    return SL_OK;
}
PHASED(gpu_place_apply, SL_PHASE_DECODE)

static void gpu_place_describe(const void *params, char *buf, size_t cap) {
    const sl_gpu_decode *g = params;
    char fb[32] = "";
    if (g->has_flip)
        snprintf(fb, sizeof fb, ", flip p=%g", g->flip_p);
    const char *out = g->u8 ? "uint8 hwc" : g->hwc ? "normalize float32 hwc"
                                                    : "normalize float32 chw";
    if (g->crop == 1)
        snprintf(buf, cap, "headers + placements on the CPU, decode on the GPU: "
                 "random_resized_crop %dx%d scale=[%g,%g] ratio=[%g,%g]%s, %s",
                 g->oh, g->ow, g->scale[0], g->scale[1], g->ratio[0], g->ratio[1], fb, out);
    else
        snprintf(buf, cap, "headers + placements on the CPU, decode on the GPU: resize %s%dx%d"
                 ", center_crop %dx%d%s, %s", g->shorter ? "shorter side " : "",
                 g->size_h, g->size_w, g->oh, g->ow, fb, out);
}

const sl_op_def sl_op_gpu_decode_place = FUSED_OP_DEF(
    gpu_place, "gpu_decode_place",
    "decode on the GPU, its CPU half: each JPEG's header and placement (box, "
    "mirror) beside its bytes; the device hand-off decodes the batch",
    .flags = SL_OPF_RANDOM, .worker_init = gpu_place_init, .worker_free = decoder_free,
    .apply = gpu_place_apply_phased);

/* The decode ops' chain hook (sl_op_def.chain): a decode op with "device":
 * "gpu", as fused, and the flip / normalize nodes after it become one
 * gpu_decode_place node: the CPU reads headers and draws placements, the
 * device hand-off decodes. Only the ops the GPU kernel does may follow it per
 * sample; the sequential ops (batch, prefetch, take, skip) may follow. The
 * image column leaves the chain as encoded bytes, plus a column of
 * placements, `<image>.gpu_place`, which the hand-off consumes. */
static int gpu_chain(const void *params, const sl_op_chain *in, sl_op_chain_out *out) {
    if (!decode_on_gpu(in->node[0].def, params))
        return 0;
    sl_gpu_decode g;
    memset(&g, 0, sizeof g);
    int end = 0;
    for (; end < in->n; end++) {
        const sl_op_chain_node *nd = &in->node[end];
        char field[32];
        snprintf(field, sizeof field, "ops[%d]", nd->pos);
        if (nd->seq)
            break; /* batch, prefetch, take, skip, shuffle_buffer */
        if (!nd->def)
            return sl__error(SL_EINVAL, "%s (%s): not supported after decode on the GPU (only "
                             "flip and normalize on the image, then batch, prefetch, take and "
                             "skip, may follow it)", field, nd->label);
        SL_TRY(gpu_chain_add(&g, nd->def, nd->params, nd->parts, nd->nparts, field));
    }
    for (int i = end; i < in->n; i++) {
        const sl_op_chain_node *nd = &in->node[i];
        if (!nd->seq)
            return sl__error(SL_EINVAL, "ops[%d] (%s): not supported after decode on the GPU "
                             "(only flip and normalize on the image, then batch, prefetch, "
                             "take and skip, may follow it)", nd->pos, nd->label);
    }
    char field[32];
    snprintf(field, sizeof field, "ops[%d]", in->node[0].pos);
    /* the columns out of the new node: the image stays encoded bytes, the
     * placements are added */
    out->cols = *in->node[end - 1].cols;
    SL_TRY(gpu_chain_check(&g, &out->cols, field));
    /* the remainder is dropped after the hand-off refilled the batches past
     * skipped samples, as the CPU path drops it after its own skips */
    g.drop_remainder = in->drop_remainder;
    /* what the consumer gets: the hand-off decodes the image column and
     * takes the placements (the last column) out */
    sl_colset oc = out->cols;
    sl_colinfo *ci = &oc.col[g.col];
    ci->dtype = g.u8 ? SL_U8 : SL_F32;
    ci->ndim = 3;
    ci->shape[0] = g.hwc ? g.oh : 3;
    ci->shape[1] = g.hwc ? g.ow : g.oh;
    ci->shape[2] = g.hwc ? 3 : g.ow;
    ci->encoded = 0;
    if (g.pcol == oc.ncols - 1)
        oc.ncols--;
    sl_gpu_decode *p = sl__calloc(1, sizeof *p);
    if (!p)
        return sl__oom("planning decode on the GPU");
    *p = g;
    out->taken = end;
    out->def = &sl_op_gpu_decode_place;
    out->params = p;
    snprintf(out->label, sizeof out->label, "decode(gpu)");
    out->handoff = 1;
    out->takes_drop_remainder = 1;
    out->consumer_cols = oc;
    out->consumer_note = " (the images decoded on the GPU at the hand-off)";
    return 1;
}
