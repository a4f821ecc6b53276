# Sourced first by the scripts that run the Ctrl-C tests (scripts/test.sh,
# scripts/test_wheels.sh, scripts/test_pythons.sh): started in the background (`nohup ... &`), a shell
# ignores SIGINT, and so would every test under it — Python then never raises
# KeyboardInterrupt — and a signal ignored at entry cannot be reset by the
# shell. So the script starts again with SIGINT at its default.
#   . "$(dirname "$0")/sigint.bash"      (before anything else runs)
if [ -z "${SLUICE_SIGINT_RESET:-}" ] && [ -n "$(trap -p INT)" ]; then
  exec env SLUICE_SIGINT_RESET=1 /usr/bin/python3 -c \
    'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv("/bin/bash", ["bash"] + sys.argv[1:])' \
    "$0" "$@"
fi
