/*
 * source_tfrecord.c — TFRecord files of tf.train.Example / SequenceExample
 * behind the source interface. docs/SOURCES.md is the user's page.
 *
 * A file is a run of frames: u64 length, u32 masked CRC-32C of those 8
 * bytes, `length` bytes of data (one serialized protobuf), u32 masked CRC-32C
 * of the data. Nothing indexes it, so opening finds the frames:
 *  - from FILE.slidx (source_index.c) when it is there and fresh: no scan,
 *    exact column types, and scalar values for pushed-down filters;
 *  - else by a header scan: read 12 bytes, check the length checksum, jump
 *    over the data. Column types then come from the first records.
 *
 * Invariants:
 *  1. Every entry of off[]/len[] that is not a bad entry lies inside its
 *     file's bytes: off + 16 + len <= size (checked at scan, or against the
 *     index at open). A read never touches a byte outside.
 *  2. Damage found while framing (length checksum mismatch, a frame cut off
 *     by the end of the file, gzip damage) becomes a *bad entry*: a record
 *     number whose read returns the error. Records around it keep their
 *     numbers and read normally; the scan resynchronises after a bad length
 *     checksum at the next position holding a valid frame header.
 *  3. After open everything here but the shard set is read-only; a cursor
 *     holds the only other mutable state (its protobuf arena), so reads run
 *     on many threads.
 *  4. Files are opened lazily (shard_set.h): open reads each sidecar index's
 *     header alone, or scans a file without one and closes it; a read opens
 *     its file (mapping or inflated bytes, whole index) through the set, at
 *     most max_open_shards at a time. off[]/len[] hold the scanned files'
 *     records only (a file's from tab_first); an indexed file's come from
 *     its whole index while it is open.
 *
 * Copies: plain files are mapped; a frame's data is checked and parsed in
 * place. protobuf-c copies every bytes field it unpacks (its API hands out
 * owned ProtobufCBinaryData), into the cursor's arena; each column is then
 * copied once more into a tensor from cur->alloc, because nothing may point
 * into a cursor's scratch after read() returns. A gzip file cannot be read at
 * random offsets, so it is inflated once, at open, into memory that lives
 * as long as the source.
 */
#include "record/shard_set.h"
#include "source/source.h"
#include "source/source_index.h"
#include "source/source_shard.h"
#include "source/source_tfrecord.h"
#include "source/tf_example.pb-c.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>


/* ---- framing ----------------------------------------------------------------- */

uint32_t sl_source__tf_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static int header_ok(const uint8_t *p) {
    return sl_source__tf_mask(sl__crc32c(0, p, 8)) == sl__ld32(p + 8);
}

/* ---- the protobuf arena --------------------------------------------------------
 * protobuf-c allocates every message, list and bytes field of an unpack
 * separately; a bump arena per cursor makes that no malloc per record in
 * steady state, and frees a whole record at once. Memory comes from the
 * sluice seam. An allocation failure is remembered, because unpack returns
 * NULL for damaged input and for a failed allocation alike. */

typedef struct arena_block {
    struct arena_block *next;
    max_align_t data[];
} arena_block;

/* protobuf-c copies every bytes field out of the record (it has no
 * zero-copy mode). An encoded image is the one big field of a record, so
 * its copy is made to land in a tensor from the cursor's allocator (the
 * executor's pools), which then becomes the column itself: the image bytes
 * are copied once, record -> column, not twice. */
#define TF_BIG_FIELD 4096
#define TF_MAX_BIG 8

typedef struct tf_arena {
    ProtobufCAllocator pa;      /* first: protobuf-c passes &pa as its data */
    uint8_t *buf;
    size_t cap, used;
    arena_block *extra;         /* what did not fit this record */
    size_t extra_bytes;
    int failed;
    const sl_source_cursor *owner; /* its allocator takes big fields; NULL: none */
    sl_tensor big[TF_MAX_BIG];  /* big fields of this record (buf NULL: handed on) */
    int nbig;
} tf_arena;

static void *arena_alloc(void *data, size_t n) {
    tf_arena *a = data;
    if (a->owner && n >= TF_BIG_FIELD && a->nbig < TF_MAX_BIG) {
        int64_t len = (int64_t)n;
        sl_tensor *t = &a->big[a->nbig];
        if (a->owner->alloc(a->owner->alloc_ctx, t, SL_U8, 1, &len) < 0) {
            a->failed = 1;
            return NULL;
        }
        a->nbig++;
        return t->data;
    }
    n = n ? (n + 15) & ~(size_t)15 : 16;
    if (n <= a->cap - a->used) {
        void *p = a->buf + a->used;
        a->used += n;
        return p;
    }
    arena_block *b = n < SIZE_MAX - sizeof *b ? sl__malloc(sizeof *b + n) : NULL;
    if (!b) {
        a->failed = 1;
        return NULL;
    }
    b->next = a->extra;
    a->extra = b;
    a->extra_bytes += n;
    return b->data;
}

static void arena_free_fn(void *data, void *p) {
    (void)data;
    (void)p; /* freed with the whole record (arena_reset) */
}

static void arena_init(tf_arena *a) {
    memset(a, 0, sizeof *a);
    a->pa.alloc = arena_alloc;
    a->pa.free = arena_free_fn;
    a->pa.allocator_data = a;
}

/* Forget the last record; grow the main block when it overflowed, so the
 * next record of that size fits in one. */
static void arena_reset(tf_arena *a) {
    for (int k = 0; k < a->nbig; k++)
        sl_tensor_release(&a->big[k]);
    a->nbig = 0;
    size_t want = a->extra_bytes ? (a->used + a->extra_bytes) * 2 : 0;
    while (a->extra) {
        arena_block *b = a->extra;
        a->extra = b->next;
        sl__free(b);
    }
    a->extra_bytes = 0;
    a->used = 0;
    a->failed = 0;
    if (want > a->cap) {
        uint8_t *nb = sl__malloc(want);
        if (nb) {  /* else keep the small block: records still read, slower */
            sl__free(a->buf);
            a->buf = nb;
            a->cap = want;
        }
    }
}

static void arena_dispose(tf_arena *a) {
    arena_reset(a);
    sl__free(a->buf);
    a->buf = NULL;
    a->cap = 0;
}

/* ---- the source ----------------------------------------------------------------- */

#define TF_BAD UINT64_MAX       /* len[] of a bad entry; off[] is its bad[] index */
#define TF_SAMPLE 32            /* records whose features decide the columns */

enum { TF_KIND_NONE = 0, TF_KIND_BYTES = 1, TF_KIND_FLOAT = 2, TF_KIND_INT64 = 3 };
static const char *const kind_name[] = {"empty", "bytes_list", "float_list", "int64_list"};

typedef struct tf_file {
    sl_shard_file sh;           /* path, index header, version; size: scanned, its
                                   bytes (decompressed for gzip) (source_shard.h) */
    const char *name;           /* base name, for messages */
    int gzip;                   /* scanned: read through gzip */
    int indexed;
} tf_file;

typedef struct tf_bad {
    int code;
    uint64_t offset;
    char msg[200];
} tf_bad;

/* What a column reads: the feature `key` (in the context, or among the
 * feature lists when `list`) as `kind`, one value per record when `scalar`. */
typedef struct tf_col {
    char key[256];
    int list;
    int kind;
    int scalar;
} tf_col;

