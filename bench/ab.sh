#!/usr/bin/env bash
# ab.sh — the regression check: two revisions of sluice, built the same way,
# run over the same data through a fixed set of benchmarks, interleaved, and
# compared as one ratio (NEW / OLD, medians) per benchmark. A ratio below
# 0.97 is flagged; the exit status is 0 either way (speed is reported, never
# asserted), 1 when a benchmark failed to run.
#
#   bash bench/ab.sh [options] OLD_REV NEW_REV
#
#   --rounds N     rounds (default 3); each round runs every benchmark once
#                  per build, the build that goes first alternating by round
#   --seconds S    length of each run (default 3)
#   --only LIST    comma-separated benchmark names (default: all, below)
#   --prepare      build both revisions and make the data, then stop: do the
#                  CPU-heavy part first, measure later on a quiet machine
#   --json FILE    also write every run as one JSON line to FILE
#
# Each revision is checked out in a git worktree of this repository and built
# by CMake's default (release: RelWithDebInfo, -O2, the build users get; the
# C tests and CUDA kernels left out) under $SLUICE_AB_DIR (default
# ~/.cache/sluice-ab)/<commit>; a built commit is reused. Revisions are
# commits: a dirty working tree is not part of either side. To drop the
# builds: rm -rf "$SLUICE_AB_DIR"; git worktree prune.
#
# The data is made once under $SLUICE_AB_DIR/data and packed by OLD's build,
# so both builds read the same bytes:
#   Fashion-MNIST t10k (Debian's dataset-fashion-mnist) as .slr;
#   800 photos of bench/make_photos.py's imagenet-like kind as .slr, plain
#   and with --jpeg-restart auto.
# The benchmarks (C ones are `sluice bench SPEC --seconds S --json`:
# samples/s over the run, threads autotuned):
#   tiny_shuffled   Fashion-MNIST, global shuffle, batch 256
#   tiny            the same in storage order
#   train           photos: shuffle, decode, random_resized_crop 224, flip,
#                   normalize (CHW float32), batch 64
#   train_restart   the same from the restart-marked .slr
#   eval            photos: decode, resize 256, center crop 224, normalize,
#                   batch 64
#   eval_restart    the same from the restart-marked .slr
#   remote          train_restart over HTTP from nginx on localhost
#                   (tests/remote/httpfix.py), shard cache off: records read
#                   by range requests, ahead in the shuffle's order
#   python          Fashion-MNIST shuffled, batch 256, iterated from Python
#                   (numpy batches, each build's own module), samples/s
#
# Run the measuring part on an otherwise idle machine: the load before and
# after is printed; a loaded 2-core machine halves a 2-thread figure.
set -euo pipefail
ROUNDS=3 SECONDS_RUN=3 ONLY="" PREPARE=0 JSON=""
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --prepare) PREPARE=1; shift ;;
    --json) JSON=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "ab.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || usage
cd "$(dirname "$0")/.."
REPO=$PWD
PY=/usr/bin/python3
# shellcheck source=bench/bench_lib.sh
. bench/bench_lib.sh
ALL="tiny_shuffled tiny train train_restart eval eval_restart remote python"
BENCHES=${ONLY//,/ }
BENCHES=${BENCHES:-$ALL}
for b in $BENCHES; do
  case " $ALL " in *" $b "*) ;; *) echo "ab.sh: unknown benchmark $b (benchmarks: $ALL)" >&2; exit 2 ;; esac
done

OLD=$(git rev-parse --verify "$1^{commit}") || { echo "ab.sh: $1 is not a commit here" >&2; exit 2; }
NEW=$(git rev-parse --verify "$2^{commit}") || { echo "ab.sh: $2 is not a commit here" >&2; exit 2; }
AB=${SLUICE_AB_DIR:-$HOME/.cache/sluice-ab}
mkdir -p "$AB"

build() {  # build COMMIT: a release build of COMMIT at $AB/COMMIT/build
  local wt=$AB/$1
  if [ -f "$wt/.built" ]; then return; fi
  echo "ab.sh: building $(git log -1 --format='%h %s' "$1" | cut -c1-72)" >&2
  if [ ! -d "$wt/.git" ] && [ ! -f "$wt/.git" ]; then
    rm -rf "$wt"
    git worktree add --detach "$wt" "$1" >/dev/null 2>&1 || {
      git worktree prune; git worktree add --detach "$wt" "$1" >/dev/null; }
  fi
  cmake -S "$wt" -B "$wt/build" -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_PYTHON=ON \
        -DSLUICE_WITH_CUDA_KERNELS=OFF -DPython3_EXECUTABLE=$PY >"$wt/build.log" 2>&1 &&
    cmake --build "$wt/build" -j"$(nproc)" >>"$wt/build.log" 2>&1 ||
    { echo "ab.sh: the build of $1 failed: $wt/build.log" >&2; tail -20 "$wt/build.log" >&2; exit 1; }
  touch "$wt/.built"
}
build "$OLD"
build "$NEW"

# The data, packed by OLD's build (readers read older files).
D=$AB/data/${OLD:0:12}
if [ ! -f "$D/.done" ]; then
  rm -rf "$D"; mkdir -p "$D"
  FM=/usr/share/datasets/fashion-mnist
  [ -f $FM/t10k-images-idx3-ubyte.gz ] ||
    { echo "ab.sh: no Fashion-MNIST at $FM: bash scripts/deps.sh (dataset-fashion-mnist)" >&2; exit 1; }
  S=$AB/$OLD/build/sluice
  "$S" pack $FM/t10k-images-idx3-ubyte.gz $FM/t10k-labels-idx1-ubyte.gz "$D/tiny.slr" >/dev/null
  $PY bench/make_photos.py --root "$AB/data/photos" --kinds imagenet-like --count 800 >/dev/null
  "$S" pack "$AB/data/photos/imagenet-like" "$D/photos.slr" >/dev/null
  "$S" pack "$AB/data/photos/imagenet-like" "$D/photos-restart.slr" --jpeg-restart auto >/dev/null
  touch "$D/.done"
