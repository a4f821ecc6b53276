/*
 * pack.c — sl_pack: find what kind of dataset the inputs are and hand them
 * to the packer for that kind; and a pack's run, which every packer goes
 * through: its plan kept beside the shards, the inputs it leaves out, the
 * stop poll, resuming an interrupted pack (docs/CLI.md, "pack"; the writer's
 * side is record_writer.c, invariant 5).
 */
#include "source/source.h"

#include "record/record_format.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *sl_pack_kind_name(sl_pack_kind kind) {
    switch (kind) {
    case SL_PACK_IMAGEFOLDER: return "imagefolder";
    case SL_PACK_IDX: return "idx";
    case SL_PACK_SOURCE: return "source";
    default: return "unknown";
    }
}

void sl_source__report_bad(sl_pack_report *rep, const char *line) {
    if (rep->nbad < SL_PACK_REPORT_BAD)
        snprintf(rep->bad[rep->nbad++], SL_PACK_REPORT_LINE, "%s", line);
}

#define KINDS_KNOWN \
    "sluice packs one directory (an ImageFolder: ROOT/CLASS/IMAGE), an IDX images " \
    "file and an IDX labels file (plain or .gz), TFRecord files, tar shards or a .slr dataset"

int sl_pack_detect(const char *const *srcs, int nsrc, sl_pack_kind *kind_out) {
    if (!kind_out)
        return sl__error(SL_EINVAL, "sl_pack_detect: kind_out is NULL");
    *kind_out = SL_PACK_UNKNOWN;
    if (!srcs || nsrc <= 0)
        return sl__error(SL_EINVAL, "no input given; " KINDS_KNOWN);
    /* Formats with a packer of their own (parallel reads, per-file checks)
     * are found below; every other format a source knows packs through the
     * source interface. */
    const sl_source_format *fmt;
    int found = sl_source__detect(srcs, nsrc, &fmt);
    if (found == SL_ENOMEM)
        return found;
    if (found == SL_OK && fmt->open != sl_source__open_imagefolder &&
        fmt->open != sl_source__open_idx) {
        *kind_out = SL_PACK_SOURCE;
        return SL_OK;
    }
    /* Why the inputs are not one source (a file of another kind among them,
     * a sidecar index): said instead of blaming a file that reads alone. */
    char why[SL__ERRMSG_MAX] = "";
    if (found < 0)
        snprintf(why, sizeof why, "%s", sl_errmsg());
    int dirs = 0, idx_img = 0, idx_lab = 0;
    for (int i = 0; i < nsrc; i++) {
        sl_io_info st;
        if (!srcs[i])
            return sl__error(SL_EINVAL, "input %d is NULL", i);
        int src = sl_io__stat(srcs[i], &st);
        if (src == SL_END)
            return sl__error(SL_EIO, "%s: %s", srcs[i], sl_io__missing(srcs[i]));
        SL_TRY(src);
        if (st.is_dir) {
            dirs++;
            continue;
        }
        sl_source__sniff_kind k;
        SL_TRY(sl_source__sniff_path(srcs[i], &k));
        if (k == SL_SNIFF_IDX_IMAGES)
            idx_img++;
        else if (k == SL_SNIFF_IDX_LABELS)
            idx_lab++;
        else if (why[0] && (strstr(why, "a sidecar index") ||
                            sl_source__detect(&srcs[i], 1, &fmt) == SL_OK))
            return sl__error(found, "%s", why);
        else if (st.size == 0)
            return sl__error(SL_EUNSUPPORTED, "%s: empty file; " KINDS_KNOWN, srcs[i]);
        else
            return sl__error(SL_EUNSUPPORTED, "%s: not a kind of input sluice knows; " KINDS_KNOWN,
                             srcs[i]);
    }
    if (dirs == 1 && nsrc == 1) {
        *kind_out = SL_PACK_IMAGEFOLDER;
        return SL_OK;
    }
    if (dirs)
        return sl__error(SL_EUNSUPPORTED,
                         "%d inputs with a directory among them; " KINDS_KNOWN, nsrc);
    if (nsrc == 2 && idx_img == 1 && idx_lab == 1) {
        *kind_out = SL_PACK_IDX;
        return SL_OK;
    }
    if (nsrc == 1)
        return sl__error(SL_EINVAL, "%s: an IDX %s file alone; give the %s file too", srcs[0],
                         idx_img ? "images" : "labels", idx_img ? "labels" : "images");
    return sl__error(SL_EINVAL,
                     "%d IDX files (%d images, %d labels); IDX packing takes exactly one images "
                     "file and one labels file",
                     nsrc, idx_img, idx_lab);
}

