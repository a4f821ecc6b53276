/*
 * http.h — the HTTP transport of the remote provider (http.c): libcurl easy
 * handles from a process-wide pool (keep-alive; DNS and TLS sessions shared),
 * one request described by an `sl_xfer` and tried by one retry loop (backoff
 * with jitter, Retry-After, a body broken after some bytes resumed by range),
 * one event-loop driver for several requests at once (`sl_http__mreq_turn`),
 * and the check of a whole-object answer against the checksums the server
 * gives for it (`sl_sums`). It knows nothing of the shard cache, read-ahead or
 * schemes: a scheme's dialect (`sl_io_dialect`) turns names into URLs and
 * signs the requests.
 *
 * Settings (read once, at sl_http__init): SLUICE_HTTP_TRIES (default 6),
 * SLUICE_HTTP_BACKOFF_MS (200), SLUICE_HTTP_BACKOFF_MAX_MS (5000),
 * SLUICE_HTTP_CONNECT_TIMEOUT (10 s), SLUICE_HTTP_STALL_TIMEOUT (30 s), the
 * CA bundle (SLUICE_CA_BUNDLE, CURL_CA_BUNDLE, SSL_CERT_FILE, else the
 * distribution's, sl_io__ca_pick).
 *
 * Thread safety: every function may run on many threads at once; an sl_xfer
 * and its sl_req belong to one request.
 */
#ifndef SL_IO_HTTP_H
#define SL_IO_HTTP_H

#include "io/io.h"

#include "io/curl_api.h"
#include <stdint.h>
#include <xxhash.h>

#define SL_URL_MAX 4096

/* ---- checksums a server gives for a whole object ---------------------------------- */

enum { SL_SUM_CRC32C, SL_SUM_CRC32, SL_SUM_SHA256, SL_SUM_SHA512, SL_SUM_MD5, SL_SUM_N };

typedef struct sl_sums {
    uint8_t want[SL_SUM_N][64];
    char from[SL_SUM_N][32]; /* the header it came from; "" when none */
    char etag[128];          /* the ETag, checked as MD5 at the end when fit */
    int etag_md5, sse_other; /* the dialect's etag_md5; SSE-KMS or SSE-C (ETag not MD5) */
} sl_sums;

/* The bytes against every checksum the answer gave: SL_OK (also when it
 * gave none), or SL_ECORRUPT naming `name`, the algorithm and the header. */
int sl_http__sums_check(sl_sums *ss, const uint8_t *p, size_t n, const char *name);

/* ---- one request ------------------------------------------------------------------ */

typedef struct sl_xfer {
    CURL *h;
    const char *name;    /* for messages */
    const sl_io_dialect *dialect; /* the scheme's, or NULL (plain HTTP) */
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
    int from_memo;       /* a HEAD's answer came from the shard cache's memo
                            (SLUICE_CACHE_TTL), not from the server */
    sl_sums *sums;       /* the stored checksums of a whole-object answer, or NULL */
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
} sl_xfer;

/* One request with its retries, in steps: sl_http__req_start sets up try
 * r->t on x->h, the transfer runs (curl_easy_perform, or a multi handle
 * driving several), and sl_http__req_end says what its ending means. */
typedef struct sl_req {
    sl_xfer *x;
    const char *url;
    int quiet_404;
    long *status_out;
    int t; /* the try set up or run; 0 after bytes arrived (a fresh budget) */
    int rc;
    long wait_ms; /* before the next try, when req_end says there is one */
    uint64_t before;
    const char *rg;
    struct curl_slist *headers;
    long last_status;
    CURLcode last_cc;
    char err[CURL_ERROR_SIZE];
    char range[64];
    char last_err[CURL_ERROR_SIZE];
} sl_req;

/* A request run by an event loop (sl_http__perform_many, the read-ahead
 * loop): its tries as sl_http__perform's, each started when due, several
 * requests at once on one multi handle. */
enum { SL_MREQ_OVER, SL_MREQ_WAITING, SL_MREQ_RUNNING };
typedef struct sl_mreq {
    sl_req r;      /* r.x->h: the handle its tries run on */
    int state;     /* SL_MREQ_WAITING: its next try starts at `wake` */
    uint64_t wake; /* sl__now_ns() time */
} sl_mreq;

/* libcurl and the settings, once per process: SL_OK or SL_EIO. Installs the
 * transport's pthread_atfork handlers (the pools' and the share's locks are
 * held across fork(); the child drops the parent's idle handles). */
int sl_http__init(void);
/* A request of `x` against `url`: the status code of a final non-retryable
 * answer in *status_out (0 when none); `quiet_404`: a 404 is SL_END with no
 * message. */
void sl_http__req_init(sl_req *r, sl_xfer *x, const char *url, int quiet_404, long *status_out);
/* Every try of r on this thread (curl_easy_perform), waiting out each backoff. */
void sl_http__req_run(sl_req *r);
/* A request with its retries on a pooled handle: SL_OK, SL_END (a quiet
 * 404) or an error naming x->name. */
int sl_http__perform(sl_xfer *x, const char *url, int quiet_404, long *status_out);
/* One turn of the event loop m over q[0..n): starts the tries that are due,
 * lets curl move every transfer, and ends the tries that finished. A request
 * that is over (q[i].r.rc says how) becomes SL_MREQ_OVER and over(i, user)
 * is called; one to be tried again waits out its backoff while the others
 * run. Returns how long the caller may poll m before the next turn (ms): 0
 * when something ended. */
long sl_http__mreq_turn(CURLM *m, sl_mreq *q, int n, void (*over)(int i, void *user), void *user);
/* The n requests of q at once from one event loop on this thread, each on a
 * pooled handle with sl_http__perform's retries and outcomes: q[i].r.rc,
 * and for an error its message in msg[i]. */
void sl_http__perform_many(sl_mreq *q, int n, char (*msg)[SL__ERRMSG_MAX]);


#endif /* SL_IO_HTTP_H */
