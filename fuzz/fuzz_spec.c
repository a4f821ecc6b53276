/*
 * fuzz_spec.c — the JSON pipeline spec (src/pipeline/spec.c) and the plan
 * built from it (op parameter parsing, binding, optimisation) on untrusted
 * text, then a short run of the pipeline it describes.
 *
 * Input: the JSON text (up to the first NUL). The source path it names is
 * replaced: "mem" selects samples held in memory (decoded 12x16 RGB images,
 * labels); anything else a tiny .slr written once per process (JPEG bytes,
 * labels, scores, names; one record is a damaged JPEG, so the error policy
 * has work to do).
 * The contract checked:
 *   - a rejected spec gives one message that starts with the field it names;
 *   - an accepted spec writes itself back as JSON that reads back to the same
 *     JSON (sl_spec_to_json is a fixed point after one round);
 *   - a pipeline either fails to build with such a message, or runs a few
 *     batches whose columns match its declared names, saves its state, and a
 *     second pipeline restored from that state yields the same next batch;
 *     an error from a run has a message and repeats on the next call;
 *   - sl_pipeline_free is prompt mid-epoch; no crash, leak or hang.
 * Specs whose op numbers ask for a lot of work (any number above 256 in an
 * op) are built and explained but not run, so a run stays in milliseconds.
 */
#include "sluice.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <turbojpeg.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NREC 8
#define IMG_H 12
#define IMG_W 16

static char g_dir[256];
static char g_slr[300];
static uint8_t g_pixels[NREC][IMG_H][IMG_W][3];


static void die(const char *what) {
    fprintf(stderr, "fuzz_spec: %s: %s\n", what, sl_errmsg());
    abort();
}

/* The .slr source: image (JPEG bytes), label, score, name. */
static void make_source(void) {
    for (int i = 0; i < NREC; i++)
        for (int y = 0; y < IMG_H; y++)
            for (int x = 0; x < IMG_W; x++)
                for (int c = 0; c < 3; c++)
                    g_pixels[i][y][x][c] = (uint8_t)(i * 29 + y * 11 + x * 7 + c * 60);
    sl_schema *s;
    if (sl_schema_create(&s) != SL_OK ||
        sl_schema_add(s, "image", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0) != SL_OK ||
        sl_schema_add(s, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0) != SL_OK ||
        sl_schema_add(s, "score", SL_COL_FLOAT64, SL_DTYPE_INVALID, 0, NULL, 0) != SL_OK ||
        sl_schema_add(s, "name", SL_COL_STRING, SL_DTYPE_INVALID, 0, NULL, 0) != SL_OK)
        die("schema");
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.fsync = 0;
    sl_writer *w;
    if (sl_writer_open(&w, g_slr, s, &o) != SL_OK)
        die("writer");
    tjhandle tj = tjInitCompress();
    if (!tj)
        abort();
    for (int i = 0; i < NREC; i++) {
        unsigned char *jpg = NULL;
        unsigned long jn = 0;
        if (tjCompress2(tj, &g_pixels[i][0][0][0], IMG_W, 0, IMG_H, TJPF_RGB, &jpg, &jn,
                        i % 2 ? TJSAMP_444 : TJSAMP_420, 80, 0) != 0)
            abort();
        if (i == 6)
            jn = jn * 2 / 3; /* damaged: the scan ends early */
        int64_t label = i % 3, nj = (int64_t)jn;
        double score = i * 0.25;
        char name[16];
        int nn = snprintf(name, sizeof name, "r%d", i);
        int64_t nlen = nn;
        sl_tensor t[4];
        sl_tensor_view(&t[0], jpg, SL_U8, 1, &nj);
        sl_tensor_view(&t[1], &label, SL_I64, 0, NULL);
        sl_tensor_view(&t[2], &score, SL_F64, 0, NULL);
        sl_tensor_view(&t[3], name, SL_U8, 1, &nlen);
        if (sl_writer_append(w, t, 4) != SL_OK)
            die("append");
        tjFree(jpg);
    }
    tjDestroy(tj);
    if (sl_writer_close(w) != SL_OK)
        die("close");
    sl_writer_free(w);
    sl_schema_free(s);
}

static void init(void) {
    if (g_dir[0])
        return;
    snprintf(g_dir, sizeof g_dir, "%s", fuzz_tmpdir("spec"));
    snprintf(g_slr, sizeof g_slr, "%s/src.slr", g_dir);
    /* A shard from the environment would make runs depend on it. */
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    sl_log_set_level(SL_LOG_ERROR);
    make_source();
}

