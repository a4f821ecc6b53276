/*
 * source_index.c — the sidecar index (DATA.slidx): building, writing
 * atomically, loading with every check docs/FORMAT.md ("Sidecar index")
 * asks of a reader. See source_index.h.
 *
 * Invariants:
 *  1. A loaded index has passed its checksum, and every size in it has been
 *     bounded by the file's length before anything was allocated from it.
 *  2. Entries are in record order and do not overlap; for an index of plain
 *     bytes (no SL_SIDX_DECOMPRESSED) they also lie inside the data file.
 *  3. An index on disk is complete or absent: it is written under a temporary
 *     name, synced, then renamed.
 */
#include "source/source_index.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static const uint8_t magic_start[8] = {0x89, 'S', 'L', 'I', 'D', 'X', '\r', '\n'};
static const uint8_t magic_end[8] = {'S', 'L', 'I', 'D', 'X', 'E', 'N', 'D'};

#define HDR_BYTES 64
/* An entry: offset, length (version 1); and the record's XXH3-64 (version 2). */
#define ENTRY_BYTES_V1 16
#define ENTRY_BYTES 24
#define COL_BYTES 136
#define SCALAR_BYTES 72
#define FOOTER_BYTES 16

int sl_sidx__path(const char *data_path, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s%s", data_path, SL_SIDX_SUFFIX);
    if (n < 0 || (size_t)n >= cap)
        return sl__error(SL_EINVAL, "%s: path too long for its index", data_path);
    return SL_OK;
}

int sl_sidx__stat(const char *path, uint64_t *size_out, int64_t *mtime_ns_out) {
    sl_io_info st;
    int rc = sl_io__stat(path, &st);
    if (rc == SL_END)
        return sl__error(SL_EIO, "%s: %s", path, sl_io__missing(path));
    SL_TRY(rc);
    *size_out = st.size;
    *mtime_ns_out = st.mtime_ns;
    return SL_OK;
}

/* ---- what a source does with them ------------------------------------------------ */

sl_sidx_use sl_sidx__use(int index) {
    return index < 0 ? SL_SIDX_USE_AUTO : index ? SL_SIDX_USE_YES : SL_SIDX_USE_NO;
}

/* sl_sidx__load_for / _head_for: `use` decides whether a missing index is
 * an error; `load` reads it (whole, or its head). */
static int load_for(const char *data_path, const char *kind, sl_sidx_use use, sl_sidx **out,
                    int (*load)(const char *, const char *, sl_sidx **)) {
    *out = NULL;
    if (use == SL_SIDX_USE_NO)
        return SL_OK;
    int rc = load(data_path, kind, out);
    if (rc == SL_END && use == SL_SIDX_USE_YES)
        return sl__error(SL_EINVAL, "%s: no index (%s" SL_SIDX_SUFFIX "); build it with `sluice "
                         "index %s`", data_path, sl__base_name(data_path), data_path);
    return rc == SL_END ? SL_OK : rc;
}

int sl_sidx__load_for(const char *data_path, const char *kind, sl_sidx_use use, sl_sidx **out) {
    return load_for(data_path, kind, use, out, sl_sidx__load);
}

int sl_sidx__load_head_for(const char *data_path, const char *kind, sl_sidx_use use,
                           sl_sidx **out) {
    return load_for(data_path, kind, use, out, sl_sidx__load_head);
}

/* ---- building ------------------------------------------------------------------ */

int sl_sidx__begin(sl_sidx **out, const char *kind, const char *data_path) {
    SL_TRY(sl_sidx__create(out, kind));
    int rc = sl_sidx__stat(data_path, &(*out)->data_size, &(*out)->data_mtime_ns);
    if (rc < 0) {
        sl_sidx__free(*out);
        *out = NULL;
    }
    return rc;
}

int sl_sidx__create(sl_sidx **out, const char *kind) {
    *out = NULL;
    if (!kind || !kind[0] || strlen(kind) >= SL_SIDX_KIND_MAX)
        return sl__error(SL_EINVAL, "index kind '%s' must be 1-%d bytes", kind ? kind : "",
                         SL_SIDX_KIND_MAX - 1);
    sl_sidx *ix = sl__calloc(1, sizeof *ix);
    if (!ix)
        return sl__oom("creating an index");
    memcpy(ix->kind, kind, strlen(kind));
    ix->version = SL_SIDX_VERSION;
    *out = ix;
    return SL_OK;
}

