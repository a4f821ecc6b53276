/* Tests of src/core: errors, buffers, pools, tensors, RNG, logging. */
#include "test.h"
#include "core/core.h"

#include <math.h>
#include <pthread.h>

SL_TEST(core_error__message_and_names) {
    sl_errclear();
    ASSERT_STR_EQ(sl_errmsg(), "");
    ASSERT_EQ(sl__error(SL_ECORRUPT, "%s: record %d: checksum mismatch", "a.slr", 7), SL_ECORRUPT);
    ASSERT_STR_EQ(sl_errmsg(), "a.slr: record 7: checksum mismatch");
    sl__error_prefix(SL_ECORRUPT, "op %s", "decode");
    ASSERT_STR_EQ(sl_errmsg(), "op decode: a.slr: record 7: checksum mismatch");
    ASSERT_STR_EQ(sl_status_str(SL_EDECODE), "SL_EDECODE");
    ASSERT_STR_EQ(sl_status_str(SL_END), "SL_END");
    ASSERT(SL_END > 0 && SL_ECANCELED < 0);
}

static void *other_thread_error(void *arg) {
    (void)arg;
    sl__error(SL_EIO, "thread message");
    return NULL;
}

SL_TEST(core_error__public_set) {
    ASSERT_EQ(sl_error_set(SL_EINVAL, "label %d out of range", 12), SL_EINVAL);
    ASSERT_STR_EQ(sl_errmsg(), "label 12 out of range");
}

SL_TEST(core_error__thread_local) {
    sl__error(SL_EINVAL, "main message");
    pthread_t t;
    pthread_create(&t, NULL, other_thread_error, NULL);
    pthread_join(t, NULL);
    ASSERT_STR_EQ(sl_errmsg(), "main message");
}

SL_TEST(core_error__long_message_truncated) {
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    sl__error(SL_EINVAL, "%s", big);
    ASSERT_EQ(strlen(sl_errmsg()), SL__ERRMSG_MAX - 1);
}

/* A message formatted from itself (an argument that is, or points into, the
 * thread-local message) must come out whole: vsnprintf into its own source
 * once gave "cannot index a damaged file: cannot index a damaged file:
 * esting.tfrecord: ..." (the prefix doubled, the file name eaten). ASan
 * does not see an overlap inside one buffer, so the text is compared. */
SL_TEST(core_error__formatted_from_itself) {
    const char *cause = "testing.tfrecord: record 1 (offset 33596): data checksum mismatch";
    sl__error(SL_ECORRUPT, "%s", cause);
    sl__error(SL_ECORRUPT, "cannot index a damaged file: %s", sl_errmsg());
    ASSERT_STR_EQ(sl_errmsg(),
                  "cannot index a damaged file: testing.tfrecord: record 1 (offset 33596): "
                  "data checksum mismatch");
    /* the public setter (bindings call it) and a tail of the message */
    sl__error(SL_ECORRUPT, "%s", cause);
    sl_error_set(SL_ECORRUPT, "%s (%s)", sl_errmsg() + 18, sl_errmsg());
    ASSERT_STR_EQ(sl_errmsg(), "record 1 (offset 33596): data checksum mismatch (testing.tfrecord: "
                               "record 1 (offset 33596): data checksum mismatch)");
    sl__error(SL_EIO, "%s", cause);
    sl__seterrmsg(sl_errmsg() + 18);
    ASSERT_STR_EQ(sl_errmsg(), "record 1 (offset 33596): data checksum mismatch");
    /* the helper for it, and its argument taken from the message too */
    sl__error(SL_ECORRUPT, "%s", cause);
    ASSERT_EQ(sl__error_prefix(SL_ECORRUPT, "cannot index a damaged file"), SL_ECORRUPT);
    ASSERT_STR_EQ(sl_errmsg(), "cannot index a damaged file: testing.tfrecord: record 1 (offset "
                               "33596): data checksum mismatch");
    sl__error(SL_ECORRUPT, "abc");
    sl__error_prefix(SL_ECORRUPT, "%s", sl_errmsg());
    ASSERT_STR_EQ(sl_errmsg(), "abc: abc");
    /* a full buffer formatted from itself is cut, not garbled */
    char big[SL__ERRMSG_MAX + 100];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = 0;
    sl__error(SL_EINVAL, "%s", big);
    sl__error(SL_EINVAL, "p: %s", sl_errmsg());
    ASSERT_EQ(strlen(sl_errmsg()), SL__ERRMSG_MAX - 1);
    ASSERT(!strncmp(sl_errmsg(), "p: yyyy", 7));
    ASSERT_EQ(strspn(sl_errmsg() + 3, "y"), SL__ERRMSG_MAX - 4);
}

