/*
 * source_imagefolder.c — a torchvision-style ImageFolder into .slr.
 *
 * Order (so that a label and a record index mean what they mean to a
 * torchvision user): classes are ROOT's subdirectory names sorted by byte
 * value; label = position in that list. Inside a class, os.walk's order as
 * torchvision sorts it: by directory path, then by file name within it.
 *
 * Reading is parallel, writing is not: `jobs` workers claim file indices in
 * order, read and check each file into a slot of a ring of `window` slots,
 * and the calling thread appends slot i only after slot i-1. The output is
 * therefore identical for any number of workers, and memory is bounded by
 * the window (a worker waits while it is `window` files ahead of the writer).
 *
 * Locking: one mutex guards `next_claim`, `next_write`, `stop` and every
 * slot's `ready` flag; a slot's payload belongs to the worker that claimed
 * its index until `ready` is set, then to the writer.
 */
#include "source/source.h"
#include "core/worker.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <sys/stat.h>
#include <unistd.h>

/* A file over this is not an image anyone trains on; refuse rather than
 * try to hold it in memory. */
#define MAX_IMAGE_BYTES ((uint64_t)1 << 30)
/* Directory depth below a class; deeper is a symlink loop or a mistake. */
#define MAX_DEPTH 32

/* torchvision's IMG_EXTENSIONS. */
static const char *const image_exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                         ".pgm", ".tif",  ".tiff", ".webp"};

typedef struct {
    char *rel;        /* path relative to ROOT: "class/sub/name.jpg" */
    size_t dirlen;    /* length of the directory part of rel (before the last '/') */
    int label;
} entry;

typedef struct {
    entry *v;
    size_t n, cap;
} entry_list;

typedef struct {
    char *name;
    unsigned char type;   /* readdir's d_type: DT_REG, DT_DIR, or DT_LNK/DT_UNKNOWN (ask stat) */
} name_item;

typedef struct {
    name_item *v;
    size_t n, cap;
} name_list;

static int has_image_ext(const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof image_exts / sizeof image_exts[0]; i++) {
        size_t e = strlen(image_exts[i]);
        if (n > e && !strcasecmp(name + n - e, image_exts[i]))
            return 1;
    }
    return 0;
}

static int names_push(name_list *l, const char *s, unsigned char type) {
    SL_TRY(sl__grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, 16,
                    "listing an image folder"));
    char *d = sl__strdup(s);
    if (!d)
        return sl__oom("listing an image folder");
    l->v[l->n++] = (name_item){d, type};
    return SL_OK;
}

static void names_free(name_list *l) {
    for (size_t i = 0; i < l->n; i++)
        sl__free(l->v[i].name);
    sl__free(l->v);
    memset(l, 0, sizeof *l);
}

static void entries_free(entry_list *l) {
    for (size_t i = 0; i < l->n; i++)
        sl__free(l->v[i].rel);
    sl__free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const name_item *)a)->name, ((const name_item *)b)->name);
}

/* (label, directory, file name): torchvision's order. */
static int cmp_entry(const void *pa, const void *pb) {
    const entry *a = pa, *b = pb;
    if (a->label != b->label)
        return a->label < b->label ? -1 : 1;
    size_t m = a->dirlen < b->dirlen ? a->dirlen : b->dirlen;
    int c = memcmp(a->rel, b->rel, m);
    if (c)
        return c;
    if (a->dirlen != b->dirlen)
        return a->dirlen < b->dirlen ? -1 : 1;
    return strcmp(a->rel + a->dirlen + 1, b->rel + b->dirlen + 1);
}

static int join(char *out, size_t cap, const char *a, const char *b) {
    int n = snprintf(out, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap)
        return sl__error(SL_ELIMIT, "%s/%s: path too long", a, b);
    return SL_OK;
}

/* Names in `dir` (without . and ..), sorted. */
static int list_dir(const char *dir, name_list *out) {
    DIR *d = opendir(dir);
    if (!d)
        return sl__error(SL_EIO, "%s: cannot list directory: %s", dir, strerror(errno));
    int rc = SL_OK;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        SL_CHECK(names_push(out, de->d_name, de->d_type));
        errno = 0;
    }
    if (errno)
        SL_FAIL(SL_EIO, "%s: cannot list directory: %s", dir, strerror(errno));
    if (out->n)
        qsort(out->v, out->n, sizeof *out->v, cmp_name);
