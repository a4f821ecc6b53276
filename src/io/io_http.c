/*
 * io_http.c — the remote provider of the byte-access layer (io.h): http://,
 * https:// and s3:// objects read with libcurl.
 *
 * DESIGN
 * - Handles: a process-wide pool of curl easy handles (one per request in
 *   flight, returned after it), each keeping its connections alive between
 *   requests; DNS answers and TLS sessions are shared (a curl share object).
 *   HTTP/2 is asked for over TLS and used where the server offers it.
 * - open: a HEAD request gives the size (and ETag/Last-Modified, which name the
 *   object's version in the cache). Without SL_IO_MAP each read is one range
 *   GET. With SL_IO_MAP the object is fetched whole into the shard cache (a
 *   file on local disk) and mapped, so the zero-copy formats (.slr, tar,
 *   TFRecord) read it unchanged.
 * - Faults: a request is tried up to SLUICE_HTTP_TRIES times (default 6) on a
 *   connection error, a timeout or stall, a body cut short, HTTP 5xx, 408 and
 *   429; between tries it waits an exponential backoff with jitter (from
 *   SLUICE_HTTP_BACKOFF_MS, default 200, doubling, capped at
 *   SLUICE_HTTP_BACKOFF_MAX_MS, default 5000) or the server's Retry-After when
 *   longer (capped at 60 s). A body broken after some bytes is resumed from
 *   where it stopped with a range request, and that try does not count
 *   against the budget (bytes arrived). Other statuses (404, 403, 416...) fail
 *   at once. The last error names the URL, the status or curl's words, and
 *   the number of tries.
 * - The shard cache (SLUICE_CACHE_DIR, default $XDG_CACHE_HOME/sluice or
 *   ~/.cache/sluice; SLUICE_CACHE_BYTES, default 8 GiB; 0 turns it off and
 *   whole objects are held in memory instead): one file per object version,
 *   named by a hash of the URL, size and validator, holding the bytes plus a
 *   16-byte trailer ("SLCACHE1" + XXH3-64 of the bytes). An entry is written
 *   under a temporary name and renamed into place when complete, so no process
 *   ever sees a half-written entry; a per-entry lock file (flock) makes the
 *   processes of one node fetch an object once. Every use checks the size and
 *   the checksum first: a damaged entry is deleted and fetched again (a
 *   warning says so). After an entry is added, the least recently used ones
 *   (by mtime, refreshed on each use) are deleted until the cache is within its
 *   budget; an entry mapped by a running process may be deleted (its mapping
 *   stays valid until unmapped).
 * - Integrity: an object fetched whole is asked for without a Range, and the
 *   checksums its answer gives (S3's stored ones, asked for with
 *   x-amz-checksum-mode; a single-part upload's MD5 ETag; Content-MD5,
 *   Digest, Repr-Digest) are checked before it enters the cache or memory; a
 *   mismatch is fetched again once. A caller whose own check fails (a .slr
 *   record, an index's checksum) has the entry dropped (sl_io__forget) and
 *   opens again (sl_io__open_checked).
 * - Revalidation: a HEAD's answer is kept in CACHE_DIR/.meta for
 *   SLUICE_CACHE_TTL seconds (default 300), so a warm run asks nothing.
 * - A server that ignores Range: after its first whole answer to a range
 *   request, an object read by ranges is fetched whole once (become_whole).
 * - s3://bucket/key: the URL and the signed headers (when credentials are
 *   set; unsigned for public buckets) come from s3.c/sigv4.c, settings from
 *   the AWS_* variables read once; such requests keep their path as it is
 *   (CURLOPT_PATH_AS_IS). s3://bucket/prefix/ is listed (ListObjectsV2,
 *   every page) by sl_io__list.
 *
 * Thread safety: every function may run on many threads at once.
 */
#include "io/io.h"
#include "io/s3.h"
#include "core/worker.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <xxhash.h>
#include <zlib.h>

#define URL_MAX 4096
/* Handles kept for reuse (each keeps its kept-alive connection): room for
 * the reading threads and the openers, whose requests are their own (the
 * read-ahead loop keeps handles of its own). A handle put back into a full
 * pool is cleaned up with its connection: when the fetch threads took their
 * handles from it, 64 places made 2262 connections for 7746 requests through
 * a 20 ms proxy; room for all, 129. */
#define POOL_MAX 320
#define TRAILER 16
static const char trailer_magic[8] = {'S', 'L', 'C', 'A', 'C', 'H', 'E', '1'};

/* ---- settings (read once, from the environment) -------------------------------- */

typedef struct http_cfg {
    int tries;
    long backoff_ms, backoff_max_ms;
    long connect_timeout_s, stall_s;
    int readahead;
    uint64_t open_bytes; /* SLUICE_HTTP_OPEN_BYTES: an SL_IO_EDGES open's suffix (its
                            prefix: this, at most SL_IO_EDGE_HEAD) */
    char ca[URL_MAX];
    char cache_dir[URL_MAX];
    uint64_t cache_bytes;
    long ttl_s;          /* SLUICE_CACHE_TTL: an object's size and validator,
                            once asked, are trusted this long (0: ask each time) */
    mode_t dir_mode;     /* SLUICE_CACHE_MODE: the cache's folders (default 0700) */
    mode_t file_mode;    /* its files: dir_mode without the execute bits */
} http_cfg;

static http_cfg cfg;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_rc;
static CURLSH *share;
static pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static CURL *pool[POOL_MAX];
static int npool;
/* idle multi handles (perform_many) */
#define MPOOL_MAX 64
static CURLM *mpool[MPOOL_MAX];
static int nmpool;
static sl_s3_config s3cfg; /* from the environment, read once */
static int s3cfg_rc;
static char s3cfg_msg[SL__ERRMSG_MAX];

static long env_long(const char *name, long def, long lo, long hi) {
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        SL_LOG_WARN("%s=%s: not a number in [%ld, %ld]; using %ld", name, v, lo, hi, def);
        return def;
    }
    return x;
}

/* SLUICE_CACHE_MODE: an octal folder mode that keeps the owner's rwx (the
 * cache must stay usable by its writer), setgid allowed for a group's
 * shared folder; anything else is said and the default kept. */
static mode_t env_mode(const char *name, mode_t def) {
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    long x = strtol(v, &end, 8);
    if (*end || x < 0 || (x & ~02777L) || (x & 0700) != 0700) {
        SL_LOG_WARN("%s=%s: not a folder mode in octal that gives its owner rwx, such as 0700 "
                    "(private), 0750 (the group reads) or 0770 (the group shares); using %04o",
                    name, v, (unsigned)def);
        return def;
    }
    return (mode_t)x;
}

/* The read-ahead loop's thread (ra_loop, below): started under ra_mu by the
 * first hint, and never stopped (it lives as long as the process). A forked
 * child has none (core/worker.h): its first hint starts its own. */
static sl_workers ra_ws;

static void atfork_prepare(void);
static void atfork_parent(void);
static void atfork_child(void);

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *u) {
    (void)h, (void)a, (void)u;
    pthread_mutex_lock(&share_mu[d]);
}
static void share_unlock(CURL *h, curl_lock_data d, void *u) {
    (void)h, (void)u;
    pthread_mutex_unlock(&share_mu[d]);
}

/* Where distributions keep their CA bundle (the list Go's crypto/x509 reads
 * on Linux): Debian, Ubuntu, Arch, Gentoo; Fedora, RHEL 6; openSUSE;
 * OpenELEC; CentOS and RHEL 7 and later; Alpine. */
static const char *const ca_bundles[] = {
    "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem", "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/cert.pem", NULL};

const char *sl_io__ca_pick(const char *builtin, const char *const *candidates) {
    if (builtin && *builtin && access(builtin, R_OK) == 0)
        return NULL;
    for (int i = 0; candidates[i]; i++)
        if (access(candidates[i], R_OK) == 0)
            return candidates[i];
    return NULL;
}

static void init(void) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        init_rc = SL_EIO;
        return;
    }
    cfg.tries = (int)env_long("SLUICE_HTTP_TRIES", 6, 1, 100);
    cfg.backoff_ms = env_long("SLUICE_HTTP_BACKOFF_MS", 200, 0, 600000);
    cfg.backoff_max_ms = env_long("SLUICE_HTTP_BACKOFF_MAX_MS", 5000, 0, 600000);
    cfg.connect_timeout_s = env_long("SLUICE_HTTP_CONNECT_TIMEOUT", 10, 1, 3600);
    cfg.stall_s = env_long("SLUICE_HTTP_STALL_TIMEOUT", 30, 1, 3600);
    cfg.readahead = (int)env_long("SLUICE_HTTP_READAHEAD", 64, 1, 256);
    cfg.open_bytes = (uint64_t)env_long("SLUICE_HTTP_OPEN_BYTES", (long)SL_IO_EDGE_TAIL, 64,
                                       (long)1 << 30);
    cfg.ttl_s = env_long("SLUICE_CACHE_TTL", 300, 0, 1000000000);
    /* Private by default: the cache holds whatever remote data this user
     * reads (private S3 objects too), on a machine others may share. */
    cfg.dir_mode = env_mode("SLUICE_CACHE_MODE", 0700);
    cfg.file_mode = cfg.dir_mode & 0666;
    const char *ca = getenv("SLUICE_CA_BUNDLE");
    if (!ca || !*ca)
        ca = getenv("CURL_CA_BUNDLE");
    if (!ca || !*ca)
        ca = getenv("SSL_CERT_FILE");
    if (!ca || !*ca)
        ca = sl_io__ca_pick(curl_version_info(CURLVERSION_NOW)->cainfo, ca_bundles);
    if (ca && *ca)
        snprintf(cfg.ca, sizeof cfg.ca, "%s", ca);
    const char *dir = getenv("SLUICE_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (dir && *dir)
        snprintf(cfg.cache_dir, sizeof cfg.cache_dir, "%s", dir);
    else if (xdg && *xdg)
        snprintf(cfg.cache_dir, sizeof cfg.cache_dir, "%s/sluice", xdg);
    else if (home && *home)
        snprintf(cfg.cache_dir, sizeof cfg.cache_dir, "%s/.cache/sluice", home);
    cfg.cache_bytes = (uint64_t)8 << 30;
    const char *cb = getenv("SLUICE_CACHE_BYTES");
    if (cb && *cb) {
        char *end;
        unsigned long long v = strtoull(cb, &end, 10);
        if (*end == 'K' || *end == 'k')
            v <<= 10, end++;
        else if (*end == 'M' || *end == 'm')
            v <<= 20, end++;
        else if (*end == 'G' || *end == 'g')
            v <<= 30, end++;
        if (*end || cb[0] == '-')
            SL_LOG_WARN("SLUICE_CACHE_BYTES=%s: not a byte count (like 500000000 or 20G); "
                        "using 8G", cb);
        else
            cfg.cache_bytes = v;
    }
    s3cfg_rc = sl_s3__config_from_env(&s3cfg);
    if (s3cfg_rc < 0)
        snprintf(s3cfg_msg, sizeof s3cfg_msg, "%s", sl_errmsg());
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&share_mu[i], NULL);
    if (sl__workers_init(&ra_ws, "readahead", 1, NULL, NULL) < 0)
        SL_LOG_WARN("%s; reading without read-ahead", sl_errmsg());
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    share = curl_share_init();
    if (share) {
        curl_share_setopt(share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
}

static int ensure_init(void) {
    pthread_once(&init_once, init);
    if (init_rc)
        return sl__error(SL_EIO, "libcurl failed to initialise");
    return SL_OK;
}

void sl_io__cache_set_bytes(uint64_t bytes) {
    if (ensure_init() != SL_OK)
        return;
    __atomic_store_n(&cfg.cache_bytes, bytes, __ATOMIC_RELAXED);
}

static uint64_t cache_budget(void) { return __atomic_load_n(&cfg.cache_bytes, __ATOMIC_RELAXED); }


/* The idle handles of pool and mpool (CURL and CURLM are both void): the
 * last one kept, or NULL when none is idle. */
static void *idle_take(void **slots, int *n) {
    void *p = NULL;
    pthread_mutex_lock(&pool_mu);
    if (*n)
        p = slots[--*n];
    pthread_mutex_unlock(&pool_mu);
    return p;
}

/* Keeps p idle when the pool has room (then NULL), else gives p back for
 * the caller to clean up. */
static void *idle_keep(void **slots, int *n, int max, void *p) {
    pthread_mutex_lock(&pool_mu);
    if (*n < max) {
        slots[(*n)++] = p;
        p = NULL;
    }
    pthread_mutex_unlock(&pool_mu);
    return p;
}

static CURL *handle_get(void) {
    CURL *h = idle_take(pool, &npool);
    return h ? h : curl_easy_init();
}

static void handle_put(CURL *h) {
    /* reset keeps the handle's live connections (keep-alive) */
    curl_easy_reset(h);
    if ((h = idle_keep(pool, &npool, POOL_MAX, h)))
        curl_easy_cleanup(h);
}

/* ---- names ------------------------------------------------------------------- */

int sl_io__http_handles(const char *name) {
    return !strncmp(name, "http://", 7) || !strncmp(name, "https://", 8) ||
           !strncmp(name, "s3://", 5);
}

/* The URL a name is fetched from: itself, or for s3://bucket/key the
 * endpoint's. */
static int s3_config(void) {
    return s3cfg_rc < 0 ? sl__error(s3cfg_rc, "%s", s3cfg_msg) : SL_OK;
}

static int resolve(const char *name, char *url, size_t cap) {
    int n;
    if (strncmp(name, "s3://", 5) != 0) {
        n = snprintf(url, cap, "%s", name);
    } else {
        SL_TRY(s3_config());
        char *u;
        SL_TRY(sl_s3__object_url(&s3cfg, name, &u));
        n = snprintf(url, cap, "%s", u);
        sl__free(u);
    }
    if (n < 0 || (size_t)n >= cap)
        return sl__error(SL_EINVAL, "%.200s...: URL too long", name);
    return SL_OK;
}

/* ---- checksums a server stores for an object ---------------------------------------
 *
 * What a whole-object answer (HTTP 200) may say of the bytes, each checked
 * against the bytes fetched before they enter the shard cache (or memory):
 * S3's stored checksums (asked for with x-amz-checksum-mode: ENABLED;
 * x-amz-checksum-crc32c, -crc32, -sha256 of the whole object; a multipart
 * upload's composite value, "...-N", is not one), the MD5 ETag of a
 * single-part S3 upload (not one encrypted with SSE-KMS or SSE-C, whose ETag
 * is no MD5), and HTTP's Content-MD5, Digest (RFC 3230: md5, sha-256) and
 * Repr-Digest (RFC 9530: sha-256, sha-512). */

/* In the order they are checked: a stored checksum is named before the
 * ETag's MD5 when both fail. */
enum { SUM_CRC32C, SUM_CRC32, SUM_SHA256, SUM_SHA512, SUM_MD5, SUM_N };
static const char *const sum_alg[SUM_N] = {"CRC32C", "CRC32", "SHA-256", "SHA-512", "MD5"};
static const int sum_len[SUM_N] = {4, 4, 32, 64, 16};

typedef struct stored_sums {
    uint8_t want[SUM_N][64];
    char from[SUM_N][32];  /* the header it came from; "" when none */
    char etag[128];        /* an S3 ETag, checked as MD5 at the end when fit */
    int s3, sse_other;     /* an s3:// object; SSE-KMS or SSE-C (ETag not MD5) */
} stored_sums;

/* Standard base64 (padding optional) of exactly `n` bytes into out. */
static int b64_exact(const char *s, size_t len, uint8_t *out, size_t n) {
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
                : c >= '0' && c <= '9' ? c - '0' + 52 : c == '+' ? 62 : c == '/' ? 63 : -1;
        if (c == '=')
            break;
        if (v < 0)
            return 0;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (k >= n)
                return 0;
            out[k++] = (uint8_t)(acc >> bits);
        }
    }
    return k == n;
}

