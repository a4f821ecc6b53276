/* cmd_verify.c — `sluice verify DATASET [--json]`: check every checksum. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* How many damaged records verify names. */
#define MAX_ERRORS 10

/* After damage found by `verify --check` on a .slr dataset. */
#define SL_SLR_IMAGE_HINT                                                                   \
    "damaged records cannot be read, and images that do not decode fail training at the "  \
    "decode op; re-pack from the source with --check decode --skip-bad, or train with "     \
    "\"on_error\": \"skip\" (Python: .on_error(\"skip\")) to drop them"

static void help(FILE *f) {
    fprintf(f, "usage: sluice verify DATASET... [--json] [--check header|decode] [--features SPEC]\n"
               "\n"
               "Check a dataset's footers, index and every record's checksum. Damaged\n"
               "records are counted and the first ones named (file, record, cause).\n"
               "Other inputs (TFRecord files, tar shards, an ImageFolder, IDX files) are\n"
               "checked by reading every record as a pipeline would (TFRecord: both CRCs\n"
               "of every record) and every image file in them as pack checks it.\n"
               "Each DATASET is checked on its own (an IDX images + labels pair is one;\n"
               "a quoted brace pattern or @list reads its files as one).\n"
               "\n"
               "options:\n"
               "  --json           print {\"ok\", \"records\", \"bad\", \"errors\"} on stdout\n"
               "                   (one object per DATASET, one per line)\n"
               "  --check MODE     also check every image (for a .slr dataset: its bytes\n"
               "                   columns that hold images): header (default for inputs\n"
               "                   other than .slr) reads each image's header, decode\n"
               "                   decodes every pixel, with the decoder training uses\n"
               "  --features SPEC  TFRecord features (Parquet columns) to read, as for info\n"
               "  -h, --help       show this help\n"
               "\n"
               "exit status: 0 clean, 1 damaged or unreadable, 2 usage error\n"
               "\n"
               "example:\n"
               "  sluice verify /data/train.slr\n");
}

typedef struct {
    cli_progress bar;
    uint64_t data_bytes;
} verify_progress;

static void on_progress(uint64_t done, uint64_t total, void *user) {
    verify_progress *p = user;
    p->bar.total = total;
    /* The verifier reports records; bytes are estimated from the data size
     * (records differ in size, so the rate is approximate mid-way). */
    uint64_t bytes = total ? (uint64_t)((double)p->data_bytes * (double)done / (double)total) : 0;
    cli_progress_update(&p->bar, done, bytes);
}

typedef struct {
    char *msg[MAX_ERRORS];
    int n;
} error_list;

static void add_error(error_list *e, const char *msg) {
    if (e->n < MAX_ERRORS)
        e->msg[e->n++] = strdup(msg);
}

/* "FILE: record N: CAUSE": where " record N" starts and N; 0 if not that form. */
static int split_record(const char *msg, size_t *at, unsigned long long *rec, const char **cause) {
    const char *p = strstr(msg, ": record ");
    if (!p)
        return 0;
    char *end;
    *rec = strtoull(p + 9, &end, 10);
    if (end == p + 9 || strncmp(end, ": ", 2) != 0)
        return 0;
    *at = (size_t)(p - msg);
    *cause = end + 2;
    return 1;
}

/* A bad record's message, joined to the last one when it is the next record
 * of the same file with the same cause ("FILE: records 45..59: CAUSE"): a
 * shard that does not open fails each of its records alike. */
typedef struct {
    char *prefix, *cause;
    unsigned long long first, last;
} run_state;

static void flush_run(error_list *e, run_state *run) {
    if (!run->prefix)
        return;
    char buf[2048];
    if (run->first == run->last)
        snprintf(buf, sizeof buf, "%s: record %llu: %s", run->prefix, run->first, run->cause);
    else
        snprintf(buf, sizeof buf, "%s: records %llu..%llu: %s", run->prefix, run->first,
                 run->last, run->cause);
    add_error(e, buf);
    free(run->prefix);
    free(run->cause);
    run->prefix = run->cause = NULL;
}

