"""sluice.torch's one home for torch's private names.

sluice.torch.DataLoader is a subclass of torch's DataLoader and gives its
workers torch's worker semantics, which torch exposes only through private
modules and attributes. Every use of one is here, resolved through
``PRIVATE`` (the table below), so that a torch release that moves one fails in
one place with a message naming it: ``check()`` lists what this torch lacks
(tests/python/test_torch_compat.py runs it), and a required name that is gone
makes ``import sluice.torch`` raise ImportError naming it.

The other modules of the loader (sluice/_torch_*.py) use only torch's
public API and the functions below.
"""
import importlib
import inspect
import multiprocessing.reduction
import random
import sys

import numpy as np
import torch
import torch.utils.data as tud

# (module, attribute, required, what sluice uses it for). An optional name is
# one only some torch versions have (torch 2.x's thread-aware WorkerInfo);
# check() then asks that its companions come and go with it.
PRIVATE = [
    ("torch._utils", "ExceptionWrapper", True,
     "a worker's exception carried to the main thread and re-raised in torch's form"),
    ("torch.utils.data._utils.worker", "_worker_info", True,
     "the process-wide worker info that torch.utils.data.get_worker_info() returns"),
    ("torch.utils.data._utils.worker", "get_worker_info", True,
     "given a body that looks at the calling thread first (thread workers)"),
    ("torch.utils.data._utils.worker", "WorkerInfo", True,
     "the worker info a worker's get_worker_info() returns"),
    ("torch.utils.data._utils.worker", "_generate_state", True,
     "numpy's seed of worker w, as torch's workers seed numpy"),
    ("torch.utils.data._utils.worker", "_RNG", False,
     "torch 2.x: the per-thread generators of a thread worker's WorkerInfo (with its "
     "worker_method and rng fields)"),
    ("torch.utils.data._utils.pin_memory", "pin_memory", True,
     "pin_memory=True where sluice's pinned slots are not used: torch's walk"),
    ("torch.utils.data._utils.collate", "collate", False,
     "default_collate's walk over the batch's structure, with sluice's function for the "
     "tensors that go into reused batch memory (without it: default_collate itself)"),
    ("torch.utils.data._utils.collate", "default_collate_fn_map", False,
     "default_collate's functions per element type, which that walk is given"),
    ("torch.utils.data._utils.collate", "collate_tensor_fn", False,
     "default_collate's function for tensors, for the batches that are not pooled"),
    ("torch._C", "_storage_Use_Count", False,
     "how many tensors share a batch's storage: a fused sluice.transforms output a Dataset "
     "kept past __getitem__ is found by it (without it: no batch row is offered)"),
    ("torch.utils.data.dataloader", "_DatasetKind", True,
     "map-style or iterable (DataLoader._dataset_kind)"),
    ("torch.utils.data.DataLoader", "_dataset_kind", True, "the loader's dataset kind"),
    ("torch.utils.data.DataLoader", "_auto_collation", True,
     "whether the loader batches (a batch sampler) or hands out single samples"),
    ("torch.utils.data.DataLoader", "_index_sampler", True,
     "the sampler whose iterator yields each batch's indices"),
    ("torch.utils.data.DataLoader", "_get_iterator", True,
     "overridden: iter(loader) returns sluice's iterator"),
    ("torch.utils.data.DataLoader", "check_worker_number_rationality", True,
     "overridden: torch's warning counts worker processes against cores"),
]

# Attributes of a DataLoader instance, read from a made loader (they are not
# class attributes on every torch).
_INSTANCE = {"_dataset_kind", "_auto_collation", "_index_sampler"}


class TorchMoved(ImportError):
    """A private torch name sluice.torch needs is not where it was."""


def _where(mod, name):
    return f"{mod}.{name}"


