#!/usr/bin/env bash
# bench/shuffle_ceiling.c (bench/README.md, "Speed kept") builds against the
# release build's static library with the flags its head gives, runs every
# order on both kinds of pages, reads each record once per epoch (it checks
# that itself and exits 1 otherwise), and refuses a config it does not know.
. "$(dirname "$0")/common.bash"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(dirname "$SLUICE")
cd "$SRC" || exit 1
if ! FLAGS=$(bash scripts/link_flags.sh "$BUILD" 2>"$ERR"); then
    fail "link_flags.sh $BUILD: $(head -1 "$ERR")"; finish
fi
# a coverage build's library (scripts/coverage.sh) needs gcov's runtime too
if nm "$BUILD/libsluice.a" 2>/dev/null | grep -q __gcov_; then FLAGS="$FLAGS --coverage"; fi
# shellcheck disable=SC2086
run 0 cc -O2 -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude bench/shuffle_ceiling.c \
    $FLAGS -o "$T/shuffle_ceiling"
if [ -x "$T/shuffle_ceiling" ]; then
    run 0 "$T/shuffle_ceiling" --records 2000 --epochs 3 --rounds 2 --work 2 --hint 256 \
        --configs huge:seq:4,huge:table:4,huge:sorted:16,4k:seq:0,4k:table:0
    [ "$(grep -c '"records_per_s"' "$OUT")" = 10 ] || fail "want 10 runs (5 configs x 2 rounds)"
    for row in "huge   seq" "huge   table" "huge   sorted" "4k     seq" "4k     table"; do
        has "$OUT" "$row"
    done
    has "$ERR" "2000 records of 872 bytes"
    run 2 "$T/shuffle_ceiling" --configs huge:random:4
    has "$ERR" 'bad config in "huge:random:4"'
    run 2 "$T/shuffle_ceiling" --payload 900
    has "$ERR" "bad arguments"
fi
finish