static void sum_set(stored_sums *ss, int alg, const char *v, size_t len, const char *from) {
    while (len && (*v == ' ' || *v == ':' || *v == '"'))
        v++, len--;
    while (len && (v[len - 1] == ' ' || v[len - 1] == ':' || v[len - 1] == '"'))
        len--;
    if (b64_exact(v, len, ss->want[alg], (size_t)sum_len[alg]))
        snprintf(ss->from[alg], sizeof ss->from[alg], "%s", from);
}

/* A "name=value, name=value" list (Digest, Repr-Digest). */
static void sum_list(stored_sums *ss, const char *v, const char *from) {
    while (*v) {
        while (*v == ' ' || *v == ',')
            v++;
        size_t n = strcspn(v, "=,");
        const char *val = v[n] == '=' ? v + n + 1 : NULL;
        size_t vl = val ? strcspn(val, ",") : 0;
        int alg = !strncasecmp(v, "sha-256", n) && n == 7   ? SUM_SHA256
                  : !strncasecmp(v, "sha-512", n) && n == 7 ? SUM_SHA512
                  : !strncasecmp(v, "md5", n) && n == 3     ? SUM_MD5
                                                            : -1;
        if (alg >= 0 && val)
            sum_set(ss, alg, val, vl, from);
        v = val ? val + vl : v + n;
    }
}

/* One header line of a whole-object answer. */
static void sum_header(stored_sums *ss, const char *line) {
    static const struct {
        const char *name;
        int alg;
    } amz[] = {{"x-amz-checksum-crc32c:", SUM_CRC32C},
               {"x-amz-checksum-crc32:", SUM_CRC32},
               {"x-amz-checksum-sha256:", SUM_SHA256},
               {"content-md5:", SUM_MD5}};
    for (size_t i = 0; i < sizeof amz / sizeof amz[0]; i++) {
        size_t nl = strlen(amz[i].name);
        if (!strncasecmp(line, amz[i].name, nl)) {
            const char *v = line + nl;
            if (!strchr(v, '-')) /* a composite (multipart) value is not the object's */
                sum_set(ss, amz[i].alg, v, strlen(v), amz[i].name);
            ss->from[amz[i].alg][strcspn(ss->from[amz[i].alg], ":")] = 0;
            return;
        }
    }
    if (!strncasecmp(line, "repr-digest:", 12))
        sum_list(ss, line + 12, "Repr-Digest");
    else if (!strncasecmp(line, "digest:", 7))
        sum_list(ss, line + 7, "Digest");
    else if (!strncasecmp(line, "x-amz-server-side-encryption:", 29))
        ss->sse_other |= strstr(line + 29, "kms") != NULL;
    else if (!strncasecmp(line, "x-amz-server-side-encryption-customer-algorithm:", 48))
        ss->sse_other = 1;
    else if (!strncasecmp(line, "etag:", 5))
        snprintf(ss->etag, sizeof ss->etag, "%s", line + 5 + strspn(line + 5, " "));
}

static int digest_evp(const EVP_MD *md, const uint8_t *p, size_t n, uint8_t *out) {
    unsigned len = 0;
    return EVP_Digest(p, n, out, &len, md, NULL) == 1;
}

/* The bytes against every checksum the answer gave: SL_OK (also when it
 * gave none), or SL_ECORRUPT naming `name`, the algorithm and the header. */
static int sums_check(stored_sums *ss, const uint8_t *p, size_t n, const char *name) {
    /* a single-part S3 upload's ETag is the MD5 of its bytes */
    size_t el = strlen(ss->etag);
    if (ss->s3 && !ss->sse_other && !ss->from[SUM_MD5][0] && el == 34 && ss->etag[0] == '"' &&
        ss->etag[33] == '"' && strspn(ss->etag + 1, "0123456789abcdef") == 32) {
        for (int i = 0; i < 16; i++) {
            unsigned b;
            sscanf(ss->etag + 1 + 2 * i, "%2x", &b);
            ss->want[SUM_MD5][i] = (uint8_t)b;
        }
        snprintf(ss->from[SUM_MD5], sizeof ss->from[SUM_MD5], "ETag");
    }
    for (int a = 0; a < SUM_N; a++) {
        if (!ss->from[a][0])
            continue;
        uint8_t got[64];
        int ok = 1;
        if (a == SUM_CRC32C || a == SUM_CRC32) {
            uint32_t c = a == SUM_CRC32C ? sl__crc32c(0, p, n) : (uint32_t)crc32_z(0, p, n);
            got[0] = (uint8_t)(c >> 24), got[1] = (uint8_t)(c >> 16);
            got[2] = (uint8_t)(c >> 8), got[3] = (uint8_t)c;
        } else {
            ok = digest_evp(a == SUM_MD5 ? EVP_md5() : a == SUM_SHA256 ? EVP_sha256() : EVP_sha512(),
                            p, n, got);
        }
        if (!ok)
            return sl__error(SL_ENOMEM, "%s: computing its %s failed (OpenSSL)", name, sum_alg[a]);
        if (memcmp(got, ss->want[a], (size_t)sum_len[a]) != 0)
            return sl__error(SL_ECORRUPT, "%s: the bytes fetched do not match the %s the server "
                             "gives for the object (%s)", name, sum_alg[a], ss->from[a]);
    }
    return SL_OK;
}

/* ---- one request, tried until it succeeds or the budget is spent ----------- */

typedef struct xfer {
    CURL *h;
    const char *name;    /* for messages */
    int head;
    uint64_t off, len;   /* the range wanted; len UINT64_MAX: to the end */
    uint64_t got;        /* bytes delivered so far (over all tries) */
    uint8_t **grow;      /* sink: a growing sl__malloc buffer (len UINT64_MAX)... */
    size_t grow_cap;
    uint8_t *dst;        /* ...or memory... */
    int fd;              /* ...or a file (pwrite at got), when dst is NULL */
    XXH3_state_t *hash;  /* hashes the delivered bytes in order, or NULL */
    /* this try */
    long status;
    int seen_status;
    uint64_t skip;       /* bytes to drop (the server ignored the range) */
    uint64_t want_first, want_last; /* this try's range (want_last UINT64_MAX: to
                                       the end); a 206 must answer exactly it */
    int64_t cr_first, cr_last; /* the answer's Content-Range, or -1 */
    int range_bad;       /* a 206 for another range: stopped, range_why says */
    int range_ignored;   /* a range was asked and the answer was a 200 (the
                            whole object, of which the range was kept) */
    char range_why[256];
    int overflow;        /* more bytes came than asked for: stopped */
    int sink_failed;
    int eff_dir;         /* HEAD: the URL (after redirects) ends in '/' */
    long retry_after_s;  /* from Retry-After, or -1 */
    /* from the response */
    int64_t total;       /* object size (Content-Range's total or Content-Length), -1 */
    char etag[128];
    char last_mod[64];
    char encoding[64];   /* the answer's Content-Encoding, or "" */
    int encoded;         /* a 200/206 whose body is encoded (gzip...): stopped */
    /* the version this request reads (the one its object was opened at:
     * ETag and Last-Modified, "" when not known): an answer for another is
     * stopped before a byte of it is taken */
    char want_etag[128];
    char want_lm[64];
    int version_changed;
    int from_memo;       /* head(): the answer came from the memo (SLUICE_CACHE_TTL),
                            not from the server */
    stored_sums *sums;   /* the stored checksums of a whole-object answer, or NULL */
    int whole;           /* off 0, len the object's size: asked without a Range
                            (a 200 and its checksums), a resumed try with one */
    int size_changed;    /* whole: the 200's Content-Length is not len (the
                            object changed since its size was asked): stopped */
    int64_t new_size;
    int in_200;          /* the answer being read is a 200 (headers) */
    uint64_t suffix;     /* ask for the object's last `suffix` bytes (bytes=-N), its
                            size not known yet: the answer places them (off, len,
                            total), and a resumed try asks for the rest by place */
    int clip;            /* the range may run past the object's end: cut to it */
} xfer;

static size_t on_header(char *p, size_t sz, size_t nm, void *u) {
    xfer *x = u;
    size_t n = sz * nm;
    char line[512];
    size_t k = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, p, k);
    line[k] = 0;
    while (k && (line[k - 1] == '\r' || line[k - 1] == '\n'))
        line[--k] = 0;
    if (!strncmp(line, "HTTP/", 5)) { /* a new response (after a redirect too) */
        x->retry_after_s = -1;
        x->etag[0] = x->last_mod[0] = x->encoding[0] = 0;
        x->cr_first = x->cr_last = -1;
        const char *sp = strchr(line, ' ');
        x->in_200 = sp && atoi(sp + 1) == 200;
        return n;
    }
    /* the checksums of the first whole answer are kept: a body resumed by
     * a range request (206) is checked against the object's */
    if (x->sums && x->in_200 && !x->head)
        sum_header(x->sums, line);
    if (!strncasecmp(line, "retry-after:", 12)) {
        const char *v = line + 12;
        while (*v == ' ')
            v++;
        char *end;
        long s = strtol(v, &end, 10);
        if (end != v && *end == 0 && s >= 0) {
            x->retry_after_s = s;
        } else {
            time_t t = curl_getdate(v, NULL);
            if (t > 0)
                x->retry_after_s = t > time(NULL) ? (long)(t - time(NULL)) : 0;
        }
    } else if (!strncasecmp(line, "content-range:", 14)) {
        const char *slash = strrchr(line, '/');
        if (slash && slash[1] != '*')
            x->total = strtoll(slash + 1, NULL, 10);
        long long a, b;
        if (sscanf(line + 14, " bytes %lld-%lld", &a, &b) == 2 && a >= 0 && b >= a)
            x->cr_first = a, x->cr_last = b;
    } else if (!strncasecmp(line, "etag:", 5)) {
        snprintf(x->etag, sizeof x->etag, "%s", line + 5 + strspn(line + 5, " "));
    } else if (!strncasecmp(line, "last-modified:", 14)) {
        snprintf(x->last_mod, sizeof x->last_mod, "%s", line + 14 + strspn(line + 14, " "));
    } else if (!strncasecmp(line, "content-encoding:", 17)) {
        snprintf(x->encoding, sizeof x->encoding, "%s", line + 17 + strspn(line + 17, " "));
    }
    return n;
}

/* Two ETags name the same bytes (a weak "W/" mark ignored: a server that
 * weakens its ETag for a compressed answer still names the same object). */
static int etag_same(const char *a, const char *b) {
    if (!strncmp(a, "W/", 2))
        a += 2;
    if (!strncmp(b, "W/", 2))
        b += 2;
    return !strcmp(a, b);
}

/* Whether the answer's validator is another version than the one asked for
 * (x->want_*): the ETag when both have one, else Last-Modified. An answer
 * that gives neither is taken as it comes. */
static int answer_is_another_version(const xfer *x) {
    if (x->want_etag[0] && x->etag[0])
        return !etag_same(x->want_etag, x->etag);
    if (x->want_lm[0] && x->last_mod[0])
        return strcmp(x->want_lm, x->last_mod) != 0;
    return 0;
}

/* An encoding sluice did not ask for (it sends no Accept-Encoding): the
 * bytes are not the object's as stored. */
static int answer_encoded(const xfer *x) {
    return x->encoding[0] && strcasecmp(x->encoding, "identity") != 0;
}

