/*
 * fuzz_manifest.c — the manifest.json of a sharded dataset directory
 * (src/record/manifest.c) and the reader's cross-checks of it against the
 * shards' footers (open_dir in src/record/record_reader.c).
 *
 * The directory holds a valid dataset of three shards written once per
 * process, plus one valid single-file dataset (extra.slr, 5 records) that a
 * manifest may name as its only shard. Every record r of either carries
 * label r and bytes that depend on r alone, so a dataset that opens can be
 * checked record by record whatever shards the manifest chose.
 *
 * Input:
 *   - starting with '{': the manifest text, as is (the JSON parser and the
 *     strict field checks);
 *   - otherwise a recipe (fuzz_data_producer.h): start from the true
 *     manifest of the three shards, of extra.slr alone, or of a prefix of
 *     the shards, then apply a few drawn mutations (a field off by one, a
 *     wrong type, a checksum digit, a swapped or repeated shard, a name that
 *     escapes the directory, metadata). Random bytes cannot forge footer
 *     checksums; this mode gets past them to the cross-checks.
 * The contract checked: an error whose message names the dataset, or a
 * reader with the manifest's count whose every record reads, holding the
 * expected label and bytes, or fails naming the dataset (a shard that
 * disagrees with the manifest is found when a read opens it), verify
 * counting the same failures; an unmutated recipe must open and read whole.
 * Never a crash, a leak or a hang.
 */
#include "sluice.h"

#include "fuzz_data_producer.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NREC 12
#define NEXTRA 5
#define MAXSH 16

typedef struct {
    char file[64];
    uint64_t first, records, bytes;
    char sum[17];
} shard_fact;

static char g_dir[256], g_ds[300], g_manifest[320], g_extra[320];
static shard_fact g_sh[MAXSH];
static int g_nsh;
static shard_fact g_extra_fact;


static void die(const char *what) {
    fprintf(stderr, "fuzz_manifest: %s: %s\n", what, sl_errmsg());
    abort();
}

/* The bytes of record r: a length and contents that depend on r only. */
static size_t record_bytes(uint64_t r, uint8_t *out) {
    size_t n = 24 + (size_t)(r % 7) * 5;
    for (size_t k = 0; k < n; k++)
        out[k] = (uint8_t)(r * 31 + k * 3);
    return n;
}

static void write_dataset(const char *path, int nrec, uint64_t shard_bytes) {
    sl_schema *s;
    if (sl_schema_create(&s) != SL_OK ||
        sl_schema_add(s, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0) != SL_OK ||
        sl_schema_add(s, "data", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0) != SL_OK)
        die("schema");
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.shard_bytes = shard_bytes;
    o.fsync = 0;
    sl_writer *w;
    if (sl_writer_open(&w, path, s, &o) != SL_OK)
        die("writer");
    if (sl_writer_set_meta(w, "origin", "fuzz") != SL_OK)
        die("meta");
    for (int64_t i = 0; i < nrec; i++) {
        uint8_t b[64];
        int64_t n = (int64_t)record_bytes((uint64_t)i, b);
        sl_tensor t[2];
        sl_tensor_view(&t[0], &i, SL_I64, 0, NULL);
        sl_tensor_view(&t[1], b, SL_U8, 1, &n);
        if (sl_writer_append(w, t, 2) != SL_OK)
            die("append");
    }
    if (sl_writer_close(w) != SL_OK)
        die("close");
    sl_writer_free(w);
    sl_schema_free(s);
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        abort();
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len)
        abort();
    fclose(f);
    b[len] = '\0';
    *n = (size_t)len;
    return b;
}

