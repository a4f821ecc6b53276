"""Image ops against their references: PIL (decode, resize, rotate), numpy,
and torchvision (ToTensor + Normalize, RandomResizedCrop, Resize, CenterCrop).

Each test states its tolerance. Images are generated here: photo-like
synthetic pictures (ops_ref_lib.natural_image) encoded by PIL in the
variants that matter (subsampling, progressive, gray, CMYK, PNG colour types
and depths), and edge shapes (1x1, odd sizes, 1x500).
Run: SLUICE_LIB=build/libsluice.so /usr/bin/python3 -m pytest tests/python/test_ops_reference.py
"""
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ops_ref_lib as R  # noqa: E402

PIL = pytest.importorskip("PIL.Image")
from PIL import Image  # noqa: E402

_ops = R.load()
pytestmark = pytest.mark.skipif(_ops is None, reason="libsluice with image ops not built at %s (set SLUICE_LIB)" % R.LIB_PATH)

SHAPES = [(1, 1), (17, 33), (500, 1), (1, 500), (97, 61), (640, 427), (333, 500)]


@pytest.fixture(scope="module")
def ops():
    return _ops


def pil_rgb(data):
    import io
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def pil_l(data):
    import io
    return np.asarray(Image.open(io.BytesIO(data)).convert("L"))


# ---- decode: exact (0 levels) — same libjpeg-turbo, same ISLOW DCT and fancy
# upsampling as PIL; PNG is lossless so any difference would be a bug.

@pytest.mark.parametrize("w,h", SHAPES)
@pytest.mark.parametrize("variant", ["420", "444", "422", "progressive", "gray", "cmyk"])
def test_decode_jpeg_equals_pil(ops, w, h, variant):
    img = Image.fromarray(R.natural_image(w, h, w * 7 + h))
    kw = {"quality": 90}
    if variant == "420":
        kw["subsampling"] = 2
    elif variant == "444":
        kw["subsampling"] = 0
    elif variant == "422":
        kw["subsampling"] = 1
    elif variant == "progressive":
        kw["progressive"] = True
    elif variant == "gray":
        img = img.convert("L")
    elif variant == "cmyk":
        img = img.convert("CMYK")
    data = R.jpeg_bytes(img, **kw)
    np.testing.assert_array_equal(ops.decode(data, R.RGB), pil_rgb(data))
    np.testing.assert_array_equal(ops.decode(data, R.GRAY)[:, :, 0], pil_l(data))


@pytest.mark.parametrize("mode", ["P", "P+trns", "L", "LA", "RGB", "RGBA", "1", "RGB16", "L4"])
def test_decode_png_equals_pil(ops, mode):
    base = R.natural_image(37, 23, 5)
    if mode in ("P", "P+trns"):
        img = Image.fromarray(base).convert("P", palette=Image.ADAPTIVE, colors=50)
        kw = {"transparency": 3} if mode == "P+trns" else {}
        data = R.png_bytes(img, **kw)
    elif mode == "RGB16":
        # 16-bit RGB is written by hand (PIL cannot save it): PIL keeps the high byte
        import struct
        import zlib
        a16 = base.astype(np.uint16) * 257 + np.arange(base.size, dtype=np.uint16).reshape(base.shape) % 200
        raw = b"".join(b"\0" + a16[y].astype(">u2").tobytes() for y in range(a16.shape[0]))
        def chunk(t, d):
            return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
        data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 37, 23, 16, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    elif mode == "L4":
        img = Image.fromarray(base).convert("L")
        data = R.png_bytes(img, bits=4)
    else:
        img = Image.fromarray(base).convert("RGBA" if mode == "RGBA" else mode if mode != "LA" else "LA")
        if mode in ("RGBA", "LA"):
            a = np.asarray(img).copy()
            a[..., -1] = np.arange(a.shape[0] * a.shape[1]).reshape(a.shape[:2]) % 256
            img = Image.fromarray(a, mode)
        data = R.png_bytes(img)
    np.testing.assert_array_equal(ops.decode(data, R.RGB), pil_rgb(data))
    np.testing.assert_array_equal(ops.decode(data, R.GRAY)[:, :, 0], pil_l(data))


