/*
 * py_pipeline.c — sluice._sluice.Pipeline: a running engine pipeline seen
 * from Python, and Python callables as map ops.
 *
 * Waiting: next() waits for a batch in slices of SLICE_MS with the GIL
 * released, and between slices takes the GIL to run PyErr_CheckSignals, so
 * Ctrl-C stops a blocked loop promptly (the pipeline stays usable).
 *
 * Zero copy: every column of a batch becomes a Tensor holding its own
 * sl_buffer reference; the batch itself is released at once. The memory
 * goes back to the engine's pool when the last array/tensor using it dies,
 * also after the pipeline is freed (pools outlive their pipeline).
 *
 * Python maps run on the engine's worker threads and take the GIL for the
 * call (the slow path). To avoid deadlock, every call that may wait for
 * workers (next, set_epoch, restore, free) releases the GIL first. A
 * callback's exception is kept and re-raised in the consumer, in place of
 * the engine's generic status.
 *
 * Threads (with or without the GIL): the consumer calls (next, set_epoch,
 * restore, state, explain, trace, epoch, ...: the engine's one-consumer
 * calls) own the object's gate, across the GIL-released wait, so a second
 * consumer or close() is refused; stats() (any thread, the engine says),
 * columns and epochs (fixed at creation) are users, which may run beside
 * the consumer and keep close() from freeing the engine pipeline under them. Map workers run concurrently
 * (each takes a thread state; on a free-threaded build they run at once):
 * the first exception is handed over with one atomic pointer.
 */
#include "pysluice.h"

#include <structmember.h>

#include <stddef.h>
#include <string.h>

#define SLICE_MS 50

/* One Python map op. */
typedef struct {
    PyObject *fn;          /* the callable */
    PyObject *names;       /* tuple of column names at this point of the chain */
    _Atomic(PyObject *) exc; /* first exception raised by fn: set once by a worker
                                (compare-exchange from NULL), taken by the consumer */
    int skip;              /* on_error "skip": the engine drops the sample */
    atomic_int reported;   /* skip mode: the first exception was printed */
} py_map;

typedef struct {
    PyObject_HEAD
    sl_pipeline *p;        /* p, maps, colnames: freed only by a closer of `gate` */
    py_map *maps;
    int nmaps;
    py_sl_gate gate;       /* consumer calls own it; read-only calls use it */
    int forked;            /* made before a fork(): unusable in this child */
    int failed;            /* a next() raised an engine error: set_epoch and
                              restore start clean (drop_map_exceptions) */
    PyObject *colnames;    /* tuple of output column names (interned keys for batches) */
    uint32_t text_cols;    /* bit c: output column c is text (sl_pipeline_column_text) */
    PyObject *weakrefs;    /* the Python side tracks live pipelines weakly */
} PySlPipeline;

static PyObject *np_ascontiguousarray_p;
static PyObject *np_asarray_p;

/* ---- Python map ops ------------------------------------------------------ */

