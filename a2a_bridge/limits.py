"""Request limits in front of an agent's routes: the body's size, its JSON (valid UTF-8, not nested past what a
parser can read, nothing the stores cannot hold: `a2a_bridge.storable`), and the streams each principal holds open.
What a caller gets past each is in docs/security.md."""

import logging
from collections.abc import Callable
from typing import Any

from a2a.server.jsonrpc_models import JSONParseError
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import A2AError, InvalidRequestError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from a2a_bridge import errors
from a2a_bridge.auth import route_path
from a2a_bridge.config import Limits
from a2a_bridge.storable import NUL, Flaw, parse

log = logging.getLogger(__name__)

STREAM_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask"})
STREAM_SUFFIXES = ("/message:stream", ":subscribe", "/status/stream")
"""REST and bridge paths whose answer is a stream."""
INVALID_JSON = "Invalid JSON payload"
PARSED_BODY = "a2a_bridge.parsed_body"
"""The scope key under which `RequestLimits` leaves the body it parsed (None when empty or not JSON) for the app."""


class ClientGone(Exception):
    """The client disconnected before its body arrived whole."""


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


def nul_in_target(scope: Scope) -> bool:
    """Whether the request's path or query names U+0000 (as %00 or decoded). (`find`, not `in`: a bytes `in` first
    tries its operand as an integer, and raises and clears an error on every request.)"""
    return "\x00" in str(scope["path"]) or bytes(scope.get("query_string", b"")).find(b"%00") >= 0


class RequestLimits:
    """Refuses, before any route runs: a body over `max_body_bytes` (413), a body that is not UTF-8 or too deeply
    nested to parse (JSON-RPC -32700, otherwise 400), a U+0000 in the path or query and any value of the body the
    stores cannot hold (JSON-RPC -32602 naming the field, -32600 outside params, otherwise 400 naming the field),
    and a stream past the caller's `max_streams` (429). A client that leaves while sending its body gets nothing.
    Leaves the body it parsed in the scope (`PARSED_BODY`), so that the app behind need not parse it again."""

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
        try:
            body = await self._read(scope, receive)
        except ClientGone:
            return
        if body is None:
            await self._refuse(scope, receive, send, rpc, 413, "Request body too large", "max_body_bytes")
            return
        parsed: Any = None
        flaw: Flaw | None = None
        if body:
            parsed, unreadable, flaw = parse(body)
            if unreadable:
                await self._unreadable(scope, receive, send, rpc)
                return
        if nul_in_target(scope):
            flaw = Flaw("", NUL)
        if flaw is not None:
            await self._unholdable(scope, receive, send, rpc, parsed, flaw)
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
                raise ClientGone
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


    async def _unholdable(
        self, scope: Scope, receive: Receive, send: Send, rpc: bool, parsed: Any, flaw: Flaw
    ) -> None:
        """A body (or target) holding what the stores cannot hold: JSON-RPC -32602 naming the field under params
        (-32600 for the envelope, with a null id when the id is the flaw), otherwise 400 naming the field."""
        log.warning("refused a request: %s at %s", flaw.reason, flaw.path or "(the request)")
        if not rpc:
            payload = build_rest_error_payload(errors.invalid_field(flaw.path, flaw.reason))
            await JSONResponse(payload, 400)(scope, receive, send)
            return
        in_params = flaw.under("params")
        rpc_id = parsed.get("id") if isinstance(parsed, dict) and flaw.under("id") is None else None
        valid_id = rpc_id if isinstance(rpc_id, str | int) and not isinstance(rpc_id, bool) else None
        if in_params is not None:
            error: A2AError = errors.invalid_field(in_params, flaw.reason)
        else:
            error = InvalidRequestError(
                "Request payload validation error", data={"field": flaw.path, "reason": flaw.reason}
            )
        await JSONResponse(build_error_response(valid_id, error))(scope, receive, send)


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
