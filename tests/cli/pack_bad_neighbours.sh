#!/usr/bin/env bash
# An ImageFolder of 60 good photos among 11 broken files: --skip-bad must keep
# every good photo and skip exactly the broken ones, whatever the number of
# threads and whichever check. (Once, one JPEG whose frame header claims
# height 0 left pack's per-thread header parser mid-header, and every later
# file on that thread was reported "not a valid JPEG": 56 of 71 skipped.)
. "$(dirname "$0")/common.bash"

R=$T/photos
$PY - "$R" <<'PYEOF' || { echo "cannot make test images (needs python3-pil, numpy)" >&2; exit 1; }
import io, os, struct, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
rng = np.random.default_rng(7)
def photo(w, h):
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 // w, yy * 255 // h, (xx + yy) * 127 // (w + h)], -1)
    return Image.fromarray(np.clip(base + rng.integers(0, 50, (h, w, 3)), 0, 255).astype(np.uint8))
def jpeg(im, **kw):
    b = io.BytesIO(); im.save(b, "JPEG", quality=88, **kw); return b.getvalue()
def put(rel, data):
    p = os.path.join(root, rel); os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, "wb").write(data)
for i in range(60):
    cls = ("beach", "forest")[i % 2]
    put(f"{cls}/IMG_{1000 + i}.jpg", jpeg(photo(120 + i, 90 + i % 7), progressive=i % 5 == 0))
# the file of the report: a JPEG whose frame header (SOF) says height 0,
# sorted first, so every good file comes after it
z = bytearray(jpeg(photo(64, 48))); s = z.index(b"\xff\xc0"); z[s + 5:s + 7] = b"\0\0"
put("beach/IMG_0000.jpg", bytes(z))
good = jpeg(photo(64, 48))
put("beach/IMG_1010b.jpg", good[:200])                       # cut in the header
put("forest/IMG_1020b.jpg", b"")                             # empty
put("forest/IMG_1030b.jpg", b"<html>404 Not Found</html>")   # a saved error page
b = io.BytesIO(); photo(16, 12).save(b, "BMP"); put("beach/IMG_1040b.bmp", b.getvalue())
b = io.BytesIO(); photo(16, 12).save(b, "PNG"); png = bytearray(b.getvalue())
put("forest/IMG_1041b.png", bytes(png[:30]))                 # PNG cut in its IHDR
b = io.BytesIO(); photo(16, 12).save(b, "WEBP"); put("beach/IMG_1042b.webp", b.getvalue()[:20])
b = io.BytesIO()
photo(16, 12).save(b, "WEBP", save_all=True, append_images=[photo(16, 12)], duration=100)
put("forest/IMG_1043b.webp", b.getvalue())                   # animated
bl = bytearray(good); d = bl.index(b"\xff\xdb"); bl[d + 2:d + 4] = b"\0\x01"
put("forest/IMG_1044b.jpg", bytes(bl))                       # bogus marker length
put("beach/IMG_1050b.jpg", os.urandom(3000))                 # garbage
# header fine, pixel data cut: only --check decode catches it
s = good.index(b"\xff\xda"); put("forest/IMG_1051b.jpg", good[:s + (len(good) - s) // 2])
PYEOF

for jobs in 1 2; do
    run 0 "$SLUICE" pack "$R" "$T/h$jobs.slr" --skip-bad --jobs "$jobs" --json
    $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["records"]==61 and d["skipped"]==10, d; assert "IMG_0000.jpg: decode: empty JPEG image" in d["bad"][0], d["bad"]' \
        "$OUT" || fail "--check header --jobs $jobs: want 61 kept (60 good + the cut body), 10 skipped"
    run 0 "$SLUICE" pack "$R" "$T/d$jobs.slr" --skip-bad --jobs "$jobs" --check decode
    has "$OUT" "packed 60 records (imagefolder, 2 classes"
    has "$OUT" "skipped 11 bad files:"
    has "$OUT" "beach/IMG_0000.jpg: decode: empty JPEG image (DNL not supported)"
    has "$OUT" "... and 7 more"
done
cmp -s "$T/h1.slr" "$T/h2.slr" || fail "--jobs 1 and --jobs 2 gave different bytes (header)"
cmp -s "$T/d1.slr" "$T/d2.slr" || fail "--jobs 1 and --jobs 2 gave different bytes (decode)"

# every good photo is in the dataset, byte for byte, in order
n=0
for f in $(cd "$R" && ls beach/IMG_1???.jpg forest/IMG_1???.jpg); do
    rel=$("$SLUICE" cat "$T/d2.slr" --index $n --column path)
    [ "$rel" = "$f" ] || fail "record $n is '$rel', want '$f'"
    "$SLUICE" cat "$T/d2.slr" --index $n --column image | cmp -s - "$R/$f" || fail "record $n: bytes differ from $f"
    n=$((n + 1))
done
[ "$n" = 60 ] || fail "checked $n good files, want 60"

# without --skip-bad: the first bad file in record order, named with its cause
run 1 "$SLUICE" pack "$R" "$T/x.slr" --jobs 2
has "$ERR" "$R/beach/IMG_0000.jpg: decode: empty JPEG image (DNL not supported)"
has "$ERR" "--skip-bad"
one_line "$ERR"
# each kind of cause, as reported
rm "$R/beach/IMG_0000.jpg"
run 1 "$SLUICE" pack "$R" "$T/x.slr"
has "$ERR" "IMG_1010b.jpg: decode: "
rm "$R/beach/IMG_1010b.jpg"
run 1 "$SLUICE" pack "$R" "$T/x.slr"
has "$ERR" "IMG_1040b.bmp: BMP images are not supported by decode"
rm "$R/beach/IMG_1040b.bmp"
run 1 "$SLUICE" pack "$R" "$T/x.slr"
has "$ERR" "IMG_1042b.webp: decode: webp: "
rm "$R/beach/IMG_1042b.webp"
run 1 "$SLUICE" pack "$R" "$T/x.slr"
has "$ERR" "IMG_1050b.jpg: not an image"
rm "$R/beach/IMG_1050b.jpg"
run 1 "$SLUICE" pack "$R" "$T/x.slr"
has "$ERR" "forest/IMG_1020b.jpg: empty file"
rm "$R/forest/IMG_1020b.jpg"
run 1 "$SLUICE" pack "$R" "$T/x.slr"
has "$ERR" "forest/IMG_1030b.jpg: not an image"
rm "$R/forest/IMG_1030b.jpg"
run 1 "$SLUICE" pack "$R" "$T/x.slr"
has "$ERR" "forest/IMG_1041b.png: decode: png: cut short in its header"
rm "$R/forest/IMG_1041b.png"
run 1 "$SLUICE" pack "$R" "$T/x.slr"
has "$ERR" "forest/IMG_1043b.webp: decode: animated WebP is not supported"
rm "$R/forest/IMG_1043b.webp"
run 1 "$SLUICE" pack "$R" "$T/x.slr"
has "$ERR" "forest/IMG_1044b.jpg: decode: bogus marker length"
rm "$R/forest/IMG_1044b.jpg"
# the cut body passes the header check and fails the full decode
run 0 "$SLUICE" pack "$R" "$T/y.slr"
has "$OUT" "packed 61 records"
run 1 "$SLUICE" pack "$R" "$T/z.slr" --check decode
has "$ERR" "forest/IMG_1051b.jpg: decode: "
[ -e "$T/z.slr" ] && fail "a failed pack left $T/z.slr"
finish
