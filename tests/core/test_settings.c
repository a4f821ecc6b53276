/* test_settings.c — the table of SLUICE_* settings (src/core/settings.c):
 * its rows through the public sl_setting_get; every kind of setting read
 * through it (the default when unset or empty, the value when it is one);
 * sl_settings_check failing on a bad value of each kind with the message a
 * bad spec parameter gets (core/params.c's), and the library's entry points
 * failing with it. */
#include "test.h"
#include "core/core.h"
#include "core/params.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

SL_TEST(core_settings__the_table) {
    int n = sl_setting_count();
    ASSERT(n >= 20);
    sl_setting_info s, prev = {0};
    for (int i = 0; i < n; i++) {
        ASSERT_RC(sl_setting_get(i, &s), SL_OK);
        ASSERT(!strncmp(s.name, "SLUICE_", 7));
        ASSERT(s.type && *s.type && s.range && *s.range && s.default_value && *s.default_value);
        ASSERT(s.layer && *s.layer && s.doc && *s.doc);
        if (i)
            ASSERT(strcmp(prev.name, s.name) < 0); /* by name, once each */
        prev = s;
    }
    ASSERT_RC(sl_setting_get(n, &s), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "there are");
    ASSERT_RC(sl_setting_get(-1, &s), SL_EINVAL);
}

SL_TEST(core_settings__value_from_the_environment) {
    sl_setting_info s;
    int i = 0, n = sl_setting_count();
    while (i < n && (sl_setting_get(i, &s), strcmp(s.name, "SLUICE_HTTP_TRIES")))
        i++;
    ASSERT(i < n);
    unsetenv("SLUICE_HTTP_TRIES");
    ASSERT_RC(sl_setting_get(i, &s), SL_OK);
    ASSERT(s.value == NULL);
    ASSERT_STR_EQ(s.default_value, "6");
    setenv("SLUICE_HTTP_TRIES", "9", 1);
    ASSERT_RC(sl_setting_get(i, &s), SL_OK);
    ASSERT_STR_EQ(s.value, "9");
}

SL_TEST(core_settings__integers_read_through_the_table) {
    unsetenv("SLUICE_HTTP_TRIES");
    ASSERT(sl__setting_int("SLUICE_HTTP_TRIES") == 6);
    setenv("SLUICE_HTTP_TRIES", "100", 1);
    ASSERT(sl__setting_int("SLUICE_HTTP_TRIES") == 100);
    setenv("SLUICE_HTTP_TRIES", "101", 1); /* out of range: the default */
    ASSERT(sl__setting_int("SLUICE_HTTP_TRIES") == 6);
    setenv("SLUICE_HTTP_TRIES", "6x", 1);
    ASSERT(sl__setting_int("SLUICE_HTTP_TRIES") == 6);
    setenv("SLUICE_HTTP_TRIES", "", 1); /* empty: unset */
    ASSERT(sl__setting_int("SLUICE_HTTP_TRIES") == 6);
}

SL_TEST(core_settings__every_kind_read_through_the_table) {
    unsetenv("SLUICE_CACHE_BYTES");
    ASSERT(sl__setting_int("SLUICE_CACHE_BYTES") == 8LL << 30);
    setenv("SLUICE_CACHE_BYTES", "20G", 1);
    ASSERT(sl__setting_int("SLUICE_CACHE_BYTES") == 20LL << 30);
    setenv("SLUICE_CACHE_BYTES", "512MiB", 1);
    ASSERT(sl__setting_int("SLUICE_CACHE_BYTES") == 512LL << 20);
    setenv("SLUICE_CACHE_BYTES", "0", 1);
    ASSERT(sl__setting_int("SLUICE_CACHE_BYTES") == 0);
    unsetenv("SLUICE_CACHE_BYTES");

    unsetenv("SLUICE_CACHE_MODE");
    ASSERT(sl__setting_int("SLUICE_CACHE_MODE") == 0700);
    setenv("SLUICE_CACHE_MODE", "02770", 1);
    ASSERT(sl__setting_int("SLUICE_CACHE_MODE") == 02770);
    unsetenv("SLUICE_CACHE_MODE");

    unsetenv("SLUICE_LOG");
    ASSERT(sl__setting_choice("SLUICE_LOG") == SL_LOG_WARN);
    setenv("SLUICE_LOG", "debug", 1);
    ASSERT(sl__setting_choice("SLUICE_LOG") == SL_LOG_DEBUG);
    setenv("SLUICE_LOG", "", 1);
    ASSERT(sl__setting_choice("SLUICE_LOG") == SL_LOG_WARN);
    unsetenv("SLUICE_LOG");

    unsetenv("SLUICE_INTEGRITY"); /* no default value: -1 */
    ASSERT(sl__setting_choice("SLUICE_INTEGRITY") == -1);
    setenv("SLUICE_INTEGRITY", "strict", 1);
    ASSERT(sl__setting_choice("SLUICE_INTEGRITY") == 0);
    unsetenv("SLUICE_INTEGRITY");

    unsetenv("SLUICE_CPUS");
    ASSERT(sl__setting_int("SLUICE_CPUS") == -1);
    setenv("SLUICE_CPUS", "3", 1);
    ASSERT(sl__setting_int("SLUICE_CPUS") == 3);
    unsetenv("SLUICE_CPUS");

    unsetenv("SLUICE_CACHE_DIR");
    ASSERT(sl__setting_str("SLUICE_CACHE_DIR") == NULL);
    ASSERT(sl_setting_value("SLUICE_CACHE_DIR") == NULL);
    setenv("SLUICE_CACHE_DIR", "/tmp/x", 1);
    ASSERT_STR_EQ(sl__setting_str("SLUICE_CACHE_DIR"), "/tmp/x");
    ASSERT_STR_EQ(sl_setting_value("SLUICE_CACHE_DIR"), "/tmp/x");
    unsetenv("SLUICE_CACHE_DIR");
    ASSERT(sl_setting_value("SLUICE_NOT_A_SETTING") == NULL);
    ASSERT(sl_setting_value(NULL) == NULL);
}

