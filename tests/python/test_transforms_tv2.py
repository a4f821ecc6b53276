"""sluice.transforms against torchvision.transforms.v2 itself, on the real
photos the suite uses (ops_ref_lib.real_photos): the same seeded draws,
every class, every interpolation mode, uint8 and float32, tensors, numpy
arrays and PIL images; and the GIL state on the free-threaded Python.

Needs torchvision >= 0.16 (transforms.v2): it runs in the torch 2.x venvs of
scripts/pythons.sh (scripts/test_transforms.sh, which scripts/test.sh runs, and
scripts/test_pythons.sh with the whole suite)
and is not collected under Debian's torch 1.13 (conftest.py).

Tolerances (docs/OPS.md, "Transforms"): exact everywhere except
  - uint8 resize with antialias (v2's tensors): torch's uint8 kernel keeps
    fewer fixed-point bits than PIL's, whose pixels sluice gives: bilinear
    <= 1 level on <= 1 % of pixels, bicubic <= 2 on <= 2 %;
  - uint8 resize without antialias: computed in float32, rounded to uint8
    after each pass as torch's uint8 kernel does in its own fixed point:
    <= 2 levels on <= 15 % of pixels (under 1 % but for strong shrinks);
  - float32 resize: <= 2e-6 with antialias, <= 1e-5 without (float sums in
    another order); float32 contrast (ColorJitter): <= 1e-6 (the mean);
  - rotation by other angles, bilinear: uint8 <= 1 level on <= 0.1 % of
    pixels, float32 <= 1e-5 (torch's grid runs a float matrix product);
  - the fused decode: exact where the JPEG is decoded at full scale, mean
    <= 3 levels where a reduced DCT scale is used.
"""
import os
import subprocess
import sys
import sysconfig
import textwrap

import numpy as np
import pytest

import ops_ref_lib as R

torch = pytest.importorskip("torch")
V = pytest.importorskip("torchvision.transforms.v2")
from PIL import Image  # noqa: E402
from torchvision.io import decode_jpeg  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

import sluice.transforms as T  # noqa: E402

MODES = list(V.InterpolationMode)
JPEGS = [p for p in R.real_photos(8) if p.lower().endswith((".jpg", ".jpeg"))][:3]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module", params=range(3), ids=lambda i: f"photo{i}")
def photo(request):
    """A 480x640 region of a real photo (decoded by PIL) as a CHW uint8
    tensor: real content at a size the tests run through quickly."""
    assert len(JPEGS) >= 2, "the real photos (mate-backgrounds, scripts/deps.sh) are missing"
    p = JPEGS[request.param % len(JPEGS)]
    a = np.asarray(Image.open(p).convert("RGB"))
    h, w = a.shape[:2]
    y, x = (h - min(h, 480)) // 2, (w - min(w, 640)) // 2
    a = np.ascontiguousarray(a[y:y + 480, x:x + 640])
    if request.param == 2:  # an odd size too
        a = np.ascontiguousarray(a[:331, :457])
    return torch.from_numpy(a).permute(2, 0, 1).contiguous()


def diff_stats(a, b):
    a = a.detach().double() if isinstance(a, torch.Tensor) else torch.from_numpy(
        np.asarray(a, np.float64))
    b = b.detach().double() if isinstance(b, torch.Tensor) else torch.from_numpy(
        np.asarray(b, np.float64))
    assert a.shape == b.shape, (a.shape, b.shape)
    d = (a - b).abs()
    return d.max().item(), (d > 0).double().mean().item()


def assert_close(a, b, max_diff=0.0, frac=0.0, what=""):
    m, f = diff_stats(a, b)
    assert m <= max_diff and f <= frac, f"{what}: max |diff| {m:g}, {f:.4%} of values differ"


def both(name, args, x, seed=7, **kw):
    """The transform from sluice and from torchvision on x, same seed; both
    leave torch's generator at the same place (the same number of draws)."""
    torch.manual_seed(seed)
    a = getattr(T, name)(*args, **kw)(x)
    after_a = torch.rand(1)
    torch.manual_seed(seed)
    b = getattr(V, name)(*args, **kw)(x)
    assert torch.equal(torch.rand(1), after_a), f"{name}: a different number of draws"
    return a, b


# ---- the exact ones --------------------------------------------------------------------

