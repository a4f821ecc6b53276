/*
 * dlopen.c — shared libraries loaded when first needed (core.h,
 * sl__dlopen_first): the CUDA runtime and nvJPEG (device/), libcurl (io/,
 * curl_api.h).
 */
#include "core/core.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

void *sl__dlopen_first(const char *setting, const char *const *names, int n, const char *what,
                       const char *hint, char *name_out, size_t name_cap, char *missing,
                       size_t missing_cap) {
    const char *env = setting ? sl__setting_str(setting) : NULL;
    if (env) {
        void *lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char *why = dlerror();
            snprintf(missing, missing_cap, "%s=%.150s could not be loaded (%.120s); unset it to "
                     "use the installed %s", setting, env, why ? why : "?", what);
            return NULL;
        }
        snprintf(name_out, name_cap, "%s", env);
        return lib;
    }
    for (int i = 0; i < n; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            snprintf(name_out, name_cap, "%s", names[i]);
            return lib;
        }
    }
    snprintf(missing, missing_cap, "%s not found (%s)", names[0], hint);
    return NULL;
}

int sl__dlsym_all(void **lib, const sl_dlsym *syms, size_t n, void *table, const char *lib_name,
                  const char *why, char *missing, size_t missing_cap) {
    for (size_t i = 0; i < n; i++) {
        void *f = dlsym(*lib, syms[i].name);
        if (!f) {
            snprintf(missing, missing_cap, "%s lacks %s%s%s%s", lib_name, syms[i].name,
                     why ? " (" : "", why ? why : "", why ? ")" : "");
            dlclose(*lib);
            *lib = NULL;
            return -1;
        }
        memcpy((char *)table + syms[i].off, &f, sizeof f);
    }
    return 0;
}
