"""Opening many WebDataset shards with sidecar indexes: what the open costs
and what a rank that reads a few shards fetches, for two builds side by side.

    /usr/bin/python3 bench/lazy_shards.py --sluice build/sluice \
        [--base OTHER/build/sluice] [--shards 500] [--samples 40] [--bytes 10000]

Makes SHARDS tar shards of SAMPLES samples (a random .bin of BYTES bytes and a
.cls label each) in a temporary directory, indexes them with `sluice index`,
and for each build reports:
  - local: `sluice info --json` over all shards: wall seconds (best of 3) and
    the shard files it opened (strace, openat of *.tar);
  - remote (nginx on localhost, tests/remote/httpfix.py): `sluice info` over
    the URLs with an empty shard cache: wall seconds and the bytes the cache
    holds afterwards (shards fetched whole), then `sluice cat --index I` of
    one record of shard 3: bytes fetched for it.
Figures and the command go in bench/README.md.
"""
import argparse
import io
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "remote"))
import httpfix  # noqa: E402


def make(root, shards, samples, nbytes, sluice):
    rng = random.Random(1)
    paths = []
    for s in range(shards):
        p = os.path.join(root, f"shard-{s:04d}.tar")
        with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as t:
            for j in range(samples):
                i = s * samples + j
                for ext, body in (("cls", str(i % 1000).encode()),
                                  ("bin", rng.randbytes(nbytes))):
                    ti = tarfile.TarInfo(f"k{i:08d}.{ext}")
                    ti.size = len(body)
                    t.addfile(ti, io.BytesIO(body))
        paths.append(p)
    lst = os.path.join(root, "list.txt")
    with open(lst, "w") as f:
        f.write("\n".join(paths) + "\n")
    subprocess.run([sluice, "index", "@" + lst], check=True, capture_output=True)
    return paths


def env_with(cache):
    e = dict(os.environ)
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        e.pop(k, None)
    e["SLUICE_CACHE_DIR"] = cache
    return e


def du(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
               if not f.startswith(".") and not f.endswith(".lock")) if os.path.isdir(d) else 0


def local(sluice, pattern):
    best = None
    for _ in range(3):
        t = time.monotonic()
        subprocess.run([sluice, "info", "--json", pattern], check=True, capture_output=True)
        dt = time.monotonic() - t
        best = dt if best is None else min(best, dt)
    r = subprocess.run(["strace", "-f", "-e", "trace=openat", sluice, "info", "--json", pattern],
                       capture_output=True, text=True)
    tars = sum(1 for line in r.stderr.splitlines() if '.tar"' in line and "openat" in line)
    return best, tars


def remote(sluice, url_pattern, index, tmp):
    cache = tempfile.mkdtemp(dir=tmp, prefix="cache-")
    t = time.monotonic()
    subprocess.run([sluice, "info", url_pattern], check=True, capture_output=True,
                   env=env_with(cache))
    dt = time.monotonic() - t
    opened = du(cache)
    cache2 = tempfile.mkdtemp(dir=tmp, prefix="cache-")
    subprocess.run([sluice, "cat", url_pattern, "--index", str(index), "--column", "cls"],
                   check=True, capture_output=True, env=env_with(cache2))
    return dt, opened, du(cache2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--base")
    ap.add_argument("--shards", type=int, default=500)
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--bytes", type=int, default=10000)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sluice-lazy-")
    try:
        root = os.path.join(tmp, "data")
        os.makedirs(root)
        make(root, a.shards, a.samples, a.bytes, a.sluice)
        last = f"{a.shards - 1:04d}"
        pattern = os.path.join(root, "shard-{0000.." + last + "}.tar")
        total = sum(os.path.getsize(os.path.join(root, f)) for f in os.listdir(root)
                    if f.endswith(".tar"))
        print(f"{a.shards} shards x {a.samples} samples, {total / 1e6:.1f} MB of tar, indexed")
        builds = [("this", a.sluice)] + ([("base", a.base)] if a.base else [])
        with httpfix.Nginx(root) as ng:
            for name, b in builds:
                sec, tars = local(b, pattern)
                print(f"{name}: local  info: {sec * 1000:.0f} ms, {tars} shard files opened")
                url = ng.url + "/shard-{0000.." + last + "}.tar"
                sec, opened, one = remote(b, url, 3 * a.samples, tmp)
                print(f"{name}: remote info: {sec * 1000:.0f} ms, {opened / 1e6:.1f} MB fetched "
                      f"into the cache; `cat` of one record of shard 3: {one / 1e6:.2f} MB")
            for f in os.listdir(root):
                if f.endswith(".slidx"):
                    os.unlink(os.path.join(root, f))
            for name, b in builds:
                url = ng.url + "/shard-{0000.." + last + "}.tar"
                env = env_with(tempfile.mkdtemp(dir=tmp, prefix="cache-"))
                env["SLUICE_CACHE_BYTES"] = "0"
                t = time.monotonic()
                r = subprocess.run(["/usr/bin/time", "-f", "%M", b, "cat", url, "--index",
                                    str(3 * a.samples), "--column", "cls"], env=env,
                                   capture_output=True, text=True, check=True)
                dt = time.monotonic() - t
                rss = int(r.stderr.strip().splitlines()[-1])
                print(f"{name}: remote, no indexes, no disk cache: `cat` {dt * 1000:.0f} ms, "
                      f"peak RSS {rss / 1024:.0f} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
