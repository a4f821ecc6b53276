#!/usr/bin/env python3
"""sluice against the loaders users pick instead, on the same photos, the same
work and the same cores, in one run.

    PY bench/peers/run.py --photos DIR --work train|eval --json [--loaders L1,L2,...]
                          [--seconds S] [--repeats R] [--batch B] [--cache DIR]
    PY bench/peers/run.py --idx IMAGES LABELS --work tiny --json [...]
    PY bench/peers/run.py --photos DIR --work train|eval --json --remote-latency-ms MS [...]

PY is the peers' venv python (`bash bench/peers/setup.sh` prints its path);
/usr/bin/python3 runs the rows that need nothing from PyPI (sluice,
sluice-restart, torch). sluice is imported from an installed package, else
from $SLUICE_BUILD/python, else from the repo's build/python.

Loaders: sluice, sluice-restart, torch, tfdata, dali, ffcv, webdataset,
streaming (MosaicML Streaming), and the thread-based ones spdl (SPDL),
torchdata (torchdata.nodes) and grain (Grain) for train and eval; with
--remote-latency-ms also litdata (it needs torch >= 2.4 and runs in its own
venv, which setup.sh makes; --litdata-python). The thread peers need torch
2.x: their runs use --threads-python, else this interpreter when it imports
them, else the `gil` venv of scripts/pythons.sh (setup.sh installs them
there and, where wheels exist, into the free-threaded `ft` one). Each runs
the torch row's Dataset (torchvision's ImageFolder with the same transforms:
PIL decode, then RandomResizedCrop/flip or Resize/CenterCrop, ToTensor,
Normalize) on CORES threads, with torch's default_collate.

1. Each loader's own storage is made from the same inputs, untimed, once, and
   kept under --cache: .slr plain and with --jpeg-restart auto (sluice),
   TFRecord shards of tf.train.Example written by TensorFlow (tfdata; DALI's
   reader for `tiny`), a .beton written by FFCV's DatasetWriter, tar shards
   written by webdataset's ShardWriter, an MDS directory written by
   Streaming's MDSWriter; the photo folder itself for DALI's file reader and
   torchvision's ImageFolder. torch's num_workers is picked once by a short
   calibration run (the fastest of 0, cores, 2x cores) and kept there too.
2. Rounds: --repeats rounds, each running every loader once (the order
   rotates from round to round), each run in its own process: set up, take
   and check the first batch, run --warmup seconds, then count samples for
   --seconds. Epochs follow one another as the loader does them (shuffled
   anew where the work shuffles).
3. One JSON object per loader and line: samples_per_s (median over rounds),
   peak_rss_mb (the largest peak over rounds of the summed RSS of the run's
   process and all its children, sampled every 10 ms; imports included),
   cpu_s_per_sample (user+system CPU of that process tree during the timed
   window / samples; median), threads (the parallelism the loader was
   configured with), version, note (configuration, layout, spread, checks).
   A loader that cannot run here gets a row with nulls and the reason.

Checks: every loader's first batch must have the work's shape, dtype and
value range (train/eval: float32 64x3x224x224 CHW or 64x224x224x3 NHWC, values
inside ImageNet-normalised [0, 1]; tiny: uint8 256x28x28 and int64 labels in
torch tensors); for `eval` (in file order, so every loader's first batch holds
the same 64 photos) the mean pixel of the first batch must agree with
sluice's (or torch's) within 0.03. A failed check says so in the note and
makes the exit status 1.

Remote (--remote-latency-ms MS): every loader that can read remote data reads
its own storage (made as above, then served) from local servers through
tests/remote/delayproxy.c holding every request MS milliseconds: nginx
(tests/remote/httpfix.py) for HTTP, moto's S3 server (tests/io/moto_venv.sh)
for s3://. Runs: sluice and sluice-restart over HTTP and over s3:// (a .slr
dataset directory in 16 MiB shards), webdataset over HTTP (the tar shards),
streaming with remote= s3:// (the MDS directory), litdata with an s3:// input
dir (16 MB chunks written by litdata.optimize), and sluice from the same .slr
directory on local disk (remote null: the rate the remote rows are compared
with). SLUICE_PEERS_SLR_SHARD_BYTES and SLUICE_PEERS_LITDATA_CHUNK change the
two shard sizes; the delay proxy is build/sluice_delayproxy or
$SLUICE_DELAYPROXY. Each reads through the local cache its documentation
recommends, in a directory emptied before each run: sluice's shard cache (SLUICE_CACHE_DIR,
default budget), WebDataset's cache_dir, Streaming's local=, LitData's
cache_dir. Rows gain "remote" ("http", "s3", or null for the local row) and
"latency_ms". --warmup defaults to 0 here, so the timed window starts right
after the first batch and holds the first epoch's fetches. The servers, the
proxies and their CPU are not part of a row's figures (they are not in the
loader's process tree); they share the machine's cores with it.
"""
import argparse
import functools
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench"))
from py_common import _children, epoch_stream, tree_rss_kb  # noqa: E402

# the thread-based peers: the torch row's Dataset on threads (torch 2.x)
THREAD_PEERS = ["spdl", "torchdata", "grain"]
LOADERS = ["sluice", "sluice-restart", "torch", "tfdata", "dali", "ffcv", "webdataset",
           "streaming"] + THREAD_PEERS
PYTHONS = os.environ.get("SLUICE_PYTHONS") or os.path.join(
    os.path.expanduser("~"), ".cache", "sluice-pythons")
# --remote-latency-ms: (loader, remote) in row order; remote None: the local row
REMOTE_RUNS = [("sluice", None), ("sluice", "http"), ("sluice", "s3"), ("sluice-restart", "http"),
               ("sluice-restart", "s3"), ("webdataset", "http"), ("streaming", "s3"),
               ("litdata", "s3")]
REMOTE_LOADERS = sorted({l for l, _ in REMOTE_RUNS})
BUCKET = "sluice-peers"
LITDATA_CHUNK = os.environ.get("SLUICE_PEERS_LITDATA_CHUNK", "16MB")
# the remote rows' .slr directory's shards (bench/remote_bench.sh's size)
SLR_SHARD_BYTES = int(os.environ.get("SLUICE_PEERS_SLR_SHARD_BYTES") or 16 << 20)
LITDATA_VENV = os.environ.get("SLUICE_PEERS_LITDATA_VENV") or os.path.join(
    os.path.expanduser("~"), ".cache", "sluice-peers-litdata")
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
# ImageNet-normalised values of 0 and 255, with a little slack for resampling overshoot
LO = min((0 - m) / s for m, s in zip(MEAN, STD)) - 0.05
HI = max((1 - m) / s for m, s in zip(MEAN, STD)) + 0.05
EVAL_MEAN_TOL = 0.03
CORES = len(os.sched_getaffinity(0))
PIP_NAMES = {"tfdata": "tensorflow-cpu", "dali": "nvidia-dali-cuda130", "ffcv": "ffcv",
             "webdataset": "webdataset", "streaming": "mosaicml-streaming", "litdata": "litdata",
             "spdl": "spdl", "torchdata": "torchdata", "grain": "grain"}
MODULES = {"tfdata": "tensorflow", "dali": "nvidia.dali", "ffcv": "ffcv",
           "webdataset": "webdataset", "streaming": "streaming", "litdata": "litdata",
           "spdl": "spdl.pipeline", "torchdata": "torchdata.nodes", "grain": "grain"}


# ---------------------------------------------------------------- helpers

def import_sluice():
    """sluice from the installed package, else a build tree's python/."""
    try:
        import sluice
        return sluice
    except ImportError:
        pass
    for d in (os.environ.get("SLUICE_BUILD"), os.path.join(REPO, "build")):
        if d and os.path.isdir(os.path.join(d, "python", "sluice")):
            sys.path.insert(0, os.path.join(d, "python"))
            import sluice
            return sluice
    raise ImportError("sluice is neither installed nor built (cmake --build build; or set "
                      "SLUICE_BUILD to a build directory)")


