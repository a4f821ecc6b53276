/*
 * cmd_scan.c — `sluice scan DATASET`: read records as fast as the reader
 * can, checksums verified, and report records/s and MB/s. It measures the
 * format's read path alone (no decode), which is the F in G < min(F, P).
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Records a sequential reader claims at once: large enough that the shared
 * counter is not contended, small enough that threads finish together. */
#define CHUNK 64

static void help(FILE *f) {
    fprintf(f, "usage: sluice scan DATASET... [--random] [--threads N] [--seconds S] [--json]\n"
               "                   [--features SPEC]\n"
               "\n"
               "Read records (checksums verified) and report records/s and MB/s of\n"
               "record payload. Sequential by default: one pass over every record,\n"
               "split among the threads in chunks. Any source reads: a .slr dataset,\n"
               "TFRecord files (both CRCs checked), tar shards, an ImageFolder, IDX.\n"
               "Several files of one kind (TFRecord, tar) are read as one source, and\n"
               "each file's record count is listed; several datasets are scanned one\n"
               "after the other.\n"
               "\n"
               "options:\n"
               "  --random         read uniformly random records (as many as the dataset\n"
               "                   holds, unless --seconds)\n"
               "  -t, --threads N  reader threads (default 1)\n"
               "  --seconds S      read for S seconds, starting over after each pass\n"
               "  --seed N         seed for --random (default 0)\n"
               "  --features SPEC  TFRecord features (Parquet columns) to read, as for info\n"
               "  --json           print {records_per_s, mb_per_s, records, bytes, seconds,\n"
               "                   threads, mode} on stdout\n"
               "  -h, --help       show this help\n"
               "\n"
               "exit status: 0 ok, 1 unreadable dataset or damaged record, 2 usage error\n"
               "\n"
               "examples:\n"
               "  sluice scan /data/train.slr --threads 2\n"
               "  sluice scan /data/train.slr --random --seconds 5 --json\n");
}

typedef struct {
    const sl_reader *r;       /* a .slr dataset, or */
    sl_source *src;           /* any other source */
    uint64_t n;
    int random;
    uint64_t seed;
    uint64_t deadline_ns;      /* 0: one pass */
    _Atomic uint64_t next;     /* sequential: next record to claim (counts past n with --seconds) */
    _Atomic uint64_t quota;    /* random without --seconds: reads left to hand out */
    _Atomic int stop;
    pthread_mutex_t mu;        /* guards err_rc and err_msg */
    int err_rc;
    char err_msg[512];
} scan_job;

typedef struct {
    scan_job *job;
    int id;
    uint64_t records, bytes;
    pthread_t th;
} scan_worker;

static int read_one(scan_worker *w, sl_record *rec, sl_source_reader *rd, uint64_t i) {
    scan_job *job = w->job;
    sl_sample smp;
    int rc = rd ? sl_source_reader_read(rd, i, &smp) : sl_reader_read(job->r, i, rec);
    if (rc < 0) {
        pthread_mutex_lock(&job->mu);
        if (!job->err_rc) {
            job->err_rc = rc;
            snprintf(job->err_msg, sizeof job->err_msg, "%s", sl_errmsg());
        }
        pthread_mutex_unlock(&job->mu);
        atomic_store(&job->stop, 1);
        return rc;
    }
    if (rd) {
        for (uint32_t c = 0; c < smp.ncols; c++)
            w->bytes += smp.col[c].nbytes;
        sl_sample_clear(&smp);
    } else {
        int ncols = sl_schema_ncols(sl_reader_schema(job->r));
        for (int c = 0; c < ncols; c++)
            w->bytes += sl_record_column(rec, c)->nbytes;
    }
    w->records++;
    return 0;
}

