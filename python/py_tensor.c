/*
 * py_tensor.c — sluice._sluice.Tensor: one engine tensor, seen by numpy
 * through the buffer protocol and by torch through DLPack, without a copy.
 *
 * Lifetime: the Tensor holds one sl_buffer reference. A numpy array made
 * from it references the Tensor (so the buffer lives while the array does).
 * A DLPack capsule takes a reference of its own, released by the DLPack
 * deleter — which torch may call on any thread, without the GIL, so the
 * deleter touches only the engine's thread-safe sl_buffer_release and libc.
 * When the last reference goes, a pooled buffer returns to its pool.
 */
#include "pysluice.h"

#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    sl_tensor t;                          /* t.buf: one reference, never NULL */
    Py_ssize_t shape[SL_MAX_DIMS];        /* for the buffer protocol */
    Py_ssize_t strides[SL_MAX_DIMS];
} PySlTensor;

static PyObject *np_asarray;              /* numpy.asarray, imported at init */

static const char *buffer_format(sl_dtype d) {
    switch (d) {
    case SL_U8: return "B";
    case SL_I8: return "b";
    case SL_U16: return "H";
    case SL_I16: return "h";
    case SL_U32: return "I";
    case SL_I32: return "i";
    case SL_U64: return "Q";
    case SL_I64: return "q";
    case SL_F16: return "e";
    case SL_F32: return "f";
    case SL_F64: return "d";
    case SL_BOOL: return "?";
    default: return NULL;
    }
}

PyObject *py_sl_tensor_from(sl_tensor *t) {
    if ((!buffer_format(t->dtype) && t->dtype != SL_BF16) || t->ndim < 0 ||
        t->ndim > SL_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "tensor: unsupported dtype %s or ndim %d",
                     sl_dtype_name(t->dtype), (int)t->ndim);
        sl_tensor_release(t);
        return NULL;
    }
    if (!t->buf) {
        /* A borrowed view cannot outlive whatever it borrows from: copy. */
        sl_tensor owned;
        memset(&owned, 0, sizeof owned);
        int rc = sl_tensor_copy(&owned, t);
        if (rc < 0)
            return py_sl_raise(rc);
        *t = owned;
    }
    PySlTensor *self = PyObject_New(PySlTensor, PySlTensor_Type);
    if (!self) {
        sl_tensor_release(t);
        return NULL;
    }
    self->t = *t;
    memset(t, 0, sizeof *t);
    Py_ssize_t stride = (Py_ssize_t)sl_dtype_size(self->t.dtype);
    for (int i = self->t.ndim - 1; i >= 0; i--) {
        self->shape[i] = (Py_ssize_t)self->t.shape[i];
        self->strides[i] = stride;
        stride *= (Py_ssize_t)self->t.shape[i];
    }
    return (PyObject *)self;
}

PyObject *py_sl_tensor_numpy(PyObject *tensor_obj) {
    /* numpy.asarray would wrap an object it cannot read as a buffer in a 0-d
     * object array: say why instead. */
    if (PyObject_TypeCheck(tensor_obj, PySlTensor_Type)) {
        const sl_tensor *t = &((PySlTensor *)tensor_obj)->t;
        if (!buffer_format(t->dtype)) {
            PyErr_Format(PyExc_BufferError, "tensor has dtype %s, which numpy cannot express; "
                         "use torch.from_dlpack (or ds.torch())", sl_dtype_name(t->dtype));
            return NULL;
        }
    }
    return PyObject_CallFunctionObjArgs(np_asarray, tensor_obj, NULL);
}

static void tensor_dealloc(PySlTensor *self) {
    sl_tensor_release(&self->t);
    py_sl_free((PyObject *)self);
}

/* ---- buffer protocol ----------------------------------------------------- */

