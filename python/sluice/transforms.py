"""sluice.transforms: torchvision.transforms.v2's image transforms, run by
sluice's C kernels.

Swap one import and keep the rest of a Dataset::

    import sluice.transforms as T              # was: import torchvision.transforms.v2 as T

    train_tf = T.Compose([
        T.DecodeJPEG(),                         # bytes or a path -> CHW uint8 tensor
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(),
        T.ToDtype(torch.float32, scale=True),
        T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])

The classes take torchvision's constructor arguments with its defaults and
give its results: on ``torch.Tensor`` images (CHW, uint8 or float32), on
numpy HWC arrays (``(H, W, C)`` or ``(H, W)``; the same arithmetic as on a
tensor, the result an array of the same layout) and on PIL images (modes
L, RGB, RGBA; the result a PIL image, as torchvision gives). Random draws
come from torch's global generator in torchvision's order, so after
``torch.manual_seed(s)`` a run draws torchvision's crop boxes, flips,
angles and colour factors. Every kernel call releases the GIL, and the
extension declares free-threading support: ``import sluice.transforms``
leaves the GIL off on a free-threaded Python (torchvision turns it on).

``Compose`` fuses ``DecodeJPEG`` with the crop or resize after it (and a
horizontal flip, ``ToDtype(float32, scale=True)`` and ``Normalize`` after
that): only the part of the JPEG the crop needs is decoded, at a reduced DCT
scale when the output allows, straight into the normalized tensor. On an
image already decoded, a flip, ``ToImage``, ``ToDtype(float32)`` and
``Normalize`` in a row run as one pass over the pixels.

docs/PYTHON.md ("sluice.transforms") lists the classes, and docs/OPS.md
("Transforms") each kernel's reference and tolerance.
"""
import enum
import math
import numbers
import os
import threading

import numpy as np

from . import _sluice

__all__ = [
    "Compose", "RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop", "RandomHorizontalFlip",
    "RandomVerticalFlip", "RandomRotation", "Pad", "ColorJitter", "RandomGrayscale", "Grayscale",
    "ToImage", "ToDtype", "Normalize", "RandomErasing", "DecodeJPEG", "decode_image",
    "InterpolationMode", "ImageReadMode", "RandomPosterize", "RandomSolarize",
    "RandomAdjustSharpness", "RandomAutocontrast", "RandomEqualize", "RandomInvert",
    "AutoAugment", "AutoAugmentPolicy", "RandAugment", "TrivialAugmentWide",
]

_torch = None


def _tm():
    """torch, imported on first use (numpy and PIL users of the deterministic
    transforms do not need it; every random draw does)."""
    global _torch
    if _torch is None:
        try:
            import torch
        except ImportError as e:  # pragma: no cover - torch is there in the tests
            raise ImportError("sluice.transforms: this needs torch (random draws come from "
                              "torch's generator, as torchvision's do): pip install torch") from e
        _torch = torch
    return _torch


class InterpolationMode(enum.Enum):
    """torchvision's InterpolationMode (same names and values); torchvision's
    own enum, its string values and PIL's integer filters are accepted too."""
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


class ImageReadMode(enum.Enum):
    """torchvision.io.ImageReadMode's modes that decode_image takes."""
    UNCHANGED = 0
    GRAY = 1
    RGB = 3


# sl_interp values (include/sluice.h)
_SL_BILINEAR, _SL_AREA, _SL_NEAREST, _SL_BICUBIC, _SL_LANCZOS, _SL_HAMMING = 1, 2, 3, 4, 5, 6
_SL_NEAREST_TORCH, _SL_NEAREST_EXACT = 7, 8
_PIL_INTS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
_PIL_FILTER = {"nearest": _SL_NEAREST, "nearest-exact": _SL_NEAREST, "bilinear": _SL_BILINEAR,
               "bicubic": _SL_BICUBIC, "box": _SL_AREA, "hamming": _SL_HAMMING,
               "lanczos": _SL_LANCZOS}
_U8, _F32 = 1, 10                       # sl_dtype
_FLIP_H, _FLIP_V, _SCALE = 1, 2, 4      # SL_VIEW_* flags
_PAD_MODES = {"constant": 0, "edge": 1, "reflect": 2, "symmetric": 3}
_ADJ_BRIGHTNESS, _ADJ_CONTRAST, _ADJ_SATURATION, _ADJ_HUE, _ADJ_GRAY = 1, 2, 3, 4, 5


def _interp_name(mode):
    if isinstance(mode, InterpolationMode):
        return mode.value
    if isinstance(mode, bool):
        raise TypeError(f"interpolation: expected an InterpolationMode, got {mode!r}")
    if isinstance(mode, int):
        if mode not in _PIL_INTS:
            raise ValueError(f"interpolation: unknown PIL filter {mode}")
        return _PIL_INTS[mode]
    v = getattr(mode, "value", mode)
    if isinstance(v, str) and v.lower() in _PIL_FILTER:
        return v.lower()
    raise ValueError(f"interpolation: expected one of {sorted(_PIL_FILTER)}, got {mode!r}")


# ---- images of the three kinds ------------------------------------------------------

_PIL_Image = None


def _pil():
    global _PIL_Image
    if _PIL_Image is None:
        try:
            from PIL import Image
        except ImportError:
            Image = False
        _PIL_Image = Image
    return _PIL_Image


def _kind(x):
    """'tensor', 'numpy', 'pil', or None (passed through unchanged, as
    torchvision passes what it does not transform)."""
    if _torch is not None and isinstance(x, _torch.Tensor):
        return "tensor"
    if isinstance(x, np.ndarray):
        return "numpy"
    if type(x).__module__.startswith("torch"):
        _tm()
        if isinstance(x, _torch.Tensor):
            return "tensor"
    P = _pil()
    if P and isinstance(x, P.Image):
        return "pil"
    return None


def _dtype_code(a, ndim, shape_msg, u8, f32):
    """sl_dtype of a numpy array or tensor `a` of `ndim` dims (uint8 or float32)."""
    if a.ndim != ndim:
        raise TypeError(f"sluice.transforms: {shape_msg}, got shape {tuple(a.shape)}")
    if a.dtype == u8:
        return _U8
    if a.dtype == f32:
        return _F32
    raise TypeError(f"sluice.transforms: images are uint8 or float32, got {a.dtype}")