EXACT = [
    ("CenterCrop", (224,), {}), ("CenterCrop", ((500, 700),), {}),
    ("RandomCrop", (200,), {}), ("RandomCrop", (300,), {"padding": 20}),
    ("RandomCrop", (600,), {"pad_if_needed": True, "fill": 9, "padding_mode": "constant"}),
    ("RandomCrop", ((100, 150),), {"padding": (3, 5), "padding_mode": "reflect"}),
    ("RandomHorizontalFlip", (), {}), ("RandomHorizontalFlip", (1.0,), {}),
    ("RandomVerticalFlip", (1.0,), {}),
    ("Pad", (7,), {}), ("Pad", ((3, 9),), {"fill": 200}),
    ("Pad", ((1, 2, 3, 4),), {"padding_mode": "edge"}),
    ("Pad", (11,), {"padding_mode": "reflect"}), ("Pad", ((5, 0, 2, 8),), {"padding_mode": "symmetric"}),
    ("Pad", ((-3, 4, 2, -1),), {}),
    ("RandomRotation", (30,), {}), ("RandomRotation", ((90, 90),), {}),
    ("RandomRotation", ((180, 180),), {"interpolation": V.InterpolationMode.BILINEAR}),
    ("RandomRotation", ((-90, -90),), {"expand": True}),
    ("RandomRotation", ((10, 50),), {"fill": 77, "center": (30, 40)}),
    ("ColorJitter", (0.4, 0.4, 0.4, 0.1), {}), ("ColorJitter", (), {"hue": 0.5}),
    ("ColorJitter", (), {"brightness": (0.2, 1.8)}), ("ColorJitter", (), {"contrast": 0.9}),
    ("ColorJitter", (), {"saturation": (0.0, 3.0)}),
    ("Grayscale", (), {}), ("Grayscale", (3,), {}), ("RandomGrayscale", (1.0,), {}),
    ("RandomGrayscale", (), {}),
    ("RandomErasing", (1.0,), {}), ("RandomErasing", (1.0,), {"value": (10, 20, 30)}),
    ("RandomErasing", (), {"scale": (0.1, 0.5), "ratio": (0.5, 2.0), "value": 3}),
]


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("name,args,kw", EXACT, ids=lambda v: str(v) if not isinstance(v, dict) else
                         ",".join(f"{k}={w}" for k, w in v.items()))
def test_exact_on_tensors(photo, name, args, kw, dtype):
    x = photo if dtype == "uint8" else photo.float() / 255
    # float32 contrast: the image mean is summed in another order (1 ulp)
    tol = (1e-6, 1.0) if name == "ColorJitter" and dtype == "float32" else (0, 0.0)
    for seed in range(4):
        a, b = both(name, args, x, seed=seed, **kw)
        assert a.dtype == b.dtype
        assert_close(a, b, *tol, what=f"{name}{args}{kw} seed {seed}")


def test_random_erasing_random_value(photo):
    x = photo.float() / 255
    a, b = both("RandomErasing", (1.0,), x, value="random")
    assert_close(a, b, what="RandomErasing(value='random')")


@pytest.mark.parametrize("angle", [90, 180, 270, -90, 450])
@pytest.mark.parametrize("interp", ["nearest", "bilinear"])
def test_rotate_by_multiples_of_90_is_exact(photo, angle, interp):
    x = photo[:, :300, :300]  # square: torchvision's transposing path
    im = V.InterpolationMode(interp)
    a = T._rotate(x, "tensor", angle, im, False, None, 0)
    assert_close(a, F.rotate(x, angle, im, fill=0), what=f"rotate {angle}")
    # and as RandomRotation with those degrees, on a non-square image
    # and as RandomRotation on the non-square photo: 180 transposes, 90 and
    # 270 take the grid there (exact with nearest, bilinear as any angle)
    a, b = both("RandomRotation", ((angle, angle),), photo, interpolation=im)
    tol = (1, 0.001) if interp == "bilinear" and angle % 180 else (0, 0.0)
    assert_close(a, b, *tol, what=f"RandomRotation {angle} on {tuple(photo.shape)}")


@pytest.mark.parametrize("angle", [17.5, -33.0, 123.0])
def test_rotate_any_angle(photo, angle):
    for interp, tol in (("nearest", 0.0), ("bilinear", 0.001)):
        im = V.InterpolationMode(interp)
        for x, lim in ((photo, 1), (photo.float() / 255, 1e-5)):
            a = T._rotate(x, "tensor", angle, im, False, None, 0)
            b = F.rotate(x, angle, im, fill=0)
            frac = 1.0 if x.dtype == torch.float32 else tol
            assert_close(a, b, lim if tol else 0, frac, what=f"rotate {angle} {interp} {x.dtype}")


