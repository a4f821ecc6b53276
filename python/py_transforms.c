/*
 * py_transforms.c — the C calls behind sluice.transforms (python/sluice/
 * transforms.py): one function per sl_view_* kernel of sluice.h.
 *
 * Written to CPython's limited API (3.10), so it needs nothing of the
 * interpreter's internals: images cross as integers and tuples, not as
 * objects. transforms.py, the only caller, passes each image as a tuple
 * (address, dtype, h, w, c, stride_h, stride_w, stride_c) taken from the
 * torch tensor or numpy array it holds a reference to for the whole call,
 * and allocates every output itself (torch.empty, numpy.empty), so no
 * Python object is made or touched here while the GIL is released, and the
 * module keeps no state. The free-threaded build (3.13t) has no limited
 * API; there the same code compiles against the full one.
 *
 * Every call releases the GIL around the kernel (docs/PYTHON.md,
 * "sluice.transforms"). Decoding uses the calling thread's sl_decoder
 * (py_decoder.c).
 */
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && !defined(Py_LIMITED_API)
#define Py_LIMITED_API 0x030a0000 /* also when built outside python/CMakeLists.txt */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "py_decoder.h"
#include "sluice.h"

#include <string.h>

/* The sluice.Error subclasses: _sluice.c's own mapping, reached through the
 * module's _raise function so that this file needs no internal header. */
static PyObject *raise_status(PyObject *module, int rc) {
    const char *msg = sl_errmsg();
    PyObject *fn = PyObject_GetAttrString(module, "_raise");
    if (!fn)
        return NULL;
    PyObject *r = PyObject_CallFunction(fn, "is", rc, msg && *msg ? msg : sl_status_str(rc));
    Py_DECREF(fn);
    Py_XDECREF(r);
    return NULL;
}

/* Run `call` (an sl_status expression) without the GIL; return None, or
 * raise its error. Every function below ends with it. */
#define CALL_WITHOUT_GIL(m, call)                                                             \
    do {                                                                                      \
        int rc_;                                                                              \
        Py_BEGIN_ALLOW_THREADS                                                                \
        rc_ = (call);                                                                         \
        Py_END_ALLOW_THREADS                                                                  \
        if (rc_ < 0)                                                                          \
            return raise_status((m), rc_);                                                    \
        Py_RETURN_NONE;                                                                       \
    } while (0)

/* (address, dtype, h, w, c, sh, sw, sc) -> view; -1 with TypeError. */
static int view_from(PyObject *t, sl_image_view *v) {
    unsigned long long addr;
    int dtype, h, w, c;
    long long sh, sw, sc;
    if (!PyArg_ParseTuple(t, "KiiiiLLL;an image is (address, dtype, h, w, c, sh, sw, sc)", &addr,
                          &dtype, &h, &w, &c, &sh, &sw, &sc))
        return -1;
    v->data = (void *)(uintptr_t)addr;
    v->dtype = dtype;
    v->h = h, v->w = w, v->c = c;
    v->sh = sh, v->sw = sw, v->sc = sc;
    return 0;
}

/* Up to 4 floats from a sequence (or None: *out NULL). */
static int floats_from(PyObject *o, float buf[4], const float **out, const char *what) {
    *out = NULL;
    if (o == Py_None)
        return 0;
    PyObject *seq = PySequence_Tuple(o);
    if (!seq)
        return -1;
    Py_ssize_t n = PyTuple_Size(seq);
    if (n < 1 || n > 4) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s: expected 1 to 4 values, got %zd", what, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < 4; i++) {
        PyObject *item = PyTuple_GetItem(seq, i < n ? i : n - 1);
        double d = item ? PyFloat_AsDouble(item) : -1.0;
        if (d == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        buf[i] = (float)d;
    }
    Py_DECREF(seq);
    *out = buf;
    return 0;
}

/* convert(src, dst, flags) */
static PyObject *tf_convert(PyObject *m, PyObject *args) {
    PyObject *a, *b;
    int flags;
    sl_image_view s, d;
    if (!PyArg_ParseTuple(args, "OOi:tf_convert", &a, &b, &flags) || view_from(a, &s) < 0 ||
        view_from(b, &d) < 0)
        return NULL;
    CALL_WITHOUT_GIL(m, sl_view_convert(&s, &d, flags));
}