cleanup:
    closedir(d);
    return rc;
}

typedef struct {
    const char *root;
    int skip_bad;
    sl_pack_report *rep;
    entry_list *out;
    struct stat anc[MAX_DEPTH + 1]; /* directories on the current walk path */
} walker;

static int add_entry(walker *wk, const char *rel_dir, const char *name, int label) {
    entry_list *l = wk->out;
    SL_TRY(sl__grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v, 256,
                    "listing an image folder"));
    size_t dl = strlen(rel_dir), nl = strlen(name);
    char *rel = sl__malloc(dl + 1 + nl + 1);
    if (!rel)
        return sl__oom("listing an image folder");
    memcpy(rel, rel_dir, dl);
    rel[dl] = '/';
    memcpy(rel + dl + 1, name, nl + 1);
    l->v[l->n++] = (entry){rel, dl, label};
    return SL_OK;
}

/* Is dir/it a directory (following symlinks)? readdir's type saves a stat per
 * file, which matters for a million-file folder; links and file systems that
 * do not fill d_type fall back to stat. A dangling symlink fails stat: it is
 * a "file" (os.walk's view), whose read fails later with the path named. */
static int is_dir(const char *dir, const name_item *it, char *buf, size_t cap) {
    if (it->type == DT_DIR)
        return 1;
    if (it->type != DT_LNK && it->type != DT_UNKNOWN)
        return 0;
    struct stat st;
    int n = snprintf(buf, cap, "%s/%s", dir, it->name);
    return n > 0 && (size_t)n < cap && stat(buf, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Walk ROOT/rel_dir recursively, following symlinks (as torchvision does)
 * but not around a loop. */
static int walk(walker *wk, const char *rel_dir, int label, int depth) {
    char dir[4096], sub[4096], subrel[4096];
    name_list names = {0};
    int rc = SL_OK;
    SL_CHECK(join(dir, sizeof dir, wk->root, rel_dir));
    if (depth > MAX_DEPTH)
        SL_FAIL(SL_ELIMIT, "%s: directories nested over %d deep", dir, MAX_DEPTH);
    if (stat(dir, &wk->anc[depth]) != 0)
        SL_FAIL(SL_EIO, "%s: %s", dir, strerror(errno));
    for (int i = 0; i < depth; i++)
        if (wk->anc[i].st_dev == wk->anc[depth].st_dev &&
            wk->anc[i].st_ino == wk->anc[depth].st_ino)
            goto cleanup; /* a symlink back to an ancestor: already walked */
    rc = list_dir(dir, &names);
    if (rc == SL_EIO && wk->skip_bad) {
        wk->rep->skipped++;
        sl_source__report_bad(wk->rep, sl_errmsg());
        rc = SL_OK;
        goto cleanup;
    }
    SL_CHECK(rc);
    for (size_t i = 0; i < names.n; i++) {
        const name_item *it = &names.v[i];
        if (is_dir(dir, it, sub, sizeof sub)) {
            SL_CHECK(join(subrel, sizeof subrel, rel_dir, it->name));
            SL_CHECK(walk(wk, subrel, label, depth + 1));
        } else if (has_image_ext(it->name)) {
            SL_CHECK(add_entry(wk, rel_dir, it->name, label));
        }
    }
cleanup:
    names_free(&names);
    return rc;
}

/* True if s is well-formed UTF-8 (no overlong forms, no surrogates, <= U+10FFFF). */
static bool valid_utf8(const unsigned char *s) {
    while (*s) {
        unsigned c = *s;
        int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
        if (n < 0)
            return false;
        uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1f) : n == 2 ? (c & 0x0f) : (c & 0x07);
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i] & 0x3f);
        }
        static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        s += n + 1;
    }
    return true;
}

/* Class names as a JSON list, escaped by hand: small, and it keeps every
 * allocation behind the sl__malloc seam. */
