"""sluice.torch: worker_type="auto" — which kind of workers to run.

On an interpreter whose GIL is off (free-threaded 3.13t/3.14t): threads, at
once. With the GIL, for a map-style dataset, the first batches of the first
epoch are measured on threads, and in most cases that settles it:

1. Each task's thread CPU time and wall time are measured, less the time
   the thread was runnable but waited for a core (other threads and other
   processes on the machine: the scheduler's run-queue wait). What remains
   besides CPU time is time asleep, which for a loading thread is mostly
   time waiting for the GIL, so share = sum(cpu) / sum(wall - run-queue
   wait) says how much of the work runs in parallel. Below THRESHOLD the
   loader drains the threads and continues on processes: the verdict.
2. At or above THRESHOLD the two kinds are compared in core time a batch:
   on threads the batch's CPU time c over the share (the rest of a core's
   time went waiting for the GIL); on processes c plus what their
   transport adds — a process worker writes the batch into a new
   shared-memory file and the main process maps it, timed here once on a
   batch the threads loaded (transport_seconds). processes ÷ threads =
   (c / share) / (c + t) - 1 is the gain processes are predicted to bring.
   Above MARGIN + BAND: processes, at once; below MARGIN - BAND: threads,
   which use less memory, and no worker process is ever started. Where the
   prediction lies within BAND of MARGIN, or the transport could not be
   timed, it is the timed trial's:
3. The loader tries processes for as many batches, and compares the rates
   at which batches arrived on each kind (batches a second while the
   workers are busy: each worker's first batch after a start, the batches
   after an epoch's sampler ran out and the time between epochs are left
   out). Processes stay when they were more than MARGIN faster; else the
   loader goes back to threads.

An epoch too short for a step goes on measuring in the next ones, on the
kind being measured. Each switch lets the running batches finish first, so
the batches handed out do not change; persistent workers of the other kind
are replaced when the next epoch starts. The verdict is kept for the
loader's later epochs. docs/PYTHON.md, "Workers", gives the figures behind
THRESHOLD, MARGIN and BAND.
"""
import os
import secrets
import time

from . import _torch_compat as compat
from . import _torch_processes as processes
from . import _torch_threads as threads

THRESHOLD = 0.8
PROBE_TASKS = 6   # per worker and kind, after each worker's first
MARGIN = 0.03
BAND = 0.15


def transport_seconds(batch):
    """CPU seconds the process transport adds to a batch like `batch`: the
    worker's write of its tensors and arrays into a new shared-memory file
    and the main process's mapping of it and rebuilding of the batch, the
    calling thread's CPU time (page faults included) of the faster of two
    rounds. None where it cannot be done."""
    if isinstance(batch, threads.Staged):
        batch = batch.batch
    path = os.path.join(processes._shm_base(),
                        f"sluice-torch-{os.getpid()}-probe-{secrets.token_hex(4)}")
    best = None
    for _ in range(2):
        c0 = time.thread_time()
        try:
            desc, written = processes.batch_to_shm(batch, path)
            out = processes.batch_from_shm(desc, written)
        except Exception:
            processes.unlink_quiet(path)
            return None
        del out
        c1 = time.thread_time()
        best = c1 - c0 if best is None else min(best, c1 - c0)
    return best


def worker_type_now(loader):
    """The kind of workers `loader` starts now. "auto" decides for the
    interpreter as it is at this moment: a free-threaded one whose GIL is
    off gets threads at once (no probe); with the GIL (also turned back on
    by a module since the loader was made) a map-style dataset is measured
    (once: the verdict is kept), an iterable one gets processes."""
    if loader.worker_type != "auto":
        if loader.worker_type == "thread":
            threads.warn_if_gil_turned_on()
        return loader.worker_type
    threads.warn_if_gil_turned_on()
    if not threads.gil_enabled():
        loader._sl_auto_pending = False
        loader._sl_probe = None
        loader.auto_probe = {"choice": "thread", "why": "the interpreter runs without the GIL"}
        return "thread"
    if compat.is_iterable(loader):
        # An iterable dataset's workers hold iterator state, so the kind
        # cannot change mid-epoch: no probe.
        loader._sl_auto_pending = False
        loader._sl_probe = None
        loader.auto_probe = {"choice": "process",
                             "why": "iterable dataset on an interpreter with the GIL"}
        return "process"
    if not loader._sl_auto_pending and loader._sl_auto_choice is not None:
        return loader._sl_auto_choice
    # Measuring: on the kind being measured, the measurement going on across
    # epochs (and iterators) until it has its batches.
    loader._sl_auto_pending = loader.num_workers > 0
    if loader._sl_probe is None:
        loader._sl_probe = Probe(loader.num_workers)
    return loader._sl_probe.kind


