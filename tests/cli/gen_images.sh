#!/usr/bin/env bash
# The demo-data generator: same seed, same bytes, whatever the thread count;
# real JPEGs of the stated sizes and classes, which sluice packs.
. "$(dirname "$0")/common.bash"

GEN=$(dirname "$SLUICE")/sluice_gen_images
if [ ! -x "$GEN" ]; then fail "no $GEN (built with the tools)"; exit 1; fi

run 0 "$GEN" "$T/a" --count 40 --classes 4 --seed 7 --threads 1
run 0 "$GEN" "$T/b" --count 40 --classes 4 --seed 7 --threads 2
diff -r "$T/a" "$T/b" >/dev/null || fail "1 and 2 threads wrote different files"
run 0 "$GEN" "$T/c" --count 40 --classes 4 --seed 8 --threads 2
if diff -r "$T/a" "$T/c" >/dev/null; then fail "seeds 7 and 8 wrote the same files"; fi

n=$(find "$T/a" -name '*.jpg' | wc -l)
[ "$n" = 40 ] || fail "wrote $n images, want 40"
[ "$(ls "$T/a" | wc -l)" = 4 ] || fail "want 4 class folders, got: $(ls "$T/a")"

$PY - "$T/a" <<'PYEOF' || fail "the images are not what the generator promises"
import os, sys
from PIL import Image, ImageStat
root = sys.argv[1]
sizes = []
for d, _, fs in os.walk(root):
    for f in fs:
        im = Image.open(os.path.join(d, f))
        im.load()  # decodes every scan: a truncated file raises
        assert im.format == "JPEG" and im.mode == "RGB", (f, im.format, im.mode)
        assert 300 <= min(im.size) <= 500, (f, im.size)
        sizes.append(os.path.getsize(os.path.join(d, f)))
        # varied content, not flat colour (a flat image has a spread near 0; seen 7.9-55)
        sd = ImageStat.Stat(im.convert("L")).stddev[0]
        assert sd > 4, (f, "nearly flat image", sd)
mean = sum(sizes) / len(sizes)
assert 10_000 < mean < 120_000, mean
PYEOF

run 0 "$SLUICE" pack "$T/a" "$T/a.slr"
run 0 "$SLUICE" info "$T/a.slr" --json
has "$OUT" '"records":40'

run 2 "$GEN"
run 2 "$GEN" "$T/d" --count nope
finish
