"""One object, one version for as long as a run reads it (docs/SOURCES.md,
"One version per run"), against nginx on localhost: tar shards (scanned and
indexed), TFRecord files (scanned and indexed) and a .slr dataset directory,
each replaced on the server by a version of the same size (other bytes in
every record) between runs and during one, with max_open_shards 2 so that a
shuffled epoch closes and reopens shards.

Each record says which version it is (its bytes are a function of its
number and the version), so a test counts what a run delivered: records of
the version it started with, of the new one, and of neither (a record cut
from the new bytes at the old offsets, what an unindexed tar shard gave
before). Also here: the messages of answers that are not the object as
stored (gzip; a 200 without a length to a suffix range) and the shard
cache's privacy (folders 0700 and files 0600 whatever the umask,
SLUICE_CACHE_MODE, a looser folder said once)."""
import http.server
import io
import json
import os
import shutil
import socketserver
import stat
import subprocess
import sys
import tarfile
import threading

import numpy as np
import pytest

import sluice

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts"))
import httpfix  # noqa: E402
import tfrecord_wire as tw  # noqa: E402
from test_remote import env_for  # noqa: E402  (the remote tests' environment: cache, backoff)

SLUICE = os.environ.get("SLUICE_BIN") or os.path.join(HERE, "..", "..", "build", "sluice")

pytestmark = pytest.mark.skipif(not httpfix.have_nginx(), reason="nginx not installed (scripts/deps.sh)")

SHARDS, PER = 8, 12
N = SHARDS * PER
KINDS = ["tar", "tar-indexed", "tfrecord", "tfrecord-indexed", "slr"]
T0 = 1_700_000_000  # mtimes: version v is T0 + 1000 v (nginx's ETag is mtime and size)


def blob(i, v):
    """Record i's bytes in version v: its length never depends on v."""
    n = 150 + (i * 37) % 200
    return bytes(((i * 7 + k * 13 + v * 101) & 255) for k in range(n))


def example(i, v):
    """A tf.train.Example of {"idx": [i], "blob": [blob(i, v)]} (wire format)."""
    def feature(key, f):
        return tw.field(1, tw.field(1, key.encode()) + tw.field(2, f))
    idx = tw.field(3, tw.field(1, tw.varint(i)))       # Feature.int64_list
    data = tw.field(1, tw.field(1, blob(i, v)))        # Feature.bytes_list
    return tw.field(1, feature("idx", idx) + feature("blob", data))


def write_version(root, kind, v):
    """Version v of the `kind` dataset under `root` (made anew)."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    if kind == "slr":
        with sluice.Writer(os.path.join(root, "ds"), [("idx", "int64"), ("blob", "bytes")],
                           shard_bytes=4000, fsync=False) as w:
            for i in range(N):
                w.append({"idx": i, "blob": blob(i, v)})
        assert len([f for f in os.listdir(os.path.join(root, "ds")) if f.endswith(".slr")]) >= 6
        return
    paths = []
    for s in range(SHARDS):
        rng = range(s * PER, (s + 1) * PER)
        if kind.startswith("tar"):
            p = os.path.join(root, f"t-{s:02d}.tar")
            with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as t:
                for i in rng:
                    for ext, data in (("cls", b"%05d" % i), ("bin", blob(i, v))):
                        ti = tarfile.TarInfo(f"s{i:05d}.{ext}")
                        ti.size = len(data)
                        ti.mtime = 0
                        t.addfile(ti, io.BytesIO(data))
        else:
            p = os.path.join(root, f"f-{s:02d}.tfrecord")
            with open(p, "wb") as f:
                for i in rng:
                    f.write(tw.frame(example(i, v)))
        paths.append(p)
    if kind.endswith("indexed"):
        r = subprocess.run([SLUICE, "index"] + paths, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def publish(src, srv, v):
    """Put version v's files (from `src`) where nginx serves them, each
    written under a temporary name and renamed into place (an upload), with
    version v's mtime."""
    for d, _, files in os.walk(src):
        out = os.path.join(srv, os.path.relpath(d, src))
        os.makedirs(out, exist_ok=True)
        for f in files:
            tmp = os.path.join(out, "." + f + ".up")
            shutil.copyfile(os.path.join(d, f), tmp)
            os.utime(tmp, (T0 + 1000 * v, T0 + 1000 * v))
            os.replace(tmp, os.path.join(out, f))


