#!/usr/bin/python3
"""Soak: many epochs of the JPEG training pipeline (decode -> random_resized_crop
224 -> flip -> normalize -> batch 64 -> prefetch 4, examples/specs/imagenet_train.json)
over a few hundred generated photos, recording after every epoch the process's
resident memory (VmRSS), open file descriptors and threads, from /proc.

    /usr/bin/python3 bench/soak.py [--build build] [--mode c|python|both]
                                   [--epochs 100] [--images 300] [--base-epoch 5]
                                   [--rss-tolerance 1.0] [--json]

  c       drives `sluice run SPEC --digest` (one line per batch) and reads
          /proc/PID of that process as each batch comes out: RSS as the
          epoch's last batch comes out, fds and threads the most seen over
          the epoch's batches (the process runs on while it is read, and
          between two epochs it may be stopping one epoch's workers and
          starting the next's: one reading can land in that gap)
  python  iterates the same pipeline through the sluice module in a child
          /usr/bin/python3 and reads /proc/self after each epoch

Pass: RSS after the last epoch within --rss-tolerance percent of RSS after
--base-epoch; open fds and threads the same after every epoch from epoch 1 on;
every epoch finishes within --epoch-timeout seconds (no deadlock). Exit status
0 pass, 1 fail, 2 usage or setup error.
"""
import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
BATCH = 64


def proc_sample(pid):
    """(VmRSS in kB, open fds, threads) of a process."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))


# The Python side: run in a child interpreter so that the test runner's own
# memory and threads are not counted. One JSON line per epoch on stdout.
PY_CHILD = r"""
import faulthandler, json, os, signal, sys
import sluice
spec, epochs, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ds = sluice.from_spec(json.load(open(spec))).epochs(epochs)
def sample():
    rss = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))
# An epoch that hangs: SIGALRM prints every thread's stack and ends the
# process (faulthandler.dump_traceback_later would add a watchdog thread to
# the count it is meant to watch).
faulthandler.register(signal.SIGALRM, all_threads=True, chain=True)
for ep in range(1, epochs + 1):
    signal.alarm(int(timeout) + 1)
    n = 0
    for b in ds:
        img = b["image"]
        n += img.shape[0]
        float(img[0, 0, 0, 0])  # touch the batch, as a training step would
        del b, img
    signal.alarm(0)
    rss, fds, threads = sample()
    print(json.dumps({"epoch": ep, "samples": n, "rss_kb": rss, "fds": fds, "threads": threads}),
          flush=True)
