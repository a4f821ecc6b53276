/*
 * test_recover.c — torn writes: a writer stopped mid-way leaves nothing at
 * its path, and sl_recover keeps exactly the complete records.
 */
#include "slr_testutil.h"

#include <sys/wait.h>

#include "record/record_format.h"

static uint64_t ld64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* In a child process: write n records (metadata set first), push them to the
 * .partial file, and exit without closing, as a killed process would. */
static void interrupted_write(const char *path, uint64_t n, uint64_t shard_bytes) {
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        sl_schema *s = slr_simple_schema(1);
        sl_writer_options o = SL_WRITER_OPTIONS_INIT;
        o.shard_bytes = shard_bytes;
        o.fsync = 0;
        sl_writer *w;
        if (sl_writer_open(&w, path, s, &o) != SL_OK)
            _exit(3);
        if (sl_writer_set_meta(w, "classes", "[\"a\",\"b\"]") != SL_OK)
            _exit(3);
        for (uint64_t i = 0; i < n; i++)
            if (slr_simple_append(w, i, 1) != SL_OK)
                _exit(4);
        if (sl_writer__flush(w) != SL_OK)
            _exit(5);
        _exit(0);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
}

SL_TEST(record_recover__killed_writer_single_shard) {
    char path[512], partial[600], shard[700];
    sl_test_path(path, sizeof path, "train.slr");
    snprintf(partial, sizeof partial, "%s.partial", path);
    snprintf(shard, sizeof shard, "%s/shard-00000.slr.partial", partial);
    interrupted_write(path, 25, 0);
    ASSERT(!slr_exists(path));
    ASSERT(slr_exists(shard));
    /* The partial shard is not a readable dataset. */
    slr_expect_open_fail(shard, 0, SL_ECORRUPT, "truncated or unfinished");

    uint64_t kept = 0, dropped = 9;
    ASSERT_OK(sl_recover(partial, NULL, &kept, &dropped));
    ASSERT_EQ(kept, 25);
    ASSERT_EQ(dropped, 0);
    slr_check_simple(path, 25, 1, 0);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    ASSERT_STR_EQ(sl_reader_meta(r, "classes"), "[\"a\",\"b\"]");
    ASSERT_OK(sl_reader_verify(r, 0, NULL, NULL, NULL));
    sl_reader_free(r);
    /* Recovery never modifies its input. */
    ASSERT(slr_exists(shard));
}

SL_TEST(record_recover__killed_writer_sharded) {
    char path[512], partial[600];
    sl_test_path(path, sizeof path, "big");
    snprintf(partial, sizeof partial, "%s.partial", path);
    interrupted_write(path, 150, 1024);
    ASSERT(!slr_exists(path));
    uint64_t kept = 0, dropped = 9;
    ASSERT_OK(sl_recover(partial, NULL, &kept, &dropped));
    ASSERT_EQ(kept, 150);
    ASSERT_EQ(dropped, 0);
    slr_check_simple(path, 150, 1, 0);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, path, 0));
    ASSERT(sl_reader_shard_count(r) > 1);   /* the writer's shard size is kept */
    sl_reader_free(r);
}

/* Cut a partial shard at many points: exactly the frames that end at or
 * before the cut are kept. */
SL_TEST(record_recover__truncated_partial) {
    char path[512], partial[600], shard[700], cut[512], out[512];
    sl_test_path(path, sizeof path, "d.slr");
    snprintf(partial, sizeof partial, "%s.partial", path);
    snprintf(shard, sizeof shard, "%s/shard-00000.slr.partial", partial);
    sl_test_path(cut, sizeof cut, "cut.slr.partial");
    sl_test_path(out, sizeof out, "cut.slr");
    interrupted_write(path, 12, 0);
    size_t len;
    uint8_t *b = slr_read_file(shard, &len);
    uint64_t hb = ld64(b + 12) & 0xffffffffu;
    uint64_t ends[64];
    int nends = 0;
    for (uint64_t off = hb; off < len; nends++) {
        off += 16 + ld64(b + off);
        ends[nends] = off;
    }
    ASSERT_EQ(nends, 12);
    ASSERT_EQ(ends[nends - 1], len);
    for (size_t n = 0; n <= len; n += (n < hb + 200 ? 1 : 7)) {
        slr_write_file(cut, b, n);
        unlink(out);
        uint64_t kept = 99, dropped = 99;
        int rc = sl_recover(cut, NULL, &kept, &dropped);
        if (n < hb) {
            ASSERT_RC(rc, SL_ECORRUPT);
            ASSERT_CONTAINS(sl_errmsg(), cut);
            ASSERT(!slr_exists(out));
            continue;
        }
        ASSERT_OK(rc);
        uint64_t want = 0;
        while (want < (uint64_t)nends && ends[want] <= n)
            want++;
        ASSERT_EQ(kept, want);
        uint64_t last_end = want ? ends[want - 1] : hb;
        ASSERT_EQ(dropped, n > last_end ? 1 : 0);
        slr_check_simple(out, want, 1, 0);
    }
    free(b);
}