def source(kind, base):
    if kind == "slr":
        return {"path": base + "/ds", "max_open_shards": 2}
    if kind.startswith("tar"):
        return {"webdataset": base + "/t-{00..07}.tar", "max_open_shards": 2,
                "index": kind.endswith("indexed")}
    return {"tfrecord": base + "/f-{00..07}.tfrecord", "max_open_shards": 2,
            "index": kind.endswith("indexed")}


# A run in its own process (the HTTP layer reads its settings once per
# process): two shuffled epochs; with `pause`, after that many batches it
# prints "paused" and waits for a line on stdin (the test replaces the
# files meanwhile). Prints one JSON line: records of each version, of
# neither, and the error that ended it, if any.
RUN = r"""
import json, sys
import numpy as np
import sluice
sys.path.insert(0, sys.argv[4])
from test_versions import blob, N
src, pause, skip = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
col = "bin" if "webdataset" in src else "blob"
idx = "cls" if "webdataset" in src else "idx"
if "path" in src:
    ds = sluice.records(src["path"], max_open_shards=src["max_open_shards"])
elif "webdataset" in src:
    ds = sluice.webdataset(src["webdataset"], index=src["index"], max_open_shards=src["max_open_shards"])
else:
    ds = sluice.tfrecord(src["tfrecord"], index=src["index"], max_open_shards=src["max_open_shards"])
ds = ds.shuffle(seed=3).batch(4)
if skip:
    ds = ds.on_error("skip")
count = {"v1": 0, "v2": 0, "neither": 0, "batches": 0, "error": None}
try:
    for ep in range(3):
        ds.set_epoch(ep)
        for b in ds.numpy():
            for i, data in zip(b[idx], b[col]):
                data = bytes(np.asarray(data, dtype=np.uint8))
                v = [v for v in (1, 2) if data == blob(int(i), v)]
                count["v%d" % v[0] if v else "neither"] += 1
            count["batches"] += 1
            if count["batches"] == pause:
                print("paused", flush=True)
                sys.stdin.readline()
except sluice.Error as e:
    count["error"] = str(e)
print(json.dumps(count), flush=True)
"""


