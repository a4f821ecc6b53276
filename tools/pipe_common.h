/* pipe_common.h — what `sluice run`, `bench` and `explain` share: reading a
 * spec file and building the pipeline with command-line overrides. */
#ifndef SLUICE_PIPE_COMMON_H
#define SLUICE_PIPE_COMMON_H

#include "cli.h"

/* Read a whole file into a NUL-terminated heap string (free()); NULL on
 * failure with a message on stderr prefixed by `cmd`. */
char *cli_read_file(const char *cmd, const char *path);
/* A spec file's text with its relative input paths resolved against the
 * file's folder (sl_spec_resolve_paths); NULL after a message on stderr. */
char *cli_read_spec(const char *cmd, const char *spec_path);
/* Parse a non-negative integer option value; -1 if not one. */
long long cli_parse_count(const char *s);
/* Build a pipeline from a spec file; epochs/threads < 0 keep the spec's.
 * Returns 0, or the exit code to return (message printed). */
int cli_build_pipeline(const char *cmd, const char *spec_path, long long epochs,
                       long long threads, sl_pipeline **out);

/* Write the pipeline's trace (Chrome trace-event JSON) to `path`.
 * Returns 0 or 1 (message printed). */
int cli_write_trace(const char *cmd, sl_pipeline *p, const char *path);

#endif
