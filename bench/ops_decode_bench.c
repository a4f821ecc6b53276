/*
 * ops_decode_bench.c — per-image CPU cost of sluice's image ops against the
 * full-size decode limit, on the same files, cores and library.
 *
 *   ops_decode_bench [--threads T] [--repeat R] [--limit N] [--restart auto|rows [--verify]]
 *                    [--warnings default|strict|lenient] [--check-entropy] MODE DIR
 *
 * MODE:
 *   tj      libjpeg-turbo (TurboJPEG) full-size RGB decode: the decode limit
 *   decode  sluice full-size RGB decode (sl_decode, libjpeg API, same flags)
 *   train   RandomResizedCrop 224 via fused DCT-scaled decode + flip (p=0.5)
 *           + normalize to float32 CHW written into a 64-image batch buffer
 *   eval    resize shorter side 256 + centre crop 224, fused, + normalize
 *   train_limit, eval_limit  the limit of train and eval: the same boxes
 *           decoded at full size (DCT scale 8/8) and nothing else, through
 *           sl_decode_crop_resize with the output the box's own size (nearest:
 *           a copy), so libjpeg-turbo decodes exactly the MCU rows the box
 *           covers (with an interval table: only the intervals it covers)
 *   pipeline  the same training chain as a sluice pipeline over the files held
 *           in memory: decode -> random_resized_crop 224 -> flip -> normalize
 *           (float32 CHW) -> batch 64, T workers (sl_spec_set_threads)
 * --restart re-encodes every JPEG in memory first, as `sluice pack
 * --jpeg-restart` stores it (sl_jpeg_add_restarts: restart intervals and an
 * interval table), and prints one JSON line with the re-encode rate (1
 * thread) and the size change; the modes then run on those bytes.
 * --verify (with --restart) then decodes every re-encoded JPEG and its
 * source whole with TurboJPEG (RGB, gray or CMYK, as the file is) and
 * compares the pixels: one JSON line with the count of files compared and
 * of those that differ (exit status 1 if any does).
 * --warnings sets the decoders' SL_DECODE_WARNINGS (the pipeline's decode op
 * `warnings`), --check-entropy their SL_DECODE_CHECK_ENTROPY (not in pipeline
 * mode): what strict mode and `pack --check decode` cost against the default
 * (docs/OPS.md, "Corrupt entropy data").
 * Files (*.jpg, *.jpeg, *.png, recursively) are read into memory first; each
 * thread takes every T-th image. Prints one JSON line per repeat and a summary
 * with the median images/s and the median CPU time (user + system, all
 * threads) per image, the steadier figure on a shared machine.
 * Build: cmake -DSLUICE_BUILD_BENCH=ON, or
 *   cc -O2 -Iinclude bench/ops_decode_bench.c -Lbuild -lsluice -lturbojpeg -lpthread -lm
 */
#include "sluice.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>

typedef struct {
    unsigned char *data;
    size_t size;
    char *path;
} blob;

static blob *files;
static size_t nfiles, capfiles;
static const char *mode;
static const char *warnings = "default";
static int check_entropy;
static int nthreads = 1;

/* CPU seconds this process has used (user + system): on a shared machine
 * the CPU time an image costs moves far less than the wall time. */
static double cpu_now(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec +
           u.ru_stime.tv_usec * 1e-6;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int has_ext(const char *n) {
    const char *e = strrchr(n, '.');
    return e && (!strcasecmp(e, ".jpg") || !strcasecmp(e, ".jpeg") || !strcasecmp(e, ".png"));
}

static void load_dir(const char *dir, size_t limit) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char **names = NULL;
    size_t nn = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        names = realloc(names, (nn + 1) * sizeof *names);
        names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    /* sorted, so every run sees the same files in the same order */
    for (size_t i = 1; i < nn; i++)
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j]; names[j] = names[j - 1]; names[j - 1] = t;
        }
    for (size_t i = 0; i < nn; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            load_dir(path, limit);
        } else if (has_ext(names[i]) && (limit == 0 || nfiles < limit)) {
            FILE *f = fopen(path, "rb");
            if (f) {
                if (nfiles == capfiles) {
                    capfiles = capfiles ? capfiles * 2 : 1024;
                    files = realloc(files, capfiles * sizeof *files);
                }
                files[nfiles].data = malloc((size_t)st.st_size);
                files[nfiles].size = fread(files[nfiles].data, 1, (size_t)st.st_size, f);
                files[nfiles].path = strdup(path);
                nfiles++;
                fclose(f);
            }
        }
        free(names[i]);
    }
    free(names);
}

