/*
 * curl_api.h — libcurl, as the remote provider reaches it (http.c,
 * readahead.c, io_remote.c include it through http.h).
 *
 * Built against a shared libcurl (SLUICE_CURL_DLOPEN, the default unless the
 * C libraries are linked statically), libsluice does not link it: it is
 * loaded with dlopen when the first remote read starts (sl_curl__load, from
 * sl_http__init). A distribution's libcurl brings some twenty libraries of
 * its own (Debian's: gnutls through librtmp, krb5, ldap, ssh2, p11-kit...),
 * whose initialisers ran in every process that imported sluice, reading
 * remote data or not: 3.7 MB of memory with torch's Python (bench/README.md,
 * "Pillow's samples into the batch"). A static build (the wheels,
 * scripts/wheel.sh) links a curl of its own, built without them.
 *
 * The calls keep libcurl's names: under SLUICE_CURL_DLOPEN each name is a
 * macro onto the loaded function. That build compiles without curl's
 * option-type checks (CURL_DISABLE_TYPECHECK: its macros call the linked
 * function); the test command's ASan build links libcurl and keeps them.
 */
#ifndef SL_IO_CURL_API_H
#define SL_IO_CURL_API_H

#ifdef SLUICE_CURL_DLOPEN
#define CURL_DISABLE_TYPECHECK 1
#endif
#include <curl/curl.h>

/* libcurl ready to call (loaded once): SL_OK, or SL_EUNSUPPORTED with a
 * message naming what to install (or the SLUICE_LIBCURL that failed). */
int sl_curl__load(void);

#ifdef SLUICE_CURL_DLOPEN
#define SL_CURL_FNS(X)                                                                       \
    X(curl_global_init) X(curl_version_info) X(curl_getdate) X(curl_easy_init)             \
    X(curl_easy_cleanup) X(curl_easy_reset) X(curl_easy_setopt) X(curl_easy_getinfo)      \
    X(curl_easy_perform) X(curl_easy_strerror) X(curl_multi_init) X(curl_multi_cleanup)    \
    X(curl_multi_setopt) X(curl_multi_add_handle) X(curl_multi_remove_handle)              \
    X(curl_multi_perform) X(curl_multi_poll) X(curl_multi_wakeup) X(curl_multi_info_read)  \
    X(curl_share_init) X(curl_share_setopt) X(curl_slist_append) X(curl_slist_free_all)

struct sl_curl_fns {
#define X(f) __typeof__(f) *f;
    SL_CURL_FNS(X)
#undef X
};
extern struct sl_curl_fns sl_curl__fns;

#ifndef SL_CURL_API_IMPL /* curl_api.c, which fills the table, keeps the names */
/* curl.h defines these four as macros of themselves (for old compilers) */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt
#undef curl_share_setopt
#define curl_global_init (sl_curl__fns.curl_global_init)
#define curl_version_info (sl_curl__fns.curl_version_info)
#define curl_getdate (sl_curl__fns.curl_getdate)
#define curl_easy_init (sl_curl__fns.curl_easy_init)
#define curl_easy_cleanup (sl_curl__fns.curl_easy_cleanup)
#define curl_easy_reset (sl_curl__fns.curl_easy_reset)
#define curl_easy_setopt (sl_curl__fns.curl_easy_setopt)
#define curl_easy_getinfo (sl_curl__fns.curl_easy_getinfo)
#define curl_easy_perform (sl_curl__fns.curl_easy_perform)
#define curl_easy_strerror (sl_curl__fns.curl_easy_strerror)
#define curl_multi_init (sl_curl__fns.curl_multi_init)
#define curl_multi_cleanup (sl_curl__fns.curl_multi_cleanup)
#define curl_multi_setopt (sl_curl__fns.curl_multi_setopt)
#define curl_multi_add_handle (sl_curl__fns.curl_multi_add_handle)
#define curl_multi_remove_handle (sl_curl__fns.curl_multi_remove_handle)
#define curl_multi_perform (sl_curl__fns.curl_multi_perform)
#define curl_multi_poll (sl_curl__fns.curl_multi_poll)
#define curl_multi_wakeup (sl_curl__fns.curl_multi_wakeup)
#define curl_multi_info_read (sl_curl__fns.curl_multi_info_read)
#define curl_share_init (sl_curl__fns.curl_share_init)
#define curl_share_setopt (sl_curl__fns.curl_share_setopt)
#define curl_slist_append (sl_curl__fns.curl_slist_append)
#define curl_slist_free_all (sl_curl__fns.curl_slist_free_all)
#endif
#endif

#endif
