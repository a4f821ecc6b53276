/*
 * queue.h — the bounded queue between two stages (queue.c: its design note
 * says why it cannot deadlock).
 * Never installed.
 */
#ifndef SL_QUEUE_H
#define SL_QUEUE_H

#include "core/core.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* A bounded queue of elements with sequence numbers. Producers push element
 * `seq` into the window [head, head + cap); consumers pop in seq order
 * (ordered) or any finished element before the next barrier (relaxed). */
typedef struct sl_queue {
    pthread_mutex_t mu;           /* guards every field below */
    pthread_cond_t not_empty;     /* an element arrived / closed */
    pthread_cond_t not_full;      /* the window moved / closed */
    void **slot;                  /* cap entries: NULL empty, TAKEN, or an element */
    uint8_t *barrier;             /* slot holds a barrier (epoch end, error) */
    uint64_t *epoch;              /* the epoch of the element in the slot */
    uint64_t cur_epoch;           /* relaxed: the epoch of the last element taken
                                     at head ... */
    int epoch_known;              /* ... and 0 after a barrier: take head next */
    size_t cap;                   /* slots allocated */
    size_t limit;                 /* depth in use (<= cap): pushes wait for
                                     seq < head + limit (sl_queue__set_limit) */
    uint64_t head;                /* lowest seq not yet popped */
    int relaxed;
    size_t reach;                 /* relaxed: consumers take only seq < head + reach
                                     (<= cap; see queue.c, "No deadlock") */
    int closed;
    size_t count;                 /* elements present */
    unsigned wait_empty;          /* consumers waiting on not_empty */
    unsigned wait_full;           /* producers waiting on not_full */
    double fill_area;             /* sum of count / limit * ns, for the mean fill */
    uint64_t last_ns;
    uint64_t t0_ns;
} sl_queue;
int sl_queue__init(sl_queue *q, size_t cap, int relaxed);
void sl_queue__destroy(sl_queue *q);
/* SL_OK, or SL_ECANCELED when closed (the caller still owns item). */
int sl_queue__push(sl_queue *q, uint64_t seq, void *item, int barrier, uint64_t epoch,
                   uint64_t *wait_ns);
/* SL_OK with *item, SL_ECANCELED when closed, SL_END on timeout (timeout_ms >= 0). */
int sl_queue__pop(sl_queue *q, void **item, uint64_t *wait_ns, int timeout_ms);
void sl_queue__close(sl_queue *q);
/* Relaxed mode: let consumers take only elements within `reach` of the head
 * (set before use). For the input of a parallel stage, the capacity of that
 * stage's output queue. */
void sl_queue__set_reach(sl_queue *q, size_t reach);
/* The depth in use, within the slots allocated (1 .. cap); a deeper one
 * wakes waiting producers. Only on a queue no map stage reads (the reach
 * rule above is set from capacities). Any thread. */
void sl_queue__set_limit(sl_queue *q, size_t limit);
size_t sl_queue__limit(sl_queue *q);
/* Reset to empty and open; `drop` is called on every element left. */
/* The stream starts at `epoch` (relaxed consumers may take its elements
 * away from head at once). */
void sl_queue__start(sl_queue *q, uint64_t epoch);
void sl_queue__reset(sl_queue *q, void (*drop)(void *item, void *ctx), void *ctx);
double sl_queue__mean_fill(sl_queue *q);
/* Elements in the queue now. */
size_t sl_queue__count(sl_queue *q);

#endif /* SL_QUEUE_H */
