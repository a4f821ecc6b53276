/*
 * source_idx.c — IDX files (the MNIST format) into .slr.
 *
 * An IDX file is a 4-byte magic (0, 0, dtype, ndim), ndim big-endian uint32
 * dims, then prod(dims) elements. Files usually ship gzip-compressed; we
 * detect gzip by its magic (never by the name) and inflate with zlib as we
 * go, so memory stays at two small buffers whatever the file size.
 *
 * Every size comes from an untrusted header, so before writing a single
 * record we check what can be checked: for a plain file the header must
 * account for exactly the file's length; for gzip (whose length is unknown
 * until inflated) a short stream fails at the record where it ends and extra
 * bytes fail after the last record. In both cases the partial output is
 * discarded by the writer.
 */
#include "source/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_BUF (64 * 1024)
#define IDX_MAGIC_U8 0x08
/* One item (an image) above this is not a plausible IDX record. */
#define IDX_MAX_ITEM ((uint64_t)1 << 28)

typedef struct {
    const char *path;
    sl_io *io;           /* the file (io.h), read front to back */
    uint64_t in_off;     /* bytes of it read so far */
    int gz;              /* 1: the file is gzip; inflate it */
    int zinit;           /* zs must be ended */
    z_stream zs;
    uint8_t *in;         /* compressed input (gz only) */
    int in_eof;          /* the file has no more bytes */
    int zend;            /* the last gzip member ended and nothing follows */
    uint64_t members_out; /* bytes inflated by the gzip members before this one */
    uint8_t *out;        /* decompressed (or plain) bytes not yet consumed */
    size_t out_pos, out_len;
    uint64_t file_size;

    /* header */
    int ndim;
    uint32_t dims[SL_MAX_DIMS + 1];
    uint64_t count;      /* dims[0] */
    uint64_t item;       /* bytes per item: prod(dims[1..]) */
} idx_stream;

static void idx_close(idx_stream *s) {
    if (s->zinit)
        inflateEnd(&s->zs);
    sl_io__close(s->io);
    sl__free(s->in);
    sl__free(s->out);
    memset(s, 0, sizeof *s);
}

/* The next up to n bytes of the file; *got < n only at its end. */
static int read_full(idx_stream *s, uint8_t *dst, size_t n, size_t *got) {
    SL_TRY(sl_io__read_some(s->io, dst, n, s->in_off, got));
    s->in_off += *got;
    return SL_OK;
}

static int idx_open(idx_stream *s, const char *path) {
    int rc = SL_OK;
    memset(s, 0, sizeof *s);
    s->path = path;
    SL_TRY(sl_io__open(&s->io, path, 0));
    s->file_size = sl_io__size(s->io);
    uint8_t magic[2] = {0, 0};
    size_t got;
    SL_CHECK(sl_io__read_some(s->io, magic, 2, 0, &got));
    s->gz = magic[0] == 0x1f && magic[1] == 0x8b;
    s->out = sl__malloc(IDX_BUF);
    if (!s->out)
        SL_FAIL(SL_ENOMEM, "%s: out of memory", path);
    if (s->gz) {
        s->in = sl__malloc(IDX_BUF);
        if (!s->in)
            SL_FAIL(SL_ENOMEM, "%s: out of memory", path);
        s->zs.zalloc = sl__zalloc;
        s->zs.zfree = sl__zfree;
        int zr = inflateInit2(&s->zs, 16 + MAX_WBITS); /* 16: expect a gzip wrapper */
        if (zr == Z_MEM_ERROR)
            SL_FAIL(SL_ENOMEM, "%s: out of memory starting zlib", path);
        if (zr != Z_OK)
            SL_FAIL(SL_EIO, "%s: zlib failed to start (%d)", path, zr);
        s->zinit = 1;
    }
    return SL_OK;
cleanup:
    idx_close(s);
    return rc;
}

/* When zlib has eaten its input, the next IDX_BUF compressed bytes (in_eof at the end). */
static int feed_zlib(idx_stream *s) {
    if (s->zs.avail_in != 0 || s->in_eof)
        return SL_OK;
    size_t got = 0;
    SL_TRY(read_full(s, s->in, IDX_BUF, &got));
    s->zs.next_in = s->in;
    s->zs.avail_in = (uInt)got;
    if (got == 0)
        s->in_eof = 1;
    return SL_OK;
}

