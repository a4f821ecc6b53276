"""sluice.torch.DataLoader's pin_memory=True and device= through sluice's
device layer (python/py_stager.c, src/device/device_stager.c).

Without a GPU: the host backend (the same ring, slots and events, run by
threads) through the loader, and the CUDA backend over the stand-in runtime
(tests/device/fake/, SLUICE_CUDART) in subprocesses: pinned batches through
the loader (torch wraps the stand-in's pinned memory, which is host memory),
device copies through the Stager directly (torch cannot wrap the stand-in's
"device" memory as CUDA tensors without a GPU). What only a GPU shows —
is_pinned() True, CUDA tensors equal, the stream wait — is the skipped case
at the end and `torch_pin_memory` in bench/gpu_checks.py.
"""
import collections
import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sluice  # noqa: E402
import sluice.torch as st  # noqa: E402
from sluice import _torch_staging as staging  # noqa: E402
from sluice import _sluice  # noqa: E402
from torch.utils.data import DataLoader as TorchLoader, Dataset  # noqa: E402
from torch.utils.data._utils.pin_memory import pin_memory as torch_pin_memory  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
Pair = collections.namedtuple("Pair", "a b")


class Nested(Dataset):
    """Samples with every container torch's pin_memory walks, and dtypes of
    1, 2, 4 and 8 bytes (bfloat16 and bool among them), 0-d and empty."""

    def __len__(self):
        return 11

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"x": torch.rand(3, 5, generator=g),
                "h": torch.rand(2, 2, generator=g).to(torch.bfloat16),
                "y": i, "name": f"s{i}",
                "t": (torch.tensor([i, -i], dtype=torch.int16),
                      Pair(torch.tensor(i * 0.5, dtype=torch.float64),
                           torch.tensor([True, i % 2 == 0]))),
                "e": torch.zeros(0, 4), "u": np.arange(i, i + 3, dtype=np.uint8)}


def same(a, b, where="batch"):
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype)
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{k}]")
    else:
        assert a == b, where


@pytest.fixture
def host_pinning(monkeypatch):
    """pin_memory=True stages through the host backend, as it does through
    CUDA on a GPU; torch's own Tensor.pin_memory (the reference's, and no
    CUDA here) becomes a copy, so torch's pin_memory walk gives the
    reference structure."""
    monkeypatch.setattr(staging, "pin_target", lambda dev: ("host", 0))
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, device=None: self.clone())


def torch_batches(pinned, **kw):
    out = list(TorchLoader(Nested(), batch_size=4, **kw))
    return [torch_pin_memory(b) for b in out] if pinned else out


LOADERS = [(0, "thread"), (2, "thread"), (2, "process")]


@pytest.mark.parametrize("num_workers,worker_type", LOADERS)
def test_pin_memory_through_host_backend_equals_torch(host_pinning, monkeypatch, num_workers,
                                                     worker_type):
    ref = torch_batches(True)
    where = []
    call = staging.Staging.__call__

    def spy(self, batch):
        where.append(threading.current_thread().name)
        return call(self, batch)

    monkeypatch.setattr(staging.Staging, "__call__", spy)
    dl = st.DataLoader(Nested(), batch_size=4, pin_memory=True, num_workers=num_workers,
                       worker_type=worker_type)
    got = list(dl)
    # thread workers stage their own batches (off the main thread, as
    # torch's pin thread); process workers' batches are staged on arrival
    on_workers = num_workers > 0 and worker_type == "thread"
    assert len(where) == 3
    assert all(w.startswith("sluice.torch worker") == on_workers for w in where), where
    assert len(got) == len(ref) == 3
    for k, (a, b) in enumerate(zip(ref, got)):
        same(a, b, f"batch {k}")
    assert dl.pin_memory_path == "sluice host:0 pinned"
    stats = dl.staging_stats()
    assert stats["batches"] == 3 and stats["h2d_bytes"] == 0
    # every tensor's bytes went through the slots (numpy arrays become tensors in collate)
    assert stats["staged_bytes"] == sum(t.numel() * t.element_size()
                                        for b in ref for t in leaves(b))


def leaves(b):
    if isinstance(b, torch.Tensor):
        return [b]
    if isinstance(b, dict):
        return [t for v in b.values() for t in leaves(v)]
    if isinstance(b, (list, tuple)):
        return [t for v in b for t in leaves(v)]
    return []


