"""Task Status on the wire: the seed's object, ETag and 304, long poll, the SSE stream, revisions across a restart,
and the inactivity lifespan, against `a2a-bridge serve` processes (and a bridge on a uvicorn thread where a
test-only agent or setting is needed)."""

import asyncio
import base64
import json
import re
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue

from a2a_bridge.agents.catalog import sample_agents
from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.http import bridge_routes
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.stock_sdk import card, open_task
from tests.support import A2A, DEPLOYER_TOKEN, ServerProcess, rpc, rpc_stream, serve_in_thread, user_message, wait_for

DIFF = "--- a/payments/refunds.py\n+++ b/payments/refunds.py\n@@ -40,3 +40,4 @@\n+    amount = math.floor(amount)\n"
ISO_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
STATUS_KEYS = {"phase", "terminal_reason", "revision", "notifications", "idle_expires_at"}
DEPLOYER = {"Authorization": f"Bearer {DEPLOYER_TOKEN}"}
LONG_POLL_TRIALS = 5
HOLD_LIMIT = 10.0
"""Seconds a test-only agent waits for the test to release its next step."""


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def status(base: str, task_id: str, headers: dict[str, str] | None = None, wait: str | None = None) -> httpx.Response:
    params = {"wait": wait} if wait is not None else None
    return httpx.get(f"{base}/tasks/{task_id}/status", params=params, headers=headers, timeout=90)


