/*
 * cache.c — the node's shard cache (cache.h): entries of whole remote
 * objects on local disk, and the HEAD answers remembered for
 * SLUICE_CACHE_TTL (CACHE_DIR/.meta).
 *
 * DESIGN
 * - One file per object version, named by a hash of the URL, size and
 *   validator (plus the base name, for people reading the folder), holding
 *   the bytes plus a 16-byte trailer ("SLCACHE1" + XXH3-64 of the bytes). An
 *   entry is written under a temporary name and renamed into place when
 *   complete, so no process ever sees a half-written entry; a per-entry lock
 *   file (flock) makes the processes of one node fetch an object once. Every
 *   use checks the size and the checksum first: a damaged entry is deleted
 *   and fetched again (a warning says so). After an entry is added, the
 *   least recently used ones (by mtime, refreshed on each use) are deleted
 *   until the cache is within its budget; an entry mapped by a running
 *   process may be deleted (its mapping stays valid until unmapped).
 * - Folders are made 0700 and files 0600 (SLUICE_CACHE_MODE), whatever the
 *   umask: the cache holds whatever remote data this user reads.
 *
 * All mutable state of the file is one struct, `cache` (its settings, read
 * once by sl_cache__init; the budget may be set again, atomically).
 */
#include "io/cache.h"
#include "io/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TRAILER 16
#define NAME_ROOM 4096 /* the folder's path; a URL (the memo's keys) */
static const char trailer_magic[8] = {'S', 'L', 'C', 'A', 'C', 'H', 'E', '1'};

static struct {
    char dir[NAME_ROOM];
    uint64_t bytes;      /* the budget (atomic: sl_cache__set_bytes) */
    long ttl_s;          /* SLUICE_CACHE_TTL: an object's size and validator,
                            once asked, are trusted this long (0: ask each time) */
    mode_t dir_mode;     /* SLUICE_CACHE_MODE: the cache's folders (default 0700) */
    mode_t file_mode;    /* its files: dir_mode without the execute bits */
    atomic_int said_open; /* the folder's mode was said to be open to others */
} cache;

void sl_cache__init(void) {
    cache.ttl_s = sl__setting_int("SLUICE_CACHE_TTL");
    /* Private by default: the cache holds whatever remote data this user
     * reads (private S3 objects too), on a machine others may share. */
    cache.dir_mode = (mode_t)sl__setting_int("SLUICE_CACHE_MODE");
    cache.file_mode = cache.dir_mode & 0666;
    const char *dir = sl__setting_str("SLUICE_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (dir)
        snprintf(cache.dir, sizeof cache.dir, "%s", dir);
    else if (xdg && *xdg)
        snprintf(cache.dir, sizeof cache.dir, "%s/sluice", xdg);
    else if (home && *home)
        snprintf(cache.dir, sizeof cache.dir, "%s/.cache/sluice", home);
    cache.bytes = (uint64_t)sl__setting_int("SLUICE_CACHE_BYTES");
}

void sl_cache__set_bytes(uint64_t bytes) { __atomic_store_n(&cache.bytes, bytes, __ATOMIC_RELAXED); }

static uint64_t bytes_now(void) { return __atomic_load_n(&cache.bytes, __ATOMIC_RELAXED); }

int sl_cache__on(void) { return cache.dir[0] && bytes_now(); }

int sl_cache__fits(uint64_t size) { return cache.dir[0] && size + TRAILER <= bytes_now(); }

/* One folder of the cache (or above it) made with the cache's mode, set
 * again after mkdir so that the umask takes nothing from it: 0 (made, or
 * there already), -1 (errno set). */
static int cache_mkdir(const char *dir) {
    if (mkdir(dir, cache.dir_mode) == 0) {
        (void)chmod(dir, cache.dir_mode);
        return 0;
    }
    return errno == EEXIST ? 0 : -1;
}

/* The cache folder (made before) allows others more than SLUICE_CACHE_MODE
 * does: said once per process, with both ways on. Its mode is left alone:
 * it may be shared on purpose. */
static void cache_dir_check(const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0 || !((st.st_mode & 07777) & ~cache.dir_mode) ||
        atomic_exchange(&cache.said_open, 1))
        return;
    SL_LOG_WARN("cache: %s is open to other users (mode %04o; sluice makes its cache folders "
                "%04o): remote data fetched into it can be read by them; `chmod %o %s` makes it "
                "private, or SLUICE_CACHE_MODE=%04o shares it on purpose", dir,
                (unsigned)(st.st_mode & 07777), (unsigned)cache.dir_mode,
                (unsigned)cache.dir_mode, dir, (unsigned)(st.st_mode & 07777));
}

static int mkdirs(const char *dir) {
    char buf[NAME_ROOM];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (cache_mkdir(buf) != 0)
                return -1;
            *p = '/';
        }
    }
    return cache_mkdir(buf);
}

