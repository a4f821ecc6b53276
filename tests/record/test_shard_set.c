/*
 * Tests of src/record/shard_set.c: shards opened once however many threads
 * ask, a failed open remembered (and not tried again), the least recently
 * used unpinned shard closed first, a pinned shard never closed.
 */
#include "test.h"
#include "core/core.h"
#include "record/shard_set.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <time.h>

typedef struct fake {
    _Atomic int opens[16];
    _Atomic int closes[16];
    int fail_k;            /* this shard's open fails; -1: none */
    int state[16];
    _Atomic int held[16];  /* ops.held says so */
    _Atomic int oom[16];   /* the next open fails with SL_ENOMEM */
} fake;

static int fake_open(void *user, int k, void **state_out) {
    fake *f = user;
    atomic_fetch_add(&f->opens[k], 1);
    usleep(2000); /* long enough for other threads to ask meanwhile */
    if (k == f->fail_k)
        return sl__error(SL_ECORRUPT, "shard-%d: damaged", k);
    if (atomic_exchange(&f->oom[k], 0))
        return sl__error(SL_ENOMEM, "shard-%d: out of memory", k);
    *state_out = &f->state[k];
    return SL_OK;
}

static void fake_close(void *user, int k, void *state) {
    fake *f = user;
    ASSERT(state == &f->state[k]);
    atomic_fetch_add(&f->closes[k], 1);
}

static bool fake_held(void *user, int k, void *state) {
    fake *f = user;
    (void)state;
    return atomic_load(&f->held[k]) != 0;
}

static const sl_shard_set_ops ops = {.open = fake_open, .close = fake_close};
static const sl_shard_set_ops ops_held = {.open = fake_open, .close = fake_close,
                                          .held = fake_held};

static void get_put(sl_shard_set *set, int k) {
    void *st;
    ASSERT_EQ(sl_shard_set__get(set, k, &st), SL_OK);
    sl_shard_set__put(set, k);
}

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

SL_TEST(record_shard_set__opened_once_and_failures_remembered) {
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

SL_TEST(record_shard_set__least_recently_used_closed_first_never_pinned) {
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

SL_TEST(record_shard_set__each_parallel_bounded_lowest_error) {
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

/* A shard still in use through a reference of its own (held) is closed
 * only when every unpinned open shard is held; among those, the least
 * recently used. */
SL_TEST(record_shard_set__held_closed_last) {
    fake f;
    memset(&f, 0, sizeof f);
    f.fail_k = -1;
    sl_shard_set *set;
    ASSERT_EQ(sl_shard_set__create(&set, 4, 2, &ops_held, &f), SL_OK);
    get_put(set, 0);
    get_put(set, 1);
    atomic_store(&f.held[0], 1);
    get_put(set, 2); /* 0 is least recently used but held: 1 goes */
    ASSERT_EQ(atomic_load(&f.closes[0]), 0);
    ASSERT_EQ(atomic_load(&f.closes[1]), 1);
    atomic_store(&f.held[2], 1);
    get_put(set, 3); /* 0 and 2 held: the older, 0, goes */
    ASSERT_EQ(atomic_load(&f.closes[0]), 1);
    ASSERT_EQ(atomic_load(&f.closes[2]), 0);
    sl_shard_set__free(set);
}

/* Reads cycling through more shards than the bound grow it (up to the
 * cap); once it covers every shard and nothing closes, the set keeps all
 * and peek sees each open shard without a lock. A fixed bound stops it. */
SL_TEST(record_shard_set__grows_then_keeps_all) {
    fake f;
    memset(&f, 0, sizeof f);
    f.fail_k = -1;
    sl_shard_set *set;
    ASSERT_EQ(sl_shard_set__create(&set, 12, 2, &ops, &f), SL_OK);
    ASSERT(!sl_shard_set__keeps_all(set));
    sl_shard_set__grow_to(set, 12);
    /* random order (a global shuffle): in order, a shard comes back only
     * after every other, never "within the last max_open closes" */
    uint64_t x = 12345;
    for (int i = 0; i < 400; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        get_put(set, (int)((x >> 33) % 12));
    }
    sl_shard_set_stats st;
    sl_shard_set__stats(set, &st);
    ASSERT_EQ(st.max_open, 12);
    ASSERT_EQ(st.open_now, 12);
    ASSERT(st.opens < 100); /* without growing: about 330 of the 400 */
    ASSERT(sl_shard_set__keeps_all(set));
    for (int k = 0; k < 12; k++)
        ASSERT(sl_shard_set__peek(set, k) == &f.state[k]);
    void *p;
    ASSERT_EQ(sl_shard_set__try_get_if_open(set, 5, &p), SL_OK);
    ASSERT(p == &f.state[5]);
    sl_shard_set__put(set, 5);
    /* a fixed bound below the count: no longer keeping all, closes again */
    sl_shard_set__set_max_open(set, 3);
    ASSERT(!sl_shard_set__keeps_all(set));
    get_put(set, 0);
    sl_shard_set__stats(set, &st);
    ASSERT_EQ(st.open_now, 3);
    ASSERT_EQ(st.max_open, 3);
    int open = 0;
    for (int k = 0; k < 12; k++)
        open += sl_shard_set__peek(set, k) != NULL;
    ASSERT_EQ(open, 3);
    ASSERT_EQ(sl_shard_set__try_get_if_open(set, 11, &p) == SL_END || p == &f.state[11], 1);
    if (p)
        sl_shard_set__put(set, 11);
    /* no growth any more: cycling 12 shards through 3 reopens each time */
    uint64_t before = st.opens;
    for (int k = 0; k < 12; k++)
        get_put(set, k);
    sl_shard_set__stats(set, &st);
    ASSERT_EQ(st.max_open, 3);
    ASSERT(st.opens >= before + 9);
    sl_shard_set__free(set);
}

/* An allocation failure is no fault of the shard: reported, not
 * remembered; the next get opens it. Other failures stay. */
SL_TEST(record_shard_set__out_of_memory_not_remembered) {
    fake f;
    memset(&f, 0, sizeof f);
    f.fail_k = 3;
    sl_shard_set *set;
    ASSERT_EQ(sl_shard_set__create(&set, 4, 4, &ops, &f), SL_OK);
    atomic_store(&f.oom[1], 1);
    void *st;
    ASSERT_EQ(sl_shard_set__get(set, 1, &st), SL_ENOMEM);
    ASSERT(strstr(sl_errmsg(), "shard-1: out of memory"));
    ASSERT_EQ(sl_shard_set__failed(set, 1), SL_OK);
    ASSERT_EQ(sl_shard_set__get(set, 1, &st), SL_OK);
    ASSERT(st == &f.state[1]);
    sl_shard_set__put(set, 1);
    ASSERT_EQ(atomic_load(&f.opens[1]), 2);
    ASSERT_EQ(sl_shard_set__get(set, 3, &st), SL_ECORRUPT);
    ASSERT_EQ(sl_shard_set__get(set, 3, &st), SL_ECORRUPT);
    ASSERT_EQ(atomic_load(&f.opens[3]), 1);
    sl_shard_set_stats s;
    sl_shard_set__stats(set, &s);
    ASSERT_EQ(s.failures, 1);
    sl_shard_set__free(set);
}