static void init(void) {
    if (g_dir[0])
        return;
    snprintf(g_dir, sizeof g_dir, "%s", fuzz_tmpdir("manifest"));
    snprintf(g_ds, sizeof g_ds, "%s/ds", g_dir);
    snprintf(g_manifest, sizeof g_manifest, "%s/manifest.json", g_ds);
    snprintf(g_extra, sizeof g_extra, "%s/extra.slr", g_ds);
    sl_log_set_level(SL_LOG_ERROR);

    /* Small shard_bytes: a few records per shard. */
    write_dataset(g_ds, NREC, 1200);
    size_t n;
    char *text = slurp(g_manifest, &n);
    cJSON *m = cJSON_Parse(text);
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(m, "shards"), *s;
    cJSON_ArrayForEach(s, shards) {
        if (g_nsh == MAXSH)
            abort();
        shard_fact *f = &g_sh[g_nsh++];
        snprintf(f->file, sizeof f->file, "%s",
                 cJSON_GetObjectItemCaseSensitive(s, "file")->valuestring);
        f->first = (uint64_t)cJSON_GetObjectItemCaseSensitive(s, "first")->valuedouble;
        f->records = (uint64_t)cJSON_GetObjectItemCaseSensitive(s, "records")->valuedouble;
        f->bytes = (uint64_t)cJSON_GetObjectItemCaseSensitive(s, "bytes")->valuedouble;
        snprintf(f->sum, sizeof f->sum, "%s",
                 cJSON_GetObjectItemCaseSensitive(s, "footer_checksum")->valuestring);
    }
    cJSON_Delete(m);
    free(text);
    if (g_nsh < 2)
        abort(); /* the recipes assume a sharded dataset */
    if (getenv("SLUICE_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_manifest: %d shards\n", g_nsh);

    /* extra.slr: a single-file dataset inside the directory. */
    write_dataset(g_extra, NEXTRA, 0);
    uint8_t *b = (uint8_t *)slurp(g_extra, &n);
    uint64_t sum = 0;
    for (int i = 7; i >= 0; i--)
        sum = (sum << 8) | b[n - 64 + 48 + (size_t)i]; /* footer_checksum (docs/FORMAT.md) */
    free(b);
    snprintf(g_extra_fact.file, sizeof g_extra_fact.file, "extra.slr");
    g_extra_fact.first = 0;
    g_extra_fact.records = NEXTRA;
    g_extra_fact.bytes = n;
    snprintf(g_extra_fact.sum, sizeof g_extra_fact.sum, "%016llx", (unsigned long long)sum);
}

static void write_manifest(const uint8_t *p, size_t n) {
    FILE *f = fopen(g_manifest, "wb");
    if (!f)
        abort();
    if (n && fwrite(p, 1, n, f) != n)
        abort();
    if (fclose(f) != 0)
        abort();
}

/* A value near `v`: one off either way, 0, inexact, negative or large. */
static double perturb(fuzz_producer *fp, double v) {
    switch (fuzz_producer_range(fp, 0, 6)) {
    case 0: return v + 1;
    case 1: return v - 1;
    case 2: return 0;
    case 3: return 9007199254740993.0; /* 2^53 + 1: not exact in a double */
    case 4: return v + 0.5;
    case 5: return -v - 1;
    default: return (double)fuzz_producer_range(fp, 0, 0xffffffff);
    }
}

/* Replace o[key] by something else of a drawn kind (or remove it). */
static void mutate_field(fuzz_producer *fp, cJSON *o, const char *key) {
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(o, key);
    double v = cJSON_IsNumber(old) ? old->valuedouble : 0;
    cJSON *nv;
    switch (fuzz_producer_range(fp, 0, 4)) {
    case 0: cJSON_DeleteItemFromObjectCaseSensitive(o, key); return;
    case 1: nv = cJSON_CreateString(cJSON_IsString(old) ? "1" : "x"); break;
    case 2: nv = cJSON_CreateNull(); break;
    case 3: nv = cJSON_CreateArray(); break;
    default: nv = cJSON_CreateNumber(perturb(fp, v)); break;
    }
    if (!nv)
        abort();
    if (old)
        cJSON_ReplaceItemInObjectCaseSensitive(o, key, nv);
    else
        cJSON_AddItemToObject(o, key, nv);
}

static cJSON *shard_json(const shard_fact *f) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "file", f->file) ||
        !cJSON_AddNumberToObject(o, "first", (double)f->first) ||
        !cJSON_AddNumberToObject(o, "records", (double)f->records) ||
        !cJSON_AddNumberToObject(o, "bytes", (double)f->bytes) ||
        !cJSON_AddStringToObject(o, "footer_checksum", f->sum))
        abort();
    return o;
}

