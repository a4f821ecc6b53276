/*
 * device.h — the device layer: backends (CUDA loaded at run time, and a host
 * backend that does the same work with threads), the staging ring on top of
 * them, and the few entry points the pipeline calls. Never installed.
 *
 * Layering: the device layer knows nothing of pipelines, specs or plans
 * (it calls core and the ops' CPU kernels only). The pipeline calls in
 * through its hand-off stage, src/pipeline/stage_handoff.c (sl_stage_handoff__*),
 * and through spec.c for the "device" JSON (sl_dev__parse_json, _to_json,
 * _decode_placement); the hand-off passes finished host batches across as
 * column views (sl_dev_cols, below) and takes device batches back. What
 * runs on the device side (the upload, the ring, GPU decode's batches and
 * their CPU fallback, sl_device_available, sl_tensor_stream_wait) is here.
 */
#ifndef SL_DEVICE_H
#define SL_DEVICE_H

#include "core/core.h"

#include <stdatomic.h>

/* Blocks of device and pinned memory the backends hold now, process-wide
 * (sl_device_held): each backend's allocation adds 1 to its counter, each
 * free takes 1 (device_ring.c keeps them). `device` is SL_DEVICE_CUDA or
 * SL_DEVICE_CPU (the host backend). */
void sl_dev__held(int device, int pinned, int delta);

/* ---- backends (device_cuda.c, device_host.c) ----------------------------------------
 * Handles (streams, events) are opaque pointers. A NULL stream is the
 * backend's default stream (CUDA's legacy default stream). Every call may be
 * made from any thread; the ring serialises what needs it.
 *
 * Semantics shared by both backends (CUDA's, which the host backend copies):
 *  - work submitted to one stream runs in submission order;
 *  - event_record marks the point reached by everything submitted to the
 *    stream so far; event_query says whether the stream has passed it (an
 *    event never recorded counts as passed); event_sync blocks until it has;
 *  - stream_wait makes later work on `stream` wait for the event's point,
 *    without blocking the caller. */
typedef struct sl_dev_norm {
    void *dst;                 /* device memory: N x (C,H,W) or (H,W,C) */
    const void *src;           /* device memory: N x (H,W,C) uint8 */
    int64_t n, h, w, c;
    float mean[4], std[4];     /* per channel: y = (x / 255 - mean) / std in float32 */
    int chw;                   /* 1: CHW output, 0: HWC */
    sl_dtype dtype;            /* SL_F32, SL_F16 or SL_BF16 */
} sl_dev_norm;

/* One image of GPU decode's crop + resize + flip + normalize (the kernel
 * of crop_resize.cu; arithmetic in crop_resize_math.h): the source region
 * box (x0, y0, x1, y1) of an RGB image resampled to oh x ow with the
 * antialiased bilinear filter, reading no source pixel outside lim, mirrored
 * when flip, normalized to float32 CHW at dst (or as hwc and u8 say). */
typedef struct sl_dev_crop {
    float *dst;                /* device memory: 3 x oh x ow float32 (u8: uint8 bytes) */
    const void *src;           /* device memory: H x W x 3 uint8, rows `pitch` bytes apart */
    size_t pitch;
    float box[4];
    int lim[4];
    int flip;
    int oh, ow;
    float mean[3], std[3];
    int hwc;                   /* 1: oh x ow x 3 (interleaved) instead of 3 x oh x ow */
    int u8;                    /* 1: the resampled uint8 values, not normalized (mean and
                                  std unused): the CPU chain without a normalize */
} sl_dev_crop;

typedef struct sl_dev_backend sl_dev_backend;
/* What a backend does: one `static const` table per backend (device_cuda.c's
 * cuda_ops, device_host.c's host_ops), shared by every backend it opens. */