static int set_memory_source(sl_spec *spec) {
    static const char *const names[] = {"image", "label"};
    static int64_t labels[NREC];
    for (int i = 0; i < NREC; i++)
        labels[i] = i % 3;
    int64_t ishape[4] = {NREC, IMG_H, IMG_W, 3}, lshape[1] = {NREC};
    sl_tensor cols[2];
    sl_tensor_view(&cols[0], g_pixels, SL_U8, 4, ishape);
    sl_tensor_view(&cols[1], labels, SL_I64, 1, lshape);
    return sl_spec_set_source_columns(spec, 2, names, cols);
}

/* A failure message must start with the field it is about. Top-level keys
 * the spec does not know are named as they were written. */
static void check_message(int rc, const char *where) {
    const char *m = sl_errmsg();
    if (getenv("SLUICE_FUZZ_VERBOSE"))
        fprintf(stderr, "%s: %d %s\n", where, rc, m);
    if (!m[0]) {
        fprintf(stderr, "%s failed (%d) without a message\n", where, rc);
        abort();
    }
    if (rc == SL_ENOMEM || strstr(m, ": unknown key"))
        return;
    static const char *const fields[] = {"spec", "source", "ops", "seed", "epochs", "on_error",
                                         "deterministic", "threads", NULL};
    for (int i = 0; fields[i]; i++)
        if (!strncmp(m, fields[i], strlen(fields[i])))
            return;
    fprintf(stderr, "%s failed (%d) with a message that names no field: %s\n", where, rc, m);
    abort();
}

static char *spec_json(const sl_spec *spec) {
    size_t len = 0;
    if (sl_spec_to_json(spec, NULL, 0, &len) != SL_OK)
        return NULL;
    char *buf = malloc(len + 1);
    size_t len2 = 0;
    if (!buf || sl_spec_to_json(spec, buf, len + 1, &len2) != SL_OK || len2 != len ||
        strlen(buf) != len)
        abort();
    return buf;
}

/* 1 if any number inside the ops is large enough to make a run slow. */
static int heavy(const cJSON *j) {
    if (cJSON_IsNumber(j) && !(fabs(j->valuedouble) <= 256))
        return 1;
    for (const cJSON *c = j ? j->child : NULL; c; c = c->next)
        if (heavy(c))
            return 1;
    return 0;
}

static uint64_t mix(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t tensor_hash(uint64_t h, const sl_tensor *t) {
    if (!t)
        abort();
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            abort();
        numel *= t->shape[d];
    }
    if ((size_t)numel * sl_dtype_size(t->dtype) != t->nbytes)
        abort();
    h = mix(h, &t->dtype, sizeof t->dtype);
    h = mix(h, t->shape, sizeof t->shape[0] * (size_t)t->ndim);
    return mix(h, t->data, t->nbytes); /* every byte: ASan checks the bounds */
}

/* Check a batch against the pipeline's columns and hash its contents. */
static uint64_t batch_hash(const sl_pipeline *p, const sl_batch *b) {
    int nc = sl_batch_ncols(b);
    if (nc != sl_pipeline_ncols(p))
        abort();
    int64_t n = sl_batch_size(b);
    if (n < 1)
        abort();
    uint64_t h = 1469598103934665603ull;
    for (int c = 0; c < nc; c++) {
        const char *name = sl_batch_name(b, c);
        if (!name || strcmp(name, sl_pipeline_column_name(p, c)) != 0 || sl_batch_find(b, name) != c)
            abort();
        h = mix(h, name, strlen(name));
        if (sl_batch_is_ragged(b, c)) {
            if (sl_batch_column(b, c))
                abort();
            for (int64_t i = 0; i < n; i++)
                h = tensor_hash(h, sl_batch_item(b, c, i));
        } else {
            h = tensor_hash(h, sl_batch_column(b, c));
        }
    }
    return h;
}

/* Up to `want` batches (crossing into the next epoch once); returns the
 * status that stopped it. A batch not ready within the time budget ends the
 * run: what matters then is that free is prompt. */
static int run_some(sl_pipeline *p, int want, char *state, size_t state_cap, uint64_t *next_hash) {
    int got = 0, ends = 0;
    *next_hash = 0;
    if (getenv("SLUICE_FUZZ_VERBOSE"))
        fprintf(stderr, "running\n");
    for (int tries = 0; tries < 20 && got <= want;) {
        sl_batch *b = NULL;
        int rc = sl_pipeline_next_timeout(p, &b, 250);
        if (rc == SL_OK && !b) {
            tries++;
            continue;
        }
        if (rc == SL_END) {
            if (++ends > 1 || sl_pipeline_epoch(p) >= (uint64_t)sl_pipeline_epochs(p))
                return rc;
            continue;
        }
        if (rc < 0) {
            const char *e = sl_pipeline_error(p);
            if (getenv("SLUICE_FUZZ_VERBOSE"))
                fprintf(stderr, "run: %d %s\n", rc, e ? e : "(null)");
            if (!e || !e[0] || !sl_errmsg()[0])
                abort();
            sl_batch *b2 = NULL;
            if (sl_pipeline_next_timeout(p, &b2, 1000) != rc || b2)
                abort(); /* a failed pipeline stays failed */
            return rc;
        }
        uint64_t h = batch_hash(p, b);
        if (getenv("SLUICE_FUZZ_VERBOSE"))
            fprintf(stderr, "batch %d: %lld samples, %d columns\n", got, (long long)sl_batch_size(b),
                    sl_batch_ncols(b));
        sl_batch_release(b);
        if (got == want) {
            *next_hash = h; /* the batch after the saved state */
            return SL_OK;
        }
        if (++got == want && state) {
            size_t len = 0;
            if (sl_pipeline_save_state(p, state, state_cap, &len) != SL_OK || len >= state_cap)
                state[0] = '\0';
        }
    }
    return SL_OK;
}

