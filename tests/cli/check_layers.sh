#!/usr/bin/env bash
# scripts/check_layers.sh: the tree follows docs/ARCHITECTURE.md's dependency
# order; a copy with a bad #include or a bad call planted fails, naming the
# file and line; comments and strings are not calls; the order is read from
# the document; the allow list suppresses what it names and fails on a stale
# line; tools/ may use sluice.h only; struct sl_pipeline stays in pipeline.c
# and exec.c, and stage files see stage.h only (rule R11). (Needs no build:
# SLUICE is not used.)
. "$(dirname "$0")/common.bash"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CHECK=$SRC/scripts/check_layers.sh

run 0 bash "$CHECK" "$SRC"

# a copy to plant things in
fresh() {
    rm -rf "$T/r"; mkdir -p "$T/r/docs" "$T/r/scripts"
    cp -r "$SRC/src" "$SRC/include" "$SRC/tools" "$T/r/"
    cp "$SRC/docs/ARCHITECTURE.md" "$T/r/docs/"
}
fresh
run 0 bash "$CHECK" "$T/r"

# an include of a later layer, at a known line
f=src/source/source_mem.c
sed -i '1i #include "pipeline/pipeline.h"' "$T/r/$f"
run 1 bash "$CHECK" "$T/r"
has "$OUT" "$f:1: includes pipeline/pipeline.h (source may not use pipeline)"
[ "$(grep -c . "$OUT")" = 1 ] || fail "want one violation, got: $(cat "$OUT")"
has "$ERR" "core → io → ops → record → source → device → pipeline"

# the same through a relative path
fresh
sed -i '1i #include "../device/device.h"' "$T/r/src/record/schema.c"
run 1 bash "$CHECK" "$T/r"
has "$OUT" "src/record/schema.c:1: includes ../device/device.h (record may not use device)"

# a call into a later layer (no include needed to be caught), after the last line
fresh
f=src/ops/crop.c
n=$(($(wc -l <"$T/r/$f") + 2))
printf '\nint sl_ops__planted(void *p) { return sl_pipeline__pools_reserve(p, 1, 1); }\n' >>"$T/r/$f"
run 1 bash "$CHECK" "$T/r"
has "$OUT" "$f:$n: calls sl_pipeline__pools_reserve (defined in src/pipeline/pools.c; ops may not use pipeline)"
# a call of a public function defined in a later layer, from a header
fresh
printf '/* sl_pipeline_next( in a comment */\nstatic const char *planted = "sl_spec_free(";\n' >>"$T/r/src/io/io.h"
run 0 bash "$CHECK" "$T/r"
printf 'static inline void planted_free(sl_spec *s) { sl_spec_free(s); }\n' >>"$T/r/src/io/io.h"
n=$(wc -l <"$T/r/src/io/io.h")
run 1 bash "$CHECK" "$T/r"
has "$OUT" "src/io/io.h:$n: calls sl_spec_free (defined in src/pipeline/spec.c; io may not use pipeline)"
# earlier layers and one's own are fine
fresh
printf '\nint sl_ops__planted2(void) { return (int)sl__crc32c(0, "", 0); }\n' >>"$T/r/src/ops/crop.c"
grep -q 'sl__crc32c' "$T/r/src/core/crc32c.c" || fail "sl__crc32c is not in core/crc32c.c any more: pick another core function"
run 0 bash "$CHECK" "$T/r"
# a name of the file's own that a later layer's CUDA kernel also has is not a call
printf '\nstatic const int normalize_kernel = 1;\nint sl_ops__planted3(void) { return normalize_kernel; }\n' >>"$T/r/src/ops/crop.c"
grep -q 'normalize_kernel' "$T/r/src/device/normalize.cu" || fail "normalize.cu has no normalize_kernel any more"
run 0 bash "$CHECK" "$T/r"

# the order comes from the document: with pipeline before source, source may use it
fresh
sed -i '1i #include "pipeline/pipeline.h"' "$T/r/src/source/source_mem.c"
sed -i 's/the dependency order: `core → io → ops → record → source → device → pipeline`/the dependency order: `core → io → ops → record → pipeline → source → device`/' \
    "$T/r/docs/ARCHITECTURE.md"
