/* cmd_index.c — `sluice index FILE...`: sidecar indexes for TFRecord files
 * and tar shards. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void help(FILE *f) {
    fprintf(f, "usage: sluice index FILE... [--json]\n"
               "\n"
               "Write FILE.slidx beside each TFRecord file or tar shard (a folder of them,\n"
               "a quoted brace or shell pattern, or an @list names several): where every record\n"
               "is, the column types and the scalar columns (labels). With it a pipeline\n"
               "opens the file without scanning it and answers label filters from the\n"
               "index. An index records the file's size and time: when the file changes,\n"
               "sluice refuses the stale index and says to run this again. A Parquet file's\n"
               "footer is its index: it is checked, and nothing is written.\n"
               "\n"
               "options:\n"
               "  --json      print one JSON object per file on stdout\n"
               "  -h, --help  show this help\n"
               "\n"
               "exit status: 0 indexed, 1 a file could not be indexed, 2 usage error\n"
               "\n"
               "example:\n"
               "  sluice index 'train-{00000..00127}-of-00128.tfrecord'\n"
               "  sluice index @shards.txt\n");
}

/* Whether `path` names a sidecar index (X.slidx). */
static int is_sidecar(const char *path) {
    size_t n = strlen(path);
    return n > 6 && !strcmp(path + n - 6, ".slidx");
}

/* A sidecar index X.slidx whose data file X is among the arguments too (a
 * shell glob of the folder lists both, once an earlier run wrote the index):
 * X's index is rebuilt, the sidecar is no input of its own (alone, it is
 * refused by the index builder, which names its data file). */
static int listed_beside_its_file(int argc, char **argv, const char *path) {
    size_t n = strlen(path) - 6;
    for (int i = 1; i < argc; i++)
        if (strlen(argv[i]) == n && !strncmp(argv[i], path, n))
            return 1;
    return 0;
}

/* Index one file and report it. Returns 0, or 1 when it could not be indexed. */
static int index_one(const char *path, int json) {
    uint64_t t0 = cli_now_ns();
    int rc = sl_source_index_build(path, NULL);
    double secs = (double)(cli_now_ns() - t0) / 1e9;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddBoolToObject(o, "ok", rc == SL_OK);
        if (rc != SL_OK)
            cJSON_AddStringToObject(o, "error", sl_errmsg());
        cJSON_AddNumberToObject(o, "seconds", secs);
        cli_json_out(o);
    } else if (rc != SL_OK) {
        fprintf(stderr, "sluice index: %s\n", sl_errmsg());
    } else {
        printf("indexed %s in %.2f s\n", path, secs);
    }
    return rc != SL_OK;
}

int cmd_index(int argc, char **argv) {
    int json = 0, nfiles = 0, failed = 0, sidecars = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            help(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage("index", "unknown option '%s'", argv[i]);
        } else {
            nfiles++;
        }
    }
    if (nfiles == 0)
        return cli_usage("index", "missing the FILE to index");
    cli_progress prog;
    cli_progress_start(&prog, "index", (uint64_t)nfiles);
    uint64_t done = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1])
            continue;
        if (is_sidecar(argv[i]) && listed_beside_its_file(argc, argv, argv[i])) {
            sidecars++;
            cli_progress_update(&prog, ++done, 0);
            continue;
        }
        /* A brace pattern or @list names its files, as for every command; a
         * path that exists is taken as it is. */
        char **files = NULL;
        int nf = 0;
        struct stat st;
        int pattern = stat(argv[i], &st) != 0 && (strchr(argv[i], '{') ||
                                                  argv[i][0] == '@' || strpbrk(argv[i], "*?["));
        /* a folder of shards: each of its files (an ImageFolder or a .slr
         * dataset is left whole, for the message about what indexes it) */
        const char *kind = NULL;
        int folder = !pattern && S_ISDIR(st.st_mode) &&
                     sl_source_detect((const char *const *)&argv[i], 1, &kind) == SL_OK &&
                     (!strcmp(kind, "webdataset") || !strcmp(kind, "tfrecord"));
        sl_errclear();
        if (pattern || folder) {
            if (sl_paths_expand(argv[i], &files, &nf) != SL_OK) {
                fprintf(stderr, "sluice index: %s\n", sl_errmsg());
                failed = 1;
                continue;
            }
        }
        for (int k = 0; k < (files ? nf : 1); k++) {
            const char *path = files ? files[k] : argv[i];
            failed |= index_one(path, json);
        }
        sl_paths_free(files);
        cli_progress_update(&prog, ++done, 0);
    }
    cli_progress_end(&prog);
    if (sidecars && !json)
        printf("left out %d sidecar index%s listed beside %s data file%s (rebuilt with %s)\n",
               sidecars, sidecars == 1 ? "" : "es", sidecars == 1 ? "its" : "their",
               sidecars == 1 ? "" : "s", sidecars == 1 ? "it" : "them");
    return failed;
}
