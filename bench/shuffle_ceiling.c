/*
 * shuffle_ceiling.c — what reading tiny records in a random order costs on
 * this machine at the bare minimum, against reading them in order: the
 * ceiling of "global shuffle ÷ no shuffle" that any reader can reach here.
 *
 * The reading threads' work and nothing else: T threads (default 2) take
 * chunks of 256 positions from one atomic counter; for each position the
 * record's bytes are checksummed as a .slr reader checks them (FORMAT.md 8:
 * XXH3-64 of the payload XOR XXH3-64 of the record number, with the same
 * libxxhash sluice uses) and its first `row` bytes copied into the thread's
 * batch rows (plus an 8-byte label into the label rows). The
 * records lie in one buffer of `records` x `stride` bytes (default 10,000 x
 * 872 = 8.7 MB, Fashion-MNIST t10k's .slr: 784-byte images, 832-byte
 * payloads after a 16-byte frame header), on 2 MB huge pages
 * (MADV_HUGEPAGE) or on 4 KB pages (MADV_NOHUGEPAGE). Orders:
 *
 *   seq       storage order
 *   table     sluice's global order (the keyed bijection), taken from a
 *             sluice pipeline with a global shuffle over the record
 *             numbers (16 epochs' orders, used in turn) and stored: the
 *             order costs one load a record, not its computation
 *   sorted    table, then each chunk's records read in address order
 *             into their own rows (the rows and bytes are the same)
 *
 * with a software prefetch of each record PREFETCH records ahead (0: none;
 * the hint covers the record's first `--hint` bytes, default 1024 as
 * sluice's).
 * `--work N` adds N dependent steps of SplitMix64's finaliser on each
 * record's checksum: the rest of a real reader's work a record (parsing,
 * bookkeeping), so that its in-order rate can be brought down to sluice's
 * and the same random reads compared against that.
 * Every run is whole epochs; the sum of the checksums of an epoch does not
 * depend on the order, so each run checks that it read every record once.
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/shuffle_ceiling.c \
 *      $(bash scripts/link_flags.sh build) -o shuffle_ceiling
 *   ./shuffle_ceiling [--threads 2] [--epochs 500] [--rounds 3] [--work 0] [--hint 1024]
 *                     [--records 10000] [--stride 872] [--payload 832] [--row 784]
 *                     [--configs huge:seq:4,huge:table:4,...]
 *
 * Each config is ORDER PAGES PREFETCH (pages: huge or 4k); the configs run
 * interleaved, `rounds` times, the order of the configs rotating by round.
 * Prints one JSON line per run, then each config's median records/s, its
 * ratio to the best in-order config on the same pages (÷ seq) and what a
 * record costs each thread beyond that config (+ns/rec).
 */
#include "sluice.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#define XXH_INLINE_ALL /* as sluice's reader has it: no call for a small record */
#include <xxhash.h>

#define CHUNK 256
#define FRAME_HEADER 16 /* a .slr frame: payload length and checksum (FORMAT.md) */
#define ORDERS 16       /* epochs' orders stored, used in turn */

enum { ORD_SEQ, ORD_TABLE, ORD_SORTED };
static const char *const ORD_NAME[] = {"seq", "table", "sorted"};

typedef struct config {
    int order, huge, prefetch;
} config;

typedef struct run {
    const uint8_t *buf;
    const uint64_t *table; /* ORDERS orders of `records` */
    uint64_t records, stride, payload, row, epochs, chunks_per_epoch;
    uint64_t hint; /* bytes of a record hinted */
    config cf;
    atomic_uint_fast64_t next; /* the next chunk of the stream */
    atomic_uint_fast64_t sum;  /* the checksums of every record read */
    atomic_uint_fast64_t sink; /* what --work computed */
    int work;
} run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* rec[0..n) into address order, row[] the row each goes to: one counting
 * pass over 256 buckets of the record range (a bucket holds records of
 * about records/256 x stride bytes: one chunk's records are that far apart
 * anyway). */
static void address_order(uint64_t *rec, uint64_t *row, uint64_t n, uint64_t records) {
    uint32_t count[257] = {0};
    uint64_t r2[CHUNK], w2[CHUNK];
    uint8_t b[CHUNK];
    for (uint64_t i = 0; i < n; i++) {
        b[i] = (uint8_t)(rec[i] * 256 / records);
        count[b[i] + 1]++;
    }
    for (int k = 0; k < 256; k++)
        count[k + 1] += count[k];
    for (uint64_t i = 0; i < n; i++) {
        uint32_t at = count[b[i]]++;
        r2[at] = rec[i];
        w2[at] = row[i];
    }
    memcpy(rec, r2, (size_t)n * sizeof rec[0]);
    memcpy(row, w2, (size_t)n * sizeof row[0]);
}

