/*
 * mix_schedule.c — a mixture's schedule: which input each stream position
 * of an epoch takes (docs/PIPELINE.md, "Mixtures"). A pure function of the
 * weights, the stop rule, the seed, the epoch and the position, so the
 * blend is the same for any thread count, any timing and after a restore,
 * and every rank (which blends its own slice of each input) has the same.
 *
 * "random" draws each position's input with the weights from a generator
 * keyed by (seed, epoch, position): tf.data's sample_from_datasets. With
 * counts per epoch ({"samples": N}) the draw is over the samples each input
 * has left, so an epoch holds exactly N of input k in a random order
 * (Streaming's `choose`).
 *
 * "exact" is smooth weighted round robin: each position every input left
 * earns its weight in credit, the one with the most credit takes the
 * position and pays the total. Input k's count after p positions then stays
 * within one of p * share (its credit is bounded), so every window of N
 * consecutive positions holds floor(N * share) - 1 .. ceil(N * share) + 1 of
 * it (tests/pipeline/test_mix_schedule.c checks every window), and with
 * counts per epoch exactly N of input k. Ties go to the input first in an
 * order rotated by (seed, epoch): the seed keys the schedule.
 *
 * Stop rules (an input "runs out" after limit[k] positions, its records on
 * this rank times the repeat): never — it does not, its order wraps into a
 * new pass with a new shuffle; first_exhausted — the epoch ends at the
 * first position whose input has run out (tf.data's
 * stop_on_empty_dataset=True); all_exhausted — an input that runs out is
 * left out and the others share its weight, the epoch ending when all have
 * (tf.data's default, stop_on_empty_dataset=False).
 */
#include "pipeline/stage.h"

#include <math.h>
#include <string.h>

#define MIX_OP 0xfffffffffffffff3ull /* the schedule's op id in sl_rng_init */
#define SHARE_SCALE 1099511627776.0  /* 2^40: a share as an integer weight */

void sl_mix__init(sl_mix_schedule *m, const double *shares, const uint64_t *quotas) {
    for (int k = 0; k < m->n; k++) {
        if (m->by_samples) {
            m->quota[k] = quotas[k];
            m->w[k] = quotas[k];
        } else {
            long long w = llround(shares[k] * SHARE_SCALE);
            m->w[k] = w < 1 ? 1 : (uint64_t)w;
        }
    }
}

uint64_t sl_mix__epoch_len(const sl_mix_schedule *m) {
    uint64_t len = 0;
    for (int k = 0; k < m->n; k++) {
        if (m->stop == SL_MIX_STOP_NEVER)
            len += m->by_samples ? m->quota[k] : m->limit[k];
        else
            len += m->by_samples && m->quota[k] < m->limit[k] ? m->quota[k] : m->limit[k];
    }
    return len;
}

void sl_mix__start(const sl_mix_schedule *m, sl_mix_state *st, uint64_t epoch) {
    memset(st, 0, sizeof *st);
    st->epoch = epoch;
    st->live = m->n >= 64 ? ~0ull : (1ull << m->n) - 1;
    for (int k = 0; k < m->n; k++)
        if ((m->by_samples && m->quota[k] == 0) ||
            (m->stop == SL_MIX_STOP_ALL && m->limit[k] == 0))
            st->live &= ~(1ull << k);
}

/* The tie-break order's first input for `epoch`: the seed keys it. */
static int rotation(const sl_mix_schedule *m, uint64_t epoch) {
    return (int)(sl_mix64(m->seed ^ sl_mix64(epoch + MIX_OP)) % (uint64_t)m->n);
}

static int pick_exact(const sl_mix_schedule *m, sl_mix_state *st, __int128 total, int rot) {
    for (int k = 0; k < m->n; k++)
        if (st->live >> k & 1)
            st->credit[k] += m->w[k];
    int best = -1;
    for (int j = 0, k = rot; j < m->n; j++, k = k + 1 == m->n ? 0 : k + 1)
        if ((st->live >> k & 1) && (best < 0 || st->credit[k] > st->credit[best]))
            best = k;
    st->credit[best] -= total;
    return best;
}

/* h: the position's first draw, sl_rng_next of the generator keyed by
 * (seed, epoch, position) (sl__rng_first_n makes a block's at once); w: each
 * input's weight now (0: not live), total: their sum. The draw is
 * sl_rng_below(total)'s: its first multiply is accepted nearly always
 * (low >= total), and then gives the input here without a call; else the
 * generator is made again and sl_rng_below draws as it does. */
