/* A mixture's schedule (mix_schedule.c): the random schedule's proportions
 * within binomial bounds over 10^6 draws, the exact schedule's share within
 * one over every window, counts per epoch met exactly, the three stop
 * rules, a seek landing where the walk does, the block schedule equal to
 * the definition one position at a time; and a mixture's pipeline:
 * the same batches for any thread count and after a resume, its schema
 * check. */
#include "pipeline/stage.h"
#include "pipe_util.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void sched_make(sl_mix_schedule *m, int n, const double *share, const uint64_t *quota,
                       const uint64_t *limit, int exact, int stop) {
    memset(m, 0, sizeof *m);
    m->n = n;
    m->exact = exact;
    m->stop = stop;
    m->by_samples = quota != NULL;
    m->seed = 1234;
    for (int k = 0; k < n; k++)
        m->limit[k] = limit ? limit[k] : 1000000000ull;
    sl_mix__init(m, share, quota);
}

/* Walk a whole epoch from its start: positions per input into count[],
 * the epoch's length returned. */
static uint64_t drain(const sl_mix_schedule *m, sl_mix_state *st, uint64_t *count) {
    uint64_t n = 0;
    int k;
    sl_mix__start(m, st, 0);
    memset(count, 0, (size_t)m->n * sizeof *count);
    while ((k = sl_mix__next(m, st)) >= 0) {
        count[k]++;
        n++;
    }
    return n;
}

/* 10^6 draws of the random schedule: each input's count within 5 standard
 * deviations of n p (a binomial: a false failure once in ~3.5 million runs). */
SL_TEST(pipeline_mix_schedule__random_within_binomial_bounds) {
    const double share[3] = {0.7, 0.2, 0.1};
    sl_mix_schedule m;
    sched_make(&m, 3, share, NULL, NULL, 0, SL_MIX_STOP_NEVER);
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        sl_mix_state st;
        sl_mix__start(&m, &st, epoch);
        const uint64_t n = 1000000;
        uint64_t count[3] = {0};
        for (uint64_t i = 0; i < n; i++) {
            int k = sl_mix__next(&m, &st);
            ASSERT(k >= 0 && k < 3);
            count[k]++;
        }
        for (int k = 0; k < 3; k++) {
            double mean = n * share[k], sd = sqrt(n * share[k] * (1 - share[k]));
            ASSERT(fabs((double)count[k] - mean) < 5 * sd);
        }
    }
}

/* The exact schedule over weights of many kinds: in every window of N
 * consecutive positions (all starts, N up to 1000) input k appears
 * floor(N s_k) - 1 .. ceil(N s_k) + 1 times. */
SL_TEST(pipeline_mix_schedule__exact_within_one_over_every_window) {
    const double shares[][4] = {
        {0.7, 0.3}, {0.5, 0.5}, {1.0 / 3, 1.0 / 3, 1.0 / 3}, {0.6, 0.25, 0.1, 0.05},
        {0.999, 0.001}, {0.41, 0.37, 0.22},
    };
    const int ns[] = {2, 2, 3, 4, 2, 3};
    const uint64_t L = 6000;
    uint64_t *pre = malloc((L + 1) * 4 * sizeof *pre);
    for (int t = 0; t < 6; t++) {
        sl_mix_schedule m;
        sched_make(&m, ns[t], shares[t], NULL, NULL, 1, SL_MIX_STOP_NEVER);
        sl_mix_state st;
        sl_mix__start(&m, &st, 3);
        memset(pre, 0, (L + 1) * 4 * sizeof *pre);
        for (uint64_t p = 0; p < L; p++) {
            int k = sl_mix__next(&m, &st);
            ASSERT(k >= 0);
            for (int j = 0; j < 4; j++)
                pre[(p + 1) * 4 + j] = pre[p * 4 + j] + (j == k);
        }
        for (uint64_t N = 1; N <= 1000; N += (N < 50 ? 1 : 37))
            for (uint64_t a = 0; a + N <= L; a++)
                for (int k = 0; k < ns[t]; k++) {
                    double want = (double)N * shares[t][k];
                    uint64_t got = pre[(a + N) * 4 + k] - pre[a * 4 + k];
                    if ((double)got < floor(want) - 1 || (double)got > ceil(want) + 1) {
                        fprintf(stderr, "weights %d: window [%llu, +%llu): input %d %llu times, "
                                        "share says %.3f\n", t, (unsigned long long)a,
                                (unsigned long long)N, k, (unsigned long long)got, want);
                        ASSERT(0);
                    }
                }
    }
    free(pre);
}

