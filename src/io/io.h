/*
 * io.h — the byte-access layer: every source and the record reader get the
 * bytes of a file through here, so that remote inputs (http(s)://, s3://)
 * plug in at one place, as a second provider of the same calls, instead of
 * as a branch in each format.
 *
 * An `sl_io` is one open object (a file today; an object behind a URL later)
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

typedef struct sl_io sl_io;

/* What a provider implements. */
typedef struct sl_io_vtbl {
    const char *scheme; /* "file"; later "http", "s3" */
    /* Up to n bytes at `off` into dst; *got < n only at the end of the
     * object. A failure sets the message (naming io->name) and returns it. */
    int (*read)(sl_io *io, void *dst, size_t n, uint64_t off, size_t *got);
    /* Unmap, close, free (io included). */
    void (*close)(sl_io *io);
} sl_io_vtbl;

/* The part every provider shares; a provider's own struct starts with it. */
struct sl_io {
    const sl_io_vtbl *vt;
    char *name;          /* path or URL, for messages (owned) */
    uint64_t size;       /* bytes of the object, fixed at open */
    const uint8_t *map;  /* the whole object in memory, or NULL (ranges only) */
};

/* Open `name` (a path; a URL once a remote provider exists). SL_IO_MAP asks
 * for the whole object in memory. Free with sl_io__close. */
int sl_io__open(sl_io **out, const char *name, unsigned flags);
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

/* Read a whole (small) file into sl__malloc memory plus a terminating zero
 * byte (not counted in *n_out); the caller frees it. `max` bounds the size
 * (SL_ELIMIT beyond it; 0 = no bound). SL_END, with no message, when the
 * file does not exist and `missing_ok` is set. */
int sl_io__read_file(const char *name, uint64_t max, int missing_ok, uint8_t **out,
                     size_t *n_out);

#endif /* SL_IO_H */
