/* cmd_info.c — `sluice info`. */
#include "cli.h"

int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    sl_errclear();
    return cli_usage("info", "not built yet");
}