typedef struct sl_dev_ops {
    const char *name;          /* "cuda", "host" */
    int device;                /* sl_device the tensors report */
    int (*host_alloc)(sl_dev_backend *b, size_t size, void **out);  /* pinned */
    void (*host_free)(sl_dev_backend *b, void *ptr);
    int (*dev_alloc)(sl_dev_backend *b, size_t size, void **out);
    void (*dev_free)(sl_dev_backend *b, void *ptr);
    int (*stream_create)(sl_dev_backend *b, void **out);
    void (*stream_destroy)(sl_dev_backend *b, void *stream);
    int (*stream_sync)(sl_dev_backend *b, void *stream);
    int (*stream_wait)(sl_dev_backend *b, void *stream, void *event);
    int (*copy)(sl_dev_backend *b, void *dst, const void *src, size_t n, void *stream);
    /* The kernels: SL_EUNSUPPORTED (norm_missing) when the backend's kernels is 0. */
    int (*normalize)(sl_dev_backend *b, const sl_dev_norm *args, void *stream);
    int (*crop_resize)(sl_dev_backend *b, const sl_dev_crop *args, void *stream);
    int (*event_create)(sl_dev_backend *b, void **out);
    void (*event_destroy)(sl_dev_backend *b, void *event);
    int (*event_record)(sl_dev_backend *b, void *event, void *stream);
    int (*event_query)(sl_dev_backend *b, void *event);   /* 1 passed, 0 not, < 0 error */
    int (*event_sync)(sl_dev_backend *b, void *event);
    void (*destroy)(sl_dev_backend *b);
} sl_dev_ops;
/* An open backend: its table and its own state. */
struct sl_dev_backend {
    const sl_dev_ops *ops;
    _Atomic int refs;          /* 1 at open; sl_dev__backend_release frees at 0 */
    int id;                    /* the device's number */
    int kernels;               /* 1: ops->normalize and ->crop_resize run; 0: the build
                                  or the machine lacks them (see norm_missing) */
    char norm_missing[384];    /* why kernels is 0 ("" when it is 1) */
};
/* The state of a backend just allocated (zeroed): one reference, its table,
 * its device number; kernels and norm_missing are left to the caller. */
void sl_dev__backend_init(sl_dev_backend *b, const sl_dev_ops *ops, int id);

/* Open the CUDA backend for device `id`: SL_EUNSUPPORTED with a message
 * naming what is missing (runtime library, device, kernels). */
int sl_dev__cuda_open(sl_dev_backend **out, int id);
/* ---- nvJPEG (device_nvjpeg.c) -------------------------------------------------------
 * Is nvJPEG loadable (and was this build made with nvjpeg.h)? SL_OK, or
 * SL_EUNSUPPORTED with the reason. */
int sl_dev__nvjpeg_probe(void);
/* A batched decoder on a CUDA backend (a reference is taken on `be`):
 * interleaved RGB into device memory the decoder owns (reused by the next
 * decode). Not thread-safe: one decoder per thread. */
typedef struct sl_dev_jpeg sl_dev_jpeg;
#define SL_DEV_JPEG_MAX 256
enum { SL_DEV_JPEG_OK = 0, SL_DEV_JPEG_FALLBACK = 1 };
typedef struct sl_dev_jpeg_item {
    const uint8_t *data;       /* in: the JPEG file's bytes (host memory) */
    size_t len;
    int width, height;         /* out: from the header (0 when unreadable) */
    void *dev;                 /* out: H x W x 3 RGB on the device (NULL on FALLBACK) */
    size_t pitch;              /* bytes per row of dev */
    int status;                /* SL_DEV_JPEG_OK, or FALLBACK: decode it on the CPU */
    char why[96];              /* FALLBACK: what nvJPEG said */
} sl_dev_jpeg_item;
int sl_dev__jpeg_open(sl_dev_jpeg **out, sl_dev_backend *be);
void sl_dev__jpeg_close(sl_dev_jpeg *j);   /* accepts NULL */
/* "hardware", "gpu_hybrid" or "default": the backend the handle opened with. */
const char *sl_dev__jpeg_backend(const sl_dev_jpeg *j);
/* Decode n (<= SL_DEV_JPEG_MAX) images on `stream`: each item ends OK or
 * FALLBACK (nvJPEG refused or failed on that image alone); an error return
 * is about the device, not an image. */
