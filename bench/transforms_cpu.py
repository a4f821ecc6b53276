#!/usr/bin/env python3
"""CPU per sample of one Dataset's __getitem__ with sluice.transforms against
the same Dataset with torchvision.transforms.v2, side by side in one process,
interleaved rounds, one thread (torch.set_num_threads(1)).

Works (the per-sample code of a training or eval Dataset over JPEG files):
  train: RandomResizedCrop(224), RandomHorizontalFlip, ToDtype(float32,
         scale=True), Normalize(ImageNet mean/std)
  eval:  Resize(256), CenterCrop(224), ToDtype, Normalize
Rows:
  torchvision_pil     PIL.Image.open(p).convert("RGB") + v2 (ToImage first):
                      the usual ImageFolder code
  torchvision_tensor  torchvision.io.decode_jpeg(read_file(p)) + v2 on the
                      uint8 tensor: what torchvision's docs recommend for speed
  sluice_pil          the first Dataset with `import sluice.transforms as T`
                      swapped in (PIL still decodes)
  sluice              T.Compose([T.DecodeJPEG(), ...]) on the path: the fused
                      decode of only the crop
Each row: CPU microseconds per sample (process CPU time, median of the
rounds, min-max) and the ratio of the best torchvision row to each sluice
row. Needs torch >= 2 with torchvision >= 0.16 (the venvs of
scripts/pythons.sh) and a folder of JPEGs (an ImageFolder tree, e.g. the
imagenet-like photos of bench/README.md).

  python bench/transforms_cpu.py --photos DIR [--limit 400] [--rounds 3] [--work train] [--loader]

With --loader, also samples/s through a DataLoader (batch 64, --workers 2):
the sluice rows on sluice.torch.DataLoader threads, the torchvision rows on
torch's DataLoader processes (persistent workers), each Dataset as above;
and the same work on sluice's native pipeline (`sluice_native`: the
photos as an ImageFolder, decode + random_resized_crop + flip + normalize,
or resize + center_crop + normalize for eval, batch 64, as torch tensors;
its worker threads are the engine's, one per core), the row the
sluice.transforms loader is compared with ("native / row").
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--photos", default=os.path.join(HERE, "..", "data", "photos", "imagenet-like"))
    ap.add_argument("--limit", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", choices=["train", "eval"], default="train")
    ap.add_argument("--rows", default="torchvision_pil,torchvision_tensor,sluice_pil,sluice")
    ap.add_argument("--json", action="store_true", help="one JSON object per row on stdout")
    ap.add_argument("--loader", action="store_true",
                    help="also samples/s through loaders, batch 64, 2 workers: the sluice "
                         "Dataset on sluice.torch.DataLoader threads, the torchvision "
                         "Datasets on torch's DataLoader processes (persistent)")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    if not os.path.isdir(a.photos):
        sys.exit(f"transforms_cpu: no photos at {a.photos}: give --photos DIR (a folder of "
                 f"JPEGs; bench/README.md says how to make the imagenet-like set)")
    paths = []
    for d, _, fs in sorted(os.walk(a.photos)):
        paths += [os.path.join(d, f) for f in sorted(fs) if f.lower().endswith((".jpg", ".jpeg"))]
    paths = paths[:a.limit]
    if not paths:
        sys.exit(f"transforms_cpu: no JPEGs under {a.photos}")

    import torch
    import torchvision
    import torchvision.transforms.v2 as V
    from torchvision.io import decode_jpeg, read_file
    from PIL import Image

    import sluice.transforms as T
    torch.set_num_threads(1)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]

    def chain(lib, to_image):
        head = [lib.RandomResizedCrop(224), lib.RandomHorizontalFlip()] if a.work == "train" \
            else [lib.Resize(256), lib.CenterCrop(224)]
        return lib.Compose(head + ([lib.ToImage()] if to_image else []) +
                           [lib.ToDtype(torch.float32, scale=True), lib.Normalize(mean, std)])

    tv_pil, tv_t = chain(V, True), chain(V, False)
    sl_pil = chain(T, True)
    sl = T.Compose([T.DecodeJPEG()] + chain(T, False).transforms)
    rows = {
        "torchvision_pil": lambda p: tv_pil(Image.open(p).convert("RGB")),
        "torchvision_tensor": lambda p: tv_t(decode_jpeg(read_file(p))),
        "sluice_pil": lambda p: sl_pil(Image.open(p).convert("RGB")),
        "sluice": lambda p: sl(p),
    }
    names = [r for r in a.rows.split(",") if r]
    for r in names:
        if r not in rows:
            sys.exit(f"transforms_cpu: unknown row {r!r} (rows: {', '.join(rows)})")
    # warm-up: the files in the page cache, lazy imports, per-thread decoders;
    # every row gives the same shape and dtype
    for p in paths:
        with open(p, "rb") as f:
            f.read()
    for r in names:
        out = rows[r](paths[0])
        assert tuple(out.shape) == (3, 224, 224) and out.dtype == torch.float32, (r, out.shape)
    cpu = {r: [] for r in names}
    wall = {r: [] for r in names}
    for rnd in range(a.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for r in order:
            fn = rows[r]
            torch.manual_seed(rnd)
            c0, w0 = time.process_time(), time.perf_counter()
            for p in paths:
                fn(p)
            c1, w1 = time.process_time(), time.perf_counter()
            cpu[r].append((c1 - c0) / len(paths) * 1e6)
            wall[r].append(len(paths) / (w1 - w0))
    best_tv = min((statistics.median(cpu[r]) for r in names if r.startswith("torchvision")),
                  default=None)
    load = os.getloadavg()[0]
    info = {"python": sys.version.split()[0], "torch": torch.__version__,
            "torchvision": torchvision.__version__, "work": a.work, "photos": len(paths),
            "rounds": a.rounds, "load_1min": round(load, 2),
            "gil": getattr(sys, "_is_gil_enabled", lambda: True)()}
    if not a.json:
        print(" ".join(f"{k}={v}" for k, v in info.items()))
        print(f"{'row':20s} {'cpu us/sample':>14s} {'(min-max)':>16s} {'samples/s':>10s} "
              f"{'best torchvision / row':>22s}")
    for r in names:
        med = statistics.median(cpu[r])
        ratio = best_tv / med if best_tv else None
        rec = dict(info, row=r, cpu_us=round(med, 1), cpu_us_min=round(min(cpu[r]), 1),
                   cpu_us_max=round(max(cpu[r]), 1),
                   samples_s=round(statistics.median(wall[r]), 1),
                   ratio=round(ratio, 2) if ratio else None)
        if a.json:
            print(json.dumps(rec))
        else:
            print(f"{r:20s} {med:14.0f} {min(cpu[r]):7.0f}-{max(cpu[r]):<8.0f} "
                  f"{rec['samples_s']:10.0f} {ratio or 0:21.2f}x")
    if a.loader:
        torch.set_num_threads(1)
        loader_rates(a, paths, rows, names, info, mean, std)


class PathDataset:
    """The Dataset the rows time: a path per sample through `fn`, and its label."""

    def __init__(self, paths, fn):
        self.paths, self.fn = paths, fn

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return self.fn(self.paths[i]), i % 10


def native_pipeline(a, mean, std):
    """The same work on sluice's own pipeline: the first --limit photos of
    the folder (the order the rows read them), batches of 64 as tensors."""
    import sluice
    ds = sluice.image_folder(a.photos).take(a.limit).decode()
    if a.work == "train":
        ds = ds.random_resized_crop("image", 224).flip("image")
    else:
        ds = ds.resize("image", 256).center_crop("image", 224)
    return ds.normalize("image", mean, std).batch(64)


def loader_rates(a, paths, rows, names, info, mean, std):
    """samples/s of whole epochs (the second and later: workers started),
    median of the rounds, sluice rows on sluice's thread loader, torchvision
    rows on torch's process loader, and sluice's native pipeline."""
    import torch
    from torch.utils.data import DataLoader as TorchLoader
    from sluice.torch import DataLoader as SluiceLoader
    out = {}
    nat = native_pipeline(a, mean, std)
    rates = []
    for epoch in range(a.rounds + 1):
        t0 = time.perf_counter()
        n = 0
        for b in nat.torch():
            assert tuple(b["image"].shape[1:]) == (3, 224, 224)
            n += len(b["label"])
        if epoch:
            rates.append(n / (time.perf_counter() - t0))
    nat.close()
    native = statistics.median(rates)
    for r in names:
        ds = PathDataset(paths, rows[r])
        if r.startswith("sluice"):
            ld = SluiceLoader(ds, batch_size=64, shuffle=True, num_workers=a.workers,
                              worker_type="thread")
        else:
            ld = TorchLoader(ds, batch_size=64, shuffle=True, num_workers=a.workers,
                             persistent_workers=True)
        rates = []
        for epoch in range(a.rounds + 1):
            t0 = time.perf_counter()
            n = sum(len(b[1]) for b in ld)
            if epoch:
                rates.append(n / (time.perf_counter() - t0))
        del ld
        out[r] = statistics.median(rates)
    best_tv = max((v for k, v in out.items() if k.startswith("torchvision")), default=None)
    for r in names:
        rec = dict(info, row=r, loader="sluice threads" if r.startswith("sluice") else
                   "torch processes", workers=a.workers, samples_s=round(out[r], 1),
                   ratio=round(out[r] / best_tv, 2) if best_tv else None,
                   of_native=round(out[r] / native, 2))
        print(json.dumps(rec) if a.json else
              f"loader {r:20s} {rec['loader']:16s} {out[r]:10.0f}/s "
              f"{rec['ratio'] or 0:8.2f}x the best torchvision loader, "
              f"{rec['of_native']:.2f}x native")
    rec = dict(info, row="sluice_native", loader="sluice pipeline", samples_s=round(native, 1))
    print(json.dumps(rec) if a.json else
          f"loader {'sluice_native':20s} {'sluice pipeline':16s} {native:10.0f}/s")


if __name__ == "__main__":
    main()
