/* cmd_pack.c — `sluice pack SRC... DST`: any source sluice reads into .slr. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
            "      --json             print a JSON summary on stdout\n"
            "  -h, --help             show this help\n"
            "\n"
            "exit status: 0 packed, 1 failed (nothing is written), 2 usage error\n"
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

int cmd_pack(int argc, char **argv) {
    const char *pos[256];
    int npos = 0, json = 0, force = 0;
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

    char partial[4200];
    snprintf(partial, sizeof partial, "%s.partial", dst);
    if (lstat(partial, &st) == 0) {
        fprintf(stderr,
                "sluice pack: %s exists: an interrupted pack? run 'sluice recover %s' to salvage "
                "its records, or remove it\n",
                partial, partial);
        sl_source_free(src);
        return 1;
    }
    char aside[4200] = "";
    if (force && stat(dst, &st) == 0 && S_ISDIR(st.st_mode) && move_aside(dst, aside, sizeof aside)) {
        sl_source_free(src);
        return 1;
    }

    cli_progress prog;
    cli_progress_start(&prog, "pack", 0);
    opts.progress = on_progress;
    opts.user = &prog;
    sl_pack_report rep;
    uint64_t t0 = cli_now_ns();
    int rc = src ? sl_pack_source(src, dst, &opts, &rep)
                 : sl_pack((const char *const *)pos, npos - 1, dst, &opts, &rep);
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
        cli_json_out(o);
    }
    if (rc != SL_OK) {
        fprintf(stderr, "sluice pack: %s\n", sl_errmsg());
        if (!opts.skip_bad &&
            (rc == SL_EDECODE || rc == SL_EIO || rc == SL_ELIMIT || rc == SL_EUNSUPPORTED) &&
            rep.kind == SL_PACK_IMAGEFOLDER)
            fprintf(stderr, "(fix or remove the file, or pass --skip-bad to skip such files; "
                            "nothing was written)\n");
        else
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
