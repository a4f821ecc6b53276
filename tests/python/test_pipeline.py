"""Iterating pipelines from Python: batches, epochs, resume, sharding, stats,
errors, Python maps, Ctrl-C."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import sluice
from conftest import REPO, image_of, write_slr


def collect(ds, kind="numpy"):
    it = ds.numpy() if kind == "numpy" else ds.torch()
    return [{k: np.array(v) for k, v in b.items()} for b in it]


def test_numpy_batches_hold_the_records(small_slr):
    ds = sluice.records(small_slr).batch(16)
    batches = collect(ds)
    assert [b["image"].shape for b in batches] == [(16, 28, 28)] * 6 + [(4, 28, 28)]
    assert batches[0]["image"].dtype == np.uint8
    assert batches[0]["label"].dtype == np.int64
    labels = np.concatenate([b["label"] for b in batches])
    np.testing.assert_array_equal(labels, np.arange(100) % 10)
    images = np.concatenate([b["image"] for b in batches])
    for i in (0, 33, 99):
        np.testing.assert_array_equal(images[i], image_of(i))
    assert len(ds) == 7
    assert sorted(ds.columns) == ["image", "label"]


def test_drop_remainder_and_len(small_slr):
    ds = sluice.records(small_slr).batch(16, drop_remainder=True)
    assert len(ds) == 6
    assert len(collect(ds)) == 6


def test_shuffle_is_a_permutation_per_epoch_and_reproducible(small_slr):
    ds = sluice.records(small_slr).shuffle(seed=5).batch(10)
    ds.set_epoch(0)
    e0 = np.concatenate([b["label"] * 0 + b["image"][:, 0, 0] for b in collect(ds)])
    ds.set_epoch(1)
    e1 = np.concatenate([b["image"][:, 0, 0] for b in collect(ds)])
    ds.set_epoch(0)
    e0b = np.concatenate([b["image"][:, 0, 0] for b in collect(ds)])
    np.testing.assert_array_equal(e0, e0b)
    assert not np.array_equal(e0, e1)
    want = sorted(int(image_of(i)[0, 0]) for i in range(100))
    assert sorted(e0.tolist()) == want and sorted(e1.tolist()) == want
    other = sluice.records(small_slr).shuffle(seed=5).batch(10)
    other.set_epoch(1)
    np.testing.assert_array_equal(np.concatenate([b["image"][:, 0, 0] for b in collect(other)]), e1)


def test_successive_iterations_advance_the_epoch(small_slr):
    ds = sluice.records(small_slr).shuffle(seed=1).batch(100)
    first = collect(ds)[0]["label"]
    second = collect(ds)[0]["label"]
    ds.set_epoch(1)
    again = collect(ds)[0]["label"]
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(second, again)


def test_state_dict_resumes_exactly(small_slr):
    make = lambda: sluice.records(small_slr).shuffle(seed=3).batch(8)  # noqa: E731
    ds = make()
    ds.set_epoch(2)
    full = collect(ds)
    ds2 = make()
    ds2.set_epoch(2)
    it = iter(ds2.numpy())
    head = [np.array(next(it)["label"]) for _ in range(5)]
    state = ds2.state_dict()
    assert state["epoch"] == 2
    ds2.close()
    ds3 = make()
    ds3.load_state_dict(state)
    tail = [b["label"] for b in collect(ds3)]
    got = head + tail
    assert len(got) == len(full)
    for a, b in zip(got, full):
        np.testing.assert_array_equal(a, b["label"])


def test_shards_are_disjoint_and_cover(small_slr):
    seen = []
    for rank in range(3):
        ds = sluice.records(small_slr).shuffle(seed=9).shard(rank=rank, world_size=3).batch(50)
        ds.set_epoch(4)
        seen.append(np.concatenate([b["image"][:, 0, 0] for b in collect(ds)]).tolist())
    assert all(len(s) == len(seen[0]) for s in seen)
    flat = [v for s in seen for v in s]
    assert set(flat) == {int(image_of(i)[0, 0]) for i in range(100)}


def test_torch_batches(small_slr):
    torch = pytest.importorskip("torch")
    ds = sluice.records(small_slr).batch(32)
    batches = list(ds.torch())
    assert isinstance(batches[0]["image"], torch.Tensor)
    assert batches[0]["image"].dtype == torch.uint8
    assert batches[0]["label"].dtype == torch.int64
    assert tuple(batches[0]["image"].shape) == (32, 28, 28)
    assert torch.equal(batches[1]["image"][0], torch.from_numpy(image_of(32)))


def test_from_spec_runs_the_same_pipeline(small_slr):
    a = sluice.records(small_slr).shuffle(seed=2).batch(25)
    b = sluice.from_spec(a.to_json())
    for x, y in zip(collect(a), collect(b)):
        np.testing.assert_array_equal(x["image"], y["image"])


def test_filter_select_and_repeat(small_slr):
    ds = sluice.records(small_slr).filter("label", [3, 7]).select("label").batch(100)
    (b,) = collect(ds)
    assert list(b) == ["label"]
    assert sorted(set(b["label"].tolist())) == [3, 7] and len(b["label"]) == 20
    rep = sluice.records(small_slr).repeat(2).batch(50)
    assert len(collect(rep)) == 4


def test_stats_and_explain(small_slr):
    ds = sluice.records(small_slr).batch(10)
    collect(ds)
    st = ds.stats()
    assert st["batches"] == 10 and st["samples"] == 100
    assert st["bound"] in ("F", "P", "G", "?")
    assert st["stages"]
    assert "batch" in ds.explain()


def test_stats_report_memory(small_slr):
    ds = sluice.records(small_slr).batch(10).memory_limit("64M")
    collect(ds)
    st = ds.stats()
    assert st["memory_limit"] == 64 << 20
    assert st["batch_bytes"] >= 10 * 28 * 28
    assert 0 < st["batches_in_flight"] * st["batch_bytes"] <= st["memory_limit"]
    assert st["pool_bytes"] >= st["batch_bytes"]
    assert 0 <= st["pool_free_bytes"] <= st["pool_bytes"]
    assert st["queue_bytes"] >= 0
    assert sum(p["bytes"] for p in st["pools"]) == st["pool_bytes"]
    assert all(p["buf_size"] > 0 for p in st["pools"])
    assert all("queue_bytes" in s and "queue_length" in s for s in st["stages"])


def test_memory_limit_round_trips_through_spec_json(small_slr):
    ds = sluice.records(small_slr).batch(10).memory_limit("1G")
    again = sluice.from_spec(ds.to_json())
    assert again.spec["memory_limit"] == "1G"
    collect(again)
    assert again.stats()["memory_limit"] == 1 << 30
    ds = sluice.records(small_slr).batch(10).memory_limit(1000)
    with pytest.raises(sluice.LimitError, match="below one batch of image"):
        collect(ds)
    with pytest.raises(ValueError):
        sluice.records(small_slr).memory_limit(0)


def test_python_map(small_slr):
    def invert(sample):
        assert sample["image"].shape == (28, 28)
        return {"image": 255 - sample["image"], "label": sample["label"] * 2}

    ds = sluice.records(small_slr).map(invert).batch(50)
    b = collect(ds)[0]
    np.testing.assert_array_equal(b["image"][5], 255 - image_of(5))
    assert b["label"][5] == 10


def test_python_map_exception_comes_out(small_slr):
    def bad(sample):
        if sample["label"] == 4:
            raise KeyError("my own failure")
        return {}

    ds = sluice.records(small_slr).map(bad).batch(10)
    with pytest.raises(KeyError, match="my own failure"):
        collect(ds)


def test_damaged_record_raises_naming_file_and_record(small_slr):
    from test_record import flip_record_byte
    flip_record_byte(small_slr, 57)
    ds = sluice.records(small_slr).batch(10)
    with pytest.raises(sluice.CorruptError) as ei:
        collect(ds)
    assert "small.slr" in str(ei.value) and "57" in str(ei.value)
    skipping = sluice.records(small_slr).batch(10).on_error("skip")
    got = collect(skipping)
    assert sum(len(b["label"]) for b in got) == 99
    assert skipping.stats()["skipped"] == 1


def test_bad_spec_and_missing_file(small_slr, tmp_path):
    with pytest.raises(sluice.IOFailure, match="missing.slr"):
        collect(sluice.records(tmp_path / "missing.slr").batch(4))
    with pytest.raises(sluice.InvalidError, match=r"ops\[0\]"):
        collect(sluice.records(small_slr).op("no_such_op"))
    with pytest.raises(sluice.InvalidError, match="nope"):
        collect(sluice.records(small_slr).select("nope"))
    with pytest.raises(ValueError):  # InvalidError is a ValueError
        collect(sluice.records(small_slr).op("batch", size=-3))
    with pytest.raises(sluice.InvalidError, match="bogus"):
        collect(sluice.from_spec({"source": {"path": small_slr}, "bogus": 1}))
    with pytest.raises(sluice.InvalidError, match="shard"):
        collect(sluice.from_spec({"source": {"path": small_slr, "shard": {"index": 5, "count": 2}}}))


def test_one_pass_at_a_time(small_slr):
    ds = sluice.records(small_slr).batch(10)
    a = iter(ds.numpy())
    next(a)
    b = iter(ds.numpy())
    next(b)
    with pytest.raises(RuntimeError, match="superseded"):
        next(a)


def test_ctrl_c_stops_a_blocked_iteration(tmp_path):
    """SIGINT while the consumer waits for a slow map: KeyboardInterrupt comes
    promptly, not after the epoch."""
    path = write_slr(tmp_path / "s.slr", 50)
    script = textwrap.dedent(f"""
        import sys, time
        import sluice
        def slow(s):
            time.sleep(0.5)
            return {{}}
        ds = sluice.records({path!r}).map(slow).batch(50)
        print("ready", flush=True)
        t0 = time.time()
        try:
            for b in ds.numpy():
                pass
            print("finished", flush=True)
        except KeyboardInterrupt:
            print("interrupted %.2f" % (time.time() - t0), flush=True)
            ds.close()
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    assert out.startswith("interrupted"), out
    assert float(out.split()[1]) < 10.0  # the epoch would take 25 s


