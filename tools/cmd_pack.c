/* cmd_pack.c — `sluice pack SRC... DST`: any source sluice reads into .slr. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void help(FILE *f) {
    fprintf(f,
            "usage: sluice pack SRC... DST [options]\n"
            "\n"
            "Pack a dataset into a sluice record dataset (.slr) at DST.\n"
            "  SRC is one directory, an ImageFolder (SRC/CLASS/IMAGE, labels from the\n"
            "  sorted class names); an IDX images file and an IDX labels file\n"
            "  (MNIST style, plain or .gz, in either order); TFRecord files (one column\n"
            "  per feature key); WebDataset tar shards (one column per extension); Parquet\n"
            "  files (one column per leaf; a Hugging Face dataset's class names kept); or\n"
            "  a .slr dataset. Records keep the order of the files given.\n"
            "\n"
            "options:\n"
            "  -j, --jobs N           threads reading and checking files (default: all cores);\n"
            "                         the output is the same for every N\n"
            "      --skip-bad         skip unreadable or non-image files, count and name them,\n"
            "                         instead of stopping\n"
            "      --check MODE       how each image is checked, with the decoder training uses:\n"
            "                         header (default: reads headers, runs at disk speed; an\n"
            "                         image damaged past its header is packed, found by\n"
            "                         'sluice verify DST --check decode' or by training) or\n"
            "                         decode (decodes every image: a dataset that packs trains);\n"
            "                         BMP, PPM/PGM and TIFF are refused either way\n"
            "      --jpeg-restart MODE  off (default: store files as they are), auto or rows:\n"
            "                         re-encode JPEGs losslessly with restart intervals and an\n"
            "                         interval table so training decodes only the crop's part\n"
            "                         (other bytes than the source files, the same pixels)\n"
            "      --features SPEC    TFRecord features (Parquet columns) to keep, renamed, as\n"
            "                         image/encoded=image,image/class/label=label\n"
            "      --shard-size SIZE  start a new shard past SIZE bytes (suffix K, M, G);\n"
            "                         DST becomes a directory when there is more than one\n"
            "  -f, --force            replace DST if it exists\n"
            "      --resume           continue the pack that was interrupted (DST.partial):\n"
            "                         the same SRC... and options, from after its last\n"
            "                         complete record; the result is what an uninterrupted\n"
            "                         pack writes, byte for byte (none there: from the start)\n"
            "      --json             print a JSON summary on stdout\n"
            "  -h, --help             show this help\n"
            "\n"
            "Ctrl-C (SIGINT) or SIGTERM stops the pack within a second and keeps its complete\n"
            "records in DST.partial: run the same command with --resume to go on, or\n"
            "'sluice recover DST.partial --out OUT' to keep only those.\n"
            "\n"
            "exit status: 0 packed, 1 failed (nothing is written, unless --resume kept an\n"
            "interrupted pack's records), 2 usage error, 130 interrupted (SIGINT; 143 SIGTERM)\n"
            "\n"
            "examples:\n"
            "  sluice pack /data/train /data/train.slr\n"
            "  sluice pack train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz fmnist.slr\n"
            "  sluice pack train-*.tfrecord --features image/encoded=image,image/class/label=label "
            "train.slr\n"
            "  sluice pack shard-000000.tar shard-000001.tar train.slr\n");
}

/* --force over a sharded dataset (a directory): the writer will not replace
 * a directory, so move the old dataset aside, and delete it only once the new
 * one is in place (restore it if the pack fails). Only a directory that opens
 * as a sluice dataset is touched, and only its own files are deleted. */
static int move_aside(const char *dst, char *aside, size_t cap) {
    sl_reader *r;
    if (sl_reader_open(&r, dst, SL_READ_NO_VERIFY) != SL_OK) {
        fprintf(stderr, "sluice pack: %s is a directory but not a sluice dataset; not replacing it\n",
                dst);
        return -1;
    }
    sl_reader_free(r);
    snprintf(aside, cap, "%s.replaced", dst);
    struct stat st;
    if (lstat(aside, &st) == 0 || rename(dst, aside) != 0) {
        fprintf(stderr, "sluice pack: cannot move %s aside to %s; remove it first\n", dst, aside);
        return -1;
    }
    return 0;
}

static void remove_aside(const char *aside) {
    sl_reader *r;
    char path[4200];
    if (sl_reader_open(&r, aside, SL_READ_NO_VERIFY) == SL_OK) {
        for (int i = 0; i < sl_reader_shard_count(r); i++)
            unlink(sl_reader_shard_path(r, i));
        sl_reader_free(r);
    }
    snprintf(path, sizeof path, "%s/manifest.json", aside);
    unlink(path);
    if (rmdir(aside) != 0)
        fprintf(stderr, "sluice pack: kept %s: it holds files that were not part of the old "
                        "dataset\n",
                aside);
}

