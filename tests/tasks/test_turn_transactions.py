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

import httpx
import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.tasks import TaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Task, TaskState
from sqlalchemy.exc import OperationalError

from a2a_bridge.agents.base import Emitter
from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.claims import Claim
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.ledger import ClaimEvent, Ledger, MemoryLedger, PushAdded, SentMessage, TaskRecord, unpacked
from a2a_bridge.store.stores import StoreConfig, Stores
from a2a_bridge.tasks.host_env import HostSettings
from tests.support import rpc, serve_in_thread, user_message, wait_for

UNSTORABLE = "cannot-be-stored"
"""Text the faulty ledger refuses to store, as a store refuses a value it cannot hold."""


def disk_error() -> OperationalError:
    return OperationalError("INSERT", {}, Exception("disk I/O error"))


class FaultyLedger(MemoryLedger):
    """The memory ledger, with the faults a test turns on: a store that is down, content it cannot hold, and a write
    that lands between a reader's read of a record and its read of the task."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.overtaken: tuple[str, threading.Event] | None = None
        """(task id, gate): the next read of that task's record returns only once the test opens the gate."""
        self.reading = threading.Event()
        """Set when that read has the record and waits."""

    async def get(self, task_id: str) -> TaskRecord | None:
        record = await super().get(task_id)
        if self.overtaken is not None and self.overtaken[0] == task_id:
            gate = self.overtaken[1]
            self.overtaken = None
            self.reading.set()
            await asyncio.to_thread(gate.wait, 10)
        return record

    async def save(
        self, store: TaskStore, task: Task, context: ServerCallContext, record: TaskRecord, events: list[ClaimEvent],
        *, new: bool = False, log: Sequence[tuple[int, str]] = (), pushed: Sequence[PushAdded] = (),
    ) -> None:
        if self.down:
            raise disk_error()
        if any(UNSTORABLE in part.text for message in task.history for part in message.parts):
            raise ValueError("a value the store cannot hold")
        await super().save(store, task, context, record, events, new=new, log=log, pushed=pushed)

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
    bridge: Bridge


@pytest.fixture
def served() -> Iterator[Served]:
    ledger, agent = FaultyLedger(), Parking()
    bridge = Bridge(
        [parking_spec(agent)], FaultyStores(ledger), SystemClock(), lambda: str(uuid.uuid4()),
        settings=HostSettings(store_grace=0.3),
    )
    with serve_in_thread(bridge.app()) as base:
        yield Served(f"{base}/parking", ledger, agent, bridge)
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


def status_view(served: Served, task_id: str) -> tuple[str, int]:
    """The phase and the revision of a task's status view."""
    response = httpx.get(f"{served.url}/tasks/{task_id}/status", timeout=30)
    assert response.status_code == 200, response.text
    status = response.json()["status"]
    return status["phase"], int(status["revision"])


def test_a_status_read_that_a_write_overtakes_shows_one_revision(served: Served) -> None:
    """A status read of a task no turn holds reads its record, then the task: a follow-up's writes landing between the
    two must not show the new task under the old record's revision (a terminal phase at the idle revision, which a
    poll holding that revision's ETag would be told is unchanged)."""
    task_id = parked(served, "overtaken-1")
    idle = status_view(served, task_id)
    assert idle[0] == "idle"
    wait_for(lambda: task_id not in served.bridge.agents["parking"].host.table.live, what="the parked task to be let go")
    gate = threading.Event()
    served.ledger.overtaken = (task_id, gate)
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(status_view, served, task_id)
        assert served.ledger.reading.wait(10), "the status read did not read the stored record"
        done = send(served, "finish", "overtaken-2", task_id)["result"]["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        gate.set()
        seen = reading.result(timeout=30)
    final = status_view(served, task_id)
    assert final[0] == "terminal" and final[1] > idle[1]
    assert seen == final, f"the read showed phase {seen[0]} at revision {seen[1]}; that revision is {idle}"
