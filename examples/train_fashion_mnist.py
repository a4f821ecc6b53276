#!/usr/bin/python3
"""Train a small CNN on Fashion-MNIST with PyTorch, fed by sluice.

    /usr/bin/python3 examples/train_fashion_mnist.py [--epochs 3] [--workdir DIR]

Data: Debian's dataset-fashion-mnist (IDX files under
/usr/share/datasets/fashion-mnist/), packed once into .slr files with
sluice.pack. Training batches are shuffled per epoch by the engine (keyed by
seed and epoch, so a run is reproducible) and reach torch without a copy
(DLPack). Runs on the CPU; three epochs reach about 90% test accuracy.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import sluice

ROOT = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training-set pixel statistics (of x/255)


def pack_once(workdir, root=ROOT):
    """Pack train and test IDX files into .slr (skipped when already there)."""
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        dst = os.path.join(workdir, f"fashion-mnist-{split}.slr")
        if not os.path.exists(dst):
            sluice.pack([os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"),
                         os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz")], dst)
        out[split] = dst
    return out


def dataset(path, batch, train, seed=0):
    ds = sluice.records(path)
    if train:
        ds = ds.shuffle(seed=seed)
    return ds.batch(batch, drop_remainder=train).prefetch(4)


class Net(nn.Module):
    """Two conv layers and a linear classifier: ~1 M multiply-adds per image,
    small enough to train for a few epochs on two CPU cores."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def to_input(batch):
    # uint8 (B, 28, 28) from the engine, shared memory; the float conversion
    # makes the model's own copy.
    x = batch["image"].unsqueeze(1).float().div_(255.0).sub_(MEAN).div_(STD)
    return x, batch["label"]


def evaluate(model, ds):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in ds.torch():
            x, y = to_input(batch)
            correct += (model(x).argmax(1) == y).sum().item()
            total += y.numel()
    model.train()
    return correct / total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--workdir", default=None, help="where the .slr files go (default: a temp dir)")
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--no-eval", action="store_true")
    a = ap.parse_args(argv)

    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    tmp = None
    if a.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="sluice-fmnist-")
        a.workdir = tmp.name
    os.makedirs(a.workdir, exist_ok=True)
    t0 = time.perf_counter()
    paths = pack_once(a.workdir, a.root)
    t_pack = time.perf_counter() - t0

    train = dataset(paths["train"], a.batch, train=True, seed=a.seed)
    test = dataset(paths["test"], 1000, train=False)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    losses = []
    step = 0
    t_train = time.perf_counter()
    done = False
    for epoch in range(a.epochs):
        train.set_epoch(epoch)
        running, n = 0.0, 0
        for batch in train.torch():
            x, y = to_input(batch)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            running += losses[-1]
            n += 1
            step += 1
            if a.steps and step >= a.steps:
                done = True
                break
        print(json.dumps({"epoch": epoch, "steps": step, "mean_loss": round(running / max(n, 1), 4),
                          "elapsed_s": round(time.perf_counter() - t_train, 1)}), flush=True)
        if done:
            break
    t_train = time.perf_counter() - t_train
    acc = None if a.no_eval else evaluate(model, test)
    result = {"test_accuracy": acc, "steps": step, "epochs_run": epoch + 1,
              "train_seconds": round(t_train, 1), "pack_seconds": round(t_pack, 1),
              "first_loss": losses[0] if losses else None,
              "last_loss": sum(losses[-20:]) / len(losses[-20:]) if losses else None}
    print(json.dumps(result), flush=True)
    train.close()
    test.close()
    if tmp is not None:
        tmp.cleanup()
    result["losses"] = losses
    return result


if __name__ == "__main__":
    r = main()
    sys.exit(0 if r["test_accuracy"] is None or r["test_accuracy"] >= 0.85 else 1)