static int value_into_column(PyObject *v, sl_tensor *col, const char *name) {
    /* numpy.asarray keeps a 0-d value 0-d (ascontiguousarray would make it
     * 1-d); the buffer request below asks for C order, so only a
     * non-contiguous array needs the extra contiguous copy. */
    PyObject *arr = PyObject_CallFunctionObjArgs(np_asarray_p, v, NULL);
    if (arr && !PyObject_CheckBuffer(arr)) {
        Py_DECREF(arr);
        PyErr_Format(PyExc_TypeError, "map result['%s']: not convertible to an array", name);
        return -1;
    }
    if (arr) {
        PyObject *flags = PyObject_GetAttrString(arr, "flags");
        PyObject *c = flags ? PyObject_GetAttrString(flags, "c_contiguous") : NULL;
        int contiguous = c ? PyObject_IsTrue(c) : -1;
        Py_XDECREF(c);
        Py_XDECREF(flags);
        if (contiguous < 0) {
            Py_CLEAR(arr);
        } else if (!contiguous) {
            PyObject *c_arr = PyObject_CallFunctionObjArgs(np_ascontiguousarray_p, arr, NULL);
            Py_DECREF(arr);
            arr = c_arr;
        }
    }
    if (!arr)
        return -1;
    Py_buffer view;
    sl_tensor in, out;
    memset(&in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    char what[96];
    snprintf(what, sizeof what, "map result['%s']", name);
    if (py_sl_tensor_from_buffer(arr, &view, &in, what) < 0) {
        Py_DECREF(arr);
        return -1;
    }
    /* The sample must own its bytes: copy out of numpy's memory. */
    int rc = sl_tensor_copy(&out, &in);
    PyBuffer_Release(&view);
    Py_DECREF(arr);
    if (rc < 0) {
        py_sl_raise(rc);
        return -1;
    }
    sl_tensor_release(col);
    *col = out;
    return 0;
}

static int py_map_call(sl_sample *s, sl_rng *rng, void *user) {
    py_map *m = user;
    (void)rng;
    PyGILState_STATE g = PyGILState_Ensure();
    int status = SL_OK;
    PyObject *d = PyDict_New(), *res = NULL, *v = NULL;
    Py_ssize_t n = PyTuple_Size(m->names);
    if (!d)
        goto fail;
    for (Py_ssize_t i = 0; i < n && i < (Py_ssize_t)s->ncols; i++) {
        /* A copy: the sample's bytes may be a borrowed view of the source. */
        sl_tensor copy;
        memset(&copy, 0, sizeof copy);
        int rc = sl_tensor_copy(&copy, &s->col[i]);
        if (rc < 0) {
            py_sl_raise(rc);
            goto fail;
        }
        PyObject *t = py_sl_tensor_from(&copy);
        PyObject *arr = t ? py_sl_tensor_numpy(t) : NULL;
        Py_XDECREF(t);
        if (!arr || PyDict_SetItem(d, PyTuple_GetItem(m->names, i), arr) < 0) {
            Py_XDECREF(arr);
            goto fail;
        }
        Py_DECREF(arr);
    }
    res = PyObject_CallFunctionObjArgs(m->fn, d, NULL);
    if (!res)
        goto fail;
    if (!PyDict_Check(res)) {
        PyErr_Format(PyExc_TypeError, "map function must return a dict of columns, got %.100s",
                     PY_SL_TPNAME(res));
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n && i < (Py_ssize_t)s->ncols; i++) {
        PyObject *name = PyTuple_GetItem(m->names, i);
        /* a strong reference: the function may have kept the dict */
        int found = py_sl_dict_get(res, name, &v);
        if (found < 0)
            goto fail;
        if (!found)
            continue; /* a column left out stays as it was */
        int rc = value_into_column(v, &s->col[i], py_sl_utf8(name));
        Py_CLEAR(v);
        if (rc < 0)
            goto fail;
    }
    goto done;
fail:
    status = SL_EINVAL;
    if (m->skip) {
        /* The sample is dropped and counted; keeping the exception would
         * raise it later for nothing. Show the first one, as Python does
         * for errors it cannot raise. */
        if (!atomic_exchange(&m->reported, 1))
            PyErr_WriteUnraisable(m->fn);
        else
            PyErr_Clear();
    } else {
        /* Workers fail at once: the first to swap its exception in keeps it. */
        PyObject *exc = py_sl_err_take(), *none = NULL;
        if (exc && !atomic_compare_exchange_strong(&m->exc, &none, exc))
            Py_DECREF(exc);
    }
done:
    Py_XDECREF(v);
    Py_XDECREF(d);
    Py_XDECREF(res);
    PyGILState_Release(g);
    return status;
}

/* Raise the first exception a Python map kept, if any. Returns 1 if it did. */
static int raise_map_exception(PySlPipeline *self) {
    for (int i = 0; i < self->nmaps; i++) {
        PyObject *exc = atomic_exchange(&self->maps[i].exc, NULL);
        if (exc) {
            py_sl_err_give(exc);
            return 1;
        }
    }
    return 0;
}

/* A failed engine restarts clean on set_epoch and restore (the workers are
 * joined first): an exception a map kept from the failed run and the
 * consumer did not raise (a second map's, a later sample's) would otherwise
 * be raised by the new run. */
static void drop_map_exceptions(PySlPipeline *self) {
    for (int i = 0; i < self->nmaps; i++)
        Py_XDECREF(atomic_exchange(&self->maps[i].exc, NULL));
}

/* Column names a pipeline made of `spec` so far would output. Creating a
 * pipeline starts no thread (they start at the first next), so this costs an
 * open of the source and a plan. */
static PyObject *names_at(const sl_spec *spec) {
    sl_pipeline *pp = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_pipeline_create(&pp, spec);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return py_sl_raise(rc);
    int n = sl_pipeline_ncols(pp);
    PyObject *tup = PyTuple_New(n > 0 ? n : 0);
    for (int i = 0; tup && i < n; i++) {
        PyObject *s = PyUnicode_FromString(sl_pipeline_column_name(pp, i));
        if (!s)
            Py_CLEAR(tup);
        else
            PyTuple_SetItem(tup, i, s);
    }
    Py_BEGIN_ALLOW_THREADS
    sl_pipeline_free(pp);
    Py_END_ALLOW_THREADS
    return tup;
}

/* ---- the Pipeline type ------------------------------------------------------ */

/* Own the pipeline for one consumer call (release with pipeline_disown):
 * the engine pipeline has one consumer at a time. */
static int pipeline_own(PySlPipeline *self) {
    int rc = py_sl_gate_own(&self->gate);
    if (rc == -1) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the pipeline is in use by another thread (one consumer at a time)");
        return -1;
    }
    if (rc == 0 && self->forked) {
        py_sl_gate_disown(&self->gate);
        PyErr_SetString(PyExc_RuntimeError, "the pipeline was started before fork(): its "
                        "threads do not exist in this process; build a new Dataset here");
        return -1;
    }
    if (rc == 0 && self->p)
        return 0;
    if (rc == 0)
        py_sl_gate_disown(&self->gate);
    PyErr_SetString(PyExc_ValueError, "the pipeline is closed"); /* or being closed */
    return -1;
}
static void pipeline_disown(PySlPipeline *self) { py_sl_gate_disown(&self->gate); }

