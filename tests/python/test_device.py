"""The device path from Python: batches staged and copied by the device ring.

On a machine without a GPU the host backend (the same ring, events and
normalize, run by threads) is checked against the CPU pipeline; the CUDA
cases skip, saying so.
"""
import os

import numpy as np
import pytest

import sluice
from sluice import _sluice

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def images(n=10, h=6, w=5):
    rng = np.random.default_rng(7)
    return {"image": rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8),
            "label": np.arange(n, dtype=np.int64)}


def base(layout="chw", dtype="float32"):
    return (sluice.from_arrays(images())
            .normalize("image", mean=MEAN, std=STD, layout=layout, dtype=dtype)
            .batch(4))


def batches(ds):
    return [{k: np.array(v) for k, v in b.items()} for b in ds.numpy()]


def assert_same(a, b):
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
            np.testing.assert_array_equal(x[k], y[k])


def test_host_device_values_equal_cpu():
    assert_same(batches(base()), batches(base().device("host")))


@pytest.mark.parametrize("layout,dtype", [("chw", "float32"), ("hwc", "float32"),
                                          ("chw", "float16")])
def test_normalize_on_device_equals_cpu(layout, dtype):
    # tolerance: none; the device math is the CPU op's float32 expression
    cpu = batches(base(layout, dtype))
    dev = batches(base(layout, dtype).device("host", normalize_on_device=True))
    assert_same(cpu, dev)


def test_stats_report_h2d_and_wait():
    ds = base().device("host", normalize_on_device=True)
    n = sum(1 for _ in ds.numpy())
    st = ds.stats()
    # uint8 crossed: 4 images of 6x5x3 = 360 bytes (padded to 512) + labels (256)
    # (the last batch has 2 samples: 180 + 16 bytes, each padded to 256)
    assert st["h2d_bytes"] == 768 * (n - 1) + 256 + 256
    assert st["h2d_bytes_per_s"] > 0
    assert st["device_wait_s"] >= 0
    # the stages wrote the batches in the backend's pinned memory: copied
    # from there, nothing staged on the consumer thread
    assert st["h2d_staged_bytes"] == 0


def test_torch_from_host_device():
    torch = pytest.importorskip("torch")
    cpu = [b for b in base().torch()]
    dev = [b for b in base().device("host").torch()]
    assert len(cpu) == len(dev)
    for x, y in zip(cpu, dev):
        for k in x:
            assert torch.equal(x[k], y[k])


def test_spec_errors():
    with pytest.raises(ValueError, match="kind"):
        base().device("tpu")
    ds = sluice.from_arrays(images()).batch(2).device("host", normalize_on_device=True)
    with pytest.raises(sluice.Error, match="no normalize op"):
        next(iter(ds.numpy()))


def test_cuda_unavailable_is_explained():
    why = _sluice.device_available("cuda", 0)
    if why is None:
        pytest.skip("a CUDA device is present: the unavailable case is not checked here")
    assert why.startswith('device "cuda": ')
    ds = base().device("cuda")
    with pytest.raises(sluice.Error, match='device "cuda"'):
        next(iter(ds.numpy()))
    torch = pytest.importorskip("torch")
    with pytest.warns(RuntimeWarning, match="device path not used"):
        loader = base().torch(device="cuda")
    if not torch.cuda.is_available():
        with pytest.raises((RuntimeError, AssertionError)):
            next(iter(loader))


def test_cuda_batches_match_cpu():
    why = _sluice.device_available("cuda", 0)
    if why is not None:
        pytest.skip(f"no CUDA device: {why}")
    torch = pytest.importorskip("torch")
    cpu = [b for b in base().torch()]
    for normalize in (False, True):
        dev = [b for b in base().device("cuda", normalize_on_device=normalize).torch()]
        for x, y in zip(cpu, dev):
            for k in x:
                assert y[k].is_cuda
                assert torch.equal(x[k], y[k].cpu())