typedef struct {
    int id;
    uint64_t epoch;
    int failed;
} worker;

static int warnings_value(const char *w) {
    return !strcmp(w, "strict") ? SL_WARNINGS_STRICT
           : !strcmp(w, "lenient") ? SL_WARNINGS_LENIENT : SL_WARNINGS_DEFAULT;
}

/* A thread's output buffer grown to `need` bytes (its old contents dropped). */
static void grow(unsigned char **buf, size_t *cap, size_t need) {
    if (need > *cap) {
        free(*buf);
        *buf = malloc(need);
        *cap = need;
    }
}

static void *run(void *arg) {
    worker *w = arg;
    sl_decoder *dec = NULL;
    tjhandle tj = NULL;
    unsigned char *big = NULL;
    size_t bigcap = 0;
    const int S = 224, B = 64;
    float *batch = malloc(sizeof(float) * 3 * S * S * B);
    unsigned char *crop = malloc(S * S * 3);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    const double scale[2] = {0.08, 1.0}, ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
    if (!strcmp(mode, "tj"))
        tj = tjInitDecompress();
    else {
        sl_decoder_create(&dec);
        sl_decoder_set(dec, SL_DECODE_WARNINGS, warnings_value(warnings));
        sl_decoder_set(dec, SL_DECODE_CHECK_ENTROPY, check_entropy);
    }
    int slot = 0;
    for (size_t i = (size_t)w->id; i < nfiles; i += (size_t)nthreads) {
        const blob *b = &files[i];
        if (tj) {
            int wd, ht, ss, cs;
            if (tjDecompressHeader3(tj, b->data, b->size, &wd, &ht, &ss, &cs) != 0) {
                w->failed++;
                continue;
            }
            size_t need = (size_t)wd * ht * 3;
            grow(&big, &bigcap, need);
            if (tjDecompress2(tj, b->data, b->size, big, wd, 0, ht, TJPF_RGB, 0) != 0)
                w->failed++;
            continue;
        }
        sl_tensor t;
        int64_t n1 = 0;
        if (!strcmp(mode, "decode")) {
            sl_image_info info;
            if (sl_decode_info(dec, b->data, b->size, &info) != SL_OK) {
                w->failed++;
                continue;
            }
            size_t need = (size_t)info.width * info.height * 3;
            grow(&big, &bigcap, need);
            n1 = (int64_t)bigcap;
            sl_tensor_view(&t, big, SL_U8, 1, &n1);
            if (sl_decode(dec, b->data, b->size, SL_COLOR_RGB, &t) != SL_OK)
                w->failed++;
            continue;
        }
        sl_image_info info;
        if (sl_decode_info(dec, b->data, b->size, &info) != SL_OK) {
            w->failed++;
            continue;
        }
        sl_box box;
        sl_rng rng;
        sl_rng_init(&rng, 42, w->epoch, i, 0);
        const int limit = !strcmp(mode, "train_limit") || !strcmp(mode, "eval_limit");
        if (!strcmp(mode, "train") || !strcmp(mode, "train_limit")) {
            sl_rrc_box(info.height, info.width, scale, ratio, &rng, &box);
        } else {
            int rh, rw;
            sl_resize_shorter_shape(info.height, info.width, 256, &rh, &rw);
            sl_box c;
            sl_center_crop_box(rh, rw, S, S, &c);
            /* the centre crop of the resized image, in original pixels */
            double fy = (double)info.height / rh, fx = (double)info.width / rw;
            box.y = (int)(c.y * fy);
            box.x = (int)(c.x * fx);
            box.h = (int)(S * fy);
            box.w = (int)(S * fx);
        }
        if (limit) { /* the box at full size, nothing after it */
            size_t need = (size_t)box.w * box.h * 3;
            grow(&big, &bigcap, need);
            n1 = (int64_t)need;
            sl_tensor_view(&t, big, SL_U8, 1, &n1);
            if (sl_decode_crop_resize(dec, b->data, b->size, SL_COLOR_RGB, &box, box.h, box.w,
                                      SL_INTERP_NEAREST, &t) != SL_OK)
                w->failed++;
            continue;
        }
        n1 = S * S * 3;
        sl_tensor_view(&t, crop, SL_U8, 1, &n1);
        if (sl_decode_crop_resize(dec, b->data, b->size, SL_COLOR_RGB, &box, S, S,
                                  SL_INTERP_BILINEAR, &t) != SL_OK) {
            w->failed++;
            continue;
        }
        if (!strcmp(mode, "train") && (sl_rng_next(&rng) & 1))
            sl_image_flip(&t, &t);
        sl_tensor dst;
        int64_t nb = (int64_t)sizeof(float) * 3 * S * S;
        sl_tensor_view(&dst, batch + (size_t)slot * 3 * S * S, SL_U8, 1, &nb);
        sl_image_normalize(&t, mean, sd, SL_LAYOUT_CHW, SL_F32, &dst);
        slot = (slot + 1) % B;
    }
    free(batch);
    free(crop);
    free(big);
    if (tj)
        tjDestroy(tj);
    sl_decoder_free(dec);
    return NULL;
}

