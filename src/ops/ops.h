/*
 * ops.h — internals shared by the image ops (src/ops/). Never installed.
 */
#ifndef SL_OPS_H
#define SL_OPS_H

#include "core/core.h"

/* Fill `out` for a result of the given dtype and shape, following the
 * "Output tensors" rule of sluice.h: allocate when out->data is NULL, else
 * check the caller's capacity (out->nbytes). On success *allocated tells
 * whether the caller must release `out` if a later step fails. */
int sl_ops__out_prepare(sl_tensor *out, sl_dtype dtype, int ndim, const int64_t *shape,
                        const char *op, int *allocated);

/* A per-thread scratch block of at least `n` bytes (64-byte aligned), reused
 * across calls and freed when the thread exits; NULL on OOM. Callers must not
 * nest uses: the block is the same for every caller on a thread. */
void *sl_ops__scratch(size_t n);

/* Check that `t` is an HWC SL_U8 image with 1..4 channels on the CPU. */
int sl_ops__check_image(const sl_tensor *t, const char *op);

/* float32 -> IEEE half, round to nearest even. */
uint16_t sl_ops__f32_to_f16(float f);
/* float32 <-> bfloat16, rounding to nearest even (torch's conversion). */
uint16_t sl_ops__f32_to_bf16(float f);
float sl_ops__bf16_to_f32(uint16_t h);

/* A normalized float32 output for the resampler: each output byte v of
 * channel c is written as lut[c][v] (sl_ops__norm_lut: exactly what
 * sl_image_normalize gives), in `layout` (CHW planes or HWC), each row
 * mirrored when `mirror` (a horizontal flip). With it, resampling writes the
 * normalized image in one pass: no uint8 image, no separate normalize pass. */
typedef struct {
    const float (*lut)[256];
    sl_layout layout;
    int mirror;
} sl_ops__norm;

/* The tables of sl_ops__norm: lut[c][i] = (i / 255 - mean[c]) / std[c] in
 * float32 (torchvision's ToTensor + Normalize). */
void sl_ops__norm_lut(float lut[][256], int C, const float *mean, const float *std);

/* Row y (of H, W pixels of C bytes in `row`) of a normalized float32 image
 * at `out`. CHW rows are written with streaming stores: call
 * sl_ops__norm_done() before the image is handed to another thread. */
void sl_ops__norm_row(const sl_ops__norm *nm, const uint8_t *row, int C, int W, int H, int y,
                      float *out);
void sl_ops__norm_done(void);

/* Instruction sets of the hand-written kernels (resize.c, normalize.c), in
 * order: each level's CPUs have the ones below it. */
enum {
    SL_OPS_SCALAR = 0,
    SL_OPS_SSE41 = 1,
    SL_OPS_AVX2 = 2,
    SL_OPS_AVX512 = 3 /* AVX-512 F, BW and VL */
};

/* The level the kernels use: the best the CPU has (checked once, with
 * sl__cpu_features), capped by the environment variable SLUICE_SIMD
 * (scalar, sse4.1, avx2 or avx512, read once) and by sl_ops__simd_max. */
int sl_ops__simd(void);
/* 1 when the CPU also has AVX-512 VBMI (byte permutes; normalize's
 * AVX-512 path needs it). */
int sl_ops__cpu_vbmi(void);
/* Test hook: caps the level (default SL_OPS_AVX512: no cap), so that tests
 * compare every path with the scalar one on the same machine. */
extern int sl_ops__simd_max;
/* Test hook: the calling thread's calls of each hand-written kernel by
 * level (SL_OPS_SSE41 .. SL_OPS_AVX512), counted per call (a pass or a
 * row, not a pixel; thread-local, so no thread waits on another), so that
 * a test can tell a SIMD pass that ran from a silent fall back to the
 * scalar code, whose pixels are the same. */
enum { SL_OPS_K_HPASS = 0, SL_OPS_K_VPASS = 1, SL_OPS_K_NORM = 2, SL_OPS_NKERNELS = 3 };
extern _Thread_local unsigned long sl_ops__simd_calls[SL_OPS_NKERNELS][4];
#define SL_OPS__COUNT(k, level) (sl_ops__simd_calls[k][level]++)

/* 1 when `interp` is one of PIL's filters (the resampler's). */
int sl_ops__interp_pil(sl_interp interp);

