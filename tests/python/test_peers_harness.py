"""bench/peers/run.py keeps its contract: one JSON object per loader and line with
exactly the documented keys, first-batch checks that pass for loaders doing the
same work, and a row with the reason for a loader that cannot run. Only the
loaders that need nothing from PyPI (sluice, torch) run here, for a fraction of a
second on a few generated photos; nothing is downloaded."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import REPO, write_idx

RUN = os.path.join(REPO, "bench", "peers", "run.py")
KEYS = {"loader", "work", "samples_per_s", "peak_rss_mb", "cpu_s_per_sample", "threads",
        "version", "note"}

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")


def photos(root, n=24, classes=2):
    rng = np.random.default_rng(5)
    for i in range(n):
        d = root / f"class{i % classes}"
        d.mkdir(parents=True, exist_ok=True)
        h, w = 240 + 8 * (i % 5), 320 - 6 * (i % 7)
        yy, xx = np.mgrid[0:h, 0:w]
        img = np.stack([(xx * 255 // w), (yy * 255 // h), ((xx + yy + 40 * i) % 256)], -1)
        img = np.clip(img + rng.integers(-20, 20, img.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(d / f"{i:03d}.jpg", quality=90)
    return root


def run(args, tmp_path):
    env = dict(os.environ)
    r = subprocess.run([sys.executable, RUN, *args, "--json", "--cache", str(tmp_path / "cache"),
                        "--seconds", "0.5", "--warmup", "0", "--repeats", "1",
                        "--torch-workers", "0"],
                       capture_output=True, text=True, env=env, timeout=600)
    rows = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
    return r, rows


def check_rows(rows, work, loaders, keys=KEYS):
    assert [r["loader"] for r in rows] == loaders
    for r in rows:
        assert set(r) == keys, r
        assert r["work"] == work
        assert isinstance(r["samples_per_s"], float) and r["samples_per_s"] > 0, r
        assert r["peak_rss_mb"] > 10 and r["cpu_s_per_sample"] > 0, r
        assert isinstance(r["threads"], int) and r["version"], r
        assert "first batch ok" in r["note"] and "CHECK FAILED" not in r["note"], r


@pytest.mark.parametrize("work", ["train", "eval"])
def test_photo_works(tmp_path, work):
    root = photos(tmp_path / "photos")
    r, rows = run(["--photos", str(root), "--work", work, "--batch", "8",
                   "--loaders", "sluice,sluice-restart,torch"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    check_rows(rows, work, ["sluice", "sluice-restart", "torch"])
    # storage is prepared once: a second run finds it in the cache
    assert os.path.exists(next((tmp_path / "cache").glob("photos-*")) / "slr-restart" / ".done")


def test_tiny(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (600, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, 600).astype(np.uint8)
    imgs = write_idx(tmp_path / "img-idx3-ubyte.gz", x)
    labels = write_idx(tmp_path / "lab-idx1-ubyte.gz", y)
    r, rows = run(["--idx", imgs, labels, "--work", "tiny", "--batch", "32",
                   "--loaders", "sluice,torch"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    check_rows(rows, "tiny", ["sluice", "torch"])


def test_checks_catch_wrong_batches(tmp_path):
    """The first-batch checks refuse what a loader doing less or other work hands out."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("peers_run", RUN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    first = {"type": "torch.Tensor", "shape": [8, 3, 224, 224], "dtype": "float32",
             "min": -2.1, "max": 2.6, "mean": 0.5}
    assert mod.check_first("eval", first, 8) is None
    assert mod.check_first("train", dict(first, shape=[8, 224, 224, 3]), 8) is None  # NHWC
    assert "float32" in mod.check_first("eval", dict(first, dtype="uint8"), 8)
    assert "values" in mod.check_first("eval", dict(first, min=0.0, max=255.0), 8)  # no normalize
    assert "expected" in mod.check_first("eval", dict(first, shape=[8, 3, 256, 256]), 8)
    assert mod.check_mean(first, "sluice", 0.51) is None
    assert "differs" in mod.check_mean(first, "sluice", 0.6)
    tiny = {"type": "numpy.ndarray", "shape": [4, 28, 28], "dtype": "uint8", "min": 0, "max": 9,
            "mean": 3, "label_dtype": "int64", "label_shape": [4]}
    assert "torch" in mod.check_first("tiny", tiny, 4)
    assert mod.check_first("tiny", dict(tiny, type="torch.Tensor"), 4) is None
    assert "int64" in mod.check_first("tiny", dict(tiny, type="torch.Tensor", label_dtype="uint8"), 4)


