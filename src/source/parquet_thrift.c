/*
 * parquet_thrift.c — Parquet's FileMetaData and PageHeader from the Thrift
 * compact protocol (parquet_format.h). Hand-written rather than generated:
 * Debian packages no Thrift C runtime that reads untrusted bytes with bounds
 * and sluice's allocator, and the part of the protocol Parquet uses is
 * small (the wire format, as Apache Thrift's compact protocol specification
 * gives it):
 *
 *   field header  one byte: field id delta (high nibble, 1..15; 0: a zigzag
 *                 varint i16 id follows) and the type (low nibble);
 *                 0 ends a struct
 *   types         1/2 bool true/false (the value is the type), 3 i8 (a byte),
 *                 4 i16, 5 i32, 6 i64 (zigzag varints), 7 double (8 bytes LE),
 *                 8 binary (varint length, bytes), 9 list, 10 set (a byte:
 *                 size (high nibble; 15: a varint follows) and element type),
 *                 11 map (varint size; when not 0, a byte: key and value
 *                 types), 12 struct (fields until 0)
 *
 * Invariants:
 *  1. Every read checks the bytes left first; a failure is sticky (tr.bad)
 *     and every later read returns zeros, so a parser never branches on
 *     garbage and the first failure is what the message says.
 *  2. Nesting is bounded (PQ_MAX_DEPTH) for structs, lists and skipped
 *     values alike: no recursion the input can deepen without bound.
 *  3. A list's element count is checked against the bytes left (every
 *     element takes at least one byte) before anything is allocated for it.
 */
#include "source/parquet_format.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

enum {
    T_STOP = 0, T_TRUE = 1, T_FALSE = 2, T_I8 = 3, T_I16 = 4, T_I32 = 5, T_I64 = 6,
    T_DOUBLE = 7, T_BINARY = 8, T_LIST = 9, T_SET = 10, T_MAP = 11, T_STRUCT = 12
};

typedef struct tr {
    const uint8_t *p, *end;
    int depth;
    int bad;               /* sticky: the message is set */
    const char *name;      /* "FILE: footer", "page header": for messages */
    char where[96];        /* the field being read, for messages */
} tr;

static int tr_fail(tr *t, const char *what) {
    if (!t->bad)
        sl__error(SL_ECORRUPT, "%s: %s%s%s", t->name, t->where, t->where[0] ? ": " : "", what);
    t->bad = 1;
    t->p = t->end;
    return SL_ECORRUPT;
}

static uint64_t tr_uvar(tr *t) {
    uint64_t v;
    if (t->bad)
        return 0;
    if (pq_uvarint(&t->p, t->end, &v) < 0) {
        tr_fail(t, "a varint runs past the end of the bytes or over 10 bytes");
        return 0;
    }
    return v;
}

