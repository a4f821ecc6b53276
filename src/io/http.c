/*
 * http.c — the HTTP transport of the remote provider (http.h): libcurl
 * handles, one request tried until it succeeds or its budget is spent, one
 * event-loop driver for several at once, and the checksums of whole answers.
 *
 * DESIGN
 * - Handles: a process-wide pool of curl easy handles (one per request in
 *   flight, returned after it), each keeping its connections alive between
 *   requests; DNS answers and TLS sessions are shared (a curl share object).
 *   HTTP/2 is asked for over TLS and used where the server offers it. Idle
 *   multi handles are pooled the same way (each keeps its own connections).
 * - Faults: a request is tried up to SLUICE_HTTP_TRIES times (default 6) on a
 *   connection error, a timeout or stall, a body cut short, HTTP 5xx, 408 and
 *   429; between tries it waits an exponential backoff with jitter (from
 *   SLUICE_HTTP_BACKOFF_MS, default 200, doubling, capped at
 *   SLUICE_HTTP_BACKOFF_MAX_MS, default 5000) or the server's Retry-After when
 *   longer (capped at 60 s). A body broken after some bytes is resumed from
 *   where it stopped with a range request, and that try does not count
 *   against the budget (bytes arrived). Other statuses (404, 403, 416...) fail
 *   at once. The last error names the URL, the status or curl's words, and
 *   the number of tries. One retry loop (req_start/req_end) serves the
 *   requests run on the calling thread (sl_http__req_run) and those an event
 *   loop drives (sl_http__mreq_turn).
 * - Answers are held to what was asked: a 206 for another range, an encoded
 *   body, another version of the object (x->want_*), or a whole answer of
 *   another size are stopped before a byte is taken.
 * - Integrity: the checksums a whole-object answer gives (a store's stored
 *   ones, a single-part upload's MD5 ETag when the dialect says so,
 *   Content-MD5, Digest, Repr-Digest) are checked by sl_http__sums_check.
 *
 * All mutable state of the file is one struct, `http` (the settings, the
 * share, the pools), set once by sl_http__init, which also installs the
 * file's pthread_atfork handlers.
 */
#include "io/http.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <zlib.h>

/* Handles kept for reuse (each keeps its kept-alive connection): room for
 * the reading threads and the openers, whose requests are their own (the
 * read-ahead loop keeps handles of its own). A handle put back into a full
 * pool is cleaned up with its connection: when the fetch threads took their
 * handles from it, 64 places made 2262 connections for 7746 requests through
 * a 20 ms proxy; room for all, 129. */
#define POOL_MAX 320
#define MPOOL_MAX 64 /* idle multi handles (sl_http__perform_many) */

/* The transport's process-wide state: settings read once from the
 * environment, curl's share object and its locks, the idle handles. */
