"""sluice.torch: a drop-in ``torch.utils.data.DataLoader`` that runs a
Python Dataset on worker threads or worker processes.

    from sluice.torch import DataLoader        # was: from torch.utils.data import DataLoader

Same signature and meaning as torch's (it is a subclass; torch 2.x's
``in_order`` taken with any torch), plus three keywords:
``device`` (batches delivered on a CUDA device through sluice's pinned
slots and side stream), ``worker_type`` ("auto", "thread" or "process") and ``seed`` (per-sample
generators and the shuffle order derived from (seed, epoch, index), as
sluice's ops derive theirs; see :func:`sample_rng`). Batches are the ones
torch's ``DataLoader(num_workers=0)`` gives for the same sampler order, for
any ``num_workers`` and ``worker_type``. docs/PYTHON.md, "PyTorch Datasets".

Design (one page):
 - The main thread owns the sampler. It hands batches of indices ("tasks")
   to workers exactly as torch's loader does: prefetch_factor * num_workers
   at the start, one more per batch handed out (and per iterable worker's
   end), each to the next worker of the cycle 0..n-1 whose iterator has not
   ended; batches are handed out strictly in task order (unless
   in_order=False). So the worker count and kind never change the output,
   each worker loads torch's batches (global-RNG draws in process workers
   are torch's), and iterable interleaving equals torch's.
 - Thread workers share the process: no pickling, no copy of the dataset.
   Process workers start with the loader's multiprocessing_context or the
   default one, as torch's (fork: fast start, the dataset shared
   copy-on-write; spawn/forkserver: the dataset pickled); each batch comes back as one
   shared-memory file (/dev/shm) holding every tensor and array of the batch,
   plus a small pickled description; the main process maps it and builds the
   tensors on that memory (no copy, no pickled tensor data). The file is
   unlinked as soon as it is mapped; the memory goes when the batch's last
   tensor does.
 - pin_memory=True (on a GPU) and device= stage each batch through sluice's
   device layer (_sluice.Stager): its tensors copied into one pinned slot,
   and for device= on to the GPU on sluice's side stream; see _Staging.
 - Workers never hold a reference to the iterator or the loader, so dropping
   them (``del loader``, a ``break`` out of the loop, Ctrl-C) runs the
   iterator's finaliser, which stops every thread and process and removes
   every shared-memory file still pending.
"""
import collections
import collections.abc
import glob
import mmap
import multiprocessing
import multiprocessing.connection
import multiprocessing.reduction
import os
import random
import re
import secrets
import signal
import sys
import threading
import time
import warnings
import weakref

import numpy as np
import torch
import torch.utils.data as _tud
from torch._utils import ExceptionWrapper
from torch.utils.data._utils import worker as _tworker
from torch.utils.data._utils.collate import default_collate as _default_collate
from torch.utils.data._utils.pin_memory import pin_memory as _torch_pin_memory

from . import _sluice
import sluice as _package

__all__ = ["DataLoader", "get_worker_info", "sample_seed", "sample_rng", "sample_context"]

# --------------------------------------------------------------------------
# Per-thread context: the worker a thread is, and the sample it is loading.
# --------------------------------------------------------------------------
_tls = threading.local()

# The `op` coordinate of the shuffle generator's key; samples use op 0
# (map-style) or the worker id (iterable-style).
_SHUFFLE_OP = 0x5348554646  # "SHUFF"


def get_worker_info():
    """Inside a worker (thread or process) of a sluice.torch.DataLoader, the
    ``torch.utils.data.WorkerInfo`` of that worker (``id``, ``num_workers``,
    ``seed``, ``dataset``); None elsewhere. torch's own
    ``torch.utils.data.get_worker_info()`` returns the same object (see
    docs/PYTHON.md for when it cannot)."""
    info = getattr(_tls, "info", None)
    if info is not None:
        return info
    return _tworker._worker_info


def _patch_torch_get_worker_info():
    # torch.utils.data.get_worker_info() returns a module global, one per
    # process, which cannot tell thread workers apart. Give the function a
    # body that consults this module's thread-local first. The code object is
    # swapped in place, so references taken before `import sluice.torch`
    # (`from torch.utils.data import get_worker_info`) see it too. Only done
    # when the function is the one-liner expected; otherwise torch's returns
    # None in thread workers (sluice.torch.get_worker_info always works).
    fn = _tworker.get_worker_info
    code = fn.__code__
    if getattr(fn, "_sluice_patched", False):
        return True
    if code.co_names != ("_worker_info",) or code.co_freevars or code.co_argcount:
        return False
    src = ("def get_worker_info():\n"
           "    info = getattr(_sluice_tls, 'info', None)\n"
           "    return _worker_info if info is None else info\n")
    ns = {}
    exec(compile(src, _tworker.__file__, "exec"), {}, ns)
    _tworker.__dict__["_sluice_tls"] = _tls
    fn.__code__ = ns["get_worker_info"].__code__
    fn._sluice_patched = True
    return True


_TORCH_INFO_PATCHED = _patch_torch_get_worker_info()


class sample_context:
    """``with sample_context(seed, epoch, index):`` makes :func:`sample_rng`
    and :func:`sample_seed` answer for that sample outside a loader — to
    reproduce one sample, or to run the same Dataset under torch's own
    DataLoader. The loader sets this context itself around every
    ``__getitem__``."""

    def __init__(self, seed, epoch, index, op=0):
        self.key = (int(seed), int(epoch), index, int(op))

    def __enter__(self):
        self.saved = getattr(_tls, "sample", None)
        _tls.sample = self.key
        return self

    def __exit__(self, *exc):
        _tls.sample = self.saved
        return False


def sample_seed():
    """The 64-bit seed of the sample being loaded on this thread, keyed by
    (seed, epoch, index) as sluice's ops key theirs (``seed``: the loader's,
    or without one a base seed drawn per epoch as torch draws its own).
    Raises RuntimeError outside a sample."""
    key = getattr(_tls, "sample", None)
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


def _gil_enabled():
    probe = getattr(sys, "_is_gil_enabled", None)
    return True if probe is None else bool(probe())


def _free_threaded_build():
    import sysconfig
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


_GIL_MESSAGE = re.compile(r"GIL\) has been enabled to load module '([^']+)'")


def _md_gil(mod):
    """The module's Py_mod_gil setting (1: runs without the GIL, 0: needs
    it) read from the module object (PyModuleObject's md_gil, its last field
    on free-threaded 3.13/3.14); None where the read cannot be trusted."""
    try:
        import ctypes
        import types
        off = types.ModuleType.__basicsize__ - ctypes.sizeof(ctypes.c_void_p)

        def read(m):
            return ctypes.c_void_p.from_address(id(m) + off).value or 0

        # The layout is checked on two modules whose setting is known.
        if read(_sluice) != 1 or read(types.ModuleType("sluice_probe")) != 0:
            return None
        return read(mod)
    except Exception:
        return None


