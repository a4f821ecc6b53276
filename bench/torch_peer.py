#!/usr/bin/python3
"""PyTorch's own loaders doing the benchmarks' works: the peer the bench scripts run beside sluice.

    /usr/bin/python3 bench/torch_peer.py imagefolder --data DIR [--workers W] [--persistent 0|1]
                                          [--mode loader|threads] [--threads T] [--epochs E] [--batch B]
    /usr/bin/python3 bench/torch_peer.py fmnist [--workers W] [--epochs E] [--batch B] [--split train|t10k]

imagefolder: torchvision's ImageFolder over DIR (make it with bench/make_photos.py) with the
standard training transforms RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
Normalize(ImageNet mean, std), through DataLoader(batch_size=B, shuffle=True, num_workers=W,
persistent_workers=P); or --mode threads: the same per-sample work in a pool of T Python threads
feeding default_collate (what a thread loader does without an engine).
fmnist: Fashion-MNIST (Debian's dataset-fashion-mnist) as DataLoader(TensorDataset(x, y),
batch_size=B, shuffle=True, num_workers=W): torch's per-sample __getitem__ and default_collate.

Each epoch prints one JSON line: {"epoch", "img_s", "seconds", "samples"}; the first epoch of a
persistent loader includes starting its workers, so callers compare a later one.
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

FMNIST = "/usr/share/datasets/fashion-mnist"
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def idx_array(path):
    """An IDX file (gzip'd or not) as a numpy array (uint8 data only)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        sys.exit(f"torch_peer.py: {path}: not an IDX file of unsigned bytes")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def report(epoch, n, t):
    print(json.dumps({"epoch": epoch, "img_s": round(n / t, 1), "seconds": round(t, 3),
                      "samples": n}), flush=True)


def fmnist(a):
    x = torch.from_numpy(idx_array(f"{a.root}/{a.split}-images-idx3-ubyte.gz").copy())
    y = torch.from_numpy(idx_array(f"{a.root}/{a.split}-labels-idx1-ubyte.gz").astype(np.int64))
    loader = DataLoader(TensorDataset(x, y), batch_size=a.batch, shuffle=True,
                        num_workers=a.workers, persistent_workers=a.workers > 0)
    for e in range(a.epochs):
        t0, n = time.perf_counter(), 0
        for xb, _ in loader:
            n += xb.shape[0]
        report(e, n, time.perf_counter() - t0)


def imagefolder(a):
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    if not os.path.isdir(a.data):
        sys.exit(f"torch_peer.py: no {a.data}: make it with /usr/bin/python3 bench/make_photos.py")
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(MEAN, STD)])
    ds = ImageFolder(a.data, transform=tf)
    if a.mode == "loader":
        loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                            persistent_workers=bool(a.persistent) and a.workers > 0)
        for e in range(a.epochs):
            t0, n = time.perf_counter(), 0
            for xb, _ in loader:
                n += xb.shape[0]
            report(e, n, time.perf_counter() - t0)
        return
    from concurrent.futures import ThreadPoolExecutor
    from torch.utils.data import default_collate
    with ThreadPoolExecutor(a.threads) as pool:
        for e in range(a.epochs):
            order = torch.randperm(len(ds)).tolist()
            t0, n = time.perf_counter(), 0
            for s in range(0, len(order), a.batch):
                xb, _ = default_collate(list(pool.map(ds.__getitem__, order[s:s + a.batch])))
                n += xb.shape[0]
            report(e, n, time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="work", required=True)
    f = sub.add_parser("fmnist")
    f.add_argument("--root", default=FMNIST)
    f.add_argument("--split", choices=["train", "t10k"], default="train")
    i = sub.add_parser("imagefolder")
    i.add_argument("--data", default="data/photos/imagenet-like")
    i.add_argument("--mode", choices=["loader", "threads"], default="loader")
    i.add_argument("--threads", type=int, default=2)
    i.add_argument("--persistent", type=int, default=0)
    for p in (f, i):
        p.add_argument("--workers", type=int, default=0)
        p.add_argument("--epochs", type=int, default=2)
        p.add_argument("--batch", type=int, default=None, help="default 256 (fmnist), 64 (imagefolder)")
    a = ap.parse_args()
    a.batch = a.batch or (256 if a.work == "fmnist" else 64)
    torch.manual_seed(0)
    (fmnist if a.work == "fmnist" else imagefolder)(a)


if __name__ == "__main__":
    main()
