#!/usr/bin/env python3
"""Same work, same accuracy: a small CNN trained on Fashion-MNIST fed by
sluice.torch.DataLoader and by torch's DataLoader, with the same map-style
Dataset and the same transforms, several seeds each; prints the final test
accuracies and whether they agree within the run-to-run spread.

    PY examples/same_accuracy.py [--seeds 0,1,2] [--train 12000] [--epochs 2]
                                 [--workers 2] [--worker-type auto] [--json]

PY: any python with torch and sluice (Debian's /usr/bin/python3 with a build
tree's PYTHONPATH, or a venv of scripts/pythons.sh). Data: Debian's
dataset-fashion-mnist (the IDX files under /usr/share/datasets/fashion-mnist,
scripts/deps.sh installs it; nothing is downloaded). The Dataset decodes
nothing: it returns a 28x28 image after a random 2-pixel-padded crop and a
random horizontal flip drawn from torch's generator in the worker (so each
loader's worker seeding is part of what is compared), then normalised.

For each seed and loader: torch.manual_seed(seed), the loader's shuffling
generator seeded with seed, the same model initialisation (so the two loaders
of one seed start from the same weights), Adam, --epochs over the first
--train training images, then accuracy on the 10,000 test images. The two
loaders draw different (equally random) crops and orders, so their
accuracies differ by the same run-to-run noise as two seeds do: the check is
|mean(sluice) - mean(torch)| <= max(spread of either, 0.01) where spread is
max - min over the seeds. Exit status 1 when it fails.
About 1-2 minutes a run on 2 cores (default sizes).
"""
import argparse
import gzip
import json
import os
import statistics
import struct
import sys
import sysconfig
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_fashion_mnist import MEAN, ROOT, STD, Net  # noqa: E402


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class FashionMNIST:
    """A map-style Dataset: uint8 images in memory, per-sample augmentation in
    torch ops (random crop after 2-pixel zero padding, horizontal flip),
    normalised float32 1x28x28."""

    def __init__(self, images, labels, train):
        self.images = images
        self.labels = labels
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = torch.from_numpy(self.images[i].astype(np.float32)).div_(255.0)
        if self.train:
            x = F.pad(x.unsqueeze(0), (2, 2, 2, 2)).squeeze(0)
            dy, dx = torch.randint(0, 5, (2,)).tolist()
            x = x[dy:dy + 28, dx:dx + 28]
            if torch.rand(()) < 0.5:
                x = x.flip(1)
        return x.sub(MEAN).div_(STD).unsqueeze(0), int(self.labels[i])


def run(kind, seed, data, a):
    torch.manual_seed(seed)
    model = Net()  # the same initial weights for both loaders of a seed
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    g = torch.Generator()
    g.manual_seed(seed)
    kw = dict(batch_size=a.batch, shuffle=True, num_workers=a.workers, drop_last=True,
              generator=g, persistent_workers=a.workers > 0)
    if kind == "sluice":
        from sluice.torch import DataLoader
        dl = DataLoader(data["train"], worker_type=a.worker_type, **kw)
    else:
        from torch.utils.data import DataLoader
        dl = DataLoader(data["train"], **kw)
    t0 = time.perf_counter()
    steps = 0
    for _ in range(a.epochs):
        for x, y in dl:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
    secs = time.perf_counter() - t0
    used = getattr(dl, "worker_type_used", None)
    del dl
    model.eval()
    xs, ys = data["test"]
    with torch.no_grad():
        correct = (model(xs).argmax(1) == ys).sum().item()
    return {"loader": kind, "seed": seed, "test_accuracy": round(correct / len(ys), 4),
            "steps": steps, "train_seconds": round(secs, 1), "worker_type_used": used}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--train", type=int, default=12000, help="training images used (the first N)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--worker-type", default="auto", choices=["auto", "thread", "process"],
                    help="sluice.torch.DataLoader's worker_type")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the model")
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--json", action="store_true", help="one JSON object per run, then the summary")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    imgs = read_idx(os.path.join(a.root, "train-images-idx3-ubyte.gz"))[:a.train]
    labels = read_idx(os.path.join(a.root, "train-labels-idx1-ubyte.gz"))[:a.train]
    timgs = read_idx(os.path.join(a.root, "t10k-images-idx3-ubyte.gz"))
    tlabels = read_idx(os.path.join(a.root, "t10k-labels-idx1-ubyte.gz"))
    test_x = torch.from_numpy(timgs.astype(np.float32)).div_(255.0).sub_(MEAN).div_(STD).unsqueeze(1)
    data = {"train": FashionMNIST(imgs, labels, train=True),
            "test": (test_x, torch.from_numpy(tlabels.astype(np.int64)))}
    seeds = [int(s) for s in a.seeds.split(",")]
    acc = {"sluice": [], "torch": []}
    for seed in seeds:
        for kind in ("sluice", "torch"):
            r = run(kind, seed, data, a)
            acc[kind].append(r["test_accuracy"])
            print(json.dumps(r) if a.json else
                  f"{kind:6} seed {seed}: test accuracy {r['test_accuracy']:.4f} "
                  f"({r['steps']} steps, {r['train_seconds']} s"
                  + (f", {r['worker_type_used']} workers" if r["worker_type_used"] else "") + ")",
                  flush=True)
    spread = {k: max(v) - min(v) for k, v in acc.items()}
    mean = {k: statistics.mean(v) for k, v in acc.items()}
    tol = max(spread["sluice"], spread["torch"], 0.01)
    diff = abs(mean["sluice"] - mean["torch"])
    ok = diff <= tol
    summary = {"python": f"{sys.version_info.major}.{sys.version_info.minor}"
               + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""),
               "gil": getattr(sys, "_is_gil_enabled", lambda: True)(),
               "torch": torch.__version__, "seeds": seeds,
               "sluice": acc["sluice"], "torch_dataloader": acc["torch"],
               "mean_sluice": round(mean["sluice"], 4), "mean_torch": round(mean["torch"], 4),
               "difference": round(diff, 4), "tolerance": round(tol, 4), "agree": ok}
    if a.json:
        print(json.dumps(summary))
    else:
        print(f"final accuracies: sluice {acc['sluice']} (mean {mean['sluice']:.4f}), "
              f"torch {acc['torch']} (mean {mean['torch']:.4f}); difference {diff:.4f}, "
              f"run-to-run spread {tol:.4f}: {'agree' if ok else 'DISAGREE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
