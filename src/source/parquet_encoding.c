/*
 * parquet_encoding.c — Parquet's value and level encodings
 * (parquet_format.h): varints, bit unpacking, the RLE / bit-packed hybrid,
 * DELTA_BINARY_PACKED and BYTE_STREAM_SPLIT. Hand-written: no Debian library
 * decodes them, and each is a few lines of the format specification
 * (Apache Parquet, "Encodings"). Every read is bounded by the bytes given;
 * a run that ends early is SL_ECORRUPT naming the encoding, never a read
 * past the end.
 */
#include "source/parquet_format.h"

#include <string.h>

int pq_uvarint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    const uint8_t *q = *p;
    for (int shift = 0; shift < 70; shift += 7) {
        if (q >= end)
            return -1;
        uint8_t b = *q++;
        if (shift == 63 && b > 1)
            return -1;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *p = q;
            *out = v;
            return 0;
        }
    }
    return -1;
}

void pq_unpack(const uint8_t *p, int bw, uint32_t *out, size_t count) {
    if (bw == 0) {
        memset(out, 0, count * sizeof *out);
        return;
    }
    if (bw == 8) {
        for (size_t i = 0; i < count; i++)
            out[i] = p[i];
        return;
    }
    uint64_t mask = ((uint64_t)1 << bw) - 1;
    size_t bit = 0;
    for (size_t i = 0; i < count; i++, bit += (size_t)bw) {
        size_t byte = bit >> 3;
        int shift = (int)(bit & 7);
        /* bw <= 32 and shift <= 7: the value lies within 5 bytes */
        int need = (shift + bw + 7) >> 3;
        uint64_t w = 0;
        for (int k = 0; k < need; k++)
            w |= (uint64_t)p[byte + (size_t)k] << (8 * k);
        out[i] = (uint32_t)((w >> shift) & mask);
    }
}

/* The same for widths up to 64 (DELTA_BINARY_PACKED's deltas). */
static void unpack64(const uint8_t *p, int bw, uint64_t *out, size_t count) {
    if (bw == 0) {
        memset(out, 0, count * sizeof *out);
        return;
    }
    size_t bit = 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t v = 0;
        int got = 0;
        while (got < bw) {
            size_t byte = bit >> 3;
            int shift = (int)(bit & 7);
            int take = 8 - shift < bw - got ? 8 - shift : bw - got;
            uint64_t bits = ((uint64_t)p[byte] >> shift) & (((uint64_t)1 << take) - 1);
            v |= bits << got;
            got += take;
            bit += (size_t)take;
        }
        out[i] = v;
    }
}

int pq_rle_decode(const uint8_t *p, size_t n, int bw, uint32_t *out, size_t count,
                  size_t *used) {
    const uint8_t *q = p, *end = p + n;
    size_t got = 0;
    int vbytes = (bw + 7) / 8;
    if (bw < 0 || bw > 32)
        return sl__error(SL_ECORRUPT, "RLE run of %d-bit values (at most 32)", bw);
    while (got < count) {
        uint64_t h;
        if (pq_uvarint(&q, end, &h) < 0)
            return sl__error(SL_ECORRUPT, "RLE runs end after %zu of %zu values", got, count);
        if (h & 1) { /* bit-packed: (h >> 1) groups of 8 values */
            uint64_t groups = h >> 1;
            if (groups == 0 || groups > (uint64_t)(end - q) / (uint64_t)(bw ? bw : 1) + 1)
                return sl__error(SL_ECORRUPT, "bit-packed run of %llu groups past the end of "
                                 "the page", (unsigned long long)groups);
            size_t vals = (size_t)groups * 8;
            size_t bytes = (size_t)groups * (size_t)bw;
            if (bytes > (size_t)(end - q))
                return sl__error(SL_ECORRUPT, "bit-packed run of %zu values past the end of "
                                 "the page", vals);
            size_t take = vals < count - got ? vals : count - got;
            pq_unpack(q, bw, out + got, take);
            got += take;
            q += bytes;
        } else { /* a run of one value repeated (h >> 1) times */
            uint64_t rep = h >> 1;
            if ((size_t)(end - q) < (size_t)vbytes)
                return sl__error(SL_ECORRUPT, "RLE run cut short");
            uint32_t v = 0;
            for (int k = 0; k < vbytes; k++)
                v |= (uint32_t)q[k] << (8 * k);
            q += vbytes;
            if (bw < 32 && v >> bw)
                return sl__error(SL_ECORRUPT, "RLE value %u wider than %d bits", v, bw);
            if (rep == 0)
                return sl__error(SL_ECORRUPT, "RLE run of length 0");
            size_t take = rep < count - got ? (size_t)rep : count - got;
            for (size_t i = 0; i < take; i++)
                out[got + i] = v;
            got += take;
        }
    }
    if (used)
        *used = (size_t)(q - p);
    return SL_OK;
}

