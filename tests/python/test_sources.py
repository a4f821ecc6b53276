"""The foreign sources (TFRecord, WebDataset tar, ImageFolder, IDX) from Python.

Every input is written here at test time by third-party code: TFRecords by
Google's protobuf runtime (src/source/tf_example.proto compiled with
`protoc --python_out`) framed with the crc32c module, tar shards by GNU tar
(--format=gnu and --format=posix), JPEGs by PIL, IDX files by numpy + gzip.
Expected values come from what these writers were given, never from sluice.

Run: PYTHONPATH=build/python SLUICE_BIN=build/sluice /usr/bin/python3 -m pytest \
        tests/python/test_sources.py
"""
import gzip
import io
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import sluice

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO = os.path.join(REPO, "src", "source", "tf_example.proto")

crc32c = pytest.importorskip("crc32c")
pytest.importorskip("google.protobuf")
Image = pytest.importorskip("PIL.Image")
if not shutil.which("protoc") or not shutil.which("tar"):
    pytest.skip("protoc and GNU tar are needed", allow_module_level=True)


def sluice_bin():
    for p in (os.environ.get("SLUICE_BIN"), os.path.join(REPO, "build", "sluice")):
        if p and os.access(p, os.X_OK):
            return p
    pytest.skip("the sluice command is not built (set SLUICE_BIN)")


def run_cli(*args, ok=True):
    r = subprocess.run([sluice_bin()] + [str(a) for a in args], capture_output=True, text=True,
                       env=dict(os.environ, SLUICE_NO_PROGRESS="1"), timeout=60)
    if ok:
        assert r.returncode == 0, (args, r.returncode, r.stderr)
    return r


def info_json(path, *extra):
    return json.loads(run_cli("info", path, "--json", *extra).stdout)


# ---- writers ---------------------------------------------------------------

def jpeg_bytes(i, w, h):
    """A real JPEG from PIL with content that depends on i."""
    yy, xx = np.mgrid[0:h, 0:w]
    arr = np.stack([(xx * 9 + i * 31) % 256, (yy * 7 + i * 11) % 256, (xx * yy + i) % 256],
                   axis=-1).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(arr, "RGB").save(out, "JPEG", quality=90)
    return out.getvalue()


def size_of(i):
    return 24 + (i * 7) % 17, 20 + (i * 5) % 13


def tf_messages(tmp):
    """tf_example_pb2, compiled from the repository's .proto by protoc."""
    subprocess.check_call(["protoc", "--proto_path=" + os.path.dirname(PROTO),
                           "--python_out=" + str(tmp), os.path.basename(PROTO)])
    sys.path.insert(0, str(tmp))
    try:
        import tf_example_pb2
    finally:
        sys.path.remove(str(tmp))
    return tf_example_pb2


def masked_crc(data):
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tf_frame(payload):
    head = struct.pack("<Q", len(payload))
    return head + struct.pack("<I", masked_crc(head)) + payload + struct.pack("<I", masked_crc(payload))


def f32(x):
    return float(np.float32(x))


TF_COUNTS = (9, 6)     # records per TFRecord file


def tf_record_values(i):
    w, h = size_of(i)
    return {
        "image/encoded": jpeg_bytes(i, w, h),
        "image/class/label": (i * 7) % 5,
        "image/filename": ("img_%03d.jpg" % i).encode(),
        "weight": f32(0.25 * i - 1.0),
        "ids": [i * 100 + k for k in range(i % 3)],   # ragged int64, sometimes empty
    }


def write_tfrecords(pb, directory):
    """Two TFRecord files of tf.train.Examples; returns (paths, rows, frames)
    where frames[f] lists (offset, length) of each record's frame."""
    paths, rows, frames = [], [], []
    i = 0
    for f, n in enumerate(TF_COUNTS):
        blobs, spans, pos = [], [], 0
        for _ in range(n):
            v = tf_record_values(i)
            ex = pb.Example()
            feat = ex.features.feature
            feat["image/encoded"].bytes_list.value.append(v["image/encoded"])
            feat["image/class/label"].int64_list.value.append(v["image/class/label"])
            feat["image/filename"].bytes_list.value.append(v["image/filename"])
            feat["weight"].float_list.value.append(v["weight"])
            feat["ids"].int64_list.value.extend(v["ids"])
            b = tf_frame(ex.SerializeToString())
            blobs.append(b)
            spans.append((pos, len(b)))
            pos += len(b)
            rows.append(v)
            i += 1
        p = os.path.join(directory, "part-%d.tfrecord" % f)
        with open(p, "wb") as fh:
            fh.write(b"".join(blobs))
        paths.append(p)
        frames.append(spans)
    return paths, rows, frames


