"""sluice.torch: the per-thread context (which worker a thread is, which
sample it is loading) and the per-sample generators keyed by (seed, epoch,
index), as sluice's ops key theirs."""
import random
import threading

import numpy as np
import torch

from . import _sluice
from . import _torch_compat as compat

class _Context(threading.local):
    """Per thread: `info` (the WorkerInfo of the worker the thread is) and
    `sample` (the (seed, epoch, index, op) key of the sample being loaded).

    A thread worker's WorkerInfo is made when first asked for (defer_info):
    on torch 2.x it holds the worker's own generators, numpy's among them,
    and a Dataset that never asks for it (most) then never pays for numpy's
    random module (2.6 MB of memory, the first time in a process). The
    generators are seeded as they would have been at the thread's start, so
    what they draw does not depend on when they are made."""
    _info = None
    _make = None
    sample = None

    @property
    def info(self):
        info = self._info
        if info is None and self._make is not None:
            make, self._make = self._make, None
            info = self._info = make()
        return info

    @info.setter
    def info(self, value):
        self._make = None
        self._info = value

    def defer_info(self, make):
        """info is make() when first read in this thread."""
        self._info = None
        self._make = make

    def hide_info(self):
        """No worker info until restore_info(the value returned), without
        making a deferred one."""
        saved = (self._info, self._make)
        self._info = self._make = None
        return saved

    def restore_info(self, saved):
        self._info, self._make = saved


tls = _Context()

# The `op` coordinate of the shuffle generator's key; samples use op 0
# (map-style) or the worker id (iterable-style).
SHUFFLE_OP = 0x5348554646  # "SHUFF"

TORCH_INFO_PATCHED = compat.patch_get_worker_info(tls)


def shuffle_seed(seed, epoch):
    """The seed of epoch `epoch`'s shuffle generator under loader seed `seed`."""
    return _sluice.sample_seed(seed, epoch, 0, SHUFFLE_OP)


def get_worker_info():
    """Inside a worker (thread or process) of a sluice.torch.DataLoader, the
    ``torch.utils.data.WorkerInfo`` of that worker (``id``, ``num_workers``,
    ``seed``, ``dataset``); None elsewhere. torch's own
    ``torch.utils.data.get_worker_info()`` returns the same object (see
    docs/PYTHON.md for when it cannot)."""
    info = getattr(tls, "info", None)
    if info is not None:
        return info
    return compat.process_worker_info()


class sample_context:
    """``with sample_context(seed, epoch, index):`` makes :func:`sample_rng`
    and :func:`sample_seed` answer for that sample outside a loader — to
    reproduce one sample, or to run the same Dataset under torch's own
    DataLoader. The loader sets this context itself around every
    ``__getitem__``."""

    def __init__(self, seed, epoch, index, op=0):
        self.key = (int(seed), int(epoch), index, int(op))

    def __enter__(self):
        self.saved = getattr(tls, "sample", None)
        tls.sample = self.key
        return self

    def __exit__(self, *exc):
        tls.sample = self.saved
        return False


def sample_seed():
    """The 64-bit seed of the sample being loaded on this thread, keyed by
    (seed, epoch, index) as sluice's ops key theirs (``seed``: the loader's,
    or without one a base seed drawn per epoch as torch draws its own).
    Raises RuntimeError outside a sample."""
    key = getattr(tls, "sample", None)
    if key is None:
        raise RuntimeError(
            "sluice.torch.sample_seed/sample_rng: no sample is being loaded on this thread; "
            "call it from a Dataset's __getitem__ (or __iter__) run by "
            "sluice.torch.DataLoader, or inside `with sluice.torch.sample_context(seed, "
            "epoch, index):`")
    seed, epoch, index, op = key
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
        raise TypeError(f"sluice.torch.sample_seed: the sampler gave index {index!r} "
                        f"({type(index).__name__}); per-sample seeds need integer indices")
    mask = (1 << 64) - 1
    return _sluice.sample_seed(seed & mask, epoch & mask, int(index) & mask, op & mask)


def sample_rng(kind="torch"):
    """A fresh generator for the sample being loaded, seeded with
    :func:`sample_seed`: ``"torch"`` a ``torch.Generator`` (pass it as
    ``generator=`` to torch.rand, randint, randperm, ...), ``"random"`` a
    ``random.Random``, ``"numpy"`` a ``numpy.random.Generator``. The same
    sample gets the same stream on any thread, worker, worker type and
    worker count. Each call starts the stream over: call it once per sample
    and draw everything from the generator it returns."""
    seed = sample_seed()
    if kind == "torch":
        g = torch.Generator()
        g.manual_seed(seed)
        return g
    if kind == "random":
        return random.Random(seed)
    if kind == "numpy":
        return np.random.default_rng(seed)
    raise ValueError(f"sample_rng: kind: expected 'torch', 'random' or 'numpy', got {kind!r}")
