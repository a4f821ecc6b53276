/* cmd_recover.c — `sluice recover PARTIAL [--out OUT]`: what an interrupted pack
 * left, and its complete records salvaged into a dataset marked as salvaged. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void help(FILE *f) {
    fprintf(f, "usage: sluice recover PARTIAL [--out OUT] [--force]\n"
               "\n"
               "An interrupted write (the DST.partial folder a pack leaves, or one shard\n"
               "file): say how many of its records are complete, of how many the pack\n"
               "planned. With --out, write those records, each checked against its\n"
               "checksum, as a dataset at OUT, marked in its metadata as salvaged (sluice\n"
               "info and sluice verify say so) with its class list cut to the labels kept.\n"
               "PARTIAL is left as it is: 'sluice pack SRC... DST --resume' can still\n"
               "complete the pack from it.\n"
               "\n"
               "options:\n"
               "  -o, --out OUT   write the salvaged records at OUT (also --output)\n"
               "  -f, --force     replace OUT if it exists\n"
               "  -h, --help      show this help\n"
               "\n"
               "exit status: 0 records can be (or were) salvaged, 1 nothing salvageable or\n"
               "an error, 2 usage error\n"
               "\n"
               "example:\n"
               "  sluice recover /data/train.slr.partial\n"
               "  sluice recover /data/train.slr.partial --out /data/train-salvaged.slr\n");
}

/* "N of M records (M as planned by the interrupted pack)", or without M. */
static void of_planned(FILE *f, uint64_t n, uint64_t planned) {
    if (planned != UINT64_MAX)
        fprintf(f, "%llu of %llu records (%llu as planned by the interrupted pack)",
                (unsigned long long)n, (unsigned long long)planned,
                (unsigned long long)planned);
    else
        fprintf(f, "%llu records (how many the interrupted write planned is not known: it left "
                   "no plan)", (unsigned long long)n);
}

static int nothing(const char *partial) {
    fprintf(stderr, "sluice recover: %s: no complete record to salvage; remove it (rm -r '%s') "
                    "and pack again\n", partial, partial);
    return 1;
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
        if ((m = cli_opt("recover", argc, argv, &i, "--out", "-o", &v)) != 0 ||
            (m = cli_opt("recover", argc, argv, &i, "--output", NULL, &v)) != 0) {
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
    struct stat st;
    if (stat(partial, &st) != 0) {
        fprintf(stderr, "sluice recover: %s: no such file\n", partial);
        return 1;
    }
    if (!out) {
        /* Look only: a salvaged dataset under the final name looked like a
         * finished pack. */
        uint64_t done = 0, planned = UINT64_MAX;
        int rc = sl_recover_info(partial, &done, &planned);
        if (rc == SL_ECORRUPT)
            return nothing(partial);
        if (rc != SL_OK)
            return cli_fail("recover");
        if (!done)
            return nothing(partial);
        printf("%s: ", partial);
        of_planned(stdout, done, planned);
        printf(" complete; nothing written.\n");
        if (planned != UINT64_MAX && done < planned)
            printf("  finish the pack:  the same 'sluice pack SRC... DST' command with --resume\n");
        printf("  salvage them:     sluice recover %s --out OUT (marked as salvaged)\n", partial);
        return 0;
    }
    if (!strcmp(out, partial))
        return cli_usage("recover", "OUT must differ from PARTIAL");
    if (!force && lstat(out, &st) == 0) {
        fprintf(stderr, "sluice recover: %s already exists; choose another --out or pass --force "
                        "to replace it\n", out);
        return 1;
    }
    uint64_t kept = 0, dropped = 0, planned = UINT64_MAX;
    int rc = sl_recover(partial, out, &kept, &dropped);
    if (rc != SL_OK) {
        if (rc == SL_ECORRUPT) /* no readable header: killed before the first record */
            return nothing(partial);
        cli_fail("recover");
        fprintf(stderr, "(nothing salvageable from %s)\n", partial);
        return 1;
    }
    if (kept == 0) {
        /* An empty dataset helps nobody; do not leave one behind. */
        if (lstat(out, &st) == 0 && S_ISREG(st.st_mode))
            unlink(out);
        return nothing(partial);
    }
    /* how many were planned: the "salvaged" note sl_recover put in OUT */
    sl_reader *r;
    if (sl_reader_open(&r, out, SL_READ_NO_VERIFY) == SL_OK) {
        const char *v = sl_reader_meta(r, "salvaged"), *p = v ? strstr(v, "\"planned\":") : NULL;
        if (p && p[10] >= '0' && p[10] <= '9')
            planned = strtoull(p + 10, NULL, 10);
        sl_reader_free(r);
    }
    sl_errclear();
    printf("salvaged ");
    of_planned(stdout, kept, planned);
    printf(" into %s", out);
    if (dropped)
        printf("; %llu damaged or torn record%s dropped", (unsigned long long)dropped,
               dropped == 1 ? "" : "s");
    printf("\n%s is marked as salvaged (sluice info shows it); %s is left as it was ('sluice "
           "pack ... --resume' can still finish the pack; remove it when done)\n", out, partial);
    printf("next: 'sluice verify %s'\n", out);
    return 0;
}
