"""sluice.torch.WeightedMix: a mixture of map-style Datasets for the drop-in
loader, with the schedules and stop rules of sluice.mix (docs/PYTHON.md,
"Mixtures"). A Dataset (torch's ConcatDataset of the inputs) and a Sampler
(``.sampler``) that yields indices of it:

    mix = WeightedMix([web, curated], [0.7, 0.3], seed=0)
    loader = sluice.torch.DataLoader(mix, sampler=mix.sampler, batch_size=256)

The sampler's order is a function of (seed, epoch) alone: DataLoader's
state_dict resumes it exactly, and set_epoch reaches it. Each input keeps
its own order (shuffled per pass when ``shuffle``) and runs out on its own;
with ``num_replicas`` > 1 each input is sharded first (rank r takes
positions r, r + W, ... of each pass, padded by wrapping as
DistributedSampler does) and every rank blends its slices by the same
schedule, so ranks are disjoint, equal and complete.
"""
import numpy as np
import torch
import torch.utils.data as _tud

from . import _sluice

_OP_SCHEDULE = 0x4D4958  # "MIX": the schedule's generator
_OP_ORDER = 0x4F524452   # "ORDR": an input's order in one pass
_STOPS = ("never", "first_exhausted", "all_exhausted")


def _rng(seed, epoch, index, op):
    return np.random.Generator(np.random.PCG64(_sluice.sample_seed(seed, epoch, index, op)))


def _exact(w, n, limit, quota, stop, rot):
    """Smooth weighted round robin over the inputs left (mix_schedule.c's
    "exact"): each position every input left earns its weight, the richest
    takes it and pays the total; ties to the first in the order rotated by
    `rot`."""
    k_n = len(w)
    credit = [0] * k_n
    count = [0] * k_n
    live = [True] * k_n
    for k in range(k_n):
        if (quota and quota[k] == 0) or (stop == "all_exhausted" and limit[k] == 0):
            live[k] = False
    out = []
    order = [(j + rot) % k_n for j in range(k_n)]
    while len(out) < n:
        total = 0
        for k in range(k_n):
            if live[k]:
                credit[k] += w[k]
                total += w[k]
        if total == 0:
            break
        best = -1
        for k in order:
            if live[k] and (best < 0 or credit[k] > credit[best]):
                best = k
        if stop == "first_exhausted" and count[best] >= limit[best]:
            break
        credit[best] -= total
        count[best] += 1
        out.append(best)
        if (quota and count[best] >= quota[best]) or \
                (stop == "all_exhausted" and count[best] >= limit[best]):
            live[best] = False
    return np.asarray(out, dtype=np.int64)


def _random(w, n, limit, quota, stop, rng):
    """Each position's input drawn with the weights (tf.data's
    sample_from_datasets): with counts, a random order of exactly quota[k]
    of each; a draw of an input that ran out is dropped (all_exhausted:
    the others share its weight) or ends the epoch (first_exhausted)."""
    k_n = len(w)
    if quota:
        return rng.permutation(np.repeat(np.arange(k_n), quota))[:n]
    p = np.asarray(w, dtype=np.float64) / float(sum(w))
    if stop == "never":
        return rng.choice(k_n, size=n, p=p)
    out, count = [], np.zeros(k_n, dtype=np.int64)
    while len(out) < n:
        for k in rng.choice(k_n, size=max(1024, n - len(out)), p=p).tolist():
            if count[k] >= limit[k]:
                if stop == "first_exhausted":
                    return np.asarray(out, dtype=np.int64)
                continue
            count[k] += 1
            out.append(k)
            if len(out) == n:
                break
    return np.asarray(out, dtype=np.int64)