/* Whether a 206's Content-Range is the range this try asked for: the same
 * first byte, and the last byte asked (or the object's last, when the range
 * runs to its end or past it). Else range_why says what came and what was
 * asked, and the transfer is stopped before a byte is taken. */
static int range_matches(xfer *x) {
    uint64_t last = x->want_last;
    if (x->total > 0 && (last == UINT64_MAX || last > (uint64_t)x->total - 1))
        last = (uint64_t)x->total - 1;
    if (x->cr_first >= 0 && (uint64_t)x->cr_first == x->want_first &&
        (last == UINT64_MAX || (uint64_t)x->cr_last == last))
        return 1;
    char asked[64], came[96];
    if (x->want_last == UINT64_MAX)
        snprintf(asked, sizeof asked, "bytes %llu-", (unsigned long long)x->want_first);
    else
        snprintf(asked, sizeof asked, "bytes %llu-%llu", (unsigned long long)x->want_first,
                 (unsigned long long)x->want_last);
    if (x->cr_first < 0)
        snprintf(came, sizeof came, "no Content-Range");
    else
        snprintf(came, sizeof came, "Content-Range bytes %lld-%lld/%lld", (long long)x->cr_first,
                 (long long)x->cr_last, (long long)x->total);
    snprintf(x->range_why, sizeof x->range_why, "HTTP 206 with %s for the range asked (%s)",
             came, asked);
    x->range_bad = 1;
    return 0;
}

/* The object's size from a 200's Content-Length (a server ignoring Range),
 * or from a 206's Content-Range; -1 when the answer gives none. */
static int64_t answer_total(xfer *x) {
    if (x->status != 200)
        return x->total;
    curl_off_t cl = -1;
    curl_easy_getinfo(x->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
    return cl;
}

/* The first answer to a suffix range (bytes=-N): where its bytes lie. A 206
 * must carry exactly the object's last min(N, size) bytes; a 200 is the whole
 * object, of which those bytes are kept. 0 (range_why set) when the answer
 * cannot be placed. */
static int suffix_place(xfer *x) {
    int64_t total = answer_total(x);
    uint64_t first = 0;
    if (total >= 0)
        first = (uint64_t)total > x->suffix ? (uint64_t)total - x->suffix : 0;
    if (total < 0 || (x->status == 206 && ((uint64_t)x->cr_first != first ||
                                           (uint64_t)x->cr_last != (uint64_t)total - 1))) {
        /* say what the answer had, not placeholders for what it lacked */
        char came[96];
        if (x->status == 200)
            snprintf(came, sizeof came, "no Content-Length (its size cannot be known)");
        else if (x->cr_first < 0)
            snprintf(came, sizeof came, "no Content-Range");
        else if (x->total < 0)
            snprintf(came, sizeof came, "Content-Range bytes %lld-%lld/* (no size)",
                     (long long)x->cr_first, (long long)x->cr_last);
        else
            snprintf(came, sizeof came, "Content-Range bytes %lld-%lld/%lld",
                     (long long)x->cr_first, (long long)x->cr_last, (long long)x->total);
        snprintf(x->range_why, sizeof x->range_why, "HTTP %ld with %s for the last %llu bytes "
                 "asked (bytes=-%llu)", x->status, came, (unsigned long long)x->suffix,
                 (unsigned long long)x->suffix);
        x->range_bad = 1;
        return 0;
    }
    x->total = total;
    x->off = first;
    x->len = (uint64_t)total - first;
    x->want_first = first;
    x->want_last = (uint64_t)total - 1;
    x->suffix = 0;
    return 1;
}

/* A range that may run past the end (x->clip): cut to the object's size. */
static void clip_to_end(xfer *x) {
    int64_t total = answer_total(x);
    if (total >= 0 && x->off + x->len > (uint64_t)total)
        x->len = (uint64_t)total > x->off ? (uint64_t)total - x->off : 0;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *u) {
    xfer *x = u;
    size_t n = sz * nm, k = 0;
    if (!x->seen_status) {
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
        x->seen_status = 1;
        /* bytes of another version, or encoded, are not the object's as
         * opened: nothing is taken, and the request ends (req_end says why) */
        if ((x->status == 200 || x->status == 206) && answer_encoded(x)) {
            x->encoded = 1;
            return 0;
        }
        if ((x->status == 200 || x->status == 206) && answer_is_another_version(x)) {
            x->version_changed = 1;
            return 0;
        }
        if (x->suffix && (x->status == 200 || x->status == 206) && !suffix_place(x))
            return 0; /* nothing taken; perform retries */
        if (x->clip && (x->status == 200 || x->status == 206))
            clip_to_end(x);
        /* 200 to a range request (a server ignoring Range): the whole
         * object; drop the bytes before the range (and stop after it). */
        if (x->status == 200)
            x->skip = x->off + x->got;
        if (x->status == 200 && x->whole) {
            curl_off_t cl = -1;
            curl_easy_getinfo(x->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
            if (cl >= 0 && (uint64_t)cl != x->len) {
                x->size_changed = 1;
                x->new_size = cl;
                return 0;
            }
        }
        if (x->status == 206 && !range_matches(x))
            return 0; /* nothing taken from another range; perform retries */
    }
    if (x->status != 200 && x->status != 206)
        return n; /* an error page: not data */
    if (x->skip) {
        size_t d = x->skip < n ? (size_t)x->skip : n;
        x->skip -= d;
        k = d;
    }
    size_t rest = n - k;
    uint64_t room = x->len - x->got;
    if (rest > room) {
        rest = (size_t)room;
        x->overflow = 1;
    }
    if (rest) {
        if (x->grow) {
            if (x->got + rest > x->grow_cap) {
                size_t c = x->grow_cap ? x->grow_cap * 2 : 65536;
                while (c < x->got + rest)
                    c *= 2;
                uint8_t *g = c <= ((size_t)64 << 20) ? sl__realloc(*x->grow, c) : NULL;
                if (!g) {
                    x->sink_failed = ENOMEM;
                    return 0;
                }
                *x->grow = g;
                x->grow_cap = c;
            }
            memcpy(*x->grow + x->got, p + k, rest);
        } else if (x->dst) {
            memcpy(x->dst + x->got, p + k, rest);
        } else {
            size_t done = 0;
            while (done < rest) {
                ssize_t w = pwrite(x->fd, p + k + done, rest - done, (off_t)(x->got + done));
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0) {
                    x->sink_failed = errno ? errno : EIO;
                    return 0;
                }
                done += (size_t)w;
            }
        }
        if (x->hash)
            XXH3_64bits_update(x->hash, p + k, rest);
        x->got += rest;
    }
    return x->overflow ? 0 : n;
}

typedef struct hdr_ctx {
    struct curl_slist *list;
} hdr_ctx;

static int add_header(void *u, const char *line) {
    hdr_ctx *c = u;
    struct curl_slist *l = curl_slist_append(c->list, line);
    if (!l)
        return sl__oom("adding a request header");
    c->list = l;
    return SL_OK;
}

/* Headers for an s3:// request: its signature, when credentials are set
 * (sigv4.c through s3.c; unsigned for public buckets). */
static int sign(const char *name, const char *url, int head, const char *range, hdr_ctx *hc) {
    if (strncmp(name, "s3://", 5) != 0)
        return SL_OK;
    SL_TRY(s3_config());
    /* the stored checksums come with a whole object (a range has none) */
    return sl_s3__sign(&s3cfg, head ? "HEAD" : "GET", url, range, (int64_t)time(NULL),
                       range ? 0 : SL_S3_CHECKSUM_MODE, add_header, hc);
}

static int retryable_curl(CURLcode cc) {
    switch (cc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_BAD_CONTENT_ENCODING:
        return 1;
    default:
        return 0;
    }
}

static const char *status_words(long st) {
    switch (st) {
    case 400: return " (bad request)";
    case 401: return " (unauthorized: check the credentials)";
    case 403: return " (forbidden: check the credentials or permissions)";
    case 404: return " (not found)";
    case 416: return " (range not satisfiable: the object changed while read?)";
    case 429: return " (too many requests)";
    case 500: return " (internal server error)";
    case 502: return " (bad gateway)";
    case 503: return " (service unavailable)";
    case 504: return " (gateway timeout)";
    default: return "";
    }
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A jittered wait before try `t` + 1 (t >= 1): uniform in [d/2, d] with
 * d = backoff * 2^(t-1), capped; the server's Retry-After when longer. */
static long backoff_ms(int t, long retry_after_s) {
    uint64_t d = (uint64_t)cfg.backoff_ms << (t - 1 < 20 ? t - 1 : 20);
    if (d > (uint64_t)cfg.backoff_max_ms)
        d = (uint64_t)cfg.backoff_max_ms;
    static _Thread_local uint64_t seed;
    if (!seed)
        seed = sl__now_ns() ^ (uint64_t)(uintptr_t)&seed;
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    uint64_t w = d / 2 + (d ? seed % (d / 2 + 1) : 0);
    if (retry_after_s >= 0) {
        uint64_t ra = (uint64_t)(retry_after_s > 60 ? 60 : retry_after_s) * 1000;
        if (ra > w)
            w = ra;
    }
    return (long)w;
}

/* One request with its retries, in steps: req_start sets up try r->t on
 * x->h, the transfer runs (curl_easy_perform, or a multi handle driving
 * several), and req_end says what its ending means. */
typedef struct req {
    xfer *x;
    const char *url;
    int quiet_404;
    long *status_out;
    int t; /* the try set up or run; 0 after bytes arrived (a fresh budget) */
    int rc;
    long wait_ms; /* before the next try, when req_end says there is one */
    uint64_t before;
    const char *rg;
    hdr_ctx hc;
    long last_status;
    CURLcode last_cc;
    char err[CURL_ERROR_SIZE];
    char range[64];
    char last_err[CURL_ERROR_SIZE];
} req;

static void req_init(req *r, xfer *x, const char *url, int quiet_404, long *status_out) {
    memset(r, 0, sizeof *r);
    r->x = x;
    r->url = url;
    r->quiet_404 = quiet_404;
    r->status_out = status_out;
    r->t = 1;
    r->last_cc = CURLE_OK;
    *status_out = 0;
}

/* Sets up the next try on x->h: SL_OK, or an error (the request is over). */
static int req_start(req *r) {
    xfer *x = r->x;
    r->before = x->got;
    x->status = 0;
    x->seen_status = 0;
    x->skip = 0;
    x->overflow = 0;
    x->sink_failed = 0;
    x->retry_after_s = -1;
    x->total = -1;
    x->cr_first = x->cr_last = -1;
    x->range_bad = 0;
    x->range_why[0] = 0;
    x->encoded = 0;
    x->version_changed = 0;
    r->err[0] = 0;
    CURL *h = x->h;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, r->url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, cfg.connect_timeout_s);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, cfg.stall_s);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->err);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "sluice");
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_FILETIME, 1L);
    if (share)
        curl_easy_setopt(h, CURLOPT_SHARE, share);
    if (cfg.ca[0])
        curl_easy_setopt(h, CURLOPT_CAINFO, cfg.ca);
    r->rg = NULL;
    if (x->head) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (x->suffix) {
        snprintf(r->range, sizeof r->range, "-%llu", (unsigned long long)x->suffix);
        curl_easy_setopt(h, CURLOPT_RANGE, r->range);
        r->rg = r->range;
    } else {
        uint64_t a = x->off + x->got;
        if (x->len == UINT64_MAX)
            snprintf(r->range, sizeof r->range, "%llu-", (unsigned long long)a);
        else
            snprintf(r->range, sizeof r->range, "%llu-%llu", (unsigned long long)a,
                     (unsigned long long)(x->off + x->len - 1));
        if (a > 0 || (x->len != UINT64_MAX && !x->whole)) {
            curl_easy_setopt(h, CURLOPT_RANGE, r->range);
            r->rg = r->range;
        }
        x->want_first = a;
        x->want_last = x->len == UINT64_MAX ? UINT64_MAX : x->off + x->len - 1;
    }
    r->hc.list = NULL;
    char rh[80];
    if (r->rg)
        snprintf(rh, sizeof rh, "bytes=%s", r->rg);
    int rc = sign(x->name, r->url, x->head, r->rg ? rh : NULL, &r->hc);
    if (rc < 0) {
        curl_slist_free_all(r->hc.list);
        r->hc.list = NULL;
        return rc;
    }
    if (r->hc.list)
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, r->hc.list);
    if (!strncmp(x->name, "s3://", 5)) /* keys may hold "//", "./", "../": as signed */
        curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    return SL_OK;
}

/* What the ending `cc` of the try on x->h means: 1 when the request is over
 * (r->rc: SL_OK, SL_END for a quiet 404, or an error; the status code of a
 * final non-retryable answer in *r->status_out), 0 when it is tried again
 * after r->wait_ms. */