static int classes_json(const name_list *cls, char **out) {
    size_t cap = 3;
    for (size_t i = 0; i < cls->n; i++)
        cap += 3 + 6 * strlen(cls->v[i].name);
    char *s = sl__malloc(cap), *p = s;
    if (!s)
        return sl__oom("building class metadata");
    *p++ = '[';
    for (size_t i = 0; i < cls->n; i++) {
        if (i)
            *p++ = ',';
        *p++ = '"';
        for (const unsigned char *c = (const unsigned char *)cls->v[i].name; *c; c++) {
            if (*c == '"' || *c == '\\') {
                *p++ = '\\';
                *p++ = (char)*c;
            } else if (*c < 0x20) {
                p += sprintf(p, "\\u%04x", *c);
            } else {
                *p++ = (char)*c;
            }
        }
        *p++ = '"';
    }
    *p++ = ']';
    *p = 0;
    *out = s;
    return SL_OK;
}

/* The classes and image files of ROOT in torchvision's order. `root` gets
 * ROOT without trailing slashes. With `skip_bad`, unreadable directories are
 * counted in `rep` and passed over. */
static int list_folder(const char *root_in, int skip_bad, sl_pack_report *rep, char *root,
                       name_list *cls, entry_list *ents) {
    int rc = SL_OK;
    char path[4096];
    name_list top = {0};
    size_t rl = strlen(root_in);
    while (rl > 1 && root_in[rl - 1] == '/')
        rl--;
    if (rl >= 4096)
        return sl__error(SL_ELIMIT, "%s: path too long", root_in);
    memcpy(root, root_in, rl);
    root[rl] = 0;

    /* classes: the sorted subdirectories of root */
    SL_CHECK(list_dir(root, &top));
    for (size_t i = 0; i < top.n; i++)
        if (is_dir(root, &top.v[i], path, sizeof path))
            SL_CHECK(names_push(cls, top.v[i].name, DT_DIR));
    if (cls->n == 0)
        SL_FAIL(SL_EINVAL,
                "%s: no class directories; an ImageFolder is ROOT/CLASS/IMAGE (e.g. "
                "%s/cat/001.jpg)",
                root, root);
    if (cls->n > INT32_MAX)
        SL_FAIL(SL_ELIMIT, "%s: too many classes", root);
    /* class names go into JSON metadata, which must be UTF-8 */
    for (size_t i = 0; i < cls->n; i++)
        if (!valid_utf8((const unsigned char *)cls->v[i].name))
            SL_FAIL(SL_EINVAL,
                    "%s: class directory name #%zu is not valid UTF-8; rename it (e.g. with "
                    "convmv) so the class names can be stored",
                    root, i);

    walker wk;
    memset(&wk, 0, sizeof wk);
    wk.root = root;
    wk.skip_bad = skip_bad;
    wk.rep = rep;
    wk.out = ents;
    for (size_t c = 0; c < cls->n; c++) {
        size_t before = ents->n;
        SL_CHECK(walk(&wk, cls->v[c].name, (int)c, 0));
        if (ents->n == before)
            SL_FAIL(SL_EINVAL,
                    "%s/%s: class '%s' has no image files (.jpg .jpeg .png .ppm .bmp .pgm "
                    ".tif .tiff .webp); add some or remove the directory",
                    root, cls->v[c].name, cls->v[c].name);
    }
    if (ents->n)
        qsort(ents->v, ents->n, sizeof *ents->v, cmp_entry);
cleanup:
    names_free(&top);
    return rc;
}

/* ---- reading files on worker threads ---------------------------------------- */

typedef struct {
    int ready;
    int rc;
    uint8_t *data;
    size_t n;
    char msg[SL__ERRMSG_MAX];
} slot;

typedef struct {
    const char *root;
    const entry *e;
    size_t n;
    size_t window;
    int check;      /* sl_pack_check */
    int restart;    /* sl_jpeg_restart */
    slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t ready_cv; /* a slot became ready (the writer waits) */
    pthread_cond_t space_cv; /* the writer advanced, or stop (workers wait) */
    size_t next_claim;
    size_t next_write;
    sl_workers ws;  /* the reader threads; stop read under mu (wakes space_cv) */
} reader_job;


