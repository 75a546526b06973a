"""JSON response bodies byte for byte as Starlette's `JSONResponse` writes them (compact, UTF-8, no NaN), with its
headers, by orjson where its bytes are the same: content made only of dicts with string keys (orjson refuses other
keys), lists, strings, integers within 64 bits, booleans and null. Floats go to the standard library, as orjson writes
some of them otherwise (1e-07 as 1e-7), and so does anything orjson refuses (a lone surrogate, a larger integer), which
then fails or succeeds as it always did."""

import json
from typing import Any

import orjson

PLAIN = (str, int, bool, type(None))
"""The scalar types whose JSON orjson writes exactly as the standard library does (bool is an int)."""


def plain(content: Any) -> bool:
    """Whether the content holds only dicts, lists and PLAIN scalars (no float). Dict keys are left to orjson, which
    refuses any key that is not a `str` (the standard library writes those then)."""
    stack = [content]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind not in PLAIN:
            return False
    return True


def render(content: Any, known_plain: bool = False) -> bytes:
    """`JSONResponse(content).body`, faster where the content is plain (`known_plain`: the caller knows it is)."""
    if known_plain or plain(content):
        try:
            return orjson.dumps(content)
        except orjson.JSONEncodeError:
            pass
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode("utf-8")


def json_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    """The headers Starlette's `JSONResponse` sends with a body of status 200, in its order, without building the
    response."""
    return [(b"content-length", b"%d" % len(body)), (b"content-type", b"application/json")]
