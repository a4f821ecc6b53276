/*
 * py_ops.c — engine functions called one sample at a time from Python code
 * (sluice.ops, sluice.torch): image decoding with the decode op's decoder,
 * and the per-sample seeds sluice's ops draw from.
 *
 * Decoding releases the GIL for the whole decode, so Python threads running
 * a Dataset's __getitem__ decode in parallel. Each thread keeps one
 * sl_decoder (the decoder is one-thread-at-a-time and holds scratch memory
 * worth reusing), in a pthread key whose destructor frees it when the thread
 * ends.
 */
#include "pysluice.h"

#include <pthread.h>
#include <string.h>

static pthread_key_t decoder_key;
static pthread_once_t decoder_once = PTHREAD_ONCE_INIT;
static int decoder_key_rc;

static void decoder_destroy(void *dec) {
    sl_decoder_free((sl_decoder *)dec);
}

static void decoder_key_create(void) {
    decoder_key_rc = pthread_key_create(&decoder_key, decoder_destroy);
}

/* This thread's decoder, created on first use. Runs without the GIL. */
static int thread_decoder(sl_decoder **out) {
    pthread_once(&decoder_once, decoder_key_create);
    if (decoder_key_rc != 0)
        return SL_ENOMEM;
    sl_decoder *dec = pthread_getspecific(decoder_key);
    if (!dec) {
        int rc = sl_decoder_create(&dec);
        if (rc < 0)
            return rc;
        if (pthread_setspecific(decoder_key, dec) != 0) {
            sl_decoder_free(dec);
            return SL_ENOMEM;
        }
    }
    *out = dec;
    return SL_OK;
}

/* decode_image(data, mode="rgb", exif_orientation=False, warnings="default",
 * max_pixels=0) -> Tensor (H, W, C) uint8. */
static PyObject *py_decode_image(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"data", "mode", "exif_orientation", "warnings", "max_pixels",
                             NULL};
    PyObject *data;
    const char *mode = "rgb", *warnings = "default";
    int exif = 0;
    long long max_pixels = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|spsL:decode_image", kwlist, &data, &mode,
                                     &exif, &warnings, &max_pixels))
        return NULL;
    sl_color color;
    if (strcmp(mode, "rgb") == 0)
        color = SL_COLOR_RGB;
    else if (strcmp(mode, "gray") == 0)
        color = SL_COLOR_GRAY;
    else
        return PyErr_Format(PyExc_ValueError, "mode: expected 'rgb' or 'gray', got '%s'", mode);
    int64_t warn;
    if (strcmp(warnings, "default") == 0)
        warn = SL_WARNINGS_DEFAULT;
    else if (strcmp(warnings, "strict") == 0)
        warn = SL_WARNINGS_STRICT;
    else if (strcmp(warnings, "lenient") == 0)
        warn = SL_WARNINGS_LENIENT;
    else
        return PyErr_Format(PyExc_ValueError,
                            "warnings: expected 'default', 'strict' or 'lenient', got '%s'",
                            warnings);
    if (max_pixels < 0)
        return PyErr_Format(PyExc_ValueError, "max_pixels: expected >= 0, got %lld",
                            max_pixels);
    Py_buffer view;
    /* PyBUF_SIMPLE: a bytearray cannot be resized while this export lives,
     * so the bytes stay put while the GIL is released. */
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    sl_tensor out;
    memset(&out, 0, sizeof out);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    sl_decoder *dec = NULL;
    rc = thread_decoder(&dec);
    if (rc == SL_OK)
        rc = sl_decoder_set(dec, SL_DECODE_WARNINGS, warn);
    if (rc == SL_OK)
        rc = sl_decoder_set(dec, SL_DECODE_EXIF_ORIENTATION, exif);
    if (rc == SL_OK)
        rc = sl_decoder_set(dec, SL_DECODE_MAX_PIXELS,
                            max_pixels ? (int64_t)max_pixels : (int64_t)64 * 1024 * 1024);
    if (rc == SL_OK)
        rc = sl_decode(dec, view.buf, (size_t)view.len, color, &out);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc < 0)
        return py_sl_raise(rc);
    return py_sl_tensor_from(&out);
}

/* sample_seed(seed, epoch, index, op=0) -> int: the first 64 bits of the
 * generator sluice's ops key by (seed, epoch, index, op). */
static PyObject *py_sample_seed(PyObject *self, PyObject *args) {
    unsigned long long seed, epoch, index, op = 0;
    if (!PyArg_ParseTuple(args, "KKK|K:sample_seed", &seed, &epoch, &index, &op))
        return NULL;
    sl_rng rng;
    sl_rng_init(&rng, seed, epoch, index, op);
    return PyLong_FromUnsignedLongLong(sl_rng_next(&rng));
}

static PyMethodDef ops_methods[] = {
    {"decode_image", (PyCFunction)(void (*)(void))py_decode_image, METH_VARARGS | METH_KEYWORDS,
     "decode_image(data, mode='rgb', exif_orientation=False, warnings='default', "
     "max_pixels=0): decode a JPEG, PNG or WebP (bytes-like) with the decode op's decoder "
     "into an (H, W, C) uint8 Tensor, without the GIL. max_pixels 0: the decoder's default "
     "cap (64 Mpx)."},
    {"sample_seed", py_sample_seed, METH_VARARGS,
     "sample_seed(seed, epoch, index, op=0): the 64-bit seed of sample `index`, keyed as "
     "sluice's ops key their random draws."},
    {NULL, NULL, 0, NULL}};

int py_sl_ops_init(PyObject *m) {
    return PyModule_AddFunctions(m, ops_methods);
}