/* Counts per epoch ({"samples": N}): an epoch of either schedule holds
 * exactly N of each input, and ends there. */
SL_TEST(pipeline_mix_schedule__samples_met_exactly) {
    const uint64_t quota[3] = {500, 30, 1};
    for (int exact = 0; exact < 2; exact++) {
        sl_mix_schedule m;
        sched_make(&m, 3, NULL, quota, NULL, exact, SL_MIX_STOP_NEVER);
        ASSERT_U64_EQ(sl_mix__epoch_len(&m), 531);
        sl_mix_state st;
        uint64_t count[3];
        ASSERT_U64_EQ(drain(&m, &st, count), 531);
        for (int j = 0; j < 3; j++)
            ASSERT_U64_EQ(count[j], quota[j]);
    }
}

/* The stop rules, inputs of 10 and 1000 positions at 50/50: never runs the
 * whole epoch (1010 positions, the small input taken ~505 times: its order
 * wraps); first_exhausted ends when the small one is drawn after its 10th;
 * all_exhausted takes every position of both and ends at 1010, the tail
 * all the large one. */
SL_TEST(pipeline_mix_schedule__stop_rules) {
    const double share[2] = {0.5, 0.5};
    const uint64_t limit[2] = {10, 1000};
    for (int exact = 0; exact < 2; exact++) {
        sl_mix_schedule m;
        sl_mix_state st;
        uint64_t count[2], n;

        sched_make(&m, 2, share, NULL, limit, exact, SL_MIX_STOP_NEVER);
        ASSERT_U64_EQ(sl_mix__epoch_len(&m), 1010);
        sl_mix__start(&m, &st, 0);
        count[0] = count[1] = 0;
        for (n = 0; n < 1010; n++)
            count[sl_mix__next(&m, &st)]++;
        ASSERT(count[0] > 400 && count[0] < 610); /* upsampled: far past its 10 */

        sched_make(&m, 2, share, NULL, limit, exact, SL_MIX_STOP_FIRST);
        n = drain(&m, &st, count);
        ASSERT_U64_EQ(count[0], 10);
        ASSERT(n < 60); /* ends at the 11th draw of input 0 */
        ASSERT(sl_mix__next(&m, &st) < 0); /* and stays ended */

        sched_make(&m, 2, share, NULL, limit, exact, SL_MIX_STOP_ALL);
        ASSERT_U64_EQ(sl_mix__epoch_len(&m), 1010);
        ASSERT_U64_EQ(drain(&m, &st, count), 1010);
        ASSERT_U64_EQ(count[0], 10);
        ASSERT_U64_EQ(count[1], 1000);
    }
}

/* A seek (a restore) lands where walking there does: same state, same
 * next inputs; other epochs and seeds give other orders. */
