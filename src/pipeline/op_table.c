/*
 * op_table.c — the registry of per-sample ops, by JSON name.
 *
 * To register an op defined elsewhere as `const sl_op_def sl_op_NAME`, add one
 * line `X(sl_op_NAME)` to SL_OP_TABLE below; the macro declares it and lists
 * it. Structural ops (batch, prefetch, shuffle_buffer, take, skip, repeat,
 * map with a C function) are part of the engine, not entries here.
 */
#include "pipeline/op.h"

#include <string.h>

#define SL_OP_TABLE(X)         \
    X(sl_op_filter)            \
    X(sl_op_select)            \
    /* image ops (src/pipeline/image_ops.c) follow */ \
    X(sl_op_decode)            \
    X(sl_op_random_resized_crop) \
    X(sl_op_flip)              \
    X(sl_op_normalize)         \
    X(sl_op_resize)            \
    X(sl_op_center_crop)       \
    X(sl_op_rotate)            \
    X(sl_op_cast)              \
    X(sl_op_one_hot)

#define SL_OP_DECLARE(def) extern const sl_op_def def;
SL_OP_TABLE(SL_OP_DECLARE)
#undef SL_OP_DECLARE

#define SL_OP_REF(def) &def,
static const sl_op_def *const table[] = {SL_OP_TABLE(SL_OP_REF) NULL};
#undef SL_OP_REF

const sl_op_def *sl_op_lookup(const char *name) {
    for (int i = 0; table[i]; i++)
        if (strcmp(table[i]->name, name) == 0)
            return table[i];
    return NULL;
}

const sl_op_def *sl_op_at(int i) {
    if (i < 0 || i >= (int)(sizeof table / sizeof table[0]) - 1)
        return NULL;
    return table[i];
}
