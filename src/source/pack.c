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
    default: return "unknown";
    }
}

void sl_source__report_bad(sl_pack_report *rep, const char *line) {
    if (rep->nbad < SL_PACK_REPORT_BAD)
        snprintf(rep->bad[rep->nbad++], SL_PACK_REPORT_LINE, "%s", line);
}

#define KINDS_KNOWN \
    "sluice packs one directory (an ImageFolder: ROOT/CLASS/IMAGE) or an IDX images " \
    "file and an IDX labels file (plain or .gz)"

int sl_pack_detect(const char *const *srcs, int nsrc, sl_pack_kind *kind_out) {
    if (!kind_out)
        return sl__error(SL_EINVAL, "sl_pack_detect: kind_out is NULL");
    *kind_out = SL_PACK_UNKNOWN;
    if (!srcs || nsrc <= 0)
        return sl__error(SL_EINVAL, "no input given; " KINDS_KNOWN);
    int dirs = 0, idx_img = 0, idx_lab = 0;
    for (int i = 0; i < nsrc; i++) {
        struct stat st;
        if (!srcs[i])
            return sl__error(SL_EINVAL, "input %d is NULL", i);
        if (stat(srcs[i], &st) != 0)
            return sl__error(SL_EIO, "%s: %s", srcs[i], strerror(errno));
        if (S_ISDIR(st.st_mode)) {
            dirs++;
            continue;
        }
        sl_source__sniff_kind k;
        SL_TRY(sl_source__sniff_path(srcs[i], &k));
        if (k == SL_SNIFF_IDX_IMAGES)
            idx_img++;
        else if (k == SL_SNIFF_IDX_LABELS)
            idx_lab++;
        else if (st.st_size == 0)
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

int sl_pack(const char *const *srcs, int nsrc, const char *dst, const sl_pack_options *opts,
            sl_pack_report *report) {
    sl_pack_options o = SL_PACK_OPTIONS_INIT;
    sl_pack_report local;
    sl_pack_report *rep = report ? report : &local;
    memset(rep, 0, sizeof *rep);
    /* A caller built against an older header passes a shorter struct: copy
     * only the fields its version has, the rest keep their defaults. */
    if (opts && opts->version == 1)
        memcpy(&o, opts, offsetof(sl_pack_options, check));
    else if (opts && opts->version == SL_PACK_OPTIONS_VERSION)
        o = *opts;
    else if (opts)
        return sl__error(SL_EUNSUPPORTED,
                         "sl_pack: options version %u is not 1..%u (initialise with "
                         "SL_PACK_OPTIONS_INIT)",
                         opts->version, SL_PACK_OPTIONS_VERSION);
    o.version = SL_PACK_OPTIONS_VERSION;
    opts = &o;
    if (opts->check != SL_PACK_CHECK_HEADER && opts->check != SL_PACK_CHECK_DECODE)
        return sl__error(SL_EINVAL, "sl_pack: check is %d (0 = header, 1 = decode)",
                         opts->check);
    if (!dst || !*dst)
        return sl__error(SL_EINVAL, "sl_pack: no output path");
    if (opts->jobs < 0)
        return sl__error(SL_EINVAL, "sl_pack: jobs is %d (0 = all cores)", opts->jobs);
    sl_pack_kind kind;
    SL_TRY(sl_pack_detect(srcs, nsrc, &kind));
    rep->kind = kind;
    if (kind == SL_PACK_IMAGEFOLDER)
        return sl_source__pack_imagefolder(srcs[0], dst, opts, rep);
    return sl_source__pack_idx(srcs[0], srcs[1], dst, opts, rep);
}
