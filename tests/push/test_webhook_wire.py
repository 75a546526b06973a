"""The webhook poster on raw asyncio streams, against receivers on 127.0.0.1 that answer as each test sets: keep-alive
connections reused, a receiver's 500, a connection the receiver closed, answers too slow or too large (bounded), a
header that would split the request, and TLS to an https receiver."""

import asyncio
import shutil
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from a2a.types import TaskPushNotificationConfig

from a2a_bridge.core.config import parse_network
from a2a_bridge.push.webhook_connection import HEAD_BYTES, WireError, parse_head
from a2a_bridge.push.webhook_wire import WebhookConnections, WebhookPoster
from a2a_bridge.push.webhooks import WebhookPolicy

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def loopback_policy() -> WebhookPolicy:
    async def resolve(host: str, port: int) -> list[str]:
        assert host == "hooks.test"
        return ["127.0.0.1"]

    return WebhookPolicy((parse_network("127.0.0.1/32", "test"),), resolve)


class Receiver:
    """What a loopback receiver saw: its connections and each request (head, body)."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.closed = asyncio.Event()
        """Set when the bridge's side closed a connection."""

    async def request(self, reader: asyncio.StreamReader) -> bool:
        """Read one request; False once the connection is closed."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            self.closed.set()
            return False
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        self.requests.append((head, await reader.readexactly(length)))
        return True


@asynccontextmanager
async def receiving(answer: Callable[[Receiver, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
                    tls: ssl.SSLContext | None = None) -> AsyncIterator[tuple[Receiver, int]]:
    seen = Receiver()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.connections += 1
        try:
            await answer(seen, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            seen.closed.set()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls)
    async with server:
        yield seen, server.sockets[0].getsockname()[1]


async def keep_alive(seen: Receiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await seen.request(reader):
        writer.write(OK)
        await writer.drain()


def config(url: str, token: str = "") -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(task_id="task-1", id="hook-1", url=url, token=token)


@pytest.mark.anyio
async def test_posts_reuse_one_keep_alive_connection_and_carry_the_headers() -> None:
    async with receiving(keep_alive) as (seen, port):
        poster = WebhookPoster(WebhookConnections(loopback_policy()))
        for number in range(5):
            assert await poster.post(config(f"http://hooks.test:{port}/a2a?n={number}", "t0k"), b'{"n":%d}' % number,
                                     {"webhook-id": f"id-{number}"}) is None
    assert seen.connections == 1
    assert [body for _, body in seen.requests] == [b'{"n":%d}' % n for n in range(5)]
    head = seen.requests[0][0].decode()
    assert head.startswith("POST /a2a?n=0 HTTP/1.1\r\n")
    for line in (f"Host: hooks.test:{port}", "Content-Type: application/a2a+json", "Accept-Encoding: identity",
                 "X-A2A-Notification-Token: t0k", "webhook-id: id-0", "Content-Length: 7"):
        assert f"\r\n{line}\r\n" in head, line


@pytest.mark.anyio
async def test_an_error_status_is_the_reason_and_the_connection_is_kept() -> None:
    async def failing(seen: Receiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await seen.request(reader):
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\nerror")

    async with receiving(failing) as (seen, port):
        poster = WebhookPoster(WebhookConnections(loopback_policy()))
        assert await poster.post(config(f"http://hooks.test:{port}/h"), b"{}", {}) == "HTTP 500"
        assert await poster.post(config(f"http://hooks.test:{port}/h"), b"{}", {}) == "HTTP 500"
    assert seen.connections == 1


@pytest.mark.anyio
async def test_a_connection_the_receiver_closed_while_idle_is_replaced() -> None:
    async def one_each(seen: Receiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await seen.request(reader):
            writer.write(OK)
            await writer.drain()

    async with receiving(one_each) as (seen, port):
        connections = WebhookConnections(loopback_policy())
        assert await connections.post(f"http://hooks.test:{port}/h", {}, b"1") == 200
        await asyncio.sleep(0)
        assert await connections.post(f"http://hooks.test:{port}/h", {}, b"2") == 200
    assert [body for _, body in seen.requests] == [b"1", b"2"]
    assert seen.connections == 2


@pytest.mark.anyio
async def test_a_new_connection_closed_without_an_answer_fails_the_post() -> None:
    async def hang_up(seen: Receiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await seen.request(reader)

    async with receiving(hang_up) as (_, port):
        with pytest.raises(WireError, match="RemoteProtocolError"):
            await WebhookConnections(loopback_policy()).post(f"http://hooks.test:{port}/h", {}, b"{}")


@pytest.mark.anyio
async def test_a_receiver_that_never_answers_times_out() -> None:
    async def silent(seen: Receiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await seen.request(reader)
        await asyncio.sleep(30)

    async with receiving(silent) as (_, port):
        began = time.monotonic()
        with pytest.raises(WireError, match="ReadTimeout"):
            await WebhookConnections(loopback_policy(), timeout=0.5).post(f"http://hooks.test:{port}/h", {}, b"{}")
        assert time.monotonic() - began < 5


@pytest.mark.anyio
@pytest.mark.parametrize("framing", [b"Content-Length: 104857600", b"Transfer-Encoding: chunked"])
async def test_a_huge_answer_is_not_read_and_its_connection_is_closed(framing: bytes) -> None:
    """The receiver would stream 100 MiB: the post has its status from the head and closes the connection at once."""
    sent = 0

    async def flood(seen: Receiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await seen.request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n" + framing + b"\r\n\r\n")
        chunk = b"0" * 65536
        while sent < 100 * 1024 * 1024:
            writer.write(b"10000\r\n" + chunk + b"\r\n" if b"chunked" in framing else chunk)
            sent += len(chunk)
            await writer.drain()

    async with receiving(flood) as (seen, port):
        connections = WebhookConnections(loopback_policy())
        assert await connections.post(f"http://hooks.test:{port}/h", {}, b"{}") == 200
        await asyncio.wait_for(seen.closed.wait(), 10)
        assert await connections.post(f"http://hooks.test:{port}/h", {}, b"{}") == 200
    assert sent < 100 * 1024 * 1024
    assert seen.connections == 2


@pytest.mark.anyio
@pytest.mark.parametrize("token", ["t\r\nX-Injected: 1", "t\nX-Injected: 1", "t\rX", "t\0"])
async def test_a_header_that_would_split_the_request_is_not_sent(token: str) -> None:
    async with receiving(keep_alive) as (seen, port):
        poster = WebhookPoster(WebhookConnections(loopback_policy()))
        reason = await poster.post(config(f"http://hooks.test:{port}/h", token), b"{}", {})
    assert reason == "LocalProtocolError"
    assert seen.connections == 0


def answering(*parts: bytes) -> Callable[[Receiver, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A receiver that answers each request with `parts`, each written and drained on its own."""

    async def answer(seen: Receiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await seen.request(reader):
            for part in parts:
                writer.write(part)
                await writer.drain()

    return answer


@pytest.mark.anyio
async def test_an_answer_in_pieces_after_interim_heads_is_read_and_its_connection_kept() -> None:
    pieces = [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 102 Processing\r\n", b"\r\n", b"HTTP/1.1 2", b"01 Created\r",
              b"\nContent-Length: 7\r\n\r", b"\n", b"cre", b"ated"]
    async with receiving(answering(*pieces)) as (seen, port):
        connections = WebhookConnections(loopback_policy())
        for body in (b"1", b"2", b"3"):
            assert await connections.post(f"http://hooks.test:{port}/h", {}, body) == 201
    assert seen.connections == 1


@pytest.mark.anyio
@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 100 Continue\r\n\r\n" * 4 + OK,
    b"HTTP/1.1 200 OK\r\nX-Filler: " + b"x" * HEAD_BYTES + b"\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX-Filler: " + b"x" * HEAD_BYTES,
])
async def test_too_many_interim_heads_or_too_long_a_head_fail_the_post(answer: bytes) -> None:
    async with receiving(answering(answer)) as (seen, port):
        with pytest.raises(WireError, match="RemoteProtocolError"):
            await WebhookConnections(loopback_policy()).post(f"http://hooks.test:{port}/h", {}, b"{}")
        await asyncio.wait_for(seen.closed.wait(), 10)