/* normalize(src, dst, mean, std, flags) */
static PyObject *tf_normalize(PyObject *m, PyObject *args) {
    PyObject *a, *b, *mo, *so;
    int flags;
    sl_image_view s, d;
    float mb[4], sb[4];
    const float *mean, *std;
    if (!PyArg_ParseTuple(args, "OOOOi:tf_normalize", &a, &b, &mo, &so, &flags) ||
        view_from(a, &s) < 0 || view_from(b, &d) < 0 || floats_from(mo, mb, &mean, "mean") < 0 ||
        floats_from(so, sb, &std, "std") < 0)
        return NULL;
    CALL_WITHOUT_GIL(m, sl_view_normalize(&s, &d, mean, std, flags));
}

/* resize(src, dst, interp, antialias) */
static PyObject *tf_resize(PyObject *m, PyObject *args) {
    PyObject *a, *b;
    int interp, aa;
    sl_image_view s, d;
    if (!PyArg_ParseTuple(args, "OOii:tf_resize", &a, &b, &interp, &aa) ||
        view_from(a, &s) < 0 || view_from(b, &d) < 0)
        return NULL;
    CALL_WITHOUT_GIL(m, sl_view_resize(&s, &d, (sl_interp)interp, aa));
}

/* adjust(src, dst, op, factor) */
static PyObject *tf_adjust(PyObject *m, PyObject *args) {
    PyObject *a, *b;
    int op;
    double factor;
    sl_image_view s, d;
    if (!PyArg_ParseTuple(args, "OOid:tf_adjust", &a, &b, &op, &factor) ||
        view_from(a, &s) < 0 || view_from(b, &d) < 0)
        return NULL;
    CALL_WITHOUT_GIL(m, sl_view_adjust(&s, &d, (sl_adjust)op, factor));
}

/* pad(src, dst, top, left, mode, fill) */
static PyObject *tf_pad(PyObject *m, PyObject *args) {
    PyObject *a, *b, *fo;
    int top, left, mode;
    sl_image_view s, d;
    float fb[4];
    const float *fill;
    if (!PyArg_ParseTuple(args, "OOiiiO:tf_pad", &a, &b, &top, &left, &mode, &fo) ||
        view_from(a, &s) < 0 || view_from(b, &d) < 0 || floats_from(fo, fb, &fill, "fill") < 0)
        return NULL;
    CALL_WITHOUT_GIL(m, sl_view_pad(&s, &d, top, left, (sl_pad_mode)mode, fill));
}

/* fill(dst, value) */
static PyObject *tf_fill(PyObject *m, PyObject *args) {
    PyObject *b, *fo;
    sl_image_view d;
    float fb[4];
    const float *fill;
    if (!PyArg_ParseTuple(args, "OO:tf_fill", &b, &fo) || view_from(b, &d) < 0 ||
        floats_from(fo, fb, &fill, "value") < 0)
        return NULL;
    CALL_WITHOUT_GIL(m, sl_view_fill(&d, fill));
}

/* affine(src, dst, matrix6, interp, fill) */
static PyObject *tf_affine(PyObject *m, PyObject *args) {
    PyObject *a, *b, *fo;
    float mat[6];
    int interp;
    sl_image_view s, d;
    float fb[4];
    const float *fill;
    if (!PyArg_ParseTuple(args, "OO(ffffff)iO:tf_affine", &a, &b, &mat[0], &mat[1], &mat[2],
                          &mat[3], &mat[4], &mat[5], &interp, &fo) ||
        view_from(a, &s) < 0 || view_from(b, &d) < 0 || floats_from(fo, fb, &fill, "fill") < 0)
        return NULL;
    CALL_WITHOUT_GIL(m, sl_view_affine(&s, &d, mat, (sl_interp)interp, fill));
}

/* ---- decoding ------------------------------------------------------------ */

/* This thread's decoder (py_decoder.c) with the call's settings. Runs
 * without the GIL. */
static int thread_decoder(sl_decoder **out, int exif, long long max_pixels) {
    int rc = py_sl_thread_decoder(out);
    if (rc == SL_OK)
        rc = sl_decoder_set(*out, SL_DECODE_EXIF_ORIENTATION, exif);
    if (rc == SL_OK)
        rc = sl_decoder_set(*out, SL_DECODE_MAX_PIXELS,
                            max_pixels > 0 ? (int64_t)max_pixels : (int64_t)64 * 1024 * 1024);
    return rc;
}