static void on_progress(uint64_t done, uint64_t total, uint64_t bytes, void *user) {
    cli_progress *p = user;
    p->total = total;
    cli_progress_update(p, done, bytes);
}

/* ---- stopping on SIGINT / SIGTERM ------------------------------------------------
 * The first signal asks the pack to stop (it polls between records: the
 * records written are kept in DST.partial, synced) and arms a watchdog: a pack
 * that has not stopped 900 ms later (a record that takes long to read) is cut
 * short at once, which DST.partial survives as it survives kill -9 (the
 * writer's crash safety). A second signal ends the process at once too. */
static volatile sig_atomic_t stop_sig;
static timer_t watchdog;
static int have_watchdog;
static char cut_msg[4096];
static size_t cut_len;

static void cut_short(int sig) {
    (void)sig;
    ssize_t k = write(2, cut_msg, cut_len);
    (void)k;
    _exit(128 + (stop_sig ? stop_sig : SIGINT));
}

static void on_stop_signal(int sig) {
    if (stop_sig)
        cut_short(sig);
    stop_sig = sig;
    if (have_watchdog) {
        struct itimerspec its = {{0, 0}, {0, 900 * 1000000L}};
        timer_settime(watchdog, 0, &its, NULL); /* async-signal-safe */
    }
}

static int stop_asked(void *user, int fresh) {
    (void)user, (void)fresh;
    return stop_sig != 0;
}

static void stop_handlers(const char *partial) {
    cut_len = (size_t)snprintf(cut_msg, sizeof cut_msg,
                               "\nsluice pack: interrupted, and cut short (a record took over a "
                               "second): the complete records written are in %s ('sluice recover "
                               "%s' counts them); run the same command with --resume to go on\n",
                               partial, partial);
    if (cut_len >= sizeof cut_msg)
        cut_len = sizeof cut_msg - 1;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = SIGALRM;
    have_watchdog = timer_create(CLOCK_MONOTONIC, &ev, &watchdog) == 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cut_short;
    sigaction(SIGALRM, &sa, NULL);
    sa.sa_handler = on_stop_signal; /* no SA_RESTART: a blocking call returns */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void stop_handlers_off(void) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (have_watchdog) {
        timer_delete(watchdog);
        have_watchdog = 0;
    }
}

/* `arg` for a shell: as it is, or in single quotes. */
static void put_arg(FILE *f, const char *arg) {
    if (*arg && strspn(arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                            "_./:=,@%+-") == strlen(arg)) {
        fputs(arg, f);
        return;
    }
    fputc('\'', f);
    for (const char *c = arg; *c; c++)
        fputs(*c == '\'' ? "'\\''" : (char[]){*c, 0}, f);
    fputc('\'', f);
}

/* Where a salvage of DST's partial write is suggested to go: not DST itself,
 * whose name says "a finished pack" (train.slr -> train-salvaged.slr). */
static void salvage_name(const char *dst, char *buf, size_t cap) {
    size_t n = strlen(dst);
    while (n > 1 && dst[n - 1] == '/')
        n--;
    if (n > 4 && !strncmp(dst + n - 4, ".slr", 4))
        snprintf(buf, cap, "%.*s-salvaged.slr", (int)(n - 4), dst);
    else
        snprintf(buf, cap, "%.*s-salvaged", (int)n, dst);
}

/* The command line that continues this pack: this one, with --resume. */
static void put_resume_command(FILE *f, int argc, char **argv) {
    fputs("sluice pack", f);
    int has = 0;
    for (int i = 1; i < argc; i++) {
        fputc(' ', f);
        put_arg(f, argv[i]);
        has |= !strcmp(argv[i], "--resume");
    }
    if (!has)
        fputs(" --resume", f);
}

