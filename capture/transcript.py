"""A typed reader for the capture kit's `.http` transcripts.

A transcript is a list of blocks. Each block starts with `### N · title` (or `### webhook N · title`), then holds a
raw HTTP/1.1 request with its body and, except for webhook blocks, the raw response: a status line, headers, and
either a body or the `data:` lines of an SSE stream. Lines starting with `# ` are narration. A `data:` line that
follows a block whose response is not a stream continues the most recent stream still open (07-auth-required: the
operator's request is sent while the deploy's stream stays open).
"""

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

SSE_MEDIA_TYPE = "text/event-stream"
NARRATION_PREFIX = "# "
DATA_PREFIX = "data:"

_HEADER = re.compile(r"^### (?P<label>.+?) · (?P<title>.*)$")
_REQUEST_LINE = re.compile(r"^(?P<method>[A-Z]+) (?P<target>\S+) (?P<version>HTTP/\d\.\d)$")
_STATUS_LINE = re.compile(r"^(?P<version>HTTP/\d\.\d) (?P<status>\d{3})(?: (?P<reason>.*))?$")
_FIELD = re.compile(r"^(?P<name>[!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(?P<value>.*?)[ \t]*$")


class TranscriptError(ValueError):
    """A transcript that does not follow the format; the message names the file and line."""


@dataclass(frozen=True)
class Headers:
    """Header fields in their recorded order; lookups ignore case."""

    fields: tuple[tuple[str, str], ...] = ()

    def get(self, name: str, default: str | None = None) -> str | None:
        wanted = name.lower()
        return next((value for key, value in self.fields if key.lower() == wanted), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    @property
    def media_type(self) -> str | None:
        """The Content-Type without parameters, lower-cased."""
        value = self.get("content-type")
        return value.split(";", 1)[0].strip().lower() if value else None


@dataclass(frozen=True)
class Narration:
    """One `# ` line, with its 1-based line number in the file."""

    line: int
    text: str


@dataclass(frozen=True)
class Request:
    """A recorded request: request line, headers and body text exactly as sent (empty when there is none)."""

    method: str
    target: str
    version: str
    headers: Headers
    body: str

    @property
    def path(self) -> str:
        """The target without its query string."""
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(urlsplit(self.target).query, keep_blank_values=True))

    @property
    def host(self) -> str | None:
        return self.headers.get("host")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Response:
    """A recorded response: a body for plain responses, the `data:` payloads of each event for SSE streams."""

    version: str
    status: int
    reason: str
    headers: Headers
    body: str = ""
    frames: tuple[str, ...] = ()

    @property
    def is_stream(self) -> bool:
        return self.headers.media_type == SSE_MEDIA_TYPE

    def json(self) -> Any:
        return json.loads(self.body)

    def frames_json(self) -> list[Any]:
        return [json.loads(frame) for frame in self.frames]


@dataclass(frozen=True)
class StreamPosition:
    """Where an out-of-band block happened: inside the open stream of block `label`, after `frames` of its events."""

    label: str
    frames: int


@dataclass(frozen=True)
class Block:
    """One `###` block: a request and, unless the client only received it (a webhook), its response."""

    label: str
    title: str
    line: int
    request: Request
    response: Response | None
    narration: tuple[Narration, ...] = ()
    during: StreamPosition | None = None

    @property
    def number(self) -> int:
        return int(self.label.split()[-1])

    @property
    def kind(self) -> str:
        """`""` for an exchange the client made, or the label's prefix word (`"webhook"`)."""
        words = self.label.split()
        return " ".join(words[:-1])

    @property
    def is_webhook(self) -> bool:
        return self.kind == "webhook"


@dataclass(frozen=True)
class Transcript:
    """One transcript file: its blocks in order, and the narration before the first block."""

    name: str
    blocks: tuple[Block, ...]
    narration: tuple[Narration, ...] = ()

    def block(self, label: str | int) -> Block:
        """The block with this label (`1`, `"webhook 3"`)."""
        wanted = str(label)
        for block in self.blocks:
            if block.label == wanted:
                return block
        raise KeyError(f"{self.name} has no block {wanted!r}")

    @property
    def exchanges(self) -> tuple[Block, ...]:
        """Blocks the client sent, in order."""
        return tuple(block for block in self.blocks if not block.kind)

    @property
    def webhooks(self) -> tuple[Block, ...]:
        """Requests the client received, in order."""
        return tuple(block for block in self.blocks if block.is_webhook)


@dataclass
class _Draft:
    """A block while its file is read: frames can still be added by a later out-of-band block."""

    label: str
    title: str
    line: int
    request: Request | None = None
    status: tuple[str, int, str] | None = None
    response_headers: Headers = field(default_factory=Headers)
    body: str = ""
    frames: list[str] = field(default_factory=list)
    narration: list[Narration] = field(default_factory=list)
    during: StreamPosition | None = None

    def build(self) -> Block:
        assert self.request is not None
        response = None
        if self.status is not None:
            version, status, reason = self.status
            response = Response(version, status, reason, self.response_headers, self.body, tuple(self.frames))
        return Block(self.label, self.title, self.line, self.request, response, tuple(self.narration), self.during)

    @property
    def streams(self) -> bool:
        return self.status is not None and self.response_headers.media_type == SSE_MEDIA_TYPE


