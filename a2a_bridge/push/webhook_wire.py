"""Webhooks' HTTP/1.1 on asyncio connections of our own (`webhook_connection`): keep-alive connections per receiver
origin, each opened only to an address the webhook policy allows (the host resolved once and connected to at the
address checked, so a DNS answer that changes after the check cannot redirect it), TLS for https (the default trust
store, the URL's host verified), a POST written as bytes, and of the answer its status line and a bounded head; a body
is read only when it is small and whole (else the connection is closed unread), never decompressed; and the poster of
one notification over them."""

import asyncio
import contextlib
import functools
import ssl
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from a2a.types import TaskPushNotificationConfig

from a2a_bridge.push.webhook_connection import Connection, WireError, open_connection
from a2a_bridge.push.webhooks import WebhookPolicy

IDLE_PER_ORIGIN = 64
"""Idle keep-alive connections kept per receiver origin; more are closed."""
SWEEPS = 10
"""How often per timeout the posts under way are checked for their deadline: a post times out at most a tenth of the
timeout late."""
PATH_SAFE = "/%:@!$&'()*+,;=-._~"
"""Characters of a URL's path and query sent as they are; others are percent-encoded."""

Opener = Callable[[str, int, ssl.SSLContext | None, str | None], Awaitable[Connection]]


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int


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
    if fields.count("\r") != lines or fields.count("\n") != lines or "\0" in fields:
        raise WireError("LocalProtocolError")  # a CR, LF or NUL in a name or value would end it, or the head, early
    try:
        head = f"{start[1]}Content-Length: {len(body)}\r\n{fields}\r\n".encode("latin-1")
    except UnicodeEncodeError:
        raise WireError("LocalProtocolError") from None
    return start[0], head + body


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
        """How a connection is opened (None: `open_connection`, looked up at each call)."""
        self._idle: dict[Origin, list[Connection]] = {}
        self._tls = tls
        self._busy: set[Connection] = set()
        """The connections with a post under way."""
        self._sweeper: asyncio.TimerHandle | None = None
        self._swept: asyncio.AbstractEventLoop | None = None
        """The event loop the sweep is scheduled on (a post on another one schedules it there)."""

    async def post(self, url: str, headers: dict[str, str], body: bytes) -> int:
        """POST `body` to `url` with `headers`: the receiver's status, or WireError. A connection kept from an earlier
        post that the receiver closed before any answer is replaced by a new one once (it may have closed it idle). The
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
                answer = await connection.exchange(request)
            except WireError:
                self._busy.discard(connection)
                connection.close()
                if connection.expired:
                    raise WireError("ReadTimeout") from None
                if reused and connection.ended:
                    continue
                raise
            except BaseException:
                self._busy.discard(connection)
                connection.close()
                raise
            self._busy.discard(connection)
            if connection.expired:
                connection.close()
                raise WireError("ReadTimeout")
            self._give_back(origin, connection, answer.keep)
            return answer.status
        raise WireError("RemoteProtocolError")

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
                connection.abort()
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
            return await (self.opener or open_connection)(
                str(addresses[0]), origin.port, context, origin.host if context is not None else None
            )
        except (OSError, ssl.SSLError):
            raise WireError("ConnectError") from None

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
