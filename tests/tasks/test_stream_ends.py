"""Every stream of a task ends with the task's terminal event, whatever ended it (issue 30, item 2): a SendMessage
stream on test-runner canceled from another connection, on JSON-RPC, HTTP+JSON and gRPC, with what the agent's cancel()
reports before the end; SendMessage, SubscribeToTask and Task Status streams ended by an operator's cancel; and on
PostgreSQL, a stream on one replica whose task is canceled through another, and one on a replica paused past its lease
whose task another replica recovers and ends CANCELED."""

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf.json_format import MessageToDict
from httpx_sse import EventSource

from tests.claim_support import FULL_SUITE, OPERATOR
from tests.support import A2A, ServerProcess, rpc, user_message, wait_for
from tests.user_agents import CLEANED_UP, RUNS

PACE = 0.5
"""Seconds of each test-runner step: the full suite (8 steps) is far from over when the first artifact arrives."""
PAUSE_LEASE = 3.0
"""Seconds of a claim's lease where a replica is paused: the pause outlives it, and another replica recovers the task."""
STREAM_TIMEOUT = 30.0
"""Seconds a stream may take to end once its task is canceled."""
VERSION = (("a2a-version", "1.0"),)

Frames = Callable[[], Iterator[dict[str, Any]]]
"""Opens a stream and yields its frames as A2A StreamResponse JSON ({"task": ...}, {"statusUpdate": ...}, ...)."""


class Stream:
    """A stream read in a thread of its own: its frames as they arrive, and whether the server ended it."""

    def __init__(self, frames: Frames) -> None:
        self.frames: list[dict[str, Any]] = []
        self.error: Exception | None = None
        """What ended the reading other than the server's end of the stream (reported by `finished`)."""
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(frames,), daemon=True)
        self.thread.start()

    def _read(self, frames: Frames) -> None:
        try:
            for frame in frames():
                self.frames.append(frame)
        except Exception as error:
            self.error = error
        finally:
            self.ended.set()

    def task_id(self) -> str | None:
        """The task's id, from the stream's first frame that names it."""
        for frame in list(self.frames):
            payload = next(iter(frame.values()), {})
            found = payload.get("id") if "task" in frame else payload.get("taskId")
            if found:
                return str(found)
        return None

    def has(self, kind: str) -> bool:
        return any(kind in frame for frame in list(self.frames))

    def finished(self) -> list[dict[str, Any]]:
        """The frames, once the server has ended the stream (within STREAM_TIMEOUT)."""
        assert self.ended.wait(STREAM_TIMEOUT), f"the stream did not end; frames so far: {kinds(self.frames)}"
        self.thread.join(STREAM_TIMEOUT)
        assert self.error is None, f"the stream failed: {self.error!r}"
        return self.frames


def kinds(frames: list[dict[str, Any]]) -> list[str]:
    """Each frame's kind, a status update with its state: what an assertion message shows of a stream."""
    shown = []
    for frame in frames:
        kind = next(iter(frame), "?")
        state = frame[kind].get("status", {}).get("state") if kind in ("task", "statusUpdate") else None
        shown.append(f"{kind} {state}" if state else kind)
    return shown


def assert_ends_with(frames: list[dict[str, Any]], state: str) -> None:
    last = frames[-1] if frames else {}
    assert last.get("statusUpdate", {}).get("status", {}).get("state") == state, (
        f"the stream does not end with the statusUpdate {state}: {kinds(frames)}"
    )


def jsonrpc_frames(base: str, method: str, params: dict[str, Any]) -> Frames:
    def frames() -> Iterator[dict[str, Any]]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        with httpx.stream("POST", f"{base}/a2a/jsonrpc", json=body, headers=A2A, timeout=STREAM_TIMEOUT) as response:
            assert response.status_code == 200, response.read()
            for event in EventSource(response).iter_sse():
                if event.data:
                    envelope = event.json()
                    assert "result" in envelope, envelope
                    yield envelope["result"]

    return frames


