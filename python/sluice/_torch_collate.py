"""sluice.torch: torch's default_collate into batch memory that a worker
reuses.

torch's default_collate stacks each batch's tensors into a new tensor. A
batch of 32 images of 3x224x224 float32 is 19 MB: glibc serves an
allocation that size with a fresh mmap (or hands it back to the kernel when
freed), so every batch first-touches 4,700 new pages, which the kernel
faults in and zeroes. Here each worker keeps the memory of the batches it
made and stacks the next batch into one the consumer has let go. Without
the GIL it loaded as fast as torch's allocations with 60-70 MB less peak
memory; with the GIL the copy into it ran at 0.87x (bench/README.md, "Batch
memory"), so there a worker keeps it only while sluice.transforms writes
the samples into it itself (_Stream.offer; _torch_fetch.Fetch).

sluice.transforms' fused outputs (a float32 (C, H, W) tensor from
DecodeJPEG + crop + ToDtype + Normalize, or the float tail on a decoded
image) need no copy at all: before each __getitem__ of a batch whose plan
is one float32 image tensor, the stream offers that sample's row of the
batch tensor (sluice.transforms._offer, a thread-local, withdrawn when
__getitem__ returns or raises); the first fused output of that shape is
written there, and _copy finds the returned tensor already in place. What
__getitem__ does with the output does not matter: a sample returned changed,
cloned, or another tensor altogether is copied into the row as before.

When a batch is let go: the memory is a numpy array that only this pool
holds; `torch.from_numpy` makes the batch tensor, whose storage keeps one
reference to the array for as long as the storage lives — through the
batch tensor, any view of it, a numpy array or DLPack capsule made from it.
So the array's reference count falls back to what the pool alone holds
exactly when no tensor can reach the memory any more. The count is read
with sys.getrefcount (checked when this module loads: where it does not
behave so, the pool is off). On a free-threaded build the count is read
without a lock; a stale read can only see a count too high (the array's
references are only ever taken by the worker itself), which keeps a batch
that was already free: never the other way round.

A map-style batch is also collated as it is loaded (_Stream): each
sample's large tensors are copied into the batch the moment __getitem__
returns them, so a sample's own memory (a 602 KB image) is free again for
the next __getitem__ instead of 32 of them living until the batch is
stacked. Freed one at a time, malloc hands the same block back sample after
sample, where 19 MB of samples freed at once are trimmed back to the kernel
and faulted in again for the next batch (`perf record` on the same work put
the kernel's page faults under the transforms' output at 5 % of the
process), and the copy reads each sample while it is still in cache. The
one difference from torch's order a Dataset can see: a tensor is read when
its __getitem__ returns, not when the batch is complete, so a Dataset that
writes into a tensor it returned earlier gets the value it returned.

What torch's default_collate would do is kept: the pool takes only
torch.Tensor leaves, on the CPU, strided, without autograd,
of one shape and dtype across the batch, whose stacked result torch makes
contiguous (contiguous samples, or samples of up to 3 dimensions in any
layout), with a numpy dtype, of at least MIN_BYTES a batch; everything else
is collated by torch's own functions. A leaf of a subclass of torch.Tensor
(torchvision v2's ToImage() gives a tv_tensors.Image) is taken only where
torch's stack of it is the plain stack of its data: checked once a batch on
its first sample, through the subclass's own __torch_function__
(_plain_leaf); tv_tensors in their "TVTensor" return type, a subclass
whose results keep its class or whose instances carry attributes, go to
torch's stack. The one difference a user can see: a
pooled batch tensor's storage is not resizable (x.resize_() to a larger
size raises, as for any tensor from torch.from_numpy); docs/PYTHON.md.
"""
import sys
import threading

import numpy as np
import torch

from . import _torch_compat as compat

# Batches smaller than this are left to malloc, which reuses small blocks by
# itself (glibc's mmap threshold starts at 128 KiB).
MIN_BYTES = 256 << 10


class _Slot:
    __slots__ = ("array", "key")

    def __init__(self, array, key):
        self.array = array
        self.key = key


def _refs(slot):
    return sys.getrefcount(slot.array)


