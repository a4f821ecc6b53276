/* cmd_bench.c — `sluice bench SPEC`: run a pipeline flat out for a while and
 * say what bounds it (reading F, processing P, or the consumer G). */
#include "pipe_common.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void help(FILE *f) {
    fprintf(f, "usage: sluice bench SPEC.json [--seconds S] [--threads N] [--json] [--trace FILE]\n"
               "\n"
               "Consume the pipeline's batches as fast as possible for S seconds (default\n"
               "5; epochs repeat as needed), then report samples/s, per-stage counters\n"
               "(elements/s, busy time, time waiting for input and for output space, queue\n"
               "fill, us per sample), the op split of stages running image ops (us per\n"
               "sample in JPEG decode, resample and normalize, timed on 1 sample in 8) and\n"
               "the verdict: bound by reading (F), by processing (P, naming the stage) or\n"
               "by the consumer (G), with the numbers behind it.\n"
               "\n"
               "options:\n"
               "  --seconds S   how long to run (default 5; a decimal is fine)\n"
               "  --threads N   workers of every parallel stage\n"
               "  --json        print one JSON object (samples_per_s, bound, verdict, stages)\n"
               "  --trace FILE  write a Chrome/Perfetto trace of the workers there\n"
               "\n"
               "The timeline gives samples/s in each 0.25 s from the start (how fast\n"
               "autotune settles) and the workers of every stage at the end of each.\n"
               "\n"
               "exit status: 0 done, 1 bad spec, unreadable data or a failed sample, 2 usage\n");
}

/* Pipeline from a pack made with --jpeg-restart auto over the same pipeline
 * from the plain pack: the medians of interleaved runs of the ImageNet-style
 * training pipeline on 2 cores (docs/OPS.md, "The current figures": 4437 /
 * 3610 img/s). */
#define RESTART_GAIN "1.2"

/* 1: `p` is a JPEG carrying an APP15 "SLRST" interval table (docs/FORMAT.md
 * section 16); 0: a JPEG without one; -1: not a JPEG. Walks the segments
 * before the first SOS. */
static int jpeg_has_table(const uint8_t *p, size_t n) {
    if (n < 4 || p[0] != 0xFF || p[1] != 0xD8)
        return -1;
    size_t i = 2;
    while (i + 4 <= n && p[i] == 0xFF) {
        uint8_t m = p[i + 1];
        if (m == 0xDA || m == 0xD9)
            break;
        size_t len = ((size_t)p[i + 2] << 8) | p[i + 3];
        if (m == 0xEF && len >= 8 && i + 10 <= n && !memcmp(p + i + 4, "SLRST", 6))
            return 1;
        i += 2 + len;
    }
    return 0;
}

/* When processing bounds a pipeline that decodes random crops of JPEGs
 * stored without an interval table (a few records sampled), say that
 * repacking with --jpeg-restart auto would help. Public API only: the
 * spec's source opened again, a few records read. Silent on any failure. */
static void restart_hint(const char *spec_path, const sl_pipeline_stats *st) {
    if (st->bound != 'P' || !strstr(st->bound_stage, "decode_random_resized_crop"))
        return;
    char *text = cli_read_spec("bench", spec_path);
    if (!text) {
        sl_errclear();
        return;
    }
    cJSON *spec = cJSON_Parse(text);
    free(text);
    char *src_json = NULL;
    const cJSON *src_obj = spec ? cJSON_GetObjectItemCaseSensitive(spec, "source") : NULL;
    if (src_obj)
        src_json = cJSON_PrintUnformatted(src_obj);
    cJSON_Delete(spec);
    sl_source *src = NULL;
    int rc = src_json ? sl_source_open(&src, src_json) : -1;
    free(src_json);
    if (rc < 0) {
        sl_errclear();
        return;
    }
    uint64_t n = sl_source_count(src);
    int jpegs = 0, tables = 0;
    for (uint64_t k = 0; k < 8 && k < n; k++) {
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        if (sl_source_read(src, k * n / 8, &smp) < 0) {
            sl_errclear();
            continue;
        }
        for (uint32_t c = 0; c < smp.ncols; c++) {
            const sl_tensor *t = &smp.col[c];
            if (t->dtype != SL_U8 || t->ndim != 1 || !t->data)
                continue;
            int h = jpeg_has_table(t->data, t->nbytes);
            if (h >= 0) {
                jpegs++;
                tables += h;
            }
        }
        sl_sample_clear(&smp);
    }
    sl_source_free(src);
    if (jpegs > 0 && tables == 0)
        printf("hint: decoding bounds this pipeline and none of %d sampled JPEGs carries an "
               "interval table; repacking with 'sluice pack --jpeg-restart auto' "
               "decodes only each crop's part: about %sx the samples/s measured on the "
               "ImageNet-style training pipeline (docs/OPS.md)\n",
               jpegs, RESTART_GAIN);
}

