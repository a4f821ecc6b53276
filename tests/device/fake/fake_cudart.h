/*
 * fake_cudart.h — the control interface of libsluice_fake_cudart.so, a CUDA
 * runtime stand-in for tests on machines without a GPU (fake_cudart.c).
 *
 * The library exports the 17 cuda* entry points src/device/device_cuda.c
 * resolves, with host memory behind them, plus these control functions, and
 * cudaMemcpy (device to host) for the tests' read-back.
 * Tests reach them with dlsym on the same library device_cuda.c loaded
 * (tests/device/test_cuda_fake.c).
 *
 * Failures are injected as SQLite's test VFS does: "the Nth call from now of
 * entry point F fails with error E", once or for every later call too
 * (sticky). The same can be set from the environment before the first call:
 *   SLUICE_FAKE_CUDA_FAIL=cudaMalloc:3:2[:sticky]   (entry point, N, error)
 *   SLUICE_FAKE_CUDA_DEVICES=0                       (devices reported; default 1)
 *   SLUICE_FAKE_CUDA_NOT_READY=2                     (see fake_cuda_not_ready)
 *   SLUICE_FAKE_CUDA_UNLOAD_AT_EXIT=1                (the runtime goes away in an
 *                                                     atexit handler; later calls
 *                                                     fail and are reported on stderr)
 */
#ifndef SL_FAKE_CUDART_H
#define SL_FAKE_CUDART_H

/* Live objects of a kind: "host" (cudaHostAlloc), "device" (cudaMalloc),
 * "stream", "event". -1 for an unknown kind. */
typedef long (*fake_cuda_live_fn)(const char *kind);
/* Calls made so far of entry point `fn` ("cudaMalloc"); -1 if unknown. */
typedef long (*fake_cuda_calls_fn)(const char *fn);
/* Bytes copied by cudaMemcpyAsync so far. */
typedef unsigned long long (*fake_cuda_h2d_bytes_fn)(void);
/* The nth call from now (1: the next) of `fn` returns `err`; with sticky,
 * every call after it too. nth 0 clears. Returns 0, or -1 for an unknown fn. */
typedef int (*fake_cuda_fail_fn)(const char *fn, long nth, int err, int sticky);
/* Calls that failed by injection so far. */
typedef long (*fake_cuda_failed_fn)(void);
/* Each recorded event answers cudaErrorNotReady to its first k queries
 * (cudaEventSynchronize and cudaStreamSynchronize make it ready): the
 * callers' not-yet-passed paths run. */
typedef void (*fake_cuda_not_ready_fn)(int k);
/* Misuse the fake detected (a copy into memory that is not a live device
 * allocation, a destroyed stream or event used, a double free): its count,
 * and the last one's description. */
typedef long (*fake_cuda_misuse_fn)(const char **last);

#define FAKE_CUDA_ERR_INVALID_VALUE 1
#define FAKE_CUDA_ERR_MEMORY_ALLOCATION 2
#define FAKE_CUDA_ERR_UNLOADING 4 /* cudaErrorCudartUnloading */
#define FAKE_CUDA_ERR_NO_DEVICE 100
#define FAKE_CUDA_ERR_NOT_READY 600
#define FAKE_CUDA_ERR_LAUNCH_FAILURE 719

#endif /* SL_FAKE_CUDART_H */