/* Refill s->out with up to IDX_BUF decompressed bytes; out_len 0 at the end. */
static int idx_fill(idx_stream *s) {
    s->out_pos = s->out_len = 0;
    if (!s->gz) {
        size_t got = 0;
        SL_TRY(read_full(s, s->out, IDX_BUF, &got));
        s->out_len = got;
        return SL_OK;
    }
    if (s->zend)
        return SL_OK;
    s->zs.next_out = s->out;
    s->zs.avail_out = IDX_BUF;
    while (s->zs.avail_out > 0) {
        SL_TRY(feed_zlib(s));
        int zr = inflate(&s->zs, Z_NO_FLUSH);
        if (zr == Z_STREAM_END) {
            /* gzip allows several members back to back (cat a.gz b.gz). */
            SL_TRY(feed_zlib(s));
            if (s->zs.avail_in == 0) {
                s->zend = 1;
                break;
            }
            s->members_out += s->zs.total_out; /* inflateReset zeroes total_out */
            inflateReset(&s->zs);
            continue;
        }
        int failed = zr == Z_MEM_ERROR || zr == Z_DATA_ERROR || zr == Z_NEED_DICT ||
                     zr == Z_STREAM_ERROR || (zr == Z_BUF_ERROR && s->in_eof && s->zs.avail_in == 0);
        /* Hand out what was inflated before the damage first; the next fill
         * meets the same error again (zlib's error states are sticky), so the
         * failure is reported at the record it hits. */
        if (failed && s->zs.avail_out < IDX_BUF)
            break;
        if (zr == Z_MEM_ERROR)
            return sl__error(SL_ENOMEM, "%s: out of memory in zlib", s->path);
        if (zr == Z_DATA_ERROR || zr == Z_NEED_DICT || zr == Z_STREAM_ERROR)
            return sl__error(SL_ECORRUPT, "%s: damaged gzip data after %llu bytes: %s",
                             s->path, (unsigned long long)(s->members_out + s->zs.total_out),
                             s->zs.msg ? s->zs.msg : "inflate failed");
        if (zr == Z_BUF_ERROR && s->in_eof && s->zs.avail_in == 0)
            return sl__error(SL_ECORRUPT,
                             "%s: gzip stream ends early after %llu bytes (truncated file)",
                             s->path, (unsigned long long)(s->members_out + s->zs.total_out));
    }
    s->out_len = IDX_BUF - s->zs.avail_out;
    return SL_OK;
}

/* Read up to n bytes; *got < n only at the end of the data. */
static int idx_read(idx_stream *s, void *dst, size_t n, size_t *got) {
    uint8_t *d = dst;
    size_t done = 0;
    while (done < n) {
        if (s->out_pos == s->out_len) {
            SL_TRY(idx_fill(s));
            if (s->out_len == 0)
                break;
        }
        size_t take = s->out_len - s->out_pos;
        if (take > n - done)
            take = n - done;
        memcpy(d + done, s->out + s->out_pos, take);
        s->out_pos += take;
        done += take;
    }
    *got = done;
    return SL_OK;
}

static const char *idx_dtype_name(int code) {
    switch (code) {
    case 0x08: return "uint8";
    case 0x09: return "int8";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return NULL;
    }
}

static int idx_header(idx_stream *s) {
    uint8_t h[4 + 4 * (SL_MAX_DIMS + 1)];
    size_t got = 0;
    SL_TRY(idx_read(s, h, 4, &got));
    if (got == 0)
        return sl__error(SL_ECORRUPT, "%s: empty file, not an IDX file", s->path);
    if (got < 4 || h[0] != 0 || h[1] != 0)
        return sl__error(SL_ECORRUPT, "%s: not an IDX file (bad magic)", s->path);
    const char *dt = idx_dtype_name(h[2]);
    if (!dt)
        return sl__error(SL_ECORRUPT, "%s: not an IDX file (unknown dtype code 0x%02X)",
                         s->path, h[2]);
    if (h[2] != IDX_MAGIC_U8)
        return sl__error(SL_EUNSUPPORTED,
                         "%s: IDX dtype %s is not supported; sluice packs uint8 IDX files",
                         s->path, dt);
    s->ndim = h[3];
    if (s->ndim < 1 || s->ndim > SL_MAX_DIMS + 1)
        return sl__error(SL_ECORRUPT, "%s: IDX header has %d dims (1..%d allowed)", s->path,
                         s->ndim, SL_MAX_DIMS + 1);
    SL_TRY(idx_read(s, h + 4, 4 * (size_t)s->ndim, &got));
    if (got < 4 * (size_t)s->ndim)
        return sl__error(SL_ECORRUPT, "%s: IDX header cut short (truncated file)", s->path);
    uint64_t item = 1;
    for (int d = 0; d < s->ndim; d++) {
        const uint8_t *p = h + 4 + 4 * d;
        s->dims[d] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (d > 0) {
            if (s->dims[d] == 0)
                return sl__error(SL_ECORRUPT, "%s: IDX dim %d is 0", s->path, d);
            item *= s->dims[d];
            if (item > IDX_MAX_ITEM)
                return sl__error(SL_ELIMIT, "%s: one IDX item is over %llu bytes", s->path,
                                 (unsigned long long)IDX_MAX_ITEM);
        }
    }
    s->count = s->dims[0];
    s->item = item;
    if (!s->gz) {
        uint64_t want = 4 + 4 * (uint64_t)s->ndim + s->count * s->item;
        if (s->file_size < want)
            return sl__error(SL_ECORRUPT,
                             "%s: truncated: the header declares %llu items (%llu bytes) but "
                             "the file has %llu bytes",
                             s->path, (unsigned long long)s->count, (unsigned long long)want,
                             (unsigned long long)s->file_size);
        if (s->file_size > want)
            return sl__error(SL_ECORRUPT,
                             "%s: %llu extra bytes after the %llu items the header declares",
                             s->path, (unsigned long long)(s->file_size - want),
                             (unsigned long long)s->count);
    }
    return SL_OK;
}