def _baseline():
    """The count _refs reads for a slot that nothing else holds, or None
    where this interpreter's counts do not follow the storages made with
    torch.from_numpy (then nothing is pooled)."""
    try:
        slot = _Slot(np.empty(4, np.float32), None)
        base = _refs(slot)
        t = torch.from_numpy(slot.array)
        v = t[1:]
        held = _refs(slot)
        del t
        still = _refs(slot)
        del v
        if held == base + 1 and still == base + 1 and _refs(slot) == base:
            return base
    except Exception:
        pass
    return None


_BASE = _baseline()
# How many tensors share a storage (torch >= 2.0), to find a fused output a
# Dataset kept past __getitem__ (_Stream.collate); None: no offers.
_USE_COUNT = compat.storage_use_count
_uses = compat.storage_uses
_NUMPY_DTYPES = {}


def _numpy_dtype(dtype):
    """numpy's dtype for a torch dtype, or None (bfloat16, ...)."""
    try:
        return _NUMPY_DTYPES[dtype]
    except KeyError:
        pass
    try:
        nd = torch.empty(0, dtype=dtype).numpy().dtype
    except (TypeError, RuntimeError):
        nd = None
    _NUMPY_DTYPES[dtype] = nd
    return nd


class BatchPool:
    """The batch memory of one worker, or of all the thread workers of a
    loader: at most `keep` arrays, each reused once the batch made on it is
    gone. Shared, a batch one worker made is reused by whichever worker
    needs memory first: a worker whose batch the training step holds takes
    the array of another's batch let go, instead of making one more (a
    lock, taken once a batch, orders the workers; a reference to an array
    is only ever taken under it, so a count read under it is never too
    low)."""

    def __init__(self, keep):
        self.keep = max(1, int(keep))
        self.slots = []
        self.made = 0        # arrays allocated
        self.reused = 0      # batches stacked into an array made before
        self.lock = threading.Lock()
        self.users = 0       # workers stacking into it (attach, detach)

    def attach(self):
        with self.lock:
            self.users += 1

    def detach(self):
        """A worker stops using the pool (with the GIL, a batch none of
        whose samples was written in place: _torch_fetch.Fetch). When none
        is left the arrays are let go: those of batches still alive stay
        with their batches, the others are freed, not kept unused."""
        with self.lock:
            self.users -= 1
            if self.users <= 0:
                self.slots = []

    def tensor(self, shape, dtype):
        """An uninitialised tensor of `shape` and `dtype` on pooled memory,
        or None (torch allocates it then)."""
        if _BASE is None:
            return None
        nd = _numpy_dtype(dtype)
        if nd is None:
            return None
        with self.lock:
            return self._take((shape, nd), shape, nd)

    def _take(self, key, shape, nd):
        spare = None
        for slot in self.slots:
            if _refs(slot) != _BASE:
                continue            # its batch is still alive
            if slot.key == key:
                self.reused += 1
                return torch.from_numpy(slot.array)
            if spare is None:
                spare = slot
        if len(self.slots) < self.keep:
            slot = _Slot(np.empty(shape, nd), key)
            self.slots.append(slot)
        elif spare is not None:
            # A free array of another shape: replaced (the old one freed first).
            spare.array = None
            spare.array, spare.key = np.empty(shape, nd), key
            slot = spare
        else:
            return None              # every array is held by the consumer
        self.made += 1
        return torch.from_numpy(slot.array)


def _leaf_ok(t):
    """A sample's tensor that can go into pooled memory as it is: what
    torch.stack would stack into a plain, contiguous tensor of its dtype."""
    return (type(t) is torch.Tensor and not t.requires_grad and t.layout == torch.strided
            and t.device.type == "cpu" and not t.is_quantized and not t.is_nested
            and (t.dim() <= 3 or t.is_contiguous()))


