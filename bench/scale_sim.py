#!/usr/bin/env python3
"""scale_sim.py — a 10,000,000,000-record, 100,000-shard, 1,024-rank plan on
one machine, through the synthetic source (records computed from their index,
nothing stored) and the windowed shuffle.

Measured, per rank, each in a fresh process: anonymous memory (RssAnon of
/proc/self/status) before the pipeline, after its first batch and after
iterating; time from creating the pipeline to its first batch; the shards the
rank touched. Checked:
  1. a few ranks iterated (default 3 ranks x 300 batches of 4,096): no sample
     twice, no sample on two ranks, every index < N;
  2. many ranks by their plan (default all 1,024): each rank's first batch and
     a batch at a random position reached by resuming there (the state's
     position, O(1)) — all disjoint, every rank the same number of batches;
     one resumed batch compared with the batch iteration gives;
  3. at a smaller scale (default 10,000,019 records, 1,000 shards, 64 ranks),
     every rank iterated fully: the union is exactly the dataset, every rank
     the same count, only the padding repeats.
Exits 1 when a check fails.

    PYTHONPATH=build/python /usr/bin/python3 bench/scale_sim.py [--quick]
        [--window W --block B]   (--window 400000 --block 100000: shard-sized blocks)
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

import numpy as np

import sluice

N, SHARDS, WORLD, BATCH = 10_000_000_000, 100_000, 1024, 4096


def rss_anon_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


SHUFFLE = {"mode": "window"}  # --window / --block add to it


def dataset(n, shards, rank, world, seed=0, window=None):
    spec = {"source": {"synthetic": {"records": n, "shards": shards},
                       "shuffle": dict(SHUFFLE),
                       "shard": {"index": rank, "count": world, "equal": "pad"}},
            "seed": seed, "ops": [{"op": "batch", "size": BATCH}]}
    if window:
        spec["source"]["shuffle"].update(window=window)
        spec["source"]["shuffle"].pop("block", None)
    return sluice.from_spec(spec)


def one_rank(rank, batches):
    """Run in a child: print a JSON line of this rank's figures and the
    indices it saw (to a file)."""
    seen = np.full(batches * BATCH, -1, np.int64)  # touched before the baseline
    shards = np.zeros(SHARDS, np.bool_)
    shards[:] = False
    before = rss_anon_mb()
    t0 = time.perf_counter()
    ds = dataset(N, SHARDS, rank, WORLD)
    it = iter(ds.numpy())
    first = next(it)
    t_first = time.perf_counter() - t0
    after_first = rss_anon_mb()
    seen[:BATCH] = np.asarray(first["index"])
    shards[np.asarray(first["shard"])] = True
    t1 = time.perf_counter()
    for k in range(1, batches):
        b = next(it)
        seen[k * BATCH:(k + 1) * BATCH] = np.asarray(b["index"])
        shards[np.asarray(b["shard"])] = True
    rate = (batches - 1) * BATCH / (time.perf_counter() - t1)
    after = rss_anon_mb()
    out = f"/tmp/scale_sim_{os.getpid()}_{rank}.npy"
    np.save(out, seen)
    print(json.dumps({"rank": rank, "len": len(ds), "rss_before_mb": before,
                      "rss_first_mb": after_first, "rss_after_mb": after,
                      "first_batch_s": t_first, "samples_per_s": rate,
                      "shards_touched": int(shards.sum()), "indices": out}))


def check_iterated(ranks, batches):
    print(f"1. {len(ranks)} ranks of {WORLD}, {N:,} records, {SHARDS:,} shards, shuffle "
          f"{SHUFFLE}: {batches} batches of {BATCH} each, one process per rank")
    ok, sets = True, []
    for r in ranks:
        extra = [f"--{k}={v}" for k, v in SHUFFLE.items() if k != "mode"]
        res = subprocess.run([sys.executable, __file__, "--child", str(r), str(batches)] + extra,
                             capture_output=True, text=True, check=True)
        d = json.loads(res.stdout.strip().splitlines()[-1])
        idx = np.load(d["indices"])
        os.unlink(d["indices"])
        dup = len(idx) - len(np.unique(idx))
        ok &= dup == 0 and int(idx.max()) < N and d["len"] == -(-(-(-N // WORLD)) // BATCH)
        sets.append(idx)
        print(f"   rank {r:4d}: first batch {d['first_batch_s'] * 1000:.0f} ms; anonymous memory "
              f"{d['rss_before_mb']:.1f} MB before the pipeline, {d['rss_first_mb']:.1f} after "
              f"the first batch, {d['rss_after_mb']:.1f} after {batches}; "
              f"{d['samples_per_s'] / 1e6:.2f} M samples/s; {d['shards_touched']:,} of "
              f"{SHARDS:,} shards touched; {d['len']:,} batches; duplicates {dup}")
    allidx = np.concatenate(sets)
    cross = len(allidx) - len(np.unique(allidx))
    print(f"   samples on two ranks: {cross}")
    return ok and cross == 0


def check_plans(nranks, seed=0):
    ranks = sorted(random.Random(seed).sample(range(WORLD), nranks)) if nranks < WORLD \
        else list(range(WORLD))
    print(f"2. {len(ranks)} ranks by their plan: first batch + a batch at a random position "
          f"(resumed there)")
    rng = random.Random(seed + 1)
    t0 = time.perf_counter()
    got, lens, ok = [], set(), True
    for r in ranks:
        ds = dataset(N, SHARDS, r, WORLD)
        it = iter(ds.numpy())
        got.append(np.asarray(next(it)["index"]).copy())
        state = ds.state_dict()
        lens.add(len(ds))
        ds.close()
        k = rng.randrange(1, len(ds) - 1)
        state.update(batch=k, pos=k * BATCH)
        ds = dataset(N, SHARDS, r, WORLD)
        ds.load_state_dict(state)
        got.append(np.asarray(next(iter(ds.numpy()))["index"]).copy())
        ds.close()
    el = time.perf_counter() - t0
    allidx = np.concatenate(got)
    cross = len(allidx) - len(np.unique(allidx))
    ok &= cross == 0 and len(lens) == 1 and int(allidx.max()) < N
    print(f"   {len(allidx):,} samples, repeated: {cross}; batches per rank: {sorted(lens)}; "
          f"{el / len(ranks) * 1000:.0f} ms per rank (two pipelines)")
    # a resumed position gives what iteration gives
    ds = dataset(N, SHARDS, 517, WORLD)
    it = iter(ds.numpy())
    want = [np.asarray(next(it)["index"]).copy() for _ in range(6)][5]
    state = ds.state_dict()
    ds.close()
    state.update(batch=5, pos=5 * BATCH)
    ds = dataset(N, SHARDS, 517, WORLD)
    ds.load_state_dict(state)
    same = np.array_equal(np.asarray(next(iter(ds.numpy()))["index"]), want)
    print(f"   rank 517 resumed at batch 5 equals batch 5 iterated: {same}")
    return ok and same


def check_full(n, shards, world):
    print(f"3. {n:,} records, {shards:,} shards, {world} ranks, every rank iterated fully")
    counts = np.zeros(n, np.int32)
    sizes = set()
    t0 = time.perf_counter()
    for r in range(world):
        k = 0
        for b in dataset(n, shards, r, world, window=65536).numpy():
            idx = np.asarray(b["index"])
            np.add.at(counts, idx, 1)
            k += len(idx)
        sizes.add(k)
    per = -(-n // world)
    missing = int((counts == 0).sum())
    extra = int(counts.sum() - n)
    ok = missing == 0 and sizes == {per} and extra == per * world - n
    print(f"   samples per rank: {sorted(sizes)} (ceil(n / world) = {per}); missing {missing}; "
          f"repeated {extra} (padding: {per * world - n}); {time.perf_counter() - t0:.1f} s")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ranks", default="0,517,1023", help="ranks iterated (check 1)")
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--plan-ranks", type=int, default=WORLD)
    ap.add_argument("--quick", action="store_true", help="fewer batches and ranks")
    ap.add_argument("--window", type=int, help="window positions (default 65,536)")
    ap.add_argument("--block", type=int, help="records per block (default window / 64; "
                    "100,000 = one shard)")
    a = ap.parse_args()
    for k in ("window", "block"):
        if getattr(a, k):
            SHUFFLE[k] = getattr(a, k)
    if a.child:
        one_rank(*a.child)
        return 0
    if a.quick:
        a.batches, a.plan_ranks = 50, 64
    print(f"nproc {os.cpu_count()}; {open('/proc/loadavg').read().split()[0]} load; "
          f"{subprocess.run(['grep', '-m1', 'model name', '/proc/cpuinfo'], capture_output=True, text=True).stdout.strip()}")
    ok = check_iterated([int(x) for x in a.ranks.split(",")], a.batches)
    ok &= check_plans(a.plan_ranks)
    ok &= check_full(1_000_003 if a.quick else 10_000_019, 1000, 64)
    print("all checks passed" if ok else "A CHECK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
