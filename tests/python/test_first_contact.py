"""What a new user meets first (issue 23, the Python items): pack never
replaces what is at its output unless told to, a reader given another
format names the call that reads it, to_json() refuses what `sluice run`
cannot run, text columns reach Python as str, and pack names the kind of
its input as the command does.

Inputs are written here: JPEGs by PIL, tar shards by Python's tarfile, IDX
files by numpy + gzip, TFRecord frames by hand (framing from the TFRecord
format, checksums by the crc32c module, the tf.train.Example encoded by hand
from its .proto).

Run: PYTHONPATH=build/python SLUICE_BIN=build/sluice /usr/bin/python3 -m pytest \
        tests/python/test_first_contact.py
"""
import io
import json
import os
import struct
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import sluice

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import write_idx, write_slr  # noqa: E402

Image = pytest.importorskip("PIL.Image")


def jpeg(i, w=8, h=6):
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (i * 37 % 256, 80, 200)).save(buf, format="JPEG")
    return buf.getvalue()


def image_folder(root, names=None):
    """ROOT/CLASS/FILE; file names of different lengths (so `path` is ragged
    within a batch unless told otherwise). Returns the relative paths in
    torchvision's order."""
    names = names or {"cat": ["a.jpg", "bb.jpg"], "dog": ["ccc.jpg", "d.jpg", "eeeee.jpg"]}
    out = []
    for i, cls in enumerate(sorted(names)):
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for name in names[cls]:
            with open(os.path.join(os.fsencode(root), os.fsencode(cls), os.fsencode(name)),
                      "wb") as f:
                f.write(jpeg(i + len(out)))
            out.append(cls + "/" + name)
    return sorted(out)


def tar_shard(path, n=3):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for i in range(n):
            for ext, data in (("cls", b"%d" % (i % 2)), ("jpg", jpeg(i)),
                              ("txt", ("caption %d" % i).encode())):
                info = tarfile.TarInfo("sample%03d.%s" % (i, ext))
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return str(path)


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def ld(field, payload):  # a length-delimited protobuf field
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def example(label, image):
    """tf.train.Example{features{feature{"label": int64_list}, {"image": bytes_list}}}."""
    feats = ld(1, ld(1, b"label") + ld(2, ld(3, ld(1, varint(label)))))
    feats += ld(1, ld(1, b"image") + ld(2, ld(1, ld(1, image))))
    return ld(1, feats)


def tfrecord(path, n=4):
    crc32c = pytest.importorskip("crc32c")

    def masked(data):
        c = crc32c.crc32c(data)
        return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    with open(path, "wb") as f:
        for i in range(n):
            payload = example(i % 3, jpeg(i))
            head = struct.pack("<Q", len(payload))
            f.write(head + struct.pack("<I", masked(head)) + payload +
                    struct.pack("<I", masked(payload)))
    return str(path)


def sluice_bin():
    for p in (os.environ.get("SLUICE_BIN"), os.path.join(REPO, "build", "sluice")):
        if p and os.access(p, os.X_OK):
            return p
    pytest.skip("the sluice command is not built (set SLUICE_BIN)")


# ---- 1: pack never replaces what is at dst unless force=True --------------------

def test_pack_refuses_an_existing_file(tmp_path):
    root = tmp_path / "train"
    image_folder(str(root))
    dst = tmp_path / "notes.slr"
    dst.write_text("other data\n")
    with pytest.raises(FileExistsError) as e:
        sluice.pack(str(root), str(dst))
    assert "force=True" in str(e.value) and str(dst) in str(e.value)
    assert dst.read_text() == "other data\n"
    # a symlink counts as something there, even a dangling one
    link = tmp_path / "link.slr"
    os.symlink(tmp_path / "nowhere", link)
    with pytest.raises(FileExistsError):
        sluice.pack(str(root), link)
    assert os.path.islink(link) and not os.path.exists(link)

    rep = sluice.pack(str(root), dst, force=True)
    assert rep["records"] == 5
    assert len(sluice.Reader(str(dst))) == 5

    # what an interrupted pack left is not cleared, force or not
    partial = tmp_path / "new.slr.partial"
    os.makedirs(partial)
    (partial / "shard-00000.slr").write_bytes(b"records worth salvaging")
    for force in (False, True):
        with pytest.raises(FileExistsError, match="sluice recover"):
            sluice.pack(str(root), str(tmp_path / "new.slr"), force=force)
    assert (partial / "shard-00000.slr").read_bytes() == b"records worth salvaging"