static int64_t tr_zz(tr *t) {
    uint64_t v = tr_uvar(t);
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static uint8_t tr_byte(tr *t) {
    if (t->bad || t->p >= t->end) {
        tr_fail(t, "cut short");
        return 0;
    }
    return *t->p++;
}

/* The value of an integer field of any integer type (bool: 1/0). */
static int64_t tr_int(tr *t, int type) {
    switch (type) {
    case T_TRUE:
        return 1;
    case T_FALSE:
        return 0;
    case T_I8:
        return (int8_t)tr_byte(t);
    case T_I16:
    case T_I32:
    case T_I64:
        return tr_zz(t);
    default:
        tr_fail(t, "an integer field of another type");
        return 0;
    }
}

static int32_t tr_i32(tr *t, int type) {
    int64_t v = tr_int(t, type);
    if (v < INT32_MIN || v > INT32_MAX) {
        tr_fail(t, "an i32 out of range");
        return 0;
    }
    return (int32_t)v;
}

static pq_bytes tr_binary(tr *t, int type) {
    pq_bytes b = {NULL, 0};
    if (type != T_BINARY) {
        tr_fail(t, "a binary field of another type");
        return b;
    }
    uint64_t n = tr_uvar(t);
    if (t->bad)
        return b;
    if (n > (uint64_t)(t->end - t->p) || n > UINT32_MAX) {
        tr_fail(t, "a binary field runs past the end of the bytes");
        return b;
    }
    b.p = t->p;
    b.n = (uint32_t)n;
    t->p += n;
    return b;
}

/* A list or set header: element type and count (checked against the bytes
 * left: invariant 3). */
static uint64_t tr_list(tr *t, int type, int *elem) {
    *elem = 0;
    if (type != T_LIST && type != T_SET) {
        tr_fail(t, "a list field of another type");
        return 0;
    }
    uint8_t h = tr_byte(t);
    uint64_t n = h >> 4;
    *elem = h & 0x0f;
    if (n == 15)
        n = tr_uvar(t);
    if (!t->bad && n > (uint64_t)(t->end - t->p))
        tr_fail(t, "a list longer than the bytes left");
    return t->bad ? 0 : n;
}

/* Next field of the struct being read: 1 and *type / *id, or 0 at its end
 * (or after a failure). `*last` is the previous field id (0 at the start). */
static int tr_field(tr *t, int16_t *last, int *type, int16_t *id) {
    uint8_t h = tr_byte(t);
    if (t->bad || h == T_STOP)
        return 0;
    *type = h & 0x0f;
    int d = h >> 4;
    if (d)
        *id = (int16_t)(*last + d);
    else
        *id = (int16_t)tr_zz(t);
    *last = *id;
    if (*type == 0 || *type > T_STRUCT) {
        tr_fail(t, "a field of unknown type");
        return 0;
    }
    return !t->bad;
}

static int tr_enter(tr *t) {
    if (++t->depth > PQ_MAX_DEPTH) {
        tr_fail(t, "nested deeper than 32 levels");
        return 0;
    }
    return 1;
}

static void tr_skip(tr *t, int type);

static void tr_skip_struct(tr *t) {
    if (!tr_enter(t))
        return;
    int16_t last = 0, id;
    int type;
    while (tr_field(t, &last, &type, &id))
        tr_skip(t, type);
    t->depth--;
}

/* Skip a value of `type` (invariant 2: bounded depth). */
static void tr_skip(tr *t, int type) {
    switch (type) {
    case T_TRUE:
    case T_FALSE:
        return;
    case T_I8:
        tr_byte(t);
        return;
    case T_I16:
    case T_I32:
    case T_I64:
        tr_uvar(t);
        return;
    case T_DOUBLE:
        if ((size_t)(t->end - t->p) < 8)
            tr_fail(t, "cut short");
        else
            t->p += 8;
        return;
    case T_BINARY:
        tr_binary(t, T_BINARY);
        return;
    case T_LIST:
    case T_SET: {
        int elem;
        uint64_t n = tr_list(t, type, &elem);
        if (!tr_enter(t))
            return;
        for (uint64_t i = 0; i < n && !t->bad; i++) {
            if (elem == T_TRUE || elem == T_FALSE)
                tr_byte(t); /* a bool in a list is a byte */
            else
                tr_skip(t, elem);
        }
        t->depth--;
        return;
    }
    case T_MAP: {
        uint64_t n = tr_uvar(t);
        if (t->bad || n == 0)
            return;
        if (n > (uint64_t)(t->end - t->p)) {
            tr_fail(t, "a map longer than the bytes left");
            return;
        }
        uint8_t kv = tr_byte(t);
        if (!tr_enter(t))
            return;
        for (uint64_t i = 0; i < n && !t->bad; i++) {
            tr_skip(t, kv >> 4);
            tr_skip(t, kv & 0x0f);
        }
        t->depth--;
        return;
    }
    case T_STRUCT:
        tr_skip_struct(t);
        return;
    default:
        tr_fail(t, "a value of unknown type");
    }
}

static void tr_where(tr *t, const char *fmt, ...) SL_PRINTF(2, 3);
static void tr_where(tr *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->where, sizeof t->where, fmt, ap);
    va_end(ap);
}

/* ---- structures ------------------------------------------------------------------ */

/* A struct's plain fields, read by one loop from a table: field id, kind,
 * where the value goes in the C struct, where a flag saying it was present
 * goes (NOWHERE: none) and the bit it sets in the returned `seen` mask. */
enum { F_I32, F_I64, F_BIN };
#define NOWHERE ((size_t)-1)
typedef struct fdesc {
    int16_t id;
    uint8_t kind;
    unsigned bit;
    size_t off, has;
} fdesc;

