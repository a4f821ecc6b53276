/*
 * shuffle_window.c — the order of records: the keyed bijection both shuffles
 * are made of (sl_feistel), the global order a chunk of positions at a time,
 * and the windowed shuffle (mode "window"), whose order of a pass is computed
 * position by position from (seed, epoch, pass) without the O(records)
 * permutation table of a stored shuffle. Hand-written: a Feistel network is
 * a few lines and no library offers a keyed bijection of an arbitrary range;
 * its chunk form is hand-vectorized because the global order runs it once
 * per sample, 16 multiplies deep, under the reading threads' lock.
 */
#include "pipeline/shuffle_window.h"

#include "ops/ops.h"
#include "sluice.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SL_FEISTEL_X86 1
#endif

/* 4 rounds by default: a Feistel network of 4 rounds of pseudo-random
 * functions is a pseudo-random permutation (Luby-Rackoff); each round costs
 * one mix64 (sl__mix64, SplitMix64's finaliser). */
#define ROUNDS 4

static inline uint64_t mix64(uint64_t z) { return sl__mix64(z); }

void sl_feistel_init_rounds(sl_feistel *f, uint64_t n, unsigned rounds, uint64_t seed,
                            uint64_t epoch, uint64_t index, uint64_t op) {
    f->n = n;
    unsigned bits = n > 1 ? 64u - (unsigned)__builtin_clzll(n - 1) : 1u;
    f->rbits = (bits + 1) / 2;
    unsigned lbits = bits - f->rbits;
    f->rmask = (1ull << f->rbits) - 1; /* rbits <= 32 */
    f->lmask = (1ull << lbits) - 1;
    if (rounds < 2)
        rounds = 2;
    if (rounds > SL_FEISTEL_MAX_ROUNDS)
        rounds = SL_FEISTEL_MAX_ROUNDS;
    f->rounds = rounds & ~1u;
    sl_rng rng;
    sl_rng_init(&rng, seed, epoch, index, op);
    for (unsigned i = 0; i < f->rounds; i++)
        f->key[i] = sl_rng_next(&rng);
}

void sl_feistel_init(sl_feistel *f, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t index,
                     uint64_t op) {
    sl_feistel_init_rounds(f, n, ROUNDS, seed, epoch, index, op);
}

/* Even rounds change the left half, odd rounds the right one. */
static uint64_t rounds_fwd(const sl_feistel *f, uint64_t x) {
    uint64_t l = x >> f->rbits, r = x & f->rmask;
    for (unsigned i = 0; i < f->rounds; i += 2) {
        l ^= mix64(r ^ f->key[i]) & f->lmask;
        r ^= mix64(l ^ f->key[i + 1]) & f->rmask;
    }
    return (l << f->rbits) | r;
}

static uint64_t rounds_inv(const sl_feistel *f, uint64_t y) {
    uint64_t l = y >> f->rbits, r = y & f->rmask;
    for (int i = (int)f->rounds - 2; i >= 0; i -= 2) {
        r ^= mix64(l ^ f->key[i + 1]) & f->rmask;
        l ^= mix64(r ^ f->key[i]) & f->lmask;
    }
    return (l << f->rbits) | r;
}

/* Cycle walking: the rounds permute [0, 2^bits); applied again until the
 * value is below n, they permute [0, n). `inv` is a constant at each call,
 * so each direction inlines without a branch. */
static inline __attribute__((always_inline)) uint64_t cycle_walk(const sl_feistel *f,
                                                                 uint64_t x, int inv) {
    if (f->n <= 1)
        return x;
    do
        x = inv ? rounds_inv(f, x) : rounds_fwd(f, x);
    while (x >= f->n);
    return x;
}

uint64_t sl_feistel_fwd(const sl_feistel *f, uint64_t x) { return cycle_walk(f, x, 0); }

/* ---- many indices at once ----------------------------------------------------------------- *
 * One index's rounds are a chain of 2 * rounds dependent mix64s (about 15
 * cycles each): computed one index after another, the CPU waits on that
 * chain and mispredicts the cycle walk's branch. sl_feistel_fwd_n applies
 * the rounds to a whole block of values, many chains in flight (SIMD lanes
 * or interleaved scalar ones), then walks again only the values still >= n,
 * gathered together. Every path gives exactly sl_feistel_fwd's values
 * (tests/pipeline/test_shuffle_window.c compares them on every level the
 * CPU has). */

