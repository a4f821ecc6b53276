#!/usr/bin/python3
"""Autotune against a grid of hand settings, side by side in one run.

    /usr/bin/python3 bench/autotune_grid.py [--build build] [--repeats 3] [--seconds 3]
        [--photos /tmp/photos/imagenet-like] [--work /tmp/sluice-grid]
        [--only fmnist,imagenet,skew,io] [--io-copies 45] [--confirm 3] [--clean]

Four pipelines, each run flat out for --seconds per setting:
  fmnist    Fashion-MNIST packed into .slr, shuffled, batch 256 (`sluice bench`);
  imagenet  the ImageNet-style training chain over the packed photos (decode +
            random_resized_crop 224 + flip + normalize, batch 64; `sluice bench`);
  skew      a synthetic two-stage pipeline whose stages cost 10:1 per sample
            (bench/autotune_skew.c, built here against BUILD/libsluice.a);
  io        the photos repeated --io-copies times into one .slr (about 6.4 GB
            at 45), shuffled, read and batched (64) with no decoding, from cold
            storage: before every run the file's pages are dropped from the page
            cache (fsync, then posix_fadvise DONTNEED), and the file is larger
            than any run reads, so every record read is a read from the disk.
Settings: autotune (the default: nothing set) and the grid a user could set by
hand: workers of each parallel stage (`source.parallel`, an op's "parallel";
1 .. nproc + 1) x the queue depth (a `prefetch` op: 2, the default, or 8).
Rounds interleave every setting of a pipeline, --repeats times. The best of
many noisy medians is biased upwards (the setting that drew the luckiest
runs wins), so the best hand setting is then measured again against
autotune, alternating, --confirm times: the ratio is taken from those runs
(`ratio`; `grid_ratio` is the one from the grid's medians). For each
pipeline: medians, spread (min-max), the ratio autotune / best hand setting,
and autotune's time to 95%: from the throughput timeline (samples/s per
0.25 s, `sluice bench --json`), the end of the first 0.25 s step at which the
rate and the mean of the next second are both at least 95% of the final rate
(the mean over the second half of the run); the same for the best hand
setting's confirmation runs, since a pipeline can ramp up by itself (cold
reads warm the page cache). Prints one JSON line per pipeline, then a table.
"""
import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_common import static_link_args  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FM = "/usr/share/datasets/fashion-mnist"
DEPTHS = [2, 8]
IMAGE_OPS = [
    {"op": "decode", "column": "image"},
    {"op": "random_resized_crop", "column": "image", "size": 224},
    {"op": "flip", "column": "image", "p": 0.5},
    {"op": "normalize", "column": "image", "mean": [0.485, 0.456, 0.406],
     "std": [0.229, 0.224, 0.225], "layout": "chw", "dtype": "float32"}]


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def drop_cache(path):
    """Drop the pages of a file, or of every file of a dataset directory,
    from the page cache (the next reads go to disk)."""
    files = [path] if os.path.isfile(path) else [
        os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def slr_spec(path, ops, batch, source_par=None, depth=None, op_par=None):
    src = {"path": path, "shuffle": True}
    if source_par:
        src["parallel"] = source_par
    ops = [dict(o) for o in ops]
    if op_par and ops:
        ops[0]["parallel"] = op_par
    ops.append({"op": "batch", "size": batch})
    if depth:
        ops.append({"op": "prefetch", "depth": depth})
    return {"source": src, "ops": ops}


def build_skew(build, work):
    exe = os.path.join(work, "autotune_skew")
    subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(REPO, "include"),
                    os.path.join(REPO, "bench", "autotune_skew.c")] + static_link_args(build) +
                   ["-o", exe], check=True)
    return exe


