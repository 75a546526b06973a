"""A bounded shutdown. On SIGTERM (or Ctrl-C) the server stops accepting connections and ends every open event stream
at once (the events sent stay whole, the chunked body is closed, so a client sees a stream that ended, not a broken
connection); requests in flight get half of `shutdown_timeout`, after which uvicorn cancels them (503 for those not
answered yet); then the app's
lifespan shutdown runs (each agent's host stops, queued webhooks drain) in what is left. Past `shutdown_timeout`
the server stops waiting and the process ends.

`Draining` is the only thing that ends event streams: sse-starlette (the SDK's event streams) would end its own at a
shutdown too, by a watcher it starts on a patch of uvicorn's `handle_exit`, but without closing the chunked body, so
a client whose stream it ended first saw a broken connection; `BoundedServer` turns that drain off."""

import asyncio
import logging
import socket
from types import FrameType

import uvicorn
from sse_starlette.sse import AppStatus
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

EVENT_STREAM = b"text/event-stream"
UNAVAILABLE = {"error": {"code": 503, "status": "UNAVAILABLE", "message": "The server is shutting down; try again"}}


class Draining:
    """ASGI, outermost: once the shutdown begins (`begin`), ends every open event stream, and answers a request that
    uvicorn cancels before it answered (past the grace period) with 503 rather than uvicorn's bare 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.stopping = False
        self.streams: set[asyncio.Task[object]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        task = asyncio.current_task()
        assert task is not None
        started = streaming = ended = False

        async def watched(message: Message) -> None:
            nonlocal started, streaming, ended
            if message["type"] == "http.response.start":
                started = True
                for name, value in message.get("headers", []):
                    if name == b"content-type" and value.startswith(EVENT_STREAM):
                        streaming = True
                        self.streams.add(task)
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                ended = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError:
            if not self.stopping or (started and not streaming):
                raise
            task.uncancel()
            if not started:
                await JSONResponse(UNAVAILABLE, 503, headers={"Retry-After": "5"})(scope, receive, send)
            elif not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.streams.discard(task)

    def begin(self) -> int:
        """The shutdown begins: cancel every open stream's app, each then closing its response; how many there
        were."""
        self.stopping = True
        for task in self.streams:
            task.cancel()
        return len(self.streams)


class BoundedServer(uvicorn.Server):
    """uvicorn's server whose shutdown ends the open streams first and takes at most `limit` seconds; a signal to one
    of a group of servers (the kit ports) stops them all."""

    def __init__(self, config: uvicorn.Config, draining: Draining, limit: float, group: list["BoundedServer"]) -> None:
        config.timeout_graceful_shutdown = max(limit / 2, 0.1)
        AppStatus.disable_automatic_graceful_drain()
        super().__init__(config)
        self.draining = draining
        self.limit = limit
        self.group = group
        group.append(self)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        for server in self.group:
            if server is self or not server.should_exit:
                uvicorn.Server.handle_exit(server, sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        ended = self.draining.begin()
        if ended:
            log.info("shutting down: ended %d open stream(s)", ended)
        try:
            async with asyncio.timeout(self.limit):
                await super().shutdown(sockets)
        except TimeoutError:
            log.error("shutdown took longer than %g s (shutdown_timeout); the process ends now", self.limit)