/* After the last item: anything left is an error (gzip only; plain files
 * were checked against their length up front). */
static int idx_expect_end(idx_stream *s) {
    uint8_t extra;
    size_t got = 0;
    SL_TRY(idx_read(s, &extra, 1, &got));
    if (got)
        return sl__error(SL_ECORRUPT,
                         "%s: extra bytes after the %llu items the header declares", s->path,
                         (unsigned long long)s->count);
    return SL_OK;
}

int sl_source__sniff_path(const char *path, sl_source__sniff_kind *kind_out) {
    idx_stream s;
    *kind_out = SL_SNIFF_OTHER;
    SL_TRY(idx_open(&s, path));
    uint8_t h[4];
    size_t got = 0;
    int rc = idx_read(&s, h, 4, &got);
    if (rc == SL_ECORRUPT) {
        /* A damaged gzip is still "some file"; the packer reports it. */
        rc = SL_OK;
        got = 0;
    }
    if (rc == SL_OK && got == 4 && h[0] == 0 && h[1] == 0 && idx_dtype_name(h[2]) && h[3] >= 1)
        *kind_out = h[3] == 1 ? SL_SNIFF_IDX_LABELS : SL_SNIFF_IDX_IMAGES;
    idx_close(&s);
    return rc;
}

int sl_source__pack_idx(const char *a, const char *b, const char *dst,
                        const sl_pack_options *opts, sl_pack_report *rep) {
    int rc = SL_OK;
    idx_stream sa, sb;
    idx_stream *img = NULL, *lab = NULL;
    sl_schema *schema = NULL;
    sl_pack_run run = {0};
    uint8_t *item = NULL;
    uint8_t labels[4096];
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);

    rep->kind = SL_PACK_IDX;
    SL_CHECK(idx_open(&sa, a));
    SL_CHECK(idx_open(&sb, b));
    SL_CHECK(idx_header(&sa));
    SL_CHECK(idx_header(&sb));
    if (sa.ndim == 1 && sb.ndim >= 2) {
        img = &sb;
        lab = &sa;
    } else if (sb.ndim == 1 && sa.ndim >= 2) {
        img = &sa;
        lab = &sb;
    } else {
        SL_FAIL(SL_EINVAL,
                "%s, %s: IDX packing needs one images file (3 dims, magic 0x00000803) and one "
                "labels file (1 dim, magic 0x00000801); got %d and %d dims",
                a, b, sa.ndim, sb.ndim);
    }
    if (img->count != lab->count)
        SL_FAIL(SL_EINVAL, "%s has %llu images but %s has %llu labels; they must agree",
                img->path, (unsigned long long)img->count, lab->path,
                (unsigned long long)lab->count);

    int64_t shape[SL_MAX_DIMS];
    for (int d = 1; d < img->ndim; d++)
        shape[d - 1] = img->dims[d];
    SL_CHECK(sl_schema_create(&schema));
    SL_CHECK(sl_schema_add(schema, "image", SL_COL_ARRAY, SL_U8, img->ndim - 1, shape, 0));
    SL_CHECK(sl_schema_add(schema, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0));
    /* the plan: the two files' shapes and sizes (a resume must find them so) */
    uint64_t fpv[SL_MAX_DIMS + 4] = {img->count, img->item, (uint64_t)img->ndim, lab->count};
    for (int d = 0; d < img->ndim && d < SL_MAX_DIMS; d++)
        fpv[4 + d] = img->dims[d];
    sl_pack_plan plan = {"idx", img->count, XXH3_64bits(fpv, sizeof fpv)};
    SL_CHECK(sl_source__pack_begin(&run, dst, schema, &plan, opts, rep));
    sl_writer *w = run.w;
    SL_CHECK(sl_writer_set_meta(w, "source", "idx"));

    item = sl__malloc((size_t)img->item);
    if (!item)
        SL_FAIL(SL_ENOMEM, "%s: out of memory for one %llu-byte item", img->path,
                (unsigned long long)img->item);
    size_t lab_pos = 0, lab_len = 0;
    for (uint64_t i = 0; i < img->count; i++) {
        size_t got = 0;
        SL_CHECK(idx_read(img, item, (size_t)img->item, &got));
        if (got < img->item)
            SL_FAIL(SL_ECORRUPT,
                    "%s: record %llu: data ends early; the header declares %llu items "
                    "(truncated file)",
                    img->path, (unsigned long long)i, (unsigned long long)img->count);
        if (lab_pos == lab_len) {
            uint64_t left = lab->count - i;
            size_t want = left < sizeof labels ? (size_t)left : sizeof labels;
            SL_CHECK(idx_read(lab, labels, want, &got));
            if (got < want)
                SL_FAIL(SL_ECORRUPT,
                        "%s: record %llu: data ends early; the header declares %llu labels "
                        "(truncated file)",
                        lab->path, (unsigned long long)(i + got), (unsigned long long)lab->count);
            lab_pos = 0;
            lab_len = want;
        }
        int64_t label = labels[lab_pos++];
        if (i < run.start)
            continue; /* kept by the interrupted pack (the files are read in order) */
        if (sl_source__pack_stop(&run, 0))
            SL_FAIL(SL_ECANCELED, "interrupted");
        sl_tensor cols[2];
        memset(cols, 0, sizeof cols);
        sl_tensor_view(&cols[0], item, SL_U8, img->ndim - 1, shape);
        sl_tensor_view(&cols[1], &label, SL_I64, 0, NULL);
        SL_CHECK(sl_writer_append(w, cols, 2));
        rep->records++;
        rep->bytes += img->item;
        if (opts->progress)
            opts->progress(rep->records, img->count, rep->bytes, opts->user);
    }
    SL_CHECK(idx_expect_end(img));
    SL_CHECK(idx_expect_end(lab));

