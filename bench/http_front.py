#!/usr/bin/env python3
"""`tensorpc serve`'s HTTP front, compared across builds.

For each binary given, starts `serve --local-only` on the bundled tiny model
(--parallel 4 --queue 128), waits for /health, runs bench/http_load for
{GET /health, a 1-token completion} x {alone, with SLOWLORIS slow connections}
with CONNECTIONS keep-alive clients, and stops the server (SIGTERM). The
binaries take turns, in reversed order every other round, and each figure is
the median over the rounds. Prints the 2xx answers a second of each binary
with its ratio to the first binary's, then the median latencies, the other
answers and the CPU use of the load generator and of the server.

A front that stalls (no answer at all within the counted seconds) reads 0;
every step is bounded in time.

  python3 bench/http_front.py --binary httplib=OLD/tensorpc --binary beast=build-release/tools/tensorpc
      [--load build-release/bench/http_load] [--rounds 3] [--seconds 5] [--warmup 1]
      [--connections 100] [--slowloris 200]
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def cases(slowloris):
    """(label, (request, slow connections)) of each case, in the order they run."""
    return [(request + (f" +{slow} slowloris" if slow else ""), (request, slow))
            for request in ("health", "completion") for slow in (0, slowloris)]


class Serve:
    """A `tensorpc serve` child process, its stderr drained by a thread."""

    def __init__(self, binary, model):
        self.proc = subprocess.Popen([binary, "serve", "-m", model, "--local-only", "--port", "0", "--parallel", "4",
                                      "--queue", "128"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.port = None
        self.said = []
        self.heard = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.said = (self.said + [line.rstrip()])[-20:]
            found = re.search(r"listening on https?://[^/]+:(\d+)/", line)
            if found and self.port is None:
                self.port = int(found.group(1))
                self.heard.set()
        self.heard.set()

    def health(self):
        """/health's JSON body when it answers 200, else None."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                return json.load(r) if r.status == 200 else None
        except OSError:
            return None

    def wait(self, idle, seconds):
        """Until /health answers (idle: with no request queued or generating); false when `seconds` pass first."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.proc.poll() is None:
            h = self.health()
            if h is not None and (not idle or (h.get("queued") == 0 and h.get("slots_busy") == 0)):
                return True
            time.sleep(0.1)
        return False

    def start(self):
        if not self.heard.wait(60) or self.port is None or not self.wait(False, 120):
            self.stop()
            sys.exit("serve did not come up:\n  " + "\n  ".join(self.said))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def load(args, serve, request, slowloris):
    """http_load's `name: value` lines as a dict of numbers (None for "-"; a stall reads 0 answers a second)."""
    command = [args.load, "--port", str(serve.port), "--server-pid", str(serve.proc.pid), "--request", request, "--connections", str(args.connections),
               "--seconds", str(args.seconds), "--warmup", str(args.warmup), "--slowloris", str(slowloris)]
    # http_load opens the slow connections and then the clients in at most 10 s each.
    try:
        out = subprocess.run(command, capture_output=True, text=True, check=True,
                             timeout=args.seconds + args.warmup + 30).stdout
    except subprocess.TimeoutExpired:
        return {"ok_per_second": 0.0, "timed_out": 1.0}
    figures = {}
    for line in out.splitlines():
        name, _, value = line.partition(": ")
        number = value.split(" ")[0]
        figures[name] = float(number) if re.fullmatch(r"[0-9.]+", number) else None
    return figures


