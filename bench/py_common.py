"""Helpers for the Python benchmarks: run a command while sampling the summed
resident memory of its whole process tree, and summarise repeats.

Memory is measured as the issue's targets define it (bench/README.md, "Peak
memory"): the peak, over samples every 10 ms, of the summed VmRSS of the run's
process and all its descendants, minus the main process's VmRSS just after
`import torch` (which the run reports as its first JSON line, see
TORCH_BASELINE and run_python_file)."""
import json
import os
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# SLUICE_PY: the interpreter with numpy and torch (the device machine has its own)
PY = os.environ.get("SLUICE_PY", "/usr/bin/python3")


def _children(pid):
    """Children of every thread of pid (a child forked by a thread other than
    the main one is listed under that thread only)."""
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kb(pid):
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += _rss_kb(p)
        stack.extend(_children(p))
    return total


def run_measured(cmd, env=None, interval=0.01):
    """Run cmd; return (stdout text, peak summed RSS of its process tree in MB)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_kb(proc.pid))
            time.sleep(interval)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, _ = proc.communicate()
    done.set()
    t.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}")
    return out, peak[0] / 1024.0


# Prepended to a measured Python run: import torch, then report the process's
# resident memory at that point (the baseline subtracted from the peak).
TORCH_BASELINE = r"""
import json as _json, torch as _torch
with open("/proc/self/status") as _f:
    _kb = next(int(l.split()[1]) for l in _f if l.startswith("VmRSS:"))
print(_json.dumps({"torch_base_rss_kb": _kb}), flush=True)
"""

# Runs a script file as __main__ after TORCH_BASELINE: argv[1] is the script,
# the rest its arguments.
RUN_FILE = TORCH_BASELINE + r"""
import runpy as _runpy, sys as _sys
_sys.argv = _sys.argv[1:]
_runpy.run_path(_sys.argv[0], run_name="__main__")
"""


def run_net_measured(cmd, env=None):
    """Run a Python command whose code starts with TORCH_BASELINE; return
    (JSON records it printed, peak summed RSS of its tree in MB, baseline in
    MB, peak minus baseline in MB)."""
    out, peak = run_measured(cmd, env=env)
    recs = json_lines(out)
    base = next(r["torch_base_rss_kb"] for r in recs if "torch_base_rss_kb" in r) / 1024.0
    return [r for r in recs if "torch_base_rss_kb" not in r], peak, base, peak - base


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def epoch_stream(epochs):
    """Batches of epochs(0), epochs(1), ... one after another, as a training
    loop takes them; an epoch that yields nothing is an error, not an end."""
    e = 0
    while True:
        n = 0
        for b in epochs(e):
            n += 1
            yield b
        if n == 0:
            raise RuntimeError("an epoch yielded no batch")
        e += 1


def med_spread(values):
    values = list(values)
    m = statistics.median(values)
    return m, (min(values), max(values))


def env_with_sluice(build):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(build, "python")
    return env


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "load": os.getloadavg()[0]}


def static_link_args(build):
    """What a C program linked against BUILD/libsluice.a needs after it."""
    here = os.path.dirname(os.path.abspath(__file__))
    return subprocess.run(["bash", os.path.join(here, "..", "scripts", "link_flags.sh"), build],
                          check=True, capture_output=True, text=True).stdout.split()
