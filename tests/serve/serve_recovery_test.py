#!/usr/bin/env python3
"""End-to-end test of `tensorpc serve` going on after losing a tensorpc-server.

    serve_recovery_test.py --cli PATH --server PATH --source DIR --work DIR

Serves kjv-bpe over tensorpc-servers only (--no-local) and kills one mid-work,
one line per case:

  - three servers, --split 1,1,1, 4 slots, --reconnect-wait 20: 8 streamed
    completions at temperature 0 run once without a fault, then again while
    the middle server is SIGKILLed and started again on its port 1 s later.
    Every stream ends with [DONE] and the very text of the fault-free run;
    /health says `recovering` (503, Retry-After, the lost server named) while
    it is down when a poll catches it, and 200 `ok` after; /metrics counts one
    recovery and tokens replayed; serve's stderr says which server was lost and
    that it answers again;
  - one server, --reconnect-wait 1, killed: a completion gets 503 with
    Retry-After naming the server, /health is 503 `degraded` naming it and
    /metrics counts the failure; once the server is back on its port, the next
    completion is served (200) and /health is 200 again;
  - one server, --no-recover, killed: a completion gets 500 naming the
    unreachable server, /health is 200 `degraded` naming it, and the failed
    step is one line of serve's log.

Every process started is stopped at the end, also on failure. Exits 1 at the
first failure, with the logs' tails.
"""
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
import traceback

from serve_test import Cluster, Stream, http, metrics, streamed_text
from serve_util import Failure, check, parse_arguments, poll

MODEL = "kjv-bpe.gguf"
PARALLEL = 4
SLOT_CTX = 256  # kjv-bpe's context: a prompt and its reply fit in it
MAX_TOKENS = 150
RECONNECT_WAIT_S = 20
DOWN_S = 1  # how long the killed server stays down
FLOWING_EVENTS = 3  # a stream that delivered this many events is under way
STREAM_TIMEOUT_S = 120  # the longest a stream may say nothing: a recovery on a loaded machine included
RECOVERY_TIMEOUT_S = 90

# One opening per stream; twice as many as the slots, so that some wait in the queue.
PROMPTS = [
    "In the beginning", "And God said", "The LORD is my shepherd", "Blessed are the",
    "For God so loved", "And it came to pass", "Thus saith the LORD", "Now the serpent was",
]


# One short completion, for the cases over one server.
SHORT = {"prompt": "In the beginning", "max_tokens": 8, "temperature": 0}


def completion(prompt, stream):
    return {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream}


def restart_rpc_server(cluster, lost):
    """The same tensorpc-server again, on the port the lost one had."""
    port = lost.endpoint.rpartition(":")[2]
    p = cluster.start(lost.name + "-again", [cluster.args.server, "--port", port, "-t", "1"])
    p.endpoint = p.wait_for_line(p.out_path, r"tensorpc-server listening on (\S+:\d+)", 30).group(1)
    check(p.endpoint == lost.endpoint, f"started again on {p.endpoint}, not {lost.endpoint}")
    return p


class QuietTolerantStream(Stream):
    """A Stream that skips SSE comments: serve sends `: ping` while a stream is quiet, as in a recovery."""

    def next_event(self, timeout):
        self._read_head()
        while (event := self._read_until(b"\n\n", timeout).decode()).startswith(":"):
            pass
        check(event.startswith("data: "), f"not a server-sent event: {event[:300]!r}")
        data = event[len("data: "):]
        return data if data == "[DONE]" else json.loads(data)


class StreamedRun:
    """The PROMPTS streamed at once, each in a thread; counts each stream's events as they come."""

    def __init__(self, base):
        self.base = base
        self.events = [0] * len(PROMPTS)
        self.results = [None] * len(PROMPTS)  # (text, finish_reason), or the exception that ended it
        self.threads = [threading.Thread(target=self._one, args=(i,), daemon=True) for i in range(len(PROMPTS))]
        for t in self.threads:
            t.start()

    def _one(self, i):
        s = QuietTolerantStream(self.base + "/v1/completions", completion(PROMPTS[i], stream=True))
        try:
            check(s.status == 200, f"status {s.status}")
            events = []
            while (e := s.next_event(STREAM_TIMEOUT_S)) != "[DONE]":
                if "error" in e:
                    raise Failure(f"an error event after {len(events)} events: {e['error']}")
                events.append(e)
                self.events[i] += 1
            self.results[i] = streamed_text(events)
        except Exception as e:  # reported by texts(), with its prompt
            self.results[i] = e
        finally:
            s.close()

    def flowing(self):
        """True once as many streams as slots have each delivered FLOWING_EVENTS events."""
        return sum(n >= FLOWING_EVENTS for n in self.events) >= PARALLEL

    def texts(self):
        """Each stream's text, once all ended without an error."""
        for t in self.threads:
            t.join(STREAM_TIMEOUT_S * 3)
        check(not any(t.is_alive() for t in self.threads), "a streamed request did not end")
        for i, result in enumerate(self.results):
            check(not isinstance(result, Exception), f"stream {i} ({PROMPTS[i]!r}): {result}")
        return [text for text, _ in self.results]


