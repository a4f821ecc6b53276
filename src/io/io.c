/*
 * io.c — the byte-access layer (io.h): the table of schemes, one row each
 * (`schemes` below), and the local-file provider (open + fstat, mmap for
 * SL_IO_MAP, pread for ranges), the row of names without a scheme.
 *
 * The remote provider (io_remote.c) serves every row that names it, with
 * the row's dialect: its open fills `size` (a HEAD request), serves `read`
 * by range requests (coalesced, read ahead, retried) and, for SL_IO_MAP,
 * fetches the object whole into the node's shard cache and maps that file,
 * so the zero-copy formats (tar, TFRecord, .slr) work on it unchanged.
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
#include <time.h>
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

/* A file's version (io.h): its size, no ETag, then what stands for
 * Last-Modified: the modification time and the inode (a file renamed over
 * it is another, even within the clock's resolution). */
static void file_version(char *buf, size_t cap, const struct stat *st) {
    snprintf(buf, cap, "%llu\n\n%lld.%09ld inode %llu", (unsigned long long)st->st_size,
             (long long)st->st_mtim.tv_sec, (long)st->st_mtim.tv_nsec,
             (unsigned long long)st->st_ino);
}

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
    file_version(f->base.version, sizeof f->base.version, &st);
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

/* The process-wide counts of sl_io__counters. */
static struct {
    _Atomic uint64_t opens, maps, open_now, reads, read_bytes;
} count;

void sl_io__counters(sl_io_counters *out) {
    out->opens = atomic_load_explicit(&count.opens, memory_order_relaxed);
    out->maps = atomic_load_explicit(&count.maps, memory_order_relaxed);
    out->open_now = atomic_load_explicit(&count.open_now, memory_order_relaxed);
    out->reads = atomic_load_explicit(&count.reads, memory_order_relaxed);
    out->read_bytes = atomic_load_explicit(&count.read_bytes, memory_order_relaxed);
}

/* ---- providers --------------------------------------------------------------- */

int sl_io__is_url(const char *name) {
    const char *sep = strstr(name, "://");
    return sep && sep > name &&
           strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789+.-") == (size_t)(sep - name);
}

/* ---- the schemes: one row each ------------------------------------------------------
 *
 * A name "SCHEME://..." is opened by the row of its scheme; a name without
 * one (a path) by the "file" row. A remote scheme is a row of the remote
 * provider (io_remote.c) with its dialect (http.h, sl_io_dialect): the shard
 * cache, read-ahead, retries, version checks and integrity checks are the
 * provider's, so a new scheme is its dialect's file and one row here
 * (docs/ARCHITECTURE.md, "Bytes"). */

static int file_open_at(sl_io **out, const char *name, unsigned flags, const char *want,
                        const sl_io_dialect *d);
static int file_stat(const char *name, sl_io_info *out, const sl_io_dialect *d);
extern const sl_io_dialect sl_io__s3_dialect; /* io_s3.c */

static const sl_io_scheme schemes[] = {
    {"file", file_open_at, file_stat, NULL},
    {"http", sl_io__remote_open, sl_io__remote_stat, NULL},
    {"https", sl_io__remote_open, sl_io__remote_stat, NULL},
    {"s3", sl_io__remote_open, sl_io__remote_stat, &sl_io__s3_dialect},
};

/* The row that opens `name`, or NULL for a scheme no row names. */
static const sl_io_scheme *scheme_of(const char *name) {
    if (!sl_io__is_url(name))
        return &schemes[0];
    size_t n = (size_t)(strstr(name, "://") - name);
    for (size_t i = 1; i < sizeof schemes / sizeof schemes[0]; i++)
        if (strlen(schemes[i].scheme) == n && !strncmp(name, schemes[i].scheme, n))
            return &schemes[i];
    return NULL;
}

/* The URLs sluice reads, from the table: "http://, https:// and s3://". */
static int unknown_scheme(const char *name) {
    const char *sep = strstr(name, "://");
    char known[256];
    size_t k = 0, n = sizeof schemes / sizeof schemes[0];
    known[0] = 0;
    for (size_t i = 1; i < n && k < sizeof known; i++)
        k += (size_t)snprintf(known + k, sizeof known - k, "%s%s://",
                              i == 1 ? "" : i + 1 == n ? " and " : ", ", schemes[i].scheme);
    return sl__error(SL_EUNSUPPORTED, "%s: no reader for %.*s:// inputs (sluice reads %s URLs)",
                     name, (int)(sep - name), name, known);
}

/* ---- versions (io.h) ---------------------------------------------------------- */