@pytest.mark.parametrize("num_workers,worker_type", LOADERS)
def test_device_host_equals_torch(num_workers, worker_type):
    ref = torch_batches(False)
    dl = st.DataLoader(Nested(), batch_size=4, device="host", num_workers=num_workers,
                       worker_type=worker_type)
    got = list(dl)
    for k, (a, b) in enumerate(zip(ref, got)):
        # device= keeps the collated structure (no tuple-to-list of pin_memory)
        same(a, b, f"batch {k}")
    stats = dl.staging_stats()
    assert stats["batches"] == 3 and stats["h2d_bytes"] == stats["staged_bytes"] > 0


def test_slots_reused_only_after_release(host_pinning):
    class Big(Dataset):
        def __len__(self):
            return 40

        def __getitem__(self, i):
            return torch.full((256,), float(i))

    def expect(k):
        return torch.arange(4 * k, 4 * k + 4).float()[:, None].expand(4, 256)

    def span(t):
        return (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())

    # Held: every batch keeps its own slot; none is overwritten.
    dl = st.DataLoader(Big(), batch_size=4, pin_memory=True)
    held = list(dl)
    spans = sorted(span(b) for b in held)
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1)), "slots overlap"
    for k, b in enumerate(held):
        assert torch.equal(b, expect(k))
    assert dl.staging_stats()["slots"] == 10
    # Released: slots come back and are reused, the ring stays at its depth.
    dl2 = st.DataLoader(Big(), batch_size=4, pin_memory=True)
    seen = []
    for k, b in enumerate(dl2):
        assert torch.equal(b, expect(k))
        seen.append(b.data_ptr())
        del b
    assert dl2.staging_stats()["slots"] <= 4
    assert len(set(seen)) < len(seen), "no slot was reused"
    # One held batch keeps its slot while later ones cycle through the others.
    dl3 = st.DataLoader(Big(), batch_size=4, pin_memory=True)
    it = iter(dl3)
    first = next(it)
    for b in it:
        assert span(b)[0] >= span(first)[1] or span(b)[1] <= span(first)[0]
    assert torch.equal(first, expect(0))


@pytest.mark.parametrize("mode", ["pin", "device"])
def test_holding_more_batches_than_the_ring_takes_torchs_way(host_pinning, mode):
    # list(loader) over 70 batches: the ring stops at 64 held slots; the
    # rest are handed out the way torch's loader would, not as an error.
    data = torch.arange(70 * 3.).reshape(70, 3)
    kw = {"pin_memory": True} if mode == "pin" else {"device": "host"}
    dl = st.DataLoader(data, batch_size=1, **kw)
    got = list(dl)
    assert len(got) == 70 and all(torch.equal(g[0], data[k]) for k, g in enumerate(got))
    stats = dl.staging_stats()
    assert stats["slots"] == 64 and stats["fallback_batches"] == 6 and stats["batches"] == 64


def test_device_argument_errors():
    with pytest.raises(ValueError, match="device: expected"):
        st.DataLoader(Nested(), device="tpu")
    with pytest.raises(ValueError, match="device: expected"):
        st.DataLoader(Nested(), device="cpu")
    with pytest.raises(ValueError, match="kind: expected"):
        _sluice.Stager("tpu")
    with pytest.raises(ValueError, match="depth"):
        _sluice.Stager("host", depth=1)
    s = _sluice.Stager("host")
    with pytest.raises(TypeError, match="Stager.stage"):
        s.stage([object()])
    with pytest.raises(TypeError, match="Stager.stage"):
        s.stage(5)
    assert s.stage([]) == []


def test_stager_keeps_dtypes_and_shapes():
    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([1, 2], dtype=np.int64),
              np.zeros((0, 3), dtype=np.uint8), np.array(7, dtype=np.int16),
              np.array([True, False])]
    for to_device in (False, True):
        s = _sluice.Stager("host", 0, to_device=to_device)
        outs = s.stage(arrays)
        for a, o in zip(arrays, outs):
            got = np.asarray(o)
            assert got.dtype == a.dtype and got.shape == a.shape
            np.testing.assert_array_equal(got, a)
            assert o.__dlpack_device__() == (1, 0)
            # 256-byte offsets in the slot (the host backend's slots are
            # 64-byte aligned, cudaHostAlloc's page-aligned)
            assert (o.data_ptr - outs[0].data_ptr) % 256 == 0 and o.data_ptr % 64 == 0


def test_no_gpu_pin_memory_stays_torchs():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: this checks the no-GPU behaviour")
    dl = st.DataLoader(Nested(), batch_size=4, pin_memory=True)
    next(iter(dl))
    # torch's loader pins nothing without CUDA; neither does this one
    assert dl.pin_memory_path is None and dl.staging_stats() is None


