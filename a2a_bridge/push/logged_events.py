"""The event log's bodies as the outbox reads them: each event of a task with push configs is logged as its
StreamResponse's JSON (what its webhooks carry, as stored), and what a logged event is to a delivery (a message, not
sent; an update; the update that ends the task, after which its deliveries are done)."""

from typing import Any

import orjson
from a2a.types import Message, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

from a2a_bridge.core.states import is_terminal
from a2a_bridge.store.proto_json import to_dict

STREAM_FIELDS = {
    TaskStatusUpdateEvent: "statusUpdate", TaskArtifactUpdateEvent: "artifactUpdate", Message: "message", Task: "task",
}
"""The member of a StreamResponse's JSON that holds each kind of event."""


def logged_body(event: Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent) -> str:
    """An event as the event log holds it and its webhooks carry it: its StreamResponse's JSON, written without the
    StreamResponse (a copy of the event)."""
    return orjson.dumps({STREAM_FIELDS[type(event)]: to_dict(event)}).decode()


def ends_task(event: dict[str, Any]) -> bool:
    """Whether a logged event (a StreamResponse) is its task's terminal status."""
    state = event.get("statusUpdate", {}).get("status", {}).get("state")
    return isinstance(state, str) and is_terminal(state)


MESSAGE, UPDATE, END = "message", "update", "end"
"""What a logged event is to its deliveries: a message (not sent), an update, or the update that ends its task."""


def event_kind(body: str) -> str:
    """What a logged event (a StreamResponse's JSON) is to its deliveries; an artifact update, the one kind that
    grows large, is known by its only member's name, unread (a StreamResponse holds one of its kinds)."""
    if body.startswith('{"artifactUpdate":'):
        return UPDATE
    event = orjson.loads(body)
    if "message" in event:
        return MESSAGE
    return END if ends_task(event) else UPDATE
