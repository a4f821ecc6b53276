/* error.c — status names and the thread-local error message (rule R2). */
#include "core/core.h"

#include <stdio.h>
#include <string.h>

/* Fixed-size, thread-local: setting a message never allocates, so even an
 * out-of-memory failure can be reported. */
static _Thread_local char tls_msg[SL__ERRMSG_MAX];

const char *sl_errmsg(void) { return tls_msg; }

void sl_errclear(void) { tls_msg[0] = '\0'; }

void sl__seterrmsg(const char *msg) {
    /* memmove: `msg` may point into the message (a tail of it). */
    size_t n = msg ? strnlen(msg, sizeof tls_msg - 1) : 0;
    memmove(tls_msg, msg ? msg : "", n);
    tls_msg[n] = '\0';
}

/* Formatted into a scratch buffer first: an argument may be (or point into)
 * the message itself (`sl__error(rc, "x: %s", sl_errmsg())`), and vsnprintf
 * into its own source overwrites what it has yet to read (C11 7.21.6.12:
 * copying between overlapping objects is undefined). ASan does not see such
 * an overlap inside one buffer, so it is made impossible here rather than
 * looked for at each call. To put text before the current message, call
 * sl__error_prefix. */
int sl__verror(int code, const char *fmt, va_list ap) {
    char tmp[SL__ERRMSG_MAX];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    memcpy(tls_msg, tmp, strlen(tmp) + 1);
    return code;
}

int sl_error_set(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sl__verror(code, fmt, ap);
    va_end(ap);
    return code;
}

/* The library's own name for sl_error_set: one function, two names. */
int sl__error(int code, const char *fmt, ...) __attribute__((alias("sl_error_set")));

int sl__error_prefix(int code, const char *fmt, ...) {
    char prefix[SL__ERRMSG_MAX];
    char old[SL__ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tls_msg, sizeof old);
    /* Build "prefix: old" by hand: the result is cut at the buffer's end. */
    size_t n = strlen(prefix);
    if (n > sizeof tls_msg - 1)
        n = sizeof tls_msg - 1;
    memcpy(tls_msg, prefix, n);
    size_t rest = sizeof tls_msg - 1 - n;
    const char *sep = ": ";
    for (int i = 0; i < 2 && rest; i++, rest--)
        tls_msg[n++] = sep[i];
    size_t m = strlen(old);
    if (m > rest)
        m = rest;
    memcpy(tls_msg + n, old, m);
    tls_msg[n + m] = '\0';
    return code;
}

int sl__oom(const char *what) {
    /* `what` is a literal (never the message itself): format in place. */
    snprintf(tls_msg, sizeof tls_msg, "out of memory%s%s", what ? " while " : "",
             what ? what : "");
    return SL_ENOMEM;
}

const char *sl_status_str(int status) {
    switch (status) {
    case SL_OK: return "SL_OK";
    case SL_END: return "SL_END";
    case SL_ENOMEM: return "SL_ENOMEM";
    case SL_EINVAL: return "SL_EINVAL";
    case SL_EIO: return "SL_EIO";
    case SL_ECORRUPT: return "SL_ECORRUPT";
    case SL_EUNSUPPORTED: return "SL_EUNSUPPORTED";
    case SL_EDECODE: return "SL_EDECODE";
    case SL_ELIMIT: return "SL_ELIMIT";
    case SL_ECANCELED: return "SL_ECANCELED";
    default: return "SL_E(unknown)";
    }
}

unsigned sl_version_number(void) { return SL_VERSION_NUMBER; }
const char *sl_version_string(void) { return SL_VERSION_STRING; }

const char *sl__base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}
