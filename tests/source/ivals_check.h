/*
 * ivals_check.h — what the tar and TFRecord tests (test_tar_lazy.c,
 * test_tfrecord.c) ask of their index values (sl_source_ivals): with one
 * file's whole index gone since the source opened, index_column fails naming
 * it; once it is back, the next call reads them all.
 */
#ifndef SL_TEST_IVALS_CHECK_H
#define SL_TEST_IVALS_CHECK_H

#include "source/source.h"
#include "test.h"

#include <stdio.h>

/* Column col's values, after a first call with DATA.slidx moved away failed
 * with "<gone>.slidx: gone since the source opened". */
static inline const int64_t *ivals_after_a_gone_index(sl_source *s, int col,
                                                      const char *data_path, const char *gone) {
    char ix[4200], away[4210], want[300];
    snprintf(ix, sizeof ix, "%s.slidx", data_path);
    snprintf(away, sizeof away, "%s.away", ix);
    snprintf(want, sizeof want, "%s.slidx: gone since the source opened", gone);
    ASSERT_EQ(rename(ix, away), 0);
    const void *vals = s;
    ASSERT_RC(s->vt->index_column(s, col, &vals), SL_EIO);
    ASSERT(vals == NULL);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_EQ(rename(away, ix), 0);
    ASSERT_OK(s->vt->index_column(s, col, &vals));
    ASSERT(vals);
    return vals;
}

#endif /* SL_TEST_IVALS_CHECK_H */