static int req_end(req *r, CURLcode cc) {
    xfer *x = r->x;
    CURL *h = x->h;
    curl_slist_free_all(r->hc.list);
    r->hc.list = NULL;
    long st = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    x->status = st;
    if (r->rg && st == 200 && cc == CURLE_OK)
        x->range_ignored = 1;
    if (x->head && cc == CURLE_OK) {
        char *eu = NULL;
        curl_easy_getinfo(h, CURLINFO_EFFECTIVE_URL, &eu);
        if (eu && *eu && eu[strlen(eu) - 1] == '/' && (st < 500 && st != 429 && st != 408)) {
            x->eff_dir = 1; /* a directory: whatever it says about a listing */
            *r->status_out = st;
            r->rc = SL_OK;
            return 1;
        }
    }
    if (x->encoded) {
        r->rc = sl__error(SL_EIO, "%s: the server sent it encoded (Content-Encoding: %s), which "
                          "sluice did not ask for: it reads objects byte for byte as stored; "
                          "serve these files without compression (nginx: gzip off for them)",
                          x->name, x->encoding);
        return 1;
    }
    if (x->version_changed) {
        int by_etag = x->want_etag[0] && x->etag[0];
        r->rc = sl__error(SL_EIO, "%s: replaced on the server while it was read (%s %s when it "
                          "was opened, %s now)", x->name, by_etag ? "ETag" : "Last-Modified",
                          by_etag ? x->want_etag : x->want_lm, by_etag ? x->etag : x->last_mod);
        return 1;
    }
    if (x->size_changed) {
        r->rc = sl__error(SL_EIO, "%s: its size changed on the server (%lld bytes, %llu when it "
                          "was asked)", x->name, (long long)x->new_size,
                          (unsigned long long)x->len);
        return 1;
    }
    if (x->sink_failed) {
        r->rc = sl__error(SL_EIO, "%s: writing the fetched bytes failed: %s", x->name,
                          strerror(x->sink_failed));
        return 1;
    }
    curl_off_t cl0 = -1;
    if (st == 200)
        curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl0);
    if ((x->suffix || x->clip) && cc == CURLE_OK && !x->got &&
        ((st == 416 && x->total == 0) || (st == 200 && cl0 == 0))) {
        /* a range of an empty object: nothing to take, and its size */
        x->suffix = 0;
        x->off = 0;
        x->len = 0;
        st = 206;
    }
    int ok_status = st == 200 || st == 206;
    if (cc == CURLE_WRITE_ERROR && x->overflow)
        cc = CURLE_OK; /* we stopped it: all we asked for arrived */
    if (x->range_bad) {
        /* Bytes of another range: none were taken. A proxy or server
         * that answered wrongly once may answer rightly next time, so
         * it is tried again like a broken transfer. */
        cc = CURLE_PARTIAL_FILE;
        snprintf(r->err, sizeof r->err, "%s", x->range_why);
    }
    if (cc == CURLE_OK && ok_status) {
        if (x->head || x->len == UINT64_MAX || x->got == x->len) {
            *r->status_out = st;
            if (x->head && x->total < 0) {
                curl_off_t cl = -1;
                curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
                x->total = cl;
            }
            r->rc = SL_OK;
            return 1;
        }
        cc = CURLE_PARTIAL_FILE; /* a short body with a clean end: try again */
        snprintf(r->err, sizeof r->err, "the body ended after %llu of %llu bytes",
                 (unsigned long long)x->got, (unsigned long long)x->len);
    }
    int retry;
    if (cc != CURLE_OK) {
        retry = retryable_curl(cc);
        r->last_cc = cc;
        snprintf(r->last_err, sizeof r->last_err, "%s", r->err[0] ? r->err : curl_easy_strerror(cc));
        r->last_status = 0;
    } else {
        retry = st >= 500 || st == 429 || st == 408;
        r->last_status = st;
        r->last_cc = CURLE_OK;
    }
    if (!retry) {
        *r->status_out = st;
        if (cc == CURLE_OK && st == 404 && r->quiet_404) {
            r->rc = SL_END;
        } else if (cc == CURLE_OK) {
            r->rc = sl__error(SL_EIO, "%s: HTTP %ld%s", x->name, st, status_words(st));
        } else {
            r->rc = sl__error(SL_EIO, "%s: %s (curl error %d)", x->name, r->last_err, (int)cc);
        }
        return 1;
    }
    if (x->got > r->before)
        r->t = 0; /* bytes arrived: resume from there on a fresh budget */
    if (r->t >= cfg.tries) {
        if (x->range_bad)
            r->rc = sl__error(SL_EIO, "%s: %s after %d tries", x->name, r->last_err, r->t);
        else if (r->last_cc != CURLE_OK)
            r->rc = sl__error(SL_EIO, "%s: %s (curl error %d) after %d tries", x->name,
                              r->last_err, (int)r->last_cc, r->t);
        else
            r->rc = sl__error(SL_EIO, "%s: HTTP %ld%s after %d tries", x->name, r->last_status,
                              status_words(r->last_status), r->t);
        return 1;
    }
    r->wait_ms = backoff_ms(r->t ? r->t : 1, x->retry_after_s);
    SL_LOG_DEBUG("%s: %s; trying again in %ld ms", x->name,
                 r->last_cc != CURLE_OK ? r->last_err : "server error", r->wait_ms);
    r->t++;
    return 0;
}

/* Run the request `x` describes against `url`, with retries. The status code
 * of a final non-retryable answer is returned in *status_out (0 when none);
 * `quiet_404` makes a 404 return SL_END without a message. */
/* Every try of r on this thread (curl_easy_perform), waiting out each backoff. */
static void req_run(req *r) {
    for (;;) {
        r->rc = req_start(r);
        if (r->rc < 0 || req_end(r, curl_easy_perform(r->x->h)))
            break;
        sleep_ms(r->wait_ms);
    }
}

static int perform(xfer *x, const char *url, int quiet_404, long *status_out) {
    req r;
    req_init(&r, x, url, quiet_404, status_out);
    x->h = handle_get();
    if (!x->h)
        return sl__oom("starting a request");
    req_run(&r);
    handle_put(x->h);
    x->h = NULL;
    return r.rc;
}

/* A request run by an event loop (perform_many, the read-ahead loop): its
 * tries as perform()'s, each started when due, several requests at once on
 * one multi handle. */
enum { MREQ_OVER, MREQ_WAITING, MREQ_RUNNING };
typedef struct mreq {
    req r;         /* r.x->h: the handle its tries run on */
    int state;     /* MREQ_WAITING: its next try starts at `wake` */
    uint64_t wake; /* sl__now_ns() time */
} mreq;

/* One turn of the event loop m over q[0..n): starts the tries that are due,
 * lets curl move every transfer, and ends the tries that finished. A
 * request that is over (q[i].r.rc says how) becomes MREQ_OVER and
 * over(i, user) is called; one to be tried again waits out its backoff
 * while the others run. Returns how long the caller may poll m before the
 * next turn (ms): 0 when something ended. */
static long mreq_turn(CURLM *m, mreq *q, int n, void (*over)(int i, void *user), void *user) {
    uint64_t now = sl__now_ns();
    long timeout_ms = 1000;
    for (int i = 0; i < n; i++) {
        mreq *t = &q[i];
        if (t->state == MREQ_WAITING && t->wake <= now) {
            int rc = req_start(&t->r);
            if (rc == SL_OK && curl_multi_add_handle(m, t->r.x->h) != CURLM_OK) {
                curl_slist_free_all(t->r.hc.list);
                t->r.hc.list = NULL;
                rc = sl__error(SL_EIO, "%s: cannot start its request (curl multi)", t->r.x->name);
            }
            if (rc < 0) {
                t->r.rc = rc;
                t->state = MREQ_OVER;
                over(i, user);
                timeout_ms = 0;
                continue;
            }
            t->state = MREQ_RUNNING;
        }
        if (t->state == MREQ_WAITING) {
            long ms = (long)((t->wake - now) / 1000000) + 1;
            if (ms < timeout_ms)
                timeout_ms = ms;
        }
    }
    int still;
    curl_multi_perform(m, &still);
    CURLMsg *cm;
    int queued;
    while ((cm = curl_multi_info_read(m, &queued))) {
        if (cm->msg != CURLMSG_DONE)
            continue;
        int i = 0;
        while (i < n && (q[i].state != MREQ_RUNNING || q[i].r.x->h != cm->easy_handle))
            i++;
        if (i == n)
            continue;
        CURLcode cc = cm->data.result; /* cm is freed by the removal */
        curl_multi_remove_handle(m, q[i].r.x->h);
        if (req_end(&q[i].r, cc)) {
            q[i].state = MREQ_OVER;
            over(i, user);
        } else {
            q[i].state = MREQ_WAITING;
            q[i].wake = sl__now_ns() + (uint64_t)q[i].r.wait_ms * 1000000;
        }
        timeout_ms = 0;
    }
    return timeout_ms;
}

static int mkdirs(const char *dir);
static int cache_create(const char *path, int oflags);

/* ---- what a HEAD said, remembered (SLUICE_CACHE_TTL) ------------------------------
 *
 * A HEAD's answer for a URL (size, ETag, Last-Modified, directory or not) is
 * kept in CACHE_DIR/.meta/KEY, a small text file whose mtime is the time of
 * the answer. Within SLUICE_CACHE_TTL seconds of it, any process of the node
 * takes the answer from there instead of asking again: with the shards (and
 * their .slidx files) in the shard cache, a warm run sends no request at all;
 * after the TTL each object is asked about once more (one HEAD), and a
 * changed ETag or size names a new cache entry, so changed bytes are fetched.
 * A 404 is not remembered (an index written later is found at once). The
 * file is written under a temporary name and renamed, so readers see a whole
 * answer or none; one that does not parse is ignored. */

static int memo_path(const char *url, char *buf, size_t cap, int dir_only) {
    if (!cfg.cache_dir[0] || !cfg.ttl_s || !cache_budget())
        return 0;
    int k = dir_only ? snprintf(buf, cap, "%s/.meta", cfg.cache_dir)
                     : snprintf(buf, cap, "%s/.meta/%016llx", cfg.cache_dir,
                                (unsigned long long)XXH3_64bits(url, strlen(url)));
    return k > 0 && (size_t)k < cap;
}

/* The answer remembered for `url` within the TTL into x (total, etag,
 * last_mod, eff_dir): 1, or 0 (ask). */
static int memo_get(const char *url, xfer *x) {
    char path[URL_MAX + 64];
    if (!memo_path(url, path, sizeof path, 0))
        return 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    struct stat st;
    int ok = 0;
    char line[URL_MAX + 8], etag[sizeof x->etag + 2], lm[sizeof x->last_mod + 2];
    long long total;
    int dir;
    time_t now = time(NULL);
    if (fstat(fileno(f), &st) == 0 && st.st_mtime <= now && now - st.st_mtime < cfg.ttl_s &&
        fgets(line, sizeof line, f) && sscanf(line, "SLMEMO1 %d %lld", &dir, &total) == 2 &&
        fgets(etag, sizeof etag, f) && fgets(lm, sizeof lm, f) &&
        fgets(line, sizeof line, f)) {
        etag[strcspn(etag, "\n")] = 0;
        lm[strcspn(lm, "\n")] = 0;
        line[strcspn(line, "\n")] = 0;
        if (!strcmp(line, url)) { /* not another URL with the same key */
            x->from_memo = 1;
            x->total = total;
            x->eff_dir = dir != 0;
            etag[sizeof x->etag - 1] = 0;
            lm[sizeof x->last_mod - 1] = 0;
            memcpy(x->etag, etag, strlen(etag) + 1);
            memcpy(x->last_mod, lm, strlen(lm) + 1);
            ok = 1;
        }
    }
    fclose(f);
    return ok;
}

static void memo_put(const char *url, const xfer *x) {
    char dir[URL_MAX + 64], path[URL_MAX + 64], tmp[URL_MAX + 128];
    if (!memo_path(url, dir, sizeof dir, 1) || !memo_path(url, path, sizeof path, 0))
        return;
    if (mkdirs(dir) != 0)
        return;
    static _Thread_local unsigned seq;
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld-%u", path, (long)getpid(), ++seq);
    int fd = cache_create(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        unlink(tmp);
        return;
    }
    int bad = fprintf(f, "SLMEMO1 %d %lld\n%s\n%s\n%s\n", x->eff_dir, (long long)x->total,
                      x->etag, x->last_mod, url) < 0;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0)
        unlink(tmp);
}

/* HEADs in flight in this process, by URL hash (under head_mu): a thread
 * that finds its URL here waits for that answer (remembered by memo_put)
 * instead of asking the same question at the same time, as when a shard's
 * schema open and its opener thread's open meet after the TTL ran out. At
 * most HEAD_FLIGHTS at once are tracked; past that a HEAD goes alone. */
#define HEAD_FLIGHTS 64
static pthread_mutex_t head_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t head_cv = PTHREAD_COND_INITIALIZER;
static uint64_t head_flight[HEAD_FLIGHTS];
static int nhead_flight;

/* 1 if this thread now owns the HEAD of `key` (remove it with head_land),
 * 0 if another thread's HEAD of it ended meanwhile (ask the memo again),
 * -1 if the table is full (ask without owning). */
static int head_take_off(uint64_t key) {
    pthread_mutex_lock(&head_mu);
    int waited = 0;
    for (;;) {
        int i = 0;
        while (i < nhead_flight && head_flight[i] != key)
            i++;
        if (i == nhead_flight)
            break;
        waited = 1;
        pthread_cond_wait(&head_cv, &head_mu);
    }
    int r = waited ? 0 : nhead_flight < HEAD_FLIGHTS ? 1 : -1;
    if (r == 1)
        head_flight[nhead_flight++] = key;
    pthread_mutex_unlock(&head_mu);
    return r;
}

static void head_land(uint64_t key) {
    pthread_mutex_lock(&head_mu);
    for (int i = 0; i < nhead_flight; i++)
        if (head_flight[i] == key) {
            head_flight[i] = head_flight[--nhead_flight];
            break;
        }
    pthread_cond_broadcast(&head_cv);
    pthread_mutex_unlock(&head_mu);
}

/* HEAD `name`: size and validator (or what was said within the TTL). SL_END
 * (quiet) on 404 when quiet_404. */
