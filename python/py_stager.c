/*
 * py_stager.c — sluice._sluice.Stager: a batch of host arrays staged through
 * the device layer (sl_stager: pinned slots from the ring, the copy to the
 * device on its side stream). sluice.torch.DataLoader uses it for
 * pin_memory=True and device= (python/sluice/torch.py).
 *
 *   st = Stager("cuda", 0, to_device=False, depth=4)
 *   outs = st.stage([a, b, ...])   # objects with the buffer protocol
 *
 * Each output is a sluice Tensor (same dtype and shape) in the batch's slot;
 * torch.from_dlpack / numpy share it, and the slot is reused only after the
 * last of them is gone and its events have passed. The copies run with the
 * GIL released; the input buffers are held (PyObject_GetBuffer) until then.
 *
 * Threads: stage() may run from many threads at once (the engine serialises
 * taking a slot); __init__ publishes the engine stager once, through an
 * atomic state word, so no thread sees it half made.
 */
#include "pysluice.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { STAGER_NEW, STAGER_OPENING, STAGER_READY };

typedef struct {
    PyObject_HEAD
    atomic_int state;             /* STAGER_*: NEW -> OPENING (one __init__ claims it)
                                     -> READY (published) or back to NEW on failure */
    sl_stager *st;                /* these four: written before READY, read after it */
    int kind;                     /* sl_device */
    int id;
    int to_device;
} PySlStager;

/* The engine stager once __init__ has published it, else NULL. */
static sl_stager *stager_ready(PySlStager *self) {
    return atomic_load_explicit(&self->state, memory_order_acquire) == STAGER_READY ? self->st
                                                                                     : NULL;
}

static int stager_init(PySlStager *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"kind", "id", "to_device", "depth", NULL};
    const char *kind;
    int id = 0, to_device = 0, depth = 4;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|ipi:Stager", kwlist, &kind, &id,
                                     &to_device, &depth))
        return -1;
    /* Claimed first, so a second __init__ says so whatever its arguments. */
    int expect = STAGER_NEW;
    if (!atomic_compare_exchange_strong(&self->state, &expect, STAGER_OPENING)) {
        PyErr_SetString(PyExc_RuntimeError, "Stager: already initialised");
        return -1;
    }
    sl_device d;
    if (strcmp(kind, "cuda") == 0)
        d = SL_DEVICE_CUDA;
    else if (strcmp(kind, "host") == 0)
        d = SL_DEVICE_CPU;
    else {
        atomic_store(&self->state, STAGER_NEW);
        PyErr_Format(PyExc_ValueError, "Stager: kind: expected 'cuda' or 'host', got '%s'",
                     kind);
        return -1;
    }
    if (depth < 2 || depth > 64) {
        atomic_store(&self->state, STAGER_NEW);
        PyErr_Format(PyExc_ValueError, "Stager: depth: expected 2..64, got %d", depth);
        return -1;
    }
    sl_stager *st = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_stager_open(&st, d, id, to_device, depth);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        atomic_store(&self->state, STAGER_NEW);
        py_sl_raise(rc);
        return -1;
    }
    self->st = st;
    self->kind = (int)d;
    self->id = id;
    self->to_device = to_device;
    atomic_store_explicit(&self->state, STAGER_READY, memory_order_release);
    return 0;
}

static void stager_dealloc(PySlStager *self) {
    sl_stager *st = self->st;
    self->st = NULL;
    if (st) {
        /* Waits for copies in flight: not while holding the GIL. */
        Py_BEGIN_ALLOW_THREADS
        sl_stager_free(st);
        Py_END_ALLOW_THREADS
    }
    py_sl_free((PyObject *)self);
}

static PyObject *stager_stage(PySlStager *self, PyObject *arg) {
    sl_stager *st = stager_ready(self);
    if (!st) {
        PyErr_SetString(PyExc_RuntimeError, "Stager: not initialised");
        return NULL;
    }
    PyObject *seq = py_sl_sequence(arg, "Stager.stage: expected a list of arrays");
    if (!seq)
        return NULL;
    Py_ssize_t n = PyTuple_Size(seq);
    if (n > INT32_MAX / 2) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "Stager.stage: too many arrays");
        return NULL;
    }
    Py_buffer *views = calloc((size_t)(n ? n : 1), sizeof *views);
    sl_tensor *in = calloc((size_t)(n ? n : 1), sizeof *in);
    sl_tensor *out = calloc((size_t)(n ? n : 1), sizeof *out);
    PyObject *result = NULL;
    Py_ssize_t held = 0;
    if (!views || !in || !out) {
        PyErr_NoMemory();
        goto done;
    }
    for (; held < n; held++) {
        if (py_sl_tensor_from_buffer(PyTuple_GetItem(seq, held), &views[held],
                                     &in[held], "Stager.stage") < 0)
            goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_stager_stage(st, in, (int)n, out);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        py_sl_raise(rc);
        goto done;
    }
    result = PyList_New(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!result) {
            sl_tensor_release(&out[i]);
            continue;
        }
        PyObject *t = py_sl_tensor_from(&out[i]); /* takes out[i]'s reference */
        if (!t) {
            Py_CLEAR(result);
            continue;
        }
        PyList_SetItem(result, i, t);
    }
