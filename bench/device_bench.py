#!/usr/bin/python3
"""The device layer's three speed figures (docs/DEVICE.md), each side by side
with its peer in one run:

  h2d    sluice's hand-off (batches written in pinned memory, one copy per
         column on a side stream) against copies from pinned memory of the
         same sizes (torch's .to(device, non_blocking=True) from a pinned
         tensor: one cudaMemcpyAsync each), in bytes/s. "sluice" times the
         hand-off with the batches already made (the queue holds them all);
         "sluice_from_numpy" times the whole pipeline, whose workers first
         copy each row into the pinned batch buffer, and "cpu_only" that
         pipeline without a device: the rate its workers make batches at;
  step   a training loop whose step takes --step-ms on the device
         (torch.cuda._sleep on the current stream, then a read of the
         batch): the time the loop waits for its next batch, sluice against
         DataLoader(pin_memory=True) + .cuda(non_blocking=True);
  train  the ImageNet-style chain (RandomResizedCrop 224 + flip + normalize,
         batch 64) into device tensors: sluice (CPU decode, uint8 crops
         copied, normalize on the device) against DataLoader at its best
         num_workers + .cuda(non_blocking=True). GPU JPEG decode's chain
         is measured by bench/gpu_checks.py (gpu_decode).

    /usr/bin/python3 bench/device_bench.py [--kind cuda|host] [--build build]
        [--photos /tmp/photos/imagenet-like] [--workers 0,4,16] [--repeats 3]
        [--parts h2d,step,train] [--step-ms 10] [--seconds 4]

--kind host runs the sluice side on the host backend (the same ring, events
and normalize, run by threads, "device" memory being ordinary memory) and
its peers on the CPU: a dry run of this script on a machine without a GPU,
whose figures say nothing about a GPU. Prints one JSON line per measurement
and a summary table of medians, spread and ratios. Speed is never asserted.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_common import PY, REPO, env_with_sluice, json_lines, machine  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]

# Each measurement runs in its own process (a clean CUDA context and no
# threads left over from the previous one); arguments come as JSON.
CHILD = r"""
import json, os, sys, time
import numpy as np
import torch
a = json.loads(sys.argv[1])
kind, part, who = a["kind"], a["part"], a["who"]
dev = "cuda" if kind == "cuda" else "cpu"

def sync():
    if kind == "cuda":
        torch.cuda.synchronize()

def forever(ds):
    # one pass of ds.torch() is one epoch
    ep = 0
    while True:
        ds.set_epoch(ep)
        for b in ds.torch():
            yield b
        ep += 1

def step_fn():
    # --step-ms of device time, then a read of the batch on the same stream
    if kind == "cuda":
        torch.cuda._sleep(a["sleep_cycles"])
    else:
        time.sleep(a["step_ms"] / 1000.0)

if part == "h2d":
    n, shape = a["batches"], tuple(a["shape"])
    nbytes = int(np.prod(shape))
    if who in ("sluice", "sluice_from_numpy", "cpu_only"):
        import sluice
        rows = shape[0] * 8
        if who == "sluice":
            # one epoch holds the warm-up and the timed batches: the queue
            # is never emptied by an epoch's end
            rows = shape[0] * (2 * n + 8)
        block = np.random.default_rng(0).integers(0, 256, (shape[0] * 8,) + shape[1:], np.uint8)
        arr = np.resize(block, (rows,) + shape[1:])
        ds = sluice.from_arrays({"x": arr}).batch(shape[0])
        if who == "sluice":
            # the hand-off alone: n batches already written in pinned batch
            # buffers (the queue holds them all), so the timed loop is the
            # ring's copies, not the workers' copy of the rows into pinned
            # memory (that is "sluice_from_numpy", bound by "cpu_only")
            ds = ds.prefetch(n)
        else:
            ds = ds.epochs(10**6)
        if who != "cpu_only":
            ds = ds.device(kind)
        it = iter(ds.torch()) if who == "sluice" else forever(ds)
        # warm-up; for "sluice" as long as the timed loop, so that the ring
        # has grown to the slots copies in flight need (each new slot is a
        # cudaMalloc) before the timing starts
        for _ in range(n if who == "sluice" else 8):
            next(it)
        sync()
        if who == "sluice":
            time.sleep(a.get("fill_s", 2.0))
        t0 = time.perf_counter()
        for _ in range(n):
            b = next(it)
        sync()
        dt = time.perf_counter() - t0
        ds.close()
    else:
        src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=(kind == "cuda"))
        dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        for _ in range(8):
            dst.copy_(src, non_blocking=True)
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            dst.copy_(src, non_blocking=True)
        sync()
        dt = time.perf_counter() - t0
    print(json.dumps({"part": part, "who": who, "bytes_s": n * nbytes / dt}))
