/*
 * Tests of src/source/shard_set.c: shards opened once however many threads
 * ask, a failed open remembered (and not tried again), the least recently
 * used unpinned shard closed first, a pinned shard never closed.
 */
#include "test.h"
#include "core/core.h"
#include "source/shard_set.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <time.h>

typedef struct fake {
    _Atomic int opens[16];
    _Atomic int closes[16];
    int fail_k;            /* this shard's open fails; -1: none */
    int state[16];
} fake;

static int fake_open(void *user, int k, void **state_out) {
    fake *f = user;
    atomic_fetch_add(&f->opens[k], 1);
    usleep(2000); /* long enough for other threads to ask meanwhile */
    if (k == f->fail_k)
        return sl__error(SL_ECORRUPT, "shard-%d: damaged", k);
    *state_out = &f->state[k];
    return SL_OK;
}

static void fake_close(void *user, int k, void *state) {
    fake *f = user;
    ASSERT(state == &f->state[k]);
    atomic_fetch_add(&f->closes[k], 1);
}

static const sl_shard_set_ops ops = {.open = fake_open, .close = fake_close};

typedef struct arg {
    sl_shard_set *set;
    fake *f;
    int errors;
} arg;

static void *asker(void *p) {
    arg *a = p;
    for (int r = 0; r < 50; r++) {
        int k = r % 3;
        void *st;
        int rc = sl_shard_set__get(a->set, k, &st);
        if (k == 2) {
            a->errors += rc != SL_ECORRUPT || !strstr(sl_errmsg(), "shard-2: damaged");
            continue;
        }
        a->errors += rc != SL_OK || st != &a->f->state[k];
        if (rc == SL_OK)
            sl_shard_set__put(a->set, k);
    }
    return NULL;
}

SL_TEST(source_shard_set__opened_once_and_failures_remembered) {
    fake f = {.fail_k = 2};
    sl_shard_set *set = NULL;
    ASSERT_OK(sl_shard_set__create(&set, 4, 8, &ops, &f));
    pthread_t th[8];
    arg a[8];
    for (int t = 0; t < 8; t++) {
        a[t] = (arg){.set = set, .f = &f};
        ASSERT_EQ(pthread_create(&th[t], NULL, asker, &a[t]), 0);
    }
    for (int t = 0; t < 8; t++) {
        ASSERT_EQ(pthread_join(th[t], NULL), 0);
        ASSERT_EQ(a[t].errors, 0);
    }
    for (int k = 0; k < 3; k++)
        ASSERT_EQ(atomic_load(&f.opens[k]), 1); /* the failure too: tried once */
    ASSERT_EQ(atomic_load(&f.opens[3]), 0);
    ASSERT_EQ(sl_shard_set__failed(set, 2), SL_ECORRUPT);
    ASSERT_EQ(sl_shard_set__failed(set, 0), SL_OK);
    sl_shard_set_stats st;
    sl_shard_set__stats(set, &st);
    ASSERT_EQ(st.open_now, 2);
    ASSERT_U64_EQ(st.failures, 1);
    sl_shard_set__free(set);
    ASSERT_EQ(atomic_load(&f.closes[0]), 1);
    ASSERT_EQ(atomic_load(&f.closes[1]), 1);
    ASSERT_EQ(atomic_load(&f.closes[2]), 0);
}

