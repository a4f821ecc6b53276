#!/usr/bin/env bash
# Build sluice three ways and run every test:
#   build/        release build, -Werror: C tests, CLI tests, Python tests
#   build-asan/   ASan+UBSan: every C test, the fuzz replays; the sluice command over the remote tests
#   build-tsan/   TSan: every C test; the sluice command over the remote tests
set -euo pipefail
. "$(dirname "$0")/sigint.bash"   # the Ctrl-C tests need SIGINT at its default
cd "$(dirname "$0")/.."
bash scripts/deps.sh
JOBS=$(nproc)
PY=/usr/bin/python3
failed=0
step() { echo; echo "== $*"; }
# remote_tests BUILD: the remote tests that run the sluice command, with BUILD's
remote_tests() {
  PYTHONPATH="$PWD/build/python" SLUICE_BIN="$PWD/$1/sluice" SLUICE_LIB="$PWD/build/libsluice.so" \
    $PY -m pytest -q -p no:cacheprovider tests/python/test_remote.py -k "one_event_loop or keeps_its_connections or \
read_ahead_and_coalesced or killed_and_restarted or gone_mid_epoch or epoch_over_http or \
shard_opens_in_one_round_trip or shards_open_in_one_round_trip"
}

step "layer check (scripts/check_layers.sh: docs/ARCHITECTURE.md's dependency order)"; bash scripts/check_layers.sh || failed=1

step "nvJPEG header (scripts/nvjpeg_fetch.sh: the nvidia-nvjpeg wheel, into a cache folder)"
bash scripts/nvjpeg_fetch.sh || echo "no nvjpeg.h: the build leaves the nvJPEG decoder out"

step "release build (-Wall -Wextra -Werror)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_WERROR=ON -DSLUICE_BUILD_PYTHON=ON \
      -DPython3_EXECUTABLE=$PY >/dev/null
cmake --build build -j"$JOBS"

step "C tests"
./build/sluice_tests || failed=1

if [ -d tests/cli ] && ls tests/cli/*.sh >/dev/null 2>&1; then
  step "CLI tests"
  # exit status 77: the script skipped (a tool missing); the test command
  # allows no skip, so it fails the run too, reported as what it was.
  for t in tests/cli/*.sh; do
    rc=0; SLUICE=./build/sluice bash "$t" || rc=$?
    case $rc in
      0) echo "ok   $t" ;;
      77) echo "SKIP $t (not allowed in the test command)"; failed=1 ;;
      *) echo "FAIL $t"; failed=1 ;;
    esac
  done
fi

step "s3:// against a local S3-compatible server (moto, signatures checked)"
rc=0; bash tests/io/s3_moto.sh build || rc=$?
case $rc in
  0) ;;
  77) echo "SKIP tests/io/s3_moto.sh (not allowed in the test command)"; failed=1 ;;
  *) echo "FAIL tests/io/s3_moto.sh"; failed=1 ;;
esac

step "ASan+UBSan build (libcurl linked: curl's option-type checks; the others load it on demand)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=address,undefined \
      -DSLUICE_BUILD_PYTHON=OFF -DSLUICE_BUILD_FUZZ=ON -DSLUICE_CURL_DLOPEN=OFF >/dev/null
cmake --build build-asan -j"$JOBS"
step "C tests under ASan+UBSan"
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
./build-asan/sluice_tests || failed=1

step "fuzz targets: replay the seed corpora under ASan+UBSan"
rm -rf build-asan/fuzz_corpus
sh fuzz/make_corpus.sh build-asan build-asan/fuzz_corpus >/dev/null
for target in build-asan/fuzz/fuzz_*; do
  name=$(basename "$target"); name=${name#fuzz_}
  corpus=build-asan/fuzz_corpus/$name
  if [ ! -d "$corpus" ]; then echo "FAIL fuzz_$name: no corpus at $corpus"; failed=1; continue; fi
  if "$target" "$corpus" >/tmp/sluice-fuzz-$name.log 2>&1; then
    echo "ok   fuzz_$name ($(ls "$corpus" | wc -l) inputs)"
  else
    echo "FAIL fuzz_$name"; tail -20 /tmp/sluice-fuzz-$name.log; failed=1
  fi
done
step "remote reads under ASan+UBSan"
remote_tests build-asan || failed=1
unset ASAN_OPTIONS UBSAN_OPTIONS

step "TSan build"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=thread \
      -DSLUICE_BUILD_PYTHON=OFF >/dev/null
cmake --build build-tsan -j"$JOBS" --target sluice_tests
step "C tests under TSan (every case: most of them start threads)"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  ./build-tsan/sluice_tests || failed=1
step "remote reads under TSan (the read-ahead event loop, shard openers, faults; nginx on localhost)"
cmake --build build-tsan -j"$JOBS" --target sluice_cli
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
  remote_tests build-tsan || failed=1

if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
  step "Python tests"
  PYTHONPATH="$PWD/build/python" SLUICE_BIN="$PWD/build/sluice" SLUICE_LIB="$PWD/build/libsluice.so" \
    $PY -m pytest -q -p no:cacheprovider tests/python || failed=1
fi

# sluice.transforms against torchvision.transforms.v2 itself needs torch 2.x
# (Debian's torchvision 0.14 has no v2) and a free-threaded Python for the
# GIL test: the venvs of scripts/pythons.sh, made once (several GB, a CPython
# build) and then only read (docs/PYTHON.md, "Pythons and torch versions").
step "sluice.transforms against torchvision v2, on 3.11 and 3.13t (scripts/test_transforms.sh)"
bash scripts/test_transforms.sh build || failed=1

step "pip install . and pip wheel . in a fresh venv (tests/install/pip_install.sh)"
bash tests/install/pip_install.sh || failed=1

step "GPU check script, dry run on the host backend (scripts/gpu_check.sh --dry-run)"
bash scripts/gpu_check.sh --dry-run || failed=1

echo
if [ $failed -ne 0 ]; then echo "== some tests FAILED"; exit 1; fi
echo "== all tests passed"