def _gil_culprits():
    """The modules that made CPython turn the GIL on in a free-threaded
    interpreter, first loaded first: from CPython's own warning where the
    warnings registry kept it, else the extension modules loaded that did
    not declare they run without the GIL."""
    import importlib.machinery
    import types
    found = []
    mods = [m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)]
    for m in mods:
        reg = vars(m).get("__warningregistry__")
        if isinstance(reg, dict):
            for key in list(reg):
                hit = _GIL_MESSAGE.search(key[0]) if isinstance(key, tuple) and key and \
                    isinstance(key[0], str) else None
                if hit and hit.group(1) not in found:
                    found.append(hit.group(1))
    if found:
        return found
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for m in mods:
        spec = vars(m).get("__spec__")
        origin = getattr(spec, "origin", None)
        if isinstance(origin, str) and origin.endswith(suffixes) and _md_gil(m) == 0:
            found.append(m.__name__)
    return found


_GIL_WARNED = False


def _warn_if_gil_turned_on():
    """On a free-threaded interpreter whose GIL another module turned back
    on (torchvision does, through triton), say so once: which module, and
    PYTHON_GIL=0."""
    global _GIL_WARNED
    if _GIL_WARNED or not _gil_enabled() or not _free_threaded_build():
        return
    if getattr(sys.flags, "gil", None) == 1:
        return      # PYTHON_GIL=1 / -X gil=1: asked for
    _GIL_WARNED = True
    names = _gil_culprits()
    if names:
        what = f"module {names[0]!r}" + (
            f" (also {', '.join(map(repr, names[1:4]))}{', ...' if len(names) > 4 else ''})"
            if len(names) > 1 else "")
    else:
        what = "a module (torchvision, through triton, is one)"
    warnings.warn(
        f"sluice.torch.DataLoader: this free-threaded Python runs with the GIL: CPython turned "
        f"it back on to load {what}, which does not declare that it runs without the GIL, so "
        f"thread workers run Python code one at a time. Set PYTHON_GIL=0 (or python -X gil=0) "
        f"to keep the GIL off at that module's risk. worker_type='auto' chooses for the "
        f"interpreter as it is now (with the GIL: it measures the first batches on threads).",
        RuntimeWarning, stacklevel=3)


# --------------------------------------------------------------------------
# Loading one batch: the same code on the main thread, a thread worker or a
# process worker.
# --------------------------------------------------------------------------
class _Stopped(Exception):
    """The loader is shutting down: abandon the batch."""


class _Fetch:
    def __init__(self, dataset, iterable, auto_collation, collate_fn, drop_last, batch_size,
                 wid, stop):
        self.dataset = dataset
        self.iterable = iterable
        self.auto = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.batch_size = batch_size
        self.wid = wid
        self.stop = stop
        self.current = None       # the index (or stream position) being loaded
        self.it = None
        self.ended = False
        self.count = 0

    def begin(self):
        """A new epoch: iterable datasets start a fresh iterator."""
        self.it = None
        self.ended = False
        self.count = 0

    def _next_item(self, seed, epoch):
        if self.it is None:
            self.it = iter(self.dataset)
        self.current = f"item {self.count} of this worker's iterator"
        _tls.sample = (seed, epoch, self.count, self.wid)
        try:
            item = next(self.it)
        finally:
            _tls.sample = None
        self.count += 1
        return item

    def __call__(self, indices, seed, epoch):
        stop = self.stop
        if self.iterable:
            if self.ended:
                raise StopIteration
            if self.auto:
                data = []
                for _ in range(self.batch_size):
                    if stop is not None and stop.is_set():
                        raise _Stopped
                    try:
                        data.append(self._next_item(seed, epoch))
                    except StopIteration:
                        self.ended = True
                        break
                if not data or (self.drop_last and len(data) < self.batch_size):
                    raise StopIteration
            else:
                try:
                    data = self._next_item(seed, epoch)
                except StopIteration:
                    self.ended = True
                    raise
        elif self.auto:
            data = []
            try:
                for i in indices:
                    if stop is not None and stop.is_set():
                        raise _Stopped
                    self.current = i
                    _tls.sample = (seed, epoch, i, 0)
                    data.append(self.dataset[i])
            finally:
                _tls.sample = None
        else:
            self.current = indices
            _tls.sample = (seed, epoch, indices, 0)
            try:
                data = self.dataset[indices]
            finally:
                _tls.sample = None
        self.current = None
        if self.collate_fn is _default_collate:
            # torch's default_collate stacks into torch shared memory when it
            # sees worker info; sluice moves batches itself, so hide it.
            info = getattr(_tls, "info", None)
            _tls.info = None
            try:
                return self.collate_fn(data)
            finally:
                _tls.info = info
        return self.collate_fn(data)


def _where(kind, wid, fetch, batch):
    at = fetch.current
    at = f"dataset index {at!r}" if not isinstance(at, str) else at
    pid = f" (pid {os.getpid()})" if kind == "process" else ""
    return f"in sluice.torch.DataLoader {kind} worker {wid}{pid}, {at}, batch {batch}"


def _wrap_exception(where):
    w = ExceptionWrapper(sys.exc_info(), where=where)
    try:
        multiprocessing.reduction.ForkingPickler.dumps(w)
    except Exception:
        w.exc_type = RuntimeError
    return w


# --------------------------------------------------------------------------
# Shared-memory transport of one batch (process workers).
# --------------------------------------------------------------------------
_ALIGN = 64
_SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None


class _ShmRef:
    """Where one tensor or array of a batch lies in the batch's file."""
    __slots__ = ("kind", "offset", "nbytes", "dtype", "shape")

    def __init__(self, kind, offset, nbytes, dtype, shape):
        self.kind, self.offset, self.nbytes, self.dtype, self.shape = (
            kind, offset, nbytes, dtype, shape)

    def __reduce__(self):
        return (_ShmRef, (self.kind, self.offset, self.nbytes, self.dtype, self.shape))


