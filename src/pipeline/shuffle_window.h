/*
 * shuffle_window.h — the windowed shuffle's order as a pure function of
 * (seed, epoch, pass, position): no per-record table, O(1) per position, so
 * any position of any epoch is computed directly (exact resume) and a rank's
 * memory does not grow with the record count. docs/PIPELINE.md, "Shuffle".
 */
#ifndef SL_SHUFFLE_WINDOW_H
#define SL_SHUFFLE_WINDOW_H

#include <stddef.h>
#include <stdint.h>

/* A keyed bijection of [0, n): a Feistel network over the smallest number
 * of bits covering n (halves of floor(bits/2) and ceil(bits/2) bits, each
 * round XORs one half with a keyed hash of the other), walked until the
 * value falls below n (cycle walking; fewer than 2 steps on average). */
typedef struct sl_feistel {
    uint64_t n;
    unsigned rbits;      /* bits of the right half; the left has the rest */
    unsigned rounds;     /* even, at most SL_FEISTEL_MAX_ROUNDS */
    uint64_t lmask, rmask;
    uint64_t key[8];     /* one per round */
} sl_feistel;

#define SL_FEISTEL_MAX_ROUNDS 8

/* 4 rounds (the window shuffle's blocks and windows). */
void sl_feistel_init(sl_feistel *f, uint64_t n, uint64_t seed, uint64_t epoch, uint64_t index,
                     uint64_t op);
/* `rounds` rounds (even, 2..8). With 4, records that differ in one low bit
 * still land next to each other about twice as often as chance in a small
 * range (the halves are a few bits wide); 8 rounds bring every pair of
 * positions to chance (tests/pipeline/test_shuffle_window.c), which the global
 * order, meant to be a uniform shuffle, uses. */
void sl_feistel_init_rounds(sl_feistel *f, uint64_t n, unsigned rounds, uint64_t seed,
                            uint64_t epoch, uint64_t index, uint64_t op);
uint64_t sl_feistel_fwd(const sl_feistel *f, uint64_t x);
uint64_t sl_feistel_inv(const sl_feistel *f, uint64_t y);
/* x[i] = sl_feistel_fwd(f, x[i]) for i < n, the same values computed many at
 * a time (AVX-512 DQ or AVX2 where the CPU has it, picked at run time, a
 * portable path beside them): the global order's per-sample cost. */
void sl_feistel_fwd_n(const sl_feistel *f, uint64_t *x, size_t n);
/* The level sl_feistel_fwd_n runs at now (SL_OPS_SCALAR, SL_OPS_AVX2 or
 * SL_OPS_AVX512 of ops/ops.h; tests cap it with sl_ops__simd_max). */
int sl_feistel__many_level(void);

/* The windowed order of one pass over m records: the records are cut into
 * blocks of `block` consecutive records (the last may be shorter), the blocks
 * are permuted, the permuted sequence is cut into windows of `window`
 * positions and each window is permuted on its own. */
typedef struct sl_wshuf {
    uint64_t m, block, window;
    uint64_t seed, epoch, rep;
    uint64_t nblocks, lastlen, short_at;
    sl_feistel blocks;
    uint64_t win_t;      /* the window `win` permutes (UINT64_MAX: none yet) */
    sl_feistel win;
} sl_wshuf;

void sl_wshuf_init(sl_wshuf *w, uint64_t m, uint64_t window, uint64_t block, uint64_t seed,
                   uint64_t epoch, uint64_t rep);
/* Position q (< m) of the pass: the index of the record there (< m). Keeps
 * the last window's permutation in `w` (one caller at a time). */
uint64_t sl_wshuf_at(sl_wshuf *w, uint64_t q);

/* Where rank `k` of `w` starts in the pass's order in window mode: ranks take
 * consecutive spans (so a rank reads only its own blocks), of the sizes the
 * sharding rule gives (equal = SL_SHARD_PAD / DROP / NONE). */
uint64_t sl_wshuf_rank_start(uint64_t m, uint64_t w, uint64_t k, int equal);

/* The window and block sizes of a spec's values (0: the defaults). The
 * source stage keeps a pass's order (stage_source.c, window_at). */
void sl_pipeline__window_sizes(uint64_t window, uint64_t block, uint64_t *window_out,
                               uint64_t *block_out);

/* Defaults and the switch of "mode": "auto" (docs/PIPELINE.md). */
#define SL_SHUFFLE_WINDOW_DEFAULT 65536u
#define SL_SHUFFLE_GLOBAL_MAX (1ull << 24) /* auto: global up to 16,777,216 records */

#endif
