#!/usr/bin/python3
"""The ImageNet-style training pipeline from Python: sluice vs PyTorch
DataLoader over torchvision's ImageFolder (../shared/bench/torch_imagefolder.py),
side by side, same transforms, batch 64, images/s and peak RSS of all
processes.

    /usr/bin/python3 ../shared/bench/make_photos.py        # once: /tmp/sluice-photos
    /usr/bin/python3 bench/py_imagefolder.py [--build build] [--repeats 3]

sluice: pack once (not timed), then records().shuffle().decode()
.random_resized_crop(224).flip().normalize(chw).batch(64).prefetch(4),
iterated as torch tensors. Peer: DataLoader with num_workers 0 and 2
(persistent). The first epoch of each run is dropped (warm-up).
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_common import (PY, REPO, env_with_sluice, json_lines, machine, med_spread,  # noqa: E402
                       run_measured)

PEER = os.path.join(os.path.dirname(REPO), "shared", "bench", "torch_imagefolder.py")

SLUICE_RUN = r"""
import json, sys, time
import sluice
slr, epochs, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ds = (sluice.records(slr).shuffle(seed=0).decode("image").random_resized_crop("image", 224)
      .flip("image").normalize("image", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225],
                               layout="chw")
      .batch(batch).prefetch(4).epochs(epochs))
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
    ap.add_argument("--data", default="/tmp/sluice-photos/imagenet-like")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    env = env_with_sluice(a.build)
    work = a.workdir or tempfile.mkdtemp(prefix="sluice-imgbench-")
    slr = os.path.join(work, "photos.slr")
    if not os.path.exists(slr):
        sys.path.insert(0, os.path.join(a.build, "python"))
        import sluice
        sluice.pack(a.data, slr)
    runs = {}
    for _ in range(a.repeats):
        out, rss = run_measured([PY, "-c", SLUICE_RUN, slr, str(a.epochs), str(a.batch)], env=env)
        recs = json_lines(out)
        runs.setdefault("sluice-torch", []).append((max(r["img_s"] for r in recs[1:] or recs), rss))
        for w in a.workers.split(","):
            cmd = [PY, PEER, "--data", a.data, "--workers", w, "--epochs", str(a.epochs),
                   "--batch", str(a.batch), "--persistent", "1" if int(w) > 0 else "0"]
            out, rss = run_measured(cmd)
            recs = json_lines(out)
            runs.setdefault(f"dataloader-w{w}", []).append(
                (max(r["img_s"] for r in recs[1:] or recs), rss))
    summary = {"machine": machine(), "data": a.data, "batch": a.batch, "repeats": a.repeats}
    for k, v in runs.items():
        m, spread = med_spread(x[0] for x in v)
        summary[k] = {"img_s": round(m, 1), "spread": [round(s, 1) for s in spread],
                      "peak_rss_mb": round(max(x[1] for x in v), 1)}
    best = max((summary[k]["img_s"], k) for k in summary if k.startswith("dataloader"))
    summary["best_dataloader"] = best[1]
    summary["ratio_vs_best_dataloader"] = round(summary["sluice-torch"]["img_s"] / best[0], 2)
    summary["rss_ratio_vs_best_dataloader"] = round(
        summary["sluice-torch"]["peak_rss_mb"] / summary[best[1]]["peak_rss_mb"], 2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
