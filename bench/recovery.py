#!/usr/bin/env python3
"""How long a lost server costs a generation: `tensorpc run` over three
tensorpc-servers (each with a weights cache on disk, --cache), the middle one
killed with SIGKILL once the text is flowing, and either started again on its
port a second later (its layers loaded back there, from its warm cache) or
left down (its layers re-placed on the two others, --reconnect-wait 0).

For each model and case it prints, from the client's `recovery:` lines and
the arrival of its text:
  loss->token  from the kill to the next token written after the recovery
  back         from the kill to the restarted server answering (restart only)
  placed       the recovery's new placement: waiting, connecting, uploading
  replay       the tokens evaluated again to rebuild the KV cache, and their time
The text with the fault is compared with an unbroken run's (greedy).

  python3 bench/recovery.py --cli build-release/tools/tensorpc \
      --server build-release/tools/tensorpc-server \
      --model models/kjv-bpe.gguf --model /tmp/tensorpc_bench_250m_q8_0.gguf
"""
import argparse
import os
import re
import select
import signal
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary, port, cache, log):
    p = subprocess.Popen([binary, "-p", str(port), "--device", "cpu:1", "--cache", cache],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"tensorpc-server on port {port} did not start")


def run(cli, model, endpoints, tokens, ctx, extra, fault=None):
    """The text of `tensorpc run`; with `fault`, called once the text is 40 tokens along.
    Returns (text, [(time, stderr line)], kill time)."""
    argv = [cli, "run", "-m", model, "--rpc", ",".join(endpoints), "--no-local", "-t", "1", "-n", str(tokens),
            "-c", str(ctx), "--temp", "0", "-p", "And God said", *extra]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, lines, err_buf, killed, pieces = b"", [], b"", None, 0
    streams = [p.stdout, p.stderr]
    while streams:
        ready, _, _ = select.select(streams, [], [], 60)
        if not ready:
            p.kill()
            raise RuntimeError("tensorpc run said nothing for 60 s")
        now = time.monotonic()
        for f in ready:
            data = os.read(f.fileno(), 65536)
            if not data:
                streams.remove(f)
            elif f is p.stdout:
                out += data
                pieces += 1
                lines.append((now, "<text>"))
                if fault and killed is None and pieces > 40:
                    killed = time.monotonic()
                    fault()
            else:
                err_buf += data
                while b"\n" in err_buf:
                    line, _, err_buf = err_buf.partition(b"\n")
                    lines.append((now, line.decode(errors="replace")))
    if p.wait() != 0:
        raise RuntimeError(f"tensorpc run failed: {[l for _, l in lines if l != '<text>'][-3:]}")
    return out.decode(errors="replace"), lines, killed


def measure(args, model, case, tmp):
    ports = [free_port() for _ in range(3)]
    caches = [tempfile.mkdtemp(dir=tmp) for _ in range(3)]
    log = open(os.path.join(tmp, "servers.log"), "ab")
    servers = [start_server(args.server, port, cache, log) for port, cache in zip(ports, caches)]
    endpoints = [f"127.0.0.1:{p}" for p in ports]
    extra = ["--reconnect-wait", "0"] if case == "re-place" else ["--reconnect-wait", "30"]
    try:
        expected, _, _ = run(args.cli, model, endpoints, args.tokens, args.ctx, extra)  # fills the caches too

        def fault():
            os.killpg(servers[1].pid, signal.SIGKILL)
            servers[1].wait()
            if case == "restart":
                time.sleep(1.0)
                servers[1] = start_server(args.server, ports[1], caches[1], log)

        text, lines, killed = run(args.cli, model, endpoints, args.tokens, args.ctx, extra, fault)
    finally:
        for s in servers:
            if s.poll() is None:
                os.killpg(s.pid, signal.SIGKILL)
                s.wait()
        log.close()
    done = next((t for t, l in lines if "recovered in" in l), None)
    if done is None:
        raise RuntimeError("no recovery: " + " | ".join(l for _, l in lines if l.startswith("recovery:")))
    after = next(t for t, l in lines if t >= done and l == "<text>")
    back = next((t for t, l in lines if "answers again" in l), None)
    m = re.search(r"placed again in ([\d.]+) s, (\d+) tokens evaluated again in ([\d.]+) s",
                  next(l for _, l in lines if "recovered in" in l))
    return {
        "loss->token": after - killed,
        "back": (back - killed) if back else None,
        "placed": float(m.group(1)),
        "replayed": int(m.group(2)),
        "replay": float(m.group(3)),
        "same text": text == expected,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", required=True, help="the tensorpc binary")
    parser.add_argument("--server", required=True, help="the tensorpc-server binary")
    parser.add_argument("--model", action="append", required=True, help="a GGUF model (repeatable)")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per generation")
    parser.add_argument("--ctx", type=int, default=512, help="context positions")
    args = parser.parse_args()
    print(f"{'model':36} {'case':9} {'loss->token':>11} {'back':>6} {'placed':>7} {'replay':>16} same text")
    with tempfile.TemporaryDirectory(prefix="tensorpc_recovery_") as tmp:
        for model in args.model:
            for case in ("restart", "re-place"):
                r = measure(args, model, case, tmp)
                back = f"{r['back']:.2f}" if r["back"] is not None else "-"
                replay = f"{r['replayed']} in {r['replay']:.2f}"
                print(f"{os.path.basename(model):36} {case:9} {r['loss->token']:10.2f}s {back:>6} "
                      f"{r['placed']:6.2f}s {replay:>15}s {'yes' if r['same text'] else 'NO'}", flush=True)


if __name__ == "__main__":
    main()
