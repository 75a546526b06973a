"""Two replicas on one PostgreSQL database: a cancel sent to the replica that does not run the task reaches the
executor and is never overwritten, and a follow-up sent to the other replica while a turn runs is queued, never run
concurrently (SDK defect 3). The same scenarios on the stock SDK's handler are expected to fail."""

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import DatabaseTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part, TaskState
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette

from a2a_bridge.agents.base import Emitter
from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.stock_sdk import card as stock_card
from tests.stock_sdk import open_task
from tests.support import rpc, rpc_stream, serve_in_thread, user_message, wait_for

REPETITIONS = 20
TURN_SECONDS = 0.8
"""How long each turn of the test agent works: long enough for the other replica to act during it, also on a loaded
machine (a cancel reaches the other replica through a few queries of each)."""


@dataclass
class Executions:
    """Every execute() call across replicas: (task id, text, replica, start, end), thread-safe. A turn's end is when
    its agent emits the status that ends it: the turn ends when that status is stored, which is inside the emit, so
    the next turn may start before the emit returns to the agent."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    spans: list[tuple[str, str, str, float, float]] = field(default_factory=list)

    def add(self, span: tuple[str, str, str, float, float]) -> None:
        with self.lock:
            self.spans.append(span)

    def of(self, task_id: str) -> list[tuple[str, str, str, float, float]]:
        with self.lock:
            return sorted((s for s in self.spans if s[0] == task_id), key=lambda s: s[3])


class Turns(AgentExecutor):
    """Each turn works TURN_SECONDS, then answers INPUT_REQUIRED "echo: <text>"; "stubborn" ignores cancels and
    reports COMPLETED at the end of its turn anyway."""

    repeat_safe = True

    def __init__(self, replica: str, executions: Executions) -> None:
        self.replica = replica
        self.executions = executions

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        out = Emitter(event_queue, context, lambda: str(uuid.uuid4()))
        start = time.monotonic()
        last: float | None = None
        try:
            await out.status(TaskState.TASK_STATE_WORKING, f"working on {text}")
            if text == "stubborn":
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(TURN_SECONDS)
                last = time.monotonic()
                await out.status(TaskState.TASK_STATE_COMPLETED, "finished anyway")
                return
            await asyncio.sleep(TURN_SECONDS)
            last = time.monotonic()
            await out.status(TaskState.TASK_STATE_INPUT_REQUIRED, f"echo: {text}")
        finally:
            self.executions.add((context.task_id or "", text, self.replica, start, last or time.monotonic()))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await Emitter(event_queue, context, lambda: str(uuid.uuid4())).status(TaskState.TASK_STATE_CANCELED, "canceled")


def turns_card() -> AgentCard:
    return AgentCard(
        name="turns",
        description="Long turns that end waiting for input; exists only in the tests.",
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Echoes after a while.", tags=["test"])],
    )


@contextlib.contextmanager
def bridge_replicas(database: str, executions: Executions) -> Iterator[tuple[str, str]]:
    """Two bridge processes' worth of servers (each its own event loop and engine) on one database."""
    with contextlib.ExitStack() as stack:
        bases = []
        for replica in ("A", "B"):
            bridge = Bridge(
                [AgentSpec("turns", turns_card(), Turns(replica, executions))],
                Stores(StoreConfig.parse(database)),
                SystemClock(),
                lambda: str(uuid.uuid4()),
            )
            bases.append(stack.enter_context(serve_in_thread(bridge.app())) + "/turns")
        yield bases[0], bases[1]


class StockTurns(AgentExecutor):
    """The same agent on the stock SDK: TaskUpdater instead of the bridge's emitter."""

    def __init__(self, replica: str, executions: Executions) -> None:
        self.replica = replica
        self.executions = executions

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        updater = await open_task(context, event_queue)
        start = time.monotonic()
        last: float | None = None
        try:
            await updater.start_work()
            if text == "stubborn":
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(TURN_SECONDS)
                last = time.monotonic()
                await updater.complete(updater.new_agent_message([Part(text="finished anyway")]))
                return
            await asyncio.sleep(TURN_SECONDS)
            last = time.monotonic()
            await updater.requires_input(updater.new_agent_message([Part(text=f"echo: {text}")]))
        finally:
            self.executions.add((context.task_id or "", text, self.replica, start, last or time.monotonic()))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


@contextlib.contextmanager
def stock_replicas(database: str, executions: Executions) -> Iterator[tuple[str, str]]:
    """Two stock SDK servers (DefaultRequestHandler, DatabaseTaskStore) on one database."""
    url = StoreConfig.parse(database).url
    assert url is not None
    with contextlib.ExitStack() as stack:
        bases = []
        for replica in ("A", "B"):
            engine = create_async_engine(url)
            handler = DefaultRequestHandler(StockTurns(replica, executions), DatabaseTaskStore(engine), stock_card("turns"))
            app = Starlette(routes=create_jsonrpc_routes(handler, "/a2a/jsonrpc"))
            bases.append(stack.enter_context(serve_in_thread(app, must_stop=False)))
        yield bases[0], bases[1]