int sl_dev__jpeg_decode(sl_dev_jpeg *j, sl_dev_jpeg_item *items, int n, void *stream);
/* Images decoded on the GPU and sent back to the CPU so far. */
void sl_dev__jpeg_counts(const sl_dev_jpeg *j, uint64_t *gpu_images, uint64_t *fallbacks);
/* ---- GPU decode of a batch (device_gpu_decode.c) -------------------------------------
 * n JPEGs to n float32 (3, oh, ow) images (or (oh, ow, 3), or uint8: hwc,
 * u8), one after another at `dst` (device memory): nvJPEG's batch decode, then the crop/resize kernel at
 * each image's placement (drawn by the caller on the CPU from the header,
 * in the header's pixels). An image nvJPEG refuses or fails on, or whose
 * size is not the header's, is decoded by `cpu` (the CPU path) into `host`
 * (pinned, the same layout as dst) and copied to its place. When `cpu`
 * fails too the image is bad: status FAILED, rc its error (its place in dst
 * holds nothing); its neighbours are unaffected. An error return is about
 * the device (decoder, kernel, copy), never an image. */
enum { SL_DEV_GPU_FAILED = 2 }; /* beside SL_DEV_JPEG_OK and SL_DEV_JPEG_FALLBACK */
typedef struct sl_dev_gpu_item {
    const uint8_t *data;       /* in: the JPEG's bytes */
    size_t len;
    int width, height;         /* in: from the header the placement was drawn on */
    float box[4];              /* in: the placement (sl_place: box, lim, mirror) */
    int lim[4];
    int flip;
    double box_drawn[4];       /* in: box as drawn (the CPU fallback reads it unrounded;
                                  sl_dev__gpu_fill_take's items only) */
    int64_t row;               /* in: the caller's (the host batch's row of this image) */
    int status;                /* out: SL_DEV_JPEG_OK, SL_DEV_JPEG_FALLBACK or SL_DEV_GPU_FAILED */
    int rc;                    /* out, FAILED: cpu's error code (sl_errmsg at the time in why) */
    char why[160];             /* out: why it left the GPU */
} sl_dev_gpu_item;
/* The CPU path for item i: its image at `out` (host memory; float32
 * (3, oh, ow), or as the batch's hwc and u8 say: then `out` holds uint8
 * bytes); SL_OK or the image's own error. */
typedef int (*sl_dev_cpu_decode_fn)(void *ctx, int i, float *out);
typedef struct sl_dev_gpu_batch {
    sl_dev_jpeg *jpeg;         /* its backend runs the kernel and the copies */
    int oh, ow;
    float mean[3], std[3];
    float *dst;                /* device: n x 3 x oh x ow */
    float *host;               /* pinned: n x 3 x oh x ow (fallbacks only) */
    sl_dev_cpu_decode_fn cpu;
    void *cpu_ctx;
    void *stream;
    int host_cap;              /* images `host` holds; 0: n (one place per image). With
                                  fewer, fallbacks take the places in turn and the stream
                                  is synchronised before a place is reused */
    int hwc, u8;               /* the output's layout and type (sl_dev_crop's); dst and
                                  host hold uint8 bytes when u8 */
} sl_dev_gpu_batch;
/* *on_gpu, *on_cpu, *failed: the items that ended each way. */
int sl_dev__gpu_decode_batch(const sl_dev_gpu_batch *b, sl_dev_gpu_item *items, int n,
                             int *on_gpu, int *on_cpu, int *failed);
/* The backend a decoder was opened on. */
sl_dev_backend *sl_dev__jpeg_backend_of(sl_dev_jpeg *j);

/* The host backend: pinned = aligned heap memory, device = another heap
 * buffer, each stream a thread running its work in order. */
int sl_dev__host_open(sl_dev_backend **out);
/* Host backend, for tests: run fn(arg) on `stream` in its order (a slow
 * kernel, a gate). */
int sl_dev__host_stream_call(sl_dev_backend *b, void *stream, void (*fn)(void *), void *arg);

/* References on a backend: the ring and every pool of its pinned memory
 * hold one, so the backend outlives the last pinned buffer. `destroy` runs
 * when the last goes. */