/* The op split of each stage that timed image-op phases (the stats JSON's
 * "op_split"): microseconds per sample of decode, resample and normalize,
 * and the rest of the per-sample ops, all from the same timed samples (the
 * rest was once the stage's average cost less the timed samples' phases:
 * two different sets of samples, so it could print below zero). */
static void print_op_split(const sl_pipeline *p) {
    size_t cap = 65536, len = 0;
    char *text = malloc(cap);
    if (!text || sl_pipeline_stats_json(p, text, cap, &len) < 0 || len >= cap) {
        free(text);
        sl_errclear();
        return;
    }
    cJSON *doc = cJSON_Parse(text);
    free(text);
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(doc, "stages"), *s;
    int header = 0;
    cJSON_ArrayForEach(s, stages) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(s, "op_split");
        if (!sp)
            continue;
        double dec = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(sp, "decode_us"));
        double rs = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(sp, "resample_us"));
        double nm = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(sp, "normalize_us"));
        double n = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(sp, "timed_samples"));
        double rest = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(sp, "rest_us"));
        if (!header) {
            printf("op split, us per sample (1 sample in 8 timed):\n%-40s %9s %9s %9s %9s %7s\n",
                   "stage", "decode", "resample", "normalize", "rest", "timed");
            header = 1;
        }
        printf("%-40.40s %9.2f %9.2f %9.2f %9.2f %7.0f\n",
               cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "name")), dec, rs, nm,
               rest, n);
    }
    cJSON_Delete(doc);
}

/* The throughput timeline: samples handed out in each TL_STEP seconds from
 * the start of the bench, and the workers of every stage at the end of each
 * step (what autotune had chosen by then). */
#define TL_STEP 0.25
#define TL_MAX 4096

typedef struct timeline {
    int n;                                    /* steps closed */
    double rate[TL_MAX];                      /* samples/s in step i */
    int workers[TL_MAX][SL_STATS_MAX_STAGES]; /* at the end of step i */
    int nstages;
    uint64_t samples;                         /* samples so far */
    uint64_t mark;                            /* samples at the last closed step */
    double mark_t;                            /* its time */
} timeline;

/* Close every step that ended by `t` (seconds since the start); a batch that
 * spans several steps spreads its samples evenly over them. */
static void timeline_tick(timeline *tl, const sl_pipeline *p, double t) {
    if (t < (tl->n + 1) * TL_STEP || tl->n >= TL_MAX)
        return;
    sl_pipeline_stats st;
    if (sl_pipeline_stats_get(p, &st) < 0) {
        sl_errclear();
        st.nstages = 0;
    }
    tl->nstages = st.nstages;
    double rate = t > tl->mark_t ? (double)(tl->samples - tl->mark) / (t - tl->mark_t) : 0;
    while (tl->n < TL_MAX && t >= (tl->n + 1) * TL_STEP) {
        tl->rate[tl->n] = rate;
        for (int s = 0; s < st.nstages; s++)
            tl->workers[tl->n][s] = st.stage[s].workers;
        tl->n++;
    }
    tl->mark = tl->samples;
    tl->mark_t = t;
}

/* Add "timeline" (samples/s per step), "timeline_step_s" and
 * "timeline_workers" to the stats JSON text. A new string (free()), or NULL. */
