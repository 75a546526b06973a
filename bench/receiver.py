"""The webhook receiver of `make bench`'s push section: a bare HTTP/1.1 server on raw asyncio protocols (uvloop where
installed), run as a process of its own (`python -m bench.receiver PORT`, pinned with the load client), so that it is
not what limits the bridge's deliveries.

Every POST is answered 200 with an empty body at once. A POST carrying a task's terminal status update is timed: its
delivery lag is the wall-clock time the receiver writes its 2xx minus the status's `timestamp` in the body (set by the
server when the agent's last status is made, just before the save that commits it; same machine, same clock).
`GET /stats` answers what was received so far as JSON (`posts`, `terminal`, `lags_us`); `GET /stats?clear` empties
it after answering. Only 127.0.0.1 is listened on.
"""

import asyncio
import contextlib
import json
import re
import sys
import time
from datetime import datetime
from typing import cast

HOST = "127.0.0.1"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
TERMINAL = re.compile(rb'"state":\s*"TASK_STATE_(?:COMPLETED|FAILED|CANCELED|REJECTED)"')
STAMP = re.compile(rb'"timestamp":\s*"([^"]+)"')
MAX_HEAD = 16_384
"""Bytes of a request's head read at the most (a longer one closes the connection)."""


class Stats:
    """What the receiver was sent since it started or was last cleared."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.posts = 0
        self.terminal = 0
        self.lags_us: list[int] = []

    def posted(self, body: bytes, answered_ns: int) -> None:
        self.posts += 1
        if b'"statusUpdate"' not in body or TERMINAL.search(body) is None or (stamp := STAMP.search(body)) is None:
            return
        self.terminal += 1
        made = datetime.fromisoformat(stamp.group(1).decode()).timestamp()
        self.lags_us.append(answered_ns // 1000 - round(made * 1e6))

    def answer(self, clear: bool) -> bytes:
        body = json.dumps({"posts": self.posts, "terminal": self.terminal, "lags_us": self.lags_us}).encode()
        if clear:
            self.clear()
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class Receiver(asyncio.Protocol):
    """One keep-alive connection: requests parsed from the buffer as they complete, answered in order."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = bytes(self.buffer[:end]).lower()
            marker = head.find(b"\r\ncontent-length:")
            value_end = head.find(b"\r\n", marker + 2)
            length = int(head[marker + 17 : value_end if value_end >= 0 else len(head)]) if marker >= 0 else 0
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            if head.startswith(b"post "):
                self.transport.write(OK)
                self.stats.posted(body, time.time_ns())
            elif head.startswith(b"get /stats"):
                self.transport.write(self.stats.answer(clear=head.startswith(b"get /stats?clear")))
            else:
                self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        if len(self.buffer) > MAX_HEAD:
            self.transport.close()


async def serve(port: int) -> None:
    stats = Stats()
    server = await asyncio.get_running_loop().create_server(lambda: Receiver(stats), HOST, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    port = int(sys.argv[1])
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(port))


if __name__ == "__main__":
    main()
