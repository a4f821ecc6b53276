/*
 * fuzz_state.c — sl_pipeline_restore_state on untrusted text: the saved
 * iterator state (JSON) a training job hands back after a restart.
 *
 * Input: the state text (up to the first NUL), then one trailing parameter
 * byte (fuzz/fuzz_data_producer.h) that picks the pipeline it is restored
 * into (fuzz/fuzz_state_pipelines.h).
 * The contract checked:
 *   - a rejected state gives SL_ENOMEM, or an error whose message starts
 *     with "state";
 *   - an accepted state saves back as a state that a fresh pipeline accepts,
 *     which saves back to the same text, and both pipelines then yield the
 *     same next batch (or the same end or error);
 *   - no crash, leak, hang or undefined behaviour.
 */
#include "sluice.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_data_producer.h"
#include "fuzz_state_pipelines.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_state: %s (%s)\n", what, sl_errmsg());
    abort();
}

/* The next batch's status and a hash of where it is and what it holds. */
static int next_batch(sl_pipeline *p, uint64_t *hash) {
    sl_batch *b = NULL;
    int rc = sl_pipeline_next(p, &b);
    uint64_t h = 1469598103934665603ull;
    if (rc == SL_OK && b) {
        h = (h ^ sl_batch_epoch(b)) * 1099511628211ull;
        h = (h ^ sl_batch_index(b)) * 1099511628211ull;
        int col = sl_batch_find(b, "value");
        const sl_tensor *t = col >= 0 ? sl_batch_column(b, col) : NULL;
        if (!t)
            fail("a batch without its value column");
        const uint8_t *q = t->data;
        for (size_t i = 0; i < t->nbytes; i++)
            h = (h ^ q[i]) * 1099511628211ull;
        sl_batch_release(b);
    } else if (rc < 0 && (!sl_errmsg()[0])) {
        fail("a failed next without a message");
    }
    *hash = h;
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) {
        sl_log_set_level(SL_LOG_ERROR);
        quiet = 1;
    }
    fuzz_producer fp;
    fuzz_producer_init(&fp, data, size);
    int variant = (int)fuzz_producer_pick(&fp, STATE_NSPECS);
    char *json = malloc(fp.size + 1);
    if (!json)
        return 0;
    memcpy(json, fp.data, fp.size);
    json[fp.size] = '\0';

    sl_pipeline *p = NULL, *q = NULL;
    if (state_pipeline(variant, &p) != SL_OK)
        fail("the pipeline does not build");
    int rc = sl_pipeline_restore_state(p, json);
    if (rc != SL_OK) {
        const char *m = sl_errmsg();
        if (rc != SL_ENOMEM && strncmp(m, "state", 5) != 0) {
            fprintf(stderr, "fuzz_state: rejected (%d) with a message that names no field: %s\n",
                    rc, m);
            abort();
        }
        goto done;
    }
    char s1[1024], s2[1024];
    size_t n1 = 0, n2 = 0;
    if (sl_pipeline_save_state(p, s1, sizeof s1, &n1) != SL_OK || n1 >= sizeof s1)
        fail("save after restore");
    if (state_pipeline(variant, &q) != SL_OK)
        fail("the pipeline does not build");
    if (sl_pipeline_restore_state(q, s1) != SL_OK)
        fail("a saved state is refused");
    if (sl_pipeline_save_state(q, s2, sizeof s2, &n2) != SL_OK || n2 != n1 || memcmp(s1, s2, n1))
        fail("a restored state saves back differently");
    uint64_t h1 = 0, h2 = 0;
    int r1 = next_batch(p, &h1), r2 = next_batch(q, &h2);
    if (r1 != r2 || h1 != h2) {
        fprintf(stderr, "fuzz_state: after restoring %s the two pipelines differ: %d/%d\n", s1, r1,
                r2);
        abort();
    }
done:
    sl_pipeline_free(p);
    sl_pipeline_free(q);
    free(json);
    return 0;
}