void sl_dev__backend_retain(sl_dev_backend *b);
void sl_dev__backend_release(sl_dev_backend *b);
/* SL_OK when the backend normalizes on the device; else SL_EUNSUPPORTED
 * with "`what`: <why>" (the runtime, device or kernels that are missing). */
int sl_dev__normalize_check(const sl_dev_backend *b, const char *what);
/* Where the backend's memory is, as tensors report it (sl_device and id). */
static inline void sl_dev__backend_place(const sl_dev_backend *b, int32_t *device, int32_t *id) {
    *device = b->ops->device;
    *id = b->id;
}
/* Pool memory from the backend's pinned allocator (pools.c's batch
 * classes): ctx is `b`, retain/done are the two calls above. */
void sl_dev__pinned_mem(sl_dev_backend *b, sl_pool_mem *out);

/* The normalize math of the host backend (and the reference for the
 * kernel): the per-channel table of normalize.c, applied per image. */
void sl_dev__normalize_host(const sl_dev_norm *a);
/* The crop + resize + flip + normalize of the host backend, and the CPU
 * reference of crop_resize.cu: the same functions of crop_resize_math.h. */
void sl_dev__crop_resize_host(const sl_dev_crop *a);

/* ---- the ring (device_ring.c) --------------------------------------------------------
 * Slots of pinned staging memory and device memory, each with a copy event
 * and a release event. Rules (numbered in device_ring.c):
 *  - a slot is handed out with sl_buffer references on it; when the last
 *    one goes, the release event is recorded on the stream the consumer
 *    used, and the slot may be reused only once that event has passed;
 *  - at most `depth` slots exist unless every one is held by the consumer. */
typedef struct sl_dev_ring sl_dev_ring;
typedef struct sl_dev_slot sl_dev_slot;

/* The slots a ring asked for `depth` keeps at most while the consumer
 * holds fewer batches than that (the clamp of sl_dev__ring_create). */
int sl_dev__ring_depth(int depth);
/* Takes ownership of `be` (freed with the ring, after its last slot). */
int sl_dev__ring_create(sl_dev_ring **out, sl_dev_backend *be, int depth);
/* Drop the creator's reference: waits for copies in flight, frees idle
 * slots; held slots are freed when released. Accepts NULL. */
void sl_dev__ring_close(sl_dev_ring *r);
/* A slot with at least `host_bytes` pinned and `dev_bytes` device memory,
 * reused only after its release event passed (may block: `*wait_ns` gets the
 * time). */
int sl_dev__ring_acquire(sl_dev_ring *r, size_t host_bytes, size_t dev_bytes,
                         sl_dev_slot **out, uint64_t *wait_ns);
void *sl_dev__slot_host(sl_dev_slot *s);
void *sl_dev__slot_dev(sl_dev_slot *s);
/* Put the slot back unused (after a failure between acquire and hand-out). */
void sl_dev__slot_abandon(sl_dev_slot *s);
/* Copy host_bytes from the slot's pinned memory to its device memory on the
 * copy stream, then run `norm` (NULL: none), record the copy event and make
 * the consumer stream wait on it. */
int sl_dev__slot_submit(sl_dev_slot *s, size_t bytes, const sl_dev_norm *norm);
/* The same from pinned memory outside the slot: copy i moves cp[i].n bytes
 * from cp[i].src to the slot's device memory at cp[i].dst_off. The slot
 * takes a reference on each of `hold` (the buffers the sources lie in) and
 * drops it once the copy event has passed, so their memory is not reused
 * while the copy engine reads it. */
typedef struct sl_dev_copy {
    size_t dst_off;
    const void *src;
    size_t n;
} sl_dev_copy;
#define SL_DEV_MAX_HOLD 16
int sl_dev__slot_submit_from(sl_dev_slot *s, const sl_dev_copy *cp, int ncp,
                             sl_buffer *const *hold, int nhold, const sl_dev_norm *norm);
/* Hand the slot out: a buffer over its device memory (refcount 1); the slot
 * is released when the buffer's last reference goes. */