class _Img:
    """An image of any kind as the C kernels see it: a strided view plus
    what to give back (kind, dtype, whether a numpy array had no channel
    axis, a PIL mode)."""
    __slots__ = ("kind", "obj", "h", "w", "c", "dtype", "view", "squeeze", "mode", "sub")

    def __init__(self, x, kind=None):
        kind = kind or _kind(x)
        self.kind, self.squeeze, self.mode, self.sub = kind, False, None, None
        if kind == "pil":
            mode = x.mode
            if mode not in ("L", "RGB", "RGBA"):
                raise TypeError(f"sluice.transforms: PIL mode {mode!r} is not supported "
                                f"(L, RGB, RGBA); convert it first, e.g. img.convert('RGB')")
            self.mode = mode
            x = np.asarray(x)
            kind = "numpy"
        if kind == "numpy":
            a = x
            if a.ndim == 2:
                a = a[:, :, None]
                self.squeeze = True
            dt = _dtype_code(a, 3, "a numpy image is (H, W) or (H, W, C)", np.uint8, np.float32)
            h, w, c = a.shape
            isz = a.itemsize
            s = a.strides
            self.view = (a.ctypes.data, dt, h, w, c, s[0] // isz, s[1] // isz, s[2] // isz)
            self.obj = a
        elif kind == "tensor":
            t = x
            if _torch is None:
                _tm()
            dt = _dtype_code(t, 3, "a tensor image is (C, H, W)", _torch.uint8, _torch.float32)
            if t.device.type != "cpu":
                raise TypeError(f"sluice.transforms: runs on CPU tensors, got one on "
                                f"{t.device}")
            c, h, w = t.shape
            s = t.stride()
            self.view = (t.data_ptr(), dt, h, w, c, s[1], s[2], s[0])
            self.obj = t
            if type(t) is not _torch.Tensor:
                self.sub = type(t)
        else:
            raise TypeError(f"sluice.transforms: expected a torch.Tensor, numpy array or PIL "
                            f"image, got {type(x).__name__}")
        self.h, self.w, self.c, self.dtype = self.view[2], self.view[3], self.view[4], self.view[1]

    # a new image of this kind (and layout family): (its view, the object)
    def new(self, h, w, c=None, dtype=None):
        c = self.c if c is None else c
        dt = self.dtype if dtype is None else dtype
        if self.kind == "tensor":
            o = _torch.empty((c, h, w), dtype=_torch.uint8 if dt == _U8 else _torch.float32)
            return (o.data_ptr(), dt, h, w, c, w, 1, h * w), o
        o = np.empty((h, w, c), dtype=np.uint8 if dt == _U8 else np.float32)
        return (o.ctypes.data, dt, h, w, c, w * c, c, 1), o

    def give(self, o):
        """The result in the caller's kind."""
        if self.kind == "tensor":
            return o.as_subclass(self.sub) if self.sub is not None else o
        if self.squeeze and o.shape[2] == 1:
            o = o[:, :, 0]
        if self.mode is not None:
            P = _pil()
            if o.dtype != np.uint8:
                raise TypeError("sluice.transforms: a PIL image stays uint8")
            mode = {1: "L", 3: "RGB", 4: "RGBA"}[o.shape[2] if o.ndim == 3 else 1]
            return P.fromarray(o if o.ndim == 2 or o.shape[2] > 1 else o[:, :, 0], mode)
        return o

    def crop_view(self, top, left, h, w):
        """The region as a view (no copy) of the same kind; inside the image."""
        if self.kind == "tensor":
            return self.obj[:, top:top + h, left:left + w]
        return self.obj[top:top + h, left:left + w, :]


def _wrap_same(img, o):
    """For results that are views or inputs of the same object family."""
    return img.give(o)


# ---- the batch row a loader offers ------------------------------------------------------

# sluice.torch.DataLoader's map-style collation (_torch_collate._Stream)
# offers, around one __getitem__ on this thread, the row of the batch tensor
# the sample's image will be copied into. The first fused Compose output of
# that shape goes straight into it (the loader then finds the sample already
# in place and skips the copy): one 602 KB copy a sample and the page faults
# of its fresh memory fewer. Any other use of the row is harmless: the
# loader copies whatever __getitem__ returns into it afterwards.
_offered = threading.local()


def _offer(row):
    """Offer `row` (a contiguous float32 (C, H, W) tensor, or None to
    withdraw) to the next fused output on this thread."""
    _offered.row = row


def _float_out(c, h, w):
    """A float32 (c, h, w) tensor for a fused output: the offered row when
    it has that shape (taken once), else a new one."""
    row = getattr(_offered, "row", None)
    if row is not None and tuple(row.shape) == (c, h, w):
        _offered.row = None
        return row
    return _torch.empty((c, h, w), dtype=_torch.float32)


# ---- functional kernels (one C call each) -------------------------------------------

def _resized_size(h, w, size, max_size):
    """torchvision's output size for Resize(size, max_size)."""
    if size is None:
        if max_size is None:
            raise ValueError("size and max_size cannot both be None")
        if h >= w:
            return max_size, int(max_size * w / h)
        return int(max_size * h / w), max_size
    if isinstance(size, numbers.Integral):
        size = [int(size)]
    size = list(size)
    if len(size) == 1:
        short, long = (w, h) if w <= h else (h, w)
        req = size[0]
        if short == req and max_size is None:
            return h, w
        new_short, new_long = req, int(req * long / short)
        if max_size is not None:
            if max_size <= req:
                raise ValueError(f"max_size = {max_size} must be strictly greater than the "
                                 f"requested size for the smaller edge size = {size}")
            if new_long > max_size:
                new_short, new_long = int(max_size * new_short / new_long), max_size
        return (new_long, new_short) if w <= h else (new_short, new_long)
    if len(size) != 2:
        raise ValueError(f"size: expected an int or a sequence of 1 or 2 ints, got {size}")
    if max_size is not None:
        raise ValueError("max_size is only supported for an int size or None")
    return int(size[0]), int(size[1])


def _resize(img, oh, ow, interp, antialias):
    """img (an _Img) resized to oh x ow: the result object."""
    if (oh, ow) == (img.h, img.w):
        return img.obj if img.kind == "tensor" else img.obj
    name = _interp_name(interp)
    if img.mode is not None:            # PIL: PIL's filters, antialias always on
        code, aa = _PIL_FILTER[name], 1
    else:
        if name not in ("nearest", "nearest-exact", "bilinear", "bicubic"):
            raise ValueError(f"Interpolation mode {name} is unsupported with Tensor input")
        code = {"nearest": _SL_NEAREST_TORCH, "nearest-exact": _SL_NEAREST_EXACT,
                "bilinear": _SL_BILINEAR, "bicubic": _SL_BICUBIC}[name]
        aa = 1 if antialias is None or antialias else 0
    dst, o = img.new(oh, ow)
    _sluice.tf_resize(img.view, dst, code, aa)
    return o


def _size2(size, name="size"):
    if isinstance(size, numbers.Integral):
        return int(size), int(size)
    size = list(size)
    if len(size) == 1:
        return int(size[0]), int(size[0])
    if len(size) != 2:
        raise ValueError(f"{name}: expected an int or a sequence of 1 or 2 ints, got {size}")
    return int(size[0]), int(size[1])


def _crop(img, top, left, height, width):
    """torchvision's crop: a view inside the image, zero padding outside."""
    if top >= 0 and left >= 0 and top + height <= img.h and left + width <= img.w:
        return img.crop_view(top, left, height, width)
    dst, o = img.new(height, width)
    _sluice.tf_fill(dst, [0.0])
    t0, l0 = max(top, 0), max(left, 0)
    t1, l1 = min(top + height, img.h), min(left + width, img.w)
    if t1 > t0 and l1 > l0:
        sub = _Img(img.crop_view(t0, l0, t1 - t0, l1 - l0), img.kind if img.kind == "tensor"
                   else "numpy")
        part = _Img(o[:, t0 - top:t1 - top, l0 - left:l1 - left] if img.kind == "tensor"
                    else o[t0 - top:t1 - top, l0 - left:l1 - left, :])
        _sluice.tf_convert(sub.view, part.view, 0)
    return o


def _pad_amounts(padding):
    """torchvision's padding forms -> (left, top, right, bottom)."""
    if isinstance(padding, numbers.Integral):
        p = int(padding)
        return p, p, p, p
    padding = list(padding)
    if len(padding) == 1:
        p = int(padding[0])
        return p, p, p, p
    if len(padding) == 2:
        return int(padding[0]), int(padding[1]), int(padding[0]), int(padding[1])
    if len(padding) == 4:
        return tuple(int(v) for v in padding)
    raise ValueError(f"Padding must be an int or a 1, 2, or 4 element tuple, not a "
                     f"{len(padding)} element tuple")


def _fill_values(fill, c):
    if fill is None:
        return [0.0] * c
    if isinstance(fill, numbers.Number):
        return [float(fill)] * c
    f = [float(v) for v in fill]
    if len(f) == 1:
        return f * c
    if len(f) != c:
        raise ValueError(f"fill: {len(f)} values for an image of {c} channels")
    return f


def _pad(img, padding, fill, mode):
    left, top, right, bottom = _pad_amounts(padding)
    if mode not in _PAD_MODES:
        raise ValueError(f"padding_mode: expected one of {list(_PAD_MODES)}, got {mode!r}")
    # negative padding crops (as torch's pad does)
    if min(left, top, right, bottom) < 0:
        t0, l0 = max(-top, 0), max(-left, 0)
        h = img.h - t0 - max(-bottom, 0)
        w = img.w - l0 - max(-right, 0)
        img = _Img(img.crop_view(t0, l0, h, w), img.kind) if img.mode is None else \
            _Img(img.give(img.crop_view(t0, l0, h, w)))
        left, top, right, bottom = max(left, 0), max(top, 0), max(right, 0), max(bottom, 0)
    dst, o = img.new(img.h + top + bottom, img.w + left + right)
    _sluice.tf_pad(img.view, dst, top, left, _PAD_MODES[mode], _fill_values(fill, img.c))
    return img, o


def _copy(img, flags, dtype=None):
    dst, o = img.new(img.h, img.w, dtype=dtype)
    _sluice.tf_convert(img.view, dst, flags)
    return o


# The draws below are torchvision's generator calls, each on a one-element
# tensor this thread keeps instead of a new one a draw: torch.empty(1)
# .uniform_(a, b) is buf.uniform_(a, b); torch.rand(1) is buf.uniform_(0, 1);
# torch.randint(0, n, (1,)) is ibuf.random_(0, n) (torch builds rand and
# randint exactly so); torch.exp(t) is t.exp_() (the same kernel in place).
# The same numbers from the same generator state, with a third of the
# torch calls and no tensor made (tests/python/test_transforms.py,
# test_draws_are_torchvisions).
_scratch = threading.local()


def _draw_bufs():
    """This thread's (float32, int64) one-element tensors for draws."""
    try:
        return _scratch.f, _scratch.i
    except AttributeError:
        torch = _tm()
        _scratch.f, _scratch.i = torch.empty(1), torch.empty(1, dtype=torch.int64)
        return _scratch.f, _scratch.i


def _draw_uniform(lo, hi):
    """torch.empty(1).uniform_(lo, hi).item()"""
    return _draw_bufs()[0].uniform_(lo, hi).item()


def _draw_int(n):
    """torch.randint(0, n, size=(1,)).item()"""
    return _draw_bufs()[1].random_(0, n).item()


def _area_ratio_draw(t, area):
    """One try of RandomResizedCrop's and RandomErasing's draws: an area
    `area * U(scale)` and an aspect ratio `exp(U(log(ratio)))`, each from a
    float32 torch.empty(1).uniform_ as torchvision draws them (t has
    .scale, .ratio and a cached ._log_ratio)."""
    lr = t._log_ratio
    if lr is None or lr[0] != t.ratio:
        torch = _tm()
        v = torch.log(torch.tensor(t.ratio))
        lr = t._log_ratio = (t.ratio, float(v[0]), float(v[1]))
    f = _draw_bufs()[0]
    target = area * f.uniform_(t.scale[0], t.scale[1]).item()
    aspect = f.uniform_(lr[1], lr[2]).exp_().item()
    return target, aspect


_P32 = {}


def _draw_applies(p):
    """_RandomApplyTransform's draw: applies unless torch.rand(1) >= p. torch
    compares a float32 tensor with p cast to float32, so the drawn float32
    is compared with p rounded to float32 (not with p itself)."""
    if type(p) is not float and type(p) is not int:
        return not (_tm().rand(1) >= p)     # a tensor or numpy scalar: torch's own rules
    return _below(_draw_bufs()[0].uniform_(0.0, 1.0).item(), p)


def _below(x, p):
    """not (float32 tensor [x] >= p), for a float32 value x and a Python
    number p: p rounded to float32 (kept per p), then compared."""
    p32 = _P32.get(p)
    if p32 is None:
        p32 = _P32[p] = float(np.float32(p))
    return x < p32


def _pure_tensors_passed(inputs):
    """v2's rule for plain tensors among several inputs: the first is the
    image, unless a tv_tensors.Image or Video or a PIL image is there; the
    other plain tensors pass untouched. Returns their indices."""
    pure = [i for i, x in enumerate(inputs) if _kind(x) == "tensor" and type(x) is _torch.Tensor]
    if any(_kind(x) == "pil" or (_kind(x) == "tensor" and type(x) is not _torch.Tensor and
                                 _is_image_tensor(x)) for x in inputs):
        return set(pure)
    return set(pure[1:])


def _batched(fn, x):
    """fn (one image's forward) over a (..., C, H, W) tensor: each image from
    the same state of torch's generator, so that all draw what v2 draws once
    for the batch, and the generator left where one image leaves it."""
    torch = _tm()
    lead = tuple(x.shape[:-3])
    flat = x.reshape((-1,) + tuple(x.shape[-3:]))
    if flat.shape[0] == 0:
        return x
    state = torch.get_rng_state()
    outs = []
    for i in range(flat.shape[0]):
        if i:
            torch.set_rng_state(state)
        outs.append(fn(flat[i]).as_subclass(torch.Tensor))
    out = torch.stack(outs)
    out = out.reshape(lead + tuple(out.shape[1:]))
    return out if type(x) is torch.Tensor else out.as_subclass(type(x))


# ---- decoding -------------------------------------------------------------------------

def _encoded(data):
    """bytes, or (address, length) plus the object that keeps it alive."""
    if isinstance(data, bytes):
        return data, None
    if isinstance(data, (str, os.PathLike)):
        with open(data, "rb") as f:
            return f.read(), None
    if _torch is not None and isinstance(data, _torch.Tensor):
        if data.dtype != _torch.uint8 or data.ndim != 1:
            raise TypeError("decode: a tensor of encoded bytes is 1-D uint8")
        t = data.contiguous()
        return (t.data_ptr(), t.numel()), t
    try:
        a = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else \
            np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    except (TypeError, ValueError) as e:
        raise TypeError(f"decode: expected bytes, a path, a buffer or a 1-D uint8 tensor, "
                        f"got {type(data).__name__}") from e
    return (a.ctypes.data, a.size), a


def _read_mode(mode):
    if isinstance(mode, ImageReadMode):
        return mode.name
    name = getattr(mode, "name", mode)
    if isinstance(name, str) and name.upper() in ("UNCHANGED", "GRAY", "RGB"):
        return name.upper()
    raise ValueError(f"mode: expected ImageReadMode.UNCHANGED, GRAY or RGB, got {mode!r}")


def _decode_channels(mode, info_channels):
    if mode == "RGB":
        return 3
    if mode == "GRAY":
        return 1
    return 1 if info_channels == 1 else 3


def decode_image(input, mode=ImageReadMode.UNCHANGED, apply_exif_orientation=False,
                 max_pixels=0):
    """Decode a JPEG, PNG or WebP (found from the bytes) into a (C, H, W)
    uint8 torch tensor, as torchvision.io.decode_image: ``input`` is bytes, a
    path, a buffer or a 1-D uint8 tensor; ``mode`` UNCHANGED (RGB, or one
    channel for a grey image), RGB or GRAY. The pixels equal PIL's
    ``Image.open(f).convert("RGB")``. The tensor is a CHW view of HWC memory,
    as torchvision's decoders return. Raises sluice.DecodeError naming the
    cause (and the file, for a path) for damaged data, sluice.LimitError
    above ``max_pixels`` (0: 64 Mpx), OSError for a file that cannot be
    read."""
    torch = _tm()
    m = _read_mode(mode)
    exif, maxp = bool(apply_exif_orientation), int(max_pixels)
    if isinstance(input, (str, os.PathLike)):    # read by the C call; errors name the file
        h, w, ch, _, token = _sluice.tf_read_info(input, exif, maxp)
        data, keep, more = input, None, (token,)
    else:
        data, keep = _encoded(input)
        h, w, ch, _ = _sluice.tf_decode_info(data, exif, maxp)
        more = ()
    c = _decode_channels(m, ch)
    out = torch.empty((h, w, c), dtype=torch.uint8)
    dst = (out.data_ptr(), _U8, h, w, c, w * c, c, 1)
    _sluice.tf_decode(data, dst, (0.0, 0.0, float(w), float(h)), (0, 0, w, h), _SL_BILINEAR,
                      None, None, 0, exif, maxp, *more)
    del keep
    return out.permute(2, 0, 1)


class Transform:
    """Base of the transforms: ``t(x)`` applies it; inputs it does not
    transform (labels, boxes, other objects) pass through unchanged. A
    tensor of more than 3 dimensions, (..., C, H, W), is a batch: every
    image gets the same random draws, as torchvision v2 gives them."""

    def __call__(self, *inputs):
        if len(inputs) == 1:
            return self._forward_any(inputs[0])
        # one set of draws per call, as v2: each input from the same state of
        # torch's generator, which is left where the image's draws leave it
        passed = _pure_tensors_passed(inputs)
        torch = _torch
        state = end = torch.get_rng_state() if torch is not None else None
        out = []
        for i, x in enumerate(inputs):
            if i in passed:
                out.append(x)
                continue
            if state is not None and i:
                torch.set_rng_state(state)
            out.append(self._forward_any(x))
            if state is not None and _kind(x) is not None:
                end = torch.get_rng_state()
        if state is not None:
            torch.set_rng_state(end)
        return tuple(out)

    def _forward_any(self, x):
        if getattr(x, "ndim", 0) > 3 and _kind(x) == "tensor":
            return _batched(self.forward, x)
        return self.forward(x)

    def forward(self, x):
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._repr_items())
        return f"{type(self).__name__}({args})"

    def _repr_items(self):
        return [(k, v) for k, v in vars(self).items() if not k.startswith("_")]


