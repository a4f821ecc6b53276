#!/usr/bin/env bash
# sluice.transforms against torchvision.transforms.v2 itself, and the GIL
# test on the free-threaded Python: tests/python/test_transforms.py and
# test_transforms_tv2.py under the torch 2.x venvs of scripts/pythons.sh
# (Debian's torchvision 0.14 has no v2), as scripts/test.sh runs them.
#
#   bash scripts/test_transforms.sh [BUILD]     (BUILD: default build/)
#
# The venvs are used as they are, read-only: the tests import this tree's
# sluice from builds of it, not from the venvs' installed copies — BUILD
# (the release build of scripts/test.sh, for the 3.11 `gil` venv: the same
# interpreter as /usr/bin/python3) and BUILD-ft (the extension alone, built
# here for the `ft` venv's CPython 3.13t). Missing venvs are made by
# scripts/pythons.sh (the first time: several GB and a CPython build).
# Only the want of a GPU may skip a test.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
B=${1:-build}
B=$(cd "$B" && pwd)
P=${SLUICE_PYTHONS:-$HOME/.cache/sluice-pythons}
GIL_PY=$P/gil/bin/python
FT_PY=$P/ft/bin/python
JOBS=$(nproc)
probe='import torch, torchvision.transforms.v2, PIL, numpy, pytest'
if ! "$GIL_PY" -c "$probe" 2>/dev/null || ! PYTHON_GIL=0 "$FT_PY" -c "$probe" 2>/dev/null; then
  echo "test_transforms: making the venvs (scripts/pythons.sh)" >&2
  bash scripts/pythons.sh >/dev/null
fi
[ -f "$B/python/sluice/transforms.py" ] || { echo "test_transforms: no Python build in $B" >&2; exit 1; }
FTB=$B-ft
cmake -S . -B "$FTB" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_WERROR=ON -DSLUICE_BUILD_TESTS=OFF \
  -DSLUICE_BUILD_TOOLS=OFF -DSLUICE_WITH_CUDA_KERNELS=OFF \
  -DPython3_EXECUTABLE="$(readlink -f "$FT_PY")" >/dev/null
cmake --build "$FTB" -j"$JOBS" --target sluice_python >/dev/null
status=0
run() {  # name python pythonpath [env...]
  local name=$1 py=$2 pp=$3
  shift 3
  local out
  set +e
  out=$(cd tests/python && env -u PYTHONPATH "$@" PYTHONPATH="$pp" SLUICE_FT_PYTHONPATH="$FTB/python" \
          "$py" -m pytest -q -p no:cacheprovider -rs test_transforms.py test_transforms_tv2.py 2>&1)
  local rc=$?
  set -e
  printf '%s\n' "$out" | tail -15
  if [ $rc -ne 0 ] || printf '%s\n' "$out" | grep -q "skipped"; then
    echo "test_transforms: $name: FAIL (pytest exit $rc; a skip counts as a failure)"
    status=1
  else
    echo "test_transforms: $name: ok ($(printf '%s\n' "$out" | tail -1))"
  fi
}
run "gil ($GIL_PY)" "$GIL_PY" "$B/python"
# PYTHON_GIL=0: the references import torchvision, whose triton would turn
# the GIL on; the GIL test itself starts its interpreter without it.
run "ft ($FT_PY)" "$FT_PY" "$FTB/python" PYTHON_GIL=0
exit $status
