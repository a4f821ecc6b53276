#!/usr/bin/env bash
# entropy_check.sh — what finding corrupt entropy-coded data costs
# (docs/OPS.md, "Corrupt entropy data"): each work run in default mode (the
# fast Huffman path wherever libjpeg-turbo takes it) and through the checking
# source (SL_DECODE_CHECK_ENTROPY: what strict mode and `pack --check decode`
# do), side by side, interleaved, on the same photos and cores:
#   decode    full-size decode, 1 thread per core
#   train     fused decode + RandomResizedCrop 224 + flip + normalize
#   pipeline  the training pipeline (its decode op `warnings`: default / strict)
# With BASE_BUILD (a build of the code before, its libsluice.a) the default
# mode of each is run on it too, in the same rounds: the before/after of the
# default path.
#
#   [THREADS=T] [LIMIT=N] bash bench/entropy_check.sh [BUILD_DIR] [ROUNDS] [DATA] [BASE_BUILD]
#
# THREADS (default: all cores) and LIMIT (files, default all) go to
# ops_decode_bench; on a shared machine, 1 thread and more rounds give the
# steadier CPU figures.
#
# Prints JSON lines (ops_decode_bench, median of 3 repeats each) and a summary
# of medians over the rounds with ratios, of images/s and of CPU time per image
# (the steadier one when other jobs share the machine). Speed is never asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
DATA=${3:-data/photos/imagenet-like}
BASE=${4:-}
T=${THREADS:-$(nproc)}
LIM=${LIMIT:-0}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# shellcheck disable=SC2046
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/ops_decode_bench.c $(bash scripts/link_flags.sh "$BUILD") \
   -o "$OUT/new"
if [ -n "$BASE" ]; then
  # the same bench source: an older library ignores SL_DECODE_CHECK_ENTROPY's set
  # shellcheck disable=SC2046
  cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/ops_decode_bench.c $(bash scripts/link_flags.sh "$BASE") \
     -o "$OUT/base"
fi
echo "machine: $(nproc) cores, $T threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
one() { # NAME BINARY ARGS...
  local name=$1 bin=$2
  shift 2
  "$OUT/$bin" --threads "$T" --repeat 3 --limit "$LIM" "$@" "$DATA" | tail -1 | tee -a "$OUT/$name.jsonl"
}
# the runs of one work, in an order that rotates from round to round, so that
# a load that grows or falls within a round favours none of them
variants() { # WORK ROUND
  local work=$1 r=$2 other=(--check-entropy) name=checked
  if [ "$work" = pipeline ]; then other=(--warnings strict); name=strict; fi
  local -a runs=("$work.default new $work" "$work.$name new ${other[*]} $work")
  [ -n "$BASE" ] && runs+=("$work.before base $work")
  local n=${#runs[@]} i
  for i in $(seq 0 $((n - 1))); do
    # shellcheck disable=SC2086
    one ${runs[$(((i + r) % n))]}
  done
}
for r in $(seq "$ROUNDS"); do
  echo "round $r: load $(cut -d' ' -f1-3 /proc/loadavg)"
  for work in decode train pipeline; do
    variants "$work" "$r"
  done
done
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" <<'PYEOF'
import json, os, statistics, sys
d = sys.argv[1]
def med(name):
    p = os.path.join(d, name + ".jsonl")
    if not os.path.exists(p):
        return None
    v = [json.loads(l)["median_img_s"] for l in open(p)]
    return statistics.median(v), min(v), max(v)
def cpu(name):
    p = os.path.join(d, name + ".jsonl")
    if not os.path.exists(p):
        return None
    v = [json.loads(l)["median_cpu_us_per_img"] for l in open(p)]
    return statistics.median(v), min(v), max(v)
print("img/s (wall), median of the rounds (min-max); ratios of medians")
for work, other in (("decode", "checked"), ("train", "checked"), ("pipeline", "strict")):
    base, new, chk = med(work + ".before"), med(work + ".default"), med(work + "." + other)
    line = "%-8s default %.0f (%.0f-%.0f), %s %.0f (%.0f-%.0f): %s/default %.3f" % (
        work, new[0], new[1], new[2], other, chk[0], chk[1], chk[2], other, chk[0] / new[0])
    if base:
        line += "; before %.0f (%.0f-%.0f): default/before %.3f" % (
            base[0], base[1], base[2], new[0] / base[0])
    print(line)
print("CPU us per image (user + system, all threads), median of the rounds (min-max)")
for work, other in (("decode", "checked"), ("train", "checked"), ("pipeline", "strict")):
    base, new, chk = cpu(work + ".before"), cpu(work + ".default"), cpu(work + "." + other)
    line = "%-8s default %.0f (%.0f-%.0f), %s %.0f (%.0f-%.0f): %s/default %.3f" % (
        work, new[0], new[1], new[2], other, chk[0], chk[1], chk[2], other, chk[0] / new[0])
    if base:
        line += "; before %.0f (%.0f-%.0f): default/before %.3f" % (
            base[0], base[1], base[2], new[0] / base[0])
    print(line)
PYEOF
