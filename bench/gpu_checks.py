#!/usr/bin/python3
"""The device checks of docs/DEVICE.md ("Checks that need a GPU"), each a
function that prints one JSON line {"check", "status", "figure", ...}:
status PASS or FAIL (SKIP only where the check cannot apply, with why).

    python3 bench/gpu_checks.py --kind cuda|host [--build build]
        [--photos DIR] [--checks epoch,kernel,overlap,reuse,dlpack,release,pinned,gpu_decode,tv_decode,
                  torch_pin]

--kind host runs every check on the host backend (a dry run on a machine
without a GPU: the code paths run end to end; figures have no meaning).
scripts/gpu_check.sh runs it, on the device and with --dry-run here.
"""
import argparse
import gc
import json
import os
import sys
import threading
import time

import numpy as np

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def emit(check, ok, figure, **extra):
    rec = {"check": check, "status": "PASS" if ok else "FAIL", "figure": figure}
    rec.update(extra)
    print(json.dumps(rec), flush=True)


def skip(check, why):
    print(json.dumps({"check": check, "status": "SKIP", "figure": why}), flush=True)


class Ctx:
    def __init__(self, a):
        import sluice
        import torch
        self.sluice, self.torch, self.kind = sluice, torch, a.kind
        self.dev = "cuda" if a.kind == "cuda" else "cpu"
        self.photos = a.photos
        self.slr = a.slr

    def sync(self):
        if self.kind == "cuda":
            self.torch.cuda.synchronize()

    def gpu_sleep(self, ms):
        """ms of work on the current stream (host: the thread sleeps)."""
        if self.kind == "cuda":
            self.torch.cuda._sleep(int(self.cycles_per_ms() * ms))
        else:
            time.sleep(ms / 1000.0)

    def cycles_per_ms(self):
        if not hasattr(self, "_cpm"):
            t = self.torch
            t.cuda._sleep(1000000)
            t.cuda.synchronize()
            t0 = time.perf_counter()
            t.cuda._sleep(50000000)
            t.cuda.synchronize()
            self._cpm = 50000000 / ((time.perf_counter() - t0) * 1000.0)
        return self._cpm


def indexed(n, h, w):
    """Images whose every byte is (index % 251): a batch tells which samples it holds."""
    img = np.empty((n, h, w, 3), np.uint8)
    for i in range(n):
        img[i] = i % 251
    return {"image": img, "label": np.arange(n, dtype=np.int64)}


def check_batch(torch, b):
    """Mismatched samples in a batch of indexed() images (read on the current stream)."""
    lab = b["label"].long()
    want = (lab % 251).to(torch.uint8)
    img = b["image"]
    got_min = img.reshape(img.shape[0], -1).min(dim=1).values
    got_max = img.reshape(img.shape[0], -1).max(dim=1).values
    return int(((got_min != want) | (got_max != want)).sum().item())


# 1. opens, copies and frees; no device memory left over an epoch. The
# verdict is sluice's own count of the device and pinned blocks its backends
# hold (sl_device_held: 0 and 0 once every pipeline is closed), not the GPU's
# free memory, which other users of the device move (compute-sanitizer's own
# allocations showed as 12 MiB "not returned" under memcheck); that reading,
# after a warm-up epoch, is printed beside it.
def c_epoch(c):
    t = c.torch
    from sluice import _sluice
    data = indexed(256, 224, 224)

    def epoch():
        ds = c.sluice.from_arrays(data).batch(32).prefetch(2).device(c.kind)
        bad, b = 0, None
        for b in ds.torch():
            bad += check_batch(t, b)
        during = _sluice.device_held(c.kind)
        ds.close()
        del ds, b
        gc.collect()
        c.sync()
        return bad, during

    bad, during = epoch()  # warm-up: the runtime's own allocations
    if c.kind == "cuda":
        free0 = t.cuda.mem_get_info()[0]
    for _ in range(2):
        more, _ = epoch()
        bad += more
    held = _sluice.device_held(c.kind)
    ok = bad == 0 and held == (0, 0) and during[0] > 0
    fig = (f"blocks sluice holds after 3 epochs: {held[0]} device, {held[1]} pinned "
           f"(during one: {during[0]} device, {during[1]} pinned); wrong samples: {bad}")
    if c.kind == "cuda":
        moved = free0 - t.cuda.mem_get_info()[0]
        emit("epoch_no_leak", ok, fig + f"; the GPU's free memory moved {moved / 2**20:.2f} MiB "
             "over the last 2 (any user's allocations)")
    else:
        emit("epoch_no_leak", ok, fig + " (host backend)")


