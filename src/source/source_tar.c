/*
 * source_tar.c — WebDataset tar shards behind the source interface.
 *
 * {"webdataset": "shard-{000000..000127}.tar" | [paths] | "@list.txt",
 *  "index": "auto" | true | false, "columns": ["jpg", "cls"]}
 *
 * A WebDataset is a set of plain tar files whose members are grouped into
 * samples by key: the member path up to the first dot of its last component
 * ("a/b/img001.seg.png": key "a/b/img001", column "seg.png"). Consecutive
 * members with one key form one sample. docs/SOURCES.md has the user's view.
 *
 * Why not libarchive: it streams. It copies each member into a buffer it
 * owns, allocates per entry, and can only go forwards. Here a shard is
 * mapped read-only while it is open, so (1) a column is a view of the
 * mapping (holding a reference to it) — an encoded JPEG goes from the page
 * cache to the decoder without a copy;
 * (2) any sample is read by offset, in any order, from any thread — what
 * shuffling and parallel reading need; (3) opening is one walk over the
 * 512-byte headers, skipping data by size, with no allocation per member
 * (the tables below grow by doubling). Tar headers are simple enough that
 * parsing them here costs less than adapting a streaming API to this.
 *
 * Shards are opened lazily (shard_set.h): open reads each sidecar index's
 * header alone, or scans a shard without one and closes it; a read opens
 * its shard (mapping, whole index) through the set, which keeps at most
 * max_open_shards open and remembers a failed open for every record of
 * that shard.
 *
 * Invariants after open (everything in the source but the set is read-only
 * from then on; a cursor holds only scratch tables):
 *  1. Records are in shard order as given, then file order; shard k's
 *     records are [shards[k].first, + count).
 *  2. A scanned shard's samples are tab.samples[tab_first ..]; a sample's
 *     members are tab.members[first .. first+nmembers), each an (offset,
 *     size) into the shard's bytes, tagged with its column.
 *  3. A shard with a sidecar index (head != NULL) has no samples in tab: a
 *     read walks just that sample's headers, at the offset and length its
 *     whole index (loaded by the set) gives, into the cursor's tables.
 *  4. A sample with err != 0 fails on read with errs[err-1] as its cause:
 *     damage found by the scan is reported on the record it broke, so the
 *     skip policy can drop that record and read the others.
 *  5. Column 0 is "__key__"; then one column per extension, sorted by name.
 *  6. Integer columns are indexed: every record's value (0 where the read
 *     fails) is in ivals[] from the first index_column call on — parsed
 *     during the scan, which has the header page in hand anyway (a label is
 *     a few bytes right after its header, nearly always in the same page),
 *     or copied from each whole index, loaded then; filters push down.
 */
#include "record/shard_set.h"
#include "source/source.h"
#include "source/source_index.h"
#include "source/source_shard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define TAR_BLOCK 512
/* A member path longer than this is refused (PATH_MAX on Linux). */
#define TAR_NAME_MAX 4096
/* Distinct extensions tracked during a scan before giving up: more than
 * SL_MAX_COLUMNS can never be read, but the message lists what was found. */
#define TAR_EXT_MAX 64
/* A decimal int64 with generous whitespace fits; longer text is not a label. */
#define TAR_INT_TEXT_MAX 64

/* A shard: its path, index header, version, size and samples (source_shard.h). */
typedef sl_shard_file tar_shard;

/* A shard opened by the shard set, when a read first needs it. */
typedef struct tar_member {
    uint64_t off;           /* data offset in the shard */
    uint64_t size;
    uint32_t col;           /* extension id during the scan, column after */
    uint32_t ival_ok;       /* an integer column's text parsed at scan: ival */
    int64_t ival;
} tar_member;

typedef struct tar_sample {
    uint64_t offset;        /* first header of its first member */
    uint64_t first;         /* into members[] */
    uint64_t key_off;       /* into keys[] (NUL-terminated) */
    uint32_t key_len;
    uint32_t nmembers;
    uint32_t shard;
    uint32_t err;           /* 0, or 1 + index into errs[] */
    uint64_t end;           /* just past its last member's data (padded) */
} tar_sample;

/* What a header walk produces. The source holds one for the shards it
 * scans at open; with a sidecar index, each cursor holds one and walks just
 * the headers of the sample it reads (the index says where they are). */
typedef struct tar_tables {
    tar_sample *samples;
    uint64_t nsamples, cap_samples;
    tar_member *members;
    uint64_t nmembers, cap_members;
    char *keys;
    uint64_t nkeys, cap_keys;
    char **errs;
    uint32_t nerrs, cap_errs;
    char ext[TAR_EXT_MAX][SL_COLNAME_MAX]; /* extension ids of members[].col */
    int next;
    int global_names;       /* a pax 'g' header set path or size: names depend
                               on more than a sample's own headers */
} tar_tables;

typedef struct tar_source {
    sl_source base;
    tar_shard *shards;
    int nshards;
    tar_tables tab;         /* the scanned shards' samples */
    char **only;            /* "columns": the extensions to keep (NULL: all) */
    int nonly;
    int indexed_shards;     /* shards read through their index */
    int max_open;           /* "max_open_shards" (0 until open: the default) */
    sl_sidx_use index_use;  /* "index", while opening */
    sl_shard_set *set;      /* the shards' bytes (and indexes), opened lazily */
    sl_source_ivals ivals;  /* per integer column: count values, made on the
                               first index_column call */
} tar_source;

typedef struct tar_cursor {
    sl_source_cursor base;
    tar_tables tab;         /* reused: no allocation per read once warm */
} tar_cursor;

/* ---- growing tables (amortised; no allocation per member) ------------------ */

static int grow(void **v, uint64_t *cap, uint64_t need, size_t elem, const char *what) {
    if (need <= *cap)
        return SL_OK;
    uint64_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    size_t bytes;
    if (n > SIZE_MAX / 2 || !sl__mul_ok((size_t)n, elem, &bytes))
        return sl__oom(what);
    void *p = sl__realloc(*v, bytes);
    if (!p)
        return sl__oom(what);
    *v = p;
    *cap = n;
    return SL_OK;
}

/* Record a cause for the current (last) sample; the first one wins. */
static int set_err(tar_tables *s, tar_sample *smp, const char *fmt, ...) SL_PRINTF(3, 4);
static int set_err(tar_tables *s, tar_sample *smp, const char *fmt, ...) {
    if (smp->err)
        return SL_OK;
    char msg[SL__ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint64_t cap = s->cap_errs;
    SL_TRY(grow((void **)&s->errs, &cap, (uint64_t)s->nerrs + 1, sizeof *s->errs,
                "opening a tar source"));
    s->cap_errs = (uint32_t)cap;
    char *m = sl__strdup(msg);
    if (!m)
        return sl__oom("opening a tar source");
    s->errs[s->nerrs++] = m;
    smp->err = s->nerrs;
    return SL_OK;
}

/* ---- header fields ------------------------------------------------------------ */

/* An octal field: optional leading spaces, digits, then NUL/space to the end.
 * An all-blank field is 0 (writers leave unused fields so). */
static int parse_octal(const uint8_t *p, size_t n, uint64_t *out) {
    size_t i = 0;
    while (i < n && p[i] == ' ')
        i++;
    uint64_t v = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '7'; i++) {
        if (v >> 60)
            return -1;
        v = v * 8 + (uint64_t)(p[i] - '0');
    }
    for (; i < n; i++)
        if (p[i] != ' ' && p[i] != '\0')
            return -1;
    *out = v;
    return 0;
}