static void add_record_error(error_list *e, run_state *run, const char *msg) {
    size_t at;
    unsigned long long rec;
    const char *cause;
    if (!split_record(msg, &at, &rec, &cause)) {
        flush_run(e, run);
        add_error(e, msg);
        return;
    }
    if (run->prefix && rec == run->last + 1 && strlen(run->prefix) == at &&
        !strncmp(run->prefix, msg, at) && !strcmp(run->cause, cause)) {
        run->last = rec;
        return;
    }
    flush_run(e, run);
    run->prefix = strndup(msg, at);
    run->cause = strdup(cause);
    run->first = run->last = rec;
}

/* "SHARD: records A..B: CAUSE" for a shard that does not open (the cause
 * without the shard's path when the message starts with it). */
static void add_shard_error(error_list *e, const char *path, uint64_t first, uint64_t cnt,
                            const char *msg) {
    char buf[2048];
    size_t pl = strlen(path);
    const char *cause = !strncmp(msg, path, pl) && msg[pl] == ':' && msg[pl + 1] == ' '
                            ? msg + pl + 2 : msg;
    if (cnt == 1)
        snprintf(buf, sizeof buf, "%s: record %llu: %s", path, (unsigned long long)first, cause);
    else
        snprintf(buf, sizeof buf, "%s: records %llu..%llu: %s", path, (unsigned long long)first,
                 (unsigned long long)(first + cnt - 1), cause);
    add_error(e, buf);
}

static void print_json(const char *path, int ok, uint64_t records, uint64_t bad,
                       const error_list *errs, const char *salvaged) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddBoolToObject(o, "ok", ok);
    cJSON_AddNumberToObject(o, "records", (double)records);
    cJSON_AddNumberToObject(o, "bad", (double)bad);
    cJSON *sv = salvaged ? cJSON_Parse(salvaged) : NULL;
    if (sv)
        cJSON_AddItemToObject(o, "salvaged", sv);
    cJSON *arr = cJSON_AddArrayToObject(o, "errors");
    for (int i = 0; i < errs->n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateString(errs->msg[i] ? errs->msg[i] : ""));
    cli_json_out(o);
}

/* `salvaged`: the dataset's "salvaged" metadata (sl_recover), or NULL. */
static int report(const char *path, const char *hint, const char *ok_text, int json, int opened,
                  uint64_t records, uint64_t bad, error_list *errs, const char *salvaged) {
    int ok = opened && bad == 0 && errs->n == 0;
    uint64_t listed = 0; /* bad records the listed messages name */
    for (int i = 0; i < errs->n; i++) {
        unsigned long long a, b;
        const char *rs = errs->msg[i] ? strstr(errs->msg[i], ": records ") : NULL;
        listed += rs && sscanf(rs, ": records %llu..%llu", &a, &b) == 2 && b >= a ? b - a + 1 : 1;
    }
    if (json)
        print_json(path, ok, records, bad, errs, salvaged);
    char sv[512];
    int is_salvaged = cli_salvaged_words(salvaged, sv, sizeof sv) == 0;
    if (ok) {
        if (!json)
            printf("ok: %s: %llu records, %s\n", path, (unsigned long long)records, ok_text);
        if (!json && is_salvaged)
            printf("note: %s is %s: sound, but not the whole dataset\n", path, sv);
    } else {
        if (!opened)
            fprintf(stderr, "sluice verify: %s\n", errs->n ? errs->msg[0] : "cannot open");
        else
            fprintf(stderr, "sluice verify: %s: %llu of %llu records damaged\n", path,
                    (unsigned long long)bad, (unsigned long long)records);
        if (opened)
            for (int i = 0; i < errs->n; i++)
                fprintf(stderr, "  %s\n", errs->msg[i] ? errs->msg[i] : "");
        if (opened && bad > listed)
            fprintf(stderr, "  ... and %llu more\n", (unsigned long long)(bad - listed));
        if (opened)
            fprintf(stderr, "(%s)\n", hint);
        else
            fprintf(stderr, "(if its footer or index is damaged, 'sluice recover %s --out OUT' "
                            "salvages the records before the first damaged one)\n",
                    path);
    }
    for (int i = 0; i < errs->n; i++)
        free(errs->msg[i]);
    return ok ? 0 : 1;
}

