"""An answer's head written with its body (`one_write`): the same bytes as uvicorn's own protocol writes, in one
transport write where the answer has a body of known length; a stream's head, a HEAD answer's, a `100 Continue` and
the head of an answer that fails before its body are written at once, as uvicorn writes them."""

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from a2a_bridge.http.one_write import OneWriteProtocol

App = Callable[[Any, Any, Any], Awaitable[None]]
BODY = b'{"result": "ok"}'
POST = b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"


class Transport:
    """A transport that records each write apart."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def get_extra_info(self, _name: str, default: object = None) -> object:
        return default

    def set_protocol(self, _protocol: object) -> None:
        return None

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


async def json_answer(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY})


async def failing_answer(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    raise RuntimeError("the app failed after its head")


def writes(protocol_class: type[HttpToolsProtocol], app: App, request: bytes) -> tuple[list[bytes], bool]:
    """The transport writes of one request's answer through `protocol_class`, and whether it closed the transport."""

    async def scenario() -> tuple[list[bytes], bool]:
        loop = asyncio.get_running_loop()
        config = uvicorn.Config(app, log_level="critical")
        config.load()
        state = ServerState()
        protocol = protocol_class(config=config, server_state=state, app_state={}, _loop=loop)
        transport = Transport()
        protocol.connection_made(transport)  # type: ignore[arg-type]
        protocol.data_received(request)
        await asyncio.gather(*state.tasks)
        return transport.writes, transport.closed

    return asyncio.run(scenario())


def test_an_answer_with_a_body_is_one_write_of_the_bytes_uvicorn_writes_in_two() -> None:
    stock, _ = writes(HttpToolsProtocol, json_answer, POST + b"\r\n{}")
    one, _ = writes(OneWriteProtocol, json_answer, POST + b"\r\n{}")
    assert len(stock) == 2
    assert one == [b"".join(stock)]
    assert one[0].endswith(b"\r\n\r\n" + BODY)


def test_a_head_answer_and_a_100_continue_are_written_as_uvicorn_writes_them() -> None:
    head = b"HEAD /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    assert writes(OneWriteProtocol, json_answer, head) == writes(HttpToolsProtocol, json_answer, head)
    expecting = POST + b"Expect: 100-continue\r\n\r\n{}"
    one, _ = writes(OneWriteProtocol, json_answer, expecting)
    stock, _ = writes(HttpToolsProtocol, json_answer, expecting)
    assert one[0] == stock[0] == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert one[1:] == [b"".join(stock[1:])]


def test_a_head_held_for_a_body_that_never_comes_is_written_before_the_connection_closes() -> None:
    stock, stock_closed = writes(HttpToolsProtocol, failing_answer, POST + b"\r\n{}")
    one, one_closed = writes(OneWriteProtocol, failing_answer, POST + b"\r\n{}")
    assert stock_closed and one_closed
    assert one == stock
    assert one[0].startswith(b"HTTP/1.1 200 OK\r\n")


@pytest.fixture
def streaming_server() -> Iterator[tuple[int, threading.Event]]:
    """A real uvicorn on 127.0.0.1 with the protocol, answering a stream whose first part waits for the test."""
    release = threading.Event()

    async def stream(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)
        await send({"type": "http.response.body", "body": b"data: 1\n\n"})

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(stream, host="127.0.0.1", port=port, http=OneWriteProtocol,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run)
    thread.start()
    while not server.started:
        threading.Event().wait(0.01)
    yield port, release
    release.set()
    server.should_exit = True
    thread.join(10)


def test_a_streams_head_reaches_the_client_before_its_first_part(streaming_server: tuple[int, threading.Event]) -> None:
    port, release = streaming_server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(65536)
        assert received.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"transfer-encoding: chunked" in received
        assert received.endswith(b"\r\n\r\n")
        release.set()
        while not received.endswith(b"0\r\n\r\n"):
            received += sock.recv(65536)
    assert b"data: 1\n\n" in received
