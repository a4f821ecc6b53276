#!/bin/sh
# Write the seed corpus of fuzz_parquet into OUT/parquet: files written by
# pyarrow (scripts/make_parquet.py seeds: every compression, dictionary and
# plain, pages v1 and v2, the delta and byte-stream-split encodings, nulls,
# a struct and lists), each followed by the target's two parameter bytes
# (fuzz/fuzz_parquet.c: verify, then a one-row-group cache), plus the same
# files cut short and with a footer byte flipped.
#   fuzz/make_parquet_corpus.sh OUT
set -eu
out=${1:?usage: make_parquet_corpus.sh OUT}
here=$(cd "$(dirname "$0")" && pwd)
py=$(bash "$here/../scripts/parquet_venv.sh")/bin/python
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
"$py" "$here/../scripts/make_parquet.py" seeds "$raw"
mkdir -p "$out/parquet"
/usr/bin/python3 - "$raw" "$out/parquet" <<'PY'
import os, sys
raw, out = sys.argv[1:3]
for k, name in enumerate(sorted(os.listdir(raw))):
    data = open(os.path.join(raw, name), "rb").read()
    base = os.path.splitext(name)[0]
    # the last byte is drawn first: verify, then small
    variants = {"": data + bytes([k % 2, 1]), "-cut": data[: len(data) * 2 // 3] + b"\x00\x01",
                "-flip": data[:-20] + bytes([data[-20] ^ 0x41]) + data[-19:] + b"\x01\x00"}
    for sfx, v in variants.items():
        with open(os.path.join(out, base + sfx), "wb") as f:
            f.write(v)
PY
echo "wrote $(ls "$out/parquet" | wc -l) seeds to $out/parquet"
