"""What JSON the stores can hold, checked on every request body before anything runs: I-JSON (RFC 7493), that is
numbers that are finite doubles (no NaN, Infinity or a literal such as 1e400 that overflows), integers within
±(2**53 - 1) (JSON numbers are doubles in protobuf's Struct), strings without lone surrogates; besides, no U+0000
(PostgreSQL cannot hold it) and no nesting deeper than `MAX_DEPTH` (protobuf reads a task back only to 100 levels
of messages). `parse` reads a body once and names the first value that breaks a rule by its JSON path."""

import json
import math
import re
from dataclasses import dataclass
from typing import Any

MAX_SAFE_INTEGER = 2**53 - 1
MAX_DEPTH = 32
"""Arrays and objects nested in one body, the body itself counted: protobuf's JSON parser stops at 100 levels of
messages (a Struct level costs two), and a message is read back inside a task, a stream event or an envelope."""
MAX_KEY_SHOWN = 64
"""Characters of one key shown in a field path."""
NUL = "strings must not contain U+0000 (NUL), which the stores cannot hold"
SURROGATE = "strings must not contain a lone surrogate (\\ud800-\\udfff), which is not Unicode text"
DEEP = f"values may be nested at most {MAX_DEPTH} levels deep"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATES = re.compile("[\ud800-\udfff]")
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


@dataclass(frozen=True)
class Flaw:
    """The first value of a body the stores cannot hold: its JSON path (`message.metadata.x`, `parts[0]`; the
    empty string for the body itself) and why."""

    path: str
    reason: str

    def under(self, prefix: str) -> str | None:
        """The path relative to the top-level member `prefix` (`params`), or None when it lies outside it."""
        if self.path == prefix:
            return ""
        if self.path.startswith(prefix) and self.path[len(prefix)] in ".[":
            return self.path[len(prefix) :].lstrip(".")
        return None


class Unholdable:
    """A number the parser met that no store can hold, kept in place of its value until the body is refused."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Reader:
    """`json.loads` with hooks that mark unholdable numbers, and whether the last body held any."""

    def __init__(self) -> None:
        self.marked = False
        self.decoder = json.JSONDecoder(
            parse_float=self._float, parse_int=self._int, parse_constant=self._constant
        )

    def read(self, text: str) -> tuple[Any, bool]:
        """The parsed value, and whether any number in it was marked."""
        self.marked = False
        return self.decoder.decode(text), self.marked

    def _mark(self, reason: str) -> Unholdable:
        self.marked = True
        return Unholdable(reason)

    def _constant(self, name: str) -> Unholdable:
        return self._mark(f"{name} is not a JSON number; numbers must be finite")

    def _float(self, text: str) -> float | Unholdable:
        value = float(text)
        if math.isinf(value):
            return self._mark("the number overflows a double; numbers must be finite")
        return value

    def _int(self, text: str) -> int | Unholdable:
        digits = len(text) - text.startswith("-")
        if digits > 16 or abs(int(text)) > MAX_SAFE_INTEGER:
            return self._mark(f"integers must lie within ±{MAX_SAFE_INTEGER} (2^53 - 1)")
        return int(text)


_READER = _Reader()


def parse(body: bytes) -> tuple[Any, bool, Flaw | None]:
    """The parsed body (None when it is not JSON the app could read), whether it must be refused as unreadable (not
    strict UTF-8, which json.loads would take as UTF-16 or with encoded surrogates, or nested deeper than Python's
    parser goes), and the first value the stores cannot hold."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None, True, None
    try:
        value, marked = _READER.read(text)
    except RecursionError:
        return None, True, None
    except ValueError:
        return None, False, None
    suspect = (
        marked
        or b"\\u0000" in body
        or _SURROGATE_ESCAPE.search(body) is not None
        or body.count(b"[") + body.count(b"{") > MAX_DEPTH
    )
    return value, False, first_flaw(value) if suspect else None


def first_flaw(value: Any) -> Flaw | None:
    """The first value (in document order) the stores cannot hold; iterative, so any depth the parser took is
    walked."""
    pending: list[tuple[Any, str, int]] = [(value, "", 1)]
    while pending:
        item, path, depth = pending.pop()
        if isinstance(item, Unholdable):
            return Flaw(path, item.reason)
        if isinstance(item, str):
            reason = _string_flaw(item)
            if reason is not None:
                return Flaw(path, reason)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_DEPTH:
            return Flaw(path, DEEP)
        if isinstance(item, list):
            pending.extend((member, f"{path}[{index}]", depth + 1) for index, member in reversed(list(enumerate(item))))
            continue
        children: list[tuple[Any, str, int]] = []
        for key, member in item.items():
            child = f"{path}.{shown(key)}" if path else shown(key)
            children += [(key, child, depth + 1), (member, child, depth + 1)]
        pending.extend(reversed(children))
    return None


def _string_flaw(text: str) -> str | None:
    if "\x00" in text:
        return NUL
    if _SURROGATES.search(text) is not None:
        return SURROGATE
    return None


def shown(key: str) -> str:
    """A key as a field path shows it: control characters and surrogates escaped, at most MAX_KEY_SHOWN
    characters."""
    escaped = _UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", key)
    return escaped if len(escaped) <= MAX_KEY_SHOWN else escaped[:MAX_KEY_SHOWN] + "…"