/* A .slr record's checksum (FORMAT.md 8, files with SLR_FEAT_SUM_XOR). */
static inline uint64_t record_sum(const uint8_t *p, size_t len, uint64_t record) {
    uint8_t le[8];
    for (int k = 0; k < 8; k++)
        le[k] = (uint8_t)(record >> (8 * k));
    return (uint64_t)XXH3_64bits(p, len) ^ (uint64_t)XXH3_64bits(le, sizeof le);
}

/* SplitMix64's finaliser, inline: --work's unit (sl_mix64 is a call). */
static inline uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ORDERS epochs of sluice's global order of `records` records (seed 0)
 * into table[e * records + j]: a pipeline over one int64 column holding
 * each record's number, shuffled globally, batches of 256. */
static int sluice_orders(uint64_t records, uint64_t *table) {
    sl_spec *spec;
    sl_pipeline *p = NULL;
    sl_tensor col;
    int64_t shape[1] = {(int64_t)records};
    const char *name[1] = {"i"};
    int rc = sl_spec_create(&spec);
    if (rc < 0)
        return rc;
    if ((rc = sl_tensor_alloc(&col, SL_I64, 1, shape)) < 0)
        goto out;
    for (uint64_t i = 0; i < records; i++)
        ((int64_t *)col.data)[i] = (int64_t)i;
    rc = sl_spec_set_source_columns(spec, 1, name, &col);
    sl_tensor_release(&col);
    if (rc < 0 || (rc = sl_spec_set_shuffle_mode(spec, SL_SHUFFLE_GLOBAL, 0, 0)) < 0 ||
        (rc = sl_spec_set_epochs(spec, ORDERS)) < 0 ||
        (rc = sl_spec_add_op_json(spec, "{\"op\": \"batch\", \"size\": 256}")) < 0 ||
        (rc = sl_pipeline_create(&p, spec)) < 0)
        goto out;
    uint64_t k = 0;
    sl_batch *b;
    for (int e = 0; e < ORDERS; e++) { /* SL_END after each epoch; the next call goes on */
        while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
            const sl_tensor *x = sl_batch_column(b, 0);
            for (int64_t i = 0; i < sl_batch_size(b) && k < ORDERS * records; i++)
                table[k++] = (uint64_t)((const int64_t *)x->data)[i];
            sl_batch_release(b);
        }
        if (rc < 0)
            goto out;
    }
    if (k != ORDERS * records) {
        fprintf(stderr, "shuffle_ceiling: sluice's order gave %llu positions, not %llu\n",
                (unsigned long long)k, (unsigned long long)(ORDERS * records));
        rc = -1;
    }
    rc = rc < 0 ? rc : SL_OK;
out:
    if (rc < 0 && rc != -1)
        fprintf(stderr, "shuffle_ceiling: sluice's order: %s\n", sl_errmsg());
    sl_pipeline_free(p);
    sl_spec_free(spec);
    return rc;
}

static inline void prefetch_record(const run *r, uint64_t rec) {
    const uint8_t *at = r->buf + rec * r->stride;
    for (uint64_t b = 0; b < r->hint && b < r->stride; b += 64)
        __builtin_prefetch(at + b);
}

