#!/usr/bin/env bash
# ops_bench.sh — the training pipeline (decode -> random_resized_crop 224 ->
# flip -> normalize float32 CHW -> batch 64) against its two yardsticks, side
# by side in one run on the same photos and cores:
#   - the decode limit: libjpeg-turbo decoding every image at full size
#     (TurboJPEG, RGB, one thread per core, nothing else);
#   - PyTorch DataLoader + torchvision transforms at its best num_workers
#     (0, 1, ... cores; persistent; bench/torch_peer.py imagefolder).
# Plus the ops alone (no pipeline engine), the full-size sluice decode, and the
# pipeline again on the photos re-encoded as `pack --jpeg-restart auto` stores
# them (crop-only decode).
# Each sluice figure is the median of 3 epochs in one process (the pipeline is
# kept across them, as a training loop keeps it); each PyTorch figure is its
# second epoch (persistent workers). Rounds interleave sluice and PyTorch.
#
#   bash bench/ops_bench.sh [BUILD_DIR] [REPEATS] [DATA]
#
# BUILD_DIR holds libsluice.a (default build); DATA defaults to
# data/photos/imagenet-like (make it with bench/make_photos.py).
# Prints JSON lines and a summary of medians and ratios. Speed is never asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-3}
DATA=${3:-data/photos/imagenet-like}
# shellcheck source=bench/bench_lib.sh
. bench/bench_lib.sh
bench_need_photos "$DATA"
PY=/usr/bin/python3
T=$(nproc)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# shellcheck disable=SC2046
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/ops_decode_bench.c $(bash scripts/link_flags.sh "$BUILD") \
   -o "$OUT/ops_bench"
echo "machine: $T cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$REPEATS"); do
  echo "round $r: load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$OUT/ops_bench" --threads "$T" --repeat 3 pipeline "$DATA" | tail -1 | tee -a "$OUT/pipeline.jsonl"
  "$OUT/ops_bench" --threads "$T" --repeat 3 --restart auto pipeline "$DATA" | tail -1 |
      tee -a "$OUT/pipeline_restart.jsonl"
  "$OUT/ops_bench" --threads "$T" --repeat 3 tj "$DATA" | tail -1 | tee -a "$OUT/tj.jsonl"
  "$OUT/ops_bench" --threads "$T" --repeat 3 train "$DATA" | tail -1 | tee -a "$OUT/train.jsonl"
  "$OUT/ops_bench" --threads "$T" --repeat 3 decode "$DATA" | tail -1 | tee -a "$OUT/decode.jsonl"
  for w in $(seq 0 "$T"); do
    $PY bench/torch_peer.py imagefolder --data "$DATA" --workers "$w" --persistent 1 \
        --epochs 2 | tail -1 | tee -a "$OUT/torch$w.jsonl"
  done
done
$PY - "$OUT" <<'PYEOF'
import json, os, statistics, sys
d = sys.argv[1]
def rates(name, key):
    vals = []
    for line in open(os.path.join(d, name + ".jsonl")):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if key in o:
            vals.append(o[key])
    return vals
res = {"pipeline": rates("pipeline", "median_img_s"),
       "pipeline_restart": rates("pipeline_restart", "median_img_s"),
       "tj_decode": rates("tj", "median_img_s"),
       "ops_only": rates("train", "median_img_s"), "sluice_decode": rates("decode", "median_img_s")}
w = 0
while os.path.exists(os.path.join(d, "torch%d.jsonl" % w)):
    res["torch_w%d" % w] = rates("torch%d" % w, "img_s")
    w += 1
med = {k: statistics.median(v) for k, v in res.items() if v}
tk = [k for k in med if k.startswith("torch_w")]
if tk:
    best = max(tk, key=lambda k: med[k])
    med["torch"] = med[best]
    print("PyTorch best: %s" % best)
for k, v in res.items():
    if v:
        print("%-14s median %8.1f img/s  spread [%.1f, %.1f]" % (k, med[k], min(v), max(v)))
if "tj_decode" in med:
    print("pipeline / decode limit: %.2f" % (med["pipeline"] / med["tj_decode"]))
    print("pipeline, --jpeg-restart auto storage / decode limit: %.2f"
          % (med["pipeline_restart"] / med["tj_decode"]))
    print("ops only / decode limit: %.2f" % (med["ops_only"] / med["tj_decode"]))
if "torch" in med:
    print("pipeline / PyTorch DataLoader (best workers): %.2f" % (med["pipeline"] / med["torch"]))
    print("pipeline, --jpeg-restart auto storage / PyTorch DataLoader: %.2f"
          % (med["pipeline_restart"] / med["torch"]))
PYEOF