def shown(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def run_binary(args, binary, results):
    """Runs the cases against one server of `binary`; one that stops answering is replaced (results["restarts"])."""
    serve = Serve(binary, args.model)
    serve.start()
    try:
        for label, case in cases(args.slowloris):
            if not serve.wait(True, 30):
                answering = serve.health() is not None
                print(f"  (before {label}: the server was " + ("still busy)" if answering else "not answering: restarted)"),
                      file=sys.stderr)
                if not answering:
                    results["restarts"] = results.get("restarts", 0) + 1
                    serve.stop()
                    serve = Serve(binary, args.model)
                    serve.start()
            figures = load(args, serve, *case)
            results.setdefault(case, []).append(figures)
            print(f"  {label:26} {figures['ok_per_second']:9.1f} req/s, p50 {shown(figures.get('p50_ms'))} ms, "
                  f"p99 {shown(figures.get('p99_ms'))} ms, CPU: load {shown(figures.get('cpu_percent'), 0)}%, "
                  f"server {shown(figures.get('server_cpu_percent'), 0)}%",
                  file=sys.stderr)
    finally:
        serve.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", action="append", required=True, metavar="NAME=PATH",
                    help="a tensorpc binary to serve with; the first is the one the others are compared against")
    ap.add_argument("--load", default=os.path.join(ROOT, "build-release", "bench", "http_load"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-tiny.gguf"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=1)
    ap.add_argument("--connections", type=int, default=100)
    ap.add_argument("--slowloris", type=int, default=200)
    args = ap.parse_args()
    binaries = [tuple(b.split("=", 1)) for b in args.binary]
    if any(len(b) != 2 for b in binaries) or len({n for n, _ in binaries}) != len(binaries):
        ap.error("--binary takes NAME=PATH, one name each")
    if not os.access(args.load, os.X_OK):
        ap.error(f"no {args.load}: build it (cmake --build build-release --target http_load) or name it with --load")

    results = {name: {} for name, _ in binaries}  # name -> (request, slowloris) -> [figures per round]; "restarts"
    for r in range(args.rounds):
        for name, path in binaries if r % 2 == 0 else binaries[::-1]:
            print(f"round {r + 1}/{args.rounds}: {name} ({path})", file=sys.stderr)
            run_binary(args, os.path.abspath(path), results[name])

    def median(name, case, figure):
        values = [f[figure] for f in results[name][case] if f.get(figure) is not None]
        return statistics.median(values) if values else None

    names = [n for n, _ in binaries]
    first = names[0]
    print(f"\n{args.connections} keep-alive clients, {args.seconds:g} s counted after {args.warmup:g} s, "
          f"median over {args.rounds} round(s); 2xx answers a second:")
    print(f"{'case':28}" + "".join(f"{n:>12}" for n in names) + "".join(f"{n + '/' + first:>20}" for n in names[1:]))
    for label, case in cases(args.slowloris):
        rates = [median(n, case, "ok_per_second") or 0.0 for n in names]
        ratios = [f"{rate / rates[0]:.2f}x" if rates[0] > 0 else "- (first: 0)" for rate in rates[1:]]
        print(f"{label:28}" + "".join(f"{rate:12.1f}" for rate in rates) + "".join(f"{x:>20}" for x in ratios))
    print("\nmedians per binary: p50 / p99 ms of the 2xx answers, other statuses, errors, the longest wait "
          "of a request unanswered at the end, "
          "slowloris still open, CPU of the load generator and of the server (% of one core):")
    for label, case in cases(args.slowloris):
        for n in names:
            m = {f: median(n, case, f) for f in ("p50_ms", "p99_ms", "other", "errors", "oldest_wait_s", "slowloris_open",
                                                  "cpu_percent", "server_cpu_percent", "timed_out")}
            print(f"{label:28}{n:>12}  {shown(m['p50_ms']):>8} / {shown(m['p99_ms']):>8} ms  "
                  f"other {shown(m['other'], 0)}  errors {shown(m['errors'], 0)}  "
                  f"oldest wait {shown(m['oldest_wait_s'], 1)} s  slowloris open {shown(m['slowloris_open'], 0)}  "
                  f"CPU: load {shown(m['cpu_percent'], 0)}%, server {shown(m['server_cpu_percent'], 0)}%" + ("  (http_load timed out)" if m["timed_out"] else ""))
    for n in names:
        if results[n].get("restarts"):
            print(f"{n}: the server stopped answering between cases and was started again "
                  f"{results[n]['restarts']} time(s)")


if __name__ == "__main__":
    sys.exit(main())
