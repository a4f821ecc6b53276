"""sluice.torch: the iterator — dispatch and sampling.

The main thread owns the sampler. It hands batches of indices ("tasks") to
workers exactly as torch's loader does: prefetch_factor * num_workers at the
start, one more per batch handed out (and per iterable worker's end), each
to the next worker of the cycle 0..n-1 whose iterator has not ended; batches
are handed out strictly in task order (unless in_order=False). So the worker
count and kind never change the output, each worker loads torch's batches
(global-RNG draws in process workers are torch's), and iterable
interleaving equals torch's. Workers never hold a reference to the iterator
or the loader, so dropping them runs the iterator's finaliser, which stops
every thread and process and removes every shared-memory file still pending.
"""
import collections
import multiprocessing
import time
import warnings
import weakref

import torch

from . import _torch_auto as auto
from . import _torch_compat as compat
from . import _torch_state as state_mod
from ._torch_fetch import Config
from ._torch_processes import ProcessPool, WorkerDied, start_method_hint
from ._torch_sampling import shuffle_seed
from ._torch_threads import Staged, ThreadPool


def _shutdown_pools(pools):
    for p in pools:
        if p is not None:
            p.shutdown()


class Iter:
    def __init__(self, loader):
        self._loader = weakref.ref(loader)
        self._num_workers = loader.num_workers
        self._iterable = compat.is_iterable(loader)
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
        resume = state_mod.Resume(loader._sl_pending_state)
        loader._sl_pending_state = None
        epoch = loader._sl_epoch
        if loader._sl_shuffle_gen is not None:
            loader._sl_shuffle_gen.manual_seed(shuffle_seed(loader._sl_seed, epoch))
        gen = loader.generator
        resume.restore_rng(gen)
        self._rng_at_start = gen.get_state() if gen is not None else torch.get_rng_state()
        # The order of draws is torch's: the sampler's iterator is made, then
        # the base seed drawn (by a new iterator only: torch's persistent
        # workers keep theirs, and their epochs after the first draw none),
        # then, with workers, torch's _reset makes the sampler's iterator
        # again; the sampler draws on its first step.
        fresh = resume.fresh(first)
        self._sampler_iter = iter(compat.index_sampler(loader))
        if fresh:
            self._base_seed = int(torch.empty((), dtype=torch.int64)
                                  .random_(generator=gen).item())
            if self._num_workers > 0:
                self._sampler_iter = iter(compat.index_sampler(loader))
        elif resume.state is not None:
            self._base_seed = resume.base_seed()
        self._fresh = fresh
        self._seed = loader._sl_seed if loader._sl_seed is not None else self._base_seed
        self._epoch = epoch
        self._yielded = 0
        self._discard = 0
        self._lookahead = collections.deque()
        self._exhausted = False
        if resume.skip:
            if self._iterable:
                self._discard = resume.skip
            else:
                for _ in range(resume.skip):
                    try:
                        next(self._sampler_iter)
                    except StopIteration:
                        self._exhausted = True
                        break
            self._yielded = resume.skip
        if resume.holds_global_rng:
            # The sampler's first draw happens under the saved state too.
            if not self._exhausted and not self._iterable:
                try:
                    self._lookahead.append(next(self._sampler_iter))
                except StopIteration:
                    self._exhausted = True
            resume.put_back_rng()
        loader._sl_running = weakref.ref(self)
        self._tasks = {}            # task_no -> (worker, indices)
        self._results = {}          # task_no -> (kind, batch or error)
        self._next_task = 0
        self._rcvd = 0              # the first task not handed out yet
        self._taken = 0             # tasks handed out (or skipped)
        # torch's dispatch: batch k goes to the next worker of the cycle
        # 0, 1, ..., n-1, 0, ... whose iterable has not ended (all of them
        # for a map-style dataset); the cycle starts at worker 0 each epoch.
        self._status = [True] * self._num_workers
        self._cycle = 0
        self._owed = 0              # dispatches held back while auto drains the workers
        self._per_worker = [0] * self._num_workers
        if self._num_workers == 0:
            cfg = Config(loader, 0, self._base_seed)
            self._fetch = cfg.fetcher(0, None)
            self._fetch.begin()
            return
        started = self._pool is None
        if started:
            self._cfg = Config(loader, self._num_workers, self._base_seed)
            st = self._staging
            if st is not None and not st.to_device:
                # Pinned slots hold no stream state: thread workers fill
                # them, as torch's pin thread does, off the main thread.
                # device= stays on the main thread, where the copy is
                # queued in the order the batches are handed out.
                self._cfg.stage = st
            self._start_pool(loader)
        elif loader.worker_type == "auto":
            # Persistent workers of another kind than "auto" runs now (its
            # verdict came as the last epoch ended): the other kind.
            kind = auto.worker_type_now(loader)
            if kind != self._pool.kind:
                self._pool.shutdown()
                self._start_pool(loader, kind)
                started = True
        self._probe = None
        probe = loader._sl_probe
        if loader._sl_auto_pending and probe is not None and probe.kind == self._pool.kind:
            self._probe = probe
            probe.segment(started)
        # torch primes prefetch_factor * num_workers batches, then asks the
        # sampler for one more each time a batch is handed out (and when an
        # iterable worker's end is seen): the sampler is asked at torch's
        # times, and worker w loads exactly the batches torch's worker w does.
        for _ in range(self._prefetch * self._num_workers):
            self._try_put()

    def _start_pool(self, loader, kind=None):
        """Start the workers: of `kind`, or of the kind the loader runs now."""
        if kind is None:
            kind = auto.worker_type_now(loader)
        if kind == "thread":
            pool = ThreadPool(self._cfg)
        else:
            ctx = loader.multiprocessing_context or multiprocessing.get_context()
            try:
                pool = ProcessPool(self._cfg, ctx)
            except Exception as e:
                why = start_method_hint(ctx, e)
                if loader.worker_type != "auto":
                    if hasattr(e, "add_note"):
                        e.add_note(f"sluice.torch.DataLoader: {why}. Make them picklable "
                                   f"(module-level classes and functions), use "
                                   f"multiprocessing_context='fork', or "
                                   f"worker_type='thread'")
                    raise
                # "auto" chose (or tries) processes; threads still run the Dataset.
                warnings.warn(f"sluice.torch.DataLoader: worker_type='auto' continues on "
                              f"threads: {why}", RuntimeWarning, stacklevel=4)
                loader._sl_auto_choice = kind = "thread"
                loader._sl_auto_pending = False
                loader._sl_probe = None
                pool = ThreadPool(self._cfg)
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
        pool = self._pool
        for gen, tno, wid, kind, payload, cpu, wall in pool.poll(timeout):
            if gen != self._generation:
                if kind == "ok":
                    pool.discard(payload)
                continue
            self._per_worker[wid] -= 1
            if kind == "ok":
                # Mapped now (a process worker's file is unlinked as it is
                # mapped): a switch of kind may stop its pool before the
                # batch is handed out.
                payload = pool.receive(payload)
            self._results[tno] = (kind, payload)
            if kind == "end" and self._status[wid]:
                # As torch: the worker leaves the cycle when its end arrives,
                # and one more batch is asked for in its place.
                self._status[wid] = False
                self._try_put()
            if self._probe is not None and kind == "ok" and not self._draining:
                self._probe.add(wid, cpu, wall, self._exhausted, payload)

    def _auto_step(self):
        loader = self._loader()
        if loader is None:
            self._probe = None
            return
        into = self._probe.step(loader)
        if not loader._sl_auto_pending:
            self._probe = None      # the verdict
        if into is not None and into != self._pool.kind:
            self._draining = True
            self._switch_to = into

    def _switch_when_drained(self):
        # Every worker is idle (no task out): stop them, then start the
        # other kind.
        if any(self._per_worker):
            return
        loader = self._loader()
        self._pool.shutdown()
        self._pool = None
        self._draining = False
        if loader is not None:
            self._start_pool(loader, self._switch_to)
            if self._probe is not None:
                if self._probe.kind == self._pool.kind:
                    self._probe.segment()
                else:
                    self._probe = None  # processes could not start: threads, measured no more
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
        except WorkerDied as e:
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
            if self._probe is not None and not self._draining:
                self._auto_step()
            if self._draining:
                self._switch_when_drained()
            tno = self._rcvd
            if not self._in_order and self._results and tno not in self._results:
                # in_order=False: the earliest batch that has arrived.
                tno = min(self._results)
            if tno in self._results:
                kind, payload = self._results.pop(tno)
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
        if isinstance(batch, Staged):
            batch = batch.batch
        elif self._staging is not None:
            batch = self._staging(batch)
        elif self._pin:
            batch = compat.torch_pin_memory(batch, self._pin_device)
        self._yielded += 1
        return batch

    def _state(self):
        return state_mod.position(self._epoch, self._yielded, self._rng_at_start, self._fresh,
                                  self._base_seed)

    def _reset(self, loader):
        """Persistent workers: start the next epoch on the same workers."""
        self._done = False
        self._draining = False
        self._begin(loader)

    def _close(self):
        self._done = True
        self._finalizer()
