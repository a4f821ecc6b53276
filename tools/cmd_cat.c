/* cmd_cat.c — `sluice cat`. */
#include "cli.h"

int cmd_cat(int argc, char **argv) {
    (void)argc;
    (void)argv;
    sl_errclear();
    return cli_usage("cat", "not built yet");
}
