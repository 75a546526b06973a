"""Input sent while a task is processing (SDK defect 1): queued in order, each call answered with its own turn, none
dropped; an input queued behind a turn that ends the task gets -32004 and never enters it. The same exchanges run
on the stock a2a-sdk server as strict xfails that show the defect."""

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import Part
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from a2a_bridge.agents.base import user_texts
from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.stock_sdk import card, open_task, stock_app
from tests.support import A2A, serve_in_thread, user_message, wait_for
from tests.http.test_stock_sdk_defects import StockDefect, expect, servers

DEFECT_1 = (
    "a2a-sdk 1.3 defect 1: input sent to a busy task is answered with another turn's result, runs after the task "
    "completed, or is dropped while its call reports success"
)
AGENT = "slow-echo"
HOLD_LIMIT = 10.0
"""Seconds a held turn waits for the test to release it before it gives up."""
CALL_TIMEOUT = 15.0
UNSUPPORTED_OPERATION = -32004


class SlowEcho(AgentExecutor):
    """A test-only agent whose turns after the first wait for the test to release them; each answers
    INPUT_REQUIRED "turn N: <text>", except "finish", which completes the task."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self._gate = threading.Semaphore(0)

    def release(self, turns: int) -> None:
        """Let this many held turns go on."""
        for _ in range(turns):
            self._gate.release()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        first_turn = context.current_task is None
        updater = await open_task(context, event_queue)
        text = context.get_user_input()
        turn = len(user_texts(context.current_task, context.message))
        if not first_turn:
            self.started.append(text)
            await updater.start_work(updater.new_agent_message([Part(text=f"working on {text}")]))
            if not await asyncio.to_thread(self._gate.acquire, True, HOLD_LIMIT):
                raise RuntimeError("the test never released this turn")
        reply = updater.new_agent_message([Part(text=f"turn {turn}: {text}")])
        if text == "finish":
            await updater.complete(reply)
        else:
            await updater.requires_input(reply)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError("the queued-input tests never cancel")


class Arrivals:
    """ASGI wrapper that records the messageId of each request once the server has its whole body, so a test can
    send the next input only after the previous one reached the server."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        with contextlib.suppress(ValueError, KeyError, TypeError):
            self.seen.append(json.loads(body)["params"]["message"]["messageId"])
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


@contextlib.contextmanager
def serve(kind: str) -> Iterator[tuple[str, SlowEcho, Arrivals]]:
    """The slow agent alone on the stock server or the bridge (memory store); yields its base URL, agent, arrivals."""
    agent = SlowEcho()
    if kind == "stock":
        app: ASGIApp = stock_app(agent)
        prefix = ""
    else:
        spec = AgentSpec(AGENT, card(AGENT), agent)
        app = Bridge([spec], Stores(StoreConfig.parse("memory")), SystemClock(), lambda: str(uuid.uuid4())).app()
        prefix = f"/{AGENT}"
    arrivals = Arrivals(app)
    with serve_in_thread(arrivals) as url:
        yield f"{url}{prefix}", agent, arrivals


def call(base: str, method: str, message: dict[str, Any]) -> list[dict[str, Any]]:
    """One JSON-RPC call: the envelope of a blocking call, or every SSE frame of a stream; a call that never
    answers is the defect too."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}
    try:
        with httpx.stream("POST", f"{base}/a2a/jsonrpc", json=body, headers=A2A, timeout=CALL_TIMEOUT) as response:
            assert response.status_code == 200
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                return [json.loads(response.read())]
            return [json.loads(line.removeprefix("data:")) for line in response.iter_lines() if line.startswith("data:")]
    except httpx.TimeoutException as timeout:
        raise StockDefect(f"{method} with {message['parts'][0]['text']!r} was never answered") from timeout


def method(streaming: bool) -> str:
    return "SendStreamingMessage" if streaming else "SendMessage"


def open_session(base: str) -> dict[str, Any]:
    """A task waiting for input after its first, unheld turn."""
    [reply] = call(base, "SendMessage", user_message("start", f"start-{uuid.uuid4().hex[:8]}"))
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task


def get_task(base: str, task_id: str) -> dict[str, Any]:
    response = httpx.post(
        f"{base}/a2a/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}},
        headers=A2A,
        timeout=CALL_TIMEOUT,
    )
    return response.json()["result"]


def texts_of(task: dict[str, Any], role: str) -> list[str]:
    """The texts of a role's messages: history, then the current status message."""
    messages = list(task.get("history", []))
    if "message" in task["status"]:
        messages.append(task["status"]["message"])
    return [p["text"] for m in messages if m["role"] == role for p in m["parts"] if "text" in p]


def status_texts(frames: list[dict[str, Any]]) -> list[str]:
    """Every status message text a call's frames carry."""
    texts = []
    for frame in frames:
        result = frame.get("result", {})
        status = result.get("statusUpdate", result.get("task", {})).get("status", {})
        texts += [p["text"] for p in status.get("message", {}).get("parts", []) if "text" in p]
    return texts


