/*
 * queue.c — the bounded queue between two stages.
 *
 * Elements carry sequence numbers. A producer that holds element `seq` may
 * put it into slot seq % cap once seq < head + limit (limit <= cap: the
 * depth in use, which autotune may move within the slots allocated; any
 * window of at most cap consecutive seqs maps to distinct slots), so elements can arrive
 * out of order (parallel workers finish at different times) while memory
 * stays bounded. An ordered consumer takes element `head` only, which
 * restores the producers' order; a relaxed consumer (non-deterministic mode)
 * takes any element present in the window, but never moves past a barrier
 * (epoch end, error) until everything before it is gone, so epochs never mix.
 * A barrier not yet pushed cannot stop a consumer by its slot, so elements
 * carry their epoch too: away from head, a relaxed consumer takes only
 * elements of the epoch it last took at head, and after a barrier it takes
 * the head first (which tells it the new epoch). An element of the next
 * epoch that overtakes the epoch's END marker therefore waits for it.
 *
 * No deadlock: the worker holding element `head` is always admitted, and it
 * needs nothing held by a worker with a later element. In relaxed mode that
 * needs one more rule. Parallel stages keep sequence numbers, so the input
 * queue's head h can be late (a reader stalls on one record) while the
 * stage's workers take h+1, h+2, ... and push them into the output queue,
 * whose head is also h: if every worker held an element at or past h + its
 * output's cap, all would wait for space that only h can make, and none
 * would be free to take h when it came. So a relaxed consumer takes only
 * elements below head + `reach`, the capacity of the queue it pushes into
 * (sl_queue__set_reach; layout.c sets it): every element a worker holds is
 * then admitted downstream, the workers come free, and one takes h.
 * tests/pipeline/test_relaxed.c stalls a reader to check this.
 *
 * Locking: one mutex per queue guards all fields; no other lock is ever held
 * while waiting on it (stages take their input queue's lock, release it, then
 * take their output queue's lock).
 *
 * Wake-ups: a push or pop with nobody waiting makes no futex call. A push
 * wakes one consumer, and only when something became takeable (in ordered
 * mode: the element at head); a consumer that takes an element wakes the next
 * waiting consumer if another element is takeable (a chain, so several
 * elements arriving together still reach several consumers). Producers wait
 * for different heads, so a moving head broadcasts to them, but only when one
 * waits. A consumer that times out re-checks before leaving, so a wake-up it
 * absorbed is not lost (only the consumer's own pop uses a timeout).
 */
#include "pipeline/queue.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#define TAKEN ((void *)1)

static uint64_t ready(const sl_queue *q);

static void account(sl_queue *q) {
    uint64_t t = sl__now_ns();
    /* as a share of the depth in use, which autotune may move */
    q->fill_area += (double)q->count / (double)q->limit * (double)(t - q->last_ns);
    q->last_ns = t;
}

static void free_arrays(sl_queue *q) {
    sl__free(q->slot);
    sl__free(q->barrier);
    sl__free(q->epoch);
    q->slot = NULL;
    q->barrier = NULL;
    q->epoch = NULL;
}

int sl_queue__init(sl_queue *q, size_t cap, int relaxed) {
    memset(q, 0, sizeof *q);
    if (cap < 1)
        cap = 1;
    q->slot = sl__calloc(cap, sizeof *q->slot);
    q->barrier = sl__calloc(cap, 1);
    q->epoch = sl__calloc(cap, sizeof *q->epoch);
    if (!q->slot || !q->barrier || !q->epoch) {
        free_arrays(q);
        return sl__oom("creating a stage queue");
    }
    q->cap = cap;
    q->limit = cap;
    q->reach = cap;
    q->relaxed = relaxed;
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->not_empty, &ca);
    pthread_cond_init(&q->not_full, &ca);
    pthread_condattr_destroy(&ca);
    q->t0_ns = q->last_ns = sl__now_ns();
    return SL_OK;
}

void sl_queue__destroy(sl_queue *q) {
    if (!q->slot)
        return;
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    free_arrays(q);
}

int sl_queue__push(sl_queue *q, uint64_t seq, void *item, int barrier, uint64_t epoch,
                   uint64_t *wait_ns) {
    pthread_mutex_lock(&q->mu);
    if (seq >= q->head + q->limit && !q->closed) {
        uint64_t t0 = sl__now_ns();
        q->wait_full++;
        while (seq >= q->head + q->limit && !q->closed)
            pthread_cond_wait(&q->not_full, &q->mu);
        q->wait_full--;
        if (wait_ns)
            *wait_ns += sl__now_ns() - t0;
    }
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        return SL_ECANCELED;
    }
    size_t i = (size_t)(seq % q->cap);
    account(q);
    q->slot[i] = item;
    q->barrier[i] = (uint8_t)(barrier != 0);
    q->epoch[i] = epoch;
    q->count++;
    if (q->wait_empty && (q->relaxed ? ready(q) != UINT64_MAX : seq == q->head))
        pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
    return SL_OK;
}

