"""What JSON the stores can hold, checked on every request body before anything runs: I-JSON (RFC 7493), that is
numbers that are finite doubles (no NaN, Infinity or a literal such as 1e400 that overflows), integers within
±(2**53 - 1) (JSON numbers are doubles in protobuf's Struct), strings without lone surrogates; besides, no U+0000
(PostgreSQL cannot hold it), no object with a key twice (the parsers keep the last; `repeated`), and no nesting
deeper than `MAX_DEPTH` (protobuf reads a task back only to 100 levels of messages). `parse` reads a body once and
names the first value that breaks a rule by its JSON path."""

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

MAX_SAFE_INTEGER = 2**53 - 1
MAX_DEPTH = 32
"""Arrays and objects nested in one body, the body itself counted: protobuf's JSON parser stops at 100 levels of
messages (a Struct level costs two), and a message is read back inside a task, a stream event or an envelope."""
MAX_SEPARATORS = 10_000
"""Commas and colons outside strings in one body (about two per object member, one per array element): a body with
more is refused from its bytes, before a Python object is built (a flat object of 66,000 keys cost the server a
third of a second and 10 MB that it did not give back)."""
MAX_KEY_SHOWN = 64
"""Characters of one key shown in a field path."""
NUL = "strings must not contain U+0000 (NUL), which the stores cannot hold"
SURROGATE = "strings must not contain a lone surrogate (\\ud800-\\udfff), which is not Unicode text"
DEEP = f"values may be nested at most {MAX_DEPTH} levels deep"
CROWDED = f"a body may hold at most {MAX_SEPARATORS} commas and colons outside strings (about 5,000 object members)"
REPEATED = "an object must not hold the same key twice (I-JSON, RFC 7493 section 2.3)"
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
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
    """A number the parser met that no store can hold (NaN, ±Infinity, an integer too long for Python to read), kept
    in place of its value until the body is refused."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


NOT_FINITE = "numbers must be finite: NaN, Infinity and a literal that overflows a double are not JSON numbers"
TOO_LARGE = f"integers must lie within ±{MAX_SAFE_INTEGER} (2^53 - 1)"
_NOT_FINITE = Unholdable(NOT_FINITE)
_TOO_LARGE = Unholdable(TOO_LARGE)
_LONGEST_SAFE = len(str(MAX_SAFE_INTEGER))


class _Reader:
    """json.loads with hooks that mark unholdable numbers in place, and whether the last body held any. The hooks
    cost a call per number only; strings are left to `parse`'s byte checks, which cost next to nothing."""

    def __init__(self) -> None:
        self.marked = False
        self.decoder = json.JSONDecoder(parse_float=self._float, parse_int=self._int, parse_constant=self._constant)

    def read(self, text: str) -> tuple[Any, bool]:
        """The parsed value, and whether any number in it was marked."""
        self.marked = False
        return self.decoder.decode(text), self.marked

    def _constant(self, name: str) -> Unholdable:
        self.marked = True
        return _NOT_FINITE

    def _float(self, text: str) -> float | Unholdable:
        value = float(text)
        if math.isinf(value):
            self.marked = True
            return _NOT_FINITE
        return value

    def _int(self, text: str) -> int | Unholdable:
        if len(text) < _LONGEST_SAFE:
            return int(text)
        if len(text) - text.startswith("-") > _LONGEST_SAFE or abs(int(text)) > MAX_SAFE_INTEGER:
            self.marked = True
            return _TOO_LARGE
        return int(text)


_READER = _Reader()


_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 16
"""Sixteen digits in a row (every digit written as 0): a number orjson may read otherwise than Python's parser (past 64
bits as a float) or that may pass 2^53."""


def parse(body: bytes) -> tuple[Any, bool, Flaw | None]:
    """The parsed body (None when it is not JSON the app could read), whether it must be refused as unreadable (not
    strict UTF-8, which json.loads would take as UTF-16 or with encoded surrogates, or nested deeper than Python's
    parser goes), and the first value the stores cannot hold. orjson reads a body where it reads it as `read` does:
    at most MAX_DEPTH brackets, no sixteen digits in a row, and JSON orjson accepts (strict UTF-8, no NaN, Infinity,
    overflowing literal or lone surrogate); `read` reads every other body."""
    if crowded(body):
        return None, False, Flaw("", CROWDED)
    brackets = body.count(b"[") + body.count(b"{")
    if brackets > MAX_DEPTH or _LONG_NUMBER in body.translate(_AS_ZERO):
        return read(body)
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return read(body)
    return value, False, _flaw(value, body, False, brackets) or repeated(value, body)


