"""sluice.torch: loading one batch — the same code on the main thread, a
thread worker or a process worker — and the loop every worker runs.

A task is (generation, task_no, indices, seed, epoch); a result is
(generation, task_no, worker, kind, payload, cpu_s, wall_s) with kind "ok",
"end" (an iterable dataset's iterator ended) or "err"."""
import os
import secrets
import sys
import time

from . import _torch_compat as compat
from ._torch_collate import pooled_collate
from ._torch_sampling import tls


class Stopped(Exception):
    """The loader is shutting down: abandon the batch."""


class Fetch:
    """Loads the batch of a task: __getitem__ per index (or the next items
    of an iterable's iterator), then collate_fn; the sample's key is set
    around every call (sample_rng)."""

    def __init__(self, dataset, iterable, auto_collation, collate_fn, drop_last, batch_size,
                 wid, stop, keep=2, pool=None):
        self.dataset = dataset
        self.iterable = iterable
        self.auto = auto_collation
        self.collate_fn = collate_fn
        # default_collate into this worker's reused batch memory (up to
        # `keep` batches: those in flight and a few the consumer holds).
        # Without the GIL it loaded as fast as torch's own allocations with
        # 60-70 MB less peak memory; with the GIL the copy into it ran 0.87x
        # as fast (bench/README.md, "Batch memory"), so there it is kept
        # only while sluice.transforms writes the samples straight into it
        # (_Stream.offer: no copy at all; 1.08x on 3.11): a map-style batch
        # in which no sample was written in place turns it off for this
        # worker.
        gil = getattr(sys, "_is_gil_enabled", None)
        self.gil = gil is None or gil()
        self.pooled = (pooled_collate(keep, pool) if collate_fn is compat.default_collate
                       else None)
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
        tls.sample = (seed, epoch, self.count, self.wid)
        try:
            item = next(self.it)
        finally:
            tls.sample = None
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
                        raise Stopped
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
            # default_collate with pooled memory: each sample's tensors are
            # copied into the batch as __getitem__ returns them
            # (_torch_collate._Stream).
            stream = self.pooled.stream(len(indices)) \
                if self.pooled is not None and hasattr(indices, "__len__") else None
            add = data.append if stream is None else stream.add
            try:
                for i in indices:
                    if stop is not None and stop.is_set():
                        raise Stopped
                    self.current = i
                    tls.sample = (seed, epoch, i, 0)
                    # the batch row offered to sluice.transforms for this
                    # one __getitem__ only (_Stream.offer)
                    offered = stream.offer() if stream is not None else None
                    try:
                        sample = self.dataset[i]
                    finally:
                        if offered is not None:
                            offered._offer(None)
                    add(sample)
            finally:
                tls.sample = None
            if stream is not None:
                # the last sample let go: stream.collate counts the tensors
                # left on the batch's memory (a fused output the Dataset kept)
                sample = None
                self.current = None
                if self.gil and not stream.in_place:
                    self.pooled.pool.detach()
                    self.pooled = None
                return self._collate(stream.collate)
        else:
            self.current = indices
            tls.sample = (seed, epoch, indices, 0)
            try:
                data = self.dataset[indices]
            finally:
                tls.sample = None
        self.current = None
        if self.collate_fn is compat.default_collate:
            pooled = None if self.gil else self.pooled
            return self._collate(lambda: (pooled or self.collate_fn)(data))
        return self.collate_fn(data)

    @staticmethod
    def _collate(run):
        # torch's default_collate stacks into torch shared memory when it
        # sees worker info; sluice moves batches itself, so hide it.
        saved = tls.hide_info()
        try:
            return run()
        finally:
            tls.restore_info(saved)