elif part in ("step", "train"):
    steps = a["steps"]
    if who == "sluice":
        import sluice
        ds = (sluice.records(a["slr"]).shuffle(seed=0).decode("image")
              .random_resized_crop("image", 224).flip("image")
              .normalize("image", mean=%(MEAN)s, std=%(STD)s, layout="chw")
              .batch(64).prefetch(4).epochs(10**6))
        ds = ds.device(kind, normalize_on_device=True)
        it = forever(ds)
    else:
        import torchvision
        from torch.utils.data import DataLoader
        from torchvision import datasets, transforms
        tf = transforms.Compose([transforms.RandomResizedCrop(224),
                                 transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                                 transforms.Normalize(%(MEAN)s, %(STD)s)])
        dl = DataLoader(datasets.ImageFolder(a["photos"], tf), batch_size=64, shuffle=True,
                        num_workers=a["workers"], pin_memory=(kind == "cuda"),
                        persistent_workers=a["workers"] > 0, drop_last=True)

        def loop():
            while True:
                for x, y in dl:
                    yield {"image": x.to(dev, non_blocking=True),
                           "label": y.to(dev, non_blocking=True)}
        it = loop()
    for _ in range(4):  # warm-up: threads or worker processes start
        next(it)
    sync()
    waited, t0 = 0.0, time.perf_counter()
    for _ in range(steps):
        w0 = time.perf_counter()
        b = next(it)
        waited += time.perf_counter() - w0
        if part == "step":
            step_fn()
        float(b["image"][0, 0, 0, 0])  # the step reads its batch (waits for its copy)
    sync()
    dt = time.perf_counter() - t0
    out = {"part": part, "who": who, "workers": a.get("workers"), "img_s": steps * 64 / dt,
           "wait_ms_per_step": 1000 * waited / steps, "step_ms": 1000 * dt / steps}
    if who == "sluice":
        st = ds.stats()
        out.update(h2d_bytes_per_s=st["h2d_bytes_per_s"], device_wait_s=st["device_wait_s"],
                   bound=st.get("bound"))
    print(json.dumps(out), flush=True)
    os._exit(0)  # DataLoader workers and engine threads need no orderly exit here
