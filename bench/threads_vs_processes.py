#!/usr/bin/env python3
"""Thread workers against process workers, on the GIL build and the
free-threaded one: the experiment a thread-based loader exists for.

    PY bench/threads_vs_processes.py --photos DIR --json [--seconds S] [--repeats R]
                                     [--works W1,W2] [--loaders L1,L2] [--limit N]
                                     [--batch B] [--plot FILE.png]
    PY bench/threads_vs_processes.py --plot FILE.png RESULTS.jsonl [RESULTS.jsonl ...]

PY is a venv's python from scripts/pythons.sh (`gil`: Debian's 3.11; `ft`:
CPython 3.13t); run it under each and plot both files together. On 3.13t set
PYTHON_GIL=0 when the works import torchvision (its import of triton turns
the GIL back on otherwise): the "gil" key says how each run ran.

Works (one map-style Dataset each, over --limit photos of DIR, an ImageFolder):
  pure_python  a Python-loop histogram and rolling hash of the JPEG's first
               48 KB (about 2-5 ms of CPU-bound pure Python a sample; holds
               the GIL where there is one); returns a small int64 tensor
  pillow       PIL open + convert("RGB"), torchvision.transforms.v2
               RandomResizedCrop(224), RandomHorizontalFlip, ToImage,
               ToDtype(float32, scale), Normalize
  sluice_transforms
               the same Dataset with sluice.transforms (torchvision v2's
               classes in C, the GIL released): DecodeJPEG of the file's path
               (fused with the crop after it), RandomResizedCrop(224),
               RandomHorizontalFlip, ToDtype(float32, scale), Normalize
  decode_jpeg  sluice.ops.decode_jpeg (the GIL released while it decodes),
               then the same v2 transforms on the tensor
  native       no Python Dataset: sluice.image_folder over the same photos,
               decode, random_resized_crop 224, flip, normalize, batch, to torch
The loader's own cost (not in the default --works; no photo is read):
  fixed        __getitem__ returns at once: the same float32 (3, 224, 224)
               tensor (the image works' output) and the label, every time
  c_work       fixed GIL-free C work first (SHA-256 of a 1 MiB buffer, the
               GIL released: about 0.5 ms of CPU a sample on 3.11's hashlib
               here), then the same as fixed
Loaders: torch-process (torch's DataLoader, num_workers 0, 1, 2, 3),
sluice-thread (sluice.torch.DataLoader worker_type="thread", 1, 2, 3),
sluice-process (2), sluice-auto (2); the thread-based peers on pure_python,
pillow and sluice_transforms: spdl (2 threads), torchdata (torchdata.nodes,
2 threads) and grain (2 threads, and 16: Grain's default ReadOptions), each
built as bench/peers/run.py builds it (thread_peer_epochs, which cites their
docs); `ceiling` (2) on those works, fixed and c_work: no loader, the Dataset's __getitem__
alone on one thread in the sampler's order, its CPU time (time.thread_time)
per sample turned into the rate WORKERS cores would reach if nothing else
ran (samples_per_s = min(WORKERS, cores) / CPU seconds a sample: the
ceiling the Dataset's own cost sets; no collation, no transport); `threads`
(2) on the same works: no loader either, the Dataset's __getitem__ on WORKERS
plain Python threads at once, samples/s counted (what running the same
cost on these cores gives before any loader: the GIL, the cores' shared
caches and memory, the outputs' fresh memory); and for
`native` sluice-native (engine threads 1, 2, 3). Batch
--batch (32), shuffled, torch.set_num_threads(1) in every run (as torch's
own workers do). A peer this interpreter does not import gets a row with
null figures and its reason on stderr (bench/peers/setup.sh installs them
into the venvs of scripts/pythons.sh; Grain has no cp313t wheel).

Each run is its own process (its memory is its own): it builds the loader,
takes the first batch (first_batch_s: from the loader's construction), runs
a warm-up of a quarter of --seconds (at least 1 s), then counts samples for
--seconds, epochs following one another. Rounds: --repeats rounds, each
running every loader once, the order rotating from round to round (as
bench/peers/run.py does). Per loader one JSON line:

  {"python": "3.11"|"3.13t", "gil": bool, "torch": VERSION, "work", "loader":
   "torch"|"sluice"|"spdl"|"torchdata"|"grain"|"ceiling"|"threads",
   "worker_type": "process"|"thread"|"auto"|"native"|"core"|"plain",
   "workers", "samples_per_s", "peak_rss_mb", "first_batch_s"}

samples_per_s and first_batch_s are medians over the rounds; peak_rss_mb is
the largest peak over the rounds of the summed RSS of the run's process and
all its children, sampled every 10 ms (imports included); gil is
sys._is_gil_enabled() at the end of the runs (True on builds without the
call). Each round's figures, the load average and what "auto" chose go to
stderr. A run that fails makes the exit status 1 (its row has null figures).

--plot FILE.png draws samples/s against workers, one panel per work: torch
against sluice, 3.11 (GIL) against 3.13t, from this run's rows and from any
RESULTS.jsonl files named (the --json output of runs under other Pythons).
"""
import argparse
import hashlib
import importlib.util
import json
import os
import statistics
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("peers_run", os.path.join(HERE, "peers", "run.py"))
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
WORKS = ["pure_python", "pillow", "sluice_transforms", "decode_jpeg", "native", "fixed", "c_work"]
DEFAULT_WORKS = WORKS[:5]
PEER_WORKS = ("pure_python", "pillow", "sluice_transforms")
# Works with the `ceiling` and `threads` rows (no peers on the loader-cost works).
CEILING_WORKS = PEER_WORKS + ("fixed", "c_work")
C_WORK_BYTES = 1 << 20
PEER_MODULES = {"spdl": "spdl.pipeline", "torchdata": "torchdata.nodes", "grain": "grain"}
KEYS = ["python", "gil", "torch", "work", "loader", "worker_type", "workers", "samples_per_s",
        "peak_rss_mb", "first_batch_s"]
