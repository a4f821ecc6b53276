/*
 * py_record.c — sluice.Reader (random access to a .slr dataset) and
 * sluice.Writer (write one from Python). Thin wrappers over the record API;
 * the GIL is released around every call that touches files.
 */
#include "pysluice.h"

#include <string.h>

static PyObject *np_ascontiguousarray;

/* ======================================================================== */
/* Reader                                                                   */
/* ======================================================================== */

typedef struct {
    PyObject_HEAD
    sl_reader *r;       /* replaced or freed only by a closer of `gate` */
    PyObject *path;     /* likewise */
    py_sl_gate gate;    /* every call using r is a user (reads run at once); close()
                           and a second __init__ are closers, refused while any is in */
} PySlReader;

/* Enter as a user of the engine reader: it stays valid until reader_leave. */
static sl_reader *reader_enter(PySlReader *self) {
    if (py_sl_gate_use(&self->gate) == 0) {
        if (self->r)
            return self->r;
        py_sl_gate_leave(&self->gate);
    }
    PyErr_SetString(PyExc_ValueError, "I/O operation on a closed sluice.Reader");
    return NULL;
}
static void reader_leave(PySlReader *self) { py_sl_gate_leave(&self->gate); }

static int reader_init(PySlReader *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"path", "verify", "mmap", NULL};
    PyObject *path_obj = NULL;
    int verify = 1, use_mmap = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|pp:Reader", kwlist,
                                     PyUnicode_FSConverter, &path_obj, &verify, &use_mmap))
        return -1;
    unsigned flags = (verify ? 0 : SL_READ_NO_VERIFY) | (use_mmap ? 0 : SL_READ_NO_MMAP);
    const char *path = PyBytes_AsString(path_obj);
    sl_reader *r = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_reader_open(&r, path, flags);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        /* Another kind of input (a tar shard, an ImageFolder, ...): name the
         * call that reads it rather than the .slr reader's complaint. */
        char keep[512];
        snprintf(keep, sizeof keep, "%s", sl_errmsg());
        const char *kind = NULL;
        if (rc != SL_ENOMEM && sl_source_detect((const char *const *)&path, 1, &kind) == SL_OK &&
            strcmp(kind, "path") != 0) {
            PyObject *u = PyUnicode_DecodeFSDefault(path);
            if (u && !strcmp(kind, "idx"))
                PyErr_Format(py_sl_exc_for(SL_EINVAL),
                             "%s: an IDX file, not a .slr dataset, so sluice.Reader cannot open "
                             "it; read it with sluice.idx(IMAGES, LABELS), or pack the pair: "
                             "sluice.pack([IMAGES, LABELS], 'OUT.slr')", path);
            else if (u)
                PyErr_Format(py_sl_exc_for(SL_EINVAL),
                             "%s: a %s input, not a .slr dataset, so sluice.Reader cannot open "
                             "it; read it with sluice.%s(%R), or pack it (sluice.pack(%R, "
                             "'OUT.slr')) and open that",
                             path, kind, kind, u, u);
            Py_XDECREF(u);
            Py_DECREF(path_obj);
            return -1;
        }
        Py_DECREF(path_obj);
        PyErr_SetString(py_sl_exc_for(rc), keep);
        return -1;
    }
    PyObject *upath = PyUnicode_DecodeFSDefault(path);
    Py_DECREF(path_obj);
    if (!upath) {
        sl_reader_free(r);
        return -1;
    }
    /* Opened again while another thread reads the old one: refuse rather
     * than free it under the read. */
    if (py_sl_gate_close_begin(&self->gate) < 0) {
        sl_reader_free(r);
        Py_DECREF(upath);
        PyErr_SetString(PyExc_RuntimeError, "sluice.Reader.__init__: a read is in progress");
        return -1;
    }
    sl_reader *old = self->r;
    PyObject *old_path = self->path;
    self->r = r;
    self->path = upath;
    py_sl_gate_close_end(&self->gate);
    sl_reader_free(old);
    Py_XDECREF(old_path);
    return 0;
}

static void reader_dealloc(PySlReader *self) {
    sl_reader_free(self->r);
    Py_XDECREF(self->path);
    py_sl_free((PyObject *)self);
}

