#!/usr/bin/env python3
"""Parquet files written by the reference writers, for sluice's tests, fuzz
seeds and benchmarks. Run with the Python of scripts/parquet_venv.sh (pyarrow,
datasets):

  make_parquet.py matrix OUT        pyarrow: every compression and encoding,
                                    dictionary on/off, data pages v1/v2, row
                                    groups of 1 / 100 / 10,000 rows, nulls,
                                    struct and list columns, page index and
                                    page CRCs on/off; beside each FILE.parquet
                                    FILE.npz, every value pyarrow's read_table
                                    gives, keyed by sluice's column names; and
                                    the types of Hugging Face datasets
                                    (types-*.parquet: lists of strings, lists
                                    of lists, DECIMAL, INT96, maps) with
                                    FILE.json, pyarrow's values per row
  make_parquet.py hf OUT IMAGES     datasets: an Image + ClassLabel dataset of
                                    the ImageFolder IMAGES (ROOT/CLASS/IMG),
                                    written with to_parquet (OUT/hf.parquet)
                                    and as push_to_hub's shards
                                    (OUT/data/train-0000K-of-0000N.parquet)
  make_parquet.py seeds OUT         small files for the fuzz corpus

Everything is deterministic: the same command writes the same files.
"""
import io
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

COMPRESSIONS = ["NONE", "SNAPPY", "GZIP", "ZSTD", "LZ4", "BROTLI"]


def table(n, seed=0):
    """Every column kind sluice reads, with nulls where a column may hold them."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64)
    words = ["", "a", "sluice", "parquet", "données", "x" * 40]
    s = [None if i % 7 == 3 else words[i % len(words)] + str(i // 3) for i in range(n)]
    b = [None if i % 11 == 5 else bytes(rng.integers(0, 256, int(i % 23), dtype=np.uint8))
         for i in range(n)]
    tokens = [None if i % 13 == 4 else list(range(i % 5, i % 5 + (i % 9))) for i in range(n)]
    boxes = [[float(i), float(i) / 2, -1.5, 1e30][: i % 5] for i in range(n)]
    f64 = [None if i % 5 == 2 else float(i) * 0.25 - 7 for i in range(n)]
    st = [{"x": int(i * 3), "y": None if i % 6 == 1 else f"y{i}"} for i in range(n)]
    return pa.table({
        "id": pa.array(ids),
        "i8": pa.array((ids % 200 - 100).astype(np.int8)),
        "i16": pa.array((ids * 37 % 60000 - 30000).astype(np.int16)),
        "i32": pa.array((ids * 7919 - 1000000).astype(np.int32)),
        "f32": pa.array(rng.standard_normal(n).astype(np.float32)),
        "f64": pa.array(f64, pa.float64()),
        "flag": pa.array([bool(i % 3) for i in range(n)]),
        "s": pa.array(s, pa.string()),
        "b": pa.array(b, pa.binary()),
        "date": pa.array((ids % 3000).astype(np.int32), pa.int32()).cast(pa.date32()),
        "ts": pa.array(ids * 1_000_003, pa.int64()).cast(pa.timestamp("us")),
        "fixed": pa.array([bytes([i % 256, 1, 2, (i * 7) % 256]) for i in range(n)], pa.binary(4)),
        "tokens": pa.array(tokens, pa.list_(pa.int64())),
        "boxes": pa.array(boxes, pa.list_(pa.float32())),
        "st": pa.array(st, pa.struct([("x", pa.int32()), ("y", pa.string())])),
    })


def flat(col, name, out):
    """One pyarrow column into npz arrays under sluice's column name."""
    t = col.type
    valid = np.array(col.is_valid().to_pylist(), dtype=bool)
    out[name + "@valid"] = valid
    if pa.types.is_list(t):
        vals, offs, holed = [], [0], []
        for v in col.to_pylist():
            vals.extend(0 if x is None else x for x in v or [])
            offs.append(len(vals))
            holed.append(v is not None and None in v)  # a null element: the row fails
        out[name + "@holed"] = np.array(holed, dtype=bool)
        dt = np.int64 if pa.types.is_integer(t.value_type) else np.float32
        out[name] = np.array(vals, dtype=dt)
        out[name + "@off"] = np.array(offs, dtype=np.int64)
    elif pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t):
        data, offs = bytearray(), [0]
        for v in col.to_pylist():
            if v is not None:
                data += v.encode() if isinstance(v, str) else v
            offs.append(len(data))
        out[name] = np.frombuffer(bytes(data), dtype=np.uint8)
        out[name + "@off"] = np.array(offs, dtype=np.int64)
    elif pa.types.is_boolean(t):
        out[name] = np.array([bool(v) for v in col.to_pylist()], dtype=np.uint8)
    elif pa.types.is_floating(t):
        out[name] = np.array([np.nan if v is None else v for v in col.to_pylist()],
                             dtype=np.float32 if t == pa.float32() else np.float64)
    else:  # integers, dates, timestamps: as stored
        if pa.types.is_date32(t):
            col = col.cast(pa.int32())
        elif pa.types.is_timestamp(t):
            col = col.cast(pa.int64())
        out[name] = np.array([0 if v is None else v for v in col.to_pylist()], dtype=np.int64)


