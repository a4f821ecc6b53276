/*
 * Resuming an interrupted write (sl_writer__resume, record_writer.c invariant
 * 5): whatever moment a writer stopped at — records buffered or flushed, a
 * shard torn at any byte, a shard just sealed, the manifest written but the
 * dataset not yet published — resuming and appending the records after the
 * ones kept gives byte for byte the files of the write that was never
 * interrupted.
 */
#include "test.h"
#include "slr_testutil.h"
#include "record/record_format.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NREC 60

static sl_writer_options opts(void) {
    sl_writer_options o = SL_WRITER_OPTIONS_INIT;
    o.shard_bytes = 1400; /* several shards of a handful of records */
    o.fsync = 0;
    return o;
}

static void set_meta(sl_writer *w) { ASSERT_OK(sl_writer_set_meta(w, "classes", "[\"a\",\"b\"]")); }

/* The uninterrupted write of records 0..NREC-1 at `path`. */
static void write_all(const char *path, sl_schema *s) {
    sl_writer_options o = opts();
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, &o));
    set_meta(w);
    for (uint64_t i = 0; i < NREC; i++)
        ASSERT_OK(slr_simple_append(w, i, 1));
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
}

static void copy_dir(const char *from, const char *to) {
    ASSERT_EQ(mkdir(to, 0755), 0);
    DIR *d = opendir(from);
    ASSERT(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char a[1200], b[1200];
        snprintf(a, sizeof a, "%s/%s", from, e->d_name);
        snprintf(b, sizeof b, "%s/%s", to, e->d_name);
        size_t n;
        unsigned char *p = sl_test_read_file(a, &n);
        sl_test_write_file(b, p, n);
        free(p);
    }
    closedir(d);
}

/* Resume `path` (its .partial there), append what follows, close; the
 * result must be `ref`'s bytes. Returns the records kept. */
static uint64_t resume_and_finish(const char *path, const char *ref, sl_schema *s) {
    sl_writer_options o = opts();
    sl_writer *w;
    ASSERT_OK(sl_writer__resume(&w, path, s, &o));
    uint64_t kept = sl_writer_count(w);
    ASSERT(kept <= NREC);
    set_meta(w);
    for (uint64_t i = kept; i < NREC; i++)
        ASSERT_OK(slr_simple_append(w, i, 1));
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    slr_same_files(ref, path);
    char partial[1200];
    snprintf(partial, sizeof partial, "%s.partial", path);
    ASSERT(!slr_exists(partial));
    return kept;
}

/* The state a writer leaves when stopped after k records: its .partial
 * copied aside (with `flush`, the buffered records written first, as a
 * suspend does; without, as a kill -9 finds it), named for `path`. */
static void stopped_after(const char *path, sl_schema *s, uint64_t k, int flush) {
    char tmp[1200], tmp_partial[1300], partial[1300];
    snprintf(tmp, sizeof tmp, "%s.live", path);
    snprintf(tmp_partial, sizeof tmp_partial, "%s.partial", tmp);
    snprintf(partial, sizeof partial, "%s.partial", path);
    sl_writer_options o = opts();
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, tmp, s, &o));
    set_meta(w);
    for (uint64_t i = 0; i < k; i++)
        ASSERT_OK(slr_simple_append(w, i, 1));
    if (flush)
        ASSERT_OK(sl_writer__flush(w));
    copy_dir(tmp_partial, partial);
    sl_writer_free(w); /* removes its own temporaries */
}

SL_TEST(record_resume__after_any_record_equals_the_uninterrupted_write) {
    char ref[1200], path[1200];
    snprintf(ref, sizeof ref, "%.1000s/ref.slr", sl_test_tmpdir());
    snprintf(path, sizeof path, "%.1000s/r.slr", sl_test_tmpdir());
    sl_schema *s = slr_simple_schema(1);
    write_all(ref, s);
    for (uint64_t k = 0; k <= NREC; k++) {
        for (int flush = 0; flush < 2; flush++) {
            stopped_after(path, s, k, flush);
            uint64_t kept = resume_and_finish(path, ref, s);
            if (flush)
                ASSERT_U64_EQ(kept, k); /* nothing flushed is lost */
            slr_remove_tree(path);
        }
    }
    sl_schema_free(s);
}

/* The unfinished shard cut at every byte (a torn write, a kill mid-record):
 * the whole records before the cut are kept, the rest written again. */
