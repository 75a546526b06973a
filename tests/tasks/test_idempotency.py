"""Idempotent retries: a SendMessage (or SendStreamingMessage) whose messageId the same caller already sent returns the
same task or reply and never runs the agent again, also after a restart or a dropped connection; the same messageId
with another message is refused with -32602 naming message.messageId."""

import asyncio
import contextlib
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Message, Part, Role, TaskState

from a2a_bridge.agents.base import Emitter
from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.auth import Principal
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.stores import StoreConfig, Stores
from a2a_bridge.tasks.live_tasks import Listener
from a2a_bridge.tasks.task_host import TaskHost
from tests.claim_support import (
    DEPLOYER,
    FULL_SUITE,
    UNIT_TESTS,
    approve,
    claim_view,
    deploy_message,
    error_fields,
    operations,
    review_message,
    rollouts,
    stored_claim_view,
    wait_state,
)
from tests.support import A2A, ServerProcess, rpc, rpc_stream, serve_in_thread, user_message, wait_for

ALICE = "alice_token_1f2e"


class Counted(AgentExecutor):
    """Counts its executions: 'hello' gets a direct reply; 'wait' holds its turn until the test releases it."""

    def __init__(self) -> None:
        self.executions: list[str] = []
        self.release = threading.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        self.executions.append(context.message.message_id)
        text = context.get_user_input()
        if text == "hello":
            reply = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_AGENT, context_id=context.context_id or "",
                            parts=[Part(text=f"hello, execution {len(self.executions)}")])
            await event_queue.enqueue_event(reply)
            return
        out = Emitter(event_queue, context, lambda: str(uuid.uuid4()))
        await out.status(TaskState.TASK_STATE_WORKING, "Counting")
        if "wait" in text:
            await asyncio.to_thread(self.release.wait, 30)
        await out.status(TaskState.TASK_STATE_COMPLETED, f"execution {len(self.executions)}")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.release.set()


def counted_card() -> AgentCard:
    return AgentCard(
        name="counted",
        description="Counts its executions; exists only in the tests.",
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="count", name="Count", description="Counts.", tags=["test"])],
    )


class Following:
    """Records when a retry joins the running turn of its message (TaskHost.follow answered True)."""

    def __init__(self, host: TaskHost) -> None:
        self.joined = threading.Event()
        original = host.follow

        def follow(task_id: str, context: ServerCallContext, message_id: str, listener: Listener) -> bool:
            followed = original(task_id, context, message_id, listener)
            if followed:
                self.joined.set()
            return followed

        host.follow = follow  # type: ignore[method-assign]


@contextlib.contextmanager
def serving(db: Path, agent: Counted) -> Iterator[tuple[str, Following]]:
    """The counting agent on a bridge over a SQLite file, in this process; its base URL and its follow recorder."""
    bridge = Bridge(
        [AgentSpec("counted", counted_card(), agent)],
        Stores(StoreConfig.parse(f"sqlite:///{db}")),
        SystemClock(),
        lambda: str(uuid.uuid4()),
        principals={ALICE: Principal("alice")},
    )
    following = Following(bridge.agents["counted"].host)
    try:
        with serve_in_thread(bridge.app()) as base:
            yield f"{base}/counted", following
    finally:
        agent.release.set()


@pytest.fixture
def counted(tmp_path: Path) -> Iterator[tuple[str, Counted, Following]]:
    agent = Counted()
    with serving(tmp_path / "counted.db", agent) as (base, following):
        yield base, agent, following


def send(base: str, message: dict[str, Any], headers: dict[str, str] | None = None, **configuration: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"message": message}
    if configuration:
        params["configuration"] = configuration
    return rpc(base, "SendMessage", params, headers=headers)


def task_ids(base: str, headers: dict[str, str] | None = None) -> list[str]:
    return [t["id"] for t in rpc(base, "ListTasks", {"pageSize": 100}, headers=headers)["result"]["tasks"]]


def send_and_drop(base: str, message: dict[str, Any]) -> socket.socket:
    """A blocking SendMessage written to a raw socket; the caller closes it before reading the reply."""
    url = urlsplit(f"{base}/a2a/jsonrpc")
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}).encode()
    head = "".join(f"{name}: {value}\r\n" for name, value in A2A.items())
    connection = socket.create_connection((url.hostname, url.port), timeout=10)
    connection.sendall(
        f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
    )
    return connection


def test_same_message_id_twice_is_one_task_and_one_execution(counted: tuple[str, Counted, Following]) -> None:
    base, agent, _ = counted
    first = send(base, user_message("count", "twice-1"))["result"]["task"]
    again = send(base, user_message("count", "twice-1"))["result"]["task"]
    assert first["status"]["state"] == "TASK_STATE_COMPLETED"
    assert again == first
    assert agent.executions == ["twice-1"]
    assert task_ids(base) == [first["id"]]