/* Copy the caller's options into `o`, whatever version of the struct it
 * was built with, and check them. */
static int pack_options(const sl_pack_options *opts, const char *dst, sl_pack_options *o) {
    sl_pack_options d = SL_PACK_OPTIONS_INIT;
    *o = d;
    /* A caller built against an older header passes a shorter struct: copy
     * only the fields its version has, the rest keep their defaults. */
    if (opts && opts->version == 1)
        memcpy(o, opts, offsetof(sl_pack_options, check));
    else if (opts && opts->version == 2)
        memcpy(o, opts, offsetof(sl_pack_options, jpeg_restart));
    else if (opts && opts->version == 3)
        memcpy(o, opts, offsetof(sl_pack_options, resume));
    else if (opts && opts->version == SL_PACK_OPTIONS_VERSION)
        *o = *opts;
    else if (opts)
        return sl__error(SL_EUNSUPPORTED,
                         "sl_pack: options version %u is not 1..%u (initialise with "
                         "SL_PACK_OPTIONS_INIT)",
                         opts->version, SL_PACK_OPTIONS_VERSION);
    o->version = SL_PACK_OPTIONS_VERSION;
    if (o->check != SL_PACK_CHECK_HEADER && o->check != SL_PACK_CHECK_DECODE)
        return sl__error(SL_EINVAL, "sl_pack: check is %d (0 = header, 1 = decode)", o->check);
    if (o->jpeg_restart != SL_JPEG_RESTART_OFF && o->jpeg_restart != SL_JPEG_RESTART_AUTO &&
        o->jpeg_restart != SL_JPEG_RESTART_ROWS)
        return sl__error(SL_EINVAL, "sl_pack: jpeg_restart is %d (0 = off, 1 = auto, 2 = rows)",
                         o->jpeg_restart);
    if (!dst || !*dst)
        return sl__error(SL_EINVAL, "sl_pack: no output path");
    if (o->jobs < 0)
        return sl__error(SL_EINVAL, "sl_pack: jobs is %d (0 = all cores)", o->jobs);
    return SL_OK;
}

int sl_pack(const char *const *srcs, int nsrc, const char *dst, const sl_pack_options *opts,
            sl_pack_report *report) {
    sl_pack_options o;
    sl_pack_report local;
    sl_pack_report *rep = report ? report : &local;
    memset(rep, 0, sizeof *rep);
    SL_TRY(pack_options(opts, dst, &o));
    sl_pack_kind kind;
    SL_TRY(sl_pack_detect(srcs, nsrc, &kind));
    rep->kind = kind;
    if (kind == SL_PACK_IMAGEFOLDER)
        return sl_source__pack_imagefolder(srcs[0], dst, &o, rep);
    if (kind == SL_PACK_IDX)
        return sl_source__pack_idx(srcs[0], srcs[1], dst, &o, rep);
    sl_source *src;
    SL_TRY(sl_source_open_paths(&src, srcs, nsrc, NULL));
    int rc = sl_source__pack(src, dst, &o, rep);
    sl_source_free(src);
    return rc;
}