def test_fork_child_gets_its_own_engine(small_slr):
    """A Dataset iterated before fork() keeps working in the child (a fresh
    engine there), and the parent's engine is untouched."""
    ds = sluice.records(small_slr).batch(50)
    first = collect(ds)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            got = collect(ds)
            ok = len(got) == 2 and np.array_equal(got[1]["label"], first[1]["label"])
            os.write(w, b"ok" if ok else b"bad")
        except BaseException as e:  # pragma: no cover - reported to the parent
            os.write(w, repr(e).encode()[:200])
        finally:
            os._exit(0)
    os.close(w)
    msg = os.read(r, 256)
    os.waitpid(pid, 0)
    assert msg == b"ok", msg
    assert len(collect(ds)) == 2


def test_python_map_must_return_a_dict(small_slr):
    ds = sluice.records(small_slr).map(lambda s: [1, 2]).batch(10)
    with pytest.raises(TypeError, match="dict"):
        collect(ds)


def test_pipelines_in_several_threads(small_slr):
    results, errors = {}, []

    def work(seed):
        try:
            ds = sluice.records(small_slr).shuffle(seed=seed).batch(7)
            results[seed] = np.concatenate([b["label"] for b in collect(ds)])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    for seed, labels in results.items():
        ds = sluice.records(small_slr).shuffle(seed=seed).batch(7)
        np.testing.assert_array_equal(labels, np.concatenate([b["label"] for b in collect(ds)]))
        assert sorted(labels.tolist()) == sorted((np.arange(100) % 10).tolist())


