"""The extension's objects shared by Python threads: every race the audit in
docs/PYTHON.md ("Free-threaded Python") names, run from many threads at
once. Each must neither crash nor corrupt anything, and must give the
documented error: a close while a call runs raises RuntimeError and leaves
the object working; a call after close raises ValueError.

On a GIL build these check the same gates that make the module safe without
the GIL (python/pysluice.h, py_sl_gate); run on a free-threaded build with
PYTHON_GIL=0 they race for real (docs/PYTHON.md says how). Torch-free.
"""
import sys
import threading
import time

import numpy as np
import pytest

import sluice
from sluice import _sluice
from conftest import image_of, write_slr

THREADS = 8


def run_threads(n, target, *args):
    """Start n threads on target(i, *args) behind a barrier, join them, and
    return the exceptions they raised (unexpected ones: the test fails)."""
    barrier = threading.Barrier(n)
    errors = []

    def body(i):
        try:
            barrier.wait()
            target(i, *args)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


@pytest.fixture(autouse=True)
def fast_switching():
    """Switch threads every 10 us on a GIL build, so the races interleave."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


# ---- Reader ---------------------------------------------------------------

def test_reader_close_while_many_threads_read(tmp_path):
    path = write_slr(tmp_path / "r.slr", 300, shard_bytes=64 << 10)
    r = sluice.Reader(path)
    closed = threading.Event()
    seen_closed = []

    def reader(i):
        k = 0
        while True:
            j = (i * 37 + k) % 300
            k += 1
            try:
                rec = r[j]
                assert rec["label"] == j % 10
                np.testing.assert_array_equal(rec["image"], image_of(j))
                assert len(r) == 300 and r.meta is not None and len(r.shards) > 1
                assert r.index_column("label").shape == (300,)
            except ValueError as e:
                assert "closed sluice.Reader" in str(e), e
                seen_closed.append(i)
                return
            if k > 20000:
                raise AssertionError("never saw the reader closed")

    def closer():
        time.sleep(0.05)
        refused = 0
        while True:
            try:
                r.close()
                break
            except RuntimeError as e:
                assert "a read is in progress" in str(e), e
                refused += 1
                time.sleep(0)
        closed.set()

    c = threading.Thread(target=closer)
    c.start()
    errors = run_threads(THREADS, reader)
    c.join()
    assert errors == []
    assert closed.is_set() and sorted(seen_closed) == list(range(THREADS))
    r.close()  # again: nothing to do
    with pytest.raises(ValueError, match="closed"):
        r.read(0)
    assert "closed" in repr(r)


def test_reader_reopen_refused_while_a_read_runs(fmnist_slr, tmp_path):
    # __init__ again frees the engine reader: while a verify runs on it with
    # the GIL released, it is refused (it used to free the reader under the
    # verify); between verifies it may reopen. close() after it works.
    other = write_slr(tmp_path / "o.slr", 5)
    r = sluice.Reader(fmnist_slr)
    started, stop, errors = threading.Event(), threading.Event(), []

    def verify():
        started.set()
        try:
            while not stop.is_set():
                assert r.verify() == 0
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=verify)
    t.start()
    started.wait()
    refused, deadline = 0, time.monotonic() + 60
    try:
        while refused < 3 and time.monotonic() < deadline:
            try:
                r.__init__(fmnist_slr)
            except RuntimeError as e:
                assert "sluice.Reader.__init__: a read is in progress" in str(e)
                refused += 1
    finally:
        stop.set()
        t.join()
    assert errors == [] and refused == 3
    r.__init__(other)
    assert len(r) == 5
    r.close()


# ---- Writer ---------------------------------------------------------------

def test_writer_two_threads_append_and_one_wins_each_time(tmp_path):
    # One thread at a time: a second append while one runs is refused with
    # RuntimeError; retried, every record lands once, and count agrees.
    path = str(tmp_path / "w.slr")
    w = sluice.Writer(path, [("image", "array", "uint8", (28, 28)), ("label", "int64"),
                             ("who", "int64")], fsync=False)
    per_thread = 200
    refused = [0] * THREADS

    def appender(i):
        for k in range(per_thread):
            while True:
                try:
                    w.append({"image": image_of(k), "label": k, "who": i})
                    break
                except RuntimeError as e:
                    assert "in use by another thread" in str(e), e
                    refused[i] += 1
            assert 0 < w.count <= THREADS * per_thread

    errors = run_threads(THREADS, appender)
    assert errors == []
    assert w.count == THREADS * per_thread
    w.close()
    r = sluice.Reader(path)
    assert len(r) == THREADS * per_thread
    got = sorted((r[j]["who"], r[j]["label"]) for j in range(len(r)))
    assert got == sorted((i, k) for i in range(THREADS) for k in range(per_thread))
    for j in range(0, len(r), 97):
        np.testing.assert_array_equal(r[j]["image"], image_of(r[j]["label"]))


def test_writer_close_and_abort_race_appends(tmp_path):
    # close() and abort() from other threads while appends run: each either
    # runs alone or is refused; after the close, appends raise ValueError.
    for trial, finish in enumerate(("close", "abort")):
        path = str(tmp_path / f"w{trial}.slr")
        w = sluice.Writer(path, [("label", "int64"), ("blob", "bytes")], fsync=False)
        blob = bytes(range(256)) * 64
        done, stop = threading.Event(), threading.Event()

        def appender(i):
            while not stop.is_set():
                try:
                    w.append({"label": i, "blob": blob})
                except RuntimeError as e:
                    assert "in use by another thread" in str(e), e
                except ValueError as e:
                    assert "closed" in str(e), e
                    return

        def finisher():
            while w.count < 20:  # some appends land first
                time.sleep(0.001)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    getattr(w, finish)()
                    done.set()
                    break
                except RuntimeError as e:
                    assert "in use by another thread" in str(e), e
            stop.set()

        f = threading.Thread(target=finisher)
        f.start()
        errors = run_threads(4, appender)
        f.join()
        assert errors == [] and done.is_set()
        if finish == "close":
            assert len(sluice.Reader(path)) == w.count > 0
        else:
            assert w.count == 0
            with pytest.raises(sluice.IOFailure):
                sluice.Reader(path)


# ---- Pipeline -------------------------------------------------------------

def test_pipeline_close_while_consumer_and_stats_threads_run(tmp_path):
    path = write_slr(tmp_path / "p.slr", 2000)
    ds = sluice.records(path, parallel=2).shuffle(seed=1).repeat(1000).batch(16)
    eng = ds._get_engine()
    eng.set_epoch(0)
    stop = threading.Event()
    outcomes = []

    def consumer(i):
        n = 0
        while not stop.is_set():
            try:
                b = eng.next_numpy()
            except RuntimeError as e:  # another consumer holds it
                assert "in use by another thread" in str(e), e
                continue
            except ValueError as e:
                assert "the pipeline is closed" in str(e), e
                outcomes.append(("closed", n))
                return
            if b is None:
                outcomes.append(("end", n))
                return
            assert b["image"].shape[1:] == (28, 28)
            n += 1

    def watcher(i):
        # stats(), columns, epochs run beside the consumer; state() and
        # epoch read the consumer's own state: they are consumer calls,
        # refused while a next() runs.
        while not stop.is_set():
            try:
                assert isinstance(eng.stats(), str)
                assert eng.columns == ["image", "label"] and eng.epochs == 1
                try:
                    assert eng.epoch >= 0 and eng.state()
                except RuntimeError as e:
                    assert "in use by another thread" in str(e), e
            except ValueError as e:
                assert "the pipeline is closed" in str(e), e
                return

    def closer(i):
        time.sleep(0.1)
        deadline = time.monotonic() + 60
        while True:
            try:
                eng.close()
                return
            except RuntimeError as e:
                assert "in use by another thread" in str(e), e
            if time.monotonic() > deadline:
                stop.set()
                raise AssertionError("close() was refused for 60 s")

    roles = [consumer, consumer, consumer, watcher, watcher, closer]
    errors = run_threads(len(roles), lambda i: roles[i](i))
    assert errors == []
    assert len(outcomes) == 3 and all(o[0] in ("closed", "end") for o in outcomes)
    eng.close()  # closed already: nothing to do
    with pytest.raises(ValueError, match="closed"):
        eng.next()


def test_pipeline_two_closes_while_map_workers_are_busy(tmp_path):
    # close() joins the map workers with the GIL released; a second close()
    # meanwhile must not free the Python maps under them (it returns at once).
    path = write_slr(tmp_path / "m.slr", 200)

    def slow(s):
        time.sleep(0.05)
        return {"label": s["label"] + 1}

    for _ in range(3):
        ds = sluice.records(path).map(slow).batch(4)
        eng = ds._get_engine()
        eng.set_epoch(0)
        assert eng.next_numpy() is not None
        errors = run_threads(4, lambda i: eng.close())
        assert errors == []
        with pytest.raises(ValueError, match="closed"):
            eng.next_numpy()


def test_map_exceptions_from_many_workers_at_once(tmp_path):
    # Every worker raises at about the same time: one exception (of the
    # map's own type, with its traceback) reaches the consumer; the others
    # are dropped, none leaks (weak references to all of them die once the
    # pipeline is closed). Repeated to race the hand-over.
    import gc
    import weakref
    path = write_slr(tmp_path / "e.slr", 400)

    class Boom(Exception):
        pass

    raised = []

    def bad(s):
        e = Boom(f"sample label {int(s['label'])}")
        raised.append(weakref.ref(e))
        raise e

    for trial in range(20):
        ds = sluice.records(path, parallel=8).map(bad).batch(8)
        with pytest.raises(Boom, match="sample label") as info:
            for _ in ds.numpy():
                pass
        assert any(f.name == "bad" for f in info.traceback), "the map's frame is kept"
        del info
        ds.close()
    gc.collect()
    assert len(raised) >= 20
    assert [r for r in raised if r() is not None] == []


def test_map_skip_mode_from_many_workers_reports_one(tmp_path, monkeypatch):
    # on_error("skip"): half the samples raise, on 8 workers at once; they
    # are dropped and counted, and exactly one exception is reported.
    path = write_slr(tmp_path / "k.slr", 300)
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))

    def bad_odd(s):
        if int(s["label"]) % 2:
            raise ValueError("odd label")
        return {}

    ds = sluice.records(path, parallel=8).map(bad_odd).on_error("skip").batch(10)
    n = sum(len(b["label"]) for b in ds.numpy())
    assert n == 150
    assert len(reported) == 1 and "odd label" in str(reported[0])
    ds.close()


# ---- Stager ---------------------------------------------------------------

def test_stager_from_many_threads():
    st = _sluice.Stager("host", 0, to_device=False, depth=4)

    def stage(i):
        rng = np.random.default_rng(i)
        for k in range(200):
            a = rng.integers(0, 255, (7, 13), dtype=np.uint8)
            b = rng.random(5)
            outs = st.stage([a, b])
            np.testing.assert_array_equal(np.asarray(outs[0]), a)
            np.testing.assert_array_equal(np.asarray(outs[1]), b)
            if k % 50 == 0:
                st.set_stream(None)
                assert st.stats()["batches"] >= 1
            del outs

    errors = run_threads(THREADS, stage)
    assert errors == []
    assert st.stats()["batches"] == THREADS * 200


def test_stager_init_from_many_threads_once():
    # __init__ raced on one object: exactly one thread opens the stager, the
    # others are told it is already initialised (none leaks an engine stager).
    for _ in range(20):
        st = _sluice.Stager.__new__(_sluice.Stager)
        with pytest.raises(RuntimeError, match="not initialised"):
            st.stage([])
        ok = []

        def init(i):
            try:
                st.__init__("host", 0, False, 4)
                ok.append(i)
            except RuntimeError as e:
                assert "already initialised" in str(e), e

        assert run_threads(THREADS, init) == []
        assert len(ok) == 1
        assert st.kind == "host" and st.stage([np.arange(3)])[0].shape == (3,)
