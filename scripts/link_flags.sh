#!/usr/bin/env bash
# Print what a program needs to link sluice statically from a build folder:
# BUILD/libsluice.a and its dependencies, read from the sluice.pc that the
# build writes (one list of dependencies: CMakeLists.txt's). Used by the demo
# and the bench scripts that compile their own C drivers:
#   cc ... prog.c $(bash scripts/link_flags.sh build) -o prog
set -euo pipefail
BUILD=${1:?usage: link_flags.sh BUILD}
[ -f "$BUILD/sluice.pc" ] && [ -f "$BUILD/libsluice.a" ] ||
  { echo "link_flags.sh: no sluice.pc and libsluice.a in $BUILD: build sluice there first" >&2; exit 2; }
export PKG_CONFIG_PATH="$BUILD${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# shellcheck disable=SC2046
echo "$BUILD/libsluice.a" $(pkg-config --libs $(pkg-config --print-requires-private sluice)) \
  $(sed -n 's/^Libs.private: *//p' "$BUILD/sluice.pc")
