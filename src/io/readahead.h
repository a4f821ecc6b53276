/*
 * readahead.h — read-ahead for remote objects read by ranges (readahead.c):
 * the ranges a reader says it will need (sl_io__will_need) are fetched ahead,
 * neighbours coalesced into one request, by one process-wide event loop
 * driving up to SLUICE_HTTP_READAHEAD (default 64) requests at once through
 * the transport (http.h); a read inside a range fetched ahead copies from it.
 *
 * An object takes part through the sl_ra_obj it embeds: its owner (the
 * remote provider) fills `name`, `url`, `prepare` and `range_ignored`; the
 * rest is the read-ahead's. Thread safety: every function may run on many
 * threads at once; sl_ra__drop before the object is freed.
 */
#ifndef SL_IO_READAHEAD_H
#define SL_IO_READAHEAD_H

#include "io/http.h"

typedef struct sl_ra_obj sl_ra_obj;
struct sl_ra_obj {
    /* the owner's, fixed before the first hint */
    const char *name; /* for messages */
    const char *url;
    /* Fills what a request of the object's bytes needs besides its range
     * (name, dialect, the version it must read). */
    void (*prepare)(const sl_ra_obj *o, sl_xfer *x);
    /* The server answered a range with the whole object (range_ignored). */
    void (*range_ignored)(sl_ra_obj *o);
    /* the read-ahead's: under its lock */
    struct sl_ra_extent *ext; /* extents hinted, queued, fetching or fetched */
    int inflight;             /* extents of this object being fetched */
    sl_ra_obj *next, **prev;  /* in the list of objects with extents */
};

/* The largest range a hint may name (a longer one is not read ahead). */
#define SL_RA_EXTENT_MAX ((uint64_t)4 << 20)

/* SLUICE_HTTP_READAHEAD and the loop's worker set; once per process (the
 * provider's init, after sl_http__init). Installs the read-ahead's
 * pthread_atfork handlers: its lock is held across fork(); the child has no
 * loop (extents being fetched fail, its first hint starts its own). */
void sl_ra__init(void);
/* Bytes [off, off + n) of o will be read soon (in the order of the calls). */
void sl_ra__hint(sl_ra_obj *o, uint64_t off, size_t n);
/* A read served from read-ahead (waiting for a fetch under way): 1 when
 * copied, 0 when not there (the caller fetches it itself). */
int sl_ra__read(sl_ra_obj *o, void *dst, size_t n, uint64_t off);
/* Forgets o's extents: dequeued, those being fetched waited for. */
void sl_ra__drop(sl_ra_obj *o);


#endif /* SL_IO_READAHEAD_H */