/* A file of the cache (an entry being written, a lock, a remembered answer)
 * opened with O_CREAT and the cache's file mode, whatever the umask. */
static int cache_create(const char *path, int oflags) {
    int fd = open(path, oflags | O_CREAT, cache.file_mode);
    if (fd >= 0)
        (void)fchmod(fd, cache.file_mode); /* fails harmlessly on another user's lock */
    return fd;
}

typedef struct cache_ent {
    char name[256];
    uint64_t size;
    int64_t mtime_ns;
} cache_ent;

static int by_mtime(const void *a, const void *b) {
    const cache_ent *x = a, *y = b;
    return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns;
}

/* Delete the least recently used entries until the cache fits its budget
 * (never `keep`), and temporary files of fetches that died an hour ago. */
static void evict(const char *dir, const char *keep) {
    char path[NAME_ROOM + 300];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int lfd = cache_create(path, O_RDWR | O_CLOEXEC);
    if (lfd < 0)
        return;
    if (flock(lfd, LOCK_EX) != 0) {
        close(lfd);
        return;
    }
    DIR *d = opendir(dir);
    cache_ent *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    time_t now = time(NULL);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t nl = strlen(e->d_name);
        if (nl >= sizeof v->name || (nl > 5 && !strcmp(e->d_name + nl - 5, ".lock")))
            continue;
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (e->d_name[0] == '.') {
            if (!strncmp(e->d_name, ".tmp-", 5) && st.st_mtime + 3600 < now)
                unlink(path);
            continue;
        }
        if (n == cap) {
            size_t c2 = cap ? cap * 2 : 64;
            cache_ent *nv = sl__realloc(v, c2 * sizeof *nv);
            if (!nv)
                break;
            v = nv;
            cap = c2;
        }
        snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
        v[n].size = (uint64_t)st.st_size;
        v[n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        total += v[n].size;
        n++;
    }
    if (d)
        closedir(d);
    uint64_t budget = bytes_now();
    if (total > budget && n) {
        qsort(v, n, sizeof *v, by_mtime);
        for (size_t i = 0; i < n && total > budget; i++) {
            if (keep && !strcmp(v[i].name, keep))
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, v[i].name);
            if (unlink(path) == 0) {
                total -= v[i].size;
                SL_LOG_DEBUG("cache: evicted %s (%llu bytes)", v[i].name,
                             (unsigned long long)v[i].size);
            }
            snprintf(path, sizeof path, "%s/%s.lock", dir, v[i].name);
            unlink(path);
        }
    }
    sl__free(v);
    flock(lfd, LOCK_UN);
    close(lfd);
}

/* Map a complete cache file of an object of `size` bytes and check its
 * trailer: SL_OK, or SL_ECORRUPT (quiet) when it is not the object whole. */
static int map_entry(sl_cache_entry *e, const char *name, uint64_t size, int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != size + TRAILER)
        return SL_ECORRUPT;
    size_t len = (size_t)st.st_size;
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return sl__error(SL_EIO, "%s: cannot map its cache entry: %s", name, strerror(errno));
    const uint8_t *b = m;
    uint64_t want;
    memcpy(&want, b + size + 8, 8);
    if (memcmp(b + size, trailer_magic, 8) != 0 || XXH3_64bits(b, (size_t)size) != want) {
        munmap(m, len);
        return SL_ECORRUPT;
    }
    e->map = b;
    e->len = len;
    return SL_OK;
}

/* The cache entry's file name for this object version (200 bytes of room):
 * KEY-BASENAME (the base name only to help people reading the directory;
 * letters, digits and ._- kept). */
