#!/usr/bin/env bash
# engine_bench.sh — the pipeline engine's overhead against PyTorch's
# DataLoader(TensorDataset) on Fashion-MNIST (batch 256, shuffled), side by
# side in one run, plus thread scaling and the epoch-boundary gap.
#
#   bash bench/engine_bench.sh [BUILD_DIR] [REPEATS]
#
# BUILD_DIR holds libsluice.a (default: build). Prints one JSON line per run
# and a summary of medians and ratios. Speed is never asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-3}
PY=/usr/bin/python3
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# shellcheck disable=SC2046
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/engine_overhead.c $(bash scripts/link_flags.sh "$BUILD") \
   -o "$OUT/engine_overhead"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$REPEATS"); do
  "$OUT/engine_overhead" overhead 1 20 | tee -a "$OUT/s1.jsonl"
  "$OUT/engine_overhead" overhead 2 20 | tee -a "$OUT/s2.jsonl"
  $PY bench/torch_peer.py fmnist --workers 0 --epochs 2 | tail -1 | tee -a "$OUT/t0.jsonl"
  $PY bench/torch_peer.py fmnist --workers 2 --epochs 2 | tail -1 | tee -a "$OUT/t2.jsonl"
  "$OUT/engine_overhead" scaling 1 1 20 | tee -a "$OUT/sc.jsonl"
done
$PY - "$OUT" <<'PYEOF'
import json, statistics, sys, os
d = sys.argv[1]
def load(n, k):
    return [json.loads(l)[k] for l in open(os.path.join(d, n)) if l.strip()]
s1, s2 = load("s1.jsonl", "samples_per_s"), load("s2.jsonl", "samples_per_s")
t0, t2 = load("t0.jsonl", "img_s"), load("t2.jsonl", "img_s")
sc = load("sc.jsonl", "of_linear")
gap, med = load("s2.jsonl", "epoch_gap_ms"), load("s2.jsonl", "median_batch_gap_ms")
m = statistics.median
best_t = max(m(t0), m(t2))
print(f"sluice 1 thread : {m(s1):12.0f} samples/s  (runs {', '.join(f'{x:.0f}' for x in s1)})")
print(f"sluice 2 threads: {m(s2):12.0f} samples/s  (runs {', '.join(f'{x:.0f}' for x in s2)})")
print(f"torch workers=0 : {m(t0):12.0f} samples/s  (runs {', '.join(f'{x:.0f}' for x in t0)})")
print(f"torch workers=2 : {m(t2):12.0f} samples/s  (runs {', '.join(f'{x:.0f}' for x in t2)})")
print(f"ratio sluice(best) / torch(best): {max(m(s1), m(s2)) / best_t:.1f}x")
print(f"scaling, 20 us/sample op, 2 threads vs 1: {m(sc):.2f} of linear (runs {', '.join(f'{x:.2f}' for x in sc)})")
print(f"epoch boundary gap: {m(gap):.3f} ms vs median batch gap {m(med):.3f} ms")
PYEOF
