#!/usr/bin/env bash
# What a new user meets first: verify checks what pack checks, errors name
# the file (not only the record number), messages come out whole, every
# command takes the inputs the docs say, and wrong input says what it is.
# TFRecord files and tar shards come from tests/source/make_*.py.
. "$(dirname "$0")/common.bash"

foreign_sources
TF=$T/tf/plain.tfrecord

json_check() {
    local file=$1 expr=$2
    shift 2
    $PY - "$file" "$expr" "$@" <<'PYEOF' || fail "json check: $expr"
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
d = json.loads(lines[0]) if len(lines) == 1 else [json.loads(l) for l in lines]
a = sys.argv[3:]
if not eval(sys.argv[2]):
    print("  got: %s" % json.dumps(d)[:600], file=sys.stderr)
    sys.exit(1)
PYEOF
}

# An ImageFolder with 6 good JPEGs and, among them, a text file named .jpg, a
# BMP, a TIFF and a truncated JPEG.
$PY - "$T/bad" "$T/good" <<'PYEOF' || fail "writing the image folders"
import os, sys
from PIL import Image
for root, bad in ((sys.argv[1], True), (sys.argv[2], False)):
    for c, cls in enumerate(["ant", "bee", "cow"]):
        os.makedirs(os.path.join(root, cls))
        for k in range(2):
            Image.new("RGB", (20 + k, 16), (40 * c, 30 * k, 99)).save(
                os.path.join(root, cls, "%d.jpg" % k), "JPEG")
    if bad:
        open(os.path.join(root, "ant", "text.jpg"), "w").write("not an image\n")
        Image.new("RGB", (8, 8)).save(os.path.join(root, "bee", "x.bmp"), "BMP")
        Image.new("RGB", (8, 8)).save(os.path.join(root, "bee", "y.tif"), "TIFF")
        d = open(os.path.join(root, "cow", "0.jpg"), "rb").read()
        open(os.path.join(root, "cow", "cut.jpg"), "wb").write(d[: len(d) // 2])
PYEOF

# ---- 2. verify of an image source checks what pack checks --------------------
run 1 "$SLUICE" verify "$T/bad"
has "$ERR" "4 of 10 records damaged"
has "$ERR" "$T/bad/ant/text.jpg: record 2: column 'image': not an image"
has "$ERR" "$T/bad/bee/x.bmp: record 5: column 'image': BMP images are not supported"
has "$ERR" "$T/bad/bee/y.tif: record 6: column 'image': TIFF images are not supported"
has "$ERR" "$T/bad/cow/cut.jpg: record 9: column 'image':"
has "$ERR" "(fix or remove the files named, or pack with --skip-bad"
grep -q "^ok" "$OUT" && fail "verify printed ok for a folder pack refuses"
run 1 "$SLUICE" verify "$T/bad" --check decode --json
json_check "$OUT" 'd["ok"] is False and d["bad"] == 4 and len(d["errors"]) == 4'
run 1 "$SLUICE" pack "$T/bad" "$T/bad.slr"
run 0 "$SLUICE" verify "$T/good"
has "$OUT" "ok: $T/good: 6 records, every record reads, every image's header reads"
run 0 "$SLUICE" verify "$T/good" --check decode
has "$OUT" "every image decodes"
run 2 "$SLUICE" verify "$T/good" --check pixels
has "$ERR" "--check wants header or decode"

# ---- 15. under --skip-bad the skipped lines do not say to pass --skip-bad ----
run 0 "$SLUICE" pack "$T/bad" "$T/skip.slr" --skip-bad
has "$OUT" "x.bmp: BMP images are not supported by decode (JPEG, PNG, WebP are); convert them"
grep -q -- "--skip-bad" "$OUT" && fail "the --skip-bad summary tells to pass --skip-bad"

# ---- 3. an op failing while training names the file ---------------------------
cat >"$T/run.json" <<EOF2
{"source": {"image_folder": "$T/bad"}, "ops": [{"op": "decode"}, {"op": "batch", "size": 2}],
 "epochs": 1}
EOF2
run 1 "$SLUICE" run "$T/run.json"
has "$ERR" "$T/bad/ant/text.jpg: record 2: ops[0] (decode):"
# a TFRecord record with an image that does not decode: file and offset named
$PY - "$TF" "$T/img.tfrecord" <<'PYEOF' || fail "writing img.tfrecord"
import struct, sys, zlib
# one record per Example with a bytes feature "image" that is not an image
def crc(b):
    # masked CRC32-C
    poly, c = 0x82F63B78, 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
def example(payload):
    bl = b"\x0a" + bytes([len(payload)]) + payload          # BytesList.value
    feat = b"\x0a" + bytes([len(bl)]) + bl                  # Feature.bytes_list
    key = b"image"
    entry = b"\x0a" + bytes([len(key)]) + key + b"\x12" + bytes([len(feat)]) + feat
    feats = b"\x0a" + bytes([len(entry)]) + entry           # Features.feature
    return b"\x0a" + bytes([len(feats)]) + feats            # Example.features
with open(sys.argv[2], "wb") as f:
    for p in (b"notanimage0", b"notanimage1"):
        ex = example(p)
        h = struct.pack("<Q", len(ex))
        f.write(h + struct.pack("<I", crc(h)) + ex + struct.pack("<I", crc(ex)))
PYEOF
cat >"$T/tfrun.json" <<EOF2
{"source": {"tfrecord": "$T/img.tfrecord"}, "ops": [{"op": "decode", "column": "image"},
 {"op": "batch", "size": 1}], "epochs": 1}
EOF2
run 1 "$SLUICE" run "$T/tfrun.json"
has "$ERR" "img.tfrecord: record 0 (offset 0): ops[0] (decode):"
# a tar member that is not an image: shard, offset and key named
$PY - "$T/img.tar" <<'PYEOF' || fail "writing img.tar"
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as t:
    for key in ("s0", "s1"):
        ti = tarfile.TarInfo(key + ".jpg")
        ti.size = 11
        t.addfile(ti, io.BytesIO(b"notanimage!"))
PYEOF
cat >"$T/tarrun.json" <<EOF2
{"source": {"webdataset": "$T/img.tar"}, "ops": [{"op": "decode", "column": "jpg"},
 {"op": "batch", "size": 1}], "epochs": 1}
EOF2
run 1 "$SLUICE" run "$T/tarrun.json"
has "$ERR" "img.tar: record 0 (offset 0, key 's0'): ops[0] (decode):"

# ---- 4. sluice index on a damaged TFRecord: the message comes out whole -------
$PY - "$TF" "$T/testing.tfrecord" "$T/tf/expected.json" <<'PYEOF' || fail "damaging a copy"
import json, sys
blob = bytearray(open(sys.argv[1], "rb").read())
off = json.load(open(sys.argv[3]))["plain_offsets"][4]
blob[off + 12 + 30] ^= 0x20
open(sys.argv[2], "wb").write(bytes(blob))
PYEOF
run 1 "$SLUICE" index "$T/testing.tfrecord"
has "$ERR" "sluice index: cannot index a damaged file: testing.tfrecord: record 4 (offset 3484): data checksum mismatch"
[ "$(grep -o 'cannot index a damaged file' "$ERR" | wc -l)" = 1 ] || fail "the prefix is doubled: $(cat "$ERR")"
run 1 "$SLUICE" index "$T/testing.tfrecord" --json
json_check "$OUT" 'd["error"] == "cannot index a damaged file: testing.tfrecord: record 4 (offset 3484): data checksum mismatch"'
[ -e "$T/testing.tfrecord.slidx" ] && fail "a damaged file was indexed"

# ---- 10. verify's hint sends to cat, and cat reads TFRecord and tar -----------
run 1 "$SLUICE" verify "$T/testing.tfrecord"
has "$ERR" "'sluice cat'"
run 0 "$SLUICE" cat "$T/testing.tfrecord" --index 3 --column image/class/label
want=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["plain.tfrecord"][3]["image/class/label"])' "$T/tf/expected.json")
[ "$(cat "$OUT")" = "$want" ] || fail "cat of an intact TFRecord record gave '$(cat "$OUT")', want '$want'"
run 1 "$SLUICE" cat "$T/testing.tfrecord" --index 4 --column image/class/label
has "$ERR" "record 4 (offset"
run 0 "$SLUICE" cat "$T/tar/shard-001.tar" --index 1 --column jpg
want=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["shard-001.tar"][1]["members"]["jpg"])' "$T/tar/expected.json")
cmp -s "$OUT" "$want" || fail "cat of a tar member differs from the archived file"
run 0 "$SLUICE" cat "$T/good" --index 3 --column path
[ "$(cat "$OUT")" = "bee/1.jpg" ] || fail "cat of an ImageFolder path gave '$(cat "$OUT")'"
run 1 "$SLUICE" cat "$TF" --index 0 --column image/clas/label
has "$ERR" "plain.tfrecord has no column 'image/clas/label'; its columns are: image/class/label, "