static void *scan_main(void *arg) {
    scan_worker *w = arg;
    scan_job *job = w->job;
    sl_record *rec = NULL;
    sl_source_reader *rd = NULL;
    if (job->src ? sl_source_reader_create(job->src, &rd) != SL_OK
                 : sl_record_create(&rec) != SL_OK) {
        pthread_mutex_lock(&job->mu);
        if (!job->err_rc) {
            job->err_rc = SL_ENOMEM;
            snprintf(job->err_msg, sizeof job->err_msg, "%s", sl_errmsg());
        }
        pthread_mutex_unlock(&job->mu);
        atomic_store(&job->stop, 1);
        return NULL;
    }
    sl_rng rng;
    sl_rng_init(&rng, job->seed, 0, (uint64_t)w->id, 0);
    while (!atomic_load_explicit(&job->stop, memory_order_relaxed)) {
        if (job->deadline_ns && cli_now_ns() >= job->deadline_ns)
            break;
        if (job->random) {
            uint64_t k = CHUNK;
            if (!job->deadline_ns) {
                uint64_t left = atomic_load(&job->quota);
                do {
                    k = left < CHUNK ? left : CHUNK;
                } while (k && !atomic_compare_exchange_weak(&job->quota, &left, left - k));
                if (k == 0)
                    break;
            }
            for (uint64_t j = 0; j < k; j++)
                if (read_one(w, rec, rd, sl_rng_below(&rng, job->n)) < 0)
                    goto done;
        } else {
            uint64_t start = atomic_fetch_add(&job->next, CHUNK);
            if (!job->deadline_ns && start >= job->n)
                break;
            for (uint64_t j = start; j < start + CHUNK; j++) {
                if (!job->deadline_ns && j >= job->n)
                    break;
                if (read_one(w, rec, rd, j % job->n) < 0)
                    goto done;
            }
        }
    }
done:
    sl_record_free(rec);
    sl_source_reader_free(rd);
    return NULL;
}

static int scan_one(const char *const *paths, int npaths, uint64_t threads, int random,
                    uint64_t seed, double seconds, int json, int named);

/* --features: the columns of a TFRecord or Parquet source to read */
static const char *scan_features;

int cmd_scan(int argc, char **argv) {
    const char *paths[256];
    int npaths = 0, json = 0, random = 0;
    uint64_t threads = 1, seed = 0;
    double seconds = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            help(stdout);
            return 0;
        }
        if ((m = cli_opt("scan", argc, argv, &i, "--threads", "-t", &v)) != 0) {
            if (m < 0)
                return 2;
            if (cli_parse_u64(v, &threads) || threads < 1 || threads > 1024)
                return cli_usage("scan", "--threads wants 1..1024, not '%s'", v);
        } else if ((m = cli_opt("scan", argc, argv, &i, "--seconds", NULL, &v)) != 0) {
            if (m < 0)
                return 2;
            if (cli_parse_seconds(v, &seconds))
                return cli_usage("scan", "--seconds wants a positive number, not '%s'", v);
        } else if ((m = cli_opt("scan", argc, argv, &i, "--seed", NULL, &v)) != 0) {
            if (m < 0)
                return 2;
            if (cli_parse_u64(v, &seed))
                return cli_usage("scan", "--seed wants a non-negative integer, not '%s'", v);
        } else if ((m = cli_opt("scan", argc, argv, &i, "--features", NULL, &v)) != 0) {
            if (m < 0)
                return 2;
            scan_features = v;
        } else if (!strcmp(argv[i], "--random")) {
            random = 1;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (cli_input("scan", argv[i], paths, &npaths,
                             (int)(sizeof paths / sizeof paths[0]))) {
            return 2;
        }
    }
    if (npaths == 0)
        return cli_usage("scan", "missing the DATASET to read");
    /* Several .slr datasets are scanned one after the other (a source is one
     * dataset); files of another kind are read as one source, whose rate is
     * the point, with each file's record count reported. */
    int all_slr = !scan_features;
    for (int i = 0; i < npaths && all_slr; i++)
        all_slr = cli_is_slr(paths[i]);
    if (!all_slr)
        return scan_one(paths, npaths, threads, random, seed, seconds, json, 0);
    int code = 0;
    for (int i = 0; i < npaths; i++)
        if (scan_one(paths + i, 1, threads, random, seed, seconds, json, npaths > 1))
            code = 1;
    return code;
}

/* The record count of each of several files read as one source (each
 * opened alone), so that the report does not give one file the total. */
static void file_counts(const char *const *paths, int n, cJSON *files) {
    for (int i = 0; i < n; i++) {
        sl_source *one;
        /* what does not open alone is not data (a sidecar index the source
         * left out) */
        if (sl_source_open_paths(&one, paths + i, 1, NULL) != SL_OK)
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "path", paths[i]);
        cJSON_AddNumberToObject(o, "records", (double)sl_source_count(one));
        sl_source_free(one);
        cJSON_AddItemToArray(files, o);
    }
}

