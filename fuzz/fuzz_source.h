/* fuzz_source.h — the source contract a fuzz target of a format checks: at
 * open, on every record, on its indexed columns (static, header-only;
 * include after source/source.h). */
#ifndef SLUICE_FUZZ_SOURCE_H
#define SLUICE_FUZZ_SOURCE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Read records [0, n) of `s` on `cur`: each reads with every column, each
 * tensor's bytes agreeing with its shape and every byte readable (ASan sees a
 * view past its memory), or fails with a message that contains `where`
 * ("a.parquet: record "), leaving the sample empty, and the next still reads.
 * Any breach aborts. */
static inline void fuzz_read_records(sl_source *s, sl_source_cursor *cur, uint64_t n,
                                     const char *where) {
    for (uint64_t i = 0; i < n; i++) {
        sl_sample smp;
        memset(&smp, 0, sizeof smp);
        int rc = sl_source__read(s, cur, i, &smp);
        if (rc < 0) {
            if (smp.ncols != 0 || rc == SL_ENOMEM || !strstr(sl_errmsg(), where)) {
                fprintf(stderr, "record %llu: %d %s\n", (unsigned long long)i, rc, sl_errmsg());
                abort();
            }
        } else {
            if (smp.ncols != (uint32_t)s->ncols)
                abort();
            for (int k = 0; k < s->ncols; k++) {
                const sl_tensor *t = &smp.col[k];
                if ((size_t)sl_tensor_numel(t) * sl_dtype_size(t->dtype) != t->nbytes)
                    abort();
                volatile uint8_t sum = 0;
                for (size_t b = 0; b < t->nbytes; b++)
                    sum += ((const uint8_t *)t->data)[b];
                (void)sum;
            }
        }
        sl_sample_clear(&smp);
    }
}

/* Open the source `json` describes: the source, or NULL when the open failed
 * with a message and left nothing. A failure without a message, or one that
 * leaves a source, aborts (so does JSON the harness wrote wrong). */
static inline sl_source *fuzz_open_source(const char *json) {
    cJSON *o = cJSON_Parse(json);
    if (!o)
        abort();
    sl_source *s = NULL;
    int rc = sl_source__open_json(&s, o, "source");
    cJSON_Delete(o);
    if (rc < 0) {
        if (s || !sl_errmsg()[0]) {
            fprintf(stderr, "open: %d without a message, or a source left\n", rc);
            abort();
        }
        return NULL;
    }
    return s;
}

/* Read an opened source whole: records [0, min(count, max)) as
 * fuzz_read_records checks them, then each indexed column's values, which
 * come, or (index_may_fail) fail with a message. A source opened empty or
 * without columns aborts (open refuses those). Releases `s`; returns its
 * record count. */
static inline uint64_t fuzz_read_source(sl_source *s, uint64_t max, const char *where,
                                        int index_may_fail) {
    if (s->count == 0 || s->ncols < 1)
        abort();
    sl_source_cursor *cur = NULL;
    if (sl_source__cursor_open(s, NULL, NULL, &cur) != SL_OK)
        abort();
    fuzz_read_records(s, cur, s->count < max ? s->count : max, where);
    for (int k = 0; k < s->ncols; k++) {
        const void *vals = NULL;
        if (s->col[k].indexed && s->vt->index_column(s, k, &vals) != SL_OK &&
            (!index_may_fail || !sl_errmsg()[0]))
            abort();
    }
    uint64_t n = s->count;
    sl_source__cursor_free(s, cur);
    sl_source__release(s);
    return n;
}

#endif /* SLUICE_FUZZ_SOURCE_H */