def expected(path):
    """Every value pyarrow's read_table gives, keyed by sluice's names."""
    tab = pq.read_table(path)
    out = {}
    for name in tab.column_names:
        col = tab.column(name).combine_chunks()
        if pa.types.is_struct(col.type):
            for k in range(col.type.num_fields):
                flat(pc.struct_field(col, [k]), f"{name}.{col.type.field(k).name}", out)
        else:
            flat(col, name, out)
    np.savez(os.path.splitext(path)[0] + ".npz", **out)


def types_table(n):
    """The column types Hugging Face datasets hold beyond table(): lists of
    strings, lists of lists (boxes), DECIMAL at several precisions, INT96
    timestamps (write with use_deprecated_int96_timestamps), a map."""
    from decimal import Decimal
    words = ["cat", "", "chien", "x" * 30, "é"]
    tags = [None if i % 11 == 6 else [words[(i + k) % 5] + str(k) for k in range(i % 4)]
            for i in range(n)]
    boxes = [[[float(i), i + 0.5, 2.25 * k, -1.0] for k in range(i % 3)] for i in range(n)]
    grid = [None if i % 9 == 4 else [[i * 10 + k * 3 + j for j in range(3)] for k in range(2)]
            for i in range(n)]
    price = [None if i % 8 == 7 else Decimal(i * 1237 - 50000).scaleb(-2) for i in range(n)]
    qty = [Decimal(i * 99991 - 3000000) for i in range(n)]
    wide = [Decimal((i * 7919 + 1) * 10 ** 20 + i).scaleb(-10) * (-1) ** i for i in range(n)]
    huge = [Decimal(10 ** 17 + i * 123456789) * (-1) ** i for i in range(n)]
    ts = pa.array([1_600_000_000_000_000_000 + i * 1_000_000_007 for i in range(n)],
                  pa.timestamp("ns"))
    old = pa.array([-5_000_000_000_000_000_000 + i * 3_600_000_000_123 for i in range(n)],
                   pa.timestamp("ns"))  # 1811: before 1970, days below the epoch's
    m = [[(f"k{j}", i * 10 + j) for j in range(i % 3)] for i in range(n)]
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "tags": pa.array(tags, pa.list_(pa.string())),
        "boxes": pa.array(boxes, pa.list_(pa.list_(pa.float32()))),
        "grid": pa.array(grid, pa.list_(pa.list_(pa.int64()))),
        "price": pa.array(price, pa.decimal128(10, 2)),
        "qty": pa.array(qty, pa.decimal128(9, 0)),
        "wide": pa.array(wide, pa.decimal128(38, 10)),
        "huge": pa.array(huge, pa.decimal128(18, 0)),
        "ts": ts,
        "old": old,
        "m": pa.array(m, pa.map_(pa.string(), pa.int64())),
    })


