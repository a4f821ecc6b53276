#!/usr/bin/env bash
# `cmake --install BUILD --prefix P` gives a sluice.pc that names P (it named
# the prefix the build was configured with, /usr/local), and a program built
# with `pkg-config --cflags --libs sluice` against P compiles, links and runs;
# a copy of the installed tree elsewhere still describes itself.
. "$(dirname "$0")/common.bash"

BUILD=$(dirname "$SLUICE")
command -v pkg-config >/dev/null || skip "pkg-config is not installed (scripts/deps.sh)"
[ -f "$BUILD/cmake_install.cmake" ] || skip "$BUILD is not a CMake build folder"
run 0 cmake --install "$BUILD" --prefix "$T/p"
pc=$(find "$T/p" -name sluice.pc | head -1)
[ -n "$pc" ] || { fail "no sluice.pc installed under $T/p"; finish; }
export PKG_CONFIG_PATH=$(dirname "$pc")
prefix=$(pkg-config --variable=prefix sluice)
[ "$(cd "$prefix" && pwd -P)" = "$(cd "$T/p" && pwd -P)" ] || fail "sluice.pc says prefix=$prefix, not $T/p"
cat >"$T/v.c" <<'CEOF'
#include <sluice.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    printf("%s\n", sl_version_string());
    return strcmp(sl_version_string(), SL_VERSION_STRING) != 0;
}
CEOF
# shellcheck disable=SC2046
run 0 cc "$T/v.c" -o "$T/v" $(pkg-config --cflags --libs sluice)
libdir=$(pkg-config --variable=libdir sluice)
LD_LIBRARY_PATH=$libdir run 0 "$T/v"
grep -q '^[0-9]*\.[0-9]*\.[0-9]*$' "$OUT" || fail "the program built against $T/p printed: $(cat "$OUT")"
# the tree moved: the .pc moves with it
mv "$T/p" "$T/q"
export PKG_CONFIG_PATH=${PKG_CONFIG_PATH/$T\/p/$T/q}
prefix=$(pkg-config --variable=prefix sluice)
[ "$(cd "$prefix" && pwd -P)" = "$(cd "$T/q" && pwd -P)" ] || fail "moved: sluice.pc says prefix=$prefix"
finish
