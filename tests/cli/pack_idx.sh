#!/usr/bin/env bash
# IDX (MNIST-style) packing through the CLI: pack, info, verify, cat, scan.
. "$(dirname "$0")/common.bash"

FM=/usr/share/datasets/fashion-mnist
if [ -r "$FM/t10k-images-idx3-ubyte.gz" ]; then
    IMG=$FM/t10k-images-idx3-ubyte.gz
    LAB=$FM/t10k-labels-idx1-ubyte.gz
    N=10000
else
    # not installed: a small IDX pair made here
    IMG=$T/img-idx3-ubyte.gz
    LAB=$T/lab-idx1-ubyte.gz
    N=500
    $PY - "$IMG" "$LAB" "$N" <<'PYEOF'
import gzip, struct, sys
img, lab, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gzip.open(img, "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes((i * 7 + k) & 255 for i in range(n) for k in range(784)))
with gzip.open(lab, "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PYEOF
fi

# gzip, labels first
run 0 "$SLUICE" pack "$LAB" "$IMG" "$T/f.slr"
has "$OUT" "packed $N records (idx"
# plain (uncompressed) copies give the same dataset
gzip -dc "$IMG" >"$T/img-plain"
gzip -dc "$LAB" >"$T/lab-plain"
run 0 "$SLUICE" pack "$T/img-plain" "$T/lab-plain" "$T/plain.slr" --json
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] and d["records"]==int(sys.argv[2]) and d["kind"]=="idx", d' \
    "$OUT" "$N" || fail "pack --json summary"
cmp -s "$T/f.slr" "$T/plain.slr" || fail "gzip and plain inputs packed to different bytes"

# refuses to overwrite without --force
run 1 "$SLUICE" pack "$IMG" "$LAB" "$T/f.slr"
has "$ERR" "already exists"
run 0 "$SLUICE" pack "$IMG" "$LAB" "$T/f.slr" --force --jobs 1 --shard-size 1G

# info --json: records, columns with dtype/shape, label counts from the index
run 0 "$SLUICE" info "$T/f.slr" --json
$PY - "$OUT" "$N" "$LAB" <<'PYEOF' || fail "info --json content"
import json, sys, gzip, collections
d = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
assert d["records"] == n, d["records"]
cols = {c["name"]: c for c in d["columns"]}
assert cols["image"]["type"] == "array" and cols["image"]["dtype"] == "uint8", cols
assert cols["image"]["shape"] == [28, 28], cols
assert cols["label"]["type"] == "int64", cols
labels = gzip.open(sys.argv[3]).read()[8:]
want = collections.Counter(labels)
got = {int(k): v for k, v in d["label_counts"].items()}
assert got == dict(want), (got, want)
assert d["metadata"]["source"] == "idx"
assert len(d["shards"]) == 1
PYEOF
run 0 "$SLUICE" info "$T/f.slr"
has "$OUT" "records   $N"
has "$OUT" "uint8 [28, 28]"

run 0 "$SLUICE" verify "$T/f.slr"
has "$OUT" "every checksum matches"
run 0 "$SLUICE" verify --json "$T/f.slr"
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is True and d["bad"]==0 and d["errors"]==[] and d["records"]==int(sys.argv[2]), d' \
    "$OUT" "$N" || fail "verify --json"

# cat: label as text, image as the raw 784 bytes of the IDX file
for i in 0 1 $((N - 1)); do
    run 0 "$SLUICE" cat "$T/f.slr" --index "$i" --column label
    want=$($PY -c 'import gzip,sys; print(gzip.open(sys.argv[1]).read()[8 + int(sys.argv[2])])' "$LAB" "$i")
    [ "$(cat "$OUT")" = "$want" ] || fail "cat label $i: '$(cat "$OUT")' want '$want'"
    "$SLUICE" cat "$T/f.slr" -i "$i" -c image >"$T/px" || fail "cat image $i"
    $PY -c 'import gzip,sys; sys.stdout.buffer.write(gzip.open(sys.argv[1]).read()[16 + 784*int(sys.argv[2]):16 + 784*(int(sys.argv[2])+1)])' \
        "$IMG" "$i" >"$T/want"
    cmp -s "$T/px" "$T/want" || fail "cat image $i differs from the IDX bytes"
done

# scan: sequential and random, JSON keys
for mode in "" "--random"; do
    run 0 "$SLUICE" scan "$T/f.slr" $mode --threads 2 --json
    $PY - "$OUT" "$N" "$mode" <<'PYEOF' || fail "scan $mode --json"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("records_per_s", "mb_per_s", "records", "bytes", "seconds", "threads", "mode"):
    assert k in d, k
assert d["records"] == int(sys.argv[2]), d
assert d["bytes"] == d["records"] * (784 + 8), d
assert d["threads"] == 2 and d["mode"] == ("random" if sys.argv[3] else "sequential"), d
assert d["records_per_s"] > 0 and d["mb_per_s"] > 0
PYEOF
done
run 0 "$SLUICE" scan "$T/f.slr" --seconds 0.2
has "$OUT" "records/s"

# sharded output
run 0 "$SLUICE" pack "$IMG" "$LAB" "$T/sh.slr" --shard-size 2M
run 0 "$SLUICE" info "$T/sh.slr" --json
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["records"]==int(sys.argv[2]) and len(d["shards"])>1, d["shards"]' \
    "$OUT" "$N" || fail "--shard-size 2M gave one shard"
run 0 "$SLUICE" verify "$T/sh.slr"
# --force replaces a sharded dataset (a directory) only once the new one is in place
run 1 "$SLUICE" pack "$IMG" "$IMG" "$T/sh.slr" --force
[ -d "$T/sh.slr" ] || fail "a failed --force pack lost the old dataset"
run 0 "$SLUICE" verify "$T/sh.slr"
run 0 "$SLUICE" pack "$IMG" "$LAB" "$T/sh.slr" --force
[ -f "$T/sh.slr" ] || fail "--force did not replace the sharded dataset with one file"
[ -e "$T/sh.slr.replaced" ] && fail "--force left the old dataset behind"
run 0 "$SLUICE" verify "$T/sh.slr"
# ... and never a directory that is not a dataset
mkdir -p "$T/notds/keep"
run 1 "$SLUICE" pack "$IMG" "$LAB" "$T/notds" --force
has "$ERR" "not a sluice dataset"
[ -d "$T/notds/keep" ] || fail "--force touched a directory that is not a dataset"
finish
