/*
 * Tests of src/io/io.c: the local provider of the byte-access layer and its
 * one error policy (io.h), which every source and the record reader meet.
 */
#include "test.h"
#include "io/io.h"

#include <sys/stat.h>

static void make(char *p, size_t cap, const char *name, const char *text) {
    sl_test_path(p, cap, name);
    sl_test_write_file(p, text, strlen(text));
}

SL_TEST(io_io__map_and_ranges_agree) {
    char p[4096];
    make(p, sizeof p, "f.bin", "0123456789abcdef");
    for (unsigned flags = 0; flags <= (SL_IO_MAP | SL_IO_RANDOM); flags++) {
        sl_io *io;
        ASSERT_OK(sl_io__open(&io, p, flags));
        ASSERT_U64_EQ(sl_io__size(io), 16);
        ASSERT_STR_EQ(sl_io__name(io), p);
        ASSERT((sl_io__map(io) != NULL) == !!(flags & SL_IO_MAP));
        if (sl_io__map(io))
            ASSERT(!memcmp(sl_io__map(io), "0123456789abcdef", 16));
        char buf[8];
        ASSERT_OK(sl_io__read(io, buf, 4, 10));
        ASSERT(!memcmp(buf, "abcd", 4));
        size_t got = 99;
        ASSERT_OK(sl_io__read_some(io, buf, 8, 12, &got));
        ASSERT_EQ(got, 4);
        ASSERT(!memcmp(buf, "cdef", 4));
        ASSERT_OK(sl_io__read_some(io, buf, 8, 16, &got));
        ASSERT_EQ(got, 0);
        ASSERT_RC(sl_io__read(io, buf, 8, 12), SL_ECORRUPT);
        ASSERT_CONTAINS(sl_errmsg(), "truncated (read past the end at offset 16)");
        ASSERT_CONTAINS(sl_errmsg(), p);
        sl_io__close(io);
    }
    sl_io__close(NULL);
}

SL_TEST(io_io__empty_file_maps_to_nothing) {
    char p[4096];
    make(p, sizeof p, "empty", "");
    sl_io *io;
    ASSERT_OK(sl_io__open(&io, p, SL_IO_MAP));
    ASSERT_U64_EQ(sl_io__size(io), 0);
    ASSERT(sl_io__map(io) == NULL);
    sl_io__close(io);
}

/* sl_io__map_buffer: the mapping as a buffer that closes the io with its
 * last reference; an io without a mapping stays the caller's. */
SL_TEST(io_io__map_buffer_closes_with_the_last_view) {
    char p[4096];
    make(p, sizeof p, "m.bin", "0123456789");
    sl_io_counters a, b;
    sl_io__counters(&a);
    sl_io *io;
    sl_buffer *buf = (sl_buffer *)1;
    ASSERT_OK(sl_io__open(&io, p, 0));
    ASSERT_OK(sl_io__map_buffer(io, &buf));
    ASSERT(buf == NULL);
    sl_io__map_close(io, buf); /* closes io */
    sl_io__counters(&b);
    ASSERT_U64_EQ(b.open_now, a.open_now);

    ASSERT_OK(sl_io__open(&io, p, SL_IO_MAP));
    ASSERT_OK(sl_io__map_buffer(io, &buf));
    ASSERT(buf != NULL);
    ASSERT(sl_buffer_data(buf) == sl_io__map(io));
    ASSERT_EQ(sl_buffer_size(buf), 10);
    sl_buffer *view = sl_buffer_retain(buf);
    sl_io__map_close(io, buf);
    sl_io__counters(&b);
    ASSERT_U64_EQ(b.open_now, a.open_now + 1); /* the view holds it */
    ASSERT(!memcmp(sl_buffer_data(view), "0123456789", 10));
    sl_buffer_release(view);
    sl_io__counters(&b);
    ASSERT_U64_EQ(b.open_now, a.open_now);

    ASSERT_OK(sl_io__open(&io, p, SL_IO_MAP));
    sl__alloc_fail_at(1);
    int rc = sl_io__map_buffer(io, &buf);
    sl__alloc_fail_at(0);
    ASSERT_RC(rc, SL_ENOMEM);
    ASSERT(buf == NULL);
    ASSERT(!memcmp(sl_io__map(io), "0123", 4)); /* still the caller's */
    sl_io__close(io);
    sl_io__map_close(NULL, NULL);
}

