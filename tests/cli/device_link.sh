#!/usr/bin/env bash
# The device layer loads CUDA at run time: neither libsluice, the command nor
# the Python module may need libcudart (or any CUDA library) to load; and a
# spec asking for a device this machine lacks fails with one line saying
# what is missing.
. "$(dirname "$0")/common.bash"

BUILD=$(dirname "$SLUICE")
for f in "$BUILD/libsluice.so" "$SLUICE" "$BUILD"/python/sluice/_sluice*.so; do
    [ -e "$f" ] || continue
    if readelf -d "$f" | grep NEEDED | grep -Ei 'cuda|nvjpeg'; then
        fail "$f has a link-time CUDA dependency"
    fi
done
readelf -d "$BUILD/libsluice.so" | grep -q NEEDED || fail "readelf found no NEEDED at all"

# an image dataset of 4 samples through a spec that asks for normalize on a CUDA device
$PY - "$T/img" "$T/lab" <<'PYEOF'
import struct, sys
n = 4
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 4, 4) + bytes(range(64)))
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(range(n)))
PYEOF
run 0 "$SLUICE" pack "$T/img" "$T/lab" "$T/d.slr"
cat >"$T/spec.json" <<JSON
{"source": {"path": "$T/d.slr"}, "ops": [{"op": "batch", "size": 2}],
 "device": {"kind": "cuda", "id": 0}}
JSON
if [ -e /dev/nvidiactl ]; then
    echo "  (a GPU driver is present: the unavailable message is not checked)"
else
    run 1 "$SLUICE" run "$T/spec.json"
    has "$ERR" 'device "cuda": '
fi
finish