static void *reader(void *arg) {
    run *r = arg;
    uint8_t *img = malloc((size_t)(CHUNK * r->row)), *lab = malloc(CHUNK * 8);
    uint64_t rec[CHUNK];
    uint64_t sum = 0, sink = 0;
    const int pf = r->cf.prefetch;
    for (;;) {
        uint64_t c = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed);
        uint64_t epoch = c / r->chunks_per_epoch;
        if (epoch >= r->epochs)
            break;
        uint64_t pos = (c % r->chunks_per_epoch) * CHUNK;
        uint64_t n = r->records - pos < CHUNK ? r->records - pos : CHUNK;
        const uint64_t *order = r->table + (epoch % ORDERS) * r->records;
        for (uint64_t i = 0; i < n; i++)
            rec[i] = r->cf.order == ORD_SEQ ? pos + i : order[pos + i];
        uint64_t row[CHUNK];
        for (uint64_t i = 0; i < n; i++)
            row[i] = i;
        if (r->cf.order == ORD_SORTED)
            address_order(rec, row, n, r->records);
        for (uint64_t i = 0; i < n && i < (uint64_t)pf; i++)
            prefetch_record(r, rec[i]);
        for (uint64_t i = 0; i < n; i++) {
            if (pf && i + (uint64_t)pf < n)
                prefetch_record(r, rec[i + (uint64_t)pf]);
            const uint8_t *pl = r->buf + rec[i] * r->stride + FRAME_HEADER;
            uint64_t h = record_sum(pl, (size_t)r->payload, rec[i]);
            sum += h;
            for (int k = 0; k < r->work; k++) /* the rest of a reader's work a record */
                h = mix(h);
            sink += h;
            memcpy(img + row[i] * r->row, pl, (size_t)r->row);
            memcpy(lab + row[i] * 8, pl + r->row, 8);
        }
    }
    atomic_fetch_add(&r->sum, sum);
    atomic_fetch_add(&r->sink, sink);
    free(img);
    free(lab);
    return NULL;
}

/* The records' buffer on huge or 4 KB pages, filled with bytes that differ
 * per record. */
static uint8_t *make_buffer(size_t len, int huge) {
    const size_t h = 2u << 20;
    size_t cap = (len + h - 1) / h * h;
    uint8_t *m = mmap(NULL, cap + h, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)m + h - 1) & ~(uintptr_t)(h - 1));
    if (madvise(a, cap, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0)
        fprintf(stderr, "shuffle_ceiling: madvise: no %s advice\n", huge ? "huge" : "4k");
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < len; i += 8) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        memcpy(a + i, &x, len - i < 8 ? len - i : 8);
    }
    return a;
}