def sluice_env():
    """The environment for child processes: PYTHONPATH gains the build's python/
    when sluice is not installed (only then: an installed sluice's folder is
    the site-packages of this interpreter, which a child on another one, a
    thread peer's, must not see)."""
    env = dict(os.environ)
    try:
        sl = import_sluice()
    except ImportError:
        return env
    d = os.path.dirname(os.path.dirname(os.path.abspath(sl.__file__)))
    if os.path.basename(d) not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = d + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def dist_version(name):
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def importable(mod, py=None):
    """(whether `py` (this interpreter) imports `mod`, the last line of its error)."""
    r = subprocess.run([py or sys.executable, "-c", f"import {mod}"], capture_output=True,
                       text=True)
    return r.returncode == 0, (r.stderr.strip().splitlines() or ["?"])[-1]


def loader_python(loader, cfg):
    """The interpreter a loader's runs use: LitData's own venv; for a thread
    peer --threads-python, else this one when it imports the peer, else the
    `gil` venv of scripts/pythons.sh; else this one."""
    if loader == "litdata":
        return cfg.get("litdata_python") or os.path.join(LITDATA_VENV, "bin", "python")
    if loader in THREAD_PEERS:
        if cfg.get("threads_python"):
            return cfg["threads_python"]
        if importable(MODULES[loader])[0]:
            return sys.executable
        return os.path.join(PYTHONS, "gil", "bin", "python")
    return sys.executable


def unavailable(loader, cfg=None):
    """None when the loader can run here, else why not."""
    if loader in ("sluice", "sluice-restart"):
        try:
            import_sluice()
            return None
        except ImportError as e:
            return f"not installed: {e}"
    if loader == "torch":
        try:
            import torch  # noqa: F401
            import torchvision  # noqa: F401
            return None
        except ImportError as e:
            return f"not installed: {e}"
    py = loader_python(loader, cfg or {})
    thread_peer = loader in THREAD_PEERS
    where = os.path.dirname(os.path.dirname(py)) if thread_peer or loader == "litdata" \
        else sys.prefix
    status = os.path.join(where, "sluice-peers-status", loader + ".txt")
    if os.path.exists(status):
        with open(status) as f:
            return "not installable: " + f.read().strip()
    if not os.access(py, os.X_OK):
        if thread_peer:
            return (f"not installed: no {py} (the thread peers need torch 2.x: "
                    "scripts/pythons.sh makes its venvs, then bench/peers/setup.sh "
                    f"{loader} installs the peer there; or --threads-python)")
        return (f"not installed: no {py} (LitData needs torch >= 2.4: its venv is made by "
                "bench/peers/setup.sh litdata; or --litdata-python)")
    ok, last = importable(MODULES[loader], py)
    if not ok:
        if thread_peer:
            return (f"not installed in {where} ({last}); run bench/peers/setup.sh {loader} "
                    "(it installs into the venvs of scripts/pythons.sh), or --threads-python")
        return (f"not installed in {where} ({last}); run bench/peers/setup.sh and use the "
                "python it prints")
    return None


def tree_cpu_s(pid):
    """User+system CPU seconds of pid and its live descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
        stack.extend(_children(p))
    return total / tick


def tree_threads(pid):
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(l.split()[1]) for l in f if l.startswith("Threads:"))
        except (OSError, StopIteration):
            pass
        stack.extend(_children(p))
    return total


def photo_listing(root):
    """(path, label) in torchvision ImageFolder order (one home: make_tfrecords)."""
    from make_tfrecords import listing
    return listing(root)


def read_idx(path):
    import gzip
    import struct
    import numpy as np
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    if magic >> 8 != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {magic:#x})")
    nd = magic & 0xFF
    dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def input_key(cfg):
    """A short name for the inputs, changing when they change."""
    h = hashlib.sha1()
    if cfg["work"] == "tiny":
        paths = cfg["idx"]
    else:
        paths = [p for p, _ in photo_listing(cfg["photos"])]
        h.update(cfg["photos"].encode())
    for p in paths:
        st = os.stat(p)
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    base = "fmnist" if cfg["work"] == "tiny" else os.path.basename(cfg["photos"].rstrip("/"))
    return f"{base}-{h.hexdigest()[:10]}"


def store_dir(cfg, name):
    return os.path.join(cfg["cache"], input_key(cfg) if "key" not in cfg else cfg["key"], name)


def prepared(cfg, name, make):
    """Run make(tmpdir) once; the directory is published when make returns."""
    d = store_dir(cfg, name)
    if os.path.exists(os.path.join(d, ".done")):
        return d
    os.makedirs(os.path.dirname(d), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}-", dir=os.path.dirname(d))
    t0 = time.perf_counter()
    make(tmp)
    with open(os.path.join(tmp, ".done"), "w") as f:
        f.write(f"{time.perf_counter() - t0:.1f} s\n")
    if os.path.exists(d):
        import shutil
        shutil.rmtree(d)
    os.rename(tmp, d)
    print(f"peers: prepared {d} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return d


def items_for(cfg):
    """The samples in storage order: [(jpeg bytes, label)] or (images, labels)."""
    if cfg["work"] == "tiny":
        x = read_idx(cfg["idx"][0])
        y = read_idx(cfg["idx"][1]).astype("int64")
        return x, y
    out = []
    for p, label in photo_listing(cfg["photos"]):
        with open(p, "rb") as f:
            out.append((f.read(), label))
    return out


# ---------------------------------------------------------------- storage

def prep_sluice(cfg, restart):
    sluice = import_sluice()

    def make(d):
        src = cfg["idx"] if cfg["work"] == "tiny" else cfg["photos"]
        sluice.pack(src, os.path.join(d, "data.slr"),
                    jpeg_restart="auto" if restart else "off")
    name = "slr-restart" if restart else "slr"
    return os.path.join(prepared(cfg, name, make), "data.slr")


def prep_sluice_shards(cfg, restart):
    """The remote rows' .slr: a dataset directory of 16 MiB shards (a remote
    reader fetches the shards it reads, several at once), and the local row's."""
    sluice = import_sluice()

    def make(d):
        sluice.pack(cfg["photos"], os.path.join(d, "train"), shard_bytes=SLR_SHARD_BYTES,
                    jpeg_restart="auto" if restart else "off")
    name = ("slr-shards-restart" if restart else "slr-shards") + (
        "" if SLR_SHARD_BYTES == 16 << 20 else f"-{SLR_SHARD_BYTES}")
    return os.path.join(prepared(cfg, name, make), "train")


