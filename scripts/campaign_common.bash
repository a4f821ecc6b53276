# campaign_common.bash — what the kill -9 and kill -INT campaigns share
# (scripts/campaign_kill9.sh, scripts/campaign_killint.sh; sourced, not run):
# the command line, the work directory, the dataset, the clean reference pack
# and the self-test that alters an input after it. The caller calls
# campaign_start, sets IMAGES, COPIES and SHARD, then campaign_prepare.

# campaign_start NAME DEFAULT_TRIALS "$@": the command line both campaigns
# take (SLUICE [TRIALS [SEED]]; none, or -h/--help: the script's opening
# comment, exit 2); sets CAMPAIGN, SLUICE (absolute), TRIALS, SEED, GEN
# (sluice_gen_images beside SLUICE), PY and TTY (stderr is a terminal).
campaign_start() {
    CAMPAIGN=$1
    local def=$2
    shift 2
    if [ $# -lt 1 ] || [ $# -gt 3 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
        sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
        exit 2
    fi
    SLUICE=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
    TRIALS=${2:-$def}
    SEED=${3:-1}
    GEN=$(dirname "$SLUICE")/sluice_gen_images
    PY=/usr/bin/python3
    export SLUICE_NO_PROGRESS=1
    [ -x "$SLUICE" ] || die "$SLUICE is not an executable (build with: cmake --build build)"
    [ -x "$GEN" ] || die "no $GEN beside the sluice binary (it is built with the tools)"
    case "$TRIALS$SEED" in *[!0-9]*) die "TRIALS and SEED are whole numbers (got '$TRIALS', '$SEED')" ;; esac
    [ -t 2 ] && TTY=1 || TTY=0
}

die() { echo "campaign_$CAMPAIGN: $*" >&2; exit 2; }

# campaign_prepare DIR TAMPER: the work directory W (DIR, or when empty a new
# one under $TMPDIR, removed at exit), the dataset and the reference pack
# (below); when TAMPER is not empty, the self-test's altered input.
campaign_prepare() {
    if [ -n "$1" ]; then
        W=$1
        mkdir -p "$W" || die "cannot create $W"
    else
        W=$(mktemp -d "${TMPDIR:-/tmp}/sluice-$CAMPAIGN-XXXXXX") || die "cannot create a work directory"
        trap 'rm -rf "$W"' EXIT
    fi
    campaign_dataset
    campaign_reference
    if [ -n "$2" ]; then campaign_tamper; fi
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# campaign_dataset: $W/src, an ImageFolder of IMAGES distinct JPEGs in 10
# classes, each class folder repeated COPIES times by hard links (made once
# per work directory: $W/src/.complete)
campaign_dataset() {
    [ -f "$W/src/.complete" ] && return 0
    rm -rf "$W/src" "$W/gen"
    "$GEN" "$W/gen" --count "$IMAGES" --classes 10 --seed 5 >/dev/null ||
        die "sluice_gen_images failed"
    mkdir -p "$W/src"
    local cls c k
    for cls in "$W/gen"/*/; do
        c=$(basename "$cls")
        for ((k = 0; k < COPIES; k++)); do
            mkdir -p "$W/src/$c"
            cp -al "$cls" "$W/src/$c/copy$k" || die "cannot link $cls into $W/src"
        done
    done
    rm -rf "$W/gen"
    touch "$W/src/.complete"
}

# campaign_reference: the clean pack $W/ref.slr, and two more timed like the
# trials that must be byte-identical to it (pack is deterministic: the
# premise of every "differs" check); DUR_MS is their median time, which
# bounds the trials' delays. Then $W/ref.json (sluice info --json), NREC and
# NSHARDS.
campaign_reference() {
    local durs=() r t0
    for r in ref ref2 ref3; do
        rm -rf "$W/$r.slr" "$W/$r.slr.partial"
        t0=$(now_ms)
        "$SLUICE" pack "$W/src" "$W/$r.slr" --shard-size "$SHARD" >"$W/ref.out" 2>&1 ||
            { cat "$W/ref.out" >&2; die "the reference pack failed"; }
        durs+=($(($(now_ms) - t0)))
        if [ "$r" != ref ]; then
            diff -r "$W/ref.slr" "$W/$r.slr" >/dev/null ||
                die "two clean packs of the same input differ: pack is not deterministic, so no trial can be checked"
            rm -rf "$W/$r.slr"
        fi
    done
    DUR_MS=$(printf '%s\n' "${durs[@]}" | sort -n | sed -n 2p)
    [ "$DUR_MS" -ge 1 ] || DUR_MS=1
    "$SLUICE" verify "$W/ref.slr" >/dev/null || die "the reference pack does not verify"
    "$SLUICE" info "$W/ref.slr" --json >"$W/ref.json" || die "sluice info failed on the reference"
    NREC=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["records"])' "$W/ref.json")
    NSHARDS=$($PY -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["shards"]))' "$W/ref.json")
}

# campaign_tamper: the self-test of the checks: the first record's source
# file (and its hard-linked copies) altered after the reference is made, so
# that every trial that writes that record must count as bad
campaign_tamper() {
    local first size
    first=$(find "$W/src" -type f -name '*.jpg' | LC_ALL=C sort | head -1)
    size=$(stat -c %s "$first")
    printf '\x55' | dd of="$first" bs=1 seek=$((size - 16)) conv=notrunc status=none
}