static const char *const g_names[] = {"missing.slr", "../ds/extra.slr", "manifest.json", "",
                                      ".", "..", "a/b", "extra.slr"};
#define NNAMES (sizeof g_names / sizeof g_names[0])

/* One mutation of shard entry `o`. */
static void mutate_shard(fuzz_producer *fp, cJSON *o) {
    if (!cJSON_IsObject(o))
        return;
    switch (fuzz_producer_range(fp, 0, 5)) {
    case 0: {
        size_t k = fuzz_producer_pick(fp, NNAMES + (size_t)g_nsh);
        cJSON *nv = cJSON_CreateString(k < NNAMES ? g_names[k] : g_sh[k - NNAMES].file);
        if (cJSON_GetObjectItemCaseSensitive(o, "file"))
            cJSON_ReplaceItemInObjectCaseSensitive(o, "file", nv);
        else
            cJSON_AddItemToObject(o, "file", nv);
        break;
    }
    case 1: mutate_field(fp, o, "first"); break;
    case 2: mutate_field(fp, o, "records"); break;
    case 3: mutate_field(fp, o, "bytes"); break;
    case 4: {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "footer_checksum");
        char sum[40];
        snprintf(sum, sizeof sum, "%s", cJSON_IsString(s) ? s->valuestring : "0");
        size_t len = strlen(sum);
        switch (fuzz_producer_range(fp, 0, 3)) {
        case 0: /* one digit changed */
            if (len) {
                size_t i = fuzz_producer_pick(fp, len);
                sum[i] = sum[i] == '0' ? '1' : '0';
            }
            break;
        case 1: /* upper case: the same number */
            for (size_t i = 0; i < len; i++)
                if (sum[i] >= 'a' && sum[i] <= 'f')
                    sum[i] = (char)(sum[i] - 'a' + 'A');
            break;
        case 2: /* one digit short, or a sign or space in front */
            if (len) {
                if (fuzz_producer_bool(fp))
                    sum[len - 1] = '\0';
                else
                    sum[0] = fuzz_producer_bool(fp) ? '+' : ' ';
            }
            break;
        default: {
            char tmp[40];
            snprintf(tmp, sizeof tmp, "0x%.14s", sum);
            memcpy(sum, tmp, sizeof sum);
            break;
        }
        }
        cJSON *nv = cJSON_CreateString(sum);
        if (s)
            cJSON_ReplaceItemInObjectCaseSensitive(o, "footer_checksum", nv);
        else
            cJSON_AddItemToObject(o, "footer_checksum", nv);
        break;
    }
    default: mutate_field(fp, o, "footer_checksum"); break;
    }
}

/* Build a manifest from the recipe; *pristine says no mutation was made,
 * so it must open. Shard entries are kept in a plain array until the end
 * (moving items inside a cJSON array is fiddly). */
