"""The GIL is released while the engine works: another Python thread keeps
running during a long verify, a pack and a pipeline epoch."""
import os
import sys
import threading

import numpy as np

import sluice
from conftest import FMNIST, write_idx


class Counter:
    """A Python thread counting as fast as it can while `during` runs."""

    def __init__(self):
        self.n = 0
        self.stop = False
        self.t = threading.Thread(target=self.run)

    def run(self):
        while not self.stop:
            self.n += 1

    def during(self, fn):
        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-4)
        self.t.start()
        try:
            while self.n == 0:
                pass
            before = self.n
            fn()
            return self.n - before
        finally:
            self.stop = True
            self.t.join()
            sys.setswitchinterval(old)


# With the GIL held for the whole call, the counter could only move in the
# 0.1 ms slices before and after it (a few hundred counts); released, it runs
# for the whole call.
MIN_COUNT = 20000


def test_verify_releases_the_gil(fmnist_slr):
    r = sluice.Reader(fmnist_slr)

    def work():
        for _ in range(3):
            r.verify()

    assert Counter().during(work) > MIN_COUNT


def test_pipeline_next_releases_the_gil(fmnist_slr):
    ds = sluice.records(fmnist_slr).shuffle(seed=0).batch(4096)

    def work():
        for _ in range(2):
            for b in ds.numpy():
                pass

    assert Counter().during(work) > MIN_COUNT


def test_pack_releases_the_gil(tmp_path):
    imgs = np.random.default_rng(1).integers(0, 256, (20000, 28, 28), dtype=np.uint8)
    ip = write_idx(tmp_path / "i.gz", imgs)
    lp = write_idx(tmp_path / "l.gz", np.zeros(20000, np.uint8))
    assert Counter().during(lambda: sluice.pack([ip, lp], str(tmp_path / "o.slr"))) > MIN_COUNT


def test_writer_refuses_close_and_abort_while_an_append_runs(tmp_path):
    # An append runs with the GIL released: abort() (which frees the engine
    # writer), close() or a second append from another thread must not run
    # into it; they raise instead, and the append completes.
    import pytest
    import time
    big = np.random.default_rng(0).integers(0, 256, 6 << 20, dtype=np.uint8).tobytes()
    w = sluice.Writer(str(tmp_path / "w.slr"), [{"name": "blob", "type": "bytes", "zstd": True}],
                      zstd_level=19, fsync=False)
    started, errors = threading.Event(), []

    def run():
        started.set()
        try:
            w.append({"blob": big})       # zstd level 19 on 6 MiB: about 2 s here
        except Exception as e:             # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    started.wait()
    time.sleep(0.2)
    assert t.is_alive(), "the append ended before the test could race it"
    for call in (w.abort, w.close, lambda: w.append({"blob": b"x"})):
        with pytest.raises(RuntimeError, match="in use by another thread"):
            call()
    t.join()
    assert not errors
    w.close()
    assert len(sluice.Reader(str(tmp_path / "w.slr"))) == 1


def test_import_leaves_a_free_threaded_interpreter_without_the_gil():
    # On a free-threaded build (3.13t) importing sluice, its ops and the
    # extension keeps the GIL off, with no warning, and without PYTHON_GIL
    # telling CPython to; on a GIL build the GIL stays on.
    import subprocess
    import sysconfig
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(sluice.__file__)))
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c",
                        "import sys, sluice, sluice.ops, sluice.dataset\n"
                        "print(getattr(sys, '_is_gil_enabled', lambda: True)())"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    free = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert r.stdout.split() == [str(not free)], (r.stdout, r.stderr)