/* Any other source: read every record and check its images as pack does;
 * a failed read or check is a bad record. */
static int verify_source(const char *const *paths, int n, const char *features, int check,
                         int json) {
    error_list errs = {{0}, 0};
    sl_source *src;
    int rc = cli_source_open("verify", paths, n, features, &src);
    if (rc == 2)
        return rc;
    if (rc) {
        /* cli_source_open said why; the .slr recovery hint does not apply */
        if (json) {
            add_error(&errs, sl_errmsg());
            print_json(paths[0], 0, 0, 0, &errs, NULL);
            free(errs.msg[0]);
        }
        return rc;
    }
    uint64_t cnt = sl_source_count(src), bad = 0, images = 0;
    verify_progress prog = {.data_bytes = 0};
    cli_progress_start(&prog.bar, "verify", cnt);
    for (uint64_t i = 0; i < cnt; i++) {
        int k = 0;
        if (sl_source_check(src, i, check, &k) != SL_OK) {
            bad++;
            add_error(&errs, sl_errmsg());
        }
        images += (uint64_t)k;
        cli_progress_update(&prog.bar, i + 1, 0);
    }
    cli_progress_end(&prog.bar);
    const char *hint = sl_source_repair_hint(src); /* static */
    sl_source_free(src);
    const char *ok_text = !images ? "every record reads"
                          : check == SL_PACK_CHECK_DECODE
                              ? "every record reads, every image decodes"
                              : "every record reads, every image's header reads";
    return report(paths[0], hint, ok_text, json, 1, cnt, bad, &errs, NULL);
}

/* With --check, a .slr dataset's images: each record whose checksum matched
 * is read through the .slr source and its image columns (bytes columns
 * holding images, by content) checked with the decode op's decoder, as pack
 * checks an input. Records that do not read were counted by the checksum
 * pass; *bad counts the others whose images fail, *images the values
 * checked. */
static int check_slr_images(const char *path, int check, uint64_t *bad, uint64_t *images,
                            error_list *errs) {
    sl_source *src;
    const char *one[1] = {path};
    if (sl_source_open_paths(&src, one, 1, NULL) != SL_OK) {
        add_error(errs, sl_errmsg());
        return -1;
    }
    uint64_t cnt = sl_source_count(src);
    cli_progress bar;
    cli_progress_start(&bar, check == SL_PACK_CHECK_DECODE ? "decode" : "images", cnt);
    int rc = 0;
    for (uint64_t i = 0; i < cnt; i++) {
        int k = 0, r = sl_source_check(src, i, check, &k);
        if (r == SL_ENOMEM) {
            add_error(errs, sl_errmsg());
            rc = -1;
            break;
        }
        if (r == SL_EDECODE || r == SL_ELIMIT || r == SL_EUNSUPPORTED) {
            (*bad)++;
            add_error(errs, sl_errmsg());
        }
        *images += (uint64_t)k;
        cli_progress_update(&bar, i + 1, 0);
    }
    cli_progress_end(&bar);
    sl_source_free(src);
    return rc;
}

/* One .slr dataset: every footer, index and record checksum; with `check`
 * (>= 0), also every image (check_slr_images). */
