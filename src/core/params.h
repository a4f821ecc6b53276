/*
 * params.h — one parameter table per JSON object: each key's type, whether
 * it is required, its bounds, its default and a line of documentation, read
 * by one call that checks an object against the table and fills a struct.
 *
 * A table is a const array of sl_param ending at a NULL key, wrapped in an
 * sl_param_table that says how its messages read. sl_params_read():
 *   1. every key of the object must be in the table (unless the table is
 *      open): "FIELD.KEY: unknown key for WHAT (keys: closest first, ...)",
 *      and a table's key may be given once ("FIELD.KEY: given twice");
 *   2. every entry, in table order: a missing required key is
 *      "FIELD.KEY: missing"; a value of the wrong type or out of bounds is
 *      "FIELD.KEY: must be ..." naming the allowed range (and "(got V)" for a
 *      number out of range); a valid value, or the default when the key is
 *      absent, is written at the entry's offset in the caller's struct.
 * Tables share entries through SL_PARAM_INCLUDE (a fragment, at an offset).
 * Messages are formatted on the stack; reading never allocates.
 *
 * What each type writes at its offset:
 *   BOOL    int (1/0; with SL_PARAM_OR_AUTO the string "auto" gives -1)
 *   INT     int, INT64 int64_t, UINT64 uint64_t: whole numbers (within 2^53;
 *           with SL_PARAM_OR_AUTO "auto" gives -1)
 *   DOUBLE  double (finite)
 *   BYTES   uint64_t: a whole number of bytes, or a string "512M" (K, M, G, T:
 *           powers of 1024; an optional trailing "B" or "iB")
 *   STRING  const char * (borrowed from the JSON; bounds are its length)
 *   ENUM    int: the index of the value in `names`
 *   ARRAY, OBJECT, ANY   const cJSON * (NULL when absent; the caller reads
 *           the insides; an ARRAY's bounds are its length)
 * Bounds: `min`, `max` as doubles; max < min means no upper bound; both 0
 * means none at all.
 */
#ifndef SLUICE_CORE_PARAMS_H
#define SLUICE_CORE_PARAMS_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;

typedef enum sl_param_type {
    SL_PARAM_BOOL,
    SL_PARAM_INT,
    SL_PARAM_INT64,
    SL_PARAM_UINT64,
    SL_PARAM_DOUBLE,
    SL_PARAM_BYTES,
    SL_PARAM_STRING,
    SL_PARAM_ENUM,
    SL_PARAM_ARRAY,
    SL_PARAM_OBJECT,
    SL_PARAM_ANY,
    SL_PARAM_INCLUDE /* the entries of `fragment`, their offsets + this one's */
} sl_param_type;

enum {
    SL_PARAM_REQUIRED = 1u << 0, /* absent: "FIELD.KEY: missing" */
    SL_PARAM_OR_AUTO = 1u << 1,  /* BOOL, INT, INT64: the string "auto" too (-1) */
    SL_PARAM_HIDDEN = 1u << 2,   /* accepted, but not listed after an unknown key */
    SL_PARAM_UNSET = 1u << 3     /* absent is "not set" (the doc says what then): no
                                    default is listed, though 0 is written */
};

/* Where nothing is written: the key is only checked (or read elsewhere). */
#define SL_PARAM_NOWHERE ((size_t)-1)

typedef struct sl_param {
    const char *key;
    sl_param_type type;
    unsigned flags;
    double min, max;               /* bounds (see above) */
    double def;                    /* default of a number, BOOL (0/1), ENUM (index) */
    const char *def_str;           /* default of a STRING */
    const char *const *names;      /* ENUM: the values, NULL-terminated */
    size_t offset;                 /* where the value goes, or SL_PARAM_NOWHERE */
    const struct sl_param *fragment; /* INCLUDE */
    const char *doc;               /* one line for users */
    const char *expect;            /* replaces the generated "must be ..." text */
} sl_param;

