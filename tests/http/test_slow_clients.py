"""Slow clients: a request whose line and headers, or whose body, do not arrive within `header_timeout` or
`body_timeout` gets 408 naming the limit and its connection closed; raw sockets on 127.0.0.1 send half requests, a
byte drip and nothing at all, and each connection must be closed within its bound."""

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from uvicorn.server import ServerState

from a2a_bridge.http.read_timeouts import timed
from tests.support import ServerProcess

HEADER_TIMEOUT, BODY_TIMEOUT = 1, 2
MARGIN = 1.5
"""Seconds past a timeout that the close may take on a loaded machine."""
RPC = b"POST /test-runner/a2a/jsonrpc HTTP/1.1\r\nHost: 127.0.0.1\r\n"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    limits = ["--limit", f"header_timeout={HEADER_TIMEOUT}", "--limit", f"body_timeout={BODY_TIMEOUT}"]
    process = ServerProcess("memory", pace=0.01, extra=limits).start()
    yield process
    process.stop()


def until_closed(sock: socket.socket, bound: float, drip: bytes = b"") -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and after how many seconds; fails past `bound`. With
    `drip`, one byte of it is sent every 0.2 s meanwhile (a slow-loris client)."""
    started = time.monotonic()
    received = b""
    sock.settimeout(0.2)
    sent = 0
    while time.monotonic() - started < bound:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if sent < len(drip):
                try:
                    sock.sendall(drip[sent : sent + 1])
                except OSError:
                    return received, time.monotonic() - started
                sent += 1
            continue
        except ConnectionResetError:
            return received, time.monotonic() - started
        if not chunk:
            return received, time.monotonic() - started
        received += chunk
    raise AssertionError(f"the connection was still open after {bound} s")


def timeout_answer(received: bytes) -> dict[str, object]:
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), received[:200]
    assert b"connection: close" in head.lower()
    return json.loads(body)["error"]


def connected(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def test_half_a_head_is_answered_408_and_closed_within_the_header_timeout(server: ServerProcess) -> None:
    with connected(server) as sock:
        sock.sendall(RPC + b"Content-Type: appl")
        received, took = until_closed(sock, HEADER_TIMEOUT + MARGIN)
    assert timeout_answer(received)["limit"] == "header_timeout"
    assert took >= HEADER_TIMEOUT - 0.2


def test_a_connection_that_sends_nothing_is_closed_within_the_header_timeout(server: ServerProcess) -> None:
    with connected(server) as sock:
        received, _ = until_closed(sock, HEADER_TIMEOUT + MARGIN)
    assert timeout_answer(received)["limit"] == "header_timeout"


def test_a_head_dripped_a_byte_at_a_time_is_cut_at_the_header_timeout(server: ServerProcess) -> None:
    with connected(server) as sock:
        sock.sendall(RPC)
        received, _ = until_closed(sock, HEADER_TIMEOUT + MARGIN, drip=b"X-Slow: " + b"a" * 200)
    assert timeout_answer(received)["limit"] == "header_timeout"


def test_half_a_body_is_answered_408_and_closed_within_the_body_timeout(server: ServerProcess) -> None:
    with connected(server) as sock:
        sock.sendall(RPC + b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"jsonrpc\": ")
        received, took = until_closed(sock, BODY_TIMEOUT + MARGIN)
    error = timeout_answer(received)
    assert error["limit"] == "body_timeout" and error["max"] == BODY_TIMEOUT
    assert took >= BODY_TIMEOUT - 0.2, "the body has its own timer, longer than the header's"


def test_a_keep_alive_connections_next_request_has_its_own_header_timeout(server: ServerProcess) -> None:
    with connected(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = b""
        while b"\r\n\r\n" not in first or not first.rstrip().endswith(b"}"):
            first += sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET / HTTP/1.1\r\nHo")
        received, _ = until_closed(sock, HEADER_TIMEOUT + MARGIN)
    assert timeout_answer(received)["limit"] == "header_timeout"


def test_requests_sent_in_time_are_answered(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for _ in range(3):
            assert client.get("/").status_code == 200


class Transport:
    """The little of an asyncio transport the protocol touches, writes kept."""

    def __init__(self) -> None:
        self.written = b""

    def get_extra_info(self, name: str) -> object:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5555)}.get(name)

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.written += data

    def set_protocol(self, _protocol: object) -> None:
        return None

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None

    def close(self) -> None:
        return None


def test_a_request_that_arrives_whole_arms_no_timer_and_a_partial_one_is_timed_from_its_start() -> None:
    answered: asyncio.Queue[None] = asyncio.Queue()

    async def app(_scope: object, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        answered.put_nowait(None)

    async def scenario() -> list[tuple[str | None, float | None]]:
        loop = asyncio.get_running_loop()
        protocol = timed(HEADER_TIMEOUT, BODY_TIMEOUT)(
            config=uvicorn.Config(app, log_level="warning"), server_state=ServerState(), app_state={}, _loop=loop
        )
        seen: list[tuple[str | None, float | None]] = []

        def armed() -> None:
            timer = protocol._timer  # noqa: SLF001 - what the protocol armed is the point of this test
            seen.append((protocol._timed, None if timer is None else timer.when() - loop.time()))  # noqa: SLF001

        protocol.connection_made(Transport())  # type: ignore[arg-type]
        armed()
        body = b'{"jsonrpc": "2.0"}'
        protocol.data_received(RPC + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        armed()
        await asyncio.wait_for(answered.get(), 10)
        protocol.data_received(RPC + b"Content-Length: %d\r\n\r\n" % len(body) + body[:5])
        armed()
        protocol.data_received(body[5:])
        armed()
        await asyncio.wait_for(answered.get(), 10)
        protocol.data_received(RPC[:10])
        armed()
        protocol.connection_lost(None)
        armed()
        return seen

    seen = asyncio.run(scenario())
    assert seen[0][0] == "header_timeout" and 0 < (seen[0][1] or 0) <= HEADER_TIMEOUT
    assert seen[1] == (None, None)
    assert seen[2][0] == "body_timeout" and 0 < (seen[2][1] or 0) <= BODY_TIMEOUT
    assert seen[3] == (None, None)
    assert seen[4][0] == "header_timeout" and 0 < (seen[4][1] or 0) <= HEADER_TIMEOUT
    assert seen[5] == (None, None)
