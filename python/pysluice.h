/*
 * pysluice.h — pieces shared by the C files of the `_sluice` extension.
 * The extension uses only the public sluice.h API.
 */
#ifndef PYSLUICE_H
#define PYSLUICE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sluice.h"

#include <stdatomic.h>
#include <stdint.h>

/* ---- The limited API ------------------------------------------------------
 * On GIL builds the module is compiled against the limited API of CPython
 * 3.10 (Py_LIMITED_API=0x030A0000, python/CMakeLists.txt), so that one
 * binary, the cp310-abi3 wheel, serves CPython 3.10 and every later 3.x;
 * free-threaded builds (3.13t), which the limited API does not cover before
 * 3.15, use the full API. The code is the same for both: heap types made
 * from specs, PyTuple_GetItem & co., no struct field of a type object.
 *
 * The buffer protocol (Py_buffer, PyObject_GetBuffer, PyBuffer_Release, the
 * Py_bf_getbuffer slot) joined the limited API in 3.11, unchanged: the
 * struct's layout and the functions have been the same since 3.3, and 3.10's
 * PyType_FromSpec takes the slot (it has since 3.9). Compiled for 3.10, the
 * declarations below stand in for 3.11's headers; PY_SL_BUFFER_FIELDS is
 * checked field by field against the real struct at build time
 * (python/abi3_check.c), and the wheel is imported and run under 3.10 by
 * scripts/test_wheels.sh. */
#define PY_SL_BUFFER_FIELDS                                                              \
    void *buf;                                                                           \
    PyObject *obj;                                                                       \
    Py_ssize_t len;                                                                      \
    Py_ssize_t itemsize;                                                                 \
    int readonly;                                                                        \
    int ndim;                                                                            \
    char *format;                                                                        \
    Py_ssize_t *shape;                                                                   \
    Py_ssize_t *strides;                                                                 \
    Py_ssize_t *suboffsets;                                                              \
    void *internal;
#if defined(Py_LIMITED_API) && Py_LIMITED_API + 0 < 0x030B0000
typedef struct {
    PY_SL_BUFFER_FIELDS
} Py_buffer;
typedef int (*getbufferproc)(PyObject *, Py_buffer *, int);
#define PyBUF_SIMPLE 0
#define PyBUF_WRITABLE 0x0001
#define PyBUF_FORMAT 0x0004
#define PyBUF_ND 0x0008
#define PyBUF_STRIDES (0x0010 | PyBUF_ND)
#define PyBUF_C_CONTIGUOUS (0x0020 | PyBUF_STRIDES)
#define Py_bf_getbuffer 1
PyAPI_FUNC(int) PyObject_CheckBuffer(PyObject *obj);
PyAPI_FUNC(int) PyObject_GetBuffer(PyObject *obj, Py_buffer *view, int flags);
PyAPI_FUNC(void) PyBuffer_Release(Py_buffer *view);
#endif

/* The API version the code may use: the limited API's when built for it,
 * else the headers'. */
#if defined(Py_LIMITED_API)
#define PY_SL_API Py_LIMITED_API
#else
#define PY_SL_API PY_VERSION_HEX
#endif

/* A heap type's instance goes back to its allocator, and drops the
 * reference it held on its type (tp_dealloc's last step). */
