#!/usr/bin/python3
"""Autotune against a grid of hand settings, side by side in one run.

    /usr/bin/python3 bench/autotune_grid.py [--build build] [--repeats 3] [--seconds 3]
        [--photos /tmp/photos/imagenet-like] [--work /tmp/sluice-grid]

Pipelines (each from the CLI, `sluice bench --json`): Fashion-MNIST packed into
.slr, shuffled, batch 256; the ImageNet-style training chain (decode +
random_resized_crop 224 + flip + normalize, batch 64) over the packed photos.
Settings: the default (autotune) and `--threads N` for N = 1 .. nproc + 1,
interleaved, each `--repeats` times; medians, spread (min-max) and the ratio
autotune / best hand setting. Prints one JSON line per pipeline, then a table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FM = "/usr/share/datasets/fashion-mnist"


def bench(sluice, spec, seconds, threads):
    cmd = [sluice, "bench", spec, "--seconds", str(seconds), "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--photos", default="/tmp/photos/imagenet-like")
    ap.add_argument("--work", default="/tmp/sluice-grid")
    a = ap.parse_args()
    sluice = os.path.join(a.build, "sluice")
    os.makedirs(a.work, exist_ok=True)
    fm, img = os.path.join(a.work, "fm.slr"), os.path.join(a.work, "img.slr")
    if not os.path.exists(fm):
        subprocess.run([sluice, "pack", FM + "/train-images-idx3-ubyte.gz",
                        FM + "/train-labels-idx1-ubyte.gz", fm], check=True, capture_output=True)
    if not os.path.exists(img) and os.path.isdir(a.photos):
        subprocess.run([sluice, "pack", a.photos, img], check=True, capture_output=True)
    specs = {"fmnist": {"source": {"path": fm, "shuffle": True},
                        "ops": [{"op": "batch", "size": 256}]}}
    if os.path.exists(img):
        specs["imagenet"] = {"source": {"path": img, "shuffle": True}, "ops": [
            {"op": "decode", "column": "image"},
            {"op": "random_resized_crop", "column": "image", "size": 224},
            {"op": "flip", "column": "image", "p": 0.5},
            {"op": "normalize", "column": "image", "mean": [0.485, 0.456, 0.406],
             "std": [0.229, 0.224, 0.225], "layout": "chw", "dtype": "float32"},
            {"op": "batch", "size": 64}]}
    ncpu = os.cpu_count() or 1
    settings = [0] + list(range(1, ncpu + 2))
    rows = []
    for name, spec in specs.items():
        path = os.path.join(a.work, name + ".json")
        with open(path, "w") as f:
            json.dump(spec, f)
        rates = {t: [] for t in settings}
        verdict = ""
        for _ in range(a.repeats):
            for t in settings:
                d = bench(sluice, path, a.seconds, t)
                rates[t].append(d["samples_per_s"])
                if t == 0:
                    verdict = d["verdict"]
        med = {t: statistics.median(v) for t, v in rates.items()}
        best = max((t for t in settings if t), key=lambda t: med[t])
        row = dict(pipeline=name, auto=med[0], auto_spread=[min(rates[0]), max(rates[0])],
                   best_threads=best, best=med[best],
                   best_spread=[min(rates[best]), max(rates[best])],
                   grid={str(t): med[t] for t in settings if t},
                   ratio=med[0] / med[best], verdict=verdict,
                   load=open("/proc/loadavg").read().split()[:3])
        print(json.dumps(row), flush=True)
        rows.append(row)
    print("\n| pipeline | autotune (samples/s) | best hand setting | ratio |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['pipeline']} | {r['auto']:,.0f} | {r['best']:,.0f} (--threads {r['best_threads']}) "
              f"| {r['ratio']:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
