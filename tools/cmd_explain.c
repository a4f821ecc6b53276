/* cmd_explain.c — `sluice explain SPEC`: the plan before and after
 * optimisation, and the stages it runs as. */
#include "pipe_common.h"

#include <stdlib.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: sluice explain SPEC.json [--threads N] [--json]\n"
               "       sluice explain --params\n"
               "\n"
               "Show how a pipeline spec runs: the logical plan (one line per op, as\n"
               "written), the optimised plan (filters pushed into the source index, fused\n"
               "ops, repeat made by the source) and the stages with their workers and\n"
               "queues. Opens the source (to know its columns) but reads no records.\n"
               "\n"
               "  --json   print the stages and the layout (where batches are collated:\n"
               "           final, fused or parallel; direct hand-off, read_rows,\n"
               "           vectorized ops) as one JSON object instead\n"
               "  --params print the keys a spec takes (type, default, allowed values,\n"
               "           what each does), from the tables that check them; no SPEC\n"
               "\n"
               "exit status: 0 shown, 1 bad spec or source, 2 usage error\n");
}

int cmd_explain(int argc, char **argv) {
    const char *spec_path = NULL;
    long long threads = -1;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            help(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--threads")) {
            if (i + 1 >= argc || (threads = cli_parse_count(argv[i + 1])) < 1)
                return cli_usage("explain", "--threads needs a positive count");
            i++;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--params")) {
            size_t len = 0;
            sl_spec_params_doc(NULL, 0, &len);
            char *text = malloc(len + 1);
            if (!text || sl_spec_params_doc(text, len + 1, &len) < 0) {
                free(text);
                return cli_fail("explain");
            }
            fputs(text, stdout);
            free(text);
            return 0;
        } else if (argv[i][0] == '-') {
            return cli_usage("explain", "unknown option '%s'", argv[i]);
        } else if (!spec_path) {
            spec_path = argv[i];
        } else {
            return cli_usage("explain", "more than one spec given");
        }
    }
    if (!spec_path)
        return cli_usage("explain", "no spec file given");
    sl_pipeline *p;
    int ec = cli_build_pipeline("explain", spec_path, -1, threads, &p);
    if (ec)
        return ec;
    int (*show)(const sl_pipeline *, char *, size_t, size_t *) =
        json ? sl_pipeline_explain_json : sl_pipeline_explain;
    size_t len = 0;
    show(p, NULL, 0, &len);
    char *text = malloc(len + 1);
    if (!text || show(p, text, len + 1, &len) < 0) {
        free(text);
        sl_pipeline_free(p);
        return cli_fail("explain");
    }
    fputs(text, stdout);
    if (json)
        fputc('\n', stdout);
    free(text);
    sl_pipeline_free(p);
    return 0;
}