class _Reader:
    """Walks the lines of one file, keeping the line number for error messages."""

    def __init__(self, text: str, name: str) -> None:
        self.lines = text.splitlines()
        self.name = name
        self.index = 0

    def fail(self, message: str) -> TranscriptError:
        return TranscriptError(f"{self.name}:{self.index + 1}: {message}")

    @property
    def done(self) -> bool:
        return self.index >= len(self.lines)

    @property
    def current(self) -> str:
        return self.lines[self.index]

    def at_header(self) -> bool:
        return not self.done and self.current.startswith("### ")

    def take(self) -> str:
        line = self.current
        self.index += 1
        return line

    def narration(self) -> Narration:
        return Narration(self.index + 1, self.take()[len(NARRATION_PREFIX):])

    def skip_blank(self, notes: list[Narration]) -> None:
        """Skip blank lines, collecting narration met on the way."""
        while not self.done and not self.at_header():
            if not self.current.strip():
                self.index += 1
            elif self.current.startswith(NARRATION_PREFIX):
                notes.append(self.narration())
            else:
                return

    def fields(self) -> Headers:
        """Header lines up to the blank line that ends them (or the end of the block)."""
        found: list[tuple[str, str]] = []
        while not self.done and self.current.strip() and not self.at_header():
            match = _FIELD.match(self.current)
            if match is None:
                raise self.fail(f"expected a header field, found {self.current!r}")
            found.append((match["name"], match["value"]))
            self.index += 1
        if not self.done and not self.current.strip():
            self.index += 1
        return Headers(tuple(found))

    def body(self, notes: list[Narration]) -> str:
        """Body lines up to a status line, a `data:` line, the next block or the end; trailing blank lines dropped."""
        kept: list[str] = []
        while not self.done and not self.at_header():
            line = self.current
            if _STATUS_LINE.match(line) or line.startswith(DATA_PREFIX):
                break
            if line.startswith(NARRATION_PREFIX):
                notes.append(self.narration())
                continue
            kept.append(self.take())
        while kept and not kept[-1].strip():
            kept.pop()
        return "\n".join(kept)

    def events(self, notes: list[Narration]) -> list[str]:
        """SSE events up to the next block or a line that is not part of a stream; each is its joined `data:` lines."""
        events: list[str] = []
        pending: list[str] = []
        while not self.done and not self.at_header():
            line = self.current
            if line.startswith(DATA_PREFIX):
                value = line[len(DATA_PREFIX):]
                pending.append(value[1:] if value.startswith(" ") else value)
                self.index += 1
            elif not line.strip():
                if pending:
                    events.append("\n".join(pending))
                    pending = []
                self.index += 1
            elif line.startswith(NARRATION_PREFIX):
                notes.append(self.narration())
            else:
                break
        if pending:
            events.append("\n".join(pending))
        return events


def parse(text: str, name: str = "<transcript>") -> Transcript:
    """Parse the text of one transcript file."""
    reader = _Reader(text, name)
    preamble: list[Narration] = []
    reader.skip_blank(preamble)
    drafts: list[_Draft] = []
    while not reader.done:
        header = _HEADER.match(reader.current)
        if header is None:
            raise reader.fail(f"expected a `### N · title` line, found {reader.current!r}")
        draft = _Draft(header["label"], header["title"], reader.index + 1)
        reader.index += 1
        _read_block(reader, draft, drafts)
        drafts.append(draft)
    labels = [draft.label for draft in drafts]
    if len(set(labels)) != len(labels):
        raise TranscriptError(f"{name}: duplicate block labels in {labels}")
    return Transcript(name, tuple(draft.build() for draft in drafts), tuple(preamble))


def _read_block(reader: _Reader, draft: _Draft, earlier: list[_Draft]) -> None:
    reader.skip_blank(draft.narration)
    request_line = _REQUEST_LINE.match(reader.current) if not reader.done else None
    if request_line is None:
        raise reader.fail(f"block {draft.label!r} does not start with a request line")
    reader.index += 1
    headers = reader.fields()
    body = reader.body(draft.narration)
    draft.request = Request(request_line["method"], request_line["target"], request_line["version"], headers, body)
    if reader.done or reader.at_header():
        return
    status = _STATUS_LINE.match(reader.current)
    if status is not None:
        reader.index += 1
        draft.status = (status["version"], int(status["status"]), status["reason"] or "")
        draft.response_headers = reader.fields()
        if draft.streams:
            draft.frames = reader.events(draft.narration)
        else:
            draft.body = reader.body(draft.narration)
    reader.skip_blank(draft.narration)
    if not reader.done and reader.current.startswith(DATA_PREFIX):
        stream = next((d for d in reversed(earlier) if d.streams), None)
        if stream is None:
            raise reader.fail("`data:` lines with no open stream to continue")
        draft.during = StreamPosition(stream.label, len(stream.frames))
        stream.frames.extend(reader.events(draft.narration))
    reader.skip_blank(draft.narration)
    if not reader.done and not reader.at_header():
        raise reader.fail(f"unexpected line in block {draft.label!r}: {reader.current!r}")


def load(path: Path) -> Transcript:
    """Parse one transcript file; its name is the file's stem (`07-auth-required`)."""
    return parse(path.read_text(encoding="utf-8"), path.stem)


def load_all(directory: Path) -> list[Transcript]:
    """Every `*.http` transcript in a directory, in file-name order."""
    return [load(path) for path in sorted(directory.glob("*.http"))]