def _flatten(obj, arrays, size):
    """Replace every CPU tensor and plain numpy array in `obj` by a _ShmRef,
    appending (ref, data) to `arrays`; returns (new obj, new size)."""
    if isinstance(obj, torch.Tensor):
        if obj.layout != torch.strided or obj.device.type != "cpu" or obj.is_quantized:
            return obj, size
        t = obj.detach().contiguous()
        nbytes = t.numel() * t.element_size()
        ref = _ShmRef("t", size, nbytes, str(t.dtype).split(".")[-1], tuple(t.shape))
        arrays.append((ref, t))
        return ref, size + (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            return obj, size
        a = np.ascontiguousarray(obj)      # (0-d comes back 1-d: keep obj's shape)
        ref = _ShmRef("n", size, a.nbytes, a.dtype.str, obj.shape)
        arrays.append((ref, a))
        return ref, size + (a.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
    if type(obj) is dict:
        out = {}
        for k, v in obj.items():
            out[k], size = _flatten(v, arrays, size)
        return out, size
    if type(obj) in (list, tuple) or (isinstance(obj, tuple) and hasattr(obj, "_fields")):
        items = []
        for v in obj:
            v, size = _flatten(v, arrays, size)
            items.append(v)
        if type(obj) is list:
            return items, size
        return (type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)), size
    return obj, size


def _batch_to_shm(batch, path):
    """Write the batch's arrays into a new shared-memory file at `path`;
    returns (description, path or None)."""
    arrays = []
    desc, size = _flatten(batch, arrays, 0)
    if size == 0:
        return desc, None
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    for ref, data in arrays:
        if not ref.nbytes:
            continue
        dst = np.frombuffer(mm, dtype=np.uint8, count=ref.nbytes, offset=ref.offset)
        if ref.kind == "t":
            src = data.reshape(-1).view(torch.uint8).numpy()
        else:
            src = data.reshape(-1).view(np.uint8)
        dst[:] = src
        del dst, src
    mm.close()
    return desc, path


_TORCH_DTYPES = {}


def _rebuild(desc, mm):
    if isinstance(desc, _ShmRef):
        if desc.kind == "t":
            dtype = _TORCH_DTYPES.get(desc.dtype)
            if dtype is None:
                dtype = _TORCH_DTYPES.setdefault(desc.dtype, getattr(torch, desc.dtype))
            if desc.nbytes == 0:
                return torch.empty(desc.shape, dtype=dtype)
            raw = torch.frombuffer(mm, dtype=torch.uint8, count=desc.nbytes,
                                   offset=desc.offset)
            return raw.view(dtype).reshape(desc.shape)
        if desc.nbytes == 0:
            return np.empty(desc.shape, dtype=np.dtype(desc.dtype))
        return np.frombuffer(mm, dtype=np.dtype(desc.dtype),
                             count=desc.nbytes // np.dtype(desc.dtype).itemsize,
                             offset=desc.offset).reshape(desc.shape)
    if type(desc) is dict:
        return {k: _rebuild(v, mm) for k, v in desc.items()}
    if type(desc) is list:
        return [_rebuild(v, mm) for v in desc]
    if isinstance(desc, tuple):
        items = [_rebuild(v, mm) for v in desc]
        return type(desc)(*items) if hasattr(desc, "_fields") else tuple(items)
    return desc


def _batch_from_shm(desc, path):
    if path is None:
        return _rebuild(desc, None)
    fd = os.open(path, os.O_RDWR)
    try:
        os.unlink(path)
        size = os.fstat(fd).st_size
        mm = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    # The tensors keep `mm` alive through their buffer export; it is unmapped
    # when the last of them dies.
    return _rebuild(desc, mm)


def _unlink_quiet(path):
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


# --------------------------------------------------------------------------
# Worker bodies. A task is (generation, task_no, indices, seed, epoch); a
# result is (generation, task_no, worker, kind, payload, cpu_s, wall_s) with
# kind "ok", "end" (an iterable dataset's iterator ended) or "err".
# --------------------------------------------------------------------------
class _Config:
    """What a worker needs, and nothing that refers back to the loader."""

    def __init__(self, loader, num_workers, base_seed):
        self.dataset = loader.dataset
        self.iterable = loader._dataset_kind == _tud._DatasetKind.Iterable
        self.auto_collation = loader._auto_collation
        self.collate_fn = loader.collate_fn
        self.drop_last = loader.drop_last
        self.batch_size = loader.batch_size
        self.worker_init_fn = loader.worker_init_fn
        self.num_workers = num_workers
        self.base_seed = base_seed
        self.parent_pid = os.getpid()
        self.token = secrets.token_hex(4)
        # pin_memory through sluice: thread workers copy their batch into a
        # pinned slot themselves (set by the iterator; never used by
        # process workers, whose batches are staged by the main thread).
        self.stage = None

    def __getstate__(self):
        # What a spawned or forkserver worker gets, pickled as torch pickles
        # its worker arguments: never the staging ring (main process only).
        state = dict(self.__dict__)
        state["stage"] = None
        return state

    def fetcher(self, wid, stop):
        return _Fetch(self.dataset, self.iterable, self.auto_collation, self.collate_fn,
                      self.drop_last, self.batch_size, wid, stop)


def _thread_clock():
    """(CPU seconds, seconds spent runnable but waiting for a core) of the
    calling thread. The second comes from the scheduler's statistics
    (/proc/thread-self/schedstat) and is 0 where they are not available.
    Waiting for the GIL is neither: the thread sleeps."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            cpu_ns, wait_ns = f.read().split()[:2]
        return int(cpu_ns) * 1e-9, int(wait_ns) * 1e-9
    except (OSError, ValueError):
        return time.thread_time(), 0.0


def _serve(cfg, wid, kind, recv, send, stop, shm_prefix):
    """The loop of one worker: take tasks, answer each one."""
    init_error = None
    if cfg.worker_init_fn is not None:
        try:
            cfg.worker_init_fn(wid)
        except Exception:
            init_error = _wrap_exception(
                f"in sluice.torch.DataLoader {kind} worker {wid}, in worker_init_fn")
    fetch = cfg.fetcher(wid, stop)
    generation = None
    count = 0
    while True:
        task = recv()
        if task is None:
            return
        gen, tno, indices, seed, epoch = task
        if gen != generation:
            generation = gen
            fetch.begin()
        if init_error is not None:
            send((gen, tno, wid, "err", init_error, 0.0, 0.0))
            continue
        (c0, q0), t0 = _thread_clock(), time.perf_counter()
        try:
            batch = fetch(indices, seed, epoch)
            if shm_prefix is None and cfg.stage is not None:
                batch = _Staged(cfg.stage(batch))
            if shm_prefix is not None:
                batch = _batch_to_shm(batch, f"{shm_prefix}-{count}")
                count += 1
            kind_out, payload = "ok", batch
        except _Stopped:
            return
        except StopIteration:
            kind_out, payload = "end", None
        except Exception:
            kind_out, payload = "err", _wrap_exception(_where(kind, wid, fetch, tno))
        (c1, q1), t1 = _thread_clock(), time.perf_counter()
        # cpu, and the time the task could have run: wall minus the time
        # other processes held the cores.
        send((gen, tno, wid, kind_out, payload, c1 - c0, (t1 - t0) - (q1 - q0)))


def _thread_worker_info(cfg, wid):
    """A thread worker's WorkerInfo. Where torch's WorkerInfo has the thread
    fields (torch 2.x: ``worker_method`` and ``rng``, read by
    ``torch.random.thread_safe_generator()``), they are filled: "thread",
    and this worker's own generators, seeded as a process worker seeds the
    global ones (seed = base_seed + id; numpy from torch's seed sequence)."""
    seed = cfg.base_seed + wid
    kw = {}
    rng_cls = getattr(_tworker, "_RNG", None)
    fields = getattr(_tworker.WorkerInfo, "__dataclass_fields__", {})
    if rng_cls is not None and "worker_method" in fields and "rng" in fields:
        g = torch.Generator()
        g.manual_seed(seed)
        kw = {"worker_method": "thread",
              "rng": rng_cls(random_generator=random.Random(seed), torch_generator=g,
                             numpy_generator=np.random.default_rng(
                                 _tworker._generate_state(cfg.base_seed, wid)))}
    return _tworker.WorkerInfo(id=wid, num_workers=cfg.num_workers, seed=seed,
                               dataset=cfg.dataset, **kw)


def _thread_main(cfg, wid, inbox, results, stop):
    _tls.info = _thread_worker_info(cfg, wid)

    def recv():
        while not stop.is_set():
            try:
                return inbox.get(timeout=0.1)
            except Exception:  # queue.Empty
                continue
        return None

    try:
        _serve(cfg, wid, "thread", recv, results.put, stop, None)
    finally:
        _tls.info = None


def _process_main(cfg, wid, conn, inherited):
    # The process that started this one: the main process (fork, spawn) or
    # the forkserver, which exits when the main process does. Either way a
    # new parent means the main process is gone.
    parent = os.getppid()
    # Parent-side pipe ends copied by fork: closed, so that the parent's exit
    # is seen as EOF.
    for c in inherited:
        try:
            c.close()
        except OSError:
            pass
    # A terminal's Ctrl-C reaches the whole process group; the parent stops
    # the workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    seed = cfg.base_seed + wid
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(_tworker._generate_state(cfg.base_seed, wid))
    info = _tworker.WorkerInfo(id=wid, num_workers=cfg.num_workers, seed=seed,
                               dataset=cfg.dataset)
    _tls.info = info
    if not _TORCH_INFO_PATCHED:
        _tworker._worker_info = info

    def recv():
        while True:
            try:
                if conn.poll(0.5):
                    return conn.recv()
            except (EOFError, OSError):
                return None
            if os.getppid() != parent:
                return None

    def send(msg):
        try:
            conn.send(msg)
        except (BrokenPipeError, OSError):
            if msg[3] == "ok":
                _unlink_quiet(msg[4][1])
            raise _Stopped from None

    prefix = os.path.join(_SHM_DIR or "/tmp", f"sluice-torch-{cfg.parent_pid}-{cfg.token}-{wid}")
    try:
        _serve(cfg, wid, "process", recv, send, None, prefix)
    except _Stopped:
        pass
    finally:
        # Every way out ends this worker's part in the epoch: batches it
        # wrote that the main process has not mapped (and unlinked) will
        # never be, also when the main process died.
        for path in glob.glob(f"{prefix}-*"):
            _unlink_quiet(path)


# --------------------------------------------------------------------------
# Pools.
# --------------------------------------------------------------------------
class _WorkerDied(RuntimeError):
    pass


class _ThreadPool:
    kind = "thread"

    def __init__(self, cfg):
        import queue
        self.cfg = cfg
        self.n = cfg.num_workers
        self.results = queue.SimpleQueue()
        self.stop = threading.Event()
        self.inboxes = [queue.SimpleQueue() for _ in range(self.n)]
        self.outstanding = [0] * self.n
        self.threads = []
        for wid in range(self.n):
            t = threading.Thread(target=_thread_main,
                                 args=(cfg, wid, self.inboxes[wid], self.results, self.stop),
                                 name=f"sluice.torch worker {wid}", daemon=True)
            t.start()
            self.threads.append(t)
        self.closed = False

    def send(self, wid, task):
        self.outstanding[wid] += 1
        self.inboxes[wid].put(task)

    def poll(self, timeout):
        import queue
        out = []
        try:
            out.append(self.results.get(timeout=timeout))
            while True:
                out.append(self.results.get_nowait())
        except queue.Empty:
            pass
        for r in out:
            self.outstanding[r[2]] -= 1
        return out

    def describe(self, wid):
        return f"thread worker {wid}"

    def shutdown(self, wait=0.3):
        if self.closed:
            return
        self.closed = True
        self.stop.set()
        for q in self.inboxes:
            q.put(None)
        deadline = time.monotonic() + wait
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))

    def alive(self):
        return [t for t in self.threads if t.is_alive()]