def types_expected(path):
    """pyarrow's values of a types-*.parquet file per sluice column, one
    entry a row (JSON: floats as their exact repr, DECIMAL of scale 0 as
    integers, others as the decimal rounded to a double; timestamps as int64
    nanoseconds; a map as its keys (bytes and lengths) and its values)."""
    import json
    tab = pq.read_table(path)
    out = {}
    for name in tab.column_names:
        col = tab.column(name).combine_chunks()
        t = col.type
        vals = col.to_pylist()
        if pa.types.is_map(t):
            keys = [[k for k, _ in v or []] for v in vals]
            out[name + ".key"] = ["".join(k).encode().hex() for k in keys]
            out[name + ".key.lengths"] = [[len(x.encode()) for x in k] for k in keys]
            out[name + ".value"] = [[x for _, x in v or []] for v in vals]
        elif pa.types.is_list(t) and pa.types.is_string(t.value_type):
            out[name] = ["".join(v or []).encode().hex() for v in vals]
            out[name + ".lengths"] = [[len(x.encode()) for x in v or []] for v in vals]
        elif pa.types.is_list(t):
            out[name] = [v or [] for v in vals]
        elif pa.types.is_decimal(t):
            out[name] = [None if v is None else int(v) if t.scale == 0 else float(v)
                         for v in vals]
        elif pa.types.is_timestamp(t):
            out[name] = col.cast(pa.int64()).to_pylist()
        else:
            out[name] = vals
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump(out, f)


def write(out, name, tab, **kw):
    path = os.path.join(out, name + ".parquet")
    pq.write_table(tab, path, **kw)
    expected(path)


def matrix(out):
    os.makedirs(out, exist_ok=True)
    t = table(300)
    for comp in COMPRESSIONS:
        c = comp.lower()
        write(out, f"{c}-dict-v1", t, compression=comp, use_dictionary=True,
              data_page_version="1.0", row_group_size=100, write_page_checksum=True)
        write(out, f"{c}-plain-v2", t, compression=comp, use_dictionary=False,
              data_page_version="2.0", row_group_size=100, write_page_index=True)
    enc = {"id": "DELTA_BINARY_PACKED", "i32": "DELTA_BINARY_PACKED", "ts": "DELTA_BINARY_PACKED",
           "s": "DELTA_LENGTH_BYTE_ARRAY", "b": "DELTA_BYTE_ARRAY", "f32": "BYTE_STREAM_SPLIT",
           "f64": "BYTE_STREAM_SPLIT", "i16": "BYTE_STREAM_SPLIT", "fixed": "BYTE_STREAM_SPLIT",
           "flag": "RLE"}
    for v in ("1.0", "2.0"):
        write(out, f"encodings-v{v[0]}", t, compression="SNAPPY", use_dictionary=False,
              column_encoding=enc, data_page_version=v, row_group_size=128,
              write_page_checksum=True, data_page_size=700)
    # small pages: many pages per chunk, dictionary fallback to plain mid-chunk
    write(out, "small-pages", t, compression="ZSTD", use_dictionary=True, data_page_size=256,
          dictionary_pagesize_limit=512, row_group_size=300, write_page_checksum=True,
          write_page_index=True)
    big = table(10000, seed=1)
    for rg in (1, 100, 10000):
        write(out, f"rows-{rg}", big, compression="SNAPPY", row_group_size=rg,
              write_page_index=rg == 100)
    # random access by pages: row groups of many pages, the page index on and off
    for on in (True, False):
        write(out, "page-index-" + ("on" if on else "off"), big, compression="SNAPPY",
              row_group_size=2500, data_page_size=2048, write_page_index=on,
              use_dictionary=["s"])  # others plain: about 10 pages a chunk
    # integers with nulls (a null fails its row), a list with null elements
    nulls = pa.table({
        "n": pa.array([None if i % 4 == 1 else i for i in range(40)], pa.int64()),
        "v": pa.array([[1, None] if i % 10 == 3 else [i] for i in range(40)], pa.list_(pa.int64())),
        "k": pa.array(np.arange(40, dtype=np.int64)),
        "u32": pa.array((np.arange(40) * 2654435761 % (1 << 32)).astype(np.uint32)),
    })
    write(out, "nulls", nulls, row_group_size=16)
    # Hugging Face datasets' other types: DECIMAL in FIXED_LEN_BYTE_ARRAY (pyarrow's
    # default) and in INT32 / INT64, INT96 timestamps, dictionary and plain
    ty = types_table(500)
    for name, kw in (("types-flba", dict(use_dictionary=True)),
                     ("types-int", dict(store_decimal_as_integer=True, use_dictionary=False,
                                        data_page_version="2.0", compression="ZSTD"))):
        path = os.path.join(out, name + ".parquet")
        pq.write_table(ty, path, row_group_size=128, use_deprecated_int96_timestamps=True,
                       write_page_index=True, **kw)
        types_expected(path)
    # what still fails: a row of inner lists of different lengths, a null
    # inner list, a list of lists of strings, a DECIMAL wider than 38 digits
    from decimal import Decimal
    pq.write_table(pa.table({
        "k": pa.array(np.arange(6, dtype=np.int64)),
        "grid": pa.array([[[1, 2], [3, 4]], [[1, 2], [3]], [[5]], [], None, [[7, 8]]],
                         pa.list_(pa.list_(pa.int64()))),
        "holed": pa.array([[[1]], [[2]], [[3]], [[1], None], [[4]], [[5], [6]]],
                          pa.list_(pa.list_(pa.int64()))),
        "words": pa.array([[["a"]]] * 6, pa.list_(pa.list_(pa.string()))),
        "d256": pa.array([Decimal(i) for i in range(6)], pa.decimal256(40, 2)),
    }), os.path.join(out, "types-refused.parquet"), row_group_size=4)