static int head(const char *name, const char *url, int quiet_404, xfer *x, int *is_dir) {
    memset(x, 0, sizeof *x);
    x->name = name;
    x->head = 1;
    x->fd = -1;
    long st;
    *is_dir = 0;
    char mp[URL_MAX + 64];
    int memo = memo_path(url, mp, sizeof mp, 0);
    const uint64_t key = XXH3_64bits(url, strlen(url));
    int owner = 0;
    for (;;) {
        if (memo_get(url, x)) {
            *is_dir = x->eff_dir;
            return SL_OK;
        }
        if (!memo || (owner = head_take_off(key)) != 0)
            break;
        /* another thread's HEAD of it ended: its answer is in the memo (or,
         * for a 404 or an error, not: then ask, owning the question) */
    }
    int rc = perform(x, url, quiet_404, &st);
    if (rc == SL_OK && (x->eff_dir || x->total >= 0))
        memo_put(url, x);
    if (owner == 1)
        head_land(key);
    if (rc != SL_OK)
        return rc; /* an error, or SL_END for a quiet 404 */
    *is_dir = x->eff_dir;
    return SL_OK;
}

/* ---- the provider --------------------------------------------------------------- */

typedef struct http_io {
    sl_io base;
    char url[URL_MAX];
    uint8_t *heap;      /* the object in memory (no disk cache), or NULL */
    size_t mapped_len;  /* bytes of the mapped cache file (object + trailer) */
    char *cache_path;   /* that file's path in the cache (sl__malloc), or NULL */
    const uint8_t *cached; /* opened for ranges, but whole in the cache: that
                              entry mapped (mapped_len bytes), reads copy from it */
    /* read by ranges, ahead (below): under ra_mu */
    struct extent *ext; /* extents hinted, queued, fetching or fetched */
    int inflight;       /* extents of this object being fetched */
    struct http_io *ra_next, **ra_prev; /* in ra_objs while it has extents */
    /* A server that ignores Range answers every range request with the whole
     * object: after the first such answer the object is fetched whole, once,
     * into `whole` (stored with release, read with an acquire load), and
     * reads copy from it, instead of one whole-object transfer per read.
     * whole_state: 0 not asked, 1 being fetched (by the thread that set it;
     * others read on by ranges meanwhile: no lock, so a fork cannot leave
     * one held), 2 done or given up. */
    atomic_int whole_state;
    uint8_t *whole;
    int size_changed;   /* a whole fetch found another size or version than the
                           HEAD's (or the memo's): asked about again */
    char etag[128];     /* the version opened (its answers must be of it) */
    char last_mod[64];
    int unconfirmed;    /* that version came from the memo (trusted within the TTL,
                           not asked) and no reader asked for it: range answers
                           are not held to it (a whole fetch of another version
                           still asks again, once) */
    /* SL_IO_EDGES: the object's first and last bytes, fetched with the open
     * (reads inside them are copies), or NULL */
    uint8_t *edge_head, *edge_tail;
    uint64_t edge_head_len, edge_tail_off, edge_tail_len;
} http_io;

/* A request of h's bytes reads the version h was opened at. */
static void want_version(xfer *x, const http_io *h) {
    if (h->unconfirmed)
        return;
    memcpy(x->want_etag, h->etag, sizeof x->want_etag);
    memcpy(x->want_lm, h->last_mod, sizeof x->want_lm);
}

/* h's version string (io.h: "SIZE\nETAG\nLAST-MODIFIED") from what opened it. */
static void set_version(http_io *h, const char *etag, const char *last_mod) {
    snprintf(h->etag, sizeof h->etag, "%s", etag);
    snprintf(h->last_mod, sizeof h->last_mod, "%s", last_mod);
    snprintf(h->base.version, sizeof h->base.version, "%llu\n%s\n%s",
             (unsigned long long)h->base.size, h->etag, h->last_mod);
}

/* Bytes [off, off + n) from the edges fetched at open: 1 when copied. */
static int edges_read(const http_io *h, void *dst, size_t n, uint64_t off) {
    if (h->edge_head && off + n <= h->edge_head_len) {
        memcpy(dst, h->edge_head + off, n);
        return 1;
    }
    if (h->edge_tail && off >= h->edge_tail_off &&
        off + n <= h->edge_tail_off + h->edge_tail_len) {
        memcpy(dst, h->edge_tail + (off - h->edge_tail_off), n);
        return 1;
    }
    return 0;
}

/* ---- read-ahead for objects read by ranges ---------------------------------------
 *
 * sl_io__will_need(off, n) queues the range as an extent; a hint that starts
 * within RA_GAP bytes of a queued extent's end joins it (one request for
 * neighbours, up to RA_EXTENT_MAX). One process-wide event loop (ra_loop,
 * started on first use) takes extents in hint order and fetches each with one
 * range request, up to SLUICE_HTTP_READAHEAD (default 64) at once (the
 * retries of perform). A read inside an extent waits for it and copies from it; an
 * extent is freed once the bytes hinted into it have been read, and hints
 * are dropped while RA_BYTES_MAX bytes are held. A read nobody hinted, or
 * whose extent failed, is a plain range request (whose error is the one
 * reported). One mutex (ra_mu) guards every extent, queue and count. After
 * fork() the child has no loop: it marks extents being fetched failed and
 * starts its own loop on its first hint. */

#define RA_GAP ((uint64_t)64 << 10)
#define RA_EXTENT_MAX ((uint64_t)4 << 20)
#define RA_BYTES_MAX ((uint64_t)256 << 20)

enum { EXT_QUEUED, EXT_FETCHING, EXT_READY, EXT_FAILED };

typedef struct extent {
    struct extent *next;  /* in its object's list */
    struct extent *qnext; /* in the queue (EXT_QUEUED) */
    http_io *io;
    uint64_t off, len;
    uint8_t *data;
    int state;
    int64_t need;         /* hinted bytes not read yet */
} extent;

static pthread_mutex_t ra_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ra_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t ra_done = PTHREAD_COND_INITIALIZER;
static extent *ra_head, *ra_tail;
static http_io *ra_objs; /* objects with extents (for fork) */
static uint64_t ra_bytes;

static void ra_unlink(http_io *h, extent *e) { /* under ra_mu; e not queued */
    for (extent **pp = &h->ext; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    ra_bytes -= e->len;
    sl__free(e->data);
    sl__free(e);
    if (!h->ext && h->ra_prev) {
        *h->ra_prev = h->ra_next;
        if (h->ra_next)
            h->ra_next->ra_prev = h->ra_prev;
        h->ra_prev = NULL;
        h->ra_next = NULL;
    }
}

/* GET bytes [off, off + n) of the object into dst; *got: how many came. */
static void become_whole(http_io *h);

static int get_range(http_io *h, uint8_t *dst, uint64_t off, uint64_t n, uint64_t *got) {
    xfer x;
    memset(&x, 0, sizeof x);
    x.name = h->base.name;
    x.off = off;
    x.len = n;
    x.dst = dst;
    x.fd = -1;
    want_version(&x, h);
    long st;
    int rc = perform(&x, h->url, 0, &st);
    *got = x.got;
    if (rc == SL_OK && x.range_ignored)
        become_whole(h);
    return rc;
}

/* Objects this large stay read by ranges even from a server that ignores
 * them (held whole, they could exhaust memory): slow, and said so. */
#define WHOLE_MAX ((uint64_t)4 << 30)

/* The server answered a range request with the whole object: fetch it whole
 * once (the bytes checked against any checksum the answer gives) and serve
 * every later read from memory. Said once per process, with what to do. A
 * failure leaves the object read by ranges (each read then fails or
 * succeeds on its own). */
/* Said once per process. */
static void say_range_ignored(const char *name, int big) {
    static atomic_int said;
    if (!atomic_exchange(&said, 1))
        SL_LOG_WARN("%s: the server ignores Range requests (it answers each with the whole "
                    "object): %s; a server that honours Range, or a shard cache with room "
                    "for the shards (cache_bytes), avoids this", name,
                    big ? "each read transfers the whole object, very slowly"
                        : "fetching each object whole once instead of once per read");
}

static void become_whole(http_io *h) {
    int expect = 0;
    if (!atomic_compare_exchange_strong(&h->whole_state, &expect, 1))
        return;
    int big = h->base.size > WHOLE_MAX || h->base.size > SIZE_MAX / 2;
    say_range_ignored(h->base.name, big);
    uint8_t *b = big ? NULL : sl__malloc((size_t)h->base.size ? (size_t)h->base.size : 1);
    if (b) {
        xfer x;
        memset(&x, 0, sizeof x);
        x.name = h->base.name;
        x.len = h->base.size;
        x.dst = b;
        x.fd = -1;
        x.whole = 1;
        want_version(&x, h);
        stored_sums ss;
        memset(&ss, 0, sizeof ss);
        ss.s3 = !strncmp(h->base.name, "s3://", 5);
        x.sums = &ss;
        long st;
        if (perform(&x, h->url, 0, &st) == SL_OK &&
            sums_check(&ss, b, (size_t)h->base.size, h->base.name) == SL_OK)
            __atomic_store_n(&h->whole, b, __ATOMIC_RELEASE);
        else
            sl__free(b);
    }
    atomic_store(&h->whole_state, 2);
}

/* The read-ahead loop: one thread drives up to cfg.readahead range requests
 * at once from one event loop (a curl multi handle), each with perform()'s
 * retries (req_start/req_end; a request waiting out its backoff leaves the
 * others running). One thread, not a thread per request in flight: on 2
 * cores the 64 fetch threads, each woken for its own request, cost more CPU
 * than the loop (bench/README.md, "Read-ahead from one event loop").
 * A hint wakes it by ra_work when it sleeps with nothing to do, and by
 * curl_multi_wakeup while it polls (ra_polling). It lives as long as the
 * process; a forked child starts its own on its first hint (core/worker.h),
 * with a multi handle of its own (the parent's is dropped: its sockets are
 * the parent's). */
static CURLM *ra_multi; /* the loop's (under ra_mu) */
static int ra_polling;  /* the loop is polling, not woken yet (under ra_mu) */

/* The loop's places: q[i] a request (MREQ_OVER when the place is free) and
 * pl[i] what it fetches. Places do not move: curl holds pointers into x and
 * q[i].r while a transfer runs. */
typedef struct ra_place {
    extent *e;     /* NULL: free */
    CURL *h;       /* the place's own handle, kept from one transfer to the next */
    uint8_t *d;
    xfer x;
    long st;
} ra_place;

typedef struct ra_loop_ctx {
    mreq *q;
    ra_place *pl;
} ra_loop_ctx;

/* The transfer of place i is over with rc: its extent gets the bytes, or
 * fails (its reader then asks for itself, and that request says why). */
static void ra_finish(ra_place *t, int rc) {
    extent *e = t->e;
    if (rc == SL_OK && t->x.range_ignored)
        become_whole(e->io);
    if (rc == SL_OK && t->x.got != e->len)
        rc = sl__error(SL_ECORRUPT, "%s: truncated (read past the end at offset %llu)",
                       e->io->base.name, (unsigned long long)(e->off + t->x.got));
    if (rc != SL_OK)
        SL_LOG_DEBUG("read-ahead: %s", sl_errmsg());
    pthread_mutex_lock(&ra_mu);
    if (e->state == EXT_FETCHING) { /* not failed by a fork meanwhile */
        e->data = rc == SL_OK ? t->d : NULL;
        e->state = rc == SL_OK ? EXT_READY : EXT_FAILED;
        if (rc != SL_OK)
            sl__free(t->d);
        e->io->inflight--;
    } else {
        sl__free(t->d);
    }
    pthread_cond_broadcast(&ra_done);
    pthread_mutex_unlock(&ra_mu);
    t->e = NULL;
    t->d = NULL;
}

static void ra_over(int i, void *user) {
    ra_loop_ctx *c = user;
    ra_finish(&c->pl[i], c->q[i].r.rc);
}

/* Queued extents into free places; under ra_mu. Returns how many were taken. */
static int ra_take(ra_place *pl, int cap) {
    int took = 0;
    for (int i = 0; i < cap && ra_head; i++) {
        if (pl[i].e)
            continue;
        extent *e = ra_head;
        ra_head = e->qnext;
        e->state = EXT_FETCHING;
        e->io->inflight++;
        pl[i].e = e;
        pl[i].d = NULL;
        took++;
    }
    if (!ra_head)
        ra_tail = NULL;
    return took;
}

/* A taken extent's request, to start on the next turn (or over at once,
 * when out of memory). */
static void ra_prepare(mreq *q, ra_place *t) {
    extent *e = t->e;
    memset(&t->x, 0, sizeof t->x);
    t->x.name = e->io->base.name;
    t->x.off = e->off;
    t->x.len = e->len;
    t->x.fd = -1;
    want_version(&t->x, e->io);
    req_init(&q->r, &t->x, e->io->url, 0, &t->st);
    q->state = MREQ_WAITING;
    q->wake = 0;
    if (!t->h)
        t->h = curl_easy_init();
    t->d = sl__malloc(e->len ? (size_t)e->len : 1);
    t->x.dst = t->d;
    t->x.h = t->h;
    if (!t->h || !t->d) {
        q->state = MREQ_OVER;
        ra_finish(t, sl__oom("reading ahead"));
    }
}

static void *ra_loop(void *arg) {
    (void)arg;
    int cap = cfg.readahead;
    ra_loop_ctx c = {sl__calloc((size_t)cap, sizeof *c.q), sl__calloc((size_t)cap, sizeof *c.pl)};
    CURLM *m = curl_multi_init();
    pthread_mutex_lock(&ra_mu);
    if (!c.q || !c.pl || !m) {
        /* no loop: what is queued fails as it comes (readers fetch for themselves) */
        SL_LOG_WARN("read-ahead: cannot start its event loop (out of memory); reading "
                    "without read-ahead");
        for (;;) {
            while (!ra_head)
                pthread_cond_wait(&ra_work, &ra_mu);
            for (; ra_head; ra_head = ra_head->qnext)
                ra_head->state = EXT_FAILED;
            ra_tail = NULL;
            pthread_cond_broadcast(&ra_done);
        }
    }
    /* room to keep a connection alive for every place: with curl's default
     * size, connections were closed between bursts and opened again (through
     * a proxy, 435 connections an epoch where the fetch threads made 81) */
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)cap);
    ra_multi = m;
    int busy = 0; /* places in use */
    for (;;) {
        while (!ra_head && !busy)
            pthread_cond_wait(&ra_work, &ra_mu);
        int took = ra_take(c.pl, cap);
        ra_polling = 1;
        pthread_mutex_unlock(&ra_mu);
        for (int i = 0; took && i < cap; i++)
            if (c.pl[i].e && !c.pl[i].d)
                ra_prepare(&c.q[i], &c.pl[i]);
        long ms = mreq_turn(m, c.q, cap, ra_over, &c);
        busy = 0;
        for (int i = 0; i < cap; i++)
            busy += c.pl[i].e != NULL;
        if (ms && busy)
            curl_multi_poll(m, NULL, 0, (int)ms, NULL);
        pthread_mutex_lock(&ra_mu);
        ra_polling = 0;
    }
    return NULL;
}

