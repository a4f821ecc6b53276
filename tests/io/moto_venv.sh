#!/usr/bin/env bash
# Make (or reuse) the virtual environment with moto's S3 server (PyPI
# moto[server], pinned) and print its directory. Shared by tests/io/s3_moto.sh
# and tests/remote/httpfix.py's Moto (bench/peers/run.py's s3:// rows).
#
#   VENV=$(bash tests/io/moto_venv.sh)    # then $VENV/bin/moto_server, $VENV/bin/python (boto3)
#
# The venv is ${SLUICE_MOTO_VENV:-~/.cache/sluice-tools/moto-venv}, made on
# first use by scripts/tool_venv.sh. Exit 77 (and a line on stderr) when moto
# cannot be installed.
set -euo pipefail
MOTO_VERSION=5.2.5
VENV=${SLUICE_MOTO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-tools/moto-venv}
exec bash "$(dirname "$0")/../../scripts/tool_venv.sh" "$VENV" \
  "import moto, boto3; assert moto.__version__ == '$MOTO_VERSION'" "moto[server]==$MOTO_VERSION"
