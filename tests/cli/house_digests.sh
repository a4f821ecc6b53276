#!/usr/bin/env bash
# The house digests (scripts/house_digests.sh; rules R5 and R10): `sluice run --digest` over the
# pipelines that take the engine's paths (IDX .slr with shuffle + filter +
# batch and its vectorize/skip/window/device variants, ImageFolder training,
# .slr eval, WebDataset, TFRecord, --jpeg-restart auto with a crop, normalize
# on the device) gives, batch for batch, the bytes recorded in
# house_digests.expected when the engine was last changed on purpose. A
# refactor must keep every line; a change of output must say so by
# updating the file (bash scripts/house_digests.sh build > tests/cli/house_digests.expected).
. "$(dirname "$0")/common.bash"

HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(dirname "$SLUICE")
[ -x "$BIN/sluice_gen_images" ] || { fail "no $BIN/sluice_gen_images (built with the tools)"; exit 1; }
$PY -c 'import crc32c' 2>/dev/null || skip "python3-crc32c missing (scripts/deps.sh installs it)"

if ! bash "$HERE/../../scripts/house_digests.sh" "$BIN" "$T/data" >"$T/got" 2>"$ERR"; then
    fail "house_digests.sh failed: $(head -3 "$ERR")"
elif ! diff -u "$HERE/house_digests.expected" "$T/got" >"$T/diff"; then
    fail "digests differ from tests/cli/house_digests.expected (-expected +now):"
    sed 's/^/    /' "$T/diff" >&2
fi
# the same data read again gives the same lines (nothing depends on timing)
if [ "$FAILS" = 0 ]; then
    bash "$HERE/../../scripts/house_digests.sh" "$BIN" "$T/data" >"$T/again" 2>"$ERR" \
        || fail "second run failed: $(head -3 "$ERR")"
    cmp -s "$T/got" "$T/again" || fail "a second run over the same data printed other digests"
fi
finish