static int entry_name(const char *url, uint64_t size, const char *validator, char *ent) {
    XXH3_state_t *ks = XXH3_createState();
    if (!ks)
        return sl__oom("naming a cache entry");
    char sz[32];
    snprintf(sz, sizeof sz, "%llu", (unsigned long long)size);
    XXH3_64bits_reset(ks);
    XXH3_64bits_update(ks, url, strlen(url) + 1);
    XXH3_64bits_update(ks, sz, strlen(sz) + 1);
    XXH3_64bits_update(ks, validator, strlen(validator));
    uint64_t key = XXH3_64bits_digest(ks);
    XXH3_freeState(ks);
    const char *base = strrchr(url, '/');
    base = base ? base + 1 : url;
    int k = snprintf(ent, 200, "%016llx-", (unsigned long long)key);
    for (const char *p = base; *p && *p != '?' && k < 120; p++)
        ent[k++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                  (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'
                              ? *p
                              : '_');
    ent[k] = 0;
    return SL_OK;
}

int sl_cache__open(sl_cache_entry *e, const char *name, const char *url, uint64_t size,
                   const char *validator, int keep) {
    memset(e, 0, sizeof *e);
    char ent[200], path[NAME_ROOM + 300];
    if (!sl_cache__fits(size) || entry_name(url, size, validator, ent) != SL_OK)
        return SL_ECORRUPT;
    snprintf(path, sizeof path, "%s/%s", cache.dir, ent);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = fd >= 0 ? map_entry(e, name, size, fd) : SL_ECORRUPT;
    if (fd >= 0)
        close(fd);
    if (rc == SL_OK && keep) {
        e->path = sl__strdup(path);
        if (!e->path) {
            sl_cache__close(e);
            return sl__error(SL_ENOMEM, "%s: out of memory naming its cache entry", name);
        }
        (void)utimensat(AT_FDCWD, path, NULL, 0); /* most recently used */
    }
    return rc;
}

void sl_cache__close(sl_cache_entry *e) {
    if (e->map)
        munmap((void *)(uintptr_t)e->map, e->len);
    sl__free(e->path);
    memset(e, 0, sizeof *e);
}

void sl_cache__forget(const sl_cache_entry *e, const char *name) {
    if (e->path && unlink(e->path) == 0)
        SL_LOG_DEBUG("cache: dropped %s (%s failed a check)", e->path, name);
}

/* Fetch the object into the cache (or find it there) and map it. */
int sl_cache__fetch(sl_cache_entry *e, const char *name, const char *url, uint64_t size,
                    const char *validator, int (*fetch)(void *user, int fd, XXH3_state_t *hs),
                    int (*check)(void *user, const uint8_t *p, size_t n), void *user) {
    memset(e, 0, sizeof *e);
    if (!sl_cache__fits(size))
        return SL_CACHE_NO_ROOM;
    if (mkdirs(cache.dir) != 0) {
        SL_LOG_WARN("cache: cannot create %s (%s); holding remote shards in memory",
                    cache.dir, strerror(errno));
        return SL_CACHE_UNUSABLE;
    }
    cache_dir_check(cache.dir);
    char ent[200];
    SL_TRY(entry_name(url, size, validator, ent));
    char path[NAME_ROOM + 300], lpath[NAME_ROOM + 310], tmp[NAME_ROOM + 350];
    snprintf(path, sizeof path, "%s/%s", cache.dir, ent);
    snprintf(lpath, sizeof lpath, "%s.lock", path);
    int lfd = cache_create(lpath, O_RDWR | O_CLOEXEC);
    if (lfd >= 0)
        while (flock(lfd, LOCK_EX) != 0 && errno == EINTR) {
        }
    int rc = SL_OK, fd = -1;
    XXH3_state_t *hs = NULL;
    tmp[0] = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        rc = map_entry(e, name, size, fd);
        close(fd);
        fd = -1;
        if (rc == SL_OK) {
            e->path = sl__strdup(path);
            if (!e->path) {
                rc = sl__error(SL_ENOMEM, "%s: out of memory naming its cache entry", name);
                goto cleanup;
            }
            (void)utimensat(AT_FDCWD, path, NULL, 0); /* most recently used */
            SL_LOG_DEBUG("cache: %s from %s", name, path);
            goto cleanup;
        }
        if (rc != SL_ECORRUPT)
            goto cleanup;
        SL_LOG_WARN("cache: the entry %s for %s is damaged (size or checksum); fetching it "
                    "again", path, name);
        unlink(path);
        rc = SL_OK;
    }
    static _Thread_local unsigned seq;
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%ld-%u", cache.dir, ent, (long)getpid(), ++seq);
    fd = cache_create(tmp, O_RDWR | O_TRUNC | O_CLOEXEC);
    if (fd < 0) {
        SL_LOG_WARN("cache: cannot write in %s (%s); holding remote shards in memory",
                    cache.dir, strerror(errno));
        tmp[0] = 0;
        rc = SL_CACHE_UNUSABLE;
        goto cleanup;
    }
    hs = XXH3_createState();
    if (!hs) {
        rc = sl__oom("fetching into the cache");
        goto cleanup;
    }
    XXH3_64bits_reset(hs);
    SL_CHECK(fetch(user, fd, hs));
    uint8_t tr[TRAILER];
    uint64_t sum = XXH3_64bits_digest(hs);
    memcpy(tr, trailer_magic, 8);
    memcpy(tr + 8, &sum, 8);
    if (pwrite(fd, tr, TRAILER, (off_t)size) != TRAILER)
        SL_FAIL(SL_EIO, "%s: writing its cache entry %s failed: %s", name, tmp,
                strerror(errno));
    rc = map_entry(e, name, size, fd);
    if (rc == SL_ECORRUPT) /* the disk gave back other bytes than written */
        SL_FAIL(SL_EIO, "%s: its cache entry %s reads back wrong", name, tmp);
    SL_CHECK(rc);
    /* what the server says of the bytes, before they enter the cache */
    rc = check(user, e->map, (size_t)size);
    if (rc < 0)
        goto cleanup;
    e->path = sl__strdup(path);
    if (!e->path)
        SL_FAIL(SL_ENOMEM, "%s: out of memory naming its cache entry", name);
    if (rename(tmp, path) != 0)
        SL_FAIL(SL_EIO, "%s: cannot rename %s into the cache: %s", name, tmp,
                strerror(errno));
    tmp[0] = 0;
    SL_LOG_DEBUG("cache: fetched %s into %s", name, path);
cleanup:
    if (hs)
        XXH3_freeState(hs);
    if (fd >= 0)
        close(fd);
    if (tmp[0])
        unlink(tmp);
    if (lfd >= 0) {
        flock(lfd, LOCK_UN);
        close(lfd);
    }
    if (rc < 0)
        sl_cache__close(e);
    if (rc == SL_OK)
        evict(cache.dir, ent);
    return rc;
}

