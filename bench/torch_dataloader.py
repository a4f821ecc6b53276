#!/usr/bin/python3
"""torch.utils.data.DataLoader vs sluice.torch.DataLoader on the same Python
Dataset, three kinds of __getitem__, interleaved in one run:

  (a) pillow:  PIL Image.open + convert("RGB"), then torchvision's
               RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize
  (b) sluice:  the same, with the JPEG decoded by sluice.ops.decode_jpeg (the
               decode op's decoder, GIL released) instead of PIL's decoder
  (c) python:  pure-Python-heavy work holding the GIL (a byte-by-byte hash of
               the file in a Python loop), returning a small tensor

Loaders: torch's DataLoader with worker processes (--torch-workers, the best
one reported as "torch best"), and sluice.torch.DataLoader with
worker_type thread, process and auto (each with every --workers count). Every run is its own
process (so memory is its own), timed from iter() to the last batch, over
--limit photos, batch --batch, shuffle on. Reported per run: samples/s over
the epoch, time to the first batch, and the peak summed RSS of the run's whole
process tree (workers included) sampled every 10 ms (py_common.run_measured).
Runs are interleaved (loader order rotates every repeat); medians over
--repeats.

    /usr/bin/python3 bench/torch_dataloader.py --build build \
        --data data/photos/imagenet-like --limit 640 --repeats 3

(make the photos once with /usr/bin/python3 bench/make_photos.py: data/photos)
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_common import PY, REPO, RUN_FILE, env_with_sluice, machine, med_spread, run_net_measured  # noqa: E402,E501

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


# ---------------------------------------------------------------------------
# One measured run (child process).
# ---------------------------------------------------------------------------
def make_dataset(work, data, limit):
    import torch
    import torch.utils.data as tud
    from PIL import Image
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    folder = datasets.ImageFolder(data)
    samples = folder.samples[:limit] if limit else folder.samples
    if len(samples) < len(folder.samples):
        # Every class, evenly: take from the sorted list with a stride.
        step = len(folder.samples) / limit
        samples = [folder.samples[int(i * step)] for i in range(limit)]

    class Pillow(tud.Dataset):
        def __len__(self):
            return len(samples)

        def __getitem__(self, i):
            path, label = samples[i]
            with open(path, "rb") as f:
                img = Image.open(f).convert("RGB")
            return tf(img), label

    class SluiceDecode(Pillow):
        def __getitem__(self, i):
            import sluice.ops
            path, label = samples[i]
            with open(path, "rb") as f:
                pixels = sluice.ops.decode_jpeg(f.read())
            return tf(Image.fromarray(pixels)), label

    class PurePython(Pillow):
        def __getitem__(self, i):
            path, label = samples[i]
            with open(path, "rb") as f:
                data = f.read(60000)
            h = 0
            for b in data:            # the GIL is held for all of this
                h = (h * 31 + b) & 0xFFFFFFFF
            return torch.tensor([h, label], dtype=torch.int64), label

    return {"pillow": Pillow, "sluice": SluiceDecode, "python": PurePython}[work]()


def run_one(cfg):
    import torch
    ds = make_dataset(cfg["work"], cfg["data"], cfg["limit"])
    torch.manual_seed(0)
    if cfg["loader"] == "torch":
        from torch.utils.data import DataLoader
        dl = DataLoader(ds, batch_size=cfg["batch"], shuffle=True, num_workers=cfg["workers"])
    else:
        from sluice.torch import DataLoader
        dl = DataLoader(ds, batch_size=cfg["batch"], shuffle=True, num_workers=cfg["workers"],
                        worker_type=cfg["loader"])
    t0 = time.perf_counter()
    first = None
    n = 0
    for x, _ in dl:
        if first is None:
            first = time.perf_counter() - t0
        n += x.shape[0]
    secs = time.perf_counter() - t0
    out = {"samples": n, "secs": round(secs, 3), "img_s": round(n / secs, 1),
           "first_batch_s": round(first, 3)}
    if cfg["loader"] != "torch":
        out["used"] = dl.worker_type_used
        out["auto_probe"] = dl.auto_probe
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------------------
# The driver.
# ---------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=os.path.join(REPO, "data", "photos", "imagenet-like"))
    ap.add_argument("--limit", type=int, default=1200, help="photos per epoch (0: all)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", default="pillow,sluice,python")
    ap.add_argument("--torch-workers", default="2,3", help="torch's num_workers to try")
    ap.add_argument("--workers", default="2,3", help="sluice's num_workers to try")
    ap.add_argument("--loaders", default="thread,process,auto")
    args = ap.parse_args()
    if args.one:
        run_one(json.loads(args.one))
        return
    if not os.path.isdir(args.data):
        sys.exit(f"no photos at {args.data}: make them with /usr/bin/python3 bench/make_photos.py "
                 f"--root {os.path.dirname(args.data)}")

    env = env_with_sluice(args.build)
    runs = [("torch", w) for w in map(int, args.torch_workers.split(","))]
    runs += [(k, w) for w in map(int, args.workers.split(",")) for k in args.loaders.split(",")]
    works = args.work.split(",")
    results = {}
    print(json.dumps({"machine": machine(), "args": vars(args)}), flush=True)
    for rep in range(args.repeats):
        for work in works:
            order = runs[rep % len(runs):] + runs[:rep % len(runs)]
            for loader, workers in order:
                cfg = {"work": work, "loader": loader, "workers": workers, "data": args.data,
                       "limit": args.limit, "batch": args.batch}
                cmd = [PY, "-c", RUN_FILE, os.path.abspath(__file__), "--one", json.dumps(cfg)]
                recs, peak, base, _ = run_net_measured(cmd, env=env)
                r = dict(recs[-1], work=work, loader=loader, workers=workers, repeat=rep,
                         peak_rss_mb=round(peak, 1), load=round(os.getloadavg()[0], 2))
                print(json.dumps(r), flush=True)
                results.setdefault((work, loader, workers), []).append(r)

    # Summary: medians; torch best = its num_workers with the highest median.
    print()
    print(f"{'work':8} {'loader':14} {'img/s':>8} {'spread':>15} {'first s':>8} {'peak MB':>8} "
          f"{'vs torch best':>14} {'mem ratio':>9}")
    for work in works:
        med = {}
        for (w, loader, nw), rs in results.items():
            if w != work:
                continue
            m, sp = med_spread(r["img_s"] for r in rs)
            med[(loader, nw)] = (m, sp, med_spread(r["first_batch_s"] for r in rs)[0],
                                 med_spread(r["peak_rss_mb"] for r in rs)[0],
                                 [r.get("used") for r in rs])
        best = max((k for k in med if k[0] == "torch"), key=lambda k: med[k][0])
        for k, (m, sp, first, mem, used) in sorted(med.items(), key=lambda kv: kv[0]):
            name = f"{k[0]}({k[1]})" + ("*" if k == best else "")
            if k[0] == "auto":
                name += "->" + "/".join(sorted(set(u for u in used if u)))
            print(f"{work:8} {name:14} {m:8.1f} {f'{sp[0]:.0f}-{sp[1]:.0f}':>15} {first:8.2f} "
                  f"{mem:8.0f} {m / med[best][0]:14.2f} {mem / med[best][3]:9.2f}")
    print("* torch best: the torch num_workers with the highest median img/s")


if __name__ == "__main__":
    main()
