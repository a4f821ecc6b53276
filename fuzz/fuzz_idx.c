/*
 * fuzz_idx.c — sl_pack on IDX inputs (src/source/source_idx.c): content
 * sniffing, the header parser, the streaming gzip reader and the packer.
 *
 * Input: payload bytes, then parameter bytes at the end (fuzz_data_producer.h):
 *   - mode 0: the payload is the images file; a labels file is made here to
 *     agree with the count its header declares, so valid inputs get through
 *     to the records;
 *   - mode 1: the payload is split in two at a drawn point: images + labels
 *     (either may turn out to be the one with 1 dim, or neither);
 *   - each file may be wrapped in gzip here (one or two members), the two
 *     may be passed in either order, and the output may be sharded.
 * The contract checked: an error with a message, or a dataset that reads
 * back with the declared count, and (where the plain bytes are known here)
 * each record equal to its item and label; never a crash, a leak or a hang.
 */
#include "sluice.h"

#include "fuzz_data_producer.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[256];
static char g_a[300], g_b[300], g_out[300];


static void init(void) {
    if (g_dir[0])
        return;
    snprintf(g_dir, sizeof g_dir, "%s", fuzz_tmpdir("idx"));
    snprintf(g_a, sizeof g_a, "%s/a", g_dir);
    snprintf(g_b, sizeof g_b, "%s/b", g_dir);
    snprintf(g_out, sizeof g_out, "%s/out.slr", g_dir);
    sl_log_set_level(SL_LOG_ERROR);
}

/* Append one gzip member holding p[0..n) to f. */
static void gzip_member(FILE *f, const uint8_t *p, size_t n, int level) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        abort();
    uint8_t out[4096];
    zs.next_in = (Bytef *)(uintptr_t)p;
    zs.avail_in = (uInt)n;
    int zr;
    do {
        zs.next_out = out;
        zs.avail_out = sizeof out;
        zr = deflate(&zs, Z_FINISH);
        if (zr == Z_STREAM_ERROR)
            abort();
        size_t have = sizeof out - zs.avail_out;
        if (have && fwrite(out, 1, have, f) != have)
            abort();
    } while (zr != Z_STREAM_END);
    deflateEnd(&zs);
}

/* Write p[0..n) to path: plain (wrap 0), one gzip member (1), or two
 * members split at `cut` (2), as `cat a.gz b.gz` makes. */