static int tensor_getbuffer(PySlTensor *self, Py_buffer *view, int flags) {
    if (self->t.device != SL_DEVICE_CPU && self->t.device != SL_DEVICE_CUDA_HOST) {
        PyErr_Format(PyExc_BufferError, "tensor lives on device %d:%d (not host memory); use "
                     "torch.from_dlpack", (int)self->t.device, (int)self->t.device_id);
        view->obj = NULL;
        return -1;
    }
    if (!buffer_format(self->t.dtype)) {
        /* numpy and the buffer protocol have no bfloat16 */
        PyErr_Format(PyExc_BufferError, "tensor has dtype %s, which numpy and the buffer "
                     "protocol cannot express; use torch.from_dlpack (or ds.torch())",
                     sl_dtype_name(self->t.dtype));
        view->obj = NULL;
        return -1;
    }
    view->buf = self->t.data;
    view->obj = Py_NewRef((PyObject *)self);
    view->len = (Py_ssize_t)self->t.nbytes;
    view->readonly = 0;
    view->itemsize = (Py_ssize_t)sl_dtype_size(self->t.dtype);
    view->format = (flags & PyBUF_FORMAT) ? (char *)buffer_format(self->t.dtype) : NULL;
    view->ndim = (int)self->t.ndim;
    view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}


/* ---- DLPack ------------------------------------------------------------- */

typedef struct {
    DLManagedTensor managed;
    int64_t shape[SL_MAX_DIMS];
    sl_buffer *buf;
} dl_ctx;

static void dl_deleter(DLManagedTensor *m) {
    dl_ctx *c = (dl_ctx *)m->manager_ctx;
    sl_buffer_release(c->buf);
    free(c);
}

static void dl_capsule_destructor(PyObject *cap) {
    /* A consumer renames the capsule "used_dltensor" and owns the deleter from
     * then on; an unconsumed one is still ours to free. */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        m->deleter(m);
    }
}

static int dl_dtype(sl_dtype d, DLDataType *out) {
    out->lanes = 1;
    out->bits = (uint8_t)(sl_dtype_size(d) * 8);
    switch (d) {
    case SL_I8: case SL_I16: case SL_I32: case SL_I64: out->code = kDLInt; return 0;
    /* DLPack 0.6 has no bool code; bools travel as 8-bit unsigned. */
    case SL_BOOL:
    case SL_U8: case SL_U16: case SL_U32: case SL_U64: out->code = kDLUInt; return 0;
    case SL_F16: case SL_F32: case SL_F64: out->code = kDLFloat; return 0;
    case SL_BF16: out->code = kDLBfloat; return 0;
    default: return -1;
    }
}

/* Pinned host memory (SL_DEVICE_CUDA_HOST, a Stager's pinned slots) goes out
 * as kDLCUDAHost where the consumer in use takes it, else as kDLCPU: torch
 * 1.13's from_dlpack refuses kDLCUDAHost ("Unsupported device_type: 3"),
 * later torch reads it as CPU memory, and it is CPU memory to every consumer.
 * The choice is the process's: kDLCPU until sluice.dlpack_for_torch() (run
 * before sluice hands torch its first tensor) finds, by handing torch a probe
 * capsule (dlpack_probe), that the torch in use takes kDLCUDAHost. Whether
 * the memory is pinned, torch asks the CUDA runtime either way
 * (Tensor.is_pinned(): cudaPointerGetAttributes on the data pointer), so the
 * tensor reports is_pinned() True on a machine with a GPU. */
static _Atomic int dl_pinned_type = kDLCPU;

static DLDeviceType dl_device_type(int32_t device) {
    if (device == SL_DEVICE_CUDA_HOST)
        return (DLDeviceType)atomic_load_explicit(&dl_pinned_type, memory_order_relaxed);
    return (DLDeviceType)device;
}