static PyObject *reader_close(PySlReader *self, PyObject *unused) {
    int rc = py_sl_gate_close_begin(&self->gate);
    if (rc == -2)
        Py_RETURN_NONE; /* another thread is closing it */
    if (rc < 0) {
        PyErr_SetString(PyExc_RuntimeError, "sluice.Reader.close: a read is in progress");
        return NULL;
    }
    sl_reader *r = self->r;
    self->r = NULL;
    py_sl_gate_close_end(&self->gate);
    sl_reader_free(r);
    Py_RETURN_NONE;
}

static Py_ssize_t reader_len(PySlReader *self) {
    sl_reader *r = reader_enter(self);
    if (!r)
        return -1;
    Py_ssize_t n = (Py_ssize_t)sl_reader_count(r);
    reader_leave(self);
    return n;
}

/* Convert column `col` of a record into a Python value (a copy: record views
 * die at the next read). */
static PyObject *column_value(const sl_schema *schema, int col, const sl_tensor *t) {
    switch (sl_schema_type(schema, col)) {
    case SL_COL_INT64:
        return PyLong_FromLongLong(*(const int64_t *)t->data);
    case SL_COL_FLOAT64:
        return PyFloat_FromDouble(*(const double *)t->data);
    case SL_COL_STRING:
        return PyUnicode_DecodeUTF8(t->data, (Py_ssize_t)t->nbytes, "surrogateescape");
    case SL_COL_BYTES:
        return PyBytes_FromStringAndSize(t->data, (Py_ssize_t)t->nbytes);
    default: {
        sl_tensor copy;
        memset(&copy, 0, sizeof copy);
        int rc = sl_tensor_copy(&copy, t);
        if (rc < 0)
            return py_sl_raise(rc);
        PyObject *tobj = py_sl_tensor_from(&copy);
        if (!tobj)
            return NULL;
        PyObject *arr = py_sl_tensor_numpy(tobj);
        Py_DECREF(tobj);
        return arr;
    }
    }
}