def _lookup(mod, name):
    """The object, or raise TorchMoved naming it."""
    try:
        if mod == "torch.utils.data.DataLoader":
            owner = tud.DataLoader
            if name in _INSTANCE:
                owner = tud.DataLoader([0])
        else:
            owner = importlib.import_module(mod)
        return getattr(owner, name)
    except (ImportError, AttributeError) as e:
        raise TorchMoved(
            f"sluice.torch: torch {torch.__version__} has no {_where(mod, name)} ({e}), a "
            f"private name the loader uses for: {_use(mod, name)}. This torch moved or renamed "
            f"it; python/sluice/_torch_compat.py is the one place to adapt "
            f"(tests/python/test_torch_compat.py)") from None


def _use(mod, name):
    return next((u for m, n, _, u in PRIVATE if (m, n) == (mod, name)), "?")


def check():
    """What this torch lacks of PRIVATE: a list of messages (empty: all is
    where sluice.torch expects it)."""
    problems = []
    have = {}
    for mod, name, required, use in PRIVATE:
        try:
            _lookup(mod, name)
            have[name] = True
        except TorchMoved as e:
            have[name] = False
            if required:
                problems.append(str(e))
    # torch 2.x's thread fields: _RNG and WorkerInfo's worker_method and rng
    # come together; one without the others is a move.
    fields = set(getattr(WorkerInfo, "__dataclass_fields__", {}))
    parts = {"_RNG": have.get("_RNG", False), "WorkerInfo.worker_method":
             "worker_method" in fields, "WorkerInfo.rng": "rng" in fields}
    if len(set(parts.values())) > 1:
        problems.append(
            f"sluice.torch: torch {torch.__version__} has "
            f"{', '.join(k for k, v in parts.items() if v)} but not "
            f"{', '.join(k for k, v in parts.items() if not v)} of torch.utils.data._utils.worker "
            f"(thread workers' generators); python/sluice/_torch_compat.py is the one place to "
            f"adapt")
    # default_collate's parts: all of them (sluice collates into reused
    # memory) or none (default_collate itself); one or two is a move.
    parts = {n: have.get(n, False) for n in ("collate", "default_collate_fn_map",
                                             "collate_tensor_fn")}
    if len(set(parts.values())) > 1:
        problems.append(
            f"sluice.torch: torch {torch.__version__} has "
            f"{', '.join(k for k, v in parts.items() if v)} but not "
            f"{', '.join(k for k, v in parts.items() if not v)} of "
            f"torch.utils.data._utils.collate (default_collate's parts, with which batches are "
            f"collated into reused memory); python/sluice/_torch_compat.py is the one place to "
            f"adapt")
    return problems


ExceptionWrapper = _lookup("torch._utils", "ExceptionWrapper")
_worker = importlib.import_module("torch.utils.data._utils.worker")
WorkerInfo = _lookup("torch.utils.data._utils.worker", "WorkerInfo")
_generate_state = _lookup("torch.utils.data._utils.worker", "_generate_state")
_lookup("torch.utils.data._utils.worker", "_worker_info")
_torch_pin_memory = _lookup("torch.utils.data._utils.pin_memory", "pin_memory")
_DatasetKind = _lookup("torch.utils.data.dataloader", "_DatasetKind")
default_collate = tud.default_collate


def _optional(mod, name):
    try:
        return _lookup(mod, name)
    except TorchMoved:
        return None


# default_collate is collate(batch, collate_fn_map=default_collate_fn_map)
# (torch 1.13 to 2.12); sluice.torch gives the walk its own function for
# tensors (_torch_collate). Missing together or not at all (check()).
collate = _optional("torch.utils.data._utils.collate", "collate")
default_collate_fn_map = _optional("torch.utils.data._utils.collate", "default_collate_fn_map")
collate_tensor_fn = _optional("torch.utils.data._utils.collate", "collate_tensor_fn")
if collate is None or default_collate_fn_map is None or collate_tensor_fn is None:
    collate = default_collate_fn_map = collate_tensor_fn = None

# torch >= 2.0: the number of tensors (and storage objects) on a storage.
storage_use_count = _optional("torch._C", "_storage_Use_Count")


def storage_uses(t):
    """How many tensors share `t`'s storage (storage_use_count not None)."""
    return storage_use_count(t.untyped_storage()._cdata)


# ---------------------------------------------------------------- the loader's private state