/* Fields not in the table: a struct the caller parses itself, or skipped. */
typedef void (*tr_other_fn)(tr *t, int16_t id, int type, void *base);

static unsigned tr_fields(tr *t, const fdesc *fd, int nfd, void *base, tr_other_fn other) {
    unsigned seen = 0;
    if (!tr_enter(t))
        return 0;
    int16_t last = 0, id;
    int type;
    while (tr_field(t, &last, &type, &id)) {
        const fdesc *f = NULL;
        for (int k = 0; k < nfd && !f; k++)
            if (fd[k].id == id)
                f = &fd[k];
        if (!f) {
            if (other)
                other(t, id, type, base);
            else
                tr_skip(t, type);
            continue;
        }
        char *at = (char *)base + f->off;
        if (f->kind == F_I32) {
            int32_t v = tr_i32(t, type);
            memcpy(at, &v, sizeof v);
        } else if (f->kind == F_I64) {
            int64_t v = tr_int(t, type);
            memcpy(at, &v, sizeof v);
        } else {
            pq_bytes v = tr_binary(t, type);
            memcpy(at, &v, sizeof v);
        }
        if (f->has != NOWHERE)
            *(int *)(void *)((char *)base + f->has) = 1;
        seen |= f->bit;
    }
    t->depth--;
    return seen;
}

#define FD(id, kind, bit, type, field, has) {id, kind, bit, offsetof(type, field), has}

/* Statistics; the deprecated min / max (fields 2, 1) are kept apart and
 * used only when min_value / max_value are absent: integers, which is all
 * filters read them for, order the same either way. */
typedef struct stats_wire {
    pq_stats s;
    pq_bytes old_min, old_max;
    int has_old_min, has_old_max;
} stats_wire;

static const fdesc stats_fields[] = {
    FD(1, F_BIN, 0, stats_wire, old_max, offsetof(stats_wire, has_old_max)),
    FD(2, F_BIN, 0, stats_wire, old_min, offsetof(stats_wire, has_old_min)),
    FD(3, F_I64, 0, stats_wire, s.null_count, offsetof(stats_wire, s.has_nulls)),
    FD(5, F_BIN, 0, stats_wire, s.max, offsetof(stats_wire, s.has_max)),
    FD(6, F_BIN, 0, stats_wire, s.min, offsetof(stats_wire, s.has_min)),
};

static void parse_stats(tr *t, pq_stats *out) {
    stats_wire w;
    memset(&w, 0, sizeof w);
    tr_fields(t, stats_fields, 5, &w, NULL);
    if (!w.s.has_min && w.has_old_min) {
        w.s.min = w.old_min;
        w.s.has_min = 1;
    }
    if (!w.s.has_max && w.has_old_max) {
        w.s.max = w.old_max;
        w.s.has_max = 1;
    }
    *out = w.s;
}

/* TimeUnit: a union of empty structs MILLIS (1), MICROS (2), NANOS (3). */
static void time_unit(tr *t, int16_t id, int type, void *base) {
    if (type == T_STRUCT)
        ((pq_schema_el *)base)->ts_unit = id;
    tr_skip(t, type);
}

/* A LogicalType member's own fields (IntType's bitWidth and isSigned,
 * TimestampType's unit, DecimalType's scale and precision); `base` is the
 * schema element. */
static void logical_member(tr *t, int16_t id, int type, void *base) {
    pq_schema_el *e = base;
    if (e->logical == PQ_LT_DECIMAL && id == 1)
        e->scale = tr_i32(t, type);
    else if (e->logical == PQ_LT_DECIMAL && id == 2)
        e->precision = tr_i32(t, type);
    else if (e->logical == PQ_LT_INTEGER && id == 1)
        e->int_bits = (int)tr_int(t, type);
    else if (e->logical == PQ_LT_INTEGER && id == 2)
        e->int_signed = (int)tr_int(t, type);
    else if ((e->logical == PQ_LT_TIMESTAMP || e->logical == PQ_LT_TIME) && id == 2 &&
             type == T_STRUCT)
        tr_fields(t, NULL, 0, e, time_unit);
    else
        tr_skip(t, type);
}

