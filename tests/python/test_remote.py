"""Remote inputs against real servers: nginx on a free localhost port (HTTP and
HTTPS with a certificate made here) and the fault-injecting proxy of
tests/remote/httpfix.py. Each run is the `sluice` command (or Python) in a
subprocess, so that each gets its own settings (the HTTP layer reads its
environment once per process): an epoch read over HTTP must equal the local
epoch batch for batch (the XXH3 digests of `sluice run --digest`).

Skipped, and said so, when nginx is not installed (scripts/deps.sh installs
nginx-light)."""
import json
import os
import re
import subprocess
import sys
import tarfile
import io
import threading
import time

import numpy as np
import pytest

import sluice

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))
import httpfix  # noqa: E402

SLUICE = os.environ.get("SLUICE_BIN") or os.path.join(HERE, "..", "..", "build", "sluice")

pytestmark = pytest.mark.skipif(not httpfix.have_nginx(), reason="nginx not installed (scripts/deps.sh)")

N = 240


def make_data(root):
    """A .slr dataset of N records in several shards (ds/), the same records
    as one file (one.slr), and WebDataset tar shards (wds-0000{0..3}.tar)."""
    cols = [("idx", "int64"), ("blob", "bytes")]
    rng = np.random.default_rng(5)
    blobs = [rng.integers(0, 256, 200 + (i * 37) % 900, dtype=np.uint8).tobytes() for i in range(N)]
    for path, shard in (("ds", 40000), ("one.slr", 0)):
        with sluice.Writer(os.path.join(root, path), cols, shard_bytes=shard, fsync=False) as w:
            for i in range(N):
                w.append({"idx": i, "blob": blobs[i]})
    for s in range(4):
        with tarfile.open(os.path.join(root, f"wds-{s:05d}.tar"), "w", format=tarfile.USTAR_FORMAT) as t:
            for i in range(s * N // 4, (s + 1) * N // 4):
                for ext, data in (("cls", str(i).encode()), ("bin", blobs[i])):
                    ti = tarfile.TarInfo(f"s{i:06d}.{ext}")
                    ti.size = len(data)
                    ti.mtime = 0
                    t.addfile(ti, io.BytesIO(data))
    # an S3-style bucket: s3://bkt/KEY path-style is ENDPOINT/bkt/KEY
    os.symlink(".", os.path.join(root, "bkt"))
    # bad inputs
    with open(os.path.join(root, "notatar.tar"), "wb") as f:
        f.write(b"this is plain text, not a tar archive\n" * 20)
    os.makedirs(os.path.join(root, "badman"))
    man = open(os.path.join(root, "ds", "manifest.json")).read()
    with open(os.path.join(root, "badman", "manifest.json"), "w") as f:
        f.write(man[: len(man) // 2])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("remote"))
    make_data(root)
    return root


@pytest.fixture(scope="module")
def web(data):
    with httpfix.Nginx(data) as ng:
        yield ng


def env_for(tmp, **extra):
    e = dict(os.environ)
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        e.pop(k, None)
    e["SLUICE_CACHE_DIR"] = str(tmp / "cache")
    e["SLUICE_HTTP_BACKOFF_MS"] = "20"
    e["SLUICE_HTTP_BACKOFF_MAX_MS"] = "400"
    e.update({k: str(v) for k, v in extra.items()})
    return e


def run_spec(tmp, source, env, shuffle=True, check=True, timeout=120):
    spec = {"source": dict(source, shuffle=shuffle), "seed": 3, "epochs": 2,
            "ops": [{"op": "batch", "size": 16}]}
    p = tmp / f"spec-{time.monotonic_ns()}.json"
    p.write_text(json.dumps(spec))
    r = subprocess.run([SLUICE, "run", str(p), "--digest"], env=env, capture_output=True,
                       text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def run_json(tmp, spec, env):
    """`sluice run SPEC --digest` of a whole spec: its batch lines."""
    p = tmp / f"spec-{time.monotonic_ns()}.json"
    p.write_text(json.dumps(spec))
    r = subprocess.run([SLUICE, "run", str(p), "--digest"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [l for l in r.stdout.splitlines() if ":" in l]


def write_blobs(path, n, size, shard_bytes, seed):
    """n records (idx, `size` random bytes) into the .slr at `path`, in
    shards of `shard_bytes` (0: one file)."""
    rng = np.random.default_rng(seed)
    with sluice.Writer(str(path), [("idx", "int64"), ("blob", "bytes")],
                       shard_bytes=shard_bytes, fsync=False) as w:
        for i in range(n):
            w.append({"idx": i, "blob": rng.integers(0, 256, size, dtype=np.uint8).tobytes()})


def blob_dataset(tmp, n, size, shard_bytes, epochs, seed):
    """A .slr dataset of n random `size`-byte records in shards of
    `shard_bytes` (tmp/srv/ds), a shuffled spec over it (batches of 50) and
    that spec's local batch lines."""
    root = tmp / "srv"
    root.mkdir()
    write_blobs(root / "ds", n, size, shard_bytes, seed)
    spec = {"source": {"path": str(root / "ds"), "shuffle": True}, "seed": 3, "epochs": epochs,
            "ops": [{"op": "batch", "size": 50}]}
    return root, spec, run_json(tmp, spec, env_for(tmp))


def digests(r):
    lines = [l for l in r.stdout.splitlines() if ":" in l]
    assert len(lines) == 2 * N // 16
    return lines


def local_digest(tmp, data, source):
    return digests(run_spec(tmp, source, env_for(tmp)))


@pytest.mark.parametrize("kind", ["dir", "file", "wds"])
def test_epoch_over_http_equals_local(tmp_path, data, web, kind):
    src = {"dir": lambda b: {"path": b + "/ds"}, "file": lambda b: {"path": b + "/one.slr"},
           "wds": lambda b: {"webdataset": b + "/wds-{00000..00003}.tar"}}[kind]
    want = local_digest(tmp_path, data, src(data))
    got = digests(run_spec(tmp_path, src(web.url), env_for(tmp_path)))
    assert got == want
    # the cache holds the shards, each with its 16-byte trailer; a second
    # run reads them from there (nginx stopped: nothing else could serve them
    # except the HEADs, so it runs against a second server with the same files)
    entries = [f for f in os.listdir(tmp_path / "cache") if not f.startswith(".") and not f.endswith(".lock")]
    assert entries


def _links_libcurl(path):
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    return "libcurl" in out


def test_libcurl_is_loaded_by_the_first_remote_read(tmp_path, data, web):
    """A source build loads libcurl (and the libraries it brings) when the
    first remote read starts, not at import (src/io/curl_api.h); the read
    then equals the local one. SLUICE_LIBCURL naming a library that cannot
    be loaded fails the remote read with a message naming it, and local
    reads still work. A build that links libcurl (the wheels) has it at
    import and ignores the setting: that half is skipped there."""
    linked = _links_libcurl(sluice._sluice.__file__)
    code = f"""
import json, sluice
def mapped():
    return any("libcurl" in line for line in open("/proc/self/maps"))
before = mapped()
local = [int(x) for b in sluice.records({data + '/ds'!r}).batch(60) for x in b["idx"]]
after_local = mapped()
try:
    remote = [int(x) for b in sluice.records({web.url + '/ds'!r}).batch(60) for x in b["idx"]]
    err = None
except Exception as e:
    remote, err = None, str(e)
print(json.dumps([before, after_local, mapped(), local, remote, err]))
"""
    def run(**extra):
        r = subprocess.run([sys.executable, "-c", code], env=env_for(tmp_path, **extra),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
    before, after_local, after, local, remote, err = run()
    assert err is None and remote == local and sorted(local) == list(range(N))
    assert after
    if linked:
        assert before, "a build that links libcurl has it at import"
        return
    assert not before and not after_local, "libcurl loaded before any remote read"
    before, after_local, after, local, remote, err = run(SLUICE_LIBCURL=str(tmp_path / "none.so"))
    assert sorted(local) == list(range(N)) and remote is None
    assert "SLUICE_LIBCURL=" in err and "none.so could not be loaded" in err, err
    assert not after


def test_dataset_directory_without_slash_and_with(tmp_path, data, web):
    want = local_digest(tmp_path, data, {"path": data + "/ds"})
    assert digests(run_spec(tmp_path, {"path": web.url + "/ds/"}, env_for(tmp_path))) == want


def test_python_records_over_http(tmp_path, data, web):
    code = f"""
import sluice, json
ds = sluice.records({web.url + '/ds'!r}).shuffle(seed=0).batch(16)
out = []
for b in ds:
    out += [int(x) for x in b["idx"]]
print(json.dumps(out))
"""
    r = subprocess.run([sys.executable, "-c", code], env=env_for(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    want = []
    for b in sluice.records(data + "/ds").shuffle(seed=0).batch(16):
        want += [int(x) for x in b["idx"]]
    assert got == want and sorted(got) == list(range(N))


def test_forked_child_reads_a_remote_dataset_the_parent_reads(tmp_path, data, web):
    """fork() while the parent's shard openers and read-ahead threads run: the
    child neither joins nor signals them (core/worker.h's fork policy): it
    reads the same Dataset whole on its own (hints open shards in place,
    read-ahead starts fetch threads of its own), frees it and exits; the
    parent reads on. Several rounds, forking at different points of the
    parent's epoch (no cache: every shard read by ranges)."""
    code = f"""
import os, sys, json, sluice
N = {N}
bad = []
for rnd in range(6):
    ds = sluice.records({web.url + '/ds'!r}).shuffle(seed=rnd).batch(8)
    it = iter(ds)
    seen = []
    for _ in range(1 + rnd * 4):
        seen += [int(x) for x in next(it)["idx"]]
    pid = os.fork()
    if pid == 0:
        try:
            got = sorted(int(x) for b in ds for x in b["idx"])
            del ds, it
            os._exit(0 if got == list(range(N)) else 3)
        except BaseException:
            os._exit(4)
    for b in it:
        seen += [int(x) for x in b["idx"]]
    _, st = os.waitpid(pid, 0)
    if st != 0 or sorted(seen) != list(range(N)):
        bad.append((rnd, st, len(seen)))
print(json.dumps(bad))
"""
    env = env_for(tmp_path, SLUICE_CACHE_BYTES="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [], r.stdout


def test_https_with_the_test_ca(tmp_path, data):
    with httpfix.Nginx(data, https=True) as ng:
        src = {"path": ng.url + "/ds"}
        want = local_digest(tmp_path, data, {"path": data + "/ds"})
        r = run_spec(tmp_path, src, env_for(tmp_path, SLUICE_CA_BUNDLE=ng.ca))
        assert digests(r) == want
        # nginx offers HTTP/2 over TLS: it is used
        protos = ng.protocols()
        assert protos and set(protos) == {"HTTP/2.0"}, protos
        # without trusting the certificate: a clear error, no retries
        r = run_spec(tmp_path, src, env_for(tmp_path / "x"), check=False)
        assert r.returncode == 1
        assert ng.url in r.stderr and "certificate" in r.stderr.lower(), r.stderr


def test_epoch_through_faulty_proxy_equals_local(tmp_path, data, web):
    px = httpfix.FaultProxy(web.port, seed=7, err500=0.04, err503=0.04, err429=0.04, drop=0.04,
                            truncate=0.04)
    try:
        for src in ({"path": "/ds"}, {"webdataset": "/wds-{00000..00003}.tar"}):
            k, v = next(iter(src.items()))
            want = local_digest(tmp_path, data, {k: data + v})
            # no disk cache: every shard comes through the proxy
            got = digests(run_spec(tmp_path, {k: px.url + v}, env_for(tmp_path, SLUICE_CACHE_BYTES=0)))
            assert got == want
        faults = {k: c for k, c in px.counts.items() if k != "ok"}
        assert sum(faults.values()) >= 3, px.counts  # the faults did happen
    finally:
        px.close()


EPOCHS_PY = """
import hashlib, sys
import sluice
ds = sluice.records(sys.argv[1]).shuffle(seed=3).batch(16)
for epoch in (0, 1):
    ds.set_epoch(epoch)
    for b in ds:
        h = hashlib.sha256(b["idx"].tobytes() + b"".join(bytes(x) for x in b["blob"]))
        print(epoch, h.hexdigest(), flush=True)
"""


def finish(p, timeout):
    """(stdout, stderr) of the rest of a started process, read through the
    same file objects as an earlier p.stdout.readline(). Popen.communicate
    with two pipes reads their descriptors and never sees what readline
    already buffered: the lines printed before the parent read (under load,
    the second batch and more) were lost, and the epoch looked short."""
    res = {}
    ts = [threading.Thread(target=lambda k=k, f=f: res.__setitem__(k, f.read()), daemon=True)
          for k, f in (("out", p.stdout), ("err", p.stderr))]
    for t in ts:
        t.start()
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise
    for t in ts:
        t.join(timeout)
    return res.get("out", ""), res.get("err", "")


def test_finish_keeps_lines_readline_buffered():
    """The harness itself: lines that arrived together with the first one
    are not lost (communicate lost them)."""
    p = subprocess.Popen([sys.executable, "-c", "import sys, time\nfor i in range(5): print(i, flush=True)\n"
                          "time.sleep(0.5)\nprint(5, flush=True)"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)  # the first five lines are in the pipe together
    first = p.stdout.readline()
    out, err = finish(p, 30)
    assert p.returncode == 0, err
    assert [first.strip()] + out.split() == [str(i) for i in range(6)]


def start_epochs(url, env):
    """Two epochs of URL from Python, one line a batch, flushed: the caller
    sees the first batch arrive."""
    return subprocess.Popen([sys.executable, "-c", EPOCHS_PY, url], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("kind", ["slr-ranges", "wds"])
def test_server_killed_and_restarted_mid_epoch(tmp_path, data, kind):
    """nginx killed (SIGKILL, master and workers) and started again on the
    same port a second later: the epoch completes, identical. A .slr with no
    cache is read by ranges while the epoch runs: killed when the first batch
    is out, with one fetch thread (so the epoch's other records are still to
    be fetched): mid-epoch. WebDataset shards are fetched whole, killed while
    they are fetched."""
    with httpfix.Nginx(data) as ng:
        px = httpfix.FaultProxy(ng.port, delay_ms=20)
        try:
            # a budget of waits longer than the outage: 8 tries, waits
            # 100-200, 200-400, ... ms up to 2 s (at least 4.5 s in all);
            # an open brings 4 KiB of a shard's end (not all of these 40 KB
            # shards): records are range requests
            env = env_for(tmp_path, SLUICE_CACHE_BYTES=0, SLUICE_HTTP_BACKOFF_MS=200,
                          SLUICE_HTTP_BACKOFF_MAX_MS=2000, SLUICE_HTTP_TRIES=8, SLUICE_HTTP_READAHEAD=1,
                          SLUICE_HTTP_OPEN_BYTES=4096)
            if kind == "slr-ranges":
                r = subprocess.run([sys.executable, "-c", EPOCHS_PY, data + "/ds"], env=env,
                                   capture_output=True, text=True, timeout=120)
                want = r.stdout.splitlines()
                assert len(want) == 2 * N // 16
                p = start_epochs(px.url + "/ds", env)
                first = p.stdout.readline()  # the first batch: mid-epoch from here
                assert first, p.stderr.read()
                gets = px.gets
            else:
                want = local_digest(tmp_path, data, {"webdataset": data + "/wds-{00000..00003}.tar"})
                spec = tmp_path / "kill.json"
                spec.write_text(json.dumps({"source": {"webdataset": px.url + "/wds-{00000..00003}.tar",
                                                       "shuffle": True}, "seed": 3, "epochs": 2,
                                            "ops": [{"op": "batch", "size": 16}]}))
                p = subprocess.Popen([SLUICE, "run", str(spec), "--digest"], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(1000):  # bounded: 20 s
                    if px.gets >= 3 or p.poll() is not None:
                        break
                    time.sleep(0.02)
                first = ""
            assert p.poll() is None, "the run ended before the server was killed"
            ng.stop()
            time.sleep(1.0)
            ng.start()
            out, err = finish(p, 120)
            assert p.returncode == 0, err
            got = ([first.strip()] if first else []) + [l for l in out.splitlines() if l.strip()]
            if kind == "wds":
                got = [l for l in got if ":" in l]
            assert got == want
            if kind == "slr-ranges":
                assert px.gets > gets  # records were fetched after the restart
        finally:
            px.close()


def test_server_gone_for_good_fails_fast_naming_the_url(tmp_path, data):
    port = httpfix.free_port()  # nothing listens there
    url = f"http://127.0.0.1:{port}/ds"
    t = time.monotonic()
    r = run_spec(tmp_path, {"path": url}, env_for(tmp_path, SLUICE_HTTP_TRIES=4,
                                                   SLUICE_HTTP_BACKOFF_MS=100), check=False)
    took = time.monotonic() - t
    assert r.returncode == 1
    assert url in r.stderr and "after 4 tries" in r.stderr, r.stderr
    # 3 waits of at most 100, 200, 400 ms, plus process start: well under 10 s
    assert took < 10, took


def test_server_gone_mid_epoch_names_url_record_and_tries(tmp_path, data):
    """.slr read by ranges, the server killed for good when the first batch
    is out (mid-epoch): the run fails within its retry budget, the message
    naming the shard's URL, the record, curl's words and the tries."""
    with httpfix.Nginx(data) as ng:
        px = httpfix.FaultProxy(ng.port, delay_ms=20)
        try:
            # 4 KiB of a shard's end at open: records are range requests
            p = start_epochs(px.url + "/ds", env_for(tmp_path, SLUICE_CACHE_BYTES=0, SLUICE_HTTP_TRIES=3,
                                                     SLUICE_HTTP_READAHEAD=1, SLUICE_HTTP_OPEN_BYTES=4096))
            assert p.stdout.readline(), p.stderr.read()
            ng.stop()
            t = time.monotonic()
            out, err = finish(p, 60)
            assert p.returncode == 1, out
            assert time.monotonic() - t < 20
            assert re.search(re.escape(px.url) + r"/ds/shard-\d+\.slr: record \d+: .*after 3 tries", err), err
        finally:
            px.close()


def test_corrupted_cache_entry_is_detected_and_fetched_again(tmp_path, data, web):
    src = {"path": web.url + "/one.slr"}
    want = local_digest(tmp_path, data, {"path": data + "/one.slr"})
    assert digests(run_spec(tmp_path, src, env_for(tmp_path))) == want
    cache = tmp_path / "cache"
    (entry,) = [f for f in os.listdir(cache) if f.endswith("one.slr")]
    p = cache / entry
    good = p.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x40
    p.write_bytes(bytes(bad))
    r = run_spec(tmp_path, src, env_for(tmp_path))
    assert digests(r) == want
    assert "damaged" in r.stderr and web.url + "/one.slr" in r.stderr, r.stderr
    assert p.read_bytes() == good  # fetched again, whole


def test_cache_budget_evicts_least_recently_used(tmp_path, data, web):
    shard = os.path.getsize(os.path.join(data, "wds-00000.tar"))
    budget = int(shard * 2.5)
    env = env_for(tmp_path, SLUICE_CACHE_BYTES=budget)
    want = local_digest(tmp_path, data, {"webdataset": data + "/wds-{00000..00003}.tar"})
    got = digests(run_spec(tmp_path, {"webdataset": web.url + "/wds-{00000..00003}.tar"}, env,
                           shuffle=True))
    assert got == want
    cache = tmp_path / "cache"
    files = [f for f in os.listdir(cache) if not f.startswith(".") and not f.endswith(".lock")]
    assert sum(os.path.getsize(cache / f) for f in files) <= budget
    assert 1 <= len(files) <= 2


def test_processes_share_one_cache(tmp_path, data, web):
    want = local_digest(tmp_path, data, {"path": data + "/ds"})
    spec = tmp_path / "share.json"
    spec.write_text(json.dumps({"source": {"path": web.url + "/ds", "shuffle": True}, "seed": 3,
                                "epochs": 2, "ops": [{"op": "batch", "size": 16}]}))
    ps = [subprocess.Popen([SLUICE, "run", str(spec), "--digest"], env=env_for(tmp_path),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in ps:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert [l for l in out.splitlines() if ":" in l] == want
    assert not [f for f in os.listdir(tmp_path / "cache") if f.startswith(".tmp-")]


def test_reader_freed_as_its_opener_threads_start(tmp_path, data, web):
    """A remote dataset freed right after its first hints: an opener thread
    started by the last hint must find its queue still there (it once read
    the reader's opener after the free had cleared it: SIGSEGV about one run
    in three of three processes sharing a cache)."""
    spec = tmp_path / "short.json"
    spec.write_text(json.dumps({"source": {"path": web.url + "/ds", "shuffle": True}, "seed": 3,
                                "ops": [{"op": "batch", "size": 4}]}))
    env = env_for(tmp_path)
    for i in range(12):  # three at a time, as the crash was first seen
        ps = [subprocess.Popen([SLUICE, "run", str(spec), "--stop-after", str(1 + k)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for k in range(3)]
        for p in ps:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, (i, p.returncode, err)


@pytest.mark.parametrize("what,source,words", [
    ("404", {"path": "/nope.slr"}, "HTTP 404"),
    ("404 shard", {"webdataset": "/wds-{00000..00009}.tar"}, "wds-00004.tar: HTTP 404"),
    ("not a tar", {"webdataset": "/notatar.tar"}, "notatar.tar"),
    ("truncated manifest", {"path": "/badman"}, "badman/manifest.json"),
])
def test_bad_remote_inputs_name_the_url(tmp_path, data, web, what, source, words):
    k, v = next(iter(source.items()))
    r = run_spec(tmp_path, {k: web.url + v}, env_for(tmp_path), check=False)
    assert r.returncode == 1, r.stdout
    assert web.url in r.stderr and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_cli_commands_take_urls(tmp_path, data, web):
    env = env_for(tmp_path)
    for args in (["info", web.url + "/ds"], ["verify", web.url + "/ds"], ["scan", web.url + "/one.slr"],
                 ["cat", web.url + "/one.slr", "--index", "5", "--column", "blob"]):
        r = subprocess.run([SLUICE] + args, env=env, capture_output=True, timeout=120)
        assert r.returncode == 0, (args, r.stderr)
    # info counts the remote shards' bytes as a local dataset's
    loc = json.loads(subprocess.run([SLUICE, "info", "--json", data + "/ds"], capture_output=True,
                                    text=True).stdout)
    rem = json.loads(subprocess.run([SLUICE, "info", "--json", web.url + "/ds"], env=env,
                                    capture_output=True, text=True).stdout)
    assert rem["file_bytes"] == loc["file_bytes"] > 0
    assert rem["shards"] == [p.replace(data, web.url) for p in loc["shards"]]
    assert {k: v for k, v in rem.items() if k not in ("path", "shards")} == \
        {k: v for k, v in loc.items() if k not in ("path", "shards")}
    r = subprocess.run([SLUICE, "cat", web.url + "/one.slr", "--index", "5", "--column", "blob"], env=env, capture_output=True)
    assert r.stdout == sluice.Reader(data + "/one.slr")[5]["blob"]
    out = tmp_path / "packed.slr"
    r = subprocess.run([SLUICE, "pack", web.url + "/wds-{00000..00003}.tar", str(out)], env=env,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sluice.Reader(str(out)).__len__() == N
    # an index is written beside a local file only: said so
    r = subprocess.run([SLUICE, "index", web.url + "/wds-00000.tar"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1 and "index a local copy" in r.stderr, r.stderr


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
            "--redirects", "0:1,1:1,2:1,3:1", "--tee", "0:1,1:1,2:1,3:1"]


def test_torchrun_four_ranks_over_http(tmp_path, data, web):
    """torchrun (gloo, 4 ranks on this machine): each epoch the ranks' samples
    are disjoint and cover the dataset with equal batch counts (.slr and
    WebDataset over HTTP); a job killed mid-epoch resumes from each rank's
    state_dict with exactly the samples of the uninterrupted epoch."""
    pytest.importorskip("torch.distributed")
    script = os.path.join(os.path.dirname(HERE), "remote", "torchrun_check.py")
    env = env_for(tmp_path, OMP_NUM_THREADS=1)
    # the ranks import the same sluice as this test
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(sluice.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    out = tmp_path / "ranks"
    out.mkdir()
    r = subprocess.run(TORCHRUN + [script, "epochs", web.url, str(out)], env=env, capture_output=True,
                       text=True, timeout=300)
    # the ranks kill themselves mid-epoch: torchrun reports the failure
    assert r.returncode != 0
    assert "slr epoch 1: 240 samples" in r.stdout and "wds epoch 1: 240 samples" in r.stdout, r.stdout + r.stderr
    assert all((out / f"part-{k}.json").exists() for k in range(4)), r.stdout + r.stderr
    r = subprocess.run(TORCHRUN + [script, "resume", web.url, str(out)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resume: every rank finished epoch 1 with exactly its samples" in r.stdout, r.stdout
    assert all((out / f"ok-{k}").exists() for k in range(4))


def test_cache_bytes_option_in_the_spec_and_python(tmp_path, data, web):
    """The spec's "cache_bytes" (Python: Dataset.cache_bytes) sets the
    budget in place of SLUICE_CACHE_BYTES: 0 keeps nothing on disk."""
    spec = tmp_path / "c.json"
    spec.write_text(json.dumps({"source": {"path": web.url + "/one.slr"}, "cache_bytes": 0,
                                "ops": [{"op": "batch", "size": 16}]}))
    r = subprocess.run([SLUICE, "run", str(spec)], env=env_for(tmp_path), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(tmp_path / "cache") or not [
        f for f in os.listdir(tmp_path / "cache") if not f.startswith(".") and not f.endswith(".lock")]
    code = f"""
import sluice
n = sum(len(b["idx"]) for b in sluice.records({web.url + '/one.slr'!r}).cache_bytes("1G").batch(16))
print(n)
"""
    r = subprocess.run([sys.executable, "-c", code], env=env_for(tmp_path, SLUICE_CACHE_BYTES=0),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == str(N), r.stderr
    assert [f for f in os.listdir(tmp_path / "cache") if f.endswith("one.slr")]


def test_s3_names_path_style_and_virtual_hosted_unsigned(tmp_path, data, web):
    """s3://bucket/key against an S3-style endpoint on localhost (nginx):
    path-style ENDPOINT/bucket/key, and virtual-hosted bucket.HOST/key
    (curl resolves *.localhost to the loopback address); unsigned without
    credentials, as for a public bucket."""
    want = local_digest(tmp_path, data, {"path": data + "/ds"})
    env = env_for(tmp_path, AWS_ENDPOINT_URL=web.url, AWS_REGION="us-east-1")
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_S3_ADDRESSING_STYLE"):
        env.pop(k, None)
    assert digests(run_spec(tmp_path, {"path": "s3://bkt/ds"}, env)) == want
    env["AWS_ENDPOINT_URL"] = f"http://localhost:{web.port}"
    env["AWS_S3_ADDRESSING_STYLE"] = "virtual"
    assert digests(run_spec(tmp_path, {"path": "s3://anybucket/ds/"}, env)) == want
    # an s3:// name that is missing: the error names it
    r = run_spec(tmp_path, {"path": "s3://anybucket/nope.slr"}, env, check=False)
    assert r.returncode == 1 and "s3://anybucket/nope.slr" in r.stderr, r.stderr


def test_s3_signed_requests_reach_the_server(tmp_path, data, web):
    """With credentials set every s3:// request carries Signature V4 headers
    (src/io/sigv4.c; checked against AWS's vectors and moto elsewhere): here
    nginx serves without checking them, and the proxy records them. The
    signing itself is verified by tests/io/s3_moto.sh."""
    want = local_digest(tmp_path, data, {"path": data + "/ds"})
    px = httpfix.FaultProxy(web.port)
    try:
        env = env_for(tmp_path, AWS_ENDPOINT_URL=px.url, AWS_REGION="eu-west-3",
                      AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY="secret",
                      AWS_SESSION_TOKEN="tok", SLUICE_CACHE_BYTES=0, SLUICE_HTTP_OPEN_BYTES=4096)
        env.pop("AWS_S3_ADDRESSING_STYLE", None)
        env.pop("AWS_ENDPOINT_URL_S3", None)
        assert digests(run_spec(tmp_path, {"path": "s3://bkt/ds"}, env)) == want
        seen = px.seen_headers
        assert seen and all(h.get("authorization", "").startswith(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") and "/eu-west-3/s3/aws4_request" in h["authorization"]
            and h.get("x-amz-date") and h.get("x-amz-content-sha256") and h.get("x-amz-security-token") == "tok"
            for h in seen), seen[:2]
        # a range request signs its Range header too
        assert any("range" in h.get("authorization", "") and "range" in h for h in seen)
        # connections are kept alive: fewer than requests, and the busiest
        # carried several (without keep-alive each carries one). Not far
        # fewer: each shard's open asks for its two edges at once, up to 8
        # threads open shards at once, and the read-ahead loop keeps
        # connections of its own, so a small dataset's epoch start opens
        # about as many connections as it has shards, and its reads ahead
        # (neighbours joined: 24-27 requests in all) a few more
        assert px.conns < len(seen) and px.most_per_conn >= 3, (
            px.conns, len(seen), px.most_per_conn)
    finally:
        px.close()


def test_slr_by_ranges_read_ahead_and_coalesced(tmp_path, data, web):
    """With no room in the cache (cache_bytes 0) a .slr shard is read by
    range requests: the reading threads' hints (the shuffle's order, known
    ahead) fetch records ahead, neighbours coalesced into one request. Through
    a proxy adding 20 ms a request the epoch equals the local one, with far
    fewer requests than records; with faults too."""
    want = local_digest(tmp_path, data, {"path": data + "/ds"})
    px = httpfix.FaultProxy(web.port, delay_ms=20)
    try:
        got = digests(run_spec(tmp_path, {"path": px.url + "/ds"}, env_for(tmp_path, SLUICE_CACHE_BYTES=0)))
        assert got == want
        gets = px.gets
        # one fetch thread: hints made while it waits on a request pile up
        # and neighbours join one request
        got = digests(run_spec(tmp_path, {"path": px.url + "/ds"},
                               env_for(tmp_path, SLUICE_CACHE_BYTES=0, SLUICE_HTTP_READAHEAD=1)))
        assert got == want
        print("GETs with 16 fetch threads:", gets, "with 1:", px.gets - gets)
        assert px.gets - gets < N // 2, (gets, px.gets - gets)
        assert not os.path.exists(tmp_path / "cache") or not [
            f for f in os.listdir(tmp_path / "cache") if not f.startswith(".") and not f.endswith(".lock")]
    finally:
        px.close()
    px = httpfix.FaultProxy(web.port, seed=3, err503=0.05, drop=0.05, truncate=0.05)
    try:
        got = digests(run_spec(tmp_path, {"path": px.url + "/ds"}, env_for(tmp_path, SLUICE_CACHE_BYTES=0)))
        assert got == want
        assert px.counts["503"] + px.counts["drop"] + px.counts["truncate"] >= 1, px.counts
    finally:
        px.close()


def test_read_ahead_runs_from_one_event_loop(tmp_path):
    """Records read by ranges are fetched ahead by one thread driving many
    requests at once (one curl multi event loop), not a thread per request:
    sampled through the run, the process never has more than one read-ahead
    thread, while the proxy (100 ms a request) holds 8 or more of its
    requests at once; the epoch equals the local one. Before, each request in flight had
    a thread of its own (sl-readahead0 ... sl-readahead63)."""
    # shards of 1 MB (larger than an open brings): read record by record
    root, spec, want = blob_dataset(tmp_path, 600, 5000, 1 << 20, epochs=1, seed=8)
    with httpfix.Nginx(str(root)) as ng:
        px = httpfix.FaultProxy(ng.port, delay_ms=100)
        try:
            spec["source"]["path"] = px.url + "/ds"
            sp = tmp_path / "ra.json"
            sp.write_text(json.dumps(spec))
            p = subprocess.Popen([SLUICE, "run", str(sp), "--digest"],
                                 env=env_for(tmp_path, SLUICE_CACHE_BYTES=0),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            most, seen = 0, 0
            while p.poll() is None:
                try:
                    names = [open(f"/proc/{p.pid}/task/{t}/comm").read().strip()
                             for t in os.listdir(f"/proc/{p.pid}/task")]
                except (FileNotFoundError, ProcessLookupError):
                    continue
                k = sum(n.startswith("sl-readahead") for n in names)
                most = max(most, k)
                seen += k > 0
                time.sleep(0.02)
            out, err = p.communicate()
            assert p.returncode == 0, err
            assert [l for l in out.splitlines() if ":" in l] == want
            assert seen >= 3 and most == 1, (seen, most)
            # (neighbours join into one request: 14-19 at once in this set)
            assert px.most_waiting >= 8, px.most_waiting
        finally:
            px.close()


def test_read_ahead_keeps_its_connections(tmp_path):
    """The read-ahead loop keeps a connection alive for each request it may
    run at once, so that the bursts of an epoch reuse them: 2 epochs of
    1,200 records read by ranges (about 1,500 requests) open fewer than 100
    connections (64 places, the openers and reading threads). With curl's
    default connection cache, connections closed between bursts were opened
    again: 185-209 (the fetch threads, one handle each, made 78)."""
    root, spec, want = blob_dataset(tmp_path, 1200, 20000, 4 << 20, epochs=2, seed=1)
    with httpfix.Nginx(str(root)) as ng:
        px = httpfix.FaultProxy(ng.port)
        try:
            spec["source"]["path"] = px.url + "/ds"
            assert run_json(tmp_path, spec, env_for(tmp_path, SLUICE_CACHE_BYTES=0)) == want
            assert len(px.requests) > 1000, len(px.requests)
            assert px.conns < 100, (px.conns, len(px.requests))
        finally:
            px.close()


def test_range_reply_for_another_range_is_refused_and_tried_again(tmp_path, data, web):
    """A 206 whose Content-Range is not the range asked for (here one byte
    later: bytes a+1-b+1) is never taken as the bytes asked for: it is tried
    again like a broken transfer, so the epoch (a .slr read by ranges) equals
    the local one; when every answer is shifted, the error names the URL and
    both ranges. A server that ignores Range (200, the whole object) gives
    the right slice."""
    want = local_digest(tmp_path, data, {"path": data + "/ds"})
    px = httpfix.FaultProxy(web.port, seed=11, shift=0.2)
    try:
        got = digests(run_spec(tmp_path, {"path": px.url + "/ds"}, env_for(tmp_path, SLUICE_CACHE_BYTES=0)))
        assert got == want
        assert px.counts["shift"] >= 3, px.counts
    finally:
        px.close()
    px = httpfix.FaultProxy(web.port, shift=1.0)
    try:
        r = run_spec(tmp_path, {"path": px.url + "/one.slr"},
                     env_for(tmp_path, SLUICE_CACHE_BYTES=0, SLUICE_HTTP_TRIES=2), check=False)
        assert r.returncode == 1, r.stdout
        m = re.search(re.escape(px.url) + r"/one\.slr: .*HTTP 206 with Content-Range bytes (\d+)-(\d+)/(\d+) "
                      r"for the range asked \(bytes (\d+)-(\d+)\) after 2 tries", r.stderr)
        assert m, r.stderr
        a, b, _total, wa, wb = map(int, m.groups())
        assert (a, b) == (wa + 1, min(wb + 1, _total - 1)), m.group(0)
    finally:
        px.close()
    px = httpfix.FaultProxy(web.port, norange=1.0)
    try:
        got = digests(run_spec(tmp_path, {"path": px.url + "/ds"}, env_for(tmp_path, SLUICE_CACHE_BYTES=0)))
        assert got == want
        assert px.counts["norange"] >= 3, px.counts
    finally:
        px.close()


def test_python_reader_by_ranges(tmp_path, data, web):
    """sluice.Reader(url, mmap=False): every record by a range request."""
    code = f"""
import sluice
r = sluice.Reader({web.url + '/one.slr'!r}, mmap=False)
print(len(r), sum(len(r[i]["blob"]) for i in range(len(r))), r.verify())
"""
    r = subprocess.run([sys.executable, "-c", code], env=env_for(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    loc = sluice.Reader(data + "/one.slr")
    assert r.stdout.split() == [str(N), str(sum(len(loc[i]["blob"]) for i in range(N))), "0"]


def test_tfrecord_over_http_with_and_without_index(tmp_path, web):
    """TFRecord files of tf.train.Examples (Google's protobuf runtime, as in
    test_sources.py) read over HTTP equal the local read, without a sidecar
    index (scanned when opened) and with one (`sluice index`, fetched beside
    each file); a cache entry of one with a flipped byte is fetched again."""
    pytest.importorskip("crc32c")
    import test_sources as ts
    root = tmp_path / "tf"
    root.mkdir()
    paths, _, _ = ts.write_tfrecords(ts.tf_messages(tmp_path), str(root))
    with httpfix.Nginx(str(root)) as ng:
        src = lambda base: {"tfrecord": base + "/part-{0,1}.tfrecord",  # noqa: E731
                            "features": {"image/encoded": "image", "image/class/label": "label"}}

        def digests_n(r):
            lines = [l for l in r.stdout.splitlines() if ":" in l]
            assert lines, r.stderr
            return lines
        want = digests_n(run_spec(tmp_path, src(str(root)), env_for(tmp_path)))
        got = digests_n(run_spec(tmp_path, src(ng.url), env_for(tmp_path, SLUICE_CACHE_BYTES=0)))
        assert got == want
        r = subprocess.run([SLUICE, "index"] + paths, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert all(os.path.exists(p + ".slidx") for p in paths)
        spec = dict(src(ng.url), index=True)
        assert digests_n(run_spec(tmp_path, spec, env_for(tmp_path))) == want
        cache = tmp_path / "cache"
        (entry,) = [f for f in os.listdir(cache) if f.endswith("part-0.tfrecord")]
        b = bytearray((cache / entry).read_bytes())
        b[len(b) // 3] ^= 1
        (cache / entry).write_bytes(bytes(b))
        r = run_spec(tmp_path, spec, env_for(tmp_path))
        assert digests_n(r) == want and "damaged" in r.stderr, r.stderr


RANK_PY = """
import sys
import sluice
ds = (sluice.webdataset(sys.argv[1]).shuffle(seed=1, mode="window", window=32, block=16)
      .shard(rank=1, world_size=4).batch(8))
for b in ds:
    print(" ".join(str(int(x)) for x in b["cls"]), flush=True)
"""


def test_rank_fetches_only_the_indexed_shards_it_reads(tmp_path):
    """WebDataset shards with sidecar indexes over HTTP: opening reads the
    index headers alone, and a rank fetches (into the shard cache) only the
    shards it reads: rank 1 of 4 over a window shuffle of 8 shards whose
    blocks are shards reads 2 of them, and only those 2 are fetched."""
    root = tmp_path / "wds"
    root.mkdir()
    per = 16
    paths = []
    for s in range(8):
        p = root / f"w-{s}.tar"
        with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as t:
            for i in range(s * per, (s + 1) * per):
                for ext, body in (("cls", str(i).encode()), ("bin", bytes([i % 256]) * (3000 + i))):
                    ti = tarfile.TarInfo(f"k{i:05d}.{ext}")
                    ti.size = len(body)
                    t.addfile(ti, io.BytesIO(body))
        paths.append(str(p))
    r = subprocess.run([SLUICE, "index"] + paths, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    script = tmp_path / "rank.py"
    script.write_text(RANK_PY)
    with httpfix.Nginx(str(root)) as ng:
        env = env_for(tmp_path)
        r = subprocess.run([sys.executable, str(script), ng.url + "/w-{0..7}.tar"], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        labels = [int(x) for x in r.stdout.split()]
        assert len(labels) == 8 * per // 4
        read = {v // per for v in labels}
        assert len(read) == 2, read
        fetched = {int(f.rsplit("w-", 1)[1].split(".")[0]) for f in os.listdir(tmp_path / "cache")
                   if f.endswith(".tar")}
        assert fetched == read, (fetched, read)
        assert "without a sidecar index" not in r.stderr
        # without the indexes every shard is fetched at open, and the run says so
        for p in paths:
            os.unlink(p + ".slidx")
        env = env_for(tmp_path, SLUICE_CACHE_DIR=tmp_path / "cache2")
        r = subprocess.run([sys.executable, str(script), ng.url + "/w-{0..7}.tar"], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "8 remote shards without a sidecar index" in r.stderr and "sluice index" in r.stderr
        assert len([f for f in os.listdir(tmp_path / "cache2") if f.endswith(".tar")]) == 8


def test_directory_fetches_only_the_shards_read(tmp_path, data, web):
    """A dataset directory over HTTP is planned from its manifest: opening it
    reads the manifest (into the cache) and the first shard's header (a range
    request), and a
    shard is fetched into the cache only when a record of it is read. A rank
    that reads two shards of several fetches those two."""
    man = json.load(open(os.path.join(data, "ds", "manifest.json")))
    assert len(man["shards"]) >= 4
    firsts = [s["first"] for s in man["shards"]]
    code = f"""
import os, sluice
cache = os.environ["SLUICE_CACHE_DIR"]
def cached():
    if not os.path.isdir(cache):
        return []
    return sorted(f.split("-", 1)[1] for f in os.listdir(cache)
                  if not f.startswith(".") and not f.endswith(".lock"))
r = sluice.Reader({web.url + '/ds'!r})
print(len(r), len(r.shards), cached())
got = [bytes(r[i]["blob"]) for i in ({firsts[1]}, {firsts[3]}, {firsts[3] + 1})]
print(cached())
import hashlib
print(hashlib.sha256(b"".join(got)).hexdigest())
"""
    r = subprocess.run([sys.executable, "-c", code], env=env_for(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    opened, after, digest = r.stdout.splitlines()
    # the manifest is cached too (a warm run reads it from there)
    assert opened == f"{N} {len(man['shards'])} ['manifest.json']"
    assert after == str(["manifest.json", "shard-00001.slr", "shard-00003.slr"])
    loc = sluice.Reader(data + "/ds")
    import hashlib
    want = b"".join(bytes(loc[i]["blob"]) for i in (firsts[1], firsts[3], firsts[3] + 1))
    assert digest == hashlib.sha256(want).hexdigest()


# ---- integrity end to end: bytes damaged on the way heal, or fail naming both tries ----

def indexed_wds(data, root):
    """A copy of the WebDataset shards, indexed there (`sluice index`), then
    copied again as a user would upload them: plain copies, new mtimes."""
    import shutil
    work = os.path.join(root, "work")
    os.makedirs(work)
    paths = []
    for s in range(4):
        p = os.path.join(work, f"wds-{s:05d}.tar")
        shutil.copyfile(os.path.join(data, f"wds-{s:05d}.tar"), p)
        paths.append(p)
    r = subprocess.run([SLUICE, "index"] + paths, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    served = os.path.join(root, "served")
    os.makedirs(served)
    time.sleep(0.01)
    for p in paths:  # a copy without -p: the data's mtime is now, not the index's
        for q in (p, p + ".slidx"):
            shutil.copyfile(q, os.path.join(served, os.path.basename(q)))
    return served


def test_index_stays_valid_after_a_plain_copy(tmp_path, data):
    """An index is valid as long as the bytes are the same: shards indexed,
    then copied with their .slidx without keeping times (cp -r, an upload),
    read locally and over HTTP like the originals."""
    served = indexed_wds(data, str(tmp_path))
    want = local_digest(tmp_path, data, {"webdataset": data + "/wds-{00000..00003}.tar"})
    src = lambda b: {"webdataset": b + "/wds-{00000..00003}.tar", "index": True}  # noqa: E731
    assert digests(run_spec(tmp_path, src(served), env_for(tmp_path))) == want
    with httpfix.Nginx(served) as ng:
        r = run_spec(tmp_path, src(ng.url), env_for(tmp_path))
        assert digests(r) == want
        assert "stale" not in r.stderr


@pytest.mark.parametrize("kind", ["slr", "wds", "slidx"])
def test_byte_flipped_in_transit_heals(tmp_path, data, kind):
    """One bit flipped in the body of one response (a faulty proxy; the
    length is right): a .slr shard (its record checksums), an indexed tar
    shard (its index's checksums) or a .slidx (its own checksum) that arrives
    damaged is fetched again, and the run gives the local data, with a
    warning that says so; the cache then holds the good copy (a second run,
    straight from the server, gives the same). Bytes damaged on every fetch
    fail, naming the URL and both attempts."""
    if kind == "slr":
        root, target = data, "/ds/shard-00001.slr"
        src = lambda b: {"path": b + "/ds"}  # noqa: E731
        want = local_digest(tmp_path, data, src(data))
    else:
        root = indexed_wds(data, str(tmp_path))
        target = "/wds-00002.tar" + (".slidx" if kind == "slidx" else "")
        src = lambda b: {"webdataset": b + "/wds-{00000..00003}.tar", "index": True}  # noqa: E731
        want = local_digest(tmp_path, data, {"webdataset": data + "/wds-{00000..00003}.tar"})
    with httpfix.Nginx(root) as ng:
        px = httpfix.FaultProxy(ng.port, flip=target, flip_max=1)
        try:
            r = run_spec(tmp_path, src(px.url), env_for(tmp_path))
            assert px.counts["flip"] == 1
            assert digests(r) == want, r.stderr
            assert "fetched again" in r.stderr and px.url + target in r.stderr, r.stderr
        finally:
            px.close()
        r = run_spec(tmp_path, src(ng.url), env_for(tmp_path))
        assert digests(r) == want and "fetched again" not in r.stderr, r.stderr
        px = httpfix.FaultProxy(ng.port, flip=target)
        try:
            r = run_spec(tmp_path, src(px.url), env_for(tmp_path, SLUICE_CACHE_DIR=tmp_path / "c2"),
                         check=False)
            assert r.returncode != 0
            assert px.url + target in r.stderr and "damaged twice" in r.stderr, r.stderr
            assert px.counts["flip"] == 2, px.counts
        finally:
            px.close()


def test_unindexed_tar_over_http_warns_and_strict_refuses(tmp_path, data, web):
    """Nothing can check an unindexed tar shard's bytes end to end over plain
    HTTP: the run says so once, with the fix; SLUICE_INTEGRITY=strict refuses."""
    src = {"webdataset": web.url + "/wds-{00000..00003}.tar"}
    r = run_spec(tmp_path, src, env_for(tmp_path))
    assert r.stderr.count("nothing checks their bytes end to end") == 1, r.stderr
    assert "sluice index" in r.stderr
    r = run_spec(tmp_path, src, env_for(tmp_path, SLUICE_INTEGRITY="strict"), check=False)
    assert r.returncode != 0
    assert "SLUICE_INTEGRITY=strict" in r.stderr and web.url + "/wds-00000.tar" in r.stderr
    assert "sluice index" in r.stderr


@pytest.mark.parametrize("kind", ["slr", "wds"])
def test_warm_run_asks_nothing_within_the_ttl(tmp_path, data, kind):
    """With the shard cache warm, a run asks the server nothing about objects
    validated within SLUICE_CACHE_TTL seconds (manifest, shards, .slidx files
    all come from the cache); once the TTL has passed, at most one HEAD per
    object, and no body is fetched again."""
    if kind == "slr":
        root = data
        src = lambda b: {"path": b + "/ds"}  # noqa: E731
        want = local_digest(tmp_path, data, src(data))
    else:
        root = indexed_wds(data, str(tmp_path))
        src = lambda b: {"webdataset": b + "/wds-{00000..00003}.tar", "index": True}  # noqa: E731
        want = local_digest(tmp_path, data, {"webdataset": data + "/wds-{00000..00003}.tar"})
    with httpfix.Nginx(root) as ng:
        px = httpfix.FaultProxy(ng.port)
        try:
            assert digests(run_spec(tmp_path, src(px.url), env_for(tmp_path))) == want
            cold = len(px.requests)
            assert cold > 0
            r = run_spec(tmp_path, src(px.url), env_for(tmp_path))
            assert digests(r) == want
            assert px.requests[cold:] == [], px.requests[cold:]
            # a TTL longer than the run itself, so each object is asked
            # about once (a 2 s TTL ran out again within a run on a loaded
            # machine, and an object asked at open was asked again later)
            time.sleep(6.2)
            n = len(px.requests)
            r = run_spec(tmp_path, src(px.url), env_for(tmp_path, SLUICE_CACHE_TTL=6))
            assert digests(r) == want
            late = px.requests[n:]
            assert late and all(m == "HEAD" for m, _ in late), late
            paths = [p for _, p in late]
            assert len(paths) == len(set(paths)), late
        finally:
            px.close()


def test_indexed_shard_opens_overlap_stalls(tmp_path):
    """Indexed WebDataset shards through a server that stalls 3 s on every
    10th request: the index headers are read for all shards at once, so
    opening costs about one stall (or two, when one thread meets two), not
    one per ten requests in a row (24 shards, about 3 requests each: 7
    stalls, 21 s, one after another). sluice.webdataset opens the source; the
    bound leaves room for a loaded machine. Run three times."""
    root = tmp_path / "wds"
    root.mkdir()
    paths = []
    for s in range(24):
        p = root / f"st-{s:02d}.tar"
        with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as t:
            for i in range(4):
                body = str(s * 4 + i).encode()
                ti = tarfile.TarInfo(f"k{s:02d}{i}.cls")
                ti.size = len(body)
                t.addfile(ti, io.BytesIO(body))
        paths.append(str(p))
    r = subprocess.run([SLUICE, "index"] + paths, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with httpfix.Nginx(str(root)) as ng:
        for trial in range(3):
            px = httpfix.FaultProxy(ng.port, stall_every=10, stall_s=3)
            try:
                env = env_for(tmp_path, SLUICE_CACHE_DIR=tmp_path / f"c{trial}")
                t0 = time.monotonic()
                r = subprocess.run([sys.executable, "-c", "import sys, sluice; "
                                    "print(len(sluice.webdataset(sys.argv[1])))",
                                    px.url + "/st-{00..23}.tar"], env=env,
                                   capture_output=True, text=True, timeout=120)
                took = time.monotonic() - t0
                assert r.returncode == 0, r.stderr
                assert r.stdout.split() == ["96"]
                assert px.counts["stall"] >= 5, px.counts
                assert took < 12, (took, px.counts)
            finally:
                px.close()


@pytest.mark.parametrize("cache", ["disk", "memory"])
def test_repr_digest_catches_a_flip_in_an_unindexed_shard(tmp_path, data, cache):
    """A server that sends Repr-Digest (RFC 9530) lets even an unindexed tar
    shard be checked: a bit flipped on the way is caught before the bytes
    enter the cache (or memory, with cache_bytes 0), the shard is fetched
    again and the run gives the local data; flipped on every fetch, the run
    fails naming the URL, the digest and both attempts."""
    src = lambda b: {"webdataset": b + "/wds-{00000..00003}.tar"}  # noqa: E731
    want = local_digest(tmp_path, data, src(data))
    extra = {} if cache == "disk" else {"SLUICE_CACHE_BYTES": 0}
    with httpfix.Nginx(data) as ng:
        px = httpfix.FaultProxy(ng.port, flip="/wds-00001.tar", flip_max=1, repr_digest=True)
        try:
            r = run_spec(tmp_path, src(px.url), env_for(tmp_path, **extra))
            assert px.counts["flip"] == 1
            assert digests(r) == want, r.stderr
            assert "SHA-256" in r.stderr and "Repr-Digest" in r.stderr and "fetched again" in r.stderr
        finally:
            px.close()
        px = httpfix.FaultProxy(ng.port, flip="/wds-00001.tar", repr_digest=True)
        try:
            r = run_spec(tmp_path, src(px.url), env_for(tmp_path, SLUICE_CACHE_DIR=tmp_path / "c2",
                                                        **extra), check=False)
            assert r.returncode != 0
            assert px.url + "/wds-00001.tar" in r.stderr and "damaged twice" in r.stderr, r.stderr
            assert "Repr-Digest" in r.stderr
        finally:
            px.close()


def test_server_ignoring_range_is_read_whole_once(tmp_path, data, web):
    """A server that ignores Range (200 and the whole object to every range
    request), with cache_bytes 0 (a .slr read by ranges): each shard is
    fetched whole once, then read from memory — not one whole-object transfer
    per record — and the run says why, once, with what would be faster."""
    want = local_digest(tmp_path, data, {"path": data + "/ds"})
    nshards = len(json.load(open(os.path.join(data, "ds", "manifest.json")))["shards"])
    px = httpfix.FaultProxy(web.port, norange=1.0)
    try:
        r = run_spec(tmp_path, {"path": px.url + "/ds"}, env_for(tmp_path, SLUICE_CACHE_BYTES=0))
        assert digests(r) == want
        # per shard: the range that found out, its whole fetch, and a few
        # ranges already in flight then; the manifest and the first header
        assert px.gets <= 6 * nshards + 4, (px.gets, nshards)
        assert r.stderr.count("ignores Range requests") == 1, r.stderr
    finally:
        px.close()


def test_unindexed_tfrecord_flipped_in_transit_heals(tmp_path):
    """An unindexed TFRecord file over HTTP is checked record by record
    (CRC-32C) when fetched: a bit flipped on the way is fetched again, and
    the run equals the local one."""
    pytest.importorskip("crc32c")
    import test_sources as ts
    root = tmp_path / "tf"
    root.mkdir()
    ts.write_tfrecords(ts.tf_messages(tmp_path), str(root))
    src = lambda base: {"tfrecord": base + "/part-{0,1}.tfrecord",  # noqa: E731
                        "features": {"image/encoded": "image", "image/class/label": "label"}}
    want = [l for l in run_spec(tmp_path, src(str(root)), env_for(tmp_path)).stdout.splitlines() if ":" in l]
    assert want
    with httpfix.Nginx(str(root)) as ng:
        px = httpfix.FaultProxy(ng.port, flip="/part-1.tfrecord", flip_max=1)
        try:
            r = run_spec(tmp_path, src(px.url), env_for(tmp_path))
            assert px.counts["flip"] == 1
            assert [l for l in r.stdout.splitlines() if ":" in l] == want
            assert "data checksum mismatch" in r.stderr and "fetched again" in r.stderr, r.stderr
        finally:
            px.close()


def test_object_changed_within_the_ttl_is_asked_again(tmp_path, data):
    """An object remembered (SLUICE_CACHE_TTL) but no longer in the cache,
    whose size changed on the server meanwhile, is not read as a prefix or
    fails: the whole fetch sees the new size, the object is asked about
    again and opened anew."""
    import shutil
    root = tmp_path / "srv"
    root.mkdir()
    for s in range(4):
        shutil.copyfile(os.path.join(data, f"wds-{s:05d}.tar"), root / f"wds-{s:05d}.tar")
    pattern = "/wds-{00000..00003}.tar"
    with httpfix.Nginx(str(root)) as ng:
        def records():
            r = subprocess.run([SLUICE, "info", ng.url + pattern, "--json"], env=env_for(tmp_path),
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout)["records"]
        assert records() == N
        cache = tmp_path / "cache"
        for f in os.listdir(cache):
            if f.endswith(".tar"):
                os.unlink(cache / f)
        with tarfile.open(root / "wds-00003.tar", "w", format=tarfile.USTAR_FORMAT) as t:
            for i in range(7):
                ti = tarfile.TarInfo(f"z{i:06d}.cls")
                ti.size = 1
                t.addfile(ti, io.BytesIO(b"7"))
        assert records() == 3 * N // 4 + 7


EDGE_RANGES = {"bytes=-262144", "bytes=0-65535"}  # io.h: SL_IO_EDGE_TAIL, SL_IO_EDGE_HEAD


def shard_requests(px, start, path_end):
    """(method, Range) of the requests since `start` for a path ending so."""
    return [(m, h.get("range")) for (m, p), h in zip(px.requests[start:], px.seen_headers[start:])
            if p.endswith(path_end)]


@pytest.mark.parametrize("mmap", [False, True])
def test_slr_shard_opens_in_one_round_trip(tmp_path, data, mmap):
    """A .slr shard read by ranges (no shard cache) opens with two requests
    sent at once and no HEAD: its last 256 KiB (a suffix range, which brings
    the footer, the index and the object's size) and its first 64 KiB (the
    header). Before, an open was five requests in a row (HEAD, header, the
    header's rest, footer, index): through a proxy adding 400 ms a request,
    2 s. (A Reader of one file asks first what the name is: one HEAD.) A shard no longer than the tail is whole after the open: reading
    and verifying every record asks nothing more."""
    root = tmp_path / "srv"
    root.mkdir()
    # about 600 KB: bigger than both edges together
    write_blobs(root / "big.slr", 300, 2000, 0, seed=9)
    os.symlink(os.path.join(data, "one.slr"), root / "one.slr")  # about 160 KB: whole
    env = env_for(tmp_path, SLUICE_CACHE_BYTES=0)
    with httpfix.Nginx(str(root)) as ng:
        px = httpfix.FaultProxy(ng.port, delay_ms=400)
        fast = httpfix.FaultProxy(ng.port)  # reading every record: no delay
        try:
            for name, whole in (("big.slr", False), ("one.slr", True)):
                url = f"{px.url}/{name}"
                code = f"""
import json, time, sluice
took = []
for _ in range(3):
    t = time.monotonic()
    r = sluice.Reader({url!r}, mmap={mmap})
    took.append(time.monotonic() - t)
    n = len(r)
    del r
print(json.dumps([min(took), n]))
"""
                start = len(px.requests)
                r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                   text=True, timeout=120)
                assert r.returncode == 0, r.stderr
                took, n = json.loads(r.stdout.splitlines()[-1])
                reqs = shard_requests(px, start, "/" + name)
                # three opens: each asks what the name is (a file or a
                # directory: one HEAD), then the edge pair
                assert len(reqs) == 9, reqs
                assert [m for m, _ in reqs].count("HEAD") == 3, reqs
                assert {rg for m, rg in reqs if m == "GET"} == EDGE_RANGES, reqs
                # two round trips (the HEAD, then the pair at once), not six in a row
                assert took < 1.6, (name, took)
                # every record, checked; a whole shard asks nothing more
                code = f"""
import sluice
r = sluice.Reader({fast.url + '/' + name!r}, mmap={mmap})
print(len(r), sum(int(r[i]["idx"]) for i in range(len(r))), r.verify())
"""
                start = len(fast.requests)
                r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                   text=True, timeout=120)
                assert r.returncode == 0, r.stderr
                assert r.stdout.split() == [str(n), str(n * (n - 1) // 2), "0"], r.stdout
                reqs = shard_requests(fast, start, "/" + name)
                reqs = [q for q in reqs if q[0] == "GET"]
                if whole:
                    assert sorted(rg for _, rg in reqs) == sorted(EDGE_RANGES), reqs
                else:
                    assert len(reqs) > 2 and all(rg for _, rg in reqs), reqs
        finally:
            px.close()
            fast.close()


def test_dataset_shards_open_in_one_round_trip(tmp_path, data, web):
    """A .slr dataset directory read by ranges: each shard's open is the
    edge pair (no HEAD), and these small shards (40 KB) are whole after it:
    two epochs ask each shard nothing more; the manifest comes by the edge
    pair too. Before: five requests in a row per open, then a range request
    per record (or per run of neighbours), and HEAD, HEAD, GET for the
    manifest."""
    want = local_digest(tmp_path, data, {"path": data + "/ds"})
    man = json.load(open(os.path.join(data, "ds", "manifest.json")))
    files = [s["file"] for s in man["shards"]]
    assert len(files) >= 3
    px = httpfix.FaultProxy(web.port)
    try:
        # named with its '/': a directory without asking; then no HEAD at
        # all, the manifest too comes by the edge pair
        got = digests(run_spec(tmp_path, {"path": px.url + "/ds/"},
                               env_for(tmp_path, SLUICE_CACHE_BYTES=0)))
        assert got == want
        assert all(m == "GET" for m, _ in px.requests), px.requests
        reqs = shard_requests(px, 0, "/manifest.json")
        assert sorted(rg for _, rg in reqs) == sorted(EDGE_RANGES), reqs
        n = len(px.requests)
        got = digests(run_spec(tmp_path, {"path": px.url + "/ds"},
                               env_for(tmp_path, SLUICE_CACHE_BYTES=0)))
        assert got == want
        for k, f in enumerate(files):
            reqs = shard_requests(px, n, "/" + f)
            if k == 0:  # the dataset's open asks shard 0 for its schema first
                assert [m for m, _ in reqs].count("HEAD") <= 1, reqs
                reqs = [q for q in reqs if q[0] == "GET"]
                assert len(reqs) == 4 and {rg for _, rg in reqs} == EDGE_RANGES, reqs
            else:
                assert sorted(rg for _, rg in reqs) == sorted(EDGE_RANGES), reqs
                assert all(m == "GET" for m, _ in reqs), reqs
    finally:
        px.close()


def test_sidecar_index_opens_in_one_round_trip(tmp_path, data):
    """A tar shard's .slidx over HTTP with no shard cache: each load of it is
    the edge pair sent at once (the index is small: whole after it), no HEAD
    first. Before: a HEAD to ask whether it exists, a HEAD to open it, then a
    GET, in a row. A missing index is still found missing (index: true names
    it)."""
    served = indexed_wds(data, str(tmp_path))
    want = local_digest(tmp_path, data, {"webdataset": data + "/wds-{00000..00003}.tar"})
    with httpfix.Nginx(served) as ng:
        px = httpfix.FaultProxy(ng.port)
        try:
            src = {"webdataset": px.url + "/wds-{00000..00003}.tar", "index": True}
            env = env_for(tmp_path, SLUICE_CACHE_BYTES=0)
            assert digests(run_spec(tmp_path, src, env)) == want
            for s in range(4):
                reqs = shard_requests(px, 0, f"/wds-{s:05d}.tar.slidx")
                assert reqs and all(m == "GET" for m, _ in reqs), reqs
                assert len(reqs) % 2 == 0 and {rg for _, rg in reqs} == EDGE_RANGES, reqs
            os.remove(os.path.join(served, "wds-00002.tar.slidx"))
            r = run_spec(tmp_path, src, env, check=False)
            assert r.returncode == 1 and "wds-00002.tar" in r.stderr, r.stderr
        finally:
            px.close()


@pytest.mark.parametrize("cut", [0.7, 0.999, 0.02])
def test_truncated_shard_opened_by_its_edges_names_the_url(tmp_path, data, cut):
    """A .slr cut short on the server (its footer gone), read by ranges: the
    open that brings its edges fails naming the URL and what is wrong, in
    the edges' one round trip; a sound file right after, in the same
    process, reads whole."""
    root = tmp_path / "srv"
    root.mkdir()
    write_blobs(root / "big.slr", 300, 2000, 0, seed=11)
    whole = (root / "big.slr").read_bytes()
    (root / "cut.slr").write_bytes(whole[: max(1, int(len(whole) * cut))])
    with httpfix.Nginx(str(root)) as ng:
        px = httpfix.FaultProxy(ng.port)
        try:
            code = f"""
import sluice
try:
    sluice.Reader({px.url + '/cut.slr'!r}, mmap=False)
    print("opened")
except Exception as e:
    print("error:", e)
r = sluice.Reader({px.url + '/big.slr'!r}, mmap=False)
print(len(r), sum(int(r[i]["idx"]) for i in range(len(r))))
"""
            r = subprocess.run([sys.executable, "-c", code], env=env_for(tmp_path, SLUICE_CACHE_BYTES=0),
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            err, good = r.stdout.splitlines()
            assert err.startswith("error:") and px.url + "/cut.slr" in err, err
            assert re.search(r"truncated|no footer|not a sluice record|shorter than a header", err), err
            assert good == f"300 {300 * 299 // 2}", good
            # edge pairs (the open and the heal's second try) and small
            # ranges, never the whole object
            cut_reqs = [q for q in shard_requests(px, 0, "/cut.slr") if q[0] == "GET"]
            assert cut_reqs[:2] and {rg for _, rg in cut_reqs[:2]} == EDGE_RANGES, cut_reqs
            assert all(rg for _, rg in cut_reqs), cut_reqs
        finally:
            px.close()


def test_object_replaced_between_the_edge_answers_is_asked_again(tmp_path, data):
    """The two answers of an edge open describe different versions of the
    object (another ETag): the open asks again, once; when that pair
    differs too the open fails naming the URL and why."""
    with httpfix.Nginx(data) as ng:
        for vary, ok in ((1, True), (None, False)):
            px = httpfix.FaultProxy(ng.port, etag_vary=vary)
            try:
                code = f"""
import sluice
r = sluice.Reader({px.url + '/one.slr'!r}, mmap=False)
print(len(r), r.verify())
"""
                r = subprocess.run([sys.executable, "-c", code], env=env_for(tmp_path, SLUICE_CACHE_BYTES=0),
                                   capture_output=True, text=True, timeout=120)
                gets = [q for q in shard_requests(px, 0, "/one.slr") if q[0] == "GET"]
                if ok:
                    assert r.returncode == 0, r.stderr
                    assert r.stdout.split() == [str(N), "0"]
                    assert len(gets) == 4, gets  # two pairs
                else:
                    assert r.returncode != 0
                    assert px.url + "/one.slr" in r.stderr and "changed on the server" in r.stderr, r.stderr
            finally:
                px.close()


def test_epoch_start_opens_every_shard_in_one_round_trip(tmp_path):
    """The first hints of a shuffled epoch reach every shard: each shard not
    open is opened by its own opener thread at once (8 shards, 8 threads),
    so all opens are one round trip, then the first batch. Before, the
    threads took the hints in order and several waited on one shard's open
    while others were not yet asked: the opens came in two or three waves of
    a round trip each (through a proxy adding 400 ms a request, 0.8 s more
    before the first batch). And an opener thread never takes a hint of a
    shard still being opened (it would wait for that open while a shard not
    asked for yet waited for a thread: one run in six or so had a second
    wave). Three runs; each gives the local run's batches in one wave."""
    root = tmp_path / "srv"
    root.mkdir()
    write_blobs(root / "ds", 80, 1800, 20000, seed=21)
    files = [s["file"] for s in json.load(open(root / "ds" / "manifest.json"))["shards"]]
    assert len(files) == 8, files
    spec = {"source": {"path": str(root / "ds"), "shuffle": True}, "seed": 3, "epochs": 1,
            "ops": [{"op": "batch", "size": 16}]}

    def run(path, env):
        spec["source"]["path"] = path
        return run_json(tmp_path, spec, env)

    want = run(str(root / "ds"), env_for(tmp_path))
    assert len(want) == 5
    # a second wave starts at least one round trip (delay) after the first:
    # the bound sits at 0.7 of it, room for a loaded machine's scheduling
    delay = 0.6
    with httpfix.Nginx(str(root)) as ng:
        for trial in range(3):
            px = httpfix.FaultProxy(ng.port, delay_ms=int(delay * 1000))
            px.requests = httpfix.TimedList()
            try:
                got = run(px.url + "/ds/", env_for(tmp_path, SLUICE_CACHE_BYTES=0))
                assert got == want
                reqs = list(zip(px.requests, px.requests.times))
                # the manifest's edge pair, then shard 0's (the schema), one
                # round trip each; then the epoch's opens
                assert [p for (_, p), _ in reqs[:4]] == ["/ds/manifest.json"] * 2 + \
                    ["/ds/" + files[0]] * 2, reqs[:4]
                first = {}
                for (_, p), t in reqs[4:]:
                    first.setdefault(p, t)
                assert sorted(first) == sorted("/ds/" + f for f in files), sorted(first)
                spread = max(first.values()) - min(first.values())
                assert spread < 0.7 * delay, (trial, spread, sorted(first.items(), key=lambda kv: kv[1]))
            finally:
                px.close()