typedef struct tf_source {
    sl_source base;
    int nfiles;
    tf_file *files;
    uint64_t *off, *len, cap;   /* per record of the scanned files: frame start and
                                   data length */
    uint64_t nscan;             /* entries in off[]/len[] */
    int max_open;               /* "max_open_shards" (0: the default) */
    sl_sidx_use index_use;      /* "index", while opening */
    sl_shard_set *set;          /* the files' bytes (and indexes), opened lazily */
    int nbad;
    tf_bad *bad;
    int verify;
    const char *compression;    /* "auto", "gzip", "none" */
    tf_col col[SL_MAX_COLUMNS];
    sl_source_ivals ivals;      /* indexed INT64 columns: a value per record, made
                                   on the first index_column call */
} tf_source;

typedef struct tf_cursor {
    sl_source_cursor base;
    tf_arena arena;
} tf_cursor;

static int kind_of(const Tensorflow__Feature *f, size_t *n) {
    if (!f) {
        *n = 0;
        return TF_KIND_NONE;
    }
    switch (f->kind_case) {
    case TENSORFLOW__FEATURE__KIND_BYTES_LIST:
        *n = f->bytes_list->n_value;
        return TF_KIND_BYTES;
    case TENSORFLOW__FEATURE__KIND_FLOAT_LIST:
        *n = f->float_list->n_value;
        return TF_KIND_FLOAT;
    case TENSORFLOW__FEATURE__KIND_INT64_LIST:
        *n = f->int64_list->n_value;
        return TF_KIND_INT64;
    default:
        *n = 0;
        return TF_KIND_NONE;
    }
}

static int add_record(tf_source *s, uint64_t off, uint64_t len) {
    if (s->nscan == s->cap) { /* off[] and len[] grow together */
        size_t need = (size_t)s->nscan + 1, cap_off = (size_t)s->cap, cap_len = cap_off;
        SL_TRY(sl__grow((void **)&s->off, &cap_off, need, 8, 1024, "opening a TFRecord source"));
        SL_TRY(sl__grow((void **)&s->len, &cap_len, need, 8, 1024, "opening a TFRecord source"));
        s->cap = cap_len;
    }
    s->off[s->nscan] = off;
    s->len[s->nscan] = len;
    s->nscan++;
    s->base.count++;
    return SL_OK;
}

#define TF_NOT_FRAMED                                                                     \
    "length checksum mismatch and no valid record after it: not a TFRecord file"

/* A bad entry: record number `count` fails with `code` and this message. */
static int add_bad(tf_source *s, tf_file *f, uint64_t offset, int code, const char *fmt, ...)
    SL_PRINTF(5, 6);
static int add_bad(tf_source *s, tf_file *f, uint64_t offset, int code, const char *fmt, ...) {
    tf_bad *b = sl__append_zeroed((void **)&s->bad, (size_t)s->nbad, sizeof *b,
                                  "opening a TFRecord source");
    if (!b)
        return SL_ENOMEM;
    b->code = code;
    b->offset = offset;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
    /* A file without one frame that checks out is not a TFRecord file: its
     * read says so (and the caller what reads it); no warning ahead of it. */
    if (offset != 0 || strcmp(b->msg, TF_NOT_FRAMED) != 0)
        SL_LOG_WARN("%s: record %" PRIu64 " (offset %" PRIu64 "): %s", f->name,
                    s->base.count - f->sh.first, offset, b->msg);
    SL_TRY(add_record(s, (uint64_t)s->nbad, TF_BAD));
    s->nbad++;
    return SL_OK;
}

/* Frame one file's bytes by their headers (invariant 2 for the damage). */
static int scan_file(tf_source *s, tf_file *f, const uint8_t *d, size_t n) {
    size_t pos = 0;
    while (pos < n) {
        if (n - pos < 12)
            return add_bad(s, f, pos, SL_ECORRUPT, "truncated record: the file ends %zu bytes "
                           "into a record header", n - pos);
        if (!header_ok(d + pos)) {
            /* Resynchronise: the next place a frame header checks out and
             * its frame fits. A random 12 bytes pass with odds of 2^-32. */
            size_t q = pos + 1;
            for (; q + 16 <= n; q++)
                if (header_ok(d + q) && sl__ld64(d + q) <= n - q - 16)
                    break;
            int more = q + 16 <= n;
            if (pos == 0 && !more)
                SL_TRY(add_bad(s, f, pos, SL_ECORRUPT, "%s", TF_NOT_FRAMED));
            else
                SL_TRY(add_bad(s, f, pos, SL_ECORRUPT, "length checksum mismatch (%s)",
                               more ? "skipped to the next valid record header"
                                    : "no valid record after it"));
            if (!more)
                return SL_OK;
            pos = q;
            continue;
        }
        uint64_t len = sl__ld64(d + pos);
        if (len > n - pos - 12 || n - pos - 12 - len < 4)
            return add_bad(s, f, pos, SL_ECORRUPT, "truncated record: length %" PRIu64
                           " runs past the end of the file (%zu bytes left)", len, n - pos - 12);
        SL_TRY(add_record(s, pos, len));
        pos += 16 + (size_t)len;
    }
    return SL_OK;
}

/* ---- opening a file: map, or inflate ------------------------------------------- */

/* Inflate all of src (every gzip member) into f->data. Damage after some
 * output keeps that output and is reported in *err (a bad tail entry);
 * damage before any is an error. */
static int inflate_all(sl_shard_bytes *f, const char *path, const uint8_t *src, size_t n, char *err,
                       size_t errcap) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    zs.zalloc = sl__zalloc;
    zs.zfree = sl__zfree;
    int zr = inflateInit2(&zs, 16 + MAX_WBITS);
    if (zr != Z_OK)
        return zr == Z_MEM_ERROR ? sl__oom("starting zlib")
                                 : sl__error(SL_EIO, "%s: zlib failed to start (%d)", path, zr);
    size_t cap = n < ((size_t)1 << 40) / 4 ? n * 4 + 4096 : n, used = 0;
    uint8_t *out = sl__malloc(cap);
    int rc = SL_OK;
    if (!out)
        SL_FAIL(SL_ENOMEM, "out of memory inflating %s", path);
    zs.next_in = (Bytef *)(uintptr_t)src;
    for (;;) {
        if (used == cap) {
            size_t ncap = cap * 2;
            uint8_t *o = ncap > cap ? sl__realloc(out, ncap) : NULL;
            if (!o)
                SL_FAIL(SL_ENOMEM, "out of memory inflating %s (%zu bytes so far)", path, used);
            out = o;
            cap = ncap;
        }
        size_t in_left = n - (size_t)(zs.next_in - src);
        zs.avail_in = (uInt)(in_left < UINT32_MAX ? in_left : UINT32_MAX);
        size_t room = cap - used;
        zs.next_out = out + used;
        zs.avail_out = (uInt)(room < UINT32_MAX ? room : UINT32_MAX);
        uInt before = zs.avail_out;
        zr = inflate(&zs, Z_NO_FLUSH);
        used += before - zs.avail_out;
        if (zr == Z_MEM_ERROR)
            SL_FAIL(SL_ENOMEM, "out of memory inflating %s", path);
        in_left = n - (size_t)(zs.next_in - src);
        if (zr == Z_STREAM_END) {
            if (!in_left)
                break;
            /* Another member follows (`cat a.gz b.gz`). */
            if (inflateReset(&zs) != Z_OK)
                SL_FAIL(SL_EIO, "%s: zlib reset failed", path);
            continue;
        }
        if (zr == Z_OK || (zr == Z_BUF_ERROR && !zs.avail_out))
            continue;
        /* Z_DATA_ERROR, or Z_BUF_ERROR with input used up: damaged or cut off. */
        const char *why = zr == Z_BUF_ERROR ? "the gzip stream ends early"
                                            : (zs.msg ? zs.msg : "damaged gzip data");
        if (!used)
            SL_FAIL(SL_ECORRUPT, "%s: not a readable gzip stream: %s", path, why);
        snprintf(err, errcap, "gzip: %s after %zu decompressed bytes", why, used);
        break;
    }
    inflateEnd(&zs);
    f->heap = out;
    f->data = out;
    f->size = used;
    return SL_OK;