static PyObject *reader_read_in(const sl_reader *r, PyObject *arg) {
    long long i = PyLong_AsLongLong(arg);
    if (i == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "index: expected an int, got %.100s",
                         PY_SL_TPNAME(arg));
        }
        return NULL;
    }
    uint64_t n = sl_reader_count(r);
    if (i < 0)
        i += (long long)n;
    if (i < 0 || (uint64_t)i >= n) {
        PyErr_Format(PyExc_IndexError, "index: record %lld out of range (dataset has %llu)",
                     (long long)PyLong_AsLongLong(arg), (unsigned long long)n);
        return NULL;
    }
    sl_record *rec = NULL;
    int rc = sl_record_create(&rec);
    if (rc < 0)
        return py_sl_raise(rc);
    Py_BEGIN_ALLOW_THREADS
    rc = sl_reader_read(r, (uint64_t)i, rec);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        py_sl_raise(rc);
        sl_record_free(rec);
        return NULL;
    }
    const sl_schema *schema = sl_reader_schema(r);
    PyObject *d = PyDict_New();
    for (int c = 0; d && c < sl_schema_ncols(schema); c++) {
        PyObject *v = column_value(schema, c, sl_record_column(rec, c));
        if (!v || PyDict_SetItemString(d, sl_schema_name(schema, c), v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(v);
    }
    sl_record_free(rec);
    return d;
}

/* The record's views point into the reader's mappings: the whole read,
 * conversion included, runs as a user. */
static PyObject *reader_read(PySlReader *self, PyObject *arg) {
    sl_reader *r = reader_enter(self);
    if (!r)
        return NULL;
    PyObject *d = reader_read_in(r, arg);
    reader_leave(self);
    return d;
}

static PyObject *reader_getitem(PySlReader *self, PyObject *key) {
    return reader_read(self, key);
}

static PyObject *reader_get_columns(PySlReader *self, void *closure) {
    sl_reader *r = reader_enter(self);
    if (!r)
        return NULL;
    const sl_schema *s = sl_reader_schema(r);
    PyObject *list = PyList_New(0);
    for (int c = 0; list && c < sl_schema_ncols(s); c++) {
        PyObject *d;
        sl_coltype ty = sl_schema_type(s, c);
        if (ty == SL_COL_ARRAY) {
            int64_t shape[SL_MAX_DIMS];
            int nd = sl_schema_shape(s, c, shape);
            PyObject *tup = PyTuple_New(nd > 0 ? nd : 0);
            for (int k = 0; tup && k < nd; k++)
                PyTuple_SetItem(tup, k, PyLong_FromLongLong(shape[k]));
            d = tup ? Py_BuildValue("{s:s,s:s,s:s,s:N,s:O}", "name", sl_schema_name(s, c),
                                    "type", sl_coltype_name(ty), "dtype",
                                    sl_dtype_name(sl_schema_dtype(s, c)), "shape", tup, "zstd",
                                    (sl_schema_flags(s, c) & SL_COLF_ZSTD) ? Py_True : Py_False)
                    : NULL;
        } else {
            d = Py_BuildValue("{s:s,s:s,s:O}", "name", sl_schema_name(s, c), "type",
                              sl_coltype_name(ty), "zstd",
                              (sl_schema_flags(s, c) & SL_COLF_ZSTD) ? Py_True : Py_False);
        }
        if (!d || PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(list);
        } else {
            Py_DECREF(d);
        }
    }
    reader_leave(self);
    return list;
}

static PyObject *reader_get_meta(PySlReader *self, void *closure) {
    sl_reader *r = reader_enter(self);
    if (!r)
        return NULL;
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < sl_reader_meta_count(r); i++) {
        const char *k = sl_reader_meta_key(r, i);
        PyObject *v = PyUnicode_DecodeUTF8(sl_reader_meta(r, k),
                                           (Py_ssize_t)strlen(sl_reader_meta(r, k)),
                                           "surrogateescape");
        if (!v || PyDict_SetItemString(d, k, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    reader_leave(self);
    return d;
}

static PyObject *reader_get_shards(PySlReader *self, void *closure) {
    sl_reader *r = reader_enter(self);
    if (!r)
        return NULL;
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < sl_reader_shard_count(r); i++) {
        PyObject *v = PyUnicode_DecodeFSDefault(sl_reader_shard_path(r, i));
        if (!v || PyList_Append(list, v) < 0)
            Py_CLEAR(list);
        Py_XDECREF(v);
    }
    reader_leave(self);
    return list;
}

static PyObject *reader_get_data_bytes(PySlReader *self, void *closure) {
    sl_reader *r = reader_enter(self);
    if (!r)
        return NULL;
    uint64_t n = sl_reader_data_bytes(r);
    reader_leave(self);
    return PyLong_FromUnsignedLongLong(n);
}

static PyObject *reader_index_column_in(const sl_reader *r, PyObject *arg) {
    const char *name = py_sl_utf8(arg);
    if (!name) {
        PyErr_Format(PyExc_TypeError, "column: expected a str, got %.100s",
                     PY_SL_TPNAME(arg));
        return NULL;
    }
    const sl_schema *s = sl_reader_schema(r);
    int col = sl_schema_find(s, name);
    if (col < 0) {
        PyErr_Format(PyExc_KeyError, "column: no column named '%s'", name);
        return NULL;
    }
    const void *vals = NULL;
    int rc = sl_reader_index_column(r, col, &vals);
    if (rc < 0)
        return py_sl_raise(rc);
    int64_t n = (int64_t)sl_reader_count(r);
    sl_tensor view, copy;
    memset(&copy, 0, sizeof copy);
    sl_tensor_view(&view, (void *)vals, sl_schema_type(s, col) == SL_COL_INT64 ? SL_I64 : SL_F64,
                   1, &n);
    rc = sl_tensor_copy(&copy, &view);
    if (rc < 0)
        return py_sl_raise(rc);
    PyObject *t = py_sl_tensor_from(&copy);
    if (!t)
        return NULL;
    PyObject *arr = py_sl_tensor_numpy(t);
    Py_DECREF(t);
    return arr;
}

static PyObject *reader_index_column(PySlReader *self, PyObject *arg) {
    sl_reader *r = reader_enter(self);
    if (!r)
        return NULL;
    PyObject *arr = reader_index_column_in(r, arg);
    reader_leave(self);
    return arr;
}

static PyObject *reader_verify(PySlReader *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"keep_going", NULL};
    int keep_going = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:verify", kwlist, &keep_going))
        return NULL;
    const sl_reader *r = reader_enter(self);
    if (!r)
        return NULL;
    uint64_t bad = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_reader_verify(r, keep_going, &bad, NULL, NULL);
    Py_END_ALLOW_THREADS
    reader_leave(self);
    if (rc < 0 && !(keep_going && rc == SL_ECORRUPT))
        return py_sl_raise(rc);
    return PyLong_FromUnsignedLongLong(bad);
}

static PyObject *reader_ctx_enter(PyObject *self, PyObject *unused) { return Py_NewRef(self); }
static PyObject *reader_exit(PySlReader *self, PyObject *args) {
    return reader_close(self, NULL);
}

static PyObject *reader_repr(PySlReader *self) {
    if (py_sl_gate_use(&self->gate) < 0)
        return PyUnicode_FromString("sluice.Reader(closing)");
    PyObject *s = !self->r ? PyUnicode_FromFormat("sluice.Reader(%R, closed)", self->path)
                  : PyUnicode_FromFormat("sluice.Reader(%R, records=%llu)", self->path,
                                         (unsigned long long)sl_reader_count(self->r));
    reader_leave(self);
    return s;
}

static PyMethodDef reader_methods[] = {
    {"read", (PyCFunction)reader_read, METH_O,
     "read(i) -> dict: record i (negative counts from the end), each column as int, float, "
     "str, bytes or a numpy array (copied)."},
    {"index_column", (PyCFunction)reader_index_column, METH_O,
     "index_column(name) -> numpy array of a scalar column for every record, from the index "
     "alone."},
    {"verify", (PyCFunction)(void (*)(void))reader_verify, METH_VARARGS | METH_KEYWORDS,
     "verify(keep_going=False) -> number of damaged records. Without keep_going the first "
     "damage raises CorruptError naming file and record."},
    {"close", (PyCFunction)reader_close, METH_NOARGS, "Release the dataset's files."},
    {"__enter__", reader_ctx_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)reader_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef reader_getset[] = {
    {"columns", (getter)reader_get_columns, NULL,
     "The schema: a list of dicts {name, type, dtype, shape, zstd}.", NULL},
    {"meta", (getter)reader_get_meta, NULL, "Metadata as a dict of str.", NULL},
    {"shards", (getter)reader_get_shards, NULL, "Paths of the shard files.", NULL},
    {"data_bytes", (getter)reader_get_data_bytes, NULL, "Bytes of record data.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject *PySlReader_Type;

static PyType_Slot reader_slots[] = {
    {Py_tp_dealloc, (void *)reader_dealloc},
    {Py_tp_repr, (void *)reader_repr},
    {Py_sq_length, (void *)reader_len},
    {Py_mp_length, (void *)reader_len},
    {Py_mp_subscript, (void *)reader_getitem},
    {Py_tp_doc, (void *)"Reader(path, verify=True, mmap=True): random access to a .slr "
                        "dataset (a file or a directory of shards). len(r), r[i] -> dict of "
                        "columns. Reads release the GIL and may run from several threads at "
                        "once."},
    {Py_tp_methods, reader_methods},
    {Py_tp_getset, reader_getset},
    {Py_tp_init, (void *)reader_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {0, NULL}};

static PyType_Spec reader_spec = {"sluice.Reader", sizeof(PySlReader), 0, Py_TPFLAGS_DEFAULT,
                                  reader_slots};

/* ======================================================================== */
/* Writer                                                                   */
/* ======================================================================== */

typedef struct {
    PyObject_HEAD
    sl_writer *w;       /* w, schema, ncols, closed: only while owning `gate` */
    sl_schema *schema;
    int ncols;
    int closed;
    py_sl_gate gate;    /* every call is the owner, held across the GIL-released engine
                           call: the engine writer is one thread at a time, and close,
                           abort or a new __init__ must not free it under an append */
    _Atomic uint64_t count; /* records appended, for `count` while an append runs */
} PySlWriter;

/* Own the writer for one call (release with writer_disown). */
static int writer_own(PySlWriter *self, const char *what) {
    if (py_sl_gate_own(&self->gate) == 0)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "sluice.Writer.%s: the writer is in use by another "
                 "thread (an append or close is running; one thread at a time)", what);
    return -1;
}
static void writer_disown(PySlWriter *self) { py_sl_gate_disown(&self->gate); }

static int parse_coltype(const char *s, sl_coltype *out) {
    static const struct { const char *name; sl_coltype t; } tab[] = {
        {"int64", SL_COL_INT64}, {"float64", SL_COL_FLOAT64}, {"string", SL_COL_STRING},
        {"str", SL_COL_STRING},  {"bytes", SL_COL_BYTES},     {"array", SL_COL_ARRAY}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        if (strcmp(s, tab[i].name) == 0) {
            *out = tab[i].t;
            return 0;
        }
    }
    return -1;
}

static int add_column_in(sl_schema *schema, PyObject *name, PyObject *type, PyObject *dtype,
                         PyObject *shape, PyObject *zstd, Py_ssize_t idx);

/* One column spec: a dict {name, type, dtype?, shape?, zstd?} or a tuple
 * (name, type[, dtype, shape]). The dict's values are taken as strong
 * references: another thread may change the dict. */
static int add_column(sl_schema *schema, PyObject *spec, Py_ssize_t idx) {
    PyObject *v[5] = {NULL, NULL, NULL, NULL, NULL};
    if (PyDict_Check(spec)) {
        static const char *const keys[5] = {"name", "type", "dtype", "shape", "zstd"};
        for (int k = 0; k < 5; k++) {
            if (py_sl_dict_get_str(spec, keys[k], &v[k]) < 0) {
                PyErr_Clear(); /* as a missing key: the message below names what is needed */
                v[k] = NULL;
            }
        }
    } else if (PyTuple_Check(spec) && PyTuple_Size(spec) >= 2 && PyTuple_Size(spec) <= 4) {
        for (Py_ssize_t k = 0; k < PyTuple_Size(spec); k++)
            v[k] = Py_NewRef(PyTuple_GetItem(spec, k));
    }
    int rc = add_column_in(schema, v[0], v[1], v[2], v[3], v[4], idx);
    for (int k = 0; k < 5; k++)
        Py_XDECREF(v[k]);
    return rc;
}

static int add_column_in(sl_schema *schema, PyObject *name, PyObject *type, PyObject *dtype,
                         PyObject *shape, PyObject *zstd, Py_ssize_t idx) {
    const char *cname = name && PyUnicode_Check(name) ? py_sl_utf8(name) : NULL;
    const char *ctype = type && PyUnicode_Check(type) ? py_sl_utf8(type) : NULL;
    sl_coltype ty;
    if (!cname || !ctype) {
        PyErr_Format(PyExc_TypeError,
                     "columns[%zd]: expected (name, type[, dtype, shape]) or a dict with "
                     "'name' and 'type'", idx);
        return -1;
    }
    if (parse_coltype(ctype, &ty) < 0) {
        PyErr_Format(PyExc_ValueError,
                     "columns[%zd]: type '%s' is not one of int64, float64, string, bytes, array",
                     idx, ctype);
        return -1;
    }
    sl_dtype dt = SL_DTYPE_INVALID;
    int ndim = 0;
    int64_t dims[SL_MAX_DIMS];
    if (ty == SL_COL_ARRAY) {
        const char *cd = dtype && PyUnicode_Check(dtype) ? py_sl_utf8(dtype) : NULL;
        dt = cd ? sl_dtype_parse(cd) : SL_DTYPE_INVALID;
        if (dt == SL_DTYPE_INVALID) {
            PyErr_Format(PyExc_ValueError, "columns[%zd]: array column '%s' needs a dtype "
                         "such as 'uint8' or 'float32'", idx, cname);
            return -1;
        }
        PyObject *seq = shape ? py_sl_sequence(shape, "shape") : NULL;
        if (!seq || PyTuple_Size(seq) < 1 ||
            PyTuple_Size(seq) > SL_MAX_DIMS) {
            Py_XDECREF(seq);
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "columns[%zd]: array column '%s' needs a shape of "
                         "1..%d dims (-1 for a dim that varies)", idx, cname, SL_MAX_DIMS);
            return -1;
        }
        ndim = (int)PyTuple_Size(seq);
        for (int k = 0; k < ndim; k++) {
            dims[k] = PyLong_AsLongLong(PyTuple_GetItem(seq, k));
            if (dims[k] == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return -1;
            }
        }
        Py_DECREF(seq);
    }
    unsigned flags = (zstd && PyObject_IsTrue(zstd) == 1) ? SL_COLF_ZSTD : 0;
    int rc = sl_schema_add(schema, cname, ty, dt, ndim, ndim ? dims : NULL, flags);
    if (rc < 0) {
        py_sl_raise(rc);
        return -1;
    }
    return 0;
}

static int writer_init(PySlWriter *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"path", "columns", "shard_bytes", "zstd_level", "fsync", NULL};
    PyObject *path_obj = NULL, *cols = NULL;
    unsigned long long shard_bytes = 0;
    int zstd_level = 0, do_fsync = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&O|Kip:Writer", kwlist,
                                     PyUnicode_FSConverter, &path_obj, &cols, &shard_bytes,
                                     &zstd_level, &do_fsync))
        return -1;
    PyObject *seq = py_sl_sequence(cols, "columns: expected a list of column specs");
    if (!seq) {
        Py_DECREF(path_obj);
        return -1;
    }
    sl_schema *schema = NULL;
    int rc = sl_schema_create(&schema);
    if (rc < 0) {
        Py_DECREF(seq);
        Py_DECREF(path_obj);
        py_sl_raise(rc);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_Size(seq); i++) {
        if (add_column(schema, PyTuple_GetItem(seq, i), i) < 0) {
            Py_DECREF(seq);
            Py_DECREF(path_obj);
            sl_schema_free(schema);
            return -1;
        }
    }
    Py_DECREF(seq);
    sl_writer_options opts = SL_WRITER_OPTIONS_INIT;
    opts.shard_bytes = shard_bytes;
    opts.zstd_level = zstd_level;
    opts.fsync = do_fsync;
    if (writer_own(self, "__init__") < 0) {
        Py_DECREF(path_obj);
        sl_schema_free(schema);
        return -1;
    }
    sl_writer *w = NULL;
    const char *path = PyBytes_AsString(path_obj);
    Py_BEGIN_ALLOW_THREADS
    rc = sl_writer_open(&w, path, schema, &opts);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    if (rc < 0) {
        writer_disown(self);
        sl_schema_free(schema);
        py_sl_raise(rc);
        return -1;
    }
    sl_writer_free(self->w);
    sl_schema_free(self->schema);
    self->w = w;
    self->schema = schema;
    self->ncols = sl_schema_ncols(schema);
    self->closed = 0;
    atomic_store(&self->count, 0);
    writer_disown(self);
    return 0;
}

