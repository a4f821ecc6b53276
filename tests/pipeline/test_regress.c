/* Regression cases found by the fuzz targets (fuzz/fuzz_spec.c). */
#include "pipe_util.h"

/* Resume with a shuffle buffer and a skip: the restored pipeline replays the
 * epoch and must count the skip again, giving the same next batch as an
 * uninterrupted run. */
SL_TEST(pipeline_regress__resume_shuffle_buffer_then_skip) {
    const char *ops[] = {"{\"op\":\"shuffle_buffer\",\"size\":4}", "{\"op\":\"skip\",\"count\":1}",
                         "{\"op\":\"batch\",\"size\":2}"};
    uint64_t want[16], got[16];
    char state[4096];
    size_t len = 0;
    for (int run = 0; run < 2; run++) {
        sl_spec *spec = pu_memory_spec(20);
        for (int i = 0; i < 3; i++)
            ASSERT_OK(sl_spec_add_op_json(spec, ops[i]));
        sl_pipeline *p;
        ASSERT_OK(sl_pipeline_create(&p, spec));
        if (run == 0) {
            int n = pu_run_epoch(p, want, 16);
            ASSERT(n >= 4);
            sl_pipeline_free(p);
            /* second pipeline: stop after 2 batches and save */
            ASSERT_OK(sl_pipeline_create(&p, spec));
            for (int k = 0; k < 2; k++) {
                sl_batch *b;
                ASSERT_OK(sl_pipeline_next(p, &b));
                sl_batch_release(b);
            }
            ASSERT_OK(sl_pipeline_save_state(p, state, sizeof state, &len));
            ASSERT(len < sizeof state);
        } else {
            ASSERT_OK(sl_pipeline_restore_state(p, state));
            int n = pu_run_epoch(p, got, 16);
            ASSERT(n >= 2);
            for (int k = 0; k < n; k++)
                ASSERT_U64_EQ(got[k], want[k + 2]);
        }
        sl_pipeline_free(p);
        sl_spec_free(spec);
    }
}

/* Text after the JSON document is an error, not silently ignored. */
SL_TEST(pipeline_regress__trailing_text_rejected) {
    sl_spec *spec = NULL;
    ASSERT_RC(sl_spec_from_json(&spec, "{\"source\":{\"path\":\"x.slr\"}} ]] garbage"), SL_EINVAL);
    ASSERT(spec == NULL);
    spec = pu_memory_spec(4);
    ASSERT_RC(sl_spec_add_op_json(spec, "{\"op\":\"batch\",\"size\":2} x"), SL_EINVAL);
    sl_spec_free(spec);
}

/* sl_spec_to_json keeps the source's parallelism knobs (they were dropped),
 * and a state saved under one worker count resumes under another: the knobs
 * do not change a batch, so they are not part of the spec's identity. */
SL_TEST(pipeline_regress__parallel_knobs_roundtrip_and_resume) {
    const char *slr_free_spec =
        "{\"source\":{\"path\":\"x.slr\",\"shuffle\":true,\"parallel\":\"auto\",\"chunk\":16},"
        "\"ops\":[{\"op\":\"batch\",\"size\":4}],\"seed\":3}";
    sl_spec *spec;
    ASSERT_OK(sl_spec_from_json(&spec, slr_free_spec));
    char text[4096];
    size_t len = 0;
    ASSERT_OK(sl_spec_to_json(spec, text, sizeof text, &len));
    ASSERT_CONTAINS(text, "\"parallel\":\"auto\"");
    ASSERT_CONTAINS(text, "\"chunk\":16");
    sl_spec_free(spec);

    uint64_t want[32], got[32];
    char state[4096];
    for (int run = 0; run < 3; run++) {
        sl_spec *s = pu_memory_spec(40);
        ASSERT_OK(sl_spec_set_shuffle(s, 1));
        ASSERT_OK(sl_spec_add_op_json(s, run == 2 ? "{\"op\":\"batch\",\"size\":4,\"parallel\":2}"
                                                  : "{\"op\":\"batch\",\"size\":4,\"parallel\":1}"));
        sl_pipeline *p;
        ASSERT_OK(sl_pipeline_create(&p, s));
        if (run == 0) {
            ASSERT_EQ(pu_run_epoch(p, want, 32), 10);
        } else if (run == 1) {
            for (int k = 0; k < 3; k++) {
                sl_batch *b;
                ASSERT_OK(sl_pipeline_next(p, &b));
                sl_batch_release(b);
            }
            ASSERT_OK(sl_pipeline_save_state(p, state, sizeof state, &len));
        } else {
            ASSERT_OK(sl_pipeline_restore_state(p, state));
            ASSERT_EQ(pu_run_epoch(p, got, 32), 7);
            for (int k = 0; k < 7; k++)
                ASSERT_U64_EQ(got[k], want[k + 3]);
        }
        sl_pipeline_free(p);
        sl_spec_free(s);
    }
}