def _plain_leaf(v):
    """A sample's tensor of a subclass of torch.Tensor, as a plain tensor on
    the same memory, where the batch torch would make of such samples is the
    plain stack of their data: torch.stack of the sample alone, through the
    subclass's own __torch_function__, gives an exact torch.Tensor of its
    values (torchvision's tv_tensors.Image in its default return type, an
    nn.Parameter), and the sample carries nothing but its data (no instance
    attributes, no __slots__), so that as_subclass(type) can give it back
    whole. None otherwise (torch's own collation then). The check runs on
    the first sample of each batch, once, as torch's stack runs once."""
    kind = type(v)
    if not isinstance(v, torch.Tensor) or getattr(v, "__dict__", None):
        return None
    mro = kind.__mro__
    if any("__slots__" in vars(c) for c in mro[:mro.index(torch.Tensor)]):
        return None
    p = v.as_subclass(torch.Tensor)       # ignored by __torch_function__
    if not _leaf_ok(p):
        return None
    try:
        probe = torch.stack([v], 0)
    except Exception:
        return None     # torch's stack raises it again, with its message
    if type(probe) is not torch.Tensor or probe.dtype != p.dtype \
            or probe.shape[1:] != p.shape or not torch.equal(probe[0], p):
        return None
    return p


def _poolable(batch):
    elem = batch[0]
    if not _leaf_ok(elem):
        return False
    shape, dtype = elem.shape, elem.dtype
    for t in batch:
        if type(t) is not torch.Tensor or t.shape != shape or t.dtype != dtype \
                or not _leaf_ok(t):
            return False
    return elem.numel() * elem.element_size() * len(batch) >= MIN_BYTES


class _Marker:
    """Stands in a sample for a tensor already copied into the batch."""
    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key


def _parts(sample):
    """(kind, [(key, value)]) of a sample's top level: the sample itself, an
    exact tuple, namedtuple, list or dict; None for anything else."""
    kind = type(sample)
    if kind is torch.Tensor or isinstance(sample, torch.Tensor):
        return kind, [(None, sample)]
    if kind is tuple or kind is list or (issubclass(kind, tuple) and hasattr(kind, "_fields")):
        return kind, list(enumerate(sample))
    if kind is dict:
        return kind, list(sample.items())
    return None


def _rebuild(kind, sample, swap):
    """`sample` with the values at the keys of `swap` replaced."""
    if kind is torch.Tensor or issubclass(kind, torch.Tensor):
        return swap[None]
    if kind is dict:
        out = dict(sample)
        out.update(swap)
        return out
    items = [swap.get(k, v) for k, v in enumerate(sample)]
    if kind is tuple:
        return tuple(items)
    if kind is list:
        return items
    return kind(*items)


