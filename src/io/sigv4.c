/*
 * sigv4.c — AWS Signature Version 4 (see sigv4.h for the steps and the two
 * URI rules). SHA-256 and HMAC are OpenSSL's (libcrypto), not written here.
 *
 * Invariants:
 *   1. Every string built here goes through one sl_strbuf per step; an
 *      allocation failure anywhere is seen once, at the end of the step.
 *   2. The canonical headers are sorted by lower-cased name with a stable
 *      sort, so repeated names keep their order when joined with ','.
 */
#include "io/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- strings ------------------------------------------------------------------ */

static int grow(sl_strbuf *b, size_t more) {
    if (b->oom)
        return 0;
    if (b->n + more + 1 <= b->cap)
        return 1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + more + 1)
        cap *= 2;
    char *p = sl__realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return 0;
    }
    b->p = p;
    b->cap = cap;
    return 1;
}

void sl_strbuf__add(sl_strbuf *b, const char *s, size_t n) {
    if (!grow(b, n))
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void sl_strbuf__adds(sl_strbuf *b, const char *s) { sl_strbuf__add(b, s, strlen(s)); }

void sl_strbuf__addc(sl_strbuf *b, char c) { sl_strbuf__add(b, &c, 1); }

static int unreserved(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

void sl_strbuf__add_uri(sl_strbuf *b, const char *s, size_t n, int keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unreserved(c) || (keep_slash && c == '/')) {
            sl_strbuf__addc(b, (char)c);
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            sl_strbuf__add(b, e, 3);
        }
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void sl_strbuf__add_decoded(sl_strbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < n && (hi = hexval(s[i + 1])) >= 0 &&
            (lo = hexval(s[i + 2])) >= 0) {
            sl_strbuf__addc(b, (char)(hi << 4 | lo));
            i += 2;
        } else {
            sl_strbuf__addc(b, s[i]);
        }
    }
}

char *sl_strbuf__take(sl_strbuf *b) {
    char *p = b->oom ? NULL : b->p;
    if (b->oom)
        sl__free(b->p);
    else if (!p)
        p = sl__strdup("");
    memset(b, 0, sizeof *b);
    return p;
}

void sl_strbuf__dispose(sl_strbuf *b) {
    sl__free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- hashing ------------------------------------------------------------------ */

static void to_hex(const unsigned char *d, size_t n, char *out) {
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[2 * n] = 0;
}

static int sha256_hex(const char *s, size_t n, char out[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (!EVP_Digest(s, n, md, &len, EVP_sha256(), NULL) || len != 32)
        return sl__error(SL_ENOMEM, "SHA-256 failed (OpenSSL): out of memory?");
    to_hex(md, 32, out);
    return SL_OK;
}

static int hmac(const unsigned char *key, size_t klen, const char *msg, size_t n,
                unsigned char out[32]) {
    unsigned len = 0;
    if (!HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, n, out, &len) ||
        len != 32)
        return sl__error(SL_ENOMEM, "HMAC-SHA256 failed (OpenSSL): out of memory?");
    return SL_OK;
}

/* ---- canonical parts ---------------------------------------------------------- */

/* The generic rule: drop empty and "." segments, ".." removes the one before;
 * a trailing '/' (or a trailing "." or ".." segment) is kept as '/'. */
static void add_normalized_path(sl_strbuf *b, const char *path) {
    size_t n = strlen(path);
    /* segment starts and lengths, at most n of them */
    size_t cap = n / 2 + 2, ns = 0;
    size_t *st = sl__malloc(cap * sizeof *st), *ln = sl__malloc(cap * sizeof *ln);
    if (!st || !ln) {
        sl__free(st);
        sl__free(ln);
        b->oom = 1;
        return;
    }
    int trailing = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && path[i] == '/')
            i++;
        size_t s = i;
        while (i < n && path[i] != '/')
            i++;
        size_t l = i - s;
        trailing = i == n ? (l == 0 || (l == 1 && path[s] == '.') ||
                             (l == 2 && path[s] == '.' && path[s + 1] == '.'))
                          : 0;
        if (l == 0 || (l == 1 && path[s] == '.'))
            continue;
        if (l == 2 && path[s] == '.' && path[s + 1] == '.') {
            if (ns)
                ns--;
            continue;
        }
        st[ns] = s;
        ln[ns++] = l;
    }
    sl_strbuf__addc(b, '/');
    for (size_t k = 0; k < ns; k++) {
        sl_strbuf__add_uri(b, path + st[k], ln[k], 0);
        if (k + 1 < ns || trailing)
            sl_strbuf__addc(b, '/');
    }
    sl__free(st);
    sl__free(ln);
}