# ---- 9. info/verify/scan take several datasets ----------------------------------
run 0 "$SLUICE" pack "$T/good" "$T/g1.slr"
cp "$T/g1.slr" "$T/g2.slr"
run 0 "$SLUICE" verify "$T/g1.slr" "$T/g2.slr"
has "$OUT" "ok: $T/g1.slr: 6 records, every checksum matches"
has "$OUT" "ok: $T/g2.slr: 6 records, every checksum matches"
run 0 "$SLUICE" info "$T/g1.slr" "$T/g2.slr" --json
json_check "$OUT" 'len(d) == 2 and [x["path"] for x in d] == a' "$T/g1.slr" "$T/g2.slr"
run 0 "$SLUICE" info "$T/g1.slr" "$T/g2.slr"
has "$OUT" "dataset   $T/g2.slr"
run 0 "$SLUICE" scan "$T/g1.slr" "$T/g2.slr"
has "$OUT" "$T/g1.slr: scanned 6 records"
has "$OUT" "$T/g2.slr: scanned 6 records"
# a damaged one among them: the others still checked, exit 1
cp "$T/testing.tfrecord" "$T/d.tfrecord"
run 1 "$SLUICE" verify "$TF" "$T/d.tfrecord"
has "$OUT" "ok: $TF: 12 records"
has "$ERR" "d.tfrecord: 1 of 12 records damaged"