cleanup:
    inflateEnd(&zs);
    sl__free(out);
    return rc;
}

/* sl_io__open_checked's check of a remote plain TFRecord file without an
 * index: every record's data checksum (CRC-32C) where the framing holds
 * (damage to the framing is the scan's to report), so that a copy damaged on
 * the way or in the shard cache is fetched again rather than failing reads
 * in this run and the next. A gzip file is left to inflate's own check. */
static int frames_check(sl_io *io, void *user) {
    (void)user;
    const uint8_t *d = sl_io__map(io);
    uint64_t n = sl_io__size(io), off = 0;
    if (!d || (n >= 3 && d[0] == 0x1f && d[1] == 0x8b && d[2] == 8 && !(n >= 12 && header_ok(d))))
        return SL_OK;
    for (uint64_t r = 0; n - off >= 16 && header_ok(d + off); r++) {
        uint64_t len = sl__ld64(d + off);
        if (len > n - off - 16)
            break;
        if (sl_source__tf_mask(sl__crc32c(0, d + off + 12, (size_t)len)) !=
            sl__ld32(d + off + 12 + len))
            return sl__error(SL_ECORRUPT, "%s: record %" PRIu64 " (offset %" PRIu64 "): data "
                             "checksum mismatch", sl_io__name(io), r, off);
        off += 16 + len;
    }
    return SL_OK;
}

/* Map (or inflate: *gzip) one file's bytes into `o`: a plain file whole in
 * memory (data its mapping), a gzip one inflated (data the heap, the file
 * closed); gzip damage after some
 * output is kept in gzerr (a bad tail entry for the scan). An indexed
 * file's whole index is loaded again into o->ix, and a remote one checked
 * whole against it, fetched again once when it differs (sl_shard_file__open;
 * an unindexed remote one against its frames' checksums when verifying). */
static int open_bytes(const tf_source *s, tf_file *f, sl_shard_bytes *o, int *gzip,
                      char *gzerr, size_t cap) {
    sl_io *io;
    /* Reads jump between records: no read-ahead past the one asked for.
     * Every open but the first asks for the version the first one read
     * (records were found at offsets of those bytes; io.h). */
    SL_TRY(sl_shard_file__open(&f->sh, "tfrecord", SL_IO_MAP | SL_IO_RANDOM,
                               s->verify ? frames_check : NULL, NULL, &o->ix, &io));
    int rc = SL_OK;
    size_t n = (size_t)sl_io__size(io);
    const uint8_t *m = sl_io__map(io);
    /* "auto": gzip's magic and deflate method, unless the first 12 bytes
     * are a valid TFRecord header (a record length can start 1f 8b 08). */
    int magic = n >= 3 && m[0] == 0x1f && m[1] == 0x8b && m[2] == 8;
    *gzip = 0;
    if (!strcmp(s->compression, "gzip"))
        *gzip = 1;
    else if (!strcmp(s->compression, "auto"))
        *gzip = magic && !(n >= 12 && header_ok(m));
    if (*gzip) {
        if (!n)
            SL_FAIL(SL_ECORRUPT, "%s: empty file, not a gzip stream", f->sh.path);
        SL_CHECK(inflate_all(o, f->sh.path, m, n, gzerr, cap));
        sl_io__close(io);
    } else {
        o->data = m;
        o->size = n;
        o->io = io;
    }
    return SL_OK;
cleanup:
    sl_io__close(io);
    return rc;
}

/* The shard set's open: the file's bytes (a remote one fetched into the
 * shard cache; a gzip one inflated) and, when it has an index, the whole
 * index, which must still be what its header said at open. */
static int open_file_lazily(void *user, int k, void **state_out) {
    tf_source *s = user;
    tf_file *f = &s->files[k];
    sl_shard_bytes b = {0};
    int rc = SL_OK, gzip = 0;
    char gzerr[160] = "";
    SL_CHECK(open_bytes(s, f, &b, &gzip, gzerr, sizeof gzerr));
    if (b.ix && !!(b.ix->flags & SL_SIDX_DECOMPRESSED) != gzip)
        SL_FAIL(SL_EINVAL, "%s.slidx was built for %s bytes, but the file is read %s; rebuild "
                "it with `sluice index %s`", f->sh.path,
                b.ix->flags & SL_SIDX_DECOMPRESSED ? "decompressed" : "plain",
                gzip ? "through gzip" : "as it is", f->sh.path);
    if (!f->sh.head && (b.size != f->sh.size || gzip != f->gzip))
        SL_CHECK(sl_shard_file__changed(&f->sh, b.size));
    return sl_shard_bytes__keep(&b, "opening a TFRecord file", state_out);
cleanup:
    sl_shard_bytes__dispose(&b);
    return rc;
}

/* Find one unindexed file's frames at open (its record count needs them),
 * then close it: reads open it again through the shard set. */
static int scan_at_open(tf_source *s, tf_file *f) {
    sl_shard_bytes o = {0};
    char gzerr[160] = "";
    int gzip = 0;
    SL_TRY(open_bytes(s, f, &o, &gzip, gzerr, sizeof gzerr));
    f->sh.first = s->base.count;
    f->sh.tab_first = s->nscan;
    f->gzip = gzip;
    f->sh.size = o.size;
    int rc = scan_file(s, f, o.data, o.size);
    if (rc == SL_OK && gzerr[0])
        rc = add_bad(s, f, o.size, SL_ECORRUPT, "%s", gzerr);
    f->sh.count = s->base.count - f->sh.first;
    if (rc == SL_OK && !o.size)
        SL_LOG_WARN("%s: empty file (no records)", f->sh.path);
    sl_shard_bytes__dispose(&o);
    return rc;
}

/* ---- which features, which types ---------------------------------------------- */

/* What has been seen of one feature (over a sample, or a whole file). */
typedef struct feat_stat {
    char *key;
    int list;                   /* a SequenceExample feature list */
    int kind;
    size_t nmin, nmax;          /* values per record (per step, for lists) */
    uint64_t seen;              /* records holding it */
    int encoded;
    int64_t *ivals;             /* index build: scalar values, a slot per record */
    double *fvals;
} feat_stat;

typedef struct feat_set {
    feat_stat *v;
    int n;
    uint64_t records;           /* records looked at */
    int want_values;
    uint64_t cap_values;
} feat_set;

static void feat_set_free(feat_set *fs) {
    for (int k = 0; k < fs->n; k++) {
        sl__free(fs->v[k].key);
        sl__free(fs->v[k].ivals);
        sl__free(fs->v[k].fvals);
    }
    sl__free(fs->v);
    memset(fs, 0, sizeof *fs);
}

static int looks_encoded(const char *key, const ProtobufCBinaryData *b) {
    size_t kl = strlen(key);
    if (kl >= 7 && !strcmp(key + kl - 7, "encoded"))
        return 1;
    const uint8_t *p = b->data;
    size_t n = b->len;
    return (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) ||
           (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) ||
           (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4));
}

static feat_stat *feat_find(feat_set *fs, const char *key, int list) {
    for (int k = 0; k < fs->n; k++)
        if (fs->v[k].list == list && !strcmp(fs->v[k].key, key))
            return &fs->v[k];
    return NULL;
}

