"""sluice.torch's default_collate into reused batch memory
(python/sluice/_torch_collate.py): the batches equal torch's
default_collate's, bit for bit, in type, shape, dtype, layout and values,
whatever the samples hold; the memory of a batch is reused only once no
tensor reaches it; and the loader hands out torch's batches through it."""
import collections
import gc
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sluice.torch as st  # noqa: E402
from sluice import _torch_collate as C  # noqa: E402
from sluice import _torch_compat as compat  # noqa: E402
import torch.utils.data as tud  # noqa: E402

pytestmark = pytest.mark.skipif(C.pooled_collate(2) is None,
                                reason="this torch or interpreter has no pooled collation")

Pair = collections.namedtuple("Pair", "image label")
BIG = (3, 64, 64)       # 48 KB of float32 a sample: 32 of them pass MIN_BYTES


def same(a, b, where="batch"):
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.shape == b.shape and a.dtype == b.dtype, where
        assert a.is_contiguous() == b.is_contiguous(), where
        assert a.stride() == b.stride(), where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{k}]")
    else:
        assert a == b, where


def streamed(samples, keep=3, pc=None):
    pc = pc or C.pooled_collate(keep)
    s = pc.stream(len(samples))
    for x in samples:
        s.add(x)
    return s.collate()


def images(n, seed=0, shape=BIG, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(shape, generator=g).to(dtype) for _ in range(n)]


class Plain(torch.Tensor):
    """Stacks (as every torch function) to a plain tensor of its values."""
    __torch_function__ = torch._C._disabled_torch_function_impl


class Wraps(torch.Tensor):
    """torch's default __torch_function__: results stay this class (as
    torchvision's tv_tensors in their "TVTensor" return type)."""


class Shifted(torch.Tensor):
    """Stacks to a plain tensor, but not of its values."""
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = torch._C._disabled_torch_function_impl(func, types, args, kwargs or {})
        return out + 1 if func is torch.stack else out


def as_(cls, xs, meta=None):
    out = []
    for i, x in enumerate(xs):
        t = x.as_subclass(cls)
        if meta is not None and i >= meta:
            t.meta = i          # an instance attribute: not the plain stack's
        out.append(t)
    return out