def prep_litdata(cfg):
    """Chunks written by litdata.optimize in LitData's own venv (--_prep child):
    each sample {"image": the JPEG opened by PIL, "label"}; LitData's JPEG
    serializer keeps the file's bytes and decodes them with torchvision's
    decode_jpeg when read. One optimize worker keeps the listing order (eval)."""
    def make(d):
        c = dict(cfg, store=os.path.join(d, "optimized"))
        r = subprocess.run([loader_python("litdata", cfg), os.path.abspath(__file__), "--work",
                            cfg["work"], "--_prep", "litdata", "--_cfg", json.dumps(c)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("litdata.optimize failed: " + r.stderr.strip()[-600:])
    return os.path.join(prepared(cfg, "litdata-" + LITDATA_CHUNK, make), "optimized")


def litdata_sample(item):
    """One input of litdata.optimize (at module level: its worker is spawned)."""
    from PIL import Image
    path, label = item
    return {"image": Image.open(path), "label": label}


def litdata_optimize(cfg):
    import litdata
    litdata.optimize(fn=litdata_sample, inputs=photo_listing(cfg["photos"]),
                     output_dir=cfg["store"], chunk_bytes=LITDATA_CHUNK, num_workers=1,
                     mode="overwrite")


def prep_tfrecord(cfg):
    """TFRecord shards of tf.train.Example written by TensorFlow, in listing order,
    with the offset index DALI's TFRecord reader wants beside each shard."""
    def make(d):
        import tensorflow as tf
        shards = 8
        if cfg["work"] == "tiny":
            x, y = items_for(cfg)
            n = len(y)
            rows = ((x[i].tobytes(), int(y[i])) for i in range(n))
            keys = ("image", "label")
        else:
            items = items_for(cfg)
            n = len(items)
            rows = iter(items)
            keys = ("image/encoded", "image/class/label")
        per = (n + shards - 1) // shards
        for s in range(shards):
            path = os.path.join(d, f"data-{s:05d}-of-{shards:05d}.tfrecord")
            offsets = []
            pos = 0
            with tf.io.TFRecordWriter(path) as w:
                for _ in range(min(per, n - s * per)):
                    data, label = next(rows)
                    ex = tf.train.Example(features=tf.train.Features(feature={
                        keys[0]: tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                        keys[1]: tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                    })).SerializeToString()
                    w.write(ex)
                    size = 16 + len(ex)  # length, its crc, data, its crc
                    offsets.append((pos, size))
                    pos += size
            with open(path + ".idx", "w") as f:
                f.writelines(f"{o} {s}\n" for o, s in offsets)
    return prepared(cfg, "tfrecord", make)


def prep_beton(cfg):
    def make(d):
        from ffcv.fields import IntField, NDArrayField, RGBImageField
        from ffcv.writer import DatasetWriter
        import numpy as np
        if cfg["work"] == "tiny":
            x, y = items_for(cfg)

            class DS:
                def __len__(self):
                    return len(y)

                def __getitem__(self, i):
                    return x[i], int(y[i])
            fields = {"image": NDArrayField(np.dtype("uint8"), (28, 28)), "label": IntField()}
        else:
            from PIL import Image
            listing = photo_listing(cfg["photos"])

            class DS:
                def __len__(self):
                    return len(listing)

                def __getitem__(self, i):
                    p, label = listing[i]
                    with Image.open(p) as im:
                        return im.convert("RGB"), label
            # FFCV stores pixels it encodes itself: JPEG at the sources' quality (90),
            # full size (no max_resolution), every image compressed.
            fields = {"image": RGBImageField(write_mode="jpg", jpeg_quality=90),
                      "label": IntField()}
        DatasetWriter(os.path.join(d, "data.beton"), fields, num_workers=CORES).from_indexed_dataset(DS())
    return os.path.join(prepared(cfg, "beton", make), "data.beton")


def prep_wds(cfg):
    def make(d):
        import webdataset as wds
        shards = 8
        pattern = os.path.join(d, "data-%05d.tar")
        if cfg["work"] == "tiny":
            x, y = items_for(cfg)
            n = len(y)
            per = (n + shards - 1) // shards
            with wds.ShardWriter(pattern, maxcount=per, verbose=0) as w:
                for i in range(n):
                    w.write({"__key__": f"{i:06d}", "u8": x[i].tobytes(), "cls": int(y[i])})
        else:
            items = items_for(cfg)
            per = (len(items) + shards - 1) // shards
            with wds.ShardWriter(pattern, maxcount=per, verbose=0) as w:
                for i, (data, label) in enumerate(items):
                    w.write({"__key__": f"{i:06d}", "jpg": data, "cls": label})
    return prepared(cfg, "wds", make)


def prep_mds(cfg):
    def make(d):
        from streaming import MDSWriter
        out = os.path.join(d, "mds")
        if cfg["work"] == "tiny":
            x, y = items_for(cfg)
            with MDSWriter(out=out, columns={"image": "ndarray:uint8:28,28", "label": "int"},
                           progress_bar=False) as w:
                for i in range(len(y)):
                    w.write({"image": x[i], "label": int(y[i])})
        else:
            with MDSWriter(out=out, columns={"image": "bytes", "label": "int"},
                           progress_bar=False) as w:
                for data, label in items_for(cfg):
                    w.write({"image": data, "label": label})
    return os.path.join(prepared(cfg, "mds", make), "mds")


def prepare(loader, cfg):
    if cfg.get("remote_runs"):  # --remote-latency-ms: each loader's remote storage
        if loader in ("sluice", "sluice-restart"):
            return prep_sluice_shards(cfg, loader == "sluice-restart")
        if loader == "litdata":
            return prep_litdata(cfg)
    if loader == "sluice":
        return prep_sluice(cfg, False)
    if loader == "sluice-restart":
        return prep_sluice(cfg, True)
    if loader == "tfdata":
        return prep_tfrecord(cfg)
    if loader == "dali":
        return prep_tfrecord(cfg) if cfg["work"] == "tiny" else cfg["photos"]
    if loader == "ffcv":
        return prep_beton(cfg)
    if loader == "webdataset":
        return prep_wds(cfg)
    if loader == "streaming":
        return prep_mds(cfg)
    if loader in ("torch", *THREAD_PEERS):
        return None
    raise ValueError(loader)


# ---------------------------------------------------------------- loaders
# Each returns (epochs, threads, version, note): epochs(e) iterates epoch e as
# (images, labels) batches.

def torch_transforms(work):
    from torchvision import transforms as T
    if work == "train":
        return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                          T.Normalize(MEAN, STD)])
    return T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])


def torch_loader_kw(workers):
    return dict(num_workers=workers, persistent_workers=workers > 0, pin_memory=False)


def load_sluice(cfg, store, restart):
    sluice = import_sluice()
    B = cfg["batch"]
    rem = cfg.get("remote")
    if rem:  # SLUICE_CACHE_DIR (and for s3:// the AWS_* variables) set by the parent
        store = rem["url"]
    ds = sluice.records(store)
    if cfg["work"] == "tiny":
        ds = ds.shuffle(seed=0)
    elif cfg["work"] == "train":
        ds = (ds.shuffle(seed=0).decode("image").random_resized_crop("image", 224)
              .flip("image").normalize("image", mean=MEAN, std=STD, layout="chw"))
    else:
        ds = (ds.decode("image").resize("image", 256).center_crop("image", 224)
              .normalize("image", mean=MEAN, std=STD, layout="chw"))
    depth = cfg.get("sluice_prefetch", 4)
    ds = ds.batch(B).prefetch(depth)

    def epochs(e):
        ds.set_epoch(e)
        for b in ds.torch():
            yield b["image"], b["label"]
    store_kind = ".slr with --jpeg-restart auto" if restart else ".slr"
    if cfg.get("remote_runs"):
        store_kind += " packed in 16 MiB shards"
    if rem:
        store_kind += (f", {rem['url'].split(':')[0]}:// through the delay proxy; shard cache "
                       "(SLUICE_CACHE_DIR, default budget) emptied before the run")
    return epochs, CORES, sluice.__version__, (
        f"{store_kind}; engine threads autotuned for {CORES} cores, prefetch {depth}, torch tensors "
        "(DLPack, no copy)" + ("; CHW" if cfg["work"] != "tiny" else ""))


def load_torch(cfg, store):
    import torch
    import torchvision
    from torch.utils.data import DataLoader, TensorDataset
    B, work = cfg["batch"], cfg["work"]
    workers = cfg.get("torch_workers", CORES)
    if work == "tiny":
        x, y = items_for(cfg)
        ds = TensorDataset(torch.from_numpy(x.copy()), torch.from_numpy(y))
        what = "DataLoader(TensorDataset)"
    else:
        ds = torchvision.datasets.ImageFolder(cfg["photos"], transform=torch_transforms(work))
        what = "DataLoader(ImageFolder), torchvision transforms on PIL"
    torch.manual_seed(0)
    dl = DataLoader(ds, batch_size=B, shuffle=work != "eval", **torch_loader_kw(workers))

    def epochs(e):
        yield from dl
    return epochs, workers, f"torch {torch.__version__}, torchvision {torchvision.__version__}", (
        f"{what}; num_workers={workers}{'' if 'torch_workers_given' in cfg else ' (fastest of a calibration)'}, "
        f"persistent_workers={workers > 0}, pin_memory=False" + ("; CHW" if work != "tiny" else ""))


