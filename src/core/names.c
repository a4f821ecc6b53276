/* names.c — text for messages and listings: "did you mean" (valid names
 * listed closest to a wrong one first) and text appended to a fixed buffer. */
#include "core/core.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Names longer than this are compared on their first NAME_CMP bytes. */
#define NAME_CMP 64
/* At most this many names are ordered; any more follow in the given order. */
#define NAMES_SORTED 256

/* Edit distance (insert, delete, substitute; case ignored) on the stack:
 * two rows of NAME_CMP + 1. */
static int distance(const char *a, const char *b) {
    size_t la = strnlen(a, NAME_CMP), lb = strnlen(b, NAME_CMP);
    int row[2][NAME_CMP + 1];
    for (size_t j = 0; j <= lb; j++)
        row[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int *cur = row[i & 1], *prev = row[(i - 1) & 1];
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (tolower((unsigned char)a[i - 1]) !=
                                     tolower((unsigned char)b[j - 1]));
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    }
    return row[la & 1][lb];
}

const char *sl__names_closest(const char *want, const char *const *names, int n, char *buf,
                              size_t cap) {
    if (cap == 0)
        return buf;
    buf[0] = '\0';
    if (n < 0)
        for (n = 0; names[n]; n++) {
        }
    int order[NAMES_SORTED], dist[NAMES_SORTED];
    int m = n < NAMES_SORTED ? n : NAMES_SORTED;
    /* insertion sort by distance: stable, so ties keep the given order */
    for (int i = 0; i < m; i++) {
        int d = distance(want ? want : "", names[i]), k = i;
        while (k > 0 && dist[k - 1] > d) {
            order[k] = order[k - 1];
            dist[k] = dist[k - 1];
            k--;
        }
        order[k] = i;
        dist[k] = d;
    }
    size_t len = 0;
    for (int i = 0; i < n && len < cap; i++) {
        const char *s = names[i < m ? order[i] : i];
        int w = snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", s);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    return buf;
}

void sl__text_add(sl_text *t, const char *fmt, ...) {
    if (t->len >= t->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (w > 0)
        t->len += (size_t)w < t->cap - t->len ? (size_t)w : t->cap - t->len - 1;
}
