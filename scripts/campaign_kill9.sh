#!/usr/bin/env bash
# kill -9 campaign: interrupt `sluice pack` at random moments and check that
# what it leaves is either a complete, correct dataset or a salvageable partial
# write whose recovery holds only complete, correct records.
#
#   bash scripts/campaign_kill9.sh SLUICE [TRIALS [SEED]]
#
#   SLUICE   the sluice binary (sluice_gen_images must sit beside it)
#   TRIALS   number of interrupted packs (default 100)
#   SEED     seeds the kill delays (default 1): the same seed gives the same delays
#
# Environment (dataset size; defaults make a ~400 MB pack of 12,000 records):
#   KILL9_IMAGES  distinct JPEGs generated (default 600)
#   KILL9_COPIES  times the ImageFolder is repeated, by hard links, inside each
#                 class folder (default 20): records = IMAGES * COPIES
#   KILL9_SHARD   --shard-size for every pack (default 32M)
#   KILL9_DIR     work directory (default: a new one under $TMPDIR, removed at exit)
#   KILL9_TAMPER  if set: alter a source image after the reference pack, so the
#                 checks must report bad outputs (the test of this script)
#
# Each trial packs into a fresh DST, sends SIGKILL after a delay drawn uniformly
# from [0, duration of the clean reference pack], then checks:
#  (a) if DST exists: `sluice verify DST` passes and DST is byte-identical to the
#      reference (same file names, same bytes: pack is deterministic, so any
#      difference is damage);
#  (b) if DST.partial/ exists: `sluice recover --out` writes an output that
#      `sluice verify` passes, marked as salvaged (K of the reference's records
#      planned), whose columns and metadata are the reference's (its class list
#      cut to the classes its records reach), and whose K records are the
#      reference's first K records (record i compared as its whole frame --
#      length, checksum seeded with i, payload -- byte for byte:
#      scripts/campaign_prefix.py); a partial write with no complete record must
#      make recover fail and leave no output;
#  (c) no DST that does not verify, and never both DST and a non-empty DST.partial/;
#  (d) when the kill left no DST: `sluice pack ... --resume` completes the pack,
#      byte-identical to the reference (diff -r).
# Any failed check is a bad output; the exit status is 1 if there is any.
set -u
. "$(dirname "$0")/campaign_common.bash"
campaign_start kill9 100 "$@"
IMAGES=${KILL9_IMAGES:-600}
COPIES=${KILL9_COPIES:-20}
SHARD=${KILL9_SHARD:-32M}
campaign_prepare "${KILL9_DIR:-}" "${KILL9_TAMPER:-}"
[ "$NSHARDS" -ge 2 ] || echo "campaign_kill9: note: the reference has one shard; roll-over is not exercised (lower KILL9_SHARD)" >&2

# prefix_check REF_INFO OUT_INFO: OUT's records are REF's first K, frame for
# frame; OUT is marked as salvaged; its columns and metadata are REF's.
prefix_check() { $PY "$(dirname "$0")/campaign_prefix.py" "$1" "$2"; }

BAD=0
before=0 during=0 after=0 finished=0 resumed=0
recovered=()
bad() { echo "campaign_kill9: trial $1 (kill after $2 ms): $3" >&2; BAD=$((BAD + 1)); }
# resume_check TRIAL DELAY: `pack --resume` from what the kill left (a copy:
# the recover checks below read the original) ends as the reference
resume_check() {
    rm -rf "$W/res.slr" "$W/res.slr.partial"
    [ -d "$D.partial" ] && cp -a "$D.partial" "$W/res.slr.partial"
    if ! "$SLUICE" pack "$W/src" "$W/res.slr" --shard-size "$SHARD" --resume >"$W/res.out" 2>&1; then
        bad "$1" "$2" "pack --resume failed: $(grep -v '^sluice pack: no ' "$W/res.out" | head -1)"
    elif ! diff -r "$W/ref.slr" "$W/res.slr" >/dev/null 2>&1; then
        bad "$1" "$2" "pack --resume gave a dataset that differs from the reference"
    else
        resumed=$((resumed + 1))
    fi
    rm -rf "$W/res.slr" "$W/res.slr.partial"
}
RANDOM=$SEED

