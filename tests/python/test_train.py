"""A real client: a shortened run of examples/train_fashion_mnist.py (300
steps on the CPU) must make the training loss fall."""
import importlib.util
import os

import pytest

from conftest import FMNIST, REPO

torch = pytest.importorskip("torch")


def load_example():
    path = os.path.join(REPO, "examples", "train_fashion_mnist.py")
    spec = importlib.util.spec_from_file_location("train_fashion_mnist", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not os.path.exists(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")),
                    reason="dataset-fashion-mnist is not installed")
def test_short_training_run_lowers_the_loss(tmp_path):
    ex = load_example()
    r = ex.main(["--steps", "300", "--epochs", "1", "--batch", "64", "--workdir", str(tmp_path),
                 "--no-eval", "--threads", "2"])
    losses = r["losses"]
    assert r["steps"] == 300 and len(losses) == 300
    first = sum(losses[:5]) / 5
    last = sum(losses[-20:]) / 20
    # Chance is ln(10) = 2.30; 300 Adam steps on shuffled batches get well below.
    assert first > 1.8, losses[:5]
    assert last < 0.5 * first and last < 0.9, (first, last)