def test_normalize_and_to_dtype_are_exact(photo):
    f = photo.float() / 255
    for mean, std in ((MEAN, STD), ([0.5], [0.25]), ([0.1, -2.0, 3.0], [1e-3, 7.0, 0.3])):
        assert_close(T.Normalize(mean, std)(f), V.Normalize(mean, std)(f), what=f"{mean} {std}")
        g = f.clone()
        T.Normalize(mean, std, inplace=True)(g)
        assert_close(g, V.Normalize(mean, std)(f), what="inplace")
    assert_close(T.ToDtype(torch.float32, scale=True)(photo),
                 V.ToDtype(torch.float32, scale=True)(photo), what="uint8 -> float32")
    assert_close(T.ToDtype(torch.uint8, scale=True)(f), V.ToDtype(torch.uint8, scale=True)(f),
                 what="float32 -> uint8")
    assert_close(T.ToDtype(torch.float32)(photo), V.ToDtype(torch.float32)(photo), what="cast")
    assert_close(T.ToDtype(torch.float64, scale=True)(photo),
                 V.ToDtype(torch.float64, scale=True)(photo), what="uint8 -> float64")
    # the chain the training recipes use, on a strided view (a flip made by torch)
    v = photo.flip(-1)
    chain = [V.ToDtype(torch.float32, scale=True), V.Normalize(MEAN, STD)]
    assert_close(T.Compose([T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])(v),
                 V.Compose(chain)(v), what="ToDtype + Normalize on a view")


# ---- resizing: every mode and dtype ---------------------------------------------------

RESIZE_TOL = {  # (mode, dtype, antialias) -> (max |diff|, fraction differing)
    ("bilinear", "uint8", True): (1, 0.01), ("bicubic", "uint8", True): (2, 0.02),
    ("bilinear", "uint8", False): (2, 0.15), ("bicubic", "uint8", False): (2, 0.15),
    ("bilinear", "float32", True): (2e-6, 1.0), ("bicubic", "float32", True): (2e-6, 1.0),
    ("bilinear", "float32", False): (1e-5, 1.0), ("bicubic", "float32", False): (1e-5, 1.0),
}


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear", "bicubic"])
def test_resize_every_mode(photo, mode, antialias, dtype):
    x = photo if dtype == "uint8" else photo.float() / 255
    im = V.InterpolationMode(mode)
    for size in (97, 224, (300, 200), 700, (123, 1001)):
        a = T.Resize(size, interpolation=im, antialias=antialias)(x)
        b = V.Resize(size, interpolation=im, antialias=antialias)(x)
        tol = (0, 0.0) if mode.startswith("nearest") else RESIZE_TOL[(mode, dtype, antialias)]
        assert_close(a, b, *tol, what=f"Resize({size}, {mode}, antialias={antialias}) {dtype}")


def test_resize_max_size_and_unsupported_modes(photo):
    for size, mx in ((100, 150), (None, 200), ([256], 300)):
        a = T.Resize(size, max_size=mx)(photo)
        b = V.Resize(size, max_size=mx)(photo)
        assert a.shape == b.shape
        assert_close(a, b, 1, 0.01, what=f"max_size {mx}")
    for mode in ("box", "hamming", "lanczos"):
        with pytest.raises(ValueError, match="unsupported"):
            T.Resize(100, interpolation=V.InterpolationMode(mode))(photo)


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_random_resized_crop_draws_and_pixels(photo, dtype):
    x = photo if dtype == "uint8" else photo.float() / 255
    tol = (2, 0.03) if dtype == "uint8" else (2e-6, 1.0)
    for seed in range(10):
        for kw in ({}, {"scale": (0.5, 1.0), "ratio": (1.0, 2.0)},
                   {"interpolation": V.InterpolationMode.BICUBIC},
                   {"scale": (0.9, 1.0), "ratio": (5.0, 6.0)}):  # falls back to the centre crop
            a, b = both("RandomResizedCrop", (224,), x, seed=seed, **kw)
            assert_close(a, b, *tol, what=f"RandomResizedCrop seed {seed} {kw}")
        torch.manual_seed(seed)
        box = T.RandomResizedCrop(224).params(x.shape[1], x.shape[2])
        torch.manual_seed(seed)
        want = V.RandomResizedCrop(224).make_params([x])
        assert box == (want["top"], want["left"], want["height"], want["width"])


# ---- tone operations and the auto-augment policies ------------------------------------

# every magnitude the policies use: solarize thresholds and sharpness
# factors from the tables of 10 and 31 bins (float32 linspace, as v2's)
_SOLARIZE_U8 = sorted({255.0 * float(v) for n in (10, 31) for v in torch.linspace(1.0, 0.0, n)})
_SHARP = sorted({1.0 + s * float(v) for n in (10, 31) for top in (0.9, 0.99) for s in (1, -1)
                 for v in torch.linspace(0.0, top, n)})


