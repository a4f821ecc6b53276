#!/usr/bin/env bash
# The whole Python test suite (tests/python, torch tests included) under the
# two venvs of scripts/pythons.sh: `gil` (Debian's Python 3.11) and `ft`
# (CPython 3.13t, free-threaded), each with torch 2.x from PyPI and sluice
# installed by `pip install .` from this tree. Not part of scripts/test.sh
# (several GB of downloads and a CPython build); docs/PYTHON.md says what it
# covers.
#
#   bash scripts/test_pythons.sh [PYTEST ARGS...]     (default: tests/python)
#
# The tests take the sluice package and command from the venv (SLUICE_BIN is
# the venv's `sluice`); the C library the ctypes reference tests load
# (SLUICE_LIB), the delay proxy and the stand-in CUDA libraries come from a
# CMake build of the same tree in ${SLUICE_PYTHONS_BUILD:-build-pythons}
# (scripts/nvjpeg_fetch.sh first, so that the nvJPEG stand-in builds too).
# Under `ft`: PYTHON_GIL=0, because importing torchvision loads triton, whose
# extension does not declare free-threading support, and that turns the GIL
# back on for the whole process otherwise; the summary line says whether the
# GIL was on after `import sluice` and after `import torchvision`.
# A skip is a failure unless its reason is the want of a GPU.
# One summary line per venv; the exit status is 1 when either failed.
. "$(dirname "$0")/sigint.bash"   # the Ctrl-C tests need SIGINT at its default
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
JOBS=$(nproc)
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(tests/python)

# SLUICE_TEST_PYTHONS="ft=PYTHON" (gil=..., or both): the suite under these
# interpreters instead of scripts/pythons.sh's venvs (scripts/test_wheels.sh
# runs it so in a venv that holds the installed cp313t wheel).
if [ -n "${SLUICE_TEST_PYTHONS:-}" ]; then
  out=$(tr ' ' '\n' <<<"$SLUICE_TEST_PYTHONS")
else
  out=$(bash scripts/pythons.sh)
fi
GIL_PY=$(printf '%s\n' "$out" | sed -n 's/^gil=//p' | tail -1)
FT_PY=$(printf '%s\n' "$out" | sed -n 's/^ft=//p' | tail -1)
NAMES=()
[ -z "$GIL_PY" ] || NAMES+=(gil)
[ -z "$FT_PY" ] || NAMES+=(ft)
for py in $GIL_PY $FT_PY; do
  [ -x "$py" ] || { echo "test_pythons: no python at $py" >&2; exit 1; }