int cmd_pack(int argc, char **argv) {
    const char *pos[256];
    int npos = 0, json = 0, force = 0, resume = 0;
    const char *features = NULL;
    sl_pack_options opts = SL_PACK_OPTIONS_INIT;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            help(stdout);
            return 0;
        }
        if ((m = cli_opt("pack", argc, argv, &i, "--jobs", "-j", &v)) != 0) {
            uint64_t n;
            if (m < 0)
                return 2;
            if (cli_parse_u64(v, &n) || n < 1 || n > 1024)
                return cli_usage("pack", "--jobs wants a number of threads 1..1024, not '%s'", v);
            opts.jobs = (int)n;
        } else if ((m = cli_opt("pack", argc, argv, &i, "--shard-size", NULL, &v)) != 0) {
            if (m < 0)
                return 2;
            if (cli_parse_size(v, &opts.shard_bytes) || opts.shard_bytes == 0)
                return cli_usage("pack", "--shard-size wants a size such as 512M or 4G, not '%s'",
                                 v);
        } else if ((m = cli_opt("pack", argc, argv, &i, "--jpeg-restart", NULL, &v)) != 0) {
            if (m < 0)
                return 2;
            if (!strcmp(v, "off"))
                opts.jpeg_restart = SL_JPEG_RESTART_OFF;
            else if (!strcmp(v, "auto"))
                opts.jpeg_restart = SL_JPEG_RESTART_AUTO;
            else if (!strcmp(v, "rows"))
                opts.jpeg_restart = SL_JPEG_RESTART_ROWS;
            else
                return cli_usage("pack", "--jpeg-restart wants 'off', 'auto' or 'rows', not '%s'",
                                 v);
        } else if ((m = cli_opt("pack", argc, argv, &i, "--check", NULL, &v)) != 0) {
            if (m < 0)
                return 2;
            if (!strcmp(v, "header"))
                opts.check = SL_PACK_CHECK_HEADER;
            else if (!strcmp(v, "decode"))
                opts.check = SL_PACK_CHECK_DECODE;
            else
                return cli_usage("pack", "--check wants 'header' or 'decode', not '%s'", v);
        } else if ((m = cli_opt("pack", argc, argv, &i, "--features", NULL, &v)) != 0) {
            if (m < 0)
                return 2;
            features = v;
        } else if (!strcmp(argv[i], "--skip-bad")) {
            opts.skip_bad = 1;
        } else if (!strcmp(argv[i], "--resume")) {
            resume = 1;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--force") || !strcmp(argv[i], "-f")) {
            force = 1;
        } else if (cli_input("pack", argv[i], pos, &npos, (int)(sizeof pos / sizeof pos[0]))) {
            return 2;
        }
    }
    if (npos < 2)
        return cli_usage("pack", npos ? "missing the output path DST"
                                      : "missing SRC and DST: sluice pack SRC... DST");
    const char *dst = pos[npos - 1];
    char partial[4200];
    snprintf(partial, sizeof partial, "%s.partial", dst);
    /* from here a signal stops the command (finding the inputs can take a
     * while: the watchdog ends it then) */
    stop_handlers(partial);
    /* Formats without a packer of their own go through a source. */
    sl_pack_kind kind = SL_PACK_UNKNOWN;
    sl_source *src = NULL;
    if (!features && sl_pack_detect((const char *const *)pos, npos - 1, &kind) != SL_OK)
        return cli_fail("pack");
    if (features || kind == SL_PACK_SOURCE) {
        int r = cli_source_open("pack", (const char *const *)pos, npos - 1, features, &src);
        if (r)
            return r;
    }
    const char *kind_name = src ? sl_source_kind(src) : sl_pack_kind_name(kind);

    struct stat st;
    if (!force && lstat(dst, &st) == 0) {
        fprintf(stderr, "sluice pack: %s already exists; pass --force to replace it\n", dst);
        sl_source_free(src);
        return 1;
    }

    if (!resume && lstat(partial, &st) == 0) {
        uint64_t done = 0, planned = UINT64_MAX;
        int known = sl_recover_info(partial, &done, &planned) == SL_OK;
        sl_errclear();
        fprintf(stderr, "sluice pack: %s exists: an interrupted pack", partial);
        if (known && planned != UINT64_MAX)
            fprintf(stderr, " (%llu of %llu planned records complete)", (unsigned long long)done,
                    (unsigned long long)planned);
        else if (known)
            fprintf(stderr, " (%llu records complete)", (unsigned long long)done);
        char sv[4300];
        salvage_name(dst, sv, sizeof sv);
        fprintf(stderr, ";\n  continue it:          ");
        put_resume_command(stderr, argc, argv);
        fprintf(stderr, "\n  or keep those alone:  sluice recover %s --out %s\n"
                        "  or remove it to pack anew\n", partial, sv);
        sl_source_free(src);
        return 1;
    }
    if (resume && lstat(partial, &st) != 0 && !json)
        fprintf(stderr, "sluice pack: no %s to continue: packing from the start\n", partial);
    opts.resume = resume;
    char aside[4200] = "";
    if (force && stat(dst, &st) == 0 && S_ISDIR(st.st_mode) && move_aside(dst, aside, sizeof aside)) {
        sl_source_free(src);
        return 1;
    }

    cli_progress prog;
    cli_progress_start(&prog, "pack", 0);
    opts.progress = on_progress;
    opts.user = &prog;
    opts.stop = stop_asked;
    sl_pack_report rep;
    uint64_t t0 = cli_now_ns();
    if (stop_sig) {
        stop_handlers_off();
        sl_source_free(src);
        cli_progress_end(&prog);
        fprintf(stderr, "sluice pack: interrupted before packing began: nothing written\n");
        return 128 + stop_sig;
    }
    int rc = src ? sl_pack_source(src, dst, &opts, &rep)
                 : sl_pack((const char *const *)pos, npos - 1, dst, &opts, &rep);
    int sig = stop_sig;
    stop_handlers_off();
    sl_source_free(src);
    double secs = (double)(cli_now_ns() - t0) / 1e9;
    cli_progress_end(&prog);
    if (aside[0]) {
        if (rc == SL_OK)
            remove_aside(aside);
        else if (rename(aside, dst) != 0)
            fprintf(stderr, "sluice pack: the old dataset is at %s\n", aside);
    }

    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", rc == SL_OK);
        if (rc != SL_OK)
            cJSON_AddStringToObject(o, "error", sl_errmsg());
        cJSON_AddStringToObject(o, "output", dst);
        cJSON_AddStringToObject(o, "kind", kind_name);
        cJSON_AddNumberToObject(o, "records", (double)rep.records);
        cJSON_AddNumberToObject(o, "bytes", (double)rep.bytes);
        cJSON_AddNumberToObject(o, "skipped", (double)rep.skipped);
        cJSON_AddStringToObject(o, "check",
                                opts.check == SL_PACK_CHECK_DECODE ? "decode" : "header");
        static const char *const rst[] = {"off", "auto", "rows"};
        cJSON_AddStringToObject(o, "jpeg_restart", rst[opts.jpeg_restart]);
        cJSON *bad = cJSON_AddArrayToObject(o, "bad");
        for (int i = 0; i < rep.nbad; i++)
            cJSON_AddItemToArray(bad, cJSON_CreateString(rep.bad[i]));
        if (rep.kind == SL_PACK_IMAGEFOLDER)
            cJSON_AddNumberToObject(o, "classes", rep.nclasses);
        cJSON_AddNumberToObject(o, "seconds", secs);
        if (rc == SL_ECANCELED) {
            unsigned long long safe = 0, planned = prog.total;
            const char *m = strstr(sl_errmsg(), "interrupted: ");
            if (m)
                sscanf(m, "interrupted: %llu of %llu", &safe, &planned);
            cJSON_AddBoolToObject(o, "interrupted", 1);
            cJSON_AddNumberToObject(o, "planned", (double)planned);
            cJSON_AddStringToObject(o, "partial", partial);
        }
        cli_json_out(o);
    }
    if (rc == SL_ECANCELED) {
        /* the numbers as the pack gave them (its plan: before the first
         * record no progress has said how many are planned) */
        unsigned long long safe = rep.records, planned = prog.total;
        const char *m = strstr(sl_errmsg(), "interrupted: ");
        if (m)
            sscanf(m, "interrupted: %llu of %llu", &safe, &planned);
        fprintf(stderr, "sluice pack: interrupted: %llu of %llu planned records are safe in %s\n"
                        "  continue the pack:      ", safe, planned, partial);
        put_resume_command(stderr, argc, argv);
        char sv[4300];
        salvage_name(dst, sv, sizeof sv);
        fprintf(stderr, "\n  or keep those records:  sluice recover %s --out %s\n", partial, sv);
        return 128 + (sig ? sig : SIGINT);
    }
    if (rc != SL_OK) {
        fprintf(stderr, "sluice pack: %s\n", sl_errmsg());
        if (!opts.skip_bad &&
            (rc == SL_EDECODE || rc == SL_EIO || rc == SL_ELIMIT || rc == SL_EUNSUPPORTED) &&
            rep.kind == SL_PACK_IMAGEFOLDER)
            fprintf(stderr, "(fix or remove the file, or pass --skip-bad to skip such files; "
                            "nothing was written)\n");
        else if (!resume || lstat(partial, &st) != 0)
            fprintf(stderr, "(nothing was written to %s)\n", dst);
        return 1;
    }
    if (!json) {
        char b[32];
        printf("packed %llu records (%s", (unsigned long long)rep.records, kind_name);
        if (rep.kind == SL_PACK_IMAGEFOLDER)
            printf(", %d classes", rep.nclasses);
        printf(", %s) into %s in %.2f s\n", cli_bytes(b, sizeof b, rep.bytes), dst, secs);
        if (rep.skipped) {
            printf("skipped %llu bad file%s:\n", (unsigned long long)rep.skipped,
                   rep.skipped == 1 ? "" : "s");
            for (int i = 0; i < rep.nbad; i++)
                printf("  %s\n", rep.bad[i]);
            if (rep.skipped > (uint64_t)rep.nbad)
                printf("  ... and %llu more\n", (unsigned long long)(rep.skipped - rep.nbad));
        }
        printf("next: 'sluice info %s' to describe it, 'sluice verify %s%s' to check it\n",
               dst, dst, opts.check == SL_PACK_CHECK_DECODE ? "" : " --check decode");
    }
    return 0;
}
