/*
 * cpu_budget.c — the cores and memory this process may use.
 *
 * A machine's core count is the wrong default when a launcher pins each rank
 * to a few cores (CPU affinity) or a container caps CPU time (cgroup quota):
 * eight ranks on a 64-core node would each start 64 workers. The budget is
 * the smallest of: online cores, cores in this thread's affinity mask, and
 * the cgroup CPU quota rounded up (cgroup v2 `cpu.max`, v1
 * `cpu.cfs_quota_us / cpu.cfs_period_us`, the tightest along the path to the
 * root). SLUICE_CPUS=N overrides all three. The memory budget's base is the
 * smaller of physical memory and the cgroup limit (v2 `memory.max`, v1
 * `memory.limit_in_bytes`).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/core.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CG_PATH_MAX 512

/* The cgroup path of this process for a controller (v1: a name in the
 * second field; v2: controller NULL, the "0::" line). */
static int cgroup_path(const char *controller, char *out, size_t cap) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return 0;
    char line[CG_PATH_MAX];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        line[strcspn(line, "\n")] = '\0';
        *c2 = '\0';
        const char *ctls = c1 + 1;
        if (controller == NULL) {
            found = strncmp(line, "0:", 2) == 0 && ctls[0] == '\0';
        } else {
            char list[CG_PATH_MAX];
            snprintf(list, sizeof list, ",%s,", ctls);
            char want[64];
            snprintf(want, sizeof want, ",%s,", controller);
            found = strstr(list, want) != NULL;
        }
        if (found)
            snprintf(out, cap, "%s", c2 + 1);
    }
    fclose(f);
    return found;
}

/* Read up to two numbers (or "max", read as -1) from a small file. */
static int read_nums(const char *path, long long *a, long long *b) {
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char w1[64] = "", w2[64] = "";
    int n = fscanf(f, "%63s %63s", w1, w2);
    fclose(f);
    if (n < 1)
        return 0;
    *a = strcmp(w1, "max") == 0 ? -1 : atoll(w1);
    *b = n > 1 ? atoll(w2) : 0;
    return n;
}

/* Visit `file` in the cgroup directory `base/rel` and each parent up to
 * `base`; `fn` folds each readable one into *acc. */
static void walk_cgroup(const char *base, const char *rel, const char *file,
                        void (*fn)(const char *path, void *acc), void *acc) {
    char dir[CG_PATH_MAX], path[CG_PATH_MAX * 2];
    snprintf(dir, sizeof dir, "%s", rel);
    for (;;) {
        size_t n = strlen(dir);
        while (n > 0 && dir[n - 1] == '/')
            dir[--n] = '\0';
        snprintf(path, sizeof path, "%s%s/%s", base, dir, file);
        fn(path, acc);
        char *slash = strrchr(dir, '/');
        if (!slash || n == 0)
            break;
        *slash = '\0';
    }
}

static void fold_cpu_v2(const char *path, void *acc) {
    long long quota, period;
    if (read_nums(path, &quota, &period) == 2 && quota > 0 && period > 0) {
        double c = (double)quota / (double)period;
        if (*(double *)acc <= 0 || c < *(double *)acc)
            *(double *)acc = c;
    }
}

static void fold_quota_v1(const char *path, void *acc) {
    long long quota, unused;
    char ppath[CG_PATH_MAX * 2 + 16];
    if (read_nums(path, &quota, &unused) < 1 || quota <= 0)
        return;
    snprintf(ppath, sizeof ppath, "%.*s/cpu.cfs_period_us",
             (int)(strrchr(path, '/') - path), path);
    long long period;
    if (read_nums(ppath, &period, &unused) < 1 || period <= 0)
        return;
    double c = (double)quota / (double)period;
    if (*(double *)acc <= 0 || c < *(double *)acc)
        *(double *)acc = c;
}

static void fold_mem(const char *path, void *acc) {
    long long v, unused;
    if (read_nums(path, &v, &unused) >= 1 && v > 0) {
        uint64_t *m = acc;
        if ((uint64_t)v < *m)
            *m = (uint64_t)v;
    }
}

static int compute_cpus(void) {
    long long given = sl__setting_int("SLUICE_CPUS"); /* -1: unset */
    if (given > 0)
        return (int)given;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int n = online > 0 ? (int)online : 1;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int a = CPU_COUNT(&set);
        if (a > 0 && a < n)
            n = a;
    }
    double quota = 0;
    char rel[CG_PATH_MAX];
    if (cgroup_path(NULL, rel, sizeof rel))
        walk_cgroup("/sys/fs/cgroup", rel, "cpu.max", fold_cpu_v2, &quota);
    if (cgroup_path("cpu", rel, sizeof rel)) {
        walk_cgroup("/sys/fs/cgroup/cpu", rel, "cpu.cfs_quota_us", fold_quota_v1, &quota);
        walk_cgroup("/sys/fs/cgroup/cpu,cpuacct", rel, "cpu.cfs_quota_us", fold_quota_v1, &quota);
    }
    if (quota > 0) {
        int q = (int)quota;
        if ((double)q < quota)
            q++; /* 1.5 cores of quota: 2 threads, each busy part of the time */
        if (q < n)
            n = q;
    }
    return n < 1 ? 1 : n;
}

int sl__ncpus(void) {
    static _Atomic int cached;
    int n = atomic_load_explicit(&cached, memory_order_relaxed);
    if (n == 0) {
        n = compute_cpus();
        atomic_store_explicit(&cached, n, memory_order_relaxed);
    }
    return n;
}

uint64_t sl__mem_total(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t m = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : (uint64_t)1 << 32;
    char rel[CG_PATH_MAX];
    if (cgroup_path(NULL, rel, sizeof rel))
        walk_cgroup("/sys/fs/cgroup", rel, "memory.max", fold_mem, &m);
    if (cgroup_path("memory", rel, sizeof rel)) {
        walk_cgroup("/sys/fs/cgroup/memory", rel, "memory.limit_in_bytes", fold_mem, &m);
        fold_mem("/sys/fs/cgroup/memory/memory.limit_in_bytes", &m);
    }
    return m;
}

uint64_t sl__process_cpu_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