class DecodeJPEG(Transform):
    """Encoded image (bytes, path, buffer, 1-D uint8 tensor) -> (C, H, W) uint8
    tensor (decode_image). In a Compose, followed by a crop or a resize, only
    the region is decoded (see the module's doc)."""

    def __init__(self, mode=ImageReadMode.RGB, apply_exif_orientation=False, max_pixels=0):
        self.mode = _read_mode(mode)
        self.apply_exif_orientation = bool(apply_exif_orientation)
        self.max_pixels = int(max_pixels)

    def forward(self, x):
        if _kind(x) is not None and not (_torch is not None and isinstance(x, _torch.Tensor)
                                         and x.ndim == 1):
            return x  # already decoded
        return decode_image(x, self.mode, self.apply_exif_orientation, self.max_pixels)


# ---- geometry -------------------------------------------------------------------------

class Resize(Transform):
    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
                 antialias=True):
        if size is not None and not isinstance(size, numbers.Integral):
            size = list(size)
            if len(size) not in (1, 2):
                raise ValueError(f"size can be an integer, a sequence of one or two integers, "
                                 f"or None, but got {size} instead.")
        self.size = size
        self.interpolation = interpolation
        _interp_name(interpolation)
        self.max_size = max_size
        self.antialias = antialias

    def forward(self, x):
        kind = _kind(x)
        if kind is None:
            return x
        img = _Img(x, kind)
        oh, ow = _resized_size(img.h, img.w, self.size, self.max_size)
        if (oh, ow) == (img.h, img.w):
            return x
        return img.give(_resize(img, oh, ow, self.interpolation, self.antialias))


