/*
 * fuzz_record.c — the .slr reader, verifier and recovery on untrusted bytes.
 *
 * Input: the bytes of a file.
 *   - Starting with '{': a manifest.json, placed in a dataset directory next
 *     to two valid shards written once at start-up (the manifest parser and
 *     its cross-checks against shard footers).
 *   - Otherwise: a .slr file, opened with mmap and with pread; every record is
 *     read, then verified; then the bytes are handed to recovery as a
 *     ".partial" shard.
 * Random bytes rarely get past the checksums, so each .slr input also runs a
 * second time "resealed": the fuzzer recomputes every checksum it can locate
 * (header, records, index, footer) so that the parsers behind them see the
 * mutated bytes.
 * The contract checked: an error with a message, or data; never a crash, an
 * out-of-bounds read, a leak or a hang. Where open succeeds, reads in the two
 * modes must agree byte for byte.
 */
#include "sluice.h"

#include "record/record_format.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[256];
static char g_file[300], g_partial[300], g_out[300], g_ds[300], g_manifest[320];


/* Two shards of a small dataset, for the manifest mode. */
static void make_dataset(void) {
    sl_schema *s;
    if (sl_schema_create(&s) != SL_OK ||
        sl_schema_add(s, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0) != SL_OK ||
        sl_schema_add(s, "data", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0) != SL_OK)
        abort();
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.shard_bytes = 700;
    o.fsync = 0;
    sl_writer *w;
    if (sl_writer_open(&w, g_ds, s, &o) != SL_OK)
        abort();
    for (int64_t i = 0; i < 8; i++) {
        uint8_t b[40];
        memset(b, (int)i, sizeof b);
        int64_t n = 40;
        sl_tensor t[2];
        sl_tensor_view(&t[0], &i, SL_I64, 0, NULL);
        sl_tensor_view(&t[1], b, SL_U8, 1, &n);
        if (sl_writer_append(w, t, 2) != SL_OK)
            abort();
    }
    if (sl_writer_close(w) != SL_OK)
        abort();
    sl_writer_free(w);
    sl_schema_free(s);
}

static void init(void) {
    if (g_dir[0])
        return;
    snprintf(g_dir, sizeof g_dir, "%s", fuzz_tmpdir("record"));
    snprintf(g_file, sizeof g_file, "%s/in.slr", g_dir);
    snprintf(g_partial, sizeof g_partial, "%s/rec.slr.partial", g_dir);
    snprintf(g_out, sizeof g_out, "%s/rec.slr", g_dir);
    snprintf(g_ds, sizeof g_ds, "%s/ds", g_dir);
    snprintf(g_manifest, sizeof g_manifest, "%s/manifest.json", g_ds);
    sl_log_set_level(SL_LOG_ERROR);
    make_dataset();
}

/* Read everything; returns a hash of all column bytes and shapes (so two
 * modes can be compared), or 0 if open failed. */
static uint64_t read_all(const char *path, unsigned flags) {
    sl_reader *r = NULL;
    if (sl_reader_open(&r, path, flags) != SL_OK) {
        if (!sl_errmsg()[0])
            abort();   /* every failure has a message */
        return 0;
    }
    uint64_t h = 1469598103934665603ull;
    sl_record *rec = NULL;
    if (sl_record_create(&rec) == SL_OK) {
        uint64_t n = sl_reader_count(r);
        const sl_schema *s = sl_reader_schema(r);
        for (int c = 0; c < sl_schema_ncols(s); c++) {
            const void *vals;
            if (sl_reader_index_column(r, c, &vals) == SL_OK && n)
                h = (h ^ ((const uint64_t *)vals)[n - 1]) * 1099511628211ull;
        }
        for (uint64_t i = 0; i < n && i < 4096; i++) {
            int rc = sl_reader_read(r, i, rec);
            h = (h ^ (uint64_t)(rc + 100)) * 1099511628211ull;
            if (rc != SL_OK)
                continue;
            for (int c = 0; c < sl_schema_ncols(s); c++) {
                const sl_tensor *t = sl_record_column(rec, c);
                const uint8_t *p = t->data;
                for (int d = 0; d < t->ndim; d++)
                    h = (h ^ (uint64_t)t->shape[d]) * 1099511628211ull;
                for (size_t k = 0; k < t->nbytes; k++)   /* touches every byte: ASan checks bounds */
                    h = (h ^ p[k]) * 1099511628211ull;
            }
        }
        uint64_t bad = 0;
        (void)sl_reader_verify(r, 1, &bad, NULL, NULL);
        h = (h ^ bad) * 1099511628211ull;
        sl_record_free(rec);
    }
    sl_reader_free(r);
    return h;
}

static uint64_t ld64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void st64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Recompute the checksums FORMAT.md defines, wherever the (possibly mutated)
 * fields locate them inside the buffer. Bounds are checked here on purpose
 * with plain arithmetic: this is test scaffolding, not the reader. */
static void reseal(uint8_t *b, size_t n) {
    if (n < 64 + 64)
        return;
    uint64_t hb = (uint64_t)b[12] | (uint64_t)b[13] << 8 | (uint64_t)b[14] << 16 |
                  (uint64_t)b[15] << 24;
    if (hb >= 16 && hb <= n)
        st64(b + hb - 8, XXH3_64bits_withSeed(b, hb - 8, 0));
    uint8_t *foot = b + n - 64;
    uint64_t io = ld64(foot), ib = ld64(foot + 8), cnt = ld64(foot + 16), first = ld64(foot + 24);
    if (io <= n - 64 && ib <= n - 64 - io) {
        for (uint64_t k = 0; k < cnt && k < ib / 24; k++) {
            uint8_t *e = b + io + 24 * k;
            uint64_t off = ld64(e), len = ld64(e + 8);
            if (off > io || len > io - off || io - off - len < 16)
                continue;
            uint64_t sum = XXH3_64bits_withSeed(b + off + 16, len, first + k);
            st64(b + off, len);
            st64(b + off + 8, sum);
            st64(e + 16, sum);
        }
        st64(foot + 40, XXH3_64bits_withSeed(b + io, ib, 0));
    }
    st64(foot + 48, XXH3_64bits_withSeed(foot, 48, 0));
}

static void run_file(const uint8_t *data, size_t size) {
    write_bytes(g_file, data, size);
    uint64_t a = read_all(g_file, 0);
    uint64_t b = read_all(g_file, SL_READ_NO_MMAP);
    if (a != b)
        abort();   /* mmap and pread disagree */
    /* Record checksums off: the payload parser sees hostile payloads directly. */
    read_all(g_file, SL_READ_NO_VERIFY);

    /* Recovery of the same bytes as an interrupted shard. */
    rm_tree(g_out);
    write_bytes(g_partial, data, size);
    uint64_t kept = 0, dropped = 0;
    if (sl_record__recover(g_partial, NULL, &kept, &dropped, false) == SL_OK) {
        sl_reader *r = NULL;
        /* What recovery writes must open and verify. */
        if (sl_reader_open(&r, g_out, 0) != SL_OK || sl_reader_count(r) != kept ||
            sl_reader_verify(r, 0, NULL, NULL, NULL) != SL_OK)
            abort();
        sl_reader_free(r);
    }
    rm_tree(g_out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init();
    if (size > 0 && data[0] == '{') {
        write_bytes(g_manifest, data, size);
        read_all(g_ds, 0);
        return 0;
    }
    run_file(data, size);
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    reseal(copy, size);
    if (memcmp(copy, data, size) != 0)
        run_file(copy, size);
    free(copy);
    return 0;
}
