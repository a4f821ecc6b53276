/*
 * parquet_format.h — Apache Parquet's file metadata and page headers as the
 * Parquet source reads them (source_parquet.c), parsed from the Thrift
 * compact protocol by our own bounded parser (parquet_thrift.c), and the
 * value decoders of the encodings (parquet_encoding.c). Never installed.
 *
 * The structures keep only the fields sluice uses; every other field is
 * skipped by type. Field numbers are those of parquet.thrift (Apache Parquet
 * format). Strings and binary statistics point into the footer buffer the
 * metadata was parsed from, which must outlive them.
 *
 * Bounds (hostile input): nesting depth, list sizes (never more elements
 * than bytes left), schema and row group counts, and every size that becomes
 * an allocation are checked before use; a violation is SL_ECORRUPT with a
 * message naming the structure and field ("row_groups[3].columns[1]:
 * num_values -5 is negative"), never a crash or an allocation the input
 * chose without bound.
 */
#ifndef SL_PARQUET_FORMAT_H
#define SL_PARQUET_FORMAT_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

/* Physical types (parquet.thrift Type). */
enum {
    PQ_BOOLEAN = 0, PQ_INT32 = 1, PQ_INT64 = 2, PQ_INT96 = 3, PQ_FLOAT = 4, PQ_DOUBLE = 5,
    PQ_BYTE_ARRAY = 6, PQ_FIXED_LEN_BYTE_ARRAY = 7
};
/* FieldRepetitionType */
enum { PQ_REQUIRED = 0, PQ_OPTIONAL = 1, PQ_REPEATED = 2 };
/* ConvertedType (the legacy annotation; LogicalType below where present) */
enum {
    PQ_CT_NONE = -1, PQ_CT_UTF8 = 0, PQ_CT_MAP = 1, PQ_CT_MAP_KEY_VALUE = 2, PQ_CT_LIST = 3,
    PQ_CT_ENUM = 4, PQ_CT_DECIMAL = 5, PQ_CT_DATE = 6, PQ_CT_TIME_MILLIS = 7,
    PQ_CT_TIME_MICROS = 8, PQ_CT_TIMESTAMP_MILLIS = 9, PQ_CT_TIMESTAMP_MICROS = 10,
    PQ_CT_UINT_8 = 11, PQ_CT_UINT_16 = 12, PQ_CT_UINT_32 = 13, PQ_CT_UINT_64 = 14,
    PQ_CT_INT_8 = 15, PQ_CT_INT_16 = 16, PQ_CT_INT_32 = 17, PQ_CT_INT_64 = 18, PQ_CT_JSON = 19,
    PQ_CT_BSON = 20, PQ_CT_INTERVAL = 21
};
/* LogicalType's union member (its field number), 0 when absent. */
enum {
    PQ_LT_NONE = 0, PQ_LT_STRING = 1, PQ_LT_MAP = 2, PQ_LT_LIST = 3, PQ_LT_ENUM = 4,
    PQ_LT_DECIMAL = 5, PQ_LT_DATE = 6, PQ_LT_TIME = 7, PQ_LT_TIMESTAMP = 8, PQ_LT_INTEGER = 10,
    PQ_LT_UNKNOWN = 11, PQ_LT_JSON = 12, PQ_LT_BSON = 13, PQ_LT_UUID = 14, PQ_LT_FLOAT16 = 15
};
/* Encoding */
enum {
    PQ_PLAIN = 0, PQ_PLAIN_DICTIONARY = 2, PQ_RLE = 3, PQ_BIT_PACKED = 4,
    PQ_DELTA_BINARY_PACKED = 5, PQ_DELTA_LENGTH_BYTE_ARRAY = 6, PQ_DELTA_BYTE_ARRAY = 7,
    PQ_RLE_DICTIONARY = 8, PQ_BYTE_STREAM_SPLIT = 9
};
/* CompressionCodec */
enum {
    PQ_UNCOMPRESSED = 0, PQ_SNAPPY = 1, PQ_GZIP = 2, PQ_LZO = 3, PQ_BROTLI = 4, PQ_LZ4 = 5,
    PQ_ZSTD = 6, PQ_LZ4_RAW = 7
};
/* PageType */
enum { PQ_DATA_PAGE = 0, PQ_INDEX_PAGE = 1, PQ_DICTIONARY_PAGE = 2, PQ_DATA_PAGE_V2 = 3 };