for ((t = 1; t <= TRIALS; t++)); do
    d=$(((RANDOM * 32768 + RANDOM) % (DUR_MS + 1)))
    D=$W/t.slr
    rm -rf "$D" "$D.partial" "$W/rec.slr" "$W/rec.slr.recovering"
    "$SLUICE" pack "$W/src" "$D" --shard-size "$SHARD" >"$W/pack.out" 2>&1 &
    pid=$!
    sleep "$((d / 1000)).$(printf '%03d' $((d % 1000)))"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    st=$?
    if [ "$st" != 0 ] && [ "$st" != 137 ]; then
        bad "$t" "$d" "pack exited $st: $(head -2 "$W/pack.out")"
        continue
    fi
    nonempty_partial=0
    [ -d "$D.partial" ] && [ -n "$(ls -A "$D.partial")" ] && nonempty_partial=1
    if [ -e "$D" ]; then
        after=$((after + 1))
        [ "$st" = 0 ] && finished=$((finished + 1))
        if ! "$SLUICE" verify "$D" >"$W/v.out" 2>&1; then
            bad "$t" "$d" "$D exists but does not verify: $(head -1 "$W/v.out")"
        elif ! diff -r "$W/ref.slr" "$D" >/dev/null 2>&1; then
            bad "$t" "$d" "$D verifies but differs from the reference"
        fi
        [ "$nonempty_partial" = 0 ] || bad "$t" "$d" "both $D and a non-empty $D.partial exist"
        [ "$TTY" = 1 ] && printf '\rtrial %d/%d: complete    ' "$t" "$TRIALS" >&2
        continue
    fi
    if [ "$nonempty_partial" = 0 ]; then
        resume_check "$t" "$d"
        before=$((before + 1))
        recovered+=(0)
        [ "$TTY" = 1 ] && printf '\rtrial %d/%d: nothing written' "$t" "$TRIALS" >&2
        continue
    fi
    resume_check "$t" "$d"
    "$SLUICE" recover "$D.partial" --out "$W/rec.slr" >"$W/r.out" 2>&1
    rst=$?
    if [ "$rst" != 0 ]; then
        if grep -q "no complete record" "$W/r.out"; then
            before=$((before + 1))
            recovered+=(0)
            [ -e "$W/rec.slr" ] && bad "$t" "$d" "recover found no record but left $W/rec.slr"
        else
            bad "$t" "$d" "recover exited $rst: $(head -1 "$W/r.out")"
        fi
        continue
    fi
    during=$((during + 1))
    kept=$(sed -n 's/^salvaged \([0-9]*\) .*/\1/p' "$W/r.out")
    if ! "$SLUICE" verify "$W/rec.slr" >"$W/v.out" 2>&1; then
        bad "$t" "$d" "the recovered output does not verify: $(head -1 "$W/v.out")"
        continue
    fi
    "$SLUICE" info "$W/rec.slr" --json >"$W/rec.json" || { bad "$t" "$d" "sluice info failed on the recovered output"; continue; }
    if ! prefix_check "$W/ref.json" "$W/rec.json" 2>"$W/p.out"; then
        bad "$t" "$d" "recovered output: $(tail -1 "$W/p.out")"
        continue
    fi
    if [ -z "$kept" ] || ! grep -q "\"records\":$kept[,}]" "$W/rec.json"; then
        bad "$t" "$d" "recover said it kept $kept records but the output holds $(sed -n 's/.*"records":\([0-9]*\).*/\1/p' "$W/rec.json")"
        continue
    fi
    recovered+=("$kept")
    [ "$TTY" = 1 ] && printf '\rtrial %d/%d: recovered %s  ' "$t" "$TRIALS" "$kept" >&2
done
[ "$TTY" = 1 ] && printf '\r%40s\r' '' >&2

stats="none"
if [ ${#recovered[@]} -gt 0 ]; then
    stats=$(printf '%s\n' "${recovered[@]}" | sort -n |
        awk '{v[NR] = $1} END {printf "%d/%d/%d", v[1], v[int((NR + 1) / 2)], v[NR]}')
fi
echo "kill9: $TRIALS trials (seed $SEED; $NREC records in $NSHARDS shards, clean pack $DUR_MS ms):" \
     "killed before writing a record $before, during $during, after publishing $after ($finished had exited);" \
     "recovered records min/median/max $stats; resumed to the reference $resumed of $((before + during));" \
     "bad outputs $BAD"
[ "$BAD" = 0 ]