SAMPLES = {
    "tensor": lambda: images(32),
    "tuple": lambda: [(x, i) for i, x in enumerate(images(32))],
    "list": lambda: [[x, float(i), "s"] for i, x in enumerate(images(32))],
    "namedtuple": lambda: [Pair(x, i) for i, x in enumerate(images(32))],
    "dict": lambda: [{"image": x, "label": torch.tensor(i), "name": f"n{i}"}
                     for i, x in enumerate(images(32))],
    "two_tensors": lambda: [(x, y) for x, y in zip(images(32), images(32, seed=1))],
    "uint8": lambda: [(x, 1) for x in images(32, dtype=torch.uint8)],
    "permuted_hwc": lambda: [(x.permute(1, 2, 0), 1) for x in images(32)],
    "channels_last_4d": lambda: [x.unsqueeze(0).contiguous(memory_format=torch.channels_last)
                                 for x in images(32)],
    "small": lambda: [(torch.ones(4) * i, i) for i in range(32)],
    "mixed_shapes": lambda: images(5) + images(1, shape=(3, 60, 64)) + images(26),
    "mixed_dtypes": lambda: images(5) + images(1, dtype=torch.float64) + images(26),
    "tensor_then_int": lambda: [(x, 1) for x in images(7)] + [(1, 1)] + [(x, 1) for x in images(24)],
    "requires_grad": lambda: [x.requires_grad_() if i == 9 else x
                              for i, x in enumerate(images(32))],
    "numpy": lambda: [(x.numpy(), 1) for x in images(32)],
    "short_tuple": lambda: [(x, 1) for x in images(10)] + [(images(1)[0],)]
    + [(x, 1) for x in images(21)],
    "dict_missing_key": lambda: [{"a": x} for x in images(3)] + [{"b": images(1)[0]}],
    "subclass": lambda: [torch.nn.Parameter(x, requires_grad=False) for x in images(32)],
    "subclass_plain": lambda: [(x, 1) for x in as_(Plain, images(32))],
    "subclass_wraps": lambda: [(x, 1) for x in as_(Wraps, images(32))],
    "subclass_shifted": lambda: as_(Shifted, images(32)),
    "subclass_with_attributes": lambda: as_(Plain, images(32), meta=0),
    "subclass_attributes_later": lambda: as_(Plain, images(32), meta=7),
    "subclass_then_plain": lambda: as_(Plain, images(9)) + images(23),
    "plain_then_subclass": lambda: images(9) + as_(Plain, images(23)),
    "subclass_then_wraps": lambda: as_(Plain, images(9)) + as_(Wraps, images(23)),
    "subclass_mixed_shapes": lambda: as_(Plain, images(5) + images(1, shape=(3, 60, 64))
                                         + images(26)),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_batches_equal_default_collate(name):
    samples = SAMPLES[name]()
    try:
        want = compat.default_collate(samples)
    except Exception as e:
        with pytest.raises(type(e)) as got:
            streamed(SAMPLES[name]())
        assert str(got.value) == str(e)
        with pytest.raises(type(e)) as got:
            C.pooled_collate(3)(SAMPLES[name]())
        assert str(got.value) == str(e)
        return
    same(streamed(SAMPLES[name]()), want)
    same(C.pooled_collate(3)(SAMPLES[name]()), want)


@pytest.mark.parametrize("cls,pooled", [(Plain, True), (Wraps, False), (Shifted, False)])
def test_subclass_samples_pooled_only_where_torch_stacks_them_plain(cls, pooled):
    """A subclass's samples go into the pooled batch as they arrive only where
    torch's stack of them is the plain stack of their values; the batches
    equal torch's either way."""
    pc = C.pooled_collate(2)
    for seed in range(3):
        samples = as_(cls, images(32, seed=seed))
        want = compat.default_collate(as_(cls, images(32, seed=seed)))
        got = streamed(samples, pc=pc)
        same(got, want)
        del got
    assert (pc.pool.made + pc.pool.reused == 3) if pooled else pc.pool.made == 0


def test_tv_tensors_images_are_pooled_and_equal_torchs():
    """torchvision v2's ToImage() output (tv_tensors.Image) stacks to a plain
    tensor by default, and to an Image under set_return_type("TVTensor"):
    the batches equal torch's in both, pooled in the first only."""
    tv_tensors = pytest.importorskip("torchvision.tv_tensors")

    def samples(seed):
        return [(tv_tensors.Image(x), i) for i, x in enumerate(images(32, seed=seed))]
    pc = C.pooled_collate(2)
    same(streamed(samples(0), pc=pc), compat.default_collate(samples(0)))
    assert pc.pool.made == 1
    with tv_tensors.set_return_type("TVTensor"):
        want = compat.default_collate(samples(1))
        assert type(want[0]) is tv_tensors.Image
        same(streamed(samples(1), pc=pc), want)
    assert pc.pool.made + pc.pool.reused == 1


def test_a_shared_pool_lets_its_memory_go_when_its_last_user_leaves():
    pool = C.BatchPool(4)
    a, b = C.pooled_collate(4, pool), C.pooled_collate(4, pool)
    x = streamed(images(32, seed=1), pc=a)
    y = streamed(images(32, seed=2), pc=b)
    assert pool.made == 2 and pool.users == 2
    del y
    pool.detach()                       # one worker leaves: the other reuses
    z = streamed(images(32, seed=3), pc=a)
    assert pool.reused == 1 and len(pool.slots) == 2
    pool.detach()                       # the last one: nothing kept unused
    assert pool.slots == []
    same(x, torch.stack(images(32, seed=1)))      # batches alive stay whole
    same(z, torch.stack(images(32, seed=3)))


def test_fewer_samples_than_announced_collate_as_torch():
    samples = images(20)
    pc = C.pooled_collate(2)
    s = pc.stream(32)
    for x in samples:
        s.add(x)
    same(s.collate(), compat.default_collate(samples))


def test_memory_reused_only_when_no_tensor_reaches_it():
    pc = C.pooled_collate(2)
    a = streamed(images(32, seed=1), pc=pc)
    a_ptr = a.data_ptr()
    view = a[3:5]                       # a view keeps the memory
    del a
    gc.collect()
    b = streamed(images(32, seed=2), pc=pc)
    assert b.data_ptr() != a_ptr
    assert torch.equal(view, torch.stack(images(32, seed=1))[3:5])
    arr = b.numpy()                     # so does a numpy array made from it
    b_ptr = b.data_ptr()
    del b
    c = streamed(images(32, seed=3), pc=pc)   # both held: torch's memory
    assert c.data_ptr() not in (a_ptr, b_ptr)
    assert pc.pool.made == 2
    assert np.array_equal(arr, torch.stack(images(32, seed=2)).numpy())
    del view, arr, c
    d = streamed(images(32, seed=4), pc=pc)
    assert d.data_ptr() in (a_ptr, b_ptr)
    assert pc.pool.reused == 1
    same(d, torch.stack(images(32, seed=4)))


def test_a_failed_batch_frees_its_memory():
    pc = C.pooled_collate(1)
    s = pc.stream(32)
    for x in images(5):
        s.add(x)
    del s                               # __getitem__ raised: the batch is dropped
    a = streamed(images(32), pc=pc)
    assert pc.pool.made == 1 and pc.pool.reused == 1
    same(a, torch.stack(images(32)))


class Images(tud.Dataset):
    def __init__(self, shape=BIG, n=1000, leaf=torch.Tensor):
        self.shape, self.n, self.leaf = shape, n, leaf

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.rand(self.shape, generator=g).as_subclass(self.leaf)
        return {"image": x, "label": i, "name": str(i)}


def pools():
    return [p for p in gc.get_objects() if type(p) is C.BatchPool]


@pytest.mark.parametrize("leaf", [torch.Tensor, Plain])
@pytest.mark.parametrize("gil", [False, True])
@pytest.mark.parametrize("worker_type,num_workers", [("thread", 0), ("thread", 2),
                                                      ("process", 2)])
def test_loader_batches_equal_torch_pooled_without_the_gil(monkeypatch, worker_type,
                                                           num_workers, gil, leaf):
    """Batches equal torch's either way; the memory is pooled only where the
    interpreter runs without the GIL (forced here both ways), for plain
    tensors and a subclass that stacks to one (torchvision's ToImage())."""
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: gil, raising=False)
    kw = dict(batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(5))
    want = list(tud.DataLoader(Images(leaf=leaf), **kw))
    kw["generator"] = torch.Generator().manual_seed(5)
    gc.collect()
    before = set(map(id, pools()))
    dl = st.DataLoader(Images(leaf=leaf), num_workers=num_workers, worker_type=worker_type,
                       persistent_workers=num_workers > 0, **kw)
    n = 0
    for got, w in zip(dl, want):
        same(got, w)
        n += 1
    assert n == len(want)
    if worker_type == "process":
        return              # the pools live in the worker processes
    mine = [p for p in pools() if id(p) not in before]
    if gil:
        # With the GIL a worker's first batch goes through the pool; none of
        # its samples was written in place (no sluice.transforms here), so
        # the worker goes back to torch's collation for the rest.
        assert sum(p.made + p.reused for p in mine) <= max(1, num_workers)
        # and lets the pool's memory go (none kept unused)
        assert all(not p.slots for p in mine)
    else:
        # Each worker made a few batches' memory and reused it for the rest
        # (32 batches, the last one short).
        assert mine and sum(p.reused for p in mine) > 0
        assert all(len(p.slots) <= p.keep for p in mine)
        assert sum(p.made + p.reused for p in mine) == n