/* A numeric field: octal, or GNU base-256 (high bit of the first byte set;
 * the rest big-endian two's complement) for values that octal cannot hold. */
static int parse_number(const uint8_t *p, size_t n, uint64_t *out) {
    if (!(p[0] & 0x80))
        return parse_octal(p, n, out);
    if (p[0] & 0x40)
        return -1; /* negative: never a size */
    uint64_t v = p[0] & 0x3f;
    for (size_t i = 1; i < n; i++) {
        if (v >> 55)
            return -1;
        v = v << 8 | p[i];
    }
    if (v >> 62)
        return -1;
    *out = v;
    return 0;
}

/* The checksum covers the block with its own field read as spaces. Old and
 * some current writers sum signed chars; GNU tar accepts both, so do we. */
static int checksum_ok(const uint8_t *h) {
    uint64_t want;
    if (parse_octal(h + 148, 8, &want) < 0)
        return 0;
    int64_t us = 0, ss = 0;
    for (int i = 0; i < TAR_BLOCK; i++) {
        uint8_t b = i >= 148 && i < 156 ? ' ' : h[i];
        us += b;
        ss += (int8_t)b;
    }
    return (int64_t)want == us || (int64_t)want == ss;
}

static int block_is_zero(const uint8_t *h, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (h[i])
            return 0;
    return 1;
}

static int magic_posix(const uint8_t *h) { return !memcmp(h + 257, "ustar\0", 6); }
static int magic_gnu(const uint8_t *h) { return !memcmp(h + 257, "ustar  \0", 8); }

/* A block that passes for a header when resynchronising after damage: a
 * valid checksum is not enough on its own (a member's data may hold any
 * bytes), so ask for the magic too and a name. */
static int plausible_header(const uint8_t *h) {
    return h[0] && (magic_posix(h) || magic_gnu(h)) && checksum_ok(h);
}

/* ---- pax extended headers ---------------------------------------------------- */

/* What this reader takes from a pax header: path and size. Per POSIX, an
 * empty value deletes the keyword: in an 'x' header the member's own header
 * field then stands; in a 'g' header the global value is dropped. */
typedef struct pax_vals {
    const char *path;
    size_t path_len;
    uint64_t size;
    uint8_t has_path, has_size; /* 0 unset, 1 set, 2 deleted */
} pax_vals;

/* Parse records "LEN KEY=VALUE\n" of p[0..n) into v. Returns 0, or -1 with
 * the cause in why. */
static int pax_parse(const uint8_t *p, uint64_t n, pax_vals *v, char *why, size_t cap) {
    uint64_t i = 0;
    while (i < n) {
        if (p[i] == '\0' && block_is_zero(p + i, (size_t)(n - i)))
            break; /* some writers pad the data with NULs */
        uint64_t len = 0, j = i;
        while (j < n && p[j] >= '0' && p[j] <= '9' && j - i < 20)
            len = len * 10 + (uint64_t)(p[j++] - '0');
        if (j == i || j >= n || p[j] != ' ') {
            snprintf(why, cap, "pax header record at byte %" PRIu64 " has no length", i);
            return -1;
        }
        if (len < (j - i) + 4 || len > n - i || p[i + len - 1] != '\n') {
            snprintf(why, cap, "pax header record at byte %" PRIu64 " has a bad length (%" PRIu64
                     " for %" PRIu64 " bytes left)", i, len, n - i);
            return -1;
        }
        const uint8_t *kv = p + j + 1, *end = p + i + len - 1;
        const uint8_t *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq || eq == kv) {
            snprintf(why, cap, "pax header record at byte %" PRIu64 " has no key=value", i);
            return -1;
        }
        size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
        const char *val = (const char *)eq + 1;
        if (klen == 4 && !memcmp(kv, "path", 4)) {
            v->path = val;
            v->path_len = vlen;
            v->has_path = vlen ? 1 : 2;
        } else if (klen == 4 && !memcmp(kv, "size", 4)) {
            uint64_t sz = 0;
            for (size_t k = 0; k < vlen; k++) {
                if (val[k] < '0' || val[k] > '9' || sz > (UINT64_C(1) << 58)) {
                    snprintf(why, cap, "pax size '%.*s' is not a number", (int)(vlen < 24 ? vlen : 24),
                             val);
                    return -1;
                }
                sz = sz * 10 + (uint64_t)(val[k] - '0');
            }
            v->size = sz;
            v->has_size = vlen ? 1 : 2;
        }
        i += len;
    }
    return 0;
}

/* ---- names, keys, extensions -------------------------------------------------- */

/* Split a member path into key and extension at the first dot of the last
 * component. key_len 0: no key (the component starts with a dot or is
 * empty); ext_len 0: no extension. */
static void split_name(const char *name, size_t len, size_t *key_len, size_t *ext_off,
                       size_t *ext_len) {
    size_t base = len;
    while (base > 0 && name[base - 1] != '/')
        base--;
    size_t dot = base;
    while (dot < len && name[dot] != '.')
        dot++;
    *key_len = dot == base ? 0 : dot;
    *ext_off = dot < len ? dot + 1 : len;
    *ext_len = len - *ext_off;
}

static int int_column(const char *ext) {
    return !strcmp(ext, "cls") || !strcmp(ext, "cls2") || !strcmp(ext, "index");
}
static int image_column(const char *ext) {
    return !strcmp(ext, "jpg") || !strcmp(ext, "jpeg") || !strcmp(ext, "png") ||
           !strcmp(ext, "webp");
}
static int text_column(const char *ext) { return !strcmp(ext, "txt") || !strcmp(ext, "json"); }

/* Decimal text with optional surrounding whitespace (a trailing newline, as
 * `echo 3 > x.cls` leaves). Returns 0, or -1. */