def test_missing_peer_row_says_why(tmp_path):
    try:
        import tensorflow  # noqa: F401
        pytest.skip("tensorflow is importable here: the missing-peer row cannot be shown")
    except ImportError:
        pass
    root = photos(tmp_path / "photos", n=8)
    r, rows = run(["--photos", str(root), "--work", "eval", "--loaders", "tfdata"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(rows) == 1 and set(rows[0]) == KEYS
    assert rows[0]["samples_per_s"] is None
    assert rows[0]["note"].startswith("not installed") and "setup.sh" in rows[0]["note"]


def test_remote_rows(tmp_path):
    """--remote-latency-ms: sluice and sluice-restart read their .slr directory
    over HTTP (nginx) and s3:// (moto) through the delay proxy, each from an
    empty cache, plus the local row; the rows carry remote and latency_ms, the
    first batches are the local row's photos (eval: same mean), the proxies
    carried the requests and the caches are gone after the run."""
    import re
    sys.path.insert(0, os.path.join(REPO, "tests", "remote"))
    import httpfix
    if not httpfix.have_nginx():
        pytest.skip("nginx not installed (scripts/deps.sh)")
    proxy = os.environ.get("SLUICE_DELAYPROXY") or os.path.join(
        os.path.dirname(os.environ.get("SLUICE_BIN", os.path.join(REPO, "build", "sluice"))),
        "sluice_delayproxy")
    if not os.access(proxy, os.X_OK):
        pytest.skip(f"{proxy} not built (CMake target sluice_delayproxy)")
    # moto's venv: made by tests/io/s3_moto.sh in the same test command (exit 77: PyPI
    # not reachable); without it the s3:// rows must say why
    moto = subprocess.run(["bash", os.path.join(REPO, "tests", "io", "moto_venv.sh")],
                          capture_output=True, text=True).returncode == 0
    root = photos(tmp_path / "photos")
    # shards of 200 kB: a .slr dataset directory (several shards), as the 16 MiB
    # shards of the real photos make
    os.environ.update(SLUICE_DELAYPROXY=proxy, SLUICE_PEERS_SLR_SHARD_BYTES="200000")
    try:
        r, rows = run(["--photos", str(root), "--work", "eval", "--batch", "8",
                       "--loaders", "sluice,sluice-restart", "--remote-latency-ms", "5"], tmp_path)
    finally:
        del os.environ["SLUICE_DELAYPROXY"], os.environ["SLUICE_PEERS_SLR_SHARD_BYTES"]
    store = next((tmp_path / "cache").glob("photos-*/slr-shards-200000/train"))
    assert store.is_dir() and len(list(store.glob("*.slr"))) >= 3, list(store.iterdir())
    assert r.returncode == 0, r.stderr[-3000:]
    want = [("sluice", None), ("sluice", "http"), ("sluice", "s3"), ("sluice-restart", "http"),
            ("sluice-restart", "s3")]
    assert [(x["loader"], x.get("remote")) for x in rows] == want, rows
    for x in rows:
        assert set(x) == KEYS | {"remote", "latency_ms"}, x
        assert x["latency_ms"] == (5 if x["remote"] else None), x
        if x["remote"] == "s3" and not moto:
            assert x["samples_per_s"] is None and "moto could not be started" in x["note"], x
            continue
        check_rows([x], "eval", [x["loader"]], KEYS | {"remote", "latency_ms"})
        if x["remote"]:
            assert "through the delay proxy" in x["note"], x
    # every request went through a proxy holding it 5 ms
    for kind in ("http", "s3") if moto else ("http",):
        m = re.search(rf"delayproxy \({kind}, 5 ms\): .* requests (\d+)", r.stderr)
        assert m and int(m.group(1)) > 0, r.stderr[-3000:]
    # each run's cache was emptied after it
    assert not any((tmp_path / "cache" / "remote-cache").glob("*/*")), \
        list((tmp_path / "cache" / "remote-cache").glob("*/*"))


def test_remote_refuses_local_only_loaders(tmp_path):
    root = photos(tmp_path / "photos", n=4)
    r, rows = run(["--photos", str(root), "--work", "train", "--loaders", "torch",
                   "--remote-latency-ms", "20"], tmp_path)
    assert r.returncode == 2 and rows == []
    assert "known with --remote-latency-ms: litdata, sluice, sluice-restart, streaming, webdataset" \
        in r.stderr, r.stderr


THREAD_PEERS = ["spdl", "torchdata", "grain"]


def thread_peers_python():
    """An interpreter that imports the thread peers (they need torch 2.x):
    this one, or the `gil` venv of scripts/pythons.sh where bench/peers/setup.sh
    put them; None where neither has them."""
    pythons = os.environ.get("SLUICE_PYTHONS") or os.path.expanduser("~/.cache/sluice-pythons")
    for py in (sys.executable, os.path.join(pythons, "gil", "bin", "python")):
        if os.access(py, os.X_OK) and subprocess.run(
                [py, "-c", "import spdl.pipeline, torchdata.nodes, grain"],
                capture_output=True).returncode == 0:
            return py
    return None


def test_thread_peer_rows_say_why_without_their_python(tmp_path):
    root = photos(tmp_path / "photos", n=8)
    gone = str(tmp_path / "no-venv" / "bin" / "python")
    r, rows = run(["--photos", str(root), "--work", "train", "--loaders", ",".join(THREAD_PEERS),
                   "--threads-python", gone], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [x["loader"] for x in rows] == THREAD_PEERS
    for x in rows:
        assert set(x) == KEYS and x["samples_per_s"] is None, x
        assert x["note"].startswith("not installed: no " + gone), x
        assert "scripts/pythons.sh" in x["note"] and "setup.sh" in x["note"], x


@pytest.mark.parametrize("work", ["train", "eval"])
def test_thread_peer_rows(tmp_path, work):
    """spdl, torchdata and grain run the torch row's Dataset on threads and
    pass the same first-batch checks (eval: the same photos in the same order
    as torch's first batch). Where no interpreter here has them (a machine
    without scripts/pythons.sh's venvs), each row must say so and how to
    install them."""
    root = photos(tmp_path / "photos")
    py = thread_peers_python()
    args = ["--photos", str(root), "--work", work, "--batch", "8",
            "--loaders", "torch," + ",".join(THREAD_PEERS)]
    r, rows = run(args + (["--threads-python", py] if py else []), tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    if py is None:
        assert [x["loader"] for x in rows] == ["torch"] + THREAD_PEERS
        for x in rows[1:]:
            assert x["samples_per_s"] is None and "not install" in x["note"], x
            assert "setup.sh" in x["note"], x
        return
    check_rows(rows, work, ["torch"] + THREAD_PEERS)
    for x in rows[1:]:
        assert "torch 2." in x["version"], x
        assert "thread" in x["note"] or "ReadOptions" in x["note"], x
        assert "torchvision ImageFolder + transforms (PIL)" in x["note"], x


def test_thread_peers_refuse_tiny(tmp_path):
    r, rows = run(["--idx", "a", "b", "--work", "tiny", "--loaders", "sluice,grain"], tmp_path)
    assert r.returncode == 2 and rows == []
    assert "thread peers" in r.stderr and "tiny" in r.stderr, r.stderr