int sl_sidx__add_record(sl_sidx *ix, uint64_t offset, uint64_t length) {
    /* Scalars hold `count` values each: records come first. */
    assert(ix->nscalar == 0);
    if (ix->count == ix->cap) { /* offset[], length[] and sum[] grow together */
        size_t need = (size_t)ix->count + 1, cap[3] = {ix->cap, ix->cap, ix->cap};
        SL_TRY(sl__grow((void **)&ix->offset, &cap[0], need, 8, 1024, "building an index"));
        SL_TRY(sl__grow((void **)&ix->length, &cap[1], need, 8, 1024, "building an index"));
        SL_TRY(sl__grow((void **)&ix->sum, &cap[2], need, 8, 1024, "building an index"));
        ix->cap = cap[2];
    }
    ix->offset[ix->count] = offset;
    ix->length[ix->count] = length;
    ix->sum[ix->count] = 0;
    ix->count++;
    ix->summed = 0;
    return SL_OK;
}

static int check_name(const char *name, const char *what) {
    if (!name || !name[0] || strlen(name) >= SL_COLNAME_MAX)
        return sl__error(SL_EINVAL, "%s name '%s' must be 1-%d bytes", what, name ? name : "",
                         SL_COLNAME_MAX - 1);
    return SL_OK;
}

int sl_sidx__add_col(sl_sidx *ix, const char *name, sl_coltype type, sl_dtype dtype,
                     int ndim, const int64_t *shape, uint32_t flags) {
    SL_TRY(check_name(name, "column"));
    if (sl_sidx__find_col(ix, name) >= 0)
        return sl__error(SL_EINVAL, "column '%s' appears twice", name);
    if (ix->ncols >= SL_SIDX_MAX_COLS)
        return sl__error(SL_ELIMIT, "more than %d columns in one index", SL_SIDX_MAX_COLS);
    if (ndim < 0 || ndim > SL_MAX_DIMS)
        return sl__error(SL_EINVAL, "column '%s': %d dims (at most %d)", name, ndim, SL_MAX_DIMS);
    sl_sidx_col *c = sl__append_zeroed((void **)&ix->col, (size_t)ix->ncols, sizeof *c,
                                       "building an index");
    if (!c)
        return SL_ENOMEM;
    memcpy(c->name, name, strlen(name));
    c->type = type;
    c->dtype = dtype;
    c->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        c->shape[d] = shape ? shape[d] : -1;
    c->flags = flags;
    ix->ncols++;
    return SL_OK;
}

int sl_sidx__add_scalar(sl_sidx *ix, const char *name, sl_coltype type, const void *vals) {
    SL_TRY(check_name(name, "scalar column"));
    if (type != SL_COL_INT64 && type != SL_COL_FLOAT64)
        return sl__error(SL_EINVAL, "scalar column '%s' must be INT64 or FLOAT64", name);
    if (sl_sidx__find_scalar(ix, name) >= 0)
        return sl__error(SL_EINVAL, "scalar column '%s' appears twice", name);
    if (ix->nscalar >= SL_SIDX_MAX_SCALARS)
        return sl__error(SL_ELIMIT, "more than %d scalar columns in one index",
                         SL_SIDX_MAX_SCALARS);
    sl_sidx_scalar *s = sl__append_zeroed((void **)&ix->scalar, (size_t)ix->nscalar, sizeof *s,
                                          "building an index");
    if (!s)
        return SL_ENOMEM;
    s->vals = sl__malloc(ix->count ? (size_t)ix->count * 8 : 1);
    if (!s->vals)
        return sl__oom("building an index");
    if (ix->count)
        memcpy(s->vals, vals, (size_t)ix->count * 8);
    memcpy(s->name, name, strlen(name));
    s->type = type;
    ix->nscalar++;
    return SL_OK;
}

int sl_sidx__find_col(const sl_sidx *ix, const char *name) {
    for (int k = 0; k < ix->ncols; k++)
        if (!strcmp(ix->col[k].name, name))
            return k;
    return -1;
}

int sl_sidx__find_scalar(const sl_sidx *ix, const char *name) {
    for (int k = 0; k < ix->nscalar; k++)
        if (!strcmp(ix->scalar[k].name, name))
            return k;
    return -1;
}

void sl_sidx__free(sl_sidx *ix) {
    if (!ix)
        return;
    sl__free(ix->offset);
    sl__free(ix->length);
    sl__free(ix->sum);
    sl__free(ix->col);
    for (int k = 0; k < ix->nscalar; k++)
        sl__free(ix->scalar[k].vals);
    sl__free(ix->scalar);
    sl__free(ix->self_version);
    sl__free(ix->data_version);
    sl__free(ix);
}

/* ---- bytes ----------------------------------------------------------------------- */

static size_t entry_bytes(uint32_t version) {
    return version == 1 ? ENTRY_BYTES_V1 : ENTRY_BYTES;
}