/* Note one feature of the record numbered fs->records (0-based). */
static int feat_note(feat_set *fs, const char *key, int list, int kind, size_t nvals,
                     const Tensorflow__Feature *f, const char *where) {
    feat_stat *st = feat_find(fs, key, list);
    if (!st) {
        if (fs->n >= 4096)
            return sl__error(SL_ELIMIT, "%s: more than 4096 features", where);
        st = sl__append_zeroed((void **)&fs->v, (size_t)fs->n, sizeof *st,
                               "reading TFRecord features");
        if (!st)
            return SL_ENOMEM;
        st->key = sl__strdup(key);
        if (!st->key)
            return sl__oom("reading TFRecord features");
        fs->n++;
        st->list = list;
        st->kind = kind;
        st->nmin = st->nmax = nvals;
        if (kind == TF_KIND_BYTES && !list && nvals && f)
            st->encoded = looks_encoded(key, &f->bytes_list->value[0]);
    }
    if (kind != TF_KIND_NONE && st->kind != TF_KIND_NONE && kind != st->kind)
        return sl__error(SL_EDECODE, "%s: feature '%s' is %s here but %s in an earlier "
                         "record", where, key, kind_name[kind], kind_name[st->kind]);
    if (st->kind == TF_KIND_NONE)
        st->kind = kind;
    if (nvals < st->nmin)
        st->nmin = nvals;
    if (nvals > st->nmax)
        st->nmax = nvals;
    st->seen++;
    if (fs->want_values && !list && nvals == 1 &&
        (kind == TF_KIND_INT64 || kind == TF_KIND_FLOAT)) {
        if (!st->ivals && !st->fvals) {
            if (kind == TF_KIND_INT64)
                st->ivals = sl__calloc((size_t)fs->cap_values, 8);
            else
                st->fvals = sl__calloc((size_t)fs->cap_values, 8);
            if (!st->ivals && !st->fvals)
                return sl__oom("indexing a TFRecord file");
        }
        if (fs->records < fs->cap_values) {
            if (st->ivals)
                st->ivals[fs->records] = f->int64_list->value[0];
            else
                st->fvals[fs->records] = f->float_list->value[0];
        }
    }
    return SL_OK;
}

/* Note every feature of one parsed record. */
static int feat_note_record(feat_set *fs, const Tensorflow__SequenceExample *ex,
                            const char *where) {
    const Tensorflow__Features *ctx = ex->context;
    for (size_t k = 0; ctx && k < ctx->n_feature; k++) {
        const Tensorflow__Features__FeatureEntry *e = ctx->feature[k];
        size_t nv;
        int kind = kind_of(e->value, &nv);
        SL_TRY(feat_note(fs, e->key, 0, kind, nv, e->value, where));
    }
    const Tensorflow__FeatureLists *fl = ex->feature_lists;
    for (size_t k = 0; fl && k < fl->n_feature_list; k++) {
        const Tensorflow__FeatureLists__FeatureListEntry *e = fl->feature_list[k];
        size_t steps = e->value ? e->value->n_feature : 0;
        for (size_t t = 0; t < steps; t++) {
            size_t nv;
            int kind = kind_of(e->value->feature[t], &nv);
            SL_TRY(feat_note(fs, e->key, 1, kind, nv, NULL, where));
        }
        if (!steps)
            SL_TRY(feat_note(fs, e->key, 1, TF_KIND_NONE, 0, NULL, where));
    }
    fs->records++;
    return SL_OK;
}

/* ---- reading one record ----------------------------------------------------------- */

static tf_file *file_of(tf_source *s, uint64_t i) {
    /* (An empty file shares `first` with the next: the search lands past it.) */
    return &s->files[sl__last_at_most(s->files, s->nfiles, sizeof *s->files,
                                      offsetof(tf_file, sh.first), i)];
}

static void tf_locate(sl_source *src, uint64_t i, char *buf, size_t cap) {
    tf_source *s = (tf_source *)src;
    tf_file *f = file_of(s, i);
    uint64_t r = i - f->sh.first;
    if (f->sh.head) {
        /* The offset is in the file's index, known once the file is open:
         * a message never opens one. */
        int k = (int)(f - s->files);
        void *st = NULL;
        if (s->set && sl_shard_set__get_if_open(s->set, k, &st) == SL_OK) {
            snprintf(buf, cap, "%s: record %" PRIu64 " (offset %" PRIu64 ")", f->name, r,
                     ((const sl_shard_bytes *)st)->ix->offset[r]);
            sl_shard_set__put(s->set, k);
        } else {
            snprintf(buf, cap, "%s: record %" PRIu64, f->name, r);
        }
        return;
    }
    uint64_t e = f->sh.tab_first + r;
    uint64_t off = s->len[e] == TF_BAD ? s->bad[s->off[e]].offset : s->off[e];
    snprintf(buf, cap, "%s: record %" PRIu64 " (offset %" PRIu64 ")", f->name, r, off);
}

/* Check and unpack record i of file k, open as `o` (pinned), into the arena. */
static int parse_open(tf_source *s, tf_arena *a, uint64_t i, const tf_file *f,
                      const sl_shard_bytes *o, int verify, Tensorflow__SequenceExample **ex_out) {
    char where[320];
    tf_locate(&s->base, i, where, sizeof where);
    uint64_t r = i - f->sh.first, off, len;
    if (f->sh.head) {
        off = o->ix->offset[r];
        len = o->ix->length[r] - 16;
        /* entries are in order and inside the data when the index is plain
         * (sl_sidx__parse); a decompressed one is bounded here */
        if (o->ix->length[r] < 16 || off > o->size || o->ix->length[r] > o->size - off)
            return sl__error(SL_ECORRUPT, "%s: the index places it outside the data (%zu bytes); "
                             "rebuild it with `sluice index %s`", where, o->size, f->sh.path);
    } else {
        off = s->off[f->sh.tab_first + r];
        len = s->len[f->sh.tab_first + r];
    }
    const uint8_t *p = o->data + off;
    /* The whole framed record against the checksum its index recorded. */
    if (f->sh.head && o->ix->sum)
        SL_TRY(sl_sidx__check_entry(o->ix, r, p, where, f->sh.path));
    if (sl__ld64(p) != len)
        return sl__error(SL_ECORRUPT, "%s: length field %" PRIu64 " disagrees with the index "
                         "(%" PRIu64 "); rebuild it with `sluice index %s`", where, sl__ld64(p),
                         len, f->sh.path);
    if (verify && !header_ok(p))
        return sl__error(SL_ECORRUPT, "%s: length checksum mismatch", where);
    if (verify && sl_source__tf_mask(sl__crc32c(0, p + 12, (size_t)len)) !=
                      sl__ld32(p + 12 + len))
        return sl__error(SL_ECORRUPT, "%s: data checksum mismatch", where);
    arena_reset(a);
    /* protobuf-c copies every field out of the record: nothing points into
     * the file after this, so the file may be closed once it returns. */
    Tensorflow__SequenceExample *ex =
        tensorflow__sequence_example__unpack(&a->pa, (size_t)len, p + 12);
    if (!ex) {
        if (a->failed)
            return sl__oom("unpacking a TFRecord example");
        return sl__error(SL_ECORRUPT, "%s: not a tf.train.Example (the protobuf does not parse)",
                         where);
    }
    *ex_out = ex;
    return SL_OK;
}

/* Check and unpack record i into the arena (its file opened if need be). */
static int parse_record(tf_source *s, tf_arena *a, uint64_t i, int verify,
                        Tensorflow__SequenceExample **ex_out) {
    const tf_file *f = file_of(s, i);
    uint64_t e = f->sh.tab_first + (i - f->sh.first);
    if (!f->sh.head && s->len[e] == TF_BAD) {
        char where[320];
        tf_locate(&s->base, i, where, sizeof where);
        const tf_bad *b = &s->bad[s->off[e]];
        return sl__error(b->code, "%s: %s", where, b->msg);
    }
    int k = (int)(f - s->files);
    void *st;
    SL_TRY(sl_source__shard_get(s->set, k, f->name, i - f->sh.first, &st));
    int rc = parse_open(s, a, i, f, st, verify, ex_out);
    sl_shard_set__put(s->set, k);
    return rc;
}

