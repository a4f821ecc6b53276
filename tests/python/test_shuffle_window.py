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
