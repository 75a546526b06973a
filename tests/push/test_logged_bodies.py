"""push.logged_events: an update's body is built around its artifact's or status's kept text (`item_texts.TEXTS`), and
is byte for byte the StreamResponse JSON orjson writes of the whole event converted, whatever the item holds (a text
`json.dumps` wrote, a map, a float, non-ASCII text, a size past what is kept) and whether its text was kept before; the
task row of the same save takes the status's text as logged."""

import json

import orjson
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
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct, Value

from a2a_bridge.push.logged_events import STREAM_FIELDS, logged_body
from a2a_bridge.store.column_json import JsonText, column_json
from a2a_bridge.store.item_texts import KEPT_BYTES, TEXTS, TaskTexts
from a2a_bridge.store.ledger_tables import task_row
from a2a_bridge.store.proto_json import to_dict

Event = TaskArtifactUpdateEvent | TaskStatusUpdateEvent


def converted(event: Event | Task | Message) -> str:
    """The body as the event log wrote it before its items' texts were reused: the whole event converted."""
    return orjson.dumps({STREAM_FIELDS[type(event)]: to_dict(event)}).decode()


def artifact_update(*parts: Part, **fields: object) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(
        task_id="t-1", context_id="c-1", artifact=Artifact(artifact_id="a-1", parts=list(parts)), **fields  # type: ignore[arg-type]
    )


def status_update(state: TaskState, text: str | None = None) -> TaskStatusUpdateEvent:
    event = TaskStatusUpdateEvent(task_id="t-1", context_id="c-1", status=TaskStatus(state=state))
    event.status.timestamp.FromSeconds(1_790_000_000)
    if text is not None:
        event.status.message.CopyFrom(Message(message_id="m-1", role=Role.ROLE_AGENT, parts=[Part(text=text)]))
    return event


def events() -> list[Event]:
    mapped = Struct()
    mapped.update({"z": "last", "a": 1.5, "n": None})
    event_metadata = artifact_update(Part(text="done"), last_chunk=True)
    event_metadata.metadata.update({"k": "v"})
    status_metadata = status_update(TaskState.TASK_STATE_WORKING)
    status_metadata.metadata.update({"k": "v"})
    mapped_artifact = artifact_update(Part(text="x"))
    mapped_artifact.artifact.metadata.CopyFrom(mapped)
    return [
        artifact_update(Part(text="done"), last_chunk=True),
        artifact_update(Part(text="more"), append=True, last_chunk=False),
        artifact_update(Part(text="null")),
        artifact_update(Part(text="héllo ✓ \u2028 \"quoted\" \\ </script>")),
        artifact_update(Part(data=Value(struct_value=mapped))),
        mapped_artifact,
        artifact_update(Part(text="x" * (KEPT_BYTES + 10))),
        artifact_update(Part(raw=b"\x00\xff bytes")),
        event_metadata,
        TaskArtifactUpdateEvent(),
        status_update(TaskState.TASK_STATE_COMPLETED),
        status_update(TaskState.TASK_STATE_INPUT_REQUIRED, "What next? null"),
        status_update(TaskState.TASK_STATE_FAILED, "Ünïcode"),
        status_metadata,
        TaskStatusUpdateEvent(task_id="t-1"),
    ]


def test_an_updates_body_is_the_whole_event_converted_byte_for_byte_kept_or_not() -> None:
    for event in events():
        first, again = logged_body(event), logged_body(event)
        assert first == again == converted(event), event
        assert json.loads(first) == MessageToDict(to_stream_response(event))


def test_the_other_events_are_converted_whole() -> None:
    message = Message(message_id="m", role=Role.ROLE_USER, parts=[Part(text="hi")])
    task = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
    for event in (message, task):
        assert logged_body(event) == converted(event)


def test_the_task_row_takes_the_status_text_its_logged_event_was_written_with() -> None:
    texts = TaskTexts()
    done = status_update(TaskState.TASK_STATE_COMPLETED, "all done")
    task = Task(id="t-1", context_id="c-1", status=done.status)
    assert task_row(task, "alice", texts)["status"] == to_dict(task.status)
    texts.status.text(done.status)
    status = task_row(task, "alice", texts)["status"]
    assert isinstance(status, JsonText) and status.text == column_json(to_dict(task.status))
    logged = json.loads(logged_body(done))["statusUpdate"]["status"]
    assert TEXTS.status.known(done.status) == column_json(logged)
    other = status_update(TaskState.TASK_STATE_COMPLETED, "another end")
    assert texts.status.known(other.status) is None
