"""Structural comparison of live JSON with recorded JSON, as the replayer and the kit tests use it.

Recorded ids (UUIDs, page tokens) are bound to the live ids the server issued, one to one and consistently across a
run; recorded ISO timestamps match any ISO timestamp; every other string must equal the recorded one after the
recorded base URLs and bound ids inside it are rewritten to their live form. Numbers compare by value, and objects
without regard to key order, unless the comparison is strict: then `11` against `11.0` and a different key order are
reported too. Every difference names its JSON path, so callers can tolerate chosen ones.
"""

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$")
OPAQUE_FIELDS = frozenset({"nextPageToken"})
"""Fields whose recorded value is an opaque server-issued token: bound like an id, never compared."""
SHORT = 160
"""How many characters of a value a difference shows."""

_SEGMENT = re.compile(r'\.(?P<key>[^.\[\]"]+)|\[(?P<index>\d+|\*)\]|\["(?P<quoted>(?:[^"\\]|\\.)*)"\]')
_PLAIN_KEY = re.compile(r"^[^.\[\]\"*]+$")


class Ids:
    """Recorded ids bound to live ones, one to one, plus recorded base URLs mapped to live ones."""

    def __init__(self, urls: Mapping[str, str] | None = None) -> None:
        self.urls = dict(urls or {})
        self.live: dict[str, str] = {}
        self.values: dict[str, str] = {}
        """Recorded strings that are not UUIDs (a client's `messageId: "readme-1"`) and stand for a live string only
        as a whole value: never replaced inside other text."""
        self._recorded: dict[str, str] = {}

    def bind(self, recorded: str, live: Any) -> str | None:
        """Bind a recorded id to the live id at the same place; returns why it cannot be, or None."""
        if not isinstance(live, str) or not live:
            return f"expected an id for recorded {recorded}, got {short(live)}"
        bound = self.live.get(recorded)
        if bound is not None:
            return None if bound == live else f"recorded {recorded} is live {bound} elsewhere, here {live!r}"
        other = self._recorded.get(live)
        if other is not None:
            return f"live {live} already stands for recorded {other}, here for {recorded}"
        self.live[recorded] = live
        self._recorded[live] = recorded
        return None

    def __getitem__(self, recorded: str) -> str:
        return self.live[recorded]

    def __contains__(self, recorded: object) -> bool:
        return recorded in self.live

    def fork(self) -> "Ids":
        """A copy whose bindings can be tried and then adopted or dropped."""
        copy = Ids(self.urls)
        copy.live = dict(self.live)
        copy.values = dict(self.values)
        copy._recorded = dict(self._recorded)
        return copy

    def adopt(self, other: "Ids") -> None:
        """Take the bindings of a fork."""
        self.live = dict(other.live)
        self._recorded = dict(other._recorded)

    def translate(self, text: str) -> str:
        """The recorded text with the recorded base URLs and every bound id replaced by its live form."""
        for recorded, live in sorted(self.urls.items(), key=lambda item: -len(item[0])):
            text = text.replace(recorded, live)
        for recorded, live in sorted(self.live.items(), key=lambda item: -len(item[0])):
            text = text.replace(recorded, live)
        return text

    def expected(self, recorded: str) -> str:
        """The live form of a recorded string value: its whole-value binding, or the text translated."""
        return self.values.get(recorded) or self.translate(recorded)


@dataclass(frozen=True)
class Difference:
    """One way the live value differs from the recorded one, at a JSON path (`$.result.task.id`, `$[2].result`)."""

    path: str
    kind: str
    detail: str
    recorded: Any = None
    live: Any = None
    parent: tuple[Any, Any] | None = None
    """For a missing or unexpected key or item: the recorded and the live container."""

    def __str__(self) -> str:
        return f"{self.path}: {self.detail}"


def short(value: Any) -> str:
    """A value as compact JSON, cut to a readable length."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHORT else text[: SHORT - 1] + "…"


def is_iso_time(value: object) -> bool:
    if not isinstance(value, str) or not ISO_TIME.match(value):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def key_path(parent: str, key: str) -> str:
    return f"{parent}.{key}" if _PLAIN_KEY.match(key) else f"{parent}[{json.dumps(key)}]"


def path_segments(path: str) -> list[str]:
    """A path's root and then each key or index, as text (`$.a[0]["b.c"]` → `$`, `a`, `0`, `b.c`)."""
    root = re.match(r"^[^.\[]*", path)
    assert root is not None
    segments = [root.group(0)]
    position = root.end()
    while position < len(path):
        found = _SEGMENT.match(path, position)
        if found is None:
            raise ValueError(f"not a JSON path: {path!r} (at {path[position:]!r})")
        if found["quoted"] is not None:
            segments.append(json.loads(f'"{found["quoted"]}"'))
        else:
            segments.append(found["key"] if found["key"] is not None else found["index"])
        position = found.end()
    return segments


def path_matches(pattern: str, path: str) -> bool:
    """Whether a path matches a pattern in which `*` stands for one key or index and `**` for any number of them."""
    return _matches(path_segments(pattern), path_segments(path))


def _matches(pattern: list[str], path: list[str]) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_matches(rest, path[start:]) for start in range(len(path) + 1))
    if not path:
        return False
    return (head == "*" or head == path[0]) and _matches(rest, path[1:])


