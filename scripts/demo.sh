#!/usr/bin/env bash
# The sluice demo: build, make the embedded default data, pack it, verify it,
# then stream it through realistic training pipelines and say what bounds them.
#
#   bash scripts/demo.sh            (as root or through sudo on Debian 12)
#
# Data (under data/demo/, made once and reused):
#   fmnist.slr  Fashion-MNIST's 60,000 training images, from Debian's
#               dataset-fashion-mnist (IDX files, packed as uint8 28x28 arrays)
#   images/     3000 photo-like JPEGs in 10 classes, made by sluice_gen_images
#               (short side 300-500 px, quality 90, 4:2:0, libjpeg-turbo)
#   images.slr  that ImageFolder packed (original JPEG bytes + label + path)
#   images-rst.slr  the same, packed with --jpeg-restart auto (JPEGs re-encoded
#               losslessly with restart intervals: same pixels, decode follows
#               the crop)
#   wds/, tfr/  the same images as 4 WebDataset tar shards and 4 TFRecord files
#               (scripts/demo_shards.py), read by the README's quick tour
# Environment: SECONDS_PER_BENCH (default 8), THREADS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh

BUILD=build-release
SECS=${SECONDS_PER_BENCH:-8}
THREADS=${THREADS:-$(nproc)}
FMNIST=/usr/share/datasets/fashion-mnist
DEMO=data/demo
say() { printf '\n== %s\n' "$*"; }

say "building sluice (Release) in $BUILD/"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSLUICE_BUILD_TESTS=OFF \
      -DSLUICE_BUILD_PYTHON=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target sluice_cli sluice_gen_images sluice_static >/dev/null
SLUICE=$BUILD/sluice
mkdir -p "$DEMO"

say "making the demo ImageFolder ($DEMO/images)"
if [ ! -f "$DEMO/images/.complete" ]; then
  rm -rf "$DEMO/images"
  "$BUILD/sluice_gen_images" "$DEMO/images" --count 3000 --classes 10 --seed 1
  touch "$DEMO/images/.complete"
else
  echo "already there ($(find "$DEMO/images" -name '*.jpg' | wc -l) images)"
fi

say "packing"
"$SLUICE" pack "$FMNIST/train-images-idx3-ubyte.gz" "$FMNIST/train-labels-idx1-ubyte.gz" \
    "$DEMO/fmnist.slr" --force
"$SLUICE" pack "$DEMO/images" "$DEMO/images.slr" --force
"$SLUICE" pack "$DEMO/images" "$DEMO/images-rst.slr" --force --jpeg-restart auto

say "the same images as WebDataset tar shards and TFRecord files (for the README's quick tour)"
/usr/bin/python3 scripts/demo_shards.py "$DEMO/images" "$DEMO"

say "what was packed"
"$SLUICE" info "$DEMO/fmnist.slr"
echo
"$SLUICE" info "$DEMO/images.slr"
"$SLUICE" info "$DEMO/fmnist.slr" --json > "$DEMO/info_fmnist.json"
"$SLUICE" info "$DEMO/images.slr" --json > "$DEMO/info_images.json"

say "verifying every checksum"
"$SLUICE" verify "$DEMO/fmnist.slr"
"$SLUICE" verify "$DEMO/images.slr"

say "reading every record back (checksums verified, $THREADS threads)"
"$SLUICE" scan "$DEMO/fmnist.slr" --threads "$THREADS" --seconds 2 --json > "$DEMO/scan_fmnist.json"
"$SLUICE" scan "$DEMO/images.slr" --threads "$THREADS" --seconds 2 --json > "$DEMO/scan_images.json"
/usr/bin/python3 - "$DEMO/scan_fmnist.json" "$DEMO/scan_images.json" <<'PYEOF'
import json, sys
for f in sys.argv[1:]:
    j = json.load(open(f))
    print(f"{j['path']}: {j['records_per_s']:,.0f} records/s, {j['mb_per_s']:,.0f} MB/s"
          f" ({j['threads']} threads, {j['mode']}, checksums verified)")
PYEOF

say "the image training pipeline, as planned and as it will run"
"$SLUICE" explain examples/specs/imagenet_train.json

