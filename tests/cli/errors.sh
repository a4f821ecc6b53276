#!/usr/bin/env bash
# The CLI on bad input: usage errors (exit 2), missing and damaged files
# (exit 1, one line naming file, record and cause), damage found by verify,
# and recover of a truncated partial write.
. "$(dirname "$0")/common.bash"

# a small IDX dataset to work on
$PY - "$T/img" "$T/lab" <<'PYEOF'
import struct, sys
n = 300
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 10, 10) + bytes((i * 31 + k * 7) & 255 for i in range(n) for k in range(100)))
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PYEOF
run 0 "$SLUICE" pack "$T/img" "$T/lab" "$T/d.slr"

# ---- usage errors: exit 2 -------------------------------------------------------
run 2 "$SLUICE"
run 2 "$SLUICE" frobnicate
has "$ERR" "unknown command"
run 0 "$SLUICE" --help
has "$OUT" "scan"
for c in pack info verify cat recover scan; do
    run 0 "$SLUICE" "$c" --help
    has "$OUT" "usage: sluice $c"
    has "$OUT" "exit status"
    run 2 "$SLUICE" "$c" --bogus-option
    has "$ERR" "unknown option '--bogus-option'"
    has "$ERR" "sluice $c --help"
done
run 2 "$SLUICE" pack
run 2 "$SLUICE" pack "$T/img"
has "$ERR" "missing the output path"
run 2 "$SLUICE" pack "$T/img" "$T/lab" "$T/x.slr" --jobs zero
run 2 "$SLUICE" pack "$T/img" "$T/lab" "$T/x.slr" --jobs
has "$ERR" "--jobs needs a value"
run 2 "$SLUICE" pack "$T/img" "$T/lab" "$T/x.slr" --shard-size 12Q
run 2 "$SLUICE" info
run 2 "$SLUICE" verify
run 2 "$SLUICE" cat "$T/d.slr"
has "$ERR" "missing --index"
run 2 "$SLUICE" cat "$T/d.slr" --index -3 --column label
run 2 "$SLUICE" cat "$T/d.slr" --index 1
has "$ERR" "image, label"
run 2 "$SLUICE" recover
run 2 "$SLUICE" scan
run 2 "$SLUICE" scan "$T/d.slr" --threads 0
run 2 "$SLUICE" scan "$T/d.slr" --seconds -1

# ---- failures: exit 1, one line naming the file -----------------------------------
run 1 "$SLUICE" pack /nonexistent/in "$T/x.slr"
has "$ERR" "/nonexistent/in"
one_line "$ERR"
echo "hello" >"$T/notes.txt"
run 1 "$SLUICE" pack "$T/notes.txt" "$T/x.slr"
has "$ERR" "notes.txt"
has "$ERR" "ImageFolder"
: >"$T/empty"
run 1 "$SLUICE" pack "$T/empty" "$T/lab" "$T/x.slr"
has "$ERR" "empty file"
# counts that disagree
$PY -c 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack(">II",0x801,299)+bytes(299))' "$T/lab299"
run 1 "$SLUICE" pack "$T/img" "$T/lab299" "$T/x.slr"
has "$ERR" "300 images"
has "$ERR" "299 labels"
one_line "$ERR"
# an IDX header that disagrees with the file's length
head -c 20000 "$T/img" >"$T/img-short"
run 1 "$SLUICE" pack "$T/img-short" "$T/lab" "$T/x.slr"
has "$ERR" "img-short: truncated"
one_line "$ERR"
# a truncated gzip
gzip -c "$T/img" >"$T/img.gz"
head -c $(($(stat -c %s "$T/img.gz") / 2)) "$T/img.gz" >"$T/img-cut.gz"
run 1 "$SLUICE" pack "$T/img-cut.gz" "$T/lab" "$T/x.slr"
has "$ERR" "img-cut.gz"
has "$ERR" "truncated"
# wrong IDX dtype (int32)
$PY -c 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack(">IIII",0x0C03,1,2,2)+bytes(16))' "$T/img-i32"
run 1 "$SLUICE" pack "$T/img-i32" "$T/lab" "$T/x.slr"
has "$ERR" "int32 is not supported"
[ -e "$T/x.slr" ] && fail "a failed pack left $T/x.slr"

for c in info verify scan; do
    run 1 "$SLUICE" "$c" /nonexistent/d.slr
    has "$ERR" "/nonexistent/d.slr"
done
run 1 "$SLUICE" info "$T/notes.txt"
has "$ERR" "notes.txt"
run 1 "$SLUICE" cat "$T/d.slr" --index 300 --column label
has "$ERR" "index 300 is out of range"
has "$ERR" "300 records"
run 1 "$SLUICE" cat "$T/d.slr" --index 0 --column pixels
has "$ERR" "no column 'pixels'"
has "$ERR" "its columns are: label, image"   # closest to 'pixels' first
one_line "$ERR"

