"""tests/remote/delayproxy.c, the latency-injecting proxy of bench/remote_bench.sh:
client bytes held the delay, upstream bytes back at once and unchanged, many
connections, half-closes both ways, backpressure, exit on SIGTERM and on stdin EOF.
The binary is build/sluice_delayproxy (beside SLUICE_BIN), or SLUICE_DELAYPROXY."""
import os
import signal
import socket
import socketserver
import subprocess
import threading
import time

import pytest

BIN = os.environ.get("SLUICE_DELAYPROXY") or os.path.join(
    os.path.dirname(os.environ.get("SLUICE_BIN", "build/sluice")), "sluice_delayproxy")
pytestmark = pytest.mark.skipif(not os.access(BIN, os.X_OK), reason=f"{BIN} not built")


class Upper(socketserver.BaseRequestHandler):
    """Each line back upper-cased 1000 times; b"SINK\\n": read to EOF, answer
    the byte count, then 3 MB, then close."""

    def handle(self):
        f = self.request.makefile("rb")
        for line in f:
            if line == b"SINK\n":
                n = len(f.read())  # to EOF (the file's buffer holds the first bytes)
                self.request.sendall(b"%d\n" % n + bytes(range(256)) * 12000)
                return
            self.request.sendall(line.upper() * 1000)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


@pytest.fixture
def proxy():
    srv = Server(("127.0.0.1", 0), Upper)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    px = subprocess.Popen([BIN, "-d", "20", "-s", str(srv.server_address[1])], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    port = int(px.stdout.readline())
    yield px, port
    if px.poll() is None:
        px.kill()
    px.wait()
    srv.shutdown()
    srv.server_close()


def recv_n(s, n):
    got = b""
    while len(got) < n:
        x = s.recv(1 << 16)
        assert x, "connection closed early"
        got += x
    return got


def test_each_request_waits_the_delay(proxy):
    _, port = proxy
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    t = time.monotonic()
    for i in range(10):  # a request, its answer, then the next (as HTTP/1.1 clients)
        s.sendall(b"req %d\n" % i)
        want = (b"REQ %d\n" % i) * 1000
        assert recv_n(s, len(want)) == want
    assert time.monotonic() - t >= 0.200
    s.close()


def test_many_connections_at_once(proxy):
    px, port = proxy
    socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(600)]
    for r in range(2):
        for i, s in enumerate(socks):
            s.sendall(b"req %d %d\n" % (i, r))
        for i, s in enumerate(socks):
            want = (b"REQ %d %d\n" % (i, r)) * 1000
            assert recv_n(s, len(want)) == want
    for s in socks:
        s.close()
    for _ in range(60):  # a line a second: every pair closed both ways in the end
        line = px.stderr.readline().decode()
        if "open 0 " in line:
            break
    assert "accepted 600, open 0 (max 600" in line and "errors 0" in line, line
    px.send_signal(signal.SIGTERM)
    assert px.wait(10) == 0
    assert "exit:" in px.stderr.read().decode()


def test_half_close_both_ways_with_backpressure(proxy):
    px, port = proxy
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    payload = os.urandom(5 << 20)  # over the 1 MiB the proxy holds: it stops reading
    s.sendall(b"SINK\n" + payload)
    s.shutdown(socket.SHUT_WR)  # the FIN goes on after the data
    got = b""
    while True:
        x = s.recv(1 << 20)
        if not x:
            break
        got += x
    n, body = got.split(b"\n", 1)
    assert int(n) == len(payload)
    assert body == bytes(range(256)) * 12000
    px.stdin.close()  # stdin EOF: it exits
    assert px.wait(10) == 0
