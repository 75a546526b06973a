"""An answer's head and body in one transport write. uvicorn's response cycle writes the head of an answer when the
app sends `http.response.start` and the body when it sends `http.response.body`: two writes, two system calls (and two
TCP segments) for every plain answer. Here the head of an answer with a Content-Length and a body to come is held by
the cycle's transport (`held_head.HeadWithBody`, compiled) and written with the body's first part; the bytes on the
wire are the same. A chunked answer (a stream), an answer to HEAD and one without a body have their head written at
once, as before; a `100 Continue` is written before any head; closing the transport writes a head still held first."""

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from a2a_bridge.http.held_head import HeadWithBody


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose response cycles write through `HeadWithBody`."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = HeadWithBody(self.transport, cycle)  # type: ignore[assignment]