/* rounds_fwd over x[0..n) in place; what the paths below share. */
typedef void (*rounds_many_fn)(const sl_feistel *f, uint64_t *x, size_t n);

/* Portable: four chains in lockstep, so their multiplies overlap. */
static void rounds_many_c(const sl_feistel *f, uint64_t *x, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint64_t l[4], r[4];
        for (int k = 0; k < 4; k++) {
            l[k] = x[i + k] >> f->rbits;
            r[k] = x[i + k] & f->rmask;
        }
        for (unsigned j = 0; j < f->rounds; j += 2) {
            for (int k = 0; k < 4; k++)
                l[k] ^= mix64(r[k] ^ f->key[j]) & f->lmask;
            for (int k = 0; k < 4; k++)
                r[k] ^= mix64(l[k] ^ f->key[j + 1]) & f->rmask;
        }
        for (int k = 0; k < 4; k++)
            x[i + k] = (l[k] << f->rbits) | r[k];
    }
    for (; i < n; i++)
        x[i] = rounds_fwd(f, x[i]);
}

#ifdef SL_FEISTEL_X86
/* AVX2 has no 64-bit multiply: a * c = lo(a)lo(c) + (hi(a)lo(c) + lo(a)hi(c)) << 32. */
__attribute__((target("avx2"))) static inline __m256i mul64_avx2(__m256i a, __m256i clo,
                                                                  __m256i chi) {
    __m256i lo = _mm256_mul_epu32(a, clo);
    __m256i mid = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), clo),
                                   _mm256_mul_epu32(a, chi));
    return _mm256_add_epi64(lo, _mm256_slli_epi64(mid, 32));
}

__attribute__((target("avx2"))) static inline __m256i mix64_avx2(__m256i z) {
    const __m256i c1 = _mm256_set1_epi64x((long long)0xbf58476d1ce4e5b9ull),
                  c1h = _mm256_set1_epi64x((long long)(0xbf58476d1ce4e5b9ull >> 32)),
                  c2 = _mm256_set1_epi64x((long long)0x94d049bb133111ebull),
                  c2h = _mm256_set1_epi64x((long long)(0x94d049bb133111ebull >> 32));
    z = mul64_avx2(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), c1, c1h);
    z = mul64_avx2(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), c2, c2h);
    return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

/* 4 lanes, two vectors in flight. */
__attribute__((target("avx2"))) static void rounds_many_avx2(const sl_feistel *f, uint64_t *x,
                                                             size_t n) {
    const __m128i rb = _mm_cvtsi32_si128((int)f->rbits);
    const __m256i lm = _mm256_set1_epi64x((long long)f->lmask),
                  rm = _mm256_set1_epi64x((long long)f->rmask);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(x + i)),
                v1 = _mm256_loadu_si256((const __m256i *)(x + i + 4));
        __m256i l0 = _mm256_srl_epi64(v0, rb), r0 = _mm256_and_si256(v0, rm);
        __m256i l1 = _mm256_srl_epi64(v1, rb), r1 = _mm256_and_si256(v1, rm);
        for (unsigned j = 0; j < f->rounds; j += 2) {
            const __m256i ka = _mm256_set1_epi64x((long long)f->key[j]),
                          kb = _mm256_set1_epi64x((long long)f->key[j + 1]);
            l0 = _mm256_xor_si256(l0, _mm256_and_si256(mix64_avx2(_mm256_xor_si256(r0, ka)), lm));
            l1 = _mm256_xor_si256(l1, _mm256_and_si256(mix64_avx2(_mm256_xor_si256(r1, ka)), lm));
            r0 = _mm256_xor_si256(r0, _mm256_and_si256(mix64_avx2(_mm256_xor_si256(l0, kb)), rm));
            r1 = _mm256_xor_si256(r1, _mm256_and_si256(mix64_avx2(_mm256_xor_si256(l1, kb)), rm));
        }
        _mm256_storeu_si256((__m256i *)(x + i), _mm256_or_si256(_mm256_sll_epi64(l0, rb), r0));
        _mm256_storeu_si256((__m256i *)(x + i + 4), _mm256_or_si256(_mm256_sll_epi64(l1, rb), r1));
    }
    rounds_many_c(f, x + i, n - i);
}