# ---- 13. scan of several files: the total is not one file's -----------------------
cp "$TF" "$T/a.tfrecord"; cp "$TF" "$T/b.tfrecord"; cp "$TF" "$T/c.tfrecord"
run 0 "$SLUICE" scan "$T/a.tfrecord" "$T/b.tfrecord" "$T/c.tfrecord"
has "$OUT" "scanned 36 records in all"
has "$OUT" "  $T/b.tfrecord: 12 records"
run 0 "$SLUICE" scan "$T/a.tfrecord" "$T/b.tfrecord" "$T/c.tfrecord" --json
json_check "$OUT" 'd["records"] == 36 and [(f["path"], f["records"]) for f in d["files"]] == [(p, 12) for p in a]' "$T/a.tfrecord" "$T/b.tfrecord" "$T/c.tfrecord"
run 0 "$SLUICE" verify "$T/a.tfrecord" "$T/b.tfrecord"
has "$OUT" "ok: $T/a.tfrecord: 12 records"
has "$OUT" "ok: $T/b.tfrecord: 12 records"

# ---- 15. info text of an ImageFolder shows its class names ----------------------
run 0 "$SLUICE" info "$T/good"
has "$OUT" 'classes = ["ant","bee","cow"]'

# ---- 11. sluice index expands brace patterns and @lists ---------------------------
mkdir "$T/ix"
for k in 0 1 2; do cp "$TF" "$T/ix/train-0000$k.tfrecord"; done
run 0 "$SLUICE" index "$T/ix/train-{00000..00002}.tfrecord"
for k in 0 1 2; do
    has "$OUT" "indexed $T/ix/train-0000$k.tfrecord in"
    [ -f "$T/ix/train-0000$k.tfrecord.slidx" ] || fail "no index for train-0000$k.tfrecord"
done
printf 'train-00001.tfrecord\n' >"$T/ix/list.txt"
run 0 "$SLUICE" index "@$T/ix/list.txt" --json
json_check "$OUT" 'd["ok"] is True and d["path"].endswith("/ix/train-00001.tfrecord")'
run 1 "$SLUICE" index "$T/ix/train-{00003..00004}.tfrecord"
has "$ERR" "train-00003.tfrecord: No such file or directory"

# ---- 12. a damaged tar shard is not indexed -----------------------------------------
$PY - "$T/nocls.tar" <<'PYEOF' || fail "writing nocls.tar"
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as t:
    for key, mem in (("s0", {"jpg": b"\xff\xd8x", "cls": b"1\n"}), ("s1", {"jpg": b"\xff\xd8y"}),
                     ("s2", {"jpg": b"\xff\xd8z", "cls": b"2"})):
        for ext, data in mem.items():
            ti = tarfile.TarInfo("%s.%s" % (key, ext))
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
PYEOF
run 1 "$SLUICE" index "$T/nocls.tar"
has "$ERR" "cannot index a damaged file: nocls.tar: record 1 (offset 2048, key 's1'): no member 's1.cls'"
[ -e "$T/nocls.tar.slidx" ] && fail "a shard with a sample missing its .cls was indexed"
cp "$T/tar/notnum.tar" "$T/notnum.tar"
run 1 "$SLUICE" index "$T/notnum.tar"
has "$ERR" "cannot index a damaged file: notnum.tar: record 2"
has "$ERR" "is not a decimal integer"
[ -e "$T/notnum.tar.slidx" ] && fail "a shard with a non-numeric cls was indexed"

