/*
 * record_verify.c — sl_reader_verify: check every record of every shard.
 *
 * Shard by shard: opening a shard checks its header, footer and index (each
 * under its checksum), the placement of every index entry and, in a
 * directory, its agreement with the manifest; a shard that fails that costs
 * all of its records (counted as damaged) and verification goes on with the
 * next. Then, per record: the frame header against the index, the payload
 * checksum, the payload's structure (including decompression), and that each
 * scalar column's value in the record equals the copy in the index (which
 * filters read). One shard is held at a time (the reader closes the others
 * as usual), so verifying a large dataset needs no more memory than reading
 * it.
 */
#include "record/record_format.h"

#include <stdio.h>
#include <string.h>

int sl_reader_shard_range(const sl_reader *r, int i, uint64_t *first, uint64_t *count) {
    if (!r || !first || !count || i < 0 || i >= r->nshards)
        return sl__error(SL_EINVAL, "sl_reader_shard_range: shard %d out of range (0..%d)", i,
                         r ? r->nshards - 1 : -1);
    *first = r->shards[i].first;
    *count = r->shards[i].count;
    return SL_OK;
}

int sl_reader_shard_check(const sl_reader *r, int i) {
    if (!r || i < 0 || i >= r->nshards)
        return sl__error(SL_EINVAL, "sl_reader_shard_check: shard %d out of range (0..%d)", i,
                         r ? r->nshards - 1 : -1);
    slr_shard *sh;
    SL_TRY(sl_record__shard_get(r, i, &sh));
    sl_record__shard_put(sh);
    return SL_OK;
}

int sl_record__failed_range(const sl_reader *r, uint64_t i, uint64_t *first, uint64_t *count) {
    if (i >= r->count)
        return 0;
    int k = sl_record__shard_of(r, i);
    const slr_slot *sl = &r->shards[k];
    int failed = sl_shard_set__failed(r->set, k) != 0;
    *first = sl->first;
    *count = sl->count;
    return failed;
}

int sl_reader_verify(const sl_reader *r, int keep_going, uint64_t *bad_out,
                     void (*progress)(uint64_t done, uint64_t total, void *user), void *user) {
    if (bad_out)
        *bad_out = 0;
    if (!r)
        return sl__error(SL_EINVAL, "sl_reader_verify: NULL reader");
    sl_record *rec;
    SL_TRY(sl_record_create(&rec));
    uint64_t bad = 0, done = 0, next_report = 0;
    int first_rc = SL_OK;
    char first_msg[SL__ERRMSG_MAX] = "";
    const uint64_t step = 4096;
    bool stop = false;
#define NOTE_BAD(rc_, n_)                                                                    \
    do {                                                                                     \
        bad += (n_);                                                                         \
        if (first_rc == SL_OK) {                                                             \
            first_rc = (rc_);                                                                \
            snprintf(first_msg, sizeof first_msg, "%s", sl_errmsg());                        \
        }                                                                                    \
        stop = !keep_going;                                                                  \
    } while (0)
    for (int k = 0; k < r->nshards && !stop; k++) {
        const slr_slot *sl = &r->shards[k];
        slr_shard *sh;
        int rc = sl_record__shard_get(r, k, &sh);
        if (rc == SL_ENOMEM || rc == SL_EIO) {
            sl_record_free(rec);
            return rc;
        }
        if (rc < 0) { /* the whole shard: every record of it is unreadable */
            char msg[SL__ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s", sl_errmsg());
            size_t pl = strlen(sl->path);
            const char *cause = !strncmp(msg, sl->path, pl) && msg[pl] == ':' ? msg + pl + 2 : msg;
            rc = sl__error(rc, "%s: records %llu..%llu (the whole shard): %s", sl->path,
                           (unsigned long long)sl->first,
                           (unsigned long long)(sl->first + sl->count - (sl->count > 0)), cause);
            NOTE_BAD(rc, sl->count);
            done += sl->count;
            continue;
        }
        for (uint64_t i = sl->first; i < sl->first + sl->count && !stop; i++, done++) {
            if (progress && done >= next_report) {
                progress(done, r->count, user);
                next_report = done + step;
            }
            rc = sl_record__read(r, i, rec, true);
            for (int c = 0; rc == SL_OK && c < r->schema.ncols; c++) {
                int slot = r->scalar_slot[c];
                if (slot < 0)
                    continue;
                uint64_t in_rec, in_idx;
                memcpy(&in_rec, rec->col[c].data, 8);
                memcpy(&in_idx, sh->index + sh->count * SLR_INDEX_ENTRY +
                                    ((uint64_t)slot * sh->count + (i - sh->first)) * 8, 8);
                if (in_rec != in_idx)
                    rc = sl__error(SL_ECORRUPT, "%s: record %llu: column \"%s\" differs from the "
                                   "index", sl->path, (unsigned long long)i,
                                   r->schema.col[c].name);
            }
            if (rc == SL_ENOMEM || rc == SL_EIO) {
                sl_record__shard_put(sh);
                sl_record_free(rec);
                return rc;
            }
            if (rc < 0)
                NOTE_BAD(rc, 1);
        }
        sl_record__shard_put(sh);
    }
#undef NOTE_BAD
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
