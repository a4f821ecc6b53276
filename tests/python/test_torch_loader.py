"""sluice.torch.DataLoader against torch.utils.data.DataLoader.

The reference is torch's own loader with num_workers=0 (or, for iterable
datasets sharded by worker info, torch's loader with the same num_workers,
whose interleaving is part of its contract). Batches must be identical
element for element.
"""
import _thread
import gc
import glob
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402
from torchvision.transforms import functional as TF  # noqa: E402

import sluice  # noqa: E402
import sluice.ops  # noqa: E402
import sluice.torch as st  # noqa: E402
from sluice import _torch_auto, _torch_compat, _torch_dispatch, _torch_threads  # noqa: E402
import torch.utils.data as tud  # noqa: E402

KINDS = [("thread", 1), ("thread", 3), ("process", 2), ("auto", 2)]


def worker_threads():
    return [t for t in threading.enumerate() if t.name.startswith("sluice.torch worker")]


def shm_files():
    return glob.glob(f"/dev/shm/sluice-torch-{os.getpid()}-*")


def assert_same(a, b, path="batch"):
    assert type(a) is type(b), f"{path}: {type(a)} vs {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, \
            f"{path}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
        assert torch.equal(a, b), f"{path}: values differ"
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), path
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


def assert_batches(ours, ref):
    assert len(ours) == len(ref), f"{len(ours)} batches vs {len(ref)}"
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert_same(a, b, f"batch {i}")


# ---------------------------------------------------------------------------
# A real ImageFolder of JPEGs with seeded torchvision transforms.
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def jpeg_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagefolder")
    rng = np.random.default_rng(20)
    for c in range(3):
        d = root / f"class{c}"
        d.mkdir()
        for k in range(8):
            h, w = int(rng.integers(48, 96)), int(rng.integers(48, 96))
            yy, xx = np.mgrid[0:h, 0:w]
            img = np.stack([(xx * 255 // w), (yy * 255 // h), np.full_like(xx, 40 * c + k)], -1)
            img = (img + rng.integers(0, 30, img.shape)).clip(0, 255).astype(np.uint8)
            Image.fromarray(img).save(d / f"{k:03d}.jpg", quality=90)
    return str(root)


def rrc_params(img, scale, ratio, g):
    """torchvision's RandomResizedCrop.get_params, drawing from `g`."""
    width, height = TF.get_image_size(img)
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=g).item()
        aspect = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=g)).item()
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            i = torch.randint(0, height - h + 1, size=(1,), generator=g).item()
            j = torch.randint(0, width - w + 1, size=(1,), generator=g).item()
            return i, j, h, w
    return 0, 0, height, width