static PyObject *tensor_dlpack(PySlTensor *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"stream", NULL};
    PyObject *stream = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:__dlpack__", kwlist, &stream))
        return NULL;
    /* CPU and pinned host memory need no stream synchronisation. A CUDA
     * tensor of a device batch: the consumer's stream waits for the copy that
     * filled it (DLPack: None is the legacy default stream, 1; -1 asks for no
     * synchronisation; any other value is a cudaStream_t), and the batch's
     * release point is recorded on that stream. */
    if (self->t.device == SL_DEVICE_CUDA) {
        long long s = 1;
        if (stream != Py_None) {
            s = PyLong_AsLongLong(stream);
            if (s == -1 && PyErr_Occurred())
                return NULL;
            if (s == 0) {
                PyErr_SetString(PyExc_ValueError, "__dlpack__: stream 0 is ambiguous for CUDA "
                                                  "(use 1 for the legacy default stream)");
                return NULL;
            }
        }
        if (s != -1) {
            int rc;
            Py_BEGIN_ALLOW_THREADS
            rc = sl_tensor_stream_wait(&self->t, (void *)(intptr_t)s);
            Py_END_ALLOW_THREADS
            if (rc < 0)
                return py_sl_raise(rc);
        }
    }
    dl_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return PyErr_NoMemory();
    DLTensor *dl = &c->managed.dl_tensor;
    if (dl_dtype(self->t.dtype, &dl->dtype) < 0) {
        free(c);
        PyErr_Format(PyExc_TypeError, "__dlpack__: dtype %s has no DLPack equivalent",
                     sl_dtype_name(self->t.dtype));
        return NULL;
    }
    for (int i = 0; i < self->t.ndim; i++)
        c->shape[i] = self->t.shape[i];
    dl->data = self->t.data;
    dl->device.device_type = dl_device_type(self->t.device);
    dl->device.device_id = self->t.device_id;
    dl->ndim = self->t.ndim;
    dl->shape = c->shape;
    dl->strides = NULL; /* compact row-major */
    dl->byte_offset = 0;
    c->buf = sl_buffer_retain(self->t.buf);
    c->managed.manager_ctx = c;
    c->managed.deleter = dl_deleter;
    PyObject *cap = PyCapsule_New(&c->managed, "dltensor", dl_capsule_destructor);
    if (!cap)
        dl_deleter(&c->managed);
    return cap;
}

static PyObject *tensor_dlpack_device(PySlTensor *self, PyObject *unused) {
    return Py_BuildValue("(ii)", (int)dl_device_type(self->t.device), (int)self->t.device_id);
}

static PyObject *tensor_numpy(PySlTensor *self, PyObject *unused) {
    return py_sl_tensor_numpy((PyObject *)self);
}

static PyObject *tensor_get_shape(PySlTensor *self, void *closure) {
    PyObject *tup = PyTuple_New(self->t.ndim);
    if (!tup)
        return NULL;
    for (int i = 0; i < self->t.ndim; i++) {
        PyObject *v = PyLong_FromLongLong(self->t.shape[i]);
        if (!v) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SetItem(tup, i, v);
    }
    return tup;
}

static PyObject *tensor_get_dtype(PySlTensor *self, void *closure) {
    return PyUnicode_FromString(sl_dtype_name(self->t.dtype));
}
static PyObject *tensor_get_ndim(PySlTensor *self, void *closure) {
    return PyLong_FromLong(self->t.ndim);
}
static PyObject *tensor_get_nbytes(PySlTensor *self, void *closure) {
    return PyLong_FromSize_t(self->t.nbytes);
}
static PyObject *tensor_get_data_ptr(PySlTensor *self, void *closure) {
    return PyLong_FromVoidPtr(self->t.data);
}
static PyObject *tensor_get_refcount(PySlTensor *self, void *closure) {
    return PyLong_FromUnsignedLong(sl_buffer_refcount(self->t.buf));
}

static PyObject *tensor_repr(PySlTensor *self) {
    PyObject *shape = tensor_get_shape(self, NULL);
    if (!shape)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("sluice.Tensor(shape=%R, dtype=%s)", shape,
                                       sl_dtype_name(self->t.dtype));
    Py_DECREF(shape);
    return r;
}