static void writer_dealloc(PySlWriter *self) {
    sl_writer_free(self->w); /* unclosed: the temporary files go, nothing is published */
    sl_schema_free(self->schema);
    py_sl_free((PyObject *)self);
}

/* Own an open writer for one call (release with writer_disown). */
static int writer_check(PySlWriter *self, const char *what) {
    if (writer_own(self, what) < 0)
        return -1;
    if (!self->w || self->closed) {
        writer_disown(self);
        PyErr_SetString(PyExc_ValueError, "sluice.Writer is closed");
        return -1;
    }
    return 0;
}

typedef struct {
    sl_tensor cols[SL_MAX_COLUMNS];
    Py_buffer views[SL_MAX_COLUMNS];
    int has_view[SL_MAX_COLUMNS];
    PyObject *keep[SL_MAX_COLUMNS];     /* converted objects kept alive during append */
    int64_t i64[SL_MAX_COLUMNS];
    double f64[SL_MAX_COLUMNS];
} append_args;

static void append_args_clear(append_args *a, int n) {
    for (int c = 0; c < n; c++) {
        if (a->has_view[c])
            PyBuffer_Release(&a->views[c]);
        Py_XDECREF(a->keep[c]);
    }
}

static int convert_value(PySlWriter *self, int c, PyObject *v, append_args *a) {
    const char *name = sl_schema_name(self->schema, c);
    char what[96];
    snprintf(what, sizeof what, "record['%s']", name);
    switch (sl_schema_type(self->schema, c)) {
    case SL_COL_INT64: {
        PyObject *idx = PyNumber_Index(v);
        if (!idx) {
            PyErr_Format(PyExc_TypeError, "%s: expected an int, got %.100s", what,
                         PY_SL_TPNAME(v));
            return -1;
        }
        a->i64[c] = PyLong_AsLongLong(idx);
        Py_DECREF(idx);
        if (a->i64[c] == -1 && PyErr_Occurred())
            return -1;
        sl_tensor_view(&a->cols[c], &a->i64[c], SL_I64, 0, NULL);
        return 0;
    }
    case SL_COL_FLOAT64:
        a->f64[c] = PyFloat_AsDouble(v);
        if (a->f64[c] == -1.0 && PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "%s: expected a float, got %.100s", what,
                         PY_SL_TPNAME(v));
            return -1;
        }
        sl_tensor_view(&a->cols[c], &a->f64[c], SL_F64, 0, NULL);
        return 0;
    case SL_COL_STRING:
        if (PyUnicode_Check(v)) {
            a->keep[c] = PyUnicode_AsUTF8String(v);
            if (!a->keep[c])
                return -1;
            v = a->keep[c];
        }
        __attribute__((fallthrough)); /* then as bytes */
    case SL_COL_BYTES: {
        if (py_sl_tensor_from_buffer(v, &a->views[c], &a->cols[c], what) < 0)
            return -1;
        a->has_view[c] = 1;
        int64_t nb = (int64_t)a->views[c].len;
        sl_tensor_view(&a->cols[c], a->views[c].buf, SL_U8, 1, &nb);
        return 0;
    }
    default: {
        /* Arrays: let numpy convert lists and other dtypes to the schema's dtype. */
        PyObject *arr = PyObject_CallFunction(np_ascontiguousarray, "Os", v,
                                              sl_dtype_name(sl_schema_dtype(self->schema, c)));
        if (!arr)
            return -1;
        a->keep[c] = arr;
        if (py_sl_tensor_from_buffer(arr, &a->views[c], &a->cols[c], what) < 0)
            return -1;
        a->has_view[c] = 1;
        return 0;
    }
    }
}