def queue_behind(
    pool: ThreadPoolExecutor, base: str, agent: SlowEcho, arrivals: Arrivals, task: dict[str, Any], texts: list[str], streaming: bool
) -> list[Future[list[dict[str, Any]]]]:
    """Send the first text and wait until its turn runs (held), then each other text once the server has the one
    before it; returns the calls in the order sent."""
    calls = []
    for index, text in enumerate(texts):
        message_id = f"{text}-{uuid.uuid4().hex[:8]}"
        message = user_message(text, message_id, taskId=task["id"], contextId=task["contextId"])
        calls.append(pool.submit(call, base, method(streaming), message))
        wait_for(lambda: message_id in arrivals.seen, what=f"the server to receive {text!r}")
        if index == 0:
            wait_for(lambda: text in agent.started, what=f"the turn of {text!r} to start")
    return calls


def last_state(frames: list[dict[str, Any]]) -> str | None:
    """The task state the last frame of a call reports (None for an error)."""
    result = frames[-1].get("result", {})
    return result.get("statusUpdate", result.get("task", {})).get("status", {}).get("state")


def assert_own_turn(frames: list[dict[str, Any]], turn: int, text: str, streaming: bool) -> None:
    """A call got its own turn's result: the last frame is that turn's INPUT_REQUIRED, and nothing of another turn."""
    expect(all("result" in frame for frame in frames), f"the call for {text!r} failed: {frames[-1]}")
    last = frames[-1]["result"]
    status = last["statusUpdate"]["status"] if streaming and "statusUpdate" in last else last.get("task", {}).get("status", {})
    said = [p.get("text") for p in status.get("message", {}).get("parts", [])]
    expect(said == [f"turn {turn}: {text}"], f"the call for {text!r} was answered with {said}, not turn {turn}")
    foreign = [t for t in status_texts(frames) if t not in (f"working on {text}", f"turn {turn}: {text}")]
    expect(not foreign, f"the call for {text!r} carried another turn's events: {foreign}")


@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streaming"])
@pytest.mark.parametrize("kind", servers(DEFECT_1))
def test_three_inputs_to_a_busy_task_each_get_their_own_turn(kind: str, streaming: bool) -> None:
    texts = ["alpha", "beta", "gamma"]
    with serve(kind) as (base, agent, arrivals), ThreadPoolExecutor(max_workers=len(texts)) as pool:
        task = open_session(base)
        calls = queue_behind(pool, base, agent, arrivals, task, texts, streaming)
        agent.release(len(texts))
        answers = [c.result(timeout=3 * CALL_TIMEOUT) for c in calls]
        for turn, (text, frames) in enumerate(zip(texts, answers, strict=True), start=2):
            assert_own_turn(frames, turn, text, streaming)
        final = get_task(base, task["id"])
    expect(texts_of(final, "ROLE_USER") == ["start", *texts], f"inputs dropped or reordered: {texts_of(final, 'ROLE_USER')}")
    replies = [t for t in texts_of(final, "ROLE_AGENT") if t.startswith("turn ")]
    expect(replies == ["turn 1: start", "turn 2: alpha", "turn 3: beta", "turn 4: gamma"], f"turns ran as {replies}")
    expect(final["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", f"the task ended {final['status']['state']}")


@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streaming"])
@pytest.mark.parametrize("kind", servers(DEFECT_1))
def test_input_queued_behind_the_last_turn_gets_32004(kind: str, streaming: bool) -> None:
    with serve(kind) as (base, agent, arrivals), ThreadPoolExecutor(max_workers=2) as pool:
        task = open_session(base)
        finishing, queued = queue_behind(pool, base, agent, arrivals, task, ["finish", "beta"], streaming)
        agent.release(2)
        done = finishing.result(timeout=3 * CALL_TIMEOUT)
        refused = queued.result(timeout=3 * CALL_TIMEOUT)
        final = get_task(base, task["id"])
    expect(last_state(done) == "TASK_STATE_COMPLETED", f"the finishing call ended with {done[-1]}")
    errors = [frame["error"] for frame in refused if "error" in frame]
    expect(bool(errors), f"the input queued behind the last turn was answered with success: {refused[-1]}")
    expect(errors[-1]["code"] == UNSUPPORTED_OPERATION, f"refused with {errors[-1]}, not -32004")
    expect(texts_of(final, "ROLE_USER") == ["start", "finish"], f"the refused input entered the task: {texts_of(final, 'ROLE_USER')}")
    expect(final["status"]["state"] == "TASK_STATE_COMPLETED", f"the task ended {final['status']['state']}")
    expect(agent.started == ["finish"], f"the agent ran turns after the task completed: {agent.started}")
