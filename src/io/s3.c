/*
 * s3.c — S3 settings, URLs, request signing (through sigv4.c) and the
 * ListObjectsV2 answer parser (see s3.h).
 *
 * The XML parser is written here rather than taken from libxml2 because it
 * reads six elements of one small, fixed answer and must treat the rest as
 * hostile: no DOCTYPE (so no entity expansion), a depth limit, exact tag
 * matching, and only the five predefined entities and character references.
 * A whole XML library would bring a large attack surface for that.
 */
#include "io/s3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- settings ------------------------------------------------------------------ */

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int sl_s3__config_from_env(sl_s3_config *out) {
    memset(out, 0, sizeof *out);
    out->region = env("AWS_REGION");
    if (!out->region)
        out->region = env("AWS_DEFAULT_REGION");
    if (!out->region)
        out->region = "us-east-1";
    const char *ev = "AWS_ENDPOINT_URL_S3";
    out->endpoint = env(ev);
    if (!out->endpoint)
        out->endpoint = env(ev = "AWS_ENDPOINT_URL");
    if (out->endpoint) {
        const char *p = out->endpoint;
        const char *h = !strncmp(p, "http://", 7) ? p + 7 : !strncmp(p, "https://", 8) ? p + 8 : NULL;
        if (!h || !*h || *h == '/' || strpbrk(h, "?#"))
            return sl__error(SL_EINVAL, "%s=%s: not an http:// or https:// URL of a host; set "
                             "it to the store's address, e.g. http://127.0.0.1:9000", ev, p);
    }
    const char *st = env("AWS_S3_ADDRESSING_STYLE");
    if (!st || !strcmp(st, "auto"))
        out->style = SL_S3_AUTO;
    else if (!strcmp(st, "path"))
        out->style = SL_S3_PATH;
    else if (!strcmp(st, "virtual"))
        out->style = SL_S3_VIRTUAL;
    else
        return sl__error(SL_EINVAL, "AWS_S3_ADDRESSING_STYLE=%s: not one of auto, path, virtual",
                         st);
    const char *id = env("AWS_ACCESS_KEY_ID"), *secret = env("AWS_SECRET_ACCESS_KEY");
    if (!!id != !!secret)
        return sl__error(SL_EINVAL, "%s is set but %s is not: set both to sign s3:// requests, "
                         "or neither to read public buckets unsigned",
                         id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                         id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
    const char *vars[3] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"};
    for (int i = 0; i < 3; i++) {
        const char *v = env(vars[i]);
        for (const char *q = v; q && *q; q++)
            if ((unsigned char)*q < 0x20 || *q == 0x7f)
                return sl__error(SL_EINVAL, "%s holds a control character (a line break?): "
                                 "set it to the credential alone", vars[i]);
    }
    out->creds.access_key = id;
    out->creds.secret_key = secret;
    out->creds.session_token = id ? env("AWS_SESSION_TOKEN") : NULL;
    return SL_OK;
}

int sl_s3__bucket_dns_ok(const char *b, size_t n) {
    if (n < 3 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && !(c == '-' && i > 0 && i + 1 < n))
            return 0;
    }
    return 1;
}

/* ---- URLs ----------------------------------------------------------------------- */

/* s3://BUCKET[/REST]: the bucket and what follows its '/' (may be ""). */
static int split(const char *name, const char **b, size_t *bn, const char **rest) {
    if (strncmp(name, "s3://", 5) != 0)
        return sl__error(SL_EINVAL, "%s: not an s3:// name", name);
    const char *s = name + 5, *slash = strchr(s, '/');
    *b = s;
    *bn = slash ? (size_t)(slash - s) : strlen(s);
    *rest = slash ? slash + 1 : "";
    if (!*bn)
        return sl__error(SL_EINVAL, "%s: no bucket (want s3://BUCKET/KEY)", name);
    for (size_t i = 0; i < *bn; i++)
        if (strchr("?#@:% \t\r\n\\", s[i]) || (unsigned char)s[i] < 0x20)
            return sl__error(SL_EINVAL, "%s: '%c' cannot be in a bucket name", name, s[i]);
    return SL_OK;
}

