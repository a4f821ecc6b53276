/*
 * record_recover.c — sl_recover: salvage the complete records of an
 * interrupted write.
 *
 * Input is what a writer leaves when it stops before close (FORMAT.md, "Crash
 * safety"): the directory "<path>.partial/" holding finished shards
 * "shard-NNNNN.slr" and at most one unfinished "shard-NNNNN.slr.partial", or a
 * single shard file. Every shard starts with a header carrying the schema, and
 * every record is framed with its length and checksum, so records can be
 * walked from the header on without an index.
 *
 * Rules: records are taken in order from shard 0 on; the walk stops at the
 * first frame that is torn (runs past the data), fails its checksum, or does
 * not decode; nothing after that point is used, so the output's records are
 * exactly a prefix of the input's, with the same numbers. The input is never
 * modified. The output is written by the ordinary writer (via
 * "<out>.recovering"), so it is published atomically.
 *
 * A salvaged dataset says so: its metadata gets "salvaged" (the records kept,
 * the records the interrupted pack planned when its plan is there, where it
 * came from), which `sluice info` and `sluice verify` report, and a class
 * list ("classes" with an int64 "label" column) is cut to the classes the
 * kept records reach, so that it describes the records there.
 */
#include "record/record_format.h"
#include "io/io.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct recover_state {
    sl_writer *w;
    bool dry;                /* count only: no output */
    const char *out;
    bool fsync_output;
    int label_col;           /* an int64 "label" column, or -1 */
    int64_t max_label;       /* the largest label kept (-1: none) */
    sl_schema schema;
    slr_meta meta;           /* best known metadata */
    uint64_t next;           /* next expected global record number */
    uint64_t kept, dropped;
    bool stopped;
    sl_record *rec;
} recover_state;

/* If the file ends in a valid footer, return its data end (index offset) and
 * record count; else false. Trusts nothing the footer's checksum does not cover. */
static bool footer_bounds(const uint8_t *map, uint64_t size, uint64_t hb, uint64_t *data_end,
                          uint64_t *count, slr_meta *meta, const char *path, int nscalar) {
    if (size < hb + SLR_FOOTER_SIZE)
        return false;
    const uint8_t *f = map + size - SLR_FOOTER_SIZE;
    if (memcmp(f + 56, SLR_MAGIC, SLR_MAGIC_LEN) || sl_record__hash(f, 48, 0) != sl__ld64(f + 48))
        return false;
    uint64_t io = sl__ld64(f), ib = sl__ld64(f + 8), n = sl__ld64(f + 16);
    if (sl__ld64(f + 32) != size || io < hb || io > size - SLR_FOOTER_SIZE ||
        ib != size - SLR_FOOTER_SIZE - io || sl_record__hash(map + io, (size_t)ib, 0) != sl__ld64(f + 40))
        return false;
    uint64_t per = SLR_INDEX_ENTRY + 8u * (uint64_t)nscalar;
    if (n > ib / per)
        return false;
    slr_meta tmp = {0};
    if (sl_record__meta_decode(map + io + n * per, ib - n * per, &tmp, path, "index") == SL_OK) {
        sl_record__meta_clear(meta);
        *meta = tmp;
    }
    *data_end = io;
    *count = n;
    return true;
}