#define PQ_DELTA_MAX_BLOCK 65536 /* values per block: writers use 128 (arrow, parquet-mr) */

int pq_delta_decode(const uint8_t *p, size_t n, int width, void *out, size_t count,
                    size_t *used) {
    const uint8_t *q = p, *end = p + n;
    uint64_t block, minis, total, first_zz;
    if (pq_uvarint(&q, end, &block) < 0 || pq_uvarint(&q, end, &minis) < 0 ||
        pq_uvarint(&q, end, &total) < 0 || pq_uvarint(&q, end, &first_zz) < 0)
        return sl__error(SL_ECORRUPT, "DELTA_BINARY_PACKED header cut short");
    if (block == 0 || block > PQ_DELTA_MAX_BLOCK || block % 128 || minis == 0 ||
        block % minis || (block / minis) % 32)
        return sl__error(SL_ECORRUPT, "DELTA_BINARY_PACKED header: block of %llu values in %llu "
                         "miniblocks (a multiple of 128, in miniblocks of a multiple of 32)",
                         (unsigned long long)block, (unsigned long long)minis);
    if (total != count)
        return sl__error(SL_ECORRUPT, "DELTA_BINARY_PACKED run of %llu values where the page "
                         "holds %zu", (unsigned long long)total, count);
    size_t per_mini = (size_t)(block / minis);
    uint64_t prev = (first_zz >> 1) ^ -(first_zz & 1);
    uint8_t *o = out;
    uint64_t deltas[PQ_DELTA_MAX_BLOCK / 32 > 2048 ? 2048 : PQ_DELTA_MAX_BLOCK / 32];
    size_t got = 0;
    if (count) {
        if (width == 4)
            memcpy(o, &(uint32_t){(uint32_t)prev}, 4);
        else
            memcpy(o, &prev, 8);
        got = 1;
    }
    while (got < count) {
        uint64_t md_zz;
        if (pq_uvarint(&q, end, &md_zz) < 0)
            return sl__error(SL_ECORRUPT, "DELTA_BINARY_PACKED block cut short");
        uint64_t min_delta = (md_zz >> 1) ^ -(md_zz & 1);
        if ((uint64_t)(end - q) < minis)
            return sl__error(SL_ECORRUPT, "DELTA_BINARY_PACKED bit widths cut short");
        const uint8_t *widths = q;
        q += minis;
        for (uint64_t m = 0; m < minis && got < count; m++) {
            int bw = widths[m];
            if (bw > 64 || (width == 4 && bw > 32))
                return sl__error(SL_ECORRUPT, "DELTA_BINARY_PACKED miniblock of %d-bit deltas",
                                 bw);
            size_t bytes = per_mini * (size_t)bw / 8;
            if ((size_t)(end - q) < bytes)
                return sl__error(SL_ECORRUPT, "DELTA_BINARY_PACKED miniblock cut short");
            for (size_t done = 0; done < per_mini && got < count;) {
                size_t take = per_mini - done < 2048 ? per_mini - done : 2048;
                /* whole bytes: `done` and 2048 are multiples of 8 values */
                unpack64(q + done * (size_t)bw / 8, bw, deltas, take);
                for (size_t i = 0; i < take && got < count; i++) {
                    prev += min_delta + deltas[i];
                    if (width == 4)
                        memcpy(o + got * 4, &(uint32_t){(uint32_t)prev}, 4);
                    else
                        memcpy(o + got * 8, &prev, 8);
                    got++;
                }
                done += take;
            }
            q += bytes;
        }
    }
    if (used)
        *used = (size_t)(q - p);
    return SL_OK;
}

void pq_bss_decode(const uint8_t *p, size_t count, int width, uint8_t *out) {
    for (int k = 0; k < width; k++) {
        const uint8_t *s = p + (size_t)k * count;
        for (size_t i = 0; i < count; i++)
            out[i * (size_t)width + (size_t)k] = s[i];
    }
}
