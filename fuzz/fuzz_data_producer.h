/*
 * fuzz_data_producer.h — draws parameters for a fuzz target from its input.
 *
 * Parameters are taken from the END of the input and the payload is what is
 * left at the front, so a mutation of a parameter byte does not shift the
 * payload and a seed file can be "payload + trailing parameter bytes". When
 * the input runs out every draw returns its minimum (never fails), which
 * keeps short inputs meaningful.
 *
 * Header-only, static functions: each target includes it once.
 */
#ifndef SL_FUZZ_DATA_PRODUCER_H
#define SL_FUZZ_DATA_PRODUCER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *data;
    size_t size; /* bytes not yet consumed, at data[0 .. size) */
} fuzz_producer;

static inline void fuzz_producer_init(fuzz_producer *p, const uint8_t *data, size_t size) {
    p->data = data;
    p->size = size;
}

/* A value in [lo, hi] made of as few trailing bytes as the range needs. */
static inline uint64_t fuzz_producer_range(fuzz_producer *p, uint64_t lo, uint64_t hi) {
    if (hi <= lo)
        return lo;
    uint64_t span = hi - lo, v = 0;
    for (uint64_t seen = 0; p->size > 0 && seen < span; seen = (seen << 8) | 0xff) {
        v = (v << 8) | p->data[p->size - 1];
        p->size--;
    }
    if (span == UINT64_MAX)
        return lo + v;
    return lo + v % (span + 1);
}

static inline int fuzz_producer_bool(fuzz_producer *p) { return (int)fuzz_producer_range(p, 0, 1); }

/* A value from 0..n-1 (n >= 1). */
static inline size_t fuzz_producer_pick(fuzz_producer *p, size_t n) {
    return n ? (size_t)fuzz_producer_range(p, 0, n - 1) : 0;
}

/* Take up to `n` bytes from the FRONT of what is left (the payload end). */
static inline const uint8_t *fuzz_producer_bytes(fuzz_producer *p, size_t n, size_t *got) {
    if (n > p->size)
        n = p->size;
    const uint8_t *r = p->data;
    p->data += n;
    p->size -= n;
    *got = n;
    return r;
}

#endif /* SL_FUZZ_DATA_PRODUCER_H */