/* The whole append owns the writer: converting the values reads the
 * schema, which a second __init__ would free. */
static PyObject *writer_append(PySlWriter *self, PyObject *rec) {
    if (writer_check(self, "append") < 0)
        return NULL;
    append_args a;
    memset(&a, 0, sizeof a);
    int n = self->ncols, rc;
    PyObject *result = NULL;
    if (PyDict_Check(rec)) {
        Py_ssize_t size = PyDict_Size(rec);
        if (size != n) {
            PyErr_Format(PyExc_ValueError, "record: expected %d columns, got %zd", n, size);
            goto done;
        }
        for (int c = 0; c < n; c++) {
            PyObject *v = NULL;
            if (py_sl_dict_get_str(rec, sl_schema_name(self->schema, c), &v) <= 0) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_KeyError, "record: missing column '%s'",
                                 sl_schema_name(self->schema, c));
                goto done;
            }
            int cv = convert_value(self, c, v, &a);
            Py_DECREF(v);
            if (cv < 0)
                goto done;
        }
    } else {
        PyObject *seq = py_sl_sequence(rec, "record: expected a dict or a sequence");
        if (!seq)
            goto done;
        if (PyTuple_Size(seq) != n) {
            PyErr_Format(PyExc_ValueError, "record: expected %d columns, got %zd", n,
                         PyTuple_Size(seq));
            Py_DECREF(seq);
            goto done;
        }
        for (int c = 0; c < n; c++) {
            if (convert_value(self, c, PyTuple_GetItem(seq, c), &a) < 0) {
                Py_DECREF(seq);
                goto done;
            }
        }
        Py_DECREF(seq);
    }
    sl_writer *w = self->w;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_writer_append(w, a.cols, n);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        py_sl_raise(rc);
    } else {
        atomic_store(&self->count, sl_writer_count(w));
        result = Py_NewRef(Py_None);
    }
