#!/usr/bin/env bash
# `sluice run`: digests are identical whatever the thread count (rule R5); stopping
# after K batches with a saved state and resuming in a new process gives the
# remaining batches byte for byte (with shuffle and sharding); bad specs give
# one-line errors naming the field.
. "$(dirname "$0")/common.bash"

# a small IDX pair -> .slr (300 images, labels i % 10)
$PY - "$T/img.gz" "$T/lab.gz" 300 <<'PYEOF'
import gzip, struct, sys
img, lab, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gzip.open(img, "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes((i * 7 + k * 13) & 255 for i in range(n) for k in range(784)))
with gzip.open(lab, "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PYEOF
run 0 "$SLUICE" pack "$T/img.gz" "$T/lab.gz" "$T/d.slr"

cat >"$T/spec.json" <<EOF2
{"source": {"path": "$T/d.slr", "shuffle": true, "shard": {"index": 1, "count": 2, "equal": "pad"}},
 "ops": [{"op": "filter", "column": "label", "not_in": [9]},
         {"op": "batch", "size": 16}, {"op": "prefetch", "depth": 3}],
 "seed": 11, "epochs": 3}
EOF2

# determinism across thread counts
run 0 "$SLUICE" run "$T/spec.json" --digest --threads 1
cp "$OUT" "$T/d1"
n=$(wc -l <"$T/d1")
[ "$n" = 27 ] || fail "expected 27 batches over 3 epochs (135 samples per epoch / 16), got $n"
has "$T/d1" "2:8 "
for th in 2 4 8; do
    run 0 "$SLUICE" run "$T/spec.json" --digest --threads $th
    cmp -s "$OUT" "$T/d1" || fail "digests differ with --threads $th"
done
# epochs differ (fresh permutation)
[ "$(sed -n 1p "$T/d1" | cut -d' ' -f2)" != "$(sed -n 10p "$T/d1" | cut -d' ' -f2)" ] || fail "epoch 0 and 1 start alike"
# --epochs overrides the spec
run 0 "$SLUICE" run "$T/spec.json" --digest --epochs 1
[ "$(wc -l <"$OUT")" = 9 ] || fail "--epochs 1 should give 9 batches"

# stop, save, resume in a new process: the rest is byte-identical
for k in 1 9 13; do
    run 0 "$SLUICE" run "$T/spec.json" --digest --threads 2 --stop-after $k --save-state "$T/st.json"
    [ "$(wc -l <"$OUT")" = $k ] || fail "--stop-after $k printed $(wc -l <"$OUT") lines"
    has "$T/st.json" '"epoch"'
    run 0 "$SLUICE" run "$T/spec.json" --digest --threads 3 --resume "$T/st.json"
    tail -n +$((k + 1)) "$T/d1" >"$T/rest"
    cmp -s "$OUT" "$T/rest" || fail "resume after $k batches differs"
done

# summary line without --digest
run 0 "$SLUICE" run "$T/spec.json"
has "$OUT" "27 batches, 405 samples"

# bad specs: one line naming the field, exit 1
echo '{"source": {"path": "'"$T"'/d.slr"}, "ops": [{"op": "batch", "size": 0}]}' >"$T/bad1.json"
run 1 "$SLUICE" run "$T/bad1.json"
has "$ERR" "ops[0].size: must be a positive integer"
one_line "$ERR"
echo '{"source": {"path": "'"$T"'/d.slr"}, "ops": [{"op": "bogus"}]}' >"$T/bad2.json"
run 1 "$SLUICE" run "$T/bad2.json"
has "$ERR" "ops[0].op: unknown op 'bogus'"
echo '{"source": {"path": "'"$T"'/d.slr", "shard": {"index": 2, "count": 2}}}' >"$T/bad3.json"
run 1 "$SLUICE" run "$T/bad3.json"
has "$ERR" "source.shard.index"
echo 'hello' >"$T/not.slr"
echo '{"source": {"path": "'"$T"'/not.slr"}}' >"$T/bad4.json"
run 1 "$SLUICE" run "$T/bad4.json"
has "$ERR" "source.path: "
one_line "$ERR"
echo '{"source": {"path": "'"$T"'/d.slr"}, "ops": [{"op": "filter", "column": "lbl", "in": [1]}]}' >"$T/bad5.json"
run 1 "$SLUICE" run "$T/bad5.json"
has "$ERR" "ops[0].column: no column 'lbl'"
run 2 "$SLUICE" run
run 2 "$SLUICE" run "$T/spec.json" --threads zero
run 2 "$SLUICE" run "$T/spec.json" --save-state "$T/x.json"
run 1 "$SLUICE" run "$T/spec.json" --resume "$T/bad1.json"
has "$ERR" "state"
run 0 "$SLUICE" run --help
has "$OUT" "--digest"
finish
