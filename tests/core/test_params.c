/* Tests of src/core/params.c: one table checks an object and fills a struct. */
#include "test.h"
#include "core/params.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <string.h>

typedef struct {
    int index;
    int64_t max_open;
} frag_opts;

typedef struct {
    int verbose;
    int threads;
    int64_t seed;
    uint64_t window;
    double scale;
    uint64_t budget;
    const char *name;
    int mode;
    const cJSON *list;
    const cJSON *nested;
    frag_opts frag;
} test_opts;

static const sl_param frag[] = {
    {.key = "index", .type = SL_PARAM_BOOL, .flags = SL_PARAM_OR_AUTO, .def = -1,
     .offset = offsetof(frag_opts, index), .doc = "use the sidecar index"},
    {.key = "max_open_shards", .type = SL_PARAM_INT64, .min = 1, .max = 1000000, .def = 64,
     .offset = offsetof(frag_opts, max_open), .doc = "files open at once"},
    {0}};

static const char *const modes[] = {"auto", "global", "window", NULL};

static const sl_param params[] = {
    {.key = "verbose", .type = SL_PARAM_BOOL, .def = 1, .offset = offsetof(test_opts, verbose)},
    {.key = "threads", .type = SL_PARAM_INT, .flags = SL_PARAM_OR_AUTO, .min = 1, .max = 1024,
     .offset = offsetof(test_opts, threads), .doc = "worker threads"},
    {.key = "seed", .type = SL_PARAM_INT64, .flags = SL_PARAM_REQUIRED, .min = 0, .max = -1,
     .offset = offsetof(test_opts, seed)},
    {.key = "window", .type = SL_PARAM_UINT64, .min = 1, .max = -1, .def = 8,
     .offset = offsetof(test_opts, window)},
    {.key = "scale", .type = SL_PARAM_DOUBLE, .min = 0, .max = 2, .def = 1.5,
     .offset = offsetof(test_opts, scale)},
    {.key = "budget", .type = SL_PARAM_BYTES, .min = 1, .max = -1, .def = 4096,
     .offset = offsetof(test_opts, budget)},
    {.key = "name", .type = SL_PARAM_STRING, .min = 1, .max = 8, .def_str = "x",
     .offset = offsetof(test_opts, name)},
    {.key = "mode", .type = SL_PARAM_ENUM, .names = modes, .def = 0,
     .offset = offsetof(test_opts, mode)},
    {.key = "list", .type = SL_PARAM_ARRAY, .min = 1, .max = -1,
     .offset = offsetof(test_opts, list)},
    {.key = "nested", .type = SL_PARAM_OBJECT, .offset = offsetof(test_opts, nested)},
    {.key = "note", .type = SL_PARAM_ANY, .offset = SL_PARAM_NOWHERE},
    {.key = "op", .type = SL_PARAM_ANY, .flags = SL_PARAM_HIDDEN, .offset = SL_PARAM_NOWHERE},
    {.key = "", .type = SL_PARAM_INCLUDE, .fragment = frag, .offset = offsetof(test_opts, frag)},
    {0}};

static const sl_param_table table = {params, "a test source", NULL, 0, 0};

/* Read `json` with `t` into *o; the status. The strings and JSON values in
 * *o are borrowed from the document, kept until the next call. */
static int read_json(const sl_param_table *t, const char *json, const char *field, test_opts *o) {
    static cJSON *doc;
    cJSON_Delete(doc);
    doc = cJSON_Parse(json);
    ASSERT(doc != NULL);
    memset(o, 0x5a, sizeof *o);
    return sl_params_read(t, doc, field, o);
}

static void expect_bad(const char *json, const char *msg) {
    test_opts o;
    ASSERT_RC(read_json(&table, json, "src", &o), SL_EINVAL);
    ASSERT_STR_EQ(sl_errmsg(), msg);
}

