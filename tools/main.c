/* main.c — the `sluice` command: dispatch to cmd_<name>(). */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"pack", cmd_pack, "pack an ImageFolder, IDX, TFRecord or tar shards into a .slr dataset"},
    {"info", cmd_info, "describe a dataset (--json for scripts)"},
    {"verify", cmd_verify, "check every checksum of a dataset"},
    {"cat", cmd_cat, "write one field of one record to stdout"},
    {"recover", cmd_recover, "salvage the complete records of an interrupted pack"},
    {"scan", cmd_scan, "read every record and report records/s and MB/s"},
    {"run", cmd_run, "run a pipeline spec (--digest per batch, --save-state, --resume)"},
    {"bench", cmd_bench, "measure a pipeline; say if reading, processing or the consumer bounds it"},
    {"explain", cmd_explain, "show a pipeline's plan before and after optimisation"},
    {"index", cmd_index, "write the sidecar index of TFRecord files or tar shards"},
    {"env", cmd_env, "print every SLUICE_* setting, its value and where it comes from"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: sluice <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'sluice <command> --help' describes a command.\n");
}

int cli_fail(const char *cmd) {
    fprintf(stderr, "sluice %s: %s\n", cmd, sl_errmsg());
    return 1;
}

int cli_usage(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "sluice %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see 'sluice %s --help')\n", cmd);
    return 2;
}

uint64_t cli_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int cli_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

int cli_opt(const char *cmd, int argc, char **argv, int *i, const char *long_name,
            const char *short_name, const char **val) {
    const char *a = argv[*i];
    size_t n = strlen(long_name);
    if (!strncmp(a, long_name, n) && a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (strcmp(a, long_name) != 0 && !(short_name && !strcmp(a, short_name)))
        return 0;
    if (*i + 1 >= argc) {
        cli_usage(cmd, "%s needs a value", a);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

int cli_input(const char *cmd, const char *arg, const char **paths, int *n, int cap) {
    if (arg[0] == '-' && arg[1])
        return cli_usage(cmd, "unknown option '%s'", arg);
    if (*n == cap)
        return cli_usage(cmd, "too many inputs");
    paths[(*n)++] = arg;
    return 0;
}

int cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_size(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 0: break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: return -1;
    }
    if (shift && (!strcmp(end, "B") || !strcmp(end, "iB") || !strcmp(end, "b")))
        end += strlen(end);
    if (*end)
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

int cli_parse_seconds(const char *s, double *out) {
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v > 0) || v > 1e9)
        return -1;
    *out = v;
    return 0;
}

const char *cli_bytes(char *buf, size_t cap, uint64_t bytes) {
    static const char *const unit[] = {"B", "kB", "MB", "GB", "TB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, cap, "%.1f %s", v, unit[u]);
    return buf;
}

void cli_progress_start(cli_progress *p, const char *label, uint64_t total) {
    p->label = label;
    p->total = total;
    p->t0_ns = p->last_ns = cli_now_ns();
    p->enabled = isatty(2) && !sl_setting_value("SLUICE_NO_PROGRESS");
}

void cli_progress_update(cli_progress *p, uint64_t done, uint64_t bytes) {
    if (!p->enabled)
        return;
    uint64_t t = cli_now_ns();
    if (t - p->last_ns < 100000000ull && done != p->total)
        return;
    p->last_ns = t;
    double secs = (t - p->t0_ns) / 1e9;
    double pct = p->total ? 100.0 * (double)done / (double)p->total : 0.0;
    int width = 30, fill = p->total ? (int)(width * done / p->total) : 0;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\r%s [%s] %5.1f%% %llu/%llu  %.1f MB/s ", p->label, bar, pct,
            (unsigned long long)done, (unsigned long long)p->total,
            secs > 0 ? bytes / 1e6 / secs : 0.0);
    fflush(stderr);
}

void cli_progress_end(cli_progress *p) {
    if (p->enabled)
        fprintf(stderr, "\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("sluice %s\n", sl_version_string());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        /* a bad SLUICE_* value stops every command before it starts but
         * `sluice env`, which shows them all and then says what is wrong */
        if (commands[i].fn != cmd_env && sl_settings_check() != SL_OK) {
            fprintf(stderr, "sluice %s: %s\n", commands[i].name, sl_errmsg());
            return 2;
        }
        return commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "sluice: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