def test_decode_png_gray16_high_byte(ops):
    """Deliberate departure: PIL opens 16-bit gray as mode "I" and its
    convert("L") clips values above 255 (nearly everything becomes white);
    sluice keeps the high byte, as PIL itself does for 16-bit RGB."""
    a16 = (np.arange(15 * 9, dtype=np.uint32).reshape(9, 15) * 480).astype(np.uint16)
    img = Image.fromarray(a16.astype(np.int32), "I").convert("I;16")
    data = R.png_bytes(img)
    got = ops.decode(data, R.GRAY)[:, :, 0]
    np.testing.assert_array_equal(got, (a16 >> 8).astype(np.uint8))


# ---- resize vs PIL Image.resize: exact (0 levels), the same fixed-point
# algorithm; the stated tolerance is mean <= 1, max <= a few.

RESIZE_CASES = [((640, 427), (224, 224)), ((427, 640), (256, 384)), ((100, 80), (300, 200)),
                ((33, 17), (7, 5)), ((1, 1), (5, 3)), ((1, 500), (1, 50)), ((500, 1), (50, 3)),
                ((300, 300), (299, 301)), ((1000, 700), (37, 53))]


@pytest.mark.parametrize("src,dst", RESIZE_CASES)
@pytest.mark.parametrize("interp", ["bilinear", "box", "nearest"])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_resize_equals_pil(ops, src, dst, interp, mode):
    (sw, sh), (dw, dh) = src, dst
    img = Image.fromarray(R.natural_image(sw, sh, sw + sh)).convert(mode)
    flt = {"bilinear": Image.BILINEAR, "box": Image.BOX, "nearest": Image.NEAREST}[interp]
    ours_i = {"bilinear": R.BILINEAR, "box": R.AREA, "nearest": R.NEAREST}[interp]
    want = np.asarray(R.pil_resize(img, (dw, dh), flt))
    got = ops.resize(np.asarray(img), dh, dw, ours_i)
    if mode == "L":
        got = got[:, :, 0]
    diff = np.abs(got.astype(int) - want.astype(int))
    assert diff.max() == 0, "mean %.4f max %d" % (diff.mean(), diff.max())


@pytest.mark.parametrize("box", [(10, 20, 300, 250), (0.5, 3.25, 100.75, 99.5), (0, 0, 640, 427)])
def test_resize_box_equals_pil(ops, box):
    img = Image.fromarray(R.natural_image(640, 427, 3))
    want = np.asarray(R.pil_resize(img, (120, 90), Image.BILINEAR, box=box))
    got = ops.resize(np.asarray(img), 90, 120, R.BILINEAR, box=box)
    np.testing.assert_array_equal(got, want)


# ---- Pillow's own resize against its passes taken horizontal first (the
# reference of the exact tests): equal on Pillow < 13; on Pillow >= 13, which
# takes the vertical pass first when that is cheaper (python-pillow/Pillow#9549),
# within 1 level (the 8-bit intermediate rounds differently). Stated
# tolerance: max 1 level. sluice equals the horizontal-first result always.

@pytest.mark.parametrize("seed", range(6))
def test_pil_resize_order(ops, seed):
    import PIL
    rng = np.random.default_rng(900 + seed)
    moved = 0
    for _ in range(20):
        w, h = int(rng.integers(8, 400)), int(rng.integers(8, 400))
        dw, dh = int(rng.integers(1, 2 * w + 1)), int(rng.integers(1, 2 * h + 1))
        img = Image.fromarray(R.natural_image(w, h, seed * 100 + w))
        own = np.asarray(img.resize((dw, dh), Image.BILINEAR)).astype(int)
        hv = np.asarray(R.pil_resize(img, (dw, dh), Image.BILINEAR)).astype(int)
        np.testing.assert_array_equal(ops.resize(np.asarray(img), dh, dw, R.BILINEAR), hv)
        diff = np.abs(own - hv)
        assert diff.max() <= 1, (w, h, dw, dh, diff.max())
        moved += int(diff.max())
    if int(PIL.__version__.split(".")[0]) < 13:
        assert moved == 0