def pipelines(a, sluice, ncpu):
    """name -> (settings, run(setting) -> stats dict)."""
    w = a.work
    counts = list(range(1, ncpu + 2))
    out = {}

    def cli(spec_of, cold=None):
        def run(setting):
            path = os.path.join(w, "spec-%d.json" % os.getpid())
            with open(path, "w") as f:
                json.dump(spec_of(setting), f)
            if cold:
                drop_cache(cold)
            r = subprocess.run([sluice, "bench", path, "--seconds", str(a.seconds), "--json"],
                               check=True, capture_output=True, text=True)
            return json.loads(r.stdout)
        return run

    fm = os.path.join(w, "fm.slr")
    if not os.path.exists(fm):
        subprocess.run([sluice, "pack", FM + "/train-images-idx3-ubyte.gz",
                        FM + "/train-labels-idx1-ubyte.gz", fm], check=True, capture_output=True)
    # fmnist: one parallel stage (the readers collate the batch)
    out["fmnist"] = ([None] + [dict(src=r, depth=d) for r in counts for d in DEPTHS],
                     cli(lambda s: slr_spec(fm, [], 256, *((s["src"], s["depth"]) if s else ()))))
    img = os.path.join(w, "img.slr")
    if not os.path.isdir(a.photos):
        print(f"no photos at {a.photos}: the image and cold-read pipelines are left out (make them "
              f"with /usr/bin/python3 bench/make_photos.py --root {os.path.dirname(a.photos)})",
              file=sys.stderr)
    if not os.path.exists(img) and os.path.isdir(a.photos):
        subprocess.run([sluice, "pack", a.photos, img], check=True, capture_output=True)
    if os.path.exists(img):
        # imagenet: readers, then the image ops (collating the batch)
        out["imagenet"] = (
            [None] + [dict(src=r, ops=m, depth=d) for r in counts for m in counts for d in DEPTHS],
            cli(lambda s: slr_spec(img, IMAGE_OPS, 64, s["src"], s["depth"], s["ops"]) if s
                else slr_spec(img, IMAGE_OPS, 64)))
    exe = build_skew(a.build, w)

    def skew(s):
        cmd = [exe, "--seconds", str(a.seconds)]
        if s:
            cmd += ["--a", str(s["a"]), "--b", str(s["b"]), "--depth", str(s["depth"])]
        return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    out["skew"] = ([None] + [dict(a=x, b=y, depth=d) for x in counts for y in counts
                             for d in DEPTHS], skew)
    io = os.path.join(w, "io.slr")
    if not os.path.exists(io) and os.path.isdir(a.photos):
        tree = os.path.join(w, "io-src")
        for root, _, files in os.walk(a.photos):
            for f in files:
                rel = os.path.relpath(os.path.join(root, f), a.photos)
                for k in range(a.io_copies):
                    dst = os.path.join(tree, os.path.dirname(rel), "r%03d_%s" % (k, f))
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    os.link(os.path.join(root, f), dst)
        subprocess.run([sluice, "pack", tree, io], check=True, capture_output=True)
        subprocess.run(["rm", "-rf", tree], check=True)
    if os.path.exists(io):
        out["io"] = ([None] + [dict(src=r, depth=d) for r in counts for d in DEPTHS],
                     cli(lambda s: slr_spec(io, [], 64, *((s["src"], s["depth"]) if s else ())),
                         cold=io))
    return out


