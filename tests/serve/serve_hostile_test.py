#!/usr/bin/env python3
"""End-to-end tests of `tensorpc serve`'s HTTP front against hostile and odd clients.

    serve_hostile_test.py --cli PATH --server PATH --source DIR --work DIR [--keep-going]

Starts serves of kjv-tiny on the local CPU (--local-only, port 0): one with
the default limits, one with short timeouts (--header-timeout 2
--keep-alive-timeout 1), one with --max-connections 8, one with a key and a
queue of one, one over HTTPS. Raw sockets play the clients, one line per case:

  - slowloris: while 200 connections drip a header byte every 2 s, and while
    1,000 keep-alive connections sit idle after a request, a GET /health and a
    1-token completion are answered in at most twice their time alone (1 s at
    least); the same over HTTPS, with connections that never start TLS;
  - bodies: a 128 MiB chunked body is refused (413) without serve's peak memory
    growing with it; Content-Length 10^12 gets 413 at once; a body slower than
    16 KiB/s is cut off; a prompt with more bytes than a slot's context could
    hold is refused (400) before it is tokenized;
  - limits: headers incomplete after --header-timeout and connections idle for
    --keep-alive-timeout are closed; headers over 64 KiB get 431; beyond
    --max-connections a connection gets 503 at once; without the key, 401
    comes as soon as the headers are in, before the body;
  - HTTP: pipelined requests answered in order (also over HTTPS), HEAD, HTTP/1.0,
    Connection: close, exact routes (404, 405 with Allow), OpenAI-shaped errors;
  - the 503 of a full queue names --queue and claims no more waiting than it;
  - starting and stopping: a port in use ends a second serve (status 1, the
    address named); a model that cannot be loaded ends serve with an error, 20
    times of 20; SIGTERM ends a serve still loading within 5 s.

--server is taken for the command line's sake (as serve_test.py's); no
tensorpc-server is started: the loading serve is pointed at a socket that
never answers. Every process and socket is closed at the end, also on
failure. Exits 1 at the first failure, with the serves' logs' tails;
--keep-going runs every case and lists each failure (to see at once what a
build still lacks).
"""
import http.client
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import traceback

from raw_http import Crowd, Drip, Wire, address_of, established, exchange, request_bytes
from serve_util import Failure, Process, Response, check, parse_arguments, poll

MODEL = "kjv-tiny.gguf"
API_KEY = "serve-hostile-key"
START_TIMEOUT_S = 30
ANSWER_TIMEOUT_S = 10  # a normal request under load that takes longer fails at once
SLOWDOWN = 2.0  # under load, a normal request takes at most this times its time alone,
FLOOR_S = 1.0  # or this, whichever is longer: the machine is shared and noisy
DRIP_S = 2.0
SHORT_HEADER_TIMEOUT_S = 2
SHORT_KEEP_ALIVE_S = 1
DEFAULT_KEEP_ALIVE_S = 5
MAX_CONNECTIONS = 8
MAX_BODY = 4 << 20  # serve's default --max-body
MIN_BODY_RATE = 16 << 10  # bytes per second a body must keep up
HEADERS_LIMIT = 64 << 10
GUARDED_PARALLEL = 2
GUARDED_QUEUE = 1
FAILED_STARTS = 20  # of each kind of model that cannot be loaded
START_BATCH = 10  # started at once
MIB = 1 << 20
COMPLETION = {"prompt": "In the beginning", "max_tokens": 1, "temperature": 0}
# What a client does while others attack: (what, method, path, body).
NORMAL_REQUESTS = [("GET /health", "GET", "/health", None),
                   ("a 1-token completion", "POST", "/v1/completions", COMPLETION)]

# Each serve: its flags after `-m MODEL --local-only --port 0 -t 1`.
SERVES = {
    "serve": ["--parallel", "2"],
    "serve-short": ["--header-timeout", str(SHORT_HEADER_TIMEOUT_S), "--keep-alive-timeout", str(SHORT_KEEP_ALIVE_S)],
    "serve-capped": ["--max-connections", str(MAX_CONNECTIONS)],
    "serve-guarded": ["--api-key", API_KEY, "--parallel", str(GUARDED_PARALLEL), "--queue", str(GUARDED_QUEUE),
                      "--ctx", "1024"],
    "serve-tls": [],  # with the certificate, added when started
}


def expect_openai_error(r, status, what, words=()):
    """`r` is `status` with an OpenAI error whose message has each of `words` (any case); its message."""
    check(r.status == status, f"{what}: HTTP {r.status}, expected {status}: {r.body[:300]!r}")
    body = r.json()
    err = body.get("error") if isinstance(body, dict) else None
    check(isinstance(err, dict) and {"message", "type", "code"} <= set(err),
          f"{what}: not an OpenAI error {{\"error\": {{message, type, code}}}}: {r.body[:300]!r}")
    check(isinstance(err["message"], str) and err["message"], f"{what}: the error has no message")
    for w in words:
        check(w.lower() in err["message"].lower(), f"{what}: the message does not say {w!r}: {err['message']!r}")
    return err["message"]


