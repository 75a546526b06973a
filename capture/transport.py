"""An httpx transport that records the traffic of a client the capture does not drive itself (the planner, on the
SDK's client) as transcript blocks.

The client addresses the kit's hosts (`http://localhost:41241`…); the transport sends each request to the capture
server's loopback port for that host, with the kit's Host header, and refuses any other address. Two things are
rewritten on the wire so that a capture is repeatable: a JSON-RPC request's `id` (the SDK draws a UUID) becomes the
transcript's own count, 1, 2, … (the SDK does not read the `id` of a reply), and a JSON request body is sent
pretty-printed as the kit writes bodies. What is recorded is what was sent; replies are recorded as the driver
records them (protobuf maps with sorted keys), and a stream's events as the client reads them. A request made while
a stream is open is written inside that stream, after the events read so far (07's approval).
"""

import codecs
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from a2a_bridge.capture.driver import canonical, response_head
from a2a_bridge.capture.transcript import SSE_MEDIA_TYPE, Headers, Request, Response
from a2a_bridge.capture.writer import Recorded, compact, pretty

UNRECORDED_REQUEST_HEADERS = frozenset({"host", "content-length", "accept-encoding", "connection", "user-agent"})
"""Request headers the HTTP client adds on its own; an `Accept: */*` is left out too."""
TITLE = "capture_title"
"""The request extension that names a block (`client.post(url, extensions={TITLE: "operator approves"})`)."""


class RecordingTransport(httpx.AsyncBaseTransport):
    """Sends requests for the kit's origins to the capture server and records each exchange as a block."""

    def __init__(self, routes: dict[str, str], agents: dict[str, str], inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.routes = routes
        """The kit origin (`http://localhost:41241`) → the live base URL that serves it."""
        self.agents = agents
        """The kit host (`localhost:41241`) → the agent's name, for block titles."""
        self.inner = inner or httpx.AsyncHTTPTransport()
        self.blocks: list[Recorded] = []
        self._open: list[_Tap] = []
        self._rpc_ids = itertools.count(1)

    def _label(self) -> str:
        return str(1 + sum(1 + len(block.inside) for block in self.blocks))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.netloc.decode()
        base = self.routes.get(f"{request.url.scheme}://{host}")
        if base is None:
            raise httpx.ConnectError(f"{request.url} is not a kit host of the capture server", request=request)
        text = self._numbered((await request.aread()).decode())
        headers = [
            (name.title(), value)
            for name, value in request.headers.items()
            if name not in UNRECORDED_REQUEST_HEADERS and (name, value) != ("accept", "*/*")
        ]
        target = request.url.raw_path.decode()
        sent = httpx.Request(
            request.method, base + target, headers=[("Host", host), *headers], content=text.encode() if text else None
        )
        live = await self.inner.handle_async_request(sent)
        recorded_request = Request(request.method, target, "HTTP/1.1", Headers((("Host", host), *headers)), text)
        title = str(request.extensions.get(TITLE) or self._title(host, request.method, target, text))
        block = Recorded(self._label(), title, recorded_request)
        if self._open:
            tap = self._open[-1]
            tap.block.inside.append((len(tap.frames), block))
        else:
            self.blocks.append(block)
        version, status, reason, kept = response_head(live)
        if kept.media_type == SSE_MEDIA_TYPE:
            block.response = Response(version, status, reason, kept)
            tap = _Tap(self, block, live.stream)
            self._open.append(tap)
            return httpx.Response(live.status_code, headers=live.headers, stream=tap, request=request, extensions=live.extensions)
        body = await live.aread()
        await live.aclose()
        block.response = Response(version, status, reason, kept, _shown(body.decode()))
        return httpx.Response(live.status_code, headers=live.headers, content=body, request=request, extensions=live.extensions)

    def _numbered(self, text: str) -> str:
        """A JSON body pretty-printed, with a JSON-RPC request's id replaced by the next number; other text as it is."""
        try:
            body = json.loads(text) if text else None
        except ValueError:
            return text
        if isinstance(body, dict) and body.get("jsonrpc") == "2.0" and "id" in body:
            body["id"] = next(self._rpc_ids)
        return pretty(body) if body is not None else text

    def _title(self, host: str, method: str, target: str, text: str) -> str:
        agent = self.agents.get(host, host)
        try:
            body = json.loads(text) if text else None
        except ValueError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("method"), str):
            return f"{agent}: {body['method']}"
        return f"{agent}: {method} {target.split('?', 1)[0]}"

    async def aclose(self) -> None:
        await self.inner.aclose()


def _shown(text: str) -> str:
    """A reply body as the driver records it: JSON pretty-printed with the keys of protobuf maps sorted."""
    try:
        return pretty(canonical(json.loads(text)))
    except ValueError:
        return text


class _Tap(httpx.AsyncByteStream):
    """A live event stream passed on to the client, each event recorded before the client sees it."""

    def __init__(self, transport: RecordingTransport, block: Recorded, inner: Any) -> None:
        self.transport = transport
        self.block = block
        self.inner = inner
        self.frames: list[str] = []
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._pending = ""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.inner:
                self._read(self._decoder.decode(chunk))
                yield chunk
        finally:
            self._closed()

    def _read(self, text: str) -> None:
        """Record every event completed by this piece of the stream."""
        self._pending = (self._pending + text).replace("\r\n", "\n")
        while "\n\n" in self._pending:
            event, self._pending = self._pending.split("\n\n", 1)
            data = [line[len("data:"):].strip() for line in event.split("\n") if line.startswith("data:")]
            if data:
                self.frames.append(compact(canonical(json.loads("\n".join(data)))))
        response = self.block.response
        assert response is not None
        self.block.response = Response(response.version, response.status, response.reason, response.headers, frames=tuple(self.frames))

    def _closed(self) -> None:
        if self in self.transport._open:
            self.transport._open.remove(self)

    async def aclose(self) -> None:
        self._closed()
        await self.inner.aclose()