done
[ ${#NAMES[@]} -gt 0 ] || { echo "test_pythons: no pythons to test" >&2; exit 1; }

# The C side the tests load beside the package.
B=${SLUICE_PYTHONS_BUILD:-$ROOT/build-pythons}
bash scripts/nvjpeg_fetch.sh >/dev/null
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_BUILD_PYTHON=OFF \
  -DSLUICE_BUILD_TESTS=ON -DSLUICE_BUILD_BENCH=OFF -DSLUICE_BUILD_FUZZ=OFF >/dev/null
targets=(sluice sluice_cli sluice_gen_images sluice_delayproxy sluice_fake_cudart sluice_fake_kernels)
# (the list in a variable first: under pipefail, grep -q closing the pipe
# early fails cmake with SIGPIPE, and the stand-in would never be built)
help=$(cmake --build "$B" --target help 2>/dev/null || true)
if grep -q 'sluice_fake_nvjpeg' <<<"$help"; then
  targets+=(sluice_fake_nvjpeg)
fi
cmake --build "$B" -j"$JOBS" --target "${targets[@]}" >/dev/null

REPORT=$(mktemp -d "${TMPDIR:-/tmp}/sluice-test-pythons.XXXXXX")
trap 'rm -rf "$REPORT"' EXIT
# Helpers: what the interpreter is and where the GIL stands; the counts and
# skip reasons of a JUnit report.
cat > "$REPORT/facts.py" <<'PYEOF'
import sys, sysconfig
tag = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
import sluice
gil = getattr(sys, "_is_gil_enabled", lambda: True)()
import torch
print("python %s%s, torch %s, gil after import sluice: %s"
      % (sys.version.split()[0], tag, torch.__version__, gil))
PYEOF
cat > "$REPORT/facts2.py" <<'PYEOF'
import sys, torchvision
print("torchvision %s, gil after import torchvision: %s"
      % (torchvision.__version__, getattr(sys, "_is_gil_enabled", lambda: True)()))
PYEOF
cat > "$REPORT/summary.py" <<'PYEOF'
import re, sys
import xml.etree.ElementTree as ET
path, rc = sys.argv[1], int(sys.argv[2])
try:
    root = ET.parse(path).getroot()
except (OSError, ET.ParseError) as e:
    print(f"FAIL (no report: {e}; pytest exit {rc})")
    sys.exit(0)
passed = failed = 0
bad_skips, gpu_skips, failed_ids = [], 0, []
gpu = re.compile(r"\bGPU\b|CUDA device|no CUDA|cuda is not available", re.I)
for case in root.iter("testcase"):
    kids = {c.tag for c in case}
    if "failure" in kids or "error" in kids:
        failed += 1
        failed_ids.append(f"{case.get('classname')}::{case.get('name')}")
    elif "skipped" in kids:
        msg = next(c for c in case if c.tag == "skipped").get("message", "")
        if gpu.search(msg):
            gpu_skips += 1
        else:
            bad_skips.append(f"{case.get('classname')}::{case.get('name')}: {msg[:160]}")
    else:
        passed += 1
ok = rc == 0 and failed == 0 and not bad_skips
print(("ok" if ok else "FAIL") + f" {passed} passed, {failed} failed, {gpu_skips} skipped for want of a GPU"
      + (f", {len(bad_skips)} skipped for other reasons (not allowed): " + "; ".join(bad_skips[:8])
         if bad_skips else "") + f" (pytest exit {rc})"
      + (": " + ", ".join(failed_ids[:12]) if failed_ids else ""))
PYEOF
summaries=()
status=0
for name in "${NAMES[@]}"; do
  py=$GIL_PY
  envs=(SLUICE_BIN="$(dirname "$py")/sluice" SLUICE_LIB="$B/libsluice.so"
        SLUICE_DELAYPROXY="$B/sluice_delayproxy" SLUICE_BUILD="$B")
  if [ "$name" = ft ]; then
    py=$FT_PY
    envs=(SLUICE_BIN="$(dirname "$py")/sluice" SLUICE_LIB="$B/libsluice.so"
          SLUICE_DELAYPROXY="$B/sluice_delayproxy" SLUICE_BUILD="$B" PYTHON_GIL=0)
  fi
  # What the interpreter is, and where the GIL stands: after `import sluice`
  # without PYTHON_GIL (sluice must leave it off by itself), and after
  # `import torchvision` as the tests run.
  facts=$(env -u PYTHONPATH -u PYTHON_GIL "$py" "$REPORT/facts.py")
  facts2=$(env -u PYTHONPATH "${envs[@]}" "$py" "$REPORT/facts2.py")
  if [ "$name" = ft ] && ! printf '%s' "$facts" | grep -q 'gil after import sluice: False'; then
    echo "test_pythons: under ft, import sluice turned the GIL on ($facts)" >&2
    status=1
  fi
  xml=$REPORT/$name.xml
  set +e
  env -u PYTHONPATH "${envs[@]}" "$py" -m pytest -q -p no:cacheprovider -rfEs \
      --junitxml="$xml" "${ARGS[@]}" 2>&1 | tee "$REPORT/$name.log" | tail -25
  rc=${PIPESTATUS[0]}
  set -e
  # what failed and why (the tail above holds only the summary): pytest's
  # FAILURES section, the first 300 lines of it
  if [ "$rc" -ne 0 ]; then
    sed -n '/^=\+ FAILURES =\+$/,/^=\+ \(warnings summary\|short test summary info\) =\+$/p' \
      "$REPORT/$name.log" | head -300 || true
  fi
  # Counts and skip reasons from the JUnit report: only the want of a GPU
  # may skip a test.
  line=$("$py" "$REPORT/summary.py" "$xml" "$rc")
  summaries+=("test_pythons: $name ($py; $facts; $facts2): $line")
  case "$line" in ok*) ;; *) status=1 ;; esac
done
for s in "${summaries[@]}"; do echo "$s"; done
exit $status
