/*
 * pack.c — sl_pack: find what kind of dataset the inputs are and hand them
 * to the packer for that kind.
 */
#include "source/source.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

const char *sl_pack_kind_name(sl_pack_kind kind) {
    switch (kind) {
    case SL_PACK_IMAGEFOLDER: return "imagefolder";
    case SL_PACK_IDX: return "idx";
    case SL_PACK_SOURCE: return "source";
    default: return "unknown";
    }
}

void sl_source__report_bad(sl_pack_report *rep, const char *line) {
    if (rep->nbad < SL_PACK_REPORT_BAD)
        snprintf(rep->bad[rep->nbad++], SL_PACK_REPORT_LINE, "%s", line);
}

#define KINDS_KNOWN \
    "sluice packs one directory (an ImageFolder: ROOT/CLASS/IMAGE), an IDX images " \
    "file and an IDX labels file (plain or .gz), TFRecord files, tar shards or a .slr dataset"

int sl_pack_detect(const char *const *srcs, int nsrc, sl_pack_kind *kind_out) {
    if (!kind_out)
        return sl__error(SL_EINVAL, "sl_pack_detect: kind_out is NULL");
    *kind_out = SL_PACK_UNKNOWN;
    if (!srcs || nsrc <= 0)
        return sl__error(SL_EINVAL, "no input given; " KINDS_KNOWN);
    /* Formats with a packer of their own (parallel reads, per-file checks)
     * are found below; every other format a source knows packs through the
     * source interface. */
    const sl_source_format *fmt;
    int found = sl_source__detect(srcs, nsrc, &fmt);
    if (found == SL_ENOMEM)
        return found;
    if (found == SL_OK && fmt->open != sl_source__open_imagefolder &&
        fmt->open != sl_source__open_idx) {
        *kind_out = SL_PACK_SOURCE;
        return SL_OK;
    }
    /* Why the inputs are not one source (a file of another kind among them,
     * a sidecar index): said instead of blaming a file that reads alone. */
    char why[SL__ERRMSG_MAX] = "";
    if (found < 0)
        snprintf(why, sizeof why, "%s", sl_errmsg());
    int dirs = 0, idx_img = 0, idx_lab = 0;
    for (int i = 0; i < nsrc; i++) {
        sl_io_info st;
        if (!srcs[i])
            return sl__error(SL_EINVAL, "input %d is NULL", i);
        int src = sl_io__stat(srcs[i], &st);
        if (src == SL_END)
            return sl__error(SL_EIO, "%s: %s", srcs[i], sl_io__missing(srcs[i]));
        SL_TRY(src);
        if (st.is_dir) {
            dirs++;
            continue;
        }
        sl_source__sniff_kind k;
        SL_TRY(sl_source__sniff_path(srcs[i], &k));
        if (k == SL_SNIFF_IDX_IMAGES)
            idx_img++;
        else if (k == SL_SNIFF_IDX_LABELS)
            idx_lab++;
        else if (why[0] && (strstr(why, "a sidecar index") ||
                            sl_source__detect(&srcs[i], 1, &fmt) == SL_OK))
            return sl__error(found, "%s", why);
        else if (st.size == 0)
            return sl__error(SL_EUNSUPPORTED, "%s: empty file; " KINDS_KNOWN, srcs[i]);
        else
            return sl__error(SL_EUNSUPPORTED, "%s: not a kind of input sluice knows; " KINDS_KNOWN,
                             srcs[i]);
    }
    if (dirs == 1 && nsrc == 1) {
        *kind_out = SL_PACK_IMAGEFOLDER;
        return SL_OK;
    }
    if (dirs)
        return sl__error(SL_EUNSUPPORTED,
                         "%d inputs with a directory among them; " KINDS_KNOWN, nsrc);
    if (nsrc == 2 && idx_img == 1 && idx_lab == 1) {
        *kind_out = SL_PACK_IDX;
        return SL_OK;
    }
    if (nsrc == 1)
        return sl__error(SL_EINVAL, "%s: an IDX %s file alone; give the %s file too", srcs[0],
                         idx_img ? "images" : "labels", idx_img ? "labels" : "images");
    return sl__error(SL_EINVAL,
                     "%d IDX files (%d images, %d labels); IDX packing takes exactly one images "
                     "file and one labels file",
                     nsrc, idx_img, idx_lab);
}

/* Copy the caller's options into `o`, whatever version of the struct it
 * was built with, and check them. */
