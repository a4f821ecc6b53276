/*
 * py_decoder.h — the calling thread's sl_decoder, for the extension's
 * per-sample decode calls (sluice.transforms; sluice.ops can share it). No
 * Python here: callers run it with the GIL released, and files written to
 * CPython's limited API include it as well as the others.
 */
#ifndef PY_DECODER_H
#define PY_DECODER_H

#include "sluice.h"

/* This thread's decoder, made on first use and freed when the thread ends
 * (a pthread key's destructor): SL_OK, or SL_ENOMEM. A decoder is
 * one-thread-at-a-time and keeps scratch memory worth reusing, so each
 * thread keeps its own. Callers set the tunables they need on every call. */
int py_sl_thread_decoder(sl_decoder **out);

#endif
