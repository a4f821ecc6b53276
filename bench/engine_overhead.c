/*
 * engine_overhead.c — the pipeline engine's own costs, measured through the
 * public API only:
 *
 *   overhead  samples/s through source -> trivial map -> batch(256) over
 *             Fashion-MNIST-sized samples (28x28 uint8 + int64 label) held in
 *             memory, shuffled per epoch (what DataLoader(TensorDataset) does)
 *   scaling   a CPU-heavy user map at 1 and 2 threads (ratio to linear)
 *   boundary  the gap from the last batch of epoch k to the first batch of
 *             k+1 (median over epochs), against the median gap between
 *             batches
 *
 * Prints one JSON line per measurement. Data: the Fashion-MNIST training
 * images from /usr/share/datasets/fashion-mnist when present (gzip'd IDX),
 * else 60000 synthetic samples of the same shape.
 */
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#define N 60000

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Read a gzip'd IDX payload (skipping its header) into out[n]. */
static int read_idx(const char *path, size_t header, uint8_t *out, size_t n) {
    gzFile f = gzopen(path, "rb");
    if (!f)
        return -1;
    uint8_t h[16];
    int ok = gzread(f, h, (unsigned)header) == (int)header &&
             gzread(f, out, (unsigned)n) == (int)n;
    gzclose(f);
    return ok ? 0 : -1;
}

static sl_spec *fmnist_spec(int *real) {
    static uint8_t *img;
    static int64_t *lab;
    static int loaded = -1;
    if (loaded < 0) {
        img = malloc((size_t)N * 784);
        lab = malloc((size_t)N * sizeof *lab);
        uint8_t *l8 = malloc(N);
        const char *root = "/usr/share/datasets/fashion-mnist/";
        char a[256], b[256];
        snprintf(a, sizeof a, "%strain-images-idx3-ubyte.gz", root);
        snprintf(b, sizeof b, "%strain-labels-idx1-ubyte.gz", root);
        loaded = read_idx(a, 16, img, (size_t)N * 784) == 0 && read_idx(b, 8, l8, N) == 0;
        for (int i = 0; i < N; i++) {
            if (!loaded)
                for (int k = 0; k < 784; k++)
                    img[(size_t)i * 784 + (size_t)k] = (uint8_t)(sl_mix64((uint64_t)i * 784 + (uint64_t)k));
            lab[i] = loaded ? l8[i] : i % 10;
        }
        free(l8);
    }
    *real = loaded;
    sl_spec *spec;
    sl_spec_create(&spec);
    sl_tensor cols[2];
    int64_t xs[3] = {N, 28, 28}, ls[1] = {N};
    sl_tensor_view(&cols[0], img, SL_U8, 3, xs);
    sl_tensor_view(&cols[1], lab, SL_I64, 1, ls);
    const char *names[2] = {"image", "label"};
    if (sl_spec_set_source_columns(spec, 2, names, cols) < 0) {
        fprintf(stderr, "%s\n", sl_errmsg());
        exit(1);
    }
    return spec;
}

/* The "trivial map": look at the label, change nothing. */
static int trivial_map(sl_sample *s, sl_rng *rng, void *user) {
    (void)rng;
    volatile int64_t *sink = user;
    *sink += *(const int64_t *)s->col[1].data;
    return SL_OK;
}

/* About `user` microseconds of arithmetic per sample. */
static int heavy_map(sl_sample *s, sl_rng *rng, void *user) {
    (void)rng;
    uint64_t x = s->index, iters = (uint64_t)(uintptr_t)user * 150;
    for (uint64_t i = 0; i < iters; i++)
        x = sl_mix64(x + i);
    volatile uint64_t sink = x;
    (void)sink;
    return SL_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what) {
    fprintf(stderr, "engine_overhead: %s: %s\n", what, sl_errmsg());
    exit(1);
}

/* Run `epochs` epochs; return samples/s over all; optionally record the
 * epoch-boundary gap and the median batch gap. */
