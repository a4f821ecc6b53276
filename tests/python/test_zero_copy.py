"""Batches reach numpy and torch without a copy; their memory lives as long
as any array using it and then returns to the engine's pool."""
import gc
import os

import numpy as np
import pytest

import sluice
from conftest import REPO, image_of


def engine(path, batch=10):
    ds = sluice.records(path).batch(batch)
    return ds, ds._get_engine()


def test_numpy_shares_the_engines_memory(small_slr):
    ds, eng = engine(small_slr)
    eng.set_epoch(0)
    tensors, ptrs = eng._next_raw()
    arr = np.asarray(tensors["image"])
    assert arr.__array_interface__["data"][0] == ptrs["image"]
    assert tensors["image"].data_ptr == ptrs["image"]
    assert np.asarray(tensors["label"]).__array_interface__["data"][0] == ptrs["label"]
    np.testing.assert_array_equal(arr[3], image_of(3))


def test_torch_shares_the_engines_memory(small_slr):
    torch = pytest.importorskip("torch")
    ds, eng = engine(small_slr)
    eng.set_epoch(0)
    tensors, ptrs = eng._next_raw()
    t = torch.from_dlpack(tensors["image"])
    assert t.data_ptr() == ptrs["image"]
    assert t.dtype == torch.uint8 and tuple(t.shape) == (10, 28, 28)
    assert torch.from_dlpack(tensors["label"]).data_ptr() == ptrs["label"]
    assert tensors["image"].__dlpack_device__() == (1, 0)


def test_arrays_outlive_the_pipeline(small_slr):
    torch = pytest.importorskip("torch")
    ds = sluice.records(small_slr).batch(10)
    it = iter(ds.numpy())
    a = next(it)["image"]
    tb = next(iter(ds.torch()))["image"]
    del it
    ds.close()
    del ds
    gc.collect()
    # Write and read the memory: it must still be ours.
    np.testing.assert_array_equal(a[7], image_of(7))
    assert torch.equal(tb[2], torch.from_numpy(image_of(2)))
    a[0] = 1
    tb[0] = 2
    assert a[0].sum() == 28 * 28 and tb[0].sum().item() == 2 * 28 * 28


def test_buffer_references_follow_the_exports(small_slr):
    torch = pytest.importorskip("torch")
    ds, eng = engine(small_slr)
    eng.set_epoch(0)
    tensors, _ = eng._next_raw()
    t = tensors["image"]
    base = t._buffer_refcount
    arr = np.asarray(t)          # numpy keeps the Tensor alive, no new reference
    cap = t.__dlpack__()
    assert t._buffer_refcount == base + 1
    del cap                      # an unconsumed capsule gives its reference back
    assert t._buffer_refcount == base
    tt = torch.from_dlpack(t)
    assert t._buffer_refcount == base + 1
    del tt
    gc.collect()
    assert t._buffer_refcount == base
    del arr


def test_memory_is_recycled_after_release(small_slr):
    ds = sluice.records(small_slr).batch(5)
    ds.set_epoch(0)
    eng = ds._get_engine()
    eng.set_epoch(0)
    seen = []
    while True:
        r = eng._next_raw()
        if r is None:
            break
        seen.append(r[1]["image"])
        del r  # the batch's arrays die here: the buffer goes back to the pool
    # 20 batches; released buffers are reused, so far fewer distinct addresses.
    assert len(seen) == 20
    assert len(set(seen)) < 20

    held = []
    eng.set_epoch(1)
    while True:
        r = eng._next_raw()
        if r is None:
            break
        held.append(r)
    # While every batch is held, no buffer can be handed out twice.
    assert len({p["image"] for _, p in held}) == 20
    for k, (t, _) in enumerate(held):
        assert np.asarray(t["label"]).shape == (5,)


def test_ragged_columns_are_lists(tmp_path):
    path = str(tmp_path / "rag.slr")
    with sluice.Writer(path, [("v", "array", "int32", (-1,))], fsync=False) as w:
        for i in range(6):
            w.append({"v": np.arange(i, dtype=np.int32)})
    (b,) = list(sluice.records(path).batch(6).numpy())
    assert isinstance(b["v"], list) and [len(x) for x in b["v"]] == list(range(6))
    np.testing.assert_array_equal(b["v"][4], np.arange(4))