/* A version string's parts: "SIZE\nETAG\nLAST-MODIFIED" (either of the last
 * two may be empty). */
typedef struct version_parts {
    unsigned long long size;
    const char *etag, *lm;
    size_t etag_len, lm_len;
    int ok;
} version_parts;

static version_parts version_split(const char *v) {
    version_parts p = {0};
    const char *nl = v ? strchr(v, '\n') : NULL;
    const char *nl2 = nl ? strchr(nl + 1, '\n') : NULL;
    if (!nl2)
        return p;
    char *end;
    p.size = strtoull(v, &end, 10);
    p.ok = end == nl && end != v;
    p.etag = nl + 1;
    p.etag_len = (size_t)(nl2 - p.etag);
    /* a weak validator names the same bytes as its strong form here */
    if (p.etag_len >= 2 && !strncmp(p.etag, "W/", 2))
        p.etag += 2, p.etag_len -= 2;
    p.lm = nl2 + 1;
    p.lm_len = strlen(p.lm);
    return p;
}

int sl_io__same_version(const char *a, const char *b) {
    version_parts x = version_split(a), y = version_split(b);
    if (!x.ok || !y.ok)
        return !strcmp(a ? a : "", b ? b : "");
    if (x.size != y.size)
        return 0;
    if (x.etag_len && y.etag_len)
        return x.etag_len == y.etag_len && !memcmp(x.etag, y.etag, x.etag_len);
    return x.lm_len == y.lm_len && !memcmp(x.lm, y.lm, x.lm_len);
}