def run(src, env, pause=0, skip=False, between=None):
    p = subprocess.Popen([sys.executable, "-c", RUN, json.dumps(src), str(pause), "1" if skip else "0", HERE],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        if pause:
            line = p.stdout.readline()
            assert line.strip() == "paused", (line, p.stderr.read())
            between()
            p.stdin.write("\n")
            p.stdin.flush()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lines = [l for l in out.splitlines() if l.startswith("{")]
    assert lines, (out, err)
    return json.loads(lines[-1]), err


@pytest.fixture
def served(tmp_path):
    """(kind) -> (srv, v1 dir, v2 dir, nginx): both versions made, v1 served."""
    made = []

    def make(kind):
        v1, v2, srv = tmp_path / "v1", tmp_path / "v2", tmp_path / "srv"
        write_version(str(v1), kind, 1)
        write_version(str(v2), kind, 2)
        publish(str(v1), str(srv), 1)
        ng = httpfix.Nginx(str(srv))
        made.append(ng)
        return srv, v1, v2, ng
    yield make
    for ng in made:
        ng.close()


def same_sizes(a, b):
    for d, _, files in os.walk(a):
        for f in files:
            pa = os.path.join(d, f)
            pb = os.path.join(b, os.path.relpath(pa, a))
            if not f.endswith(".slidx") and f != "manifest.json":
                assert os.path.getsize(pa) == os.path.getsize(pb), pa


@pytest.mark.parametrize("kind", KINDS)
def test_replaced_between_runs(tmp_path, served, kind):
    """A run reads one version whole: within the TTL the cached one (every
    record of version 1), after it (TTL 0 here) the new one (every record of
    version 2: rescanned, or checked against its new index); never a mix."""
    srv, v1, v2, ng = served(kind)
    same_sizes(str(v1), str(v2))
    src = source(kind, ng.url)
    got, err = run(src, env_for(tmp_path))
    assert got["error"] is None and got["v1"] == 3 * N and got["v2"] == got["neither"] == 0, (got, err)
    publish(str(v2), str(srv), 2)
    got, err = run(src, env_for(tmp_path))  # within the TTL: the cached version 1
    assert got["error"] is None and got["v1"] == 3 * N and got["v2"] == got["neither"] == 0, (got, err)
    got, err = run(src, env_for(tmp_path, SLUICE_CACHE_TTL=0))
    assert got["error"] is None and got["v2"] == 3 * N and got["v1"] == got["neither"] == 0, (got, err)


@pytest.mark.parametrize("kind", KINDS)
def test_replaced_during_a_run_reads_on_the_cached_version(tmp_path, served, kind):
    """Replaced after the first epoch (every shard read once, so each one's
    version 1 is in the shard cache), with SLUICE_CACHE_TTL=0 so that each
    reopen asks the server: the run reads on version 1 from the cache, says
    once per object that it was replaced, and delivers no record of version
    2 or of neither."""
    srv, v1, v2, ng = served(kind)
    src = source(kind, ng.url)
    got, err = run(src, env_for(tmp_path, SLUICE_CACHE_TTL=0), pause=N // 4,
                   between=lambda: publish(str(v2), str(srv), 2))
    assert got["error"] is None, (got, err)
    assert got["v1"] == 3 * N and got["v2"] == 0 and got["neither"] == 0, (got, err)
    said = [l for l in err.splitlines() if "replaced on the server since this run first read it" in l]
    assert said and len(said) == len(set(said)) <= 2 * SHARDS, err  # data, index: each once
    assert "the run reads on the version it started with" in said[0], said[0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("skip", [False, True])
def test_replaced_during_a_run_without_a_cache_fails_naming_it(tmp_path, served, kind, skip):
    """With no shard cache (cache_bytes 0) there is no old copy to read on:
    a shard reopened after the replacement fails naming its URL (the run
    stops, or under on_error "skip" its records are skipped and counted),
    and no record of version 2 or of neither is ever delivered."""
    srv, v1, v2, ng = served(kind)
    src = source(kind, ng.url)
    got, err = run(src, env_for(tmp_path, SLUICE_CACHE_BYTES=0), pause=3, skip=skip,
                   between=lambda: publish(str(v2), str(srv), 2))
    assert got["v2"] == 0 and got["neither"] == 0, (got, err)
    assert got["v1"] >= 12, got
    if skip:  # the records of each shard reopened after it are skipped
        assert got["error"] is None and got["v1"] < 3 * N, (got, err)
        return
    msg = got["error"] or ""
    assert ng.url + "/" in msg, (got, err)
    assert ("replaced on the server" in msg or "changed after the source opened" in msg), (got, err)


def test_gzip_answer_says_so(tmp_path, data_dir_small):
    """A server that gzips a whole-object answer nobody asked to be encoded:
    the error says so (it was "its size changed on the server")."""
    with httpfix.Nginx(data_dir_small) as ng:
        px = httpfix.FaultProxy(ng.port, gzip=True)
        try:
            r = subprocess.run([SLUICE, "info", px.url + "/t-00.tar"], env=env_for(tmp_path),
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 1
            assert px.url + "/t-00.tar: the server sent it encoded (Content-Encoding: gzip)" in r.stderr, r.stderr
            assert "size changed" not in r.stderr
        finally:
            px.close()


@pytest.fixture
def data_dir_small(tmp_path):
    root = tmp_path / "small"
    write_version(str(root), "tar", 1)
    return str(root)


class _Chunked(http.server.BaseHTTPRequestHandler):
    """Answers every GET with HTTP 200, the whole body, chunked: no
    Content-Length and no Content-Range, whatever Range was asked."""
    body = b"x" * 5000
    protocol_version = "HTTP/1.1"

    def do_HEAD(self):  # a plain answer: the size, as any server gives it
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()

    def do_GET(self):
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"%x\r\n" % len(self.body) + self.body + b"\r\n0\r\n\r\n")

    def log_message(self, *a):
        pass


def test_suffix_answer_without_a_length_says_what_it_lacked(tmp_path):
    """The last bytes of an object asked for (bytes=-N, a .slr shard read by
    ranges) and answered 200 without a length: the message says that, not
    "Content-Range bytes -1--1/-1"."""
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Chunked)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/one.slr"
        code = f"import sluice; sluice.Reader({url!r}, mmap=False)"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env=env_for(tmp_path, SLUICE_CACHE_BYTES=0, SLUICE_HTTP_TRIES=2))
        assert r.returncode != 0
        assert "HTTP 200 with no Content-Length (its size cannot be known) for the last" in r.stderr, r.stderr
        assert "-1--1" not in r.stderr
    finally:
        srv.shutdown()
        srv.server_close()


