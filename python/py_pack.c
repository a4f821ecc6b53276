/*
 * py_pack.c — sluice._sluice.pack: pack an ImageFolder, IDX files, TFRecord
 * files, tar shards or a .slr dataset into a .slr dataset, with the GIL
 * released for the whole job; and sluice._sluice.detect, the format a path
 * holds.
 */
#include "pysluice.h"

#include <string.h>
#include <time.h>

typedef struct {
    PyObject *callback;     /* Python progress(done, total, bytes) or NULL */
    int failed;             /* the callback raised: keep the first exception */
    PyObject *et, *ev, *tb; /* that exception, re-raised after the pack */
    uint64_t next_poll_ns;  /* the stop poll's next look at the signals */
    int interrupted;        /* a signal handler raised (KeyboardInterrupt): stop */
    PyObject *st, *sv, *stb; /* that exception, raised when the pack has stopped */
} pack_progress;

/* Runs on the thread that called pack (the engine calls progress there),
 * with the GIL released: take it just for the call. Only that thread touches
 * `p`, so it needs no lock without the GIL either. */
static void on_progress(uint64_t done, uint64_t total, uint64_t bytes, void *user) {
    pack_progress *p = user;
    PyGILState_STATE g = PyGILState_Ensure();
    if (!p->failed) {
        PyObject *r = PyObject_CallFunction(p->callback, "KKK", (unsigned long long)done,
                                            (unsigned long long)total,
                                            (unsigned long long)bytes);
        if (!r) {
            p->failed = 1;
            PyErr_Fetch(&p->et, &p->ev, &p->tb);
        }
        Py_XDECREF(r);
    }
    PyGILState_Release(g);
}

/* The pack's stop poll (sl_pack_options.stop), on the calling thread between
 * records, the GIL released: every 50 ms it takes the GIL and runs Python's
 * signal handlers, so that Ctrl-C (KeyboardInterrupt) stops the pack within
 * a second, with its records kept in DST.partial, instead of once it ends. */
static int on_stop(void *user, int fresh) {
    pack_progress *p = user;
    if (p->interrupted)
        return 1;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    if (now < p->next_poll_ns && !fresh)
        return 0;
    p->next_poll_ns = now + 50000000u;
    PyGILState_STATE g = PyGILState_Ensure();
    if (PyErr_CheckSignals() < 0) {
        p->interrupted = 1;
        PyErr_Fetch(&p->st, &p->sv, &p->stb);
    }
    PyGILState_Release(g);
    return p->interrupted;
}

