/*
 * manifest.c — the manifest.json of a sharded dataset directory.
 *
 * The manifest has no checksum of its own; instead it is validated strictly
 * (types, ranges, contiguous numbering, plain file names) and every shard's
 * footer must agree with it (record range, size, footer checksum), so a
 * damaged manifest or a swapped shard is reported, never read as data.
 */
#include "record/record_format.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
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

/* A JSON number that is an exact non-negative integer below 2^53. */
static bool get_u64(const cJSON *o, const char *key, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || floor(d) != d)
        return false;
    *out = (uint64_t)d;
    return true;
}

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
        src = sl_io__open_checked(&io, mpath, SL_IO_MAP | SL_IO_MISSING_OK | SL_IO_EDGES,
                                  json_check, NULL);
    } else {
        sl_io_info st;
        src = sl_io__stat(mpath, &st);
        if (src == SL_OK)
            src = sl_io__open(&io, mpath, 0);
    }
    if (src == SL_END)
        return sl__error(SL_ECORRUPT, "%s: cannot open: %s", mpath,
                         sl_io__is_url(mpath) ? "HTTP 404 (not found)" : strerror(ENOENT));
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
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, SLR_MANIFEST_FORMAT) != 0)
        SL_FAIL(SL_ECORRUPT, "%s: \"format\" is not \"%s\"", mpath, SLR_MANIFEST_FORMAT);
    uint64_t version;
    if (!get_u64(root, "version", &version) || version == 0)
        SL_FAIL(SL_ECORRUPT, "%s: \"version\" is missing or not a positive integer", mpath);
    if (version > SLR_MANIFEST_VERSION)
        SL_FAIL(SL_EUNSUPPORTED, "%s: format version %llu is newer than this reader (max %d)", mpath,
                (unsigned long long)version, SLR_MANIFEST_VERSION);
    if (!get_u64(root, "records", &out->records))
        SL_FAIL(SL_ECORRUPT, "%s: \"records\" is missing or not a non-negative integer", mpath);
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(root, "shards");
    int n = cJSON_IsArray(shards) ? cJSON_GetArraySize(shards) : -1;
    if (n < 1 || n > 1000000)
        SL_FAIL(SL_ECORRUPT, "%s: \"shards\" must be a non-empty array", mpath);
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
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(s, "file");
        const cJSON *sum = cJSON_GetObjectItemCaseSensitive(s, "footer_checksum");
        if (!cJSON_IsObject(s) || !cJSON_IsString(file) || !plain_name(file->valuestring))
            SL_FAIL(SL_ECORRUPT, "%s: shard %d: \"file\" must be a plain file name", mpath, i);
        if (!get_u64(s, "first", &ms->first) || !get_u64(s, "records", &ms->records) ||
            !get_u64(s, "bytes", &ms->bytes))
            SL_FAIL(SL_ECORRUPT, "%s: shard %d (%s): \"first\", \"records\" and \"bytes\" must be "
                    "non-negative integers", mpath, i, file->valuestring);
        char *end = NULL;
        if (!cJSON_IsString(sum) || strlen(sum->valuestring) != 16)
            SL_FAIL(SL_ECORRUPT, "%s: shard %d (%s): \"footer_checksum\" must be 16 hex digits",
                    mpath, i, file->valuestring);
        errno = 0;
        ms->footer_checksum = strtoull(sum->valuestring, &end, 16);
        if (errno || *end || sum->valuestring[0] == '-' || sum->valuestring[0] == '+' ||
            sum->valuestring[0] == ' ')
            SL_FAIL(SL_ECORRUPT, "%s: shard %d (%s): \"footer_checksum\" must be 16 hex digits",
                    mpath, i, file->valuestring);
        if (ms->bytes < SLR_MIN_SHARD_BYTES || ms->records > sl_record__max_records(ms->bytes))
            SL_FAIL(SL_ECORRUPT, "%s: shard %d (%s): %llu records cannot fit in %llu bytes (a "
                    "shard takes at least %u bytes and each record %u more: at most %llu); the "
                    "manifest is damaged: write the dataset again",
                    mpath, i, file->valuestring, (unsigned long long)ms->records,
                    (unsigned long long)ms->bytes, SLR_MIN_SHARD_BYTES, SLR_MIN_RECORD_BYTES,
                    (unsigned long long)sl_record__max_records(ms->bytes));
        if (ms->first != next)
            SL_FAIL(SL_ECORRUPT, "%s: shard %d (%s) starts at record %llu, expected %llu", mpath, i,
                    file->valuestring, (unsigned long long)ms->first, (unsigned long long)next);
        for (int k = 0; k < i; k++)
            if (strcmp(out->shards[k].file, file->valuestring) == 0)
                SL_FAIL(SL_ECORRUPT, "%s: shard %s is listed twice", mpath, file->valuestring);
        ms->file = sl__strdup(file->valuestring);
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
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
    if (meta) {
        if (!cJSON_IsObject(meta))
            SL_FAIL(SL_ECORRUPT, "%s: \"meta\" is not an object", mpath);
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
