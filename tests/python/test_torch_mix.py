"""sluice.torch.WeightedMix: the mixture for the drop-in loader — proportions,
the exact schedule's windows, stop rules, counts, upsampling, ranks, the same
batches as torch's own DataLoader over the same sampler, and an exact
mid-epoch resume through DataLoader.state_dict.

Run: PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python/test_torch_mix.py
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import sluice.torch as st  # noqa: E402


class Tagged(tud.Dataset):
    """Item i of input `tag`: tensor [tag, i]."""

    def __init__(self, tag, n):
        self.tag, self.n = tag, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return torch.tensor([self.tag, i])


def items(mix, epoch=0):
    mix.sampler.set_epoch(epoch)
    return [tuple(mix[i].tolist()) for i in mix.sampler]


def test_random_proportions_within_binomial_bounds():
    mix = st.WeightedMix([Tagged(0, 400000), Tagged(1, 400000), Tagged(2, 200000)],
                         [0.5, 0.3, 0.2], seed=3)
    sched = mix.sampler.schedule_of(0)
    n = len(sched)
    assert n == 10 ** 6
    counts = np.bincount(sched, minlength=3)
    for k, p in enumerate((0.5, 0.3, 0.2)):
        assert abs(counts[k] - n * p) < 5 * math.sqrt(n * p * (1 - p)), counts


def test_exact_within_one_over_every_window():
    mix = st.WeightedMix([Tagged(0, 3000), Tagged(1, 2000), Tagged(2, 50)], [0.6, 0.3, 0.1],
                         schedule="exact", seed=1)
    sched = mix.sampler.schedule_of(2)
    for k, share in enumerate((0.6, 0.3, 0.1)):
        pre = np.concatenate([[0], np.cumsum(sched == k)])
        for n in (1, 2, 3, 10, 33, 100, 1000):
            got = pre[n:] - pre[:-n]
            assert math.floor(n * share) - 1 <= got.min() and got.max() <= math.ceil(n * share) + 1


@pytest.mark.parametrize("schedule", ["random", "exact"])
def test_stop_rules_counts_upsampling(schedule):
    def mk(**kw):
        return st.WeightedMix([Tagged(0, 10000), Tagged(1, 10)], [0.5, 0.5], seed=2,
                              schedule=schedule, **kw)
    got = items(mk())
    assert len(got) == 10010
    small = [i for t, i in got if t == 1]
    assert len(small) > 4000
    assert all(sorted(small[j:j + 10]) == list(range(10)) for j in range(0, len(small) - 9, 10))
    first = items(mk(stop="first_exhausted"))
    assert sum(1 for t, _ in first if t == 1) == 10 and len(first) < 60
    every = items(mk(stop="all_exhausted"))
    assert sorted(every) == sorted([(0, i) for i in range(10000)] + [(1, i) for i in range(10)])
    counted = st.WeightedMix([Tagged(0, 10000), Tagged(1, 10)], [{"samples": 700},
                                                                {"samples": 30}], seed=2,
                             schedule=schedule)
    got = items(counted)
    assert len(got) == 730 and sum(1 for t, _ in got if t == 1) == 30


def test_ranks_disjoint_equal_complete():
    world = 4
    per = [items(st.WeightedMix([Tagged(0, 1000), Tagged(1, 300)], [0.7, 0.3], seed=5,
                                stop="all_exhausted", num_replicas=world, rank=r))
           for r in range(world)]
    assert len({len(p) for p in per}) == 1
    sets = [set(p) for p in per]
    assert all(not (sets[a] & sets[b]) for a in range(world) for b in range(a + 1, world))
    assert set().union(*sets) == {(0, i) for i in range(1000)} | {(1, i) for i in range(300)}


def test_same_batches_as_torch_and_exact_resume():
    def loader(cls, **kw):
        mix = st.WeightedMix([Tagged(0, 500), Tagged(1, 37), Tagged(2, 200)], [0.5, 0.2, 0.3],
                             seed=7)
        return cls(mix, sampler=mix.sampler, batch_size=16, **kw)
    want = [b.tolist() for b in loader(tud.DataLoader)]
    assert [b.tolist() for b in loader(st.DataLoader, num_workers=2, worker_type="thread")] == want
    dl = loader(st.DataLoader, num_workers=2, worker_type="thread")
    it = iter(dl)
    head = [next(it).tolist() for _ in range(13)]
    state = dl.state_dict()
    del it
    again = loader(st.DataLoader, num_workers=3, worker_type="thread")
    again.load_state_dict(state)
    assert head + [b.tolist() for b in again] == want
    # another epoch: another blend, the same on every loader
    dl.set_epoch(1)
    e1 = [b.tolist() for b in dl]
    assert e1 != want
    other = loader(st.DataLoader)
    other.set_epoch(1)
    assert [b.tolist() for b in other] == e1
