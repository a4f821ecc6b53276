/* alloc.c — the one allocation seam of the library, with failure injection
 * (rule R3 of docs/ARCHITECTURE.md: everything allocates here; failure is SL_ENOMEM). */
#include "core/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

/* fail_at == 0: injection off. Otherwise the allocation whose ordinal (counted
 * from the last sl__alloc_fail_at call) equals fail_at returns NULL. */
static _Atomic uint64_t fail_at;
static _Atomic uint64_t count;

void sl__alloc_fail_at(uint64_t n) {
    atomic_store(&count, 0);
    atomic_store(&fail_at, n);
}

uint64_t sl__alloc_count(void) { return atomic_load(&count); }

static bool inject_failure(void) {
    uint64_t n = atomic_fetch_add(&count, 1) + 1;
    uint64_t f = atomic_load_explicit(&fail_at, memory_order_relaxed);
    return f != 0 && n == f;
}

void *sl__malloc(size_t size) {
    if (inject_failure())
        return NULL;
    return malloc(size ? size : 1);
}

void *sl__calloc(size_t n, size_t size) {
    if (inject_failure())
        return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void *sl__realloc(void *p, size_t size) {
    if (inject_failure())
        return NULL;
    return realloc(p, size ? size : 1);
}

void *sl__append_zeroed(void **p, size_t n, size_t size, const char *what) {
    size_t bytes;
    unsigned char *q = NULL;
    if (sl__add_ok(n, 1, &bytes) && sl__mul_ok(bytes, size, &bytes))
        q = sl__realloc(*p, bytes);
    if (!q) {
        sl__oom(what);
        return NULL;
    }
    *p = q;
    memset(q + n * size, 0, size);
    return q + n * size;
}

int sl__grow_slow(void **p, size_t *cap, size_t need, size_t size, size_t first,
                  const char *what) {
    size_t n = *cap ? *cap : first, bytes;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2;
    if (!sl__mul_ok(n, size, &bytes))
        return sl__oom(what);
    void *q = sl__realloc(*p, bytes);
    if (!q)
        return sl__oom(what);
    *p = q;
    *cap = n;
    return SL_OK;
}

void *sl__aligned_alloc(size_t align, size_t size) {
    if (inject_failure())
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : 1) != 0)
        return NULL;
    return p;
}

void *sl__malloc_big(size_t size, size_t *cap_out) {
    if (size < SL_BIG_PAGE) {
        if (cap_out)
            *cap_out = size;
        return sl__malloc(size);
    }
    size_t n = (size + SL_BIG_PAGE - 1) & ~(SL_BIG_PAGE - 1);
    if (n < size)
        return NULL;
    void *p = sl__aligned_alloc(SL_BIG_PAGE, n);
    if (!p)
        return NULL;
#ifdef MADV_HUGEPAGE
    /* a hint: where huge pages are off or the kernel refuses, 4 KiB pages */
    (void)madvise(p, n, MADV_HUGEPAGE);
#endif
    if (cap_out)
        *cap_out = n;
    return p;
}

char *sl__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = sl__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void sl__free(void *p) { free(p); }

void *sl__zalloc(void *opaque, unsigned items, unsigned size) {
    (void)opaque;
    return sl__calloc(items, size);
}

void *sl__opaque_malloc(void *opaque, size_t size) {
    (void)opaque;
    return sl__malloc(size);
}

void sl__zfree(void *opaque, void *p) {
    (void)opaque;
    sl__free(p);
}

int sl__copy_out(const char *text, char *buf, size_t cap, size_t *len_out) {
    size_t n = strlen(text);
    if (len_out)
        *len_out = n;
    if (buf && cap) {
        size_t m = n < cap - 1 ? n : cap - 1;
        memcpy(buf, text, m);
        buf[m] = '\0';
    }
    return SL_OK;
}

/* ---- cJSON ------------------------------------------------------------------ */

static _Thread_local bool json_alloc_failed;
static pthread_once_t json_once = PTHREAD_ONCE_INIT;

static void *json_malloc(size_t size) {
    void *p = sl__malloc(size);
    if (!p)
        json_alloc_failed = true;
    return p;
}

static void json_install(void) {
    cJSON_Hooks hooks = {json_malloc, sl__free};
    cJSON_InitHooks(&hooks);
}

void sl__json_init(void) {
    pthread_once(&json_once, json_install);
    json_alloc_failed = false;
}

bool sl__json_failed(void) { return json_alloc_failed; }

int sl__json_copy_out(cJSON *doc, char *buf, size_t cap, size_t *len_out, const char *what) {
    char *text = doc && !sl__json_failed() ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (!text)
        return sl__oom(what);
    sl__copy_out(text, buf, cap, len_out);
    cJSON_free(text);
    return SL_OK;
}

int sl__json_hash(cJSON *doc, const char *what, uint64_t *out) {
    char *text = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    if (!text)
        return sl__oom(what);
    *out = XXH3_64bits(text, strlen(text));
    cJSON_free(text);
    return SL_OK;
}

int sl__json_add(cJSON *obj, const char *key, cJSON *item) {
    if (item && cJSON_AddItemToObject(obj, key, item))
        return SL_OK;
    cJSON_Delete(item);
    return sl__oom("building a JSON object");
}
