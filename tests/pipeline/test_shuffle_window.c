/* The windowed shuffle (mode "window"): the bijections it is made of, the
 * rank properties (disjoint, complete, equal), determinism across thread
 * counts and exact resume. */
#include "ops/ops.h"
#include "pipeline/shuffle_window.h"
#include "pipe_util.h"

#include <stdlib.h>

SL_TEST(pipeline_shuffle_window__feistel_is_a_bijection) {
    const uint64_t sizes[] = {1, 2, 3, 5, 16, 17, 100, 1000, 4097};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        uint64_t n = sizes[s];
        uint8_t *seen = calloc(n, 1);
        sl_feistel f;
        sl_feistel_init(&f, n, 7, 3, 1, 42);
        uint64_t fixed = 0;
        for (uint64_t x = 0; x < n; x++) {
            uint64_t y = sl_feistel_fwd(&f, x);
            ASSERT(y < n);
            ASSERT(!seen[y]);
            seen[y] = 1;
            ASSERT_U64_EQ(sl_feistel_inv(&f, y), x);
            fixed += y == x;
        }
        if (n >= 100)
            ASSERT(fixed < n / 10); /* a shuffle, not the identity */
        free(seen);
    }
}

/* sl_feistel_fwd_n gives sl_feistel_fwd's values on every path the CPU has
 * (AVX-512 DQ, AVX2, portable), at every count (vector tails, blocks of the
 * cycle walk), for ranges of every width of half. */
SL_TEST(pipeline_shuffle_window__fwd_n_matches_fwd_on_every_path) {
    const uint64_t sizes[] = {2, 3, 10, 1000, 10000, 60000, 1ull << 20, (1ull << 33) + 7};
    const size_t counts[] = {1, 3, 7, 8, 9, 31, 33, 255, 256, 257, 1000};
    const int saved = sl_ops__simd_max;
    const int caps[] = {SL_OPS_AVX512, SL_OPS_AVX2, SL_OPS_SCALAR};
    int levels_run = 0;
    for (int ci = 0; ci < 3; ci++) {
        sl_ops__simd_max = caps[ci];
        if (sl_feistel__many_level() != caps[ci])
            continue; /* the CPU lacks it */
        levels_run++;
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            for (unsigned rounds = 4; rounds <= 8; rounds += 4) {
                sl_feistel f;
                sl_feistel_init_rounds(&f, sizes[s], rounds, 5, s, rounds, 0xfffffffffffffff1ull);
                for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
                    uint64_t x[1000], want[1000];
                    for (size_t i = 0; i < counts[c]; i++) {
                        x[i] = (i * 7919 + c) % sizes[s];
                        want[i] = sl_feistel_fwd(&f, x[i]);
                    }
                    sl_feistel_fwd_n(&f, x, counts[c]);
                    for (size_t i = 0; i < counts[c]; i++)
                        ASSERT_U64_EQ(x[i], want[i]);
                }
            }
        }
    }
    sl_ops__simd_max = saved;
#if defined(__x86_64__)
    /* a path the CPU has and that did not run would be a silent fall back */
    ASSERT_EQ(levels_run, 1 + !!__builtin_cpu_supports("avx2") +
                              !!(__builtin_cpu_supports("avx512f") &&
                               __builtin_cpu_supports("avx512bw") &&
                               __builtin_cpu_supports("avx512vl") &&
                               __builtin_cpu_supports("avx512dq")));
#endif
}

