/* main.c — the `sluice` command: dispatch to cmd_<name>(). */
#include "cli.h"

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
    {"pack", cmd_pack, "pack an ImageFolder or IDX files into a .slr dataset"},
    {"info", cmd_info, "describe a dataset (--json for scripts)"},
    {"verify", cmd_verify, "check every checksum of a dataset"},
    {"cat", cmd_cat, "write one field of one record to stdout"},
    {"recover", cmd_recover, "salvage the complete records of an interrupted pack"},
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

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void cli_progress_start(cli_progress *p, const char *label, uint64_t total) {
    p->label = label;
    p->total = total;
    p->t0_ns = p->last_ns = now_ns();
    p->enabled = isatty(2) && !getenv("SLUICE_NO_PROGRESS");
}

void cli_progress_update(cli_progress *p, uint64_t done, uint64_t bytes) {
    if (!p->enabled)
        return;
    uint64_t t = now_ns();
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
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "sluice: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