/* One epoch of the training pipeline over the in-memory files. The pipeline
 * is made once and kept across repeats (one epoch each), as a training loop
 * keeps it across epochs and as the PyTorch yardstick keeps its workers
 * (persistent_workers): its threads and buffer pools carry over. */
static double run_pipeline(uint64_t epoch, int *failed) {
    static sl_spec *spec;
    static sl_pipeline *p;
    if (!spec) {
        sl_sample *ss = calloc(nfiles, sizeof *ss);
        for (size_t i = 0; i < nfiles; i++) {
            int64_t n = (int64_t)files[i].size;
            sl_tensor_view(&ss[i].col[0], files[i].data, SL_U8, 1, &n);
            ss[i].ncols = 1;
            ss[i].index = i;
        }
        const char *names[1] = {"image"};
        char decode_op[128];
        snprintf(decode_op, sizeof decode_op,
                 "{\"op\": \"decode\", \"column\": \"image\", \"warnings\": \"%s\"}", warnings);
        if (sl_spec_create(&spec) || sl_spec_set_source_samples(spec, 1, names, ss, nfiles) ||
            sl_spec_set_shuffle(spec, 1) || sl_spec_set_threads(spec, nthreads) ||
            sl_spec_add_op_json(spec, decode_op) ||
            sl_spec_add_op_json(spec, "{\"op\": \"random_resized_crop\", \"column\": \"image\", \"size\": 224}") ||
            sl_spec_add_op_json(spec, "{\"op\": \"flip\", \"column\": \"image\"}") ||
            sl_spec_add_op_json(spec, "{\"op\": \"normalize\", \"column\": \"image\", "
                                      "\"mean\": [0.485, 0.456, 0.406], \"std\": [0.229, 0.224, 0.225], "
                                      "\"layout\": \"chw\", \"dtype\": \"float32\"}") ||
            sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 64}")) {
            fprintf(stderr, "spec: %s\n", sl_errmsg());
            exit(1);
        }
        free(ss);
    }
    if (!p && sl_pipeline_create(&p, spec) != SL_OK) {
        fprintf(stderr, "pipeline: %s\n", sl_errmsg());
        exit(1);
    }
    sl_pipeline_set_epoch(p, epoch);
    double t0 = now();
    sl_batch *b;
    int rc;
    size_t seen = 0;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        seen += (size_t)sl_batch_size(b);
        sl_batch_release(b);
    }
    double dt = now() - t0;
    if (rc < 0) {
        fprintf(stderr, "pipeline: %s\n", sl_errmsg());
        *failed = 1;
    }
    return seen / dt;
}

/* Whole-image pixels of a JPEG in its own colour space; NULL if it does
 * not decode. */