def test_pack_force_replaces_a_dataset_directory_only(tmp_path):
    root = tmp_path / "train"
    image_folder(str(root))
    # a sharded dataset (a directory) at dst: replaced with force=True
    old = write_slr(tmp_path / "out.slr", 300, shard_bytes=64 * 1024)
    assert os.path.isdir(old) and len(sluice.Reader(old).shards) > 1
    with pytest.raises(FileExistsError):
        sluice.pack(str(root), old)
    assert len(sluice.Reader(old)) == 300
    sluice.pack(str(root), old, force=True)
    assert os.path.isfile(old) and len(sluice.Reader(old)) == 5
    assert not os.path.exists(old + ".replaced")

    # a failed pack puts the old dataset back
    old = write_slr(tmp_path / "keep.slr", 300, shard_bytes=64 * 1024)
    bad = tmp_path / "bad"
    os.makedirs(bad / "x")
    (bad / "x" / "a.jpg").write_bytes(b"not an image")
    with pytest.raises(sluice.Error):
        sluice.pack(str(bad), old, force=True)
    assert os.path.isdir(old) and len(sluice.Reader(old)) == 300
    assert not os.path.exists(old + ".replaced")

    # a directory that is not a dataset is never replaced
    other = tmp_path / "photos"
    os.makedirs(other)
    (other / "keep.txt").write_text("mine")
    with pytest.raises(IsADirectoryError):
        sluice.pack(str(root), str(other), force=True)
    assert (other / "keep.txt").read_text() == "mine"


# ---- 5: a reader given another format names the call that reads it ---------------

def wrong_reader(ds):
    with pytest.raises(sluice.InvalidError) as e:
        list(ds)
    return str(e.value)


def test_records_on_an_image_folder_names_image_folder(tmp_path):
    root = str(tmp_path / "train")
    image_folder(root)
    msg = wrong_reader(sluice.records(root))
    assert "ImageFolder" in msg and f"sluice.image_folder({root!r})" in msg, msg
    assert "manifest.json" not in msg


def test_records_on_foreign_files_names_their_call(tmp_path):
    tf = tfrecord(tmp_path / "train.tfrecord")
    msg = wrong_reader(sluice.records(tf))
    assert "TFRecord" in msg and f"sluice.tfrecord({tf!r})" in msg, msg
    assert "bad magic" not in msg
    shard = tar_shard(tmp_path / "shard-000.tar")
    msg = wrong_reader(sluice.records(shard))
    assert f"sluice.webdataset({shard!r})" in msg, msg
    images = write_idx(tmp_path / "images-idx3-ubyte.gz", np.zeros((4, 5, 5), np.uint8))
    msg = wrong_reader(sluice.records(images))
    assert "sluice.idx(images, labels)" in msg, msg
    # and the other way round: tfrecord() / image_folder() on a .slr
    slr = write_slr(tmp_path / "d.slr", 3)
    assert f"sluice.records({slr!r})" in wrong_reader(sluice.tfrecord(slr))
    assert f"sluice.records({slr!r})" in wrong_reader(sluice.webdataset(slr))


