"""What opening remote .slr shards costs in round trips: `sluice cat` of the
first record of each shard of a dataset (a process each: the dataset's
open, the shard's open, one record), through tests/remote/delayproxy.c
holding every request MS milliseconds, with no shard cache (cache_bytes 0:
read by ranges). Prints, per sluice binary given, the wall time and the
proxy's counts (requests, and how many were in the delay at once): the
requests are deterministic, the time is about MS x the round trips.

    /usr/bin/python3 bench/remote_opens.py DATASET_DIR MS SLUICE [SLUICE...]

DATASET_DIR: a packed .slr dataset (`sluice pack PHOTOS DIR/train
--shard-size 16M`), served from its parent by nginx."""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "remote"))
import httpfix  # noqa: E402


def main():
    ds, ms, bins = os.path.abspath(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    root, name = os.path.split(ds)
    firsts = [s["first"] for s in json.load(open(os.path.join(ds, "manifest.json")))["shards"]]
    with tempfile.TemporaryDirectory() as w:
        proxy = os.path.join(w, "delayproxy")
        subprocess.run(["cc", "-O2", "-o", proxy, os.path.join(HERE, "..", "tests", "remote", "delayproxy.c")],
                       check=True)
        with httpfix.Nginx(root) as ng:
            for b in bins:
                px = httpfix.DelayProxy(proxy, ng.port, ms)
                env = dict(os.environ, SLUICE_CACHE_BYTES="0", SLUICE_CACHE_DIR=os.path.join(w, "cache"))
                t = time.monotonic()
                for i in firsts:
                    r = subprocess.run([b, "cat", f"http://127.0.0.1:{px.port}/{name}", "--index", str(i),
                                        "--column", "label"], env=env, capture_output=True, text=True)
                    if r.returncode:
                        sys.exit(f"{b}: {r.stderr}")
                took = time.monotonic() - t
                print(f"{b}: {len(firsts)} shards, {took:.2f} s ({took / len(firsts) * 1000:.0f} ms a shard); "
                      f"{px.close()}")


if __name__ == "__main__":
    main()