class Probe:
    """The measurement of one loader's first batches, kept by the loader
    until the verdict. The iterator feeds it every result of the kind being
    measured (add) and asks it what to do (step): None (go on), or the kind
    to drain into. A rate is measured over runs of batches that arrive
    while workers are busy: a run ends when an epoch's sampler runs out (its
    last batches drain the workers) and a new one starts with each epoch and
    each start of workers (whose first batch per worker is left out)."""

    def __init__(self, num_workers):
        self.n = num_workers
        self.kind = "thread"       # the kind being measured
        self.share = []            # (cpu, wall) of the thread tasks counted
        self.rates = {}            # kind -> batches a second
        self.cpu_share = None
        self.thread_tasks = 0
        self.sample = None         # a batch the threads loaded
        self.model = {}            # the prediction's figures
        self._phase()

    def _phase(self):
        self.runs = []             # [first arrival, last arrival, batches] of each run
        self.counted = 0
        self.segment()

    def segment(self, started=True):
        """A new run of batches: an epoch starts, or (started) workers did."""
        if started:
            self.seen = {}
        self.run = None

    def add(self, wid, cpu, wall, exhausted, batch=None):
        """An "ok" result of worker `wid` of the kind being measured (on
        threads, its batch: the last one counted is kept for the transport's
        timing)."""
        seen = self.seen
        seen[wid] = seen.get(wid, 0) + 1
        if seen[wid] == 1 or exhausted:
            # Each worker's first batch is left out: it pays one-time costs
            # (imports under the import lock, first-call set-up, a start);
            # so are the batches after the sampler ran out (the workers drain).
            self.run = None
            return
        now = time.perf_counter()
        if self.run is None:
            self.run = [now, now, 0]
            self.runs.append(self.run)
        self.run[1] = now
        self.run[2] += 1
        self.counted += 1
        if self.kind == "thread" and wall > 0:
            self.share.append((cpu, wall))
            if batch is not None:
                self.sample = batch

    def _rate(self):
        batches = sum(n - 1 for _, _, n in self.runs if n >= 2)
        seconds = sum(b - a for a, b, n in self.runs if n >= 2)
        return batches / seconds if batches and seconds > 0 else None

    def step(self, loader):
        """None, or the kind the iterator must drain into and continue on.
        Sets loader.auto_probe and loader._sl_auto_choice as it decides."""
        if self.counted < PROBE_TASKS * self.n:
            return None
        self.rates[self.kind] = self._rate()
        if self.kind == "thread":
            self.thread_tasks = self.counted
            if self.share:
                self.cpu_share = round(min(1.0, sum(c for c, _ in self.share) /
                                           max(1e-9, sum(b for _, b in self.share))), 3)
            if self.cpu_share is None or self.cpu_share < THRESHOLD:
                return self._verdict(loader, "process" if self.cpu_share is not None
                                     else "thread")
            sample, self.sample = self.sample, None
            gain = self.predict(sample)
            if gain is not None and gain > MARGIN + BAND:
                return self._verdict(loader, "process")
            if gain is not None and gain < MARGIN - BAND:
                return self._verdict(loader, "thread")
            # Try processes for as many batches.
            self.kind = "process"
            self._phase()
            loader.auto_probe = self._figures(None)
            return "process"
        rt, rp = self.rates.get("thread"), self.rates.get("process")
        faster = rt is not None and rp is not None and rp > rt * (1 + MARGIN)
        return self._verdict(loader, "process" if faster else "thread")

    def predict(self, sample):
        """The gain processes are predicted to bring over threads (0.1: 10 %
        more batches a second), from the share, the threads' CPU time a
        batch and the transport's time on `sample`; None without them."""
        cpus = [c for c, _ in self.share]
        if not cpus or not self.cpu_share or sample is None:
            return None
        t = transport_seconds(sample)
        if t is None:
            return None
        c = sum(cpus) / len(cpus)
        gain = (c / self.cpu_share) / max(1e-9, c + t) - 1
        self.model = {"cpu_s_per_batch": round(c, 5), "transport_s_per_batch": round(t, 5),
                      "predicted_gain": round(gain, 3), "band": BAND}
        return gain

    def _figures(self, choice):
        probe = {"tasks": self.thread_tasks, "choice": choice, "threshold": THRESHOLD,
                 "cpu_share": self.cpu_share}
        probe.update(self.model)
        for k, r in self.rates.items():
            probe[f"{k}_batches_s"] = None if r is None else round(r, 2)
        if choice is None:
            probe["measuring"] = self.kind
        elif "process" in self.rates or self.model:
            probe["margin"] = MARGIN
        return probe

    def _verdict(self, loader, choice):
        loader._sl_auto_pending = False
        loader._sl_auto_choice = choice
        loader._sl_probe = None
        loader.auto_probe = self._figures(choice)
        if choice == self.kind:
            return None
        self.kind = choice
        return choice
