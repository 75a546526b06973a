"""The text of the JSON columns (SQLite's and PostgreSQL's): orjson's where it writes what `json.dumps` would, and a
value already written as its text (`JsonText`: a task's history and artifacts, `item_texts`) as it is."""

import json
from typing import Any

import orjson

ORJSON_NATIVE_ONLY = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS
"""orjson refuses what the standard library would write differently or refuse (subclasses, datetimes, dataclasses)."""


class JsonText:
    """A JSON column's value already written as its text: `column_json` binds the text as it is."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def column_json(value: Any) -> str:
    """A JSON column's text: orjson's (compact, UTF-8) where it holds the value `json.dumps` holds, else
    `json.dumps`'s (SQLAlchemy's default). orjson writes a non-finite number as null and refuses what it does not
    write natively (integers beyond 64 bits, non-string keys, lone surrogates); output with a null, and what it
    refuses, are written by the standard library, so every value reads back as before. (`find`, not `in`: a bytes
    `in` first tries its operand as an integer, and raises and clears a TypeError for any other.) A `JsonText` is its
    own text."""
    if value is None:
        return "null"
    if isinstance(value, JsonText):
        return value.text
    try:
        text = orjson.dumps(value, option=ORJSON_NATIVE_ONLY)
    except orjson.JSONEncodeError:
        return json.dumps(value)
    return json.dumps(value) if text.find(b"null") != -1 else text.decode()