def modes(root):
    """{relative path: mode} of everything under root."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = stat.S_IMODE(os.lstat(p).st_mode)
    return out


def run_umask(args, env, umask):
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: os.umask(umask))


def test_cache_is_private_whatever_the_umask(tmp_path, data_dir_small):
    """Folders 0700, files 0600 with umask 0 (it was 0755 and 0644: remote
    data readable by every user of the machine); a looser cache folder that
    exists is said once and left as it is; SLUICE_CACHE_MODE=0770 shares
    the cache with the group on purpose (files 0660) even under umask 077;
    a mode that is not one stops the command before it makes anything."""
    with httpfix.Nginx(data_dir_small) as ng:
        url = ng.url + "/t-{00..07}.tar"
        cache = tmp_path / "cache" / "deep"
        env = env_for(tmp_path, SLUICE_CACHE_DIR=cache)
        r = run_umask([SLUICE, "info", url], env, 0)
        assert r.returncode == 0, r.stderr
        m = modes(tmp_path / "cache")
        assert m["deep"] == 0o700 and m["deep/.meta"] == 0o700, m
        files = {k: v for k, v in m.items() if k not in ("deep", "deep/.meta")}
        assert any(k.endswith("t-00.tar") for k in files), m
        assert any(k.startswith("deep/.meta/") for k in files), m
        assert set(files.values()) == {0o600}, m
        assert "open to other users" not in r.stderr

        os.chmod(cache, 0o755)
        r = run_umask([SLUICE, "info", url], env_for(tmp_path, SLUICE_CACHE_DIR=cache,
                                                     SLUICE_CACHE_TTL=0), 0o022)
        assert r.returncode == 0, r.stderr
        said = [l for l in r.stderr.splitlines() if "open to other users" in l]
        assert len(said) == 1, r.stderr
        assert f"{cache} is open to other users (mode 0755" in said[0]
        assert "chmod 700" in said[0] and "SLUICE_CACHE_MODE=0755" in said[0], said[0]
        assert stat.S_IMODE(os.stat(cache).st_mode) == 0o755  # left as it is

        shared = tmp_path / "shared"
        r = run_umask([SLUICE, "info", url], env_for(tmp_path, SLUICE_CACHE_DIR=shared,
                                                     SLUICE_CACHE_MODE="0770"), 0o077)
        assert r.returncode == 0, r.stderr
        m = modes(shared)
        assert m[".meta"] == 0o770, m
        assert set(v for k, v in m.items() if k != ".meta") == {0o660}, m

        bad = tmp_path / "bad"
        r = run_umask([SLUICE, "info", url], env_for(tmp_path, SLUICE_CACHE_DIR=bad,
                                                     SLUICE_CACHE_MODE="rwx"), 0)
        assert r.returncode == 2, r.stderr
        assert 'SLUICE_CACHE_MODE: must be an octal folder mode that gives its owner rwx' in r.stderr
        assert '(got "rwx")' in r.stderr, r.stderr
        assert not bad.exists()  # refused before anything is made