static int pack_options(const sl_pack_options *opts, const char *dst, sl_pack_options *o) {
    sl_pack_options d = SL_PACK_OPTIONS_INIT;
    *o = d;
    /* A caller built against an older header passes a shorter struct: copy
     * only the fields its version has, the rest keep their defaults. */
    if (opts && opts->version == 1)
        memcpy(o, opts, offsetof(sl_pack_options, check));
    else if (opts && opts->version == 2)
        memcpy(o, opts, offsetof(sl_pack_options, jpeg_restart));
    else if (opts && opts->version == SL_PACK_OPTIONS_VERSION)
        *o = *opts;
    else if (opts)
        return sl__error(SL_EUNSUPPORTED,
                         "sl_pack: options version %u is not 1..%u (initialise with "
                         "SL_PACK_OPTIONS_INIT)",
                         opts->version, SL_PACK_OPTIONS_VERSION);
    o->version = SL_PACK_OPTIONS_VERSION;
    if (o->check != SL_PACK_CHECK_HEADER && o->check != SL_PACK_CHECK_DECODE)
        return sl__error(SL_EINVAL, "sl_pack: check is %d (0 = header, 1 = decode)", o->check);
    if (o->jpeg_restart != SL_JPEG_RESTART_OFF && o->jpeg_restart != SL_JPEG_RESTART_AUTO &&
        o->jpeg_restart != SL_JPEG_RESTART_ROWS)
        return sl__error(SL_EINVAL, "sl_pack: jpeg_restart is %d (0 = off, 1 = auto, 2 = rows)",
                         o->jpeg_restart);
    if (!dst || !*dst)
        return sl__error(SL_EINVAL, "sl_pack: no output path");
    if (o->jobs < 0)
        return sl__error(SL_EINVAL, "sl_pack: jobs is %d (0 = all cores)", o->jobs);
    return SL_OK;
}

int sl_pack(const char *const *srcs, int nsrc, const char *dst, const sl_pack_options *opts,
            sl_pack_report *report) {
    sl_pack_options o;
    sl_pack_report local;
    sl_pack_report *rep = report ? report : &local;
    memset(rep, 0, sizeof *rep);
    SL_TRY(pack_options(opts, dst, &o));
    sl_pack_kind kind;
    SL_TRY(sl_pack_detect(srcs, nsrc, &kind));
    rep->kind = kind;
    if (kind == SL_PACK_IMAGEFOLDER)
        return sl_source__pack_imagefolder(srcs[0], dst, &o, rep);
    if (kind == SL_PACK_IDX)
        return sl_source__pack_idx(srcs[0], srcs[1], dst, &o, rep);
    sl_source *src;
    SL_TRY(sl_source_open_paths(&src, srcs, nsrc, NULL));
    int rc = sl_source__pack(src, dst, &o, rep);
    sl_source_free(src);
    return rc;
}

int sl_pack_source(sl_source *src, const char *dst, const sl_pack_options *opts,
                   sl_pack_report *report) {
    sl_pack_options o;
    sl_pack_report local;
    sl_pack_report *rep = report ? report : &local;
    memset(rep, 0, sizeof *rep);
    if (!src)
        return sl__error(SL_EINVAL, "sl_pack_source: source is NULL");
    SL_TRY(pack_options(opts, dst, &o));
    rep->kind = SL_PACK_SOURCE;
    return sl_source__pack(src, dst, &o, rep);
}

/* ---- any source into .slr --------------------------------------------------------- */

/* The .slr column type a source column is stored as: the same type, a 0-d
 * array keeping its dtype (a TFRecord float32 scalar stays float32). */
static int slr_column(const sl_source *src, int c, sl_schema *schema) {
    const sl_source_col *col = &src->col[c];
    sl_coltype t = col->type;
    if (t == SL_COL_ARRAY && (col->dtype == SL_DTYPE_INVALID || col->ndim < 0))
        return sl__error(SL_EUNSUPPORTED, "%s: column '%s' has no fixed dtype and rank; "
                         "it cannot be stored in .slr", src->name, col->name);
    if (t != SL_COL_ARRAY)
        return sl_schema_add(schema, col->name, t, SL_DTYPE_INVALID, 0, NULL, 0);
    return sl_schema_add(schema, col->name, t, col->dtype, col->ndim, col->shape, 0);
}

int sl_source__check_sample(sl_source *src, sl_source__checker *chk, uint64_t i,
                            const sl_sample *smp, int *images_out) {
    uint32_t cols = 0;
    for (int c = 0; c < src->ncols; c++)
        if (src->col[c].image)
            cols |= 1u << c;
    return sl_source__check_cols(src, chk, i, smp, cols, images_out);
}