/* Total file size for these counts; false on overflow. */
static bool file_bytes(uint32_t version, uint64_t count, uint64_t ncols, uint64_t nscalar,
                       size_t *out) {
    size_t n = HDR_BYTES + FOOTER_BYTES, t;
    if (!sl__mul_ok((size_t)count, entry_bytes(version), &t) || !sl__add_ok(n, t, &n))
        return false;
    if (!sl__mul_ok((size_t)ncols, COL_BYTES, &t) || !sl__add_ok(n, t, &n))
        return false;
    if (!sl__mul_ok((size_t)nscalar, SCALAR_BYTES, &t) || !sl__add_ok(n, t, &n))
        return false;
    if (!sl__mul_ok((size_t)count, 8, &t) || !sl__mul_ok(t, (size_t)nscalar, &t) ||
        !sl__add_ok(n, t, &n))
        return false;
    *out = n;
    return true;
}

static int serialize(const sl_sidx *ix, uint8_t **buf_out, size_t *n_out) {
    size_t n;
    if (!file_bytes(SL_SIDX_VERSION, ix->count, (uint64_t)ix->ncols, (uint64_t)ix->nscalar, &n))
        return sl__error(SL_ELIMIT, "index too large");
    uint8_t *b = sl__calloc(1, n);
    if (!b)
        return sl__oom("writing an index");
    memcpy(b, magic_start, 8);
    sl__st32(b + 8, SL_SIDX_VERSION);
    sl__st32(b + 12, ix->flags);
    sl__st64(b + 16, ix->data_size);
    sl__st64(b + 24, ix->data_sum);
    sl__st64(b + 32, ix->count);
    sl__st32(b + 40, (uint32_t)ix->ncols);
    sl__st32(b + 44, (uint32_t)ix->nscalar);
    memcpy(b + 48, ix->kind, strlen(ix->kind));
    uint8_t *p = b + HDR_BYTES;
    for (uint64_t i = 0; i < ix->count; i++, p += ENTRY_BYTES) {
        sl__st64(p, ix->offset[i]);
        sl__st64(p + 8, ix->length[i]);
        sl__st64(p + 16, ix->sum[i]);
    }
    for (int k = 0; k < ix->ncols; k++, p += COL_BYTES) {
        const sl_sidx_col *c = &ix->col[k];
        memcpy(p, c->name, strlen(c->name));
        p[64] = (uint8_t)c->type;
        p[65] = (uint8_t)c->dtype;
        p[66] = (uint8_t)c->ndim;
        sl__st32(p + 68, c->flags);
        for (int d = 0; d < c->ndim; d++)
            sl__st64(p + 72 + 8 * d, (uint64_t)c->shape[d]);
    }
    for (int k = 0; k < ix->nscalar; k++, p += SCALAR_BYTES) {
        memcpy(p, ix->scalar[k].name, strlen(ix->scalar[k].name));
        p[64] = (uint8_t)ix->scalar[k].type;
    }
    for (int k = 0; k < ix->nscalar; k++) {
        const uint8_t *v = ix->scalar[k].vals;
        /* Values are stored little-endian, as 8-byte words. */
        for (uint64_t i = 0; i < ix->count; i++, p += 8) {
            uint64_t w;
            memcpy(&w, v + 8 * i, 8);
            sl__st64(p, w);
        }
    }
    sl__st64(p, XXH3_64bits(b, n - FOOTER_BYTES));
    memcpy(p + 8, magic_end, 8);
    assert((size_t)(p + FOOTER_BYTES - b) == n);
    *buf_out = b;
    *n_out = n;
    return SL_OK;
}

int sl_sidx__sum_entries(sl_sidx *ix, const uint8_t *stream, size_t n) {
    for (uint64_t i = 0; i < ix->count; i++) {
        if (ix->offset[i] > n || ix->length[i] > n - ix->offset[i])
            return sl__error(SL_EINVAL, "index entry %" PRIu64 " (offset %" PRIu64 ", %" PRIu64
                             " bytes) lies outside the data (%zu bytes)", i, ix->offset[i],
                             ix->length[i], n);
        ix->sum[i] = XXH3_64bits(stream + ix->offset[i], (size_t)ix->length[i]);
    }
    ix->summed = 1;
    return SL_OK;
}

int sl_sidx__check_entry(const sl_sidx *ix, uint64_t r, const uint8_t *p, const char *where,
                         const char *data_path) {
    if (!ix->sum || r >= ix->count)
        return SL_OK;
    if (XXH3_64bits(p, (size_t)ix->length[r]) != ix->sum[r])
        return sl__error(SL_ECORRUPT, "%s: checksum mismatch against %s" SL_SIDX_SUFFIX " (the "
                         "bytes changed or were damaged since they were indexed: fetch or copy "
                         "them again, or rebuild the index with `sluice index %s` if the change "
                         "was meant)", where, sl_io__short_name(data_path), data_path);
    return SL_OK;
}

