"""Transactions in memory: when the store refuses a write (it is down, or the content cannot be stored), the task is
put back as stored or its events are kept until the store is back; the waiting caller always gets an answer; cancel
always works on a task that has not ended. The bridge runs on uvicorn with a ledger whose faults the test turns on."""

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.tasks import TaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Task, TaskState
from sqlalchemy.exc import OperationalError

from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.claims import Claim
from a2a_bridge.clock import SystemClock
from a2a_bridge.host_env import HostSettings
from a2a_bridge.ledger import ClaimEvent, Ledger, MemoryLedger, SentMessage, TaskRecord, unpacked
from a2a_bridge.store import StoreConfig, Stores
from a2a_bridge.agents.base import Emitter
from tests.support import rpc, serve_in_thread, user_message, wait_for

UNSTORABLE = "cannot-be-stored"
"""Text the faulty ledger refuses to store, as a store refuses a value it cannot hold."""


def disk_error() -> OperationalError:
    return OperationalError("INSERT", {}, Exception("disk I/O error"))


class FaultyLedger(MemoryLedger):
    """The memory ledger, with the faults a test turns on: a store that is down, and content it cannot hold."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    async def save(
        self, store: TaskStore, task: Task, context: ServerCallContext, record: TaskRecord, events: list[ClaimEvent],
        *, new: bool = False, log: Sequence[tuple[int, str]] = (),
    ) -> None:
        if self.down:
            raise disk_error()
        if any(UNSTORABLE in part.text for message in task.history for part in message.parts):
            raise ValueError("a value the store cannot hold")
        await super().save(store, task, context, record, events, new=new, log=log)

    async def put(self, record: TaskRecord, events: list[ClaimEvent]) -> None:
        if self.down:
            raise disk_error()
        await super().put(record, events)

    async def put_if(self, record: TaskRecord, expected: Claim, events: list[ClaimEvent]) -> bool:
        if self.down:
            raise disk_error()
        return await super().put_if(record, expected, events)

    async def remember(self, agent: str, owner: str, message_id: str, sent: SentMessage) -> SentMessage | None:
        if self.down:
            raise disk_error()
        return await super().remember(agent, owner, message_id, sent)


class FaultyStores(Stores):
    def __init__(self, ledger: FaultyLedger) -> None:
        super().__init__(StoreConfig.parse("memory"))
        self._ledger = ledger

    def ledger(self, observe_write: Callable[[str, float], None] | None = None) -> Ledger:
        return self._ledger


class Parking(AgentExecutor):
    """Parks a new task in INPUT_REQUIRED; 'finish' completes it; 'slow' works until the test releases it."""

    def __init__(self) -> None:
        self.release = threading.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        out = Emitter(event_queue, context, lambda: str(uuid.uuid4()))
        text = context.get_user_input()
        if "slow" in text:
            await out.status(TaskState.TASK_STATE_WORKING, "Working slowly")
            await asyncio.to_thread(self.release.wait, 30)
            await out.status(TaskState.TASK_STATE_COMPLETED, "Done slowly")
        elif "finish" in text:
            await out.status(TaskState.TASK_STATE_COMPLETED, "Finished")
        else:
            await out.status(TaskState.TASK_STATE_INPUT_REQUIRED, "Say finish")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.release.set()


def parking_spec(agent: Parking) -> AgentSpec:
    card = AgentCard(
        name="parking",
        description="Parks tasks for the store-fault tests; exists only in the tests.",
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="park", name="Park", description="Parks.", tags=["test"])],
    )
    return AgentSpec("parking", card, agent)


@dataclass
class Served:
    url: str
    ledger: FaultyLedger
    agent: Parking


@pytest.fixture
def served() -> Iterator[Served]:
    ledger, agent = FaultyLedger(), Parking()
    bridge = Bridge(
        [parking_spec(agent)], FaultyStores(ledger), SystemClock(), lambda: str(uuid.uuid4()),
        settings=HostSettings(store_grace=0.3),
    )
    with serve_in_thread(bridge.app()) as base:
        yield Served(f"{base}/parking", ledger, agent)
        ledger.down = False
        agent.release.set()


def send(served: Served, text: str, message_id: str, task_id: str | None = None) -> dict[str, Any]:
    message = user_message(text, message_id, **({"taskId": task_id} if task_id else {}))
    return rpc(served.url, "SendMessage", {"message": message})


def get(served: Served, task_id: str) -> dict[str, Any]:
    return rpc(served.url, "GetTask", {"id": task_id})["result"]


def parked(served: Served, message_id: str) -> str:
    task = send(served, "start", message_id)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return str(task["id"])


def test_input_the_store_cannot_hold_is_put_back_and_the_task_goes_on(served: Served) -> None:
    task_id = parked(served, "put-back-1")
    before = get(served, task_id)

    refused = send(served, f"finish {UNSTORABLE}", "put-back-2", task_id)
    assert refused["error"]["code"] == -32602, refused
    assert get(served, task_id) == before, "the task is as it was stored"

    done = send(served, "finish", "put-back-3", task_id)["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["messageId"] for m in done["history"] if m["role"] == "ROLE_USER"] == ["put-back-1", "put-back-3"]


def test_cancel_works_after_input_the_store_refused(served: Served) -> None:
    task_id = parked(served, "cancel-after-1")
    assert send(served, f"more {UNSTORABLE}", "cancel-after-2", task_id)["error"]["code"] == -32602
    canceled = rpc(served.url, "CancelTask", {"id": task_id})
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert get(served, task_id)["status"]["state"] == "TASK_STATE_CANCELED"


def test_a_store_down_mid_turn_answers_the_caller_and_stores_the_turn_when_back(served: Served) -> None:
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(send, served, "slow", "down-1")
        task_id = wait_for(
            lambda: next(iter(served.ledger._records), None), what="the task to be stored"  # noqa: SLF001 - the test's own fake
        )
        wait_for(lambda: get(served, task_id)["status"]["state"] == "TASK_STATE_WORKING", what="the turn to work")
        served.ledger.down = True
        served.agent.release.set()
        answer = waiting.result(30)
    assert answer["error"]["code"] == -32603 and "store unavailable" in answer["error"]["message"], answer
    assert get(served, task_id)["status"]["state"] == "TASK_STATE_WORKING", "GetTask shows what is stored"

    served.ledger.down = False
    wait_for(lambda: get(served, task_id)["status"]["state"] == "TASK_STATE_COMPLETED", what="the kept events to be stored")
    claims = [e["operation"] for e in unpacked(served.ledger._events[task_id])]  # noqa: SLF001 - the test's own fake
    assert claims == ["create", "claim", "complete"], claims


def test_a_cancel_while_the_store_is_down_is_stored_when_it_is_back(served: Served) -> None:
    task_id = parked(served, "cancel-down-1")
    served.ledger.down = True
    refused = rpc(served.url, "CancelTask", {"id": task_id})
    assert refused["error"]["code"] == -32603 and "store unavailable" in refused["error"]["message"], refused
    served.ledger.down = False
    wait_for(lambda: get(served, task_id)["status"]["state"] == "TASK_STATE_CANCELED", what="the cancel to be stored")
    again = rpc(served.url, "CancelTask", {"id": task_id})
    assert again["error"]["code"] == -32002, "a task that has ended is not cancelable"


def test_a_first_message_while_the_store_is_down_is_refused_and_may_be_sent_again(served: Served) -> None:
    served.ledger.down = True
    refused = send(served, "start", "first-down")
    assert refused["error"]["code"] == -32603 and "store unavailable" in refused["error"]["message"], refused
    served.ledger.down = False
    assert send(served, "start", "first-down")["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