@pytest.mark.parametrize("leaf", [torch.Tensor, Plain])
def test_thread_workers_share_one_pool_and_never_write_a_held_batch(monkeypatch, leaf):
    """A loader's thread workers stack into one pool (prefetch_factor
    batches a worker and the consumer's two); batches the training loop
    keeps past their step are never written, whichever worker reuses
    memory. Three epochs, a third of the batches kept to the epoch's end."""
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    # the same shuffled order every epoch
    kw = dict(batch_size=32,
              sampler=torch.randperm(640, generator=torch.Generator().manual_seed(7)).tolist())
    want = list(tud.DataLoader(Images(n=640, leaf=leaf), **kw))
    gc.collect()
    before = set(map(id, pools()))
    dl = st.DataLoader(Images(n=640, leaf=leaf), num_workers=3, worker_type="thread",
                       persistent_workers=True, **kw)
    for epoch in range(3):
        kept = []
        for j, b in enumerate(dl):
            same(b, want[j], f"epoch {epoch} batch {j}")
            if j % 3 == 0:
                kept.append((j, b))
            del b
        for j, b in kept:
            same(b, want[j], f"epoch {epoch} batch {j}, kept")
    mine = [p for p in pools() if id(p) not in before]
    assert len(mine) == 1, "one pool for the loader's thread workers"
    pool = mine[0]
    assert pool.keep == 3 * 2 + 2 and len(pool.slots) <= pool.keep
    assert pool.reused > 0