static void write_wrapped(const char *path, const uint8_t *p, size_t n, int wrap, size_t cut) {
    if (wrap == 0) {
        write_bytes(path, p, n);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (wrap == 1) {
        gzip_member(f, p, n, n & 1 ? 1 : 6);
    } else {
        if (cut > n)
            cut = n;
        gzip_member(f, p, cut, 1);
        gzip_member(f, p + cut, n - cut, 9);
    }
    if (fclose(f) != 0)
        abort();
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The IDX header as this file reads it (independently of the library):
 * 1 if p holds a uint8 IDX header whose dims multiply out, with the data
 * following it; fills ndim, count, item size and the header length. */
static int parse_header(const uint8_t *p, size_t n, int *ndim, uint64_t *count, uint64_t *item,
                        size_t *hlen) {
    if (n < 4 || p[0] || p[1] || p[2] != 0x08 || p[3] < 1 || p[3] > SL_MAX_DIMS + 1)
        return 0;
    *ndim = p[3];
    *hlen = 4 + 4 * (size_t)p[3];
    if (n < *hlen)
        return 0;
    *count = be32(p + 4);
    *item = 1;
    for (int d = 1; d < *ndim; d++) {
        *item *= be32(p + 4 + 4 * d);
        if (*item == 0 || *item > ((uint64_t)1 << 28))
            return 0;
    }
    return 1;
}

/* When p is gzip, the first (up to cap) bytes it inflates to, so that the
 * labels made for it can agree with its header; 0 otherwise. */
static size_t gunzip_head(const uint8_t *p, size_t n, uint8_t *out, size_t cap) {
    if (n < 2 || p[0] != 0x1f || p[1] != 0x8b)
        return 0;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
        abort();
    zs.next_in = (Bytef *)(uintptr_t)p;
    zs.avail_in = (uInt)n;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    (void)inflate(&zs, Z_SYNC_FLUSH);
    size_t got = cap - zs.avail_out;
    inflateEnd(&zs);
    return got;
}

typedef struct {
    uint64_t last, total;
    int bad;
} progress_state;

static void on_progress(uint64_t done, uint64_t total, uint64_t bytes, void *user) {
    progress_state *ps = user;
    (void)bytes;
    if (done != ps->last + 1 || done > total || (ps->total && total != ps->total))
        ps->bad = 1;
    ps->last = done;
    ps->total = total;
}

/* After a successful pack: the dataset at g_out must hold `count` records
 * with an image of `item` bytes (0: not known here) and a label each; when
 * the plain bytes of both files are known, every record must equal them. */
static void check_output(uint64_t count, uint64_t item, const uint8_t *img, const uint8_t *lab) {
    sl_reader *r = NULL;
    if (sl_reader_open(&r, g_out, 0) != SL_OK) {
        fprintf(stderr, "packed output does not open: %s\n", sl_errmsg());
        abort();
    }
    if (sl_reader_count(r) != count) {
        fprintf(stderr, "packed %llu records, reader sees %llu\n", (unsigned long long)count,
                (unsigned long long)sl_reader_count(r));
        abort();
    }
    const sl_schema *s = sl_reader_schema(r);
    int ci = sl_schema_find(s, "image"), cl = sl_schema_find(s, "label");
    const char *src = sl_reader_meta(r, "source");
    if (ci < 0 || cl < 0 || sl_schema_type(s, ci) != SL_COL_ARRAY ||
        sl_schema_type(s, cl) != SL_COL_INT64 || !src || strcmp(src, "idx") != 0)
        abort();
    sl_record *rec = NULL;
    if (sl_record_create(&rec) != SL_OK)
        abort();
    for (uint64_t i = 0; i < count; i++) {
        if (sl_reader_read(r, i, rec) != SL_OK) {
            fprintf(stderr, "record %llu of a packed output does not read: %s\n",
                    (unsigned long long)i, sl_errmsg());
            abort();
        }
        const sl_tensor *ti = sl_record_column(rec, ci), *tl = sl_record_column(rec, cl);
        if ((item && ti->nbytes != item) || tl->nbytes != 8)
            abort();
        if (img && memcmp(ti->data, img + i * item, (size_t)item) != 0)
            abort();
        if (lab && *(const int64_t *)tl->data != lab[i])
            abort();
    }
    sl_record_free(rec);
    if (sl_reader_verify(r, 0, NULL, NULL, NULL) != SL_OK)
        abort();
    sl_reader_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init();
    fuzz_producer fp;
    fuzz_producer_init(&fp, data, size);
    int split = fuzz_producer_bool(&fp);
    int wrap_img = (int)fuzz_producer_range(&fp, 0, 2);
    int wrap_lab = (int)fuzz_producer_range(&fp, 0, 2);
    int swap = fuzz_producer_bool(&fp);
    uint64_t shard_bytes = fuzz_producer_bool(&fp) ? fuzz_producer_range(&fp, 1, 4096) : 0;
    size_t cut_img = (size_t)fuzz_producer_range(&fp, 0, 0xffff);
    size_t cut_lab = (size_t)fuzz_producer_range(&fp, 0, 0xffff);
    size_t cut = split ? (size_t)fuzz_producer_range(&fp, 0, 0xffff) : 0;

    /* What is left at the front is the payload. */
    size_t n = fp.size;
    const uint8_t *img = data, *lab = NULL;
    size_t nimg = n, nlab = 0;
    uint8_t *made = NULL;
    if (split) {
        if (cut > n)
            cut = n;
        nimg = cut;
        lab = data + cut;
        nlab = n - cut;
    } else {
        /* A labels file that agrees with the images header (when it has one),
         * its values drawn from the images so they vary. */
        int nd;
        uint64_t cnt = 0, item;
        size_t hl;
        uint8_t head[4 + 4 * (SL_MAX_DIMS + 1)];
        size_t nhead = gunzip_head(img, nimg, head, sizeof head);
        const uint8_t *h = nhead ? head : img;
        if (!parse_header(h, nhead ? nhead : nimg, &nd, &cnt, &item, &hl) || cnt > 65536)
            cnt = 0;
        made = malloc(8 + (size_t)cnt);
        if (!made)
            return 0;
        memcpy(made, "\0\0\x08\x01", 4);
        made[4] = (uint8_t)(cnt >> 24);
        made[5] = (uint8_t)(cnt >> 16);
        made[6] = (uint8_t)(cnt >> 8);
        made[7] = (uint8_t)cnt;
        for (uint64_t i = 0; i < cnt; i++)
            made[8 + i] = nimg ? img[(size_t)(i * 7 % nimg)] : (uint8_t)i;
        lab = made;
        nlab = 8 + (size_t)cnt;
    }
    write_wrapped(g_a, img, nimg, wrap_img, cut_img);
    write_wrapped(g_b, lab, nlab, wrap_lab, cut_lab);

    rm_tree(g_out);
    const char *srcs[2] = {swap ? g_b : g_a, swap ? g_a : g_b};
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    o.jobs = 1;
    o.shard_bytes = shard_bytes;
    progress_state ps = {0, 0, 0};
    o.progress = on_progress;
    o.user = &ps;
    sl_pack_report rep;
    int rc = sl_pack(srcs, 2, g_out, &o, &rep);
    if (getenv("SLUICE_FUZZ_VERBOSE"))
        fprintf(stderr, "pack: %d %s (%llu records)\n", rc, rc < 0 ? sl_errmsg() : "",
                (unsigned long long)rep.records);
    if (rc < 0) {
        if (!sl_errmsg()[0])
            abort(); /* every failure has a message */
        struct stat st;
        if (lstat(g_out, &st) == 0) {
            fprintf(stderr, "a failed pack left %s behind\n", g_out);
            abort();
        }
        if (rep.records != 0)
            abort();
    } else {
        if (ps.bad || ps.last != rep.records || rep.kind != SL_PACK_IDX)
            abort();
        /* Which file held the images: the one with more than one dim. */
        int nd_a = 0, nd_b = 0;
        uint64_t cnt_a = 0, cnt_b = 0, item_a = 0, item_b = 0;
        size_t hl_a = 0, hl_b = 0;
        int ok_a = parse_header(img, nimg, &nd_a, &cnt_a, &item_a, &hl_a);
        int ok_b = parse_header(lab, nlab, &nd_b, &cnt_b, &item_b, &hl_b);
        /* The plain bytes are known here unless the payload itself was gzip. */
        if (ok_a && ok_b) {
            const uint8_t *pi = nd_a > 1 ? img + hl_a : lab + hl_b;
            const uint8_t *pl = nd_a > 1 ? lab + hl_b : img + hl_a;
            uint64_t cnt = nd_a > 1 ? cnt_a : cnt_b, item = nd_a > 1 ? item_a : item_b;
            if ((nd_a > 1) == (nd_b > 1) || rep.records != cnt)
                abort();
            check_output(cnt, item, pi, pl);
        } else {
            check_output(rep.records, 0, NULL, NULL);
        }
    }
    rm_tree(g_out);
    /* Nothing else may be left beside the inputs: no temporary shard files
     * or directories from the writer, whether the pack failed or not. */
    DIR *d = opendir(g_dir);
    if (!d)
        abort();
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "a") &&
            strcmp(e->d_name, "b")) {
            fprintf(stderr, "sl_pack left %s/%s behind\n", g_dir, e->d_name);
            abort();
        }
    }
    closedir(d);
    free(made);
    return 0;
}
