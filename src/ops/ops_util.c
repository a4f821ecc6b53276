/* ops_util.c — output tensors, per-thread scratch, half floats. */
#include "ops/ops.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

int sl_ops__out_prepare(sl_tensor *out, sl_dtype dtype, int ndim, const int64_t *shape,
                        const char *op, int *allocated) {
    size_t need = sl_dtype_size(dtype);
    *allocated = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || !sl__mul_ok(need, (size_t)shape[i], &need))
            return sl__error(SL_EINVAL, "%s: output too large", op);
    }
    if (out->data == NULL) {
        SL_TRY(sl_tensor_alloc(out, dtype, ndim, shape));
        *allocated = 1;
        return SL_OK;
    }
    if (out->nbytes < need)
        return sl__error(SL_EINVAL, "%s: destination holds %zu bytes, result needs %zu", op,
                         out->nbytes, need);
    out->dtype = dtype;
    out->ndim = ndim;
    for (int i = 0; i < SL_MAX_DIMS; i++)
        out->shape[i] = i < ndim ? shape[i] : 0;
    out->nbytes = need;
    if (out->device == 0)
        out->device = SL_DEVICE_CPU;
    return SL_OK;
}

int sl_ops__check_image(const sl_tensor *t, const char *op) {
    if (!t || !t->data || t->dtype != SL_U8 || t->ndim != 3 || t->shape[0] <= 0 ||
        t->shape[1] <= 0 || t->shape[2] < 1 || t->shape[2] > 4)
        return sl__error(SL_EINVAL, "%s: expected an HWC uint8 image with 1-4 channels", op);
    if (t->shape[0] > INT32_MAX || t->shape[1] > INT32_MAX)
        return sl__error(SL_EINVAL, "%s: image too large", op);
    return SL_OK;
}

/* Scratch: one block per thread. The pthread key exists only so that the
 * block is freed when a worker thread exits; the fast path reads the
 * _Thread_local copy. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static _Thread_local void *scratch_ptr;
static _Thread_local size_t scratch_cap;

static void scratch_destroy(void *p) { sl__free(p); }
static void scratch_init(void) { (void)pthread_key_create(&scratch_key, scratch_destroy); }

void *sl_ops__scratch(size_t n) {
    if (SL_LIKELY(n <= scratch_cap))
        return scratch_ptr;
    pthread_once(&scratch_once, scratch_init);
    size_t cap = scratch_cap ? scratch_cap : 4096;
    while (cap < n)
        cap = cap > SIZE_MAX / 2 ? n : cap * 2;
    void *p = sl__aligned_alloc(64, cap);
    if (!p)
        return NULL;
    sl__free(scratch_ptr);
    scratch_ptr = p;
    scratch_cap = cap;
    (void)pthread_setspecific(scratch_key, p);
    return p;
}

uint16_t sl_ops__f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000u;
        int shift = 14 - e;
        uint32_t h = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* may carry into the exponent, which is the right rounding */
    return (uint16_t)(sign | h);
}

uint16_t sl_ops__f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, sign kept (as torch does) */
        return (uint16_t)((x >> 16) | 0x40u);
    /* round to nearest, ties to even, on the 16 bits dropped; an overflow
     * carries into the exponent and gives infinity, the right rounding */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float sl_ops__bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

void sl_ops__rgb_to_gray(const uint8_t *src, uint8_t *dst, size_t npix) {
    /* PIL's L24: weights 0.299/0.587/0.114 in 16-bit fixed point, rounded. */
    for (size_t i = 0; i < npix; i++) {
        const uint8_t *p = src + 3 * i;
        dst[i] = (uint8_t)((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
    }
}

/* ---- SIMD level ----------------------------------------------------------- */

int sl_ops__simd_max = SL_OPS_AVX512;
_Thread_local unsigned long sl_ops__simd_calls[SL_OPS_NKERNELS][4];

/* Several threads may ask at once; they all compute the same answer. */
static _Atomic int simd_cached = -1;

static int simd_detect(void) {
    int level = SL_OPS_SCALAR;
    unsigned f = sl__cpu_features();
    if (f & SL_CPU_SSE41)
        level = SL_OPS_SSE41;
    if (level == SL_OPS_SSE41 && (f & SL_CPU_AVX2))
        level = SL_OPS_AVX2;
    const unsigned avx512 = SL_CPU_AVX512F | SL_CPU_AVX512BW | SL_CPU_AVX512VL;
    if (level == SL_OPS_AVX2 && (f & avx512) == avx512)
        level = SL_OPS_AVX512;
    /* SLUICE_SIMD's values are the levels in order (-1: unset) */
    int cap = sl__setting_choice("SLUICE_SIMD");
    return cap >= 0 && cap < level ? cap : level;
}

int sl_ops__simd(void) {
    int v = atomic_load_explicit(&simd_cached, memory_order_relaxed);
    if (SL_UNLIKELY(v < 0)) {
        v = simd_detect();
        atomic_store_explicit(&simd_cached, v, memory_order_relaxed);
    }
    return v < sl_ops__simd_max ? v : sl_ops__simd_max;
}

int sl_ops__cpu_vbmi(void) { return (sl__cpu_features() & SL_CPU_AVX512VBMI) != 0; }

/* ---- per-phase timing ------------------------------------------------------ */

_Thread_local int sl_ops__timing;
_Thread_local sl_ops__phases sl_ops__phase_acc;

const char *const sl_ops__phase_key[SL_NPHASES] = {"decode_us", "resample_us", "normalize_us"};

void sl_ops__phase_sample(uint64_t epoch, uint64_t key) {
    sl_ops__timing = ((key + epoch) & 7) == 0; /* a different eighth each epoch */
    sl_ops__phases *a = &sl_ops__phase_acc;
    if (sl_ops__timing && (a->last_epoch != epoch + 1 || a->last_key != key + 1)) {
        a->samples++;
        a->last_epoch = epoch + 1;
        a->last_key = key + 1;
    }
}
