/*
 * test_device_pipeline.c — pipelines with a device: the host backend gives
 * the same values as the host pipeline (plain copy, and normalize moved to
 * the device), and asking for what this machine lacks fails clearly.
 */
#include "test.h"
#include "device_util.h"
#include "device/device.h"

/* n RGB images 6x5 from the sample index, a label, batch 4 (BATCH4). */
static const char *SPEC_FMT =
    "{\"source\": {\"path\": \"%s\"}, \"ops\": ["
    "{\"op\": \"normalize\", \"column\": \"image\", \"mean\": [0.485, 0.456, 0.406],"
    " \"std\": [0.229, 0.224, 0.225], \"layout\": \"%s\", \"dtype\": \"%s\"}"
    "%s]%s}";
static const char *BATCH4 = ", {\"op\": \"batch\", \"size\": 4}";

static sl_spec *image_spec_ops(const char *layout, const char *dtype, const char *batch,
                               const char *device) {
    char json[1024];
    snprintf(json, sizeof json, SPEC_FMT, "unused", layout, dtype, batch, device);
    return du_image_spec(json, 10, 6, 5, 3, 0, 0);
}

static sl_spec *image_spec(const char *layout, const char *dtype, const char *device) {
    return image_spec_ops(layout, dtype, BATCH4, device);
}

/* h2d_staged_bytes of the last pipeline collect() ran */
static uint64_t last_staged;

/* Concatenated bytes of column `col` of every batch, and their count. */
static size_t collect(sl_spec *spec, uint8_t *out, size_t cap, int want_device) {
    sl_pipeline *p;
    int rc = sl_pipeline_create(&p, spec);
    if (rc != SL_OK)
        sl_test_fail(__FILE__, __LINE__, "create: %s", sl_errmsg());
    size_t n = 0;
    sl_batch *b;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        for (int c = 0; c < sl_batch_ncols(b); c++) {
            const sl_tensor *t = sl_batch_column(b, c);
            ASSERT(t != NULL);
            ASSERT_EQ(t->device, SL_DEVICE_CPU);
            ASSERT_EQ(sl_tensor_stream_wait(t, NULL) == SL_OK, want_device);
            ASSERT(n + t->nbytes <= cap);
            memcpy(out + n, t->data, t->nbytes);
            n += t->nbytes;
        }
        sl_batch_release(b);
    }
    ASSERT_EQ(rc, SL_END);
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    ASSERT_EQ(st.h2d_bytes > 0, want_device);
    ASSERT(st.h2d_staged_bytes <= st.h2d_bytes);
    last_staged = st.h2d_staged_bytes;
    int64_t dev = -1, pinned = -1;
    ASSERT_OK(sl_device_held(SL_DEVICE_CPU, &dev, &pinned));
    ASSERT_EQ(dev > 0 && pinned > 0, want_device); /* the ring's slots, the pinned pool */
    sl_pipeline_free(p);
    /* everything the host backend made is freed with the pipeline */
    ASSERT_OK(sl_device_held(SL_DEVICE_CPU, &dev, &pinned));
    ASSERT_EQ(dev, 0);
    ASSERT_EQ(pinned, 0);
    ASSERT_EQ(sl_device_held((sl_device)7, NULL, NULL), SL_EINVAL);
    return n;
}

static void same_values(const char *layout, const char *dtype, const char *device) {
    static uint8_t a[1 << 16], b[1 << 16];
    sl_spec *s1 = image_spec(layout, dtype, "");
    sl_spec *s2 = image_spec(layout, dtype, device);
    size_t na = collect(s1, a, sizeof a, 0), nb = collect(s2, b, sizeof b, 1);
    /* the stages wrote every batch in the backend's pinned memory: copied
     * from there, nothing staged on the consumer thread */
    ASSERT_U64_EQ(last_staged, 0);
    ASSERT_EQ(na, nb);
    ASSERT(na > 0);
    ASSERT_EQ(memcmp(a, b, na), 0);
    sl_spec_free(s1);
    sl_spec_free(s2);
}

