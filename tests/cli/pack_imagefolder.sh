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
         "cat/sub/deep/005.jpg", "dog/10.jpg", "dog/9.jpg", "dog/a b.bmp",
         "dog/x.ppm", "emu/only.webp", "emu/z.tif"]
for i, rel in enumerate(files):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    im = Image.new("RGB", (20 + i, 12 + i), (i * 20 % 256, 100, 200 - i * 10))
    fmt = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".bmp": "BMP", ".ppm": "PPM",
           ".webp": "WEBP", ".tif": "TIFF"}[os.path.splitext(rel)[1].lower()]
    im.save(p, fmt)
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

# an empty class directory, and a root without classes
mkdir "$R/zebra"
run 1 "$SLUICE" pack "$R" "$T/e.slr" --skip-bad
has "$ERR" "class 'zebra' has no image files"
mkdir "$T/empty"
run 1 "$SLUICE" pack "$T/empty" "$T/e.slr"
has "$ERR" "no class directories"
one_line "$ERR"
finish