def rest_frames(base: str, method: str, path: str, body: dict[str, Any] | None = None) -> Frames:
    def frames() -> Iterator[dict[str, Any]]:
        with httpx.stream(method, f"{base}/a2a/rest{path}", json=body, headers=A2A, timeout=STREAM_TIMEOUT) as response:
            assert response.status_code == 200, response.read()
            for event in EventSource(response).iter_sse():
                if event.data:
                    yield json.loads(event.data)

    return frames


def grpc_frames(target: str) -> Frames:
    def frames() -> Iterator[dict[str, Any]]:
        request = a2a_pb2.SendMessageRequest(
            message=a2a_pb2.Message(message_id=new_id(), role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=FULL_SUITE)])
        )
        with grpc.insecure_channel(target) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            for response in stub.SendStreamingMessage(request, metadata=VERSION, timeout=STREAM_TIMEOUT):
                yield MessageToDict(response)

    return frames


def status_stream_frames(base: str, task_id: str) -> Frames:
    """The Task Status stream's status objects."""

    def frames() -> Iterator[dict[str, Any]]:
        url = f"{base}/tasks/{task_id}/status/stream"
        with httpx.stream("GET", url, timeout=STREAM_TIMEOUT) as response:
            assert response.status_code == 200, response.read()
            for event in EventSource(response).iter_sse():
                if event.data:
                    yield json.loads(event.data)

    return frames


def new_id() -> str:
    return uuid.uuid4().hex


def send_params() -> dict[str, Any]:
    return {"message": user_message(FULL_SUITE, new_id())}


def started(stream: Stream, kind: str = "artifactUpdate") -> str:
    """The task's id, once the stream has delivered a frame of this kind (the turn is under way)."""
    wait_for(lambda: stream.has(kind) or stream.ended.is_set(), timeout=STREAM_TIMEOUT, what=f"a frame {kind}")
    assert not stream.ended.is_set(), f"the stream ended before the cancel: {kinds(stream.frames)}"
    task_id = stream.task_id()
    assert task_id is not None, kinds(stream.frames)
    return task_id


def cancel(base: str, task_id: str) -> None:
    """CancelTask on a connection of its own."""
    reply = rpc(base, "CancelTask", {"id": task_id})
    assert reply.get("result", {}).get("status", {}).get("state") == "TASK_STATE_CANCELED", reply