class _ProcessPool:
    kind = "process"

    def __init__(self, cfg, ctx):
        """`ctx`: the multiprocessing context the workers start with (the
        loader's multiprocessing_context, or the default one, as torch's)."""
        self.cfg = cfg
        self.n = cfg.num_workers
        self.start_method = ctx.get_start_method()
        # Only a forked child holds copies of the parent's pipe ends.
        fork = self.start_method == "fork"
        self.conns, self.procs = [], []
        self.outstanding = [0] * self.n
        self.closed = False
        self.dead = None
        try:
            for wid in range(self.n):
                parent, child = ctx.Pipe(duplex=True)
                self.conns.append(parent)
                try:
                    p = ctx.Process(target=_process_main,
                                    args=(cfg, wid, child, list(self.conns) if fork else []),
                                    name=f"sluice.torch worker {wid}", daemon=True)
                    p.start()
                finally:
                    child.close()
                self.procs.append(p)
        except BaseException:
            self.shutdown()
            raise
        self.by_conn = {c: i for i, c in enumerate(self.conns)}
        self.by_sentinel = {p.sentinel: i for i, p in enumerate(self.procs)}

    def send(self, wid, task):
        self.outstanding[wid] += 1
        try:
            self.conns[wid].send(task)
        except (BrokenPipeError, OSError):
            self._check_dead(force=True)
            raise

    def describe(self, wid):
        p = self.procs[wid]
        return f"worker process {wid} (pid {p.pid})"

    def _check_dead(self, force=False):
        for wid, p in enumerate(self.procs):
            if p.exitcode is not None:
                code = p.exitcode
                if code < 0:
                    try:
                        how = f"killed by signal {signal.Signals(-code).name}"
                    except ValueError:
                        how = f"killed by signal {-code}"
                else:
                    how = f"exited with code {code}"
                self.dead = (wid, how)
                raise _WorkerDied(wid, how)
        if force:
            raise _WorkerDied(-1, "its pipe closed")

    def poll(self, timeout):
        ready = multiprocessing.connection.wait(self.conns + list(self.by_sentinel), timeout)
        out = []
        for r in ready:
            wid = self.by_conn.get(r)
            if wid is None:
                continue
            try:
                while r.poll():
                    out.append(r.recv())
            except (EOFError, OSError):
                pass
        for m in out:
            self.outstanding[m[2]] -= 1
        if any(r in self.by_sentinel for r in ready):
            self.pending = out
            for m in out:
                if m[3] == "ok":
                    _unlink_quiet(m[4][1])
            self._check_dead()
        return out

    def shutdown(self, wait=0.3):
        if self.closed:
            return
        self.closed = True
        for c in self.conns:
            try:
                c.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + wait
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.exitcode is None:
                p.terminate()
        for p in self.procs:
            p.join(0.5)
            if p.exitcode is None:
                p.kill()
                p.join()
        for c in self.conns:
            c.close()
        for p in self.procs:
            p.close()
        # Batches written but never received.
        base = _SHM_DIR or "/tmp"
        for path in glob.glob(os.path.join(
                base, f"sluice-torch-{self.cfg.parent_pid}-{self.cfg.token}-*")):
            _unlink_quiet(path)

    def alive(self):
        return [p for p in self.procs if not self.closed and p.exitcode is None]


