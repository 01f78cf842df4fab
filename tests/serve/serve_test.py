#!/usr/bin/env python3
"""End-to-end tests of `tensorpc serve`, against the real binaries.

    serve_test.py --cli PATH --server PATH --source DIR --work DIR

Starts two tensorpc-servers (port 0, two CPU devices each) and four serves: the
chat model over both servers' four devices with 4 slots and --lookup; the same
model with a key, one slot, no queue, a long context and a small --max-body;
kjv-tiny (no chat template) on the local CPU; and the chat model on the local
CPU with the chatml template and the bundled draft model, for tools. Then checks, one line per case, with
curl:

  - bad requests get OpenAI's error JSON and the status that says whose fault:
    malformed JSON, a field of the wrong type, an unknown model, a prompt
    longer than a slot's context, an empty or too long embeddings input (400);
    an unknown path (404); a body over
    --max-body (413, one under it is served); a missing or wrong key (401,
    while /health needs none); every slot busy and no queue (503, Retry-After);
  - /metrics and /v1/cluster name both servers, and /v1/cluster both devices of each;
  - a client that hangs up mid-stream frees its slot within seconds, its
    request stopped long before max_tokens;
  - 16 streamed requests at once over 4 slots all end with [DONE], each with
    the text the same request gets alone, and were batched (fewer steps than
    tokens);
  - /v1/completions at temperature 0 continues a prompt as `tensorpc run
    --temp 0` does;
  - with --lookup, and with --draft-model (the tools serve, after the packages'
    tool calls), /metrics counts the drafted and accepted tokens and the
    tokens per decode step (the texts above being those without it);
  - a model without a chat template: chat refused (400), completions served;
  - the official `openai` npm package (openai_client_test.mjs), the official
    `@anthropic-ai/sdk` on /v1/messages (anthropic_client_test.mjs), the `ollama`
    package on /api/* (ollama_client_test.mjs), and the web page in Chromium
    (page_test.mjs, when present: chats kept across reloads, token probabilities,
    the cluster view of 2 servers x 2 devices on one 1280x800 screen);
  - SIGTERM stops a serve with exit status 0.

The npm packages are installed once into WORK/npm. Every process started is
stopped at the end, also on failure. Exits 1 at the first failure, with the
logs' tails.
"""
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback

from serve_util import Failure, Process, Response, check, parse_arguments, parse_head, poll

HEALTH_TIMEOUT_S = 60
REQUEST_TIMEOUT_S = 60
HANGUP_TIMEOUT_S = 5  # a hung-up stream's slot is free again within this
API_KEY = "serve-test-key"
GUARDED_MAX_BODY = 4096
GUARDED_CTX = 4096
LONG_MAX_TOKENS = 4000  # a request that runs for seconds on the guarded serve
TINY_CTX = 16384  # kjv-tiny's slot: a request as long runs for seconds
SERVER_DEVICES = 2  # CPU devices of each tensorpc-server, one thread each
NPM_PACKAGES = ["openai@4.104.0", "@anthropic-ai/sdk@1.17.0", "ollama@0.6.4", "ajv@8.17.1",
                "puppeteer-core@23.11.1"]

# Different openings, one per concurrent request.
PROMPTS = [
    "In the beginning", "And God said", "The LORD is my shepherd", "Blessed are the",
    "For God so loved", "And it came to pass", "Thus saith the LORD", "Now the serpent was",
    "Let not your heart", "Hear, O Israel", "The heavens declare", "Honour thy father",
    "And Moses said", "I am the way", "Remember now thy Creator", "Vanity of vanities",
]


# ---- HTTP through curl ---------------------------------------------------------------

def _curl_argv(url, method, key, headers):
    argv = ["curl", "-sS", "-i", "-X", method, "-H", "Expect:"]
    if key is not None:
        argv += ["-H", f"Authorization: Bearer {key}"]
    for h in headers:
        argv += ["-H", h]
    return argv


def _encode(body):
    if isinstance(body, (dict, list)):
        return json.dumps(body).encode()
    return body.encode() if isinstance(body, str) else body


