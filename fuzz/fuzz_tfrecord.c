/*
 * fuzz_tfrecord.c — the TFRecord source (src/source/source_tfrecord.c):
 * framing and its resynchronisation, both checksums, gzip inflation, the
 * protobuf-c decode of Example / SequenceExample, column inference from the
 * first records, the per-record conversions, and the sidecar index (build,
 * load, read through it).
 *
 * Input: payload bytes, then parameter bytes at the end (fuzz_data_producer.h):
 *   - verify: 0/1 ("verify" option);
 *   - gzip: 0 plain, 1 the payload gzipped here;
 *   - index: 0/1, build FILE.slidx first (and open with it when built).
 * The contract checked: opening gives a source or an error with a message;
 * every record either reads with every column, or fails with a message that
 * names the file and the record, leaving the sample empty; the next records
 * still read; never a crash, a leak or a hang. An index that builds opens
 * to the same record count, and every record reads through it.
 */
#include "sluice.h"

#include "fuzz_data_producer.h"

#include "core/core.h"
#include "source/source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "fuzz_util.h"
#include "fuzz_source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[256];
static char g_file[300], g_index[320];


static void init(void) {
    if (g_dir[0])
        return;
    snprintf(g_dir, sizeof g_dir, "%s", fuzz_tmpdir("tfrecord"));
    snprintf(g_file, sizeof g_file, "%s/a.tfrecord", g_dir);
    snprintf(g_index, sizeof g_index, "%s.slidx", g_file);
    sl_log_set_level(SL_LOG_ERROR);
}

static void write_gzip(const char *path, const uint8_t *p, size_t n) {
    gzFile g = gzopen(path, "wb");
    if (!g)
        abort();
    if (n && gzwrite(g, p, (unsigned)n) != (int)n)
        abort();
    if (gzclose(g) != Z_OK)
        abort();
}

/* Open and read every record; returns the count, or -1 when open failed. */
static int64_t read_all(int verify) {
    char json[600];
    snprintf(json, sizeof json, "{\"tfrecord\": \"%s\", \"verify\": %s}", g_file,
             verify ? "true" : "false");
    sl_source *s = fuzz_open_source(json);
    return s ? (int64_t)fuzz_read_source(s, UINT64_MAX, "a.tfrecord: record ", 0) : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init();
    fuzz_producer fp;
    fuzz_producer_init(&fp, data, size);
    int verify = fuzz_producer_bool(&fp);
    int gzip = fuzz_producer_bool(&fp);
    int index = fuzz_producer_bool(&fp);
    size_t n = fp.size;
    unlink(g_index);
    if (gzip)
        write_gzip(g_file, data, n);
    else
        write_bytes(g_file, data, n);
    if (index) {
        int rc = sl_source__index_tfrecord(g_file, NULL);
        if (rc < 0) {
            if (!sl_errmsg()[0] || access(g_index, F_OK) == 0)
                abort(); /* a failed build leaves no index */
        } else {
            int64_t with = read_all(verify);
            unlink(g_index);
            int64_t without = read_all(verify);
            /* The scan finds the same frames the index lists (a file that
             * indexes has no damage, so nothing hides behind a bad entry).
             * Either open may refuse where the other does not: column types
             * from a sample can be undecidable where the full scan's are not. */
            if (with >= 0 && without >= 0 && with != without) {
                fprintf(stderr, "index: %lld records, scan: %lld\n", (long long)with,
                        (long long)without);
                abort();
            }
            return 0;
        }
    }
    (void)read_all(verify);
    return 0;
}