int sl_pack_source(sl_source *src, const char *dst, const sl_pack_options *opts,
                   sl_pack_report *report) {
    sl_pack_options o;
    sl_pack_report local;
    sl_pack_report *rep = report ? report : &local;
    memset(rep, 0, sizeof *rep);
    if (!src)
        return sl__error(SL_EINVAL, "sl_pack_source: source is NULL");
    SL_TRY(pack_options(opts, dst, &o));
    rep->kind = SL_PACK_SOURCE;
    return sl_source__pack(src, dst, &o, rep);
}

/* ---- any source into .slr --------------------------------------------------------- */

/* The .slr column type a source column is stored as: the same type, a 0-d
 * array keeping its dtype (a TFRecord float32 scalar stays float32). */
static int column_of(const sl_source *src, int c, sl_schema *schema) {
    const sl_source_col *col = &src->col[c];
    sl_coltype t = col->type;
    if (t == SL_COL_ARRAY && (col->dtype == SL_DTYPE_INVALID || col->ndim < 0))
        return sl__error(SL_EUNSUPPORTED, "%s: column '%s' has no fixed dtype and rank; "
                         "it cannot be stored in .slr", src->name, col->name);
    if (t != SL_COL_ARRAY)
        return sl_schema_add(schema, col->name, t, SL_DTYPE_INVALID, 0, NULL, 0);
    return sl_schema_add(schema, col->name, t, col->dtype, col->ndim, col->shape, 0);
}

int sl_source__check_sample(sl_source *src, sl_source__checker *chk, uint64_t i,
                            const sl_sample *smp, int *images_out) {
    uint32_t cols = 0;
    for (int c = 0; c < src->ncols; c++)
        if (src->col[c].image)
            cols |= 1u << c;
    return sl_source__check_cols(src, chk, i, smp, cols, images_out);
}

int sl_source__check_cols(sl_source *src, sl_source__checker *chk, uint64_t i,
                          const sl_sample *smp, uint32_t cols, int *images_out) {
    int images = 0;
    for (int c = 0; c < src->ncols && c < (int)smp->ncols; c++) {
        if (!(cols >> c & 1u))
            continue;
        int rc = sl_source__check_image(chk, smp->col[c].data, smp->col[c].nbytes);
        if (rc < 0) {
            char where[SL__ERRMSG_MAX / 2];
            sl_source__where(src, i, smp, where, sizeof where);
            return sl__error_prefix(rc, "%s: column '%s'", where, src->col[c].name);
        }
        images++;
    }
    if (images_out)
        *images_out = images;
    return SL_OK;
}

/* What a source pack reads, for its plan: the source as `describe` has it
 * (kind, records, columns, files), less what does not change the records
 * (whether an index was there, damage counts). */
static int source_fingerprint(const sl_source *src, uint64_t *out) {
    size_t len = 0;
    SL_TRY(sl_source_describe(src, NULL, 0, &len));
    char *buf = sl__malloc(len + 1);
    if (!buf)
        return sl__oom("planning a pack");
    int rc = sl_source_describe(src, buf, len + 1, NULL);
    cJSON *j = rc == SL_OK ? cJSON_Parse(buf) : NULL;
    sl__free(buf);
    SL_TRY(rc);
    if (!j)
        return sl__oom("planning a pack");
    cJSON_DeleteItemFromObjectCaseSensitive(j, "index");
    cJSON_DeleteItemFromObjectCaseSensitive(j, "damaged_records");
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "columns"))
        cJSON_DeleteItemFromObjectCaseSensitive((cJSON *)c, "indexed");
    return sl__json_hash(j, "planning a pack", out);
}

