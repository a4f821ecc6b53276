/*
 * jpeg_damage.c — write JPEGs whose entropy-coded data has a run of bytes
 * overwritten by stuffed 0xFF 0x00 pairs (tests/ops/jpeg_damage.h says what
 * the damage is and why libjpeg-turbo's fast Huffman path reads past it).
 *
 *   sluice_jpeg_damage OUTDIR FILE...
 *
 * For each source JPEG FILE writes OUTDIR/<name>_r<RUN>_p<PCT>.jpg for runs
 * of 8, 24 and 96 bytes at 15, 50 and 85 % of the file's largest scan; a
 * file with no scan long enough for a run gets none for it. Prints the count
 * written. Used by tests/cli/pack_entropy.sh and fuzz/make_corpus.sh (the
 * decode fuzz corpus); tests/ops/test_decode_entropy.c makes the same files
 * in memory.
 */
#define _GNU_SOURCE 1

#include "../tests/ops/jpeg_damage.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *b = NULL;
    size_t cap = 0, len = 0, got;
    do {
        if (len == cap) {
            cap = cap ? 2 * cap : 65536;
            uint8_t *nb = realloc(b, cap);
            if (!nb) {
                free(b);
                fclose(f);
                return NULL;
            }
            b = nb;
        }
        got = fread(b + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return NULL;
    }
    *n = len;
    return b;
}

int main(int argc, char **argv) {
    static const size_t runs[] = {8, 24, 96};
    static const int pcts[] = {15, 50, 85};
    if (argc < 3) {
        fprintf(stderr, "usage: sluice_jpeg_damage OUTDIR FILE...\n");
        return 2;
    }
    const char *out = argv[1];
    if (mkdir(out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "sluice_jpeg_damage: cannot create %s\n", out);
        return 1;
    }
    int written = 0;
    for (int a = 2; a < argc; a++) {
        size_t n;
        uint8_t *src = read_all(argv[a], &n);
        if (!src) {
            fprintf(stderr, "sluice_jpeg_damage: cannot read %s\n", argv[a]);
            return 1;
        }
        const char *base = strrchr(argv[a], '/');
        base = base ? base + 1 : argv[a];
        size_t stem = strcspn(base, ".");
        for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
            for (size_t p = 0; p < sizeof pcts / sizeof *pcts; p++) {
                uint8_t *bad = jd_damage(src, n, pcts[p] / 100.0, runs[r], NULL);
                if (!bad)
                    continue;
                char path[4096];
                snprintf(path, sizeof path, "%s/%.*s_r%zu_p%d.jpg", out, (int)stem, base, runs[r],
                         pcts[p]);
                FILE *f = fopen(path, "wb");
                if (!f || fwrite(bad, 1, n, f) != n || fclose(f) != 0) {
                    fprintf(stderr, "sluice_jpeg_damage: cannot write %s\n", path);
                    return 1;
                }
                free(bad);
                written++;
            }
        }
        free(src);
    }
    printf("wrote %d damaged JPEGs to %s\n", written, out);
    return 0;
}