done:
    writer_disown(self);
    append_args_clear(&a, n);
    return result;
}

static PyObject *writer_set_meta(PySlWriter *self, PyObject *args) {
    const char *k, *v;
    if (!PyArg_ParseTuple(args, "ss:set_meta", &k, &v))
        return NULL;
    if (writer_check(self, "set_meta") < 0)
        return NULL;
    int rc = sl_writer_set_meta(self->w, k, v);
    writer_disown(self);
    if (rc < 0)
        return py_sl_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *writer_close(PySlWriter *self, PyObject *unused) {
    if (writer_own(self, "close") < 0)
        return NULL;
    if (self->closed || !self->w) {
        writer_disown(self);
        Py_RETURN_NONE;
    }
    int rc;
    sl_writer *w = self->w;
    self->closed = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_writer_close(w);
    Py_END_ALLOW_THREADS
    writer_disown(self);
    if (rc < 0)
        return py_sl_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *writer_abort(PySlWriter *self, PyObject *unused) {
    if (writer_own(self, "abort") < 0)
        return NULL;
    sl_writer *w = self->w;
    self->w = NULL;
    self->closed = 1;
    atomic_store(&self->count, 0);
    writer_disown(self);
    sl_writer_free(w);
    Py_RETURN_NONE;
}

static PyObject *writer_enter(PyObject *self, PyObject *unused) { return Py_NewRef(self); }
static PyObject *writer_exit(PySlWriter *self, PyObject *args) {
    PyObject *et = PyTuple_Check(args) && PyTuple_Size(args) > 0 ? PyTuple_GetItem(args, 0)
                                                                     : Py_None;
    /* Leaving on an exception publishes nothing: a half dataset is worse than none. */
    if (et != Py_None)
        return writer_abort(self, NULL);
    return writer_close(self, NULL);
}

static PyObject *writer_get_count(PySlWriter *self, void *closure) {
    return PyLong_FromUnsignedLongLong(atomic_load(&self->count));
}

static PyMethodDef writer_methods[] = {
    {"append", (PyCFunction)writer_append, METH_O,
     "append(record): a dict {column: value} or a sequence in column order. int64 <- int, "
     "float64 <- float, string <- str, bytes <- bytes-like, array <- anything numpy converts "
     "to the column's dtype."},
    {"set_meta", (PyCFunction)writer_set_meta, METH_VARARGS,
     "set_meta(key, value): a metadata string stored with the dataset."},
    {"close", (PyCFunction)writer_close, METH_NOARGS,
     "Finish and publish the dataset at its path."},
    {"abort", (PyCFunction)writer_abort, METH_NOARGS,
     "Drop everything written; nothing appears at the path."},
    {"__enter__", writer_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)writer_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef writer_getset[] = {
    {"count", (getter)writer_get_count, NULL, "Records appended so far.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject *PySlWriter_Type;

static PyType_Slot writer_slots[] = {
    {Py_tp_dealloc, (void *)writer_dealloc},
    {Py_tp_doc, (void *)"Writer(path, columns, shard_bytes=0, zstd_level=0, fsync=True): "
                        "write a .slr dataset. columns: [(name, type[, dtype, shape])] or "
                        "dicts with an optional 'zstd': True. The dataset appears at path on "
                        "close(); leaving a `with` block on an exception publishes nothing."},
    {Py_tp_methods, writer_methods},
    {Py_tp_getset, writer_getset},
    {Py_tp_init, (void *)writer_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {0, NULL}};

static PyType_Spec writer_spec = {"sluice.Writer", sizeof(PySlWriter), 0, Py_TPFLAGS_DEFAULT,
                                  writer_slots};

int py_sl_record_init(PyObject *m) {
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np)
        return -1;
    np_ascontiguousarray = PyObject_GetAttrString(np, "ascontiguousarray");
    Py_DECREF(np);
    if (!np_ascontiguousarray)
        return -1;
    PySlReader_Type = py_sl_add_type(m, &reader_spec, "Reader");
    PySlWriter_Type = PySlReader_Type ? py_sl_add_type(m, &writer_spec, "Writer") : NULL;
    return PySlWriter_Type ? 0 : -1;
}
