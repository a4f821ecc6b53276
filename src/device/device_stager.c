/*
 * device_stager.c — sl_stager: tensors made outside the pipeline (a Python
 * DataLoader's collated batches) staged through the device layer's ring.
 *
 * One sl_stager_stage call is one batch: one ring slot big enough for every
 * tensor of the group (each at a 256-byte aligned offset), a host memcpy of
 * each tensor into the slot's pinned memory (the caller's thread; the
 * Python module releases the GIL around it), then either
 *  - pinned: the slot's pinned memory handed out (sl_dev__slot_handout_host),
 *    or
 *  - to_device: one copy of the whole slot to its device memory on the
 *    ring's copy stream, the copy event, the consumer stream's wait
 *    (sl_dev__slot_submit), and the device memory handed out.
 * Every output tensor holds its own reference on the handed-out buffer, so
 * the slot goes back to the ring when the last of them is released, and is
 * reused only after its release and copy events have passed (device_ring.c,
 * invariants 1 and 2).
 *
 * The ring allows one acquiring thread at a time: `mu` serialises the
 * acquire; the copies into a slot, the submit and the hand-out run
 * unlocked (a FILLING slot belongs to its caller; the ring's own lock
 * guards the rest).
 */
#include "device/device.h"

#include <pthread.h>
#include <string.h>

#define STAGE_ALIGN 256u

struct sl_stager {
    pthread_mutex_t mu;           /* serialises acquire: one acquirer (ring rule) */
    sl_dev_ring *ring;
    int to_device;
    int32_t out_device, out_id;   /* what the tensors report */
    _Atomic uint64_t batches, staged, h2d, wait_ns;
};

int sl_stager_open(sl_stager **out, sl_device device, int id, int to_device, int depth) {
    if (!out)
        return sl__error(SL_EINVAL, "stager: out is NULL");
    *out = NULL;
    if (device != SL_DEVICE_CUDA && device != SL_DEVICE_CPU)
        return sl__error(SL_EINVAL, "stager: device %d is not SL_DEVICE_CUDA or SL_DEVICE_CPU",
                         (int)device);
    if (id < 0)
        return sl__error(SL_EINVAL, "stager: device id %d is negative", id);
    sl_dev_backend *be = NULL;
    if (device == SL_DEVICE_CUDA)
        SL_TRY(sl_dev__cuda_open(&be, id));
    else
        SL_TRY(sl_dev__host_open(&be));
    sl_stager *s = sl__calloc(1, sizeof *s);
    if (!s) {
        sl_dev__backend_release(be);
        return sl__oom("opening a stager");
    }
    pthread_mutex_init(&s->mu, NULL);
    s->to_device = to_device ? 1 : 0;
    sl_dev__backend_place(be, &s->out_device, &s->out_id);
    if (!s->to_device && device == SL_DEVICE_CUDA)
        s->out_device = SL_DEVICE_CUDA_HOST;
    int rc = sl_dev__ring_create(&s->ring, be, depth); /* takes `be` */
    if (rc < 0) {
        pthread_mutex_destroy(&s->mu);
        sl__free(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

void sl_stager_free(sl_stager *s) {
    if (!s)
        return;
    sl_dev__ring_close(s->ring);
    pthread_mutex_destroy(&s->mu);
    sl__free(s);
}

int sl_stager_set_stream(sl_stager *s, void *stream) {
    if (!s)
        return sl__error(SL_EINVAL, "stager: NULL");
    sl_dev__ring_set_stream(s->ring, stream);
    return SL_OK;
}

static size_t align_up(size_t n) { return (n + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN; }

int sl_stager_stage(sl_stager *s, const sl_tensor *in, int n, sl_tensor *out) {
    if (!s || n < 0 || (n > 0 && (!in || !out)))
        return sl__error(SL_EINVAL, "stager: bad arguments (n %d)", n);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const sl_tensor *t = &in[i];
        if (t->device != 0 && t->device != SL_DEVICE_CPU && t->device != SL_DEVICE_CUDA_HOST)
            return sl__error(SL_EINVAL, "stager: tensor %d is on device %d, not in host memory",
                             i, (int)t->device);
        if (t->ndim < 0 || t->ndim > SL_MAX_DIMS || (t->nbytes && !t->data))
            return sl__error(SL_EINVAL, "stager: tensor %d: ndim %d, %zu bytes at %p", i,
                             (int)t->ndim, t->nbytes, t->data);
        size_t a = align_up(t->nbytes);
        if (a < t->nbytes || total + a < total)
            return sl__error(SL_ELIMIT, "stager: the batch's size overflows");
        total += a;
    }
    if (total == 0)
        total = STAGE_ALIGN; /* an all-empty batch still gets a slot to hand out */
    /* Only the acquire is serialised (the ring's one-acquirer rule): the
     * slot is FILLING and ours alone from here, so callers on several
     * threads copy into their slots in parallel. */
    pthread_mutex_lock(&s->mu);
    sl_dev_slot *slot = NULL;
    uint64_t waited = 0;
    int rc = sl_dev__ring_acquire(s->ring, total, s->to_device ? total : 0, &slot, &waited);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add(&s->wait_ns, waited);
    if (rc < 0)
        return rc;
    /* The staging copy: the tensors come from pageable memory (or from
     * another allocation) and must lie in the slot's pinned memory for an
     * asynchronous copy and for the caller's own non_blocking copies. */
    char *host = sl_dev__slot_host(slot);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (in[i].nbytes)
            memcpy(host + off, in[i].data, in[i].nbytes);
        off += align_up(in[i].nbytes);
    }
    sl_buffer *buf = NULL;
    if (s->to_device) {
        rc = sl_dev__slot_submit(slot, off, NULL);
        if (rc >= 0)
            rc = sl_dev__slot_handout(slot, &buf);
    } else {
        rc = sl_dev__slot_handout_host(slot, &buf);
    }
    if (rc < 0) {
        sl_dev__slot_abandon(slot);
        return rc;
    }
    char *base = sl_buffer_data(buf);
    uint64_t bytes = 0;
    off = 0;
    for (int i = 0; i < n; i++) {
        sl_tensor *o = &out[i];
        *o = in[i];
        o->data = base + off;
        o->buf = sl_buffer_retain(buf);
        o->device = s->out_device;
        o->device_id = s->out_id;
        bytes += in[i].nbytes;
        off += align_up(in[i].nbytes);
    }
    sl_buffer_release(buf); /* the outputs hold the slot now (none: it is released) */
    atomic_fetch_add(&s->batches, 1);
    atomic_fetch_add(&s->staged, bytes);
    if (s->to_device)
        atomic_fetch_add(&s->h2d, bytes);
    return SL_OK;
}

void sl_stager_stats_get(sl_stager *s, sl_stager_stats *out) {
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    out->batches = atomic_load(&s->batches);
    out->staged_bytes = atomic_load(&s->staged);
    out->h2d_bytes = atomic_load(&s->h2d);
    out->wait_s = (double)atomic_load(&s->wait_ns) * 1e-9;
    out->slots = sl_dev__ring_slots(s->ring);
}