static void run_pipeline(const sl_spec *spec, int deterministic) {
    sl_pipeline *p = NULL;
    int rc = sl_pipeline_create(&p, spec);
    if (rc < 0) {
        check_message(rc, "sl_pipeline_create");
        return;
    }
    char state[1024];
    state[0] = '\0';
    uint64_t next = 0;
    rc = run_some(p, 2, state, sizeof state, &next);
    sl_pipeline_free(p);
    /* SLUICE_FUZZ_NO_RESUME=1 skips this check (to fuzz on past a known
     * resume bug without stopping at it). */
    if (rc != SL_OK || !deterministic || !state[0] || !next || getenv("SLUICE_FUZZ_NO_RESUME"))
        return;
    /* Resume: a fresh pipeline from the same spec, given the state saved
     * after batch 2, must hand out the batch that followed it. */
    if (sl_pipeline_create(&p, spec) != SL_OK)
        abort();
    if (sl_pipeline_restore_state(p, state) != SL_OK) {
        fprintf(stderr, "state %s does not restore: %s\n", state, sl_errmsg());
        abort();
    }
    sl_batch *b = NULL;
    rc = sl_pipeline_next_timeout(p, &b, 5000);
    if (rc == SL_OK && b) {
        if (batch_hash(p, b) != next) {
            fprintf(stderr, "resumed from %s: the next batch differs\n", state);
            abort();
        }
        sl_batch_release(b);
    }
    sl_pipeline_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init();
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    sl_spec *spec = NULL;
    int rc = sl_spec_from_json(&spec, text);
    if (rc < 0) {
        if (spec)
            abort();
        check_message(rc, "sl_spec_from_json");
        free(text);
        return 0;
    }

    /* Round trip: what the spec writes reads back and writes the same. */
    char *j1 = spec_json(spec);
    if (j1) {
        sl_spec *again = NULL;
        if (sl_spec_from_json(&again, j1) != SL_OK) {
            fprintf(stderr, "sl_spec_to_json wrote %s, which does not read back: %s\n", j1,
                    sl_errmsg());
            abort();
        }
        char *j2 = spec_json(again);
        if (j2 && strcmp(j1, j2) != 0) {
            fprintf(stderr, "spec JSON is not stable:\n%s\n%s\n", j1, j2);
            abort();
        }
        free(j2);
        sl_spec_free(again);
    }
    free(j1);

    cJSON *doc = cJSON_Parse(text);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(doc, "source");
    const cJSON *path = cJSON_IsString(src) ? src : cJSON_GetObjectItemCaseSensitive(src, "path");
    int mem = cJSON_IsString(path) && !strcmp(path->valuestring, "mem");
    rc = mem ? set_memory_source(spec) : sl_spec_set_source_path(spec, g_slr);
    if (rc != SL_OK)
        die("setting the source");
    const cJSON *det = cJSON_GetObjectItemCaseSensitive(doc, "deterministic");
    int deterministic = !cJSON_IsFalse(det);
    if (heavy(cJSON_GetObjectItemCaseSensitive(doc, "ops")) || heavy(src)) {
        /* Plan and explain only; a plan does not start threads. */
        sl_pipeline *p = NULL;
        rc = sl_pipeline_create(&p, spec);
        if (rc < 0) {
            check_message(rc, "sl_pipeline_create");
        } else {
            size_t len = 0;
            if (sl_pipeline_explain(p, NULL, 0, &len) != SL_OK)
                abort();
            char *buf = malloc(len + 1);
            if (buf && (sl_pipeline_explain(p, buf, len + 1, &len) != SL_OK || strlen(buf) != len))
                abort();
            free(buf);
            (void)sl_pipeline_len(p);
            sl_pipeline_free(p);
        }
    } else {
        /* Two workers per stage at most: the machine is small and shared. */
        if (sl_spec_set_threads(spec, 1 + (int)(size & 1)) != SL_OK)
            abort();
        run_pipeline(spec, deterministic);
    }
    cJSON_Delete(doc);
    sl_spec_free(spec);
    free(text);
    return 0;
}
