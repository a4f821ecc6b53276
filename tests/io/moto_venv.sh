#!/usr/bin/env bash
# Make (or reuse) the virtual environment with moto's S3 server (PyPI
# moto[server], pinned) and print its directory. Shared by tests/io/s3_moto.sh
# and tests/remote/httpfix.py's Moto (bench/peers/run.py's s3:// rows).
#
#   VENV=$(bash tests/io/moto_venv.sh)    # then $VENV/bin/moto_server, $VENV/bin/python (boto3)
#
# The venv is ${SLUICE_MOTO_VENV:-~/.cache/sluice-tools/moto-venv}, made on first
# use from PyPI. Exit 77 (and a line on stderr) when moto cannot be installed.
set -euo pipefail
PY=${PY:-/usr/bin/python3}
MOTO_VERSION=5.2.5
VENV=${SLUICE_MOTO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-tools/moto-venv}
if ! "$VENV/bin/python" -c "import moto, boto3; assert moto.__version__ == '$MOTO_VERSION'" 2>/dev/null; then
  mkdir -p "$(dirname "$VENV")"
  exec 9>"$VENV.lock"  # two callers at once make it once
  flock 9
  if ! "$VENV/bin/python" -c "import moto, boto3; assert moto.__version__ == '$MOTO_VERSION'" 2>/dev/null; then
    rm -rf "$VENV"
    "$PY" -m venv --system-site-packages "$VENV"
    if ! "$VENV/bin/pip" install -q "moto[server]==$MOTO_VERSION" >/dev/null 2>&1; then
      echo "cannot install moto[server]==$MOTO_VERSION from PyPI into $VENV" >&2
      exit 77
    fi
  fi
fi
echo "$VENV"