# ---- 6. sidecar indexes among the inputs: left out, or named ------------------------
mkdir "$T/sc"
cp "$TF" "$T/sc/train-00000.tfrecord"
cp "$TF" "$T/sc/train-00001.tfrecord"
run 0 "$SLUICE" index "$T/sc/train-00000.tfrecord" "$T/sc/train-00001.tfrecord"
run 0 "$SLUICE" pack "$T/sc/"* "$T/sc.slr" --json
json_check "$OUT" 'd["records"] == 24 and d["kind"] == "tfrecord"'
run 0 "$SLUICE" info "$T/sc/"* --json
json_check "$OUT" 'd["records"] == 24 and len(d["files"]) == 2 and d["indexed_files"] == 2'
run 0 "$SLUICE" scan "$T/sc/"* --json
json_check "$OUT" 'd["records"] == 24 and [f["path"] for f in d["files"]] == a' "$T/sc/train-00000.tfrecord" "$T/sc/train-00001.tfrecord"
run 0 "$SLUICE" verify "$T/sc/"*
has "$OUT" "ok: $T/sc/train-00001.tfrecord: 12 records"
run 1 "$SLUICE" pack "$T/sc/train-00000.tfrecord.slidx" "$T/sc/train-00001.tfrecord" "$T/sc2.slr"
has "$ERR" "train-00000.tfrecord.slidx: a sidecar index (written by 'sluice index'), not data: give the file it indexes ($T/sc/train-00000.tfrecord)"
# a file of another kind among TFRecord files: that file is named, not a good one
echo "some notes" >"$T/sc/notes.txt"
run 1 "$SLUICE" pack "$T/sc/train-00000.tfrecord" "$T/sc/notes.txt" "$T/sc3.slr"
has "$ERR" "$T/sc/notes.txt: not a format sluice reads"
grep -q "train-00000.tfrecord: not a" "$ERR" && fail "a valid TFRecord file was blamed"
run 1 "$SLUICE" pack "$T/g1.slr" "$TF" "$T/sc4.slr"
has "$ERR" "is a .slr dataset but $TF is a TFRecord file; give inputs of one kind"

# ---- 5. wrong kind of input: say what it is and what reads it --------------------
for x in "$T/good:an ImageFolder:image_folder" "$TF:a TFRecord file:tfrecord" "$T/tar/shard-000.tar:a tar shard:webdataset"; do
    p=${x%%:*}; rest=${x#*:}; what=${rest%%:*}; key=${rest#*:}
    printf '{"source": {"path": "%s"}, "ops": [{"op": "batch", "size": 2}]}' "$p" >"$T/w.json"
    run 1 "$SLUICE" run "$T/w.json"
    has "$ERR" "source.path: $p is $what, not a .slr dataset: read it with the \"$key\" source (sluice.$key() in Python), or convert it with \`sluice pack $p OUT.slr\`"
done
$PY -c 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack(">II",0x801,3)+bytes([1,2,3]))' "$T/lab.idx"
printf '{"source": {"path": "%s"}, "ops": []}' "$T/lab.idx" >"$T/w.json"
run 1 "$SLUICE" run "$T/w.json"
has "$ERR" "lab.idx is an IDX file, not a .slr dataset: read it with the \"idx\" source"
# a directory that is neither keeps the .slr reader's message
mkdir "$T/nothing"
printf '{"source": {"path": "%s"}, "ops": []}' "$T/nothing" >"$T/w.json"
run 1 "$SLUICE" run "$T/w.json"
has "$ERR" "nothing/manifest.json: cannot open"

# ---- 7. unknown names: the valid ones listed, closest first -----------------------
cp "$TF" "$T/nf.tfrecord"
run 1 "$SLUICE" info "$T/nf.tfrecord" --features image/clas/label=label
has "$ERR" "no feature 'image/clas/label' in the first records (features: image/class/label, "
printf '{"source": {"path": "%s", "shufle": true}, "ops": []}' "$T/g1.slr" >"$T/w.json"
run 1 "$SLUICE" run "$T/w.json"
has "$ERR" "source.shufle: unknown key for a .slr source (keys: shuffle, "
printf '{"source": {"path": "%s"}, "ops": [{"op": "decode"}, {"op": "resize", "sise": 8}]}' "$T/g1.slr" >"$T/w.json"
run 1 "$SLUICE" run "$T/w.json"
has "$ERR" "ops[1].sise: unknown parameter (parameters: size, "

finish
