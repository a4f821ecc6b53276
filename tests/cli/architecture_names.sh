#!/usr/bin/env bash
# docs/ARCHITECTURE.md names only what exists: every backquoted internal or
# public name (sl_..., SL_..., a name with a double underscore) occurs in the
# tree's code, and every backquoted source file (x.c, x.h, x.cu, x.py, x.sh,
# x.map) is a file of the tree. A rename that forgets the map fails here.
# (Needs no build: SLUICE is not used.)
. "$(dirname "$0")/common.bash"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC"
$PY - <<'PYEOF' >"$T/missing" || fail "the name check failed to run"
import fnmatch, os, re, subprocess
text = open("docs/ARCHITECTURE.md", encoding="utf-8").read()
files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], capture_output=True,
                       text=True, check=True).stdout.split("\n")
files = [f for f in files if f and os.path.isfile(f)]
code = "\n".join(open(f, errors="replace").read() for f in files
                 if f.startswith(("src/", "include/", "tests/", "tools/", "python/", "scripts/",
                                  "fuzz/", "bench/")) and f.endswith((".c", ".h", ".cu", ".py", ".sh", ".map", ".bash")))
base = {os.path.basename(f) for f in files}
lines = text.split("\n")
for ln, line in enumerate(lines, 1):
    for quoted in re.findall(r"`([^`]+)`", line):
        for w in re.findall(r"[A-Za-z_*][A-Za-z0-9_./*-]*", quoted):
            w = w.rstrip(".")
            if re.search(r"\.(c|h|cu|py|sh|map)$", w):
                if w.endswith("nvjpeg.h"):
                    continue  # the wheel's header, not the tree's
                if "*" in w:
                    ok = any(fnmatch.fnmatch(f, w) or fnmatch.fnmatch(os.path.basename(f), w) for f in files)
                else:
                    ok = os.path.basename(w) in base or os.path.exists(w) or os.path.exists("src/" + w)
                if not ok:
                    print(f"docs/ARCHITECTURE.md:{ln}: `{w}` is no file of the tree")
                continue
            for name in re.findall(r"[A-Za-z_][A-Za-z0-9_*]*", w):
                if not (name.startswith(("sl_", "SL_")) or "__" in name.strip("_")):
                    continue
                pat = re.escape(name.split("*")[0]) if "*" in name else re.escape(name) + r"\b"
                if not re.search(r"\b" + pat, code):
                    print(f"docs/ARCHITECTURE.md:{ln}: `{name}` occurs nowhere in the code")
PYEOF
[ -s "$T/missing" ] && fail "$(cat "$T/missing")"
finish