int sl_sidx__check_data(const sl_sidx *ix, const uint8_t *p, uint64_t n, const char *data_path) {
    if (ix->version < 2)
        return SL_OK;
    if (n != ix->data_size)
        return sl__error(SL_ECORRUPT, "%s: %" PRIu64 " bytes where its index says %" PRIu64,
                         data_path, n, ix->data_size);
    if (XXH3_64bits(p, (size_t)n) != ix->data_sum)
        return sl__error(SL_ECORRUPT, "%s: checksum mismatch against its index (the bytes "
                         "differ from those indexed)", data_path);
    return SL_OK;
}

int sl_sidx__io_check(sl_io *io, void *user) {
    const uint8_t *m = sl_io__map(io);
    return sl_sidx__check_data(user, m ? m : (const uint8_t *)"", sl_io__size(io),
                               sl_io__name(io));
}

static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int sl_sidx__write(const char *data_path, const sl_sidx *ix) {
    char path[4096], tmp[4200];
    if (sl_io__is_url(data_path))
        return sl__error(SL_EUNSUPPORTED, "%s: an index is written beside a local file; index a "
                         "local copy and put its .slidx beside the remote file", data_path);
    SL_TRY(sl_sidx__path(data_path, path, sizeof path));
    uint64_t size = 0;
    int64_t mtime = 0;
    SL_TRY(sl_sidx__stat(data_path, &size, &mtime));
    if (size != ix->data_size || mtime != ix->data_mtime_ns)
        return sl__error(SL_EINVAL, "%s changed while it was being indexed; index it again",
                         data_path);
    /* The data's checksum, and each entry's (a plain index's offsets count
     * the file's bytes), from the file as it is now: the size was checked
     * above, and a file rewritten in place since the scan is caught by the
     * entries, which the scan found where they are. */
    sl_io *io = NULL;
    SL_TRY(sl_io__open(&io, data_path, SL_IO_MAP));
    const uint8_t *m = sl_io__map(io);
    uint64_t msize = sl_io__size(io);
    sl_sidx *w = (sl_sidx *)ix; /* the sums are the writer's to fill */
    int src = SL_OK;
    if (msize != ix->data_size)
        src = sl__error(SL_EINVAL, "%s changed while it was being indexed; index it again",
                        data_path);
    if (src == SL_OK) {
        w->data_sum = XXH3_64bits(m, (size_t)msize);
        if (!(ix->flags & SL_SIDX_DECOMPRESSED))
            src = sl_sidx__sum_entries(w, m, (size_t)msize);
        else if (!ix->summed && ix->count)
            src = sl__error(SL_EINVAL, "%s: the entries of a decompressed index need their "
                            "checksums first (sl_sidx__sum_entries)", data_path);
    }
    sl_io__close(io);
    SL_TRY(src);
    uint8_t *buf = NULL;
    size_t n = 0;
    SL_TRY(serialize(ix, &buf, &n));
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
    int rc = SL_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        sl__free(buf);
        return sl__error(SL_EIO, "%s: cannot create a temporary file: %s", path,
                         strerror(errno));
    }
    if (write_all(fd, buf, n) != 0 || fchmod(fd, 0644) != 0 || fsync(fd) != 0)
        rc = sl__error(SL_EIO, "%s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == SL_OK)
        rc = sl__error(SL_EIO, "%s: %s", tmp, strerror(errno));
    sl__free(buf);
    if (rc == SL_OK && rename(tmp, path) != 0)
        rc = sl__error(SL_EIO, "%s: cannot rename into place: %s", path, strerror(errno));
    if (rc < 0) {
        unlink(tmp);
        return rc;
    }
    /* The rename is durable once the directory is synced. */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return SL_OK;
}

/* ---- loading --------------------------------------------------------------------- */

static int zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* A NUL-padded name field of `cap` bytes: non-empty, terminated, zero after. */
static int name_ok(const uint8_t *p, size_t cap) {
    size_t len = strnlen((const char *)p, cap);
    return len > 0 && len < cap && zero(p + len, cap - len);
}

/* Where the scalar values begin, after the descriptors at `q`. */
static const uint8_t *vals_of(const uint8_t *q, uint32_t ncols, uint32_t nscalar) {
    return q + (size_t)ncols * COL_BYTES + (size_t)nscalar * SCALAR_BYTES;
}

/* The column and scalar descriptors at `q` (ncols x 136, then nscalar x 72)
 * into `ix`, whose `count` is set. `vals`: the scalar values (ix->count per
 * scalar), or NULL for a header load, which keeps names and types only. */
