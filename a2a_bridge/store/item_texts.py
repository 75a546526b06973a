"""The JSON text of a task's history messages and artifacts, kept by content: each save of a task writes its whole
history and all its artifacts again (a SendMessage's three saves convert its message three times and its artifact
twice), so the text of an item already written is reused instead of converted and encoded anew."""

from collections.abc import Iterable

from google.protobuf.message import Message

from a2a_bridge.store.column_json import JsonText, column_json
from a2a_bridge.store.proto_json import to_dict, to_plain_dict

KEPT = 256
"""Texts kept per kind of item (the oldest written first forgotten): enough for the items of the tasks being saved at
once (a few each)."""
KEPT_BYTES = 2048
"""Items larger than this (protobuf bytes) are converted each time, never kept: the texts kept stay small."""


class ItemTexts:
    """The texts of one kind of item (history messages, or artifacts), by the item's deterministic protobuf bytes: equal
    bytes are equal fields, so the same `to_dict` and the same text. Only plain items are kept (`to_plain_dict`: no
    map, whose keys a copy may order otherwise, and no float)."""

    def __init__(self, kept: int = KEPT) -> None:
        self._texts: dict[bytes, str] = {}
        self._kept = kept

    def array(self, items: Iterable[Message]) -> JsonText:
        """The JSON array of the items, each item's text written (or reused) as it comes."""
        return JsonText("[" + ",".join(self.text(item) for item in items) + "]")

    def text(self, item: Message) -> str:
        """`column_json(to_dict(item))`, reused where an item of the same content was written before."""
        if item.ByteSize() > KEPT_BYTES:
            return column_json(to_dict(item))
        key = item.SerializeToString(deterministic=True)
        text = self._texts.get(key)
        if text is None:
            value, plain = to_plain_dict(item)
            text = column_json(value)
            if plain:
                if len(self._texts) >= self._kept:
                    del self._texts[next(iter(self._texts))]
                self._texts[key] = text
        return text