static const Tensorflow__Feature *find_ctx(const Tensorflow__SequenceExample *ex,
                                           const char *key) {
    const Tensorflow__Features *c = ex->context;
    for (size_t k = 0; c && k < c->n_feature; k++)
        if (!strcmp(c->feature[k]->key, key))
            return c->feature[k]->value;
    return NULL;
}

static const Tensorflow__FeatureList *find_list(const Tensorflow__SequenceExample *ex,
                                                const char *key) {
    const Tensorflow__FeatureLists *l = ex->feature_lists;
    for (size_t k = 0; l && k < l->n_feature_list; k++)
        if (!strcmp(l->feature_list[k]->key, key))
            return l->feature_list[k]->value;
    return NULL;
}

/* Copy n values of a feature (kind known) into dst. */
static void copy_values(const Tensorflow__Feature *f, int kind, void *dst, size_t n) {
    if (!n)
        return;
    if (kind == TF_KIND_INT64)
        memcpy(dst, f->int64_list->value, n * 8);
    else
        memcpy(dst, f->float_list->value, n * 4);
}

/* Column k of a parsed record into out (a tensor from the cursor). */
static int read_column(tf_source *s, tf_cursor *c, int k, const Tensorflow__SequenceExample *ex,
                       sl_tensor *out, const char *where) {
    const tf_col *tc = &s->col[k];
    const sl_source_col *sc = &s->base.col[k];
    int64_t shape[SL_MAX_DIMS] = {0};
    if (tc->list) {
        const Tensorflow__FeatureList *fl = find_list(ex, tc->key);
        size_t steps = fl ? fl->n_feature : 0, width = 0;
        for (size_t t = 0; t < steps; t++) {
            size_t nv;
            int kind = kind_of(fl->feature[t], &nv);
            if (kind != tc->kind && !(kind == TF_KIND_NONE && nv == 0))
                return sl__error(SL_EDECODE, "%s: feature list '%s' step %zu is %s, expected "
                                 "%s", where, tc->key, t, kind_name[kind], kind_name[tc->kind]);
            if (t == 0)
                width = nv;
            else if (nv != width)
                return sl__error(SL_EDECODE, "%s: feature list '%s' is ragged (step 0 has %zu "
                                 "values, step %zu has %zu)", where, tc->key, width, t, nv);
        }
        shape[0] = (int64_t)steps;
        shape[1] = (int64_t)width;
        SL_TRY(c->base.alloc(c->base.alloc_ctx, out, sc->dtype, 2, shape));
        size_t esz = tc->kind == TF_KIND_INT64 ? 8 : 4;
        for (size_t t = 0; t < steps; t++)
            copy_values(fl->feature[t], tc->kind, (uint8_t *)out->data + t * width * esz, width);
        return SL_OK;
    }
    const Tensorflow__Feature *f = find_ctx(ex, tc->key);
    size_t nv;
    int kind = kind_of(f, &nv);
    if (kind != tc->kind && !(kind == TF_KIND_NONE && nv == 0))
        return sl__error(SL_EDECODE, "%s: feature '%s' is %s, expected %s", where, tc->key,
                         kind_name[kind], kind_name[tc->kind]);
    if (tc->kind == TF_KIND_BYTES) {
        if (nv > 1)
            return sl__error(SL_EDECODE, "%s: feature '%s' holds %zu byte strings, expected at "
                             "most 1", where, tc->key, nv);
        const ProtobufCBinaryData *b = nv ? &f->bytes_list->value[0] : NULL;
        shape[0] = b ? (int64_t)b->len : 0;
        for (int j = 0; b && b->len && j < c->arena.nbig; j++) {
            sl_tensor *t = &c->arena.big[j];
            if (t->buf && t->data == b->data) {
                *out = *t; /* the tensor protobuf-c copied into */
                out->shape[0] = shape[0];
                out->nbytes = b->len;
                memset(t, 0, sizeof *t);
                return SL_OK;
            }
        }
        SL_TRY(c->base.alloc(c->base.alloc_ctx, out, SL_U8, 1, shape));
        if (b && b->len)
            memcpy(out->data, b->data, b->len);
        return SL_OK;
    }
    if (tc->scalar) {
        if (nv != 1)
            return sl__error(SL_EDECODE, "%s: feature '%s' has %zu values, expected 1 (declare "
                             "it as a list: \"features\": {\"%s\": {\"list\": true}}, or index "
                             "the files with `sluice index`)", where, tc->key, nv, tc->key);
        SL_TRY(c->base.alloc(c->base.alloc_ctx, out, sc->dtype, 0, shape));
        copy_values(f, tc->kind, out->data, 1);
        return SL_OK;
    }
    shape[0] = (int64_t)nv;
    SL_TRY(c->base.alloc(c->base.alloc_ctx, out, sc->dtype, 1, shape));
    copy_values(f, tc->kind, out->data, nv);
    return SL_OK;
}

static int tf_read(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *out) {
    tf_source *s = (tf_source *)src;
    tf_cursor *c = (tf_cursor *)cur;
    Tensorflow__SequenceExample *ex = NULL;
    SL_TRY(parse_record(s, &c->arena, i, s->verify, &ex));
    char where[320];
    tf_locate(src, i, where, sizeof where);
    out->index = i;
    for (int k = 0; k < src->ncols; k++) {
        int rc = read_column(s, c, k, ex, &out->col[k], where);
        if (rc < 0) {
            out->ncols = (uint32_t)k;
            sl_sample_clear(out);
            return rc;
        }
        out->ncols = (uint32_t)k + 1;
    }
    return SL_OK;
}

static int tf_cursor_open(sl_source *src, sl_source_cursor **out) {
    (void)src;
    SL_TRY(sl_source__cursor_new(sizeof(tf_cursor), "opening a TFRecord cursor", out));
    tf_cursor *c = (tf_cursor *)*out;
    arena_init(&c->arena);
    c->arena.owner = &c->base;
    return SL_OK;
}

static void tf_cursor_free(sl_source *src, sl_source_cursor *cur) {
    (void)src;
    tf_cursor *c = (tf_cursor *)cur;
    arena_dispose(&c->arena);
    sl__free(c);
}

static int gather_index_values(sl_source *src, int64_t *const *vals);

/* An indexed column only (every file's index holds it). */
static int tf_index_column(sl_source *src, int col, const void **vals_out) {
    *vals_out = NULL;
    if (col < 0 || col >= src->ncols || !src->col[col].indexed)
        return sl__error(SL_EINVAL, "%s: column %d is not indexed", src->name, col);
    return sl_source__ivals_get(&((tf_source *)src)->ivals, src, gather_index_values, col,
                                vals_out);
}

static const char *file_path(const void *s, int k) {
    return ((const tf_source *)s)->files[k].sh.path;
}

static int tf_describe(sl_source *src, cJSON *obj) {
    tf_source *s = (tf_source *)src;
    SL_TRY(sl_source__describe_paths(obj, "files", s->nfiles, file_path, s));
    int nindexed = 0, ngzip = 0;
    for (int k = 0; k < s->nfiles; k++) {
        nindexed += s->files[k].indexed;
        ngzip += s->files[k].sh.head ? !!(s->files[k].sh.head->flags & SL_SIDX_DECOMPRESSED)
                                  : s->files[k].gzip;
    }
    if (!cJSON_AddNumberToObject(obj, "indexed_files", nindexed) ||
        !cJSON_AddNumberToObject(obj, "gzip_files", ngzip) ||
        !cJSON_AddNumberToObject(obj, "damaged_records", s->nbad) ||
        !cJSON_AddBoolToObject(obj, "verify", s->verify))
        return sl__oom("describing a source");
    return SL_OK;
}