int sl_dev__slot_handout(sl_dev_slot *s, sl_buffer **out);
/* The same over the slot's pinned memory (nothing copied to the device):
 * the consumer reads it, or copies it out on its own stream; the release
 * event is recorded on the ring's consumer stream. */
int sl_dev__slot_handout_host(sl_dev_slot *s, sl_buffer **out);
/* The slot behind a buffer from sl_dev__slot_handout(_host), or NULL. */
sl_dev_slot *sl_dev__slot_of(const sl_buffer *buf);
/* Make `stream` wait for the slot's copy; release events are then recorded
 * on `stream`. */
int sl_dev__slot_wait(sl_dev_slot *s, void *stream);
/* The consumer stream of the ring (NULL: the default stream). */
void sl_dev__ring_set_stream(sl_dev_ring *r, void *stream);
sl_dev_backend *sl_dev__ring_backend(sl_dev_ring *r);
/* The ring's copy stream (tests: hold it with sl_dev__host_stream_call). */
void *sl_dev__ring_copy_stream(sl_dev_ring *r);
/* Slots created so far (tests). */
int sl_dev__ring_slots(sl_dev_ring *r);

/* ---- a pipeline's batches on the device (device_deliver.c) ---------------------------
 * The device's side of the pipeline's hand-off. The spec's "device" value: */
enum { SL_DEV_NONE = 0, SL_DEV_CUDA = 1, SL_DEV_HOST = 2 };
typedef struct sl_device_spec {
    int kind;                  /* SL_DEV_* */
    int id;
    int normalize;             /* run the spec's normalize op on the device */
} sl_device_spec;
struct cJSON;
/* Parse the spec's "device" value: "cuda" | "host" | {"kind", "id",
 * "normalize_on_device"}. */
int sl_dev__parse_json(const struct cJSON *v, sl_device_spec *out);
/* Its keys, as a parameter table (core/params.h; sl_spec_params_doc). */
struct sl_param_table;
extern const struct sl_param_table sl_dev__params;
/* The spec's device as JSON (NULL when none). */
struct cJSON *sl_dev__to_json(const sl_device_spec *d);
/* sl_spec_set_device's arguments (sl_device or 0, id, normalize) as a spec. */
int sl_dev__spec_from(int device, int id, int normalize_on_device, sl_device_spec *out);
/* A decode op's "device" key: checks it ("cpu" | "gpu"; SL_EINVAL with
 * ops[index].device otherwise) and sets *gpu; the decode op reads the key
 * itself. Other ops: nothing, *gpu 0. */
int sl_dev__decode_placement(const struct cJSON *op, int index, int *gpu);

/* A batch's columns as the pipeline holds them (its sl_batch arrays): what
 * crosses the hand-off. The upload rewrites col[] in place. Text columns
 * (a path, a key) stay in host memory: no device reads text, and the
 * consumer turns them into strings on the CPU. */
typedef struct sl_dev_cols {
    int ncols;
    int single;                /* one sample, no leading batch dimension */
    int64_t size;
    char (*names)[SL_COLNAME_MAX];
    sl_tensor *col;
    int *ragged;
    uint32_t text;             /* bit c: column c is text (kept on the host) */
} sl_dev_cols;

/* Delivering a pipeline's batches: the backend, then (at the first batch)
 * the ring, the normalize run on the device, GPU decode's state, counters. */
typedef struct sl_dev_out sl_dev_out;
/* Open the backend of `d` (*out NULL when d->kind is SL_DEV_NONE); with
 * d->normalize, SL_EUNSUPPORTED when the kernels are missing. */
int sl_dev__out_open(sl_dev_out **out, const sl_device_spec *d);
/* normalize_on_device: of the spec's ops (ops[i] the op's JSON, NULL for an
 * op given as a function, names[i] for messages), the last normalize is run
 * on the device: its parameters are read (unknown keys, values, and only
 * batch/prefetch/take/skip/repeat after it are checked) and *at says which
 * op the caller takes out of its ops. */
int sl_dev__out_take_norm(sl_dev_out *o, const struct cJSON *const *ops,
                          const char *const *names, int n, int *at);
