#!/usr/bin/env bash
# Sources side by side: the same photos as .slr, WebDataset tar shards (GNU
# tar) and TFRecord shards (Google's protobuf runtime), through the same
# ImageNet-style training pipeline; reading every record against `cat`; and
# packing from tar / TFRecord against `tar -cf` + `sync` of the same bytes.
#
#   bench/sources_bench.sh [BUILD] [REPEATS] [PHOTOS]
#
# PHOTOS: an ImageFolder (default data/photos/imagenet-like, made by
# bench/make_photos.py). Runs are interleaved (slr, tar, tfrecord,
# then again) and medians compared, as ratios to the peer of the same round.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-3}
DATA=${3:-data/photos/imagenet-like}
# shellcheck source=bench/bench_lib.sh
. bench/bench_lib.sh
bench_need_photos "$DATA"
SLUICE=$BUILD/sluice
PY=/usr/bin/python3
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
now() { date +%s.%N; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "data: $DATA ($(find "$DATA" -type f | wc -l) files)"

# --- the three copies ---------------------------------------------------------
"$SLUICE" pack "$DATA" "$W/train.slr" >/dev/null
$PY bench/make_tfrecords.py "$DATA" "$W/tfr" --shards 8 >/dev/null
# tar shards in the same (torchvision) order: key = running number
mkdir -p "$W/stage" "$W/tar"
$PY - "$DATA" "$W/stage" 8 <<'PYEOF'
import os, sys
sys.path.insert(0, "bench")
from make_tfrecords import listing
root, out, shards = sys.argv[1], sys.argv[2], int(sys.argv[3])
items = listing(root)
per = (len(items) + shards - 1) // shards
for k in range(shards):
    d = os.path.join(out, f"{k:06d}")
    os.makedirs(d)
    for i, (p, label) in enumerate(items[k * per:(k + 1) * per]):
        key = f"{k * per + i:08d}"
        os.link(p, os.path.join(d, key + ".jpg"))
        with open(os.path.join(d, key + ".cls"), "w") as f:
            f.write(f"{label}\n")
PYEOF
for d in "$W"/stage/*; do
  (cd "$d" && tar --format=gnu --sort=name -cf "$W/tar/shard-$(basename "$d").tar" .)
done

bench_train_spec "{\"path\": \"$W/train.slr\", \"shuffle\": true}" image label >"$W/slr.json"
bench_train_spec "{\"webdataset\": \"$W/tar/shard-{000000..000007}.tar\", \"shuffle\": true}" jpg cls >"$W/tar.json"
bench_train_spec "{\"tfrecord\": \"$W/tfr/train-{00000..00007}-of-00008.tfrecord\", \"features\": {\"image/encoded\": \"image\", \"image/class/label\": \"label\"}, \"shuffle\": true}" image label >"$W/tfr.json"

# --- training pipeline ----------------------------------------------------------
echo
echo "== training pipeline (decode, RRC 224, flip, normalize, batch 64; $(nproc) threads), samples/s"
for r in $(seq "$REPEATS"); do
  for k in slr tar tfr; do
    "$SLUICE" bench "$W/$k.json" --seconds 6 --json |
      $PY -c 'import json,sys; print(json.load(sys.stdin)["samples_per_s"])' >>"$W/pipe_$k"
  done
  echo "round $r: slr $(tail -1 "$W/pipe_slr")  tar $(tail -1 "$W/pipe_tar")  tfrecord $(tail -1 "$W/pipe_tfr")"
done
ms=$(bench_median <"$W/pipe_slr"); mt=$(bench_median <"$W/pipe_tar"); mf=$(bench_median <"$W/pipe_tfr")
echo "median: slr $ms  tar $mt ($(awk -v a="$mt" -v b="$ms" 'BEGIN{printf "%.3f", a/b}')x)  tfrecord $mf ($(awk -v a="$mf" -v b="$ms" 'BEGIN{printf "%.3f", a/b}')x)"

# --- reading every record -----------------------------------------------------
echo
echo "== reading every record (page cache, 1 thread), MB/s: sluice scan vs cat of the same files"
for r in $(seq "$REPEATS"); do
  for k in tar tfr; do
    files=$([ $k = tar ] && echo "$W"/tar/*.tar || echo "$W"/tfr/*.tfrecord)
    bytes=$(cat $files | wc -c)
    t0=$(now); cat $files >/dev/null; t1=$(now)
    awk -v b="$bytes" -v a="$t0" -v c="$t1" 'BEGIN{printf "%.1f\n", b/1e6/(c-a)}' >>"$W/cat_$k"
    "$SLUICE" scan $files --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["mb_per_s"])' >>"$W/scan_$k"
  done
done
for k in tar tfr; do
  c=$(bench_median <"$W/cat_$k"); s=$(bench_median <"$W/scan_$k")
  echo "$k: scan $s MB/s, cat $c MB/s, ratio $(awk -v a="$s" -v b="$c" 'BEGIN{printf "%.3f", a/b}')"
done

# --- packing ---------------------------------------------------------------------
echo
echo "== pack into .slr vs tar -cf + sync of the same files, seconds"
for r in $(seq "$REPEATS"); do
  for k in tar tfr; do
    files=$([ $k = tar ] && echo "$W"/tar/*.tar || echo "$W"/tfr/*.tfrecord)
    rm -rf "$W/p.slr" "$W/p.tar"
    t0=$(now); "$SLUICE" pack $files "$W/p.slr" >/dev/null; t1=$(now)
    tar -cf "$W/p.tar" $files 2>/dev/null; sync; t2=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f\n", b-a}' >>"$W/pack_$k"
    awk -v a="$t1" -v b="$t2" 'BEGIN{printf "%.3f\n", b-a}' >>"$W/tarcf_$k"
  done
done
for k in tar tfr; do
  p=$(bench_median <"$W/pack_$k"); t=$(bench_median <"$W/tarcf_$k")
  echo "$k: pack $p s, tar -cf + sync $t s, speed ratio $(awk -v a="$t" -v b="$p" 'BEGIN{printf "%.3f", a/b}')"
done