/* Enter as a user (read-only calls, beside the consumer); release with
 * pipeline_leave. */
static sl_pipeline *pipeline_use(PySlPipeline *self) {
    if (py_sl_gate_use(&self->gate) == 0) {
        if (self->p)
            return self->p;
        py_sl_gate_leave(&self->gate);
    }
    PyErr_SetString(PyExc_ValueError, "the pipeline is closed");
    return NULL;
}
static void pipeline_leave(PySlPipeline *self) { py_sl_gate_leave(&self->gate); }

static void free_maps(PySlPipeline *self) {
    for (int i = 0; i < self->nmaps; i++) {
        Py_XDECREF(self->maps[i].fn);
        Py_XDECREF(self->maps[i].names);
        Py_XDECREF(atomic_load(&self->maps[i].exc));
    }
    PyMem_Free(self->maps);
    self->maps = NULL;
    self->nmaps = 0;
}

static void pipeline_close_now(PySlPipeline *self) {
    sl_pipeline *p = self->p;
    self->p = NULL;
    if (p) {
        /* Workers may be waiting for the GIL inside a Python map. */
        Py_BEGIN_ALLOW_THREADS
        sl_pipeline_free(p);
        Py_END_ALLOW_THREADS
    }
    free_maps(self);
    Py_CLEAR(self->colnames);
}

/* Source from memory: `arrays` is (names, arrays), each array C-contiguous
 * with the sample count as its first dimension. The engine copies the bytes. */
static int set_memory_source(sl_spec *spec, PyObject *arrays) {
    PyObject *names = NULL, *arrs = NULL;
    if (!PyTuple_Check(arrays) || PyTuple_Size(arrays) != 2) {
        PyErr_SetString(PyExc_TypeError, "arrays: expected (names, arrays)");
        return -1;
    }
    names = py_sl_sequence(PyTuple_GetItem(arrays, 0), "arrays: names must be a list");
    arrs = names ? py_sl_sequence(PyTuple_GetItem(arrays, 1), "arrays: must be a list") : NULL;
    if (!arrs) {
        Py_XDECREF(names);
        return -1;
    }
    Py_ssize_t n = PyTuple_Size(names);
    int ret = -1, nviews = 0;
    const char *cnames[SL_MAX_COLUMNS];
    sl_tensor cols[SL_MAX_COLUMNS];
    Py_buffer views[SL_MAX_COLUMNS];
    if (n < 1 || n > SL_MAX_COLUMNS || PyTuple_Size(arrs) != n) {
        PyErr_Format(PyExc_ValueError, "columns: expected 1..%d columns", SL_MAX_COLUMNS);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        cnames[i] = py_sl_utf8(PyTuple_GetItem(names, i));
        if (!cnames[i])
            goto done;
        char what[96];
        snprintf(what, sizeof what, "columns['%s']", cnames[i]);
        memset(&cols[i], 0, sizeof cols[i]);
        if (py_sl_tensor_from_buffer(PyTuple_GetItem(arrs, i), &views[i], &cols[i],
                                     what) < 0)
            goto done;
        nviews++;
    }
    int rc = sl_spec_set_source_columns(spec, (int)n, cnames, cols);
    if (rc < 0)
        py_sl_raise(rc);
    else
        ret = 0;
done:
    for (int i = 0; i < nviews; i++)
        PyBuffer_Release(&views[i]);
    Py_DECREF(names);
    Py_DECREF(arrs);
    return ret;
}

/* Pipeline(spec_json, ops=None, callables=(), arrays=None):
 *  ops None: the whole pipeline is spec_json (the path `sluice run` takes).
 *  else: spec_json is the spec without ops, and ops lists each op in order as
 *  JSON text, or as an int: the index of a Python callable in `callables`.
 *  arrays: (names, arrays) to read from memory instead of the spec's path. */
