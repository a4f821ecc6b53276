/* params.c — checking a JSON object against a parameter table (params.h). */
#include "core/params.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Whole numbers are exact in a double up to 2^53. */
#define WHOLE_MAX 9007199254740992.0
/* At most this many keys are listed after an unknown one. */
#define LIST_MAX 64

/* ---- walking a table (fragments included) -------------------------------------- */

typedef int (*visit_fn)(const sl_param *p, size_t offset, void *ctx);

/* Call fn for every entry but INCLUDEs, with its offset from the struct's
 * start (SL_PARAM_NOWHERE when nothing is written); stops at fn's first
 * non-zero answer and returns it. */
static int walk(const sl_param *ps, size_t base, visit_fn fn, void *ctx) {
    for (const sl_param *p = ps; p && p->key; p++) {
        size_t off = base == SL_PARAM_NOWHERE || p->offset == SL_PARAM_NOWHERE
                         ? SL_PARAM_NOWHERE
                         : base + p->offset;
        int rc = p->type == SL_PARAM_INCLUDE ? walk(p->fragment, off, fn, ctx) : fn(p, off, ctx);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct {
    const char *key;
    const sl_param *found;
} find_ctx;

static int find_visit(const sl_param *p, size_t off, void *ctx) {
    (void)off;
    find_ctx *f = ctx;
    if (strcmp(p->key, f->key) != 0)
        return 0;
    f->found = p;
    return 1;
}

const sl_param *sl_params_find(const sl_param_table *t, const char *key) {
    find_ctx f = {key ? key : "", NULL};
    walk(t->params, 0, find_visit, &f);
    return f.found;
}

typedef struct {
    const char *names[LIST_MAX];
    int n;
} list_ctx;

static int list_visit(const sl_param *p, size_t off, void *ctx) {
    (void)off;
    list_ctx *l = ctx;
    if (!(p->flags & SL_PARAM_HIDDEN) && l->n < LIST_MAX)
        l->names[l->n++] = p->key;
    return 0;
}

const char *sl_params_names(const sl_param_table *t, const char *want, char *buf, size_t cap) {
    list_ctx l = {.n = 0};
    walk(t->params, 0, list_visit, &l);
    return sl__names_closest(want, l.names, l.n, buf, cap);
}

/* ---- messages -------------------------------------------------------------------- */

static int code_of(const sl_param_table *t) { return t->code ? t->code : SL_EINVAL; }

/* "FIELD.KEY: TAIL", "KEY: TAIL" at the top, or `FIELD: "KEY" TAIL` for a
 * quoted table (where `missing` reads "is missing"). */
SL_PRINTF(4, 5)
static int key_error(const sl_param_table *t, const char *field, const char *key,
                     const char *fmt, ...) {
    char tail[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    if (t->flags & SL_PARAMS_QUOTED)
        return sl__error(code_of(t), "%s: \"%s\" %s", field ? field : "", key, tail);
    if (field && *field)
        return sl__error(code_of(t), "%s.%s: %s", field, key, tail);
    return sl__error(code_of(t), "%s: %s", key, tail);
}

int sl_params_unknown(const sl_param_table *t, const char *field, const char *key,
                      const char *const *more) {
    list_ctx l = {.n = 0};
    walk(t->params, 0, list_visit, &l);
    for (int i = 0; more && more[i] && l.n < LIST_MAX; i++)
        l.names[l.n++] = more[i];
    char list[384];
    sl__names_closest(key, l.names, l.n, list, sizeof list);
    const char *noun = t->noun ? t->noun : "key";
    if (t->what)
        return key_error(t, field, key, "unknown %s for %s (%ss: %s)", noun, t->what, noun, list);
    return key_error(t, field, key, "unknown %s (%ss: %s)", noun, noun, list);
}

static int has_min(const sl_param *p) { return !(p->min == 0 && p->max == 0); }
static int has_max(const sl_param *p) { return has_min(p) && p->max >= p->min; }

/* A string's or a list's length bounds in words: "a list of 1 to 4 entries",
 * "a non-empty string", "a list". */
static void sized(const sl_param *p, char *buf, size_t cap, const char *noun,
                  const char *unit) {
    if (has_max(p))
        snprintf(buf, cap, "a %s of %.15g to %.15g %s", noun, p->min, p->max, unit);
    else if (has_min(p) && p->min >= 1)
        snprintf(buf, cap, "a non-empty %s", noun);
    else
        snprintf(buf, cap, "a %s", noun);
}

/* The allowed values in words: what follows "must be ". */
static const char *expected(const sl_param *p, char *buf, size_t cap) {
    if (p->expect)
        return p->expect;
    const char *or_auto = p->flags & SL_PARAM_OR_AUTO ? " or \"auto\"" : "";
    switch (p->type) {
    case SL_PARAM_BOOL:
        snprintf(buf, cap, "%s", p->flags & SL_PARAM_OR_AUTO ? "\"auto\", true or false"
                                                             : "true or false");
        break;
    case SL_PARAM_INT:
    case SL_PARAM_INT64:
    case SL_PARAM_UINT64:
        if (has_max(p))
            snprintf(buf, cap, "a whole number from %.15g to %.15g%s", p->min, p->max, or_auto);
        else if (has_min(p))
            snprintf(buf, cap, "a whole number >= %.15g%s", p->min, or_auto);
        else
            snprintf(buf, cap, "a whole number%s", or_auto);
        break;
    case SL_PARAM_DOUBLE:
        if (has_max(p))
            snprintf(buf, cap, "a number from %g to %g", p->min, p->max);
        else if (has_min(p))
            snprintf(buf, cap, "a number >= %g", p->min);
        else
            snprintf(buf, cap, "a number");
        break;
    case SL_PARAM_BYTES:
        snprintf(buf, cap, "a whole number of bytes >= %.15g or a string such as \"512M\" "
                           "(K, M, G, T)", has_min(p) ? p->min : 0);
        break;
    case SL_PARAM_STRING:
        sized(p, buf, cap, "string", "bytes");
        break;
    case SL_PARAM_ENUM: {
        size_t n = 0;
        buf[0] = '\0';
        for (int i = 0; p->names && p->names[i] && n < cap; i++) {
            const char *sep = i == 0 ? "" : p->names[i + 1] ? ", " : " or ";
            int w = snprintf(buf + n, cap - n, "%s\"%s\"", sep, p->names[i]);
            if (w < 0)
                break;
            n += (size_t)w;
        }
        break;
    }
    case SL_PARAM_ARRAY:
        sized(p, buf, cap, "list", "entries");
        break;
    case SL_PARAM_OBJECT:
        snprintf(buf, cap, "an object");
        break;
    default:
        snprintf(buf, cap, "a JSON value");
        break;
    }
    return buf;
}

const char *sl_param_expected(const sl_param *p, char *buf, size_t cap) {
    return expected(p, buf, cap);
}

/* The one message of a bad value, whether it came from JSON, Python or the
 * environment: "KEY: must be EXPECTED" and, where the value is worth
 * repeating, " (got GOT)". */
int sl_param_must(const sl_param_table *t, const sl_param *p, const char *field,
                  const char *got) {
    char buf[256];
    if (got)
        return key_error(t, field, p->key, "must be %s (got %s)", expected(p, buf, sizeof buf),
                         got);
    return key_error(t, field, p->key, "must be %s", expected(p, buf, sizeof buf));
}

static int bad_value(const sl_param_table *t, const sl_param *p, const char *field) {
    return sl_param_must(t, p, field, NULL);
}

static int out_of_range(const sl_param_table *t, const sl_param *p, const char *field,
                        double got) {
    char num[32];
    snprintf(num, sizeof num, "%.15g", got);
    return sl_param_must(t, p, field, num);
}

/* ---- reading one value ----------------------------------------------------------- */

static int is_auto(const cJSON *v) { return cJSON_IsString(v) && !strcmp(v->valuestring, "auto"); }

/* A size written as text: a number with an optional K/M/G/T (1024s) and
 * B/iB ("512M", "20GiB", "1000"). */
static int parse_bytes_text(const char *s, double *out) {
    char *end;
    double x = strtod(s, &end);
    if (end == s)
        return -1;
    static const char units[] = "KMGT";
    const char *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (*end && !u)
        return -1;
    if (u) {
        x *= (double)((uint64_t)1 << (10 * (u - units + 1)));
        end++;
        if (!strcmp(end, "iB") || !strcmp(end, "B"))
            end += strlen(end);
    } else if (!strcmp(end, "B")) {
        end++;
    }
    if (*end)
        return -1;
    *out = x;
    return 0;
}

/* A size: a number, or a string parse_bytes_text reads. */
static int parse_bytes(const cJSON *v, double *out) {
    double x;
    if (cJSON_IsNumber(v)) {
        x = v->valuedouble;
    } else if (cJSON_IsString(v)) {
        if (parse_bytes_text(v->valuestring, &x) < 0)
            return -1;
    } else {
        return -1;
    }
    *out = x;
    return 0;
}

static void put_default(const sl_param *p, void *dst) {
    if (!dst)
        return;
    switch (p->type) {
    case SL_PARAM_BOOL:
    case SL_PARAM_INT:
    case SL_PARAM_ENUM:
        *(int *)dst = (int)p->def;
        break;
    case SL_PARAM_INT64:
        *(int64_t *)dst = (int64_t)p->def;
        break;
    case SL_PARAM_UINT64:
    case SL_PARAM_BYTES:
        *(uint64_t *)dst = (uint64_t)p->def;
        break;
    case SL_PARAM_DOUBLE:
        *(double *)dst = p->def;
        break;
    case SL_PARAM_STRING:
        *(const char **)dst = p->def_str;
        break;
    case SL_PARAM_ARRAY:
    case SL_PARAM_OBJECT:
    case SL_PARAM_ANY:
        *(const cJSON **)dst = NULL;
        break;
    default:
        break;
    }
}

/* The whole numbers an INT, INT64 or UINT64 entry takes: its type's range
 * within the entry's bounds. */
static void whole_range(const sl_param *p, double *lo, double *hi) {
    *lo = p->type == SL_PARAM_UINT64 ? 0 : p->type == SL_PARAM_INT ? INT_MIN : -WHOLE_MAX;
    *hi = p->type == SL_PARAM_INT ? INT_MAX : WHOLE_MAX;
    if (has_min(p) && p->min > *lo)
        *lo = p->min;
    if (has_max(p) && p->max < *hi)
        *hi = p->max;
}

/* A whole number within the entry's bounds and its type's range. */
static int read_whole(const sl_param_table *t, const sl_param *p, const cJSON *v,
                      const char *field, double *out) {
    if (!cJSON_IsNumber(v))
        return bad_value(t, p, field);
    double d = v->valuedouble, lo, hi;
    whole_range(p, &lo, &hi);
    if (!isfinite(d) || d != floor(d) || d < lo || d > hi)
        return out_of_range(t, p, field, d);
    *out = d;
    return SL_OK;
}

/* Store a whole number at an INT, INT64 or UINT64 entry's storage. */
static void put_whole(const sl_param *p, double d, void *dst) {
    if (!dst)
        return;
    if (p->type == SL_PARAM_INT)
        *(int *)dst = (int)d;
    else if (p->type == SL_PARAM_INT64)
        *(int64_t *)dst = (int64_t)d;
    else
        *(uint64_t *)dst = (uint64_t)d;
}

/* A size within the entry's bounds (a whole number of bytes). */
static int bytes_ok(const sl_param *p, double d) {
    return d >= 0 && d <= 9.0e18 && d == floor(d) && !(has_min(p) && d < p->min) &&
           !(has_max(p) && d > p->max);
}

int sl_param_read(const sl_param_table *t, const sl_param *p, const cJSON *obj,
                  const char *field, void *dst) {
    return sl_param_value(t, p, cJSON_GetObjectItemCaseSensitive(obj, p->key), field, dst);
}

int sl_param_value(const sl_param_table *t, const sl_param *p, const cJSON *v,
                   const char *field, void *dst) {
    if (!v) {
        if (p->flags & SL_PARAM_REQUIRED)
            return key_error(t, field, p->key, "%s",
                             t->flags & SL_PARAMS_QUOTED ? "is missing" : "missing");
        put_default(p, dst);
        return SL_OK;
    }
    double d = 0;
    switch (p->type) {
    case SL_PARAM_BOOL:
        if (p->flags & SL_PARAM_OR_AUTO && is_auto(v))
            d = -1;
        else if (cJSON_IsBool(v))
            d = cJSON_IsTrue(v) ? 1 : 0;
        else
            return bad_value(t, p, field);
        if (dst)
            *(int *)dst = (int)d;
        return SL_OK;
    case SL_PARAM_INT:
    case SL_PARAM_INT64:
    case SL_PARAM_UINT64:
        if (p->flags & SL_PARAM_OR_AUTO && is_auto(v))
            d = -1;
        else
            SL_TRY(read_whole(t, p, v, field, &d));
        put_whole(p, d, dst);
        return SL_OK;
    case SL_PARAM_DOUBLE:
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return bad_value(t, p, field);
        d = v->valuedouble;
        if ((has_min(p) && d < p->min) || (has_max(p) && d > p->max))
            return out_of_range(t, p, field, d);
        if (dst)
            *(double *)dst = d;
        return SL_OK;
    case SL_PARAM_BYTES:
        if (parse_bytes(v, &d) < 0 || !bytes_ok(p, d))
            return bad_value(t, p, field);
        if (dst)
            *(uint64_t *)dst = (uint64_t)d;
        return SL_OK;
    case SL_PARAM_STRING: {
        if (!cJSON_IsString(v))
            return bad_value(t, p, field);
        double n = (double)strlen(v->valuestring);
        if ((has_min(p) && n < p->min) || (has_max(p) && n > p->max))
            return bad_value(t, p, field);
        if (dst)
            *(const char **)dst = v->valuestring;
        return SL_OK;
    }
    case SL_PARAM_ENUM:
        for (int i = 0; cJSON_IsString(v) && p->names && p->names[i]; i++)
            if (!strcmp(v->valuestring, p->names[i])) {
                if (dst)
                    *(int *)dst = i;
                return SL_OK;
            }
        return bad_value(t, p, field);
    case SL_PARAM_ARRAY: {
        if (!cJSON_IsArray(v))
            return bad_value(t, p, field);
        double n = (double)cJSON_GetArraySize(v);
        if ((has_min(p) && n < p->min) || (has_max(p) && n > p->max))
            return bad_value(t, p, field);
        break;
    }
    case SL_PARAM_OBJECT:
        if (!cJSON_IsObject(v))
            return bad_value(t, p, field);
        break;
    default:
        break;
    }
    if (dst)
        *(const cJSON **)dst = v;
    return SL_OK;
}

/* ---- a value written as text ------------------------------------------------------ */

int sl_param_text(const sl_param_table *t, const sl_param *p, const char *text,
                  const char *field, void *dst) {
    char got[160];
    snprintf(got, sizeof got, "\"%.120s%s\"", text, strlen(text) > 120 ? "..." : "");
    double d;
    switch (p->type) {
    case SL_PARAM_INT:
    case SL_PARAM_INT64:
    case SL_PARAM_UINT64: {
        char *end;
        errno = 0;
        long long x = strtoll(text, &end, 10);
        double lo, hi;
        whole_range(p, &lo, &hi);
        if (end == text || *end || errno || (double)x < lo || (double)x > hi)
            break;
        put_whole(p, (double)x, dst);
        return SL_OK;
    }
    case SL_PARAM_BYTES:
        if (parse_bytes_text(text, &d) < 0 || !bytes_ok(p, d))
            break;
        if (dst)
            *(uint64_t *)dst = (uint64_t)d;
        return SL_OK;
    case SL_PARAM_ENUM:
        /* in any case, as a shell user writes it (SLUICE_LOG=DEBUG); JSON
         * values are matched exactly */
        for (int i = 0; p->names && p->names[i]; i++)
            if (!strcasecmp(text, p->names[i])) {
                if (dst)
                    *(int *)dst = i;
                return SL_OK;
            }
        break;
    case SL_PARAM_STRING: {
        double n = (double)strlen(text);
        if ((has_min(p) && n < p->min) || (has_max(p) && n > p->max))
            break;
        if (dst)
            *(const char **)dst = text;
        return SL_OK;
    }
    default: /* a table's mistake: BOOL, DOUBLE and JSON values are not read from text */
        break;
    }
    return t ? sl_param_must(t, p, field, got) : SL_EINVAL;
}

/* ---- a whole object -------------------------------------------------------------- */

typedef struct {
    const sl_param_table *t;
    const cJSON *obj;
    const char *field;
    char *out;
    int rc;
} read_ctx;

static int read_visit(const sl_param *p, size_t off, void *ctx) {
    read_ctx *r = ctx;
    void *dst = r->out && off != SL_PARAM_NOWHERE ? r->out + off : NULL;
    r->rc = sl_param_read(r->t, p, r->obj, r->field, dst);
    return r->rc < 0;
}

int sl_params_read(const sl_param_table *t, const cJSON *obj, const char *field, void *out) {
    if (!cJSON_IsObject(obj)) {
        if (field && *field)
            return sl__error(code_of(t), "%s: must be an object", field);
        return sl__error(code_of(t), "must be a JSON object");
    }
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        const sl_param *p = sl_params_find(t, k);
        if (!p && !(t->flags & SL_PARAMS_OPEN))
            return sl_params_unknown(t, field, k, NULL);
        /* a key given twice: only the first would be read */
        for (const cJSON *dup = it->next; p && dup; dup = dup->next)
            if (dup->string && !strcmp(dup->string, k))
                return key_error(t, field, k, "%s", "given twice");
    }
    read_ctx r = {t, obj, field, out, SL_OK};
    walk(t->params, 0, read_visit, &r);
    return r.rc;
}

static int default_visit(const sl_param *p, size_t off, void *ctx) {
    if (off != SL_PARAM_NOWHERE)
        put_default(p, (char *)ctx + off);
    return 0;
}

void sl_params_defaults(const sl_param_table *t, void *out) {
    walk(t->params, 0, default_visit, out);
}

/* ---- documentation --------------------------------------------------------------- */

const char *sl_param_type_name(const sl_param *p) {
    static const char *const names[] = {"bool",   "int",    "int",    "uint64",
                                        "number", "bytes",  "string", "enum",
                                        "list",   "object", "any",    "include"};
    return names[p->type];
}

const char *sl_param_default(const sl_param *p, char *buf, size_t cap) {
    buf[0] = '\0';
    if (p->flags & (SL_PARAM_REQUIRED | SL_PARAM_UNSET))
        return buf;
    if (p->type == SL_PARAM_STRING && p->def_str)
        snprintf(buf, cap, "\"%s\"", p->def_str);
    else if (p->type == SL_PARAM_ENUM && p->names)
        snprintf(buf, cap, "\"%s\"", p->names[(int)p->def]);
    else if (p->type == SL_PARAM_BOOL)
        snprintf(buf, cap, "%s", p->def < 0 ? "\"auto\"" : p->def ? "true" : "false");
    else if (p->type <= SL_PARAM_BYTES) {
        /* a default outside the range means "not set": the doc says what then */
        if (p->def < 0 && p->flags & SL_PARAM_OR_AUTO)
            snprintf(buf, cap, "\"auto\"");
        else if (!(has_min(p) && p->def < p->min) && !(has_max(p) && p->def > p->max))
            snprintf(buf, cap, "%.15g", p->def);
    }
    return buf;
}

static int doc_visit(const sl_param *p, size_t off, void *ctx) {
    (void)off;
    sl_text *d = ctx;
    if (p->flags & SL_PARAM_HIDDEN)
        return 0;
    char range[256], def[128];
    sl__text_add(d, "  %-18s %s", p->key, sl_param_type_name(p));
    if (p->flags & SL_PARAM_REQUIRED)
        sl__text_add(d, ", required");
    else if (*sl_param_default(p, def, sizeof def))
        sl__text_add(d, ", default %s", def);
    if (p->type != SL_PARAM_ANY && p->type != SL_PARAM_OBJECT)
        sl__text_add(d, ": %s", expected(p, range, sizeof range));
    sl__text_add(d, "%s%s\n", p->doc ? ". " : "", p->doc ? p->doc : "");
    return 0;
}

typedef struct {
    int want, n;
    const sl_param *found;
} nth_ctx;

static int nth_visit(const sl_param *p, size_t off, void *ctx) {
    (void)off;
    nth_ctx *c = ctx;
    if (p->flags & SL_PARAM_HIDDEN)
        return 0;
    if (c->n++ == c->want)
        c->found = p;
    return 0;
}

int sl_params_nth(const sl_param_table *t, int i, const sl_param **out) {
    nth_ctx c = {i, 0, NULL};
    walk(t->params, 0, nth_visit, &c);
    if (out)
        *out = c.found;
    return c.n;
}

size_t sl_params_doc(const sl_param_table *t, char *buf, size_t cap) {
    sl_text d = {buf, cap, 0};
    if (cap)
        buf[0] = '\0';
    walk(t->params, 0, doc_visit, &d);
    return d.len;
}