int sl_source__pack(sl_source *src, const char *dst, const sl_pack_options *opts,
                    sl_pack_report *rep) {
    int rc = SL_OK;
    sl_schema *schema = NULL;
    sl_pack_run run = {0};
    sl_source_cursor *cur = NULL;
    sl_source__checker chk;
    int chk_init = 0;
    sl_sample smp;
    memset(&smp, 0, sizeof smp);
    SL_CHECK(sl_schema_create(&schema));
    for (int c = 0; c < src->ncols; c++)
        SL_CHECK(column_of(src, c, schema));
    sl_pack_plan plan = {src->kind, src->count, 0};
    SL_CHECK(source_fingerprint(src, &plan.fingerprint));
    SL_CHECK(sl_source__pack_begin(&run, dst, schema, &plan, opts, rep));
    sl_writer *w = run.w;
    for (const cJSON *m = src->meta ? src->meta->child : NULL; m; m = m->next) {
        if (!strcmp(m->string, "source"))
            continue; /* set below: what this pack read */
        char *text = cJSON_IsString(m) ? NULL : cJSON_PrintUnformatted(m);
        if (!cJSON_IsString(m) && !text)
            SL_FAIL(SL_ENOMEM, "%s: out of memory storing metadata", src->name);
        rc = sl_writer_set_meta(w, m->string, text ? text : m->valuestring);
        cJSON_free(text);
        SL_CHECK(rc);
    }
    SL_CHECK(sl_writer_set_meta(w, "source", src->kind));
    SL_CHECK(sl_source__cursor_open(src, NULL, NULL, &cur));
    chk_init = 1;
    SL_CHECK(sl_source__checker_init(&chk, opts->check));
    chk.restart = opts->jpeg_restart;
    for (uint64_t i = run.start; i < src->count; i++) {
        char where[512];
        if (sl_source__pack_stop(&run, 0))
            SL_FAIL(SL_ECANCELED, "interrupted");
        rc = sl_source__read(src, cur, i, &smp);
        if (rc == SL_OK)
            rc = sl_source__check_sample(src, &chk, i, &smp, NULL);
        for (int c = 0; rc == SL_OK && c < src->ncols; c++) {
            /* Any column that may hold encoded images (a .slr's bytes too, so
             * that a repack can add restart intervals) is re-encoded where it
             * is a JPEG. */
            if (!src->col[c].encoded)
                continue;
            sl_tensor enc;
            int changed = 0;
            rc = sl_source__reencode(&chk, smp.col[c].data, smp.col[c].nbytes, &enc, &changed);
            if (changed) {
                /* the sample owns its columns: the new bytes replace the old */
                sl_tensor_release(&smp.col[c]);
                smp.col[c] = enc;
            }
            if (rc < 0) {
                sl_source__locate(src, i, where, sizeof where);
                sl__error_prefix(rc, "%s: column '%s'", where, src->col[c].name);
            }
        }
        if (rc < 0) {
            sl_sample_clear(&smp);
            if (!opts->skip_bad || rc == SL_ENOMEM)
                goto cleanup;
            SL_CHECK(sl_source__pack_skipped(&run, i, sl_errmsg()));
            rc = SL_OK;
            continue;
        }
        for (int c = 0; c < src->ncols; c++)
            rep->bytes += smp.col[c].nbytes;
        rc = sl_writer_append(w, smp.col, src->ncols);
        sl_sample_clear(&smp);
        SL_CHECK(rc);
        rep->records++;
        if (opts->progress)
            opts->progress(rep->records + rep->skipped, src->count, rep->bytes, opts->user);
    }
cleanup:
    rc = sl_source__pack_end(&run, rc);
    if (chk_init)
        sl_source__checker_dispose(&chk);
    sl_source__cursor_free(src, cur);
    sl_schema_free(schema);
    return rc;
}

/* ---- a pack's run: the plan, inputs left out, stopping, resuming ------------------ */

static const char *const check_names[] = {"header", "decode"};
static const char *const restart_names[] = {"off", "auto", "rows"};

/* The plan kept in "<dst>.partial" (SLR_PLAN_NAME): what a resume must find
 * the same. shard_bytes as the writer takes it (0: its default). */