SL_TEST(core_names__closest_first) {
    static const char *const names[] = {"interpolation", "seed", "size", "antialias", NULL};
    char buf[128];
    ASSERT_STR_EQ(sl__names_closest("sise", names, -1, buf, sizeof buf),
                  "size, seed, antialias, interpolation");
    /* case is ignored; ties keep the given order */
    static const char *const cols[] = {"x", "label", "LABELS", "y"};
    ASSERT_STR_EQ(sl__names_closest("labels", cols, 4, buf, sizeof buf), "LABELS, label, x, y");
    ASSERT_STR_EQ(sl__names_closest("q", cols, 0, buf, sizeof buf), "");
    /* cut at the buffer, never past it */
    char small[8];
    sl__names_closest("sise", names, -1, small, sizeof small);
    ASSERT_STR_EQ(small, "size, s");
}

SL_TEST(core_version__matches_header) {
    ASSERT_EQ(sl_version_number(), SL_VERSION_NUMBER);
    ASSERT_STR_EQ(sl_version_string(), SL_VERSION_STRING);
}

SL_TEST(core_dtype__sizes_and_names) {
    ASSERT_EQ(sl_dtype_size(SL_U8), 1);
    ASSERT_EQ(sl_dtype_size(SL_F16), 2);
    ASSERT_EQ(sl_dtype_size(SL_F32), 4);
    ASSERT_EQ(sl_dtype_size(SL_I64), 8);
    ASSERT_EQ(sl_dtype_size((sl_dtype)99), 0);
    for (int d = 1; d <= SL_BOOL; d++)
        ASSERT_EQ(sl_dtype_parse(sl_dtype_name((sl_dtype)d)), d);
    ASSERT_EQ(sl_dtype_parse("float128"), SL_DTYPE_INVALID);
}

SL_TEST(core_tensor__alloc_copy_release) {
    sl_tensor t, c;
    int64_t shape[3] = {2, 3, 4};
    ASSERT_OK(sl_tensor_alloc(&t, SL_F32, 3, shape));
    ASSERT_EQ(t.nbytes, 96);
    ASSERT_EQ(sl_tensor_numel(&t), 24);
    ASSERT_EQ(((uintptr_t)t.data) % 64, 0);
    for (int i = 0; i < 24; i++)
        ((float *)t.data)[i] = (float)i;
    ASSERT_OK(sl_tensor_copy(&c, &t));
    ASSERT(c.data != t.data);
    ASSERT_EQ(memcmp(c.data, t.data, 96), 0);
    sl_tensor_release(&t);
    sl_tensor_release(&c);
    ASSERT(t.buf == NULL && t.data == NULL);
    int64_t bad[1] = {-1};
    ASSERT_RC(sl_tensor_alloc(&t, SL_U8, 1, bad), SL_EINVAL);
    int64_t huge[2] = {INT64_MAX / 2, 8};
    ASSERT_RC(sl_tensor_alloc(&t, SL_U8, 2, huge), SL_EINVAL);
    ASSERT_RC(sl_tensor_alloc(&t, SL_U8, SL_MAX_DIMS + 1, shape), SL_EINVAL);
}

SL_TEST(core_tensor__scalar_and_view) {
    sl_tensor t;
    int64_t v = 42;
    sl_tensor_view(&t, &v, SL_I64, 0, NULL);
    ASSERT_EQ(t.nbytes, 8);
    ASSERT_EQ(sl_tensor_numel(&t), 1);
    ASSERT(t.buf == NULL);
    sl_tensor_release(&t); /* a view: nothing to drop */
}

static int released;
static void on_release(void *user) { released += *(int *)user; }

SL_TEST(core_buffer__refcount_and_wrap) {
    sl_buffer *b;
    ASSERT_OK(sl_buffer_alloc(&b, 100));
    ASSERT_EQ(sl_buffer_refcount(b), 1);
    ASSERT(sl_buffer_retain(b) == b);
    ASSERT_EQ(sl_buffer_refcount(b), 2);
    sl_buffer_release(b);
    sl_buffer_release(b);
    static char mem[10];
    int add = 5;
    released = 0;
    ASSERT_OK(sl_buffer_wrap(&b, mem, sizeof mem, on_release, &add));
    ASSERT(sl_buffer_data(b) == mem);
    ASSERT_EQ(sl_buffer_size(b), 10);
    sl_buffer_retain(b);
    sl_buffer_release(b);
    ASSERT_EQ(released, 0);
    sl_buffer_release(b);
    ASSERT_EQ(released, 5);
    sl_buffer_release(NULL);
}

