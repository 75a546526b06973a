"""Drives a live bridge over HTTP through the blocks of capture-kit transcripts and checks every response."""

import json
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from a2a_bridge.capture.replay import Delivery
from a2a_bridge.capture.transcript import Block, Headers, Transcript, load
from tests.kit_match import Allowance, Ids, match
from tests.support import ServerProcess, wait_for

KIT_HOSTS = {"localhost:41241": "test-runner", "localhost:41242": "code-reviewer", "localhost:41243": "deployer"}
"""The kit serves each agent at the root of its own port; the bridge serves it under /{agent}."""
KIT_WEBHOOK_BASE = "http://localhost:41250"
TRANSPORT_HEADERS = frozenset({"host", "content-length", "content-type", "date", "server"})
"""Headers not compared field by field (Content-Type is compared by media type)."""
READ_TIMEOUT = 15.0


def transcript(kit: Path, name: str) -> Transcript:
    """One transcript of the kit by file stem, e.g. `05-streaming`."""
    return load(kit / f"{name}.http")


class EventStream:
    """The `data:` payloads of an SSE response, one JSON event at a time."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.iter_lines()

    def next(self) -> Any | None:
        """The next event's JSON, or None once the server has closed the stream."""
        data: list[str] = []
        for line in self._lines:
            if line.startswith("data:"):
                value = line[len("data:"):]
                data.append(value[1:] if value.startswith(" ") else value)
            elif not line and data:
                return json.loads("\n".join(data))
        return json.loads("\n".join(data)) if data else None

    def take(self, count: int) -> list[Any]:
        events = []
        for index in range(count):
            event = self.next()
            assert event is not None, f"the stream ended after {index} of {count} events"
            events.append(event)
        return events

    def rest(self) -> list[Any]:
        """Every remaining event, until the server closes the stream."""
        events = []
        while (event := self.next()) is not None:
            events.append(event)
        return events

    def assert_ended(self) -> None:
        extra = self.next()
        assert extra is None, f"the stream went on after the recorded events: {extra!r}"