/* The URL up to and including the '/' before the key: path-style
 * ENDPOINT/bucket/ or virtual-hosted SCHEME://bucket.HOST/. */
static void add_base(sl_strbuf *u, const sl_s3_config *c, const char *b, size_t bn) {
    int path = c->style == SL_S3_PATH ||
               (c->style == SL_S3_AUTO && (c->endpoint || !sl_s3__bucket_dns_ok(b, bn)));
    if (c->endpoint) {
        const char *ep = c->endpoint, *host = strstr(ep, "://") + 3;
        size_t el = strlen(ep);
        while (el > (size_t)(host - ep) && ep[el - 1] == '/')
            el--;
        if (path) {
            sl_strbuf__add(u, ep, el);
            sl_strbuf__addc(u, '/');
            sl_strbuf__add(u, b, bn);
        } else {
            sl_strbuf__add(u, ep, (size_t)(host - ep));
            sl_strbuf__add(u, b, bn);
            sl_strbuf__addc(u, '.');
            sl_strbuf__add(u, host, el - (size_t)(host - ep));
        }
    } else if (path) {
        sl_strbuf__adds(u, "https://s3.");
        sl_strbuf__adds(u, c->region);
        sl_strbuf__adds(u, ".amazonaws.com/");
        sl_strbuf__add(u, b, bn);
    } else {
        sl_strbuf__adds(u, "https://");
        sl_strbuf__add(u, b, bn);
        sl_strbuf__adds(u, ".s3.");
        sl_strbuf__adds(u, c->region);
        sl_strbuf__adds(u, ".amazonaws.com");
    }
    sl_strbuf__addc(u, '/');
}

int sl_s3__object_url(const sl_s3_config *c, const char *name, char **url_out) {
    *url_out = NULL;
    const char *b, *key;
    size_t bn;
    SL_TRY(split(name, &b, &bn, &key));
    if (!*key)
        return sl__error(SL_EINVAL, "%s: no key (want s3://BUCKET/KEY)", name);
    if (key[strlen(key) - 1] == '/')
        return sl__error(SL_EINVAL, "%s: a prefix, not an object (a name ending in '/' is "
                         "listed)", name);
    sl_strbuf u = {0};
    add_base(&u, c, b, bn);
    sl_strbuf__add_uri(&u, key, strlen(key), 1);
    *url_out = sl_strbuf__take(&u);
    return *url_out ? SL_OK : sl__oom("building an s3:// URL");
}

int sl_s3__list_url(const sl_s3_config *c, const char *name, const char *token,
                    size_t max_keys, char **url_out) {
    *url_out = NULL;
    const char *b, *prefix;
    size_t bn;
    SL_TRY(split(name, &b, &bn, &prefix));
    sl_strbuf u = {0};
    add_base(&u, c, b, bn);
    /* names in canonical (sorted) order, values encoded as SigV4 wants, so
     * the query sent is the query signed */
    sl_strbuf__addc(&u, '?');
    if (token) {
        sl_strbuf__adds(&u, "continuation-token=");
        sl_strbuf__add_uri(&u, token, strlen(token), 0);
        sl_strbuf__addc(&u, '&');
    }
    sl_strbuf__adds(&u, "encoding-type=url&list-type=2&");
    if (max_keys) {
        char mk[48];
        snprintf(mk, sizeof mk, "max-keys=%zu&", max_keys);
        sl_strbuf__adds(&u, mk);
    }
    sl_strbuf__adds(&u, "prefix=");
    sl_strbuf__add_uri(&u, prefix, strlen(prefix), 0);
    *url_out = sl_strbuf__take(&u);
    return *url_out ? SL_OK : sl__oom("building an s3:// list URL");
}

/* ---- signing -------------------------------------------------------------------- */