SL_TEST(core_pool__recycles) {
    sl_pool *p;
    ASSERT_OK(sl_pool_create(&p, 4096, 0));
    sl_buffer *a, *b;
    ASSERT_OK(sl_pool_get(p, &a));
    void *first = sl_buffer_data(a);
    sl_buffer_release(a);
    for (int i = 0; i < 100; i++) {
        ASSERT_OK(sl_pool_get(p, &b));
        ASSERT(sl_buffer_data(b) == first);
        sl_buffer_release(b);
    }
    ASSERT_EQ(sl_pool_allocated(p), 1);
    /* A buffer may outlive sl_pool_free. */
    ASSERT_OK(sl_pool_get(p, &b));
    sl_pool_free(p);
    memset(sl_buffer_data(b), 1, 4096);
    sl_buffer_release(b);
}

SL_TEST(core_pool__max_cached) {
    sl_pool *p;
    sl_buffer *bufs[8];
    ASSERT_OK(sl_pool_create(&p, 64, 2));
    for (int i = 0; i < 8; i++)
        ASSERT_OK(sl_pool_get(p, &bufs[i]));
    for (int i = 0; i < 8; i++)
        sl_buffer_release(bufs[i]);
    for (int i = 0; i < 2; i++)
        ASSERT_OK(sl_pool_get(p, &bufs[i]));
    ASSERT_EQ(sl_pool_allocated(p), 8);
    ASSERT_OK(sl_pool_get(p, &bufs[2]));
    ASSERT_EQ(sl_pool_allocated(p), 9);
    for (int i = 0; i < 3; i++)
        sl_buffer_release(bufs[i]);
    sl_pool_free(p);
}

static void *pool_worker(void *arg) {
    sl_pool *p = arg;
    for (int i = 0; i < 20000; i++) {
        sl_buffer *b;
        if (sl_pool_get(p, &b) != SL_OK)
            abort();
        ((char *)sl_buffer_data(b))[0] = (char)i;
        sl_buffer_retain(b);
        sl_buffer_release(b);
        sl_buffer_release(b);
    }
    return NULL;
}

SL_TEST(core_pool__threads) {
    sl_pool *p;
    ASSERT_OK(sl_pool_create(&p, 256, 0));
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, pool_worker, p);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ASSERT(sl_pool_allocated(p) <= 4);
    sl_pool_free(p);
}

SL_TEST(core_alloc__fail_injection) {
    for (uint64_t n = 1; n <= 3; n++) {
        sl_pool *p = NULL;
        sl_buffer *b = NULL;
        sl__alloc_fail_at(n);
        int rc = sl_pool_create(&p, 16, 0);
        if (rc == SL_OK)
            rc = sl_pool_get(p, &b);
        sl__alloc_fail_at(0);
        if (n <= 2) {
            ASSERT_RC(rc, SL_ENOMEM);
            ASSERT_CONTAINS(sl_errmsg(), "out of memory");
        } else {
            ASSERT_OK(rc);
        }
        sl_buffer_release(b);
        sl_pool_free(p);
    }
}

SL_TEST(core_rng__deterministic_and_keyed) {
    sl_rng a, b, c;
    sl_rng_init(&a, 1, 2, 3, 4);
    sl_rng_init(&b, 1, 2, 3, 4);
    sl_rng_init(&c, 1, 2, 4, 4);
    int same_c = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = sl_rng_next(&a);
        ASSERT_U64_EQ(x, sl_rng_next(&b));
        same_c += x == sl_rng_next(&c);
    }
    ASSERT_EQ(same_c, 0);
    /* Each coordinate changes the stream. */
    uint64_t first[5];
    sl_rng r;
    sl_rng_init(&r, 0, 0, 0, 0); first[0] = sl_rng_next(&r);
    sl_rng_init(&r, 1, 0, 0, 0); first[1] = sl_rng_next(&r);
    sl_rng_init(&r, 0, 1, 0, 0); first[2] = sl_rng_next(&r);
    sl_rng_init(&r, 0, 0, 1, 0); first[3] = sl_rng_next(&r);
    sl_rng_init(&r, 0, 0, 0, 1); first[4] = sl_rng_next(&r);
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            ASSERT(first[i] != first[j]);
}