class WeightedMixSampler(_tud.Sampler):
    """The indices (into WeightedMix's ConcatDataset) of one epoch of the
    blend on this rank; see WeightedMix."""

    def __init__(self, sizes, weights=None, *, seed=0, stop="never", schedule="random",
                 shuffle=True, num_replicas=1, rank=0):
        sizes = [int(s) for s in sizes]
        if not sizes:
            raise ValueError("datasets: give at least one Dataset")
        if stop not in _STOPS:
            raise ValueError(f"stop: expected one of {', '.join(_STOPS)}, got {stop!r}")
        if schedule not in ("random", "exact"):
            raise ValueError(f"schedule: expected 'random' or 'exact', got {schedule!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank: must be in [0, {num_replicas}), got {rank}")
        weights = [1.0] * len(sizes) if weights is None else list(weights)
        if len(weights) != len(sizes):
            raise ValueError(f"weights: {len(weights)} given for {len(sizes)} datasets")
        counts = [isinstance(w, dict) for w in weights]
        if any(counts) and not all(counts):
            raise ValueError("weights: give every input a share or every input "
                             "{\"samples\": N}, not both")
        self.quota = None
        if all(counts):
            self.quota = [-(-int(w["samples"]) // num_replicas) for w in weights]
            self.w = list(self.quota)
        else:
            if any(isinstance(w, bool) or not float(w) > 0 for w in weights):
                raise ValueError(f"weights: each must be > 0, got {weights!r}")
            total = float(sum(weights))
            self.w = [max(1, round(float(w) / total * (1 << 40))) for w in weights]
        self.sizes, self.seed, self.stop, self.schedule = sizes, seed, stop, schedule
        self.shuffle, self.world, self.rank = shuffle, num_replicas, rank
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.per_rank = [-(-s // num_replicas) for s in sizes]   # pad, as DistributedSampler
        if any(n == 0 for n in self.per_rank):
            raise ValueError("datasets: an input has no samples")
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def _len(self):
        if self.stop == "never":
            return sum(self.quota) if self.quota else sum(self.per_rank)
        return sum(min(q, n) for q, n in zip(self.quota or self.per_rank, self.per_rank))

    def schedule_of(self, epoch):
        """The input of every position of `epoch` on this rank."""
        n = self._len()
        if self.schedule == "exact":
            rot = _sluice.sample_seed(self.seed, epoch, 0, _OP_SCHEDULE) % len(self.w)
            return _exact(self.w, n, self.per_rank, self.quota, self.stop, rot)
        return _random(self.w, n, self.per_rank, self.quota, self.stop,
                       _rng(self.seed, epoch, 0, _OP_SCHEDULE))

    def _order(self, k, epoch, npass):
        """Input k's indices for this rank in pass `npass` of `epoch`."""
        size = self.sizes[k]
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(_sluice.sample_seed(self.seed, epoch, k * 1000003 + npass, _OP_ORDER)
                          & 0x7FFFFFFFFFFFFFFF)
            perm = torch.randperm(size, generator=g).numpy()
        else:
            perm = np.arange(size)
        need = self.per_rank[k] * self.world
        perm = np.resize(perm, need)   # pad by wrapping to the start
        return perm[self.rank::self.world]

    def indices(self, epoch):
        sched = self.schedule_of(epoch)
        out = np.empty(len(sched), dtype=np.int64)
        for k in range(len(self.sizes)):
            where = np.nonzero(sched == k)[0]
            if not len(where):
                continue
            npasses = -(-len(where) // self.per_rank[k])
            own = np.concatenate([self._order(k, epoch, p) for p in range(npasses)])
            out[where] = own[:len(where)] + self.offsets[k]
        return out

    def __iter__(self):
        return iter(self.indices(self.epoch).tolist())

    def __len__(self):
        if self.stop == "first_exhausted":
            return len(self.schedule_of(self.epoch))
        return self._len()


class WeightedMix(_tud.ConcatDataset):
    """A blend of map-style Datasets by weight, for sluice.torch.DataLoader
    (or torch's): this Dataset (their concatenation) with ``.sampler``, a
    WeightedMixSampler over it. ``weights``: shares (normalised) or
    ``{"samples": N}`` per input per epoch; ``schedule``: "random" or
    "exact"; ``stop``: "never", "first_exhausted" or "all_exhausted"; each
    as in sluice.mix. ``shuffle``: each input's order shuffled per pass.
    ``num_replicas``/``rank``: shard every input, then blend (default: one
    rank). ``source_of(i)`` says which input index i of the concatenation
    belongs to."""

    def __init__(self, datasets, weights=None, *, seed=0, stop="never", schedule="random",
                 shuffle=True, num_replicas=1, rank=0):
        datasets = list(datasets)
        super().__init__(datasets)
        self.sampler = WeightedMixSampler([len(d) for d in datasets], weights, seed=seed,
                                          stop=stop, schedule=schedule, shuffle=shuffle,
                                          num_replicas=num_replicas, rank=rank)

    def source_of(self, index):
        return int(np.searchsorted(self.sampler.offsets, index, side="right") - 1)