def load_tfdata(cfg, store):
    import glob
    import tensorflow as tf
    B, work = cfg["batch"], cfg["work"]
    AUTO = tf.data.AUTOTUNE
    files = sorted(glob.glob(os.path.join(store, "*.tfrecord")))
    mean = tf.constant(MEAN) * 255.0
    std = tf.constant(STD) * 255.0
    opts = tf.data.Options()
    opts.deterministic = work == "eval"
    if work == "tiny":
        desc = {"image": tf.io.FixedLenFeature([], tf.string),
                "label": tf.io.FixedLenFeature([], tf.int64)}

        def parse(recs):  # vectorised: parses a whole batch of records at once
            f = tf.io.parse_example(recs, desc)
            return tf.reshape(tf.io.decode_raw(f["image"], tf.uint8), [-1, 28, 28]), f["label"]
        # tf.data's guide: read once, parse vectorised, cache in memory, then shuffle
        # the whole set each epoch, batch, prefetch
        ds = (tf.data.TFRecordDataset(files, num_parallel_reads=AUTO).batch(1024)
              .map(parse, num_parallel_calls=AUTO).unbatch().cache()
              .shuffle(60000, seed=0, reshuffle_each_iteration=True)
              .batch(B).prefetch(AUTO).with_options(opts).repeat())
        note = ("TFRecord, vectorised parse, cache(), shuffle(whole set), AUTOTUNE; tensors "
                "handed to torch with torch.from_numpy(t.numpy())")
        import torch

        def epochs(e):
            for x, y in ds:
                yield torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy())
        return epochs, CORES, f"tensorflow-cpu {tf.__version__}", note
    desc = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

    def finish(img):
        img = tf.image.resize(img, [224, 224], method="bilinear", antialias=True)
        return (img - mean) / std

    def train_map(rec):
        f = tf.io.parse_single_example(rec, desc)
        jpeg = f["image/encoded"]
        shape = tf.io.extract_jpeg_shape(jpeg)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
            min_object_covered=0.0, aspect_ratio_range=[3 / 4, 4 / 3], area_range=[0.08, 1.0],
            max_attempts=10, use_image_if_no_bounding_boxes=True)
        y0, x0, _ = tf.unstack(begin)
        h, w, _ = tf.unstack(size)
        img = tf.io.decode_and_crop_jpeg(jpeg, tf.stack([y0, x0, h, w]), channels=3)  # ROI decode
        img = tf.image.random_flip_left_right(finish(tf.cast(img, tf.float32)))
        return img, f["image/class/label"]

    def eval_map(rec):
        f = tf.io.parse_single_example(rec, desc)
        jpeg = f["image/encoded"]
        shape = tf.io.extract_jpeg_shape(jpeg)
        h, w = shape[0], shape[1]
        # resize 256 + center crop 224 == the central square of side 224/256 of the
        # shorter side, resized to 224: decode only that window (ROI decode)
        side = tf.cast(tf.cast(tf.minimum(h, w), tf.float32) * (224 / 256), tf.int32)
        y0, x0 = (h - side) // 2, (w - side) // 2
        img = tf.io.decode_and_crop_jpeg(jpeg, tf.stack([y0, x0, side, side]), channels=3)
        return finish(tf.cast(img, tf.float32)), f["image/class/label"]

    if work == "train":
        ds = (tf.data.Dataset.from_tensor_slices(files).shuffle(len(files), seed=0)
              .interleave(tf.data.TFRecordDataset, cycle_length=len(files),
                          num_parallel_calls=AUTO, deterministic=False)
              .shuffle(10000, seed=0).map(train_map, num_parallel_calls=AUTO)
              .batch(B).prefetch(AUTO).with_options(opts).repeat())
        note = ("TFRecord shards, parallel interleave, shuffle(10000), sample_distorted_bounding_box "
                "+ decode_and_crop_jpeg (ROI), resize antialias, AUTOTUNE map/prefetch, "
                "deterministic off; NHWC (tf.image has no CHW), TF tensors")
    else:
        ds = (tf.data.TFRecordDataset(files).map(eval_map, num_parallel_calls=AUTO)
              .batch(B).prefetch(AUTO).with_options(opts).repeat())
        note = ("TFRecord shards in order, decode_and_crop_jpeg of the central crop window (ROI), "
                "resize antialias, AUTOTUNE map/prefetch; NHWC, TF tensors")

    def epochs(e):
        yield from ds
    return epochs, CORES, f"tensorflow-cpu {tf.__version__}", note


def load_dali(cfg, store):
    import glob
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def
    import nvidia.dali as dali
    B, work = cfg["batch"], cfg["work"]
    kw = dict(batch_size=B, num_threads=CORES, device_id=None, seed=0)
    if work == "tiny":
        import nvidia.dali.tfrecord as tfrec
        files = sorted(glob.glob(os.path.join(store, "*.tfrecord")))

        @pipeline_def(**kw)
        def pipe():
            r = fn.readers.tfrecord(path=files, index_path=[f + ".idx" for f in files],
                                    features={"image": tfrec.FixedLenFeature((), tfrec.string, ""),
                                              "label": tfrec.FixedLenFeature([1], tfrec.int64, -1)},
                                    random_shuffle=True, name="Reader")
            return fn.reshape(r["image"], shape=[28, 28]), fn.reshape(r["label"], shape=[])
        note = "fn.readers.tfrecord (random_shuffle), CPU-only pipeline, outputs copied into torch tensors"
    else:
        mean = [m * 255 for m in MEAN]
        std = [s * 255 for s in STD]

        @pipeline_def(**kw)
        def pipe():
            jpegs, labels = fn.readers.file(file_root=store, random_shuffle=work == "train",
                                            name="Reader")
            if work == "train":
                img = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                    random_aspect_ratio=[3 / 4, 4 / 3],
                                                    random_area=[0.08, 1.0], num_attempts=100)
                img = fn.resize(img, resize_x=224, resize_y=224)
                mirror = fn.random.coin_flip(probability=0.5)
            else:
                img = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
                img = fn.resize(img, resize_shorter=256)
                mirror = 0
            img = fn.crop_mirror_normalize(img, dtype=types.FLOAT, output_layout="CHW",
                                           crop=(224, 224), mean=mean, std=std, mirror=mirror)
            return img, fn.cast(labels, dtype=types.INT64)
        if work == "train":
            note = ("fn.readers.file (random_shuffle) + fn.decoders.image_random_crop (ROI) + "
                    "fn.resize + fn.crop_mirror_normalize; CHW")
        else:
            note = ("fn.readers.file + fn.decoders.image + fn.resize(resize_shorter=256) + "
                    "fn.crop_mirror_normalize(crop 224); CHW")
        note += "; CPU-only (device_id=None), outputs copied into torch tensors"
    p = pipe()
    p.build()
    # DALI's PyTorch iterator (DALIGenericIterator) needs torch >= 2.0 (it uses
    # torch.device as a context manager); Debian's torch is 1.13. So the outputs of
    # pipe.run() are copied into torch tensors here, as that iterator would copy them.
    import numpy as np
    import torch
    n = p.reader_meta("Reader")["epoch_size"]
    per_epoch = (n + B - 1) // B

    def epochs(e):
        for _ in range(per_epoch):  # the reader wraps into the next epoch: a continuous stream
            img, lab = p.run()
            yield (torch.from_numpy(np.array(img.as_tensor())),
                   torch.from_numpy(np.array(lab.as_tensor())))
    return epochs, CORES, f"nvidia-dali {dali.__version__}", note + f", num_threads={CORES}"


def load_ffcv(cfg, store):
    import numpy as np
    from ffcv.fields.decoders import (CenterCropRGBImageDecoder, IntDecoder, NDArrayDecoder,
                                      RandomResizedCropRGBImageDecoder)
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, Squeeze, ToTensor, ToTorchImage
    B, work = cfg["batch"], cfg["work"]
    label = [IntDecoder(), ToTensor(), Squeeze()]
    if work == "tiny":
        image = [NDArrayDecoder(), ToTensor()]
        note = "NDArrayField .beton, os_cache=True, QUASI_RANDOM"
    else:
        norm = NormalizeImage(np.array(MEAN) * 255, np.array(STD) * 255, np.float32)
        if work == "train":
            image = [RandomResizedCropRGBImageDecoder((224, 224)), RandomHorizontalFlip(), norm,
                     ToTensor(), ToTorchImage()]
            note = "RandomResizedCropRGBImageDecoder + RandomHorizontalFlip"
        else:
            image = [CenterCropRGBImageDecoder((224, 224), ratio=224 / 256), norm, ToTensor(),
                     ToTorchImage()]
            note = "CenterCropRGBImageDecoder(ratio 224/256)"
        note += (" + NormalizeImage (JIT, CPU), ToTorchImage: CHW view of NHWC memory "
                 "(channels_last); .beton JPEGs re-encoded by FFCV's writer at quality 90, "
                 "full size; os_cache=True, " + ("QUASI_RANDOM" if work == "train" else "SEQUENTIAL"))
    order = {"train": OrderOption.QUASI_RANDOM, "eval": OrderOption.SEQUENTIAL,
             "tiny": OrderOption.QUASI_RANDOM}[work]
    loader = Loader(store, batch_size=B, num_workers=CORES, order=order, os_cache=True,
                    drop_last=False, seed=0, pipelines={"image": image, "label": label})

    def epochs(e):
        for x, y in loader:
            yield x, y
    return epochs, CORES, f"ffcv {dist_version('ffcv')}", note + f", num_workers={CORES}"