/* Bounds a parse enforces (a file over them is refused, naming the bound). */
#define PQ_MAX_DEPTH 32          /* Thrift structs and lists nested */
#define PQ_MAX_SCHEMA 100000     /* schema elements */
#define PQ_MAX_ROW_GROUPS 1000000
#define PQ_MAX_FOOTER ((uint64_t)1 << 30) /* footer bytes */
#define PQ_MAX_PAGE ((uint64_t)1 << 31)   /* bytes of one page, compressed or not */
#define PQ_MAX_PAGES 1000000     /* pages of one column chunk in an offset index */

typedef struct pq_bytes {
    const uint8_t *p;
    uint32_t n;
} pq_bytes;

typedef struct pq_schema_el {
    pq_bytes name;
    int has_type;
    int type;           /* PQ_BOOLEAN.. (leaves) */
    int32_t type_length; /* FIXED_LEN_BYTE_ARRAY */
    int repetition;     /* PQ_REQUIRED.. (REQUIRED when absent: the root) */
    int32_t num_children; /* groups: > 0 */
    int converted;      /* PQ_CT_*, PQ_CT_NONE when absent */
    int logical;        /* PQ_LT_* */
    int int_bits;       /* PQ_LT_INTEGER: bitWidth */
    int int_signed;     /* PQ_LT_INTEGER: isSigned */
    int ts_unit;        /* PQ_LT_TIMESTAMP / TIME: 1 ms, 2 us, 3 ns */
    int32_t scale, precision; /* DECIMAL: the legacy fields, or LogicalType's
                                 DecimalType where present */
} pq_schema_el;

typedef struct pq_stats {
    int has_min, has_max;
    pq_bytes min, max;  /* min_value / max_value, else the deprecated min / max */
    int has_nulls;
    int64_t null_count;
} pq_stats;

typedef struct pq_chunk {
    int has_meta;
    int type;
    int codec;
    int64_t num_values;
    int64_t total_uncompressed;
    int64_t total_compressed;
    int64_t data_page_offset;
    int64_t dict_page_offset; /* -1 when absent */
    int external;             /* file_path set: the chunk lives in another file */
    pq_stats stats;
    int64_t oi_offset;        /* its OffsetIndex (the page index), -1 when absent */
    int32_t oi_length;
} pq_chunk;

typedef struct pq_rowgroup {
    int64_t num_rows;
    int64_t total_byte_size;
    int ncols;
    pq_chunk *cols;
} pq_rowgroup;

typedef struct pq_meta {
    int32_t version;
    int64_t num_rows;
    int nschema;
    pq_schema_el *schema;
    int nrg;
    pq_rowgroup *rg;
    pq_bytes created_by;
    pq_bytes hf;        /* key_value_metadata "huggingface" (JSON), n 0 when absent */
    int encrypted;      /* encryption_algorithm present (plaintext footer) */
} pq_meta;

/* Parse FileMetaData from p[0..n) into `m` (zeroed by the caller; free with
 * pq_meta_dispose, on failure too). `name` names the file in messages. */
int pq_meta_parse(const uint8_t *p, size_t n, const char *name, pq_meta *m);
void pq_meta_dispose(pq_meta *m);

typedef struct pq_page {
    int type;
    int32_t uncompressed_size, compressed_size;
    int has_crc;
    uint32_t crc;
    /* DATA_PAGE, DATA_PAGE_V2, DICTIONARY_PAGE */
    int32_t num_values;
    int encoding;
    int def_encoding, rep_encoding; /* v1 */
    int32_t num_nulls, num_rows;    /* v2 */
    int32_t def_bytes, rep_bytes;   /* v2 */
    int is_compressed;              /* v2 (default true) */
    int has_header;                 /* the header for `type` was present */
} pq_page;

/* Parse one PageHeader at p[0..n): `*used` its bytes. SL_ECORRUPT with a
 * message starting "page header: " when it does not parse. */
int pq_page_parse(const uint8_t *p, size_t n, pq_page *pg, size_t *used);

