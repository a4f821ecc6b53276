/* pipe_util.h — helpers shared by the pipeline tests (static, header-only). */
#ifndef PIPE_UTIL_H
#define PIPE_UTIL_H

#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <time.h>
#include <unistd.h>

/* A map that computes (not sleeps) for about `user` microseconds of its
 * thread's CPU time, whatever else runs on the machine. */
static inline int pu_spin_map(sl_sample *s, sl_rng *rng, void *user) {
    (void)s;
    (void)rng;
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    long want = (long)(uintptr_t)user * 1000;
    volatile uint64_t x = 1;
    do {
        for (int k = 0; k < 100; k++)
            x = x * 6364136223846793005ull + 1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < want);
    return SL_OK;
}

/* A memory spec of n samples: "x" uint8[28,28] filled from the sample index,
 * "label" int64 = i % 10. */
static inline sl_spec *pu_memory_spec(uint64_t n) {
    sl_spec *spec;
    if (sl_spec_create(&spec) != SL_OK)
        sl_test_fail(__FILE__, __LINE__, "spec_create");
    sl_tensor cols[2];
    int64_t xs[3] = {(int64_t)n, 28, 28}, ls[1] = {(int64_t)n};
    ASSERT_OK(sl_tensor_alloc(&cols[0], SL_U8, 3, xs));
    ASSERT_OK(sl_tensor_alloc(&cols[1], SL_I64, 1, ls));
    uint8_t *x = cols[0].data;
    int64_t *l = cols[1].data;
    for (uint64_t i = 0; i < n; i++) {
        for (int k = 0; k < 28 * 28; k++)
            x[i * 784 + (uint64_t)k] = (uint8_t)(sl_mix64(i * 1000 + (uint64_t)k) & 0xff);
        x[i * 784] = (uint8_t)i;
        x[i * 784 + 1] = (uint8_t)(i >> 8);
        l[i] = (int64_t)(i % 10);
    }
    const char *names[2] = {"x", "label"};
    ASSERT_OK(sl_spec_set_source_columns(spec, 2, names, cols));
    sl_tensor_release(&cols[0]);
    sl_tensor_release(&cols[1]);
    return spec;
}

