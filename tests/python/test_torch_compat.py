"""sluice.torch's uses of torch's private names: all in one module
(python/sluice/_torch_compat.py), each where this torch has it. A torch
release that moves one fails test_torch_has_every_private_name_sluice_uses
with a message naming the name, what the loader uses it for and the file to
adapt."""
import glob
import os
import re

import numpy as np

import pytest

torch = pytest.importorskip("torch")

import sluice  # noqa: E402
from sluice import _torch_compat as compat  # noqa: E402

PKG = os.path.dirname(os.path.abspath(sluice.__file__))


def test_torch_has_every_private_name_sluice_uses():
    problems = compat.check()
    assert not problems, "\n".join(problems)


def test_a_moved_name_is_named_with_the_file_to_adapt(monkeypatch):
    from torch.utils.data._utils import worker
    monkeypatch.delattr(worker, "_generate_state")
    problems = compat.check()
    assert len(problems) == 1, problems
    msg = problems[0]
    assert "torch.utils.data._utils.worker._generate_state" in msg, msg
    assert torch.__version__ in msg and "numpy's seed of worker" in msg, msg
    assert "python/sluice/_torch_compat.py" in msg, msg
    with pytest.raises(compat.TorchMoved, match="_generate_state"):
        compat._lookup("torch.utils.data._utils.worker", "_generate_state")


def test_a_loader_attribute_gone_is_named(monkeypatch):
    # torch's DataLoader sets _index_sampler as a property: a release that
    # renames it must be caught by check(), not by a user's AttributeError.
    monkeypatch.delattr(torch.utils.data.DataLoader, "_index_sampler")
    problems = compat.check()
    assert any("torch.utils.data.DataLoader._index_sampler" in p for p in problems), problems


def test_the_thread_fields_come_together(monkeypatch):
    """torch 2.x's WorkerInfo thread fields (worker_method, rng) and _RNG:
    one without the others is a move."""
    from torch.utils.data._utils import worker
    fields = set(getattr(compat.WorkerInfo, "__dataclass_fields__", {}))
    if hasattr(worker, "_RNG"):
        assert {"worker_method", "rng"} <= fields
        monkeypatch.delattr(worker, "_RNG")
        assert any("_RNG" in p and "not" in p for p in compat.check()), compat.check()
    else:
        assert not {"worker_method", "rng"} & fields
        monkeypatch.setattr(worker, "_RNG", object, raising=False)
        assert any("_RNG" in p for p in compat.check()), compat.check()


# A private name of torch's: a dotted path through torch with a component
# that starts with "_" (torch._utils, torch.utils.data._utils), or one of the
# private attributes the loader reads off torch's objects.
PRIVATE_USE = re.compile(
    r"\btorch(\.[A-Za-z]\w*)*\.(_(?!_)\w+)|\b_(tworker|tud\._\w+)\b|"
    r"\.(" + "|".join(re.escape(n) for _, n, _, _ in compat.PRIVATE if n.startswith("_")) +
    r")\b")


def test_no_other_module_of_the_loader_uses_a_torch_private_name():
    files = sorted(glob.glob(os.path.join(PKG, "_torch_*.py")) + [os.path.join(PKG, "torch.py")])
    assert len(files) > 5, files
    found = []
    for f in files:
        if os.path.basename(f) == "_torch_compat.py":
            continue
        with open(f) as fh:
            for no, line in enumerate(fh, 1):
                code = line.split("#", 1)[0]
                hit = PRIVATE_USE.search(code)
                # sluice's own loader attributes (_sl_*) and torch's public
                # ones are not torch's private names.
                if hit and "_sl_" not in hit.group(0):
                    found.append(f"{os.path.basename(f)}:{no}: {line.strip()}")
    assert not found, ("torch private names outside _torch_compat.py (move them there):\n" +
                       "\n".join(found))


def test_the_guard_sees_a_private_use():
    for line in ("from torch.utils.data._utils.collate import x",
                 "w = torch._utils.ExceptionWrapper", "k = loader._dataset_kind",
                 "s = iter(loader._index_sampler)"):
        assert PRIVATE_USE.search(line), line
    for line in ("torch.utils.data.default_collate", "self._sl_seed", "torch.Tensor.__init__"):
        assert not PRIVATE_USE.search(line), line


@pytest.mark.skipif(compat.storage_use_count is None,
                    reason="this torch has no torch._C._storage_Use_Count (torch 1.x)")
def test_the_storage_use_count_counts_the_tensors_on_a_storage():
    """The batch memory's check for a kept fused output (_torch_collate)
    reads how many tensors share a storage: one more for each view or numpy
    array alive, back when they go."""
    t = torch.from_numpy(np.empty((4, 3), np.float32))
    base = compat.storage_uses(t)
    v = t[1]
    a = t[2].numpy()
    assert compat.storage_uses(t) == base + 2, (
        f"torch {torch.__version__}: torch._C._storage_Use_Count no longer counts a storage's "
        f"tensors; python/sluice/_torch_compat.py (storage_uses) is the one place to adapt")
    del v, a
    assert compat.storage_uses(t) == base