class _Stream:
    """One batch collated as its samples arrive: each sample's large tensors
    (the top level of the sample: the sample itself, or the items of a
    tuple, namedtuple, list or dict) are copied into the batch's pooled
    tensor at once, and the sample keeps a marker in their place, so a
    sample's memory is free again before the next __getitem__ (see the
    module's docstring). Anything that does not fit the first sample's
    plan puts the copied tensors back (views of the batch) and collation
    is torch's."""

    def __init__(self, owner, n):
        self.owner = owner
        self.n = n
        self.i = 0
        self.kind = None
        # key -> (shape, dtype, rows, marker); None: torch's collation
        self.plan = None
        self.outs = {}            # key -> the batch tensor
        self.samples = []
        self.in_place = 0         # samples found written into the batch (offer)
        self.kept = 0             # batches copied out: a row kept by the Dataset
        self.early = None         # (key, batch tensor) offered before the first sample
        self.offered = 0          # rows offered in this batch
        self.uses0 = {}           # key -> _uses(batch tensor) when it was made
        # The rows offered after the first sample, made in one call
        # (out.unbind(0)) rather than indexed twice a sample (offer and
        # _copy), and what add() checks a returned row against; None where
        # no row is offered (see _offering).
        self.rows = None

    def _start(self, sample):
        parts = _parts(sample)
        early, self.early = self.early, None
        if parts is None:
            return False
        self.kind, items = parts
        plan = {}
        for key, v in items:
            leaf = type(v)
            if leaf is not torch.Tensor and isinstance(v, torch.Tensor):
                v = _plain_leaf(v)
                if v is None:
                    continue
            if not _leaf_ok(v) or v.numel() * v.element_size() * self.n < MIN_BYTES:
                continue
            shape = (self.n,) + tuple(v.shape)
            if early is not None and early[0] == key and tuple(early[1].shape) == shape \
                    and early[1].dtype == v.dtype:
                out = early[1]
                self.uses0[key] = early[2]
            else:
                out = self.owner.pool.tensor(shape, v.dtype)
                if out is not None and _USE_COUNT is not None:
                    self.uses0[key] = _uses(out)
            if out is None:
                continue
            self.outs[key] = out
            plan[key] = (v.shape, v.dtype, out.numpy(), _Marker(key), leaf)
        self.plan = plan
        if len(plan) == 1:
            key = next(iter(plan))
            self.owner.last = (key, plan[key][0], plan[key][1])
            self._offering(key)
        return bool(plan)

    def _offering(self, key):
        """After the first sample: the rows the following samples are offered
        (one float32 (C, H, W) tensor planned, sluice.transforms in use, the
        batch's memory counted), with each row's layout as made, since a
        Dataset may change a row's view in place (transpose_)."""
        shape, dtype = self.plan[key][0], self.plan[key][1]
        if dtype != torch.float32 or len(shape) != 3 or key not in self.uses0 or self.n < 2:
            return
        tf = sys.modules.get("sluice.transforms")
        if tf is None:
            return
        out = self.outs[key]
        self.rows = out.unbind(0)
        self.tf = tf
        self.fast = (key, shape, out.stride()[1:], out.data_ptr(),
                     out.stride(0) * out.element_size(), self.plan[key][3])

    def _unstream(self):
        """Back to torch's collation: every sample as __getitem__ gave it
        (its copied tensors as views of the batch)."""
        plan, self.plan = self.plan, None
        self.rows = None
        if plan:
            outs = self.outs

            def row(k, j):
                # a subclass's sample given back its type (_plain_leaf)
                leaf = plan[k][4]
                r = outs[k][j]
                return r if leaf is torch.Tensor else r.as_subclass(leaf)
            self.samples = [_rebuild(self.kind, s, {k: row(k, j) for k in plan})
                            for j, s in enumerate(self.samples)]
        self.outs = {}

    def add(self, sample):
        i = self.i
        rows = self.rows
        if rows is not None and 0 < i < self.n and type(sample) is self.kind:
            # The common case first: the offered row itself returned, as it
            # was offered (one check each, no tensor made or indexed).
            key, shape, stride, base, step, marker = self.fast
            try:
                v = sample if key is None else sample[key]
            except Exception:
                v = None
            if v is rows[i] and v.shape == shape and v.stride() == stride \
                    and v.data_ptr() == base + i * step and not v.requires_grad:
                self.i = i + 1
                self.in_place += 1
                self.samples.append(_rebuild(self.kind, sample, {key: marker}))
                return
        self.i += 1
        if i == 0:
            if self._start(sample):
                self._copy(0, sample)
                return
            self.plan = None
        elif self.plan is not None and i < self.n and self._fits(sample):
            self._copy(i, sample)
            return
        self._unstream()
        self.samples.append(sample)

    def offer(self):
        """Before the next __getitem__: the batch row its image goes into,
        offered to sluice.transforms (its fused outputs write there, and
        _copy then finds the sample in place). Only where the plan is one
        float32 (C, H, W) tensor, and sluice.transforms is in use."""
        plan, i = self.plan, self.i
        rows = self.rows
        if rows is not None:
            if i >= self.n:
                return None
            self.offered += 1
            self.tf._offer(rows[i])
            return self.tf
        if i == 0:
            # The first sample: the plan of the batch before (one float32
            # image tensor) guesses its shape; _start uses the memory when
            # the sample fits it, and lets it go otherwise.
            last = self.owner.last
            if last is None or last[2] != torch.float32 or len(last[1]) != 3 or self.n < 2 \
                    or _USE_COUNT is None:
                return None
            tf = sys.modules.get("sluice.transforms")
            if tf is None:
                return None
            out = self.owner.pool.tensor((self.n,) + tuple(last[1]), last[2])
            if out is None:
                return None
            self.early = (last[0], out, _uses(out))
            self.offered += 1
            tf._offer(out[0])
            return tf
        # After the first sample, rows are offered only where _offering
        # made them.
        return None

    def _fits(self, sample):
        kind = type(sample)
        if kind is not self.kind:
            return False
        plan = self.plan
        if kind is dict:
            if not all(k in sample for k in plan):
                return False
        elif None not in plan and len(sample) <= max(plan):
            return False
        for key, (shape, dtype, _, _, leaf) in plan.items():
            v = sample if key is None else sample[key]
            if type(v) is not leaf:
                return False
            if leaf is not torch.Tensor:
                if getattr(v, "__dict__", None):
                    return False
                v = v.as_subclass(torch.Tensor)
            if v.shape != shape or v.dtype != dtype or not _leaf_ok(v):
                return False
        return True

    def _copy(self, i, sample):
        swap = {}
        for key, (_, _, rows, marker, leaf) in self.plan.items():
            v = sample if key is None else sample[key]
            if leaf is not torch.Tensor:
                v = v.as_subclass(torch.Tensor)
            out = self.outs[key]
            row = out[i]
            p, base = v.data_ptr(), out.data_ptr()
            if p == row.data_ptr() and v.stride() == row.stride() \
                    and not v.is_conj() and not v.is_neg():
                self.in_place += 1  # written in place (offer)
                swap[key] = marker
                continue
            if base <= p < base + out.numel() * out.element_size():
                # A view of the batch itself (the offered row transposed,
                # say): copied out first, the copy's source and
                # destination may overlap.
                v = v.clone()
            if v.is_contiguous() and not v.is_conj() and not v.is_neg():
                # numpy's copy of contiguous memory is one memcpy; torch's
                # copy_ goes through its element loop (slower by a third
                # on 602 KB samples, `perf record`).
                rows[i] = v.numpy()
            else:
                self.outs[key][i].copy_(v)
            swap[key] = marker
        self.samples.append(_rebuild(self.kind, sample, swap))

    def collate(self):
        if self.plan is not None and self.i != self.n:
            self._unstream()
        samples, self.samples = self.samples, []
        owner = self.owner
        if not self.plan:
            return owner(samples)
        outs = self.outs
        self.plan = None
        self.rows = None
        self.outs = {}
        if self.offered:
            # A row offered may have been kept by the Dataset (its fused
            # output, a view or array of it): then the batch's memory is
            # not the consumer's alone, and the consumer gets a copy.
            for key, out in outs.items():
                if key in self.uses0 and _uses(out) != self.uses0[key]:
                    outs[key] = out.clone()
                    self.kept += 1
            self.offered = 0

        def streamed(batch, *, collate_fn_map=None):
            return outs[batch[0].key]

        fn_map = dict(owner.fn_map)
        fn_map[_Marker] = streamed
        return compat.collate(samples, collate_fn_map=fn_map)


