/*
 * record_common.c — pieces shared by the .slr writer, reader and recovery:
 * metadata blocks, the checksum, and careful file I/O.
 */
#include "record/record_format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_customMem, ZSTD_create?Ctx_advanced */
#include <zstd.h>
#include <zstd_errors.h>

uint64_t sl_record__hash(const void *p, size_t len, uint64_t seed) {
    /* Short inputs never reach XXH3's vector loop: keep them inline and skip
     * the dispatcher's indirect call (record_hash.c). */
    if (len >= 1024)
        return sl_record__hash_large(p, len, seed);
    return (uint64_t)XXH3_64bits_withSeed(p, len, (XXH64_hash_t)seed);
}

/* ---- zstd ------------------------------------------------------------------------ */

static const ZSTD_customMem zstd_mem = {sl__opaque_malloc, sl__zfree, NULL};

ZSTD_CCtx *sl_record__zstd_cctx(void) { return ZSTD_createCCtx_advanced(zstd_mem); }

ZSTD_DCtx *sl_record__zstd_dctx(void) { return ZSTD_createDCtx_advanced(zstd_mem); }

int sl_record__zstd_error(size_t code, int status, const char *what) {
    if (ZSTD_getErrorCode(code) == ZSTD_error_memory_allocation)
        return sl__oom(what);
    return sl__error(status, "%s: zstd: %s", what, ZSTD_getErrorName(code));
}

uint64_t sl_record__payload_sum(const void *p, size_t len, uint64_t record,
                                uint64_t required_features) {
    if (!(required_features & SLR_FEAT_SUM_XOR))
        return sl_record__hash(p, len, record);
    /* XXH3 with a non-zero seed derives a 192-byte secret on every call for
     * inputs over 240 bytes (~100 ns, more than hashing a small record);
     * unseeded it uses its built-in secret. The record number is bound in
     * by XOR with its own hash, which differs for every number (FORMAT.md 8). */
    uint8_t le[8];
    sl__st64(le, record);
    return sl_record__hash(p, len, 0) ^ (uint64_t)XXH3_64bits(le, sizeof le);
}

/* ---- metadata ------------------------------------------------------------------- */

void sl_record__meta_clear(slr_meta *m) {
    for (int i = 0; i < m->n; i++) {
        sl__free(m->keys[i]);
        sl__free(m->vals[i]);
    }
    sl__free(m->keys);
    sl__free(m->vals);
    memset(m, 0, sizeof *m);
}

const char *sl_record__meta_get(const slr_meta *m, const char *key) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->keys[i], key) == 0)
            return m->vals[i];
    return NULL;
}

int sl_record__meta_set(slr_meta *m, const char *key, const char *value) {
    char *v = sl__strdup(value);
    if (!v)
        return sl__oom("copying a metadata value");
    for (int i = 0; i < m->n; i++) {
        if (strcmp(m->keys[i], key) == 0) {
            sl__free(m->vals[i]);
            m->vals[i] = v;
            return SL_OK;
        }
    }
    char *k = sl__strdup(key);
    if (!k) {
        sl__free(v);
        return sl__oom("copying a metadata key");
    }
    size_t need = (size_t)m->n + 1;
    int rc = sl__grow((void **)&m->keys, &m->cap[0], need, sizeof *m->keys, 8,
                      "growing the metadata table");
    if (rc == SL_OK)
        rc = sl__grow((void **)&m->vals, &m->cap[1], need, sizeof *m->vals, 8,
                      "growing the metadata table");
    if (rc < 0) {
        sl__free(k);
        sl__free(v);
        return rc;
    }
    m->keys[m->n] = k;
    m->vals[m->n] = v;
    m->n++;
    return SL_OK;
}

/* Block: u32 count, u32 reserved (0), then per entry u32 key_len, u32 value_len,
 * key bytes, value bytes; zero padding to a multiple of 8. */
uint64_t sl_record__meta_size(const slr_meta *m) {
    uint64_t n = 8;
    for (int i = 0; i < m->n; i++)
        n += 8 + strlen(m->keys[i]) + strlen(m->vals[i]);
    return slr_align8(n);
}

