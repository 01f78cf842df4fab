#!/usr/bin/env python3
"""A client's run while strangers hold connections against the same server.

Starts tensorpc-server, times `tensorpc run` of the bundled model through it
alone, then again while SILENT connections say nothing and TRICKLING ones send
a HELLO one byte a second (reconnecting a second after the server closes
them), and samples the server's thread count throughout. Prints the two
medians, their ratio (the bar: at most 1.5) and the most threads seen (the
bar: under 100).

  python3 bench/strangers.py [BUILD_DIR] [--silent 500] [--trickling 50] [--runs 3]
"""
import argparse
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hello_frame():
    client = b"a slow stranger"
    payload = struct.pack("<IIIQI", 1, 9, 0, 0, len(client)) + client
    # magic "TRPC", command 0 (HELLO), flags 0, request id 1, payload length
    return struct.pack("<IHHQQ", 0x43505254, 0, 0, 1, len(payload)) + payload


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^Threads:\s+(\d+)", f.read(), re.M).group(1))


def timed_run(build, endpoint):
    start = time.monotonic()
    subprocess.run([os.path.join(build, "tools", "tensorpc"), "run", "-m", os.path.join(ROOT, "models", "kjv-tiny.gguf"),
                    "--rpc", endpoint, "--no-local", "-n", "200", "--temp", "0", "-p", "In the beginning"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    ap.add_argument("--silent", type=int, default=500)
    ap.add_argument("--trickling", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    server = subprocess.Popen([os.path.join(args.build, "tools", "tensorpc-server"), "-p", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        port = int(re.search(r":(\d+)\s*$", line).group(1))
        endpoint = f"127.0.0.1:{port}"
        timed_run(args.build, endpoint)  # warm: the model's pages, the server's pool
        alone = statistics.median(timed_run(args.build, endpoint) for _ in range(args.runs))

        stop = threading.Event()
        most = [threads_of(server.pid)]

        def sample():
            while not stop.is_set():
                most[0] = max(most[0], threads_of(server.pid))
                time.sleep(0.05)

        def trickle():
            frame = hello_frame()
            while not stop.is_set():
                try:
                    s = socket.create_connection(("127.0.0.1", port))
                    for b in frame:
                        if stop.is_set():
                            break
                        s.send(bytes([b]))
                        time.sleep(1.0)
                except OSError:
                    pass  # closed by the server: come back in a second
                finally:
                    s.close()
                time.sleep(1.0)

        workers = [threading.Thread(target=sample)] + [threading.Thread(target=trickle) for _ in range(args.trickling)]
        for w in workers:
            w.start()
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.silent)]
        time.sleep(1.0)
        with_strangers = statistics.median(timed_run(args.build, endpoint) for _ in range(args.runs))
        stop.set()
        for w in workers:
            w.join()
        for s in silent:
            s.close()
        print(f"run alone            {alone:.3f} s (median of {args.runs})")
        print(f"run with strangers   {with_strangers:.3f} s ({args.silent} silent, {args.trickling} trickling)")
        print(f"ratio                {with_strangers / alone:.2f}x  (bar: <= 1.5x)")
        print(f"server threads, most {most[0]}  (bar: < 100)")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