int sl_source__check_cols(sl_source *src, sl_source__checker *chk, uint64_t i,
                          const sl_sample *smp, uint32_t cols, int *images_out) {
    int images = 0;
    for (int c = 0; c < src->ncols && c < (int)smp->ncols; c++) {
        if (!(cols >> c & 1u))
            continue;
        int rc = sl_source__check_image(chk, smp->col[c].data, smp->col[c].nbytes);
        if (rc < 0) {
            char where[SL__ERRMSG_MAX / 2];
            sl_source__where(src, i, smp, where, sizeof where);
            return sl__error_prefix(rc, "%s: column '%s'", where, src->col[c].name);
        }
        images++;
    }
    if (images_out)
        *images_out = images;
    return SL_OK;
}

int sl_source__pack(sl_source *src, const char *dst, const sl_pack_options *opts,
                    sl_pack_report *rep) {
    int rc = SL_OK;
    sl_schema *schema = NULL;
    sl_writer *w = NULL;
    sl_source_cursor *cur = NULL;
    sl_source__checker chk;
    int chk_init = 0;
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    SL_CHECK(sl_schema_create(&schema));
    for (int c = 0; c < src->ncols; c++)
        SL_CHECK(slr_column(src, c, schema));
    sl_writer_options wo = SL_WRITER_OPTIONS_INIT;
    wo.shard_bytes = opts->shard_bytes;
    SL_CHECK(sl_writer_open(&w, dst, schema, &wo));
    for (const cJSON *m = src->meta ? src->meta->child : NULL; m; m = m->next) {
        if (!strcmp(m->string, "source"))
            continue; /* set below: what this pack read */
        char *text = cJSON_IsString(m) ? NULL : cJSON_PrintUnformatted(m);
        if (!cJSON_IsString(m) && !text)
            SL_FAIL(SL_ENOMEM, "%s: out of memory storing metadata", src->name);
        rc = sl_writer_set_meta(w, m->string, text ? text : m->valuestring);
        cJSON_free(text);
        SL_CHECK(rc);
    }
    SL_CHECK(sl_writer_set_meta(w, "source", src->kind));
    SL_CHECK(sl_source__cursor_open(src, NULL, NULL, &cur));
    chk_init = 1;
    SL_CHECK(sl_source__checker_init(&chk, opts->check));
    chk.restart = opts->jpeg_restart;
    for (uint64_t i = 0; i < src->count; i++) {
        char where[512];
        rc = sl_source__read(src, cur, i, &smp);
        if (rc == SL_OK)
            rc = sl_source__check_sample(src, &chk, i, &smp, NULL);
        for (int c = 0; rc == SL_OK && c < src->ncols; c++) {
            /* Any column that may hold encoded images (a .slr's bytes too, so
             * that a repack can add restart intervals) is re-encoded where it
             * is a JPEG. */
            if (!src->col[c].encoded)
                continue;
            sl_tensor enc;
            int changed = 0;
            rc = sl_source__reencode(&chk, smp.col[c].data, smp.col[c].nbytes, &enc, &changed);
            if (changed) {
                /* the sample owns its columns: the new bytes replace the old */
                sl_tensor_release(&smp.col[c]);
                smp.col[c] = enc;
            }
            if (rc < 0) {
                sl_source__locate(src, i, where, sizeof where);
                sl__error_prefix(rc, "%s: column '%s'", where, src->col[c].name);
            }
        }
        if (rc < 0) {
            sl_sample_clear(&smp);
            if (!opts->skip_bad || rc == SL_ENOMEM)
                goto cleanup;
            rep->skipped++;
            sl_source__report_bad(rep, sl_errmsg());
            rc = SL_OK;
            continue;
        }
        for (int c = 0; c < src->ncols; c++)
            rep->bytes += smp.col[c].nbytes;
        rc = sl_writer_append(w, smp.col, src->ncols);
        sl_sample_clear(&smp);
        SL_CHECK(rc);
        rep->records++;
        if (opts->progress)
            opts->progress(rep->records + rep->skipped, src->count, rep->bytes, opts->user);
    }
    SL_CHECK(sl_writer_close(w));
cleanup:
    if (rc < 0)
        rep->records = 0;
    if (chk_init)
        sl_source__checker_dispose(&chk);
    sl_source__cursor_free(src, cur);
    sl_writer_free(w);
    sl_schema_free(schema);
    return rc;
}
