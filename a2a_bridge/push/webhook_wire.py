"""Webhooks' HTTP/1.1 on raw asyncio streams: keep-alive connections per receiver origin, each opened only to an
address the webhook policy allows (the host resolved once and connected to at the address checked, so a DNS answer
that changes after the check cannot redirect it), TLS for https (the default trust store, the URL's host verified), a
POST written as bytes, and of the answer its status line and a bounded head; a body is read only when it is small and
whole (else the connection is closed unread), never decompressed; and the poster of one notification over them."""

import asyncio
import contextlib
import functools
import ssl
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from a2a.types import TaskPushNotificationConfig

from a2a_bridge.push.webhooks import WebhookPolicy

HEAD_BYTES = 16_384
"""Bytes of an answer's status line and headers read at the most (a longer head fails the attempt)."""
ANSWER_BYTES = 4096
"""Bytes of an answer's body read at the most, and only to keep its connection: a longer body, a chunked one or one of
unknown length closes the connection unread."""
IDLE_PER_ORIGIN = 64
"""Idle keep-alive connections kept per receiver origin; more are closed."""
IDLE_SECONDS = 30.0
"""A connection idle longer is closed rather than used again."""
SWEEPS = 10
"""How often per timeout the posts under way are checked for their deadline: a post times out at most a tenth of the
timeout late."""
PATH_SAFE = "/%:@!$&'()*+,;=-._~"
"""Characters of a URL's path and query sent as they are; others are percent-encoded."""

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Opener = Callable[[str, int, ssl.SSLContext | None, str | None], Awaitable[Streams]]


async def open_stream(address: str, port: int, context: ssl.SSLContext | None, server_hostname: str | None) -> Streams:
    """A TCP connection to `address`, in TLS verifying `server_hostname` when `context` is given."""
    return await asyncio.open_connection(
        address, port, ssl=context, server_hostname=server_hostname, limit=HEAD_BYTES
    )


class WireError(Exception):
    """A post that got no status: `reason` names the failure as httpx did (ConnectError, ReadTimeout, ...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int


class Connection:
    """One keep-alive connection to a receiver's origin."""

    def __init__(self, streams: Streams) -> None:
        self.reader, self.writer = streams
        self.idle_since = time.monotonic()
        self.deadline = 0.0
        """When the post under way on it times out (the event loop's time)."""
        self.expired = False
        """Whether a post on it timed out (`WebhookConnections._sweep` aborted it)."""

    def usable(self) -> bool:
        return (
            not self.reader.at_eof() and not self.writer.is_closing()
            and time.monotonic() - self.idle_since < IDLE_SECONDS
        )

    def close(self) -> None:
        self.writer.close()


class Answer(NamedTuple):
    status: int
    keep: bool
    """Whether the connection may carry the next request (the whole answer read, not closed by the receiver)."""


@functools.lru_cache(maxsize=4096)
def request_line(url: str) -> tuple[Origin, str] | None:
    """A URL's origin and the start of a POST to it (request line and Host header); None for a URL that is not an
    http(s) URL with a host."""
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return None
    target = urllib.parse.quote(parsed.path or "/", safe=PATH_SAFE)
    if parsed.query:
        target += "?" + urllib.parse.quote(parsed.query, safe=PATH_SAFE + "?")
    host = parsed.netloc.rsplit("@", 1)[-1]
    return Origin(parsed.scheme, parsed.hostname, port), f"POST {target} HTTP/1.1\r\nHost: {host}\r\n"


def request_bytes(url: str, headers: dict[str, str], body: bytes) -> tuple[Origin, bytes]:
    """A URL's origin and the POST of `body` to it with `headers`; WireError for a URL or header that cannot be sent."""
    start = request_line(url)
    if start is None:
        raise WireError("UnsupportedProtocol")
    fields = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    lines = len(headers)
    if fields.count("\r") != lines or fields.count("\n") != lines or fields.count("\r\n") != lines or "\0" in fields:
        raise WireError("LocalProtocolError")  # a CR, LF or NUL in a name or value would end it, or the head, early
    try:
        head = f"{start[1]}Content-Length: {len(body)}\r\n{fields}\r\n".encode("latin-1")
    except UnicodeEncodeError:
        raise WireError("LocalProtocolError") from None
    return start[0], head + body