static unsigned char *tj_pixels(tjhandle tj, const unsigned char *p, size_t n, size_t *len) {
    int w, h, ss, cs;
    if (tjDecompressHeader3(tj, p, (unsigned long)n, &w, &h, &ss, &cs) != 0)
        return NULL;
    int pf = cs == TJCS_GRAY ? TJPF_GRAY : cs == TJCS_CMYK || cs == TJCS_YCCK ? TJPF_CMYK
                                                                              : TJPF_RGB;
    *len = (size_t)w * (size_t)h * (size_t)tjPixelSize[pf];
    unsigned char *px = malloc(*len);
    if (px && tjDecompress2(tj, p, (unsigned long)n, px, w, 0, h, pf, 0) != 0) {
        free(px);
        return NULL;
    }
    return px;
}

/* Same pixels before and after the re-encode (--verify). */
static int verify_one(tjhandle tj, const unsigned char *src, size_t sn, const sl_tensor *t,
                      const char *name) {
    size_t la = 0, lb = 0;
    unsigned char *a = tj_pixels(tj, src, sn, &la), *b = tj_pixels(tj, t->data, t->nbytes, &lb);
    int same = a && b && la == lb && !memcmp(a, b, la);
    if (!same)
        fprintf(stderr, "verify: %s: %s\n", name,
                !a ? "the source does not decode" : !b ? "the re-encode does not decode"
                                                       : "pixels differ");
    free(a);
    free(b);
    return same;
}

/* Re-encode the loaded files with restart intervals (see --restart). */
static int reencode_all(const char *how, int verify) {
    sl_jpeg_restart m = !strcmp(how, "rows") ? SL_JPEG_RESTART_ROWS : SL_JPEG_RESTART_AUTO;
    if (strcmp(how, "rows") && strcmp(how, "auto")) {
        fprintf(stderr, "--restart wants auto or rows, not %s\n", how);
        return -1;
    }
    size_t before = 0, after = 0, changed = 0, compared = 0, differ = 0;
    double t0 = now(), tv = 0;
    tjhandle tj = verify ? tjInitDecompress() : NULL;
    for (size_t i = 0; i < nfiles; i++) {
        sl_tensor t;
        int ch;
        memset(&t, 0, sizeof t);
        before += files[i].size;
        if (sl_jpeg_add_restarts(files[i].data, files[i].size, m, &t, &ch) != SL_OK) {
            fprintf(stderr, "re-encode: %s\n", sl_errmsg());
            return -1;
        }
        if (ch && verify) {
            double v0 = now();
            compared++;
            differ += !verify_one(tj, files[i].data, files[i].size, &t, files[i].path);
            tv += now() - v0;
        }
        if (ch) {
            unsigned char *p = malloc(t.nbytes);
            memcpy(p, t.data, t.nbytes);
            free(files[i].data);
            files[i].data = p;
            files[i].size = t.nbytes;
            sl_tensor_release(&t);
            changed++;
        }
        after += files[i].size;
    }
    double dt = now() - t0 - tv;
    printf("{\"restart\": \"%s\", \"images\": %zu, \"reencoded\": %zu, \"reencode_img_s\": %.1f, "
           "\"bytes_before\": %zu, \"bytes_after\": %zu, \"size_change_pct\": %.2f}\n",
           how, nfiles, changed, nfiles / dt, before, after, 100.0 * ((double)after / before - 1));
    if (verify) {
        printf("{\"verify\": \"whole-image pixels, source vs re-encode\", \"compared\": %zu, "
               "\"differ\": %zu}\n", compared, differ);
        tjDestroy(tj);
    }
    fflush(stdout);
    return verify && differ ? 1 : 0;
}

