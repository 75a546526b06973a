"""One keep-alive connection to a webhook receiver, as the asyncio protocol of its transport: a request written whole,
its answer parsed from the bytes as they arrive (the status line and a head of HEAD_BYTES at most, a body only when it
is sized and at most ANSWER_BYTES, never decompressed), the exchange's outcome a future. No stream reader or writer in
between: their coroutines, buffer and wakeups cost more than the post's own work."""

import asyncio
import asyncio.protocols
import functools
import ssl
import time
from typing import NamedTuple, cast

from mypy_extensions import mypyc_attr

HEAD_BYTES = 16_384
"""Bytes of an answer's status line and headers read at the most (a longer head fails the attempt)."""
ANSWER_BYTES = 4096
"""Bytes of an answer's body read at the most, and only to keep its connection: a longer body, a chunked one or one of
unknown length closes the connection unread."""
INTERIM_HEADS = 3
"""Interim (1xx) heads skipped before an answer at the most; one more fails the attempt."""
IDLE_SECONDS = 30.0
"""A connection idle longer is closed rather than used again."""
HEADS_KEPT = 64
"""Answer heads whose parse is kept (`parse_head`): 1 MiB at the most."""
ZERO = 48
"""The byte of the digit 0."""


class WireError(Exception):
    """A post that got no status: `reason` names the failure as httpx did (ConnectError, ReadTimeout, ...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Answer(NamedTuple):
    status: int
    keep: bool
    """Whether the connection may carry the next request (the whole answer read, not closed by the receiver)."""


def digit(line: bytes, at: int) -> int:
    """The value of the decimal digit at `at` of `line`, or -1."""
    value = line[at] - ZERO
    return value if 0 <= value <= 9 else -1


def header(fields: bytes, name: bytes) -> bytes | None:
    """The value of the field `name` (lower case, with its CRLF before and its colon) in lower-cased `fields`."""
    at = fields.find(name)
    if at < 0:
        return None
    return fields[at + len(name) : fields.find(b"\r\n", at + 2)]


@functools.lru_cache(maxsize=HEADS_KEPT)
def parse_head(head: bytes) -> tuple[int, bool, int | None, bool]:
    """An answer head's status, whether HTTP/1.1 keeps the connection open, its Content-Length (None when absent or
    chunked) and whether it is chunked. `head` ends with its blank line. A receiver answers each post with the same
    head, or one that changes once a second (its Date): the last heads' parses are kept."""
    end = head.find(b"\r\n")
    if end < 12 or not head.startswith(b"HTTP/1.") or head[8] != 32 or (end > 12 and head[12] != 32):
        raise WireError("RemoteProtocolError")
    hundreds, tens, units = digit(head, 9), digit(head, 10), digit(head, 11)
    if hundreds < 0 or tens < 0 or units < 0:
        raise WireError("RemoteProtocolError")
    keep = head[7] == 49
    fields = head[end:].lower()
    chunked = b"\r\ntransfer-encoding:" in fields
    value = header(fields, b"\r\ncontent-length:")
    length: int | None = None
    if value is not None:
        value = value.strip()
        length = int(value) if value.isdigit() else None
    connection = header(fields, b"\r\nconnection:")
    if connection is not None and b"close" in connection:
        keep = False
    return hundreds * 100 + tens * 10 + units, keep, None if chunked else length, chunked


