"""An answer's head and body in one transport write. uvicorn's response cycle writes the head of an answer when the
app sends `http.response.start` and the body when it sends `http.response.body`: two writes, two system calls (and two
TCP segments) for every plain answer. Here the head of an answer with a Content-Length and a body to come is held by
the cycle's transport and written with the body's first part; the bytes on the wire are the same. A chunked answer
(a stream), an answer to HEAD and one without a body have their head written at once, as before; a `100 Continue`
is written before any head; closing the transport writes a head still held first."""

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class HeadWithBody:
    """The transport one response cycle writes to: the cycle's first write after its answer started (the head) is
    held where a body of known length follows, and written in one with the next write; all else goes through."""

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self.transport = transport
        self.cycle = cycle
        self.head_written = False
        """Whether the answer's head has gone to the transport, or is held (`held`)."""
        self.held = b""

    def write(self, data: bytes) -> None:
        if self.head_written or not self.cycle.response_started:
            if self.held:
                data, self.held = self.held + data, b""
            self.transport.write(data)
            return
        self.head_written = True
        cycle = self.cycle
        if cycle.chunked_encoding is False and cycle.expected_content_length > 0 and cycle.scope["method"] != "HEAD":
            self.held = data
        else:
            self.transport.write(data)

    def close(self) -> None:
        if self.held:
            self.transport.write(self.held)
            self.held = b""
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose response cycles write through `HeadWithBody`."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = HeadWithBody(self.transport, cycle)  # type: ignore[assignment]
