"""What the end-to-end tests of `tensorpc serve` share (serve_test.py,
serve_hostile_test.py): their command line, the failure a check raises, a
started binary in a process group of its own with its output in files, an
HTTP response's head parsed, and polling for a condition.
"""
import argparse
import ctypes
import json
import os
import re
import signal
import subprocess
import time


def parse_arguments(doc, work_help, *more):
    """--cli, --server, --source, --work (`work_help`) and `more` ((flag, add_argument's keywords) each)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--cli", required=True, help="the tensorpc binary")
    parser.add_argument("--server", required=True, help="the tensorpc-server binary")
    parser.add_argument("--source", required=True, help="the source tree (models/, tests/serve/)")
    parser.add_argument("--work", required=True, help=work_help)
    for flag, keywords in more:
        parser.add_argument(flag, **keywords)
    return parser.parse_args()


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def tail(path, lines=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _die_with_parent():
    """In the child: a session of its own (killed as a group), killed if this driver dies."""
    os.setsid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Process:
    """A started binary: its own process group, stdout and stderr in WORK/logs."""

    def __init__(self, name, argv, log_dir):
        self.name = name
        self.argv = argv
        self.out_path = os.path.join(log_dir, name + ".out")
        self.err_path = os.path.join(log_dir, name + ".err")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         preexec_fn=_die_with_parent)

    def wait_for_line(self, path, pattern, timeout):
        """The first match of `pattern` in the file, polled until `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            with open(path, errors="replace") as f:
                m = re.search(pattern, f.read())
            if m:
                return m
            if self.proc.poll() is not None:
                raise Failure(f"{self.name} exited ({self.proc.returncode}) before printing /{pattern}/")
            if time.monotonic() > deadline:
                raise Failure(f"{self.name} printed no /{pattern}/ within {timeout} s")
            time.sleep(0.05)

    def signal_group(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def group_alive(self):
        """Whether a process of its group still runs (the group outlives a leader that left children)."""
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    def stop(self, timeout=10):
        """SIGTERM to the group, SIGKILL after `timeout`; the exit status."""
        if self.proc.poll() is None:
            self.signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def logs(self):
        return (f"--- {self.name}: {' '.join(self.argv)}\n"
                f"stdout:\n{tail(self.out_path)}stderr:\n{tail(self.err_path)}")


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            raise Failure(f"HTTP {self.status}: the body is not JSON: {self.body[:300]!r}")


def parse_head(head):
    """An HTTP response head (no blank line) as (status, {lower-case name: value})."""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


def poll(what, condition, timeout, interval=0.05):
    """Calls `condition` until it returns a true value; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Failure(f"{what}: not within {timeout} s")
        time.sleep(interval)