enum {
    SL_PARAMS_OPEN = 1u << 0,   /* keys not in the table are left to the caller */
    SL_PARAMS_QUOTED = 1u << 1  /* messages read `FIELD: "KEY" must be ...` (files) */
};

typedef struct sl_param_table {
    const sl_param *params; /* ends at a NULL key */
    const char *what;       /* "a tfrecord source": "unknown key for a tfrecord source" */
    const char *noun;       /* "key" (NULL) or "parameter": "(parameters: ...)" */
    int code;               /* the status of a bad value; 0: SL_EINVAL */
    unsigned flags;         /* SL_PARAMS_* */
} sl_param_table;

/* Check `obj` (a JSON object) against `t` and fill `out` (see above).
 * `field` names the object in messages ("source", "ops[2]"; "" at the top).
 * Returns SL_OK or the table's code with a message. */
int sl_params_read(const sl_param_table *t, const struct cJSON *obj, const char *field,
                   void *out);
/* Write every entry's default into `out` (what sl_params_read writes for
 * an empty object). */
void sl_params_defaults(const sl_param_table *t, void *out);
/* Read one entry: the value of `p->key` in `obj` (or its default) into
 * `dst` (the entry's own storage, not a struct base). */
int sl_param_read(const sl_param_table *t, const sl_param *p, const struct cJSON *obj,
                  const char *field, void *dst);
/* The same for a value already looked up (`v` NULL: the key is absent). */
int sl_param_value(const sl_param_table *t, const sl_param *p, const struct cJSON *v,
                   const char *field, void *dst);
/* The same for a value written as text (an environment variable): INT,
 * INT64, UINT64 (decimal), BYTES ("512M"), ENUM (one of `names`, in any
 * case) and STRING
 * entries. A bad value is `KEY: must be ... (got "TEXT")`, the message a bad
 * JSON value gets; with `t` NULL it is only SL_EINVAL, no message set. */
int sl_param_text(const sl_param_table *t, const sl_param *p, const char *text,
                  const char *field, void *dst);
/* The message of every bad value: "KEY: must be EXPECTED" (the allowed
 * values in words), then " (got GOT)" unless `got` is NULL; returns the
 * table's code. */
int sl_param_must(const sl_param_table *t, const sl_param *p, const char *field,
                  const char *got);
/* The allowed values in words ("a whole number from 1 to 100"): the text
 * after "must be", in buf or the entry's own `expect`. */
const char *sl_param_expected(const sl_param *p, char *buf, size_t cap);
/* The entry for `key` (fragments included), or NULL. */
const sl_param *sl_params_find(const sl_param_table *t, const char *key);
/* The table's listed keys, closest to `want` first, as "a, b, c" in buf. */
const char *sl_params_names(const sl_param_table *t, const char *want, char *buf, size_t cap);
/* "FIELD.KEY: unknown key for WHAT (keys: ...)" with t's keys and any
 * `more` (NULL-terminated, may be NULL) listed after them. */
int sl_params_unknown(const sl_param_table *t, const char *field, const char *key,
                      const char *const *more);
/* The listed entries of a table, fragments included, in order: the i-th in
 * *out (NULL past the end); returns how many there are. */
int sl_params_nth(const sl_param_table *t, int i, const sl_param **out);
/* An entry's type in words: bool, int, uint64, number, bytes, string, enum,
 * list, object, any. */
const char *sl_param_type_name(const sl_param *p);
/* An entry's default as the spec writes it ("1", "true", "\"fail\""), in
 * buf; "" for a required key or one whose default is "not set". */
const char *sl_param_default(const sl_param *p, char *buf, size_t cap);
/* The table as documentation, one line per listed key:
 * "  KEY  TYPE[, required][, default D][, RANGE]  DOC\n". Cut at cap. */
size_t sl_params_doc(const sl_param_table *t, char *buf, size_t cap);

#endif