SL_TEST(pipeline_shuffle_window__order_is_a_bijection_with_local_windows) {
    /* m not a multiple of block nor window; block 1 and block = window */
    const uint64_t cases[][3] = {{1000, 64, 8}, {1003, 64, 7}, {997, 50, 50},
                                 {10, 64, 8},   {513, 16, 1},  {1, 4, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        uint64_t m = cases[c][0], win = cases[c][1], blk = cases[c][2];
        for (uint64_t epoch = 0; epoch < 3; epoch++) {
            sl_wshuf w;
            sl_wshuf_init(&w, m, win, blk, 11, epoch, 0);
            uint8_t *seen = calloc(m, 1);
            for (uint64_t q = 0; q < m; q++) {
                uint64_t r = sl_wshuf_at(&w, q);
                ASSERT(r < m);
                ASSERT(!seen[r]);
                seen[r] = 1;
            }
            /* a window reads few blocks: at most win / blk + 2 of them */
            for (uint64_t t = 0; t * win < m; t++) {
                uint64_t blocks[128];
                int nb = 0;
                for (uint64_t q = t * win; q < m && q < (t + 1) * win; q++) {
                    uint64_t b = sl_wshuf_at(&w, q) / blk;
                    int k = 0;
                    while (k < nb && blocks[k] != b)
                        k++;
                    if (k == nb) {
                        ASSERT(nb < 128);
                        blocks[nb++] = b;
                    }
                }
                ASSERT((uint64_t)nb <= win / blk + 2);
            }
            free(seen);
        }
    }
    /* epochs differ */
    sl_wshuf a, b;
    sl_wshuf_init(&a, 1000, 64, 8, 11, 0, 0);
    sl_wshuf_init(&b, 1000, 64, 8, 11, 1, 0);
    int same = 0;
    for (uint64_t q = 0; q < 1000; q++)
        same += sl_wshuf_at(&a, q) == sl_wshuf_at(&b, q);
    ASSERT(same < 100);
}

static sl_spec *window_spec(int r, int w, sl_shard_equal eq, uint64_t n, int threads,
                            int epochs) {
    sl_spec *spec = pu_memory_spec(n);
    ASSERT_OK(sl_spec_set_shuffle_mode(spec, SL_SHUFFLE_WINDOW, 16, 4));
    ASSERT_OK(sl_spec_set_seed(spec, 5));
    ASSERT_OK(sl_spec_set_epochs(spec, epochs));
    ASSERT_OK(sl_spec_set_threads(spec, threads));
    ASSERT_OK(sl_spec_set_shard(spec, r, w, eq));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 4}"));
    return spec;
}

/* Sample indices rank r of w sees in epoch 0. */
static int rank_indices(int r, int w, sl_shard_equal eq, uint64_t n, uint64_t *out, int cap,
                        int *batches) {
    sl_spec *spec = window_spec(r, w, eq, n, 1, 1);
    return pu_spec_indices(spec, out, cap, batches);
}

SL_TEST(pipeline_shuffle_window__ranks_disjoint_complete_equal) {
    const uint64_t n = 203;
    const int w = 4;
    for (int eq = 0; eq < 3; eq++) {
        int count[203] = {0};
        int nb[4], ns[4], in_order = 0;
        for (int r = 0; r < w; r++) {
            uint64_t idx[256];
            ns[r] = rank_indices(r, w, (sl_shard_equal)eq, n, idx, 256, &nb[r]);
            for (int i = 0; i < ns[r]; i++) {
                count[idx[i]]++;
                in_order += i > 0 && idx[i] == idx[i - 1] + 1;
            }
        }
        ASSERT(in_order < 40); /* shuffled within windows */
        pu_check_shards((sl_shard_equal)eq, n, w, count, ns, nb);
    }
}

