"""Support of the remote-agent tests: the JS agent of interop/js/remote-agent.mjs as a restartable process, the
bridge's Task Status view, and the link our task keeps to its remote task."""

import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from a2a_bridge.remote.agent import REMOTE_EXTENSION
from tests.js_support import JS_DIR
from tests.support import A2A, end_process, free_port


class JsRemote:
    """`node interop/js/remote-agent.mjs` on one loopback port; stoppable, killable and restartable on that port."""

    def __init__(self, executable: str, record: Path, pace_ms: int = 100, streaming: bool = True) -> None:
        self.executable = executable
        self.record = record
        self.pace_ms = pace_ms
        self.streaming = streaming
        self.port = free_port()
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "JsRemote":
        args = [self.executable, "remote-agent.mjs", str(self.record), "--port", str(self.port)]
        args += ["--pace", str(self.pace_ms)]
        if not self.streaming:
            args.append("--no-streaming")
        self.proc = subprocess.Popen(args, cwd=JS_DIR, stdout=subprocess.PIPE, text=True)
        first: queue.Queue[str] = queue.Queue()
        stdout = self.proc.stdout
        assert stdout is not None
        threading.Thread(target=lambda: first.put(stdout.readline()), daemon=True).start()
        try:
            line = first.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise AssertionError("the JS remote agent did not start") from None
        if line.strip() != f"listening on {self.url}":
            self.kill()
            raise AssertionError(f"the JS remote agent said {line!r}")
        return self

    def kill(self) -> None:
        """SIGKILL: the remote agent is gone, its in-memory tasks with it."""
        end_process(self.proc, crash=True)
        self.proc = None

    def stop(self) -> None:
        end_process(self.proc)
        self.proc = None

    def executions(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """The executions the agent recorded (one per turn it ran), of one remote task or of all."""
        if not self.record.exists():
            return []
        lines = [json.loads(line) for line in self.record.read_text().splitlines() if line.strip()]
        return [line for line in lines if task_id is None or line["taskId"] == task_id]

    def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        reply: dict[str, Any] = httpx.post(f"{self.url}/a2a/jsonrpc", json=body, headers=A2A, timeout=10).json()
        return reply

    def __enter__(self) -> "JsRemote":
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def link_of(task: dict[str, Any]) -> dict[str, str]:
    """The remote task our task is linked to: {url, taskId, contextId} from its metadata."""
    link = task.get("metadata", {}).get(REMOTE_EXTENSION)
    assert isinstance(link, dict), task
    return link


def task_status(agent_url: str, task_id: str) -> dict[str, Any]:
    """GET /{agent}/tasks/{id}/status: the Task Status object."""
    response = httpx.get(f"{agent_url}/tasks/{task_id}/status", timeout=10)
    assert response.status_code == 200, response.text
    view: dict[str, Any] = response.json()
    return view


def phase(agent_url: str, task_id: str) -> tuple[str, str | None]:
    view = task_status(agent_url, task_id)["status"]
    return view["phase"], view["terminal_reason"]


def stream_frames(agent_url: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """SendStreamingMessage, each SSE frame's result as it arrives (so a test can look around between frames)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params}
    with httpx.stream("POST", f"{agent_url}/a2a/jsonrpc", json=body, headers=A2A, timeout=30) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data:"):
                frame = json.loads(line.removeprefix("data:").strip())
                assert "result" in frame, frame
                yield frame["result"]


def frame_name(frame: dict[str, Any]) -> str:
    if "statusUpdate" in frame:
        return f"statusUpdate:{frame['statusUpdate']['status']['state']}"
    return next(iter(frame))