PURE_BYTES = 48 * 1024


def loaders_for(work):
    """(loader, worker_type, workers) of every run of a work."""
    if work == "native":
        return [("sluice", "native", w) for w in (1, 2, 3)]
    runs = ([("torch", "process", w) for w in (0, 1, 2, 3)] +
            [("sluice", "thread", w) for w in (1, 2, 3)] +
            [("sluice", "process", 2), ("sluice", "auto", 2)])
    if work in PEER_WORKS:
        runs += [("spdl", "thread", 2), ("torchdata", "thread", 2), ("grain", "thread", 2),
                 ("grain", "thread", 16)]
    if work in CEILING_WORKS:
        runs += [("ceiling", "core", 2), ("threads", "plain", 2)]
    return runs


def loader_name(loader, worker_type):
    if loader in ("torch", "ceiling", "threads"):
        return "torch-process" if loader == "torch" else loader
    return f"sluice-{worker_type}" if loader == "sluice" else loader


def peer_missing(loader):
    """Why a thread peer cannot run under this interpreter, or None."""
    mod = PEER_MODULES.get(loader)
    if mod is None:
        return None
    try:
        importlib.import_module(mod)
        return None
    except ImportError as e:
        return (f"{loader}: not importable here ({e}); bench/peers/setup.sh {loader} installs it "
                "into the venvs of scripts/pythons.sh")


def python_tag():
    t = f"{sys.version_info.major}.{sys.version_info.minor}"
    return t + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "")


def gil_enabled():
    probe = getattr(sys, "_is_gil_enabled", None)
    return True if probe is None else bool(probe())


def subset(root, limit):
    """(path, label) of `limit` photos, every class evenly (a stride over
    torchvision's ImageFolder order), or all of them with limit 0."""
    items = peers.photo_listing(root)
    if not items:
        raise SystemExit(f"{root}: no images (an ImageFolder: ROOT/CLASS/IMAGE.jpg)")
    if limit and limit < len(items):
        step = len(items) / limit
        items = [items[int(i * step)] for i in range(limit)]
    return items


def subset_folder(root, items, cache):
    """An ImageFolder of symlinks to exactly these photos, for sluice.image_folder
    (the native work reads the same photos as the Python works)."""
    key = hashlib.sha256(json.dumps([os.path.abspath(root)] + [p for p, _ in items]).encode())
    d = os.path.join(cache, "tvp-" + key.hexdigest()[:16])
    if os.path.isdir(d):
        return d
    tmp = d + f".tmp{os.getpid()}"
    for i, (p, label) in enumerate(items):
        cls = os.path.join(tmp, f"{label:04d}")
        os.makedirs(cls, exist_ok=True)
        os.symlink(os.path.abspath(p), os.path.join(cls, f"{i:06d}" + os.path.splitext(p)[1]))
    os.rename(tmp, d)
    return d