class Config:
    """What a worker needs, and nothing that refers back to the loader."""

    def __init__(self, loader, num_workers, base_seed):
        self.dataset = loader.dataset
        self.iterable = compat.is_iterable(loader)
        self.auto_collation = compat.auto_collation(loader)
        self.collate_fn = loader.collate_fn
        self.drop_last = loader.drop_last
        self.batch_size = loader.batch_size
        self.worker_init_fn = loader.worker_init_fn
        self.num_workers = num_workers
        self.base_seed = base_seed
        # Batches a worker's pooled memory keeps: its prefetched ones and two
        # the consumer may hold (the step's batch and the one before it).
        self.pool_keep = (loader._sl_prefetch if num_workers else 0) + 2
        # Thread workers share one pool (made by the thread pool): all the
        # prefetched batches and the consumer's two. A process worker makes
        # its own (never pickled).
        self.pool = None
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
        state["pool"] = None
        return state

    def fetcher(self, wid, stop, kind="thread"):
        return Fetch(self.dataset, self.iterable, self.auto_collation, self.collate_fn,
                     self.drop_last, self.batch_size, wid, stop, self.pool_keep,
                     self.pool if kind == "thread" else None)


def where(kind, wid, fetch, batch):
    at = fetch.current
    at = f"dataset index {at!r}" if not isinstance(at, str) else at
    pid = f" (pid {os.getpid()})" if kind == "process" else ""
    return f"in sluice.torch.DataLoader {kind} worker {wid}{pid}, {at}, batch {batch}"


class ThreadClock:
    """(CPU seconds, seconds spent runnable but waiting for a core) of the
    thread that made it, read by that thread. The second comes from the
    scheduler's statistics (/proc/thread-self/schedstat) and is 0 where they
    are not available. Waiting for the GIL is neither: the thread sleeps.
    The CPU time is the thread's clock (CLOCK_THREAD_CPUTIME_ID), not
    schedstat's first field: that one is brought up to date only at
    scheduler events, so read by the running thread it lags by up to a tick
    (a task of 1 ms read 0); the wait is complete when read by the running
    thread (it is added as the thread is scheduled in). The file is opened
    once (it names the thread that opens it) and read again with pread:
    0.4 us a read against 10 us for an open and read, twice a batch."""

    def __init__(self):
        try:
            self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.fd = None

    def __call__(self):
        cpu = time.thread_time()
        if self.fd is not None:
            try:
                return cpu, int(os.pread(self.fd, 128, 0).split()[1]) * 1e-9
            except (OSError, ValueError, IndexError):
                pass
        return cpu, 0.0

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def serve(cfg, wid, kind, recv, send, stop, finish):
    """The loop of one worker: take tasks, answer each one. `finish(batch)`
    turns a loaded batch into what is sent back (staged into a pinned slot,
    written to shared memory), or is None."""
    init_error = None
    if cfg.worker_init_fn is not None:
        try:
            cfg.worker_init_fn(wid)
        except Exception:
            init_error = compat.wrap_exception(
                f"in sluice.torch.DataLoader {kind} worker {wid}, in worker_init_fn")
    fetch = cfg.fetcher(wid, stop, kind)
    clock = ThreadClock()
    try:
        _serve(fetch, clock, init_error, kind, wid, recv, send, finish)
    finally:
        clock.close()


def _serve(fetch, thread_clock, init_error, kind, wid, recv, send, finish):
    generation = None
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
        (c0, q0), t0 = thread_clock(), time.perf_counter()
        try:
            batch = fetch(indices, seed, epoch)
            if finish is not None:
                batch = finish(batch)
            kind_out, payload = "ok", batch
        except Stopped:
            return
        except StopIteration:
            kind_out, payload = "end", None
        except Exception:
            kind_out, payload = "err", compat.wrap_exception(where(kind, wid, fetch, tno))
        (c1, q1), t1 = thread_clock(), time.perf_counter()
        # cpu, and the time the task could have run: wall minus the time
        # other processes held the cores.
        send((gen, tno, wid, kind_out, payload, c1 - c0, (t1 - t0) - (q1 - q0)))