SL_TEST(pipeline_shuffle_window__same_batches_any_threads_and_exact_resume) {
    static uint64_t all[2][400];
    int n[2];
    for (int t = 0; t < 2; t++) {
        sl_spec *spec = window_spec(1, 3, SL_SHARD_PAD, 500, t ? 4 : 1, 3);
        sl_pipeline *p;
        ASSERT_OK(sl_pipeline_create(&p, spec));
        n[t] = 0;
        for (int e = 0; e < 3; e++)
            n[t] += pu_run_epoch(p, all[t] + n[t], 400 - n[t]);
        sl_pipeline_free(p);
        sl_spec_free(spec);
    }
    ASSERT_EQ(n[0], n[1]);
    ASSERT_EQ(n[0], 3 * 42); /* ceil(500 / 3) = 167 samples, 42 batches of 4 */
    for (int i = 0; i < n[0]; i++)
        ASSERT_U64_EQ(all[0][i], all[1][i]);
    /* epochs differ */
    ASSERT(all[0][0] != all[0][42] || all[0][1] != all[0][43]);
    int stops[] = {1, 20, 41, 42, 43, 100};
    for (int si = 0; si < 6; si++) {
        int k = stops[si];
        sl_spec *spec = window_spec(1, 3, SL_SHARD_PAD, 500, 1, 3);
        sl_pipeline *p;
        ASSERT_OK(sl_pipeline_create(&p, spec));
        int got = 0;
        while (got < k) {
            sl_batch *b;
            int rc = sl_pipeline_next(p, &b);
            if (rc == SL_END)
                continue;
            ASSERT_OK(rc);
            ASSERT_U64_EQ(pu_digest(b), all[0][got]);
            got++;
            sl_batch_release(b);
        }
        char state[1024];
        size_t len;
        ASSERT_OK(sl_pipeline_save_state(p, state, sizeof state, &len));
        sl_pipeline_free(p);
        sl_spec_free(spec);
        spec = window_spec(1, 3, SL_SHARD_PAD, 500, 3, 3);
        ASSERT_OK(sl_pipeline_create(&p, spec));
        ASSERT_OK(sl_pipeline_restore_state(p, state));
        int i = k;
        while ((int64_t)sl_pipeline_epoch(p) < 3) {
            sl_batch *b;
            int rc = sl_pipeline_next(p, &b);
            if (rc == SL_END)
                continue;
            ASSERT_OK(rc);
            ASSERT(i < n[0]);
            if (pu_digest(b) != all[0][i])
                sl_test_fail(__FILE__, __LINE__, "stop %d: batch %d differs", k, i);
            i++;
            sl_batch_release(b);
        }
        ASSERT_EQ(i, n[0]);
        sl_pipeline_free(p);
        sl_spec_free(spec);
    }
}

SL_TEST(pipeline_shuffle_window__spec_json) {
    sl_spec *spec;
    ASSERT_OK(sl_spec_from_json(&spec, "{\"source\": {\"path\": \"x.slr\", \"shuffle\": "
                                       "{\"mode\": \"window\", \"window\": 4096, "
                                       "\"block\": 64}}}"));
    char buf[4096];
    size_t len;
    ASSERT_OK(sl_spec_to_json(spec, buf, sizeof buf, &len));
    ASSERT_CONTAINS(buf, "\"mode\":\"window\"");
    ASSERT_CONTAINS(buf, "\"window\":4096");
    ASSERT_CONTAINS(buf, "\"block\":64");
    sl_spec_free(spec);
    /* plain true stays plain true (the state hash of existing specs) */
    ASSERT_OK(sl_spec_from_json(&spec, "{\"source\": {\"path\": \"x.slr\", \"shuffle\": true}}"));
    ASSERT_OK(sl_spec_to_json(spec, buf, sizeof buf, &len));
    ASSERT_CONTAINS(buf, "\"shuffle\":true");
    sl_spec_free(spec);
    ASSERT_RC(sl_spec_from_json(&spec, "{\"source\": {\"path\": \"x.slr\", \"shuffle\": "
                                       "{\"mode\": \"local\"}}}"),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "source.shuffle.mode");
    ASSERT_RC(sl_spec_from_json(&spec, "{\"source\": {\"path\": \"x.slr\", \"shuffle\": "
                                       "{\"window\": 8, \"block\": 9}}}"),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "source.shuffle.block");
    ASSERT_RC(sl_spec_from_json(&spec, "{\"source\": {\"path\": \"x.slr\", \"shuffle\": "
                                       "{\"windw\": 8}}}"),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "source.shuffle.windw");
}

/* ---- the global order (mode "global"): a keyed bijection over all records ---- */

static sl_spec *global_spec(int r, int w, sl_shard_equal eq, uint64_t n, uint64_t seed) {
    sl_spec *spec = pu_memory_spec(n);
    ASSERT_OK(sl_spec_set_shuffle_mode(spec, SL_SHUFFLE_GLOBAL, 0, 0));
    ASSERT_OK(sl_spec_set_seed(spec, seed));
    ASSERT_OK(sl_spec_set_shard(spec, r, w, eq));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 4}"));
    return spec;
}