# ---- normal requests, timed ----------------------------------------------------------

class Client:
    """Normal requests through http.client, each on a fresh connection, timed."""

    def __init__(self, base, tls=None, key=None):
        self.base = base
        self.tls = tls
        self.key = key

    def request(self, method, path, body=None, timeout=ANSWER_TIMEOUT_S):
        """(seconds, Response) of one request; fails when it takes more than `timeout`."""
        host, port = address_of(self.base)
        if self.tls is not None:
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=self.tls)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        t0 = time.monotonic()
        try:
            conn.request(method, path, data, headers)
            resp = conn.getresponse()
            r = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        except TimeoutError:
            raise Failure(f"{method} {path}: no answer within {timeout} s")
        except (OSError, http.client.HTTPException) as e:
            raise Failure(f"{method} {path}: {type(e).__name__}: {e}")
        finally:
            conn.close()
        return time.monotonic() - t0, r

    def time_alone(self):
        """{what: the median of 3 runs' seconds}, each answered 200."""
        alone = {}
        for what, method, path, body in NORMAL_REQUESTS:
            runs = []
            for _ in range(3):
                seconds, r = self.request(method, path, body)
                check(r.status == 200, f"{what} alone: HTTP {r.status}: {r.body[:300]!r}")
                runs.append(seconds)
            alone[what] = sorted(runs)[1]
        return alone

    def time_under(self, load, alone):
        """Each normal request is answered 200 in at most SLOWDOWN times its time alone (FLOOR_S at least)."""
        notes = []
        for what, method, path, body in NORMAL_REQUESTS:
            limit = max(SLOWDOWN * alone[what], FLOOR_S)
            try:
                seconds, r = self.request(method, path, body)
            except Failure as e:
                raise Failure(f"{e} while {load} (alone: {alone[what]:.3f} s)")
            check(r.status == 200, f"{what} while {load}: HTTP {r.status}: {r.body[:300]!r}")
            check(seconds <= limit, f"{what} took {seconds:.2f} s while {load}; alone {alone[what]:.3f} s, "
                                    f"limit {limit:.2f} s")
            notes.append(f"{what} {seconds:.3f} s (alone {alone[what]:.3f} s)")
        return "; ".join(notes)