cleanup:
    rc = sl_source__pack_end(&run, rc);
    sl_schema_free(schema);
    sl__free(item);
    idx_close(&sa);
    idx_close(&sb);
    return rc;
}

/* ---- IDX as a direct source ---------------------------------------------------- */

/* The two files are read (and inflated) once at open into an array of images
 * and an array of labels: an IDX dataset is small next to memory
 * (Fashion-MNIST: 47 MB), and holding it makes the source a memory source
 * (source_mem.c) over those arrays: every read a view with no I/O, the label
 * column's values at hand for a pushed-down filter. */

/* {"idx": {"images": PATH, "labels": PATH}} or {"idx": [PATH, PATH]} (either
 * order: the labels file is the one with one dim). */
static int idx_paths(const cJSON *v, const char *field, const char **a, const char **b) {
    const cJSON *x = NULL, *y = NULL;
    if (cJSON_IsObject(v)) {
        x = cJSON_GetObjectItemCaseSensitive(v, "images");
        y = cJSON_GetObjectItemCaseSensitive(v, "labels");
        for (const cJSON *it = v->child; it; it = it->next)
            if (strcmp(it->string, "images") && strcmp(it->string, "labels"))
                return sl__error(SL_EINVAL, "%s.idx.%s: unknown key (expected images, labels)",
                                 field, it->string);
    } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2) {
        x = cJSON_GetArrayItem(v, 0);
        y = cJSON_GetArrayItem(v, 1);
    }
    if (!cJSON_IsString(x) || !cJSON_IsString(y) || !x->valuestring[0] || !y->valuestring[0])
        return sl__error(SL_EINVAL, "%s.idx: must be {\"images\": PATH, \"labels\": PATH} or "
                                    "[IMAGES, LABELS]", field);
    *a = x->valuestring;
    *b = y->valuestring;
    return SL_OK;
}