static void add_canonical_uri(sl_strbuf *b, const char *path, int s3) {
    if (!path || !*path)
        path = "/";
    if (!s3) {
        add_normalized_path(b, path);
        return;
    }
    sl_strbuf dec = {0};
    sl_strbuf__add_decoded(&dec, path, strlen(path));
    if (dec.oom) {
        b->oom = 1;
    } else {
        if (!dec.p || dec.p[0] != '/')
            sl_strbuf__addc(b, '/');
        sl_strbuf__add_uri(b, dec.p ? dec.p : "", dec.n, 1);
    }
    sl_strbuf__dispose(&dec);
}

typedef struct qpair {
    char *k, *v; /* canonical (encoded) */
} qpair;

static int qpair_cmp(const void *a, const void *b) {
    const qpair *x = a, *y = b;
    int c = strcmp(x->k, y->k);
    return c ? c : strcmp(x->v, y->v);
}

static char *recode(const char *s, size_t n) {
    sl_strbuf d = {0}, e = {0};
    sl_strbuf__add_decoded(&d, s, n);
    if (d.oom)
        return NULL;
    sl_strbuf__add_uri(&e, d.p ? d.p : "", d.n, 0);
    sl_strbuf__dispose(&d);
    return sl_strbuf__take(&e);
}

static void add_canonical_query(sl_strbuf *b, const char *q) {
    if (!q || !*q)
        return;
    size_t n = strlen(q), cap = 1;
    for (size_t i = 0; i < n; i++)
        cap += q[i] == '&';
    qpair *pv = sl__calloc(cap, sizeof *pv);
    if (!pv) {
        b->oom = 1;
        return;
    }
    size_t np = 0;
    for (size_t i = 0; i <= n;) {
        size_t s = i;
        while (i < n && q[i] != '&')
            i++;
        if (i > s) {
            const char *eq = memchr(q + s, '=', i - s);
            size_t kl = eq ? (size_t)(eq - (q + s)) : i - s;
            pv[np].k = recode(q + s, kl);
            pv[np].v = eq ? recode(eq + 1, (size_t)(q + i - eq - 1)) : recode("", 0);
            np++;
            if (!pv[np - 1].k || !pv[np - 1].v) {
                b->oom = 1;
                goto done;
            }
        }
        i++;
    }
    qsort(pv, np, sizeof *pv, qpair_cmp);
    for (size_t k = 0; k < np; k++) {
        if (k)
            sl_strbuf__addc(b, '&');
        sl_strbuf__adds(b, pv[k].k);
        sl_strbuf__addc(b, '=');
        sl_strbuf__adds(b, pv[k].v);
    }
done:
    for (size_t k = 0; k < np; k++) {
        sl__free(pv[k].k);
        sl__free(pv[k].v);
    }
    sl__free(pv);
}

typedef struct hdr {
    char *name;         /* lower-cased */
    const char *value;  /* as given */
    size_t order;
} hdr;