/* ---- what a HEAD said, remembered (SLUICE_CACHE_TTL) ------------------------------
 *
 * A HEAD's answer for a URL (size, ETag, Last-Modified, directory or not) is
 * kept in CACHE_DIR/.meta/KEY, a small text file whose mtime is the time of
 * the answer. Within SLUICE_CACHE_TTL seconds of it, any process of the node
 * takes the answer from there instead of asking again: with the shards (and
 * their .slidx files) in the shard cache, a warm run sends no request at all;
 * after the TTL each object is asked about once more (one HEAD), and a
 * changed ETag or size names a new cache entry, so changed bytes are fetched.
 * A 404 is not remembered (an index written later is found at once). The
 * file is written under a temporary name and renamed, so readers see a whole
 * answer or none; one that does not parse is ignored. */

int sl_cache__memo_on(void) { return cache.dir[0] && cache.ttl_s && bytes_now(); }

static int memo_path(const char *url, char *buf, size_t cap, int dir_only) {
    if (!sl_cache__memo_on())
        return 0;
    int k = dir_only ? snprintf(buf, cap, "%s/.meta", cache.dir)
                     : snprintf(buf, cap, "%s/.meta/%016llx", cache.dir,
                                (unsigned long long)XXH3_64bits(url, strlen(url)));
    return k > 0 && (size_t)k < cap;
}

int sl_cache__memo_get(const char *url, sl_cache_memo *x) {
    char path[NAME_ROOM + 64];
    if (!memo_path(url, path, sizeof path, 0))
        return 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    struct stat st;
    int ok = 0;
    char line[NAME_ROOM + 8], etag[sizeof x->etag + 2], lm[sizeof x->last_mod + 2];
    long long total;
    int dir;
    time_t now = time(NULL);
    if (fstat(fileno(f), &st) == 0 && st.st_mtime <= now && now - st.st_mtime < cache.ttl_s &&
        fgets(line, sizeof line, f) && sscanf(line, "SLMEMO1 %d %lld", &dir, &total) == 2 &&
        fgets(etag, sizeof etag, f) && fgets(lm, sizeof lm, f) &&
        fgets(line, sizeof line, f)) {
        etag[strcspn(etag, "\n")] = 0;
        lm[strcspn(lm, "\n")] = 0;
        line[strcspn(line, "\n")] = 0;
        if (!strcmp(line, url)) { /* not another URL with the same key */
            x->total = total;
            x->is_dir = dir != 0;
            etag[sizeof x->etag - 1] = 0;
            lm[sizeof x->last_mod - 1] = 0;
            memcpy(x->etag, etag, strlen(etag) + 1);
            memcpy(x->last_mod, lm, strlen(lm) + 1);
            ok = 1;
        }
    }
    fclose(f);
    return ok;
}

void sl_cache__memo_put(const char *url, const sl_cache_memo *x) {
    char dir[NAME_ROOM + 64], path[NAME_ROOM + 64], tmp[NAME_ROOM + 128];
    if (!memo_path(url, dir, sizeof dir, 1) || !memo_path(url, path, sizeof path, 0))
        return;
    if (mkdirs(dir) != 0)
        return;
    static _Thread_local unsigned seq;
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld-%u", path, (long)getpid(), ++seq);
    int fd = cache_create(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        unlink(tmp);
        return;
    }
    int bad = fprintf(f, "SLMEMO1 %d %lld\n%s\n%s\n%s\n", x->is_dir, (long long)x->total,
                      x->etag, x->last_mod, url) < 0;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0)
        unlink(tmp);
}

void sl_cache__memo_drop(const char *url) {
    char path[NAME_ROOM + 64];
    if (memo_path(url, path, sizeof path, 0))
        unlink(path);
}
