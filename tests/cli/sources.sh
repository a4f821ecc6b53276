#!/usr/bin/env bash
# info, verify, pack and index on the foreign sources: TFRecord files written
# by Google's protobuf runtime (tests/source/make_tfrecords.py), tar shards
# written by GNU tar (tests/source/make_tar_shards.py), an ImageFolder of PIL
# JPEGs and an IDX pair written here. Expected values come from the writers.
. "$(dirname "$0")/common.bash"

foreign_sources
TF=$T/tf/plain.tfrecord
EXP_TF=$T/tf/expected.json
EXP_TAR=$T/tar/expected.json

# An ImageFolder (3 classes, 2+3+4 images) and an IDX pair (17 records).
$PY - "$T/folder" "$T/img-idx3-ubyte.gz" "$T/lab-idx1-ubyte.gz" <<'PYEOF' || fail "writing the ImageFolder and IDX inputs"
import gzip, os, struct, sys
from PIL import Image
root, img, lab = sys.argv[1:4]
for c, cls in enumerate(["ant", "bee", "cow"]):
    os.makedirs(os.path.join(root, cls))
    for k in range(2 + c):
        Image.new("RGB", (20 + k, 16 + c), (40 * c, 30 * k, 99)).save(os.path.join(root, cls, "%d.jpg" % k), "JPEG")
n = 17
with gzip.open(img, "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 5, 4) + bytes((i * 3 + k) & 255 for i in range(n) for k in range(20)))
with gzip.open(lab, "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(i % 4 for i in range(n)))
PYEOF

# json_check FILE PYTHON-EXPR [ARGS...]: the expression, with d = the JSON in
# FILE and a = the extra arguments, must be true.
json_check() {
    local file=$1 expr=$2
    shift 2
    $PY - "$file" "$expr" "$@" <<'PYEOF' || fail "json check: $expr"
import json, sys
d = json.load(open(sys.argv[1]))
a = sys.argv[3:]
if not eval(sys.argv[2]):
    print("  got: %s" % json.dumps(d)[:600], file=sys.stderr)
    sys.exit(1)
PYEOF
}

# ---- info --json: records ---------------------------------------------------
run 0 "$SLUICE" info "$TF" --json
json_check "$OUT" 'd["records"] == 12 and d["kind"] == "tfrecord"'
run 0 "$SLUICE" info "$T/tar/shard-001.tar" --json
json_check "$OUT" 'd["records"] == 6 and d["kind"] == "webdataset"'
run 0 "$SLUICE" info "$T/folder" --json
json_check "$OUT" 'd["records"] == 9 and d["kind"] == "image_folder"'
run 0 "$SLUICE" info "$T/img-idx3-ubyte.gz" "$T/lab-idx1-ubyte.gz" --json
json_check "$OUT" 'd["records"] == 17 and d["kind"] == "idx"'

# ---- pack TFRecord: one typed column per feature key -------------------------
run 0 "$SLUICE" pack "$TF" "$T/tf.slr"
run 0 "$SLUICE" info "$T/tf.slr" --json
json_check "$OUT" '{c["name"]: (c["type"], c.get("dtype"), c.get("shape")) for c in d["columns"]} == {
    "image/encoded": ("bytes", None, None), "image/filename": ("bytes", None, None),
    "image/class/label": ("int64", None, None), "ids": ("array", "int64", [-1]),
    "scores": ("array", "float32", [-1]), "weight": ("array", "float32", [])} and d["records"] == 12'
# records in file order, values as written
for i in 0 5 11; do
    run 0 "$SLUICE" cat "$T/tf.slr" --index "$i" --column image/class/label
    want=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["plain.tfrecord"][int(sys.argv[2])]["image/class/label"])' "$EXP_TF" "$i")
    [ "$(cat "$OUT")" = "$want" ] || fail "tf.slr record $i label '$(cat "$OUT")', want '$want'"
done
# two files: the second file's records after the first's
run 0 "$SLUICE" pack "$TF" "$T/tf/plain.tfrecord.gz" "$T/tf2.slr"
run 0 "$SLUICE" info "$T/tf2.slr" --json
json_check "$OUT" 'd["records"] == 24'

# --features: keep and rename only those
run 0 "$SLUICE" pack "$TF" --features image/encoded=image,image/class/label=label "$T/tfr.slr"
run 0 "$SLUICE" info "$T/tfr.slr" --json
json_check "$OUT" 'sorted((c["name"], c["type"]) for c in d["columns"]) == [("image", "bytes"), ("label", "int64")]'
run 0 "$SLUICE" cat "$T/tfr.slr" --index 3 --column label
[ "$(cat "$OUT")" = "$((3 * 37 - 100))" ] || fail "renamed label of record 3: '$(cat "$OUT")'"

# ---- pack tar shards: one column per extension, through a brace pattern -------
run 0 "$SLUICE" pack "$T/tar/shard-{000..002}.tar" "$T/wds.slr"
run 0 "$SLUICE" info "$T/wds.slr" --json
json_check "$OUT" 'd["records"] == 18 and {c["name"]: c["type"] for c in d["columns"]} == {
    "__key__": "string", "jpg": "bytes", "cls": "int64", "json": "string", "txt": "string",
    "seg.png": "bytes"}'
