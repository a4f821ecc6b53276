/*
 * The indexed values a source's index_column() returns (sl_source_ivals in
 * source.h, shared by the tar and TFRecord sources): made once, on the first
 * call, for the columns marked indexed; a failed fill leaves nothing behind
 * and the next call tries again; first calls from several threads fill once.
 */
#include "source/source.h"
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>

static atomic_int g_fills;
static atomic_int g_fail_next; /* the next fill fails with SL_EIO */

/* Column c's value of record i: 1000 * c + i. */
static int fill(sl_source *src, int64_t *const *vals) {
    atomic_fetch_add(&g_fills, 1);
    for (int c = 0; c < src->ncols; c++)
        for (uint64_t i = 0; vals[c] && i < src->count; i++)
            vals[c][i] = 1000 * c + (int64_t)i;
    if (atomic_exchange(&g_fail_next, 0))
        return sl__error(SL_EIO, "shard-0002.tar.slidx: gone since the source opened");
    return SL_OK;
}

/* Three columns over 5 records; 0 and 2 indexed. */
static void fake_source(sl_source *s) {
    memset(s, 0, sizeof *s);
    s->count = 5;
    s->ncols = 3;
    s->col[0].indexed = 1;
    s->col[2].indexed = 1;
    atomic_store(&g_fills, 0);
    atomic_store(&g_fail_next, 0);
}

SL_TEST(source_ivals__made_once_for_the_indexed_columns) {
    sl_source s;
    fake_source(&s);
    sl_source_ivals iv;
    sl_source__ivals_init(&iv);
    const void *v = NULL;
    ASSERT_EQ(atomic_load(&g_fills), 0); /* nothing until asked */
    ASSERT_OK(sl_source__ivals_get(&iv, &s, fill, 2, &v));
    ASSERT(v);
    for (uint64_t i = 0; i < s.count; i++)
        ASSERT_EQ(((const int64_t *)v)[i], 2000 + (int64_t)i);
    const void *w = NULL;
    ASSERT_OK(sl_source__ivals_get(&iv, &s, fill, 2, &w));
    ASSERT(w == v);
    ASSERT_OK(sl_source__ivals_get(&iv, &s, fill, 0, &w));
    ASSERT_EQ(((const int64_t *)w)[4], 4);
    w = &v;
    ASSERT_OK(sl_source__ivals_get(&iv, &s, fill, 1, &w)); /* not indexed */
    ASSERT(w == NULL);
    w = &v;
    ASSERT_OK(sl_source__ivals_get(&iv, &s, fill, 3, &w)); /* out of range */
    ASSERT(w == NULL);
    ASSERT_OK(sl_source__ivals_get(&iv, &s, fill, -1, &w));
    ASSERT(w == NULL);
    ASSERT_EQ(atomic_load(&g_fills), 1);
    sl_source__ivals_dispose(&iv);
}

SL_TEST(source_ivals__a_failed_fill_is_tried_again) {
    sl_source s;
    fake_source(&s);
    sl_source_ivals iv;
    sl_source__ivals_init(&iv);
    atomic_store(&g_fail_next, 1);
    const void *v = &s;
    ASSERT_RC(sl_source__ivals_get(&iv, &s, fill, 0, &v), SL_EIO);
    ASSERT(v == NULL);
    ASSERT_CONTAINS(sl_errmsg(), "gone since the source opened");
    for (int c = 0; c < SL_MAX_COLUMNS; c++) /* freed (ASan: no leak either) */
        ASSERT(iv.vals[c] == NULL);
    ASSERT_OK(sl_source__ivals_get(&iv, &s, fill, 0, &v));
    ASSERT_EQ(((const int64_t *)v)[3], 3);
    ASSERT_EQ(atomic_load(&g_fills), 2);
    /* out of memory for the arrays: no fill, and again the next call */
    sl_source_ivals iv2;
    sl_source__ivals_init(&iv2);
    sl__alloc_fail_at(2);
    ASSERT_RC(sl_source__ivals_get(&iv2, &s, fill, 2, &v), SL_ENOMEM);
    sl__alloc_fail_at(0);
    ASSERT_EQ(atomic_load(&g_fills), 2);
    ASSERT_OK(sl_source__ivals_get(&iv2, &s, fill, 2, &v));
    ASSERT_EQ(((const int64_t *)v)[1], 2001);
    sl_source__ivals_dispose(&iv2);
    sl_source__ivals_dispose(&iv);
}

typedef struct {
    sl_source *s;
    sl_source_ivals *iv;
    pthread_barrier_t *go;
    const void *got;
    int rc;
} first_arg;

static void *first_call(void *p) {
    first_arg *a = p;
    pthread_barrier_wait(a->go);
    a->rc = sl_source__ivals_get(a->iv, a->s, fill, 2, &a->got);
    return NULL;
}

/* Threads asking at once (the executor's workers under a pushed-down
 * filter): one fill, one array, the same to all. Many rounds. */
SL_TEST(source_ivals__threads_asking_at_once_fill_once) {
    enum { THREADS = 6, ROUNDS = 200 };
    for (int round = 0; round < ROUNDS; round++) {
        sl_source s;
        fake_source(&s);
        sl_source_ivals iv;
        sl_source__ivals_init(&iv);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, THREADS);
        pthread_t th[THREADS];
        first_arg args[THREADS];
        for (int t = 0; t < THREADS; t++) {
            args[t] = (first_arg){.s = &s, .iv = &iv, .go = &go};
            ASSERT_EQ(pthread_create(&th[t], NULL, first_call, &args[t]), 0);
        }
        for (int t = 0; t < THREADS; t++)
            ASSERT_EQ(pthread_join(th[t], NULL), 0);
        ASSERT_EQ(atomic_load(&g_fills), 1);
        for (int t = 0; t < THREADS; t++) {
            ASSERT_OK(args[t].rc);
            ASSERT(args[t].got == args[0].got);
        }
        ASSERT_EQ(((const int64_t *)args[0].got)[4], 2004);
        pthread_barrier_destroy(&go);
        sl_source__ivals_dispose(&iv);
    }
}
