/*
 * s3.h — what reading s3:// needs besides HTTP: the settings from the
 * environment, s3://bucket/key to a request URL, the signed headers of a
 * GET/HEAD (sigv4.h), and ListObjectsV2 for s3://bucket/prefix/ (the
 * request URLs and a parser of the XML answer). Pure: no network, no
 * libcurl; the HTTP provider sends the requests (see docs/SOURCES.md, "S3").
 *
 * Environment (read by sl_s3__config_from_env):
 *   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   both set: requests are signed;
 *                                              neither: unsigned (public
 *                                              buckets); one alone: SL_EINVAL
 *   AWS_SESSION_TOKEN          sent and signed as x-amz-security-token
 *   AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1
 *   AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL   an S3-compatible store
 *                              ("http://127.0.0.1:9000"); unset: AWS
 *   AWS_S3_ADDRESSING_STYLE    "auto" (default), "path" or "virtual"
 * Addressing: "auto" is path-style (ENDPOINT/bucket/key) when an endpoint is
 * set or the bucket name cannot be a TLS host name label (dots, upper case,
 * '_', not 3..63 characters), else virtual-hosted
 * (https://bucket.s3.REGION.amazonaws.com/key).
 *
 * Thread safety: every function may run on many threads at once; a config
 * is read-only after sl_s3__config_from_env.
 */
#ifndef SL_S3_H
#define SL_S3_H

#include "io/sigv4.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { SL_S3_AUTO = 0, SL_S3_PATH, SL_S3_VIRTUAL } sl_s3_style;

typedef struct sl_s3_config {
    /* Borrowed from the environment (or the caller): must outlive the config. */
    const char *region;
    const char *endpoint;  /* NULL: AWS */
    sl_s3_style style;
    sl_sigv4_creds creds;  /* access_key NULL: unsigned */
} sl_s3_config;

/* Settings from the environment (above). SL_EINVAL naming the variable for a
 * bad AWS_S3_ADDRESSING_STYLE, an endpoint that is not http(s)://HOST, or
 * one credential without the other. */
int sl_s3__config_from_env(sl_s3_config *out);

/* Whether a bucket name can be the first label of a host name under TLS
 * (virtual-hosted addressing): 3..63 of a-z 0-9 '-', starting and ending
 * with a letter or digit. */
int sl_s3__bucket_dns_ok(const char *bucket, size_t n);

/* The URL of s3://bucket/key, the key percent-encoded ('/' kept), in
 * sl__malloc memory (caller frees). SL_EINVAL naming `name` when it is not
 * s3://BUCKET/KEY. A name ending in '/' is a prefix: use sl_s3__list_url. */
int sl_s3__object_url(const sl_s3_config *c, const char *name, char **url_out);

/* The URL of one ListObjectsV2 page for s3://bucket/prefix (prefix may be
 * empty): list-type=2, prefix, encoding-type=url, continuation-token when
 * `token` is not NULL, max-keys when `max_keys` is not 0 (the server's
 * default, 1000 on AWS); the query is already in canonical order. */
int sl_s3__list_url(const sl_s3_config *c, const char *name, const char *token,
                    size_t max_keys, char **url_out);

/* Add the headers that sign a GET or HEAD of `url` (x-amz-date,
 * x-amz-content-sha256, x-amz-security-token, Authorization), each as one
 * "Name: value" line through add(hctx, line). `range` is the Range header's
 * value the request carries (signed too) or NULL. Adds nothing when the
 * config has no credentials. The payload hash is that of the empty body
 * (GET/HEAD send none): every SigV4 S3 implementation accepts it, where
 * UNSIGNED-PAYLOAD is an S3 extension some compatible stores lack. */
typedef int (*sl_s3_add_header_fn)(void *hctx, const char *line);
/* sl_s3__sign flags: also send (and sign) "x-amz-checksum-mode: ENABLED", so
 * that the answer carries the object's stored checksums (x-amz-checksum-*);
 * sent unsigned when the config has no credentials. */
#define SL_S3_CHECKSUM_MODE 0x1u
int sl_s3__sign(const sl_s3_config *c, const char *method, const char *url, const char *range,
                int64_t time_s, unsigned flags, sl_s3_add_header_fn add, void *hctx);

/* ---- ListObjectsV2 answers ----------------------------------------------------- */

typedef struct sl_s3_object {
    char *key;     /* the whole key (decoded), sl__malloc */
    uint64_t size;
} sl_s3_object;

typedef struct sl_s3_list {
    sl_s3_object *v;
    size_t n, cap;
    int truncated;     /* the last page parsed said IsTruncated=true */
    char *next_token;  /* its NextContinuationToken (NULL when not truncated) */
} sl_s3_list;

/* Parse one ListObjectsV2 answer (xml[0..n), no NUL needed), appending its
 * objects to `acc` and setting truncated/next_token. `what` names the
 * request in messages (the URL). SL_ECORRUPT naming `what` and the cause for
 * anything that is not a whole, well-formed answer (truncated, mismatched
 * tags, an unknown entity, a Contents without Key or Size, a bad Size,
 * IsTruncated true without a token, a DOCTYPE); SL_EIO with S3's Code and
 * Message for an <Error> answer. On failure `acc` keeps what it had. */
int sl_s3__list_parse(const char *xml, size_t n, const char *what, sl_s3_list *acc);
void sl_s3__list_dispose(sl_s3_list *l);

/* List every object under s3://bucket/prefix: page after page through
 * fetch(user, url, &body, &len) (the HTTP provider's GET of the signed URL;
 * body in sl__malloc memory, freed here), until a page is not truncated.
 * A token that does not change, or more than `max_pages` pages (0: 100000),
 * is SL_ECORRUPT (a server that never ends the listing). */
typedef int (*sl_s3_fetch_fn)(void *user, const char *url, char **body, size_t *len);
int sl_s3__list(const sl_s3_config *c, const char *name, sl_s3_fetch_fn fetch, void *user,
                size_t max_keys, size_t max_pages, sl_s3_list *out);

#endif /* SL_S3_H */