SL_TEST(core_params__fills_values_and_defaults) {
    test_opts o;
    ASSERT_OK(read_json(&table, "{\"seed\": 7}", "src", &o));
    ASSERT_EQ(o.verbose, 1);
    ASSERT_EQ(o.threads, 0);
    ASSERT_EQ(o.seed, 7);
    ASSERT_U64_EQ(o.window, 8);
    ASSERT(o.scale == 1.5);
    ASSERT_U64_EQ(o.budget, 4096);
    ASSERT_STR_EQ(o.name, "x");
    ASSERT_EQ(o.mode, 0);
    ASSERT(o.list == NULL && o.nested == NULL);
    ASSERT_EQ(o.frag.index, -1);
    ASSERT_EQ(o.frag.max_open, 64);

    ASSERT_OK(read_json(&table,
                        "{\"seed\": 9007199254740992, \"verbose\": false, \"threads\": \"auto\","
                        " \"window\": 3, \"scale\": 0, \"budget\": \"2MiB\", \"name\": \"abc\","
                        " \"mode\": \"window\", \"list\": [1], \"nested\": {}, \"note\": null,"
                        " \"op\": \"x\", \"index\": true, \"max_open_shards\": 1000000}",
                        "src", &o));
    ASSERT_EQ(o.verbose, 0);
    ASSERT_EQ(o.threads, -1);
    ASSERT(o.seed == (int64_t)9007199254740992LL);
    ASSERT_U64_EQ(o.window, 3);
    ASSERT(o.scale == 0);
    ASSERT_U64_EQ(o.budget, 2u << 20);
    ASSERT_STR_EQ(o.name, "abc");
    ASSERT_EQ(o.mode, 2);
    ASSERT(o.list != NULL && o.nested != NULL);
    ASSERT_EQ(o.frag.index, 1);
    ASSERT_EQ(o.frag.max_open, 1000000);

    ASSERT_OK(read_json(&table, "{\"seed\": 0, \"threads\": 1024, \"budget\": \"1K\","
                                " \"index\": \"auto\"}", "src", &o));
    ASSERT_EQ(o.threads, 1024);
    ASSERT_U64_EQ(o.budget, 1024);
    ASSERT_EQ(o.frag.index, -1);

    /* the defaults alone, as a constructor sets them */
    memset(&o, 0x5a, sizeof o);
    sl_params_defaults(&table, &o);
    ASSERT_EQ(o.verbose, 1);
    ASSERT_U64_EQ(o.window, 8);
    ASSERT_EQ(o.frag.max_open, 64);
    ASSERT_STR_EQ(o.name, "x");
}

SL_TEST(core_params__unknown_key_lists_closest_first) {
    expect_bad("{\"seed\": 1, \"thread\": 2}",
               "src.thread: unknown key for a test source (keys: threads, seed, name, mode, "
               "nested, note, index, verbose, window, scale, budget, list, max_open_shards)");
    /* a hidden key is accepted but not listed; a fragment's keys are listed */
    expect_bad("{\"max_open_shard\": 2}",
               "src.max_open_shard: unknown key for a test source (keys: max_open_shards, mode, "
               "nested, verbose, threads, seed, scale, name, note, window, budget, list, index)");
    /* at the top level, and as "parameters" */
    static const sl_param_table ops = {frag, NULL, "parameter", 0, 0};
    cJSON *doc = cJSON_Parse("{\"indx\": 1}");
    ASSERT_RC(sl_params_read(&ops, doc, "", NULL), SL_EINVAL);
    ASSERT_STR_EQ(sl_errmsg(), "indx: unknown parameter (parameters: index, max_open_shards)");
    ASSERT_RC(sl_params_read(&ops, doc, "ops[1]", NULL), SL_EINVAL);
    ASSERT_STR_EQ(sl_errmsg(),
                  "ops[1].indx: unknown parameter (parameters: index, max_open_shards)");
    /* an open table leaves unknown keys to the caller */
    static const sl_param_table open = {frag, NULL, NULL, 0, SL_PARAMS_OPEN};
    ASSERT_OK(sl_params_read(&open, doc, "x", NULL));
    ASSERT_RC(sl_params_unknown(&open, "x", "indx", (const char *const[]){"shuffle", NULL}),
              SL_EINVAL);
    ASSERT_STR_EQ(sl_errmsg(), "x.indx: unknown key (keys: index, shuffle, max_open_shards)");
    cJSON_Delete(doc);
    ASSERT(sl_params_find(&table, "max_open_shards") == &frag[1]);
    ASSERT(sl_params_find(&table, "op") == &params[11]);
    ASSERT(sl_params_find(&table, "nope") == NULL);
}