"""


def run_python(a, spec, env):
    cmd = [a.python, "-c", PY_CHILD, spec, str(a.epochs), str(a.epoch_timeout)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    rows = [json.loads(line) for line in proc.stdout]
    if proc.wait() != 0:
        raise SystemExit(f"soak.py: the Python soak exited {proc.returncode} after "
                         f"{len(rows)} epochs (a stack dump above means an epoch hung)")
    return rows


def run_c(a, spec, images, env):
    # stdbuf: line-buffered stdout, so each batch's line arrives when it is made
    cmd = ["stdbuf", "-oL", os.path.join(a.build, "sluice"), "run", spec,
           "--epochs", str(a.epochs + 1), "--digest"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    per_epoch = -(-images // BATCH)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout] + [lines.put("")],
                     daemon=True).start()
    rows = []
    most_fds = most_threads = 0
    try:
        while len(rows) < a.epochs:
            try:
                line = lines.get(timeout=a.epoch_timeout)
            except queue.Empty:
                raise SystemExit(f"soak.py: sluice run made no batch for {a.epoch_timeout} s "
                                 f"in epoch {len(rows) + 1}: a deadlock?") from None
            if not line:
                raise SystemExit(f"soak.py: sluice run ended after {len(rows)} epochs "
                                 f"(exit {proc.wait()})")
            batch = int(line.split()[0].split(":")[1])
            rss, fds, threads = proc_sample(proc.pid)
            most_fds, most_threads = max(most_fds, fds), max(most_threads, threads)
            if batch == per_epoch - 1:
                # this epoch's last batch has been consumed: the state after it
                rows.append({"epoch": len(rows) + 1, "samples": images, "rss_kb": rss,
                             "fds": most_fds, "threads": most_threads})
                most_fds = most_threads = 0
    finally:
        proc.kill()
        proc.wait()
    return rows


def judge(rows, a):
    """Failures (a list of strings) of one run's rows."""
    bad = []
    if len(rows) < a.epochs:
        return [f"only {len(rows)} of {a.epochs} epochs"]
    base = rows[a.base_epoch - 1]["rss_kb"]
    end = rows[-1]["rss_kb"]
    growth = 100.0 * (end - base) / base
    if abs(growth) > a.rss_tolerance:
        bad.append(f"RSS after epoch {a.epochs} is {end / 1024:.1f} MB, {growth:+.2f}% from "
                   f"epoch {a.base_epoch} ({base / 1024:.1f} MB); allowed ±{a.rss_tolerance}%")
    for key in ("fds", "threads"):
        vals = sorted({r[key] for r in rows})
        if len(vals) != 1:
            first = next(r for r in rows if r[key] != rows[0][key])
            bad.append(f"{key} changed: {rows[0][key]} after epoch 1, {first[key]} after "
                       f"epoch {first['epoch']}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--python", default=PY, help="the interpreter of the Python soak (sluice from "
                    "BUILD/python when the build has the module, else the one installed there)")
    ap.add_argument("--mode", choices=("c", "python", "both"), default="both")
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--threads", type=int, default=0, help="workers (default: the spec's)")
    ap.add_argument("--base-epoch", type=int, default=5)
    ap.add_argument("--rss-tolerance", type=float, default=1.0, help="percent")
    ap.add_argument("--epoch-timeout", type=float, default=120.0, help="seconds")
    ap.add_argument("--workdir", help="keep the data here (made once, reused)")
    ap.add_argument("--json", action="store_true", help="print every epoch's row as JSON")
    a = ap.parse_args()
    if not 1 <= a.base_epoch <= a.epochs:
        ap.error(f"--base-epoch must be within 1..--epochs ({a.epochs})")
    sluice_bin = os.path.join(a.build, "sluice")
    gen = os.path.join(a.build, "sluice_gen_images")
    for f in (sluice_bin, gen):
        if not os.access(f, os.X_OK):
            sys.exit(f"soak.py: no {f}; build first (cmake --build {a.build})")

    work = a.workdir or tempfile.mkdtemp(prefix="sluice-soak-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, SLUICE_NO_PROGRESS="1",
               PYTHONPATH=os.path.join(a.build, "python"),
               SLUICE_LIB=os.path.join(a.build, "libsluice.so"))
    slr = os.path.join(work, f"photos{a.images}.slr")
    if not os.path.exists(slr):
        src = os.path.join(work, f"photos{a.images}")
        subprocess.run([gen, src, "--count", str(a.images), "--classes", "10", "--seed", "3"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([sluice_bin, "pack", src, slr], check=True, env=env,
                       stdout=subprocess.DEVNULL)
    with open(os.path.join(REPO, "examples", "specs", "imagenet_train.json")) as f:
        spec = json.load(f)
    spec["source"]["path"] = slr
    if a.threads:
        spec["parallel"] = a.threads
    spec_path = os.path.join(work, "soak_spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)

    failed = False
    modes = ("c", "python") if a.mode == "both" else (a.mode,)
    for mode in modes:
        rows = run_c(a, spec_path, a.images, env) if mode == "c" else run_python(a, spec_path, env)
        if a.json:
            for r in rows:
                print(json.dumps(dict(r, mode=mode)))
        bad = judge(rows, a)
        b, e = rows[a.base_epoch - 1], rows[-1]
        print(f"soak {mode}: {len(rows)} epochs of {a.images} images; RSS MB after epoch 1 "
              f"{rows[0]['rss_kb'] / 1024:.1f}, epoch {a.base_epoch} {b['rss_kb'] / 1024:.1f}, "
              f"epoch {e['epoch']} {e['rss_kb'] / 1024:.1f} "
              f"({100.0 * (e['rss_kb'] - b['rss_kb']) / b['rss_kb']:+.2f}%); "
              f"fds {sorted({r['fds'] for r in rows})}, threads {sorted({r['threads'] for r in rows})}"
              f"{'' if not bad else '; FAIL'}")
        for msg in bad:
            print(f"soak {mode}: {msg}", file=sys.stderr)
        failed |= bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