/* LogicalType: a union; the member present is its field id. */
static void logical_type(tr *t, int16_t id, int type, void *base) {
    if (type != T_STRUCT) {
        tr_skip(t, type);
        return;
    }
    ((pq_schema_el *)base)->logical = id;
    tr_fields(t, NULL, 0, base, logical_member);
}

static void schema_logical(tr *t, int16_t id, int type, void *base) {
    if (id == 10 && type == T_STRUCT)
        tr_fields(t, NULL, 0, base, logical_type);
    else
        tr_skip(t, type);
}

static const fdesc schema_fields[] = {
    FD(1, F_I32, 0, pq_schema_el, type, offsetof(pq_schema_el, has_type)),
    FD(2, F_I32, 0, pq_schema_el, type_length, NOWHERE),
    FD(3, F_I32, 0, pq_schema_el, repetition, NOWHERE),
    FD(4, F_BIN, 1, pq_schema_el, name, NOWHERE),
    FD(5, F_I32, 0, pq_schema_el, num_children, NOWHERE),
    FD(6, F_I32, 0, pq_schema_el, converted, NOWHERE),
    FD(7, F_I32, 0, pq_schema_el, scale, NOWHERE),
    FD(8, F_I32, 0, pq_schema_el, precision, NOWHERE),
};

static void parse_schema_el(tr *t, pq_schema_el *e) {
    e->converted = PQ_CT_NONE;
    e->repetition = PQ_REQUIRED;
    unsigned seen = tr_fields(t, schema_fields, 8, e, schema_logical);
    if (!t->bad && !(seen & 1))
        tr_fail(t, "no name");
    if (!t->bad && (e->repetition < 0 || e->repetition > 2))
        tr_fail(t, "repetition_type out of range");
    if (!t->bad && (e->num_children < 0 || (e->has_type && (e->type < 0 || e->type > 7))))
        tr_fail(t, "type or num_children out of range");
    if (!t->bad && (e->scale < 0 || e->precision < 0))
        tr_fail(t, "a negative DECIMAL scale or precision");
}

static void col_meta_other(tr *t, int16_t id, int type, void *base) {
    if (id == 12 && type == T_STRUCT)
        parse_stats(t, &((pq_chunk *)base)->stats);
    else
        tr_skip(t, type);
}

static const fdesc col_meta_fields[] = {
    FD(1, F_I32, 1, pq_chunk, type, NOWHERE),
    FD(4, F_I32, 2, pq_chunk, codec, NOWHERE),
    FD(5, F_I64, 4, pq_chunk, num_values, NOWHERE),
    FD(6, F_I64, 0, pq_chunk, total_uncompressed, NOWHERE),
    FD(7, F_I64, 8, pq_chunk, total_compressed, NOWHERE),
    FD(9, F_I64, 16, pq_chunk, data_page_offset, NOWHERE),
    FD(11, F_I64, 0, pq_chunk, dict_page_offset, NOWHERE),
};

static void parse_col_meta(tr *t, pq_chunk *c) {
    unsigned seen = tr_fields(t, col_meta_fields, 7, c, col_meta_other);
    if (!t->bad && seen != 31)
        tr_fail(t, "meta_data lacks a required field (type, codec, num_values, "
                   "total_compressed_size or data_page_offset)");
    if (!t->bad && (c->num_values < 0 || c->total_compressed < 0 || c->data_page_offset < 0))
        tr_fail(t, "a negative size or offset");
}

static void parse_chunk(tr *t, pq_chunk *c) {
    c->dict_page_offset = -1;
    c->oi_offset = -1;
    if (!tr_enter(t))
        return;
    int16_t last = 0, id;
    int type;
    while (tr_field(t, &last, &type, &id)) {
        if (id == 1) {
            tr_binary(t, type);
            c->external = 1;
        } else if (id == 3 && type == T_STRUCT) {
            parse_col_meta(t, c);
            c->has_meta = 1;
        } else if (id == 4) {
            c->oi_offset = tr_int(t, type);
        } else if (id == 5) {
            c->oi_length = tr_i32(t, type);
        } else {
            tr_skip(t, type);
        }
    }
    t->depth--;
    if (!t->bad && (c->oi_offset < -1 || c->oi_length < 0))
        tr_fail(t, "a negative offset index offset or length");
}