# ---- rotate vs PIL rotate(angle, BILINEAR, fillcolor): tolerance 1 level at
# most, on at most 0.1% of pixels (float rounding of the sample position).

@pytest.mark.parametrize("angle", [0, 5, -7.5, 30, 90, 180, 237.3, -10])
@pytest.mark.parametrize("size", [(64, 48), (33, 33), (1, 7)])
def test_rotate_matches_pil(ops, angle, size):
    w, h = size
    img = Image.fromarray(R.natural_image(w, h, 11))
    want = np.asarray(img.rotate(angle, Image.BILINEAR, fillcolor=(17, 17, 17)))
    got = ops.rotate(np.asarray(img), angle, 17)
    diff = np.abs(got.astype(int) - want.astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() <= 0.001, \
        "mean %.4f max %d frac %.4f" % (diff.mean(), diff.max(), (diff > 0).mean())


# ---- normalize vs torchvision ToTensor + Normalize: float32, bit for bit

@pytest.mark.parametrize("size", [(224, 224), (13, 7), (1, 1)])
def test_normalize_matches_torchvision(ops, size):
    torch = pytest.importorskip("torch")
    T = pytest.importorskip("torchvision.transforms")
    w, h = size
    img = Image.fromarray(R.natural_image(w, h, 2))
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    want = T.Normalize(mean, std)(T.ToTensor()(img)).numpy()
    got = ops.normalize(np.asarray(img), mean, std, R.CHW, R.F32)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # bit for bit
    got16 = ops.normalize(np.asarray(img), mean, std, R.CHW, R.F16)
    np.testing.assert_array_equal(got16, torch.from_numpy(want).half().numpy())
    hwc = ops.normalize(np.asarray(img), mean, std, R.HWC, R.F32)
    assert np.abs(hwc - want.transpose(1, 2, 0)).max() <= 1e-6


# ---- RandomResizedCrop.get_params with the same draws: identical boxes

def _torchvision_box(height, width, scale, ratio, draws):
    """torchvision's own get_params, with torch's random draws replaced by
    ours: uniform_(a, b) gives a + u * (b - a) in float32, randint(lo, hi)
    gives lo + floor(u * (hi - lo))."""
    torch = pytest.importorskip("torch")
    T = pytest.importorskip("torchvision.transforms")
    it = iter(draws)
    state = {"k": 0}
    real_empty, real_randint = torch.empty, torch.randint

    class FakeTensor:
        def uniform_(self, a, b):
            u = torch.tensor(draws[state["k"]], dtype=torch.float32)
            state["k"] += 1
            return u * (torch.tensor(float(b), dtype=torch.float32) - torch.tensor(float(a), dtype=torch.float32)) \
                + torch.tensor(float(a), dtype=torch.float32)

    def fake_empty(*a, **k):
        if state["k"] % 4 == 2:  # a try that failed: skip its position draws
            state["k"] += 2
        return FakeTensor()

    def fake_randint(lo, hi, size=None):
        u = draws[state["k"]]
        state["k"] += 1
        return torch.tensor([lo + int(math.floor(u * (hi - lo)))])

    torch.empty, torch.randint = fake_empty, fake_randint
    try:
        img = Image.new("RGB", (width, height))
        return tuple(T.RandomResizedCrop.get_params(img, list(scale), list(ratio)))
    finally:
        torch.empty, torch.randint = real_empty, real_randint


@pytest.mark.parametrize("seed", range(40))
def test_rrc_box_equals_torchvision(ops, seed):
    rng = np.random.default_rng(seed)
    height, width = int(rng.integers(1, 700)), int(rng.integers(1, 700))
    if seed % 5 == 0:
        height, width = 1, 500  # never fits: the fallback
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    if seed % 7 == 3:
        scale = (0.9, 1.0)
    draws = [float(np.float32(v)) for v in rng.random(40)]
    want = _torchvision_box(height, width, scale, ratio, draws)
    got = ops.rrc_box_draws(height, width, scale, ratio, draws)
    assert got == want


# ---- Resize(int) + CenterCrop: the same shapes and offsets as torchvision,
# and exactly the same pixels when done with sluice's resize + crop.

@pytest.mark.parametrize("w,h", [(500, 375), (333, 500), (224, 224), (300, 227), (100, 90)])
def test_resize_center_crop_equals_torchvision(ops, w, h):
    T = pytest.importorskip("torchvision.transforms")
    img = Image.fromarray(R.natural_image(w, h, 4))
    want = np.asarray(T.CenterCrop(224)(T.Resize(256)(img)))
    oh, ow = ops.resize_shorter_shape(h, w, 256)
    assert (ow, oh) == T.Resize(256)(img).size
    r = ops.resize(np.asarray(img), oh, ow, R.BILINEAR)
    box = ops.center_crop_box(oh, ow, 224, 224)
    got = ops.crop(r, box)
    np.testing.assert_array_equal(got, want)


# ---- fused decode+crop+resize vs PIL decode -> crop -> resize: mean |diff|
# <= 2 levels (the stated tolerance of sl_decode_crop_resize), max <= 48

@pytest.mark.parametrize("seed", range(12))
def test_fused_decode_crop_resize(ops, seed):
    rng = np.random.default_rng(100 + seed)
    w, h = int(rng.integers(200, 800)), int(rng.integers(200, 800))
    img = Image.fromarray(R.natural_image(w, h, seed))
    data = R.jpeg_bytes(img, quality=90, progressive=bool(seed % 3 == 0))
    cw, ch = int(rng.integers(8, w + 1)), int(rng.integers(8, h + 1))
    x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    out = int(rng.choice([32, 64, 112, 224]))
    import io
    ref = Image.open(io.BytesIO(data)).convert("RGB").crop((x, y, x + cw, y + ch))
    want = np.asarray(ref.resize((out, out), Image.BILINEAR)).astype(int)
    got = ops.decode_crop_resize(data, (y, x, ch, cw), out, out).astype(int)
    diff = np.abs(got - want)
    assert diff.mean() <= 2.0 and diff.max() <= 48, "mean %.3f max %d" % (diff.mean(), diff.max())


# ---- without DCT scaling (box < 2x the output) the fused path is exact:
# equal to PIL decode -> crop -> resize, pixel for pixel, from the file as it
# was and from its restart-interval re-encode (sl_jpeg_add_restarts)

@pytest.mark.parametrize("seed", range(12))
def test_fused_decode_crop_resize_exact(ops, seed):
    import io
    rng = np.random.default_rng(500 + seed)
    w, h = int(rng.integers(60, 700)), int(rng.integers(60, 700))
    img = Image.fromarray(R.natural_image(w, h, seed))
    sub = [0, 1, 2][seed % 3]  # PIL subsampling: 4:4:4, 4:2:2, 4:2:0
    data = R.jpeg_bytes(img, quality=90, progressive=bool(seed % 4 == 0), subsampling=sub)
    full = Image.open(io.BytesIO(data)).convert("RGB")
    re = ops.add_restarts(data)
    if re is not None:
        np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(re)).convert("RGB")),
                                      np.asarray(full))
    for _ in range(8):
        cw, ch = int(rng.integers(1, w + 1)), int(rng.integers(1, h + 1))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        ow = int(rng.integers(max(1, cw // 2 + 1), 2 * cw + 1))
        oh = int(rng.integers(max(1, ch // 2 + 1), 2 * ch + 1))
        want = np.asarray(R.pil_resize(full.crop((x, y, x + cw, y + ch)), (ow, oh), Image.BILINEAR))
        for d in (data, re) if re is not None else (data,):
            got = ops.decode_crop_resize(d, (y, x, ch, cw), oh, ow)
            np.testing.assert_array_equal(got, want)


# ---- real photos, where the machine has some: Debian wallpaper packages
# (/usr/share/backgrounds, /usr/share/wallpapers), the copies unpacked by
# make_photos.py under data/photos/src, and its imagenet-like set.

REAL = R.real_photos()


@pytest.mark.skipif(not REAL, reason="no photos on this machine (see make_photos.py)")
@pytest.mark.parametrize("path", REAL)
def test_real_photo_decode_resize_fused(ops, path):
    data = open(path, "rb").read()
    want = pil_rgb(data)
    got = ops.decode(data, R.RGB)
    np.testing.assert_array_equal(got, want)  # exact
    h, w = want.shape[:2]
    img = Image.fromarray(want)
    np.testing.assert_array_equal(ops.resize(want, 224, 224),
                                  np.asarray(R.pil_resize(img, (224, 224), Image.BILINEAR)))
    box = (h // 5, w // 7, h // 2, w // 2)  # y, x, h, w
    ref = img.crop((box[1], box[0], box[1] + box[3], box[0] + box[2])).resize((224, 224), Image.BILINEAR)
    diff = np.abs(ops.decode_crop_resize(data, box, 224, 224).astype(int) - np.asarray(ref).astype(int))
    assert diff.mean() <= 2.0 and diff.max() <= 48, "mean %.3f max %d" % (diff.mean(), diff.max())


# ---- every SIMD level (SLUICE_SIMD caps it; read once per process, so each
# level runs in its own interpreter) against PIL and torchvision: resize
# RGB and gray, up and down, odd sizes, boxes at the image's edges; normalize
# float32 CHW, mirrored by the fused path's flip and not.

_LEVEL_SCRIPT = r"""
import sys
import numpy as np
from PIL import Image
sys.path.insert(0, sys.argv[1])
import ops_ref_lib as R
ops = R.load()
rng = np.random.default_rng(11)
cases = [((640, 427), (224, 224), None), ((97, 131), (224, 224), None), ((300, 300), (299, 301), None),
         ((1000, 700), (37, 53), None), ((33, 17), (7, 5), None), ((448, 448), (224, 224), None),
         ((500, 375), (224, 224), (0, 0, 200, 375)), ((500, 375), (224, 224), (300, 175, 500, 375)),
         ((500, 375), (223, 225), (0.5, 3.25, 499.5, 374)), ((120, 90), (61, 90), None),
         ((120, 90), (120, 47), None)]
for _ in range(25):
    sw, sh = int(rng.integers(8, 600)), int(rng.integers(8, 600))
    dw, dh = int(rng.integers(1, 320)), int(rng.integers(1, 320))
    cases.append(((sw, sh), (dw, dh), None))
for (sw, sh), (dw, dh), box in cases:
    for mode in ("RGB", "L"):
        img = Image.fromarray(R.natural_image(sw, sh, sw * 7 + sh)).convert(mode)
        for flt, ours in ((Image.BILINEAR, R.BILINEAR), (Image.BOX, R.AREA)):
            want = np.asarray(R.pil_resize(img, (dw, dh), flt, box=box))
            got = ops.resize(np.asarray(img), dh, dw, ours, box=box)
            if mode == "L":
                got = got[:, :, 0]
            assert (got == want).all(), ((sw, sh), (dw, dh), box, mode, flt)
import torch
import torchvision.transforms as T
mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
for w, h in ((224, 224), (227, 131), (13, 7), (8, 3), (17, 5), (1, 1)):
    img = Image.fromarray(R.natural_image(w, h, w + h))
    want = T.Normalize(mean, std)(T.ToTensor()(img)).numpy()
    got = ops.normalize(np.asarray(img), mean, std, R.CHW, R.F32)
    assert (got.view(np.uint32) == want.view(np.uint32)).all(), (w, h)
    flipped = T.Normalize(mean, std)(T.ToTensor()(img.transpose(Image.FLIP_LEFT_RIGHT))).numpy()
    got = ops.normalize(np.ascontiguousarray(np.asarray(img)[:, ::-1]), mean, std, R.CHW, R.F32)
    assert (got.view(np.uint32) == flipped.view(np.uint32)).all(), (w, h)
print("ok")
"""


@pytest.mark.parametrize("level", ["scalar", "sse4.1", "avx2", "avx512"])
def test_simd_levels_equal_pil_and_torchvision(level):
    pytest.importorskip("torchvision")
    import subprocess
    env = dict(os.environ, SLUICE_SIMD=level)
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-c", _LEVEL_SCRIPT, here], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
