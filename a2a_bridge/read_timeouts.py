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
    """uvicorn's httptools protocol with the head and body timers; `timed` makes one with its timeouts."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer = self.loop.call_later(self.header_timeout, self._expired, "header_timeout")

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timers()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._expired, "header_timeout")

    def on_headers_complete(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().on_headers_complete()
        if self._body_timer is not None:
            self._body_timer.cancel()
        self._body_timer = self.loop.call_later(self.body_timeout, self._expired, "body_timeout")

    def on_message_complete(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    def _stop_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None

    def _expired(self, limit: str) -> None:
        """The head or body did not arrive in time: 408 when no answer has started, and the connection closed; a
        late head behind a response still being sent closes the connection once that response ends."""
        if limit == "header_timeout":
            self._head_timer = None
        else:
            self._body_timer = None
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