def parse_head(head: bytes) -> tuple[int, bool, int | None, bool]:
    """An answer head's status, whether HTTP/1.1 keeps the connection open, its Content-Length (None when absent or
    chunked) and whether it is chunked."""
    end = head.find(b"\r\n")
    line = head[:end]
    code = line[9:12]
    if len(line) < 12 or not line.startswith(b"HTTP/1.") or line[8:9] != b" " or not code.isdigit() or line[12:13] not in (b"", b" "):
        raise WireError("RemoteProtocolError")
    keep = line.startswith(b"HTTP/1.1")
    fields = head[end:].lower()
    chunked = b"\r\ntransfer-encoding:" in fields
    length: int | None = None
    at = fields.find(b"\r\ncontent-length:")
    if at >= 0:
        value = fields[at + 17 : fields.find(b"\r\n", at + 2)].strip()
        length = int(value) if value.isdigit() else None
    at = fields.find(b"\r\nconnection:")
    if at >= 0 and b"close" in fields[at : fields.find(b"\r\n", at + 2)]:
        keep = False
    return int(code), keep, None if chunked else length, chunked


async def read_answer(reader: asyncio.StreamReader) -> Answer:
    """The status of an answer (interim 1xx ones skipped) and whether its connection may be used again: the body is
    read only when its length is known and at most ANSWER_BYTES."""
    for _ in range(4):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise WireError("RemoteProtocolError") from None
        except asyncio.IncompleteReadError:
            raise WireError("RemoteProtocolError") from None
        status, keep, length, chunked = parse_head(head)
        if 100 <= status < 200:
            continue
        if status in (204, 304):
            return Answer(status, keep)
        if chunked or length is None or length > ANSWER_BYTES:
            return Answer(status, False)
        if length:
            try:
                await reader.readexactly(length)
            except asyncio.IncompleteReadError:
                return Answer(status, False)
        return Answer(status, keep)
    raise WireError("RemoteProtocolError")