static int verify_slr(const char *path, int json, int check) {
    error_list errs = {{0}, 0};
    sl_reader *r;
    if (sl_reader_open(&r, path, 0) != SL_OK) {
        add_error(&errs, sl_errmsg());
        return report(path, SL_SLR_REPAIR_HINT, "", json, 0, 0, 0, &errs, NULL);
    }
    const char *sv_meta = sl_reader_meta(r, "salvaged");
    char *salvaged = sv_meta ? strdup(sv_meta) : NULL;
    uint64_t n = sl_reader_count(r), bad = 0;
    verify_progress prog;
    prog.data_bytes = sl_reader_data_bytes(r);
    cli_progress_start(&prog.bar, "verify", n);
    int rc = sl_reader_verify(r, 1, &bad, on_progress, &prog);
    cli_progress_end(&prog.bar);
    if (rc != SL_OK) {
        if (bad == 0) {
            /* damage outside the records (index, footer of a shard) */
            add_error(&errs, sl_errmsg());
        } else {
            /* The verifier gives the first message; read the records again
             * to name the first few bad ones (only when there is damage). */
            sl_record *rec = NULL;
            run_state run = {NULL, NULL, 0, 0};
            if (sl_record_create(&rec) == SL_OK) {
                /* A shard that does not open fails all of its records
                 * alike: named once, as its range, without a read of each
                 * (a manifest may plan millions of records there). */
                for (int k = 0; k < sl_reader_shard_count(r) && errs.n < MAX_ERRORS; k++) {
                    uint64_t first = 0, cnt = 0;
                    sl_reader_shard_range(r, k, &first, &cnt);
                    if (cnt > 0 && sl_reader_shard_check(r, k) < 0) {
                        flush_run(&errs, &run);
                        add_shard_error(&errs, sl_reader_shard_path(r, k), first, cnt,
                                        sl_errmsg());
                        continue;
                    }
                    for (uint64_t i = first; i < first + cnt && errs.n < MAX_ERRORS; i++)
                        if (sl_reader_read(r, i, rec) < 0)
                            add_record_error(&errs, &run, sl_errmsg());
                }
                sl_record_free(rec);
            }
            flush_run(&errs, &run);
            if (errs.n == 0)
                add_error(&errs, sl_errmsg());
        }
    }
    sl_reader_free(r);
    const char *ok_text = "every checksum matches";
    int ret;
    if (check >= 0) {
        uint64_t images = 0;
        if (check_slr_images(path, check, &bad, &images, &errs) < 0) {
            ret = report(path, SL_SLR_REPAIR_HINT, "", json, 0, 0, 0, &errs, salvaged);
            free(salvaged);
            return ret;
        }
        ok_text = !images ? "every checksum matches (no column holds images)"
                  : check == SL_PACK_CHECK_DECODE
                      ? "every checksum matches, every image decodes"
                      : "every checksum matches, every image's header reads";
    }
    ret = report(path, check >= 0 ? SL_SLR_IMAGE_HINT : SL_SLR_REPAIR_HINT, ok_text, json, 1, n,
                 bad, &errs, salvaged);
    free(salvaged);
    return ret;
}

int cmd_verify(int argc, char **argv) {
    const char *paths[256];
    const char *features = NULL, *check_s = NULL;
    int npaths = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            help(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if ((m = cli_opt("verify", argc, argv, &i, "--features", NULL, &v)) != 0) {
            if (m < 0)
                return 2;
            features = v;
        } else if ((m = cli_opt("verify", argc, argv, &i, "--check", NULL, &v)) != 0) {
            if (m < 0)
                return 2;
            check_s = v;
        } else if (cli_input("verify", argv[i], paths, &npaths,
                             (int)(sizeof paths / sizeof paths[0]))) {
            return 2;
        }
    }
    if (npaths == 0)
        return cli_usage("verify", "missing the DATASET to check");
    int check = SL_PACK_CHECK_HEADER;
    if (check_s && !strcmp(check_s, "decode"))
        check = SL_PACK_CHECK_DECODE;
    else if (check_s && strcmp(check_s, "header") != 0)
        return cli_usage("verify", "--check wants header or decode, not '%s'", check_s);
    int start[256], len[256], code = 0;
    int ngroups = cli_datasets(paths, npaths, start, len);
    for (int g = 0; g < ngroups; g++) {
        const char *const *p = paths + start[g];
        /* A damaged .slr must be reported by the .slr verifier, not taken
         * for another format; any other input goes to the source verifier,
         * which reports why it does not open (a stale index, a damaged
         * file). */
        int rc;
        if (len[g] == 1 && !features && cli_looks_slr(p[0])) {
            rc = verify_slr(p[0], json, check_s ? check : -1);
        } else {
            rc = verify_source(p, len[g], features, check, json);
        }
        if (rc == 2)
            return rc;
        if (rc)
            code = 1;
    }
    return code;
}