SL_TEST(record_recover__damaged_record_stops) {
    char path[512], partial[600], shard[700], out[512];
    sl_test_path(path, sizeof path, "x.slr");
    snprintf(partial, sizeof partial, "%s.partial", path);
    snprintf(shard, sizeof shard, "%s/shard-00000.slr.partial", partial);
    sl_test_path(out, sizeof out, "rescued.slr");
    interrupted_write(path, 10, 0);
    size_t len;
    uint8_t *b = slr_read_file(shard, &len);
    uint64_t off = ld64(b + 12) & 0xffffffffu;
    for (int i = 0; i < 6; i++)
        off += 16 + ld64(b + off);
    b[off + 16 + 5] ^= 0x01;   /* inside record 6 */
    slr_write_file(shard, b, len);
    uint64_t kept, dropped;
    ASSERT_OK(sl_recover(partial, out, &kept, &dropped));
    ASSERT_EQ(kept, 6);
    ASSERT_EQ(dropped, 1);
    slr_check_simple(out, 6, 1, 0);
    free(b);
}

SL_TEST(record_recover__from_finished_file) {
    /* A complete file (footer valid) also recovers: all its records are kept. */
    char path[512], out[512];
    sl_test_path(path, sizeof path, "done.slr");
    sl_test_path(out, sizeof out, "copy.slr");
    slr_write_simple(path, 30, 1, 0);
    uint64_t kept, dropped;
    ASSERT_OK(sl_recover(path, out, &kept, &dropped));
    ASSERT_EQ(kept, 30);
    ASSERT_EQ(dropped, 0);
    slr_check_simple(out, 30, 1, 0);
    sl_reader *r;
    ASSERT_OK(sl_reader_open(&r, out, 0));
    ASSERT_STR_EQ(sl_reader_meta(r, "classes"), "[\"a\",\"b\"]");
    sl_reader_free(r);
}

SL_TEST(record_recover__nothing_salvageable) {
    char p[512];
    sl_test_path(p, sizeof p, "junk.slr.partial");
    slr_write_file(p, "not a record file at all", 24);
    uint64_t kept = 5, dropped = 5;
    ASSERT_RC(sl_recover(p, NULL, &kept, &dropped), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), p);
    ASSERT_CONTAINS(sl_errmsg(), "bad magic");
    ASSERT_EQ(kept, 0);
    slr_write_file(p, "", 0);
    ASSERT_RC(sl_recover(p, NULL, NULL, NULL), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "empty file");
    char q[512];
    sl_test_path(q, sizeof q, "noext");
    slr_write_file(q, "x", 1);
    ASSERT_RC(sl_recover(q, NULL, NULL, NULL), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), ".partial");
    /* A writer killed before its first record leaves an empty shard. */
    char path[512], partial[600];
    sl_test_path(path, sizeof path, "none.slr");
    snprintf(partial, sizeof partial, "%s.partial", path);
    interrupted_write(path, 0, 0);
    ASSERT_RC(sl_recover(partial, NULL, NULL, NULL), SL_ECORRUPT);
    ASSERT(!slr_exists(path));
}

SL_TEST(record_recover__garbage_tail) {
    char path[512], partial[600], shard[700];
    sl_test_path(path, sizeof path, "g.slr");
    snprintf(partial, sizeof partial, "%s.partial", path);
    snprintf(shard, sizeof shard, "%s/shard-00000.slr.partial", partial);
    interrupted_write(path, 5, 0);
    size_t len;
    uint8_t *b = slr_read_file(shard, &len);
    uint8_t *c = malloc(len + 100);
    memcpy(c, b, len);
    for (int i = 0; i < 100; i++)
        c[len + (size_t)i] = (uint8_t)(i * 37 + 11);
    slr_write_file(shard, c, len + 100);
    uint64_t kept, dropped;
    ASSERT_OK(sl_recover(partial, NULL, &kept, &dropped));
    ASSERT_EQ(kept, 5);
    ASSERT_EQ(dropped, 1);
    slr_check_simple(path, 5, 1, SL_READ_NO_MMAP);
    free(b);
    free(c);
}

/* Allocation failures during recovery: SL_ENOMEM with a message, no output
 * and no temporaries left behind (and no leak, under ASan). */
SL_TEST(record_recover__oom) {
    char path[512], partial[600], tmp[600];
    sl_test_path(path, sizeof path, "o");
    snprintf(partial, sizeof partial, "%s.partial", path);
    snprintf(tmp, sizeof tmp, "%s.recovering", path);
    interrupted_write(path, 40, 1024);
    for (uint64_t n = 1;; n++) {
        ASSERT(n < 10000);
        sl_errclear();
        uint64_t kept = 0;
        sl__alloc_fail_at(n);
        int rc = sl_record__recover(partial, NULL, &kept, NULL, false);
        sl__alloc_fail_at(0);
        if (rc == SL_OK)
            break;
        if (rc != SL_ENOMEM)
            sl_test_fail(__FILE__, __LINE__, "fail_at %llu: got %s (%s)", (unsigned long long)n,
                         sl_status_str(rc), sl_errmsg());
        ASSERT(sl_errmsg()[0] != 0);
        ASSERT(!slr_exists(path));
        ASSERT(!slr_exists(tmp));
    }
    slr_check_simple(path, 40, 1, 0);
}
