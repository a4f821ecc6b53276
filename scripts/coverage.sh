#!/usr/bin/env bash
# Line, branch and function coverage of src/ per layer, from gcov + lcov
# (Debian's gcc and lcov; scripts/deps.sh installs lcov):
#
#   bash scripts/coverage.sh [BUILD_DIR]     (default build-cov)
#
# builds sluice with --coverage (-O0; counters updated atomically, since most
# tests run threads) into BUILD_DIR, runs the C tests (BUILD_DIR/sluice_tests,
# every case) and the CLI tests (tests/cli/*.sh) with that build's sluice and
# Python module, and with COVERAGE_PYTHON=1 the Python tests too, captures the counts with lcov
# (branch counts on) into BUILD_DIR/coverage.info, and prints one row per
# src/ folder and a total: lines, branches and functions hit, in % and as
# hit/found. BUILD_DIR/coverage-html/ gets genhtml's pages when genhtml runs
# (COVERAGE_HTML=1). Failing tests are reported, and their coverage still
# counts; the exit status is that of the tests (0 all passed).
# Not part of scripts/test.sh (it rebuilds everything without optimisation).
# Environment: COVERAGE_CLI=0 skips the CLI tests; COVERAGE_PYTHON=1 adds
# tests/python (long: the remote reader's tests are most of io's coverage);
# JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-cov}
JOBS=${JOBS:-$(nproc)}
command -v lcov >/dev/null || { echo "coverage.sh: no lcov (scripts/deps.sh installs it)" >&2; exit 2; }
LAUNCH=()
command -v ccache >/dev/null && LAUNCH=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Debug "${LAUNCH[@]}" \
      -DCMAKE_C_FLAGS="--coverage -fprofile-update=atomic -O0" -DCMAKE_EXE_LINKER_FLAGS=--coverage \
      -DCMAKE_SHARED_LINKER_FLAGS=--coverage -DCMAKE_MODULE_LINKER_FLAGS=--coverage \
      -DSLUICE_BUILD_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3 \
      -DSLUICE_WITH_CUDA_KERNELS=OFF >/dev/null
cmake --build "$B" -j"$JOBS" >"$B/coverage-build.log" 2>&1 || { tail -20 "$B/coverage-build.log"; exit 1; }
lcov --quiet --zerocounters --directory "$B"
failed=0
echo "== C tests ($B/sluice_tests)"
"$B/sluice_tests" >"$B/coverage-ctests.log" 2>&1 || failed=1
tail -3 "$B/coverage-ctests.log"
if [ "${COVERAGE_CLI:-1}" != 0 ]; then
  echo "== CLI tests"
  for t in tests/cli/*.sh; do
    log=$B/coverage-cli-$(basename "$t" .sh).log
    rc=0; SLUICE="$B/sluice" bash "$t" >"$log" 2>&1 || rc=$?
    [ $rc = 0 ] || { echo "FAIL $t (exit $rc; $log)"; failed=1; }
  done
fi
if [ "${COVERAGE_PYTHON:-0}" = 1 ]; then
  echo "== Python tests"
  PYTHONPATH=$PWD/$B/python SLUICE_BIN=$PWD/$B/sluice SLUICE_LIB=$PWD/$B/libsluice.so \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python >"$B/coverage-python.log" 2>&1 \
    || { echo "FAIL tests/python ($B/coverage-python.log)"; failed=1; }
  tail -1 "$B/coverage-python.log"
fi
lcov --quiet --capture --directory "$B" --rc lcov_branch_coverage=1 \
     --output-file "$B/coverage.all.info" 2>"$B/coverage-lcov.log"
lcov --quiet --extract "$B/coverage.all.info" "$PWD/src/*" --rc lcov_branch_coverage=1 \
     --output-file "$B/coverage.info" 2>>"$B/coverage-lcov.log"
if [ "${COVERAGE_HTML:-0}" = 1 ]; then
  genhtml --quiet --branch-coverage "$B/coverage.info" -o "$B/coverage-html" 2>>"$B/coverage-lcov.log"
fi
/usr/bin/python3 - "$B/coverage.info" "$PWD/src/" <<'PYEOF'
import collections, sys
info, root = sys.argv[1], sys.argv[2]
# per layer: [LH, LF, BRH, BRF, FNH, FNF]
tot = collections.defaultdict(lambda: [0] * 6)
layer = None
for line in open(info):
    key, _, val = line.strip().partition(":")
    if key == "SF":
        rel = val[len(root):] if val.startswith(root) else val
        layer = rel.split("/")[0] if "/" in rel else "(src)"
    elif key in ("LH", "LF", "BRH", "BRF", "FNH", "FNF") and layer:
        tot[layer][("LH", "LF", "BRH", "BRF", "FNH", "FNF").index(key)] += int(val)
order = ["core", "io", "ops", "record", "source", "device", "pipeline"]
rows = [l for l in order if l in tot] + sorted(l for l in tot if l not in order)
pct = lambda h, f: f"{100.0 * h / f:5.1f}%" if f else "    -"
print(f"{'layer':<10} {'lines':>20} {'branches':>20} {'functions':>18}")
allv = [0] * 6
for l in rows + ["total"]:
    v = tot[l] if l != "total" else allv
    if l != "total":
        allv = [a + b for a, b in zip(allv, v)]
    print(f"{l:<10} {pct(v[0], v[1])} {v[0]:>6}/{v[1]:<6} {pct(v[2], v[3])} {v[2]:>6}/{v[3]:<6} "
          f"{pct(v[4], v[5])} {v[4]:>5}/{v[5]:<5}")
PYEOF
exit $failed
