"""mix_bench.py — a blend of 3 inputs against the same work from one input,
side by side in one run (docs/PIPELINE.md, "Mixtures").

    PYTHONPATH=build/python /usr/bin/python3 bench/mix_bench.py [PHOTOS_DIR] [--repeats N]
        [--epochs E]

tiny: 300,000 records of an int64[4] and a label, batch 256: one .slr, or
the same records cut into three .slr inputs blended with counts equal to
their sizes (every record once, in a random blended order). Each input
shuffled (global) in both.
train (with PHOTOS_DIR, an ImageFolder such as bench/make_photos.py's
imagenet-like/): decode + RandomResizedCrop 224 + flip + normalize, batch
64: the folder packed into one .slr, or its classes cut into three packed
inputs blended the same way.

For each: samples/s over E epochs of tiny (default 5: one epoch is ~50 ms)
or one epoch of train, from making the iterator, the runs alternating one / mix, medians
and their ratio (mix / one); and the time from making the iterator to the
first batch, for the mix and for each of its inputs alone (the slowest
input is what the mix should not be worse than). Speed is never asserted.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

import sluice

N_TINY = 300000


def write_tiny(path, lo, hi):
    cols = [("x", "array", "int64", (4,)), ("label", "int64")]
    with sluice.Writer(path, cols, fsync=False) as w:
        for i in range(lo, hi):
            w.append({"x": np.array([i, i + 1, i + 2, i + 3], dtype=np.int64), "label": i % 10})
    return path


def epoch_rate(ds, epochs):
    """Samples/s over `epochs` epochs from making the iterator (its setup,
    the huge-page copies made while the first epoch reads, included)."""
    t0 = time.perf_counter()
    n = 0
    for e in range(epochs):
        ds.set_epoch(e)
        for b in ds:
            n += len(b["label"])
    ds.close()
    return n / (time.perf_counter() - t0), n


def first_batch_s(make):
    ds = make()
    t0 = time.perf_counter()
    next(iter(ds))
    dt = time.perf_counter() - t0
    ds.close()
    return dt


def compare(name, one, mixed, inputs, repeats, epochs):
    r_one, r_mix = [], []
    for _ in range(repeats):
        a, na = epoch_rate(one(), epochs)
        b, nb = epoch_rate(mixed(), epochs)
        assert na == nb, (na, nb)
        r_one.append(a)
        r_mix.append(b)
    m1, m2 = statistics.median(r_one), statistics.median(r_mix)
    print(f"{name}: one input {m1:,.0f} samples/s (runs {', '.join(f'{x:,.0f}' for x in r_one)}); "
          f"mix of 3 {m2:,.0f} (runs {', '.join(f'{x:,.0f}' for x in r_mix)}); "
          f"ratio mix/one {m2 / m1:.3f}")
    fb_in = [statistics.median(first_batch_s(f) for _ in range(repeats)) for f in inputs]
    fb_mix = statistics.median(first_batch_s(mixed) for _ in range(repeats))
    print(f"{name}: first batch: mix {fb_mix * 1e3:.1f} ms; inputs alone "
          f"{', '.join(f'{x * 1e3:.1f}' for x in fb_in)} ms (slowest {max(fb_in) * 1e3:.1f})")


def mix_of(paths, sizes, chain):
    ins = [sluice.records(p).shuffle() for p in paths]
    return chain(sluice.mix(ins, [{"samples": s} for s in sizes], seed=1, stop="all_exhausted"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("photos", nargs="?")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=5,
                    help="epochs per tiny run (one epoch is ~50 ms: too short alone)")
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores; load {open('/proc/loadavg').read().split()[:3]}")
    tmp = tempfile.mkdtemp(prefix="mix-bench-")
    try:
        one = write_tiny(os.path.join(tmp, "one.slr"), 0, N_TINY)
        cuts = [0, N_TINY // 3, 2 * N_TINY // 3, N_TINY]
        parts = [write_tiny(os.path.join(tmp, f"p{k}.slr"), cuts[k], cuts[k + 1]) for k in range(3)]
        sizes = [cuts[k + 1] - cuts[k] for k in range(3)]
        tiny = lambda ds: ds.batch(256)  # noqa: E731
        compare("tiny", lambda: tiny(sluice.records(one).shuffle()),
                lambda: mix_of(parts, sizes, tiny), 
                [lambda p=p: tiny(sluice.records(p).shuffle()) for p in parts], a.repeats,
                a.epochs)
        if a.photos:
            classes = sorted(d for d in os.listdir(a.photos)
                             if os.path.isdir(os.path.join(a.photos, d)))
            groups = [classes[k::3] for k in range(3)]
            roots = []
            for k, g in enumerate(groups):
                r = os.path.join(tmp, f"root{k}")
                os.makedirs(r)
                for c in g:
                    os.symlink(os.path.join(os.path.abspath(a.photos), c), os.path.join(r, c))
                roots.append(r)
            one = os.path.join(tmp, "photos.slr")
            sluice.pack(a.photos, one)
            packed = [os.path.join(tmp, f"photos{k}.slr") for k in range(3)]
            for r, p in zip(roots, packed):
                sluice.pack(r, p)
            psizes = [sluice.records(p).__len__() for p in packed]

            def train(ds):
                return (ds.decode("image").random_resized_crop("image", 224).flip("image")
                        .normalize("image", mean=(0.485, 0.456, 0.406),
                                   std=(0.229, 0.224, 0.225), layout="chw").batch(64))
            compare("train", lambda: train(sluice.records(one).shuffle()),
                    lambda: mix_of(packed, psizes, train),
                    [lambda p=p: train(sluice.records(p).shuffle()) for p in packed], a.repeats,
                    1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