class PooledCollate:
    """torch's default_collate, the tensors of each batch stacked into
    `pool`'s memory where they can be (see the module's docstring)."""

    def __init__(self, pool):
        self.pool = pool
        # (key, shape, dtype) of the last streamed batch's one planned tensor
        self.last = None
        fn_map = dict(compat.default_collate_fn_map)
        # The same key, so the same place in the map's order (torch tries
        # the keys in order with isinstance).
        fn_map[torch.Tensor] = self._tensors
        self.fn_map = fn_map

    def _tensors(self, batch, *, collate_fn_map=None):
        if _poolable(batch):
            elem = batch[0]
            out = self.pool.tensor((len(batch),) + tuple(elem.shape), elem.dtype)
            if out is not None:
                return torch.stack(batch, 0, out=out)
        return compat.collate_tensor_fn(batch, collate_fn_map=collate_fn_map)

    def __call__(self, batch):
        return compat.collate(batch, collate_fn_map=self.fn_map)

    def stream(self, n):
        """A batch of `n` samples collated as they arrive: add(sample) for
        each, then collate()."""
        return _Stream(self, n)


def pooled_collate(keep, pool=None):
    """A default_collate for one worker that reuses the memory of up to
    `keep` batches (or `pool`'s, shared with other workers), or None where
    this torch or interpreter cannot."""
    if _BASE is None or compat.collate is None:
        return None
    pool = pool if pool is not None else BatchPool(keep)
    pool.attach()
    return PooledCollate(pool)