grep -q 'pipeline → source → device`' "$T/r/docs/ARCHITECTURE.md" || fail "could not rewrite the order in the copy"
run 1 bash "$CHECK" "$T/r"   # now pipeline uses source and device: later layers
has "$OUT" "(pipeline may not use source)"
if grep -q "source_mem.c:1" "$OUT"; then fail "source_mem.c's include of pipeline should be allowed by the new order"; fi
# no order in the document: exit 2 and say so
sed -i 's/the dependency order:/the order:/' "$T/r/docs/ARCHITECTURE.md"
run 2 bash "$CHECK" "$T/r"
has "$ERR" "states no dependency order"
# a folder that is no layer
fresh
mkdir "$T/r/src/extra"; echo 'int x;' >"$T/r/src/extra/x.c"
run 1 bash "$CHECK" "$T/r"
has "$ERR" "src/extra/ is not a layer"

# tools/ (like python/ and bench/) uses the library through include/sluice.h only
fresh
sed -i '1i #include "core/core.h"' "$T/r/tools/main.c"
printf '\nstatic void *planted_alloc(void) { return sl__malloc(8); }\n' >>"$T/r/tools/main.c"
n=$(wc -l <"$T/r/tools/main.c")
grep -q 'sl__malloc' "$T/r/src/core/alloc.c" || fail "sl__malloc is not in core/alloc.c any more: pick another internal function"
run 1 bash "$CHECK" "$T/r"
has "$OUT" "tools/main.c:1: includes core/core.h (tools/ uses only include/sluice.h)"
has "$OUT" "tools/main.c:$n: calls sl__malloc (defined in src/core/alloc.c, not in include/sluice.h; tools/ uses only include/sluice.h)"
[ "$(grep -c . "$OUT")" = 2 ] || fail "want two violations in tools/main.c, got: $(cat "$OUT")"

# the allow list: an entry suppresses its use, a stale entry fails
fresh
sed -i '1i #include "pipeline/pipeline.h"' "$T/r/src/source/source_mem.c"
printf '# planted\nsrc/source/source_mem.c pipeline/pipeline.h\n' >"$T/r/scripts/layers.allow"
run 0 bash "$CHECK" "$T/r"
printf 'src/ops/crop.c sl_pipeline__pools_reserve\n' >>"$T/r/scripts/layers.allow"
run 1 bash "$CHECK" "$T/r"
has "$OUT" "layers.allow:3: 'src/ops/crop.c sl_pipeline__pools_reserve' is allowed but no longer used"

# rule R11: struct sl_pipeline's header is pipeline.c's and exec.c's; a stage
# file (stage*.c, collate*.c) sees its stage (stage.h), not the whole
fresh
sed -i '1i #include "pipeline/pipeline.h"' "$T/r/src/pipeline/stage_map.c"
run 1 bash "$CHECK" "$T/r"
has "$OUT" "src/pipeline/stage_map.c:1: includes pipeline/pipeline.h (a stage file sees its stage and its environment, stage.h; rule R11 of docs/ARCHITECTURE.md)"
[ "$(grep -c . "$OUT")" = 1 ] || fail "want one violation, got: $(cat "$OUT")"
fresh
sed -i '1i #include "exec.h"' "$T/r/src/pipeline/collate_fused.c"
run 1 bash "$CHECK" "$T/r"
has "$OUT" "src/pipeline/collate_fused.c:1: includes exec.h (a stage file sees its stage"
fresh
sed -i '1i #include "pipeline/pipeline.h"' "$T/r/src/pipeline/stats.c"
run 1 bash "$CHECK" "$T/r"
has "$OUT" "src/pipeline/stats.c:1: includes pipeline/pipeline.h (struct sl_pipeline is private to src/pipeline/pipeline.c and src/pipeline/exec.c"
fresh # the executor may; a stage file may include its own interface and the executor's files exec.h
sed -i '1i #include "pipeline/pipeline.h"' "$T/r/src/pipeline/exec.c"
sed -i '1i #include "pipeline/stage.h"' "$T/r/src/pipeline/stage_seq.c"
sed -i '1i #include "pipeline/exec.h"' "$T/r/src/pipeline/memory.c"
run 0 bash "$CHECK" "$T/r"
finish