class SeededTrainTransform:
    """RandomResizedCrop(32) + RandomHorizontalFlip + ToTensor + Normalize,
    every draw from the sample's generator (docs/PYTHON.md)."""

    def __call__(self, img):
        g = st.sample_rng()
        i, j, h, w = rrc_params(img, (0.08, 1.0), (3 / 4, 4 / 3), g)
        img = TF.resized_crop(img, i, j, h, w, [32, 32])
        if torch.rand(1, generator=g).item() < 0.5:
            img = TF.hflip(img)
        x = TF.normalize(TF.to_tensor(img), [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        return x, st.sample_rng("random").random(), st.sample_rng("numpy").integers(1 << 30)


class InContext(tud.Dataset):
    """The reference: the same Dataset under torch's loader, each sample run
    in the context sluice.torch's workers give it."""

    def __init__(self, ds, seed, epoch=0):
        self.ds, self.seed, self.epoch = ds, seed, epoch

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        with st.sample_context(self.seed, self.epoch, i):
            return self.ds[i]


@pytest.mark.parametrize("worker_type,num_workers", KINDS)
def test_imagefolder_transforms_equal_torch(jpeg_folder, worker_type, num_workers):
    ds = tv.datasets.ImageFolder(jpeg_folder, transform=SeededTrainTransform())
    ref = list(tud.DataLoader(InContext(ds, seed=11), batch_size=5, shuffle=True,
                              generator=torch.Generator().manual_seed(3)))
    dl = st.DataLoader(ds, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(3),
                       num_workers=num_workers, worker_type=worker_type, seed=11)
    ours = list(dl)
    assert_batches(ours, ref)
    assert len(ours) == len(dl) == 5
    assert dl.worker_type_used in ("thread", "process")
    if worker_type != "auto":
        assert dl.worker_type_used == worker_type


def test_seeded_samples_differ_by_index_and_epoch(jpeg_folder):
    ds = tv.datasets.ImageFolder(jpeg_folder, transform=SeededTrainTransform())
    dl = st.DataLoader(ds, batch_size=24, seed=5, num_workers=2, worker_type="thread")
    e0 = next(iter(dl))
    dl.set_epoch(1)
    e1 = next(iter(dl))
    dl.set_epoch(0)
    e0b = next(iter(dl))
    assert_same(e0, e0b)
    assert not torch.equal(e0[0][0], e1[0][0])
    # Different samples of one epoch draw different crops.
    assert len(set(e0[0][2].tolist())) == 24


class Plain(tud.Dataset):
    """No sluice calls at all: torch's behaviour is the reference."""

    def __init__(self, n=37):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"x": torch.arange(4, dtype=torch.float32) + i,
                "pair": (i, float(i) / 2, f"s{i}"),
                "np": np.full((2, 3), i, dtype=np.int16),
                "z": np.array(i * 1.5),
                "b": torch.tensor(i % 2 == 0),
                "h": torch.tensor([i], dtype=torch.bfloat16)}


@pytest.mark.parametrize("worker_type,num_workers", KINDS)
def test_plain_dataset_nested_collate_and_global_shuffle(worker_type, num_workers):
    torch.manual_seed(1234)
    ref = list(tud.DataLoader(Plain(), batch_size=4, shuffle=True, drop_last=True))
    after_ref = torch.rand(1)
    torch.manual_seed(1234)
    ours = list(st.DataLoader(Plain(), batch_size=4, shuffle=True, drop_last=True,
                              num_workers=num_workers, worker_type=worker_type))
    assert_batches(ours, ref)
    # The global generator advanced exactly as torch's loader advances it.
    assert torch.equal(torch.rand(1), after_ref)


def mapping_of(ptr):
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= ptr < hi:
                return line
    return ""


def test_process_batches_arrive_in_shared_memory_files():
    """Each batch is one /dev/shm file mapped by the main process, not
    tensors pickled through the pipe (nor torch's per-tensor shared memory)."""
    it = iter(st.DataLoader(Plain(), batch_size=4, num_workers=2, worker_type="process"))
    a, b = next(it), next(it)
    for batch in (a, b):
        where = mapping_of(batch["x"].data_ptr())
        assert "/dev/shm/sluice-torch-" in where and "(deleted)" in where, where
        assert mapping_of(batch["np"].data_ptr()) == where    # one file per batch
        assert not batch["x"].is_shared()
    assert mapping_of(a["x"].data_ptr()) != mapping_of(b["x"].data_ptr())
    del it
    assert not shm_files()
    raw = next(iter(st.DataLoader(Plain(), batch_size=3, num_workers=1, worker_type="process",
                                  collate_fn=lambda xs: xs)))
    assert "/dev/shm/sluice-torch-" in mapping_of(raw[0]["np"].ctypes.data)


def test_auto_switches_to_processes_mid_epoch(monkeypatch):
    """The probe's verdict "process" (forced: no share reaches 1.01) drains
    the threads and goes on with processes; the batches do not change."""
    monkeypatch.setattr(_torch_auto, "THRESHOLD", 1.01)
    if not _torch_threads.gil_enabled():
        # Free-threaded, GIL off: threads at once, no probe, whatever the
        # threshold. The switch below is then run as on a GIL build.
        dl = st.DataLoader(Plain(90), batch_size=2, shuffle=True, num_workers=2)
        assert len(list(dl)) == 45
        assert dl.worker_type_used == "thread" and dl.auto_probe["choice"] == "thread"
        assert "cpu_share" not in dl.auto_probe
        monkeypatch.setattr(_torch_threads, "gil_enabled", lambda: True)
    torch.manual_seed(3)
    ref = list(tud.DataLoader(Plain(90), batch_size=2, shuffle=True))
    torch.manual_seed(3)
    dl = st.DataLoader(Plain(90), batch_size=2, shuffle=True, num_workers=2)
    ours = list(dl)
    assert_batches(ours, ref)
    assert dl.auto_probe["choice"] == "process" and dl.worker_type_used == "process"
    # Later epochs start on processes at once.
    torch.manual_seed(4)
    ref = list(tud.DataLoader(Plain(90), batch_size=2, shuffle=True))
    torch.manual_seed(4)
    assert_batches(list(dl), ref)
    assert dl.worker_type_used == "process"
    del dl
    assert wait_gone(lambda: worker_threads() or children()) < 3


@pytest.mark.parametrize("processes_win", [True, False])
def test_auto_tries_processes_and_keeps_the_faster(monkeypatch, processes_win):
    """With the GIL, a CPU share at or above the threshold and a prediction
    within the band (forced here), "auto" tries processes for as many
    batches as it measured on threads and keeps the
    kind whose batches arrived faster (the margin forced here: processes
    always win, or never). Two switches mid-epoch, and the batches are still
    torch's; the verdict holds for the next epoch."""
    if not _torch_threads.gil_enabled():
        monkeypatch.setattr(_torch_threads, "gil_enabled", lambda: True)
    monkeypatch.setattr(_torch_auto, "THRESHOLD", 0.0)
    monkeypatch.setattr(_torch_auto, "MARGIN", -1.0 if processes_win else 1e9)
    monkeypatch.setattr(_torch_auto, "BAND", 1e10)       # the prediction never settles it
    torch.manual_seed(5)
    ref = [list(tud.DataLoader(Plain(160), batch_size=2, shuffle=True)) for _ in range(2)]
    torch.manual_seed(5)
    dl = st.DataLoader(Plain(160), batch_size=2, shuffle=True, num_workers=2)
    seen = []
    ours = []
    for b in dl:
        seen.append(dl.worker_type_used)
        ours.append(b)
    assert_batches(ours, ref[0])
    # threads, then processes, then (when they lost) threads again
    runs = [k for i, k in enumerate(seen) if i == 0 or seen[i - 1] != k]
    assert runs == (["thread", "process"] if processes_win else ["thread", "process", "thread"]), \
        runs
    probe = dl.auto_probe
    want = "process" if processes_win else "thread"
    assert probe["choice"] == want and dl.worker_type_used == want, probe
    assert probe["thread_batches_s"] > 0 and probe["process_batches_s"] > 0, probe
    assert probe["tasks"] >= 2 * _torch_auto.PROBE_TASKS and "cpu_share" in probe, probe
    assert_batches(list(dl), ref[1])
    assert dl.worker_type_used == want
    del dl
    assert wait_gone(lambda: worker_threads() or children()) < 3


class _AutoLoader:
    """What the probe reads and writes on a loader."""
    _sl_auto_pending = True
    _sl_auto_choice = None
    _sl_probe = None
    auto_probe = None


def test_auto_probe_rates_decide(monkeypatch):
    """The probe's arithmetic on a clock of its own: each worker's first
    batch, the batches after the sampler ran out and the time between epochs
    are left out of a rate; a CPU share below the threshold settles it; else
    processes stay only when more than MARGIN faster."""
    clock = [0.0]
    monkeypatch.setattr(_torch_auto.time, "perf_counter", lambda: clock[0])

    def feed(p, n, dt, share=(1.0, 1.0), exhausted=False):
        for k in range(n):
            clock[0] += dt
            p.add(k % 2, share[0], share[1], exhausted)

    # threads at 10 batches/s in two epochs with a pause between them, and a
    # drained tail at the end of the first that does not count
    loader = _AutoLoader()
    p = _torch_auto.Probe(2)
    feed(p, 8, 0.1)                     # 2 firsts left out, 6 counted
    feed(p, 3, 5.0, exhausted=True)     # the drain: not counted
    clock[0] += 60                      # between epochs
    p.segment(started=False)
    feed(p, 6, 0.1)
    assert p.counted == 12
    assert p.step(loader) == "process"  # share 1.0 >= 0.8: try processes
    assert p.rates["thread"] == pytest.approx(10.0)
    assert loader.auto_probe["measuring"] == "process" and loader._sl_auto_pending
    # processes at 11/s (first batches after their start left out again)
    p.segment()
    feed(p, 2 + 12, 1 / 11)
    assert p.step(loader) is None       # processes are running: stay
    assert loader._sl_auto_choice == "process" and not loader._sl_auto_pending
    assert loader.auto_probe["process_batches_s"] == pytest.approx(11.0)
    assert loader.auto_probe["margin"] == _torch_auto.MARGIN and loader._sl_probe is None
    for rp, want in ((10.2, "thread"), (9.0, "thread")):
        loader = _AutoLoader()
        p = _torch_auto.Probe(2)
        feed(p, 14, 0.1)
        p.step(loader)
        p.segment()
        feed(p, 14, 1 / rp)
        assert p.step(loader) == "thread", rp   # back to threads
        assert loader._sl_auto_choice == want and loader.auto_probe["choice"] == want
    # a thread share below the threshold settles it without trying processes
    loader = _AutoLoader()
    p = _torch_auto.Probe(2)
    feed(p, 14, 0.1, share=(0.5, 1.0))
    assert p.step(loader) == "process"
    assert loader._sl_auto_choice == "process" and loader.auto_probe["cpu_share"] == 0.5
    assert "process_batches_s" not in loader.auto_probe


def test_auto_predicts_from_share_and_transport(monkeypatch):
    """At or above the threshold the threads' figures predict the gain of
    processes — (cpu / share) / (cpu + transport) - 1 — and a prediction
    clear of MARGIN by more than BAND settles it without the timed trial;
    one within the band, or a transport that could not be timed, goes to
    the trial."""
    clock = [0.0]
    monkeypatch.setattr(_torch_auto.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(_torch_auto, "THRESHOLD", 0.0)
    transport = [0.0]
    monkeypatch.setattr(_torch_auto, "transport_seconds", lambda batch: transport[0])
    margin, band = _torch_auto.MARGIN, _torch_auto.BAND

    def probe(cpu, share, t, batch="a batch"):
        transport[0] = t
        loader = _AutoLoader()
        p = _torch_auto.Probe(2)
        for k in range(14):
            clock[0] += 0.1
            p.add(k % 2, cpu, cpu / share, False, batch)
        return loader, p.step(loader)

    # no transport cost, a share that predicts processes 10 points past the
    # band: processes, at once
    gain = margin + band + 0.1
    loader, into = probe(0.09, 1 / (1 + gain), 0.0)
    assert into == "process" and loader._sl_auto_choice == "process", loader.auto_probe
    assert not loader._sl_auto_pending and "measuring" not in loader.auto_probe
    assert loader.auto_probe["predicted_gain"] == pytest.approx(gain, abs=1e-3)
    assert loader.auto_probe["cpu_s_per_batch"] == pytest.approx(0.09)
    assert loader.auto_probe["band"] == band and loader.auto_probe["margin"] == margin
    assert "process_batches_s" not in loader.auto_probe
    # share 0.95, a transport that predicts processes 10 points below the
    # band: threads, at once
    gain = margin - band - 0.1
    t = (0.02 / 0.95) / (1 + gain) - 0.02
    loader, into = probe(0.02, 0.95, t)
    assert into is None and loader._sl_auto_choice == "thread", loader.auto_probe
    assert loader.auto_probe["predicted_gain"] == pytest.approx(gain, abs=1e-3)
    assert loader.auto_probe["transport_s_per_batch"] == pytest.approx(t, abs=1e-5)
    # a prediction within BAND of MARGIN, either side: the trial
    for gain in (margin - band * 0.9, margin + band * 0.9):
        loader, into = probe(0.09, 1 / (1 + gain), 0.0)
        assert into == "process" and loader._sl_auto_pending, loader.auto_probe
        assert loader.auto_probe["measuring"] == "process"
    # no batch kept (or a transport that could not be timed): the trial
    loader, into = probe(0.09, 0.5, 0.0, batch=None)
    assert into == "process" and loader.auto_probe["measuring"] == "process"
    assert "predicted_gain" not in loader.auto_probe
    loader, into = probe(0.09, 0.5, None)
    assert into == "process" and loader.auto_probe["measuring"] == "process"


def test_auto_transport_timed_on_a_real_batch():
    """transport_seconds writes a batch into a shared-memory file and maps it
    back, as the process transport does: a CPU time, and no file left."""
    batch = {"x": torch.rand(32, 3, 64, 64), "y": [torch.arange(32)], "n": np.zeros(9)}
    t = _torch_auto.transport_seconds(batch)
    assert t is not None and 0 < t < 5, t
    assert not shm_files()
    assert _torch_auto.transport_seconds({"plain": "python"}) is not None
    assert _torch_auto.transport_seconds(_torch_threads.Staged(batch)) > 0


@pytest.mark.parametrize("processes_predicted", [True, False])
def test_auto_predicted_verdict_needs_no_trial(monkeypatch, processes_predicted):
    """A clear prediction is the verdict: predicted threads never start a
    worker process; predicted processes switch once. The batches are
    torch's either way."""
    if not _torch_threads.gil_enabled():
        monkeypatch.setattr(_torch_threads, "gil_enabled", lambda: True)
    monkeypatch.setattr(_torch_auto, "THRESHOLD", 0.0)
    monkeypatch.setattr(_torch_auto, "transport_seconds",
                        lambda batch: 0.0 if processes_predicted else 1e6)
    if processes_predicted:
        monkeypatch.setattr(_torch_auto, "MARGIN", -0.5)     # any share predicts a gain
    started = []
    if not processes_predicted:
        def no_processes(*a, **k):
            started.append(a)
            raise RuntimeError("a worker process was started")
        monkeypatch.setattr(_torch_dispatch, "ProcessPool", no_processes)
    torch.manual_seed(6)
    ref = list(tud.DataLoader(Plain(120), batch_size=2, shuffle=True))
    torch.manual_seed(6)
    dl = st.DataLoader(Plain(120), batch_size=2, shuffle=True, num_workers=2)
    seen, ours = [], []
    for b in dl:
        seen.append(dl.worker_type_used)
        ours.append(b)
    assert_batches(ours, ref)
    runs = [k for i, k in enumerate(seen) if i == 0 or seen[i - 1] != k]
    want = "process" if processes_predicted else "thread"
    assert runs == (["thread", "process"] if processes_predicted else ["thread"]), \
        (runs, dl.auto_probe)
    probe = dl.auto_probe
    assert probe["choice"] == want and "predicted_gain" in probe, probe
    assert "process_batches_s" not in probe and "measuring" not in probe, probe
    if not processes_predicted:
        assert not started and not children()
    del dl
    assert wait_gone(lambda: worker_threads() or children()) < 3


def test_auto_verdict_at_an_epoch_end_holds_for_persistent_workers(monkeypatch):
    """An epoch too short for the trial: the measurement goes on in the next
    epochs (on the kind being measured), and the verdict, whenever it comes,
    is what persistent workers run from the next epoch on."""
    if not _torch_threads.gil_enabled():
        monkeypatch.setattr(_torch_threads, "gil_enabled", lambda: True)
    monkeypatch.setattr(_torch_auto, "THRESHOLD", 0.0)
    monkeypatch.setattr(_torch_auto, "MARGIN", 1e9)      # threads win
    monkeypatch.setattr(_torch_auto, "BAND", 1e10)       # after the timed trial
    torch.manual_seed(9)
    ref = tud.DataLoader(Plain(24), batch_size=2, shuffle=True, num_workers=2,
                         persistent_workers=True)
    want = [list(ref) for _ in range(6)]
    del ref
    torch.manual_seed(9)
    dl = st.DataLoader(Plain(24), batch_size=2, shuffle=True, num_workers=2,
                       persistent_workers=True)
    kinds = []
    for e in range(6):
        assert_batches(list(dl), want[e])
        kinds.append(dl.worker_type_used)
    assert dl.auto_probe["choice"] == "thread" and "process_batches_s" in dl.auto_probe, \
        dl.auto_probe
    assert "process" in kinds and kinds[-1] == "thread", kinds
    del dl
    assert wait_gone(lambda: worker_threads() or children()) < 3


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_persistent_workers_across_epochs(worker_type):
    # (Not torchvision's FakeData: it reseeds torch's global generator per
    # sample, which threads share.)
    # torch's persistent loader draws no base seed after its first epoch, so
    # its shuffle orders differ from num_workers=0's: the reference is torch's
    # own loader with persistent workers.
    ds = Plain(20)
    torch.manual_seed(8)
    ref_dl = tud.DataLoader(ds, batch_size=3, shuffle=True, num_workers=2,
                            persistent_workers=True)
    ref = [list(ref_dl) for _ in range(3)]
    torch.manual_seed(8)
    ref0 = [list(tud.DataLoader(ds, batch_size=3, shuffle=True)) for _ in range(2)]
    assert_batches(ref0[0], ref[0])
    assert not all(torch.equal(a["x"], b["x"]) for a, b in zip(ref0[1], ref[1]))
    torch.manual_seed(8)
    dl = st.DataLoader(ds, batch_size=3, shuffle=True, num_workers=2, worker_type=worker_type,
                       persistent_workers=True)
    ours = []
    for e in range(3):
        ours.append(list(dl))
        if e == 0:
            first_pool = dl._sl_iter._pool
    assert dl._sl_iter._pool is first_pool          # the same workers served every epoch
    for a, b in zip(ours, ref):
        assert_batches(a, b)
    # An epoch left early: the next one still starts clean.
    next(iter(ref_dl))
    it = iter(dl)
    next(it)
    torch.manual_seed(9)
    ref = list(ref_dl)
    torch.manual_seed(9)
    assert_batches(list(dl), ref)
    del ref_dl


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_custom_collate_samplers_and_no_batching(worker_type):
    ds = Plain(20)
    bs = tud.BatchSampler(list(reversed(range(20))), batch_size=6, drop_last=False)
    ref = list(tud.DataLoader(ds, batch_sampler=bs, collate_fn=lambda xs: xs))
    ours = list(st.DataLoader(ds, batch_sampler=bs, collate_fn=lambda xs: xs, num_workers=2,
                              worker_type=worker_type))
    assert_batches(ours, ref)
    ref = list(tud.DataLoader(ds, batch_size=None, sampler=[3, 1, 2]))
    ours = list(st.DataLoader(ds, batch_size=None, sampler=[3, 1, 2], num_workers=2,
                              worker_type=worker_type))
    assert_batches(ours, ref)


# ---------------------------------------------------------------------------
# Iterable datasets sharded by worker info.
# ---------------------------------------------------------------------------
class Shards(tud.IterableDataset):
    def __init__(self, n=23):
        self.n = n

    def __iter__(self):
        info = tud.get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        assert info is None or info is st.get_worker_info()
        # Uneven shards: worker w takes a contiguous block, so they end at
        # different times.
        per = [self.n * (k + 1) // (nw * (nw + 1) // 2) for k in range(nw)]
        start = sum(per[:wid])
        for i in range(start, min(self.n, start + per[wid])):
            yield {"i": i, "w": wid}


@pytest.mark.parametrize("worker_type,num_workers", [("thread", 1), ("thread", 3),
                                                     ("process", 3), ("auto", 2)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_iterable_sharded_equal_torch(worker_type, num_workers, drop_last):
    ref = list(tud.DataLoader(Shards(), batch_size=3, num_workers=num_workers,
                              drop_last=drop_last))
    ours = list(st.DataLoader(Shards(), batch_size=3, num_workers=num_workers,
                              worker_type=worker_type, drop_last=drop_last))
    assert_batches(ours, ref)


def test_iterable_unbatched_and_inline():
    ref = list(tud.DataLoader(Shards(9), batch_size=None))
    assert_batches(list(st.DataLoader(Shards(9), batch_size=None)), ref)
    ref = list(tud.DataLoader(Shards(9), batch_size=None, num_workers=2))
    assert_batches(list(st.DataLoader(Shards(9), batch_size=None, num_workers=2,
                                      worker_type="thread")), ref)


# ---------------------------------------------------------------------------
# Worker info, worker_init_fn, per-sample generators.
# ---------------------------------------------------------------------------
class Who(tud.Dataset):
    def __init__(self):
        self.seen_init = {}         # worker id -> what worker_init_fn left

    def __len__(self):
        return 16

    def __getitem__(self, i):
        a, b = tud.get_worker_info(), st.get_worker_info()
        assert a is b
        return torch.tensor([a.id, a.num_workers, a.dataset.seen_init.get(a.id, -1)])


def mark_init(wid):
    # (torch 2.x's WorkerInfo is a frozen dataclass with slots: the mark
    # goes into the worker's dataset, as a worker_init_fn configures it.)
    info = st.get_worker_info()
    assert info.id == wid and tud.get_worker_info() is info
    info.dataset.seen_init[wid] = wid + 100


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_worker_info_and_init_fn(worker_type):
    out = torch.cat(list(st.DataLoader(Who(), batch_size=2, num_workers=3,
                                       worker_type=worker_type, worker_init_fn=mark_init)))
    assert set(out[:, 1].tolist()) == {3}
    # torch's order: batch k (2 samples) on worker k mod 3.
    assert out[:, 0].tolist() == [k // 2 % 3 for k in range(16)]
    assert (out[:, 2] == out[:, 0] + 100).all()
    assert tud.get_worker_info() is None and st.get_worker_info() is None


class ThreadSafeDraws(tud.Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        from torch.random import thread_safe_generator
        info = tud.get_worker_info()
        g = thread_safe_generator()
        return torch.tensor([info.id, g is not None,
                             torch.randint(0, 2 ** 30, (1,), generator=g).item()])


@pytest.mark.skipif(not hasattr(torch.random, "thread_safe_generator"),
                    reason="this torch has no thread_safe_generator (torch 2.x has)")
@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_thread_safe_generator_in_workers(worker_type):
    """torch 2.x's WorkerInfo carries worker_method and rng, and
    torch.random.thread_safe_generator() gives a thread worker its own
    generator (None in a process worker, which draws from its reseeded
    global one): per worker, the draws are those of a generator seeded
    with the worker's seed, whatever the timing."""
    def run():
        dl = st.DataLoader(ThreadSafeDraws(), batch_size=2, num_workers=2,
                           worker_type=worker_type, generator=torch.Generator().manual_seed(4))
        return torch.cat(list(dl))

    out = run()
    assert (out[:, 1] == int(worker_type == "thread")).all()
    base = int(torch.empty((), dtype=torch.int64).random_(
        generator=torch.Generator().manual_seed(4)).item())
    for w in (0, 1):
        g = torch.Generator().manual_seed(base + w)
        mine = out[out[:, 0] == w][:, 2].tolist()
        assert mine == [torch.randint(0, 2 ** 30, (1,), generator=g).item() for _ in mine]
    assert torch.equal(run(), out)


class WorkerNumpyDraws(tud.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        info = tud.get_worker_info()
        return torch.tensor([info.id, info.rng.numpy_generator.integers(0, 2 ** 30)])


def test_thread_worker_info_is_made_when_first_asked_for():
    """A thread worker's WorkerInfo (with torch 2.x's rng, numpy's generator
    among them) is made the first time the thread asks for it: a Dataset
    that never asks does not import numpy's random module (checked in a
    fresh interpreter); one that asks gets the generators seeded as at the
    worker's start, the same in every run, and torch's collation inside a
    worker still sees no worker info."""
    code = textwrap.dedent("""
        import sys, torch
        import sluice.torch as st
        class Plain(torch.utils.data.Dataset):
            def __len__(self):
                return 64
            def __getitem__(self, i):
                return torch.full((3, 8, 8), float(i)), i
        before = "numpy.random" in sys.modules     # numpy 1.x imports it itself
        dl = st.DataLoader(Plain(), batch_size=8, num_workers=2, worker_type="thread",
                           shuffle=True)
        n = sum(len(y) for _, y in dl)
        assert n == 64, n
        print(before, "numpy.random" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    before, after = out.stdout.split()
    assert after == before, "the loader imported numpy.random for a Dataset that never asked"

    rng_fields = "rng" in getattr(_torch_compat.WorkerInfo, "__dataclass_fields__", {})
    if not rng_fields:
        return      # torch 1.x: no generators in the WorkerInfo
    def run():
        dl = st.DataLoader(WorkerNumpyDraws(), batch_size=2, num_workers=2, worker_type="thread",
                           generator=torch.Generator().manual_seed(9))
        return torch.cat(list(dl))
    out = run()
    base = int(torch.empty((), dtype=torch.int64).random_(
        generator=torch.Generator().manual_seed(9)).item())
    for w in (0, 1):
        g = np.random.default_rng(_torch_compat._generate_state(base, w))
        mine = out[out[:, 0] == w][:, 1].tolist()
        assert mine and mine == [int(g.integers(0, 2 ** 30)) for _ in mine]
    assert torch.equal(run(), out)


def test_sample_rng_outside_a_sample():
    with pytest.raises(RuntimeError, match="no sample is being loaded"):
        st.sample_rng()
    with st.sample_context(1, 2, 3):
        a = st.sample_rng().initial_seed()
        assert st.sample_seed() == a == sluice._sluice.sample_seed(1, 2, 3)
        with pytest.raises(ValueError, match="kind"):
            st.sample_rng("jax")
    with st.sample_context(1, 2, 4):
        assert st.sample_seed() != a


# ---------------------------------------------------------------------------
# Resume and epochs.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("worker_type,num_workers", [("thread", 2), ("process", 2), ("auto", 0)])
@pytest.mark.parametrize("seeded", [True, False])
def test_state_dict_resumes_exactly(worker_type, num_workers, seeded):
    def make():
        return st.DataLoader(Plain(41), batch_size=4, shuffle=True, num_workers=num_workers,
                             worker_type=worker_type, seed=9 if seeded else None)

    torch.manual_seed(77)
    full = list(make())
    torch.manual_seed(77)
    dl = make()
    it = iter(dl)
    head = [next(it) for _ in range(4)]
    state = dl.state_dict()
    assert state["batch"] == 4 and state["epoch"] == 0
    del it, dl
    torch.manual_seed(555)     # whatever the global state is now
    dl2 = make()
    dl2.load_state_dict(state)
    tail = list(dl2)
    assert_batches(head + tail, full)
    assert dl2.state_dict()["epoch"] == 1 and dl2.state_dict()["batch"] == 0


def test_iterable_resume():
    full = list(st.DataLoader(Shards(), batch_size=2, num_workers=2, worker_type="thread"))
    dl = st.DataLoader(Shards(), batch_size=2, num_workers=2, worker_type="thread")
    it = iter(dl)
    head = [next(it) for _ in range(3)]
    state = dl.state_dict()
    del it
    dl2 = st.DataLoader(Shards(), batch_size=2, num_workers=2, worker_type="thread")
    dl2.load_state_dict(state)
    assert_batches(head + list(dl2), full)


def test_set_epoch_reshuffles_with_seed():
    def make():
        return st.DataLoader(list(range(30)), batch_size=30, shuffle=True, seed=4)

    dl = make()
    e0 = next(iter(dl))             # an epoch left unfinished is not over
    assert torch.equal(next(iter(dl)), e0)
    assert sorted(e0.tolist()) == list(range(30))
    assert torch.equal(list(dl)[0], e0)
    e1 = list(dl)[0]                # without set_epoch: the next pass is epoch 1
    assert not torch.equal(e0, e1)
    dl.set_epoch(1)
    assert torch.equal(list(dl)[0], e1)
    dl.set_epoch(0)
    assert torch.equal(list(make())[0], list(dl)[0])
    # The same seed gives the same order in another loader; another seed not.
    other = st.DataLoader(list(range(30)), batch_size=30, shuffle=True, seed=5)
    assert not torch.equal(list(other)[0], e0)


def test_set_epoch_reaches_distributed_sampler():
    ds = list(range(20))
    sampler = tud.DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True, seed=3)
    dl = st.DataLoader(ds, batch_size=10, sampler=sampler, num_workers=2, worker_type="thread")
    dl.set_epoch(5)
    assert sampler.epoch == 5
    ref_sampler = tud.DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True, seed=3)
    ref_sampler.set_epoch(5)
    assert_batches(list(dl), list(tud.DataLoader(ds, batch_size=10, sampler=ref_sampler)))


# ---------------------------------------------------------------------------
# Errors, dead workers, timeout.
# ---------------------------------------------------------------------------
class Fails(tud.Dataset):
    def __init__(self, bad=7, how="raise"):
        self.bad, self.how = bad, how

    def __len__(self):
        return 20

    def __getitem__(self, i):
        if i == self.bad:
            if self.how == "raise":
                raise ValueError(f"bad sample {i} in the_dataset_code")
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.how == "sleep":
                time.sleep(3)
        return i


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_exception_names_worker_index_and_traceback(worker_type):
    dl = st.DataLoader(Fails(), batch_size=4, num_workers=2, worker_type=worker_type)
    it = iter(dl)
    assert next(it).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError) as e:
        next(it)
    msg = str(e.value)
    assert f"{worker_type} worker" in msg and "dataset index 7" in msg and "batch 1" in msg
    assert "Original Traceback" in msg and "the_dataset_code" in msg
    assert 'raise ValueError(f"bad sample' in msg
    # The loader goes on with the next batch, as torch's does.
    assert next(it).tolist() == [8, 9, 10, 11]
    # (The exception's traceback holds the iterator's frames: drop both.)
    del it, e
    gc.collect()
    assert not shm_files() and wait_gone(lambda: worker_threads() or children()) < 3


def test_killed_worker_process_is_named_promptly():
    dl = st.DataLoader(Fails(how="kill"), batch_size=4, num_workers=2, worker_type="process")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"worker process \d \(pid \d+\) killed by signal "
                                           r"SIGKILL while loading batch 1 \(dataset indices "
                                           r"\[4, 5, 6, 7\]\)"):
        list(dl)
    assert time.monotonic() - t0 < 10
    assert not shm_files()


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_timeout_is_honoured(worker_type):
    dl = st.DataLoader(Fails(bad=1, how="sleep"), batch_size=2, num_workers=1,
                       worker_type=worker_type, timeout=0.5)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out after 0.5 seconds waiting for batch 0"):
        next(iter(dl))
    assert time.monotonic() - t0 < 2.5
    # A process is stopped at once; a thread inside __getitem__ cannot be, and
    # ends when that sample returns (it is a daemon thread meanwhile).
    assert wait_gone(lambda: worker_threads() or children(), 20) < 20


def test_bad_arguments():
    with pytest.raises(ValueError, match="worker_type"):
        st.DataLoader([1], worker_type="fiber")
    with pytest.raises(ValueError, match="seed"):
        st.DataLoader([1], seed=-1)
    with pytest.raises(ValueError, match="prefetch_factor"):
        st.DataLoader([1], prefetch_factor=4)
    with pytest.raises(ValueError):
        st.DataLoader([1], shuffle=True, sampler=[0])      # torch's own check
    with pytest.raises(ValueError, match="not a sluice.torch.DataLoader state_dict"):
        st.DataLoader([1]).load_state_dict({"epoch": 0})
    assert isinstance(st.DataLoader([1]), tud.DataLoader)


# ---------------------------------------------------------------------------
# Shutdown: del, break, Ctrl-C.
# ---------------------------------------------------------------------------
class Slow(tud.Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        time.sleep(0.01)
        return torch.zeros(1000)


def children():
    import multiprocessing
    return [p for p in multiprocessing.active_children() if p.name.startswith("sluice.torch")]


def wait_gone(check, limit=5.0):
    t0 = time.monotonic()
    while check() and time.monotonic() - t0 < limit:
        time.sleep(0.05)
    return time.monotonic() - t0


@pytest.mark.parametrize("worker_type", ["thread", "process", "process-spawn"])
@pytest.mark.parametrize("persistent", [False, True])
def test_del_loader_mid_epoch_stops_everything(worker_type, persistent):
    worker_type, _, context = worker_type.partition("-")
    dl = st.DataLoader(Slow(), batch_size=4, num_workers=2, worker_type=worker_type,
                       persistent_workers=persistent, multiprocessing_context=context or None)
    for k, _ in enumerate(dl):
        if k == 2:
            break
    if not persistent:
        # The loop's iterator is gone with the loop.
        assert wait_gone(lambda: worker_threads() or children()) < 3
    else:
        assert worker_threads() or children()
    del dl, _
    gc.collect()
    assert wait_gone(lambda: worker_threads() or children()) < 3
    assert not worker_threads() and not children() and not shm_files()


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_ctrl_c_mid_epoch_stops_everything(worker_type):
    dl = st.DataLoader(Slow(), batch_size=64, num_workers=2, worker_type=worker_type)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        for _ in dl:
            pass
    timer.join()
    assert time.monotonic() - t0 < 5
    assert wait_gone(lambda: worker_threads() or children()) < 3
    assert not shm_files()


def children_of(pid):
    """The children of pid, read from /proc rather than with pgrep: the wheel
    checks run these tests in a minimal root without procps."""
    kids = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and \
                    open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1] == str(pid):
                kids.append(d)
        except OSError:         # gone between the listing and the read
            pass
    return kids


def running(pid):
    """pid is a process that has not exited (neither gone nor a zombie). A
    process can vanish between any two looks at /proc: gone is not running."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigint_from_terminal_to_process_group(tmp_path):
    """A real SIGINT to the whole process group, as a terminal sends it."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, time
        sys.path[:0] = {sys.path!r}
        import torch, torch.utils.data as tud
        from sluice.torch import DataLoader
        class Slow(tud.Dataset):
            def __len__(self): return 100000
            def __getitem__(self, i):
                time.sleep(0.01); return torch.zeros(100)
        dl = DataLoader(Slow(), batch_size=8, num_workers=2, worker_type="process")
        try:
            for k, _ in enumerate(dl):
                if k == 1:
                    print(os.getpid(), flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    pid = int(p.stdout.readline())
    kids = children_of(pid)
    assert len(kids) >= 2
    t0 = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)
    rest, _ = p.communicate(timeout=20)
    assert time.monotonic() - t0 < 10
    assert "interrupted" in rest and p.returncode == 3
    assert not [k for k in kids if running(k)]
    assert not glob.glob(f"/dev/shm/sluice-torch-{pid}-*")


@pytest.mark.parametrize("context", [None, "spawn", "forkserver"])
def test_workers_exit_when_the_main_process_is_killed(tmp_path, context):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import multiprocessing, os, sys, time
        sys.path[:0] = {sys.path!r}
        import torch, torch.utils.data as tud
        from sluice.torch import DataLoader
        class Slow(tud.Dataset):
            def __len__(self): return 100000
            def __getitem__(self, i):
                time.sleep(0.002); return torch.zeros(100)
        if __name__ == "__main__":
            dl = DataLoader(Slow(), batch_size=8, num_workers=2, worker_type="process",
                            multiprocessing_context={context!r})
            for k, _ in enumerate(dl):
                if k == 1:
                    kids = [c.pid for c in multiprocessing.active_children()
                            if c.name.startswith("sluice.torch")]
                    print(os.getpid(), *kids, flush=True)
                    time.sleep(60)
    """))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pid, *kids = p.stdout.readline().split()
    assert len(kids) == 2
    time.sleep(0.3)                 # the workers have prefetched batches into /dev/shm
    os.kill(int(pid), signal.SIGKILL)
    p.wait(10)

    def alive():
        return [k for k in kids if running(k)]

    assert wait_gone(alive, 5) < 5, alive()
    assert not glob.glob(f"/dev/shm/sluice-torch-{pid}-*")


# ---------------------------------------------------------------------------
# pin_memory and sluice.ops.decode_jpeg.
# ---------------------------------------------------------------------------
def test_pin_memory_without_gpu_is_torchs():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: this checks the no-GPU behaviour")
    out = next(iter(st.DataLoader(Plain(), batch_size=2, pin_memory=True, num_workers=1,
                                  worker_type="thread")))
    assert not out["x"].is_pinned()     # torch's loader pins only when CUDA is available


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here: pinning not exercised")
def test_pin_memory_with_gpu():
    out = next(iter(st.DataLoader(Plain(), batch_size=2, pin_memory=True, num_workers=2,
                                  worker_type="process")))
    assert out["x"].is_pinned() and out["np"].is_pinned()


def test_decode_jpeg_equals_pil(jpeg_folder):
    paths = sorted(glob.glob(os.path.join(jpeg_folder, "*", "*.jpg")))[:6]
    for p in paths:
        data = open(p, "rb").read()
        ours = sluice.ops.decode_jpeg(data)
        ref = np.asarray(Image.open(p).convert("RGB"))
        assert ours.dtype == np.uint8 and ours.shape == ref.shape
        assert np.array_equal(ours, ref), p
        gray = sluice.ops.decode_jpeg(bytearray(data), mode="gray")
        assert np.array_equal(gray[..., 0], np.asarray(Image.open(p).convert("L")))
    with pytest.raises(sluice.DecodeError):
        sluice.ops.decode_jpeg(data[: len(data) // 2])
    with pytest.raises(sluice.DecodeError):
        sluice.ops.decode_jpeg(b"not an image")
    with pytest.raises(sluice.LimitError):
        sluice.ops.decode_jpeg(data, max_pixels=100)
    with pytest.raises(ValueError, match="mode"):
        sluice.ops.decode_jpeg(data, mode="cmyk")
    with pytest.raises(TypeError):
        sluice.ops.decode_jpeg("a string")


def test_decode_jpeg_releases_the_gil(jpeg_folder):
    """Two threads decoding at once: the decoder must be per thread."""
    p = sorted(glob.glob(os.path.join(jpeg_folder, "*", "*.jpg")))[0]
    data = open(p, "rb").read()
    ref = sluice.ops.decode_jpeg(data)
    bad = []

    def run():
        for _ in range(200):
            if not np.array_equal(sluice.ops.decode_jpeg(data), ref):
                bad.append(1)

    ts = [threading.Thread(target=run) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


# ---------------------------------------------------------------------------
# torch's order and timing of dispatch: global-RNG draws in process workers,
# iterable interleaving under any timing.
# ---------------------------------------------------------------------------
def jitter(limit_ms):
    """A random sleep that draws from no generator the Dataset can see."""
    time.sleep(int.from_bytes(os.urandom(2), "little") % (limit_ms * 10) / 10000)


class GlobalDraws(tud.Dataset):
    """torch's, numpy's and random's global generators drawn in
    __getitem__ (issue: process workers must give torch's values)."""

    def __init__(self, n=30, jitter_ms=0):
        self.n, self.jitter_ms = n, jitter_ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.jitter_ms:
            jitter(self.jitter_ms)
        w = tud.get_worker_info()
        return torch.tensor([i, torch.randint(0, 2 ** 30, (1,)).item(),
                             int(np.random.randint(0, 2 ** 30)), random.randrange(2 ** 30),
                             -1 if w is None else w.id])


@pytest.mark.parametrize("num_workers", [1, 2, 3, 4])
def test_process_global_rng_draws_equal_torch(num_workers):
    def run(loader_cls, **kw):
        dl = loader_cls(GlobalDraws(jitter_ms=kw.pop("jitter_ms", 0)), batch_size=2,
                        shuffle=True, num_workers=num_workers,
                        generator=torch.Generator().manual_seed(8), **kw)
        return list(dl)

    ref = run(tud.DataLoader)
    assert_batches(run(tud.DataLoader), ref)           # torch's is deterministic
    for _ in range(6):
        assert_batches(run(st.DataLoader, worker_type="process", jitter_ms=8), ref)
    assert_batches(run(st.DataLoader, worker_type="process", prefetch_factor=1), ref)


class LazySampler(tud.Sampler):
    """Draws each index from torch's global generator when asked, so how
    many indices the loader has asked for when the loop draws is seen."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            yield int(torch.randint(0, 1000, (1,)))


@pytest.mark.parametrize("worker_type", ["thread", "process"])
@pytest.mark.parametrize("prefetch_factor", [1, 3])
def test_sampler_is_asked_at_torchs_times(worker_type, prefetch_factor):
    """torch asks the sampler for prefetch_factor * num_workers batches at
    the start, then one per batch handed out: a loop that draws from the
    global generator between batches sees the same values."""
    def run(loader_cls, **kw):
        torch.manual_seed(21)
        dl = loader_cls(list(range(1000)), batch_size=3, sampler=LazySampler(40),
                        num_workers=2, prefetch_factor=prefetch_factor, **kw)
        out = []
        for b in dl:
            time.sleep(0.002)
            out.append((b, torch.rand(1)))
        return out

    ref = run(tud.DataLoader)
    for _ in range(3):
        ours = run(st.DataLoader, worker_type=worker_type)
        assert_batches([b for b, _ in ours], [b for b, _ in ref])
        assert_batches([r for _, r in ours], [r for _, r in ref])


class Owned(tud.IterableDataset):
    """Worker w owns SIZES[w] items (issue: 75/50/26), sharded through
    get_worker_info(); random sleeps shake the timing."""
    SIZES = (75, 50, 26, 9)

    def __init__(self, jitter_ms=0):
        self.jitter_ms = jitter_ms

    def __iter__(self):
        info = tud.get_worker_info()
        wid = 0 if info is None else info.id
        # Each worker's pace is drawn per run: 0 to jitter_ms per item.
        pace = int.from_bytes(os.urandom(1), "little") % (self.jitter_ms + 1)
        if pace:
            jitter(pace)
        for k in range(self.SIZES[wid]):
            if pace:
                jitter(pace)
            yield wid * 1000 + k


@pytest.mark.parametrize("worker_type", ["thread", "process", "auto"])
@pytest.mark.parametrize("num_workers", [1, 2, 3, 4])
def test_iterable_interleaving_equals_torch_under_any_timing(worker_type, num_workers):
    ref = list(tud.DataLoader(Owned(), batch_size=4, num_workers=num_workers))
    assert_batches(list(tud.DataLoader(Owned(jitter_ms=3), batch_size=4,
                                       num_workers=num_workers)), ref)
    runs = 40 if worker_type == "thread" else 20
    for _ in range(runs):
        ours = list(st.DataLoader(Owned(jitter_ms=3), batch_size=4, num_workers=num_workers,
                                  worker_type=worker_type))
        assert_batches(ours, ref)


# ---------------------------------------------------------------------------
# multiprocessing_context: process workers started as torch starts them.
# ---------------------------------------------------------------------------
START_MARK = {"value": "import"}      # set at run time by the tests: a forked
                                      # worker sees it, a spawned one does not


class HowStarted(tud.Dataset):
    """Says how its worker got it: pickled (spawn, forkserver) or copied by
    fork, whether the parent's run-time module state is there, and the
    worker's global draws."""

    def __init__(self):
        self.pickled = False
        self.seen_init = {}

    def __getstate__(self):
        return dict(self.__dict__, pickled=True)

    def __len__(self):
        return 12

    def __getitem__(self, i):
        info = tud.get_worker_info()
        return torch.tensor([i, int(self.pickled), int(START_MARK["value"] == "run"),
                             info.id, self.seen_init.get(info.id, -1),
                             torch.randint(0, 2 ** 30, (1,)).item(),
                             int(np.random.randint(0, 2 ** 30))])


@pytest.mark.parametrize("context", ["spawn", "forkserver", "fork", "spawn-object"])
def test_multiprocessing_context_starts_workers_as_torch(context, monkeypatch):
    monkeypatch.setitem(START_MARK, "value", "run")
    ctx = (torch.multiprocessing.get_context("spawn") if context == "spawn-object"
           else context)

    def run(loader_cls, **kw):
        return list(loader_cls(HowStarted(), batch_size=3, shuffle=True, num_workers=2,
                               multiprocessing_context=ctx, worker_init_fn=mark_init,
                               generator=torch.Generator().manual_seed(5), **kw))

    ref = run(tud.DataLoader)
    ours = run(st.DataLoader, worker_type="process")
    assert_batches(ours, ref)
    out = torch.cat(ours)
    forked = context == "fork"
    assert (out[:, 1] == int(not forked)).all()        # the dataset was pickled (or not)
    assert (out[:, 2] == int(forked)).all()            # a fresh interpreter (or a fork)
    assert (out[:, 4] == out[:, 3] + 100).all()        # worker_init_fn ran there
    assert wait_gone(lambda: children()) < 3 and not shm_files()


def test_multiprocessing_context_checked_as_torch():
    with pytest.raises(ValueError, match="multiprocessing_context"):
        st.DataLoader(Plain(), num_workers=0, multiprocessing_context="spawn")
    with pytest.raises(ValueError, match="multiprocessing_context"):
        st.DataLoader(Plain(), num_workers=2, multiprocessing_context="teleport")
    with pytest.raises(TypeError, match="multiprocessing_context"):
        st.DataLoader(Plain(), num_workers=2, multiprocessing_context=object())
    # Positional, where torch's signature has it.
    dl = st.DataLoader(Plain(6), 2, False, None, None, 2, None, False, False, 0, None, "spawn",
                       torch.Generator().manual_seed(1), worker_type="thread")
    assert dl.multiprocessing_context.get_start_method() == "spawn"
    assert dl.generator is not None
    # Thread workers need no start method: the context does not matter.
    assert_batches(list(dl), list(tud.DataLoader(Plain(6), 2)))


class Unpicklable(Plain):
    def __init__(self, n=40):
        super().__init__(n)
        self.lock = threading.Lock()


def test_spawn_with_an_unpicklable_dataset(monkeypatch):
    dl = st.DataLoader(Unpicklable(), batch_size=4, num_workers=2, worker_type="process",
                       multiprocessing_context="spawn")
    with pytest.raises(TypeError, match="pickle") as e:
        next(iter(dl))
    assert "worker_type='thread'" in "".join(getattr(e.value, "__notes__", []))
    assert not children()
    # "auto" that chose processes (forced here) goes on with threads and says why.
    # (Two epochs: the probe's verdict may come when the first epoch has no
    # batch left to ask for; the second then starts on processes.)
    monkeypatch.setattr(_torch_auto, "THRESHOLD", 1.01)
    torch.manual_seed(3)
    ref = [list(tud.DataLoader(Unpicklable(), batch_size=2, shuffle=True)) for _ in range(2)]
    torch.manual_seed(3)
    dl = st.DataLoader(Unpicklable(), batch_size=2, shuffle=True, num_workers=2,
                       multiprocessing_context="spawn")
    if _torch_threads.gil_enabled():
        with pytest.warns(RuntimeWarning, match="continues on threads: worker processes "
                                                "cannot start with the 'spawn' start method"):
            ours = [list(dl) for _ in range(2)]
    else:
        ours = [list(dl) for _ in range(2)]
    for a, b in zip(ours, ref):
        assert_batches(a, b)
    assert dl.worker_type_used == "thread"


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_killed_spawned_worker_is_named_and_leaves_no_files(context):
    gc.collect()
    dl = st.DataLoader(Fails(how="kill"), batch_size=4, num_workers=2, worker_type="process",
                       multiprocessing_context=context)
    with pytest.raises(RuntimeError, match=r"worker process \d \(pid \d+\) killed by signal "
                                           r"SIGKILL while loading batch 1"):
        list(dl)
    assert wait_gone(lambda: children()) < 3
    assert not shm_files()


# ---------------------------------------------------------------------------
# Free-threaded Python: a module that turns the GIL back on.
# ---------------------------------------------------------------------------
NEEDS_GIL_C = """
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "needsgil", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_needsgil(void) { return PyModule_Create(&def); }
"""


def test_gil_turned_back_on_is_named_once_and_auto_follows(tmp_path):
    """On a free-threaded build: "auto" takes threads at once while the GIL
    is off; once an extension without Py_mod_gil (built here, as triton's
    is for torchvision) turns it on, the loader says so once, naming the
    module and PYTHON_GIL=0, and "auto" measures again. On a GIL build
    there is nothing to say."""
    import sysconfig
    import warnings
    if not _torch_threads.free_threaded_build():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dl = st.DataLoader(Plain(8), batch_size=2, num_workers=2, worker_type="thread")
            assert len(list(dl)) == 4
        return
    ext = tmp_path / ("needsgil" + sysconfig.get_config_var("EXT_SUFFIX"))
    src = tmp_path / "needsgil.c"
    src.write_text(NEEDS_GIL_C)
    subprocess.run([sysconfig.get_config_var("CC").split()[0], "-shared", "-fPIC",
                    "-I" + sysconfig.get_paths()["include"], str(src), "-o", str(ext)],
                   check=True)
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys, warnings
        sys.path[:0] = {[str(tmp_path)] + sys.path!r}
        import torch, torch.utils.data as tud
        import sluice.torch as st
        assert not sys._is_gil_enabled()

        class Plain(tud.Dataset):
            def __init__(self, n):
                self.n = n
            def __len__(self):
                return self.n
            def __getitem__(self, i):
                return torch.arange(4) + i
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            dl = st.DataLoader(Plain(90), batch_size=2, num_workers=2)
            assert len(list(dl)) == 45
        assert not [x for x in w if "GIL" in str(x.message)], [str(x.message) for x in w]
        assert dl.auto_probe["choice"] == "thread" and "without the GIL" in dl.auto_probe["why"]
        import needsgil
        assert sys._is_gil_enabled()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert len(list(dl)) == 45
            dl2 = st.DataLoader(Plain(8), batch_size=2, num_workers=2, worker_type="thread")
            list(dl2)
        gil = [str(x.message) for x in w if "GIL" in str(x.message)]
        assert len(gil) == 1, gil
        print(gil[0])
        assert "cpu_share" in dl.auto_probe, dl.auto_probe
    """))
    here = os.path.dirname(os.path.abspath(__file__))
    for extra in ({}, {"PYTHONWARNINGS": "ignore"}):
        env = dict(os.environ, **extra)
        env.pop("PYTHON_GIL", None)
        env["PYTHONPATH"] = os.pathsep.join([here] + sys.path)
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             env=env, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "module 'needsgil'" in out.stdout and "PYTHON_GIL=0" in out.stdout, out.stdout
    # PYTHON_GIL=1 asked for the GIL: nothing to say.
    asked = tmp_path / "asked.py"
    asked.write_text(textwrap.dedent(f"""
        import sys, warnings
        sys.path[:0] = {sys.path!r}
        import torch
        import sluice.torch as st
        assert sys._is_gil_enabled()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dl = st.DataLoader(list(range(8)), batch_size=2, num_workers=2,
                               worker_type="thread")
            assert len(list(dl)) == 4
    """))
    out = subprocess.run([sys.executable, str(asked)], capture_output=True, text=True,
                         env=dict(os.environ, PYTHON_GIL="1"), timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]


class SlowFirst(tud.Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        if i == 0:
            time.sleep(0.6)
        return i


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_in_order_false_hands_out_what_has_arrived(worker_type):
    """torch 2.x's in_order=False (taken with any torch): a slow batch does
    not hold the others back; every batch still comes exactly once."""
    dl = st.DataLoader(SlowFirst(), batch_size=1, num_workers=2, worker_type=worker_type,
                       in_order=False)
    assert dl.in_order is False
    got = [int(b) for b in dl]
    assert sorted(got) == list(range(12)) and got[0] != 0
    with pytest.raises(ValueError, match="in_order=False"):
        dl.state_dict()
    assert [int(b) for b in st.DataLoader(SlowFirst(), batch_size=1, num_workers=2,
                                          worker_type=worker_type)] == list(range(12))
    if "in_order" in _torch_compat.TORCH_INIT_PARAMS:
        ref = [int(b) for b in tud.DataLoader(SlowFirst(), batch_size=1, num_workers=2,
                                              in_order=False)]
        assert sorted(ref) == sorted(got)


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_persistent_resume_in_a_later_epoch(worker_type):
    """An epoch of persistent workers after the first draws no base seed
    (torch's); a resume from its state_dict must not draw one either."""
    def make():
        return st.DataLoader(Plain(23), batch_size=3, shuffle=True, num_workers=2,
                             worker_type=worker_type, persistent_workers=True)

    torch.manual_seed(31)
    dl = make()
    list(dl)
    full = list(dl)                         # epoch 1, no base seed drawn
    torch.manual_seed(31)
    dl = make()
    list(dl)
    it = iter(dl)
    head = [next(it) for _ in range(3)]
    state = dl.state_dict()
    assert state["epoch"] == 1 and state["batch"] == 3 and state["fresh"] is False
    del it, dl
    torch.manual_seed(999)
    dl2 = make()
    dl2.load_state_dict(state)
    assert_batches(head + list(dl2), full)
