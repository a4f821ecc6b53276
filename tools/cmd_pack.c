/* cmd_pack.c — `sluice pack`. */
#include "cli.h"

int cmd_pack(int argc, char **argv) {
    (void)argc;
    (void)argv;
    sl_errclear();
    return cli_usage("pack", "not built yet");
}
