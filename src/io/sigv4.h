/*
 * sigv4.h — AWS Signature Version 4 for GET and HEAD requests (no body), as
 * the s3:// reader needs it. Pure: strings in, strings out; no network, no
 * libcurl. SHA-256 and HMAC-SHA256 come from OpenSSL's libcrypto.
 *
 * The steps, each a field of sl_sigv4_out so that tests check every one:
 *   1. canonical request  METHOD \n URI \n QUERY \n HEADERS \n SIGNED \n PAYLOAD_HASH
 *   2. string to sign     "AWS4-HMAC-SHA256" \n DATE \n SCOPE \n hex(SHA256(1))
 *   3. signing key        HMAC chain "AWS4"+secret -> date -> region -> service -> "aws4_request"
 *   4. signature          hex(HMAC(key, 2))
 *   5. Authorization      "AWS4-HMAC-SHA256 Credential=ID/SCOPE, SignedHeaders=..., Signature=..."
 *
 * The canonical URI has two rules (sl_sigv4_in.s3):
 *   - generic AWS services (the published test suite): the path is
 *     normalised (empty and "." segments dropped, ".." removes one) and the
 *     path as given is percent-encoded once more, so a '%' already in it
 *     becomes "%25" ("double encoding");
 *   - S3: no normalisation ("a//b/./c" is a key of its own), and no double
 *     encoding: the path is percent-decoded, then each byte but '/' and the
 *     unreserved ones (A-Z a-z 0-9 - . _ ~) is encoded once as %XX.
 * The query is canonical in both: each name and value decoded, encoded
 * again, pairs sorted by name then value (bytewise).
 *
 * Thread safety: every function may run on many threads at once.
 */
#ifndef SL_SIGV4_H
#define SL_SIGV4_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

/* hex(SHA-256("")): the payload hash of a request without a body. */
#define SL_SIGV4_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef struct sl_sigv4_header {
    const char *name;  /* any case; lower-cased in the canonical request */
    const char *value; /* trimmed, inner runs of white space made one ' ' */
} sl_sigv4_header;

typedef struct sl_sigv4_creds {
    const char *access_key;    /* AWS_ACCESS_KEY_ID */
    const char *secret_key;    /* AWS_SECRET_ACCESS_KEY */
    const char *session_token; /* AWS_SESSION_TOKEN, or NULL: when set it is
                                  signed as x-amz-security-token */
} sl_sigv4_creds;

typedef struct sl_sigv4_in {
    const char *method;  /* "GET", "HEAD" */
    const char *path;    /* the request's path, as sent ("/" when empty) */
    const char *query;   /* without '?'; NULL or "" when none */
    /* Every header to sign, "host" and "x-amz-date" included (the date is
     * taken from `amz_date`, which must equal the x-amz-date header sent).
     * Repeated names are joined with ',' in the order given. */
    const sl_sigv4_header *headers;
    size_t n_headers;
    const char *amz_date;      /* "YYYYMMDDTHHMMSSZ" */
    const char *region;        /* "us-east-1" */
    const char *service;       /* "s3" */
    const char *payload_hash;  /* hex SHA-256 of the body, or "UNSIGNED-PAYLOAD";
                                  NULL: SL_SIGV4_EMPTY_SHA256 */
    int s3;                    /* 1: S3's URI rule; 0: generic (see above) */
} sl_sigv4_in;

typedef struct sl_sigv4_out {
    char *canonical_request;
    char *string_to_sign;
    char *signed_headers;  /* "host;range;x-amz-date" */
    char signature[65];    /* lower-case hex */
    char *authorization;   /* the Authorization header's value */
} sl_sigv4_out;

/* Sign. On success the caller owns out's strings (sl_sigv4__out_dispose).
 * SL_EINVAL (an empty header name or one with white space or ':' in it, a
 * bad date, no credentials) or SL_ENOMEM, with a message; out is then
 * empty. A value may hold line breaks (a folded header, as in the test
 * suite): sending it is the caller's concern (sl_s3__sign refuses them). */
int sl_sigv4__sign(const sl_sigv4_in *in, const sl_sigv4_creds *creds, sl_sigv4_out *out);
/* Frees out's strings; accepts a zeroed or disposed out. */
void sl_sigv4__out_dispose(sl_sigv4_out *out);

/* "YYYYMMDDTHHMMSSZ" of a time in seconds since 1970 (UTC) into buf[17]. */
void sl_sigv4__amz_date(int64_t time_s, char buf[17]);

/* ---- small string helpers (shared with s3.c) --------------------------------- */

/* A growing string in sl__malloc memory; a failed append sets `oom` and
 * later appends do nothing, so callers check once at the end. */
typedef struct sl_strbuf {
    char *p;    /* NUL-terminated when non-NULL */
    size_t n, cap;
    int oom;
} sl_strbuf;
void sl_strbuf__add(sl_strbuf *b, const char *s, size_t n);
void sl_strbuf__adds(sl_strbuf *b, const char *s);
void sl_strbuf__addc(sl_strbuf *b, char c);
/* Append s[0..n) percent-encoded: every byte but A-Z a-z 0-9 - . _ ~ (and
 * '/' when keep_slash) as %XX with upper-case hex, as SigV4 and S3 want. */
void sl_strbuf__add_uri(sl_strbuf *b, const char *s, size_t n, int keep_slash);
/* Append s[0..n) with %XX sequences decoded ('+' stays '+'); a '%' not
 * followed by two hex digits stays as it is. */
void sl_strbuf__add_decoded(sl_strbuf *b, const char *s, size_t n);
/* Hand the string over (NULL after an allocation failure, with the buffer
 * freed); the buffer is reset. */
char *sl_strbuf__take(sl_strbuf *b);
void sl_strbuf__dispose(sl_strbuf *b);

#endif /* SL_SIGV4_H */
