#!/usr/bin/env bash
# The house digests: `sluice run --digest` over pipelines that between them take
# the engine's paths, on small data made here, one line per pipeline:
#
#   bash scripts/house_digests.sh BUILD_DIR [DATA_DIR]
#
# prints `NAME SHA256` lines, SHA256 being that of the pipeline's whole
# `--digest` output (one XXH3-64 of every batch's bytes per line), in a fixed
# order. A refactor of the engine must leave every line as it was:
# tests/cli/house_digests.sh compares them with tests/cli/house_digests.expected.
#
# The data (made under DATA_DIR, default a temporary folder removed at the end):
#   IDX pair of 28x28 uint8 images (made here, bytes a function of the index)
#     packed into fmnist.slr with `sluice pack`;
#   images/: 48 JPEGs in 4 classes from BUILD_DIR/sluice_gen_images (seed 3),
#     read in place (ImageFolder), packed into images.slr and, with
#     --jpeg-restart auto, into images-rst.slr; written as 3 WebDataset tar
#     shards and 3 TFRecord files by scripts/demo_shards.py.
#
# The pipelines (all with seed 5, 2 worker threads; digests do not depend on
# the thread count):
#   fmnist         .slr of arrays, shuffle, pushed-down filter, cast, one_hot,
#                  batch (read into batch rows, vectorized ops), 2 epochs
#   fmnist_novec   the same with "vectorize": false (per-sample ops)
#   fmnist_skip    the same with "on_error": "skip" (batches assigned by the
#                  final stage, collated by the parallel collate stage)
#   fmnist_rows    fmnist with "read_rows": false (each record read as a
#                  sample, then collated)
#   fmnist_serial  fmnist_skip with "parallel_collate": false (the final stage
#                  collates on one thread)
#   fmnist_window  fmnist with a windowed shuffle and shard 1 of 2 (pad)
#   fmnist_device  fmnist delivered through the host device backend
#   folder_train   ImageFolder: decode + random_resized_crop (fused) + flip +
#                  normalize + select + batch, shuffled, 2 epochs
#   slr_eval       images.slr: decode + resize + center_crop + normalize + batch
#   wds_train      WebDataset tar shards: training chain, shuffled
#   tfr_eval       TFRecord files: resize + center_crop eval chain, shuffled
#   rst_train      images-rst.slr (--jpeg-restart auto): the fused crop decode
#                  follows the crop through the restart intervals
#   folder_device  folder_train's chain with normalize on the (host) device
# The variants of a chain print the same digest as the chain: that the paths
# agree is a promise of docs/PIPELINE.md and docs/DEVICE.md. The lines were
# recorded at ec51113, before the engine's refactor (issue 31), except
# fmnist_rows and fmnist_serial, whose spec keys came with it (before, the
# environment switched those paths): they equal fmnist's line.
# RANK and WORLD_SIZE are unset, so every pipeline reads every record.
set -euo pipefail
if [ $# -lt 1 ] || [ ! -x "$1/sluice" ]; then
  echo "usage: house_digests.sh BUILD_DIR [DATA_DIR]  (BUILD_DIR holds sluice and sluice_gen_images)" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=$BUILD/sluice
GEN=$BUILD/sluice_gen_images
PY=/usr/bin/python3
[ -x "$GEN" ] || { echo "house_digests.sh: no $GEN (configure with the tools)" >&2; exit 2; }
if [ $# -ge 2 ]; then
  D=$2
  mkdir -p "$D"
  D=$(cd "$D" && pwd)
else
  D=$(mktemp -d "${TMPDIR:-/tmp}/sluice-house-XXXXXX")
  trap 'rm -rf "$D"' EXIT
fi
unset RANK WORLD_SIZE LOCAL_RANK SLUICE_VECTORIZE SLUICE_READ_ROWS SLUICE_PARALLEL_COLLATE
export SLUICE_NO_PROGRESS=1

die() { echo "house_digests.sh: $*" >&2; exit 1; }

# ---- data ---------------------------------------------------------------------
if [ ! -f "$D/fmnist.slr" ]; then
  $PY - "$D/img.gz" "$D/lab.gz" 600 <<'PYEOF' || die "could not write the IDX pair"
import gzip, struct, sys
img, lab, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gzip.GzipFile(img, "wb", mtime=0) as f:
    f.write(struct.pack(">IIII", 0x803, n, 28, 28)
            + bytes((i * 31 + k * 7 + (k // 28) * (i % 5)) & 255 for i in range(n) for k in range(784)))
with gzip.GzipFile(lab, "wb", mtime=0) as f:
    f.write(struct.pack(">II", 0x801, n) + bytes((i * 3) % 10 for i in range(n)))
PYEOF
  "$SLUICE" pack "$D/img.gz" "$D/lab.gz" "$D/fmnist.slr" --force >/dev/null 2>"$D/err" \
    || die "sluice pack (IDX) failed: $(cat "$D/err")"
fi
if [ ! -f "$D/images/.complete" ]; then
  rm -rf "$D/images"
  "$GEN" "$D/images" --count 48 --classes 4 --seed 3 --threads 2 >/dev/null || die "sluice_gen_images failed"
  touch "$D/images/.complete"
fi
for kind in plain rst; do
  out=$D/images.slr; opt=()
  [ $kind = rst ] && { out=$D/images-rst.slr; opt=(--jpeg-restart auto); }
  [ -f "$out" ] && continue
  "$SLUICE" pack "$D/images" "$out" --force "${opt[@]}" >/dev/null 2>"$D/err" \
    || die "sluice pack $kind failed: $(cat "$D/err")"
done
if [ ! -d "$D/wds" ]; then
  $PY "$SRC/scripts/demo_shards.py" "$D/images" "$D" 3 >/dev/null 2>"$D/err" \
    || die "demo_shards.py failed (python3-crc32c is in scripts/deps.sh): $(cat "$D/err")"
fi

# ---- specs --------------------------------------------------------------------
norm='{"op": "normalize", "column": "image", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "layout": "chw", "dtype": "float32"}'
train_ops() { # COLUMN: the training chain on COLUMN, renamed image by select
  cat <<EOF
    {"op": "decode", "column": "$1"},
    {"op": "random_resized_crop", "column": "$1", "size": [64, 64], "scale": [0.08, 1.0], "ratio": [0.75, 1.3333]},
    {"op": "flip", "column": "$1", "p": 0.5},
    ${norm//\"image\"/\"$1\"},
EOF
}
eval_ops() {
  cat <<EOF
    {"op": "decode", "column": "$1"},
    {"op": "resize", "column": "$1", "size": 72},
    {"op": "center_crop", "column": "$1", "size": 64},
    ${norm//\"image\"/\"$1\"},
EOF
}
fmnist() { # EXTRA: keys added to the spec
  cat <<EOF
{"source": {"path": "$D/fmnist.slr", "shuffle": true},
 "ops": [{"op": "filter", "column": "label", "not_in": [3, 7]},
         {"op": "cast", "column": "image", "dtype": "float32"},
         {"op": "one_hot", "column": "label", "classes": 10},
         {"op": "batch", "size": 32, "drop_remainder": false},
         {"op": "prefetch", "depth": 3}],
 "seed": 5, "epochs": 2$1}
EOF
}
fmnist "" >"$D/fmnist.json"
fmnist ', "vectorize": false' >"$D/fmnist_novec.json"
fmnist ', "on_error": "skip"' >"$D/fmnist_skip.json"
fmnist ', "read_rows": false' >"$D/fmnist_rows.json"
fmnist ', "on_error": "skip", "parallel_collate": false' >"$D/fmnist_serial.json"
fmnist ', "device": "host"' >"$D/fmnist_device.json"
fmnist "" | sed 's|"shuffle": true}|"shuffle": {"mode": "window", "window": 64, "block": 8}, "shard": {"index": 1, "count": 2, "equal": "pad"}}|' \
  >"$D/fmnist_window.json"
cat >"$D/folder_train.json" <<EOF
{"source": {"image_folder": "$D/images", "shuffle": true},
 "ops": [
$(train_ops image)
    {"op": "select", "columns": ["image", "label"]},
    {"op": "batch", "size": 8, "drop_remainder": false},
    {"op": "prefetch", "depth": 2}],
 "seed": 5, "epochs": 2}
EOF
cat >"$D/folder_device.json" <<EOF
{"source": {"image_folder": "$D/images", "shuffle": true},
 "ops": [
    {"op": "decode", "column": "image"},
    {"op": "random_resized_crop", "column": "image", "size": [64, 64], "scale": [0.08, 1.0], "ratio": [0.75, 1.3333]},
    {"op": "flip", "column": "image", "p": 0.5},
    {"op": "select", "columns": ["image", "label"]},
    $norm,
    {"op": "batch", "size": 8, "drop_remainder": false}],
 "seed": 5, "epochs": 2, "device": {"kind": "host", "normalize_on_device": true}}
EOF
cat >"$D/slr_eval.json" <<EOF
{"source": {"path": "$D/images.slr"},
 "ops": [
$(eval_ops image)
    {"op": "select", "columns": ["image", "label"]},
    {"op": "batch", "size": 8, "drop_remainder": false}],
 "seed": 5, "epochs": 1}
EOF
cat >"$D/wds_train.json" <<EOF
{"source": {"webdataset": "$D/wds/shard-{000000..000002}.tar", "columns": ["jpg", "cls"], "shuffle": true},
 "ops": [
$(train_ops jpg)
    {"op": "select", "columns": ["jpg", "cls", "__key__"]},
    {"op": "batch", "size": 8, "drop_remainder": true}],
 "seed": 5, "epochs": 2}
EOF
cat >"$D/tfr_eval.json" <<EOF
{"source": {"tfrecord": "$D/tfr/train-{00000..00002}.tfrecord",
            "features": {"image/encoded": "image", "image/class/label": "label"}, "shuffle": true},
 "ops": [
$(eval_ops image)
    {"op": "batch", "size": 8, "drop_remainder": false}],
 "seed": 5, "epochs": 1}
EOF
cat >"$D/rst_train.json" <<EOF
{"source": {"path": "$D/images-rst.slr", "shuffle": true},
 "ops": [
$(train_ops image)
    {"op": "select", "columns": ["image", "label"]},
    {"op": "batch", "size": 8, "drop_remainder": false}],
 "seed": 5, "epochs": 2}
EOF

# ---- runs ---------------------------------------------------------------------
for name in fmnist fmnist_novec fmnist_skip fmnist_rows fmnist_serial fmnist_window fmnist_device folder_train folder_device \
            slr_eval wds_train tfr_eval rst_train; do
  if ! "$SLUICE" run "$D/$name.json" --digest --threads 2 >"$D/$name.digest" 2>"$D/err"; then
    die "$name: sluice run failed: $(head -3 "$D/err")"
  fi
  [ -s "$D/$name.digest" ] || die "$name: no batches"
  echo "$name $(sha256sum <"$D/$name.digest" | cut -d' ' -f1)"
done