def load_wds(cfg, store):
    import glob
    import numpy as np
    import torch
    import webdataset as wds
    B, work = cfg["batch"], cfg["work"]
    rem = cfg.get("remote")
    urls = rem["urls"] if rem else sorted(glob.glob(os.path.join(store, "*.tar")))
    # remote: WebDataset's shard cache (cache_dir), as its docs advise for remote shards
    kw = dict(cache_dir=rem["cache_dir"]) if rem else {}
    workers = CORES
    if work == "tiny":
        ds = (wds.WebDataset(urls, shardshuffle=len(urls), seed=0, **kw).shuffle(5000)
              .map(lambda s: (torch.from_numpy(np.frombuffer(s["u8"], np.uint8).reshape(28, 28)),
                              int(s["cls"])))
              .batched(B, partial=True))
        note = "tar shards, shardshuffle + shuffle(5000), samples batched in the workers"
    else:
        tf = torch_transforms(work)
        if work == "train":
            ds = wds.WebDataset(urls, shardshuffle=len(urls), seed=0, **kw).shuffle(1000)
        else:
            ds = wds.WebDataset(urls, shardshuffle=False, **kw)
        ds = ds.decode("pil").to_tuple("jpg", "cls").map_tuple(tf, lambda c: c).batched(B, partial=True)
        note = ("tar shards, decode('pil') + torchvision transforms, " +
                ("shardshuffle + shuffle(1000), " if work == "train" else "in order, ") +
                "batched in the workers; CHW")
    if rem:
        note = (f"{len(urls)} tar shards over HTTP (curl, WebDataset's gopen) through the delay "
                "proxy, cache_dir emptied before the run; " + note)
    dl = wds.WebLoader(ds, batch_size=None, **torch_loader_kw(workers))

    def epochs(e):
        for x, y in dl:
            yield x, y
    return epochs, workers, f"webdataset {dist_version('webdataset')}", (
        note + f", WebLoader num_workers={workers}, persistent")


def load_streaming(cfg, store):
    import torch
    from PIL import Image
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    from torch.utils.data import DataLoader
    import io
    clean_stale_shared_memory()
    B, work = cfg["batch"], cfg["work"]
    workers = CORES
    tf = torch_transforms(work) if work != "tiny" else None

    class DS(StreamingDataset):
        def __getitem__(self, i):
            s = super().__getitem__(i)
            if tf is None:
                return torch.from_numpy(s["image"]), s["label"]
            with Image.open(io.BytesIO(s["image"])) as im:
                return tf(im.convert("RGB")), s["label"]
    rem = cfg.get("remote")
    if rem:  # remote= the bucket, local= the cache its docs have shards downloaded into
        ds = DS(remote=rem["url"], local=rem["cache_dir"], shuffle=work != "eval",
                shuffle_seed=1, batch_size=B)
    else:
        ds = DS(local=store, shuffle=work != "eval", shuffle_seed=1, batch_size=B)
    dl = DataLoader(ds, batch_size=B, **torch_loader_kw(workers))

    def epochs(e):
        ds.set_epoch(e) if hasattr(ds, "set_epoch") else None
        yield from dl
    where = ("remote= s3:// (boto3, S3_ENDPOINT_URL) through the delay proxy, local= cache "
             "emptied before the run; " if rem else "")
    return epochs, workers, f"mosaicml-streaming {dist_version('mosaicml-streaming')}", (
        where + "MDS shards" + (" (original JPEG bytes)" if tf else "") + ", StreamingDataset" +
        (", PIL + torchvision transforms; CHW" if tf else "") +
        f", DataLoader num_workers={workers}, persistent")


def load_litdata(cfg, store):
    """LitData's StreamingDataset over s3:// with its StreamingDataLoader, as its
    README does it; JPEGs decoded by its serializer (torchvision decode_jpeg),
    then torchvision.transforms.v2 on uint8 tensors."""
    import litdata
    import torch
    import torchvision
    from torchvision.transforms import v2
    B, work = cfg["batch"], cfg["work"]
    rem = cfg["remote"]
    workers = CORES
    # LitData's default chunk prefetch for remote data (async, obstore) refuses a
    # plain-http endpoint unless obstore's allow_http is on, and LitData passes
    # obstore client options of its own, which override AWS_ALLOW_HTTP: add it
    # there (the local servers speak http; S3 itself is https and needs nothing)
    from litdata.streaming import downloader
    opts = getattr(downloader, "_OBSTORE_CLIENT_OPTIONS", None)
    if isinstance(opts, dict):
        opts["allow_http"] = "true"
    if work == "train":
        tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    else:
        tf = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])

    class DS(litdata.StreamingDataset):
        def __getitem__(self, i):
            s = super().__getitem__(i)
            img = s["image"]
            if not isinstance(img, torch.Tensor):  # the serializer's PIL fallback
                img = v2.functional.pil_to_tensor(img.convert("RGB"))
            if img.shape[0] == 1:
                img = img.expand(3, -1, -1)
            return tf(img), s["label"]
    ds = DS(rem["url"], cache_dir=rem["cache_dir"], shuffle=work != "eval", seed=1,
            storage_options=rem["storage_options"])
    dl = litdata.StreamingDataLoader(ds, batch_size=B, num_workers=workers,
                                     persistent_workers=workers > 0)

    def epochs(e):
        yield from dl
    return epochs, workers, (f"litdata {dist_version('litdata')}, torch {torch.__version__}, "
                             f"torchvision {torchvision.__version__}"), (
        "s3:// input dir (storage_options endpoint_url; index by boto3, chunks by its async "
        "obstore prefetch, allow_http) through the delay proxy, "
        "cache_dir emptied before the run; chunks of litdata.optimize (64MB), JPEG serializer "
        "(torchvision decode_jpeg), transforms.v2 on uint8 tensors; CHW; "
        f"StreamingDataLoader num_workers={workers}, persistent")