/* Read ROOT/e->rel whole and check it is an image the decode op reads. */
static int load_file(const char *root, const entry *e, sl_source__checker *chk, uint8_t **data_out,
                     size_t *n_out) {
    char path[4096];
    uint8_t *data = NULL;
    int rc = SL_OK;
    size_t size;
    *data_out = NULL;
    *n_out = 0;
    SL_TRY(join(path, sizeof path, root, e->rel));
    SL_CHECK(sl_io__read_file(path, MAX_IMAGE_BYTES, 0, &data, &size));
    rc = sl_source__check_image(chk, data, size);
    if (rc < 0) {
        sl__error_prefix(rc, "%s", path);
        goto cleanup;
    }
    sl_tensor enc;
    int changed;
    rc = sl_source__reencode(chk, data, size, &enc, &changed);
    if (rc < 0) {
        sl__error_prefix(rc, "%s", path);
        goto cleanup;
    }
    if (changed) {
        /* the slot owns plain sl__malloc memory: copy out of the tensor */
        uint8_t *re = sl__malloc(enc.nbytes);
        if (!re) {
            sl_tensor_release(&enc);
            SL_FAIL(SL_ENOMEM, "%s: out of memory re-encoding", path);
        }
        memcpy(re, enc.data, enc.nbytes);
        size = enc.nbytes;
        sl_tensor_release(&enc);
        sl__free(data);
        data = re;
    }
    *data_out = data;
    *n_out = size;
    data = NULL;
cleanup:
    sl__free(data);
    return rc;
}

static void *reader_main(void *arg) {
    reader_job *job = arg;
    /* One checker per thread: a decoder is used by one thread at a time. */
    sl_source__checker chk;
    int chk_rc = sl_source__checker_init(&chk, job->check);
    chk.restart = job->restart;
    char chk_msg[SL__ERRMSG_MAX] = "";
    if (chk_rc < 0)
        snprintf(chk_msg, sizeof chk_msg, "%s", sl_errmsg());
    pthread_mutex_lock(&job->mu);
    for (;;) {
        while (!sl__workers_stopping(&job->ws) && job->next_claim < job->n &&
               job->next_claim >= job->next_write + job->window)
            pthread_cond_wait(&job->space_cv, &job->mu);
        if (sl__workers_stopping(&job->ws) || job->next_claim >= job->n)
            break;
        size_t i = job->next_claim++;
        pthread_mutex_unlock(&job->mu);

        uint8_t *data = NULL;
        size_t n = 0;
        int rc = chk_rc < 0 ? sl__error(chk_rc, "%s", chk_msg)
                            : load_file(job->root, &job->e[i], &chk, &data, &n);

        pthread_mutex_lock(&job->mu);
        slot *s = &job->slots[i % job->window];
        s->rc = rc;
        s->data = data;
        s->n = n;
        if (rc < 0)
            snprintf(s->msg, sizeof s->msg, "%s", sl_errmsg());
        s->ready = 1;
        pthread_cond_signal(&job->ready_cv);
    }
    pthread_mutex_unlock(&job->mu);
    sl_source__checker_dispose(&chk);
    return NULL;
}

/* What one file can be wrong with; anything else (SL_ENOMEM, a write error)
 * stops the pack even under skip_bad. */
static int skippable(int rc) {
    return rc == SL_EIO || rc == SL_EDECODE || rc == SL_ELIMIT || rc == SL_EUNSUPPORTED;
}

