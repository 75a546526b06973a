"""Request limits in front of an agent's routes: the body's size, its JSON (valid UTF-8, not nested past what a
parser can read), and the streams each principal holds open. What a caller gets past each is in docs/security.md."""

import json
from collections.abc import Callable
from typing import Any

from a2a.server.jsonrpc_models import JSONParseError
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.utils.errors import InvalidParamsError, InvalidRequestError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from a2a_bridge.auth import route_path
from a2a_bridge.config import Limits

STREAM_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask"})
STREAM_SUFFIXES = ("/message:stream", ":subscribe", "/status/stream")
"""REST and bridge paths whose answer is a stream."""
INVALID_JSON = "Invalid JSON payload"
NUL_REFUSED = "strings must not contain U+0000 (NUL), which the stores cannot hold"
PARSED_BODY = "a2a_bridge.parsed_body"
"""The scope key under which `RequestLimits` leaves the body it parsed (None when empty or not JSON) for the app."""


class StreamSlots:
    """How many streams each principal holds open, shared by every agent of a bridge."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def take(self, who: str) -> bool:
        """Count one more stream for `who`; False (and nothing counted) at the limit."""
        held = self._open.get(who, 0)
        if held >= self.limit:
            return False
        self._open[who] = held + 1
        return True

    def give(self, who: str) -> None:
        held = self._open.get(who, 0) - 1
        if held > 0:
            self._open[who] = held
        else:
            self._open.pop(who, None)


def read_json(body: bytes) -> tuple[Any, bool]:
    """The parsed body (None when it is not JSON the app could read), and whether it must be refused as unreadable:
    not strict UTF-8 (json.loads would take UTF-16 or encoded surrogates, which protobuf's parser then fails on with a
    500), or nested deeper than Python's parser goes."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None, True
    try:
        return json.loads(text), False
    except RecursionError:
        return None, True
    except ValueError:
        return None, False


def holds_nul(value: Any) -> bool:
    """Whether any string in a parsed JSON value (keys included) holds U+0000; iterative, so any depth json.loads
    accepted is walked."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def nul_in_target(scope: Scope) -> bool:
    """Whether the request's path or query names U+0000 (as %00 or decoded)."""
    return "\x00" in str(scope["path"]) or b"%00" in bytes(scope.get("query_string", b""))


class RequestLimits:
    """Refuses, before any route runs: a body over `max_body_bytes` (413), a body that is not UTF-8 or too deeply
    nested to parse (JSON-RPC -32700, otherwise 400), a U+0000 in the path, query or any string of the body
    (JSON-RPC -32602, otherwise 400), and a stream past the caller's `max_streams` (429). Leaves the body it parsed in
    the scope (`PARSED_BODY`), so that the app behind need not parse it again."""

    def __init__(
        self,
        app: ASGIApp,
        limits: Limits,
        slots: StreamSlots,
        principal: Callable[[Scope], str],
        jsonrpc_path: str,
    ) -> None:
        self.app = app
        self.limits = limits
        self.slots = slots
        self.principal = principal
        self.jsonrpc_path = jsonrpc_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        rpc = path.rstrip("/").endswith(self.jsonrpc_path)
        body = await self._read(scope, receive)
        if body is None:
            await self._refuse(scope, receive, send, rpc, 413, "Request body too large", "max_body_bytes")
            return
        parsed: Any = None
        if body:
            parsed, unreadable = read_json(body)
            if unreadable:
                await self._unreadable(scope, receive, send, rpc)
                return
        if nul_in_target(scope) or (b"\\u0000" in body and holds_nul(parsed)):
            await self._nul(scope, receive, send, rpc, parsed)
            return
        method = parsed.get("method") if rpc and isinstance(parsed, dict) else None
        streaming = path.endswith(STREAM_SUFFIXES) or (isinstance(method, str) and method in STREAM_METHODS)
        scope[PARSED_BODY] = parsed
        replay = _replaying(body, receive)
        if not streaming:
            await self.app(scope, replay, send)
            return
        who = self.principal(scope)
        if not self.slots.take(who):
            await self._refuse(scope, receive, send, rpc, 429, "Too many open streams", "max_streams")
            return
        try:
            await self.app(scope, replay, send)
        finally:
            self.slots.give(who)

    async def _read(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None once it passes the limit (by Content-Length or by what arrives)."""
        limit = self.limits.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    if int(value) > limit:
                        return None
                except ValueError:
                    return None
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, rpc: bool, status: int, message: str, limit: str
    ) -> None:
        detail = {"limit": limit, "max": getattr(self.limits, limit)}
        if rpc:
            body = build_error_response(None, InvalidRequestError(message, data=detail))
        else:
            body = {"error": {"code": status, "status": "RESOURCE_EXHAUSTED", "message": message, **detail}}
        await JSONResponse(body, status_code=status)(scope, receive, send)

    async def _unreadable(self, scope: Scope, receive: Receive, send: Send, rpc: bool) -> None:
        if rpc:
            response = JSONResponse(build_error_response(None, JSONParseError(message=INVALID_JSON)))
        else:
            body = {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": INVALID_JSON}}
            response = JSONResponse(body, 400)
        await response(scope, receive, send)


    async def _nul(self, scope: Scope, receive: Receive, send: Send, rpc: bool, parsed: Any) -> None:
        if rpc:
            rpc_id = parsed.get("id") if isinstance(parsed, dict) else None
            error = InvalidParamsError("Invalid parameters", data={"errors": [{"field": "", "message": NUL_REFUSED}]})
            valid_id = rpc_id if isinstance(rpc_id, str | int) and not isinstance(rpc_id, bool) else None
            response = JSONResponse(build_error_response(valid_id, error))
        else:
            response = JSONResponse({"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": NUL_REFUSED}}, 400)
        await response(scope, receive, send)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body already read, then passes on what the server sends next (a
    disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