def thread_peer_epochs(loader, ds, batch, threads, shuffle):
    """A thread peer running a map-style Dataset `ds` (the per-sample work is
    its __getitem__) as its documentation builds such a loader, collating
    with torch's default_collate, shuffled per epoch or in order: (epochs,
    threads, note). threads None: the peer's own default. Used by the rows
    here and by bench/threads_vs_processes.py."""
    import torch
    from torch.utils.data import default_collate
    if loader == "spdl":
        # SPDL's Pipeline as its docs build a loader: the sampler's indices as
        # the source, __getitem__ in a stage of `threads` concurrent tasks on
        # a pool of as many threads, aggregate, collate, a sink buffer.
        from spdl.pipeline import PipelineBuilder
        n = threads or CORES
        order = "completion" if shuffle else "input"
        g = torch.Generator()
        g.manual_seed(0)

        def epochs(e):
            idx = torch.randperm(len(ds), generator=g).tolist() if shuffle else range(len(ds))
            pipe = (PipelineBuilder().add_source(idx)
                    .pipe(ds.__getitem__, concurrency=n, output_order=order)
                    .aggregate(batch).pipe(default_collate).add_sink(3)
                    .build(num_threads=n))
            with pipe.auto_stop():
                yield from pipe
        return epochs, n, (f"PipelineBuilder: source = the sampler's order, pipe(__getitem__, "
                           f"concurrency={n}, output_order={order!r}), aggregate({batch}), "
                           f"pipe(default_collate), add_sink(3), build(num_threads={n})")
    if loader == "torchdata":
        # torchdata.nodes as its migration guide builds a map-style loader.
        import torchdata.nodes as tn
        from torch.utils.data import RandomSampler, SequentialSampler
        n = threads or CORES
        g = torch.Generator()
        g.manual_seed(0)
        sampler = RandomSampler(ds, generator=g) if shuffle else SequentialSampler(ds)

        def map_and_collate(indices):
            return default_collate([ds[i] for i in indices])
        in_order = not shuffle
        node = tn.Batcher(tn.SamplerWrapper(sampler), batch_size=batch, drop_last=False)
        node = tn.ParallelMapper(node, map_fn=map_and_collate, num_workers=n, method="thread",
                                 in_order=in_order)
        node = tn.Prefetcher(node, prefetch_factor=2 * n)
        loader_ = tn.Loader(node)

        def epochs(e):
            yield from loader_
        return epochs, n, (f"SamplerWrapper + Batcher({batch}) + ParallelMapper(map and "
                           f"default_collate a batch, num_workers={n}, method='thread', "
                           f"in_order={in_order}) + Prefetcher({2 * n}) + Loader")
    if loader == "grain":
        # Grain's dataset API; to_iter_dataset's ReadOptions threads run
        # __getitem__ (Grain's defaults: 16 threads, a buffer of 500).
        import grain
        opts = grain.ReadOptions() if threads is None else grain.ReadOptions(num_threads=threads)

        def epochs(e):
            m = grain.MapDataset.source(ds)
            if shuffle:
                m = m.shuffle(seed=e)
            yield from m.to_iter_dataset(read_options=opts).batch(batch, batch_fn=default_collate)
        return epochs, opts.num_threads, (
            f"MapDataset.source(dataset){'.shuffle(seed=epoch)' if shuffle else ''}"
            f".to_iter_dataset(ReadOptions(num_threads={opts.num_threads}, prefetch_buffer_size="
            f"{opts.prefetch_buffer_size}){', Grain defaults' if threads is None else ''})"
            f".batch({batch}, batch_fn=default_collate)")
    raise ValueError(loader)


def thread_peer_version(loader):
    import torch
    import torchvision
    names = {"grain": ("grain", "grain-free-threading")}.get(loader, (loader,))
    v = next((dist_version(n) for n in names if dist_version(n)), None)
    return f"{loader} {v}, torch {torch.__version__}, torchvision {torchvision.__version__}"


def load_thread_peer(cfg, loader):
    """A thread peer's row: the torch row's Dataset (torchvision's
    ImageFolder, the work's transforms on PIL) on CORES threads (Grain: its
    default ReadOptions)."""
    import torchvision
    ds = torchvision.datasets.ImageFolder(cfg["photos"], transform=torch_transforms(cfg["work"]))
    epochs, threads, note = thread_peer_epochs(loader, ds, cfg["batch"],
                                               None if loader == "grain" else CORES,
                                               cfg["work"] == "train")
    return epochs, threads, thread_peer_version(loader), (
        note + "; torchvision ImageFolder + transforms (PIL), as the torch row; CHW; " +
        interpreter_note())


def interpreter_note():
    """How this interpreter runs threads (a free-threaded build: GIL on or off)."""
    import sysconfig
    v = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        return v + " (GIL)"
    return v + "t, GIL " + ("on" if getattr(sys, "_is_gil_enabled", lambda: True)() else "off")


def make_loader(loader, cfg, store):
    if loader in THREAD_PEERS:
        return load_thread_peer(cfg, loader)
    if loader in ("sluice", "sluice-restart"):
        return load_sluice(cfg, store, loader == "sluice-restart")
    return {"torch": load_torch, "tfdata": load_tfdata, "dali": load_dali, "ffcv": load_ffcv,
            "webdataset": load_wds, "streaming": load_streaming,
            "litdata": load_litdata}[loader](cfg, store)


# ---------------------------------------------------------------- one timed run (child)

def to_numpy(t):
    if hasattr(t, "numpy"):
        try:
            return t.numpy()
        except (TypeError, RuntimeError):
            pass
    import numpy as np
    return np.asarray(t)


def batch_facts(x, y):
    import numpy as np
    tname = type(x).__module__.split(".")[0] + "." + type(x).__name__
    a = to_numpy(x)
    facts = {"type": tname, "shape": list(a.shape), "dtype": str(a.dtype),
             "min": float(a.min()), "max": float(a.max()), "mean": float(a.astype(np.float64).mean()),
             "label_dtype": str(to_numpy(y).dtype), "label_shape": list(to_numpy(y).shape)}
    return facts


def child(loader, cfg):
    store = cfg.get("store")
    t0 = time.perf_counter()
    epochs, threads, version, note = make_loader(loader, cfg, store)

    it = epoch_stream(epochs)
    x, y = next(it)
    first = batch_facts(x, y)
    setup_s = time.perf_counter() - t0
    t_warm = time.perf_counter() + cfg["warmup"]
    while time.perf_counter() < t_warm:
        next(it)
    me = os.getpid()
    cpu0 = tree_cpu_s(me)
    t0 = time.perf_counter()
    seen = 0
    while True:
        x, _ = next(it)
        seen += x.shape[0]
        dt = time.perf_counter() - t0
        if dt >= cfg["seconds"]:
            break
    cpu = tree_cpu_s(me) - cpu0
    os_threads = tree_threads(me)
    print(json.dumps({"samples": seen, "seconds": dt, "cpu_s": cpu, "threads": threads,
                      "os_threads": os_threads, "version": version, "note": note,
                      "first": first, "setup_s": setup_s}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # loaders with worker processes and threads: no slow teardown


def run_child(args_list, env, timeout):
    """Run a child; return (its JSON or None, peak tree RSS MB, stderr tail)."""
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(args_list, stdout=subprocess.PIPE, stderr=err, env=env, text=True)
        peak = [0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], tree_rss_kb(proc.pid))
                time.sleep(0.01)
        t = threading.Thread(target=sample, daemon=True)
        t.start()
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            out = ""
        done.set()
        t.join()
        err.seek(0)
        tail = [l for l in err.read().splitlines() if l.strip()][-3:]
    rec = None
    for line in out.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
    if proc.returncode != 0:
        rec = None
    return rec, peak[0] / 1024.0, " | ".join(tail)[-400:]


# ---------------------------------------------------------------- checks

def check_first(work, first, batch):
    """Why the first batch is wrong, or None."""
    s, dt = first["shape"], first["dtype"]
    if work == "tiny":
        if first["type"] != "torch.Tensor":
            return f"images are {first['type']}, not torch tensors"
        if s[1:] != [28, 28] or dt != "uint8" or s[0] != batch:
            return f"images {s} {dt}, expected [{batch}, 28, 28] uint8"
        if first["label_dtype"] != "int64" or first["label_shape"] != [batch]:
            return f"labels {first['label_shape']} {first['label_dtype']}, expected [{batch}] int64"
        if first["max"] <= first["min"]:
            return "constant images"
        return None
    if s not in ([batch, 3, 224, 224], [batch, 224, 224, 3]):
        return f"images {s}, expected [{batch}, 3, 224, 224] or NHWC"
    if dt != "float32":
        return f"images are {dt}, expected float32"
    if first["min"] < LO or first["max"] > HI or first["max"] - first["min"] < 1.0:
        return (f"values in [{first['min']:.3f}, {first['max']:.3f}], expected inside "
                f"[{LO:.2f}, {HI:.2f}] (ImageNet-normalised) and spread")
    return None


def check_mean(first, ref_name, ref_mean):
    """eval: the same photos in the same order give (nearly) the same mean pixel of
    the first batch, whatever the resampling filter; less work (no normalize,
    no crop, other images) does not."""
    d = abs(first["mean"] - ref_mean)
    if d > EVAL_MEAN_TOL:
        return (f"first-batch mean {first['mean']:.4f} differs from {ref_name}'s "
                f"{ref_mean:.4f} by {d:.4f} (> {EVAL_MEAN_TOL})")
    return None


# ---------------------------------------------------------------- remote servers

def delayproxy_exe():
    """build/sluice_delayproxy (CMake target sluice_delayproxy) beside the sluice
    that runs here, or $SLUICE_DELAYPROXY."""
    cands = [os.environ.get("SLUICE_DELAYPROXY")]
    try:
        sl = import_sluice()
        cands.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(sl.__file__)))), "sluice_delayproxy"))
    except ImportError:
        pass
    cands += [os.path.join(d, "sluice_delayproxy") for d in
              (os.environ.get("SLUICE_BUILD"), os.path.join(REPO, "build")) if d]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    raise RuntimeError("no sluice_delayproxy (tests/remote/delayproxy.c): cmake --build build "
                       "--target sluice_delayproxy, or set SLUICE_DELAYPROXY")