static int parse_descriptors(sl_sidx *ix, const uint8_t *q, uint32_t ncols, uint32_t nscalar,
                             const uint8_t *vals, const char *name) {
    int rc = SL_OK;
    uint64_t count = ix->count;
    for (uint32_t k = 0; k < ncols; k++, q += COL_BYTES) {
        int nd = q[66];
        uint32_t cf = sl__ld32(q + 68);
        if (!name_ok(q, 64) || q[64] < SL_COL_INT64 || q[64] > SL_COL_ARRAY || q[65] < SL_U8 ||
            q[65] > SL_BOOL || nd > SL_MAX_DIMS || q[67] || (cf & ~SL_SIDX_COL_KNOWN_FLAGS) ||
            !zero(q + 72 + 8 * nd, (size_t)(SL_MAX_DIMS - nd) * 8))
            return sl__error(SL_ECORRUPT, "%s: column descriptor %u is malformed", name, k);
        int64_t shape[SL_MAX_DIMS];
        for (int d = 0; d < nd; d++) {
            shape[d] = (int64_t)sl__ld64(q + 72 + 8 * d);
            if (shape[d] < -1)
                return sl__error(SL_ECORRUPT, "%s: column descriptor %u is malformed", name, k);
        }
        rc = sl_sidx__add_col(ix, (const char *)q, (sl_coltype)q[64], (sl_dtype)q[65], nd, shape,
                              cf);
        if (rc == SL_EINVAL)
            return sl__error_prefix(SL_ECORRUPT, "%s: column descriptor %u", name, k);
        SL_TRY(rc);
    }
    for (uint32_t k = 0; k < nscalar; k++, q += SCALAR_BYTES) {
        if (!name_ok(q, 64) || (q[64] != SL_COL_INT64 && q[64] != SL_COL_FLOAT64) ||
            !zero(q + 65, 7))
            return sl__error(SL_ECORRUPT, "%s: scalar descriptor %u is malformed", name, k);
        /* Values go in as they lie (little-endian words); converted below.
         * A header load adds the descriptor with no values (count 0). */
        uint64_t keep = ix->count;
        if (!vals)
            ix->count = 0;
        rc = sl_sidx__add_scalar(ix, (const char *)q, (sl_coltype)q[64],
                                 vals ? vals + (size_t)k * (size_t)count * 8 : NULL);
        ix->count = keep;
        if (rc == SL_EINVAL)
            return sl__error_prefix(SL_ECORRUPT, "%s: scalar descriptor %u", name, k);
        SL_TRY(rc);
        if (!vals) {
            sl__free(ix->scalar[k].vals);
            ix->scalar[k].vals = NULL;
            continue;
        }
        uint64_t *w = ix->scalar[k].vals;
        for (uint64_t i = 0; i < count; i++)
            w[i] = sl__ld64(&w[i]);
    }
    return SL_OK;
}

/* The counts of a header, which the caller reads on. */
typedef struct {
    uint64_t count;
    uint32_t ncols, nscalar;
} header_counts;

/* The fixed header h[HDR_BYTES] of an index file of n bytes, checked
 * (magic, version, flags, sizes against n, kind): a new index holding its
 * kind, flags, version, data size and mtime or checksum, and the counts. */
static int header_decode(const uint8_t *h, size_t n, const char *name, sl_sidx **out,
                         header_counts *hc) {
    *out = NULL;
    if (n < HDR_BYTES + FOOTER_BYTES || memcmp(h, magic_start, 8) != 0)
        return sl__error(SL_ECORRUPT, "%s: not a sluice index (bad magic or too short)", name);
    uint32_t version = sl__ld32(h + 8), flags = sl__ld32(h + 12);
    if (version == 0 || version > SL_SIDX_VERSION)
        return sl__error(version ? SL_EUNSUPPORTED : SL_ECORRUPT,
                         "%s: index version %u (this build reads up to %d)", name, version,
                         SL_SIDX_VERSION);
    if (flags & ~SL_SIDX_KNOWN_FLAGS)
        return sl__error(SL_EUNSUPPORTED, "%s: unknown flags 0x%x", name, flags);
    uint64_t count = sl__ld64(h + 32);
    uint32_t ncols = sl__ld32(h + 40), nscalar = sl__ld32(h + 44);
    size_t want;
    if (ncols > SL_SIDX_MAX_COLS || nscalar > SL_SIDX_MAX_SCALARS || count > n ||
        !file_bytes(version, count, ncols, nscalar, &want) || want != n)
        return sl__error(SL_ECORRUPT, "%s: sizes disagree (%" PRIu64 " records, %u columns, "
                         "%u scalar columns in %zu bytes)", name, count, ncols, nscalar, n);
    if (!name_ok(h + 48, SL_SIDX_KIND_MAX))
        return sl__error(SL_ECORRUPT, "%s: bad kind field", name);
    sl_sidx *ix = NULL;
    SL_TRY(sl_sidx__create(&ix, (const char *)h + 48));
    ix->flags = flags;
    ix->version = version;
    ix->data_size = sl__ld64(h + 16);
    if (version == 1)
        ix->data_mtime_ns = (int64_t)sl__ld64(h + 24);
    else
        ix->data_sum = sl__ld64(h + 24);
    hc->count = count;
    hc->ncols = ncols;
    hc->nscalar = nscalar;
    *out = ix;
    return SL_OK;
}

