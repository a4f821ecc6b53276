"""ctypes access to the image ops of libsluice, for the reference tests.

The library is found at $SLUICE_LIB, else <repo>/build/libsluice.so.
Outputs are written into numpy arrays passed as destinations (the "Output
tensors" rule of sluice.h), so nothing allocated by the library is kept.
"""
import ctypes as C
import io
import os

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB_PATH = os.environ.get("SLUICE_LIB", os.path.join(REPO, "build", "libsluice.so"))

U8, F16, F32 = 1, 9, 10
RGB, GRAY = 3, 1
BILINEAR, AREA, NEAREST = 1, 2, 3
HWC, CHW = 0, 1


class Tensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("nbytes", C.c_size_t), ("buf", C.c_void_p),
                ("dtype", C.c_int), ("ndim", C.c_int32), ("shape", C.c_int64 * 8),
                ("device", C.c_int32), ("device_id", C.c_int32)]


class Box(C.Structure):
    _fields_ = [("y", C.c_int32), ("x", C.c_int32), ("h", C.c_int32), ("w", C.c_int32)]


class Info(C.Structure):
    _fields_ = [("format", C.c_int32), ("width", C.c_int32), ("height", C.c_int32),
                ("channels", C.c_int32)]


def pil_resize(img, size, resample, box=None):
    """PIL's Image.resize(size, resample, box=box) run as its two one-axis
    passes, horizontal first, each rounded to 8 bits: the order in which
    Pillow resized every image through 12.x, and the order of sluice's
    resize. Pillow 13 runs the vertical pass first when the height shrinks
    and the width does not (python-pillow/Pillow#9549, a speed-up): the
    8-bit intermediate then rounds differently and about 15% of such an
    image's values move by 1 level, while each one-axis pass — Pillow's
    documented filter, its support and its fixed-point coefficients — is the
    same code as before. So the exact tests take Pillow's passes in the
    order sluice uses; test_ops_reference.py::test_pil_resize_order checks
    that Pillow's own resize stays within 1 level of this, whatever order
    the installed Pillow picks. NEAREST has no passes: Pillow's resize."""
    from PIL import Image
    if resample == Image.NEAREST:
        return img.resize(size, resample, box=box)
    w, h = img.size
    dw, dh = size
    x0, y0, x1, y1 = box if box is not None else (0, 0, w, h)
    wide = img.resize((dw, h), resample, box=(x0, 0, x1, h))   # horizontal pass only
    return wide.resize((dw, dh), resample, box=(0, y0, dw, y1))  # vertical pass only


def load():
    """The loaded library, or None when it has not been built."""
    if not os.path.exists(LIB_PATH):
        return None
    try:
        return Ops(C.CDLL(LIB_PATH))
    except AttributeError:  # a library built before the image ops existed
        return None


class SluiceError(Exception):
    pass