static void http_will_need(sl_io *io, uint64_t off, size_t n) {
    http_io *h = (http_io *)io;
    if (__atomic_load_n(&h->whole, __ATOMIC_ACQUIRE))
        return; /* in memory already */
    if (off + n > io->size)
        n = (size_t)(io->size - off);
    if (!n || n > RA_EXTENT_MAX)
        return;
    if ((h->edge_head && off + n <= h->edge_head_len) ||
        (h->edge_tail && off >= h->edge_tail_off))
        return; /* in memory since the open */
    pthread_mutex_lock(&ra_mu);
    for (extent *e = h->ext; e; e = e->next) {
        if (off >= e->off && off + n <= e->off + e->len) { /* inside: a gap joined */
            e->need += (int64_t)n;
            goto out;
        }
        if (e->state != EXT_QUEUED || off > e->off + e->len + RA_GAP ||
            off + n + RA_GAP < e->off)
            continue;
        /* a neighbour (on either side) of a range not yet asked for: one
         * request for both */
        uint64_t lo = off < e->off ? off : e->off;
        uint64_t hi = off + n > e->off + e->len ? off + n : e->off + e->len;
        if (hi - lo > RA_EXTENT_MAX || ra_bytes + (hi - lo - e->len) > RA_BYTES_MAX)
            continue;
        ra_bytes += hi - lo - e->len;
        e->off = lo;
        e->len = hi - lo;
        e->need += (int64_t)n;
        goto out;
    }
    if (ra_bytes + n > RA_BYTES_MAX)
        goto out; /* enough in flight: the read will fetch it */
    if (!sl__workers_count(&ra_ws) && sl__workers_start(&ra_ws, ra_loop, NULL) < 0)
        SL_LOG_DEBUG("read-ahead: %s", sl_errmsg());
    if (!sl__workers_count(&ra_ws))
        goto out; /* no loop to fetch it: the read will */
    extent *e = sl__calloc(1, sizeof *e);
    if (!e)
        goto out;
    e->io = h;
    e->off = off;
    e->len = n;
    e->need = (int64_t)n;
    e->state = EXT_QUEUED;
    if (!h->ext) {
        h->ra_next = ra_objs;
        if (ra_objs)
            ra_objs->ra_prev = &h->ra_next;
        h->ra_prev = &ra_objs;
        ra_objs = h;
    }
    e->next = h->ext;
    h->ext = e;
    ra_bytes += n;
    if (ra_tail)
        ra_tail->qnext = e;
    else
        ra_head = e;
    ra_tail = e;
    pthread_cond_signal(&ra_work);
    if (ra_polling && ra_multi) {
        ra_polling = 0; /* one wakeup a poll */
        curl_multi_wakeup(ra_multi);
    }
out:
    pthread_mutex_unlock(&ra_mu);
}

/* A read served from read-ahead: 1 when done (copied), 0 when not there. */
static int ra_read(http_io *h, void *dst, size_t n, uint64_t off) {
    int done = 0;
    pthread_mutex_lock(&ra_mu);
again:
    for (extent *e = h->ext; e; e = e->next) {
        if (off < e->off || off + n > e->off + e->len)
            continue;
        if (e->state == EXT_QUEUED || e->state == EXT_FETCHING) {
            /* another reader may free e meanwhile: look again after */
            pthread_cond_wait(&ra_done, &ra_mu);
            goto again;
        }
        if (e->state == EXT_READY) {
            memcpy(dst, e->data + (off - e->off), n);
            done = 1;
            e->need -= (int64_t)n;
            if (e->need <= 0)
                ra_unlink(h, e);
        } else {
            ra_unlink(h, e); /* failed: the caller's own request reports why */
        }
        break;
    }
    pthread_mutex_unlock(&ra_mu);
    return done;
}

/* Forget this object's extents: dequeue, wait for those being fetched. */
static void ra_drop(http_io *h) {
    pthread_mutex_lock(&ra_mu);
    extent **pp = &ra_head, *last = NULL;
    while (*pp) {
        if ((*pp)->io == h) {
            *pp = (*pp)->qnext;
        } else {
            last = *pp;
            pp = &(*pp)->qnext;
        }
    }
    ra_tail = last;
    while (h->inflight > 0)
        pthread_cond_wait(&ra_done, &ra_mu);
    while (h->ext)
        ra_unlink(h, h->ext);
    pthread_mutex_unlock(&ra_mu);
}

static void atfork_prepare(void) {
    pthread_mutex_lock(&head_mu);
    pthread_mutex_lock(&ra_mu);
    pthread_mutex_lock(&pool_mu);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_lock(&share_mu[i]);
}
static void atfork_parent(void) {
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_unlock(&share_mu[i]);
    pthread_mutex_unlock(&pool_mu);
    pthread_mutex_unlock(&ra_mu);
    pthread_mutex_unlock(&head_mu);
}
/* The child has none of the parent's threads, and must not share its
 * connections: the pooled handles are dropped (not cleaned up: that could
 * speak on the parent's sockets), extents being fetched fail (their readers
 * fetch for themselves), and the read-ahead loop starts again when needed (ra_ws:
 * core/worker.h's fork policy; the locks are this handler's business). */
static void atfork_child(void) {
    npool = 0;
    nmpool = 0;
    /* The parent's threads may have been waiting on these: a condition
     * variable copied with waiters that do not exist here blocks the child's
     * first signal for good (glibc waits for them to leave). No thread of the
     * child waits yet: fresh ones. */
    ra_work = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    ra_done = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    head_cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    ra_multi = NULL; /* the parent's loop, with its connections: dropped */
    ra_polling = 0;
    nhead_flight = 0; /* the parent's HEADs in flight never land here */
    for (http_io *h = ra_objs; h; h = h->ra_next) {
        for (extent *e = h->ext; e; e = e->next)
            if (e->state == EXT_FETCHING)
                e->state = EXT_FAILED;
        h->inflight = 0;
    }
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_unlock(&share_mu[i]);
    pthread_mutex_unlock(&pool_mu);
    pthread_mutex_unlock(&ra_mu);
    pthread_mutex_unlock(&head_mu);
}

static int http_read(sl_io *io, void *dst, size_t n, uint64_t off, size_t *got) {
    http_io *h = (http_io *)io;
    if (off + n > io->size)
        n = (size_t)(io->size - off);
    const uint8_t *mem = io->map ? io->map : h->cached;
    if (!mem)
        mem = __atomic_load_n(&h->whole, __ATOMIC_ACQUIRE);
    if (mem) {
        memcpy(dst, mem + off, n);
        *got = n;
        return SL_OK;
    }
    if (edges_read(h, dst, n, off) || ra_read(h, dst, n, off)) {
        *got = n;
        return SL_OK;
    }
    uint64_t g;
    int rc = get_range(h, dst, off, n, &g);
    *got = (size_t)g;
    return rc;
}

static void http_close(sl_io *io) {
    http_io *h = (http_io *)io;
    ra_drop(h);
    if (io->map && h->mapped_len)
        munmap((void *)(uintptr_t)io->map, h->mapped_len);
    else if (h->cached)
        munmap((void *)(uintptr_t)h->cached, h->mapped_len);
    sl__free(h->heap);
    sl__free(h->whole);
    sl__free(h->edge_head);
    sl__free(h->edge_tail);
    sl__free(h->cache_path);
    sl__free(io->name);
    sl__free(h);
}

/* The bytes failed a caller's check: delete the cache entry, so that the
 * next open fetches the object again (this mapping stays valid). */
static void http_forget(sl_io *io) {
    http_io *h = (http_io *)io;
    if (h->cache_path && unlink(h->cache_path) == 0)
        SL_LOG_DEBUG("cache: dropped %s (%s failed a check)", h->cache_path, io->name);
}

static const sl_io_vtbl http_vtbl = {.scheme = "http", .read = http_read, .close = http_close,
                                     .will_need = http_will_need, .forget = http_forget};

/* One GET of the whole object into dst (memory) or fd (hashed into hs when
 * not NULL); *ss receives the checksums the server keeps for it. */
static int get_whole(http_io *h, uint8_t *dst, int fd, XXH3_state_t *hs, stored_sums *ss) {
    xfer x;
    memset(&x, 0, sizeof x);
    x.name = h->base.name;
    x.len = h->base.size;
    x.dst = dst;
    x.fd = fd;
    x.hash = hs;
    memset(ss, 0, sizeof *ss);
    ss->s3 = !strncmp(h->base.name, "s3://", 5);
    x.sums = ss;
    x.whole = 1;
    /* held to the version asked about, even one the memo gave: another is
     * asked about again, once (sl_io__http_open) */
    memcpy(x.want_etag, h->etag, sizeof x.want_etag);
    memcpy(x.want_lm, h->last_mod, sizeof x.want_lm);
    long st;
    int rc = perform(&x, h->url, 0, &st);
    h->size_changed = x.size_changed || x.version_changed;
    return rc;
}

/* Fetch the whole object into memory. */
static int fetch_heap(http_io *h) {
    if (h->base.size > SIZE_MAX / 2)
        return sl__error(SL_ELIMIT, "%s: %llu bytes cannot be held in memory here",
                         h->base.name, (unsigned long long)h->base.size);
    h->heap = sl__malloc((size_t)h->base.size);
    if (!h->heap)
        return sl__error(SL_ENOMEM, "%s: out of memory fetching %llu bytes", h->base.name,
                         (unsigned long long)h->base.size);
    stored_sums ss;
    int rc = get_whole(h, h->heap, -1, NULL, &ss);
    if (rc == SL_OK)
        rc = sums_check(&ss, h->heap, (size_t)h->base.size, h->base.name);
    if (rc < 0) {
        sl__free(h->heap);
        h->heap = NULL;
        return rc;
    }
    h->base.map = h->heap;
    return SL_OK;
}

/* One folder of the cache (or above it) made with the cache's mode, set
 * again after mkdir so that the umask takes nothing from it: 0 (made, or
 * there already), -1 (errno set). */
static int cache_mkdir(const char *dir) {
    if (mkdir(dir, cfg.dir_mode) == 0) {
        (void)chmod(dir, cfg.dir_mode);
        return 0;
    }
    return errno == EEXIST ? 0 : -1;
}

/* The cache folder (made before) allows others more than SLUICE_CACHE_MODE
 * does: said once per process, with both ways on. Its mode is left alone:
 * it may be shared on purpose. */
static void cache_dir_check(const char *dir) {
    static atomic_int said;
    struct stat st;
    if (stat(dir, &st) != 0 || !((st.st_mode & 07777) & ~cfg.dir_mode) ||
        atomic_exchange(&said, 1))
        return;
    SL_LOG_WARN("cache: %s is open to other users (mode %04o; sluice makes its cache folders "
                "%04o): remote data fetched into it can be read by them; `chmod %o %s` makes it "
                "private, or SLUICE_CACHE_MODE=%04o shares it on purpose", dir,
                (unsigned)(st.st_mode & 07777), (unsigned)cfg.dir_mode,
                (unsigned)cfg.dir_mode, dir, (unsigned)(st.st_mode & 07777));
}

static int mkdirs(const char *dir) {
    char buf[URL_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (cache_mkdir(buf) != 0)
                return -1;
            *p = '/';
        }
    }
    return cache_mkdir(buf);
}

/* A file of the cache (an entry being written, a lock, a remembered answer)
 * opened with O_CREAT and the cache's file mode, whatever the umask. */
static int cache_create(const char *path, int oflags) {
    int fd = open(path, oflags | O_CREAT, cfg.file_mode);
    if (fd >= 0)
        (void)fchmod(fd, cfg.file_mode); /* fails harmlessly on another user's lock */
    return fd;
}

typedef struct cache_ent {
    char name[256];
    uint64_t size;
    int64_t mtime_ns;
} cache_ent;

static int by_mtime(const void *a, const void *b) {
    const cache_ent *x = a, *y = b;
    return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns;
}

/* Delete the least recently used entries until the cache fits its budget
 * (never `keep`), and temporary files of fetches that died an hour ago. */
