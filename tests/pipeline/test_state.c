/* Resumable state and sharding. */
#include "core/core.h"
#include "pipe_util.h"

static int scaled_map(sl_sample *s, sl_rng *rng, void *user) {
    (void)user;
    sl_tensor t;
    int64_t shape[1] = {2};
    int rc = sl_tensor_alloc(&t, SL_U64, 1, shape);
    if (rc)
        return rc;
    ((uint64_t *)t.data)[0] = s->index;
    ((uint64_t *)t.data)[1] = sl_rng_next(rng);
    sl_tensor_release(&s->col[0]);
    s->col[0] = t;
    return SL_OK;
}

static int drop_sevens(const sl_sample *s, void *user) {
    (void)user;
    return s->index % 7 != 0;
}

static sl_spec *resume_spec(int variant, int threads) {
    sl_spec *spec = pu_memory_spec(500);
    ASSERT_OK(sl_spec_set_seed(spec, 9));
    ASSERT_OK(sl_spec_set_epochs(spec, 3));
    ASSERT_OK(sl_spec_set_threads(spec, threads));
    ASSERT_OK(sl_spec_set_shuffle(spec, 1));
    ASSERT_OK(sl_spec_set_shard(spec, 1, 3, SL_SHARD_PAD));
    if (variant != 3) /* variant 3: nothing dropped, so map + batch fusion applies */
        ASSERT_OK(sl_spec_add_filter(spec, "drop7", drop_sevens, NULL));
    ASSERT_OK(sl_spec_add_map(spec, "scaled", scaled_map, NULL));
    if (variant == 1)
        ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"shuffle_buffer\", \"size\": 50}"));
    if (variant == 2) {
        ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"skip\", \"count\": 5}"));
        ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"take\", \"count\": 120}"));
    }
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 16}"));
    return spec;
}

static void check_resume(int variant) {
    static uint64_t all[400];
    int n = 0;
    sl_spec *spec = resume_spec(variant, 1);
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    for (int e = 0; e < 3; e++)
        n += pu_run_epoch(p, all + n, 400 - n);
    sl_pipeline_free(p);
    int per_epoch = n / 3;
    ASSERT(per_epoch > 3);
    int stops[] = {0, 1, per_epoch - 1, per_epoch, per_epoch + 2, 2 * per_epoch + 1};
    for (int si = 0; si < 6; si++) {
        int k = stops[si];
        /* run k batches (crossing epochs as needed), save */
        ASSERT_OK(sl_pipeline_create(&p, spec));
        int got = 0;
        while (got < k) {
            sl_batch *b;
            int rc = sl_pipeline_next(p, &b);
            if (rc == SL_END)
                continue;
            ASSERT_OK(rc);
            ASSERT_U64_EQ(pu_digest(b), all[got]);
            got++;
            sl_batch_release(b);
        }
        char state[1024];
        size_t len;
        ASSERT_OK(sl_pipeline_save_state(p, state, sizeof state, &len));
        sl_pipeline_free(p);
        /* a new pipeline (other thread count) continues exactly */
        sl_spec *spec2 = resume_spec(variant, 4);
        ASSERT_OK(sl_pipeline_create(&p, spec2));
        ASSERT_OK(sl_pipeline_restore_state(p, state));
        int i = k;
        while ((int64_t)sl_pipeline_epoch(p) < 3) {
            sl_batch *b;
            int rc = sl_pipeline_next(p, &b);
            if (rc == SL_END)
                continue;
            ASSERT_OK(rc);
            ASSERT(i < n);
            if (pu_digest(b) != all[i])
                sl_test_fail(__FILE__, __LINE__, "variant %d stop %d: batch %d differs", variant,
                             k, i);
            i++;
            sl_batch_release(b);
        }
        ASSERT_EQ(i, n);
        sl_pipeline_free(p);
        sl_spec_free(spec2);
    }
    sl_spec_free(spec);
}

SL_TEST(pipeline_state__resume_exact_shuffle_shard) { check_resume(0); }
SL_TEST(pipeline_state__resume_with_shuffle_buffer) { check_resume(1); }
SL_TEST(pipeline_state__resume_with_take_skip) { check_resume(2); }
SL_TEST(pipeline_state__resume_fused_batches) { check_resume(3); }

SL_TEST(pipeline_state__rejects_other_spec) {
    sl_spec *a = resume_spec(0, 1), *b = resume_spec(2, 1);
    sl_pipeline *p, *q;
    ASSERT_OK(sl_pipeline_create(&p, a));
    ASSERT_OK(sl_pipeline_create(&q, b));
    char state[1024];
    size_t len;
    ASSERT_OK(sl_pipeline_save_state(p, state, sizeof state, &len));
    ASSERT_RC(sl_pipeline_restore_state(q, state), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "state.spec");
    ASSERT_RC(sl_pipeline_restore_state(q, "{\"version\": 1}"), SL_EINVAL);
    ASSERT_RC(sl_pipeline_restore_state(q, "not json"), SL_EINVAL);
    /* a counter too large for an integer (once converted regardless: UB) */
    char big[1100];
    ASSERT_OK(sl_pipeline_save_state(q, state, sizeof state, &len));
    const char *at = strstr(state, "\"counters\":[");
    ASSERT(at != NULL);
    at += strlen("\"counters\":[");
    snprintf(big, sizeof big, "%.*s4.4e61%s%s", (int)(at - state), state, *at == ']' ? "" : ",", at);
    ASSERT_RC(sl_pipeline_restore_state(q, big), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "state.counters[0]");
    ASSERT(len < 300); /* small */
    sl_pipeline_free(p);
    sl_pipeline_free(q);
    sl_spec_free(a);
    sl_spec_free(b);
}

