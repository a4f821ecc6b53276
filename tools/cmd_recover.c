/* cmd_recover.c — `sluice recover PARTIAL [-o OUT]`: salvage an interrupted pack. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void help(FILE *f) {
    fprintf(f, "usage: sluice recover PARTIAL [-o OUT] [--force]\n"
               "\n"
               "Salvage an interrupted write: keep every complete record of PARTIAL whose\n"
               "checksum matches, and write them as a valid dataset at OUT. PARTIAL is\n"
               "left as it is.\n"
               "\n"
               "options:\n"
               "  -o, --output OUT  where to write (default: PARTIAL without its '.partial'\n"
               "                    suffix, or PARTIAL.recovered.slr)\n"
               "  -f, --force       replace OUT if it exists\n"
               "  -h, --help        show this help\n"
               "\n"
               "exit status: 0 some records kept, 1 nothing salvageable or an error,\n"
               "2 usage error\n"
               "\n"
               "example:\n"
               "  sluice recover /data/train.slr.partial -o /data/train.slr\n");
}

int cmd_recover(int argc, char **argv) {
    const char *partial = NULL, *out = NULL;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            help(stdout);
            return 0;
        }
        if ((m = cli_opt("recover", argc, argv, &i, "--output", "-o", &v)) != 0) {
            if (m < 0)
                return 2;
            out = v;
        } else if (!strcmp(argv[i], "--force") || !strcmp(argv[i], "-f")) {
            force = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage("recover", "unknown option '%s'", argv[i]);
        } else if (partial) {
            return cli_usage("recover", "one file at a time ('%s' and '%s')", partial, argv[i]);
        } else {
            partial = argv[i];
        }
    }
    if (!partial)
        return cli_usage("recover", "missing the PARTIAL file to salvage");

    char def[4096];
    if (!out) {
        size_t n = strlen(partial), sfx = strlen(".partial");
        if (n > sfx && !strcmp(partial + n - sfx, ".partial") && n - sfx < sizeof def) {
            memcpy(def, partial, n - sfx);
            def[n - sfx] = 0;
        } else {
            snprintf(def, sizeof def, "%s.recovered.slr", partial);
        }
        out = def;
    }
    struct stat st;
    if (stat(partial, &st) != 0) {
        fprintf(stderr, "sluice recover: %s: no such file\n", partial);
        return 1;
    }
    if (!strcmp(out, partial))
        return cli_usage("recover", "OUT must differ from PARTIAL");
    if (!force && lstat(out, &st) == 0) {
        fprintf(stderr, "sluice recover: %s already exists; pass -o OUT to write elsewhere or "
                        "--force to replace it\n",
                out);
        return 1;
    }
    uint64_t kept = 0, dropped = 0;
    int rc = sl_recover(partial, out, &kept, &dropped);
    if (rc != SL_OK) {
        cli_fail("recover");
        if (rc == SL_ECORRUPT) /* no readable header: killed before the first record */
            fprintf(stderr, "sluice recover: %s: no complete record to salvage; remove it "
                            "(rm -r '%s') and pack again\n", partial, partial);
        else
            fprintf(stderr, "(nothing salvageable from %s)\n", partial);
        return 1;
    }
    printf("kept %llu records, dropped %llu\n", (unsigned long long)kept,
           (unsigned long long)dropped);
    if (kept == 0) {
        /* An empty dataset helps nobody; do not leave one behind. */
        if (lstat(out, &st) == 0 && S_ISREG(st.st_mode))
            unlink(out);
        fprintf(stderr, "sluice recover: %s: no complete record to salvage; remove it "
                        "(rm -r '%s') and pack again\n", partial, partial);
        return 1;
    }
    printf("wrote %s; next: 'sluice verify %s'\n", out, out);
    return 0;
}