/* A list of at most `max` structs (`what` names it in messages), its
 * elements (`size` bytes each, zeroed) allocated into *out and counted in
 * *n_out, and the list entered (the caller reads the elements, then leaves
 * it: t->depth--). SL_OK, SL_ENOMEM or SL_ECORRUPT (the list not entered). */
static int struct_list(tr *t, int type, uint64_t max, const char *what, void **out, int *n_out,
                       size_t size) {
    int elem;
    uint64_t n = tr_list(t, type, &elem);
    if (!t->bad && n && elem != T_STRUCT)
        tr_fail(t, "not a list of structs");
    if (!t->bad && n > max) {
        char why[96];
        snprintf(why, sizeof why, "more than %llu %s", (unsigned long long)max, what);
        tr_fail(t, why);
    }
    if (t->bad)
        return SL_ECORRUPT;
    if (n) {
        *out = sl__calloc((size_t)n, size);
        if (!*out) {
            t->bad = 1;
            return sl__oom("reading a Parquet footer");
        }
    }
    *n_out = (int)n;
    return tr_enter(t) ? SL_OK : SL_ECORRUPT;
}

static int parse_rowgroup(tr *t, pq_rowgroup *rg, int gi) {
    if (!tr_enter(t))
        return SL_ECORRUPT;
    int16_t last = 0, id;
    int type, seen = 0;
    while (tr_field(t, &last, &type, &id)) {
        if (id == 1 && !(seen & 1)) {
            tr_where(t, "row_groups[%d].columns", gi);
            int rc = struct_list(t, type, PQ_MAX_SCHEMA, "columns", (void **)&rg->cols,
                                 &rg->ncols, sizeof *rg->cols);
            if (rc < 0) {
                t->depth--;
                return rc;
            }
            for (int k = 0; k < rg->ncols && !t->bad; k++) {
                tr_where(t, "row_groups[%d].columns[%d]", gi, k);
                parse_chunk(t, &rg->cols[k]);
            }
            t->depth--;
            seen |= 1;
        } else if (id == 2) {
            rg->total_byte_size = tr_int(t, type);
        } else if (id == 3) {
            rg->num_rows = tr_int(t, type);
            seen |= 2;
        } else {
            tr_skip(t, type);
        }
    }
    t->depth--;
    tr_where(t, "row_groups[%d]", gi);
    if (!t->bad && seen != 3)
        tr_fail(t, "columns or num_rows missing");
    if (!t->bad && rg->num_rows < 0)
        tr_fail(t, "num_rows is negative");
    return t->bad ? SL_ECORRUPT : SL_OK;
}

static int parse_kv(tr *t, pq_meta *m) {
    int elem;
    uint64_t n = tr_list(t, T_LIST, &elem);
    if (!t->bad && n && elem != T_STRUCT)
        return tr_fail(t, "not a list of structs");
    if (!tr_enter(t))
        return SL_ECORRUPT;
    for (uint64_t k = 0; k < n && !t->bad; k++) {
        if (!tr_enter(t))
            break;
        int16_t last = 0, id;
        int type;
        pq_bytes key = {0}, val = {0};
        while (tr_field(t, &last, &type, &id)) {
            if (id == 1)
                key = tr_binary(t, type);
            else if (id == 2)
                val = tr_binary(t, type);
            else
                tr_skip(t, type);
        }
        t->depth--;
        if (key.n == 11 && !memcmp(key.p, "huggingface", 11))
            m->hf = val;
    }
    t->depth--;
    return t->bad ? SL_ECORRUPT : SL_OK;
}

/* FileMetaData's list `field` (schema, row_groups): refused when given
 * twice (`given`), else struct_list's. */
static int footer_list(tr *t, int type, const char *field, int given, uint64_t max,
                       const char *what, void **out, int *n_out, size_t size) {
    tr_where(t, "%s", field);
    if (given)
        return tr_fail(t, "given twice");
    return struct_list(t, type, max, what, out, n_out, size);
}

