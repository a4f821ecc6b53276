/*
 * fuzz_tar.c — the WebDataset tar source (src/source/source_tar.c): header
 * walk, pax/GNU extensions, grouping by key, per-record errors, the sidecar
 * index builder and reading through an index.
 *
 * Input: one shard, written to a temporary file and opened as
 * {"webdataset": FILE, "index": false}. The contract checked: open fails
 * with a message, or every record either reads (every column present, views
 * inside the file) or fails with a message and an empty sample. When no
 * record is damaged, the shard is indexed and read again through the index:
 * every record must give the same bytes both ways; an index that builds
 * means every record read.
 */
#include "core/core.h"
#include "source/source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "fuzz_source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[256];
static char g_tar[300], g_idx[320];


static void init(void) {
    if (g_dir[0])
        return;
    snprintf(g_dir, sizeof g_dir, "%s", fuzz_tmpdir("tar"));
    snprintf(g_tar, sizeof g_tar, "%s/s.tar", g_dir);
    snprintf(g_idx, sizeof g_idx, "%s/s.tar.slidx", g_dir);
    sl_log_set_level(SL_LOG_ERROR);
}

static sl_source *open_tar(const char *index) {
    char spec[512];
    snprintf(spec, sizeof spec, "{\"webdataset\": \"%s\", \"index\": %s}", g_tar, index);
    return fuzz_open_source(spec); /* every failure has a message and leaves nothing */
}

/* Read record i; returns 1 when it read. A read view must lie inside the
 * input; an int column is a scalar. Fills sums[] with a digest per column. */
static int read_one(sl_source *s, sl_source_cursor *cur, uint64_t i, const uint8_t *data,
                    size_t size, uint64_t *sums) {
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    int rc = sl_source__read(s, cur, i, &smp);
    if (rc < 0) {
        if (!sl_errmsg()[0] || smp.ncols != 0 || rc == SL_ENOMEM)
            abort();
        return 0;
    }
    if (smp.ncols != (uint32_t)s->ncols || smp.index != i)
        abort();
    for (int c = 0; c < s->ncols; c++) {
        const sl_tensor *t = &smp.col[c];
        if (s->col[c].type == SL_COL_INT64) {
            if (t->ndim != 0 || t->nbytes != 8)
                abort();
        } else if (t->nbytes > size || t->shape[0] != (int64_t)t->nbytes) {
            abort();
        }
        uint64_t h = t->nbytes * 0x9e3779b97f4a7c15ull;
        for (size_t k = 0; k < t->nbytes; k++)
            h = (h ^ ((const uint8_t *)t->data)[k]) * 0x100000001b3ull;
        sums[c] = h;
    }
    (void)data;
    sl_sample_clear(&smp);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init();
    unlink(g_idx);
    write_bytes(g_tar, data, size);
    sl_source *s = open_tar("false");
    if (!s)
        return 0;
    sl_source_cursor *cur = NULL;
    if (sl_source__cursor_open(s, NULL, NULL, &cur) < 0)
        abort();
    uint64_t n = s->count > 4096 ? 4096 : s->count;
    uint64_t(*sums)[SL_MAX_COLUMNS] = calloc(n ? n : 1, sizeof *sums);
    uint8_t *ok = calloc(n ? n : 1, 1);
    if (!sums || !ok)
        abort();
    for (uint64_t i = 0; i < n; i++)
        ok[i] = (uint8_t)read_one(s, cur, i, data, size, sums[i]);
    const void *vals = NULL;
    for (int c = 0; c < s->ncols; c++)
        if (s->vt->index_column(s, c, &vals) < 0 || (!vals) != !s->col[c].indexed)
            abort();
    sl_source__cursor_free(s, cur);
    cJSON *d = cJSON_CreateObject();
    if (!d || s->vt->describe(s, d) < 0)
        abort();
    int damaged = (int)cJSON_GetObjectItem(d, "damaged_records")->valuedouble;
    cJSON_Delete(d);
    uint64_t count = s->count;
    int ncols = s->ncols;
    sl_source__release(s);

    /* Through an index: same records, same bytes. */
    int rc = sl_source__index_tar(g_tar, NULL);
    if ((rc == SL_OK && damaged > 0) || (rc < 0 && !sl_errmsg()[0]) || rc == SL_ENOMEM)
        abort();
    /* An index is built only when every record reads (a sample missing a
     * member or with a non-numeric cls is damage too). */
    for (uint64_t i = 0; rc == SL_OK && i < n; i++)
        if (!ok[i])
            abort();
    if (rc == SL_OK) {
        s = open_tar("true");
        if (!s || s->count != count || s->ncols != ncols)
            abort();
        if (sl_source__cursor_open(s, NULL, NULL, &cur) < 0)
            abort();
        for (uint64_t i = 0; i < n; i++) {
            uint64_t again[SL_MAX_COLUMNS] = {0};
            if (read_one(s, cur, i, data, size, again) != ok[i] ||
                (ok[i] && memcmp(again, sums[i], sizeof again) != 0))
                abort();
        }
        sl_source__cursor_free(s, cur);
        sl_source__release(s);
    }
    free(sums);
    free(ok);
    return 0;
}
