#!/usr/bin/python3
"""Fashion-MNIST end to end: sluice (from Python, torch tensors) vs PyTorch
DataLoader(TensorDataset) (bench/torch_peer.py fmnist), side by side.

    /usr/bin/python3 bench/py_fmnist.py [--build build] [--repeats 3] [--epochs 3]

Both sides: the 60,000 training images, shuffled each epoch, batch 256, no
model (sluice three ways: from the packed .slr as torch tensors and as numpy
arrays, and from arrays in memory with sluice.from_arrays as torch tensors —
the same situation as the peer's TensorDataset); images/s per epoch (first epoch dropped: warm-up) and the peak
resident memory of all their processes summed. Runs are interleaved.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_common import (PY, REPO, env_with_sluice, json_lines, machine, med_spread,  # noqa: E402
                       run_measured)

ROOT = "/usr/share/datasets/fashion-mnist"
PEER = os.path.join(REPO, "bench", "torch_peer.py")

SLUICE_RUN = r"""
import json, sys, time
import sluice
path, epochs, batch, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if kind == "arrays":  # in memory, as the peer's TensorDataset (loading not timed)
    import gzip, numpy as np
    def idx(p, skip):
        return np.frombuffer(gzip.open(p).read(), np.uint8, offset=skip)
    x = idx(path + "/train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
    y = idx(path + "/train-labels-idx1-ubyte.gz", 8).astype(np.int64)
    ds = sluice.from_arrays({"image": x, "label": y})
    kind = "torch"
else:
    ds = sluice.records(path)
ds = ds.shuffle(seed=0).batch(batch).prefetch(4)
for ep in range(epochs):
    ds.set_epoch(ep)
    t0 = time.perf_counter(); seen = 0
    it = ds.torch() if kind == "torch" else ds.numpy()
    for b in it:
        seen += b["image"].shape[0]
    dt = time.perf_counter() - t0
    print(json.dumps({"epoch": ep, "img_s": seen / dt, "seen": seen}), flush=True)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", default="0,2", help="DataLoader num_workers values")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    env = env_with_sluice(a.build)
    work = a.workdir or tempfile.mkdtemp(prefix="sluice-bench-")
    slr = os.path.join(work, "fmnist-train.slr")
    if not os.path.exists(slr):
        sys.path.insert(0, os.path.join(a.build, "python"))
        import sluice
        sluice.pack([f"{ROOT}/train-images-idx3-ubyte.gz", f"{ROOT}/train-labels-idx1-ubyte.gz"], slr)
    runs = {}
    for rep in range(a.repeats):
        for kind in ("torch", "numpy", "arrays"):
            src = ROOT if kind == "arrays" else slr
            out, rss = run_measured([PY, "-c", SLUICE_RUN, src, str(a.epochs), "256", kind], env=env)
            rates = [r["img_s"] for r in json_lines(out)][1:]
            runs.setdefault(f"sluice-{kind}", []).append((max(rates), rss))
        for w in a.workers.split(","):
            out, rss = run_measured([PY, PEER, "fmnist", "--workers", w, "--epochs", str(a.epochs)])
            rates = [r["img_s"] for r in json_lines(out)][1:]
            runs.setdefault(f"dataloader-w{w}", []).append((max(rates), rss))
    summary = {"machine": machine(), "data": "fashion-mnist train (60000), batch 256, shuffled",
               "repeats": a.repeats}
    for k, v in runs.items():
        m, spread = med_spread(x[0] for x in v)
        summary[k] = {"img_s": round(m), "spread": [round(s) for s in spread],
                      "peak_rss_mb": round(max(x[1] for x in v), 1)}
    best_peer = max((summary[k]["img_s"], k) for k in summary if k.startswith("dataloader"))
    for kind in ("torch", "numpy", "arrays"):
        summary[f"ratio_{kind}_vs_best_dataloader"] = round(
            summary[f"sluice-{kind}"]["img_s"] / best_peer[0], 2)
    summary["best_dataloader"] = best_peer[1]
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
