#!/usr/bin/env bash
# The layout paths a spec can turn off ("vectorize", "read_rows",
# "parallel_collate"; docs/PIPELINE.md): explain and explain --json say
# which path runs and where batches are collated, and the batches are the
# same bytes either way.
. "$(dirname "$0")/common.bash"

# spec NAME EXTRA OPS: a shuffled synthetic source (fixed-shape columns, so
# its readers can read records into batch rows) with OPS and the top-level
# keys EXTRA.
spec() {
    cat >"$T/$1.json" <<EOF2
{"source": {"synthetic": {"records": 3000, "shards": 3, "bytes": 24}, "shuffle": true},
 "ops": [$3], "seed": 7, "epochs": 2$2}
EOF2
}

# layout NAME KEY: the value of layout.KEY in explain --json of NAME.json.
layout() {
    run 0 "$SLUICE" explain "$T/$1.json" --json --threads 2
    $PY -c 'import json,sys; v=json.load(open(sys.argv[1]))["layout"][sys.argv[2]]; print(json.dumps(v))' \
        "$OUT" "$2" 2>>"$ERR" || fail "explain --json of $1 is not JSON with layout.$2: $(head -c 300 "$OUT")"
}

# same_digests A B: both specs give the same batches, on 1 and 3 threads.
same_digests() {
    for th in 1 3; do
        run 0 "$SLUICE" run "$T/$1.json" --digest --threads $th
        cp "$OUT" "$T/$1.d"
        run 0 "$SLUICE" run "$T/$2.json" --digest --threads $th
        [ -s "$T/$1.d" ] || fail "$1: no batches"
        cmp -s "$OUT" "$T/$1.d" || fail "$1 and $2 give different batches on $th threads"
    done
}

BATCH='{"op": "batch", "size": 64}'

# read_rows: on by default for fixed-shape columns with nothing per sample
spec rows "" "$BATCH"
spec rows_off ', "read_rows": false' "$BATCH"
[ "$(layout rows read_rows)" = true ] || fail "read_rows is not chosen for a synthetic source + batch"
[ "$(layout rows collation)" = '"fused"' ] || fail "map + batch do not fuse for source + batch"
[ "$(layout rows direct)" = true ] || fail "no direct hand-off with nothing after batch"
[ "$(layout rows_off read_rows)" = false ] || fail "\"read_rows\": false is not honoured"
[ "$(layout rows_off collation)" = '"fused"' ] || fail "read_rows off changed the collation"
run 0 "$SLUICE" explain "$T/rows.json"
has "$OUT" "reading: each record straight into its batch row"
has "$OUT" "collation: fused, by stage 1"
run 0 "$SLUICE" explain "$T/rows_off.json"
grep -qF "straight into its batch row" "$OUT" && fail "explain says read_rows with \"read_rows\": false"
same_digests rows rows_off
# a state saved on one path resumes on the other (same spec identity)
run 0 "$SLUICE" run "$T/rows.json" --stop-after 7 --save-state "$T/st_rows.json" --threads 2
run 0 "$SLUICE" run "$T/rows.json" --resume "$T/st_rows.json" --digest --threads 2
cp "$OUT" "$T/rows_resumed"
run 0 "$SLUICE" run "$T/rows_off.json" --resume "$T/st_rows.json" --digest --threads 2
[ -s "$T/rows_resumed" ] || fail "no batches after resuming"
cmp -s "$OUT" "$T/rows_resumed" || fail "resuming with \"read_rows\": false gives other batches"
# the environment no longer switches it
SLUICE_READ_ROWS=0 run 0 "$SLUICE" explain "$T/rows.json" --json
grep -qF '"read_rows":true' "$OUT" || fail "SLUICE_READ_ROWS=0 still changes the layout: $(cat "$OUT")"

# parallel_collate: when map + batch cannot fuse (policy skip)
spec par ', "on_error": "skip"' "$BATCH"
spec par_off ', "on_error": "skip", "parallel_collate": false' "$BATCH"
[ "$(layout par collation)" = '"parallel"' ] || fail "policy skip + batch does not collate in parallel"
[ "$(layout par_off collation)" = '"final"' ] || fail "\"parallel_collate\": false does not keep the one-thread path"
run 0 "$SLUICE" explain "$T/par.json" --threads 2
has "$OUT" "collation: parallel, by stage 3 (collate(batch 64))"
has "$OUT" "collates batches, parallel"
run 0 "$SLUICE" explain "$T/par_off.json" --threads 2
has "$OUT" "collation: final, by stage 2"
grep -qF "collates batches, parallel" "$OUT" && fail "a parallel collate stage with \"parallel_collate\": false"
same_digests par par_off
# a state saved on one path resumes on the other (same spec identity)
run 0 "$SLUICE" run "$T/par.json" --stop-after 5 --save-state "$T/st.json" --threads 2
run 0 "$SLUICE" run "$T/par.json" --resume "$T/st.json" --digest --threads 2
cp "$OUT" "$T/resumed_on"
run 0 "$SLUICE" run "$T/par_off.json" --resume "$T/st.json" --digest --threads 2
cmp -s "$OUT" "$T/resumed_on" || fail "resuming with \"parallel_collate\": false gives other batches"

# vectorize: a cast before batch runs once per batch
CAST='{"op": "cast", "column": "payload", "dtype": "float32"}'
spec vec "" "$CAST, $BATCH"
spec vec_off ', "vectorize": false' "$CAST, $BATCH"
[ "$(layout vec vectorized_ops)" = 1 ] || fail "cast before batch is not vectorized"
[ "$(layout vec_off vectorized_ops)" = 0 ] || fail "\"vectorize\": false still vectorizes"
run 0 "$SLUICE" explain "$T/vec_off.json"
has "$OUT" "not vectorized (turned off in the spec)"
same_digests vec vec_off

# a wrong value or name is one line naming the key
spec bad ', "read_rows": 1' "$BATCH"
run 1 "$SLUICE" explain "$T/bad.json"
has "$ERR" "read_rows: must be true or false"
spec bad2 ', "parallel_colate": false' "$BATCH"
run 1 "$SLUICE" explain "$T/bad2.json"
has "$ERR" "parallel_colate: unknown key (keys: parallel_collate"
finish
