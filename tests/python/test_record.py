"""sluice.Writer / sluice.Reader: round trips, random access, damage, bad arguments."""
import os
import threading

import numpy as np
import pytest

import sluice
from conftest import image_of, write_slr


def test_round_trip_every_column_type(tmp_path):
    path = str(tmp_path / "all.slr")
    cols = [("id", "int64"), ("score", "float64"), ("name", "string"), ("blob", "bytes"),
            {"name": "img", "type": "array", "dtype": "float32", "shape": (2, 3), "zstd": True},
            ("var", "array", "int16", (-1,))]
    with sluice.Writer(path, cols, fsync=False) as w:
        w.set_meta("classes", '["a","b"]')
        for i in range(20):
            w.append({"id": i - 5, "score": i / 4, "name": f"n{i}\u00e9", "blob": bytes([i] * i),
                      "img": np.full((2, 3), i, np.float32), "var": list(range(i % 5))})
        assert w.count == 20
    r = sluice.Reader(path)
    assert len(r) == 20
    assert r.meta["classes"] == '["a","b"]'
    assert [c["name"] for c in r.columns] == ["id", "score", "name", "blob", "img", "var"]
    assert r.columns[4]["dtype"] == "float32" and r.columns[4]["shape"] == (2, 3)
    assert r.columns[4]["zstd"] is True
    for i in (0, 7, 19):
        rec = r[i]
        assert rec["id"] == i - 5
        assert rec["score"] == i / 4
        assert rec["name"] == f"n{i}\u00e9"
        assert rec["blob"] == bytes([i] * i)
        np.testing.assert_array_equal(rec["img"], np.full((2, 3), i, np.float32))
        assert rec["var"].dtype == np.int16
        np.testing.assert_array_equal(rec["var"], np.arange(i % 5))
    assert r[-1]["id"] == 14
    np.testing.assert_array_equal(r.index_column("id"), np.arange(20) - 5)
    assert r.verify() == 0


def test_record_values_are_copies(small_slr):
    r = sluice.Reader(small_slr)
    a = r[3]["image"]
    b = r[4]["image"]
    np.testing.assert_array_equal(a, image_of(3))
    np.testing.assert_array_equal(b, image_of(4))
    r.close()
    np.testing.assert_array_equal(a, image_of(3))  # outlives the reader


def test_sharded_dataset(tmp_path):
    path = write_slr(tmp_path / "sharded", 300, shard_bytes=64 * 1024)
    r = sluice.Reader(path)
    assert len(r) == 300
    assert len(r.shards) > 1
    for i in (0, 150, 299):
        np.testing.assert_array_equal(r[i]["image"], image_of(i))


def test_threads_read_concurrently(small_slr):
    r = sluice.Reader(small_slr)
    errors = []

    def work(k):
        try:
            for i in range(k, 100, 4):
                rec = r[i]
                assert rec["label"] == i % 10
                np.testing.assert_array_equal(rec["image"], image_of(i))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []


def test_writer_abort_publishes_nothing(tmp_path):
    path = tmp_path / "x.slr"
    with pytest.raises(RuntimeError):
        with sluice.Writer(str(path), [("label", "int64")], fsync=False) as w:
            w.append({"label": 1})
            raise RuntimeError("boom")
    assert not path.exists()
    assert os.listdir(tmp_path) == []


def test_missing_file_is_io_failure(tmp_path):
    missing = str(tmp_path / "nope.slr")
    with pytest.raises(sluice.IOFailure, match="nope.slr") as ei:
        sluice.Reader(missing)
    assert isinstance(ei.value, OSError)
    assert isinstance(ei.value, sluice.Error)
    assert ei.value.status == "SL_EIO"


def test_garbage_file_is_corrupt(tmp_path):
    p = tmp_path / "junk.slr"
    p.write_bytes(b"this is not a sluice file at all" * 10)
    with pytest.raises(sluice.CorruptError, match="junk.slr"):
        sluice.Reader(str(p))


def test_empty_file_is_corrupt(tmp_path):
    p = tmp_path / "empty.slr"
    p.write_bytes(b"")
    with pytest.raises(sluice.CorruptError, match="empty.slr"):
        sluice.Reader(str(p))