static void evict(const char *dir, const char *keep) {
    char path[URL_MAX + 300];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int lfd = cache_create(path, O_RDWR | O_CLOEXEC);
    if (lfd < 0)
        return;
    if (flock(lfd, LOCK_EX) != 0) {
        close(lfd);
        return;
    }
    DIR *d = opendir(dir);
    cache_ent *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    time_t now = time(NULL);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t nl = strlen(e->d_name);
        if (nl >= sizeof v->name || (nl > 5 && !strcmp(e->d_name + nl - 5, ".lock")))
            continue;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (e->d_name[0] == '.') {
            if (!strncmp(e->d_name, ".tmp-", 5) && st.st_mtime + 3600 < now)
                unlink(path);
            continue;
        }
        if (n == cap) {
            size_t c2 = cap ? cap * 2 : 64;
            cache_ent *nv = sl__realloc(v, c2 * sizeof *nv);
            if (!nv)
                break;
            v = nv;
            cap = c2;
        }
        snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
        v[n].size = (uint64_t)st.st_size;
        v[n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        total += v[n].size;
        n++;
    }
    if (d)
        closedir(d);
    uint64_t budget = cache_budget();
    if (total > budget && n) {
        qsort(v, n, sizeof *v, by_mtime);
        for (size_t i = 0; i < n && total > budget; i++) {
            if (keep && !strcmp(v[i].name, keep))
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, v[i].name);
            if (unlink(path) == 0) {
                total -= v[i].size;
                SL_LOG_DEBUG("cache: evicted %s (%llu bytes)", v[i].name,
                             (unsigned long long)v[i].size);
            }
            snprintf(path, sizeof path, "%s/%s.lock", dir, v[i].name);
            unlink(path);
        }
    }
    sl__free(v);
    flock(lfd, LOCK_UN);
    close(lfd);
}

/* Map a complete cache file and check its trailer: SL_OK, or SL_ECORRUPT
 * (quiet) when it is not the object whole. */
static int map_entry(http_io *h, int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != h->base.size + TRAILER)
        return SL_ECORRUPT;
    size_t len = (size_t)st.st_size;
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return sl__error(SL_EIO, "%s: cannot map its cache entry: %s", h->base.name,
                         strerror(errno));
    const uint8_t *b = m;
    uint64_t want;
    memcpy(&want, b + h->base.size + 8, 8);
    if (memcmp(b + h->base.size, trailer_magic, 8) != 0 ||
        XXH3_64bits(b, (size_t)h->base.size) != want) {
        munmap(m, len);
        return SL_ECORRUPT;
    }
    h->base.map = b;
    h->mapped_len = len;
    return SL_OK;
}

/* The cache entry's file name for this object version (200 bytes of room):
 * KEY-BASENAME (the base name only to help people reading the directory;
 * letters, digits and ._- kept). */
static int entry_name(const http_io *h, const char *validator, char *ent) {
    XXH3_state_t *ks = XXH3_createState();
    if (!ks)
        return sl__oom("naming a cache entry");
    char sz[32];
    snprintf(sz, sizeof sz, "%llu", (unsigned long long)h->base.size);
    XXH3_64bits_reset(ks);
    XXH3_64bits_update(ks, h->url, strlen(h->url) + 1);
    XXH3_64bits_update(ks, sz, strlen(sz) + 1);
    XXH3_64bits_update(ks, validator, strlen(validator));
    uint64_t key = XXH3_64bits_digest(ks);
    XXH3_freeState(ks);
    const char *base = strrchr(h->url, '/');
    base = base ? base + 1 : h->url;
    int k = snprintf(ent, 200, "%016llx-", (unsigned long long)key);
    for (const char *p = base; *p && *p != '?' && k < 120; p++)
        ent[k++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                  (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'
                              ? *p
                              : '_');
    ent[k] = 0;
    return SL_OK;
}

/* An object opened for ranges whose whole copy is in the cache already is
 * read from that copy (mapped) instead: no request. Quietly nothing when
 * there is none (or it does not check out: a range read then asks). */
static void cache_lookup(http_io *h, const char *validator) {
    if (!cfg.cache_dir[0] || h->base.size + TRAILER > cache_budget())
        return;
    char ent[200], path[URL_MAX + 300];
    if (entry_name(h, validator, ent) != SL_OK)
        return;
    snprintf(path, sizeof path, "%s/%s", cfg.cache_dir, ent);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (map_entry(h, fd) == SL_OK) {
        /* read through http_read only: the caller asked for ranges */
        h->cached = h->base.map;
        h->base.map = NULL;
    }
    close(fd);
}

/* Fetch the object into the cache (or find it there) and map it. */
static int fetch_cached(http_io *h, const char *validator, int or_ranges) {
    if (!cfg.cache_dir[0] || h->base.size + TRAILER > cache_budget())
        return or_ranges ? SL_OK : fetch_heap(h); /* read by ranges, ahead */
    if (mkdirs(cfg.cache_dir) != 0) {
        SL_LOG_WARN("cache: cannot create %s (%s); holding remote shards in memory",
                    cfg.cache_dir, strerror(errno));
        return fetch_heap(h);
    }
    cache_dir_check(cfg.cache_dir);
    char ent[200];
    SL_TRY(entry_name(h, validator, ent));
    char path[URL_MAX + 300], lpath[URL_MAX + 310], tmp[URL_MAX + 350];
    snprintf(path, sizeof path, "%s/%s", cfg.cache_dir, ent);
    snprintf(lpath, sizeof lpath, "%s.lock", path);
    int lfd = cache_create(lpath, O_RDWR | O_CLOEXEC);
    if (lfd >= 0)
        while (flock(lfd, LOCK_EX) != 0 && errno == EINTR) {
        }
    int rc = SL_OK, fd = -1;
    XXH3_state_t *hs = NULL;
    tmp[0] = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        rc = map_entry(h, fd);
        close(fd);
        fd = -1;
        if (rc == SL_OK) {
            h->cache_path = sl__strdup(path);
            if (!h->cache_path) {
                rc = sl__error(SL_ENOMEM, "%s: out of memory naming its cache entry",
                               h->base.name);
                goto cleanup;
            }
            (void)utimensat(AT_FDCWD, path, NULL, 0); /* most recently used */
            SL_LOG_DEBUG("cache: %s from %s", h->base.name, path);
            goto cleanup;
        }
        if (rc != SL_ECORRUPT)
            goto cleanup;
        SL_LOG_WARN("cache: the entry %s for %s is damaged (size or checksum); fetching it "
                    "again", path, h->base.name);
        unlink(path);
        rc = SL_OK;
    }
    static _Thread_local unsigned seq;
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%ld-%u", cfg.cache_dir, ent, (long)getpid(), ++seq);
    fd = cache_create(tmp, O_RDWR | O_TRUNC | O_CLOEXEC);
    if (fd < 0) {
        SL_LOG_WARN("cache: cannot write in %s (%s); holding remote shards in memory",
                    cfg.cache_dir, strerror(errno));
        tmp[0] = 0;
        rc = fetch_heap(h);
        goto cleanup;
    }
    hs = XXH3_createState();
    if (!hs) {
        rc = sl__oom("fetching into the cache");
        goto cleanup;
    }
    XXH3_64bits_reset(hs);
    stored_sums ss;
    SL_CHECK(get_whole(h, NULL, fd, hs, &ss));
    uint8_t tr[TRAILER];
    uint64_t sum = XXH3_64bits_digest(hs);
    memcpy(tr, trailer_magic, 8);
    memcpy(tr + 8, &sum, 8);
    if (pwrite(fd, tr, TRAILER, (off_t)h->base.size) != TRAILER)
        SL_FAIL(SL_EIO, "%s: writing its cache entry %s failed: %s", h->base.name, tmp,
                strerror(errno));
    rc = map_entry(h, fd);
    if (rc == SL_ECORRUPT) /* the disk gave back other bytes than written */
        SL_FAIL(SL_EIO, "%s: its cache entry %s reads back wrong", h->base.name, tmp);
    SL_CHECK(rc);
    /* what the server says of the bytes, before they enter the cache */
    rc = sums_check(&ss, h->base.map, (size_t)h->base.size, h->base.name);
    if (rc < 0) {
        munmap((void *)(uintptr_t)h->base.map, h->mapped_len);
        h->base.map = NULL;
        h->mapped_len = 0;
        goto cleanup;
    }
    h->cache_path = sl__strdup(path);
    if (!h->cache_path)
        SL_FAIL(SL_ENOMEM, "%s: out of memory naming its cache entry", h->base.name);
    if (rename(tmp, path) != 0)
        SL_FAIL(SL_EIO, "%s: cannot rename %s into the cache: %s", h->base.name, tmp,
                strerror(errno));
    tmp[0] = 0;
    SL_LOG_DEBUG("cache: fetched %s into %s", h->base.name, path);
cleanup:
    if (hs)
        XXH3_freeState(hs);
    if (fd >= 0)
        close(fd);
    if (tmp[0])
        unlink(tmp);
    if (lfd >= 0) {
        flock(lfd, LOCK_UN);
        close(lfd);
    }
    if (rc == SL_OK && !h->heap)
        evict(cfg.cache_dir, ent);
    return rc;
}

static void memo_drop(const char *url) {
    char path[URL_MAX + 64];
    if (memo_path(url, path, sizeof path, 0))
        unlink(path);
}

/* ---- opening with the edges (SL_IO_EDGES) -----------------------------------------
 *
 * A format whose header is at the start of an object and whose footer and
 * index are at its end (.slr) reads both right after opening it: with a
 * HEAD first that was four or five requests in a row per shard (HEAD,
 * header, header rest, footer, index), each a round trip. Instead, the open
 * asks for the last SL_IO_EDGE_TAIL bytes (a suffix range, bytes=-N: its
 * answer says the object's size too, so no HEAD) and, at the same time on a
 * second connection of one event loop (perform_many), for the first SL_IO_EDGE_HEAD bytes (a range that may
 * run past a small object's end): one round trip. An object no longer than
 * the tail is whole after it. Both answers must describe the same object
 * (size, ETag, Last-Modified); one that changed between them is asked again
 * once. */

/* Idle multi handles (mpool) keep the connections their last requests left
 * open (keep-alive: a multi has its own connection cache, apart from the
 * easy handles'). Dropped, not cleaned up, in a forked child, like pool. */

static CURLM *multi_get(void) {
    CURLM *m = idle_take(mpool, &nmpool);
    return m ? m : curl_multi_init();
}

static void multi_put(CURLM *m) {
    if ((m = idle_keep(mpool, &nmpool, MPOOL_MAX, m)))
        curl_multi_cleanup(m);
}

/* Run the n requests of q at once from one event loop on this thread (one
 * multi handle), each with perform()'s retries and outcomes: q[i].r.rc, and
 * for an error its message in msg[i]. A request waiting out its backoff
 * leaves the others running. */
typedef struct many_ctx {
    mreq *q;
    char (*msg)[SL__ERRMSG_MAX];
    int left;
} many_ctx;

static void many_over(int i, void *user) {
    many_ctx *c = user;
    if (c->q[i].r.rc < 0)
        snprintf(c->msg[i], SL__ERRMSG_MAX, "%s", sl_errmsg());
    c->left--;
}

static void perform_many(mreq *q, int n, char (*msg)[SL__ERRMSG_MAX]) {
    many_ctx c = {q, msg, n};
    CURLM *m = multi_get();
    for (int i = 0; i < n; i++) {
        msg[i][0] = 0;
        q[i].state = MREQ_WAITING;
        q[i].wake = 0;
        q[i].r.x->h = handle_get();
        if (!q[i].r.x->h) {
            q[i].r.rc = sl__oom("starting a request");
            q[i].state = MREQ_OVER;
            many_over(i, &c);
        }
    }
    if (!m) { /* no event loop: one after the other */
        for (int i = 0; i < n; i++) {
            if (q[i].state == MREQ_OVER)
                continue;
            req_run(&q[i].r);
            q[i].state = MREQ_OVER;
            many_over(i, &c);
        }
    }
    while (c.left) {
        long ms = mreq_turn(m, q, n, many_over, &c);
        if (c.left && ms)
            curl_multi_poll(m, NULL, 0, (int)ms, NULL); /* (waits ms with nothing running) */
    }
    for (int i = 0; i < n; i++) {
        if (q[i].r.x->h) {
            handle_put(q[i].r.x->h);
            q[i].r.x->h = NULL;
        }
    }
    if (m)
        multi_put(m);
}

