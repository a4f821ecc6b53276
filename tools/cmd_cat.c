/* cmd_cat.c — `sluice cat DATASET --index I --column NAME`: one field to stdout. */
#include "cli.h"

#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: sluice cat DATASET --index I [--column NAME]\n"
               "\n"
               "Write one field of one record to stdout: bytes and string columns as\n"
               "their raw bytes (an encoded image comes out as the original file), array\n"
               "columns as their raw elements (C order, little-endian), int64 and float64\n"
               "columns as a number in text followed by a newline. The record's checksum\n"
               "is verified first.\n"
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

static void list_columns(const sl_schema *s, char *buf, size_t cap) {
    size_t off = 0;
    buf[0] = 0;
    for (int c = 0; c < sl_schema_ncols(s) && off < cap; c++) {
        int n = snprintf(buf + off, cap - off, "%s%s", c ? ", " : "", sl_schema_name(s, c));
        if (n < 0)
            break;
        off += (size_t)n;
    }
}

int cmd_cat(int argc, char **argv) {
    const char *path = NULL, *column = NULL, *index_s = NULL;
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
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage("cat", "unknown option '%s'", argv[i]);
        } else if (path) {
            return cli_usage("cat", "one dataset at a time ('%s' and '%s')", path, argv[i]);
        } else {
            path = argv[i];
        }
    }
    if (!path)
        return cli_usage("cat", "missing the DATASET to read");
    if (!index_s)
        return cli_usage("cat", "missing --index I (the record to write)");
    uint64_t index;
    if (cli_parse_u64(index_s, &index))
        return cli_usage("cat", "--index wants a record number (0, 1, ...), not '%s'", index_s);

    sl_reader *r = NULL;
    sl_record *rec = NULL;
    int code = 1;
    if (sl_reader_open(&r, path, 0) != SL_OK)
        return cli_fail("cat");
    const sl_schema *s = sl_reader_schema(r);
    char cols[1024];
    list_columns(s, cols, sizeof cols);
    int col;
    if (!column) {
        if (sl_schema_ncols(s) != 1) {
            code = cli_usage("cat", "say which column with --column (%s has: %s)", path, cols);
            goto done;
        }
        col = 0;
    } else if ((col = sl_schema_find(s, column)) < 0) {
        fprintf(stderr, "sluice cat: %s has no column '%s'; its columns are: %s\n", path, column,
                cols);
        goto done;
    }
    uint64_t n = sl_reader_count(r);
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
    if (sl_record_create(&rec) != SL_OK || sl_reader_read(r, index, rec) != SL_OK) {
        cli_fail("cat");
        fprintf(stderr, "(run 'sluice verify %s' to find damaged records)\n", path);
        goto done;
    }
    const sl_tensor *t = sl_record_column(rec, col);
    switch (sl_schema_type(s, col)) {
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
    sl_record_free(rec);
    sl_reader_free(r);
    return code;
}
