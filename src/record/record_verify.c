/*
 * record_verify.c — sl_reader_verify: check every record of every shard.
 *
 * Open already verified each shard's header, footer and index checksums and
 * the placement of every index entry. Verification adds, per record: the
 * frame header against the index, the payload checksum, the payload's
 * structure (including decompression), and that each scalar column's value in
 * the record equals the copy in the index (which filters read).
 */
#include "record/record_format.h"

#include <stdio.h>
#include <string.h>

int sl_reader_verify(const sl_reader *r, int keep_going, uint64_t *bad_out,
                     void (*progress)(uint64_t done, uint64_t total, void *user), void *user) {
    if (bad_out)
        *bad_out = 0;
    if (!r)
        return sl__error(SL_EINVAL, "sl_reader_verify: NULL reader");
    SL_TRY(sl_record__scalars(r));
    sl_record *rec;
    SL_TRY(sl_record_create(&rec));
    uint64_t bad = 0;
    int first_rc = SL_OK;
    char first_msg[SL__ERRMSG_MAX] = "";
    const uint64_t step = 4096;
    for (uint64_t i = 0; i < r->count; i++) {
        if (progress && i % step == 0)
            progress(i, r->count, user);
        int rc = sl_record__read(r, i, rec, true);
        if (rc == SL_OK) {
            for (int c = 0; c < r->schema.ncols; c++) {
                if (r->scalar_slot[c] < 0)
                    continue;
                uint64_t in_rec, in_idx;
                memcpy(&in_rec, rec->col[c].data, 8);
                memcpy(&in_idx, (const uint8_t *)r->scalars[c] + i * 8, 8);
                if (in_rec != in_idx) {
                    rc = sl__error(SL_ECORRUPT, "%s: record %llu: column \"%s\" differs from the "
                                   "index", sl_record__shard_of(r, i)->path,
                                   (unsigned long long)i, r->schema.col[c].name);
                    break;
                }
            }
        }
        if (rc == SL_ENOMEM || rc == SL_EIO) {
            sl_record_free(rec);
            return rc;
        }
        if (rc < 0) {
            bad++;
            if (first_rc == SL_OK) {
                first_rc = rc;
                snprintf(first_msg, sizeof first_msg, "%s", sl_errmsg());
            }
            if (!keep_going)
                break;
        }
    }
    if (progress && first_rc == SL_OK)
        progress(r->count, r->count, user);
    sl_record_free(rec);
    if (bad_out)
        *bad_out = bad;
    if (first_rc < 0) {
        if (bad > 1)
            return sl__error(first_rc, "%s (and %llu more damaged records)", first_msg,
                             (unsigned long long)(bad - 1));
        return sl__error(first_rc, "%s", first_msg);
    }
    return SL_OK;
}