SL_TEST(record_resume__torn_at_any_byte_equals_the_uninterrupted_write) {
    char ref[1200], path[1200], live[1300], shard[1400];
    snprintf(ref, sizeof ref, "%.1000s/ref.slr", sl_test_tmpdir());
    snprintf(path, sizeof path, "%.1000s/t.slr", sl_test_tmpdir());
    sl_schema *s = slr_simple_schema(1);
    write_all(ref, s);
    /* records of shard 1 in flight: find the unfinished shard's name */
    stopped_after(path, s, 17, 1);
    snprintf(live, sizeof live, "%s.partial", path);
    int last = -1;
    for (int i = 0; i < 20; i++) {
        snprintf(shard, sizeof shard, "%s/shard-%05d.slr.partial", live, i);
        if (slr_exists(shard))
            last = i;
    }
    ASSERT(last >= 1);
    snprintf(shard, sizeof shard, "%s/shard-%05d.slr.partial", live, last);
    size_t full;
    unsigned char *bytes = sl_test_read_file(shard, &full);
    slr_remove_tree(live);
    for (size_t cut = 0; cut <= full; cut++) {
        stopped_after(path, s, 17, 1);
        sl_test_write_file(shard, bytes, cut);
        resume_and_finish(path, ref, s);
        slr_remove_tree(path);
    }
    free(bytes);
    sl_schema_free(s);
}

/* Every shard sealed and the manifest written, the directory not renamed
 * into place yet (a kill inside close): resuming publishes the same. */
SL_TEST(record_resume__stopped_while_publishing) {
    char ref[1200], path[1200], partial[1300], m[1400];
    snprintf(ref, sizeof ref, "%.1000s/ref.slr", sl_test_tmpdir());
    snprintf(path, sizeof path, "%.1000s/p.slr", sl_test_tmpdir());
    snprintf(partial, sizeof partial, "%s.partial", path);
    sl_schema *s = slr_simple_schema(1);
    write_all(ref, s);
    copy_dir(ref, partial);
    snprintf(m, sizeof m, "%s/manifest.json", partial);
    ASSERT(slr_exists(m));
    ASSERT_U64_EQ(resume_and_finish(path, ref, s), NREC);
    sl_schema_free(s);
}

/* Not this write's: other columns, another shard size, a damaged finished
 * shard; nothing to resume. Each says why and leaves the files as they are. */
SL_TEST(record_resume__refuses_what_is_not_this_write) {
    char path[1200], partial[1300], shard[1400];
    snprintf(path, sizeof path, "%.1000s/x.slr", sl_test_tmpdir());
    snprintf(partial, sizeof partial, "%s.partial", path);
    sl_schema *s = slr_simple_schema(1), *other = slr_simple_schema(0);
    sl_writer_options o = opts();
    sl_writer *w;
    ASSERT_RC(sl_writer__resume(&w, path, s, &o), SL_END); /* nothing there */
    stopped_after(path, s, 30, 1);
    ASSERT_RC(sl_writer__resume(&w, path, other, &o), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "its columns are not this write's");
    o.shard_bytes = 4096;
    ASSERT_RC(sl_writer__resume(&w, path, s, &o), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "written with shards of up to 1400 bytes, not 4096");
    o = opts();
    snprintf(shard, sizeof shard, "%s/shard-00000.slr", partial);
    size_t n;
    unsigned char *b = sl_test_read_file(shard, &n);
    b[n - 30] ^= 1; /* the footer */
    sl_test_write_file(shard, b, n);
    free(b);
    ASSERT_RC(sl_writer__resume(&w, path, s, &o), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "shard-00000.slr: a finished shard whose footer or index");
    ASSERT(slr_exists(shard)); /* left as it was */
    slr_remove_tree(partial);
    sl_schema_free(s);
    sl_schema_free(other);
}

/* A suspended writer leaves its .partial (records flushed); notes are kept
 * there until the dataset is published, and never published with it. */
SL_TEST(record_resume__suspend_keeps_and_close_drops_the_notes) {
    char path[1200], partial[1300], note[1400];
    snprintf(path, sizeof path, "%.1000s/n.slr", sl_test_tmpdir());
    snprintf(partial, sizeof partial, "%s.partial", path);
    sl_schema *s = slr_simple_schema(1);
    sl_writer_options o = opts();
    sl_writer *w;
    ASSERT_OK(sl_writer_open(&w, path, s, &o));
    set_meta(w);
    ASSERT_OK(sl_writer__note_set(w, SLR_PLAN_NAME, "{\"planned\": 60}"));
    ASSERT_OK(sl_writer__note_append(w, SLR_SKIPS_NAME, "3\tbad\n"));
    for (uint64_t i = 0; i < 25; i++)
        ASSERT_OK(slr_simple_append(w, i, 1));
    ASSERT_OK(sl_writer__suspend(w));
    sl_writer_free(w);
    snprintf(note, sizeof note, "%s/%s", partial, SLR_PLAN_NAME);
    ASSERT(slr_exists(note));
    ASSERT_OK(sl_writer__resume(&w, path, s, &o));
    ASSERT_U64_EQ(sl_writer_count(w), 25);
    for (uint64_t i = 25; i < NREC; i++)
        ASSERT_OK(slr_simple_append(w, i, 1));
    ASSERT_OK(sl_writer_close(w));
    sl_writer_free(w);
    ASSERT(!slr_exists(partial));
    snprintf(note, sizeof note, "%s/%s", path, SLR_PLAN_NAME);
    ASSERT(!slr_exists(note));
    snprintf(note, sizeof note, "%s/%s", path, SLR_SKIPS_NAME);
    ASSERT(!slr_exists(note));
    sl_schema_free(s);
}