class WebhookConnections:
    """The keep-alive connections of one webhook policy's posts, per receiver origin."""

    def __init__(
        self, policy: WebhookPolicy, timeout: float = 10.0, opener: Opener | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        """`timeout` bounds each post (connection, request and answer); `tls` verifies https receivers (None: the
        default trust store)."""
        self.policy = policy
        self.timeout = timeout
        self.opener = opener
        """How a connection is opened (None: `open_stream`, looked up at each call)."""
        self._idle: dict[Origin, list[Connection]] = {}
        self._tls = tls
        self._busy: set[Connection] = set()
        """The connections with a post under way."""
        self._sweeper: asyncio.TimerHandle | None = None
        self._swept: asyncio.AbstractEventLoop | None = None
        """The event loop the sweep is scheduled on (a post on another one schedules it there)."""

    async def post(self, url: str, headers: dict[str, str], body: bytes) -> int:
        """POST `body` to `url` with `headers`: the receiver's status, or WireError. A connection kept from an earlier
        post that fails before any answer is replaced by a new one once (the receiver may have closed it idle). The
        post's time is bounded without a timer of its own: a new connection is opened under `asyncio.timeout_at`, a
        request and its answer are watched by the sweep (`_watch`), which aborts a connection past its deadline."""
        origin, request = request_bytes(url, headers, body)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        for reused in (True, False):
            connection = self._take(origin) if reused else None
            if connection is None:
                try:
                    async with asyncio.timeout_at(deadline):
                        connection = await self._open(origin)
                except TimeoutError:
                    raise WireError("ConnectTimeout") from None
                reused = False
            self._watch(loop, connection, deadline)
            try:
                answer = await self._exchange(connection, request, reused)
            finally:
                self._busy.discard(connection)
            if answer is None:
                continue
            if connection.expired:
                connection.close()
                raise WireError("ReadTimeout")
            self._give_back(origin, connection, answer.keep)
            return answer.status
        raise WireError("RemoteProtocolError")

    async def _exchange(self, connection: Connection, request: bytes, reused: bool) -> Answer | None:
        """The answer to a request on a connection, or None when a connection kept from an earlier post failed before
        any answer (a new one is to be tried); WireError otherwise. The connection is closed when it fails."""
        try:
            connection.writer.write(request)
            return await read_answer(connection.reader)
        except WireError as error:
            connection.close()
            if connection.expired:
                raise WireError("ReadTimeout") from None
            if reused and error.reason == "RemoteProtocolError" and connection.reader.at_eof():
                return None
            raise
        except OSError:
            connection.close()
            if connection.expired:
                raise WireError("ReadTimeout") from None
            if reused:
                return None
            raise WireError("ReadError") from None
        except BaseException:
            connection.close()
            raise

    def _watch(self, loop: asyncio.AbstractEventLoop, connection: Connection, deadline: float) -> None:
        """Bound the post about to go on a connection by `deadline`: the sweep runs every tenth of the timeout while
        any post is under way (one timer for them all, where a timer per post cost more than the post's own work)."""
        connection.deadline = deadline
        self._busy.add(connection)
        if self._sweeper is None or self._swept is not loop:
            self._swept = loop
            self._sweeper = loop.call_later(self.timeout / SWEEPS, self._sweep)

    def _sweep(self) -> None:
        """Abort the connections whose post is past its deadline (their reads end at once, as timed out)."""
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        for connection in [c for c in self._busy if c.deadline <= now]:
            self._busy.discard(connection)
            connection.expired = True
            with contextlib.suppress(RuntimeError):  # its event loop is closed
                connection.writer.transport.abort()
        if self._busy:
            self._sweeper = asyncio.get_running_loop().call_later(self.timeout / SWEEPS, self._sweep)

    def _take(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if connection.usable():
                return connection
            connection.close()
        return None

    def _give_back(self, origin: Origin, connection: Connection, keep: bool) -> None:
        idle = self._idle.setdefault(origin, [])
        if not keep or len(idle) >= IDLE_PER_ORIGIN:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        idle.append(connection)

    async def _open(self, origin: Origin) -> Connection:
        """A new connection to the origin, at the first address the policy checked (ConnectError if none is allowed)."""
        addresses = await self.policy.addresses(origin.host, origin.port)
        if addresses is None:
            raise WireError("ConnectError")
        context: ssl.SSLContext | None = None
        if origin.scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            context = self._tls
        try:
            streams = await (self.opener or open_stream)(
                str(addresses[0]), origin.port, context, origin.host if context is not None else None
            )
        except (OSError, ssl.SSLError):
            raise WireError("ConnectError") from None
        return Connection(streams)

    async def close(self) -> None:
        """Close the idle connections (at shutdown)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()


A2A_JSON = "application/a2a+json"


class WebhookPoster:
    """Posts one notification as the SDK's `BasePushNotificationSender` does: the event's `StreamResponse` JSON as
    application/a2a+json, the config's `token` as `X-A2A-Notification-Token` and its `authentication` as
    `Authorization: {scheme} {credentials}`, with the headers the outbox adds (a stable delivery id, the revision).
    The answer is asked not to be compressed and read bounded (`read_answer`), never decompressed."""

    def __init__(self, connections: WebhookConnections) -> None:
        self.connections = connections

    async def post(self, config: TaskPushNotificationConfig, body: bytes, extra: dict[str, str]) -> str | None:
        """None once the receiver answered 2xx or 3xx; else why not."""
        headers = {**extra, "Content-Type": A2A_JSON, "Accept-Encoding": "identity"}
        headers["webhook-timestamp"] = str(int(time.time()))
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        if config.HasField("authentication") and config.authentication.scheme and config.authentication.credentials:
            headers["Authorization"] = f"{config.authentication.scheme} {config.authentication.credentials}"
        try:
            status = await self.connections.post(config.url, headers, body)
        except WireError as failed:
            return failed.reason
        if status >= 400:
            return f"HTTP {status}"
        return None