static void advance_head(sl_queue *q) {
    while (q->slot[q->head % q->cap] == TAKEN) {
        q->slot[q->head % q->cap] = NULL;
        q->head++;
    }
}

/* Index (seq) of an element a consumer may take now, or UINT64_MAX. */
static uint64_t ready(const sl_queue *q) {
    void *h = q->slot[q->head % q->cap];
    if (h && h != TAKEN)
        return q->head;
    if (!q->relaxed || !q->epoch_known)
        return UINT64_MAX;
    for (uint64_t s = q->head + 1; s < q->head + q->reach; s++) {
        size_t i = (size_t)(s % q->cap);
        void *e = q->slot[i];
        if (!e || e == TAKEN)
            continue;
        if (q->barrier[i] || q->epoch[i] != q->cur_epoch)
            return UINT64_MAX;
        return s;
    }
    return UINT64_MAX;
}

int sl_queue__pop(sl_queue *q, void **item, uint64_t *wait_ns, int timeout_ms) {
    pthread_mutex_lock(&q->mu);
    uint64_t s = ready(q);
    if (s == UINT64_MAX && !q->closed) {
        uint64_t t0 = sl__now_ns();
        struct timespec dl;
        if (timeout_ms >= 0) {
            clock_gettime(CLOCK_MONOTONIC, &dl);
            dl.tv_sec += timeout_ms / 1000;
            dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (dl.tv_nsec >= 1000000000L) {
                dl.tv_sec++;
                dl.tv_nsec -= 1000000000L;
            }
        }
        q->wait_empty++;
        while ((s = ready(q)) == UINT64_MAX && !q->closed) {
            if (timeout_ms < 0) {
                pthread_cond_wait(&q->not_empty, &q->mu);
            } else if (pthread_cond_timedwait(&q->not_empty, &q->mu, &dl) == ETIMEDOUT) {
                s = ready(q);
                break;
            }
        }
        q->wait_empty--;
        if (wait_ns)
            *wait_ns += sl__now_ns() - t0;
        if (s == UINT64_MAX && !q->closed) {
            pthread_mutex_unlock(&q->mu);
            return SL_END;
        }
    }
    if (s == UINT64_MAX) {
        pthread_mutex_unlock(&q->mu);
        return SL_ECANCELED;
    }
    size_t i = (size_t)(s % q->cap);
    account(q);
    *item = q->slot[i];
    q->slot[i] = TAKEN;
    /* Taken at head: the consumer now knows the epoch it is in, or, for a
     * barrier, that the next one starts at head. */
    if (s == q->head) {
        q->cur_epoch = q->epoch[i];
        q->epoch_known = !q->barrier[i];
    }
    q->count--;
    uint64_t head0 = q->head;
    advance_head(q);
    if (q->wait_full && q->head != head0)
        pthread_cond_broadcast(&q->not_full);
    if (q->wait_empty && ready(q) != UINT64_MAX)
        pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
    return SL_OK;
}

void sl_queue__close(sl_queue *q) {
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

void sl_queue__set_limit(sl_queue *q, size_t limit) {
    pthread_mutex_lock(&q->mu);
    size_t old = q->limit;
    account(q);
    q->limit = limit < 1 ? 1 : limit > q->cap ? q->cap : limit;
    if (q->limit > old && q->wait_full)
        pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

size_t sl_queue__limit(sl_queue *q) {
    pthread_mutex_lock(&q->mu);
    size_t n = q->limit;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void sl_queue__set_reach(sl_queue *q, size_t reach) {
    pthread_mutex_lock(&q->mu);
    q->reach = reach < 1 ? 1 : reach > q->cap ? q->cap : reach;
    pthread_mutex_unlock(&q->mu);
}

void sl_queue__reset(sl_queue *q, void (*drop)(void *item, void *ctx), void *ctx) {
    pthread_mutex_lock(&q->mu);
    for (size_t i = 0; i < q->cap; i++) {
        if (q->slot[i] && q->slot[i] != TAKEN && drop)
            drop(q->slot[i], ctx);
        q->slot[i] = NULL;
        q->barrier[i] = 0;
    }
    q->head = 0;
    q->count = 0;
    q->closed = 0;
    q->epoch_known = 0;
    q->fill_area = 0;
    q->t0_ns = q->last_ns = sl__now_ns();
    pthread_mutex_unlock(&q->mu);
}

void sl_queue__start(sl_queue *q, uint64_t epoch) {
    pthread_mutex_lock(&q->mu);
    q->cur_epoch = epoch;
    q->epoch_known = 1;
    pthread_mutex_unlock(&q->mu);
}

double sl_queue__mean_fill(sl_queue *q) {
    pthread_mutex_lock(&q->mu);
    account(q);
    uint64_t span = q->last_ns - q->t0_ns;
    double f = span ? q->fill_area / (double)span : 0.0;
    pthread_mutex_unlock(&q->mu);
    return f;
}

size_t sl_queue__count(sl_queue *q) {
    pthread_mutex_lock(&q->mu);
    size_t n = q->count;
    pthread_mutex_unlock(&q->mu);
    return n;
}
