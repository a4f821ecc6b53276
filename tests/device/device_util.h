/* device_util.h — helpers shared by the device tests (static, header-only). */
#ifndef DEVICE_UTIL_H
#define DEVICE_UTIL_H

#include "test.h"

#include <dlfcn.h>
#include <stdlib.h>

/* The spec of `json` (whose source path goes unused) reading columns in its
 * place: "image", n uint8 images h x w x c whose byte k is
 * sl_mix64(k + seed), and "label", int64 label0 + i. */
static inline sl_spec *du_image_spec(const char *json, int n, int h, int w, int c,
                                     uint64_t seed, int64_t label0) {
    sl_tensor cols[2];
    int64_t xs[4] = {n, h, w, c}, ls[1] = {n};
    ASSERT_OK(sl_tensor_alloc(&cols[0], SL_U8, 4, xs));
    ASSERT_OK(sl_tensor_alloc(&cols[1], SL_I64, 1, ls));
    uint8_t *x = cols[0].data;
    for (size_t i = 0; i < (size_t)n * (size_t)(h * w * c); i++)
        x[i] = (uint8_t)sl_mix64(i + seed);
    for (int i = 0; i < n; i++)
        ((int64_t *)cols[1].data)[i] = label0 + i;
    sl_spec *spec;
    if (sl_spec_from_json(&spec, json) != SL_OK)
        sl_test_fail(__FILE__, __LINE__, "spec: %s", sl_errmsg());
    const char *names[2] = {"image", "label"};
    ASSERT_OK(sl_spec_set_source_columns(spec, 2, names, cols));
    sl_tensor_release(&cols[0]);
    sl_tensor_release(&cols[1]);
    return spec;
}

/* cudaMemcpy (dst, src, bytes, kind; 2 = device to host) from the CUDA
 * runtime the device backend loads (SLUICE_CUDART's when set, as the
 * backend does: the stand-in has one; else 13, else 12), to read a kernel's
 * output back; NULL where none loads. */
typedef int (*du_memcpy_fn)(void *, const void *, size_t, int);
static inline du_memcpy_fn du_cuda_memcpy(void) {
    const char *env = getenv("SLUICE_CUDART");
    void *rt = env && *env ? dlopen(env, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!rt)
        rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!rt)
        rt = dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL);
    du_memcpy_fn f = NULL;
    if (rt)
        *(void **)&f = dlsym(rt, "cudaMemcpy");
    return f;
}

#endif