void sl_io__version_words(const char *name, const char *v, char *buf, size_t cap) {
    version_parts p = version_split(v);
    if (!cap)
        return;
    if (!p.ok)
        snprintf(buf, cap, "an unknown version");
    else if (p.etag_len)
        snprintf(buf, cap, "ETag %.*s", (int)p.etag_len, p.etag);
    else if (p.lm_len && sl_io__is_url(name))
        snprintf(buf, cap, "Last-Modified %.*s, %llu bytes", (int)p.lm_len, p.lm, p.size);
    else if (p.lm_len) {
        /* a file's "SECONDS.NANOSECONDS inode N" as a date */
        long long sec = 0;
        long ns = 0;
        unsigned long long ino = 0;
        struct tm tm;
        char date[64];
        time_t t;
        if (sscanf(p.lm, "%lld.%ld inode %llu", &sec, &ns, &ino) == 3 &&
            (t = (time_t)sec, gmtime_r(&t, &tm)) &&
            strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", &tm))
            snprintf(buf, cap, "%llu bytes, modified %s.%09ld UTC, inode %llu", p.size, date, ns,
                     ino);
        else
            snprintf(buf, cap, "%llu bytes, modified %.*s", p.size, (int)p.lm_len, p.lm);
    }
    else
        snprintf(buf, cap, "%llu bytes", p.size);
}

/* The "file" row's open: a file at the version `want` (NULL: any). */
static int file_open_at(sl_io **out, const char *name, unsigned flags, const char *want,
                        const sl_io_dialect *d) {
    (void)d;
    int rc = file_open(out, name, flags);
    if (rc != SL_OK)
        return rc; /* an error, or SL_END: missing (SL_IO_MISSING_OK) */
    if (want && !sl_io__same_version(want, (*out)->version)) {
        /* a file has no copy of its old bytes to read on */
        char then[160], now[160];
        sl_io__version_words(name, want, then, sizeof then);
        sl_io__version_words(name, (*out)->version, now, sizeof now);
        file_close(*out);
        *out = NULL;
        return sl__error(SL_EIO, "%s: changed since it was first read (%s then, %s now); "
                         "open the source again to read it as it is now", name, then, now);
    }
    return SL_OK;
}

static int open_any(sl_io **out, const char *name, unsigned flags, const char *want) {
    *out = NULL;
    if (want && !*want)
        want = NULL;
    const sl_io_scheme *row = scheme_of(name);
    int rc = row ? row->open(out, name, flags, want, row->dialect) : unknown_scheme(name);
    if (rc == SL_OK) {
        atomic_fetch_add_explicit(&count.opens, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&count.open_now, 1, memory_order_relaxed);
        if ((*out)->map)
            atomic_fetch_add_explicit(&count.maps, 1, memory_order_relaxed);
    }
    return rc;
}

int sl_io__open(sl_io **out, const char *name, unsigned flags) {
    return open_any(out, name, flags, NULL);
}

int sl_io__open_version(sl_io **out, const char *name, unsigned flags, const char *want) {
    return open_any(out, name, flags, want);
}

const char *sl_io__missing(const char *name) {
    return sl_io__is_url(name) ? "HTTP 404 (not found)" : strerror(ENOENT);
}

static int file_stat(const char *name, sl_io_info *out, const sl_io_dialect *d) {
    (void)d;
    struct stat st;
    if (stat(name, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return SL_END;
        return sl__error(errno == ENOMEM ? SL_ENOMEM : SL_EIO, "%s: %s", name, strerror(errno));
    }
    out->is_dir = S_ISDIR(st.st_mode);
    out->size = out->is_dir ? 0 : (uint64_t)st.st_size;
    out->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    if (!out->is_dir)
        file_version(out->version, sizeof out->version, &st);
    return SL_OK;
}

int sl_io__stat(const char *name, sl_io_info *out) {
    memset(out, 0, sizeof *out);
    const sl_io_scheme *row = scheme_of(name);
    return row ? row->stat(name, out, row->dialect) : unknown_scheme(name);
}

int sl_io__list(const char *prefix, char ***names_out, int *n_out) {
    *names_out = NULL;
    *n_out = 0;
    const sl_io_scheme *row = scheme_of(prefix);
    size_t pl = strlen(prefix);
    if (row && row->dialect && row->dialect->list && pl && prefix[pl - 1] == '/')
        return row->dialect->list(prefix, names_out, n_out);
    char forms[256];
    size_t k = 0;
    forms[0] = 0;
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (schemes[i].dialect && schemes[i].dialect->list && k < sizeof forms)
            k += (size_t)snprintf(forms + k, sizeof forms - k, "%s%s", k ? " or " : "",
                                  schemes[i].dialect->list_form);
    return sl__error(SL_EINVAL, "%s: only %s names can be listed", prefix, forms);
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
    atomic_fetch_add_explicit(&count.reads, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&count.read_bytes, *got, memory_order_relaxed);
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
    return sl__setting_choice("SLUICE_INTEGRITY") == 0; /* its one value: "strict" */
}

/* `msg` without a leading "NAME: " (the message around it names the object
 * once), cut to `cap` - 1 bytes with "..." where it is longer. */
static void inner_cause(char *dst, size_t cap, const char *msg, const char *name) {
    size_t nl = strlen(name);
    if (!strncmp(msg, name, nl) && !strncmp(msg + nl, ": ", 2))
        msg += nl + 2;
    size_t n = strlen(msg);
    if (n < cap) {
        memcpy(dst, msg, n + 1);
        return;
    }
    memcpy(dst, msg, cap - 4);
    memcpy(dst + cap - 4, "...", 4);
}

int sl_io__twice_damaged(const char *name, const char *first) {
    static const char fmt[] = "%s: damaged twice: the first copy (%s) and the copy fetched "
                              "again (%s); the object differs from what its checksums say "
                              "(damaged, or replaced without them), or every fetch is damaged "
                              "(a proxy?)";
    /* The two causes share what room the name and the sentence leave, so
     * the end of the sentence, which says what to suspect, is never cut. */
    size_t fixed = strlen(name) + sizeof fmt - 7, room = 2 * 20; /* at the least */
    if (fixed + room < SL__ERRMSG_MAX)
        room = SL__ERRMSG_MAX - 1 - fixed;
    char a[SL__ERRMSG_MAX], b[SL__ERRMSG_MAX];
    inner_cause(a, room / 2 + 1, first, name);
    inner_cause(b, room / 2 + 1, sl_errmsg(), name);
    return sl__error(SL_ECORRUPT, fmt, name, a, b);
}

int sl_io__open_checked(sl_io **out, const char *name, unsigned flags, const char *version,
                        sl_io_check_fn check, void *user) {
    *out = NULL;
    char first[SL__ERRMSG_MAX];
    for (int attempt = 0;; attempt++) {
        sl_io *io = NULL;
        int orc = open_any(&io, name, flags, version);
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
    atomic_fetch_sub_explicit(&count.open_now, 1, memory_order_relaxed);
    io->vt->close(io);
}

static void map_buffer_gone(void *io) { sl_io__close(io); }

int sl_io__map_buffer(sl_io *io, sl_buffer **out) {
    *out = NULL;
    if (!io->map)
        return SL_OK;
    return sl_buffer_wrap(out, (void *)(uintptr_t)io->map, (size_t)io->size, map_buffer_gone, io);
}

void sl_io__map_close(sl_io *io, sl_buffer *buf) {
    if (buf)
        sl_buffer_release(buf); /* io closes with the last view */
    else
        sl_io__close(io);
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
