#!/usr/bin/env bash
# Make (or reuse) the virtual environment with the Parquet writers sluice is
# tested and measured against — pyarrow and Hugging Face `datasets`, pinned,
# from PyPI — and print its directory. Used by scripts/make_parquet.py's
# callers: tests/python/test_parquet.py, fuzz/make_parquet_corpus.sh,
# bench/parquet_bench.sh.
#
#   VENV=$(bash scripts/parquet_venv.sh)    # then $VENV/bin/python -c 'import pyarrow'
#
# The venv is ${SLUICE_PARQUET_VENV:-~/.cache/sluice-tools/parquet-venv}, made
# by scripts/tool_venv.sh from Debian's /usr/bin/python3 with its site packages
# (numpy 1.24, torch 1.13 for the DataLoader peer), so the pins keep numpy
# below 2: pyarrow 20 is the newest that runs on numpy 1.x, datasets 3.6 the
# newest that takes pyarrow 20. Exit 77 (and a line on stderr) when they
# cannot be installed.
set -euo pipefail
VENV=${SLUICE_PARQUET_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-tools/parquet-venv}
exec bash "$(dirname "$0")/tool_venv.sh" "$VENV" \
  "import pyarrow, datasets, numpy; assert pyarrow.__version__ == '20.0.0' and datasets.__version__ == '3.6.0'" \
  pyarrow==20.0.0 datasets==3.6.0 "numpy<2" pandas==2.2.3
