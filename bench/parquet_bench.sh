#!/usr/bin/env bash
# Parquet side by side: an image dataset written by Hugging Face `datasets`
# (Image + ClassLabel, push_to_hub's shards, scripts/make_parquet.py hf) read
#  1. as image bytes + labels: `sluice scan` (every thread of the machine)
#     against pyarrow.parquet.read_table(columns=["image.bytes", "label"],
#     use_threads=True), both timed inside their process (no start-up), rows/s;
#  2. through the training chain (decode, RandomResizedCrop 224, flip,
#     normalize, batch 64): `sluice bench` of the Parquet shards against the
#     same chain over `.slr` packed from the same photos, samples/s;
#  3. the peer row: `datasets` (Dataset.from_parquet, its Image feature
#     decoding with PIL) + torchvision's transforms + torch's DataLoader
#     (num_workers = cores, persistent workers), one epoch, samples/s.
#
#   bench/parquet_bench.sh [BUILD] [REPEATS] [PHOTOS]
#
# PHOTOS: an ImageFolder of real photographs (default data/photos/imagenet-like).
# Needs the venv of scripts/parquet_venv.sh (pyarrow, datasets; torch and
# torchvision from Debian). Rounds are interleaved and medians compared.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
BUILD=${1:-build}
REPEATS=${2:-3}
DATA=${3:-data/photos/imagenet-like}
SLUICE=$BUILD/sluice
VPY=$(bash scripts/parquet_venv.sh)/bin/python
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
THREADS=$(nproc)

bench_machine
echo "data: $DATA ($(find "$DATA" -type f | wc -l) files)"
"$VPY" scripts/make_parquet.py hf "$W/hf" "$DATA"
SHARDS=("$W"/hf/data/train-*.parquet)
"$SLUICE" pack "$DATA" "$W/train.slr" >/dev/null
echo "parquet: ${#SHARDS[@]} shards, $(du -cb "${SHARDS[@]}" | tail -1 | cut -f1) bytes; $("$SLUICE" info "${SHARDS[@]}" --json | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["row_groups"], "row groups,", d["compression"])')"

# --- 1. image bytes + labels ---------------------------------------------------------
cat >"$W/arrow_scan.py" <<'PY'
import sys, time
import pyarrow.parquet as pq
files = sys.argv[1:]
pq.read_table(files, columns=["image.bytes", "label"], use_threads=True)  # warm
best = []
for _ in range(3):
    t0 = time.perf_counter()
    t = pq.read_table(files, columns=["image.bytes", "label"], use_threads=True)
    best.append(time.perf_counter() - t0)
print(t.num_rows / sorted(best)[1])
PY
echo
echo "== image bytes + labels, rows/s ($THREADS threads each; page cache warm)"
for r in $(seq "$REPEATS"); do
  "$SLUICE" scan "${SHARDS[@]}" --features image,label --threads "$THREADS" >/dev/null  # warm
  "$SLUICE" scan "${SHARDS[@]}" --features image,label --threads "$THREADS" --json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["records_per_s"])' >>"$W/scan_sl"
  "$VPY" "$W/arrow_scan.py" "${SHARDS[@]}" >>"$W/scan_pa"
  echo "round $r: sluice $(tail -1 "$W/scan_sl")  pyarrow $(tail -1 "$W/scan_pa")"
done
a=$(bench_median <"$W/scan_sl"); b=$(bench_median <"$W/scan_pa")
echo "median: sluice scan $a, pyarrow read_table $b: $(bench_ratio "$a" "$b")x"

# --- 2. the training chain ----------------------------------------------------------
bench_train_spec "{\"path\": \"$W/train.slr\", \"shuffle\": true}" >"$W/slr.json"
bench_train_spec "{\"parquet\": \"$W/hf/data\", \"columns\": [\"image\", \"label\"], \"shuffle\": true}" >"$W/pq.json"
echo
echo "== training chain (decode, RRC 224, flip, normalize, batch 64; $THREADS threads), samples/s"
for r in $(seq "$REPEATS"); do
  for k in slr pq; do
    "$SLUICE" bench "$W/$k.json" --seconds 6 --json |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["samples_per_s"])' >>"$W/pipe_$k"
  done
  echo "round $r: slr $(tail -1 "$W/pipe_slr")  parquet $(tail -1 "$W/pipe_pq")"
done
a=$(bench_median <"$W/pipe_pq"); b=$(bench_median <"$W/pipe_slr")
echo "median: parquet $a, slr $b: $(bench_ratio "$a" "$b")x"

# --- 3. the peer: datasets + torch's DataLoader ----------------------------------------
cat >"$W/peer.py" <<'PY'
import sys, time
import datasets, torch
from torchvision import transforms as T
files, workers = sys.argv[1:-1], int(sys.argv[-1])
ds = datasets.Dataset.from_parquet(files)  # converted once into datasets' Arrow cache
tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
def apply(b):
    return {"image": [tf(im.convert("RGB")) for im in b["image"]], "label": b["label"]}
ds.set_transform(apply)
dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers,
                                 persistent_workers=workers > 0)
for epoch in range(2):  # the first warms the workers
    t0, n = time.perf_counter(), 0
    for b in dl:
        n += len(b["label"])
    rate = n / (time.perf_counter() - t0)
print(rate)
PY
echo
echo "== peer: datasets + torchvision + torch DataLoader (num_workers $THREADS, persistent), samples/s"
for r in $(seq "$REPEATS"); do
  "$VPY" "$W/peer.py" "${SHARDS[@]}" "$THREADS" >>"$W/peer" 2>/dev/null
  echo "round $r: $(tail -1 "$W/peer")"
done
p=$(bench_median <"$W/peer"); a=$(bench_median <"$W/pipe_pq")
echo "median: datasets+DataLoader $p; sluice from Parquet $a: $(bench_ratio "$a" "$p")x"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