/* Decode into a view with this thread's decoder. */
static int decode_into(const char *p, Py_ssize_t n, const double box[4], const int lim[4],
                       int interp, const float *mean, const float *std, int flags, int exif,
                       long long maxp, const sl_image_view *d) {
    sl_decoder *dec = NULL;
    int rc = thread_decoder(&dec, exif, maxp);
    if (rc == SL_OK)
        rc = sl_view_decode(dec, p, (size_t)n, box, lim, (sl_interp)interp, mean, std, flags, d);
    return rc;
}

/* The encoded bytes: a bytes object, or (address, length) of memory the
 * caller keeps alive (a numpy view of a bytearray, memoryview, tensor). */
static int bytes_from(PyObject *o, const char **p, Py_ssize_t *n) {
    if (PyBytes_Check(o))
        return PyBytes_AsStringAndSize(o, (char **)p, n);
    unsigned long long addr;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(o, "Kn;encoded data is bytes or (address, length)", &addr, &len))
        return -1;
    *p = (const char *)(uintptr_t)addr;
    *n = len;
    return 0;
}

/* decode_info(data, exif, max_pixels) -> (height, width, channels, format) */
static PyObject *tf_decode_info(PyObject *m, PyObject *args) {
    PyObject *o;
    int exif;
    long long maxp;
    const char *p;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OpL:tf_decode_info", &o, &exif, &maxp) ||
        bytes_from(o, &p, &n) < 0)
        return NULL;
    sl_image_info info;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    sl_decoder *dec = NULL;
    rc = thread_decoder(&dec, exif, maxp);
    if (rc == SL_OK)
        rc = sl_decode_info(dec, p, (size_t)n, &info);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return raise_status(m, rc);
    return Py_BuildValue("(iiii)", info.height, info.width, info.channels, info.format);
}

/* decode(data, dst, box4, lim4, interp, mean, std, flags, exif, max_pixels) */
static PyObject *tf_decode(PyObject *m, PyObject *args) {
    PyObject *o, *b, *mo, *so;
    double box[4];
    int lim[4], interp, flags, exif;
    long long maxp;
    const char *p;
    Py_ssize_t n;
    sl_image_view d;
    float mb[4], sb[4];
    const float *mean, *std;
    if (!PyArg_ParseTuple(args, "OO(dddd)(iiii)iOOipL:tf_decode", &o, &b, &box[0], &box[1],
                          &box[2], &box[3], &lim[0], &lim[1], &lim[2], &lim[3], &interp, &mo,
                          &so, &flags, &exif, &maxp) ||
        bytes_from(o, &p, &n) < 0 || view_from(b, &d) < 0 ||
        floats_from(mo, mb, &mean, "mean") < 0 || floats_from(so, sb, &std, "std") < 0)
        return NULL;
    CALL_WITHOUT_GIL(m, decode_into(p, n, box, lim, interp, mean, std, flags, exif, maxp, &d));
}

static PyMethodDef transforms_methods[] = {
    {"tf_convert", tf_convert, METH_VARARGS, "sl_view_convert(src, dst, flags)"},
    {"tf_normalize", tf_normalize, METH_VARARGS, "sl_view_normalize(src, dst, mean, std, flags)"},
    {"tf_resize", tf_resize, METH_VARARGS, "sl_view_resize(src, dst, interp, antialias)"},
    {"tf_adjust", tf_adjust, METH_VARARGS, "sl_view_adjust(src, dst, op, factor)"},
    {"tf_pad", tf_pad, METH_VARARGS, "sl_view_pad(src, dst, top, left, mode, fill)"},
    {"tf_fill", tf_fill, METH_VARARGS, "sl_view_fill(dst, value)"},
    {"tf_affine", tf_affine, METH_VARARGS, "sl_view_affine(src, dst, matrix, interp, fill)"},
    {"tf_decode_info", tf_decode_info, METH_VARARGS,
     "sl_decode_info(data, exif, max_pixels) -> (h, w, channels, format)"},
    {"tf_decode", tf_decode, METH_VARARGS,
     "sl_view_decode(data, dst, box, lim, interp, mean, std, flags, exif, max_pixels)"},
    {NULL, NULL, 0, NULL}};

/* Registered by _sluice.c's module init (declared in pysluice.h). */
int py_sl_transforms_init(PyObject *m);
int py_sl_transforms_init(PyObject *m) {
    return PyModule_AddFunctions(m, transforms_methods);
}