# ---- verify of a damaged file: exit 1 naming the record -----------------------------
"$SLUICE" cat "$T/d.slr" --index 123 --column image >"$T/rec123" || fail "cat record 123"
cp "$T/d.slr" "$T/bad.slr"
$PY - "$T/bad.slr" "$T/rec123" <<'PYEOF' || fail "could not find record 123's bytes"
import sys
data = bytearray(open(sys.argv[1], "rb").read())
rec = open(sys.argv[2], "rb").read()
at = data.find(rec)
assert at > 0 and data.find(rec, at + 1) < 0
data[at + 50] ^= 0x01
open(sys.argv[1], "wb").write(data)
PYEOF
run 1 "$SLUICE" verify "$T/bad.slr"
has "$ERR" "1 of 300 records damaged"
has "$ERR" "record 123"
has "$ERR" "bad.slr"
run 1 "$SLUICE" verify --json "$T/bad.slr"
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is False and d["bad"]==1 and d["records"]==300 and "record 123" in d["errors"][0], d' \
    "$OUT" || fail "verify --json on damage"
run 1 "$SLUICE" cat "$T/bad.slr" --index 123 --column image
has "$ERR" "record 123"
has "$ERR" "sluice verify"
run 0 "$SLUICE" cat "$T/bad.slr" --index 122 --column label
run 1 "$SLUICE" scan "$T/bad.slr"
has "$ERR" "record 123"

# ---- a dataset directory: damaged shards are found by verify, not at open ----------
run 0 "$SLUICE" pack "$T/img" "$T/lab" "$T/dir.slr" --shard-size 8K
[ -f "$T/dir.slr/shard-00004.slr" ] || fail "pack --shard-size 8K made fewer than 5 shards"
$PY - "$T/dir.slr" <<'PYEOF' || fail "could not damage two shards"
import sys
d = sys.argv[1]
p = d + "/shard-00001.slr"; b = bytearray(open(p, "rb").read()); b[-20] ^= 0x40; open(p, "wb").write(b)
p = d + "/shard-00003.slr"; b = open(p, "rb").read(); open(p, "wb").write(b[:-100])
PYEOF
run 0 "$SLUICE" info "$T/dir.slr"      # planned from the manifest: no shard opened
has "$OUT" "300"
run 1 "$SLUICE" verify "$T/dir.slr"
has "$ERR" "shard-00001.slr: records "
has "$ERR" "footer checksum mismatch"
has "$ERR" "shard-00003.slr: records "
has "$ERR" "truncated or unfinished"
run 0 "$SLUICE" cat "$T/dir.slr" --index 0 --column label   # shard 0 reads
run 1 "$SLUICE" scan "$T/dir.slr"
has "$ERR" "shard-00001.slr: record "

# ---- recover a truncated partial write ----------------------------------------------
# A writer's partial shard is header + records without index or footer: cut a
# finished file inside its records to make one.
mkdir "$T/p.slr.partial"
size=$(stat -c %s "$T/d.slr")
head -c $((size * 6 / 10)) "$T/d.slr" >"$T/p.slr.partial/shard-00000.slr.partial"
# without --out it only says what can be salvaged, and writes nothing
run 0 "$SLUICE" recover "$T/p.slr.partial"
has "$OUT" "records (how many the interrupted write planned is not known: it left no plan) complete; nothing written"
[ -e "$T/p.slr" ] && fail "recover without --out wrote $T/p.slr"
run 0 "$SLUICE" recover "$T/p.slr.partial" --out "$T/p.slr"
has "$OUT" "salvaged "
has "$OUT" "is marked as salvaged"
[ -f "$T/p.slr" ] || fail "recover did not write $T/p.slr"
kept=$(sed -n 's/^salvaged \([0-9]*\) records.*/\1/p' "$OUT")
[ "${kept:-0}" -gt 100 ] && [ "$kept" -lt 300 ] || fail "kept '$kept' records, want 100..299"
run 0 "$SLUICE" verify "$T/p.slr"
has "$OUT" "$kept records"
has "$OUT" "note: $T/p.slr is salvaged from an interrupted pack (p.slr.partial): $kept records"
# the records kept are the first ones, unchanged
"$SLUICE" cat "$T/p.slr" -i $((kept - 1)) -c image >"$T/r1" || fail "cat recovered"
"$SLUICE" cat "$T/d.slr" -i $((kept - 1)) -c image >"$T/r2"
cmp -s "$T/r1" "$T/r2" || fail "recovered record differs"
# again: the output exists now
run 1 "$SLUICE" recover "$T/p.slr.partial" --out "$T/p.slr"
has "$ERR" "already exists"
run 0 "$SLUICE" recover "$T/p.slr.partial/shard-00000.slr.partial" -o "$T/q.slr"
# nothing salvageable
head -c 10 "$T/d.slr" >"$T/junk.partial"
run 1 "$SLUICE" recover "$T/junk.partial" -o "$T/j.slr"
[ -e "$T/j.slr" ] && fail "recover of junk left $T/j.slr"
run 1 "$SLUICE" recover /nonexistent/x.partial
finish