class Comparison:
    """Compares recorded JSON with live JSON, binding ids as it goes; `strict` also reports key order and number form."""

    def __init__(self, ids: Ids, strict: bool = False) -> None:
        self.ids = ids
        self.strict = strict

    def compare(self, recorded: Any, live: Any, path: str = "$") -> list[Difference]:
        return list(self._walk(recorded, live, path))

    def _fork(self) -> "Comparison":
        return Comparison(self.ids.fork(), self.strict)

    def _walk(self, recorded: Any, live: Any, path: str) -> Iterator[Difference]:
        if isinstance(recorded, dict):
            if not isinstance(live, dict):
                yield Difference(path, "type", f"expected an object, got {short(live)}", recorded, live)
            else:
                yield from self._object(recorded, live, path)
        elif isinstance(recorded, list):
            if not isinstance(live, list):
                yield Difference(path, "type", f"expected a list, got {short(live)}", recorded, live)
            else:
                yield from self._list(recorded, live, path)
        elif isinstance(recorded, bool) or recorded is None:
            if live is not recorded:
                yield Difference(path, "value", f"expected {short(recorded)}, got {short(live)}", recorded, live)
        elif isinstance(recorded, int | float):
            yield from self._number(recorded, live, path)
        elif isinstance(recorded, str):
            yield from self._string(recorded, live, path)
        else:
            raise TypeError(f"{path}: not a JSON value: {recorded!r}")

    def _object(self, recorded: dict[str, Any], live: dict[str, Any], path: str) -> Iterator[Difference]:
        pair = (recorded, live)
        for key in recorded:
            if key not in live:
                yield Difference(key_path(path, key), "missing key", f"missing key {key!r}", recorded[key], None, pair)
        for key in live:
            if key not in recorded:
                detail = f"unexpected key {key!r}: {short(live[key])}"
                yield Difference(key_path(path, key), "unexpected key", detail, None, live[key], pair)
        shared = [key for key in live if key in recorded]
        if self.strict and shared != [key for key in recorded if key in live]:
            yield Difference(path, "key order", f"keys in order {shared}, the recording has {list(recorded)}")
        for key in recorded:
            if key not in live:
                continue
            want, got = recorded[key], live[key]
            where = key_path(path, key)
            if key in OPAQUE_FIELDS and isinstance(want, str) and want:
                problem = self.ids.bind(want, got)
                if problem:
                    yield Difference(where, "id", problem, want, got)
            else:
                yield from self._walk(want, got, where)

    def _list(self, recorded: list[Any], live: list[Any], path: str) -> Iterator[Difference]:
        if len(recorded) != len(live):
            aligned = self._align(recorded, live, path)
            if aligned is not None:
                yield from aligned
                return
        for index, (want, got) in enumerate(zip(recorded, live, strict=False)):
            yield from self._walk(want, got, f"{path}[{index}]")
        pair = (recorded, live)
        for index in range(len(live), len(recorded)):
            yield Difference(f"{path}[{index}]", "missing item", f"missing item {short(recorded[index])}", recorded[index], None, pair)
        for index in range(len(recorded), len(live)):
            yield Difference(f"{path}[{index}]", "unexpected item", f"unexpected item {short(live[index])}", None, live[index], pair)

    def _align(self, recorded: list[Any], live: list[Any], path: str) -> list[Difference] | None:
        """When the shorter list matches a subsequence of the longer one exactly, the items left over; else None."""
        trial = self._fork()
        longer_is_live = len(live) > len(recorded)
        shorter, longer = (recorded, live) if longer_is_live else (live, recorded)
        used: set[int] = set()
        start = 0
        for item in shorter:
            for index in range(start, len(longer)):
                attempt = trial._fork()
                want, got = (item, longer[index]) if longer_is_live else (longer[index], item)
                if not attempt.compare(want, got, path):
                    trial.ids.adopt(attempt.ids)
                    used.add(index)
                    start = index + 1
                    break
            else:
                return None
        self.ids.adopt(trial.ids)
        pair = (recorded, live)
        left = [index for index in range(len(longer)) if index not in used]
        if longer_is_live:
            return [
                Difference(f"{path}[{i}]", "unexpected item", f"unexpected item {short(live[i])}", None, live[i], pair)
                for i in left
            ]
        return [
            Difference(f"{path}[{i}]", "missing item", f"missing item {short(recorded[i])}", recorded[i], None, pair)
            for i in left
        ]

    def _number(self, recorded: int | float, live: Any, path: str) -> Iterator[Difference]:
        if not isinstance(live, int | float) or isinstance(live, bool):
            yield Difference(path, "type", f"expected {recorded!r}, got {short(live)}", recorded, live)
        elif live != recorded:
            yield Difference(path, "value", f"expected {recorded!r}, got {live!r}", recorded, live)
        elif self.strict and type(live) is not type(recorded):
            yield Difference(path, "number form", f"expected {recorded!r}, got {live!r}", recorded, live)

    def _string(self, recorded: str, live: Any, path: str) -> Iterator[Difference]:
        if not isinstance(live, str):
            yield Difference(path, "type", f"expected a string like {short(recorded)}, got {short(live)}", recorded, live)
        elif UUID.fullmatch(recorded):
            problem = self.ids.bind(recorded, live)
            if problem:
                yield Difference(path, "id", problem, recorded, live)
        elif ISO_TIME.match(recorded):
            if not is_iso_time(live):
                yield Difference(path, "timestamp", f"expected an ISO timestamp, got {short(live)}", recorded, live)
        else:
            expected = self.ids.expected(recorded)
            if live != expected:
                yield Difference(path, "value", f"expected {short(expected)}, got {short(live)}", expected, live)


def compare(recorded: Any, live: Any, ids: Ids, strict: bool = False, path: str = "$") -> list[Difference]:
    """Every difference between a recorded and a live JSON value; binds ids in `ids` on the way."""
    return Comparison(ids, strict).compare(recorded, live, path)
