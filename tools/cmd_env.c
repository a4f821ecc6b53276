/* cmd_env.c — `sluice env`: every SLUICE_* setting from the library's table
 * (sl_setting_get), its value and where the value comes from. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: sluice env [SPEC.json] [--json]\n"
               "\n"
               "Print every SLUICE_* environment variable sluice reads: its value and where\n"
               "the value comes from (default, environment, or spec: a spec's \"cache_bytes\"\n"
               "wins over SLUICE_CACHE_BYTES for the pipelines it builds), then its type,\n"
               "range, the layer that reads it and one line about it.\n"
               "\n"
               "options:\n"
               "  --json      one JSON array on stdout: {name, value, source, type, range,\n"
               "              default, layer, doc} per setting\n"
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

/* The spec's "cache_bytes", as written, into buf ("" when it has none):
 * 0, or 1 when the spec cannot be read (said). */
static int spec_cache_bytes(const char *path, char *buf, size_t cap) {
    buf[0] = 0;
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
    const cJSON *cb = cJSON_GetObjectItemCaseSensitive(doc, "cache_bytes");
    if (cJSON_IsNumber(cb))
        snprintf(buf, cap, "%.0f", cb->valuedouble);
    else if (cJSON_IsString(cb))
        snprintf(buf, cap, "%s", cb->valuestring);
    cJSON_Delete(doc);
    return 0;
}

int cmd_env(int argc, char **argv) {
    int json = 0;
    const char *spec = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            help(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage("env", "unknown option '%s'", argv[i]);
        } else if (spec) {
            return cli_usage("env", "one SPEC.json at most ('%s' is a second)", argv[i]);
        } else {
            spec = argv[i];
        }
    }
    char from_spec[64] = "";
    if (spec && spec_cache_bytes(spec, from_spec, sizeof from_spec))
        return 1;
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    int n = sl_setting_count();
    if (!json)
        printf("%-28s %-12s %-11s %s\n", "SETTING", "VALUE", "FROM", "WHAT");
    for (int i = 0; i < n; i++) {
        sl_setting_info s;
        if (sl_setting_get(i, &s) != SL_OK)
            return cli_fail("env");
        const char *value = s.value ? s.value : s.default_value;
        const char *source = s.value ? "environment" : "default";
        if (from_spec[0] && !strcmp(s.name, "SLUICE_CACHE_BYTES"))
            value = from_spec, source = "spec";
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", s.name);
            cJSON_AddStringToObject(o, "value", value);
            cJSON_AddStringToObject(o, "source", source);
            cJSON_AddStringToObject(o, "type", s.type);
            cJSON_AddStringToObject(o, "range", s.range);
            cJSON_AddStringToObject(o, "default", s.default_value);
            cJSON_AddStringToObject(o, "layer", s.layer);
            cJSON_AddStringToObject(o, "doc", s.doc);
            cJSON_AddItemToArray(arr, o);
        } else {
            printf("%-28s %-12s %-11s %s\n", s.name, value, source, s.doc);
        }
    }
    if (json)
        cli_json_out(arr);
    if (sl_settings_check() != SL_OK) { /* shown above; every other command stops here */
        fprintf(stderr, "sluice env: %s\n", sl_errmsg());
        return 2;
    }
    return 0;
}