void sl_record__meta_encode(const slr_meta *m, uint8_t *out) {
    uint64_t size = sl_record__meta_size(m);
    memset(out, 0, size);
    sl__st32(out, (uint32_t)m->n);
    uint8_t *p = out + 8;
    for (int i = 0; i < m->n; i++) {
        size_t kl = strlen(m->keys[i]), vl = strlen(m->vals[i]);
        sl__st32(p, (uint32_t)kl);
        sl__st32(p + 4, (uint32_t)vl);
        memcpy(p + 8, m->keys[i], kl);
        memcpy(p + 8 + kl, m->vals[i], vl);
        p += 8 + kl + vl;
    }
}

static char *dup_n(const uint8_t *p, size_t n) {
    char *s = sl__malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = 0;
    }
    return s;
}

int sl_record__meta_decode(const uint8_t *p, uint64_t len, slr_meta *m, const char *path,
                           const char *where) {
    int rc = SL_OK;
    char *k = NULL, *v = NULL;
    if (len < 8 || len % 8 || len > SLR_META_BLOCK_MAX)
        return sl__error(SL_ECORRUPT, "%s: %s: metadata block of %llu bytes", path, where,
                         (unsigned long long)len);
    uint32_t n = sl__ld32(p);
    if (sl__ld32(p + 4) != 0)
        return sl__error(SL_ECORRUPT, "%s: %s: metadata reserved field is not zero", path, where);
    uint64_t pos = 8;
    for (uint32_t i = 0; i < n; i++) {
        if (len - pos < 8)
            SL_FAIL(SL_ECORRUPT, "%s: %s: metadata entry %u runs past its block", path, where, i);
        uint32_t kl = sl__ld32(p + pos), vl = sl__ld32(p + pos + 4);
        pos += 8;
        if (kl < 1 || kl > SLR_META_KEY_MAX || vl > SLR_META_VALUE_MAX || len - pos < (uint64_t)kl + vl)
            SL_FAIL(SL_ECORRUPT, "%s: %s: metadata entry %u has bad lengths (key %u, value %u)",
                    path, where, i, kl, vl);
        if (memchr(p + pos, 0, kl) || memchr(p + pos + kl, 0, vl))
            SL_FAIL(SL_ECORRUPT, "%s: %s: metadata entry %u contains a NUL byte", path, where, i);
        k = dup_n(p + pos, kl);
        v = dup_n(p + pos + kl, vl);
        if (!k || !v)
        {
            rc = sl__oom("reading metadata");
            goto cleanup;
        }
        if (sl_record__meta_get(m, k))
            SL_FAIL(SL_ECORRUPT, "%s: %s: duplicate metadata key \"%.64s\"", path, where, k);
        SL_CHECK(sl_record__meta_set(m, k, v));
        sl__free(k);
        sl__free(v);
        k = v = NULL;
        pos += (uint64_t)kl + vl;
    }
    if (slr_align8(pos) != len)
        SL_FAIL(SL_ECORRUPT, "%s: %s: metadata block is %llu bytes, entries use %llu", path, where,
                (unsigned long long)len, (unsigned long long)pos);
    for (uint64_t q = pos; q < len; q++)
        if (p[q])
            SL_FAIL(SL_ECORRUPT, "%s: %s: metadata padding is not zero", path, where);
cleanup:
    sl__free(k);
    sl__free(v);
    if (rc < 0)
        sl_record__meta_clear(m);
    return rc;
}

/* ---- file I/O ----------------------------------------------------------------------- */

int sl_record__write_all(int fd, const void *p, size_t len, const char *path) {
    const uint8_t *b = p;
    while (len) {
        ssize_t n = write(fd, b, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return sl__error(SL_EIO, "%s: write failed: %s", path, strerror(errno));
        }
        b += n;
        len -= (size_t)n;
    }
    return SL_OK;
}

int sl_record__fsync_dir(const char *dir_path) {
    int fd = open(dir_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sl__error(SL_EIO, "%s: cannot open directory to sync: %s", dir_path, strerror(errno));
    int rc = SL_OK;
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = sl__error(SL_EIO, "%s: fsync of directory failed: %s", dir_path, strerror(errno));
    close(fd);
    return rc;
}

char *sl_record__dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        return sl__strdup(".");
    if (slash == path)
        return sl__strdup("/");
    size_t n = (size_t)(slash - path);
    char *s = sl__malloc(n + 1);
    if (s) {
        memcpy(s, path, n);
        s[n] = 0;
    }
    return s;
}

char *sl_record__join(const char *dir, const char *name) { return sl_io__join(dir, name); }