SL_TEST(device_pipeline__host_copy_equals_cpu) {
    same_values("chw", "float32", ", \"device\": \"host\"");
}

SL_TEST(device_pipeline__normalize_on_device_equals_cpu) {
    const char *dev = ", \"device\": {\"kind\": \"host\", \"normalize_on_device\": true}";
    same_values("chw", "float32", dev);
    same_values("hwc", "float32", dev);
    same_values("chw", "float16", dev);
}

/* Without a batch op each sample's tensors come from the sample pools, not
 * from pinned batch buffers: they cross through the ring's staging memory,
 * with the same values. */
SL_TEST(device_pipeline__unbatched_samples_are_staged) {
    static uint8_t a[1 << 16], b[1 << 16];
    sl_spec *s1 = image_spec_ops("chw", "float32", "", "");
    sl_spec *s2 = image_spec_ops("chw", "float32", "", ", \"device\": \"host\"");
    size_t na = collect(s1, a, sizeof a, 0), nb = collect(s2, b, sizeof b, 1);
    ASSERT(last_staged > 0);
    ASSERT_EQ(na, nb);
    ASSERT(na > 0);
    ASSERT_EQ(memcmp(a, b, na), 0);
    sl_spec_free(s1);
    sl_spec_free(s2);
}

SL_TEST(device_pipeline__normalize_on_device_ships_bytes) {
    sl_spec *spec = image_spec("chw", "float32",
                               ", \"device\": {\"kind\": \"host\", \"normalize_on_device\": true}");
    sl_pipeline *p;
    ASSERT_OK(sl_pipeline_create(&p, spec));
    sl_batch *b;
    ASSERT_OK(sl_pipeline_next(p, &b));
    const sl_tensor *t = sl_batch_column(b, sl_batch_find(b, "image"));
    ASSERT_EQ(t->dtype, SL_F32);
    ASSERT_EQ(t->shape[1], 3); /* (N, C, H, W) */
    sl_batch_release(b);
    sl_pipeline_stats st;
    ASSERT_OK(sl_pipeline_stats_get(p, &st));
    /* 4 uint8 images of 6x5x3 (360 bytes, padded to 512) and 4 labels (32,
     * padded to 256) crossed; float32 images would have been 1440 bytes */
    ASSERT_U64_EQ(st.h2d_bytes, 768);
    sl_pipeline_free(p);
    sl_spec_free(spec);
}

static void create_fails(const char *json, int code, const char *needle) {
    sl_spec *spec;
    int rc = sl_spec_from_json(&spec, json);
    if (rc == SL_OK) {
        sl_tensor col;
        int64_t shp[4] = {2, 4, 4, 3};
        ASSERT_OK(sl_tensor_alloc(&col, SL_U8, 4, shp));
        memset(col.data, 0, col.nbytes);
        const char *names[1] = {"image"};
        ASSERT_OK(sl_spec_set_source_columns(spec, 1, names, &col));
        sl_tensor_release(&col);
        sl_pipeline *p = NULL;
        rc = sl_pipeline_create(&p, spec);
        sl_pipeline_free(p);
        sl_spec_free(spec);
    }
    ASSERT_EQ(rc, code);
    ASSERT_CONTAINS(sl_errmsg(), needle);
}

