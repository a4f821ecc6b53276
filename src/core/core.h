/*
 * core.h — internals shared by every layer: the allocation seam, error
 * reporting macros, small helpers. Never installed.
 */
#ifndef SL_CORE_H
#define SL_CORE_H

#include "sluice.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define SL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define SL_LIKELY(x) __builtin_expect(!!(x), 1)
#define SL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define SL_PRINTF(a, b)
#define SL_LIKELY(x) (x)
#define SL_UNLIKELY(x) (x)
#endif

/* ---- allocation seam -------------------------------------------------------
 * Every allocation in the library goes through these, so that tests can make
 * the N-th allocation fail (sl__alloc_fail_at) and check that each failure
 * gives SL_ENOMEM, a message and no leak. */
void *sl__malloc(size_t size);
void *sl__calloc(size_t n, size_t size);
void *sl__realloc(void *p, size_t size);
void *sl__aligned_alloc(size_t align, size_t size);
/* A large buffer about to be written whole (decompressed pages): from
 * SL_BIG_PAGE bytes up, aligned to and rounded up to SL_BIG_PAGE and
 * advised to the kernel as wanting transparent huge pages (madvise), so
 * that filling it faults once per 2 MiB rather than once per 4 KiB page
 * (decompressing a Parquet row group into fresh memory spent 70% of its
 * time in page faults); smaller, a plain allocation. `*cap_out` (may be
 * NULL): the bytes usable (size rounded up). Freed with sl__free. */
#define SL_BIG_PAGE ((size_t)2 << 20)
void *sl__malloc_big(size_t size, size_t *cap_out);
char *sl__strdup(const char *s);
void sl__free(void *p);
/* snprintf-style copy of `text` into buf[cap] (buf may be NULL with cap 0);
 * *len_out (may be NULL) = strlen(text). Returns SL_OK. */
int sl__copy_out(const char *text, char *buf, size_t cap, size_t *len_out);
/* Make the n-th allocation from now fail (1 = the next one); 0 disables.
 * Process-wide; for single-threaded tests. */
void sl__alloc_fail_at(uint64_t n);
/* Number of allocations since the last sl__alloc_fail_at() call. */
uint64_t sl__alloc_count(void);
/* cJSON through the seam: the first call installs cJSON's allocation hooks
 * (sl__malloc / sl__free; once per process, from any thread); every call
 * clears this thread's "cJSON could not allocate" flag, which
 * sl__json_failed() reads, so that a NULL from cJSON_Parse after an
 * allocation failure is reported as SL_ENOMEM, not as bad JSON. Call it
 * before each use of cJSON in the library. The hooks are process-global:
 * other cJSON users in the process allocate through the seam too (plain
 * malloc/free while no failure is injected). */
void sl__json_init(void);
bool sl__json_failed(void);
/* cJSON_AddItemToObject, which copies `key` and so can fail: on failure
 * `item` is deleted (it would leak) and SL_ENOMEM returned with a message. */
struct cJSON;
int sl__json_add(struct cJSON *obj, const char *key, struct cJSON *item);
/* Writes `doc` (consumed; NULL allowed) as compact JSON into buf like
 * sl__copy_out. A NULL doc, a failed allocation flagged since sl__json_init()
 * (call it before building doc) or one while printing: SL_ENOMEM
 * "out of memory while <what>". */
int sl__json_copy_out(struct cJSON *doc, char *buf, size_t cap, size_t *len_out,
                      const char *what);
/* The XXH3-64 hash of `doc`'s compact JSON text into *out (a fingerprint
 * of a spec or a source); `doc` is consumed. SL_ENOMEM "out of memory while
 * <what>" when printing fails. */
int sl__json_hash(struct cJSON *doc, const char *what, uint64_t *out);

/* zlib's allocation hooks through the seam (z_stream.zalloc / zfree; the
 * signatures are zlib's alloc_func and free_func), so that an OOM test
 * reaches inside inflate. sl__zfree is also zstd's ZSTD_freeFunction and
 * Brotli's brotli_free_func; sl__opaque_malloc their allocation side
 * (ZSTD_allocFunction, brotli_alloc_func). */