def _tone_cases(x, every=1):
    """(name, sluice's result, v2's result) for every tone operation (every
    `every`-th sharpness factor)."""
    fl = x.is_floating_point()
    bound = 1.0 if fl else 255.0
    for bits in range(9):
        yield f"posterize {bits}", T._tone(x, "tensor", T._ADJ_POSTERIZE, bits), F.posterize(x, bits)
    for t in (_SOLARIZE_U8 if not fl else [v / 255.0 for v in _SOLARIZE_U8]) + [bound * 0.5]:
        yield f"solarize {t}", T._tone(x, "tensor", T._ADJ_SOLARIZE, t), F.solarize(x, t)
    for f in _SHARP[::every] + [0.0, 3.5]:
        yield f"sharpness {f}", T._tone(x, "tensor", T._ADJ_SHARPNESS, f), F.adjust_sharpness(x, f)
    yield "invert", T._tone(x, "tensor", T._ADJ_INVERT), F.invert(x)
    yield "autocontrast", T._tone(x, "tensor", T._ADJ_AUTOCONTRAST), F.autocontrast(x)
    yield "equalize", T._tone(x, "tensor", T._ADJ_EQUALIZE), F.equalize(x)


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_tone_operations_equal_v2(photo, dtype):
    """Posterize, solarize, invert, autocontrast, equalize: exact; sharpness:
    uint8 exact, float32 within 1 ulp of 1.0 (torch's convolution sums in
    its own order)."""
    x = photo if dtype == "uint8" else photo.float() / 255
    # a low-contrast copy too, so that autocontrast and equalize stretch
    low = (photo // 4 + 60) if dtype == "uint8" else photo.float() / 1020 + 0.2
    gray = x[:1]
    # every factor of the tables on a strided view, a sample of them on the rest
    for img, every in ((x, 9), (low, 9), (gray, 9), (x[:, 50:250:2, 7:300], 1)):
        for what, a, b in _tone_cases(img, every):
            tol = (2e-7, 1.0) if what.startswith("sharp") and dtype == "float32" else (0, 0.0)
            assert a.dtype == b.dtype
            assert_close(a, b, *tol, what=f"{what} {tuple(img.shape)}")


def test_tone_edge_cases_equal_v2():
    """Constant channels (autocontrast keeps them, equalize's step 0), a
    channel with one odd pixel, images too thin to sharpen."""
    flat = torch.full((3, 40, 50), 93, dtype=torch.uint8)
    flat[1, 3, 4] = 200
    flat[2] = torch.arange(50, dtype=torch.uint8)  # each value 40 times
    for x in (flat, flat.float() / 255, torch.zeros(1, 2, 9, dtype=torch.uint8) + 7,
              torch.randint(0, 256, (3, 9, 2), dtype=torch.uint8)):
        for what, a, b in _tone_cases(x):
            assert_close(a, b, what=f"{what} {x.dtype} {tuple(x.shape)}")


def test_tone_argument_checks_match_v2(photo):
    for bad in (lambda m: m.solarize(photo, 256.0), lambda m: m.posterize(photo, 9),
                lambda m: m.autocontrast(photo[:2])):
        with pytest.raises(TypeError):
            bad(F)
        with pytest.raises(TypeError):
            bad(_TF)
    with pytest.raises(ValueError):
        F.adjust_sharpness(photo, -1.0)
    with pytest.raises(ValueError):
        _TF.adjust_sharpness(photo, -1.0)


class _TF:
    """v2's functional names over sluice's kernels (for the argument checks)."""
    solarize = staticmethod(lambda x, t: T._tone(x, "tensor", T._ADJ_SOLARIZE, t))
    posterize = staticmethod(lambda x, b: T._tone(x, "tensor", T._ADJ_POSTERIZE, b))
    autocontrast = staticmethod(lambda x: T._tone(x, "tensor", T._ADJ_AUTOCONTRAST))
    adjust_sharpness = staticmethod(lambda x, f: T._tone(x, "tensor", T._ADJ_SHARPNESS, f))


TONE_CLASSES = [
    ("RandomPosterize", (3,), {}), ("RandomPosterize", (6,), {"p": 1.0}),
    ("RandomSolarize", (100.0,), {}), ("RandomAdjustSharpness", (2.0,), {}),
    ("RandomAdjustSharpness", (0.3,), {"p": 1.0}), ("RandomAutocontrast", (), {}),
    ("RandomEqualize", (), {"p": 1.0}), ("RandomInvert", (), {}),
]


@pytest.mark.parametrize("name,args,kw", TONE_CLASSES, ids=lambda v: str(v))
def test_tone_classes_draw_and_give_v2s_results(photo, name, args, kw):
    img = Image.fromarray(photo.permute(1, 2, 0).numpy())
    for seed in range(4):
        a, b = both(name, args, photo, seed=seed, **kw)
        assert_close(a, b, what=f"{name} seed {seed}")
        a, b = both(name, args, img, seed=seed, **kw)
        assert_close(np.asarray(a), np.asarray(b), what=f"{name} PIL seed {seed}")


POLICIES = [
    ("TrivialAugmentWide", (), {}), ("TrivialAugmentWide", (), {"num_magnitude_bins": 11}),
    ("RandAugment", (), {}), ("RandAugment", (), {"num_ops": 4, "magnitude": 27}),
    ("RandAugment", (), {"num_ops": 3, "magnitude": 4, "num_magnitude_bins": 10}),
    ("AutoAugment", (), {}), ("AutoAugment", (V.AutoAugmentPolicy.CIFAR10,), {}),
    ("AutoAugment", (V.AutoAugmentPolicy.SVHN,), {}),
]


@pytest.mark.parametrize("fill", [None, 128, (10, 200, 30)])
@pytest.mark.parametrize("interp", ["nearest", "bilinear"])
@pytest.mark.parametrize("name,args,kw", POLICIES, ids=lambda v: str(v))
def test_policies_draw_and_give_v2s_results(photo, name, args, kw, interp, fill):
    """Every operation is drawn over the seeds (TrivialAugmentWide has 14,
    the policies 25 sub-policies): the same draws as v2 (both() checks the
    generator ends at the same place) and v2's pixels."""
    im = V.InterpolationMode(interp)
    x = photo[:, :160, :200] if photo.shape[1] > 200 else photo[:, :150, :150]
    for dtype in ("uint8", "float32"):
        xx = x if dtype == "uint8" else x.float() / 255
        f = fill if fill is None or dtype == "uint8" else \
            fill / 255 if isinstance(fill, int) else [v / 255 for v in fill]
        for seed in range(40):
            a, b = both(name, args, xx, seed=seed, interpolation=im, fill=f, **kw)
            assert a.dtype == b.dtype and a.shape == b.shape
            what = f"{name}{args}{kw} {interp} fill={f} {dtype} seed {seed}"
            if interp == "nearest":
                # uint8 exact; float32: sharpness's and contrast's last bits, chained
                assert_close(a, b, *((0, 0.0) if dtype == "uint8" else (1e-6, 1.0)), what=what)
                continue
            # bilinear: the grid's one level (as rotation) on a few pixels, which a
            # following equalize, posterize or solarize may move further
            d = (a.double() - b.double()).abs()
            if dtype == "uint8":
                assert (d > 0).double().mean() <= 0.02, f"{what}: {(d > 0).double().mean():.4%}"
            else:
                assert (d > 1e-5).double().mean() <= 0.5 and d.mean() <= 0.01, \
                    f"{what}: mean |diff| {d.mean():g}"


@pytest.mark.parametrize("name,args,kw", POLICIES, ids=lambda v: str(v))
def test_policies_on_pil_and_numpy(photo, name, args, kw):
    """PIL images get v2's PIL results (PIL's own operations); numpy HWC
    arrays the tensor results."""
    x = photo[:, :120, :170]
    img = Image.fromarray(x.permute(1, 2, 0).numpy())
    arr = x.permute(1, 2, 0).contiguous().numpy()
    for seed in range(30):
        a, b = both(name, args, img, seed=seed, fill=(5, 6, 7), **kw)
        assert isinstance(a, Image.Image) and a.mode == b.mode
        assert_close(np.asarray(a), np.asarray(b), what=f"{name} PIL seed {seed}")
        torch.manual_seed(seed)
        got = getattr(T, name)(*args, **kw)(arr)
        torch.manual_seed(seed)
        want = getattr(T, name)(*args, **kw)(x)
        np.testing.assert_array_equal(got, want.permute(1, 2, 0).numpy(), err_msg=f"{name} {seed}")


@pytest.mark.parametrize("name,args", [("RandomHorizontalFlip", ()), ("RandomRotation", (30,)),
                                       ("ColorJitter", (0.4, 0.4)), ("RandomResizedCrop", (64,)),
                                       ("RandomErasing", (1.0,))])
def test_one_set_of_draws_with_labels(photo, name, args):
    """t(img, label, ...): v2 draws once per call, whatever else is there."""
    x = photo[:, :100, :120].float() / 255
    for seed in range(3):
        torch.manual_seed(seed)
        a = getattr(T, name)(*args)(x, 5, "label")
        after = torch.rand(1)
        torch.manual_seed(seed)
        b = getattr(V, name)(*args)(x, 5, "label")
        assert torch.equal(torch.rand(1), after), f"{name}: a different number of draws"
        assert a[1:] == (5, "label")
        assert_close(a[0], b[0], 1e-6, 1.0, what=name)  # float32 contrast: its mean


def test_policies_take_one_image_among_other_inputs(photo):
    x = photo[:, :64, :80]
    torch.manual_seed(1)
    a = T.TrivialAugmentWide()(x, 3, "label")
    torch.manual_seed(1)
    b = V.TrivialAugmentWide()(x, 3, "label")
    assert a[1:] == (3, "label") and torch.equal(a[0], b[0])
    from torchvision import tv_tensors
    for t in (T.RandAugment(), V.RandAugment()):
        with pytest.raises(TypeError, match="single image"):
            t(tv_tensors.Image(x), tv_tensors.Image(x))
        # of two plain tensors the first is the image, the second passes
        torch.manual_seed(2)
        out = t(x, x)
        assert out[1] is x
        with pytest.raises(TypeError, match="no image"):
            t("label")
    with pytest.raises(ValueError):
        T.RandAugment(num_ops=-1)
    with pytest.raises(ValueError):
        T.AutoAugment("nonsense")


@pytest.mark.parametrize("angle", [17.5, -33.0, 123.0, 271.0, 45.0])
def test_rotate_with_expand_at_any_angle(photo, angle):
    """expand=True: v2's output size (its float32 corners) and pixels."""
    for interp, tol in (("nearest", (0, 0.0)), ("bilinear", (1, 0.001))):
        im = V.InterpolationMode(interp)
        for fill in (None, 0, (9, 99, 199)):
            a, b = both("RandomRotation", ((angle, angle),), photo, interpolation=im,
                        expand=True, fill=fill)
            assert a.shape == b.shape, (angle, a.shape, b.shape)
            assert_close(a, b, *tol, what=f"rotate {angle} expand {interp} fill={fill}")
            f = photo.float() / 255
            a = T._rotate(f, "tensor", angle, im, True, None, None)
            b = F.rotate(f, angle, im, expand=True)
            assert_close(a, b, 1e-5 if interp == "bilinear" else 0, 1.0,
                         what=f"rotate {angle} expand float32")


# ---- batches and ToDtype with a dict --------------------------------------------------

BATCHED = [
    ("RandomResizedCrop", (96,), {}), ("RandomHorizontalFlip", (), {}), ("RandomCrop", (64,), {"padding": 3}),
    ("ColorJitter", (0.4, 0.4, 0.4, 0.1), {}), ("RandomRotation", (30,), {}),
    ("RandomRotation", (30,), {"expand": True, "interpolation": V.InterpolationMode.BILINEAR}),
    ("RandomErasing", (1.0,), {}), ("RandomGrayscale", (1.0,), {}), ("Resize", (77,), {}),
    ("TrivialAugmentWide", (), {}), ("RandAugment", (), {}), ("AutoAugment", (), {}),
    ("RandomEqualize", (), {}), ("RandomAdjustSharpness", (2.0,), {}),
]


@pytest.mark.parametrize("name,args,kw", BATCHED, ids=lambda v: str(v))
def test_batches_share_the_draws_as_v2(photo, name, args, kw):
    """(N, C, H, W) and (A, B, C, H, W) tensors: v2's results (one set of
    draws for the batch) and the generator left where v2 leaves it."""
    x = photo[:, :120, :150]
    batch = torch.stack([x, x.flip(-1), (x // 2), x.flip(-2)])
    tol = (1, 0.01) if name in ("RandomResizedCrop", "Resize") else \
        (1, 0.001) if "BILINEAR" in str(kw) else (0, 0.0)
    for b in (batch, batch.view(2, 2, *x.shape)):
        for seed in range(6):
            a, w = both(name, args, b, seed=seed, **kw)
            assert a.shape == w.shape
            assert_close(a, w, *tol, what=f"{name} {tuple(b.shape)} seed {seed}")


def test_batches_in_a_compose_with_float_steps(photo):
    x = torch.stack([photo[:, :100, :100], photo[:, 100:200, 100:200]])
    mk = lambda M: M.Compose([M.RandomHorizontalFlip(), M.ToDtype(torch.float32, scale=True),
                              M.Normalize(MEAN, STD)])
    torch.manual_seed(0)
    a = mk(T)(x)
    torch.manual_seed(0)
    b = mk(V)(x)
    assert_close(a, b, what="batched Compose")


def test_to_dtype_with_a_dict_follows_v2(photo):
    from torchvision import tv_tensors
    img = tv_tensors.Image(photo)
    mask = tv_tensors.Mask(photo[0] > 100)
    for dt in ({tv_tensors.Image: torch.float32, tv_tensors.Mask: torch.int64},
               {tv_tensors.Image: torch.float32, "others": None},
               {"others": torch.float32}, {torch.Tensor: torch.float32, "others": None}):
        for scale in (False, True):
            got = T.ToDtype(dt, scale=scale)(img, mask, photo)
            want = V.ToDtype(dt, scale=scale)(img, mask, photo)
            for g, w in zip(got, want):
                assert type(g) is type(w) and g.dtype == w.dtype, (dt, type(g), type(w))
                assert torch.equal(g, w), (dt, scale)
    with pytest.raises(ValueError, match="No dtype was specified"):
        T.ToDtype({tv_tensors.Mask: torch.int64})(img)
    # a single dtype converts images and passes masks, as v2's
    got = T.ToDtype(torch.float32, scale=True)(img, mask)
    want = V.ToDtype(torch.float32, scale=True)(img, mask)
    assert torch.equal(got[0], want[0]) and got[1] is mask and want[1] is mask


# ---- numpy arrays and PIL images ------------------------------------------------------

PIL_CASES = [
    ("RandomResizedCrop", (224,), {}), ("Resize", (150,), {}), ("Resize", ((90, 333),), {}),
    ("CenterCrop", (300,), {}), ("CenterCrop", (800,), {}), ("RandomCrop", (256,), {"padding": 4}),
    ("RandomHorizontalFlip", (1.0,), {}), ("RandomVerticalFlip", (1.0,), {}),
    ("Pad", ((4, 8),), {"padding_mode": "symmetric"}), ("Pad", (3,), {"fill": (1, 2, 3)}),
    ("RandomRotation", (40,), {}), ("RandomRotation", (40,), {"interpolation": V.InterpolationMode.BILINEAR,
                                                             "expand": True, "fill": 9}),
    ("ColorJitter", (0.4, 0.4, 0.4, 0.2), {}), ("Grayscale", (3,), {}), ("RandomGrayscale", (1.0,), {}),
]


@pytest.mark.parametrize("name,args,kw", PIL_CASES, ids=lambda v: str(v) if not isinstance(v, dict) else
                         ",".join(f"{k}={w}" for k, w in v.items()))
def test_pil_images_give_torchvisions_pil_results(photo, name, args, kw):
    img = Image.fromarray(photo.permute(1, 2, 0).numpy())
    for seed in range(3):
        a, b = both(name, args, img, seed=seed, **kw)
        assert isinstance(a, Image.Image) and a.mode == b.mode and a.size == b.size
        assert_close(np.asarray(a), np.asarray(b), what=f"{name} seed {seed}")


@pytest.mark.parametrize("mode", [m for m in MODES])
def test_pil_resize_every_filter_is_exact(photo, mode):
    img = Image.fromarray(photo.permute(1, 2, 0).numpy())
    for size in (101, (240, 333), 900):
        a = T.Resize(size, interpolation=mode)(img)
        b = V.Resize(size, interpolation=mode)(img)
        assert_close(np.asarray(a), np.asarray(b), what=f"PIL resize {size} {mode}")
    gray = img.convert("L")
    assert_close(np.asarray(T.Resize(77, interpolation=mode)(gray)),
                 np.asarray(V.Resize(77, interpolation=mode)(gray)), what="gray")


def test_numpy_arrays_follow_the_tensor_arithmetic(photo):
    """A numpy HWC array gives the tensor result, laid out HWC."""
    a = photo.permute(1, 2, 0).contiguous().numpy()
    f = (photo.float() / 255).permute(1, 2, 0).contiguous().numpy()
    for name, args, kw in EXACT[:20] + [("RandomResizedCrop", (224,), {}), ("Resize", (97,), {})]:
        for arr, t in ((a, photo), (f, photo.float() / 255)):
            torch.manual_seed(3)
            got = getattr(T, name)(*args, **kw)(arr)
            torch.manual_seed(3)
            want = getattr(T, name)(*args, **kw)(t)
            assert isinstance(got, np.ndarray)
            np.testing.assert_array_equal(got, want.permute(1, 2, 0).numpy(), err_msg=name)
    # ToImage: numpy and PIL to torchvision's CHW tensor
    for x in (a, Image.fromarray(a)):
        got, want = T.ToImage()(x), V.ToImage()(x)
        assert torch.equal(got, want.as_subclass(torch.Tensor))


# ---- decoding and the fused path ------------------------------------------------------

@pytest.mark.parametrize("path", JPEGS)
def test_decode_image_equals_torchvision(path):
    data = open(path, "rb").read()
    got = T.decode_image(data)
    want = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    assert got.shape == want.shape
    assert torch.equal(got, want)
    g = T.decode_image(path, mode=T.ImageReadMode.GRAY)
    assert g.shape[0] == 1


def _chain(lib, size=224):
    return [lib.RandomResizedCrop(size), lib.RandomHorizontalFlip(),
            lib.ToDtype(torch.float32, scale=True), lib.Normalize(MEAN, STD)]


@pytest.mark.parametrize("path", JPEGS)
def test_fused_decode_draws_and_values(path):
    """Compose([DecodeJPEG(), RandomResizedCrop, flip, ToDtype, Normalize]):
    torchvision's boxes and flips from the same seed; pixels exact against
    sluice's own unfused chain at full DCT scale, close to torchvision's."""
    data = open(path, "rb").read()
    full = T.decode_image(data)
    H, W = full.shape[1:]
    scaled = 0
    for seed in range(12):
        size = 224 if seed % 2 else 96
        torch.manual_seed(seed)
        fused = T.Compose([T.DecodeJPEG()] + _chain(T, size))(data)
        torch.manual_seed(seed)
        box = T.RandomResizedCrop(size).params(H, W)
        torch.manual_seed(seed)
        unfused = T.Compose(_chain(T, size))(full)
        torch.manual_seed(seed)
        tv = V.Compose(_chain(V, size))(full)
        assert fused.shape == tv.shape == (3, size, size)
        # same draws: sluice's unfused chain against torchvision (resampling within its
        # tolerance, in normalized units 1 level is 1 / 255 / std)
        assert_close(unfused, tv, 1.0 / 255 / min(STD) + 1e-5, 0.01, what=f"seed {seed}")
        if min(box[2], box[3]) < 2 * size:  # decoded at full scale: exact
            assert_close(fused, unfused, what=f"fused seed {seed} box {box}")
        else:
            scaled += 1
            d = (fused - unfused).abs() * torch.tensor(STD).view(3, 1, 1) * 255
            assert d.mean() <= 3.0, f"fused with DCT scaling, seed {seed}: mean {d.mean():.3f}"
    assert scaled > 0 or max(H, W) < 4 * 96


@pytest.mark.parametrize("path", JPEGS[:2])
def test_fused_resize_center_crop_and_uint8_outputs(path):
    data = open(path, "rb").read()
    full = T.decode_image(data)
    for tail in ([T.Resize(256), T.CenterCrop(224)], [T.CenterCrop(200)], [T.Resize((64, 80))],
                 [T.RandomCrop(150), T.RandomHorizontalFlip(1.0)]):
        torch.manual_seed(1)
        fused = T.Compose([T.DecodeJPEG()] + tail)(data)
        torch.manual_seed(1)
        unfused = T.Compose(tail)(full)
        assert fused.dtype == torch.uint8 and fused.shape == unfused.shape
        if isinstance(tail[0], T.Resize) and min(full.shape[1:]) >= 2 * 256:
            d = (fused.float() - unfused.float()).abs()
            assert d.mean() <= 3.0, f"{tail}: mean {d.mean():.3f}"
        else:
            assert torch.equal(fused, unfused), tail


# ---- the GIL --------------------------------------------------------------------------

def _free_threaded_python():
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return sys.executable
    env = os.environ.get("SLUICE_FT_PYTHON")
    if env:
        return env
    # scripts/pythons.sh puts the venvs side by side: <P>/gil and <P>/ft
    return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(sys.executable))),
                        "ft", "bin", "python")


def test_gil_stays_off_after_importing_sluice_transforms_and_torch():
    """On the free-threaded 3.13t, `import sluice.transforms` and `import
    torch` leave the GIL off, and so does running the transforms (the
    process runs without PYTHON_GIL, which would force it)."""
    py = _free_threaded_python()
    assert os.access(py, os.X_OK), (f"no free-threaded Python at {py}: make it with "
                                    f"scripts/pythons.sh or set SLUICE_FT_PYTHON")
    code = textwrap.dedent("""
        import sys
        import sluice.transforms as T
        a = sys._is_gil_enabled()
        import torch
        b = sys._is_gil_enabled()
        x = torch.randint(0, 256, (3, 300, 400), dtype=torch.uint8)
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4),
                        T.ToDtype(torch.float32, scale=True), T.Normalize([0.5] * 3, [0.25] * 3)])
        y = tf(x)
        print(a, b, sys._is_gil_enabled(), tuple(y.shape))
    """)
    # the interpreter's own sluice (scripts/pythons.sh installs this tree), or
    # SLUICE_FT_PYTHONPATH: a build of this tree for that interpreter
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON_GIL", "PYTHONPATH")}
    if os.environ.get("SLUICE_FT_PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["SLUICE_FT_PYTHONPATH"]
    r = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[:3] == ["False", "False", "False"], r.stdout + r.stderr[-2000:]