# 2. the normalize kernel equals the CPU op
def c_kernel(c):
    rng = np.random.default_rng(3)
    data = {"image": rng.integers(0, 256, (24, 33, 17, 3), dtype=np.uint8),
            "label": np.arange(24, dtype=np.int64)}
    worst, cases = 0.0, 0
    for layout in ("chw", "hwc"):
        for dtype in ("float32", "float16", "bfloat16"):
            def ds():
                return (c.sluice.from_arrays(data)
                        .normalize("image", mean=MEAN, std=STD, layout=layout, dtype=dtype)
                        .batch(8))
            cpu = [b["image"].float() for b in ds().torch()]
            dev = [b["image"].float().cpu() for b in
                   ds().device(c.kind, normalize_on_device=True).torch()]
            for x, y in zip(cpu, dev):
                worst = max(worst, float((x - y).abs().max()))
            cases += 1
    emit("kernel_equals_cpu", worst == 0.0,
         f"max |device - CPU| over {cases} layout/dtype cases: {worst:g} (tolerance 0)")


# 3. the copy stream overlaps a step on the default stream. The loop reads
# each batch on the GPU (no host sync per step: a step that syncs, like
# float(x) or loss.item(), holds the next copy back until it is done, since
# the copy is queued when next() is called). The copy's share is sized first:
# the copy alone is timed, then the step is made about twice as long, so
# that hiding it is measurable (a copy of 0.5 ms beside an 8 ms step is
# within the step's own jitter).
def c_overlap(c):
    t = c.torch
    n = 24
    data = indexed(64 * (n + 3), 224, 224)  # one epoch: no epoch's start is timed

    def run(step_ms):
        ds = c.sluice.from_arrays(data).batch(64).prefetch(4).device(c.kind)
        it = iter(ds.torch())
        for _ in range(3):
            next(it)
        c.sync()
        acc = t.zeros((), device=c.dev, dtype=t.float32)
        t0 = time.perf_counter()
        for _ in range(n):
            b = next(it)
            if step_ms:
                c.gpu_sleep(step_ms)
            acc += b["image"][0, 0, 0, 0].float()  # the step reads its batch, on the GPU
        c.sync()
        dt = (time.perf_counter() - t0) / n * 1000
        it.close()
        ds.close()
        return dt

    def step_alone(step_ms):
        x = t.zeros((64, 224, 224, 3), dtype=t.uint8, device=c.dev)
        acc = t.zeros((), device=c.dev, dtype=t.float32)
        c.sync()
        t0 = time.perf_counter()
        for _ in range(n):
            c.gpu_sleep(step_ms)
            acc += x[0, 0, 0, 0].float()
        c.sync()
        return (time.perf_counter() - t0) / n * 1000

    if c.kind == "cuda":
        c.cycles_per_ms()  # calibrate _sleep before anything is timed
    copy_only = run(0)
    step_ms = max(2.0, 2.0 * copy_only)
    step = step_alone(step_ms)
    both = run(step_ms)
    hidden = (step + copy_only - both) / min(step, copy_only) if copy_only > 0 else 0
    fig = (f"per step of {data['image'][:64].nbytes / 1e6:.1f} MB: copy alone {copy_only:.2f} ms, "
           f"step alone {step:.2f} ms (sized to 2x the copy) -> both {both:.2f} ms; share of "
           f"the copy hidden: {hidden:.2f} (goal >= 0.8)")
    if c.kind == "cuda":
        emit("copy_compute_overlap", hidden >= 0.8, fig)
    else:
        emit("copy_compute_overlap", True, fig + " (host backend: no meaning)")