# ---------------------------------------------------------------------------
# The CUDA backend over the stand-in runtime (subprocesses: the runtime is
# loaded once per process).
# ---------------------------------------------------------------------------
def fake_cudart():
    build = os.path.dirname(os.path.dirname(os.path.abspath(sluice.__file__)))
    for d in (build, os.path.dirname(os.environ.get("SLUICE_LIB", "") or build),
              os.path.join(REPO, "build")):
        p = os.path.join(d, "libsluice_fake_cudart.so")
        if os.path.exists(p):
            return p
    pytest.skip("libsluice_fake_cudart.so not built (the test build makes it)")


PRELUDE = textwrap.dedent("""
    import ctypes, gc, os, sys
    import numpy as np, torch
    import sluice, sluice.torch as st
    from sluice import _torch_staging as staging
    from sluice import _sluice
    lib = ctypes.CDLL(os.environ["SLUICE_CUDART"]) if os.path.exists(
        os.environ["SLUICE_CUDART"]) else None
    if lib is not None:
        lib.fake_cuda_live.restype = ctypes.c_long
        lib.fake_cuda_live.argtypes = [ctypes.c_char_p]
        lib.fake_cuda_misuse.restype = ctypes.c_long
        lib.fake_cuda_misuse.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    def live():
        return {k: lib.fake_cuda_live(k.encode()) for k in ("host", "device", "stream", "event")}
    def misuse():
        last = ctypes.c_char_p()
        return lib.fake_cuda_misuse(ctypes.byref(last))
    NONE = {"host": 0, "device": 0, "stream": 0, "event": 0}
    def settled(want):
        # thread workers let go of the loader's stager when they exit, which
        # the loader waits for only briefly: give them up to 5 s
        import time
        for _ in range(100):
            gc.collect()
            if all(live()[k] == v for k, v in want.items()):
                return True
            time.sleep(0.05)
        return False
""")


