"""The event log's bodies as the outbox reads them: each event of a task with push configs is logged as its
StreamResponse's JSON (what its webhooks carry, as stored), and what a logged event is to a delivery (a message, not
sent; an update; the update that ends the task, after which its deliveries are done)."""

from collections.abc import Callable
from typing import Any

import orjson
from a2a.types import Message, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from google.protobuf.descriptor import FieldDescriptor

from a2a_bridge.core.states import is_terminal
from a2a_bridge.store.item_texts import TEXTS, fragment
from a2a_bridge.store.proto_json import to_dict

STREAM_FIELDS = {
    TaskStatusUpdateEvent: "statusUpdate", TaskArtifactUpdateEvent: "artifactUpdate", Message: "message", Task: "task",
}
"""The member of a StreamResponse's JSON that holds each kind of event."""


SCALARS = frozenset({FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BOOL})
"""The kinds of field `to_dict` writes as their value (an update's ids and flags)."""
ITEM, SCALAR, OTHER = range(3)
_PLAN: dict[FieldDescriptor, tuple[str, int]] = {}
"""Per field of an update: its JSON name, and whether it is the update's item (its artifact or status), a single
string or flag, or anything else (its metadata); made on first use."""


def logged_body(event: Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent) -> str:
    """An event as the event log holds it and its webhooks carry it: its StreamResponse's JSON, written without the
    StreamResponse (a copy of the event). An update's artifact or status is written as its kept text
    (`item_texts.TEXTS`), which its task's row reuses in the same save (or which an earlier save wrote)."""
    fields = None
    if isinstance(event, TaskArtifactUpdateEvent):
        fields = update_fields(event, TEXTS.artifacts.text)
    elif isinstance(event, TaskStatusUpdateEvent):
        fields = update_fields(event, TEXTS.status.text)
    return orjson.dumps({STREAM_FIELDS[type(event)]: to_dict(event) if fields is None else fields}).decode()


def update_fields(
    event: TaskStatusUpdateEvent | TaskArtifactUpdateEvent, item_text: Callable[[Any], str]
) -> dict[str, Any] | None:
    """`to_dict(event)` with its item as the text `item_text` gives, an `orjson.Fragment` (the bytes orjson writes of
    its `to_dict`, which a kept text with a null is not: `json.dumps`'s); None when the event holds a field other than
    its item, strings and flags (its metadata), for `to_dict` to convert whole."""
    fields: dict[str, Any] = {}
    for field, value in event.ListFields():
        name, kind = _PLAN.get(field) or _plan(field)
        if kind == ITEM:
            text = item_text(value)
            written = fragment(text)
            fields[name] = written if written is not None else to_dict(value)
        elif kind == SCALAR:
            fields[name] = value
        else:
            return None
    return fields


def _plan(field: FieldDescriptor) -> tuple[str, int]:
    if field.name in ("artifact", "status"):
        kind = ITEM
    elif field.type in SCALARS and not field.is_repeated:
        kind = SCALAR
    else:
        kind = OTHER
    _PLAN[field] = (field.json_name, kind)
    return _PLAN[field]


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
