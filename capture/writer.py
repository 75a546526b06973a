"""Writes transcripts in the kit's `.http` format, which `a2a_bridge.capture.transcript` reads back.

A block is its `### N · title` line, the request (line, headers, blank line, body), then the response (status line,
headers, blank line, body or `data:` events). A request sent while a stream stays open is written inside that
stream, after the events that came before it, and the stream's later events follow it. A block's narration is
written right after the block's own lines.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from a2a_bridge.capture.transcript import Request, Response


@dataclass
class Recorded:
    """One block as captured: its exchange, its narration, and the blocks sent inside its open stream."""

    label: str
    title: str
    request: Request
    response: Response | None = None
    narration: list[str] = field(default_factory=list)
    inside: list[tuple[int, "Recorded"]] = field(default_factory=list)
    """(number of this stream's events before it, block) for each request sent while the stream was open."""


def pretty(value: Any) -> str:
    """JSON as the kit writes bodies: two-space indents."""
    return json.dumps(value, indent=2)


def compact(value: Any) -> str:
    """JSON as the kit writes stream events: one line."""
    return json.dumps(value)


def _headers(fields: Any) -> list[str]:
    return [f"{name}: {value}" for name, value in fields]


def _notes(narration: list[str]) -> list[str]:
    return [f"# {note}" for note in narration] + ([""] if narration else [])


def render_block(block: Recorded) -> list[str]:
    request = block.request
    lines = [f"### {block.label} · {block.title}", f"{request.method} {request.target} {request.version}"]
    lines += _headers(request.headers) + [""]
    if request.body:
        lines += request.body.split("\n") + [""]
    response = block.response
    if response is None:
        return lines + _notes(block.narration)
    reason = f" {response.reason}" if response.reason else ""
    lines += [f"{response.version} {response.status}{reason}"] + _headers(response.headers) + [""]
    if not response.is_stream:
        if response.body:
            lines += response.body.split("\n") + [""]
        return lines + _notes(block.narration)
    written = 0
    for position, other in block.inside:
        lines += [line for frame in response.frames[written:position] for line in (f"data: {frame}", "")]
        if written == 0:
            lines += _notes(block.narration)
        lines += render_block(other)
        written = position
    lines += [line for frame in response.frames[written:] for line in (f"data: {frame}", "")]
    if not block.inside:
        lines += _notes(block.narration)
    return lines


def render(blocks: list[Recorded], preamble: list[str] | None = None) -> str:
    """The text of one transcript file."""
    lines = _notes(preamble or [])
    for block in blocks:
        lines += render_block(block)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"
