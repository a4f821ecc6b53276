"""sluice.transforms on any Python the suite runs (Debian's torch 1.13
included): references that need no torchvision v2 (PIL, numpy), damaged and
hostile input, argument checks, views, threads and the GIL. The references
against torchvision.transforms.v2 itself are in test_transforms_tv2.py."""
import io
import threading

import numpy as np
import pytest

import ops_ref_lib as R
import sluice
import sluice.transforms as T
from test_gil import MIN_COUNT, Counter

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

PHOTOS = R.real_photos(8)
JPEGS = [p for p in PHOTOS if p.lower().endswith((".jpg", ".jpeg"))]


def small_jpeg(w=300, h=200, seed=0, **kw):
    return R.jpeg_bytes(Image.fromarray(R.natural_image(w, h, seed)), quality=90, **kw)


def test_the_photos_are_there():
    assert len(JPEGS) >= 2 and len(PHOTOS) > len(JPEGS), \
        "the real photos come from mate-backgrounds (scripts/deps.sh)"


# ---- decoding ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", PHOTOS[:6])
def test_decode_image_equals_pil(path):
    data = open(path, "rb").read()
    want = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    for src in (data, path, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8),
                torch.frombuffer(bytearray(data), dtype=torch.uint8)):
        got = T.decode_image(src)
        assert got.dtype == torch.uint8 and tuple(got.shape) == (3,) + want.shape[:2]
        np.testing.assert_array_equal(got.permute(1, 2, 0).numpy(), want)
    gray = T.decode_image(data, mode="GRAY")
    np.testing.assert_array_equal(gray[0].numpy(),
                                  np.asarray(Image.open(io.BytesIO(data)).convert("L")))


def test_unchanged_mode_keeps_gray_images_gray():
    g = R.jpeg_bytes(Image.fromarray(R.natural_image(64, 48, 1)).convert("L"))
    assert T.decode_image(g).shape == (1, 48, 64)
    assert T.decode_image(g, mode=T.ImageReadMode.RGB).shape == (3, 48, 64)
    assert T.DecodeJPEG()(g).shape == (3, 48, 64)  # DecodeJPEG's default is RGB


DAMAGED = {
    "empty": b"",
    "not an image": b"hello, this is not an image at all" * 10,
    "truncated header": None,
    "truncated scan": None,
    "zeroed scan": None,
}


