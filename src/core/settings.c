/*
 * settings.c — every SLUICE_* environment variable sluice reads, in one
 * table: its name, type, range, default, one line of doc, and the layer that
 * reads it. `sluice env` prints it (with each variable's value and where it
 * came from), docs/CLI.md's "Settings" table is checked against it
 * (tests/cli/env.sh), and the integer settings are read through it
 * (sl__setting_int), so their defaults and ranges live here alone.
 *
 * The table is constant; nothing here is mutable.
 */
#include "core/core.h"
#include "sluice.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct setting {
    const char *name;
    const char *type;    /* int, bytes, mode, choice, path, flag */
    long long lo, hi;    /* int: the range */
    const char *range;   /* in words */
    const char *def;     /* the default, in words (int: a number) */
    const char *layer;
    const char *doc;
} setting;

static const setting table[] = {
    {"SLUICE_CACHE_BYTES", "bytes", 0, 0, "0 or more; K, M, G suffixes", "8G", "io",
     "the shard cache's budget on disk (0: no cache; the spec's cache_bytes wins)"},
    {"SLUICE_CACHE_DIR", "path", 0, 0, "a folder", "$XDG_CACHE_HOME/sluice, else ~/.cache/sluice",
     "io", "the node's shard cache of remote objects"},
    {"SLUICE_CACHE_MODE", "mode", 0, 0, "octal, owner rwx (0700 to 02777)", "0700", "io",
     "the shard cache's folder mode (its files: the same without execute bits)"},
    {"SLUICE_CACHE_TTL", "int", 0, 1000000000, "0 to 1000000000", "300", "io",
     "seconds a remote object's size and version, once asked, are trusted (0: ask each open)"},
    {"SLUICE_CA_BUNDLE", "path", 0, 0, "a file", "CURL_CA_BUNDLE, SSL_CERT_FILE, libcurl's or the "
     "distribution's", "io", "the CA certificates https:// servers are checked against"},
    {"SLUICE_CPUS", "int", 1, 1000000, "1 or more", "the CPUs this process may use", "core",
     "the CPU budget autotune divides among the stages"},
    {"SLUICE_CUDART", "path", 0, 0, "a file", "libcudart found by the loader", "device",
     "the CUDA runtime library to load"},
    {"SLUICE_CUDA_KERNELS", "path", 0, 0, "a file", "libsluice_cuda_kernels.so beside the library",
     "device", "sluice's CUDA kernels library to load"},
    {"SLUICE_HTTP_BACKOFF_MAX_MS", "int", 0, 600000, "0 to 600000", "5000", "io",
     "the longest wait between two tries of a request (ms)"},
    {"SLUICE_HTTP_BACKOFF_MS", "int", 0, 600000, "0 to 600000", "200", "io",
     "the first wait between two tries of a request (ms; doubles each try, with jitter)"},
    {"SLUICE_HTTP_CONNECT_TIMEOUT", "int", 1, 3600, "1 to 3600", "10", "io",
     "seconds to connect before a try fails"},
    {"SLUICE_HTTP_OPEN_BYTES", "int", 64, 1073741824, "64 to 1073741824", "262144", "io",
     "bytes of a shard's end read with its open when no shard cache is in use"},
    {"SLUICE_HTTP_READAHEAD", "int", 1, 256, "1 to 256", "64", "io",
     "range requests read ahead at once"},
    {"SLUICE_HTTP_STALL_TIMEOUT", "int", 1, 3600, "1 to 3600", "30", "io",
     "seconds without a byte before a transfer is tried again"},
    {"SLUICE_HTTP_TRIES", "int", 1, 100, "1 to 100", "6", "io",
     "tries of a request before it fails (connection errors, timeouts, 5xx, 408, 429)"},
    {"SLUICE_INTEGRITY", "choice", 0, 0, "strict", "unset", "io",
     "strict: refuse remote bytes nothing can check end to end (else read them with a warning)"},
    {"SLUICE_LOG", "choice", 0, 0, "error, warn, info, debug", "warn", "core",
     "the level of the messages sluice writes to stderr"},
    {"SLUICE_NO_PROGRESS", "flag", 0, 0, "set or unset", "unset", "tools",
     "set: the sluice command draws no progress bar"},
    {"SLUICE_NVJPEG", "path", 0, 0, "a file", "libnvjpeg found by the loader", "device",
     "the nvJPEG library to load for GPU decode"},
    {"SLUICE_SIMD", "choice", 0, 0, "scalar, sse4.1, avx2, avx512", "the best the CPU has", "ops",
     "the widest instruction set the image kernels may use"},
};

enum { N = (int)(sizeof table / sizeof table[0]) };

int sl_setting_count(void) { return N; }

int sl_setting_get(int i, sl_setting_info *out) {
    if (i < 0 || i >= N)
        return sl__error(SL_EINVAL, "setting %d: there are %d (0 to %d)", i, N, N - 1);
    const setting *s = &table[i];
    out->name = s->name;
    out->type = s->type;
    out->range = s->range;
    out->default_value = s->def;
    out->layer = s->layer;
    out->doc = s->doc;
    const char *v = getenv(s->name);
    out->value = v && *v ? v : NULL;
    return SL_OK;
}

static const setting *find(const char *name) {
    for (int i = 0; i < N; i++)
        if (!strcmp(table[i].name, name))
            return &table[i];
    return NULL;
}

long long sl__setting_int(const char *name) {
    const setting *s = find(name);
    if (!s || strcmp(s->type, "int") != 0) { /* a name not in the table: a bug here */
        SL_LOG_ERROR("%s: not an integer setting of sluice's table (src/core/settings.c)", name);
        abort();
    }
    long long def = strtoll(s->def, NULL, 10);
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno || x < s->lo || x > s->hi) {
        SL_LOG_WARN("%s=%s: not a number in [%lld, %lld]; using %lld", name, v, s->lo, s->hi, def);
        return def;
    }
    return x;
}
