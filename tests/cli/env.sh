#!/usr/bin/env bash
# env.sh — `sluice env` and docs/CLI.md's "Settings" and "Spec parameters"
# tables: every row of the library's table of SLUICE_* settings
# (sl_setting_get) and of a spec's parameters (sl_spec_param_get) is a row of
# the document, the same in every column, and no row more; each one's value
# and source (default, environment, spec) as `sluice env` prints them; a bad
# value of each kind of setting stops every command with the message a bad
# spec parameter gets.
source "$(dirname "$0")/common.bash"
DOC=$(cd "$(dirname "$0")/../.." && pwd)/docs/CLI.md

# the table as the library has it, and as the document writes it
env -u SLUICE_NO_PROGRESS "$SLUICE" env --json >"$T/env.json" || fail "sluice env --json failed"
"$PY" - "$T/env.json" "$DOC" <<'PYEOF' || fail "docs/CLI.md's Settings table differs from the library's"
import json, sys
everything = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
bad = 0

def section(title):
    """The rows of the table under '### TITLE' (to the next heading), in order."""
    sec = text.split("### " + title + "\n", 1)
    if len(sec) < 2:
        sys.exit(f"docs/CLI.md has no '### {title}' section")
    rows = []
    for line in sec[1].splitlines():
        if line.startswith("#"):
            break
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.append((cells[0].strip("`"), cells[1:]))
    return rows

for kind, title in (("setting", "Settings"), ("spec", "Spec parameters")):
    lib = [s for s in everything if s["kind"] == kind]
    rows = dict(section(title))
    for s in lib:
        want = [s["type"], s["range"], s["default"], s["layer"], s["doc"]]
        got = rows.pop(s["name"], None)
        if got is None:
            print(f"  {s['name']}: missing from docs/CLI.md", file=sys.stderr); bad = 1
        elif got != want:
            print(f"  {s['name']}: docs/CLI.md has {got}, the library {want}", file=sys.stderr); bad = 1
    for name in rows:
        print(f"  {name}: in docs/CLI.md's {title}, not in the library's table", file=sys.stderr); bad = 1
    names = [s["name"] for s in lib]
    if len(set(names)) != len(names):
        print(f"  a {kind} listed twice: {names}", file=sys.stderr); bad = 1
    if kind == "setting" and (names != sorted(names) or len(names) < 20):
        print(f"  the table is not in name order, or short: {names}", file=sys.stderr); bad = 1
    if kind == "spec" and not {"epochs", "seed", "on_error", "cache_bytes", "source.shuffle.window",
                               "ops[].parallel"} <= set(names):
        print(f"  the spec's parameters lack some: {names}", file=sys.stderr); bad = 1
sys.exit(bad)
PYEOF

# every SLUICE_* variable the sources read is a row of the table
ROOT=$(dirname "$DOC")/..
grep -rhoE '"SLUICE_[A-Z0-9_]+"' "$ROOT/src" "$ROOT/tools" "$ROOT/python" --include=*.c --exclude=settings.c |
    tr -d '"' | sort -u >"$T/read"
"$PY" -c 'import json,sys; [print(s["name"]) for s in json.load(open(sys.argv[1])) if s["kind"] == "setting"]' \
    "$T/env.json" | sort -u >"$T/listed"
comm -23 "$T/read" "$T/listed" >"$T/unlisted"
[ -s "$T/unlisted" ] && fail "read by the sources, not in the table: $(tr '\n' ' ' <"$T/unlisted")"

# values and where they come from
echo '{"source": {"path": "x.slr"}, "batch_size": 1, "cache_bytes": 123}' >"$T/spec.json"
run 0 env -u SLUICE_CACHE_BYTES -u SLUICE_HTTP_TRIES "$SLUICE" env --json
"$PY" -c '
import json, sys
d = {s["name"]: s for s in json.load(open(sys.argv[1]))}
assert d["SLUICE_HTTP_TRIES"]["value"] == "6" and d["SLUICE_HTTP_TRIES"]["source"] == "default", d["SLUICE_HTTP_TRIES"]
' "$OUT" || fail "an unset setting is not its default"
SLUICE_HTTP_TRIES=9 SLUICE_CACHE_BYTES=1G run 0 "$SLUICE" env "$T/spec.json" --json
"$PY" -c '
import json, sys
d = {s["name"]: s for s in json.load(open(sys.argv[1]))}
t, c = d["SLUICE_HTTP_TRIES"], d["SLUICE_CACHE_BYTES"]
assert t["value"] == "9" and t["source"] == "environment", t
assert c["value"] == "123" and c["source"] == "spec", c
' "$OUT" || fail "values from the environment and the spec are not said so"
SLUICE_HTTP_TRIES=9 run 0 "$SLUICE" env
has "$OUT" "SLUICE_HTTP_TRIES            9            environment"