say "streaming Fashion-MNIST: shuffle, cast to float32, batch 256 ($SECS s)"
"$SLUICE" bench examples/specs/fmnist_train.json --seconds "$SECS" --threads "$THREADS" | tee "$DEMO/bench_fmnist.txt"
"$SLUICE" bench examples/specs/fmnist_train.json --seconds "$SECS" --threads "$THREADS" --json > "$DEMO/bench_fmnist.json"

say "streaming the JPEGs: decode, random-resized-crop 224, flip, normalize, batch 64 ($SECS s)"
"$SLUICE" bench examples/specs/imagenet_train.json --seconds "$SECS" --threads "$THREADS" | tee "$DEMO/bench_images.txt"
"$SLUICE" bench examples/specs/imagenet_train.json --seconds "$SECS" --threads "$THREADS" --json > "$DEMO/bench_images.json"

say "the same pipeline from the --jpeg-restart auto pack, and the full-size decode limit ($SECS s)"
# (a spec's relative paths are its own folder's: this one lies beside images-rst.slr)
sed "s|../../data/demo/images.slr|images-rst.slr|" examples/specs/imagenet_train.json > "$DEMO/imagenet_train_rst.json"
"$SLUICE" bench "$DEMO/imagenet_train_rst.json" --seconds "$SECS" --threads "$THREADS" --json > "$DEMO/bench_images_rst.json"
# the decode limit: libjpeg-turbo decoding every image at full size, nothing else
# shellcheck disable=SC2046
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/ops_decode_bench.c $(bash scripts/link_flags.sh "$BUILD") \
   -o "$BUILD/ops_decode_bench"
"$BUILD/ops_decode_bench" --threads "$THREADS" --repeat 3 tj "$DEMO/images" | tail -1 > "$DEMO/decode_limit.json"
/usr/bin/python3 - "$DEMO" <<'PYEOF'
import json, os, sys
d = sys.argv[1]
plain = json.load(open(os.path.join(d, "bench_images.json")))["samples_per_s"]
rst = json.load(open(os.path.join(d, "bench_images_rst.json")))["samples_per_s"]
lim = json.load(open(os.path.join(d, "decode_limit.json")))["median_img_s"]
mb = lambda f: os.path.getsize(os.path.join(d, f)) / 1e6 if os.path.isfile(os.path.join(d, f)) else 0
print(f"{'training pipeline, images/s':<44} {'img/s':>8} {'x decode limit':>15}")
print(f"{'from images.slr (JPEGs as they were)':<44} {plain:>8,.0f} {plain / lim:>15.2f}")
print(f"{'from images-rst.slr (--jpeg-restart auto)':<44} {rst:>8,.0f} {rst / lim:>15.2f}")
print(f"{'full-size decode limit (TurboJPEG)':<44} {lim:>8,.0f} {1:>15.2f}")
print(f"restart pack / plain pack: {rst / plain:.2f}x the rate, {mb('images-rst.slr'):.1f} MB vs {mb('images.slr'):.1f} MB")
PYEOF

say "summary ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
/usr/bin/python3 - "$DEMO" <<'PYEOF'
import json, os, sys
d = sys.argv[1]
rows = []
for name, slr in (("fmnist", "fmnist.slr"), ("images", "images.slr")):
    scan = json.load(open(os.path.join(d, f"scan_{name}.json")))
    bench = json.load(open(os.path.join(d, f"bench_{name}.json")))
    info = json.load(open(os.path.join(d, f"info_{name}.json")))
    size = os.path.getsize(os.path.join(d, slr)) if os.path.isfile(os.path.join(d, slr)) else 0
    rows.append((slr, info["records"], size / 1e6,
                 scan["records_per_s"], scan["mb_per_s"], bench["samples_per_s"],
                 bench["bound"], bench.get("verdict", "")))
print(f"{'dataset':<12} {'records':>8} {'MB':>7} {'read rec/s':>12} {'read MB/s':>10} {'pipeline samples/s':>19}  bound")
for slr, n, mb, rps, mbps, sps, bound, verdict in rows:
    print(f"{slr:<12} {n:>8} {mb:>7.1f} {rps:>12,.0f} {mbps:>10,.0f} {sps:>19,.0f}  {bound}")
for slr, *_, verdict in rows:
    print(f"{slr}: {verdict}")
print("bound: F = reading, P = processing (CPU), G = the consumer. Next: docs/PIPELINE.md for specs,")
print("docs/PYTHON.md for PyTorch, examples/train_fashion_mnist.py for a training loop fed by sluice.")
PYEOF
