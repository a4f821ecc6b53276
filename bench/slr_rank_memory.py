#!/usr/bin/env python3
"""slr_rank_memory.py — one rank's anonymous memory and time to first batch
over a .slr dataset, global vs window shuffle, each in a fresh process.

    PYTHONPATH=build/python /usr/bin/python3 bench/slr_rank_memory.py DATASET.slr [RANK WORLD]

Make a dataset of tiny records with `--make N PATH` (a 9-byte bytes column
holding the record number as 9 digits, and an int64 label). `--check PATH
WORLD` iterates every rank of WORLD fully in window mode and checks that the
ranks are disjoint, complete (only the padding repeats) and equal."""
import json
import subprocess
import sys
import time


def rss_anon_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(path, mode, rank, world):
    import numpy as np  # noqa: F401  (imported before the baseline)
    import sluice
    before = rss_anon_mb()
    t0 = time.perf_counter()
    ds = sluice.records(path)
    if mode != "none":
        ds = ds.shuffle(seed=0, mode=mode)
    ds = ds.shard(rank=rank, world_size=world).batch(4096)
    it = iter(ds.numpy())
    next(it)
    first = time.perf_counter() - t0
    after = rss_anon_mb()
    for _ in range(50):
        next(it)
    print(json.dumps({"mode": mode, "first_batch_s": first, "anon_before_mb": before,
                      "anon_first_mb": after, "anon_after50_mb": rss_anon_mb()}))


def check(path, world):
    import numpy as np
    import sluice
    n = len(sluice.records(path).batch(1))
    counts = np.zeros(n, np.uint8)
    digits = 10 ** np.arange(8, -1, -1, dtype=np.int64)
    sizes = set()
    t0 = time.perf_counter()
    for rank in range(world):
        k = 0
        ds = (sluice.records(path).shuffle(seed=0, mode="window").shard(rank=rank, world_size=world)
              .batch(65536))
        for b in ds.numpy():
            ids = (np.asarray(b["x"]).astype(np.int64) - 48) @ digits
            counts[ids] += 1
            k += len(ids)
        sizes.add(k)
    per = -(-n // world)
    missing, extra = int((counts == 0).sum()), int(counts.sum(dtype=np.int64) - n)
    ok = missing == 0 and sizes == {per} and extra == per * world - n
    print(f"{n:,} records, {world} ranks, window shuffle, every rank fully: samples per rank "
          f"{sorted(sizes)}; missing {missing}; repeated {extra} (padding {per * world - n}); "
          f"{time.perf_counter() - t0:.0f} s; {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


def main():
    if sys.argv[1] == "--make":
        import sluice
        n, path = int(sys.argv[2]), sys.argv[3]
        with sluice.Writer(path, [("x", "bytes"), ("label", "int64")], fsync=False) as w:
            for i in range(n):
                w.append({"x": b"%09d" % (i % 10**9), "label": i % 10})
        return 0
    if sys.argv[1] == "--check":
        return check(sys.argv[2], int(sys.argv[3]))
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    path = sys.argv[1]
    rank, world = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (3, 8)
    for mode in ("none", "global", "window"):
        r = subprocess.run([sys.executable, __file__, "--child", path, mode, str(rank),
                            str(world)], capture_output=True, text=True, check=True)
        d = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"{mode:7s} rank {rank}/{world}: first batch {d['first_batch_s'] * 1000:.0f} ms; "
              f"anonymous memory +{d['anon_first_mb'] - d['anon_before_mb']:.1f} MB at the first "
              f"batch, +{d['anon_after50_mb'] - d['anon_before_mb']:.1f} MB after 50 more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
