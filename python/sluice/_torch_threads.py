"""sluice.torch: thread workers, and where the interpreter's GIL stands
(whether threads can run Python in parallel at all)."""
import queue
import re
import sys
import threading
import time
import warnings

from . import _sluice
from . import _torch_compat as compat
from ._torch_collate import BatchPool
from ._torch_fetch import serve
from ._torch_sampling import tls


class Staged:
    """A batch a thread worker already staged into a pinned slot."""
    __slots__ = ("batch",)

    def __init__(self, batch):
        self.batch = batch


def thread_main(cfg, wid, inbox, results, stop):
    tls.defer_info(lambda: compat.thread_worker_info(wid, cfg.num_workers, cfg.base_seed,
                                                     cfg.dataset))

    def recv():
        while not stop.is_set():
            try:
                return inbox.get(timeout=0.1)
            except queue.Empty:
                continue
        return None

    def finish(batch):
        return batch if cfg.stage is None else Staged(cfg.stage(batch))

    try:
        serve(cfg, wid, "thread", recv, results.put, stop, finish)
    finally:
        tls.info = None


class ThreadPool:
    kind = "thread"

    def __init__(self, cfg):
        self.cfg = cfg
        self.n = cfg.num_workers
        # One batch memory for all the workers (_torch_collate.BatchPool):
        # the prefetched batches of all and the two the consumer may hold.
        cfg.pool = BatchPool(cfg.num_workers * (cfg.pool_keep - 2) + 2)
        self.results = queue.SimpleQueue()
        self.stop = threading.Event()
        self.inboxes = [queue.SimpleQueue() for _ in range(self.n)]
        self.outstanding = [0] * self.n
        self.threads = []
        for wid in range(self.n):
            t = threading.Thread(target=thread_main,
                                 args=(cfg, wid, self.inboxes[wid], self.results, self.stop),
                                 name=f"sluice.torch worker {wid}", daemon=True)
            t.start()
            self.threads.append(t)
        self.closed = False

    def send(self, wid, task):
        self.outstanding[wid] += 1
        self.inboxes[wid].put(task)

    def poll(self, timeout):
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

    def receive(self, payload):
        """The batch of an "ok" result (thread workers hand it over as it is)."""
        return payload

    def discard(self, payload):
        """An "ok" result that will not be handed out: nothing to free."""

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


# ---------------------------------------------------------------- the GIL

def gil_enabled():
    probe = getattr(sys, "_is_gil_enabled", None)
    return True if probe is None else bool(probe())


def free_threaded_build():
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


def gil_culprits():
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


def warn_if_gil_turned_on():
    """On a free-threaded interpreter whose GIL another module turned back
    on (torchvision does, through triton), say so once: which module, and
    PYTHON_GIL=0."""
    global _GIL_WARNED
    if _GIL_WARNED or not gil_enabled() or not free_threaded_build():
        return
    if getattr(sys.flags, "gil", None) == 1:
        return      # PYTHON_GIL=1 / -X gil=1: asked for
    _GIL_WARNED = True
    names = gil_culprits()
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
