/* cmd_run.c — `sluice run SPEC`: run a pipeline, optionally printing a
 * digest per batch, stopping early with a saved state, or resuming. */
#include "pipe_common.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

static void help(FILE *f) {
    fprintf(f, "usage: sluice run SPEC.json [--epochs N] [--threads N] [--digest]\n"
               "                  [--stop-after K --save-state FILE] [--resume FILE] [--trace FILE]\n"
               "\n"
               "Run the pipeline a JSON spec describes (docs/PIPELINE.md) and consume its\n"
               "batches. Without --digest, prints one summary line at the end.\n"
               "\n"
               "options:\n"
               "  --epochs N         epochs to run (default: the spec's \"epochs\")\n"
               "  --threads N        workers of every parallel stage (overrides \"parallel\")\n"
               "  --digest           print one line per batch: EPOCH:BATCH and the XXH3-64 of\n"
               "                     all its bytes (column names, dtypes, shapes, data)\n"
               "  --stop-after K     stop after K batches\n"
               "  --save-state FILE  write the iterator state there when stopping\n"
               "  --resume FILE      continue from a state saved by --save-state\n"
               "  --trace FILE       write a Chrome/Perfetto trace of the workers there\n"
               "  -h, --help         show this help\n"
               "\n"
               "exit status: 0 done, 1 bad spec, unreadable data or a failed sample, 2 usage\n"
               "\n"
               "examples:\n"
               "  sluice run train.json --digest > all.txt\n"
               "  sluice run train.json --digest --stop-after 10 --save-state st.json\n"
               "  sluice run train.json --digest --resume st.json\n");
}

static uint64_t batch_digest(const sl_batch *b) {
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 0;
    XXH3_64bits_reset(st);
    for (int c = 0; c < sl_batch_ncols(b); c++) {
        const char *name = sl_batch_name(b, c);
        XXH3_64bits_update(st, name, strlen(name) + 1);
        int ragged = sl_batch_is_ragged(b, c);
        int64_t n = ragged ? sl_batch_size(b) : 1;
        for (int64_t i = 0; i < n; i++) {
            const sl_tensor *t = ragged ? sl_batch_item(b, c, i) : sl_batch_column(b, c);
            int32_t meta[2] = {(int32_t)t->dtype, t->ndim};
            XXH3_64bits_update(st, meta, sizeof meta);
            XXH3_64bits_update(st, t->shape, sizeof(int64_t) * (size_t)t->ndim);
            XXH3_64bits_update(st, t->data, t->nbytes);
        }
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

int cmd_run(int argc, char **argv) {
    const char *spec_path = NULL, *save = NULL, *resume = NULL, *trace = NULL;
    long long epochs = -1, threads = -1, stop_after = -1;
    int digest = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "--digest")) {
            digest = 1;
        } else if (!strcmp(a, "--epochs") || !strcmp(a, "--threads") ||
                   !strcmp(a, "--stop-after")) {
            if (i + 1 >= argc)
                return cli_usage("run", "%s needs a value", a);
            long long v = cli_parse_count(argv[++i]);
            if (v < 0 || (v == 0 && strcmp(a, "--stop-after") != 0))
                return cli_usage("run", "%s: '%s' is not a valid count", a, argv[i]);
            if (!strcmp(a, "--epochs"))
                epochs = v;
            else if (!strcmp(a, "--threads"))
                threads = v;
            else
                stop_after = v;
        } else if (!strcmp(a, "--trace")) {
            if (i + 1 >= argc)
                return cli_usage("run", "--trace needs a file");
            trace = argv[++i];
        } else if (!strcmp(a, "--save-state") || !strcmp(a, "--resume")) {
            if (i + 1 >= argc)
                return cli_usage("run", "%s needs a file", a);
            if (!strcmp(a, "--save-state"))
                save = argv[++i];
            else
                resume = argv[++i];
        } else if (a[0] == '-') {
            return cli_usage("run", "unknown option '%s'", a);
        } else if (!spec_path) {
            spec_path = a;
        } else {
            return cli_usage("run", "more than one spec given");
        }
    }
    if (!spec_path)
        return cli_usage("run", "no spec file given");
    if (save && stop_after < 0)
        return cli_usage("run", "--save-state needs --stop-after K");
    sl_pipeline *p;
    int ec = cli_build_pipeline("run", spec_path, epochs, threads, &p);
    if (ec)
        return ec;
    if (trace && sl_pipeline_trace_enable(p, 0) < 0) {
        sl_pipeline_free(p);
        return cli_fail("run");
    }
    if (resume) {
        char *st = cli_read_file("run", resume);
        if (!st) {
            sl_pipeline_free(p);
            return 1;
        }
        int rc = sl_pipeline_restore_state(p, st);
        free(st);
        if (rc < 0) {
            fprintf(stderr, "sluice run: %s: %s\n", resume, sl_errmsg());
            sl_pipeline_free(p);
            return 1;
        }
    }
    uint64_t batches = 0, samples = 0;
    int64_t total_epochs = sl_pipeline_epochs(p);
    ec = 0;
    uint64_t t0 = 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }
    while ((int64_t)sl_pipeline_epoch(p) < total_epochs) {
        if (stop_after >= 0 && batches >= (uint64_t)stop_after)
            break;
        sl_batch *b;
        int rc = sl_pipeline_next(p, &b);
        if (rc == SL_END)
            continue;
        if (rc < 0) {
            ec = cli_fail("run");
            break;
        }
        if (digest)
            printf("%llu:%llu %016llx\n", (unsigned long long)sl_batch_epoch(b),
                   (unsigned long long)sl_batch_index(b), (unsigned long long)batch_digest(b));
        batches++;
        samples += (uint64_t)sl_batch_size(b);
        sl_batch_release(b);
    }
    /* on_error: skip dropped samples: say how many, and the first cause,
     * on stderr (stdout may be a digest per batch) */
    sl_pipeline_stats sk;
    if (sl_pipeline_stats_get(p, &sk) == SL_OK && sk.skipped)
        fprintf(stderr, "sluice run: skipped %llu samples (on_error: skip; first: %s)\n",
                (unsigned long long)sk.skipped, sk.nerrors ? sk.errors[0] : "");
    if (!ec && save) {
        char st[2048];
        size_t len;
        sl_pipeline_save_state(p, st, sizeof st, &len);
        FILE *f = fopen(save, "w");
        if (!f || fprintf(f, "%s\n", st) < 0 || fclose(f) != 0) {
            fprintf(stderr, "sluice run: %s: cannot write the state\n", save);
            ec = 1;
        }
    }
    if (!ec && trace)
        ec = cli_write_trace("run", p, trace);
    if (!ec && !digest) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double secs = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - t0) / 1e9;
        printf("%llu batches, %llu samples in %.3f s (%.0f samples/s)\n",
               (unsigned long long)batches, (unsigned long long)samples, secs,
               secs > 0 ? samples / secs : 0.0);
    }
    sl_pipeline_free(p);
    return ec;
}