/* `named`: one of several datasets; its text line starts with its path. */
static int scan_one(const char *const *paths, int npaths, uint64_t threads, int random,
                    uint64_t seed, double seconds, int json, int named) {
    const char *path = paths[0];

    sl_reader *r = NULL;
    sl_source *src = NULL;
    if (npaths == 1 && !scan_features && cli_is_slr(path)) {
        if (sl_reader_open(&r, path, 0) != SL_OK)
            return cli_fail("scan");
    } else {
        int rc = cli_source_open("scan", paths, npaths, scan_features, &src);
        if (rc)
            return rc;
    }
    scan_job job;
    memset(&job, 0, sizeof job);
    job.r = r;
    job.src = src;
    job.n = r ? sl_reader_count(r) : sl_source_count(src);
    int verified = r || sl_source_checksummed(src);
    int per_file = src && npaths > 1;
    job.random = random;
    job.seed = seed;
    atomic_init(&job.next, 0);
    atomic_init(&job.quota, job.n);
    atomic_init(&job.stop, 0);
    pthread_mutex_init(&job.mu, NULL);
    scan_worker *w = calloc(threads, sizeof *w);
    if (!w) {
        fprintf(stderr, "sluice scan: out of memory\n");
        sl_reader_free(r);
        sl_source_free(src);
        return 1;
    }
    uint64_t t0 = cli_now_ns();
    if (seconds > 0)
        job.deadline_ns = t0 + (uint64_t)(seconds * 1e9);
    uint64_t started = 0;
    if (job.n > 0) {
        for (; started < threads; started++) {
            w[started].job = &job;
            w[started].id = (int)started;
            if (pthread_create(&w[started].th, NULL, scan_main, &w[started]) != 0)
                break;
        }
    }
    uint64_t records = 0, bytes = 0;
    for (uint64_t t = 0; t < started; t++) {
        pthread_join(w[t].th, NULL);
        records += w[t].records;
        bytes += w[t].bytes;
    }
    double secs = (double)(cli_now_ns() - t0) / 1e9;
    free(w);
    pthread_mutex_destroy(&job.mu);
    sl_reader_free(r);
    sl_source_free(src);
    if (job.n > 0 && started == 0) {
        fprintf(stderr, "sluice scan: cannot start reader threads\n");
        return 1;
    }
    if (job.err_rc) {
        fprintf(stderr, "sluice scan: %s\n(run 'sluice verify %s' to find damaged records)\n",
                job.err_msg, path);
        return 1;
    }
    double rps = secs > 0 ? (double)records / secs : 0, mbps = secs > 0 ? bytes / 1e6 / secs : 0;
    const char *mode = random ? "random" : "sequential";
    /* Several files as one source: each file's records. */
    cJSON *files = NULL;
    if (per_file) {
        files = cJSON_CreateArray();
        if (files)
            file_counts(paths, npaths, files);
        if (cJSON_GetArraySize(files) == 0) { /* the files of an IDX pair do not open alone */
            cJSON_Delete(files);
            files = NULL;
        }
    }
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "path", path);
        if (files)
            cJSON_AddItemToObject(o, "files", files);
        cJSON_AddStringToObject(o, "mode", mode);
        cJSON_AddNumberToObject(o, "threads", (double)threads);
        cJSON_AddNumberToObject(o, "records", (double)records);
        cJSON_AddNumberToObject(o, "bytes", (double)bytes);
        cJSON_AddNumberToObject(o, "seconds", secs);
        cJSON_AddNumberToObject(o, "records_per_s", rps);
        cJSON_AddNumberToObject(o, "mb_per_s", mbps);
        cJSON_AddBoolToObject(o, "verified", verified);
        cli_json_out(o);
    } else {
        char b[32];
        printf("%s%sscanned %llu records%s (%s) in %.3f s, %s, %llu thread%s, %s\n",
               named ? path : "", named ? ": " : "", (unsigned long long)records,
               files ? " in all" : "",
               cli_bytes(b, sizeof b, bytes), secs, mode,
               (unsigned long long)threads, threads == 1 ? "" : "s",
               verified ? "checksums verified" : "no record checksums in this format");
        printf("%.0f records/s, %.1f MB/s\n", rps, mbps);
        cJSON *f;
        cJSON_ArrayForEach(f, files) {
            cJSON *rec = cJSON_GetObjectItem(f, "records");
            printf("  %s: %.0f records\n", cJSON_GetObjectItem(f, "path")->valuestring,
                   rec ? rec->valuedouble : 0.0);
        }
        cJSON_Delete(files);
    }
    return 0;
}
