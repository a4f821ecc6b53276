/*
 * fuzz_parquet.c — the Parquet source (src/source/source_parquet.c): the
 * footer's Thrift compact parse (parquet_thrift.c), the schema walk, the
 * page headers, CRCs, the codecs' decompression, levels, and every value
 * encoding (parquet_encoding.c, parquet_column.c); and the RLE and delta
 * decoders alone on the raw payload.
 *
 * Input: file bytes, then parameter bytes at the end (fuzz_data_producer.h):
 *   - verify: 0/1 (page CRCs);
 *   - small: 0/1, a cache of one row group (every read past it decodes
 *     again) instead of the default.
 * The contract checked: opening gives a source or an error with a message
 * naming the file; every row either reads with every column, each tensor's
 * bytes agreeing with its shape, or fails with a message that names the file
 * and the record, leaving the sample empty; the next rows still read; the
 * indexed columns' values come or fail with a message; never a crash, a
 * leak or a hang. Seeds: fuzz/make_parquet_corpus.sh (pyarrow's files).
 */
#include "sluice.h"

#include "fuzz_data_producer.h"

#include "core/core.h"
#include "source/parquet_format.h"
#include "source/source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "fuzz_source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_file[300];

static void init(void) {
    if (g_file[0])
        return;
    snprintf(g_file, sizeof g_file, "%s/a.parquet", fuzz_tmpdir("parquet"));
    sl_log_set_level(SL_LOG_ERROR);
}

/* The level and delta decoders on raw bytes: an error with a message, or
 * values; never a read past the end (ASan). */
static void raw_decoders(const uint8_t *p, size_t n) {
    uint32_t out[512];
    int64_t wide[512];
    if (n < 2)
        return;
    size_t count = p[0] % 512, used;
    if (pq_rle_decode(p + 2, n - 2, p[1] % 34, out, count, &used) == SL_OK && used > n - 2)
        abort();
    if (pq_delta_decode(p + 1, n - 1, p[1] & 1 ? 4 : 8, wide, count, &used) == SL_OK &&
        used > n - 1)
        abort();
}

static void read_all(int verify, int small) {
    char json[600];
    snprintf(json, sizeof json, "{\"parquet\": \"%s\", \"verify\": %s%s}", g_file,
             verify ? "true" : "false", small ? ", \"cache_bytes\": 1" : "");
    sl_source *s = fuzz_open_source(json);
    if (s)
        (void)fuzz_read_source(s, 4096, "a.parquet: record ", 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init();
    fuzz_producer fp;
    fuzz_producer_init(&fp, data, size);
    int verify = fuzz_producer_bool(&fp);
    int small = fuzz_producer_bool(&fp);
    write_bytes(g_file, data, fp.size);
    read_all(verify, small);
    raw_decoders(data, fp.size);
    return 0;
}