static char *recipe(fuzz_producer *fp, int *pristine) {
    cJSON *item[MAXSH + 8];
    int nsh = 0;
    uint64_t records = 0;
    int base = (int)fuzz_producer_range(fp, 0, 2);
    if (base == 1) {
        item[nsh++] = shard_json(&g_extra_fact);
        records = g_extra_fact.records;
    } else {
        int n = base == 0 ? g_nsh : 1 + (int)fuzz_producer_pick(fp, (size_t)g_nsh);
        for (int i = 0; i < n; i++) {
            item[nsh++] = shard_json(&g_sh[i]);
            records += g_sh[i].records;
        }
    }
    cJSON *root = cJSON_CreateObject();
    if (!root)
        abort();
    cJSON_AddStringToObject(root, "format", "sluice-dataset");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddNumberToObject(root, "records", (double)records);
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "origin", "fuzz");

    int nmut = (int)fuzz_producer_range(fp, 0, 4);
    *pristine = nmut == 0;
    for (int m = 0; m < nmut; m++) {
        switch (fuzz_producer_range(fp, 0, 7)) {
        case 0:
            if (nsh > 0)
                mutate_shard(fp, item[fuzz_producer_pick(fp, (size_t)nsh)]);
            break;
        case 1: mutate_field(fp, root, "records"); break;
        case 2: mutate_field(fp, root, "version"); break;
        case 3:
            cJSON_ReplaceItemInObjectCaseSensitive(
                root, "format",
                cJSON_CreateString(fuzz_producer_bool(fp) ? "sluice-dataset " : "SLUICE-DATASET"));
            break;
        case 4: /* repeat a shard at another place, or swap two */
            if (nsh > 0) {
                int a = (int)fuzz_producer_pick(fp, (size_t)nsh);
                int b = (int)fuzz_producer_pick(fp, (size_t)nsh);
                if (fuzz_producer_bool(fp)) {
                    if (nsh == (int)(sizeof item / sizeof item[0]))
                        break;
                    cJSON *dup = cJSON_Duplicate(item[a], 1);
                    if (!dup)
                        abort();
                    memmove(&item[b + 1], &item[b], (size_t)(nsh - b) * sizeof item[0]);
                    item[b] = dup;
                    nsh++;
                } else {
                    cJSON *t = item[a];
                    item[a] = item[b];
                    item[b] = t;
                }
            }
            break;
        case 5: /* drop a shard (possibly the last: an empty list) */
            if (nsh > 0) {
                int k = (int)fuzz_producer_pick(fp, (size_t)nsh);
                cJSON_Delete(item[k]);
                memmove(&item[k], &item[k + 1], (size_t)(nsh - k - 1) * sizeof item[0]);
                nsh--;
            }
            break;
        case 6: { /* metadata: a repeated key, an empty key, a non-string value */
            static const char *const keys[] = {"origin", "", "k", "classes"};
            const char *k = keys[fuzz_producer_pick(fp, 4)];
            if (fuzz_producer_bool(fp))
                cJSON_AddStringToObject(meta, k, "v");
            else
                cJSON_AddNumberToObject(meta, k, 1);
            break;
        }
        default: /* a key the format does not define */
            cJSON_AddNumberToObject(root, fuzz_producer_bool(fp) ? "extra" : "shards_", 1);
            break;
        }
    }
    cJSON *shards = cJSON_AddArrayToObject(root, "shards");
    if (!shards)
        abort();
    for (int i = 0; i < nsh; i++)
        if (!cJSON_AddItemToArray(shards, item[i]))
            abort();
    cJSON_AddItemToObject(root, "meta", meta);
    char *text = fuzz_producer_bool(fp) ? cJSON_Print(root) : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text)
        abort();
    return text;
}

