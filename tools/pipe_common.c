/* pipe_common.c — spec files and pipeline construction for the CLI. */
#include "pipe_common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

char *cli_read_file(const char *cmd, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "sluice %s: %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0)
            break;
        if (n + 1 == cap) {
            if (cap > (64u << 20)) {
                free(buf);
                buf = NULL;
                break;
            }
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        fprintf(stderr, "sluice %s: %s: cannot read (too large or I/O error)\n", cmd, path);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

long long cli_parse_count(const char *s) {
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno || v < 0)
        return -1;
    return v;
}

char *cli_read_spec(const char *cmd, const char *spec_path) {
    char *text = cli_read_file(cmd, spec_path);
    if (!text)
        return NULL;
    size_t len = 0;
    char *out = NULL;
    if (sl_spec_resolve_paths(text, spec_path, NULL, 0, &len) == SL_OK &&
        (out = malloc(len + 1)) != NULL &&
        sl_spec_resolve_paths(text, spec_path, out, len + 1, &len) == SL_OK) {
        free(text);
        return out;
    }
    free(out);
    free(text);
    fprintf(stderr, "sluice %s: %s: %s\n", cmd, spec_path, sl_errmsg());
    return NULL;
}

int cli_build_pipeline(const char *cmd, const char *spec_path, long long epochs,
                       long long threads, sl_pipeline **out) {
    char *text = cli_read_spec(cmd, spec_path);
    if (!text)
        return 1;
    sl_spec *spec = NULL;
    int rc = sl_spec_from_json(&spec, text);
    free(text);
    if (rc < 0) {
        fprintf(stderr, "sluice %s: %s: %s\n", cmd, spec_path, sl_errmsg());
        return 1;
    }
    if ((epochs >= 0 && sl_spec_set_epochs(spec, epochs) < 0) ||
        (threads >= 0 && sl_spec_set_threads(spec, (int)threads) < 0)) {
        fprintf(stderr, "sluice %s: %s\n", cmd, sl_errmsg());
        sl_spec_free(spec);
        return 2;
    }
    rc = sl_pipeline_create(out, spec);
    sl_spec_free(spec);
    if (rc < 0) {
        fprintf(stderr, "sluice %s: %s: %s\n", cmd, spec_path, sl_errmsg());
        return 1;
    }
    return 0;
}

int cli_write_trace(const char *cmd, sl_pipeline *p, const char *path) {
    size_t len = 0;
    if (sl_pipeline_trace_json(p, NULL, 0, &len) < 0)
        return cli_fail(cmd);
    /* events may still arrive between the two calls: leave room, retry */
    char *text = NULL;
    for (size_t cap = len + 65536;; cap = len + 65536) {
        free(text);
        text = malloc(cap);
        if (!text || sl_pipeline_trace_json(p, text, cap, &len) < 0) {
            free(text);
            return cli_fail(cmd);
        }
        if (len < cap)
            break;
    }
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0)
        ok = 0;
    free(text);
    if (!ok) {
        fprintf(stderr, "sluice %s: %s: cannot write the trace: %s\n", cmd, path, strerror(errno));
        return 1;
    }
    return 0;
}
