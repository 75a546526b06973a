"""Request limits in front of an agent's routes: the body's size, its JSON (valid UTF-8, not nested past what a
parser can read, nothing the stores cannot hold: `a2a_bridge.store.storable`), and what each principal holds and does: the
streams and long polls it holds open, the tasks it starts a minute, the bytes its tasks hold in the store
(`a2a_bridge.store.stored_bytes`). What a caller gets past each is in docs/security.md."""

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from a2a.server.jsonrpc_models import JSONParseError
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import A2AError, InvalidRequestError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from a2a_bridge.core import errors
from a2a_bridge.core.auth import route_path
from a2a_bridge.core.config import Limits
from a2a_bridge.http.request_body import ClientGone, body_message, read_body, replayed
from a2a_bridge.store.ledger import MemoryLedger
from a2a_bridge.store.stored_bytes import StoredBytes
from a2a_bridge.store.storable import NUL, Flaw, parse

log = logging.getLogger(__name__)

STREAM_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask"})
STREAM_SUFFIXES = ("/message:stream", ":subscribe", "/status/stream")
"""REST and bridge paths whose answer is a stream."""
SEND_METHODS = frozenset({"SendMessage", "SendStreamingMessage"})
SEND_SUFFIXES = ("/message:send", "/message:stream")
"""REST paths that send a message."""
STATUS_SUFFIX = "/status"
STREAM = "stream"
WAIT = "wait"
"""The kinds of connection a principal holds open, each counted against its own limit."""
WINDOW = 60.0
"""Seconds over which `max_tasks_per_minute` counts."""
STORED_REFUSAL = ("Too many bytes stored", "max_stored_bytes")
RATE_REFUSAL = ("Too many tasks started in the last minute", "max_tasks_per_minute")
"""A refused send's message and the limit it names."""
INVALID_JSON = "Invalid JSON payload"
PARSED_BODY = "a2a_bridge.parsed_body"
"""The scope key under which `RequestLimits` leaves the body it parsed (None when empty or not JSON) for the app."""


class StreamSlots:
    """What each principal holds and does, shared by every agent of a bridge (and by its bindings): streams and long
    polls open and messages that may start a task in the last minute (in this process), bytes its tasks hold in the
    store (`stored`, read from the store every replica shares)."""

    def __init__(self, limit: int, stored: StoredBytes | None = None) -> None:
        self.limit = limit
        """`max_streams`; other kinds name their limit when they take a slot."""
        self.stored = stored if stored is not None else StoredBytes(MemoryLedger())
        self._open: dict[tuple[str, str], int] = {}
        self._starts: dict[str, deque[float]] = {}

    def take(self, who: str, kind: str = STREAM, limit: int = 0) -> bool:
        """Count one more open connection of `kind` for `who`; False (and nothing counted) at the limit (`limit`, or
        `max_streams` when 0)."""
        key = (kind, who)
        held = self._open.get(key, 0)
        if held >= (limit or self.limit):
            return False
        self._open[key] = held + 1
        return True

    def give(self, who: str, kind: str = STREAM) -> None:
        key = (kind, who)
        held = self._open.get(key, 0) - 1
        if held > 0:
            self._open[key] = held
        else:
            self._open.pop(key, None)

    def start(self, who: str, limit: int, now: float) -> bool:
        """Count a message that may start a task; False (and nothing counted) when `who` sent `limit` of them in the
        last `WINDOW` seconds."""
        starts = self._starts.setdefault(who, deque())
        while starts and starts[0] <= now - WINDOW:
            starts.popleft()
        if len(starts) >= limit:
            return False
        starts.append(now)
        return True

    async def admit(self, who: str, starts: bool, size: int, limits: Limits) -> tuple[str, str] | None:
        """Count a message of `size` bytes `who` sends (`starts`: it may start a task), or the refusal's message and
        limit (nothing counted) when its bytes would take `who`'s stored bytes past `max_stored_bytes`, or when it
        may start a task past `max_tasks_per_minute`."""
        if await self.stored.total(who) + size > limits.max_stored_bytes:
            return STORED_REFUSAL
        if starts and not self.start(who, limits.max_tasks_per_minute, time.monotonic()):
            return RATE_REFUSAL
        self.stored.add(who, size)
        return None


def starts_task(parsed: Any, rpc: bool) -> bool:
    """Whether a send's message names no taskId, so that it may start a task."""
    params = parsed.get("params") if rpc and isinstance(parsed, dict) else parsed
    message = params.get("message") if isinstance(params, dict) else None
    return not (isinstance(message, dict) and (message.get("taskId") or message.get("task_id")))


def long_poll(scope: Scope, path: str) -> bool:
    """Whether a request is a Task Status poll that waits (`?wait=S`, S above 0, as the endpoint reads the last)."""
    if scope["method"] != "GET" or not path.endswith(STATUS_SUFFIX):
        return False
    waits = [value for name, value in parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1")) if name == "wait"]
    if not waits:
        return False
    try:
        return float(waits[-1]) > 0
    except ValueError:
        return False


def nul_in_target(scope: Scope) -> bool:
    """Whether the request's path or query names U+0000 (as %00 or decoded). (`find`, not `in`: a bytes `in` first
    tries its operand as an integer, and raises and clears an error on every request.)"""
    return "\x00" in str(scope["path"]) or bytes(scope.get("query_string", b"")).find(b"%00") >= 0


class RequestLimits:
    """Refuses, before any route runs: a body over `max_body_bytes` (413), a body that is not UTF-8 or too deeply
    nested to parse (JSON-RPC -32700, otherwise 400), a U+0000 in the path or query and any value of the body the
    stores cannot hold (JSON-RPC -32602 naming the field, -32600 outside params, otherwise 400 naming the field),
    a stream past the caller's `max_streams`, a long poll past its `max_waits`, a message that may start a task past
    its `max_tasks_per_minute` and one whose bytes would take what its tasks hold past its `max_stored_bytes` (429;
    JSON-RPC -32600 naming the limit). A client that leaves while sending its body gets nothing.
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
        sending = (isinstance(method, str) and method in SEND_METHODS) or (
            not rpc and scope["method"] == "POST" and path.endswith(SEND_SUFFIXES)
        )
        kind = STREAM if streaming else WAIT if long_poll(scope, path) else ""
        scope[PARSED_BODY] = parsed
        replay = replayed([body_message(body)], receive)
        if not kind and not sending:
            await self.app(scope, replay, send)
            return
        who = self.principal(scope)
        if sending:
            over = await self.slots.admit(who, starts_task(parsed, rpc), len(body), self.limits)
            if over is not None:
                await self._refuse(scope, receive, send, rpc, 429, over[0], over[1])
                return
        if not kind:
            await self.app(scope, replay, send)
            return
        if not self.slots.take(who, kind, self.limits.max_waits if kind == WAIT else 0):
            if kind == WAIT:
                await self._refuse(scope, receive, send, rpc, 429, "Too many open long polls", "max_waits")
            else:
                await self._refuse(scope, receive, send, rpc, 429, "Too many open streams", "max_streams")
            return
        try:
            await self.app(scope, replay, send)
        finally:
            self.slots.give(who, kind)

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
        return (await read_body(receive, limit))[1]

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, rpc: bool, status: int, message: str, limit: str
    ) -> None:
        detail = {"limit": limit, "max": getattr(self.limits, limit)}
        log.warning("refused a request past %s (%s)", limit, detail["max"])
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
