"""sluice.ops: sluice's image functions, one sample at a time, for Python
code such as a Dataset's ``__getitem__``. They release the GIL while they
work, so they run in parallel on thread workers (sluice.torch.DataLoader).

    import sluice.ops
    img = sluice.ops.decode_jpeg(open(path, "rb").read())   # (H, W, 3) uint8
    img = PIL.Image.fromarray(img)                          # for torchvision
"""
import numpy as np

from . import _sluice

__all__ = ["decode_jpeg"]


def decode_jpeg(data, mode="rgb", exif_orientation=False, warnings="default", max_pixels=0):
    """Decode an encoded image (JPEG, PNG or WebP, found from the bytes) with
    the decoder of the pipeline's ``decode`` op: the pixels equal PIL's
    ``Image.open(f).convert("RGB")`` (``"L"`` for ``mode="gray"``). Returns
    a numpy array (H, W, 3) (or (H, W, 1) gray) of uint8 that owns its
    memory.

    ``data``: bytes, bytearray, memoryview or a uint8 numpy array.
    ``exif_orientation``: turn JPEGs upright (PIL's Image.open does not).
    ``warnings``: "default", "strict" or "lenient" (docs/OPS.md, decode).
    ``max_pixels``: refuse larger images with sluice.LimitError (0: the
    decoder's default, 64 Mpx). A damaged image raises sluice.DecodeError
    with the cause."""
    if mode not in ("rgb", "gray"):
        raise ValueError(f"mode: expected 'rgb' or 'gray', got {mode!r}")
    t = _sluice.decode_image(data, mode=mode, exif_orientation=bool(exif_orientation),
                             warnings=warnings, max_pixels=int(max_pixels))
    return np.asarray(t)
