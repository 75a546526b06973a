"""The load client of `make bench`: HTTP/1.1 keep-alive over raw asyncio protocols (on uvloop where installed), one
request in flight per connection, bounded by a request count and a time limit, on 127.0.0.1 only.

It extends bench/status_poll.py's client (same `Load` and `Run`) with a request per index, so that every SendMessage
carries its own messageId, and a check of each response body; the protocol parser keeps the client's CPU per request
low enough to measure servers that answer tens of thousands of requests a second on one core.
"""

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import cast

from bench.status_poll import HOST, RESPONSE_TIMEOUT, Load, Run, cpu_seconds

RequestFor = Callable[[int], bytes]
"""The bytes of request number `index` of a run."""
Keep = Callable[[int, bytes], None]
"""Called with the index and the body of every response of a run."""


class IncompleteResponse(Exception):
    """The connection closed before a whole response arrived."""


def parse_response(buffer: bytes | bytearray) -> tuple[int, bytes, int] | None:
    """(status, body, bytes consumed) of the first whole response in `buffer`, or None until it is whole.

    Handles Content-Length, chunked transfer coding, and bodiless answers (1xx, 204, 304)."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buffer[:end]).lower()
    status = int(head[9:12])
    start = end + 4
    marker = head.find(b"\r\ncontent-length:")
    if marker >= 0:
        value_end = head.find(b"\r\n", marker + 2)
        length = int(head[marker + 17 : value_end if value_end >= 0 else len(head)])
        if len(buffer) < start + length:
            return None
        return status, bytes(buffer[start : start + length]), start + length
    if b"\r\ntransfer-encoding: chunked" in head:
        return parse_chunked(buffer, status, start)
    return status, b"", start


def parse_chunked(buffer: bytes | bytearray, status: int, start: int) -> tuple[int, bytes, int] | None:
    body = bytearray()
    position = start
    while True:
        line_end = buffer.find(b"\r\n", position)
        if line_end < 0:
            return None
        size = int(bytes(buffer[position:line_end]).split(b";")[0], 16)
        position = line_end + 2
        if size == 0:
            trailer_end = buffer.find(b"\r\n", position)
            return (status, bytes(body), trailer_end + 2) if trailer_end >= 0 else None
        if len(buffer) < position + size + 2:
            return None
        body += buffer[position : position + size]
        position += size + 2


class Connection(asyncio.Protocol):
    """One keep-alive connection: `exchange` sends a request and waits for its whole response."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is None or self.waiter.done():
            return
        parsed = parse_response(self.buffer)
        if parsed is not None:
            status, body, consumed = parsed
            del self.buffer[:consumed]
            self.waiter.set_result((status, body))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or IncompleteResponse())

    def exchange(self, request: bytes) -> "asyncio.Future[tuple[int, bytes]]":
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def drive(
    name: str,
    port: int,
    request_for: RequestFor,
    expected: int,
    load: Load,
    server_pid: int | None = None,
    needle: bytes = b"",
    keep: Keep | None = None,
) -> Run:
    """Send requests over `load.connections` keep-alive connections until `load.requests` or `load.seconds` runs out.

    A response counts as unexpected unless its status is `expected` and its body holds `needle`."""
    run = Run(name)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + load.seconds
    issued = 0

    async def connection() -> None:
        nonlocal issued
        _, protocol = await loop.create_connection(Connection, HOST, port)
        try:
            while issued < load.requests and loop.time() < deadline:
                index = issued
                issued += 1
                sent = time.perf_counter()
                status, body = await protocol.exchange(request_for(index))
                run.latencies.append(time.perf_counter() - sent)
                run.completed += 1
                if status != expected or needle not in body:
                    run.unexpected += 1
                if keep is not None:
                    keep(index, body)
        finally:
            protocol.close()

    server_before, server_waited = cpu_seconds(server_pid), wait_seconds(server_pid)
    client_before, client_waited = time.process_time(), wait_seconds(os.getpid())
    started = time.perf_counter()
    connections = [asyncio.ensure_future(connection()) for _ in range(load.connections)]
    try:
        await asyncio.wait_for(asyncio.gather(*connections), load.seconds + RESPONSE_TIMEOUT)
    finally:
        for job in connections:
            job.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*connections, return_exceptions=True)
    run.elapsed = time.perf_counter() - started
    run.server_cpu = (cpu_seconds(server_pid) - server_before) / run.elapsed
    run.client_cpu = (time.process_time() - client_before) / run.elapsed
    run.server_wait = (wait_seconds(server_pid) - server_waited) / run.elapsed
    run.client_wait = (wait_seconds(os.getpid()) - client_waited) / run.elapsed
    return run


async def sse_events(reader: asyncio.StreamReader) -> AsyncIterator[tuple[bytes, int]]:
    """Each event of a chunked `text/event-stream` body (the head already read) with the wall-clock time, in
    nanoseconds, of the chunk that completed it; ends with the body's last chunk."""
    pending = b""
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        chunk = (await reader.readexactly(size + 2))[:-2]
        arrival = time.time_ns()
        pending = (pending + chunk).replace(b"\r\n", b"\n")
        *complete, pending = pending.split(b"\n\n")
        for event in complete:
            yield event, arrival


def wait_seconds(pid: int | None) -> float:
    """Seconds the threads of a process have spent runnable but waiting for a CPU, from /proc/PID/task/*/schedstat
    (0 where it is absent); threads that ended, and a process that ended while they were read, are not counted."""
    if pid is None:
        return 0.0
    total = 0
    with contextlib.suppress(OSError):  # the process ended while its threads were listed
        for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(stat.read_text().split()[1])
    return total / 1e9


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's event loop where it is installed (on CPython outside Windows), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop
