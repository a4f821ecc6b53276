/*
 * jpeg_damage.h — JPEGs whose entropy-coded data has a run of bytes
 * overwritten by stuffed 0xFF 0x00 pairs: each pair is eight 1-bits of scan
 * data, and sixteen 1-bits in a row are no valid Huffman code in any table
 * (the all-ones code is reserved), so the decoder meets a corrupt code once
 * it reads from inside a long enough run. libjpeg-turbo's fast Huffman path
 * reads such a code as 0 without a warning (docs/OPS.md, "Corrupt entropy
 * data"). The file keeps its length and its marker structure: the run never
 * touches a marker (restart markers included) and never follows a 0xFF
 * byte, so the only damage is to the coded data.
 *
 * Used by tests/ops/test_decode_entropy.c and by scripts/jpeg_damage.c (the
 * files for tests/cli/pack_entropy.sh and the decode fuzz corpus), so both
 * make the same files. Header-only: no sluice dependency.
 */
#ifndef SL_JPEG_DAMAGE_H
#define SL_JPEG_DAMAGE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Where the entropy-coded data of each scan lies: jd_scans fills up to
 * `cap` [start, end) pairs (restart markers stay inside a scan's range) and
 * returns the number of scans, or -1 when the segments cannot be walked. */
static inline int jd_scans(const uint8_t *j, size_t n, size_t (*out)[2], int cap) {
    size_t p = 2;
    int k = 0;
    if (n < 4 || j[0] != 0xff || j[1] != 0xd8)
        return -1;
    while (p + 4 <= n) {
        if (j[p] != 0xff)
            return -1;
        uint8_t m = j[p + 1];
        if (m == 0xff) { /* fill byte */
            p++;
            continue;
        }
        if (m == 0xd9)
            return k;
        size_t len = (size_t)j[p + 2] << 8 | j[p + 3];
        p += 2 + len;
        if (m != 0xda)
            continue;
        size_t s = p;
        while (p + 1 < n && !(j[p] == 0xff && j[p + 1] != 0 && (j[p + 1] < 0xd0 || j[p + 1] > 0xd7)))
            p++;
        if (k < cap) {
            out[k][0] = s;
            out[k][1] = p;
        }
        k++;
    }
    return k;
}

/* A copy of the JPEG with `run` bytes (even, >= 2) of its largest scan
 * overwritten by 0xFF 0x00 pairs, starting near fraction `where` (0..1) of
 * that scan's data. *at_out gets the offset of the run. Returns NULL when the
 * file has no scan long enough. Caller frees with free(). */
static inline uint8_t *jd_damage(const uint8_t *j, size_t n, double where, size_t run,
                                 size_t *at_out) {
    size_t sc[256][2];
    int k = jd_scans(j, n, sc, 256);
    if (k <= 0 || run < 2 || run % 2)
        return NULL;
    int big = 0;
    for (int i = 1; i < k && i < 256; i++)
        if (sc[i][1] - sc[i][0] > sc[big][1] - sc[big][0])
            big = i;
    size_t s = sc[big][0], e = sc[big][1];
    if (e - s < run + 8)
        return NULL;
    size_t at = s + 2 + (size_t)((double)(e - s - run - 4) * where);
    /* move right past a preceding 0xFF (the run's first 0xFF would make a
     * marker of it) and past any marker inside or just after the run */
    for (;;) {
        if (at + run + 2 > e)
            return NULL;
        int ok = j[at - 1] != 0xff;
        for (size_t i = at; ok && i < at + run + 1; i++)
            if (j[i] == 0xff && j[i + 1] != 0)
                ok = 0;
        if (ok)
            break;
        at++;
    }
    uint8_t *d = malloc(n);
    if (!d)
        return NULL;
    memcpy(d, j, n);
    for (size_t i = 0; i < run; i += 2) {
        d[at + i] = 0xff;
        d[at + i + 1] = 0x00;
    }
    if (at_out)
        *at_out = at;
    return d;
}

#endif
