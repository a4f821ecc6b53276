/*
 * shard_set.h — a set of shards opened lazily, at most `max_open` at a
 * time, least recently used closed first. Used by the .slr reader's
 * directories (record_reader.c) and the tar and TFRecord sources: any
 * reader of many files whose record counts are known before their bytes
 * are needed. In src/record/ so that both the record layer and the sources
 * above it use the one table.
 *
 * A source knows each shard's record count at open (from a sidecar index's
 * header, or a scan it made and closed); a shard's bytes and record table
 * are opened by the set's `open` callback when a reader first needs them
 * (sl_shard_set__get), once, however many threads ask at the same time.
 * A failed open is remembered: every later get of that shard returns the
 * same status and message (so each of its records reports the cause) and
 * the other shards are unaffected. An allocation failure (SL_ENOMEM) says
 * nothing about the shard: it is reported and not remembered, and the next
 * get opens again.
 *
 * Pins: get pins the shard until the matching put. Only an unpinned shard
 * is closed. What outlives a put (a zero-copy view of a mapping) must hold
 * its own reference (a retained sl_buffer), as the tar and TFRecord sources
 * do: closing a shard then drops the set's reference only. Among the
 * unpinned shards, one that ops->held calls held (a reference taken after a
 * put, still in use) is closed only when every other is held too.
 *
 * Growth (sl_shard_set__grow_to): when a shard closed within the last
 * max_open closes is wanted again, the reads cycle through more shards than
 * the bound keeps, and max_open grows by a quarter (up to a cap).
 *
 * Keeping all: once no shard will be closed again (max_open >= n and no
 * close under way), sl_shard_set__keeps_all() says so and
 * sl_shard_set__peek() reads an open shard's state without a lock or a pin:
 * it stays open as long as the set (unless sl_shard_set__set_max_open lowers
 * the bound again).
 *
 * Thread safety: every call but create/free from any thread. One mutex
 * guards the table; `open` and `close` run without it held (an open may be
 * a whole-object fetch), so threads reading other shards never wait for it.
 */
#ifndef SL_SHARD_SET_H
#define SL_SHARD_SET_H

#include "core/core.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sl_shard_set sl_shard_set;

typedef struct sl_shard_set_ops {
    /* Open shard k: its state into *state_out. A failure returns a negative
     * status with the message set (naming the shard and the cause). */
    int (*open)(void *user, int k, void **state_out);
    /* Close what open made (the set's reference to it). */
    void (*close)(void *user, int k, void *state);
    /* Optional (may be NULL): whether an open, unpinned shard is still in
     * use through a reference of its own (closed last). Called under the
     * set's lock: must not call the set. */
    bool (*held)(void *user, int k, void *state);
} sl_shard_set_ops;

/* Default bounds on shards open at once (a source's "max_open_shards"):
 * a remote shard open is a whole object in the shard cache or in memory; a
 * local one is a mapping and a descriptor, and reopening one costs a map and
 * its page faults again (a global shuffle over 500 small local shards ran
 * 5-8x slower with 64 than with all of them open: bench/README.md). */
#define SL_SHARD_SET_OPEN_REMOTE 64
#define SL_SHARD_SET_OPEN_LOCAL 1024
/* The default bound for a set of these `n` names: remote if any is a URL. */
int sl_shard_set__default_open(char *const *names, int n);

/* A set of n shards, none open. max_open >= 1. `ops` is copied; `user` is
 * passed to the callbacks and must outlive the set. */
int sl_shard_set__create(sl_shard_set **out, int n, int max_open, const sl_shard_set_ops *ops,
                         void *user);
/* Shard k, opened if it is not: SL_OK with *state_out pinned until
 * sl_shard_set__put(set, k); or the open's failure (this call's or an
 * earlier one's), message set. */
int sl_shard_set__get(sl_shard_set *set, int k, void **state_out);
/* Shard k pinned if it is open now (SL_OK), else SL_END with nothing
 * pinned and nothing opened: for messages that would like a detail. */
int sl_shard_set__get_if_open(sl_shard_set *set, int k, void **state_out);
void sl_shard_set__put(sl_shard_set *set, int k);
/* As get_if_open, but SL_END also when the set's lock is busy (never waits:
 * for cache hints on a hot path). */
int sl_shard_set__try_get_if_open(sl_shard_set *set, int k, void **state_out);
/* Shard k's state if it is open, without a lock or a pin: only meaningful
 * while sl_shard_set__keeps_all() (else a hint that may be stale at once). */
void *sl_shard_set__peek(const sl_shard_set *set, int k);
/* Whether no shard will be closed again (see "Keeping all"). */
bool sl_shard_set__keeps_all(const sl_shard_set *set);
/* Let max_open grow up to `cap` (>= max_open) when shards closed lately are
 * wanted again (see "Growth"). */
void sl_shard_set__grow_to(sl_shard_set *set, int cap);
/* Fix the bound at max_open (>= 1; growth off); shards over it are closed
 * as the next opens come. */
void sl_shard_set__set_max_open(sl_shard_set *set, int max_open);
/* Whether shard k's open failed (its status, message not set), else SL_OK. */
int sl_shard_set__failed(sl_shard_set *set, int k);

typedef struct sl_shard_set_stats {
    uint64_t opens;       /* successful opens (a shard reopened counts again) */
    uint64_t closes;      /* closed to stay within the bound */
    uint64_t failures;    /* shards whose open failed */
    int open_now;
    int max_open_seen;    /* most shards open at once (more than max_open
                             only while that many were pinned) */
    int max_open;         /* the bound now (grown, or set) */
} sl_shard_set_stats;
void sl_shard_set__stats(sl_shard_set *set, sl_shard_set_stats *out);

/* Threads that sl_shard_set__each runs at most: as many shard opens in
 * flight at once as the .slr reader's opener threads allow. */
#define SL_SHARD_SET_OPENERS 8

/* fn(user, k) for k in [0, n), on up to SL_SHARD_SET_OPENERS threads at once
 * (the calling thread is one; fewer when n is small, none started for
 * n <= 1): what a source does at open for each of its shards (read a sidecar
 * index's header: requests one after another per shard, so that a server's
 * stalls overlap instead of adding up). fn must be safe to run on different
 * k at once. Returns SL_OK, or the failure of the lowest k that failed, with
 * its message, on the calling thread (the same error a loop in order would
 * give). */
int sl_shard_set__each(int n, int (*fn)(void *user, int k), void *user);

/* Close every open shard (none may be pinned) and free the set. Accepts NULL. */
void sl_shard_set__free(sl_shard_set *set);

#endif /* SL_SHARD_SET_H */