def status_body(base: str, task_id: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    response = status(base, task_id, headers)
    assert response.status_code == 200, response.text
    return response.json()


def parse_time(text: str) -> datetime:
    assert ISO_UTC.match(text), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def assert_seed_shape(body: dict[str, Any], task_id: str, agent: str, user: str = "anonymous") -> None:
    """Exactly the seed's keys, with its types, and times in UTC ISO 8601."""
    assert set(body) == {"id", "agent", "responsible_user", "created_at", "status"}
    assert (body["id"], body["agent"], body["responsible_user"]) == (task_id, agent, user)
    created = parse_time(body["created_at"])
    assert abs(created - datetime.now(created.tzinfo)) < timedelta(minutes=5)
    view = body["status"]
    assert set(view) == STATUS_KEYS
    assert view["phase"] in ("idle", "processing", "terminal")
    assert isinstance(view["revision"], str) and view["revision"]
    assert isinstance(view["notifications"], list)
    if view["phase"] != "terminal":
        assert view["terminal_reason"] is None
    if view["idle_expires_at"] is not None:
        parse_time(view["idle_expires_at"])


def phase(body: dict[str, Any]) -> tuple[str, str | None]:
    return body["status"]["phase"], body["status"]["terminal_reason"]


def review_message(message_id: str, text: str = "Review this diff of payments-api") -> dict[str, Any]:
    return {
        "messageId": message_id,
        "role": "ROLE_USER",
        "parts": [{"text": text}, {"raw": base64.b64encode(DIFF.encode()).decode(), "mediaType": "text/x-diff"}],
    }


def park_review(base: str) -> dict[str, Any]:
    """A code-reviewer task waiting in INPUT_REQUIRED for its base branch."""
    task = rpc(base, "SendMessage", {"message": review_message(new_id("review"))})["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task


def answer(task: dict[str, Any], text: str = "main") -> dict[str, Any]:
    return user_message(text, new_id("answer"), taskId=task["id"])


def get_task(base: str, task_id: str) -> dict[str, Any]:
    return rpc(base, "GetTask", {"id": task_id})["result"]


def status_stream(
    base: str, task_id: str, opened: threading.Event | None = None, headers: dict[str, str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(id, status object) of each SSE frame until the server closes the stream; `opened` is set at the first frame."""
    frames: list[tuple[str, dict[str, Any]]] = []
    with httpx.stream("GET", f"{base}/tasks/{task_id}/status/stream", headers=headers, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        frame_id = ""
        for line in response.iter_lines():
            if line.startswith("id:"):
                frame_id = line.removeprefix("id:").strip()
            elif line.startswith("data:"):
                frames.append((frame_id, json.loads(line.removeprefix("data:").strip())))
                if opened is not None:
                    opened.set()
    return frames


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as executor:
        yield executor


# The status object and its phases


def test_code_review_goes_idle_processing_terminal(server: ServerProcess, pool: ThreadPoolExecutor) -> None:
    """INPUT_REQUIRED is idle; the answer's WORKING turn is processing; COMPLETED is terminal/completed."""
    base = server.agent("code-reviewer")
    task = park_review(base)
    body = status_body(base, task["id"])
    assert_seed_shape(body, task["id"], "code-reviewer")
    assert phase(body) == ("idle", None)
    assert body["status"]["idle_expires_at"] is None, "no inactivity lifespan is configured"

    opened = threading.Event()
    frames: Future[list[tuple[str, dict[str, Any]]]] = pool.submit(status_stream, base, task["id"], opened)
    assert opened.wait(10), "the status stream sent no first frame"
    done = rpc(base, "SendMessage", {"message": answer(task)})["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"

    phases = [phase(body) for _, body in frames.result(timeout=30)]
    assert phases[0] == ("idle", None)
    assert phases[-1] == ("terminal", "completed")
    assert set(phases) == {("idle", None), ("processing", None), ("terminal", "completed")}
    assert phase(status_body(base, task["id"])) == ("terminal", "completed")


class Stepper(AgentExecutor):
    """A test-only agent: opens its task SUBMITTED, reports WORKING, then completes, each step once the test says."""

    def __init__(self) -> None:
        self._gate = threading.Semaphore(0)

    def release(self) -> None:
        self._gate.release()

    async def _hold(self) -> None:
        if not await asyncio.to_thread(self._gate.acquire, True, HOLD_LIMIT):
            raise RuntimeError("the test never released this step")

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = await open_task(context, event_queue)
        await self._hold()
        await updater.start_work()
        await self._hold()
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError("the stepper is never canceled")


def test_submitted_and_working_are_processing() -> None:
    agent = Stepper()
    spec = AgentSpec("stepper", card("stepper"), agent)
    bridge = Bridge([spec], Stores(StoreConfig.parse("memory")), SystemClock(), lambda: str(uuid.uuid4()))
    with serve_in_thread(bridge.app()) as url:
        base = f"{url}/stepper"
        message = user_message("step", new_id("step"))
        task = rpc(base, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}})["result"]["task"]
        seen = []
        for state in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"):
            wait_for(lambda: get_task(base, task["id"])["status"]["state"] == state, what=state)
            body = status_body(base, task["id"])
            assert_seed_shape(body, task["id"], "stepper")
            seen.append(phase(body))
            if state != "TASK_STATE_COMPLETED":
                agent.release()
    assert seen == [("processing", None), ("processing", None), ("terminal", "completed")]


def test_missing_commit_is_terminal_errored(server: ServerProcess) -> None:
    base = server.agent("test-runner")
    reply = rpc(base, "SendMessage", {"message": user_message("Run the unit tests for payments-api at commit deadbee", new_id("dead"))})
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    body = status_body(base, task["id"])
    assert_seed_shape(body, task["id"], "test-runner")
    assert phase(body) == ("terminal", "errored")
    assert body["status"]["idle_expires_at"] is None and body["status"]["notifications"] == []


def test_production_deploy_is_terminal_restricted_behind_the_token(server: ServerProcess) -> None:
    base = server.agent("deployer")
    message = user_message("Deploy build 2026.10.06-1 to production", new_id("prod"))
    task = rpc(base, "SendMessage", {"message": message}, headers=DEPLOYER)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"

    assert status(base, task["id"]).status_code == 401
    assert httpx.get(f"{base}/tasks/{task['id']}/status/stream", timeout=10).status_code == 401
    body = status_body(base, task["id"], DEPLOYER)
    assert_seed_shape(body, task["id"], "deployer", user="deployer-client")
    assert phase(body) == ("terminal", "restricted")
    assert [phase(frame) for _, frame in status_stream(base, task["id"], headers=DEPLOYER)] == [("terminal", "restricted")]
    operator = {"Authorization": "Bearer ops_demo_5b9e"}
    assert status(base, task["id"], operator).json() == body, "an operator reads any task's status view"


def test_canceled_task_is_terminal_completed(server: ServerProcess) -> None:
    base = server.agent("code-reviewer")
    task = park_review(base)
    canceled = rpc(base, "CancelTask", {"id": task["id"]})["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    body = status_body(base, task["id"])
    assert phase(body) == ("terminal", "completed")
    assert body["status"]["idle_expires_at"] is None


def test_unknown_task_is_404(server: ServerProcess) -> None:
    assert status(server.agent("test-runner"), "no-such-task").status_code == 404


# ETag, 304 and revisions


def test_etag_is_the_quoted_revision_and_if_none_match_answers_304(server: ServerProcess) -> None:
    base = server.agent("test-runner")
    reply = rpc(base, "SendMessage", {"message": user_message("Run the unit tests for payments-api at commit 9f3c2e1", new_id("etag"))})
    task_id = reply["result"]["task"]["id"]
    response = status(base, task_id)
    revision = response.json()["status"]["revision"]
    assert response.headers["etag"] == f'"{revision}"'

    unchanged = status(base, task_id, {"If-None-Match": f'"{revision}"'})
    assert unchanged.status_code == 304
    assert unchanged.content == b""
    assert unchanged.headers["etag"] == f'"{revision}"'
    assert status(base, task_id, {"If-None-Match": '"stale"'}).status_code == 200
    for listed in (f'W/"{revision}"', f'"stale", "{revision}"', "*"):
        assert status(base, task_id, {"If-None-Match": listed}).status_code == 304, listed


def test_an_unchanged_poll_is_answered_as_the_routed_endpoint_answers_it(server: ServerProcess) -> None:
    """The 304 of a plain poll comes from `StatusPolls`, ahead of the routes; `?wait=0` takes the route. Same answer."""
    base = server.agent("test-runner")
    reply = rpc(base, "SendMessage", {"message": user_message("Run the unit tests for payments-api at commit 9f3c2e1", new_id("poll"))})
    task_id = reply["result"]["task"]["id"]
    tag = status(base, task_id).headers["etag"]
    for seen in (tag, f"W/{tag}", f'"stale", {tag}', "*"):
        direct, routed = status(base, task_id, {"If-None-Match": seen}), status(base, task_id, {"If-None-Match": seen}, wait="0")
        assert (direct.status_code, direct.content) == (routed.status_code, routed.content) == (304, b"")
        assert {k: v for k, v in direct.headers.items() if k != "date"} == {k: v for k, v in routed.headers.items() if k != "date"}
    assert status(base, "no-such-task", {"If-None-Match": "*"}).status_code == 404
    assert status(base, task_id, {"If-None-Match": '"0"'}).json()["status"]["revision"] == tag.strip('"')


def test_revision_moves_with_every_change_and_never_repeats(server: ServerProcess, pool: ThreadPoolExecutor) -> None:
    """Each event a stream carries is one change of the task: the revision moves once per event, only upward."""
    base = server.agent("test-runner")
    text = "Run the full suite for payments-api at commit 1a2b3c4"
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": user_message(text, new_id("full"))}}
    events: list[dict[str, Any]] = []
    seen: Future[list[tuple[str, dict[str, Any]]]] | None = None
    with httpx.stream("POST", f"{base}/a2a/jsonrpc", json=body, headers=A2A, timeout=30) as response:
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            events.append(json.loads(line.removeprefix("data:").strip())["result"])
            if seen is None:
                seen = pool.submit(status_stream, base, events[0]["task"]["id"])
    assert seen is not None
    task_id = events[0]["task"]["id"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"

    revisions = [int(frame_body["status"]["revision"]) for _, frame_body in seen.result(timeout=30)]
    assert revisions == sorted(set(revisions)), f"revisions repeat or go back: {revisions}"
    final = status_body(base, task_id)["status"]["revision"]
    assert int(final) == len(events), f"{len(events)} changes (one per streamed event) but revision {final}"


def test_revision_survives_a_restart(tmp_path: Path) -> None:
    process = ServerProcess(f"sqlite:///{tmp_path}/status.db").start()
    try:
        base = process.agent("code-reviewer")
        task = park_review(base)
        before = status(base, task["id"])
        etag = before.headers["etag"]
        process.kill()
        process.start()

        after = status(base, task["id"])
        assert after.headers["etag"] == etag, "the revision must be the same right after the restart"
        assert after.json() == before.json()
        assert status(base, task["id"], {"If-None-Match": etag}).status_code == 304

        stream = rpc_stream(base, "SendStreamingMessage", {"message": answer(task)})
        assert stream[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        final = status_body(base, task["id"])["status"]["revision"]
        assert int(final) == int(before.json()["status"]["revision"]) + len(stream), "the revision continues upward"
    finally:
        process.stop()


# Long poll


def long_poll_bound(base: str, pool: ThreadPoolExecutor) -> float:
    """One long poll parked on an idle task, then an answer: seconds from sending the answer to the poll's reply.

    The change happens after the answer is sent, so this is an upper bound on the time from the change to the reply.
    """
    task = park_review(base)
    etag = status(base, task["id"]).headers["etag"]
    sent = threading.Event()

    def mark_sent(_request: httpx.Request) -> None:
        sent.set()

    def poll() -> tuple[httpx.Response, float]:
        with httpx.Client(timeout=30, event_hooks={"request": [mark_sent]}) as client:
            response = client.get(f"{base}/tasks/{task['id']}/status", params={"wait": "20"}, headers={"If-None-Match": etag})
        return response, time.monotonic()

    envelope = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": answer(task), "configuration": {"returnImmediately": True}},
    }
    with httpx.Client(timeout=30) as client:
        polled = pool.submit(poll)
        assert sent.wait(10)
        client.get(base + "/.well-known/agent-card.json")  # a full round trip after the poll left: it is being served
        started = time.monotonic()
        reply = client.post(f"{base}/a2a/jsonrpc", json=envelope, headers=A2A)
    assert "result" in reply.json(), reply.text
    response, returned = polled.result(timeout=30)
    assert response.status_code == 200
    assert response.headers["etag"] != etag
    return returned - started


def test_long_poll_returns_within_100_ms_of_a_change(pool: ThreadPoolExecutor) -> None:
    """On the memory store the answer's own work before the change is negligible, so the bound is close to the
    poll's latency; on SQLite it would also count the commits the answer makes before its change is visible."""
    process = ServerProcess("memory").start()
    try:
        base = process.agent("code-reviewer")
        bounds = [long_poll_bound(base, pool) for _ in range(LONG_POLL_TRIALS)]
    finally:
        process.stop()
    assert statistics.median(bounds) < 0.1, f"long poll replies after the change, seconds: {bounds}"


def test_long_poll_that_times_out_answers_304_at_the_requested_time(server: ServerProcess) -> None:
    base = server.agent("test-runner")
    reply = rpc(base, "SendMessage", {"message": user_message("Run the unit tests for payments-api at commit 9f3c2e1", new_id("lp"))})
    task_id = reply["result"]["task"]["id"]
    etag = status(base, task_id).headers["etag"]
    started = time.monotonic()
    response = status(base, task_id, {"If-None-Match": etag}, wait="1")
    elapsed = time.monotonic() - started
    assert response.status_code == 304 and response.content == b""
    assert 0.95 <= elapsed < 2.0, elapsed

    started = time.monotonic()
    assert status(base, task_id, {"If-None-Match": '"0"'}, wait="60").status_code == 200
    assert time.monotonic() - started < 2.0, "a revision the caller has not seen answers at once"


@pytest.mark.parametrize("wait", ["61", "60.5", "-1", "abc", "", "nan", "inf"])
def test_wait_out_of_range_is_400(server: ServerProcess, wait: str) -> None:
    base = server.agent("test-runner")
    reply = rpc(base, "SendMessage", {"message": user_message("Run the unit tests for payments-api at commit 9f3c2e1", new_id("w"))})
    response = status(base, reply["result"]["task"]["id"], wait=wait)
    assert response.status_code == 400
    assert response.json()["error"]["status"] == "INVALID_ARGUMENT"


# Server-Sent Events


def test_status_stream_pushes_each_change_and_closes_after_terminal(server: ServerProcess) -> None:
    base = server.agent("test-runner")
    text = "Run the full suite for payments-api at commit 7d4e5f6"
    reply = rpc(base, "SendMessage", {"message": user_message(text, new_id("sse")), "configuration": {"returnImmediately": True}})
    task_id = reply["result"]["task"]["id"]
    frames = status_stream(base, task_id)

    revisions = [int(body["status"]["revision"]) for _, body in frames]
    assert all(a < b for a, b in zip(revisions, revisions[1:], strict=False)), revisions
    assert [frame_id for frame_id, _ in frames] == [body["status"]["revision"] for _, body in frames]
    assert len(frames) >= 3, "a full suite streams its progress"
    assert all(phase(body) == ("processing", None) for _, body in frames[:-1])
    assert phase(frames[-1][1]) == ("terminal", "completed")
    for _, body in frames:
        assert_seed_shape(body, task_id, "test-runner")


def test_status_stream_of_an_ended_task_sends_one_frame(server: ServerProcess) -> None:
    base = server.agent("code-reviewer")
    task = park_review(base)
    rpc(base, "CancelTask", {"id": task["id"]})
    frames = status_stream(base, task["id"])
    assert len(frames) == 1 and phase(frames[0][1]) == ("terminal", "completed")


def test_quiet_status_stream_sends_keepalives_not_repeated_frames(
    monkeypatch: pytest.MonkeyPatch, pool: ThreadPoolExecutor
) -> None:
    """A stream with nothing new sends comment lines; its next frame is the next change, here the terminal one."""
    monkeypatch.setattr(bridge_routes, "KEEPALIVE", 0.1)
    bridge = Bridge(sample_agents(0.0), Stores(StoreConfig.parse("memory")), SystemClock(), lambda: str(uuid.uuid4()))
    with serve_in_thread(bridge.app()) as url:
        base = f"{url}/code-reviewer"
        task = park_review(base)
        kept_alive = threading.Event()

        def read() -> list[str]:
            lines: list[str] = []
            with httpx.stream("GET", f"{base}/tasks/{task['id']}/status/stream", timeout=30) as response:
                for line in response.iter_lines():
                    lines.append(line)
                    if line.startswith(":"):
                        kept_alive.set()
            return lines

        reading = pool.submit(read)
        assert kept_alive.wait(10), "no keepalive on a quiet stream"
        rpc(base, "CancelTask", {"id": task["id"]})
        lines = reading.result(timeout=30)
    frames = [json.loads(line.removeprefix("data:")) for line in lines if line.startswith("data:")]
    assert [phase(body) for body in frames] == [("idle", None), ("terminal", "completed")]
    kinds = ["frame" if line.startswith("data:") else "keepalive" for line in lines if line.startswith(("data:", ":"))]
    assert kinds[0] == kinds[-1] == "frame" and set(kinds[1:-1]) == {"keepalive"}, kinds


# Inactivity lifespan


def expired(base: str, task_id: str) -> dict[str, Any] | None:
    body = status_body(base, task_id)
    return body if body["status"]["phase"] == "terminal" else None


def assert_closed_by_lifespan(base: str, task_id: str, deadline: datetime) -> dict[str, Any]:
    """CANCELED with a status message saying why, no earlier than the deadline; the status is terminal/completed."""
    body = status_body(base, task_id)
    assert phase(body) == ("terminal", "completed")
    assert body["status"]["idle_expires_at"] is None
    task = get_task(base, task_id)
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    text = " ".join(p.get("text", "") for p in task["status"]["message"]["parts"])
    assert "inactivity lifespan" in text, text
    assert parse_time(task["status"]["timestamp"]) >= deadline
    return task


@pytest.fixture
def lifespan_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    seconds = getattr(request, "param", 1.5)
    process = ServerProcess(f"sqlite:///{tmp_path}/idle.db", extra=["--idle-lifespan", str(seconds)]).start()
    yield process
    process.stop()


def test_idle_task_is_completed_when_its_lifespan_runs_out(lifespan_server: ServerProcess) -> None:
    base = lifespan_server.agent("code-reviewer")
    task = park_review(base)
    body = status_body(base, task["id"])
    assert phase(body) == ("idle", None)
    deadline = parse_time(body["status"]["idle_expires_at"])
    parked = parse_time(get_task(base, task["id"])["status"]["timestamp"])
    assert timedelta(seconds=1.4) <= deadline - parked <= timedelta(seconds=1.7), (parked, deadline)

    closed = wait_for(lambda: expired(base, task["id"]), timeout=10, what="the lifespan to close the task")
    assert int(closed["status"]["revision"]) > int(body["status"]["revision"])
    assert_closed_by_lifespan(base, task["id"], deadline)

    lifespan_server.kill()
    lifespan_server.start()
    assert status_body(base, task["id"]) == closed, "still completed, unchanged, after a restart"


def test_processing_task_has_no_idle_deadline(lifespan_server: ServerProcess) -> None:
    base = lifespan_server.agent("test-runner")
    text = "Run the full suite for payments-api at commit 1a2b3c4"
    reply = rpc(base, "SendMessage", {"message": user_message(text, new_id("busy")), "configuration": {"returnImmediately": True}})
    frames = status_stream(base, reply["result"]["task"]["id"])
    assert all(body["status"]["idle_expires_at"] is None for _, body in frames)
    assert phase(frames[-1][1]) == ("terminal", "completed")


@pytest.mark.parametrize("lifespan_server", [4.0], indirect=True)
def test_stored_deadline_is_kept_across_a_restart(lifespan_server: ServerProcess) -> None:
    """A crash while a task is parked neither forgets nor resets its deadline: it closes at the stored moment."""
    base = lifespan_server.agent("code-reviewer")
    task = park_review(base)
    body = status_body(base, task["id"])
    deadline = parse_time(body["status"]["idle_expires_at"])
    lifespan_server.kill()
    lifespan_server.start()

    after = status_body(base, task["id"])
    if after["status"]["phase"] == "idle":
        assert after == body, "the stored deadline (and the revision) are the same after the restart"
    else:
        # Already closed right after the restart: a deadline reset at start would lie a whole lifespan ahead.
        assert phase(after) == ("terminal", "completed")
    wait_for(lambda: expired(base, task["id"]), timeout=15, what="the lifespan to close the task")
    assert_closed_by_lifespan(base, task["id"], deadline)