def test_truncated_file_is_corrupt(small_slr):
    data = open(small_slr, "rb").read()
    with open(small_slr, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(sluice.CorruptError, match="small.slr"):
        sluice.Reader(small_slr)


def flip_record_byte(path, record):
    """Flip one byte of a record's image payload, found by its known content."""
    data = bytearray(open(path, "rb").read())
    needle = image_of(record).tobytes()
    at = data.find(needle)
    assert at >= 0
    data[at + 100] ^= 0xFF
    with open(path, "wb") as f:
        f.write(data)


def test_damaged_record_names_file_and_record(small_slr):
    flip_record_byte(small_slr, 42)
    r = sluice.Reader(small_slr)
    assert r[41]["label"] == 1
    with pytest.raises(sluice.CorruptError) as ei:
        r[42]
    msg = str(ei.value)
    assert "small.slr" in msg and "42" in msg
    with pytest.raises(sluice.CorruptError, match="42"):
        r.verify()
    assert r.verify(keep_going=True) == 1
    # Without verification the (damaged) bytes are handed out as they are.
    assert sluice.Reader(small_slr, verify=False)[42]["label"] == 2


def test_bad_arguments(small_slr, tmp_path):
    with pytest.raises(TypeError):
        sluice.Reader(123)
    r = sluice.Reader(small_slr)
    with pytest.raises(TypeError, match="index"):
        r["x"]
    with pytest.raises(IndexError, match="out of range"):
        r[100]
    with pytest.raises(IndexError):
        r[-101]
    with pytest.raises(KeyError, match="nope"):
        r.index_column("nope")
    with pytest.raises(sluice.InvalidError):
        r.index_column("image")  # not a scalar column
    r.close()
    with pytest.raises(ValueError, match="closed"):
        len(r)
    with pytest.raises(ValueError, match=r"columns\[0\]"):
        sluice.Writer(str(tmp_path / "w.slr"), [("x", "complex")])
    with pytest.raises(ValueError, match=r"columns\[0\].*dtype"):
        sluice.Writer(str(tmp_path / "w.slr"), [("x", "array")])
    with pytest.raises(sluice.InvalidError, match="x"):
        sluice.Writer(str(tmp_path / "w.slr"), [("x", "int64"), ("x", "int64")])
    w = sluice.Writer(str(tmp_path / "w.slr"), [("n", "int64"), ("img", "array", "uint8", (2, 2))],
                      fsync=False)
    with pytest.raises(TypeError, match="'n'"):
        w.append({"n": "seven", "img": np.zeros((2, 2))})
    with pytest.raises(KeyError, match="img"):
        w.append({"n": 1, "x": 2})
    with pytest.raises(ValueError, match="2 columns"):
        w.append([1])
    with pytest.raises(sluice.InvalidError):
        w.append({"n": 1, "img": np.zeros((3, 3))})  # shape mismatch
    w.abort()
    with pytest.raises(ValueError, match="closed"):
        w.append({"n": 1, "img": np.zeros((2, 2))})


def test_exception_hierarchy():
    for cls in (sluice.OutOfMemory, sluice.InvalidError, sluice.IOFailure, sluice.CorruptError,
                sluice.UnsupportedError, sluice.DecodeError, sluice.LimitError,
                sluice.CanceledError):
        assert issubclass(cls, sluice.Error)
        assert cls.status.startswith("SL_E")
    assert issubclass(sluice.InvalidError, ValueError)
    assert issubclass(sluice.IOFailure, OSError)
    assert issubclass(sluice.OutOfMemory, MemoryError)
    assert sluice.CorruptError.code == -4


def _large_records(tmp_path, n=24, size=8192):
    """A .slr whose records average >= 4 KB: the pipeline reads them by copy
    (record_reader.c, copy_reads) rather than as views of the mapping."""
    path = str(tmp_path / "large.slr")
    cols = [{"name": "x", "type": "array", "dtype": "uint8", "shape": (size,)},
            ("label", "int64")]
    rows = [np.full(size, i, np.uint8) for i in range(n)]
    with sluice.Writer(path, cols, fsync=False) as w:
        for i, row in enumerate(rows):
            w.append({"x": row, "label": i})
    return path, rows


def test_copied_reads_name_the_damage_and_keep_the_good_records(tmp_path):
    path, rows = _large_records(tmp_path)
    # damage record 5's payload: its bytes are the value 5 repeated
    data = bytearray(open(path, "rb").read())
    at = data.find(bytes([5]) * 8192)
    assert at > 0
    data[at + 100] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(sluice.CorruptError, match=r"large\.slr: record 5: checksum mismatch"):
        for _ in sluice.records(path).batch(1).numpy():
            pass
    # skipping: every other record arrives, in order, with its own bytes,
    # the good record right after the bad one included
    ds = sluice.records(path).on_error("skip").batch(1)
    got = [(int(b["label"][0]), b["x"][0].copy()) for b in ds.numpy()]
    assert [g[0] for g in got] == [i for i in range(len(rows)) if i != 5]
    for i, x in got:
        np.testing.assert_array_equal(x, rows[i])
    assert ds.stats()["skipped"] == 1