static int pipeline_init_owned(PySlPipeline *self, const char *json, PyObject *ops,
                               PyObject *callables, PyObject *arrays, int skip_errors);

static int pipeline_init(PySlPipeline *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"spec", "ops", "callables", "arrays", "skip_errors", NULL};
    const char *json;
    PyObject *ops = Py_None, *callables = NULL, *arrays = Py_None;
    int skip_errors = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|OOOp:Pipeline", kwlist, &json, &ops,
                                     &callables, &arrays, &skip_errors))
        return -1;
    /* Owned throughout: maps and p are built in place. */
    if (py_sl_gate_own(&self->gate) != 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Pipeline.__init__: the pipeline is in use by another thread");
        return -1;
    }
    int rc = pipeline_init_owned(self, json, ops, callables, arrays, skip_errors);
    pipeline_disown(self);
    return rc;
}

static int pipeline_init_owned(PySlPipeline *self, const char *json, PyObject *ops,
                               PyObject *callables, PyObject *arrays, int skip_errors) {
    if (self->p) {
        PyErr_SetString(PyExc_RuntimeError, "Pipeline.__init__ called twice");
        return -1;
    }
    sl_spec *spec = NULL;
    int rc = sl_spec_from_json(&spec, json);
    if (rc < 0) {
        py_sl_raise(rc);
        return -1;
    }
    if (arrays != Py_None && set_memory_source(spec, arrays) < 0) {
        sl_spec_free(spec);
        return -1;
    }
    if (ops != Py_None) {
        PyObject *seq = py_sl_sequence(ops, "ops: expected a list");
        PyObject *cseq = seq ? py_sl_sequence(callables ? callables : Py_None,
                                               "callables: expected a list") : NULL;
        if (!seq || !cseq) {
            Py_XDECREF(seq);
            sl_spec_free(spec);
            return -1;
        }
        Py_ssize_t n = PyTuple_Size(seq);
        self->maps = PyMem_Calloc((size_t)(n ? n : 1), sizeof *self->maps);
        if (!self->maps) {
            PyErr_NoMemory();
            goto fail_ops;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *op = PyTuple_GetItem(seq, i);
            if (PyUnicode_Check(op)) {
                rc = sl_spec_add_op_json(spec, py_sl_utf8(op));
                if (rc < 0) {
                    py_sl_raise(rc);
                    goto fail_ops;
                }
                continue;
            }
            Py_ssize_t k = PyLong_AsSsize_t(op);
            if (k < 0 || k >= PyTuple_Size(cseq)) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError, "ops[%zd]: expected op JSON or a callable index",
                             i);
                goto fail_ops;
            }
            py_map *m = &self->maps[self->nmaps];
            m->names = names_at(spec);
            if (!m->names)
                goto fail_ops;
            m->fn = Py_NewRef(PyTuple_GetItem(cseq, k));
            m->skip = skip_errors;
            self->nmaps++;
            char label[64];
            snprintf(label, sizeof label, "python[%zd]", k);
            rc = sl_spec_add_map(spec, label, py_map_call, m);
            if (rc < 0) {
                py_sl_raise(rc);
                goto fail_ops;
            }
        }
        Py_DECREF(seq);
        Py_DECREF(cseq);
        goto create;
    fail_ops:
        Py_DECREF(seq);
        Py_DECREF(cseq);
        sl_spec_free(spec);
        free_maps(self);
        return -1;
    }
create:;
    sl_pipeline *p = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_pipeline_create(&p, spec);
    Py_END_ALLOW_THREADS
    sl_spec_free(spec);
    if (rc < 0) {
        py_sl_raise(rc);
        free_maps(self);
        return -1;
    }
    self->p = p;
    int nc = sl_pipeline_ncols(p);
    self->colnames = PyTuple_New(nc > 0 ? nc : 0);
    for (int i = 0; self->colnames && i < nc; i++) {
        PyObject *k = PyUnicode_InternFromString(sl_pipeline_column_name(p, i));
        if (!k)
            Py_CLEAR(self->colnames);
        else
            PyTuple_SetItem(self->colnames, i, k);
        if (i < 32 && sl_pipeline_column_text(p, i))
            self->text_cols |= 1u << i;
    }
    if (!self->colnames)
        return -1; /* dealloc frees the pipeline */
    return 0;
}

static void pipeline_dealloc(PySlPipeline *self) {
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    pipeline_close_now(self);
    py_sl_free((PyObject *)self);
}

