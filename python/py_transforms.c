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

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- a file read into this thread's buffer --------------------------------
 *
 * Compose's fused decode of a path reads the file here, without the GIL,
 * into a buffer each thread keeps (as it keeps its decoder), and decodes it
 * from there in the second call: no Python file object, no bytes object of
 * the file's size made and freed a sample (whose memory, at the size of a
 * JPEG, glibc hands back and faults in again). Hand-written with POSIX
 * read(2) because the library's file layer is internal to libsluice and
 * this file uses sluice.h alone. Each read gets a new token; the decode call
 * names the token it expects and reads the file again if the buffer holds
 * another read by then (a transform run from a finalizer, say). */
typedef struct read_buf {
    char *p;
    size_t cap, n;
    unsigned long long token;
} read_buf;

static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;
static int buf_key_rc;

static void buf_free(void *v) {
    read_buf *b = v;
    free(b->p);
    free(b);
}
static void buf_make_key(void) { buf_key_rc = pthread_key_create(&buf_key, buf_free); }

/* Tokens are unique across threads: a token can only match the read it
 * came from. */
static atomic_ullong next_token;

/* A buffer kept larger than this is given back before a smaller file. */
#define KEEP_BYTES ((size_t)16 << 20)

static read_buf *thread_buf(void) {
    pthread_once(&buf_once, buf_make_key);
    if (buf_key_rc != 0)
        return NULL;
    read_buf *b = pthread_getspecific(buf_key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (b && pthread_setspecific(buf_key, b) != 0) {
            free(b);
            b = NULL;
        }
    }
    return b;
}

static int buf_reserve(read_buf *b, size_t need) {
    if (b->cap > KEEP_BYTES && need <= KEEP_BYTES && b->n == 0) {
        free(b->p);
        b->p = NULL, b->cap = 0;
    }
    if (need <= b->cap)
        return 0;
    char *p = realloc(b->p, need < 4096 ? 4096 : need);
    if (!p)
        return -1;
    b->p = p, b->cap = need < 4096 ? 4096 : need;
    return 0;
}

