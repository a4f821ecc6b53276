/*
 * cache.h — the node's shard cache of the remote provider (cache.c): whole
 * remote objects kept as files on local disk, shared by the processes of a
 * node, and the answers of HEAD requests remembered for SLUICE_CACHE_TTL.
 *
 * An entry is one object version (named by a hash of its URL, size and
 * validator), its bytes plus a 16-byte trailer ("SLCACHE1" + XXH3-64 of the
 * bytes); it is written under a temporary name and renamed into place when
 * complete and checked (size, trailer) on every use; a per-entry lock file
 * (flock) makes the processes of a node fetch an object once; the least
 * recently used entries are evicted past SLUICE_CACHE_BYTES. The cache does
 * not fetch: the provider's `fetch` callback writes the bytes, its `check`
 * callback says whether they are what the server said.
 *
 * Settings (read once, at sl_cache__init): SLUICE_CACHE_DIR (default
 * $XDG_CACHE_HOME/sluice or ~/.cache/sluice), SLUICE_CACHE_BYTES (8 GiB; 0:
 * no cache), SLUICE_CACHE_TTL (300 s), SLUICE_CACHE_MODE (0700).
 *
 * Thread safety: every function may run on many threads (and processes) at
 * once.
 */
#ifndef SL_IO_CACHE_H
#define SL_IO_CACHE_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

/* sl_cache__fetch's outcomes besides SL_OK and errors */
#define SL_CACHE_NO_ROOM 2   /* no cache, or the object does not fit it (nothing said) */
#define SL_CACHE_UNUSABLE 3  /* the cache cannot be written (a warning said why) */

/* The settings from the environment; once per process (the provider's init). */
void sl_cache__init(void);
/* The budget from now on (io.h's sl_io__cache_set_bytes). */
void sl_cache__set_bytes(uint64_t bytes);
/* Whether a cache is in use (a folder and a budget). */
int sl_cache__on(void);
/* Whether an object of `size` bytes has room in the cache. */
int sl_cache__fits(uint64_t size);

/* An entry mapped: its bytes (the object's, then the trailer) and, when
 * kept, its path (sl__malloc'd). */
typedef struct sl_cache_entry {
    const uint8_t *map;
    size_t len;
    char *path;
} sl_cache_entry;

/* The entry of `url` at `size` and `validator`, when it is there and sound:
 * SL_OK (mapped; with `keep`, its path kept and it becomes the most recently
 * used), SL_ECORRUPT with no message when it is not there or not sound, or
 * another error. */
int sl_cache__open(sl_cache_entry *e, const char *name, const char *url, uint64_t size,
                   const char *validator, int keep);
/* The entry of `url`, found or fetched: fetch(user, fd, hs) writes the
 * object's `size` bytes into fd (hashing them into hs), check(user, bytes,
 * size) says whether they are sound before the entry is published. SL_OK
 * (mapped, path kept, the cache evicted to its budget), SL_CACHE_NO_ROOM,
 * SL_CACHE_UNUSABLE, or an error (fetch's or check's). */
int sl_cache__fetch(sl_cache_entry *e, const char *name, const char *url, uint64_t size,
                    const char *validator, int (*fetch)(void *user, int fd, XXH3_state_t *hs),
                    int (*check)(void *user, const uint8_t *p, size_t n), void *user);
/* Unmaps and frees the entry (its file stays). */
void sl_cache__close(sl_cache_entry *e);
/* Deletes the entry's file (its mapping stays valid): the next open fetches
 * the object again. */
void sl_cache__forget(const sl_cache_entry *e, const char *name);

/* ---- what a HEAD said, remembered (SLUICE_CACHE_TTL) --------------------------------- */

typedef struct sl_cache_memo {
    int64_t total;
    int is_dir;
    char etag[128];
    char last_mod[64];
} sl_cache_memo;

/* Whether answers are remembered (a cache folder, a budget and a TTL). */
int sl_cache__memo_on(void);
/* The answer remembered for `url` within the TTL: 1, or 0 (ask). */
int sl_cache__memo_get(const char *url, sl_cache_memo *m);
void sl_cache__memo_put(const char *url, const sl_cache_memo *m);
void sl_cache__memo_drop(const char *url);

#endif /* SL_IO_CACHE_H */