# cls parsed as int64, with and without a trailing newline, in shard then tar order
$PY - "$EXP_TAR" >"$T/cls.want" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
for s in ("shard-000.tar", "shard-001.tar", "shard-002.tar"):
    for smp in d[s]:
        print(smp["cls"])
PYEOF
: >"$T/cls.got"
for i in $(seq 0 17); do
    "$SLUICE" cat "$T/wds.slr" --index "$i" --column cls >>"$T/cls.got" || fail "cat cls $i"
done
cmp -s "$T/cls.got" "$T/cls.want" || fail "wds.slr cls values differ from what was archived"
"$SLUICE" cat "$T/wds.slr" --index 7 --column jpg >"$T/jpg.got" || fail "cat jpg 7"
want=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["shard-001.tar"][1]["members"]["jpg"])' "$EXP_TAR")
cmp -s "$T/jpg.got" "$want" || fail "wds.slr record 7 jpg differs from the archived file"

# ---- sluice index, then info shows the label column indexed ------------------
cp "$TF" "$T/a.tfrecord"
run 0 "$SLUICE" index "$T/a.tfrecord"
[ -f "$T/a.tfrecord.slidx" ] || fail "sluice index wrote no a.tfrecord.slidx"
run 0 "$SLUICE" info "$T/a.tfrecord" --json
json_check "$OUT" 'd["indexed_files"] == 1 and [c["name"] for c in d["columns"] if c.get("indexed")] == ["image/class/label"]'
run 0 "$SLUICE" info "$T/a.tfrecord"
has "$OUT" "image/class/label int64 (indexed)"
cp "$T/tar/shard-000.tar" "$T/s.tar"
run 0 "$SLUICE" index "$T/s.tar" --json
json_check "$OUT" 'd["ok"] is True'
run 0 "$SLUICE" info "$T/s.tar" --json
json_check "$OUT" 'd["index"] == "slidx" and d["records"] == 6 and [c["name"] for c in d["columns"] if c.get("indexed")] == ["cls"]'

# a stale index: the file changed after indexing
printf 'x' >>"$T/a.tfrecord"
run 1 "$SLUICE" info "$T/a.tfrecord"
has "$ERR" "a.tfrecord.slidx is stale (a.tfrecord changed"
has "$ERR" "sluice index"
run 1 "$SLUICE" verify "$T/a.tfrecord"
has "$ERR" "a.tfrecord.slidx is stale"
# the same bytes with another mtime (a copy without -p): the index holds
touch -d '2001-02-03' "$T/s.tar"
run 0 "$SLUICE" info "$T/s.tar" --json
json_check "$OUT" 'd["index"] == "slidx" and d["records"] == 6'
# a byte changed in place (same size): the sample that holds it fails, named
python3 -c "
import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[700] ^= 1; open(p, 'wb').write(b)" "$T/s.tar"
run 1 "$SLUICE" verify "$T/s.tar"
cat "$OUT" "$ERR" >"$T/verify.txt"
has "$T/verify.txt" "checksum mismatch against s.tar.slidx"
run 0 "$SLUICE" index "$T/s.tar"
run 0 "$SLUICE" info "$T/s.tar" --json

# ---- verify on a damaged TFRecord: exit 1, the record named --------------------
$PY - "$TF" "$T/bad.tfrecord" "$EXP_TF" <<'PYEOF' || fail "damaging a copy"
import json, sys
blob = bytearray(open(sys.argv[1], "rb").read())
off = json.load(open(sys.argv[3]))["plain_offsets"][4]
blob[off + 12 + 30] ^= 0x20          # a byte of record 4's data
open(sys.argv[2], "wb").write(bytes(blob))
PYEOF
run 0 "$SLUICE" verify "$TF"
has "$OUT" "12 records, every record reads"
run 1 "$SLUICE" verify "$T/bad.tfrecord"
has "$ERR" "bad.tfrecord: record 4 (offset"
has "$ERR" "data checksum mismatch"
has "$ERR" "1 of 12 records damaged"
run 1 "$SLUICE" verify "$T/bad.tfrecord" --json
json_check "$OUT" 'd["ok"] is False and d["bad"] == 1 and "record 4" in d["errors"][0]'
# pack refuses it and writes nothing; --skip-bad leaves the record out
run 1 "$SLUICE" pack "$T/bad.tfrecord" "$T/bad.slr"
has "$ERR" "record 4"
[ -e "$T/bad.slr" ] && fail "a failed pack left $T/bad.slr"
run 0 "$SLUICE" pack "$T/bad.tfrecord" "$T/bad.slr" --skip-bad --json
json_check "$OUT" 'd["records"] == 11 and d["skipped"] == 1'

# ---- usage errors: exit 2 ---------------------------------------------------
run 2 "$SLUICE" index
has "$ERR" "missing the FILE"
run 2 "$SLUICE" index --bogus "$TF"
run 2 "$SLUICE" pack "$TF"
has "$ERR" "missing the output path DST"
run 2 "$SLUICE" pack "$TF" --features "=image" "$T/x.slr"
has "$ERR" "--features wants KEY=COLUMN"
run 2 "$SLUICE" info "$TF" --features
run 2 "$SLUICE" verify --nope "$TF"
[ -e "$T/x.slr" ] && fail "a usage error wrote $T/x.slr"
finish
