#!/bin/sh
# Write the seed corpus of fuzz_tar: WebDataset shards made by GNU tar.
#   fuzz/make_tar_corpus.sh [OUT_DIR]        (default: build/fuzz_corpus)
# Seeds go to OUT_DIR/tar: the gnu, posix (pax) and ustar formats, names over
# 100 bytes, nested directories, --sort=name, and damaged copies (a bad
# checksum, a truncation, a pax record with a bad length, a base-256 size).
# Blocking factor 1 keeps each seed small. Deterministic apart from the
# member mtimes tar records.
# Replay (gcc build):   BUILD/fuzz/fuzz_tar OUT_DIR/tar
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../build/fuzz_corpus}
mkdir -p "$out/tar"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-tar-corpus-XXXXXX")
trap 'rm -rf "$work"' EXIT
src=$work/src
long=dir_with_a_long_name_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
mkdir -p "$src/a/b" "$src/$long"
for i in 0 1 2; do
  printf '\377\330\377\340JFIF-ish %s' "$i" > "$src/a/b/s$i.jpg"
  printf '%s\n' "$i" > "$src/a/b/s$i.cls"
  printf '{"i": %s}' "$i" > "$src/a/b/s$i.json"
  printf 'caption %s' "$i" > "$src/a/b/s$i.txt"
done
printf 'x' > "$src/$long/k.seg.png"
printf ' 7 ' > "$src/$long/k.cls"
printf 'bad' > "$src/a/b/s9.cls"
printf 'hidden' > "$src/a/b/.hidden"
list="a/b/s0.jpg a/b/s0.cls a/b/s0.json a/b/s0.txt a/b/s1.jpg a/b/s1.cls a/b/s1.json a/b/s1.txt $long/k.seg.png $long/k.cls a/b/s2.jpg a/b/s2.cls"
for fmt in gnu posix ustar v7; do
  # (ustar and v7 cannot hold the long name: tar skips it with a warning)
  (cd "$src" && tar --format=$fmt -b 1 -cf "$out/tar/$fmt.tar" $list 2>/dev/null) || true
done
(cd "$src" && tar --format=gnu --sort=name -b 1 -cf "$out/tar/sorted.tar" a)
(cd "$src" && tar --format=gnu -b 1 -cf "$out/tar/bad_members.tar" a/b/s0.jpg a/b/.hidden a/b/s9.cls a/b/s0.cls a/b/s1.jpg)
/usr/bin/python3 - "$out/tar" <<'PY'
import os
import sys

out = sys.argv[1]


def load(name):
    with open(os.path.join(out, name), "rb") as f:
        return bytearray(f.read())


def emit(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes(data))


def checksum(h):
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h[:512])


gnu, pax = load("gnu.tar"), load("posix.tar")
d = bytearray(gnu)
d[512 * 2 + 3] ^= 0x20
emit("bad_checksum.tar", d)
emit("truncated_data.tar", gnu[:512 * 3 + 7])
emit("truncated_header.tar", gnu[:512 * 2 + 100])
emit("empty.tar", b"")
emit("not_a_tar.tar", b"\xff\xd8\xff\xe0" + b"\0" * 600)
emit("zero_blocks.tar", b"\0" * 1024)
i = pax.find(b"mtime=")
d = bytearray(pax)
d[i - 3:i - 1] = b"99"
emit("pax_bad_length.tar", d)
# base-256 size on the first member
d = bytearray(gnu[:1024 * 2])
d[124:136] = b"\x80" + b"\0" * 7 + (int(gnu[124:135], 8)).to_bytes(4, "big")
checksum(d)
emit("base256.tar", d)
# a global pax header setting path, then the plain members
g = b"19 path=g/x.bin.gz\n"
h = bytearray(512)
h[0:17] = b"pax_global_header"
h[124:136] = b"%011o\0" % len(g)
h[156:157] = b"g"
h[257:265] = b"ustar\x0000"
checksum(h)
emit("global_pax.tar", h + g + b"\0" * (512 - len(g)) + gnu)
PY
echo "wrote $(ls "$out/tar" | wc -l) seeds to $out/tar"
