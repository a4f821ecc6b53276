/* Source options read through parameter tables (core/params.h): the keys
 * the sharded sources share come from one table fragment, so they are
 * checked, and reported, the same way by every format. */
#include "test.h"
#include "source/source.h"

#include <stdio.h>

static void expect_bad(const char *json, const char *msg) {
    sl_source *src = NULL;
    ASSERT_RC(sl_source_open(&src, json), SL_EINVAL);
    ASSERT(src == NULL);
    ASSERT_STR_EQ(sl_errmsg(), msg);
}

SL_TEST(source_params__shared_keys_read_alike) {
    static const char *const kinds[] = {"webdataset", "tfrecord", "path"};
    for (int k = 0; k < 3; k++) {
        char json[256];
        /* checked before any file is opened: the inputs need not exist */
        snprintf(json, sizeof json, "{\"%s\": \"/nonexistent/x\", \"max_open_shards\": 0}",
                 kinds[k]);
        expect_bad(json, "source.max_open_shards: must be a whole number from 1 to 1000000 "
                         "(got 0)");
        snprintf(json, sizeof json, "{\"%s\": \"/nonexistent/x\", \"max_open_shards\": 2.5}",
                 kinds[k]);
        expect_bad(json, "source.max_open_shards: must be a whole number from 1 to 1000000 "
                         "(got 2.5)");
        snprintf(json, sizeof json, "{\"%s\": \"/nonexistent/x\", \"max_open_shards\": \"8\"}",
                 kinds[k]);
        expect_bad(json, "source.max_open_shards: must be a whole number from 1 to 1000000");
        if (k < 2) {
            snprintf(json, sizeof json, "{\"%s\": \"/nonexistent/x\", \"index\": \"yes\"}",
                     kinds[k]);
            expect_bad(json, "source.index: must be \"auto\", true or false");
        }
    }
    expect_bad("{\"webdataset\": \"/nonexistent/x\", \"max_open\": 4}",
               "source.max_open: unknown key for a webdataset source (keys: parallel, index, "
               "max_open_shards, shuffle, columns, shard, chunk, webdataset)");
    expect_bad("{\"tfrecord\": \"/nonexistent/x\", \"indexx\": true}",
               "source.indexx: unknown key for a tfrecord source (keys: index, verify, shard, "
               "chunk, tfrecord, shuffle, features, parallel, compression, max_open_shards)");
    expect_bad("{\"path\": \"/nonexistent/x\", \"index\": true}",
               "source.index: unknown key for a .slr source (keys: path, shard, chunk, shuffle, "
               "parallel, max_open_shards)");
    expect_bad("{\"tfrecord\": \"/nonexistent/x\", \"compression\": \"zstd\"}",
               "source.compression: must be \"auto\", \"gzip\" or \"none\"");
    expect_bad("{\"webdataset\": \"/nonexistent/x\", \"columns\": []}",
               "source.columns: must be a non-empty list of extensions");
    expect_bad("{\"image_folder\": \"\"}", "source.image_folder: must be a directory path");
    expect_bad("{\"synthetic\": {\"records\": 10, \"shards\": 11}}",
               "source.synthetic.shards: must be at most records (10), got 11");
    expect_bad("{\"synthetic\": {\"records\": 10, \"bytes\": 7}}",
               "source.synthetic.bytes: must be a whole number from 8 to 16777216 (got 7)");
    expect_bad("{\"synthetic\": {\"record\": 10}}",
               "source.synthetic.record: unknown key (keys: records, shards, bytes)");
    /* good input right after bad */
    sl_source *src = NULL;
    ASSERT_OK(sl_source_open(&src, "{\"synthetic\": {\"records\": 10, \"shards\": 10}}"));
    ASSERT_EQ(sl_source_count(src), 10);
    sl_source_free(src);
}