int sl_source__pack_imagefolder(const char *root_in, const char *dst,
                                const sl_pack_options *opts, sl_pack_report *rep) {
    int rc = SL_OK;
    char root[4096];
    name_list cls = {0};
    entry_list ents = {0};
    sl_schema *schema = NULL;
    sl_pack_run run = {0};
    char *classes = NULL;
    int nthreads = 0, sync_init = 0;
    sl_source__checker chk;
    memset(&chk, 0, sizeof chk);
    reader_job job;
    memset(&job, 0, sizeof job);

    rep->kind = SL_PACK_IMAGEFOLDER;
    SL_CHECK(list_folder(root_in, opts->skip_bad, rep, root, &cls, &ents));
    rep->nclasses = (int)cls.n;

    SL_CHECK(sl_schema_create(&schema));
    SL_CHECK(sl_schema_add(schema, "image", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL, 0));
    SL_CHECK(sl_schema_add(schema, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL, 0));
    SL_CHECK(sl_schema_add(schema, "path", SL_COL_STRING, SL_DTYPE_INVALID, 0, NULL, 0));
    SL_CHECK(classes_json(&cls, &classes));
    /* the plan: what a resume must find the same (the classes, and every
     * file's place and label, in order) */
    XXH3_state_t *fp = XXH3_createState();
    if (!fp)
        SL_FAIL(SL_ENOMEM, "%s: out of memory planning the pack", root);
    XXH3_64bits_reset(fp);
    XXH3_64bits_update(fp, classes, strlen(classes) + 1);
    for (size_t i = 0; i < ents.n; i++) {
        int64_t l = ents.v[i].label;
        XXH3_64bits_update(fp, ents.v[i].rel, strlen(ents.v[i].rel) + 1);
        XXH3_64bits_update(fp, &l, sizeof l);
    }
    sl_pack_plan plan = {"imagefolder", ents.n, XXH3_64bits_digest(fp)};
    XXH3_freeState(fp);
    SL_CHECK(sl_source__pack_begin(&run, dst, schema, &plan, opts, rep));
    sl_writer *w = run.w;
    SL_CHECK(sl_writer_set_meta(w, "classes", classes));
    SL_CHECK(sl_writer_set_meta(w, "source", "imagefolder"));

    /* A resumed pack reads the files after those it kept. */
    const size_t first = (size_t)run.start, todo = ents.n - first;
    int jobs = opts->jobs > 0 ? opts->jobs : sl__ncpus();
    if ((size_t)jobs > todo)
        jobs = todo ? (int)todo : 1;
    job.root = root;
    job.e = ents.v + first;
    job.n = todo;
    job.window = (size_t)jobs * 4;
    job.check = opts->check;
    job.restart = opts->jpeg_restart;
    if (jobs > 1) {
        job.slots = sl__calloc(job.window, sizeof *job.slots);
        if (!job.slots || sl__workers_init_cv(&job.ws, "packread", jobs, &job.mu, &job.space_cv) < 0)
            SL_FAIL(SL_ENOMEM, "%s: out of memory starting %d readers", root, jobs);
        pthread_mutex_init(&job.mu, NULL);
        pthread_cond_init(&job.ready_cv, NULL);
        pthread_cond_init(&job.space_cv, NULL);
        sync_init = 1;
        /* as many as start; the ones that do share the files */
        while (nthreads < jobs && sl__workers_start(&job.ws, reader_main, &job) == SL_OK)
            nthreads++;
        if (nthreads == 0)
            SL_FAIL_PREFIX(SL_EIO, "%s: reader threads", root);
    } else {
        SL_CHECK(sl_source__checker_init(&chk, opts->check));
        chk.restart = opts->jpeg_restart;
    }

    for (size_t j = 0; j < todo; j++) {
        const size_t i = first + j;
        slot cur;
        if (sl_source__pack_stop(&run, 0))
            SL_FAIL(SL_ECANCELED, "interrupted");
        if (nthreads) {
            pthread_mutex_lock(&job.mu);
            slot *s = &job.slots[j % job.window];
            while (!s->ready)
                pthread_cond_wait(&job.ready_cv, &job.mu);
            cur = *s;
            s->ready = 0;
            s->data = NULL;
            job.next_write = j + 1;
            pthread_cond_broadcast(&job.space_cv);
            pthread_mutex_unlock(&job.mu);
        } else {
            cur.rc = load_file(root, &ents.v[i], &chk, &cur.data, &cur.n);
            if (cur.rc < 0)
                snprintf(cur.msg, sizeof cur.msg, "%s", sl_errmsg());
        }
        if (cur.rc < 0) {
            if (opts->skip_bad && skippable(cur.rc)) {
                SL_CHECK(sl_source__pack_skipped(&run, i, cur.msg));
                continue;
            }
            SL_FAIL(cur.rc, "%s", cur.msg);
        }
        int64_t label = ents.v[i].label;
        int64_t ilen = (int64_t)cur.n, plen = (int64_t)strlen(ents.v[i].rel);
        sl_tensor cols[3];
        memset(cols, 0, sizeof cols);
        sl_tensor_view(&cols[0], cur.data, SL_U8, 1, &ilen);
        sl_tensor_view(&cols[1], &label, SL_I64, 0, NULL);
        sl_tensor_view(&cols[2], ents.v[i].rel, SL_U8, 1, &plen);
        rc = sl_writer_append(w, cols, 3);
        sl__free(cur.data);
        SL_CHECK(rc);
        rep->records++;
        rep->bytes += cur.n;
        if (opts->progress)
            opts->progress(i + 1, ents.n, rep->bytes, opts->user);
    }
    if (rep->records == 0)
        SL_FAIL(SL_EINVAL, "%s: every file was skipped; nothing to pack", root);

cleanup:
    sl__workers_dispose(&job.ws); /* stop (wakes space_cv), join */
    rc = sl_source__pack_end(&run, rc);
    if (job.slots)
        for (size_t s = 0; s < job.window; s++)
            sl__free(job.slots[s].data);
    if (sync_init) {
        pthread_mutex_destroy(&job.mu);
        pthread_cond_destroy(&job.ready_cv);
        pthread_cond_destroy(&job.space_cv);
    }
    sl_source__checker_dispose(&chk);
    sl__free(job.slots);
    sl__free(classes);
    sl_schema_free(schema);
    entries_free(&ents);
    names_free(&cls);
    return rc;
}

