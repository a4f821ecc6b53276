#!/bin/sh
# Build the fuzz targets with libFuzzer (clang, ASan + UBSan) and run a
# campaign: each target in turn, one process at a time.
#   fuzz/run_fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      (default: 180, all)
# TARGET is a name without the fuzz_ prefix (record, decode, spec, ...).
# Build dir: build-libfuzzer (override with BUILD_DIR=...). Corpora live
# outside git in BUILD_DIR/corpus/<target>: seeded from fuzz/make_corpus.sh
# on first use, then kept and grown across runs. A crash, leak, timeout or
# out-of-memory input is written to BUILD_DIR/crashes/<target>/; replay it
# with BUILD_DIR/fuzz/fuzz_<target> FILE, or with the gcc replay build.
# Knobs: RSS_LIMIT_MB (default 2048), TIMEOUT_S per input (default 10),
# FUZZ_ARGS (more libFuzzer flags).
# Prints per target: seconds, execs, execs/s, corpus size, crashes.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
secs=${1:-180}
[ $# -gt 0 ] && shift
build=${BUILD_DIR:-$root/build-libfuzzer}
rss=${RSS_LIMIT_MB:-2048}
timeout=${TIMEOUT_S:-10}
jobs=${BUILD_JOBS:-2}

mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_SANITIZE=address,undefined \
  -DSLUICE_BUILD_FUZZ=ON -DSLUICE_FUZZ_ENGINE=libfuzzer -DSLUICE_BUILD_TOOLS=OFF \
  -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_PYTHON=OFF >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j"$jobs" >"$build/build.log" 2>&1 || { tail -40 "$build/build.log"; exit 1; }

rm -rf "$build/seeds"
sh "$here/make_corpus.sh" "$build" "$build/seeds" >/dev/null || exit 1

if [ $# -eq 0 ]; then
  set --
  for t in "$build"/fuzz/fuzz_*; do set -- "$@" "${t##*/fuzz_}"; done
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
summary=$build/summary.txt
printf '%-10s %7s %10s %8s %7s %s\n' target seconds execs execs/s corpus crashes >"$summary"
status=0
for name in "$@"; do
  bin=$build/fuzz/fuzz_$name
  if [ ! -x "$bin" ]; then echo "no target fuzz_$name" >&2; status=1; continue; fi
  corpus=$build/corpus/$name
  crashes=$build/crashes/$name
  mkdir -p "$corpus" "$crashes"
  if [ -d "$build/seeds/$name" ]; then cp -n "$build/seeds/$name"/* "$corpus"/ 2>/dev/null; fi
  dict=
  [ -f "$here/$name.dict" ] && dict=-dict=$here/$name.dict
  log=$build/fuzz_$name.log
  before=$(ls "$crashes" | wc -l)
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$bin" -max_total_time="$secs" -rss_limit_mb="$rss" -timeout="$timeout" -print_final_stats=1 \
    -artifact_prefix="$crashes/" $dict ${FUZZ_ARGS:-} "$corpus" >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  found=$(( $(ls "$crashes" | wc -l) - before ))
  printf '%-10s %7s %10s %8s %7s %s\n' "$name" "$took" "${execs:-?}" "${rate:-?}" \
    "$(ls "$corpus" | wc -l)" "$found" | tee -a "$summary"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    status=1
    repro=$(ls -t "$crashes" | head -1)
    echo "  fuzz_$name exited $rc; reproducer: $crashes/$repro; log: $log"
    grep -m3 -E 'ERROR:|runtime error|SUMMARY' "$log" | sed 's/^/  /'
  fi
done
echo "summary in $summary"
exit $status