/* AnonHugePages of this process, in kB (/proc/self/smaps_rollup). */
static long anon_huge_kb(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "re");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static int parse_configs(const char *s, config *out, int max) {
    int n = 0;
    char *dup = strdup(s), *save = NULL;
    for (char *t = strtok_r(dup, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save)) {
        char pages[8], ord[16];
        int pf;
        if (sscanf(t, "%7[^:]:%15[^:]:%d", pages, ord, &pf) != 3)
            goto bad;
        config c = {.order = -1, .huge = !strcmp(pages, "huge"), .prefetch = pf};
        for (int k = 0; k < 3; k++)
            if (!strcmp(ord, ORD_NAME[k]))
                c.order = k;
        if (c.order < 0 || (!c.huge && strcmp(pages, "4k")) || pf < 0 || pf > CHUNK)
            goto bad;
        out[n++] = c;
    }
    free(dup);
    return n;
bad:
    fprintf(stderr, "shuffle_ceiling: bad config in \"%s\" (PAGES:ORDER:PREFETCH, PAGES huge or "
                    "4k, ORDER seq, table or sorted)\n", s);
    free(dup);
    return -1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    uint64_t records = 10000, stride = 872, payload = 832, row = 784, epochs = 500, hint = 1024;
    int threads = 2, rounds = 3, work = 0;
    const char *configs = "huge:seq:0,huge:seq:4,huge:table:4,huge:table:16,huge:sorted:4,"
                          "4k:seq:4,4k:table:4";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--threads"))
            threads = atoi(v);
        else if (!strcmp(k, "--rounds"))
            rounds = atoi(v);
        else if (!strcmp(k, "--epochs"))
            epochs = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--records"))
            records = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--stride"))
            stride = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--payload"))
            payload = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--row"))
            row = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--hint"))
            hint = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--work"))
            work = atoi(v);
        else if (!strcmp(k, "--configs"))
            configs = v;
        else {
            fprintf(stderr, "shuffle_ceiling: unknown option %s (see the file's head)\n", k);
            return 2;
        }
    }
    if (argc % 2 == 0 || work < 0 || threads < 1 || threads > 64 || rounds < 1 || records < 2 ||
        records >= 1ull << 56 || payload + FRAME_HEADER > stride || row + 8 > payload) {
        fprintf(stderr, "shuffle_ceiling: bad arguments (see the file's head)\n");
        return 2;
    }
    config cf[32];
    int ncf = parse_configs(configs, cf, 32);
    if (ncf <= 0)
        return 2;
    uint8_t *buf[2] = {NULL, NULL}; /* 4 KB, huge */
    long huge_kb[2] = {0, 0};
    for (int h = 0; h < 2; h++) {
        int want = 0;
        for (int k = 0; k < ncf; k++)
            want |= cf[k].huge == h;
        if (!want)
            continue;
        long before = anon_huge_kb();
        if (!(buf[h] = make_buffer((size_t)(records * stride), h))) {
            perror("shuffle_ceiling: mmap");
            return 1;
        }
        huge_kb[h] = anon_huge_kb() - before;
    }
    uint64_t *table = malloc((size_t)(ORDERS * records) * sizeof *table);
    if (!table || sluice_orders(records, table) < 0)
        return 1;
    /* what one epoch's checksums add up to, in any order */
    uint64_t epoch_sum[2] = {0, 0};
    for (int h = 0; h < 2; h++)
        for (uint64_t i = 0; buf[h] && i < records; i++)
            epoch_sum[h] += record_sum(buf[h] + i * stride + FRAME_HEADER, (size_t)payload, i);
    fprintf(stderr, "shuffle_ceiling: %llu records of %llu bytes (%.1f MB), %d threads, %llu "
                    "epochs a run, work %d; AnonHugePages: huge buffer %ld kB, 4k buffer %ld kB\n",
            (unsigned long long)records, (unsigned long long)stride,
            (double)(records * stride) / 1e6, threads, (unsigned long long)epochs, work, huge_kb[1],
            huge_kb[0]);
    double *rate = calloc((size_t)(ncf * rounds), sizeof *rate);
    for (int rd = 0; rd < rounds; rd++) {
        for (int j = 0; j < ncf; j++) {
            int k = (j + rd) % ncf;
            run r = {.buf = buf[cf[k].huge], .table = table, .records = records,
                     .stride = stride, .payload = payload, .row = row, .epochs = epochs, .work = work, .hint = hint,
                     .chunks_per_epoch = (records + CHUNK - 1) / CHUNK, .cf = cf[k]};
            atomic_init(&r.next, 0);
            atomic_init(&r.sum, 0);
            atomic_init(&r.sink, 0);
            pthread_t th[64];
            double t0 = now_s();
            for (int t = 0; t < threads; t++)
                pthread_create(&th[t], NULL, reader, &r);
            for (int t = 0; t < threads; t++)
                pthread_join(th[t], NULL);
            double s = now_s() - t0;
            if (atomic_load(&r.sum) != epoch_sum[cf[k].huge] * epochs) {
                fprintf(stderr, "shuffle_ceiling: %s:%s:%d did not read every record once\n",
                        cf[k].huge ? "huge" : "4k", ORD_NAME[cf[k].order], cf[k].prefetch);
                return 1;
            }
            rate[k * rounds + rd] = (double)(records * epochs) / s;
            printf("{\"pages\": \"%s\", \"order\": \"%s\", \"prefetch\": %d, \"round\": %d, "
                   "\"records_per_s\": %.0f}\n",
                   cf[k].huge ? "huge" : "4k", ORD_NAME[cf[k].order], cf[k].prefetch, rd,
                   rate[k * rounds + rd]);
        }
    }
    /* medians, and each against the best in-order config on its pages */
    double med[32], best_seq[2] = {0, 0};
    for (int k = 0; k < ncf; k++) {
        double v[64];
        int nv = rounds < 64 ? rounds : 64;
        memcpy(v, rate + k * rounds, (size_t)nv * sizeof v[0]);
        qsort(v, (size_t)nv, sizeof v[0], cmp_double);
        med[k] = v[nv / 2];
        if (cf[k].order == ORD_SEQ && med[k] > best_seq[cf[k].huge])
            best_seq[cf[k].huge] = med[k];
    }
    printf("%-6s %-8s %8s %12s %8s %9s  %s\n", "pages", "order", "prefetch", "records/s",
           "÷ seq", "+ns/rec", "runs");
    for (int k = 0; k < ncf; k++) {
        printf("%-6s %-8s %8d %12.0f", cf[k].huge ? "huge" : "4k", ORD_NAME[cf[k].order],
               cf[k].prefetch, med[k]);
        double q = best_seq[cf[k].huge];
        if (q > 0) /* the ratio, and the time a record costs each thread beyond in order */
            printf(" %8.3f %9.1f", med[k] / q, (double)threads * (1 / med[k] - 1 / q) * 1e9);
        else
            printf(" %8s %9s", "-", "-");
        printf("  (");
        for (int rd = 0; rd < rounds; rd++)
            printf("%s%.2f M", rd ? " " : "", rate[k * rounds + rd] / 1e6);
        printf(")\n");
    }
    free(rate);
    free(table);
    return 0;
}