void *sl__zalloc(void *opaque, unsigned items, unsigned size);
void *sl__opaque_malloc(void *opaque, size_t size);
void sl__zfree(void *opaque, void *p);

/* The `user` of a buffer made by sl_buffer_wrap with this `release`, else
 * NULL: how a layer recognises its own wrapped buffers (the device ring). */
void *sl_buffer__wrap_user(const sl_buffer *buf, void (*release)(void *user));

/* Where a pool's bytes come from when not the heap (a device backend's
 * pinned memory): alloc/free get `ctx`; a pool made with it calls
 * retain(ctx) when created and done(ctx) when destroyed, so `ctx` outlives
 * every buffer. Each buffer's header is then a heap block of its own. */
typedef struct sl_pool_mem {
    void *(*alloc)(void *ctx, size_t size); /* NULL on failure, with the error message set */
    void (*free)(void *ctx, void *ptr);
    void (*retain)(void *ctx);
    void (*done)(void *ctx);
    void *ctx;
} sl_pool_mem;
/* sl_pool_create with the bytes from `mem` (copied). */
int sl_pool__create_mem(sl_pool **out, size_t buf_size, size_t max_cached, const sl_pool_mem *mem);
/* The `ctx` of the sl_pool_mem that made `buf`'s bytes, or NULL (heap,
 * wrapped, or a pool on the heap). */
void *sl_buffer__mem_ctx(const sl_buffer *buf);

/* Allocate `n` buffers into `pool`'s free list now, writing the first `touch`
 * bytes of each so that their pages are resident from the start. */
int sl_pool__prefill(sl_pool *pool, size_t n, size_t touch);
/* Bytes of the pool's buffers that exist (handed out or cached) and of those
 * cached on its free list (data bytes, headers not counted). Any thread,
 * without a lock: the two values may lag each other by a buffer. */
void sl_pool__bytes(const sl_pool *pool, size_t *held_out, size_t *cached_out);

/* ---- errors ----------------------------------------------------------------
 * sl__error sets this thread's message and returns `code`, so a failure is
 * one line: `return sl__error(SL_EIO, "%s: %s", path, strerror(errno));`.
 * The message buffer is a fixed thread-local array: reporting never allocates. */
#define SL__ERRMSG_MAX 512
int sl__error(int code, const char *fmt, ...) SL_PRINTF(2, 3);
int sl__verror(int code, const char *fmt, va_list ap);
/* SL_ENOMEM with a static message ("out of memory" plus what was being done). */
int sl__oom(const char *what);
/* Prefix the current message with "prefix: " (keeps the code): the one way
 * to add context to a message already set (the prefix is formatted apart,
 * so its arguments may be anything but the message itself). */
int sl__error_prefix(int code, const char *fmt, ...) SL_PRINTF(2, 3);
/* Copy a message into this thread's slot (errors carried across threads). */
void sl__seterrmsg(const char *msg);

/* The `n` names (n < 0: up to a NULL entry) as "a, b, c" in `buf`, those
 * closest to `want` first (edit distance, case ignored; ties keep the given
 * order), for messages that list the valid names after a wrong one. Cut at
 * `cap`; never allocates. Returns buf. */
const char *sl__names_closest(const char *want, const char *const *names, int n, char *buf,
                              size_t cap);

/* Forward a failure unchanged. */
#define SL_TRY(expr)                         \
    do {                                     \
        int sl__rc_ = (expr);                \
        if (SL_UNLIKELY(sl__rc_ < 0))        \
            return sl__rc_;                  \
    } while (0)

/* Set `rc` and the message, then jump to the function's `cleanup:` label. */
#define SL_FAIL(code, ...)                   \
    do {                                     \
        rc = sl__error((code), __VA_ARGS__); \
        goto cleanup;                        \
    } while (0)

/* Put "prefix: " before the current message (sl__error_prefix), set `rc`
 * and jump to cleanup. Never pass sl_errmsg() to SL_FAIL for this. */
#define SL_FAIL_PREFIX(code, ...)                   \
    do {                                            \
        rc = sl__error_prefix((code), __VA_ARGS__); \
        goto cleanup;                               \
    } while (0)

