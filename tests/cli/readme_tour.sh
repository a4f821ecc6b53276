#!/usr/bin/env bash
# The README's quick tour runs as it is written: every line of its sh blocks
# and its Python block, unchanged, from a copy of the repository root where
# data/demo/ is made as scripts/demo.sh makes it (the same tools, fewer
# images: sluice_gen_images, sluice pack, scripts/demo_shards.py; Fashion-MNIST
# from Debian's dataset-fashion-mnist) and build-release/sluice is the
# sluice under test.
. "$(dirname "$0")/common.bash"

SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(dirname "$SLUICE")
FMNIST=/usr/share/datasets/fashion-mnist
[ -f "$FMNIST/train-images-idx3-ubyte.gz" ] || fail "no $FMNIST (scripts/deps.sh installs dataset-fashion-mnist)"
[ -x "$BIN/sluice_gen_images" ] || { fail "no $BIN/sluice_gen_images (built with the tools)"; finish; }

R=$T/repo
mkdir -p "$R/examples" "$R/build-release" "$R/data/demo"
cp -r "$SRC/examples/specs" "$R/examples/"
ln -s "$SLUICE" "$R/build-release/sluice"
run 0 "$BIN/sluice_gen_images" "$R/data/demo/images" --count 40 --classes 4 --seed 1 --threads 2
run 0 "$SLUICE" pack "$R/data/demo/images" "$R/data/demo/images.slr"
run 0 "$SLUICE" pack "$FMNIST/train-images-idx3-ubyte.gz" "$FMNIST/train-labels-idx1-ubyte.gz" \
    "$R/data/demo/fmnist.slr"
run 0 $PY "$SRC/scripts/demo_shards.py" "$R/data/demo/images" "$R/data/demo"

# The fenced blocks of the "## Quick tour" section, each to its own file.
$PY - "$SRC/README.md" "$T/blocks" <<'PYEOF' || fail "reading the README's quick tour"
import os, sys
text = open(sys.argv[1]).read()
tour = text.split("## Quick tour", 1)[1].split("\n## ", 1)[0]
os.makedirs(sys.argv[2])
n, block, lang = 0, None, None
for line in tour.splitlines():
    if line.startswith("```") and block is None:
        block, lang = [], line[3:].strip()
    elif line.startswith("```"):
        n += 1
        with open(os.path.join(sys.argv[2], "%02d.%s" % (n, lang)), "w") as f:
            f.write("\n".join(block) + "\n")
        block = None
    elif block is not None:
        block.append(line)
assert n >= 3, n
PYEOF

# the sh blocks in one shell, in order, as typed into one terminal
nsh=$(ls "$T"/blocks/*.sh | wc -l)
[ "$nsh" -ge 2 ] || fail "found $nsh sh blocks in the quick tour"
cat "$T"/blocks/*.sh >"$T/tour.sh"
(cd "$R" && bash -e -x "$T/tour.sh") >"$OUT" 2>"$ERR" || {
    fail "the README's quick tour stopped at: $(grep '^+' "$ERR" | tail -1)"
    tail -5 "$ERR" >&2
}
# what the lines made
[ -s "$R/data/demo/x.jpg" ] || fail "sluice cat wrote no data/demo/x.jpg"
[ -f "$R/data/demo/tfr/train-00000.tfrecord.slidx" ] || fail "sluice index wrote no sidecar"
run 0 "$SLUICE" info "$R/data/demo/wds.slr"
has "$OUT" "records   40"
# a spec run from elsewhere reads what its relative path names
(cd "$T" && run 0 "$SLUICE" run repo/examples/specs/fmnist_train.json --epochs 1)
has "$OUT" "60000 samples"

for b in "$T"/blocks/*.python; do
    (cd "$R" && PYTHONPATH="$BIN/python" $PY "$b") >"$OUT" 2>"$ERR" ||
        { fail "README Python block failed"; tail -5 "$ERR" >&2; }
done
finish
