/*
 * io.h — the byte-access layer: every source and the record reader get the
 * bytes of a file through here, so that remote inputs (http(s)://, s3://)
 * plug in at one place, as a second provider of the same calls, instead of
 * as a branch in each format.
 *
 * An `sl_io` is one open object (a local file, or an object behind a URL)
 * of known size. Opened with SL_IO_MAP it is whole in memory (`sl_io__map`,
 * zero-copy for local files: a read-only mapping); otherwise it is read by
 * ranges (`sl_io__read`). A provider implements `sl_io_vtbl` (read a range,
 * close) and fills `size` and, when mapped, `map`, at open; `sl_io__open`
 * picks the provider from the name (a path has no "scheme://" prefix).
 *
 * One error policy for every caller (messages name the file and the cause):
 *   cannot open / stat      SL_EIO ("PATH: cannot open: No such file...");
 *                            SL_ENOMEM when the system is out of memory
 *   a directory, a device    SL_EINVAL ("PATH: is a directory", "PATH: not a
 *                            regular file")
 *   cannot map              SL_EIO ("PATH: cannot map: ...")
 *   a failed read           SL_EIO ("PATH: read failed at offset N: ...")
 *   read past the end       SL_ECORRUPT ("PATH: truncated (read past the end
 *                            at offset N)") — sl_io__read only; see read_some
 *   an unknown URL scheme   SL_EUNSUPPORTED
 *   a URL that fails         SL_EIO ("URL: HTTP 503 after 6 tries", "URL: HTTP
 *                            404 (not found)", "URL: curl: Couldn't connect
 *                            to server ... after 6 tries"), after the retries
 *                            of http.c (connection errors, timeouts, 5xx,
 *                            408, 429 with Retry-After), a broken body
 *                            resumed with a range request
 *
 * Remote names: http://, https:// and s3://bucket/key (io_remote.c over
 * http.c, libcurl; the schemes are io.c's table).
 * A URL ending in '/' (after redirects) names a directory (a .slr dataset
 * directory: NAME/manifest.json). Opened with SL_IO_MAP a remote object is
 * fetched whole into the node's shard cache (SLUICE_CACHE_DIR, bounded by
 * SLUICE_CACHE_BYTES, LRU, checked by a checksum on every use) and that file
 * is mapped; without it, each read is a range request.
 *
 * Thread safety: after open an sl_io is read-only; sl_io__read and
 * sl_io__read_some may run on many threads at once (pread for local files).
 */
#ifndef SL_IO_H
#define SL_IO_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

/* sl_io__open flags */
#define SL_IO_MAP 0x1u     /* the whole object in memory: sl_io__map is non-NULL
                              (unless it is empty) for as long as the sl_io lives */
#define SL_IO_RANDOM 0x2u  /* reads jump around: no read-ahead past what is asked
                              (madvise for a mapping) */
#define SL_IO_MAP_OR_RANGES 0x4u /* with SL_IO_MAP: a remote object that does not fit
                              the shard cache is read by ranges instead (map NULL;
                              sl_io__will_need hints read it ahead); files are mapped */
