"""sluice: a data-loading engine for deep-learning training.

    import sluice
    ds = (sluice.records("train.slr").shuffle(seed=0).shard()
          .decode("image").random_resized_crop("image", 224).flip("image")
          .normalize("image", mean=..., std=..., layout="chw")
          .batch(256).prefetch(4))
    for epoch in range(90):
        ds.set_epoch(epoch)
        for batch in ds.torch():      # dict of torch tensors, no copy
            ...

See docs/PYTHON.md.
"""
import os

from . import _sluice
from ._sluice import (Error, OutOfMemory, InvalidError, IOFailure, CorruptError,
                      UnsupportedError, DecodeError, LimitError, CanceledError,
                      Reader, Writer, Tensor, set_log_level, __version__)
from .dataset import (Dataset, records, tfrecord, webdataset, image_folder, idx, from_arrays,
                      from_spec)

__all__ = [
    "Error", "OutOfMemory", "InvalidError", "IOFailure", "CorruptError", "UnsupportedError",
    "DecodeError", "LimitError", "CanceledError", "Reader", "Writer", "Tensor", "Dataset",
    "records", "tfrecord", "webdataset", "image_folder", "idx", "from_arrays", "from_spec", "pack", "set_log_level", "__version__",
]


def pack(srcs, dst, jobs=0, skip_bad=False, shard_bytes=0, progress=None, check="header",
         jpeg_restart="off"):
    """Pack an ImageFolder directory, or a pair of IDX files (MNIST style,
    plain or gzip), into a .slr dataset at ``dst``.

    ``srcs``: one path or a list of paths. ``jobs``: reader threads (0 = one
    per CPU; the output is identical for any value). ``skip_bad``: skip
    unreadable or non-image files instead of failing. ``check``: "header"
    (default: each image's header is read by the decoder training uses) or
    "decode" (every image is decoded in full, so a dataset that packs is one
    that trains); BMP, PPM/PGM and TIFF are refused either way. ``jpeg_restart``:
    "off" (default: files stored byte for byte), "auto" or "rows": JPEGs are
    re-encoded losslessly with restart intervals and an interval table, so
    the fused decode ops decode only the part a crop needs (the stored bytes
    differ from the source files; the pixels are the same). ``progress(done,
    total, bytes)`` is called as records are written. Returns a dict: kind, records,
    bytes, skipped, classes, bad (the first skipped inputs, "path: cause").
    The GIL is released while packing; on failure nothing appears at dst.
    """
    if isinstance(srcs, (str, bytes, os.PathLike)):
        srcs = [srcs]
    if isinstance(jobs, bool) or not isinstance(jobs, int):
        raise TypeError(f"jobs: expected an int, got {type(jobs).__name__}")
    if isinstance(shard_bytes, bool) or not isinstance(shard_bytes, int) or shard_bytes < 0:
        raise TypeError(f"shard_bytes: expected a non-negative int, got {shard_bytes!r}")
    return _sluice.pack(list(srcs), dst, jobs=jobs, skip_bad=bool(skip_bad),
                        shard_bytes=shard_bytes, progress=progress, check=check,
                        jpeg_restart=jpeg_restart)