def _shutdown_pools(pools):
    for p in pools:
        if p is not None:
            p.shutdown()


# --------------------------------------------------------------------------
# pin_memory and device=: batches staged through sluice's device layer.
# --------------------------------------------------------------------------
def _pin_target(pin_memory_device):
    """Where pin_memory=True stages through sluice: ("cuda", id) when torch
    sees a GPU and `pin_memory_device` (if given) names a CUDA device; None
    otherwise (torch's pin_memory, or nothing, as torch does)."""
    if not torch.cuda.is_available():
        return None
    dev = torch.device(pin_memory_device) if pin_memory_device else torch.device("cuda")
    if dev.type != "cuda":
        return None
    return ("cuda", torch.cuda.current_device() if dev.index is None else dev.index)


def _parse_device(device):
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


def _map_batch(data, leaf, other, tuples_as_lists=True):
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
            return type(data)({k: _map_batch(v, leaf, other, tuples_as_lists)
                               for k, v in data.items()})
        except TypeError:
            return {k: _map_batch(v, leaf, other, tuples_as_lists) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_map_batch(v, leaf, other, tuples_as_lists) for v in data))
    if isinstance(data, tuple):
        items = [_map_batch(v, leaf, other, tuples_as_lists) for v in data]
        return items if tuples_as_lists else tuple(items)
    if isinstance(data, collections.abc.Sequence):
        try:
            return type(data)([_map_batch(v, leaf, other, tuples_as_lists) for v in data])
        except TypeError:
            return [_map_batch(v, leaf, other, tuples_as_lists) for v in data]
    if hasattr(data, "pin_memory"):
        return other(data)
    return data


def _stageable(t):
    return (t.device.type == "cpu" and t.layout == torch.strided and not t.is_quantized
            and not t.is_complex())


class _Staged:
    """A batch a thread worker already staged."""
    __slots__ = ("batch",)

    def __init__(self, batch):
        self.batch = batch


class _Staging:
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
            return _map_batch(batch, lambda t: t.to(self.torch_device), lambda o: o,
                              tuples_as_lists=False)
        if self.stager.kind != "cuda":
            return batch          # the host backend (tests): nothing to pin with
        return _torch_pin_memory(batch, self.pin_device)

    def __call__(self, batch):
        flat = []

        def collect(t):
            if _stageable(t):
                flat.append(t)
            return t

        _map_batch(batch, collect, lambda o: o, tuples_as_lists=not self.to_device)
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
            if not _stageable(t):
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
        return _map_batch(batch, put, other, tuples_as_lists=not self.to_device)


# --------------------------------------------------------------------------
# The iterator.
# --------------------------------------------------------------------------
# "auto" on a GIL build: the first batches of the first epoch run on threads
# while each task's thread CPU time and wall time are measured, less the time
# the thread was runnable but waited for a core (other threads and other
# processes on the machine: the scheduler's run-queue wait). What remains
# besides CPU time is time asleep, which for a loading thread is mostly time
# waiting for the GIL, so sum(cpu) / sum(wall - run-queue wait) over those
# tasks says how much of the work could run in parallel. At or above
# _AUTO_THRESHOLD threads stay; below it the loader drains the threads and
# continues (and keeps, for later epochs) with processes.
# docs/PYTHON.md gives the figures behind the threshold.
_AUTO_THRESHOLD = 0.8
_AUTO_PROBE_TASKS = 6  # per worker, after its first


