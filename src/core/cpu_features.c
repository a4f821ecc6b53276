/*
 * cpu_features.c — which SIMD instruction sets this CPU and its OS support,
 * for the kernels that pick one at run time (CRC-32C, resize, normalize).
 *
 * Read with cpuid and xgetbv here rather than __builtin_cpu_supports: that
 * builtin reads a table the compiler's runtime fills, and a build whose
 * runtime leaves it empty (zig cc's compiler-rt, which the wheels are built
 * with: scripts/wheel.sh) silently runs the scalar kernels. An instruction
 * set counts only when the OS saves its registers (XCR0), as Intel's manual
 * asks ("Detection of AVX2", "Detection of AVX-512").
 */
#include "core/core.h"

#include <stdatomic.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

static unsigned long long xcr0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static unsigned detect(void) {
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    if (c & bit_SSE4_1)
        f |= SL_CPU_SSE41;
    if (c & bit_SSE4_2)
        f |= SL_CPU_SSE42;
    if (!(c & bit_OSXSAVE) || !(c & bit_AVX))
        return f;
    unsigned long long x = xcr0();
    int ymm = (x & 0x6) == 0x6;   /* SSE and AVX state */
    int zmm = (x & 0xe6) == 0xe6; /* and opmask, ZMM0-15 upper halves, ZMM16-31 */
    if (!ymm || __get_cpuid_max(0, NULL) < 7)
        return f;
    __cpuid_count(7, 0, a, b, c, d);
    if (b & bit_AVX2)
        f |= SL_CPU_AVX2;
    if (zmm) {
        if (b & bit_AVX512F)
            f |= SL_CPU_AVX512F;
        if (b & bit_AVX512BW)
            f |= SL_CPU_AVX512BW;
        if (b & bit_AVX512VL)
            f |= SL_CPU_AVX512VL;
        if (c & bit_AVX512VBMI)
            f |= SL_CPU_AVX512VBMI;
    }
    return f;
}
#else
static unsigned detect(void) { return 0; }
#endif

/* Several threads may ask at once; they all compute the same answer. */
static _Atomic int cached = -1;

unsigned sl__cpu_features(void) {
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (SL_UNLIKELY(v < 0)) {
        v = (int)detect();
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return (unsigned)v;
}