/* Read `path` whole into b (no GIL): 0, or -1 with *err an errno value. */
static int read_whole(read_buf *b, const char *path, int *err) {
    int fd;
    do
        fd = open(path, O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    struct stat st;
    /* one byte past the size: a file that grew is read on to its end */
    size_t want = fstat(fd, &st) == 0 && st.st_size > 0 ? (size_t)st.st_size + 1 : 65536;
    b->n = 0;
    int rc = 0;
    if (buf_reserve(b, want) < 0) {
        *err = ENOMEM, rc = -1;
    }
    while (rc == 0) {
        if (b->n == b->cap && buf_reserve(b, b->cap * 2) < 0) {
            *err = ENOMEM, rc = -1;
            break;
        }
        ssize_t r = read(fd, b->p + b->n, b->cap - b->n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            *err = errno, rc = -1;
        else if (r == 0)
            break;
        else
            b->n += (size_t)r;
    }
    close(fd);
    b->token = atomic_fetch_add(&next_token, 1) + 1;
    return rc;
}

/* An error about a file: OSError for errno `err`, else the status's
 * sluice.Error with the file's name in front of the cause. */
static PyObject *raise_for_file(PyObject *m, PyObject *path, int rc, int err) {
    if (err) {
        errno = err;
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
    }
    const char *msg = sl_errmsg();
    PyObject *text = PyUnicode_FromFormat("%U: %s", path, msg && *msg ? msg : sl_status_str(rc));
    if (!text)
        return NULL;
    PyObject *r = PyObject_CallMethod(m, "_raise", "iO", rc, text);
    Py_DECREF(text);
    Py_XDECREF(r);
    return NULL;
}

/* The path argument: the file system's bytes (for open) and the name as
 * str (for messages), or -1 with TypeError. */
static int path_from(PyObject *o, PyObject **fs, PyObject **name) {
    if (!PyUnicode_FSConverter(o, fs))
        return -1;
    if (!PyUnicode_FSDecoder(o, name)) {
        Py_CLEAR(*fs);
        return -1;
    }
    return 0;
}

/* read_info(path, exif, max_pixels) -> (height, width, channels, format,
 * token): the file read into this thread's buffer and its header read. */
static PyObject *tf_read_info(PyObject *m, PyObject *args) {
    PyObject *o, *fs = NULL, *name = NULL;
    int exif, err = 0;
    long long maxp;
    if (!PyArg_ParseTuple(args, "OpL:tf_read_info", &o, &exif, &maxp) ||
        path_from(o, &fs, &name) < 0)
        return NULL;
    const char *path = PyBytes_AsString(fs);
    sl_image_info info;
    unsigned long long token = 0;
    int rc = SL_OK;
    Py_BEGIN_ALLOW_THREADS
    read_buf *b = thread_buf();
    if (!b)
        err = ENOMEM, rc = -1;
    else if (read_whole(b, path, &err) < 0)
        rc = -1;
    else {
        sl_decoder *dec = NULL;
        token = b->token;
        rc = thread_decoder(&dec, exif, maxp);
        if (rc == SL_OK)
            rc = sl_decode_info(dec, b->p, b->n, &info);
    }
    Py_END_ALLOW_THREADS
    PyObject *r = rc < 0 ? raise_for_file(m, name, rc, err)
                         : Py_BuildValue("(iiiiK)", info.height, info.width, info.channels,
                                         info.format, token);
    Py_DECREF(fs);
    Py_DECREF(name);
    return r;
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

/* decode(data, dst, box4, lim4, interp, mean, std, flags, exif, max_pixels
 * [, token]): data is bytes, (address, length), or with a token the path
 * tf_read_info read into this thread's buffer (read again if the buffer
 * holds another read now). */
static PyObject *tf_decode(PyObject *m, PyObject *args) {
    PyObject *o, *b, *mo, *so, *tok = NULL;
    double box[4];
    int lim[4], interp, flags, exif;
    long long maxp;
    const char *p = NULL;
    Py_ssize_t n = 0;
    sl_image_view d;
    float mb[4], sb[4];
    const float *mean, *std;
    if (!PyArg_ParseTuple(args, "OO(dddd)(iiii)iOOipL|O:tf_decode", &o, &b, &box[0], &box[1],
                          &box[2], &box[3], &lim[0], &lim[1], &lim[2], &lim[3], &interp, &mo,
                          &so, &flags, &exif, &maxp, &tok) ||
        (!tok && bytes_from(o, &p, &n) < 0) || view_from(b, &d) < 0 ||
        floats_from(mo, mb, &mean, "mean") < 0 || floats_from(so, sb, &std, "std") < 0)
        return NULL;
    if (!tok)
        CALL_WITHOUT_GIL(m, decode_into(p, n, box, lim, interp, mean, std, flags, exif, maxp, &d));
    unsigned long long token = PyLong_AsUnsignedLongLong(tok);
    PyObject *fs = NULL, *name = NULL;
    if ((token == (unsigned long long)-1 && PyErr_Occurred()) || path_from(o, &fs, &name) < 0)
        return NULL;
    const char *path = PyBytes_AsString(fs);
    int rc = SL_OK, err = 0;
    Py_BEGIN_ALLOW_THREADS
    read_buf *rb = thread_buf();
    if (!rb)
        err = ENOMEM, rc = -1;
    else if (rb->token != token && read_whole(rb, path, &err) < 0)
        rc = -1;
    else
        rc = decode_into(rb->p, (Py_ssize_t)rb->n, box, lim, interp, mean, std, flags, exif,
                         maxp, &d);
    Py_END_ALLOW_THREADS
    PyObject *r = rc < 0 ? raise_for_file(m, name, rc, err) : Py_NewRef(Py_None);
    Py_DECREF(fs);
    Py_DECREF(name);
    return r;
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
    {"tf_read_info", tf_read_info, METH_VARARGS,
     "read a file into this thread's buffer: (h, w, channels, format, token)"},
    {"tf_decode", tf_decode, METH_VARARGS,
     "sl_view_decode(data, dst, box, lim, interp, mean, std, flags, exif, max_pixels[, token])"},
    {NULL, NULL, 0, NULL}};

/* Registered by _sluice.c's module init (declared in pysluice.h). */
int py_sl_transforms_init(PyObject *m);
int py_sl_transforms_init(PyObject *m) {
    return PyModule_AddFunctions(m, transforms_methods);
}
