/*
 * parquet_column.c — one Parquet column chunk decoded into values
 * (parquet_format.h, pq_decode_chunk): its pages walked in order, each
 * checked (sizes against the chunk, the CRC-32 of its stored bytes where the
 * writer kept one), decompressed by the codec's own library (libsnappy,
 * zlib, libzstd, liblz4, libbrotli: nothing of theirs hand-written here),
 * its repetition and definition levels read, and its values decoded from
 * their encoding into one array per chunk.
 *
 * Pages (the format specification's "Data Pages"):
 *  - DICTIONARY_PAGE: PLAIN values; later pages' RLE_DICTIONARY /
 *    PLAIN_DICTIONARY indices point into it.
 *  - DATA_PAGE (v1): the whole page compressed; in it the repetition levels
 *    then the definition levels (each a 4-byte length and an RLE run), then
 *    the values.
 *  - DATA_PAGE_V2: the levels first, never compressed, their byte lengths in
 *    the header; then the values, compressed unless is_compressed is false.
 *
 * Levels to rows (the format's "Nested Encoding", Dremel's levels): a flat
 * column (max_rep 0) has one slot per row, a value where the definition
 * level is max_def and a null below. A list column (max_rep 1) starts a row
 * at each repetition level 0; a slot whose level is below list_def[0] adds
 * no element (an empty list at list_def[0] - 1, a null list lower), one at
 * max_def adds a value, one between adds a null element. A list of lists
 * (max_rep 2) starts an inner list at each slot of repetition level 0 or 1
 * that reaches list_def[0], and fills it the same way against list_def[1].
 * Deeper nesting is refused when the source opens.
 *
 * Memory: a chunk's scratch (levels, indices, fixed-size values before
 * conversion, the dictionary) is allocated here per chunk and freed before
 * returning; pages whose byte arrays the output points into are decompressed
 * into the caller's arena (one buffer per row group) or, past it, buffers
 * the column keeps; the output grows in place (sl__grow). Nothing per row.
 */
#include "source/parquet_format.h"
#include "record/record_format.h"

#include <brotli/decode.h>
#include <inttypes.h>
#include <lz4.h>
#include <snappy-c.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

const char *pq_codec_name(int codec) {
    static const char *const names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO",
                                        "BROTLI",       "LZ4",    "ZSTD", "LZ4_RAW"};
    return codec >= 0 && codec < 8 ? names[codec] : "an unknown codec";
}

