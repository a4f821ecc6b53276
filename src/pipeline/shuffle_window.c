/*
 * shuffle_window.c — the windowed shuffle (mode "window"): the order of a
 * pass computed position by position from (seed, epoch, pass), without the
 * O(records) permutation table of the global shuffle. Hand-written: a
 * Feistel network is a few lines and no library offers a keyed bijection of
 * an arbitrary range.
 */
#include "pipeline/shuffle_window.h"

#include "sluice.h"

/* 4 rounds by default: a Feistel network of 4 rounds of pseudo-random
 * functions is a pseudo-random permutation (Luby-Rackoff); each round costs
 * one mix64. */
#define ROUNDS 4

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

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