/* The resampling kernel behind sl_image_resize*.
 * `src` has sh rows of sw pixels with C channels, row stride `sstride` bytes.
 * `box` (x0, y0, x1, y1) is the source region mapped onto the output (PIL's
 * box, in float32 like PIL); `lim` (x0, y0, x1, y1) bounds the source pixels
 * the filter may read: (0, 0, sw, sh) reads around the box as PIL does,
 * the box's own (integer) edges reproduce crop-then-resize.
 * With `norm` NULL, `dst` gets uint8 HWC rows `dstride` bytes apart; else
 * `dst` is the float32 image `norm` describes (dstride unused). */
int sl_ops__resample(const uint8_t *src, int sh, int sw, size_t sstride, int C,
                     const double box[4], const int lim[4], int oh, int ow, sl_interp interp,
                     void *dst, size_t dstride, const sl_ops__norm *norm);

/* Fused decode + resample of the region `box` (x0, y0, x1, y1 in original
 * pixels, fractional allowed) into `out` (out_h x out_w x color bytes),
 * reading no source pixel outside `lim` (x0, y0, x1, y1): lim = the box's
 * own edges reproduces crop-then-resize; lim = the whole image reproduces
 * resize-then-crop. JPEG: DCT-scaled, region-of-interest decode. With
 * `norm`, `out` is the normalized float32 image it describes instead. */
int sl_ops__decode_box(sl_decoder *dec, const void *data, size_t size, sl_color color,
                       const double box[4], const int lim[4], int out_h, int out_w,
                       sl_interp interp, void *out, const sl_ops__norm *norm);

/* sl_image_normalize with an optional horizontal mirror folded in. */
int sl_ops__normalize(const sl_tensor *src, const float *mean, const float *std,
                      sl_layout layout, sl_dtype dtype, int mirror, sl_tensor *out);

/* RGB row -> PIL "L" (ITU-R 601-2, PIL's fixed-point rounding). `dst` may
 * alias `src` (it is written behind the read position). */
void sl_ops__rgb_to_gray(const uint8_t *src, uint8_t *dst, size_t npix);

/* ---- per-phase timing (the op split of `sluice bench`, docs/OPS.md "Speed")
 * A worker times one sample in 8 (sl_ops__phase_sample); for it, each
 * phase's time is added to this thread's counters, exclusive of the phases
 * nested inside it (a fused decode's phase is its time less the resample
 * and normalize inside). The engine moves the counters into the stage's
 * after each unit of work (sl_stage__phases_take). Untimed samples pay
 * one thread-local test per phase. */
enum { SL_PHASE_DECODE, SL_PHASE_RESAMPLE, SL_PHASE_NORMALIZE, SL_NPHASES };
/* The phases' keys in the stats JSON's op split ("decode_us", ...). */
extern const char *const sl_ops__phase_key[SL_NPHASES];

typedef struct sl_ops__phases {
    uint64_t ns[SL_NPHASES];
    uint64_t all_ns;       /* the timed samples' whole per-sample op chain (the
                              engine's, around every op of it: phases + rest) */
    uint64_t samples;      /* timed samples */
    uint64_t last_epoch, last_key; /* the last one counted (+1; 0: none) */
} sl_ops__phases;

extern _Thread_local int sl_ops__timing;              /* 1: time this sample */
extern _Thread_local sl_ops__phases sl_ops__phase_acc; /* this thread's counters */

/* Decide whether the sample (epoch, key) is timed ((key + epoch) % 8 == 0:
 * a different eighth of the dataset each epoch) and, the first time an op
 * of it asks, count it; sets sl_ops__timing. */
void sl_ops__phase_sample(uint64_t epoch, uint64_t key);

typedef struct {
    int on;             /* timed */
    uint64_t t0, inner; /* start; the phases' total then */
} sl_ops__span;

static inline uint64_t sl_ops__phase_total(void) {
    const sl_ops__phases *a = &sl_ops__phase_acc;
    return a->ns[SL_PHASE_DECODE] + a->ns[SL_PHASE_RESAMPLE] + a->ns[SL_PHASE_NORMALIZE];
}

static inline void sl_ops__phase_open(sl_ops__span *sp) {
    sp->on = sl_ops__timing;
    sp->t0 = sp->on ? sl__now_ns() : 0;
    sp->inner = sp->on ? sl_ops__phase_total() : 0;
}

static inline void sl_ops__phase_close(const sl_ops__span *sp, int phase) {
    if (sp->on) {
        uint64_t dt = sl__now_ns() - sp->t0, nested = sl_ops__phase_total() - sp->inner;
        sl_ops__phase_acc.ns[phase] += dt > nested ? dt - nested : 0;
    }
}

#endif /* SL_OPS_H */