/* Sample indices seen by rank r of w in one epoch. */
static int shard_indices(int r, int w, sl_shard_equal eq, uint64_t n, uint64_t *out, int cap,
                         int *batches) {
    sl_spec *spec = pu_memory_spec(n);
    ASSERT_OK(sl_spec_set_shuffle(spec, 1));
    ASSERT_OK(sl_spec_set_seed(spec, 3));
    ASSERT_OK(sl_spec_set_shard(spec, r, w, eq));
    ASSERT_OK(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 4}"));
    return pu_spec_indices(spec, out, cap, batches);
}

SL_TEST(pipeline_state__shards_disjoint_and_cover) {
    const uint64_t n = 103;
    const int w = 4;
    for (int eq = 0; eq < 3; eq++) {
        int count[103] = {0};
        int nb[4], ns[4];
        for (int r = 0; r < w; r++) {
            uint64_t idx[200];
            ns[r] = shard_indices(r, w, (sl_shard_equal)eq, n, idx, 200, &nb[r]);
            for (int i = 0; i < ns[r]; i++)
                count[idx[i]]++;
        }
        pu_check_shards((sl_shard_equal)eq, n, w, count, ns, nb);
    }
}

/* "shard": "env" takes RANK/WORLD_SIZE (required); without a shard key the
 * pipeline reads every record whatever the environment says. */
SL_TEST(pipeline_state__shard_from_env) {
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "4", 1);
    uint64_t idx[64];
    int nb;
    sl_spec *spec;
    ASSERT_OK(sl_spec_from_json(&spec, "{\"source\": {\"synthetic\": {\"records\": 40}, "
                                       "\"shard\": \"env\"}}"));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    char text[4096];
    size_t len;
    ASSERT_OK(sl_pipeline_explain(p, text, sizeof text, &len));
    ASSERT_CONTAINS(text, "shard 2/4");
    sl_pipeline_free(p);
    setenv("RANK", "4", 1);
    ASSERT_RC(sl_pipeline_create(&p, spec), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "source.shard");
    unsetenv("RANK");
    ASSERT_RC(sl_pipeline_create(&p, spec), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "\"env\" needs RANK and WORLD_SIZE set");
    sl_spec_free(spec);

    setenv("RANK", "2", 1);
    spec = pu_memory_spec(40);
    ASSERT_OK(sl_pipeline_create(&p, spec));
    ASSERT_OK(sl_pipeline_explain(p, text, sizeof text, &len));
    ASSERT(strstr(text, "shard 2/4") == NULL);
    sl_pipeline_free(p);
    ASSERT_EQ(pu_spec_indices(spec, idx, 64, &nb), 40); /* frees spec */
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    ASSERT_EQ(shard_indices(0, 1, SL_SHARD_PAD, 40, idx, 64, &nb), 40);
}

/* OOM loop over saving and restoring a state: fail allocation 1, 2, …
 * (those inside cJSON included) during sl_pipeline_restore_state until it
 * succeeds; each failure is SL_ENOMEM with a message, never "not a JSON
 * object", nothing leaks (ASan), and the restored pipeline saves back the
 * same state. */
SL_TEST(pipeline_state__oom_restore) {
    sl_spec *spec = resume_spec(0, 1);
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_batch *b = NULL;
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(sl_pipeline_next(p, &b));
        sl_batch_release(b);
    }
    char state[1024], again[1024];
    size_t len, len2;
    ASSERT_OK(sl_pipeline_save_state(p, state, sizeof state, &len));
    sl_pipeline_free(p);
    uint64_t n;
    for (n = 1; n < 10000; n++) {
        sl_pipeline *q = NULL;
        ASSERT_OK(sl_pipeline_create(&q, spec));
        sl_errclear();
        sl__alloc_fail_at(n);
        int rc = sl_pipeline_restore_state(q, state);
        sl__alloc_fail_at(0);
        if (rc == SL_OK) {
            ASSERT_OK(sl_pipeline_save_state(q, again, sizeof again, &len2));
            ASSERT_EQ(len2, len);
            ASSERT(strcmp(again, state) == 0);
        }
        sl_pipeline_free(q);
        if (rc == SL_OK)
            break;
        if (rc != SL_ENOMEM)
            sl_test_fail(__FILE__, __LINE__, "fail_at %llu: got %s (%s)", (unsigned long long)n,
                         sl_status_str(rc), sl_errmsg());
        ASSERT(sl_errmsg()[0] != 0);
    }
    ASSERT(n > 5); /* cJSON's allocations were among those failed */
    sl_spec_free(spec);
}