def grpc_url(server: ServerProcess, agent: str) -> str:
    card = httpx.get(f"{server.agent(agent)}/.well-known/agent-card.json", timeout=10).json()
    (url,) = [i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"]
    return str(url)


@pytest.fixture(scope="module")
def served() -> Iterator[ServerProcess]:
    process = ServerProcess("memory", pace=PACE, extra=["--agent", "test-runner", "--grpc-port", "0"])
    yield process.start()
    process.stop()


@pytest.mark.parametrize("binding", ["JSON-RPC", "HTTP+JSON", "gRPC"])
def test_a_canceled_send_message_stream_ends_with_canceled(served: ServerProcess, binding: str) -> None:
    base = served.agent("test-runner")
    if binding == "JSON-RPC":
        frames = jsonrpc_frames(base, "SendStreamingMessage", send_params())
    elif binding == "HTTP+JSON":
        frames = rest_frames(base, "POST", "/message:stream", send_params())
    else:
        frames = grpc_frames(grpc_url(served, "test-runner"))
    stream = Stream(frames)
    task_id = started(stream)
    if binding == "gRPC":
        with grpc.insecure_channel(grpc_url(served, "test-runner")) as channel:
            canceled = a2a_pb2_grpc.A2AServiceStub(channel).CancelTask(a2a_pb2.CancelTaskRequest(id=task_id), metadata=VERSION)
        assert canceled.status.state == a2a_pb2.TASK_STATE_CANCELED
    else:
        cancel(base, task_id)
    assert_ends_with(stream.finished(), "TASK_STATE_CANCELED")


def test_a_canceled_stream_gets_what_the_agents_cancel_reports(tmp_path: Path) -> None:
    process = ServerProcess("memory", extra=["--agent", "tests.user_agents:cleans_up"], env={RUNS: str(tmp_path / "runs")})
    try:
        base = process.start().agent("cleans-up")
        stream = Stream(jsonrpc_frames(base, "SendStreamingMessage", {"message": user_message("work", new_id())}))
        cancel(base, started(stream, "statusUpdate"))
        frames = stream.finished()
        assert_ends_with(frames, "TASK_STATE_CANCELED")
        cleanup = frames[-2].get("artifactUpdate", {}).get("artifact", {})
        assert cleanup.get("parts") == [{"text": CLEANED_UP}], f"no cleanup artifact before the end: {kinds(frames)}"
    finally:
        process.stop()


def test_every_stream_ends_with_an_operators_cancel(served: ServerProcess) -> None:
    base = served.agent("test-runner")
    sent = Stream(jsonrpc_frames(base, "SendStreamingMessage", send_params()))
    task_id = started(sent)
    subscribed = Stream(jsonrpc_frames(base, "SubscribeToTask", {"id": task_id}))
    watched = Stream(status_stream_frames(base, task_id))
    wait_for(lambda: subscribed.frames and watched.frames, timeout=STREAM_TIMEOUT, what="the other streams to open")
    response = httpx.post(f"{base}/tasks/{task_id}/cancel", headers=OPERATOR, timeout=STREAM_TIMEOUT)
    assert response.status_code == 200 and response.json()["state"] == "TASK_STATE_CANCELED", response.text
    assert_ends_with(sent.finished(), "TASK_STATE_CANCELED")
    assert_ends_with(subscribed.finished(), "TASK_STATE_CANCELED")
    last = watched.finished()[-1]["status"]
    assert last["phase"] == "terminal", last


@pytest.fixture
def replicas(pg_database: str) -> Iterator[Callable[..., ServerProcess]]:
    """Starts test-runner replicas on the test database (`start(lease=)`); each is stopped at the end."""
    started: list[ServerProcess] = []

    def start(lease: float = 300.0) -> ServerProcess:
        process = ServerProcess(pg_database, pace=PACE, extra=["--agent", "test-runner", "--lease", str(lease)])
        started.append(process)
        return process.start()

    try:
        yield start
    finally:
        for process in started:
            process.stop()


def test_a_stream_on_one_replica_ends_with_a_cancel_sent_to_another(replicas: Callable[..., ServerProcess]) -> None:
    a, b = replicas(), replicas()
    sent = Stream(jsonrpc_frames(a.agent("test-runner"), "SendStreamingMessage", send_params()))
    task_id = started(sent)
    subscribed = Stream(jsonrpc_frames(b.agent("test-runner"), "SubscribeToTask", {"id": task_id}))
    wait_for(lambda: subscribed.frames, timeout=STREAM_TIMEOUT, what="the subscription on replica B")
    cancel(b.agent("test-runner"), task_id)
    assert_ends_with(sent.finished(), "TASK_STATE_CANCELED")
    assert_ends_with(subscribed.finished(), "TASK_STATE_CANCELED")


def test_a_stream_on_a_paused_replica_ends_with_the_cancel_its_recovery_stored(
    replicas: Callable[..., ServerProcess],
) -> None:
    """Replica A is paused past its lease while its task is canceled through B: B recovers the task and ends it
    CANCELED; A, woken, finds its turn fenced, and its stream still ends with the task's end."""
    a, b = replicas(lease=PAUSE_LEASE), replicas(lease=PAUSE_LEASE)
    sent = Stream(jsonrpc_frames(a.agent("test-runner"), "SendStreamingMessage", send_params()))
    task_id = started(sent)
    a.pause()
    try:
        cancel(b.agent("test-runner"), task_id)
    finally:
        a.resume()
    assert_ends_with(sent.finished(), "TASK_STATE_CANCELED")
