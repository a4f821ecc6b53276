/* runner.c — the C test runner: one child process per case, with a timeout. */
#include "test.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *name;
    sl_test_fn fn;
} test_case;

static test_case *cases;
static size_t ncases, capcases;
static char tmpdir[512];

void sl_test_register(const char *name, sl_test_fn fn) {
    if (ncases == capcases) {
        capcases = capcases ? capcases * 2 : 64;
        cases = realloc(cases, capcases * sizeof *cases);
        if (!cases)
            abort();
    }
    cases[ncases].name = name;
    cases[ncases].fn = fn;
    ncases++;
}

void sl_test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    _exit(1);
}

static void remove_tmpdir(void);

__attribute__((noreturn)) static void vskip(int status, const char *what, const char *fmt,
                                            va_list ap) {
    fprintf(stderr, "    %s: ", what);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    fflush(stdout);
    remove_tmpdir();
    _exit(status);
}

void sl_test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vskip(SL_TEST_EXIT_SKIP, "SKIP", fmt, ap);
}

void sl_test_skip_gpu(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vskip(SL_TEST_EXIT_SKIP_GPU, "SKIP (no GPU)", fmt, ap);
}

const char *sl_test_tmpdir(void) { return tmpdir; }

void sl_test_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

static int cmp_case(const void *a, const void *b) {
    return strcmp(((const test_case *)a)->name, ((const test_case *)b)->name);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

static void make_tmpdir(const char *name) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/sluice-test-%s-XXXXXX", base ? base : "/tmp", name);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(2);
    }
}

static void remove_tmpdir(void) {
    if (tmpdir[0] && !getenv("SLUICE_TEST_KEEP"))
        nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int matches(const char *name, int nprefix, char **prefixes) {
    if (nprefix == 0)
        return 1;
    for (int i = 0; i < nprefix; i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
            return 1;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

enum { RES_PASS, RES_FAIL, RES_SKIP, RES_SKIP_GPU };

/* Run one case in a child; returns a RES_*. */
static int run_forked(const test_case *tc, int timeout_s) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return RES_FAIL;
    }
    if (pid == 0) {
        make_tmpdir(tc->name);
        tc->fn();
        remove_tmpdir();
        fflush(stdout);
        /* exit, not _exit: LeakSanitizer checks for leaks in its exit hook. */
        exit(0);
    }
    double deadline = now_s() + timeout_s;
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            perror("waitpid");
            return RES_FAIL;
        }
        if (now_s() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr, "    timed out after %d s\n", timeout_s);
            return RES_FAIL;
        }
        usleep(2000);
    }
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "    killed by signal %d (%s)\n", WTERMSIG(status), strsignal(WTERMSIG(status)));
        return RES_FAIL;
    }
    if (!WIFEXITED(status))
        return RES_FAIL;
    switch (WEXITSTATUS(status)) {
    case 0: return RES_PASS;
    case SL_TEST_EXIT_SKIP: return RES_SKIP;
    case SL_TEST_EXIT_SKIP_GPU: return RES_SKIP_GPU;
    default: return RES_FAIL;
    }
}

int main(int argc, char **argv) {
    qsort(cases, ncases, sizeof *cases, cmp_case);
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < ncases; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "-s") == 0) {
        for (size_t i = 0; i < ncases; i++) {
            if (strcmp(cases[i].name, argv[2]) == 0) {
                make_tmpdir(cases[i].name);
                cases[i].fn();
                remove_tmpdir();
                printf("1 passed, 0 failed\n");
                return 0;
            }
        }
        fprintf(stderr, "no test called %s (try --list)\n", argv[2]);
        return 2;
    }
    const char *t = getenv("SLUICE_TEST_TIMEOUT");
    int timeout_s = t ? atoi(t) : 120;
    if (timeout_s <= 0)
        timeout_s = 120;
    int count[4] = {0, 0, 0, 0};
    static const char *const label[4] = {"ok  ", "FAIL", "SKIP", "SKIP"};
    for (size_t i = 0; i < ncases; i++) {
        if (!matches(cases[i].name, argc - 1, argv + 1))
            continue;
        double t0 = now_s();
        int res = run_forked(&cases[i], timeout_s);
        double dt = now_s() - t0;
        printf("%s %s (%.2fs)%s\n", label[res], cases[i].name, dt,
               res == RES_SKIP_GPU ? " (no GPU)" : "");
        fflush(stdout);
        count[res]++;
    }
    printf("%d passed, %d skipped (%d for want of a GPU), %d failed\n", count[RES_PASS],
           count[RES_SKIP] + count[RES_SKIP_GPU], count[RES_SKIP_GPU], count[RES_FAIL]);
    if (count[RES_FAIL])
        return 1;
    if (count[RES_SKIP]) {
        printf("(skipped cases did not run: only GPU cases may skip in the test command)\n");
        return SL_TEST_EXIT_SKIP;
    }
    return 0;
}

void sl_test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f)
        sl_test_fail(__FILE__, __LINE__, "fopen %s: %s", path, strerror(errno));
    if (n && fwrite(data, 1, n, f) != n)
        sl_test_fail(__FILE__, __LINE__, "writing %s: %s", path, strerror(errno));
    if (fclose(f) != 0)
        sl_test_fail(__FILE__, __LINE__, "closing %s: %s", path, strerror(errno));
}

unsigned char *sl_test_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        sl_test_fail(__FILE__, __LINE__, "fopen %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)(len > 0 ? len : 0) + 1);
    if (!d || len < 0 || fread(d, 1, (size_t)len, f) != (size_t)len)
        sl_test_fail(__FILE__, __LINE__, "reading %s", path);
    fclose(f);
    d[len] = 0;
    *n = (size_t)len;
    return d;
}
