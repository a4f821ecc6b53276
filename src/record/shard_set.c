/*
 * shard_set.c — shards opened lazily under an LRU bound (shard_set.h).
 *
 * Invariants (under `mu`):
 *  1. A slot is CLOSED, OPENING (one thread runs `open`, others wait on
 *     `cv`), OPEN (state valid) or FAILED (rc and msg kept for good).
 *  2. The OPEN slots form the list head..tail, most recently used first;
 *     nothing else is on it.
 *  3. A slot with pins > 0 is OPENING or OPEN, and is never closed.
 *  4. `open` and `close` run with `mu` released. A slot is taken off the
 *     list and marked CLOSED before its close runs, so a get meanwhile opens
 *     a fresh state: the old and the new never share anything the set owns.
 *  5. `live` is the state of an OPEN slot, else NULL; written under `mu`,
 *     read without it only by peek. `keeps_all` is set under `mu` once
 *     max_open >= n and no close runs (`closing` 0); only set_max_open
 *     clears it.
 */
#include "record/shard_set.h"
#include "io/io.h"
#include "core/worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

enum { SLOT_CLOSED = 0, SLOT_OPENING, SLOT_OPEN, SLOT_FAILED };

typedef struct slot {
    int st;
    int pins;
    int prev, next;         /* the LRU list (OPEN only); -1 at its ends */
    void *state;
    int rc;                 /* FAILED: the status and message */
    char *msg;
    void *_Atomic live;     /* the state while OPEN, else NULL (invariant 5) */
    uint64_t closed_seq;    /* nclosed when it was last closed (0: never) */
} slot;

struct sl_shard_set {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* an OPENING slot settled */
    sl_shard_set_ops ops;
    void *user;
    int n, max_open;
    slot *s;
    int head, tail;         /* most / least recently used OPEN slot */
    int grow_cap;           /* max_open grows up to this; 0: fixed */
    uint64_t nclosed;       /* closes so far (growth's clock) */
    int closing;            /* closes under way (mu released) */
    _Atomic bool keeps_all; /* invariant 5 */
    sl_shard_set_stats stats;
};

/* Under mu (invariant 5). */
static void check_keeps_all(sl_shard_set *set) {
    if (set->max_open >= set->n && set->closing == 0)
        atomic_store_explicit(&set->keeps_all, true, memory_order_release);
}

int sl_shard_set__create(sl_shard_set **out, int n, int max_open, const sl_shard_set_ops *ops,
                         void *user) {
    *out = NULL;
    if (n < 0 || max_open < 1)
        return sl__error(SL_EINVAL, "a shard set needs n >= 0 and max_open >= 1 (%d, %d)", n,
                         max_open);
    sl_shard_set *set = sl__calloc(1, sizeof *set);
    if (!set)
        return sl__oom("making a shard set");
    set->s = sl__calloc(n ? (size_t)n : 1, sizeof *set->s);
    if (!set->s) {
        sl__free(set);
        return sl__oom("making a shard set");
    }
    for (int k = 0; k < n; k++)
        set->s[k].prev = set->s[k].next = -1;
    pthread_mutex_init(&set->mu, NULL);
    pthread_cond_init(&set->cv, NULL);
    set->ops = *ops;
    set->user = user;
    set->n = n;
    set->max_open = max_open;
    set->head = set->tail = -1;
    atomic_init(&set->keeps_all, false);
    check_keeps_all(set);
    *out = set;
    return SL_OK;
}

/* ---- the LRU list (under mu) ---------------------------------------------------- */

static void unlink_slot(sl_shard_set *set, int k) {
    slot *x = &set->s[k];
    if (x->prev >= 0)
        set->s[x->prev].next = x->next;
    else
        set->head = x->next;
    if (x->next >= 0)
        set->s[x->next].prev = x->prev;
    else
        set->tail = x->prev;
    x->prev = x->next = -1;
}

static void push_front(sl_shard_set *set, int k) {
    slot *x = &set->s[k];
    x->prev = -1;
    x->next = set->head;
    if (set->head >= 0)
        set->s[set->head].prev = k;
    set->head = k;
    if (set->tail < 0)
        set->tail = k;
}

/* While more than max_open are open, close the least recently used
 * unpinned one (invariant 4: the close runs unlocked). Called and returns
 * with mu held. */
