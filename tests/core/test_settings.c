/* test_settings.c — the table of SLUICE_* settings (src/core/settings.c):
 * its rows through the public sl_setting_get, and integer settings read
 * through it (sl__setting_int: the default when unset, the value in range,
 * the default with a warning out of it). */
#include "test.h"
#include "core/core.h"

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