SL_TEST(core_params__wrong_type_and_bounds_name_the_range) {
    expect_bad("{}", "src.seed: missing");
    expect_bad("{\"seed\": -1}", "src.seed: must be a whole number >= 0 (got -1)");
    expect_bad("{\"seed\": 1.5}", "src.seed: must be a whole number >= 0 (got 1.5)");
    expect_bad("{\"seed\": 1e300}", "src.seed: must be a whole number >= 0 (got 1e+300)");
    expect_bad("{\"seed\": \"1\"}", "src.seed: must be a whole number >= 0");
    expect_bad("{\"seed\": 1, \"verbose\": 1}", "src.verbose: must be true or false");
    expect_bad("{\"seed\": 1, \"threads\": 0}",
               "src.threads: must be a whole number from 1 to 1024 or \"auto\" (got 0)");
    expect_bad("{\"seed\": 1, \"threads\": \"many\"}",
               "src.threads: must be a whole number from 1 to 1024 or \"auto\"");
    expect_bad("{\"seed\": 1, \"window\": 0}", "src.window: must be a whole number >= 1 (got 0)");
    expect_bad("{\"seed\": 1, \"scale\": 2.5}",
               "src.scale: must be a number from 0 to 2 (got 2.5)");
    expect_bad("{\"seed\": 1, \"scale\": true}", "src.scale: must be a number from 0 to 2");
    expect_bad("{\"seed\": 1, \"budget\": \"12Q\"}",
               "src.budget: must be a whole number of bytes >= 1 or a string such as \"512M\" "
               "(K, M, G, T)");
    expect_bad("{\"seed\": 1, \"budget\": 0}",
               "src.budget: must be a whole number of bytes >= 1 or a string such as \"512M\" "
               "(K, M, G, T)");
    expect_bad("{\"seed\": 1, \"name\": \"\"}", "src.name: must be a string of 1 to 8 bytes");
    expect_bad("{\"seed\": 1, \"name\": \"123456789\"}",
               "src.name: must be a string of 1 to 8 bytes");
    expect_bad("{\"seed\": 1, \"mode\": \"local\"}",
               "src.mode: must be \"auto\", \"global\" or \"window\"");
    expect_bad("{\"seed\": 1, \"list\": []}", "src.list: must be a non-empty list");
    expect_bad("{\"seed\": 1, \"list\": {}}", "src.list: must be a non-empty list");
    expect_bad("{\"seed\": 1, \"nested\": []}", "src.nested: must be an object");
    expect_bad("{\"seed\": 1, \"index\": \"yes\"}",
               "src.index: must be \"auto\", true or false");
    expect_bad("{\"seed\": 1, \"max_open_shards\": 1000001}",
               "src.max_open_shards: must be a whole number from 1 to 1000000 (got 1000001)");
    /* a key given twice would have its second value ignored */
    expect_bad("{\"seed\": 1, \"threads\": 2, \"threads\": 0}", "src.threads: given twice");
    /* not an object at all */
    cJSON *arr = cJSON_Parse("[1]");
    ASSERT_RC(sl_params_read(&table, arr, "src", NULL), SL_EINVAL);
    ASSERT_STR_EQ(sl_errmsg(), "src: must be an object");
    cJSON_Delete(arr);
    /* good input right after bad */
    test_opts o;
    ASSERT_OK(read_json(&table, "{\"seed\": 2, \"threads\": 3}", "src", &o));
    ASSERT_EQ(o.threads, 3);
}

SL_TEST(core_params__file_tables_quote_keys_with_their_code) {
    static const sl_param keys[] = {
        {.key = "version", .type = SL_PARAM_UINT64, .flags = SL_PARAM_REQUIRED, .min = 1,
         .max = -1, .offset = 0},
        {0}};
    static const sl_param_table file = {keys, NULL, NULL, SL_ECORRUPT,
                                        SL_PARAMS_OPEN | SL_PARAMS_QUOTED};
    uint64_t v = 0;
    cJSON *doc = cJSON_Parse("{\"later\": 1}");
    ASSERT_RC(sl_params_read(&file, doc, "d/manifest.json", &v), SL_ECORRUPT);
    ASSERT_STR_EQ(sl_errmsg(), "d/manifest.json: \"version\" is missing");
    cJSON_Delete(doc);
    doc = cJSON_Parse("{\"version\": 0}");
    ASSERT_RC(sl_params_read(&file, doc, "d/manifest.json", &v), SL_ECORRUPT);
    ASSERT_STR_EQ(sl_errmsg(), "d/manifest.json: \"version\" must be a whole number >= 1 (got 0)");
    cJSON_Delete(doc);
    doc = cJSON_Parse("{\"version\": 3, \"later\": 1}");
    ASSERT_OK(sl_params_read(&file, doc, "d/manifest.json", &v));
    ASSERT_U64_EQ(v, 3);
    cJSON_Delete(doc);
}

SL_TEST(core_params__doc_lists_every_shown_key) {
    char buf[2048];
    size_t n = sl_params_doc(&table, buf, sizeof buf);
    ASSERT(n == strlen(buf));
    /* a default outside the range means "not set": not shown as a value */
    ASSERT_CONTAINS(buf, "  threads            int: a whole number from 1 to 1024 or "
                         "\"auto\". worker threads\n");
    ASSERT_CONTAINS(buf, "  window             uint64, default 8: a whole number >= 1\n");
    ASSERT_CONTAINS(buf, "  seed               int, required: a whole number >= 0\n");
    ASSERT_CONTAINS(buf, "  index              bool, default \"auto\": \"auto\", true or false. "
                         "use the sidecar index\n");
    ASSERT_CONTAINS(buf, "  mode               enum, default \"auto\": \"auto\", \"global\" or "
                         "\"window\"\n");
    ASSERT(strstr(buf, "  op ") == NULL);
    /* cut at the buffer's end, never past it */
    char small[40];
    memset(small, 'z', sizeof small);
    n = sl_params_doc(&table, small, 32);
    ASSERT(n < 32 && small[n] == '\0' && small[32] == 'z');
}
