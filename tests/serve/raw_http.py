"""HTTP/1.1 on raw sockets, for tests that need the exact bytes and timing a
library would hide: one connection, plain or TLS, that sends bytes and reads
responses back as they came (Wire); many connections held open (Crowd); a
thread that drips a byte on each of them (Drip).
"""
import json
import re
import select
import socket
import ssl
import threading
import time

from serve_util import Failure, Response, check, parse_head


def address_of(base):
    """('127.0.0.1', port) of 'http://127.0.0.1:port'."""
    host, _, port = base.split("://", 1)[1].rpartition(":")
    return host, int(port)


def request_bytes(method, path, body=None, key=None, headers=(), version="HTTP/1.1"):
    """One request as sent on the wire; body: a dict (sent as JSON) or bytes."""
    lines = [f"{method} {path} {version}", "Host: 127.0.0.1"]
    if key is not None:
        lines.append(f"Authorization: Bearer {key}")
    data = b""
    if body is not None:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    lines += list(headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


class Wire:
    """One connection (TCP, or TLS with `tls`): bytes out, responses read back as they came."""

    def __init__(self, base, tls=None, timeout=10):
        host, port = address_of(base)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        if tls is not None:
            try:
                self.sock = tls.wrap_socket(self.sock, server_hostname=host)
            except BaseException:
                self.sock.close()
                raise
        self.buffer = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _receive(self, deadline):
        """More bytes; b'' at the end (a close or a reset); None when nothing came by `deadline`."""
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        self.sock.settimeout(left)
        try:
            return self.sock.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            return None
        except (ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
            return b""

    def _read_until(self, separator, deadline, what):
        while separator not in self.buffer:
            data = self._receive(deadline)
            if not data:
                got = f"; got {self.buffer[:200]!r}" if self.buffer else ""
                raise Failure(f"{what}: {'no answer in time' if data is None else 'closed without an answer'}{got}")
            self.buffer += data
        item, _, self.buffer = self.buffer.partition(separator)
        return item

    def _read_exactly(self, n, deadline, what):
        while len(self.buffer) < n:
            data = self._receive(deadline)
            check(data, f"{what}: the body ended after {len(self.buffer)} of {n} bytes")
            self.buffer += data
        item, self.buffer = self.buffer[:n], self.buffer[n:]
        return item

    def response(self, what, timeout=10, head_only=False):
        """The next response, its body read by Content-Length or chunks (none with head_only: HEAD)."""
        deadline = time.monotonic() + timeout
        head = self._read_until(b"\r\n\r\n", deadline, what)
        check(re.match(rb"HTTP/1\.[01] \d{3}", head), f"{what}: not an HTTP response: {head[:200]!r}")
        status, headers = parse_head(head)
        r = Response(status, headers, b"")
        r.version = head.split(b" ", 1)[0].decode()
        if head_only or status in (204, 304):
            return r
        if "chunked" in headers.get("transfer-encoding", ""):
            while (size := int(self._read_until(b"\r\n", deadline, what).split(b";")[0], 16)) > 0:
                r.body += self._read_exactly(size + 2, deadline, what)[:-2]
            self._read_until(b"\r\n", deadline, what)  # no trailers
        elif "content-length" in headers:
            r.body = self._read_exactly(int(headers["content-length"]), deadline, what)
        else:  # up to the close
            while data := self._receive(deadline):
                self.buffer += data
            check(data is not None, f"{what}: HTTP {status} has neither Content-Length nor chunks, and no close")
            r.body, self.buffer = self.buffer, b""
        return r

    def ended_within(self, timeout):
        """Seconds until the server closed (or reset) the connection, or None; what it sent meanwhile is added
        to self.buffer."""
        t0 = time.monotonic()
        while (data := self._receive(t0 + timeout)) is not None:
            if not data:
                return time.monotonic() - t0
            self.buffer += data
        return None

    def closed_within(self, timeout):
        """The same, failing on any byte sent meanwhile."""
        had = len(self.buffer)
        seconds = self.ended_within(timeout)
        check(len(self.buffer) == had, f"bytes where the connection should close: {self.buffer[had:had + 200]!r}")
        return seconds


def exchange(base, request, what, tls=None, timeout=10, head_only=False):
    """One request on a fresh connection; its response."""
    w = Wire(base, tls, timeout)
    try:
        w.send(request)
        return w.response(what, timeout, head_only)
    finally:
        w.close()


# ---- many connections ---------------------------------------------------------------

def established(sock):
    """The server has neither closed nor reset the connection (TLS or not, bytes unread or not)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == 1  # tcpi_state TCP_ESTABLISHED


class Crowd:
    """Many connections held open; close() closes every one."""

    def __init__(self):
        self.socks = []
        self.answered = {}  # socket -> when its answer was in (open_idle)

    def open(self, base, n, tls=None, first=b"", what="connection"):
        """n connections more, each sending `first` (after the TLS handshake, with `tls`)."""
        for i in range(n):
            try:
                s = Wire(base, tls, timeout=5).sock
            except (OSError, ssl.SSLError) as e:
                raise Failure(f"{what} {i + 1} of {n} not opened: {type(e).__name__}: {e}")
            self.socks.append(s)
            if first:
                s.sendall(first)
        return self

    def open_idle(self, base, n, timeout=10):
        """n connections that each made a GET /health, answered 200, and now say nothing; answers are read
        as they come, so that self.answered says from when each connection has been idle."""
        request = request_bytes("GET", "/health")
        waiting, got = {}, {}
        p = select.poll()

        def take(wait_ms):
            for fd, _ in p.poll(wait_ms):
                try:
                    data = waiting[fd].recv(65536)
                except BlockingIOError:
                    continue
                except ConnectionResetError:
                    data = b""
                check(data, f"keep-alive connection {self.socks.index(waiting[fd]) + 1} closed before its answer")
                got[fd] += data
                head, sep, body = got[fd].partition(b"\r\n\r\n")
                if sep:
                    status, headers = parse_head(head)
                    check(status == 200, f"GET /health on a keep-alive connection: HTTP {status}")
                    if len(body) >= int(headers.get("content-length", 0)):
                        p.unregister(fd)
                        self.answered[waiting.pop(fd)] = time.monotonic()
        for _ in range(n):
            s = self.open(base, 1, first=request, what="keep-alive connection").socks[-1]
            s.setblocking(False)
            waiting[s.fileno()], got[s.fileno()] = s, b""
            p.register(s, select.POLLIN)
            take(0)
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            take(100)
        check(not waiting, f"{n - len(waiting)} of {n} keep-alive connections answered within {timeout} s "
                           f"of the last one's GET /health")
        return self

    def still_open(self):
        return sum(established(s) for s in self.socks)

    def close(self):
        for s in self.socks:
            s.close()
        self.socks = []


class Drip:
    """A thread that sends one byte on each of a crowd's connections every `interval` seconds."""

    def __init__(self, crowd, interval):
        self.crowd = crowd
        self.interval = interval
        self.rounds = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping.wait(0 if self.rounds == 0 else self.interval):
            for s in self.crowd.socks:
                try:
                    s.send(b"a")
                except (OSError, ssl.SSLError):
                    pass  # closed by the server: counted by still_open()
            self.rounds += 1

    def stop(self):
        self.stopping.set()
        self.thread.join()
