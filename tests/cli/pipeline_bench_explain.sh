#!/usr/bin/env bash
# `sluice bench --json` prints one object with samples_per_s, bound and
# stages; `sluice explain` shows the filter pushed into the index and the
# stages.
. "$(dirname "$0")/common.bash"

$PY - "$T/img.gz" "$T/lab.gz" 500 <<'PYEOF'
import gzip, struct, sys
img, lab, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gzip.open(img, "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes((i + k) & 255 for i in range(n) for k in range(784)))
with gzip.open(lab, "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PYEOF
run 0 "$SLUICE" pack "$T/img.gz" "$T/lab.gz" "$T/d.slr"
cat >"$T/spec.json" <<EOF2
{"source": {"path": "$T/d.slr", "shuffle": true},
 "ops": [{"op": "filter", "column": "label", "in": [1, 2]},
         {"op": "select", "columns": ["image", "label"]},
         {"op": "batch", "size": 32}]}
EOF2

run 0 "$SLUICE" bench "$T/spec.json" --seconds 0.5 --json
[ "$(wc -l <"$OUT")" = 1 ] || fail "bench --json printed more than one line"
$PY - "$OUT" <<'PYEOF' || fail "bench --json output is not the expected object"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["samples_per_s"] > 0, o
assert o["bound"] in ("F", "P", "G", "?"), o
assert isinstance(o["stages"], list) and len(o["stages"]) >= 2, o
for s in o["stages"]:
    for k in ("name", "workers", "elements_per_s", "busy_s", "wait_in_s", "wait_out_s", "queue_fill"):
        assert k in s, (k, s)
assert "verdict" in o
# the throughput timeline: one rate per 0.25 s step of the 0.5 s run, and
# each step's workers per stage
assert o["timeline_step_s"] == 0.25, o
assert 2 <= len(o["timeline"]) <= 4 and all(r >= 0 for r in o["timeline"]), o["timeline"]
assert sum(o["timeline"]) > 0, o["timeline"]
assert len(o["timeline_workers"]) == len(o["timeline"]), o
assert all(len(w) == len(o["stages"]) and min(w) >= 1 for w in o["timeline_workers"]), o
PYEOF
run 0 "$SLUICE" bench "$T/spec.json" --seconds 0.3 --threads 2
has "$OUT" "samples/s"
has "$OUT" "timeline (samples/s per 0.25 s): "
has "$OUT" "verdict: "
run 2 "$SLUICE" bench "$T/spec.json" --seconds -1
# a Chrome/Perfetto trace of the workers
run 0 "$SLUICE" bench "$T/spec.json" --seconds 0.3 --trace "$T/trace.json"
$PY -c "import json,sys; d=json.load(open(sys.argv[1])); assert any(e['ph']=='X' for e in d['traceEvents'])" "$T/trace.json" || fail "bench --trace wrote no spans"
run 0 "$SLUICE" run "$T/spec.json" --trace "$T/trace2.json"
$PY -c "import json,sys; json.load(open(sys.argv[1]))" "$T/trace2.json" || fail "run --trace wrote bad JSON"

run 0 "$SLUICE" explain "$T/spec.json"
has "$OUT" "logical plan:"
has "$OUT" "ops[0] filter label in {1,2}"
has "$OUT" "optimised plan:"
has "$OUT" "filter pushed into the source index"
has "$OUT" "100 of 500 records kept"
has "$OUT" "stages:"
has "$OUT" "map[select]"
run 1 "$SLUICE" explain "$T/nope.json"
run 2 "$SLUICE" explain
finish