/* Forward a failure into `rc` and jump to cleanup. */
#define SL_CHECK(expr)                       \
    do {                                     \
        rc = (expr);                         \
        if (SL_UNLIKELY(rc < 0))             \
            goto cleanup;                    \
    } while (0)

/* The last component of a path (or URL), for messages (borrowed; the
 * whole string when it ends in '/'). */
const char *sl__base_name(const char *path);

/* ---- shared libraries loaded on demand ------------------------------------------ */
/* dlopen the library the setting `setting` names (a path, or a name for the
 * loader's search) when it is set (`setting` may be NULL), else the first of
 * names[0..n) that loads; its name goes to name_out. NULL on failure, with
 * `missing` saying why (the setting's value and dlerror, or names[0] and
 * `hint`: what to install). `what` names the library. Used for what only
 * some runs need (the CUDA runtime, nvJPEG, libcurl): a process that never
 * needs it never loads it, nor the libraries it depends on. */
void *sl__dlopen_first(const char *setting, const char *const *names, int n, const char *what,
                       const char *hint, char *name_out, size_t name_cap, char *missing,
                       size_t missing_cap);
/* The functions a loaded library must have: each syms[i].name found with
 * dlsym is stored at (char *)table + syms[i].off (a function pointer field).
 * 0 when all are found; else -1, with `missing` saying "LIB_NAME lacks NAME
 * (WHY)" (WHY may be NULL), and *lib closed and set to NULL. */
typedef struct sl_dlsym {
    const char *name;
    size_t off;
} sl_dlsym;
int sl__dlsym_all(void **lib, const sl_dlsym *syms, size_t n, void *table, const char *lib_name,
                  const char *why, char *missing, size_t missing_cap);

/* ---- logging ---------------------------------------------------------------- */
/* Settings from the environment, read through their rows of the table of
 * settings (settings.c); sl_settings_check() fails on a bad one first.
 * sl__setting_int: an int, bytes or mode row's value, else its default
 * (-1 where the default is not a number); sl__setting_choice: a choice
 * row's index in its values, else its default's (-1: none);
 * sl__setting_str: any row's text, NULL when unset or empty. */
long long sl__setting_int(const char *name);
int sl__setting_choice(const char *name);
const char *sl__setting_str(const char *name);

void sl__log(sl_log_level level, const char *fmt, ...) SL_PRINTF(2, 3);
#define SL_LOG_ERROR(...) sl__log(SL_LOG_ERROR, __VA_ARGS__)
#define SL_LOG_WARN(...) sl__log(SL_LOG_WARN, __VA_ARGS__)
#define SL_LOG_INFO(...) \
    do { if (sl_log_get_level() >= SL_LOG_INFO) sl__log(SL_LOG_INFO, __VA_ARGS__); } while (0)
#define SL_LOG_DEBUG(...) \
    do { if (sl_log_get_level() >= SL_LOG_DEBUG) sl__log(SL_LOG_DEBUG, __VA_ARGS__); } while (0)

/* ---- time --------------------------------------------------------------------- */
/* Monotonic time in nanoseconds. */
uint64_t sl__now_ns(void);

/* ---- checksums ----------------------------------------------------------------- */
/* CRC-32C (Castagnoli) of p[0..n), continuing from `crc` (0 to start):
 * sl__crc32c(0, "123456789", 9) == 0xe3069283. */
uint32_t sl__crc32c(uint32_t crc, const void *p, size_t n);

/* ---- CPU features (cpu_features.c) ----------------------------------------------- */
/* What the CPU and the OS support, for code that picks a SIMD kernel at run
 * time: SL_CPU_* bits, read once with cpuid and xgetbv (0 off x86-64). */
enum {
    SL_CPU_SSE41 = 1 << 0,
    SL_CPU_SSE42 = 1 << 1,
    SL_CPU_AVX2 = 1 << 2,
    SL_CPU_AVX512F = 1 << 3,
    SL_CPU_AVX512BW = 1 << 4,
    SL_CPU_AVX512VL = 1 << 5,
    SL_CPU_AVX512VBMI = 1 << 6,
};
unsigned sl__cpu_features(void);

