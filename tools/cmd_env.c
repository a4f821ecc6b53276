/* cmd_env.c — `sluice env`: every SLUICE_* setting from the library's table
 * (sl_setting_get) and every parameter of a pipeline spec (sl_spec_param_get),
 * each with its value and where the value comes from. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: sluice env [SPEC.json] [--json]\n"
               "\n"
               "Print every SLUICE_* environment variable sluice reads, then every parameter\n"
               "of a pipeline spec: its value and where the value comes from (default,\n"
               "environment, or spec: the SPEC.json given; its \"cache_bytes\" wins over\n"
               "SLUICE_CACHE_BYTES for the pipelines it builds), then its type, range, the\n"
               "layer that reads it and one line about it.\n"
               "\n"
               "options:\n"
               "  --json      one JSON array on stdout: {name, kind (setting or spec), value,\n"
               "              source, type, range, default, layer, doc} per row\n"
               "  -h, --help  show this help\n"
               "\n"
               "A value a setting does not take is an error: every other command stops\n"
               "with it before it starts, and this one prints the table, then the error.\n"
               "\n"
               "exit status: 0 printed, 1 the spec cannot be read, 2 usage error or a bad\n"
               "setting\n"
               "\n"
               "example:\n"
               "  sluice env\n"
               "  SLUICE_HTTP_TRIES=10 sluice env train.json --json\n");
}

/* The spec at `path`, parsed: 0, or 1 when it cannot be read (said). */
static int read_spec(const char *path, cJSON **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "sluice env: %s: cannot open it\n", path);
        return 1;
    }
    char *text = NULL;
    size_t n = 0, room = 0;
    for (;;) {
        if (n + 4096 + 1 > room) {
            room = room ? room * 2 : 8192;
            char *t = realloc(text, room);
            if (!t) {
                free(text);
                fclose(f);
                fprintf(stderr, "sluice env: %s: out of memory reading it\n", path);
                return 1;
            }
            text = t;
        }
        size_t k = fread(text + n, 1, 4096, f);
        n += k;
        if (k < 4096)
            break;
    }
    fclose(f);
    text[n] = 0;
    cJSON *doc = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        fprintf(stderr, "sluice env: %s: not a JSON object (a pipeline spec)\n", path);
        return 1;
    }
    *out = doc;
    return 0;
}

/* A value of the spec as text: a string as it is, anything else as JSON. */
static void value_text(const cJSON *v, char *buf, size_t cap) {
    if (cJSON_IsString(v)) {
        snprintf(buf, cap, "%s", v->valuestring);
        return;
    }
    char *j = cJSON_PrintUnformatted(v);
    snprintf(buf, cap, "%s", j ? j : "?");
    cJSON_free(j);
}

/* The value the spec gives the parameter `name` ("epochs",
 * "source.shuffle.window", "ops[].parallel": the ops' values, as a list),
 * into buf: 1, or 0 when the spec does not give it. */
static int spec_value(const cJSON *spec, const char *name, char *buf, size_t cap) {
    if (!spec)
        return 0;
    if (!strncmp(name, "ops[].", 6)) {
        cJSON *all = cJSON_CreateArray();
        const cJSON *op;
        cJSON_ArrayForEach(op, cJSON_GetObjectItemCaseSensitive(spec, "ops")) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(op, name + 6);
            if (v)
                cJSON_AddItemToArray(all, cJSON_Duplicate(v, 1));
        }
        int given = cJSON_GetArraySize(all) > 0;
        if (given)
            value_text(all, buf, cap);
        cJSON_Delete(all);
        return given;
    }
    const cJSON *at = spec;
    char key[96];
    for (const char *p = name; at && *p;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(key, sizeof key, "%.*s", (int)len, p);
        at = cJSON_IsObject(at) ? cJSON_GetObjectItemCaseSensitive(at, key) : NULL;
        p += len + (dot != NULL);
    }
    if (!at)
        return 0;
    value_text(at, buf, cap);
    return 1;
}

/* One row: a line of text, or an object of the JSON array. */
static void row(cJSON *arr, const char *kind, const sl_setting_info *s, const char *value,
                const char *source) {
    if (!arr) {
        printf("%-28s %-12s %-11s %s\n", s->name, value, source, s->doc);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", s->name);
    cJSON_AddStringToObject(o, "kind", kind);
    cJSON_AddStringToObject(o, "value", value);
    cJSON_AddStringToObject(o, "source", source);
    cJSON_AddStringToObject(o, "type", s->type);
    cJSON_AddStringToObject(o, "range", s->range);
    cJSON_AddStringToObject(o, "default", s->default_value);
    cJSON_AddStringToObject(o, "layer", s->layer);
    cJSON_AddStringToObject(o, "doc", s->doc);
    cJSON_AddItemToArray(arr, o);
}

int cmd_env(int argc, char **argv) {
    int json = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            help(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage("env", "unknown option '%s'", argv[i]);
        } else if (path) {
            return cli_usage("env", "one SPEC.json at most ('%s' is a second)", argv[i]);
        } else {
            path = argv[i];
        }
    }
    cJSON *spec = NULL;
    if (path && read_spec(path, &spec))
        return 1;
    char from_spec[256];
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    /* the settings, then the spec's parameters: one row each */
    static const char *const heads[] = {"SETTING", "SPEC PARAMETER"};
    for (int pass = 0; pass < 2; pass++) {
        if (!json)
            printf("%s%-28s %-12s %-11s %s\n", pass ? "\n" : "", heads[pass], "VALUE", "FROM",
                   "WHAT");
        int n = pass ? sl_spec_param_count() : sl_setting_count();
        for (int i = 0; i < n; i++) {
            sl_setting_info s;
            if ((pass ? sl_spec_param_get(i, &s) : sl_setting_get(i, &s)) != SL_OK) {
                cJSON_Delete(spec);
                cJSON_Delete(arr);
                return cli_fail("env");
            }
            /* a spec's cache_bytes wins over SLUICE_CACHE_BYTES */
            const char *key = pass ? s.name : !strcmp(s.name, "SLUICE_CACHE_BYTES") ? "cache_bytes"
                                                                                     : NULL;
            const char *value = s.value ? s.value : s.default_value;
            const char *source = s.value ? "environment" : "default";
            if (key && spec_value(spec, key, from_spec, sizeof from_spec))
                value = from_spec, source = "spec";
            row(arr, pass ? "spec" : "setting", &s, value, source);
        }
    }
    cJSON_Delete(spec);
    if (json)
        cli_json_out(arr);
    if (sl_settings_check() != SL_OK) { /* shown above; every other command stops here */
        fprintf(stderr, "sluice env: %s\n", sl_errmsg());
        return 2;
    }
    return 0;
}
