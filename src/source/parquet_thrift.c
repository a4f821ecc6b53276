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

static void parse_stats(tr *t, pq_stats *s) {
    if (!tr_enter(t))
        return;
    int16_t last = 0, id;
    int type;
    pq_bytes old_min = {0}, old_max = {0};
    int has_old_min = 0, has_old_max = 0;
    while (tr_field(t, &last, &type, &id)) {
        switch (id) {
        case 1:
            old_max = tr_binary(t, type);
            has_old_max = 1;
            break;
        case 2:
            old_min = tr_binary(t, type);
            has_old_min = 1;
            break;
        case 3:
            s->null_count = tr_int(t, type);
            s->has_nulls = 1;
            break;
        case 5:
            s->max = tr_binary(t, type);
            s->has_max = 1;
            break;
        case 6:
            s->min = tr_binary(t, type);
            s->has_min = 1;
            break;
        default:
            tr_skip(t, type);
        }
    }
    t->depth--;
    /* The deprecated min/max order signed bytes for some types: kept only
     * when the new fields are absent, and used for integers alone (their
     * order is the same either way). */
    if (!s->has_min && has_old_min) {
        s->min = old_min;
        s->has_min = 1;
    }
    if (!s->has_max && has_old_max) {
        s->max = old_max;
        s->has_max = 1;
    }
}

static void parse_logical(tr *t, pq_schema_el *e) {
    if (!tr_enter(t))
        return;
    int16_t last = 0, id;
    int type;
    while (tr_field(t, &last, &type, &id)) {
        if (type != T_STRUCT) {
            tr_skip(t, type);
            continue;
        }
        e->logical = id;
        if (!tr_enter(t))
            break;
        int16_t l2 = 0, id2;
        int ty2;
        while (tr_field(t, &l2, &ty2, &id2)) {
            if (id == PQ_LT_INTEGER && id2 == 1)
                e->int_bits = (int)tr_int(t, ty2);
            else if (id == PQ_LT_INTEGER && id2 == 2)
                e->int_signed = (int)tr_int(t, ty2);
            else if ((id == PQ_LT_TIMESTAMP || id == PQ_LT_TIME) && id2 == 2 && ty2 == T_STRUCT) {
                /* TimeUnit: a union of empty structs MILLIS (1), MICROS (2), NANOS (3) */
                if (!tr_enter(t))
                    break;
                int16_t l3 = 0, id3;
                int ty3;
                while (tr_field(t, &l3, &ty3, &id3)) {
                    if (ty3 == T_STRUCT)
                        e->ts_unit = id3;
                    tr_skip(t, ty3);
                }
                t->depth--;
            } else {
                tr_skip(t, ty2);
            }
        }
        t->depth--;
    }
    t->depth--;
}

static void parse_schema_el(tr *t, pq_schema_el *e) {
    e->converted = PQ_CT_NONE;
    e->repetition = PQ_REQUIRED;
    if (!tr_enter(t))
        return;
    int16_t last = 0, id;
    int type, has_name = 0;
    while (tr_field(t, &last, &type, &id)) {
        switch (id) {
        case 1:
            e->type = tr_i32(t, type);
            e->has_type = 1;
            break;
        case 2:
            e->type_length = tr_i32(t, type);
            break;
        case 3:
            e->repetition = tr_i32(t, type);
            break;
        case 4:
            e->name = tr_binary(t, type);
            has_name = 1;
            break;
        case 5:
            e->num_children = tr_i32(t, type);
            break;
        case 6:
            e->converted = tr_i32(t, type);
            break;
        case 10:
            if (type == T_STRUCT)
                parse_logical(t, e);
            else
                tr_skip(t, type);
            break;
        default:
            tr_skip(t, type);
        }
    }
    t->depth--;
    if (!t->bad && !has_name)
        tr_fail(t, "no name");
    if (!t->bad && (e->repetition < 0 || e->repetition > 2))
        tr_fail(t, "repetition_type out of range");
    if (!t->bad && (e->num_children < 0 || (e->has_type && (e->type < 0 || e->type > 7))))
        tr_fail(t, "type or num_children out of range");
}

static void parse_col_meta(tr *t, pq_chunk *c) {
    if (!tr_enter(t))
        return;
    int16_t last = 0, id;
    int type, seen = 0;
    while (tr_field(t, &last, &type, &id)) {
        switch (id) {
        case 1:
            c->type = tr_i32(t, type);
            seen |= 1;
            break;
        case 4:
            c->codec = tr_i32(t, type);
            seen |= 2;
            break;
        case 5:
            c->num_values = tr_int(t, type);
            seen |= 4;
            break;
        case 6:
            c->total_uncompressed = tr_int(t, type);
            break;
        case 7:
            c->total_compressed = tr_int(t, type);
            seen |= 8;
            break;
        case 9:
            c->data_page_offset = tr_int(t, type);
            seen |= 16;
            break;
        case 11:
            c->dict_page_offset = tr_int(t, type);
            break;
        case 12:
            if (type == T_STRUCT)
                parse_stats(t, &c->stats);
            else
                tr_skip(t, type);
            break;
        default:
            tr_skip(t, type);
        }
    }
    t->depth--;
    if (!t->bad && seen != 31)
        tr_fail(t, "meta_data lacks a required field (type, codec, num_values, "
                   "total_compressed_size or data_page_offset)");
    if (!t->bad && (c->num_values < 0 || c->total_compressed < 0 || c->data_page_offset < 0))
        tr_fail(t, "a negative size or offset");
}

static void parse_chunk(tr *t, pq_chunk *c) {
    c->dict_page_offset = -1;
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
        } else {
            tr_skip(t, type);
        }
    }
    t->depth--;
}

