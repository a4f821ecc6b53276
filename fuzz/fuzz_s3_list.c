/*
 * fuzz_s3_list.c — the ListObjectsV2 answer parser (sl_s3__list_parse in
 * src/io/s3.c), which reads what a remote server sends.
 *
 * Input: the answer's bytes, as is. The contract checked: SL_OK with a list
 * whose every key is a non-empty NUL-free string and, when truncated, a
 * non-empty token; or SL_ECORRUPT / SL_EIO / SL_ENOMEM with a message naming
 * the request and an untouched list. A second parse of the same bytes
 * appends the same objects again. Never a crash, a leak or a hang.
 */
#include "io/s3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    sl_s3_list l = {0};
    int rc = sl_s3__list_parse((const char *)data, size, "http://fuzz/b?list-type=2", &l);
    if (rc < 0) {
        if (rc != SL_ECORRUPT && rc != SL_EIO && rc != SL_ENOMEM)
            abort();
        if (!strstr(sl_errmsg(), "http://fuzz/b?list-type=2") && rc != SL_ENOMEM)
            abort();
        if (l.n || l.v || l.next_token)
            abort();
        return 0;
    }
    for (size_t i = 0; i < l.n; i++)
        if (!l.v[i].key || !l.v[i].key[0])
            abort();
    if (l.truncated && (!l.next_token || !l.next_token[0]))
        abort();
    size_t n = l.n;
    if (sl_s3__list_parse((const char *)data, size, "again", &l) != SL_OK || l.n != 2 * n)
        abort();
    for (size_t i = 0; i < n; i++)
        if (strcmp(l.v[i].key, l.v[n + i].key) || l.v[i].size != l.v[n + i].size)
            abort();
    sl_s3__list_dispose(&l);
    return 0;
}
