/*
 * _sluice.c — the `sluice._sluice` extension module: exceptions and module
 * setup. Types live in py_tensor.c (batches as numpy/DLPack), py_record.c
 * (Reader, Writer) and py_pipeline.c (the running pipeline, pack).
 *
 * Rules every file here follows:
 *  1. The GIL is released around every engine call that reads files or waits
 *     (open, read, next batch, pack); no Python object is touched meanwhile.
 *  2. An engine failure becomes the sluice.Error subclass for its status,
 *     carrying sl_errmsg() — read on the same thread right after the call,
 *     because the message is thread-local.
 *  3. Memory handed to Python holds an sl_buffer reference, released when
 *     the last numpy array / torch tensor using it dies; the engine's pools
 *     outlive their pipeline until then.
 */
#include "pysluice.h"

static PyObject *exc_base;          /* sluice.Error */
static PyObject *exc_nomem;         /* OutOfMemory(Error, MemoryError) */
static PyObject *exc_invalid;       /* InvalidError(Error, ValueError) */
static PyObject *exc_io;            /* IOFailure(Error, OSError) */
static PyObject *exc_corrupt;       /* CorruptError */
static PyObject *exc_unsupported;   /* UnsupportedError */
static PyObject *exc_decode;        /* DecodeError */
static PyObject *exc_limit;         /* LimitError */
static PyObject *exc_canceled;      /* CanceledError */

PyObject *py_sl_exc_for(int rc) {
    switch (rc) {
    case SL_ENOMEM: return exc_nomem;
    case SL_EINVAL: return exc_invalid;
    case SL_EIO: return exc_io;
    case SL_ECORRUPT: return exc_corrupt;
    case SL_EUNSUPPORTED: return exc_unsupported;
    case SL_EDECODE: return exc_decode;
    case SL_ELIMIT: return exc_limit;
    case SL_ECANCELED: return exc_canceled;
    default: return exc_base;
    }
}

PyObject *py_sl_raise(int rc) {
    const char *msg = sl_errmsg();
    PyObject *cls = py_sl_exc_for(rc);
    /* One argument only: OSError with two would read it as (errno, strerror). */
    if (msg && *msg)
        PyErr_SetString(cls, msg);
    else
        PyErr_Format(cls, "%s", sl_status_str(rc));
    return NULL;
}

static PyObject *new_exc(PyObject *m, const char *name, const char *doc, PyObject *bases,
                         const char *status, int code) {
    char qual[64];
    snprintf(qual, sizeof qual, "sluice.%s", name);
    PyObject *dict = PyDict_New();
    if (!dict)
        return NULL;
    PyObject *s = PyUnicode_FromString(status), *c = PyLong_FromLong(code);
    if (!s || !c || PyDict_SetItemString(dict, "status", s) < 0 ||
        PyDict_SetItemString(dict, "code", c) < 0) {
        Py_XDECREF(s);
        Py_XDECREF(c);
        Py_DECREF(dict);
        return NULL;
    }
    Py_DECREF(s);
    Py_DECREF(c);
    PyObject *cls = PyErr_NewExceptionWithDoc(qual, doc, bases, dict);
    Py_DECREF(dict);
    if (!cls)
        return NULL;
    if (PyModule_AddObjectRef(m, name, cls) < 0) {
        Py_DECREF(cls);
        return NULL;
    }
    return cls;
}

static PyObject *sub_exc(PyObject *m, const char *name, const char *doc, PyObject *extra,
                         int rc) {
    PyObject *bases = extra ? PyTuple_Pack(2, exc_base, extra) : PyTuple_Pack(1, exc_base);
    if (!bases)
        return NULL;
    PyObject *cls = new_exc(m, name, doc, bases, sl_status_str(rc), rc);
    Py_DECREF(bases);
    return cls;
}

static int init_exceptions(PyObject *m) {
    exc_base = new_exc(m, "Error",
                       "Base class of every error raised by the sluice engine. The message is "
                       "the engine's one line naming file, record, op and cause; `status` is "
                       "the status name (\"SL_ECORRUPT\") and `code` its number.",
                       PyExc_Exception, "SL_ERROR", -1);
    if (!exc_base)
        return -1;
    exc_nomem = sub_exc(m, "OutOfMemory", "An allocation failed.", PyExc_MemoryError,
                        SL_ENOMEM);
    exc_invalid = sub_exc(m, "InvalidError",
                          "A bad argument, spec field or user value (also a ValueError).",
                          PyExc_ValueError, SL_EINVAL);
    exc_io = sub_exc(m, "IOFailure",
                     "The operating system failed a read or write (also an OSError).",
                     PyExc_OSError, SL_EIO);
    exc_corrupt = sub_exc(m, "CorruptError",
                          "The data is damaged: checksum, truncation or bad structure.", NULL,
                          SL_ECORRUPT);
    exc_unsupported = sub_exc(m, "UnsupportedError",
                              "A newer format version or a feature this build lacks.", NULL,
                              SL_EUNSUPPORTED);
    exc_decode = sub_exc(m, "DecodeError", "An image or payload could not be decoded.", NULL,
                         SL_EDECODE);
    exc_limit = sub_exc(m, "LimitError", "A size limit was hit (pixel cap, record size).",
                        NULL, SL_ELIMIT);
    exc_canceled = sub_exc(m, "CanceledError", "The operation was cancelled.", NULL,
                           SL_ECANCELED);
    if (!exc_nomem || !exc_invalid || !exc_io || !exc_corrupt || !exc_unsupported ||
        !exc_decode || !exc_limit || !exc_canceled)
        return -1;
    return 0;
}