def test_decode_on_gpu_is_refused_with_the_reason(tmp_path):
    # the builder takes the placement (the engine checks its value at once);
    # the pipeline refuses "gpu" when it starts, naming what is missing
    with pytest.raises(ValueError, match=r'ops\[0\]\.device: must be "cpu" or "gpu"'):
        sluice.from_arrays(images()).decode("image", device="npu")
    ds = sluice.from_arrays(images()).decode("image", device="gpu")
    assert ds.spec["ops"][0]["device"] == "gpu"
    # A chain the GPU decoder takes (JPEG bytes, random_resized_crop after
    # decode, a CUDA device): refused when it starts, naming what is missing.
    # Without nvJPEG (no nvjpeg.h at build time, or no libnvjpeg found) that is
    # nvJPEG; where a libnvjpeg is found — torchvision >= 0.2x carries one and
    # importing it loads it into the process — it is the CUDA device.
    from PIL import Image
    (tmp_path / "a").mkdir()
    for i in range(4):
        Image.fromarray(images()["image"][i]).save(tmp_path / "a" / f"{i}.jpg", quality=90)
    gpu = (sluice.image_folder(str(tmp_path))
           .decode("image", device="gpu").random_resized_crop("image", 4).device("cuda")
           .batch(2))
    if _sluice.device_available("cuda", 0) is not None:
        with pytest.raises(sluice.Error, match=r'ops\[0\]\.device "gpu": decoding on the GPU '
                                               r'needs nvJPEG: |device "cuda": no CUDA device'):
            next(iter(gpu.numpy()))
    # "cpu" is the default and stays out of the spec
    assert "device" not in sluice.from_arrays(images()).decode("image", device="cpu").spec["ops"][0]


def _fake_libs():
    """The stand-in CUDA runtime, nvJPEG and kernels of the C build
    (tests/device/fake/), beside libsluice, or None."""
    lib = os.environ.get("SLUICE_LIB") or os.path.join(REPO, "build", "libsluice.so")
    d = os.path.dirname(lib)
    libs = {"SLUICE_CUDART": "libsluice_fake_cudart.so",
            "SLUICE_NVJPEG": "libsluice_fake_nvjpeg.so",
            "SLUICE_CUDA_KERNELS": "libsluice_fake_kernels.so"}
    paths = {k: os.path.join(d, v) for k, v in libs.items()}
    return paths if all(os.path.exists(p) for p in paths.values()) else None


_GPU_DECODE_SCRIPT = r"""
import json, os, sys
import numpy as np
from PIL import Image
import sluice
root = sys.argv[1]
rng = np.random.default_rng(3)
for i in range(10):
    os.makedirs(os.path.join(root, "ab"[i % 2]), exist_ok=True)
    im = Image.fromarray(rng.integers(0, 256, (40 + 7 * i, 50 + 5 * i, 3), dtype=np.uint8))
    if i == 3:
        im = im.convert("CMYK")  # nvJPEG refuses it: the CPU decodes it
    im.save(os.path.join(root, "ab"[i % 2], f"{i}.jpg"), quality=90)
ds = (sluice.image_folder(root).select("image", "label").decode("image", device="gpu")
      .random_resized_crop("image", 32).flip("image")
      .normalize("image", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
      .batch(4).device("cuda"))
engine = ds._start()[0]
out = []
while True:
    b = engine.next()
    if b is None:
        break
    out.append({k: [list(v.__dlpack_device__()), list(v.shape)] for k, v in b.items()})
print(json.dumps({"batches": out, "stats": ds.stats()}))
"""


_TEXT_SCRIPT = r"""
import json, os, sys
import numpy as np
from PIL import Image
import sluice
root, same = sys.argv[1], sys.argv[2] == "same"
rng = np.random.default_rng(5)
for i in range(10):
    os.makedirs(os.path.join(root, "ab"[i % 2]), exist_ok=True)
    im = Image.fromarray(rng.integers(0, 256, (40 + 3 * i, 36 + 2 * i, 3), dtype=np.uint8))
    # file names of one length (a stacked text column) or of several (ragged)
    im.save(os.path.join(root, "ab"[i % 2], (f"{i:02d}" if same else "x" * (i + 1)) + ".jpg"))
out = {}
for where in ("cpu", "gpu"):
    ds = (sluice.image_folder(root).select("image", "label", "path").decode("image", device=where)
          .random_resized_crop("image", 24).batch(4).device("cuda"))
    try:
        engine = ds._start()[0]
        got = []
        while True:
            b = engine.next()
            if b is None:
                break
            got.append({k: v if isinstance(v, list) else list(v.__dlpack_device__())
                        for k, v in b.items()})
        out[where] = got
    except Exception as e:  # the message is the result
        out[where] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


_EXIT_SCRIPT = r"""
import sys
import numpy as np
import sluice
mode = sys.argv[1]
x = np.arange(64 * 16 * 16 * 3, dtype=np.uint8).reshape(64, 16, 16, 3)
ds = sluice.from_arrays({"image": x, "label": np.arange(64)}).batch(8).prefetch(2).device("cuda")
engine = ds._start()[0]
HELD = [engine.next(), engine.next()]  # module globals: alive until the interpreter ends
if mode == "closed":
    while engine.next() is not None:
        pass
    HELD.clear()
    ds.close()