def is_iterable(loader):
    """Whether a torch DataLoader's dataset is iterable-style."""
    return loader._dataset_kind == _DatasetKind.Iterable


def auto_collation(loader):
    return loader._auto_collation


def index_sampler(loader):
    return loader._index_sampler


def _init_params():
    try:
        return frozenset(inspect.signature(tud.DataLoader.__init__).parameters)
    except (TypeError, ValueError):
        return frozenset()


# The keyword names torch's DataLoader.__init__ takes (in_order: 2.x).
TORCH_INIT_PARAMS = _init_params()


# ---------------------------------------------------------------- worker info

def process_worker_info():
    """torch's process-wide worker info (None outside torch's workers)."""
    return _worker._worker_info


def set_process_worker_info(info):
    _worker._worker_info = info


def patch_get_worker_info(tls):
    """torch.utils.data.get_worker_info() returns a module global, one per
    process, which cannot tell thread workers apart. Give the function a body
    that consults `tls.info` first. The code object is swapped in place, so
    references taken before `import sluice.torch` (`from torch.utils.data
    import get_worker_info`) see it too. Only done when the function is the
    one-liner expected; otherwise torch's returns None in thread workers
    (sluice.torch.get_worker_info always works). True when patched."""
    fn = _worker.get_worker_info
    code = fn.__code__
    if getattr(fn, "_sluice_patched", False):
        return True
    if code.co_names != ("_worker_info",) or code.co_freevars or code.co_argcount:
        return False
    src = ("def get_worker_info():\n"
           "    info = getattr(_sluice_tls, 'info', None)\n"
           "    return _worker_info if info is None else info\n")
    ns = {}
    exec(compile(src, _worker.__file__, "exec"), {}, ns)
    _worker.__dict__["_sluice_tls"] = tls
    fn.__code__ = ns["get_worker_info"].__code__
    fn._sluice_patched = True
    return True


def worker_info(wid, num_workers, seed, dataset):
    """A process worker's WorkerInfo, as torch's workers make theirs."""
    return WorkerInfo(id=wid, num_workers=num_workers, seed=seed, dataset=dataset)


def thread_worker_info(wid, num_workers, base_seed, dataset):
    """A thread worker's WorkerInfo. Where torch's WorkerInfo has the thread
    fields (torch 2.x: ``worker_method`` and ``rng``, read by
    ``torch.random.thread_safe_generator()``), they are filled: "thread",
    and this worker's own generators, seeded as a process worker seeds the
    global ones (seed = base_seed + id; numpy from torch's seed sequence)."""
    seed = base_seed + wid
    kw = {}
    rng_cls = getattr(_worker, "_RNG", None)
    fields = getattr(WorkerInfo, "__dataclass_fields__", {})
    if rng_cls is not None and "worker_method" in fields and "rng" in fields:
        g = torch.Generator()
        g.manual_seed(seed)
        kw = {"worker_method": "thread",
              "rng": rng_cls(random_generator=random.Random(seed), torch_generator=g,
                             numpy_generator=np.random.default_rng(
                                 _generate_state(base_seed, wid)))}
    return WorkerInfo(id=wid, num_workers=num_workers, seed=seed, dataset=dataset, **kw)


def seed_process_worker(base_seed, wid):
    """Seed random, torch and numpy in a worker process as torch's workers
    do; returns the worker's seed."""
    seed = base_seed + wid
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(_generate_state(base_seed, wid))
    return seed


# ---------------------------------------------------------------- errors and pinning

def wrap_exception(where):
    """The exception being handled, wrapped as torch's workers wrap theirs
    (re-raised in the main thread with `where` and the original traceback);
    an exception that cannot be pickled becomes a RuntimeError with its text."""
    w = ExceptionWrapper(sys.exc_info(), where=where)
    try:
        multiprocessing.reduction.ForkingPickler.dumps(w)
    except Exception:
        w.exc_type = RuntimeError
    return w


def torch_pin_memory(batch, device=None):
    """torch's own pin_memory walk over a batch."""
    return _torch_pin_memory(batch, device)