class RemoteServers:
    """nginx serving the inputs' storage directory and moto's S3 server, each
    behind a delayproxy adding latency_ms to every request. Started only for
    the kinds asked for; a server that cannot start leaves its reason in
    `why[kind]` for those rows."""

    def __init__(self, root, kinds, latency_ms):
        sys.path.insert(0, os.path.join(REPO, "tests", "remote"))
        import httpfix
        self.httpfix = httpfix
        self.root, self.latency_ms = root, latency_ms
        self.nginx = self.moto = None
        self.proxies, self.why, self.uploaded = {}, {}, set()
        try:
            exe = delayproxy_exe()
        except RuntimeError as e:
            self.why = {k: str(e) for k in kinds}
            return
        if "http" in kinds:
            try:
                if not httpfix.have_nginx():
                    raise RuntimeError(f"no nginx at {httpfix.NGINX} (Debian: nginx-light)")
                self.nginx = httpfix.Nginx(root)
                self.proxies["http"] = httpfix.DelayProxy(exe, self.nginx.port, latency_ms)
            except (RuntimeError, OSError) as e:
                self.why["http"] = f"nginx could not be started: {e}"[:400]
        if "s3" in kinds:
            try:
                self.moto = httpfix.Moto()
                self.proxies["s3"] = httpfix.DelayProxy(exe, self.moto.port, latency_ms)
            except (RuntimeError, OSError) as e:
                self.why["s3"] = f"moto could not be started: {e}"[:400]

    def url(self, kind, store):
        """The URL of a local store directory (ending in "/": for s3:// a
        prefix, a .slr dataset directory) or file under root."""
        rel = os.path.relpath(store, self.root)
        end = "/" if os.path.isdir(store) else ""
        if kind == "http":
            return f"{self.proxies['http'].url}/{rel}{end}"
        if rel not in self.uploaded:
            t0 = time.perf_counter()
            self.moto.put_dir(store, BUCKET, rel)
            self.uploaded.add(rel)
            print(f"peers: uploaded {rel} to moto in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)
        return f"s3://{BUCKET}/{rel}{end}"

    def s3_env(self):
        m = self.httpfix.Moto
        ep = self.proxies["s3"].url
        # AWS_ALLOW_HTTP: LitData's chunk prefetch goes through obstore, which takes
        # a plain-http endpoint only when told so (its environment settings)
        return {"AWS_ENDPOINT_URL": ep, "S3_ENDPOINT_URL": ep, "AWS_ACCESS_KEY_ID": m.KEY_ID,
                "AWS_SECRET_ACCESS_KEY": m.SECRET, "AWS_REGION": m.REGION,
                "AWS_DEFAULT_REGION": m.REGION, "AWS_ALLOW_HTTP": "true"}

    def close(self):
        for k, p in self.proxies.items():
            counts = p.close()
            if counts:
                print(f"peers: delayproxy ({k}, {self.latency_ms:g} ms): {counts}", file=sys.stderr)
        if self.nginx:
            self.nginx.close()
        if self.moto:
            self.moto.close()


def remote_cfg(servers, loader, kind, store, cache_dir):
    """The child's view of its remote input: URL(s), cache directory, endpoint."""
    rem = {"kind": kind, "cache_dir": cache_dir, "latency_ms": servers.latency_ms}
    if loader == "webdataset":
        names = sorted(n for n in os.listdir(store) if n.endswith(".tar"))
        base = servers.url(kind, store)
        rem["urls"] = [base + n for n in names]
        rem["url"] = base
    else:
        rem["url"] = servers.url(kind, store)
    if kind == "s3":
        e = servers.s3_env()
        rem["storage_options"] = {"endpoint_url": e["AWS_ENDPOINT_URL"],
                                  "aws_access_key_id": e["AWS_ACCESS_KEY_ID"],
                                  "aws_secret_access_key": e["AWS_SECRET_ACCESS_KEY"]}
    return rem


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", help="ImageFolder of JPEGs (train, eval)")
    ap.add_argument("--idx", nargs=2, metavar=("IMAGES", "LABELS"), help="IDX files (tiny)")
    ap.add_argument("--work", required=True, choices=["train", "eval", "tiny"])
    ap.add_argument("--json", action="store_true", help="one JSON object per line (the only output form)")
    ap.add_argument("--loaders", default=None, help="comma-separated; default: all")
    ap.add_argument("--seconds", type=float, default=10.0, help="timed seconds per run")
    ap.add_argument("--warmup", type=float, default=None, help="untimed seconds after the first batch "
                    "(default: a quarter of --seconds, at least 1)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--batch", type=int, default=None, help="default 64 (train, eval), 256 (tiny)")
    ap.add_argument("--cache", default=os.environ.get(
        "SLUICE_PEERS_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "sluice-peers-data")))
    ap.add_argument("--timeout", type=float, default=None, help="seconds before a run is killed")
    ap.add_argument("--sluice-prefetch", type=int, default=4,
                    help="sluice's prefetch depth in batches (DALI's default depth is 2)")
    ap.add_argument("--torch-workers", type=int, default=None,
                    help="torch's num_workers (default: the fastest of a calibration, cached)")
    ap.add_argument("--remote-latency-ms", type=float, default=None, metavar="MS",
                    help="remote rows: each loader reads its storage from local servers (nginx, "
                    "moto) through a proxy adding MS per request (see above)")
    ap.add_argument("--litdata-python", default=None,
                    help="LitData's interpreter (torch >= 2.4; default: the venv setup.sh makes)")
    ap.add_argument("--threads-python", default=None,
                    help="the interpreter of the thread peers' runs (spdl, torchdata, grain: "
                    "torch 2.x; default: this one if it imports them, else scripts/pythons.sh's "
                    "gil venv)")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    ap.add_argument("--_prep", help=argparse.SUPPRESS)
    ap.add_argument("--_cfg", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._child:
        child(a._child, json.loads(a._cfg))
        return 0
    if a._prep:
        litdata_optimize(json.loads(a._cfg))
        return 0
    remote = a.remote_latency_ms is not None
    if remote and a.work == "tiny":
        ap.error("--remote-latency-ms: the remote rows are of the photo works (train, eval)")
    if remote and a.remote_latency_ms < 0:
        ap.error("--remote-latency-ms: a delay of 0 or more milliseconds")
    if a.work == "tiny" and not a.idx:
        ap.error("--work tiny needs --idx IMAGES LABELS")
    if a.work != "tiny" and not a.photos:
        ap.error(f"--work {a.work} needs --photos DIR")
    if a.work == "tiny" and a.loaders and set(a.loaders.split(",")) & set(THREAD_PEERS):
        ap.error("--loaders: the thread peers (spdl, torchdata, grain) run the photo works "
                 "(train, eval), not tiny")
    batch = a.batch or (256 if a.work == "tiny" else 64)
    known = REMOTE_LOADERS if remote else LOADERS
    if a.loaders:
        loaders = [l.strip() for l in a.loaders.split(",") if l.strip()]
        bad = [l for l in loaders if l not in known]
        if bad:
            ap.error(f"--loaders: unknown {', '.join(bad)} (known{' with --remote-latency-ms' if remote else ''}: "
                     f"{', '.join(known)})")
    else:
        loaders = [l for l in LOADERS if not (a.work == "tiny" and (l == "sluice-restart" or
                                                                    l in THREAD_PEERS))]
    # runs: (row id, loader, remote); remote mode always has the local sluice row
    if remote:
        runs = [(l if r is None else f"{l}@{r}", l, r) for l, r in REMOTE_RUNS
                if (l, r) == ("sluice", None) or not a.loaders or l in loaders]
    else:
        runs = [(l, l, None) for l in loaders]
    cfg = {"work": a.work, "batch": batch, "seconds": a.seconds, "sluice_prefetch": a.sluice_prefetch,
           "warmup": a.warmup if a.warmup is not None else (0.0 if remote else max(1.0, a.seconds / 4)),
           "cache": os.path.abspath(a.cache),
           "photos": os.path.abspath(a.photos) if a.photos else None,
           "idx": [os.path.abspath(p) for p in a.idx] if a.idx else None}
    if a.threads_python:
        cfg["threads_python"] = os.path.abspath(a.threads_python)
    if remote:
        cfg["remote_runs"] = True
        if a.litdata_python:
            cfg["litdata_python"] = os.path.abspath(a.litdata_python)
    cfg["key"] = input_key(cfg)
    timeout = a.timeout or (a.seconds + cfg["warmup"] + 300)
    env = sluice_env()
    me = os.path.abspath(__file__)

    def child_cmd(loader, c):
        return [loader_python(loader, c), me, "--work", a.work, "--_child", loader, "--_cfg",
                json.dumps(c)]

    rows, ready = {}, []
    for rid, l, r in runs:
        why = unavailable(l, cfg)
        if l == "sluice-restart" and a.work == "tiny" and why is None:
            why = "not applicable: tiny has no JPEGs"
        if why:
            rows[rid] = {"why": why}
            continue
        c = dict(cfg)
        try:
            c["store"] = prepare(l, c)
        except Exception as e:  # a peer's writer failing is that peer's row, not the run
            rows[rid] = {"why": f"storage could not be prepared: {type(e).__name__}: {e}"[:400]}
            continue
        if l == "torch":
            c["torch_workers"] = (a.torch_workers if a.torch_workers is not None
                                  else calibrate_torch(c, child_cmd, env, timeout))
        if l == "torch" and a.torch_workers is not None:
            c["torch_workers_given"] = True
        rows[rid] = {"cfg": c, "runs": [], "loader": l, "remote": r}
        ready.append(rid)

    servers = None
    try:
        if remote:
            kinds = {rows[rid]["remote"] for rid in ready} - {None}
            servers = RemoteServers(store_dir(cfg, ""), kinds, a.remote_latency_ms) if kinds else None
        return run_rounds(a, cfg, runs, rows, ready, servers, env, timeout, child_cmd, batch)
    finally:
        if servers:
            servers.close()


def run_rounds(a, cfg, runs, rows, ready, servers, env, timeout, child_cmd, batch):
    """The rounds and the rows (main's second half; the servers run meanwhile)."""
    remote = servers is not None or cfg.get("remote_runs", False)
    if servers:
        for rid in list(ready):
            row = rows[rid]
            if row["remote"] is None:
                continue
            why = servers.why.get(row["remote"])
            if why is None:
                cache_dir = os.path.join(cfg["cache"], "remote-cache", rid)
                try:
                    row["cfg"]["remote"] = remote_cfg(servers, row["loader"], row["remote"],
                                                      row["cfg"]["store"], cache_dir)
                except (RuntimeError, OSError) as e:
                    why = f"{type(e).__name__}: {e}"[:400]
            if why:
                rows[rid] = {"why": why, "loader": row["loader"], "remote": row["remote"]}
                ready.remove(rid)

    def run_env(rid):
        row = rows[rid]
        rem = row["cfg"].get("remote")
        if not rem:
            return env
        e = dict(env)
        for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_S3_ADDRESSING_STYLE",
                  "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "SLUICE_CACHE_BYTES"):
            e.pop(k, None)
        if row["loader"] in ("sluice", "sluice-restart"):
            e["SLUICE_CACHE_DIR"] = rem["cache_dir"]
        if rem["kind"] == "s3":
            e.update(servers.s3_env())
        return e

    def empty(d):
        import shutil
        shutil.rmtree(d, ignore_errors=True)
        if os.path.exists(d):
            raise RuntimeError(f"cannot empty the cache {d}")

    for r in range(a.repeats):
        order = ready[r % len(ready):] + ready[:r % len(ready)] if ready else []
        for rid in order:
            c = rows[rid]["cfg"]
            if c.get("remote"):  # every run starts from an empty cache
                empty(c["remote"]["cache_dir"])
                os.makedirs(c["remote"]["cache_dir"])
            rec, peak, tail = run_child(child_cmd(rows[rid]["loader"], c), run_env(rid), timeout)
            if c.get("remote"):
                empty(c["remote"]["cache_dir"])
            if rec is None:
                rows[rid].setdefault("errors", []).append(tail or "no output")
                continue
            rec["peak_rss_mb"] = peak
            rows[rid]["runs"].append(rec)
            print(f"peers: round {r + 1}/{a.repeats} {rid}: {rec['samples'] / rec['seconds']:.1f} "
                  f"samples/s, peak RSS {peak:.0f} MB", file=sys.stderr, flush=True)

    failed = False
    ref_mean = None
    if a.work == "eval":
        for l in ("sluice", "torch", "sluice-restart"):
            if l in rows and rows[l].get("runs"):
                ref_mean = (l, rows[l]["runs"][0]["first"]["mean"])
                break
    for rid, l, r in runs:
        row = rows[rid]
        out = {"loader": l, "work": a.work, "samples_per_s": None, "peak_rss_mb": None,
               "cpu_s_per_sample": None, "threads": None, "version": None, "note": None}
        if remote:
            out["remote"] = r
            ms = a.remote_latency_ms
            out["latency_ms"] = (int(ms) if ms == int(ms) else ms) if r else None
        if "why" in row:
            out["note"] = row["why"]
            print(json.dumps(out), flush=True)
            continue
        runs = row["runs"]
        if not runs:
            out["note"] = "failed: " + "; ".join(row.get("errors", []))[-600:]
            failed = True
            print(json.dumps(out), flush=True)
            continue
        rates = [x["samples"] / x["seconds"] for x in runs]
        first = runs[0]["first"]
        notes = [runs[0]["note"]]
        why = check_first(a.work, first, batch)
        if why is None and ref_mean and rid != ref_mean[0]:
            why = check_mean(first, *ref_mean)
        if why:
            failed = True
            notes.insert(0, "CHECK FAILED: " + why)
        else:
            notes.append(f"first batch ok: {first['shape']} {first['dtype']} in "
                         f"[{first['min']:.2f}, {first['max']:.2f}], mean {first['mean']:.4f}")
        notes.append(f"rounds {len(runs)}/{a.repeats}: " + ", ".join(f"{x:.0f}" for x in rates))
        if row.get("errors"):
            notes.append("failed rounds: " + "; ".join(row["errors"])[-300:])
        notes.append(f"os threads {runs[0]['os_threads']}, setup+first batch "
                     f"{statistics.median(x['setup_s'] for x in runs):.1f} s")
        if remote:  # how much of the window was the first (fetching) epoch
            n = len(photo_listing(cfg["photos"]))
            notes.append("timed window " + ", ".join(
                f"{(x['samples'] + batch) / n:.2f}" for x in runs) + " epochs from the start")
        out.update({"samples_per_s": round(statistics.median(rates), 1),
                    "peak_rss_mb": round(max(x["peak_rss_mb"] for x in runs), 1),
                    "cpu_s_per_sample": float(f"{statistics.median(x['cpu_s'] / x['samples'] for x in runs):.3g}"),
                    "threads": runs[0]["threads"], "version": runs[0]["version"],
                    "note": "; ".join(notes)})
        print(json.dumps(out), flush=True)
    return 1 if failed else 0


def calibrate_torch(c, child_cmd, env, timeout):
    """torch's num_workers: the fastest of 0, cores, 2x cores in short runs; kept in the cache."""
    path = os.path.join(c["cache"], c["key"], f"torch-workers-{c['work']}-b{c['batch']}-{CORES}cores.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)["workers"]
    best = None
    for w in sorted({0, CORES, 2 * CORES}):
        cc = dict(c, torch_workers=w, seconds=min(3.0, c["seconds"]), warmup=1.0)
        rec, _, _ = run_child(child_cmd("torch", cc), env, timeout)
        if rec:
            rate = rec["samples"] / rec["seconds"]
            print(f"peers: torch calibration num_workers={w}: {rate:.0f} samples/s", file=sys.stderr)
            if best is None or rate > best[0]:
                best = (rate, w)
    w = best[1] if best else CORES
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"workers": w, "rate": best[0] if best else None}, f)
    return w


if __name__ == "__main__":
    sys.exit(main())
