"""The checks of a sent message and of a requested history length, as `BridgeRequestHandler` makes them: each a
spec-shaped error naming the field (compiled by mypyc, on every SendMessage's path)."""

from typing import TypeAlias

from a2a.types import GetTaskRequest, ListTasksRequest, Part, SendMessageConfiguration, SendMessageRequest
from a2a.types.a2a_pb2 import ROLE_USER

from a2a_bridge.core import errors
from a2a_bridge.core.config import Limits

HistoryParams: TypeAlias = SendMessageConfiguration | GetTaskRequest | ListTasksRequest
"""The requests that carry a historyLength."""
MAX_ID = 255
"""Characters of a messageId or push config id: the stores' columns hold no more."""
MAX_CONTEXT_ID = 36
"""Characters of a contextId a client chooses: the SDK task table's context_id column holds no more."""
DEFAULT_MEDIA_TYPES = {"text": "text/plain", "data": "application/json"}
"""The media type of a part that names none, by its content (anything else is application/octet-stream)."""


def part_media_type(part: Part, kind: str) -> str:
    """The media type a part of this kind of content counts as: text is text/plain and data is application/json unless
    it says otherwise."""
    return part.media_type or DEFAULT_MEDIA_TYPES.get(kind, "application/octet-stream")


def check_message(params: SendMessageRequest, limits: Limits, input_modes: frozenset[str], push: bool) -> None:
    """A sent message the bridge takes: ids within the columns, a user's, with parts of the card's input modes within
    the limits; a push config only where the card offers push (`push`); a history length within the limit."""
    if not params.HasField("message"):
        raise errors.invalid_field("message", "message is required")
    message = params.message
    message_id = message.message_id
    if not message_id:
        raise errors.invalid_field("message.messageId", "messageId is required")
    if len(message_id) > MAX_ID:
        raise errors.invalid_field("message.messageId", f"messageId may have at most {MAX_ID} characters")
    if len(message.context_id) > MAX_CONTEXT_ID:
        raise errors.invalid_field("message.contextId", f"contextId may have at most {MAX_CONTEXT_ID} characters")
    if message.role != ROLE_USER:
        raise errors.invalid_field("message.role", "role must be ROLE_USER")
    parts = message.parts
    if not parts:
        raise errors.invalid_field("message.parts", "parts must hold at least one part")
    if len(parts) > limits.max_parts:
        raise errors.invalid_field("message.parts", f"a message may hold at most {limits.max_parts} parts")
    for index, part in enumerate(parts[:]):
        kind = part.WhichOneof("content")
        if kind is None:
            raise errors.invalid_field(f"message.parts[{index}]", "a part needs text, raw, url or data")
        if kind == "text" and len(part.text.encode("utf-8", "surrogatepass")) > limits.max_text_bytes:
            raise errors.invalid_field(
                f"message.parts[{index}].text", f"a text part may hold at most {limits.max_text_bytes} bytes"
            )
        media_type = part_media_type(part, kind)
        if media_type not in input_modes:
            raise errors.content_type_not_supported(media_type)
    size = message.ByteSize()
    if size > limits.max_message_bytes:
        raise errors.invalid_field(
            "message", f"a message may hold at most {limits.max_message_bytes} bytes (max_message_bytes), "
            f"this one {size}",
        )
    configuration = params.configuration
    wants_push = configuration.HasField("task_push_notification_config")
    if wants_push and not push:
        raise errors.push_not_supported()
    check_history_length(configuration, "configuration.historyLength", limits.max_history)


def check_history_length(params: HistoryParams, name: str, max_history: int) -> None:
    if not params.HasField("history_length"):
        return
    if params.history_length < 0:
        raise errors.invalid_field(name, "historyLength must not be negative")
    if params.history_length > max_history:
        raise errors.invalid_field(name, f"historyLength may be at most {max_history}")


def history_length(params: HistoryParams | None, cap: int) -> int:
    """The most messages of history a reply holds: those asked for, and never more than the history limit (`cap`)."""
    wanted = params.history_length if params is not None and params.HasField("history_length") else None
    return cap if wanted is None else min(wanted, cap)
