#!/usr/bin/env bash
# Interrupted packs through the command: SIGINT and SIGTERM stop `sluice pack`
# within a second, saying how many records are safe and the two ways on;
# `--resume` ends with the clean pack's bytes; what is refused says why;
# `recover` writes only with --out and marks what it writes. The pack is
# stopped at a known record: the 50th file is a FIFO, whose open blocks until
# the signal breaks it off (then that file is put back).
. "$(dirname "$0")/common.bash"

GEN=$(dirname "$SLUICE")/sluice_gen_images
"$GEN" "$T/src" --count 200 --classes 5 --seed 3 >/dev/null || fail "sluice_gen_images"
run 0 "$SLUICE" pack "$T/src" "$T/ref.slr" --shard-size 256K --jobs 1
FIFTIETH=$(cd "$T/src" && find . -type f | LC_ALL=C sort | sed -n 51p)
cp "$T/src/$FIFTIETH" "$T/keep.jpg"

# stop SIG PACK-ARGS...: pack with the FIFO in place, send SIG once the pack
# waits at it (blocked opening the FIFO: wait_for_partner); sets $ST (exit status) and $MS (signal to exit)
stop() {
    local sig=$1 n
    shift
    rm -f "$T/src/$FIFTIETH"
    mkfifo "$T/src/$FIFTIETH"
    env --default-signal=INT "$SLUICE" pack "$T/src" "$T/out.slr" --shard-size 256K --jobs 1 "$@" \
        >"$OUT" 2>"$ERR" &
    local pid=$!
    for ((n = 0; n < 500; n++)); do # bounded: 10 s for the pack to reach the FIFO
        [ -e "$T/out.slr.partial/pack.json" ] && grep -q wait_for_partner "/proc/$pid/wchan" 2>/dev/null && break
        sleep 0.02
    done
    local t0=$(date +%s%N)
    kill -"$sig" "$pid"
    wait "$pid"
    ST=$?
    MS=$((($(date +%s%N) - t0) / 1000000))
    rm -f "$T/src/$FIFTIETH"
    cp "$T/keep.jpg" "$T/src/$FIFTIETH"
}

stop INT
[ "$ST" = 130 ] || fail "SIGINT: exit $ST, want 130 ($(cat "$ERR"))"
[ "$MS" -le 1000 ] || fail "SIGINT: stopped after $MS ms"
has "$ERR" "sluice pack: interrupted: 50 of 200 planned records are safe in $T/out.slr.partial"
has "$ERR" "continue the pack:      sluice pack $T/src $T/out.slr --shard-size 256K --jobs 1 --resume"
has "$ERR" "or keep those records:  sluice recover $T/out.slr.partial --out $T/out-salvaged.slr"
[ -e "$T/out.slr" ] && fail "an interrupted pack published $T/out.slr"

# recover only looks without --out
run 0 "$SLUICE" recover "$T/out.slr.partial"
has "$OUT" "50 of 200 records (200 as planned by the interrupted pack) complete; nothing written"
# a pack to the same DST says what is there and both ways on
run 1 "$SLUICE" pack "$T/src" "$T/out.slr" --shard-size 256K
has "$ERR" "out.slr.partial exists: an interrupted pack (50 of 200 planned records complete)"
has "$ERR" "continue it:          sluice pack $T/src $T/out.slr --shard-size 256K --resume"
# resumed with other options or inputs: refused, saying what differs, nothing touched
run 1 "$SLUICE" pack "$T/src" "$T/out.slr" --shard-size 512K --resume
has "$ERR" "written with shards of up to 262144 bytes, not 524288"
run 1 "$SLUICE" pack "$T/src" "$T/out.slr" --shard-size 256K --check decode --resume
has "$ERR" "another --check"
cp "$T/keep.jpg" "$T/src/class_00/extra.jpg"
run 1 "$SLUICE" pack "$T/src" "$T/out.slr" --shard-size 256K --resume
has "$ERR" "another number of inputs"
rm "$T/src/class_00/extra.jpg"
# salvage: marked, cut to the classes its 50 records reach
run 0 "$SLUICE" recover "$T/out.slr.partial" --out "$T/salv.slr"
has "$OUT" "salvaged 50 of 200 records (200 as planned by the interrupted pack) into $T/salv.slr"
run 0 "$SLUICE" verify "$T/salv.slr"
has "$OUT" "note: $T/salv.slr is salvaged from an interrupted pack (out.slr.partial): 50 of 200 planned records"
run 0 "$SLUICE" info "$T/salv.slr" --json
$PY - "$OUT" <<'PYEOF' || fail "info --json of the salvaged dataset"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["salvaged"] == {"records": 50, "planned": 200, "classes_planned": 5, "from": "out.slr.partial"}, d
assert d["classes"] == ["class_00", "class_01"], d["classes"]  # 40 a class: records 0..49
assert sorted(int(k) for k in d["label_counts"]) == [0, 1], d["label_counts"]
PYEOF
# continued: the clean pack, byte for byte
run 0 "$SLUICE" pack "$T/src" "$T/out.slr" --shard-size 256K --jobs 1 --resume
diff -r "$T/ref.slr" "$T/out.slr" >/dev/null || fail "the resumed pack differs from the clean one"
[ -e "$T/out.slr.partial" ] && fail "the resumed pack left $T/out.slr.partial"
rm -rf "$T/out.slr"

# SIGTERM: the same, exit 143; --json says so
stop TERM --json
[ "$ST" = 143 ] || fail "SIGTERM: exit $ST, want 143"
[ "$MS" -le 1000 ] || fail "SIGTERM: stopped after $MS ms"
$PY - "$OUT" "$T" <<'PYEOF' || fail "pack --json when interrupted"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] is False and d["interrupted"] is True, d
assert d["records"] == 50 and d["planned"] == 200, d
assert d["partial"] == sys.argv[2] + "/out.slr.partial", d
PYEOF
# resumed more than once, and with a resume when nothing is there
stop INT --resume
[ "$ST" = 130 ] || fail "the resume, interrupted: exit $ST"
has "$ERR" "interrupted: 50 of 200 planned records are safe"
run 0 "$SLUICE" pack "$T/src" "$T/out.slr" --shard-size 256K --jobs 2 --resume
diff -r "$T/ref.slr" "$T/out.slr" >/dev/null || fail "the twice-resumed pack differs from the clean one"
run 0 "$SLUICE" pack "$T/src" "$T/new.slr" --shard-size 256K --resume
has "$ERR" "no $T/new.slr.partial to continue: packing from the start"
diff -r "$T/ref.slr" "$T/new.slr" >/dev/null || fail "a resume with nothing to resume differs"
finish
