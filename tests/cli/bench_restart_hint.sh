#!/usr/bin/env bash
# `sluice bench` on a pipeline that decodes random crops: from JPEGs stored
# as they are it suggests repacking with --jpeg-restart auto; from a pack
# made that way it does not.
. "$(dirname "$0")/common.bash"

GEN=$(dirname "$SLUICE")/sluice_gen_images
if [ ! -x "$GEN" ]; then fail "no $GEN (built with the tools)"; exit 1; fi
run 0 "$GEN" "$T/img" --count 24 --classes 2 --seed 3 --threads 1
run 0 "$SLUICE" pack "$T/img" "$T/plain.slr"
run 0 "$SLUICE" pack "$T/img" "$T/rst.slr" --jpeg-restart auto
for kind in plain rst; do
cat >"$T/$kind.json" <<EOF2
{"source": {"path": "$T/$kind.slr", "shuffle": true},
 "ops": [{"op": "decode"},
         {"op": "random_resized_crop", "size": 64},
         {"op": "select", "columns": ["image", "label"]},
         {"op": "batch", "size": 8}]}
EOF2
done

run 0 "$SLUICE" bench "$T/plain.json" --seconds 0.5 --threads 1
if grep -qF "verdict: P" "$OUT"; then
    has "$OUT" "hint: decoding bounds this pipeline and none of 8 sampled JPEGs carries an interval table"
    has "$OUT" "--jpeg-restart auto"
else
    echo "note: not processing-bound here, the hint is not checked" >&2
fi
run 0 "$SLUICE" bench "$T/rst.json" --seconds 0.5 --threads 1
if grep -qF "hint:" "$OUT"; then fail "hint printed for a pack with interval tables"; fi
finish
