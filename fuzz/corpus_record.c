/*
 * corpus_record.c — writes the seed corpus of fuzz_record into a directory:
 * valid files covering every column type, zstd, variable shapes, metadata and
 * zero records; an interrupted (.partial) shard; a dataset manifest; and
 * damaged variants (truncated, flipped bytes). Deterministic.
 *
 *   corpus_record OUT_DIR
 */
#include "sluice.h"

#include "record/record_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *g_out;

static void die(const char *what) {
    fprintf(stderr, "corpus_record: %s: %s\n", what, sl_errmsg());
    exit(1);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len)
        die(path);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void emit(const char *name, const uint8_t *p, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_out, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0)
        die(path);
}

/* Write `nrec` records of a schema with every column type. */
static void write_all_types(const char *path, int nrec, unsigned zflags, uint64_t shard_bytes,
                            sl_writer **keep_open) {
    sl_schema *s;
    int64_t fixed[2] = {2, 3}, var[2] = {-1, 3};
    if (sl_schema_create(&s) ||
        sl_schema_add(s, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0) ||
        sl_schema_add(s, "score", SL_COL_FLOAT64, SL_DTYPE_INVALID, 0, NULL, 0) ||
        sl_schema_add(s, "name", SL_COL_STRING, SL_DTYPE_INVALID, 0, NULL, zflags) ||
        sl_schema_add(s, "img", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0) ||
        sl_schema_add(s, "box", SL_COL_ARRAY, SL_F32, 2, fixed, zflags) ||
        sl_schema_add(s, "pts", SL_COL_ARRAY, SL_U16, 2, var, zflags))
        die("schema");
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.fsync = 0;
    o.shard_bytes = shard_bytes;
    sl_writer *w;
    if (sl_writer_open(&w, path, s, &o))
        die(path);
    if (sl_writer_set_meta(w, "classes", "[\"cat\",\"dog\"]"))
        die("meta");
    for (int i = 0; i < nrec; i++) {
        int64_t label = i % 3;
        double score = i * 0.25;
        char name[16];
        snprintf(name, sizeof name, "r%d", i * 7);
        uint8_t img[20];
        float box[6];
        uint16_t pts[12];
        for (int k = 0; k < 20; k++)
            img[k] = (uint8_t)(i + k);
        for (int k = 0; k < 6; k++)
            box[k] = (float)(i * k);
        for (int k = 0; k < 12; k++)
            pts[k] = (uint16_t)(i * 100 + k);
        int64_t nl = (int64_t)strlen(name), il = i % 21, ps[2] = {i % 4, 3};
        sl_tensor t[6];
        sl_tensor_view(&t[0], &label, SL_I64, 0, NULL);
        sl_tensor_view(&t[1], &score, SL_F64, 0, NULL);
        sl_tensor_view(&t[2], name, SL_U8, 1, &nl);
        sl_tensor_view(&t[3], img, SL_U8, 1, &il);
        sl_tensor_view(&t[4], box, SL_F32, 2, fixed);
        sl_tensor_view(&t[5], pts, SL_U16, 2, ps);
        if (sl_writer_append(w, t, 6))
            die("append");
    }
    sl_schema_free(s);
    if (keep_open) {
        *keep_open = w;
        return;
    }
    if (sl_writer_close(w))
        die("close");
    sl_writer_free(w);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: corpus_record OUT_DIR\n");
        return 2;
    }
    g_out = argv[1];
    mkdir(g_out, 0755);
    char tmp[] = "/tmp/sluice-corpus-XXXXXX";
    if (!mkdtemp(tmp))
        die("mkdtemp");
    char path[512];
    size_t n;
    uint8_t *b;

    const struct { const char *name; int nrec; unsigned z; } files[] = {
        {"all_types.slr", 6, 0}, {"all_types_zstd.slr", 6, SL_COLF_ZSTD},
        {"zero_records.slr", 0, 0}, {"one_record.slr", 1, SL_COLF_ZSTD},
    };
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        snprintf(path, sizeof path, "%s/%s", tmp, files[f].name);
        write_all_types(path, files[f].nrec, files[f].z, 0, NULL);
        b = slurp(path, &n);
        emit(files[f].name, b, n);
        if (f == 0) {
            emit("truncated_half.slr", b, n / 2);
            emit("truncated_footer.slr", b, n - 9);
            b[n / 3] ^= 0x40;
            emit("flipped_record.slr", b, n);
            b[n / 3] ^= 0x40;
            b[n - 30] ^= 0x01;
            emit("flipped_footer.slr", b, n);
            b[n - 30] ^= 0x01;
            b[8] = 2;
            emit("newer_version.slr", b, n);
        }
        free(b);
        unlink(path);
    }

    /* An interrupted write: the .partial shard as a killed writer leaves it. */
    sl_writer *w;
    snprintf(path, sizeof path, "%s/torn.slr", tmp);
    write_all_types(path, 5, SL_COLF_ZSTD, 0, &w);
    if (sl_writer__flush(w))
        die("flush");
    snprintf(path, sizeof path, "%s/torn.slr.partial/shard-00000.slr.partial", tmp);
    b = slurp(path, &n);
    emit("partial_shard.slr", b, n);
    emit("partial_shard_torn.slr", b, n - 5);
    free(b);
    sl_writer_free(w);

    /* A sharded dataset's manifest (fuzzed against the fuzzer's own shards). */
    snprintf(path, sizeof path, "%s/ds", tmp);
    write_all_types(path, 20, 0, 900, NULL);
    char man[600];
    snprintf(man, sizeof man, "%s/manifest.json", path);
    b = slurp(man, &n);
    emit("manifest.json", b, n);
    free(b);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        die("cleanup");
    return 0;
}
