"""The tests' real rein servers: `rein serve` started on a free port with a
temporary data directory, the refund example's fixture tools and its scripted
model (offline, deterministic).

REIN_BIN names the rein binary (default ../../.bin/rein from the package).
The rein_client under test is the one installed (test.sh installs it into a
venv); run from a checkout without installing, src/ is used.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Callable, List, Optional, Sequence

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(os.path.dirname(PKG_DIR))

try:
    import rein_client  # noqa: F401
except ImportError:  # a checkout, not installed
    sys.path.insert(0, os.path.join(PKG_DIR, "src"))

from google.protobuf import json_format  # noqa: E402

from rein_client import v1  # noqa: E402

REIN_BIN = os.path.abspath(os.environ.get("REIN_BIN") or os.path.join(REPO_DIR, ".bin", "rein"))
REFUND_TOOLS = os.path.join(REPO_DIR, "examples", "refund", "tools.json")

# The tokens the tests' tokens file lists: an operator who may also approve,
# and a viewer.
TOKEN = "py-client-test-token"
VIEWER_TOKEN = "py-client-viewer-token"

# How long a server may take to start.
START_TIMEOUT = 30.0


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def temp_dir(test: unittest.TestCase) -> str:
    """A new directory, removed after the test."""
    d = tempfile.mkdtemp(prefix="rein-py-")
    test.addCleanup(shutil.rmtree, d, True)
    return d


def tokens_file(directory: str, extra: Sequence[dict] = ()) -> str:
    """Writes a tokens file of TOKEN (operator, approver) and VIEWER_TOKEN
    (viewer), plus the principals given, into directory."""

    def sha(s: str) -> str:
        return hashlib.sha256(s.encode()).hexdigest()

    path = os.path.join(directory, "tokens.json")
    with open(path, "w") as f:
        json.dump(
            {
                "principals": [
                    {"id": "py-operator", "tenant": "py", "roles": ["operator", "approver"], "token_sha256": sha(TOKEN)},
                    {"id": "py-viewer", "tenant": "py", "roles": ["viewer"], "token_sha256": sha(VIEWER_TOKEN)},
                    *extra,
                ]
            },
            f,
        )
    return path


class Server:
    """A rein serve process, started by start_server."""

    def __init__(self, proc: subprocess.Popen, address: str, port: int, directory: str) -> None:
        self.proc = proc
        self.address = address
        self.port = port
        self.dir = directory
        self._log: List[str] = []
        self._serving = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._log.append(line)
            if 'msg="rein serving"' in line:
                self._serving.set()
        self._serving.set()  # exited: wait() sees it

    def log(self) -> str:
        """Everything the server wrote to stderr so far."""
        return "".join(self._log)

    def wait_serving(self) -> None:
        if not self._serving.wait(START_TIMEOUT) or self.proc.poll() is not None:
            self.kill()
            raise AssertionError(f"rein serve did not start (exit {self.proc.returncode}):\n{self.log()}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Sends sig and returns once the process has exited."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def start_server(
    test: unittest.TestCase, *, port: Optional[int] = None, directory: Optional[str] = None, args: Sequence[str] = ()
) -> Server:
    """Starts rein serve and returns once it logs that it serves; the test
    stops it."""
    port = port or free_port()
    directory = directory or temp_dir(test)
    address = f"127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            REIN_BIN,
            "serve",
            "--listen",
            address,
            "--db",
            os.path.join(directory, "rein.db"),
            "--tools",
            f"fixture:{REFUND_TOOLS}",
            "--reflection=false",
            *args,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    srv = Server(proc, address, port, directory)
    test.addCleanup(srv.kill)
    srv.wait_serving()
    return srv


def refund_task() -> dict:
    """examples/refund's task with its scripted model inline (as
    examples/grpcurl/start_run.json has it), as JSON."""
    with open(os.path.join(REPO_DIR, "examples", "refund", "task.json")) as f:
        task = json.load(f)
    with open(os.path.join(REPO_DIR, "examples", "refund", "model.jsonl")) as f:
        script = [json.loads(line) for line in f if line.strip()]
    task["model"] = {"provider": "script", "script": script}
    return task


def refund_contract(change: Optional[Callable[[dict, list], None]] = None) -> v1.TaskContract:
    """The refund task as a v1.TaskContract; change edits its JSON (the task
    and the model's script) first."""
    task = copy.deepcopy(refund_task())
    if change is not None:
        change(task, task["model"]["script"])
    return json_format.ParseDict(task, v1.TaskContract())


def until(what: str, cond: Callable[[], bool], timeout: float = 20.0) -> None:
    """Polls cond every few milliseconds until it holds, or fails after
    timeout seconds naming what."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def payload(ev: v1.Event) -> str:
    """The event's payload case: "run_started", "status_changed", …"""
    return ev.WhichOneof("payload") or "?"


def status_to(ev: v1.Event) -> Optional[int]:
    """The status a status_changed event changes to, else None."""
    return ev.status_changed.to if payload(ev) == "status_changed" else None
