"""Helpers for the Python benchmarks: run a command while sampling the summed
resident memory of its whole process tree, and summarise repeats."""
import json
import os
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


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