static int pick_random(uint64_t h, const sl_mix_state *st, uint64_t epoch_key,
                       const uint64_t *w, int n, uint64_t total) {
    unsigned __int128 prod = (unsigned __int128)h * total;
    uint64_t u = (uint64_t)(prod >> 64);
    if ((uint64_t)prod < total) {
        sl_rng r;
        sl__rng_init_keyed(&r, epoch_key, st->pos, MIX_OP); /* = sl_rng_init(seed, epoch, pos) */
        u = sl_rng_below(&r, total);
    }
    /* the input whose span of [0, total) holds u: the number of spans'
     * ends at or below it, every end compared (no early exit to
     * mispredict, the input being random) */
    int k = 0;
    uint64_t end = 0;
    for (int j = 0; j + 1 < n; j++) {
        end += w[j];
        k += u >= end;
    }
    return k;
}

/* The weights the next draw is over (0: an input not live): random by
 * counts, what each input has left; else the integer weights (exact's
 * credits are earned at those). */
static uint64_t live_weights(const sl_mix_schedule *m, const sl_mix_state *st, uint64_t *w) {
    uint64_t total = 0;
    for (int k = 0; k < m->n; k++) {
        w[k] = !(st->live >> k & 1)          ? 0
               : m->by_samples && !m->exact ? m->quota[k] - st->count[k]
                                            : m->w[k];
        total += w[k];
    }
    return total;
}

/* The schedule a block at a time: what is the same for every position of
 * the block (the generator's (seed, epoch) key, the weights and their total,
 * the tie-break rotation) is computed once and kept up to date as inputs
 * are drawn and run out, rather than once per position, and random's first
 * draws for up to DRAWS positions are made in one loop without a call
 * (sl__rng_first_n) — the same draws as one position at a time. */
size_t sl_mix__next_n(const sl_mix_schedule *m, sl_mix_state *st, uint8_t *ks, size_t n) {
    uint64_t w[SL_MIX_MAX], total = live_weights(m, st, w);
    const uint64_t epoch_key = m->exact ? 0 : sl__rng_epoch_key(m->seed, st->epoch);
    const int rot = m->exact ? rotation(m, st->epoch) : 0;
    enum { DRAWS = 256 };
    uint64_t h[DRAWS], h_from = 0, h_n = 0; /* the draws at positions [h_from, h_from + h_n) */
    size_t made = 0;
    for (; made < n; made++) {
        if (st->done || st->live == 0) {
            st->done = 1;
            break;
        }
        if (!m->exact && st->pos - h_from >= h_n) {
            h_from = st->pos;
            h_n = n - made < DRAWS ? n - made : DRAWS;
            sl__rng_first_n(epoch_key, h_from, MIX_OP, h_n, h);
        }
        int k = m->exact ? pick_exact(m, st, (__int128)total, rot)
                         : pick_random(h[st->pos - h_from], st, epoch_key, w, m->n, total);
        if (m->stop == SL_MIX_STOP_FIRST && st->count[k] >= m->limit[k]) {
            st->done = 1; /* tf.data's stop_on_empty_dataset: the drawn input is empty */
            break;
        }
        st->count[k]++;
        st->pos++;
        if (m->by_samples && !m->exact) {
            w[k]--;
            total--;
        }
        if ((m->by_samples && st->count[k] >= m->quota[k]) ||
            (m->stop == SL_MIX_STOP_ALL && st->count[k] >= m->limit[k])) {
            st->live &= ~(1ull << k);
            total -= w[k];
            w[k] = 0;
        }
        if (ks)
            ks[made] = (uint8_t)k;
    }
    return made;
}

int sl_mix__next(const sl_mix_schedule *m, sl_mix_state *st) {
    uint8_t k;
    return sl_mix__next_n(m, st, &k, 1) ? k : -1;
}

void sl_mix__seek(const sl_mix_schedule *m, sl_mix_state *st, uint64_t epoch, uint64_t pos) {
    if (st->epoch != epoch || st->pos > pos)
        sl_mix__start(m, st, epoch);
    while (st->pos < pos) {
        uint64_t left = pos - st->pos;
        if (!sl_mix__next_n(m, st, NULL, left < 4096 ? (size_t)left : 4096))
            break;
    }
}
