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


@pytest.mark.skipif(not os.path.exists(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")),
                    reason="dataset-fashion-mnist is not installed")
def test_same_accuracy_example_reports_both_loaders(tmp_path):
    # examples/same_accuracy.py, shortened: one JSON line per (seed, loader),
    # then the summary; both loaders learn (well above chance, 0.1)
    import json
    import subprocess
    import sys
    r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "same_accuracy.py"),
                        "--train", "1500", "--epochs", "1", "--seeds", "0,1", "--json"],
                       capture_output=True, text=True, timeout=600)
    rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    assert len(rows) == 5, r.stdout + r.stderr
    runs, summary = rows[:4], rows[4]
    assert [(x["loader"], x["seed"]) for x in runs] == \
        [("sluice", 0), ("torch", 0), ("sluice", 1), ("torch", 1)]
    assert all(x["steps"] == 1500 // 64 and x["test_accuracy"] > 0.4 for x in runs), runs
    assert summary["sluice"] == [runs[0]["test_accuracy"], runs[2]["test_accuracy"]]
    assert summary["torch_dataloader"] == [runs[1]["test_accuracy"], runs[3]["test_accuracy"]]
    assert summary["agree"] == (summary["difference"] <= summary["tolerance"])
    assert r.returncode == (0 if summary["agree"] else 1), r.stderr