SL_TEST(io_io__one_error_policy) {
    char p[4096];
    sl_io *io = (sl_io *)1;
    sl_test_path(p, sizeof p, "missing");
    ASSERT_RC(sl_io__open(&io, p, SL_IO_MAP), SL_EIO);
    ASSERT(io == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "missing: cannot open: No such file");
    sl_test_path(p, sizeof p, "dir");
    ASSERT(mkdir(p, 0755) == 0);
    ASSERT_RC(sl_io__open(&io, p, 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "dir: is a directory");
    ASSERT_RC(sl_io__open(&io, "/dev/null", 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "/dev/null: not a regular file");
    ASSERT_RC(sl_io__open(&io, "ftp://example.com/a.tar", SL_IO_MAP), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "ftp://example.com/a.tar: no reader for ftp:// inputs");
    /* a path with "://" further on is still a path */
    ASSERT_RC(sl_io__open(&io, "dir/a://b", 0), SL_EIO);
}

/* One table of schemes (io.c): a name's scheme picks its row; the message for
 * a scheme no row names lists the table's; listing is a dialect's (s3) and a
 * row without one refuses it, naming the forms that can be listed. None of
 * these reaches the network. */
SL_TEST(io_io__schemes_from_one_table) {
    sl_io *io = NULL;
    ASSERT_RC(sl_io__open(&io, "gs://bucket/a.tar", 0), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "gs://bucket/a.tar: no reader for gs:// inputs (sluice reads "
                                 "http://, https:// and s3:// URLs)");
    sl_io_info info;
    ASSERT_RC(sl_io__stat("file://x/y", &info), SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_errmsg(), "no reader for file:// inputs");
    /* a remote row's directory rule, without a request */
    ASSERT_RC(sl_io__stat("https://example.invalid/ds/", &info), SL_OK);
    ASSERT(info.is_dir);
    ASSERT_RC(sl_io__open(&io, "http://example.invalid/ds/", 0), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "http://example.invalid/ds/: is a directory");
    char **names = NULL;
    int n = -1;
    ASSERT_RC(sl_io__list("http://example.invalid/ds/", &names, &n), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "only s3://BUCKET/PREFIX/ names can be listed");
    ASSERT(names == NULL && n == 0);
    ASSERT_RC(sl_io__list("s3://bucket/no-slash", &names, &n), SL_EINVAL);
    ASSERT_RC(sl_io__list("/tmp/", &names, &n), SL_EINVAL);
}

/* io.h's default edge read of an open is the settings table's default of
 * SLUICE_HTTP_OPEN_BYTES (src/core/settings.c), the one home of the number. */
SL_TEST(io_io__open_bytes_default_is_the_tables) {
    unsetenv("SLUICE_HTTP_OPEN_BYTES");
    ASSERT(sl__setting_int("SLUICE_HTTP_OPEN_BYTES") == (long long)SL_IO_EDGE_TAIL);
}

SL_TEST(io_io__read_file) {
    char p[4096];
    make(p, sizeof p, "t.json", "{\"a\": 1}");
    uint8_t *b;
    size_t n;
    ASSERT_OK(sl_io__read_file(p, 0, 0, &b, &n));
    ASSERT_EQ(n, 8);
    ASSERT_STR_EQ((const char *)b, "{\"a\": 1}");
    sl__free(b);
    ASSERT_RC(sl_io__read_file(p, 7, 0, &b, &n), SL_ELIMIT);
    ASSERT(b == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "8 bytes is over the 7-byte limit");
    sl_test_path(p, sizeof p, "none");
    sl_errclear();
    ASSERT_RC(sl_io__read_file(p, 0, 1, &b, &n), SL_END);
    ASSERT_STR_EQ(sl_errmsg(), "");
    ASSERT_RC(sl_io__read_file(p, 0, 0, &b, &n), SL_EIO);
}

SL_TEST(io_io__out_of_memory) {
    char p[4096];
    make(p, sizeof p, "f", "abc");
    for (uint64_t k = 1;; k++) {
        uint8_t *b = NULL;
        size_t n;
        sl__alloc_fail_at(k);
        int rc = sl_io__read_file(p, 0, 0, &b, &n);
        sl__alloc_fail_at(0);
        if (rc == SL_OK) {
            sl__free(b);
            ASSERT(k > 1);
            break;
        }
        ASSERT_RC(rc, SL_ENOMEM);
        ASSERT(sl_errmsg()[0]);
    }
}

SL_TEST(io_core__base_name_and_crc32c) {
    ASSERT_STR_EQ(sl__base_name("a/b/c.tar"), "c.tar");
    ASSERT_STR_EQ(sl__base_name("c.tar"), "c.tar");
    ASSERT_STR_EQ(sl__base_name("a/b/"), "a/b/");
    ASSERT_U64_EQ(sl__crc32c(0, "123456789", 9), 0xe3069283u);
}

/* A libcurl with no CA bundle of its own (the wheels') takes the first
 * distribution bundle that exists; one with a bundle keeps it. */
SL_TEST(io_io__ca_bundle_where_the_distribution_keeps_it) {
    char a[4096], b[4096], none[4096];
    make(a, sizeof a, "rhel-bundle.crt", "certs");
    make(b, sizeof b, "alpine-cert.pem", "certs");
    sl_test_path(none, sizeof none, "missing.crt");
    const char *const list[] = {none, a, b, NULL};
    ASSERT_STR_EQ(sl_io__ca_pick(NULL, list), a);
    ASSERT_STR_EQ(sl_io__ca_pick("", list), a);
    ASSERT_STR_EQ(sl_io__ca_pick(none, list), a);  /* built in, but not on this system */
    ASSERT(sl_io__ca_pick(b, list) == NULL);        /* built in and there: libcurl's own */
    const char *const nothing[] = {none, NULL};
    ASSERT(sl_io__ca_pick(NULL, nothing) == NULL);  /* none anywhere: OpenSSL's defaults */
}