class StockDefect(AssertionError):
    """The correct behaviour did not happen."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise StockDefect(what)


def start_task(base: str, text: str) -> str:
    reply = rpc(base, "SendMessage", {"message": user_message(text, str(uuid.uuid4())), "configuration": {"returnImmediately": True}})
    return reply["result"]["task"]["id"]


def state_of(base: str, task_id: str) -> str:
    return rpc(base, "GetTask", {"id": task_id, "historyLength": 0})["result"]["status"]["state"]


def follow_up_is_queued(a: str, b: str, executions: Executions) -> None:
    """On A a turn runs; a follow-up sent to B waits for it, runs after it, and answers for its own turn."""
    for round_number in range(REPETITIONS):
        task_id = start_task(a, f"first {round_number}")
        wait_for(lambda: executions.of(task_id) or state_of(a, task_id) == "TASK_STATE_WORKING", what="turn on A")
        reply = rpc(b, "SendMessage", {"message": user_message(f"second {round_number}", str(uuid.uuid4()), taskId=task_id)})
        check("result" in reply, f"round {round_number}: the follow-up was refused: {reply.get('error')}")
        status = reply["result"]["task"]["status"]
        check(status["state"] == "TASK_STATE_INPUT_REQUIRED", f"round {round_number}: state {status['state']}")
        text = status["message"]["parts"][0]["text"]
        check(text == f"echo: second {round_number}", f"round {round_number}: the follow-up got {text!r}")
        spans = wait_for(lambda: len(executions.of(task_id)) == 2 and executions.of(task_id), what="two executions")
        (_, first, _, _, first_end), (_, second, _, second_start, _) = spans
        check(first == f"first {round_number}" and second == f"second {round_number}", f"round {round_number}: order {spans}")
        check(second_start >= first_end, f"round {round_number}: the two turns ran at once: {spans}")


def cancel_is_never_overwritten(a: str, b: str, executions: Executions) -> None:
    """On A a turn ignores cancels and reports COMPLETED late; a cancel sent to B ends the task CANCELED for good."""
    for round_number in range(REPETITIONS):
        task_id = start_task(a, "stubborn")
        wait_for(lambda: state_of(a, task_id) == "TASK_STATE_WORKING", what="turn on A")
        reply = rpc(b, "CancelTask", {"id": task_id})
        check("result" in reply, f"round {round_number}: cancel refused: {reply.get('error')}")
        check(reply["result"]["status"]["state"] == "TASK_STATE_CANCELED", f"round {round_number}: cancel answered {reply['result']['status']['state']}")
        wait_for(lambda: executions.of(task_id), timeout=10, what="the stubborn turn to end")
        for base in (a, b):
            final = state_of(base, task_id)
            check(final == "TASK_STATE_CANCELED", f"round {round_number}: the late COMPLETED overwrote the cancel: {final}")


@pytest.mark.parametrize("scenario", [follow_up_is_queued, cancel_is_never_overwritten], ids=["follow-up", "cancel"])
def test_bridge_replicas(pg_database: str, scenario: object) -> None:
    executions = Executions()
    with bridge_replicas(pg_database, executions) as (a, b):
        scenario(a, b, executions)  # type: ignore[operator]


@pytest.mark.stock_sdk
@pytest.mark.xfail(strict=True, raises=StockDefect, reason="SDK defect 3: replicas run one task at once and overwrite a cancel")
@pytest.mark.parametrize("scenario", [follow_up_is_queued, cancel_is_never_overwritten], ids=["follow-up", "cancel"])
def test_stock_sdk_replicas(pg_database: str, scenario: object) -> None:
    executions = Executions()
    with stock_replicas(pg_database, executions) as (a, b):
        scenario(a, b, executions)  # type: ignore[operator]


def test_get_and_subscribe_from_the_other_replica(pg_database: str) -> None:
    """A turn running on A is visible through GetTask on B, and SubscribeToTask on B streams it to its end."""
    executions = Executions()
    with bridge_replicas(pg_database, executions) as (a, b):
        task_id = start_task(a, "watched")
        wait_for(lambda: state_of(b, task_id) == "TASK_STATE_WORKING", what="B to see A's turn")
        frames = rpc_stream(b, "SubscribeToTask", {"id": task_id})
        results = [frame["result"] for frame in frames]
        assert results[0]["task"]["id"] == task_id
        last = results[-1]["statusUpdate"]["status"]
        assert last["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert last["message"]["parts"][0]["text"] == "echo: watched"
        wait_for(lambda: executions.of(task_id), what="A's executor to return after its last event")
        assert [span[2] for span in executions.of(task_id)] == ["A"]