const char *pq_encoding_name(int enc) {
    static const char *const names[] = {"PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE",
                                        "BIT_PACKED", "DELTA_BINARY_PACKED",
                                        "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                                        "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
    return enc >= 0 && enc < 10 ? names[enc] : "an unknown encoding";
}

void pq_dcol_dispose(pq_dcol *d) {
    sl__free(d->vals);
    sl__free(d->vp);
    sl__free(d->vl);
    for (size_t k = 0; k < d->nkeep; k++)
        sl__free(d->keep[k]);
    sl__free(d->keep);
    sl__free(d->row_off);
    sl__free(d->in_off);
    sl__free(d->nulls);
    memset(d, 0, sizeof *d);
}

int pq_dcol_keep(pq_dcol *d, uint8_t *buf, size_t n) {
    if (sl__grow((void **)&d->keep, &d->kcap, d->nkeep + 1, sizeof *d->keep, 8,
                 "decoding a Parquet column") < 0) {
        sl__free(buf);
        return SL_ENOMEM;
    }
    d->keep[d->nkeep++] = buf;
    d->kept_bytes += n;
    return SL_OK;
}

size_t pq_dcol_bytes(const pq_dcol *d) {
    size_t n = d->vcap * (size_t)(d->w ? d->w : 1) + d->bcap * (sizeof *d->vp + sizeof *d->vl) +
               d->kept_bytes;
    if (d->row_off)
        n += (size_t)(d->nrows + 1) * sizeof *d->row_off;
    n += d->in_cap * sizeof *d->in_off;
    if (d->nulls)
        n += (size_t)d->nrows;
    return n;
}

/* ---- decompression ------------------------------------------------------------ */

/* Hadoop's LZ4 framing (codec LZ4, older writers): blocks of a 4-byte
 * big-endian decompressed size, a 4-byte compressed size and an LZ4 block.
 * 1 when `src` is such a stream that fills dst exactly. */
static int lz4_hadoop(const uint8_t *src, size_t n, uint8_t *dst, size_t cap) {
    size_t got = 0;
    while (n >= 8) {
        uint32_t raw = (uint32_t)src[0] << 24 | (uint32_t)src[1] << 16 | (uint32_t)src[2] << 8 | src[3];
        uint32_t len = (uint32_t)src[4] << 24 | (uint32_t)src[5] << 16 | (uint32_t)src[6] << 8 | src[7];
        src += 8;
        n -= 8;
        if (len > n || raw > cap - got || len > INT32_MAX || raw > INT32_MAX)
            return 0;
        if (LZ4_decompress_safe((const char *)src, (char *)dst + got, (int)len, (int)raw) != (int)raw)
            return 0;
        got += raw;
        src += len;
        n -= len;
    }
    return n == 0 && got == cap;
}

/* Decompress src[0..n) into dst[0..cap), which it must fill exactly. */
static int decompress(int codec, const uint8_t *src, size_t n, uint8_t *dst, size_t cap) {
    switch (codec) {
    case PQ_UNCOMPRESSED:
        if (n != cap)
            return sl__error(SL_ECORRUPT, "uncompressed page of %zu bytes where the header says "
                             "%zu", n, cap);
        memcpy(dst, src, n);
        return SL_OK;
    case PQ_SNAPPY: {
        /* libsnappy's C API takes no allocator; decompressing into a flat
         * buffer allocates nothing */
        size_t len;
        if (snappy_uncompressed_length((const char *)src, n, &len) != SNAPPY_OK || len != cap)
            return sl__error(SL_ECORRUPT, "SNAPPY page: the stream does not state %zu bytes", cap);
        if (snappy_uncompress((const char *)src, n, (char *)dst, &len) != SNAPPY_OK || len != cap)
            return sl__error(SL_ECORRUPT, "SNAPPY page does not decompress");
        return SL_OK;
    }
    case PQ_GZIP: {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        zs.zalloc = sl__zalloc;
        zs.zfree = sl__zfree;
        int zr = inflateInit2(&zs, 32 + MAX_WBITS); /* gzip or zlib header */
        if (zr != Z_OK)
            return zr == Z_MEM_ERROR ? sl__oom("starting zlib")
                                     : sl__error(SL_EIO, "zlib failed to start (%d)", zr);
        if (n > UINT32_MAX || cap > UINT32_MAX) {
            inflateEnd(&zs);
            return sl__error(SL_ECORRUPT, "GZIP page over 4 GiB");
        }
        zs.next_in = (Bytef *)(uintptr_t)src;
        zs.avail_in = (uInt)n;
        zs.next_out = dst;
        zs.avail_out = (uInt)cap;
        zr = inflate(&zs, Z_FINISH);
        size_t got = cap - zs.avail_out;
        inflateEnd(&zs);
        if (zr == Z_MEM_ERROR)
            return sl__oom("decompressing a GZIP page");
        if (zr != Z_STREAM_END || got != cap)
            return sl__error(SL_ECORRUPT, "GZIP page does not decompress to %zu bytes (%s)", cap,
                             zs.msg ? zs.msg : zr == Z_BUF_ERROR ? "cut short or too long"
                                                                  : "damaged");
        return SL_OK;
    }
    case PQ_ZSTD: {
        ZSTD_DCtx *dc = sl_record__zstd_dctx();
        if (!dc)
            return sl__oom("starting zstd");
        size_t r = ZSTD_decompressDCtx(dc, dst, cap, src, n);
        ZSTD_freeDCtx(dc);
        if (ZSTD_isError(r) && ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation)
            return sl__oom("decompressing a ZSTD page");
        if (ZSTD_isError(r) || r != cap)
            return sl__error(SL_ECORRUPT, "ZSTD page does not decompress to %zu bytes (%s)", cap,
                             ZSTD_isError(r) ? ZSTD_getErrorName(r) : "another size");
        return SL_OK;
    }
    case PQ_LZ4_RAW:
    case PQ_LZ4:
        if (n > INT32_MAX || cap > INT32_MAX)
            return sl__error(SL_ECORRUPT, "LZ4 page over 2 GiB");
        if (codec == PQ_LZ4 && lz4_hadoop(src, n, dst, cap))
            return SL_OK;
        if (LZ4_decompress_safe((const char *)src, (char *)dst, (int)n, (int)cap) != (int)cap)
            return sl__error(SL_ECORRUPT, "%s page does not decompress to %zu bytes",
                             pq_codec_name(codec), cap);
        return SL_OK;
    case PQ_BROTLI: {
        BrotliDecoderState *st = BrotliDecoderCreateInstance(sl__opaque_malloc, sl__zfree, NULL);
        if (!st)
            return sl__oom("starting brotli");
        size_t in_left = n, out_left = cap;
        const uint8_t *in = src;
        uint8_t *out = dst;
        BrotliDecoderResult r =
            BrotliDecoderDecompressStream(st, &in_left, &in, &out_left, &out, NULL);
        int err = BrotliDecoderGetErrorCode(st);
        BrotliDecoderDestroyInstance(st);
        if (r == BROTLI_DECODER_RESULT_ERROR && err <= BROTLI_DECODER_ERROR_ALLOC_CONTEXT_MODES &&
            err >= BROTLI_DECODER_ERROR_ALLOC_BLOCK_TYPE_TREES)
            return sl__oom("decompressing a BROTLI page");
        if (r != BROTLI_DECODER_RESULT_SUCCESS || out_left != 0 || in_left != 0)
            return sl__error(SL_ECORRUPT, "BROTLI page does not decompress to %zu bytes", cap);
        return SL_OK;
    }
    default:
        return sl__error(SL_EUNSUPPORTED, "compression %s is not supported (UNCOMPRESSED, SNAPPY, "
                         "GZIP, ZSTD, LZ4_RAW, LZ4, BROTLI are)", pq_codec_name(codec));
    }
}

/* ---- decoding state of one chunk ---------------------------------------------- */

typedef struct chunk_dec {
    const pq_leaf *leaf;
    pq_dcol *out;
    int codec;
    int verify;
    pq_arena *arena;           /* may be NULL */
    int pw;                    /* bytes of a stored fixed value (BOOLEAN 1, INT96 12) */
    int pbin;                  /* stored as BYTE_ARRAY (bytes, or a DECIMAL) */
    /* the dictionary: fixed values, or binary (pointers into its page) */
    uint8_t *dict_vals;
    const uint8_t **dict_p;
    uint32_t *dict_n;
    size_t ndict;
    int has_dict;
    /* per page scratch, grown as pages need */
    uint8_t *page;
    size_t page_cap;
    uint32_t *def, *rep, *idx;
    size_t def_cap, rep_cap, idx_cap;
    uint8_t *fixed;            /* decoded fixed values of a page */
    size_t fixed_cap;
    const uint8_t **bp;        /* decoded binary values of a page */
    uint32_t *bl;
    size_t bin_cap;
    int64_t rows;              /* rows begun (flat: done) */
    int pageno;
} chunk_dec;

static void chunk_dec_free(chunk_dec *d) {
    sl__free(d->dict_vals);
    sl__free(d->dict_p);
    sl__free(d->dict_n);
    sl__free(d->page);
    sl__free(d->def);
    sl__free(d->rep);
    sl__free(d->idx);
    sl__free(d->fixed);
    sl__free(d->bp);
    sl__free(d->bl);
}

static int bit_width(int v) {
    int b = 0;
    while (v >> b)
        b++;
    return b;
}

/* `nn` PLAIN binary values (4-byte length, bytes) from p[0..n). */
static int plain_binary(const uint8_t *p, size_t n, size_t nn, const uint8_t **bp, uint32_t *bl,
                        size_t *used) {
    size_t pos = 0;
    for (size_t i = 0; i < nn; i++) {
        if (n - pos < 4)
            return sl__error(SL_ECORRUPT, "PLAIN byte array %zu of %zu: length cut short", i, nn);
        uint32_t len = sl__ld32(p + pos);
        pos += 4;
        if (len > n - pos)
            return sl__error(SL_ECORRUPT, "PLAIN byte array %zu of %zu: %u bytes past the end of "
                             "the page", i, nn, len);
        bp[i] = p + pos;
        bl[i] = len;
        pos += len;
    }
    if (used)
        *used = pos;
    return SL_OK;
}

/* `nn` PLAIN fixed values (or BOOLEAN bits) into out. */
static int plain_fixed(const chunk_dec *d, const uint8_t *p, size_t n, size_t nn, uint8_t *out) {
    if (d->leaf->type == PQ_BOOLEAN) {
        if ((nn + 7) / 8 > n)
            return sl__error(SL_ECORRUPT, "PLAIN booleans: %zu values in %zu bytes", nn, n);
        for (size_t i = 0; i < nn; i++)
            out[i] = (p[i >> 3] >> (i & 7)) & 1;
        return SL_OK;
    }
    size_t bytes;
    if (!sl__mul_ok(nn, (size_t)d->pw, &bytes) || bytes > n)
        return sl__error(SL_ECORRUPT, "PLAIN values: %zu of %d bytes in %zu bytes", nn, d->pw, n);
    memcpy(out, p, bytes);
    return SL_OK;
}

static int grow_scratch(chunk_dec *d, size_t nn) {
    if (d->pbin) {
        size_t c1 = d->bin_cap, c2 = d->bin_cap;
        SL_TRY(sl__grow((void **)&d->bp, &c1, nn, sizeof *d->bp, 64, "decoding a Parquet page"));
        SL_TRY(sl__grow((void **)&d->bl, &c2, nn, sizeof *d->bl, 64, "decoding a Parquet page"));
        d->bin_cap = c1 < c2 ? c1 : c2;
    } else {
        size_t bytes;
        if (!sl__mul_ok(nn ? nn : 1, (size_t)d->pw, &bytes))
            return sl__error(SL_ECORRUPT, "too many values in a page");
        SL_TRY(sl__grow((void **)&d->fixed, &d->fixed_cap, bytes, 1, 256, "decoding a Parquet page"));
    }
    return SL_OK;
}

/* Decode `nn` values of a data page's value section p[0..n) into the
 * scratch (fixed or bp/bl). */
static int decode_values(chunk_dec *d, int enc, const uint8_t *p, size_t n, size_t nn) {
    const pq_leaf *lf = d->leaf;
    int bin = d->pbin;
    SL_TRY(grow_scratch(d, nn));
    switch (enc) {
    case PQ_PLAIN:
        return bin ? plain_binary(p, n, nn, d->bp, d->bl, NULL) : plain_fixed(d, p, n, nn, d->fixed);
    case PQ_PLAIN_DICTIONARY:
    case PQ_RLE_DICTIONARY: {
        if (!d->has_dict)
            return sl__error(SL_ECORRUPT, "dictionary-encoded page without a dictionary page");
        if (nn == 0)
            return SL_OK;
        if (n < 1)
            return sl__error(SL_ECORRUPT, "dictionary indices cut short");
        SL_TRY(sl__grow((void **)&d->idx, &d->idx_cap, nn, sizeof *d->idx, 64,
                        "decoding a Parquet page"));
        SL_TRY(pq_rle_decode(p + 1, n - 1, p[0], d->idx, nn, NULL));
        for (size_t i = 0; i < nn; i++) {
            uint32_t k = d->idx[i];
            if (k >= d->ndict)
                return sl__error(SL_ECORRUPT, "dictionary index %u of a dictionary of %zu", k,
                                 d->ndict);
            if (bin) {
                d->bp[i] = d->dict_p[k];
                d->bl[i] = d->dict_n[k];
            } else {
                memcpy(d->fixed + i * (size_t)d->pw, d->dict_vals + (size_t)k * (size_t)d->pw,
                       (size_t)d->pw);
            }
        }
        return SL_OK;
    }
    case PQ_RLE: {
        if (lf->type != PQ_BOOLEAN)
            return sl__error(SL_EUNSUPPORTED, "RLE values of a non-boolean column");
        if (n < 4 || sl__ld32(p) > n - 4)
            return sl__error(SL_ECORRUPT, "RLE booleans: length cut short");
        SL_TRY(sl__grow((void **)&d->idx, &d->idx_cap, nn ? nn : 1, sizeof *d->idx, 64,
                        "decoding a Parquet page"));
        SL_TRY(pq_rle_decode(p + 4, sl__ld32(p), 1, d->idx, nn, NULL));
        for (size_t i = 0; i < nn; i++)
            d->fixed[i] = (uint8_t)d->idx[i];
        return SL_OK;
    }
    case PQ_DELTA_BINARY_PACKED:
        if (lf->type != PQ_INT32 && lf->type != PQ_INT64)
            return sl__error(SL_EUNSUPPORTED, "DELTA_BINARY_PACKED values of a column that is "
                             "not INT32 or INT64");
        return pq_delta_decode(p, n, d->pw, d->fixed, nn, NULL);
    case PQ_DELTA_LENGTH_BYTE_ARRAY:
    case PQ_DELTA_BYTE_ARRAY: {
        if (!bin)
            return sl__error(SL_EUNSUPPORTED, "%s values of a column that is not BYTE_ARRAY",
                             pq_encoding_name(enc));
        /* lengths (and DELTA_BYTE_ARRAY's prefix lengths first) as int32 deltas */
        SL_TRY(sl__grow((void **)&d->idx, &d->idx_cap, (nn ? nn : 1) * 2, sizeof *d->idx, 64,
                        "decoding a Parquet page"));
        uint32_t *pre = d->idx + nn, *len = d->idx;
        size_t used = 0, pos = 0;
        if (enc == PQ_DELTA_BYTE_ARRAY) {
            SL_TRY(pq_delta_decode(p, n, 4, pre, nn, &used));
            pos = used;
        }
        SL_TRY(pq_delta_decode(p + pos, n - pos, 4, len, nn, &used));
        pos += used;
        uint64_t total = 0;
        for (size_t i = 0; i < nn; i++) {
            if ((int32_t)len[i] < 0)
                return sl__error(SL_ECORRUPT, "%s: negative length", pq_encoding_name(enc));
            total += len[i];
        }
        if (total > n - pos)
            return sl__error(SL_ECORRUPT, "%s: %llu bytes of values in %zu", pq_encoding_name(enc),
                             (unsigned long long)total, n - pos);
        if (enc == PQ_DELTA_LENGTH_BYTE_ARRAY) {
            for (size_t i = 0; i < nn; i++) {
                d->bp[i] = p + pos;
                d->bl[i] = len[i];
                pos += len[i];
            }
            return SL_OK;
        }
        /* value i = the first pre[i] bytes of value i - 1, then its suffix */
        uint64_t need = total;
        for (size_t i = 0; i < nn; i++) {
            if ((int32_t)pre[i] < 0 || (i == 0 && pre[i]) ||
                (i && pre[i] > (uint64_t)len[i - 1] + pre[i - 1]))
                return sl__error(SL_ECORRUPT, "DELTA_BYTE_ARRAY: prefix %d longer than the value "
                                 "before it", (int32_t)pre[i]);
            need += pre[i];
        }
        if (need > ((uint64_t)1 << 40))
            return sl__error(SL_ECORRUPT, "DELTA_BYTE_ARRAY: %llu bytes of values",
                             (unsigned long long)need);
        uint8_t *recon = sl__malloc((size_t)need + 1);
        if (!recon)
            return sl__oom("decoding a Parquet page");
        SL_TRY(pq_dcol_keep(d->out, recon, (size_t)need + 1)); /* the values point into it */
        size_t at = 0;
        for (size_t i = 0; i < nn; i++) {
            uint8_t *v = recon + at;
            if (pre[i])
                memcpy(v, d->bp[i - 1], pre[i]);
            memcpy(v + pre[i], p + pos, len[i]);
            pos += len[i];
            d->bp[i] = v;
            d->bl[i] = pre[i] + len[i];
            at += d->bl[i];
        }
        return SL_OK;
    }
    case PQ_BYTE_STREAM_SPLIT: {
        if (bin || lf->type == PQ_BOOLEAN)
            return sl__error(SL_EUNSUPPORTED, "BYTE_STREAM_SPLIT values of a %s column",
                             bin ? "BYTE_ARRAY" : "BOOLEAN");
        size_t bytes;
        if (!sl__mul_ok(nn, (size_t)d->pw, &bytes) || bytes > n)
            return sl__error(SL_ECORRUPT, "BYTE_STREAM_SPLIT: %zu values of %d bytes in %zu", nn,
                             d->pw, n);
        pq_bss_decode(p, nn, d->pw, d->fixed);
        return SL_OK;
    }
    default:
        return sl__error(SL_EUNSUPPORTED, "encoding %s is not supported", pq_encoding_name(enc));
    }
}

/* Memory for a decompressed page of n bytes. `keep`: values will point
 * into it, so it lives with the column (the arena while it has room, else a
 * buffer the column keeps); otherwise the chunk's scratch, reused by the next
 * page. */
static int page_mem(chunk_dec *d, size_t n, int keep, uint8_t **out) {
    if (!keep) {
        SL_TRY(sl__grow((void **)&d->page, &d->page_cap, n ? n : 1, 1, 4096,
                        "decoding a Parquet page"));
        *out = d->page;
        return SL_OK;
    }
    pq_arena *a = d->arena;
    if (a && a->cap - a->used >= n) {
        *out = a->p + a->used;
        a->used += n;
        return SL_OK;
    }
    uint8_t *b = sl__malloc(n ? n : 1);
    if (!b)
        return sl__oom("decoding a Parquet page");
    SL_TRY(pq_dcol_keep(d->out, b, n));
    *out = b;
    return SL_OK;
}

/* The dictionary page's n decompressed bytes at `page` (kept for as long as
 * the chunk decodes: binary values point into it). */
static int read_dictionary(chunk_dec *d, const pq_page *pg, const uint8_t *page, size_t n) {
    if (d->has_dict)
        return sl__error(SL_ECORRUPT, "a second dictionary page");
    if (pg->encoding != PQ_PLAIN && pg->encoding != PQ_PLAIN_DICTIONARY)
        return sl__error(SL_EUNSUPPORTED, "dictionary page in %s (PLAIN expected)",
                         pq_encoding_name(pg->encoding));
    size_t nn = (size_t)pg->num_values;
    d->has_dict = 1;
    d->ndict = nn;
    if (d->pbin) {
        if (nn > n / 4 + 1)
            return sl__error(SL_ECORRUPT, "dictionary of %zu values in %zu bytes", nn, n);
        d->dict_p = sl__malloc((nn ? nn : 1) * sizeof *d->dict_p);
        d->dict_n = sl__malloc((nn ? nn : 1) * sizeof *d->dict_n);
        if (!d->dict_p || !d->dict_n)
            return sl__oom("reading a Parquet dictionary");
        return plain_binary(page, n, nn, d->dict_p, d->dict_n, NULL);
    }
    size_t bytes;
    if (!sl__mul_ok(nn, (size_t)d->pw, &bytes) || (d->leaf->type != PQ_BOOLEAN && bytes > n))
        return sl__error(SL_ECORRUPT, "dictionary of %zu values in %zu bytes", nn, n);
    d->dict_vals = sl__malloc(bytes ? bytes : 1);
    if (!d->dict_vals)
        return sl__oom("reading a Parquet dictionary");
    return plain_fixed(d, page, n, nn, d->dict_vals);
}

/* Room for `more` output values. */
static int out_room(chunk_dec *d, size_t more) {
    pq_dcol *o = d->out;
    if (o->w) {
        size_t need;
        if (!sl__add_ok(o->nvals, more, &need))
            return sl__error(SL_ECORRUPT, "too many values");
        /* vcap counts values: vals holds vcap * w bytes */
        if (need > o->vcap) {
            size_t ncap = o->vcap ? o->vcap : 64;
            while (ncap < need)
                ncap *= 2;
            size_t bytes;
            if (!sl__mul_ok(ncap, (size_t)o->w, &bytes))
                return sl__error(SL_ECORRUPT, "too many values");
            uint8_t *v = sl__realloc(o->vals, bytes);
            if (!v)
                return sl__oom("decoding a Parquet column");
            o->vals = v;
            o->vcap = ncap;
        }
    } else {
        size_t c1 = o->bcap, c2 = o->bcap;
        SL_TRY(sl__grow((void **)&o->vp, &c1, o->nvals + more + 1, sizeof *o->vp, 64,
                        "decoding a Parquet column"));
        SL_TRY(sl__grow((void **)&o->vl, &c2, o->nvals + more + 1, sizeof *o->vl, 64,
                        "decoding a Parquet column"));
        o->bcap = c1 < c2 ? c1 : c2;
    }
    return SL_OK;
}

/* ---- conversions ------------------------------------------------------------------ */

/* 10^k as a long double, k <= 76 (DECIMAL scales: a precision is at most 76
 * digits). Exact up to 10^27 in the x87 format's 64-bit mantissa. */
static long double pow10l_(int k) {
    long double v = 1;
    for (int i = 0; i < k; i++)
        v *= 10;
    return v;
}

/* A DECIMAL's unscaled value from n big-endian two's complement bytes
 * (at most 16 significant: precision 38; longer only as sign extension). */
static int be_unscaled(const uint8_t *p, size_t n, __int128 *out) {
    if (n == 0)
        return sl__error(SL_ECORRUPT, "an empty DECIMAL value");
    uint8_t sign = p[0] & 0x80 ? 0xff : 0;
    for (; n > 16; p++, n--)
        if (p[0] != sign || ((p[1] ^ sign) & 0x80))
            return sl__error(SL_EUNSUPPORTED, "a DECIMAL value wider than 128 bits");
    unsigned __int128 u = sign ? ~(unsigned __int128)0 : 0;
    for (size_t i = 0; i < n; i++)
        u = u << 8 | p[i];
    *out = (__int128)u;
    return SL_OK;
}

/* Stored value `src` (n bytes: pw, or a byte array's length) as the output
 * value at dst (o->w bytes). */
static int convert(const chunk_dec *d, const uint8_t *src, size_t n, uint8_t *dst) {
    const pq_leaf *lf = d->leaf;
    switch (lf->conv) {
    case PQ_CONV_I32: {
        int64_t v = (int32_t)sl__ld32(src);
        memcpy(dst, &v, 8);
        return SL_OK;
    }
    case PQ_CONV_U32: {
        int64_t v = (int64_t)sl__ld32(src);
        memcpy(dst, &v, 8);
        return SL_OK;
    }
    case PQ_CONV_INT96: {
        /* days since the Julian epoch; 2440588 is 1970-01-01. Wraps as
         * pyarrow's int64 nanoseconds do for dates past 2262. */
        uint64_t nanos = sl__ld64(src);
        int64_t day = (int32_t)sl__ld32(src + 8);
        uint64_t v = (uint64_t)(day - 2440588) * UINT64_C(86400000000000) + nanos;
        memcpy(dst, &v, 8);
        return SL_OK;
    }
    case PQ_CONV_DEC_F64:
    case PQ_CONV_DEC_I64: {
        __int128 u = 0;
        if (lf->type == PQ_INT32)
            u = (int32_t)sl__ld32(src);
        else if (lf->type == PQ_INT64)
            u = (int64_t)sl__ld64(src);
        else
            SL_TRY(be_unscaled(src, n, &u));
        if (lf->conv == PQ_CONV_DEC_I64) {
            if (u < INT64_MIN || u > INT64_MAX)
                return sl__error(SL_ECORRUPT, "a DECIMAL of scale 0 past int64");
            int64_t v = (int64_t)u;
            memcpy(dst, &v, 8);
        } else {
            /* one rounding when |u| < 2^64 and the scale's power of ten is
             * exact (scale <= 27); then the double's own: equal to the
             * decimal rounded to a double up to 15 significant digits */
            double v = (double)((long double)u / pow10l_(lf->scale));
            memcpy(dst, &v, 8);
        }
        return SL_OK;
    }
    default:
        memcpy(dst, src, (size_t)d->out->w);
        return SL_OK;
    }
}

/* ---- levels to rows ----------------------------------------------------------------- */

/* Mark row `row` null (1) or holding a null element (2), the marks made on
 * the first. A list already marked 2 stays so. */
static int mark_null(pq_dcol *o, int64_t row, uint8_t how) {
    if (!o->nulls && !(o->nulls = sl__calloc((size_t)o->nrows ? (size_t)o->nrows : 1, 1)))
        return sl__oom("decoding a Parquet column");
    if (o->nulls[row] < how)
        o->nulls[row] = how;
    return SL_OK;
}

/* The next of the page's nn decoded values (*vi) as the column's next value. */
static int put_value(chunk_dec *d, size_t *vi, size_t nn) {
    pq_dcol *o = d->out;
    size_t i = *vi;
    if (i >= nn)
        return sl__error(SL_ECORRUPT, "fewer values than defined slots");
    if (!o->w) { /* a byte array is not copied: it points where it was decoded */
        o->vp[o->nvals] = d->bl[i] ? d->bp[i] : NULL;
        o->vl[o->nvals] = d->bl[i];
    } else if (d->pbin) {
        SL_TRY(convert(d, d->bp[i], d->bl[i], o->vals + o->nvals * (size_t)o->w));
    } else {
        SL_TRY(convert(d, d->fixed + i * (size_t)d->pw, (size_t)d->pw,
                       o->vals + o->nvals * (size_t)o->w));
    }
    o->nvals++;
    (*vi)++;
    return SL_OK;
}

/* An empty (null) slot of a flat column. */
static int put_null(chunk_dec *d, int64_t row) {
    pq_dcol *o = d->out;
    SL_TRY(mark_null(o, row, 1));
    if (o->w) {
        uint8_t *dst = o->vals + o->nvals * (size_t)o->w;
        memset(dst, 0, (size_t)o->w);
        if (d->leaf->out == PQ_OUT_F64) { /* a missing float is NaN (as pandas reads it) */
            double nan = __builtin_nan("");
            memcpy(dst, &nan, 8);
        } else if (d->leaf->out == PQ_OUT_F32) {
            float nan = __builtin_nanf("");
            memcpy(dst, &nan, 4);
        }
    } else {
        o->vp[o->nvals] = NULL;
        o->vl[o->nvals] = 0;
    }
    o->nvals++;
    return SL_OK;
}

/* A new inner list (lists of lists) starting at the next value. */
static int begin_inner(pq_dcol *o) {
    SL_TRY(sl__grow((void **)&o->in_off, &o->in_cap, o->n_in + 2, sizeof *o->in_off, 64,
                    "decoding a Parquet column"));
    o->in_off[o->n_in++] = (int64_t)o->nvals;
    return SL_OK;
}

/* Place a page's `slots` level slots (values in the scratch, nn of them). */
static int place(chunk_dec *d, size_t slots, size_t nn) {
    const pq_leaf *lf = d->leaf;
    pq_dcol *o = d->out;
    size_t vi = 0;
    SL_TRY(out_room(d, slots));
    if (lf->max_rep == 0) {
        for (size_t s = 0; s < slots; s++) {
            if (d->rows >= o->nrows)
                return sl__error(SL_ECORRUPT, "more values than the %" PRId64 " rows", o->nrows);
            int defined = lf->max_def == 0 || d->def[s] == (uint32_t)lf->max_def;
            SL_TRY(defined ? put_value(d, &vi, nn) : put_null(d, d->rows));
            d->rows++;
        }
        return SL_OK;
    }
    const int l0 = lf->list_def[0], l1 = lf->list_def[1];
    for (size_t s = 0; s < slots; s++) {
        uint32_t rl = d->rep[s];
        int dl = (int)d->def[s];
        if (rl == 0) { /* a new row */
            if (d->rows >= o->nrows)
                return sl__error(SL_ECORRUPT, "more rows than the %" PRId64, o->nrows);
            o->row_off[d->rows++] = lf->max_rep == 1 ? (int64_t)o->nvals : (int64_t)o->n_in;
        } else if (d->rows == 0) {
            return sl__error(SL_ECORRUPT, "the first level slot continues a row");
        }
        int64_t row = d->rows - 1;
        if (dl < l0) { /* no element: an empty or null list */
            if (rl != 0)
                return sl__error(SL_ECORRUPT, "repetition level %u with definition level %d",
                                 rl, dl);
            if (dl < l0 - 1)
                SL_TRY(mark_null(o, row, 1));
            continue;
        }
        if (lf->max_rep == 2) {
            if (rl <= 1)
                SL_TRY(begin_inner(o));
            else if (dl < l1)
                return sl__error(SL_ECORRUPT, "repetition level %u with definition level %d",
                                 rl, dl);
            if (dl < l1) { /* an empty inner list; a null one fails the row */
                if (dl < l1 - 1)
                    SL_TRY(mark_null(o, row, 2));
                continue;
            }
        }
        if (dl < lf->max_def) /* a null element */
            SL_TRY(mark_null(o, row, 2));
        else
            SL_TRY(put_value(d, &vi, nn));
    }
    return SL_OK;
}

/* Levels of `slots` slots with bit width from `max` from p[0..n): v1 pages
 * prefix them with a 4-byte length (`prefixed`), v2 pages give n. *used:
 * bytes taken. */
static int read_levels(const uint8_t *p, size_t n, int max, uint32_t *out, size_t slots,
                       int prefixed, int enc, const char *what, size_t *used) {
    if (enc != PQ_RLE)
        return sl__error(SL_EUNSUPPORTED, "%s levels in %s (RLE is supported)", what,
                         pq_encoding_name(enc));
    size_t len = n;
    const uint8_t *q = p;
    if (prefixed) {
        if (n < 4 || sl__ld32(p) > n - 4)
            return sl__error(SL_ECORRUPT, "%s levels: length past the end of the page", what);
        len = sl__ld32(p);
        q = p + 4;
    }
    int rc = pq_rle_decode(q, len, bit_width(max), out, slots, NULL);
    if (rc < 0)
        return sl__error_prefix(rc, "%s levels", what);
    for (size_t i = 0; i < slots; i++)
        if (out[i] > (uint32_t)max)
            return sl__error(SL_ECORRUPT, "%s level %u above the column's %d", what, out[i], max);
    *used = len + (prefixed ? 4 : 0);
    return SL_OK;
}

static int data_page(chunk_dec *d, const pq_page *pg, const uint8_t *stored) {
    const pq_leaf *lf = d->leaf;
    const int codec = d->codec;
    const int keep = d->out->w == 0; /* byte arrays will point into the page */
    size_t slots = (size_t)pg->num_values;
    size_t csize = (size_t)pg->compressed_size, usize = (size_t)pg->uncompressed_size;
    SL_TRY(sl__grow((void **)&d->def, &d->def_cap, slots ? slots : 1, sizeof *d->def, 256,
                    "decoding a Parquet page"));
    SL_TRY(sl__grow((void **)&d->rep, &d->rep_cap, slots ? slots : 1, sizeof *d->rep, 256,
                    "decoding a Parquet page"));
    const uint8_t *body;
    size_t blen;
    size_t lev_used = 0;
    if (pg->type == PQ_DATA_PAGE) {
        if (codec == PQ_UNCOMPRESSED) { /* read in place */
            if (csize != usize)
                return sl__error(SL_ECORRUPT, "uncompressed page of %zu bytes where the header "
                                 "says %zu", csize, usize);
            body = stored;
        } else {
            uint8_t *buf;
            SL_TRY(page_mem(d, usize, keep, &buf));
            SL_TRY(decompress(codec, stored, csize, buf, usize));
            body = buf;
        }
        blen = usize;
        size_t u = 0;
        if (lf->max_rep > 0) {
            SL_TRY(read_levels(body, blen, lf->max_rep, d->rep, slots, 1, pg->rep_encoding,
                               "repetition", &u));
            body += u;
            blen -= u;
        }
        if (lf->max_def > 0) {
            SL_TRY(read_levels(body, blen, lf->max_def, d->def, slots, 1, pg->def_encoding,
                               "definition", &u));
            body += u;
            blen -= u;
        }
    } else {
        size_t lv = (size_t)pg->rep_bytes + (size_t)pg->def_bytes;
        if (lv > csize || lv > usize)
            return sl__error(SL_ECORRUPT, "levels of %zu bytes in a page of %zu", lv, csize);
        if (lf->max_rep > 0)
            SL_TRY(read_levels(stored, (size_t)pg->rep_bytes, lf->max_rep, d->rep, slots, 0,
                               PQ_RLE, "repetition", &lev_used));
        if (lf->max_def > 0)
            SL_TRY(read_levels(stored + pg->rep_bytes, (size_t)pg->def_bytes, lf->max_def, d->def,
                               slots, 0, PQ_RLE, "definition", &lev_used));
        size_t vsize = usize - lv;
        if (pg->is_compressed && codec != PQ_UNCOMPRESSED) {
            uint8_t *buf;
            SL_TRY(page_mem(d, vsize, keep, &buf));
            SL_TRY(decompress(codec, stored + lv, csize - lv, buf, vsize));
            body = buf;
        } else {
            if (csize - lv != vsize)
                return sl__error(SL_ECORRUPT, "uncompressed values of %zu bytes where the header "
                                 "says %zu", csize - lv, vsize);
            body = stored + lv;
        }
        blen = vsize;
    }
    if (lf->max_rep == 0 && lf->max_def == 0)
        for (size_t i = 0; i < slots; i++)
            d->def[i] = 0;
    if (lf->max_rep == 0)
        for (size_t i = 0; i < slots; i++)
            d->rep[i] = 0;
    size_t nn = 0;
    for (size_t i = 0; i < slots; i++)
        nn += lf->max_def == 0 || d->def[i] == (uint32_t)lf->max_def;
    if (pg->type == PQ_DATA_PAGE_V2 && lf->max_rep == 0 && (size_t)pg->num_nulls != slots - nn)
        return sl__error(SL_ECORRUPT, "%zu nulls where the header says %d", slots - nn,
                         pg->num_nulls);
    SL_TRY(decode_values(d, pg->encoding, body, blen, nn));
    return place(d, slots, nn);
}

/* One page at bytes[*pos..n): its header parsed, its CRC checked, the page
 * decoded (dec) or only walked (dec NULL). *values grows by a data page's
 * num_values, *is_dict says whether it was a dictionary page. `want` (-1:
 * none): the values the chunk holds, which no page may pass. */
static int one_page(chunk_dec *d, const uint8_t *bytes, size_t n, size_t *pos, int verify,
                    int64_t want, int64_t *values, int *is_dict, int pageno) {
    pq_page pg;
    size_t hl;
    int rc = pq_page_parse(bytes + *pos, n - *pos, &pg, &hl);
    if (rc < 0)
        return sl__error_prefix(rc, "page %d (offset %zu in the chunk)", pageno, *pos);
    size_t at = *pos + hl;
    if ((size_t)pg.compressed_size > n - at)
        return sl__error(SL_ECORRUPT, "page %d: %d bytes past the end of the column chunk (%zu "
                         "left)", pageno, pg.compressed_size, n - at);
    const uint8_t *stored = bytes + at;
    if (verify && pg.has_crc) {
        uint32_t crc = (uint32_t)crc32(0L, stored, (uInt)pg.compressed_size);
        if (crc != pg.crc)
            return sl__error(SL_ECORRUPT, "page %d: CRC mismatch (stored %08x, computed %08x)",
                             pageno, pg.crc, crc);
    }
    *is_dict = pg.type == PQ_DICTIONARY_PAGE;
    if (pg.type == PQ_DICTIONARY_PAGE) {
        if (!pg.has_header)
            return sl__error(SL_ECORRUPT, "page %d: dictionary page without its header", pageno);
        if (d) {
            uint8_t *page;
            size_t usize = (size_t)pg.uncompressed_size;
            SL_TRY(page_mem(d, usize, d->pbin, &page));
            rc = decompress(d->codec, stored, (size_t)pg.compressed_size, page, usize);
            if (rc == SL_OK)
                rc = read_dictionary(d, &pg, page, usize);
            if (rc < 0)
                return sl__error_prefix(rc, "page %d (dictionary)", pageno);
        }
    } else if (pg.type == PQ_DATA_PAGE || pg.type == PQ_DATA_PAGE_V2) {
        if (!pg.has_header)
            return sl__error(SL_ECORRUPT, "page %d: data page without its header", pageno);
        if (want >= 0 && pg.num_values > want - *values)
            return sl__error(SL_ECORRUPT, "page %d: %d values, more than the chunk's %" PRId64
                             " left", pageno, pg.num_values, want - *values);
        if (d && (rc = data_page(d, &pg, stored)) < 0)
            return sl__error_prefix(rc, "page %d (%s, %s)", pageno,
                                    pg.type == PQ_DATA_PAGE ? "v1" : "v2",
                                    pq_encoding_name(pg.encoding));
        *values += pg.num_values;
    } /* an index page (never written by current writers) is skipped */
    *pos = at + (size_t)pg.compressed_size;
    return SL_OK;
}

/* The decoder for `leaf` into `out` (zeroed here). */
static int dec_init(chunk_dec *d, const pq_leaf *leaf, int codec, int verify, pq_arena *arena,
                    int64_t nrows, pq_dcol *out) {
    memset(out, 0, sizeof *out);
    memset(d, 0, sizeof *d);
    out->nrows = nrows;
    d->leaf = leaf;
    d->out = out;
    d->codec = codec;
    d->verify = verify;
    d->arena = arena;
    d->pbin = leaf->type == PQ_BYTE_ARRAY;
    switch (leaf->type) {
    case PQ_BOOLEAN: d->pw = 1; break;
    case PQ_INT32: case PQ_FLOAT: d->pw = 4; break;
    case PQ_INT64: case PQ_DOUBLE: d->pw = 8; break;
    case PQ_INT96: d->pw = 12; break;
    case PQ_FIXED_LEN_BYTE_ARRAY: d->pw = leaf->type_length; break;
    default: d->pw = 0;
    }
    switch (leaf->out) {
    case PQ_OUT_I64: case PQ_OUT_U64: case PQ_OUT_F64: out->w = 8; break;
    case PQ_OUT_F32: out->w = 4; break;
    case PQ_OUT_BOOL: out->w = 1; break;
    case PQ_OUT_FIXED: out->w = leaf->type_length; break;
    default: out->w = 0;
    }
    if (leaf->max_rep > 0) {
        out->row_off = sl__calloc((size_t)nrows + 1, sizeof *out->row_off);
        if (!out->row_off)
            return sl__oom("decoding a Parquet column");
    }
    if (leaf->max_rep > 1)
        SL_TRY(sl__grow((void **)&out->in_off, &out->in_cap, 1, sizeof *out->in_off, 64,
                        "decoding a Parquet column"));
    return SL_OK;
}

/* Every row placed: close the offsets. */
static int dec_finish(chunk_dec *d) {
    pq_dcol *o = d->out;
    if (d->rows != o->nrows)
        return sl__error(SL_ECORRUPT, "%" PRId64 " %s for the %" PRId64 " rows", d->rows,
                         d->leaf->max_rep ? "lists" : "values", o->nrows);
    if (o->in_off) {
        o->in_off[o->n_in] = (int64_t)o->nvals;
        o->row_off[o->nrows] = (int64_t)o->n_in;
    } else if (o->row_off) {
        o->row_off[o->nrows] = (int64_t)o->nvals;
    }
    return SL_OK;
}

int pq_decode_chunk(const pq_leaf *leaf, const pq_chunk *c, const uint8_t *bytes, size_t n,
                    int64_t nrows, int verify, pq_arena *arena, pq_dcol *out) {
    chunk_dec d;
    int rc = dec_init(&d, leaf, c->codec, verify, arena, nrows, out);
    size_t pos = 0;
    int64_t values = 0;
    for (int pageno = 0; rc == SL_OK && values < c->num_values; pageno++) {
        int is_dict;
        if (pos >= n)
            rc = sl__error(SL_ECORRUPT, "the column chunk ends after %" PRId64 " of its %" PRId64
                           " values", values, c->num_values);
        else
            rc = one_page(&d, bytes, n, &pos, verify, c->num_values, &values, &is_dict, pageno);
    }
    if (rc == SL_OK)
        rc = dec_finish(&d);
    chunk_dec_free(&d);
    return rc;
}

int pq_decode_pages(const pq_leaf *leaf, int codec, const uint8_t *dict, size_t dict_n,
                    const uint8_t *pages, size_t n, int64_t nrows, int verify, pq_arena *arena,
                    pq_dcol *out) {
    chunk_dec d;
    int rc = dec_init(&d, leaf, codec, verify, arena, nrows, out);
    int64_t values = 0;
    int is_dict = 1;
    size_t pos = 0;
    if (rc == SL_OK && dict_n) {
        rc = one_page(&d, dict, dict_n, &pos, verify, -1, &values, &is_dict, 0);
        if (rc == SL_OK && (!is_dict || pos != dict_n))
            rc = sl__error(SL_ECORRUPT, "the chunk's first page is not its dictionary alone");
    }
    pos = 0;
    for (int pageno = 1; rc == SL_OK && pos < n; pageno++) {
        rc = one_page(&d, pages, n, &pos, verify, -1, &values, &is_dict, pageno);
        if (rc == SL_OK && is_dict)
            rc = sl__error(SL_ECORRUPT, "a dictionary page among the data pages");
    }
    if (rc == SL_OK)
        rc = dec_finish(&d);
    chunk_dec_free(&d);
    return rc;
}

int pq_check_chunk(const uint8_t *bytes, size_t n, int64_t num_values) {
    size_t pos = 0;
    int64_t values = 0;
    int is_dict;
    for (int pageno = 0; values < num_values; pageno++) {
        if (pos >= n)
            return sl__error(SL_ECORRUPT, "the column chunk ends after %" PRId64 " of its %"
                             PRId64 " values", values, num_values);
        SL_TRY(one_page(NULL, bytes, n, &pos, 1, num_values, &values, &is_dict, pageno));
    }
    return SL_OK;
}