void sl_dev__out_close(sl_dev_out *o);                  /* accepts NULL */
/* The ring, made once with depth + 1 slots (the upload makes it itself). */
int sl_dev__out_ring(sl_dev_out *o, int depth);
/* The ring slots for an output depth `depth` (0 when o is NULL): each may
 * hold a batch whose copy is in flight. */
int sl_dev__out_slots(const sl_dev_out *o, int depth);
/* Pool memory for the pipeline's batches: the backend's pinned memory (so
 * the stages write batches where the copy engine reads them). 0: o NULL. */
int sl_dev__out_batch_mem(sl_dev_out *o, sl_pool_mem *out);
typedef struct sl_dev_counters {
    uint64_t h2d_bytes;
    uint64_t staged_bytes;       /* of h2d_bytes, through the ring's staging memory */
    uint64_t wait_ns;
    uint64_t gpu_decoded;        /* decode on the GPU: images nvJPEG decoded */
    uint64_t gpu_fallbacks;      /* ... and images it left to the CPU decode */
} sl_dev_counters;
void sl_dev__out_counters(const sl_dev_out *o, sl_dev_counters *out); /* zeros for NULL */
/* The consumer's stream (NULL: the default stream). */
void sl_dev__out_set_stream(sl_dev_out *o, void *stream);
/* Move a host batch's columns to the device, in place (the ring is made at
 * the first call, with depth + 1 slots); text columns stay as they are.
 * Other ragged columns are refused. */
int sl_dev__out_upload(sl_dev_out *o, sl_dev_cols *b, int depth);

/* Decode on the GPU: the chain the plan fused after a decode op with
 * "device": "gpu" (docs/DEVICE.md), as the device runs it. */
typedef struct sl_dev_gpu_spec {
    int pos;                   /* the decode op's spec position (messages) */
    int warnings;              /* the decode op's option (the CPU fallback's decoder) */
    int oh, ow;                /* the output image */
    float mean[3], std[3];
    int hwc, u8;               /* float32 CHW or HWC after a normalize; uint8 HWC without */
    int64_t batch;             /* images in an output batch (the batch op's size) */
} sl_dev_gpu_spec;
/* Check the device (cuda, also when o is NULL: the message says so),
 * nvJPEG, the kernel, no normalize_on_device beside it and the batch size;
 * then the output batches are made by the fill calls below, not the upload. */
int sl_dev__gpu_begin(sl_dev_out *o, const sl_dev_gpu_spec *g);
int sl_dev__gpu_decoding(const sl_dev_out *o);
/* One output batch is filled from rows of host batches, in order:
 * fill_start lays out a ring slot from host batch `b` (ic: its JPEG column,
 * pc: its placements, left out of the output) for `batch` images (1 when
 * b->single); fill_take decodes items it[0..m) (rows of host batch `b`,
 * it[j].row, read from its placements by the caller) into the next rows
 * and copies their other columns; fill_finish hands the output out (its
 * columns written into *out, each holding a reference on the slot). A
 * failed image (the CPU path failed on it too) goes to `failed`, in order:
 * < 0 fails the call with that code (message set), SL_OK drops it and the
 * call goes on with the rest, contiguous. */
typedef int (*sl_dev_gpu_failed_fn)(void *ctx, const sl_dev_gpu_item *it);
int sl_dev__gpu_fill_start(sl_dev_out *o, const sl_dev_cols *b, int ic, int pc);
int sl_dev__gpu_fill_take(sl_dev_out *o, const sl_dev_cols *b, sl_dev_gpu_item *it, int m,
                          sl_dev_gpu_failed_fn failed, void *ctx);
int sl_dev__gpu_fill_finish(sl_dev_out *o, sl_dev_cols *out);
/* Drop the output being filled (accepts NULL). */
void sl_dev__gpu_fill_reset(sl_dev_out *o);
int sl_dev__gpu_filling(const sl_dev_out *o);   /* 1: an output is being filled */
int64_t sl_dev__gpu_filled(const sl_dev_out *o);
int64_t sl_dev__gpu_target(const sl_dev_out *o);

#endif /* SL_DEVICE_H */