/* sl__rng_first_n is, index by index, the first draw of the generator
 * sl_rng_init keys at (seed, epoch, index, op), from any start. */
SL_TEST(core_rng__first_n_is_each_generators_first_draw) {
    const uint64_t starts[3] = {0, 1000003, ~0ull - 40};
    uint64_t got[100];
    for (int s = 0; s < 3; s++) {
        uint64_t ek = sl__rng_epoch_key(77, (uint64_t)s);
        sl__rng_first_n(ek, starts[s], 9, 100, got);
        for (uint64_t i = 0; i < 100; i++) {
            sl_rng r;
            sl_rng_init(&r, 77, (uint64_t)s, starts[s] + i, 9);
            ASSERT_U64_EQ(got[i], sl_rng_next(&r));
        }
    }
}

SL_TEST(core_rng__uniform_statistics) {
    sl_rng r;
    sl_rng_init(&r, 42, 0, 0, 0);
    enum { N = 200000, BINS = 10 };
    int hist[BINS] = {0};
    double sum = 0;
    for (int i = 0; i < N; i++) {
        double u = sl_rng_uniform(&r);
        ASSERT(u >= 0.0 && u < 1.0);
        sum += u;
        hist[(int)(u * BINS)]++;
    }
    ASSERT(fabs(sum / N - 0.5) < 0.005);
    double chi2 = 0;
    for (int i = 0; i < BINS; i++) {
        double d = hist[i] - N / (double)BINS;
        chi2 += d * d / (N / (double)BINS);
    }
    ASSERT(chi2 < 30.0); /* 9 dof: p < 0.001 at 27.9 */
    int below[7] = {0};
    for (int i = 0; i < 70000; i++) {
        uint64_t k = sl_rng_below(&r, 7);
        ASSERT(k < 7);
        below[k]++;
    }
    for (int i = 0; i < 7; i++)
        ASSERT(below[i] > 9500 && below[i] < 10500);
    ASSERT_U64_EQ(sl_rng_below(&r, 0), 0);
    ASSERT_U64_EQ(sl_rng_below(&r, 1), 0);
}

static int log_calls;
static char log_last[256];
static void log_cb(sl_log_level level, const char *line, void *user) {
    (void)level;
    (void)user;
    log_calls++;
    snprintf(log_last, sizeof log_last, "%s", line);
}

SL_TEST(core_log__levels_and_callback) {
    sl_log_set_callback(log_cb, NULL);
    sl_log_set_level(SL_LOG_WARN);
    SL_LOG_INFO("hidden %d", 1);
    ASSERT_EQ(log_calls, 0);
    SL_LOG_WARN("shown %d", 2);
    ASSERT_EQ(log_calls, 1);
    ASSERT_STR_EQ(log_last, "shown 2");
    sl_log_set_level(SL_LOG_DEBUG);
    SL_LOG_DEBUG("debug");
    ASSERT_EQ(log_calls, 2);
    sl_log_set_callback(NULL, NULL);
    sl_log_set_level(SL_LOG_WARN);
}

/* sl__cpu_features (cpuid + xgetbv) agrees with GCC's own runtime table,
 * which is filled in this build (gcc's libgcc), on every bit the kernels use. */
SL_TEST(core_cpu_features__agree_with_the_compiler_runtime) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    unsigned f = sl__cpu_features();
    __builtin_cpu_init();
    ASSERT_EQ(!!(f & SL_CPU_SSE41), !!__builtin_cpu_supports("sse4.1"));
    ASSERT_EQ(!!(f & SL_CPU_SSE42), !!__builtin_cpu_supports("sse4.2"));
    ASSERT_EQ(!!(f & SL_CPU_AVX2), !!__builtin_cpu_supports("avx2"));
    ASSERT_EQ(!!(f & SL_CPU_AVX512F), !!__builtin_cpu_supports("avx512f"));
    ASSERT_EQ(!!(f & SL_CPU_AVX512BW), !!__builtin_cpu_supports("avx512bw"));
    ASSERT_EQ(!!(f & SL_CPU_AVX512VL), !!__builtin_cpu_supports("avx512vl"));
    ASSERT_EQ(!!(f & SL_CPU_AVX512VBMI), !!__builtin_cpu_supports("avx512vbmi"));
    ASSERT_EQ(sl__cpu_features(), f); /* read once, the same after */
#else
    sl_test_skip("needs GCC on x86-64 for the reference table");
#endif
}
