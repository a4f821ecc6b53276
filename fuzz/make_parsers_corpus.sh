#!/bin/sh
# Write the seed corpora of fuzz_idx, fuzz_spec and fuzz_manifest.
#   fuzz/make_parsers_corpus.sh [OUT_DIR]        (default: build/fuzz_corpus)
# Corpora go to OUT_DIR/idx, OUT_DIR/spec and OUT_DIR/manifest: valid inputs
# plus edge cases (empty, truncated, extra bytes, unsupported dtypes, bad
# gzip, hostile sizes, malformed JSON). Deterministic: the same files each
# run. Parameter bytes at the end of idx and manifest seeds are read by
# fuzz/fuzz_data_producer.h (last byte = first parameter drawn).
# Replay (gcc build):   BUILD/fuzz/fuzz_idx OUT_DIR/idx   (and so on)
# Fuzz (clang build):   BUILD/fuzz/fuzz_idx -max_total_time=60 COPY_OF_OUT_DIR_idx/
#   (fuzz/spec.dict and fuzz/manifest.dict help fuzz_spec and fuzz_manifest: -dict=...)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../build/fuzz_corpus}
mkdir -p "$out/idx" "$out/spec" "$out/manifest"
/usr/bin/python3 - "$out" <<'PY'
import gzip
import json
import os
import struct
import sys

out = sys.argv[1]
count = {"idx": 0, "spec": 0, "manifest": 0}


def emit(kind, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(out, kind, name), "wb") as f:
        f.write(data)
    count[kind] += 1


def params(*draws):
    """Trailing parameter bytes: draws = (value, nbytes) in the order the
    target draws them; each is consumed from the end, most significant
    byte first."""
    tail = b""
    for value, nbytes in draws:
        tail = value.to_bytes(nbytes, "little") + tail
    return tail


