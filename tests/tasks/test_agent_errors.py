"""SDK defect 5 on the bridge: an agent's exception reaches the client as a generic error naming the task, and the
task ends FAILED with a status message; the exception's text never leaves the server. The server's log shows it with
the agent's own frames, in the first turn and a later one, also where turns.py is compiled (mypyc threw the exception
into its coroutine without its traceback, so the log named turns.py and no line of the agent's file)."""

import inspect
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from httpx_sse import EventSource
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, TaskState

from a2a_bridge.agents.base import Emitter
from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.stores import StoreConfig, Stores
from tests import user_agents
from tests.support import A2A, CONSOLE_SCRIPT, ServerProcess, rpc, rpc_stream, serve_in_thread, user_message, wait_for

SECRET = "secret path /etc/x"


class Raiser(AgentExecutor):
    """A test-only agent that raises, immediately or after it has reported WORKING."""

    def __init__(self, after_working: bool) -> None:
        self.after_working = after_working

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        if self.after_working:
            await Emitter(event_queue, context, lambda: str(uuid.uuid4())).status(
                TaskState.TASK_STATE_WORKING, "Reading the configuration"
            )
        raise RuntimeError(SECRET)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise RuntimeError(SECRET)


def raiser_spec(name: str, after_working: bool) -> AgentSpec:
    card = AgentCard(
        name=name,
        description="Raises inside execute(); exists only in the tests.",
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="raise", name="Raise", description="Raises.", tags=["test"])],
    )
    return AgentSpec(name, card, Raiser(after_working))


@pytest.fixture(scope="module")
def bridge_url() -> Iterator[str]:
    """A bridge serving the two raising agents in memory, on a uvicorn thread."""
    bridge = Bridge(
        [raiser_spec("raise-at-once", after_working=False), raiser_spec("raise-after-working", after_working=True)],
        Stores(StoreConfig.parse("memory")),
        SystemClock(),
        lambda: str(uuid.uuid4()),
    )
    with serve_in_thread(bridge.app()) as base:
        yield base


AGENTS = ["raise-at-once", "raise-after-working"]


def error_info(error: dict) -> dict:
    """The metadata of the google.rpc.ErrorInfo detail of a JSON-RPC error."""
    infos = [d for d in error.get("data") or [] if d.get("@type") == "type.googleapis.com/google.rpc.ErrorInfo"]
    assert len(infos) == 1, error
    return infos[0].get("metadata") or {}


def assert_generic(error: dict) -> str:
    """A -32603 that says nothing of the exception and names the task; returns the task id."""
    assert error["code"] == -32603
    assert error["message"] == "Internal error"
    assert SECRET not in str(error) and "RuntimeError" not in str(error)
    task_id = error_info(error).get("taskId")
    assert task_id, error
    return task_id