SHARD_COUNTS = (7, 4, 2)   # samples per tar shard: unequal on purpose
SHARD_FORMATS = ("gnu", "posix", "gnu")


def cls_text(label, i):
    return "%d\n" % label if i % 2 else "%d" % label   # with and without a newline


def write_shards(directory, counts=SHARD_COUNTS, formats=SHARD_FORMATS, name="shard",
                 bad_cls=None):
    """WebDataset shards written by GNU tar. Returns (paths, samples) with one
    dict per sample: key, jpg bytes, cls int, json text. With bad_cls=(shard,
    sample) that sample's .cls holds text that is not a number."""
    src = os.path.join(directory, name + "-src")
    paths, samples = [], []
    i = 0
    for s, n in enumerate(counts):
        members = []
        for j in range(n):
            key = "s%d/sample%04d" % (s, i)
            w, h = size_of(i + 50)
            label = (i * 3) % 4
            text = json.dumps({"i": i})
            files = {"jpg": jpeg_bytes(i + 50, w, h), "cls": cls_text(label, i).encode(),
                     "json": text.encode()}
            if bad_cls == (s, j):
                files["cls"] = b"seven\n"
            for ext in ("jpg", "cls", "json"):   # tar keeps this member order
                rel = key + "." + ext
                os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
                with open(os.path.join(src, rel), "wb") as fh:
                    fh.write(files[ext])
                members.append(rel)
            samples.append({"key": key, "jpg": files["jpg"], "cls": label, "json": text,
                            "bad": bad_cls == (s, j)})
            i += 1
        path = os.path.join(directory, "%s-%03d.tar" % (name, s))
        listfile = path + ".list"
        with open(listfile, "w") as fh:
            fh.write("".join(m + "\n" for m in members))
        subprocess.run(["tar", "--format=" + formats[s], "--no-recursion", "-cf", path,
                        "-C", src, "-T", listfile], check=True)
        os.unlink(listfile)
        paths.append(path)
    return paths, samples


FOLDER_CLASSES = ("bird", "cat", "dog")


def write_image_folder(root):
    """A torchvision ImageFolder; returns the samples in torchvision's order
    (classes sorted, files sorted within a class)."""
    out = []
    i = 0
    for c, cls in enumerate(FOLDER_CLASSES):
        os.makedirs(os.path.join(root, cls))
        names = ["img_%02d.jpg" % k for k in (5, 1, 3, 0)[: 2 + c]]
        for name in names:
            w, h = size_of(i + 90)
            data = jpeg_bytes(i + 90, w, h)
            with open(os.path.join(root, cls, name), "wb") as fh:
                fh.write(data)
            out.append({"path": cls + "/" + name, "label": c, "image": data})
            i += 1
    out.sort(key=lambda s: s["path"])
    return out