done:
    for (Py_ssize_t i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    free(views);
    free(in);
    free(out);
    Py_DECREF(seq);
    return result;
}

static PyObject *stager_set_stream(PySlStager *self, PyObject *arg) {
    sl_stager *st = stager_ready(self);
    if (!st) {
        PyErr_SetString(PyExc_RuntimeError, "Stager: not initialised");
        return NULL;
    }
    void *stream = NULL;
    if (arg != Py_None) {
        stream = PyLong_AsVoidPtr(arg);
        if (!stream && PyErr_Occurred())
            return NULL;
    }
    sl_stager_set_stream(st, stream);
    Py_RETURN_NONE;
}

static PyObject *stager_stats(PySlStager *self, PyObject *unused) {
    sl_stager_stats s;
    sl_stager_stats_get(stager_ready(self), &s); /* NULL: zeros */
    return Py_BuildValue("{s:K,s:K,s:K,s:d,s:i}", "batches", (unsigned long long)s.batches,
                         "staged_bytes", (unsigned long long)s.staged_bytes, "h2d_bytes",
                         (unsigned long long)s.h2d_bytes, "wait_s", s.wait_s, "slots",
                         (int)s.slots);
}

/* Before __init__ has published them, the fields read as their zero values. */
static PyObject *stager_repr(PySlStager *self) {
    int ready = stager_ready(self) != NULL;
    int kind = ready ? self->kind : 0, to_device = ready ? self->to_device : 0;
    return PyUnicode_FromFormat("sluice._sluice.Stager(%s, %d, to_device=%s)",
                                kind == SL_DEVICE_CUDA ? "'cuda'" : "'host'",
                                ready ? self->id : 0, to_device ? "True" : "False");
}

static PyObject *stager_get_kind(PySlStager *self, void *closure) {
    int kind = stager_ready(self) ? self->kind : 0;
    return PyUnicode_FromString(kind == SL_DEVICE_CUDA ? "cuda" : "host");
}
static PyObject *stager_get_id(PySlStager *self, void *closure) {
    return PyLong_FromLong(stager_ready(self) ? self->id : 0);
}
static PyObject *stager_get_to_device(PySlStager *self, void *closure) {
    return PyBool_FromLong(stager_ready(self) ? self->to_device : 0);
}

static PyMethodDef stager_methods[] = {
    {"stage", (PyCFunction)stager_stage, METH_O,
     "stage(arrays): copy a list of C-contiguous arrays (buffer protocol) into one pinned "
     "slot, and to the device with to_device; a list of Tensors of the same dtypes and "
     "shapes sharing the slot."},
    {"set_stream", (PyCFunction)stager_set_stream, METH_O,
     "set_stream(stream): the consumer stream (a cudaStream_t as an int; None: the default "
     "stream): copies are waited for there and release points recorded there."},
    {"stats", (PyCFunction)stager_stats, METH_NOARGS,
     "stats(): batches, staged_bytes, h2d_bytes, wait_s, slots."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef stager_getset[] = {
    {"kind", (getter)stager_get_kind, NULL, "'cuda' or 'host' (the host backend).", NULL},
    {"id", (getter)stager_get_id, NULL, "Device number.", NULL},
    {"to_device", (getter)stager_get_to_device, NULL,
     "True: tensors come back in device memory; False: in pinned host memory.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot stager_slots[] = {
    {Py_tp_dealloc, (void *)stager_dealloc},
    {Py_tp_repr, (void *)stager_repr},
    {Py_tp_doc, (void *)"Stager(kind, id=0, to_device=False, depth=4): host arrays staged "
                        "through sluice's device layer (a ring of pinned slots; with "
                        "to_device, copies to the device on its side stream). kind 'host' is "
                        "the host backend (tests)."},
    {Py_tp_methods, stager_methods},
    {Py_tp_getset, stager_getset},
    {Py_tp_init, (void *)stager_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {0, NULL}};

static PyType_Spec stager_spec = {"sluice._sluice.Stager", sizeof(PySlStager), 0,
                                  Py_TPFLAGS_DEFAULT, stager_slots};

int py_sl_stager_init(PyObject *m) {
    return py_sl_add_type(m, &stager_spec, "Stager") ? 0 : -1;
}
