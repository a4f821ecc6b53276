"""bench/threads_vs_processes.py keeps its contract: one JSON object per run
with exactly the documented keys, every loader of a work, what the
interpreter is, and a plot from its own rows and from saved ones. Runs for a
fraction of a second on a few generated photos; nothing is downloaded. The
torchvision.transforms.v2 works need torchvision >= 0.16 (the venvs of
scripts/pythons.sh; Debian's 0.14 has no v2): elsewhere only pure_python and
native run."""
import importlib
import json
import os
import re
import subprocess
import sys
import sysconfig

import pytest

from conftest import REPO
from test_peers_harness import photos

BENCH = os.path.join(REPO, "bench", "threads_vs_processes.py")
KEYS = ["python", "gil", "torch", "work", "loader", "worker_type", "workers", "samples_per_s",
        "peak_rss_mb", "first_batch_s"]

torch = pytest.importorskip("torch")


def have_v2():
    try:
        import torchvision.transforms.v2  # noqa: F401
        return True
    except ImportError:
        return False


def run(tmp_path, *args):
    r = subprocess.run([sys.executable, BENCH, "--photos", str(photos(tmp_path / "photos")),
                        "--json", "--seconds", "0.3", "--repeats", "1", "--limit", "16",
                        "--batch", "4", "--cache", str(tmp_path / "cache"), *args],
                       capture_output=True, text=True, timeout=900)
    rows = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
    return r, rows


def have(mod):
    try:
        importlib.import_module(mod)
        return True
    except ImportError:
        return False


PEERS = {"spdl": "spdl.pipeline", "torchdata": "torchdata.nodes", "grain": "grain"}


def test_rows_keep_the_contract(tmp_path):
    """Every loader of every work, the thread peers (spdl, torchdata, grain)
    on the Python works they are measured on: a row each, with figures when
    the peer imports here, else null figures and the reason on stderr (not a
    failure). sluice_transforms runs where sluice.transforms is built."""
    # (c_work runs fixed's code after its C work: fixed is not run again)
    works = "pure_python,native,c_work" + (",pillow,decode_jpeg" if have_v2() else "")
    if have("sluice.transforms"):
        works += ",sluice_transforms"
    r, rows = run(tmp_path, "--works", works)
    assert r.returncode == 0, r.stderr[-3000:]
    tag = f"{sys.version_info.major}.{sys.version_info.minor}"
    tag += "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    want = []
    for w in works.split(","):
        if w == "native":
            want += [("sluice", "native", n) for n in (1, 2, 3)]
        else:
            want += ([("torch", "process", n) for n in (0, 1, 2, 3)] +
                     [("sluice", "thread", n) for n in (1, 2, 3)] +
                     [("sluice", "process", 2), ("sluice", "auto", 2)])
            if w in ("pure_python", "pillow", "sluice_transforms"):
                want += [("spdl", "thread", 2), ("torchdata", "thread", 2),
                         ("grain", "thread", 2), ("grain", "thread", 16)]
            if w in ("pure_python", "pillow", "sluice_transforms", "fixed", "c_work"):
                want += [("ceiling", "core", 2), ("threads", "plain", 2)]
    assert [(x["loader"], x["worker_type"], x["workers"]) for x in rows] == want
    for x in rows:
        assert list(x) == KEYS, x
        assert x["python"] == tag
        if x["loader"] in PEERS and not have(PEERS[x["loader"]]):
            assert x["samples_per_s"] is None and x["gil"] is None, x
            assert f"{x['work']} {x['loader']}({x['workers']}) not run: {x['loader']}: not " \
                f"importable here" in r.stderr and "setup.sh" in r.stderr, r.stderr[-2000:]
            continue
        assert x["torch"] == torch.__version__
        assert isinstance(x["gil"], bool)
        if not sysconfig.get_config_var("Py_GIL_DISABLED"):
            assert x["gil"] is True
        assert isinstance(x["samples_per_s"], float) and x["samples_per_s"] > 0, x
        assert x["peak_rss_mb"] > 50 and 0 < x["first_batch_s"] < 300, x
    # round lines on stderr: what auto chose
    assert "sluice-auto(2)" in r.stderr and "ran " in r.stderr
    # the ceiling's round lines: the Dataset's CPU time a sample, the cores it is scaled to
    assert re.search(r"pure_python ceiling\(2\): [0-9.]+ samples/s, .* [0-9.]+ ms of CPU a "
                     r"sample, [12] cores", r.stderr), r.stderr[-2000:]


def test_thread_peer_batches_are_the_works(tmp_path):
    """The thread peers hand out the work's batches: every sample of an epoch
    once (pure_python's rows are a function of the file), in batches of the
    asked size and one short one."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("tvp", BENCH)
    tvp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tvp)
    items = tvp.subset(str(photos(tmp_path / "photos", n=12)), 0)
    ds = tvp.PurePython(items)
    ref = sorted(tuple(ds[i][0].tolist()) for i in range(len(ds)))
    ran = 0
    for name, mod in PEERS.items():
        if not have(mod):
            continue
        epochs, threads, note = tvp.peers.thread_peer_epochs(name, ds, 5, 2, shuffle=True)
        batches = list(epochs(0))
        # (in any order: torchdata's rows run with in_order=False, as its docs
        # advise for throughput, so the short batch may come before a full one)
        assert sorted(len(b[0]) for b in batches) == [2, 5, 5], (name, note)
        got = sorted(tuple(row.tolist()) for b in batches for row in b[0])
        assert got == ref, name
        assert threads == 2
        ran += 1
    assert ran == sum(have(m) for m in PEERS.values())


def test_loaders_filter_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    r, rows = run(tmp_path, "--works", "pure_python", "--loaders",
                  "torch-process:0,sluice-thread:2", "--plot", str(tmp_path / "a.png"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert [(x["loader"], x["worker_type"], x["workers"]) for x in rows] == \
        [("torch", "process", 0), ("sluice", "thread", 2)]
    png = (tmp_path / "a.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    # saved rows, another interpreter's among them, drawn without running
    saved = tmp_path / "saved.jsonl"
    # (3.13t's at three worker counts: curves over workers; 3.11's alone: bars of the best)
    other = [dict(x, python="3.13t", gil=False, workers=w, samples_per_s=x["samples_per_s"] * w)
             for x in rows for w in (1, 2, 3)]
    saved.write_text("".join(json.dumps(x) + "\n" for x in rows + other))
    r2 = subprocess.run([sys.executable, BENCH, "--plot", str(tmp_path / "b.png"), str(saved)],
                        capture_output=True, text=True, timeout=300)
    assert r2.returncode == 0, r2.stderr
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_arguments_are_named(tmp_path):
    r = subprocess.run([sys.executable, BENCH, "--photos", str(tmp_path), "--works", "nope"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "no images" in (r.stderr + r.stdout)
    r = subprocess.run([sys.executable, BENCH, "--photos", str(photos(tmp_path / "p", n=4)),
                        "--works", "nope"], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "unknown nope" in r.stderr
    r = subprocess.run([sys.executable, BENCH], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--photos DIR" in r.stderr
