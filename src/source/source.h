/*
 * source.h — internals of the source layer shared by its files: input kind
 * sniffing, image content checks (through the ops decoder), the two packers. Never installed.
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

/* Per-thread state for checking images: the decode op's own decoder (the
 * ops layer, through sluice.h; see docs/ARCHITECTURE.md for why source may
 * call ops) and, for a full decode, a pixel buffer reused across files. */
typedef struct {
    int mode;          /* sl_pack_check */
    sl_decoder *dec;
    uint8_t *pix;
    size_t cap;
} sl_source__checker;

/* Make a checker for `mode` (SL_PACK_CHECK_HEADER or _DECODE). On failure
 * the caller still calls sl_source__checker_dispose. */
int sl_source__checker_init(sl_source__checker *c, int mode);
void sl_source__checker_dispose(sl_source__checker *c);

/* Check that `data` is an image the decode op can read, by its content:
 * JPEG, PNG or still WebP whose header (or, in decode mode, every pixel)
 * decodes. BMP, PPM/PGM, TIFF, GIF are named and refused. Returns SL_OK, or
 * SL_EDECODE / SL_ELIMIT / SL_EUNSUPPORTED / SL_ENOMEM with a message giving
 * the cause (not the path: the caller prefixes it). */
int sl_source__check_image(sl_source__checker *c, const uint8_t *data, size_t n);

/* Record what a skipped input was in the report (first few only). */
void sl_source__report_bad(sl_pack_report *rep, const char *line);

/* The packers; `opts` is never NULL here and `rep` is zeroed by the caller. */
int sl_source__pack_imagefolder(const char *root, const char *dst,
                                const sl_pack_options *opts, sl_pack_report *rep);
int sl_source__pack_idx(const char *a, const char *b, const char *dst,
                        const sl_pack_options *opts, sl_pack_report *rep);

#endif /* SL_SOURCE_H */