int pq_meta_parse(const uint8_t *p, size_t n, const char *name, pq_meta *m) {
    char pre[300];
    snprintf(pre, sizeof pre, "%s: footer", name);
    tr t = {.p = p, .end = p + n, .name = pre};
    int16_t last = 0, id;
    int type, seen = 0, rc = SL_OK;
    while (rc == SL_OK && tr_field(&t, &last, &type, &id)) {
        switch (id) {
        case 1:
            tr_where(&t, "version");
            m->version = tr_i32(&t, type);
            break;
        case 2:
            if ((rc = footer_list(&t, type, "schema", seen & 1, PQ_MAX_SCHEMA, "schema elements",
                                  (void **)&m->schema, &m->nschema, sizeof *m->schema)) < 0)
                break;
            for (int i = 0; i < m->nschema && !t.bad; i++) {
                tr_where(&t, "schema[%d]", i);
                parse_schema_el(&t, &m->schema[i]);
            }
            t.depth--;
            if (!t.bad && m->nschema == 0)
                tr_fail(&t, "empty");
            seen |= 1;
            break;
        case 3:
            tr_where(&t, "num_rows");
            m->num_rows = tr_int(&t, type);
            seen |= 2;
            break;
        case 4:
            if ((rc = footer_list(&t, type, "row_groups", seen & 4, PQ_MAX_ROW_GROUPS,
                                  "row groups", (void **)&m->rg, &m->nrg, sizeof *m->rg)) < 0)
                break;
            for (int i = 0; i < m->nrg && rc == SL_OK && !t.bad; i++)
                rc = parse_rowgroup(&t, &m->rg[i], i);
            t.depth--;
            seen |= 4;
            break;
        case 5:
            tr_where(&t, "key_value_metadata");
            if (type != T_LIST)
                tr_skip(&t, type);
            else
                parse_kv(&t, m);
            break;
        case 6:
            tr_where(&t, "created_by");
            m->created_by = tr_binary(&t, type);
            break;
        case 8:
            m->encrypted = 1;
            tr_skip(&t, type);
            break;
        default:
            tr_where(&t, "field %d", id);
            tr_skip(&t, type);
        }
    }
    if (rc == SL_ENOMEM)
        return rc;
    if (t.bad)
        return SL_ECORRUPT;
    t.where[0] = '\0';
    if (seen != 7)
        return tr_fail(&t, "FileMetaData lacks schema, num_rows or row_groups");
    if (m->num_rows < 0)
        return tr_fail(&t, "num_rows is negative");
    return SL_OK;
}

void pq_meta_dispose(pq_meta *m) {
    for (int i = 0; m->rg && i < m->nrg; i++)
        sl__free(m->rg[i].cols);
    sl__free(m->rg);
    sl__free(m->schema);
    memset(m, 0, sizeof *m);
}

/* DataPageHeader (5), DictionaryPageHeader (7), DataPageHeaderV2 (8). */
static const fdesc v1_fields[] = {
    FD(1, F_I32, 0, pq_page, num_values, NOWHERE),
    FD(2, F_I32, 0, pq_page, encoding, NOWHERE),
    FD(3, F_I32, 0, pq_page, def_encoding, NOWHERE),
    FD(4, F_I32, 0, pq_page, rep_encoding, NOWHERE),
};
static const fdesc dict_fields[] = {
    FD(1, F_I32, 0, pq_page, num_values, NOWHERE),
    FD(2, F_I32, 0, pq_page, encoding, NOWHERE),
};
static const fdesc v2_fields[] = {
    FD(1, F_I32, 0, pq_page, num_values, NOWHERE),
    FD(2, F_I32, 0, pq_page, num_nulls, NOWHERE),
    FD(3, F_I32, 0, pq_page, num_rows, NOWHERE),
    FD(4, F_I32, 0, pq_page, encoding, NOWHERE),
    FD(5, F_I32, 0, pq_page, def_bytes, NOWHERE),
    FD(6, F_I32, 0, pq_page, rep_bytes, NOWHERE),
    FD(7, F_I32, 0, pq_page, is_compressed, NOWHERE),
};

static void page_other(tr *t, int16_t id, int type, void *base) {
    pq_page *pg = base;
    if (type != T_STRUCT || (id != 5 && id != 7 && id != 8)) {
        tr_skip(t, type);
        return;
    }
    if (id == 5)
        tr_fields(t, v1_fields, 4, pg, NULL);
    else if (id == 7)
        tr_fields(t, dict_fields, 2, pg, NULL);
    else
        tr_fields(t, v2_fields, 7, pg, NULL);
    if ((id == 5 && pg->type == PQ_DATA_PAGE) || (id == 7 && pg->type == PQ_DICTIONARY_PAGE) ||
        (id == 8 && pg->type == PQ_DATA_PAGE_V2))
        pg->has_header = 1;
}

