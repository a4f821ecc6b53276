"""sluice.torch: pin_memory=True and device= through sluice's device layer
(_sluice.Stager): a batch's tensors copied into one pinned slot, and for
device= on to the GPU on sluice's side stream."""
import collections.abc
import threading

import torch

from . import _sluice
from . import _torch_compat as compat
import sluice as _package


def pin_target(pin_memory_device):
    """Where pin_memory=True stages through sluice: ("cuda", id) when torch
    sees a GPU and `pin_memory_device` (if given) names a CUDA device; None
    otherwise (torch's pin_memory, or nothing, as torch does)."""
    if not torch.cuda.is_available():
        return None
    dev = torch.device(pin_memory_device) if pin_memory_device else torch.device("cuda")
    if dev.type != "cuda":
        return None
    return ("cuda", torch.cuda.current_device() if dev.index is None else dev.index)


def parse_device(device):
    """DataLoader(device=...): None, or (kind, id, torch.device) with kind
    "cuda" or "host" (the host backend: CPU tensors through the same ring,
    for tests and dry runs)."""
    if device is None:
        return None
    if device == "host":
        return ("host", 0, torch.device("cpu"))
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        dev = None
    if dev is None or dev.type != "cuda":
        raise ValueError(f"device: expected None, 'cuda', 'cuda:N', a torch.device('cuda', N) "
                         f"or 'host', got {device!r}")
    idx = dev.index if dev.index is not None else (
        torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return ("cuda", idx, torch.device("cuda", idx))


def map_batch(data, leaf, other, tuples_as_lists=True):
    """torch's pin_memory walk (torch/utils/data/_utils/pin_memory.py):
    `leaf` for each tensor, `other` for an object with a pin_memory()
    method; mappings, namedtuples, tuples (as lists, as torch's pin_memory
    does, unless `tuples_as_lists` is False) and sequences rebuilt; strings
    and everything else unchanged."""
    if isinstance(data, torch.Tensor):
        return leaf(data)
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        try:
            return type(data)({k: map_batch(v, leaf, other, tuples_as_lists)
                               for k, v in data.items()})
        except TypeError:
            return {k: map_batch(v, leaf, other, tuples_as_lists) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(map_batch(v, leaf, other, tuples_as_lists) for v in data))
    if isinstance(data, tuple):
        items = [map_batch(v, leaf, other, tuples_as_lists) for v in data]
        return items if tuples_as_lists else tuple(items)
    if isinstance(data, collections.abc.Sequence):
        try:
            return type(data)([map_batch(v, leaf, other, tuples_as_lists) for v in data])
        except TypeError:
            return [map_batch(v, leaf, other, tuples_as_lists) for v in data]
    if hasattr(data, "pin_memory"):
        return other(data)
    return data


def stageable(t):
    return (t.device.type == "cpu" and t.layout == torch.strided and not t.is_quantized
            and not t.is_complex())


class Staging:
    """One loader's path through sluice's device layer: a Stager (a ring of
    pinned slots; with to_device, copies on its side stream) and how a
    batch's tensors go through it. Kept by the loader across epochs, so the
    slots' memory is reused."""

    def __init__(self, kind, dev_id, to_device, torch_device, depth):
        self.stager = _sluice.Stager(kind, dev_id, to_device=to_device, depth=depth)
        # The DLPack device type of pinned slots that this torch takes
        # (torch 1.13 refuses kDLCUDAHost), probed once by the package.
        _dlpack_for_torch = getattr(_package, "dlpack_for_torch", None)
        if _dlpack_for_torch is not None:
            _dlpack_for_torch(torch)
        self.to_device = to_device
        self.torch_device = torch_device   # device=: where tensors that cannot be staged go
        self.pin_device = None             # pin_memory: torch's pin_memory(device) for those

    fallbacks = 0   # batches that took torch's way (every slot held)
    _lock = threading.Lock()   # thread workers stage concurrently

    def key(self):
        return (self.stager.kind, self.stager.id, self.to_device)

    def stats(self):
        out = self.stager.stats()
        out["fallback_batches"] = self.fallbacks
        return out

    def _torch_way(self, batch):
        if self.to_device:
            return map_batch(batch, lambda t: t.to(self.torch_device), lambda o: o,
                              tuples_as_lists=False)
        if self.stager.kind != "cuda":
            return batch          # the host backend (tests): nothing to pin with
        return compat.torch_pin_memory(batch, self.pin_device)

    def __call__(self, batch):
        flat = []

        def collect(t):
            if stageable(t):
                flat.append(t)
            return t

        map_batch(batch, collect, lambda o: o, tuples_as_lists=not self.to_device)
        # One slot per batch; the copies run in C without the GIL.
        arrays = [t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
                  .view(torch.uint8).numpy() for t in flat]
        try:
            staged = self.stager.stage(arrays)
        except _sluice.LimitError:
            # The consumer holds every slot the ring may make (64 batches,
            # e.g. list(loader)): this batch takes torch's way instead of
            # failing where torch's loader would not.
            with self._lock:
                self.fallbacks += 1
            return self._torch_way(batch)
        del arrays
        it = iter(zip(flat, staged))

        def put(t):
            if not stageable(t):
                if self.to_device:
                    return t.to(self.torch_device)
                return t.pin_memory(self.pin_device) if self.pin_device else t.pin_memory()
            src, out = next(it)
            # from_dlpack of a CUDA tensor makes torch's current stream wait
            # for the copy (__dlpack__(stream=...)) and records the slot's
            # release point there.
            return torch.from_dlpack(out).view(src.dtype).reshape(src.shape)

        def other(o):
            if self.to_device:
                return o
            return o.pin_memory()

        # pin_memory=True gives torch's pin_memory structure; device= keeps
        # the collated one (tuples stay tuples).
        return map_batch(batch, put, other, tuples_as_lists=not self.to_device)


def staging_for(loader, pin):
    """The Staging an iteration of `loader` uses (device=, or pin_memory=True
    on a GPU), or None; sets loader.pin_memory_path. Kept by the loader
    across iterations, so the slots' memory is reused."""
    # Slots: the batches in flight (staged by thread workers) and a few
    # held by the consumer; the ring makes more, up to 64, when needed.
    depth = min(64, max(4, loader.num_workers * loader._sl_prefetch + 2))
    if loader._sl_device is not None:
        kind, dev_id, tdev = loader._sl_device
        want = (kind, dev_id, True)
    elif loader.pin_memory:
        target = pin_target(loader.pin_memory_device)
        if target is None:
            loader.pin_memory_path = "torch" if pin else None
            return None
        kind, dev_id = target
        tdev = None
        want = (kind, dev_id, False)
    else:
        return None
    st = loader._sl_staging
    if st is None or st.key() != want:
        loader._sl_staging = None
        try:
            st = Staging(kind, dev_id, want[2], tdev, depth)
        except _sluice.Error as e:
            if loader._sl_device is not None:
                raise
            # torch's pin_memory still works where sluice cannot load the
            # CUDA runtime (say so, do not fail).
            loader.pin_memory_path = f"torch ({e})"
            return None
        if not want[2] and loader.pin_memory_device:
            st.pin_device = loader.pin_memory_device
        loader._sl_staging = st
    loader.pin_memory_path = (f"sluice {kind}:{dev_id} " +
                              ("device" if want[2] else "pinned"))
    return st