static void tf_free(sl_source *src) {
    tf_source *s = (tf_source *)src;
    sl_shard_set__free(s->set);
    for (int k = 0; k < s->nfiles; k++)
        sl_shard_file__dispose(&s->files[k].sh);
    sl_source__ivals_dispose(&s->ivals);
    sl__free(s->files);
    sl__free(s->off);
    sl__free(s->len);
    sl__free(s->bad);
    sl__free(s);
}

static const sl_source_vtbl tf_vtbl = {
    .cursor_open = tf_cursor_open,
    .cursor_free = tf_cursor_free,
    .read = tf_read,
    .index_column = tf_index_column,
    .describe = tf_describe,
    .locate = tf_locate,
    .free = tf_free,
};

/* ---- opening -------------------------------------------------------------------- */

/* The type facts of the columns, from every file's index (all have one). */
static int feats_from_indexes(tf_source *s, feat_set *fs) {
    for (int k = 0; k < s->nfiles; k++) {
        const sl_sidx *ix = s->files[k].sh.head;
        for (int c = 0; c < ix->ncols; c++) {
            const sl_sidx_col *ic = &ix->col[c];
            int list = !!(ic->flags & SL_SIDX_COL_LIST);
            int kind = ic->type == SL_COL_BYTES   ? TF_KIND_BYTES
                       : ic->type == SL_COL_INT64 ? TF_KIND_INT64
                       : ic->dtype == SL_I64      ? TF_KIND_INT64
                       : ic->dtype == SL_F32      ? TF_KIND_FLOAT
                                                  : TF_KIND_NONE;
            int scalar = ic->type == SL_COL_INT64 || (ic->type == SL_COL_ARRAY && ic->ndim == 0);
            feat_stat *st = feat_find(fs, ic->name, list);
            if (st && st->kind != kind && kind != TF_KIND_NONE && st->kind != TF_KIND_NONE)
                return sl__error(SL_EINVAL, "feature '%s' is %s in %s but %s in an earlier "
                                 "file", ic->name, kind_name[kind], s->files[k].sh.path,
                                 kind_name[st->kind]);
            /* Each file's index counts as "seen in every record" when its
             * column is scalar; a list anywhere makes the column a list. */
            SL_TRY(feat_note(fs, ic->name, list, kind, scalar ? 1 : 2, NULL, s->files[k].sh.path));
            st = feat_find(fs, ic->name, list);
            st->encoded |= !!(ic->flags & SL_SIDX_COL_ENCODED);
            if (!scalar)
                st->nmin = 0;
        }
    }
    /* A feature every file's index holds as scalar is a scalar. */
    fs->records = (uint64_t)s->nfiles;
    return SL_OK;
}

/* The type facts from the first good records (no index). */
static int feats_from_sample(tf_source *s, feat_set *fs) {
    tf_arena a;
    arena_init(&a);
    int rc = SL_OK;
    for (uint64_t i = 0; i < s->base.count && fs->records < TF_SAMPLE; i++) {
        Tensorflow__SequenceExample *ex = NULL;
        rc = parse_record(s, &a, i, s->verify, &ex);
        if (rc == SL_ENOMEM)
            break;
        if (rc < 0) {  /* damaged: its read reports it; sample the next */
            rc = SL_OK;
            continue;
        }
        char where[320];
        tf_locate(&s->base, i, where, sizeof where);
        rc = feat_note_record(fs, ex, where);
        if (rc == SL_ENOMEM || rc == SL_ELIMIT)
            break;
        rc = SL_OK; /* a kind clash: the later record's read reports it */
    }
    arena_dispose(&a);
    return rc;
}

static int cmp_feat(const void *a, const void *b) {
    const feat_stat *x = a, *y = b;
    if (x->list != y->list)
        return x->list - y->list;
    return strcmp(x->key, y->key);
}

/* Add the column for feature st named `name`; force_list from the spec. */
static int add_feature_col(tf_source *s, const feat_set *fs, const feat_stat *st,
                           const char *name, int force_list, const char *field) {
    int k = s->base.ncols;
    if (k >= SL_MAX_COLUMNS)
        return sl__error(SL_EINVAL, "%s: the files hold more than %d features; keep fewer with "
                         "\"features\": {\"key\": \"name\", ...}", field, SL_MAX_COLUMNS);
    if (strlen(st->key) >= sizeof s->col[k].key)
        return sl__error(SL_EINVAL, "%s: feature key '%.40s...' is too long", field, st->key);
    tf_col *tc = &s->col[k];
    snprintf(tc->key, sizeof tc->key, "%s", st->key);
    tc->list = st->list;
    tc->kind = st->kind;
    if (tc->kind == TF_KIND_NONE)
        return sl__error(SL_EINVAL, "%s: feature '%s' is empty in every record looked at, so its "
                         "type is unknown; index the files with `sluice index` or leave it out",
                         field, st->key);
    if (st->list && tc->kind == TF_KIND_BYTES)
        return sl__error(SL_EUNSUPPORTED, "%s: feature list '%s' holds bytes, which no column "
                         "type holds; leave it out with \"features\"", field, st->key);
    tc->scalar = !st->list && !force_list && st->seen == fs->records && st->nmin == 1 &&
                 st->nmax == 1;
    int rc;
    const char *nm = name ? name : st->key;
    int64_t shape[2] = {-1, -1};
    sl_dtype dt = tc->kind == TF_KIND_INT64 ? SL_I64 : SL_F32;
    if (tc->kind == TF_KIND_BYTES)
        rc = sl_source__add_col(&s->base, nm, SL_COL_BYTES, SL_U8, 1, NULL);
    else if (tc->list)
        rc = sl_source__add_col(&s->base, nm, SL_COL_ARRAY, dt, 2, shape);
    else if (tc->scalar && tc->kind == TF_KIND_INT64)
        rc = sl_source__add_col(&s->base, nm, SL_COL_INT64, SL_I64, 0, NULL);
    else
        rc = sl_source__add_col(&s->base, nm, SL_COL_ARRAY, dt, tc->scalar ? 0 : 1, shape);
    if (rc < 0)
        return sl__error_prefix(rc, "%s.features", field);
    s->base.col[k].encoded = s->base.col[k].image = tc->kind == TF_KIND_BYTES && st->encoded;
    return SL_OK;
}

/* The INT64 columns every file's index holds values for are indexed; the
 * values themselves are read on the first index_column call. */
static void mark_index_columns(tf_source *s) {
    for (int k = 0; k < s->base.ncols; k++) {
        if (s->base.col[k].type != SL_COL_INT64)
            continue;
        int all = 1;
        for (int f = 0; f < s->nfiles && all; f++) {
            const sl_sidx *h = s->files[f].sh.head;
            int j = h ? sl_sidx__find_scalar(h, s->col[k].key) : -1;
            all = j >= 0 && h->scalar[j].type == SL_COL_INT64;
        }
        s->base.col[k].indexed = all;
    }
}

/* The values of the indexed columns, from each file's whole index (loaded
 * for this, then freed): what a pushed-down filter reads. */
