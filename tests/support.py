"""Test support: a real `a2a-bridge serve` process on 127.0.0.1, and polling with a deadline."""

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
from httpx_sse import EventSource
from starlette.types import ASGIApp

T = TypeVar("T")

A2A = {"A2A-Version": "1.0", "Content-Type": "application/json"}
DEPLOYER_TOKEN = "dpl_test_7c1e4b"
DIFF = (
    "--- a/payments/refunds.py\n"
    "+++ b/payments/refunds.py\n"
    "@@ -40,3 +40,4 @@ def partial_refund(charge, amount):\n"
    "-    refund = amount - charge.fee\n"
    "+    amount = math.floor(amount)\n"
    "+    refund = amount - charge.fee\n"
)
"""The unified diff the review tests send: it touches payments/refunds.py, so the reviewer finds two issues."""
LOOPBACK_WEBHOOKS = ["--allow-webhook-network", "127.0.0.1/32"]
"""Lets a server deliver webhooks to a receiver on 127.0.0.1, which the bridge refuses by default."""
CONSOLE_SCRIPT = Path(sys.executable).with_name("a2a-bridge")
"""The `a2a-bridge` command pip installed beside this Python: unlike `python -m`, it does not put the current
directory on the import path by itself."""
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FAKETIME_DIRS = (
    "/usr/lib/x86_64-linux-gnu/faketime",
    "/usr/lib/aarch64-linux-gnu/faketime",
    "/usr/lib64/faketime",
    "/usr/lib/faketime",
    "/usr/local/lib/faketime",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check: Callable[[], T | None], timeout: float = 10.0, interval: float = 0.02, what: str = "condition") -> T:
    """Poll `check` until it returns something truthy, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


async def eventually(check: Callable[[], object], what: str, timeout: float = 20.0, interval: float = 0.02) -> None:
    """`wait_for` inside an event loop: poll `check` without blocking the loop (whose server must go on), or fail after
    `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


class ServerProcess:
    """One `a2a-bridge serve` process; restartable on the same store and port."""

    def __init__(
        self,
        store: str,
        pace: float = 0.2,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        command: list[str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.store = store
        self.pace = pace
        self.extra = extra or []
        self.env = env or {}
        """Environment variables set for the server beside this process's own."""
        self.log = log
        """A file the server's stdout and stderr are appended to (else they go to this process's)."""
        self.command = command or [sys.executable, "-m", "a2a_bridge"]
        """What runs a2a-bridge: this Python's `-m a2a_bridge`, or the console script (`CONSOLE_SCRIPT`)."""
        self.cwd = cwd
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def agent(self, name: str) -> str:
        return f"{self.url}/{name}"

    def start(self) -> "ServerProcess":
        cmd = [*self.command, "serve", "--port", str(self.port), "--store", self.store,
               "--pace", str(self.pace), "--log-level", "warning", *self.extra]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        if self.log is None:
            self.proc = subprocess.Popen(cmd, env=env, cwd=self.cwd)
        else:
            with self.log.open("ab") as output:
                self.proc = subprocess.Popen(cmd, env=env, cwd=self.cwd, stdout=output, stderr=output)
        wait_for(self._up, timeout=30, what="server start")
        return self

    def _up(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited with {self.proc.returncode}")
        try:
            return httpx.get(self.url + "/", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def pause(self) -> None:
        """SIGSTOP: the process freezes (a long GC pause, a frozen VM) and keeps its connections open."""
        assert self.proc is not None and self.proc.poll() is None, "the server is not running"
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after `pause`; nothing when the server is not paused."""
        if self.paused and self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed (a paused server too, without running again first)."""
        end_process(self.proc, crash=True)
        self.proc = None
        self.paused = False

    def stop(self) -> None:
        self.resume()
        end_process(self.proc)
        self.proc = None


def end_process(proc: "subprocess.Popen[Any] | None", crash: bool = False) -> None:
    """End a process that still runs: SIGKILL for a crash, else SIGTERM, and SIGKILL if it is not gone in 10 s."""
    if proc is None or proc.poll() is not None:
        return
    if crash:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@contextlib.contextmanager
def serve_in_thread(app: ASGIApp, must_stop: bool = True) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on 127.0.0.1 in a background thread; yields its base URL, then shuts it down.

    `must_stop=False` is for the stock SDK, whose hung tasks can keep a server from stopping: its daemon thread is
    left behind instead of failing the test."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn-{port}", daemon=True)
    thread.start()

    def started() -> bool:
        if not thread.is_alive():
            raise AssertionError("the in-thread server stopped during startup")
        return server.started

    try:
        wait_for(started, timeout=30, what="in-thread server start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30 if must_stop else 5)
        sock.close()
        if thread.is_alive() and must_stop:
            raise AssertionError("the in-thread server did not shut down")


def rpc(base: str, method: str, params: dict, rpc_id: int = 1, headers: dict | None = None) -> dict:
    """One JSON-RPC call to an agent's /a2a/jsonrpc; returns the parsed envelope."""
    body = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
    response = httpx.post(f"{base}/a2a/jsonrpc", json=body, headers={**A2A, **(headers or {})}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def user_message(text: str, message_id: str, **extra: str) -> dict:
    return {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}], **extra}


def rpc_stream(base: str, method: str, params: dict, rpc_id: int = 1, headers: dict | None = None) -> list[dict]:
    """One streaming JSON-RPC call; returns the envelope of each SSE frame, in order, until the server closes."""
    body = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
    with httpx.stream("POST", f"{base}/a2a/jsonrpc", json=body, headers={**A2A, **(headers or {})}, timeout=30) as response:
        assert response.status_code == 200, response.read()
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            return [json.loads(response.read())]
        return [event.json() for event in EventSource(response).iter_sse() if event.data]


def libfaketime() -> str | None:
    """The LD_PRELOAD value that loads libfaketime: as Debian's `faketime` sets it, else a library found on disk."""
    wrapper = shutil.which("faketime")
    if wrapper is not None:
        shown = subprocess.run(
            [wrapper, "-f", "+0s", sys.executable, "-c", "import os; print(os.environ.get('LD_PRELOAD', ''))"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout.strip()
        if "libfaketime" in shown:
            return shown
    return next((f"{d}/libfaketime.so.1" for d in FAKETIME_DIRS if Path(d, "libfaketime.so.1").is_file()), None)


def clock_of(process: ServerProcess) -> float:
    """How far the server's clock is ahead of this process's, in seconds, from its HTTP Date header (whole seconds)."""
    response = httpx.get(process.url + "/", timeout=5)
    return parsedate_to_datetime(response.headers["date"]).timestamp() - time.time()