SL_TEST(device_pipeline__errors_name_what_is_missing) {
    /* This machine has no CUDA driver: either the runtime or a device is
     * missing, and the message says which. */
    int rc = sl_device_available(SL_DEVICE_CUDA, 0);
    if (rc == SL_OK) {
        printf("  (a CUDA device is present: the unavailable case is not checked)\n");
    } else {
        ASSERT_EQ(rc, SL_EUNSUPPORTED);
        ASSERT_CONTAINS(sl_errmsg(), "device \"cuda\": ");
        create_fails("{\"source\": {\"path\": \"x\"}, \"device\": \"cuda\"}", SL_EUNSUPPORTED,
                     "device \"cuda\": ");
    }
    create_fails("{\"source\": {\"path\": \"x\"}, \"device\": \"tpu\"}", SL_EINVAL,
                 "device.kind: must be");
    create_fails("{\"source\": {\"path\": \"x\"}, \"device\": {\"kind\": \"host\", \"pin\": 1}}",
                 SL_EINVAL, "device.pin: unknown key");
    create_fails("{\"source\": {\"path\": \"x\"}, \"device\": {\"kind\": \"host\", "
                 "\"normalize_on_device\": true}}", SL_EINVAL, "the spec has no normalize op");
    create_fails("{\"source\": {\"path\": \"x\"}, \"ops\": [{\"op\": \"normalize\"}, "
                 "{\"op\": \"flip\", \"column\": \"image\"}], \"device\": {\"kind\": \"host\", "
                 "\"normalize_on_device\": true}}", SL_EINVAL, "ops[1] (flip) comes after");
    /* decode on the GPU: where nvJPEG cannot load, that is said first
     * (before the source opens). Where it can (a GPU machine; the stand-in
     * through SLUICE_NVJPEG), the spec is checked on: here its source's
     * images are not encoded bytes, an EINVAL naming ops[0] (the missing
     * "device": "cuda" over real JPEGs is gpu_pipe_fake__unsupported_chains_are_refused's) */
    if (sl_dev__nvjpeg_probe() == SL_OK)
        create_fails("{\"source\": {\"path\": \"x\"}, \"ops\": [{\"op\": \"decode\", "
                     "\"device\": \"gpu\"}]}", SL_EINVAL, "ops[0].");
    else
        create_fails("{\"source\": {\"path\": \"x\"}, \"ops\": [{\"op\": \"decode\", "
                     "\"device\": \"gpu\"}]}", SL_EUNSUPPORTED,
                     "ops[0].device \"gpu\": decoding on the GPU needs nvJPEG");
    create_fails("{\"source\": {\"path\": \"x\"}, \"ops\": [{\"op\": \"decode\", "
                 "\"device\": \"npu\"}]}", SL_EINVAL, "ops[0].device: must be");
    /* read through a parameter table: the range and the value given, the
     * keys closest first */
    create_fails("{\"source\": {\"path\": \"x\"}, \"device\": {\"kind\": \"host\", \"id\": -1}}",
                 SL_EINVAL, "device.id: must be a whole number from 0 to 1024 (got -1)");
    create_fails("{\"source\": {\"path\": \"x\"}, \"device\": {\"kind\": \"host\", "
                 "\"normalise_on_device\": true}}", SL_EINVAL,
                 "device.normalise_on_device: unknown key (keys: normalize_on_device, kind, id)");
    create_fails("{\"source\": {\"path\": \"x\"}, \"device\": {\"id\": 0}}", SL_EINVAL,
                 "device.kind: missing");
    create_fails("{\"source\": {\"path\": \"x\"}, \"device\": \"tpu\"}", SL_EINVAL,
                 "device.kind: must be \"cuda\", \"host\" or \"none\"");
}

SL_TEST(device_pipeline__spec_round_trip) {
    sl_spec *spec;
    ASSERT_OK(sl_spec_create(&spec));
    ASSERT_OK(sl_spec_set_device(spec, SL_DEVICE_CPU, 0, 1));
    char buf[1024];
    size_t len;
    ASSERT_OK(sl_spec_to_json(spec, buf, sizeof buf, &len));
    ASSERT_CONTAINS(buf, "\"device\":{\"kind\":\"host\",\"id\":0,\"normalize_on_device\":true}");
    ASSERT_EQ(sl_spec_set_device(spec, (sl_device)7, 0, 0), SL_EINVAL);
    sl_spec_free(spec);
}