/* One data page of a column chunk as its OffsetIndex locates it. */
typedef struct pq_pageloc {
    int64_t offset;       /* in the file: the page header's first byte */
    int32_t size;         /* compressed_page_size: header and stored page */
    int64_t first_row;    /* the page's first row within its row group */
} pq_pageloc;

/* Parse an OffsetIndex at p[0..n) (parquet.thrift's page index) into
 * *locs_out (sl__malloc'd, *n_out entries; freed by the caller). Checked
 * here: at least one page, first rows starting at 0 and increasing, sizes
 * positive. SL_ECORRUPT ("offset index: ...") or SL_ENOMEM. */
int pq_offset_index_parse(const uint8_t *p, size_t n, pq_pageloc **locs_out, int *n_out);

/* ---- encodings (parquet_encoding.c) ------------------------------------------- */

/* Unsigned LEB128 at *p (< end), at most 10 bytes; advances *p. -1 when cut
 * short or too long. */
int pq_uvarint(const uint8_t **p, const uint8_t *end, uint64_t *out);

/* The RLE / bit-packed hybrid: `count` values of `bw` bits (0..32) from
 * p[0..n) into out[]. SL_ECORRUPT ("...") when the runs end early or a
 * value is out of range. `*used` (may be NULL): bytes consumed. */
int pq_rle_decode(const uint8_t *p, size_t n, int bw, uint32_t *out, size_t count,
                  size_t *used);

/* DELTA_BINARY_PACKED: `count` values (int32 when `width` is 4, else int64)
 * into out (count * width bytes). `*used`: bytes of the encoded run. The
 * header's count must be `count` (SL_ECORRUPT otherwise). */
int pq_delta_decode(const uint8_t *p, size_t n, int width, void *out, size_t count,
                    size_t *used);
/* BYTE_STREAM_SPLIT: `count` values of `width` bytes from p (count * width
 * bytes) into out. */
void pq_bss_decode(const uint8_t *p, size_t count, int width, uint8_t *out);

/* Unpack `count` values of `bw` bits (LSB first, as Parquet packs) from p,
 * which holds at least (count * bw + 7) / 8 bytes. */
void pq_unpack(const uint8_t *p, int bw, uint32_t *out, size_t count);

/* ---- column chunks (parquet_column.c) ------------------------------------------- */

/* What a leaf column's values become (the sluice dtype of a value). */
enum {
    PQ_OUT_I64 = 1,  /* int64 (INT32/INT64 and their logical types, as stored; INT96 as
                        nanoseconds; a DECIMAL of scale 0 and at most 18 digits) */
    PQ_OUT_U64,      /* uint64 (UINT_64) */
    PQ_OUT_F64,      /* DOUBLE; any other DECIMAL */
    PQ_OUT_F32,      /* FLOAT */
    PQ_OUT_BOOL,     /* BOOLEAN, one byte 0/1 */
    PQ_OUT_BIN,      /* BYTE_ARRAY: variable-length bytes */
    PQ_OUT_FIXED,    /* FIXED_LEN_BYTE_ARRAY: type_length bytes (FLOAT16: a float16) */
};

/* How a stored value becomes its output value (pq_leaf.conv). */
enum {
    PQ_CONV_NONE = 0, /* as stored (the widths agree) */
    PQ_CONV_I32,      /* INT32 sign-extended to int64 */
    PQ_CONV_U32,      /* INT32 as uint32, zero-extended (UINT_8/16/32) */
    PQ_CONV_INT96,    /* INT96 (8 bytes of nanoseconds in the day, 4 of the Julian
                         day) to nanoseconds since 1970 */
    PQ_CONV_DEC_F64,  /* DECIMAL (INT32, INT64, or big-endian two's complement bytes)
                         to unscaled * 10^-scale as a double */
    PQ_CONV_DEC_I64,  /* DECIMAL of scale 0 to int64 */
};

/* A leaf column as the decoder needs it (from the schema). */
typedef struct pq_leaf {
    int type;          /* physical */
    int32_t type_length;
    int max_def, max_rep; /* max_rep 0: a value per row; 1: a list; 2: a list of lists */
    int list_def[2];   /* list_def[r]: the definition level from which list r (the
                          outer first) holds an element at a slot; below it the list
                          is empty (list_def[r] - 1) or null */
    int out;           /* PQ_OUT_* */
    int conv;          /* PQ_CONV_* */
    int scale;         /* DECIMAL */
} pq_leaf;

