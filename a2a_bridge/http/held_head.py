"""The transport a uvicorn response cycle writes through (`one_write` installs it): an answer's head held until its
body's first part, so that both go to the transport in one write."""

import asyncio
from typing import Any


class HeadWithBody:
    """The transport one response cycle writes to: the cycle's first write after its answer started (the head) is
    held where a body of known length follows, and written in one with the next write; all else goes through."""

    def __init__(self, transport: asyncio.Transport, cycle: Any) -> None:
        self.transport = transport
        self.cycle = cycle
        """uvicorn's `RequestResponseCycle` that writes here."""
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