SL_TEST(pipeline_shuffle_global__ranks_disjoint_complete_equal) {
    const uint64_t sizes[] = {1, 2, 7, 203, 256, 257};
    const int w = 4;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        uint64_t n = sizes[s];
        for (int eq = 0; eq < 3; eq++) {
            int count[257] = {0}, nb[4], ns[4], in_order = 0;
            for (int r = 0; r < w; r++) {
                uint64_t idx[300];
                ns[r] = pu_spec_indices(global_spec(r, w, (sl_shard_equal)eq, n, 5), idx, 300,
                                        &nb[r]);
                for (int i = 0; i < ns[r]; i++) {
                    ASSERT(idx[i] < n);
                    count[idx[i]]++;
                    in_order += i > 0 && idx[i] == idx[i - 1] + (uint64_t)w;
                }
            }
            if (n >= 200)
                ASSERT(in_order < 20); /* shuffled, not rank-strided */
            pu_check_shards((sl_shard_equal)eq, n, w, count, ns, nb);
        }
    }
}

/* Each record is equally likely at each position: over 20,000 epochs of 10
 * records, every record lands first 2,000 times give or take 12% (about 5
 * standard deviations), and no pair of records is tied together. */
SL_TEST(pipeline_shuffle_global__positions_uniform_over_epochs) {
    enum { N = 10, E = 20000 };
    int first[N] = {0}, follows[N][N] = {{0}};
    for (uint64_t e = 0; e < E; e++) {
        sl_feistel f;
        sl_feistel_init_rounds(&f, N, 8, 3, e, 0, 0xfffffffffffffff1ull);
        uint64_t a = sl_feistel_fwd(&f, 0), b = sl_feistel_fwd(&f, 1);
        first[a]++;
        follows[a][b]++;
    }
    for (int i = 0; i < N; i++) {
        ASSERT(first[i] > E / N * 88 / 100 && first[i] < E / N * 112 / 100);
        for (int j = 0; j < N; j++)
            if (j != i)
                ASSERT(follows[i][j] < E / (N * (N - 1)) * 150 / 100);
    }
}

/* The pipeline computes the global order a chunk at a time: its records are
 * the one-position bijection's, for every rank, over passes (repeat) whose
 * boundaries fall inside chunks (batches of 7 over passes of 51 or 50). */
SL_TEST(pipeline_shuffle_global__chunks_follow_the_bijection_across_passes) {
    enum { N = 203, W = 4, REP = 3 };
    for (int eq = 0; eq < 3; eq++) {
        for (int r = 0; r < W; r++) {
            sl_spec *spec = pu_memory_spec(N);
            ASSERT_OK(sl_spec_set_shuffle_mode(spec, SL_SHUFFLE_GLOBAL, 0, 0));
            ASSERT_OK(sl_spec_set_seed(spec, 9));
            ASSERT_OK(sl_spec_set_shard(spec, r, W, (sl_shard_equal)eq));
            ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"repeat\", \"count\": 3}"));
            ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 7}"));
            uint64_t idx[REP * (N / W + 1)];
            int nb;
            int ns = pu_spec_indices(spec, idx, REP * (N / W + 1), &nb);
            const uint64_t per = eq == SL_SHARD_PAD ? (N + W - 1) / W
                                 : eq == SL_SHARD_DROP ? N / W
                                                       : N / W + (r < N % W);
            ASSERT_EQ(ns, (int)(REP * per));
            for (uint64_t rep = 0; rep < REP; rep++) {
                sl_feistel f;
                sl_feistel_init_rounds(&f, N, 8, 9, 0, rep, 0xfffffffffffffff1ull);
                for (uint64_t j = 0; j < per; j++)
                    ASSERT_U64_EQ(idx[rep * per + j], sl_feistel_fwd(&f, (j * W + r) % N));
            }
        }
    }
}
