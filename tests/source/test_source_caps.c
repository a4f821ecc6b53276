/*
 * The capability queries of the source interface (sluice.h), which the CLI
 * and the pipeline ask instead of branching on a format: which sources check
 * a per-record checksum on every read (sl_source_checksummed).
 */
#include "test.h"

#include <sys/wait.h>

static void gen(const char *script, const char *dir) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/source/%s %s >/dev/null",
             SLUICE_SOURCE_DIR, script, dir);
    int st = system(cmd);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        sl_test_fail(__FILE__, __LINE__, "%s failed (status %d)", cmd, st);
}

static int checksummed(const char *json) {
    sl_source *src;
    ASSERT_OK(sl_source_open(&src, json));
    int c = sl_source_checksummed(src);
    sl_source_free(src);
    return c;
}

SL_TEST(source_caps__checksummed) {
    char dir[4096], json[9000];
    snprintf(dir, sizeof dir, "%s", sl_test_tmpdir());
    gen("make_tfrecords.py", dir);
    snprintf(json, sizeof json, "{\"tfrecord\": \"%s/plain.tfrecord\"}", dir);
    ASSERT_EQ(checksummed(json), 1);
    snprintf(json, sizeof json, "{\"tfrecord\": \"%s/plain.tfrecord\", \"verify\": false}", dir);
    ASSERT_EQ(checksummed(json), 0);
    char tar[4200];
    snprintf(tar, sizeof tar, "%s/tar", dir);
    gen("make_tar_shards.py", tar);
    snprintf(json, sizeof json, "{\"webdataset\": \"%s/good-posix.tar\"}", tar);
    ASSERT_EQ(checksummed(json), 0);
    /* the TFRecord packed into .slr: checksummed again */
    char slr[4200];
    snprintf(slr, sizeof slr, "%s/p.slr", dir);
    sl_source *src;
    snprintf(json, sizeof json, "{\"tfrecord\": \"%s/plain.tfrecord\"}", dir);
    ASSERT_OK(sl_source_open(&src, json));
    ASSERT_OK(sl_pack_source(src, slr, NULL, NULL));
    sl_source_free(src);
    snprintf(json, sizeof json, "{\"path\": \"%s\"}", slr);
    ASSERT_EQ(checksummed(json), 1);
    ASSERT_EQ(sl_source_checksummed(NULL), 0);
}