SL_TEST(source_shard_set__least_recently_used_closed_first_never_pinned) {
    fake f = {.fail_k = -1};
    sl_shard_set *set = NULL;
    ASSERT_OK(sl_shard_set__create(&set, 8, 2, &ops, &f));
    void *st;
    ASSERT_OK(sl_shard_set__get(set, 0, &st));
    sl_shard_set__put(set, 0);
    ASSERT_OK(sl_shard_set__get(set, 1, &st));
    sl_shard_set__put(set, 1);
    ASSERT_OK(sl_shard_set__get(set, 0, &st)); /* 0 used last: 1 goes first */
    sl_shard_set__put(set, 0);
    ASSERT_OK(sl_shard_set__get(set, 2, &st));
    sl_shard_set__put(set, 2);
    ASSERT_EQ(atomic_load(&f.closes[1]), 1);
    ASSERT_EQ(atomic_load(&f.closes[0]), 0);
    /* pinned shards stay open past the bound, until they are put */
    ASSERT_OK(sl_shard_set__get(set, 3, &st));
    ASSERT_OK(sl_shard_set__get(set, 4, &st));
    ASSERT_OK(sl_shard_set__get(set, 5, &st));
    sl_shard_set_stats s;
    sl_shard_set__stats(set, &s);
    ASSERT_EQ(s.open_now, 3);
    ASSERT_EQ(atomic_load(&f.closes[3]) + atomic_load(&f.closes[4]), 0);
    ASSERT_EQ(sl_shard_set__get_if_open(set, 1, &st), SL_END); /* closed: not reopened */
    ASSERT_EQ(atomic_load(&f.opens[1]), 1);
    sl_shard_set__put(set, 3);
    sl_shard_set__put(set, 4);
    sl_shard_set__put(set, 5);
    sl_shard_set__stats(set, &s);
    ASSERT_EQ(s.open_now, 2);
    ASSERT_EQ(s.max_open_seen, 3);
    ASSERT_EQ(atomic_load(&f.closes[3]), 1); /* the least recent of 3, 4, 5 */
    ASSERT_EQ(atomic_load(&f.closes[4]), 0);
    sl_shard_set__free(set);
}

/* sl_shard_set__each: every k run once, on several threads at once; the
 * error returned is the lowest failing k's, with its message, on the calling
 * thread, whatever the timing (run many times). */
typedef struct each_ctx {
    _Atomic int ran[40];
    _Atomic int inflight, most;
    int fail_a, fail_b;
} each_ctx;

static int each_fn(void *user, int k) {
    each_ctx *c = user;
    int now = atomic_fetch_add(&c->inflight, 1) + 1;
    int m = atomic_load(&c->most);
    while (now > m && !atomic_compare_exchange_weak(&c->most, &m, now)) {
    }
    struct timespec ts = {0, 200000 + (k % 3) * 100000};
    nanosleep(&ts, NULL);
    atomic_fetch_add(&c->ran[k], 1);
    atomic_fetch_sub(&c->inflight, 1);
    if (k == c->fail_a || k == c->fail_b)
        return sl__error(k == c->fail_a ? SL_ECORRUPT : SL_EIO, "shard %d: broken", k);
    return SL_OK;
}

SL_TEST(source_shard_set__each_parallel_bounded_lowest_error) {
    for (int trial = 0; trial < 50; trial++) {
        each_ctx c = {.fail_a = -1, .fail_b = -1};
        ASSERT_OK(sl_shard_set__each(40, each_fn, &c));
        for (int k = 0; k < 40; k++)
            ASSERT_EQ(atomic_load(&c.ran[k]), 1);
        ASSERT(atomic_load(&c.most) <= SL_SHARD_SET_OPENERS);
        if (trial == 0)
            ASSERT(atomic_load(&c.most) > 1); /* they overlap */
        each_ctx d = {.fail_a = 23, .fail_b = 9};
        ASSERT_RC(sl_shard_set__each(40, each_fn, &d), SL_EIO);
        ASSERT_STR_EQ(sl_errmsg(), "shard 9: broken");
        for (int k = 0; k <= 9; k++) /* everything below the failure ran */
            ASSERT_EQ(atomic_load(&d.ran[k]), 1);
    }
    each_ctx one = {.fail_a = 0, .fail_b = -1};
    ASSERT_RC(sl_shard_set__each(1, each_fn, &one), SL_ECORRUPT);
    ASSERT_STR_EQ(sl_errmsg(), "shard 0: broken");
    ASSERT_OK(sl_shard_set__each(0, each_fn, &one));
}
