/*
 * manifest.c — the manifest.json of a sharded dataset directory.
 *
 * The manifest has no checksum of its own; instead it is validated strictly
 * (types, ranges, contiguous numbering, plain file names) and every shard's
 * footer must agree with it (record range, size, footer checksum), so a
 * damaged manifest or a swapped shard is reported, never read as data.
 */
#include "record/record_format.h"
#include "core/params.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

void sl_record__manifest_clear(slr_manifest *m) {
    for (int i = 0; i < m->nshards; i++)
        sl__free(m->shards[i].file);
    sl__free(m->shards);
    sl_record__meta_clear(&m->meta);
    memset(m, 0, sizeof *m);
}

/* The manifest's keys (docs/FORMAT.md). Keys a later writer adds are
 * ignored (open tables); messages name the file and quote the key. */
typedef struct {
    const char *format;
    uint64_t version;
} manifest_head;

static const sl_param head_params[] = {
    {.key = "format", .type = SL_PARAM_STRING, .flags = SL_PARAM_REQUIRED,
     .offset = offsetof(manifest_head, format), .expect = "\"" SLR_MANIFEST_FORMAT "\""},
    {.key = "version", .type = SL_PARAM_UINT64, .flags = SL_PARAM_REQUIRED, .min = 1, .max = -1,
     .offset = offsetof(manifest_head, version), .doc = "the manifest format's version"},
    {0}};

typedef struct {
    uint64_t records;
    const cJSON *shards, *meta;
} manifest_body;

static const sl_param body_params[] = {
    {.key = "records", .type = SL_PARAM_UINT64, .flags = SL_PARAM_REQUIRED, .min = 0, .max = -1,
     .offset = offsetof(manifest_body, records), .doc = "records in all shards"},
    {.key = "shards", .type = SL_PARAM_ARRAY, .flags = SL_PARAM_REQUIRED, .min = 1,
     .max = 1000000, .offset = offsetof(manifest_body, shards),
     .expect = "a non-empty array (at most 1000000 shards)"},
    {.key = "meta", .type = SL_PARAM_OBJECT, .offset = offsetof(manifest_body, meta),
     .doc = "string metadata"},
    {0}};

static const sl_param shard_params[] = {
    {.key = "file", .type = SL_PARAM_STRING, .flags = SL_PARAM_REQUIRED, .min = 1, .max = 255,
     .offset = offsetof(slr_manifest_shard, file), .expect = "a plain file name"},
    {.key = "first", .type = SL_PARAM_UINT64, .flags = SL_PARAM_REQUIRED, .min = 0, .max = -1,
     .offset = offsetof(slr_manifest_shard, first)},
    {.key = "records", .type = SL_PARAM_UINT64, .flags = SL_PARAM_REQUIRED, .min = 0, .max = -1,
     .offset = offsetof(slr_manifest_shard, records)},
    {.key = "bytes", .type = SL_PARAM_UINT64, .flags = SL_PARAM_REQUIRED, .min = 0, .max = -1,
     .offset = offsetof(slr_manifest_shard, bytes)},
    {.key = "footer_checksum", .type = SL_PARAM_STRING, .flags = SL_PARAM_REQUIRED, .min = 16,
     .max = 16, .offset = SL_PARAM_NOWHERE, .expect = "16 hex digits"},
    {0}};

static const sl_param_table head_table = {head_params, NULL, NULL, SL_ECORRUPT,
                                          SL_PARAMS_OPEN | SL_PARAMS_QUOTED};
static const sl_param_table body_table = {body_params, NULL, NULL, SL_ECORRUPT,
                                          SL_PARAMS_OPEN | SL_PARAMS_QUOTED};
static const sl_param_table shard_table = {shard_params, NULL, NULL, SL_ECORRUPT,
                                           SL_PARAMS_OPEN | SL_PARAMS_QUOTED};

static bool plain_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 255 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    return strchr(s, '/') == NULL && strcmp(s, SLR_MANIFEST_NAME) != 0;
}

/* sl_io__open_checked's check of a remote manifest: whole JSON (a copy
 * damaged on the way, or in the shard cache, is fetched again once). */