def time_to_95(tl, step):
    """End of the first step whose rate, and the mean of the second from it,
    reach 95% of the final rate (mean of the run's second half); None if never."""
    if len(tl) < 4:
        return None
    final = statistics.mean(tl[len(tl) // 2:])
    win = max(1, int(round(1.0 / step)))
    for i, r in enumerate(tl):
        rest = tl[i:i + win]
        if r >= 0.95 * final and statistics.mean(rest) >= 0.95 * final:
            return (i + 1) * step
    return None


def label(s):
    return "autotune" if s is None else " ".join("%s=%s" % kv for kv in s.items())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--photos", default=os.path.join(REPO, "data", "photos", "imagenet-like"))
    ap.add_argument("--work", default="/tmp/sluice-grid")
    ap.add_argument("--only", default="fmnist,imagenet,skew,io")
    ap.add_argument("--io-copies", type=int, default=45)
    ap.add_argument("--confirm", type=int, default=3,
                    help="alternating runs of autotune and the best hand setting after the grid")
    ap.add_argument("--clean", action="store_true", help="delete the I/O file at the end")
    a = ap.parse_args()
    sluice = os.path.join(a.build, "sluice")
    os.makedirs(a.work, exist_ok=True)
    ncpu = os.cpu_count() or 1
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print(f"# machine: {ncpu} cores, {cpu}; load {load()}", flush=True)
    rows = []
    for name, (settings, run) in pipelines(a, sluice, ncpu).items():
        if name not in a.only.split(","):
            continue
        rates = {i: [] for i in range(len(settings))}
        t95s, verdict, workers, loads = [], "", None, [load()]
        for rep in range(a.repeats):
            # rotate the order each round: no setting always runs first
            order = list(range(len(settings)))
            order = order[rep % len(order):] + order[:rep % len(order)]
            for i in order:
                d = run(settings[i])
                rates[i].append(d["samples_per_s"])
                if settings[i] is None:
                    t95s.append(time_to_95(d.get("timeline", []), d.get("timeline_step_s", 0.25)))
                    verdict = d["verdict"]
                    workers = {s["name"]: s["workers"] for s in d["stages"]}
            loads.append(load())
        med = {i: statistics.median(v) for i, v in rates.items()}
        best = max(range(1, len(settings)), key=lambda i: med[i])
        grid_ratio = med[0] / med[best]
        # confirmation: the chosen setting against autotune, alternating
        conf_auto, conf_best, t95_best = [], [], []
        for _ in range(a.confirm):
            d = run(None)
            conf_auto.append(d["samples_per_s"])
            t95s.append(time_to_95(d.get("timeline", []), d.get("timeline_step_s", 0.25)))
            d = run(settings[best])
            conf_best.append(d["samples_per_s"])
            t95_best.append(time_to_95(d.get("timeline", []), d.get("timeline_step_s", 0.25)))
        if a.confirm:
            rates[0] += conf_auto
            rates[best] += conf_best
            ratio = statistics.median(conf_auto) / statistics.median(conf_best)
        else:
            ratio = grid_ratio
        loads.append(load())
        med[0], med[best] = statistics.median(rates[0]), statistics.median(rates[best])
        t_ok = [t for t in t95s if t is not None]
        row = dict(pipeline=name, auto=med[0], auto_runs=rates[0],
                   best=label(settings[best]), best_median=med[best], best_runs=rates[best],
                   ratio=ratio, grid_ratio=grid_ratio, confirm_auto=conf_auto,
                   confirm_best=conf_best, t95_best_runs=t95_best,
                   t95_s=statistics.median(t_ok) if len(t_ok) == len(t95s) else None,
                   t95_runs=t95s, auto_workers=workers, verdict=verdict, load=loads,
                   grid={label(settings[i]): med[i] for i in range(1, len(settings))})
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(f"\n# load at the end {load()}")
    print("\nsamples/s: medians over the grid's rounds and the confirmation runs (min-max);"
          " ratio: from the confirmation runs (grid medians' ratio in brackets)")
    print("\n| pipeline | autotune, samples/s (min-max) | best hand setting, samples/s (min-max) "
          "| ratio | time to 95% (runs) | same, best hand setting |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        t95 = ", ".join("-" if t is None else f"{t:.2f}" for t in r["t95_runs"])
        print(f"| {r['pipeline']} | {r['auto']:,.0f} ({min(r['auto_runs']):,.0f}-"
              f"{max(r['auto_runs']):,.0f}) | {r['best_median']:,.0f} ({min(r['best_runs']):,.0f}-"
              f"{max(r['best_runs']):,.0f}; {r['best']}) | {r['ratio']:.2f} ({r['grid_ratio']:.2f}) | "
              f"{'-' if r['t95_s'] is None else '%.2f s' % r['t95_s']} ({t95}) | "
              f"{', '.join('-' if t is None else f'{t:.2f}' for t in r['t95_best_runs'])} |")
    if a.clean:
        io = os.path.join(a.work, "io.slr")
        subprocess.run(["rm", "-rf", io], check=True)


if __name__ == "__main__":
    sys.exit(main())
