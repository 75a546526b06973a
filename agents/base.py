"""What the sample agents share: emitting statuses and artifacts, pacing, and the cancel report."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.struct_pb2 import Value
from google.protobuf.json_format import ParseDict

from a2a_bridge.core.ids import ordered_id
from a2a_bridge.tasks.live_tasks import canceled_text

Pause = Callable[[float], Awaitable[None]]


def data_part(data: dict[str, Any]) -> Part:
    value = Value()
    ParseDict(data, value)
    return Part(data=value, media_type="application/json")


def user_texts(task: Task | None, current: Message | None) -> list[str]:
    """Every text the user sent on this task, oldest first, ending with the current message."""
    texts = []
    if task is not None:
        texts = [p.text for m in task.history if m.role == Role.ROLE_USER for p in m.parts if p.text]
    if current is not None:
        texts += [p.text for p in current.parts if p.text and (task is None or current.message_id not in
                  {m.message_id for m in task.history})]
    return texts


class Emitter:
    """Writes one turn's events for a task."""

    def __init__(self, queue: EventQueue, context: RequestContext, new_id: Callable[[], str]) -> None:
        self.queue = queue
        self.task_id = context.task_id or ""
        self.context_id = context.context_id or ""
        self.new_id = new_id

    def agent_message(self, text: str) -> Message:
        return Message(
            message_id=self.new_id(),
            role=Role.ROLE_AGENT,
            task_id=self.task_id,
            context_id=self.context_id,
            parts=[Part(text=text)],
        )

    async def status(self, state: "TaskState.ValueType", text: str | None = None, metadata: dict[str, Any] | None = None) -> None:
        status = TaskStatus(state=state)
        if text is not None:
            status.message.CopyFrom(self.agent_message(text))
            if metadata:
                status.message.metadata.update(metadata)
        await self.queue.enqueue_event(
            TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id, status=status)
        )

    async def artifact(
        self,
        artifact_id: str,
        parts: list[Part],
        name: str | None = None,
        append: bool = False,
        last_chunk: bool = False,
    ) -> None:
        artifact = Artifact(artifact_id=artifact_id, parts=parts)
        if name:
            artifact.name = name
        await self.queue.enqueue_event(
            TaskArtifactUpdateEvent(
                task_id=self.task_id,
                context_id=self.context_id,
                artifact=artifact,
                append=append,
                last_chunk=last_chunk,
            )
        )


class KitAgent(AgentExecutor):
    """A sample agent: its pace between steps is injectable so tests and capture can control it."""

    def __init__(self, pace: float = 0.25, pause: Pause = asyncio.sleep, new_id: Callable[[], str] | None = None) -> None:
        self.pace = pace
        self.pause = pause
        self.new_id = new_id or ordered_id

    def emitter(self, queue: EventQueue, context: RequestContext) -> Emitter:
        return Emitter(queue, context, self.new_id)

    async def step(self, factor: float = 1.0) -> None:
        """Wait one step of the agent's pace."""
        if self.pace > 0:
            await self.pause(self.pace * factor)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await self.emitter(event_queue, context).status(TaskState.TASK_STATE_CANCELED, canceled_text(context.call_context))