static int json_check(sl_io *io, void *user) {
    (void)user;
    const uint8_t *m = sl_io__map(io);
    size_t n = (size_t)sl_io__size(io);
    if (!m || n > SLR_MANIFEST_MAX)
        return SL_OK; /* empty or too large: refused below, with its reason */
    sl__json_init();
    cJSON *root = cJSON_ParseWithLength((const char *)m, n);
    if (!root && sl__json_failed())
        return sl__oom("reading a manifest");
    if (!root || memchr(m, 0, n))
        return sl__error(SL_ECORRUPT, "%s: not valid JSON", sl_io__name(io));
    cJSON_Delete(root);
    return SL_OK;
}

int sl_record__manifest_load(const char *mpath, slr_manifest *out) {
    int rc = SL_OK;
    char *text = NULL;
    cJSON *root = NULL;
    memset(out, 0, sizeof *out);
    sl_io *io = NULL;
    /* A remote manifest goes through the shard cache (a warm run asks
     * nothing within SLUICE_CACHE_TTL) and heals like a shard; it is not
     * asked about first (a HEAD, a round trip): the open finds it missing,
     * and with no cache in use one that fits in SLUICE_HTTP_OPEN_BYTES comes
     * in one round trip (SL_IO_EDGES). */
    int src;
    if (sl_io__is_url(mpath)) {
        src = sl_io__open_checked(&io, mpath, SL_IO_MAP | SL_IO_MISSING_OK | SL_IO_EDGES, NULL,
                                  json_check, NULL);
    } else {
        sl_io_info st;
        src = sl_io__stat(mpath, &st);
        if (src == SL_OK)
            src = sl_io__open(&io, mpath, 0);
    }
    if (src == SL_END)
        return sl__error(SL_ECORRUPT, "%s: cannot open: %s", mpath, sl_io__missing(mpath));
    SL_TRY(src);
    const uint64_t size = sl_io__size(io);
    if (size == 0)
        SL_FAIL(SL_ECORRUPT, "%s: empty file", mpath);
    if (size > SLR_MANIFEST_MAX)
        SL_FAIL(SL_ELIMIT, "%s: %llu bytes is larger than a manifest may be (%u)", mpath,
                (unsigned long long)size, SLR_MANIFEST_MAX);
    text = sl__malloc((size_t)size + 1);
    if (!text) {
        rc = sl__oom("reading a manifest");
        goto cleanup;
    }
    SL_CHECK(sl_io__read(io, text, (size_t)size, 0));
    text[size] = 0;
    if (strlen(text) != (size_t)size)
        SL_FAIL(SL_ECORRUPT, "%s: not valid JSON (contains a NUL byte)", mpath);
    sl__json_init();
    root = cJSON_ParseWithLength(text, (size_t)size);
    if (!root && sl__json_failed()) {
        rc = sl__oom("reading a manifest");
        goto cleanup;
    }
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long pos = at && at >= text && at <= text + size ? (long)(at - text) : -1;
        SL_FAIL(SL_ECORRUPT, "%s: not valid JSON (error near byte %ld)", mpath, pos);
    }
    if (!cJSON_IsObject(root))
        SL_FAIL(SL_ECORRUPT, "%s: not a JSON object", mpath);
    /* format and version first: a newer manifest is refused as such */
    manifest_head head;
    SL_CHECK(sl_param_read(&head_table, &head_params[0], root, mpath, &head.format));
    if (strcmp(head.format, SLR_MANIFEST_FORMAT) != 0)
        SL_FAIL(SL_ECORRUPT, "%s: \"format\" is not \"%s\"", mpath, SLR_MANIFEST_FORMAT);
    SL_CHECK(sl_param_read(&head_table, &head_params[1], root, mpath, &head.version));
    if (head.version > SLR_MANIFEST_VERSION)
        SL_FAIL(SL_EUNSUPPORTED, "%s: format version %llu is newer than this reader (max %d)", mpath,
                (unsigned long long)head.version, SLR_MANIFEST_VERSION);
    manifest_body body;
    SL_CHECK(sl_params_read(&body_table, root, mpath, &body));
    out->records = body.records;
    const cJSON *shards = body.shards;
    int n = cJSON_GetArraySize(shards);
    out->shards = sl__calloc((size_t)n, sizeof *out->shards);
    if (!out->shards) {
        rc = sl__oom("reading a manifest");
        goto cleanup;
    }
    uint64_t next = 0;
    int i = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, shards) {
        slr_manifest_shard *ms = &out->shards[i];
        char field[SL__ERRMSG_MAX];
        snprintf(field, sizeof field, "%s: shard %d", mpath, i);
        const char *file = NULL;
        if (!cJSON_IsObject(s))
            SL_FAIL(SL_ECORRUPT, "%s: must be an object", field);
        SL_CHECK(sl_param_read(&shard_table, &shard_params[0], s, field, &file));
        if (!plain_name(file))
            SL_FAIL(SL_ECORRUPT, "%s: shard %d: \"file\" must be a plain file name", mpath, i);
        snprintf(field, sizeof field, "%s: shard %d (%s)", mpath, i, file);
        slr_manifest_shard got;
        SL_CHECK(sl_params_read(&shard_table, s, field, &got));
        ms->first = got.first;
        ms->records = got.records;
        ms->bytes = got.bytes;
        const cJSON *sum = cJSON_GetObjectItemCaseSensitive(s, "footer_checksum");
        char *end = NULL;
        errno = 0;
        ms->footer_checksum = strtoull(sum->valuestring, &end, 16);
        if (errno || *end || sum->valuestring[0] == '-' || sum->valuestring[0] == '+' ||
            sum->valuestring[0] == ' ')
            SL_FAIL(SL_ECORRUPT, "%s: shard %d (%s): \"footer_checksum\" must be 16 hex digits",
                    mpath, i, file);
        if (ms->bytes < SLR_MIN_SHARD_BYTES || ms->records > sl_record__max_records(ms->bytes))
            SL_FAIL(SL_ECORRUPT, "%s: shard %d (%s): %llu records cannot fit in %llu bytes (a "
                    "shard takes at least %u bytes and each record %u more: at most %llu); the "
                    "manifest is damaged: write the dataset again",
                    mpath, i, file, (unsigned long long)ms->records,
                    (unsigned long long)ms->bytes, SLR_MIN_SHARD_BYTES, SLR_MIN_RECORD_BYTES,
                    (unsigned long long)sl_record__max_records(ms->bytes));
        if (ms->first != next)
            SL_FAIL(SL_ECORRUPT, "%s: shard %d (%s) starts at record %llu, expected %llu", mpath, i,
                    file, (unsigned long long)ms->first, (unsigned long long)next);
        for (int k = 0; k < i; k++)
            if (strcmp(out->shards[k].file, file) == 0)
                SL_FAIL(SL_ECORRUPT, "%s: shard %s is listed twice", mpath, file);
        ms->file = sl__strdup(file);
        if (!ms->file) {
            rc = sl__oom("reading a manifest");
            goto cleanup;
        }
        out->nshards = ++i;
        next += ms->records;
    }
    if (next != out->records)
        SL_FAIL(SL_ECORRUPT, "%s: shards hold %llu records, \"records\" says %llu", mpath,
                (unsigned long long)next, (unsigned long long)out->records);
    const cJSON *meta = body.meta;
    if (meta) {
        const cJSON *kv;
        cJSON_ArrayForEach(kv, meta) {
            if (!cJSON_IsString(kv) || !kv->string || !*kv->string ||
                strlen(kv->string) > SLR_META_KEY_MAX)
                SL_FAIL(SL_ECORRUPT, "%s: \"meta\" entries must be strings with 1-%u byte keys",
                        mpath, SLR_META_KEY_MAX);
            if (sl_record__meta_get(&out->meta, kv->string))
                SL_FAIL(SL_ECORRUPT, "%s: duplicate metadata key \"%.64s\"", mpath, kv->string);
            SL_CHECK(sl_record__meta_set(&out->meta, kv->string, kv->valuestring));
        }
    }
cleanup:
    sl_io__close(io);
    cJSON_Delete(root);
    sl__free(text);
    if (rc < 0)
        sl_record__manifest_clear(out);
    return rc;
}
