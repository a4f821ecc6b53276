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

The loader in parts, one concern a module (this one keeps the public names):
 - _torch_dispatch: the iterator — the sampler on the main thread, torch's
   dispatch of batches to workers, handing them out in order; epochs.
 - _torch_sampling: the per-thread context and the per-sample generators.
 - _torch_fetch: loading one batch (the same code on the main thread, a
   thread worker or a process worker) and the loop every worker runs.
 - _torch_collate: default_collate into batch memory a worker reuses.
 - _torch_threads: thread workers; where the interpreter's GIL stands.
 - _torch_processes: process workers and the shared-memory transport of
   their batches (/dev/shm, one file a batch, mapped without a copy).
 - _torch_auto: worker_type="auto" — which kind runs, measured.
 - _torch_state: state_dict / load_state_dict — exact mid-epoch resume.
 - _torch_staging: pin_memory=True and device= through sluice's pinned slots.
 - _torch_compat: every use of a torch private name, and check().
"""
import torch
import torch.utils.data as _tud

from . import _torch_compat as _compat
from . import _torch_staging as _staging
from . import _torch_state as _state
from . import _torch_threads as _threads
from ._torch_dispatch import Iter as _Iter
from ._torch_mix import WeightedMix, WeightedMixSampler
from ._torch_sampling import get_worker_info, sample_context, sample_rng, sample_seed

__all__ = ["DataLoader", "get_worker_info", "sample_seed", "sample_rng", "sample_context",
           "WeightedMix", "WeightedMixSampler"]


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
        self._sl_device = _staging.parse_device(device)
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
        if "in_order" in _compat.TORCH_INIT_PARAMS:
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
        if "in_order" not in _compat.TORCH_INIT_PARAMS:
            self.in_order = bool(in_order)
        self.seed = seed
        self.worker_type_used = None
        self.auto_probe = None
        self._sl_auto_pending = (worker_type == "auto" and num_workers > 0)
        self._sl_auto_choice = None
        self._sl_probe = None
        self._sl_epoch = 0
        self._sl_pending_state = None
        self._sl_running = None
        self._sl_iter = None
        self.device = self._sl_device[2] if self._sl_device else None
        if num_workers > 0 and worker_type != "process":
            _threads.warn_if_gil_turned_on()
        self.pin_memory_path = None
        self._sl_staging = None

    def _sl_staging_for(self, pin):
        """The Staging an iteration uses (device=, or pin_memory=True on a
        GPU), or None; sets pin_memory_path."""
        return _staging.staging_for(self, pin)

    def staging_stats(self):
        """What sluice's device path did for this loader (device= or
        pin_memory=True through sluice): batches, staged_bytes, h2d_bytes,
        wait_s (time waiting for a slot's events), slots, fallback_batches
        (batches that took torch's way because the consumer held every slot
        the ring may make, 64); None when it is not used."""
        return None if self._sl_staging is None else self._sl_staging.stats()

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
            _state.refuse_unordered()
        it = self._sl_running() if self._sl_running is not None else None
        if self._sl_pending_state is not None:
            return dict(self._sl_pending_state)
        if it is None or getattr(it, "_done", False):
            return _state.start_of(self._sl_epoch)
        return it._state()

    def load_state_dict(self, state):
        """Make the next iteration continue from `state` (from
        :meth:`state_dict` of a loader built the same way): the same
        remaining batches an uninterrupted run gives."""
        state = _state.checked(state)
        self.set_epoch(int(state["epoch"]))
        self._sl_pending_state = state