# the spec's parameters: their defaults, or what a SPEC.json gives
cat >"$T/spec2.json" <<'EOF2'
{"source": {"path": "x.slr", "shuffle": {"mode": "window", "window": 100}}, "epochs": 3,
 "ops": [{"op": "batch", "batch_size": 4, "parallel": 2}]}
EOF2
run 0 "$SLUICE" env --json
"$PY" -c '
import json, sys
d = {s["name"]: s for s in json.load(open(sys.argv[1])) if s["kind"] == "spec"}
for name, value in (("epochs", "1"), ("on_error", "\"fail\""), ("source.shuffle.mode", "\"auto\""),
                    ("cache_bytes", "unset"), ("device.kind", "required")):
    assert d[name]["value"] == value and d[name]["source"] == "default", d[name]
assert d["epochs"]["range"] == "a whole number >= 1", d["epochs"]
' "$OUT" || fail "a spec parameter's default is not said"
run 0 "$SLUICE" env "$T/spec2.json" --json
"$PY" -c '
import json, sys
d = {s["name"]: s for s in json.load(open(sys.argv[1])) if s["kind"] == "spec"}
for name, value in (("epochs", "3"), ("source.shuffle.mode", "window"),
                    ("source.shuffle.window", "100"), ("ops[].parallel", "[2]")):
    assert d[name]["value"] == value and d[name]["source"] == "spec", d[name]
assert d["seed"]["source"] == "default", d["seed"]
' "$OUT" || fail "values the spec gives are not said so"
run 0 "$SLUICE" env "$T/spec2.json"
has "$OUT" "SPEC PARAMETER"
has "$OUT" "epochs                       3            spec"

# a bad value of each kind stops every command before it starts, with the
# message a bad spec parameter gets; `sluice env` prints the table, then it
INT="a whole number from 1 to 100"
BYTES='a whole number of bytes >= 0 or a string such as "512M" (K, M, G, T)'
MODE="an octal folder mode that gives its owner rwx (0700 to 02777)"
while IFS='|' read -r var value says; do
    run 2 env "$var=$value" "$SLUICE" info "$T/missing.slr"
    has "$ERR" "sluice info: $var: must be $says"
    has "$ERR" "(got \"$value\")"
    one_line "$ERR"
    run 2 env "$var=$value" "$SLUICE" run "$T/spec.json" --digest
    has "$ERR" "sluice run: $var: must be $says"
    run 2 env "$var=$value" "$SLUICE" env --json
    has "$ERR" "sluice env: $var: must be $says"
    "$PY" -c 'import json,sys; json.load(open(sys.argv[1]))' "$OUT" || fail "env --json with a bad $var: not the table"
done <<EOF2
SLUICE_HTTP_TRIES|abc|$INT
SLUICE_HTTP_TRIES|0|$INT
SLUICE_CPUS|-2|a whole number from 1 to 1000000
SLUICE_CACHE_BYTES|12Q|$BYTES
SLUICE_CACHE_MODE|0600|$MODE
SLUICE_LOG|loud|"error", "warn", "info" or "debug"
SLUICE_SIMD|neon|"scalar", "sse4.1", "avx2" or "avx512"
SLUICE_INTEGRITY|yes|"strict"
EOF2
# empty is unset; a good value of each kind passes
SLUICE_HTTP_TRIES= SLUICE_CACHE_BYTES=20G SLUICE_CACHE_MODE=0750 SLUICE_LOG=error SLUICE_SIMD=scalar \
    SLUICE_INTEGRITY=strict SLUICE_CPUS=2 run 0 "$SLUICE" env
# a choice in any case, as shells write it
SLUICE_LOG=DEBUG SLUICE_SIMD=Scalar run 0 "$SLUICE" env --json
"$PY" - "$OUT" <<'EOF3' || fail "SLUICE_LOG=DEBUG: not read as debug"
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1]))}
assert rows["SLUICE_LOG"]["source"] == "environment", rows["SLUICE_LOG"]
EOF3

run 1 "$SLUICE" env "$T/missing.json"
has "$ERR" "missing.json: cannot open it"
run 2 "$SLUICE" env --bogus
finish
