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
import errno as _errno
import os as _os

from . import _sluice
from ._sluice import (Error, OutOfMemory, InvalidError, IOFailure, CorruptError,
                      UnsupportedError, DecodeError, LimitError, CanceledError,
                      Reader, Writer, Tensor, set_log_level, __version__)
from .dataset import (Dataset, records, synthetic, tfrecord, webdataset, parquet, image_folder, idx,
                      from_arrays, from_spec, dlpack_for_torch, mix)

__all__ = [
    "Error", "OutOfMemory", "InvalidError", "IOFailure", "CorruptError", "UnsupportedError",
    "DecodeError", "LimitError", "CanceledError", "Reader", "Writer", "Tensor", "Dataset",
    "records", "synthetic", "tfrecord", "webdataset", "parquet", "image_folder", "idx", "from_arrays", "from_spec", "mix", "dlpack_for_torch", "pack", "set_log_level", "__version__",
]


def pack(srcs, dst, jobs=0, skip_bad=False, shard_bytes=0, progress=None, check="header",
         jpeg_restart="off", force=False, resume=False):
    """Pack an ImageFolder directory, a pair of IDX files (MNIST style, plain
    or gzip), TFRecord files, tar shards or a .slr dataset into a .slr
    dataset at ``dst``.

    ``dst`` must not exist: like ``sluice pack`` without ``--force``, pack
    raises FileExistsError rather than replace what is there (and, with or
    without force, when ``dst.partial``, left by an interrupted pack, is
    there, unless ``resume``). ``resume=True`` continues that interrupted
    pack: the same ``srcs`` and options (checked against the plan it kept;
    InvalidError says what differs), from after its last complete record,
    ending with what an uninterrupted pack writes, byte for byte; with no
    ``dst.partial`` it packs from the start. Ctrl-C (KeyboardInterrupt)
    stops the pack within a second and raises, its complete records kept in
    ``dst.partial`` for ``resume=True`` or ``sluice recover`` (the
    exception's note says how many). ``force=True``
    replaces a file, or a .slr dataset directory (moved aside to
    ``dst.replaced`` while packing, put back if the pack fails, removed when
    it succeeds); a directory that is not a sluice dataset is never replaced.

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
    total, bytes)`` is called as records are written. Returns a dict: kind
    ("imagefolder", "idx", "tfrecord", "webdataset" or "slr", as the CLI
    says), records, bytes, skipped, classes, bad (the first skipped inputs,
    "path: cause"). The GIL is released while packing; on failure nothing new
    appears at dst.
    """
    if isinstance(srcs, (str, bytes, _os.PathLike)):
        srcs = [srcs]
    if isinstance(jobs, bool) or not isinstance(jobs, int):
        raise TypeError(f"jobs: expected an int, got {type(jobs).__name__}")
    if isinstance(shard_bytes, bool) or not isinstance(shard_bytes, int) or shard_bytes < 0:
        raise TypeError(f"shard_bytes: expected a non-negative int, got {shard_bytes!r}")
    aside = _make_room(dst, force, resume)
    try:
        rep = _sluice.pack(list(srcs), dst, jobs=jobs, skip_bad=bool(skip_bad),
                           shard_bytes=shard_bytes, progress=progress, check=check,
                           jpeg_restart=jpeg_restart, resume=bool(resume))
    except KeyboardInterrupt as e:
        if aside is not None:
            _os.rename(aside, dst)
        _note_interrupted(e, dst)
        raise
    except BaseException:
        if aside is not None:
            _os.rename(aside, dst)
        raise
    if aside is not None:
        _remove_dataset(aside)
    return rep


def _note_interrupted(e, dst):
    """Say on the KeyboardInterrupt what the pack left and the ways on."""
    path = _os.fsdecode(_os.fspath(dst))
    partial = path + ".partial"
    if _os.path.isdir(partial):
        note = (f"sluice.pack: interrupted; its complete records are in {partial}: continue with "
                f"sluice.pack(..., resume=True) (the same srcs and options), or keep those alone "
                f"with `sluice recover {partial} --out OUT`")
    elif _os.path.lexists(path):
        note = f"sluice.pack: the pack had finished when it was interrupted: {path} is complete"
    else:
        return
    if hasattr(e, "add_note"):
        e.add_note(note)


def _make_room(dst, force, resume=False):
    """Refuse an existing ``dst`` unless ``force``; with force, move a .slr
    dataset directory aside (the engine replaces files, never directories)
    and return where it went."""
    try:
        path = _os.fsdecode(_os.fspath(dst))
    except TypeError:
        raise TypeError(f"dst: expected a str or os.PathLike, got {type(dst).__name__}") from None
    partial = path + ".partial"
    if _os.path.lexists(partial) and not resume:
        # What an interrupted pack left: the engine would clear it to start
        # over; it holds records worth keeping (as sluice pack says).
        raise FileExistsError(_errno.EEXIST, "exists: an interrupted pack; continue it with "
                              "sluice.pack(..., resume=True), keep its records with `sluice "
                              f"recover {partial} --out OUT`, or remove it", partial)
    if not _os.path.lexists(path):
        return None
    if not force:
        raise FileExistsError(_errno.EEXIST, "already exists; pass force=True to replace it",
                              path)
    if _os.path.islink(path) or not _os.path.isdir(path):
        return None
    try:
        Reader(path, verify=False).shards
    except Error:
        raise IsADirectoryError(_errno.EISDIR, "a directory but not a sluice dataset; not "
                                "replacing it", path) from None
    aside = path + ".replaced"
    if _os.path.lexists(aside):
        raise FileExistsError(_errno.EEXIST, f"cannot move {path} aside there; remove it first",
                              aside)
    _os.rename(path, aside)
    return aside


def _remove_dataset(path):
    """Remove the dataset directory at ``path``: its shards and manifest, then
    the directory if nothing else is in it."""
    for shard in Reader(path, verify=False).shards:
        try:
            _os.unlink(shard)
        except FileNotFoundError:
            pass
    try:
        _os.unlink(_os.path.join(path, "manifest.json"))
    except FileNotFoundError:
        pass
    try:
        _os.rmdir(path)
    except OSError:
        import warnings
        warnings.warn(f"sluice.pack: kept {path}: it holds files that were not part of the "
                      f"old dataset", RuntimeWarning, stacklevel=3)