static int gather_index_values(sl_source *src, int64_t *const *vals) {
    tf_source *s = (tf_source *)src;
    const char *keys[SL_MAX_COLUMNS];
    for (int k = 0; k < src->ncols; k++)
        keys[k] = s->col[k].key;
    for (int f = 0; f < s->nfiles; f++)
        SL_TRY(sl_sidx__copy_int_values(s->files[f].sh.path, "tfrecord", s->files[f].sh.head,
                                        s->files[f].sh.first, src->ncols, keys, vals));
    return SL_OK;
}

/* A tfrecord source's options (docs/SOURCES.md). */
typedef struct {
    int compression; /* index in compressions[] */
    int verify;
    sl_source_shard_opts shard;
} tf_opts;

static const char *const compressions[] = {"auto", "gzip", "none", NULL};

static const sl_param tf_params[] = {
    {.key = "tfrecord", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE,
     .doc = "the files: a path, a pattern, @LIST or a list"},
    {.key = "features", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE,
     .doc = "the features to read: {\"key\": \"name\"} or a list of keys (default: all)"},
    {.key = "compression", .type = SL_PARAM_ENUM, .names = compressions, .def = 0,
     .offset = offsetof(tf_opts, compression),
     .doc = "\"auto\": gzip where the file starts as gzip"},
    {.key = "verify", .type = SL_PARAM_BOOL, .def = 1, .offset = offsetof(tf_opts, verify),
     .doc = "check every record's CRC-32C"},
    {.key = "", .type = SL_PARAM_INCLUDE, .fragment = sl_source__shard_params,
     .offset = offsetof(tf_opts, shard)},
    {0}};

const sl_param_table sl_source__tf_table = {tf_params, "a tfrecord source", NULL, 0, 0};

static int parse_options(const cJSON *obj, const char *field, int *verify,
                         const char **compression, sl_sidx_use *index, int *max_open) {
    tf_opts o;
    SL_TRY(sl_source__read_options(&sl_source__tf_table, obj, field, &o));
    *verify = o.verify;
    *compression = compressions[o.compression];
    *index = sl_sidx__use(o.shard.index);
    *max_open = o.shard.max_open_shards; /* 0: the default, chosen in open_files */
    return SL_OK;
}

/* sl_shard_set__each at open: file k's index header (or none). */
static int load_head(void *user, int k) {
    tf_source *s = user;
    return sl_shard_file__load_head(&s->files[k].sh, "tfrecord", s->index_use);
}

/* Every file: the header of its index (as `use_index` says), or a scan of
 * its frames; then the shard set that opens them when read. */
static int open_files(tf_source *s, const cJSON *paths, const char *field, sl_sidx_use use_index) {
    char **pv = NULL;
    int n = 0, remote_scans = 0;
    SL_TRY(sl_source__expand_paths(paths, field, &pv, &n));
    int rc = SL_OK;
    if (!s->max_open)
        s->max_open = sl_shard_set__default_open(pv, n);
    s->files = sl__calloc((size_t)n, sizeof *s->files);
    if (!s->files)
        SL_FAIL(SL_ENOMEM, "out of memory opening %d TFRecord files", n);
    for (int k = 0; k < n; k++) {
        tf_file *f = &s->files[k];
        s->nfiles = k + 1;
        f->sh.path = pv[k];
        pv[k] = NULL;
        f->name = sl_io__short_name(f->sh.path);
    }
    /* Every file's index header at once (a few requests each for remote
     * ones, so that a server's stalls overlap); then, in order, the counts,
     * and a scan of each file without one. */
    s->index_use = use_index;
    SL_CHECK(sl_shard_set__each(n, load_head, s));
    for (int k = 0; k < n; k++) {
        tf_file *f = &s->files[k];
        f->indexed = f->sh.head != NULL;
        if (f->sh.head) {
            f->sh.first = s->base.count;
            f->sh.count = f->sh.head->count;
            s->base.count += f->sh.count;
        } else {
            SL_CHECK(scan_at_open(s, f));
            remote_scans += sl_io__is_url(f->sh.path);
        }
    }
    if (remote_scans)
        SL_LOG_WARN("%s: %d remote file%s without a sidecar index, each fetched whole at open "
                    "to count its records; `sluice index` on the files writes .slidx files "
                    "that let a reader open only the files it reads", s->files[0].name,
                    remote_scans, remote_scans > 1 ? "s" : "");
    SL_CHECK(sl_shard_set__create(&s->set, n, s->max_open,
                                  &(sl_shard_set_ops){.open = open_file_lazily,
                                                      .close = sl_shard_bytes__close},
                                  s));
cleanup:
    for (int k = 0; k < n; k++)
        sl__free(pv[k]);
    sl__free(pv);
    return rc;
}

static tf_source *new_source(void) {
    tf_source *s = sl_source__new(sizeof *s, &tf_vtbl, "tfrecord");
    if (!s)
        return NULL;
    sl_source__ivals_init(&s->ivals);
    return s;
}

/* One entry of an object "features": {"name": COLUMN, "list": BOOL}. */
typedef struct {
    const char *name;
    int list;
} feat_opts;

static const sl_param feat_params[] = {
    {.key = "name", .type = SL_PARAM_STRING, .min = 1, .max = SL_COLNAME_MAX - 1,
     .offset = offsetof(feat_opts, name), .doc = "the column's name (default: the feature key)"},
    {.key = "list", .type = SL_PARAM_BOOL, .offset = offsetof(feat_opts, list),
     .doc = "always a list, even where every record holds one value"},
    {0}};
static const sl_param_table feat_table = {feat_params, NULL, NULL, 0, 0};

int sl_source__open_tfrecord(sl_source **out, const cJSON *obj, const char *field) {
    *out = NULL;
    int verify, max_open;
    sl_sidx_use index;
    const char *compression;
    SL_TRY(parse_options(obj, field, &verify, &compression, &index, &max_open));
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(obj, "tfrecord");
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(obj, "features");
    if (sel && !cJSON_IsObject(sel) && !cJSON_IsArray(sel))
        return sl__error(SL_EINVAL, "%s.features: must be an object {\"key\": \"name\"} or a "
                         "list of keys", field);
    tf_source *s = new_source();
    if (!s)
        return sl__oom("opening a TFRecord source");
    s->verify = verify;
    s->base.checksummed = verify;
    s->compression = compression;
    s->max_open = max_open;
    feat_set fs = {0};
    int rc;
    char tfield[300];
    snprintf(tfield, sizeof tfield, "%s.tfrecord", field);
    SL_CHECK(open_files(s, paths, tfield, index));
    snprintf(s->base.name, sizeof s->base.name, "%s%s", s->files[0].name,
             s->nfiles > 1 ? " (and more)" : "");
    if (s->base.count == 0)
        SL_FAIL(SL_EINVAL, "%s: no records in %s%s", tfield, s->files[0].sh.path,
                s->nfiles > 1 ? " or the files after it" : " (the file is empty)");
    int all_indexed = 1;
    for (int k = 0; k < s->nfiles; k++)
        all_indexed &= s->files[k].indexed;
    SL_CHECK(all_indexed ? feats_from_indexes(s, &fs) : feats_from_sample(s, &fs));

    if (sel) {
        for (const cJSON *it = sel->child; it; it = it->next) {
            const char *key = cJSON_IsArray(sel) ? (cJSON_IsString(it) ? it->valuestring : NULL)
                                                 : it->string;
            const char *name = NULL;
            int force_list = 0;
            if (!key)
                SL_FAIL(SL_EINVAL, "%s.features: every key must be a string", field);
            if (cJSON_IsObject(sel)) {
                if (cJSON_IsString(it)) {
                    name = it->valuestring;
                } else if (cJSON_IsObject(it)) {
                    char sub[SL__ERRMSG_MAX];
                    snprintf(sub, sizeof sub, "%s.features.%s", field, key);
                    feat_opts fo;
                    SL_CHECK(sl_params_read(&feat_table, it, sub, &fo));
                    name = fo.name;
                    force_list = fo.list;
                } else {
                    SL_FAIL(SL_EINVAL, "%s.features.%s: must be a column name or {\"name\": "
                            "..., \"list\": ...}", field, key);
                }
            }
            const feat_stat *st = feat_find(&fs, key, 0);
            if (!st)
                st = feat_find(&fs, key, 1);
            if (!st) {
                /* the features there are, closest to the one asked first */
                char list[384] = "none";
                const char **names = fs.n ? sl__malloc((size_t)fs.n * sizeof *names) : NULL;
                if (names) {
                    for (int k = 0; k < fs.n; k++)
                        names[k] = fs.v[k].key;
                    sl__names_closest(key, names, fs.n, list, sizeof list);
                    sl__free(names);
                }
                SL_FAIL(SL_EINVAL, "%s.features: no feature '%s' in %s (features: %s)", field, key,
                        all_indexed ? "the files' indexes" : "the first records", list);
            }
            SL_CHECK(add_feature_col(s, &fs, st, name, force_list, field));
        }
    } else {
        if (fs.n)
            qsort(fs.v, (size_t)fs.n, sizeof *fs.v, cmp_feat);
        for (int k = 0; k < fs.n; k++) {
            if (fs.v[k].list && fs.v[k].kind == TF_KIND_BYTES) {
                SL_LOG_WARN("%s: feature list '%s' holds bytes, which no column holds; left out",
                            s->base.name, fs.v[k].key);
                continue;
            }
            SL_CHECK(add_feature_col(s, &fs, &fs.v[k], NULL, 0, field));
        }
    }
    if (s->base.ncols == 0)
        SL_FAIL(SL_EINVAL, "%s: no features to read in %s", tfield, s->base.name);
    if (all_indexed)
        mark_index_columns(s);
    feat_set_free(&fs);
    *out = &s->base;
    return SL_OK;
cleanup:
    feat_set_free(&fs);
    tf_free(&s->base);
    return rc;
}