static char *timeline_json(const char *stats, const timeline *tl) {
    cJSON *doc = cJSON_Parse(stats);
    if (!doc)
        return NULL;
    cJSON_AddNumberToObject(doc, "timeline_step_s", TL_STEP);
    cJSON *rate = cJSON_AddArrayToObject(doc, "timeline");
    cJSON *wk = cJSON_AddArrayToObject(doc, "timeline_workers");
    for (int i = 0; rate && wk && i < tl->n; i++) {
        cJSON_AddItemToArray(rate, cJSON_CreateNumber(tl->rate[i]));
        cJSON *row = cJSON_CreateIntArray(tl->workers[i], tl->nstages);
        if (row)
            cJSON_AddItemToArray(wk, row);
    }
    char *out = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    if (!out)
        return NULL;
    char *copy = strdup(out); /* cJSON's allocator may differ from free() */
    cJSON_free(out);
    return copy;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cmd_bench(int argc, char **argv) {
    const char *spec_path = NULL, *trace = NULL;
    double seconds = 5.0;
    long long threads = -1;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--seconds")) {
            char *end = NULL;
            if (i + 1 >= argc || (seconds = strtod(argv[i + 1], &end)) <= 0 || *end)
                return cli_usage("bench", "--seconds needs a positive number");
            i++;
        } else if (!strcmp(a, "--trace")) {
            if (i + 1 >= argc)
                return cli_usage("bench", "--trace needs a file");
            trace = argv[++i];
        } else if (!strcmp(a, "--threads")) {
            if (i + 1 >= argc || (threads = cli_parse_count(argv[i + 1])) < 1)
                return cli_usage("bench", "--threads needs a positive count");
            i++;
        } else if (a[0] == '-') {
            return cli_usage("bench", "unknown option '%s'", a);
        } else if (!spec_path) {
            spec_path = a;
        } else {
            return cli_usage("bench", "more than one spec given");
        }
    }
    if (!spec_path)
        return cli_usage("bench", "no spec file given");
    sl_pipeline *p;
    /* epochs follow one another without a pause for as long as the bench runs */
    int ec = cli_build_pipeline("bench", spec_path, 1000000000LL, threads, &p);
    if (ec)
        return ec;
    if (trace && sl_pipeline_trace_enable(p, 0) < 0) {
        sl_pipeline_free(p);
        return cli_fail("bench");
    }
    static timeline tl; /* one bench per process; too large for the stack */
    memset(&tl, 0, sizeof tl);
    double t0 = now_s(), t;
    uint64_t batches = 0;
    while ((t = now_s() - t0) < seconds) {
        timeline_tick(&tl, p, t);
        sl_batch *b;
        int rc = sl_pipeline_next(p, &b);
        if (rc == SL_END) {
            if (sl_pipeline_len(p) == 0) {
                fprintf(stderr, "sluice bench: the pipeline yields no batches\n");
                sl_pipeline_free(p);
                return 1;
            }
            continue;
        }
        if (rc < 0) {
            ec = cli_fail("bench");
            sl_pipeline_free(p);
            return ec;
        }
        batches++;
        tl.samples += (uint64_t)sl_batch_size(b);
        sl_batch_release(b);
    }
    timeline_tick(&tl, p, now_s() - t0);
    if (json) {
        /* the numbers move between calls: size generously and retry if cut */
        size_t cap = 16384, len = 0;
        char *text = NULL;
        for (;;) {
            free(text);
            text = malloc(cap);
            if (!text || sl_pipeline_stats_json(p, text, cap, &len) < 0) {
                free(text);
                sl_pipeline_free(p);
                return cli_fail("bench");
            }
            if (len < cap)
                break;
            cap = len + 4096;
        }
        char *with_tl = timeline_json(text, &tl);
        printf("%s\n", with_tl ? with_tl : text);
        free(with_tl);
        free(text);
    } else {
        sl_pipeline_stats st;
        sl_pipeline_stats_get(p, &st);
        printf("%.0f samples/s, %.1f batches/s over %.2f s (%llu samples)\n", st.samples_per_s,
               st.wall_s > 0 ? st.batches / st.wall_s : 0.0, st.wall_s,
               (unsigned long long)st.samples);
        printf("%-40s %7s %12s %9s %9s %9s %9s %6s\n", "stage", "workers", "elements/s",
               "us/elem", "busy_s", "wait_in", "wait_out", "queue");
        for (int i = 0; i < st.nstages; i++) {
            const sl_stage_stats *s = &st.stage[i];
            printf("%-40.40s %7d %12.0f %9.2f %9.2f %9.2f %9.2f %5.0f%%\n", s->name, s->workers,
                   s->elements_per_s, s->cost_us, s->busy_s, s->wait_in_s, s->wait_out_s,
                   100 * s->queue_fill);
        }
        print_op_split(p);
        printf("consumer waited %.2f s\n", st.consumer_wait_s);
        if (tl.n > 0 && tl.n <= 40) { /* short runs: the whole timeline */
            printf("timeline (samples/s per %.2f s):", TL_STEP);
            for (int i = 0; i < tl.n; i++)
                printf(" %.3g", tl.rate[i]);
            printf("\n");
        }
        if (st.h2d_bytes)
            printf("host to device: %.1f MB/s (%.1f MB, %.1f MB of it through staging "
                   "memory), waited %.2f s for device slots\n",
                   st.h2d_bytes_per_s / 1e6, (double)st.h2d_bytes / 1e6,
                   (double)st.h2d_staged_bytes / 1e6, st.device_wait_s);
        if (st.gpu_decoded || st.gpu_fallbacks)
            printf("decoded on the GPU: %llu images, %llu left to the CPU decode\n",
                   (unsigned long long)st.gpu_decoded, (unsigned long long)st.gpu_fallbacks);
        if (st.skipped)
            printf("skipped %llu samples (first: %s)\n", (unsigned long long)st.skipped,
                   st.nerrors ? st.errors[0] : "");
        printf("verdict: %s\n", st.verdict);
        restart_hint(spec_path, &st);
    }
    ec = trace ? cli_write_trace("bench", p, trace) : 0;
    sl_pipeline_free(p);
    return ec;
}
