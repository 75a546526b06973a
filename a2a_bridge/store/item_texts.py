"""The JSON text of a task's history messages, artifacts and status, kept by content: each save of a task writes its
whole history and all its artifacts again (a SendMessage's three saves convert its message three times and its
artifact twice), and a save of a task with push configs logs its artifacts and status updates before its row holds
them (`push/logged_events`), so the text of an item already written is reused instead of converted and encoded anew."""

from collections.abc import Iterable
from typing import Any

import orjson
from a2a.types import Task
from google.protobuf.message import Message

from a2a_bridge.store.column_json import JsonText, column_json
from a2a_bridge.store.proto_json import to_dict, to_plain_dict

KEPT = 256
"""Texts kept per kind of item (the oldest written first forgotten): enough for the items of the tasks being saved at
once (a few each)."""
KEPT_BYTES = 2048
"""Items larger than this (protobuf bytes) are converted each time, never kept: the texts kept stay small."""


class ItemTexts:
    """The texts of one kind of item (history messages, or artifacts), by the item's protobuf bytes: equal bytes are
    equal fields, so the same `to_dict` and the same text. Only plain items are kept (`to_plain_dict`: no map, whose
    entries neither serialize nor convert in a set order, and no float)."""

    def __init__(self, kept: int = KEPT) -> None:
        self._texts: dict[bytes, str] = {}
        self._kept = kept

    def holds(self) -> bool:
        """Whether any text is kept."""
        return bool(self._texts)

    def array(self, items: Iterable[Message]) -> JsonText:
        """The JSON array of the items, each item's text written (or reused) as it comes."""
        return JsonText("[" + ",".join(self.text(item) for item in items) + "]")

    def text(self, item: Message) -> str:
        """`column_json(to_dict(item))`, reused where an item of the same content was written before."""
        if item.ByteSize() > KEPT_BYTES:
            return column_json(to_dict(item))
        key = item.SerializeToString()
        text = self._texts.get(key)
        if text is None:
            value, plain = to_plain_dict(item)
            text = column_json(value)
            if plain:
                if len(self._texts) >= self._kept:
                    del self._texts[next(iter(self._texts))]
                self._texts[key] = text
        return text

    def kept(self, item: Message) -> str | None:
        """The text kept of an item of this content, if any (none is made; no key while none is kept)."""
        if not self._texts or item.ByteSize() > KEPT_BYTES:
            return None
        return self._texts.get(item.SerializeToString())


class LastText:
    """The text of the last item written, by its protobuf bytes: a status, logged with its update event, then written in
    its task's row by the same save (a status carries its timestamp: no other save writes the same)."""

    def __init__(self) -> None:
        self._key = b""
        self._text = ""

    def text(self, item: Message) -> str:
        """`column_json(to_dict(item))`, kept for `known` (a plain item's)."""
        key = item.SerializeToString()
        if key == self._key and self._text:
            return self._text
        value, plain = to_plain_dict(item)
        text = column_json(value)
        self._key, self._text = (key, text) if plain else (b"", "")
        return text

    def known(self, item: Message) -> str | None:
        """The text kept, if the item has the last item's content (no key is made while none is kept)."""
        if not self._text or item.SerializeToString() != self._key:
            return None
        return self._text


class TaskTexts:
    """The texts kept of the items a task's row and its logged events hold: artifacts and history messages by content,
    and the last status logged, which the row of the same save reuses (`known`)."""

    def __init__(self) -> None:
        self.artifacts = ItemTexts()
        self.history = ItemTexts()
        self.status = LastText()


def fragment(text: str) -> orjson.Fragment | None:
    """A kept text as orjson writes it within a larger document: the text itself, unless it holds a null (then it is
    `json.dumps`'s, spaced otherwise: `column_json`), when None says to convert the item instead."""
    return orjson.Fragment(text) if text.find("null") == -1 else None


def task_dict(task: Task, texts: TaskTexts) -> tuple[dict[str, Any], bool]:
    """`to_plain_dict(task)`, each artifact and history message whose text `texts` keep written as that text
    (`fragment`: orjson writes a kept text without a null as it writes the item's dict), so that a task just saved is
    answered without converting the items its row wrote. A task with a field other than its ids, status,
    artifacts and history (its metadata), or a status that is not plain, is converted whole."""
    if not texts.artifacts.holds() and not texts.history.holds():
        return to_plain_dict(task)
    out: dict[str, Any] = {}
    for field, value in task.ListFields():
        name = field.name
        if name == "artifacts" or name == "history":
            kept = texts.artifacts if name == "artifacts" else texts.history
            items: list[Any] = []
            for item in value[:]:
                text = kept.kept(item)
                piece = fragment(text) if text is not None else None
                if piece is not None:
                    items.append(piece)
                    continue
                written, plain = to_plain_dict(item)
                if not plain:
                    return to_plain_dict(task)
                items.append(written)
            out[field.json_name] = items
        elif name == "status":
            written, plain = to_plain_dict(value)
            if not plain:
                return to_plain_dict(task)
            out[field.json_name] = written
        elif name == "id" or name == "context_id":
            out[field.json_name] = value
        else:
            return to_plain_dict(task)
    return out, True


TEXTS = TaskTexts()
"""The process's texts, shared by every ledger's task rows and by the event log's bodies: an item's text depends on its
content alone, so a text written for either serves both (an artifact logged, then saved in its task's row)."""
