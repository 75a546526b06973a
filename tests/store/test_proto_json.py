"""proto_json.to_dict writes exactly what json_format.MessageToDict writes, and from_dict parses as ParseDict does, for generated A2A tasks, messages and
stream responses (hypothesis), and falls back to it where it does not convert a field itself."""

import json
from typing import Any

import pytest

from a2a.types import (
    AgentCard,
    Artifact,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SendMessageResponse,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given, settings
from hypothesis import strategies as st

from a2a_bridge.http.json_bodies import plain
from a2a_bridge.store.proto_json import from_dict, timestamp_text, to_dict, to_plain_dict

text = st.text(max_size=12)
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
metadata = st.dictionaries(text, json_values, max_size=3)


def struct(values: dict[str, Any]) -> Struct:
    out = Struct()
    out.update(values)
    return out


@st.composite
def parts(draw: st.DrawFn) -> Part:
    part = Part(filename=draw(text), media_type=draw(text))
    kind = draw(st.sampled_from(["text", "data", "raw", "url"]))
    if kind == "text":
        part.text = draw(text)
    elif kind == "data":
        part.data.CopyFrom(ParseDict(draw(json_values), part.data))
    elif kind == "raw":
        part.raw = draw(st.binary(max_size=16))
    else:
        part.url = draw(text)
    if draw(st.booleans()):
        part.metadata.CopyFrom(struct(draw(metadata)))
    return part


@st.composite
def messages(draw: st.DrawFn) -> Message:
    return Message(
        message_id=draw(text), context_id=draw(text), task_id=draw(text),
        role=draw(st.sampled_from([Role.ROLE_USER, Role.ROLE_AGENT, Role.ROLE_UNSPECIFIED, 7])),
        parts=draw(st.lists(parts(), max_size=3)), metadata=struct(draw(metadata)),
        extensions=draw(st.lists(text, max_size=2)), reference_task_ids=draw(st.lists(text, max_size=2)),
    )


@st.composite
def tasks(draw: st.DrawFn) -> Task:
    status = TaskStatus(state=draw(st.sampled_from([*TaskState.values(), 42])))
    if draw(st.booleans()):
        status.message.CopyFrom(draw(messages()))
    if draw(st.booleans()):
        status.timestamp.FromNanoseconds(draw(st.integers(0, 4_000_000_000 * 10**9)))
    artifacts = [
        Artifact(artifact_id=draw(text), name=draw(text), description=draw(text), parts=draw(st.lists(parts(), max_size=2)),
                 metadata=struct(draw(metadata)), extensions=draw(st.lists(text, max_size=2)))
        for _ in range(draw(st.integers(0, 2)))
    ]
    return Task(id=draw(text), context_id=draw(text), status=status, artifacts=artifacts,
                history=draw(st.lists(messages(), max_size=3)), metadata=struct(draw(metadata)))


@settings(max_examples=300, deadline=None)
@given(tasks())
def test_tasks_and_send_message_responses_are_written_as_message_to_dict_writes_them(task: Task) -> None:
    assert to_dict(task) == MessageToDict(task)
    assert to_dict(SendMessageResponse(task=task)) == MessageToDict(SendMessageResponse(task=task))


def without_structs(task: Task) -> Task:
    """The task with no Struct or Value anywhere: metadata cleared, data parts dropped."""
    stripped = Task()
    stripped.CopyFrom(task)
    stripped.ClearField("metadata")
    holders = [*stripped.history, *stripped.artifacts]
    if stripped.status.HasField("message"):
        holders.append(stripped.status.message)
    for holder in holders:
        holder.ClearField("metadata")
        kept = [part for part in holder.parts if part.WhichOneof("content") != "data"]
        del holder.parts[:]
        holder.parts.extend(kept)
        for part in holder.parts:
            part.ClearField("metadata")
    return stripped


@settings(max_examples=300, deadline=None)
@given(tasks())
def test_a_plain_dict_is_the_dict_of_the_task_copied_into_a_response_with_no_float(task: Task) -> None:
    """`to_plain_dict` says plain only when the task's dict, put in {"task": ...}, is the dict of the task copied into
    a SendMessageResponse key for key in the same order, and holds no float; a task without Struct is plain."""
    for case in (task, without_structs(task)):
        written, is_plain = to_plain_dict(case)
        assert written == MessageToDict(case)
        if is_plain:
            copied = MessageToDict(SendMessageResponse(task=case))
            assert json.dumps({"task": written}) == json.dumps(copied)
            assert plain(written)
    assert to_plain_dict(without_structs(task))[1]
    if task.HasField("metadata"):
        assert not to_plain_dict(task)[1]


@settings(max_examples=200, deadline=None)
@given(messages(), tasks())
def test_stream_responses_are_written_as_message_to_dict_writes_them(message: Message, task: Task) -> None:
    events = [
        StreamResponse(message=message),
        StreamResponse(status_update=TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)),
        StreamResponse(artifact_update=TaskArtifactUpdateEvent(
            task_id=task.id, artifact=task.artifacts[0] if task.artifacts else Artifact(), append=True, last_chunk=True,
        )),
        SendMessageResponse(message=message),
    ]
    for event in events:
        assert to_dict(event) == MessageToDict(event)


