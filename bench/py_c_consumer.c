/*
 * py_c_consumer.c — the C baseline for bench/py_overhead.py: run a pipeline
 * spec (JSON file) for some epochs, touching nothing but the batch handles,
 * and print one JSON line per epoch with batches/s. The Python consumer of
 * the same spec is measured against this, so the difference is the cost of
 * crossing into Python. Uses only sluice.h.
 *
 *   py_c_consumer SPEC.json EPOCHS
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n] = 0;
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SPEC.json EPOCHS\n", argv[0]);
        return 2;
    }
    char *json = slurp(argv[1]);
    if (!json) {
        fprintf(stderr, "%s: cannot read\n", argv[1]);
        return 1;
    }
    int epochs = atoi(argv[2]);
    sl_spec *spec = NULL;
    sl_pipeline *p = NULL;
    int rc = sl_spec_from_json(&spec, json);
    free(json);
    if (rc == SL_OK)
        rc = sl_pipeline_create(&p, spec);
    sl_spec_free(spec);
    if (rc < 0) {
        fprintf(stderr, "error: %s\n", sl_errmsg());
        return 1;
    }
    for (int e = 0; e < epochs; e++) {
        rc = sl_pipeline_set_epoch(p, (uint64_t)e);
        double t0 = now_s();
        long batches = 0, samples = 0;
        sl_batch *b;
        while (rc >= 0 && (rc = sl_pipeline_next(p, &b)) == SL_OK) {
            batches++;
            samples += (long)sl_batch_size(b);
            sl_batch_release(b);
        }
        if (rc < 0) {
            fprintf(stderr, "error: %s\n", sl_errmsg());
            sl_pipeline_free(p);
            return 1;
        }
        double dt = now_s() - t0;
        printf("{\"epoch\": %d, \"batches\": %ld, \"samples\": %ld, \"batches_s\": %.1f, "
               "\"img_s\": %.1f}\n", e, batches, samples, (double)batches / dt,
               (double)samples / dt);
        fflush(stdout);
    }
    sl_pipeline_free(p);
    return 0;
}
