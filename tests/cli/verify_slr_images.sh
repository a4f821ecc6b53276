#!/usr/bin/env bash
# A JPEG cut in half packs under the default header check; `verify --check
# decode` finds it in the .slr (file, record, path, cause; exit 1; --json),
# training names its path and how to skip it, and "on_error": "skip" trains
# past it. A manifest claiming records no shard can hold is refused at open,
# at once, and a shard that does not match its manifest is named once, as
# its range (docs/CLI.md "verify", docs/FORMAT.md section 9).
. "$(dirname "$0")/common.bash"

GEN=$(dirname "$SLUICE")/sluice_gen_images
[ -x "$GEN" ] || { fail "no $GEN (built with the tools)"; finish; }
run 0 "$GEN" "$T/src" --count 40 --classes 2 --seed 3 --threads 1
cut=$(ls "$T"/src/class_00/*.jpg | sed -n 7p)
rel=${cut#"$T/src/"}
head -c $(($(stat -c %s "$cut") / 2)) "$cut" >"$T/half" && mv "$T/half" "$cut"

run 0 "$SLUICE" pack "$T/src" "$T/train.slr" --skip-bad
has "$OUT" "packed 40 records"
has "$OUT" "'sluice verify $T/train.slr --check decode' to check it"
run 0 "$SLUICE" verify "$T/train.slr"
has "$OUT" "every checksum matches"
run 0 "$SLUICE" verify "$T/train.slr" --check header
has "$OUT" "every checksum matches, every image's header reads"

# the decode check: the record, its path, the cause; exit 1
run 1 "$SLUICE" verify "$T/train.slr" --check decode
has "$ERR" "train.slr: 1 of 40 records damaged"
has "$ERR" "train.slr: record 6 (path $rel): column 'image': decode: premature end of JPEG file"
has "$ERR" "--check decode --skip-bad"
has "$ERR" "\"on_error\": \"skip\""
if grep -q "were checked when it was packed" "$ERR"; then fail "the old refusal is still there"; fi
run 1 "$SLUICE" verify "$T/train.slr" --check decode --json
$PY -c 'import json,sys
d=json.loads(open(sys.argv[1]).readline())
assert d["ok"] is False and d["records"]==40 and d["bad"]==1, d
assert d["errors"]==["train.slr: record 6 (path %s): column '"'"'image'"'"': decode: premature end of JPEG file" % sys.argv[3]], d' \
    "$OUT" "$T/train.slr" "$rel" || fail "--json: want ok false, bad 1, the record named"

# a clean dataset (packed with --check decode: the cut file left out) passes
run 0 "$SLUICE" pack "$T/src" "$T/clean.slr" --skip-bad --check decode
has "$OUT" "packed 39 records"
run 0 "$SLUICE" verify "$T/clean.slr" --check decode
has "$OUT" "ok: $T/clean.slr: 39 records, every checksum matches, every image decodes"
run 0 "$SLUICE" verify "$T/clean.slr" --check decode --json
has "$OUT" '"ok":true'
# a sharded directory is checked the same way
run 0 "$SLUICE" pack "$T/src" "$T/ds" --skip-bad --shard-size 200K
run 1 "$SLUICE" verify "$T/ds" --check decode
has "$ERR" "shard-0000"
has "$ERR" ": record 6 (path $rel): column 'image': decode: premature end of JPEG file"
# a dataset without images: nothing to decode, said so
$PY - "$T/img" "$T/lab" <<'PYEOF'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 20, 4, 4) + bytes(320))
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack(">II", 0x801, 20) + bytes(20))
PYEOF
run 0 "$SLUICE" pack "$T/img" "$T/lab" "$T/mnist.slr"
run 0 "$SLUICE" verify "$T/mnist.slr" --check decode
has "$OUT" "no column holds images"

# training: the path and how to go on; under skip it trains past the record
cat >"$T/spec.json" <<JSON
{"source": {"path": "$T/train.slr"}, "ops": [{"op": "decode", "column": "image"},
 {"op": "resize", "column": "image", "size": [32, 32]}, {"op": "batch", "size": 4}]}
JSON
run 1 "$SLUICE" run "$T/spec.json"
has "$ERR" "train.slr: record 6 (path $rel): ops[0] (decode_resize): premature end of JPEG file"
has "$ERR" "; to drop bad samples and go on: \"on_error\": \"skip\" in the spec, .on_error(\"skip\") in Python"
one_line "$ERR"
$PY -c 'import json,sys; s=json.load(open(sys.argv[1])); s["on_error"]="skip"; json.dump(s,open(sys.argv[1],"w"))' "$T/spec.json"
run 0 "$SLUICE" run "$T/spec.json"

# ---- manifests ----------------------------------------------------------------
run 0 "$SLUICE" pack "$T/src" "$T/m" --shard-size 150K --check decode --skip-bad
cp "$T/m/manifest.json" "$T/manifest.orig"
# the last shard said to hold 50,000,001 more records: refused by info and
# verify at open, at once, naming the shard
$PY - "$T/m/manifest.json" 0 <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
last = m["shards"][-1]
last["records"] += 50000000
m["records"] += 50000000
if sys.argv[2] == "1":
    last["bytes"] = 3000000000
json.dump(m, open(sys.argv[1], "w"))
PYEOF
lastfile=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["shards"][-1]["file"])' "$T/m/manifest.json")
for cmd in info verify; do
    start=$(date +%s%N)
    run 1 "$SLUICE" $cmd "$T/m"
    ms=$((($(date +%s%N) - start) / 1000000))
    [ "$ms" -lt 1000 ] || fail "$cmd took $ms ms over phantom records, want well under a second"
    has "$ERR" "$lastfile"
    has "$ERR" "cannot fit in"
done
# the byte count raised to match: the file's own size refuses it
cp "$T/manifest.orig" "$T/m/manifest.json"
$PY - "$T/m/manifest.json" 1 <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
last = m["shards"][-1]
last["records"] += 50000000
m["records"] += 50000000
last["bytes"] = 3000000000
json.dump(m, open(sys.argv[1], "w"))
PYEOF
start=$(date +%s%N)
run 1 "$SLUICE" verify "$T/m"
ms=$((($(date +%s%N) - start) / 1000000))
[ "$ms" -lt 1000 ] || fail "verify took $ms ms, want well under a second"
has "$ERR" "$lastfile: the manifest says"
has "$ERR" "hold at most"
# a count a shard could hold but its footer does not: the shard's whole
# range, named once
cp "$T/manifest.orig" "$T/m/manifest.json"
$PY - "$T/m/manifest.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
last = m["shards"][-1]
extra = (last["bytes"] - 288) // 56 - last["records"]
last["records"] += extra
m["records"] += extra
json.dump(m, open(sys.argv[1], "w"))
PYEOF
run 1 "$SLUICE" verify "$T/m" --json
$PY -c 'import json,sys
d=json.loads(open(sys.argv[1]).readline())
assert len(d["errors"])==1 and ": records " in d["errors"][0] and "does not match the manifest" in d["errors"][0], d' \
    "$OUT" || fail "want the shard named once, as its range"
finish
