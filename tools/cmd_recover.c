/* cmd_recover.c — `sluice recover`. */
#include "cli.h"

int cmd_recover(int argc, char **argv) {
    (void)argc;
    (void)argv;
    sl_errclear();
    return cli_usage("recover", "not built yet");
}