class Connection:
    """One keep-alive connection to a receiver's origin: `exchange` writes a request and is its answer, which `received`
    parses as it arrives. The peer's data when no request is under way closes the connection."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.idle_since = time.monotonic()
        self.deadline = 0.0
        """When the post under way on it times out (the event loop's time)."""
        self.expired = False
        """Whether a post on it timed out (`WebhookConnections._sweep` aborted it)."""
        self.ended = False
        """Whether the receiver closed it (or it was lost)."""
        self.answer: asyncio.Future[Answer] | None = None
        """The outcome of the exchange under way."""
        self.buffer = b""
        """An answer's bytes received and not yet parsed."""
        self.heads = 0
        """Heads of the answer under way parsed (interim ones included)."""
        self.length = -1
        """Bytes of the body still awaited after a head was parsed; -1 while a head is awaited."""
        self.status = 0
        self.keep = False

    def usable(self) -> bool:
        transport = self.transport
        return (
            not self.ended and transport is not None and not transport.is_closing()
            and time.monotonic() - self.idle_since < IDLE_SECONDS
        )

    def exchange(self, request: bytes) -> "asyncio.Future[Answer]":
        """Write `request`: its answer (interim 1xx ones skipped), or WireError."""
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.answer = answer
        self.buffer = b""
        self.heads = 0
        self.length = -1
        if self.ended or self.transport is None:
            self.fail("RemoteProtocolError")
        else:
            self.transport.write(request)
        return answer

    def received(self, data: bytes) -> None:
        if self.answer is None:
            self.close()
            return
        buffer = self.buffer + data if self.buffer else data
        while self.length < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0 or end + 4 > HEAD_BYTES:
                if end >= 0 or len(buffer) >= HEAD_BYTES:
                    self.fail("RemoteProtocolError")
                else:
                    self.buffer = buffer
                return
            try:
                status, keep, length, chunked = parse_head(buffer[: end + 4])
            except WireError as error:
                self.fail(error.reason)
                return
            buffer = buffer[end + 4 :]
            self.heads += 1
            if 100 <= status < 200:
                if self.heads > INTERIM_HEADS:
                    self.fail("RemoteProtocolError")
                    return
                continue
            if status in (204, 304):
                self.finish(status, keep and not buffer)
            elif chunked or length is None or length > ANSWER_BYTES:
                self.finish(status, False)
            elif len(buffer) >= length:
                self.finish(status, keep and len(buffer) == length)
            else:
                self.status, self.keep, self.length = status, keep, length
                self.buffer = buffer
            return
        if len(buffer) >= self.length:
            self.finish(self.status, self.keep and len(buffer) == self.length)
        else:
            self.buffer = buffer

    def lost(self, reason: str) -> None:
        """The receiver closed the connection (or it broke): an answer whose head was read has its status."""
        self.ended = True
        if self.answer is None:
            return
        if self.length >= 0:
            self.finish(self.status, False)
        else:
            self.fail(reason)

    def finish(self, status: int, keep: bool) -> None:
        answer = self.answer
        self.answer = None
        self.buffer = b""
        if answer is not None and not answer.done():
            answer.set_result(Answer(status, keep))

    def fail(self, reason: str) -> None:
        """End the exchange under way with WireError(reason) and close the connection."""
        answer = self.answer
        self.answer = None
        self.buffer = b""
        self.close()
        if answer is not None and not answer.done():
            answer.set_exception(WireError(reason))

    def abort(self) -> None:
        """Close at once, the exchange under way failing (the sweep's timeout)."""
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@mypyc_attr(native_class=False)
class ConnectionProtocol(asyncio.protocols.Protocol):
    """The transport's protocol of a `Connection`, which it hands what arrives. Not a native class of mypyc's, as its
    base is asyncio's (named by its module, which mypyc's code imports only so: by `asyncio.Protocol` it built but
    crashed on import); the connection is, for its state's sake."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.connection.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.connection.received(data)

    def eof_received(self) -> bool | None:
        self.connection.lost("RemoteProtocolError")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection.lost("RemoteProtocolError" if exc is None else "ReadError")


async def open_connection(address: str, port: int, context: ssl.SSLContext | None, server_hostname: str | None) -> Connection:
    """A TCP connection to `address`, in TLS verifying `server_hostname` when `context` is given."""
    connection = Connection()
    await asyncio.get_running_loop().create_connection(
        lambda: ConnectionProtocol(connection), address, port, ssl=context, server_hostname=server_hostname
    )
    return connection