static char *plan_text(const sl_pack_plan *plan, const sl_pack_options *o) {
    sl__json_init();
    cJSON *j = cJSON_CreateObject();
    char fp[17];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)plan->fingerprint);
    char *text = NULL;
    if (j && cJSON_AddStringToObject(j, "format", "sluice-pack-plan") &&
        cJSON_AddNumberToObject(j, "version", 1) && cJSON_AddStringToObject(j, "kind", plan->kind) &&
        cJSON_AddNumberToObject(j, "planned", (double)plan->planned) &&
        cJSON_AddStringToObject(j, "inputs", fp) &&
        cJSON_AddNumberToObject(j, "shard_bytes", (double)o->shard_bytes) &&
        cJSON_AddStringToObject(j, "check", check_names[o->check]) &&
        cJSON_AddStringToObject(j, "jpeg_restart", restart_names[o->jpeg_restart]) &&
        cJSON_AddBoolToObject(j, "skip_bad", o->skip_bad != 0))
        text = cJSON_Print(j);
    cJSON_Delete(j);
    return text;
}

/* The interrupted pack's plan against this one: SL_EINVAL saying what
 * differs (the inputs, or which option), SL_OK when the same. */
static int plan_matches(const char *partial, const char *theirs, const char *ours) {
    sl__json_init();
    cJSON *a = cJSON_Parse(theirs), *b = cJSON_Parse(ours);
    int rc = SL_OK;
    if (!a || !cJSON_IsObject(a)) {
        rc = sl__error(SL_EINVAL, "%s/" SLR_PLAN_NAME ": not a plan sluice pack wrote; salvage "
                       "the records with `sluice recover %s`, or remove it", partial, partial);
        goto done;
    }
    static const struct {
        const char *key, *what;
    } keys[] = {{"kind", "another kind of input"},
                {"planned", "another number of inputs"},
                {"inputs", "other inputs (their names, order or labels differ)"},
                {"shard_bytes", "another --shard-size"},
                {"check", "another --check"},
                {"jpeg_restart", "another --jpeg-restart"},
                {"skip_bad", "--skip-bad set otherwise"}};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, keys[k].key);
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, keys[k].key);
        if (!x || !y || !cJSON_Compare(x, y, 1)) {
            char *xs = x ? cJSON_PrintUnformatted(x) : NULL, *ys = y ? cJSON_PrintUnformatted(y) : NULL;
            rc = sl__error(SL_EINVAL, "cannot resume %s: it was packed from %s (%s: %s then, %s "
                           "now); resume with the inputs and options it started with, or salvage "
                           "its records with `sluice recover %s`, or remove it to pack anew",
                           partial, keys[k].what, keys[k].key, xs ? xs : "none",
                           ys ? ys : "none", partial);
            cJSON_free(xs);
            cJSON_free(ys);
            break;
        }
    }
done:
    cJSON_Delete(a);
    cJSON_Delete(b);
    return rc;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The inputs the interrupted pack left out (its note: "INPUT\tWHY" lines)
 * up to where this run starts: counted and reported again, the note cut to
 * them; pr->start is the input after the last record kept. */