@pytest.mark.anyio
async def test_a_body_cut_short_still_has_its_status_and_the_connection_is_not_kept() -> None:
    async def cut(seen: Receiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await seen.request(reader):
            writer.write(b"HTTP/1.1 503 Unavailable\r\nContent-Length: 100\r\n\r\nnot all of it")
            await writer.drain()

    async with receiving(cut) as (seen, port):
        poster = WebhookPoster(WebhookConnections(loopback_policy()))
        assert await poster.post(config(f"http://hooks.test:{port}/h"), b"1", {}) == "HTTP 503"
        assert await poster.post(config(f"http://hooks.test:{port}/h"), b"2", {}) == "HTTP 503"
    assert seen.connections == 2


@pytest.mark.anyio
async def test_bytes_beyond_the_answer_or_while_idle_close_the_connection() -> None:
    """A receiver that sends more than the answer it was asked for is not trusted with the next request."""
    async with receiving(answering(OK + b"HTTP/1.1 200 OK\r\n")) as (seen, port):
        connections = WebhookConnections(loopback_policy())
        assert await connections.post(f"http://hooks.test:{port}/h", {}, b"1") == 200
        assert await connections.post(f"http://hooks.test:{port}/h", {}, b"2") == 200
    assert seen.connections == 2
    async with receiving(answering(OK, b"HTTP/1.1 200 OK\r\n")) as (seen, port):
        connections = WebhookConnections(loopback_policy())
        assert await connections.post(f"http://hooks.test:{port}/h", {}, b"1") == 200
        await asyncio.wait_for(seen.closed.wait(), 10)
        assert await connections.post(f"http://hooks.test:{port}/h", {}, b"2") == 200
    assert seen.connections == 2


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for hooks.test and its key, made by the openssl command."""
    certificate, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(certificate),
         "-days", "1", "-subj", "/CN=hooks.test", "-addext", "subjectAltName=DNS:hooks.test"],
        check=True, capture_output=True, timeout=60,
    )
    return certificate, key


@pytest.mark.anyio
@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command makes the test certificate")
async def test_an_https_receiver_is_reached_over_tls_and_its_name_verified(tmp_path: Path) -> None:
    certificate, key = self_signed(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(certificate, key)
    trusting = ssl.create_default_context(cafile=str(certificate))
    async with receiving(keep_alive, server_tls) as (seen, port):
        connections = WebhookConnections(loopback_policy(), tls=trusting)
        assert await connections.post(f"https://hooks.test:{port}/h", {}, b"secret") == 200
        assert await connections.post(f"https://hooks.test:{port}/h", {}, b"again") == 200
        with pytest.raises(WireError, match="ConnectError"):
            await WebhookConnections(loopback_policy()).post(f"https://hooks.test:{port}/h", {}, b"untrusted")
    assert [body for _, body in seen.requests] == [b"secret", b"again"]


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\n",
    b"HTTP/1.0 200 OK\r\ncontent-length:3\r\n\r\n",
    b"HTTP/1.1 500\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
])
def test_an_answer_head_is_read_for_its_status_framing_and_keep_alive(head: bytes) -> None:
    status, keep, length, chunked = parse_head(head)
    expected = {
        b"HTTP/1.1 204": (204, True, None, False), b"HTTP/1.1 200": (200, False, 3, False),
        b"HTTP/1.0 200": (200, False, 3, False), b"HTTP/1.1 500": (500, True, None, True),
    }[head[:12]]
    assert (status, keep, length, chunked) == expected


@pytest.mark.parametrize("head", [b"HTTP/2 200\r\n\r\n", b"HTTP/1.1 20\r\n\r\n", b"SSH-2.0-OpenSSH\r\n\r\n"])
def test_a_head_that_is_not_http_1_fails(head: bytes) -> None:
    with pytest.raises(WireError, match="RemoteProtocolError"):
        parse_head(head)
