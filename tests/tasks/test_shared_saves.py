"""Events an agent sends back to back share one save on a shared PostgreSQL database as on a single server's store:
the artifacts of a turn and the status that ends it are one save, logged as one row of the event log, each event
under the revision it produced; the new task is still stored before the agent goes past its first event there, so
that a message sent to two replicas runs once (tests/tasks/test_replica_races.py)."""

import asyncio
import uuid

import asyncpg
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from a2a.types.a2a_pb2 import TASK_STATE_COMPLETED, TASK_STATE_SUBMITTED

from a2a_bridge.app import AgentSpec, Bridge
from a2a_bridge.core.clock import SystemClock
from a2a_bridge.store.event_rows import row_events
from a2a_bridge.store.stores import StoreConfig, Stores
from tests.support import rpc, serve_in_thread, user_message

ARTIFACTS = 3


class BackToBack(AgentExecutor):
    """Its task, then ARTIFACTS artifacts and COMPLETED with no wait between them."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        assert context.message is not None
        task = Task(id=task_id, context_id=context_id)
        task.status.state = TASK_STATE_SUBMITTED
        task.history.append(context.message)
        await event_queue.enqueue_event(task)
        for index in range(ARTIFACTS):
            event = TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id, last_chunk=True)
            event.artifact.artifact_id = f"part-{index}"
            event.artifact.parts.add(text=f"line {index}")
            await event_queue.enqueue_event(event)
        end = TaskStatusUpdateEvent(task_id=task_id, context_id=context_id)
        end.status.state = TASK_STATE_COMPLETED
        await event_queue.enqueue_event(end)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def card() -> AgentCard:
    return AgentCard(
        name="burst", description="Sends its events back to back.", version="1.0.0",
        capabilities=AgentCapabilities(streaming=True), default_input_modes=["text/plain"],
        default_output_modes=["text/plain"], skills=[AgentSkill(id="burst", name="Burst", description="Burst.", tags=["test"])],
    )


async def logged(url: str, task_id: str) -> list[tuple[int, str]]:
    """The event-log rows of a task, (seq, body) in order."""
    connection = await asyncpg.connect(url.replace("+asyncpg", ""))
    try:
        rows = await connection.fetch("SELECT seq, body FROM bridge_events WHERE task_id = $1 ORDER BY seq", task_id)
    finally:
        await connection.close()
    return [(row["seq"], row["body"]) for row in rows]


def test_a_turns_back_to_back_events_share_one_save_on_a_shared_database(pg_database: str) -> None:
    bridge = Bridge([AgentSpec("burst", card(), BackToBack())], Stores(StoreConfig.parse(pg_database)), SystemClock(),
                    lambda: str(uuid.uuid4()))
    with serve_in_thread(bridge.app()) as base:
        answer = rpc(f"{base}/burst", "SendMessage", {"message": user_message("go", message_id=str(uuid.uuid4()))})
        task = answer["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert [artifact["artifactId"] for artifact in task["artifacts"]] == [f"part-{i}" for i in range(ARTIFACTS)]
        status = rpc(f"{base}/burst", "GetTask", {"id": task["id"]})["result"]
        assert status["status"]["state"] == "TASK_STATE_COMPLETED"
    rows = asyncio.run(logged(pg_database, task["id"]))
    assert len(rows) == 1, f"one save for the artifacts and the end, not {len(rows)}: {[seq for seq, _ in rows]}"
    events = row_events(*rows[0])
    assert [revision for revision, _ in events] == list(range(2, ARTIFACTS + 3))
    assert [body.split('"', 2)[1] for _, body in events] == ["artifactUpdate"] * ARTIFACTS + ["statusUpdate"]
