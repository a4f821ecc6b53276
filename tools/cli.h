/*
 * cli.h — shared pieces of the `sluice` command: the command table entry
 * points, a progress bar, option helpers. Uses only sluice.h.
 */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include "sluice.h"

#include <stdint.h>
#include <stdio.h>

/* Each command: argv[0] is the command name. Returns the process exit code:
 * 0 success, 1 failure (damage, bad input), 2 usage error. */
int cmd_pack(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_recover(int argc, char **argv);

/* Print "sluice CMD: " + sl_errmsg() to stderr and return 1. */
int cli_fail(const char *cmd);
/* Print a usage error and a hint to stderr and return 2. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A progress line on stderr, drawn only when stderr is a terminal and at most
 * ~10 times a second. */
typedef struct cli_progress {
    const char *label;
    uint64_t total;
    uint64_t t0_ns;
    uint64_t last_ns;
    int enabled;
} cli_progress;
void cli_progress_start(cli_progress *p, const char *label, uint64_t total);
void cli_progress_update(cli_progress *p, uint64_t done, uint64_t bytes);
void cli_progress_end(cli_progress *p);

#endif