# ---- IDX ---------------------------------------------------------------
def idx(dims, body=None, dtype=0x08):
    n = 1
    for d in dims:
        n *= d
    if body is None:
        body = bytes((i * 37 + 11) & 0xff for i in range(n))
    return bytes([0, 0, dtype, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + body


def idx_params(split, wrap_img, wrap_lab, swap, shard, cut_img, cut_lab, cut=0):
    draws = [(split, 1), (wrap_img, 1), (wrap_lab, 1), (swap, 1)]
    if shard:
        draws += [(1, 1), (shard - 1, 2)]
    else:
        draws += [(0, 1)]
    draws += [(cut_img, 2), (cut_lab, 2)]
    if split:
        draws += [(cut, 2)]
    return params(*draws)


images = idx([6, 5, 4])
labels = idx([6], bytes([3, 1, 4, 1, 5, 9]))
for wi in range(3):
    for wl in range(3):
        emit("idx", "auto_w%d%d" % (wi, wl), images + idx_params(0, wi, wl, (wi + wl) & 1, 0, 40, 3))
emit("idx", "auto_sharded", images + idx_params(0, 1, 0, 0, 60, 0, 0))
emit("idx", "split_plain", images + labels + idx_params(1, 0, 0, 0, 0, 0, 0, len(images)))
emit("idx", "split_swapped_gz", labels + images + idx_params(1, 2, 1, 1, 0, 7, 2, len(labels)))
emit("idx", "split_sharded", images + labels + idx_params(1, 1, 1, 0, 100, 9, 9, len(images)))
emit("idx", "mnist_like_4", idx([4, 28, 28]) + idx_params(0, 1, 1, 0, 0, 500, 4))
emit("idx", "count0", idx([0, 3, 3]) + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "dims4", idx([2, 3, 2, 2]) + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "labels_only", idx([5]) + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "dtype_float", idx([2, 2, 2], b"\0" * 32, 0x0D) + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "dtype_bad", idx([2, 2], b"\0" * 4, 0x07) + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "ndim0", b"\0\0\x08\x00" + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "ndim10", b"\0\0\x08\x0a" + b"\0\0\0\x01" * 10 + b"\x07" + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "dim_zero", idx([2, 0, 3], b"") + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "truncated", images[:-5] + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "truncated_gz", images[:-5] + idx_params(0, 1, 0, 0, 0, 0, 0))
emit("idx", "extra_bytes", images + b"xyz" + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "extra_bytes_gz", images + b"xyz" + idx_params(0, 2, 0, 0, 0, 30, 0))
emit("idx", "header_cut", images[:9] + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "huge_count_gz", idx([0xFFFFFFFF, 2, 2], b"\1" * 64) + idx_params(0, 1, 0, 0, 0, 0, 0))
emit("idx", "huge_item", idx([1, 65536, 8193], b"") + idx_params(0, 1, 0, 0, 0, 0, 0))
emit("idx", "empty", b"")
emit("idx", "payload_gzip", gzip.compress(images, mtime=0) + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "payload_gzip_2members",
     gzip.compress(images[:20], mtime=0) + gzip.compress(images[20:], mtime=0) + idx_params(0, 0, 0, 0, 0, 0, 0))
bad = bytearray(gzip.compress(images, mtime=0))
bad[len(bad) // 2] ^= 0x55
emit("idx", "payload_gzip_damaged", bytes(bad) + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "payload_gzip_truncated", gzip.compress(images, mtime=0)[:-12] + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "gzip_then_junk", gzip.compress(images, mtime=0) + b"\0junk" + idx_params(0, 0, 0, 0, 0, 0, 0))
emit("idx", "count_mismatch", images + idx([5], b"\1" * 5) + idx_params(1, 0, 0, 0, 0, 0, 0, len(images)))
emit("idx", "two_image_files", images + images + idx_params(1, 0, 0, 0, 0, 0, 0, len(images)))

# ---- pipeline spec -----------------------------------------------------
ops_all = [
    {"op": "filter", "column": "label", "in": [1, 2]},
    {"op": "decode", "column": "image"},
    {"op": "random_resized_crop", "column": "image", "size": 8},
    {"op": "flip", "column": "image", "p": 0.5},
    {"op": "normalize", "column": "image", "mean": [0.485, 0.456, 0.406],
     "std": [0.229, 0.224, 0.225], "layout": "chw", "dtype": "float32"},
    {"op": "batch", "size": 3, "drop_remainder": False},
    {"op": "prefetch", "depth": 2},
]
specs = {
    "docs_example": {"source": {"path": "train.slr", "shuffle": True,
                                "shard": {"index": 0, "count": 2, "equal": "pad"}},
                     "ops": ops_all, "seed": 0, "epochs": 2, "on_error": "fail",
                     "deterministic": True},
    "skip_policy": {"source": "x.slr", "ops": [{"op": "decode"}, {"op": "batch", "size": 2}],
                    "on_error": "skip"},
    "fail_policy": {"source": "x.slr", "ops": [{"op": "decode", "mode": "gray"},
                                               {"op": "batch", "size": 4}]},
    "resize_crop": {"source": {"path": "x.slr"}, "ops": [
        {"op": "decode"}, {"op": "resize", "size": [10, 6], "interpolation": "area"},
        {"op": "center_crop", "size": 5}, {"op": "rotate", "degrees": [-20, 20], "fill": 3},
        {"op": "cast", "column": "image", "dtype": "float32"}, {"op": "batch", "size": 2}],
        "on_error": "skip", "seed": 7},
    "one_hot_select": {"source": {"path": "x.slr", "shuffle": True}, "ops": [
        {"op": "select", "columns": ["label", "score", "name"]},
        {"op": "one_hot", "column": "label", "classes": 3, "dtype": "float32"},
        {"op": "batch", "size": 3, "drop_remainder": True}], "epochs": 3},
    "stream_ops": {"source": "x.slr", "ops": [
        {"op": "repeat", "count": 2}, {"op": "shuffle_buffer", "size": 4},
        {"op": "skip", "count": 1}, {"op": "take", "count": 9},
        {"op": "batch", "size": 2}, {"op": "take", "count": 3}, {"op": "prefetch", "depth": 1}],
        "deterministic": False},
    "ragged_names": {"source": "x.slr", "ops": [{"op": "select", "columns": ["name"]},
                                                {"op": "batch", "size": 4}]},
    "no_batch": {"source": "x.slr", "ops": [{"op": "filter", "column": "score", "not_in": [0.5]}]},
    "memory": {"source": {"path": "mem", "parallel": 2, "chunk": 3, "shuffle": True}, "ops": [
        {"op": "flip", "p": 1.0, "parallel": "auto"},
        {"op": "normalize", "mean": [0.5], "std": [0.25], "layout": "hwc", "dtype": "float16"},
        {"op": "batch", "size": 3}]},
    "memory_rrc": {"source": "mem", "ops": [
        {"op": "random_resized_crop", "size": [4, 6], "scale": [0.2, 1.0], "ratio": [0.5, 2.0]},
        {"op": "batch", "size": 8}]},
    "shard_none": {"source": {"path": "x.slr", "shard": "none"}, "ops": []},
    "shard_drop": {"source": {"path": "x.slr", "shard": {"index": 2, "count": 3, "equal": "drop"}},
                   "ops": [{"op": "batch", "size": 1}]},
    "shard_env": {"source": {"path": "x.slr", "shard": "env"}},
    "heavy_batch": {"source": "x.slr", "ops": [{"op": "batch", "size": 100000}]},
    # a ragged batch dropped unfinished at the end of an epoch (its items
    # once leaked: batch_free counted them by size, still 0)
    "drop_remainder_ragged": {"source": "x.slr", "ops": [
        {"op": "shuffle_buffer", "size": 2}, {"op": "batch", "size": 3, "drop_remainder": True}]},
    "drop_remainder_ragged_skip": {"source": "x.slr", "ops": [
        {"op": "skip", "count": 0}, {"op": "batch", "size": 3, "drop_remainder": True}]},
}
for name, s in specs.items():
    emit("spec", name, json.dumps(s))
errors = {
    "err_not_json": "{\"source\": ",
    "err_not_object": "[1, 2, 3]",
    "err_no_source": "{\"ops\": []}",
    "err_unknown_key": "{\"source\": \"x.slr\", \"frobnicate\": 1}",
    "err_unknown_op": "{\"source\": \"x.slr\", \"ops\": [{\"op\": \"frobnicate\"}]}",
    "err_op_missing": "{\"source\": \"x.slr\", \"ops\": [{\"size\": 3}]}",
    "err_batch_zero": "{\"source\": \"x.slr\", \"ops\": [{\"op\": \"batch\", \"size\": 0}]}",
    "err_after_batch": "{\"source\": \"x.slr\", \"ops\": [{\"op\": \"batch\", \"size\": 2}, {\"op\": \"decode\"}]}",
    "err_shard_index": "{\"source\": {\"path\": \"x.slr\", \"shard\": {\"index\": 4, \"count\": 4}}}",
    "err_shard_type": "{\"source\": {\"path\": \"x.slr\", \"shard\": 3}}",
    "err_epochs": "{\"source\": \"x.slr\", \"epochs\": 0}",
    "err_seed": "{\"source\": \"x.slr\", \"seed\": -1.5}",
    "err_on_error": "{\"source\": \"x.slr\", \"on_error\": \"retry\"}",
    "err_column": "{\"source\": \"x.slr\", \"ops\": [{\"op\": \"decode\", \"column\": \"lable\"}]}",
    "err_param_type": "{\"source\": \"x.slr\", \"ops\": [{\"op\": \"flip\", \"p\": \"half\"}]}",
    "err_std_zero": "{\"source\": \"mem\", \"ops\": [{\"op\": \"normalize\", \"std\": [0]}]}",
    "err_repeat_twice": "{\"source\": \"x.slr\", \"ops\": [{\"op\": \"repeat\", \"count\": 2}, {\"op\": \"repeat\", \"count\": 2}]}",
    "err_map": "{\"source\": \"x.slr\", \"ops\": [{\"op\": \"map\", \"name\": \"f\"}]}",
    "err_parallel": "{\"source\": {\"path\": \"x.slr\", \"parallel\": 0}}",
    "err_dup_keys": "{\"source\": \"x.slr\", \"source\": {\"path\": \"y\"}, \"seed\": 1, \"seed\": 1e300}",
    "err_deep": "{\"source\": \"x.slr\", \"ops\": " + "[" * 200 + "]" * 200 + "}",
    "err_empty_key": "{\"\": 1, \"source\": \"x.slr\"}",
    "empty": "",
}
for name, s in errors.items():
    emit("spec", name, s)

# ---- manifest ----------------------------------------------------------
# Structured seeds (see fuzz_manifest.c): draws are flags (0-3), base
# (0: all shards, 1: extra.slr alone, 2: a prefix of the shards [+ its
# length]), the number of mutations (0-4), each mutation's choices, and
# pretty-printing. No mutation rebuilds a true manifest, which must open.
emit("manifest", "true_all", params((0, 1), (0, 1), (0, 1), (0, 1)))
emit("manifest", "true_all_nommap_noverify", params((3, 1), (0, 1), (0, 1), (1, 1)))
emit("manifest", "true_extra", params((0, 1), (1, 1), (0, 1), (0, 1)))
emit("manifest", "prefix_1", params((1, 1), (2, 1), (0, 1), (0, 1), (0, 1)))
emit("manifest", "prefix_2", params((2, 1), (2, 1), (1, 1), (0, 1), (1, 1)))
# one mutation each: kind k with a few choices after it
for k in range(8):
    for c in range(3):
        emit("manifest", "mut_%d_%d" % (k, c),
             params((0, 1), (0, 1), (1, 1), (k, 1), (c, 1), (c * 2 + 1, 1), (c, 1), (0, 1), (1, 1)))
for k in range(1, 9):
    emit("manifest", "random_%02d" % k, bytes([(k * 53 + i * 17) & 0xff for i in range(24)]))
raw = {
    "format": "sluice-dataset", "version": 1, "records": 10,
    "shards": [{"file": "shard-00000.slr", "first": 0, "records": 10, "bytes": 1000,
                "footer_checksum": "0123456789abcdef"}],
    "meta": {"source": "fuzz"},
}
emit("manifest", "raw_plausible", json.dumps(raw))
emit("manifest", "raw_minimal", "{}")
emit("manifest", "raw_not_json", "{\"format\": ")
emit("manifest", "raw_nul", b"{\"format\": \"sluice-dataset\"\0}")
emit("manifest", "raw_version2", json.dumps(dict(raw, version=2)))
emit("manifest", "raw_path_escape", json.dumps(dict(raw, shards=[dict(raw["shards"][0], file="../x")])))
emit("manifest", "raw_bad_checksum", json.dumps(dict(raw, shards=[dict(raw["shards"][0], footer_checksum="-123456789abcdef")])))
emit("manifest", "raw_meta_types", json.dumps(dict(raw, meta={"a": 1, "": "x"})))
# a shard of a few KB said to hold 50,000,001 records: refused at open, by
# the manifest's own byte count, or, with that raised to match, by the file's
# size (before, every phantom record was read and failed one by one: a timeout)
phantom = dict(raw["shards"][0], records=50000001, bytes=32768)
emit("manifest", "raw_phantom_records", json.dumps(dict(raw, records=50000001, shards=[phantom])))
emit("manifest", "raw_phantom_records_bytes",
     json.dumps(dict(raw, records=50000001, shards=[dict(phantom, bytes=3000000000)])))
print("wrote %d idx, %d spec, %d manifest seeds to %s" % (count["idx"], count["spec"], count["manifest"], out))
PY
