"""sluice.torch: process workers, and the shared-memory transport of their
batches: each batch comes back as one file in /dev/shm holding every tensor
and array of the batch, plus a small pickled description; the main process
maps it and builds the tensors on that memory (no copy, no pickled tensor
data). The file is unlinked as soon as it is mapped; the memory goes when
the batch's last tensor does."""
import glob
import mmap
import multiprocessing
import multiprocessing.connection
import os
import signal
import time

import numpy as np
import torch

from . import _torch_compat as compat
from ._torch_fetch import Stopped, serve
from ._torch_sampling import TORCH_INFO_PATCHED, tls

_ALIGN = 64
_SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None


class ShmRef:
    """Where one tensor or array of a batch lies in the batch's file."""
    __slots__ = ("kind", "offset", "nbytes", "dtype", "shape")

    def __init__(self, kind, offset, nbytes, dtype, shape):
        self.kind, self.offset, self.nbytes, self.dtype, self.shape = (
            kind, offset, nbytes, dtype, shape)

    def __reduce__(self):
        return (ShmRef, (self.kind, self.offset, self.nbytes, self.dtype, self.shape))


def _flatten(obj, arrays, size):
    """Replace every CPU tensor and plain numpy array in `obj` by a ShmRef,
    appending (ref, data) to `arrays`; returns (new obj, new size)."""
    if isinstance(obj, torch.Tensor):
        if obj.layout != torch.strided or obj.device.type != "cpu" or obj.is_quantized:
            return obj, size
        t = obj.detach().contiguous()
        nbytes = t.numel() * t.element_size()
        ref = ShmRef("t", size, nbytes, str(t.dtype).split(".")[-1], tuple(t.shape))
        arrays.append((ref, t))
        return ref, size + (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            return obj, size
        a = np.ascontiguousarray(obj)      # (0-d comes back 1-d: keep obj's shape)
        ref = ShmRef("n", size, a.nbytes, a.dtype.str, obj.shape)
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


def batch_to_shm(batch, path):
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
    if isinstance(desc, ShmRef):
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


def batch_from_shm(desc, path):
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


def unlink_quiet(path):
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


def _shm_base():
    return _SHM_DIR or "/tmp"


# ---------------------------------------------------------------- the worker

def process_main(cfg, wid, conn, inherited):
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
    seed = compat.seed_process_worker(cfg.base_seed, wid)
    info = compat.worker_info(wid, cfg.num_workers, seed, cfg.dataset)
    tls.info = info
    if not TORCH_INFO_PATCHED:
        compat.set_process_worker_info(info)

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
                unlink_quiet(msg[4][1])
            raise Stopped from None

    prefix = os.path.join(_shm_base(), f"sluice-torch-{cfg.parent_pid}-{cfg.token}-{wid}")
    written = [0]

    def finish(batch):
        out = batch_to_shm(batch, f"{prefix}-{written[0]}")
        written[0] += 1
        return out

    try:
        serve(cfg, wid, "process", recv, send, None, finish)
    except Stopped:
        pass
    finally:
        # Every way out ends this worker's part in the epoch: batches it
        # wrote that the main process has not mapped (and unlinked) will
        # never be, also when the main process died.
        for path in glob.glob(f"{prefix}-*"):
            unlink_quiet(path)


# ---------------------------------------------------------------- the pool

class WorkerDied(RuntimeError):
    pass


class ProcessPool:
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
                    p = ctx.Process(target=process_main,
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

    def receive(self, payload):
        """The batch of an "ok" result: mapped from its shared-memory file."""
        return batch_from_shm(*payload)

    def discard(self, payload):
        """An "ok" result that will not be handed out: its file removed."""
        unlink_quiet(payload[1])

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
                raise WorkerDied(wid, how)
        if force:
            raise WorkerDied(-1, "its pipe closed")

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
        exited = [self.procs[self.by_sentinel[r]] for r in ready if r in self.by_sentinel]
        if exited:
            self.pending = out
            for m in out:
                if m[3] == "ok":
                    unlink_quiet(m[4][1])
            # A sentinel is ready as the process's files close, a moment
            # before the process can be reaped: until then its exitcode is
            # None. Wait for it, so the death is reported with its cause and
            # the batches just removed are never handed out.
            for p in exited:
                p.join(5.0)
            self._check_dead(force=True)
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
        for path in glob.glob(os.path.join(
                _shm_base(), f"sluice-torch-{self.cfg.parent_pid}-{self.cfg.token}-*")):
            unlink_quiet(path)

    def alive(self):
        return [p for p in self.procs if not self.closed and p.exitcode is None]


def start_method_hint(ctx, e):
    """Why worker processes did not start with `ctx`, for a message."""
    method = ctx.get_start_method()
    why = (f"worker processes cannot start with the {method!r} start method "
           f"({type(e).__name__}: {e})")
    if method != "fork":
        why += ("; spawn and forkserver pickle the dataset, collate_fn and "
                "worker_init_fn, as torch's loader does")
    return why