SL_TEST(pipeline_mix_schedule__seek_is_the_walk_and_seed_keys_it) {
    const double share[3] = {0.5, 0.3, 0.2};
    for (int exact = 0; exact < 2; exact++) {
        sl_mix_schedule m;
        sched_make(&m, 3, share, NULL, NULL, exact, SL_MIX_STOP_NEVER);
        sl_mix_state a, b;
        sl_mix__start(&m, &a, 2);
        for (int i = 0; i < 777; i++)
            sl_mix__next(&m, &a);
        sl_mix__start(&m, &b, 0);
        sl_mix__seek(&m, &b, 2, 777);
        ASSERT_U64_EQ(b.pos, 777);
        for (int k = 0; k < 3; k++)
            ASSERT_U64_EQ(a.count[k], b.count[k]);
        for (int i = 0; i < 100; i++)
            ASSERT_EQ(sl_mix__next(&m, &a), sl_mix__next(&m, &b));
        if (!exact) {
            /* the random schedule differs between epochs and seeds */
            sl_mix_state c, d;
            sl_mix__start(&m, &c, 0);
            sl_mix__start(&m, &d, 1);
            int same = 0;
            for (int i = 0; i < 200; i++)
                same += sl_mix__next(&m, &c) == sl_mix__next(&m, &d);
            ASSERT(same < 190);
        }
    }
}

static sl_pipeline *mix_pipeline(const char *a, const char *b, int parallel, int rows,
                                 const char *sched) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"source\": {\"kind\": \"mix\", \"inputs\": [{\"path\": \"%s\", \"shuffle\": true}, "
             "{\"path\": \"%s\", \"shuffle\": true}], \"weights\": [0.6, 0.4], "
             "\"schedule\": \"%s\", \"source_column\": \"src\", \"parallel\": %d}, "
             "\"read_rows\": %s, \"ops\": [{\"op\": \"batch\", \"size\": 16}], \"seed\": 3}",
             a, b, sched, parallel, rows ? "true" : "false");
    sl_spec *spec;
    ASSERT_OK(sl_spec_from_json(&spec, json));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    return p;
}

/* A mix of two .slr inputs (300 and 7 records: the small one upsampled):
 * the same batches for 1 and 3 reading threads, read into rows or not, for
 * both schedules, and the same after a resume at batch 5; an input without
 * the first one's columns is refused naming it. Run under the sanitizers
 * with the rest. */
SL_TEST(pipeline_mix_schedule__mix_pipeline_threads_resume_schema) {
    char a[512], b[512];
    sl_test_path(a, sizeof a, "mix_a.slr");
    sl_test_path(b, sizeof b, "mix_b.slr");
    make_slr(a, 300);
    make_slr(b, 7);
    const char *scheds[] = {"random", "exact"};
    for (int s = 0; s < 2; s++) {
        uint64_t want[64], got[64];
        sl_pipeline *p = mix_pipeline(a, b, 1, 1, scheds[s]);
        ASSERT(pu_held_bytes(p, 0) == 0.0); /* inputs read from their files (PIPELINE.md) */
        int n = pu_run_epoch(p, want, 64);
        ASSERT_EQ(n, 20); /* 307 samples, batches of 16 */
        sl_pipeline_free(p);
        for (int par = 1; par <= 3; par += 2)
            for (int rows = 0; rows < 2; rows++) {
                p = mix_pipeline(a, b, par, rows, scheds[s]);
                ASSERT_EQ(pu_run_epoch(p, got, 64), n);
                for (int i = 0; i < n; i++)
                    ASSERT_U64_EQ(got[i], want[i]);
                sl_pipeline_free(p);
            }
        p = mix_pipeline(a, b, 3, 1, scheds[s]);
        for (int i = 0; i < 5; i++) {
            sl_batch *bt;
            ASSERT_OK(sl_pipeline_next(p, &bt));
            sl_batch_release(bt);
        }
        char state[1024];
        ASSERT_OK(sl_pipeline_save_state(p, state, sizeof state, NULL));
        sl_pipeline_free(p);
        p = mix_pipeline(a, b, 2, 1, scheds[s]);
        ASSERT_OK(sl_pipeline_restore_state(p, state));
        ASSERT_EQ(pu_run_epoch(p, got, 64), n - 5);
        for (int i = 5; i < n; i++)
            ASSERT_U64_EQ(got[i - 5], want[i]);
        sl_pipeline_free(p);
    }
    sl_spec *spec;
    char json[1024];
    snprintf(json, sizeof json, "{\"source\": {\"kind\": \"mix\", \"inputs\": [{\"path\": \"%s\"}, "
             "{\"synthetic\": {\"records\": 5}}]}}", a);
    ASSERT_OK(sl_spec_from_json(&spec, json));
    sl_pipeline *p;
    ASSERT_RC(sl_pipeline_create(&p, spec), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "inputs[1]");
    ASSERT_CONTAINS(sl_errmsg(), "no column 'image'");
    sl_spec_free(spec);
}