static void evict(sl_shard_set *set) {
    while (set->stats.open_now > set->max_open) {
        /* the least recently used unpinned one, not held if there is one */
        int v = -1;
        for (int u = set->tail; u >= 0; u = set->s[u].prev) {
            if (set->s[u].pins > 0)
                continue;
            if (!set->ops.held || !set->ops.held(set->user, u, set->s[u].state)) {
                v = u;
                break;
            }
            if (v < 0)
                v = u;
        }
        if (v < 0)
            return; /* all pinned: over the bound until some are put */
        slot *x = &set->s[v];
        unlink_slot(set, v);
        void *state = x->state;
        x->state = NULL;
        atomic_store_explicit(&x->live, NULL, memory_order_relaxed);
        x->st = SLOT_CLOSED;
        x->closed_seq = ++set->nclosed;
        set->stats.open_now--;
        set->stats.closes++;
        set->closing++;
        pthread_mutex_unlock(&set->mu);
        set->ops.close(set->user, v, state);
        pthread_mutex_lock(&set->mu);
        set->closing--;
    }
    check_keeps_all(set);
}

/* ---- get / put -------------------------------------------------------------------- */

static int failed_status(const slot *x) {
    return sl__error(x->rc, "%s", x->msg ? x->msg : "out of memory (the shard's error)");
}