def _damaged(kind, good):
    if kind == "truncated header":
        return good[:40]
    if kind == "truncated scan":
        return good[:len(good) // 2]
    if kind == "zeroed scan":
        b = bytearray(good)
        b[len(b) // 3:len(b) // 3 + 64] = b"\xff" * 64
        return bytes(b)
    return DAMAGED[kind]


@pytest.mark.parametrize("kind", list(DAMAGED))
def test_damaged_input_raises_then_good_input_decodes(kind):
    good = small_jpeg()
    want = T.decode_image(good)
    bad = _damaged(kind, good)
    fused = T.Compose([T.DecodeJPEG(), T.RandomResizedCrop(64), T.ToDtype(torch.float32, scale=True)])
    for fn in (T.decode_image, T.DecodeJPEG(), fused):
        with pytest.raises(sluice.Error) as e:
            fn(bad)
        assert isinstance(e.value, (sluice.DecodeError, sluice.InvalidError)), type(e.value)
        assert "decode" in str(e.value), str(e.value)
        # the next image on the same thread is right
        assert torch.equal(T.decode_image(good), want)


def test_pixel_cap_and_bad_arguments():
    big = small_jpeg(400, 300)
    with pytest.raises(sluice.LimitError):
        T.decode_image(big, max_pixels=1000)
    with pytest.raises(sluice.LimitError):
        T.Compose([T.DecodeJPEG(max_pixels=1000), T.CenterCrop(10)])(big)
    with pytest.raises(TypeError):
        T.decode_image(12345)
    with pytest.raises(ValueError):
        T.decode_image(big, mode="CMYK")
    with pytest.raises(FileNotFoundError):
        T.decode_image("/nonexistent/file.jpg")


def test_fused_decode_equals_the_steps_at_full_scale():
    """Crops under twice the output are decoded at full scale: the fused
    Compose gives the unfused steps' values exactly, with the same draws."""
    data = small_jpeg(500, 375, seed=3)
    full = T.decode_image(data)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    for tail in ([T.RandomResizedCrop(224, scale=(0.08, 0.5)), T.RandomHorizontalFlip(),
                  T.ToDtype(torch.float32, scale=True), T.Normalize(mean, std)],
                 [T.RandomResizedCrop(200), T.RandomHorizontalFlip(0.7), T.ToImage(),
                  T.ToDtype(torch.float32, scale=True)],
                 [T.Resize(300), T.CenterCrop(224), T.ToDtype(torch.float32, scale=True),
                  T.Normalize([0.5], [0.5])],
                 [T.CenterCrop(100), T.RandomVerticalFlip(1.0)],
                 [T.RandomCrop(128), T.RandomHorizontalFlip()]):
        for seed in range(6):
            torch.manual_seed(seed)
            a = T.Compose([T.DecodeJPEG()] + tail)(data)
            torch.manual_seed(seed)
            b = T.Compose(tail)(full)
            after = torch.rand(1)  # the generator is at the same place after both
            torch.manual_seed(seed)
            T.Compose(tail)(full)
            assert torch.equal(torch.rand(1), after)
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b), (tail, seed)


class _Calls:
    """T._sluice with every kernel call counted."""

    def __init__(self, real):
        self.real, self.n = real, 0

    def __getattr__(self, name):
        fn = getattr(self.real, name)
        if not name.startswith("tf_"):
            return fn

        def counted(*a):
            self.n += 1
            return fn(*a)
        return counted


def _one_by_one(chain, x):
    for t in chain:
        x = t(x)
    return x


def _inputs(path):
    pil = Image.open(path).convert("RGB")
    arr = np.asarray(pil)
    return [("pil", pil), ("pil-L", pil.convert("L")), ("numpy", arr),
            ("numpy-2d", np.ascontiguousarray(arr[:, :, 1])), ("tensor", T.decode_image(path)),
            ("tensor-view", T.decode_image(path)[:, 10:-20, 5:-7]),
            ("float32", T.ToDtype(torch.float32, scale=True)(T.decode_image(path)))]


@pytest.mark.parametrize("path", JPEGS[:2])
def test_fused_float_tail_equals_the_steps(path, monkeypatch):
    """Compose runs flip + ToImage + ToDtype(float32) + Normalize on a uint8
    image as one kernel call: the unfused steps' values bit for bit, the same
    draws, the generator left at the same place; on every input kind, every
    interpolation of the crop before it, and float32 inputs (not fused)."""
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    tails = [[T.RandomHorizontalFlip(), T.ToImage(), T.ToDtype(torch.float32, scale=True),
              T.Normalize(mean, std)],
             [T.RandomHorizontalFlip(1.0), T.ToImage(), T.ToDtype(torch.float32, scale=True)],
             [T.ToImage(), T.ToDtype(torch.float32, scale=False), T.Normalize([100.0], [50.0])],
             [T.RandomHorizontalFlip(0.0), T.ToImage(), T.ToDtype(torch.float32, scale=True),
              T.Normalize([0.5], [0.25])]]
    heads = [[]] + [[T.RandomResizedCrop(96, interpolation=m)]
                    for m in (T.InterpolationMode.BILINEAR, T.InterpolationMode.BICUBIC,
                              T.InterpolationMode.NEAREST)]
    for name, x in _inputs(path):
        c = 1 if name in ("pil-L", "numpy-2d") else 3
        for head in heads:
            for tail in tails:
                if c == 1 and len(tail) == 4 and len(tail[3].mean) == 3:
                    continue
                chain = head + tail
                for seed in range(4):
                    torch.manual_seed(seed)
                    calls = _Calls(T._sluice)
                    monkeypatch.setattr(T, "_sluice", calls)
                    a = T.Compose(chain)(x)
                    monkeypatch.setattr(T, "_sluice", calls.real)
                    after = torch.rand(1)
                    torch.manual_seed(seed)
                    b = _one_by_one(chain, x)
                    assert torch.equal(torch.rand(1), after), (name, chain, seed)
                    assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
                    assert torch.equal(a, b), (name, chain, seed)
                    if name != "float32":
                        # the crop's resample (none when it keeps the size) + one pass
                        assert calls.n <= len(head) + 1, (name, chain, calls.n)
    # numpy without ToImage stays numpy, (H, W) as it came
    for name, x in _inputs(path)[2:4]:
        chain = [T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
                 T.Normalize([0.5], [0.5])]
        torch.manual_seed(1)
        a = T.Compose(chain)(x)
        torch.manual_seed(1)
        b = _one_by_one(chain, x)
        assert isinstance(a, np.ndarray) and a.shape == b.shape and a.dtype == np.float32
        assert np.array_equal(a, b), name


def test_fused_float_tail_keeps_the_steps_errors():
    """Where the steps raise, the fused Compose raises the same (nothing is
    fused, nothing drawn before the error)."""
    img = Image.fromarray(R.natural_image(64, 48, 0))
    with pytest.raises(TypeError, match="PIL"):   # Normalize of a PIL image
        T.Compose([T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
                   T.Normalize([0.5], [0.5])])(img)
    t = T.ToImage()(img)
    with pytest.raises(ValueError, match="std"):
        T.Compose([T.ToDtype(torch.float32, scale=True), T.Normalize([0.5], [0.0])])(t)
    with pytest.raises(ValueError, match="channels"):
        T.Compose([T.ToDtype(torch.float32, scale=True), T.Normalize([0.5, 0.5], [1, 1])])(t)
    chain = [T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True),
             T.Normalize([0.5], [0.0])]
    states = []
    for run in (T.Compose(chain), lambda x: _one_by_one(chain, x)):
        torch.manual_seed(0)
        with pytest.raises(ValueError, match="std"):
            run(t)
        states.append(torch.get_rng_state())       # the flip drew once in both
    assert torch.equal(states[0], states[1])