/* The schedule as PIPELINE.md defines it, one position at a time from its
 * definition (random: input drawn by sl_rng_init(seed, epoch, position,
 * the schedule's op) over the live weights, or the samples left; exact:
 * each live input earns its weight, the richest from the seed's rotation
 * takes the position and pays the total). */
#define REF_OP 0xfffffffffffffff3ull
typedef struct ref_state {
    uint64_t pos, count[SL_MIX_MAX], live;
    __int128 credit[SL_MIX_MAX];
    int done;
} ref_state;

static int ref_next(const sl_mix_schedule *m, ref_state *st, uint64_t epoch) {
    if (st->done || !st->live) {
        st->done = 1;
        return -1;
    }
    int k = 0;
    if (m->exact) {
        __int128 total = 0;
        for (int j = 0; j < m->n; j++)
            if (st->live >> j & 1) {
                st->credit[j] += m->w[j];
                total += m->w[j];
            }
        int rot = (int)(sl_mix64(m->seed ^ sl_mix64(epoch + REF_OP)) % (uint64_t)m->n), best = -1;
        for (int j = 0; j < m->n; j++) {
            int c = (j + rot) % m->n;
            if ((st->live >> c & 1) && (best < 0 || st->credit[c] > st->credit[best]))
                best = c;
        }
        st->credit[best] -= total;
        k = best;
    } else {
        uint64_t w[SL_MIX_MAX], total = 0;
        for (int j = 0; j < m->n; j++) {
            w[j] = !(st->live >> j & 1) ? 0 : m->by_samples ? m->quota[j] - st->count[j] : m->w[j];
            total += w[j];
        }
        sl_rng r;
        sl_rng_init(&r, m->seed, epoch, st->pos, REF_OP);
        uint64_t u = sl_rng_below(&r, total);
        while (u >= w[k])
            u -= w[k++];
    }
    if (m->stop == SL_MIX_STOP_FIRST && st->count[k] >= m->limit[k]) {
        st->done = 1;
        return -1;
    }
    st->count[k]++;
    st->pos++;
    if ((m->by_samples && st->count[k] >= m->quota[k]) ||
        (m->stop == SL_MIX_STOP_ALL && st->count[k] >= m->limit[k]))
        st->live &= ~(1ull << k);
    return k;
}

/* sl_mix__next_n, in blocks of 1, 7 and 512 positions, gives the
 * definition's inputs for both schedules, shares and counts, every stop
 * rule (inputs running out mid-block), and ends where it does. */
SL_TEST(pipeline_mix_schedule__blocks_are_the_definition) {
    const double share[3] = {0.5, 0.3, 0.2};
    const uint64_t quota[3] = {900, 40, 300}, limit[3] = {2000, 35, 700};
    const size_t blocks[3] = {1, 7, 512};
    for (int exact = 0; exact < 2; exact++)
        for (int counts = 0; counts < 2; counts++)
            for (int stop = SL_MIX_STOP_NEVER; stop <= SL_MIX_STOP_ALL; stop++)
                for (int b = 0; b < 3; b++) {
                    sl_mix_schedule m;
                    sched_make(&m, 3, share, counts ? quota : NULL, limit, exact, stop);
                    sl_mix_state st;
                    sl_mix__start(&m, &st, 5);
                    ref_state ref = {.live = 7};
                    uint8_t ks[512];
                    uint64_t made = 0;
                    for (;;) {
                        size_t got = sl_mix__next_n(&m, &st, ks, blocks[b]);
                        for (size_t i = 0; i < got; i++)
                            ASSERT_EQ(ks[i], ref_next(&m, &ref, 5));
                        made += got;
                        if (got < blocks[b] || made >= 3000)
                            break;
                    }
                    if (made < 3000) /* the epoch ended: the definition ends there too */
                        ASSERT_EQ(ref_next(&m, &ref, 5), -1);
                    ASSERT(made > 40);
                    ASSERT_U64_EQ(st.pos, ref.pos);
                }
}