""" % {"MEAN": MEAN, "STD": STD}


def run(env, args):
    """One measurement in a child; None when it failed (its error is a line
    of its own, and the other measurements go on)."""
    out = subprocess.run([PY, "-c", CHILD, json.dumps(args)], env=env, capture_output=True,
                         text=True)
    recs = json_lines(out.stdout) if out.returncode == 0 else []
    if not recs:
        sys.stderr.write(out.stderr[-2000:])
        last = [l for l in out.stderr.strip().splitlines() if l.strip()][-1:] or ["no output"]
        print(json.dumps({"part": args["part"], "who": args["who"],
                          "error": f"exited {out.returncode}: {last[0][:300]}"}), flush=True)
        return None
    rec = recs[-1]
    print(json.dumps(rec), flush=True)
    return rec


def sleep_cycles(env, step_ms):
    """Cycles of torch.cuda._sleep that take step_ms on this GPU."""
    code = ("import torch,time\n"
            "torch.cuda._sleep(1000000); torch.cuda.synchronize()\n"
            "t=time.perf_counter(); torch.cuda._sleep(100000000); torch.cuda.synchronize()\n"
            "print(1e8/(time.perf_counter()-t))")
    rate = float(subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout)
    return int(rate * step_ms / 1000.0)


def med(xs):
    return statistics.median(xs), min(xs), max(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=["cuda", "host"], default="cuda")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--photos", default=os.path.join(REPO, "data", "photos", "imagenet-like"))
    ap.add_argument("--workers", default=None,
                    help="DataLoader num_workers to try (default 0..nproc in steps)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", default="h2d,step,train")
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--steps", type=int, default=60)
    a = ap.parse_args()
    env = env_with_sluice(a.build)
    parts = a.parts.split(",")
    if "train" in parts and not os.path.isdir(a.photos):
        sys.exit(f"no photos at {a.photos}: make them with /usr/bin/python3 bench/make_photos.py "
                 f"--root {os.path.dirname(a.photos)}")
    print(json.dumps({"machine": machine(), "kind": a.kind}), flush=True)
    if a.kind == "host":
        print("# --kind host: a dry run on the host backend; no figure here is a GPU's",
              flush=True)
    res = {}
    if "h2d" in parts:
        for shape in ([64, 224, 224, 3], [64, 3, 224, 224]):
            label = "x".join(map(str, shape))
            for _ in range(a.repeats):
                for who in ("sluice", "pinned_copy", "sluice_from_numpy", "cpu_only"):
                    r = run(env, {"kind": a.kind, "part": "h2d", "who": who, "shape": shape,
                                  "batches": 48})
                    if r:
                        res.setdefault(("h2d " + label, who), []).append(r["bytes_s"])
    if "step" in parts or "train" in parts:
        work = tempfile.mkdtemp(prefix="sluice-devbench-")
        slr = os.path.join(work, "photos.slr")
        sys.path.insert(0, os.path.join(a.build, "python"))
        import sluice
        sluice.pack(a.photos, slr)
        ncpu = os.cpu_count() or 1
        workers = ([int(w) for w in a.workers.split(",")] if a.workers else
                   sorted({0, 1, max(1, ncpu // 4), max(1, ncpu // 2), ncpu}))
        cycles = sleep_cycles(env, a.step_ms) if a.kind == "cuda" else 0
        base = {"kind": a.kind, "slr": slr, "photos": a.photos, 
                "steps": a.steps, "step_ms": a.step_ms, "sleep_cycles": cycles}
        for part in [p for p in ("step", "train") if p in parts]:
            for _ in range(a.repeats):
                r = run(env, dict(base, part=part, who="sluice"))
                if r:
                    res.setdefault((part, "sluice"), []).append(r)
                # the step loop's peer uses the DataLoader's best setting for
                # the train part when known, else the largest
                for w in workers if part == "train" else [max(workers)]:
                    r = run(env, dict(base, part=part, who="dataloader", workers=w))
                    if r:
                        res.setdefault((part, f"dataloader-w{w}"), []).append(r)
    print("\n| figure | sluice | peer | ratio |\n|---|---|---|---|")
    for shape in ("64x224x224x3", "64x3x224x224"):
        key = "h2d " + shape
        if (key, "sluice") in res and (key, "pinned_copy") in res:
            s, p = med(res[(key, "sluice")]), med(res[(key, "pinned_copy")])
            print(f"| H2D {shape} uint8, batches ready | {s[0]/1e9:.2f} GB/s "
                  f"({s[1]/1e9:.2f}-{s[2]/1e9:.2f}) | pinned copy {p[0]/1e9:.2f} GB/s "
                  f"| {s[0]/p[0]:.2f} |")
        if (key, "sluice_from_numpy") in res and (key, "cpu_only") in res:
            e, q = med(res[(key, "sluice_from_numpy")]), med(res[(key, "cpu_only")])
            print(f"| H2D {shape} uint8 from numpy (the workers' copy into pinned memory "
                  f"first) | {e[0]/1e9:.2f} GB/s | the same pipeline without a device "
                  f"{q[0]/1e9:.2f} GB/s | {e[0]/q[0]:.2f} |")
    if ("step", "sluice") in res and any(k[0] == "step" and k[1] != "sluice" for k in res):
        s = med([r["wait_ms_per_step"] for r in res[("step", "sluice")]])
        peer = [k for k in res if k[0] == "step" and k[1] != "sluice"][0]
        p = med([r["wait_ms_per_step"] for r in res[peer]])
        print(f"| wait per {a.step_ms:g} ms step | {s[0]:.2f} ms ({s[1]:.2f}-{s[2]:.2f}) "
              f"| {peer[1]} {p[0]:.2f} ms | — |")
    if ("train", "sluice") in res and any(k[0] == "train" and k[1] != "sluice" for k in res):
        s = med([r["img_s"] for r in res[("train", "sluice")]])
        peers = {k[1]: med([r["img_s"] for r in v])[0] for k, v in res.items()
                 if k[0] == "train" and k[1] != "sluice"}
        best = max(peers, key=peers.get)
        print(f"| train chain into {a.kind} tensors | {s[0]:.0f} img/s ({s[1]:.0f}-{s[2]:.0f}) "
              f"| {best} {peers[best]:.0f} img/s | {s[0]/peers[best]:.2f} |")


if __name__ == "__main__":
    main()
