/*
 * io.c — the byte-access layer (io.h): the provider table and the local-file
 * provider (open + fstat, mmap for SL_IO_MAP, pread for ranges).
 *
 * A remote provider (http(s)://, s3://) is a second entry in `providers`:
 * its open fills `size` (a HEAD request), serves `read` by range requests
 * (coalesced, read ahead, retried) and, for SL_IO_MAP, fetches the object
 * whole into the node's on-disk cache and maps that file, so the zero-copy
 * formats (tar, TFRecord, .slr) work on it unchanged.
 */
#include "io/io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the local file provider ------------------------------------------------- */

typedef struct file_io {
    sl_io base;
    int fd;
} file_io;

static int file_read(sl_io *io, void *dst, size_t n, uint64_t off, size_t *got) {
    const file_io *f = (const file_io *)io;
    uint8_t *b = dst;
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(f->fd, b + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            *got = done;
            return sl__error(SL_EIO, "%s: read failed at offset %llu: %s", io->name,
                             (unsigned long long)(off + done), strerror(errno));
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    *got = done;
    return SL_OK;
}

static void file_close(sl_io *io) {
    file_io *f = (file_io *)io;
    if (io->map)
        munmap((void *)(uintptr_t)io->map, (size_t)io->size);
    if (f->fd >= 0)
        close(f->fd);
    sl__free(io->name);
    sl__free(f);
}

static const sl_io_vtbl file_vtbl = {.scheme = "file", .read = file_read, .close = file_close};

static int file_open(sl_io **out, const char *path, unsigned flags) {
    file_io *f = sl__calloc(1, sizeof *f);
    if (!f)
        return sl__oom("opening a file");
    f->base.vt = &file_vtbl;
    f->fd = -1;
    int rc = SL_OK;
    f->base.name = sl__strdup(path);
    if (!f->base.name)
        SL_FAIL(SL_ENOMEM, "%s: out of memory opening it", path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0 && errno == ENOENT && (flags & SL_IO_MISSING_OK)) {
        rc = SL_END;
        goto cleanup;
    }
    if (f->fd < 0)
        SL_FAIL(errno == ENOMEM ? SL_ENOMEM : SL_EIO, "%s: cannot open: %s", path,
                strerror(errno));
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        SL_FAIL(SL_EIO, "%s: cannot stat: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        SL_FAIL(SL_EINVAL, "%s: is a directory", path);
    if (!S_ISREG(st.st_mode))
        SL_FAIL(SL_EINVAL, "%s: not a regular file", path);
    f->base.size = (uint64_t)st.st_size;
    if ((flags & SL_IO_MAP) && f->base.size) {
        if (f->base.size > SIZE_MAX)
            SL_FAIL(SL_ELIMIT, "%s: %llu bytes cannot be mapped here", path,
                    (unsigned long long)f->base.size);
        void *m = mmap(NULL, (size_t)f->base.size, PROT_READ, MAP_SHARED, f->fd, 0);
        if (m == MAP_FAILED)
            SL_FAIL(errno == ENOMEM ? SL_ENOMEM : SL_EIO, "%s: cannot map: %s", path,
                    strerror(errno));
        f->base.map = m;
#ifdef MADV_RANDOM
        if (flags & SL_IO_RANDOM)
            (void)madvise(m, (size_t)f->base.size, MADV_RANDOM);
#endif
    }
    *out = &f->base;
    return SL_OK;
cleanup:
    file_close(&f->base);
    return rc;
}

/* ---- counters (io.h) ---------------------------------------------------------- */

static _Atomic uint64_t n_opens, n_maps, n_open_now, n_reads, n_read_bytes;

void sl_io__counters(sl_io_counters *out) {
    out->opens = atomic_load_explicit(&n_opens, memory_order_relaxed);
    out->maps = atomic_load_explicit(&n_maps, memory_order_relaxed);
    out->open_now = atomic_load_explicit(&n_open_now, memory_order_relaxed);
    out->reads = atomic_load_explicit(&n_reads, memory_order_relaxed);
    out->read_bytes = atomic_load_explicit(&n_read_bytes, memory_order_relaxed);
}

/* ---- providers --------------------------------------------------------------- */

int sl_io__is_url(const char *name) {
    const char *sep = strstr(name, "://");
    return sep && sep > name &&
           strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789+.-") == (size_t)(sep - name);
}

static int unknown_scheme(const char *name) {
    const char *sep = strstr(name, "://");
    return sl__error(SL_EUNSUPPORTED, "%s: no reader for %.*s:// inputs (sluice reads http://, "
                     "https:// and s3:// URLs)", name, (int)(sep - name), name);
}

int sl_io__open(sl_io **out, const char *name, unsigned flags) {
    *out = NULL;
    /* A URL names its provider. */
    int rc = !sl_io__is_url(name)       ? file_open(out, name, flags)
             : sl_io__http_handles(name) ? sl_io__http_open(out, name, flags)
                                         : unknown_scheme(name);
    if (rc == SL_OK) {
        atomic_fetch_add_explicit(&n_opens, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&n_open_now, 1, memory_order_relaxed);
        if ((*out)->map)
            atomic_fetch_add_explicit(&n_maps, 1, memory_order_relaxed);
    }
    return rc;
}

const char *sl_io__missing(const char *name) {
    return sl_io__is_url(name) ? "HTTP 404 (not found)" : strerror(ENOENT);
}

int sl_io__stat(const char *name, sl_io_info *out) {
    memset(out, 0, sizeof *out);
    if (sl_io__is_url(name))
        return sl_io__http_handles(name) ? sl_io__http_stat(name, out) : unknown_scheme(name);
    struct stat st;
    if (stat(name, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return SL_END;
        return sl__error(errno == ENOMEM ? SL_ENOMEM : SL_EIO, "%s: %s", name, strerror(errno));
    }
    out->is_dir = S_ISDIR(st.st_mode);
    out->size = out->is_dir ? 0 : (uint64_t)st.st_size;
    out->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    return SL_OK;
}

const char *sl_io__short_name(const char *name) {
    return sl_io__is_url(name) ? name : sl__base_name(name);
}

char *sl_io__join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] == '/';
    char *s = sl__malloc(a + b + 2);
    if (s) {
        memcpy(s, dir, a);
        if (!slash)
            s[a++] = '/';
        memcpy(s + a, name, b + 1);
    }
    return s;
}

int sl_io__read_some(sl_io *io, void *dst, size_t n, uint64_t off, size_t *got) {
    *got = 0;
    if (off >= io->size || !n)
        return SL_OK;
    int rc = io->vt->read(io, dst, n, off, got);
    atomic_fetch_add_explicit(&n_reads, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&n_read_bytes, *got, memory_order_relaxed);
    return rc;
}

int sl_io__read(sl_io *io, void *dst, size_t n, uint64_t off) {
    size_t got;
    SL_TRY(sl_io__read_some(io, dst, n, off, &got));
    if (got < n)
        return sl__error(SL_ECORRUPT, "%s: truncated (read past the end at offset %llu)",
                         io->name, (unsigned long long)(off + got));
    return SL_OK;
}

void sl_io__will_need(sl_io *io, uint64_t off, size_t n) {
    if (io && io->vt->will_need && !io->map && off < io->size)
        io->vt->will_need(io, off, n);
}

void sl_io__forget(sl_io *io) {
    if (io && io->vt->forget)
        io->vt->forget(io);
}

int sl_io__strict(void) {
    const char *v = getenv("SLUICE_INTEGRITY");
    return v && !strcmp(v, "strict");
}

int sl_io__twice_damaged(const char *name, const char *first) {
    char second[SL__ERRMSG_MAX];
    snprintf(second, sizeof second, "%s", sl_errmsg());
    return sl__error(SL_ECORRUPT, "%s: damaged twice: the first copy (%s) and the copy fetched "
                     "again (%s); the object itself is damaged, or every fetch is (a proxy?)",
                     name, first, second);
}

int sl_io__open_checked(sl_io **out, const char *name, unsigned flags, sl_io_check_fn check,
                        void *user) {
    *out = NULL;
    char first[SL__ERRMSG_MAX];
    for (int attempt = 0;; attempt++) {
        sl_io *io = NULL;
        int orc = sl_io__open(&io, name, flags);
        if (orc != SL_OK)
            return orc; /* an error, or SL_END (missing, SL_IO_MISSING_OK) */
        int rc = check(io, user);
        if (rc == SL_OK) {
            if (attempt)
                SL_LOG_WARN("%s; fetched again, the new copy is sound", first);
            *out = io;
            return SL_OK;
        }
        if (rc != SL_ECORRUPT || !sl_io__is_url(name)) {
            sl_io__close(io);
            return rc;
        }
        sl_io__forget(io);
        sl_io__close(io);
        if (attempt)
            return sl_io__twice_damaged(name, first);
        snprintf(first, sizeof first, "%s", sl_errmsg());
    }
}

void sl_io__close(sl_io *io) {
    if (!io)
        return;
    atomic_fetch_sub_explicit(&n_open_now, 1, memory_order_relaxed);
    io->vt->close(io);
}

int sl_io__read_file(const char *name, uint64_t max, int missing_ok, uint8_t **out,
                     size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    if (missing_ok) {
        sl_io_info info;
        int st = sl_io__stat(name, &info);
        if (st == SL_END)
            return SL_END;
        SL_TRY(st);
    }
    sl_io *io;
    /* A remote file goes through the shard cache: a warm run reads it from
     * there (SLUICE_CACHE_TTL) instead of asking again. */
    SL_TRY(sl_io__open(&io, name, sl_io__is_url(name) ? SL_IO_MAP : 0));
    int rc = SL_OK;
    uint8_t *buf = NULL;
    if (max && io->size > max)
        SL_FAIL(SL_ELIMIT, "%s: %llu bytes is over the %llu-byte limit", name,
                (unsigned long long)io->size, (unsigned long long)max);
    if (io->size >= SIZE_MAX)
        SL_FAIL(SL_ELIMIT, "%s: too large to read into memory", name);
    buf = sl__malloc((size_t)io->size + 1);
    if (!buf)
        SL_FAIL(SL_ENOMEM, "%s: out of memory reading %llu bytes", name,
                (unsigned long long)io->size);
    SL_CHECK(sl_io__read(io, buf, (size_t)io->size, 0));
    buf[io->size] = 0;
    *out = buf;
    *n_out = (size_t)io->size;
    buf = NULL;
cleanup:
    sl__free(buf);
    sl_io__close(io);
    return rc;
}