def http(url, method="GET", body=None, key=None, headers=(), timeout=REQUEST_TIMEOUT_S):
    """One request through curl; body: a dict (sent as JSON), str or bytes."""
    argv = _curl_argv(url, method, key, headers) + ["--max-time", str(timeout)]
    data = None
    if body is not None:
        data = _encode(body)
        argv += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    r = subprocess.run(argv + [url], input=data, capture_output=True, timeout=timeout + 10)
    if r.returncode != 0:
        raise Failure(f"curl {method} {url} failed ({r.returncode}): {r.stderr.decode(errors='replace').strip()}")
    head, _, rest = r.stdout.partition(b"\r\n\r\n")
    status, hdrs = parse_head(head)
    return Response(status, hdrs, rest.decode(errors="replace"))


class Stream:
    """A streamed request through `curl -N`, read event by event; close() hangs up."""

    def __init__(self, url, body, key=None):
        argv = _curl_argv(url, "POST", key, ["Content-Type: application/json"])
        argv += ["-N", "--max-time", "300", "--data-binary", "@-", url]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.proc.stdin.write(_encode(body))
        self.proc.stdin.close()
        self.buffer = b""
        self._head = None

    def _read_head(self):
        # Read when asked: a request that waits in the queue may get no header yet.
        if self._head is None:
            self._head = parse_head(self._read_until(b"\r\n\r\n", REQUEST_TIMEOUT_S))
        return self._head

    @property
    def status(self):
        return self._read_head()[0]

    @property
    def headers(self):
        return self._read_head()[1]

    def _read_until(self, separator, timeout):
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while separator not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure(f"the stream said nothing for {timeout} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    err = self.proc.stderr.read().decode(errors="replace").strip()
                    raise Failure(f"the stream ended without an end ({err or 'curl saw no error'}); "
                                  f"last bytes {self.buffer[-300:]!r}")
                self.buffer += data
        item, _, self.buffer = self.buffer.partition(separator)
        return item

    def next_event(self, timeout=REQUEST_TIMEOUT_S):
        """The next event's data: a dict, or the string '[DONE]'."""
        self._read_head()
        event = self._read_until(b"\n\n", timeout).decode()
        check(event.startswith("data: "), f"not a server-sent event: {event[:300]!r}")
        data = event[len("data: "):]
        return data if data == "[DONE]" else json.loads(data)

    def read_all(self, timeout=REQUEST_TIMEOUT_S):
        """Every event up to [DONE] (excluded)."""
        events = []
        while (e := self.next_event(timeout)) != "[DONE]":
            events.append(e)
        return events

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


def expect_error(resp, status, type_, code=None, param=None):
    """`resp` is an OpenAI error of this status, type, code and param."""
    check(resp.status == status, f"status {resp.status}, expected {status}: {resp.body[:300]}")
    body = resp.json()
    check(isinstance(body.get("error"), dict), f"no error object: {resp.body[:300]}")
    err = body["error"]
    check(set(err) == {"message", "type", "param", "code"}, f"the error's fields are {sorted(err)}")
    check(isinstance(err["message"], str) and err["message"], "the error has no message")
    check(err["type"] == type_, f"type {err['type']!r}, expected {type_!r}: {err['message']}")
    if code is not None:
        check(err["code"] == code, f"code {err['code']!r}, expected {code!r}: {err['message']}")
    if param is not None:
        check(err["param"] == param, f"param {err['param']!r}, expected {param!r}: {err['message']}")
    return err


def metrics(base, key=None):
    """/metrics as {'name{labels}': value}."""
    r = http(base + "/metrics", key=key)
    check(r.status == 200, f"/metrics answered {r.status}")
    values = {}
    for line in r.body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


# ---- the processes -------------------------------------------------------------------

class Cluster:
    """Everything started, stopped together."""

    def __init__(self, args, log_dir):
        self.args = args
        self.log_dir = log_dir
        self.processes = []

    def start(self, name, argv):
        p = Process(name, argv, self.log_dir)
        self.processes.append(p)
        return p

    def start_rpc_server(self, name, devices=1):
        """A tensorpc-server with `devices` CPU devices of one thread each."""
        p = self.start(name, [self.args.server, "--port", "0", *["--device", "cpu:1"] * devices])
        p.endpoint = p.wait_for_line(p.out_path, r"tensorpc-server listening on (\S+:\d+)", 30).group(1)
        return p

    def start_serve(self, name, model, *flags):
        argv = [self.args.cli, "serve", "-m", os.path.join(self.args.source, "models", model),
                "--port", "0", "-t", "1", *flags]
        p = self.start(name, argv)
        p.base = p.wait_for_line(p.err_path, r"listening on (http://\S+):(\d+)/ \(the model is loading\)",
                                 30).expand(r"\1:\2")
        return p

    def wait_ready(self, serve, parallel):
        """/health 200 within HEALTH_TIMEOUT_S; returns the positions of each slot."""
        def healthy():
            if serve.proc.poll() is not None:
                raise Failure(f"{serve.name} exited ({serve.proc.returncode}) while loading")
            r = http(serve.base + "/health")
            if r.status == 503:  # loading: says so, and when to ask again
                check(r.json().get("status") == "loading", f"/health 503 says {r.body}")
                check(r.headers.get("retry-after"), "/health 503 without Retry-After")
            else:
                check(r.status == 200, f"/health answered {r.status}: {r.body}")
            return r.status == 200
        poll(f"{serve.name}: /health 200", healthy, HEALTH_TIMEOUT_S, interval=0.1)
        m = serve.wait_for_line(serve.out_path, r"serving \S+ at (\S+) \((\d+) slots of (\d+) positions\)", 10)
        check(m.group(1) == serve.base + "/", f"served at {m.group(1)}, listening at {serve.base}/")
        check(int(m.group(2)) == parallel, f"{m.group(2)} slots, --parallel {parallel}")
        return int(m.group(3))

    def stop_all(self):
        for p in reversed(self.processes):
            p.stop()

    def logs(self):  # the serves' first
        return "\n".join(p.logs() for p in reversed(self.processes))


def ensure_npm_packages(npm_dir, need_puppeteer):
    """Installs NPM_PACKAGES into npm_dir once; later runs find them there."""
    wanted = ["openai", "@anthropic-ai/sdk", "ollama", "ajv"] + (["puppeteer-core"] if need_puppeteer else [])
    if all(os.path.isdir(os.path.join(npm_dir, "node_modules", p)) for p in wanted):
        return "already installed"
    npm = shutil.which("npm")
    check(npm, "npm is not installed (scripts/install-deps.sh installs nodejs, which ships it)")
    os.makedirs(npm_dir, exist_ok=True)
    env = dict(os.environ, PUPPETEER_SKIP_DOWNLOAD="1")
    # --legacy-peer-deps: the clients' optional peer `zod` is wanted in two versions, and neither test needs it.
    r = subprocess.run([npm, "install", "--prefix", npm_dir, "--no-audit", "--no-fund", "--no-save", "--legacy-peer-deps",
                        *NPM_PACKAGES],
                       env=env, capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, f"npm install failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return "installed " + " ".join(NPM_PACKAGES)


def run_node(script, argv, npm_dir, timeout):
    env = dict(os.environ, TENSORPC_NPM_DIR=npm_dir)
    try:
        r = subprocess.run(["node", script, *argv], env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise Failure(f"{os.path.basename(script)} ran past {timeout} s; its output:\n{e.stdout or ''}{e.stderr or ''}")
    output = (r.stdout + r.stderr).rstrip()
    check(r.returncode == 0, f"{os.path.basename(script)} failed ({r.returncode}):\n{output}")
    return output


# ---- the cases -----------------------------------------------------------------------

def completion_text(body):
    return body["choices"][0]["text"] if body["object"].startswith("text_completion") \
        else body["choices"][0]["message"]["content"]


def request_of(i, max_tokens, stream):
    """The i-th of the concurrent requests: completions for even i, chat for odd."""
    body = {"temperature": 0, "max_tokens": max_tokens, "stream": stream}
    if i % 2 == 0:
        return "/v1/completions", dict(body, prompt=PROMPTS[i])
    return "/v1/chat/completions", dict(body, messages=[{"role": "user", "content": PROMPTS[i]}])


def streamed_text(events):
    """The text and finish_reason of a stream's events (chat or completions)."""
    text, finishes = "", []
    for e in events:
        for choice in e["choices"]:
            text += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            if choice.get("finish_reason"):
                finishes.append(choice["finish_reason"])
    check(len(finishes) == 1, f"finish_reasons {finishes}")
    return text, finishes[0]


class Cases:
    def __init__(self, args, cluster):
        self.args = args
        self.cluster = cluster

    # -- the 4-slot serve over both servers --

    def bad_requests(self, base, n_ctx):
        url = base + "/v1/completions"
        expect_error(http(url, "POST", '{"prompt": "In the beginning", '), 400, "invalid_request_error",
                     "invalid_json")
        expect_error(http(url, "POST", {"prompt": "In", "temperature": "hot"}), 400, "invalid_request_error",
                     "invalid_type", "temperature")
        expect_error(http(url, "POST", {"prompt": "In", "model": "no-such-model"}), 400, "invalid_request_error",
                     "model_not_found", "model")
        long_text = "In the beginning God created the heaven and the earth. " * (n_ctx // 4)
        err = expect_error(http(url, "POST", {"prompt": long_text, "max_tokens": 1}), 400, "invalid_request_error",
                           "context_length_exceeded", "prompt")
        check(str(n_ctx) in err["message"], f"the message does not give the context ({n_ctx}): {err['message']}")
        expect_error(http(base + "/v1/chat/completions", "POST",
                          {"messages": [{"role": "user", "content": long_text}], "max_tokens": 1}),
                     400, "invalid_request_error", "context_length_exceeded", "messages")
        expect_error(http(base + "/v1/embeddings", "POST", {"input": ""}), 400, "invalid_request_error",
                     "invalid_value", "input")
        expect_error(http(base + "/v1/embeddings", "POST", {"input": [long_text]}), 400, "invalid_request_error",
                     "context_length_exceeded", "input")
        expect_error(http(base + "/v1/embeddings", "POST", {"input": [[1, 2], [10 ** 9]]}), 400,
                     "invalid_request_error", "invalid_value", "input")
        expect_error(http(base + "/v1/no-such-path"), 404, "not_found_error", "not_found")
        expect_error(http(base + "/v1/no-such-path", "POST", {}), 404, "not_found_error", "not_found")

    def models(self, base):
        r = http(base + "/v1/models")
        check(r.status == 200, f"/v1/models answered {r.status}")
        ids = [m["id"] for m in r.json()["data"]]
        check(ids == ["kjv-bpe"], f"/v1/models lists {ids}")

    def token_endpoints(self, base):
        text = "In the beginning God created the heaven"
        r = http(base + "/tokenize", "POST", {"content": text})
        check(r.status == 200, f"/tokenize answered {r.status}: {r.body[:200]}")
        tokens = r.json()["tokens"]
        check(tokens and all(isinstance(t, int) for t in tokens), f"/tokenize gave {tokens}")
        r = http(base + "/detokenize", "POST", {"tokens": tokens})
        check(r.status == 200 and r.json()["content"] == text, f"/detokenize gave {r.status} {r.body[:200]}")
        r = http(base + "/detokenize", "POST", {"tokens": [10 ** 9]})
        expect_error(r, 400, "invalid_request_error", param="tokens[0]")
        r = http(base + "/apply-template", "POST", {"messages": [{"role": "user", "content": "Who made the heaven?"}]})
        check(r.status == 200 and "Who made the heaven?" in r.json()["prompt"],
              f"/apply-template gave {r.status} {r.body[:200]}")
        return f"{len(tokens)} tokens"

    def metrics_and_cluster(self, base, endpoints):
        m = metrics(base)
        check(m.get("tensorpc_slots_total") == 4, f"tensorpc_slots_total {m.get('tensorpc_slots_total')}")
        check(m.get("tensorpc_ready") == 1, "tensorpc_ready is not 1")
        check(m.get('tensorpc_requests_total{endpoint="completions",status="400"}', 0) >= 4,
              "the 400s of /v1/completions are not counted")
        for ep in endpoints:
            trips = m.get(f'tensorpc_server_round_trips_total{{server="{ep}"}}', 0)
            check(trips > 0, f"no round trips to {ep} in /metrics")
        r = http(base + "/v1/cluster")
        check(r.status == 200, f"/v1/cluster answered {r.status}")
        shown = [d["endpoint"] for d in r.json()["devices"]]
        check(set(endpoints) <= set(shown), f"/v1/cluster shows {sorted(set(shown))}, not both of {endpoints}")
        for ep in endpoints:
            check(shown.count(ep) == SERVER_DEVICES, f"/v1/cluster shows {shown.count(ep)} devices of {ep}, "
                                                     f"not {SERVER_DEVICES}")

    def concurrent_streams(self, base):
        max_tokens = 32
        alone = []
        for i in range(len(PROMPTS)):
            path, body = request_of(i, max_tokens, stream=False)
            r = http(base + path, "POST", body)
            check(r.status == 200, f"request {i} alone: {r.status} {r.body[:300]}")
            alone.append((completion_text(r.json()), r.json()["choices"][0]["finish_reason"]))
        before = metrics(base)

        results = [None] * len(PROMPTS)
        start = threading.Barrier(len(PROMPTS))

        def one(i):
            try:
                path, body = request_of(i, max_tokens, stream=True)
                start.wait(30)
                s = Stream(base + path, body)
                try:
                    check(s.status == 200, f"status {s.status}")
                    results[i] = streamed_text(s.read_all())
                finally:
                    s.close()
            except Exception as e:  # reported below, with its request
                results[i] = e

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(REQUEST_TIMEOUT_S * 2)
        check(not any(t.is_alive() for t in threads), "a streamed request did not end")
        for i, result in enumerate(results):
            check(not isinstance(result, Exception), f"streamed request {i} ({PROMPTS[i]!r}): {result}")
            check(result == alone[i], f"streamed request {i} ({PROMPTS[i]!r}) gave {result!r} at once "
                                      f"and {alone[i]!r} alone")
        after = metrics(base)
        steps = after["tensorpc_steps_total"] - before["tensorpc_steps_total"]
        tokens = after["tensorpc_generated_tokens_total"] - before["tensorpc_generated_tokens_total"]
        check(steps < tokens, f"{tokens:.0f} tokens in {steps:.0f} steps: the requests were not batched")
        return f"{tokens:.0f} tokens in {steps:.0f} steps"

    def lookup_metrics(self, base):
        m = metrics(base)
        names = ["tensorpc_draft_tokens_total", "tensorpc_draft_accepted_total", "tensorpc_tokens_per_decode_step"]
        missing = [n for n in names if n not in m]
        check(not missing, f"/metrics lacks {missing}")
        drafted, accepted, per_step = (m[n] for n in names)
        check(drafted > 0, "speculation drafted no token")
        check(0 <= accepted <= drafted, f"{accepted:.0f} of {drafted:.0f} drafted tokens accepted")
        check(per_step >= 1, f"{per_step} tokens per decode step")
        return f"{accepted:.0f} of {drafted:.0f} drafted tokens accepted, {per_step:.2f} tokens per decode step"

    def same_as_run(self, base, endpoints, model, local_only=False):
        n = 32
        for prompt in ("In the beginning", "And the LORD spake unto Moses"):
            r = http(base + "/v1/completions", "POST", {"prompt": prompt, "max_tokens": n, "temperature": 0})
            check(r.status == 200, f"{r.status} {r.body[:300]}")
            served = r.json()["choices"][0]["text"]
            where = ["--local-only"] if local_only else ["--rpc", ",".join(endpoints)]
            argv = [self.args.cli, "run", "-m", os.path.join(self.args.source, "models", model), "-p", prompt,
                    "-n", str(n), "--temp", "0", "-t", "1", *where]
            run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            check(run.returncode == 0, f"`{' '.join(argv)}` failed ({run.returncode}):\n{run.stderr[-2000:]}")
            # run prints the prompt, its continuation, then a newline.
            out = run.stdout
            check(out.startswith(prompt) and out.endswith("\n"), f"run printed {out!r}")
            continuation = out[len(prompt):-1]
            check(served == continuation, f"{prompt!r}: served {served!r}, run printed {continuation!r}")

    # -- the guarded serve: a key, one slot, no queue, a small body limit --

    def api_key(self, base):
        for path, method, body in (("/v1/models", "GET", None),
                                   ("/v1/completions", "POST", {"prompt": "In", "max_tokens": 1}),
                                   ("/v1/embeddings", "POST", {"input": "In the beginning"})):
            r = http(base + path, method, body)
            expect_error(r, 401, "authentication_error", "invalid_api_key")
            check(r.headers.get("www-authenticate", "").startswith("Bearer"), f"{path}: no WWW-Authenticate: Bearer")
            expect_error(http(base + path, method, body, key=API_KEY + "x"), 401, "authentication_error",
                         "invalid_api_key")
            r = http(base + path, method, body, key=API_KEY)
            check(r.status == 200, f"{method} {path} with the key: {r.status} {r.body[:300]}")
        r = http(base + "/health")
        check(r.status == 200 and r.json().get("status") == "ok", f"/health without a key: {r.status} {r.body}")

    def max_body(self, base):
        url = base + "/v1/completions"
        def body_of(size):  # a completion request of about `size` bytes
            return {"prompt": "In the beginning " * (size // 17), "max_tokens": 1}
        under = body_of(GUARDED_MAX_BODY - 100)
        check(len(json.dumps(under)) <= GUARDED_MAX_BODY, "the test's body is too large")
        r = http(url, "POST", under, key=API_KEY)
        check(r.status == 200, f"a body of {len(json.dumps(under))} bytes (limit {GUARDED_MAX_BODY}): "
                               f"{r.status} {r.body[:300]}")
        over = body_of(2 * GUARDED_MAX_BODY)
        expect_error(http(url, "POST", over, key=API_KEY), 413, "invalid_request_error", "body_too_large")

    def slot_busy_queue_full(self, base):
        poll("slots free", lambda: metrics(base, API_KEY)["tensorpc_slots_active"] == 0, HANGUP_TIMEOUT_S)
        held = Stream(base + "/v1/completions", {"prompt": "In the beginning", "max_tokens": LONG_MAX_TOKENS,
                                                 "temperature": 0, "stream": True}, key=API_KEY)
        try:
            check(held.status == 200, f"the long request: {held.status}")
            held.next_event()  # it has the slot
            r = http(base + "/v1/completions", "POST", {"prompt": "In", "max_tokens": 1}, key=API_KEY)
            expect_error(r, 503, "server_error", "unavailable")
            retry = r.headers.get("retry-after", "")
            check(retry.isdigit() and int(retry) >= 1, f"Retry-After {retry!r}")
            m = metrics(base, API_KEY)
            check(m["tensorpc_slots_active"] == 1, f"tensorpc_slots_active {m['tensorpc_slots_active']} while held")
            check(m.get('tensorpc_requests_total{endpoint="completions",status="503"}', 0) >= 1,
                  "the 503 is not counted")
        finally:
            held.close()

    def hang_up(self, base):
        poll("slots free", lambda: metrics(base, API_KEY)["tensorpc_slots_active"] == 0, HANGUP_TIMEOUT_S)
        before = metrics(base, API_KEY)["tensorpc_generated_tokens_total"]
        s = Stream(base + "/v1/chat/completions",
                   {"messages": [{"role": "user", "content": "Tell me of the kings of Israel"}],
                    "max_tokens": LONG_MAX_TOKENS, "temperature": 0, "stream": True}, key=API_KEY)
        try:
            check(s.status == 200, f"status {s.status}")
            s.next_event()
            s.next_event()
            check(metrics(base, API_KEY)["tensorpc_slots_active"] == 1, "the slot is not active while streaming")
        finally:
            s.close()  # hangs up
        hung_up = time.monotonic()
        poll("tensorpc_slots_active 0 after the hang-up",
             lambda: metrics(base, API_KEY)["tensorpc_slots_active"] == 0, HANGUP_TIMEOUT_S)
        freed = time.monotonic() - hung_up
        generated = metrics(base, API_KEY)["tensorpc_generated_tokens_total"] - before
        check(generated < LONG_MAX_TOKENS / 2,
              f"{generated:.0f} tokens generated of max_tokens {LONG_MAX_TOKENS}: the request was not stopped")
        r = http(base + "/v1/completions", "POST", {"prompt": "In", "max_tokens": 4}, key=API_KEY)
        check(r.status == 200, f"the next request: {r.status} {r.body[:300]}")
        return f"freed after {freed:.2f} s, {generated:.0f} tokens generated"

    # -- kjv-tiny: no chat template --

    def no_chat_template(self, base):
        r = http(base + "/v1/chat/completions", "POST", {"messages": [{"role": "user", "content": "Hello"}]})
        expect_error(r, 400, "invalid_request_error", "no_chat_template", "messages")
        r = http(base + "/v1/completions", "POST", {"prompt": "In the beginning", "max_tokens": 8, "temperature": 0})
        check(r.status == 200, f"completions: {r.status} {r.body[:300]}")
        check(r.json()["choices"][0]["text"].strip(), "the completion is empty")

    def queued_hang_up(self, base):
        """Known bug: a streaming client that hangs up while its request waits in
        the queue keeps its place there until a slot frees (http_server.cpp: the
        500 ms wake asks sink.is_writable(), which a socket whose peer closed
        still is), so hung-up clients can fill the queue and get others 503s."""
        poll("slots free", lambda: metrics(base)["tensorpc_slots_active"] == 0, HANGUP_TIMEOUT_S)
        held = Stream(base + "/v1/completions", {"prompt": "In the beginning", "max_tokens": TINY_CTX - 100,
                                                 "temperature": 0, "stream": True})
        try:
            held.next_event()
            queued = Stream(base + "/v1/completions", {"prompt": "And God said", "max_tokens": 8, "stream": True})
            try:
                poll("the second request queued", lambda: metrics(base)["tensorpc_queue_depth"] == 1, 10)
            finally:
                queued.close()  # hangs up
            poll("tensorpc_queue_depth 0 after the queued client hung up",
                 lambda: metrics(base)["tensorpc_queue_depth"] == 0, HANGUP_TIMEOUT_S)
            check(metrics(base)["tensorpc_slots_active"] == 1, "the long request ended first: nothing shown")
        finally:
            held.close()

    # -- stopping --

    def sigterm(self, serve):
        serve.signal_group(signal.SIGTERM)
        try:
            code = serve.proc.wait(15)
        except subprocess.TimeoutExpired:
            raise Failure("serve still runs 15 s after SIGTERM")
        check(code == 0, f"serve exited {code} on SIGTERM")


def main():
    args = parse_arguments(__doc__, "a folder for logs, screenshots and npm packages")
    for tool in ("curl", "node"):
        if not shutil.which(tool):
            print(f"FAIL: {tool} is not installed (scripts/install-deps.sh installs it)")
            return 1

    work = os.path.abspath(args.work)
    log_dir = os.path.join(work, "logs")
    screens = os.path.join(work, "screens")
    npm_dir = os.path.join(work, "npm")
    for d in (log_dir, screens):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    here = os.path.join(args.source, "tests", "serve")
    page_test = os.path.join(here, "page_test.mjs")

    # SIGTERM (ctest's timeout) ends the run through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("serve_test: terminated"))
    cluster = Cluster(args, log_dir)
    cases = Cases(args, cluster)
    started = time.monotonic()
    name = "setup"

    def case(title, body, *a):
        nonlocal name
        name = title
        t0 = time.monotonic()
        note = body(*a)
        print(f"ok   {title} ({time.monotonic() - t0:.1f} s{'; ' + note if note else ''})", flush=True)

    try:
        case("npm packages in WORK/npm", ensure_npm_packages, npm_dir, os.path.exists(page_test))
        servers = [cluster.start_rpc_server(f"server{i}", SERVER_DEVICES) for i in (1, 2)]
        endpoints = [s.endpoint for s in servers]
        rpc = ["--rpc", ",".join(endpoints)]
        main_serve = cluster.start_serve("serve", "kjv-bpe.gguf", *rpc, "--parallel", "4", "--lookup")
        guarded = cluster.start_serve("serve-guarded", "kjv-bpe.gguf", *rpc, "--parallel", "1", "--queue", "0",
                                      "--ctx", str(GUARDED_CTX), "--api-key", API_KEY,
                                      "--max-body", str(GUARDED_MAX_BODY))
        tiny = cluster.start_serve("serve-tiny", "kjv-tiny.gguf", "--local-only", "--parallel", "1",
                                   "--ctx", str(TINY_CTX))
        # Tools: the chatml template (Qwen 2.5's tool syntax) and room for the tools' prompt.
        tools = cluster.start_serve("serve-tools", "kjv-bpe.gguf", "--local-only", "--parallel", "2",
                                    "--chat-template", "chatml", "--ctx", "1024", "--draft-model",
                                    os.path.join(args.source, "models", "kjv-bpe-draft.gguf"))
        n_ctx = {}

        def ready():
            n_ctx["main"] = cluster.wait_ready(main_serve, 4)
            cluster.wait_ready(guarded, 1)
            cluster.wait_ready(tiny, 1)
            cluster.wait_ready(tools, 2)
            return f"servers {', '.join(endpoints)}; {main_serve.base}, {guarded.base}, {tiny.base}, {tools.base}"
        case("two servers and four serves start, /health 200", ready)

        base = main_serve.base
        case("GET /v1/models lists the model", cases.models, base)
        case("bad requests: 400 (JSON, type, model, context) and 404, as OpenAI errors", cases.bad_requests, base,
             n_ctx["main"])
        case("POST /tokenize, /detokenize and /apply-template", cases.token_endpoints, base)
        case("/metrics and /v1/cluster name both servers, /v1/cluster their devices", cases.metrics_and_cluster,
             base, endpoints)
        case("16 streams at once over 4 slots: [DONE], each the text it gets alone, batched",
             cases.concurrent_streams, base)
        case("/v1/completions at temperature 0 = `tensorpc run --temp 0`", cases.same_as_run, base, endpoints,
             "kjv-bpe.gguf")
        case("--lookup: /metrics counts drafted and accepted tokens", cases.lookup_metrics, base)

        case("--api-key: 401 without or with a wrong key, /health open", cases.api_key, guarded.base)
        case("--max-body: 413 over it, served under it", cases.max_body, guarded.base)
        case("a client hanging up mid-stream frees its slot", cases.hang_up, guarded.base)
        case("every slot busy, --queue 0: 503 with Retry-After", cases.slot_busy_queue_full, guarded.base)

        case("kjv-tiny (no chat template): chat 400, completions served", cases.no_chat_template, tiny.base)
        case("kjv-tiny: /v1/completions = `tensorpc run --temp 0`", cases.same_as_run, tiny.base, endpoints,
             "kjv-tiny.gguf", True)
        case("a client hanging up while queued leaves the queue", cases.queued_hang_up, tiny.base)

        case("the openai npm package (openai_client_test.mjs)",
             lambda: print(run_node(os.path.join(here, "openai_client_test.mjs"),
                                    [base, guarded.base, API_KEY, tools.base], npm_dir, 120), flush=True))
        case("the @anthropic-ai/sdk npm package on /v1/messages (anthropic_client_test.mjs)",
             lambda: print(run_node(os.path.join(here, "anthropic_client_test.mjs"),
                                    [base, guarded.base, API_KEY, tools.base], npm_dir, 120), flush=True))
        case("the ollama npm package on /api/* (ollama_client_test.mjs)",
             lambda: print(run_node(os.path.join(here, "ollama_client_test.mjs"),
                                    [base, guarded.base, API_KEY, tools.base], npm_dir, 120), flush=True))
        case("--draft-model: /metrics counts drafted and accepted tokens (the packages' tool calls above)",
             cases.lookup_metrics, tools.base)
        if os.path.exists(page_test):
            case("the web page in Chromium (page_test.mjs)",
                 lambda: print(run_node(page_test, [base, screens, ",".join(endpoints), str(SERVER_DEVICES)], npm_dir,
                                        180), flush=True))
        else:
            print("skip the web page: tests/serve/page_test.mjs is not there")
        case("SIGTERM stops serve with exit status 0", cases.sigterm, main_serve)
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