/* Counts near 2^64 in all: sl_rng_below's first multiply is refused as
 * often as not (low < total, and low < its threshold a quarter of the
 * time), so the block's draws made at once (sl__rng_first_n) fall back to
 * the generator's own rejection loop: still the definition's inputs. */
SL_TEST(pipeline_mix_schedule__huge_counts_redraw_as_defined) {
    const uint64_t quota[3] = {1ull << 62, 1ull << 62, (1ull << 62) + 1};
    for (size_t block = 1; block <= 512; block += 511) {
        sl_mix_schedule m;
        sched_make(&m, 3, NULL, quota, NULL, 0, SL_MIX_STOP_NEVER);
        sl_mix_state st;
        sl_mix__start(&m, &st, 2);
        ref_state ref = {.live = 7};
        uint8_t ks[512];
        for (int round = 0; round < 8; round++) {
            size_t got = sl_mix__next_n(&m, &st, ks, block);
            ASSERT_EQ(got, block);
            for (size_t i = 0; i < got; i++)
                ASSERT_EQ(ks[i], ref_next(&m, &ref, 2));
        }
        ASSERT_U64_EQ(st.pos, ref.pos);
    }
}

static int mix_ops_pipeline(sl_pipeline **p, const char *ops0, const char *ops1, int parallel) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"source\": {\"kind\": \"mix\", \"inputs\": [{\"synthetic\": {\"records\": 50}, "
             "\"shuffle\": true, \"ops\": [%s]}, {\"synthetic\": {\"records\": 30}, \"ops\": [%s]}], "
             "\"stop\": \"all_exhausted\", \"columns\": [\"index\"], \"source_column\": \"src\", "
             "\"parallel\": %d}, \"ops\": [{\"op\": \"batch\", \"size\": 8}], \"seed\": 5}",
             ops0, ops1, parallel);
    sl_spec *spec;
    int rc = sl_spec_from_json(&spec, json);
    if (rc < 0)
        return rc;
    rc = sl_pipeline_create(p, spec);
    sl_spec_free(spec);
    return rc;
}

/* Per-input ops (mix_ops.c): input 0 keeps its even records and casts its
 * index to float64, input 1 casts its own; the blend has every sample once
 * with the columns the ops made (the others dropped by "columns", the
 * source column added), the same for 1 and 3 readers. A cast to another
 * dtype is refused after the ops naming both inputs; a whole-stream op in
 * an input is refused. Under the sanitizers: the inputs' worker states,
 * the columns moved and released. */
