"""Time to the first batch of a shuffled epoch over HTTP, and how the shard
opens before it are spread: a .slr dataset of NS small shards (each whole
after its open), served by nginx through tests/remote/httpfix.py's proxy
adding DELAY ms to every request, no shard cache. For each sluice binary
given: the seconds to the first batch and to the end of the epoch, the
requests and connections the proxy saw, the waves of shard opens (requests
arriving DELAY/2 or more after the previous one start a new wave) and,
with --strace, the threads the process started (clone calls, strace -f).

    /usr/bin/python3 bench/remote_first_batch.py [--shards NS] [--delay-ms D]
        [--runs R] [--strace] SLUICE_BIN...
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "remote"))
import httpfix  # noqa: E402


def make(root, ns):
    import numpy as np
    import sluice
    rng = np.random.default_rng(1)
    with sluice.Writer(os.path.join(root, "ds"), [("idx", "int64"), ("blob", "bytes")],
                       shard_bytes=20000, fsync=False) as w:
        for i in range(ns * 10):
            w.append({"idx": i, "blob": rng.integers(0, 256, 1800, dtype=np.uint8).tobytes()})
    return len(json.load(open(os.path.join(root, "ds", "manifest.json")))["shards"])


def one(exe, root, port, delay_ms, use_strace):
    px = httpfix.FaultProxy(port, delay_ms=delay_ms)
    px.requests = httpfix.TimedList()
    try:
        spec = {"source": {"path": px.url + "/ds/", "shuffle": True}, "seed": 3, "epochs": 1,
                "ops": [{"op": "batch", "size": 16}]}
        sp = os.path.join(root, "spec.json")
        open(sp, "w").write(json.dumps(spec))
        env = dict(os.environ, SLUICE_CACHE_BYTES="0", SLUICE_CACHE_DIR=os.path.join(root, "cache"))
        cmd = [exe, "run", sp, "--digest"]
        so = os.path.join(root, "strace.txt")
        if use_strace:
            cmd = ["strace", "-f", "-c", "-e", "trace=clone,clone3", "-o", so] + cmd
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
        first = None
        for line in p.stdout:
            if first is None and ":" in line:
                first = time.monotonic() - t0
        if p.wait() != 0:
            raise SystemExit(f"{exe} failed ({p.returncode})")
        total = time.monotonic() - t0
        opens = [t for (_, path), t in zip(px.requests, px.requests.times) if path.endswith(".slr")]
        waves, last = 0, None
        for t in opens:
            if last is None or t - last >= delay_ms / 2000:
                waves += 1
            last = t
        threads = None
        if use_strace:
            threads = sum(int(m.group(1)) for m in
                          re.finditer(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?clone3?$",
                                      open(so).read(), re.M))
        return first, total, len(px.requests), px.conns, waves, threads
    finally:
        px.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=12)
    ap.add_argument("--delay-ms", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--strace", action="store_true")
    ap.add_argument("sluice", nargs="+")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="sluice-first-batch-")
    ns = make(root, a.shards)
    print(f"{ns} shards, {a.delay_ms} ms a request")
    print("| build | first batch s | epoch s | requests | connections | waves of opens "
          "(incl. shard 0's for the schema) | threads started |")
    print("|---|---|---|---|---|---|---|")
    with httpfix.Nginx(root) as ng:
        for exe in a.sluice:
            rows = [one(exe, root, ng.port, a.delay_ms, a.strace) for _ in range(a.runs)]
            col = lambda k, f: "–".join(sorted({f(r[k]) for r in rows}))  # noqa: E731
            print(f"| {exe} | {col(0, lambda v: f'{v:.2f}')} | {col(1, lambda v: f'{v:.2f}')} | "
                  f"{col(2, str)} | {col(3, str)} | {col(4, str)} | {col(5, str)} |", flush=True)


if __name__ == "__main__":
    main()
