"""The GIL is released while the engine works: another Python thread keeps
running during a long verify, a pack and a pipeline epoch."""
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
