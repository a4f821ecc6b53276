# common.bash — shared helpers for the CLI tests (sourced, not run; not named *.sh
# so that the test loop does not run it as a test).
# Each test script: SLUICE=./build/sluice bash tests/cli/X.sh, from the repo root.
set -u
: "${SLUICE:?set SLUICE to the sluice binary, e.g. SLUICE=./build/sluice}"
SLUICE=$(cd "$(dirname "$SLUICE")" && pwd)/$(basename "$SLUICE")
PY=/usr/bin/python3
T=$(mktemp -d "${TMPDIR:-/tmp}/sluice-cli-XXXXXX")
trap 'rm -rf "$T"' EXIT
export SLUICE_NO_PROGRESS=1
FAILS=0
OUT=$T/.out
ERR=$T/.err

fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }

# skip REASON (rule R10): this script cannot run here; it is reported as skipped (exit
# status 77), never as passed. The test command allows no skip.
skip() { echo "SKIP: $*" >&2; exit 77; }

# run CODE CMD...: run CMD with stdout/stderr captured in $OUT/$ERR, expect exit CODE.
run() {
    local want=$1
    shift
    "$@" >"$OUT" 2>"$ERR"
    local got=$?
    if [ "$got" != "$want" ]; then
        fail "'$*' exited $got, want $want"
        sed 's/^/    stdout: /' "$OUT" | head -5 >&2
        sed 's/^/    stderr: /' "$ERR" | head -5 >&2
    fi
}

# has FILE TEXT: FILE contains TEXT (fixed string).
has() {
    if ! grep -qF -- "$2" "$1"; then
        fail "$(basename "$1") lacks '$2'"
        sed 's/^/    | /' "$1" | head -5 >&2
    fi
}

# one_line FILE: the message is a single line (hints may follow on lines in parentheses).
one_line() {
    local n
    n=$(grep -vc '^(' "$1")
    [ "$n" = 1 ] || fail "$(basename "$1") has $n message lines, want 1"
}

# foreign_sources: TFRecord files in $T/tf and tar shards in $T/tar, each
# with its expected.json, written by tests/source/make_tfrecords.py and
# make_tar_shards.py; the script is skipped where the protobuf runtime is
# missing, and ends failed where a writer fails.
foreign_sources() {
    local src
    src=$(cd "$(dirname "$0")/../source" && pwd)
    $PY "$src/make_tfrecords.py" "$T/tf" >/dev/null 2>"$ERR"
    case $? in
        0) ;;
        3) skip "$(cat "$ERR") (scripts/deps.sh installs it)" ;;
        *) fail "make_tfrecords.py failed: $(cat "$ERR")"; finish ;;
    esac
    $PY "$src/make_tar_shards.py" "$T/tar" >/dev/null 2>"$ERR" || { fail "make_tar_shards.py: $(cat "$ERR")"; finish; }
}

finish() {
    if [ "$FAILS" -ne 0 ]; then
        echo "$FAILS check(s) failed in $(basename "$0")" >&2
        exit 1
    fi
    exit 0
}