def test_one_consumer_thread_at_a_time(tmp_path):
    path = write_slr(tmp_path / "s.slr", 10)

    def slow(s):
        time.sleep(0.3)
        return {}

    ds = sluice.records(path).map(slow).batch(10)
    eng = ds._get_engine()
    eng.set_epoch(0)
    t = threading.Thread(target=eng.next_numpy)
    t.start()
    time.sleep(0.1)
    try:
        with pytest.raises(RuntimeError, match="another thread"):
            eng.next_numpy()
    finally:
        t.join()
    ds.close()


def test_set_epoch_ends_an_open_iteration(small_slr):
    ds = sluice.records(small_slr).batch(10)
    it = iter(ds.numpy())
    next(it)
    ds.set_epoch(3)
    with pytest.raises(RuntimeError, match="superseded"):
        next(it)
    assert len(collect(ds)) == 10


def test_trace_is_trace_event_json(small_slr, tmp_path):
    import json
    ds = sluice.records(small_slr).batch(10)
    ds.enable_trace()
    collect(ds)
    doc = json.loads(ds.trace())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    assert events and all("ph" in e for e in events)
    ds.trace(tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())
    with pytest.raises(sluice.InvalidError):
        sluice.records(small_slr).batch(10).trace()  # never enabled


def test_from_arrays_is_an_in_memory_source():
    x = np.arange(30 * 3 * 2, dtype=np.float32).reshape(30, 3, 2)
    y = np.arange(30) * 10
    ds = sluice.from_arrays({"x": x, "y": y}).shuffle(seed=4).map(
        lambda s: {"y": s["y"] + 1}).batch(8)
    batches = collect(ds)
    assert len(ds) == 4 and [len(b["y"]) for b in batches] == [8, 8, 8, 6]
    for b in batches:
        idx = (b["y"] - 1) // 10
        np.testing.assert_array_equal(b["x"], x[idx])
    assert sorted(np.concatenate([b["y"] for b in batches]).tolist()) == (y + 1).tolist()
    x[:] = -1  # the engine holds its own copy
    assert collect(ds)[0]["x"].min() >= 0
    with pytest.raises(TypeError, match="to_json"):
        ds.to_json()
    with pytest.raises(ValueError, match="samples"):
        sluice.from_arrays({"x": x, "y": y[:5]})
    with pytest.raises(TypeError, match="columns"):
        sluice.from_arrays([x, y])
    with pytest.raises(ValueError, match="leading"):
        sluice.from_arrays({"x": np.float32(3)})


