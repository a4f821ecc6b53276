#!/usr/bin/env bash
# docs/ARCHITECTURE.md's "Rules" are numbered R1..Rn once each, in order, and
# every citation of a rule in the tree ("rule R5", "rules R3, R4") names one
# that exists. (Needs no build: SLUICE is not used.)
. "$(dirname "$0")/common.bash"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
A=$SRC/docs/ARCHITECTURE.md

sed -n '/^## Rules$/,/^## /p' "$A" | grep -o '^- \*\*R[0-9]*' | sed 's/^- \*\*R//' >"$T/defined"
n=$(wc -l <"$T/defined")
[ "$n" -ge 5 ] || fail "docs/ARCHITECTURE.md has $n numbered rules under '## Rules' (want R1..Rn)"
seq 1 "$n" | cmp -s - "$T/defined" || fail "the rules are not numbered R1..R$n in order: $(tr '\n' ' ' <"$T/defined")"

# every citation, in code, scripts, tests and docs
cd "$SRC"
git ls-files -co --exclude-standard -- src include tools python scripts tests docs README.md bench fuzz \
    | grep -v '^tests/cli/rules.sh$' >"$T/files" || true
[ -s "$T/files" ] || fail "git ls-files listed nothing (not a git tree?)"
cited=0
while IFS= read -r f; do
    [ -f "$f" ] || continue
    grep -noE 'rules? R[0-9]+(, R[0-9]+)*( and R[0-9]+)?' "$f" 2>/dev/null | while IFS=: read -r line text; do
        for r in $(echo "$text" | grep -oE 'R[0-9]+' | tr -d R); do
            if [ "$r" -lt 1 ] || [ "$r" -gt "$n" ]; then
                echo "$f:$line cites rule R$r, which docs/ARCHITECTURE.md does not define (R1..R$n)"
            fi
        done
    done
done <"$T/files" >"$T/bad"
cited=$(xargs grep -lE 'rules? R[0-9]+' <"$T/files" 2>/dev/null | wc -l)
[ -s "$T/bad" ] && fail "$(cat "$T/bad")"
[ "$cited" -ge 10 ] || fail "only $cited files cite a rule: the rules are meant to be cited where they are stated"

# R6: every thread of the library starts through src/core/worker.h (the
# facility itself is the one place that calls pthread_create)
grep -rn --include='*.c' --include='*.h' 'pthread_create *(' src | grep -v '^src/core/worker\.c:' >"$T/threads" || true
[ -s "$T/threads" ] && fail "a thread started outside src/core/worker.c (rule R6): $(cat "$T/threads")"
finish
