#!/usr/bin/python3
"""The ImageNet-style training pipeline from Python: sluice vs PyTorch
DataLoader over torchvision's ImageFolder (bench/torch_peer.py imagefolder),
side by side, same transforms, batch 64: images/s and peak memory.

    /usr/bin/python3 bench/make_photos.py                  # once: data/photos
    /usr/bin/python3 bench/py_imagefolder.py [--build build] [--repeats 3] [--data DIR]

sluice: pack once (not timed), then records().shuffle().decode()
.random_resized_crop(224).flip().normalize(chw).batch(64).prefetch(P),
iterated as torch tensors. Peer: DataLoader with num_workers 0 and 2
(persistent, prefetch_factor 2, its default). Rounds are interleaved
(sluice, peer w0, peer w2, sluice, ...). The first epoch of each run is
dropped (warm-up) for images/s.

Memory (the issue's definition): peak, over samples every 10 ms, of the
summed VmRSS of the run's process and all its descendants (DataLoader's
workers), minus the main process's VmRSS just after `import torch` (each run
imports torch first and reports it: py_common.TORCH_BASELINE). Same batch (64)
and same prefetch depth on both sides: DataLoader keeps prefetch_factor x
num_workers = 2 x 2 = 4 batches requested ahead of the consumer; sluice gets
prefetch(P) with P = 4 (--prefetch). `net_mb_ratio` is sluice's net peak over
the net peak of the DataLoader with the same depth (workers 2).
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_common import (PY, REPO, RUN_FILE, TORCH_BASELINE, env_with_sluice, machine,  # noqa: E402
                       med_spread, run_net_measured)

PEER = os.path.join(REPO, "bench", "torch_peer.py")

SLUICE_RUN = TORCH_BASELINE + r"""
import json, sys, time
import sluice
slr, epochs, batch, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ds = (sluice.records(slr).shuffle(seed=0).decode("image").random_resized_crop("image", 224)
      .flip("image").normalize("image", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225],
                               layout="chw")
      .batch(batch).prefetch(depth).epochs(epochs))
for ep in range(epochs):
    ds.set_epoch(ep)
    t0 = time.perf_counter(); seen = 0
    for b in ds.torch():
        seen += b["image"].shape[0]
    dt = time.perf_counter() - t0
    st = ds.stats()
    print(json.dumps({"epoch": ep, "img_s": seen / dt, "bound": st.get("bound")}), flush=True)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=os.path.join(REPO, "data", "photos", "imagenet-like"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--prefetch", type=int, default=4,
                    help="sluice's prefetch depth (DataLoader: prefetch_factor 2 x 2 workers)")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    if not os.path.isdir(a.data):
        sys.exit(f"no photos at {a.data}: make them with /usr/bin/python3 bench/make_photos.py "
                 f"--root {os.path.dirname(a.data)}")
    env = env_with_sluice(a.build)
    work = a.workdir or tempfile.mkdtemp(prefix="sluice-imgbench-")
    slr = os.path.join(work, "photos.slr")
    if not os.path.exists(slr):
        sys.path.insert(0, os.path.join(a.build, "python"))
        import sluice
        sluice.pack(a.data, slr)
    runs = {}
    for _ in range(a.repeats):
        load = os.getloadavg()[0]
        recs, peak, base, net = run_net_measured(
            [PY, "-c", SLUICE_RUN, slr, str(a.epochs), str(a.batch), str(a.prefetch)], env=env)
        runs.setdefault("sluice-torch", []).append(
            (max(r["img_s"] for r in recs[1:] or recs), peak, net, load))
        for w in a.workers.split(","):
            cmd = [PY, "-c", RUN_FILE, PEER, "imagefolder", "--data", a.data, "--workers", w, "--epochs",
                   str(a.epochs), "--batch", str(a.batch), "--persistent",
                   "1" if int(w) > 0 else "0"]
            load = os.getloadavg()[0]
            recs, peak, base, net = run_net_measured(cmd)
            runs.setdefault(f"dataloader-w{w}", []).append(
                (max(r["img_s"] for r in recs[1:] or recs), peak, net, load))
    summary = {"machine": machine(), "data": a.data, "batch": a.batch, "repeats": a.repeats,
               "sluice_prefetch": a.prefetch}
    for k, v in runs.items():
        m, spread = med_spread(x[0] for x in v)
        nm, nspread = med_spread(x[2] for x in v)
        summary[k] = {"img_s": round(m, 1), "spread": [round(s, 1) for s in spread],
                      "peak_rss_mb": round(max(x[1] for x in v), 1),
                      "net_mb": round(nm, 1), "net_mb_spread": [round(s, 1) for s in nspread],
                      "load": [round(x[3], 2) for x in v]}
    best = max((summary[k]["img_s"], k) for k in summary if k.startswith("dataloader"))
    summary["best_dataloader"] = best[1]
    summary["ratio_vs_best_dataloader"] = round(summary["sluice-torch"]["img_s"] / best[0], 2)
    same_depth = "dataloader-w2" if "dataloader-w2" in summary else best[1]
    summary["net_mb_ratio"] = round(
        summary["sluice-torch"]["net_mb"] / summary[same_depth]["net_mb"], 3)
    summary["net_mb_ratio_vs"] = same_depth
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