int sl_s3__sign(const sl_s3_config *c, const char *method, const char *url, const char *range,
                int64_t time_s, unsigned flags, sl_s3_add_header_fn add, void *hctx) {
    if (!c->creds.access_key) /* a public bucket: unsigned */
        return flags & SL_S3_CHECKSUM_MODE ? add(hctx, "x-amz-checksum-mode: ENABLED") : SL_OK;
    const char *hs = strstr(url, "://");
    if (!hs)
        return sl__error(SL_EINVAL, "%s: not a URL", url);
    if (range && strpbrk(range, "\r\n"))
        return sl__error(SL_EINVAL, "%s: a Range value with a line break", url);
    hs += 3;
    size_t hl = strcspn(hs, "/?#");
    const char *ps = hs + hl;
    size_t pl = strcspn(ps, "?#");
    const char *qs = ps[pl] == '?' ? ps + pl + 1 : "";
    size_t ql = strcspn(qs, "#");
    char *host = sl__malloc(hl + 1), *path = sl__malloc(pl + 2), *query = sl__malloc(ql + 1);
    int rc = SL_OK;
    sl_sigv4_out so = {0};
    sl_strbuf line = {0};
    if (!host || !path || !query)
        SL_FAIL(SL_ENOMEM, "out of memory signing %s", url);
    memcpy(host, hs, hl);
    host[hl] = 0;
    if (pl)
        memcpy(path, ps, pl);
    else
        path[pl++] = '/';
    path[pl] = 0;
    memcpy(query, qs, ql);
    query[ql] = 0;
    char date[17];
    sl_sigv4__amz_date(time_s, date);
    sl_sigv4_header hv[5];
    size_t nh = 0;
    hv[nh++] = (sl_sigv4_header){"host", host};
    if (range)
        hv[nh++] = (sl_sigv4_header){"range", range};
    if (flags & SL_S3_CHECKSUM_MODE)
        hv[nh++] = (sl_sigv4_header){"x-amz-checksum-mode", "ENABLED"};
    hv[nh++] = (sl_sigv4_header){"x-amz-content-sha256", SL_SIGV4_EMPTY_SHA256};
    hv[nh++] = (sl_sigv4_header){"x-amz-date", date};
    sl_sigv4_in in = {.method = method, .path = path, .query = query, .headers = hv,
                      .n_headers = nh, .amz_date = date, .region = c->region, .service = "s3",
                      .payload_hash = SL_SIGV4_EMPTY_SHA256, .s3 = 1};
    SL_CHECK(sl_sigv4__sign(&in, &c->creds, &so));
    const char *names[5] = {"x-amz-date: ", "x-amz-content-sha256: ", "x-amz-security-token: ",
                            "x-amz-checksum-mode: ", "Authorization: "};
    const char *vals[5] = {date, SL_SIGV4_EMPTY_SHA256, c->creds.session_token,
                           flags & SL_S3_CHECKSUM_MODE ? "ENABLED" : NULL, so.authorization};
    for (int i = 0; i < 5; i++) {
        if (!vals[i])
            continue;
        sl_strbuf__adds(&line, names[i]);
        sl_strbuf__adds(&line, vals[i]);
        if (line.oom)
            SL_FAIL(SL_ENOMEM, "out of memory signing %s", url);
        SL_CHECK(add(hctx, line.p));
        line.n = 0;
        line.p[0] = 0;
    }
cleanup:
    sl_strbuf__dispose(&line);
    sl_sigv4__out_dispose(&so);
    sl__free(host);
    sl__free(path);
    sl__free(query);
    return rc;
}

/* ---- ListObjectsV2 XML ------------------------------------------------------------ */

#define XML_MAX_DEPTH 64

typedef enum { F_NONE, F_TRUNC, F_TOKEN, F_ENC, F_KEY, F_SIZE, F_CODE, F_MSG } field;

typedef struct xp {
    const char *s;
    size_t n, i;
    const char *what;
    const char *nm[XML_MAX_DEPTH]; /* open element names (local part) */
    size_t nl[XML_MAX_DEPTH];
    int depth;
    int root; /* 1 ListBucketResult, 2 Error */
    int closed_root;
    field f;        /* the field being read, or F_NONE */
    sl_strbuf txt;  /* its decoded text */
    /* results */
    sl_s3_list page;
    int have_trunc, trunc, url_enc;
    char *token, *code, *msg;
    int in_contents, have_key, have_size;
    char *key;
    uint64_t size;
} xp;

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static int name_is(const char *p, size_t n, const char *lit) {
    return strlen(lit) == n && !memcmp(p, lit, n);
}