static int take_skips(sl_pack_run *pr, const char *partial) {
    char *p = sl_io__join(partial, SLR_SKIPS_NAME);
    if (!p)
        return sl__oom("resuming a pack");
    uint8_t *text = NULL;
    size_t n = 0;
    int rc = sl_io__read_file(p, 0, 1, &text, &n);
    sl__free(p);
    uint64_t *v = NULL, nv = 0, kept = sl_writer_count(pr->w);
    pr->start = kept;
    if (rc == SL_END) {
        rc = SL_OK;
        goto done;
    }
    SL_CHECK(rc);
    for (size_t i = 0; i < n; i++)
        nv += text[i] == '\n';
    v = sl__calloc(nv ? (size_t)nv : 1, sizeof *v);
    if (!v)
        SL_FAIL(SL_ENOMEM, "out of memory resuming a pack");
    nv = 0;
    for (char *line = (char *)text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (!nl)
            break; /* a line cut short by the interruption: its input is checked again */
        char *end;
        unsigned long long x = strtoull(line, &end, 10);
        if (end != line && *end == '\t')
            v[nv++] = x;
        line = nl + 1;
    }
    qsort(v, (size_t)nv, sizeof *v, cmp_u64);
    /* record r is the r-th input not left out: the inputs before the next
     * one are the records kept and the inputs left out among them */
    for (uint64_t i = 0; i < nv; i++)
        if ((i == 0 || v[i] != v[i - 1]) && v[i] <= pr->start)
            pr->start++;
    /* the note again with those alone (later ones are checked again) */
    SL_CHECK(sl_writer__note_set(pr->w, SLR_SKIPS_NAME, ""));
    for (char *line = (char *)text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (!nl)
            break;
        *nl = 0;
        char *end;
        unsigned long long x = strtoull(line, &end, 10);
        if (end != line && *end == '\t' && x < pr->start) {
            pr->rep->skipped++;
            sl_source__report_bad(pr->rep, end + 1);
            *nl = '\n';
            char save = nl[1];
            nl[1] = 0;
            rc = sl_writer__note_append(pr->w, SLR_SKIPS_NAME, line);
            nl[1] = save;
            SL_CHECK(rc);
        }
        line = nl + 1;
    }
done:
cleanup:
    sl__free(v);
    sl__free(text);
    return rc;
}

int sl_source__pack_begin(sl_pack_run *pr, const char *dst, const sl_schema *schema,
                          const sl_pack_plan *plan, const sl_pack_options *opts,
                          sl_pack_report *rep) {
    memset(pr, 0, sizeof *pr);
    pr->opts = opts;
    pr->rep = rep;
    pr->dst = dst;
    pr->planned = plan->planned;
    sl_writer_options wo = SL_WRITER_OPTIONS_INIT;
    wo.shard_bytes = opts->shard_bytes;
    char *ours = plan_text(plan, opts), *theirs = NULL;
    int rc = SL_OK;
    if (!ours)
        return sl__oom("planning a pack");
    if (opts->resume) {
        rc = sl_writer__resume(&pr->w, dst, schema, &wo);
        if (rc == SL_END) {
            rc = SL_OK; /* nothing to continue: from the start */
        } else {
            SL_CHECK(rc);
            pr->resumed = 1;
            const char *partial = sl_writer__partial_path(pr->w);
            char *pp = sl_io__join(partial, SLR_PLAN_NAME);
            if (!pp)
                SL_FAIL(SL_ENOMEM, "out of memory resuming a pack");
            size_t n;
            rc = sl_io__read_file(pp, (uint64_t)1 << 20, 1, (uint8_t **)&theirs, &n);
            sl__free(pp);
            rep->records = sl_writer_count(pr->w);
            if (rc == SL_END && rep->records == plan->planned) {
                /* stopped as it published (the plan goes just before): every
                 * record is there, nothing is left to check it against */
                rc = SL_OK;
                pr->start = plan->planned;
            } else if (rc == SL_END && rep->records == 0) {
                /* stopped (kill -9) after the writer began and before the plan
                 * was written: nothing in it to keep, so from the start */
                rc = SL_OK;
                SL_CHECK(sl_writer__note_set(pr->w, SLR_PLAN_NAME, ours));
            } else if (rc == SL_END) {
                SL_FAIL(SL_EINVAL, "cannot resume %s: it holds no plan (" SLR_PLAN_NAME "): it "
                        "was not left by sluice pack; salvage its records with `sluice recover "
                        "%s`, or remove it to pack anew", partial, partial);
            } else {
                SL_CHECK(rc);
                SL_CHECK(plan_matches(partial, theirs, ours));
                SL_CHECK(take_skips(pr, partial));
            }
            SL_LOG_INFO("%s: continuing an interrupted pack: %llu of %llu planned records kept",
                        partial, (unsigned long long)rep->records,
                        (unsigned long long)plan->planned);
        }
    }
    if (!pr->w) {
        char partial[4200];
        struct stat st;
        snprintf(partial, sizeof partial, "%s.partial", dst);
        if (lstat(partial, &st) == 0)
            SL_FAIL(SL_EIO, "%s exists: an interrupted pack; continue it (sluice pack ... "
                    "--resume, or resume=True), salvage its records (sluice recover %s), or "
                    "remove it", partial, partial);
        SL_CHECK(sl_writer_open(&pr->w, dst, schema, &wo));
        SL_CHECK(sl_writer__note_set(pr->w, SLR_PLAN_NAME, ours));
    }
cleanup:
    cJSON_free(ours);
    sl__free(theirs);
    if (rc < 0 && pr->w) {
        if (pr->resumed)
            sl_writer__suspend(pr->w); /* not this run's to remove */
        sl_writer_free(pr->w);
        pr->w = NULL;
    }
    return rc;
}

