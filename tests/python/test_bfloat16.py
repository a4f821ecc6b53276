"""bfloat16 outputs: normalize and cast against torch's own conversion, bit
for bit; the numpy path refuses it with a message; .slr columns refuse it.

Reference: torchvision ToTensor + Normalize in float32, then
Tensor.to(torch.bfloat16) (round to nearest, ties to even). Tolerance: none.
"""
import numpy as np
import pytest

import sluice

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def bits(t):
    return t.contiguous().view(torch.int16)


@pytest.mark.parametrize("layout", ["chw", "hwc"])
def test_normalize_bfloat16_equals_torch(layout):
    rng = np.random.default_rng(3)
    imgs = rng.integers(0, 256, (6, 13, 7, 3), dtype=np.uint8)
    imgs[0] = np.arange(13 * 7 * 3).reshape(13, 7, 3) % 256  # every byte value
    ds = (sluice.from_arrays({"image": imgs})
          .normalize("image", mean=MEAN, std=STD, layout=layout, dtype="bfloat16")
          .batch(6))
    (b,) = list(ds.torch())
    got = b["image"]
    assert got.dtype == torch.bfloat16
    for i in range(len(imgs)):
        want = T.Normalize(MEAN, STD)(T.ToTensor()(imgs[i]))  # float32 CHW
        if layout == "hwc":
            want = want.permute(1, 2, 0)
        assert torch.equal(bits(got[i]), bits(want.to(torch.bfloat16)))


def test_cast_float32_to_bfloat16_rounds_like_torch():
    rng = np.random.default_rng(11)
    raw = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
    # ties, near-ties, the largest finite values, zeros, denormals, inf
    special = np.array([0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, 0x7f7fffff,
                        0x7f7f8000, 0x7f7f7fff, 0x00000000, 0x80000000, 0x00000001,
                        0x00008000, 0x00018000, 0x7f800000, 0xff800000, 0xbf808000],
                       dtype=np.uint32)
    x = np.concatenate([special, raw]).view(np.float32)
    x = x[~np.isnan(x)].reshape(-1, 1)
    ds = sluice.from_arrays({"x": x}).cast("x", "bfloat16").batch(len(x))
    (b,) = list(ds.torch())
    assert b["x"].dtype == torch.bfloat16
    want = torch.from_numpy(x).to(torch.bfloat16)
    assert torch.equal(bits(b["x"]), bits(want))


def test_cast_nan_stays_nan():
    x = np.array([[np.nan], [-np.nan], [1.0]], dtype=np.float32)
    x[1] = np.array([0xffc00001], dtype=np.uint32).view(np.float32)[0]
    (b,) = list(sluice.from_arrays({"x": x}).cast("x", "bfloat16").batch(3).torch())
    got = b["x"].float()
    assert torch.isnan(got[0]) and torch.isnan(got[1]) and got[2].item() == 1.0


def test_numpy_refuses_bfloat16_with_a_way_out():
    imgs = np.zeros((2, 4, 4, 3), dtype=np.uint8)
    ds = sluice.from_arrays({"image": imgs}).normalize("image", dtype="bfloat16").batch(2)
    with pytest.raises(BufferError, match="torch.from_dlpack"):
        for _ in ds.numpy():
            pass


def test_unknown_dtype_name_is_refused():
    with pytest.raises(ValueError, match="bfloat16"):
        sluice.from_arrays({"x": np.zeros((2, 1), np.float32)}).normalize("x", dtype="bf16")


@pytest.mark.parametrize("layout", ["chw", "hwc"])
def test_normalize_on_device_bfloat16_equals_cpu(layout):
    # the host backend runs the device kernel's host twin: same bits as the CPU op
    rng = np.random.default_rng(5)
    imgs = rng.integers(0, 256, (10, 6, 5, 3), dtype=np.uint8)

    def base():
        return (sluice.from_arrays({"image": imgs})
                .normalize("image", mean=MEAN, std=STD, layout=layout, dtype="bfloat16")
                .batch(4))
    cpu = list(base().torch())
    dev = list(base().device("host", normalize_on_device=True).torch())
    assert len(cpu) == len(dev) == 3
    for x, y in zip(cpu, dev):
        assert y["image"].dtype == torch.bfloat16
        assert torch.equal(bits(x["image"]), bits(y["image"]))
