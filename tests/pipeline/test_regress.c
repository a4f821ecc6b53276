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