#define SL_IO_EDGES 0x8u   /* the object's first and last bytes are read right after
                              open (a format's header, footer and index): a remote
                              object read by ranges (no shard cache in use) opens
                              with a request for its last SLUICE_HTTP_OPEN_BYTES
                              (default SL_IO_EDGE_TAIL; a suffix range, whose answer
                              gives the size too: no HEAD) and, at the same time,
                              one for its first SL_IO_EDGE_HEAD (at most as many);
                              reads inside either are copies of them, and an object
                              that fits in either is whole after that one round
                              trip (mapped, with SL_IO_MAP). Files ignore it */
#define SL_IO_MISSING_OK 0x10u /* a name that does not exist (ENOENT, HTTP 404) is
                              SL_END with no message, so a caller that would ask
                              first (sl_io__stat: a HEAD) can open at once */
#define SL_IO_EDGE_HEAD ((uint64_t)64 << 10)
#define SL_IO_EDGE_TAIL ((uint64_t)256 << 10) /* the default */

typedef struct sl_io sl_io;

/* What a provider implements. */
typedef struct sl_io_vtbl {
    const char *scheme; /* the provider: "file" or "http" (every remote scheme) */
    /* Up to n bytes at `off` into dst; *got < n only at the end of the
     * object. A failure sets the message (naming io->name) and returns it. */
    int (*read)(sl_io *io, void *dst, size_t n, uint64_t off, size_t *got);
    /* Unmap, close, free (io included). */
    void (*close)(sl_io *io);
    /* Optional: bytes [off, off + n) will be read soon (a hint; never fails). */
    void (*will_need)(sl_io *io, uint64_t off, size_t n);
    /* Optional: the bytes failed a check; drop any copy kept of them (the
     * shard cache's entry), so that the next open fetches them again. */
    void (*forget)(sl_io *io);
} sl_io_vtbl;

/* Room for an object's version (sl_io__version). */
#define SL_IO_VERSION_MAX 256

/* The part every provider shares; a provider's own struct starts with it. */
struct sl_io {
    const sl_io_vtbl *vt;
    char *name;          /* path or URL, for messages (owned) */
    uint64_t size;       /* bytes of the object, fixed at open */
    const uint8_t *map;  /* the whole object in memory, or NULL (ranges only) */
    char version[SL_IO_VERSION_MAX]; /* which version of the object this is
                            (sl_io__version), filled by the provider at open */
};

/* Open `name` (a path; a URL once a remote provider exists). SL_IO_MAP asks
 * for the whole object in memory. Free with sl_io__close. */
int sl_io__open(sl_io **out, const char *name, unsigned flags);

/* ---- versions: one object, one version for as long as it is read ----------------
 *
 * An object's version is what tells its bytes from another's under the same
 * name: a remote object's validator, its ETag (else its Last-Modified) with
 * its size; a local file's size, modification time and inode. A reader that
 * opens an object again (a shard closed and reopened) passes the version it
 * read first to sl_io__open_version, so that it never reads one version's
 * bytes at the offsets it found in another's (docs/SOURCES.md, "One
 * version per run"). The string is opaque: compare two with
 * sl_io__same_version and print one with sl_io__version_words. */

/* The version of the object open in `io` ("" when the provider knows none). */
static inline const char *sl_io__version(const sl_io *io) { return io->version; }
/* Whether two versions (sl_io__version strings) name the same bytes: the same
 * size and, when both have one, the same ETag (a weak "W/" mark ignored),
 * else the same Last-Modified (a file: modification time and inode). */
int sl_io__same_version(const char *a, const char *b);
/* Version `v` of `name` in words, for messages: `ETag "x"`, `Last-Modified
 * DATE, N bytes`, `N bytes, modified DATE, inode I`. */
void sl_io__version_words(const char *name, const char *v, char *buf, size_t cap);
/* Open `name` as sl_io__open does, at the version `want` (NULL or "": any).
 * When the object is now another version: a remote object opened with
 * SL_IO_MAP whose copy of `want` is still in the shard cache is opened from
 * that copy (a warning, once per object, says the object was replaced and
 * the old version is read on); otherwise SL_EIO names the object, both
 * versions and the fix (open the source again). */
int sl_io__open_version(sl_io **out, const char *name, unsigned flags, const char *want);
/* Exactly n bytes at `off` (a copy, even from a mapping); past the end is
 * SL_ECORRUPT naming the file and offset. */
int sl_io__read(sl_io *io, void *dst, size_t n, uint64_t off);
/* Up to n bytes at `off`; *got < n only at the end of the object. */
int sl_io__read_some(sl_io *io, void *dst, size_t n, uint64_t off, size_t *got);
/* The whole object in memory, valid until sl_io__close; NULL when opened
 * without SL_IO_MAP or empty. Zero-copy readers slice it. */
static inline const uint8_t *sl_io__map(const sl_io *io) { return io->map; }
static inline uint64_t sl_io__size(const sl_io *io) { return io->size; }
static inline const char *sl_io__name(const sl_io *io) { return io->name; }
/* Accepts NULL. */
void sl_io__close(sl_io *io);
/* io's mapping as a buffer (*out) whose last release closes io, so that a
 * zero-copy view of the mapping (sl_buffer_retain on it) outlives the reader
 * that opened io: io then belongs to the buffer. *out is NULL when io has no
 * mapping (io stays the caller's). SL_OK or SL_ENOMEM (io still the
 * caller's). */
int sl_io__map_buffer(sl_io *io, sl_buffer **out);
/* Done with io: buf released when sl_io__map_buffer made one (io closes with
 * the last view), else io closed. Accepts NULLs. */
void sl_io__map_close(sl_io *io, sl_buffer *buf);
/* The bytes of `io` failed a check: a remote object's copy in the shard
 * cache is deleted (the open mapping stays valid), so that the next open
 * fetches it again. A no-op for a local file. Accepts NULL. */
void sl_io__forget(sl_io *io);

/* Checks the bytes of an object just opened: SL_OK, SL_ECORRUPT (the bytes
 * are not what they should be: message set) or another failure. */
typedef int (*sl_io_check_fn)(sl_io *io, void *user);
/* Open `name` as sl_io__open_version does (`version` NULL: any), then
 * check(io, user). Bytes from
 * elsewhere heal: when a URL's bytes fail the check with SL_ECORRUPT (a copy
 * damaged in transit, or in the shard cache), the copy is forgotten and the
 * object fetched again, once, and checked again (`check` must reset what it
 * filled in `user` on failure); when that copy fails too, SL_ECORRUPT names
 * the URL and both attempts. A local file is checked once. On failure *out
 * is NULL and nothing is left open. */
int sl_io__open_checked(sl_io **out, const char *name, unsigned flags, const char *version,
                        sl_io_check_fn check, void *user);
/* The message for a URL whose second copy failed its check too: SL_ECORRUPT
 * naming `name`, the first attempt's message `first` and the current one. */
int sl_io__twice_damaged(const char *name, const char *first);
/* SLUICE_INTEGRITY=strict: bytes from elsewhere that nothing can check end
 * to end (an unindexed tar shard over HTTP) are refused instead of read
 * with a warning. Read from the environment at each call. */
int sl_io__strict(void);
/* A hint: [off, off + n) will be read soon, in the order of the calls. A
 * remote object read by ranges fetches it ahead (neighbours coalesced into
 * one request); a no-op otherwise. Thread-safe. */
void sl_io__will_need(sl_io *io, uint64_t off, size_t n);

/* What this process has asked of the layer, for tests and stats: objects
 * opened (and of those, opened whole in memory with SL_IO_MAP), objects open
 * now, reads and their bytes. Process-wide atomics; any thread. */
typedef struct sl_io_counters {
    uint64_t opens, maps, open_now, reads, read_bytes;
} sl_io_counters;
void sl_io__counters(sl_io_counters *out);

/* What a name is, without opening it for reading. */
typedef struct sl_io_info {
    int is_dir;       /* a directory (a URL: one ending in '/', or one whose
                         NAME/manifest.json exists) */
    uint64_t size;    /* bytes (0 for a directory) */
    int64_t mtime_ns; /* last modified (a URL: Last-Modified; 0 when unknown) */
    char version[SL_IO_VERSION_MAX]; /* the version an open would read now
                                        (sl_io__version), "" for a directory */
} sl_io_info;

/* SL_OK with *out filled; SL_END with no message when `name` does not exist
 * (ENOENT, HTTP 404); an error (naming it) otherwise. */
int sl_io__stat(const char *name, sl_io_info *out);
/* The cause to print for a name sl_io__stat found missing (SL_END):
 * "HTTP 404 (not found)" for a URL, strerror(ENOENT) for a path. */
const char *sl_io__missing(const char *name);
/* Whether `name` is a URL ("scheme://..."), i.e. not a local path. */
int sl_io__is_url(const char *name);
/* How messages name an input: a path by its base name (the caller names the
 * dataset), a URL whole (its host and path are the point). */
const char *sl_io__short_name(const char *name);
/* `dir` + "/" + `name` in sl__malloc memory (no doubled '/' when `dir`
 * already ends in one, as a URL directory does); NULL when out of memory. */
char *sl_io__join(const char *dir, const char *name);

/* ---- schemes and providers ---------------------------------------------------------
 *
 * One table in io.c (`schemes`) has a row per scheme: "file" (paths: names
 * without a scheme), "http", "https", "s3". A row names its provider's open
 * and stat and, for a remote scheme, its dialect (http.h: how its names
 * become requests). The remote provider (io_remote.c) serves every remote
 * row alike: the shard cache (cache.h), read-ahead (readahead.h), retries
 * and checks (http.h) come with the row. */

typedef struct sl_io_dialect sl_io_dialect;
typedef int (*sl_http_add_header)(void *ctx, const char *line);

/* A remote scheme's dialect: how its names become HTTP requests (io_s3.c
 * fills one for s3://; http:// and https:// have none: the name is the URL).
 * A hook left NULL (a flag left 0) is plain HTTP's behaviour. */
struct sl_io_dialect {
    /* The URL `name` is fetched from, into url[cap]. */
    int (*resolve)(const char *name, char *url, size_t cap);
    /* Adds the headers that authorise a request of `url` (add(ctx, "Name:
     * value") per header): HEAD when `head`, else a GET of `range`
     * ("bytes=A-B") or, `range` NULL, of the whole object (whose answer
     * should carry the checksums the store keeps). */
    int (*sign)(const char *url, int head, const char *range, sl_http_add_header add, void *ctx);
    /* The URL's path is sent as it is (keys may hold "//", "./", "../"). */
    int path_as_is;
    /* A quoted 32-hex-digit ETag is the MD5 of the bytes (a single-part
     * upload), unless the answer says the object is encrypted with a key of
     * the store's (SSE-KMS) or the customer's (SSE-C). */
    int etag_md5;
    /* The objects under a prefix (a name ending in '/'), as io.h's
     * sl_io__list says; NULL: the scheme cannot be listed. */
    int (*list)(const char *prefix, char ***names_out, int *n_out);
    /* How a listable prefix is written, for messages ("s3://BUCKET/PREFIX/"). */
    const char *list_form;
};


typedef struct sl_io_scheme {
    const char *scheme; /* "s3" for s3://... names */
    /* sl_io__open_version for one of its names (`want` NULL: any version) */
    int (*open)(sl_io **out, const char *name, unsigned flags, const char *want,
                const sl_io_dialect *d);
    /* sl_io__stat for one of its names (*out zeroed) */
    int (*stat)(const char *name, sl_io_info *out, const sl_io_dialect *d);
    const sl_io_dialect *dialect; /* a remote scheme's, NULL for plain HTTP and files */
} sl_io_scheme;

/* The remote provider (io_remote.c): a row's open and stat. */
int sl_io__remote_open(sl_io **out, const char *name, unsigned flags, const char *want,
                       const sl_io_dialect *d);
int sl_io__remote_stat(const char *name, sl_io_info *out, const sl_io_dialect *d);
/* The CA bundle for TLS when no variable names one: NULL when libcurl's own
 * default (`builtin`, curl_version_info's cainfo) exists, else the first of
 * `candidates` (NULL-terminated) that exists: a libcurl built without a
 * bundle path (the wheels' own, over OpenSSL, scripts/wheel.sh) then finds
 * the certificates where the distribution keeps them (http.c). */
const char *sl_io__ca_pick(const char *builtin, const char *const *candidates);

/* The shard cache's budget for this process from now on (in place of
 * SLUICE_CACHE_BYTES; 0: no cache on disk — .slr shards are read by ranges,
 * tar and TFRecord shards held in memory): the spec's "cache_bytes". */
void sl_io__cache_set_bytes(uint64_t bytes);

/* The objects under a remote prefix ("s3://bucket/prefix/": ListObjectsV2,
 * every page), as names of the same scheme, in the store's order (by key),
 * sidecar indexes (.slidx) left out; sl__malloc'd array and strings, freed
 * with sl_source__free_paths' rule (NULL-terminated). SL_EINVAL for a name
 * that cannot be listed (a scheme whose dialect lists nothing, or a name
 * not ending in '/'). */
int sl_io__list(const char *prefix, char ***names_out, int *n_out);

/* Read a whole (small) file into sl__malloc memory plus a terminating zero
 * byte (not counted in *n_out); the caller frees it. `max` bounds the size
 * (SL_ELIMIT beyond it; 0 = no bound). SL_END, with no message, when the
 * file does not exist and `missing_ok` is set. */
int sl_io__read_file(const char *name, uint64_t max, int missing_ok, uint8_t **out,
                     size_t *n_out);

#endif /* SL_IO_H */
