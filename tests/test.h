/*
 * test.h — the sluice C test runner's interface.
 *
 * A test is `SL_TEST(layer_file__case) { ... }` in any tests/<layer>/test_*.c;
 * it registers itself at start-up. The runner (tests/runner.c) runs each case
 * in its own child process with a timeout, so a crash or hang fails that case
 * alone. Assertions print both values and stop the case.
 *
 *   sluice_tests                 run all cases
 *   sluice_tests PREFIX...       run cases whose name starts with a PREFIX
 *   sluice_tests -s NAME         run one case in this process (debugging)
 *   sluice_tests --list          list case names
 *   SLUICE_TEST_TIMEOUT=S        per-case timeout in seconds (default 120)
 *
 * A case that cannot run here says so with sl_test_skip (exit status 77) or,
 * for a case that needs a GPU, sl_test_skip_gpu (78); it is never counted as
 * passed. The summary counts both; the runner exits 0 when every case passed
 * or skipped for want of a GPU, 1 when one failed, 77 when none failed but
 * one skipped for another reason (the test command allows GPU skips only; rule R10).
 */
#ifndef SL_TEST_H
#define SL_TEST_H

#include "sluice.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*sl_test_fn)(void);
void sl_test_register(const char *name, sl_test_fn fn);
/* Abort the current case (prints the location and message). */
void sl_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
/* Stop the current case as skipped, saying why (a missing tool, a CPU
 * without the instructions under test). */
void sl_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Stop the current case as skipped because it needs a GPU this machine lacks. */
void sl_test_skip_gpu(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
#define SL_TEST_EXIT_SKIP 77
#define SL_TEST_EXIT_SKIP_GPU 78
/* A fresh empty directory for this case (removed by the runner afterwards). */
const char *sl_test_tmpdir(void);
/* Join tmpdir and a name into a static-ish buffer owned by the caller. */
void sl_test_path(char *out, size_t cap, const char *name);
/* Write `n` bytes to `path` (created or truncated); fails the case on error. */
void sl_test_write_file(const char *path, const void *data, size_t n);
/* The whole file at `path`, plus a terminating zero byte (not counted in
 * *n); the caller frees it. Fails the case on error. */
unsigned char *sl_test_read_file(const char *path, size_t *n);

#define SL_TEST(name)                                               \
    static void name(void);                                         \
    __attribute__((constructor)) static void name##__register(void) { \
        sl_test_register(#name, name);                              \
    }                                                               \
    static void name(void)

#define ASSERT(cond)                                                \
    do {                                                            \
        if (!(cond))                                                \
            sl_test_fail(__FILE__, __LINE__, "assertion failed: %s", #cond); \
    } while (0)

#define ASSERT_EQ(a, b)                                             \
    do {                                                            \
        long long sl_a_ = (long long)(a), sl_b_ = (long long)(b);   \
        if (sl_a_ != sl_b_)                                         \
            sl_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, sl_a_, sl_b_); \
    } while (0)

#define ASSERT_NE(a, b)                                             \
    do {                                                            \
        long long sl_a_ = (long long)(a), sl_b_ = (long long)(b);   \
        if (sl_a_ == sl_b_)                                         \
            sl_test_fail(__FILE__, __LINE__, "%s != %s: both %lld", #a, #b, sl_a_); \
    } while (0)

#define ASSERT_U64_EQ(a, b)                                         \
    do {                                                            \
        uint64_t sl_a_ = (uint64_t)(a), sl_b_ = (uint64_t)(b);      \
        if (sl_a_ != sl_b_)                                         \
            sl_test_fail(__FILE__, __LINE__, "%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, sl_a_, sl_b_); \
    } while (0)

#define ASSERT_STR_EQ(a, b)                                         \
    do {                                                            \
        const char *sl_a_ = (a), *sl_b_ = (b);                      \
        if (strcmp(sl_a_, sl_b_) != 0)                              \
            sl_test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, sl_a_, sl_b_); \
    } while (0)

#define ASSERT_CONTAINS(hay, needle)                                \
    do {                                                            \
        const char *sl_h_ = (hay), *sl_n_ = (needle);               \
        if (!strstr(sl_h_, sl_n_))                                  \
            sl_test_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", sl_h_, sl_n_); \
    } while (0)

/* A call that must succeed: prints the status and sl_errmsg() if not. */
#define ASSERT_OK(expr)                                             \
    do {                                                            \
        int sl_rc_ = (expr);                                        \
        if (sl_rc_ != SL_OK)                                        \
            sl_test_fail(__FILE__, __LINE__, "%s: %s (%s)", #expr,  \
                         sl_status_str(sl_rc_), sl_errmsg());       \
    } while (0)

/* A call that must fail with `code`. */
#define ASSERT_RC(expr, code)                                       \
    do {                                                            \
        int sl_rc_ = (expr);                                        \
        if (sl_rc_ != (code))                                       \
            sl_test_fail(__FILE__, __LINE__, "%s: got %s, want %s (%s)", #expr, \
                         sl_status_str(sl_rc_), sl_status_str(code), sl_errmsg()); \
    } while (0)

#endif /* SL_TEST_H */
