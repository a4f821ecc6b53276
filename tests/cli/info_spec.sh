#!/usr/bin/env bash
# `sluice info SPEC.json` (issue 45: "info of a spec shows each input's
# share"): a mixture's inputs with their weights normalised and their
# samples per epoch where the schedule fixes them (counts, all_exhausted),
# the expected number under never, none under first_exhausted; text and
# --json; a spec of one source shows its columns; a bad spec fails naming
# the input. Inputs are synthetic sources (records computed from their index).
. "$(dirname "$0")/common.bash"

spec() { # FILE WEIGHTS STOP: a mix of 100 and 40 synthetic records
    cat >"$1" <<JSON
{"source": {"kind": "mix", "inputs": [{"synthetic": {"records": 100}, "shuffle": true},
                                      {"synthetic": {"records": 40}}],
            "weights": $2, "stop": "$3", "schedule": "exact"},
 "ops": [{"op": "batch", "size": 10}]}
JSON
}

# shares under never: normalised, the expected samples (140 positions)
spec "$T/never.json" "[3, 1]" never
run 0 "$SLUICE" info "$T/never.json"
has "$OUT" "mix       2 inputs, schedule exact, stop never, 140 positions per epoch"
has "$OUT" "input 0  synthetic(100 records, 1 shards) (synthetic, 100 records): share 0.7500, ~105 samples per epoch"
has "$OUT" "input 1  synthetic(40 records, 1 shards) (synthetic, 40 records): share 0.2500, ~35 samples per epoch"
has "$OUT" "batches   14 per epoch"
run 0 "$SLUICE" info "$T/never.json" --json
$PY - "$OUT" <<'PYEOF' || fail "never --json"
import json, sys
d = json.load(open(sys.argv[1]))
m = d["mix"]
assert d["batches_per_epoch"] == 14 and d["columns"] == ["index", "shard", "payload"], d
assert m["positions_per_epoch"] == 140 and m["epoch_length_known"] is True, m
assert [i["weight"] for i in m["inputs"]] == [0.75, 0.25], m
assert [i["samples_per_epoch"] for i in m["inputs"]] == [None, None], m
assert [i["expected_samples"] for i in m["inputs"]] == [105, 35], m
assert [i["records"] for i in m["inputs"]] == [100, 40], m
assert "samples" not in m["inputs"][0] and "share" not in m["inputs"][0], m
PYEOF

# counts per epoch: exact, the shares they make
spec "$T/counts.json" '[{"samples": 50}, {"samples": 20}]' never
run 0 "$SLUICE" info "$T/counts.json" --json
$PY - "$OUT" <<'PYEOF' || fail "counts --json"
import json, sys
m = json.load(open(sys.argv[1]))["mix"]
assert [i["samples_per_epoch"] for i in m["inputs"]] == [50, 20], m
assert abs(m["inputs"][0]["weight"] - 50 / 70) < 1e-12, m
assert m["positions_per_epoch"] == 70, m
PYEOF
run 0 "$SLUICE" info "$T/counts.json"
has "$OUT" "share 0.7143, 50 samples per epoch"
has "$OUT" "share 0.2857, 20 samples per epoch"

# all_exhausted: every record once
spec "$T/all.json" "[1, 1]" all_exhausted
run 0 "$SLUICE" info "$T/all.json"
has "$OUT" "share 0.5000, 100 samples per epoch"
has "$OUT" "share 0.5000, 40 samples per epoch"

# first_exhausted: the epoch's length is known when it ends
spec "$T/first.json" "[1, 1]" first_exhausted
run 0 "$SLUICE" info "$T/first.json"
has "$OUT" "140 positions per epoch at most (it ends when an input runs out)"
has "$OUT" "share 0.5000, samples per epoch unknown until an input runs out"
run 0 "$SLUICE" info "$T/first.json" --json
$PY - "$OUT" <<'PYEOF' || fail "first --json"
import json, sys
m = json.load(open(sys.argv[1]))["mix"]
assert m["epoch_length_known"] is False, m
assert [i["expected_samples"] for i in m["inputs"]] == [None, None], m
PYEOF

# one source: its columns, no mix
cat >"$T/one.json" <<'JSON'
{"source": {"synthetic": {"records": 30}}, "ops": [{"op": "batch", "size": 10}]}
JSON
run 0 "$SLUICE" info "$T/one.json" --json
$PY - "$OUT" <<'PYEOF' || fail "one --json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["batches_per_epoch"] == 3 and "mix" not in d and d["columns"] == ["index", "shard", "payload"], d
PYEOF

# a mix whose inputs differ: the message names the input and the column
cat >"$T/bad.json" <<'JSON'
{"source": {"kind": "mix", "inputs": [{"synthetic": {"records": 10, "bytes": 16}},
                                      {"synthetic": {"records": 10, "bytes": 32}}]}}
JSON
run 1 "$SLUICE" info "$T/bad.json"
has "$ERR" "$T/bad.json: mix: inputs[0] (synthetic(10 records, 1 shards)) and inputs[1]"
has "$ERR" "differ in column 'payload'"
run 2 "$SLUICE" info "$T/one.json" --features a=b

finish