# ----------------------------------------------------------------- the works
# Module level, so process workers can unpickle them.

def v2_transforms():
    import torch
    from torchvision.transforms import v2
    return v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                       v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])


class PhotoDataset:
    def __init__(self, items):
        self.items = items
        self.tf = None

    def __len__(self):
        return len(self.items)

    def transforms(self):
        if self.tf is None:
            self.tf = v2_transforms()
        return self.tf


class PurePython(PhotoDataset):
    def __getitem__(self, i):
        import torch
        path, label = self.items[i]
        with open(path, "rb") as f:
            data = f.read(PURE_BYTES)
        hist = [0] * 256
        h = 2166136261
        for b in data:  # pure Python: the interpreter does all of it
            hist[b] += 1
            h = ((h ^ b) * 16777619) & 0xFFFFFFFF
        top = max(range(256), key=hist.__getitem__)
        return torch.tensor([h, top, hist[top]], dtype=torch.int64), label


class Pillow(PhotoDataset):
    def __getitem__(self, i):
        from PIL import Image
        path, label = self.items[i]
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB")
        return self.transforms()(img), label


def sluice_transforms():
    """The pillow work's transforms with sluice.transforms (torchvision v2's
    class names and arguments): the decode of the file fused with the crop."""
    import torch
    import sluice.transforms as T
    return T.Compose([T.DecodeJPEG(), T.RandomResizedCrop(224, antialias=True),
                      T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
                      T.Normalize(MEAN, STD)])


class SluiceTransforms(PhotoDataset):
    def transforms(self):
        if self.tf is None:
            self.tf = sluice_transforms()
        return self.tf

    def __getitem__(self, i):
        path, label = self.items[i]
        return self.transforms()(path), label


class DecodeJpeg(PhotoDataset):
    def __getitem__(self, i):
        import torch
        import sluice.ops
        from torchvision import tv_tensors
        path, label = self.items[i]
        with open(path, "rb") as f:
            pixels = sluice.ops.decode_jpeg(f.read())
        img = tv_tensors.Image(torch.from_numpy(pixels).permute(2, 0, 1))
        return self.transforms()(img), label


class Fixed(PhotoDataset):
    """The loader's own cost: no work at all, the image works' output shape."""
    out = None

    def __getitem__(self, i):
        if self.out is None:
            import torch
            self.out = torch.zeros(3, 224, 224)
        return self.out, self.items[i][1]