static PyMethodDef tensor_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None): a DLPack capsule sharing this tensor's memory."},
    {"__dlpack_device__", (PyCFunction)tensor_dlpack_device, METH_NOARGS,
     "(device_type, device_id) as DLPack numbers (1 = CPU)."},
    {"numpy", (PyCFunction)tensor_numpy, METH_NOARGS, "A numpy array sharing the memory."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef tensor_getset[] = {
    {"shape", (getter)tensor_get_shape, NULL, "Shape as a tuple.", NULL},
    {"dtype", (getter)tensor_get_dtype, NULL, "Element type name ('uint8', 'float32').", NULL},
    {"ndim", (getter)tensor_get_ndim, NULL, "Number of dimensions.", NULL},
    {"nbytes", (getter)tensor_get_nbytes, NULL, "Size of the data in bytes.", NULL},
    {"data_ptr", (getter)tensor_get_data_ptr, NULL, "Address of the first element.", NULL},
    {"_buffer_refcount", (getter)tensor_get_refcount, NULL,
     "References held on the engine buffer (tests).", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject *PySlTensor_Type;

static PyType_Slot tensor_slots[] = {
    {Py_tp_dealloc, (void *)tensor_dealloc},
    {Py_tp_repr, (void *)tensor_repr},
    {Py_bf_getbuffer, (void *)(getbufferproc)tensor_getbuffer},
    {Py_tp_doc, (void *)"A tensor produced by the sluice engine. numpy.asarray(t) and "
                        "torch.from_dlpack(t) share its memory; the memory stays valid while "
                        "any of them lives."},
    {Py_tp_methods, tensor_methods},
    {Py_tp_getset, tensor_getset},
    {0, NULL}};

static PyType_Spec tensor_spec = {"sluice.Tensor", sizeof(PySlTensor), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                  tensor_slots};

/* ---- Python buffers in (Writer) ------------------------------------------ */

static sl_dtype dtype_of_format(const char *fmt, Py_ssize_t itemsize) {
    if (!fmt)
        return SL_U8;
    if (*fmt == '@' || *fmt == '=' || *fmt == '<')
        fmt++;
    if (fmt[0] == '\0' || fmt[1] != '\0')
        return SL_DTYPE_INVALID;
    switch (fmt[0]) {
    case 'b': case 'h': case 'i': case 'l': case 'q':
        return itemsize == 1 ? SL_I8 : itemsize == 2 ? SL_I16 : itemsize == 4 ? SL_I32
             : itemsize == 8 ? SL_I64 : SL_DTYPE_INVALID;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'c':
        return itemsize == 1 ? SL_U8 : itemsize == 2 ? SL_U16 : itemsize == 4 ? SL_U32
             : itemsize == 8 ? SL_U64 : SL_DTYPE_INVALID;
    case 'e': return SL_F16;
    case 'f': return SL_F32;
    case 'd': return SL_F64;
    case '?': return SL_BOOL;
    default: return SL_DTYPE_INVALID;
    }
}

int py_sl_tensor_from_buffer(PyObject *obj, Py_buffer *view, sl_tensor *out, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s: expected a C-contiguous array or bytes-like object, got %.100s", what,
                     PY_SL_TPNAME(obj));
        return -1;
    }
    sl_dtype dt = dtype_of_format(view->format, view->itemsize);
    if (dt == SL_DTYPE_INVALID || view->ndim > SL_MAX_DIMS) {
        PyErr_Format(PyExc_TypeError, "%s: unsupported element format '%s' or ndim %d", what,
                     view->format ? view->format : "B", view->ndim);
        PyBuffer_Release(view);
        return -1;
    }
    int64_t shape[SL_MAX_DIMS];
    int ndim = view->ndim;
    if (ndim == 0 && view->len != view->itemsize) {
        ndim = 1; /* a bytes-like object with no shape: 1-D */
        shape[0] = view->len / (view->itemsize ? view->itemsize : 1);
    }
    for (int i = 0; i < view->ndim; i++)
        shape[i] = view->shape ? (int64_t)view->shape[i] : (int64_t)(view->len / view->itemsize);
    sl_tensor_view(out, view->buf, dt, ndim, shape);
    return 0;
}

/* ---- The pinned-host device type, and the probe that chooses it ---------- */

static PyObject *py_dlpack_pinned_device(PyObject *unused, PyObject *args) {
    int code = -1;
    if (!PyArg_ParseTuple(args, "|i:dlpack_pinned_device", &code))
        return NULL;
    if (code != -1) {
        if (code != kDLCPU && code != kDLCUDAHost) {
            PyErr_Format(PyExc_ValueError, "dlpack_pinned_device: %d is neither kDLCPU (1) nor "
                                           "kDLCUDAHost (3)", code);
            return NULL;
        }
        atomic_store_explicit(&dl_pinned_type, code, memory_order_relaxed);
    }
    return PyLong_FromLong(atomic_load_explicit(&dl_pinned_type, memory_order_relaxed));
}

typedef struct {
    DLManagedTensor managed;
    int64_t shape[1];
    uint8_t data[4];
} dl_probe;

static void dl_probe_deleter(DLManagedTensor *m) {
    free(m->manager_ctx);
}

static void dl_probe_capsule_destructor(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        m->deleter(m);
    }
}

