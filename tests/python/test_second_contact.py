"""What a new user still trips over in the first hour (issue 30): sharding
only when asked for, folders and shell patterns of shards, op names checked
where they are typed, a spec file's relative paths, and the calls that point
to the right one.

Inputs are written here: JPEGs by PIL, tar shards by Python's tarfile,
TFRecord frames as tests/python/test_first_contact.py writes them (framing
from the TFRecord format, checksums by the crc32c module).

Run: PYTHONPATH=build/python SLUICE_BIN=build/sluice /usr/bin/python3 -m pytest \
        tests/python/test_second_contact.py
"""
import io
import json
import os
import subprocess
import sys
import tarfile

import pytest

import sluice

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import write_slr  # noqa: E402
from test_first_contact import image_folder, jpeg, sluice_bin, tfrecord  # noqa: E402


def tar_shard(path, first, n=3):
    """A WebDataset shard of samples first..first+n-1 (keys unique across
    shards), written by Python's tarfile."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for i in range(first, first + n):
            for ext, data in (("cls", b"%d" % i), ("jpg", jpeg(i))):
                info = tarfile.TarInfo("s%05d.%s" % (i, ext))
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return str(path)


def wds_folder(root, shards=3, per=3):
    os.makedirs(root, exist_ok=True)
    return [tar_shard(os.path.join(root, "shard-%06d.tar" % s), s * per, per)
            for s in range(shards)]


def tfr_folder(root, files=3, per=4):
    os.makedirs(root, exist_ok=True)
    return [tfrecord(os.path.join(root, "part-%d.tfrecord" % k), per) for k in range(files)]


def count(ds):
    return sum(len(b["label"] if "label" in b else b["cls"]) for b in ds)


# ---- 1: sharding only when asked for ---------------------------------------------

@pytest.fixture
def torchrun_env(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")


def test_no_shard_reads_everything_under_torchrun_env(tmp_path, torchrun_env, capfd):
    root = str(tmp_path / "clean")
    paths = image_folder(root)
    ds = sluice.image_folder(root).batch(2)
    assert count(ds) == len(paths) == 5
    err = capfd.readouterr().err
    assert "WORLD_SIZE=2" in err and ".shard()" in err, err
    # .shard() takes the launcher's slice, padded by default (ceil(5 / 2))
    assert count(sluice.image_folder(root).shard().batch(2)) == 3
    # the same for a spec run by the command: no shard key reads everything
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"source": {"image_folder": root},
                                "ops": [{"op": "batch", "size": 2}]}))
    r = subprocess.run([sluice_bin(), "run", str(spec)], capture_output=True, text=True,
                       env=dict(os.environ))
    assert r.returncode == 0 and "5 samples" in r.stdout, (r.stdout, r.stderr)
    assert '"shard": "env"' in r.stderr
    spec.write_text(json.dumps({"source": {"image_folder": root, "shard": "env"},
                                "ops": [{"op": "batch", "size": 2}]}))
    r = subprocess.run([sluice_bin(), "run", str(spec)], capture_output=True, text=True)
    assert r.returncode == 0 and "3 samples" in r.stdout, (r.stdout, r.stderr)


NOTE_PY = """
import sys
import sluice
ds = sluice.image_folder(sys.argv[1]).batch(2)
if sys.argv[2] == "explicit":
    ds = ds.shard(0, 1)
for _ in range(2):
    print(sum(len(b["label"]) for b in sluice.image_folder(sys.argv[1]).batch(2)) if
          sys.argv[2] == "plain" else sum(len(b["label"]) for b in ds))