class HealthWatch:
    """/health polled in a thread until stop(); each answer checked and kept."""

    def __init__(self, base):
        self.base = base
        self.seen = []  # (HTTP status, status field, reason)
        self.error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while not self._stop.is_set():
                r = http(self.base + "/health", timeout=10)
                body = r.json()
                status, reason = body.get("status"), body.get("reason", "")
                # `recovering` is 503 with Retry-After; otherwise (the server came back) 200.
                if status == "recovering":
                    check(r.status == 503 and r.headers.get("retry-after"),
                          f"/health `recovering` answered {r.status}, Retry-After {r.headers.get('retry-after')!r}")
                else:
                    check(r.status == 200 and status == "ok", f"/health answered {r.status}: {r.body}")
                self.seen.append((r.status, status, reason))
                time.sleep(0.02)
        except Exception as e:  # reported by stop()
            self.error = e

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        if self.error:
            raise self.error
        return self.seen


def log_of(process):
    with open(process.err_path, errors="replace") as f:
        return f.read()


class Cases:
    def __init__(self, args, cluster):
        self.args = args
        self.cluster = cluster

    def serve(self, name, endpoints, *flags):
        serve = self.cluster.start_serve(name, MODEL, "--rpc", ",".join(endpoints), "--no-local", *flags)
        self.cluster.wait_ready(serve, int(flags[flags.index("--parallel") + 1]))
        return serve

    # -- three servers: the middle one killed mid-stream, back 1 s later --

    def middle_server_lost(self):
        servers = [self.cluster.start_rpc_server(f"server{i}") for i in (1, 2, 3)]
        endpoints = [s.endpoint for s in servers]
        serve = self.serve("serve", endpoints, "--split", "1,1,1", "--parallel", str(PARALLEL),
                           "-c", str(SLOT_CTX), "--reconnect-wait", str(RECONNECT_WAIT_S))
        base = serve.base
        fault_free = StreamedRun(base).texts()
        check(all(t.strip() for t in fault_free), f"an empty text in the fault-free run: {fault_free}")

        run = StreamedRun(base)
        poll(f"{PARALLEL} streams flowing", run.flowing, STREAM_TIMEOUT_S, interval=0.01)
        middle = servers[1]
        middle.signal_group(signal.SIGKILL)
        middle.proc.wait()
        check(any(r is None for r in run.results), "every stream ended before the kill: nothing was in flight")
        watch = HealthWatch(base)  # from the kill on: `recovering` is to be seen while the server is down
        try:
            time.sleep(DOWN_S)
            restart_rpc_server(self.cluster, middle)
            texts = run.texts()
        finally:
            seen = watch.stop()
        for i, (got, want) in enumerate(zip(texts, fault_free)):
            check(got == want, f"stream {i} ({PROMPTS[i]!r}) gave {got!r} through the recovery, "
                               f"{want!r} without a fault")

        log = log_of(serve)
        check(f"recovery: server {middle.endpoint} lost" in log, f"serve's stderr does not say {middle.endpoint} was lost")
        check(re.search(rf"recovery: server {re.escape(middle.endpoint)} answers again", log),
              f"serve's stderr does not say {middle.endpoint} answers again")
        placed = re.search(r"recovery: placed again:\n((?:.+\n)+)", log)
        check(placed and middle.endpoint in placed.group(1),
              f"serve's stderr does not show layers placed on {middle.endpoint} again")
        check("recovery: recovered in" in log, "serve's stderr does not say it recovered")
        check("recovery failed" not in log, "serve's stderr says a recovery failed")

        m = metrics(base)
        check(m.get("tensorpc_recoveries_total") == 1, f"tensorpc_recoveries_total {m.get('tensorpc_recoveries_total')}")
        check(m.get("tensorpc_recovery_failures_total") == 0,
              f"tensorpc_recovery_failures_total {m.get('tensorpc_recovery_failures_total')}")
        check(m.get("tensorpc_recovery_tokens_replayed_total", 0) > 0, "no tokens replayed in /metrics")
        check(m.get("tensorpc_recovering") == 0, "tensorpc_recovering is not 0 after the recovery")

        r = http(base + "/health")
        check(r.status == 200 and r.json().get("status") == "ok", f"/health after the recovery: {r.status} {r.body}")
        recovering = [reason for _, status, reason in seen if status == "recovering"]
        if recovering:
            check(any(middle.endpoint in reason for reason in recovering),
                  f"/health `recovering` does not name {middle.endpoint}: {recovering}")
        recovered = re.search(r"recovery: (recovered in .*)", log).group(1)
        caught = f"/health `recovering` {len(recovering)} times of {len(seen)}" if recovering else \
            f"/health never caught `recovering` in {len(seen)} polls"
        return f"{middle.endpoint} lost; {recovered}; {caught}"

    # -- one server: nothing takes its place, then it comes back --

    def one_server_then_killed(self, name, flag):
        """A serve over one server (with `flag`) that answered once, and that server killed since."""
        server = self.cluster.start_rpc_server("server-" + name)
        serve = self.serve("serve-" + name, [server.endpoint], "--parallel", "1", "-c", str(SLOT_CTX), *flag)
        r = http(serve.base + "/v1/completions", "POST", SHORT)
        check(r.status == 200, f"before the kill: {r.status} {r.body[:300]}")
        server.signal_group(signal.SIGKILL)
        server.proc.wait()
        return server, serve, serve.base

    def failure_then_retry(self):
        server, serve, base = self.one_server_then_killed("alone", ["--reconnect-wait", "1"])
        r = http(base + "/v1/completions", "POST", SHORT, timeout=RECOVERY_TIMEOUT_S)
        check(r.status == 503, f"with the only server down: {r.status} {r.body[:300]}")
        retry = r.headers.get("retry-after", "")
        check(retry.isdigit() and int(retry) >= 1, f"Retry-After {retry!r}")
        message = (r.json().get("error") or {}).get("message", "")
        check(server.endpoint in message, f"the 503 does not name {server.endpoint}: {r.body[:300]}")

        r = http(base + "/health")
        check(r.status == 503 and r.headers.get("retry-after"), f"/health: {r.status}, "
                                                                 f"Retry-After {r.headers.get('retry-after')!r}")
        check(r.json().get("status") == "degraded", f"/health says {r.body}")
        check(server.endpoint in r.json().get("reason", ""), f"/health's reason does not name {server.endpoint}: {r.body}")
        m = metrics(base)
        check(m.get("tensorpc_recovery_failures_total", 0) >= 1,
              f"tensorpc_recovery_failures_total {m.get('tensorpc_recovery_failures_total')}")
        check("recovery: recovery failed" in log_of(serve), "serve's stderr does not say the recovery failed")

        restart_rpc_server(self.cluster, server)
        r = http(base + "/v1/completions", "POST", SHORT, timeout=RECOVERY_TIMEOUT_S)
        check(r.status == 200, f"the next request, the server back: {r.status} {r.body[:300]}")
        text = r.json()["choices"][0]["text"]
        check(f"recovery: server {server.endpoint} answers again" in log_of(serve),
              f"serve's stderr does not say {server.endpoint} answers again")
        check(text.strip(), "the completion after the server came back is empty")
        r = http(base + "/health")
        check(r.status == 200 and r.json().get("status") == "ok", f"/health once served again: {r.status} {r.body}")
        return f"503 said {message[:80]!r}...; then served {text!r}"

    # -- recovery off: the error is the answer, and it is said --

    def no_recover(self):
        server, serve, base = self.one_server_then_killed("no-recover", ["--no-recover"])
        r = http(base + "/v1/completions", "POST", SHORT, timeout=RECOVERY_TIMEOUT_S)
        check(r.status == 500, f"with the only server down and --no-recover: {r.status} {r.body[:300]}")
        message = (r.json().get("error") or {}).get("message", "")
        check(server.endpoint in message and "cannot compute" not in message,
              f"the 500 does not say {server.endpoint} is unreachable: {message[:300]}")
        r = http(base + "/health")
        check(r.status == 200 and r.json().get("status") == "degraded", f"/health says {r.status} {r.body}")
        check(server.endpoint in r.json().get("reason", ""), f"/health's reason does not name {server.endpoint}: {r.body}")
        log = log_of(serve)
        check("a step failed, ending its 1 request" in log and server.endpoint in log,
              "serve's stderr does not say the step failed, naming the server")
        check("recovery:" not in log, "recovery lines with --no-recover")
        return f"500 said {message[:80]!r}..."