static int corrupt(xp *x, const char *why) {
    return sl__error(SL_ECORRUPT, "%s: bad ListObjectsV2 answer: %s (at byte %zu); the server "
                     "is not S3-compatible or the answer was cut", x->what, why, x->i);
}

static void put_utf8(sl_strbuf *b, unsigned long cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 63));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12);
        u[1] = (char)(0x80 | ((cp >> 6) & 63));
        u[2] = (char)(0x80 | (cp & 63));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18);
        u[1] = (char)(0x80 | ((cp >> 12) & 63));
        u[2] = (char)(0x80 | ((cp >> 6) & 63));
        u[3] = (char)(0x80 | (cp & 63));
        n = 4;
    }
    sl_strbuf__add(b, u, n);
}

/* Text from x->i up to the next '<', entities decoded into x->txt when a
 * field is being read; outside a field only white space is allowed at the
 * top level. */
static int text(xp *x) {
    while (x->i < x->n && x->s[x->i] != '<') {
        char c = x->s[x->i];
        if (c == 0)
            return corrupt(x, "a NUL byte");
        if (x->depth == 0 && !is_ws(c))
            return corrupt(x, "text outside the root element");
        if (c != '&') {
            if (x->f)
                sl_strbuf__addc(&x->txt, c);
            x->i++;
            continue;
        }
        size_t j = x->i + 1, e = j;
        while (e < x->n && e - j < 12 && x->s[e] != ';')
            e++;
        if (e >= x->n || x->s[e] != ';')
            return corrupt(x, "an '&' that does not start an entity");
        const char *p = x->s + j;
        size_t l = e - j;
        if (name_is(p, l, "amp"))
            sl_strbuf__addc(&x->txt, '&');
        else if (name_is(p, l, "lt"))
            sl_strbuf__addc(&x->txt, '<');
        else if (name_is(p, l, "gt"))
            sl_strbuf__addc(&x->txt, '>');
        else if (name_is(p, l, "quot"))
            sl_strbuf__addc(&x->txt, '"');
        else if (name_is(p, l, "apos"))
            sl_strbuf__addc(&x->txt, '\'');
        else if (l >= 2 && p[0] == '#') {
            int hex = p[1] == 'x';
            size_t k = hex ? 2 : 1;
            if (k == l)
                return corrupt(x, "an empty character reference");
            unsigned long cp = 0;
            for (; k < l; k++) {
                char d = p[k];
                int v = d >= '0' && d <= '9' ? d - '0'
                        : hex && d >= 'a' && d <= 'f' ? d - 'a' + 10
                        : hex && d >= 'A' && d <= 'F' ? d - 'A' + 10 : -1;
                if (v < 0)
                    return corrupt(x, "a bad character reference");
                cp = cp * (hex ? 16 : 10) + (unsigned long)v;
                if (cp > 0x10FFFF)
                    return corrupt(x, "a character reference past U+10FFFF");
            }
            if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF))
                return corrupt(x, "a character reference to U+0000 or a surrogate");
            put_utf8(&x->txt, cp);
        } else {
            return corrupt(x, "an unknown entity");
        }
        x->i = e + 1;
    }
    if (!x->f)
        x->txt.n = 0; /* text between elements: not kept */
    return x->txt.oom ? sl__oom("parsing a ListObjectsV2 answer") : SL_OK;
}

static field field_of(const xp *x, const char *p, size_t l) {
    if (x->root == 1 && x->depth == 1) {
        if (name_is(p, l, "IsTruncated"))
            return F_TRUNC;
        if (name_is(p, l, "NextContinuationToken"))
            return F_TOKEN;
        if (name_is(p, l, "EncodingType"))
            return F_ENC;
    }
    if (x->root == 1 && x->depth == 2 && x->in_contents) {
        if (name_is(p, l, "Key"))
            return F_KEY;
        if (name_is(p, l, "Size"))
            return F_SIZE;
    }
    if (x->root == 2 && x->depth == 1) {
        if (name_is(p, l, "Code"))
            return F_CODE;
        if (name_is(p, l, "Message"))
            return F_MSG;
    }
    return F_NONE;
}

