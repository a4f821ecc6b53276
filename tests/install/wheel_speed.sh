#!/usr/bin/env bash
# The training chain (decode, random resized crop 224, flip, normalize to
# float32 CHW, batch 64: tests/install/train_spec.json) with the abi3
# wheel's `sluice` command against the source build's (`build-release/`,
# Debian's libraries, gcc: what scripts/demo.sh builds), interleaved in one
# run: `sluice bench --json` of each in turn, ROUNDS times, the order
# alternating; medians and their ratio (wheel / source). Speed is never
# asserted in a test: this prints what it measured.
#
#   bash tests/install/wheel_speed.sh PHOTOS [ROUNDS] [SECONDS]
#
# PHOTOS: an ImageFolder of JPEGs (real photos for a claim: docs/WHEELS.md).
# Needs dist/sluice-*-cp310-abi3-*.whl (scripts/wheel.sh) and
# build-release/sluice:
#   cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DSLUICE_BUILD_TESTS=OFF \
#         -DSLUICE_BUILD_PYTHON=OFF && cmake --build build-release --target sluice_cli
# Run it on a quiet machine; it prints the load before and after.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PHOTOS=${1:?usage: wheel_speed.sh PHOTOS [ROUNDS] [SECONDS]}
ROUNDS=${2:-5}
SECS=${3:-8}
SRC_BIN=$ROOT/build-release/sluice
WHL=$(ls "$ROOT"/dist/sluice-*-cp310-abi3-*.whl 2>/dev/null | tail -1 || true)
[ -x "$SRC_BIN" ] || { echo "wheel_speed: no $SRC_BIN (see the header for the build)" >&2; exit 2; }
[ -n "$WHL" ] || { echo "wheel_speed: no abi3 wheel in dist/ (bash scripts/wheel.sh)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-wheel-speed.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# The wheel's command, as pip would install it.
/usr/bin/python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); n = [m for m in z.namelist() if m.endswith(".data/scripts/sluice")][0]; open(sys.argv[2], "wb").write(z.read(n))' \
  "$WHL" "$WORK/sluice-wheel"
chmod +x "$WORK/sluice-wheel"
"$SRC_BIN" pack "$PHOTOS" "$WORK/train.slr" --force >/dev/null
sed "s|\"path\": \"train.slr\"|\"path\": \"$WORK/train.slr\"|" "$ROOT/tests/install/train_spec.json" > "$WORK/train.json"

echo "wheel_speed: $(basename "$WHL") vs $SRC_BIN; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "wheel_speed: load before: $(cut -d' ' -f1-3 /proc/loadavg)"
bench() {  # binary -> samples/s
  "$1" bench "$WORK/train.json" --seconds "$SECS" --json |
    /usr/bin/python3 -c 'import json, sys; print("%.1f" % json.load(sys.stdin)["samples_per_s"])'
}
src=() whl=()
for ((i = 0; i < ROUNDS; i++)); do
  if ((i % 2 == 0)); then
    s=$(bench "$SRC_BIN"); w=$(bench "$WORK/sluice-wheel")
  else
    w=$(bench "$WORK/sluice-wheel"); s=$(bench "$SRC_BIN")
  fi
  src+=("$s") whl+=("$w")
  echo "wheel_speed: round $((i + 1)): source $s, wheel $w samples/s"
done
# The same wheel with every SIMD path off (sluice's kernels scalar,
# libjpeg-turbo's SIMD disabled): what run-time dispatch is worth, and that
# it happened.
off=$(SLUICE_SIMD=scalar JSIMD_FORCENONE=1 bench "$WORK/sluice-wheel")
echo "wheel_speed: the wheel with SLUICE_SIMD=scalar JSIMD_FORCENONE=1 (no SIMD): $off samples/s"
echo "wheel_speed: load after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "${src[*]}" "${whl[*]}" <<'PYEOF'
import statistics, sys
s = [float(x) for x in sys.argv[1].split()]
w = [float(x) for x in sys.argv[2].split()]
ms, mw = statistics.median(s), statistics.median(w)
print(f"wheel_speed: source median {ms:.0f} (min {min(s):.0f}, max {max(s):.0f}), "
      f"wheel median {mw:.0f} (min {min(w):.0f}, max {max(w):.0f}) samples/s; "
      f"wheel / source = {mw / ms:.3f}")
PYEOF