int sl_sidx__parse(const uint8_t *p, size_t n, const char *name, sl_sidx **out) {
    *out = NULL;
    if (n < HDR_BYTES + FOOTER_BYTES || memcmp(p, magic_start, 8) != 0)
        return sl__error(SL_ECORRUPT, "%s: not a sluice index (bad magic or too short)", name);
    if (memcmp(p + n - 8, magic_end, 8) != 0)
        return sl__error(SL_ECORRUPT, "%s: truncated or unfinished (no end magic)", name);
    if (sl__ld64(p + n - FOOTER_BYTES) != XXH3_64bits(p, n - FOOTER_BYTES))
        return sl__error(SL_ECORRUPT, "%s: checksum mismatch", name);
    sl_sidx *ix = NULL;
    header_counts hc;
    SL_TRY(header_decode(p, n, name, &ix, &hc));
    int rc = SL_OK;
    const uint32_t version = ix->version, flags = ix->flags, ncols = hc.ncols,
                   nscalar = hc.nscalar;
    const uint64_t count = hc.count;
    ix->count = ix->cap = count;
    ix->offset = sl__malloc(count ? (size_t)count * 8 : 1);
    ix->length = sl__malloc(count ? (size_t)count * 8 : 1);
    if (version >= 2)
        ix->sum = sl__malloc(count ? (size_t)count * 8 : 1);
    if (!ix->offset || !ix->length || (version >= 2 && !ix->sum))
        SL_FAIL(SL_ENOMEM, "out of memory loading %s", name);
    const uint8_t *q = p + HDR_BYTES;
    uint64_t end = 0;
    size_t eb = entry_bytes(version);
    for (uint64_t i = 0; i < count; i++, q += eb) {
        uint64_t off = sl__ld64(q), len = sl__ld64(q + 8);
        if (off < end || len == 0 || off + len < off ||
            (!(flags & SL_SIDX_DECOMPRESSED) && off + len > ix->data_size))
            SL_FAIL(SL_ECORRUPT, "%s: entry %" PRIu64 " (offset %" PRIu64 ", %" PRIu64
                    " bytes) overlaps its neighbour or runs past the data", name, i, off, len);
        ix->offset[i] = off;
        ix->length[i] = len;
        if (ix->sum)
            ix->sum[i] = sl__ld64(q + 16);
        end = off + len;
    }
    SL_CHECK(parse_descriptors(ix, q, ncols, nscalar, vals_of(q, ncols, nscalar), name));
    *out = ix;
    return SL_OK;
cleanup:
    sl_sidx__free(ix);
    return rc;
}

/* `ix` (just read from `path`) is for a `kind` file and `data_path` has the
 * size and mtime it records; else an error naming both and the rebuild. */
static int check_fresh(sl_sidx *ix, const char *data_path, const char *path,
                       const char *kind) {
    if (strcmp(ix->kind, kind) != 0)
        return sl__error(SL_EINVAL, "%s indexes a %s file, not %s; rebuild it with `sluice "
                         "index %s`", path, ix->kind, kind, data_path);
    sl_io_info st;
    int src = sl_io__stat(data_path, &st);
    if (src == SL_END)
        return sl__error(SL_EIO, "%s: %s", data_path, sl_io__missing(data_path));
    SL_TRY(src);
    uint64_t size = st.size;
    int64_t mtime = st.mtime_ns;
    if (size != ix->data_size)
        return sl__error(SL_EINVAL, "%s is stale (%s changed: size %" PRIu64 " != %" PRIu64
                         "); rebuild it with `sluice index %s`", sl__base_name(path),
                         sl__base_name(data_path), ix->data_size, size, data_path);
    /* The data as it was checked: the version a source reads it at. */
    char *dv = sl__strdup(st.version);
    if (!dv)
        return sl__oom("loading an index");
    sl__free(ix->data_version);
    ix->data_version = dv;
    /* Version 2 is tied to the bytes (the checksums, checked as they are
     * read), not to the file's time: a copy keeps it valid. */
    if (ix->version >= 2)
        return SL_OK;
    /* A URL's time (Last-Modified) has whole seconds: the index, written
     * where the file was local, has nanoseconds. Compare seconds then. */
    int64_t want = ix->data_mtime_ns;
    if (sl_io__is_url(data_path))
        want -= want % 1000000000;
    if (mtime != want)
        return sl__error(SL_EINVAL, "%s is stale (%s changed: mtime %" PRId64 " != %" PRId64
                         " ns; a version 1 index is tied to the time, a rebuilt one to the "
                         "bytes); rebuild it with `sluice index %s`", sl__base_name(path),
                         sl__base_name(data_path), ix->data_mtime_ns, mtime, data_path);
    return SL_OK;
}