static int open_elem(xp *x, const char *p, size_t l) {
    const char *colon = memchr(p, ':', l);
    if (colon) { /* a namespace prefix: match the local name */
        l -= (size_t)(colon + 1 - p);
        p = colon + 1;
    }
    if (x->closed_root)
        return corrupt(x, "a second root element");
    if (x->f)
        return corrupt(x, "an element inside a value");
    if (x->depth == XML_MAX_DEPTH)
        return corrupt(x, "elements nested too deep");
    if (x->depth == 0) {
        if (name_is(p, l, "ListBucketResult"))
            x->root = 1;
        else if (name_is(p, l, "Error"))
            x->root = 2;
        else
            return corrupt(x, "the root element is neither ListBucketResult nor Error");
    } else if (x->root == 1 && x->depth == 1 && name_is(p, l, "Contents")) {
        x->in_contents = 1;
        x->have_key = x->have_size = 0;
    } else {
        x->f = field_of(x, p, l);
        x->txt.n = 0;
        if (x->txt.p)
            x->txt.p[0] = 0;
    }
    x->nm[x->depth] = p;
    x->nl[x->depth++] = l;
    return SL_OK;
}

static char *take_txt(xp *x) {
    char *s = sl__malloc(x->txt.n + 1);
    if (s) {
        if (x->txt.n)
            memcpy(s, x->txt.p, x->txt.n);
        s[x->txt.n] = 0;
    }
    return s;
}

static int close_elem(xp *x, const char *p, size_t l) {
    const char *colon = memchr(p, ':', l);
    if (colon) {
        l -= (size_t)(colon + 1 - p);
        p = colon + 1;
    }
    if (!x->depth || x->nl[x->depth - 1] != l || memcmp(x->nm[x->depth - 1], p, l))
        return corrupt(x, "a closing tag that does not match the open element");
    x->depth--;
    field f = x->f;
    x->f = F_NONE;
    const char *v = x->txt.p ? x->txt.p : "";
    switch (f) {
    case F_TRUNC:
        if (!strcmp(v, "true"))
            x->trunc = 1;
        else if (!strcmp(v, "false"))
            x->trunc = 0;
        else
            return corrupt(x, "IsTruncated is neither true nor false");
        x->have_trunc = 1;
        break;
    case F_ENC:
        x->url_enc = !strcmp(v, "url");
        break;
    case F_SIZE: {
        if (!x->txt.n || x->txt.n > 20)
            return corrupt(x, "a Size that is not a byte count");
        uint64_t s = 0;
        for (size_t k = 0; k < x->txt.n; k++) {
            if (v[k] < '0' || v[k] > '9' || s > (UINT64_MAX - (uint64_t)(v[k] - '0')) / 10)
                return corrupt(x, "a Size that is not a byte count");
            s = s * 10 + (uint64_t)(v[k] - '0');
        }
        if (x->have_size)
            return corrupt(x, "two Sizes in one Contents");
        x->size = s;
        x->have_size = 1;
        break;
    }
    case F_KEY:
    case F_TOKEN:
    case F_CODE:
    case F_MSG: {
        char **dst = f == F_KEY ? &x->key : f == F_TOKEN ? &x->token : f == F_CODE ? &x->code
                                                                                   : &x->msg;
        if (f == F_KEY && (x->have_key || !x->txt.n))
            return corrupt(x, x->have_key ? "two Keys in one Contents" : "an empty Key");
        if (memchr(v, 0, x->txt.n))
            return corrupt(x, "a value with a NUL character");
        sl__free(*dst);
        if (!(*dst = take_txt(x)))
            return sl__oom("parsing a ListObjectsV2 answer");
        if (f == F_KEY)
            x->have_key = 1;
        break;
    }
    case F_NONE:
        break;
    }
    if (x->root == 1 && x->depth == 1 && x->in_contents && name_is(p, l, "Contents")) {
        x->in_contents = 0;
        if (!x->have_key || !x->have_size)
            return corrupt(x, x->have_key ? "a Contents without a Size" : "a Contents without a Key");
        sl_s3_list *pg = &x->page;
        SL_TRY(sl__grow((void **)&pg->v, &pg->cap, pg->n + 1, sizeof *pg->v, 16,
                        "parsing a ListObjectsV2 answer"));
        pg->v[pg->n].key = x->key;
        pg->v[pg->n++].size = x->size;
        x->key = NULL;
    }
    if (x->depth == 0)
        x->closed_root = 1;
    return SL_OK;
}

