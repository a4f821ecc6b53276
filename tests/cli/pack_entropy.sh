#!/usr/bin/env bash
# `sluice pack --check decode` refuses JPEGs whose entropy-coded data has a run
# of bytes overwritten by stuffed 0xFF 0x00 pairs (sluice_jpeg_damage: runs of
# 8, 24 and 96 bytes at 15, 50 and 85 % of the largest scan), baseline and
# progressive, made from real JPEGs (sluice_gen_images); libjpeg-turbo's fast
# Huffman path decodes most of them without a warning, so the check decodes
# through its checking path (docs/OPS.md, "Corrupt entropy data"). The header
# check keeps them: it reads no scan data. With --skip-bad every good file is
# still packed, whichever file came before it on the thread.
. "$(dirname "$0")/common.bash"

DIR=$(dirname "$SLUICE")
GEN=$DIR/sluice_gen_images
DAMAGE=$DIR/sluice_jpeg_damage
for x in "$GEN" "$DAMAGE"; do
    if [ ! -x "$x" ]; then fail "no $x (built with the tools)"; exit 1; fi
done

run 0 "$GEN" "$T/src" --count 4 --classes 1 --seed 11 --threads 1
mkdir -p "$T/clean"
i=0
for f in "$T"/src/*/*.jpg; do
    cp "$f" "$T/clean/base$i.jpg"
    i=$((i + 1))
done
# progressive copies of the same photos (same pixels source, other scan layout)
$PY - "$T/clean" <<'PYEOF' || { fail "cannot make progressive JPEGs (needs python3-pil)"; exit 1; }
import glob, os, sys
from PIL import Image
d = sys.argv[1]
for f in sorted(glob.glob(os.path.join(d, "base*.jpg"))):
    Image.open(f).save(f.replace("base", "prog"), "JPEG", quality=90, progressive=True)
PYEOF

mkdir -p "$T/folder"
run 0 "$DAMAGE" "$T/folder/damaged" "$T"/clean/*.jpg
has "$OUT" "wrote 72 damaged JPEGs"
mkdir -p "$T/folder/good"
cp "$T"/clean/*.jpg "$T/folder/good/"

# the decode check: every damaged file skipped, every good one kept
for jobs in 1 2; do
    run 0 "$SLUICE" pack "$T/folder" "$T/d$jobs.slr" --check decode --skip-bad --jobs "$jobs" --json
    $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["records"]==8 and d["skipped"]==72, d; assert "damaged/" in d["bad"][0] and "decode: corrupt JPEG data" in d["bad"][0], d["bad"]' \
        "$OUT" || fail "--check decode --jobs $jobs: want 8 kept, 72 skipped as corrupt"
done
cmp -s "$T/d1.slr" "$T/d2.slr" || fail "--jobs 1 and --jobs 2 gave different bytes"
# the good files are there, byte for byte
n=0
for f in $(cd "$T/folder" && ls good/*.jpg); do
    "$SLUICE" cat "$T/d1.slr" --index $n --column image | cmp -s - "$T/folder/$f" ||
        fail "record $n: bytes differ from $f"
    n=$((n + 1))
done
[ "$n" = 8 ] || fail "checked $n good files, want 8"

# without --skip-bad: the first damaged file, named with its cause
run 1 "$SLUICE" pack "$T/folder" "$T/x.slr" --check decode
has "$ERR" "$T/folder/damaged/base0_r24_p15.jpg: decode: corrupt JPEG data: "
has "$ERR" "--skip-bad"
one_line "$ERR"
[ -e "$T/x.slr" ] && fail "a failed pack left $T/x.slr"

# each damaged file alone, baseline and progressive alike
for f in "$T"/folder/damaged/*.jpg; do
    mkdir -p "$T/one/c" && rm -f "$T"/one/c/* && cp "$f" "$T/one/c/"
    run 1 "$SLUICE" pack "$T/one" "$T/one.slr" --check decode
    has "$ERR" "decode: corrupt JPEG data"
done

# the header check reads no scan data: it keeps them all
run 0 "$SLUICE" pack "$T/folder" "$T/h.slr" --check header
has "$OUT" "packed 80 records"
finish