class Ops:
    def __init__(self, lib):
        self.lib = lib
        lib.sl_errmsg.restype = C.c_char_p
        lib.sl_decoder_create.argtypes = [C.POINTER(C.c_void_p)]
        lib.sl_decoder_free.argtypes = [C.c_void_p]
        lib.sl_decode_info.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t, C.POINTER(Info)]
        lib.sl_decode.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t, C.c_int, C.POINTER(Tensor)]
        lib.sl_decode_crop_resize.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t, C.c_int,
                                              C.POINTER(Box), C.c_int, C.c_int, C.c_int,
                                              C.POINTER(Tensor)]
        lib.sl_image_resize.argtypes = [C.POINTER(Tensor), C.c_int, C.c_int, C.c_int,
                                        C.POINTER(Tensor)]
        if hasattr(lib, "sl_jpeg_add_restarts"):
            lib.sl_jpeg_add_restarts.argtypes = [C.c_char_p, C.c_size_t, C.c_int,
                                                 C.POINTER(Tensor), C.POINTER(C.c_int)]
        lib.sl_image_resize_box.argtypes = [C.POINTER(Tensor), C.POINTER(C.c_double), C.c_int,
                                            C.c_int, C.c_int, C.POINTER(Tensor)]
        lib.sl_image_crop.argtypes = [C.POINTER(Tensor), C.POINTER(Box), C.POINTER(Tensor)]
        lib.sl_image_flip.argtypes = [C.POINTER(Tensor), C.POINTER(Tensor)]
        lib.sl_image_rotate.argtypes = [C.POINTER(Tensor), C.c_double, C.c_uint8,
                                        C.POINTER(Tensor)]
        lib.sl_image_normalize.argtypes = [C.POINTER(Tensor), C.POINTER(C.c_float),
                                           C.POINTER(C.c_float), C.c_int, C.c_int,
                                           C.POINTER(Tensor)]
        lib.sl_rrc_box_draws.argtypes = [C.c_int, C.c_int, C.POINTER(C.c_double),
                                         C.POINTER(C.c_double), C.POINTER(C.c_double),
                                         C.POINTER(Box)]
        lib.sl_resize_shorter_shape.argtypes = [C.c_int, C.c_int, C.c_int,
                                                C.POINTER(C.c_int), C.POINTER(C.c_int)]
        lib.sl_resize_shorter_shape.restype = None
        lib.sl_center_crop_box.argtypes = [C.c_int, C.c_int, C.c_int, C.c_int, C.POINTER(Box)]
        lib.sl_center_crop_box.restype = None
        self.dec = C.c_void_p()
        self._check(lib.sl_decoder_create(C.byref(self.dec)))

    def close(self):
        self.lib.sl_decoder_free(self.dec)
        self.dec = None

    def _check(self, rc):
        if rc != 0:
            raise SluiceError("%d: %s" % (rc, self.lib.sl_errmsg().decode()))

    @staticmethod
    def _view(arr):
        arr = np.ascontiguousarray(arr)
        t = Tensor()
        t.data = arr.ctypes.data
        t.nbytes = arr.nbytes
        t.dtype = {np.uint8: U8, np.float32: F32, np.float16: F16}[arr.dtype.type]
        t.ndim = arr.ndim
        for i, s in enumerate(arr.shape):
            t.shape[i] = s
        t.device = 1
        return t, arr

    @staticmethod
    def _image(arr):
        if arr.ndim == 2:
            arr = arr[:, :, None]
        return Ops._view(arr)

    def info(self, data):
        i = Info()
        self._check(self.lib.sl_decode_info(self.dec, data, len(data), C.byref(i)))
        return i

    def decode(self, data, color=RGB):
        i = self.info(data)
        out = np.empty((i.height, i.width, color), np.uint8)
        t, out = self._view(out)
        self._check(self.lib.sl_decode(self.dec, data, len(data), color, C.byref(t)))
        return out

    def add_restarts(self, data, mode=1):
        """sl_jpeg_add_restarts (mode 1 auto, 2 rows): the re-encoded bytes,
        or None when the file is left as it was."""
        out = np.empty(2 * len(data) + 200000, np.uint8)
        t, out = self._view(out)
        changed = C.c_int(0)
        self._check(self.lib.sl_jpeg_add_restarts(data, len(data), mode, C.byref(t),
                                                  C.byref(changed)))
        return out[:t.nbytes].tobytes() if changed.value else None

    def decode_crop_resize(self, data, box, out_h, out_w, color=RGB, interp=BILINEAR):
        out = np.empty((out_h, out_w, color), np.uint8)
        t, out = self._view(out)
        b = None if box is None else C.byref(Box(*box))
        self._check(self.lib.sl_decode_crop_resize(self.dec, data, len(data), color, b,
                                                   out_h, out_w, interp, C.byref(t)))
        return out

    def resize(self, img, out_h, out_w, interp=BILINEAR, box=None):
        s, img = self._image(img)
        out = np.empty((out_h, out_w, s.shape[2]), np.uint8)
        t, out = self._view(out)
        if box is None:
            self._check(self.lib.sl_image_resize(C.byref(s), out_h, out_w, interp, C.byref(t)))
        else:
            b = (C.c_double * 4)(*box)
            self._check(self.lib.sl_image_resize_box(C.byref(s), b, out_h, out_w, interp,
                                                     C.byref(t)))
        return out

    def crop(self, img, box):
        s, img = self._image(img)
        y, x, h, w = box
        out = np.empty((h, w, s.shape[2]), np.uint8)
        t, out = self._view(out)
        self._check(self.lib.sl_image_crop(C.byref(s), C.byref(Box(*box)), C.byref(t)))
        return out

    def rotate(self, img, degrees, fill=0):
        s, img = self._image(img)
        out = np.empty(img.shape, np.uint8)
        t, out = self._view(out)
        self._check(self.lib.sl_image_rotate(C.byref(s), degrees, fill, C.byref(t)))
        return out

    def normalize(self, img, mean, std, layout=CHW, dtype=F32):
        s, img = self._image(img)
        h, w, c = img.shape
        npdt = {F32: np.float32, F16: np.float16, U8: np.uint8}[dtype]
        out = np.empty((c, h, w) if layout == CHW else (h, w, c), npdt)
        t, out = self._view(out)
        m = (C.c_float * c)(*mean)
        sd = (C.c_float * c)(*std)
        self._check(self.lib.sl_image_normalize(C.byref(s), m, sd, layout, dtype, C.byref(t)))
        return out

    def rrc_box_draws(self, height, width, scale, ratio, draws):
        b = Box()
        self._check(self.lib.sl_rrc_box_draws(height, width, (C.c_double * 2)(*scale),
                                              (C.c_double * 2)(*ratio),
                                              (C.c_double * 40)(*draws), C.byref(b)))
        return (b.y, b.x, b.h, b.w)

    def resize_shorter_shape(self, height, width, size):
        oh, ow = C.c_int(), C.c_int()
        self.lib.sl_resize_shorter_shape(height, width, size, C.byref(oh), C.byref(ow))
        return oh.value, ow.value

    def center_crop_box(self, height, width, ch, cw):
        b = Box()
        self.lib.sl_center_crop_box(height, width, ch, cw, C.byref(b))
        return (b.y, b.x, b.h, b.w)