def main():
    args = parse_arguments(__doc__, "a folder for the logs")
    if not shutil.which("curl"):
        print("FAIL: curl is not installed (scripts/install-deps.sh installs it)")
        return 1
    log_dir = os.path.join(os.path.abspath(args.work), "logs")
    shutil.rmtree(log_dir, ignore_errors=True)
    os.makedirs(log_dir)

    # SIGTERM (ctest's timeout) ends the run through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("serve_recovery_test: terminated"))
    cluster = Cluster(args, log_dir)
    cases = Cases(args, cluster)
    started = time.monotonic()
    name = "setup"

    def case(title, body):
        nonlocal name
        name = title
        t0 = time.monotonic()
        note = body()
        print(f"ok   {title} ({time.monotonic() - t0:.1f} s{'; ' + note if note else ''})", flush=True)

    try:
        case("the middle of three servers killed mid-stream and back: every stream ends with its fault-free text",
             cases.middle_server_lost)
        case("the only server down: 503 and /health degraded; back on its port: the next request is served",
             cases.failure_then_retry)
        case("--no-recover: 500 naming the unreachable server, /health degraded, the failed step logged",
             cases.no_recover)
    except Exception as e:  # Failure: a check; anything else: the test's own error, with its trace
        what = str(e) if isinstance(e, Failure) else traceback.format_exc()
        print(f"FAIL {name}: {what}\n\nthe processes' logs (in {log_dir}):\n{cluster.logs()}", flush=True)
        return 1
    finally:
        cluster.stop_all()
    print(f"all passed in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