/* One bad value of each kind: SL_EINVAL naming the variable, what it takes
 * and what it got; unset again, the check passes. */
static void bad(const char *name, const char *value, const char *says) {
    ASSERT_RC(sl_settings_check(), SL_OK);
    setenv(name, value, 1);
    ASSERT_RC(sl_settings_check(), SL_EINVAL);
    char want[256];
    snprintf(want, sizeof want, "%s: must be %s (got \"%s\")", name, says, value);
    ASSERT_STR_EQ(sl_errmsg(), want);
    unsetenv(name);
    ASSERT_RC(sl_settings_check(), SL_OK);
}

SL_TEST(core_settings__a_bad_value_is_an_error) {
    bad("SLUICE_HTTP_TRIES", "abc", "a whole number from 1 to 100");
    bad("SLUICE_HTTP_TRIES", "101", "a whole number from 1 to 100");
    bad("SLUICE_HTTP_TRIES", "6x", "a whole number from 1 to 100");
    bad("SLUICE_CPUS", "0", "a whole number from 1 to 1000000");
    bad("SLUICE_CACHE_BYTES", "-5", "a whole number of bytes >= 0 or a string such as \"512M\" "
                                    "(K, M, G, T)");
    bad("SLUICE_CACHE_BYTES", "20Q", "a whole number of bytes >= 0 or a string such as \"512M\" "
                                     "(K, M, G, T)");
    bad("SLUICE_CACHE_MODE", "0600", "an octal folder mode that gives its owner rwx (0700 to "
                                     "02777), such as 0700 (private), 0750 (the group reads) or "
                                     "0770 (the group shares)");
    bad("SLUICE_CACHE_MODE", "rwx", "an octal folder mode that gives its owner rwx (0700 to "
                                    "02777), such as 0700 (private), 0750 (the group reads) or "
                                    "0770 (the group shares)");
    bad("SLUICE_LOG", "loud", "\"error\", \"warn\", \"info\" or \"debug\"");
    bad("SLUICE_SIMD", "neon", "\"scalar\", \"sse4.1\", \"avx2\" or \"avx512\"");
    bad("SLUICE_INTEGRITY", "yes", "\"strict\"");
    /* empty is unset; paths and flags take any text */
    setenv("SLUICE_HTTP_TRIES", "", 1);
    setenv("SLUICE_CACHE_DIR", "not/checked/here", 1);
    setenv("SLUICE_NO_PROGRESS", "0", 1);
    ASSERT_RC(sl_settings_check(), SL_OK);
    unsetenv("SLUICE_HTTP_TRIES");
    unsetenv("SLUICE_CACHE_DIR");
    unsetenv("SLUICE_NO_PROGRESS");
}

/* The environment's message is the spec's: the same row read as JSON says
 * the same words, but for how the value it got is written. */
SL_TEST(core_settings__the_message_of_a_bad_spec_value) {
    static const sl_param tries = {.key = "SLUICE_HTTP_TRIES", .type = SL_PARAM_INT64, .min = 1,
                                   .max = 100};
    static const sl_param_table t = {NULL, NULL, NULL, 0, 0};
    cJSON *v = cJSON_CreateNumber(0);
    int64_t x;
    ASSERT_RC(sl_param_value(&t, &tries, v, "", &x), SL_EINVAL);
    cJSON_Delete(v);
    ASSERT_STR_EQ(sl_errmsg(), "SLUICE_HTTP_TRIES: must be a whole number from 1 to 100 (got 0)");
    setenv("SLUICE_HTTP_TRIES", "0", 1);
    ASSERT_RC(sl_settings_check(), SL_EINVAL);
    ASSERT_STR_EQ(sl_errmsg(),
                  "SLUICE_HTTP_TRIES: must be a whole number from 1 to 100 (got \"0\")");
    ASSERT_RC(sl_param_text(&t, &tries, "0", "", &x), SL_EINVAL);
    ASSERT_STR_EQ(sl_errmsg(),
                  "SLUICE_HTTP_TRIES: must be a whole number from 1 to 100 (got \"0\")");
    ASSERT_RC(sl_param_text(&t, &tries, "42", "", &x), SL_OK);
    ASSERT(x == 42);
    unsetenv("SLUICE_HTTP_TRIES");
}

/* Where sluice starts to work, a bad value fails before anything else. */
SL_TEST(core_settings__entry_points_check_first) {
    setenv("SLUICE_LOG", "loud", 1);
    sl_reader *r;
    ASSERT_RC(sl_reader_open(&r, "/no/such/file.slr", 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "SLUICE_LOG: must be");
    sl_source *src;
    ASSERT_RC(sl_source_open(&src, "{\"kind\": \"synthetic\", \"n\": 4}"), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "(got \"loud\")");
    unsetenv("SLUICE_LOG");
    ASSERT_RC(sl_reader_open(&r, "/no/such/file.slr", 0), SL_EIO); /* now the file's error */
}
