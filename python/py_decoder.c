/* py_decoder.c — one sl_decoder per thread (py_decoder.h). */
#include "py_decoder.h"

#include <pthread.h>

static pthread_key_t key;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int key_rc;

static void destroy(void *dec) { sl_decoder_free((sl_decoder *)dec); }
static void make_key(void) { key_rc = pthread_key_create(&key, destroy); }

int py_sl_thread_decoder(sl_decoder **out) {
    pthread_once(&once, make_key);
    if (key_rc != 0)
        return SL_ENOMEM;
    sl_decoder *dec = pthread_getspecific(key);
    if (!dec) {
        int rc = sl_decoder_create(&dec);
        if (rc < 0)
            return rc;
        if (pthread_setspecific(key, dec) != 0) {
            sl_decoder_free(dec);
            return SL_ENOMEM;
        }
    }
    *out = dec;
    return SL_OK;
}
