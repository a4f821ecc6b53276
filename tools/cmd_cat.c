/* cmd_cat.c — `sluice cat DATASET... --index I --column NAME`: one field of one
 * record of any source to stdout. */
#include "cli.h"

#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: sluice cat DATASET... --index I [--column NAME]\n"
               "\n"
               "Write one field of one record to stdout: bytes and string columns as\n"
               "their raw bytes (an encoded image comes out as the original file), array\n"
               "columns as their raw elements (C order, little-endian), int64 and float64\n"
               "columns as a number in text followed by a newline. Any input reads: a\n"
               "dataset, TFRecord files, tar shards, an ImageFolder, an IDX pair (the\n"
               "record numbered across the files in order); the record's checksums are\n"
               "verified first where the format has them.\n"
               "\n"
               "options:\n"
               "  -i, --index I      record index, 0-based\n"
               "  -c, --column NAME  column to write (may be left out if there is one column)\n"
               "  -h, --help         show this help\n"
               "\n"
               "exit status: 0 written, 1 bad index or column, damaged record or unreadable\n"
               "dataset, 2 usage error\n"
               "\n"
               "examples:\n"
               "  sluice cat /data/train.slr --index 1234 --column image > x.jpg\n"
               "  sluice cat /data/train.slr -i 1234 -c label\n");
}

static void list_columns(const sl_source *src, char *buf, size_t cap) {
    size_t off = 0;
    buf[0] = 0;
    for (int c = 0; c < sl_source_ncols(src) && off < cap; c++) {
        int n = snprintf(buf + off, cap - off, "%s%s", c ? ", " : "", sl_source_colname(src, c));
        if (n < 0)
            break;
        off += (size_t)n;
    }
}

int cmd_cat(int argc, char **argv) {
    const char *paths[256];
    const char *column = NULL, *index_s = NULL;
    int npaths = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            help(stdout);
            return 0;
        }
        if ((m = cli_opt("cat", argc, argv, &i, "--index", "-i", &v)) != 0) {
            if (m < 0)
                return 2;
            index_s = v;
        } else if ((m = cli_opt("cat", argc, argv, &i, "--column", "-c", &v)) != 0) {
            if (m < 0)
                return 2;
            column = v;
        } else if (cli_input("cat", argv[i], paths, &npaths,
                             (int)(sizeof paths / sizeof paths[0]))) {
            return 2;
        }
    }
    if (!npaths)
        return cli_usage("cat", "missing the DATASET to read");
    if (!index_s)
        return cli_usage("cat", "missing --index I (the record to write)");
    uint64_t index;
    if (cli_parse_u64(index_s, &index))
        return cli_usage("cat", "--index wants a record number (0, 1, ...), not '%s'", index_s);

    /* Any source: a .slr dataset, TFRecord files, tar shards, an ImageFolder,
     * an IDX pair; the record read as a pipeline reads it (checksums
     * verified where the format has them). */
    const char *path = paths[0];
    sl_source *src = NULL;
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    int code = cli_source_open("cat", paths, npaths, NULL, &src);
    if (code)
        return code;
    code = 1;
    char cols[1024];
    list_columns(src, cols, sizeof cols);
    int col;
    if (!column) {
        if (sl_source_ncols(src) != 1) {
            code = cli_usage("cat", "say which column with --column (%s has: %s)", path, cols);
            goto done;
        }
        col = 0;
    } else if ((col = sl_source_find_column(src, column)) < 0) {
        cli_fail("cat"); /* names the columns, closest first */
        goto done;
    }
    uint64_t n = sl_source_count(src);
    if (index >= n) {
        if (n)
            fprintf(stderr, "sluice cat: %s: index %llu is out of range: %llu records (0..%llu)\n",
                    path, (unsigned long long)index, (unsigned long long)n,
                    (unsigned long long)(n - 1));
        else
            fprintf(stderr, "sluice cat: %s: index %llu is out of range: the dataset is empty\n",
                    path, (unsigned long long)index);
        goto done;
    }
    if (sl_source_read(src, index, &smp) != SL_OK) {
        cli_fail("cat");
        fprintf(stderr, "(run 'sluice verify %s' to find damaged records)\n", path);
        goto done;
    }
    const sl_tensor *t = &smp.col[col];
    switch (sl_source_coltype(src, col)) {
    case SL_COL_INT64:
        printf("%lld\n", (long long)*(const int64_t *)t->data);
        break;
    case SL_COL_FLOAT64:
        printf("%.17g\n", *(const double *)t->data);
        break;
    default:
        if (t->nbytes && fwrite(t->data, 1, t->nbytes, stdout) != t->nbytes) {
            perror("sluice cat: writing to stdout");
            goto done;
        }
        break;
    }
    if (fflush(stdout) != 0) {
        perror("sluice cat: writing to stdout");
        goto done;
    }
    code = 0;
done:
    sl_sample_clear(&smp);
    sl_source_free(src);
    return code;
}