static struct {
    pthread_once_t once;
    int init_rc;
    char init_why[400];
    int tries;
    long backoff_ms, backoff_max_ms;
    long connect_timeout_s, stall_s;
    char ca[SL_URL_MAX];
    CURLSH *share;
    pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
    pthread_mutex_t pool_mu;
    CURL *pool[POOL_MAX];
    int npool;
    CURLM *mpool[MPOOL_MAX];
    int nmpool;
} http = {.once = PTHREAD_ONCE_INIT, .pool_mu = PTHREAD_MUTEX_INITIALIZER};

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *u) {
    (void)h, (void)a, (void)u;
    pthread_mutex_lock(&http.share_mu[d]);
}
static void share_unlock(CURL *h, curl_lock_data d, void *u) {
    (void)h, (void)u;
    pthread_mutex_unlock(&http.share_mu[d]);
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

/* fork(): the pools' and the share's locks are held across it. */
static void fork_prepare(void) {
    pthread_mutex_lock(&http.pool_mu);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_lock(&http.share_mu[i]);
}

static void fork_parent(void) {
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_unlock(&http.share_mu[i]);
    pthread_mutex_unlock(&http.pool_mu);
}

/* The child must not share the parent's connections: the pooled handles are
 * dropped (not cleaned up: that could speak on the parent's sockets). */
static void fork_child(void) {
    http.npool = 0;
    http.nmpool = 0;
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_unlock(&http.share_mu[i]);
    pthread_mutex_unlock(&http.pool_mu);
}

static void init(void) {
    if (sl_curl__load() != SL_OK) {
        /* what is missing: the message sl_http__init gives every caller */
        snprintf(http.init_why, sizeof http.init_why, "%s", sl_errmsg());
        http.init_rc = SL_EUNSUPPORTED;
        return;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(http.init_why, sizeof http.init_why, "libcurl failed to initialise");
        http.init_rc = SL_EIO;
        return;
    }
    http.tries = (int)sl__setting_int("SLUICE_HTTP_TRIES");
    http.backoff_ms = sl__setting_int("SLUICE_HTTP_BACKOFF_MS");
    http.backoff_max_ms = sl__setting_int("SLUICE_HTTP_BACKOFF_MAX_MS");
    http.connect_timeout_s = sl__setting_int("SLUICE_HTTP_CONNECT_TIMEOUT");
    http.stall_s = sl__setting_int("SLUICE_HTTP_STALL_TIMEOUT");
    const char *ca = sl__setting_str("SLUICE_CA_BUNDLE");
    if (!ca || !*ca)
        ca = getenv("CURL_CA_BUNDLE");
    if (!ca || !*ca)
        ca = getenv("SSL_CERT_FILE");
    if (!ca || !*ca)
        ca = sl_io__ca_pick(curl_version_info(CURLVERSION_NOW)->cainfo, ca_bundles);
    if (ca && *ca)
        snprintf(http.ca, sizeof http.ca, "%s", ca);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&http.share_mu[i], NULL);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    http.share = curl_share_init();
    if (http.share) {
        curl_share_setopt(http.share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(http.share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(http.share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(http.share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
}

int sl_http__init(void) {
    pthread_once(&http.once, init);
    if (http.init_rc)
        return sl__error(http.init_rc, "%s", http.init_why);
    return SL_OK;
}

/* The idle handles of pool and mpool (CURL and CURLM are both void): the
 * last one kept, or NULL when none is idle. */
static void *idle_take(void **slots, int *n) {
    void *p = NULL;
    pthread_mutex_lock(&http.pool_mu);
    if (*n)
        p = slots[--*n];
    pthread_mutex_unlock(&http.pool_mu);
    return p;
}

/* Keeps p idle when the pool has room (then NULL), else gives p back for
 * the caller to clean up. */
static void *idle_keep(void **slots, int *n, int max, void *p) {
    pthread_mutex_lock(&http.pool_mu);
    if (*n < max) {
        slots[(*n)++] = p;
        p = NULL;
    }
    pthread_mutex_unlock(&http.pool_mu);
    return p;
}

static CURL *handle_get(void) {
    CURL *h = idle_take((void **)http.pool, &http.npool);
    return h ? h : curl_easy_init();
}

static void handle_put(CURL *h) {
    /* reset keeps the handle's live connections (keep-alive) */
    curl_easy_reset(h);
    if ((h = idle_keep((void **)http.pool, &http.npool, POOL_MAX, h)))
        curl_easy_cleanup(h);
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
static const char *const sum_alg[SL_SUM_N] = {"CRC32C", "CRC32", "SHA-256", "SHA-512", "MD5"};
static const int sum_len[SL_SUM_N] = {4, 4, 32, 64, 16};

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

static void sum_set(sl_sums *ss, int alg, const char *v, size_t len, const char *from) {
    while (len && (*v == ' ' || *v == ':' || *v == '"'))
        v++, len--;
    while (len && (v[len - 1] == ' ' || v[len - 1] == ':' || v[len - 1] == '"'))
        len--;
    if (b64_exact(v, len, ss->want[alg], (size_t)sum_len[alg]))
        snprintf(ss->from[alg], sizeof ss->from[alg], "%s", from);
}

/* A "name=value, name=value" list (Digest, Repr-Digest). */
static void sum_list(sl_sums *ss, const char *v, const char *from) {
    while (*v) {
        while (*v == ' ' || *v == ',')
            v++;
        size_t n = strcspn(v, "=,");
        const char *val = v[n] == '=' ? v + n + 1 : NULL;
        size_t vl = val ? strcspn(val, ",") : 0;
        int alg = !strncasecmp(v, "sha-256", n) && n == 7   ? SL_SUM_SHA256
                  : !strncasecmp(v, "sha-512", n) && n == 7 ? SL_SUM_SHA512
                  : !strncasecmp(v, "md5", n) && n == 3     ? SL_SUM_MD5
                                                            : -1;
        if (alg >= 0 && val)
            sum_set(ss, alg, val, vl, from);
        v = val ? val + vl : v + n;
    }
}

/* One header line of a whole-object answer. */
static void sum_header(sl_sums *ss, const char *line) {
    static const struct {
        const char *name;
        int alg;
    } amz[] = {{"x-amz-checksum-crc32c:", SL_SUM_CRC32C},
               {"x-amz-checksum-crc32:", SL_SUM_CRC32},
               {"x-amz-checksum-sha256:", SL_SUM_SHA256},
               {"content-md5:", SL_SUM_MD5}};
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
int sl_http__sums_check(sl_sums *ss, const uint8_t *p, size_t n, const char *name) {
    /* a single-part S3 upload's ETag is the MD5 of its bytes */
    size_t el = strlen(ss->etag);
    if (ss->etag_md5 && !ss->sse_other && !ss->from[SL_SUM_MD5][0] && el == 34 && ss->etag[0] == '"' &&
        ss->etag[33] == '"' && strspn(ss->etag + 1, "0123456789abcdef") == 32) {
        for (int i = 0; i < 16; i++) {
            unsigned b;
            sscanf(ss->etag + 1 + 2 * i, "%2x", &b);
            ss->want[SL_SUM_MD5][i] = (uint8_t)b;
        }
        snprintf(ss->from[SL_SUM_MD5], sizeof ss->from[SL_SUM_MD5], "ETag");
    }
    for (int a = 0; a < SL_SUM_N; a++) {
        if (!ss->from[a][0])
            continue;
        uint8_t got[64];
        int ok = 1;
        if (a == SL_SUM_CRC32C || a == SL_SUM_CRC32) {
            uint32_t c = a == SL_SUM_CRC32C ? sl__crc32c(0, p, n) : (uint32_t)crc32_z(0, p, n);
            got[0] = (uint8_t)(c >> 24), got[1] = (uint8_t)(c >> 16);
            got[2] = (uint8_t)(c >> 8), got[3] = (uint8_t)c;
        } else {
            ok = digest_evp(a == SL_SUM_MD5 ? EVP_md5() : a == SL_SUM_SHA256 ? EVP_sha256() : EVP_sha512(),
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
static size_t on_header(char *p, size_t sz, size_t nm, void *u) {
    sl_xfer *x = u;
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
static int answer_is_another_version(const sl_xfer *x) {
    if (x->want_etag[0] && x->etag[0])
        return !etag_same(x->want_etag, x->etag);
    if (x->want_lm[0] && x->last_mod[0])
        return strcmp(x->want_lm, x->last_mod) != 0;
    return 0;
}

/* An encoding sluice did not ask for (it sends no Accept-Encoding): the
 * bytes are not the object's as stored. */
static int answer_encoded(const sl_xfer *x) {
    return x->encoding[0] && strcasecmp(x->encoding, "identity") != 0;
}

/* Whether a 206's Content-Range is the range this try asked for: the same
 * first byte, and the last byte asked (or the object's last, when the range
 * runs to its end or past it). Else range_why says what came and what was
 * asked, and the transfer is stopped before a byte is taken. */
static int range_matches(sl_xfer *x) {
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
static int64_t answer_total(sl_xfer *x) {
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
static int suffix_place(sl_xfer *x) {
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
static void clip_to_end(sl_xfer *x) {
    int64_t total = answer_total(x);
    if (total >= 0 && x->off + x->len > (uint64_t)total)
        x->len = (uint64_t)total > x->off ? (uint64_t)total - x->off : 0;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *u) {
    sl_xfer *x = u;
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

/* The headers the dialect adds to a request (its signature), if any. */
static int sign(const sl_xfer *x, const char *url, const char *range, struct curl_slist **list) {
    if (!x->dialect || !x->dialect->sign)
        return SL_OK;
    hdr_ctx hc = {NULL};
    /* a whole object's answer carries the stored checksums (a range has none) */
    int rc = x->dialect->sign(url, x->head, range, add_header, &hc);
    *list = hc.list;
    return rc;
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
    uint64_t d = (uint64_t)http.backoff_ms << (t - 1 < 20 ? t - 1 : 20);
    if (d > (uint64_t)http.backoff_max_ms)
        d = (uint64_t)http.backoff_max_ms;
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

void sl_http__req_init(sl_req *r, sl_xfer *x, const char *url, int quiet_404, long *status_out) {
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
static int req_start(sl_req *r) {
    sl_xfer *x = r->x;
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
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, http.connect_timeout_s);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, http.stall_s);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->err);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "sluice");
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_FILETIME, 1L);
    if (http.share)
        curl_easy_setopt(h, CURLOPT_SHARE, http.share);
    if (http.ca[0])
        curl_easy_setopt(h, CURLOPT_CAINFO, http.ca);
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
    r->headers = NULL;
    char rh[80];
    if (r->rg)
        snprintf(rh, sizeof rh, "bytes=%s", r->rg);
    int rc = sign(x, r->url, r->rg ? rh : NULL, &r->headers);
    if (rc < 0) {
        curl_slist_free_all(r->headers);
        r->headers = NULL;
        return rc;
    }
    if (r->headers)
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, r->headers);
    if (x->dialect && x->dialect->path_as_is) /* as signed */
        curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    return SL_OK;
}

/* What the ending `cc` of the try on x->h means: 1 when the request is over
 * (r->rc: SL_OK, SL_END for a quiet 404, or an error; the status code of a
 * final non-retryable answer in *r->status_out), 0 when it is tried again
 * after r->wait_ms. */
static int req_end(sl_req *r, CURLcode cc) {
    sl_xfer *x = r->x;
    CURL *h = x->h;
    curl_slist_free_all(r->headers);
    r->headers = NULL;
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
    if (r->t >= http.tries) {
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

void sl_http__req_run(sl_req *r) {
    for (;;) {
        r->rc = req_start(r);
        if (r->rc < 0 || req_end(r, curl_easy_perform(r->x->h)))
            break;
        sleep_ms(r->wait_ms);
    }
}

int sl_http__perform(sl_xfer *x, const char *url, int quiet_404, long *status_out) {
    sl_req r;
    sl_http__req_init(&r, x, url, quiet_404, status_out);
    x->h = handle_get();
    if (!x->h)
        return sl__oom("starting a request");
    sl_http__req_run(&r);
    handle_put(x->h);
    x->h = NULL;
    return r.rc;
}

long sl_http__mreq_turn(CURLM *m, sl_mreq *q, int n, void (*over)(int i, void *user), void *user) {
    uint64_t now = sl__now_ns();
    long timeout_ms = 1000;
    for (int i = 0; i < n; i++) {
        sl_mreq *t = &q[i];
        if (t->state == SL_MREQ_WAITING && t->wake <= now) {
            int rc = req_start(&t->r);
            if (rc == SL_OK && curl_multi_add_handle(m, t->r.x->h) != CURLM_OK) {
                curl_slist_free_all(t->r.headers);
                t->r.headers = NULL;
                rc = sl__error(SL_EIO, "%s: cannot start its request (curl multi)", t->r.x->name);
            }
            if (rc < 0) {
                t->r.rc = rc;
                t->state = SL_MREQ_OVER;
                over(i, user);
                timeout_ms = 0;
                continue;
            }
            t->state = SL_MREQ_RUNNING;
        }
        if (t->state == SL_MREQ_WAITING) {
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
        while (i < n && (q[i].state != SL_MREQ_RUNNING || q[i].r.x->h != cm->easy_handle))
            i++;
        if (i == n)
            continue;
        CURLcode cc = cm->data.result; /* cm is freed by the removal */
        curl_multi_remove_handle(m, q[i].r.x->h);
        if (req_end(&q[i].r, cc)) {
            q[i].state = SL_MREQ_OVER;
            over(i, user);
        } else {
            q[i].state = SL_MREQ_WAITING;
            q[i].wake = sl__now_ns() + (uint64_t)q[i].r.wait_ms * 1000000;
        }
        timeout_ms = 0;
    }
    return timeout_ms;
}
/* Idle multi handles (mpool) keep the connections their last requests left
 * open (keep-alive: a multi has its own connection cache, apart from the
 * easy handles'). Dropped, not cleaned up, in a forked child, like pool. */

static CURLM *multi_get(void) {
    CURLM *m = idle_take((void **)http.mpool, &http.nmpool);
    return m ? m : curl_multi_init();
}

static void multi_put(CURLM *m) {
    if ((m = idle_keep((void **)http.mpool, &http.nmpool, MPOOL_MAX, m)))
        curl_multi_cleanup(m);
}

/* Run the n requests of q at once from one event loop on this thread (one
 * multi handle), each with sl_http__perform's retries and outcomes: q[i].r.rc, and
 * for an error its message in msg[i]. A request waiting out its backoff
 * leaves the others running. */
typedef struct many_ctx {
    sl_mreq *q;
    char (*msg)[SL__ERRMSG_MAX];
    int left;
} many_ctx;

static void many_over(int i, void *user) {
    many_ctx *c = user;
    if (c->q[i].r.rc < 0)
        snprintf(c->msg[i], SL__ERRMSG_MAX, "%s", sl_errmsg());
    c->left--;
}

void sl_http__perform_many(sl_mreq *q, int n, char (*msg)[SL__ERRMSG_MAX]) {
    many_ctx c = {q, msg, n};
    CURLM *m = multi_get();
    for (int i = 0; i < n; i++) {
        msg[i][0] = 0;
        q[i].state = SL_MREQ_WAITING;
        q[i].wake = 0;
        q[i].r.x->h = handle_get();
        if (!q[i].r.x->h) {
            q[i].r.rc = sl__oom("starting a request");
            q[i].state = SL_MREQ_OVER;
            many_over(i, &c);
        }
    }
    if (!m) { /* no event loop: one after the other */
        for (int i = 0; i < n; i++) {
            if (q[i].state == SL_MREQ_OVER)
                continue;
            sl_http__req_run(&q[i].r);
            q[i].state = SL_MREQ_OVER;
            many_over(i, &c);
        }
    }
    while (c.left) {
        long ms = sl_http__mreq_turn(m, q, n, many_over, &c);
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