/* A DLPack capsule of 4 uint8 values 1, 2, 3, 4 in host memory, labelled
 * with the device type given: what a consumer does with it tells whether it
 * takes that type for host memory. */
static PyObject *py_dlpack_probe(PyObject *unused, PyObject *args) {
    int code;
    if (!PyArg_ParseTuple(args, "i:dlpack_probe", &code))
        return NULL;
    if (code != kDLCPU && code != kDLCUDAHost) {
        PyErr_Format(PyExc_ValueError, "dlpack_probe: %d is not a host device type (1 or 3)", code);
        return NULL;
    }
    dl_probe *p = calloc(1, sizeof *p);
    if (!p)
        return PyErr_NoMemory();
    for (int i = 0; i < 4; i++)
        p->data[i] = (uint8_t)(i + 1);
    p->shape[0] = 4;
    DLTensor *dl = &p->managed.dl_tensor;
    dl->data = p->data;
    dl->device.device_type = (DLDeviceType)code;
    dl->device.device_id = 0;
    dl->ndim = 1;
    dl->dtype.code = kDLUInt;
    dl->dtype.bits = 8;
    dl->dtype.lanes = 1;
    dl->shape = p->shape;
    p->managed.manager_ctx = p;
    p->managed.deleter = dl_probe_deleter;
    PyObject *cap = PyCapsule_New(&p->managed, "dltensor", dl_probe_capsule_destructor);
    if (!cap)
        free(p);
    return cap;
}

static PyMethodDef tensor_module_methods[] = {
    {"dlpack_pinned_device", py_dlpack_pinned_device, METH_VARARGS,
     "dlpack_pinned_device([code]): the DLPack device type pinned host memory is exported as "
     "(1 kDLCPU, 3 kDLCUDAHost); with code, set it first."},
    {"dlpack_probe", py_dlpack_probe, METH_VARARGS,
     "dlpack_probe(code): a DLPack capsule of uint8 [1, 2, 3, 4] in host memory labelled "
     "with device type code (1 or 3)."},
    {NULL, NULL, 0, NULL}};

int py_sl_tensor_init(PyObject *m) {
    if (PyModule_AddFunctions(m, tensor_module_methods) < 0)
        return -1;
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np)
        return -1;
    np_asarray = PyObject_GetAttrString(np, "asarray");
    Py_DECREF(np);
    if (!np_asarray)
        return -1;
    PySlTensor_Type = py_sl_add_type(m, &tensor_spec, "Tensor");
    return PySlTensor_Type ? 0 : -1;
}
