#!/usr/bin/env python3
"""slr_rank_memory.py — one rank's memory and time to first batch over a
.slr dataset (a file or a directory of shards), without shuffle and with the
global and window shuffles, each in a fresh process.

    PYTHONPATH=build/python /usr/bin/python3 bench/slr_rank_memory.py DATASET [RANK WORLD]

Make a dataset of tiny records with `--make N PATH [SHARDS]` (a 9-byte bytes
column holding the record number as 9 digits, and an int64 label; with
SHARDS, a directory of about that many shards). `--check PATH WORLD` iterates
every rank of WORLD fully in window mode and checks that the ranks are
disjoint, complete (only the padding repeats) and equal.

Reported per mode: time to the first batch of 4,096; anonymous memory
(RssAnon) and file-mapped memory (RssFile: the pages of mapped files this
process touched) at the first batch and after 50 more, as growth over the
process before it opened the dataset. For a directory also: the shards the
rank read in those 51 batches, the shard files it had mapped at the end
(/proc/self/maps), and the pages of the shards it did NOT read that are in
the page cache afterwards (mincore), every shard's pages having been dropped
from the cache (posix_fadvise DONTNEED) before the process started; window
shuffle is run twice, with the default blocks (1,024 records: a rank's blocks
lie in every shard) and with blocks of one shard (`window-shard`: a rank
reads its own shards only)."""
import bisect
import ctypes
import json
import mmap
import os
import subprocess
import sys
import time


def rss_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_anon_mb():
    return rss_mb("RssAnon")


def shard_list(path):
    """(files, firsts) of a dataset directory, ([], []) for a single file."""
    if not os.path.isdir(path):
        return [], []
    man = json.load(open(os.path.join(path, "manifest.json")))
    return ([os.path.join(path, s["file"]) for s in man["shards"]],
            [s["first"] for s in man["shards"]])


def mapped_shards(path):
    files = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split(None, 5)[-1].strip()
            if p.startswith(path.rstrip("/") + "/shard-"):
                files.add(p)
    return len(files)


def child(path, mode, rank, world):
    import numpy as np  # noqa: F401  (imported before the baseline)
    import sluice
    files, firsts = shard_list(path)
    before, fbefore = rss_anon_mb(), rss_mb("RssFile")
    t0 = time.perf_counter()
    ds = sluice.records(path)
    if mode == "window-shard":
        block = firsts[1] if len(firsts) > 1 else 1024
        ds = ds.shuffle(seed=0, mode="window", block=block, window=2 * block)
    elif mode != "none":
        ds = ds.shuffle(seed=0, mode=mode)
    ds = ds.shard(rank=rank, world_size=world).batch(4096)
    it = iter(ds.numpy())
    digits = 10 ** np.arange(8, -1, -1, dtype=np.int64)
    read = set()

    def note(b):
        if firsts:
            ids = (np.asarray(b["x"]).astype(np.int64) - 48) @ digits
            read.update(np.unique(np.searchsorted(firsts, ids, side="right") - 1).tolist())

    note(next(it))
    first = time.perf_counter() - t0
    after, fafter = rss_anon_mb(), rss_mb("RssFile")
    for _ in range(50):
        note(next(it))
    print(json.dumps({"mode": mode, "first_batch_s": first, "anon_before_mb": before,
                      "anon_first_mb": after, "anon_after50_mb": rss_anon_mb(),
                      "file_first_mb": fafter - fbefore,
                      "file_after50_mb": rss_mb("RssFile") - fbefore,
                      "shards_read": sorted(read), "shards_mapped": mapped_shards(path)}))


def drop_cache(files):
    os.sync()  # dirty pages (a dataset just written) cannot be dropped
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident_pages(p):
    """Pages of file `p` in the page cache (mincore over a fresh mapping,
    which itself touches nothing)."""
    size = os.path.getsize(p)
    if size == 0:
        return 0
    fd = os.open(p, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap " + p)
        try:
            vec = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore " + p)
            return sum(v & 1 for v in vec)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def main():
    if sys.argv[1] == "--make":
        import sluice
        n, path = int(sys.argv[2]), sys.argv[3]
        cols = [("x", "bytes"), ("label", "int64")]
        shard_bytes = 0
        if len(sys.argv) > 4:  # bytes a record takes, from a small file
            probe = path + ".probe.slr"
            with sluice.Writer(probe, cols, fsync=False) as w:
                for i in range(10000):
                    w.append({"x": b"%09d" % i, "label": i % 10})
            per = os.path.getsize(probe) / 10000
            os.unlink(probe)
            shard_bytes = int(per * n / int(sys.argv[4]) * 1.002) + 4096
        with sluice.Writer(path, cols, shard_bytes=shard_bytes, fsync=False) as w:
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
    files, _ = shard_list(path)
    modes = ("none", "global", "window") + (("window-shard",) if files else ())
    for mode in modes:
        drop_cache(files)
        r = subprocess.run([sys.executable, __file__, "--child", path, mode, str(rank),
                            str(world)], capture_output=True, text=True, check=True)
        d = json.loads(r.stdout.strip().splitlines()[-1])
        line = (f"{mode:12s} rank {rank}/{world}: first batch {d['first_batch_s'] * 1000:.0f} ms; "
                f"anonymous +{d['anon_first_mb'] - d['anon_before_mb']:.1f} MB at the first "
                f"batch, +{d['anon_after50_mb'] - d['anon_before_mb']:.1f} MB after 50 more; "
                f"file-mapped +{d['file_first_mb']:.1f} / +{d['file_after50_mb']:.1f} MB")
        if files:
            read = set(d["shards_read"])
            other = sum(resident_pages(p) for k, p in enumerate(files) if k not in read)
            line += (f"; shards read {len(read)} of {len(files)}, mapped at the end "
                     f"{d['shards_mapped']}; pages cached of shards not read {other}")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
