/*
 * source_shard.c — a shard file of the tar and TFRecord sources: its index
 * header at open, its bytes at first read, one version per run; an open
 * shard's bytes, Parquet's fetched-whole files' too (source_shard.h).
 */
#include "source/source_shard.h"

#include <inttypes.h>
#include <string.h>

int sl_shard_file__load_head(sl_shard_file *f, const char *kind, sl_sidx_use use) {
    SL_TRY(sl_sidx__load_head_for(f->path, kind, use, &f->head));
    /* the data as the index was checked against it: the version read */
    if (f->head && f->head->data_version && !(f->version = sl__strdup(f->head->data_version)))
        return sl__oom("opening a shard's index");
    return SL_OK;
}

int sl_shard_file__open(sl_shard_file *f, const char *kind, unsigned flags,
                        sl_io_check_fn check, void *check_user, sl_sidx **ix, sl_io **io) {
    *ix = NULL;
    *io = NULL;
    if (f->head)
        SL_TRY(sl_sidx__load_again(f->path, kind, f->head, ix));
    int rc;
    if (*ix && sl_io__is_url(f->path))
        rc = sl_io__open_checked(io, f->path, flags, f->version, sl_sidx__io_check, *ix);
    else if (!f->head && check && sl_io__is_url(f->path))
        rc = sl_io__open_checked(io, f->path, flags, f->version, check, check_user);
    else
        rc = sl_io__open_version(io, f->path, flags, f->version);
    if (rc == SL_OK && !f->version && !(f->version = sl__strdup(sl_io__version(*io))))
        rc = sl__oom("opening a shard");
    if (rc < 0) {
        sl_io__close(*io);
        *io = NULL;
        sl_sidx__free(*ix);
        *ix = NULL;
    }
    return rc;
}

int sl_shard_file__changed(const sl_shard_file *f, uint64_t now) {
    return sl__error(SL_EIO, "%s: %" PRIu64 " bytes now, %" PRIu64 " when the source opened: it "
                     "changed; open the source again", sl_io__short_name(f->path), now, f->size);
}

void sl_shard_file__dispose(sl_shard_file *f) {
    sl_sidx__free(f->head);
    sl__free(f->path);
    sl__free(f->version);
}

void sl_shard_bytes__dispose(sl_shard_bytes *b) {
    sl_io__map_close(b->io, b->buf);
    sl__free(b->heap);
    sl_sidx__free(b->ix);
    memset(b, 0, sizeof *b);
}

int sl_shard_bytes__keep(sl_shard_bytes *b, const char *what, void **state_out) {
    sl_shard_bytes *o = sl__malloc(sizeof *o);
    if (!o) {
        sl_shard_bytes__dispose(b);
        return sl__oom(what);
    }
    *o = *b;
    *state_out = o;
    return SL_OK;
}

void sl_shard_bytes__close(void *user, int k, void *state) {
    (void)user;
    (void)k;
    sl_shard_bytes__dispose(state);
    sl__free(state);
}
