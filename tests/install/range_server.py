"""A static file server with byte ranges (RFC 9110 single ranges), for the
remote-read check of scripts/test_wheels.sh inside a chroot that has no nginx:
Python's http.server answers GET and HEAD but ignores Range.

    python3 range_server.py DIR PORTFILE

serves DIR on 127.0.0.1 at a free port, writes the port to PORTFILE, and
serves until killed.
"""
import http.server
import os
import re
import sys


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as sluice's reader expects of a server

    def log_message(self, *args):
        pass

    def send_head(self):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404)
            return None
        size = os.path.getsize(path)
        f = open(path, "rb")
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if m and (m.group(1) or m.group(2)):
            if m.group(1):
                a = int(m.group(1))
                b = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            else:  # a suffix: the last N bytes
                a, b = max(0, size - int(m.group(2))), size - 1
            if a > b or a >= size:
                f.close()
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            f.seek(a)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{b}/{size}")
            n = b - a + 1
        else:
            self.send_response(200)
            n = size
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        self._left = n
        return f

    def copyfile(self, src, dst):
        left = self._left
        while left > 0:
            buf = src.read(min(left, 1 << 16))
            if not buf:
                break
            dst.write(buf)
            left -= len(buf)


def main():
    root, portfile = sys.argv[1], sys.argv[2]
    os.chdir(root)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(portfile + ".tmp", portfile)
    srv.serve_forever()


if __name__ == "__main__":
    main()