static double run(sl_spec *spec, int epochs, double *boundary, double *median) {
    sl_pipeline *p;
    if (sl_spec_set_epochs(spec, epochs) < 0 || sl_pipeline_create(&p, spec) < 0)
        die("create");
    size_t cap = 64 + (size_t)epochs * (N / 256 + 2);
    double *t = malloc(cap * sizeof *t);
    int *first = calloc(cap, sizeof *first);
    size_t nb = 0;
    uint64_t samples = 0;
    int new_epoch = 1;
    double t0 = now_s();
    while ((int64_t)sl_pipeline_epoch(p) < epochs) {
        sl_batch *b;
        int rc = sl_pipeline_next(p, &b);
        if (rc == SL_END) {
            new_epoch = 1;
            continue;
        }
        if (rc < 0)
            die("next");
        if (nb < cap) {
            t[nb] = now_s();
            first[nb] = new_epoch;
            nb++;
        }
        new_epoch = 0;
        samples += (uint64_t)sl_batch_size(b);
        sl_batch_release(b);
    }
    double dt = now_s() - t0;
    if (boundary && nb > 2) {
        /* medians: a shared machine deschedules threads now and then, and a
         * maximum would measure that rather than the boundary */
        double *gaps = malloc(nb * sizeof *gaps), *eg = malloc(nb * sizeof *eg);
        size_t ng = 0, ne = 0;
        for (size_t i = 1; i < nb; i++) {
            double g = t[i] - t[i - 1];
            if (first[i])
                eg[ne++] = g;
            else
                gaps[ng++] = g;
        }
        qsort(gaps, ng, sizeof *gaps, cmp_double);
        qsort(eg, ne, sizeof *eg, cmp_double);
        *boundary = ne ? eg[ne / 2] : 0;
        *median = ng ? gaps[ng / 2] : 0;
        free(gaps);
        free(eg);
    }
    free(t);
    free(first);
    sl_pipeline_free(p);
    return (double)samples / dt;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "overhead";
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    int epochs = argc > 3 ? atoi(argv[3]) : 3;
    int real;
    static volatile int64_t sink;
    if (!strcmp(mode, "overhead")) {
        sl_spec *spec = fmnist_spec(&real);
        sl_spec_set_shuffle(spec, 1);
        sl_spec_set_threads(spec, threads);
        sl_spec_add_map(spec, "trivial", trivial_map, (void *)&sink);
        sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 256}");
        double boundary = 0, median = 0;
        double sps = run(spec, epochs, &boundary, &median);
        printf("{\"bench\": \"engine_overhead\", \"data\": \"%s\", \"threads\": %d, "
               "\"epochs\": %d, \"samples_per_s\": %.0f, \"epoch_gap_ms\": %.3f, "
               "\"median_batch_gap_ms\": %.3f}\n",
               real ? "fashion-mnist" : "synthetic", threads, epochs, sps, boundary * 1e3,
               median * 1e3);
        sl_spec_free(spec);
    } else if (!strcmp(mode, "scaling")) {
        int us = argc > 4 ? atoi(argv[4]) : 20;
        double r[2];
        for (int t = 1; t <= 2; t++) {
            sl_spec *spec = fmnist_spec(&real);
            sl_spec_set_threads(spec, t);
            sl_spec_add_map(spec, "heavy", heavy_map, (void *)(uintptr_t)us);
            sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 256}");
            r[t - 1] = run(spec, 1, NULL, NULL);
            sl_spec_free(spec);
        }
        printf("{\"bench\": \"engine_scaling\", \"work_us\": %d, \"samples_per_s_1\": %.0f, "
               "\"samples_per_s_2\": %.0f, \"of_linear\": %.3f}\n",
               us, r[0], r[1], r[1] / (2 * r[0]));
    } else {
        fprintf(stderr, "usage: engine_overhead overhead|scaling [threads] [epochs] [work_us]\n");
        return 2;
    }
    return 0;
}