/* Find `end` from x->i; SL_ECORRUPT "truncated" when it is not there. */
static int skip_past(xp *x, const char *end, const char *what) {
    size_t el = strlen(end);
    for (size_t k = x->i; k + el <= x->n; k++) {
        if (!memcmp(x->s + k, end, el)) {
            x->i = k + el;
            return SL_OK;
        }
    }
    x->i = x->n;
    return corrupt(x, what);
}

static int tag(xp *x) {
    const char *s = x->s;
    size_t n = x->n, i = x->i; /* s[i] == '<' */
    if (i + 1 >= n)
        return corrupt(x, "truncated inside a tag");
    if (s[i + 1] == '?')
        return skip_past(x, "?>", "truncated inside a processing instruction");
    if (n - i >= 4 && !memcmp(s + i, "<!--", 4))
        return skip_past(x, "-->", "truncated inside a comment");
    if (n - i >= 9 && !memcmp(s + i, "<![CDATA[", 9)) {
        if (!x->depth)
            return corrupt(x, "CDATA outside the root element");
        size_t st = i + 9;
        x->i = st;
        SL_TRY(skip_past(x, "]]>", "truncated inside CDATA"));
        if (x->f)
            sl_strbuf__add(&x->txt, s + st, x->i - 3 - st);
        if (memchr(s + st, 0, x->i - 3 - st))
            return corrupt(x, "a NUL byte");
        return x->txt.oom ? sl__oom("parsing a ListObjectsV2 answer") : SL_OK;
    }
    if (s[i + 1] == '!')
        return corrupt(x, "a DOCTYPE or declaration (not allowed)");
    int closing = s[i + 1] == '/';
    size_t ns = i + 1 + (size_t)closing, ne = ns;
    while (ne < n && !is_ws(s[ne]) && s[ne] != '>' && s[ne] != '/' && s[ne] != '<' && s[ne])
        ne++;
    if (ne >= n)
        return corrupt(x, "truncated inside a tag");
    if (ne == ns)
        return corrupt(x, "a tag without a name");
    /* to the '>', over attributes and their quoted values */
    size_t k = ne;
    char q = 0;
    for (; k < n; k++) {
        char c = s[k];
        if (c == 0)
            return corrupt(x, "a NUL byte");
        if (q) {
            if (c == q)
                q = 0;
        } else if (c == '"' || c == '\'') {
            q = c;
        } else if (c == '<') {
            return corrupt(x, "a '<' inside a tag");
        } else if (c == '>') {
            break;
        }
    }
    if (k >= n)
        return corrupt(x, "truncated inside a tag");
    int empty = k > ne && s[k - 1] == '/';
    x->i = k + 1;
    if (closing) {
        for (size_t j = ne; j < k; j++)
            if (!is_ws(s[j]))
                return corrupt(x, "something after the name of a closing tag");
        return close_elem(x, s + ns, ne - ns);
    }
    SL_TRY(open_elem(x, s + ns, ne - ns));
    return empty ? close_elem(x, s + ns, ne - ns) : SL_OK;
}

static void xp_dispose(xp *x) {
    sl_strbuf__dispose(&x->txt);
    sl_s3__list_dispose(&x->page);
    sl__free(x->token);
    sl__free(x->code);
    sl__free(x->msg);
    sl__free(x->key);
}