fi
[ "$PREPARE" = 1 ] && { echo "ab.sh: both builds and the data are ready under $AB"; exit 0; }

W=$(mktemp -d)
trap 'bench_stop_servers; rm -rf "$W"' EXIT
NORM='{"op": "normalize", "column": "image", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "layout": "chw", "dtype": "float32"}'
spec() {  # spec NAME PATH: the benchmark's pipeline over PATH
  local ops
  case $1 in
    tiny_shuffled|tiny) ops='{"op": "batch", "size": 256}' ;;
    train*|remote) ops='{"op": "decode", "column": "image"},
      {"op": "random_resized_crop", "column": "image", "size": [224, 224]},
      {"op": "flip", "column": "image", "p": 0.5}, '"$NORM"',
      {"op": "batch", "size": 64}' ;;
    eval*) ops='{"op": "decode", "column": "image"}, {"op": "resize", "column": "image", "size": 256},
      {"op": "center_crop", "column": "image", "size": [224, 224]}, '"$NORM"',
      {"op": "batch", "size": 64}' ;;
  esac
  local shuffle=true
  case $1 in tiny|eval*) shuffle=false ;; esac
  printf '{"source": {"path": "%s", "shuffle": %s}, "seed": 0, "ops": [%s]}\n' "$2" "$shuffle" "$ops"
}
URL=""
case " $BENCHES " in *" remote "*)
  bench_serve remote "$D" "$W"
  URL=$(cut -d' ' -f1 "$W/remote.url" | head -1) ;;
esac
for b in $BENCHES; do
  case $b in
    tiny*|python) path=$D/tiny.slr ;;
    train|eval) path=$D/photos.slr ;;
    train_restart|eval_restart) path=$D/photos-restart.slr ;;
    remote) path=$URL/photos-restart.slr ;;
  esac
  [ "$b" = python ] || spec "$b" "$path" >"$W/$b.json"
done

run_one() {  # run_one BENCH COMMIT: samples/s of one run
  local out=$AB/$2/build
  case $1 in
    python)
      PYTHONPATH=$out/python $PY - "$D/tiny.slr" "$SECONDS_RUN" <<'PYEOF'
import sys, time
import sluice
path, secs = sys.argv[1], float(sys.argv[2])
ds = sluice.records(path).shuffle(seed=0).batch(256)
n, epoch, t0 = 0, 0, time.perf_counter()
while time.perf_counter() - t0 < secs:
    ds.set_epoch(epoch)
    for b in ds:
        n += len(b["label"])
        if time.perf_counter() - t0 >= secs:
            break
    epoch += 1
print(f"{n / (time.perf_counter() - t0):.1f}")
PYEOF
      ;;
    remote)
      SLUICE_CACHE_DIR=$W/cache SLUICE_CACHE_BYTES=0 "$out/sluice" bench "$W/$1.json" \
        --seconds "$SECONDS_RUN" --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["samples_per_s"])' ;;
    *)
      "$out/sluice" bench "$W/$1.json" --seconds "$SECONDS_RUN" --json |
        $PY -c 'import json,sys; print(json.load(sys.stdin)["samples_per_s"])' ;;
  esac
}

bench_machine
echo "old: $(git log -1 --format='%h %s' "$OLD" | cut -c1-80)"
echo "new: $(git log -1 --format='%h %s' "$NEW" | cut -c1-80)"
echo "$ROUNDS rounds of $SECONDS_RUN s runs; benchmarks: $BENCHES"
failed=0
for r in $(seq "$ROUNDS"); do
  for b in $BENCHES; do
    if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
    for side in $order; do
      c=$OLD; [ $side = new ] && c=$NEW
      if v=$(run_one "$b" "$c" 2>"$W/err"); then
        echo "$v" >>"$W/$b.$side"
        [ -n "$JSON" ] && printf '{"bench": "%s", "side": "%s", "commit": "%s", "round": %d, "samples_per_s": %s, "load": "%s"}\n' \
          "$b" "$side" "${c:0:12}" "$r" "$v" "$(cut -d' ' -f1 /proc/loadavg)" >>"$JSON"
      else
        echo "ab.sh: $b on $side (${c:0:12}) failed: $(tail -3 "$W/err")" >&2; failed=1
      fi
    done
  done
  echo "round $r done; load $(cut -d' ' -f1-3 /proc/loadavg)"
done

echo
printf '%-15s %14s %14s %8s  %s\n' benchmark "old samples/s" "new samples/s" ratio "runs (old | new)"
for b in $BENCHES; do
  [ -s "$W/$b.old" ] && [ -s "$W/$b.new" ] || { printf '%-15s %s\n' "$b" "no figure"; continue; }
  mo=$(bench_median <"$W/$b.old"); mn=$(bench_median <"$W/$b.new")
  ratio=$(awk -v a="$mn" -v b="$mo" 'BEGIN{printf "%.3f", a/b}')
  flag=$(awk -v x="$ratio" 'BEGIN{print (x < 0.97) ? "  BELOW 0.97" : ""}')
  printf '%-15s %14.0f %14.0f %7sx  %s | %s%s\n' "$b" "$mo" "$mn" "$ratio" \
    "$(awk '{printf "%s%.0f", (NR > 1 ? " " : ""), $1}' "$W/$b.old")" \
    "$(awk '{printf "%s%.0f", (NR > 1 ? " " : ""), $1}' "$W/$b.new")" "$flag"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $failed