def test_python_map_errors_under_skip(small_slr, monkeypatch):
    def picky(sample):
        if sample["label"] == 4:
            raise ValueError("no fours")
        return {}

    shown = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: shown.append(u.exc_value))
    ds = sluice.records(small_slr).map(picky).batch(100).on_error("skip")
    (b,) = collect(ds)
    assert len(b["label"]) == 90 and 4 not in b["label"].tolist()
    assert ds.stats()["skipped"] == 10
    assert len(shown) == 1 and "no fours" in str(shown[0])  # the first one, once


def test_failed_pipeline_starts_clean_on_its_next_iteration(small_slr):
    # A Dataset whose iteration failed iterates again from the start of the
    # epoch (the same object, with or without set_epoch): the good batches
    # come again and the bad record raises again where it is reached.
    from test_record import flip_record_byte
    flip_record_byte(small_slr, 57)
    ds = sluice.records(small_slr).batch(10)
    for attempt in range(4):
        if attempt % 2:
            ds.set_epoch(0)
        got = []
        with pytest.raises(sluice.CorruptError, match="small.slr: record 57") as ei:
            for b in ds:
                got.append(b["label"].copy())
        assert len(got) == 5, (attempt, len(got))
        np.testing.assert_array_equal(np.concatenate(got), np.arange(50) % 10)
        assert "had failed" not in str(ei.value)
    # resuming past the bad batch yields the rest of the epoch
    state = ds.state_dict()
    assert state["batch"] == 5 and state["pos"] == 50
    ds.load_state_dict(dict(state, batch=6, pos=60))
    rest = [b["label"].copy() for b in ds]
    assert len(rest) == 4
    np.testing.assert_array_equal(np.concatenate(rest), np.arange(60, 100) % 10)
    # the next epoch of the same object meets the record again
    ds.set_epoch(1)
    with pytest.raises(sluice.CorruptError, match="record 57"):
        collect(ds)
    # and under on_error("skip") every good record comes
    skipping = ds.on_error("skip")
    for _ in range(2):
        assert sum(len(b["label"]) for b in collect(skipping)) == 99


def test_failed_python_map_starts_clean_on_the_next_iteration(small_slr):
    calls = {"n": 0}

    def flaky(sample):
        if sample["label"] == 4 and calls["n"] == 0:
            calls["n"] += 1
            raise KeyError("once only")
        return {}

    ds = sluice.records(small_slr).map(flaky).batch(10)
    with pytest.raises(KeyError, match="once only"):
        collect(ds)
    got = collect(ds)  # the map no longer raises: a clean epoch
    assert sum(len(b["label"]) for b in got) == 100


def test_decode_error_names_the_path_and_how_to_skip(tmp_path):
    # A JPEG cut in half packs under the default header check; the decode
    # op's error names the record's path column and ends with how to skip
    # it, in the spec's and Python's spelling; on_error("skip") trains on.
    from PIL import Image
    root = tmp_path / "imgs"
    for i in range(10):
        d = root / ("c%d" % (i % 2))
        d.mkdir(parents=True, exist_ok=True)
        px = np.random.default_rng(i).integers(0, 256, (30, 40, 3), dtype=np.uint8)
        Image.fromarray(px).save(d / ("im%02d.jpg" % i), quality=90)
    cut = root / "c1" / "im05.jpg"
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    slr = str(tmp_path / "t.slr")
    sluice.pack(str(root), slr, skip_bad=True)
    ds = sluice.records(slr).decode("image").resize("image", (16, 16)).batch(2)
    with pytest.raises(sluice.DecodeError) as ei:
        collect(ds)
    msg = str(ei.value)
    assert "t.slr: record 7 (path c1/im05.jpg): ops[0] (decode_resize): " in msg, msg
    assert msg.endswith('to drop bad samples and go on: "on_error": "skip" in the spec, '
                        '.on_error("skip") in Python'), msg
    got = collect(ds.on_error("skip"))
    assert sum(len(b["label"]) for b in got) == 9