print("batches taken", flush=True)
"""


@pytest.mark.parametrize("mode", ["closed", "left_open_with_batches_held"])
def test_exit_makes_no_cuda_call_after_the_runtime_unloads(tmp_path, mode):
    # libcudart tears itself down in an atexit handler; anything sluice frees
    # after that (a pipeline, its ring, batches held in globals) would call a
    # runtime that is gone. Over the stand-in runtime, which unloads at exit
    # the same way and reports any later call on stderr: a program that ends
    # with a device pipeline closed, or left open mid-epoch with batches held
    # in globals, exits 0 and makes no such call.
    import subprocess
    import sys
    fakes = _fake_libs()
    if fakes is None:
        pytest.skip("the stand-in libraries are not built (nvjpeg.h missing: "
                    "scripts/nvjpeg_fetch.sh)")
    env = dict(os.environ, **fakes, SLUICE_FAKE_CUDA_UNLOAD_AT_EXIT="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _EXIT_SCRIPT, mode], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "batches taken" in r.stdout
    assert "after the runtime unloaded" not in r.stderr, r.stderr


@pytest.mark.parametrize("names", ["same", "ragged"])
def test_text_columns_stay_on_the_host(tmp_path, names):
    # A text column (the file's path) beside the images of a CUDA batch stays
    # in host memory and comes out as str, as torch's pin_memory and .to()
    # leave strings alone: with CPU decode (the upload) and with GPU decode
    # (its batches), over the stand-in CUDA runtime, nvJPEG and kernels. Paths
    # of several lengths cannot ride in a GPU-decoded batch: refused, naming
    # .select().
    import json
    import subprocess
    import sys
    fakes = _fake_libs()
    if fakes is None:
        pytest.skip("the stand-in libraries are not built (nvjpeg.h missing: "
                    "scripts/nvjpeg_fetch.sh)")
    env = dict(os.environ, **fakes)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-c", _TEXT_SCRIPT, str(tmp_path / "imgs"), names],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    for where in ("cpu", "gpu"):
        got = res[where]
        if where == "gpu" and names == "ragged":
            assert isinstance(got, str) and "text column 'path'" in got and ".select()" in got, got
            continue
        assert isinstance(got, list), got
        assert [len(b["path"]) for b in got] == [4, 4, 2]
        paths = [p for b in got for p in b["path"]]
        assert all(isinstance(p, str) and p.endswith(".jpg") for p in paths)
        assert sorted(paths) == sorted(set(paths)) and len(paths) == 10
        assert all(b["image"] == [2, 0] and b["label"] == [2, 0] for b in got)


def test_decode_on_gpu_runs_over_the_stand_ins(tmp_path):
    # The whole path from Python (decode(device="gpu") + .device("cuda")) over
    # the stand-in CUDA runtime, nvJPEG and kernels of the C tests, in a child
    # process (they are chosen by environment before the runtime loads). The
    # values are checked against the CPU pipeline in the C tests
    # (gpu_pipe_fake__*); here: the batches are CUDA tensors of the CPU
    # chain's shape and dtype, and the stats count the GPU and CPU decodes.
    import json
    import subprocess
    import sys
    fakes = _fake_libs()
    if fakes is None:
        pytest.skip("the stand-in libraries are not built (nvjpeg.h missing: "
                    "scripts/nvjpeg_fetch.sh)")
    env = dict(os.environ, **fakes)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-c", _GPU_DECODE_SCRIPT, str(tmp_path / "imgs")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    shapes = [b["image"][1] for b in res["batches"]]
    assert shapes == [[4, 3, 32, 32], [4, 3, 32, 32], [2, 3, 32, 32]]
    assert all(b["image"][0] == [2, 0] and b["label"][0] == [2, 0] for b in res["batches"])
    assert res["stats"]["gpu_decoded"] == 9
    assert res["stats"]["gpu_fallbacks"] == 1
