#!/usr/bin/env bash
# The device boundary (docs/DEVICE.md, "The boundary"; docs/ARCHITECTURE.md):
# src/device/ knows no pipeline, spec or plan, and the pipeline reaches the
# device layer only through its hand-off stage, src/pipeline/stage_handoff.c
# (spec.c reads and writes the "device" JSON with the device layer's
# sl_dev__parse_json / sl_dev__to_json / sl_dev__decode_placement). Each
# offending line is named with its file and line number.
. "$(dirname "$0")/common.bash"

SRC=${SLUICE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -d "$SRC/src/device" ] && [ -d "$SRC/src/pipeline" ] || fail "no src/device or src/pipeline under $SRC"

# 1. the device layer includes no header of the layers above it and calls
#    nothing of theirs
grep -nE '#include +"(pipeline|source|record)/' "$SRC"/src/device/*.[ch] >"$T/inc"
grep -nE '\b(sl_pipeline__|sl_exec__|sl_source__|sl_plan__)[a-z_]+ *\(' "$SRC"/src/device/*.[ch] >"$T/calls"
grep -nE '\b(struct +sl_(pipeline|spec|plan|batch)|sl_(pipeline|spec|plan|batch) *\*)' \
    "$SRC"/src/device/*.[ch] | grep -vE '^[^:]+:[0-9]+: *(/?\*|//)' >"$T/types"
for f in inc calls types; do
    if [ -s "$T/$f" ]; then
        fail "src/device reaches into the pipeline ($f):"
        sed "s|^$SRC/|    |" "$T/$f" >&2
    fi
done

# 2. in src/pipeline, device calls are the hand-off's (and spec.c's JSON trio)
grep -nE '\bsl_dev__[a-z_]+ *\(' "$SRC"/src/pipeline/*.[ch] |
    grep -v "^$SRC/src/pipeline/stage_handoff.c:" |
    grep -vE '^[^:]+/spec\.c:[0-9]+:.*\bsl_dev__(parse_json|to_json|decode_placement) *\(' |
    grep -vE '^[^:]+:[0-9]+: *(/?\*|//)' >"$T/pipe"
if [ -s "$T/pipe" ]; then
    fail "device layer called from src/pipeline outside stage_handoff.c:"
    sed "s|^$SRC/|    |" "$T/pipe" >&2
fi
# ... and the hand-off holds no device code of its own: no backend, ring,
# slot or decoder calls (those are device_deliver.c's)
grep -nE '\bsl_dev__(ring|slot|jpeg|gpu_decode_batch|cuda|host|backend)[a-z_]* *\(|->(host_alloc|stream_sync|copy) *\(' \
    "$SRC"/src/pipeline/*.[ch] >"$T/own"
if [ -s "$T/own" ]; then
    fail "device code in src/pipeline:"
    sed "s|^$SRC/|    |" "$T/own" >&2
fi
# 3. the public device entry points are defined in src/device
for fn in sl_device_available sl_device_held sl_tensor_stream_wait; do
    grep -lE "^int $fn\(" "$SRC"/src/device/*.c >/dev/null || fail "$fn is not defined in src/device"
    if grep -nE "^int $fn\(" "$SRC"/src/pipeline/*.c >"$T/def"; then
        fail "$fn is defined in src/pipeline:"; sed "s|^$SRC/|    |" "$T/def" >&2
    fi
done

exit $((FAILS > 0))
