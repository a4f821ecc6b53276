#!/usr/bin/env bash
# ImageFolder packing through the CLI, checked against torchvision's own
# ImageFolder (classes, labels, sample order) and against the files' bytes.
. "$(dirname "$0")/common.bash"

R=$T/train
$PY - "$R" <<'PYEOF' || { echo "cannot make test images (needs python3-pil)" >&2; exit 1; }
import os, sys
from PIL import Image
root = sys.argv[1]
files = ["cat/001.jpg", "cat/002.JPEG", "cat/sub/003.jpg", "cat/sub-b/004.png",
         "cat/sub/deep/005.jpg", "dog/10.jpg", "dog/9.jpg", "dog/a b.jpeg",
         "dog/x.png", "emu/only.webp", "emu/z.WEBP"]
for i, rel in enumerate(files):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    im = Image.new("RGB", (20 + i, 12 + i), (i * 20 % 256, 100, 200 - i * 10))
    fmt = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG",
           ".webp": "WEBP"}[os.path.splitext(rel)[1].lower()]
    im.save(p, fmt, **({"lossless": True} if fmt == "WEBP" and "z" in rel else {}))
# a PNG named .jpg is packed (content decides), text files are ignored by name
Image.new("L", (8, 8), 7).save(os.path.join(root, "dog", "png-named.jpg"), "PNG")
open(os.path.join(root, "cat", "notes.txt"), "w").write("not an image")
open(os.path.join(root, "README"), "w").write("top-level files are not classes")
PYEOF

run 0 "$SLUICE" pack "$R" "$T/a.slr" --jobs 1
has "$OUT" "packed 12 records (imagefolder, 3 classes"
run 0 "$SLUICE" pack "$R/" "$T/b.slr" --jobs 4
cmp -s "$T/a.slr" "$T/b.slr" || fail "--jobs 1 and --jobs 4 gave different bytes"

# every record against torchvision.datasets.ImageFolder
run 0 "$SLUICE" info "$T/a.slr" --json
cp "$OUT" "$T/info.json"
$PY - "$R" "$T/a.slr" "$SLUICE" "$T/info.json" <<'PYEOF' || fail "records differ from torchvision's ImageFolder"
import json, os, subprocess, sys
from torchvision.datasets import ImageFolder
root, slr, sluice, info = sys.argv[1:5]
ds = ImageFolder(root)
d = json.load(open(info))
assert d["classes"] == ds.classes, (d["classes"], ds.classes)
assert d["metadata"]["classes"] == ds.classes
assert d["records"] == len(ds.samples), (d["records"], len(ds.samples))
names = [c["name"] for c in d["columns"]]
assert names == ["image", "label", "path"], names
assert [c["type"] for c in d["columns"]] == ["bytes", "int64", "string"], d["columns"]
def cat(i, col):
    return subprocess.run([sluice, "cat", slr, "--index", str(i), "--column", col],
                          check=True, stdout=subprocess.PIPE).stdout
for i, (path, label) in enumerate(ds.samples):
    rel = os.path.relpath(path, root)
    assert cat(i, "path").decode() == rel, (i, cat(i, "path"), rel)
    assert int(cat(i, "label")) == label, (i, label)
    assert cat(i, "image") == open(path, "rb").read(), i
PYEOF

# a non-image named .jpg: stops with the path named, writes nothing
echo "definitely not a jpeg" >"$R/dog/broken.jpg"
run 1 "$SLUICE" pack "$R" "$T/c.slr"
has "$ERR" "$R/dog/broken.jpg"
has "$ERR" "not an image"
has "$ERR" "--skip-bad"
[ -e "$T/c.slr" ] && fail "a failed pack left $T/c.slr"
[ -e "$T/c.slr.partial" ] && fail "a failed pack left $T/c.slr.partial"
# --skip-bad: skips, counts, names it
ln -s /nonexistent/sluice.jpg "$R/emu/dangling.jpg"
run 0 "$SLUICE" pack "$R" "$T/c.slr" --skip-bad
has "$OUT" "packed 12 records"
has "$OUT" "skipped 2 bad files"
has "$OUT" "dog/broken.jpg"
has "$OUT" "emu/dangling.jpg"
run 0 "$SLUICE" pack "$R" "$T/d.slr" --skip-bad --json
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] and d["records"]==12 and d["skipped"]==2 and len(d["bad"])==2 and d["classes"]==3, d' \
    "$OUT" || fail "pack --skip-bad --json"
run 0 "$SLUICE" verify "$T/c.slr"

# formats torchvision walks but the decode op cannot read: walked, refused by
# name (never silently ignored), skipped and counted with --skip-bad
F=$T/fmt
$PY - "$F" <<'PYEOF' || fail "cannot make BMP/PPM/PGM/TIFF files"
import os, sys
from PIL import Image
root = sys.argv[1]
os.makedirs(os.path.join(root, "c"))
Image.new("RGB", (9, 7), (1, 2, 3)).save(os.path.join(root, "c", "0.jpg"), "JPEG")
for name, fmt, mode in [("a.bmp", "BMP", "RGB"), ("b.ppm", "PPM", "RGB"),
                        ("c.pgm", "PPM", "L"), ("d.tif", "TIFF", "RGB")]:
    Image.new(mode, (9, 7), 5).save(os.path.join(root, "c", name), fmt)
PYEOF
run 1 "$SLUICE" pack "$F" "$T/f.slr"
has "$ERR" "$F/c/a.bmp: BMP images are not supported by decode (JPEG, PNG, WebP are); convert them"
has "$ERR" "(fix or remove the file, or pass --skip-bad to skip such files; nothing was written)"
for check in header decode; do
    # (the lines of files already skipped do not tell to pass --skip-bad)
    run 0 "$SLUICE" pack "$F" "$T/f-$check.slr" --skip-bad --check "$check" --json
    $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["records"]==1 and d["skipped"]==4 and d["check"]==sys.argv[2], d; b=" ".join(d["bad"]); assert "a.bmp: BMP" in b and "b.ppm: PPM/PGM/PBM" in b and "c.pgm: PPM/PGM/PBM" in b and "d.tif: TIFF" in b and "--skip-bad" not in b, b' \
        "$OUT" "$check" || fail "--skip-bad --check $check over BMP/PPM/PGM/TIFF"
done
run 2 "$SLUICE" pack "$F" "$T/g.slr" --check pixels
has "$ERR" "--check wants 'header' or 'decode'"
"$SLUICE" pack --help | grep -q -- "--check MODE" || fail "pack --help lacks --check"

# an empty class directory, and a root without classes
mkdir "$R/zebra"
run 1 "$SLUICE" pack "$R" "$T/e.slr" --skip-bad
has "$ERR" "class 'zebra' has no image files"
mkdir "$T/empty"
run 1 "$SLUICE" pack "$T/empty" "$T/e.slr"
has "$ERR" "no class directories"
one_line "$ERR"
finish