# ---- PIL and numpy references -----------------------------------------------------------

PIL_FILTERS = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC,
               "box": Image.BOX, "hamming": Image.HAMMING, "lanczos": Image.LANCZOS}


@pytest.mark.parametrize("mode", list(PIL_FILTERS))
@pytest.mark.parametrize("path", JPEGS[:2])
def test_resize_of_pil_images_equals_pil(path, mode):
    img = Image.open(path).convert("RGB")
    img = img.crop((0, 0, min(img.width, 700), min(img.height, 500)))
    for size in ((120, 333), (500, 700), (999, 61)):
        want = img.resize((size[1], size[0]), PIL_FILTERS[mode])
        got = T.Resize(size, interpolation=T.InterpolationMode(mode))(img)
        assert got.mode == "RGB" and got.size == want.size
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    gray = img.convert("L")
    np.testing.assert_array_equal(np.asarray(T.Resize(77, interpolation=PIL_FILTERS[mode])(gray)),
                                  np.asarray(gray.resize(T._resized_size(gray.height, gray.width,
                                                                         77, None)[::-1],
                                                         PIL_FILTERS[mode])))


def test_pad_modes_equal_numpy():
    a = R.natural_image(37, 23, 5)
    for mode, np_mode in (("constant", "constant"), ("edge", "edge"), ("reflect", "reflect"),
                          ("symmetric", "symmetric")):
        for pad in (1, (3, 5), (2, 0, 7, 4), (22, 20)):
            if mode == "reflect" and max(T._pad_amounts(pad)) >= 23:
                continue
            l, t, r, b = T._pad_amounts(pad)
            got = T.Pad(pad, padding_mode=mode)(a)
            want = np.pad(a, ((t, b), (l, r), (0, 0)), mode=np_mode)
            np.testing.assert_array_equal(got, want, err_msg=f"{mode} {pad}")
    with pytest.raises(sluice.InvalidError, match="reflect"):
        T.Pad(30, padding_mode="reflect")(a)


