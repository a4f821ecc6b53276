"""sluice.pack: IDX files and ImageFolders into .slr, and bad inputs."""
import io
import os

import numpy as np
import pytest

import sluice
from conftest import write_idx


def test_pack_idx_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (50, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 50, dtype=np.uint8)
    ip = write_idx(tmp_path / "imgs.gz", imgs)
    lp = write_idx(tmp_path / "labels.gz", labels, gz=False)
    seen = []
    rep = sluice.pack([lp, ip], tmp_path / "out.slr", progress=lambda d, t, b: seen.append((d, t)))
    assert rep["kind"] == "idx" and rep["records"] == 50 and rep["skipped"] == 0
    assert seen and seen[-1] == (50, 50)
    r = sluice.Reader(str(tmp_path / "out.slr"))
    assert len(r) == 50
    for i in (0, 17, 49):
        np.testing.assert_array_equal(r[i]["image"], imgs[i])
        assert r[i]["label"] == labels[i]


def test_pack_imagefolder(tmp_path):
    PIL = pytest.importorskip("PIL.Image")
    root = tmp_path / "folder"
    for cls in ("cat", "dog"):
        (root / cls).mkdir(parents=True)
        for k in range(3):
            im = PIL.new("RGB", (32 + k, 24), (k * 40, 100, 200 if cls == "dog" else 0))
            im.save(root / cls / f"{k}.jpg", quality=90)
    (root / "dog" / "notes.txt").write_text("not an image, not an image extension")
    rep = sluice.pack(str(root), str(tmp_path / "f.slr"), jobs=2)
    assert rep["kind"] == "imagefolder" and rep["records"] == 6 and rep["classes"] == 2
    r = sluice.Reader(str(tmp_path / "f.slr"))
    assert sorted(r[i]["label"] for i in range(6)) == [0, 0, 0, 1, 1, 1]
    assert r[0]["image"][:2] == b"\xff\xd8"
    assert "cat" in r.meta["classes"]


def test_pack_bad_image_fails_or_skips(tmp_path):
    PIL = pytest.importorskip("PIL.Image")
    root = tmp_path / "folder"
    (root / "a").mkdir(parents=True)
    PIL.new("RGB", (8, 8)).save(root / "a" / "good.jpg")
    (root / "a" / "bad.jpg").write_bytes(b"definitely not a jpeg")
    with pytest.raises(sluice.Error, match="bad.jpg"):
        sluice.pack(str(root), str(tmp_path / "x.slr"))
    assert not (tmp_path / "x.slr").exists()
    rep = sluice.pack(str(root), str(tmp_path / "y.slr"), skip_bad=True)
    assert rep["records"] == 1 and rep["skipped"] == 1
    assert "bad.jpg" in rep["bad"][0]


def test_pack_damaged_idx(tmp_path):
    imgs = np.zeros((10, 28, 28), np.uint8)
    ip = write_idx(tmp_path / "imgs", imgs, gz=False)
    lp = write_idx(tmp_path / "labels", np.zeros(9, np.uint8), gz=False)  # count disagrees
    with pytest.raises(sluice.Error):
        sluice.pack([ip, lp], str(tmp_path / "x.slr"))
    data = open(ip, "rb").read()
    open(ip, "wb").write(data[:-100])  # header says more than the file holds
    lp = write_idx(tmp_path / "labels", np.zeros(10, np.uint8), gz=False)
    with pytest.raises(sluice.CorruptError, match="imgs"):
        sluice.pack([ip, lp], str(tmp_path / "x.slr"))


def test_pack_bad_arguments(tmp_path):
    with pytest.raises(sluice.Error):
        sluice.pack(str(tmp_path / "missing"), str(tmp_path / "x.slr"))
    with pytest.raises(TypeError, match="jobs"):
        sluice.pack(str(tmp_path), str(tmp_path / "x.slr"), jobs="2")
    with pytest.raises(TypeError, match="progress"):
        sluice.pack(str(tmp_path), str(tmp_path / "x.slr"), progress=3)
    with pytest.raises(TypeError, match=r"srcs\[0\]"):
        sluice.pack([3], str(tmp_path / "x.slr"))


def test_pack_progress_exception_propagates(tmp_path):
    ip = write_idx(tmp_path / "i", np.zeros((5, 4, 4), np.uint8))
    lp = write_idx(tmp_path / "l", np.zeros(5, np.uint8))

    def boom(done, total, nbytes):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sluice.pack([ip, lp], str(tmp_path / "x.slr"), progress=boom)


def test_pack_jpeg_restart_same_pixels_other_bytes(tmp_path):
    PIL = pytest.importorskip("PIL.Image")
    root = tmp_path / "folder"
    (root / "a").mkdir(parents=True)
    rng = np.random.default_rng(3)
    for k in range(3):
        arr = rng.integers(0, 256, (97 + 13 * k, 131 + 7 * k, 3), dtype=np.uint8)
        PIL.fromarray(arr).save(root / "a" / f"{k}.jpg", quality=85, progressive=k == 1)
    for mode in ("off", "auto", "rows"):
        sluice.pack(str(root), str(tmp_path / f"{mode}.slr"), jpeg_restart=mode)
        r = sluice.Reader(str(tmp_path / f"{mode}.slr"))
        for i in range(3):
            rec = r[i]
            path = rec["path"]
            src = (root / (path if isinstance(path, str) else bytes(path).decode())).read_bytes()
            got = bytes(rec["image"])
            assert (got == src) == (mode == "off")
            assert (b"SLRST" in got) == (mode != "off")
            np.testing.assert_array_equal(np.asarray(PIL.open(io.BytesIO(got)).convert("RGB")),
                                          np.asarray(PIL.open(io.BytesIO(src)).convert("RGB")))
    with pytest.raises(ValueError, match="jpeg_restart"):
        sluice.pack(str(root), str(tmp_path / "x.slr"), jpeg_restart="yes")
