/*
 * curl_api.c — libcurl loaded when the first remote read starts
 * (curl_api.h), or linked (static builds: then there is nothing to load).
 */
#define SL_CURL_API_IMPL 1
#include "io/curl_api.h"

#include "core/core.h"

#ifdef SLUICE_CURL_DLOPEN
#include <pthread.h>
#include <stddef.h>

struct sl_curl_fns sl_curl__fns;

static struct {
    pthread_once_t once;
    void *lib;
    char name[160];
    char missing[384];
} curl = {.once = PTHREAD_ONCE_INIT};

static void load(void) {
    /* SLUICE_LIBCURL names the library to load instead (a path, or a name
     * for the loader's search). libcurl's ABI has been 4 since 2006. */
    static const char *const names[] = {"libcurl.so.4", "libcurl-gnutls.so.4", "libcurl.so"};
    curl.lib = sl__dlopen_first("SLUICE_LIBCURL", names, 3, "libcurl",
                                "remote reading (http, https, s3) needs libcurl 7.68 or later: "
                                "install it (Debian and Ubuntu: libcurl4), or set "
                                "SLUICE_LIBCURL to its path",
                                curl.name, sizeof curl.name, curl.missing, sizeof curl.missing);
    if (!curl.lib)
        return;
    static const sl_dlsym fns[] = {
#define X(f) {#f, offsetof(struct sl_curl_fns, f)},
        SL_CURL_FNS(X)
#undef X
    };
    sl__dlsym_all(&curl.lib, fns, sizeof fns / sizeof fns[0], &sl_curl__fns, curl.name,
                  "libcurl 7.68 or later is needed", curl.missing, sizeof curl.missing);
}

int sl_curl__load(void) {
    pthread_once(&curl.once, load);
    if (!curl.lib)
        return sl__error(SL_EUNSUPPORTED, "%s", curl.missing);
    return SL_OK;
}
#else
int sl_curl__load(void) {
    return SL_OK;
}
#endif
