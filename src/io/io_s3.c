/*
 * io_s3.c — the S3 dialect of the remote provider (s3://BUCKET/KEY): the
 * hooks of an sl_io_dialect (http.h) over s3.c and sigv4.c. A name becomes
 * the endpoint's URL (path-style or virtual-hosted, s3.h), each request is
 * signed when credentials are set (unsigned for public buckets), a whole
 * object's GET asks for the checksums the store keeps
 * (x-amz-checksum-mode), keys are sent as signed (their "//", "./" kept),
 * a single-part upload's ETag is its MD5, and s3://BUCKET/PREFIX/ is listed
 * (ListObjectsV2, every page) through the transport's requests.
 *
 * The settings (AWS_* variables, s3.h) are read once, at the first s3://
 * name; a bad one is the error of every s3:// request (it names the
 * variable). They live in one struct, `s3`.
 */
#include "io/http.h"
#include "io/s3.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static struct {
    pthread_once_t once;
    sl_s3_config cfg;
    int rc;
    char msg[SL__ERRMSG_MAX];
} s3 = {.once = PTHREAD_ONCE_INIT};

static void s3_init(void) {
    s3.rc = sl_s3__config_from_env(&s3.cfg);
    if (s3.rc < 0)
        snprintf(s3.msg, sizeof s3.msg, "%s", sl_errmsg());
}

static int s3_config(void) {
    pthread_once(&s3.once, s3_init);
    return s3.rc < 0 ? sl__error(s3.rc, "%s", s3.msg) : SL_OK;
}

static int s3_resolve(const char *name, char *url, size_t cap) {
    SL_TRY(s3_config());
    char *u;
    SL_TRY(sl_s3__object_url(&s3.cfg, name, &u));
    int n = snprintf(url, cap, "%s", u);
    sl__free(u);
    if (n < 0 || (size_t)n >= cap)
        return sl__error(SL_EINVAL, "%.200s...: URL too long", name);
    return SL_OK;
}

static int s3_sign(const char *url, int head, const char *range, sl_http_add_header add,
                   void *ctx) {
    SL_TRY(s3_config());
    /* the stored checksums come with a whole object (a range has none) */
    return sl_s3__sign(&s3.cfg, head ? "HEAD" : "GET", url, range, (int64_t)time(NULL),
                       range ? 0 : SL_S3_CHECKSUM_MODE, add, ctx);
}

static int s3_list(const char *prefix, char ***names_out, int *n_out);

const sl_io_dialect sl_io__s3_dialect = {.resolve = s3_resolve,
                                         .sign = s3_sign,
                                         .path_as_is = 1,
                                         .etag_md5 = 1,
                                         .list = s3_list,
                                         .list_form = "s3://BUCKET/PREFIX/"};

/* One ListObjectsV2 page: a signed GET of `url` into memory. */
static int list_fetch(void *user, const char *url, char **body, size_t *len) {
    const char *name = user;
    uint8_t *buf = NULL;
    sl_xfer x;
    memset(&x, 0, sizeof x);
    x.name = name;
    x.dialect = &sl_io__s3_dialect;
    x.len = UINT64_MAX;
    x.grow = &buf;
    x.fd = -1;
    long st;
    int rc = sl_http__perform(&x, url, 0, &st);
    if (rc < 0) {
        sl__free(buf);
        return rc;
    }
    *body = (char *)buf;
    *len = (size_t)x.got;
    return SL_OK;
}

static int s3_list(const char *prefix, char ***names_out, int *n_out) {
    *names_out = NULL;
    *n_out = 0;
    SL_TRY(sl_http__init());
    SL_TRY(s3_config());
    sl_s3_list l;
    memset(&l, 0, sizeof l);
    SL_TRY(sl_s3__list(&s3.cfg, prefix, list_fetch, (void *)(uintptr_t)prefix, 0, 0, &l));
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