class KitSession:
    """One live server, the ids bound so far, and the allowances the comparisons may use."""

    def __init__(self, server: ServerProcess, allow: Collection[Allowance], webhook_base: str | None = None) -> None:
        urls = {f"http://{host}": server.agent(agent) for host, agent in KIT_HOSTS.items()}
        if webhook_base is not None:
            urls[KIT_WEBHOOK_BASE] = webhook_base
        self.server = server
        self.ids = Ids(urls)
        self.allow = allow
        self.client = httpx.Client(timeout=READ_TIMEOUT)

    def __enter__(self) -> "KitSession":
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.client.close()

    def match(self, recorded: Any, live: Any, where: str) -> None:
        match(recorded, live, self.ids, self.allow, where)

    def build(self, block: Block) -> httpx.Request:
        """The recorded request aimed at the live agent, with bound ids and the kit's URLs replaced."""
        recorded = block.request
        host = recorded.host
        assert host in KIT_HOSTS, f"block {block.label}: no agent at {host}"
        url = self.server.agent(KIT_HOSTS[host]) + self.ids.translate(recorded.target)
        headers = {
            name: self.ids.translate(value)
            for name, value in recorded.headers
            if name.lower() not in ("host", "content-length")
        }
        content = self.ids.translate(recorded.body).encode() if recorded.body else None
        return self.client.build_request(recorded.method, url, headers=headers, content=content)

    def send(self, block: Block) -> httpx.Response:
        return self.client.send(self.build(block))

    def check_head(self, block: Block, live: httpx.Response) -> None:
        """Status, reason, media type and every other recorded header of the response."""
        recorded = block.response
        assert recorded is not None, f"block {block.label} has no recorded response"
        where = f"block {block.label} ({block.title})"
        conflict = Allowance.TASK_NOT_CANCELABLE_409 in self.allow and (recorded.status, live.status_code) == (400, 409)
        if live.status_code != recorded.status and not conflict:
            live.read()
            raise AssertionError(f"{where}: status {live.status_code}, the kit has {recorded.status}: {live.text}")
        assert conflict or live.reason_phrase == recorded.reason, f"{where}: reason {live.reason_phrase!r}"
        media_type = Headers(tuple(live.headers.items())).media_type
        asked_none = block.request.headers.get("content-type") is None and block.request.headers.get("accept") is None
        plain_by_default = (
            Allowance.PLAIN_JSON_BY_DEFAULT in self.allow
            and asked_none
            and (recorded.headers.media_type, media_type) == ("application/a2a+json", "application/json")
        )
        assert plain_by_default or media_type == recorded.headers.media_type, f"{where}: Content-Type {media_type}"
        for name, value in recorded.headers:
            if name.lower() not in TRANSPORT_HEADERS:
                got = live.headers.get(name)
                assert got == self.ids.translate(value), f"{where}: {name}: {got!r}"

    def replay(self, block: Block) -> Any:
        """Send a non-streaming block and check its whole response; returns the live JSON."""
        live = self.send(block)
        self.check_head(block, live)
        assert block.response is not None
        body = live.json()
        self.match(block.response.json(), body, f"block {block.label}")
        return body

    @contextmanager
    def stream(self, block: Block) -> Iterator[EventStream]:
        """Open a streaming block's request and check its head; the events are read by the caller."""
        live = self.client.send(self.build(block), stream=True)
        try:
            self.check_head(block, live)
            yield EventStream(live)
        finally:
            live.close()

    def expect(self, events: EventStream, block: Block, start: int, stop: int) -> list[Any]:
        """Read the recorded events [start, stop) of a streaming block from the live stream and match them."""
        assert block.response is not None
        recorded = block.response.frames_json()[start:stop]
        live = events.take(len(recorded))
        for index, (want, got) in enumerate(zip(recorded, live, strict=True), start):
            self.match(want, got, f"block {block.label} event {index}")
        return live

    def play(self, script: Transcript, labels: Collection[str] | None = None) -> None:
        """Replay the client's blocks in order; blocks recorded inside an open stream run at their position in it."""
        exchanges = [b for b in script.exchanges if labels is None or b.label in labels]
        for block in exchanges:
            if block.during is not None:
                continue
            assert block.response is not None
            if not block.response.is_stream:
                self.replay(block)
                continue
            inside = [b for b in exchanges if b.during is not None and b.during.label == block.label]
            with self.stream(block) as events:
                read = 0
                for other in inside:
                    assert other.during is not None
                    self.expect(events, block, read, other.during.frames)
                    read = other.during.frames
                    self.replay(other)
                self.expect(events, block, read, len(block.response.frames))
                events.assert_ended()

    def check_webhook(self, block: Block, delivery: Delivery) -> None:
        """A request the webhook received against a recorded `webhook` block: method, path, headers and body."""
        where = f"{block.label} ({block.title})"
        recorded = block.request
        assert (delivery.method, delivery.path) == (recorded.method, recorded.path), f"{where}: {delivery}"
        headers = delivery.headers
        assert headers.media_type == recorded.headers.media_type, f"{where}: Content-Type {headers.media_type}"
        for name, value in recorded.headers:
            if name.lower() not in TRANSPORT_HEADERS:
                got = headers.get(name)
                assert got == self.ids.translate(value), f"{where}: {name}: {got!r}"
        self.match(recorded.json(), json.loads(delivery.body), where)

    def poll(self, block: Block, ready: Callable[[Any], bool], what: str) -> Any:
        """Send a block's request until its live JSON satisfies `ready` (with a deadline), then match it."""

        def attempt() -> Any:
            live = self.send(block)
            self.check_head(block, live)
            body = live.json()
            return body if ready(body) else None

        body = wait_for(attempt, timeout=20, what=what)
        assert block.response is not None
        self.match(block.response.json(), body, f"block {block.label}")
        return body