def assert_failed_with_status_message(base: str, task_id: str) -> dict:
    task = rpc(base, "GetTask", {"id": task_id})["result"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    text = " ".join(p.get("text", "") for p in task["status"]["message"]["parts"])
    assert text
    assert task["status"]["message"]["role"] == "ROLE_AGENT"
    assert SECRET not in str(task)
    return task


@pytest.mark.parametrize("agent", AGENTS)
def test_blocking_send_gets_a_generic_error_naming_the_failed_task(bridge_url: str, agent: str) -> None:
    base = f"{bridge_url}/{agent}"
    reply = rpc(base, "SendMessage", {"message": user_message("Do the thing", f"{agent}-blocking")})
    assert "result" not in reply
    task_id = assert_generic(reply["error"])
    task = assert_failed_with_status_message(base, task_id)
    assert task["history"][0]["messageId"] == f"{agent}-blocking"
    if agent == "raise-after-working":
        assert [m["parts"][0]["text"] for m in task["history"] if m["role"] == "ROLE_AGENT"] == ["Reading the configuration"]


@pytest.mark.parametrize("agent", AGENTS)
def test_stream_ends_with_a_generic_error_naming_the_failed_task(bridge_url: str, agent: str) -> None:
    base = f"{bridge_url}/{agent}"
    frames = rpc_stream(base, "SendStreamingMessage", {"message": user_message("Do the thing", f"{agent}-stream")})
    *events, last = frames
    assert all("result" in frame for frame in events), frames
    task_id = assert_generic(last["error"])
    assert events[0]["result"]["task"]["id"] == task_id
    assert events[0]["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    states = [e["result"]["statusUpdate"]["status"]["state"] for e in events if "statusUpdate" in e["result"]]
    assert states == (["TASK_STATE_WORKING"] if agent == "raise-after-working" else [])
    assert_failed_with_status_message(base, task_id)


def test_return_immediately_then_get_task_shows_failed(bridge_url: str) -> None:
    """A caller that did not wait still finds the task FAILED with a status message, not stuck in WORKING."""
    base = f"{bridge_url}/raise-after-working"
    reply = rpc(base, "SendMessage", {"message": user_message("Do the thing", "immediate-1"),
                                       "configuration": {"returnImmediately": True}})
    task_id = reply["result"]["task"]["id"]

    def failed() -> bool:
        return rpc(base, "GetTask", {"id": task_id})["result"]["status"]["state"] == "TASK_STATE_FAILED"

    wait_for(failed, what="the task to fail")
    assert_failed_with_status_message(base, task_id)


ROOT = Path(__file__).resolve().parents[2]


def raising_frames() -> list[str]:
    """The traceback lines naming the frames of tests/user_agents.py the raising agent's exception passes through."""
    path = inspect.getsourcefile(user_agents)
    lines, first = inspect.getsourcelines(user_agents.Raising.execute)
    execute_line = first + next(i for i, line in enumerate(lines) if line.strip() == "fail()")
    fail_line = inspect.getsourcelines(user_agents.fail)[1] + 1
    return [f'File "{path}", line {execute_line}, in execute', f'File "{path}", line {fail_line}, in fail']


def test_the_log_shows_the_agents_own_frames_in_every_turn(tmp_path: Path) -> None:
    """The user's agent, served by the console script as `--agent MODULE:ATTRIBUTE`, raises in a first turn and in a
    second one: each time the log shows the line of its file that raised, under the exception's type and text."""
    log = tmp_path / "server.log"
    server = ServerProcess("memory", extra=["--agent", "tests.user_agents:raising"], log=log,
                           command=[str(CONSOLE_SCRIPT)], cwd=ROOT)
    server.start()
    try:
        base = server.agent("raising")
        first = rpc(base, "SendMessage", {"message": user_message("raise now", "raising-first")})
        failed = error_info(first["error"])["taskId"]
        asked = rpc(base, "SendMessage", {"message": user_message("anything", "raising-ask")})["result"]["task"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        second = rpc(base, "SendMessage", {"message": user_message("go on", "raising-second", taskId=asked["id"])})
        assert error_info(second["error"])["taskId"] == asked["id"]
    finally:
        server.stop()
    text = log.read_text()
    records = text.split(" ERROR a2a_bridge.tasks.turn_execution ")[1:]
    assert [failed in record for record in records] == [True, False], text
    assert [asked["id"] in record for record in records] == [False, True], text
    for record in records:
        assert "agent raising raised in turn" in record
        traceback = [line.strip() for line in record.splitlines()]
        frames = raising_frames()
        assert all(frame in traceback for frame in frames), record
        at = [traceback.index(frame) for frame in frames]
        assert at == sorted(at), record
        assert traceback[at[-1] + 1] == "raise RuntimeError(RAISED)", record
        assert f"RuntimeError: {user_agents.RAISED}" in traceback, record


@pytest.mark.parametrize("raised_after_working", [False, True], ids=["at-once", "after-working"])
def test_a_rest_stream_the_agent_failed_logs_one_traceback(tmp_path: Path, raised_after_working: bool) -> None:
    """Over HTTP+JSON streaming the client gets the error event naming the task, and the log holds the agent's
    traceback once: not a second one from the SDK's REST dispatcher ("Error during REST SSE stream")."""
    log = tmp_path / "server.log"
    server = ServerProcess("memory", extra=["--agent", "tests.user_agents:raising"], log=log,
                           command=[str(CONSOLE_SCRIPT)], cwd=ROOT)
    server.start()
    try:
        base = f"{server.agent('raising')}/a2a/rest"
        task_id = None
        if raised_after_working:
            asked = httpx.post(f"{base}/message:send", headers=A2A, timeout=10,
                               json={"message": user_message("anything", "rest-stream-ask")}).json()["task"]
            task_id = asked["id"]
        message = user_message("raise now" if task_id is None else "go on", "rest-stream-raise",
                               **({"taskId": task_id} if task_id else {}))
        with httpx.stream("POST", f"{base}/message:stream", headers=A2A, json={"message": message}, timeout=30) as response:
            events = list(EventSource(response).iter_sse())
        assert events[-1].event == "error"
        assert events[-1].json()["error"]["status"] == "INTERNAL"
    finally:
        server.stop()
    text = log.read_text()
    assert text.count("Traceback (most recent call last)") == 1, text
    assert "Error during REST SSE stream" not in text
    assert "agent raising raised in turn" in text and f"RuntimeError: {user_agents.RAISED}" in text
