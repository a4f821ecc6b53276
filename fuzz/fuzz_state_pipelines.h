/*
 * fuzz_state_pipelines.h — the pipelines whose saved state fuzz_state
 * restores, shared with corpus_state.c (which writes real saved states as
 * seeds). Each reads 16 small in-memory samples; the variants cover the two
 * ways a state is resumed (exactly, by position, and by replaying the epoch
 * when a shuffle buffer's contents are not part of the state) and the
 * take/skip counters. Static, header-only.
 */
#ifndef SLUICE_FUZZ_STATE_PIPELINES_H
#define SLUICE_FUZZ_STATE_PIPELINES_H

#include "sluice.h"

#include <stdint.h>

#define STATE_NSAMPLES 16

static const char *const state_specs[] = {
    "{\"source\": {\"path\": \"mem\", \"shuffle\": true}, \"seed\": 5, \"epochs\": 3,"
    " \"ops\": [{\"op\": \"batch\", \"size\": 3}]}",
    "{\"source\": \"mem\", \"seed\": 1, \"ops\": [{\"op\": \"shuffle_buffer\", \"size\": 4},"
    " {\"op\": \"batch\", \"size\": 2}]}",
    "{\"source\": \"mem\", \"seed\": 9, \"epochs\": 2, \"ops\": [{\"op\": \"skip\", \"count\": 2},"
    " {\"op\": \"take\", \"count\": 11}, {\"op\": \"batch\", \"size\": 4, \"drop_remainder\": true}]}",
    "{\"source\": {\"path\": \"mem\", \"shuffle\": true, \"parallel\": 2, \"chunk\": 3}, \"seed\": 3,"
    " \"ops\": [{\"op\": \"repeat\", \"count\": 2}, {\"op\": \"batch\", \"size\": 5}]}",
};
#define STATE_NSPECS ((int)(sizeof state_specs / sizeof state_specs[0]))

/* Build pipeline `variant` (0 .. STATE_NSPECS-1); SL_OK or the error. */
static inline int state_pipeline(int variant, sl_pipeline **out) {
    static int64_t values[STATE_NSAMPLES], labels[STATE_NSAMPLES];
    for (int i = 0; i < STATE_NSAMPLES; i++) {
        values[i] = i * 7 + 1;
        labels[i] = i % 3;
    }
    static const char *const names[] = {"value", "label"};
    int64_t shape[1] = {STATE_NSAMPLES};
    sl_tensor cols[2];
    sl_tensor_view(&cols[0], values, SL_I64, 1, shape);
    sl_tensor_view(&cols[1], labels, SL_I64, 1, shape);
    sl_spec *spec = NULL;
    int rc = sl_spec_from_json(&spec, state_specs[variant]);
    if (rc == SL_OK)
        rc = sl_spec_set_source_columns(spec, 2, names, cols);
    if (rc == SL_OK)
        rc = sl_pipeline_create(out, spec);
    sl_spec_free(spec);
    return rc;
}

#endif
