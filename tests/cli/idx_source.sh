#!/usr/bin/env bash
# The IDX direct source ({"idx": ...}, source_idx.c): a memory source over the
# two files' arrays. Its batches equal those of the same pair packed into .slr
# (no shuffle, shuffle, a filter pushed into the label column, read_rows on and
# off); it reads whole batches row by row like any memory source; its kind
# stays "idx"; damaged inputs are refused at open, naming the file, and a good
# pair opens right after.
. "$(dirname "$0")/common.bash"

IMG=$T/img-idx3-ubyte.gz
LAB=$T/lab-idx1-ubyte.gz
N=700
$PY - "$IMG" "$LAB" "$N" <<'PYEOF' || fail "writing the IDX pair"
import gzip, struct, sys
img, lab, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gzip.open(img, "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 12, 9) + bytes((i * 31 + k * 7) & 255 for i in range(n) for k in range(108)))
with gzip.open(lab, "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes((i * 3) % 10 for i in range(n)))
PYEOF
run 0 "$SLUICE" pack "$IMG" "$LAB" "$T/p.slr"

# spec NAME SOURCE-JSON [read_rows] [filter] [shuffle]
spec() {
    $PY - "$T/$1.json" "$2" "$3" "$4" "$5" <<'PYEOF'
import json, sys
path, src, read_rows, filt, shuffle = sys.argv[1:]
s = {"source": json.loads(src), "seed": 11, "epochs": 2}
if shuffle == "1":
    s["source"]["shuffle"] = True
ops = [{"op": "filter", "column": "label", "in": [1, 4, 7]}] if filt == "1" else []
s["ops"] = ops + [{"op": "batch", "size": 33}]
if read_rows == "0":
    s["read_rows"] = False
json.dump(s, open(path, "w"))
PYEOF
}

IDXSRC="{\"idx\": {\"images\": \"$IMG\", \"labels\": \"$LAB\"}}"
SLRSRC="{\"path\": \"$T/p.slr\"}"
for rr in 1 0; do
    for filt in 0 1; do
        for shuf in 0 1; do
            k=rr$rr-f$filt-s$shuf
            spec "idx-$k" "$IDXSRC" $rr $filt $shuf
            spec "slr-$k" "$SLRSRC" $rr $filt $shuf
            run 0 "$SLUICE" run "$T/idx-$k.json" --digest
            cp "$OUT" "$T/idx-$k.digest"
            run 0 "$SLUICE" run "$T/slr-$k.json" --digest
            cmp -s "$OUT" "$T/idx-$k.digest" || fail "$k: IDX batches differ from the packed .slr's"
            [ "$(wc -l <"$OUT")" -gt 4 ] || fail "$k: too few batches"
            run 0 "$SLUICE" explain "$T/idx-$k.json"
            if [ $rr = 1 ]; then
                has "$OUT" "reading: each record straight into its batch row"
            elif grep -qF "straight into its batch row" "$OUT"; then
                fail "$k: read_rows false still reads into batch rows"
            fi
            [ $filt = 0 ] || has "$OUT" "filter pushed into the source index: label in {1,4,7}"
        done
    done
done

# what the source is: kind idx, the images file's name, an indexed int64 label
run 0 "$SLUICE" info "$LAB" "$IMG" --json
$PY - "$OUT" "$N" <<'PYEOF' || fail "info --json of the IDX pair"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["kind"] == "idx" and d["name"] == "img-idx3-ubyte.gz" and d["records"] == int(sys.argv[2]), d
assert d["columns"] == [{"name": "image", "type": "array", "dtype": "uint8", "shape": [12, 9]},
                        {"name": "label", "type": "int64", "indexed": True}], d["columns"]
PYEOF
run 0 "$SLUICE" explain "$T/idx-rr1-f0-s0.json"
has "$OUT" "source idx img-idx3-ubyte.gz ($N records"
# and a pack's "source" metadata
run 0 "$SLUICE" info "$T/p.slr" --json
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["metadata"]["source"] == "idx", d' "$OUT" \
    || fail "the pack's source metadata"

# damaged pairs are refused at open, naming the file and the cause
gzip -dc "$IMG" >"$T/img"
gzip -dc "$LAB" >"$T/lab"
head -c 20000 "$T/img" >"$T/img-short"
{ cat "$T/img"; printf 'xy'; } >"$T/img-long"
head -c $(($(stat -c %s "$IMG") / 2)) "$IMG" >"$T/img-cut.gz"
{ cat "$IMG"; printf 'trailing'; } >"$T/img-tail.gz"
$PY -c 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack(">II",0x801,699)+bytes(699))' "$T/lab699"
bad() { # bad IMAGES LABELS TEXT...
    local a=$1 b=$2
    shift 2
    run 1 "$SLUICE" info "$a" "$b"
    for t in "$@"; do has "$ERR" "$t"; done
    one_line "$ERR"
    # a good pair right after
    run 0 "$SLUICE" info "$IMG" "$LAB" --json
    has "$OUT" "\"records\":$N"
}
bad "$T/img-short" "$T/lab" "img-short: truncated: the header declares 700 items"
bad "$T/img-long" "$T/lab" "img-long: 2 extra bytes after the 700 items"
bad "$T/img-cut.gz" "$T/lab" "img-cut.gz" "truncated"
bad "$T/img-tail.gz" "$T/lab" "img-tail.gz"
bad "$T/img" "$T/lab699" "700 images" "699 labels"
bad "$T/lab" "$T/lab" "one images file"

finish