class CWork(Fixed):
    """A fixed C work that releases the GIL (hashlib does so on buffers
    above 2 KB), then what Fixed returns."""
    buf = bytes(range(256)) * (C_WORK_BYTES // 256)

    def __getitem__(self, i):
        hashlib.sha256(self.buf).digest()
        return Fixed.__getitem__(self, i)


DATASETS = {"pure_python": PurePython, "pillow": Pillow, "sluice_transforms": SluiceTransforms,
            "decode_jpeg": DecodeJpeg, "fixed": Fixed, "c_work": CWork}


def make_epochs(cfg):
    """A function epoch -> iterator of (x, y) batches, and a function giving
    what the loader chose (for the log)."""
    import torch
    work, loader, kind, workers = cfg["work"], cfg["loader"], cfg["worker_type"], cfg["workers"]
    if kind == "native":
        import sluice
        p = {"parallel": workers}
        ds = (sluice.image_folder(cfg["folder"], parallel=1).shuffle(seed=0)
              .op("decode", column="image", **p)
              .op("random_resized_crop", column="image", size=[224, 224], **p)
              .op("flip", column="image", p=0.5, **p)
              .op("normalize", column="image", mean=MEAN, std=STD, layout="chw", **p)
              .select("image", "label").batch(cfg["batch"]).prefetch(4))

        def epochs(e):
            ds.set_epoch(e)
            for b in ds.torch():
                yield b["image"], b["label"]
        return epochs, lambda: None
    with open(cfg["items_file"]) as f:
        ds = DATASETS[work]([tuple(x) for x in json.load(f)])
    if loader in PEER_MODULES:
        epochs, _, _ = peers.thread_peer_epochs(loader, ds, cfg["batch"], workers, shuffle=True)
        return epochs, lambda: None
    kw = dict(batch_size=cfg["batch"], shuffle=True, num_workers=workers,
              persistent_workers=workers > 0)
    if loader == "torch":
        from torch.utils.data import DataLoader
        dl = DataLoader(ds, **kw)
    else:
        from sluice.torch import DataLoader
        dl = DataLoader(ds, worker_type=kind, **kw)

    def epochs(e):
        return iter(dl)

    def chose():
        if loader == "torch":
            return None
        return {"used": dl.worker_type_used, "auto_probe": dl.auto_probe}
    return epochs, chose


def ceiling(cfg):
    """The ceiling the Dataset's own CPU cost sets: __getitem__ alone on this
    thread, in a shuffled order, epochs following one another; its CPU time
    a sample, scaled to min(workers, cores) cores."""
    import torch
    with open(cfg["items_file"]) as f:
        ds = DATASETS[cfg["work"]]([tuple(x) for x in json.load(f)])
    g = torch.Generator()
    g.manual_seed(0)

    def samples():
        while True:
            yield from torch.randperm(len(ds), generator=g).tolist()
    order = samples()
    t0 = time.perf_counter()
    ds[next(order)]
    first_batch_s = time.perf_counter() - t0
    t_warm = time.perf_counter() + max(1.0, cfg["seconds"] / 4)
    while time.perf_counter() < t_warm:
        ds[next(order)]
    cores = min(cfg["workers"], len(os.sched_getaffinity(0)))
    c0, t0, seen = time.thread_time(), time.perf_counter(), 0
    while time.perf_counter() - t0 < cfg["seconds"]:
        ds[next(order)]
        seen += 1
    cpu = time.thread_time() - c0
    print(json.dumps({"samples": seen, "seconds": cpu / cores, "first_batch_s": first_batch_s,
                      "gil": gil_enabled(), "python": python_tag(), "torch": torch.__version__,
                      "chose": {"cpu_ms_per_sample": round(1e3 * cpu / max(1, seen), 3),
                                "cores": cores}}), flush=True)
    os._exit(0)


def plain_threads(cfg):
    """The Dataset's __getitem__ on `workers` plain threads at once, each
    through its own shuffled order, no loader and no collation: samples
    a second over the window."""
    import threading
    import torch
    with open(cfg["items_file"]) as f:
        ds = DATASETS[cfg["work"]]([tuple(x) for x in json.load(f)])
    n = cfg["workers"]
    counts = [0] * n
    stop = threading.Event()
    first = []
    started = threading.Event()

    def run(k):
        try:
            g = torch.Generator()
            g.manual_seed(k)
            while not stop.is_set():
                for i in torch.randperm(len(ds), generator=g).tolist():
                    if stop.is_set():
                        return
                    t0 = time.perf_counter()
                    ds[i]
                    if not first:
                        first.append(time.perf_counter() - t0)
                    counts[k] += 1
                    started.set()
        finally:
            started.set()   # a __getitem__ that raised: no wait for it
    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    # The warm-up starts with the first sample, as the loaders' does with
    # their first batch (a first __getitem__ that imports torchvision can
    # take longer than the warm-up itself on a loaded machine).
    started.wait()
    time.sleep(max(1.0, cfg["seconds"] / 4))
    c0, t0 = sum(counts), time.perf_counter()
    time.sleep(cfg["seconds"])
    seen, dt = sum(counts) - c0, time.perf_counter() - t0
    stop.set()
    print(json.dumps({"samples": seen, "seconds": dt, "first_batch_s": first[0] if first else 0.0,
                      "gil": gil_enabled(), "python": python_tag(), "torch": torch.__version__,
                      "chose": None}), flush=True)
    os._exit(0)


def child(cfg):
    import torch
    torch.set_num_threads(1)
    if cfg["loader"] == "ceiling":
        ceiling(cfg)
    if cfg["loader"] == "threads":
        plain_threads(cfg)
    t0 = time.perf_counter()
    epochs, chose = make_epochs(cfg)

    it = peers.epoch_stream(epochs)
    x, y = next(it)
    first_batch_s = time.perf_counter() - t0
    if x.shape[0] != cfg["batch"] or (cfg["work"] != "pure_python" and
                                      tuple(x.shape[1:]) != (3, 224, 224)):
        raise RuntimeError(f"first batch {tuple(x.shape)}, expected [{cfg['batch']}, 3, 224, 224]")
    t_warm = time.perf_counter() + max(1.0, cfg["seconds"] / 4)
    while time.perf_counter() < t_warm:
        next(it)
    t0 = time.perf_counter()
    seen = 0
    while True:
        x, _ = next(it)
        seen += x.shape[0]
        dt = time.perf_counter() - t0
        if dt >= cfg["seconds"]:
            break
    print(json.dumps({"samples": seen, "seconds": dt, "first_batch_s": first_batch_s,
                      "gil": gil_enabled(), "python": python_tag(), "torch": torch.__version__,
                      "chose": chose()}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # worker processes and threads: no slow teardown


# ----------------------------------------------------------------- the driver

def run_all(a):
    items = subset(a.photos, a.limit)
    folder = None
    works = [w.strip() for w in a.works.split(",") if w.strip()]
    bad = [w for w in works if w not in WORKS]
    if bad:
        raise SystemExit(f"--works: unknown {', '.join(bad)} (known: {', '.join(WORKS)})")
    only = set(l.strip() for l in a.loaders.split(",") if l.strip()) if a.loaders else None
    runs = []
    for w in works:
        for loader, kind, n in loaders_for(w):
            name = loader_name(loader, kind)
            if only and name not in only and f"{name}:{n}" not in only:
                continue
            runs.append((w, loader, kind, n))
    if not runs:
        raise SystemExit("--loaders left no run (names: torch-process, sluice-thread, "
                         "sluice-process, sluice-auto, sluice-native, spdl, torchdata, grain, "
                         "ceiling, threads; NAME or NAME:WORKERS)")
    if any(r[0] == "native" for r in runs):
        folder = subset_folder(a.photos, items, a.cache)
    os.makedirs(a.cache, exist_ok=True)
    items_file = os.path.join(a.cache, f"tvp-items-{os.getpid()}.json")
    with open(items_file, "w") as f:
        json.dump(items, f)
    try:
        return rounds(a, runs, items, folder, items_file)
    finally:
        os.unlink(items_file)


def rounds(a, runs, items, folder, items_file):
    env = peers.sluice_env()
    me = os.path.abspath(__file__)
    timeout = a.seconds * 1.25 + 1 + 300
    got = {r: [] for r in runs}
    errors = {r: [] for r in runs}
    print(f"threads_vs_processes: {python_tag()} ({sys.executable}), {len(items)} photos, "
          f"{len(runs)} runs a round, {a.repeats} rounds, load {os.getloadavg()[0]:.2f}",
          file=sys.stderr, flush=True)
    missing = {}
    for key in runs:
        why = peer_missing(key[1])
        if why:
            missing[key] = why
            print(f"threads_vs_processes: {key[0]} {loader_name(key[1], key[2])}({key[3]}) "
                  f"not run: {why}", file=sys.stderr, flush=True)
    for r in range(a.repeats):
        order = runs[r % len(runs):] + runs[:r % len(runs)]
        for key in order:
            if key in missing:
                continue
            work, loader, kind, n = key
            cfg = {"work": work, "loader": loader, "worker_type": kind, "workers": n,
                   "batch": a.batch, "seconds": a.seconds, "folder": folder,
                   "items_file": items_file}
            cmd = [sys.executable, me, "--_child", json.dumps(cfg)]
            rec, peak, tail = peers.run_child(cmd, env, timeout)
            if rec is None:
                errors[key].append(tail or "no output")
                print(f"threads_vs_processes: round {r + 1} {work} {loader_name(loader, kind)}({n}) "
                      f"FAILED: {tail}", file=sys.stderr, flush=True)
                continue
            rec["peak_rss_mb"] = peak
            got[key].append(rec)
            chose = rec.get("chose") or {}
            extra = ""
            if chose.get("cpu_ms_per_sample") is not None:
                extra = (f", {chose['cpu_ms_per_sample']} ms of CPU a sample, "
                         f"{chose['cores']} cores")
            if chose.get("used"):
                extra = f", ran {chose['used']}"
                if kind == "auto" and chose.get("auto_probe"):
                    extra += f" ({json.dumps(chose['auto_probe'])})"
            print(f"threads_vs_processes: round {r + 1} {work} {loader_name(loader, kind)}({n}): "
                  f"{rec['samples'] / rec['seconds']:.1f} samples/s, peak RSS {peak:.0f} MB, "
                  f"first batch {rec['first_batch_s']:.2f} s, gil {rec['gil']}, "
                  f"load {os.getloadavg()[0]:.2f}{extra}", file=sys.stderr, flush=True)
    rows, failed = [], False
    for key in runs:
        work, loader, kind, n = key
        rs = got[key]
        row = {"python": python_tag(), "gil": None, "torch": None, "work": work, "loader": loader,
               "worker_type": kind, "workers": n, "samples_per_s": None, "peak_rss_mb": None,
               "first_batch_s": None}
        if errors[key]:
            failed = True
        if rs:
            row.update({"gil": all(x["gil"] for x in rs) if len({x["gil"] for x in rs}) == 1
                        else any(x["gil"] for x in rs),
                        "torch": rs[0]["torch"],
                        "samples_per_s": round(statistics.median(x["samples"] / x["seconds"] for x in rs), 1),
                        "peak_rss_mb": round(max(x["peak_rss_mb"] for x in rs), 1),
                        "first_batch_s": round(statistics.median(x["first_batch_s"] for x in rs), 3)})
        rows.append(row)
    return rows, failed


def print_table(rows):
    print(f"{'python':7} {'gil':5} {'work':12} {'loader':16} {'workers':>7} {'samples/s':>10} "
          f"{'peak MB':>8} {'first s':>8}")
    for r in rows:
        sps = "failed" if r["samples_per_s"] is None else f"{r['samples_per_s']:.1f}"
        mb = "" if r["peak_rss_mb"] is None else f"{r['peak_rss_mb']:.0f}"
        fb = "" if r["first_batch_s"] is None else f"{r['first_batch_s']:.2f}"
        print(f"{r['python']:7} {str(r['gil']):5} {r['work']:12} "
              f"{loader_name(r['loader'], r['worker_type']):16} {r['workers']:>7} {sps:>10} {mb:>8} {fb:>8}")


def read_rows(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                if all(k in r for k in KEYS):
                    rows.append(r)
    return rows


def bars(ax, work, rows, label_py, pys, colors):
    """One panel of bars: the best of each loader over its worker counts,
    one bar per interpreter, the workers of the best written on it."""
    best = {}
    for r in rows:
        if r["work"] != work or r["samples_per_s"] is None:
            continue
        k = (loader_name(r["loader"], r["worker_type"]), label_py(r))
        if k not in best or r["samples_per_s"] > best[k]["samples_per_s"]:
            best[k] = r
    names = [n for n in colors if any(k[0] == n for k in best)]
    width = 0.8 / max(1, len(pys))
    for i, py in enumerate(pys):
        for j, n in enumerate(names):
            r = best.get((n, py))
            if r is None:
                continue
            x = j + (i - (len(pys) - 1) / 2) * width
            ax.bar(x, r["samples_per_s"], width * 0.95, color=colors[n],
                   hatch=None if i == 0 else "//", edgecolor="black", linewidth=0.4)
            ax.text(x, r["samples_per_s"], str(r["workers"]), ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=40, ha="right", fontsize=7)
    ax.set_title(work + "  (plain: " + pys[0] + ("; hatched: " + pys[1] if len(pys) > 1 else "") + ")",
                 fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, axis="y")


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    works = [w for w in WORKS if any(r["work"] == w for r in rows)]
    if not works:
        raise SystemExit("--plot: no result rows to draw")
    fig, axes = plt.subplots(1, len(works), figsize=(4.2 * len(works), 4.0), squeeze=False)
    colors = {"torch-process": "tab:blue", "sluice-thread": "tab:red", "sluice-process": "tab:green",
              "sluice-auto": "tab:purple", "sluice-native": "tab:orange", "spdl": "tab:brown",
              "torchdata": "tab:olive", "grain": "tab:cyan", "ceiling": "lightgray",
              "threads": "darkgray"}
    markers = {"torch-process": "o", "sluice-thread": "s", "sluice-process": "^",
               "sluice-auto": "D", "sluice-native": "*", "spdl": "v", "torchdata": "P",
               "grain": "X", "ceiling": "_", "threads": "|"}

    def label_py(r):
        return f"{r['python']}" + (" GIL" if r["gil"] else " no GIL")
    pys = sorted({label_py(r) for r in rows})
    styles = {p: ("-" if i == 0 else "--" if i == 1 else ":") for i, p in enumerate(pys)}
    def curves(work):
        """Whether some loader of `work` ran at 3 or more worker counts."""
        counts = {}
        for r in rows:
            if r["work"] == work and r["samples_per_s"] is not None:
                counts.setdefault((r["loader"], r["worker_type"], label_py(r)), set()).add(
                    r["workers"])
        return any(len(c) >= 3 for c in counts.values())

    for ax, work in zip(axes[0], works):
        if not curves(work):
            bars(ax, work, rows, label_py, pys, colors)
            continue
        # workers as categories (0-3, and Grain's default 16 at the end)
        counts = sorted({r["workers"] for r in rows if r["work"] == work})
        at = {w: i for i, w in enumerate(counts)}
        series = {}
        for r in rows:
            if r["work"] != work or r["samples_per_s"] is None:
                continue
            series.setdefault((loader_name(r["loader"], r["worker_type"]), label_py(r)), []).append(
                (r["workers"], r["samples_per_s"]))
        for (name, py), pts in sorted(series.items()):
            pts.sort()
            xs, ys = [at[p[0]] for p in pts], [p[1] for p in pts]
            ax.plot(xs, ys, linestyle=styles[py] if len(pts) > 1 else "none",
                    marker=markers.get(name, "o"), color=colors.get(name, "black"),
                    label=f"{name}, {py}", markersize=7 if len(pts) > 1 else 9,
                    fillstyle="full" if styles[py] == "-" else "none")
        ax.set_title(work)
        ax.set_xlabel("workers (threads or processes)")
        ax.set_xticks(range(len(counts)))
        ax.set_xticklabels([str(w) for w in counts])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="best")
    axes[0][0].set_ylabel("samples/s")
    torch_v = sorted({r["torch"] for r in rows if r["torch"]})
    fig.suptitle("sluice.torch.DataLoader threads vs torch's process workers and the thread "
                 "peers "
                 f"(torch {', '.join(torch_v)}; {os.cpu_count()} cores)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"threads_vs_processes: wrote {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", help="ImageFolder of JPEGs (bench/README.md: make_photos.py)")
    ap.add_argument("--json", action="store_true", help="one JSON object per line (else a table)")
    ap.add_argument("--seconds", type=float, default=10.0, help="timed seconds per run")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--works", default=",".join(DEFAULT_WORKS),
                    help="comma-separated: " + ", ".join(WORKS) + " (default: the first five)")
    ap.add_argument("--loaders", default=None, help="only these: NAME or NAME:WORKERS, comma-"
                    "separated (torch-process, sluice-thread, sluice-process, sluice-auto, "
                    "sluice-native, spdl, torchdata, grain, ceiling, threads)")
    ap.add_argument("--limit", type=int, default=800, help="photos (0: all)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "sluice-bench"),
                    help="where the native work's symlinked ImageFolder is kept")
    ap.add_argument("--plot", metavar="FILE.png", help="draw samples/s against workers")
    ap.add_argument("results", nargs="*", help="--json outputs of other runs, drawn with --plot")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._child:
        child(json.loads(a._child))
        return 0
    if a.results and not a.plot:
        ap.error("RESULTS files are read only with --plot")
    if not a.photos and not a.plot:
        ap.error("--photos DIR is needed (or --plot FILE.png RESULTS.jsonl ...)")
    rows, failed = [], False
    if a.photos:
        if a.seconds <= 0 or a.repeats < 1 or a.batch < 1:
            ap.error("--seconds > 0, --repeats >= 1 and --batch >= 1")
        rows, failed = run_all(a)
        if a.json:
            for r in rows:
                print(json.dumps({k: r[k] for k in KEYS}), flush=True)
        else:
            print_table(rows)
    if a.plot:
        plot(rows + read_rows(a.results), a.plot)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