def hf(out, images):
    """An Image + ClassLabel dataset the way `datasets` writes one."""
    import datasets
    datasets.disable_progress_bars()
    classes = sorted(d for d in os.listdir(images) if os.path.isdir(os.path.join(images, d)))
    rows = {"image": [], "label": []}
    exts = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
    for li, c in enumerate(classes):
        files = []
        for root, _, names in os.walk(os.path.join(images, c), followlinks=True):
            files += [os.path.join(root, f) for f in names if f.lower().endswith(exts)]
        for f in sorted(files):
            with open(f, "rb") as fh:
                rows["image"].append({"bytes": fh.read(), "path": os.path.relpath(f, images)})
            rows["label"].append(li)
    feats = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes)})
    ds = datasets.Dataset.from_dict(rows, features=feats)
    os.makedirs(os.path.join(out, "data"), exist_ok=True)
    ds.to_parquet(os.path.join(out, "hf.parquet"))
    # push_to_hub's layout: data/train-0000K-of-0000N.parquet, contiguous shards
    n = 2
    for k in range(n):
        ds.shard(num_shards=n, index=k, contiguous=True).to_parquet(
            os.path.join(out, "data", f"train-{k:05d}-of-{n:05d}.parquet"))


def seeds(out):
    os.makedirs(out, exist_ok=True)
    t = table(12)
    k = 0
    for comp in COMPRESSIONS:
        for dict_, v in ((True, "1.0"), (False, "2.0")):
            buf = io.BytesIO()
            pq.write_table(t, buf, compression=comp, use_dictionary=dict_, data_page_version=v,
                           row_group_size=5, write_page_checksum=dict_)
            with open(os.path.join(out, f"seed-{k:02d}.parquet"), "wb") as f:
                f.write(buf.getvalue())
            k += 1
    buf = io.BytesIO()
    pq.write_table(t, buf, use_dictionary=False, column_encoding={
        "id": "DELTA_BINARY_PACKED", "s": "DELTA_LENGTH_BYTE_ARRAY", "b": "DELTA_BYTE_ARRAY",
        "f32": "BYTE_STREAM_SPLIT", "flag": "RLE"}, data_page_version="2.0")
    with open(os.path.join(out, f"seed-{k:02d}.parquet"), "wb") as f:
        f.write(buf.getvalue())
    buf = io.BytesIO()
    pq.write_table(types_table(12), buf, row_group_size=5, use_deprecated_int96_timestamps=True,
                   write_page_index=True, write_page_checksum=True)
    with open(os.path.join(out, f"seed-{k + 1:02d}.parquet"), "wb") as f:
        f.write(buf.getvalue())


def main(argv):
    if len(argv) < 3 or argv[1] not in ("matrix", "hf", "seeds"):
        sys.exit(__doc__)
    if argv[1] == "matrix":
        matrix(argv[2])
    elif argv[1] == "hf":
        hf(argv[2], argv[3])
    else:
        seeds(argv[2])


if __name__ == "__main__":
    main(sys.argv)