def natural_image(w, h, seed):
    """A photo-like RGB image: smooth random fields at several scales plus
    edges, so that resampling, DCT scaling and chroma subsampling are
    exercised as on real photos."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    acc = np.zeros((h, w, 3), np.float64)
    for k, amp in ((4, 90.0), (16, 40.0), (64, 20.0), (256, 10.0)):
        gh, gw = max(2, h * k // 256 + 2), max(2, w * k // 256 + 2)
        field = rng.uniform(-1, 1, (gh, gw, 3))
        img = Image.fromarray(((field + 1) * 127.5).astype(np.uint8)).resize((w, h), Image.BICUBIC)
        acc += (np.asarray(img, np.float64) / 127.5 - 1) * amp
    yy, xx = np.mgrid[0:h, 0:w]
    acc += np.where((xx - w * 0.6) ** 2 + (yy - h * 0.4) ** 2 < (min(w, h) * 0.2) ** 2, 50, 0)[..., None]
    acc += 128
    return np.clip(acc, 0, 255).astype(np.uint8)


def jpeg_bytes(pil_img, **kw):
    buf = io.BytesIO()
    pil_img.save(buf, "JPEG", **kw)
    return buf.getvalue()


def png_bytes(pil_img, **kw):
    buf = io.BytesIO()
    pil_img.save(buf, "PNG", **kw)
    return buf.getvalue()


def real_photos(limit=4):
    """Up to `limit` real photos where the machine has some: Debian's wallpaper
    packages (/usr/share/backgrounds, /usr/share/wallpapers), the copies
    unpacked by make_photos.py under data/photos/src, and its imagenet-like
    set; spread over the list (different sources and sizes)."""
    roots = ["/usr/share/backgrounds", "/usr/share/wallpapers",
             os.path.join(REPO, "data", "photos", "src", "usr", "share"),
             os.path.join(REPO, "data", "photos", "imagenet-like")]
    found = []
    for root in roots:
        for d, _, fs in sorted(os.walk(root)):
            for f in sorted(fs):
                if f.lower().endswith((".jpg", ".jpeg", ".png")):
                    p = os.path.join(d, f)
                    if os.path.getsize(p) < 8 << 20:
                        found.append(p)
        if len(found) >= limit:
            break
    step = max(1, len(found) // limit)
    return found[::step][:limit]
