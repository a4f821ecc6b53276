/*
 * tar_build.h — tar archives built header by header for the tar source's
 * tests (test_tar.c, test_tar_lazy.c): what GNU tar writes only for huge
 * files (base-256 sizes), signed checksums, and plain shards of many small
 * members without running a tool per shard.
 */
#ifndef SL_TEST_TAR_BUILD_H
#define SL_TEST_TAR_BUILD_H

#include "test.h"
#include "source/source.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A header for `name` with `size`; `b256` writes the size in base-256,
 * `signed_sum` stores the signed-char checksum. */
static inline void put_header(uint8_t *h, const char *name, char type, uint64_t size, int b256,
                              int signed_sum) {
    memset(h, 0, 512);
    memcpy(h, name, strlen(name));
    memcpy(h + 100, "0000644", 7);
    if (b256) {
        h[124] = 0x80;
        for (int i = 0; i < 8; i++)
            h[135 - i] = (uint8_t)(size >> (8 * i));
    } else {
        snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    }
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar\0" "00", 8);
    memset(h + 148, ' ', 8);
    long sum = 0;
    for (int i = 0; i < 512; i++)
        sum += signed_sum ? (long)(int8_t)h[i] : (long)h[i];
    snprintf((char *)h + 148, 8, "%06lo", (unsigned long)sum & 0777777);
}

/* A ustar archive of regular members, in memory. */
typedef struct tar_build {
    uint8_t *p;
    size_t n, cap;
} tar_build;

static inline void tar_build_init(tar_build *b) { memset(b, 0, sizeof *b); }

static inline void tar_build_room(tar_build *b, size_t more) {
    if (b->n + more <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more)
        cap *= 2;
    b->p = realloc(b->p, cap);
    ASSERT(b->p);
    memset(b->p + b->cap, 0, cap - b->cap);
    b->cap = cap;
}

static inline void tar_build_member(tar_build *b, const char *name, const void *data, size_t n) {
    size_t padded = (n + 511) / 512 * 512;
    tar_build_room(b, 512 + padded);
    put_header(b->p + b->n, name, '0', n, 0, 0);
    memcpy(b->p + b->n + 512, data, n);
    b->n += 512 + padded;
}

/* The two zero blocks that end an archive, then the file; frees `b`. */
static inline void tar_build_write(tar_build *b, const char *path) {
    tar_build_room(b, 1024);
    b->n += 1024;
    sl_test_write_file(path, b->p, b->n);
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* The source a spec's source object describes (JSON text); the status. */
static inline int tar_build_open_spec(sl_source **out, const char *json) {
    cJSON *obj = cJSON_Parse(json);
    ASSERT(obj);
    int rc = sl_source__open_json(out, obj, "source");
    cJSON_Delete(obj);
    return rc;
}

#endif /* SL_TEST_TAR_BUILD_H */
