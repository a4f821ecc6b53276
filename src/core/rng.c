/*
 * rng.c — a counter-based generator keyed by (seed, epoch, index, op).
 *
 * Output i of a stream is mix(key + (i+1) * GAMMA), where mix is the
 * SplitMix64 finaliser (a bijection with full avalanche). Because each output
 * depends only on (key, i), any sample's draws can be made on any thread in
 * any order and come out the same. The key folds the four coordinates in one
 * after another through the same mix, so nearby coordinates give unrelated
 * streams. Every random draw of the library comes from here (rule R5).
 */
#include "core/core.h"

#define GAMMA 0x9e3779b97f4a7c15ull

uint64_t sl_mix64(uint64_t x) { return sl__mix64(x); }

uint64_t sl__rng_epoch_key(uint64_t seed, uint64_t epoch) {
    return sl__mix64(sl__mix64(seed + GAMMA) ^ (epoch + 0x632be59bd9b4e019ull));
}

/* Output number `counter` (from 1) of the generator keyed `key`. */
static inline uint64_t output(uint64_t key, uint64_t counter) {
    return sl__mix64(key + counter * GAMMA);
}

static inline uint64_t keyed(uint64_t epoch_key, uint64_t index, uint64_t op) {
    uint64_t k = sl__mix64(epoch_key ^ (index + 0x8cb92ba72f3d8dd7ull));
    return sl__mix64(k ^ (op + 0x4f1bbcdcbfa53e0bull));
}

void sl__rng_init_keyed(sl_rng *rng, uint64_t epoch_key, uint64_t index, uint64_t op) {
    rng->key = keyed(epoch_key, index, op);
    rng->counter = 0;
}

void sl__rng_first_n(uint64_t epoch_key, uint64_t index, uint64_t op, size_t n,
                     uint64_t *out) {
    for (size_t i = 0; i < n; i++) /* no call, no dependency between i: pipelined */
        out[i] = output(keyed(epoch_key, index + i, op), 1);
}

void sl_rng_init(sl_rng *rng, uint64_t seed, uint64_t epoch, uint64_t index, uint64_t op) {
    sl__rng_init_keyed(rng, sl__rng_epoch_key(seed, epoch), index, op);
}

uint64_t sl_rng_next(sl_rng *rng) {
    return output(rng->key, ++rng->counter);
}

double sl_rng_uniform(sl_rng *rng) {
    return (double)(sl_rng_next(rng) >> 11) * 0x1.0p-53;
}

uint64_t sl_rng_below(sl_rng *rng, uint64_t n) {
    if (n == 0)
        return 0;
    /* Lemire's multiply-and-reject: unbiased, usually one draw. */
    unsigned __int128 m = (unsigned __int128)sl_rng_next(rng) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = -n % n;
        while (low < threshold) {
            m = (unsigned __int128)sl_rng_next(rng) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}