static const sl_param idx_params[] = {
    {.key = "idx", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE,
     .doc = "{\"images\": PATH, \"labels\": PATH} or [IMAGES, LABELS]"},
    {0}};
const sl_param_table sl_source__idx_table = {idx_params, "an IDX source", NULL, 0, 0};

int sl_source__open_idx(sl_source **out, const cJSON *obj, const char *field) {
    *out = NULL;
    const char *a = NULL, *b = NULL;
    int rc = SL_OK;
    SL_TRY(sl_source__read_options(&sl_source__idx_table, obj, field, NULL));
    SL_TRY(idx_paths(cJSON_GetObjectItemCaseSensitive(obj, "idx"), field, &a, &b));
    idx_stream sa, sb;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    uint8_t *images = NULL, *lb = NULL;
    int64_t *labels = NULL;
    sl_source *src = NULL;
    static const char *const names[2] = {"image", "label"};
    SL_CHECK(idx_open(&sa, a));
    SL_CHECK(idx_open(&sb, b));
    SL_CHECK(idx_header(&sa));
    SL_CHECK(idx_header(&sb));
    idx_stream *img = &sa, *lab = &sb;
    if (sa.ndim == 1 && sb.ndim >= 2) {
        img = &sb;
        lab = &sa;
    } else if (!(sb.ndim == 1 && sa.ndim >= 2)) {
        SL_FAIL(SL_EINVAL, "%s, %s: an IDX source needs one images file (2+ dims) and one "
                           "labels file (1 dim); got %d and %d dims", a, b, sa.ndim, sb.ndim);
    }
    if (img->count != lab->count)
        SL_FAIL(SL_EINVAL, "%s has %llu images but %s has %llu labels; they must agree",
                img->path, (unsigned long long)img->count, lab->path,
                (unsigned long long)lab->count);
    size_t total;
    if (!sl__mul_ok((size_t)img->count, (size_t)img->item, &total))
        SL_FAIL(SL_ELIMIT, "%s: too large to hold in memory", img->path);
    images = sl__malloc(total ? total : 1);
    labels = sl__malloc((size_t)(lab->count ? lab->count : 1) * sizeof *labels);
    lb = sl__malloc(lab->count ? (size_t)lab->count : 1);
    if (!images || !labels || !lb)
        SL_FAIL(SL_ENOMEM, "%s: out of memory holding %llu records", img->path,
                (unsigned long long)img->count);
    size_t got = 0;
    SL_CHECK(idx_read(img, images, total, &got));
    if (got < total)
        SL_FAIL(SL_ECORRUPT, "%s: record %llu: data ends early; the header declares %llu "
                "items (truncated file)", img->path, (unsigned long long)(got / img->item),
                (unsigned long long)img->count);
    SL_CHECK(idx_read(lab, lb, (size_t)lab->count, &got));
    if (got < lab->count)
        SL_FAIL(SL_ECORRUPT, "%s: record %llu: data ends early; the header declares %llu "
                "labels (truncated file)", lab->path, (unsigned long long)got,
                (unsigned long long)lab->count);
    for (uint64_t i = 0; i < lab->count; i++)
        labels[i] = lb[i];
    SL_CHECK(idx_expect_end(img));
    SL_CHECK(idx_expect_end(lab));
    /* image: one uint8 array of the file's dims after the first per record;
     * label: one int64 per record, indexed */
    int64_t shape[SL_MAX_DIMS];
    for (int d = 1; d < img->ndim; d++)
        shape[d - 1] = img->dims[d];
    sl_tensor rows[2];
    sl_tensor_view(&rows[0], images, SL_U8, img->ndim - 1, shape);
    sl_tensor_view(&rows[1], labels, SL_I64, 0, NULL);
    images = NULL; /* the source's from here, on failure too */
    labels = NULL;
    SL_CHECK(sl_source__mem_adopt(&src, 2, names, rows, img->count, 1u << 1));
    src->kind = "idx";
    snprintf(src->name, sizeof src->name, "%s", sl__base_name(img->path));
    *out = src;
cleanup:
    idx_close(&sa);
    idx_close(&sb);
    sl__free(images);
    sl__free(labels);
    sl__free(lb);
    return rc;
}

int sl_source__sniff_idx(const char *path, int is_dir, const uint8_t *head, size_t n) {
    (void)head;
    (void)n;
    sl_source__sniff_kind k;
    if (is_dir)
        return 0;
    int rc = sl_source__sniff_path(path, &k);
    if (rc == SL_ENOMEM)
        return rc;
    return rc == SL_OK && k != SL_SNIFF_OTHER;
}