/* Digest of a batch: every column's name, dtype, shape and bytes. */
static inline uint64_t pu_digest(const sl_batch *b) {
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    for (int c = 0; c < sl_batch_ncols(b); c++) {
        const char *name = sl_batch_name(b, c);
        XXH3_64bits_update(st, name, strlen(name));
        int64_t n = sl_batch_is_ragged(b, c) ? sl_batch_size(b) : 1;
        for (int64_t i = 0; i < n; i++) {
            const sl_tensor *t = sl_batch_is_ragged(b, c) ? sl_batch_item(b, c, i)
                                                          : sl_batch_column(b, c);
            XXH3_64bits_update(st, &t->dtype, sizeof t->dtype);
            XXH3_64bits_update(st, &t->ndim, sizeof t->ndim);
            XXH3_64bits_update(st, t->shape, sizeof(int64_t) * (size_t)t->ndim);
            XXH3_64bits_update(st, t->data, t->nbytes);
        }
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

/* Run one epoch; store up to cap digests; return the batch count. */
static inline int pu_run_epoch(sl_pipeline *p, uint64_t *dig, int cap) {
    int n = 0;
    for (;;) {
        sl_batch *b;
        int rc = sl_pipeline_next(p, &b);
        if (rc == SL_END)
            return n;
        if (rc != SL_OK)
            sl_test_fail(__FILE__, __LINE__, "next: %s (%s)", sl_status_str(rc), sl_errmsg());
        if (n < cap)
            dig[n] = pu_digest(b);
        n++;
        sl_batch_release(b);
    }
}

/* Run `spec` (then freed) for one epoch: the index of each sample it yields
 * (bytes 0-1 of its first column, as pu_memory_spec writes them) into
 * out[0..cap), the batch count into *batches (checked against
 * sl_pipeline_len). Returns the number of samples. */
static inline int pu_spec_indices(sl_spec *spec, uint64_t *out, int cap, int *batches) {
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    int k = 0;
    *batches = 0;
    sl_batch *b;
    while (sl_pipeline_next(p, &b) == SL_OK) {
        const sl_tensor *x = sl_batch_column(b, 0);
        for (int64_t i = 0; i < sl_batch_size(b); i++) {
            const uint8_t *px = (const uint8_t *)x->data + i * 784;
            if (k < cap)
                out[k] = px[0] | ((uint64_t)px[1] << 8);
            k++;
        }
        (*batches)++;
        sl_batch_release(b);
    }
    ASSERT_EQ(*batches, sl_pipeline_len(p));
    sl_pipeline_free(p);
    sl_spec_free(spec);
    return k;
}

/* One epoch over w ranks of n samples, sharded by `eq`: count[i] is how
 * often sample i was seen over all ranks, ns[r] and nb[r] the samples and
 * batches of rank r. Padded: every sample, and only the padding repeats
 * (ceil(n / w) each); dropped: w * floor(n / w) distinct samples; neither:
 * every sample once; padded or dropped, every rank yields the same batches. */
static inline void pu_check_shards(sl_shard_equal eq, uint64_t n, int w, const int *count,
                                   const int *ns, const int *nb) {
    int covered = 0, dup = 0, sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        covered += count[i] > 0;
        dup += count[i] > 1 ? count[i] - 1 : 0;
    }
    uint64_t per = n / (uint64_t)w, per_pad = (n + (uint64_t)w - 1) / (uint64_t)w;
    for (int r = 0; r < w; r++)
        sum += ns[r];
    if (eq == SL_SHARD_PAD) {
        ASSERT_EQ(covered, n);                         /* union = the whole dataset */
        ASSERT_EQ(dup, (uint64_t)w * per_pad - n);     /* only the padding repeats */
        for (int r = 0; r < w; r++)
            ASSERT_EQ(ns[r], per_pad);
    } else if (eq == SL_SHARD_DROP) {
        ASSERT_EQ(dup, 0);
        ASSERT_EQ(covered, (uint64_t)w * per);
        for (int r = 0; r < w; r++)
            ASSERT_EQ(ns[r], per);
    } else {
        ASSERT_EQ(dup, 0);
        ASSERT_EQ(covered, n);
        ASSERT_EQ(sum, n);
    }
    if (eq != SL_SHARD_NONE)
        for (int r = 1; r < w; r++)
            ASSERT_EQ(nb[r], nb[0]); /* every rank yields the same batches */
}

static inline double pu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* n records: "image" bytes "payload-%05d-..." (200 bytes), "label" = i % 10,
 * written with `shard_bytes` (0: one file). */
static inline void make_slr_shards(const char *path, int n, uint64_t shard_bytes) {
    sl_schema *sc;
    ASSERT_OK(sl_schema_create(&sc));
    ASSERT_OK(sl_schema_add(sc, "image", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0));
    ASSERT_OK(sl_schema_add(sc, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0));
    sl_writer *w;
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.fsync = 0;
    o.shard_bytes = shard_bytes;
    ASSERT_OK(sl_writer_open(&w, path, sc, &o));
    for (int i = 0; i < n; i++) {
        char buf[200], piece[48];
        for (int k = 0; k < 200; k += 20) {
            snprintf(piece, sizeof piece, "payload-%05d-%05d", i % 100000, k);
            memcpy(buf + k, piece, 20);
        }
        sl_tensor cols[2];
        int64_t shape[1] = {200};
        sl_tensor_view(&cols[0], buf, SL_U8, 1, shape);
        int64_t label = i % 10;
        sl_tensor_view(&cols[1], &label, SL_I64, 0, NULL);
        ASSERT_OK(sl_writer_append(w, cols, 2));
    }
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    sl_schema_free(sc);
}

static inline void make_slr(const char *path, int n) { make_slr_shards(path, n, 0); }

/* A pipeline from a spec JSON with one %s (a path) in it. */
static inline sl_pipeline *pu_json_pipeline(const char *json_fmt, const char *path) {
    char json[2048];
    snprintf(json, sizeof json, json_fmt, path);
    sl_spec *spec;
    ASSERT_OK(sl_spec_from_json(&spec, json));
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_spec_free(spec);
    return p;
}

/* XOR the byte `at` bytes past the first `needle` in file `path` with `x`;
 * 1 when the needle was there, 0 when not. */
static inline int pu_patch_after(const char *path, const char *needle, long at, int x) {
    FILE *f = fopen(path, "r+b");
    if (!f)
        return 0;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)size);
    ASSERT(data);
    ASSERT_EQ(fread(data, 1, (size_t)size, f), size);
    char *hit = memmem(data, (size_t)size, needle, strlen(needle));
    if (hit) {
        ASSERT(hit - data + at < size);
        fseek(f, (long)(hit - data) + at, SEEK_SET);
        fputc(hit[at] ^ x, f);
    }
    fclose(f);
    free(data);
    return hit != NULL;
}

/* A spec over n encoded images in memory (sl_spec_set_source_samples
 * copies them): "image", their bytes, and "label", int64 labels[i]. */
static inline sl_spec *pu_images_spec(uint8_t *const *jpeg, const size_t *size,
                                      const int64_t *labels, int n) {
    sl_sample *samples = calloc((size_t)n, sizeof *samples);
    ASSERT(samples);
    for (int i = 0; i < n; i++) {
        int64_t len = (int64_t)size[i];
        sl_tensor_view(&samples[i].col[0], jpeg[i], SL_U8, 1, &len);
        sl_tensor_view(&samples[i].col[1], (void *)&labels[i], SL_I64, 0, NULL);
        samples[i].ncols = 2;
        samples[i].index = (uint64_t)i;
    }
    sl_spec *spec;
    ASSERT_OK(sl_spec_create(&spec));
    const char *names[2] = {"image", "label"};
    ASSERT_OK(sl_spec_set_source_samples(spec, 2, names, samples, n));
    free(samples);
    return spec;
}

/* The batches a pipeline hands out before its first return other than
 * SL_OK (which goes into *rc), each released. */
static inline int pu_good_batches(sl_pipeline *p, int *rc) {
    sl_batch *b;
    int good = 0;
    while ((*rc = sl_pipeline_next(p, &b)) == SL_OK) {
        good++;
        sl_batch_release(b);
    }
    return good;
}

#endif