def under_slowloris(client, crowd, base, alone, tls=None, silent=0):
    """200 connections (100 and `silent` more over TLS) drip a header byte every DRIP_S; normal requests timed."""
    dripping = 100 if tls is not None else 200
    crowd.open(base, dripping, tls, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Drip: ", "dripping connection")
    crowd.open(base, silent, None, b"", "silent connection")  # TCP only: never a TLS ClientHello
    drip = Drip(crowd, DRIP_S)
    try:
        time.sleep(DRIP_S + 0.5)  # a byte or two from each
        load = f"{dripping} connections drip a header byte every {DRIP_S:g} s" + \
               (f" and {silent} never start TLS" if silent else "")
        note = client.time_under(load, alone)
        open_now = crowd.still_open()
    finally:
        drip.stop()
    check(open_now >= len(crowd.socks) * 9 // 10,
          f"only {open_now} of {len(crowd.socks)} slow connections were still open when measured (the default "
          "--header-timeout is 10 s)")
    return f"{note}; {open_now} slow connections open"


# ---- the processes -------------------------------------------------------------------

class Serves:
    """The serves, each started when a case first needs it; every process started, stopped together."""

    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.log_dir = os.path.join(work, "logs")
        self.processes = []
        self.started = {}  # name -> Process, or the Failure that ended its start
        self.tls = None  # the client's context, trusting the test's CA

    def model_argv(self, model_path, *flags):
        return [self.args.cli, "serve", "-m", model_path, "--port", "0", "-t", "1", *flags]

    def start(self, name, argv):
        p = Process(name, argv, self.log_dir)
        self.processes.append(p)
        return p

    def get(self, name):
        """The serve `name`, ready: p.base, p.port; fails as its start failed."""
        if name not in self.started:
            try:
                self.started[name] = self._start_serve(name)
            except Failure as e:
                self.started[name] = Failure(f"{name} did not start: {e}")
        p = self.started[name]
        if isinstance(p, Failure):
            raise p
        return p

    def _start_serve(self, name):
        flags = list(SERVES[name])
        if name == "serve-tls":
            cert, key = self.certificate()
            flags += ["--http-tls-cert", cert, "--http-tls-key", key]
        p = self.start(name, self.model_argv(os.path.join(self.args.source, "models", MODEL), "--local-only",
                                             *flags))
        m = p.wait_for_line(p.err_path, r"listening on (https?://\S+):(\d+)/ \(the model is loading\)",
                            START_TIMEOUT_S)
        p.base, p.port = f"{m.group(1)}:{m.group(2)}", int(m.group(2))
        p.wait_for_line(p.out_path, r"serving \S+ at ", START_TIMEOUT_S)
        return p

    def certificate(self):
        """A certificate for 127.0.0.1 from `tensorpc certs`; self.tls trusts its CA."""
        d = os.path.join(self.work, "certs")
        r = subprocess.run([self.args.cli, "certs", d, "--host", "127.0.0.1", "--name", "serve"],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"tensorpc certs failed ({r.returncode}): {r.stderr[-2000:]}")
        self.tls = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
        return os.path.join(d, "serve.pem"), os.path.join(d, "serve.key")

    def stop_all(self):
        for p in reversed(self.processes):
            p.stop()

    def logs(self):
        return "\n".join(p.logs() for p in reversed(self.processes))


def peak_rss(pid):
    """VmHWM of the process, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmHWM:\s+(\d+) kB", f.read())
    check(m, f"no VmHWM in /proc/{pid}/status")
    return int(m.group(1)) * 1024


# ---- the cases -----------------------------------------------------------------------

class Cases:
    def __init__(self, args, serves):
        self.args = args
        self.serves = serves
        self.alone = {}  # serve name -> its normal requests' times alone

    def client(self, name, key=None):
        s = self.serves.get(name)
        return Client(s.base, self.serves.tls if name == "serve-tls" else None, key)

    def time_alone(self, name):
        self.alone[name] = self.client(name).time_alone()
        return "; ".join(f"{what} {seconds:.3f} s" for what, seconds in self.alone[name].items())

    def alone_of(self, name):
        if name not in self.alone:
            self.time_alone(name)
        return self.alone[name]

    # -- the default limits: many connections --

    def slowloris(self):
        base = self.serves.get("serve").base
        crowd = Crowd()
        try:
            return under_slowloris(self.client("serve"), crowd, base, self.alone_of("serve"))
        finally:
            crowd.close()

    def idle_keep_alive(self):
        n = 1000
        base = self.serves.get("serve").base
        crowd = Crowd()
        try:
            crowd.open_idle(base, n, ANSWER_TIMEOUT_S)
            note = self.client("serve").time_under(f"{n} keep-alive connections sit idle", self.alone_of("serve"))
            # Those idle for less than the default --keep-alive-timeout (5 s) are still open.
            fresh = [s for s, t in crowd.answered.items() if t > time.monotonic() - (DEFAULT_KEEP_ALIVE_S - 1)]
            closed = sum(not established(s) for s in fresh)
            check(not closed, f"{closed} of the {len(fresh)} connections idle for less than {DEFAULT_KEEP_ALIVE_S - 1} "
                              f"s were closed (the default --keep-alive-timeout is {DEFAULT_KEEP_ALIVE_S} s)")
            return f"{note}; {crowd.still_open()} idle connections open"
        finally:
            crowd.close()

    # -- the default limits: bodies and headers --

    def chunked_body(self):
        serve = self.serves.get("serve")
        total = 128 * MIB
        before = peak_rss(serve.proc.pid)
        w = Wire(serve.base)
        try:
            w.send(request_bytes("POST", "/v1/completions", headers=["Content-Type: application/json",
                                                                      "Transfer-Encoding: chunked"]))
            chunk = b"%x\r\n" % MIB + b" " * MIB + b"\r\n"
            sent, pending = 0, b""
            w.sock.setblocking(False)
            p = select.poll()
            deadline = time.monotonic() + 60
            # Send while the server reads, until it answers (or has read it all).
            while True:
                if not pending and sent < total:
                    pending = chunk if sent + MIB < total else chunk + b"0\r\n\r\n"
                    sent += MIB
                p.register(w.sock, select.POLLIN | (select.POLLOUT if pending else 0))
                events = dict(p.poll(100)).get(w.sock.fileno(), 0)
                if events & (select.POLLIN | select.POLLERR | select.POLLHUP):
                    break
                check(time.monotonic() < deadline, f"no answer 60 s into a chunked body ({sent // MIB} MiB sent)")
                try:
                    pending = pending[w.sock.send(pending):] if events & select.POLLOUT else pending
                except BlockingIOError:
                    pass
                except (BrokenPipeError, ConnectionResetError):
                    break  # the answer, if any, came before
            r = w.response(f"a {total // MIB} MiB chunked body")
            closed = w.closed_within(2)
        finally:
            w.close()
        grown = peak_rss(serve.proc.pid) - before
        expect_openai_error(r, 413, f"a {total // MIB} MiB chunked body, --max-body {MAX_BODY} (peak RSS "
                                    f"+{grown / MIB:.1f} MiB, {sent // MIB} MiB sent)")
        check(closed is not None, "the connection stays open after the 413 of a chunked body")
        check(sent <= 32 * MIB, f"the 413 came only after {sent // MIB} MiB were sent: the body was read past "
                                "--max-body")
        check(grown < 64 * MIB, f"serve's peak RSS grew {grown / MIB:.1f} MiB over a refused {total // MIB} MiB body")
        return f"413 after {sent // MIB} MiB sent; peak RSS +{grown / MIB:.1f} MiB"

    def huge_content_length(self):
        w = Wire(self.serves.get("serve").base)
        try:
            w.send(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 1000000000000\r\n\r\n")
            t0 = time.monotonic()
            r = w.response("Content-Length 10^12 and no body", timeout=1.0)
            seconds = time.monotonic() - t0
            closed = w.closed_within(2)
        finally:
            w.close()
        expect_openai_error(r, 413, "Content-Length 10^12")
        check(closed is not None, "the connection stays open after the 413 of Content-Length 10^12")
        return f"413 after {seconds:.3f} s"

    def prompt_too_long_by_bytes(self):
        """A prompt within --max-body whose bytes alone exceed what a slot's tokens could stand for."""
        serve = self.serves.get("serve")
        prompt = "In the beginning " * (3 * MIB // 17 + 1)
        before = peak_rss(serve.proc.pid)
        seconds, r = self.client("serve").request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 1})
        grown = peak_rss(serve.proc.pid) - before
        expect_openai_error(r, 400, f"a {len(prompt) // MIB} MiB prompt", ["bytes", "context"])
        check(r.json()["error"].get("code") == "context_length_exceeded",
              f"a {len(prompt) // MIB} MiB prompt: code {r.json()['error'].get('code')!r}, "
              "expected 'context_length_exceeded'")
        # The body (3 MiB) and its parsed JSON are held; tokenizing it would take far more.
        check(grown < 32 * MIB, f"serve's peak RSS grew {grown / MIB:.1f} MiB over a refused {len(prompt) // MIB} "
                                "MiB prompt: it was tokenized")
        return f"400 after {seconds:.3f} s; peak RSS +{grown / MIB:.1f} MiB"

    def huge_headers(self):
        base = self.serves.get("serve").base
        lines = 24
        fill = "a" * (HEADERS_LIMIT // 20)  # 24 lines of 3.2 KiB: 77 KiB
        w = Wire(base)
        try:
            w.send(request_bytes("GET", "/health", headers=[f"X-Big-{i}: {fill}" for i in range(lines)]))
            r = w.response("headers over 64 KiB")
            closed = w.closed_within(2)
        finally:
            w.close()
        expect_openai_error(r, 431, "headers over 64 KiB", ["header", "large"])
        check(closed is not None, "the connection stays open after a 431")
        under = [f"X-Big-{i}: {fill}" for i in range(15)]  # 48 KiB
        r = exchange(base, request_bytes("GET", "/health", headers=under + ["Connection: close"]), "48 KiB of headers")
        check(r.status == 200, f"48 KiB of headers: HTTP {r.status}: {r.body[:300]!r}")

    # -- HTTP --

    def pipelined(self, name):
        base = self.serves.get(name).base
        tls = self.serves.tls if name == "serve-tls" else None
        sent = [("GET", "/health", None, 200), ("GET", "/v1/models", None, 200),
                ("POST", "/v1/completions", COMPLETION, 200), ("GET", "/no-such-path", None, 404),
                ("GET", "/style.css", None, 200)]
        w = Wire(base, tls)
        try:
            w.send(b"".join(request_bytes(method, path, body) for method, path, body, _ in sent))
            got = [w.response(f"pipelined answer {i + 1} of {len(sent)}") for i in range(len(sent))]
            w.send(request_bytes("GET", "/health"))
            after = w.response("a request after the pipelined ones, on the same connection")
        finally:
            w.close()
        statuses = [r.status for r in got]
        check(statuses == [s for *_, s in sent], f"statuses {statuses}, expected {[s for *_, s in sent]}")
        check(got[0].json().get("status") == "ok", f"answer 1 is not /health's: {got[0].body[:200]!r}")
        check(got[1].json().get("object") == "list", f"answer 2 is not /v1/models's: {got[1].body[:200]!r}")
        check(got[2].json().get("object") == "text_completion", f"answer 3 is not a completion: {got[2].body[:200]!r}")
        expect_openai_error(got[3], 404, "answer 4, /no-such-path")
        check(got[4].headers.get("content-type", "").startswith("text/css"),
              f"answer 5 is not the style sheet: {got[4].headers.get('content-type')}")
        check(after.status == 200, f"the request after: HTTP {after.status}")

    def head(self):
        base = self.serves.get("serve").base
        notes = []
        for path in ("/health", "/v1/models", "/", "/style.css"):
            w = Wire(base)
            try:
                w.send(request_bytes("HEAD", path))
                h = w.response(f"HEAD {path}", head_only=True)
                w.send(request_bytes("GET", path))  # on the same connection: a body after HEAD would come first
                g = w.response(f"GET {path} after HEAD {path}")
            finally:
                w.close()
            check(h.status == g.status == 200, f"HEAD {path}: HTTP {h.status}, GET: HTTP {g.status}")
            check(h.headers.get("content-length") == g.headers.get("content-length") == str(len(g.body)),
                  f"{path}: HEAD's Content-Length {h.headers.get('content-length')}, GET's "
                  f"{g.headers.get('content-length')}, GET's body {len(g.body)} bytes")
            notes.append(f"{path} {len(g.body)}")
        return "Content-Length " + ", ".join(notes)

    def connection_close(self):
        w = Wire(self.serves.get("serve").base)
        try:
            w.send(request_bytes("GET", "/health", headers=["Connection: close"]))
            r = w.response("GET /health with Connection: close")
            closed = w.closed_within(2)
        finally:
            w.close()
        check(r.status == 200, f"HTTP {r.status}")
        check(r.headers.get("connection", "").lower() == "close",
              f"the response says Connection: {r.headers.get('connection')!r}")
        check(closed is not None, "still open 2 s after the response to Connection: close")

    def http_1_0(self):
        base = self.serves.get("serve").base
        w = Wire(base)
        try:
            w.send(request_bytes("GET", "/health", version="HTTP/1.0"))
            r = w.response("GET /health HTTP/1.0")
            closed = w.closed_within(2)
        finally:
            w.close()
        check(r.status == 200, f"HTTP/1.0: HTTP {r.status}")
        check(closed is not None, "HTTP/1.0 without keep-alive: still open 2 s after the response")
        w = Wire(base)
        try:
            for i in (1, 2):
                w.send(request_bytes("GET", "/health", version="HTTP/1.0", headers=["Connection: keep-alive"]))
                r = w.response(f"HTTP/1.0 with Connection: keep-alive, request {i}")
                check(r.status == 200, f"HTTP/1.0 keep-alive, request {i}: HTTP {r.status}")
        finally:
            w.close()

    def routes(self):
        base = self.serves.get("serve").base

        def ask(method, path):
            return exchange(base, request_bytes(method, path, headers=["Connection: close"]), f"{method} {path}")
        for path in ("/styleXcss", "/v1/no-such-path", "/health/x"):
            expect_openai_error(ask("GET", path), 404, f"GET {path}")
        for method, path, allowed in (("POST", "/health", "GET"), ("GET", "/v1/completions", "POST"),
                                      ("DELETE", "/v1/models", "GET")):
            r = ask(method, path)
            expect_openai_error(r, 405, f"{method} {path}")
            allow = [m.strip() for m in r.headers.get("allow", "").split(",")]
            check(allowed in allow, f"{method} {path}: 405 with Allow {r.headers.get('allow')!r}, not naming {allowed}")

    # -- short timeouts --

    def header_timeout(self):
        w = Wire(self.serves.get("serve-short").base)
        try:
            w.send(b"G")
            t0 = time.monotonic()
            for byte in b"ET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n":  # a byte every 0.5 s: never idle for 1 s
                if w.closed_within(0.5) is not None:
                    break
                try:
                    w.send(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    break
            else:
                raise Failure(f"still open {time.monotonic() - t0:.1f} s after the headers' first byte "
                              f"(--header-timeout {SHORT_HEADER_TIMEOUT_S})")
            seconds = time.monotonic() - t0
        finally:
            w.close()
        check(seconds >= SHORT_HEADER_TIMEOUT_S - 0.5,
              f"closed {seconds:.2f} s after the first byte, before --header-timeout {SHORT_HEADER_TIMEOUT_S}")
        return f"closed after {seconds:.2f} s"

    def keep_alive_timeout(self):
        base = self.serves.get("serve-short").base
        slack = 2
        w = Wire(base)
        try:
            w.send(request_bytes("GET", "/health"))
            check(w.response("GET /health").status == 200, "GET /health failed")
            after_request = w.closed_within(SHORT_KEEP_ALIVE_S + slack)
        finally:
            w.close()
        check(after_request is not None, f"idle after a request: still open after {SHORT_KEEP_ALIVE_S + slack} s "
                                         f"(--keep-alive-timeout {SHORT_KEEP_ALIVE_S})")
        w = Wire(base)
        try:
            silent = w.closed_within(SHORT_KEEP_ALIVE_S + slack)
        finally:
            w.close()
        check(silent is not None, f"a connection that never sent a byte: still open after {SHORT_KEEP_ALIVE_S + slack}"
                                  f" s (--keep-alive-timeout {SHORT_KEEP_ALIVE_S})")
        return f"closed {after_request:.2f} s after a request, {silent:.2f} s after opening"

    def slow_body(self):
        length = 100000  # 6 s at MIN_BODY_RATE
        w = Wire(self.serves.get("serve-short").base)
        try:
            w.send(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n{" % length)
            t0 = time.monotonic()
            limit = SHORT_HEADER_TIMEOUT_S + length / MIN_BODY_RATE
            while time.monotonic() - t0 < limit:  # a byte every 0.5 s: 2 B/s
                if w.ended_within(0.5) is not None:
                    break
                try:
                    w.send(b" ")
                except (BrokenPipeError, ConnectionResetError):
                    break
            else:
                raise Failure(f"a body arriving at 2 B/s: still open after {limit:.1f} s")
            seconds = time.monotonic() - t0
        finally:
            w.close()
        # An answer before the close (408, say) is fine; a success is not.
        check(not re.match(rb"HTTP/1\.1 2", w.buffer), f"a body at 2 B/s was answered: {w.buffer[:200]!r}")
        check(seconds >= SHORT_HEADER_TIMEOUT_S - 0.5,
              f"closed {seconds:.2f} s into the body, within its allowance (--header-timeout "
              f"{SHORT_HEADER_TIMEOUT_S})")
        return f"closed after {seconds:.2f} s"

    # -- --max-connections --

    def max_connections(self):
        base = self.serves.get("serve-capped").base
        held = []
        try:
            for i in range(MAX_CONNECTIONS):
                held.append(Wire(base))
                held[-1].send(request_bytes("GET", "/health"))
                r = held[-1].response(f"connection {i + 1} of {MAX_CONNECTIONS}")
                check(r.status == 200, f"connection {i + 1} of {MAX_CONNECTIONS}: HTTP {r.status}")
            extra = Wire(base)
            try:
                r = extra.response(f"connection {MAX_CONNECTIONS + 1} (sending nothing), within 1 s", timeout=1.0)
                closed = extra.closed_within(2)
            finally:
                extra.close()
            expect_openai_error(r, 503, f"connection {MAX_CONNECTIONS + 1}", ["--max-connections"])
            check(r.version == "HTTP/1.1", f"the 503 is {r.version}")
            check(closed is not None, f"connection {MAX_CONNECTIONS + 1}: still open 2 s after its 503")
            held.pop().close()

            def served():
                return exchange(base, request_bytes("GET", "/health", headers=["Connection: close"]),
                                "a connection after one closed").status == 200
            poll("a connection in the place of a closed one served", served, 2, interval=0.1)
        finally:
            for w in held:
                w.close()

    # -- the key --

    def key_before_body(self):
        base = self.serves.get("serve-guarded").base
        notes = []
        for what, key in (("no key", None), ("a wrong key", API_KEY + "x")):
            w = Wire(base)
            try:
                head = request_bytes("POST", "/v1/completions", key=key,
                                     headers=["Content-Type: application/json", "Content-Length: 1000000"])
                w.send(head)
                t0 = time.monotonic()
                r = w.response(f"{what}, Content-Length 1000000 and no body sent", timeout=1.0)
                seconds = time.monotonic() - t0
                closed = w.closed_within(2)
            finally:
                w.close()
            expect_openai_error(r, 401, what)
            check(r.headers.get("connection", "").lower() == "close",
                  f"{what}: the 401 says Connection: {r.headers.get('connection')!r}")
            check(closed is not None, f"{what}: still open 2 s after the 401")
            notes.append(f"{what}: 401 after {seconds:.3f} s")
        open_client = self.client("serve-guarded")
        for path in ("/health", "/", "/style.css", "/app.js"):
            _, r = open_client.request("GET", path)
            check(r.status == 200, f"GET {path} without a key: HTTP {r.status}")
        _, r = self.client("serve-guarded", API_KEY).request("POST", "/v1/completions", COMPLETION)
        check(r.status == 200, f"a completion with the key: HTTP {r.status}: {r.body[:300]!r}")
        return "; ".join(notes)

    def queue_full(self):
        """Bursts of requests at once, more than the slots and the queue hold: every 503 names the queue truly."""
        base = self.serves.get("serve-guarded").base
        n, bursts = 12, 4
        # A long prompt: the first admitted runs a long step while the others arrive.
        body = {"prompt": "In the beginning God created the heaven and the earth. " * 40, "max_tokens": 200}
        request = request_bytes("POST", "/v1/completions", body, key=API_KEY)
        statuses = []
        for _ in range(bursts):
            wires = []
            try:
                for _ in range(n):
                    wires.append(Wire(base, timeout=60))
                    wires[-1].send(request[:-1])  # all but the last byte
                for w in wires:
                    w.send(request[-1:])
                got = [w.response(f"request {i + 1} of {n} at once", timeout=60) for i, w in enumerate(wires)]
            finally:
                for w in wires:
                    w.close()
            statuses += [r.status for r in got]
            for r in got:
                if r.status != 200:
                    message = expect_openai_error(r, 503, "a request beyond the queue", [f"--queue {GUARDED_QUEUE}"])
                    m = re.search(r"(\d+) requests? waits?", message)
                    check(m is None or int(m.group(1)) <= GUARDED_QUEUE,
                          f"the 503 claims {m and m.group(1)} requests wait, with --queue {GUARDED_QUEUE}: {message!r}")
        check(503 in statuses, f"{n} requests at once over {GUARDED_PARALLEL} slots and --queue {GUARDED_QUEUE}: "
                               "never a 503")
        return f"{bursts} bursts of {n}: {statuses.count(200)} served, {statuses.count(503)} refused"

    # -- HTTPS --

    def tls_slowloris(self):
        base = self.serves.get("serve-tls").base
        crowd = Crowd()
        try:
            return under_slowloris(self.client("serve-tls"), crowd, base, self.alone_of("serve-tls"),
                                   self.serves.tls, silent=100)
        finally:
            crowd.close()

    # -- starting and stopping --

    def port_in_use(self):
        serve = self.serves.get("serve")
        model = os.path.join(self.args.source, "models", MODEL)
        argv = self.serves.model_argv(model, "--local-only")
        argv[argv.index("--port") + 1] = str(serve.port)
        second = self.serves.start("serve-same-port", argv)

        def stderr():
            with open(second.err_path, errors="replace") as f:
                return f.read()
        try:
            poll("the second serve exits", lambda: second.proc.poll() is not None or "listening on" in stderr(), 15)
            check("listening on" not in stderr(),
                  f"a second serve listens on port {serve.port} too, in use by the first: {stderr()[:200]!r}")
        finally:
            code = second.stop()
        err = stderr()
        check(code == 1, f"the second serve exited {code}, expected 1")
        check(f"127.0.0.1:{serve.port}" in err and "in use" in err,
              f"stderr does not name 127.0.0.1:{serve.port} in use: {err[-500:]!r}")
        _, r = self.client("serve").request("GET", "/health")
        check(r.status == 200, f"the first serve: HTTP {r.status}")

    def failed_loads(self):
        model_dir = os.path.join(self.serves.work, "models")
        os.makedirs(model_dir, exist_ok=True)
        text = os.path.join(model_dir, "x.gguf")
        with open(text, "w") as f:
            f.write("not a model\n")
        kinds = [("missing", os.path.join(model_dir, "no-such-model.gguf")), ("text", text)]
        starts = [(kind, path, i) for kind, path in kinds for i in range(FAILED_STARTS)]
        failures, tried = [], 0
        while tried < len(starts) and not failures:  # a batch at a time, up to the first with a failure
            batch = [(Process(f"failed-{kind}-{i + 1}", self.serves.model_argv(path, "--local-only"),
                              self.serves.log_dir), path) for kind, path, i in starts[tried:tried + START_BATCH]]
            tried += len(batch)
            try:
                deadline = time.monotonic() + 10
                for p, path in batch:
                    try:
                        code = p.proc.wait(max(deadline - time.monotonic(), 0.1))
                    except subprocess.TimeoutExpired:
                        code = None
                    with open(p.err_path, errors="replace") as f:
                        err = f.read()
                    m = re.search(r"listening on https?://[\d.]+:(\d+)/", err)
                    if code is None:
                        failures.append(f"{p.name} still runs 10 s after starting ({err.strip()[-200:]!r})")
                    elif code == 0 or path not in err:
                        failures.append(f"{p.name} exited {code}, stderr {err.strip()[-200:]!r}")
                    elif m and connectable(int(m.group(1))) and p.group_alive():
                        # Its port alone proves nothing: once it is closed, another test's server may take it.
                        failures.append(f"{p.name} exited {code}, but its group lives on and port {m.group(1)} "
                                        f"still takes connections")
            finally:
                for p, _ in batch:
                    p.signal_group(signal.SIGKILL)
                for p, _ in batch:
                    p.proc.wait()
        check(not failures, f"{len(failures)} of the first {tried} starts did not end "
                            f"with an error: " + "; ".join(failures[:3]) + ("; ..." if len(failures) > 3 else ""))
        return f"{len(starts)} starts ({FAILED_STARTS} of each), all ended with an error"

    def sigterm_while_loading(self):
        """The serve's --rpc points at a socket that accepts and never answers: loading hangs."""
        mute = socket.create_server(("127.0.0.1", 0))
        accepted = []
        stop = threading.Event()

        def accept():
            mute.settimeout(0.1)
            while not stop.is_set():
                try:
                    accepted.append(mute.accept()[0])
                except socket.timeout:
                    pass
                except OSError:
                    return
        t = threading.Thread(target=accept, daemon=True)
        t.start()
        model = os.path.join(self.args.source, "models", MODEL)
        p = self.serves.start("serve-loading", self.serves.model_argv(
            model, "--rpc", f"127.0.0.1:{mute.getsockname()[1]}"))
        try:
            p.wait_for_line(p.err_path, r"listening on ", START_TIMEOUT_S)
            poll("serve connected to the mute server", lambda: accepted, 10)
            time.sleep(0.5)
            check(p.proc.poll() is None, f"serve exited ({p.proc.returncode}) before the signal")
            t0 = time.monotonic()
            os.kill(p.proc.pid, signal.SIGTERM)
            try:
                code = p.proc.wait(5)
            except subprocess.TimeoutExpired:
                raise Failure("serve still runs 5 s after SIGTERM, while its model loads")
            return f"exited {code} after {time.monotonic() - t0:.2f} s"
        finally:
            p.stop()
            stop.set()
            t.join()
            mute.close()
            for c in accepted:
                c.close()


def connectable(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def raise_open_files_limit():
    """The soft RLIMIT_NOFILE up to the hard one: a thousand connections need as many files (and serve inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def main():
    args = parse_arguments(__doc__, "a folder for logs, the certificate and the bad models",
                           ("--keep-going", dict(action="store_true", help="run every case; list each failure")))

    work = os.path.abspath(args.work)
    serves = Serves(args, work)
    for d in (serves.log_dir, os.path.join(work, "certs")):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    if raise_open_files_limit() < 2400:
        print("FAIL: the hard RLIMIT_NOFILE is under 2,400, too few for the connections")
        return 1

    # SIGTERM (ctest's timeout) ends the run through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("serve_hostile_test: terminated"))
    cases = Cases(args, serves)
    started = time.monotonic()
    failed = []

    def case(title, body, *a):
        t0 = time.monotonic()
        try:
            note = body(*a)
        except Exception as e:  # Failure: a check; anything else: the test's own error, with its trace
            what = str(e) if isinstance(e, Failure) else traceback.format_exc()
            print(f"FAIL {title} ({time.monotonic() - t0:.1f} s): {what}", flush=True)
            failed.append(title)
            if not args.keep_going:
                raise
            return
        print(f"ok   {title} ({time.monotonic() - t0:.1f} s{'; ' + note if note else ''})", flush=True)

    try:
        case("serve (the default limits) starts; its normal requests alone", cases.time_alone, "serve")
        case("slowloris: 200 connections drip a header byte every 2 s; /health and a completion answered in "
             "at most 2x their time alone", cases.slowloris)
        case("1,000 idle keep-alive connections; /health and a completion answered in at most 2x their time alone",
             cases.idle_keep_alive)
        case("a 128 MiB chunked body: 413, serve's peak RSS up by less than 64 MiB", cases.chunked_body)
        case("Content-Length 10^12 and no body: 413 within 1 s, closed", cases.huge_content_length)
        case("a 3 MiB prompt, more bytes than a slot's context can hold: 400 before tokenizing",
             cases.prompt_too_long_by_bytes)
        case("headers over 64 KiB: 431 saying so, closed; 48 KiB served", cases.huge_headers)
        case("5 pipelined requests in one write: 5 answers in order", cases.pipelined, "serve")
        case("HEAD: GET's status and Content-Length, no body", cases.head)
        case("Connection: close: said in the response, then closed", cases.connection_close)
        case("HTTP/1.0: answered and closed; with Connection: keep-alive, kept open", cases.http_1_0)
        case("exact routes: /styleXcss and unknown paths 404, a wrong method 405 with Allow, OpenAI errors",
             cases.routes)
        case("--header-timeout 2: headers dripped past it are closed without an answer", cases.header_timeout)
        case("--keep-alive-timeout 1: idle connections closed, after a request or before any", cases.keep_alive_timeout)
        case("a body slower than 16 KiB/s: closed", cases.slow_body)
        case("--max-connections 8: the 9th gets 503 naming it at once, closed; a freed place is taken",
             cases.max_connections)
        case("--api-key: 401 as soon as the headers are in, before the body, Connection: close; /health and the "
             "page open", cases.key_before_body)
        case("every slot busy and the queue full: 503 naming --queue 1, claiming no more waiting", cases.queue_full)
        case("HTTPS: serve starts; its normal requests alone", cases.time_alone, "serve-tls")
        case("HTTPS: 5 pipelined requests in one write: 5 answers in order", cases.pipelined, "serve-tls")
        case("HTTPS: 100 connections drip a header byte every 2 s, 100 never start TLS; /health and a completion "
             "answered in at most 2x their time alone", cases.tls_slowloris)
        case("a second serve on a port in use: exit 1, naming 127.0.0.1:PORT in use", cases.port_in_use)
        case("a model that cannot be loaded (missing, a text file x.gguf): an error and a non-zero exit, 20 of 20",
             cases.failed_loads)
        case("SIGTERM while the model loads (--rpc to a server that never answers): ended within 5 s",
             cases.sigterm_while_loading)
    except Exception:
        pass  # reported by case(); the logs below
    finally:
        serves.stop_all()
    if failed:
        print(f"\n{len(failed)} failed; the serves' logs (in {serves.log_dir}):\n{serves.logs()}", flush=True)
        return 1
    print(f"all passed in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