/* ---- building an index ------------------------------------------------------------ */

int sl_source__index_tfrecord(const char *path, const cJSON *opts) {
    int verify = 1, max_open;
    sl_sidx_use index;
    const char *compression = "auto";
    if (opts)
        SL_TRY(parse_options(opts, "index", &verify, &compression, &index, &max_open));
    tf_source *s = new_source();
    if (!s)
        return sl__oom("indexing a TFRecord file");
    s->verify = 1;  /* an index vouches for its file: check everything */
    s->compression = compression;
    sl_sidx *ix = NULL;
    feat_set fs = {0};
    tf_arena a;
    arena_init(&a);
    int rc;
    cJSON *p = NULL;
    SL_CHECK(sl_sidx__begin(&ix, "tfrecord", path));
    p = cJSON_CreateString(path);
    if (!p)
        SL_FAIL(SL_ENOMEM, "out of memory indexing %s", path);
    rc = open_files(s, p, path, SL_SIDX_USE_NO);
    cJSON_Delete(p);
    SL_CHECK(rc);
    const tf_file *f = &s->files[0];
    ix->flags = f->gzip ? SL_SIDX_DECOMPRESSED : 0;
    fs.want_values = 1;
    fs.cap_values = s->base.count;
    for (uint64_t i = 0; i < s->base.count; i++) {
        Tensorflow__SequenceExample *ex = NULL;
        rc = parse_record(s, &a, i, 1, &ex);
        if (rc < 0)
            SL_FAIL_PREFIX(rc, "cannot index a damaged file");
        char where[320];
        tf_locate(&s->base, i, where, sizeof where);
        SL_CHECK(feat_note_record(&fs, ex, where));
        SL_CHECK(sl_sidx__add_record(ix, s->off[i], s->len[i] + 16));
    }
    if (fs.n)
        qsort(fs.v, (size_t)fs.n, sizeof *fs.v, cmp_feat);
    for (int k = 0; k < fs.n; k++) {
        const feat_stat *st = &fs.v[k];
        if (strlen(st->key) >= SL_COLNAME_MAX)
            SL_FAIL(SL_EINVAL, "%s: feature key '%.40s...' is longer than %d bytes; an index "
                    "cannot name it", path, st->key, SL_COLNAME_MAX - 1);
        int scalar = !st->list && st->seen == fs.records && st->nmin == 1 && st->nmax == 1;
        uint32_t flags = (st->list ? SL_SIDX_COL_LIST : 0) |
                         (st->encoded ? SL_SIDX_COL_ENCODED : 0);
        int64_t shape[2] = {-1, -1};
        if (st->kind == TF_KIND_BYTES)
            SL_CHECK(sl_sidx__add_col(ix, st->key, SL_COL_BYTES, SL_U8, 1, shape, flags));
        else if (st->kind == TF_KIND_INT64 && scalar)
            SL_CHECK(sl_sidx__add_col(ix, st->key, SL_COL_INT64, SL_I64, 0, NULL, flags));
        else if (st->kind != TF_KIND_NONE)
            SL_CHECK(sl_sidx__add_col(ix, st->key, SL_COL_ARRAY,
                                      st->kind == TF_KIND_INT64 ? SL_I64 : SL_F32,
                                      st->list ? 2 : scalar ? 0 : 1, shape, flags));
        /* (A feature empty in every record has no type; it is left out.) */
    }
    for (int k = 0; k < fs.n; k++) {
        const feat_stat *st = &fs.v[k];
        if (st->list || st->seen != fs.records || st->nmin != 1 || st->nmax != 1)
            continue;
        if (st->kind == TF_KIND_INT64 && st->ivals)
            SL_CHECK(sl_sidx__add_scalar(ix, st->key, SL_COL_INT64, st->ivals));
        else if (st->kind == TF_KIND_FLOAT && st->fvals)
            SL_CHECK(sl_sidx__add_scalar(ix, st->key, SL_COL_FLOAT64, st->fvals));
    }
    if (ix->flags & SL_SIDX_DECOMPRESSED) {
        /* The entries count bytes of the inflated stream: their checksums
         * too (sl_sidx__write sums a plain file's entries itself). */
        void *st;
        SL_CHECK(sl_shard_set__get(s->set, 0, &st));
        const sl_shard_bytes *o = st;
        rc = sl_sidx__sum_entries(ix, o->data, o->size);
        sl_shard_set__put(s->set, 0);
        SL_CHECK(rc);
    }
    SL_CHECK(sl_sidx__write(path, ix));
cleanup:
    arena_dispose(&a);
    feat_set_free(&fs);
    sl_sidx__free(ix);
    tf_free(&s->base);
    return rc;
}

/* A TFRecord file starts with a frame header whose length checksum holds;
 * a gzip file is looked into (its first frame header inflates from the first
 * kilobyte). Eight random bytes pass the 32-bit check once in 4 billion. */
int sl_source__sniff_tfrecord(const char *path, int is_dir, const uint8_t *head, size_t n) {
    (void)path;
    if (is_dir || n < 12)
        return 0;
    if (head[0] != 0x1f || head[1] != 0x8b)
        return header_ok(head);
    uint8_t out[12];
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
        return 0;
    zs.next_in = (Bytef *)head;
    zs.avail_in = (uInt)n;
    zs.next_out = out;
    zs.avail_out = sizeof out;
    int zr = inflate(&zs, Z_SYNC_FLUSH);
    int got = (int)(sizeof out - zs.avail_out);
    inflateEnd(&zs);
    return (zr == Z_OK || zr == Z_STREAM_END) && got == 12 && header_ok(out);
}