def test_what_differs_from_torch():
    """docs/PYTHON.md, "Batch memory": a pooled batch cannot be resized
    larger; a tensor is read when __getitem__ returns it."""
    pc = C.pooled_collate(2)
    buf = torch.zeros(BIG)
    s = pc.stream(32)
    for i in range(32):
        buf.fill_(i)                    # the Dataset writes into what it returned
        s.add(buf)
    b = s.collate()
    assert [float(b[i, 0, 0, 0]) for i in range(32)] == [float(i) for i in range(32)]
    with pytest.raises(RuntimeError):
        b.resize_(64, *BIG)
    b.resize_(16, *BIG)                 # smaller: allowed, as for any tensor
    assert b.shape == (16,) + BIG


# ---- sluice.transforms writing straight into the batch (_Stream.offer) -------------------

needs_use_count = pytest.mark.skipif(
    compat.storage_use_count is None,
    reason="this torch has no storage use count (torch._C._storage_Use_Count, torch >= 2.0): "
           "sluice.torch offers no batch rows to sluice.transforms here")


class Encoded(tud.Dataset):
    """JPEGs through a fused sluice.transforms Compose; `how` says what
    __getitem__ does with the transform's outputs."""

    def __init__(self, how="plain", n=40):
        import ops_ref_lib as R
        from PIL import Image
        import sluice.transforms as T
        self.data = [R.jpeg_bytes(Image.fromarray(R.natural_image(120 + i % 7, 90, i)),
                                  quality=90) for i in range(n)]
        self.pil = [Image.open(__import__("io").BytesIO(d)).convert("RGB") for d in self.data]
        self.how = how
        self.kept = []
        self.tf = T.Compose([T.DecodeJPEG(), T.Resize(64), T.CenterCrop(56),
                             T.ToDtype(torch.float32, scale=True),
                             T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        self.tail = T.Compose([T.CenterCrop(56), T.ToImage(), T.ToDtype(torch.float32, scale=True),
                               T.Normalize([0.5], [0.25])])

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        how, tf, d = self.how, self.tf, self.data[i]
        if how == "plain":
            return tf(d), i
        if how == "tail":           # a PIL image: the fused float tail
            return self.tail(self.pil[i]), i
        if how == "second":         # two outputs; the second returned
            tf(self.data[(i + 1) % len(self.data)])
            return tf(d), i
        if how == "first":          # two outputs; the first returned
            x = tf(d)
            tf(self.data[(i + 1) % len(self.data)])
            return x, i
        if how == "changed":        # returned changed in place
            return tf(d).mul_(2), i
        if how == "clone":
            return tf(d).clone(), i
        if how == "transposed":     # a view of the row, other strides
            return tf(d).transpose(1, 2), i
        if how == "transposed_":    # the offered row itself, transposed in place
            return tf(d).transpose_(1, 2), i
        if how == "kept":           # the output kept past __getitem__ (a cache)
            x = tf(d)
            self.kept.append((i, x))
            return x, i
        if how == "kept_view":      # a numpy view of one channel kept
            x = tf(d)
            self.kept.append((i, x[1].numpy()))
            return x, i
        raise ValueError(how)


@pytest.mark.parametrize("gil", [False, True])
@pytest.mark.parametrize("how", ["kept", "kept_view", "plain"])
def test_a_kept_output_shares_nothing_with_the_batch(monkeypatch, how, gil):
    """A Dataset that keeps its fused output (or a view of it) past
    __getitem__ gets torch's semantics: the batch it hands over is the
    consumer's own, so changing the batch in place leaves what the Dataset
    kept untouched, as with torch's DataLoader (the batch is then a copy)."""
    import sluice.transforms  # noqa: F401  (the offers need it imported)
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: gil, raising=False)
    ds = Encoded(how)
    want = {int(i): x for b in tud.DataLoader(ds, batch_size=8) for x, i in zip(*b)}
    for workers in (0, 2):
        ds.kept.clear()
        dl = st.DataLoader(ds, batch_size=8, shuffle=False, num_workers=workers,
                           worker_type="thread")
        n = 0
        for images, labels in dl:
            for x, i in zip(images, labels):
                assert torch.equal(x, want[int(i)])
            images.zero_()              # a training loop changing its batch
            n += len(labels)
        assert n == len(ds)
        assert len(ds.kept) == (len(ds) if how != "plain" else 0)
        for i, x in ds.kept:
            ref = want[i] if how == "kept" else want[i][1].numpy()
            assert (x == ref).all(), f"sample {i}: what the Dataset kept was changed"
        del dl


@needs_use_count
@pytest.mark.parametrize("gil", [False, True])
@pytest.mark.parametrize("how", ["plain", "tail", "second", "first", "changed", "clone",
                                 "transposed", "transposed_", "kept"])
def test_transforms_write_into_the_batch(monkeypatch, how, gil):
    """sluice.transforms' fused outputs go straight into the batch (no
    copy): the batches equal torch's DataLoader's on the same Dataset,
    whatever __getitem__ does with the outputs, and the pool stays on
    with the GIL only while samples are written in place."""
    import sluice.transforms as T
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: gil, raising=False)
    taken = []
    real = T._float_out

    def counted(c, h, w):
        row = getattr(T._offered, "row", None)
        out = real(c, h, w)
        taken.append(row is not None and out is row)
        return out
    monkeypatch.setattr(T, "_float_out", counted)
    ds = Encoded(how)
    want = list(tud.DataLoader(ds, batch_size=8, shuffle=False))
    taken.clear()
    for workers in (0, 2):
        dl = st.DataLoader(ds, batch_size=8, shuffle=False, num_workers=workers,
                           worker_type="thread")
        n = 0
        for g, w in zip(dl, want):      # each batch let go: its memory is reused
            same(g, w)
            n += 1
        assert n == len(want)
    assert any(taken), "no output was written into a batch"
    assert getattr(T._offered, "row", None) is None
    # 2 runs of 5 batches (8 samples), by 1 worker then 2: every sample is
    # offered its row but the first of a worker's first batch (the shape is
    # not known yet). Where the returned sample is not the one written in
    # place ("second", "clone"), the GIL build goes back to torch's
    # collation after each worker's first batch.
    in_place = how not in ("second", "clone", "transposed", "transposed_")
    if how == "kept":
        # every batch copied out, its pooled memory held by what the
        # Dataset kept: once the pool has none free, torch allocates
        return
    assert sum(taken) == (2 * 5 * 8 - 3 if in_place or not gil else 3 * 7), taken


@needs_use_count
def test_an_offer_not_taken_is_withdrawn(monkeypatch):
    """A row offered to a __getitem__ that made no fused output (or raised)
    is not seen by the next __getitem__ of the thread."""
    import sluice.transforms as T
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    seen = []

    class Mixed(tud.Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            seen.append(getattr(T._offered, "row", None) is not None)
            if i == 5:
                raise KeyError("bad sample 5")
            return torch.full((3, 64, 64), float(i)), i
    dl = st.DataLoader(Mixed(), batch_size=8, num_workers=0)
    with pytest.raises(KeyError, match="bad sample 5"):
        list(dl)
    assert any(seen[1:5])                   # offered inside the batch
    assert getattr(T._offered, "row", None) is None
