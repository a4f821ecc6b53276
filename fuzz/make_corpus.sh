#!/bin/sh
# Write the seed corpora of the fuzz targets.
#   fuzz/make_corpus.sh BUILD_DIR [OUT_DIR]
# BUILD_DIR was configured with -DSLUICE_BUILD_FUZZ=ON and built; corpora go to
# OUT_DIR/<target> (default BUILD_DIR/fuzz_corpus). Then, for example:
#   BUILD_DIR/fuzz/fuzz_record BUILD_DIR/fuzz_corpus/record          (gcc: replay)
#   BUILD_DIR/fuzz/fuzz_record -max_total_time=600 CORPUS_COPY/       (clang: fuzz)
set -eu
build=${1:?usage: make_corpus.sh BUILD_DIR [OUT_DIR]}
out=${2:-$build/fuzz_corpus}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/record"
"$build/fuzz/corpus_record" "$out/record"
echo "wrote $(ls "$out/record" | wc -l) seeds to $out/record"
mkdir -p "$out/state"
"$build/fuzz/corpus_state" "$out/state"
if [ -f "$here/make_decode_corpus.py" ]; then
  # with the damage tool (built with the tools), JPEGs with corrupt entropy data too
  if [ -x "$build/sluice_jpeg_damage" ]; then
    /usr/bin/python3 "$here/make_decode_corpus.py" --damage "$build/sluice_jpeg_damage" "$out/decode"
  else
    echo "make_corpus.sh: no $build/sluice_jpeg_damage: decode corpus without corrupt entropy data" >&2
    /usr/bin/python3 "$here/make_decode_corpus.py" "$out/decode"
  fi
fi
if [ -f "$here/make_parsers_corpus.sh" ]; then
  sh "$here/make_parsers_corpus.sh" "$out"
fi
if [ -f "$here/make_tar_corpus.sh" ]; then
  sh "$here/make_tar_corpus.sh" "$out"
fi
if [ -f "$here/make_s3_corpus.sh" ]; then
  sh "$here/make_s3_corpus.sh" "$out"
fi
if [ -f "$here/make_tfrecord_corpus.py" ]; then
  /usr/bin/python3 "$here/make_tfrecord_corpus.py" "$out/tfrecord"
fi
if [ -f "$here/make_parquet_corpus.sh" ]; then
  sh "$here/make_parquet_corpus.sh" "$out"
fi
