#!/usr/bin/env bash
# tests/ mirrors src/ (docs/ARCHITECTURE.md, "Tests"): a folder of C tests is
# a layer of src/ (or one of the folders of other tests); a file
# tests/<dir>/test_<name>.c whose <name>.c is a file of src/ is in that
# file's layer (the shard set's tests under record, the pipeline's under
# pipeline); the cases of tests/<layer>/ are named <layer>_... (the device's
# excepted: scripts/gpu_check.sh selects them by their own names). Then a
# copy with a test file planted in the wrong folder fails, naming it.
# (Needs no build: SLUICE is not used.)
. "$(dirname "$0")/common.bash"
SRC=$(cd "$(dirname "$0")/../.." && pwd)

check() { # ROOT: print every test file out of place
    $PY - "$1" <<'PYEOF'
import os, re, sys
root = sys.argv[1]
layers = sorted(d for d in os.listdir(os.path.join(root, "src"))
                if os.path.isdir(os.path.join(root, "src", d)))
others = {"cli", "python", "remote", "install", "header"}  # tests of no one layer
home = {}  # name.c of src/ -> its layers
for layer in layers:
    for dirpath, _, names in os.walk(os.path.join(root, "src", layer)):
        for f in names:
            if f.endswith(".c"):
                home.setdefault(f, set()).add(layer)
tests = os.path.join(root, "tests")
for d in sorted(os.listdir(tests)):
    full = os.path.join(tests, d)
    if not os.path.isdir(full):
        continue
    files = sorted(f for f in os.listdir(full) if re.fullmatch(r"test_\w+\.c", f))
    if not files:
        continue
    if d not in layers and d not in others:
        print(f"tests/{d}/: C tests in a folder that is no layer of src/ ({', '.join(layers)})")
        continue
    for f in files:
        rel = f"tests/{d}/{f}"
        owners = home.get(f[len("test_"):], set())
        if owners and d not in owners:
            print(f"{rel}: tests src/{sorted(owners)[0]}/{f[len('test_'):]}: "
                  f"move it to tests/{sorted(owners)[0]}/")
        if d in layers and d != "device":
            text = open(os.path.join(full, f), encoding="utf-8", errors="replace").read()
            for case in re.findall(r"^SL_TEST\((\w+)\)", text, re.M):
                if not case.startswith(d + "_"):
                    print(f"{rel}: case {case} is not named {d}_...")
PYEOF
}

check "$SRC" >"$T/bad" || fail "the check failed to run"
[ -s "$T/bad" ] && fail "tests out of place: $(cat "$T/bad")"
# the check sees what it says it sees: a copy with the shard set's tests
# back under source, a pipeline test under ops, a case misnamed
mkdir -p "$T/r/tests"
cp -r "$SRC/src" "$T/r/"
cp -r "$SRC/tests/record" "$SRC/tests/source" "$SRC/tests/ops" "$SRC/tests/pipeline" "$T/r/tests/"
mv "$T/r/tests/record/test_shard_set.c" "$T/r/tests/source/"
cp "$SRC/tests/pipeline/test_exec.c" "$T/r/tests/ops/test_pipeline.c"
sed -i '0,/^SL_TEST(pipeline_/s//SL_TEST(misnamed_/' "$T/r/tests/pipeline/test_spec.c"
check "$T/r" >"$T/got" || fail "the check failed to run on the copy"
has "$T/got" "tests/source/test_shard_set.c: tests src/record/shard_set.c: move it to tests/record/"
has "$T/got" "tests/ops/test_pipeline.c: tests src/pipeline/pipeline.c: move it to tests/pipeline/"
has "$T/got" "tests/pipeline/test_spec.c: case misnamed_"
has "$T/got" "is not named pipeline_..."
cut -d: -f1 "$T/got" | sort -u >"$T/files"
printf '%s\n' tests/ops/test_pipeline.c tests/pipeline/test_spec.c tests/source/test_shard_set.c \
    | cmp -s - "$T/files" || fail "want findings in the three planted files only, got: $(cat "$T/got")"
finish