# 4. the reuse rule under load: a slow step and a small ring
def c_reuse(c):
    t = c.torch
    data = indexed(200, 64, 64)
    ds = c.sluice.from_arrays(data).batch(8).prefetch(1).device(c.kind)
    bad = steps = 0
    held = []
    for b in ds.torch():
        c.gpu_sleep(5.0)        # the step is still running on the GPU...
        bad += check_batch(t, b)  # ...when it reads its batch
        held.append(b)
        if len(held) > 2:       # the consumer keeps two batches alive
            bad += check_batch(t, held.pop(0))
        steps += 1
    for b in held:
        bad += check_batch(t, b)
    c.sync()
    ds.close()
    emit("reuse_under_load", bad == 0, f"{steps} batches, ring of 2, 5 ms step, 2 held: "
         f"{bad} samples overwritten")


# 5. torch.from_dlpack with a non-default current stream waits for the copy
def c_dlpack(c):
    t = c.torch
    data = indexed(64 * 6, 224, 224)
    ds = c.sluice.from_arrays(data).batch(64).prefetch(3).device(c.kind)
    bad = n = 0
    if c.kind == "cuda":
        s = t.cuda.Stream()
        with t.cuda.stream(s):
            for b in ds.torch():
                bad += check_batch(t, b)  # read at once on s, which must have waited
                n += 1
        s.synchronize()
    else:
        for b in ds.torch():
            bad += check_batch(t, b)
            n += 1
    ds.close()
    emit("dlpack_stream_waits", bad == 0, f"{n} batches read at once on a side stream: "
         f"{bad} samples not yet copied")


# 6. release from another thread (torch's deleter there)
def c_release(c):
    t = c.torch
    data = indexed(64 * 6, 96, 96)
    ds = c.sluice.from_arrays(data).batch(16).prefetch(2).epochs(3).device(c.kind)
    errors, n = [], 0
    bad = 0

    def drop(batches):
        try:
            for b in batches:
                if c.kind == "cuda":
                    t.cuda.set_device(0)
                b.clear()
            gc.collect()
        except Exception as e:  # noqa: BLE001 - reported as the check's figure
            errors.append(repr(e))

    pending, threads = [], []
    for b in ds.torch():
        bad += check_batch(t, b)
        pending.append(b)
        n += 1
        if len(pending) == 4:
            th = threading.Thread(target=drop, args=(pending,))
            th.start()
            threads.append(th)
            pending = []
    for th in threads:
        th.join()
    c.sync()
    ds.close()
    ngpu = t.cuda.device_count() if c.kind == "cuda" else 0
    emit("release_other_thread", not errors and bad == 0,
         f"{n} batches released on other threads: {len(errors)} errors, {bad} bad samples"
         + ("" if ngpu > 1 else " (one device: the right-device part needs two)"),
         errors=errors[:3])


# 7. batches written in pinned memory: nothing staged on the ImageNet-style chain
def c_pinned(c):
    if not c.slr:
        skip("pinned_no_staging", "no packed photo set (--slr)")
        return
    ds = (c.sluice.records(c.slr).shuffle(seed=0).decode("image")
          .random_resized_crop("image", 224).flip("image")
          .normalize("image", mean=MEAN, std=STD, layout="chw")
          .batch(64).prefetch(4).device(c.kind, normalize_on_device=True))
    n = 0
    t0 = time.perf_counter()
    for b in ds.torch():
        n += b["image"].shape[0]
    c.sync()
    dt = time.perf_counter() - t0
    st = ds.stats()
    ds.close()
    emit("pinned_no_staging", st["h2d_staged_bytes"] == 0 and n > 0,
         f"h2d_staged_bytes {st['h2d_staged_bytes']} of {st['h2d_bytes']}; "
         f"{n / dt:.0f} img/s; H2D {st['h2d_bytes_per_s'] / 1e9:.2f} GB/s")


# 8. GPU JPEG decode: the pipeline path (decode(device="gpu") + random_resized_crop
# + flip + normalize, batched into CUDA memory) against the same chain decoded on
# the CPU, same seed: the same boxes, so the pixels differ by the IDCT and the
# resample's rounding only. Tolerance mean <= 1.0, max <= 48 uint8 steps, set
# from the first run on a GPU (H200: worst batch mean 0.290, max 36 over 256
# images; bench/README.md, "First GPU run"); its speed beside the CPU chain's.
def imagenet_chain(c, gpu):
    return (c.sluice.records(c.slr).select("image", "label").shuffle(seed=0)
            .decode("image", device="gpu" if gpu else "cpu")
            .random_resized_crop("image", 224).flip("image")
            .normalize("image", mean=MEAN, std=STD).batch(64).prefetch(4).device("cuda"))