int sl_s3__list_parse(const char *xml, size_t n, const char *what, sl_s3_list *acc) {
    xp x;
    memset(&x, 0, sizeof x);
    x.s = xml;
    x.n = n;
    x.what = what;
    int rc = SL_OK;
    while (x.i < x.n) {
        SL_CHECK(text(&x));
        if (x.i < x.n)
            SL_CHECK(tag(&x));
    }
    if (!x.closed_root)
        SL_FAIL(SL_ECORRUPT, "%s: bad ListObjectsV2 answer: %s; the server is not "
                "S3-compatible or the answer was cut", what,
                x.root ? "truncated (the root element is not closed)" : "no root element");
    if (x.root == 2)
        SL_FAIL(SL_EIO, "%s: S3 error %s: %s", what, x.code ? x.code : "(no Code)",
                x.msg ? x.msg : "(no Message)");
    if (!x.have_trunc)
        SL_FAIL(SL_ECORRUPT, "%s: bad ListObjectsV2 answer: no IsTruncated", what);
    if (x.trunc && (!x.token || !*x.token))
        SL_FAIL(SL_ECORRUPT, "%s: bad ListObjectsV2 answer: IsTruncated is true but there is "
                "no NextContinuationToken", what);
    if (x.url_enc) {
        for (size_t k = 0; k < x.page.n; k++) {
            sl_strbuf d = {0};
            const char *kk = x.page.v[k].key;
            sl_strbuf__add_decoded(&d, kk, strlen(kk));
            if (d.oom)
                SL_FAIL(SL_ENOMEM, "out of memory parsing a ListObjectsV2 answer");
            if (d.n != strlen(d.p) || !d.n) {
                sl_strbuf__dispose(&d);
                SL_FAIL(SL_ECORRUPT, "%s: bad ListObjectsV2 answer: Key %s decodes to a name "
                        "with a NUL byte or to nothing", what, kk);
            }
            sl__free(x.page.v[k].key);
            x.page.v[k].key = sl_strbuf__take(&d);
        }
    }
    /* move the page into acc */
    if (acc->cap - acc->n < x.page.n) {
        size_t cap = acc->n + x.page.n;
        sl_s3_object *nv = sl__realloc(acc->v, (cap ? cap : 1) * sizeof *nv);
        if (!nv)
            SL_FAIL(SL_ENOMEM, "out of memory parsing a ListObjectsV2 answer");
        acc->v = nv;
        acc->cap = cap;
    }
    if (x.page.n)
        memcpy(acc->v + acc->n, x.page.v, x.page.n * sizeof *x.page.v);
    acc->n += x.page.n;
    x.page.n = 0;
    acc->truncated = x.trunc;
    sl__free(acc->next_token);
    acc->next_token = x.trunc ? x.token : NULL;
    if (x.trunc)
        x.token = NULL;
cleanup:
    xp_dispose(&x);
    return rc;
}

void sl_s3__list_dispose(sl_s3_list *l) {
    if (!l)
        return;
    for (size_t k = 0; k < l->n; k++)
        sl__free(l->v[k].key);
    sl__free(l->v);
    sl__free(l->next_token);
    memset(l, 0, sizeof *l);
}

int sl_s3__list(const sl_s3_config *c, const char *name, sl_s3_fetch_fn fetch, void *user,
                size_t max_keys, size_t max_pages, sl_s3_list *out) {
    memset(out, 0, sizeof *out);
    if (!max_pages)
        max_pages = 100000;
    int rc = SL_OK;
    char *url = NULL, *body = NULL, *prev = NULL;
    for (size_t page = 0;; page++) {
        if (page == max_pages)
            SL_FAIL(SL_ECORRUPT, "%s: the listing did not end after %zu pages", name, page);
        SL_CHECK(sl_s3__list_url(c, name, out->next_token, max_keys, &url));
        size_t len = 0;
        SL_CHECK(fetch(user, url, &body, &len));
        SL_CHECK(sl_s3__list_parse(body, len, url, out));
        sl__free(body);
        body = NULL;
        sl__free(url);
        url = NULL;
        if (!out->truncated)
            break;
        if (prev && !strcmp(prev, out->next_token))
            SL_FAIL(SL_ECORRUPT, "%s: the server gave the same continuation token twice; the "
                    "listing would never end", name);
        sl__free(prev);
        if (!(prev = sl__strdup(out->next_token)))
            SL_FAIL(SL_ENOMEM, "out of memory listing %s", name);
    }
cleanup:
    sl__free(url);
    sl__free(body);
    sl__free(prev);
    if (rc < 0)
        sl_s3__list_dispose(out);
    return rc;
}