def test_normalize_and_scale_equal_float32_numpy():
    a = R.natural_image(50, 40, 6)
    mean, std = np.float32([0.485, 0.456, 0.406]), np.float32([0.229, 0.224, 0.225])
    f = T.ToDtype(np.float32, scale=True)(a)
    np.testing.assert_array_equal(f, a.astype(np.float32) * np.float32(1.0 / 255))
    got = T.Normalize(mean.tolist(), std.tolist())(f)
    np.testing.assert_array_equal(got, (f - mean) / std)
    back = T.ToDtype(np.uint8, scale=True)(f)
    np.testing.assert_array_equal(back, a)


def test_views_give_the_results_of_copies():
    """Crops, flips and permutations of any strides are read in place."""
    a = R.natural_image(120, 90, 7)
    views = [a[::-1], a[:, ::-1], a[5:70, 9:100], a[::2, ::3], a[:, :, ::-1]]
    for v in views:
        c = np.ascontiguousarray(v)
        for t in (T.Resize(40), T.RandomHorizontalFlip(1.0), T.Pad(3, padding_mode="edge"),
                  T.ColorJitter(0.5, 0.5, 0.5, 0.2), T.Grayscale(3),
                  T.ToDtype(np.float32, scale=True)):
            torch.manual_seed(1)
            x = t(v)
            torch.manual_seed(1)
            y = t(c)
            np.testing.assert_array_equal(x, y, err_msg=repr(t))
    x = torch.from_numpy(a).permute(2, 0, 1)  # a CHW view of HWC memory
    torch.manual_seed(2)
    r1 = T.RandomResizedCrop(64)(x)
    torch.manual_seed(2)
    r2 = T.RandomResizedCrop(64)(x.contiguous())
    assert torch.equal(r1, r2)


def test_other_inputs_pass_and_checks_match_torchvision():
    x = torch.zeros((3, 8, 8), dtype=torch.uint8)
    assert T.RandomHorizontalFlip(1.0)(7) == 7
    out = T.Compose([T.CenterCrop(4), T.ToDtype(torch.float32, scale=True)])(x)
    assert out.shape == (3, 4, 4) and out.dtype == torch.float32
    img, label = T.RandomHorizontalFlip(1.0)(x, 3)
    assert label == 3
    with pytest.raises(ValueError):
        T.RandomHorizontalFlip(1.5)
    with pytest.raises(ValueError):
        T.ColorJitter(hue=0.7)
    with pytest.raises(ValueError):
        T.RandomRotation(-5)
    with pytest.raises(ValueError):
        T.Pad(3, padding_mode="wrap")
    with pytest.raises(TypeError, match="float"):
        T.Normalize([0.5], [0.5])(x)
    with pytest.raises(ValueError, match="zero"):
        T.Normalize([0.5], [0.0])(x.float())
    with pytest.raises(TypeError, match="uint8 or float32"):
        T.Resize(4)(x.double())
    with pytest.raises(TypeError, match="PIL mode"):
        T.Resize(4)(Image.new("CMYK", (8, 8)))
    with pytest.raises(ValueError, match="larger"):
        T.RandomCrop(20)(x)


