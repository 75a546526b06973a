"""Read timeouts for slow clients. uvicorn closes an idle keep-alive connection, but a client that opens a connection
and sends its request line, headers or body a few bytes at a time holds it as long as it likes. Its httptools
protocol here has two timers: the head (from the connection, or from a keep-alive request's first byte, to the end of
its headers) and the body (from the end of the headers to the end of the body). Past either the client gets
`408` naming the limit (`header_timeout`, `body_timeout`), when no answer has started, and the connection is
closed."""

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)


def timeout_answer(limit: str, seconds: float, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """A whole 408 response that closes the connection, its JSON body naming the limit."""
    body = json.dumps({"error": {
        "code": 408, "status": "DEADLINE_EXCEEDED", "message": f"Request not received within {seconds:g} s",
        "limit": limit, "max": seconds,
    }}).encode()
    head = [b"HTTP/1.1 408 Request Timeout\r\n"]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head += [
        b"content-type: application/json\r\n",
        b"content-length: " + str(len(body)).encode() + b"\r\n",
        b"connection: close\r\n\r\n",
    ]
    return b"".join(head) + body


class ReadTimeouts(HttpToolsProtocol):
    """uvicorn's httptools protocol with the head and body timers; `timed` makes one with its timeouts. The parser's
    callbacks only note what the connection waits for; the timer is armed once the data at hand is parsed, so a request
    that arrives whole in one read (the usual case) arms no timer at all."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiting: str | None = "header_timeout"
        """What the connection waits for: the head (`header_timeout`), the body (`body_timeout`), or nothing."""
        self._timer: asyncio.TimerHandle | None = None
        self._timed: str | None = None
        """The limit the timer was armed for (kept once it expired, so that the same wait is not timed twice)."""
        self._started = 0.0
        """When the wait for `_waiting` began (loop time)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._started = self.loop.time()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._waiting = None
        self._arm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._wait("header_timeout")

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._wait("body_timeout")

    def on_message_complete(self) -> None:
        self._wait(None)
        super().on_message_complete()

    def _wait(self, limit: str | None) -> None:
        self._waiting = limit
        self._started = self.loop.time()

    def _arm(self) -> None:
        """The timer for what the connection waits for now, counted from when that wait began."""
        if self._timed == self._waiting:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timed = self._waiting
        if self._waiting is not None:
            seconds = self.header_timeout if self._waiting == "header_timeout" else self.body_timeout
            self._timer = self.loop.call_at(self._started + seconds, self._expired, self._waiting)

    def _expired(self, limit: str) -> None:
        """The head or body did not arrive in time: 408 when no answer has started, and the connection closed; a
        late head behind a response still being sent closes the connection once that response ends."""
        self._timer = None
        if self.transport.is_closing():
            return
        seconds = self.header_timeout if limit == "header_timeout" else self.body_timeout
        client = "%s:%d" % self.client if self.client else "a client"
        log.warning("closed the connection of %s: request not received within %g s (%s)", client, seconds, limit)
        cycle = self.cycle
        answering = cycle is not None and not cycle.response_complete
        if limit == "header_timeout" and answering:
            cycle.keep_alive = False
            return
        if not (answering and cycle.response_started):
            self.transport.write(timeout_answer(limit, seconds, self.server_state.default_headers))
        self.transport.close()


def timed(header_timeout: float, body_timeout: float) -> type[ReadTimeouts]:
    """The protocol class to give uvicorn (`Config(http=...)`) with these timeouts, in seconds."""
    timeouts = {"header_timeout": header_timeout, "body_timeout": body_timeout}
    return type("TimedHttpToolsProtocol", (ReadTimeouts,), timeouts)
