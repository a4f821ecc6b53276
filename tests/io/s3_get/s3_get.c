/*
 * s3_get — a test client for tests/io/s3_moto.sh: reads an s3:// object or
 * lists an s3:// prefix with the signer and helpers of src/io/s3.c and
 * libcurl, against whatever the AWS_* variables name (a local S3-compatible
 * server in the test).
 *
 *   s3_get s3://bucket/key [RANGE]    the object's bytes to stdout ("bytes=a-b")
 *   s3_get -H s3://bucket/key         HEAD: prints the status and Content-Length
 *   s3_get -l s3://bucket/prefix/     "KEY<TAB>SIZE" lines, every page
 *                                     (S3_GET_MAX_KEYS=N: pages of N keys)
 *
 * Exit status: 0 on 2xx; 1 with the server's answer on stderr otherwise.
 */
#include "io/s3.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct body {
    char *p;
    size_t n;
} body;

static size_t on_data(char *d, size_t size, size_t nm, void *u) {
    body *b = u;
    size_t n = size * nm;
    char *p = sl__realloc(b->p, b->n + n + 1);
    if (!p)
        return 0;
    memcpy(p + b->n, d, n);
    b->p = p;
    b->n += n;
    p[b->n] = 0;
    return n;
}

static int add_header(void *u, const char *line) {
    struct curl_slist **l = u, *n = curl_slist_append(*l, line);
    if (!n)
        return sl__oom("a header");
    *l = n;
    return SL_OK;
}

static const sl_s3_config *cfg;

/* One signed request; the body in sl__malloc memory. */
static int request(const char *method, const char *url, const char *range, char **out,
                   size_t *len, long *status) {
    struct curl_slist *hs = NULL;
    int rc = sl_s3__sign(cfg, method, url, range, (int64_t)time(NULL), 0, add_header, &hs);
    if (rc < 0)
        return rc;
    char rl[128];
    if (range) {
        snprintf(rl, sizeof rl, "Range: %s", range);
        hs = curl_slist_append(hs, rl);
    }
    CURL *h = curl_easy_init();
    body b = {0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    /* the path as signed: curl would otherwise drop "./" and "x/../" from it,
     * and S3 keys may hold them */
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    CURLcode cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_off_t cl = -1;
    curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
    curl_easy_cleanup(h);
    curl_slist_free_all(hs);
    if (cc != CURLE_OK) {
        sl__free(b.p);
        return sl__error(SL_EIO, "%s: %s", url, curl_easy_strerror(cc));
    }
    if (*status < 200 || *status > 299) {
        rc = sl__error(SL_EIO, "%s: HTTP %ld: %.300s", url, *status, b.p ? b.p : "");
        sl__free(b.p);
        return rc;
    }
    if (!strcmp(method, "HEAD"))
        *len = (size_t)cl;
    else
        *len = b.n;
    *out = b.p;
    return SL_OK;
}

static int fetch(void *user, const char *url, char **out, size_t *len) {
    long st;
    (void)user;
    return request("GET", url, NULL, out, len, &st);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: s3_get [-l|-H] s3://bucket/key [RANGE]\n");
        return 2;
    }
    int list = !strcmp(argv[1], "-l"), head = !strcmp(argv[1], "-H");
    const char *name = argv[1 + (list || head)];
    const char *range = argc > 2 + (list || head) ? argv[2 + (list || head)] : NULL;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    sl_s3_config c;
    int rc = sl_s3__config_from_env(&c);
    cfg = &c;
    if (rc == SL_OK && list) {
        sl_s3_list l;
        const char *mk = getenv("S3_GET_MAX_KEYS");
        rc = sl_s3__list(&c, name, fetch, NULL, mk ? (size_t)strtoul(mk, NULL, 10) : 0, 0, &l);
        for (size_t i = 0; rc == SL_OK && i < l.n; i++)
            printf("%s\t%llu\n", l.v[i].key, (unsigned long long)l.v[i].size);
        if (rc == SL_OK)
            sl_s3__list_dispose(&l);
    } else if (rc == SL_OK) {
        char *url = NULL, *b = NULL;
        size_t n = 0;
        long st = 0;
        rc = sl_s3__object_url(&c, name, &url);
        if (rc == SL_OK)
            rc = request(head ? "HEAD" : "GET", url, range, &b, &n, &st);
        if (rc == SL_OK && head)
            printf("%ld %zu\n", st, n);
        else if (rc == SL_OK && n)
            fwrite(b, 1, n, stdout);
        sl__free(b);
        sl__free(url);
    }
    curl_global_cleanup();
    if (rc < 0) {
        fprintf(stderr, "s3_get: %s\n", sl_errmsg());
        return 1;
    }
    return 0;
}