SL_TEST(pipeline_mix_schedule__per_input_ops) {
    const char *even = "{\"op\": \"filter\", \"column\": \"index\", \"in\": [0, 2, 4, 6, 8, 10, "
                       "12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, "
                       "48]}, {\"op\": \"cast\", \"column\": \"index\", \"dtype\": \"float64\"}";
    const char *f64 = "{\"op\": \"cast\", \"column\": \"index\", \"dtype\": \"float64\"}";
    uint64_t want[16], got[16];
    for (int par = 1; par <= 3; par += 2) {
        sl_pipeline *p;
        ASSERT_OK(mix_ops_pipeline(&p, even, f64, par));
        int seen[2][50] = {{0}}, n = 0, nb = 0;
        sl_batch *b;
        int rc;
        while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
            const sl_tensor *idx = sl_batch_column(b, 0), *src = sl_batch_column(b, 1);
            ASSERT_EQ(idx->dtype, SL_F64);
            ASSERT_EQ(src->dtype, SL_I64);
            for (int64_t i = 0; i < sl_batch_size(b); i++) {
                int k = (int)((const int64_t *)src->data)[i];
                int v = (int)((const double *)idx->data)[i];
                ASSERT(k == 0 || k == 1);
                ASSERT(v >= 0 && v < (k ? 30 : 50));
                ASSERT(k == 1 || v % 2 == 0);
                seen[k][v]++;
                n++;
            }
            if (nb < 16)
                (par == 1 ? want : got)[nb] = pu_digest(b);
            nb++;
            sl_batch_release(b);
        }
        ASSERT_EQ(rc, SL_END);
        ASSERT_EQ(n, 55);
        for (int v = 0; v < 50; v++)
            ASSERT_EQ(seen[0][v], v % 2 == 0);
        for (int v = 0; v < 30; v++)
            ASSERT_EQ(seen[1][v], 1);
        for (int i = 0; par == 3 && i < nb && i < 16; i++)
            ASSERT_U64_EQ(got[i], want[i]);
        sl_pipeline_free(p);
    }
    sl_pipeline *p = NULL;
    ASSERT_RC(mix_ops_pipeline(&p, f64, "{\"op\": \"cast\", \"column\": \"index\", "
                                        "\"dtype\": \"float32\"}", 1), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "inputs[0]");
    ASSERT_CONTAINS(sl_errmsg(), "inputs[1]");
    ASSERT_CONTAINS(sl_errmsg(), "'index' after their ops: dtype float64 vs float32");
    ASSERT_RC(mix_ops_pipeline(&p, f64, "{\"op\": \"take\", \"count\": 3}", 1), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "source.inputs[1].ops[0]: 'take' is not a per-sample op");
}

/* The inputs are opened at once (a thread each): a failure of one is the
 * one reported, naming it, whichever thread opened it; the inputs opened
 * beside it are released (the sanitizers). */
SL_TEST(pipeline_mix_schedule__inputs_opened_at_once) {
    char a[512], json[2048];
    sl_test_path(a, sizeof a, "mix_open_a.slr");
    make_slr(a, 20);
    for (int bad = 0; bad < 4; bad++) {
        size_t n = (size_t)snprintf(json, sizeof json, "{\"source\": {\"kind\": \"mix\", "
                                                       "\"inputs\": [");
        for (int k = 0; k < 4; k++)
            n += (size_t)snprintf(json + n, sizeof json - n, "%s{\"path\": \"%s%s\"}",
                                  k ? ", " : "", a, k == bad ? ".missing" : "");
        snprintf(json + n, sizeof json - n, "]}}");
        sl_spec *spec;
        ASSERT_OK(sl_spec_from_json(&spec, json));
        sl_pipeline *p;
        ASSERT(sl_pipeline_create(&p, spec) < 0);
        char want[64];
        snprintf(want, sizeof want, "source.inputs[%d]", bad);
        ASSERT_CONTAINS(sl_errmsg(), want);
        ASSERT_CONTAINS(sl_errmsg(), "mix_open_a.slr.missing");
        sl_spec_free(spec);
    }
    snprintf(json, sizeof json, "{\"source\": {\"kind\": \"mix\", \"inputs\": [{\"path\": \"%s\"}, "
             "{\"path\": \"%s\"}, {\"path\": \"%s\"}]}, \"ops\": [{\"op\": \"batch\", \"size\": 7}]}",
             a, a, a);
    sl_spec *spec;
    ASSERT_OK(sl_spec_from_json(&spec, json));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    uint64_t dig[16];
    ASSERT_EQ(pu_run_epoch(p, dig, 16), 9); /* 60 samples */
    sl_pipeline_free(p);
    sl_spec_free(spec);
}
