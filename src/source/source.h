/*
 * source.h — internals of the source layer shared by its files: input kind
 * sniffing, image content checks, the two packers. Never installed.
 */
#ifndef SL_SOURCE_H
#define SL_SOURCE_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

/* What the first bytes of a file say it is. */
typedef enum {
    SL_SNIFF_OTHER = 0,
    SL_SNIFF_IDX_IMAGES,   /* IDX with 2+ dims */
    SL_SNIFF_IDX_LABELS,   /* IDX with 1 dim */
    SL_SNIFF_GZIP          /* gzip: look inside with sl_source__sniff_path */
} sl_source__sniff_kind;

/* Classify a file by content (gzip is opened and its first bytes read).
 * `*kind_out` is SL_SNIFF_OTHER for anything that is neither IDX kind.
 * Returns SL_OK, or SL_EIO / SL_ENOMEM with a message naming `path`. */
int sl_source__sniff_path(const char *path, sl_source__sniff_kind *kind_out);

/* Check that `data` holds an image by its content (JPEG header via
 * TurboJPEG, PNG signature + IHDR, BMP/PPM/PGM/TIFF/WebP by magic).
 * `tj` is a TurboJPEG decompressor owned by the calling thread (NULL makes
 * one for this call). Returns SL_OK, or SL_EDECODE with a message giving the
 * cause (not the path: the caller prefixes it). */
int sl_source__check_image(void *tj, const uint8_t *data, size_t n);

/* Record what a skipped input was in the report (first few only). */
void sl_source__report_bad(sl_pack_report *rep, const char *line);

/* The packers; `opts` is never NULL here and `rep` is zeroed by the caller. */
int sl_source__pack_imagefolder(const char *root, const char *dst,
                                const sl_pack_options *opts, sl_pack_report *rep);
int sl_source__pack_idx(const char *a, const char *b, const char *dst,
                        const sl_pack_options *opts, sl_pack_report *rep);

#endif /* SL_SOURCE_H */
