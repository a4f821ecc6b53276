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
 * 0 success, 1 failure (damage, bad input), 2 usage error. To add a command,
 * declare it here and add a row to the table in main.c. */
int cmd_pack(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_recover(int argc, char **argv);
int cmd_scan(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_index(int argc, char **argv);
int cmd_env(int argc, char **argv);

/* Open `n` paths as a source (format from content; `features`, may be NULL,
 * is a --features value). Returns 0, or the exit code after printing why
 * (1 unreadable, 2 bad --features). */
int cli_source_open(const char *cmd, const char *const *paths, int n, const char *features,
                    sl_source **out);
/* The datasets named by the DATASET... arguments of info, verify and scan:
 * each argument is one (a brace pattern or @list is one dataset of many
 * files), except an IDX images file and labels file side by side, which are
 * one, and a file followed by its sidecar index (X, X.slidx), which is X. Fills start[k], len[k] (index and count into `paths`) and returns
 * the number of datasets. */
int cli_datasets(const char *const *paths, int n, int *start, int *len);
/* Print `o` as one line of JSON on stdout, then delete it (NULL: nothing). */
struct cJSON;
void cli_json_out(struct cJSON *o);
/* A .slr dataset's "salvaged" metadata (sl_recover_info) in words: "salvaged
 * from an interrupted pack: N of M planned records (...)", into buf; 0, or
 * -1 when `meta` is NULL or not such a note. */
int cli_salvaged_words(const char *meta, char *buf, size_t cap);
/* True if `path` opens as a .slr dataset. */
int cli_is_slr(const char *path);
/* A .slr dataset, or something that starts like one (its magic, or a
 * directory with a manifest): damaged .slr input is reported as such. */
int cli_looks_slr(const char *path);

/* Print "sluice CMD: " + sl_errmsg() to stderr and return 1. */
int cli_fail(const char *cmd);
/* Print a usage error and a hint to stderr and return 2. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* True if argv[i] is -h or --help. */
int cli_is_help(const char *arg);
/* Match an option that takes a value: `long_name` ("--jobs"), an optional
 * `short_name` ("-j", or NULL), as "--jobs V", "--jobs=V" or "-j V".
 * Returns 1 and sets *val (advancing *i past a separate value) on a match,
 * 0 if argv[*i] is another argument, -1 if the value is missing (a usage
 * message has been printed for `cmd`). */
int cli_opt(const char *cmd, int argc, char **argv, int *i, const char *long_name,
            const char *short_name, const char **val);
/* Take argv[i], an argument that matched no option of `cmd`, as an input:
 * appended to paths[*n] (at most `cap` of them). An unknown option ("-x";
 * a lone "-" is an input) or one input too many is a usage error: the
 * message has been printed for `cmd` and 2 is returned; 0 otherwise. */
int cli_input(const char *cmd, const char *arg, const char **paths, int *n, int cap);
/* Parse a non-negative integer (whole string). Returns 0 on success. */
int cli_parse_u64(const char *s, uint64_t *out);
/* Parse a byte size: an integer with an optional K, M, G or T suffix (powers
 * of 1024; "KB"/"KiB"/"k" accepted). Returns 0 on success. */
int cli_parse_size(const char *s, uint64_t *out);
/* Parse a positive number of seconds ("2", "0.5"). Returns 0 on success. */
int cli_parse_seconds(const char *s, double *out);
/* Monotonic clock in nanoseconds. */
uint64_t cli_now_ns(void);
/* Bytes as text ("1.5 MB", powers of 1000) into buf. */
const char *cli_bytes(char *buf, size_t cap, uint64_t bytes);

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