typedef struct parse_ctx {
    const char *path;
    sl_sidx *ix;
} parse_ctx;

/* sl_io__open_checked's check: the index parses (its checksum holds). */
static int parse_check(sl_io *io, void *user) {
    parse_ctx *c = user;
    const uint8_t *m = sl_io__map(io);
    return sl_sidx__parse(m ? m : (const uint8_t *)"", (size_t)sl_io__size(io), c->path, &c->ix);
}

/* DATA.slidx parsed (not checked for freshness); SL_END when there is none.
 * A remote index goes through the shard cache like a shard, and a copy that
 * fails its checksum is fetched again once (sl_io__open_checked); it is read
 * at the version `want` (NULL: any), and the version read is kept in it. */
static int load_file(const char *path, const char *want, sl_sidx **out) {
    *out = NULL;
    parse_ctx c = {path, NULL};
    sl_io *io = NULL;
    /* not asked about first (over HTTP a HEAD, a round trip): a missing
     * index is the open's SL_END; with no shard cache in use, an index that
     * fits in SLUICE_HTTP_OPEN_BYTES comes in one round trip (SL_IO_EDGES) */
    int rc = sl_io__open_checked(&io, path, SL_IO_MAP | SL_IO_MISSING_OK | SL_IO_EDGES, want,
                                 parse_check, &c);
    if (rc != SL_OK)
        return rc;
    if (sl_io__is_url(path) && !(c.ix->self_version = sl__strdup(sl_io__version(io)))) {
        sl_io__close(io);
        sl_sidx__free(c.ix);
        return sl__oom("loading an index");
    }
    sl_io__close(io);
    *out = c.ix;
    return SL_OK;
}

static int load_version(const char *data_path, const char *kind, const char *want,
                        sl_sidx **out) {
    *out = NULL;
    char path[4096];
    SL_TRY(sl_sidx__path(data_path, path, sizeof path));
    int rc = load_file(path, want, out);
    if (rc == SL_END || rc < 0)
        return rc;
    rc = check_fresh(*out, data_path, path, kind);
    if (rc < 0) {
        sl_sidx__free(*out);
        *out = NULL;
    }
    return rc;
}

int sl_sidx__load(const char *data_path, const char *kind, sl_sidx **out) {
    return load_version(data_path, kind, NULL, out);
}

int sl_sidx__load_head(const char *data_path, const char *kind, sl_sidx **out) {
    *out = NULL;
    char path[4096];
    SL_TRY(sl_sidx__path(data_path, path, sizeof path));
    /* A remote index is fetched whole into the shard cache (its checksum
     * checked, a damaged copy fetched again): a reader needs all of it once
     * it reads the shard, and a warm run then asks nothing for it. */
    if (sl_io__is_url(path)) {
        int lrc = load_file(path, NULL, out);
        if (lrc == SL_OK && kind && (lrc = check_fresh(*out, data_path, path, kind)) < 0) {
            sl_sidx__free(*out);
            *out = NULL;
        }
        if (lrc == SL_OK) { /* kept as a head: the entries are read again, from the cache */
            sl_sidx *ix = *out;
            sl__free(ix->offset);
            sl__free(ix->length);
            sl__free(ix->sum);
            ix->offset = ix->length = ix->sum = NULL;
            ix->cap = 0;
            for (int k = 0; k < ix->nscalar; k++) {
                sl__free(ix->scalar[k].vals);
                ix->scalar[k].vals = NULL;
            }
            ix->partial = 1;
        }
        return lrc;
    }
    sl_io_info info;
    int rc = sl_io__stat(path, &info);
    if (rc == SL_END)
        return SL_END;
    SL_TRY(rc);
    sl_io *io = NULL;
    uint8_t *desc = NULL;
    sl_sidx *ix = NULL;
    SL_TRY(sl_io__open(&io, path, 0));
    uint8_t h[HDR_BYTES];
    size_t n = (size_t)sl_io__size(io);
    if (n < HDR_BYTES + FOOTER_BYTES)
        SL_FAIL(SL_ECORRUPT, "%s: not a sluice index (bad magic or too short)", path);
    SL_CHECK(sl_io__read(io, h, sizeof h, 0));
    header_counts hc;
    SL_CHECK(header_decode(h, n, path, &ix, &hc));
    const uint64_t count = hc.count;
    const uint32_t ncols = hc.ncols, nscalar = hc.nscalar, version = ix->version;
    ix->count = count;
    ix->partial = 1;
    size_t dn = (size_t)ncols * COL_BYTES + (size_t)nscalar * SCALAR_BYTES;
    if (dn) {
        desc = sl__malloc(dn);
        if (!desc)
            SL_FAIL(SL_ENOMEM, "out of memory loading %s", path);
        SL_CHECK(sl_io__read(io, desc, dn, HDR_BYTES + count * entry_bytes(version)));
        SL_CHECK(parse_descriptors(ix, desc, ncols, nscalar, NULL, path));
    }
    if (kind)
        SL_CHECK(check_fresh(ix, data_path, path, kind));
    *out = ix;
    ix = NULL;
cleanup:
    sl__free(desc);
    sl_io__close(io);
    sl_sidx__free(ix);
    return rc;
}

