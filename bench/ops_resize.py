#!/usr/bin/python3
"""Resize alone: sluice vs PIL vs OpenCV on the same decoded photos, one
thread each, side by side in one run; medians of a few repeats and ratios.

    /usr/bin/python3 bench/ops_resize.py [--lib build/libsluice.so]
        [--data data/photos/imagenet-like] [--limit 500] [--repeats 5]

Work: every image (RGB, ~400x300..500x500) to 224x224, and to its 256-pixel
shorter side. sluice and PIL use the same antialiased bilinear filter (PIL's
BILINEAR; sluice's output equals PIL's pixel for pixel). OpenCV has no
antialiased bilinear: INTER_AREA (its antialiased shrink) and INTER_LINEAR
(no antialiasing, cheaper, different result) are both shown. sluice is called
through ctypes with a preallocated output, so its figure includes the ctypes
call overhead (a few microseconds per image), which only makes it look slower.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import ops_ref_lib as R  # noqa: E402

try:
    import cv2
    cv2.setNumThreads(1)
except ImportError:  # python3-opencv is in scripts/deps.sh
    cv2 = None

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_images(root, limit):
    paths = []
    for d, _, fs in sorted(os.walk(root)):
        paths += [os.path.join(d, f) for f in sorted(fs) if f.lower().endswith((".jpg", ".jpeg"))]
    paths = paths[:limit]
    return [np.asarray(Image.open(p).convert("RGB")) for p in paths]


def shorter(h, w, s):
    return (s, int(s * w / h)) if h <= w else (int(s * h / w), s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(REPO, "build", "libsluice.so"))
    ap.add_argument("--data", default=os.path.join(REPO, "data", "photos", "imagenet-like"))
    ap.add_argument("--limit", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    os.environ["SLUICE_LIB"] = a.lib
    R.LIB_PATH = a.lib
    ops = R.load()
    if ops is None:
        sys.exit("no library at %s" % a.lib)
    imgs = load_images(a.data, a.limit)
    if not imgs:
        sys.exit("no images under %s" % a.data)
    pils = [Image.fromarray(x) for x in imgs]
    targets = {"224x224": [(224, 224)] * len(imgs),
               "shorter256": [shorter(x.shape[0], x.shape[1], 256) for x in imgs]}
    outs = {k: [np.empty((h, w, 3), np.uint8) for h, w in v] for k, v in targets.items()}

    def run_sluice(k):
        for x, o, (h, w) in zip(imgs, outs[k], targets[k]):
            s, _ = ops._image(x)
            t, _ = ops._view(o)
            rc = ops.lib.sl_image_resize(R.C.byref(s), h, w, R.BILINEAR, R.C.byref(t))
            assert rc == 0

    def run_pil(k):
        for p, (h, w) in zip(pils, targets[k]):
            p.resize((w, h), Image.BILINEAR)

    def run_cv(k, flag):
        for x, (h, w) in zip(imgs, targets[k]):
            cv2.resize(x, (w, h), interpolation=flag)

    peers = {"sluice": run_sluice, "pil": run_pil}
    if cv2 is not None:
        peers["cv2_area"] = lambda k: run_cv(k, cv2.INTER_AREA)
        peers["cv2_linear"] = lambda k: run_cv(k, cv2.INTER_LINEAR)
    print("machine: %d cores, %s; load %s; %d images" % (
        os.cpu_count(), open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].split(":", 1)[1].strip(),
        open("/proc/loadavg").read().split()[:3], len(imgs)))
    # same pixels as PIL (a check, not a benchmark)
    run_sluice("224x224")
    assert np.array_equal(outs["224x224"][0], np.asarray(pils[0].resize((224, 224), Image.BILINEAR)))
    for k in targets:
        rates = {n: [] for n in peers}
        for _ in range(a.repeats):
            for n, fn in peers.items():  # interleaved
                t0 = time.perf_counter()
                fn(k)
                rates[n].append(len(imgs) / (time.perf_counter() - t0))
        med = {n: statistics.median(v) for n, v in rates.items()}
        row = {"work": k, "img_s": {n: round(m, 1) for n, m in med.items()},
               "spread": {n: [round(min(v), 1), round(max(v), 1)] for n, v in rates.items()},
               "sluice_vs": {n: round(med["sluice"] / m, 2) for n, m in med.items() if n != "sluice"}}
        print(json.dumps(row))


if __name__ == "__main__":
    main()