"""


def test_unsharded_note_once_and_silenced_by_an_explicit_shard(tmp_path):
    root = str(tmp_path / "clean")
    image_folder(root)
    env = dict(os.environ, RANK="1", WORLD_SIZE="2")
    for how, notes in (("plain", 1), ("explicit", 0)):
        r = subprocess.run([sys.executable, "-c", NOTE_PY, root, how], capture_output=True,
                           text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["5", "5"], r.stdout
        assert r.stderr.count("WORLD_SIZE=2") == notes, (how, r.stderr)


def test_shard_takes_the_equal_policy(tmp_path):
    path = str(tmp_path / "d.slr")
    write_slr(path, 5)
    got = {}
    for equal in ("pad", "drop", "none"):
        ds = sluice.records(path).shard(1, 2, equal=equal).batch(2)
        assert ds.spec["source"]["shard"] == {"index": 1, "count": 2, "equal": equal}
        got[equal] = count(ds)
    assert got == {"pad": 3, "drop": 2, "none": 2}
    assert count(sluice.records(path).shard(0, 2, equal="none").batch(2)) == 3
    with pytest.raises(ValueError, match='"pad", "drop" or "none"'):
        sluice.records(path).shard(0, 2, equal="even")
    # the spec without "equal" stays as it was
    assert sluice.records(path).shard(0, 2).spec["source"]["shard"] == {"index": 0, "count": 2}


# ---- 3: folders and shell patterns -----------------------------------------------

def test_webdataset_folder_and_glob(tmp_path):
    root = str(tmp_path / "wds")
    wds_folder(root)
    for arg in (root, root + "/", root + "/shard-*.tar", root + "/shard-00000[0-1].tar"):
        want = 6 if "[" in arg else 9
        ds = sluice.webdataset(arg).batch(4)
        got = [int(x) for b in ds for x in b["cls"]]
        assert got == list(range(want)), arg
    # sidecar indexes beside the shards are read by them, not listed as shards
    r = subprocess.run([sluice_bin(), "index", root], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert len([f for f in os.listdir(root) if f.endswith(".slidx")]) == 3
    assert count(sluice.webdataset(root, index=True).batch(4)) == 9
    assert count(sluice.webdataset(root + "/*").batch(4)) == 9
    with pytest.raises(sluice.IOFailure, match="no file matches"):
        list(sluice.webdataset(root + "/nothing-*.tar"))


def test_tfrecord_folder_and_glob(tmp_path):
    root = str(tmp_path / "tfr")
    tfr_folder(root)
    for arg in (root, root + "/*.tfrecord", root + "/part-{0..1}.tfrecord"):
        want = 8 if "{" in arg else 12
        assert count(sluice.tfrecord(arg).batch(5)) == want, arg


def test_folders_of_another_kind_name_the_call(tmp_path):
    wds = str(tmp_path / "wds")
    tfr = str(tmp_path / "tfr")
    imgs = str(tmp_path / "imgs")
    wds_folder(wds)
    tfr_folder(tfr)
    image_folder(imgs)
    assert count(sluice.image_folder(imgs).batch(2)) == 5   # still an ImageFolder
    with pytest.raises(sluice.InvalidError, match=r"use sluice\.webdataset\("):
        list(sluice.tfrecord(wds))
    with pytest.raises(sluice.InvalidError, match=r"use sluice\.tfrecord\("):
        list(sluice.webdataset(tfr))
    with pytest.raises(sluice.InvalidError, match=r"use sluice\.image_folder\("):
        list(sluice.webdataset(imgs))
    with pytest.raises(sluice.InvalidError, match=r"use sluice\.webdataset\("):
        list(sluice.image_folder(wds))
    # files of two kinds: the message names the call for each
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    os.link(os.path.join(wds, "shard-000000.tar"), mixed / "a.tar")
    os.link(os.path.join(tfr, "part-0.tfrecord"), mixed / "b.tfrecord")
    with pytest.raises(sluice.Error) as e:
        list(sluice.webdataset(str(mixed)))
    msg = str(e.value) + str(e.value.__cause__)
    assert f"sluice.webdataset('{mixed}/*.tar')" in msg and \
        f"sluice.tfrecord('{mixed}/*.tfrecord')" in msg, msg


# ---- 5: op names checked where they are typed ---------------------------------------

@pytest.mark.parametrize("name, near", [("resise", "resize"), ("color_jitter", None),
                                        ("flipp", "flip")])
def test_unknown_op_fails_at_the_call(name, near):
    ds = sluice.records("any.slr")
    with pytest.raises(sluice.InvalidError, match=f"ops\\[0\\].op: unknown op '{name}'") as e:
        ds.op(name, column="image")
    if near:
        assert f"(known: {near}" in str(e.value)
    spec = {"source": {"path": "any.slr"}, "ops": [{"op": "batch", "size": 2}, {"op": name}]}
    with pytest.raises(sluice.InvalidError, match=f"ops\\[1\\].op: unknown op '{name}'"):
        sluice.from_spec(spec)
    with pytest.raises(sluice.InvalidError, match="unknown op"):
        sluice.from_spec(json.dumps(spec))


# ---- 4: a spec file's relative paths -------------------------------------------------

def test_from_spec_path_resolves_against_the_spec_folder(tmp_path, monkeypatch):
    data = tmp_path / "proj" / "data"
    data.mkdir(parents=True)
    write_slr(str(data / "d.slr"), 7)
    specs = tmp_path / "proj" / "specs"
    specs.mkdir()
    spec = specs / "train.json"
    spec.write_text(json.dumps({"source": {"path": "../data/d.slr"},
                                "ops": [{"op": "batch", "size": 3}]}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    ds = sluice.from_spec(str(spec))
    assert count(ds) == 7
    assert os.path.samefile(ds.spec["source"]["path"], data / "d.slr")


# ---- 7: the smaller ones ---------------------------------------------------------------

def test_dir_lists_no_private_modules():
    names = dir(sluice)
    assert "os" not in names and "errno" not in names


def test_reader_of_another_kind_names_the_call(tmp_path):
    wds = str(tmp_path / "wds")
    shards = wds_folder(wds)
    imgs = str(tmp_path / "imgs")
    image_folder(imgs)
    for path, call in ((shards[0], "webdataset"), (wds, "webdataset"), (imgs, "image_folder")):
        with pytest.raises(sluice.InvalidError) as e:
            sluice.Reader(path)
        assert f"sluice.{call}('{path}')" in str(e.value), str(e.value)
    with pytest.raises(sluice.IOFailure):   # nothing there: the reader's own message
        sluice.Reader(str(tmp_path / "missing.slr"))


def test_tfrecord_of_a_slr_prints_no_stray_warning(tmp_path, capfd):
    path = str(tmp_path / "x.slr")
    write_slr(path, 4)
    with pytest.raises(sluice.InvalidError, match=r"use sluice\.records\("):
        list(sluice.tfrecord(path))
    err = capfd.readouterr().err
    assert "checksum" not in err and "warn" not in err, err
