#!/usr/bin/env bash
# What a new user still trips over (issue 30), at the command line: a folder
# of tar shards or TFRecord files and a quoted shell pattern are inputs of
# every command; a folder of mixed files names what to type; a spec's
# relative paths are its folder's; a misspelt op names the closest; run
# reports what on_error: skip dropped; index and recover say what to do.
# Tar shards come from Python's tarfile, TFRecord files from
# tests/source/make_tfrecords.py (Google's protobuf runtime).
. "$(dirname "$0")/common.bash"

foreign_sources
$PY - "$T/wds" <<'PYEOF' || fail "writing tar shards"
import io, os, sys, tarfile
root = sys.argv[1]
os.makedirs(root)
for s in range(3):
    with tarfile.open(os.path.join(root, "shard-%06d.tar" % s), "w") as t:
        for i in range(s * 4, s * 4 + 4):
            for ext, data in (("cls", b"%d" % i), ("txt", b"sample %d" % i)):
                info = tarfile.TarInfo("k%04d.%s" % (i, ext))
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
PYEOF
mkdir "$T/tfr"
cp "$T/tf/plain.tfrecord" "$T/tfr/a.tfrecord"
cp "$T/tf/plain.tfrecord" "$T/tfr/b.tfrecord"

# ---- folders and quoted patterns, every command --------------------------------
for input in "$T/wds" "$T/wds/shard-*.tar" "$T/wds/shard-00000[0-2].tar"; do
    run 0 "$SLUICE" info "$input"
    has "$OUT" "(webdataset)"
    has "$OUT" "records   12"
    run 0 "$SLUICE" verify "$input"
    run 0 "$SLUICE" cat "$input" --index 9 --column txt
    has "$OUT" "sample 9"
done
run 0 "$SLUICE" info "$T/tfr"
has "$OUT" "(tfrecord)"
has "$OUT" "records   24"
run 0 "$SLUICE" info "$T/tfr/*.tfrecord"
has "$OUT" "records   24"
run 0 "$SLUICE" pack "$T/wds" "$T/wds.slr"
has "$OUT" "packed 12 records (webdataset"
run 0 "$SLUICE" pack "$T/tfr/*.tfrecord" "$T/tfr.slr"
has "$OUT" "packed 24 records (tfrecord"
run 0 "$SLUICE" index "$T/wds"
has "$OUT" "indexed $T/wds/shard-000002.tar"
[ -f "$T/wds/shard-000000.tar.slidx" ] || fail "index of a folder wrote no sidecar"
run 0 "$SLUICE" info "$T/wds"          # the sidecars beside the shards are not inputs
has "$OUT" "records   12"
run 0 "$SLUICE" index "$T/tfr/*.tfrecord"
has "$OUT" "indexed $T/tfr/b.tfrecord"
run 1 "$SLUICE" info "$T/wds/nothing-*.tar"
has "$ERR" "no file matches '$T/wds/nothing-*.tar'"
echo '{"source": {"webdataset": "'"$T"'/wds"}, "ops": [{"op": "batch", "size": 5}]}' >"$T/wds.json"
run 0 "$SLUICE" run "$T/wds.json"
has "$OUT" "3 batches, 12 samples"

# a folder of two kinds, or with a stranger: the message names what to type
mkdir "$T/mixed"
cp "$T/wds/shard-000000.tar" "$T/tfr/a.tfrecord" "$T/mixed/"
run 1 "$SLUICE" info "$T/mixed"
has "$ERR" "a folder of TFRecord files ($T/mixed/a.tfrecord) and tar shards"
has "$ERR" "'$T/mixed/*.tfrecord'"
one_line "$ERR"
mkdir "$T/stray"
cp "$T/wds/shard-000000.tar" "$T/wds/shard-000001.tar" "$T/stray/"
echo "notes" >"$T/stray/README"
run 1 "$SLUICE" info "$T/stray"
has "$ERR" "$T/stray/README is not one; name the files: "
has "$ERR" "'$T/stray/*.tar'"

# ---- a spec's relative paths are its folder's ----------------------------------
mkdir -p "$T/proj/specs" "$T/proj/data" "$T/elsewhere"
cp "$T/wds.slr" "$T/proj/data/train.slr"
echo '{"source": {"path": "../data/train.slr"}, "ops": [{"op": "batch", "size": 4}]}' \
    >"$T/proj/specs/train.json"
(cd "$T/elsewhere" && run 0 "$SLUICE" run ../proj/specs/train.json)
has "$OUT" "3 batches, 12 samples"
(cd "$T/elsewhere" && run 0 "$SLUICE" explain ../proj/specs/train.json)
# the old rule (relative to the working directory) still runs, with a warning
echo '{"source": {"path": "proj/data/train.slr"}, "ops": [{"op": "batch", "size": 4}]}' \
    >"$T/proj/specs/old.json"
(cd "$T" && run 0 "$SLUICE" run proj/specs/old.json)
has "$OUT" "3 batches, 12 samples"
has "$ERR" "relative paths in a spec file are read from the spec's folder (proj/specs/)"

# ---- a misspelt op names the closest ---------------------------------------------
echo '{"source": {"path": "train.slr"}, "ops": [{"op": "resise", "size": 8}]}' >"$T/proj/data/typo.json"
run 1 "$SLUICE" run "$T/proj/data/typo.json"
has "$ERR" "ops[0].op: unknown op 'resise' (known: resize, "

# ---- run reports what on_error: skip dropped ---------------------------------------
$PY - "$T/imgs" <<'PYEOF' || fail "writing images"
import os, sys
from PIL import Image
for c in ("a", "b"):
    os.makedirs(os.path.join(sys.argv[1], c))
    for k in range(3):
        Image.new("RGB", (16, 12), (9 * k, 50, 90)).save(os.path.join(sys.argv[1], c, "%d.jpg" % k))
open(os.path.join(sys.argv[1], "b", "9.jpg"), "wb").write(b"\xff\xd8\xff\xe0 not a jpeg")
PYEOF
echo '{"source": {"image_folder": "'"$T"'/imgs"}, "on_error": "skip",
       "ops": [{"op": "decode"}, {"op": "resize", "size": [8, 8]}, {"op": "batch", "size": 2}]}' \
    >"$T/skip.json"
run 0 "$SLUICE" run "$T/skip.json"
has "$OUT" "6 samples"
has "$ERR" "skipped 1 samples (on_error: skip; first: "
has "$ERR" "9.jpg"
run 0 "$SLUICE" run "$T/skip.json" --digest
has "$ERR" "skipped 1 samples"

# ---- index of a .slr, recover of an empty .partial ----------------------------------
run 1 "$SLUICE" index "$T/wds.slr"
has "$ERR" "a .slr dataset carries its own index"
mkdir "$T/new.slr.partial"
printf 'SL' >"$T/new.slr.partial/shard-00000.slr"
run 1 "$SLUICE" recover "$T/new.slr.partial"
has "$ERR" "no complete record to salvage; remove it (rm -r '$T/new.slr.partial') and pack again"
rm -r "$T/new.slr.partial"
run 0 "$SLUICE" pack "$T/wds" "$T/new.slr"

finish