/* AVX-512 DQ multiplies 64-bit lanes (vpmullq, about 15 cycles of latency):
 * 8 lanes, four vectors in flight. */
__attribute__((target("avx512f,avx512dq"))) static inline __m512i mix64_avx512(__m512i z) {
    const __m512i c1 = _mm512_set1_epi64((long long)0xbf58476d1ce4e5b9ull),
                  c2 = _mm512_set1_epi64((long long)0x94d049bb133111ebull);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), c1);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), c2);
    return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

__attribute__((target("avx512f,avx512dq"))) static void
rounds_many_avx512(const sl_feistel *f, uint64_t *x, size_t n) {
    enum { V = 4 };
    const __m128i rb = _mm_cvtsi32_si128((int)f->rbits);
    const __m512i lm = _mm512_set1_epi64((long long)f->lmask),
                  rm = _mm512_set1_epi64((long long)f->rmask);
    size_t i = 0;
    for (; i < n; i += 8 * V) {
        __m512i l[V], r[V];
        __mmask8 m[V];
        for (int k = 0; k < V; k++) {
            size_t at = i + 8 * (size_t)k, left = at < n ? n - at : 0;
            m[k] = left >= 8 ? (__mmask8)0xff : (__mmask8)((1u << left) - 1);
            __m512i v = _mm512_maskz_loadu_epi64(m[k], x + at);
            l[k] = _mm512_srl_epi64(v, rb);
            r[k] = _mm512_and_si512(v, rm);
        }
        for (unsigned j = 0; j < f->rounds; j += 2) {
            const __m512i ka = _mm512_set1_epi64((long long)f->key[j]),
                          kb = _mm512_set1_epi64((long long)f->key[j + 1]);
            for (int k = 0; k < V; k++)
                l[k] = _mm512_xor_si512(
                    l[k], _mm512_and_si512(mix64_avx512(_mm512_xor_si512(r[k], ka)), lm));
            for (int k = 0; k < V; k++)
                r[k] = _mm512_xor_si512(
                    r[k], _mm512_and_si512(mix64_avx512(_mm512_xor_si512(l[k], kb)), rm));
        }
        for (int k = 0; k < V; k++)
            _mm512_mask_storeu_epi64(x + i + 8 * (size_t)k, m[k],
                                     _mm512_or_si512(_mm512_sll_epi64(l[k], rb), r[k]));
    }
}
#endif

/* The path for this CPU (SL_OPS_* of ops/ops.h): sl_ops__simd, the best
 * level the CPU has (checked once), capped by SLUICE_SIMD and the tests'
 * sl_ops__simd_max; AVX-512 also needs DQ for its 64-bit multiply. */
int sl_feistel__many_level(void) {
    int level = SL_OPS_SCALAR;
#ifdef SL_FEISTEL_X86
    level = sl_ops__simd();
    if (level >= SL_OPS_AVX512 && !__builtin_cpu_supports("avx512dq"))
        level = SL_OPS_AVX2;
    if (level < SL_OPS_AVX2)
        level = SL_OPS_SCALAR;
#endif
    return level;
}

static rounds_many_fn rounds_many_pick(void) {
#ifdef SL_FEISTEL_X86
    switch (sl_feistel__many_level()) {
    case SL_OPS_AVX512:
        return rounds_many_avx512;
    case SL_OPS_AVX2:
        return rounds_many_avx2;
    }
#endif
    return rounds_many_c;
}

/* Values walked together: the rounds' block and the cycle walk's lists. */
#define MANY_BLOCK 256