int sl_sidx__same_head(const sl_sidx *head, const sl_sidx *full, const char *data_path) {
    /* The first field that differs, in words: the message says what changed,
     * not two equal numbers. */
    char what[200] = "";
    if (head->count != full->count)
        snprintf(what, sizeof what, "%" PRIu64 " records then, %" PRIu64 " now", head->count,
                 full->count);
    else if (head->data_size != full->data_size)
        snprintf(what, sizeof what, "it indexed %" PRIu64 " bytes of data then, %" PRIu64 " now",
                 head->data_size, full->data_size);
    else if (head->data_sum != full->data_sum)
        snprintf(what, sizeof what, "its checksum of the data was %016" PRIx64 " then, %016" PRIx64
                 " now: it indexes other bytes", head->data_sum, full->data_sum);
    else if (head->data_mtime_ns != full->data_mtime_ns)
        snprintf(what, sizeof what, "it indexed data modified at %" PRId64 " ns then, %" PRId64
                 " ns now", head->data_mtime_ns, full->data_mtime_ns);
    else if (head->version != full->version)
        snprintf(what, sizeof what, "format version %u then, %u now", head->version,
                 full->version);
    else if (head->flags != full->flags)
        snprintf(what, sizeof what, "flags %#x then, %#x now", head->flags, full->flags);
    else if (head->ncols != full->ncols || head->nscalar != full->nscalar)
        snprintf(what, sizeof what, "%d columns and %d scalar columns then, %d and %d now",
                 head->ncols, head->nscalar, full->ncols, full->nscalar);
    for (int k = 0; !what[0] && k < head->ncols; k++)
        if (memcmp(&head->col[k], &full->col[k], sizeof head->col[k]))
            snprintf(what, sizeof what, "column %d was \"%s\" then, \"%s\" now (name, type or "
                     "shape)", k, head->col[k].name, full->col[k].name);
    for (int k = 0; !what[0] && k < head->nscalar; k++)
        if (strcmp(head->scalar[k].name, full->scalar[k].name) ||
            head->scalar[k].type != full->scalar[k].type)
            snprintf(what, sizeof what, "scalar column %d was \"%s\" then, \"%s\" now", k,
                     head->scalar[k].name, full->scalar[k].name);
    if (what[0])
        return sl__error(SL_EINVAL, "%s" SL_SIDX_SUFFIX " changed after the source opened (%s); "
                         "open the source again", sl_io__short_name(data_path), what);
    return SL_OK;
}

int sl_sidx__load_again(const char *data_path, const char *kind, const sl_sidx *head,
                        sl_sidx **out) {
    int rc = load_version(data_path, kind, head->self_version, out);
    if (rc == SL_END)
        return sl__error(SL_EIO, "%s" SL_SIDX_SUFFIX ": gone since the source opened",
                         sl_io__short_name(data_path));
    SL_TRY(rc);
    rc = sl_sidx__same_head(head, *out, data_path);
    if (rc < 0) {
        sl_sidx__free(*out);
        *out = NULL;
    }
    return rc;
}

int sl_sidx__copy_int_values(const char *data_path, const char *kind, const sl_sidx *head,
                             uint64_t first, int ncols, const char *const *keys,
                             int64_t *const *vals) {
    sl_sidx *ix;
    SL_TRY(sl_sidx__load_again(data_path, kind, head, &ix));
    for (int c = 0; c < ncols; c++) {
        int j = vals[c] ? sl_sidx__find_scalar(ix, keys[c]) : -1;
        if (j >= 0 && ix->scalar[j].type == SL_COL_INT64 && ix->count)
            memcpy(vals[c] + first, ix->scalar[j].vals, (size_t)ix->count * sizeof(int64_t));
    }
    sl_sidx__free(ix);
    return SL_OK;
}
