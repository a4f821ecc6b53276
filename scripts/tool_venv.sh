#!/usr/bin/env bash
# Make (or reuse) a virtual environment of pinned PyPI packages that sluice
# is tested or measured against, and print its directory. The one helper
# behind scripts/parquet_venv.sh (pyarrow, datasets) and tests/io/moto_venv.sh
# (moto's S3 server).
#
#   bash scripts/tool_venv.sh DIR CHECK PIN...
#
# DIR: the venv; CHECK: Python code that succeeds when DIR's interpreter has
# the pinned versions (then nothing is installed); PIN...: pip requirements.
# The venv is made from ${PY:-/usr/bin/python3} with its site packages (Debian's
# numpy, torch); two callers at once make it once (a lock beside DIR); pip's
# output goes to DIR.log. Exit 77 (and a line on stderr) when the pins cannot
# be installed (no network, no index): callers skip or fail, saying so.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: tool_venv.sh DIR CHECK PIN..." >&2; exit 2; }
PY=${PY:-/usr/bin/python3}
VENV=$1 CHECK=$2
shift 2
if ! "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
  mkdir -p "$(dirname "$VENV")"
  exec 9>"$VENV.lock"
  flock 9
  if ! "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
    rm -rf "$VENV"
    "$PY" -m venv --system-site-packages "$VENV"
    if ! "$VENV/bin/pip" install -q "$@" >"$VENV.log" 2>&1 ||
       ! "$VENV/bin/python" -c "$CHECK" >>"$VENV.log" 2>&1; then
      echo "cannot install $* from PyPI into $VENV (see $VENV.log)" >&2
      exit 77
    fi
  fi
fi
echo "$VENV"