void sl_feistel_fwd_n(const sl_feistel *f, uint64_t *x, size_t n) {
    if (f->n <= 1)
        return;
    const rounds_many_fn rounds_many = rounds_many_pick();
    uint64_t again[MANY_BLOCK];
    uint32_t at[MANY_BLOCK];
    for (size_t s = 0; s < n; s += MANY_BLOCK) {
        uint64_t *v = x + s;
        const size_t m = n - s < MANY_BLOCK ? n - s : MANY_BLOCK;
        rounds_many(f, v, m);
        /* cycle walking: the values still >= n, listed without a branch,
         * take their next steps together */
        size_t np = 0;
        for (size_t i = 0; i < m; i++) {
            at[np] = (uint32_t)i;
            np += v[i] >= f->n;
        }
        while (np) {
            for (size_t j = 0; j < np; j++)
                again[j] = v[at[j]];
            rounds_many(f, again, np);
            size_t k = 0;
            for (size_t j = 0; j < np; j++) {
                v[at[j]] = again[j];
                at[k] = at[j];
                k += again[j] >= f->n;
            }
            np = k;
        }
    }
}

uint64_t sl_feistel_inv(const sl_feistel *f, uint64_t y) { return cycle_walk(f, y, 1); }

/* Keys of the two levels: distinct op values, so that the block order and
 * the windows' orders are independent draws of (seed, epoch, pass). */
#define BLOCK_OP 0xfffffffffffffff2ull
#define WINDOW_OP 0xfffffffffffffff3ull

void sl_wshuf_init(sl_wshuf *w, uint64_t m, uint64_t window, uint64_t block, uint64_t seed,
                   uint64_t epoch, uint64_t rep) {
    w->m = m;
    w->window = window ? window : 1;
    w->block = block ? block : 1;
    w->seed = seed;
    w->epoch = epoch;
    w->rep = rep;
    w->nblocks = m ? (m + w->block - 1) / w->block : 0;
    w->lastlen = m ? m - (w->nblocks - 1) * w->block : 0;
    sl_feistel_init(&w->blocks, w->nblocks, seed, epoch, rep, BLOCK_OP);
    /* the short block's place in the permuted sequence */
    w->short_at = w->nblocks ? sl_feistel_inv(&w->blocks, w->nblocks - 1) : 0;
    w->win_t = UINT64_MAX;
}

uint64_t sl_wshuf_at(sl_wshuf *w, uint64_t q) {
    /* 1. within its window */
    uint64_t t = q / w->window, u = q % w->window, start = t * w->window;
    if (t != w->win_t) {
        uint64_t len = w->m - start < w->window ? w->m - start : w->window;
        /* the window's key mixes pass and window number (index argument) */
        sl_feistel_init(&w->win, len, w->seed, w->epoch,
                        mix64(w->rep * 0x9e3779b97f4a7c15ull + t), WINDOW_OP);
        w->win_t = t;
    }
    uint64_t q2 = start + sl_feistel_fwd(&w->win, u);
    /* 2. the permuted block sequence: blocks before the short one are full,
     * those after it start lastlen - block earlier */
    uint64_t b = w->block, s = w->short_at, k, o;
    if (q2 < s * b) {
        k = q2 / b;
        o = q2 % b;
    } else if (q2 < s * b + w->lastlen) {
        k = s;
        o = q2 - s * b;
    } else {
        uint64_t q3 = q2 - w->lastlen + b;
        k = q3 / b;
        o = q3 % b;
    }
    return sl_feistel_fwd(&w->blocks, k) * b + o;
}

uint64_t sl_wshuf_rank_start(uint64_t m, uint64_t w, uint64_t k, int equal) {
    if (equal == SL_SHARD_PAD)
        return k * ((m + w - 1) / w);
    if (equal == SL_SHARD_DROP)
        return k * (m / w);
    uint64_t q = m / w, r = m % w; /* the first r ranks have one more */
    return k * q + (k < r ? k : r);
}

void sl_pipeline__window_sizes(uint64_t window, uint64_t block, uint64_t *window_out,
                               uint64_t *block_out) {
    *window_out = window ? window : SL_SHUFFLE_WINDOW_DEFAULT;
    *block_out = block ? block : (*window_out / 64 ? *window_out / 64 : 1);
}