static inline void py_sl_free(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* A type from its spec, added to the module under `name`: the type (a
 * strong reference the module's globals keep for the process), or NULL. */
static inline PyTypeObject *py_sl_add_type(PyObject *m, PyType_Spec *spec, const char *name) {
    PyObject *t = PyType_FromSpec(spec);
    if (!t)
        return NULL;
    if (PyModule_AddObjectRef(m, name, t) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyTypeObject *)t;
}

/* The UTF-8 text of a str (NULL with an exception for anything else). */
static inline const char *py_sl_utf8(PyObject *o) { return PyUnicode_AsUTF8AndSize(o, NULL); }

/* type(o)'s name as tp_name spells it ("int", "numpy.ndarray"), written into
 * buf (128 bytes) for a message; never fails (the limited API has no
 * tp_name: it is read from __module__ and __qualname__). */
const char *py_sl_tpname(PyObject *o, char *buf);
#define PY_SL_TPNAME(o) py_sl_tpname((o), (char[128]){0})

/* ---- Sharing objects between threads, with or without the GIL ------------
 * Nothing here relies on the GIL for mutual exclusion or memory visibility,
 * so the module runs on free-threaded builds (3.13t) as on GIL builds, with
 * the same behaviour and messages. See docs/PYTHON.md, "Free-threaded Python".
 *
 * py_sl_gate: who may use an object's engine handle right now — one word,
 * C11 atomics, held across the GIL-released engine call (a flag that only
 * the GIL guarded would not survive Py_BEGIN_ALLOW_THREADS anyway):
 *   - users (any number at once): calls that only read the handle (a
 *     Reader's reads, a Pipeline's stats); they keep a close from freeing it;
 *   - one owner: the call that may change the engine object (a Writer's
 *     append, a Pipeline's next); users may run beside it;
 *   - a closer: close (or a second __init__) holds the object alone, only
 *     when nobody else does; it never waits, it refuses (the callers' own
 *     RuntimeError messages).
 * Nobody spins or blocks on a gate, so a gate cannot deadlock with the GIL
 * or with a free-threaded stop-the-world pause. The word starts at 0
 * (tp_alloc zeroes the object). */
typedef struct {
    _Atomic uint32_t word;
} py_sl_gate;

#define PY_SL_GATE_OWNER 1u
#define PY_SL_GATE_CLOSING 2u
#define PY_SL_GATE_USER 4u

/* Enter as a user: 0, or -1 (nothing entered) while a closer holds the object. */
static inline int py_sl_gate_use(py_sl_gate *g) {
    uint32_t old = atomic_fetch_add_explicit(&g->word, PY_SL_GATE_USER, memory_order_acquire);
    if (old & PY_SL_GATE_CLOSING) {
        atomic_fetch_sub_explicit(&g->word, PY_SL_GATE_USER, memory_order_release);
        return -1;
    }
    return 0;
}
static inline void py_sl_gate_leave(py_sl_gate *g) {
    atomic_fetch_sub_explicit(&g->word, PY_SL_GATE_USER, memory_order_release);
}
/* Become the owner: 0; -1 another owner holds it; -2 a closer holds it. */
static inline int py_sl_gate_own(py_sl_gate *g) {
    uint32_t s = atomic_load_explicit(&g->word, memory_order_relaxed);
    do {
        if (s & PY_SL_GATE_CLOSING)
            return -2;
        if (s & PY_SL_GATE_OWNER)
            return -1;
    } while (!atomic_compare_exchange_weak_explicit(&g->word, &s, s | PY_SL_GATE_OWNER,
                                                    memory_order_acquire, memory_order_relaxed));
    return 0;
}
static inline void py_sl_gate_disown(py_sl_gate *g) {
    atomic_fetch_and_explicit(&g->word, ~PY_SL_GATE_OWNER, memory_order_release);
}
/* Hold the object alone (to free or replace its handle): 0; -1 an owner or
 * a user holds it; -2 another closer does. */
static inline int py_sl_gate_close_begin(py_sl_gate *g) {
    uint32_t s = 0;
    if (atomic_compare_exchange_strong_explicit(&g->word, &s,
                                                PY_SL_GATE_OWNER | PY_SL_GATE_CLOSING,
                                                memory_order_acquire, memory_order_relaxed))
        return 0;
    return (s & PY_SL_GATE_CLOSING) ? -2 : -1;
}
static inline void py_sl_gate_close_end(py_sl_gate *g) {
    /* and, not store: a user that saw CLOSING may still be backing out */
    atomic_fetch_and_explicit(&g->word, ~(PY_SL_GATE_OWNER | PY_SL_GATE_CLOSING),
                              memory_order_release);
}
/* In a forked child: the threads that held the gate are gone. */
static inline void py_sl_gate_reset(py_sl_gate *g) {
    atomic_store_explicit(&g->word, 0, memory_order_relaxed);
}

/* The items of a sequence as a tuple (read with PyTuple_Size and
 * PyTuple_GetItem): a tuple as it is, anything else copied (Python's
 * tuple(x), safe against another thread changing a list), or NULL with a
 * TypeError saying `msg` when `o` is not iterable. */
static inline PyObject *py_sl_sequence(PyObject *o, const char *msg) {
    PyObject *t = PySequence_Tuple(o);
    if (!t && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, msg);
    }
    return t;
}

/* d[key] as a strong reference (another thread may replace the value):
 * 1 found, 0 missing (*out NULL), -1 error. PyDict_GetItemRef where it
 * exists (3.13); before it, the GIL keeps the borrowed value alive. */
static inline int py_sl_dict_get(PyObject *d, PyObject *key, PyObject **out) {
#if PY_SL_API >= 0x030D0000
    return PyDict_GetItemRef(d, key, out);
#else
    *out = PyDict_GetItemWithError(d, key);
    Py_XINCREF(*out);
    return *out ? 1 : PyErr_Occurred() ? -1 : 0;
#endif
}
static inline int py_sl_dict_get_str(PyObject *d, const char *key, PyObject **out) {
#if PY_SL_API >= 0x030D0000
    return PyDict_GetItemStringRef(d, key, out);
#else
    PyObject *k = PyUnicode_FromString(key);
    if (!k) {
        *out = NULL;
        return -1;
    }
    int rc = py_sl_dict_get(d, k, out);
    Py_DECREF(k);
    return rc;
#endif
}

/* The raised exception as one object (traceback attached), taken off the
 * error indicator, so that threads can hand it over with one atomic
 * pointer. NULL when none is set. */
static inline PyObject *py_sl_err_take(void) {
#if PY_SL_API >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (!t)
        return NULL;
    PyErr_NormalizeException(&t, &v, &tb);
    if (v && tb)
        PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
#endif
}
/* Raise an exception object from py_sl_err_take (the reference is stolen). */
static inline void py_sl_err_give(PyObject *exc) {
#if PY_SL_API >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyObject *type = (PyObject *)Py_TYPE(exc);
    Py_INCREF(type);
    PyErr_Restore(type, exc, PyException_GetTraceback(exc));
#endif
}

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
extern PyTypeObject *PySlTensor_Type;
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

extern PyTypeObject *PySlReader_Type;
extern PyTypeObject *PySlWriter_Type;

/* Register the types of each file on the module. Return 0 or -1. */
int py_sl_tensor_init(PyObject *m);
int py_sl_record_init(PyObject *m);
int py_sl_pipeline_init(PyObject *m);
int py_sl_pack_init(PyObject *m);
int py_sl_ops_init(PyObject *m);
int py_sl_stager_init(PyObject *m);
int py_sl_transforms_init(PyObject *m); /* py_transforms.c (limited API) */

#endif