static int recover_file(recover_state *st, const char *path, const char *out, bool first_file,
                        bool fsync_output) {
    int rc = SL_OK;
    slr_meta hmeta = {0};
    sl_io *io;
    SL_TRY(sl_io__open(&io, path, SL_IO_MAP));
    const uint8_t *map = sl_io__map(io);
    const uint64_t size = sl_io__size(io);
    slr_header hdr;
    sl_schema schema;
    rc = sl_record__read_header(io, &hdr, &schema, &hmeta);
    if (rc < 0) {
        if (first_file)
            goto cleanup;          /* nothing salvageable without a header */
        /* A later shard whose header was torn holds no complete record. */
        st->stopped = true;
        st->dropped += size > 0;
        rc = SL_OK;
        goto cleanup;
    }
    if (first_file) {
        st->schema = schema;
        st->meta = hmeta;
        memset(&hmeta, 0, sizeof hmeta);
        st->label_col = -1;
        st->max_label = -1;
        for (int c = 0; c < schema.ncols; c++)
            if (schema.col[c].type == SL_COL_INT64 && !strcmp(schema.col[c].name, "label"))
                st->label_col = c;
        if (!st->dry) {
            sl_writer_options o = SL_WRITER_OPTIONS_INIT;
            o.shard_bytes = hdr.shard_bytes;
            o.fsync = fsync_output;
            SL_CHECK(sl_writer__open_ex(&st->w, out, &st->schema, &o, ".recovering"));
        }
    } else if (!sl_record__schema_equal(&schema, &st->schema)) {
        st->stopped = true;
        SL_LOG_WARN("%s: schema differs from the first shard's; stopping here", path);
        goto cleanup;
    }
    if (hdr.first_record != st->next) {
        st->stopped = true;
        SL_LOG_WARN("%s: starts at record %llu, expected %llu; stopping here", path,
                    (unsigned long long)hdr.first_record, (unsigned long long)st->next);
        goto cleanup;
    }
    int nscalar = 0;
    for (int c = 0; c < schema.ncols; c++)
        nscalar += slr_is_scalar(schema.col[c].type);
    uint64_t data_end = size, fcount = 0;
    bool complete = footer_bounds(map, size, hdr.header_bytes, &data_end, &fcount, &st->meta, path,
                                  nscalar);
    uint64_t off = hdr.header_bytes, k = 0;
    while (off < data_end) {
        if (complete && k == fcount)
            break;
        if (data_end - off < SLR_FRAME_HEADER)
            break;
        uint64_t len = sl__ld64(map + off), sum = sl__ld64(map + off + 8);
        if (len % 8 || len > data_end - off - SLR_FRAME_HEADER)
            break;
        const uint8_t *pl = map + off + SLR_FRAME_HEADER;
        if (sl_record__payload_sum(pl, (size_t)len, st->next, hdr.required_features) != sum)
            break;
        rc = sl_record__decode_payload(&st->schema, pl, len, st->next, path, st->rec, NULL);
        if (rc == SL_ENOMEM)
            goto cleanup;
        if (rc < 0) {
            rc = SL_OK;
            break;
        }
        if (st->w)
            SL_CHECK(sl_writer_append(st->w, st->rec->col, st->rec->ncols));
        if (st->label_col >= 0) {
            int64_t l = *(const int64_t *)st->rec->col[st->label_col].data;
            if (l > st->max_label)
                st->max_label = l;
        }
        st->kept++;
        st->next++;
        k++;
        off += SLR_FRAME_HEADER + len;
    }
    if (complete ? k < fcount : off < data_end) {
        st->stopped = true;
        st->dropped += complete ? fcount - k : 1;
    }
cleanup:
    sl_record__meta_clear(&hmeta);
    sl_io__close(io);
    return rc;
}

/* Shard i of a partial directory: "shard-NNNNN.slr" when sealed, else
 * "shard-NNNNN.slr.partial"; *path_out NULL when neither exists. */
static int shard_in(const char *dir, uint32_t i, char **path_out) {
    *path_out = NULL;
    for (int sealed = 1; sealed >= 0; sealed--) {
        char name[64];
        snprintf(name, sizeof name, "shard-%05u.slr%s", i, sealed ? "" : ".partial");
        char *p = sl_record__join(dir, name);
        if (!p)
            return sl__oom("recovering");
        if (access(p, F_OK) == 0) {
            *path_out = p;
            return SL_OK;
        }
        sl__free(p);
    }
    return SL_OK;
}

/* The plan the interrupted pack left beside its shards: its "planned"
 * record count, or UINT64_MAX (no plan: a bare writer's, a single file). */
static uint64_t planned_of(const char *partial, bool is_dir) {
    if (!is_dir)
        return UINT64_MAX;
    char *p = sl_record__join(partial, SLR_PLAN_NAME);
    uint8_t *text = NULL;
    size_t n = 0;
    uint64_t planned = UINT64_MAX;
    if (p && sl_io__read_file(p, (uint64_t)1 << 20, 1, &text, &n) == SL_OK) {
        sl__json_init();
        cJSON *o = cJSON_Parse((const char *)text);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "planned");
        if (cJSON_IsNumber(v) && v->valuedouble >= 0)
            planned = (uint64_t)v->valuedouble;
        cJSON_Delete(o);
    }
    sl_errclear();
    sl__free(text);
    sl__free(p);
    return planned;
}

/* The output's metadata: what the input's said, "salvaged", and a class
 * list cut to the labels kept. */
static int salvaged_meta(recover_state *st, const char *partial, uint64_t planned) {
    sl__json_init();
    const char *classes = sl_record__meta_get(&st->meta, "classes");
    int nclasses = -1, rc = SL_OK;
    char *text = NULL;
    if (classes && st->label_col >= 0) {
        cJSON *list = cJSON_Parse(classes);
        if (cJSON_IsArray(list)) {
            nclasses = cJSON_GetArraySize(list);
            int keep = st->max_label + 1 < nclasses ? (int)(st->max_label + 1) : nclasses;
            while (cJSON_GetArraySize(list) > keep)
                cJSON_DeleteItemFromArray(list, cJSON_GetArraySize(list) - 1);
            text = cJSON_PrintUnformatted(list);
            if (!text)
                rc = sl__oom("recovering");
            else
                rc = sl_writer_set_meta(st->w, "classes", text);
            cJSON_free(text);
            text = NULL;
        }
        cJSON_Delete(list);
        SL_TRY(rc);
    }
    cJSON *o = cJSON_CreateObject();
    const char *base = strrchr(partial, '/');
    base = base && base[1] ? base + 1 : partial;
    if (!o || !cJSON_AddNumberToObject(o, "records", (double)st->kept) ||
        !(planned == UINT64_MAX ? cJSON_AddNullToObject(o, "planned")
                                : cJSON_AddNumberToObject(o, "planned", (double)planned)) ||
        (nclasses >= 0 && !cJSON_AddNumberToObject(o, "classes_planned", nclasses)) ||
        !cJSON_AddStringToObject(o, "from", base) || !(text = cJSON_PrintUnformatted(o)))
        rc = sl__oom("recovering");
    else
        rc = sl_writer_set_meta(st->w, "salvaged", text);
    cJSON_free(text);
    cJSON_Delete(o);
    return rc;
}

