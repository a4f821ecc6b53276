"""Real servers for the remote-input tests: nginx on a free localhost port
(private prefix, config, pid and log files in a temporary directory; HTTPS
with a self-signed certificate made here) and a fault-injecting reverse proxy.

Used by tests/python/test_remote.py, tests/cli/remote.sh (through the command
line below), tests/remote/torchrun_check.py, bench/remote_bench.sh and
bench/peers/run.py (nginx, and DelayProxy and Moto below: the C delay proxy
tests/remote/delayproxy.c and moto's S3 server, each on a free port).

    python3 tests/remote/httpfix.py serve ROOT [--https] [--proxy SPEC] [--delay-ms N]
                                        [--delayproxy EXE:MS ...]
        starts nginx (and the proxy), prints one line "URL [CA_FILE]" and runs
        until stdin closes or SIGTERM. Each --delayproxy starts EXE (the C
        delay proxy, tests/remote/delayproxy.c) in front of nginx holding every
        request MS ms; their URLs follow, one a line, in the same write; at exit
        each one's counts go to stderr ("delayproxy MS ms: ...").

Only loopback addresses are used; every request loop is bounded.
"""
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def have_nginx():
    return os.access(NGINX, os.X_OK)


class Nginx:
    """nginx serving `root` read-only on 127.0.0.1 (HTTP, or HTTPS with a
    certificate for 127.0.0.1 and localhost made by openssl)."""

    def __init__(self, root, https=False, port=None):
        self.root = os.path.abspath(root)
        self.https = https
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="sluice-nginx-")
        self.ca = None
        self.proc = None
        for d in ("logs", "tmp"):
            os.makedirs(os.path.join(self.dir, d))
        ssl = ""
        if https:
            key, crt = os.path.join(self.dir, "key.pem"), os.path.join(self.dir, "cert.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                            "-subj", "/CN=127.0.0.1", "-addext",
                            "subjectAltName=IP:127.0.0.1,DNS:localhost",
                            "-keyout", key, "-out", crt], check=True, capture_output=True)
            self.ca = crt
            ssl = f"ssl_certificate {crt}; ssl_certificate_key {key};"
        listen = f"127.0.0.1:{self.port}" + (" ssl http2" if https else "")
        t = os.path.join(self.dir, "tmp")
        # As root, nginx's workers would drop to "nobody" and could not read a
        # private temporary directory: keep the caller's user.
        user = "user root root;" if os.geteuid() == 0 else ""
        conf = f"""
{user}
worker_processes 1;
pid {self.dir}/nginx.pid;
error_log {self.dir}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
  log_format proto '$server_protocol $request_method $status';
  access_log {self.dir}/logs/access.log proto;
  client_body_temp_path {t}/body; proxy_temp_path {t}/proxy;
  fastcgi_temp_path {t}/fcgi; uwsgi_temp_path {t}/uwsgi; scgi_temp_path {t}/scgi;
  types {{ application/octet-stream slr tar tfrecord; application/json json; }}
  default_type application/octet-stream;
  sendfile on; keepalive_requests 100000;
  server {{
    listen {listen}; {ssl}
    server_name localhost;
    root {self.root};
    location / {{ }}
  }}
}}
"""
        self.conf = os.path.join(self.dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(conf)
        self.start()

    @property
    def url(self):
        return f"{'https' if self.https else 'http'}://127.0.0.1:{self.port}"

    def start(self):
        # its own process group, so that stop() kills master and workers
        # at once (a worker outlives a master killed alone); its output
        # goes to the log, not to the caller's pipes
        log = open(os.path.join(self.dir, "logs", "stderr.log"), "ab")
        self.proc = subprocess.Popen([NGINX, "-p", self.dir, "-c", self.conf, "-e",
                                      os.path.join(self.dir, "logs", "error.log"),
                                      "-g", "daemon off;"], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=log, start_new_session=True)
        log.close()
        for _ in range(200):  # bounded: 10 s
            if self.proc.poll() is not None:
                raise RuntimeError("nginx exited: " + open(os.path.join(self.dir, "logs", "error.log")).read())
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not start listening")

    def protocols(self):
        """The protocol of each request served so far ("HTTP/1.1", "HTTP/2.0")."""
        try:
            with open(os.path.join(self.dir, "logs", "access.log")) as f:
                return [l.split()[0] for l in f if l.strip()]
        except OSError:
            return []

    def stop(self):
        """Kill the server at once (SIGKILL to master and workers), as a
        crash would."""
        if self.proc:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            for _ in range(100):  # bounded: 5 s for the workers to go
                try:
                    os.killpg(self.proc.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
        self.proc = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


class TimedList(list):
    """A request log that notes when each request arrived (time.monotonic):
    `px.requests = TimedList()` before a run, then `px.requests.times`."""

    def __init__(self):
        super().__init__()
        self.times = []

    def append(self, x):
        self.times.append(time.monotonic())
        super().append(x)


class FaultProxy:
    """A reverse proxy on a free localhost port in front of an HTTP server:
    each response is, at the given rates (a seeded RNG), a 500, 503 or 429
    (with Retry-After: 0), cut after half its body (the connection dropped),
    or truncated (a shorter body, then the connection closed); for a request
    with a Range, `shift` answers another range (bytes a+1-b+1: a 206 whose
    Content-Range starts one byte later than asked, its body those bytes) and
    `norange` answers as a server that ignores Range (200, the whole object);
    `delay_ms` is added before every response. Independently of those:
    `flip` (a path ending, or a list of them) flips one bit in the middle
    of the body of a GET whose path ends so, at most `flip_max` times
    (None: every time) — a faulty proxy or NIC whose bytes arrive with a
    clean length; `stall_every` N holds every Nth request `stall_s` seconds
    before answering (a server that stalls). `repr_digest` adds the body's
    `Repr-Digest: sha-256=:...:` (RFC 9530) to a whole answer (200), taken
    before any flip, as a server that sends one would; `forward_all` passes
    every request header on (a signed S3 request), not only Range and Host;
    `etag_vary` N gives the first N GET answers (None: every one) an ETag of
    their own, as if the object were replaced between requests. `gzip`
    compresses every whole GET answer (200) with gzip and says so
    (Content-Encoding: gzip, the compressed Content-Length), asked or not:
    a misconfigured server or proxy.
    Counts what it did in
    `self.counts`; every request's (method, path) is in `self.requests`."""

    def __init__(self, upstream_port, seed=1, err500=0.0, err503=0.0, err429=0.0, drop=0.0,
                 truncate=0.0, delay_ms=0, max_faults=None, shift=0.0, norange=0.0,
                 flip=None, flip_max=None, stall_every=0, stall_s=0.0, repr_digest=False,
                 forward_all=False, etag_vary=0, gzip=False):
        self.up = upstream_port
        self.rng = random.Random(seed)
        self.rates = [("500", err500), ("503", err503), ("429", err429), ("drop", drop),
                      ("truncate", truncate), ("shift", shift), ("norange", norange)]
        self.delay = delay_ms / 1000.0
        self.max_faults = max_faults
        self.counts = {k: 0 for k, _ in self.rates}
        self.counts["ok"] = 0
        self.counts["flip"] = 0
        self.counts["stall"] = 0
        self.flip = [flip] if isinstance(flip, str) else list(flip or [])
        self.flip_max = flip_max
        self.stall_every = stall_every
        self.stall_s = stall_s
        self.repr_digest = repr_digest
        self.forward_all = forward_all
        self.etag_vary = etag_vary  # GET answers whose ETag is made another's (None: all)
        self.gzip = gzip
        self.counts["etag"] = 0
        self.requests = []  # (method, path) of each request, in order
        self.gets = 0  # GET requests seen
        self.seen_headers = []  # each request's headers (lower-case names), in order
        self.conns = 0  # connections accepted
        self.most_per_conn = 0  # requests on the busiest connection
        self.waiting = 0  # requests in the delay now
        self.most_waiting = 0  # requests in the delay at once, at the most
        self.lock = threading.Lock()
        self._local = threading.local()  # each client connection's upstream connection
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.alive = True
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _pick(self):
        with self.lock:
            if self.max_faults is not None and sum(v for k, v in self.counts.items() if k != "ok") >= self.max_faults:
                self.counts["ok"] += 1
                return "ok"
            r = self.rng.random()
            for k, p in self.rates:
                if r < p:
                    self.counts[k] += 1
                    return k
                r -= p
            self.counts["ok"] += 1
            return "ok"

    def _accept(self):
        while self.alive:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _forward(self, method, path, fwd):
        """One request upstream on this client connection's kept-alive
        upstream connection (made on first use, made again once when a kept
        one turns out closed): a connection per request cost the proxy more
        CPU than the transfers it delays."""
        up = getattr(self._local, "up", None)
        for fresh in (up is None, True):
            if fresh:
                if up is not None:
                    up.close()
                up = self._local.up = http.client.HTTPConnection("127.0.0.1", self.up, timeout=30)
            try:
                up.request(method, path, headers=fwd)
                r = up.getresponse()
                return r, r.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                if fresh:
                    raise
            except (OSError, http.client.HTTPException):
                up.close()
                self._local.up = None
                raise OSError("upstream failed")

    def _serve(self, c):
        f = c.makefile("rb")
        try:
            for n_here in range(1, 100001):  # requests on one connection, bounded
                line = f.readline(65536)
                if not line:
                    return
                with self.lock:
                    self.most_per_conn = max(self.most_per_conn, n_here)
                method, path, _v = line.decode("latin-1").split(" ", 2)
                hdrs = {}
                while True:
                    h = f.readline(65536)
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, v = h.decode("latin-1").split(":", 1)
                    hdrs[k.strip().lower()] = v.strip()
                with self.lock:
                    self.seen_headers.append(dict(hdrs))
                    self.requests.append((method, path))
                    if method == "GET":
                        self.gets += 1
                    stall = self.stall_every and len(self.requests) % self.stall_every == 0
                    if stall:
                        self.counts["stall"] += 1
                if stall:
                    time.sleep(self.stall_s)
                if self.delay:
                    with self.lock:
                        self.waiting += 1
                        self.most_waiting = max(self.most_waiting, self.waiting)
                    time.sleep(self.delay)
                    with self.lock:
                        self.waiting -= 1
                what = self._pick()
                if what in ("shift", "norange") and "range" not in hdrs:
                    with self.lock:  # no range to answer wrongly: an honest answer
                        self.counts[what] -= 1
                        self.counts["ok"] += 1
                    what = "ok"
                if what in ("500", "503", "429"):
                    extra = "Retry-After: 0\r\n" if what == "429" else ""
                    c.sendall(f"HTTP/1.1 {what} Fault\r\nContent-Length: 0\r\n{extra}\r\n".encode())
                    continue
                fwd = {k: v for k, v in hdrs.items()
                       if self.forward_all or k in ("range", "host", "if-range")}
                fwd.pop("connection", None)
                if what == "norange":
                    del fwd["range"]
                if what == "shift":
                    first, _, last = fwd["range"].split("=", 1)[1].partition("-")
                    if not first:  # a suffix (the last N bytes): one byte more
                        fwd["range"] = f"bytes=-{int(last) + 1}"
                    else:
                        fwd["range"] = f"bytes={int(first) + 1}-" + (str(int(last) + 1) if last else "")
                try:
                    r, body = self._forward(method, path, fwd)
                except OSError:
                    c.close()  # upstream gone: so are we (a connection error)
                    return
                head = f"HTTP/1.1 {r.status} {r.reason}\r\n"
                vary = False
                if method == "GET" and self.etag_vary != 0:
                    with self.lock:
                        vary = self.etag_vary is None or self.counts["etag"] < self.etag_vary
                        if vary:
                            self.counts["etag"] += 1
                            n_etag = self.counts["etag"]
                zipped = self.gzip and method == "GET" and r.status == 200
                if zipped:
                    import gzip as _gzip
                    body = _gzip.compress(body, mtime=0)
                for k, v in r.getheaders():
                    if vary and k.lower() == "etag":
                        v = f'"replaced-{n_etag}"'
                    if zipped and k.lower() == "content-length":
                        v = str(len(body))
                    if k.lower() not in ("connection", "keep-alive", "transfer-encoding"):
                        head += f"{k}: {v}\r\n"
                if zipped:
                    head += "Content-Encoding: gzip\r\n"
                if self.repr_digest and method == "GET" and r.status == 200:
                    import base64
                    import hashlib
                    head += ("Repr-Digest: sha-256=:" +
                             base64.b64encode(hashlib.sha256(body).digest()).decode() + ":\r\n")
                head += "\r\n"
                if method == "HEAD":
                    c.sendall(head.encode("latin-1"))
                    continue
                if what == "drop" and len(body) > 1:
                    c.sendall(head.encode("latin-1") + body[: len(body) // 2])
                    c.shutdown(socket.SHUT_RDWR)
                    return
                if what == "truncate" and len(body) > 1:
                    c.sendall(head.encode("latin-1") + body[: len(body) - 1 - len(body) // 3])
                    c.shutdown(socket.SHUT_RDWR)
                    return
                if method == "GET" and len(body) > 1 and any(path.endswith(m) for m in self.flip):
                    with self.lock:
                        do = self.flip_max is None or self.counts["flip"] < self.flip_max
                        if do:
                            self.counts["flip"] += 1
                    if do:
                        b = bytearray(body)
                        b[len(b) // 2] ^= 0x01
                        body = bytes(b)
                c.sendall(head.encode("latin-1") + body)
        except (OSError, ValueError):
            pass
        finally:
            up = getattr(self._local, "up", None)
            if up is not None:
                up.close()
                self._local.up = None
            try:
                c.close()
            except OSError:
                pass

    def close(self):
        self.alive = False
        self.sock.close()


class DelayProxy:
    """tests/remote/delayproxy.c (the binary `exe`, e.g. build/sluice_delayproxy)
    in front of 127.0.0.1:upstream_port, holding every request delay_ms. It
    runs until close() (or until this process ends: its stdin is a pipe from
    here); close() returns its line of counts."""

    def __init__(self, exe, upstream_port, delay_ms):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([exe, "-d", str(int(delay_ms)), str(upstream_port)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.proc.kill()
            self.proc.wait()
            self.log.seek(0)
            raise RuntimeError(f"{exe} did not start: {line!r} {self.log.read()[-300:]}")
        self.port = int(line)
        self.delay_ms = delay_ms

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def close(self):
        """Stop it (SIGTERM); its counts line, or ''."""
        if self.proc is None:
            return ""
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.proc = None
        self.log.seek(0)
        lines = [l for l in self.log.read().splitlines() if l.strip()]
        self.log.close()
        return lines[-1] if lines else ""


def moto_venv():
    """The directory of the venv with moto's server (tests/io/moto_venv.sh makes
    it on first use, from PyPI); raises RuntimeError saying why when it cannot."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "io", "moto_venv.sh")
    r = subprocess.run(["bash", script], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or f"{script} failed ({r.returncode})")
    return r.stdout.strip().splitlines()[-1]


class Moto:
    """moto's S3 server (tests/io/moto_venv.sh's venv) on a free 127.0.0.1 port,
    without request authentication (any key is taken), in its own process group;
    `put_dir` uploads a directory with boto3 from the same venv."""

    def __init__(self, venv=None):
        self.venv = venv or moto_venv()
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sluice-moto-")
        self.logpath = os.path.join(self.dir, "moto.log")
        log = open(self.logpath, "ab")
        self.proc = subprocess.Popen([os.path.join(self.venv, "bin", "moto_server"), "-H", "127.0.0.1",
                                      "-p", str(self.port)], stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=log, start_new_session=True)
        log.close()
        for _ in range(300):  # bounded: 15 s (moto imports a lot)
            if self.proc.poll() is not None:
                raise RuntimeError("moto_server exited: " + open(self.logpath).read()[-500:])
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.close()
        raise RuntimeError("moto_server did not start listening")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    # moto without authentication takes any key; these are the ones every client gets
    KEY_ID, SECRET, REGION = "AKIASLUICEBENCH", "sluice-bench-secret", "us-east-1"

    def put_dir(self, local, bucket, prefix):
        """Upload every file under the directory `local` to
        s3://bucket/prefix/<relative path>, or the file `local` to
        s3://bucket/prefix (the bucket made when missing)."""
        code = """
import os, sys, boto3
ep, bucket, prefix, local, kid, sec, reg = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=ep, region_name=reg, aws_access_key_id=kid,
                  aws_secret_access_key=sec)
try:
    s3.create_bucket(Bucket=bucket)
except s3.exceptions.BucketAlreadyOwnedByYou:
    pass
if os.path.isfile(local):
    s3.upload_file(local, bucket, prefix)
for d, _, files in os.walk(local):
    for f in sorted(files):
        p = os.path.join(d, f)
        s3.upload_file(p, bucket, prefix + "/" + os.path.relpath(p, local))
"""
        r = subprocess.run([os.path.join(self.venv, "bin", "python"), "-c", code, self.url, bucket,
                            prefix.strip("/"), local, self.KEY_ID, self.SECRET, self.REGION],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"uploading {local} to s3://{bucket}/{prefix} failed: "
                               f"{r.stderr.strip()[-500:]}")

    def close(self):
        if self.proc:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def main(argv):
    import argparse
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("root")
    s.add_argument("--https", action="store_true")
    s.add_argument("--delay-ms", type=int, default=0)
    s.add_argument("--proxy", action="store_true", help="serve through the proxy even with no delay or fault")
    s.add_argument("--faults", default="", help="e.g. 500=0.05,503=0.05,429=0.05,drop=0.05,truncate=0.05,"
                   "shift=0.05,norange=0.05")
    s.add_argument("--delayproxy", action="append", default=[], metavar="EXE:MS",
                   help="the C delay proxy EXE in front of nginx, MS ms a request (repeatable)")
    p = sub.add_parser("proxy", help="the fault proxy alone, in front of 127.0.0.1:PORT")
    p.add_argument("port", type=int)
    p.add_argument("--flip", action="append", default=[], help="flip a bit in GETs of paths ending so")
    p.add_argument("--flip-max", type=int, default=None)
    p.add_argument("--forward-all", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "proxy":
        px = FaultProxy(a.port, flip=a.flip, flip_max=a.flip_max, forward_all=a.forward_all)
        print(px.url, flush=True)
        done = threading.Event()
        signal.signal(signal.SIGTERM, lambda *a: done.set())
        threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
        done.wait()
        print(json.dumps(px.counts), file=sys.stderr, flush=True)
        px.close()
        return
    ng = Nginx(a.root, https=a.https)
    dps = []
    for spec in a.delayproxy:
        exe, _, ms = spec.rpartition(":")
        dps.append(DelayProxy(exe, ng.port, int(ms)))
    url, px = ng.url, None
    if a.delay_ms or a.faults or a.proxy:
        rates = {k: float(v) for k, v in (kv.split("=") for kv in a.faults.split(",") if kv)}
        px = FaultProxy(ng.port, delay_ms=a.delay_ms, err500=rates.get("500", 0),
                        err503=rates.get("503", 0), err429=rates.get("429", 0),
                        drop=rates.get("drop", 0), truncate=rates.get("truncate", 0),
                        shift=rates.get("shift", 0), norange=rates.get("norange", 0))
        url = px.url
    print("\n".join([url + (" " + ng.ca if ng.ca else "")] +
                    [("https" if a.https else "http") + f"://127.0.0.1:{d.port}" for d in dps]),
          flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: done.set())
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait()
    for d in dps:
        ms = d.delay_ms
        print(f"delayproxy {ms} ms: {d.close()}", file=sys.stderr, flush=True)
    if px:
        px.close()
    ng.close()


if __name__ == "__main__":
    main(sys.argv[1:])