def test_tone_operations_equal_pil_imageops_and_numpy():
    """On tensors, numpy arrays and strided views: equalize, posterize,
    solarize and invert give PIL's ImageOps bytes (the same tables as v2);
    autocontrast v2's float32 formula in numpy."""
    from PIL import ImageOps
    for path in JPEGS[:2]:
        a = np.asarray(Image.open(path).convert("RGB"))[:300, :400]
        low = (a // 3 + 70).astype(np.uint8)
        for arr in (a, low, np.ascontiguousarray(a[::-1, ::2])):
            img = Image.fromarray(np.ascontiguousarray(arr))
            t = torch.from_numpy(np.ascontiguousarray(arr)).permute(2, 0, 1)
            cases = [(T.RandomEqualize(1.0), ImageOps.equalize(img)),
                     (T.RandomInvert(1.0), ImageOps.invert(img))]
            cases += [(T.RandomPosterize(b, 1.0), ImageOps.posterize(img, b)) for b in (1, 4, 7)]
            cases += [(T.RandomSolarize(th, 1.0), ImageOps.solarize(img, th))
                      for th in (0, 77, 128, 255)]
            for tf, want in cases:
                want = np.asarray(want)
                np.testing.assert_array_equal(tf(arr), want, err_msg=repr(tf))
                np.testing.assert_array_equal(tf(t).permute(1, 2, 0).numpy(), want,
                                              err_msg=repr(tf))
            f = arr.astype(np.float32)
            lo, hi = f.min(axis=(0, 1)), f.max(axis=(0, 1))
            scale = (hi - lo) * np.float32(1.0 / 255.0)
            want = np.clip((f - lo) / scale, 0, 255).astype(np.uint8)
            np.testing.assert_array_equal(T.RandomAutocontrast(1.0)(arr), want)


def test_batches_get_one_set_of_draws():
    """A (N, C, H, W) tensor: each image as if transformed alone from the
    same seed, and the generator left where one image leaves it."""
    a = torch.from_numpy(R.natural_image(90, 70, 3)).permute(2, 0, 1)
    batch = torch.stack([a, a.flip(-1), a // 2])
    for tf in (T.RandomResizedCrop(32), T.ColorJitter(0.5, 0.5, 0.5, 0.2),
               T.RandomRotation(40, expand=True), T.TrivialAugmentWide(),
               T.RandAugment(num_ops=3), T.RandomErasing(1.0)):
        for seed in range(5):
            torch.manual_seed(seed)
            got = tf(batch.view(3, 1, *a.shape))
            after = torch.rand(1)
            want = []
            for img in batch:
                torch.manual_seed(seed)
                want.append(tf(img))
            assert torch.equal(torch.rand(1), after), (repr(tf), "a different number of draws")
            assert got.shape[:2] == (3, 1)
            assert torch.equal(got[:, 0], torch.stack(want)), (repr(tf), seed)


# ---- threads and the GIL ----------------------------------------------------------------

def test_transform_calls_release_the_gil(tmp_path):
    """Another Python thread runs while the kernels work (each call drops
    the GIL for the kernel; only argument handling holds it)."""
    big = torch.from_numpy(R.natural_image(1600, 1200, 8)).permute(2, 0, 1).contiguous()
    data = small_jpeg(1600, 1200, seed=8)
    path = str(tmp_path / "big.jpg")
    with open(path, "wb") as f:
        f.write(data)
    jobs = [lambda: T.Resize(1000, interpolation=T.InterpolationMode.BICUBIC)(big),
            lambda: T.ColorJitter(0.4, 0.4, 0.4, 0.1)(big),
            lambda: T.ToDtype(torch.float32, scale=True)(big),
            lambda: T.RandomRotation(33)(big),
            lambda: T.decode_image(data),
            lambda: T.Compose([T.DecodeJPEG(), T.Resize(900)])(data),
            lambda: T.Compose([T.DecodeJPEG(), T.Resize(900)])(path)]
    for job in jobs:
        def work(job=job):
            for _ in range(3):
                job()
        assert Counter().during(work) > MIN_COUNT


@pytest.mark.parametrize("src", ["bytes", "path"])
def test_threads_get_the_single_thread_results(src, tmp_path):
    """The kernels keep no state between calls: six threads decoding,
    resizing and cropping at once get what one thread gets (given paths,
    each thread reads into its own buffer)."""
    data = [small_jpeg(320 + 8 * s, 240, seed=s) for s in range(6)]
    if src == "path":
        data = _photo_files(tmp_path, 6)
    det = T.Compose([T.DecodeJPEG(), T.Resize(200), T.CenterCrop(160),
                     T.ToDtype(torch.float32, scale=True)])
    want = [det(d) for d in data]
    got = [None] * len(data)
    errors = []

    def run(i):
        try:
            for _ in range(5):
                got[i] = det(data[i])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(data))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for a, b in zip(got, want):
        assert torch.equal(a, b)


# ---- the per-sample path: draws, file reads, the plan -----------------------------------

def test_draws_are_torchvisions():
    """The draws on this thread's one-element tensors give torchvision's
    numbers (torch.empty(1).uniform_, torch.exp of one, torch.randint,
    torch.rand(1) >= p) and leave the generator where torchvision's calls
    leave it."""
    ps = [0.5, 0.7, 0.9, 0.3, 1 / 3, 0.1, 0.0, 1.0, 1, 0]
    for seed in range(40):
        torch.manual_seed(seed)
        want = []
        for k, p in enumerate(ps):
            want.append(torch.empty(1).uniform_(0.08, 1.0).item())
            want.append(torch.exp(torch.empty(1).uniform_(-0.2877, 0.2877)).item())
            want.append(torch.randint(0, 37 + 1000 * k, size=(1,)).item())
            want.append(not (torch.rand(1) >= p))
        end = torch.get_rng_state()
        torch.manual_seed(seed)
        got = []
        for k, p in enumerate(ps):
            got.append(T._draw_uniform(0.08, 1.0))
            got.append(T._draw_bufs()[0].uniform_(-0.2877, 0.2877).exp_().item())
            got.append(T._draw_int(37 + 1000 * k))
            got.append(T._draw_applies(p))
        assert got == want, seed
        assert torch.equal(torch.get_rng_state(), end)
    # the comparison with p is torch's: p rounded to float32 first (0.7 and 0.9
    # round down, 0.1 and 0.3 up), on both sides of float32(p)
    for p in (0.7, 0.9, 0.1, 0.3, 1 / 3, 0.5, 0.999999999, 1e-9):
        p32 = np.float32(p)
        for x in (np.nextafter(p32, np.float32(0)), p32, np.nextafter(p32, np.float32(1))):
            assert T._below(float(x), p) == (not bool(torch.tensor([x]) >= p)), (p, x)


def test_rrc_params_equal_torchvisions_formula():
    """RandomResizedCrop.params against torchvision's get_params written out
    with its own torch calls, the generator left at the same place."""
    import math

    def tv_params(h, w, scale, ratio):
        area = h * w
        log_ratio = torch.log(torch.tensor(ratio))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
            aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
            cw = int(round(math.sqrt(target_area * aspect_ratio)))
            ch = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < cw <= w and 0 < ch <= h:
                i = torch.randint(0, h - ch + 1, size=(1,)).item()
                j = torch.randint(0, w - cw + 1, size=(1,)).item()
                return i, j, ch, cw
        return None
    for scale, ratio in (((0.08, 1.0), (3 / 4, 4 / 3)), ((0.5, 1.0), (0.2, 5.0)),
                         ((0.9, 1.0), (1.0, 1.0))):
        t = T.RandomResizedCrop(224, scale=scale, ratio=ratio)
        for seed in range(60):
            h, w = 200 + 7 * seed, 480 - 3 * seed
            torch.manual_seed(seed)
            want = tv_params(h, w, scale, ratio)
            end = torch.get_rng_state()
            torch.manual_seed(seed)
            got = t.params(h, w)
            if want is not None:
                assert got == want, (scale, ratio, seed)
                assert torch.equal(torch.get_rng_state(), end)
    t.ratio = (0.5, 2.0)            # a new ratio is seen after the first call
    torch.manual_seed(1)
    want = tv_params(300, 400, t.scale, t.ratio)
    torch.manual_seed(1)
    assert t.params(300, 400) == want


def _photo_files(tmp_path, n=3):
    out = []
    for s in range(n):
        f = tmp_path / f"p{s}.jpg"
        f.write_bytes(small_jpeg(320 + 16 * s, 240, seed=s))
        out.append(str(f))
    return out


def test_paths_read_in_c_equal_bytes(tmp_path):
    """A path is read by the C call into the thread's buffer: the fused and
    plain decodes equal those of the file's bytes, str and PathLike, and a
    read between the header call and the decode (another path on the same
    thread) makes the decode read its file again, not decode the other."""
    import pathlib
    paths = _photo_files(tmp_path)
    chain = [T.DecodeJPEG(), T.RandomResizedCrop(96), T.RandomHorizontalFlip(),
             T.ToDtype(torch.float32, scale=True), T.Normalize([0.5, 0.4, 0.3], [0.2, 0.3, 0.4])]
    tf = T.Compose(chain)
    for p in paths + [pathlib.Path(paths[0])]:
        data = open(p, "rb").read()
        assert torch.equal(T.decode_image(p), T.decode_image(data))
        for seed in range(3):
            torch.manual_seed(seed)
            a = tf(p)
            torch.manual_seed(seed)
            assert torch.equal(a, tf(data))
    # the token: a decode whose buffer another read replaced reads its file again
    h, w, _, _, tok = T._sluice.tf_read_info(paths[0], False, 0)
    T._sluice.tf_read_info(paths[2], False, 0)
    out = torch.empty((h, w, 3), dtype=torch.uint8)
    T._sluice.tf_decode(paths[0], (out.data_ptr(), T._U8, h, w, 3, w * 3, 3, 1),
                        (0.0, 0.0, float(w), float(h)), (0, 0, w, h), T._SL_BILINEAR, None, None,
                        0, False, 0, tok)
    assert torch.equal(out.permute(2, 0, 1), T.decode_image(open(paths[0], "rb").read()))
    # a file above 16 MB (a JPEG with 17 MB after its end: the thread gives
    # back a buffer that large before it reads a small file), then small ones
    big = tmp_path / "big.jpg"
    big.write_bytes(small_jpeg(640, 480, seed=5) + bytes(17 << 20))
    for p in (str(big), paths[1], str(big), paths[0]):
        assert torch.equal(T.decode_image(p), T.decode_image(open(p, "rb").read()))


def test_path_errors_name_the_file_then_the_next_decodes(tmp_path):
    paths = _photo_files(tmp_path, 1)
    good = paths[0]
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(open(good, "rb").read()[:300])
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    fused = T.Compose([T.DecodeJPEG(), T.RandomResizedCrop(64),
                       T.ToDtype(torch.float32, scale=True)])
    torch.manual_seed(0)
    want = fused(open(good, "rb").read())
    for fn in (fused, T.decode_image):
        with pytest.raises(FileNotFoundError) as e:
            fn(str(tmp_path / "missing.jpg"))
        assert e.value.filename == str(tmp_path / "missing.jpg")
        with pytest.raises(IsADirectoryError):
            fn(str(tmp_path))
        for f in (bad, empty):
            with pytest.raises(sluice.Error) as e:
                fn(str(f))
            assert str(f) in str(e.value) and "decode" in str(e.value), str(e.value)
        torch.manual_seed(0)
        assert torch.equal(fused(good), want)


def test_the_plan_follows_changes_to_the_chain():
    """Compose plans its fused decode once; what a user changes afterwards
    (the list, a Normalize's values in place, an interpolation, a
    probability) counts on the next call, as it does unfused."""
    data = small_jpeg(500, 375, seed=4)
    full = T.decode_image(data)
    norm = T.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25])
    rrc = T.RandomResizedCrop(150, scale=(0.3, 0.6))
    flip = T.RandomHorizontalFlip(0.5)
    tail = [rrc, flip, T.ToDtype(torch.float32, scale=True), norm]
    tf = T.Compose([T.DecodeJPEG()] + tail)

    def check(seed=0):
        torch.manual_seed(seed)
        a = tf(data)
        torch.manual_seed(seed)
        b = _one_by_one(tf.transforms[1:], full)
        assert torch.equal(a, b)
    check()
    norm.mean[1] = 0.1              # in place
    check()
    norm.std = [0.5]                # rebound, one value for every channel
    check()
    flip.p = 1.0
    check()
    rrc.interpolation = T.InterpolationMode.NEAREST     # no longer fused
    calls = _Calls(T._sluice)
    orig = T._sluice
    T._sluice = calls
    try:
        check()
    finally:
        T._sluice = orig
    assert calls.n > 2              # decode, resize, flip + float: not one call
    rrc.interpolation = T.InterpolationMode.BICUBIC
    tf.transforms.append(T.RandomVerticalFlip(1.0))
    check(3)
    tf.transforms[1:] = [T.CenterCrop(100), T.ToDtype(torch.float32, scale=True)]
    check(4)
