/* fuzz_util.h — file helpers shared by the fuzz targets (static, header-only). */
#ifndef SLUICE_FUZZ_UTIL_H
#define SLUICE_FUZZ_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Remove a file or a directory tree (no symlinks followed). */
static inline void rm_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                    continue;
                char sub[600];
                snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                rm_tree(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* This process's scratch directory under $TMPDIR, "sluice-fuzz-TAG-XXXXXX",
 * made on first use and removed at exit. */
static char fuzz_tmpdir_[256];
static void fuzz_tmpdir_remove_(void) { rm_tree(fuzz_tmpdir_); }
static inline const char *fuzz_tmpdir(const char *tag) {
    if (!fuzz_tmpdir_[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(fuzz_tmpdir_, sizeof fuzz_tmpdir_, "%s/sluice-fuzz-%s-XXXXXX",
                 tmp && *tmp ? tmp : "/tmp", tag);
        if (!mkdtemp(fuzz_tmpdir_))
            abort();
        atexit(fuzz_tmpdir_remove_);
    }
    return fuzz_tmpdir_;
}

/* Write p[0..n) to path; any failure aborts (a broken harness, not a finding). */
static inline void write_bytes(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (n && fwrite(p, 1, n, f) != n)
        abort();
    if (fclose(f) != 0)
        abort();
}

#endif