class _Iter:
    def __init__(self, loader):
        self._loader = weakref.ref(loader)
        self._num_workers = loader.num_workers
        self._iterable = loader._dataset_kind == _tud._DatasetKind.Iterable
        self._prefetch = loader._sl_prefetch if self._num_workers else 0
        self._in_order = bool(loader._sl_in_order)
        self._timeout = loader.timeout
        if loader.pin_memory_device:
            self._pin = bool(loader.pin_memory)
            self._pin_device = loader.pin_memory_device
        else:
            self._pin = bool(loader.pin_memory) and torch.cuda.is_available()
            self._pin_device = None
        # sluice's device path: device= always; pin_memory=True where a GPU
        # is there and sluice's CUDA backend opens (else torch's pin_memory,
        # the reason in loader.pin_memory_path).
        self._staging = loader._sl_staging_for(self._pin)
        if self._staging is not None:
            self._pin = False
        self._pool = None
        self._pools = []            # for the finaliser
        self._finalizer = weakref.finalize(self, _shutdown_pools, self._pools)
        self._generation = 0
        self._cfg = None
        self._fetch = None
        self._begin(loader, first=True)

    # -- epochs ------------------------------------------------------------
    def _begin(self, loader, first=False):
        self._generation += 1
        state, loader._sl_pending_state = loader._sl_pending_state, None
        epoch = loader._sl_epoch
        if loader._sl_shuffle_gen is not None:
            loader._sl_shuffle_gen.manual_seed(
                _sluice.sample_seed(loader._sl_seed, epoch, 0, _SHUFFLE_OP))
        gen = loader.generator
        skip = 0
        saved_rng = None
        if state is not None:
            skip = int(state["batch"])
            rng = state.get("rng")
            if rng is not None:
                if gen is not None:
                    gen.set_state(rng)
                else:
                    saved_rng = torch.get_rng_state()
                    torch.set_rng_state(rng)
        self._rng_at_start = gen.get_state() if gen is not None else torch.get_rng_state()
        # The order of draws is torch's: the sampler's iterator is made, then
        # the base seed drawn (by a new iterator only: torch's persistent
        # workers keep theirs, and their epochs after the first draw none),
        # then, with workers, torch's _reset makes the sampler's iterator
        # again; the sampler draws on its first step.
        fresh = first if state is None else state.get("fresh", True)
        self._sampler_iter = iter(loader._index_sampler)
        if fresh:
            self._base_seed = int(torch.empty((), dtype=torch.int64)
                                  .random_(generator=gen).item())
            if self._num_workers > 0:
                self._sampler_iter = iter(loader._index_sampler)
        elif state is not None:
            self._base_seed = int(state["base_seed"])
        self._fresh = fresh
        self._seed = loader._sl_seed if loader._sl_seed is not None else self._base_seed
        self._epoch = epoch
        self._yielded = 0
        self._discard = 0
        self._lookahead = collections.deque()
        self._exhausted = False
        if skip:
            if self._iterable:
                self._discard = skip
            else:
                for _ in range(skip):
                    try:
                        next(self._sampler_iter)
                    except StopIteration:
                        self._exhausted = True
                        break
            self._yielded = skip
        if saved_rng is not None:
            # The sampler's first draw happens under the saved state too.
            if not self._exhausted and not self._iterable:
                try:
                    self._lookahead.append(next(self._sampler_iter))
                except StopIteration:
                    self._exhausted = True
            torch.set_rng_state(saved_rng)
        loader._sl_running = weakref.ref(self)
        self._tasks = {}            # task_no -> (worker, indices)
        self._results = {}          # task_no -> (kind, payload)
        self._next_task = 0
        self._rcvd = 0              # the first task not handed out yet
        self._taken = 0             # tasks handed out (or skipped)
        # torch's dispatch: batch k goes to the next worker of the cycle
        # 0, 1, ..., n-1, 0, ... whose iterable has not ended (all of them
        # for a map-style dataset); the cycle starts at worker 0 each epoch.
        self._status = [True] * self._num_workers
        self._cycle = 0
        self._owed = 0              # dispatches held back while auto drains the threads
        self._per_worker = [0] * self._num_workers
        if self._num_workers == 0:
            cfg = _Config(loader, 0, self._base_seed)
            self._fetch = cfg.fetcher(0, None)
            self._fetch.begin()
            return
        if self._pool is None:
            self._cfg = _Config(loader, self._num_workers, self._base_seed)
            st = self._staging
            if st is not None and not st.to_device:
                # Pinned slots hold no stream state: thread workers fill
                # them, as torch's pin thread does, off the main thread.
                # device= stays on the main thread, where the copy is
                # queued in the order the batches are handed out.
                self._cfg.stage = st
            self._start_pool(loader)
        self._probe = None
        if self._pool.kind == "thread" and loader._sl_auto_pending:
            self._probe = {"cpu_share": [], "seen": {}}
        # torch primes prefetch_factor * num_workers batches, then asks the
        # sampler for one more each time a batch is handed out (and when an
        # iterable worker's end is seen): the sampler is asked at torch's
        # times, and worker w loads exactly the batches torch's worker w does.
        for _ in range(self._prefetch * self._num_workers):
            self._try_put()

    def _start_pool(self, loader):
        kind = loader._sl_worker_type_now()
        if kind == "thread":
            pool = _ThreadPool(self._cfg)
        else:
            ctx = loader.multiprocessing_context or multiprocessing.get_context()
            try:
                pool = _ProcessPool(self._cfg, ctx)
            except Exception as e:
                method = ctx.get_start_method()
                why = (f"worker processes cannot start with the {method!r} start method "
                       f"({type(e).__name__}: {e})")
                if method != "fork":
                    why += ("; spawn and forkserver pickle the dataset, collate_fn and "
                            "worker_init_fn, as torch's loader does")
                if loader.worker_type != "auto":
                    if hasattr(e, "add_note"):
                        e.add_note(f"sluice.torch.DataLoader: {why}. Make them picklable "
                                   f"(module-level classes and functions), use "
                                   f"multiprocessing_context='fork', or "
                                   f"worker_type='thread'")
                    raise
                # "auto" chose processes; threads still run the Dataset.
                warnings.warn(f"sluice.torch.DataLoader: worker_type='auto' continues on "
                              f"threads: {why}", RuntimeWarning, stacklevel=4)
                loader._sl_auto_choice = kind = "thread"
                loader._sl_auto_pending = False
                pool = _ThreadPool(self._cfg)
        self._pool = pool
        self._pools.append(pool)
        loader.worker_type_used = kind

    def _finish(self):
        loader = self._loader()
        if loader is not None and loader._sl_epoch == self._epoch:
            loader._sl_epoch = self._epoch + 1
        self._exhausted = True
        self._done = True

    # -- dispatch ----------------------------------------------------------
    def _next_indices(self):
        if self._lookahead:
            return self._lookahead.popleft()
        return next(self._sampler_iter)

    def _try_put(self):
        """torch's _try_put_index: the sampler's next batch to the next
        active worker of the cycle."""
        if self._draining:
            self._owed += 1
            return
        if self._exhausted:
            return
        if self._iterable:
            indices = None
        else:
            try:
                indices = self._next_indices()
            except StopIteration:
                self._exhausted = True
                return
        n = self._num_workers
        active = sum(self._status)
        if not active:
            # Every worker's iterable has ended.
            self._exhausted = True
            return
        # in_order=False (torch 2.x): the next active worker of the cycle
        # with fewer than its share of the prefetched batches, as torch's.
        share = self._prefetch * n // active
        first = None
        for _ in range(n):
            wid = self._cycle
            self._cycle = (wid + 1) % n
            if self._status[wid]:
                if self._in_order or self._per_worker[wid] < share:
                    break
                if first is None:
                    first = wid
        else:
            wid = first
        tno = self._next_task
        self._next_task += 1
        self._tasks[tno] = (wid, indices)
        self._per_worker[wid] += 1
        self._pool.send(wid, (self._generation, tno, indices, self._seed, self._epoch))

    _draining = False

    def _receive(self, timeout):
        for gen, tno, wid, kind, payload, cpu, wall in self._pool.poll(timeout):
            if gen != self._generation:
                if kind == "ok" and self._pool.kind == "process":
                    _unlink_quiet(payload[1])
                continue
            self._per_worker[wid] -= 1
            self._results[tno] = (kind, payload, self._pool.kind)
            if kind == "end" and self._status[wid]:
                # As torch: the worker leaves the cycle when its end arrives,
                # and one more batch is asked for in its place.
                self._status[wid] = False
                self._try_put()
            if self._probe is not None and kind == "ok" and wall > 0:
                # Each worker's first batch is left out: it pays one-time
                # costs (imports under the import lock, first-call set-up).
                seen = self._probe["seen"]
                seen[wid] = seen.get(wid, 0) + 1
                if seen[wid] > 1:
                    self._probe["cpu_share"].append((cpu, wall))

    def _auto_decide(self):
        probe = self._probe
        samples = probe["cpu_share"]
        if len(samples) < _AUTO_PROBE_TASKS * self._num_workers and not self._exhausted:
            return
        self._probe = None
        loader = self._loader()
        if loader is None:
            return
        loader._sl_auto_pending = False
        if not samples:
            loader._sl_auto_choice = "thread"
            return
        ratio = min(1.0, sum(c for c, _ in samples) / max(1e-9, sum(b for _, b in samples)))
        choice = "thread" if ratio >= _AUTO_THRESHOLD else "process"
        loader.auto_probe = {"tasks": len(samples), "cpu_share": round(ratio, 3),
                             "choice": choice, "threshold": _AUTO_THRESHOLD}
        loader._sl_auto_choice = choice
        if choice == "process" and not self._exhausted:
            self._draining = True

    def _switch_when_drained(self):
        # Every thread is idle (no task out): stop them, then fork processes.
        if any(self._per_worker):
            return
        loader = self._loader()
        self._pool.shutdown()
        self._pool = None
        self._draining = False
        if loader is not None:
            self._start_pool(loader)
        owed, self._owed = self._owed, 0
        for _ in range(owed):
            self._try_put()

    # -- handing out -------------------------------------------------------
    def __iter__(self):
        return self

    def __len__(self):
        loader = self._loader()
        return len(loader) if loader is not None else 0

    def __next__(self):
        try:
            return self._next()
        except KeyboardInterrupt:
            self._close()
            raise

    def _next(self):
        if getattr(self, "_done", False):
            raise StopIteration
        if self._num_workers == 0:
            return self._next_inline()
        try:
            return self._next_from_workers()
        except _WorkerDied as e:
            wid, how = e.args
            lost = [t for t, (w, _) in self._tasks.items() if w == wid]
            detail = ""
            if lost:
                first = min(lost)
                idx = self._tasks[first][1]
                shown = idx if idx is None or len(idx) <= 8 else list(idx[:8]) + ["..."]
                detail = f" while loading batch {self._yielded + first - self._rcvd}" + (
                    f" (dataset indices {shown})" if idx is not None else "")
            what = self._pool.describe(wid) if wid >= 0 else "a worker process"
            self._close()
            raise RuntimeError(
                f"sluice.torch.DataLoader: {what} {how}{detail}; the epoch cannot go on. "
                f"A worker killed by SIGKILL often ran out of memory (see dmesg): lower "
                f"num_workers or batch_size, or use worker_type='thread'") from None

    def _next_from_workers(self):
        deadline = None
        while True:
            if self._probe is not None:
                self._auto_decide()
            if self._draining:
                self._switch_when_drained()
            tno = self._rcvd
            if not self._in_order and self._results and tno not in self._results:
                # in_order=False: the earliest batch that has arrived.
                tno = min(self._results)
            if tno in self._results:
                kind, payload, pool_kind = self._results.pop(tno)
                self._tasks.pop(tno)
                self._taken += 1
                while self._rcvd not in self._tasks and self._rcvd < self._next_task:
                    self._rcvd += 1
                deadline = None
                if kind == "end":
                    continue
                self._try_put()
                if kind == "err":
                    payload.reraise()
                if pool_kind == "process":
                    payload = _batch_from_shm(*payload)
                if self._discard:
                    self._discard -= 1
                    continue
                return self._hand_out(payload)
            if self._exhausted and self._taken == self._next_task:
                self._finish()
                raise StopIteration
            now = time.monotonic()
            if self._timeout > 0:
                if deadline is None:
                    deadline = now + self._timeout
                elif now >= deadline:
                    who = self._tasks.get(self._rcvd, (None,))[0]
                    where = f" from {self._pool.describe(who)}" if who is not None else ""
                    self._close()
                    raise RuntimeError(
                        f"sluice.torch.DataLoader timed out after {self._timeout} seconds "
                        f"waiting for batch {self._yielded}{where}; raise timeout= or find "
                        f"what blocks the Dataset")
                wait = min(0.1, deadline - now)
            else:
                wait = 0.1
            self._receive(wait)

    def _next_inline(self):
        while True:
            if self._exhausted:
                self._finish()
                raise StopIteration
            if self._iterable:
                indices = None
            else:
                try:
                    indices = self._next_indices()
                except StopIteration:
                    self._finish()
                    raise
            try:
                batch = self._fetch(indices, self._seed, self._epoch)
            except StopIteration:
                self._finish()
                raise
            if self._discard:
                self._discard -= 1
                continue
            return self._hand_out(batch)

    def _hand_out(self, batch):
        # A batch whose staging fails is not handed out: the error is raised
        # and state_dict() does not count it (the next next() goes on with
        # the following batch, as after a Dataset error).
        if isinstance(batch, _Staged):
            batch = batch.batch
        elif self._staging is not None:
            batch = self._staging(batch)
        elif self._pin:
            batch = _torch_pin_memory(batch, self._pin_device)
        self._yielded += 1
        return batch

    def _state(self):
        # fresh/base_seed: an epoch of persistent workers after their first
        # draws no base seed (as torch's), and a resume must not either.
        return {"format": "sluice.torch.DataLoader/1", "epoch": self._epoch,
                "batch": self._yielded, "rng": self._rng_at_start,
                "fresh": self._fresh, "base_seed": self._base_seed}

    def _reset(self, loader):
        """Persistent workers: start the next epoch on the same workers."""
        self._done = False
        self._draining = False
        self._begin(loader)

    def _close(self):
        self._done = True
        self._finalizer()