def test_a_direct_reply_is_replayed_not_recomputed(counted: tuple[str, Counted, Following]) -> None:
    base, agent, _ = counted
    first = send(base, user_message("hello", "reply-1"))["result"]["message"]
    again = send(base, user_message("hello", "reply-1"))["result"]["message"]
    assert again == first
    assert first["parts"][0]["text"] == "hello, execution 1"
    frames = rpc_stream(base, "SendStreamingMessage", {"message": user_message("hello", "reply-1")})
    assert [f["result"]["message"] for f in frames] == [first]
    assert agent.executions == ["reply-1"]
    assert task_ids(base) == []


def test_concurrent_sends_of_one_message_run_once(counted: tuple[str, Counted, Following]) -> None:
    base, agent, _ = counted
    with ThreadPoolExecutor(5) as pool:
        replies = [pool.submit(send, base, user_message("count and wait", "concurrent-1")) for _ in range(5)]
        wait_for(lambda: agent.executions, what="the first execution")
        agent.release.set()
        tasks = [reply.result(timeout=30)["result"]["task"] for reply in replies]
    assert {t["id"] for t in tasks} == {tasks[0]["id"]}
    assert {t["status"]["state"] for t in tasks} == {"TASK_STATE_COMPLETED"}
    assert agent.executions == ["concurrent-1"]


def test_a_blocking_retry_after_a_dropped_connection_waits_for_the_same_turn(counted: tuple[str, Counted, Following]) -> None:
    base, agent, following = counted
    message = user_message("count and wait", "dropped-1")
    connection = send_and_drop(base, message)
    wait_for(lambda: agent.executions, what="the dropped send to start its turn")
    connection.close()
    with ThreadPoolExecutor(1) as pool:
        retry = pool.submit(send, base, message)
        wait_for(following.joined.is_set, what="the retry to join the running turn")
        agent.release.set()
        task = retry.result(timeout=30)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["status"]["message"]["parts"][0]["text"] == "execution 1"
    assert task_ids(base) == [task["id"]]
    assert agent.executions == ["dropped-1"]


def test_a_retry_sent_at_once_after_a_dropped_connection_runs_once(counted: tuple[str, Counted, Following]) -> None:
    base, agent, _ = counted
    message = user_message("count", "dropped-2")
    send_and_drop(base, message).close()
    task = send(base, message)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task_ids(base) == [task["id"]]
    assert agent.executions == ["dropped-2"]