int sl_source__pack_skipped(sl_pack_run *pr, uint64_t input, const char *why) {
    /* An input that failed as a stop was asked (a read interrupted by the
     * signal: EINTR) is not left out for good: the resume reads it again. */
    if (sl_source__pack_stop(pr, 1))
        return sl__error(SL_ECANCELED, "interrupted");
    pr->rep->skipped++;
    sl_source__report_bad(pr->rep, why);
    char line[SL_PACK_REPORT_LINE + 32];
    int k = snprintf(line, sizeof line - 2, "%llu\t%s", (unsigned long long)input, why);
    if (k < 0)
        k = 0;
    if ((size_t)k > sizeof line - 3)
        k = (int)sizeof line - 3;
    for (int i = 0; i < k; i++)
        if (line[i] == '\n')
            line[i] = ' ';
    line[k] = '\n';
    line[k + 1] = 0;
    return sl_writer__note_append(pr->w, SLR_SKIPS_NAME, line);
}

int sl_source__pack_stop(sl_pack_run *pr, int fresh) {
    if (!pr->stopped && pr->opts->stop && pr->opts->stop(pr->opts->user, fresh))
        pr->stopped = 1;
    return pr->stopped;
}

int sl_source__pack_end(sl_pack_run *pr, int rc) {
    if (!pr->w)
        return rc;
    /* a failure as a stop was asked (an input whose read the signal broke
     * off) is the stop: what is written is kept */
    if (rc < 0 && rc != SL_ECANCELED)
        sl_source__pack_stop(pr, 1);
    if (rc == SL_OK) {
        rc = sl_writer_close(pr->w);
        if (rc == SL_OK) {
            pr->rep->records = sl_writer_count(pr->w);
            sl_writer_free(pr->w);
            pr->w = NULL;
            return SL_OK;
        }
    }
    uint64_t safe = sl_writer_count(pr->w);
    const char *partial = sl_writer__partial_path(pr->w);
    if (pr->stopped || pr->resumed) {
        int src = sl_writer__suspend(pr->w);
        if (pr->stopped && src == SL_OK)
            rc = sl__error(SL_ECANCELED, "interrupted: %llu of %llu planned records are safe in "
                           "%s; continue the pack with --resume (the same inputs and options), "
                           "or salvage those records with `sluice recover %s --out OUT`",
                           (unsigned long long)safe, (unsigned long long)pr->planned, partial,
                           partial);
        else if (pr->stopped)
            rc = sl__error_prefix(src, "interrupted, and keeping what was written failed");
        else if (src == SL_OK)
            rc = sl__error(rc, "%s (%llu of %llu planned records are kept in %s: fix the cause "
                           "and continue with --resume)", sl_errmsg(), (unsigned long long)safe,
                           (unsigned long long)pr->planned, partial);
        pr->rep->records = safe;
    }
    sl_writer_free(pr->w); /* removes the temporaries unless suspended */
    pr->w = NULL;
    if (rc < 0 && !pr->stopped && !pr->resumed)
        pr->rep->records = 0;
    return rc;
}
