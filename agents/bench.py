"""bench: the trivial agent of `make bench`, the same executor on a2a-bridge and on the stock SDK server.

What it does is named by the user's text:
- anything else: creates its task and completes it with one short text artifact, no pacing;
- `ask`: creates its task and leaves it idle in INPUT_REQUIRED (any follow-up completes it);
- `stream N GAP_MS`: creates its task and emits N artifact events, GAP_MS milliseconds apart (0: back to back), each
  text being `emit=NANOSECONDS seq=I` with the wall-clock time it was emitted at, then completes.

A cancel ends the task CANCELED with the text `stopped=NANOSECONDS`, the wall-clock time the turn had stopped at.
"""

import asyncio
import time
import uuid

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentSkill,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.types.a2a_pb2 import (
    ROLE_AGENT,
    TASK_STATE_CANCELED,
    TASK_STATE_COMPLETED,
    TASK_STATE_INPUT_REQUIRED,
    TASK_STATE_SUBMITTED,
)

RESULT_TEXT = "done"
ASK_TEXT = "What next?"
MAX_STREAM_EVENTS = 100_000


def card() -> AgentCard:
    return AgentCard(
        name="bench",
        description="The trivial agent of the benchmark: completes each task with one short text artifact.",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="bench", name="Benchmark", description="Completes at once.", tags=["bench"])],
    )


def stream_plan(text: str) -> tuple[int, float] | None:
    """(events, seconds between them) of a `stream N GAP_MS` text, or None for any other text."""
    words = text.split()
    if len(words) != 3 or words[0] != "stream":
        return None
    try:
        count, gap_ms = int(words[1]), float(words[2])
    except ValueError:
        return None
    return max(0, min(count, MAX_STREAM_EVENTS)), max(0.0, gap_ms) / 1000


class Bench(AgentExecutor):
    """Enqueues its Task first (the stock handler requires it), then artifacts and a final status. Its events are
    filled in field by field, which protobuf does in about two thirds of the time of nested keyword arguments: the
    benchmark times the server, not the agent."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        if context.current_task is None:
            assert context.message is not None
            task = Task(id=task_id, context_id=context_id)
            task.status.state = TASK_STATE_SUBMITTED
            task.history.append(context.message)
            await event_queue.enqueue_event(task)
            text = context.get_user_input().strip()
            if text == "ask":
                await self._status(event_queue, task_id, context_id, TASK_STATE_INPUT_REQUIRED, ASK_TEXT)
                return
            plan = stream_plan(text)
            if plan is not None:
                await self._stream(event_queue, task_id, context_id, *plan)
                return
        await self._artifact(event_queue, task_id, context_id, "result", RESULT_TEXT)
        await self._status(event_queue, task_id, context_id, TASK_STATE_COMPLETED)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """CANCELED, its message naming when the cancel reached the agent (`stopped=NANOSECONDS`, wall clock): the
        host calls cancel() once the turn it stopped has ended."""
        text = f"stopped={time.time_ns()}"
        await self._status(event_queue, context.task_id or "", context.context_id or "", TASK_STATE_CANCELED, text)

    async def _stream(self, queue: EventQueue, task_id: str, context_id: str, count: int, gap: float) -> None:
        for seq in range(count):
            if gap and seq:
                await asyncio.sleep(gap)
            await self._artifact(queue, task_id, context_id, f"event-{seq}", f"emit={time.time_ns()} seq={seq}")
        await self._status(queue, task_id, context_id, TASK_STATE_COMPLETED)

    @staticmethod
    async def _artifact(queue: EventQueue, task_id: str, context_id: str, artifact_id: str, text: str) -> None:
        event = TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id, last_chunk=True)
        event.artifact.artifact_id = artifact_id
        event.artifact.parts.add(text=text)
        await queue.enqueue_event(event)

    @staticmethod
    async def _status(
        queue: EventQueue, task_id: str, context_id: str, state: TaskState, text: str | None = None
    ) -> None:
        event = TaskStatusUpdateEvent(task_id=task_id, context_id=context_id)
        event.status.state = state
        if text is not None:
            message = event.status.message
            message.message_id, message.role = str(uuid.uuid4()), ROLE_AGENT
            message.task_id, message.context_id = task_id, context_id
            message.parts.add(text=text)
        await queue.enqueue_event(event)