int main(int argc, char **argv) {
    int repeat = 3;
    size_t limit = 0;
    const char *restart = NULL;
    int verify = 0;
    int a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (!strcmp(argv[a], "--threads") && a + 1 < argc)
            nthreads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--repeat") && a + 1 < argc)
            repeat = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--limit") && a + 1 < argc)
            limit = (size_t)atoll(argv[++a]);
        else if (!strcmp(argv[a], "--restart") && a + 1 < argc)
            restart = argv[++a];
        else if (!strcmp(argv[a], "--verify"))
            verify = 1;
        else if (!strcmp(argv[a], "--warnings") && a + 1 < argc)
            warnings = argv[++a];
        else if (!strcmp(argv[a], "--check-entropy"))
            check_entropy = 1;
        else {
            fprintf(stderr, "unknown option %s\n", argv[a]);
            return 2;
        }
    }
    if (argc - a != 2 || nthreads < 1) {
        fprintf(stderr, "usage: ops_decode_bench [--threads T] [--repeat R] [--limit N] "
                        "[--restart auto|rows [--verify]] [--warnings default|strict|lenient] "
                        "[--check-entropy] tj|decode|train|eval|pipeline DIR\n");
        return 2;
    }
    if (strcmp(warnings, "default") && strcmp(warnings, "strict") && strcmp(warnings, "lenient")) {
        fprintf(stderr, "--warnings wants default, strict or lenient, not %s\n", warnings);
        return 2;
    }
    mode = argv[a];
    if (strcmp(mode, "tj") && strcmp(mode, "decode") && strcmp(mode, "train") &&
        strcmp(mode, "eval") && strcmp(mode, "train_limit") && strcmp(mode, "eval_limit") &&
        strcmp(mode, "pipeline")) {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    load_dir(argv[a + 1], limit);
    if (nfiles == 0) {
        fprintf(stderr, "no images under %s\n", argv[a + 1]);
        return 1;
    }
    if (verify && !restart) {
        fprintf(stderr, "--verify checks the re-encode: give --restart too\n");
        return 2;
    }
    if (restart) {
        int rc = reencode_all(restart, verify);
        if (rc < 0)
            return 1;
        if (rc > 0) /* pixels differ: reported above */
            return 1;
    }
    double rates[64], cpus[64];
    if (repeat > 64)
        repeat = 64;
    for (int r = 0; r < repeat && !strcmp(mode, "pipeline"); r++) {
        int failed = 0;
        double c0 = cpu_now();
        rates[r] = run_pipeline((uint64_t)r, &failed);
        cpus[r] = (cpu_now() - c0) * 1e6 / (double)nfiles;
        printf("{\"mode\": \"pipeline\", \"threads\": %d, \"images\": %zu, \"failed\": %d, "
               "\"img_s\": %.1f, \"cpu_us_per_img\": %.1f}\n", nthreads, nfiles, failed, rates[r],
               cpus[r]);
        fflush(stdout);
    }
    for (int r = 0; r < repeat && strcmp(mode, "pipeline"); r++) {
        pthread_t th[256];
        worker ws[256];
        if (nthreads > 256)
            nthreads = 256;
        double t0 = now(), c0 = cpu_now();
        for (int i = 0; i < nthreads; i++) {
            ws[i] = (worker){i, (uint64_t)r, 0};
            pthread_create(&th[i], NULL, run, &ws[i]);
        }
        int failed = 0;
        for (int i = 0; i < nthreads; i++) {
            pthread_join(th[i], NULL);
            failed += ws[i].failed;
        }
        double dt = now() - t0;
        rates[r] = nfiles / dt;
        cpus[r] = (cpu_now() - c0) * 1e6 / (double)nfiles;
        printf("{\"mode\": \"%s\", \"threads\": %d, \"images\": %zu, \"failed\": %d, "
               "\"seconds\": %.3f, \"img_s\": %.1f, \"cpu_us_per_img\": %.1f}\n", mode, nthreads,
               nfiles, failed, dt, rates[r], cpus[r]);
        fflush(stdout);
    }
    for (int i = 1; i < repeat; i++)
        for (int j = i; j > 0 && rates[j - 1] > rates[j]; j--) {
            double t = rates[j]; rates[j] = rates[j - 1]; rates[j - 1] = t;
        }
    for (int i = 1; i < repeat; i++)
        for (int j = i; j > 0 && cpus[j - 1] > cpus[j]; j--) {
            double t = cpus[j]; cpus[j] = cpus[j - 1]; cpus[j - 1] = t;
        }
    printf("{\"mode\": \"%s\", \"threads\": %d, \"warnings\": \"%s\", \"check_entropy\": %d, "
           "\"median_img_s\": %.1f, \"min\": %.1f, \"max\": %.1f, \"median_cpu_us_per_img\": %.1f}\n",
           mode, nthreads, warnings, check_entropy, rates[repeat / 2], rates[0], rates[repeat - 1],
           cpus[repeat / 2]);
    return 0;
}
