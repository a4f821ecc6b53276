/*
 * device_gpu_decode.c — GPU decode of one batch: nvJPEG (device_nvjpeg.c),
 * then the crop/resize/flip/normalize kernel (crop_resize.cu) per image at
 * the placement the caller drew on the CPU from the header, with the CPU
 * path for the images nvJPEG leaves (refused, failed, or a size other than
 * the header's) — each of those costs only itself.
 *
 * Order on `stream`: the batched decode, then one kernel per GPU image, then
 * one host-to-device copy per CPU image (written to pinned memory first, by
 * the caller's CPU decode, before anything is queued for it). nvJPEG's
 * output buffers are reused by the decoder's next batch, which is queued on
 * the same stream after these kernels.
 *
 * Not run on a GPU yet. The tests drive it over the stand-in runtime and
 * nvJPEG (tests/device/test_cuda_fake.c), with the kernel's CPU reference in
 * place of the launch (the stand-in's device memory is host memory).
 */
#include "device/device.h"

#include <stdio.h>
#include <string.h>

int sl_dev__gpu_decode_batch(const sl_dev_gpu_batch *b, sl_dev_gpu_item *items, int n,
                             int *on_gpu, int *on_cpu, int *failed) {
    *on_gpu = *on_cpu = *failed = 0;
    if (n < 0 || n > SL_DEV_JPEG_MAX)
        return sl__error(SL_EINVAL, "GPU decode: a batch of %d images (1 to %d)", n,
                         SL_DEV_JPEG_MAX);
    sl_dev_backend *be = sl_dev__jpeg_backend_of(b->jpeg);
    if (!be)
        return sl_dev__nvjpeg_probe();
    if (!be->kernels)
        return sl__error(SL_EUNSUPPORTED, "GPU decode: %s", be->norm_missing);
    sl_dev_jpeg_item jt[SL_DEV_JPEG_MAX];
    memset(jt, 0, (size_t)n * sizeof *jt);
    for (int i = 0; i < n; i++) {
        jt[i].data = items[i].data;
        jt[i].len = items[i].len;
    }
    SL_TRY(sl_dev__jpeg_decode(b->jpeg, jt, n, b->stream));
    /* bytes of one output image */
    size_t per = (size_t)3 * (size_t)b->oh * (size_t)b->ow * (b->u8 ? 1 : sizeof(float));
    char *dst = (char *)b->dst, *host = (char *)b->host;
    for (int i = 0; i < n; i++) {
        sl_dev_gpu_item *it = &items[i];
        it->status = jt[i].status;
        it->rc = SL_OK;
        snprintf(it->why, sizeof it->why, "%s", jt[i].why);
        if (it->status == SL_DEV_JPEG_OK &&
            (jt[i].width != it->width || jt[i].height != it->height)) {
            /* the placement was drawn on the header's size */
            it->status = SL_DEV_JPEG_FALLBACK;
            snprintf(it->why, sizeof it->why, "nvJPEG decoded %dx%d, the header says %dx%d",
                     jt[i].width, jt[i].height, it->width, it->height);
        }
        if (it->status != SL_DEV_JPEG_OK)
            continue;
        sl_dev_crop a = {.dst = (float *)(void *)(dst + (size_t)i * per), .src = jt[i].dev,
                         .pitch = jt[i].pitch, .flip = it->flip, .oh = b->oh, .ow = b->ow,
                         .hwc = b->hwc, .u8 = b->u8};
        memcpy(a.box, it->box, sizeof a.box);
        memcpy(a.lim, it->lim, sizeof a.lim);
        memcpy(a.mean, b->mean, sizeof a.mean);
        memcpy(a.std, b->std, sizeof a.std);
        SL_TRY(be->ops->crop_resize(be, &a, b->stream));
        (*on_gpu)++;
    }
    int k = 0; /* with host_cap: the next place in `host` */
    for (int i = 0; i < n; i++) {
        sl_dev_gpu_item *it = &items[i];
        if (it->status == SL_DEV_JPEG_OK)
            continue;
        if (b->host_cap > 0 && k == b->host_cap) { /* every place's copy must have run */
            SL_TRY(be->ops->stream_sync(be, b->stream));
            k = 0;
        }
        float *h = (float *)(void *)(host + (size_t)(b->host_cap > 0 ? k : i) * per);
        int rc = b->cpu(b->cpu_ctx, i, h);
        if (rc < 0) {
            it->status = SL_DEV_GPU_FAILED;
            it->rc = rc;
            snprintf(it->why, sizeof it->why, "%s", sl_errmsg());
            (*failed)++;
            continue;
        }
        SL_TRY(be->ops->copy(be, dst + (size_t)i * per, h, per, b->stream));
        (*on_cpu)++;
        k++;
    }
    return SL_OK;
}