def test_reader_errors_that_are_not_about_the_format_stay(tmp_path):
    # a missing path, and a damaged .slr, keep the engine's own message
    with pytest.raises(sluice.IOFailure, match="No such file"):
        list(sluice.records(str(tmp_path / "missing.slr")))
    slr = write_slr(tmp_path / "d.slr", 3)
    with open(slr, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        f.write(b"\0" * 8)
    with pytest.raises(sluice.Error) as e:
        list(sluice.records(slr))
    assert "sluice." not in str(e.value)


# ---- 8: to_json() refuses a spec `sluice run` cannot run --------------------------

def test_to_json_refuses_a_python_map(tmp_path):
    slr = write_slr(tmp_path / "d.slr", 8)

    def brighten(s):
        return {"image": s["image"] + 1}

    ds = sluice.records(slr).shuffle(seed=1).map(brighten).batch(4)
    with pytest.raises(TypeError, match=r"ops\[0\] is a Python \.map\(.*brighten\)"):
        ds.to_json()
    # the same chain without the map is a spec the command runs
    spec = tmp_path / "spec.json"
    spec.write_text(sluice.records(slr).shuffle(seed=1).batch(4).to_json())
    r = subprocess.run([sluice_bin(), "run", str(spec), "--digest"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # and the Dataset with the map still runs from Python
    assert sum(len(b["label"]) for b in ds) == 8


# ---- 14: text columns reach Python as str ------------------------------------------

def test_image_folder_path_is_str(tmp_path):
    root = str(tmp_path / "train")
    paths = image_folder(root)
    # ragged lengths within a batch, and equal lengths (stacked by the engine)
    for ds in (sluice.image_folder(root).batch(3), sluice.image_folder(root).batch(5)):
        got = [p for b in ds for p in b["path"]]
        assert got == paths and all(type(p) is str for p in got)
    same = str(tmp_path / "same")
    same_paths = image_folder(same, {"a": ["x1.jpg", "x2.jpg"], "b": ["y1.jpg"]})
    b = next(iter(sluice.image_folder(same).batch(3)))
    assert b["path"] == same_paths
    # torch: a list of str beside the tensors
    torch = pytest.importorskip("torch")
    for b in sluice.image_folder(root).decode().resize("image", [4, 4]).batch(5).torch():
        assert b["path"] == paths and isinstance(b["image"], torch.Tensor)
        assert b["image"].shape == (5, 4, 4, 3)
    # without a batch op: one str per sample
    assert [s["path"] for s in sluice.image_folder(root)] == paths
    # packed into .slr, the string column stays text
    slr = str(tmp_path / "f.slr")
    sluice.pack(root, slr)
    assert [p for b in sluice.records(slr).batch(2) for p in b["path"]] == paths


def test_path_that_is_not_utf8_names_its_file(tmp_path):
    root = str(tmp_path / "train")
    raw = b"caf\xe9.jpg"          # Latin-1 bytes: not UTF-8
    os.makedirs(os.path.join(root, "a"))
    with open(os.path.join(os.fsencode(root), b"a", raw), "wb") as f:
        f.write(jpeg(1))
    (b,) = list(sluice.image_folder(root).batch(1))
    (p,) = b["path"]
    assert os.fsencode(p) == b"a/" + raw
    assert os.path.exists(os.path.join(root, p))


def test_webdataset_text_members_are_str(tmp_path):
    shard = tar_shard(tmp_path / "s.tar")
    (b,) = list(sluice.webdataset(shard).batch(3))
    assert b["__key__"] == ["sample000", "sample001", "sample002"]
    assert b["txt"] == ["caption 0", "caption 1", "caption 2"]
    assert b["cls"].tolist() == [0, 1, 0]


def test_a_text_column_an_op_rewrites_is_no_longer_text(tmp_path):
    # cast turns the path's bytes into numbers: those come as arrays, not str
    root = str(tmp_path / "train")
    paths = image_folder(root)
    b = next(iter(sluice.image_folder(root).cast("path", "float32").batch(5)))
    assert isinstance(b["path"], list)
    for got, want in zip(b["path"], paths):
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        assert got.tolist() == list(want.encode())


# ---- 15: pack names the input's kind as the command does --------------------------

def test_pack_kind_matches_the_cli(tmp_path):
    inputs = {"webdataset": [tar_shard(tmp_path / "s.tar")],
              "tfrecord": [tfrecord(tmp_path / "t.tfrecord")]}
    root = str(tmp_path / "train")
    image_folder(root)
    inputs["imagefolder"] = [root]
    imgs = write_idx(tmp_path / "i-idx3-ubyte.gz", np.zeros((3, 4, 4), np.uint8))
    labs = write_idx(tmp_path / "l-idx1-ubyte.gz", np.arange(3, dtype=np.uint8))
    inputs["idx"] = [imgs, labs]
    inputs["slr"] = [write_slr(tmp_path / "d.slr", 3)]
    for want, srcs in inputs.items():
        rep = sluice.pack(srcs, str(tmp_path / f"py-{want}.slr"))
        r = subprocess.run([sluice_bin(), "pack", *srcs, str(tmp_path / f"cli-{want}.slr"),
                            "--json"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, SLUICE_NO_PROGRESS="1"))
        assert r.returncode == 0, r.stderr
        assert rep["kind"] == json.loads(r.stdout)["kind"] == want