def test_a_streaming_retry_follows_the_running_turn(counted: tuple[str, Counted, Following]) -> None:
    base, agent, following = counted
    message = user_message("count and wait", "stream-1")
    started = send(base, message, returnImmediately=True)["result"]["task"]
    with ThreadPoolExecutor(1) as pool:
        stream = pool.submit(rpc_stream, base, "SendStreamingMessage", {"message": message})
        wait_for(following.joined.is_set, what="the streaming retry to join the running turn")
        agent.release.set()
        frames = [f["result"] for f in stream.result(timeout=30)]
    assert frames[0]["task"]["id"] == started["id"]
    assert frames[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert frames[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    ended = rpc_stream(base, "SendStreamingMessage", {"message": message})
    assert [f["result"]["task"]["status"]["state"] for f in ended] == ["TASK_STATE_COMPLETED"]
    assert agent.executions == ["stream-1"]


@pytest.mark.parametrize(
    "changed",
    [
        {"parts": [{"text": "count twice"}]},
        {"metadata": {"priority": "high"}},
        {"contextId": "another-context"},
        {"parts": [{"text": "count"}, {"text": "and more"}]},
    ],
    ids=["text", "metadata", "context-id", "parts"],
)
def test_the_same_message_id_with_another_message_is_refused(counted: tuple[str, Counted, Following], changed: dict[str, Any]) -> None:
    base, agent, _ = counted
    first = send(base, user_message("count", "conflict-1"))["result"]["task"]
    refused = send(base, {**user_message("count", "conflict-1"), **changed})
    assert "result" not in refused
    assert refused["error"]["code"] == -32602
    assert error_fields(refused["error"]) == {"message.messageId"}
    assert send(base, user_message("count", "conflict-1"))["result"]["task"] == first
    assert agent.executions == ["conflict-1"]


def test_another_caller_may_use_the_same_message_id(counted: tuple[str, Counted, Following]) -> None:
    base, agent, _ = counted
    mine = send(base, user_message("count", "shared-id-1"))["result"]["task"]
    alices = send(base, user_message("count", "shared-id-1"), headers={"Authorization": f"Bearer {ALICE}"})["result"]["task"]
    assert mine["id"] != alices["id"]
    assert agent.executions == ["shared-id-1", "shared-id-1"]


def test_retries_after_a_restart_run_nothing(tmp_path: Path) -> None:
    first_agent, second_agent = Counted(), Counted()
    with serving(tmp_path / "restart.db", first_agent) as (base, _):
        task = send(base, user_message("count", "restart-1"))["result"]["task"]
        reply = send(base, user_message("hello", "restart-2"))["result"]["message"]
    with serving(tmp_path / "restart.db", second_agent) as (base, _):
        assert send(base, user_message("count", "restart-1"))["result"]["task"] == task
        assert send(base, user_message("hello", "restart-2"))["result"]["message"] == reply
        refused = send(base, user_message("count again", "restart-1"))
        assert refused["error"]["code"] == -32602 and error_fields(refused["error"]) == {"message.messageId"}
    assert first_agent.executions == ["restart-1", "restart-2"]
    assert second_agent.executions == []


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    """A real bridge of its own with a deploy ledger, so ListTasks and the ledger show only this test's work."""
    ledger = tmp_path / "deploys.jsonl"
    process = ServerProcess(f"sqlite:///{tmp_path / 'b.db'}", extra=["--deploy-ledger", str(ledger)]).start()
    yield process, ledger
    process.stop()


def test_retried_send_after_a_dropped_connection_on_a_real_server(bridge: tuple[ServerProcess, Path]) -> None:
    server, _ = bridge
    base = server.agent("test-runner")
    message = user_message(FULL_SUITE, "real-dropped-1")
    connection = send_and_drop(base, message)
    wait_for(lambda: task_ids(base), what="the dropped send to open its task")
    connection.close()
    task = send(base, message)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task_ids(base) == [task["id"]]
    assert len(task["artifacts"][0]["parts"]) == 8
    assert operations(claim_view(server, "test-runner", task["id"])) == ["create", "claim", "complete"]


def test_a_retried_follow_up_resumes_once(bridge: tuple[ServerProcess, Path]) -> None:
    server, _ = bridge
    base = server.agent("code-reviewer")
    asked = send(base, review_message("follow-up-1", "Review this diff of payments-api"))["result"]["task"]
    answer = user_message("main", "follow-up-2", taskId=asked["id"])
    done = send(base, answer)["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert send(base, answer)["result"]["task"] == done
    assert operations(claim_view(server, "code-reviewer", asked["id"])) == ["create", "claim", "ask", "resume", "complete"]


def test_retries_after_a_crash_run_nothing(bridge: tuple[ServerProcess, Path]) -> None:
    server, ledger = bridge
    runner, reviewer, deployer = (server.agent(a) for a in ("test-runner", "code-reviewer", "deployer"))
    run = send(runner, user_message(UNIT_TESTS, "crash-retry-1"))["result"]["task"]
    reply = send(reviewer, user_message("What do you check?", "crash-retry-2"))["result"]["message"]
    deploy = send(deployer, deploy_message("crash-retry-3", "2026.10.06-7"), headers=DEPLOYER)["result"]["task"]
    assert deploy["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    approve(server, deploy["id"])
    deployed = wait_state(server, "deployer", deploy["id"], "TASK_STATE_COMPLETED")
    events = {t: stored_claim_view(server, a, t)["events"] for a, t in (("test-runner", run["id"]), ("deployer", deploy["id"]))}

    server.kill()
    server.start()

    assert send(runner, user_message(UNIT_TESTS, "crash-retry-1"))["result"]["task"] == run
    assert send(reviewer, user_message("What do you check?", "crash-retry-2"))["result"]["message"] == reply
    assert send(deployer, deploy_message("crash-retry-3", "2026.10.06-7"), headers=DEPLOYER)["result"]["task"] == deployed
    streamed = rpc_stream(runner, "SendStreamingMessage", {"message": user_message(UNIT_TESTS, "crash-retry-1")})
    assert [f["result"]["task"] for f in streamed] == [run]
    refused = send(runner, user_message(FULL_SUITE, "crash-retry-1"))
    assert refused["error"]["code"] == -32602 and error_fields(refused["error"]) == {"message.messageId"}
    assert claim_view(server, "test-runner", run["id"])["events"] == events[run["id"]]
    assert claim_view(server, "deployer", deploy["id"])["events"] == events[deploy["id"]]
    assert task_ids(runner) == [run["id"]]
    assert rollouts(ledger) == {deploy["id"]: 1}