def run_fake(body, extra_env=None):
    env = dict(os.environ, SLUICE_CUDART=fake_cudart(), PYTHONPATH=os.path.dirname(
        os.path.dirname(os.path.abspath(sluice.__file__))))
    env.update(extra_env or {})
    r = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_fake_cuda_pin_memory_loader_and_del_mid_epoch():
    out = run_fake("""
        from torch.utils.data import TensorDataset, DataLoader as TL
        staging.pin_target = lambda dev: ("cuda", 0)
        data = TensorDataset(torch.arange(64.).reshape(32, 2), torch.arange(32))
        ref = list(TL(data, batch_size=4))
        for nw, wt in ((0, "thread"), (2, "thread"), (2, "process")):
            dl = st.DataLoader(data, batch_size=4, pin_memory=True, num_workers=nw,
                               worker_type=wt)
            got = list(dl)
            assert dl.pin_memory_path == "sluice cuda:0 pinned", dl.pin_memory_path
            assert len(got) == len(ref)
            for a, b in zip(ref, got):
                assert isinstance(b, list) and all(torch.equal(x, y) for x, y in zip(a, b))
            assert live()["host"] > 0
            del dl, got, a, b
            assert settled(NONE), live()
        # del mid-epoch, a batch still held: its slot outlives the loader
        dl = st.DataLoader(data, batch_size=4, pin_memory=True, num_workers=2,
                           worker_type="thread")
        it = iter(dl)
        keep = next(it)
        next(it)
        del it, dl
        assert settled({"host": 1}) and torch.equal(keep[0], ref[0][0]), live()
        del keep
        assert settled(NONE), live()
        # a pinned allocation failing mid-epoch: that next() raises, naming
        # the call; the epoch goes on with the following batch
        lib.fake_cuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_long, ctypes.c_int, ctypes.c_int]
        dl = st.DataLoader(data, batch_size=4, pin_memory=True)
        it = iter(dl)
        held = [next(it), next(it)]
        lib.fake_cuda_fail(b"cudaHostAlloc", 1, 2, 0)
        try:
            next(it)
            raise SystemExit("no error")
        except sluice.IOFailure as e:
            assert "cudaHostAlloc: out of memory" in str(e), e
        assert dl.state_dict()["batch"] == 2
        rest = list(it)
        assert len(rest) == len(ref) - 3
        assert all(torch.equal(a[0], b[0]) for a, b in zip(ref[3:], rest))
        del it, dl, held, rest
        gc.collect()
        assert live() == {"host": 0, "device": 0, "stream": 0, "event": 0}, live()
        # staged by a thread worker: the error names the worker and the call
        lib.fake_cuda_fail(b"cudaHostAlloc", 1, 2, 1)
        dl = st.DataLoader(data, batch_size=4, pin_memory=True, num_workers=2,
                           worker_type="thread")
        try:
            next(iter(dl))
            raise SystemExit("no error")
        except sluice.IOFailure as e:
            assert "thread worker" in str(e) and "cudaHostAlloc: out of memory" in str(e), e
        lib.fake_cuda_fail(b"cudaHostAlloc", 0, 0, 0)
        del dl
        assert settled(NONE), live()
        assert misuse() == 0
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_fake_cuda_stager_to_device_and_errors():
    out = run_fake("""
        s = _sluice.Stager("cuda", 0, to_device=True, depth=2)
        a = np.arange(100, dtype=np.float32)
        b = np.arange(7, dtype=np.int8)
        outs = s.stage([a, b])
        assert [o.__dlpack_device__() for o in outs] == [(2, 0), (2, 0)]
        # the stand-in's device memory is host memory: read it back
        assert ctypes.string_at(outs[0].data_ptr, a.nbytes) == a.tobytes()
        assert ctypes.string_at(outs[1].data_ptr, b.nbytes) == b.tobytes()
        assert s.stats()["h2d_bytes"] == a.nbytes + b.nbytes
        # a failing copy: a clean error naming the call; the next batch works
        lib.fake_cuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_long, ctypes.c_int, ctypes.c_int]
        lib.fake_cuda_fail(b"cudaMemcpyAsync", 1, 719, 0)
        try:
            s.stage([a])
            raise SystemExit("no error")
        except sluice.IOFailure as e:
            assert "cudaMemcpyAsync" in str(e), e
        again = s.stage([a])
        assert ctypes.string_at(again[0].data_ptr, a.nbytes) == a.tobytes()
        # a failing pinned allocation at open of a slot
        lib.fake_cuda_fail(b"cudaHostAlloc", 1, 2, 0)
        s2 = _sluice.Stager("cuda", 0, to_device=False)
        try:
            s2.stage([a])
            raise SystemExit("no error")
        except sluice.IOFailure as e:
            assert "cudaHostAlloc" in str(e), e
        p = s2.stage([a])[0]
        assert bytes(memoryview(np.asarray(p)).cast("B")) == a.tobytes()
        del outs, again, p, s, s2
        gc.collect()
        assert live() == {"host": 0, "device": 0, "stream": 0, "event": 0}, live()
        assert misuse() == 0
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_fake_cuda_without_runtime_falls_back_to_torch_pinning(tmp_path):
    out = run_fake("""
        staging.pin_target = lambda dev: ("cuda", 0)
        torch.Tensor.pin_memory = lambda self, device=None: self.clone()
        dl = st.DataLoader(torch.arange(8.), batch_size=4, pin_memory=True)
        assert [b.tolist() for b in dl] == [[0., 1., 2., 3.], [4., 5., 6., 7.]]
        assert dl.pin_memory_path.startswith("torch ("), dl.pin_memory_path
        assert "not-there.so" in dl.pin_memory_path
        try:
            st.DataLoader(torch.arange(8.), batch_size=4, device="cuda").__iter__()
            raise SystemExit("no error")
        except sluice.UnsupportedError as e:
            assert "not-there.so" in str(e)
        print("ok")
    """, {"SLUICE_CUDART": str(tmp_path / "not-there.so")})
    assert out.strip().endswith("ok")


# ---------------------------------------------------------------------------
# On a GPU.
# ---------------------------------------------------------------------------
def gpu_reason():
    if not torch.cuda.is_available():
        return "no GPU here (torch.cuda.is_available() is False)"
    why = _sluice.device_available("cuda", 0)
    return f"sluice cannot open CUDA: {why}" if why else None


@pytest.mark.skipif(gpu_reason() is not None, reason=str(gpu_reason()))
def test_gpu_pin_memory_and_device_equal_torch():
    ref = list(TorchLoader(Nested(), batch_size=4, pin_memory=True))
    dl = st.DataLoader(Nested(), batch_size=4, pin_memory=True, num_workers=2,
                       worker_type="thread")
    got = list(dl)
    assert dl.pin_memory_path.startswith("sluice cuda:")
    for a, b in zip(ref, got):
        same(a, b)
        assert all(t.is_pinned() for t in leaves(b)), "sluice-pinned memory not seen as pinned"
    dev = st.DataLoader(Nested(), batch_size=4, device="cuda", num_workers=2,
                        worker_type="thread")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        cuda_batches = list(dev)
        torch.cuda.synchronize()
    for a, b in zip(torch_batches(False), cuda_batches):
        for x, y in zip(leaves(a), leaves(b)):
            assert y.is_cuda and torch.equal(x, y.cpu())
    del cuda_batches
    gc.collect()
