#!/usr/bin/python3
"""Python iteration overhead: batches/s of one pipeline consumed from Python
(numpy and torch) vs the same spec consumed from C, side by side.

    /usr/bin/python3 bench/py_overhead.py [--build build] [--repeats 5] [--batch 64]

Two comparisons. Across processes: `sluice bench SPEC --json` (when the
command has it) and bench/py_c_consumer.c (compiled here against
<build>/libsluice.a; a loop of sl_pipeline_next + sl_batch_release, nothing
else) vs Python processes iterating ds.numpy() / ds.torch(). In one process:
epochs drained in C (Pipeline._drain) alternate with epochs iterated from
Python on the same pipeline, which removes the process-to-process variation
BENCH.md warns about. Data: Fashion-MNIST
packed to .slr (small samples: the per-batch cost of Python shows most).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_common import (PY, REPO, env_with_sluice, json_lines, machine, med_spread,  # noqa: E402
                       static_link_args)

ROOT = "/usr/share/datasets/fashion-mnist"

PY_RUN = r"""
import json, sys, time
import sluice
spec, epochs, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ds = sluice.from_spec(spec)
for ep in range(epochs):
    ds.set_epoch(ep)
    t0 = time.perf_counter(); n = 0
    for b in (ds.torch() if kind == "torch" else ds.numpy()):
        n += 1
    dt = time.perf_counter() - t0
    print(json.dumps({"epoch": ep, "batches": n, "batches_s": n / dt}), flush=True)
"""


# In one process, on one pipeline: epochs consumed by C (Pipeline._drain:
# sl_pipeline_next + sl_batch_release with the GIL released) alternate with
# epochs iterated from Python, so both see the same memory layout, the same
# threads and the same machine load. The fairest side-by-side there is.
INPROC_RUN = r"""
import json, statistics, sys, time
import sluice
spec, rounds = sys.argv[1], int(sys.argv[2])
ds = sluice.from_spec(spec)
eng = ds._get_engine()
rates = {"c": [], "py-numpy": [], "py-torch": []}
ep = 0
def one(mode):
    global ep
    ds.set_epoch(ep); ep += 1
    t0 = time.perf_counter()
    if mode == "c":
        n, _ = eng._drain()
    else:
        n = 0
        for b in (ds.numpy() if mode == "py-numpy" else ds.torch()):
            n += 1
    return n / (time.perf_counter() - t0)
one("c"); one("py-numpy"); one("py-torch")  # warm-up
modes = ["c", "py-numpy", "py-torch"]
for r in range(rounds):
    for mode in modes[r % 3:] + modes[:r % 3]:  # rotate: no mode always runs first
        rates[mode].append(one(mode))
print(json.dumps({k: statistics.median(v) for k, v in rates.items()}))
"""


def build_consumer(build, work):
    exe = os.path.join(work, "py_c_consumer")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(REPO, "bench", "py_c_consumer.c"),
                    "-I", os.path.join(REPO, "include")] + static_link_args(build), check=True)
    return exe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    env = env_with_sluice(a.build)
    work = a.workdir or tempfile.mkdtemp(prefix="sluice-overhead-")
    slr = os.path.join(work, "fmnist-train.slr")
    sys.path.insert(0, os.path.join(a.build, "python"))
    import sluice
    if not os.path.exists(slr):
        sluice.pack([f"{ROOT}/train-images-idx3-ubyte.gz", f"{ROOT}/train-labels-idx1-ubyte.gz"], slr)
    ds = sluice.records(slr).shuffle(seed=0).batch(a.batch).prefetch(4)
    spec = os.path.join(work, "spec.json")
    with open(spec, "w") as f:
        f.write(ds.to_json())
    exe = build_consumer(a.build, work)
    cli = os.path.join(a.build, "sluice")
    has_bench = subprocess.run([cli, "bench", "--help"], capture_output=True).returncode == 0

    runs = {}
    for _ in range(a.repeats):
        cmds = {"c": [exe, spec, str(a.epochs)],
                "py-numpy": [PY, "-c", PY_RUN, spec, str(a.epochs), "numpy"],
                "py-torch": [PY, "-c", PY_RUN, spec, str(a.epochs), "torch"]}
        for name, cmd in cmds.items():
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
            rates = [r["batches_s"] for r in json_lines(out)][1:]  # drop the warm-up epoch
            runs.setdefault(name, []).append(statistics.median(rates))
        if has_bench:
            out = subprocess.run([cli, "bench", spec, "--json"], capture_output=True, text=True)
            recs = json_lines(out.stdout)
            if out.returncode == 0 and recs:
                r = recs[-1]
                bs = r.get("batches_per_s") or r.get("batches_s")
                if bs is None and r.get("samples_per_s"):
                    bs = r["samples_per_s"] / a.batch
                if bs:
                    runs.setdefault("sluice-bench", []).append(bs)
    inproc = {}
    for _ in range(a.repeats):
        out = subprocess.run([PY, "-c", INPROC_RUN, spec, "10"], capture_output=True, text=True,
                             env=env, check=True).stdout
        for k, v in json_lines(out)[-1].items():
            inproc.setdefault(k, []).append(v)
    summary = {"machine": machine(), "spec": ds.spec, "repeats": a.repeats}
    for k, v in inproc.items():
        m, spread = med_spread(v)
        summary[f"inprocess-{k}"] = {"batches_s": round(m, 1),
                                     "spread": [round(x, 1) for x in spread]}
    for k in ("py-numpy", "py-torch"):
        summary[f"inprocess-{k}_slower_than_c_pct"] = round(
            100 * (1 - summary[f"inprocess-{k}"]["batches_s"] / summary["inprocess-c"]["batches_s"]), 1)
    for k, v in runs.items():
        m, spread = med_spread(v)
        summary[k] = {"batches_s": round(m, 1), "spread": [round(s, 1) for s in spread]}
    for k in ("py-numpy", "py-torch"):
        summary[f"{k}_slower_than_c_pct"] = round(
            100 * (1 - summary[k]["batches_s"] / summary["c"]["batches_s"]), 1)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