def test_timestamps_are_written_as_to_json_string_writes_them_and_refused_where_it_refuses() -> None:
    seconds = [-62_135_596_800, -86_401, -1, 0, 59, 1_790_000_000, 1_790_000_001, 253_402_300_799]
    nanos = [0, 1_000_000, 120_000_000, 123_000, 7, 999_999_999]
    for second in [*seconds, *reversed(seconds)]:
        for nano in nanos:
            value = Timestamp(seconds=second, nanos=nano)
            assert timestamp_text(value) == value.ToJsonString()
    for second, nano in [(-62_135_596_801, 0), (253_402_300_800, 0), (0, -1), (0, 1_000_000_000)]:
        value = Timestamp(seconds=second, nanos=nano)
        with pytest.raises(ValueError) as ours:
            timestamp_text(value)
        with pytest.raises(ValueError) as theirs:
            value.ToJsonString()
        assert str(ours.value) == str(theirs.value)


def test_a_field_it_does_not_convert_falls_back_to_message_to_dict() -> None:
    card = AgentCard(name="x")
    card.skills.add(id="s", name="s")
    card.security_schemes["bearer"].http_auth_security_scheme.scheme = "bearer"
    assert to_dict(card) == MessageToDict(card)
    assert "securitySchemes" in to_dict(card)


plain_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**33), 2**33) | text
    | st.sampled_from(["ROLE_USER", "ROLE_AGENT", "TASK_STATE_WORKING", "2026-11-30T02:00:00Z"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["messageId", "message_id", "role", "parts", "text", "data", "url", "metadata", "contextId",
                         "taskId", "extensions", "configuration", "historyLength", "returnImmediately", "tenant",
                         "acceptedOutputModes", "mediaType", "filename", "referenceTaskIds", "unknown", "id"]),
        inner, max_size=4,
    ),
    max_leaves=12,
)


def parsed(value: Any, message: ProtoMessage) -> tuple[str, Any]:
    """What a parse gives: the message, or the kind of error."""
    try:
        return "ok", from_dict(value, message)
    except Exception as error:  # noqa: BLE001 - the error kind is what is compared
        return "error", type(error).__name__


def sdk_parsed(value: Any, message: ProtoMessage) -> tuple[str, Any]:
    try:
        return "ok", ParseDict(value, message, ignore_unknown_fields=True)
    except Exception as error:  # noqa: BLE001 - the error kind is what is compared
        return "error", type(error).__name__


@settings(max_examples=500, deadline=None)
@given(plain_json, messages())
def test_params_parse_as_parse_dict_parses_them(params: Any, message: Message) -> None:
    """Random JSON and real messages (as the SDK writes them) parse to the same message, or the same kind of error."""
    for value in ({"message": params}, params, {"message": MessageToDict(message), "configuration": params}):
        assert parsed(value, SendMessageRequest()) == sdk_parsed(value, SendMessageRequest())
    assert from_dict({"message": MessageToDict(message)}, SendMessageRequest()).message == message
