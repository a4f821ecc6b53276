#!/usr/bin/env bash
# kill -INT campaign: interrupt `sluice pack` (and Python's sluice.pack) with
# SIGINT at random moments, the packs that continue it too, and check that
# each stops within a second saying how many records are safe, and that what
# it leaves continues (--resume) into exactly the clean pack, or salvages
# (recover --out) into a prefix of it marked as salvaged.
#
#   bash scripts/campaign_killint.sh SLUICE [TRIALS [SEED]]
#
#   SLUICE   the sluice binary (sluice_gen_images must sit beside it, and the
#            Python module in python/ beside it for the Python trials)
#   TRIALS   number of trials (default 60)
#   SEED     seeds the signal delays (default 1): the same seed gives the same delays
#
# Environment:
#   KILLINT_IMAGES, KILLINT_COPIES, KILLINT_SHARD  the dataset, as campaign_kill9.sh's
#                 KILL9_* (defaults 600, 10, 16M: 6,000 records, ~190 MB)
#   KILLINT_PYTHON  every Nth trial packs from Python (sluice.pack; default 4; 0: none)
#   KILLINT_DIR   work directory (default: a new one under $TMPDIR, removed at exit)
#   KILLINT_TAMPER  if set: a source image is altered after the reference pack, so
#                 the checks must report bad outputs (the test of this script)
#
# Each trial packs into a fresh DST and sends SIGINT after a delay drawn
# uniformly from [0, duration of the clean pack]; a pack that is interrupted
# is continued with --resume (resume=True), which is itself interrupted the
# same way with probability 1/2, up to 3 times, then let finish. Checks:
#  (a) an interrupted pack exits 130 (Python: raises KeyboardInterrupt) within
#      1000 ms of the signal, and says "interrupted: K of M planned records are
#      safe in DST.partial" with M the clean pack's records and K what
#      `sluice recover DST.partial` finds complete (Python: that recover's K);
#  (b) every third interrupted trial: `sluice recover DST.partial --out OUT`
#      salvages K records, `sluice verify OUT` passes, and OUT is the clean
#      pack's first K records, marked as salvaged (scripts/campaign_prefix.py);
#  (c) the last pack of a trial publishes DST byte-identical to the clean pack
#      (diff -r), with no DST.partial left.
# Any failed check is a bad output; the exit status is 1 if there is any.
set -u
. "$(dirname "$0")/campaign_common.bash"
campaign_start killint 60 "$@"
IMAGES=${KILLINT_IMAGES:-600}
COPIES=${KILLINT_COPIES:-10}
SHARD=${KILLINT_SHARD:-16M}
EVERY_PY=${KILLINT_PYTHON:-4}
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH=$(dirname "$SLUICE")/python${PYTHONPATH:+:$PYTHONPATH}
case "$EVERY_PY" in *[!0-9]*) die "KILLINT_PYTHON is a whole number (got '$EVERY_PY')" ;; esac
if [ "$EVERY_PY" != 0 ] && ! $PY -c 'import sluice' 2>/dev/null; then
    die "the Python module does not import from $(dirname "$SLUICE")/python (build it, or KILLINT_PYTHON=0)"
fi
campaign_prepare "${KILLINT_DIR:-}" "${KILLINT_TAMPER:-}"

# The Python pack: says "started" once imported (the delay counts from there:
# the interpreter's start is not what is tested), then KeyboardInterrupt is
# caught, said ("interrupted"), exit 130.
PYPACK='
import sys
import sluice
print("started", flush=True)
try:
    sluice.pack(sys.argv[1], sys.argv[2], shard_bytes=int(sys.argv[3]), resume=sys.argv[4] == "1")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