static void check_open(unsigned flags, int pristine, int known, uint64_t records) {
    sl_reader *r = NULL;
    int rc = sl_reader_open(&r, g_ds, flags);
    if (getenv("SLUICE_FUZZ_VERBOSE"))
        fprintf(stderr, "open: %d %s\n", rc, rc < 0 ? sl_errmsg() : "");
    if (rc < 0) {
        const char *m = sl_errmsg();
        if (!m[0] || (rc != SL_ENOMEM && !strstr(m, g_ds))) {
            fprintf(stderr, "open failed (%d) with a message that names no file: '%s'\n", rc, m);
            abort();
        }
        if (pristine) {
            fprintf(stderr, "an unmutated manifest does not open: %s\n", m);
            abort();
        }
        return;
    }
    uint64_t n = sl_reader_count(r);
    if (known && n != records) {
        fprintf(stderr, "manifest says %llu records, the reader has %llu\n",
                (unsigned long long)records, (unsigned long long)n);
        abort();
    }
    const sl_schema *s = sl_reader_schema(r);
    if (sl_schema_ncols(s) != 2)
        abort();
    /* Shards are opened by the reads that need them (FORMAT.md, section 9):
     * a manifest that disagrees with a shard opens, and every record of that
     * shard fails, each time with a message naming the dataset's file; the
     * others read right. An unmutated manifest reads whole. */
    const void *labels = NULL;
    rc = sl_reader_index_column(r, 0, &labels);
    if (rc < 0 && (pristine || !sl_errmsg()[0] || (rc != SL_ENOMEM && !strstr(sl_errmsg(), g_ds)))) {
        fprintf(stderr, "the label column does not read: %s\n", sl_errmsg());
        abort();
    }
    if (rc < 0)
        labels = NULL;
    sl_record *rec;
    if (sl_record_create(&rec) != SL_OK)
        abort();
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        rc = sl_reader_read(r, i, rec);
        if (rc < 0) {
            const char *m = sl_errmsg();
            if (pristine || !m[0] || (rc != SL_ENOMEM && !strstr(m, g_ds))) {
                fprintf(stderr, "record %llu of an opened dataset does not read: %s\n",
                        (unsigned long long)i, m);
                abort();
            }
            bad++;
            continue;
        }
        uint8_t want[64];
        size_t wn = record_bytes(i, want);
        const sl_tensor *tl = sl_record_column(rec, 0), *td = sl_record_column(rec, 1);
        if (*(const int64_t *)tl->data != (int64_t)i ||
            (labels && ((const int64_t *)labels)[i] != (int64_t)i) || td->nbytes != wn ||
            memcmp(td->data, want, wn) != 0) {
            fprintf(stderr, "record %llu reads back wrong data\n", (unsigned long long)i);
            abort();
        }
    }
    sl_record_free(rec);
    uint64_t vbad = 0;
    rc = sl_reader_verify(r, 1, &vbad, NULL, NULL);
    if ((rc == SL_OK) != (bad == 0) || (rc < 0 && rc != SL_ENOMEM && vbad != bad)) {
        fprintf(stderr, "verify (%d, %llu bad) disagrees with the reads (%llu bad)\n", rc,
                (unsigned long long)vbad, (unsigned long long)bad);
        abort();
    }
    int nm = sl_reader_meta_count(r);
    for (int i = 0; i < nm; i++) {
        const char *k = sl_reader_meta_key(r, i);
        if (!k || !sl_reader_meta(r, k))
            abort();
    }
    sl_reader_free(r);
}

/* The record count a manifest text declares, when it says one plainly. */
static int declared_count(const char *text, size_t n, uint64_t *out) {
    cJSON *m = cJSON_ParseWithLength(text, n);
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(m, "records");
    int known = cJSON_IsNumber(rec) && rec->valuedouble >= 0 && rec->valuedouble < 1e15;
    *out = known ? (uint64_t)rec->valuedouble : 0;
    cJSON_Delete(m);
    return known;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init();
    uint64_t records;
    if (size > 0 && data[0] == '{') {
        write_manifest(data, size);
        int known = declared_count((const char *)data, size, &records);
        check_open(0, 0, known, records);
        check_open(SL_READ_NO_MMAP, 0, known, records);
        return 0;
    }
    fuzz_producer fp;
    fuzz_producer_init(&fp, data, size);
    unsigned flags = (unsigned)fuzz_producer_range(&fp, 0, 3);
    flags = (flags & 1 ? SL_READ_NO_MMAP : 0) | (flags & 2 ? SL_READ_NO_VERIFY : 0);
    int pristine;
    char *text = recipe(&fp, &pristine);
    size_t n = strlen(text);
    write_manifest((const uint8_t *)text, n);
    int known = declared_count(text, n, &records);
    cJSON_free(text);
    check_open(flags, pristine, known, records);
    return 0;
}