def write_idx_pair(directory, n=23):
    images = ((np.arange(n * 12 * 10).reshape(n, 12, 10) * 5 + 3) % 256).astype(np.uint8)
    labels = (np.arange(n) * 7 % 10).astype(np.uint8)
    paths = []
    for name, arr in (("images-idx3-ubyte.gz", images), ("labels-idx1-ubyte.gz", labels)):
        header = struct.pack(">I", 0x0800 | arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
        p = os.path.join(directory, name)
        with gzip.open(p, "wb") as fh:
            fh.write(header + arr.tobytes())
        paths.append(p)
    return paths[0], paths[1], images, labels


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("sources")
    pb = tf_messages(d)
    ns = {}
    ns["tf"], ns["tf_rows"], ns["tf_frames"] = write_tfrecords(pb, str(d))
    ns["pb"] = pb
    ns["shards"], ns["samples"] = write_shards(str(d))
    ns["folder"] = str(d / "folder")
    ns["folder_samples"] = write_image_folder(ns["folder"])
    ns["idx_images"], ns["idx_labels"], ns["idx_x"], ns["idx_y"] = write_idx_pair(str(d))
    ns["dir"] = str(d)
    return ns


def all_samples(ds):
    """Every sample of one pass of an unbatched Dataset, as dicts of numpy
    (text columns stay str)."""
    return [{k: v if isinstance(v, str) else np.array(v) for k, v in b.items()} for b in ds]


def key_text(v):
    """A text column is a str; a TFRecord bytes feature holding text is bytes."""
    return v if isinstance(v, str) else bytes(np.asarray(v, dtype=np.uint8)).decode()


# ---- contracts: columns, types, values, order --------------------------------

def test_tfrecord_columns_values_and_file_order(data):
    ds = sluice.tfrecord(data["tf"])
    assert ds.columns == ["ids", "image/class/label", "image/encoded", "image/filename", "weight"]
    got = all_samples(ds)
    rows = data["tf_rows"]
    assert len(got) == sum(TF_COUNTS) == len(rows)
    for g, want in zip(got, rows):   # files in the order given, records in file order
        assert g["image/encoded"].tobytes() == want["image/encoded"]
        assert g["image/class/label"].dtype == np.int64 and g["image/class/label"].shape == ()
        assert int(g["image/class/label"]) == want["image/class/label"]
        assert g["image/filename"].tobytes() == want["image/filename"]
        assert g["weight"].dtype == np.float32 and float(g["weight"]) == want["weight"]
        assert g["ids"].dtype == np.int64 and g["ids"].tolist() == want["ids"]
    # the files in the other order: the second file's records first
    rev = all_samples(sluice.tfrecord(data["tf"][::-1]))
    assert [int(g["image/class/label"]) for g in rev] == \
        [r["image/class/label"] for r in rows[TF_COUNTS[0]:] + rows[:TF_COUNTS[0]]]
    assert rev[0]["image/filename"].tobytes() == rows[TF_COUNTS[0]]["image/filename"]


def test_tfrecord_features_rename(data):
    ds = sluice.tfrecord(data["tf"], features={"image/encoded": "image",
                                               "image/class/label": "label"})
    assert sorted(ds.columns) == ["image", "label"]
    got = all_samples(ds)
    assert [g["image"].tobytes() for g in got] == [r["image/encoded"] for r in data["tf_rows"]]
    assert [int(g["label"]) for g in got] == [r["image/class/label"] for r in data["tf_rows"]]


def test_webdataset_columns_by_extension(data):
    pattern = os.path.join(data["dir"], "shard-{000..002}.tar")
    ds = sluice.webdataset(pattern)
    assert ds.columns == ["__key__", "cls", "jpg", "json"]
    got = all_samples(ds)
    want = data["samples"]
    assert len(got) == sum(SHARD_COUNTS)
    for g, w in zip(got, want):   # shards in pattern order, samples in tar order
        assert key_text(g["__key__"]) == w["key"]
        assert g["jpg"].tobytes() == w["jpg"]
        assert g["cls"].dtype == np.int64 and int(g["cls"]) == w["cls"]
        assert g["json"] == w["json"]
    # a list in another order reads in that order
    got = all_samples(sluice.webdataset([data["shards"][2], data["shards"][0]]))
    keys = [key_text(g["__key__"]) for g in got]
    assert keys == [w["key"] for w in want[SHARD_COUNTS[0] + SHARD_COUNTS[1]:]] + \
        [w["key"] for w in want[:SHARD_COUNTS[0]]]
    # columns= keeps only those extensions
    assert sluice.webdataset(data["shards"], columns=["jpg", "cls"]).columns == \
        ["__key__", "cls", "jpg"]


def test_image_folder_columns(data):
    ds = sluice.image_folder(data["folder"])
    assert ds.columns == ["image", "label", "path"]
    got = all_samples(ds)
    want = data["folder_samples"]
    assert [key_text(g["path"]) for g in got] == [w["path"] for w in want]
    assert [int(g["label"]) for g in got] == [w["label"] for w in want]
    assert all(g["image"].tobytes() == w["image"] for g, w in zip(got, want))


def test_idx_columns(data):
    ds = sluice.idx(data["idx_images"], data["idx_labels"])
    assert ds.columns == ["image", "label"]
    got = all_samples(ds)
    x, y = data["idx_x"], data["idx_y"]
    assert len(got) == len(y)
    for i, g in enumerate(got):
        assert g["image"].dtype == np.uint8 and g["image"].shape == (12, 10)
        assert np.array_equal(g["image"], x[i])
        assert g["label"].dtype == np.int64 and int(g["label"]) == y[i]


# ---- pack contracts -------------------------------------------------------------

def test_pack_tfrecord_one_column_per_feature(data, tmp_path):
    dst = tmp_path / "tf.slr"
    run_cli("pack", *data["tf"], dst)
    info = info_json(dst)
    assert info["records"] == sum(TF_COUNTS)
    cols = {c["name"]: c for c in info["columns"]}
    assert set(cols) == {"ids", "image/class/label", "image/encoded", "image/filename", "weight"}
    assert cols["image/encoded"]["type"] == "bytes"
    assert cols["image/filename"]["type"] == "bytes"
    assert cols["image/class/label"]["type"] == "int64"
    assert cols["ids"]["type"] == "array" and cols["ids"]["dtype"] == "int64"
    assert cols["ids"]["shape"] == [-1]
    # records in file order, values as written
    got = all_samples(sluice.records(str(dst)))
    for g, w in zip(got, data["tf_rows"]):
        assert g["image/encoded"].tobytes() == w["image/encoded"]
        assert int(g["image/class/label"]) == w["image/class/label"]
        assert g["ids"].tolist() == w["ids"]
        assert float(g["weight"]) == w["weight"]


def test_pack_tfrecord_float_feature_is_float32(data, tmp_path):
    """The contract: float_list -> float32 (a one-value float feature too)."""
    dst = tmp_path / "w.slr"
    run_cli("pack", *data["tf"], dst, "--features", "weight")
    col = info_json(dst)["columns"][0]
    assert col["name"] == "weight"
    assert col.get("dtype") == "float32", col
    assert col.get("shape") == [], col
    got = all_samples(sluice.records(str(dst)))
    assert all(g["weight"].dtype == np.float32 for g in got)
    assert [float(g["weight"]) for g in got] == [r["weight"] for r in data["tf_rows"]]


def test_pack_tfrecord_features_rename(data, tmp_path):
    dst = tmp_path / "r.slr"
    run_cli("pack", *data["tf"], dst, "--features", "image/encoded=image,image/class/label=label")
    info = info_json(dst)
    assert sorted((c["name"], c["type"]) for c in info["columns"]) == \
        [("image", "bytes"), ("label", "int64")]
    got = all_samples(sluice.records(str(dst)))
    assert [int(g["label"]) for g in got] == [r["image/class/label"] for r in data["tf_rows"]]


def test_pack_webdataset_one_column_per_extension(data, tmp_path):
    dst = tmp_path / "wds.slr"
    run_cli("pack", os.path.join(data["dir"], "shard-{000..002}.tar"), dst)
    info = info_json(dst)
    assert info["records"] == sum(SHARD_COUNTS)
    cols = {c["name"]: c["type"] for c in info["columns"]}
    assert cols["jpg"] == "bytes" and cols["cls"] == "int64"
    assert "json" in cols
    got = all_samples(sluice.records(str(dst)))
    assert [int(g["cls"]) for g in got] == [s["cls"] for s in data["samples"]]
    assert [g["jpg"].tobytes() for g in got] == [s["jpg"] for s in data["samples"]]
    assert [g["json"] for g in got] == [s["json"] for s in data["samples"]]


def test_info_json_records(data):
    assert info_json(data["tf"][0])["records"] == TF_COUNTS[0]
    for path, n in zip(data["shards"], SHARD_COUNTS):
        assert info_json(path)["records"] == n


# ---- the training chain: any source == the .slr packed from it -------------------

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def train_chain(ds, image, shuffle):
    if shuffle:
        ds = ds.shuffle(seed=11)
    return (ds.decode(image).random_resized_crop(image, 16, scale=(0.3, 1.0)).flip(image)
            .normalize(image, mean=MEAN, std=STD).batch(4))


def batches(ds, epoch=0):
    ds.set_epoch(epoch)
    out = []
    for b in ds:
        out.append({k: [x if isinstance(x, str) else np.array(x) for x in v]
                    if isinstance(v, list) else np.array(v) for k, v in b.items()})
    return out


def assert_same_batches(a, b):
    assert len(a) == len(b) and len(a) > 0
    for x, y in zip(a, b):
        assert sorted(x) == sorted(y)
        for k in x:
            if isinstance(x[k], list):
                assert isinstance(y[k], list) and len(x[k]) == len(y[k]), k
                assert all(np.array_equal(p, q) for p, q in zip(x[k], y[k])), k
            else:
                assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
                assert np.array_equal(x[k], y[k]), k


def packed(tmp_path, name, *args):
    dst = tmp_path / name
    run_cli("pack", *args, dst)
    return sluice.records(str(dst))


@pytest.mark.parametrize("shuffle", [False, True])
def test_chain_tfrecord_equals_packed(data, tmp_path, shuffle):
    feats = {"image/encoded": "image", "image/class/label": "label"}
    direct = train_chain(sluice.tfrecord(data["tf"], features=feats), "image", shuffle)
    slr = train_chain(packed(tmp_path, "t.slr", *data["tf"], "--features",
                             "image/encoded=image,image/class/label=label"), "image", shuffle)
    for epoch in (0, 1):
        a, b = batches(direct, epoch), batches(slr, epoch)
        assert_same_batches(a, b)
        assert a[0]["image"].shape == (4, 3, 16, 16) and a[0]["image"].dtype == np.float32
    labels = [v for bt in batches(direct) for v in bt["label"].tolist()]
    want = [r["image/class/label"] for r in data["tf_rows"]]
    assert (labels == want) != shuffle and sorted(labels) == sorted(want)


@pytest.mark.parametrize("shuffle", [False, True])
def test_chain_webdataset_equals_packed(data, tmp_path, shuffle):
    direct = train_chain(sluice.webdataset(data["shards"], columns=["jpg", "cls"])
                         .select("jpg", "cls"), "jpg", shuffle)
    slr = train_chain(packed(tmp_path, "w.slr", *data["shards"]).select("jpg", "cls"), "jpg",
                      shuffle)
    assert_same_batches(batches(direct), batches(slr))
    labels = [v for bt in batches(direct) for v in bt["cls"].tolist()]
    want = [s["cls"] for s in data["samples"]]
    assert (labels == want) != shuffle and sorted(labels) == sorted(want)


@pytest.mark.parametrize("shuffle", [False, True])
def test_chain_image_folder_equals_packed(data, tmp_path, shuffle):
    direct = train_chain(sluice.image_folder(data["folder"]), "image", shuffle)
    slr = train_chain(packed(tmp_path, "f.slr", data["folder"]), "image", shuffle)
    assert_same_batches(batches(direct), batches(slr))
    labels = [v for bt in batches(direct) for v in bt["label"].tolist()]
    want = [s["label"] for s in data["folder_samples"]]
    assert (labels == want) != shuffle and sorted(labels) == sorted(want)


@pytest.mark.parametrize("shuffle", [False, True])
def test_chain_idx_equals_packed(data, tmp_path, shuffle):
    # IDX images are HxW without a channel axis, which the image ops refuse
    # (from the packed .slr alike): the chain here is what applies to them.
    def chain(ds):
        return (ds.shuffle(seed=5) if shuffle else ds).cast("image", "float32").batch(4)
    direct = chain(sluice.idx(data["idx_images"], data["idx_labels"]))
    slr = chain(packed(tmp_path, "i.slr", data["idx_images"], data["idx_labels"]))
    a = batches(direct)
    assert_same_batches(a, batches(slr))
    got = np.concatenate([b["image"] for b in a])
    order = np.concatenate([b["label"] for b in a])
    assert got.dtype == np.float32 and got.shape == (23, 12, 10)
    if not shuffle:
        assert np.array_equal(got, data["idx_x"].astype(np.float32))
        assert order.tolist() == data["idx_y"].tolist()


# ---- damaged records ---------------------------------------------------------

def damaged_tfrecord(data, tmp_path, record=3):
    """A copy of part-0.tfrecord with one byte of record `record`'s data flipped."""
    off, length = data["tf_frames"][0][record]
    blob = bytearray(open(data["tf"][0], "rb").read())
    blob[off + 12 + (length - 16) // 2] ^= 0x40
    p = tmp_path / "damaged.tfrecord"
    p.write_bytes(bytes(blob))
    return str(p), off


def test_tfrecord_skip_damaged_record(data, tmp_path):
    bad, _ = damaged_tfrecord(data, tmp_path)
    feats = {"image/class/label": "label", "image/filename": "name"}
    ds = sluice.tfrecord([bad, data["tf"][1]], features=feats).on_error("skip")
    got = [key_text(s["name"]) for s in all_samples(ds)]
    want = [r["image/filename"].decode() for k, r in enumerate(data["tf_rows"]) if k != 3]
    assert got == want
    assert ds.stats()["skipped"] == 1


def test_tfrecord_damaged_record_error_names_file_record_cause(data, tmp_path):
    bad, off = damaged_tfrecord(data, tmp_path)
    ds = sluice.tfrecord([bad, data["tf"][1]]).batch(2)
    with pytest.raises(sluice.CorruptError) as e:
        for _ in ds:
            pass
    msg = str(e.value)
    assert "damaged.tfrecord" in msg and "record 3" in msg, msg
    assert "offset %d" % off in msg and "checksum mismatch" in msg, msg


def test_webdataset_skip_bad_member(data, tmp_path):
    paths, samples = write_shards(str(tmp_path), counts=(3, 4), formats=("posix", "gnu"),
                                  name="bad", bad_cls=(1, 2))
    ds = sluice.webdataset(paths).on_error("skip")
    got = all_samples(ds)
    assert [key_text(g["__key__"]) for g in got] == [s["key"] for s in samples if not s["bad"]]
    assert [int(g["cls"]) for g in got] == [s["cls"] for s in samples if not s["bad"]]
    assert ds.stats()["skipped"] == 1
    with pytest.raises(sluice.Error) as e:
        all_samples(sluice.webdataset(paths))
    msg = str(e.value)
    assert "bad-001.tar" in msg and "record 2" in msg and "seven" in msg, msg


def test_webdataset_damaged_index_skips_its_shard_only(tmp_path):
    """Shards with sidecar indexes open from the index headers alone; a shard
    whose index is damaged past its header fails when first read, each of its
    records with the cause, and under on_error "skip" the other shards' samples
    all come, in order."""
    paths, samples = write_shards(str(tmp_path), counts=(3, 4, 2), formats=("posix", "gnu", "posix"),
                                  name="ix")
    run_cli("index", *paths)
    ix = paths[1] + ".slidx"
    b = bytearray(open(ix, "rb").read())
    b[64 + 5] ^= 0x20  # an entry: the checksum (of the whole index) no longer holds
    open(ix, "wb").write(bytes(b))
    ds = sluice.webdataset(paths, max_open_shards=1).on_error("skip")
    got = all_samples(ds)
    want = [s for s in samples if not s["key"].startswith("s1/")]
    assert [key_text(g["__key__"]) for g in got] == [s["key"] for s in want]
    assert [int(g["cls"]) for g in got] == [s["cls"] for s in want]
    assert ds.stats()["skipped"] == 4
    with pytest.raises(sluice.CorruptError) as e:
        all_samples(sluice.webdataset(paths))
    msg = str(e.value)
    assert "ix-001.tar: record 0" in msg and "ix-001.tar.slidx: checksum mismatch" in msg, msg


# ---- sharding, resume, filters ---------------------------------------------------

def test_shard_unequal_webdataset_shards_equal_batches(data):
    n = sum(SHARD_COUNTS)   # 13 samples in shards of 7, 4 and 2
    world = 3
    keys, counts = [], []
    for rank in range(world):
        ds = sluice.webdataset(data["shards"], columns=["cls"]).shuffle(seed=2)
        ds = ds.shard(rank, world).batch(2)
        bs = batches(ds)
        counts.append(len(bs))
        keys += [key_text(k) for b in bs for k in b["__key__"]]
    # "pad" (the default): ceil(13 / 3) = 5 samples each, 3 batches each
    assert counts == [3, 3, 3]
    assert len(keys) == 15 and set(keys) == {s["key"] for s in data["samples"]}
    # "drop": floor(13 / 3) = 4 samples each, disjoint
    seen = []
    for rank in range(world):
        spec = sluice.webdataset(data["shards"], columns=["cls"]).batch(2).spec
        spec["source"]["shard"] = {"index": rank, "count": world, "equal": "drop"}
        bs = batches(sluice.from_spec(spec))
        assert len(bs) == 2
        seen += [key_text(k) for b in bs for k in b["__key__"]]
    assert len(seen) == len(set(seen)) == 12 and n == 13


def test_resume_tfrecord_mid_epoch(data):
    def make():
        return train_chain(sluice.tfrecord(data["tf"], features={
            "image/encoded": "image", "image/class/label": "label"}), "image", True)
    full = batches(make(), epoch=1)
    ds = make()
    ds.set_epoch(1)
    head = []
    for b in ds:
        head.append({k: np.array(v) for k, v in b.items()})
        if len(head) == 2:
            state = ds.state_dict()
            break
    ds.close()
    resumed = make()
    resumed.load_state_dict(state)
    tail = [{k: np.array(v) for k, v in b.items()} for b in resumed]
    assert len(full) == 4
    assert_same_batches(head + tail, full)


def test_filter_label_indexed_tfrecord(data, tmp_path):
    paths = []
    for p in data["tf"]:
        q = tmp_path / os.path.basename(p)
        shutil.copy(p, q)
        paths.append(str(q))
    run_cli("index", *paths)
    assert all(os.path.exists(p + ".slidx") for p in paths)
    feats = {"image/class/label": "label", "image/filename": "name"}
    ds = sluice.tfrecord(paths, features=feats, index=True).filter("label", [1, 3])
    got = [(key_text(s["name"]), int(s["label"])) for s in all_samples(ds)]
    want = [(r["image/filename"].decode(), r["image/class/label"]) for r in data["tf_rows"]
            if r["image/class/label"] in (1, 3)]
    assert got == want and len(want) > 0
    assert "filter pushed into the source index: label in {1,3}" in ds.explain()


def test_filter_label_image_folder(data):
    ds = sluice.image_folder(data["folder"]).filter("label", [0, 2])
    got = [key_text(s["path"]) for s in all_samples(ds)]
    assert got == [s["path"] for s in data["folder_samples"] if s["label"] in (0, 2)]
    assert "filter pushed into the source index: label in {0,2}" in ds.explain()


def stages_of(ds):
    text = ds.explain()
    return text[text.index("stages:"):text.index("output:")]


def test_every_source_runs_the_same_stages(data, tmp_path):
    """One executor path: the file sources lay out the stages a .slr does;
    IDX (held in memory once opened) those of in-memory arrays."""
    def chain(ds, col):
        return ds.shuffle(seed=1).cast(col, "float32").batch(2)
    slr = stages_of(chain(packed(tmp_path, "s.slr", *data["tf"]), "image/class/label"))
    assert "1. source (read)" in slr
    assert stages_of(chain(sluice.tfrecord(data["tf"]), "image/class/label")) == slr
    assert stages_of(chain(sluice.webdataset(data["shards"]), "cls")) == slr
    assert stages_of(chain(sluice.image_folder(data["folder"]), "label")) == slr
    mem = stages_of(chain(sluice.from_arrays({"image": data["idx_x"],
                                              "label": data["idx_y"].astype(np.int64)}), "label"))
    assert "source+map[cast]" in mem
    assert stages_of(chain(sluice.idx(data["idx_images"], data["idx_labels"]), "label")) == mem