static int parse_int_text(const uint8_t *p, uint64_t n, int64_t *out) {
    if (n > TAR_INT_TEXT_MAX)
        return -1;
    size_t i = 0, e = (size_t)n;
    while (i < e && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    while (e > i && (p[e - 1] == ' ' || p[e - 1] == '\t' || p[e - 1] == '\n' || p[e - 1] == '\r'))
        e--;
    int neg = 0;
    if (i < e && (p[i] == '-' || p[i] == '+'))
        neg = p[i++] == '-';
    if (i == e)
        return -1;
    uint64_t v = 0;
    for (; i < e; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(p[i] - '0');
        if (v > (UINT64_C(9223372036854775808) - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (!neg && v > INT64_MAX)
        return -1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* Up to 24 bytes of p for a message, non-printable bytes as '?'. */
static void quote_bytes(char *buf, size_t cap, const uint8_t *p, uint64_t n) {
    size_t k = 0;
    for (uint64_t i = 0; i < n && i < 24 && k + 1 < cap; i++)
        buf[k++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
    if (n > 24 && k + 4 < cap) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
}

/* ---- the scan ---------------------------------------------------------------------- */

typedef struct scan {
    const tar_source *src;
    tar_tables *s;
    const uint8_t *map;     /* the shard's bytes */
    uint32_t shard;
    tar_sample *cur;        /* the sample members are being added to, or NULL */
    uint64_t limit;         /* end of the walk (the file may end inside padding) */
} scan;

/* Start a sample at `offset` with the given key. */
static int new_sample(scan *sc, uint64_t offset, const char *key, size_t key_len) {
    tar_tables *s = sc->s;
    SL_TRY(grow((void **)&s->samples, &s->cap_samples, s->nsamples + 1, sizeof *s->samples,
                "opening a tar source"));
    SL_TRY(grow((void **)&s->keys, &s->cap_keys, s->nkeys + key_len + 1, 1,
                "opening a tar source"));
    tar_sample *smp = &s->samples[s->nsamples++];
    memset(smp, 0, sizeof *smp);
    smp->offset = offset;
    smp->first = s->nmembers;
    smp->shard = sc->shard;
    smp->key_off = s->nkeys;
    smp->key_len = (uint32_t)key_len;
    if (key_len)
        memcpy(s->keys + s->nkeys, key, key_len);
    s->keys[s->nkeys + key_len] = '\0';
    s->nkeys += key_len + 1;
    sc->cur = smp;
    return SL_OK;
}

/* A record that is nothing but an error: damage between samples. Closes
 * the current sample, so the next member starts a new one. */
static int error_sample(scan *sc, uint64_t offset, const char *fmt, ...) SL_PRINTF(3, 4);
static int error_sample(scan *sc, uint64_t offset, const char *fmt, ...) {
    char msg[SL__ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    SL_TRY(new_sample(sc, offset, NULL, 0));
    SL_TRY(set_err(sc->s, sc->cur, "%s", msg));
    sc->cur = NULL;
    return SL_OK;
}

static int ext_id(tar_tables *s, const char *ext, size_t len, int *id) {
    for (int e = 0; e < s->next; e++)
        if (strlen(s->ext[e]) == len && !memcmp(s->ext[e], ext, len)) {
            *id = e;
            return SL_OK;
        }
    if (s->next == TAR_EXT_MAX)
        return sl__error(SL_ELIMIT, "more than %d different extensions (at most %d columns); "
                         "choose some with \"columns\"", TAR_EXT_MAX, SL_MAX_COLUMNS - 1);
    memcpy(s->ext[s->next], ext, len);
    s->ext[s->next][len] = '\0';
    *id = s->next++;
    return SL_OK;
}

static int wanted(const tar_source *s, const char *ext, size_t len) {
    if (!s->only)
        return 1;
    for (int k = 0; k < s->nonly; k++)
        if (strlen(s->only[k]) == len && !memcmp(s->only[k], ext, len))
            return 1;
    return 0;
}

/* Add one regular member. `hdr` is where its first header (pax or GNU
 * long-name entries included) starts; `pending` a cause found in those
 * extended headers, or NULL. */
static int add_member(scan *sc, uint64_t hdr, const char *name, size_t len, uint64_t off,
                      uint64_t size, const char *pending) {
    tar_tables *s = sc->s;
    size_t key_len, ext_off, ext_len;
    split_name(name, len, &key_len, &ext_off, &ext_len);
    if (!key_len)
        return error_sample(sc, hdr, "member '%.*s' has no key (its file name %s)", (int)len,
                            name, len && name[len - 1] != '/' ? "starts with '.'" : "is empty");
    if (sc->src->only && !pending && (!ext_len || !wanted(sc->src, name + ext_off, ext_len)))
        return SL_OK; /* not a chosen column */
    tar_sample *smp = sc->cur;
    if (!smp || smp->key_len != key_len || memcmp(s->keys + smp->key_off, name, key_len) != 0) {
        SL_TRY(new_sample(sc, hdr, name, key_len));
        smp = sc->cur;
    }
    if (pending)
        return set_err(s, smp, "member '%.*s': %s", (int)len, name, pending);
    if (!ext_len)
        return set_err(s, smp, "member '%.*s' has no extension, so no column", (int)len, name);
    if (ext_len >= SL_COLNAME_MAX)
        return set_err(s, smp, "member '%.*s': extension longer than %d bytes", (int)len, name,
                       SL_COLNAME_MAX - 1);
    int id = 0;
    SL_TRY(ext_id(s, name + ext_off, ext_len, &id));
    for (uint32_t m = 0; m < smp->nmembers; m++)
        if (s->members[smp->first + m].col == (uint32_t)id)
            return set_err(s, smp, "two members with extension '%s' (the second at offset %" PRIu64
                           ")", s->ext[id], hdr);
    SL_TRY(grow((void **)&s->members, &s->cap_members, s->nmembers + 1, sizeof *s->members,
                "opening a tar source"));
    tar_member *m = &s->members[s->nmembers++];
    *m = (tar_member){.off = off, .size = size, .col = (uint32_t)id};
    /* A label is a few bytes next to the header in hand: parse it now, so
     * index_column needs no second look at the shard (which is closed
     * after its scan). */
    if (int_column(s->ext[id]))
        m->ival_ok = parse_int_text(sc->map + off, size, &m->ival) == 0;
    smp->nmembers++;
    uint64_t end = off + ((size + TAR_BLOCK - 1) / TAR_BLOCK) * TAR_BLOCK;
    smp->end = end < sc->limit ? end : sc->limit;
    return SL_OK;
}

/* After damage at `bad`: the next block that passes for a header, or 0. */
static uint64_t resync(const uint8_t *map, uint64_t size, uint64_t bad) {
    for (uint64_t q = bad + TAR_BLOCK; q + TAR_BLOCK <= size; q += TAR_BLOCK)
        if (plausible_header(map + q))
            return q;
    return 0;
}

/* What the extended headers before a member say about it: pax 'g' values
 * (for the rest of the shard), pax 'x' values and a GNU long name (for the
 * next member only), and a cause found in a bad 'x' header. */
typedef struct ext_state {
    pax_vals global, local;
    const char *longname;
    size_t longname_len;
    char pending[256];
} ext_state;

/* The next member has been handled (or skipped by a resync): what applied
 * to it alone is dropped. */
static void ext_clear(ext_state *x) {
    memset(&x->local, 0, sizeof x->local);
    x->longname = NULL;
    x->pending[0] = '\0';
}

/* A header at `pos` with a bad checksum or size field: an error record for
 * the entry that began at `entry`; *resume is the next block that passes for
 * a header, or 0 when there is none (the walk ends). */
static int bad_header(scan *sc, const uint8_t *map, uint64_t size, uint64_t pos, uint64_t entry,
                      int bad_sum, uint64_t *resume) {
    uint64_t q = resync(map, size, pos);
    const char *what = bad_sum ? "bad header checksum" : "bad size field in the header";
    *resume = q;
    if (q)
        return error_sample(sc, entry, "%s at offset %" PRIu64 "; skipped to the next header at "
                            "offset %" PRIu64, what, pos, q);
    return error_sample(sc, entry, "%s at offset %" PRIu64 "; no header after it", what, pos);
}

/* A member's data size: a pax size overrides the header's (a member over
 * 8 GiB in octal); the local value first, unless it deleted the keyword. */
static uint64_t member_size(const ext_state *x, int regular, uint64_t header_size) {
    if (regular && x->local.has_size == 1)
        return x->local.size;
    if (regular && x->local.has_size != 2 && x->global.has_size == 1)
        return x->global.size;
    return header_size;
}

/* The member whose header is at `pos` has `msize` bytes of data but the file
 * ends `avail` bytes after its header. The error goes on the current sample
 * when the member belongs to it, else on a record of its own. */
static int truncated_member(scan *sc, const ext_state *x, const uint8_t *h, uint64_t pos,
                            uint64_t entry, uint64_t msize, uint64_t avail) {
    tar_tables *s = sc->s;
    /* The name, for the message, from whichever header gave it. */
    const char *nm = (const char *)h;
    size_t nl = strnlen(nm, 100);
    if (x->local.has_path == 1)
        nm = x->local.path, nl = x->local.path_len;
    else if (x->longname)
        nm = x->longname, nl = x->longname_len;
    size_t key_len, eo, el;
    split_name(nm, nl, &key_len, &eo, &el);
    if (sc->cur && key_len && sc->cur->key_len == key_len &&
        !memcmp(s->keys + sc->cur->key_off, nm, key_len))
        return set_err(s, sc->cur, "truncated archive: member '%.*s' at offset %" PRIu64 " has %"
                       PRIu64 " bytes of data, the file ends %" PRIu64 " bytes after its header",
                       (int)(nl > 200 ? 200 : nl), nm, pos, msize, avail);
    return error_sample(sc, entry, "truncated archive: member '%.*s' at offset %" PRIu64 " has %"
                        PRIu64 " bytes of data, the file ends %" PRIu64 " bytes after its header",
                        (int)(nl > 200 ? 200 : nl), nm, pos, msize, avail);
}

/* A pax header of `type` 'x' (the next member) or 'g' (the rest of the
 * shard) at `pos`, its records the `msize` bytes at `rec`, the next header
 * at `next`. A bad 'x' header marks the member it describes (pending); a
 * bad 'g' header is an error record of its own. After a 'g' header, the
 * next entry starts at `next`. */
static int pax_header(scan *sc, ext_state *x, char type, const uint8_t *rec, uint64_t msize,
                      uint64_t pos, uint64_t next, uint64_t *entry) {
    char why[200];
    pax_vals v = type == 'g' ? x->global : x->local;
    if (pax_parse(rec, msize, &v, why, sizeof why) < 0) {
        if (type == 'x') {
            snprintf(x->pending, sizeof x->pending, "pax header at offset %" PRIu64 ": %s", pos,
                     why);
        } else {
            SL_TRY(error_sample(sc, pos, "global pax header: %s", why));
            *entry = next;
        }
    } else if (type == 'g') {
        sc->s->global_names |= v.has_path == 1 || v.has_size == 1;
        if (v.has_path == 2)
            v.has_path = 0;
        if (v.has_size == 2)
            v.has_size = 0;
        x->global = v;
        *entry = next;
    } else {
        x->local = v;
    }
    return SL_OK;
}

/* A regular member's name: a pax path, a GNU long name, a global pax path
 * (unless the member's pax header deleted it), else the ustar prefix and
 * name, put together in `ustar` (TAR_BLOCK bytes). */
static void member_name(const ext_state *x, const uint8_t *h, char *ustar, const char **nm,
                        size_t *nl) {
    if (x->local.has_path == 1) {
        *nm = x->local.path, *nl = x->local.path_len;
    } else if (x->longname) {
        *nm = x->longname, *nl = x->longname_len;
    } else if (x->local.has_path != 2 && x->global.has_path == 1) {
        *nm = x->global.path, *nl = x->global.path_len;
    } else {
        size_t pl = magic_posix(h) ? strnlen((const char *)h + 345, 155) : 0;
        size_t bl = strnlen((const char *)h, 100);
        if (pl)
            memcpy(ustar, h + 345, pl), ustar[pl++] = '/';
        memcpy(ustar + pl, h, bl);
        *nm = ustar, *nl = pl + bl;
    }
}

/* A header at `pos` that is not an extended header, its data the `msize`
 * bytes at `data`, its entry begun at `entry`. Regular members (and, as POSIX
 * says, unknown types) join a sample; GNU sparse and multi-volume members
 * are error records; directories, links, devices, FIFOs and volume labels
 * are skipped (with an error record when a bad pax header described them). */
static int member_header(scan *sc, const ext_state *x, const uint8_t *h, char type, int regular,
                         uint64_t pos, uint64_t entry, uint64_t data, uint64_t msize) {
    if (type == 'S' || type == 'M')
        return error_sample(sc, entry, "member at offset %" PRIu64 ": GNU %s members are not "
                            "supported", pos, type == 'S' ? "sparse" : "multi-volume");
    if (regular || !strchr("123456DV", type)) {
        char ustar[TAR_BLOCK];
        const char *nm;
        size_t nl;
        member_name(x, h, ustar, &nm, &nl);
        if (nl > TAR_NAME_MAX)
            return error_sample(sc, entry, "member at offset %" PRIu64 ": name longer than %d "
                                "bytes", pos, TAR_NAME_MAX);
        return add_member(sc, entry, nm, nl, data, msize, x->pending[0] ? x->pending : NULL);
    }
    if (x->pending[0])
        return error_sample(sc, entry, "%s", x->pending);
    return SL_OK;
}

/* Walk one shard's headers, skipping data by size. Damage becomes an error
 * record (see error_sample/set_err) and the walk goes on where it can: after
 * a bad header checksum or size field, at the next block that passes for a
 * header; after a bad pax header, with the member it describes marked bad.
 * A member running past the end of the file ends the walk: the samples
 * before it are complete and stay readable. `entry` is where the current
 * member's first header (extended headers included) starts. */
static int scan_shard(const tar_source *src, tar_tables *s, uint32_t k, const uint8_t *map,
                      uint64_t start, uint64_t end) {
    scan sc = {.src = src, .s = s, .map = map, .shard = k, .cur = NULL, .limit = end};
    uint64_t size = end, pos = start, entry = start;
    ext_state x = {0};

    if (size == 0)
        return error_sample(&sc, 0, "empty file (0 bytes), not a tar archive");
    if (start == 0 && (size < TAR_BLOCK || (!checksum_ok(map) && !magic_posix(map) && !magic_gnu(map) &&
                             !block_is_zero(map, TAR_BLOCK))))
        return error_sample(&sc, 0, "not a tar archive (no tar header at offset 0)");
    while (pos < size) {
        if (size - pos < TAR_BLOCK) {
            if (!block_is_zero(map + pos, (size_t)(size - pos)))
                SL_TRY(error_sample(&sc, pos, "truncated archive: %" PRIu64 " bytes of a header "
                                    "at the end of the file", size - pos));
            break;
        }
        const uint8_t *h = map + pos;
        if (block_is_zero(h, TAR_BLOCK))
            break; /* end of archive */
        uint64_t msize = 0;
        int bad_sum = !checksum_ok(h);
        if (bad_sum || parse_number(h + 124, 12, &msize) < 0) {
            uint64_t q = 0;
            SL_TRY(bad_header(&sc, map, size, pos, entry, bad_sum, &q));
            if (!q)
                break;
            pos = entry = q;
            ext_clear(&x);
            continue;
        }
        char type = (char)h[156];
        int regular = type == '0' || type == '\0' || type == '7';
        msize = member_size(&x, regular, msize);
        uint64_t data = pos + TAR_BLOCK;
        if (msize > size - data) {
            SL_TRY(truncated_member(&sc, &x, h, pos, entry, msize, size - data));
            break;
        }
        uint64_t next = data + ((msize + TAR_BLOCK - 1) / TAR_BLOCK) * TAR_BLOCK;
        if (type == 'x' || type == 'g') {
            SL_TRY(pax_header(&sc, &x, type, map + data, msize, pos, next, &entry));
            pos = next;
            continue;
        }
        if (type == 'L') {
            x.longname = (const char *)(map + data);
            x.longname_len = strnlen(x.longname, (size_t)msize);
            pos = next;
            continue;
        }
        if (type == 'K') { /* GNU long link target: links are skipped */
            pos = next;
            continue;
        }
        SL_TRY(member_header(&sc, &x, h, type, regular, pos, entry, data, msize));
        ext_clear(&x);
        pos = entry = next;
    }
    return SL_OK;
}

/* ---- after the scan: columns, duplicates, integer values ----------------------- */

static uint64_t key_hash(const char *p, size_t n) {
    uint64_t h = UINT64_C(1469598103934665603);
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * UINT64_C(1099511628211);
    return h;
}

/* A key seen twice, not consecutively (or in two shards), is an error on
 * the later record: WebDataset keys name one sample each. Only scanned
 * shards take part: a shard read through its index was undamaged when
 * indexed, but its keys are not known without reading its headers. */
static int check_duplicates(tar_source *src) {
    tar_tables *s = &src->tab;
    uint64_t cap = 16;
    while (cap < s->nsamples * 2)
        cap *= 2;
    uint64_t *slot = sl__calloc((size_t)cap, sizeof *slot); /* 1 + sample index; 0 empty */
    if (!slot)
        return sl__oom("opening a tar source");
    int rc = SL_OK;
    for (uint64_t i = 0; i < s->nsamples && rc == SL_OK; i++) {
        tar_sample *smp = &s->samples[i];
        if (!smp->key_len)
            continue;
        const char *key = s->keys + smp->key_off;
        for (uint64_t h = key_hash(key, smp->key_len) & (cap - 1);; h = (h + 1) & (cap - 1)) {
            if (!slot[h]) {
                slot[h] = i + 1;
                break;
            }
            const tar_sample *o = &s->samples[slot[h] - 1];
            if (o->key_len == smp->key_len && !memcmp(s->keys + o->key_off, key, smp->key_len)) {
                const tar_shard *osh = &src->shards[o->shard];
                rc = set_err(s, smp, "key '%s' already names record %" PRIu64 " (offset %" PRIu64
                             ") of %s", key, slot[h] - 1 - osh->tab_first, o->offset,
                             sl_io__short_name(osh->path));
                break;
            }
        }
    }
    sl__free(slot);
    return rc;
}

/* The source column named `ext`, or -1. */
static int col_by_name(const tar_source *s, const char *ext) {
    for (int c = 1; c < s->base.ncols; c++)
        if (!strcmp(s->base.col[c].name, ext))
            return c;
    return -1;
}

/* Columns: __key__, then the extensions sorted (so a subset of shards, or
 * another member order, gives the same columns): those the scan met and
 * those the indexes list. The scanned members are re-tagged with their
 * column. */
static int make_columns(tar_source *s) {
    tar_tables *t = &s->tab;
    const char *names[TAR_EXT_MAX];
    int n = 0;
    for (int e = 0; e < t->next; e++)
        names[n++] = t->ext[e];
    for (int k = 0; k < s->nshards; k++) {
        const sl_sidx *ix = s->shards[k].head;
        for (int c = 0; ix && c < ix->ncols; c++) {
            const char *nm = ix->col[c].name;
            int seen = !wanted(s, nm, strlen(nm));
            for (int j = 0; j < n && !seen; j++)
                seen = !strcmp(names[j], nm);
            if (seen)
                continue;
            if (n == TAR_EXT_MAX)
                return sl__error(SL_ELIMIT, "more than %d different extensions (at most %d "
                                 "columns); choose some with \"columns\"", TAR_EXT_MAX,
                                 SL_MAX_COLUMNS - 1);
            names[n++] = nm;
        }
    }
    for (int e = 1; e < n; e++) /* an insertion sort: n <= 64 */
        for (int k = e; k > 0 && strcmp(names[k - 1], names[k]) > 0; k--) {
            const char *tmp = names[k];
            names[k] = names[k - 1];
            names[k - 1] = tmp;
        }
    if (n > SL_MAX_COLUMNS - 1) {
        char list[256] = "";
        size_t len = 0;
        for (int e = 0; e < n && len < sizeof list; e++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", e ? ", " : "",
                                    names[e]);
        return sl__error(SL_ELIMIT, "%d different extensions (%s); at most %d fit: choose "
                         "some with \"columns\"", n, list, SL_MAX_COLUMNS - 1);
    }
    SL_TRY(sl_source__add_col(&s->base, "__key__", SL_COL_STRING, SL_U8, 0, NULL));
    for (int c = 0; c < n; c++) {
        const char *ext = names[c];
        sl_coltype ty = int_column(ext) ? SL_COL_INT64 : text_column(ext) ? SL_COL_STRING
                                                                          : SL_COL_BYTES;
        SL_TRY(sl_source__add_col(&s->base, ext, ty, SL_U8, 0, NULL));
        s->base.col[c + 1].encoded = s->base.col[c + 1].image = image_column(ext);
    }
    uint32_t col_of[TAR_EXT_MAX];
    for (int e = 0; e < t->next; e++)
        col_of[e] = (uint32_t)col_by_name(s, t->ext[e]);
    for (uint64_t m = 0; m < t->nmembers; m++)
        t->members[m].col = col_of[t->members[m].col];
    return SL_OK;
}

/* The member of `smp` for source column `col`; `colmap` maps the tables'
 * member tags to columns (NULL: they are columns already). */
static const tar_member *find_member(const tar_tables *t, const tar_sample *smp, int col,
                                     const int *colmap) {
    for (uint32_t m = 0; m < smp->nmembers; m++) {
        uint32_t tag = t->members[smp->first + m].col;
        if ((colmap ? colmap[tag] : (int)tag) == col)
            return &t->members[smp->first + m];
    }
    return NULL;
}

static int shard_of(const tar_source *s, uint64_t i) {
    return sl__last_at_most(s->shards, s->nshards, sizeof *s->shards,
                            offsetof(tar_shard, first), i);
}

/* Integer columns are indexed: their values come from the scan (parsed
 * there, a label being a few bytes next to its header) or from the sidecar
 * indexes, so filters push down. */
static void mark_int_columns(tar_source *s) {
    for (int c = 1; c < s->base.ncols; c++)
        s->base.col[c].indexed = s->base.col[c].type == SL_COL_INT64;
}

/* The values of each integer column, made on the first index_column call
 * (a pushed-down filter): from the scan's members, and from each indexed
 * shard's whole index, loaded for this and freed. Until then nothing per
 * record of an indexed shard is held. */
static int load_int_columns(sl_source *src, int64_t *const *vals) {
    tar_source *s = (tar_source *)src;
    const char *names[SL_MAX_COLUMNS];
    for (int c = 0; c < src->ncols; c++)
        names[c] = src->col[c].name;
    for (int k = 0; k < s->nshards; k++) {
        const tar_shard *sh = &s->shards[k];
        if (sh->head) {
            SL_TRY(sl_sidx__copy_int_values(sh->path, "webdataset", sh->head, sh->first,
                                            src->ncols, names, vals));
            continue;
        }
        for (int c = 1; c < src->ncols; c++)
            for (uint64_t r = 0; vals[c] && r < sh->count; r++) {
                const tar_sample *smp = &s->tab.samples[sh->tab_first + r];
                const tar_member *m = smp->err ? NULL : find_member(&s->tab, smp, c, NULL);
                if (m && m->ival_ok)
                    vals[c][sh->first + r] = m->ival;
            }
    }
    return SL_OK;
}

/* ---- the vtable ------------------------------------------------------------------------ */

static void tar_locate(sl_source *src, uint64_t i, char *buf, size_t cap) {
    const tar_source *s = (const tar_source *)src;
    int k = shard_of(s, i);
    const tar_shard *sh = &s->shards[k];
    uint64_t r = i - sh->first;
    if (sh->head) {
        /* The offset is in the shard's index, known once the shard is open:
         * a message never opens one. */
        void *st = NULL;
        if (s->set && sl_shard_set__get_if_open(s->set, k, &st) == SL_OK) {
            const sl_shard_bytes *o = st;
            snprintf(buf, cap, "%s: record %" PRIu64 " (offset %" PRIu64 ")",
                     sl_io__short_name(sh->path), r, o->ix->offset[r]);
            sl_shard_set__put(s->set, k);
        } else {
            snprintf(buf, cap, "%s: record %" PRIu64, sl_io__short_name(sh->path), r);
        }
        return;
    }
    const tar_sample *smp = &s->tab.samples[sh->tab_first + r];
    if (smp->key_len)
        snprintf(buf, cap, "%s: record %" PRIu64 " (offset %" PRIu64 ", key '%s')",
                 sl_io__short_name(sh->path), r, smp->offset, s->tab.keys + smp->key_off);
    else
        snprintf(buf, cap, "%s: record %" PRIu64 " (offset %" PRIu64 ")", sl_io__short_name(sh->path), r,
                 smp->offset);
}

static void tables_reset(tar_tables *t) {
    for (uint32_t e = 0; e < t->nerrs; e++)
        sl__free(t->errs[e]);
    t->nsamples = t->nmembers = t->nkeys = 0;
    t->nerrs = 0;
    t->next = 0;
    t->global_names = 0;
}

static void tables_free(tar_tables *t) {
    tables_reset(t);
    sl__free(t->samples);
    sl__free(t->members);
    sl__free(t->keys);
    sl__free(t->errs);
}

/* Fill `out` from sample `smp` of tables `t`. `copy_key`: the key lives in
 * a cursor's tables, so it is copied into a tensor from the allocator. */
static int fill(tar_source *s, sl_source_cursor *cur, uint64_t i, const sl_shard_bytes *sh,
                const tar_tables *t, const tar_sample *smp, const int *colmap, int copy_key,
                sl_sample *out) {
    sl_source *src = &s->base;
    char where[SL__ERRMSG_MAX / 2];
    const char *key = t->keys + smp->key_off;
    if (smp->err) {
        tar_locate(src, i, where, sizeof where);
        return sl__error(SL_ECORRUPT, "%s: %s", where, t->errs[smp->err - 1]);
    }
    /* Check everything before filling anything, so a failure leaves `out`
     * empty without releasing half a sample. */
    const tar_member *mem[SL_MAX_COLUMNS] = {NULL};
    int64_t ival[SL_MAX_COLUMNS];
    for (int c = 1; c < src->ncols; c++) {
        mem[c] = find_member(t, smp, c, colmap);
        if (!mem[c]) {
            tar_locate(src, i, where, sizeof where);
            return sl__error(SL_ECORRUPT, "%s: no member '%s.%s' (other samples have column '%s')",
                             where, key, src->col[c].name, src->col[c].name);
        }
        if (src->col[c].type == SL_COL_INT64 &&
            parse_int_text(sh->data + mem[c]->off, mem[c]->size, &ival[c]) < 0) {
            char q[32];
            quote_bytes(q, sizeof q, sh->data + mem[c]->off, mem[c]->size);
            tar_locate(src, i, where, sizeof where);
            return sl__error(SL_ECORRUPT, "%s: member '%s.%s' is not a decimal integer ('%s')",
                             where, key, src->col[c].name, q);
        }
    }
    out->index = i;
    int64_t n = smp->key_len;
    if (copy_key) {
        SL_TRY(cur->alloc(cur->alloc_ctx, &out->col[0], SL_U8, 1, &n));
        memcpy(out->col[0].data, key, smp->key_len);
    } else {
        sl_tensor_view(&out->col[0], (void *)(uintptr_t)key, SL_U8, 1, &n);
    }
    out->ncols = 1;
    for (int c = 1; c < src->ncols; c++) {
        if (src->col[c].type == SL_COL_INT64) {
            int rc = cur->alloc(cur->alloc_ctx, &out->col[c], SL_I64, 0, NULL);
            if (rc < 0) {
                sl_sample_clear(out);
                return rc;
            }
            memcpy(out->col[c].data, &ival[c], sizeof ival[c]);
        } else {
            /* A view of the mapping holding a reference to it (even for a
             * borrowing cursor): the shard set may close the shard while
             * the view is in use, and the mapping must outlive that. */
            n = (int64_t)mem[c]->size;
            sl_tensor_view(&out->col[c], (void *)(uintptr_t)(sh->data + mem[c]->off), SL_U8, 1,
                           &n);
            out->col[c].buf = sl_buffer_retain(sh->buf);
        }
        out->ncols = (uint32_t)c + 1;
    }
    return SL_OK;
}

/* Record r of shard k, which is open (`o`, pinned). */
static int read_open(tar_source *s, sl_source_cursor *cur, uint64_t i, int k, const sl_shard_bytes *o,
                     sl_sample *out) {
    sl_source *src = &s->base;
    const tar_shard *sh = &s->shards[k];
    uint64_t r = i - sh->first;
    if (!sh->head)
        return fill(s, cur, i, o, &s->tab, &s->tab.samples[sh->tab_first + r], NULL, 0, out);
    /* Through the index: walk this sample's own headers (a few blocks, next
     * to the data about to be read) into the cursor's tables. */
    tar_tables *t = &((tar_cursor *)cur)->tab;
    tables_reset(t);
    uint64_t off = o->ix->offset[r], len = o->ix->length[r];
    char where[SL__ERRMSG_MAX / 2];
    if (off > o->size || len > o->size - off) {
        tar_locate(src, i, where, sizeof where);
        return sl__error(SL_ECORRUPT, "%s: the index places it past the end of the file", where);
    }
    /* Every byte of the sample (headers, data, padding) against the
     * checksum its index recorded: a copy that differs from the bytes
     * indexed is refused, never read. */
    if (o->ix->sum && len &&
        XXH3_64bits(o->data + off, (size_t)len) != o->ix->sum[r]) {
        tar_locate(src, i, where, sizeof where);
        return sl_sidx__check_entry(o->ix, r, o->data + off, where, sh->path);
    }
    SL_TRY(scan_shard(s, t, (uint32_t)k, o->data, off, off + len));
    for (uint64_t j = 0; j < t->nsamples; j++)
        if (t->samples[j].err) /* damage since indexing: its own message says more */
            return fill(s, cur, i, o, t, &t->samples[j], NULL, 1, out);
    if (t->nsamples != 1) {
        tar_locate(src, i, where, sizeof where);
        return sl__error(SL_ECORRUPT, "%s: %" PRIu64 " samples where the index has one; rebuild "
                         "it with `sluice index %s`", where, t->nsamples, sh->path);
    }
    int colmap[TAR_EXT_MAX];
    for (int e = 0; e < t->next; e++)
        colmap[e] = col_by_name(s, t->ext[e]);
    return fill(s, cur, i, o, t, &t->samples[0], colmap, 1, out);
}

static int tar_read(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *out) {
    tar_source *s = (tar_source *)src;
    int k = shard_of(s, i);
    void *st;
    SL_TRY(sl_source__shard_get(s->set, k, sl_io__short_name(s->shards[k].path),
                                i - s->shards[k].first, &st));
    int rc = read_open(s, cur, i, k, st, out);
    sl_shard_set__put(s->set, k);
    return rc;
}

static int tar_cursor_open(sl_source *src, sl_source_cursor **out) {
    (void)src;
    return sl_source__cursor_new(sizeof(tar_cursor), "opening a tar cursor", out);
}

static void tar_cursor_free(sl_source *src, sl_source_cursor *cur) {
    (void)src;
    tables_free(&((tar_cursor *)cur)->tab);
    sl__free(cur);
}

/* Any column (NULL for one that is not an integer). */
static int tar_index_column(sl_source *src, int col, const void **vals_out) {
    return sl_source__ivals_get(&((tar_source *)src)->ivals, src, load_int_columns, col,
                                vals_out);
}

static const char *shard_path(const void *s, int k) {
    return ((const tar_source *)s)->shards[k].path;
}

static int tar_describe(sl_source *src, cJSON *obj) {
    tar_source *s = (tar_source *)src;
    SL_TRY(sl_source__describe_paths(obj, "shards", s->nshards, shard_path, s));
    uint64_t bytes = 0, bad = 0;
    for (int k = 0; k < s->nshards; k++)
        bytes += s->shards[k].size;
    for (uint64_t i = 0; i < s->tab.nsamples; i++)
        bad += s->tab.samples[i].err != 0;
    const char *how = !s->indexed_shards ? "scan"
                      : s->indexed_shards == s->nshards ? "slidx" : "slidx+scan";
    if (!cJSON_AddNumberToObject(obj, "data_bytes", (double)bytes) ||
        !cJSON_AddNumberToObject(obj, "damaged_records", (double)bad) ||
        !cJSON_AddStringToObject(obj, "index", how))
        return sl__oom("describing a source");
    return SL_OK;
}

static void tar_free(sl_source *src) {
    tar_source *s = (tar_source *)src;
    sl_shard_set__free(s->set);
    for (int k = 0; k < s->nshards; k++)
        sl_shard_file__dispose(&s->shards[k]);
    sl_source__ivals_dispose(&s->ivals);
    sl__free(s->shards);
    tables_free(&s->tab);
    sl_source__free_paths(s->only);
    sl__free(s);
}

static const sl_source_vtbl tar_vtbl = {
    .cursor_open = tar_cursor_open,
    .cursor_free = tar_cursor_free,
    .read = tar_read,
    .index_column = tar_index_column,
    .describe = tar_describe,
    .locate = tar_locate,
    .free = tar_free,
};

/* ---- open ----------------------------------------------------------------------------- */

/* The shard set's open: map the shard (a remote one is fetched into the
 * shard cache) and, when it has an index, load the whole index, which must
 * still be what its header said at open (sl_shard_file__open: a remote
 * indexed shard checked whole, every reopen at the first one's version).
 * The mapping goes with the last view (sl_shard_bytes). */
static int open_shard(void *user, int k, void **state_out) {
    tar_source *s = user;
    tar_shard *sh = &s->shards[k];
    sl_shard_bytes b = {0};
    int rc = SL_OK;
    SL_CHECK(sl_shard_file__open(sh, "webdataset", SL_IO_MAP, NULL, NULL, &b.ix, &b.io));
    b.data = sl_io__map(b.io);
    b.size = sl_io__size(b.io);
    if (b.size != sh->size)
        SL_CHECK(sl_shard_file__changed(sh, b.size));
    if (sl_io__map_buffer(b.io, &b.buf) != SL_OK)
        SL_FAIL(SL_ENOMEM, "out of memory opening %s", sl_io__short_name(sh->path));
    return sl_shard_bytes__keep(&b, "opening a tar shard", state_out);
cleanup:
    sl_shard_bytes__dispose(&b);
    return rc;
}

/* Scan shard k at open: map it, walk its headers into the source's tables
 * (labels parsed on the way), close it. Reads map it again through the
 * shard set. */
static int scan_at_open(tar_source *s, int k) {
    tar_shard *sh = &s->shards[k];
    sl_io *io;
    sl_sidx *ix;
    /* the members below are where they are in this version alone (kept) */
    SL_TRY(sl_shard_file__open(sh, "webdataset", SL_IO_MAP, NULL, NULL, &ix, &io));
    sh->size = sl_io__size(io);
    sh->tab_first = s->tab.nsamples;
    int rc = scan_shard(s, &s->tab, (uint32_t)k, sl_io__map(io), 0, sh->size);
    sl_io__close(io);
    sh->count = s->tab.nsamples - sh->tab_first;
    return rc;
}

/* A webdataset source's options (docs/SOURCES.md). */
typedef struct {
    const cJSON *columns;
    sl_source_shard_opts shard;
} tar_opts;

static const sl_param tar_params[] = {
    {.key = "webdataset", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE, .doc = "the tar files: a path, a pattern, @LIST or a list"},
    {.key = "columns", .type = SL_PARAM_ARRAY, .min = 1, .max = -1,
     .offset = offsetof(tar_opts, columns), .expect = "a non-empty list of extensions",
     .doc = "the member extensions to read (default: all)"},
    {.key = "", .type = SL_PARAM_INCLUDE, .fragment = sl_source__shard_params,
     .offset = offsetof(tar_opts, shard)},
    {0}};

const sl_param_table sl_source__tar_table = {tar_params, "a webdataset source", NULL, 0, 0};

static int parse_options(tar_source *s, const cJSON *obj, const char *field, sl_sidx_use *index) {
    tar_opts o;
    SL_TRY(sl_source__read_options(&sl_source__tar_table, obj, field, &o));
    *index = sl_sidx__use(o.shard.index);
    s->max_open = o.shard.max_open_shards;
    if (o.columns) {
        char sub[128];
        snprintf(sub, sizeof sub, "%s.columns", field);
        /* A list of extensions, kept as they are. */
        int n = 0;
        for (const cJSON *e = o.columns->child; e; e = e->next, n++)
            if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '{') ||
                e->valuestring[0] == '@' || strlen(e->valuestring) >= SL_COLNAME_MAX)
                return sl__error(SL_EINVAL, "%s[%d]: must be an extension such as \"jpg\"",
                                 sub, n);
        sl_source__free_paths(s->only);
        s->only = NULL;
        SL_TRY(sl_source__string_list(o.columns, sub, &s->only, &s->nonly));
    }
    return SL_OK;
}

/* sl_shard_set__each at open: shard k's index header (or none). */
static int load_head(void *user, int k) {
    tar_source *s = user;
    return sl_shard_file__load_head(&s->shards[k], "webdataset", s->index_use);
}

int sl_source__open_webdataset(sl_source **out, const cJSON *obj, const char *field) {
    *out = NULL;
    char sub[128];
    snprintf(sub, sizeof sub, "%s.webdataset", field);
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(obj, "webdataset");
    tar_source *s = sl_source__new(sizeof *s, &tar_vtbl, "webdataset");
    if (!s)
        return sl__oom("opening a tar source");
    sl_source__ivals_init(&s->ivals);
    char **list = NULL;
    int n = 0, rc, remote_scans = 0;
    sl_sidx_use index;
    SL_CHECK(parse_options(s, obj, field, &index));
    SL_CHECK(sl_source__expand_paths(paths, sub, &list, &n));
    if (!s->max_open)
        s->max_open = sl_shard_set__default_open(list, n);
    s->shards = sl__calloc((size_t)n, sizeof *s->shards);
    if (!s->shards)
        SL_CHECK(sl__oom("opening a tar source"));
    /* The shards own the path strings from here on. */
    for (int k = 0; k < n; k++)
        s->shards[k].path = list[k];
    s->nshards = n;
    sl__free(list);
    list = NULL;
    /* Open reads each index's header alone (the record count and the
     * columns), for all shards at once (a few requests each for remote
     * ones, so that a server's stalls overlap); a shard's bytes and whole
     * index wait for its first read (open_shard, through the shard set). A
     * shard without an index is scanned now, since the record count needs
     * it, and closed again. A stale or damaged index is an error, not a
     * reason to scan: the user asked for it to be used (or left it there). */
    s->index_use = index;
    SL_CHECK(sl_shard_set__each(n, load_head, s));
    for (int k = 0; k < n; k++) {
        tar_shard *sh = &s->shards[k];
        sh->first = s->base.count;
        if (sh->head) {
            sh->count = sh->head->count;
            sh->size = sh->head->data_size;
            s->indexed_shards++;
        } else {
            /* A tar has no checksum of its data: without an index nothing
             * checks a remote shard's bytes end to end (only their length). */
            if (sl_io__is_url(sh->path) && sl_io__strict())
                SL_FAIL(SL_EINVAL, "%s: no sidecar index, so nothing can check its bytes end to "
                        "end, and SLUICE_INTEGRITY=strict refuses that; run `sluice index` on "
                        "the shards where they are written and put each .slidx beside its "
                        "shard", sh->path);
            SL_CHECK(scan_at_open(s, k));
            remote_scans += sl_io__is_url(sh->path);
        }
        s->base.count += sh->count;
    }
    if (remote_scans)
        SL_LOG_WARN("%s: %d remote shard%s without a sidecar index, each fetched whole at open "
                    "to count its samples, and nothing checks their bytes end to end (a byte "
                    "damaged on the way would go unseen, unless the server gives a checksum of "
                    "each: S3's, an MD5 ETag, a digest header); `sluice index` on the shards writes "
                    ".slidx files that let a reader open only the shards it reads and check "
                    "every sample", sl_io__short_name(s->shards[0].path), remote_scans,
                    remote_scans > 1 ? "s" : "");
    SL_CHECK(sl_shard_set__create(&s->set, n, s->max_open,
                                  &(sl_shard_set_ops){.open = open_shard,
                                                      .close = sl_shard_bytes__close},
                                  s));
    SL_CHECK(check_duplicates(s));
    uint64_t bad = 0;
    for (uint64_t i = 0; i < s->tab.nsamples; i++)
        bad += s->tab.samples[i].err != 0;
    if (bad && bad == s->base.count) {
        /* Nothing readable at all: say why now rather than on every read. */
        char where[SL__ERRMSG_MAX / 2];
        tar_locate(&s->base, 0, where, sizeof where);
        SL_FAIL(SL_ECORRUPT, "%s: %s", where, s->tab.errs[s->tab.samples[0].err - 1]);
    }
    SL_CHECK(make_columns(s));
    mark_int_columns(s);
    if (n == 1)
        snprintf(s->base.name, sizeof s->base.name, "%s", sl__base_name(s->shards[0].path));
    else
        snprintf(s->base.name, sizeof s->base.name, "%s (+%d more)", sl__base_name(s->shards[0].path),
                 n - 1);
    *out = &s->base;
    rc = SL_OK;
cleanup:
    sl_source__free_paths(list);
    if (rc < 0)
        tar_free(&s->base);
    return rc;
}

/* ---- building an index ------------------------------------------------------------ */

int sl_source__index_tar(const char *path, const cJSON *opts) {
    tar_source *s = NULL;
    sl_source_cursor *cur = NULL;
    sl_sidx *ix = NULL;
    cJSON *obj = NULL;
    int rc;
    sl_sidx_use index;
    if (opts) {
        /* The source's own options are accepted (and checked); the index
         * always covers every member. */
        tar_source probe = {0};
        rc = parse_options(&probe, opts, "index", &index);
        sl_source__free_paths(probe.only);
        SL_TRY(rc);
    }
    SL_CHECK(sl_sidx__begin(&ix, "webdataset", path));
    obj = cJSON_CreateObject();
    if (!obj || !cJSON_AddStringToObject(obj, "webdataset", path) ||
        !cJSON_AddFalseToObject(obj, "index"))
        SL_FAIL(SL_ENOMEM, "out of memory indexing %s", path);
    sl_source *src = NULL;
    SL_CHECK(sl_source__open_webdataset(&src, obj, "index"));
    s = (tar_source *)src;
    /* An index lets a read walk one sample's headers alone, which would
     * miss a global path or size set earlier in the file. */
    if (s->tab.global_names)
        SL_FAIL(SL_EUNSUPPORTED, "cannot index %s: a pax global header sets path or size for "
                "the members after it", path);
    for (uint64_t i = 0; i < s->tab.nsamples; i++) {
        const tar_sample *smp = &s->tab.samples[i];
        if (smp->err) {
            char where[SL__ERRMSG_MAX / 2];
            tar_locate(src, i, where, sizeof where);
            SL_FAIL(SL_ECORRUPT, "cannot index a damaged file: %s: %s", where,
                    s->tab.errs[smp->err - 1]);
        }
        /* A sample can be whole as tar and still not read (a member the
         * other samples have is missing, a cls that is not a number): read
         * it, so that a damaged shard is not indexed. */
        if (!cur) {
            SL_CHECK(sl_source__cursor_open(src, NULL, NULL, &cur));
            cur->borrow = 1;
        }
        sl_sample one;
        memset(&one, 0, sizeof one);
        rc = sl_source__read(src, cur, i, &one);
        if (rc < 0)
            SL_FAIL_PREFIX(rc, "cannot index a damaged file");
        sl_sample_clear(&one);
        SL_CHECK(sl_sidx__add_record(ix, smp->offset, smp->end - smp->offset));
    }
    for (int c = 1; c < src->ncols; c++) {
        const sl_source_col *col = &src->col[c];
        SL_CHECK(sl_sidx__add_col(ix, col->name, col->type, col->dtype, col->ndim, col->shape,
                                  col->encoded ? SL_SIDX_COL_ENCODED : 0));
    }
    for (int c = 1; c < src->ncols; c++) {
        const void *vals = NULL;
        SL_CHECK(tar_index_column(src, c, &vals));
        if (vals)
            SL_CHECK(sl_sidx__add_scalar(ix, src->col[c].name, SL_COL_INT64, vals));
    }
    SL_CHECK(sl_sidx__write(path, ix));
    rc = SL_OK;
cleanup:
    if (s) {
        sl_source__cursor_free(&s->base, cur);
        sl_source__release(&s->base);
    }
    cJSON_Delete(obj);
    sl_sidx__free(ix);
    return rc;
}

/* A tar file starts with a header block: a ustar/GNU magic, or (pre-POSIX
 * archives) at least a valid checksum over a named entry. */
int sl_source__sniff_tar(const char *path, int is_dir, const uint8_t *head, size_t n) {
    (void)path;
    if (is_dir || n < TAR_BLOCK)
        return 0;
    return head[0] && ((magic_posix(head) || magic_gnu(head)) || checksum_ok(head));
}