static int open_edges(http_io *h, unsigned flags) {
    const char *name = h->base.name;
    for (int attempt = 0;; attempt++) {
        xfer hx, tx;
        memset(&hx, 0, sizeof hx);
        memset(&tx, 0, sizeof tx);
        uint64_t head_n = cfg.open_bytes < SL_IO_EDGE_HEAD ? cfg.open_bytes : SL_IO_EDGE_HEAD;
        uint8_t *head_b = sl__malloc((size_t)head_n);
        uint8_t *tail_b = sl__malloc((size_t)cfg.open_bytes);
        if (!head_b || !tail_b) {
            sl__free(head_b);
            sl__free(tail_b);
            return sl__error(SL_ENOMEM, "%s: out of memory opening it", name);
        }
        hx.name = tx.name = name;
        hx.fd = tx.fd = -1;
        hx.len = head_n;
        hx.dst = head_b;
        hx.clip = 1;
        tx.suffix = tx.len = cfg.open_bytes;
        tx.dst = tail_b;
        int quiet = (flags & SL_IO_MISSING_OK) != 0;
        mreq rq[2];
        long st[2];
        char msg[2][SL__ERRMSG_MAX];
        req_init(&rq[0].r, &tx, h->url, quiet, &st[0]);
        req_init(&rq[1].r, &hx, h->url, quiet, &st[1]);
        perform_many(rq, 2, msg);
        if (rq[0].r.rc != SL_OK || rq[1].r.rc != SL_OK) {
            sl__free(head_b);
            sl__free(tail_b);
            if (rq[0].r.rc < 0 || rq[1].r.rc < 0)
                return rq[0].r.rc < 0 ? sl__error(rq[0].r.rc, "%s", msg[0])
                                    : sl__error(rq[1].r.rc, "%s", msg[1]);
            return SL_END; /* missing (a quiet 404), SL_IO_MISSING_OK */
        }
        uint64_t total = tx.off + tx.len;
        int same = (hx.len < head_n ? hx.len == total : total >= head_n) &&
                   !strcmp(hx.etag, tx.etag) && !strcmp(hx.last_mod, tx.last_mod);
        if (!same) {
            sl__free(head_b);
            sl__free(tail_b);
            if (attempt)
                return sl__error(SL_EIO, "%s: changed on the server while it was opened (its "
                                 "first and last bytes came from different versions, twice)",
                                 name);
            SL_LOG_DEBUG("%s: changed on the server while it was opened; asking again", name);
            continue;
        }
        h->base.size = total;
        set_version(h, tx.etag, tx.last_mod);
        if (!total) {
            sl__free(head_b);
            sl__free(tail_b);
        } else if (tx.off == 0 || hx.len == total) { /* the whole object came */
            if (tx.off) { /* in the first bytes (a tail smaller than the head) */
                uint8_t *sw = head_b;
                head_b = tail_b;
                tail_b = sw;
            }
            sl__free(head_b);
            uint8_t *w = sl__realloc(tail_b, (size_t)total);
            if (w)
                tail_b = w;
            if (flags & SL_IO_MAP) {
                h->heap = tail_b;
                h->base.map = tail_b;
            } else {
                h->whole = tail_b;
                atomic_store(&h->whole_state, 2);
            }
        } else {
            h->edge_head = head_b;
            h->edge_head_len = hx.len;
            h->edge_tail = tail_b;
            h->edge_tail_off = tx.off;
            h->edge_tail_len = tx.len;
        }
        if (h->edge_tail && (flags & SL_IO_MAP) && !(flags & SL_IO_MAP_OR_RANGES)) {
            /* wanted whole, and bigger than both ends: the whole of it */
            sl__free(h->edge_head);
            sl__free(h->edge_tail);
            h->edge_head = h->edge_tail = NULL;
            return fetch_heap(h);
        }
        if (tx.range_ignored || hx.range_ignored) {
            if (h->edge_tail)
                become_whole(h); /* says so, and fetches it whole once */
            else
                say_range_ignored(h->base.name, 0);
        }
        return SL_OK;
    }
}

/* Objects whose replacement this process has warned about (by URL hash):
 * a shard reopened many times in a run is said once. */
#define KEPT_SAID_MAX 256
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t kept_said[KEPT_SAID_MAX];
static int nkept_said;

static int kept_first_time(const char *url) {
    uint64_t key = XXH3_64bits(url, strlen(url));
    pthread_mutex_lock(&kept_mu);
    int i = 0;
    while (i < nkept_said && kept_said[i] != key)
        i++;
    int first = i == nkept_said && nkept_said < KEPT_SAID_MAX;
    if (first)
        kept_said[nkept_said++] = key;
    pthread_mutex_unlock(&kept_mu);
    return first;
}

/* The object is no longer the version `want` a reader opened it at (`now` is
 * the server's): read on from the shard cache's copy of `want` when it is
 * still there and sound (SL_OK, h opened at `want`), else SL_EIO naming the
 * URL, both versions and the way on. (Opened for ranges, the copy is read
 * as cache_lookup's is.) */
static int open_kept(http_io *h, unsigned flags, const char *want, const char *now) {
    const char *name = h->base.name;
    char then_w[200], now_w[200];
    sl_io__version_words(name, want, then_w, sizeof then_w);
    sl_io__version_words(name, now, now_w, sizeof now_w);
    const char *nl = strchr(want, '\n'), *nl2 = nl ? strchr(nl + 1, '\n') : NULL;
    if (nl2 && cfg.cache_dir[0] && cache_budget()) {
        char validator[200];
        snprintf(validator, sizeof validator, "%.*s|%s", (int)(nl2 - nl - 1), nl + 1, nl2 + 1);
        h->base.size = strtoull(want, NULL, 10);
        char ent[200], path[URL_MAX + 300];
        if (h->base.size + TRAILER <= cache_budget() && entry_name(h, validator, ent) == SL_OK) {
            snprintf(path, sizeof path, "%s/%s", cfg.cache_dir, ent);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            int rc = fd >= 0 ? map_entry(h, fd) : SL_ECORRUPT;
            if (fd >= 0)
                close(fd);
            if (rc == SL_OK && !(flags & SL_IO_MAP)) {
                h->cached = h->base.map; /* read by ranges: copies from it */
                h->base.map = NULL;
            }
            if (rc == SL_OK) {
                h->cache_path = sl__strdup(path);
                if (!h->cache_path)
                    return sl__error(SL_ENOMEM, "%s: out of memory naming its cache entry", name);
                (void)utimensat(AT_FDCWD, path, NULL, 0); /* most recently used */
                snprintf(h->base.version, sizeof h->base.version, "%s", want);
                if (kept_first_time(h->url))
                    SL_LOG_WARN("%s: replaced on the server since this run first read it (%s "
                                "then, %s now); the run reads on the version it started with, "
                                "kept in the shard cache; the next run reads the new one",
                                name, then_w, now_w);
                return SL_OK;
            }
            if (rc != SL_ECORRUPT)
                return rc;
        }
    }
    return sl__error(SL_EIO, "%s: replaced on the server since this run first read it (%s "
                     "then, %s now), and %s; open the source again (a new run) to read the new "
                     "version", name, then_w, now_w,
                     cfg.cache_dir[0] && cache_budget()
                         ? "the version read then is not in the shard cache to read on"
                         : "with no shard cache (cache_bytes 0) no copy of the version read "
                           "then is kept to read on");
}

int sl_io__http_open(sl_io **out, const char *name, unsigned flags, const char *want) {
    /* An object whose size changed since it was asked (within the TTL) is
     * asked again and opened anew, once. */
    static _Thread_local int reopening;
    *out = NULL;
    SL_TRY(ensure_init());
    http_io *h = sl__calloc(1, sizeof *h);
    if (!h)
        return sl__oom("opening a URL");
    h->base.vt = &http_vtbl;
    int rc = SL_OK;
    h->base.name = sl__strdup(name);
    if (!h->base.name)
        SL_FAIL(SL_ENOMEM, "%s: out of memory opening it", name);
    if (name[strlen(name) - 1] == '/')
        SL_FAIL(SL_EINVAL, "%s: is a directory", name);
    SL_CHECK(resolve(name, h->url, sizeof h->url));
    if ((flags & SL_IO_EDGES) && (!cfg.cache_dir[0] || !cache_budget())) {
        /* no shard cache to look in first */
        rc = open_edges(h, flags);
        if (rc != SL_OK)
            goto cleanup;
        if (want && !sl_io__same_version(want, h->base.version)) {
            char now[SL_IO_VERSION_MAX];
            memcpy(now, h->base.version, sizeof now);
            rc = open_kept(h, flags, want, now); /* no cache here: says why not */
            if (rc != SL_OK)
                goto cleanup;
        }
        *out = &h->base;
        return SL_OK;
    }
    xfer x;
    int is_dir;
    rc = head(name, h->url, (flags & SL_IO_MISSING_OK) != 0, &x, &is_dir);
    if (rc != SL_OK)
        goto cleanup; /* an error, or SL_END: missing, SL_IO_MISSING_OK */
    if (is_dir)
        SL_FAIL(SL_EINVAL, "%s: is a directory", name);
    if (x.total < 0)
        SL_FAIL(SL_EIO, "%s: the server gives no size (Content-Length) for it", name);
    h->base.size = (uint64_t)x.total;
    set_version(h, x.etag, x.last_mod);
    h->unconfirmed = x.from_memo && !want;
    if (want && !sl_io__same_version(want, h->base.version)) {
        char now[SL_IO_VERSION_MAX];
        memcpy(now, h->base.version, sizeof now);
        rc = open_kept(h, flags, want, now);
        if (rc != SL_OK)
            goto cleanup;
        *out = &h->base;
        return SL_OK;
    }
    if (h->base.size) {
        char validator[200];
        snprintf(validator, sizeof validator, "%s|%s", x.etag, x.last_mod);
        if (flags & SL_IO_MAP) {
            /* SL_ECORRUPT: the bytes fetched are not what the server says
             * (nothing was cached): fetched again, once */
            rc = fetch_cached(h, validator, (flags & SL_IO_MAP_OR_RANGES) != 0);
            if (rc == SL_ECORRUPT) {
                char first[SL__ERRMSG_MAX];
                snprintf(first, sizeof first, "%s", sl_errmsg());
                rc = fetch_cached(h, validator, (flags & SL_IO_MAP_OR_RANGES) != 0);
                if (rc == SL_ECORRUPT)
                    rc = sl_io__twice_damaged(name, first);
                else if (rc == SL_OK)
                    SL_LOG_WARN("%s; fetched again, the new copy is sound", first);
            }
            SL_CHECK(rc);
        } else
            cache_lookup(h, validator);
    }
    *out = &h->base;
    return SL_OK;
cleanup:
    if (h->size_changed && !reopening) {
        memo_drop(h->url);
        http_close(&h->base);
        SL_LOG_DEBUG("%s: changed on the server; asking again", name);
        reopening = 1;
        rc = sl_io__http_open(out, name, flags, want);
        reopening = 0;
        return rc;
    }
    http_close(&h->base);
    return rc;
}

int sl_io__http_stat(const char *name, sl_io_info *out) {
    memset(out, 0, sizeof *out);
    SL_TRY(ensure_init());
    size_t nl = strlen(name);
    if (nl && name[nl - 1] == '/') {
        out->is_dir = 1;
        return SL_OK;
    }
    char url[URL_MAX];
    SL_TRY(resolve(name, url, sizeof url));
    xfer x;
    int is_dir;
    int rc = head(name, url, 1, &x, &is_dir);
    if (rc == SL_OK && is_dir) {
        out->is_dir = 1;
        return SL_OK;
    }
    if (rc == SL_END) {
        /* "http://host/ds" for the dataset directory "http://host/ds/" */
        char m[URL_MAX];
        int k = snprintf(m, sizeof m, "%s/manifest.json", url);
        if (k < 0 || (size_t)k >= sizeof m)
            return SL_END;
        rc = head(name, m, 1, &x, &is_dir);
        if (rc == SL_OK)
            out->is_dir = 1;
        return rc;
    }
    SL_TRY(rc);
    out->size = x.total > 0 ? (uint64_t)x.total : 0;
    snprintf(out->version, sizeof out->version, "%llu\n%s\n%s", (unsigned long long)out->size,
             x.etag, x.last_mod);
    if (x.last_mod[0]) {
        time_t t = curl_getdate(x.last_mod, NULL);
        if (t > 0)
            out->mtime_ns = (int64_t)t * 1000000000;
    }
    return SL_OK;
}

/* ---- listing a prefix (s3://bucket/prefix/) -------------------------------------- */

/* One ListObjectsV2 page: a signed GET of `url` into memory. */
static int list_fetch(void *user, const char *url, char **body, size_t *len) {
    const char *name = user;
    uint8_t *buf = NULL;
    xfer x;
    memset(&x, 0, sizeof x);
    x.name = name;
    x.len = UINT64_MAX;
    x.grow = &buf;
    x.fd = -1;
    long st;
    int rc = perform(&x, url, 0, &st);
    if (rc < 0) {
        sl__free(buf);
        return rc;
    }
    *body = (char *)buf;
    *len = (size_t)x.got;
    return SL_OK;
}

int sl_io__list(const char *prefix, char ***names_out, int *n_out) {
    *names_out = NULL;
    *n_out = 0;
    size_t pl = strlen(prefix);
    if (strncmp(prefix, "s3://", 5) != 0 || !pl || prefix[pl - 1] != '/')
        return sl__error(SL_EINVAL, "%s: only s3://BUCKET/PREFIX/ names can be listed", prefix);
    SL_TRY(ensure_init());
    SL_TRY(s3_config());
    sl_s3_list l;
    memset(&l, 0, sizeof l);
    SL_TRY(sl_s3__list(&s3cfg, prefix, list_fetch, (void *)(uintptr_t)prefix, 0, 0, &l));
    int rc = SL_OK, n = 0;
    const char *slash = strchr(prefix + 5, '/');
    size_t blen = (size_t)(slash - prefix); /* "s3://bucket" */
    char **v = sl__calloc(l.n + 1, sizeof *v);
    if (!v)
        SL_FAIL(SL_ENOMEM, "%s: out of memory listing it", prefix);
    for (size_t i = 0; i < l.n; i++) {
        const char *key = l.v[i].key;
        size_t kl = strlen(key);
        if ((kl >= 6 && !strcmp(key + kl - 6, ".slidx")) || (kl && key[kl - 1] == '/'))
            continue; /* a sidecar index (found beside its file) or a "folder" */
        if (n >= 1000000)
            SL_FAIL(SL_ELIMIT, "%s: more than a million objects", prefix);
        v[n] = sl__malloc(blen + 1 + kl + 1);
        if (!v[n])
            SL_FAIL(SL_ENOMEM, "%s: out of memory listing it", prefix);
        memcpy(v[n], prefix, blen);
        v[n][blen] = '/';
        memcpy(v[n] + blen + 1, key, kl + 1);
        n++;
    }
    if (!n)
        SL_FAIL(SL_EINVAL, "%s: no objects under this prefix", prefix);
    *names_out = v;
    *n_out = n;
    v = NULL;
cleanup:
    if (v) {
        for (int i = 0; v[i]; i++)
            sl__free(v[i]);
        sl__free(v);
    }
    sl_s3__list_dispose(&l);
    return rc;
}
