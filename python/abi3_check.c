/*
 * abi3_check.c — compiled, never run: the buffer-protocol declarations that
 * pysluice.h gives a 3.10 limited-API build (PY_SL_BUFFER_FIELDS) must lay
 * Py_buffer out exactly as this interpreter's own headers do, field by field,
 * and name the same slot and flag numbers. Built with the full API, beside
 * the limited-API module (python/CMakeLists.txt).
 */
#include "pysluice.h"

#include <stddef.h>

typedef struct {
    PY_SL_BUFFER_FIELDS
} py_sl_buffer_310;

#define SAME_FIELD(f)                                                                      \
    _Static_assert(offsetof(py_sl_buffer_310, f) == offsetof(Py_buffer, f) &&              \
                       sizeof(((py_sl_buffer_310 *)0)->f) == sizeof(((Py_buffer *)0)->f), \
                   "Py_buffer." #f " differs from pysluice.h's")
SAME_FIELD(buf);
SAME_FIELD(obj);
SAME_FIELD(len);
SAME_FIELD(itemsize);
SAME_FIELD(readonly);
SAME_FIELD(ndim);
SAME_FIELD(format);
SAME_FIELD(shape);
SAME_FIELD(strides);
SAME_FIELD(suboffsets);
SAME_FIELD(internal);
_Static_assert(sizeof(py_sl_buffer_310) == sizeof(Py_buffer), "Py_buffer's size differs");
_Static_assert(Py_bf_getbuffer == 1, "the Py_bf_getbuffer slot number differs");
_Static_assert(PyBUF_SIMPLE == 0 && PyBUF_WRITABLE == 0x0001 && PyBUF_FORMAT == 0x0004 &&
                   PyBUF_ND == 0x0008 && PyBUF_STRIDES == (0x0010 | PyBUF_ND) &&
                   PyBUF_C_CONTIGUOUS == (0x0020 | PyBUF_STRIDES),
               "a PyBUF_ flag differs");

/* an object file must not be empty */
int py_sl_abi3_checked(void);
int py_sl_abi3_checked(void) { return 1; }
