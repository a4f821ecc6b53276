#!/usr/bin/env bash
# `sluice bench` reports the op split of a stage running image ops: with
# --json an "op_split" object per such stage (decode, resample, normalize in
# us per sample, from the timed samples); on a decode-heavy pipeline the
# phases account for most of the stage's busy time per sample (a loose
# bound, between 30% and 130% of cost_us: the timed eighth of the samples
# differs from the average one, and the machine may be shared), the rest
# (the same timed samples' other ops) is never negative, the unfused chain times each op
# as its own phase, and a stage without image ops has no split. The text
# output shows the same table.
. "$(dirname "$0")/common.bash"

GEN=$(dirname "$SLUICE")/sluice_gen_images
if [ ! -x "$GEN" ]; then fail "no $GEN (built with the tools)"; exit 1; fi
run 0 "$GEN" "$T/img" --count 48 --classes 2 --seed 5 --threads 1
run 0 "$SLUICE" pack "$T/img" "$T/img.slr"
cat >"$T/fused.json" <<EOF2
{"source": {"path": "$T/img.slr", "shuffle": true},
 "ops": [{"op": "decode"},
         {"op": "random_resized_crop", "size": 96},
         {"op": "flip"},
         {"op": "normalize", "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]},
         {"op": "select", "columns": ["image", "label"]},
         {"op": "batch", "size": 8}]}
EOF2
# a flip between decode and resize keeps them apart: decode, resample and
# normalize are three ops, each timed as its phase
cat >"$T/apart.json" <<EOF2
{"source": {"path": "$T/img.slr"},
 "ops": [{"op": "decode"},
         {"op": "flip", "p": 0.0},
         {"op": "resize", "size": [80, 80]},
         {"op": "normalize"},
         {"op": "select", "columns": ["image", "label"]},
         {"op": "batch", "size": 8}]}
EOF2

for spec in fused apart; do
run 0 "$SLUICE" bench "$T/$spec.json" --seconds 1 --threads 1 --json
$PY - "$OUT" "$spec" <<'PYEOF' || fail "op_split of $spec is missing or does not add up"
import json, sys
d = json.load(open(sys.argv[1]))
split = [s for s in d["stages"] if "op_split" in s]
assert len(split) == 1, [s["name"] for s in d["stages"]]
s = split[0]
o = s["op_split"]
assert o["timed_samples"] >= 1, o
for k in ("decode_us", "resample_us", "normalize_us"):
    assert o[k] > 0, (k, o)
assert o["rest_us"] >= 0, o   # the same timed samples' other ops: never below zero
total = o["decode_us"] + o["resample_us"] + o["normalize_us"]
ratio = total / s["cost_us"]
print("%s: phases %.1f of %.1f us per sample (%.0f%%)" % (sys.argv[2], total, s["cost_us"], 100 * ratio))
assert 0.30 <= ratio <= 1.30, ratio
for t in d["stages"]:
    if "decode" not in t["name"] and "normalize" not in t["name"]:
        assert "op_split" not in t, t["name"]
PYEOF
done
run 0 "$SLUICE" bench "$T/fused.json" --seconds 0.5 --threads 1
has "$OUT" "op split, us per sample (1 sample in 8 timed):"
has "$OUT" "resample normalize"
# the rest column is never negative: it was the stage's average cost less
# the timed eighth's phases, below zero in about half the short runs of a
# decode-bound chain
for k in 1 2 3 4 5 6; do
    run 0 "$SLUICE" bench "$T/fused.json" --seconds 0.3 --threads 2
    awk '/^op split/ {on = 1; getline; next} on && NF >= 6 && $(NF - 1) < 0 {bad = 1}
         END {exit bad}' "$OUT" || fail "bench printed a negative rest: $(grep -A2 '^op split' "$OUT")"
done
finish
