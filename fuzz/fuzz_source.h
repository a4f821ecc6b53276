/* fuzz_source.h — the source contract a fuzz target of a format checks on
 * every record (static, header-only; include after source/source.h). */
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

#endif /* SLUICE_FUZZ_SOURCE_H */