static PyObject *py_pack(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"srcs", "dst", "jobs", "skip_bad", "shard_bytes", "progress",
                             "check", "jpeg_restart", "resume", NULL};
    PyObject *srcs_obj, *dst_obj = NULL, *progress = Py_None;
    int jobs = 0, skip_bad = 0, resume = 0;
    unsigned long long shard_bytes = 0;
    const char *check = "header", *restart = "off";
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO&|ipKOssp:pack", kwlist, &srcs_obj,
                                     PyUnicode_FSConverter, &dst_obj, &jobs, &skip_bad,
                                     &shard_bytes, &progress, &check, &restart, &resume))
        return NULL;
    PyObject *result = NULL, *seq = NULL, **enc = NULL;
    const char **srcs = NULL;
    Py_ssize_t n = 0;
    if (jobs < 0) {
        PyErr_Format(PyExc_ValueError, "jobs: must be >= 0 (0 = one per CPU), got %d", jobs);
        goto done;
    }
    int check_mode = SL_PACK_CHECK_HEADER;
    if (!strcmp(check, "decode")) {
        check_mode = SL_PACK_CHECK_DECODE;
    } else if (strcmp(check, "header") != 0) {
        PyErr_Format(PyExc_ValueError, "check: expected 'header' or 'decode', got '%s'", check);
        goto done;
    }
    int restart_mode = SL_JPEG_RESTART_OFF;
    if (!strcmp(restart, "auto")) {
        restart_mode = SL_JPEG_RESTART_AUTO;
    } else if (!strcmp(restart, "rows")) {
        restart_mode = SL_JPEG_RESTART_ROWS;
    } else if (strcmp(restart, "off") != 0) {
        PyErr_Format(PyExc_ValueError, "jpeg_restart: expected 'off', 'auto' or 'rows', got '%s'",
                     restart);
        goto done;
    }
    if (progress != Py_None && !PyCallable_Check(progress)) {
        PyErr_SetString(PyExc_TypeError, "progress: expected a callable or None");
        goto done;
    }
    seq = py_sl_sequence(srcs_obj, "srcs: expected a list of paths");
    if (!seq)
        goto done;
    n = PyTuple_Size(seq);
    if (n < 1 || n > 64) {
        PyErr_Format(PyExc_ValueError, "srcs: expected 1..64 paths, got %zd", n);
        goto done;
    }
    enc = PyMem_Calloc((size_t)n, sizeof *enc);
    srcs = PyMem_Calloc((size_t)n, sizeof *srcs);
    if (!enc || !srcs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_FSConverter(PyTuple_GetItem(seq, i), &enc[i])) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "srcs[%zd]: expected a path (str or os.PathLike)", i);
            goto done;
        }
        srcs[i] = PyBytes_AsString(enc[i]);
    }
    sl_pack_options opts = SL_PACK_OPTIONS_INIT;
    opts.jobs = jobs;
    opts.skip_bad = skip_bad;
    opts.shard_bytes = shard_bytes;
    opts.check = check_mode;
    opts.jpeg_restart = restart_mode;
    opts.resume = resume;
    pack_progress prog = {progress != Py_None ? progress : NULL, 0, NULL, NULL, NULL,
                          0, 0, NULL, NULL, NULL};
    if (prog.callback)
        opts.progress = on_progress;
    opts.stop = on_stop;
    opts.user = &prog;
    sl_pack_report rep;
    memset(&rep, 0, sizeof rep);
    const char *dst = PyBytes_AsString(dst_obj);
    int rc;
    /* As `sluice pack` does: inputs without a packer of their own (TFRecord,
     * tar shards, .slr) go through their source, whose kind names them in the
     * report ("tfrecord", "webdataset", "slr"), the words the CLI prints. */
    sl_pack_kind kind = SL_PACK_UNKNOWN;
    sl_source *src = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_pack_detect(srcs, (int)n, &kind);
    if (rc == SL_OK && kind == SL_PACK_SOURCE)
        rc = sl_source_open_paths(&src, srcs, (int)n, NULL);
    if (rc == SL_OK)
        rc = src ? sl_pack_source(src, dst, &opts, &rep)
                 : sl_pack(srcs, (int)n, dst, &opts, &rep);
    Py_END_ALLOW_THREADS
    const char *kind_name = src ? sl_source_kind(src) : sl_pack_kind_name(kind);
    sl_source_free(src);
    if (rc < 0) {
        Py_XDECREF(prog.et);
        Py_XDECREF(prog.ev);
        Py_XDECREF(prog.tb);
        if (rc == SL_ECANCELED && prog.interrupted) { /* KeyboardInterrupt, as raised */
            PyErr_Restore(prog.st, prog.sv, prog.stb);
            goto done;
        }
        Py_XDECREF(prog.st);
        Py_XDECREF(prog.sv);
        Py_XDECREF(prog.stb);
        py_sl_raise(rc);
        goto done;
    }
    if (prog.failed) {
        PyErr_Restore(prog.et, prog.ev, prog.tb);
        goto done;
    }
    PyObject *bad = PyList_New(0);
    for (int i = 0; bad && i < rep.nbad && i < SL_PACK_REPORT_BAD; i++) {
        PyObject *line = PyUnicode_DecodeUTF8(rep.bad[i], (Py_ssize_t)strnlen(rep.bad[i],
                                              SL_PACK_REPORT_LINE), "replace");
        if (!line || PyList_Append(bad, line) < 0)
            Py_CLEAR(bad);
        Py_XDECREF(line);
    }
    if (bad)
        result = Py_BuildValue("{s:s,s:K,s:K,s:K,s:i,s:N}", "kind", kind_name, "records",
                               (unsigned long long)rep.records, "bytes",
                               (unsigned long long)rep.bytes, "skipped",
                               (unsigned long long)rep.skipped, "classes", rep.nclasses,
                               "bad", bad);
done:
    for (Py_ssize_t i = 0; enc && i < n; i++)
        Py_XDECREF(enc[i]);
    PyMem_Free(enc);
    PyMem_Free(srcs);
    Py_XDECREF(seq);
    Py_XDECREF(dst_obj);
    return result;
}

/* detect(path) -> the spec's source key for the format at `path` ("path",
 * "image_folder", "idx", "tfrecord", "webdataset"), or None when it is none
 * of them or cannot be read. Only for messages: never raises an engine error. */
static PyObject *py_detect(PyObject *self, PyObject *args) {
    PyObject *arg, *enc = NULL;
    int strict = 0;
    if (!PyArg_ParseTuple(args, "O|p:detect", &arg, &strict))
        return NULL;
    if (!PyUnicode_FSConverter(arg, &enc))
        return NULL;
    const char *path = PyBytes_AsString(enc);
    const char *key = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sl_source_detect(&path, 1, &key);
    Py_END_ALLOW_THREADS
    Py_DECREF(enc);
    if (rc != SL_OK && strict)
        return py_sl_raise(rc);
    if (rc != SL_OK) {
        sl_errclear();
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(key);
}

static PyMethodDef pack_methods[] = {
    {"detect", (PyCFunction)py_detect, METH_VARARGS,
     "detect(path, strict=False) -> 'path' | 'image_folder' | 'idx' | 'tfrecord' | 'webdataset' "
     "| None (strict: raise why not)"},
    {"pack", (PyCFunction)(void (*)(void))py_pack, METH_VARARGS | METH_KEYWORDS,
     "pack(srcs, dst, jobs=0, skip_bad=False, shard_bytes=0, progress=None, check='header', "
     "jpeg_restart='off', resume=False) -> dict"},
    {NULL, NULL, 0, NULL}};

int py_sl_pack_init(PyObject *m) {
    return PyModule_AddFunctions(m, pack_methods);
}