/* _sluice._raise(code, message): raise the exception for a status code, so
 * the Python side maps its own argument checks onto the same classes. */
static PyObject *py_raise_status(PyObject *self, PyObject *args) {
    int code;
    const char *msg;
    if (!PyArg_ParseTuple(args, "is:_raise", &code, &msg))
        return NULL;
    PyErr_SetString(py_sl_exc_for(code), msg);
    return NULL;
}

static PyObject *py_set_log_level(PyObject *self, PyObject *arg) {
    const char *name = py_sl_utf8(arg);
    if (!name)
        return NULL;
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, names[i]) == 0) {
            sl_log_set_level((sl_log_level)i);
            Py_RETURN_NONE;
        }
    }
    PyErr_Format(PyExc_ValueError, "level: expected one of error|warn|info|debug, got '%s'",
                 name);
    return NULL;
}

/* A device kind's name ('cuda' or 'host') into *d: 0, or -1 with ValueError set. */
static int device_kind(const char *kind, sl_device *d) {
    if (strcmp(kind, "cuda") == 0)
        *d = SL_DEVICE_CUDA;
    else if (strcmp(kind, "host") == 0)
        *d = SL_DEVICE_CPU;
    else {
        PyErr_Format(PyExc_ValueError, "kind: expected 'cuda' or 'host', got '%s'", kind);
        return -1;
    }
    return 0;
}

