"""The windowed shuffle from Python: rank properties, exact resume through
state_dict, thread counts, the spec it writes."""
import json

import numpy as np
import pytest

import sluice
from conftest import image_of, write_slr


@pytest.fixture
def slr(tmp_path):
    return write_slr(tmp_path / "w.slr", 100)


def ids(batches):
    """Record index of each sample: image_of(i)[0, 0] = 13 i mod 251."""
    first = {int(image_of(i)[0, 0]): i for i in range(100)}
    return [first[int(v)] for b in batches for v in np.asarray(b["image"])[:, 0, 0]]


def window(slr, parallel=None):
    return sluice.records(slr, parallel=parallel).shuffle(seed=4, mode="window", window=16,
                                                          block=4)


def test_window_ranks_disjoint_complete_equal(slr):
    seen = []
    for rank in range(3):
        ds = window(slr).shard(rank=rank, world_size=3).batch(5)
        ds.set_epoch(1)
        seen.append(ids(ds.numpy()))
    assert [len(s) for s in seen] == [34, 34, 34]  # pad: ceil(100 / 3)
    flat = [i for s in seen for i in s]
    assert set(flat) == set(range(100))
    assert len(flat) - len(set(flat)) == 2  # only the padding repeats
    assert seen[0] != sorted(seen[0])  # shuffled


def test_window_resume_and_threads(slr):
    make = lambda threads: window(slr, threads).shard(rank=1, world_size=2).batch(4)  # noqa: E731
    ds = make(1)
    ds.set_epoch(2)
    full = ids(ds.numpy())
    ds4 = make(4)
    ds4.set_epoch(2)
    assert ids(ds4.numpy()) == full
    ds2 = make(1)
    ds2.set_epoch(2)
    it = iter(ds2.numpy())
    head = ids([next(it) for _ in range(5)])
    state = ds2.state_dict()
    ds2.close()
    ds3 = make(1)
    ds3.load_state_dict(state)
    assert head + ids(ds3.numpy()) == full


def test_window_differs_from_global_and_by_epoch(slr):
    g = sluice.records(slr).shuffle(seed=4, mode="global").batch(100)
    w = window(slr).batch(100)
    assert ids(g.numpy()) != ids(w.numpy())
    w.set_epoch(0)
    e0 = ids(w.numpy())
    w.set_epoch(1)
    assert ids(w.numpy()) != e0
    # auto (the default) is global at this size: the same order as mode="global"
    a = sluice.records(slr).shuffle(seed=4).batch(100)
    g.set_epoch(0)
    assert ids(a.numpy()) == ids(g.numpy())


def test_shuffle_arguments(slr):
    spec = json.loads(window(slr).to_json())
    assert spec["source"]["shuffle"] == {"mode": "window", "window": 16, "block": 4}
    with pytest.raises(ValueError, match="mode"):
        sluice.records(slr).shuffle(mode="local")
    with pytest.raises(ValueError, match="buffer_size"):
        sluice.records(slr).shuffle(buffer_size=8, mode="window")
    with pytest.raises(ValueError, match="window"):
        sluice.records(slr).shuffle(window=0)


def test_synthetic_source_values():
    ds = sluice.synthetic(1000, shards=7, bytes=24).batch(1000)
    (b,) = list(ds.numpy())
    idx = np.asarray(b["index"])
    np.testing.assert_array_equal(idx, np.arange(1000))
    np.testing.assert_array_equal(np.asarray(b["shard"]), idx * 7 // 1000)
    pay = np.asarray(b["payload"])
    assert pay.shape == (1000, 24) and pay.dtype == np.uint8
    np.testing.assert_array_equal(pay[:, :8].copy().view("<u8")[:, 0], idx)
    assert len(np.unique(pay[:, 8:16].copy().view("<u8"))) == 1000
    with pytest.raises(sluice.InvalidError, match="synthetic.record"):
        list(sluice.from_spec({"source": {"synthetic": {"record": 5}}, "ops": []}).numpy())
    with pytest.raises(ValueError, match="bytes"):
        sluice.synthetic(10, bytes=4)


@pytest.mark.parametrize("equal", ["pad", "drop", "none"])
def test_window_ranks_at_scale_with_synthetic(equal):
    n, world = 100_003, 8
    seen, sizes = [], []
    for rank in range(world):
        ds = sluice.from_spec({
            "source": {"synthetic": {"records": n, "shards": 37},
                       "shuffle": {"mode": "window", "window": 4096},
                       "shard": {"index": rank, "count": world, "equal": equal}},
            "seed": 2, "ops": [{"op": "batch", "size": 1000}]})
        got = np.concatenate([np.asarray(b["index"]) for b in ds.numpy()])
        seen.append(got)
        sizes.append(len(got))
    flat = np.concatenate(seen)
    if equal == "pad":
        assert sizes == [-(-n // world)] * world
        assert len(np.unique(flat)) == n
    elif equal == "drop":
        assert sizes == [n // world] * world
        assert len(np.unique(flat)) == len(flat)
    else:
        assert sum(sizes) == n and max(sizes) - min(sizes) <= 1
        np.testing.assert_array_equal(np.sort(flat), np.arange(n))


def test_window_batch_reads_few_blocks():
    # 4,096 positions from a rank's span start (not window-aligned) cover at
    # most two windows, each of at most 4096 / 64 + 2 blocks of 64 records
    ds = (sluice.synthetic(100_003, shards=37).shuffle(seed=2, mode="window", window=4096)
          .shard(rank=3, world_size=8).batch(4096))
    first = np.asarray(next(iter(ds.numpy()))["index"])
    assert len(np.unique(first // 64)) <= 2 * (4096 // 64 + 2)
    assert len(np.unique(first)) == 4096


def test_window_repeat_passes_are_fresh_permutations():
    ds = (sluice.synthetic(1000, shards=10).shuffle(seed=1, mode="window", window=64, block=8)
          .op("repeat", count=2).batch(2000))
    (b,) = list(ds.numpy())
    idx = np.asarray(b["index"])
    assert len(idx) == 2000
    first, second = idx[:1000], idx[1000:]
    np.testing.assert_array_equal(np.sort(first), np.arange(1000))
    np.testing.assert_array_equal(np.sort(second), np.arange(1000))
    assert not np.array_equal(first, second)