_STAND_IN_RUN = r"""
import json, sys
sys.path[:0] = [sys.argv[2]]
import sluice
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
ds = (sluice.records(sys.argv[1]).select("image", "label").shuffle(seed=0)
      .decode("image", device="gpu").random_resized_crop("image", 224).flip("image")
      .normalize("image", mean=MEAN, std=STD).batch(64).prefetch(4).device("cuda"))
engine, n, shapes = ds._start()[0], 0, set()
while True:
    b = engine.next()
    if b is None:
        break
    n += b["image"].shape[0]
    shapes.add((b["image"].__dlpack_device__(), tuple(b["image"].shape[1:])))
st = ds.stats()
print(json.dumps({"n": n, "shapes": sorted(map(str, shapes)), "gpu_decoded": st["gpu_decoded"],
                  "gpu_fallbacks": st["gpu_fallbacks"], "skipped": st["skipped"]}))
"""


def c_gpu_decode(c):
    if not c.slr:
        skip("gpu_decode", "no packed photo set (--slr)")
        return
    if c.kind == "host":
        # No GPU: the same pipeline path over the stand-in CUDA runtime, nvJPEG
        # and kernels of the C tests (tests/device/fake/), in a child process
        # (they are chosen by environment before the runtime loads).
        import subprocess
        pydir = os.path.dirname(os.path.dirname(os.path.abspath(c.sluice.__file__)))
        build = os.path.dirname(pydir)
        fakes = {"SLUICE_CUDART": "libsluice_fake_cudart.so",
                 "SLUICE_NVJPEG": "libsluice_fake_nvjpeg.so",
                 "SLUICE_CUDA_KERNELS": "libsluice_fake_kernels.so"}
        env = dict(os.environ)
        for k, v in fakes.items():
            env[k] = os.path.join(build, v)
        missing = [v for k, v in fakes.items() if not os.path.exists(env[k])]
        if missing:
            emit("gpu_decode", False, f"stand-ins not built in {build}: {', '.join(missing)}")
            return
        r = subprocess.run([sys.executable, "-c", _STAND_IN_RUN, c.slr, pydir], env=env,
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            emit("gpu_decode", False, f"stand-in run failed: {r.stderr.strip()[-300:]}")
            return
        res = json.loads(r.stdout.strip().splitlines()[-1])
        ok = (res["n"] > 0 and res["gpu_decoded"] + res["gpu_fallbacks"] == res["n"] and
              res["shapes"] == [str(((2, 0), (3, 224, 224)))])
        emit("gpu_decode", ok, f"pipeline path over the stand-in CUDA runtime, nvJPEG and "
             f"kernels: {res['n']} images, {res['gpu_decoded']} decoded by the stand-in "
             f"nvJPEG, {res['gpu_fallbacks']} by the CPU fallback, {res['skipped']} skipped "
             "(host backend: no meaning)")
        return
    t = c.torch
    # agreement: the first batches of both paths, same seed
    worst_mean, worst, nimg = 0.0, 0.0, 0
    std = t.tensor(STD, device="cuda").view(1, 3, 1, 1) * 255
    for (x, y), _ in zip(zip(imagenet_chain(c, False).torch(), imagenet_chain(c, True).torch()),
                         range(4)):
        assert t.equal(x["label"], y["label"])
        d = ((x["image"] - y["image"]).abs() * std)
        worst_mean = max(worst_mean, float(d.mean()))
        worst = max(worst, float(d.max()))
        nimg += x["image"].shape[0]

    def rate(gpu):
        ds = imagenet_chain(c, gpu)
        n = 0
        for b in ds.torch():  # warm-up epoch: the decoder's and kernels' first use
            n += b["image"].shape[0]
        c.sync()
        t0, n = time.perf_counter(), 0
        for b in ds.torch():
            n += b["image"].shape[0]
        c.sync()
        dt = time.perf_counter() - t0
        st = ds.stats()
        ds.close()
        return n / dt, st

    r_gpu, st = rate(True)
    r_cpu, _ = rate(False)
    ok = worst_mean <= 1.0 and worst <= 48 and st["gpu_decoded"] > 0
    emit("gpu_decode", ok, f"pipeline decode(device=gpu) + rrc 224 + flip + normalize: "
         f"{r_gpu:.0f} img/s vs the CPU-decode chain {r_cpu:.0f} img/s ({r_gpu / r_cpu:.2f}x, "
         f"{os.cpu_count()} cores); {st['gpu_decoded']} on the GPU, {st['gpu_fallbacks']} CPU "
         f"fallbacks; vs the CPU chain over {nimg} images: worst batch mean |diff| "
         f"{worst_mean:.3f} uint8 steps, max {worst:.0f} (tolerance 1.0 / 48)",
         img_s=r_gpu, cpu_img_s=r_cpu)


# peer: torchvision's batched GPU decode + v2 transforms on the GPU
def c_tv_decode(c):
    t = c.torch
    import torchvision
    from torchvision.io import decode_jpeg, read_file
    files = []
    for root, _, names in os.walk(c.photos):
        files += [os.path.join(root, f) for f in sorted(names) if f.endswith(".jpg")]
    files = files[:512]
    if not files:
        skip("tv_gpu_decode", f"no photos under {c.photos}")
        return
    datas = [read_file(f) for f in files]
    try:
        from torchvision.transforms import v2 as T
    except ImportError:
        import torchvision.transforms as T
    tf = T.Compose([T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip()])
    mean = t.tensor(MEAN, device=c.dev).view(3, 1, 1) * 255
    std = t.tensor(STD, device=c.dev).view(3, 1, 1) * 255
    dev = "cuda" if c.kind == "cuda" else "cpu"

    def epoch():
        n = 0
        for i in range(0, len(datas), 64):
            chunk = datas[i:i + 64]
            imgs = decode_jpeg(chunk, device=dev) if dev == "cuda" else [decode_jpeg(d) for d in chunk]
            out = t.stack([(tf(x).float() - mean) / std for x in imgs])
            n += out.shape[0]
        c.sync()
        return n

    epoch()
    t0 = time.perf_counter()
    n = epoch() + epoch()
    dt = time.perf_counter() - t0
    emit("tv_gpu_decode", n > 0, f"torchvision {torchvision.__version__} decode_jpeg(device="
         f"{dev!r}, batched 64) + RandomResizedCrop/flip/normalize on {dev}: "
         f"{n / dt:.0f} img/s over {len(files)} photos" +
         ("" if c.kind == "cuda" else " (host backend: no meaning)"), img_s=n / dt)


# 9. sluice.torch.DataLoader: pin_memory=True through sluice's pinned slots
# (torch must see them as pinned), device="cuda" through its side stream
def c_torch_pin(c):
    import sluice.torch as st
    from sluice import _torch_staging as staging
    saved = (staging.pin_target, c.torch.Tensor.pin_memory)
    try:
        _torch_pin(c, st)
    finally:
        staging.pin_target, c.torch.Tensor.pin_memory = saved


def _torch_pin(c, st):
    from sluice import _torch_staging as staging
    t = c.torch
    from torch.utils.data import DataLoader as TorchLoader, Dataset
    from torch.utils.data._utils.pin_memory import pin_memory as torch_pin

    class DS(Dataset):
        def __len__(self):
            return 96

        def __getitem__(self, i):
            g = t.Generator().manual_seed(i)
            return {"x": t.rand(3, 32, 32, generator=g), "h": t.rand(8, generator=g).half(),
                    "y": i, "p": (t.tensor([i, -i]), t.tensor(i % 2 == 0))}

    def leaves(b):
        if isinstance(b, t.Tensor):
            return [b]
        if isinstance(b, dict):
            return [x for v in b.values() for x in leaves(v)]
        if isinstance(b, (list, tuple)):
            return [x for v in b for x in leaves(v)]
        return []

    if c.kind == "cuda":
        ref = list(TorchLoader(DS(), batch_size=16, pin_memory=True))
        dev = "cuda"
    else:
        # host backend: the same code path with the host backend's slots;
        # torch's reference walk with a copy standing in for its pinning
        staging.pin_target = lambda d: ("host", 0)
        t.Tensor.pin_memory = lambda self, device=None: self.clone()
        ref = [torch_pin(b) for b in TorchLoader(DS(), batch_size=16)]
        dev = "host"
    dl = st.DataLoader(DS(), batch_size=16, pin_memory=True, num_workers=2,
                       worker_type="thread")
    t0 = time.perf_counter()
    got = list(dl)
    t_sluice = time.perf_counter() - t0
    speed = ""
    if c.kind == "cuda":
        # the same loader pinning with torch's pin_memory (sluice's path off)
        keep = staging.pin_target
        staging.pin_target = lambda d: None
        try:
            tl = st.DataLoader(DS(), batch_size=16, pin_memory=True, num_workers=2,
                               worker_type="thread")
            t0 = time.perf_counter()
            n_t = len(list(tl))
            t_torch = time.perf_counter() - t0
        finally:
            staging.pin_target = keep
        speed = (f"; epoch {t_sluice * 1e3:.0f} ms through sluice's slots vs "
                 f"{t_torch * 1e3:.0f} ms with torch's pin_memory ({n_t} batches)")
    bad = sum(not (x.dtype == y.dtype and t.equal(x, y))
              for a, b in zip(ref, got) for x, y in zip(leaves(a), leaves(b)))
    pinned = all(x.is_pinned() for b in got for x in leaves(b))
    path = dl.pin_memory_path
    plain = list(TorchLoader(DS(), batch_size=16))
    side = t.cuda.Stream() if c.kind == "cuda" else None
    dv = st.DataLoader(DS(), batch_size=16, device=dev, num_workers=2, worker_type="thread")
    if side is not None:
        with t.cuda.stream(side):
            on_dev = [[x.cpu() for x in leaves(b)] for b in dv]
    else:
        on_dev = [[x for x in leaves(b)] for b in dv]
    bad_dev = sum(not t.equal(x, y) for a, b in zip(plain, on_dev)
                  for x, y in zip(leaves(a), b))
    ok = (bad == 0 and bad_dev == 0 and len(got) == len(ref) == 6 and path.startswith("sluice")
          and (pinned or c.kind != "cuda"))
    emit("torch_pin_memory", ok,
         f"pin_memory=True via {path}: {bad} tensors differ from torch's pinned batches, "
         f"is_pinned() {'all True' if pinned else 'not all True'}; device={dev!r}: {bad_dev} "
         f"differ; stats {dv.staging_stats()}{speed}" +
         ("" if c.kind == "cuda" else " (host backend: is_pinned has no meaning)"))


CHECKS = {"epoch": c_epoch, "kernel": c_kernel, "overlap": c_overlap, "reuse": c_reuse,
          "dlpack": c_dlpack, "release": c_release, "pinned": c_pinned,
          "gpu_decode": c_gpu_decode, "tv_decode": c_tv_decode, "torch_pin": c_torch_pin}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=["cuda", "host"], default="cuda")
    ap.add_argument("--photos", default="")
    ap.add_argument("--slr", default="")
    ap.add_argument("--checks", default="epoch,kernel,overlap,reuse,dlpack,release,pinned,"
                                        "gpu_decode,torch_pin")
    a = ap.parse_args()
    c = Ctx(a)
    if a.kind == "cuda":
        from sluice import _sluice
        why = _sluice.device_available("cuda", 0)
        if why is not None:
            for name in a.checks.split(","):
                emit(name, False, f"no CUDA device for sluice: {why}")
            return 1
    for name in a.checks.split(","):
        try:
            CHECKS[name](c)
        except Exception as e:  # noqa: BLE001 - one check's failure is its line
            emit(name, False, f"raised {type(e).__name__}: {e}")
    # Under compute-sanitizer the verdict is the tool's summary and the exit
    # status of a program that got here (the checks' own FAILs are their
    # lines, not the exit status): say it did.
    gc.collect()
    c.sync()
    print("gpu_checks: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