class CenterCrop(Transform):
    def __init__(self, size):
        self.size = _size2(size)

    @staticmethod
    def box(h, w, ch, cw):
        """torchvision's centre crop offsets (round half to even; a crop larger
        than the image pads, putting the extra (c - s) // 2 on the top/left)."""
        top = -((ch - h) // 2) if ch > h else int(round((h - ch) / 2.0))
        left = -((cw - w) // 2) if cw > w else int(round((w - cw) / 2.0))
        return top, left

    def forward(self, x):
        kind = _kind(x)
        if kind is None:
            return x
        img = _Img(x, kind)
        ch, cw = self.size
        top, left = self.box(img.h, img.w, ch, cw)
        return img.give(_crop(img, top, left, ch, cw))


class RandomCrop(Transform):
    def __init__(self, size, padding=None, pad_if_needed=False, fill=0,
                 padding_mode="constant"):
        self.size = _size2(size)
        if padding_mode not in _PAD_MODES:
            raise ValueError(f"padding_mode: expected one of {list(_PAD_MODES)}")
        self.padding = None if padding is None else _pad_amounts(padding)  # l, t, r, b
        self.pad_if_needed = pad_if_needed
        self.fill = fill
        self.padding_mode = padding_mode

    def _params(self, h, w):
        torch = _tm()
        pl, pt, pr, pb = self.padding if self.padding is not None else (0, 0, 0, 0)
        ph, pw = h + pt + pb, w + pl + pr
        ch, cw = self.size
        if self.pad_if_needed:
            if ph < ch:
                d = ch - ph
                pt, pb, ph = pt + d, pb + d, ph + 2 * d
            if pw < cw:
                d = cw - pw
                pl, pr, pw = pl + d, pr + d, pw + 2 * d
        if ph < ch or pw < cw:
            raise ValueError(f"Required crop size {(ch, cw)} is larger than input image size "
                             f"{(ph, pw)}.")
        top = int(torch.randint(0, ph - ch + 1, size=())) if ph > ch else 0
        left = int(torch.randint(0, pw - cw + 1, size=())) if pw > cw else 0
        return (pl, pt, pr, pb), top, left

    def forward(self, x):
        kind = _kind(x)
        if kind is None:
            return x
        img = _Img(x, kind)
        pads, top, left = self._params(img.h, img.w)
        if any(pads):
            img, o = _pad(img, pads, self.fill, self.padding_mode)
            img = _Img(o)
            img_mode = _Img(x, kind).mode
            img.mode = img_mode
        ch, cw = self.size
        if (top, left, ch, cw) == (0, 0, img.h, img.w):
            return img.give(img.obj)
        return img.give(_crop(img, top, left, ch, cw))


class RandomResizedCrop(Transform):
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=InterpolationMode.BILINEAR, antialias=True):
        self.size = _size2(size)
        if not isinstance(scale, (tuple, list)) or not isinstance(ratio, (tuple, list)):
            raise TypeError("scale and ratio should be sequences")
        self.scale = tuple(float(v) for v in scale)
        self.ratio = tuple(float(v) for v in ratio)
        self.interpolation = interpolation
        _interp_name(interpolation)
        self.antialias = antialias
        self._log_ratio = None

    def params(self, height, width):
        """(top, left, h, w): torchvision's draws, in its order, from torch's
        generator."""
        area = height * width
        for _ in range(10):
            target, aspect = _area_ratio_draw(self, area)
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return _draw_int(height - h + 1), _draw_int(width - w + 1), h, w
        in_ratio = float(width) / float(height)
        if in_ratio < min(self.ratio):
            w = width
            h = int(round(w / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h = height
            w = int(round(h * max(self.ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def forward(self, x):
        kind = _kind(x)
        if kind is None:
            return x
        img = _Img(x, kind)
        top, left, h, w = self.params(img.h, img.w)
        sub = _Img(img.crop_view(top, left, h, w), "tensor" if img.kind == "tensor" else "numpy")
        sub.mode, sub.squeeze = img.mode, img.squeeze
        oh, ow = self.size
        if (oh, ow) == (h, w):
            o = _copy(sub, 0)
        else:
            o = _resize(sub, oh, ow, self.interpolation, self.antialias)
        return img.give(o)


class _RandomApply(Transform):
    """torchvision's _RandomApplyTransform: applied with probability p (one
    torch.rand(1) draw per call, image or not)."""

    def __init__(self, p=0.5):
        if not 0.0 <= p <= 1.0:
            raise ValueError("`p` should be a floating point value in the interval [0.0, 1.0].")
        self.p = p

    def forward(self, x):
        kind = _kind(x)
        if not _draw_applies(self.p) or kind is None:
            return x
        return self._apply(x, kind)


class _RandomFlip(_RandomApply):
    _flag = 0

    def _apply(self, x, kind):
        img = _Img(x, kind)
        return img.give(_copy(img, self._flag))


class RandomHorizontalFlip(_RandomFlip):
    _flag = _FLIP_H


class RandomVerticalFlip(_RandomFlip):
    _flag = _FLIP_V


class Pad(Transform):
    def __init__(self, padding, fill=0, padding_mode="constant"):
        _pad_amounts(padding)
        if padding_mode not in _PAD_MODES:
            raise ValueError("`padding_mode` must be one of 'constant', 'edge', 'reflect' or "
                             "'symmetric'.")
        self.padding = padding
        self.fill = fill
        self.padding_mode = padding_mode

    def forward(self, x):
        kind = _kind(x)
        if kind is None:
            return x
        img = _Img(x, kind)
        img2, o = _pad(img, self.padding, self.fill, self.padding_mode)
        return img.give(o)


def _inverse_affine_matrix(center, angle, translate, scale, shear):
    """torchvision's affine as the 6 numbers its grid uses (output pixel ->
    source pixel): the inverse of translate . about-centre (rotate `angle`
    degrees clockwise, scale, shear (sx, sy) degrees); center and translate
    in the caller's coordinates (centred for tensors, pixels for PIL)."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    # the forward matrix R(rot) S(scale) SHy(sy) SHx(sx) without the scale
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    # its inverse (the determinant is 1), then the translations in
    # torchvision's order: centre . RSS^-1 . centre^-1 . translate^-1
    m = [x / scale for x in (d, -b, 0.0, -c, a, 0.0)]
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty)
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty)
    m[2] += cx
    m[5] += cy
    return m


def _expanded_size(m, w, h):
    """(width, height) that holds the whole image under the inverse matrix m
    (rotate with expand=True): torchvision's corners in float32, trimmed to
    1e-4 before the ceil and floor so that a corner at 3.00000001 stays 3."""
    torch = _tm()
    hw, hh = 0.5 * w, 0.5 * h
    pts = torch.tensor([[-hw, -hh, 1.0], [-hw, hh, 1.0], [hw, hh, 1.0], [hw, -hh, 1.0]])
    corners = torch.matmul(pts, torch.tensor(m, dtype=torch.float32).view(2, 3).T)
    lo, hi = corners.aminmax(dim=0)
    half = torch.tensor((hw, hh))
    hi = hi.add_(half).mul_(1.0 / 1e-4).trunc_().mul_(1e-4).ceil_()
    lo = lo.add_(half).mul_(1.0 / 1e-4).trunc_().mul_(1e-4).floor_()
    size = hi.sub_(lo)
    return int(size[0]), int(size[1])


def _pil_fill(fill, img):
    """torchvision's fill for PIL's geometric operations: 0 for None, one
    integer per band."""
    n = len(img.getbands())
    if fill is None:
        fill = 0
    if isinstance(fill, (list, tuple)):
        if len(fill) == 1:
            fill = list(fill) * n
        elif len(fill) != n:
            raise ValueError(f"The number of elements in 'fill' does not match the number of "
                             f"channels of the image ({len(fill)} != {n})")
        fill = tuple(fill)
    elif n > 1:
        fill = (fill,) * n
    if img.mode != "F":
        fill = tuple(int(v) for v in fill) if isinstance(fill, tuple) else int(fill)
    return fill


def _pil_resample(name):
    P = _pil()
    return {"nearest": P.NEAREST, "nearest-exact": P.NEAREST, "bilinear": P.BILINEAR,
            "bicubic": P.BICUBIC}[name]


def _grid_fill(fill, c):
    """fill for sl_view_affine: None (grid_sample's zeros, no blending at
    the border) or one value per channel."""
    if fill is None:
        return None
    if isinstance(fill, (list, tuple)) and len(fill) not in (1, c):
        raise ValueError(f"The number of elements in 'fill' cannot broadcast to match the "
                         f"number of channels of the image ({len(fill)} != {c})")
    return _fill_values(fill, c)


def _grid_interp(name):
    if name not in ("nearest", "bilinear"):
        raise ValueError(f"Interpolation mode '{name}' is unsupported with Tensor input "
                         f"(nearest or bilinear)")
    return _SL_NEAREST if name == "nearest" else _SL_BILINEAR


def _warp(img, m, oh, ow, name, fill):
    """img (an _Img) through the inverse matrix m onto oh x ow: the result
    object."""
    dst, o = img.new(oh, ow)
    _sluice.tf_affine(img.view, dst, [float(np.float32(v)) for v in m], _grid_interp(name),
                      _grid_fill(fill, img.c))
    return o


def _affine(x, kind, angle, translate, scale, shear, interpolation, fill, center=None):
    """v2's F.affine on one image."""
    name = _interp_name(interpolation)
    if kind == "pil":
        w, h = x.size
        c = [w * 0.5, h * 0.5] if center is None else [float(v) for v in center]
        m = _inverse_affine_matrix(c, angle, [float(t) for t in translate], scale, shear)
        return x.transform(x.size, _pil().AFFINE, m, _pil_resample(name),
                           fillcolor=_pil_fill(fill, x))
    img = _Img(x, kind)
    c = [0.0, 0.0] if center is None else [center[0] - img.w * 0.5, center[1] - img.h * 0.5]
    m = _inverse_affine_matrix(c, angle, [float(t) for t in translate], scale, shear)
    return img.give(_warp(img, m, img.h, img.w, name, fill))


class RandomRotation(Transform):
    def __init__(self, degrees, interpolation=InterpolationMode.NEAREST, expand=False,
                 center=None, fill=0):
        if isinstance(degrees, numbers.Number):
            if degrees < 0:
                raise ValueError("If degrees is a single number, it must be positive.")
            degrees = [-float(degrees), float(degrees)]
        else:
            degrees = [float(d) for d in degrees]
            if len(degrees) != 2:
                raise ValueError("If degrees is a sequence, it must be of len 2.")
        self.degrees = degrees
        self.interpolation = interpolation
        _interp_name(interpolation)
        self.expand = expand
        self.center = center
        self.fill = fill

    def forward(self, x):
        kind = _kind(x)
        angle = _draw_uniform(self.degrees[0], self.degrees[1])
        if kind is None:
            return x
        return _rotate(x, kind, angle, self.interpolation, self.expand, self.center, self.fill)


def _rotate(x, kind, angle, interpolation, expand, center, fill):
    name = _interp_name(interpolation)
    if kind == "pil":
        # torchvision hands PIL images to PIL's rotate (which releases the GIL)
        return x.rotate(angle, _pil_resample(name), expand=expand, center=center,
                        fillcolor=_pil_fill(fill, x))
    img = _Img(x, kind)
    _grid_interp(name)
    a = angle % 360
    if center is None:
        # torchvision's exact paths for multiples of 90 degrees
        rot = None
        if a == 0:
            return img.give(_copy(img, 0))
        if a == 180:
            rot = 2
        elif (expand or img.h == img.w) and a in (90, 270):
            rot = 1 if a == 90 else 3
        if rot is not None:
            if img.kind == "tensor":
                return img.give(_tm().rot90(img.obj, k=rot, dims=(-2, -1)))
            return img.give(np.ascontiguousarray(np.rot90(img.obj, k=rot, axes=(0, 1))))
    cx = 0.0 if center is None else center[0] - img.w * 0.5
    cy = 0.0 if center is None else center[1] - img.h * 0.5
    # torchvision's rotate turns counter-clockwise: its affine with -angle
    m = _inverse_affine_matrix([cx, cy], -a, [0.0, 0.0], 1.0, [0.0, 0.0])
    ow, oh = _expanded_size(m, img.w, img.h) if expand else (img.w, img.h)
    return img.give(_warp(img, m, oh, ow, name, fill))


# ---- colour ---------------------------------------------------------------------------

def _adjust(x, kind, op, factor, out_c=None):
    img = _Img(x, kind)
    dst, o = img.new(img.h, img.w, c=out_c)
    _sluice.tf_adjust(img.view, dst, op, float(factor))
    return img.give(o)


def _pil_gray(x, n):
    P = _pil()
    g = x.convert("L")
    if n == 3:
        a = np.asarray(g)
        return P.fromarray(np.dstack([a, a, a]), "RGB")
    return g


class Grayscale(Transform):
    def __init__(self, num_output_channels=1):
        if num_output_channels not in (1, 3):
            raise ValueError(f"num_output_channels must be 1 or 3, got {num_output_channels}.")
        self.num_output_channels = num_output_channels

    def forward(self, x):
        kind = _kind(x)
        if kind is None:
            return x
        if kind == "pil":
            return _pil_gray(x, self.num_output_channels)
        return _adjust(x, kind, _ADJ_GRAY, 0.0, self.num_output_channels)


class RandomGrayscale(_RandomApply):
    def __init__(self, p=0.1):
        super().__init__(p)

    def _apply(self, x, kind):
        if kind == "pil":
            return _pil_gray(x, len(x.getbands()))
        img = _Img(x, kind)
        return _adjust(x, kind, _ADJ_GRAY, 0.0, img.c)


def _jitter_range(value, name, center=1.0, bound=(0.0, float("inf")), clip_first_on_zero=True):
    if value is None:
        return None
    if isinstance(value, numbers.Number):
        if value < 0:
            raise ValueError(f"If {name} is a single number, it must be non negative.")
        value = [center - float(value), center + float(value)]
        if clip_first_on_zero:
            value[0] = max(value[0], 0.0)
    elif isinstance(value, (list, tuple)) and len(value) == 2:
        value = [float(v) for v in value]
    else:
        raise TypeError(f"{name}={value} should be a single number or a sequence with length 2.")
    if not bound[0] <= value[0] <= value[1] <= bound[1]:
        raise ValueError(f"{name} values should be between {bound}, but got {value}.")
    return None if value[0] == value[1] == center else (value[0], value[1])


def _pil_enhance(x, which, factor):
    from PIL import ImageEnhance
    return {"b": ImageEnhance.Brightness, "c": ImageEnhance.Contrast,
            "s": ImageEnhance.Color}[which](x).enhance(factor)


def _pil_hue(x, factor):
    P = _pil()
    if x.mode in ("L", "1", "I", "F"):
        return x
    h, s, v = x.convert("HSV").split()
    a = np.array(h, dtype=np.uint8)
    with np.errstate(over="ignore"):
        a += np.int8(factor * 255).astype(np.uint8)
    return P.merge("HSV", (P.fromarray(a, "L"), s, v)).convert(x.mode)


class ColorJitter(Transform):
    def __init__(self, brightness=None, contrast=None, saturation=None, hue=None):
        self.brightness = _jitter_range(brightness, "brightness")
        self.contrast = _jitter_range(contrast, "contrast")
        self.saturation = _jitter_range(saturation, "saturation")
        self.hue = _jitter_range(hue, "hue", center=0.0, bound=(-0.5, 0.5),
                                 clip_first_on_zero=False)

    def params(self):
        """(order, brightness, contrast, saturation, hue): torchvision's draws."""
        torch = _tm()
        order = torch.randperm(4).tolist()
        f = []
        for r in (self.brightness, self.contrast, self.saturation, self.hue):
            f.append(None if r is None else float(torch.empty(1).uniform_(r[0], r[1])))
        return order, f

    def forward(self, x):
        kind = _kind(x)
        order, f = self.params()
        if kind is None:
            return x
        for i in order:
            if f[i] is None:
                continue
            if kind == "pil":
                x = _pil_hue(x, f[i]) if i == 3 else _pil_enhance(x, "bcs"[i], f[i])
            else:
                x = _adjust(x, kind, (_ADJ_BRIGHTNESS, _ADJ_CONTRAST, _ADJ_SATURATION,
                                      _ADJ_HUE)[i], f[i])
        return x


# ---- tone and the auto-augment policies -----------------------------------------------

_ADJ_SHARPNESS, _ADJ_POSTERIZE, _ADJ_SOLARIZE, _ADJ_INVERT = 6, 7, 8, 9
_ADJ_AUTOCONTRAST, _ADJ_EQUALIZE = 10, 11


def _max_value(img):
    return 255.0 if img.dtype == _U8 else 1.0


def _tone(x, kind, op, factor=0.0):
    """One of sl_view_adjust's operations on an image of any kind; PIL
    images go to PIL's own ImageOps and ImageEnhance, as torchvision sends
    them."""
    if kind == "pil":
        from PIL import ImageEnhance, ImageOps
        if op == _ADJ_SHARPNESS:
            return ImageEnhance.Sharpness(x).enhance(factor)
        if op == _ADJ_POSTERIZE:
            return ImageOps.posterize(x, int(factor))
        if op == _ADJ_SOLARIZE:
            return ImageOps.solarize(x, factor)
        if op in (_ADJ_BRIGHTNESS, _ADJ_CONTRAST, _ADJ_SATURATION):
            return _pil_enhance(x, "bcs"[op - 1], factor)
        return {_ADJ_INVERT: ImageOps.invert, _ADJ_AUTOCONTRAST: ImageOps.autocontrast,
                _ADJ_EQUALIZE: ImageOps.equalize}[op](x)
    img = _Img(x, kind)
    if op in (_ADJ_SHARPNESS, _ADJ_AUTOCONTRAST) and img.c not in (1, 3):
        raise TypeError(f"Input image tensor permitted channel values are 1 or 3, but found "
                        f"{img.c}")
    if op == _ADJ_SOLARIZE and factor > _max_value(img):
        raise TypeError(f"Threshold should be less or equal the maximum value of the dtype, "
                        f"but got {factor}")
    if op == _ADJ_SHARPNESS and factor < 0:
        raise ValueError(f"sharpness_factor ({factor}) is not non-negative.")
    if op == _ADJ_POSTERIZE and (not isinstance(factor, numbers.Integral) or
                                 not 0 <= factor <= 8):
        raise TypeError(f"bits must be a positive integer in the range [0, 8], got {factor} "
                        f"instead.")
    dst, o = img.new(img.h, img.w)
    _sluice.tf_adjust(img.view, dst, op, float(factor))
    return img.give(o)


class _RandomTone(_RandomApply):
    _op = None

    def _factor(self):
        return 0.0

    def _apply(self, x, kind):
        return _tone(x, kind, self._op, self._factor())


class RandomPosterize(_RandomTone):
    _op = _ADJ_POSTERIZE

    def __init__(self, bits, p=0.5):
        super().__init__(p)
        self.bits = bits

    def _factor(self):
        return self.bits


class RandomSolarize(_RandomTone):
    _op = _ADJ_SOLARIZE

    def __init__(self, threshold, p=0.5):
        super().__init__(p)
        self.threshold = threshold

    def _factor(self):
        return self.threshold


class RandomAdjustSharpness(_RandomTone):
    _op = _ADJ_SHARPNESS

    def __init__(self, sharpness_factor, p=0.5):
        super().__init__(p)
        self.sharpness_factor = sharpness_factor

    def _factor(self):
        return self.sharpness_factor


class RandomAutocontrast(_RandomTone):
    _op = _ADJ_AUTOCONTRAST


class RandomEqualize(_RandomTone):
    _op = _ADJ_EQUALIZE


class RandomInvert(_RandomTone):
    _op = _ADJ_INVERT


class AutoAugmentPolicy(enum.Enum):
    """torchvision's AutoAugmentPolicy (same names and values; its own enum
    is accepted too)."""
    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


def _magnitudes(name, bins, h, w, wide):
    """The magnitude table of one operation, computed as torchvision does
    (float32 linspace; Posterize's bits rounded from float32): None for the
    operations without one. `wide` selects TrivialAugmentWide's ranges."""
    torch = _tm()
    if name in ("Identity", "AutoContrast", "Equalize", "Invert"):
        return None
    top = 0.99 if wide else None
    if name in ("ShearX", "ShearY"):
        return torch.linspace(0.0, top or 0.3, bins)
    if name == "TranslateX":
        return torch.linspace(0.0, 32.0 if wide else 150.0 / 331.0 * w, bins)
    if name == "TranslateY":
        return torch.linspace(0.0, 32.0 if wide else 150.0 / 331.0 * h, bins)
    if name == "Rotate":
        return torch.linspace(0.0, 135.0 if wide else 30.0, bins)
    if name in ("Brightness", "Color", "Contrast", "Sharpness"):
        return torch.linspace(0.0, top or 0.9, bins)
    if name == "Posterize":
        return (8 - (torch.arange(bins) / ((bins - 1) / (6 if wide else 4)))).round().int()
    if name == "Solarize":
        return torch.linspace(1.0, 0.0, bins)
    raise ValueError(f"No transform available for {name}")


# which magnitudes take a random sign
_SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
           "Contrast", "Sharpness"}
# the operations of RandAugment and TrivialAugmentWide, in torchvision's order
# (the index of the draw picks one)
_AUG_OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
            "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast",
            "Equalize")
# AutoAugment's sub-policies (operation, probability, magnitude bin) as
# published with the paper, for each policy
_POLICIES = {
    "imagenet": """
        Posterize .4 8, Rotate .6 9 | Solarize .6 5, AutoContrast .6 - |
        Equalize .8 -, Equalize .6 - | Posterize .6 7, Posterize .6 6 |
        Equalize .4 -, Solarize .2 4 | Equalize .4 -, Rotate .8 8 |
        Solarize .6 3, Equalize .6 - | Posterize .8 5, Equalize 1 - |
        Rotate .2 3, Solarize .6 8 | Equalize .6 -, Posterize .4 6 |
        Rotate .8 8, Color .4 0 | Rotate .4 9, Equalize .6 - |
        Equalize 0 -, Equalize .8 - | Invert .6 -, Equalize 1 - |
        Color .6 4, Contrast 1 8 | Rotate .8 8, Color 1 2 |
        Color .8 8, Solarize .8 7 | Sharpness .4 7, Invert .6 - |
        ShearX .6 5, Equalize 1 - | Color .4 0, Equalize .6 - |
        Equalize .4 -, Solarize .2 4 | Solarize .6 5, AutoContrast .6 - |
        Invert .6 -, Equalize 1 - | Color .6 4, Contrast 1 8 |
        Equalize .8 -, Equalize .6 -""",
    "cifar10": """
        Invert .1 -, Contrast .2 6 | Rotate .7 2, TranslateX .3 9 |
        Sharpness .8 1, Sharpness .9 3 | ShearY .5 8, TranslateY .7 9 |
        AutoContrast .5 -, Equalize .9 - | ShearY .2 7, Posterize .3 7 |
        Color .4 3, Brightness .6 7 | Sharpness .3 9, Brightness .7 9 |
        Equalize .6 -, Equalize .5 - | Contrast .6 7, Sharpness .6 5 |
        Color .7 7, TranslateX .5 8 | Equalize .3 -, AutoContrast .4 - |
        TranslateY .4 3, Sharpness .2 6 | Brightness .9 6, Color .2 8 |
        Solarize .5 2, Invert 0 - | Equalize .2 -, AutoContrast .6 - |
        Equalize .2 -, Equalize .6 - | Color .9 9, Equalize .6 - |
        AutoContrast .8 -, Solarize .2 8 | Brightness .1 3, Color .7 0 |
        Solarize .4 5, AutoContrast .9 - | TranslateY .9 9, TranslateY .7 9 |
        AutoContrast .9 -, Solarize .8 3 | Equalize .8 -, Invert .1 - |
        TranslateY .7 9, AutoContrast .9 -""",
    "svhn": """
        ShearX .9 4, Invert .2 - | ShearY .9 8, Invert .7 - |
        Equalize .6 -, Solarize .6 6 | Invert .9 -, Equalize .6 - |
        Equalize .6 -, Rotate .9 3 | ShearX .9 4, AutoContrast .8 - |
        ShearY .9 8, Invert .4 - | ShearY .9 5, Solarize .2 6 |
        Invert .9 -, AutoContrast .8 - | Equalize .6 -, Rotate .9 3 |
        ShearX .9 4, Solarize .3 3 | ShearY .8 8, Invert .7 - |
        Equalize .9 -, TranslateY .6 6 | Invert .9 -, Equalize .6 - |
        Contrast .3 3, Rotate .8 4 | Invert .8 -, TranslateY 0 2 |
        ShearY .7 6, Solarize .4 8 | Invert .6 -, Rotate .8 4 |
        ShearY .3 7, TranslateX .9 3 | ShearX .1 6, Invert .6 - |
        Solarize .7 2, TranslateY .6 7 | ShearY .8 4, Invert .8 - |
        ShearX .7 9, TranslateY .8 3 | ShearY .8 5, AutoContrast .7 - |
        ShearX .7 2, Invert .1 -""",
}


def _parse_policy(text):
    out = []
    for sub in text.split("|"):
        steps = []
        for step in sub.split(","):
            name, p, mag = step.split()
            steps.append((name, float(p), None if mag == "-" else int(mag)))
        out.append(tuple(steps))
    return out


class _AutoAugmentBase(Transform):
    """What the policies share: one image per call (other inputs pass
    through), the operations as torchvision applies them."""

    def __init__(self, interpolation=InterpolationMode.NEAREST, fill=None):
        _interp_name(interpolation)
        self.interpolation = interpolation
        if fill is not None and not isinstance(fill, (numbers.Number, list, tuple, dict)):
            raise TypeError("Got inappropriate fill arg, only Numbers, tuples, lists and dicts "
                            "are allowed.")
        self.fill = fill

    def _fill_for(self, x):
        f = self.fill
        if isinstance(f, dict):
            for key in (type(x), "others"):
                if key in f:
                    f = f[key]
                    break
            else:
                f = None
        if f is None or isinstance(f, numbers.Number):
            return f
        return [float(v) for v in f]

    def __call__(self, *inputs):
        items = list(inputs[0]) if len(inputs) == 1 and isinstance(inputs[0], (tuple, list)) \
            else list(inputs)
        passed = _pure_tensors_passed(items) if len(items) > 1 else ()
        at = [i for i, v in enumerate(items) if _kind(v) is not None and i not in passed]
        if not at:
            raise TypeError("Found no image in the sample.")
        if len(at) > 1:
            raise TypeError(f"Auto augment transformations are only properly defined for a "
                            f"single image or video, but found {len(at)}.")
        i = at[0]
        items[i] = self._forward_any(items[i])
        if len(inputs) == 1 and not isinstance(inputs[0], (tuple, list)):
            return items[0]
        return type(inputs[0])(items) if len(inputs) == 1 else tuple(items)

    @staticmethod
    def _size(x, kind):
        if kind == "pil":
            return x.size[1], x.size[0]
        return (x.shape[-2], x.shape[-1]) if kind == "tensor" else (x.shape[0], x.shape[1])

    def _magnitude(self, name, table, index):
        """The signed magnitude of `name` at `index` of its table (the sign
        drawn as torchvision draws it), 0.0 without a table."""
        if table is None:
            return 0.0
        m = float(table[index])
        if name in _SIGNED and _tm().rand(()) <= 0.5:
            m *= -1
        return m

    def _op(self, x, kind, name, m):
        fill = self._fill_for(x)
        interp = self.interpolation
        if name == "Identity":
            return x
        if name in ("ShearX", "ShearY"):
            # torchvision's shear: the angle whose tangent is the magnitude,
            # about the top-left corner
            s = math.degrees(math.atan(m))
            return _affine(x, kind, 0.0, [0, 0], 1.0, [s, 0.0] if name == "ShearX" else
                           [0.0, s], interp, fill, center=[0, 0])
        if name in ("TranslateX", "TranslateY"):
            t = [int(m), 0] if name == "TranslateX" else [0, int(m)]
            return _affine(x, kind, 0.0, t, 1.0, [0.0, 0.0], interp, fill)
        if name == "Rotate":
            return _rotate(x, kind, m, interp, False, None, fill)
        if name in ("Brightness", "Color", "Contrast", "Sharpness"):
            op = {"Brightness": _ADJ_BRIGHTNESS, "Color": _ADJ_SATURATION,
                  "Contrast": _ADJ_CONTRAST, "Sharpness": _ADJ_SHARPNESS}[name]
            if kind == "pil" or op == _ADJ_SHARPNESS:
                return _tone(x, kind, op, 1.0 + m)
            return _adjust(x, kind, op, 1.0 + m)
        if name == "Posterize":
            return _tone(x, kind, _ADJ_POSTERIZE, int(m))
        if name == "Solarize":
            bound = 255.0 if kind == "pil" else _max_value(_Img(x, kind))
            return _tone(x, kind, _ADJ_SOLARIZE, bound * m)
        op = {"AutoContrast": _ADJ_AUTOCONTRAST, "Equalize": _ADJ_EQUALIZE,
              "Invert": _ADJ_INVERT}[name]
        return _tone(x, kind, op)


class AutoAugment(_AutoAugmentBase):
    """torchvision's AutoAugment: one of the policy's sub-policies drawn per
    call, each of its two operations applied with its probability."""

    def __init__(self, policy=AutoAugmentPolicy.IMAGENET, interpolation=InterpolationMode.NEAREST,
                 fill=None):
        super().__init__(interpolation, fill)
        key = getattr(policy, "value", policy)
        if key not in _POLICIES:
            raise ValueError(f"The provided policy {policy} is not recognized.")
        self.policy = policy
        self._policies = _parse_policy(_POLICIES[key])

    def forward(self, x):
        torch = _tm()
        kind = _kind(x)
        h, w = self._size(x, kind)
        sub = self._policies[int(torch.randint(len(self._policies), ()))]
        for name, p, index in sub:
            if not torch.rand(()) <= p:
                continue
            table = _magnitudes(name, 10, h, w, False)
            x = self._op(x, kind, name, self._magnitude(name, table, index))
        return x


class RandAugment(_AutoAugmentBase):
    """torchvision's RandAugment: num_ops operations drawn per call, all at
    the one magnitude bin."""

    def __init__(self, num_ops=2, magnitude=9, num_magnitude_bins=31,
                 interpolation=InterpolationMode.NEAREST, fill=None):
        super().__init__(interpolation, fill)
        if not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"num_ops should be a non-negative integer, but got {num_ops} "
                             f"instead.")
        self.num_ops = num_ops
        self.magnitude = magnitude
        self.num_magnitude_bins = num_magnitude_bins

    def forward(self, x):
        torch = _tm()
        kind = _kind(x)
        h, w = self._size(x, kind)
        for _ in range(self.num_ops):
            name = _AUG_OPS[int(torch.randint(len(_AUG_OPS), ()))]
            table = _magnitudes(name, self.num_magnitude_bins, h, w, False)
            x = self._op(x, kind, name, self._magnitude(name, table, self.magnitude))
        return x


class TrivialAugmentWide(_AutoAugmentBase):
    """torchvision's TrivialAugmentWide: one operation and one magnitude bin
    drawn per call, over the wide ranges."""

    def __init__(self, num_magnitude_bins=31, interpolation=InterpolationMode.NEAREST, fill=None):
        super().__init__(interpolation, fill)
        self.num_magnitude_bins = num_magnitude_bins

    def forward(self, x):
        torch = _tm()
        kind = _kind(x)
        h, w = self._size(x, kind)
        name = _AUG_OPS[int(torch.randint(len(_AUG_OPS), ()))]
        table = _magnitudes(name, self.num_magnitude_bins, h, w, True)
        index = int(torch.randint(self.num_magnitude_bins, ())) if table is not None else 0
        return self._op(x, kind, name, self._magnitude(name, table, index))


# ---- conversion and normalization -----------------------------------------------------

class ToImage(Transform):
    """PIL image or numpy HWC array -> (C, H, W) torch tensor (contiguous);
    tensors pass as they are."""

    def forward(self, x):
        kind = _kind(x)
        if kind is None or kind == "tensor":
            return x
        torch = _tm()
        img = _Img(x, kind)
        o = torch.empty((img.c, img.h, img.w),
                        dtype=torch.uint8 if img.dtype == _U8 else torch.float32)
        dst = (o.data_ptr(), img.dtype, img.h, img.w, img.c, img.w, 1, img.h * img.w)
        _sluice.tf_convert(img.view, dst, 0)
        return o


class ToDtype(Transform):
    """ToDtype(dtype, scale=False): uint8 <-> float32 by sluice's kernel
    (v2's formulas, bit for bit); other dtypes by torch's own .to() with
    v2's scaling. numpy images take numpy or torch dtypes; PIL images pass.
    As v2: one dtype converts images (plain tensors, tv_tensors.Image and
    Video, numpy arrays) and passes other tensors (masks, boxes); a dict
    maps an input's type to its dtype ("others": the rest; None: pass),
    scaling images only."""

    def __init__(self, dtype, scale=False):
        self.dtype = dtype
        self.scale = scale

    @staticmethod
    def _target(d):
        torch = _torch
        if torch is not None and isinstance(d, torch.dtype):
            return _U8 if d == torch.uint8 else _F32 if d == torch.float32 else None
        nd = np.dtype(d)
        return _U8 if nd == np.uint8 else _F32 if nd == np.float32 else None

    def forward(self, x):
        kind = _kind(x)
        if kind is None or kind == "pil":
            return x
        image = kind == "numpy" or _is_image_tensor(x)
        dtype = self.dtype
        if isinstance(dtype, dict):
            if type(x) in dtype:
                dtype = dtype[type(x)]
            elif "others" in dtype:
                dtype = dtype["others"]
            else:
                raise ValueError(f"No dtype was specified for type {type(x)}. If you only need "
                                 f"to convert the dtype of images or videos, you can just pass "
                                 f"e.g. dtype=torch.float32. If you're passing a dict as dtype, "
                                 f"you can use \"others\" as a catch-all key e.g. "
                                 f"dtype={{tv_tensors.Mask: torch.int64, \"others\": None}} to "
                                 f"pass-through the rest of the inputs.")
            if dtype is None:
                if self.scale and image:
                    import warnings
                    warnings.warn("scale was set to True but no dtype was specified for images "
                                  "or videos: no scaling will be done.")
                return x
            if not image:
                return x.to(dtype)
        elif not image:
            return x
        target = self._target(dtype)
        if kind == "tensor" and (target is None or x.dtype not in (_torch.uint8,
                                                                  _torch.float32)):
            return _torch_to_dtype(x, dtype, self.scale)
        if target is None:
            raise TypeError(f"sluice.transforms.ToDtype: numpy images go to uint8 or float32, "
                            f"not {dtype}")
        img = _Img(x, kind)
        if target == img.dtype:
            return x
        return img.give(_copy(img, _SCALE if self.scale else 0, dtype=target))


def _is_image_tensor(x):
    """A plain tensor, or torchvision's tv_tensors.Image or Video (the
    tensors v2 treats as images; its other tv_tensors are not)."""
    t = type(x)
    return t is _torch.Tensor or (t.__module__.startswith("torchvision") and
                                  t.__name__ in ("Image", "Video"))


def _torch_to_dtype(t, dtype, scale):
    """v2's to_dtype for the dtypes the kernels do not take, in torch ops."""
    torch = _tm()
    if t.dtype == dtype:
        return t
    if not scale:
        return t.to(dtype)
    fin, fout = t.is_floating_point(), dtype.is_floating_point
    if fin and fout:
        return t.to(dtype)
    if fin:
        return t.mul(float(torch.iinfo(dtype).max) + 1.0 - 1e-3).to(dtype)
    if fout:
        return t.to(dtype).mul_(1.0 / torch.iinfo(t.dtype).max)
    raise TypeError(f"sluice.transforms.ToDtype: integer to integer ({t.dtype} -> {dtype}) is "
                    f"not supported")


class Normalize(Transform):
    def __init__(self, mean, std, inplace=False):
        self.mean = [float(v) for v in mean]
        self.std = [float(v) for v in std]
        self.inplace = inplace
        self._consts = None

    def _f32(self, c):
        """(mean, std) for c channels as the float32 values the kernels use
        (tuples; one value repeated for every channel), or None when they do
        not fit c channels or a std is 0. Made once and kept while mean, std
        and c stay the same (they are compared, so a changed list is seen)."""
        k = getattr(self, "_consts", None)
        if k is not None and k[0] == c and k[1] == self.mean and k[2] == self.std:
            return k[3]
        mean, std = list(self.mean), list(self.std)
        ms = None
        if len(mean) in (1, c) and len(std) in (1, c) and all(std):
            ms = (tuple(float(np.float32(v)) for v in (mean * c if len(mean) == 1 else mean)),
                  tuple(float(np.float32(v)) for v in (std * c if len(std) == 1 else std)))
        self._consts = (c, mean, std, ms)
        return ms

    def forward(self, x):
        kind = _kind(x)
        if kind is None:
            return x
        if kind == "pil":
            raise TypeError("Normalize does not support PIL images (use ToImage and ToDtype "
                            "first).")
        img = _Img(x, kind)
        if img.dtype != _F32:
            raise TypeError(f"Input tensor should be a float tensor. Got "
                            f"{'torch.uint8' if kind == 'tensor' else 'uint8'}.")
        if not all(self.std):
            raise ValueError("std evaluated to zero, leading to division by zero.")
        ms = self._f32(img.c)
        if ms is None:
            raise ValueError(f"Normalize: mean and std have {len(self.mean)} and "
                             f"{len(self.std)} values for an image of {img.c} channels")
        mean32, std32 = ms
        if self.inplace:
            _sluice.tf_normalize(img.view, img.view, mean32, std32, 0)
            return x
        dst, o = img.new(img.h, img.w, dtype=_F32)
        _sluice.tf_normalize(img.view, dst, mean32, std32, 0)
        return img.give(o)


class RandomErasing(_RandomApply):
    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
        if not isinstance(value, (numbers.Number, str, tuple, list)):
            raise TypeError("Argument value should be either a number or str or a sequence")
        if isinstance(value, str) and value != "random":
            raise ValueError("If value is str, it should be 'random'")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            warn = "Scale and ratio should be of kind (min, max)"
            import warnings
            warnings.warn(warn)
        if scale[0] < 0 or scale[1] > 1:
            raise ValueError("Scale should be between 0 and 1")
        self.p = p
        self.scale = tuple(float(v) for v in scale)
        self.ratio = tuple(float(v) for v in ratio)
        if isinstance(value, numbers.Number):
            self.value = [float(value)]
        elif isinstance(value, str):
            self.value = None
        else:
            self.value = [float(v) for v in value]
        self.inplace = inplace
        self._log_ratio = None

    def params(self, c, h, w):
        torch = _tm()
        if self.value is not None and len(self.value) not in (1, c):
            raise ValueError(f"If value is a sequence, it should have either a single value or "
                             f"{c} (number of inpt channels)")
        area = h * w
        for _ in range(10):
            erase_area, aspect = _area_ratio_draw(self, area)
            eh = int(round(math.sqrt(erase_area * aspect)))
            ew = int(round(math.sqrt(erase_area / aspect)))
            if not (eh < h and ew < w):
                continue
            if self.value is None:
                v = torch.empty([c, eh, ew], dtype=torch.float32).normal_()
            else:
                v = self.value
            i = _draw_int(h - eh + 1)
            j = _draw_int(w - ew + 1)
            return i, j, eh, ew, v
        return 0, 0, h, w, None

    def _apply(self, x, kind):
        if kind == "pil":
            raise TypeError("RandomErasing works on tensors and numpy arrays (use ToImage "
                            "first)")
        img = _Img(x, kind)
        i, j, eh, ew, v = self.params(img.c, img.h, img.w)
        if v is None:
            return x
        if not self.inplace:
            o = _copy(img, 0)
            img = _Img(o, kind)
        region = _Img(img.crop_view(i, j, eh, ew), kind)
        if isinstance(v, list):
            _sluice.tf_fill(region.view, [float(np.float32(t)) for t in (v * img.c
                                                                          if len(v) == 1 else v)])
        else:
            src = v if kind == "tensor" else v.permute(1, 2, 0).numpy()
            _sluice.tf_convert(_Img(src if kind == "tensor" else np.ascontiguousarray(src),
                                    kind).view, region.view, 0)
        return img.give(img.obj) if kind == "tensor" else img.obj


# ---- Compose and the fused decode -----------------------------------------------------

class Compose(Transform):
    """Apply transforms in order. When the first is DecodeJPEG and a crop or
    resize follows, decoding, the crop, the resize, a following
    RandomHorizontalFlip, ToImage, ToDtype(float32, scale=True) and
    Normalize run as one C call that decodes only the region: the same
    random draws as running them one by one, the same values where the JPEG
    is decoded at full scale, and within docs/OPS.md's tolerance where a
    reduced DCT scale is used (a crop at least twice the output size).
    Elsewhere in the chain, a RandomHorizontalFlip, ToImage, ToDtype to
    float32 and Normalize that follow one another on a uint8 image run as
    one pass (_fused_tail): the same draws and values as one by one."""

    def __init__(self, transforms):
        if not isinstance(transforms, (list, tuple)):
            raise TypeError("Argument transforms should be a sequence of callables")
        self.transforms = list(transforms)

    def __call__(self, *inputs):
        x = inputs[0] if len(inputs) == 1 else inputs
        ts = self.transforms
        start = 0
        if ts and isinstance(ts[0], DecodeJPEG) and _is_encoded(x):
            x, start = _fused_decode(self._decode_plan(ts), ts, x)
        if len(inputs) > 1:
            for t in ts[start:]:
                x = t(*x)
            return x
        i, n = start, len(ts)
        while i < n:
            t = ts[i]
            if type(t) in _TAIL_HEADS:
                j, y = _fused_tail(ts, i, x)
                if j > i:
                    x, i = y, j
                    continue
            x = t(x)
            i += 1
        return x

    def _decode_plan(self, ts):
        """The fused decode's plan for ts (_DecodePlan), made on the first
        call and again only when the list holds other transforms."""
        plan = getattr(self, "_plan", None)
        if plan is None or plan.ts != ts:
            plan = self._plan = _DecodePlan(ts)
        return plan

    def forward(self, x):
        return self(x)

    def __repr__(self):
        inner = "\n".join(f"    {t}" for t in self.transforms)
        return f"Compose(\n{inner}\n)"


def _is_encoded(x):
    if isinstance(x, (bytes, bytearray, memoryview, str, os.PathLike)):
        return True
    if isinstance(x, np.ndarray):
        return x.ndim == 1 and x.dtype == np.uint8
    return _torch is not None and isinstance(x, _torch.Tensor) and x.ndim == 1


class _DecodePlan:
    """What of a chain that starts with DecodeJPEG one sl_view_decode call
    can take, as far as the transforms' types decide it: found once per
    Compose instead of once a sample. The transforms' settings (sizes,
    probabilities, dtypes, interpolation) are still read on every call, so
    changing one after the first call counts, as it does unfused; whether a
    crop fits is decided per image. `tails[k]`: the flip, ToImage, ToDtype
    and Normalize that may follow a crop or resize ending at ts[k - 1]."""
    __slots__ = ("ts", "geo", "cc", "tails")

    def __init__(self, ts):
        self.ts = list(ts)
        nxt = ts[1] if len(ts) > 1 else None
        self.cc = None
        if isinstance(nxt, RandomResizedCrop):
            self.geo = "rrc"
        elif isinstance(nxt, Resize):
            self.geo = "resize"
            if len(ts) > 2 and isinstance(ts[2], CenterCrop):
                self.cc = ts[2]
        elif isinstance(nxt, CenterCrop):
            self.geo = "cc"
        elif isinstance(nxt, RandomCrop):
            self.geo = "rcrop"
        else:
            self.geo = None
        self.tails = {k: self._tail(ts, k) for k in (2, 3)}

    @staticmethod
    def _tail(ts, i):
        """(flip or None, ToDtype or None, Normalize or None, index after the
        flip and ToImage, after the ToDtype, after the Normalize)."""
        n = len(ts)
        flip = ts[i] if i < n and isinstance(ts[i], RandomHorizontalFlip) else None
        if flip is not None:
            i += 1
        if i < n and isinstance(ts[i], ToImage):
            i += 1
        td = ts[i] if i < n and isinstance(ts[i], ToDtype) else None
        j = i + 1 if td is not None else i
        norm = ts[j] if td is not None and j < n and isinstance(ts[j], Normalize) else None
        return flip, td, norm, i, j, j + 1


def _fused_interp(t):
    """The sl_interp a fused decode resamples with for t's interpolation
    (bilinear or bicubic, antialiased), or None: kept on t while its
    interpolation and antialias stay the same objects."""
    k = getattr(t, "_fused_interp_key", None)
    if k is not None and k[0] is t.interpolation and k[1] is t.antialias:
        return k[2]
    name = _interp_name(t.interpolation)
    code = _PIL_FILTER[name] if name in ("bilinear", "bicubic") and \
        (t.antialias is None or t.antialias) else None
    t._fused_interp_key = (t.interpolation, t.antialias, code)
    return code


def _fused_decode(plan, ts, x):
    """Run ts[0] (DecodeJPEG) with what follows it that one sl_view_decode
    call can do; returns (output, index of the first transform left). A
    path is read by the C call (into the thread's buffer, the GIL
    released), its errors naming the file."""
    torch = _tm()
    dec = ts[0]
    exif, maxp = dec.apply_exif_orientation, dec.max_pixels
    if isinstance(x, (str, os.PathLike)):
        H, W, ch, _, token = _sluice.tf_read_info(x, exif, maxp)
        data, keep = x, None
    else:
        data, keep = _encoded(x)
        H, W, ch, _ = _sluice.tf_decode_info(data, exif, maxp)
        token = None
    c = _decode_channels(dec.mode, ch)
    i = 1
    box = (0.0, 0.0, float(W), float(H))
    lim = (0, 0, W, H)
    oh, ow = H, W
    interp = _SL_BILINEAR
    resized = False
    geo = plan.geo
    if geo == "rrc" or geo == "resize":
        nxt = ts[1]
        code = _fused_interp(nxt)
        if code is not None:
            interp, i, resized = code, 2, True
            if geo == "rrc":
                top, left, h, w = nxt.params(H, W)
                box = (float(left), float(top), float(left + w), float(top + h))
                lim = (left, top, left + w, top + h)
                oh, ow = nxt.size
            else:
                oh, ow = rh, rw = _resized_size(H, W, nxt.size, nxt.max_size)
                cc = plan.cc
                if cc is not None:
                    chh, cww = cc.size
                    top, left = CenterCrop.box(rh, rw, chh, cww)
                    if top >= 0 and left >= 0 and top + chh <= rh and left + cww <= rw:
                        fx, fy = W / rw, H / rh
                        box = (left * fx, top * fy, (left + cww) * fx, (top + chh) * fy)
                        oh, ow = chh, cww
                        i = 3
    elif geo == "cc":
        chh, cww = ts[1].size
        top, left = CenterCrop.box(H, W, chh, cww)
        if top >= 0 and left >= 0 and top + chh <= H and left + cww <= W:
            box = (float(left), float(top), float(left + cww), float(top + chh))
            lim = (left, top, left + cww, top + chh)
            oh, ow = chh, cww
            i, resized = 2, True
    elif geo == "rcrop":
        nxt = ts[1]
        ch_, cw_ = nxt.size
        if nxt.padding is None and not nxt.pad_if_needed and ch_ <= H and cw_ <= W:
            _, top, left = nxt._params(H, W)
            box = (float(left), float(top), float(left + cw_), float(top + ch_))
            lim = (left, top, left + cw_, top + ch_)
            oh, ow = ch_, cw_
            i, resized = 2, True
    flags = 0
    mean = std = None
    out_f32 = False
    if resized:
        flip, td, norm, i, j, k = plan.tails[i]
        if flip is not None and _draw_applies(flip.p):
            flags |= _FLIP_H
        if td is not None and td.dtype == torch.float32 and td.scale:
            out_f32 = True
            flags |= _SCALE
            i = j
            if norm is not None and not norm.inplace:
                ms = norm._f32(c)
                if ms is not None:
                    mean, std = ms
                    i = k
    if out_f32:
        out = _float_out(c, oh, ow)
        dst = (out.data_ptr(), _F32, oh, ow, c, ow, 1, oh * ow)
    else:
        hwc = torch.empty((oh, ow, c), dtype=torch.uint8)
        dst = (hwc.data_ptr(), _U8, oh, ow, c, ow * c, c, 1)
        out = hwc.permute(2, 0, 1)
    if token is None:
        _sluice.tf_decode(data, dst, box, lim, interp, mean, std, flags, exif, maxp)
    else:
        _sluice.tf_decode(data, dst, box, lim, interp, mean, std, flags, exif, maxp, token)
    del keep
    return out, i


def _fused_tail(ts, i, x):
    """The float tail of a chain as one C call: from ts[i], an optional
    RandomHorizontalFlip, an optional ToImage, a ToDtype to float32 and an
    optional Normalize, on one uint8 image (a plain 3-D tensor, a numpy
    array, or a PIL image with the ToImage), run as one sl_view_normalize
    (or, without Normalize, sl_view_convert) pass: mirror, HWC -> CHW,
    scale and normalize together, as the native pipeline's normalize op
    does. The flip draws as it does unfused, after every check (nothing is
    drawn when the chain is not fused); the values are the unfused steps'
    bit for bit (the kernels' own contract: docs/OPS.md). Returns (index of
    the first transform left, output), or (i, None) when the run does not
    apply and the transforms run one by one."""
    n = len(ts)
    j = i
    flip = ts[j] if type(ts[j]) is RandomHorizontalFlip else None
    if flip is not None:
        j += 1
    to_image = j < n and type(ts[j]) is ToImage
    if to_image:
        j += 1
    if j >= n or type(ts[j]) is not ToDtype:
        return i, None
    td = ts[j]
    j += 1
    norm = ts[j] if j < n and type(ts[j]) is Normalize and not ts[j].inplace else None
    if norm is not None:
        j += 1
    kind = _kind(x)
    if isinstance(td.dtype, dict):
        return i, None
    try:
        if ToDtype._target(td.dtype) != _F32:
            return i, None
    except TypeError:
        return i, None              # the unfused ToDtype says what is wrong
    if kind == "tensor":
        if type(x) is not _torch.Tensor or x.ndim != 3 or x.dtype != _torch.uint8:
            return i, None
    elif kind == "numpy":
        if x.dtype != np.uint8 or x.ndim not in (2, 3):
            return i, None
    elif kind != "pil" or not to_image:
        return i, None
    img = _Img(x, kind)
    if img.dtype != _U8:
        return i, None
    mean = std = None
    if norm is not None:
        ms = norm._f32(img.c)
        if ms is None:
            return i, None          # the unfused Normalize raises its own error
        mean, std = ms
    flags = _SCALE if td.scale else 0
    if flip is not None and _draw_applies(flip.p):
        flags |= _FLIP_H
    if to_image or img.kind == "tensor":
        _tm()
        o = _float_out(img.c, img.h, img.w)
        dst = (o.data_ptr(), _F32, img.h, img.w, img.c, img.w, 1, img.h * img.w)
    else:
        dst, o = img.new(img.h, img.w, dtype=_F32)
    if mean is not None:
        _sluice.tf_normalize(img.view, dst, mean, std, flags)
    else:
        _sluice.tf_convert(img.view, dst, flags)
    if img.kind == "numpy" and not to_image:
        o = img.give(o)             # (H, W, C), or (H, W) as it came
    return j, o


# The transforms a fused float tail (_fused_tail) can start with.
_TAIL_HEADS = (RandomHorizontalFlip, ToImage, ToDtype)