static PyObject *pipeline_close(PySlPipeline *self, PyObject *unused) {
    int rc = py_sl_gate_close_begin(&self->gate);
    if (rc == -2)
        Py_RETURN_NONE; /* another thread is closing it */
    if (rc < 0) {
        PyErr_SetString(PyExc_RuntimeError, "close: the pipeline is in use by another thread");
        return NULL;
    }
    /* Held alone while the workers are joined with the GIL released: a
     * second close() returns at once, other calls find it closed. */
    pipeline_close_now(self);
    py_sl_gate_close_end(&self->gate);
    Py_RETURN_NONE;
}

/* Wait for the next batch: in slices, checking for signals between them.
 * The caller owns the pipeline. Returns 1 with *out set, 0 at the end of
 * the epoch, -1 with an exception. */
static int wait_batch(PySlPipeline *self, sl_batch **out) {
    sl_pipeline *p = self->p;
    *out = NULL;
    for (;;) {
        int rc;
        sl_batch *b = NULL;
        Py_BEGIN_ALLOW_THREADS
        rc = sl_pipeline_next_timeout(p, &b, SLICE_MS);
        Py_END_ALLOW_THREADS
        if (rc == SL_END)
            return 0;
        if (rc < 0) {
            self->failed = 1;
            if (!raise_map_exception(self))
                py_sl_raise(rc);
            return -1;
        }
        if (b) {
            *out = b;
            return 1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}

/* A Python object for a tensor borrowed from a batch: a Tensor with its own
 * buffer reference, as numpy (as_numpy) or as is. */
static PyObject *export_tensor(const sl_tensor *bt, int as_numpy) {
    sl_tensor t = *bt;
    if (t.buf)
        sl_buffer_retain(t.buf); /* the zero-copy handover */
    PyObject *obj = py_sl_tensor_from(&t);
    if (!obj || !as_numpy)
        return obj;
    PyObject *arr = py_sl_tensor_numpy(obj);
    Py_DECREF(obj);
    return arr;
}

/* The dict key for column c: the cached name when it matches (the usual
 * case: batches have the pipeline's columns in its order), else a new str. */
static PyObject *column_key(PyObject *colnames, sl_batch *b, int c) {
    const char *name = sl_batch_name(b, c);
    if (colnames && c < PyTuple_Size(colnames)) {
        PyObject *k = PyTuple_GetItem(colnames, c);
        if (strcmp(py_sl_utf8(k), name) == 0)
            return Py_NewRef(k);
    }
    return PyUnicode_FromString(name);
}

/* A text column's bytes as str: 1-D (one sample) gives a str, 2-D (a
 * stacked batch of equal lengths) a list of str. Bytes that are not UTF-8
 * (a file name on Linux may be any bytes) decode with surrogateescape, as
 * os.fsdecode does, so a path still names its file. NULL with a Python error
 * when the tensor is not host bytes. */
static PyObject *text_value(const sl_tensor *t) {
    if (t->device == SL_DEVICE_CUDA) {
        PyErr_SetString(PyExc_BufferError, "a text column in device memory cannot become str: "
                        ".select() the columns the device needs");
        return NULL;
    }
    if (t->dtype != SL_U8 || t->ndim < 1 || t->ndim > 2) {
        PyErr_Format(PyExc_RuntimeError, "text column: unexpected tensor (dtype %d, %d dims)",
                     (int)t->dtype, (int)t->ndim);
        return NULL;
    }
    const char *p = t->data;
    if (t->ndim == 1)
        return PyUnicode_DecodeUTF8(p, (Py_ssize_t)t->shape[0], "surrogateescape");
    Py_ssize_t rows = (Py_ssize_t)t->shape[0], len = (Py_ssize_t)t->shape[1];
    PyObject *list = PyList_New(rows);
    for (Py_ssize_t i = 0; list && i < rows; i++) {
        PyObject *e = PyUnicode_DecodeUTF8(p + i * len, len, "surrogateescape");
        if (!e)
            Py_CLEAR(list);
        else
            PyList_SetItem(list, i, e);
    }
    return list;
}

/* Ragged column c of a batch as a list of its items: each a str (a text
 * column, whose items are 1-D) or an exported tensor. */
static PyObject *ragged_column(sl_batch *b, int c, int text, int as_numpy) {
    int64_t k = sl_batch_size(b);
    PyObject *v = PyList_New((Py_ssize_t)k);
    for (int64_t i = 0; v && i < k; i++) {
        const sl_tensor *it = sl_batch_item(b, c, i);
        PyObject *e = !it ? NULL
                      : text ? (it->ndim == 1 ? text_value(it) : NULL)
                             : export_tensor(it, as_numpy);
        if (!e) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_RuntimeError, "batch column %d item %lld missing", c,
                             (long long)i);
            Py_CLEAR(v);
        } else {
            PyList_SetItem(v, (Py_ssize_t)i, e);
        }
    }
    return v;
}