/* ---- an ImageFolder as a direct source ----------------------------------------- */

/* Listed once at open (torchvision's classes, order and extensions, as pack
 * sees them); each read is one file read into a tensor from the cursor's
 * allocator. The content is not checked here: the decode op names a file
 * that is not an image, with the record, under the pipeline's error policy. */
typedef struct folder_source {
    sl_source base;
    char root[4096];
    entry_list ents;
    name_list cls;
    int64_t *labels; /* per record, for filters on label */
} folder_source;

static int folder_read(sl_source *src, sl_source_cursor *cur, uint64_t i, sl_sample *out) {
    folder_source *s = (folder_source *)src;
    const entry *e = &s->ents.v[i];
    char path[4096];
    int fd = -1, rc = SL_OK;
    SL_TRY(join(path, sizeof path, s->root, e->rel));
    out->index = i;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        SL_FAIL(SL_EIO, "%s: record %llu: cannot open: %s", path, (unsigned long long)i,
                strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        SL_FAIL(SL_EIO, "%s: record %llu: not a readable regular file", path,
                (unsigned long long)i);
    if ((uint64_t)st.st_size > MAX_IMAGE_BYTES)
        SL_FAIL(SL_ELIMIT, "%s: record %llu: %lld bytes is over the %llu-byte limit for one "
                "image", path, (unsigned long long)i, (long long)st.st_size,
                (unsigned long long)MAX_IMAGE_BYTES);
    int64_t n = (int64_t)st.st_size, len = (int64_t)strlen(e->rel);
    SL_CHECK(cur->alloc(cur->alloc_ctx, &out->col[0], SL_U8, 1, &n));
    out->ncols = 1;
    size_t done = 0;
    uint8_t *d = out->col[0].data;
    while (done < (size_t)n) {
        ssize_t r = pread(fd, d + done, (size_t)n - done, (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            SL_FAIL(SL_EIO, "%s: record %llu: read failed: %s", path, (unsigned long long)i,
                    strerror(errno));
        if (r == 0)
            SL_FAIL(SL_EIO, "%s: record %llu: file shrank while being read", path,
                    (unsigned long long)i);
        done += (size_t)r;
    }
    SL_CHECK(cur->alloc(cur->alloc_ctx, &out->col[1], SL_I64, 0, NULL));
    out->ncols = 2;
    *(int64_t *)out->col[1].data = e->label;
    SL_CHECK(cur->alloc(cur->alloc_ctx, &out->col[2], SL_U8, 1, &len));
    out->ncols = 3;
    memcpy(out->col[2].data, e->rel, (size_t)len);
cleanup:
    if (fd >= 0)
        close(fd);
    if (rc < 0)
        sl_sample_clear(out);
    return rc;
}

static int folder_index_column(sl_source *src, int col, const void **vals_out) {
    if (col != 1)
        return sl__error(SL_EINVAL, "%s: column %d is not indexed", src->name, col);
    *vals_out = ((folder_source *)src)->labels;
    return SL_OK;
}

static void folder_locate(sl_source *src, uint64_t i, char *buf, size_t cap) {
    folder_source *s = (folder_source *)src;
    snprintf(buf, cap, "%s/%s: record %llu", s->root, s->ents.v[i].rel, (unsigned long long)i);
}

static void folder_free(sl_source *src) {
    folder_source *s = (folder_source *)src;
    entries_free(&s->ents);
    names_free(&s->cls);
    sl__free(s->labels);
    sl__free(s);
}

static const sl_source_vtbl folder_vtbl = {
    .repair = "fix or remove the files named, or pack with --skip-bad to leave them out",
    .read = folder_read,
    .index_column = folder_index_column,
    .locate = folder_locate,
    .free = folder_free,
};

static const sl_param folder_params[] = {
    {.key = "image_folder", .type = SL_PARAM_STRING, .flags = SL_PARAM_REQUIRED, .min = 1,
     .max = -1, .offset = 0, .expect = "a directory path",
     .doc = "a folder of class folders of images"},
    {0}};
const sl_param_table sl_source__folder_table = {folder_params, "an image folder source", NULL, 0,
                                                0};

int sl_source__open_imagefolder(sl_source **out, const cJSON *obj, const char *field) {
    *out = NULL;
    int rc = SL_OK;
    const char *root = NULL;
    SL_TRY(sl_source__read_options(&sl_source__folder_table, obj, field, &root));
    folder_source *s = sl_source__new(sizeof *s, &folder_vtbl, "image_folder");
    if (!s)
        return sl__oom("opening an image folder");
    SL_CHECK(list_folder(root, 0, NULL, s->root, &s->cls, &s->ents));
    snprintf(s->base.name, sizeof s->base.name, "%.200s", sl__base_name(s->root));
    s->base.count = s->ents.n;
    s->labels = sl__malloc((s->ents.n ? s->ents.n : 1) * sizeof *s->labels);
    if (!s->labels)
        SL_FAIL(SL_ENOMEM, "%s: out of memory listing %zu files", s->root, s->ents.n);
    for (size_t i = 0; i < s->ents.n; i++)
        s->labels[i] = s->ents.v[i].label;
    SL_CHECK(sl_source__add_col(&s->base, "image", SL_COL_BYTES, SL_DTYPE_INVALID, 0, NULL));
    SL_CHECK(sl_source__add_col(&s->base, "label", SL_COL_INT64, SL_DTYPE_INVALID, 0, NULL));
    SL_CHECK(sl_source__add_col(&s->base, "path", SL_COL_STRING, SL_DTYPE_INVALID, 0, NULL));
    s->base.col[0].encoded = s->base.col[0].image = 1;
    s->base.col[1].indexed = 1;
    /* The class names travel as metadata, as a pack stores them. */
    s->base.meta = cJSON_CreateObject();
    cJSON *names = s->base.meta ? cJSON_AddArrayToObject(s->base.meta, "classes") : NULL;
    if (!names)
        SL_FAIL(SL_ENOMEM, "%s: out of memory", s->root);
    for (size_t c = 0; c < s->cls.n; c++) {
        cJSON *nm = cJSON_CreateString(s->cls.v[c].name);
        if (!nm)
            SL_FAIL(SL_ENOMEM, "%s: out of memory", s->root);
        cJSON_AddItemToArray(names, nm);
    }
    *out = &s->base;
    return SL_OK;
cleanup:
    cJSON_Delete(s->base.meta);
    folder_free(&s->base);
    return rc;
}

/* Any directory that is not a .slr dataset: the open says what is wrong
 * with it if it is not an ImageFolder either. */
int sl_source__sniff_imagefolder(const char *path, int is_dir, const uint8_t *head, size_t n) {
    (void)head;
    (void)n;
    return is_dir && !sl_source__sniff_slr(path, is_dir, head, n);
}
