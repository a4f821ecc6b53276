"""The JPEG training pipeline from Python: ImageFolder -> pack -> decode,
random_resized_crop, flip, normalize -> torch, and damaged images."""
import io

import numpy as np
import pytest

import sluice

PIL = pytest.importorskip("PIL.Image")

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def make_folder(root, n_per_class=4, bad=None):
    rng = np.random.default_rng(0)
    for c, cls in enumerate(("ant", "bee", "cow")):
        (root / cls).mkdir(parents=True)
        for k in range(n_per_class):
            h, w = 60 + 7 * k, 80 + 5 * c
            arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            PIL.fromarray(arr).save(root / cls / f"{k}.jpg", quality=90)
    if bad:
        good = (root / "bee" / "0.jpg").read_bytes()
        (root / "bee" / "zz_truncated.jpg").write_bytes(good[: len(good) // 2])
    return root


def decode_pipeline(path):
    return (sluice.records(path).shuffle(seed=0)
            .decode("image").random_resized_crop("image", 32).flip("image")
            .normalize("image", mean=MEAN, std=STD, layout="chw")
            .select("image", "label").batch(4))


def require_ops(ds):
    try:
        ds.columns
    except sluice.InvalidError as e:
        if "unknown op" in str(e) or "no op" in str(e):
            pytest.skip(f"image ops not in this build: {e}")
        raise


def test_training_pipeline_shapes_and_values(tmp_path):
    root = make_folder(tmp_path / "folder")
    slr = str(tmp_path / "f.slr")
    assert sluice.pack(str(root), slr)["records"] == 12
    ds = decode_pipeline(slr)
    require_ops(ds)
    batches = list(ds.torch())
    assert len(batches) == 3
    img = batches[0]["image"]
    assert tuple(img.shape) == (4, 3, 32, 32) and str(img.dtype) == "torch.float32"
    # (x/255 - mean)/std stays inside [(0 - mean)/std, (1 - mean)/std].
    lo = min((0 - m) / s for m, s in zip(MEAN, STD))
    hi = max((1 - m) / s for m, s in zip(MEAN, STD))
    assert lo - 1e-4 <= img.min().item() and img.max().item() <= hi + 1e-4
    labels = sorted(int(v) for b in batches for v in b["label"])
    assert labels == [0] * 4 + [1] * 4 + [2] * 4
    # Same seed and epoch: the same augmentations, byte for byte.
    again = list(decode_pipeline(slr).numpy())
    np.testing.assert_array_equal(np.asarray(again[1]["image"]), batches[1]["image"].numpy())


def test_damaged_jpeg_names_file_and_record(tmp_path):
    root = make_folder(tmp_path / "folder", bad=True)
    slr = str(tmp_path / "f.slr")
    try:
        sluice.pack(str(root), slr)
    except sluice.Error as e:
        # pack may reject the truncated file itself; it must say which.
        assert "zz_truncated.jpg" in str(e)
        return
    ds = sluice.records(slr).decode("image").select("image", "label").batch(1)
    require_ops(ds)
    with pytest.raises(sluice.DecodeError) as ei:
        for _ in ds.numpy():
            pass
    msg = str(ei.value)
    assert "f.slr" in msg and "record" in msg
    skip = (sluice.records(slr).decode("image").random_resized_crop("image", 16)
            .select("image", "label").batch(1).on_error("skip"))
    assert sum(1 for _ in skip.numpy()) == 12
    assert skip.stats()["skipped"] == 1