/* A column chunk's values, decoded: one slot per row for a flat column (a
 * null slot holds zeros, NaN for a float, or no bytes, marked in nulls[]);
 * per row a range of values for a list (row_off); per row a range of inner
 * lists (row_off), each a range of values (in_off), for a list of lists.
 * Values lie back to back in row order, so a row's values are one run.
 * Byte arrays are not copied: each value points into the page it was
 * decoded from (the block's arena, a buffer kept in keep[], or the chunk's
 * stored bytes for an uncompressed page). */
typedef struct pq_dcol {
    int64_t nrows;
    int w;             /* bytes of a fixed-size value (0 for PQ_OUT_BIN) */
    uint8_t *vals;     /* fixed-size values, back to back */
    size_t nvals, vcap;
    const uint8_t **vp; /* PQ_OUT_BIN: value i's first byte (NULL when empty) */
    uint32_t *vl;      /* PQ_OUT_BIN: value i's length */
    size_t bcap;
    uint8_t **keep;    /* what the values point into, freed with the column */
    size_t nkeep, kcap, kept_bytes;
    int64_t *row_off;  /* lists: nrows + 1 offsets (into values, or into inner lists) */
    int64_t *in_off;   /* lists of lists: n_in + 1 value offsets, one per inner list */
    size_t n_in, in_cap;
    uint8_t *nulls;    /* per row, NULL when none: 1 null (a list: an empty one), 2 a
                          list holding a null element or a null inner list */
} pq_dcol;

/* Where decoded pages go: one buffer for a row group's columns, filled
 * front to back (sl__malloc_big: faulted in by huge pages). A page that
 * does not fit (sizes the footer understated) gets a buffer of its own. */
typedef struct pq_arena {
    uint8_t *p;
    size_t cap, used;
} pq_arena;

/* Decode one column chunk: `bytes` are its n bytes as stored (from the
 * dictionary page or first data page on), `nrows` the rows of its row group.
 * Byte-array values may point into `bytes`, which must then outlive `out`,
 * and into `arena` (may be NULL), which must too. `verify`: check page CRCs
 * where the writer stored them. A failure is SL_ECORRUPT (damage),
 * SL_EUNSUPPORTED (an encoding, codec or nesting the reader lacks) or
 * SL_ENOMEM, its message naming the page and the cause (the caller adds the
 * file, row group and column). `out` is zeroed here and disposed by the
 * caller, on failure too. */
int pq_decode_chunk(const pq_leaf *leaf, const pq_chunk *c, const uint8_t *bytes, size_t n,
                    int64_t nrows, int verify, pq_arena *arena, pq_dcol *out);
/* Decode the data pages in pages[0..n) (whole pages, as an OffsetIndex
 * locates them), which hold `nrows` rows starting at a row's start, after
 * the chunk's dictionary page in dict[0..dict_n) (dict_n 0: none). As
 * pq_decode_chunk otherwise; the rows the pages hold must be `nrows`. */
int pq_decode_pages(const pq_leaf *leaf, int codec, const uint8_t *dict, size_t dict_n,
                    const uint8_t *pages, size_t n, int64_t nrows, int verify, pq_arena *arena,
                    pq_dcol *out);
/* Walk a chunk's page headers (they parse, each page lies inside the
 * chunk, the data pages hold num_values) and check each page's CRC where the
 * writer stored one, without decompressing: what a copy fetched whole is
 * checked with before it is used. SL_ECORRUPT naming the page. */
int pq_check_chunk(const uint8_t *bytes, size_t n, int64_t num_values);
void pq_dcol_dispose(pq_dcol *d);
/* Hand `buf` (sl__malloc'd, n bytes) to the column, freed with it. On
 * failure (SL_ENOMEM) buf is freed here. */
int pq_dcol_keep(pq_dcol *d, uint8_t *buf, size_t n);
/* Bytes a decoded chunk holds (its arena's share not counted). */
size_t pq_dcol_bytes(const pq_dcol *d);
/* The names of a codec and an encoding, for messages ("SNAPPY", "PLAIN"). */
const char *pq_codec_name(int codec);
const char *pq_encoding_name(int enc);

#endif /* SL_PARQUET_FORMAT_H */