def _init_params():
    import inspect
    try:
        return frozenset(inspect.signature(_tud.DataLoader.__init__).parameters)
    except (TypeError, ValueError):
        return frozenset()


_TORCH_INIT_PARAMS = _init_params()


class DataLoader(_tud.DataLoader):
    """torch.utils.data.DataLoader's interface and batches, on sluice's
    workers: ``num_workers`` threads (``worker_type="thread"``) or processes
    (``"process"``) run the Dataset; ``"auto"`` (default) picks threads when
    the interpreter runs without the GIL, and otherwise measures the first
    batches on threads (docs/PYTHON.md). ``seed``: per-sample generators
    (:func:`sample_rng`) and, with ``shuffle=True`` and no ``generator``, the
    shuffle order, derived from (seed, epoch); None: torch's behaviour.
    ``pin_memory=True`` pins through sluice's pinned slots where torch sees
    a GPU (``pin_memory_path`` says which way); ``device="cuda"`` (or
    "cuda:N", "host" for the host backend) delivers every tensor on the
    device, copied on sluice's side stream.

    Also: :meth:`staging_stats`, :meth:`set_epoch`, :meth:`state_dict` / :meth:`load_state_dict`
    (exact mid-epoch resume), ``worker_type_used`` (the kind running now)
    and ``auto_probe`` (what "auto" measured)."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None,
                 persistent_workers=False, pin_memory_device="", in_order=True,
                 worker_type="auto", seed=None, device=None):
        self._sl_device = _parse_device(device)
        if worker_type not in ("auto", "thread", "process"):
            raise ValueError(f"worker_type: expected 'auto', 'thread' or 'process', "
                             f"got {worker_type!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                                 or seed < 0):
            raise ValueError(f"seed: expected None or an int >= 0, got {seed!r}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int):
            raise TypeError(f"num_workers: expected an int, got {type(num_workers).__name__}")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing.let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        if prefetch_factor is not None and (isinstance(prefetch_factor, bool)
                                            or not isinstance(prefetch_factor, int)
                                            or prefetch_factor < 1):
            raise ValueError(f"prefetch_factor: expected an int >= 1, got {prefetch_factor!r}")
        self.worker_type = worker_type
        self._sl_seed = seed
        self._sl_shuffle_gen = None
        if (shuffle and sampler is None and batch_sampler is None and generator is None
                and seed is not None and not isinstance(dataset, _tud.IterableDataset)):
            # The order is torch's RandomSampler's, drawn from a generator
            # keyed by (seed, epoch) at the start of every epoch.
            self._sl_shuffle_gen = torch.Generator()
            sampler = _tud.RandomSampler(dataset, generator=self._sl_shuffle_gen)
            shuffle = None
        # torch 1.x's default prefetch_factor is 2, torch 2.x's None (refused
        # with num_workers > 0 on 1.x, required with num_workers == 0 on 2.x).
        extra = {"prefetch_factor": prefetch_factor or 2} if num_workers > 0 else {}
        # in_order: torch 2.x's (kept by torch where it has it); sluice takes
        # it with any torch.
        if "in_order" in _TORCH_INIT_PARAMS:
            extra["in_order"] = in_order
        # multiprocessing_context: checked and kept by torch (a start method's
        # name or a context; refused with num_workers=0); process workers
        # start with it.
        super().__init__(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers,
                         collate_fn, pin_memory, drop_last, timeout, worker_init_fn,
                         multiprocessing_context, generator, persistent_workers=persistent_workers,
                         pin_memory_device=pin_memory_device, **extra)
        self._sl_prefetch = 2 if prefetch_factor is None else prefetch_factor
        self._sl_in_order = bool(in_order)
        if "in_order" not in _TORCH_INIT_PARAMS:
            self.in_order = bool(in_order)
        self.seed = seed
        self.worker_type_used = None
        self.auto_probe = None
        self._sl_auto_pending = (worker_type == "auto" and num_workers > 0)
        self._sl_auto_choice = None
        self._sl_epoch = 0
        self._sl_pending_state = None
        self._sl_running = None
        self._sl_iter = None
        self.device = self._sl_device[2] if self._sl_device else None
        if num_workers > 0 and worker_type != "process":
            _warn_if_gil_turned_on()
        self.pin_memory_path = None
        self._sl_staging = None

    def _sl_staging_for(self, pin):
        """The _Staging an iteration uses (device=, or pin_memory=True on a
        GPU), or None; sets pin_memory_path."""
        # Slots: the batches in flight (staged by thread workers) and a few
        # held by the consumer; the ring makes more, up to 64, when needed.
        depth = min(64, max(4, self.num_workers * self._sl_prefetch + 2))
        if self._sl_device is not None:
            kind, dev_id, tdev = self._sl_device
            want = (kind, dev_id, True)
        elif self.pin_memory:
            target = _pin_target(self.pin_memory_device)
            if target is None:
                self.pin_memory_path = "torch" if pin else None
                return None
            kind, dev_id = target
            tdev = None
            want = (kind, dev_id, False)
        else:
            return None
        st = self._sl_staging
        if st is None or st.key() != want:
            self._sl_staging = None
            try:
                st = _Staging(kind, dev_id, want[2], tdev, depth)
            except _sluice.Error as e:
                if self._sl_device is not None:
                    raise
                # torch's pin_memory still works where sluice cannot load the
                # CUDA runtime (say so, do not fail).
                self.pin_memory_path = f"torch ({e})"
                return None
            if not want[2] and self.pin_memory_device:
                st.pin_device = self.pin_memory_device
            self._sl_staging = st
        self.pin_memory_path = (f"sluice {kind}:{dev_id} " +
                                ("device" if want[2] else "pinned"))
        return st

    def staging_stats(self):
        """What sluice's device path did for this loader (device= or
        pin_memory=True through sluice): batches, staged_bytes, h2d_bytes,
        wait_s (time waiting for a slot's events), slots, fallback_batches
        (batches that took torch's way because the consumer held every slot
        the ring may make, 64); None when it is not used."""
        return None if self._sl_staging is None else self._sl_staging.stats()

    def _sl_worker_type_now(self):
        """The kind of workers to start now. "auto" decides for the
        interpreter as it is at this moment: a free-threaded one whose GIL
        is off gets threads at once (no probe); with the GIL (also turned
        back on by a module since the loader was made) a map-style dataset
        is measured on threads (once: the verdict is kept), an iterable one
        gets processes."""
        if self.worker_type != "auto":
            if self.worker_type == "thread":
                _warn_if_gil_turned_on()
            return self.worker_type
        _warn_if_gil_turned_on()
        if not _gil_enabled():
            self._sl_auto_pending = False
            self.auto_probe = {"choice": "thread", "why": "the interpreter runs without the GIL"}
            return "thread"
        if self._dataset_kind == _tud._DatasetKind.Iterable:
            # An iterable dataset's workers hold iterator state, so the kind
            # cannot change mid-epoch: no probe.
            self._sl_auto_pending = False
            self.auto_probe = {"choice": "process",
                               "why": "iterable dataset on an interpreter with the GIL"}
            return "process"
        if self._sl_auto_choice is not None:
            return self._sl_auto_choice
        self._sl_auto_pending = self.num_workers > 0
        self.auto_probe = None
        return "thread"

    def check_worker_number_rationality(self):
        # torch's warning counts processes against cores; thread workers
        # cost no process each.
        if getattr(self, "worker_type", "process") == "process":
            super().check_worker_number_rationality()

    def _get_iterator(self):
        return _Iter(self)

    def __iter__(self):
        if self.persistent_workers and self.num_workers > 0:
            it = self._sl_iter
            if it is None or it._pool is None or it._pool.closed:
                it = self._sl_iter = _Iter(self)
            else:
                it._reset(self)
            return it
        return _Iter(self)

    def set_epoch(self, epoch):
        """The epoch the next iteration runs: it keys the shuffle order (with
        ``seed``) and every sample's generator; passed on to a sampler (or
        batch sampler) that has set_epoch, such as DistributedSampler.
        Without calls, successive iterations run epochs 0, 1, 2, ..."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch: expected an int >= 0, got {epoch!r}")
        self._sl_epoch = epoch
        for s in (self.sampler, self.batch_sampler,
                  getattr(self.batch_sampler, "sampler", None)):
            if s is not None and callable(getattr(s, "set_epoch", None)):
                s.set_epoch(epoch)

    def state_dict(self):
        """The position after the last batch handed out: a dict with
        ``epoch``, ``batch`` (batches handed out in that epoch) and ``rng``
        (the state of the generator the sampler drew from at the epoch's
        start). Prefetched batches do not count. Refused with
        ``in_order=False`` and workers, where the batches handed out are not
        the first ones of the epoch."""
        if not self._sl_in_order and self.num_workers > 0:
            raise ValueError("sluice.torch.DataLoader.state_dict: with in_order=False the "
                             "batches are handed out as they arrive, so no position says "
                             "which were; build the loader with in_order=True (the default) "
                             "to checkpoint mid-epoch")
        it = self._sl_running() if self._sl_running is not None else None
        if self._sl_pending_state is not None:
            return dict(self._sl_pending_state)
        if it is None or getattr(it, "_done", False):
            return {"format": "sluice.torch.DataLoader/1", "epoch": self._sl_epoch,
                    "batch": 0, "rng": None}
        return it._state()

    def load_state_dict(self, state):
        """Make the next iteration continue from `state` (from
        :meth:`state_dict` of a loader built the same way): the same
        remaining batches an uninterrupted run gives."""
        if not isinstance(state, dict) or state.get("format") != "sluice.torch.DataLoader/1":
            raise ValueError("state: not a sluice.torch.DataLoader state_dict "
                             "(expected the dict DataLoader.state_dict() returns)")
        self.set_epoch(int(state["epoch"]))
        self._sl_pending_state = dict(state)