static const fdesc page_fields[] = {
    FD(1, F_I32, 1, pq_page, type, NOWHERE),
    FD(2, F_I32, 2, pq_page, uncompressed_size, NOWHERE),
    FD(3, F_I32, 4, pq_page, compressed_size, NOWHERE),
    FD(4, F_I32, 0, pq_page, crc, offsetof(pq_page, has_crc)),
};

int pq_page_parse(const uint8_t *p, size_t n, pq_page *pg, size_t *used) {
    memset(pg, 0, sizeof *pg);
    pg->is_compressed = 1;
    tr t = {.p = p, .end = p + n, .name = "page header"};
    unsigned seen = tr_fields(&t, page_fields, 4, pg, page_other);
    if (t.bad)
        return SL_ECORRUPT;
    if (seen != 7)
        return sl__error(SL_ECORRUPT, "page header: type or sizes missing");
    if (pg->compressed_size < 0 || pg->uncompressed_size < 0 || pg->num_values < 0 ||
        pg->def_bytes < 0 || pg->rep_bytes < 0 || pg->num_nulls < 0 || pg->num_rows < 0)
        return sl__error(SL_ECORRUPT, "page header: a negative size or count");
    *used = (size_t)(t.p - p);
    return SL_OK;
}

/* ---- the page index ------------------------------------------------------------- */

/* PageLocation: 1 offset (i64), 2 compressed_page_size (i32), 3
 * first_row_index (i64), all required. */
static const fdesc loc_fields[] = {
    FD(1, F_I64, 1, pq_pageloc, offset, NOWHERE),
    FD(2, F_I32, 2, pq_pageloc, size, NOWHERE),
    FD(3, F_I64, 4, pq_pageloc, first_row, NOWHERE),
};

int pq_offset_index_parse(const uint8_t *p, size_t n, pq_pageloc **locs_out, int *n_out) {
    *locs_out = NULL;
    *n_out = 0;
    tr t = {.p = p, .end = p + n, .name = "offset index"};
    pq_pageloc *locs = NULL;
    int nlocs = 0, rc = SL_OK, seen = 0;
    if (!tr_enter(&t))
        return SL_ECORRUPT;
    int16_t last = 0, id;
    int type;
    while (rc == SL_OK && tr_field(&t, &last, &type, &id)) {
        if (id != 1 || seen) { /* unencoded_byte_array_data_bytes and the like */
            tr_skip(&t, type);
            continue;
        }
        tr_where(&t, "page_locations");
        seen = 1;
        if ((rc = struct_list(&t, type, PQ_MAX_PAGES, "pages", (void **)&locs, &nlocs,
                              sizeof *locs)) < 0)
            break;
        for (int k = 0; k < nlocs && !t.bad; k++) {
            tr_where(&t, "page_locations[%d]", k);
            if (tr_fields(&t, loc_fields, 3, &locs[k], NULL) != 7)
                tr_fail(&t, "offset, compressed_page_size or first_row_index missing");
            else if (locs[k].offset < 4 || locs[k].size <= 0 || locs[k].first_row < 0 ||
                     (k == 0 && locs[k].first_row != 0) ||
                     (k > 0 && (locs[k].first_row <= locs[k - 1].first_row ||
                                locs[k].offset < locs[k - 1].offset + locs[k - 1].size)))
                tr_fail(&t, "pages out of order, overlapping, or not starting at row 0");
        }
        t.depth--;
    }
    t.depth--;
    if (rc == SL_OK && !t.bad && !seen)
        tr_fail(&t, "no page_locations");
    if (rc == SL_OK && !t.bad && nlocs == 0)
        tr_fail(&t, "no pages");
    if (rc < 0 || t.bad) {
        sl__free(locs);
        return rc < 0 ? rc : SL_ECORRUPT;
    }
    *locs_out = locs;
    *n_out = nlocs;
    return SL_OK;
}
