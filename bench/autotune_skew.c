/*
 * autotune_skew.c — a synthetic two-stage pipeline whose stages cost 10:1 per
 * sample, for bench/autotune_grid.py: autotune has to give the expensive
 * stage the workers.
 *
 *   autotune_skew [--seconds S] [--a N|auto] [--b N|auto] [--depth D]
 *                 [--cost ITERS] [--samples N]
 *
 * Source: N int64 samples held in memory. Stage A (run in the reading
 * workers, as sluice does for a memory source) is a user map doing 10 x ITERS
 * rounds of integer mixing; a prefetch op cuts the plan there, so stage B is
 * a second map stage doing ITERS rounds, then batch(64) (collated by B's
 * workers). The work is counted in CPU instructions, not in wall time, so a
 * preempted worker does not "spend" its cost asleep. Hand settings: `--a` and
 * `--b` set each stage's workers (a "parallel" select that keeps every column
 * rides along in the stage: a user map cannot carry the key itself), `--depth`
 * both prefetch depths (the queue between the stages and the batches ready
 * ahead). Without them every count is "auto".
 *
 * Prints what `sluice bench --json` prints: the stats object plus "timeline"
 * (samples/s per 0.25 s from the start) and "timeline_workers".
 */
#include "sluice.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STEP 0.25
#define MAX_STEPS 4096

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* `rounds` rounds of xorshift-multiply on the sample's value: pure CPU. */
static int work(sl_sample *s, sl_rng *rng, void *user) {
    (void)rng;
    uint64_t rounds = (uint64_t)(uintptr_t)user;
    uint64_t x = (uint64_t)(*(const int64_t *)s->col[0].data) | 1;
    for (uint64_t i = 0; i < rounds; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x *= 0x9E3779B97F4A7C15ull;
    }
    __asm__ volatile("" : : "r"(x)); /* keep the work */
    return SL_OK;
}

static int check(int rc, const char *what) {
    if (rc < 0) {
        fprintf(stderr, "autotune_skew: %s: %s\n", what, sl_errmsg());
        exit(1);
    }
    return rc;
}

static void add_par(sl_spec *spec, int n) {
    if (n <= 0)
        return;
    char j[128];
    snprintf(j, sizeof j, "{\"op\": \"select\", \"columns\": [\"x\"], \"parallel\": %d}", n);
    check(sl_spec_add_op_json(spec, j), "select");
}

int main(int argc, char **argv) {
    double seconds = 3;
    int a = 0, b = 0, depth = 0;
    long iters = 400, n = 200000;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--seconds"))
            seconds = atof(v);
        else if (!strcmp(k, "--a"))
            a = strcmp(v, "auto") ? atoi(v) : 0;
        else if (!strcmp(k, "--b"))
            b = strcmp(v, "auto") ? atoi(v) : 0;
        else if (!strcmp(k, "--depth"))
            depth = atoi(v);
        else if (!strcmp(k, "--cost"))
            iters = atol(v);
        else if (!strcmp(k, "--samples"))
            n = atol(v);
        else {
            fprintf(stderr, "autotune_skew: unknown option %s\n", k);
            return 2;
        }
    }
    int64_t *vals = malloc((size_t)n * sizeof *vals);
    for (long i = 0; i < n; i++)
        vals[i] = i * 2654435761LL;
    sl_tensor col;
    memset(&col, 0, sizeof col);
    col.dtype = SL_I64;
    col.ndim = 1;
    col.shape[0] = n;
    col.data = vals;
    col.nbytes = (size_t)n * sizeof *vals;
    const char *names[1] = {"x"};
    sl_spec *spec;
    check(sl_spec_create(&spec), "spec");
    check(sl_spec_set_source_columns(spec, 1, names, &col), "source");
    free(vals);
    check(sl_spec_set_epochs(spec, 1000000000LL), "epochs");
    check(sl_spec_add_map(spec, "A (10x)", work, (void *)(uintptr_t)(10 * iters)), "map A");
    add_par(spec, a);
    char j[128];
    snprintf(j, sizeof j, "{\"op\": \"prefetch\", \"depth\": %d}", depth > 0 ? depth : 4);
    if (depth > 0) /* without --depth the layout sizes the queue */
        check(sl_spec_add_op_json(spec, j), "prefetch");
    else
        check(sl_spec_add_op_json(spec, "{\"op\": \"prefetch\", \"depth\": 1}"), "prefetch");
    check(sl_spec_add_map(spec, "B (1x)", work, (void *)(uintptr_t)iters), "map B");
    add_par(spec, b);
    check(sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 64}"), "batch");
    if (depth > 0) {
        snprintf(j, sizeof j, "{\"op\": \"prefetch\", \"depth\": %d}", depth);
        check(sl_spec_add_op_json(spec, j), "prefetch");
    }
    sl_pipeline *p;
    check(sl_pipeline_create(&p, spec), "create");
    static double rate[MAX_STEPS];
    static int wk[MAX_STEPS][SL_STATS_MAX_STAGES];
    int steps = 0, nst = 0;
    uint64_t samples = 0, mark = 0;
    double t0 = now_s(), t, mark_t = 0;
    while ((t = now_s() - t0) < seconds) {
        if (t >= (steps + 1) * STEP && steps < MAX_STEPS) {
            sl_pipeline_stats st;
            check(sl_pipeline_stats_get(p, &st), "stats");
            nst = st.nstages;
            double r = (double)(samples - mark) / (t - mark_t);
            while (steps < MAX_STEPS && t >= (steps + 1) * STEP) {
                rate[steps] = r;
                for (int s = 0; s < nst; s++)
                    wk[steps][s] = st.stage[s].workers;
                steps++;
            }
            mark = samples;
            mark_t = t;
        }
        sl_batch *bt;
        int rc = sl_pipeline_next(p, &bt);
        if (rc == SL_END)
            continue;
        check(rc, "next");
        samples += (uint64_t)sl_batch_size(bt);
        sl_batch_release(bt);
    }
    /* the numbers move between calls: size generously, retry if cut */
    size_t cap = 16384, len = 0;
    char *text = NULL;
    for (;;) {
        free(text);
        text = malloc(cap);
        check(sl_pipeline_stats_json(p, text, cap, &len), "stats");
        if (len < cap)
            break;
        cap = len + 4096;
    }
    cJSON *doc = cJSON_Parse(text);
    if (!doc) {
        fprintf(stderr, "autotune_skew: stats are not JSON\n");
        return 1;
    }
    cJSON_AddNumberToObject(doc, "timeline_step_s", STEP);
    cJSON *tl = cJSON_AddArrayToObject(doc, "timeline");
    cJSON *tw = cJSON_AddArrayToObject(doc, "timeline_workers");
    for (int i = 0; i < steps; i++) {
        cJSON_AddItemToArray(tl, cJSON_CreateNumber(rate[i]));
        cJSON_AddItemToArray(tw, cJSON_CreateIntArray(wk[i], nst));
    }
    char *out = cJSON_PrintUnformatted(doc);
    printf("%s\n", out);
    cJSON_free(out);
    cJSON_Delete(doc);
    free(text);
    sl_pipeline_free(p);
    sl_spec_free(spec);
    return 0;
}
