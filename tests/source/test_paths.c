/*
 * Path lists (sl_paths_expand, the expander every multi-file source and
 * command uses): a local folder stands for its files and a shell pattern
 * for the files glob(3) matches, sorted, without hidden files, folders or
 * the sidecar indexes of listed files; a file whose name holds '*' is that
 * file; a pattern that matches nothing names itself.
 */
#include "test.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void touch(const char *dir, const char *name) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f)
        sl_test_fail(__FILE__, __LINE__, "cannot write %s", p);
    fputs("x", f);
    fclose(f);
}

static void expect_list(const char *pattern, const char *dir, const char *const *want, int n) {
    char **v = NULL;
    int got = 0;
    ASSERT_OK(sl_paths_expand(pattern, &v, &got));
    ASSERT_EQ(got, n);
    for (int i = 0; i < n; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", dir, want[i]);
        ASSERT_STR_EQ(v[i], full);
    }
    ASSERT(v[n] == NULL);
    sl_paths_free(v);
}

SL_TEST(source_paths__folder_and_glob) {
    char dir[4096], sub[4400], pat[4400];
    snprintf(dir, sizeof dir, "%s/wds", sl_test_tmpdir());
    ASSERT(mkdir(dir, 0755) == 0);
    /* written out of order: the lists come sorted */
    touch(dir, "shard-000002.tar");
    touch(dir, "shard-000000.tar");
    touch(dir, "shard-000001.tar");
    touch(dir, "shard-000000.tar.slidx"); /* beside its shard: read by it */
    touch(dir, "orphan.slidx");           /* no data file listed: kept */
    touch(dir, ".complete");
    snprintf(sub, sizeof sub, "%s/nested", dir);
    ASSERT(mkdir(sub, 0755) == 0);

    static const char *const all[] = {"orphan.slidx", "shard-000000.tar", "shard-000001.tar",
                                      "shard-000002.tar"};
    expect_list(dir, dir, all, 4);
    snprintf(pat, sizeof pat, "%s/", dir);
    char **v;
    int n;
    ASSERT_OK(sl_paths_expand(pat, &v, &n));
    ASSERT_EQ(n, 4);
    sl_paths_free(v);

    static const char *const tars[] = {"shard-000000.tar", "shard-000001.tar",
                                       "shard-000002.tar"};
    snprintf(pat, sizeof pat, "%s/shard-*.tar", dir);
    expect_list(pat, dir, tars, 3);
    snprintf(pat, sizeof pat, "%s/*", dir); /* the folder "nested" and the sidecar left out */
    expect_list(pat, dir, all, 4);
    snprintf(pat, sizeof pat, "%s/shard-00000[12].tar", dir);
    expect_list(pat, dir, tars + 1, 2);
    /* braces first, then each result as a shell pattern */
    snprintf(pat, sizeof pat, "%s/{shard-*0.tar,shard-000002.tar}", dir);
    static const char *const braced[] = {"shard-000000.tar", "shard-000002.tar"};
    expect_list(pat, dir, braced, 2);

    snprintf(pat, sizeof pat, "%s/nothing-*.tar", dir);
    ASSERT_RC(sl_paths_expand(pat, &v, &n), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "no file matches");
    ASSERT_CONTAINS(sl_errmsg(), "nothing-*.tar");
    snprintf(pat, sizeof pat, "%s/nest*", dir);
    ASSERT_RC(sl_paths_expand(pat, &v, &n), SL_EIO);
    ASSERT_CONTAINS(sl_errmsg(), "matches only folders");

    /* a name that really holds '*' is that file, not a pattern */
    touch(dir, "odd*name.tar");
    snprintf(pat, sizeof pat, "%s/odd*name.tar", dir);
    static const char *const odd[] = {"odd*name.tar"};
    expect_list(pat, dir, odd, 1);

    /* an empty folder, and one of folders only */
    char empty[4200];
    snprintf(empty, sizeof empty, "%s/empty", sl_test_tmpdir());
    ASSERT(mkdir(empty, 0755) == 0);
    ASSERT_RC(sl_paths_expand(empty, &v, &n), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "holds no files");
    snprintf(sub, sizeof sub, "%s/cat", empty);
    ASSERT(mkdir(sub, 0755) == 0);
    ASSERT_RC(sl_paths_expand(empty, &v, &n), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "sluice.image_folder()");
}