/* Recover `partial` into `out` (NULL: `partial` without ".partial"), or with
 * `dry` count what would be kept and write nothing. */
static int recover_any(const char *partial, const char *out, bool dry, bool fsync_output,
                       slr_recover_result *res) {
    int rc = SL_OK;
    char *outp = NULL, *src = NULL;
    recover_state st;
    memset(&st, 0, sizeof st);
    memset(res, 0, sizeof *res);
    res->planned = UINT64_MAX;
    st.dry = dry;
    if (!partial || !*partial)
        return sl__error(SL_EINVAL, "sl_recover: empty path");
    if (!out && !dry) {
        /* Strip a trailing slash and ".partial". */
        size_t n = strlen(partial);
        while (n > 1 && partial[n - 1] == '/')
            n--;
        if (n <= 8 || strncmp(partial + n - 8, ".partial", 8) != 0)
            return sl__error(SL_EINVAL, "%s: name does not end in .partial; give an output path",
                             partial);
        outp = sl__malloc(n - 8 + 1);
        if (!outp)
            return sl__oom("recovering");
        memcpy(outp, partial, n - 8);
        outp[n - 8] = 0;
        out = outp;
    }
    struct stat sb;
    if (stat(partial, &sb) != 0)
        SL_FAIL(SL_EIO, "%s: cannot open: %s", partial, strerror(errno));
    SL_CHECK(sl_record_create(&st.rec));
    res->planned = planned_of(partial, S_ISDIR(sb.st_mode));
    if (S_ISDIR(sb.st_mode)) {
        for (uint32_t i = 0; !st.stopped; i++) {
            sl__free(src);
            SL_CHECK(shard_in(partial, i, &src));
            if (!src) {
                if (i == 0)
                    SL_FAIL(SL_ECORRUPT, "%s: no shard-00000.slr or shard-00000.slr.partial "
                            "inside; nothing to recover", partial);
                break;
            }
            SL_CHECK(recover_file(&st, src, out, i == 0, fsync_output));
        }
    } else {
        SL_CHECK(recover_file(&st, partial, out, true, fsync_output));
    }
    res->kept = st.kept;
    res->dropped = st.dropped;
    if (st.w) {
        for (int i = 0; i < st.meta.n; i++)
            SL_CHECK(sl_writer_set_meta(st.w, st.meta.keys[i], st.meta.vals[i]));
        if (st.kept)
            SL_CHECK(salvaged_meta(&st, partial, res->planned));
        SL_CHECK(sl_writer_close(st.w));
    }
    if (!dry && (st.dropped || st.stopped))
        SL_LOG_INFO("%s: recovered %llu records, dropped %llu", partial,
                    (unsigned long long)st.kept, (unsigned long long)st.dropped);
cleanup:
    if (dry && rc == SL_ECORRUPT && st.kept == 0) {
        /* nothing complete (not even a header): that is the answer */
        sl_errclear();
        rc = SL_OK;
        res->kept = 0;
    }
    sl_writer_free(st.w);
    sl_record_free(st.rec);
    sl_record__meta_clear(&st.meta);
    sl__free(src);
    sl__free(outp);
    return rc;
}

int sl_record__recover_ex(const char *partial, const char *out, bool fsync_output,
                          slr_recover_result *res) {
    return recover_any(partial, out, false, fsync_output, res);
}

int sl_recover(const char *partial, const char *out, uint64_t *kept_out, uint64_t *dropped_out) {
    slr_recover_result res;
    int rc = sl_record__recover_ex(partial, out, true, &res);
    if (kept_out)
        *kept_out = rc == SL_OK ? res.kept : 0;
    if (dropped_out)
        *dropped_out = rc == SL_OK ? res.dropped : 0;
    return rc;
}

int sl_recover_info(const char *partial, uint64_t *complete_out, uint64_t *planned_out) {
    slr_recover_result res;
    int rc = recover_any(partial, NULL, true, false, &res);
    if (complete_out)
        *complete_out = rc == SL_OK ? res.kept : 0;
    if (planned_out)
        *planned_out = rc == SL_OK ? res.planned : UINT64_MAX;
    return rc;
}

int sl_record__recover(const char *partial, const char *out, uint64_t *kept_out,
                       uint64_t *dropped_out, bool fsync_output) {
    slr_recover_result res;
    int rc = sl_record__recover_ex(partial, out, fsync_output, &res);
    if (kept_out)
        *kept_out = rc == SL_OK ? res.kept : 0;
    if (dropped_out)
        *dropped_out = rc == SL_OK ? res.dropped : 0;
    return rc;
}