'
SHARD_BYTES=$($PY -c 'import sys
v = sys.argv[1]; m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
print(int(v[:-1]) * m[v[-1]] if v[-1] in m else int(v))' "$SHARD")

BAD=0
interrupts=0 py_interrupts=0 finished_first=0 resumed=0 salvaged=0
lat=() safe=()
bad() { echo "campaign_killint: trial $1 (signal after $2 ms): $3" >&2; BAD=$((BAD + 1)); }
RANDOM=$SEED

# one_pack TRIAL PY RESUME DELAY(-1: none): a pack into $D, SIGINT after DELAY ms.
# Sets $st (exit status) and $ms (signal to exit, -1 when it ended first).
one_pack() {
    local t=$1 py=$2 resume=$3 d=$4 rflag=()
    [ "$resume" = 1 ] && rflag=(--resume)
    rm -f "$W/pack.out" "$W/pack.err"
    # SIGINT as at a terminal: a shell starts background commands with it
    # ignored, and Python then installs no handler of its own
    if [ "$py" = 1 ]; then
        env --default-signal=INT $PY -c "$PYPACK" "$W/src" "$D" "$SHARD_BYTES" "$resume" \
            >"$W/pack.out" 2>"$W/pack.err" &
    else
        env --default-signal=INT "$SLUICE" pack "$W/src" "$D" --shard-size "$SHARD" "${rflag[@]}" \
            >"$W/pack.out" 2>"$W/pack.err" &
    fi
    local pid=$! t0 n
    ms=-1
    if [ "$py" = 1 ]; then
        for ((n = 0; n < 1000; n++)); do # bounded: 10 s
            grep -qx started "$W/pack.out" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null && break
            sleep 0.01
        done
    fi
    if [ "$d" -ge 0 ]; then
        sleep "$((d / 1000)).$(printf '%03d' $((d % 1000)))"
        if kill -0 "$pid" 2>/dev/null; then
            t0=$(date +%s%N)
            kill -INT "$pid" 2>/dev/null
            wait "$pid"
            st=$?
            ms=$((($(date +%s%N) - t0) / 1000000))
            return
        fi
    fi
    wait "$pid"
    st=$?
}

for ((t = 1; t <= TRIALS; t++)); do
    D=$W/t.slr
    rm -rf "$D" "$D.partial" "$W/rec.slr" "$W/rec.slr.recovering"
    py=0
    [ "$EVERY_PY" != 0 ] && [ $((t % EVERY_PY)) = 0 ] && py=1
    d=$(((RANDOM * 32768 + RANDOM) % (DUR_MS + 1)))
    resume=0 n_int=0 ok=1
    while :; do
        one_pack "$t" "$py" "$resume" "$d"
        if [ "$ms" -lt 0 ] || [ "$st" = 0 ]; then
            # it ended before the signal (or the signal came as it finished)
            [ "$st" = 0 ] || { bad "$t" "$d" "pack exited $st: $(head -2 "$W/pack.err")"; ok=0; }
            [ "$n_int" = 0 ] && finished_first=$((finished_first + 1))
            break
        fi
        if [ -e "$D" ] && [ ! -e "$D.partial" ]; then
            break # the signal came as the pack ended: what it published is checked below
        fi
        n_int=$((n_int + 1))
        interrupts=$((interrupts + 1))
        [ "$py" = 1 ] && py_interrupts=$((py_interrupts + 1))
        lat+=("$ms")
        if [ "$st" != 130 ]; then
            bad "$t" "$d" "an interrupted pack exited $st, not 130: $(head -2 "$W/pack.err")"; ok=0; break
        fi
        [ "$ms" -le 1000 ] || bad "$t" "$d" "stopped $ms ms after SIGINT (more than 1000)"
        if [ "$py" = 1 ] && [ -e "$D.partial" ]; then
            grep -qx interrupted "$W/pack.out" || { bad "$t" "$d" "Python: no KeyboardInterrupt: $(head -2 "$W/pack.err")"; ok=0; break; }
        fi
        # K and M as the pack said them; K as recover finds it
        said=$(sed -n 's/.*interrupted: \([0-9]*\) of \([0-9]*\) planned records are safe in .*/\1 \2/p' "$W/pack.err" | head -1)
        if [ ! -e "$D.partial" ]; then
            # stopped before the pack began: finding the inputs (it says so), or
            # before its handlers were there (the process starting; Python: its
            # import), which the default action ends at once, writing nothing
            k="0 $NREC"
            [ ! -s "$W/pack.err" ] || grep -q "interrupted before packing began: nothing written" "$W/pack.err" ||
                [ "$py" = 1 ] || bad "$t" "$d" "no $D.partial, and the pack said: $(head -1 "$W/pack.err")"
            said=$k
        else
            "$SLUICE" recover "$D.partial" >"$W/r.out" 2>&1
            k=$(sed -n 's/.*: \([0-9]*\) of \([0-9]*\) records (.*complete; nothing written\./\1 \2/p' "$W/r.out")
            grep -q "no complete record" "$W/r.out" && k="0 $NREC"
        fi
        if [ -z "$k" ]; then
            bad "$t" "$d" "recover says: $(head -1 "$W/r.out")"; ok=0; break
        fi
        # an empty stderr: the signal came before the process set its handlers
        # (its start), and the default action ended it having done nothing
        [ -z "$said" ] && [ ! -s "$W/pack.err" ] && said=$k
        if [ "$py" = 0 ] && [ "$said" != "$k" ]; then
            bad "$t" "$d" "the pack said '$said' (safe, planned), recover finds '$k'"
        fi
        [ "${k#* }" = "$NREC" ] || bad "$t" "$d" "planned ${k#* }, the clean pack has $NREC records"
        safe+=("${k% *}")
        if [ "${k% *}" -gt 0 ] && [ $((interrupts % 3)) = 0 ]; then
            # (b) salvage what is there, check it, and go on from the partial all the same
            if "$SLUICE" recover "$D.partial" --out "$W/rec.slr" >"$W/rr.out" 2>&1 &&
                "$SLUICE" verify "$W/rec.slr" >/dev/null 2>&1 &&
                "$SLUICE" info "$W/rec.slr" --json >"$W/rec.json" &&
                $PY "$HERE/campaign_prefix.py" "$W/ref.json" "$W/rec.json" 2>"$W/p.out"; then
                salvaged=$((salvaged + 1))
            else
                bad "$t" "$d" "salvage: $(cat "$W/rr.out" "$W/p.out" 2>/dev/null | tail -1)"
            fi
            rm -rf "$W/rec.slr"
        fi
        resume=1
        # the resume is interrupted too, half the time (at most 3 signals a trial)
        if [ "$n_int" -lt 3 ] && [ $((RANDOM % 2)) = 0 ]; then
            d=$(((RANDOM * 32768 + RANDOM) % (DUR_MS + 1)))
        else
            d=-1
        fi
    done
    if [ "$ok" = 1 ]; then
        if [ -e "$D.partial" ]; then
            bad "$t" "$d" "$D.partial is left after the pack finished"
        elif ! diff -r "$W/ref.slr" "$D" >/dev/null 2>&1; then
            bad "$t" "$d" "the finished pack differs from the clean pack (after $n_int interruption(s))"
        elif [ "$n_int" -gt 0 ]; then
            resumed=$((resumed + 1))
        fi
    fi
    [ "$TTY" = 1 ] && printf '\rtrial %d/%d: %d interruption(s)  ' "$t" "$TRIALS" "$n_int" >&2
done
[ "$TTY" = 1 ] && printf '\r%40s\r' '' >&2

stats() {
    if [ $# -eq 0 ]; then echo none; return; fi
    printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {printf "%d/%d/%d", v[1], v[int((NR + 1) / 2)], v[NR]}'
}
echo "killint: $TRIALS trials (seed $SEED; $NREC records in $NSHARDS shards, clean pack $DUR_MS ms):" \
     "$interrupts interruptions ($py_interrupts of Python's pack), $finished_first packs finished before the signal;" \
     "stopped after the signal min/median/max $(stats "${lat[@]}") ms;" \
     "records safe min/median/max $(stats "${safe[@]}");" \
     "resumed to the clean pack $resumed; salvages checked $salvaged; bad outputs $BAD"
[ "$BAD" = 0 ]