/* ---- little-endian load/store (the .slr format is little-endian) --------------- */
static inline uint16_t sl__ld16(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint16_t)(b[0] | (b[1] << 8));
}
static inline uint32_t sl__ld32(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
           ((uint32_t)b[3] << 24);
}
static inline uint64_t sl__ld64(const void *p) {
    return (uint64_t)sl__ld32(p) | ((uint64_t)sl__ld32((const uint8_t *)p + 4) << 32);
}
static inline void sl__st16(void *p, uint16_t v) {
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8);
}
static inline void sl__st32(void *p, uint32_t v) {
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); b[2] = (uint8_t)(v >> 16); b[3] = (uint8_t)(v >> 24);
}
static inline void sl__st64(void *p, uint64_t v) {
    sl__st32(p, (uint32_t)v);
    sl__st32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

/* Checked size arithmetic: return false on overflow. */
/* SplitMix64's finaliser (sl_mix64, the public one, in rng.c), inline for
 * the loops that run it many times per sample (the shuffle's rounds). */
static inline uint64_t sl__mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
/* sl_rng_init in two steps, for a loop that draws at many indices of one
 * (seed, epoch): the key of (seed, epoch), then the generator at (index, op)
 * from it — the same generator sl_rng_init(seed, epoch, index, op) makes. */
uint64_t sl__rng_epoch_key(uint64_t seed, uint64_t epoch);
void sl__rng_init_keyed(sl_rng *rng, uint64_t epoch_key, uint64_t index, uint64_t op);
/* The first output (sl_rng_next after sl__rng_init_keyed) of the generators
 * keyed (epoch_key, index + i, op) for i in [0, n), into out[i]: for a loop
 * that draws once at each of many consecutive indices. */
void sl__rng_first_n(uint64_t epoch_key, uint64_t index, uint64_t op, size_t n,
                     uint64_t *out);
static inline bool sl__mul_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool sl__add_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* Of n >= 1 items of `stride` bytes whose uint64_t at byte `off` does not
 * decrease (a shard's first record number), the last one whose value is
 * <= key (0 when none is): which shard holds record `key`. Inline, for the
 * per-record paths. */
static inline int sl__last_at_most(const void *items, int n, size_t stride, size_t off,
                                   uint64_t key) {
    const unsigned char *b = (const unsigned char *)items + off;
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        uint64_t v;
        memcpy(&v, b + (size_t)mid * stride, sizeof v);
        if (v <= key)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* One more zeroed item of `size` bytes at the end of the array *p of n
 * items (reallocated to n + 1; unchanged on failure): the new item, or NULL
 * with SL_ENOMEM "out of memory while <what>" set (sl__oom). For short lists
 * that grow one at a time (columns, features, damaged entries). */
void *sl__append_zeroed(void **p, size_t n, size_t size, const char *what);

/* Text appended into a fixed buffer buf[cap] (cap >= 1, buf[0] set to 0 by
 * the caller): what does not fit is cut; len stays below cap and buf stays
 * terminated. */
typedef struct {
    char *buf;
    size_t cap, len;
} sl_text;
void sl__text_add(sl_text *t, const char *fmt, ...) SL_PRINTF(2, 3);

/* Room for `need` items of `size` bytes in the array *p of *cap items: when
 * short, the capacity doubles from *cap (or `first` when 0) until it holds
 * `need`, and *p is reallocated (unchanged on failure). SL_OK, or SL_ENOMEM
 * "out of memory <what>" (sl__oom). The check that there is room is inline. */
int sl__grow_slow(void **p, size_t *cap, size_t need, size_t size, size_t first,
                  const char *what);
static inline int sl__grow(void **p, size_t *cap, size_t need, size_t size, size_t first,
                           const char *what) {
    return SL_LIKELY(need <= *cap) ? SL_OK : sl__grow_slow(p, cap, need, size, first, what);
}

/* The cores this process may use (at least 1): online cores, the affinity
 * mask, the cgroup CPU quota rounded up, or SLUICE_CPUS (cpu_budget.c). */
int sl__ncpus(void);
/* Physical memory, or the cgroup memory limit when lower (bytes). */
uint64_t sl__mem_total(void);
/* CPU time used by all threads of this process (ns). */
uint64_t sl__process_cpu_ns(void);

#endif /* SL_CORE_H */