static PyObject *batch_to_dict(sl_batch *b, int as_numpy, PyObject *colnames,
                               uint32_t text_cols) {
    PyObject *d = PyDict_New();
    int n = sl_batch_ncols(b);
    for (int c = 0; d && c < n; c++) {
        PyObject *v;
        int text = c < 32 && (text_cols >> c & 1u);
        if (sl_batch_is_ragged(b, c)) {
            v = ragged_column(b, c, text, as_numpy);
        } else if (text) {
            const sl_tensor *t = sl_batch_column(b, c);
            v = t ? text_value(t) : NULL;
            if (!t)
                PyErr_Format(PyExc_RuntimeError, "batch column %d missing", c);
        } else {
            const sl_tensor *t = sl_batch_column(b, c);
            v = t ? export_tensor(t, as_numpy) : NULL;
            if (!t)
                PyErr_Format(PyExc_RuntimeError, "batch column %d missing", c);
        }
        PyObject *key = v ? column_key(colnames, b, c) : NULL;
        if (!key || PyDict_SetItem(d, key, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(key);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *next_common(PySlPipeline *self, int as_numpy) {
    if (pipeline_own(self) < 0)
        return NULL;
    sl_batch *b = NULL;
    int r = wait_batch(self, &b);
    PyObject *d = NULL;
    if (r > 0) {
        /* still owned: colnames lives until close */
        d = batch_to_dict(b, as_numpy, self->colnames, self->text_cols);
        sl_batch_release(b);
    } else if (r == 0) {
        d = Py_NewRef(Py_None);
    }
    pipeline_disown(self);
    return d;
}

static PyObject *pipeline_next(PySlPipeline *self, PyObject *unused) {
    return next_common(self, 0);
}
static PyObject *pipeline_next_numpy(PySlPipeline *self, PyObject *unused) {
    return next_common(self, 1);
}

/* _next_raw(): (dict of Tensors, data pointer of each column) for tests of
 * zero copy: the pointers are read from the engine's batch itself. */
static PyObject *pipeline_next_raw(PySlPipeline *self, PyObject *unused) {
    if (pipeline_own(self) < 0)
        return NULL;
    sl_batch *b = NULL;
    int r = wait_batch(self, &b);
    if (r <= 0) {
        pipeline_disown(self);
        if (r == 0)
            Py_RETURN_NONE;
        return NULL;
    }
    PyObject *d = batch_to_dict(b, 0, self->colnames, self->text_cols);
    pipeline_disown(self);
    PyObject *ptrs = d ? PyDict_New() : NULL;
    for (int c = 0; ptrs && c < sl_batch_ncols(b); c++) {
        const sl_tensor *t = sl_batch_column(b, c);
        PyObject *v = PyLong_FromVoidPtr(t ? t->data : NULL);
        if (!v || PyDict_SetItemString(ptrs, sl_batch_name(b, c), v) < 0)
            Py_CLEAR(ptrs);
        Py_XDECREF(v);
    }
    sl_batch_release(b);
    if (!ptrs) {
        Py_XDECREF(d);
        return NULL;
    }
    return Py_BuildValue("(NN)", d, ptrs);
}

static PyObject *pipeline_set_epoch(PySlPipeline *self, PyObject *arg) {
    unsigned long long e = PyLong_AsUnsignedLongLong(arg);
    if (e == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (pipeline_own(self) < 0)
        return NULL;
    int rc;
    sl_pipeline *p = self->p;
    int was_failed = self->failed;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_pipeline_set_epoch(p, (uint64_t)e);
    Py_END_ALLOW_THREADS
    if (rc >= 0 && was_failed) {
        drop_map_exceptions(self);
        self->failed = 0;
    }
    pipeline_disown(self);
    if (rc < 0)
        return py_sl_raise(rc);
    Py_RETURN_NONE;
}

/* Call an snprintf-style engine function and return its text as str. */
typedef int (*text_fn)(const sl_pipeline *p, char *buf, size_t cap, size_t *len_out);
static PyObject *engine_text_in(const sl_pipeline *p, text_fn fn) {
    char small[4096];
    size_t len = 0;
    int rc = fn(p, small, sizeof small, &len);
    if (rc < 0)
        return py_sl_raise(rc);
    if (len < sizeof small)
        return PyUnicode_FromStringAndSize(small, (Py_ssize_t)len);
    /* Stats keep changing while workers run, so the text can grow between
     * the sizing call and the filling one: retry until it fits. */
    for (;;) {
        size_t cap = len + 1024;
        char *big = PyMem_Malloc(cap);
        if (!big)
            return PyErr_NoMemory();
        rc = fn(p, big, cap, &len);
        if (rc >= 0 && len >= cap) {
            PyMem_Free(big);
            continue;
        }
        PyObject *s = rc < 0 ? py_sl_raise(rc)
                             : PyUnicode_FromStringAndSize(big, (Py_ssize_t)len);
        PyMem_Free(big);
        return s;
    }
}

/* `any_thread`: the engine allows fn beside the consumer (stats); else fn
 * reads the consumer's state and is a consumer call itself. */
static PyObject *engine_text(PySlPipeline *self, text_fn fn, int any_thread) {
    sl_pipeline *p = any_thread ? pipeline_use(self) : pipeline_own(self) == 0 ? self->p : NULL;
    if (!p)
        return NULL;
    PyObject *s = engine_text_in(p, fn);
    if (any_thread)
        pipeline_leave(self);
    else
        pipeline_disown(self);
    return s;
}

static PyObject *pipeline_state(PySlPipeline *self, PyObject *unused) {
    return engine_text(self, sl_pipeline_save_state, 0);
}
static PyObject *pipeline_stats(PySlPipeline *self, PyObject *unused) {
    return engine_text(self, sl_pipeline_stats_json, 1);
}
static PyObject *pipeline_explain(PySlPipeline *self, PyObject *unused) {
    return engine_text(self, sl_pipeline_explain, 0);
}

static PyObject *pipeline_trace(PySlPipeline *self, PyObject *unused) {
    return engine_text(self, sl_pipeline_trace_json, 0);
}

static PyObject *pipeline_trace_enable(PySlPipeline *self, PyObject *arg) {
    size_t n = PyLong_AsSize_t(arg);
    if (n == (size_t)-1 && PyErr_Occurred())
        return NULL;
    if (pipeline_own(self) < 0)
        return NULL;
    int rc = sl_pipeline_trace_enable(self->p, n);
    pipeline_disown(self);
    if (rc < 0)
        return py_sl_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *pipeline_restore(PySlPipeline *self, PyObject *arg) {
    const char *json = py_sl_utf8(arg);
    if (!json)
        return NULL;
    if (pipeline_own(self) < 0)
        return NULL;
    int rc;
    sl_pipeline *p = self->p;
    int was_failed = self->failed;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_pipeline_restore_state(p, json);
    Py_END_ALLOW_THREADS
    if (rc >= 0 && was_failed) {
        drop_map_exceptions(self);
        self->failed = 0;
    }
    pipeline_disown(self);
    if (rc < 0)
        return py_sl_raise(rc);
    Py_RETURN_NONE;
}

/* _drain(): consume the rest of the epoch in C — sl_pipeline_next and
 * sl_batch_release, nothing else, the GIL released throughout — and return
 * (batches, samples). The baseline bench/py_overhead.py compares Python
 * iteration with, in the same process and on the same pipeline. */
static PyObject *pipeline_drain(PySlPipeline *self, PyObject *unused) {
    if (pipeline_own(self) < 0)
        return NULL;
    sl_pipeline *p = self->p;
    long long batches = 0, samples = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    sl_batch *b;
    while ((rc = sl_pipeline_next(p, &b)) == SL_OK) {
        batches++;
        samples += (long long)sl_batch_size(b);
        sl_batch_release(b);
    }
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        if (!raise_map_exception(self))
            py_sl_raise(rc);
        pipeline_disown(self);
        return NULL;
    }
    pipeline_disown(self);
    return Py_BuildValue("(LL)", batches, samples);
}

/* In a forked child the engine's threads are gone: freeing would wait for
 * them forever, so the pipeline is dropped without freeing (the child's copy
 * of its memory is simply not reused). Called from os.register_at_fork. */
static PyObject *pipeline_after_fork(PySlPipeline *self, PyObject *unused) {
    /* Only this thread exists in the child. */
    if (self->p) {
        self->p = NULL;
        self->forked = 1;
    }
    py_sl_gate_reset(&self->gate);
    Py_RETURN_NONE;
}

static PyObject *pipeline_get_forked(PySlPipeline *self, void *closure) {
    return PyBool_FromLong(self->forked);
}

static PyObject *pipeline_length(PySlPipeline *self, PyObject *unused) {
    if (pipeline_own(self) < 0)
        return NULL;
    long long n = (long long)sl_pipeline_len(self->p);
    pipeline_disown(self);
    return PyLong_FromLongLong(n);
}

static PyObject *pipeline_get_columns(PySlPipeline *self, void *closure) {
    sl_pipeline *p = pipeline_use(self);
    if (!p)
        return NULL;
    int n = sl_pipeline_ncols(p);
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < n; i++) {
        PyObject *s = PyUnicode_FromString(sl_pipeline_column_name(p, i));
        if (!s || PyList_Append(list, s) < 0)
            Py_CLEAR(list);
        Py_XDECREF(s);
    }
    pipeline_leave(self);
    return list;
}

/* The consumer's epoch: a consumer call (next() changes it). */
static PyObject *pipeline_get_epoch(PySlPipeline *self, void *closure) {
    if (pipeline_own(self) < 0)
        return NULL;
    unsigned long long e = (unsigned long long)sl_pipeline_epoch(self->p);
    pipeline_disown(self);
    return PyLong_FromUnsignedLongLong(e);
}

static PyObject *pipeline_get_epochs(PySlPipeline *self, void *closure) {
    sl_pipeline *p = pipeline_use(self);
    if (!p)
        return NULL;
    long long n = (long long)sl_pipeline_epochs(p);
    pipeline_leave(self);
    return PyLong_FromLongLong(n);
}

static PyMethodDef pipeline_methods[] = {
    {"next", (PyCFunction)pipeline_next, METH_NOARGS,
     "next() -> dict of Tensors, or None at the end of the epoch."},
    {"next_numpy", (PyCFunction)pipeline_next_numpy, METH_NOARGS,
     "next_numpy() -> dict of numpy arrays sharing the engine's memory, or None."},
    {"_next_raw", (PyCFunction)pipeline_next_raw, METH_NOARGS,
     "(dict of Tensors, dict of the engine's data pointers) or None; for tests."},
    {"set_epoch", (PyCFunction)pipeline_set_epoch, METH_O, "Go to the start of an epoch."},
    {"state", (PyCFunction)pipeline_state, METH_NOARGS,
     "The iterator state after the last batch handed out, as JSON text."},
    {"restore", (PyCFunction)pipeline_restore, METH_O, "Continue from a state() text."},
    {"stats", (PyCFunction)pipeline_stats, METH_NOARGS, "Stage counters and verdict, JSON."},
    {"explain", (PyCFunction)pipeline_explain, METH_NOARGS, "The plan, before and after."},
    {"trace_enable", (PyCFunction)pipeline_trace_enable, METH_O,
     "trace_enable(max_events): record worker activity; before the first batch."},
    {"trace", (PyCFunction)pipeline_trace, METH_NOARGS,
     "The recorded trace as Chrome/Perfetto trace-event JSON text."},
    {"length", (PyCFunction)pipeline_length, METH_NOARGS,
     "Batches per epoch, or -1 when not known in advance."},
    {"_drain", (PyCFunction)pipeline_drain, METH_NOARGS,
     "Consume the rest of the epoch in C; (batches, samples). For benchmarks."},
    {"_after_fork", (PyCFunction)pipeline_after_fork, METH_NOARGS,
     "Drop the pipeline without freeing it, in a forked child."},
    {"close", (PyCFunction)pipeline_close, METH_NOARGS,
     "Stop the workers; batches handed out stay valid."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef pipeline_getset[] = {
    {"columns", (getter)pipeline_get_columns, NULL, "Output column names.", NULL},
    {"epoch", (getter)pipeline_get_epoch, NULL, "Epoch of the next batch.", NULL},
    {"epochs", (getter)pipeline_get_epochs, NULL, "The spec's epoch count.", NULL},
    {"forked", (getter)pipeline_get_forked, NULL,
     "True in a forked child: the pipeline's threads stayed in the parent.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

/* __weaklistoffset__: how a type made from a spec says where its weak
 * references live (tp_weaklistoffset is not in the limited API). */
static PyMemberDef pipeline_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(PySlPipeline, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL}};

static PyType_Slot pipeline_slots[] = {
    {Py_tp_dealloc, (void *)pipeline_dealloc},
    {Py_tp_doc, (void *)"Pipeline(spec_json, ops=None, callables=()): a running engine "
                        "pipeline. Use sluice.Dataset instead."},
    {Py_tp_methods, pipeline_methods},
    {Py_tp_getset, pipeline_getset},
    {Py_tp_members, pipeline_members},
    {Py_tp_init, (void *)pipeline_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {0, NULL}};

static PyType_Spec pipeline_spec = {"sluice._sluice.Pipeline", sizeof(PySlPipeline), 0,
                                    Py_TPFLAGS_DEFAULT, pipeline_slots};

int py_sl_pipeline_init(PyObject *m) {
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np)
        return -1;
    np_ascontiguousarray_p = PyObject_GetAttrString(np, "ascontiguousarray");
    np_asarray_p = PyObject_GetAttrString(np, "asarray");
    Py_DECREF(np);
    if (!np_ascontiguousarray_p || !np_asarray_p)
        return -1;
    return py_sl_add_type(m, &pipeline_spec, "Pipeline") ? 0 : -1;
}
