"""Shared fixtures for the Python tests.

The tests import `sluice` from a build tree: PYTHONPATH=<build>/python (as
scripts/test.sh sets it). Without it, <repo>/build/python is tried.
Test data is generated here, small, in per-test temporary directories.
"""
import gzip
import importlib.util
import os
import struct
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import sluice  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(REPO, "build", "python"))
    import sluice  # noqa: F401


def _has_torchvision_v2():
    """torchvision >= 0.16 (transforms.v2), found without importing it."""
    spec = importlib.util.find_spec("torchvision")
    return bool(spec and spec.submodule_search_locations and any(
        os.path.exists(os.path.join(d, "transforms", "v2", "__init__.py"))
        for d in spec.submodule_search_locations))


# The references against torchvision.transforms.v2 need torchvision >= 0.16:
# under Debian's torch 1.13 they are not collected; scripts/test.sh runs them
# in the torch 2.x venvs of scripts/pythons.sh (scripts/test_transforms.sh).
collect_ignore = [] if _has_torchvision_v2() else ["test_transforms_tv2.py"]


def image_of(i):
    """Deterministic 28x28 uint8 image for record i (so tests can check values)."""
    base = np.arange(28 * 28, dtype=np.uint32).reshape(28, 28)
    return ((base * 7 + i * 13) % 251).astype(np.uint8)


def write_slr(path, n, label_mod=10, shard_bytes=0):
    """A .slr dataset of n records: image (uint8 28x28 array), label (int64)."""
    cols = [("image", "array", "uint8", (28, 28)), ("label", "int64")]
    with sluice.Writer(str(path), cols, shard_bytes=shard_bytes, fsync=False) as w:
        for i in range(n):
            w.append({"image": image_of(i), "label": i % label_mod})
    return str(path)


def write_idx(path, arr, gz=True):
    """An IDX file (big-endian header, uint8 data), gzip'd like Debian's."""
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    header = struct.pack(">I", 0x0800 | arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    data = header + arr.tobytes()
    opener = gzip.open if gz else open
    with opener(path, "wb") as f:
        f.write(data)
    return str(path)


@pytest.fixture
def small_slr(tmp_path):
    return write_slr(tmp_path / "small.slr", 100)


FMNIST = "/usr/share/datasets/fashion-mnist"


@pytest.fixture(scope="session")
def fmnist_slr(tmp_path_factory):
    """Fashion-MNIST packed with sluice.pack (skipped if the dataset is absent)."""
    imgs = os.path.join(FMNIST, "train-images-idx3-ubyte.gz")
    labels = os.path.join(FMNIST, "train-labels-idx1-ubyte.gz")
    if not os.path.exists(imgs):
        pytest.skip("dataset-fashion-mnist is not installed")
    out = tmp_path_factory.mktemp("fmnist") / "train.slr"
    sluice.pack([imgs, labels], str(out))
    return str(out)
