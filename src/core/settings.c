/*
 * settings.c — every SLUICE_* environment variable sluice reads, in one
 * table: its name, type, range, default, one line of doc, and the layer that
 * reads it. `sluice env` prints it (with each variable's value and where it
 * came from), docs/CLI.md's "Settings" table is checked against it
 * (tests/cli/env.sh), and every setting is read through it: one reader
 * (read_text) and one check per row, the check of a spec's or Python's
 * parameters (core/params.c), so a bad value reads the same either way:
 * `SLUICE_HTTP_TRIES: must be a whole number from 1 to 100 (got "abc")`.
 *
 * sl_settings_check() checks them all; it runs where sluice starts to work
 * (a pipeline, source or reader built, remote I/O opened, the CLI started),
 * so a bad value fails there. A reader that meets one anyway (the
 * environment changed since) takes the default and says so.
 *
 * The table is constant; nothing here is mutable.
 */
#include "core/core.h"
#include "core/params.h"
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct setting {
    sl_param p;        /* key: the name; its type, bounds, values and doc */
    const char *type;  /* in words: int, bytes, mode, choice, path, flag */
    const char *def;   /* the default, in words (int, bytes, mode: a value it takes) */
    const char *layer; /* the part of sluice that reads it */
} setting;

#define INT(lo, hi) .type = SL_PARAM_INT64, .min = (lo), .max = (hi)
#define TEXT(words) .type = SL_PARAM_STRING, .min = 1, .max = -1, .expect = (words)

static const char *const integrity_names[] = {"strict", NULL};
static const char *const log_names[] = {"error", "warn", "info", "debug", NULL};
static const char *const simd_names[] = {"scalar", "sse4.1", "avx2", "avx512", NULL};

/* The folder mode's words: the message of a bad SLUICE_CACHE_MODE. */
#define MODE_WORDS "an octal folder mode that gives its owner rwx (0700 to 02777), such as 0700 " \
                   "(private), 0750 (the group reads) or 0770 (the group shares)"

static const setting table[] = {
    {{.key = "SLUICE_CACHE_BYTES", .type = SL_PARAM_BYTES, .min = 0, .max = -1,
      .doc = "the shard cache's budget on disk (0: no cache; the spec's cache_bytes wins)"},
     "bytes", "8G", "io"},
    {{.key = "SLUICE_CACHE_DIR", TEXT("a folder"), .doc = "the node's shard cache of remote objects"},
     "path", "$XDG_CACHE_HOME/sluice, else ~/.cache/sluice", "io"},
    {{.key = "SLUICE_CACHE_MODE", TEXT(MODE_WORDS),
      .doc = "the shard cache's folder mode (its files: the same without execute bits)"},
     "mode", "0700", "io"},
    {{.key = "SLUICE_CACHE_TTL", INT(0, 1000000000),
      .doc = "seconds a remote object's size and version, once asked, are trusted (0: ask each "
             "open)"},
     "int", "300", "io"},
    {{.key = "SLUICE_CA_BUNDLE", TEXT("a file"),
      .doc = "the CA certificates https:// servers are checked against"},
     "path", "CURL_CA_BUNDLE, SSL_CERT_FILE, libcurl's or the distribution's", "io"},
    {{.key = "SLUICE_CPUS", INT(1, 1000000), .doc = "the CPU budget autotune divides among the "
                                                    "stages"},
     "int", "the CPUs this process may use", "core"},
    {{.key = "SLUICE_CUDART", TEXT("a file"), .doc = "the CUDA runtime library to load"},
     "path", "libcudart found by the loader", "device"},
    {{.key = "SLUICE_CUDA_KERNELS", TEXT("a file"), .doc = "sluice's CUDA kernels library to load"},
     "path", "libsluice_cuda_kernels.so beside the library", "device"},
    {{.key = "SLUICE_HTTP_BACKOFF_MAX_MS", INT(0, 600000),
      .doc = "the longest wait between two tries of a request (ms)"},
     "int", "5000", "io"},
    {{.key = "SLUICE_HTTP_BACKOFF_MS", INT(0, 600000),
      .doc = "the first wait between two tries of a request (ms; doubles each try, with jitter)"},
     "int", "200", "io"},
    {{.key = "SLUICE_HTTP_CONNECT_TIMEOUT", INT(1, 3600),
      .doc = "seconds to connect before a try fails"},
     "int", "10", "io"},
    {{.key = "SLUICE_HTTP_OPEN_BYTES", INT(64, 1073741824),
      .doc = "bytes of a shard's end read with its open when no shard cache is in use"},
     "int", "262144", "io"},
    {{.key = "SLUICE_HTTP_READAHEAD", INT(1, 256), .doc = "range requests read ahead at once"},
     "int", "64", "io"},
    {{.key = "SLUICE_HTTP_STALL_TIMEOUT", INT(1, 3600),
      .doc = "seconds without a byte before a transfer is tried again"},
     "int", "30", "io"},
    {{.key = "SLUICE_HTTP_TRIES", INT(1, 100),
      .doc = "tries of a request before it fails (connection errors, timeouts, 5xx, 408, 429)"},
     "int", "6", "io"},
    {{.key = "SLUICE_INTEGRITY", .type = SL_PARAM_ENUM, .names = integrity_names,
      .doc = "strict: refuse remote bytes nothing can check end to end (else read them with a "
             "warning)"},
     "choice", "unset", "io"},
    {{.key = "SLUICE_LIBCURL", TEXT("a file"),
      .doc = "the libcurl to load when the first remote read starts (builds that link it, "
             "the wheels among them, ignore it)"},
     "path", "libcurl.so.4 found by the loader", "io"},
    {{.key = "SLUICE_LOG", .type = SL_PARAM_ENUM, .names = log_names,
      .doc = "the level of the messages sluice writes to stderr"},
     "choice", "warn", "core"},
    {{.key = "SLUICE_NO_PROGRESS", TEXT("set (to anything) or unset"),
      .doc = "set: the sluice command draws no progress bar"},
     "flag", "unset", "tools"},
    {{.key = "SLUICE_NVJPEG", TEXT("a file"), .doc = "the nvJPEG library to load for GPU decode"},
     "path", "libnvjpeg found by the loader", "device"},
    {{.key = "SLUICE_SIMD", .type = SL_PARAM_ENUM, .names = simd_names,
      .doc = "the widest instruction set the image kernels may use"},
     "choice", "the best the CPU has", "ops"},
};

