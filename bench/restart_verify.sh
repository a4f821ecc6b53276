#!/usr/bin/env bash
# restart_verify.sh — `pack --jpeg-restart` is lossless on whole photo sets:
# every JPEG under each DIR is re-encoded as pack stores it (auto and rows),
# then the re-encode and its source are decoded whole with TurboJPEG and their
# pixels compared. Prints, per set and mode, the re-encode rate (1 thread), the
# size change and the count of images whose pixels differ; exits 1 if any
# does. (The test command checks the same on generated JPEGs of every
# sampling; this runs it over the BENCH.md photo sets.)
#
#   bash bench/restart_verify.sh [BUILD_DIR] DIR...
#
# BUILD_DIR holds libsluice.a (default build); make the photo sets with
# bench/make_photos.py (--large for the 1-4 MP set).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
[ $# -gt 0 ] || { echo "usage: bash bench/restart_verify.sh [BUILD_DIR] DIR..." >&2; exit 2; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# shellcheck disable=SC2046
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/ops_decode_bench.c $(bash scripts/link_flags.sh "$BUILD") \
   -o "$OUT/odb"
status=0
for dir in "$@"; do
  for mode in auto rows; do
    echo "== $dir, --jpeg-restart $mode"
    # mode tj with --repeat 1 only decodes the set once more after the check
    "$OUT/odb" --repeat 1 --restart "$mode" --verify tj "$dir" | grep -E '"restart"|"verify"' ||
      status=1
  done
done
[ $status -eq 0 ] && echo "every re-encoded image has its source's pixels" ||
  echo "some re-encoded images differ from their sources (named above)" >&2
exit $status
