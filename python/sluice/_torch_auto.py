"""sluice.torch: worker_type="auto" — which kind of workers to run.

On an interpreter whose GIL is off (free-threaded 3.13t/3.14t): threads, at
once. With the GIL, for a map-style dataset, the first batches of the first
epoch are measured, in two steps:

1. On threads. Each task's thread CPU time and wall time are measured, less
   the time the thread was runnable but waited for a core (other threads and
   other processes on the machine: the scheduler's run-queue wait). What
   remains besides CPU time is time asleep, which for a loading thread is
   mostly time waiting for the GIL, so sum(cpu) / sum(wall - run-queue wait)
   says how much of the work could run in parallel. Below THRESHOLD the
   loader drains the threads and continues on processes: the verdict.
2. At or above THRESHOLD the share does not settle it: the GIL's hand-offs
   cost more than the time a thread waits for it (torchvision's transforms
   on Pillow images: share 0.89-0.98, yet processes ran 1.08-1.16x faster
   on 3.11, issue 46). So the loader tries processes for as many batches,
   and compares the rates at which batches arrived on each (batches a
   second, each worker's first batch on each kind left out: it pays the
   start-up). Processes stay when they were more than MARGIN faster; else
   the loader goes back to threads, which use less memory.

Each switch lets the running batches finish first, so the batches handed
out do not change. The verdict is kept for the loader's later epochs.
docs/PYTHON.md, "Workers", gives the figures behind THRESHOLD and MARGIN.
"""
import time

from . import _torch_compat as compat
from . import _torch_threads as threads

THRESHOLD = 0.8
PROBE_TASKS = 6   # per worker and kind, after each worker's first
MARGIN = 0.03


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
        loader.auto_probe = {"choice": "thread", "why": "the interpreter runs without the GIL"}
        return "thread"
    if compat.is_iterable(loader):
        # An iterable dataset's workers hold iterator state, so the kind
        # cannot change mid-epoch: no probe.
        loader._sl_auto_pending = False
        loader.auto_probe = {"choice": "process",
                             "why": "iterable dataset on an interpreter with the GIL"}
        return "process"
    if loader._sl_auto_choice is not None and not loader._sl_auto_pending:
        return loader._sl_auto_choice
    # Measure (again, when an iteration left during the measurement).
    loader._sl_auto_choice = None
    loader._sl_auto_pending = loader.num_workers > 0
    loader.auto_probe = None
    return "thread"


class Probe:
    """The measurement of one loader's first batches. The iterator feeds it
    every result (add) and asks it what to do (step): None (go on), or the
    kind to drain into. `kind` is the kind being measured."""

    def __init__(self, num_workers):
        self.n = num_workers
        self.kind = "thread"
        self.share = []           # (cpu, wall) of the thread tasks counted
        self.rates = {}           # kind -> batches a second
        self._phase()

    def _phase(self):
        self.seen = {}
        self.times = []           # arrival of each result counted

    def add(self, wid, cpu, wall):
        """An "ok" result of worker `wid` of the kind being measured."""
        seen = self.seen
        seen[wid] = seen.get(wid, 0) + 1
        if seen[wid] == 1:
            # Each worker's first batch is left out: it pays one-time costs
            # (imports under the import lock, first-call set-up, a start).
            return
        self.times.append(time.perf_counter())
        if self.kind == "thread" and wall > 0:
            self.share.append((cpu, wall))

    def _rate(self):
        t = self.times
        if len(t) < 2 or t[-1] <= t[0]:
            return None
        return (len(t) - 1) / (t[-1] - t[0])

    def step(self, loader, exhausted):
        """None, or the kind the iterator must drain into and continue on.
        Sets loader.auto_probe and loader._sl_auto_choice as it decides."""
        if len(self.times) < PROBE_TASKS * self.n and not exhausted:
            return None
        self.rates[self.kind] = self._rate()
        if self.kind == "thread":
            if not self.share:
                return self._verdict(loader, "thread", exhausted)
            ratio = min(1.0, sum(c for c, _ in self.share) /
                        max(1e-9, sum(b for _, b in self.share)))
            self.cpu_share = round(ratio, 3)
            self.thread_tasks = len(self.times)
            if ratio < THRESHOLD or exhausted:
                return self._verdict(loader, "thread" if ratio >= THRESHOLD else "process",
                                     exhausted)
            # Try processes for as many batches.
            self.kind = "process"
            self._phase()
            loader._sl_auto_choice = "process"
            return "process"
        rt, rp = self.rates.get("thread"), self.rates.get("process")
        faster = rt is not None and rp is not None and rp > rt * (1 + MARGIN)
        return self._verdict(loader, "process" if faster else "thread", exhausted)

    def _verdict(self, loader, choice, exhausted):
        loader._sl_auto_pending = False
        loader._sl_auto_choice = choice
        tasks = getattr(self, "thread_tasks", len(self.times) if self.kind == "thread" else 0)
        probe = {"tasks": tasks, "choice": choice, "threshold": THRESHOLD}
        if hasattr(self, "cpu_share"):
            probe["cpu_share"] = self.cpu_share
        for k, r in self.rates.items():
            probe[f"{k}_batches_s"] = None if r is None else round(r, 2)
        if "process" in self.rates:
            probe["margin"] = MARGIN
        loader.auto_probe = probe
        # The kind to go on with, unless it is the one running or the epoch
        # has no batch left to ask for (the next epoch starts on `choice`).
        if exhausted or choice == self.kind:
            return None
        self.kind = choice
        return choice

    def started(self, kind):
        """The iterator started `kind` workers: False when that is not the
        kind being measured (processes could not start and "auto" went on
        with threads), and the probe ends."""
        return kind == self.kind
