/*
 * pysluice.h — pieces shared by the C files of the `_sluice` extension.
 * The extension uses only the public sluice.h API.
 */
#ifndef PYSLUICE_H
#define PYSLUICE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sluice.h"

/* Raise the sluice.Error subclass for `rc` with this thread's sl_errmsg().
 * Must be called with the GIL held, on the thread that saw the failure (the
 * message is thread-local). Returns NULL so callers can `return py_sl_raise(rc);`. */
PyObject *py_sl_raise(int rc);
/* The exception class for a status code (borrowed). */
PyObject *py_sl_exc_for(int rc);

/* ---- Tensor: one engine tensor exported to Python ------------------------
 * Holds one sl_buffer reference; exports the buffer protocol (numpy) and
 * __dlpack__/__dlpack_device__ (torch). Each export keeps its own buffer
 * reference, so an array outlives the Tensor object and the pipeline. */
extern PyTypeObject PySlTensor_Type;
/* A new Tensor that takes over `t` (its buf reference moves into the object;
 * `t` is zeroed). If `t->buf` is NULL the bytes are borrowed, so they are
 * copied first. Returns NULL with an exception set on failure. */
PyObject *py_sl_tensor_from(sl_tensor *t);
/* numpy.asarray(tensor_obj): a numpy view sharing the memory. Steals nothing. */
PyObject *py_sl_tensor_numpy(PyObject *tensor_obj);
/* Fill `out` (zeroed by the caller) from a Python object supporting the
 * buffer protocol (numpy array, bytes, ...) as a borrowed view. `view` must
 * be released by the caller with PyBuffer_Release after use. */
int py_sl_tensor_from_buffer(PyObject *obj, Py_buffer *view, sl_tensor *out, const char *what);

extern PyTypeObject PySlReader_Type;
extern PyTypeObject PySlWriter_Type;

/* Register the types of each file on the module. Return 0 or -1. */
int py_sl_tensor_init(PyObject *m);
int py_sl_record_init(PyObject *m);
int py_sl_pipeline_init(PyObject *m);
int py_sl_pack_init(PyObject *m);
int py_sl_ops_init(PyObject *m);
int py_sl_stager_init(PyObject *m);

#endif