def test_ragged_columns_in_torch(tmp_path):
    torch = pytest.importorskip("torch")
    path = str(tmp_path / "rag.slr")
    with sluice.Writer(path, [("v", "array", "float32", (-1,))], fsync=False) as w:
        for i in range(4):
            w.append({"v": np.full(i + 1, i, np.float32)})
    (b,) = list(sluice.records(path).batch(4).torch())
    assert [tuple(t.shape) for t in b["v"]] == [(1,), (2,), (3,), (4,)]
    assert torch.equal(b["v"][2], torch.full((3,), 2.0))


# ---- pinned host memory: exported as the torch in use takes it ------------

def test_dlpack_probe_decides_the_pinned_device_type():
    # torch 1.13's from_dlpack refuses kDLCUDAHost ("Unsupported device_type:
    # 3"); torch 2.x takes it as CPU memory. dlpack_for_torch() hands torch a
    # probe capsule of that type once and exports pinned memory as what it
    # took; a capsule torch refused is freed by its own destructor.
    torch = pytest.importorskip("torch")
    import gc
    from sluice import _sluice
    host = torch.utils.dlpack.from_dlpack(_sluice.dlpack_probe(1))
    assert host.device.type == "cpu" and host.tolist() == [1, 2, 3, 4]
    try:
        pinned = torch.utils.dlpack.from_dlpack(_sluice.dlpack_probe(3))
        takes = pinned.device.type == "cpu" and pinned.tolist() == [1, 2, 3, 4]
    except (RuntimeError, BufferError) as e:
        assert "device" in str(e).lower(), e
        takes = False
    gc.collect()
    if torch.__version__.startswith("1."):
        assert not takes, "torch 1.x was expected to refuse kDLCUDAHost"
    assert sluice.dlpack_for_torch(torch) == (3 if takes else 1)
    assert _sluice.dlpack_pinned_device() == (3 if takes else 1)
    with pytest.raises(ValueError, match="kDLCUDAHost"):
        _sluice.dlpack_pinned_device(2)
    with pytest.raises(ValueError, match="host device type"):
        _sluice.dlpack_probe(2)


_PINNED_SCRIPT = r"""
import numpy as np, torch, sluice
from sluice import _sluice
st = _sluice.Stager("cuda", 0, to_device=False, depth=2)
src = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
(t,) = st.stage([src])
before = t.__dlpack_device__()
choice = sluice.dlpack_for_torch(torch)
after = t.__dlpack_device__()
x = torch.from_dlpack(t)
assert x.device.type == "cpu" and torch.equal(x, torch.from_numpy(src)), x
assert np.array_equal(np.asarray(t), src)
print(before[0], after[0], choice)
"""


def test_pinned_tensor_goes_to_torch_as_it_takes_it():
    # A Stager slot over the stand-in CUDA runtime is pinned host memory
    # (device kDLCUDAHost inside sluice): before the probe it goes out as
    # kDLCPU, after it as the torch in use takes it, and torch reads the
    # same values either way.
    torch = pytest.importorskip("torch")
    import subprocess
    import sys
    cudart = None
    lib = os.environ.get("SLUICE_LIB") or os.path.join(REPO, "build", "libsluice.so")
    for d in (os.path.dirname(lib), os.path.join(REPO, "build")):
        p = os.path.join(d, "libsluice_fake_cudart.so")
        if os.path.exists(p):
            cudart = p
            break
    if cudart is None:
        pytest.skip("libsluice_fake_cudart.so not built (the test build makes it)")
    env = dict(os.environ, SLUICE_CUDART=cudart,
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(sluice.__file__))))
    r = subprocess.run([sys.executable, "-c", _PINNED_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    before, after, choice = map(int, r.stdout.split())
    assert before == 1 and after == choice
    if torch.__version__.startswith("1."):
        assert choice == 1