def crowded(body: bytes) -> bool:
    """Whether a body holds more than MAX_SEPARATORS commas and colons outside its strings; bytes alone are read,
    and only for a body long enough to hold that many."""
    if len(body) <= MAX_SEPARATORS or body.count(b",") + body.count(b":") <= MAX_SEPARATORS:
        return False
    outside = _STRING.sub(b"", body)
    return outside.count(b",") + outside.count(b":") > MAX_SEPARATORS


def read(body: bytes) -> tuple[Any, bool, Flaw | None]:
    """`parse` by Python's own parser with `_READER`'s hooks, for any body."""
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
    return value, False, _flaw(value, body, marked, body.count(b"[") + body.count(b"{")) or repeated(value, body)


class RepeatedKey:
    """In place of an object that held a key twice, as `repeated` parses a body again to find it."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any] | RepeatedKey:
    """An object's members as a dict, or the first key it holds twice."""
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    seen: set[str] = set()
    for key, _member in pairs:
        if key in seen:
            return RepeatedKey(key)
        seen.add(key)
    return value


_PAIRS = json.JSONDecoder(object_pairs_hook=_pairs)


def repeated(value: Any, body: bytes) -> Flaw | None:
    """The first key an object of the body holds twice, named by its path; None when none does. Cheap for every
    body: each colon of a body is a member's or one inside a string, and so is each colon of the parsed value written
    again by orjson (which writes every colon as itself); a key held twice drops a member, and any colon in its value,
    from the value, so a body without a repeated key has exactly as many colons as the value written again
    (`_written_colons`). Only a body where they differ, or that may write a colon as an escape (`\\u003a`), is parsed
    again, keeping every member, to find the key."""
    colons = body.count(b":")
    if colons == 0:
        return None
    if body.find(b"\\u003") == -1 and colons == _written_colons(value):
        return None
    try:
        again = _PAIRS.decode(body.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return first_flaw(again, strings=False)


def _written_colons(value: Any) -> int:
    """The colons of a parsed value as orjson writes it; -1 for a value it cannot write (an integer past 64 bits, a
    lone surrogate, nesting past its limit), which is then parsed again."""
    try:
        return orjson.dumps(value).count(b":")
    except orjson.JSONEncodeError:
        return -1


def _flaw(value: Any, body: bytes, marked: bool, brackets: int) -> Flaw | None:
    """The first flaw of a parsed body, walked only when it may hold one: a marked number, an escaped U+0000 or
    surrogate, more brackets than MAX_DEPTH. (`find`, not `in`: a bytes `in` first tries its operand as an integer,
    and raises and clears a TypeError for any other.)"""
    surrogate = (body.find(b"\\ud") != -1 or body.find(b"\\uD") != -1) and _SURROGATE_ESCAPE.search(body) is not None
    strings = surrogate or body.find(b"\\u0000") != -1
    if marked or strings or brackets > MAX_DEPTH:
        return first_flaw(value, strings)
    return None


def first_flaw(value: Any, strings: bool = True) -> Flaw | None:
    """The first value (in document order) the stores cannot hold; strings are looked at only when `strings`."""
    found = _find(value, 1, _NOTHING_INSIDE if strings else _NOTHING_INSIDE | {str})
    if found is None:
        return None
    segments, reason = found
    path = ""
    for segment in reversed(segments):
        if isinstance(segment, int):
            path += f"[{segment}]"
        else:
            path += f".{shown(segment)}" if path else shown(segment)
    return Flaw(path, reason)


_NOTHING_INSIDE: frozenset[type] = frozenset({int, float, bool, type(None)})
"""Values that hold nothing to refuse (a number the reader refused is an `Unholdable` in its place)."""


def _find(value: Any, depth: int, skipped: frozenset[type]) -> tuple[list[str | int], str] | None:
    """The path to the first flaw, innermost segment first, and its reason; never deeper than MAX_DEPTH + 1."""
    kind = type(value)
    if kind is str:
        reason = _string_flaw(value)
        return ([], reason) if reason is not None else None
    if kind is Unholdable:
        return [], value.reason
    if kind is RepeatedKey:
        return [value.key], REPEATED
    if kind is list:
        if depth > MAX_DEPTH:
            return [], DEEP
        for index, member in enumerate(value):
            if type(member) not in skipped:
                found = _find(member, depth + 1, skipped)
                if found is not None:
                    found[0].append(index)
                    return found
    elif kind is dict:
        if depth > MAX_DEPTH:
            return [], DEEP
        keys = str not in skipped
        for key, member in value.items():
            key_reason = _string_flaw(key) if keys else None
            if key_reason is not None:
                return [key], key_reason
            if type(member) not in skipped:
                found = _find(member, depth + 1, skipped)
                if found is not None:
                    found[0].append(key)
                    return found
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