enum { N = (int)(sizeof table / sizeof table[0]) };

/* Messages name the variable alone: "SLUICE_LOG: must be ...". */
static const sl_param_table env_table = {NULL, "sluice's settings", "variable", 0, 0};

/* The environment's value of a row: NULL when unset or empty (empty is unset). */
static const char *env_value(const setting *s) {
    const char *v = getenv(s->p.key);
    return v && *v ? v : NULL;
}

/* A folder mode in octal that keeps the owner's rwx (the cache must stay
 * usable by its writer), setgid allowed for a group's shared folder. */
static int parse_mode(const char *text, long long *out) {
    char *end;
    long x = strtol(text, &end, 8);
    if (end == text || *end || x < 0 || (x & ~02777L) || (x & 0700) != 0700)
        return -1;
    *out = x;
    return 0;
}

/* The one reader: `text` as row `s` takes it, into *num (int, bytes, mode:
 * the number; choice: the index of the value) — SL_OK, or with `report` the
 * message of a bad value (else SL_EINVAL and no message). */
static int read_text(const setting *s, const char *text, int report, long long *num) {
    const sl_param_table *t = report ? &env_table : NULL;
    int64_t i64 = 0;
    uint64_t u64 = 0;
    int idx = 0;
    const char *str = NULL;
    void *dst = s->p.type == SL_PARAM_INT64   ? (void *)&i64
                : s->p.type == SL_PARAM_BYTES ? (void *)&u64
                : s->p.type == SL_PARAM_ENUM  ? (void *)&idx
                                              : (void *)&str;
    SL_TRY(sl_param_text(t, &s->p, text, "", dst));
    *num = s->p.type == SL_PARAM_INT64 ? i64 : s->p.type == SL_PARAM_BYTES ? (long long)u64 : idx;
    if (!strcmp(s->type, "mode") && parse_mode(text, num) < 0) {
        char got[160];
        snprintf(got, sizeof got, "\"%.120s\"", text);
        return t ? sl_param_must(t, &s->p, "", got) : SL_EINVAL;
    }
    return SL_OK;
}

/* Row `name`, which must be of a kind `ok` says: a name or kind not in the
 * table is a mistake in sluice's sources. */
static const setting *find(const char *name, int (*ok)(const setting *)) {
    for (int i = 0; i < N; i++)
        if (!strcmp(table[i].p.key, name) && ok(&table[i]))
            return &table[i];
    fprintf(stderr, "sluice: %s: not a setting of that kind in sluice's table "
                    "(src/core/settings.c)\n", name);
    abort();
}

static int any(const setting *s) { return s != NULL; }
static int numeric(const setting *s) {
    return s->p.type == SL_PARAM_INT64 || s->p.type == SL_PARAM_BYTES || !strcmp(s->type, "mode");
}
static int choice(const setting *s) { return s->p.type == SL_PARAM_ENUM; }

int sl_setting_count(void) { return N; }

int sl_setting_get(int i, sl_setting_info *out) {
    if (i < 0 || i >= N)
        return sl__error(SL_EINVAL, "setting %d: there are %d (0 to %d)", i, N, N - 1);
    /* the range in words, made from the row that checks a value, so `sluice
     * env`, docs/CLI.md and the message of a bad value say the same */
    static _Thread_local char range[N][256];
    const setting *s = &table[i];
    out->name = s->p.key;
    out->type = s->type;
    out->range = sl_param_expected(&s->p, range[i], sizeof range[i]);
    out->default_value = s->def;
    out->layer = s->layer;
    out->doc = s->p.doc;
    out->value = env_value(s);
    return SL_OK;
}

const char *sl_setting_value(const char *name) {
    for (int i = 0; name && i < N; i++)
        if (!strcmp(table[i].p.key, name))
            return env_value(&table[i]);
    return NULL;
}

int sl_settings_check(void) {
    for (int i = 0; i < N; i++) {
        const char *v = env_value(&table[i]);
        long long unused;
        if (v)
            SL_TRY(read_text(&table[i], v, 1, &unused));
    }
    return SL_OK;
}

const char *sl__setting_str(const char *name) { return env_value(find(name, any)); }

/* The value of a row: the environment's, else its default's (-1 where the
 * default is no value it takes: "unset", "the best the CPU has"). A bad
 * value gives the default, said (but for SLUICE_LOG: saying reads it). */
static long long value_of(const setting *s) {
    long long x = 0, def = 0;
    const char *v = env_value(s);
    if (v && read_text(s, v, 0, &x) == SL_OK)
        return x;
    if (read_text(s, s->def, 0, &def) != SL_OK)
        def = -1;
    if (v && strcmp(s->p.key, "SLUICE_LOG") != 0)
        SL_LOG_WARN("%s=%s: not a value it takes ('sluice env' lists them); using the default "
                    "(%s)", s->p.key, v, s->def);
    return def;
}

long long sl__setting_int(const char *name) { return value_of(find(name, numeric)); }

int sl__setting_choice(const char *name) { return (int)value_of(find(name, choice)); }