static PyObject *py_device_available(PyObject *self, PyObject *args) {
    const char *kind;
    int id = 0;
    if (!PyArg_ParseTuple(args, "s|i:device_available", &kind, &id))
        return NULL;
    sl_device d;
    if (device_kind(kind, &d) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_device_available(d, id);
    Py_END_ALLOW_THREADS
    if (rc == SL_OK)
        Py_RETURN_NONE;
    return PyUnicode_FromString(sl_errmsg());
}

/* _sluice.device_held(kind): (device blocks, pinned blocks) sluice's
 * backends of that kind hold now, process-wide (sl_device_held). */
static PyObject *py_device_held(PyObject *self, PyObject *args) {
    const char *kind;
    if (!PyArg_ParseTuple(args, "s:device_held", &kind))
        return NULL;
    sl_device d;
    if (device_kind(kind, &d) < 0)
        return NULL;
    int64_t dev = 0, pinned = 0;
    sl_device_held(d, &dev, &pinned);
    return Py_BuildValue("(LL)", (long long)dev, (long long)pinned);
}

/* _sluice.check_op(json, index): the engine's check of one op's parameters
 * (sl_spec_check_op_json), so the builder's errors are the engine's own. */
static PyObject *py_check_op(PyObject *self, PyObject *args) {
    const char *json;
    int index;
    if (!PyArg_ParseTuple(args, "si:check_op", &json, &index))
        return NULL;
    int rc = sl_spec_check_op_json(json, index);
    if (rc < 0)
        return py_sl_raise(rc);
    Py_RETURN_NONE;
}

/* _sluice.spec_resolve_paths(json, spec_path): the spec's relative input
 * paths made relative to the spec file's folder (sl_spec_resolve_paths). */
static PyObject *py_spec_resolve_paths(PyObject *self, PyObject *args) {
    const char *json, *path;
    if (!PyArg_ParseTuple(args, "ss:spec_resolve_paths", &json, &path))
        return NULL;
    size_t len = 0;
    int rc = sl_spec_resolve_paths(json, path, NULL, 0, &len);
    if (rc < 0)
        return py_sl_raise(rc);
    char *buf = PyMem_Malloc(len + 1);
    if (!buf)
        return PyErr_NoMemory();
    rc = sl_spec_resolve_paths(json, path, buf, len + 1, &len);
    PyObject *out = rc < 0 ? py_sl_raise(rc) : PyUnicode_FromStringAndSize(buf, (Py_ssize_t)len);
    PyMem_Free(buf);
    return out;
}

const char *py_sl_tpname(PyObject *o, char *buf) {
    PyObject *t = (PyObject *)Py_TYPE(o);
    PyObject *mod = PyObject_GetAttrString(t, "__module__");
    PyObject *qual = mod ? PyObject_GetAttrString(t, "__qualname__") : NULL;
    const char *ms = mod && PyUnicode_Check(mod) ? py_sl_utf8(mod) : NULL;
    const char *qs = qual && PyUnicode_Check(qual) ? py_sl_utf8(qual) : NULL;
    if (!qs)
        snprintf(buf, 128, "?");
    else if (!ms || strcmp(ms, "builtins") == 0)
        snprintf(buf, 128, "%s", qs);
    else
        snprintf(buf, 128, "%s.%s", ms, qs);
    Py_XDECREF(mod);
    Py_XDECREF(qual);
    if (PyErr_Occurred())
        PyErr_Clear(); /* a name for a message: "?" rather than a second error */
    return buf;
}

/* _sluice.check_spec(json): the engine's check of a spec's own fields
 * (sl_spec_from_json; the source is opened, and ops checked, later). */
static PyObject *py_check_spec(PyObject *self, PyObject *arg) {
    const char *json = py_sl_utf8(arg);
    if (!json)
        return NULL;
    sl_spec *spec = NULL;
    int rc = sl_spec_from_json(&spec, json);
    sl_spec_free(spec);
    if (rc < 0)
        return py_sl_raise(rc);
    Py_RETURN_NONE;
}

/* One row of sluice's tables as a dict (None for a value not set). */
static PyObject *setting_dict(const sl_setting_info *s, const char *kind) {
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    const char *keys[] = {"name", "kind", "type", "range", "default", "layer", "doc"};
    const char *vals[] = {s->name, kind, s->type, s->range, s->default_value, s->layer, s->doc};
    for (int i = 0; i < 7; i++) {
        PyObject *v = PyUnicode_FromString(vals[i]);
        if (!v || PyDict_SetItemString(d, keys[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    PyObject *v = s->value ? PyUnicode_FromString(s->value) : Py_NewRef(Py_None);
    if (!v || PyDict_SetItemString(d, "value", v) < 0) {
        Py_XDECREF(v);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(v);
    return d;
}

/* _sluice.settings(): every SLUICE_* setting (kind "setting", its value from
 * the environment or None) and every spec parameter (kind "spec"), from the
 * library's tables (sl_setting_get, sl_spec_param_get): what `sluice env
 * --json` prints, for Python's defaults and checks to come from. */
static PyObject *py_settings(PyObject *self, PyObject *unused) {
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? sl_spec_param_count() : sl_setting_count();
        for (int i = 0; i < n; i++) {
            sl_setting_info s;
            int rc = pass ? sl_spec_param_get(i, &s) : sl_setting_get(i, &s);
            if (rc < 0) {
                Py_DECREF(out);
                return py_sl_raise(rc);
            }
            PyObject *d = setting_dict(&s, pass ? "spec" : "setting");
            if (!d || PyList_Append(out, d) < 0) {
                Py_XDECREF(d);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(d);
        }
    }
    return out;
}

static PyMethodDef module_methods[] = {
    {"settings", py_settings, METH_NOARGS,
     "settings() -> [dict]: every SLUICE_* setting and spec parameter (sluice env --json)."},
    {"spec_resolve_paths", py_spec_resolve_paths, METH_VARARGS,
     "spec_resolve_paths(json, spec_path) -> json with relative input paths resolved"},
    {"check_op", py_check_op, METH_VARARGS,
     "check_op(json, index): raise the engine's error for a bad op, else None."},
    {"check_spec", py_check_spec, METH_O,
     "check_spec(json): raise the engine's error for a bad spec field, else None."},
    {"device_available", py_device_available, METH_VARARGS,
     "device_available(kind, id=0): None when the device can be used, else why not (a string)."},
    {"device_held", py_device_held, METH_VARARGS,
     "device_held(kind): (device blocks, pinned blocks) sluice's device backends hold now."},
    {"_raise", py_raise_status, METH_VARARGS, "Raise the sluice.Error subclass for a code."},
    {"set_log_level", py_set_log_level, METH_O,
     "set_log_level(level): engine log verbosity, one of 'error', 'warn', 'info', 'debug'."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "sluice._sluice",
    "The C extension behind `import sluice`: the sluice engine's record reader and writer, "
    "pipeline and zero-copy batch tensors. Use the `sluice` package, not this module.",
    -1, module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__sluice(void);
PyMODINIT_FUNC PyInit__sluice(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (init_exceptions(m) < 0 || py_sl_tensor_init(m) < 0 || py_sl_record_init(m) < 0 ||
        py_sl_pipeline_init(m) < 0 || py_sl_pack_init(m) < 0 || py_sl_ops_init(m) < 0 ||
        py_sl_stager_init(m) < 0 || py_sl_transforms_init(m) < 0 ||
        PyModule_AddStringConstant(m, "__version__", sl_version_string()) < 0 ||
        PyModule_AddIntConstant(m, "version_number", (long)sl_version_number()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#ifdef Py_GIL_DISABLED
    /* Free-threaded builds (3.13t): nothing here relies on the GIL (the
     * audit in docs/PYTHON.md, "Free-threaded Python"), so importing the
     * module does not turn the GIL back on. Single-phase initialisation:
     * this call, not the Py_mod_gil slot. */
    if (PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