int sl_shard_set__get(sl_shard_set *set, int k, void **state_out) {
    *state_out = NULL;
    pthread_mutex_lock(&set->mu);
    slot *x = &set->s[k];
    while (x->st == SLOT_OPENING)
        pthread_cond_wait(&set->cv, &set->mu);
    if (x->st == SLOT_FAILED) {
        int rc = x->rc;
        char msg[SL__ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", x->msg ? x->msg : "");
        pthread_mutex_unlock(&set->mu);
        return msg[0] ? sl__error(rc, "%s", msg) : failed_status(x);
    }
    if (x->st == SLOT_OPEN) {
        x->pins++;
        if (set->head != k) {
            unlink_slot(set, k);
            push_front(set, k);
        }
        *state_out = x->state;
        pthread_mutex_unlock(&set->mu);
        return SL_OK;
    }
    /* CLOSED: this thread opens it; others asking wait on cv. */
    x->st = SLOT_OPENING;
    x->pins++;
    pthread_mutex_unlock(&set->mu);
    void *state = NULL;
    int rc = set->ops.open(set->user, k, &state);
    char *msg = NULL;
    if (rc < 0) {
        msg = sl__strdup(sl_errmsg());
        if (rc == SL_END)
            rc = SL_EIO;
    }
    pthread_mutex_lock(&set->mu);
    if (rc == SL_ENOMEM) { /* not the shard's fault: the next get tries again */
        x->st = SLOT_CLOSED;
        x->pins--;
        sl__free(msg);
    } else if (rc < 0) {
        x->st = SLOT_FAILED;
        x->rc = rc;
        x->msg = msg;
        x->pins--;
        set->stats.failures++;
    } else {
        /* wanted again soon after it was closed: keep more open */
        if (set->grow_cap && x->closed_seq && set->nclosed - x->closed_seq < (uint64_t)set->max_open) {
            int grown = set->max_open + set->max_open / 4 + 1;
            set->max_open = grown < set->grow_cap ? grown : set->grow_cap;
        }
        x->st = SLOT_OPEN;
        x->state = state;
        atomic_store_explicit(&x->live, state, memory_order_release);
        push_front(set, k);
        set->stats.opens++;
        if (++set->stats.open_now > set->stats.max_open_seen)
            set->stats.max_open_seen = set->stats.open_now;
        *state_out = state;
        evict(set);
    }
    pthread_cond_broadcast(&set->cv);
    pthread_mutex_unlock(&set->mu);
    /* The open's own message stands (set on this thread). */
    return rc;
}

/* With set->mu held: pin slot k when it is open (SL_OK), else SL_END; unlocks. */
static int pin_if_open_unlock(sl_shard_set *set, int k, void **state_out) {
    slot *x = &set->s[k];
    int rc = SL_END;
    if (x->st == SLOT_OPEN) {
        x->pins++;
        *state_out = x->state;
        rc = SL_OK;
    }
    pthread_mutex_unlock(&set->mu);
    return rc;
}

int sl_shard_set__get_if_open(sl_shard_set *set, int k, void **state_out) {
    *state_out = NULL;
    pthread_mutex_lock(&set->mu);
    return pin_if_open_unlock(set, k, state_out);
}

int sl_shard_set__try_get_if_open(sl_shard_set *set, int k, void **state_out) {
    *state_out = NULL;
    if (pthread_mutex_trylock(&set->mu) != 0)
        return SL_END;
    return pin_if_open_unlock(set, k, state_out);
}

void *sl_shard_set__peek(const sl_shard_set *set, int k) {
    return atomic_load_explicit(&set->s[k].live, memory_order_acquire);
}

bool sl_shard_set__keeps_all(const sl_shard_set *set) {
    return atomic_load_explicit(&set->keeps_all, memory_order_acquire);
}

void sl_shard_set__grow_to(sl_shard_set *set, int cap) {
    pthread_mutex_lock(&set->mu);
    set->grow_cap = cap > set->max_open ? cap : set->max_open;
    pthread_mutex_unlock(&set->mu);
}

void sl_shard_set__set_max_open(sl_shard_set *set, int max_open) {
    pthread_mutex_lock(&set->mu);
    set->max_open = max_open < 1 ? 1 : max_open;
    set->grow_cap = 0;
    if (set->max_open < set->n)
        atomic_store_explicit(&set->keeps_all, false, memory_order_release);
    check_keeps_all(set);
    pthread_mutex_unlock(&set->mu);
}

void sl_shard_set__put(sl_shard_set *set, int k) {
    pthread_mutex_lock(&set->mu);
    if (--set->s[k].pins == 0 && set->stats.open_now > set->max_open)
        evict(set);
    pthread_mutex_unlock(&set->mu);
}

int sl_shard_set__failed(sl_shard_set *set, int k) {
    pthread_mutex_lock(&set->mu);
    int rc = set->s[k].st == SLOT_FAILED ? set->s[k].rc : SL_OK;
    pthread_mutex_unlock(&set->mu);
    return rc;
}

void sl_shard_set__stats(sl_shard_set *set, sl_shard_set_stats *out) {
    pthread_mutex_lock(&set->mu);
    *out = set->stats;
    out->max_open = set->max_open;
    pthread_mutex_unlock(&set->mu);
}

void sl_shard_set__free(sl_shard_set *set) {
    if (!set)
        return;
    for (int k = 0; k < set->n; k++) {
        slot *x = &set->s[k];
        if (x->st == SLOT_OPEN)
            set->ops.close(set->user, k, x->state);
        sl__free(x->msg);
    }
    pthread_cond_destroy(&set->cv);
    pthread_mutex_destroy(&set->mu);
    sl__free(set->s);
    sl__free(set);
}

int sl_shard_set__default_open(char *const *names, int n) {
    for (int k = 0; k < n; k++)
        if (sl_io__is_url(names[k]))
            return SL_SHARD_SET_OPEN_REMOTE;
    return SL_SHARD_SET_OPEN_LOCAL;
}

/* ---- open-time work over shards, in parallel ------------------------------------------- */

typedef struct each_job {
    int n;
    int (*fn)(void *, int);
    void *user;
    _Atomic int next;         /* the next k to take */
    pthread_mutex_t mu;       /* guards err_k, err_rc, err_msg */
    int err_k, err_rc;
    char err_msg[SL__ERRMSG_MAX];
} each_job;

static void *each_main(void *arg) {
    each_job *j = arg;
    for (;;) {
        int k = atomic_fetch_add(&j->next, 1);
        if (k >= j->n)
            break;
        pthread_mutex_lock(&j->mu);
        int skip = j->err_k >= 0 && k > j->err_k; /* a lower one failed: moot */
        pthread_mutex_unlock(&j->mu);
        if (skip)
            continue;
        int rc = j->fn(j->user, k);
        if (rc < 0) {
            pthread_mutex_lock(&j->mu);
            if (j->err_k < 0 || k < j->err_k) {
                j->err_k = k;
                j->err_rc = rc;
                snprintf(j->err_msg, sizeof j->err_msg, "%s", sl_errmsg());
            }
            pthread_mutex_unlock(&j->mu);
        }
    }
    return NULL;
}

int sl_shard_set__each(int n, int (*fn)(void *user, int k), void *user) {
    if (n <= 1) {
        for (int k = 0; k < n; k++)
            SL_TRY(fn(user, k));
        return SL_OK;
    }
    each_job j = {.n = n, .fn = fn, .user = user, .err_k = -1};
    atomic_init(&j.next, 0);
    pthread_mutex_init(&j.mu, NULL);
    int want = n < SL_SHARD_SET_OPENERS ? n : SL_SHARD_SET_OPENERS;
    /* want - 1 threads and this one; a thread that cannot start leaves its
     * share to the others (the ids fit inline: no allocation) */
    sl_workers ws;
    sl__workers_init(&ws, "shardopen", want - 1, NULL, NULL);
    while (sl__workers_count(&ws) < want - 1 && sl__workers_start(&ws, each_main, &j) == SL_OK)
        ;
    each_main(&j);
    sl__workers_dispose(&ws); /* they end when the shards run out */
    pthread_mutex_destroy(&j.mu);
    if (j.err_k >= 0)
        return sl__error(j.err_rc, "%s", j.err_msg);
    return SL_OK;
}
