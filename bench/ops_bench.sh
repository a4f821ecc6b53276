#!/usr/bin/env bash
# ops_bench.sh — the training pipeline (decode -> random_resized_crop 224 ->
# flip -> normalize float32 CHW -> batch 64) against its two yardsticks, side
# by side in one run on the same photos and cores:
#   - the decode limit: libjpeg-turbo decoding every image at full size
#     (TurboJPEG, RGB, one thread per core, nothing else);
#   - PyTorch DataLoader + torchvision transforms (num_workers = cores,
#     persistent; /work/shared/bench/torch_imagefolder.py).
# Plus the ops alone (no pipeline engine) and the full-size sluice decode.
#
#   bash bench/ops_bench.sh [BUILD_DIR] [REPEATS] [DATA]
#
# BUILD_DIR holds libsluice.a (default build); DATA defaults to
# data/photos/imagenet-like (make it with /work/shared/bench/make_photos.py).
# Prints JSON lines and a summary of medians and ratios. Speed is never asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-3}
DATA=${3:-data/photos/imagenet-like}
PY=/usr/bin/python3
T=$(nproc)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/ops_decode_bench.c "$BUILD/libsluice.a" \
   $(pkg-config --libs libturbojpeg libjpeg libzstd libpng libcjson zlib) \
   $(pkg-config --libs spng 2>/dev/null || true) -lxxhash -lpthread -lm -ldl -o "$OUT/ops_bench"
echo "machine: $T cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$REPEATS"); do
  "$OUT/ops_bench" --threads "$T" --repeat 1 pipeline "$DATA" | tail -1 | tee -a "$OUT/pipeline.jsonl"
  "$OUT/ops_bench" --threads "$T" --repeat 1 tj "$DATA" | tail -1 | tee -a "$OUT/tj.jsonl"
  "$OUT/ops_bench" --threads "$T" --repeat 1 train "$DATA" | tail -1 | tee -a "$OUT/train.jsonl"
  "$OUT/ops_bench" --threads "$T" --repeat 1 decode "$DATA" | tail -1 | tee -a "$OUT/decode.jsonl"
  $PY /work/shared/bench/torch_imagefolder.py --data "$DATA" --workers "$T" --persistent 1 \
      --epochs 2 | tail -1 | tee -a "$OUT/torch.jsonl"
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
res = {"pipeline": rates("pipeline", "median_img_s"), "tj_decode": rates("tj", "median_img_s"),
       "ops_only": rates("train", "median_img_s"), "sluice_decode": rates("decode", "median_img_s"),
       "torch": rates("torch", "img_s")}
med = {k: statistics.median(v) for k, v in res.items() if v}
for k, v in res.items():
    if v:
        print("%-14s median %8.1f img/s  spread [%.1f, %.1f]" % (k, med[k], min(v), max(v)))
if "tj_decode" in med:
    print("pipeline / decode limit: %.2f" % (med["pipeline"] / med["tj_decode"]))
    print("ops only / decode limit: %.2f" % (med["ops_only"] / med["tj_decode"]))
if "torch" in med:
    print("pipeline / PyTorch DataLoader: %.2f" % (med["pipeline"] / med["torch"]))
PYEOF
