/*
 * corpus_state.c — writes the seed corpus of fuzz_state: for each pipeline of
 * fuzz/fuzz_state_pipelines.h, the state saved after 0, 1, 2, … batches
 * (across an epoch end), each followed by the parameter byte that selects the
 * pipeline, plus a few damaged states.
 *   corpus_state OUT_DIR
 */
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_state_pipelines.h"
#include "fuzz_util.h"

static int nfiles;

static void emit(const char *dir, const char *name, const char *text, int variant) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t n = strlen(text);
    uint8_t *buf = malloc(n + 1);
    if (!buf)
        abort();
    memcpy(buf, text, n);
    buf[n] = (uint8_t)variant; /* fuzz_producer_pick(STATE_NSPECS) reads it */
    write_bytes(path, buf, n + 1);
    free(buf);
    nfiles++;
}

/* `state` with the number after "key": replaced by `value`. */
static void set_field(const char *state, const char *key, const char *value, char *out, size_t cap) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(state, pat);
    if (!at) {
        snprintf(out, cap, "%s", state);
        return;
    }
    at += strlen(pat);
    const char *end = at + strspn(at, "-0123456789.");
    snprintf(out, cap, "%.*s%s%s", (int)(at - state), state, value, end);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: corpus_state OUT_DIR\n");
        return 2;
    }
    sl_log_set_level(SL_LOG_ERROR);
    for (int v = 0; v < STATE_NSPECS; v++) {
        sl_pipeline *p = NULL;
        if (state_pipeline(v, &p) != SL_OK) {
            fprintf(stderr, "corpus_state: pipeline %d: %s\n", v, sl_errmsg());
            return 1;
        }
        char state[1024], name[64];
        size_t len = 0;
        for (int k = 0; k < 8; k++) {
            if (sl_pipeline_save_state(p, state, sizeof state, &len) != SL_OK)
                return 1;
            snprintf(name, sizeof name, "p%d_after_%d", v, k);
            emit(argv[1], name, state, v);
            if (k == 2) {
                /* damaged: a wrong version, hostile counts, text after the object */
                static const char *const edits[][3] = {
                    {"version", "2", "bad_version"},       {"batch", "9000000000000000", "huge_batch"},
                    {"pos", "9000000000000000", "huge_pos"}, {"epoch", "9000000000000000", "huge_epoch"},
                    {"pos", "-1", "negative_pos"},         {"batch", "1.5", "fractional_batch"},
                };
                char bad[1100];
                for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
                    set_field(state, edits[e][0], edits[e][1], bad, sizeof bad);
                    snprintf(name, sizeof name, "p%d_%s", v, edits[e][2]);
                    emit(argv[1], name, bad, v);
                }
                const char *cn = strstr(state, "\"counters\":[");
                if (cn) { /* a counter no integer holds (once undefined behaviour) */
                    cn += strlen("\"counters\":[");
                    snprintf(bad, sizeof bad, "%.*s4.4e61%s%s", (int)(cn - state), state,
                             *cn == ']' ? "" : ",", cn);
                    snprintf(name, sizeof name, "p%d_huge_counter", v);
                    emit(argv[1], name, bad, v);
                }
                snprintf(bad, sizeof bad, "%s x", state);
                snprintf(name, sizeof name, "p%d_trailing", v);
                emit(argv[1], name, bad, v);
            }
            sl_batch *b = NULL;
            int rc = sl_pipeline_next(p, &b);
            sl_batch_release(b);
            if (rc < 0)
                return 1;
        }
        sl_pipeline_free(p);
    }
    emit(argv[1], "empty", "", 0);
    emit(argv[1], "not_object", "[1, 2]", 1);
    printf("wrote %d seeds to %s\n", nfiles, argv[1]);
    return 0;
}