static int hdr_cmp(const void *a, const void *b) {
    const hdr *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* The value trimmed, with each inner run of white space made one ' ' (a
 * folded header's line breaks included). */
static void add_trimmed(sl_strbuf *b, const char *v) {
    while (*v && is_space(*v))
        v++;
    int pending = 0;
    for (; *v; v++) {
        if (is_space(*v)) {
            pending = 1;
            continue;
        }
        if (pending)
            sl_strbuf__addc(b, ' ');
        pending = 0;
        sl_strbuf__addc(b, *v);
    }
}

/* ---- signing ------------------------------------------------------------------ */

void sl_sigv4__amz_date(int64_t time_s, char buf[17]) {
    time_t t = (time_t)time_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, 17, "%Y%m%dT%H%M%SZ", &tm);
}

void sl_sigv4__out_dispose(sl_sigv4_out *out) {
    if (!out)
        return;
    sl__free(out->canonical_request);
    sl__free(out->string_to_sign);
    sl__free(out->signed_headers);
    sl__free(out->authorization);
    memset(out, 0, sizeof *out);
}

static int valid_date(const char *d) {
    if (!d || strlen(d) != 16 || d[8] != 'T' || d[15] != 'Z')
        return 0;
    for (int i = 0; i < 15; i++)
        if (i != 8 && (d[i] < '0' || d[i] > '9'))
            return 0;
    return 1;
}

int sl_sigv4__sign(const sl_sigv4_in *in, const sl_sigv4_creds *creds, sl_sigv4_out *out) {
    int rc = SL_OK;
    memset(out, 0, sizeof *out);
    hdr *hv = NULL;
    size_t nh = 0;
    sl_strbuf creq = {0}, sts = {0}, sh = {0}, auth = {0}, key = {0};
    if (!valid_date(in->amz_date))
        SL_FAIL(SL_EINVAL, "SigV4: bad date \"%s\" (want YYYYMMDDTHHMMSSZ)",
                in->amz_date ? in->amz_date : "(null)");
    if (!creds || !creds->access_key || !creds->secret_key)
        SL_FAIL(SL_EINVAL, "SigV4: no credentials to sign with");
    int add_token = creds->session_token && *creds->session_token;
    hv = sl__calloc(in->n_headers + 1, sizeof *hv);
    if (!hv)
        SL_FAIL(SL_ENOMEM, "out of memory signing a request");
    for (size_t i = 0; i < in->n_headers + (size_t)add_token; i++) {
        const char *name = i < in->n_headers ? in->headers[i].name : "x-amz-security-token";
        const char *value = i < in->n_headers ? in->headers[i].value : creds->session_token;
        if (!name[0] || strpbrk(name, "\r\n: \t"))
            SL_FAIL(SL_EINVAL, "SigV4: bad header name \"%.60s\"", name);
        size_t ln = strlen(name);
        hv[nh].name = sl__malloc(ln + 1);
        if (!hv[nh].name)
            SL_FAIL(SL_ENOMEM, "out of memory signing a request");
        for (size_t k = 0; k <= ln; k++)
            hv[nh].name[k] = (char)(name[k] >= 'A' && name[k] <= 'Z' ? name[k] + 32 : name[k]);
        hv[nh].value = value;
        hv[nh].order = nh;
        nh++;
        if (i < in->n_headers && add_token && !strcmp(hv[nh - 1].name, "x-amz-security-token"))
            add_token = 0; /* the caller put it in already */
    }
    qsort(hv, nh, sizeof *hv, hdr_cmp);

    /* 1. canonical request */
    sl_strbuf__adds(&creq, in->method);
    sl_strbuf__addc(&creq, '\n');
    add_canonical_uri(&creq, in->path, in->s3);
    sl_strbuf__addc(&creq, '\n');
    add_canonical_query(&creq, in->query);
    sl_strbuf__addc(&creq, '\n');
    for (size_t i = 0; i < nh; i++) {
        int first = i == 0 || strcmp(hv[i].name, hv[i - 1].name) != 0;
        int last = i + 1 == nh || strcmp(hv[i].name, hv[i + 1].name) != 0;
        if (first) {
            sl_strbuf__adds(&creq, hv[i].name);
            sl_strbuf__addc(&creq, ':');
            if (sh.n)
                sl_strbuf__addc(&sh, ';');
            sl_strbuf__adds(&sh, hv[i].name);
        } else {
            sl_strbuf__addc(&creq, ',');
        }
        add_trimmed(&creq, hv[i].value);
        if (last)
            sl_strbuf__addc(&creq, '\n');
    }
    sl_strbuf__addc(&creq, '\n');
    sl_strbuf__adds(&creq, sh.p ? sh.p : "");
    sl_strbuf__addc(&creq, '\n');
    sl_strbuf__adds(&creq, in->payload_hash ? in->payload_hash : SL_SIGV4_EMPTY_SHA256);
    if (creq.oom || sh.oom)
        SL_FAIL(SL_ENOMEM, "out of memory signing a request");

    /* 2. string to sign */
    char hash[65];
    SL_CHECK(sha256_hex(creq.p, creq.n, hash));
    char scope[160];
    int sn = snprintf(scope, sizeof scope, "%.8s/%s/%s/aws4_request", in->amz_date, in->region,
                      in->service);
    if (sn < 0 || (size_t)sn >= sizeof scope)
        SL_FAIL(SL_EINVAL, "SigV4: region or service name too long");
    sl_strbuf__adds(&sts, "AWS4-HMAC-SHA256\n");
    sl_strbuf__adds(&sts, in->amz_date);
    sl_strbuf__addc(&sts, '\n');
    sl_strbuf__adds(&sts, scope);
    sl_strbuf__addc(&sts, '\n');
    sl_strbuf__adds(&sts, hash);

    /* 3. signing key, 4. signature */
    sl_strbuf__adds(&key, "AWS4");
    sl_strbuf__adds(&key, creds->secret_key);
    if (sts.oom || key.oom)
        SL_FAIL(SL_ENOMEM, "out of memory signing a request");
    unsigned char k[32], k2[32];
    SL_CHECK(hmac((const unsigned char *)key.p, key.n, in->amz_date, 8, k));
    SL_CHECK(hmac(k, 32, in->region, strlen(in->region), k2));
    SL_CHECK(hmac(k2, 32, in->service, strlen(in->service), k));
    SL_CHECK(hmac(k, 32, "aws4_request", 12, k2));
    SL_CHECK(hmac(k2, 32, sts.p, sts.n, k));
    to_hex(k, 32, out->signature);

    /* 5. Authorization */
    sl_strbuf__adds(&auth, "AWS4-HMAC-SHA256 Credential=");
    sl_strbuf__adds(&auth, creds->access_key);
    sl_strbuf__addc(&auth, '/');
    sl_strbuf__adds(&auth, scope);
    sl_strbuf__adds(&auth, ", SignedHeaders=");
    sl_strbuf__adds(&auth, sh.p ? sh.p : "");
    sl_strbuf__adds(&auth, ", Signature=");
    sl_strbuf__adds(&auth, out->signature);
    if (auth.oom)
        SL_FAIL(SL_ENOMEM, "out of memory signing a request");
    out->canonical_request = sl_strbuf__take(&creq);
    out->string_to_sign = sl_strbuf__take(&sts);
    out->signed_headers = sl_strbuf__take(&sh);
    out->authorization = sl_strbuf__take(&auth);
    if (!out->canonical_request || !out->string_to_sign || !out->signed_headers ||
        !out->authorization)
        SL_FAIL(SL_ENOMEM, "out of memory signing a request");
cleanup:
    if (key.p)
        memset(key.p, 0, key.n); /* the secret */
    sl_strbuf__dispose(&key);
    sl_strbuf__dispose(&creq);
    sl_strbuf__dispose(&sts);
    sl_strbuf__dispose(&sh);
    sl_strbuf__dispose(&auth);
    for (size_t i = 0; i < nh; i++)
        sl__free(hv[i].name);
    sl__free(hv);
    if (rc < 0)
        sl_sigv4__out_dispose(out);
    return rc;
}