static int alloc_list(tr *t, void **out, uint64_t n, size_t size, const char *what) {
    *out = NULL;
    if (t->bad || n == 0)
        return SL_OK;
    *out = sl__calloc((size_t)n, size);
    if (!*out) {
        t->bad = 1;
        return sl__oom(what);
    }
    return SL_OK;
}

static int parse_rowgroup(tr *t, pq_rowgroup *rg, int gi) {
    if (!tr_enter(t))
        return SL_ECORRUPT;
    int16_t last = 0, id;
    int type, seen = 0;
    while (tr_field(t, &last, &type, &id)) {
        if (id == 1 && !(seen & 1)) {
            int elem;
            tr_where(t, "row_groups[%d].columns", gi);
            uint64_t n = tr_list(t, type, &elem);
            if (!t->bad && elem != T_STRUCT && n)
                tr_fail(t, "not a list of structs");
            SL_TRY(alloc_list(t, (void **)&rg->cols, n, sizeof *rg->cols, "reading a Parquet footer"));
            rg->ncols = (int)n;
            if (!tr_enter(t))
                break;
            for (uint64_t k = 0; k < n && !t->bad; k++) {
                tr_where(t, "row_groups[%d].columns[%" PRIu64 "]", gi, k);
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
        case 2: {
            int elem;
            tr_where(&t, "schema");
            uint64_t k = tr_list(&t, type, &elem);
            if (!t.bad && (k == 0 || elem != T_STRUCT)) {
                tr_fail(&t, "empty, or not a list of structs");
                break;
            }
            if (!t.bad && k > PQ_MAX_SCHEMA) {
                tr_fail(&t, "more than 100000 schema elements");
                break;
            }
            rc = alloc_list(&t, (void **)&m->schema, k, sizeof *m->schema, "reading a Parquet footer");
            m->nschema = (int)k;
            if (!tr_enter(&t))
                break;
            for (uint64_t i = 0; i < k && !t.bad; i++) {
                tr_where(&t, "schema[%" PRIu64 "]", i);
                parse_schema_el(&t, &m->schema[i]);
            }
            t.depth--;
            seen |= 1;
            break;
        }
        case 3:
            tr_where(&t, "num_rows");
            m->num_rows = tr_int(&t, type);
            seen |= 2;
            break;
        case 4: {
            int elem;
            tr_where(&t, "row_groups");
            uint64_t k = tr_list(&t, type, &elem);
            if (!t.bad && k && elem != T_STRUCT) {
                tr_fail(&t, "not a list of structs");
                break;
            }
            if (!t.bad && k > PQ_MAX_ROW_GROUPS) {
                tr_fail(&t, "more than 1000000 row groups");
                break;
            }
            rc = alloc_list(&t, (void **)&m->rg, k, sizeof *m->rg, "reading a Parquet footer");
            m->nrg = (int)k;
            if (!tr_enter(&t))
                break;
            for (uint64_t i = 0; i < k && rc == SL_OK && !t.bad; i++)
                rc = parse_rowgroup(&t, &m->rg[i], (int)i);
            t.depth--;
            seen |= 4;
            break;
        }
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

int pq_page_parse(const uint8_t *p, size_t n, pq_page *pg, size_t *used) {
    memset(pg, 0, sizeof *pg);
    pg->is_compressed = 1;
    tr t = {.p = p, .end = p + n, .name = "page header"};
    int16_t last = 0, id;
    int type, seen = 0;
    while (tr_field(&t, &last, &type, &id)) {
        switch (id) {
        case 1:
            pg->type = tr_i32(&t, type);
            seen |= 1;
            break;
        case 2:
            pg->uncompressed_size = tr_i32(&t, type);
            seen |= 2;
            break;
        case 3:
            pg->compressed_size = tr_i32(&t, type);
            seen |= 4;
            break;
        case 4:
            pg->crc = (uint32_t)tr_i32(&t, type);
            pg->has_crc = 1;
            break;
        case 5:
        case 7:
        case 8: {
            if (type != T_STRUCT || !tr_enter(&t)) {
                tr_skip(&t, type);
                break;
            }
            int16_t l2 = 0, id2;
            int ty2;
            while (tr_field(&t, &l2, &ty2, &id2)) {
                if (id2 == 1) {
                    pg->num_values = tr_i32(&t, ty2);
                } else if (id == 5 && id2 == 2) {
                    pg->encoding = tr_i32(&t, ty2);
                } else if (id == 5 && id2 == 3) {
                    pg->def_encoding = tr_i32(&t, ty2);
                } else if (id == 5 && id2 == 4) {
                    pg->rep_encoding = tr_i32(&t, ty2);
                } else if (id == 7 && id2 == 2) {
                    pg->encoding = tr_i32(&t, ty2);
                } else if (id == 8) {
                    switch (id2) {
                    case 2: pg->num_nulls = tr_i32(&t, ty2); break;
                    case 3: pg->num_rows = tr_i32(&t, ty2); break;
                    case 4: pg->encoding = tr_i32(&t, ty2); break;
                    case 5: pg->def_bytes = tr_i32(&t, ty2); break;
                    case 6: pg->rep_bytes = tr_i32(&t, ty2); break;
                    case 7: pg->is_compressed = (int)tr_int(&t, ty2); break;
                    default: tr_skip(&t, ty2);
                    }
                } else {
                    tr_skip(&t, ty2);
                }
            }
            t.depth--;
            if ((id == 5 && pg->type == PQ_DATA_PAGE) || (id == 7 && pg->type == PQ_DICTIONARY_PAGE) ||
                (id == 8 && pg->type == PQ_DATA_PAGE_V2))
                pg->has_header = 1;
            break;
        }
        default:
            tr_skip(&t, type);
        }
    }
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
