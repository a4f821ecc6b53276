/* cmd_verify.c — `sluice verify`. */
#include "cli.h"

int cmd_verify(int argc, char **argv) {
    (void)argc;
    (void)argv;
    sl_errclear();
    return cli_usage("verify", "not built yet");
}
