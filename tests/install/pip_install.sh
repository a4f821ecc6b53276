#!/usr/bin/env bash
# `pip install .` and `pip wheel .` in a fresh virtual environment, from a
# clean copy of the tree (no build folders), then a small pipeline through the
# installed `sluice` command and the installed `sluice` package, run from a
# directory outside the tree with no PYTHONPATH.
#
#   bash tests/install/pip_install.sh          (scripts/test.sh runs it)
#
# Needs Debian's build dependencies (scripts/deps.sh) and PyPI for the build
# backend (pip's build isolation fetches scikit-build-core, cached in pip's
# cache). The venv uses --system-site-packages, so numpy/torch/Pillow are
# Debian's. SLUICE_PIP_KEEP=1 keeps the work folder.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-/usr/bin/python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-pip.XXXXXX")
if [ "${SLUICE_PIP_KEEP:-0}" != 1 ]; then trap 'rm -rf "$WORK"' EXIT; fi
LOG=$WORK/pip.log
fail() { echo "FAIL pip_install: $*" >&2; [ -f "$LOG" ] && tail -40 "$LOG" >&2; exit 1; }

# 1. A clean copy: the files git would commit (tracked and new, not ignored),
#    so no build/ folder and no stale build state come along.
mkdir -p "$WORK/src"
if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
     tar --null --ignore-failed-read -T - -cf -) 2>/dev/null | tar -xf - -C "$WORK/src"
else
  tar -C "$REPO" --exclude='./build*' --exclude=./.git -cf - . | tar -xf - -C "$WORK/src"
fi
[ -f "$WORK/src/pyproject.toml" ] || fail "no pyproject.toml in the copy"

# 2. A fresh venv; nothing from the caller's PYTHONPATH or build tree.
"$PY" -m venv --system-site-packages "$WORK/venv"
VENV=$WORK/venv
run() { env -u PYTHONPATH -u PYTHONHOME -u SLUICE_BIN -u SLUICE_LIB \
          PATH="$VENV/bin:$PATH" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$@"; }

# 3. pip install . and pip wheel . as a user runs them (pip's build isolation:
#    each builds in its own temporary environment, so each compiles).
t0=$(date +%s)
(cd "$WORK/src" && run pip install .) >"$LOG" 2>&1 || fail "pip install . failed"
t1=$(date +%s)
(cd "$WORK/src" && run pip wheel --no-deps -w "$WORK/dist" .) >>"$LOG" 2>&1 \
  || fail "pip wheel . failed"
t2=$(date +%s)
echo "pip install . $((t1 - t0)) s, pip wheel . $((t2 - t1)) s"

# 4. The wheel holds the package and the command, nothing else of the build.
run python - "$WORK/dist" <<'PYEOF' || fail "the wheel's contents"
import glob, sys, zipfile
(whl,) = glob.glob(sys.argv[1] + "/sluice-*.whl")
names = zipfile.ZipFile(whl).namelist()
need = ["sluice/__init__.py", "sluice/dataset.py"]
for n in need:
    assert n in names, (n, names)
assert any(n.startswith("sluice/_sluice.") and n.endswith(".so") for n in names), names
assert any(n.endswith(".data/scripts/sluice") for n in names), names
stray = [n for n in names if not (n.startswith("sluice/") or n.startswith("sluice-"))]
assert not stray, stray
meta = zipfile.ZipFile(whl).read([n for n in names if n.endswith("dist-info/METADATA")][0])
assert b"Requires-Dist: numpy" in meta and b"extra == \"torch\"" in meta, meta
PYEOF

# 5. From a folder outside the tree: the command on PATH is the venv's.
mkdir -p "$WORK/run"
cd "$WORK/run"
[ "$(run sh -c 'command -v sluice')" = "$VENV/bin/sluice" ] || fail "sluice on PATH is $(run sh -c 'command -v sluice')"
run sluice --help >/dev/null || fail "sluice --help"

# 6. A small pipeline: an ImageFolder written by PIL, packed by the installed
#    command, read back by the installed package (and the spec it writes run
#    by the command), compared with reading the folder in place.
run python - <<'PYEOF' || fail "the pipeline through the installed package"
import json, os, subprocess, sys
import numpy as np
from PIL import Image
import sluice

venv = os.environ["PATH"].split(os.pathsep)[0]
assert sluice.__file__.startswith(os.path.dirname(venv)), sluice.__file__
for c, cls in enumerate(("cat", "dog")):
    os.makedirs(f"train/{cls}")
    for k in range(3):
        px = np.full((12 + k, 10, 3), 40 * k + 100 * c, np.uint8)
        Image.fromarray(px).save(f"train/{cls}/{k}.png")
out = subprocess.run(["sluice", "pack", "train", "train.slr", "--json"], check=True,
                     capture_output=True, text=True).stdout
rep = json.loads(out)
assert rep["ok"] and rep["records"] == 6 and rep["kind"] == "imagefolder", rep
subprocess.run(["sluice", "verify", "train.slr"], check=True, capture_output=True)

def chain(ds):
    return ds.decode("image").resize("image", [8, 8]).batch(3)

packed = list(chain(sluice.records("train.slr")))
direct = list(chain(sluice.image_folder("train")))
assert len(packed) == 2
for a, b in zip(packed, direct):
    assert np.array_equal(a["image"], b["image"]) and a["image"].shape == (3, 8, 8, 3)
    assert a["label"].tolist() == b["label"].tolist()
    assert a["path"] == b["path"]
assert [p for b in packed for p in b["path"]] == [f"{c}/{k}.png" for c in ("cat", "dog")
                                                  for k in range(3)]
assert [v for b in packed for v in b["label"].tolist()] == [0, 0, 0, 1, 1, 1]
with open("spec.json", "w") as f:
    f.write(chain(sluice.records("train.slr")).to_json())
run = subprocess.run(["sluice", "run", "spec.json", "--digest"], check=True,
                     capture_output=True, text=True).stdout
assert len([l for l in run.splitlines() if l.strip()]) >= 2, run
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    b = next(iter(chain(sluice.records("train.slr")).torch()))
    assert isinstance(b["image"], torch.Tensor) and b["image"].shape == (3, 8, 8, 3)
print("pipeline ok: %d batches, torch %s" % (len(packed), "yes" if torch else "absent"))
PYEOF
echo "ok   pip install . / pip wheel . in a fresh venv"
