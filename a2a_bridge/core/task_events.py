"""Pure rules for folding an agent's events into a Task, as the kit's server does."""

from datetime import UTC, datetime
from typing import TypeAlias

from a2a.types import (
    Message,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.types.a2a_pb2 import TASK_STATE_SUBMITTED, TASK_STATE_WORKING

from google.protobuf.timestamp_pb2 import Timestamp

from a2a_bridge.core.states import is_terminal

Event: TypeAlias = Message | Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def stamp(timestamp: Timestamp, now: datetime) -> None:
    """`timestamp.FromDatetime(now)` (a naive time taken as UTC) without its detour through a time tuple."""
    since = (now if now.tzinfo is not None else now.replace(tzinfo=UTC)) - EPOCH
    timestamp.seconds = since.days * 86_400 + since.seconds
    timestamp.nanos = since.microseconds * 1_000


def new_task(task_id: str, context_id: str, message: Message, now: datetime) -> Task:
    """A SUBMITTED task whose history holds the message that created it."""
    task = Task(id=task_id, context_id=context_id)
    task.status.state = TASK_STATE_SUBMITTED
    stamp(task.status.timestamp, now)
    entry = task.history.add()
    entry.CopyFrom(message)
    entry.task_id = task_id
    entry.context_id = context_id
    return task


def set_status(task: Task, status: TaskStatus, now: datetime) -> None:
    """Replace the status; the message of the status it replaces moves into history."""
    if task.status.HasField("message"):
        task.history.append(task.status.message)
    task.status.CopyFrom(status)
    if not task.status.HasField("timestamp"):
        stamp(task.status.timestamp, now)
    if task.status.HasField("message"):
        task.status.message.task_id = task.id
        task.status.message.context_id = task.context_id


def add_user_input(task: Task, message: Message, now: datetime) -> None:
    """Record a follow-up message and mark the task WORKING before the agent resumes."""
    if task.status.HasField("message"):
        task.history.append(task.status.message)
        task.status.ClearField("message")
    entry = task.history.add()
    entry.CopyFrom(message)
    entry.task_id = task.id
    entry.context_id = task.context_id
    task.status.state = TASK_STATE_WORKING
    stamp(task.status.timestamp, now)


def append_artifact(task: Task, event: TaskArtifactUpdateEvent) -> None:
    """Add an artifact, replace it, or append its parts; `append` to an unknown id starts it."""
    incoming = event.artifact
    for existing in task.artifacts[:]:
        if existing.artifact_id == incoming.artifact_id:
            if event.append:
                existing.parts.extend(incoming.parts[:])
                existing.metadata.update(incoming.metadata)
            else:
                existing.CopyFrom(incoming)
            return
    task.artifacts.append(incoming)


def apply_event(task: Task, event: Event, now: datetime) -> bool:
    """Fold one event into the task; False when the event cannot apply (the task has ended)."""
    if is_terminal(task.status.state):
        return False
    if isinstance(event, TaskStatusUpdateEvent):
        set_status(task, event.status, now)
    elif isinstance(event, TaskArtifactUpdateEvent):
        append_artifact(task, event)
    elif isinstance(event, Message):
        entry = task.history.add()
        entry.CopyFrom(event)
        entry.task_id = task.id
        entry.context_id = task.context_id
    return True


def stamp_ids(task: Task, event: Event) -> None:
    """Give an agent's event the task and context ids of the task it belongs to."""
    if isinstance(event, TaskStatusUpdateEvent | TaskArtifactUpdateEvent):
        event.task_id = task.id
        event.context_id = task.context_id
        if isinstance(event, TaskStatusUpdateEvent) and event.status.HasField("message"):
            event.status.message.task_id = task.id
            event.status.message.context_id = task.context_id
