#!/usr/bin/env python3
"""shuffle_quality.py — how close the windowed shuffle comes to a uniform
permutation, side by side with the global shuffle and (when importable)
MosaicML Streaming's shuffle algorithms on the same shard layout.

N records in S equal shards (the synthetic source; label = shard). For one
epoch's order on one rank (sluice's orders as the engine yields them), per
algorithm and window / block size:
  - shards/batch: distinct shards in a batch of 256 (mean over batches);
    a uniform permutation gives about S * (1 - (1 - 1/S)^256);
  - lag-1 corr: Pearson correlation of the record indices of neighbouring
    samples (0 for a uniform permutation; 1 for source order);
  - |gap|/N: mean distance between neighbouring samples' record indices,
    over N (1/3 for a uniform permutation).

    PYTHONPATH=build/python /usr/bin/python3 bench/shuffle_quality.py [N S]

MosaicML Streaming (reference): install it with its dependencies left out
into a venv that sees Debian's numpy (only its numpy shuffle modules are
loaded, without the package's own imports):
    /usr/bin/python3 -m venv --system-site-packages /tmp/venv
    /tmp/venv/bin/pip install --no-deps mosaicml-streaming
    PYTHONPATH=build/python /tmp/venv/bin/python bench/shuffle_quality.py
"""
import importlib
import importlib.util
import sys
import types

import numpy as np

import sluice

BATCH = 256


def metrics(order, n, shards):
    order = np.asarray(order, np.int64)
    assert len(order) == n and len(np.unique(order)) == n, "not a permutation"
    lab = order * shards // n
    nb = n // BATCH
    per = lab[:nb * BATCH].reshape(nb, BATCH)
    per.sort(axis=1)
    distinct = (np.diff(per, axis=1) != 0).sum(axis=1) + 1
    a, b = order[:-1].astype(np.float64), order[1:].astype(np.float64)
    return distinct.mean(), np.corrcoef(a, b)[0, 1], np.abs(a - b).mean() / n


def sluice_order(n, shards, **shuffle):
    ds = sluice.synthetic(n, shards=shards).shuffle(seed=0, **shuffle).batch(65536)
    return np.concatenate([np.asarray(b["index"]) for b in ds.numpy()])


def mosaic():
    """streaming.base.shuffle's modules, loaded without streaming/__init__.py
    (which imports torch-side dependencies the shuffle does not need)."""
    spec = importlib.util.find_spec("streaming")
    if spec is None:
        return None
    root = spec.submodule_search_locations[0]
    for name, path in (("streaming", root), ("streaming.base", root + "/base"),
                       ("streaming.base.shuffle", root + "/base/shuffle")):
        m = types.ModuleType(name)
        m.__path__ = [path]
        sys.modules[name] = m
    algos = {}
    for a in ("py1b", "py1br", "py1e", "py1s", "py2s"):
        try:
            mod = importlib.import_module(f"streaming.base.shuffle.{a}")
            algos[a] = getattr(mod, f"get_shuffle_{a}")
        except (ImportError, AttributeError):
            pass
    return algos


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    shards = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    per_shard = n // shards
    expect = shards * (1 - (1 - 1 / shards) ** BATCH)
    print(f"{n:,} records in {shards:,} shards of {per_shard:,}; batches of {BATCH}; uniform: "
          f"{expect:.1f} shards/batch, lag-1 corr 0, |gap|/N 0.333\n")
    print("| order | window | block | shards/batch | lag-1 corr | \\|gap\\|/N |")
    print("|---|---|---|---|---|---|")

    def row(name, w, blk, order):
        d, c, g = metrics(order, n, shards)
        print(f"| {name} | {w} | {blk} | {d:.1f} | {c:.4f} | {g:.3f} |", flush=True)

    row("none (source order)", "—", "—", np.arange(n))
    row("sluice global", "—", "—", sluice_order(n, shards, mode="global"))
    windows = [4096, 16384, 65536, 262144]
    for w in windows:
        row("sluice window", f"{w:,}", f"{w // 64:,}",
            sluice_order(n, shards, mode="window", window=w))
    for w in windows:
        row("sluice window", f"{w:,}", f"{per_shard:,} (a shard)",
            sluice_order(n, shards, mode="window", window=max(w, per_shard), block=per_shard))
    algos = mosaic()
    if not algos:
        print("\n(MosaicML Streaming not importable: its rows are left out)")
        return 0
    sizes = np.full(shards, per_shard, np.int64)
    for a, fn in sorted(algos.items()):
        for w in windows:
            order = fn(sizes, 1, 0, 0, w)
            row(f"Streaming {a}", f"{w:,}", "(shards)", order)
    return 0


if __name__ == "__main__":
    sys.exit(main())
